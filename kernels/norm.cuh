/*
kernels/norm.cuh: the squared L2 norm of a buffer, for gradient clipping.

The sum is split into NORM_PARTS fixed pieces, each summed on the device, and the
pieces are added on the host in double, in order. The result does not depend on
thread scheduling, so a run and its resume see the same norm bit for bit. The
caller adds the local results of several buffers or ranks.
*/
#pragma once
// defines: global_norm_squared, NORM_PARTS
#include "common.cuh"

#define NORM_PARTS 1024

// host twin: part p sums elements [p*chunk, (p+1)*chunk)
inline void norm_partials_host(float* partials, const floatX* x, size_t n) {
    size_t chunk = ceil_div(n, NORM_PARTS);
    #pragma omp parallel for
    for (int p = 0; p < NORM_PARTS; p++) {
        float sum = 0.0f;
        for (size_t i = p * chunk; i < n && i < (p + 1) * chunk; i++) sum += to_float(x[i]) * to_float(x[i]);
        partials[p] = sum;
    }
}

#ifdef __CUDACC__
// block p sums the elements i with i % NORM_PARTS*256 in its range (grid-stride), then reduces in shared memory
__global__ void norm_partials_kernel(float* partials, const floatX* x, size_t n) {
    __shared__ float shared[256];
    float sum = 0.0f;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        sum += to_float(x[i]) * to_float(x[i]);
    shared[threadIdx.x] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
        if (threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) partials[blockIdx.x] = shared[0];
}
inline void norm_partials(float* partials, const floatX* x, size_t n) {
    norm_partials_kernel<<<NORM_PARTS, 256>>>(partials, x, n);
    launchCheck();
}
#else
inline void norm_partials(float* partials, const floatX* x, size_t n) { norm_partials_host(partials, x, n); }
#endif

// scratch: NORM_PARTS floats of device memory
inline double global_norm_squared(const floatX* x, size_t n, float* scratch) {
    float partials[NORM_PARTS];
    norm_partials(scratch, x, n);
    device_to_host(partials, scratch, sizeof(partials));
    double total = 0.0;
    for (int p = 0; p < NORM_PARTS; p++) total += partials[p];
    return total;
}

/*
kernels/gradients.cuh: operations on a whole gradient buffer.

global_norm_squared: the squared L2 norm, for clipping and, since one non-finite
element makes it non-finite, also the overflow check of loss scaling: one pass does
both. The sum is split into NORM_PARTS fixed pieces, each summed on the device, and
the pieces are added on the host in double, in order, so the result does not depend
on thread scheduling and a resumed run sees the same norm bit for bit.

gradient_accumulate: acc += g; g = 0, with acc fp32 or floatX. With -ga fp32 each
micro-step's floatX gradients are folded into an fp32 buffer, so a long accumulation
does not round in bf16 at every micro-step; ZeRO-2/3 fold each reduce-scattered unit
shard into the step's gradient shard this way.
*/
#pragma once
// defines: global_norm_squared, global_norm_squared_ranges, gradient_accumulate, NORM_PARTS, accumulate_element,
//          gradient_accumulate_host, gradient_accumulate_kernel, norm_partials, norm_partials_host,
//          norm_partials_kernel, norm_partials_ledger
#include <algorithm>    // defines: std::min
#include <type_traits>  // defines: std::is_same
#include <vector>       // defines: std::vector
#include "common.cuh"

#define NORM_PARTS 1024

// host twin: part p sums elements [p*chunk, (p+1)*chunk)
template <typename T>
inline void norm_partials_host(float* partials, const T* x, size_t n) {
    size_t chunk = ceil_div(n, NORM_PARTS);
    #pragma omp parallel for
    for (int p = 0; p < NORM_PARTS; p++) {
        float sum = 0.0f;
        size_t end = std::min(n, (p + 1) * chunk);
        #pragma omp simd reduction(+ : sum)  // in SIMD lanes, then the lanes: a fixed order all the same
        for (size_t i = p * chunk; i < end; i++) sum += to_float(x[i]) * to_float(x[i]);
        partials[p] = sum;
    }
}

// acc[i] = acc[i] + g[i] in fp32, stored back as Acc (float, or floatX: rounded once)
template <typename Acc>
HOST_DEVICE inline void accumulate_element(Acc* acc, floatX* g, size_t i) {
    float sum = to_float(acc[i]) + to_float(g[i]);
    if constexpr (std::is_same<Acc, float>::value) acc[i] = sum; else acc[i] = from_float(sum);
    g[i] = from_float(0.0f);
}

template <typename Acc>
inline void gradient_accumulate_host(Acc* acc, floatX* g, size_t n) {
    #pragma omp parallel for
    for (size_t i = 0; i < n; i++) accumulate_element(acc, g, i);
}

// the kernel ledger (ledger.cuh) of norm_partials (global_norm_squared): n values of `value_bytes` each
inline void norm_partials_ledger(Ledger* l, size_t n, size_t value_bytes) {
    ledger_add(l, {"norm_partials_kernel<T>", 2.0 * n, (double)n * value_bytes, 4.0 * NORM_PARTS, 0});
}

#ifdef __CUDACC__
// block p sums a grid-strided set of elements, then reduces in shared memory
template <typename T>
__global__ void norm_partials_kernel(float* partials, const T* x, size_t n) {
    __shared__ float shared[256];
    float sum = 0.0f;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        sum += to_float(x[i]) * to_float(x[i]);
    shared[threadIdx.x] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
        if ((int)threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) partials[blockIdx.x] = shared[0];
}
template <typename Acc>
__global__ void gradient_accumulate_kernel(Acc* acc, floatX* g, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) accumulate_element(acc, g, i);
}
template <typename T>
inline void norm_partials(float* partials, const T* x, size_t n) {
    norm_partials_kernel<T><<<NORM_PARTS, 256>>>(partials, x, n);
    launchCheck();
}
// (on `stream`: overlap.h's communication stream adds a reduced unit there)
template <typename Acc>
inline void gradient_accumulate(Acc* acc, floatX* g, size_t n, Stream stream = 0) {
    if (n == 0) return;  // a grid of 0 blocks is a launch error: a unit empty on this stage (pp x ZeRO-2/3)
    gradient_accumulate_kernel<Acc><<<ceil_div(n, 256), 256, 0, stream>>>(acc, g, n);
    launchCheck();
}
#else
template <typename T>
inline void norm_partials(float* partials, const T* x, size_t n) { norm_partials_host(partials, x, n); }
template <typename Acc>
inline void gradient_accumulate(Acc* acc, floatX* g, size_t n, Stream = nullptr) {
    gradient_accumulate_host(acc, g, n);
}
#endif

// the squared norms of `count` ranges of x, [lo[r], hi[r]), summed in order; scratch: count * NORM_PARTS
// floats of device memory, range r's partials at r * NORM_PARTS, read in one copy: one host wait
// however many ranges (a TP rank skips the tensors another rank counts). T is floatX or float
template <typename T>
inline double global_norm_squared_ranges(const T* x, const size_t* lo, const size_t* hi, int count, float* scratch) {
    std::vector<float> partials((size_t)count * NORM_PARTS);
    for (int r = 0; r < count; r++) norm_partials(scratch + (size_t)r * NORM_PARTS, x + lo[r], hi[r] - lo[r]);
    device_to_host(partials.data(), scratch, partials.size() * sizeof(float));
    double sum = 0.0;
    for (int r = 0; r < count; r++) {
        double total = 0.0;
        for (int p = 0; p < NORM_PARTS; p++) total += partials[(size_t)r * NORM_PARTS + p];
        sum += total;
    }
    return sum;
}
// one range: scratch holds NORM_PARTS floats
template <typename T>
inline double global_norm_squared(const T* x, size_t n, float* scratch) {
    size_t lo = 0;
    return global_norm_squared_ranges(x, &lo, &n, 1, scratch);
}

/*
kernels/gelu.cuh: GPT-2's tanh approximation of GELU, and the residual add.

    gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))

The scalar math is one __host__ __device__ function per direction, shared by the
host twin and the kernel, so the two builds cannot drift apart.
*/
#pragma once
// defines: gelu_forward, gelu_backward, residual_forward,
//          GELU_SCALE, gelu_backward_host, gelu_backward_kernel, gelu_derivative, gelu_forward_host,
//          gelu_forward_kernel, gelu_value, residual_forward_host, residual_forward_kernel
#include <math.h>  // defines: tanhf, coshf
#include "common.cuh"

#define GELU_SCALE 0.7978845608028654f  // sqrt(2/pi)

HOST_DEVICE inline float gelu_value(float x) {
    return 0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + 0.044715f * x * x * x)));
}
HOST_DEVICE inline float gelu_derivative(float x) {
    float u = GELU_SCALE * (x + 0.044715f * x * x * x);
    float th = tanhf(u);
    float sech2 = 1.0f - th * th;
    return 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
}

inline void gelu_forward_host(floatX* out, const floatX* inp, size_t n) {
    #pragma omp parallel for
    for (size_t i = 0; i < n; i++) out[i] = from_float(gelu_value(to_float(inp[i])));
}
// dinp may alias dout: each element is read before it is written
inline void gelu_backward_host(floatX* dinp, const floatX* inp, const floatX* dout, size_t n) {
    #pragma omp parallel for
    for (size_t i = 0; i < n; i++) dinp[i] = from_float(gelu_derivative(to_float(inp[i])) * to_float(dout[i]));
}
inline void residual_forward_host(floatX* out, const floatX* a, const floatX* b, size_t n) {
    #pragma omp parallel for
    for (size_t i = 0; i < n; i++) out[i] = from_float(to_float(a[i]) + to_float(b[i]));
}

#ifdef __CUDACC__
__global__ void gelu_forward_kernel(floatX* out, const floatX* inp, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = from_float(gelu_value(to_float(inp[i])));
}
__global__ void gelu_backward_kernel(floatX* dinp, const floatX* inp, const floatX* dout, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dinp[i] = from_float(gelu_derivative(to_float(inp[i])) * to_float(dout[i]));
}
__global__ void residual_forward_kernel(floatX* out, const floatX* a, const floatX* b, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = from_float(to_float(a[i]) + to_float(b[i]));
}
inline void gelu_forward(floatX* out, const floatX* inp, size_t n) {
    if (n == 0) return;  // a grid of 0 blocks is a launch error (so in every launcher below)
    gelu_forward_kernel<<<ceil_div(n, 256), 256>>>(out, inp, n);
    launchCheck();
}
inline void gelu_backward(floatX* dinp, const floatX* inp, const floatX* dout, size_t n) {
    if (n == 0) return;
    gelu_backward_kernel<<<ceil_div(n, 256), 256>>>(dinp, inp, dout, n);
    launchCheck();
}
inline void residual_forward(floatX* out, const floatX* a, const floatX* b, size_t n) {
    if (n == 0) return;
    residual_forward_kernel<<<ceil_div(n, 256), 256>>>(out, a, b, n);
    launchCheck();
}
#else
inline void gelu_forward(floatX* out, const floatX* inp, size_t n) { gelu_forward_host(out, inp, n); }
inline void gelu_backward(floatX* dinp, const floatX* inp, const floatX* dout, size_t n) { gelu_backward_host(dinp, inp, dout, n); }
inline void residual_forward(floatX* out, const floatX* a, const floatX* b, size_t n) { residual_forward_host(out, a, b, n); }
#endif

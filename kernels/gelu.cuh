/*
kernels/gelu.cuh: GPT-2's tanh approximation of GELU, and the residual add.

    gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))

The scalar math is one __host__ __device__ function per direction, shared by the
host twin and the kernel, so the two builds cannot drift apart.
*/
#pragma once
// defines: gelu_forward, gelu_backward, residual_forward, GELU_SCALE, gelu_backward_host, gelu_backward_kernel,
//          gelu_derivative, gelu_forward_host, gelu_forward_kernel, gelu_value, residual_forward_host,
//          residual_forward_kernel, gelu_forward_kernel128, gelu_backward_kernel128, residual_forward_kernel128,
//          gelu_backward_ledger, gelu_forward_ledger, residual_forward_ledger
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

// the kernel ledger (ledger.cuh) of the launchers below; gelu_backward in place (dinp == dout) as the trainer calls it
inline void gelu_forward_ledger(Ledger* l, size_t n) {
    ledger_add(l, {packs_divide(n) ? "gelu_forward_kernel128" : "gelu_forward_kernel", 20.0 * n,
                   (double)n * sizeof(floatX), (double)n * sizeof(floatX), 0});
}
inline void gelu_backward_ledger(Ledger* l, size_t n) {
    ledger_add(l, {packs_divide(n) ? "gelu_backward_kernel128" : "gelu_backward_kernel", 25.0 * n,
                   (double)n * sizeof(floatX), 0, (double)n * sizeof(floatX)});
}
inline void residual_forward_ledger(Ledger* l, size_t n) {
    ledger_add(l, {packs_divide(n) ? "residual_forward_kernel128" : "residual_forward_kernel", (double)n,
                   2.0 * n * sizeof(floatX), (double)n * sizeof(floatX), 0});
}

#ifdef __CUDACC__
// a thread an element: any n, any alignment
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
// a thread a 16-byte pack (Packed128: 8 bf16 or 4 fp32 values): n a multiple of the pack, every
// array 16-byte aligned. On an H200 at GPT-2's fc at B 8, T 1024 (25M values) the forward took 72 us
// a call with a value a thread, 30 us with these (docs/gpu.md)
__global__ void gelu_forward_kernel128(floatX* out, const floatX* inp, size_t n) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * Packed128<floatX>::size;
    if (i >= n) return;
    Packed128<floatX> x = load128(inp + i), y;
    for (int k = 0; k < Packed128<floatX>::size; k++) y.v[k] = from_float(gelu_value(to_float(x.v[k])));
    store128(out + i, y);
}
__global__ void gelu_backward_kernel128(floatX* dinp, const floatX* inp, const floatX* dout, size_t n) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * Packed128<floatX>::size;
    if (i >= n) return;
    Packed128<floatX> x = load128(inp + i), dy = load128(dout + i), dx;
    for (int k = 0; k < Packed128<floatX>::size; k++)
        dx.v[k] = from_float(gelu_derivative(to_float(x.v[k])) * to_float(dy.v[k]));
    store128(dinp + i, dx);
}
__global__ void residual_forward_kernel128(floatX* out, const floatX* a, const floatX* b, size_t n) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * Packed128<floatX>::size;
    if (i >= n) return;
    Packed128<floatX> x = load128(a + i), y = load128(b + i), z;
    for (int k = 0; k < Packed128<floatX>::size; k++) z.v[k] = from_float(to_float(x.v[k]) + to_float(y.v[k]));
    store128(out + i, z);
}
inline void gelu_forward(floatX* out, const floatX* inp, size_t n) {
    if (n == 0) return;  // a grid of 0 blocks is a launch error (so in every launcher below)
    if (packs_fit(n, {out, inp}))
        gelu_forward_kernel128<<<ceil_div(n / Packed128<floatX>::size, 256), 256>>>(out, inp, n);
    else gelu_forward_kernel<<<ceil_div(n, 256), 256>>>(out, inp, n);
    launchCheck();
}
inline void gelu_backward(floatX* dinp, const floatX* inp, const floatX* dout, size_t n) {
    if (n == 0) return;
    if (packs_fit(n, {dinp, inp, dout}))
        gelu_backward_kernel128<<<ceil_div(n / Packed128<floatX>::size, 256), 256>>>(dinp, inp, dout, n);
    else gelu_backward_kernel<<<ceil_div(n, 256), 256>>>(dinp, inp, dout, n);
    launchCheck();
}
inline void residual_forward(floatX* out, const floatX* a, const floatX* b, size_t n) {
    if (n == 0) return;
    if (packs_fit(n, {out, a, b}))
        residual_forward_kernel128<<<ceil_div(n / Packed128<floatX>::size, 256), 256>>>(out, a, b, n);
    else residual_forward_kernel<<<ceil_div(n, 256), 256>>>(out, a, b, n);
    launchCheck();
}
#else
inline void gelu_forward(floatX* out, const floatX* inp, size_t n) { gelu_forward_host(out, inp, n); }
inline void gelu_backward(floatX* dinp, const floatX* inp, const floatX* dout, size_t n) {
    gelu_backward_host(dinp, inp, dout, n);
}
inline void residual_forward(floatX* out, const floatX* a, const floatX* b, size_t n) {
    residual_forward_host(out, a, b, n);
}
#endif

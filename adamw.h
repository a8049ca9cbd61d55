/*
adamw.h: the AdamW optimizer, exactly as PyTorch's torch.optim.AdamW computes it.

    m = b1 m + (1 - b1) g              v = b2 v + (1 - b2) g^2
    p = p (1 - lr wd) - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)

g is the gradient times grad_scale (the clip factor, later also 1/loss_scale), so
clipping costs no extra pass. Memory: m and v are fp32, 8 bytes per parameter
(plus a 4-byte fp32 master copy when parameters are stored in lower precision:
the "16 bytes per parameter" of mixed-precision training, with 2+2 for bf16
parameters and gradients). Weight decay is applied per tensor by the caller: to
the 2-D matrices only (DESIGN). Read adamw_element first: the kernel and the host
loop both call it, so they compute the same thing.
*/
#pragma once
// defines: AdamWConfig, adamw_element, adamw_update
#include <math.h>  // defines: sqrtf, powf
#include "kernels/common.cuh"

struct AdamWConfig {
    float lr, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay;
};

// one parameter: updates p, m, v in place; returns the new parameter value
HOST_DEVICE inline float adamw_element(float p, float g, float* m, float* v, float lr, float beta1, float beta2,
                                       float eps, float weight_decay, float bias_correction1, float bias_correction2) {
    *m = beta1 * *m + (1.0f - beta1) * g;
    *v = beta2 * *v + (1.0f - beta2) * g * g;
    float denom = sqrtf(*v) / sqrtf(bias_correction2) + eps;
    return p * (1.0f - lr * weight_decay) - (lr / bias_correction1) * (*m / denom);
}

inline void adamw_update_host(floatX* params, const floatX* grads, float* m, float* v, size_t n, AdamWConfig c,
                              float bc1, float bc2, float grad_scale) {
    #pragma omp parallel for
    for (size_t i = 0; i < n; i++) {
        float g = to_float(grads[i]) * grad_scale;
        params[i] = from_float(adamw_element(to_float(params[i]), g, &m[i], &v[i], c.lr, c.beta1, c.beta2, c.eps,
                                             c.weight_decay, bc1, bc2));
    }
}

#ifdef __CUDACC__
__global__ void adamw_kernel(floatX* params, const floatX* grads, float* m, float* v, size_t n, AdamWConfig c,
                             float bc1, float bc2, float grad_scale) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float g = to_float(grads[i]) * grad_scale;
    params[i] = from_float(adamw_element(to_float(params[i]), g, &m[i], &v[i], c.lr, c.beta1, c.beta2, c.eps,
                                         c.weight_decay, bc1, bc2));
}
#endif

// t: the optimizer step, counting from 1 (bias correction)
inline void adamw_update(floatX* params, const floatX* grads, float* m, float* v, size_t n, AdamWConfig c, int t,
                         float grad_scale) {
    float bc1 = 1.0f - powf(c.beta1, (float)t);
    float bc2 = 1.0f - powf(c.beta2, (float)t);
#ifdef __CUDACC__
    adamw_kernel<<<ceil_div(n, 256), 256>>>(params, grads, m, v, n, c, bc1, bc2, grad_scale);
    launchCheck();
#else
    adamw_update_host(params, grads, m, v, n, c, bc1, bc2, grad_scale);
#endif
}

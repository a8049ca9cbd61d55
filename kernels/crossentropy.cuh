/*
kernels/crossentropy.cuh: fused softmax + cross-entropy + its gradient, over the
first V of the Vp logit columns (Vp pads GPT-2's 50257 to 50304 for fast GEMMs).

    loss[i]     = log(sum_{j<V} exp(z_ij)) - z_i,target
    dlogits[ij] = (softmax(z_i)_j - [j == target]) * dloss      for j < V
                = 0                                             for V <= j < Vp

The gradient overwrites the logits in place: the (N,Vp) logits are the largest
activation of a small GPT, and nothing needs them after the loss. dloss is the
gradient of the step's loss with respect to one token's loss: 1 / (tokens in the
whole step), so micro-steps and ranks sum to the mean. dloss = 0 computes the loss
only (validation, sampling). Statistics are fp32 whatever floatX is.
*/
#pragma once
// defines: crossentropy_forward_backward
#include <math.h>  // defines: expf, logf
#include "common.cuh"

inline void crossentropy_forward_backward_host(floatX* logits,      // (N,Vp) in: logits, out: dlogits if dloss != 0
                                               float* losses,       // (N)
                                               const int* targets,  // (N)
                                               int N, int V, int Vp, float dloss) {
    #pragma omp parallel for
    for (int i = 0; i < N; i++) {
        floatX* z = logits + (size_t)i * Vp;
        float maxval = -INFINITY;
        for (int j = 0; j < V; j++) maxval = fmaxf(maxval, to_float(z[j]));
        float sum = 0.0f;
        for (int j = 0; j < V; j++) sum += expf(to_float(z[j]) - maxval);
        losses[i] = logf(sum) + maxval - to_float(z[targets[i]]);
        if (dloss == 0.0f) continue;
        for (int j = 0; j < Vp; j++) {
            float p = j < V ? expf(to_float(z[j]) - maxval) / sum : 0.0f;
            float indicator = j == targets[i] ? 1.0f : 0.0f;
            z[j] = from_float(j < V ? (p - indicator) * dloss : 0.0f);
        }
    }
}

#ifdef __CUDACC__
__device__ inline float block_reduce(float v, bool is_max) {  // blockDim.x a multiple of 32, <= 1024
    __shared__ float shared[32];
    for (int o = 16; o > 0; o /= 2) { float u = __shfl_xor_sync(0xffffffff, v, o); v = is_max ? fmaxf(v, u) : v + u; }
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
    __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = lane < warps ? shared[lane] : (is_max ? -INFINITY : 0.0f);
    for (int o = 16; o > 0; o /= 2) { float u = __shfl_xor_sync(0xffffffff, v, o); v = is_max ? fmaxf(v, u) : v + u; }
    return v;
}
// one block per row
__global__ void crossentropy_kernel(floatX* logits, float* losses, const int* targets, int V, int Vp, float dloss) {
    floatX* z = logits + (size_t)blockIdx.x * Vp;
    float maxval = -INFINITY;
    for (int j = threadIdx.x; j < V; j += blockDim.x) maxval = fmaxf(maxval, to_float(z[j]));
    maxval = block_reduce(maxval, true);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < V; j += blockDim.x) sum += expf(to_float(z[j]) - maxval);
    sum = block_reduce(sum, false);
    int target = targets[blockIdx.x];
    if (threadIdx.x == 0) losses[blockIdx.x] = logf(sum) + maxval - to_float(z[target]);
    __syncthreads();  // the target logit is read above before any thread overwrites it
    if (dloss == 0.0f) return;
    for (int j = threadIdx.x; j < Vp; j += blockDim.x) {
        float p = j < V ? expf(to_float(z[j]) - maxval) / sum : 0.0f;
        z[j] = from_float(j < V ? (p - (j == target ? 1.0f : 0.0f)) * dloss : 0.0f);
    }
}
inline void crossentropy_forward_backward(floatX* logits, float* losses, const int* targets, int N, int V, int Vp, float dloss) {
    crossentropy_kernel<<<N, 512>>>(logits, losses, targets, V, Vp, dloss);
    launchCheck();
}
#else
inline void crossentropy_forward_backward(floatX* logits, float* losses, const int* targets, int N, int V, int Vp, float dloss) {
    crossentropy_forward_backward_host(logits, losses, targets, N, V, Vp, dloss);
}
#endif

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

One rank (tp = 1) runs it fused: crossentropy_forward_backward, on the GPU one kernel that reads
each row twice and writes it once (an online softmax, then the gradient). Under tensor
parallelism (tp.h) the trainer uses the same computation in four pieces, so that each rank
holds only its Vp/tp logit columns [vocab_begin, vocab_begin + cols) and three per-row numbers
are all-reduced between the pieces:
    crossentropy_row_max         m_i = max over the rank's columns j < V
    crossentropy_row_sumexp      s_i = sum over them of exp(z_ij - m_i)   (m_i: the global max)
    crossentropy_target_logit    t_i = z_i,target if this rank holds it, else 0
    crossentropy_finish          loss_i = log(s_i) + m_i - t_i, and dlogits as above
The host twin (a plain loop per row) is the reference the tests check the fused kernel and the
pieces against; the CPU build's fused op runs the pieces' vectorised loops row by row.
*/
#pragma once
// defines: crossentropy_forward_backward_host, crossentropy_forward_backward, crossentropy_fused_kernel,
//          merge_softmax_state, row_max_host, row_sumexp_host, crossentropy_row_max, crossentropy_row_sumexp,
//          crossentropy_target_logit, crossentropy_finish, block_reduce, crossentropy_finish_host,
//          crossentropy_finish_kernel, crossentropy_forward_backward_row, crossentropy_gradient,
//          crossentropy_row_max_host, crossentropy_row_max_kernel, crossentropy_row_sumexp_host,
//          crossentropy_row_sumexp_kernel, crossentropy_target_logit_host, crossentropy_target_logit_kernel,
//          target_logit_of_row, crossentropy_fused_kernel128, block_merge_softmax_state,
//          crossentropy_forward_backward_ledger
#include <math.h>  // defines: expf, logf
#include "common.cuh"

// element j of row i: the loss gradient (p - [target]) * dloss, zero on padded columns
HOST_DEVICE inline floatX crossentropy_gradient(float z, int j, int target_j, int valid, float maxval, float sum,
                                                float dloss) {
    float p = expf(j < valid ? z - maxval : -INFINITY) / sum;  // exp(-inf) = 0: no branch around the call (SIMD)
    return from_float(j < valid ? (p - (j == target_j ? 1.0f : 0.0f)) * dloss : 0.0f);
}
// row i of the fused op: the host twin's loop body, and the kernel of dev/crossentropy.cu's
// version 1 (a thread per row)
HOST_DEVICE inline void crossentropy_forward_backward_row(int i, floatX* logits, float* losses, const int* targets,
                                                          int V, int Vp, float dloss) {
    floatX* z = logits + (size_t)i * Vp;
    float maxval = -INFINITY;
    for (int j = 0; j < V; j++) maxval = fmaxf(maxval, to_float(z[j]));
    float sum = 0.0f;
    for (int j = 0; j < V; j++) sum += expf(to_float(z[j]) - maxval);
    losses[i] = logf(sum) + maxval - to_float(z[targets[i]]);
    if (dloss == 0.0f) return;
    for (int j = 0; j < Vp; j++) z[j] = crossentropy_gradient(to_float(z[j]), j, targets[i], V, maxval, sum, dloss);
}
inline void crossentropy_forward_backward_host(floatX* logits,      // (N,Vp) in: logits, out: dlogits if dloss != 0
                                               float* losses,       // (N)
                                               const int* targets,  // (N)
                                               int N, int V, int Vp, float dloss) {
    #pragma omp parallel for
    for (int i = 0; i < N; i++) crossentropy_forward_backward_row(i, logits, losses, targets, V, Vp, dloss);
}

// ---------------------------------------------------------------- the four pieces
// logits (N,cols): this rank's columns, global index vocab_begin + j; valid: how many
// of them are real vocabulary (< V); the rest are padding and get zero gradient

// one row's max, and its sum of exp(z - max), over its first `valid` columns: vectorised (a fixed
// order: the lanes, then across them). The pieces' host loops and the CPU build's fused op both use them
inline float row_max_host(const floatX* z, int valid) {
    float maxval = -INFINITY;
    #pragma omp simd reduction(max : maxval)
    for (int j = 0; j < valid; j++) maxval = fmaxf(maxval, to_float(z[j]));
    return maxval;
}
inline float row_sumexp_host(const floatX* z, float maxval, int valid) {
    float sum = 0.0f;
    #pragma omp simd reduction(+ : sum)
    for (int j = 0; j < valid; j++) sum += expf(to_float(z[j]) - maxval);
    return sum;
}
inline void crossentropy_row_max_host(float* maxes, const floatX* logits, int N, int cols, int valid) {
    #pragma omp parallel for
    for (int i = 0; i < N; i++) maxes[i] = row_max_host(logits + (size_t)i * cols, valid);
}
inline void crossentropy_row_sumexp_host(float* sums, const floatX* logits, const float* maxes, int N, int cols,
                                         int valid) {
#pragma omp parallel for
    for (int i = 0; i < N; i++) sums[i] = row_sumexp_host(logits + (size_t)i * cols, maxes[i], valid);
}
HOST_DEVICE inline float target_logit_of_row(const floatX* logits, const int* targets, int i, int cols,
                                             int vocab_begin) {
    int j = targets[i] - vocab_begin;
    return j >= 0 && j < cols ? to_float(logits[(size_t)i * cols + j]) : 0.0f;
}
inline void crossentropy_target_logit_host(float* target_logits, const floatX* logits, const int* targets, int N,
                                           int cols, int vocab_begin) {
    for (int i = 0; i < N; i++) target_logits[i] = target_logit_of_row(logits, targets, i, cols, vocab_begin);
}
inline void crossentropy_finish_host(floatX* logits, float* losses, const int* targets, const float* maxes,
                                     const float* sums, const float* target_logits, int N, int cols, int vocab_begin,
                                     int valid, float dloss) {
    #pragma omp parallel for
    for (int i = 0; i < N; i++) {
        losses[i] = logf(sums[i]) + maxes[i] - target_logits[i];
        if (dloss == 0.0f) continue;
        floatX* z = logits + (size_t)i * cols;
        for (int j = 0; j < cols; j++)
            z[j] = crossentropy_gradient(to_float(z[j]), j, targets[i] - vocab_begin, valid, maxes[i], sums[i], dloss);
    }
}

// the kernel ledger (ledger.cuh) of crossentropy_forward_backward (one rank holds every logit):
// with dloss != 0 each row of logits becomes its gradient in place, else it is only read
inline void crossentropy_forward_backward_ledger(Ledger* l, size_t N, size_t Vp, bool backward) {
    double logits = (double)N * Vp * sizeof(floatX);
    ledger_add(l, {packs_divide(Vp) ? "crossentropy_fused_kernel128" : "crossentropy_fused_kernel", 6.0 * N * Vp,
                   4.0 * N + (backward ? 0 : logits), 4.0 * N, backward ? logits : 0});
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
// the pieces: one block per row for the row reductions and the gradient
__global__ void crossentropy_row_max_kernel(float* maxes, const floatX* logits, int cols, int valid) {
    const floatX* z = logits + (size_t)blockIdx.x * cols;
    float maxval = -INFINITY;
    for (int j = threadIdx.x; j < valid; j += blockDim.x) maxval = fmaxf(maxval, to_float(z[j]));
    maxval = block_reduce(maxval, true);
    if (threadIdx.x == 0) maxes[blockIdx.x] = maxval;
}
__global__ void crossentropy_row_sumexp_kernel(float* sums, const floatX* logits, const float* maxes, int cols,
                                               int valid) {
    const floatX* z = logits + (size_t)blockIdx.x * cols;
    float sum = 0.0f;
    for (int j = threadIdx.x; j < valid; j += blockDim.x) sum += expf(to_float(z[j]) - maxes[blockIdx.x]);
    sum = block_reduce(sum, false);
    if (threadIdx.x == 0) sums[blockIdx.x] = sum;
}
__global__ void crossentropy_target_logit_kernel(float* target_logits, const floatX* logits, const int* targets, int N,
                                                 int cols, int vocab_begin) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) target_logits[i] = target_logit_of_row(logits, targets, i, cols, vocab_begin);
}
__global__ void crossentropy_finish_kernel(floatX* logits, float* losses, const int* targets, const float* maxes,
                                           const float* sums, const float* target_logits, int cols, int vocab_begin,
                                           int valid, float dloss) {
    int i = blockIdx.x;
    if (threadIdx.x == 0) losses[i] = logf(sums[i]) + maxes[i] - target_logits[i];
    if (dloss == 0.0f) return;
    floatX* z = logits + (size_t)i * cols;
    for (int j = threadIdx.x; j < cols; j += blockDim.x)
        z[j] = crossentropy_gradient(to_float(z[j]), j, targets[i] - vocab_begin, valid, maxes[i], sums[i], dloss);
}
// The fused classifier (one rank: tp = 1; llm.c's fused_classifier): one block per row, one
// kernel. An online softmax keeps a running (max, sum) per thread, rescaling the sum when the max
// grows, and merges the pairs across the block in a fixed order; then the gradient pass. Two reads
// of the row and one write, where the four pieces read it three times before they write it.
// (max, sum of exp(z - max)) merged with another such pair
__device__ inline void merge_softmax_state(float* m, float* s, float m2, float s2) {
    float top = fmaxf(*m, m2);
    if (top == -INFINITY) return;  // both empty
    *s = *s * expf(*m - top) + s2 * expf(m2 - top);
    *m = top;
}
// every thread's (max, sum) pair merged over the block, in a fixed order: in each warp by
// shuffles, then the warps' pairs in warp order through shared memory; every thread gets the result.
// Once a kernel: a second call would need a barrier first (a fast warp would overwrite the pairs a
// slow one still reads). The block: a multiple of 32 threads, at most 1024 (full-mask shuffles)
__device__ inline void block_merge_softmax_state(float* m, float* s) {
    __shared__ float warp_max[32], warp_sum[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    for (int o = 16; o > 0; o /= 2)
        merge_softmax_state(m, s, __shfl_xor_sync(0xffffffff, *m, o), __shfl_xor_sync(0xffffffff, *s, o));
    if (lane == 0) { warp_max[warp] = *m; warp_sum[warp] = *s; }
    __syncthreads();  // every warp's pair in (and whatever the threads did before) before any thread goes on
    *m = lane < warps ? warp_max[lane] : -INFINITY;
    *s = lane < warps ? warp_sum[lane] : 0.0f;
    for (int o = 16; o > 0; o /= 2)
        merge_softmax_state(m, s, __shfl_xor_sync(0xffffffff, *m, o), __shfl_xor_sync(0xffffffff, *s, o));
}
__global__ void crossentropy_fused_kernel(floatX* logits, float* losses, const int* targets, int V, int Vp,
                                          float dloss) {
    int i = blockIdx.x;
    floatX* z = logits + (size_t)i * Vp;
    float target_logit = to_float(z[targets[i]]);  // read before any thread writes a gradient over it
    float m = -INFINITY, s = 0.0f;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {  // the online softmax: one read of the row
        float x = to_float(z[j]);
        if (x > m) { s = s * expf(m - x) + 1.0f; m = x; }
        else s += expf(x - m);
    }
    block_merge_softmax_state(&m, &s);  // also the barrier: every target_logit read before any gradient is written
    if (threadIdx.x == 0) losses[i] = logf(s) + m - target_logit;
    if (dloss == 0.0f) return;
    for (int j = threadIdx.x; j < Vp; j += blockDim.x)
        z[j] = crossentropy_gradient(to_float(z[j]), j, targets[i], V, m, s, dloss);
}
// The same, a 16-byte pack (Packed128: 8 bf16 values) a thread at a time, the online softmax
// rescaled once a pack: on an H200 the kernel above took 1.92 ms for 8192 rows of 50304, about 5
// times its bytes' time at the card's bandwidth (docs/gpu.md). Vp a multiple of the pack and the
// logits 16-byte aligned; columns from V on are padding in both passes
__global__ void crossentropy_fused_kernel128(floatX* logits, float* losses, const int* targets, int V, int Vp,
                                             float dloss) {
    constexpr int P = Packed128<floatX>::size;
    int i = blockIdx.x;
    floatX* z = logits + (size_t)i * Vp;
    float target_logit = to_float(z[targets[i]]);  // read before any thread writes a gradient over it
    float m = -INFINITY, s = 0.0f;
    for (int j0 = threadIdx.x * P; j0 < V; j0 += blockDim.x * P) {  // the online softmax: one read of the row
        Packed128<floatX> x = load128(z + j0);
        float top = m;
        for (int k = 0; k < P; k++) if (j0 + k < V) top = fmaxf(top, to_float(x.v[k]));
        float sum = 0.0f;
        for (int k = 0; k < P; k++) sum += j0 + k < V ? expf(to_float(x.v[k]) - top) : 0.0f;
        s = (m == -INFINITY ? 0.0f : s * expf(m - top)) + sum;
        m = top;
    }
    block_merge_softmax_state(&m, &s);  // also the barrier: every target_logit read before any gradient is written
    if (threadIdx.x == 0) losses[i] = logf(s) + m - target_logit;
    if (dloss == 0.0f) return;
    for (int j0 = threadIdx.x * P; j0 < Vp; j0 += blockDim.x * P) {
        Packed128<floatX> x = load128(z + j0);
        for (int k = 0; k < P; k++)
            x.v[k] = crossentropy_gradient(to_float(x.v[k]), j0 + k, targets[i], V, m, s, dloss);
        store128(z + j0, x);
    }
}
// the fused op on N rows (block: threads per row, a multiple of 32; dev/crossentropy.cu times them)
inline void crossentropy_forward_backward(floatX* logits, float* losses, const int* targets, int N, int V, int Vp,
                                          float dloss, int block = 512) {
    if (N == 0) return;
    if (packs_fit(Vp, {logits}))
        crossentropy_fused_kernel128<<<N, block>>>(logits, losses, targets, V, Vp, dloss);
    else
        crossentropy_fused_kernel<<<N, block>>>(logits, losses, targets, V, Vp, dloss);
    launchCheck();
}

inline void crossentropy_row_max(float* maxes, const floatX* logits, int N, int cols, int valid) {
    if (N == 0) return;  // a grid of 0 blocks is a launch error (so in the three below)
    crossentropy_row_max_kernel<<<N, 512>>>(maxes, logits, cols, valid);
    launchCheck();
}
inline void crossentropy_row_sumexp(float* sums, const floatX* logits, const float* maxes, int N, int cols, int valid) {
    if (N == 0) return;
    crossentropy_row_sumexp_kernel<<<N, 512>>>(sums, logits, maxes, cols, valid);
    launchCheck();
}
inline void crossentropy_target_logit(float* target_logits, const floatX* logits, const int* targets, int N, int cols,
                                      int vocab_begin) {
    if (N == 0) return;
    crossentropy_target_logit_kernel<<<ceil_div(N, 256), 256>>>(target_logits, logits, targets, N, cols, vocab_begin);
    launchCheck();
}
inline void crossentropy_finish(floatX* logits, float* losses, const int* targets, const float* maxes,
                                const float* sums, const float* target_logits, int N, int cols, int vocab_begin,
                                int valid, float dloss) {
    if (N == 0) return;
    crossentropy_finish_kernel<<<N, 512>>>(logits, losses, targets, maxes, sums, target_logits, cols, vocab_begin,
                                           valid, dloss);
    launchCheck();
}
#else
// the CPU build's fused op: the pieces' row loops (row_max_host, row_sumexp_host, so that tp = 1 and
// the pieces agree bit for bit), one row at a time while it is in cache
inline void crossentropy_forward_backward(floatX* logits, float* losses, const int* targets, int N, int V, int Vp,
                                          float dloss) {
#pragma omp parallel for
    for (int i = 0; i < N; i++) {
        floatX* z = logits + (size_t)i * Vp;
        float maxval = row_max_host(z, V), sum = row_sumexp_host(z, maxval, V);
        losses[i] = logf(sum) + maxval - to_float(z[targets[i]]);
        if (dloss == 0.0f) continue;
        for (int j = 0; j < Vp; j++) z[j] = crossentropy_gradient(to_float(z[j]), j, targets[i], V, maxval, sum, dloss);
    }
}
inline void crossentropy_row_max(float* maxes, const floatX* logits, int N, int cols, int valid) {
    crossentropy_row_max_host(maxes, logits, N, cols, valid);
}
inline void crossentropy_row_sumexp(float* sums, const floatX* logits, const float* maxes, int N, int cols, int valid) {
    crossentropy_row_sumexp_host(sums, logits, maxes, N, cols, valid);
}
inline void crossentropy_target_logit(float* target_logits, const floatX* logits, const int* targets, int N, int cols,
                                      int vocab_begin) {
    crossentropy_target_logit_host(target_logits, logits, targets, N, cols, vocab_begin);
}
inline void crossentropy_finish(floatX* logits, float* losses, const int* targets, const float* maxes,
                                const float* sums, const float* target_logits, int N, int cols, int vocab_begin,
                                int valid, float dloss) {
    crossentropy_finish_host(logits, losses, targets, maxes, sums, target_logits, N, cols, vocab_begin, valid, dloss);
}
#endif

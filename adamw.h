/*
adamw.h: the AdamW optimizer, exactly as PyTorch's torch.optim.AdamW computes it.

    m = b1 m + (1 - b1) g              v = b2 v + (1 - b2) g^2
    p = p (1 - lr wd) - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)

g is the stored gradient times grad_scale (clip factor / loss scale), so clipping
and unscaling cost no extra pass. Weight decay is applied per tensor by the caller:
to the 2-D matrices only (docs/design.md: Numerical conventions).

Memory per parameter: m and v are fp32 (8 bytes). In a 16-bit build the update
runs on an fp32 master copy (4 bytes) and writes the floatX parameter (2 bytes) by
stochastic rounding; with the 2-byte gradient that is mixed precision's 16 bytes
per parameter. Without the master (-w 0, as llm.c's) the update reads the floatX
parameter itself and writes it back by the same rounding: 12 bytes, and an update
smaller than half a floatX step survives only on average (the rounding goes up with
probability update / step), not in a copy. Read adamw_element first: kernel and host
loop both call it.

Applied in zero.h: zero_optimizer_step (one launch for every tensor slice of this rank's shard,
adamw_update_slices, whatever the ZeRO stage), called by train_gpt.cu: train_step, which passes
the clip factor over the loss scale as grad_scale and the step's seed for the rounding.
*/
#pragma once
// defines: AdamWConfig, adamw_element, adamw_update, adamw_apply, adamw_kernel, adamw_kernel128, adamw_pack,
//          AdamWSlice, ADAMW_BLOCK, adamw_slice_blocks, adamw_slices_kernel, adamw_update_slices,
//          adamw_update_slices_ledger
#include <math.h>  // defines: sqrtf, powf
#include "kernels/common.cuh"

struct AdamWConfig {
    float lr, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay;
};

// one parameter: updates m, v in place; returns the new parameter value
HOST_DEVICE inline float adamw_element(float p, float g, float* m, float* v, float lr, float beta1, float beta2,
                                       float eps, float weight_decay, float bias_correction1, float bias_correction2) {
    *m = beta1 * *m + (1.0f - beta1) * g;
    *v = beta2 * *v + (1.0f - beta2) * g * g;
    float denom = sqrtf(*v) / sqrtf(bias_correction2) + eps;
    return p * (1.0f - lr * weight_decay) - (lr / bias_correction1) * (*m / denom);
}

// element i of the update; master may be NULL (the fp32 build, whose parameters are the master; -w 0)
template <typename Grad>
HOST_DEVICE inline void adamw_apply(size_t i, floatX* params, float* master, const Grad* grads, float* m, float* v,
                                    AdamWConfig c, float bc1, float bc2, float grad_scale, uint64_t seed,
                                    size_t index_offset) {
    float p = master ? master[i] : to_float(params[i]);
    float updated = adamw_element(p, to_float(grads[i]) * grad_scale, &m[i], &v[i], c.lr, c.beta1, c.beta2, c.eps,
                                  c.weight_decay, bc1, bc2);
    if (master) master[i] = updated;
    params[i] = round_stochastic(updated, random_u32(seed, index_offset + i));  // the fp32 build: the value itself
}

#ifdef __CUDACC__
template <typename Grad>
__global__ void adamw_kernel(floatX* params, float* master, const Grad* grads, float* m, float* v, size_t n,
                             AdamWConfig c, float bc1, float bc2, float grad_scale, uint64_t seed,
                             size_t index_offset) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) adamw_apply(i, params, master, grads, m, v, c, bc1, bc2, grad_scale, seed, index_offset);
}
// P values from i0 (a 16-byte pack of parameters, 8 bf16 or 4 fp32, and the same elements of every
// other array, 16 bytes a load and store), or, where the arrays are not 16-byte aligned there or
// the slice ends inside the pack, element by element: each element by the same adamw_apply, so
// the same bits either way, the rounding's random bits included
template <typename Grad>
__device__ inline void adamw_pack(floatX* params, float* master, const Grad* grads, float* m, float* v, size_t i0,
                                  size_t n, bool packed, AdamWConfig c, float bc1, float bc2, float grad_scale,
                                  uint64_t seed, size_t index_offset) {
    constexpr int P = Packed128<floatX>::size;
    if (!packed || i0 + P > n) {
        for (size_t i = i0; i < n && i < i0 + P; i++)
            adamw_apply(i, params, master, grads, m, v, c, bc1, bc2, grad_scale, seed, index_offset);
        return;
    }
    floatX p[P];
    Grad g[P];
    float m_pack[P], v_pack[P], master_pack[P];
    load_values<P>(p, params + i0);
    load_values<P>(g, grads + i0);
    load_values<P>(m_pack, m + i0);
    load_values<P>(v_pack, v + i0);
    if (master) load_values<P>(master_pack, master + i0);
    // two loops, not `master ? master_pack : nullptr`: taking the array's address would put it in local memory
    if (master) {
        #pragma unroll
        for (int k = 0; k < P; k++)
            adamw_apply(k, p, master_pack, g, m_pack, v_pack, c, bc1, bc2, grad_scale, seed, index_offset + i0);
    } else {
        #pragma unroll
        for (int k = 0; k < P; k++)
            adamw_apply(k, p, (float*)nullptr, g, m_pack, v_pack, c, bc1, bc2, grad_scale, seed, index_offset + i0);
    }
    store_values<P>(params + i0, p);
    store_values<P>(m + i0, m_pack);
    store_values<P>(v + i0, v_pack);
    if (master) store_values<P>(master + i0, master_pack);
}
// a thread a pack (adamw_pack), every array 16-byte aligned. On an H200 the kernel above took 1.4 ms
// a GPT-2 124M step in 148 launches (docs/gpu.md)
template <typename Grad>
__global__ void adamw_kernel128(floatX* params, float* master, const Grad* grads, float* m, float* v, size_t n,
                                AdamWConfig c, float bc1, float bc2, float grad_scale, uint64_t seed,
                                size_t index_offset) {
    size_t i0 = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * Packed128<floatX>::size;
    if (i0 < n) adamw_pack(params, master, grads, m, v, i0, n, true, c, bc1, bc2, grad_scale, seed, index_offset);
}
#endif


// t: optimizer steps applied so far, this one included (bias correction).
// seed and index_offset (this buffer's first element in the whole model) pick the rounding bits.
template <typename Grad>
inline void adamw_update(floatX* params, float* master, const Grad* grads, float* m, float* v, size_t n,
                         AdamWConfig c, int t, float grad_scale, uint64_t seed, size_t index_offset) {
    float bc1 = 1.0f - powf(c.beta1, (float)t);
    float bc2 = 1.0f - powf(c.beta2, (float)t);
#ifdef __CUDACC__
    if (n == 0) return;  // a grid of 0 blocks is a launch error
    if (aligned16(params) && aligned16(grads) && aligned16(m) && aligned16(v) && (!master || aligned16(master)))
        adamw_kernel128<Grad><<<ceil_div(n, 256 * Packed128<floatX>::size), 256>>>(
            params, master, grads, m, v, n, c, bc1, bc2, grad_scale, seed, index_offset);
    else
        adamw_kernel<Grad><<<ceil_div(n, 256), 256>>>(params, master, grads, m, v, n, c, bc1, bc2, grad_scale, seed,
                                                      index_offset);
    launchCheck();
#else
    // in pieces that the threads take as they finish (64K elements): a thread whose core is shared
    // with another program does fewer (docs/cpu.md: a shared machine). Two loops, so that without a
    // master copy (the fp32 build) no store is conditional and the compiler vectorises the loop
    // (sqrtps, divps: the same bits as one value at a time)
    if (master) {
        #pragma omp parallel for schedule(dynamic, 65536)
        for (size_t i = 0; i < n; i++)
            adamw_apply(i, params, master, grads, m, v, c, bc1, bc2, grad_scale, seed, index_offset);
    } else {
        #pragma omp parallel for simd schedule(dynamic, 65536)
        for (size_t i = 0; i < n; i++)
            adamw_apply(i, params, (float*)nullptr, grads, m, v, c, bc1, bc2, grad_scale, seed, index_offset);
    }
#endif
}

// ---------------------------------------------------------------- one launch for a shard
// Every tensor slice of a rank's shard in one launch (llm.c launches once per tensor; 148 launches
// a GPT-2 124M step here before): a table of the slices, made once (zero.h: zero_adamw_slices) and
// kept on the device; each block finds its slice by a binary search over the slices' first blocks.
// Each element by the same adamw_apply as adamw_update: the same bits as a launch per slice.
struct AdamWSlice {
    size_t param, state;   // the slice's first element in the parameters and in the state (m, v, master, gradient)
    size_t n, index;       // its elements; the first one's index in the whole model (the rounding's bits)
    unsigned first_block;  // its first block in the launch's grid
    int decay;             // 1: weight decay applies (a matrix)
};
#define ADAMW_BLOCK 256
inline unsigned adamw_slice_blocks(size_t n) { return (unsigned)ceil_div(n, (size_t)ADAMW_BLOCK * PACK_VALUES); }

#ifdef __CUDACC__
template <typename Grad>
__global__ void adamw_slices_kernel(floatX* params, float* master, const Grad* grads, float* m, float* v,
                                    const AdamWSlice* slices, int count, unsigned first_block, AdamWConfig c,
                                    float weight_decay, float bc1, float bc2, float grad_scale, uint64_t seed) {
    unsigned block = first_block + blockIdx.x;  // in the whole table's grid
    int lo = 0, hi = count - 1;  // the last slice whose first block is at or before this block
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (slices[mid].first_block <= block) lo = mid; else hi = mid - 1;
    }
    AdamWSlice s = slices[lo];
    size_t i0 = ((size_t)(block - s.first_block) * blockDim.x + threadIdx.x) * Packed128<floatX>::size;
    if (i0 >= s.n) return;
    c.weight_decay = s.decay ? weight_decay : 0.0f;
    // from 256-byte bases
    bool packed = s.param % Packed128<floatX>::size == 0 && s.state % Packed128<floatX>::size == 0;
    adamw_pack(params + s.param, master ? master + s.state : nullptr, grads + s.state, m + s.state, v + s.state, i0,
               s.n, packed, c, bc1, bc2, grad_scale, seed, s.index);
}
#endif

// AdamW on every slice of the table (device memory; host memory in the CPU build), `blocks` the
// sum of their adamw_slice_blocks; c: lr and betas, weight_decay for the slices that decay. A part of
// a table: `slices` its first entry, `first_block` that entry's first_block (zero.h updates the
// embeddings' slices before the others under ZeRO-3)
template <typename Grad>
inline void adamw_update_slices(floatX* params, float* master, const Grad* grads, float* m, float* v,
                                const AdamWSlice* slices, int count, unsigned blocks, AdamWConfig c, float weight_decay,
                                int t, float grad_scale, uint64_t seed, unsigned first_block = 0) {
    if (count == 0 || blocks == 0) return;  // a grid of 0 blocks is a launch error
#ifdef __CUDACC__
    float bc1 = 1.0f - powf(c.beta1, (float)t), bc2 = 1.0f - powf(c.beta2, (float)t);  // as adamw_update's
    adamw_slices_kernel<Grad><<<blocks, ADAMW_BLOCK>>>(params, master, grads, m, v, slices, count, first_block, c,
                                                       weight_decay, bc1, bc2, grad_scale, seed);
    launchCheck();
#else
    for (int k = 0; k < count; k++) {
        const AdamWSlice& s = slices[k];
        c.weight_decay = s.decay ? weight_decay : 0.0f;
        adamw_update(params + s.param, master ? master + s.state : nullptr, grads + s.state, m + s.state, v + s.state,
                     s.n, c, t, grad_scale, seed, s.index);
    }
#endif
}
// the kernel ledger (kernels/ledger.cuh) of adamw_update_slices over P parameters: their gradient of
// `grad_bytes` a value read; the parameters, m, v and the fp32 master copy (if any) updated in place
inline void adamw_update_slices_ledger(Ledger* l, size_t P, size_t grad_bytes, bool master) {
    ledger_add(l, {"adamw_slices_kernel<Grad>", 15.0 * P, (double)P * grad_bytes, 0,
                   P * (sizeof(floatX) + 8.0 + (master ? 4.0 : 0.0))});
}

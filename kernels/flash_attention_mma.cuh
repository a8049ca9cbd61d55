/*
kernels/flash_attention_mma.cuh: FlashAttention-2 with the scores in registers, one rank's whole
sequences (-fa 2; the default -fa 1 runs kernels/flash_attention_wmma.cuh's WMMA kernels).

The WMMA kernels cannot know which lane holds which accumulator element (CUDA leaves it
unspecified), so S, P and dS go through shared memory for the softmax. PTX's mma.sync.m16n8k16
documents its layout (kernels/mma_m16n8k16.cuh): lane (g, t) = (lane / 4, lane % 4) holds rows g
and g + 8, columns 2t and 2t + 1 of each 16 x 8 accumulator. So each lane runs the online softmax
on the elements it holds, and an accumulator pair rounded to floatX is already the A operand of
the next product: no trip through shared memory, no barrier between the products.

    forward (grid: T / 64 query tiles last-first, B * NH; 4 warps of 16 queries)
        q in A fragments for the whole walk; per 64-key tile (k, v staged in shared memory):
        S = Q K^T (8 accumulators of 16 x 8), m' = max(m, rowmax S) over the row's 4 lanes (two
        shuffles), O *= exp2(m - m'), P = exp2(S log2(e)/sqrt(hs) - m'), l += rowsum P (per lane),
        O += P V; at the end l summed over the row's 4 lanes, out = O / l, lse = m + log l
    backward, two walks, each sum with one owner and a fixed order (no atomics: resume bit-exact)
        dk dv (grid over key tiles): a warp keeps 16 keys' k and v as A fragments and walks the
        query tiles at or below the diagonal (q, dout, lse, D in shared memory):
        S^T = K Q^T, P^T = exp2(S^T log2(e)/sqrt(hs) - lse log2(e)), dP^T = V dout^T,
        dS^T = P^T (dP^T - D); dv += P^T dout, dk += dS^T Q; dk scaled by 1/sqrt(hs) at the end
        dq (grid over query tiles, last-first): 16 queries' q and dout as A fragments, walking the
        key tiles at or left of the diagonal: S, P, dP = dout V^T, dS; dq += dS K, scaled at the end

Costs per (b, h): the forward 4 T^2/2 hs FLOPs of causal work, q k v read once per query tile
and written out once; the backward 2 + 3 products (dq) and 4 (dk dv): the two walks recompute
S and dP that FlashAttention-2's one backward shares, for no atomics. lse and D are (B, T, NH)
fp32, as the WMMA kernels keep them. Registers (ptxas of nvcc 13, sm_90, bf16, head size 64): the
forward 128 a thread, dq 164, dk dv 228, no spills; at 128 dk dv spills 192 bytes (its k, v, dk,
dv, p and ds fragments); 18 KB of static shared memory each, so occupancy is the registers'.

Head sizes 16, 32, 64 and 128 (compiled in), bf16 and fp16 builds; train_gpt refuses -fa 2
otherwise, and under -cp (ring attention's blocks run the WMMA kernels). Not yet timed on a GPU:
docs/gpu.md says what the next lease measures (dev/attention_forward 7, dev/attention_backward 6,
and the step at -fa 1 and 2); the default moves to 2 only where a GPU shows it faster. Left for
after that measurement (FlashAttention-2's tiling): 32 query rows a warp (each K/V fragment feeding
two row blocks), 128-query forward tiles, cp.async double buffering of the K and V tiles, the mask
only on diagonal tiles, D folded into the backward's prologue.
Applied in kernels/attention.cuh: attention_forward, attention_backward (GPU build, -fa 2).
*/
#pragma once
// defines: FLASH_MMA_WARPS, flash_mma_head, flash_softmax_mma, flash_forward_mma_kernel, flash_store_rows_mma,
//          flash_dkv_mma_kernel, flash_dq_mma_kernel, attention_whole_forward_mma, attention_whole_backward_mma,
//          flash_mma_forward, flash_mma_backward
#include "common.cuh"          // defines: floatX, from_float, ceil_div, launchCheck, fail
#include "mma_m16n8k16.cuh"    // defines: mma_load_a, mma_load_tile, mma_rows_times_tile, mma_add_times_tile, MMA_TILE

#define FLASH_MMA_WARPS 4  // a block: 4 warps of 16 own rows (queries or keys), MMA_TILE = 64 of the other side a tile

// the head sizes these kernels are compiled for, in the builds that have them
inline bool flash_mma_head(int hs) { return !FLOATX_IS_FP32 && mma_head_size(hs); }

#if !FLOATX_IS_FP32
// the online softmax on the lane's elements, rows g (half 0) and g + 8 (half 1): scaled to log2
// units, masked (keys after the row's query or past T), the row max over the 4 lanes of the row,
// o and l rescaled; s becomes p
template <int HS>
__device__ inline void flash_softmax_mma(float (&s)[MMA_TILE / 8][4], float (&o)[HS / 8][4], float (&m)[2],
                                         float (&l)[2], int row0, int k0, int T, int g, int t, float scale_log2) {
    #pragma unroll
    for (int half = 0; half < 2; half++) {
        int query = row0 + g + 8 * half;
        float tile_max = -INFINITY;
        #pragma unroll
        for (int j = 0; j < MMA_TILE / 8; j++)
            #pragma unroll
            for (int e = 0; e < 2; e++) {
                int key = k0 + 8 * j + 2 * t + e;
                float& x = s[j][2 * half + e];
                x = key <= query && key < T ? x * scale_log2 : -INFINITY;
                tile_max = fmaxf(tile_max, x);
            }
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
        // every row a warp walks sees key k0 of each tile it walks, so tile_max is finite
        float m_new = fmaxf(m[half], tile_max), rescale = exp2f(m[half] - m_new);  // first tile: exp2(-inf) = 0
        l[half] *= rescale;
        #pragma unroll
        for (int d = 0; d < HS / 8; d++) o[d][2 * half] *= rescale, o[d][2 * half + 1] *= rescale;
        #pragma unroll
        for (int j = 0; j < MMA_TILE / 8; j++)
            #pragma unroll
            for (int e = 0; e < 2; e++) {
                float& x = s[j][2 * half + e];
                x = exp2f(x - m_new);
                l[half] += x;
            }
        m[half] = m_new;
    }
}

// grid (T / 64 rounded up, B * NH), 4 warps: warp w owns queries q0 + 16 w .. q0 + 16 w + 15;
// out (B, T, C) floatX, lse (B, T, NH)
template <int HS>
__global__ void __launch_bounds__(32 * FLASH_MMA_WARPS)
    flash_forward_mma_kernel(floatX* out, float* lse, const floatX* qkv, int T, int C, int NH) {
    // floatX tiles as raw 16-bit words, cast at use: the emulated build's bf16 and fp16 are classes with
    // constructors, whose __shared__ arrays would get an initialisation guard (a false race under ThreadSanitizer)
    __shared__ __align__(16) uint16_t k_bits[MMA_TILE * (HS + MMA_PAD)], v_bits[MMA_TILE * (HS + MMA_PAD)];
    floatX *k_tile = (floatX*)k_bits, *v_tile = (floatX*)v_bits;
    int b = blockIdx.y / NH, h = blockIdx.y % NH, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    // the last query tiles see the most keys: started first, they do not finish alone at the end
    int q0 = (gridDim.x - 1 - blockIdx.x) * 16 * FLASH_MMA_WARPS, row0 = q0 + 16 * (threadIdx.x / 32);
    float scale_log2 = 1.4426950408889634f / sqrtf((float)HS);  // log2(e) / sqrt(hs): exp2 of it is exp
    const floatX* head = qkv + (size_t)b * T * 3 * C + h * HS;
    uint32_t q[HS / 16][4];
    mma_load_a<HS>(q, head, 3 * C, row0, T, g, t);
    float o[HS / 8][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    int last_key = min(q0 + 16 * FLASH_MMA_WARPS, T) - 1;  // tiles past the block's last query are above the diagonal
    for (int k0 = 0; k0 <= last_key; k0 += MMA_TILE) {
        mma_load_tile<HS>(k_tile, head + C, 3 * C, k0, T);
        mma_load_tile<HS>(v_tile, head + 2 * C, 3 * C, k0, T);
        __syncthreads();  // every thread's loads are in before any warp reads the tiles
        if (k0 <= row0 + 15 && row0 < T) {  // the same in the whole warp: tiles above its rows, rows past T skipped
            float s[MMA_TILE / 8][4];
            mma_rows_times_tile<HS>(s, q, k_tile, g, t);  // S = Q K^T
            flash_softmax_mma<HS>(s, o, m, l, row0, k0, T, g, t, scale_log2);
            mma_add_times_tile<HS>(o, s, v_tile, g, t);  // O += P V
        }
        __syncthreads();  // every warp is done with k and v before the next pass overwrites them
    }
    #pragma unroll
    for (int half = 0; half < 2; half++) {  // l: the row's 4 lanes' partial sums, in a fixed order
        l[half] += __shfl_xor_sync(0xffffffffu, l[half], 1);
        l[half] += __shfl_xor_sync(0xffffffffu, l[half], 2);
        int query = row0 + g + 8 * half;
        if (query >= T) continue;
        floatX* y = out + ((size_t)b * T + query) * C + h * HS + 2 * t;
        #pragma unroll
        for (int d = 0; d < HS / 8; d++) {
            y[8 * d] = from_float(o[d][2 * half] / l[half]);
            y[8 * d + 1] = from_float(o[d][2 * half + 1] / l[half]);
        }
        if (t == 0) lse[((size_t)b * T + query) * NH + h] = m[half] * 0.6931471805599453f + logf(l[half]);
    }
}

// 16 own rows x HS of accumulators, times `scale`, into rows (row stride `stride`) from `first`, rows < T
template <int HS>
__device__ inline void flash_store_rows_mma(floatX* rows, size_t stride, const float (&acc)[HS / 8][4], float scale,
                                            int first, int T, int g, int t) {
    #pragma unroll
    for (int half = 0; half < 2; half++) {
        int row = first + g + 8 * half;
        if (row >= T) continue;
        floatX* p = rows + (size_t)row * stride + 2 * t;
        #pragma unroll
        for (int d = 0; d < HS / 8; d++) {
            p[8 * d] = from_float(acc[d][2 * half] * scale);
            p[8 * d + 1] = from_float(acc[d][2 * half + 1] * scale);
        }
    }
}

// grid (T / 64 rounded up, B * NH), 4 warps: warp w owns keys k0 + 16 w .. + 15; dk, dv into dqkv's rows
template <int HS>
__global__ void __launch_bounds__(32 * FLASH_MMA_WARPS)
    flash_dkv_mma_kernel(floatX* dqkv, const floatX* dout, const floatX* qkv, const float* lse, const float* D, int T,
                         int C, int NH) {
    __shared__ __align__(16) uint16_t q_bits[MMA_TILE * (HS + MMA_PAD)], do_bits[MMA_TILE * (HS + MMA_PAD)];
    __shared__ float lse_tile[MMA_TILE], d_tile[MMA_TILE];
    floatX *q_tile = (floatX*)q_bits, *do_tile = (floatX*)do_bits;  // raw words: flash_forward_mma_kernel says why
    int b = blockIdx.y / NH, h = blockIdx.y % NH, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    int k0 = blockIdx.x * MMA_TILE, j0 = k0 + 16 * (threadIdx.x / 32);
    const float log2e = 1.4426950408889634f, scale = 1.0f / sqrtf((float)HS), scale_log2 = scale * log2e;
    const floatX* head = qkv + (size_t)b * T * 3 * C + h * HS;
    uint32_t kf[HS / 16][4], vf[HS / 16][4];
    mma_load_a<HS>(kf, head + C, 3 * C, j0, T, g, t);
    mma_load_a<HS>(vf, head + 2 * C, 3 * C, j0, T, g, t);
    float dk[HS / 8][4] = {}, dv[HS / 8][4] = {};
    for (int q0 = k0; q0 < T; q0 += MMA_TILE) {  // the query tiles at or below the diagonal
        mma_load_tile<HS>(q_tile, head, 3 * C, q0, T);
        mma_load_tile<HS>(do_tile, dout + (size_t)b * T * C + h * HS, C, q0, T);
        for (int r = threadIdx.x; r < MMA_TILE; r += blockDim.x) {
            bool in = q0 + r < T;
            size_t row = (size_t)b * T + q0 + r;
            lse_tile[r] = in ? lse[row * NH + h] * log2e : 0.0f;
            d_tile[r] = in ? D[row * NH + h] : 0.0f;
        }
        __syncthreads();  // every thread's loads are in before any warp reads the tiles
        if (j0 < T) {  // the same in the whole warp: keys past T have no gradient
            float p[MMA_TILE / 8][4], ds[MMA_TILE / 8][4];
            mma_rows_times_tile<HS>(p, kf, q_tile, g, t);    // S^T
            mma_rows_times_tile<HS>(ds, vf, do_tile, g, t);  // dP^T
            #pragma unroll
            for (int n = 0; n < MMA_TILE / 8; n++)
                #pragma unroll
                for (int i = 0; i < 4; i++) {
                    int key = j0 + g + 8 * (i / 2), c = 8 * n + 2 * t + i % 2, query = q0 + c;
                    p[n][i] = query >= key && query < T ? exp2f(p[n][i] * scale_log2 - lse_tile[c]) : 0.0f;
                    ds[n][i] = p[n][i] * (ds[n][i] - d_tile[c]);
                }
            mma_add_times_tile<HS>(dv, p, do_tile, g, t);
            mma_add_times_tile<HS>(dk, ds, q_tile, g, t);
        }
        __syncthreads();  // every warp is done with the tiles before the next pass overwrites them
    }
    flash_store_rows_mma<HS>(dqkv + (size_t)b * T * 3 * C + C + h * HS, 3 * C, dk, scale, j0, T, g, t);
    flash_store_rows_mma<HS>(dqkv + (size_t)b * T * 3 * C + 2 * C + h * HS, 3 * C, dv, 1.0f, j0, T, g, t);
}

// grid (T / 64 rounded up, B * NH), 4 warps: warp w owns queries q0 + 16 w .. + 15; dq into dqkv's rows
template <int HS>
__global__ void __launch_bounds__(32 * FLASH_MMA_WARPS)
    flash_dq_mma_kernel(floatX* dqkv, const floatX* dout, const floatX* qkv, const float* lse, const float* D, int T,
                        int C, int NH) {
    __shared__ __align__(16) uint16_t k_bits[MMA_TILE * (HS + MMA_PAD)], v_bits[MMA_TILE * (HS + MMA_PAD)];
    floatX *k_tile = (floatX*)k_bits, *v_tile = (floatX*)v_bits;  // raw words: flash_forward_mma_kernel says why
    int b = blockIdx.y / NH, h = blockIdx.y % NH, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    int q0 = (gridDim.x - 1 - blockIdx.x) * MMA_TILE, r0 = q0 + 16 * (threadIdx.x / 32);  // the most keys first
    const float log2e = 1.4426950408889634f, scale = 1.0f / sqrtf((float)HS), scale_log2 = scale * log2e;
    const floatX* head = qkv + (size_t)b * T * 3 * C + h * HS;
    uint32_t qf[HS / 16][4], dof[HS / 16][4];
    mma_load_a<HS>(qf, head, 3 * C, r0, T, g, t);
    mma_load_a<HS>(dof, dout + (size_t)b * T * C + h * HS, C, r0, T, g, t);
    float row_lse[2], row_d[2];  // rows g and g + 8
    for (int half = 0; half < 2; half++) {
        int row = r0 + g + 8 * half;
        size_t at = ((size_t)b * T + row) * NH + h;
        row_lse[half] = row < T ? lse[at] * log2e : 0.0f;
        row_d[half] = row < T ? D[at] : 0.0f;
    }
    float dq[HS / 8][4] = {};
    int last_key = min(q0 + MMA_TILE, T) - 1;
    for (int k0 = 0; k0 <= last_key; k0 += MMA_TILE) {  // the key tiles at or left of the diagonal
        mma_load_tile<HS>(k_tile, head + C, 3 * C, k0, T);
        mma_load_tile<HS>(v_tile, head + 2 * C, 3 * C, k0, T);
        __syncthreads();
        if (k0 <= r0 + 15 && r0 < T) {  // the same in the whole warp
            float p[MMA_TILE / 8][4], ds[MMA_TILE / 8][4];
            mma_rows_times_tile<HS>(p, qf, k_tile, g, t);    // S
            mma_rows_times_tile<HS>(ds, dof, v_tile, g, t);  // dP
            #pragma unroll
            for (int n = 0; n < MMA_TILE / 8; n++)
                #pragma unroll
                for (int i = 0; i < 4; i++) {
                    int query = r0 + g + 8 * (i / 2), key = k0 + 8 * n + 2 * t + i % 2;
                    p[n][i] = key <= query && key < T ? exp2f(p[n][i] * scale_log2 - row_lse[i / 2]) : 0.0f;
                    ds[n][i] = p[n][i] * (ds[n][i] - row_d[i / 2]);
                }
            mma_add_times_tile<HS>(dq, ds, k_tile, g, t);
        }
        __syncthreads();
    }
    flash_store_rows_mma<HS>(dqkv + (size_t)b * T * 3 * C + h * HS, 3 * C, dq, scale, r0, T, g, t);
}

template <int HS>
inline void flash_mma_forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH) {
    dim3 grid(ceil_div(T, 16 * FLASH_MMA_WARPS), B * NH);
    flash_forward_mma_kernel<HS><<<grid, 32 * FLASH_MMA_WARPS>>>(out, lse, qkv, T, C, NH);
}
template <int HS>
inline void flash_mma_backward(floatX* dqkv, const floatX* dout, const floatX* qkv, const float* lse, const float* D,
                               int B, int T, int C, int NH) {
    dim3 grid(ceil_div(T, MMA_TILE), B * NH);
    flash_dkv_mma_kernel<HS><<<grid, 32 * FLASH_MMA_WARPS>>>(dqkv, dout, qkv, lse, D, T, C, NH);
    flash_dq_mma_kernel<HS><<<grid, 32 * FLASH_MMA_WARPS>>>(dqkv, dout, qkv, lse, D, T, C, NH);
}
#endif

// out (B,T,C) and lse (B,T,NH) of qkv (B,T,3C), causal over whole sequences
inline void attention_whole_forward_mma(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH) {
#if FLOATX_IS_FP32
    (void)out, (void)lse, (void)qkv, (void)B, (void)T, (void)C, (void)NH;
    fail("flash attention -fa 2: bf16 and fp16 builds only");
#else
    if (B * NH * T == 0) return;  // a grid of 0 blocks is a launch error
    switch (C / NH) {
        case 16: flash_mma_forward<16>(out, lse, qkv, B, T, C, NH); break;
        case 32: flash_mma_forward<32>(out, lse, qkv, B, T, C, NH); break;
        case 64: flash_mma_forward<64>(out, lse, qkv, B, T, C, NH); break;
        case 128: flash_mma_forward<128>(out, lse, qkv, B, T, C, NH); break;
        default: fail("flash attention -fa 2: head size %d, not 16, 32, 64 or 128", C / NH);
    }
    launchCheck();
#endif
}
// dqkv (B,T,3C) overwritten from dout, qkv and the forward's lse and D = dout . out (B,T,NH)
inline void attention_whole_backward_mma(floatX* dqkv, const floatX* dout, const floatX* qkv, const float* lse,
                                         const float* D, int B, int T, int C, int NH) {
#if FLOATX_IS_FP32
    (void)dqkv, (void)dout, (void)qkv, (void)lse, (void)D, (void)B, (void)T, (void)C, (void)NH;
    fail("flash attention -fa 2: bf16 and fp16 builds only");
#else
    if (B * NH * T == 0) return;
    switch (C / NH) {
        case 16: flash_mma_backward<16>(dqkv, dout, qkv, lse, D, B, T, C, NH); break;
        case 32: flash_mma_backward<32>(dqkv, dout, qkv, lse, D, B, T, C, NH); break;
        case 64: flash_mma_backward<64>(dqkv, dout, qkv, lse, D, B, T, C, NH); break;
        case 128: flash_mma_backward<128>(dqkv, dout, qkv, lse, D, B, T, C, NH); break;
        default: fail("flash attention -fa 2: head size %d, not 16, 32, 64 or 128", C / NH);
    }
    launchCheck();
#endif
}

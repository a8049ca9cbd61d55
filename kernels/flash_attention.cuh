/*
kernels/flash_attention.cuh: the GPU's attention of a range of queries against a range of keys (AttentionRange)
(kernels/attention.cuh: AttentionRange, the online softmax, the host twin these are checked against).
Read this file first: its kernels run on CUDA cores, one thread a query (or key), in plain loops;
the tensor-core kernels the bf16 and fp16 builds run take the same walk in fragments
(kernels/flash_attention_wmma.cuh, included before the launchers at the end of this file). These
run in the fp32 build and at head sizes the WMMA kernels do not take; GPT-2's 64 in bf16 or fp16
runs the WMMA ones (-fa 1, the default: attention_forward in kernels/attention.cuh chooses).

FlashAttention-2's structure (Dao 2023): a thread block takes a tile of queries of one (b, h) and
walks the tiles of keys and values, staged through shared memory by all its threads together, so
that each k and v element is read from global memory once per tile of queries, not once per query.
The (T,T) scores exist a tile at a time, in registers or shared memory, never in global memory.

    forward                 flash_forward_kernel: 32 queries a block, a thread each; tiles of 32
                            keys in shared fp32; per tile the scores, one rescale of the running
                            sums, o += p v (flash_attend_to_tile), all on CUDA cores. o lives in
                            registers. The fp32 build's kernel, and the bf16 and fp16 builds' at
                            head sizes other than 16, 32, 64 and 128
    backward                flash_dkv_kernel: 32 keys a block, a thread each, summing dk, dv over
                            the query tiles that see them; flash_dq_kernel: 32 queries a block,
                            summing dq over the key tiles they see. Two kernels instead of one
                            with atomic adds into dq (FlashAttention-2's): every sum has one owner
                            and a fixed order, so the bits repeat run to run
One tile of the forward, for query r of the block (flash_attend_to_tile), keys c of the tile:
    s_c = q_r . k_c / sqrt(hs)             (c after r masked in the diagonal tile)
    m' = max(m, max_c s_c);  o, l *= exp(m - m');  p_c = exp(s_c - m');  l += p_c;  o += p_c v_c
and after the last tile out_r = o / l, lse_r = m + log l (what the backward and ring attention use).
Causal ranges: key tiles wholly above a query tile's diagonal are never loaded; in the diagonal
tile each query masks the keys after it. Rows past Tq or Tk are loaded as zeros and never stored.

Registers (ptxas, sm_90): these kernels hold a row in registers (249 for the forward at head size
64, spilling at 128: the fp32 build is for checking, not speed); the tensor-core kernels' counts,
timings and history: kernels/flash_attention_wmma.cuh and docs/gpu.md.
Applied in kernels/attention.cuh: attention_range_forward, attention_range_backward and the small
kernels' attention_range_row_dot, attention_range_output, attention_range_gradients, attention_pack_kv
(their GPU build's branch).
*/
#pragma once
// defines: FLASH_QUERIES, FLASH_KEYS, flash_head_capacity, flash_load_rows, flash_load_stats, flash_pass_rows,
//          flash_attend_to_tile, flash_forward_kernel, flash_dkv_from_queries, flash_dkv_kernel, flash_dq_from_keys,
//          flash_dq_kernel, flash_row_dot_kernel, flash_output_kernel, flash_gradients_kernel,
//          flash_launch_forward, flash_launch_backward, flash_pack_kv_kernel,
//          flash_row_dot_kernel128, flash_output_kernel128, flash_gradients_kernel128, flash_forward_any_head,
//          flash_backward_any_head, attention_whole_forward_wmma, attention_whole_backward_wmma
#define FLASH_QUERIES 32  // Br: queries a block, a thread each (CUDA-core kernels)
#define FLASH_KEYS 32     // Bc: keys a tile; equal to Br, so a causal query tile has one diagonal key tile
static_assert(FLASH_QUERIES == FLASH_KEYS, "one diagonal key tile per query tile");

// the smallest compiled head-size capacity that holds hs: o, dq or dk dv live in registers, whose
// count the compiler must know
inline int flash_head_capacity(int hs) {
    if (hs > 128) fail("attention: head size %d, more than the 128 the flash kernels are compiled for", hs);
    return hs <= 16 ? 16 : hs <= 32 ? 32 : hs <= 64 ? 64 : 128;
}

// rows first .. first + rows - 1 of one head (hs values at src + row * stride), into a shared fp32
// tile at tile[r * row_step + i * channel_step]; rows r >= valid are zeros. All the block's threads
// take part, neighbours on neighbouring channels (coalesced reads)
__device__ inline void flash_load_rows(float* tile, int row_step, int channel_step, const floatX* src, size_t stride,
                                       size_t first, int rows, int valid, int hs) {
    for (int e = threadIdx.x; e < rows * hs; e += blockDim.x) {
        int r = e / hs, i = e % hs;
        tile[r * row_step + i * channel_step] = r < valid ? to_float(src[(first + r) * stride + i]) : 0.0f;
    }
}
// one head's statistic (lse or D: stat points at head h of row 0, NH apart) of rows first ..
__device__ inline void flash_load_stats(float* tile, const float* stat, int NH, size_t first, int rows, int valid) {
    for (int r = threadIdx.x; r < rows; r += blockDim.x) tile[r] = r < valid ? stat[(first + r) * NH] : 0.0f;
}

// ---------------------------------------------------------------- forward on CUDA cores
// query r of the block against the first `keys` keys of the tile: the scores, then the online
// softmax with one rescale for the tile (m' = max(m, max_c s_c); o, l times exp(m - m')), then
// p_c = exp(s_c - m') added to l and p_c v_c to o, keys in order
template <int HS_MAX>
__device__ inline void flash_attend_to_tile(float (&o)[HS_MAX], float& m, float& l,
                                            const float (*q_tile)[FLASH_QUERIES], const float (*k_tile)[HS_MAX],
                                            const float (*v_tile)[HS_MAX], int r, int keys, int hs, float scale) {
    float s[FLASH_KEYS], tile_max = -INFINITY;
    #pragma unroll
    for (int c = 0; c < FLASH_KEYS; c++) {
        if (c >= keys) continue;
        float dot = 0.0f;
        for (int i = 0; i < hs; i++)
            dot += q_tile[i][r] * k_tile[c][i];  // q transposed: no bank conflicts; k: a broadcast
        s[c] = dot * scale;
        tile_max = fmaxf(tile_max, s[c]);
    }
    // keys > 0 (the caller's condition): tile_max is finite, so m_new is, and exp never sees -inf - -inf
    float m_new = fmaxf(m, tile_max), rescale = expf(m - m_new);  // before any key: m = -inf, rescale 0
    l *= rescale;
    #pragma unroll
    for (int i = 0; i < HS_MAX; i++) o[i] *= rescale;
    #pragma unroll
    for (int c = 0; c < FLASH_KEYS; c++) {
        if (c >= keys) continue;
        float p = expf(s[c] - m_new);
        l += p;
        #pragma unroll
        for (int i = 0; i < HS_MAX; i++)
            if (i < hs) o[i] += p * v_tile[c][i];
    }
    m = m_new;
}

// grid (Tq / FLASH_QUERIES rounded up, B * NH), FLASH_QUERIES threads: thread r owns query q0 + r
template <int HS_MAX>
__global__ void flash_forward_kernel(AttentionRange a, const floatX* q, const floatX* kv, float* out, float* lse) {
    // fp32 tiles: 48 KB at HS_MAX 128, the most a block may declare statically
    __shared__ float q_tile[HS_MAX][FLASH_QUERIES], k_tile[FLASH_KEYS][HS_MAX], v_tile[FLASH_KEYS][HS_MAX];
    int b = blockIdx.y / a.NH, h = blockIdx.y % a.NH, hs = a.C / a.NH;
    int q0 = blockIdx.x * FLASH_QUERIES, r = threadIdx.x, t = q0 + r;
    size_t q_first = attention_range_q_row(a, b, q0), kv_first = attention_range_kv_row(a, b, 0);
    float scale = 1.0f / sqrtf((float)hs), o[HS_MAX], m = -INFINITY, l = 0.0f;
    float* o_row = out + (q_first + r) * a.C + h * hs;
    float* lse_row = lse + (q_first + r) * a.NH + h;
    #pragma unroll
    for (int i = 0; i < HS_MAX; i++) o[i] = !a.first && t < a.Tq && i < hs ? o_row[i] : 0.0f;
    if (!a.first && t < a.Tq) m = *lse_row, l = 1.0f;  // the ranges so far: weight 1 at m = lse
    flash_load_rows(&q_tile[0][0], 1, FLASH_QUERIES, q + h * hs, 3 * a.C, q_first, FLASH_QUERIES, a.Tq - q0, hs);
    // threads with t >= Tq stay: they load their share of every tile and meet every barrier
    int key_end = a.causal ? min(q0 + FLASH_QUERIES, a.Tq) : a.Tk;  // tiles from key_end on: above the diagonal
    for (int k0 = 0; k0 < key_end; k0 += FLASH_KEYS) {
        flash_load_rows(&k_tile[0][0], HS_MAX, 1, kv + h * hs, a.kv_stride, kv_first + k0, FLASH_KEYS, a.Tk - k0, hs);
        flash_load_rows(&v_tile[0][0], HS_MAX, 1, kv + a.C + h * hs, a.kv_stride, kv_first + k0, FLASH_KEYS, a.Tk - k0,
                        hs);
        __syncthreads();  // every thread's loads (q's too, the first time) are in before any thread reads the tiles
        int keys = min(FLASH_KEYS, a.causal ? t - k0 + 1 : a.Tk - k0);
        if (t < a.Tq && keys > 0) flash_attend_to_tile<HS_MAX>(o, m, l, q_tile, k_tile, v_tile, r, keys, hs, scale);
        __syncthreads();  // every thread is done with the tiles before the next pass overwrites them
    }
    if (t >= a.Tq) return;
    #pragma unroll
    for (int i = 0; i < HS_MAX; i++)
        if (i < hs) o_row[i] = o[i] / l;
    *lse_row = m + logf(l);
}

// ---------------------------------------------------------------- backward on CUDA cores
// a pass's rows of the other side: 1024 channels' worth (32 rows at head size 32, 16 at 64, 8 at
// 128), so that a block's own two fp32 tiles and a pass's two stay in 48 KB of static shared memory
template <int HS_MAX>
__host__ __device__ constexpr int flash_pass_rows() {
    return 1024 / HS_MAX < 32 ? 1024 / HS_MAX : 32;
}

// key j (column c of the block's k, v tiles) against the pass's queries t = t0 + r in order;
// the queries that do not see it (before j in a causal range, past Tq) are skipped
template <int HS_MAX, int ROWS>
__device__ inline void flash_dkv_from_queries(const AttentionRange& a, float (&dk)[HS_MAX], float (&dv)[HS_MAX],
                                              const float (*q_tile)[HS_MAX], const float (*dy_tile)[HS_MAX],
                                              const float* lse_tile, const float* D_tile,
                                              const float (*k_tile)[FLASH_KEYS], const float (*v_tile)[FLASH_KEYS],
                                              int c, int t0, int j, int hs, float scale) {
    for (int r = 0; r < ROWS; r++) {
        int t = t0 + r;
        if ((a.causal && t < j) || t >= a.Tq) continue;
        float s = 0.0f, dp = 0.0f;
        for (int i = 0; i < hs; i++) {  // q, dout: the same row for every thread (a broadcast); k, v: a column each
            s += q_tile[r][i] * k_tile[i][c];
            dp += dy_tile[r][i] * v_tile[i][c];
        }
        float p = expf(s * scale - lse_tile[r]), ds = p * (dp - D_tile[r]) * scale;
        #pragma unroll
        for (int i = 0; i < HS_MAX; i++)
            if (i < hs) {
                dk[i] += ds * q_tile[r][i];
                dv[i] += p * dy_tile[r][i];
            }
    }
}

// grid (Tk / FLASH_KEYS rounded up, B * NH), FLASH_KEYS threads: thread c owns key k0 + c, whose
// dk and dv it sums in registers over every query tile that sees it, then adds to dkv
template <int HS_MAX>
__global__ void flash_dkv_kernel(AttentionRange a, const floatX* q, const floatX* kv, float* dkv, const floatX* dout,
                                 const float* lse, const float* D) {
    constexpr int ROWS = flash_pass_rows<HS_MAX>();
    __shared__ float k_tile[HS_MAX][FLASH_KEYS], v_tile[HS_MAX][FLASH_KEYS];  // (channel, key): a column per thread
    __shared__ float q_tile[ROWS][HS_MAX], dy_tile[ROWS][HS_MAX], lse_tile[ROWS], D_tile[ROWS];
    int b = blockIdx.y / a.NH, h = blockIdx.y % a.NH, hs = a.C / a.NH;
    int k0 = blockIdx.x * FLASH_KEYS, c = threadIdx.x, j = k0 + c;
    size_t q_first = attention_range_q_row(a, b, 0), kv_first = attention_range_kv_row(a, b, 0);
    float scale = 1.0f / sqrtf((float)hs), dk[HS_MAX], dv[HS_MAX];
    #pragma unroll
    for (int i = 0; i < HS_MAX; i++) dk[i] = dv[i] = 0.0f;
    flash_load_rows(&k_tile[0][0], 1, FLASH_KEYS, kv + h * hs, a.kv_stride, kv_first + k0, FLASH_KEYS, a.Tk - k0, hs);
    flash_load_rows(&v_tile[0][0], 1, FLASH_KEYS, kv + a.C + h * hs, a.kv_stride, kv_first + k0, FLASH_KEYS, a.Tk - k0,
                    hs);
    for (int t0 = a.causal ? k0 : 0; t0 < a.Tq; t0 += ROWS) {  // causal: queries before k0 see none of these keys
        flash_load_rows(&q_tile[0][0], HS_MAX, 1, q + h * hs, 3 * a.C, q_first + t0, ROWS, a.Tq - t0, hs);
        flash_load_rows(&dy_tile[0][0], HS_MAX, 1, dout + h * hs, a.C, q_first + t0, ROWS, a.Tq - t0, hs);
        flash_load_stats(lse_tile, lse + h, a.NH, q_first + t0, ROWS, a.Tq - t0);
        flash_load_stats(D_tile, D + h, a.NH, q_first + t0, ROWS, a.Tq - t0);
        __syncthreads();  // loads in before use
        if (j < a.Tk)
            flash_dkv_from_queries<HS_MAX, ROWS>(a, dk, dv, q_tile, dy_tile, lse_tile, D_tile, k_tile, v_tile, c, t0, j,
                                                 hs, scale);
        __syncthreads();  // uses done before the next pass overwrites the tiles
    }
    if (j >= a.Tk) return;
    float* dk_row = dkv + (kv_first + j) * 2 * a.C + h * hs;
    #pragma unroll
    for (int i = 0; i < HS_MAX; i++)
        if (i < hs) {
            dk_row[i] += dk[i];
            dk_row[a.C + i] += dv[i];  // dv at dk + C
        }
}

// query t (column r of the block's q, dout tiles) against the pass's keys j = k0 + c in order;
// the keys it does not see (after t in a causal range, past Tk) end the pass
template <int HS_MAX, int ROWS>
__device__ inline void flash_dq_from_keys(const AttentionRange& a, float (&dq)[HS_MAX],
                                          const float (*q_tile)[FLASH_QUERIES], const float (*dy_tile)[FLASH_QUERIES],
                                          const float (*k_tile)[HS_MAX], const float (*v_tile)[HS_MAX], float lse_t,
                                          float D_t, int r, int k0, int t, int hs, float scale) {
    for (int c = 0; c < ROWS; c++) {
        int j = k0 + c;
        if ((a.causal && j > t) || j >= a.Tk) break;  // keys come in order: the first unseen one ends the pass
        float s = 0.0f, dp = 0.0f;
        for (int i = 0; i < hs; i++) {
            s += q_tile[i][r] * k_tile[c][i];
            dp += dy_tile[i][r] * v_tile[c][i];
        }
        float ds = expf(s * scale - lse_t) * (dp - D_t) * scale;
        #pragma unroll
        for (int i = 0; i < HS_MAX; i++)
            if (i < hs) dq[i] += ds * k_tile[c][i];
    }
}

// grid (Tq / FLASH_QUERIES rounded up, B * NH), FLASH_QUERIES threads: thread r owns query q0 + r,
// whose dq it sums in registers over every key tile it sees, then adds to dq
template <int HS_MAX>
__global__ void flash_dq_kernel(AttentionRange a, const floatX* q, const floatX* kv, float* dq, const floatX* dout,
                                const float* lse, const float* D) {
    constexpr int ROWS = flash_pass_rows<HS_MAX>();
    __shared__ float q_tile[HS_MAX][FLASH_QUERIES], dy_tile[HS_MAX][FLASH_QUERIES];  // (channel, query)
    __shared__ float k_tile[ROWS][HS_MAX], v_tile[ROWS][HS_MAX];                     // (key, channel): a broadcast
    int b = blockIdx.y / a.NH, h = blockIdx.y % a.NH, hs = a.C / a.NH;
    int q0 = blockIdx.x * FLASH_QUERIES, r = threadIdx.x, t = q0 + r;
    size_t q_first = attention_range_q_row(a, b, q0), kv_first = attention_range_kv_row(a, b, 0);
    size_t stat = (q_first + r) * a.NH + h;
    float lse_t = t < a.Tq ? lse[stat] : 0.0f, D_t = t < a.Tq ? D[stat] : 0.0f;
    float scale = 1.0f / sqrtf((float)hs), dq_sum[HS_MAX];
    #pragma unroll
    for (int i = 0; i < HS_MAX; i++) dq_sum[i] = 0.0f;
    flash_load_rows(&q_tile[0][0], 1, FLASH_QUERIES, q + h * hs, 3 * a.C, q_first, FLASH_QUERIES, a.Tq - q0, hs);
    flash_load_rows(&dy_tile[0][0], 1, FLASH_QUERIES, dout + h * hs, a.C, q_first, FLASH_QUERIES, a.Tq - q0, hs);
    int key_end = a.causal ? min(q0 + FLASH_QUERIES, a.Tq) : a.Tk;
    for (int k0 = 0; k0 < key_end; k0 += ROWS) {
        flash_load_rows(&k_tile[0][0], HS_MAX, 1, kv + h * hs, a.kv_stride, kv_first + k0, ROWS, a.Tk - k0, hs);
        flash_load_rows(&v_tile[0][0], HS_MAX, 1, kv + a.C + h * hs, a.kv_stride, kv_first + k0, ROWS, a.Tk - k0, hs);
        __syncthreads();  // loads in before use
        if (t < a.Tq)
            flash_dq_from_keys<HS_MAX, ROWS>(a, dq_sum, q_tile, dy_tile, k_tile, v_tile, lse_t, D_t, r, k0, t, hs,
                                             scale);
        __syncthreads();  // uses done before the next pass overwrites the tiles
    }
    if (t >= a.Tq) return;
    float* dq_row = dq + (q_first + r) * a.C + h * hs;
    #pragma unroll
    for (int i = 0; i < HS_MAX; i++)
        if (i < hs) dq_row[i] += dq_sum[i];
}

// ---------------------------------------------------------------- the small kernels around them
__global__ void flash_row_dot_kernel(float* D, const floatX* dout, const floatX* out, int rows, int C, int NH) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;  // (row, h)
    if (i < rows * NH) attention_range_row_dot_row(i / NH, i % NH, D, dout, out, C, NH);
}
__global__ void flash_output_kernel(floatX* out, const float* acc, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = from_float(acc[i]);
}
__global__ void flash_gradients_kernel(floatX* dqkv, const float* dq, const float* dkv, size_t rows, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, row = i / (3 * C), c = i % (3 * C);
    if (row < rows) dqkv[i] = from_float(c < (size_t)C ? dq[row * C + c] : dkv[row * 2 * C + c - C]);
}

__global__ void flash_pack_kv_kernel(floatX* kv, const floatX* qkv, size_t rows, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, row = i / (2 * C), c = i % (2 * C);
    if (row < rows) kv[i] = qkv[row * 3 * C + C + c];
}

// The same three 16 bytes a thread (Packed128), where C is a multiple of the pack and the arrays
// 16-byte aligned: on an H200 the ones above took 54 (row dot), 64 (gradients) and 18 us
// (output) a layer at B 8, T 1024 (docs/gpu.md). The row dot: a warp a row, each lane a pack of
// one head, each head's packs summed over its lanes by shuffles in a fixed order (hs / pack lanes
// a head, a power of two up to 32)
__global__ void flash_row_dot_kernel128(float* D, const floatX* dout, const floatX* out, int rows, int C, int NH) {
    constexpr int P = Packed128<floatX>::size;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32, lanes_a_head = C / NH / P;
    if (row >= rows) return;
    for (int p0 = 0; p0 < C / P; p0 += 32) {  // C / P is a multiple of 32 / lanes_a_head: whole heads a round
        int pack = p0 + lane;
        float sum = 0.0f;
        if (pack < C / P) {
            Packed128<floatX> dy = load128(dout + (size_t)row * C + pack * P),
                              y = load128(out + (size_t)row * C + pack * P);
            for (int k = 0; k < P; k++) sum += to_float(dy.v[k]) * to_float(y.v[k]);
        }
        for (int o = 1; o < lanes_a_head; o *= 2) sum += __shfl_xor_sync(0xffffffff, sum, o);
        if (pack < C / P && lane % lanes_a_head == 0) D[(size_t)row * NH + pack / lanes_a_head] = sum;
    }
}
__global__ void flash_output_kernel128(floatX* out, const float* acc, size_t n) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * Packed128<floatX>::size;
    if (i >= n) return;
    store128_rounded(out + i, acc + i);
}
__global__ void flash_gradients_kernel128(floatX* dqkv, const float* dq, const float* dkv, size_t rows, int C) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * Packed128<floatX>::size, row = i / (3 * C),
           c = i % (3 * C);
    if (row >= rows) return;
    const float* src = c < (size_t)C ? dq + row * C + c : dkv + row * 2 * C + c - C;  // a pack lies wholly in one
    store128_rounded(dqkv + i, src);
}

// ---------------------------------------------------------------- the tensor-core kernels (bf16, fp16)
#include "flash_attention_wmma.cuh"  // defines: flash_forward_wmma_kernel, flash_dq_wmma_kernel, ...

// ---------------------------------------------------------------- launchers
// Out float: a range's fp32 share (ring attention, the CUDA-core kernels); Out floatX: the one range
// of one rank's whole sequences, its output final (WMMA only: flash_wmma_head)
template <int HS_MAX, typename Out>
inline void flash_launch_forward(const AttentionRange& a, const floatX* q, const floatX* kv, Out* out, float* lse) {
#if !FLOATX_IS_FP32
    if (a.C / a.NH == HS_MAX) {  // 16, 32, 64 or 128: the WMMA kernels compile their loops for HS_MAX
        dim3 grid(ceil_div(a.Tq, WMMA_SIDE * WMMA_FORWARD_WARPS), a.B * a.NH);
        flash_forward_wmma_kernel<HS_MAX, Out><<<grid, 32 * WMMA_FORWARD_WARPS>>>(a, q, kv, out, lse);
        return;
    }
#endif
    dim3 grid(ceil_div(a.Tq, FLASH_QUERIES), a.B * a.NH);
    if constexpr (std::is_same<Out, float>::value)
        flash_forward_kernel<HS_MAX><<<grid, FLASH_QUERIES>>>(a, q, kv, out, lse);
    else
        fail("flash attention: a floatX output needs the WMMA kernels (flash_wmma_head)");
}
// dq rows dq_stride apart, dk dv rows dkv_stride apart (dv at dk + C)
template <int HS_MAX, typename Out>
inline void flash_launch_backward(const AttentionRange& a, const floatX* q, const floatX* kv, Out* dq, int dq_stride,
                                  Out* dkv, int dkv_stride, const floatX* dout, const float* lse, const float* D) {
#if !FLOATX_IS_FP32
    if (a.C / a.NH == HS_MAX) {  // 16, 32, 64 or 128: the WMMA kernels compile their loops for HS_MAX
        constexpr int rows = WMMA_SIDE * WMMA_BACKWARD_WARPS;
        dim3 dq_grid(ceil_div(a.Tq, rows), a.B * a.NH), dkv_grid(ceil_div(a.Tk, rows), a.B * a.NH);
        flash_dq_wmma_kernel<HS_MAX, Out><<<dq_grid, 32 * WMMA_BACKWARD_WARPS>>>(a, q, kv, dq, dq_stride, dout, lse, D);
        flash_dkv_wmma_kernel<HS_MAX, Out><<<dkv_grid, 32 * WMMA_BACKWARD_WARPS>>>(a, q, kv, dkv, dkv_stride, dout, lse,
                                                                                  D);
        return;
    }
#endif
    if constexpr (std::is_same<Out, float>::value) {
        dim3 dq_grid(ceil_div(a.Tq, FLASH_QUERIES), a.B * a.NH), dkv_grid(ceil_div(a.Tk, FLASH_KEYS), a.B * a.NH);
        flash_dq_kernel<HS_MAX><<<dq_grid, FLASH_QUERIES>>>(a, q, kv, dq, dout, lse, D);
        flash_dkv_kernel<HS_MAX><<<dkv_grid, FLASH_KEYS>>>(a, q, kv, dkv, dout, lse, D);
    } else {
        fail("flash attention: floatX gradients need the WMMA kernels (flash_wmma_head)");
    }
}

// the launchers compiled for the head-size capacity that holds a.C / a.NH
template <typename Out>
inline void flash_forward_any_head(const AttentionRange& a, const floatX* q, const floatX* kv, Out* out, float* lse) {
    switch (flash_head_capacity(a.C / a.NH)) {
        case 16: flash_launch_forward<16>(a, q, kv, out, lse); break;
        case 32: flash_launch_forward<32>(a, q, kv, out, lse); break;
        case 64: flash_launch_forward<64>(a, q, kv, out, lse); break;
        default: flash_launch_forward<128>(a, q, kv, out, lse); break;
    }
    launchCheck();
}
template <typename Out>
inline void flash_backward_any_head(const AttentionRange& a, const floatX* q, const floatX* kv, Out* dq, int dq_stride,
                                    Out* dkv, int dkv_stride, const floatX* dout, const float* lse, const float* D) {
    switch (flash_head_capacity(a.C / a.NH)) {
        case 16: flash_launch_backward<16>(a, q, kv, dq, dq_stride, dkv, dkv_stride, dout, lse, D); break;
        case 32: flash_launch_backward<32>(a, q, kv, dq, dq_stride, dkv, dkv_stride, dout, lse, D); break;
        case 64: flash_launch_backward<64>(a, q, kv, dq, dq_stride, dkv, dkv_stride, dout, lse, D); break;
        default: flash_launch_backward<128>(a, q, kv, dq, dq_stride, dkv, dkv_stride, dout, lse, D); break;
    }
    launchCheck();
}
// one rank's whole sequences, one causal range (a.first), with the WMMA kernels (flash_wmma_head):
// out written in floatX, with no fp32 scratch and no pass to round it (attention_forward)
inline void attention_whole_forward_wmma(const AttentionRange& a, const floatX* q, const floatX* kv, floatX* out,
                                         float* lse) {
    if (a.B * a.NH * a.Tq == 0) return;
    flash_forward_any_head(a, q, kv, out, lse);
}
// the backward of attention_whole_forward_wmma: dq, dk, dv written in floatX straight into dqkv's
// rows (3C), with no fp32 sums to zero first and no pass to round them (attention_backward)
inline void attention_whole_backward_wmma(const AttentionRange& a, const floatX* q, const floatX* kv, floatX* dqkv,
                                          const floatX* dout, const float* lse, const float* D) {
    if (a.B * a.NH * a.Tq == 0) return;
    flash_backward_any_head(a, q, kv, dqkv, 3 * a.C, dqkv + a.C, 3 * a.C, dout, lse, D);
}

/*
kernels/flash_attention.cuh: the GPU's attention of a block of queries against a block of keys
(kernels/attention.cuh: AttentionBlock, the online softmax, the host twin these are checked against).

FlashAttention-2's structure (Dao 2023): a thread block takes a tile of queries of one (b, h) and
walks the tiles of keys and values, staged through shared memory by all its threads together, so
that each k and v element is read from global memory once per tile of queries, not once per query.
The (T,T) scores exist a tile at a time, in registers or shared memory, never in global memory.

    forward, fp32 build     flash_forward_kernel: 32 queries a block, a thread each; tiles of 32
                            keys in shared fp32; per tile the scores, one rescale of the running
                            sums, o += p v, all on CUDA cores. o lives in registers
    forward, bf16 / fp16    flash_forward_wmma_kernel: the same walk with both products on tensor
                            cores (WMMA 16x16x16 fragments, fp32 sums): a warp owns 16 queries, a
                            block 4 warps (2 at head size 128); the scores go through shared memory,
                            where 16 lanes run the online softmax by rows in fp32, and o stays in
                            shared memory in fp32 (which lane holds which accumulator element is
                            unspecified, so code may not read fragments). Head sizes that are not
                            a multiple of 16 take the fp32 build's kernel. Not in the fp32 build: its
                            WMMA is TF32 (10-bit mantissa), which misses the fp32 tolerances
    backward, fp32 build    flash_dkv_kernel: 32 keys a block, a thread each, summing dk, dv over
                            the query tiles that see them; flash_dq_kernel: 32 queries a block,
                            summing dq over the key tiles they see. Two kernels instead of one
                            with atomic adds into dq (FlashAttention-2's): every sum has one owner
                            and a fixed order, so the bits repeat run to run
    backward, bf16 / fp16   flash_dkv_wmma_kernel, flash_dq_wmma_kernel: the same two walks with
                            the five products on tensor cores (s and dout v^T into shared memory,
                            p and ds formed there by the lanes and rounded to floatX, then dv += p^T
                            dout, dk += ds^T q, dq += ds k); a warp owns 16 keys or queries, whose
                            sums stay in accumulator fragments (registers) across every tile
Causal blocks: key tiles wholly above a query tile's diagonal are never loaded; in the diagonal
tile each query masks the keys after it. Rows past Tq or Tk are loaded as zeros and never stored.

Registers and shared memory (ptxas, sm_90, bf16, head size 64): the WMMA kernels 90 (forward),
128 (dk dv), 96 (dq) registers a thread and 45, 29, 46 KB of shared memory; the CUDA-core kernels
hold a row in registers (249 for the forward at 64, spilling at 128: the fp32 build is for checking,
not for speed).
What the emulated build (tests/emu) proves of these kernels: the arithmetic, masks, padding and
tile walks against the host twin, barriers (ThreadSanitizer), WMMA's contract (warp-collective
calls, aligned pointers and leading dimensions). What it cannot: speed, shared-memory bank
conflicts (the forward's s, p and o rows are padded for its lane-per-row softmax: 2-way; the
16-bit tiles' rows, 128 bytes apart, likely conflict 8-way in fragment loads), the real fragment layout
and a tensor core's order of summation (results agree within tolerance, not bit for bit with the
emulator). Not here: Hopper's wgmma and TMA (FlashAttention-3: asynchronous warpgroup MMAs from
swizzled shared memory, tiles copied by a unit of their own, producer and consumer warps), about
1.5-2x on an H100 by its paper, at the cost of PTX or CUTLASS and an asynchronous pipeline to hold
in mind; dev/attention_forward.cu's header says more.
Applied in kernels/attention.cuh: attention_block_forward, attention_block_backward (GPU build).
*/
#pragma once
// defines: FLASH_QUERIES, FLASH_KEYS, flash_head_capacity, flash_load_rows, flash_load_stats, flash_pass_rows,
//          flash_attend_to_tile, flash_forward_kernel, flash_dkv_from_queries, flash_dkv_kernel, flash_dq_from_keys,
//          flash_dq_kernel, flash_row_dot_kernel, flash_output_kernel, flash_gradients_kernel, attention_block_forward,
//          attention_block_backward, attention_block_row_dot, attention_block_output, attention_block_gradients,
//          WMMA_SIDE, WMMA_KEYS, WMMA_S_LD, WMMA_P_LD, wmma_o_ld, wmma_query_warps, flash_forward_wmma_kernel, wmma_load_rows, WmmaSums,
//          WmmaRows, wmma_add_pv, wmma_softmax_row,
//          flash_launch_forward, flash_launch_backward, flash_pack_kv_kernel, attention_pack_kv, wmma_dkv_warps, wmma_dq_warps,
//          wmma_warp_floats, wmma_rows_times_cols, wmma_add_product, wmma_add_rows, flash_dkv_wmma_kernel, flash_dq_wmma_kernel
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
__device__ inline void flash_load_rows(float* tile, int row_step, int channel_step, const floatX* src, size_t stride, size_t first,
                                       int rows, int valid, int hs) {
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
__device__ inline void flash_attend_to_tile(float (&o)[HS_MAX], float& m, float& l, const float (*q_tile)[FLASH_QUERIES],
                                            const float (*k_tile)[HS_MAX], const float (*v_tile)[HS_MAX], int r, int keys, int hs,
                                            float scale) {
    float s[FLASH_KEYS], tile_max = -INFINITY;
    #pragma unroll
    for (int c = 0; c < FLASH_KEYS; c++) {
        if (c >= keys) continue;
        float dot = 0.0f;
        for (int i = 0; i < hs; i++) dot += q_tile[i][r] * k_tile[c][i];  // q transposed: no bank conflicts; k: a broadcast
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
__global__ void flash_forward_kernel(AttentionBlock a, const floatX* q, const floatX* kv, float* out, float* lse) {
    // fp32 tiles: 48 KB at HS_MAX 128, the most a block may declare statically
    __shared__ float q_tile[HS_MAX][FLASH_QUERIES], k_tile[FLASH_KEYS][HS_MAX], v_tile[FLASH_KEYS][HS_MAX];
    int b = blockIdx.y / a.NH, h = blockIdx.y % a.NH, hs = a.C / a.NH;
    int q0 = blockIdx.x * FLASH_QUERIES, r = threadIdx.x, t = q0 + r;
    size_t q_first = attention_block_q_row(a, b, q0), kv_first = attention_block_kv_row(a, b, 0);
    float scale = 1.0f / sqrtf((float)hs), o[HS_MAX], m = -INFINITY, l = 0.0f;
    float* o_row = out + (q_first + r) * a.C + h * hs;
    float* lse_row = lse + (q_first + r) * a.NH + h;
    #pragma unroll
    for (int i = 0; i < HS_MAX; i++) o[i] = !a.first && t < a.Tq && i < hs ? o_row[i] : 0.0f;
    if (!a.first && t < a.Tq) m = *lse_row, l = 1.0f;  // the blocks so far: weight 1 at m = lse
    flash_load_rows(&q_tile[0][0], 1, FLASH_QUERIES, q + h * hs, 3 * a.C, q_first, FLASH_QUERIES, a.Tq - q0, hs);
    // threads with t >= Tq stay: they load their share of every tile and meet every barrier
    int key_end = a.causal ? min(q0 + FLASH_QUERIES, a.Tq) : a.Tk;  // tiles from key_end on: above the diagonal
    for (int k0 = 0; k0 < key_end; k0 += FLASH_KEYS) {
        flash_load_rows(&k_tile[0][0], HS_MAX, 1, kv + h * hs, a.kv_stride, kv_first + k0, FLASH_KEYS, a.Tk - k0, hs);
        flash_load_rows(&v_tile[0][0], HS_MAX, 1, kv + a.C + h * hs, a.kv_stride, kv_first + k0, FLASH_KEYS, a.Tk - k0, hs);
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

// ---------------------------------------------------------------- forward on tensor cores (WMMA)
#if !FLOATX_IS_FP32
#include <mma.h>  // defines: nvcuda::wmma (tests/emu/mma.h in the emulated build)
#define WMMA_SIDE 16  // m = n = k = 16: a fragment's rows, columns and depth for bf16 and fp16
#define WMMA_KEYS 32  // Bc: keys a tile, two fragments wide
// The forward's softmax has a lane per row: 16 lanes read 16 rows of s, p and o at once. Rows 32 floats
// (or 64 bf16) apart fall in one shared-memory bank, a 16-way conflict; padded leading dimensions
// spread them over 8 banks (2-way), and keep every 16-row and 16-column step 32-byte aligned for WMMA
#define WMMA_S_LD (WMMA_KEYS + 4)                                          // s, fp32: 36
#define WMMA_P_LD (WMMA_KEYS + 8)                                          // p, floatX: 40 (80 bytes)
template <int HS_MAX> __host__ __device__ constexpr int wmma_o_ld() { return HS_MAX + 4; }  // o, fp32
// 16 queries a warp; 4 warps where the tiles fit the 48 KB of static shared memory, 2 at head size 128
template <int HS_MAX> __host__ __device__ constexpr int wmma_query_warps() { return HS_MAX >= 128 ? 2 : 4; }
typedef nvcuda::wmma::fragment<nvcuda::wmma::accumulator, WMMA_SIDE, WMMA_SIDE, WMMA_SIDE, float> WmmaSums;
typedef nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, WMMA_SIDE, WMMA_SIDE, WMMA_SIDE, floatX, nvcuda::wmma::row_major> WmmaRows;

// rows first .. of one head into a shared floatX tile (row-major, leading dimension ld), zeros past valid
__device__ inline void wmma_load_rows(floatX* tile, int ld, const floatX* src, size_t stride, size_t first, int rows, int valid, int hs) {
    for (int e = threadIdx.x; e < rows * hs; e += blockDim.x) {
        int r = e / hs, i = e % hs;
        tile[r * ld + i] = r < valid ? src[(first + r) * stride + i] : from_float(0.0f);
    }
}

// one warp: out (16 x WMMA_KEYS fp32, leading dimension ld) = rows (its 16, row-major, ld HS_MAX)
// times cols^T, where cols is a (WMMA_KEYS, hs) row-major tile read column-major: the scores q k^T
// (rows q, cols k), and in the backward dout v^T, k q^T and v dout^T
template <int HS_MAX>
__device__ inline void wmma_rows_times_cols(float* out, int ld, const floatX* rows, const floatX* cols, int hs) {
    namespace wmma = nvcuda::wmma;
    for (int n = 0; n < WMMA_KEYS; n += WMMA_SIDE) {
        WmmaSums sums;
        wmma::fill_fragment(sums, 0.0f);
        for (int i = 0; i < hs; i += WMMA_SIDE) {
            WmmaRows a;
            wmma::fragment<wmma::matrix_b, WMMA_SIDE, WMMA_SIDE, WMMA_SIDE, floatX, wmma::col_major> b;
            wmma::load_matrix_sync(a, rows + i, HS_MAX);
            wmma::load_matrix_sync(b, cols + n * HS_MAX + i, HS_MAX);
            wmma::mma_sync(sums, a, b, sums);
        }
        wmma::store_matrix_sync(out + n, sums, ld, wmma::mem_row_major);
    }
}
// one warp: o (its 16 rows, fp32, ld wmma_o_ld) += p (16 x WMMA_KEYS, ld WMMA_P_LD) times v
// (WMMA_KEYS x hs), keys in order
template <int HS_MAX>
__device__ inline void wmma_add_pv(float* o, const floatX* p, const floatX* v, int hs) {
    namespace wmma = nvcuda::wmma;
    for (int i = 0; i < hs; i += WMMA_SIDE) {
        WmmaSums o_part;
        wmma::load_matrix_sync(o_part, o + i, wmma_o_ld<HS_MAX>(), wmma::mem_row_major);
        for (int key = 0; key < WMMA_KEYS; key += WMMA_SIDE) {
            WmmaRows p_part;
            wmma::fragment<wmma::matrix_b, WMMA_SIDE, WMMA_SIDE, WMMA_SIDE, floatX, wmma::row_major> v_part;
            wmma::load_matrix_sync(p_part, p + key, WMMA_P_LD);
            wmma::load_matrix_sync(v_part, v + key * HS_MAX + i, HS_MAX);
            wmma::mma_sync(o_part, p_part, v_part, o_part);
        }
        wmma::store_matrix_sync(o + i, o_part, wmma_o_ld<HS_MAX>(), wmma::mem_row_major);
    }
}
// one lane, query t against keys k0 .. k0 + WMMA_KEYS - 1: the online softmax on the scores the
// tensor cores left in s_row. Keys the query does not see (after t in a causal block, or past Tk)
// get -inf, so exp gives 0; p goes to p_row as floatX for P V, l sums the fp32 p as lse needs
__device__ inline void wmma_softmax_row(const AttentionBlock& a, float& m, float& l, float* s_row, floatX* p_row, float* o_row,
                                        int t, int k0, int hs, float scale) {
    float tile_max = -INFINITY;
    for (int c = 0; c < WMMA_KEYS; c++) {
        int j = k0 + c;
        s_row[c] = j < a.Tk && (!a.causal || j <= t) ? s_row[c] * scale : -INFINITY;
        tile_max = fmaxf(tile_max, s_row[c]);
    }
    float m_new = fmaxf(m, tile_max);
    float rescale = m_new == -INFINITY ? 1.0f : expf(m - m_new);  // no key yet (a padded row): nothing to rescale
    l *= rescale;
    for (int i = 0; i < hs; i++) o_row[i] *= rescale;
    for (int c = 0; c < WMMA_KEYS; c++) {
        float p = m_new == -INFINITY ? 0.0f : expf(s_row[c] - m_new);
        l += p;
        p_row[c] = from_float(p);
    }
    m = m_new;
}

// grid (Tq / queries rounded up, B * NH), wmma_query_warps warps: warp w owns queries q0 + 16 w ..
template <int HS_MAX>
__global__ void __launch_bounds__(32 * wmma_query_warps<HS_MAX>()) flash_forward_wmma_kernel(AttentionBlock a, const floatX* q,
                                                                                               const floatX* kv, float* out, float* lse) {
    constexpr int QUERIES = WMMA_SIDE * wmma_query_warps<HS_MAX>();
    // floatX tiles as raw 16-bit words, cast at use: the emulated build's bf16 and fp16 are classes
    // with constructors, whose __shared__ arrays would get an initialisation guard (a false race
    // under ThreadSanitizer). Every WMMA pointer 32-byte aligned, every leading dimension 16-byte
    constexpr int O_LD = wmma_o_ld<HS_MAX>();
    __shared__ __align__(32) uint16_t q_bits[QUERIES * HS_MAX], k_bits[WMMA_KEYS * HS_MAX], v_bits[WMMA_KEYS * HS_MAX],
                                      p_bits[QUERIES * WMMA_P_LD];
    __shared__ __align__(32) float s_tile[QUERIES * WMMA_S_LD], o_tile[QUERIES * O_LD];
    static_assert(sizeof(q_bits) + sizeof(k_bits) + sizeof(v_bits) + sizeof(p_bits) + sizeof(s_tile) + sizeof(o_tile) <= 48 * 1024,
                  "over the 48 KB of static shared memory");
    floatX *q_tile = (floatX*)q_bits, *k_tile = (floatX*)k_bits, *v_tile = (floatX*)v_bits, *p_tile = (floatX*)p_bits;
    int b = blockIdx.y / a.NH, h = blockIdx.y % a.NH, hs = a.C / a.NH, q0 = blockIdx.x * QUERIES;
    int row0 = threadIdx.x / 32 * WMMA_SIDE, lane = threadIdx.x % 32, t = q0 + row0 + lane;  // the warp's first row
    size_t q_first = attention_block_q_row(a, b, q0), kv_first = attention_block_kv_row(a, b, 0);
    wmma_load_rows(q_tile, HS_MAX, q + h * hs, 3 * a.C, q_first, QUERIES, a.Tq - q0, hs);
    for (int e = threadIdx.x; e < QUERIES * O_LD; e += blockDim.x) {  // o: the blocks so far, or zeros
        int r = e / O_LD, i = e % O_LD;
        o_tile[e] = !a.first && q0 + r < a.Tq && i < hs ? out[(q_first + r) * a.C + h * hs + i] : 0.0f;
    }
    float m = -INFINITY, l = 0.0f;  // lane < 16: row row0 + lane's running max and sum
    if (!a.first && lane < WMMA_SIDE && t < a.Tq) m = lse[(q_first + row0 + lane) * a.NH + h], l = 1.0f;
    int key_end = a.causal ? min(q0 + QUERIES, a.Tq) : a.Tk;
    for (int k0 = 0; k0 < key_end; k0 += WMMA_KEYS) {
        wmma_load_rows(k_tile, HS_MAX, kv + h * hs, a.kv_stride, kv_first + k0, WMMA_KEYS, a.Tk - k0, hs);
        wmma_load_rows(v_tile, HS_MAX, kv + a.C + h * hs, a.kv_stride, kv_first + k0, WMMA_KEYS, a.Tk - k0, hs);
        __syncthreads();  // every thread's loads (q and o's too, the first time) are in before any warp reads the tiles
        if (!a.causal || k0 <= q0 + row0 + WMMA_SIDE - 1) {  // the same in the whole warp: a tile above its rows is skipped
            float *s = s_tile + row0 * WMMA_S_LD, *o = o_tile + row0 * O_LD;
            floatX* p = p_tile + row0 * WMMA_P_LD;
            wmma_rows_times_cols<HS_MAX>(s, WMMA_S_LD, q_tile + row0 * HS_MAX, k_tile, hs);  // s = q k^T
            __syncwarp();  // a lane reads rows that other lanes' fragments wrote
            if (lane < WMMA_SIDE)
                wmma_softmax_row(a, m, l, s + lane * WMMA_S_LD, p + lane * WMMA_P_LD, o + lane * O_LD, t, k0, hs,
                                 1.0f / sqrtf((float)hs));
            __syncwarp();
            wmma_add_pv<HS_MAX>(o, p, v_tile, hs);
            __syncwarp();  // o's rows are in before lanes rescale them (next tile) or write them out
        }
        __syncthreads();  // every warp is done with k and v before the next pass overwrites them
    }
    if (lane >= WMMA_SIDE || t >= a.Tq) return;  // padded rows are computed, never stored
    const float* o_row = o_tile + (row0 + lane) * O_LD;
    size_t row = q_first + row0 + lane;
    for (int i = 0; i < hs; i++) out[row * a.C + h * hs + i] = o_row[i] / l;
    lse[row * a.NH + h] = m + logf(l);
}
#endif

// ---------------------------------------------------------------- backward on CUDA cores
// a pass's rows of the other side: 1024 channels' worth (32 rows at head size 32, 16 at 64, 8 at
// 128), so that a block's own two fp32 tiles and a pass's two stay in 48 KB of static shared memory
template <int HS_MAX> __host__ __device__ constexpr int flash_pass_rows() { return 1024 / HS_MAX < 32 ? 1024 / HS_MAX : 32; }

// key j (column c of the block's k, v tiles) against the pass's queries t = t0 + r in order;
// the queries that do not see it (before j in a causal block, past Tq) are skipped
template <int HS_MAX, int ROWS>
__device__ inline void flash_dkv_from_queries(const AttentionBlock& a, float (&dk)[HS_MAX], float (&dv)[HS_MAX],
                                              const float (*q_tile)[HS_MAX], const float (*dy_tile)[HS_MAX], const float* lse_tile,
                                              const float* D_tile, const float (*k_tile)[FLASH_KEYS],
                                              const float (*v_tile)[FLASH_KEYS], int c, int t0, int j, int hs, float scale) {
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
__global__ void flash_dkv_kernel(AttentionBlock a, const floatX* q, const floatX* kv, float* dkv, const floatX* dout, const float* lse,
                                 const float* D) {
    constexpr int ROWS = flash_pass_rows<HS_MAX>();
    __shared__ float k_tile[HS_MAX][FLASH_KEYS], v_tile[HS_MAX][FLASH_KEYS];  // (channel, key): a column per thread
    __shared__ float q_tile[ROWS][HS_MAX], dy_tile[ROWS][HS_MAX], lse_tile[ROWS], D_tile[ROWS];
    int b = blockIdx.y / a.NH, h = blockIdx.y % a.NH, hs = a.C / a.NH;
    int k0 = blockIdx.x * FLASH_KEYS, c = threadIdx.x, j = k0 + c;
    size_t q_first = attention_block_q_row(a, b, 0), kv_first = attention_block_kv_row(a, b, 0);
    float scale = 1.0f / sqrtf((float)hs), dk[HS_MAX], dv[HS_MAX];
    #pragma unroll
    for (int i = 0; i < HS_MAX; i++) dk[i] = dv[i] = 0.0f;
    flash_load_rows(&k_tile[0][0], 1, FLASH_KEYS, kv + h * hs, a.kv_stride, kv_first + k0, FLASH_KEYS, a.Tk - k0, hs);
    flash_load_rows(&v_tile[0][0], 1, FLASH_KEYS, kv + a.C + h * hs, a.kv_stride, kv_first + k0, FLASH_KEYS, a.Tk - k0, hs);
    for (int t0 = a.causal ? k0 : 0; t0 < a.Tq; t0 += ROWS) {  // causal: queries before k0 see none of these keys
        flash_load_rows(&q_tile[0][0], HS_MAX, 1, q + h * hs, 3 * a.C, q_first + t0, ROWS, a.Tq - t0, hs);
        flash_load_rows(&dy_tile[0][0], HS_MAX, 1, dout + h * hs, a.C, q_first + t0, ROWS, a.Tq - t0, hs);
        flash_load_stats(lse_tile, lse + h, a.NH, q_first + t0, ROWS, a.Tq - t0);
        flash_load_stats(D_tile, D + h, a.NH, q_first + t0, ROWS, a.Tq - t0);
        __syncthreads();  // loads in before use
        if (j < a.Tk)
            flash_dkv_from_queries<HS_MAX, ROWS>(a, dk, dv, q_tile, dy_tile, lse_tile, D_tile, k_tile, v_tile, c, t0, j, hs, scale);
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
// the keys it does not see (after t in a causal block, past Tk) end the pass
template <int HS_MAX, int ROWS>
__device__ inline void flash_dq_from_keys(const AttentionBlock& a, float (&dq)[HS_MAX], const float (*q_tile)[FLASH_QUERIES],
                                          const float (*dy_tile)[FLASH_QUERIES], const float (*k_tile)[HS_MAX],
                                          const float (*v_tile)[HS_MAX], float lse_t, float D_t, int r, int k0, int t, int hs,
                                          float scale) {
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
__global__ void flash_dq_kernel(AttentionBlock a, const floatX* q, const floatX* kv, float* dq, const floatX* dout, const float* lse,
                                const float* D) {
    constexpr int ROWS = flash_pass_rows<HS_MAX>();
    __shared__ float q_tile[HS_MAX][FLASH_QUERIES], dy_tile[HS_MAX][FLASH_QUERIES];  // (channel, query)
    __shared__ float k_tile[ROWS][HS_MAX], v_tile[ROWS][HS_MAX];                     // (key, channel): a broadcast
    int b = blockIdx.y / a.NH, h = blockIdx.y % a.NH, hs = a.C / a.NH;
    int q0 = blockIdx.x * FLASH_QUERIES, r = threadIdx.x, t = q0 + r;
    size_t q_first = attention_block_q_row(a, b, q0), kv_first = attention_block_kv_row(a, b, 0);
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
        if (t < a.Tq) flash_dq_from_keys<HS_MAX, ROWS>(a, dq_sum, q_tile, dy_tile, k_tile, v_tile, lse_t, D_t, r, k0, t, hs, scale);
        __syncthreads();  // uses done before the next pass overwrites the tiles
    }
    if (t >= a.Tq) return;
    float* dq_row = dq + (q_first + r) * a.C + h * hs;
    #pragma unroll
    for (int i = 0; i < HS_MAX; i++)
        if (i < hs) dq_row[i] += dq_sum[i];
}

// ---------------------------------------------------------------- backward on tensor cores (WMMA)
// The backward's products on tensor cores, in the bf16 and fp16 builds at head sizes a multiple of
// 16. A warp owns 16 rows of its side (keys in the dk, dv kernel, queries in the dq kernel) and
// keeps their gradient sums in accumulator fragments, registers it never reads element by element,
// across every tile of the other side; per tile it computes its 16 x WMMA_KEYS scores and dout . v
// products by mma_sync into shared memory, where its lanes form p and ds element by element (the
// mask, exp(s - lse), p (dp - D)) and store them as floatX for the next products. At the end the
// fragments go through shared memory (their rows past Tq or Tk must not be written) and are added
// to the fp32 sums. p and ds are rounded to floatX before their products, as FlashAttention-2 does.
#if !FLOATX_IS_FP32
// warps a block: as many as keep the tiles in 48 KB of static shared memory
template <int HS_MAX> __host__ __device__ constexpr int wmma_dkv_warps() { return HS_MAX >= 128 ? 1 : HS_MAX >= 64 ? 2 : 4; }
template <int HS_MAX> __host__ __device__ constexpr int wmma_dq_warps() { return HS_MAX >= 128 ? 1 : 4; }
// a warp's fp32 scratch: its scores and dout . v products (16 x WMMA_KEYS each), or its 16 rows of
// gradient on the way out (16 x HS_MAX)
template <int HS_MAX> __host__ __device__ constexpr int wmma_warp_floats() {
    return 2 * WMMA_SIDE * WMMA_KEYS > WMMA_SIDE * HS_MAX ? 2 * WMMA_SIDE * WMMA_KEYS : WMMA_SIDE * HS_MAX;
}

// one warp: acc[f] (its 16 rows, channels 16 f ..) += left (16 x WMMA_KEYS floatX, ld WMMA_KEYS)
// times right (WMMA_KEYS x hs, row-major, ld HS_MAX), the WMMA_KEYS in ascending order
template <int HS_MAX>
__device__ inline void wmma_add_product(WmmaSums (&acc)[HS_MAX / WMMA_SIDE], const floatX* left, const floatX* right, int hs) {
    namespace wmma = nvcuda::wmma;
    #pragma unroll
    for (int f = 0; f < HS_MAX / WMMA_SIDE; f++) {
        if (f * WMMA_SIDE >= hs) continue;
        for (int k = 0; k < WMMA_KEYS; k += WMMA_SIDE) {
            WmmaRows a;
            wmma::fragment<wmma::matrix_b, WMMA_SIDE, WMMA_SIDE, WMMA_SIDE, floatX, wmma::row_major> b;
            wmma::load_matrix_sync(a, left + k, WMMA_KEYS);
            wmma::load_matrix_sync(b, right + k * HS_MAX + f * WMMA_SIDE, HS_MAX);
            wmma::mma_sync(acc[f], a, b, acc[f]);
        }
    }
}
// one warp: its 16 rows of acc added to the fp32 rows dst + r * stride (r < valid only), through
// stage (16 x HS_MAX fp32)
template <int HS_MAX>
__device__ inline void wmma_add_rows(float* dst, size_t stride, int valid, const WmmaSums (&acc)[HS_MAX / WMMA_SIDE], float* stage, int hs) {
    int lane = threadIdx.x % 32;
    #pragma unroll
    for (int f = 0; f < HS_MAX / WMMA_SIDE; f++)
        if (f * WMMA_SIDE < hs) nvcuda::wmma::store_matrix_sync(stage + f * WMMA_SIDE, acc[f], HS_MAX, nvcuda::wmma::mem_row_major);
    __syncwarp();
    for (int e = lane; e < WMMA_SIDE * hs; e += 32) {
        int r = e / hs, i = e % hs;
        if (r < valid) dst[r * stride + i] += stage[r * HS_MAX + i];
    }
    __syncwarp();  // the lanes are done with stage before it is written again
}

// grid (Tk / keys rounded up, B * NH), wmma_dkv_warps warps: warp w owns keys k0 + 16 w ..; per pass
// of WMMA_KEYS queries it forms p^T and ds^T (its keys by the pass's queries), then dv += p^T dout
// and dk += ds^T q
template <int HS_MAX>
__global__ void __launch_bounds__(32 * wmma_dkv_warps<HS_MAX>()) flash_dkv_wmma_kernel(AttentionBlock a, const floatX* q,
        const floatX* kv, float* dkv, const floatX* dout, const float* lse, const float* D) {
    constexpr int WARPS = wmma_dkv_warps<HS_MAX>(), KEYS = WMMA_SIDE * WARPS, QT = WMMA_KEYS;
    __shared__ __align__(32) uint16_t k_bits[KEYS * HS_MAX], v_bits[KEYS * HS_MAX], q_bits[QT * HS_MAX], dy_bits[QT * HS_MAX],
                                      p_bits[WARPS * WMMA_SIDE * QT], ds_bits[WARPS * WMMA_SIDE * QT];
    __shared__ __align__(32) float warp_floats[WARPS * wmma_warp_floats<HS_MAX>()];
    __shared__ float lse_tile[QT], D_tile[QT];
    floatX *k_tile = (floatX*)k_bits, *v_tile = (floatX*)v_bits, *q_tile = (floatX*)q_bits, *dy_tile = (floatX*)dy_bits;
    int b = blockIdx.y / a.NH, h = blockIdx.y % a.NH, hs = a.C / a.NH, k0 = blockIdx.x * KEYS;
    int w = threadIdx.x / 32, lane = threadIdx.x % 32, j0 = k0 + w * WMMA_SIDE;  // the warp's first key
    size_t q_first = attention_block_q_row(a, b, 0), kv_first = attention_block_kv_row(a, b, 0);
    float scale = 1.0f / sqrtf((float)hs), *s = warp_floats + w * wmma_warp_floats<HS_MAX>(), *dp = s + WMMA_SIDE * QT;
    floatX *p = (floatX*)p_bits + w * WMMA_SIDE * QT, *ds = (floatX*)ds_bits + w * WMMA_SIDE * QT;
    WmmaSums dk[HS_MAX / WMMA_SIDE], dv[HS_MAX / WMMA_SIDE];
    #pragma unroll
    for (int f = 0; f < HS_MAX / WMMA_SIDE; f++) nvcuda::wmma::fill_fragment(dk[f], 0.0f), nvcuda::wmma::fill_fragment(dv[f], 0.0f);
    wmma_load_rows(k_tile, HS_MAX, kv + h * hs, a.kv_stride, kv_first + k0, KEYS, a.Tk - k0, hs);
    wmma_load_rows(v_tile, HS_MAX, kv + a.C + h * hs, a.kv_stride, kv_first + k0, KEYS, a.Tk - k0, hs);
    for (int t0 = a.causal ? k0 : 0; t0 < a.Tq; t0 += QT) {  // causal: queries before k0 see none of these keys
        wmma_load_rows(q_tile, HS_MAX, q + h * hs, 3 * a.C, q_first + t0, QT, a.Tq - t0, hs);
        wmma_load_rows(dy_tile, HS_MAX, dout + h * hs, a.C, q_first + t0, QT, a.Tq - t0, hs);
        flash_load_stats(lse_tile, lse + h, a.NH, q_first + t0, QT, a.Tq - t0);
        flash_load_stats(D_tile, D + h, a.NH, q_first + t0, QT, a.Tq - t0);
        __syncthreads();  // loads in before use
        if (!a.causal || t0 + QT - 1 >= j0) {  // the same in the whole warp: a pass wholly before its keys is skipped
            wmma_rows_times_cols<HS_MAX>(s, WMMA_KEYS, k_tile + w * WMMA_SIDE * HS_MAX, q_tile, hs);    // s^T = k q^T
            wmma_rows_times_cols<HS_MAX>(dp, WMMA_KEYS, v_tile + w * WMMA_SIDE * HS_MAX, dy_tile, hs);  // dp^T = v dout^T
            __syncwarp();  // a lane reads elements other lanes' fragments wrote
            for (int e = lane; e < WMMA_SIDE * QT; e += 32) {
                int r = e / QT, c = e % QT, j = j0 + r, t = t0 + c;
                bool seen = j < a.Tk && t < a.Tq && (!a.causal || j <= t);
                float pe = seen ? expf(s[e] * scale - lse_tile[c]) : 0.0f;
                p[e] = from_float(pe);
                ds[e] = from_float(pe * (dp[e] - D_tile[c]) * scale);
            }
            __syncwarp();
            wmma_add_product<HS_MAX>(dv, p, dy_tile, hs);  // dv += p^T dout
            wmma_add_product<HS_MAX>(dk, ds, q_tile, hs);  // dk += ds^T q
        }
        __syncthreads();  // every warp is done with the tiles before the next pass overwrites them
    }
    int valid = min(WMMA_SIDE, a.Tk - j0);
    float* dk_rows = dkv + (kv_first + j0) * 2 * a.C + h * hs;
    wmma_add_rows<HS_MAX>(dk_rows, 2 * (size_t)a.C, valid, dk, s, hs);
    wmma_add_rows<HS_MAX>(dk_rows + a.C, 2 * (size_t)a.C, valid, dv, s, hs);  // dv at dk + C
}

// grid (Tq / queries rounded up, B * NH), wmma_dq_warps warps: warp w owns queries q0 + 16 w ..; per
// tile of WMMA_KEYS keys it forms ds (its queries by the tile's keys), then dq += ds k
template <int HS_MAX>
__global__ void __launch_bounds__(32 * wmma_dq_warps<HS_MAX>()) flash_dq_wmma_kernel(AttentionBlock a, const floatX* q,
        const floatX* kv, float* dq, const floatX* dout, const float* lse, const float* D) {
    constexpr int WARPS = wmma_dq_warps<HS_MAX>(), QUERIES = WMMA_SIDE * WARPS, KT = WMMA_KEYS;
    __shared__ __align__(32) uint16_t q_bits[QUERIES * HS_MAX], dy_bits[QUERIES * HS_MAX], k_bits[KT * HS_MAX], v_bits[KT * HS_MAX],
                                      ds_bits[WARPS * WMMA_SIDE * KT];
    __shared__ __align__(32) float warp_floats[WARPS * wmma_warp_floats<HS_MAX>()];
    __shared__ float lse_tile[QUERIES], D_tile[QUERIES];
    floatX *q_tile = (floatX*)q_bits, *dy_tile = (floatX*)dy_bits, *k_tile = (floatX*)k_bits, *v_tile = (floatX*)v_bits;
    int b = blockIdx.y / a.NH, h = blockIdx.y % a.NH, hs = a.C / a.NH, q0 = blockIdx.x * QUERIES;
    int w = threadIdx.x / 32, lane = threadIdx.x % 32, t0 = q0 + w * WMMA_SIDE;  // the warp's first query
    size_t q_first = attention_block_q_row(a, b, q0), kv_first = attention_block_kv_row(a, b, 0);
    float scale = 1.0f / sqrtf((float)hs), *s = warp_floats + w * wmma_warp_floats<HS_MAX>(), *dp = s + WMMA_SIDE * KT;
    floatX* ds = (floatX*)ds_bits + w * WMMA_SIDE * KT;
    WmmaSums dq_sum[HS_MAX / WMMA_SIDE];
    #pragma unroll
    for (int f = 0; f < HS_MAX / WMMA_SIDE; f++) nvcuda::wmma::fill_fragment(dq_sum[f], 0.0f);
    wmma_load_rows(q_tile, HS_MAX, q + h * hs, 3 * a.C, q_first, QUERIES, a.Tq - q0, hs);
    wmma_load_rows(dy_tile, HS_MAX, dout + h * hs, a.C, q_first, QUERIES, a.Tq - q0, hs);
    flash_load_stats(lse_tile, lse + h, a.NH, q_first, QUERIES, a.Tq - q0);
    flash_load_stats(D_tile, D + h, a.NH, q_first, QUERIES, a.Tq - q0);
    int key_end = a.causal ? min(q0 + QUERIES, a.Tq) : a.Tk;  // tiles from key_end on: above the diagonal
    for (int k0 = 0; k0 < key_end; k0 += KT) {
        wmma_load_rows(k_tile, HS_MAX, kv + h * hs, a.kv_stride, kv_first + k0, KT, a.Tk - k0, hs);
        wmma_load_rows(v_tile, HS_MAX, kv + a.C + h * hs, a.kv_stride, kv_first + k0, KT, a.Tk - k0, hs);
        __syncthreads();  // loads in (q, dout, lse, D too, the first time) before use
        if (!a.causal || k0 <= t0 + WMMA_SIDE - 1) {  // the same in the whole warp: a tile above its queries is skipped
            wmma_rows_times_cols<HS_MAX>(s, WMMA_KEYS, q_tile + w * WMMA_SIDE * HS_MAX, k_tile, hs);    // s = q k^T
            wmma_rows_times_cols<HS_MAX>(dp, WMMA_KEYS, dy_tile + w * WMMA_SIDE * HS_MAX, v_tile, hs);  // dp = dout v^T
            __syncwarp();
            for (int e = lane; e < WMMA_SIDE * KT; e += 32) {
                int r = e / KT, c = e % KT, t = t0 + r, j = k0 + c, row = w * WMMA_SIDE + r;
                bool seen = j < a.Tk && t < a.Tq && (!a.causal || j <= t);
                float pe = seen ? expf(s[e] * scale - lse_tile[row]) : 0.0f;
                ds[e] = from_float(pe * (dp[e] - D_tile[row]) * scale);
            }
            __syncwarp();
            wmma_add_product<HS_MAX>(dq_sum, ds, k_tile, hs);  // dq += ds k
        }
        __syncthreads();  // every warp is done with k and v before the next pass overwrites them
    }
    wmma_add_rows<HS_MAX>(dq + (q_first + w * WMMA_SIDE) * a.C + h * hs, a.C, min(WMMA_SIDE, a.Tq - t0), dq_sum, s, hs);
}
#endif

// ---------------------------------------------------------------- the small kernels around them
__global__ void flash_row_dot_kernel(float* D, const floatX* dout, const floatX* out, int rows, int C, int NH) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;  // (row, h)
    if (i < rows * NH) attention_block_row_dot_row(i / NH, i % NH, D, dout, out, C, NH);
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

// ---------------------------------------------------------------- launchers
template <int HS_MAX> inline void flash_launch_forward(const AttentionBlock& a, const floatX* q, const floatX* kv, float* out, float* lse) {
#if !FLOATX_IS_FP32
    if ((a.C / a.NH) % WMMA_SIDE == 0) {
        constexpr int warps = wmma_query_warps<HS_MAX>();
        flash_forward_wmma_kernel<HS_MAX><<<dim3(ceil_div(a.Tq, WMMA_SIDE * warps), a.B * a.NH), 32 * warps>>>(a, q, kv, out, lse);
        return;
    }
#endif
    flash_forward_kernel<HS_MAX><<<dim3(ceil_div(a.Tq, FLASH_QUERIES), a.B * a.NH), FLASH_QUERIES>>>(a, q, kv, out, lse);
}
template <int HS_MAX> inline void flash_launch_backward(const AttentionBlock& a, const floatX* q, const floatX* kv, float* dq, float* dkv,
                                                        const floatX* dout, const float* lse, const float* D) {
#if !FLOATX_IS_FP32
    if ((a.C / a.NH) % WMMA_SIDE == 0) {
        constexpr int dq_warps = wmma_dq_warps<HS_MAX>(), dkv_warps = wmma_dkv_warps<HS_MAX>();
        dim3 dq_grid(ceil_div(a.Tq, WMMA_SIDE * dq_warps), a.B * a.NH), dkv_grid(ceil_div(a.Tk, WMMA_SIDE * dkv_warps), a.B * a.NH);
        flash_dq_wmma_kernel<HS_MAX><<<dq_grid, 32 * dq_warps>>>(a, q, kv, dq, dout, lse, D);
        flash_dkv_wmma_kernel<HS_MAX><<<dkv_grid, 32 * dkv_warps>>>(a, q, kv, dkv, dout, lse, D);
        return;
    }
#endif
    flash_dq_kernel<HS_MAX><<<dim3(ceil_div(a.Tq, FLASH_QUERIES), a.B * a.NH), FLASH_QUERIES>>>(a, q, kv, dq, dout, lse, D);
    flash_dkv_kernel<HS_MAX><<<dim3(ceil_div(a.Tk, FLASH_KEYS), a.B * a.NH), FLASH_KEYS>>>(a, q, kv, dkv, dout, lse, D);
}

// the block's keys merged into out (a row of C fp32 per query) and lse (a row of NH per query)
inline void attention_block_forward(const AttentionBlock& a, const floatX* q, const floatX* kv, float* out, float* lse) {
    // a grid of 0 blocks is a launch error (so in every launcher below); no keys: nothing to merge
    if (a.B * a.NH * a.Tq == 0 || a.Tk == 0) return;
    switch (flash_head_capacity(a.C / a.NH)) {
        case 16: flash_launch_forward<16>(a, q, kv, out, lse); break;
        case 32: flash_launch_forward<32>(a, q, kv, out, lse); break;
        case 64: flash_launch_forward<64>(a, q, kv, out, lse); break;
        default: flash_launch_forward<128>(a, q, kv, out, lse); break;
    }
    launchCheck();
}
// the block's share of dq (the queries' rows, C fp32) and of dk, dv (the keys' rows, 2C fp32), added
inline void attention_block_backward(const AttentionBlock& a, const floatX* q, const floatX* kv, float* dq, float* dkv,
                                     const floatX* dout, const float* lse, const float* D) {
    if (a.B * a.NH * a.Tq == 0 || a.Tk == 0) return;
    switch (flash_head_capacity(a.C / a.NH)) {
        case 16: flash_launch_backward<16>(a, q, kv, dq, dkv, dout, lse, D); break;
        case 32: flash_launch_backward<32>(a, q, kv, dq, dkv, dout, lse, D); break;
        case 64: flash_launch_backward<64>(a, q, kv, dq, dkv, dout, lse, D); break;
        default: flash_launch_backward<128>(a, q, kv, dq, dkv, dout, lse, D); break;
    }
    launchCheck();
}
// D (rows, NH) = dout . out per query row and head, for every block's backward
inline void attention_block_row_dot(float* D, const floatX* dout, const floatX* out, int rows, int C, int NH) {
    if (rows * NH == 0) return;
    flash_row_dot_kernel<<<ceil_div(rows * NH, 256), 256>>>(D, dout, out, rows, C, NH);
    launchCheck();
}
// the fp32 output of the last block, in floatX
inline void attention_block_output(floatX* out, const float* acc, size_t n) {
    if (n == 0) return;
    flash_output_kernel<<<ceil_div(n, 256), 256>>>(out, acc, n);
    launchCheck();
}
// dqkv (rows, 3C) floatX = [dq | dk dv] from the fp32 sums
inline void attention_block_gradients(floatX* dqkv, const float* dq, const float* dkv, size_t rows, int C) {
    if (rows == 0) return;
    flash_gradients_kernel<<<ceil_div(rows * 3 * C, 256), 256>>>(dqkv, dq, dkv, rows, C);
    launchCheck();
}
// the [k | v] rows (2C) of qkv rows (3C): what ring attention sends (cp.h)
inline void attention_pack_kv(floatX* kv, const floatX* qkv, size_t rows, int C) {
    if (rows == 0) return;
    flash_pack_kv_kernel<<<ceil_div(rows * 2 * C, 256), 256>>>(kv, qkv, rows, C);
    launchCheck();
}

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
                            cores (WMMA 16x16x16 fragments, fp32 sums): a block of 4 warps takes 64
                            queries, a warp 16, whose q stays in fragments (registers); tiles of 64
                            keys (32 at head size 128). The scores go through shared memory, where
                            two lanes a row run the online softmax in fp32 (exp2 on scores scaled by
                            log2 e), and o stays in accumulator fragments for the whole walk: which
                            lane holds which element is unspecified, so the kernel reads the mapping
                            once (wmma_accumulator_rows: a tile of row numbers loaded as a fragment)
                            and rescales each element by its row's factor. Head sizes other than
                            16, 32, 64 and 128 take the fp32 build's kernel. Not in the fp32 build: its
                            WMMA is TF32 (10-bit mantissa), which misses the fp32 tolerances
    backward, fp32 build    flash_dkv_kernel: 32 keys a block, a thread each, summing dk, dv over
                            the query tiles that see them; flash_dq_kernel: 32 queries a block,
                            summing dq over the key tiles they see. Two kernels instead of one
                            with atomic adds into dq (FlashAttention-2's): every sum has one owner
                            and a fixed order, so the bits repeat run to run
    backward, bf16 / fp16   flash_dkv_wmma_kernel, flash_dq_wmma_kernel: the same two walks with
                            the five products on tensor cores (s and dout v^T into shared memory,
                            p and ds formed there by the lanes and rounded to floatX, then dv += p^T
                            dout, dk += ds^T q, dq += ds k); a block of 4 warps takes 64 keys or
                            queries, a warp 16, whose own rows (k and v, or q and dout) stay in
                            fragments and whose sums stay in accumulator fragments across every tile
Causal blocks: key tiles wholly above a query tile's diagonal are never loaded; in the diagonal
tile each query masks the keys after it. Rows past Tq or Tk are loaded as zeros and never stored.
The query tiles of a causal block run last-first (the last see the most keys: started first, they
do not finish alone at the end). Tiles come in 16 bytes a thread, rows padded by 16 bytes so that
a fragment's 16 rows start in different shared-memory banks.

Registers and shared memory (ptxas, sm_90, bf16, head size 64): the WMMA kernels 160 (forward),
168 (dk dv), 128 (dq, 4 bytes spilled) registers a thread and 44, 37, 33 KB of shared memory (at
head size 128 the dk dv kernel uses all 255 registers); the CUDA-core kernels hold a row in
registers (249 for the forward at 64, spilling at 128: the fp32 build is for checking, not speed).
Measured on an H200 (docs/gpu.md, B 8, T 1024, NH 12, hs 64, one layer, the labs): forward 0.28 ms
(1.53 ms before this version: o in shared memory, 16 lanes running the softmax, 32-key tiles,
2-byte loads, the head size known only at run time), backward 1.15 ms (in a step dk dv 0.63, dq
0.36, before 2.34 and 1.49), against 0.41 and 0.78 ms for the (T,T) matrix through cuBLAS
(dev/attention_forward.cu, attention_backward.cu version 2).
What the emulated build (tests/emu) proves of these kernels: the arithmetic, masks, padding and
tile walks against the host twin, barriers (ThreadSanitizer), WMMA's contract (warp-collective
calls, aligned pointers and leading dimensions), and that no code assumes a fragment layout (the
emulator's differs from a GPU's, and spreads a lane's accumulator elements over rows as a GPU
does). What it cannot: speed, shared-memory bank conflicts, the real fragment layout and a tensor
core's order of summation (results agree within tolerance, not bit for bit with the
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
//          WMMA_SIDE, WMMA_KEYS, WMMA_FORWARD_WARPS, wmma_forward_keys, wmma_kv_ld, wmma_s_ld, wmma_p_ld,
//          flash_forward_wmma_kernel, wmma_load_rows, wmma_accumulator_rows, wmma_softmax_tile, wmma_rescale_add_pv,
//          wmma_read_rows, wmma_divide_rows, WmmaSums, WmmaRows, wmma_start_rows, WmmaColsT, WmmaCols,
//          flash_launch_forward, flash_launch_backward, flash_pack_kv_kernel, attention_pack_kv, WMMA_BACKWARD_WARPS,
//          WMMA_BACKWARD_P_LD, wmma_warp_floats, wmma_load_row_fragments, wmma_probabilities, wmma_rows_times_cols,
//          wmma_add_product, wmma_add_rows, flash_dkv_wmma_kernel, flash_dq_wmma_kernel, flash_row_dot_kernel128,
//          flash_output_kernel128, flash_gradients_kernel128, wmma_out_value, flash_forward_any_head,
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

// ---------------------------------------------------------------- forward on tensor cores (WMMA)
#if !FLOATX_IS_FP32
#include <mma.h>  // defines: nvcuda::wmma (tests/emu/mma.h in the emulated build)
#include <type_traits>  // defines: std::is_same
#define WMMA_SIDE 16  // m = n = k = 16: a fragment's rows, columns and depth for bf16 and fp16
#define WMMA_KEYS 32  // Bc of the backward: keys (or queries) a tile, two fragments wide
typedef nvcuda::wmma::fragment<nvcuda::wmma::accumulator, WMMA_SIDE, WMMA_SIDE, WMMA_SIDE, float> WmmaSums;
typedef nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, WMMA_SIDE, WMMA_SIDE, WMMA_SIDE, floatX, nvcuda::wmma::row_major>
    WmmaRows;
typedef nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, WMMA_SIDE, WMMA_SIDE, WMMA_SIDE, floatX, nvcuda::wmma::col_major>
    WmmaColsT;
typedef nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, WMMA_SIDE, WMMA_SIDE, WMMA_SIDE, floatX, nvcuda::wmma::row_major>
    WmmaCols;

// The forward's tiles: 64 queries a block (4 warps of 16), Bc keys a tile (64; 32 at head size 128,
// so that everything fits the 48 KB of static shared memory). Shared memory holds k and v (and q
// once, on its way into registers), rows padded by 16 bytes so that a fragment's 16 rows start in
// different banks; each warp's scores (fp32) and probabilities (floatX), padded likewise
#define WMMA_FORWARD_WARPS 4
template <int HS_MAX> __host__ __device__ constexpr int wmma_forward_keys() { return HS_MAX >= 128 ? 32 : 64; }
template <int HS_MAX> __host__ __device__ constexpr int wmma_kv_ld() { return HS_MAX + 8; }
template <int HS_MAX> __host__ __device__ constexpr int wmma_s_ld() { return wmma_forward_keys<HS_MAX>() + 4; }
template <int HS_MAX> __host__ __device__ constexpr int wmma_p_ld() { return wmma_forward_keys<HS_MAX>() + 8; }

// rows first .. of one head into a shared floatX tile (row-major, leading dimension ld), zeros past
// valid: 16 bytes (8 values) a thread where every address allows it, else one value
__device__ inline void wmma_load_rows(floatX* tile, int ld, const floatX* src, size_t stride, size_t first, int rows,
                                      int valid, int hs) {
    constexpr int V = Packed128<floatX>::size;
    if (aligned16(src) && stride % V == 0 && hs % V == 0 && ld % V == 0) {  // the same in every thread
        int per_row = hs / V;
        for (int e = threadIdx.x; e < rows * per_row; e += blockDim.x) {
            int r = e / per_row, i = e % per_row * V;
            Packed128<floatX> x;
            if (r < valid) x = load128(src + (first + r) * stride + i);
            else for (int k = 0; k < V; k++) x.v[k] = from_float(0.0f);
            store128(tile + r * ld + i, x);
        }
        return;
    }
    for (int e = threadIdx.x; e < rows * hs; e += blockDim.x) {
        int r = e / hs, i = e % hs;
        tile[r * ld + i] = r < valid ? src[(first + r) * stride + i] : from_float(0.0f);
    }
}

// Which row of its 16 x 16 tile each of a lane's accumulator elements holds. CUDA leaves the
// mapping unspecified but fixed for a fragment type, so it is read once: a tile whose every
// element is its row number, loaded into a fragment. `scratch`: the warp's 256 floats of shared memory
__device__ inline void wmma_accumulator_rows(int (&row_of)[WmmaSums::num_elements], float* scratch) {
    int lane = threadIdx.x % 32;
    for (int e = lane; e < WMMA_SIDE * WMMA_SIDE; e += 32) scratch[e] = (float)(e / WMMA_SIDE);
    __syncwarp();
    WmmaSums rows;
    nvcuda::wmma::load_matrix_sync(rows, scratch, WMMA_SIDE, nvcuda::wmma::mem_row_major);
    for (int i = 0; i < WmmaSums::num_elements; i++) row_of[i] = (int)rows.x[i];
    __syncwarp();
}

// one warp: its 16 rows first .. of one head (zeros past valid) into matrix_a fragments, staged
// through `stage` (16 x (HS_MAX + 8) floatX of its own)
template <int HS_MAX>
__device__ inline void wmma_load_row_fragments(WmmaRows (&part)[HS_MAX / WMMA_SIDE], floatX* stage, const floatX* src,
                                               size_t stride, size_t first, int valid, int hs) {
    constexpr int LD = wmma_kv_ld<HS_MAX>();
    int lane = threadIdx.x % 32;
    for (int e = lane; e < WMMA_SIDE * hs; e += 32) {
        int r = e / hs, i = e % hs;
        stage[r * LD + i] = r < valid ? src[(first + r) * stride + i] : from_float(0.0f);
    }
    __syncwarp();
    #pragma unroll
    for (int f = 0; f < HS_MAX / WMMA_SIDE; f++)
        if (f * WMMA_SIDE < hs) nvcuda::wmma::load_matrix_sync(part[f], stage + f * WMMA_SIDE, LD);
    __syncwarp();  // the lanes are done with stage before it is written again
}
// one warp: out (16 x COLS fp32, leading dimension ld) = rows (its 16, in fragments) times cols^T,
// where cols is a (COLS, hs) row-major tile (ld HS_MAX + 8) read column-major: the scores q k^T or
// k q^T, and the products dout v^T or v dout^T
template <int HS_MAX, int COLS = WMMA_KEYS>
__device__ inline void wmma_rows_times_cols(float* out, int ld, const WmmaRows (&rows)[HS_MAX / WMMA_SIDE],
                                            const floatX* cols, int hs) {
    namespace wmma = nvcuda::wmma;
    #pragma unroll
    for (int n = 0; n < COLS; n += WMMA_SIDE) {
        WmmaSums sums;
        wmma::fill_fragment(sums, 0.0f);
        #pragma unroll
        for (int f = 0; f < HS_MAX / WMMA_SIDE; f++) {
            if (f * WMMA_SIDE >= hs) continue;
            WmmaColsT b;
            wmma::load_matrix_sync(b, cols + n * wmma_kv_ld<HS_MAX>() + f * WMMA_SIDE, wmma_kv_ld<HS_MAX>());
            wmma::mma_sync(sums, rows[f], b, sums);
        }
        wmma::store_matrix_sync(out + n, sums, ld, wmma::mem_row_major);
    }
}
// one warp: acc[f] (its 16 rows, channels 16 f ..) += left (16 x COLS floatX, leading dimension
// left_ld) times right (COLS x hs, row-major, ld HS_MAX + 8), the COLS in order: the forward's
// o += p v, the backward's dv += p^T dout, dk += ds^T q, dq += ds k
template <int HS_MAX, int COLS = WMMA_KEYS>
__device__ inline void wmma_add_product(WmmaSums (&acc)[HS_MAX / WMMA_SIDE], const floatX* left, int left_ld,
                                        const floatX* right, int hs) {
    namespace wmma = nvcuda::wmma;
    WmmaRows a[COLS / WMMA_SIDE];
    #pragma unroll
    for (int k = 0; k < COLS / WMMA_SIDE; k++) wmma::load_matrix_sync(a[k], left + k * WMMA_SIDE, left_ld);
    #pragma unroll
    for (int f = 0; f < HS_MAX / WMMA_SIDE; f++) {
        if (f * WMMA_SIDE >= hs) continue;
        #pragma unroll
        for (int k = 0; k < COLS / WMMA_SIDE; k++) {
            WmmaCols b;
            wmma::load_matrix_sync(b, right + k * WMMA_SIDE * wmma_kv_ld<HS_MAX>() + f * WMMA_SIDE,
                                   wmma_kv_ld<HS_MAX>());
            wmma::mma_sync(acc[f], a[k], b, acc[f]);
        }
    }
}
// fp32 as a value of Out: itself, or rounded to floatX
template <typename Out> __device__ inline Out wmma_out_value(float v) {
    if constexpr (std::is_same<Out, float>::value) return v; else return from_float(v);
}
// one warp: its 16 rows of acc added to (or, add false, written as) the rows dst + r * stride
// (r < valid only), fp32 sums or, when they are final, floatX; 16 channels at a time through
// stage (16 x 16 fp32)
template <int HS_MAX, typename Out>
__device__ inline void wmma_add_rows(Out* dst, size_t stride, int valid, const WmmaSums (&acc)[HS_MAX / WMMA_SIDE],
                                     float* stage, int hs, bool add) {
    int lane = threadIdx.x % 32;
    #pragma unroll
    for (int f = 0; f < HS_MAX / WMMA_SIDE; f++) {
        if (f * WMMA_SIDE >= hs) continue;
        nvcuda::wmma::store_matrix_sync(stage, acc[f], WMMA_SIDE, nvcuda::wmma::mem_row_major);
        __syncwarp();
        for (int e = lane; e < WMMA_SIDE * WMMA_SIDE; e += 32) {
            int r = e / WMMA_SIDE, i = e % WMMA_SIDE;
            if (r < valid) {
                Out* at = dst + r * stride + f * WMMA_SIDE + i;
                *at = wmma_out_value<Out>((add ? to_float(*at) : 0.0f) + stage[e]);
            }
        }
        __syncwarp();  // the lanes are done with stage before it is written again
    }
}
// one warp: its 16 fp32 rows src + r * stride (zeros for r >= valid) into accumulator fragments,
// 16 channels at a time through stage (16 x 16 fp32)
template <int HS_MAX>
__device__ inline void wmma_read_rows(WmmaSums (&acc)[HS_MAX / WMMA_SIDE], const float* src, size_t stride, int valid,
                                      float* stage, int hs) {
    int lane = threadIdx.x % 32;
    #pragma unroll
    for (int f = 0; f < HS_MAX / WMMA_SIDE; f++) {
        if (f * WMMA_SIDE >= hs) continue;
        for (int e = lane; e < WMMA_SIDE * WMMA_SIDE; e += 32) {
            int r = e / WMMA_SIDE, i = e % WMMA_SIDE;
            stage[e] = r < valid ? src[r * stride + f * WMMA_SIDE + i] : 0.0f;
        }
        __syncwarp();
        nvcuda::wmma::load_matrix_sync(acc[f], stage, WMMA_SIDE, nvcuda::wmma::mem_row_major);
        __syncwarp();  // the lanes are done with stage before it is written again
    }
}
// One warp's online softmax of one key tile, on the scores s (16 x KEYS fp32) that the tensor cores
// left: two lanes a row (lane 2r + half takes columns half, half + 2, ...), the row's max and sum
// met by one shuffle. Scores are in log2 units (scaled by log2(e) / sqrt(hs)), so exp2f is the
// exponential. Keys the query does not see get -inf and exp2 0; p goes out as floatX for P V, l sums
// the fp32 p. Returns the factor by which the row's output so far must be rescaled
template <int KEYS>
__device__ inline float wmma_softmax_tile(const AttentionBlock& a, float& m, float& l, const float* s, int s_ld,
                                          floatX* p, int p_ld, int t, int k0, float scale_log2) {
    int lane = threadIdx.x % 32, r = lane / 2, half = lane % 2;
    float x[KEYS / 2], tile_max = -INFINITY;
    #pragma unroll
    for (int c = 0; c < KEYS / 2; c++) {
        int j = k0 + 2 * c + half;
        x[c] = j < a.Tk && (!a.causal || j <= t) ? s[r * s_ld + 2 * c + half] * scale_log2 : -INFINITY;
        tile_max = fmaxf(tile_max, x[c]);
    }
    float m_new = fmaxf(m, fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1)));
    float rescale = m_new == -INFINITY ? 1.0f : exp2f(m - m_new);  // no key yet (a padded row): nothing to rescale
    float sum = 0.0f;
    #pragma unroll
    for (int c = 0; c < KEYS / 2; c++) {
        float pe = m_new == -INFINITY ? 0.0f : exp2f(x[c] - m_new);
        sum += pe;
        p[r * p_ld + 2 * c + half] = from_float(pe);
    }
    l = l * rescale + sum + __shfl_xor_sync(0xffffffffu, sum, 1);
    m = m_new;
    return rescale;
}

// one warp, one key tile: o = o * rescale + p v, keys in order; each accumulator element takes the
// factor of its row (row_of), which the row's two lanes hold
template <int HS_MAX, int KEYS>
__device__ inline void wmma_rescale_add_pv(WmmaSums (&o)[HS_MAX / WMMA_SIDE], float rescale,
                                           const int (&row_of)[WmmaSums::num_elements], const floatX* p, int p_ld,
                                           const floatX* v_tile, int hs) {
    float row_rescale[WmmaSums::num_elements];
    #pragma unroll
    for (int i = 0; i < WmmaSums::num_elements; i++) row_rescale[i] = __shfl_sync(0xffffffffu, rescale, 2 * row_of[i]);
    #pragma unroll
    for (int f = 0; f < HS_MAX / WMMA_SIDE; f++)
        #pragma unroll
        for (int i = 0; i < WmmaSums::num_elements; i++) o[f].x[i] *= row_rescale[i];
    wmma_add_product<HS_MAX, KEYS>(o, p, p_ld, v_tile, hs);
}

// one warp: each accumulator element divided by its row's l, which the row's two lanes hold
template <int HS_MAX>
__device__ inline void wmma_divide_rows(WmmaSums (&o)[HS_MAX / WMMA_SIDE], float l,
                                        const int (&row_of)[WmmaSums::num_elements]) {
    float inv_l[WmmaSums::num_elements];
    #pragma unroll
    for (int i = 0; i < WmmaSums::num_elements; i++) inv_l[i] = 1.0f / __shfl_sync(0xffffffffu, l, 2 * row_of[i]);
    #pragma unroll
    for (int f = 0; f < HS_MAX / WMMA_SIDE; f++)
        #pragma unroll
        for (int i = 0; i < WmmaSums::num_elements; i++) o[f].x[i] *= inv_l[i];
}

// o, m and l as a warp's walk starts (m and l: the lane's row t): zeros, or under ring attention after
// its first block the blocks so far: out's rows and their lse (m = lse in log2 units, l = 1)
template <int HS_MAX, typename Out>
__device__ inline void wmma_start_rows(WmmaSums (&o)[HS_MAX / WMMA_SIDE], float* m, float* l, const AttentionBlock& a,
                                       const Out* out, const float* lse, size_t row0, int h, int t, float* stage) {
    const float LOG2E = 1.4426950408889634f;
    int lane = threadIdx.x % 32, t0 = t - lane / 2;
    *m = -INFINITY, *l = 0.0f;
    #pragma unroll
    for (int f = 0; f < HS_MAX / WMMA_SIDE; f++) nvcuda::wmma::fill_fragment(o[f], 0.0f);
    if constexpr (std::is_same<Out, float>::value) {  // floatX out: the one block (flash_launch_forward)
        if (!a.first) {
            if (t < a.Tq) *m = lse[(row0 + lane / 2) * a.NH + h] * LOG2E, *l = 1.0f;
            wmma_read_rows<HS_MAX>(o, out + row0 * a.C + h * HS_MAX, a.C, a.Tq - t0, stage, HS_MAX);
        }
    }
}

// grid (Tq / 64 rounded up, B * NH), 4 warps: warp w owns queries q0 + 16 w ... Per key tile: s = q k^T
// (q's fragments stay in registers), the online softmax (above), o = o * rescale + p v, with o in
// accumulator fragments (registers) for the whole walk, rescaled row by row through the row map.
// Causal query tiles run last-first: the last do the most tiles, and start first
template <int HS_MAX, typename Out>
__global__ void __launch_bounds__(32 * WMMA_FORWARD_WARPS)
    flash_forward_wmma_kernel(AttentionBlock a, const floatX* q, const floatX* kv, Out* out, float* lse) {
    constexpr int QUERIES = WMMA_SIDE * WMMA_FORWARD_WARPS, KEYS = wmma_forward_keys<HS_MAX>(), F = HS_MAX / WMMA_SIDE;
    constexpr int KV_LD = wmma_kv_ld<HS_MAX>(), S_LD = wmma_s_ld<HS_MAX>(), P_LD = wmma_p_ld<HS_MAX>();
    // floatX tiles as raw 16-bit words, cast at use: the emulated build's bf16 and fp16 are classes
    // with constructors, whose __shared__ arrays would get an initialisation guard (a false race
    // under ThreadSanitizer). Every WMMA pointer 32-byte aligned, every leading dimension 16-byte
    __shared__ __align__(32) uint16_t kv_bits[2 * KEYS * KV_LD], p_bits[WMMA_FORWARD_WARPS * WMMA_SIDE * P_LD];
    __shared__ __align__(32) float s_tile[WMMA_FORWARD_WARPS * WMMA_SIDE * S_LD];
    static_assert(QUERIES <= 2 * KEYS, "q is staged where k and v go");
    static_assert(sizeof(kv_bits) + sizeof(p_bits) + sizeof(s_tile) <= 48 * 1024, "over 48 KB of static shared memory");
    floatX *k_tile = (floatX*)kv_bits, *v_tile = k_tile + KEYS * KV_LD, *q_tile = k_tile;
    // taken only where the head size is HS_MAX (flash_launch_forward): every loop's trip count known
    constexpr int hs = HS_MAX;
    int b = blockIdx.y / a.NH, h = blockIdx.y % a.NH;
    int q0 = (a.causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x) * QUERIES;
    // t: the lane's softmax row
    int w = threadIdx.x / 32, lane = threadIdx.x % 32, t0 = q0 + w * WMMA_SIDE, t = t0 + lane / 2;
    size_t q_first = attention_block_q_row(a, b, q0), row0 = q_first + w * WMMA_SIDE;  // row0: the warp's first row
    float* s = s_tile + w * WMMA_SIDE * S_LD;
    floatX* p = (floatX*)p_bits + w * WMMA_SIDE * P_LD;
    const float LOG2E = 1.4426950408889634f, scale_log2 = LOG2E / sqrtf((float)hs);
    int row_of[WmmaSums::num_elements];
    wmma_accumulator_rows(row_of, s);
    WmmaRows q_part[F];  // the warp's queries, in registers for the whole walk (staged in its rows of k's tile)
    wmma_load_row_fragments<HS_MAX>(q_part, q_tile + w * WMMA_SIDE * KV_LD, q + h * hs, 3 * a.C, row0, a.Tq - t0, hs);
    WmmaSums o[F];
    float m, l;  // the lane's row t (both lanes of a row hold the same)
    wmma_start_rows<HS_MAX, Out>(o, &m, &l, a, out, lse, row0, h, t, s);
    __syncthreads();  // every warp has its q before k overwrites the tile
    size_t kv_first = attention_block_kv_row(a, b, 0);
    int key_end = a.causal ? min(q0 + QUERIES, a.Tq) : a.Tk;
    for (int k0 = 0; k0 < key_end; k0 += KEYS) {
        wmma_load_rows(k_tile, KV_LD, kv + h * hs, a.kv_stride, kv_first + k0, KEYS, a.Tk - k0, hs);
        wmma_load_rows(v_tile, KV_LD, kv + a.C + h * hs, a.kv_stride, kv_first + k0, KEYS, a.Tk - k0, hs);
        __syncthreads();  // every thread's loads are in before any warp reads the tiles
        if (!a.causal || k0 <= t0 + WMMA_SIDE - 1) {  // the same in the whole warp: a tile above its rows is skipped
            wmma_rows_times_cols<HS_MAX, KEYS>(s, S_LD, q_part, k_tile, hs);  // s = q k^T
            __syncwarp();  // a lane reads rows that other lanes' fragments wrote
            float rescale = wmma_softmax_tile<KEYS>(a, m, l, s, S_LD, p, P_LD, t, k0, scale_log2);
            __syncwarp();
            wmma_rescale_add_pv<HS_MAX, KEYS>(o, rescale, row_of, p, P_LD, v_tile, hs);
        }
        __syncthreads();  // every warp is done with k and v before the next pass overwrites them
    }
    wmma_divide_rows<HS_MAX>(o, l, row_of);  // out = o / l; lse = m + log l
    wmma_add_rows<HS_MAX, Out>(out + row0 * a.C + h * hs, a.C, a.Tq - t0, o, s, hs, false);
    if (lane % 2 == 0 && t < a.Tq) lse[(row0 + lane / 2) * a.NH + h] = (m + log2f(l)) / LOG2E;
}
#endif

// ---------------------------------------------------------------- backward on CUDA cores
// a pass's rows of the other side: 1024 channels' worth (32 rows at head size 32, 16 at 64, 8 at
// 128), so that a block's own two fp32 tiles and a pass's two stay in 48 KB of static shared memory
template <int HS_MAX>
__host__ __device__ constexpr int flash_pass_rows() {
    return 1024 / HS_MAX < 32 ? 1024 / HS_MAX : 32;
}

// key j (column c of the block's k, v tiles) against the pass's queries t = t0 + r in order;
// the queries that do not see it (before j in a causal block, past Tq) are skipped
template <int HS_MAX, int ROWS>
__device__ inline void flash_dkv_from_queries(const AttentionBlock& a, float (&dk)[HS_MAX], float (&dv)[HS_MAX],
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
__global__ void flash_dkv_kernel(AttentionBlock a, const floatX* q, const floatX* kv, float* dkv, const floatX* dout,
                                 const float* lse, const float* D) {
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
// the keys it does not see (after t in a causal block, past Tk) end the pass
template <int HS_MAX, int ROWS>
__device__ inline void flash_dq_from_keys(const AttentionBlock& a, float (&dq)[HS_MAX],
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
__global__ void flash_dq_kernel(AttentionBlock a, const floatX* q, const floatX* kv, float* dq, const floatX* dout,
                                const float* lse, const float* D) {
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

// ---------------------------------------------------------------- backward on tensor cores (WMMA)
// The backward's products on tensor cores, in the bf16 and fp16 builds at head sizes 16, 32, 64 and
// 128. A block has 4 warps; a warp owns 16 rows of its side (keys in the dk, dv kernel, queries in
// the dq kernel): their k and v (or q and dout) stay in fragments (registers) and their gradient sums
// in accumulator fragments across every tile of the other side. Per tile of WMMA_KEYS rows of the
// other side (in shared memory, rows padded by 16 bytes) a warp computes its 16 x WMMA_KEYS scores
// and dout . v products by mma_sync into shared memory, where its lanes form p and ds element by
// element (the mask, exp(s - lse), p (dp - D)) and store them as floatX for the next products. At
// the end the fragments go through shared memory (their rows past Tq or Tk must not be written) and
// are added to the fp32 sums. p and ds are rounded to floatX before their products, as
// FlashAttention-2 does.
#if !FLOATX_IS_FP32
#define WMMA_BACKWARD_WARPS 4
#define WMMA_BACKWARD_P_LD (WMMA_KEYS + 8)  // p and ds, floatX (s and dp, fp32: WMMA_KEYS + 4)
// a warp's fp32 scratch: its scores and dout . v products (16 x WMMA_KEYS each, padded); first its
// own rows of the two inputs it keeps in registers, on their way in (16 x (HS_MAX + 8) floatX each)
template <int HS_MAX> __host__ __device__ constexpr int wmma_warp_floats() {
    return 2 * WMMA_SIDE * (WMMA_KEYS + 4) > WMMA_SIDE * wmma_kv_ld<HS_MAX>() / 2
               ? 2 * WMMA_SIDE * (WMMA_KEYS + 4)
               : WMMA_SIDE * wmma_kv_ld<HS_MAX>() / 2;
}

// one warp, one tile: p and ds (16 x WMMA_KEYS floatX) from s and dp (fp32, ld WMMA_KEYS + 4) and the
// statistics of each element's query; `keys_by_queries`: the warp's rows are keys (dk, dv) or queries (dq)
__device__ inline void wmma_probabilities(const AttentionBlock& a, floatX* p, floatX* ds, const float* s,
                                          const float* dp, const float* lse_tile, const float* D_tile, int row0,
                                          int col0, int stat0, bool keys_by_queries, float scale, float scale_log2) {
    const float LOG2E = 1.4426950408889634f;
    for (int e = threadIdx.x % 32; e < WMMA_SIDE * WMMA_KEYS; e += 32) {
        int r = e / WMMA_KEYS, c = e % WMMA_KEYS;
        int t = keys_by_queries ? col0 + c : row0 + r, j = keys_by_queries ? row0 + r : col0 + c;  // query, key
        int stat = keys_by_queries ? c : stat0 + r;                                                // t's in the tiles
        bool seen = j < a.Tk && t < a.Tq && (!a.causal || j <= t);
        int at = r * (WMMA_KEYS + 4) + c;
        float pe = seen ? exp2f(s[at] * scale_log2 - lse_tile[stat] * LOG2E) : 0.0f;
        if (p) p[r * WMMA_BACKWARD_P_LD + c] = from_float(pe);
        ds[r * WMMA_BACKWARD_P_LD + c] = from_float(pe * (dp[at] - D_tile[stat]) * scale);
    }
}

// grid (Tk / 64 rounded up, B * NH), 4 warps: warp w owns keys k0 + 16 w ..; per pass of WMMA_KEYS
// queries it forms p^T and ds^T (its keys by the pass's queries), then dv += p^T dout and dk += ds^T q
template <int HS_MAX, typename Out>
__global__ void __launch_bounds__(32 * WMMA_BACKWARD_WARPS) flash_dkv_wmma_kernel(AttentionBlock a, const floatX* q,
        const floatX* kv, Out* dkv, int dkv_stride, const floatX* dout, const float* lse, const float* D) {
    constexpr int KEYS = WMMA_SIDE * WMMA_BACKWARD_WARPS, QT = WMMA_KEYS, F = HS_MAX / WMMA_SIDE;
    constexpr int LD = wmma_kv_ld<HS_MAX>(), S_LD = WMMA_KEYS + 4, WF = wmma_warp_floats<HS_MAX>();
    constexpr int PW = WMMA_BACKWARD_WARPS * WMMA_SIDE * WMMA_BACKWARD_P_LD;  // a p (or ds) tile for every warp
    __shared__ __align__(32) uint16_t q_bits[QT * LD], dy_bits[QT * LD], p_bits[PW], ds_bits[PW];
    __shared__ __align__(32) float warp_floats[WMMA_BACKWARD_WARPS * WF];
    __shared__ float lse_tile[QT], D_tile[QT];
    static_assert(sizeof(q_bits) + sizeof(dy_bits) + sizeof(p_bits) + sizeof(ds_bits) + sizeof(warp_floats) + 8 * QT <=
                  48 * 1024, "over 48 KB of static shared memory");
    floatX *q_tile = (floatX*)q_bits, *dy_tile = (floatX*)dy_bits;
    constexpr int hs = HS_MAX;  // taken only where the head size is HS_MAX (flash_launch_backward)
    int b = blockIdx.y / a.NH, h = blockIdx.y % a.NH, k0 = blockIdx.x * KEYS;
    int w = threadIdx.x / 32, j0 = k0 + w * WMMA_SIDE;  // the warp's first key
    size_t q_first = attention_block_q_row(a, b, 0), kv_first = attention_block_kv_row(a, b, 0);
    float scale = 1.0f / sqrtf((float)hs), scale_log2 = 1.4426950408889634f * scale;
    float *s = warp_floats + w * WF, *dp = s + WMMA_SIDE * S_LD;
    floatX* p = (floatX*)p_bits + w * WMMA_SIDE * WMMA_BACKWARD_P_LD;  // the warp's tiles
    floatX* ds = (floatX*)ds_bits + w * WMMA_SIDE * WMMA_BACKWARD_P_LD;
    WmmaRows k_part[F], v_part[F];
    wmma_load_row_fragments<HS_MAX>(k_part, (floatX*)s, kv + h * hs, a.kv_stride, kv_first + j0, a.Tk - j0, hs);
    wmma_load_row_fragments<HS_MAX>(v_part, (floatX*)s, kv + a.C + h * hs, a.kv_stride, kv_first + j0, a.Tk - j0, hs);
    WmmaSums dk[F], dv[F];
    #pragma unroll
    for (int f = 0; f < F; f++) nvcuda::wmma::fill_fragment(dk[f], 0.0f), nvcuda::wmma::fill_fragment(dv[f], 0.0f);
    for (int t0 = a.causal ? k0 : 0; t0 < a.Tq; t0 += QT) {  // causal: queries before k0 see none of these keys
        wmma_load_rows(q_tile, LD, q + h * hs, 3 * a.C, q_first + t0, QT, a.Tq - t0, hs);
        wmma_load_rows(dy_tile, LD, dout + h * hs, a.C, q_first + t0, QT, a.Tq - t0, hs);
        flash_load_stats(lse_tile, lse + h, a.NH, q_first + t0, QT, a.Tq - t0);
        flash_load_stats(D_tile, D + h, a.NH, q_first + t0, QT, a.Tq - t0);
        __syncthreads();  // loads in before use
        if (!a.causal || t0 + QT - 1 >= j0) {  // the same in the whole warp: a pass wholly before its keys is skipped
            wmma_rows_times_cols<HS_MAX>(s, S_LD, k_part, q_tile, hs);    // s^T = k q^T
            wmma_rows_times_cols<HS_MAX>(dp, S_LD, v_part, dy_tile, hs);  // dp^T = v dout^T
            __syncwarp();  // a lane reads elements other lanes' fragments wrote
            wmma_probabilities(a, p, ds, s, dp, lse_tile, D_tile, j0, t0, 0, true, scale, scale_log2);
            __syncwarp();
            wmma_add_product<HS_MAX>(dv, p, WMMA_BACKWARD_P_LD, dy_tile, hs);  // dv += p^T dout
            wmma_add_product<HS_MAX>(dk, ds, WMMA_BACKWARD_P_LD, q_tile, hs);  // dk += ds^T q
        }
        __syncthreads();  // every warp is done with the tiles before the next pass overwrites them
    }
    int valid = min(WMMA_SIDE, a.Tk - j0);
    if (valid <= 0) return;
    Out* dk_rows = dkv + (kv_first + j0) * dkv_stride + h * hs;
    bool add = std::is_same<Out, float>::value;  // fp32: a block's share, added; floatX: the one block's, written
    wmma_add_rows<HS_MAX, Out>(dk_rows, dkv_stride, valid, dk, s, hs, add);
    wmma_add_rows<HS_MAX, Out>(dk_rows + a.C, dkv_stride, valid, dv, s, hs, add);  // dv at dk + C
}

// grid (Tq / 64 rounded up, B * NH), 4 warps: warp w owns queries q0 + 16 w ..; per tile of
// WMMA_KEYS keys it forms ds (its queries by the tile's keys), then dq += ds k. Causal query tiles
// run last-first: the last see the most keys, and start first
template <int HS_MAX, typename Out>
__global__ void __launch_bounds__(32 * WMMA_BACKWARD_WARPS) flash_dq_wmma_kernel(AttentionBlock a, const floatX* q,
        const floatX* kv, Out* dq, int dq_stride, const floatX* dout, const float* lse, const float* D) {
    constexpr int QUERIES = WMMA_SIDE * WMMA_BACKWARD_WARPS, KT = WMMA_KEYS, F = HS_MAX / WMMA_SIDE;
    constexpr int LD = wmma_kv_ld<HS_MAX>(), S_LD = WMMA_KEYS + 4, WF = wmma_warp_floats<HS_MAX>();
    constexpr int PW = WMMA_BACKWARD_WARPS * WMMA_SIDE * WMMA_BACKWARD_P_LD;  // a ds tile for every warp
    __shared__ __align__(32) uint16_t k_bits[KT * LD], v_bits[KT * LD], ds_bits[PW];
    __shared__ __align__(32) float warp_floats[WMMA_BACKWARD_WARPS * WF];
    __shared__ float lse_tile[QUERIES], D_tile[QUERIES];
    static_assert(sizeof(k_bits) + sizeof(v_bits) + sizeof(ds_bits) + sizeof(warp_floats) + 8 * QUERIES <= 48 * 1024,
                  "over 48 KB of static shared memory");
    floatX *k_tile = (floatX*)k_bits, *v_tile = (floatX*)v_bits;
    constexpr int hs = HS_MAX;  // taken only where the head size is HS_MAX (flash_launch_backward)
    int b = blockIdx.y / a.NH, h = blockIdx.y % a.NH;
    int q0 = (a.causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x) * QUERIES;
    int w = threadIdx.x / 32, t0 = q0 + w * WMMA_SIDE;  // the warp's first query
    size_t q_first = attention_block_q_row(a, b, q0), kv_first = attention_block_kv_row(a, b, 0);
    float scale = 1.0f / sqrtf((float)hs), scale_log2 = 1.4426950408889634f * scale;
    float *s = warp_floats + w * WF, *dp = s + WMMA_SIDE * S_LD;
    floatX* ds = (floatX*)ds_bits + w * WMMA_SIDE * WMMA_BACKWARD_P_LD;
    WmmaRows q_part[F], dy_part[F];
    wmma_load_row_fragments<HS_MAX>(q_part, (floatX*)s, q + h * hs, 3 * a.C, q_first + w * WMMA_SIDE, a.Tq - t0, hs);
    wmma_load_row_fragments<HS_MAX>(dy_part, (floatX*)s, dout + h * hs, a.C, q_first + w * WMMA_SIDE, a.Tq - t0, hs);
    flash_load_stats(lse_tile, lse + h, a.NH, q_first, QUERIES, a.Tq - q0);
    flash_load_stats(D_tile, D + h, a.NH, q_first, QUERIES, a.Tq - q0);
    WmmaSums dq_sum[F];
    #pragma unroll
    for (int f = 0; f < F; f++) nvcuda::wmma::fill_fragment(dq_sum[f], 0.0f);
    int key_end = a.causal ? min(q0 + QUERIES, a.Tq) : a.Tk;  // tiles from key_end on: above the diagonal
    for (int k0 = 0; k0 < key_end; k0 += KT) {
        wmma_load_rows(k_tile, LD, kv + h * hs, a.kv_stride, kv_first + k0, KT, a.Tk - k0, hs);
        wmma_load_rows(v_tile, LD, kv + a.C + h * hs, a.kv_stride, kv_first + k0, KT, a.Tk - k0, hs);
        __syncthreads();  // loads in (lse, D too, the first time) before use
        if (!a.causal || k0 <= t0 + WMMA_SIDE - 1) {  // the same in the whole warp: a tile above its queries is skipped
            wmma_rows_times_cols<HS_MAX>(s, S_LD, q_part, k_tile, hs);    // s = q k^T
            wmma_rows_times_cols<HS_MAX>(dp, S_LD, dy_part, v_tile, hs);  // dp = dout v^T
            __syncwarp();
            wmma_probabilities(a, nullptr, ds, s, dp, lse_tile, D_tile, t0, k0, w * WMMA_SIDE, false, scale,
                               scale_log2);
            __syncwarp();
            wmma_add_product<HS_MAX>(dq_sum, ds, WMMA_BACKWARD_P_LD, k_tile, hs);  // dq += ds k
        }
        __syncthreads();  // every warp is done with k and v before the next pass overwrites them
    }
    if (t0 >= a.Tq) return;
    wmma_add_rows<HS_MAX, Out>(dq + (q_first + w * WMMA_SIDE) * dq_stride + h * hs, dq_stride,
                               min(WMMA_SIDE, a.Tq - t0), dq_sum, s, hs, std::is_same<Out, float>::value);
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

// ---------------------------------------------------------------- launchers
// Out float: a block's fp32 share (ring attention, the CUDA-core kernels); Out floatX: the one block
// of one rank's whole sequences, its output final (WMMA only: flash_wmma_head)
template <int HS_MAX, typename Out>
inline void flash_launch_forward(const AttentionBlock& a, const floatX* q, const floatX* kv, Out* out, float* lse) {
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
inline void flash_launch_backward(const AttentionBlock& a, const floatX* q, const floatX* kv, Out* dq, int dq_stride,
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
inline void flash_forward_any_head(const AttentionBlock& a, const floatX* q, const floatX* kv, Out* out, float* lse) {
    switch (flash_head_capacity(a.C / a.NH)) {
        case 16: flash_launch_forward<16>(a, q, kv, out, lse); break;
        case 32: flash_launch_forward<32>(a, q, kv, out, lse); break;
        case 64: flash_launch_forward<64>(a, q, kv, out, lse); break;
        default: flash_launch_forward<128>(a, q, kv, out, lse); break;
    }
    launchCheck();
}
template <typename Out>
inline void flash_backward_any_head(const AttentionBlock& a, const floatX* q, const floatX* kv, Out* dq, int dq_stride,
                                    Out* dkv, int dkv_stride, const floatX* dout, const float* lse, const float* D) {
    switch (flash_head_capacity(a.C / a.NH)) {
        case 16: flash_launch_backward<16>(a, q, kv, dq, dq_stride, dkv, dkv_stride, dout, lse, D); break;
        case 32: flash_launch_backward<32>(a, q, kv, dq, dq_stride, dkv, dkv_stride, dout, lse, D); break;
        case 64: flash_launch_backward<64>(a, q, kv, dq, dq_stride, dkv, dkv_stride, dout, lse, D); break;
        default: flash_launch_backward<128>(a, q, kv, dq, dq_stride, dkv, dkv_stride, dout, lse, D); break;
    }
    launchCheck();
}
// the block's keys merged into out (a row of C fp32 per query) and lse (a row of NH per query)
inline void attention_block_forward(const AttentionBlock& a, const floatX* q, const floatX* kv, float* out,
                                    float* lse) {
    // a grid of 0 blocks is a launch error (so in every launcher below); no keys: nothing to merge
    if (a.B * a.NH * a.Tq == 0 || a.Tk == 0) return;
    flash_forward_any_head(a, q, kv, out, lse);
}
// one rank's whole sequences, one causal block (a.first), with the WMMA kernels (flash_wmma_head):
// out written in floatX, with no fp32 scratch and no pass to round it (attention_forward)
inline void attention_whole_forward_wmma(const AttentionBlock& a, const floatX* q, const floatX* kv, floatX* out,
                                         float* lse) {
    if (a.B * a.NH * a.Tq == 0) return;
    flash_forward_any_head(a, q, kv, out, lse);
}
// the block's share of dq (the queries' rows, C fp32) and of dk, dv (the keys' rows, 2C fp32), added
inline void attention_block_backward(const AttentionBlock& a, const floatX* q, const floatX* kv, float* dq, float* dkv,
                                     const floatX* dout, const float* lse, const float* D) {
    if (a.B * a.NH * a.Tq == 0 || a.Tk == 0) return;
    flash_backward_any_head(a, q, kv, dq, a.C, dkv, 2 * a.C, dout, lse, D);
}
// the backward of attention_whole_forward_wmma: dq, dk, dv written in floatX straight into dqkv's
// rows (3C), with no fp32 sums to zero first and no pass to round them (attention_backward)
inline void attention_whole_backward_wmma(const AttentionBlock& a, const floatX* q, const floatX* kv, floatX* dqkv,
                                          const floatX* dout, const float* lse, const float* D) {
    if (a.B * a.NH * a.Tq == 0) return;
    flash_backward_any_head(a, q, kv, dqkv, 3 * a.C, dqkv + a.C, 3 * a.C, dout, lse, D);
}
// D (rows, NH) = dout . out per query row and head, for every block's backward
inline void attention_block_row_dot(float* D, const floatX* dout, const floatX* out, int rows, int C, int NH) {
    if (rows * NH == 0) return;
    constexpr int P = Packed128<floatX>::size;
    int lanes_a_head = C % (NH * P) == 0 ? C / NH / P : 0;  // whole packs a head, rows 16-byte apart
    if (lanes_a_head > 0 && lanes_a_head <= 32 && (lanes_a_head & (lanes_a_head - 1)) == 0 && packs_fit(C, {dout, out}))
        flash_row_dot_kernel128<<<ceil_div(rows, 8), 256>>>(D, dout, out, rows, C, NH);
    else
        flash_row_dot_kernel<<<ceil_div(rows * NH, 256), 256>>>(D, dout, out, rows, C, NH);
    launchCheck();
}
// the fp32 output of the last block, in floatX
inline void attention_block_output(floatX* out, const float* acc, size_t n) {
    if (n == 0) return;
    if (packs_fit(n, {out, acc}))
        flash_output_kernel128<<<ceil_div(n / Packed128<floatX>::size, 256), 256>>>(out, acc, n);
    else
        flash_output_kernel<<<ceil_div(n, 256), 256>>>(out, acc, n);
    launchCheck();
}
// dqkv (rows, 3C) floatX = [dq | dk dv] from the fp32 sums
inline void attention_block_gradients(floatX* dqkv, const float* dq, const float* dkv, size_t rows, int C) {
    if (rows == 0) return;
    if (packs_fit(C, {dqkv, dq, dkv}))
        flash_gradients_kernel128<<<ceil_div(rows * 3 * C / Packed128<floatX>::size, 256), 256>>>(dqkv, dq, dkv, rows,
                                                                                                  C);
    else
        flash_gradients_kernel<<<ceil_div(rows * 3 * C, 256), 256>>>(dqkv, dq, dkv, rows, C);
    launchCheck();
}
// the [k | v] rows (2C) of qkv rows (3C): what ring attention sends (cp.h)
inline void attention_pack_kv(floatX* kv, const floatX* qkv, size_t rows, int C) {
    if (rows == 0) return;
    flash_pack_kv_kernel<<<ceil_div(rows * 2 * C, 256), 256>>>(kv, qkv, rows, C);
    launchCheck();
}

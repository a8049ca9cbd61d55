/*
kernels/flash_attention_wmma.cuh: flash attention's walk (kernels/flash_attention.cuh, read first)
with its products on tensor cores, in the bf16 and fp16 builds (empty in the fp32 build, whose WMMA
is TF32: a 10-bit mantissa misses the fp32 tolerances), at head sizes 16, 32, 64 and 128.

    forward     flash_forward_wmma_kernel: a block of 4 warps takes 64 queries, a warp 16, whose q
                stays in fragments (registers); tiles of 64 keys (32 at head size 128). Both
                products on tensor cores (WMMA 16x16x16 fragments, fp32 sums). The scores go
                through shared memory, where two lanes a row run the online softmax in fp32 (exp2
                on scores scaled by log2 e), and o stays in accumulator fragments for the whole
                walk: which lane holds which element is unspecified, so the kernel reads the
                mapping once (wmma_accumulator_rows: a tile of row numbers loaded as a fragment)
                and rescales each element by its row's factor
    backward    flash_dkv_wmma_kernel, flash_dq_wmma_kernel: the same two walks as the CUDA-core
                kernels with the five products on tensor cores (s and dout v^T into shared memory,
                p and ds formed there by the lanes and rounded to floatX, then dv += p^T dout,
                dk += ds^T q, dq += ds k); a block of 4 warps takes 64 keys or queries, a warp 16,
                whose own rows (k and v, or q and dout) stay in fragments and whose sums stay in
                accumulator fragments across every tile
Tiles come in 16 bytes a thread, rows padded by 16 bytes so that a fragment's 16 rows start in
different shared-memory banks. The query tiles of a causal range run last-first (the last see the
most keys: started first, they do not finish alone at the end; the CUDA-core kernels run in order).

Registers and shared memory (ptxas, sm_90, bf16, head size 64): 160 (forward), 168 (dk dv), 128
(dq, 4 bytes spilled) registers a thread and 44, 37, 33 KB of shared memory (at head size 128 the
dk dv kernel uses all 255 registers). Measured on an H200 (docs/gpu.md, B 8, T 1024, NH 12, hs 64,
one layer, the labs): forward 0.28 ms, backward 1.15 ms (in a step dk dv 0.63, dq 0.36), against
0.41 and 0.78 ms for the (T,T) matrix through cuBLAS (dev/attention_forward.cu, attention_backward.cu
version 2); the versions before these and their times: docs/gpu.md.
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
Included by kernels/flash_attention.cuh (it uses that file's FLASH_* tiles' helpers, flash_load_stats);
applied in its launchers flash_launch_forward, flash_launch_backward.
*/
#pragma once
// defines: WMMA_SIDE, WMMA_KEYS, WMMA_PAD_BYTES, wmma_padded, WMMA_FORWARD_WARPS, wmma_forward_keys, wmma_kv_ld,
//          wmma_s_ld, wmma_p_ld, WMMA_BACKWARD_S_LD,
//          flash_forward_wmma_kernel, wmma_load_rows, wmma_accumulator_rows, wmma_softmax_tile, wmma_rescale_add_pv,
//          wmma_read_rows, wmma_divide_rows, WmmaSums, WmmaRows, wmma_start_rows, WmmaColsT, WmmaCols,
//          WMMA_BACKWARD_WARPS, WMMA_BACKWARD_P_LD, wmma_warp_floats, wmma_load_row_fragments, wmma_probabilities,
//          wmma_rows_times_cols, wmma_add_product, wmma_add_rows, flash_dkv_wmma_kernel, flash_dq_wmma_kernel,
//          wmma_out_value
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
#define WMMA_PAD_BYTES 16  // after each row of a shared tile
// the leading dimension, in elements of T, of a shared tile whose rows hold `values` of T
template <typename T> __host__ __device__ constexpr int wmma_padded(int values) {
    return values + WMMA_PAD_BYTES / (int)sizeof(T);
}
#define WMMA_FORWARD_WARPS 4
template <int HS_MAX> __host__ __device__ constexpr int wmma_forward_keys() { return HS_MAX >= 128 ? 32 : 64; }
template <int HS_MAX> __host__ __device__ constexpr int wmma_kv_ld() { return wmma_padded<floatX>(HS_MAX); }
template <int HS_MAX> __host__ __device__ constexpr int wmma_s_ld() {  // scores, fp32
    return wmma_padded<float>(wmma_forward_keys<HS_MAX>());
}
template <int HS_MAX> __host__ __device__ constexpr int wmma_p_ld() {  // probabilities, floatX
    return wmma_padded<floatX>(wmma_forward_keys<HS_MAX>());
}

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
// through `stage` (16 x wmma_kv_ld floatX of its own)
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
// where cols is a (COLS, hs) row-major tile (ld wmma_kv_ld) read column-major: the scores q k^T or
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
// left_ld) times right (COLS x hs, row-major, ld wmma_kv_ld), the COLS in order: the forward's
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
__device__ inline float wmma_softmax_tile(const AttentionRange& a, float& m, float& l, const float* s, int s_ld,
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
// its first range the ranges so far: out's rows and their lse (m = lse in log2 units, l = 1)
template <int HS_MAX, typename Out>
__device__ inline void wmma_start_rows(WmmaSums (&o)[HS_MAX / WMMA_SIDE], float* m, float* l, const AttentionRange& a,
                                       const Out* out, const float* lse, size_t row0, int h, int t, float* stage) {
    const float LOG2E = 1.4426950408889634f;
    int lane = threadIdx.x % 32, t0 = t - lane / 2;
    *m = -INFINITY, *l = 0.0f;
    #pragma unroll
    for (int f = 0; f < HS_MAX / WMMA_SIDE; f++) nvcuda::wmma::fill_fragment(o[f], 0.0f);
    if constexpr (std::is_same<Out, float>::value) {  // floatX out: the one range (flash_launch_forward)
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
    flash_forward_wmma_kernel(AttentionRange a, const floatX* q, const floatX* kv, Out* out, float* lse) {
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
    size_t q_first = attention_range_q_row(a, b, q0), row0 = q_first + w * WMMA_SIDE;  // row0: the warp's first row
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
    size_t kv_first = attention_range_kv_row(a, b, 0);
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
#define WMMA_BACKWARD_P_LD wmma_padded<floatX>(WMMA_KEYS)  // p and ds, floatX
#define WMMA_BACKWARD_S_LD wmma_padded<float>(WMMA_KEYS)   // s and dp, fp32
// a warp's fp32 scratch: its scores and dout . v products (16 x WMMA_KEYS each, padded); first its
// own rows of the two inputs it keeps in registers, on their way in (16 x wmma_kv_ld floatX each)
template <int HS_MAX> __host__ __device__ constexpr int wmma_warp_floats() {
    return 2 * WMMA_SIDE * WMMA_BACKWARD_S_LD > WMMA_SIDE * wmma_kv_ld<HS_MAX>() / 2
               ? 2 * WMMA_SIDE * WMMA_BACKWARD_S_LD
               : WMMA_SIDE * wmma_kv_ld<HS_MAX>() / 2;
}

// one warp, one tile: p and ds (16 x WMMA_KEYS floatX) from s and dp (fp32, ld WMMA_BACKWARD_S_LD) and the
// statistics of each element's query; `keys_by_queries`: the warp's rows are keys (dk, dv) or queries (dq)
__device__ inline void wmma_probabilities(const AttentionRange& a, floatX* p, floatX* ds, const float* s,
                                          const float* dp, const float* lse_tile, const float* D_tile, int row0,
                                          int col0, int stat0, bool keys_by_queries, float scale, float scale_log2) {
    const float LOG2E = 1.4426950408889634f;
    for (int e = threadIdx.x % 32; e < WMMA_SIDE * WMMA_KEYS; e += 32) {
        int r = e / WMMA_KEYS, c = e % WMMA_KEYS;
        int t = keys_by_queries ? col0 + c : row0 + r, j = keys_by_queries ? row0 + r : col0 + c;  // query, key
        int stat = keys_by_queries ? c : stat0 + r;                                                // t's in the tiles
        bool seen = j < a.Tk && t < a.Tq && (!a.causal || j <= t);
        int at = r * WMMA_BACKWARD_S_LD + c;
        float pe = seen ? exp2f(s[at] * scale_log2 - lse_tile[stat] * LOG2E) : 0.0f;
        if (p) p[r * WMMA_BACKWARD_P_LD + c] = from_float(pe);
        ds[r * WMMA_BACKWARD_P_LD + c] = from_float(pe * (dp[at] - D_tile[stat]) * scale);
    }
}

// grid (Tk / 64 rounded up, B * NH), 4 warps: warp w owns keys k0 + 16 w ..; per pass of WMMA_KEYS
// queries it forms p^T and ds^T (its keys by the pass's queries), then dv += p^T dout and dk += ds^T q
template <int HS_MAX, typename Out>
__global__ void __launch_bounds__(32 * WMMA_BACKWARD_WARPS) flash_dkv_wmma_kernel(AttentionRange a, const floatX* q,
        const floatX* kv, Out* dkv, int dkv_stride, const floatX* dout, const float* lse, const float* D) {
    constexpr int KEYS = WMMA_SIDE * WMMA_BACKWARD_WARPS, QT = WMMA_KEYS, F = HS_MAX / WMMA_SIDE;
    constexpr int LD = wmma_kv_ld<HS_MAX>(), S_LD = WMMA_BACKWARD_S_LD, WF = wmma_warp_floats<HS_MAX>();
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
    size_t q_first = attention_range_q_row(a, b, 0), kv_first = attention_range_kv_row(a, b, 0);
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
    bool add = std::is_same<Out, float>::value;  // fp32: a range's share, added; floatX: the one range's, written
    wmma_add_rows<HS_MAX, Out>(dk_rows, dkv_stride, valid, dk, s, hs, add);
    wmma_add_rows<HS_MAX, Out>(dk_rows + a.C, dkv_stride, valid, dv, s, hs, add);  // dv at dk + C
}

// grid (Tq / 64 rounded up, B * NH), 4 warps: warp w owns queries q0 + 16 w ..; per tile of
// WMMA_KEYS keys it forms ds (its queries by the tile's keys), then dq += ds k. Causal query tiles
// run last-first: the last see the most keys, and start first
template <int HS_MAX, typename Out>
__global__ void __launch_bounds__(32 * WMMA_BACKWARD_WARPS) flash_dq_wmma_kernel(AttentionRange a, const floatX* q,
        const floatX* kv, Out* dq, int dq_stride, const floatX* dout, const float* lse, const float* D) {
    constexpr int QUERIES = WMMA_SIDE * WMMA_BACKWARD_WARPS, KT = WMMA_KEYS, F = HS_MAX / WMMA_SIDE;
    constexpr int LD = wmma_kv_ld<HS_MAX>(), S_LD = WMMA_BACKWARD_S_LD, WF = wmma_warp_floats<HS_MAX>();
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
    size_t q_first = attention_range_q_row(a, b, q0), kv_first = attention_range_kv_row(a, b, 0);
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

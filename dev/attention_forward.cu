/*
dev/attention_forward.cu: causal self-attention (kernels/attention.cuh), per head h of size
hs = C/NH:  att = softmax(q k^T / sqrt(hs)) over t2 <= t;  out = att v.
qkv rows are [q | k | v] with the heads side by side, as GPT-2's c_attn writes them; att
(B,NH,T,T) is kept for the backward by versions 1 and 2. Versions 3 to 6 keep instead the
log-sum-exp of each query's scores, lse (B,NH,T) fp32, from which a flash-attention backward
recomputes any probability: p = exp(q.k/sqrt(hs) - lse). No (T,T) matrix is ever stored.

version 1: one thread per (b, h, t) query row: the host twin's row (materialized_forward_row)
           on the device, the scores staged in att itself. O(T hs) serial work per
           thread, no reuse of k, v
version 2: the trainer's attention_forward before flash attention (dev/attention_materialized.h):
           q, k, v permuted to (B,NH,T,hs), two strided-batched cuBLAS GEMMs (scores scaled in
           the GEMM) around a warp-per-row causal softmax, the output permuted back.
           Materialises (B,NH,T,T) scores
version 3: one thread per (b, h, t), the online softmax: q, k, v read straight from the qkv
           rows (no permute), a running max m and sum l, the output row held in registers and
           rescaled as each key arrives, written once with lse. Reads (B,T,3C), writes (B,T,C)
           and (B,NH,T): the (B,NH,T,T) traffic of versions 1 and 2 is gone, but every thread
           still reads its keys and values from global memory, one key at a time
version 4: FlashAttention-2's structure on CUDA cores (no tensor cores): a block of 32
           threads takes 32 queries of one (b, h); tiles of 32 keys and values pass through
           shared memory, loaded by all the block's threads together, so each k and v element
           is read from global memory once per 32 queries instead of once per query. Per tile:
           the scores, the online softmax (one rescale per tile, not per key). Causal: tiles
           wholly above the diagonal are never loaded, the diagonal tile is masked
version 5: version 4 with its two products on tensor cores (WMMA, 16x16x16 bf16/fp16 fragments,
           fp32 sums): a warp takes 16 queries (a fragment's rows), a block 4 warps (64 queries;
           2 at head size 128, to stay in 48 KB of static shared memory); tiles of 32 keys and
           values through shared memory as floatX. Per tile each warp computes its 16 x 32 scores
           S = Q K^T with mma_sync, stores them to shared memory, where 16 lanes run version 4's
           online softmax on them by rows in fp32 (max, sum, mask) and write P as floatX and rescale
           O, which stays in shared memory in fp32; then O += P V with mma_sync. Causal: tiles above
           the block's (and each warp's) diagonal are skipped, keys after the query or past T masked
           to -inf, padded rows loaded as zeros and never stored. What tensor cores buy: the
           2 T^2 hs multiply-adds a head (half of them masked), which versions 3 and 4 run as fp32
           FMAs on CUDA cores, go to MMA units whose dense bf16 rate on an H100 is about 15x the
           CUDA cores' fp32 rate; the softmax (an exp per score) stays on the CUDA cores and becomes
           the larger share of the time.
           Head sizes must be multiples of 16 (a fragment's depth and width): the lab says "not run"
           for the others (8 and 12 here, and the PyTorch cases, which have only those). Not in
           the fp32 build: its WMMA is TF32 (10-bit mantissa, inputs rounded by ~5e-4), which
           cannot meet the fp32 labs' 1e-5; the fp32 build prints so for each size.
           Not here: Hopper's wgmma (a warpgroup of 128 threads issues one asynchronous MMA from
           shared-memory operands in a swizzled layout) and TMA (a unit that copies a whole tile
           global -> shared on its own, with an mbarrier to wait on), which FlashAttention-3
           builds on, with warp specialisation (producer warps load while consumers multiply) and
           the softmax of one tile overlapped with the MMAs of the next: its paper reports 1.5-2x
           over FlashAttention-2 on an H100. The cost to a reader: PTX inline assembly or
           CUTLASS/CuTe, shared-memory descriptors, swizzles and an asynchronous pipeline to hold in
           mind at once; and the emulated build cannot run any of it (it has WMMA only, tests/emu/mma.h).
           What the emulated build proves for this version: the WMMA contract (warp-collective
           calls reached by all 32 lanes, 32-byte aligned pointers, leading dimensions in 16-byte
           multiples), the tile arithmetic, masks and padding against the host twin and float64,
           and that the code never reads which lane holds an accumulator element (the emulator's
           mapping differs from a GPU's, so code that relied on one would fail there or here).
           What it cannot: speed, shared-memory bank conflicts (the softmax's lane-per-row reads
           of S and O, 16 lanes at strides of 32 and HS_MAX words, hit one or two banks: up to
           16-way conflicts, which a padded leading dimension would remove), the real fragment layout and a tensor core's order of
           summation (results agree within the tolerance, not bit for bit)
version 6: the trainer's attention_forward (kernels/attention.cuh, kernels/flash_attention*.cuh):
           version 5 made general for ring attention's blocks (queries and keys at row offsets,
           keys from qkv rows or [k | v] rows, a block merged into the output and lse of earlier
           ones), with version 4's CUDA-core kernel where WMMA does not go (the fp32 build, head
           sizes other than 16, 32, 64, 128), and faster: q and o stay in fragments for the
           whole walk (o rescaled element by element through a map of which row each
           accumulator element holds, read once from a loaded tile), 64-key tiles, two lanes a
           softmax row, tiles loaded 16 bytes a thread with rows padded by 16 bytes, causal
           query tiles last-first. On an H200 at B 8, T 1024: 0.28 ms, version 5 2.25 ms,
           version 2 0.41 ms (docs/gpu.md). It writes lse as (B,T,NH) and its output in fp32
           first, then in floatX (a second pass over B T C: what merging blocks needs); the lab
           turns lse into (B,NH,T) for its checks, which the timing includes
version 7: the trainer's -fa 2 (kernels/flash_attention_mma.cuh, through attention_forward; its lse
           turned into (B,NH,T) as version 6's): version 5's walk as FlashAttention-2 writes it,
           the scores never leaving registers: the
           products are PTX's mma.sync.m16n8k16 (inline assembly; tests/emu/mma.h emulates it with
           the fragment layout the PTX ISA documents), so each lane runs the online softmax on the
           score elements it holds (a row's max over its 4 lanes by two shuffles), and P, rounded
           to floatX, is already mma's A operand for O += P V. 4 warps of 16 queries, tiles of 64
           keys, q in A fragments and O in accumulators for the whole walk, l summed per lane and
           across the row's lanes once at the end. Head sizes 16, 32, 64, 128 (compiled in),
           bf16 and fp16 builds. Against version 6: no store of S or P to shared memory, no
           barrier between the softmax and P V, no map of which row an accumulator element holds.
           ptxas (sm_90, bf16): 129 registers a thread at head size 64, 171 at 128, no spills.
           The B operands by ldmatrix (.trans for V), query tiles last-first, as version 6.
           Checked in the emulated build; not yet timed on a GPU (docs/gpu.md: the next session's list)
The block size applies to versions 1 and 3 (3: up to 256 threads, for its registers). The bytes
each must move differ: B T 4C floatX (qkv read, out written) for all, plus att's B NH T T floatX
for versions 1 and 2 or lse's B NH T fp32 for 3 to 5: 251 MB against 51 MB at B 8, T 1024,
C 768, NH 12 in bf16; the timings' GB/s are of these. Versions 3 to 5 take the head size at run time,
up to a capacity compiled in (16, 32, 64 or 128, the smallest that holds it): the output row
lives in registers (3, 4) or its shared-memory tile is sized by it (5). Version 5 ignores the
block size and runs once per size. Every version sums in a fixed order:
no atomics, the same bits every run.
*/
#include "lab.h"
#include "attention_materialized.h"  // defines: materialized_forward_host (the reference), materialized_forward_row
                                     //          (version 1), materialized_forward (version 2)
#include "../kernels/attention.cuh"  // defines: attention_forward (version 6), AttentionScratch

__global__ void attention_forward_kernel1(floatX* out, floatX* att, const floatX* qkv, int B, int T, int C, int NH) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;  // (b * NH + h) * T + t
    if (idx < B * NH * T) materialized_forward_row(idx / (T * NH), (idx / T) % NH, idx % T, out, att, qkv, T, C, NH);
}

// ---------------------------------------------------------------- version 3: online softmax, a thread per row
// The online softmax: after keys 0..j a row holds m (the largest score so far), l (the sum of
// exp(s - m)) and o (the sum of exp(s - m) v). A new key with score s moves m to m' = max(m, s);
// what was summed against the old m is scaled by exp(m - m') and the new key adds exp(s - m'):
//     l' = l exp(m - m') + exp(s - m')      o' = o exp(m - m') + exp(s - m') v
// At the end out = o / l and lse = m + log l. exp never sees a positive argument, so nothing
// overflows, and the scores need not be kept. (kernels/attention.cuh's attention_range_forward_row,
// the trainer's host twin, is the same recurrence, written for a block of keys merged into earlier ones.)
// A thread holds o in registers: ptxas -v (sm_90) counts 49 a thread at HS_MAX 16, 128 at 64 and
// 172 at 128, and a block may use 64K registers, so blocks of at most 256 threads
// (__launch_bounds__ tells the compiler, which may then use up to 255 a thread without spilling)
#define KERNEL3_MAX_BLOCK 256
template <int HS_MAX>  // the capacity of o: hs <= HS_MAX
__global__ void __launch_bounds__(KERNEL3_MAX_BLOCK)
attention_forward_kernel3(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;  // (b * NH + h) * T + t: lse's index
    if (idx >= B * NH * T) return;
    int b = idx / (NH * T), h = (idx / T) % NH, t = idx % T, hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    const floatX* q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
    float o[HS_MAX], m = -INFINITY, l = 0.0f;  // m = -inf: the first key's rescale is exp(-inf) = 0
    #pragma unroll
    for (int i = 0; i < HS_MAX; i++) o[i] = 0.0f;  // loops over HS_MAX, unrolled: o stays in registers
    for (int j = 0; j <= t; j++) {
        const floatX* k = qkv + ((size_t)b * T + j) * 3 * C + C + h * hs;
        const floatX* v = k + C;
        float s = 0.0f;
        for (int i = 0; i < hs; i++) s += to_float(q[i]) * to_float(k[i]);
        s *= scale;
        float m_new = fmaxf(m, s), rescale = expf(m - m_new), p = expf(s - m_new);
        #pragma unroll
        for (int i = 0; i < HS_MAX; i++)
            if (i < hs) o[i] = o[i] * rescale + p * to_float(v[i]);
        l = l * rescale + p;
        m = m_new;
    }
    floatX* y = out + ((size_t)b * T + t) * C + h * hs;
    #pragma unroll
    for (int i = 0; i < HS_MAX; i++)
        if (i < hs) y[i] = from_float(o[i] / l);
    lse[idx] = m + logf(l);
}

// ---------------------------------------------------------------- version 4: shared-memory tiles
#define QUERY_TILE 32  // Br: queries per block, one thread each
#define KEY_TILE 32    // Bc: keys per tile. Equal to QUERY_TILE, so one key tile is the diagonal's
static_assert(QUERY_TILE == KEY_TILE, "version 4 masks exactly one key tile per query tile, the one at the same offset");

// rows first_row .. first_row + rows - 1 of part `part` (0 q, 1 k, 2 v) of head h of sequence b,
// into a shared fp32 tile where element (row, i) sits at tile[row * row_stride + i * channel_stride]
// (converted once here, not at each of its uses).
// All the block's threads take part: thread x loads elements x, x + blockDim.x, ..., so that
// neighbouring threads read neighbouring channels of a row (coalesced). Rows past T are zeros
__device__ inline void load_head_rows(float* tile, int row_stride, int channel_stride, const floatX* qkv, int part,
                                      int b, int h, int first_row, int rows, int T, int C, int hs) {
    for (int e = threadIdx.x; e < rows * hs; e += blockDim.x) {
        int row = e / hs, i = e % hs, t = first_row + row;
        tile[row * row_stride + i * channel_stride] = t < T ? to_float(qkv[((size_t)b * T + t) * 3 * C + part * C + h * hs + i]) : 0.0f;
    }
}

// one key tile for query row r of the block: its `keys` scores, then the online softmax of
// version 3 with one rescale for the whole tile: m' = max(m, max_c s_c), o and l times
// exp(m - m'), then p_c = exp(s_c - m') for each key in order
template <int HS_MAX>
__device__ inline void attend_to_tile(float (&o)[HS_MAX], float& m, float& l, const float (*q_tile)[QUERY_TILE],
                                      const float (*k_tile)[HS_MAX], const float (*v_tile)[HS_MAX], int r, int keys,
                                      int hs, float scale) {
    float s[KEY_TILE], tile_max = -INFINITY;
    #pragma unroll
    for (int c = 0; c < KEY_TILE; c++) {
        if (c >= keys) continue;
        float dot = 0.0f;
        for (int i = 0; i < hs; i++) dot += q_tile[i][r] * k_tile[c][i];  // k: the same for every thread
        s[c] = dot * scale;
        tile_max = fmaxf(tile_max, s[c]);
    }
    float m_new = fmaxf(m, tile_max), rescale = expf(m - m_new);  // first tile: m = -inf, rescale 0
    l *= rescale;
    #pragma unroll
    for (int i = 0; i < HS_MAX; i++) o[i] *= rescale;
    #pragma unroll
    for (int c = 0; c < KEY_TILE; c++) {
        if (c >= keys) continue;
        float p = expf(s[c] - m_new);
        l += p;
        #pragma unroll
        for (int i = 0; i < HS_MAX; i++)
            if (i < hs) o[i] += p * v_tile[c][i];
    }
    m = m_new;
}

// grid (T / QUERY_TILE rounded up, B * NH), QUERY_TILE threads: thread r owns query t = q0 + r
template <int HS_MAX>
__global__ void attention_forward_kernel4(floatX* out, float* lse, const floatX* qkv, int T, int C, int NH) {
    // q transposed, (channel, query): at each step the 32 threads read 32 neighbouring words
    // (no bank conflicts); k and v (key, channel): every thread reads the same key (a broadcast).
    // fp32 in every build: 48 KB at HS_MAX 128, the most a block may declare statically
    __shared__ float q_tile[HS_MAX][QUERY_TILE], k_tile[KEY_TILE][HS_MAX], v_tile[KEY_TILE][HS_MAX];
    static_assert(sizeof(q_tile) + sizeof(k_tile) + sizeof(v_tile) <= 48 * 1024, "over the 48 KB of static shared memory");
    int b = blockIdx.y / NH, h = blockIdx.y % NH, hs = C / NH;
    int q0 = blockIdx.x * QUERY_TILE, r = threadIdx.x, t = q0 + r;
    float scale = 1.0f / sqrtf((float)hs);
    float o[HS_MAX], m = -INFINITY, l = 0.0f;
    #pragma unroll
    for (int i = 0; i < HS_MAX; i++) o[i] = 0.0f;
    // threads with t >= T (the last tile of a T not a multiple of 32) stay: they load their
    // share of every tile and meet every barrier, and only skip the arithmetic and the stores
    load_head_rows(&q_tile[0][0], 1, QUERY_TILE, qkv, 0, b, h, q0, QUERY_TILE, T, C, hs);
    int last_key = min(q0 + QUERY_TILE, T) - 1;  // the block's last query's own key: tiles past it are above the diagonal
    for (int k0 = 0; k0 <= last_key; k0 += KEY_TILE) {
        load_head_rows(&k_tile[0][0], HS_MAX, 1, qkv, 1, b, h, k0, KEY_TILE, T, C, hs);
        load_head_rows(&v_tile[0][0], HS_MAX, 1, qkv, 2, b, h, k0, KEY_TILE, T, C, hs);
        __syncthreads();  // every thread's loads (q's too, the first time) are in before any thread reads the tiles
        bool diagonal = k0 == q0;  // keys k0 .. k0+31 against queries q0 .. q0+31: query t sees keys j <= t only
        int keys = diagonal ? t - k0 + 1 : KEY_TILE;
        if (t < T) attend_to_tile<HS_MAX>(o, m, l, q_tile, k_tile, v_tile, r, keys, hs, scale);
        __syncthreads();  // every thread is done with the tiles before the next pass overwrites them
    }
    if (t >= T) return;
    floatX* y = out + ((size_t)b * T + t) * C + h * hs;
    #pragma unroll
    for (int i = 0; i < HS_MAX; i++)
        if (i < hs) y[i] = from_float(o[i] / l);
    lse[((size_t)b * NH + h) * T + t] = m + logf(l);
}

// ---------------------------------------------------------------- version 5: tensor cores (WMMA)
// Version 4's structure, with its two products on tensor cores: a warp-wide WMMA instruction
// multiplies a 16x16 tile by a 16x16 tile (bf16 or fp16 in, fp32 sums). A warp owns 16 query rows
// (a fragment's height); the block's warps share each key and value tile. The online softmax
// stays fp32 and by rows, on CUDA cores: the scores go through shared memory because which lane
// holds which element of an accumulator fragment is unspecified, so code may not read them there.
// O lives in shared memory too (fp32): the per-tile rescale is then a plain loop over a row, and
// P V adds into it as an accumulator loaded, multiplied into and stored back. (FlashAttention-2
// keeps O in registers, which needs the fragment layout of a PTX mma instruction: faster, not plain.)
// Every pointer a WMMA load or store takes is 32-byte aligned and every leading dimension a
// multiple of 16 bytes: tiles are __align__(32), 16-row and 16-column steps keep both.
// fp32 builds: no version 5 (see the header)
#if !FLOATX_IS_FP32
#include <mma.h>  // defines: nvcuda::wmma (tests/emu/mma.h in the emulated build)
namespace wmma = nvcuda::wmma;
#define WMMA_SIDE 16  // m = n = k = 16: a fragment's rows, columns and depth for bf16 and fp16
#define KEY_TILE5 32  // Bc: keys per tile, two fragments wide
// Br = 16 queries a warp; 4 warps (64 queries: each k, v element read once per 64) where the
// tiles fit the 48 KB of static shared memory, 2 at head size 128 (its fp32 O tile is 16 KB per 32 queries)
template <int HS_MAX> __host__ __device__ constexpr int query_warps5() { return HS_MAX >= 128 ? 2 : 4; }
typedef wmma::fragment<wmma::accumulator, WMMA_SIDE, WMMA_SIDE, WMMA_SIDE, float> AccumulatorFragment;
typedef wmma::fragment<wmma::matrix_a, WMMA_SIDE, WMMA_SIDE, WMMA_SIDE, floatX, wmma::row_major> RowsFragment;

// version 4's load_head_rows, kept in floatX (what the tensor cores take): rows first_row ..
// first_row + rows - 1 of part `part` (0 q, 1 k, 2 v), row-major with leading dimension ld. Rows past T are zeros
__device__ inline void load_head_rows_x(floatX* tile, int ld, const floatX* qkv, int part, int b, int h, int first_row,
                                        int rows, int T, int C, int hs) {
    for (int e = threadIdx.x; e < rows * hs; e += blockDim.x) {
        int row = e / hs, i = e % hs, t = first_row + row;
        tile[row * ld + i] = t < T ? qkv[((size_t)b * T + t) * 3 * C + part * C + h * hs + i] : from_float(0.0f);
    }
}

// one warp: s (16 x KEY_TILE5 fp32) = q (its 16 rows, hs channels) times k^T, 16 keys by 16
// channels at a time. k's tile is (key, channel) row-major: read column-major it is k^T
template <int HS_MAX>
__device__ inline void warp_scores(float* s, const floatX* q, const floatX* k, int hs) {
    for (int key = 0; key < KEY_TILE5; key += WMMA_SIDE) {
        AccumulatorFragment scores;
        wmma::fill_fragment(scores, 0.0f);
        for (int i = 0; i < hs; i += WMMA_SIDE) {
            RowsFragment q_part;
            wmma::fragment<wmma::matrix_b, WMMA_SIDE, WMMA_SIDE, WMMA_SIDE, floatX, wmma::col_major> k_part;
            wmma::load_matrix_sync(q_part, q + i, HS_MAX);
            wmma::load_matrix_sync(k_part, k + key * HS_MAX + i, HS_MAX);
            wmma::mma_sync(scores, q_part, k_part, scores);
        }
        wmma::store_matrix_sync(s + key, scores, KEY_TILE5, wmma::mem_row_major);
    }
}

// one warp: o (its 16 rows, fp32) += p (16 x KEY_TILE5) times v (KEY_TILE5 x hs), 16 channels
// of o at a time, the keys in ascending order (a fixed order: the same sums every run)
template <int HS_MAX>
__device__ inline void warp_add_pv(float* o, const floatX* p, const floatX* v, int hs) {
    for (int i = 0; i < hs; i += WMMA_SIDE) {
        AccumulatorFragment o_part;
        wmma::load_matrix_sync(o_part, o + i, HS_MAX, wmma::mem_row_major);
        for (int key = 0; key < KEY_TILE5; key += WMMA_SIDE) {
            RowsFragment p_part;
            wmma::fragment<wmma::matrix_b, WMMA_SIDE, WMMA_SIDE, WMMA_SIDE, floatX, wmma::row_major> v_part;
            wmma::load_matrix_sync(p_part, p + key, KEY_TILE5);
            wmma::load_matrix_sync(v_part, v + key * HS_MAX + i, HS_MAX);
            wmma::mma_sync(o_part, p_part, v_part, o_part);
        }
        wmma::store_matrix_sync(o + i, o_part, HS_MAX, wmma::mem_row_major);
    }
}

// one lane, one query row t against the key tile k0 ..: version 4's online softmax on the scores
// the tensor cores left in s_row. Keys after t (the causal mask) or past T (zero padding) get
// -inf, so exp gives 0. p goes to p_row as floatX for P V; l sums the fp32 p, as lse needs
__device__ inline void softmax_row(float& m, float& l, float* s_row, floatX* p_row, float* o_row, int t, int k0, int T,
                                   int hs, float scale) {
    float tile_max = -INFINITY;
    for (int c = 0; c < KEY_TILE5; c++) {
        int j = k0 + c;
        s_row[c] = j <= t && j < T ? s_row[c] * scale : -INFINITY;
        tile_max = fmaxf(tile_max, s_row[c]);
    }
    // key 0 is in the first tile and every row sees it, so m_new is finite from then on
    float m_new = fmaxf(m, tile_max), rescale = expf(m - m_new);  // first tile: m = -inf, rescale 0
    l *= rescale;
    for (int i = 0; i < hs; i++) o_row[i] *= rescale;
    for (int c = 0; c < KEY_TILE5; c++) {
        float p = expf(s_row[c] - m_new);
        l += p;
        p_row[c] = from_float(p);
    }
    m = m_new;
}

// one warp's share of one key tile: S by WMMA, the softmax by rows (lanes 0..15, one row each:
// they keep its m and l), O += P V by WMMA. __syncwarp between the steps: a lane reads rows
// that other lanes' fragments wrote
template <int HS_MAX>
__device__ inline void warp_attend_to_tile(float& m, float& l, float* s, floatX* p, float* o, const floatX* q,
                                           const floatX* k, const floatX* v, int first_query, int k0, int T, int hs) {
    int lane = threadIdx.x % 32;
    warp_scores<HS_MAX>(s, q, k, hs);
    __syncwarp();
    if (lane < WMMA_SIDE)
        softmax_row(m, l, s + lane * KEY_TILE5, p + lane * KEY_TILE5, o + lane * HS_MAX, first_query + lane, k0, T, hs,
                    1.0f / sqrtf((float)hs));
    __syncwarp();
    warp_add_pv<HS_MAX>(o, p, v, hs);
    __syncwarp();  // o's rows are in before lanes rescale them (next tile) or write them out
}

// grid (T / queries rounded up, B * NH), query_warps5 warps: warp w owns queries q0 + 16 w ..
template <int HS_MAX>
__global__ void __launch_bounds__(32 * query_warps5<HS_MAX>())
attention_forward_kernel5(floatX* out, float* lse, const floatX* qkv, int T, int C, int NH) {
    constexpr int QUERIES = WMMA_SIDE * query_warps5<HS_MAX>();
    // floatX tiles as raw 16-bit words, cast at use: the emulated build's bf16 and fp16 are classes
    // with constructors, and a __shared__ array of them (static thread_local there) gets an
    // initialisation guard that ThreadSanitizer reports as a race. (query or key, channel) and
    // (query, key), row-major
    __shared__ __align__(32) uint16_t q_bits[QUERIES * HS_MAX], k_bits[KEY_TILE5 * HS_MAX], v_bits[KEY_TILE5 * HS_MAX],
                                      p_bits[QUERIES * KEY_TILE5];
    __shared__ __align__(32) float s_tile[QUERIES * KEY_TILE5], o_tile[QUERIES * HS_MAX];
    static_assert(sizeof(q_bits) + sizeof(k_bits) + sizeof(v_bits) + sizeof(p_bits) + sizeof(s_tile) + sizeof(o_tile) <=
                  48 * 1024, "over the 48 KB of static shared memory");
    floatX *q_tile = (floatX*)q_bits, *k_tile = (floatX*)k_bits, *v_tile = (floatX*)v_bits, *p_tile = (floatX*)p_bits;
    int b = blockIdx.y / NH, h = blockIdx.y % NH, hs = C / NH, q0 = blockIdx.x * QUERIES;
    int row0 = threadIdx.x / 32 * WMMA_SIDE, lane = threadIdx.x % 32;  // the warp's first row in the tiles
    float m = -INFINITY, l = 0.0f;  // lane < 16: row row0 + lane's running max and sum
    load_head_rows_x(q_tile, HS_MAX, qkv, 0, b, h, q0, QUERIES, T, C, hs);
    for (int e = threadIdx.x; e < QUERIES * HS_MAX; e += blockDim.x) o_tile[e] = 0.0f;
    int last_key = min(q0 + QUERIES, T) - 1;  // tiles past the block's last query are above the diagonal
    for (int k0 = 0; k0 <= last_key; k0 += KEY_TILE5) {
        load_head_rows_x(k_tile, HS_MAX, qkv, 1, b, h, k0, KEY_TILE5, T, C, hs);
        load_head_rows_x(v_tile, HS_MAX, qkv, 2, b, h, k0, KEY_TILE5, T, C, hs);
        __syncthreads();  // every thread's loads (q and o's too, the first time) are in before any warp reads the tiles
        if (k0 <= q0 + row0 + WMMA_SIDE - 1)  // the same in the whole warp: a tile above its own rows is skipped
            warp_attend_to_tile<HS_MAX>(m, l, s_tile + row0 * KEY_TILE5, p_tile + row0 * KEY_TILE5, o_tile + row0 * HS_MAX,
                                        q_tile + row0 * HS_MAX, k_tile, v_tile, q0 + row0, k0, T, hs);
        __syncthreads();  // every warp is done with k and v before the next pass overwrites them
    }
    int t = q0 + row0 + lane;
    if (lane >= WMMA_SIDE || t >= T) return;  // padded rows (t >= T) are computed, never stored
    const float* o_row = o_tile + (row0 + lane) * HS_MAX;
    floatX* y = out + ((size_t)b * T + t) * C + h * hs;
    for (int i = 0; i < hs; i++) y[i] = from_float(o_row[i] / l);
    lse[((size_t)b * NH + h) * T + t] = m + logf(l);
}

template <int HS_MAX> static void launch_kernel5(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH) {
    constexpr int warps = query_warps5<HS_MAX>();
    attention_forward_kernel5<HS_MAX><<<dim3(ceil_div(T, WMMA_SIDE * warps), B * NH), 32 * warps>>>(out, lse, qkv, T, C, NH);
}
#endif

// the smallest compiled capacity that holds head size hs
static int head_capacity(int hs) {
    if (hs > 128) fail("attention_forward versions 3 to 5: head size %d, more than the 128 they are compiled for", hs);
    return hs <= 16 ? 16 : hs <= 32 ? 32 : hs <= 64 ? 64 : 128;
}
static void attention_forward3(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH, int block) {
    if (block > KERNEL3_MAX_BLOCK) fail("attention_forward version 3: blocks of %d threads, more than %d", block, KERNEL3_MAX_BLOCK);
    int grid = ceil_div(B * NH * T, block);
    switch (head_capacity(C / NH)) {
        case 16: attention_forward_kernel3<16><<<grid, block>>>(out, lse, qkv, B, T, C, NH); break;
        case 32: attention_forward_kernel3<32><<<grid, block>>>(out, lse, qkv, B, T, C, NH); break;
        case 64: attention_forward_kernel3<64><<<grid, block>>>(out, lse, qkv, B, T, C, NH); break;
        default: attention_forward_kernel3<128><<<grid, block>>>(out, lse, qkv, B, T, C, NH); break;
    }
    launchCheck();
}
static void attention_forward4(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH) {
    dim3 grid(ceil_div(T, QUERY_TILE), B * NH);
    switch (head_capacity(C / NH)) {
        case 16: attention_forward_kernel4<16><<<grid, QUERY_TILE>>>(out, lse, qkv, T, C, NH); break;
        case 32: attention_forward_kernel4<32><<<grid, QUERY_TILE>>>(out, lse, qkv, T, C, NH); break;
        case 64: attention_forward_kernel4<64><<<grid, QUERY_TILE>>>(out, lse, qkv, T, C, NH); break;
        default: attention_forward_kernel4<128><<<grid, QUERY_TILE>>>(out, lse, qkv, T, C, NH); break;
    }
    launchCheck();
}
// version 5 in a bf16 or fp16 build, at a head size that is a multiple of 16 (cannot_run says so)
static void attention_forward5(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH) {
#if FLOATX_IS_FP32
    (void)out, (void)lse, (void)qkv, (void)B, (void)T, (void)C, (void)NH;
    fail("attention_forward version 5: bf16 and fp16 builds only");
#else
    int hs = C / NH;
    if (hs % WMMA_SIDE) fail("attention_forward version 5: head size %d, not a multiple of %d", hs, WMMA_SIDE);
    switch (head_capacity(hs)) {
        case 16: launch_kernel5<16>(out, lse, qkv, B, T, C, NH); break;
        case 32: launch_kernel5<32>(out, lse, qkv, B, T, C, NH); break;
        case 64: launch_kernel5<64>(out, lse, qkv, B, T, C, NH); break;
        default: launch_kernel5<128>(out, lse, qkv, B, T, C, NH); break;
    }
    launchCheck();
#endif
}

// ---------------------------------------------------------------- the lab
// versions 6 and 7 (the trainer's, -fa 1 and 2) keep lse as (B,T,NH), lse_rows, and need the fp32 AttentionScratch
struct Buffers { floatX *out, *att, *qkv, *scratch; float *lse, *lse_rows; AttentionScratch flash; };
static float* device_floats(size_t n) { return (float*)device_malloc(n * sizeof(float)); }
static Buffers upload(const std::vector<floatX>& qkv, int B, int T, int C, int NH) {
    size_t n = (size_t)B * T * C, stats = (size_t)B * NH * T;
    return {(floatX*)device_malloc(n * sizeof(floatX)), (floatX*)device_malloc((size_t)B * NH * T * T * sizeof(floatX)),
            to_device(qkv), (floatX*)device_malloc(materialized_scratch_elements(B, T, C, NH) * sizeof(floatX)),
            device_floats(stats), device_floats(stats), {device_floats(n), device_floats(n), device_floats(2 * n), device_floats(stats)}};
}
static void release(const Buffers& d) {
    device_free(d.out); device_free(d.att); device_free(d.qkv); device_free(d.scratch); device_free(d.lse); device_free(d.lse_rows);
    device_free(d.flash.out); device_free(d.flash.dq); device_free(d.flash.dkv); device_free(d.flash.D);
}
// version 6's lse (B,T,NH) into the lab's (B,NH,T), where the checks read it
__global__ void lse_rows_to_heads_kernel(float* lse, const float* rows, int B, int T, int NH) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;  // (b * NH + h) * T + t
    if (i < B * NH * T) lse[i] = rows[((size_t)(i / (NH * T)) * T + i % T) * NH + (i / T) % NH];
}
// out, att and lse set to NaN (all bits set, in every precision): a version that leaves an element
// unwritten fails its check instead of passing on the last version's result
static void poison_outputs(const Buffers& d, int B, int T, int C, int NH) {
    cudaCheck(cudaMemset(d.out, 0xFF, (size_t)B * T * C * sizeof(floatX)));
    cudaCheck(cudaMemset(d.att, 0xFF, (size_t)B * NH * T * T * sizeof(floatX)));
    cudaCheck(cudaMemset(d.lse, 0xFF, (size_t)B * NH * T * sizeof(float)));
}
static bool writes_att(int version) { return version <= 2; }  // versions 3 to 6 write lse instead
// version 3 runs at the lab's block sizes up to KERNEL3_MAX_BLOCK; versions 2, 4, 5 and 6 ignore the
// block size (5 and 6 run once, at the first: the emulated build's time is make test's)
static bool runs_at(int version, int block) {
    return version == 3 ? block <= KERNEL3_MAX_BLOCK : version < 5 || block == LAB_BLOCK_SIZES[0];
}
// why version `version` cannot run at head size hs in this build, or nullptr: it can. The lab
// prints the reason in place of the version's checks, so the report shows what was not run
static const char* cannot_run(int version, int hs) {
    if (version != 5 && version != 7) return nullptr;
    if (FLOATX_IS_FP32) return "bf16 and fp16 builds only (TF32 tensor cores miss the fp32 build's 1e-5)";
    if (version == 5 && hs % 16) return "head size not a multiple of 16 (WMMA's fragments are 16 wide)";
    if (version == 7 && !mma_head_size(hs)) return "head size not 16, 32, 64 or 128";
    return nullptr;
}
// the bytes a version must move: qkv read, out written, and att (versions 1, 2) or lse (3 to 5)
// written. What it reads again from cache or writes to scratch (version 2's permutes and scores) is not counted
static double compulsory_bytes(int version, int B, int T, int C, int NH) {
    double qkv_out = (double)B * T * 4 * C * sizeof(floatX);
    return qkv_out + (writes_att(version) ? (double)B * NH * T * T * sizeof(floatX) : (double)B * NH * T * sizeof(float));
}

static void attention_forward_version(int version, int block, const Buffers& d, int B, int T, int C, int NH) {
    if (version == 1) {
        attention_forward_kernel1<<<ceil_div(B * NH * T, block), block>>>(d.out, d.att, d.qkv, B, T, C, NH);
        launchCheck();
    } else if (version == 2) {
        materialized_forward(d.out, d.att, d.qkv, d.scratch, B, T, C, NH);
    } else if (version == 3) {
        attention_forward3(d.out, d.lse, d.qkv, B, T, C, NH, block);
    } else if (version == 4) {
        attention_forward4(d.out, d.lse, d.qkv, B, T, C, NH);
    } else if (version == 5) {
        attention_forward5(d.out, d.lse, d.qkv, B, T, C, NH);
    } else {  // the trainer's through kernels/attention.cuh: 6 kernels/flash_attention_wmma.cuh (-fa 1), 7
              // kernels/flash_attention_mma.cuh (-fa 2)
        attention_forward(d.out, d.lse_rows, d.qkv, d.flash, B, T, C, NH, version == 7 ? 2 : 1);
        lse_rows_to_heads_kernel<<<ceil_div(B * NH * T, 256), 256>>>(d.lse, d.lse_rows, B, T, NH);
        launchCheck();
    }
}

// lse is fp32 statistics: 1e-5 against float64 in every build, as the labs hold fp32 state.
// Quiet unless it fails; *worst keeps the largest relative error for the report
static void check_lse(Lab* lab, const float* d_lse, const std::vector<double>& reference, double* worst) {
    std::vector<float> ours = from_device(d_lse, reference.size());
    RefTensor theirs;
    theirs.values = reference;
    double err;
    if (!check_close("lse vs float64", ours.data(), theirs, 1e-5, [](float x) { return (double)x; }, true, &err)) lab->failures++;
    if (!(err <= *worst)) *worst = err;
}

// one size: every version at every block size against the host twin (out, and att for versions
// 1 and 2) and against float64's lse (versions 3 to 5)
static void check_versions(Lab* lab, const Buffers& d, const std::vector<floatX>& out, const std::vector<floatX>& att,
                           const std::vector<double>& lse, int versions, int B, int T, int C, int NH) {
    for (int v = 1; v <= versions; v++) {
        if (!lab_wants(*lab, v)) continue;
        if (const char* why = cannot_run(v, C / NH)) {
            printf("  version %d, B T C NH %d %d %d %d: not run: %s\n", v, B, T, C, NH, why);
            continue;
        }
        double worst_lse = 0.0;
        for (int block : LAB_BLOCK_SIZES) {
            if (!runs_at(v, block)) continue;
            poison_outputs(d, B, T, C, NH);
            attention_forward_version(v, block, d, B, T, C, NH);
            lab_check(lab, "out", d.out, out);
            if (writes_att(v)) lab_check(lab, "att", d.att, att);
            else check_lse(lab, d.lse, lse, &worst_lse);
        }
        lab_report(lab, v, "B T C NH", {B, T, C, NH});
        if (!writes_att(v)) printf("  %-44s     lse against float64,          worst rel err %.2e\n", "", worst_lse);
    }
}

// times every wanted version at its block sizes (time_versions' output, with the bytes of each
// version: they differ by the (B,NH,T,T) matrix)
static void time_attention(const Lab& lab, const Buffers& d, int versions, int B, int T, int C, int NH) {
#ifdef CUDA_EMULATION
    printf("  timing skipped: emulated CUDA\n");
    return;
#endif
    double flops = 4.0 * B * T * T * C;  // two T x T x hs products per head, half of them masked
    for (int v = 1; v <= versions; v++) {
        if (!lab_wants(lab, v) || cannot_run(v, C / NH)) continue;  // check_versions said why
        double bytes = compulsory_bytes(v, B, T, C, NH);
        printf("  version %d must move %.1f MB\n", v, bytes / 1e6);
        for (int block : LAB_BLOCK_SIZES) {
            if (!runs_at(v, block)) continue;
            float ms = time_ms([&] { attention_forward_version(v, block, d, B, T, C, NH); });
            printf("  version %d, block %4d: %8.4f ms, %7.1f GB/s, %6.1f TFLOP/s\n", v, block, ms, bytes / ms / 1e6, flops / ms / 1e9);
        }
    }
}

int main(int argc, char** argv) {
    const int VERSIONS = 7;
    Lab lab = lab_start(argc, argv, "attention_forward", VERSIONS);
    // the awkward sizes: T = 1, 17, 64, 100 (all but 64 leave version 4's last 32-query tile and
    // version 5's last 64- or 32-query tile part empty) at head sizes 16, 64, 128; then the lab's
    // first sizes (head sizes 8, 12: not version 5's; 64); T = 1024 is timed
    struct Size { int B, T, C, NH; } sizes[] = {
        {2, 1, 32, 2}, {2, 1, 128, 2}, {1, 1, 256, 2}, {2, 17, 32, 2}, {2, 17, 128, 2}, {1, 17, 256, 2},
        {2, 64, 32, 2}, {1, 64, 128, 2}, {1, 64, 256, 2}, {2, 100, 32, 2}, {1, 100, 128, 2}, {1, 100, 256, 2},
        {2, 8, 16, 2}, {1, 33, 48, 4}, {4, 64, 768, 12}, {8, 1024, 768, 12}};
    for (Size s : sizes) {
        if (lab_skip_in_emulation((double)s.B * s.NH * s.T * s.T)) continue;
        std::vector<floatX> qkv = random_floatx((size_t)s.B * s.T * 3 * s.C, 1), out((size_t)s.B * s.T * s.C),
                            att((size_t)s.B * s.NH * s.T * s.T);
        materialized_forward_host(out.data(), att.data(), qkv.data(), s.B, s.T, s.C, s.NH);
        std::vector<double> lse = lse_float64(qkv, s.B, s.T, s.C, s.NH);
        Buffers d = upload(qkv, s.B, s.T, s.C, s.NH);
        check_versions(&lab, d, out, att, lse, VERSIONS, s.B, s.T, s.C, s.NH);
        if (s.T == 1024) time_attention(lab, d, VERSIONS, s.B, s.T, s.C, s.NH);
        release(d);
    }
    for_each_ref_case("attention", [&](const RefFile& ref, const std::string& p, const std::vector<int>& sz) {
        int B = sz[0], T = sz[1], C = sz[2], NH = sz[3];
        Buffers d = upload(ref_floatx(ref, p + "qkv"), B, T, C, NH);
        for (int v = 1; v <= VERSIONS; v++) {
            if (!lab_wants(lab, v)) continue;
            if (const char* why = cannot_run(v, C / NH)) {
                printf("  version %d against PyTorch, case %s: not run: %s\n", v, p.c_str(), why);
                continue;
            }
            printf("  version %d against PyTorch, case %s\n", v, p.c_str());
            poison_outputs(d, B, T, C, NH);
            attention_forward_version(v, 256, d, B, T, C, NH);
            lab_check_ref(&lab, "out", d.out, ref, p + "out");
            if (writes_att(v)) lab_check_ref(&lab, "att", d.att, ref, p + "att");
        }
        release(d);
    });
    return lab_finish(lab);
}

/*
dev/attention_backward.cu: causal self-attention's backward (kernels/attention.cuh): from
dout and the kept att, through out = att v, the softmax (dpre = att * (datt - sum(att *
datt)), the O(T) identity instead of the T x T Jacobian) and q k^T / sqrt(hs), to dqkv.

version 1: one thread per (b, h): the host twin's head (materialized_backward_head) on the
           device, dq, dk, dv summed in fp32 in global scratch and stored once. Only
           B*NH threads: a reference
version 2: the trainer's attention_backward before flash attention (dev/attention_materialized.h): permutes, four strided-batched cuBLAS GEMMs
           (datt = dy v^T, dv = att^T dy, dq = dpre k, dk = dpre^T q) around a
           warp-per-row softmax backward, permuted back
Versions 3 and 4 are flash attention's backward: they read the forward's lse (B,NH,T) fp32
(dev/attention_forward.cu's versions 3 onward write it) and out (B,T,C), never the (B,NH,T,T)
att, and recompute each probability p_tj = exp(q_t.k_j/sqrt(hs) - lse_t) where it is needed.
With D_t = dout_t . out_t (= sum_j p_tj dp_tj, the softmax backward's row sum):
    dv_j += p_tj dout_t    dp_tj = dout_t . v_j    ds_tj = p_tj (dp_tj - D_t)
    dq_t += ds_tj k_j / sqrt(hs)    dk_j += ds_tj q_t / sqrt(hs)
version 3: three scalar kernels: D (a thread per (b, h, t)); dk, dv (a thread per key j,
           summing over the queries t >= j in order); dq (a thread per query t, summing over
           the keys j <= t in order). Every sum by one thread, no atomics; each thread reads
           its rows from global memory one at a time, like the forward's version 3
version 4: FlashAttention-2's backward structure on CUDA cores: the dk, dv kernel gives a
           block 32 keys of one (b, h), held in shared memory; it walks the query tiles at
           or below the diagonal, staging q, dout, lse and D through shared memory, and sums
           dk, dv in registers, written once. The dq kernel gives a block 32 queries and
           walks the key tiles at or left of the diagonal. Each k, v, q, dout element is
           read from global memory once per 32 rows of the other side instead of once per row
version 5: the trainer's attention_backward (kernels/attention.cuh, kernels/flash_attention*.cuh):
           version 4 made general for ring attention's blocks (row offsets, keys from qkv or
           [k | v] rows), adding into fp32 dq and dk dv sums that a last pass turns into floatX
           dqkv (what summing over ring steps needs: two more passes over B T 3C than version 4).
           In the bf16 and fp16 builds at head sizes 16, 32, 64, 128 its five products run on
           tensor cores (WMMA): a warp's 16 rows of k and v (or q and dout) in fragments, s and dp
           into shared memory, p and ds formed there and rounded to floatX, dv, dk, dq summed in
           accumulator fragments, 64 keys or queries a block (kernels/flash_attention_wmma.cuh). On an
           H200 at B 8, T 1024: 1.15 ms, version 2 0.78 ms (docs/gpu.md)
version 6: the trainer's -fa 2 (kernels/flash_attention_mma.cuh, through attention_backward, which
           computes D itself): version 4's two walks as FlashAttention-2 writes them, the scores never leaving
           registers: PTX's mma.sync.m16n8k16 (kernels/mma_m16n8k16.cuh; emulated with the PTX ISA's
           fragment layout), so each lane forms p and ds from the elements it holds and hands
           them, rounded to floatX, to the next product as its A operand. dk dv: a warp keeps 16
           keys' k and v in fragments and walks the query tiles (q, dout, lse, D in shared
           memory); dq: 16 queries' q and dout, walking the key tiles. 64 rows a tile, 4 warps a
           block; bf16 and fp16 builds, head sizes 16, 32, 64, 128. Against version 5: no s, dp,
           p or ds in shared memory, no barrier between the products, dqkv written once in
           floatX (no fp32 sums and last pass: version 4's one-rank form, not ring attention's).
           ptxas (sm_90, bf16, head size 64): dk dv 229 registers a thread, dq 165, no spills (at
           128 dk dv spills 192 bytes: its k, v, dk, dv, p and ds fragments fill 255 registers).
           The B operands by ldmatrix; dq's query tiles last-first (they see the most keys), dk
           dv's key tiles first-first (the first see the most queries)
           Checked in the emulated build; not yet timed on a GPU
The bytes each must move: qkv and dout read, dqkv written (B T 7C floatX), plus att's B NH T T
floatX for versions 1 and 2, or out's B T C floatX and lse's B NH T fp32 for 3 to 5: at B 8,
T 1024, C 768, NH 12 in bf16, 289.4 MB against 101.1 MB (printed with the timings). Versions 3
and 4 take the head size at run time, up to a capacity compiled in (16, 32, 64 or 128, the
smallest that holds it): the dq or dk, dv rows live in registers, whose count the compiler must
know. The block size applies to versions 1 and 3 (3: up to 256 threads, for its registers) and
to the D kernel of version 4. Every output is summed by one thread in a fixed order: no atomics,
the same bits every run.
*/
#include "lab.h"
#include "attention_materialized.h"  // defines: materialized_backward_host (the reference), materialized_backward_head
                                     //          (version 1), materialized_backward (version 2), materialized_forward_host
#include "../kernels/attention.cuh"  // defines: attention_backward (version 5), AttentionScratch

// acc: materialized_head_scratch_floats per (b, h)
__global__ void attention_backward_kernel1(floatX* dqkv, const floatX* dout, const floatX* qkv, const floatX* att,
                                           float* acc, int B, int T, int C, int NH) {
    int bh = blockIdx.x * blockDim.x + threadIdx.x;
    if (bh < B * NH)
        materialized_backward_head(bh / NH, bh % NH, dqkv, dout, qkv, att, acc + bh * materialized_head_scratch_floats(T, C, NH), T, C, NH);
}

// ---------------------------------------------------------------- version 3: a thread per row
// (kernels/attention.cuh's attention_range_dq_row and attention_range_dkv_row, the trainer's host
// twin, are this arithmetic for a block of keys, adding into fp32 sums; lse and D there are (B,T,NH).)

// D[(b NH + h) T + t] = dout_t . out_t over head h's channels, summed in fp32
__global__ void attention_row_dot_kernel(float* D, const floatX* dout, const floatX* out, int B, int T, int C, int NH) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;  // (b * NH + h) * T + t
    if (idx >= B * NH * T) return;
    int b = idx / (NH * T), h = (idx / T) % NH, t = idx % T, hs = C / NH;
    size_t row = ((size_t)b * T + t) * C + h * hs;
    float d = 0.0f;
    for (int i = 0; i < hs; i++) d += to_float(dout[row + i]) * to_float(out[row + i]);
    D[idx] = d;
}

// q_t . k_j / sqrt(hs) - lse_t, exponentiated: the probability the forward gave key j in row t
__device__ inline float recomputed_probability(const floatX* q, const floatX* k, float lse, int hs, float scale) {
    float dot = 0.0f;
    for (int i = 0; i < hs; i++) dot += to_float(q[i]) * to_float(k[i]);
    return expf(dot * scale - lse);
}
__device__ inline float row_dot(const floatX* x, const floatX* y, int hs) {
    float d = 0.0f;
    for (int i = 0; i < hs; i++) d += to_float(x[i]) * to_float(y[i]);
    return d;
}

// A thread holds its sums in registers: ptxas -v (sm_90) counts 73, 127, 166 and 255 a thread for
// dk, dv at HS_MAX 16, 32, 64, 128 (the last spills about 0.5 KB a thread to local memory: 256
// accumulators do not fit 255 registers), 58 to 168 for dq. A block may use 64K registers, so
// blocks of at most 256 threads (__launch_bounds__ tells the compiler)
#define KERNEL3_MAX_BLOCK 256
// one thread per key (b, h, j): dk_j, dv_j over the queries t = j .. T-1, in that order
template <int HS_MAX>
__global__ void __launch_bounds__(KERNEL3_MAX_BLOCK)
attention_dkv_kernel3(floatX* dqkv, const floatX* dout, const floatX* qkv, const float* lse, const float* D, int B, int T, int C, int NH) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;  // (b * NH + h) * T + j
    if (idx >= B * NH * T) return;
    int b = idx / (NH * T), h = (idx / T) % NH, j = idx % T, hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    const floatX* k = qkv + ((size_t)b * T + j) * 3 * C + C + h * hs;
    const floatX* v = k + C;
    float dk[HS_MAX], dv[HS_MAX];
    #pragma unroll
    for (int i = 0; i < HS_MAX; i++) dk[i] = dv[i] = 0.0f;
    for (int t = j; t < T; t++) {  // the causal mask: query t sees key j when j <= t
        const floatX* q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
        const floatX* dy = dout + ((size_t)b * T + t) * C + h * hs;
        size_t stat = ((size_t)b * NH + h) * T + t;
        float p = recomputed_probability(q, k, lse[stat], hs, scale);
        float ds = p * (row_dot(dy, v, hs) - D[stat]) * scale;
        #pragma unroll
        for (int i = 0; i < HS_MAX; i++)
            if (i < hs) {
                dk[i] += ds * to_float(q[i]);
                dv[i] += p * to_float(dy[i]);
            }
    }
    floatX* dk_out = dqkv + ((size_t)b * T + j) * 3 * C + C + h * hs;
    #pragma unroll
    for (int i = 0; i < HS_MAX; i++)
        if (i < hs) {
            dk_out[i] = from_float(dk[i]);
            dk_out[C + i] = from_float(dv[i]);
        }
}

// one thread per query (b, h, t): dq_t over the keys j = 0 .. t, in that order
template <int HS_MAX>
__global__ void __launch_bounds__(KERNEL3_MAX_BLOCK)
attention_dq_kernel3(floatX* dqkv, const floatX* dout, const floatX* qkv, const float* lse, const float* D, int B, int T, int C, int NH) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;  // (b * NH + h) * T + t: lse's and D's index
    if (idx >= B * NH * T) return;
    int b = idx / (NH * T), h = (idx / T) % NH, t = idx % T, hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    const floatX* q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
    const floatX* dy = dout + ((size_t)b * T + t) * C + h * hs;
    float dq[HS_MAX];
    #pragma unroll
    for (int i = 0; i < HS_MAX; i++) dq[i] = 0.0f;
    for (int j = 0; j <= t; j++) {
        const floatX* k = qkv + ((size_t)b * T + j) * 3 * C + C + h * hs;
        float p = recomputed_probability(q, k, lse[idx], hs, scale);
        float ds = p * (row_dot(dy, k + C, hs) - D[idx]) * scale;  // v_j at k_j + C
        #pragma unroll
        for (int i = 0; i < HS_MAX; i++)
            if (i < hs) dq[i] += ds * to_float(k[i]);
    }
    floatX* dq_out = dqkv + ((size_t)b * T + t) * 3 * C + h * hs;
    #pragma unroll
    for (int i = 0; i < HS_MAX; i++)
        if (i < hs) dq_out[i] = from_float(dq[i]);
}

// ---------------------------------------------------------------- version 4: shared-memory tiles
#define OWN_ROWS 32  // a block's own rows: keys in the dk, dv kernel, queries in the dq kernel, a thread each
// the other side's rows staged per pass: 1024 channels' worth (32 rows at head size 32, 16 at 64,
// 8 at 128), so that the block's own two fp32 tiles (k and v, or q and dout: 256 HS_MAX bytes) and
// a pass's two tiles stay under the 48 KB a block may declare statically
template <int HS_MAX> __host__ __device__ constexpr int pass_rows() { return 1024 / HS_MAX < 32 ? 1024 / HS_MAX : 32; }

// rows first_row .. first_row + rows - 1 of sequence b of a (B,T,row_stride) tensor, columns
// offset .. offset + hs - 1 (one head of one part), into a shared fp32 tile where element (row, i)
// sits at tile[row * tile_row_stride + i * tile_channel_stride] (converted once here, not at each
// use). All the block's threads take part, neighbours on neighbouring channels (coalesced). Rows past T: zeros
__device__ inline void load_head_rows(float* tile, int tile_row_stride, int tile_channel_stride, const floatX* src, int row_stride,
                                      int offset, int b, int first_row, int rows, int T, int hs) {
    for (int e = threadIdx.x; e < rows * hs; e += blockDim.x) {
        int row = e / hs, i = e % hs, t = first_row + row;
        tile[row * tile_row_stride + i * tile_channel_stride] = t < T ? to_float(src[((size_t)b * T + t) * row_stride + offset + i]) : 0.0f;
    }
}
// rows first_row .. of one (b, h)'s statistics (lse or D, (B,NH,T): stat points at (b, h)'s T)
__device__ inline void load_stats(float* tile, const float* stat, int first_row, int rows, int T) {
    for (int r = threadIdx.x; r < rows; r += blockDim.x) tile[r] = first_row + r < T ? stat[first_row + r] : 0.0f;
}

// key j (column c of the block's k, v tiles) against the pass's queries t = first_query + r in
// order: the queries before j (the causal mask) and past T are skipped
template <int HS_MAX, int ROWS>
__device__ inline void dkv_from_query_tile(float (&dk)[HS_MAX], float (&dv)[HS_MAX], const float (*q_tile)[HS_MAX],
                                           const float (*dy_tile)[HS_MAX], const float* lse_tile, const float* D_tile,
                                           const float (*k_tile)[OWN_ROWS], const float (*v_tile)[OWN_ROWS], int c,
                                           int first_query, int j, int T, int hs, float scale) {
    for (int r = 0; r < ROWS; r++) {
        int t = first_query + r;
        if (t < j || t >= T) continue;
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

// grid (T / OWN_ROWS rounded up, B * NH), OWN_ROWS threads: thread c owns key j = k0 + c.
// dk and dv live in registers (ptxas -v, sm_90: 64 to 167 a thread up to HS_MAX 64; at 128, 255
// and about 0.5 KB spilled: FlashAttention-2 keeps them in shared memory or tensor-core fragments)
template <int HS_MAX>
__global__ void attention_dkv_kernel4(floatX* dqkv, const floatX* dout, const floatX* qkv, const float* lse, const float* D, int T, int C, int NH) {
    constexpr int ROWS = pass_rows<HS_MAX>();
    // the block's keys (channel, key): 32 threads read 32 neighbouring words; a pass's queries (query, channel)
    __shared__ float k_tile[HS_MAX][OWN_ROWS], v_tile[HS_MAX][OWN_ROWS];
    __shared__ float q_tile[ROWS][HS_MAX], dy_tile[ROWS][HS_MAX], lse_tile[ROWS], D_tile[ROWS];
    static_assert(sizeof(k_tile) + sizeof(v_tile) + sizeof(q_tile) + sizeof(dy_tile) + sizeof(lse_tile) + sizeof(D_tile) <= 48 * 1024,
                  "over the 48 KB of static shared memory");
    int b = blockIdx.y / NH, h = blockIdx.y % NH, hs = C / NH;
    int k0 = blockIdx.x * OWN_ROWS, c = threadIdx.x, j = k0 + c;
    const float *row_lse = lse + (size_t)blockIdx.y * T, *row_D = D + (size_t)blockIdx.y * T;  // (b, h)'s T statistics
    float scale = 1.0f / sqrtf((float)hs), dk[HS_MAX], dv[HS_MAX];
    #pragma unroll
    for (int i = 0; i < HS_MAX; i++) dk[i] = dv[i] = 0.0f;
    load_head_rows(&k_tile[0][0], 1, OWN_ROWS, qkv, 3 * C, C + h * hs, b, k0, OWN_ROWS, T, hs);
    load_head_rows(&v_tile[0][0], 1, OWN_ROWS, qkv, 3 * C, 2 * C + h * hs, b, k0, OWN_ROWS, T, hs);
    // threads with j >= T stay: they load their share of every tile and meet every barrier
    for (int q0 = k0; q0 < T; q0 += ROWS) {  // queries before k0 see none of the block's keys
        load_head_rows(&q_tile[0][0], HS_MAX, 1, qkv, 3 * C, h * hs, b, q0, ROWS, T, hs);
        load_head_rows(&dy_tile[0][0], HS_MAX, 1, dout, C, h * hs, b, q0, ROWS, T, hs);
        load_stats(lse_tile, row_lse, q0, ROWS, T);
        load_stats(D_tile, row_D, q0, ROWS, T);
        __syncthreads();  // every thread's loads (k, v's too, the first time) are in before any thread reads the tiles
        if (j < T)
            dkv_from_query_tile<HS_MAX, ROWS>(dk, dv, q_tile, dy_tile, lse_tile, D_tile, k_tile, v_tile, c, q0, j, T, hs, scale);
        __syncthreads();  // every thread is done with the tiles before the next pass overwrites them
    }
    if (j >= T) return;
    floatX* dk_out = dqkv + ((size_t)b * T + j) * 3 * C + C + h * hs;
    #pragma unroll
    for (int i = 0; i < HS_MAX; i++)
        if (i < hs) {
            dk_out[i] = from_float(dk[i]);
            dk_out[C + i] = from_float(dv[i]);  // dv at dk + C
        }
}

// query t (column r of the block's q, dout tiles) against the pass's keys j = first_key + c in
// order: the keys after t (the causal mask) and past T are skipped
template <int HS_MAX, int ROWS>
__device__ inline void dq_from_key_tile(float (&dq)[HS_MAX], const float (*q_tile)[OWN_ROWS], const float (*dy_tile)[OWN_ROWS],
                                        const float (*k_tile)[HS_MAX], const float (*v_tile)[HS_MAX], float lse_t, float D_t,
                                        int r, int first_key, int t, int T, int hs, float scale) {
    for (int c = 0; c < ROWS; c++) {
        int j = first_key + c;
        if (j > t || j >= T) break;  // keys come in order: the first masked one ends the tile
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

// grid (T / OWN_ROWS rounded up, B * NH), OWN_ROWS threads: thread r owns query t = q0 + r
template <int HS_MAX>
__global__ void attention_dq_kernel4(floatX* dqkv, const floatX* dout, const floatX* qkv, const float* lse, const float* D, int T, int C, int NH) {
    constexpr int ROWS = pass_rows<HS_MAX>();
    // the block's queries (channel, query); a pass's keys (key, channel): a broadcast
    __shared__ float q_tile[HS_MAX][OWN_ROWS], dy_tile[HS_MAX][OWN_ROWS], k_tile[ROWS][HS_MAX], v_tile[ROWS][HS_MAX];
    static_assert(sizeof(q_tile) + sizeof(dy_tile) + sizeof(k_tile) + sizeof(v_tile) <= 48 * 1024, "over the 48 KB of static shared memory");
    int b = blockIdx.y / NH, h = blockIdx.y % NH, hs = C / NH;
    int q0 = blockIdx.x * OWN_ROWS, r = threadIdx.x, t = q0 + r;
    size_t stat = (size_t)blockIdx.y * T + t;
    float lse_t = t < T ? lse[stat] : 0.0f, D_t = t < T ? D[stat] : 0.0f;
    float scale = 1.0f / sqrtf((float)hs), dq[HS_MAX];
    #pragma unroll
    for (int i = 0; i < HS_MAX; i++) dq[i] = 0.0f;
    load_head_rows(&q_tile[0][0], 1, OWN_ROWS, qkv, 3 * C, h * hs, b, q0, OWN_ROWS, T, hs);
    load_head_rows(&dy_tile[0][0], 1, OWN_ROWS, dout, C, h * hs, b, q0, OWN_ROWS, T, hs);
    int last_key = min(q0 + OWN_ROWS, T) - 1;  // the block's last query's own key: tiles past it are above the diagonal
    for (int k0 = 0; k0 <= last_key; k0 += ROWS) {
        load_head_rows(&k_tile[0][0], HS_MAX, 1, qkv, 3 * C, C + h * hs, b, k0, ROWS, T, hs);
        load_head_rows(&v_tile[0][0], HS_MAX, 1, qkv, 3 * C, 2 * C + h * hs, b, k0, ROWS, T, hs);
        __syncthreads();  // loads in before use
        if (t < T) dq_from_key_tile<HS_MAX, ROWS>(dq, q_tile, dy_tile, k_tile, v_tile, lse_t, D_t, r, k0, t, T, hs, scale);
        __syncthreads();  // uses done before the next pass overwrites the tiles
    }
    if (t >= T) return;
    floatX* dq_out = dqkv + ((size_t)b * T + t) * 3 * C + h * hs;
    #pragma unroll
    for (int i = 0; i < HS_MAX; i++)
        if (i < hs) dq_out[i] = from_float(dq[i]);
}

// ---------------------------------------------------------------- launchers
// the smallest compiled capacity that holds head size hs
static int head_capacity(int hs) {
    if (hs > 128) fail("attention_backward versions 3 and 4: head size %d, more than the 128 they are compiled for", hs);
    return hs <= 16 ? 16 : hs <= 32 ? 32 : hs <= 64 ? 64 : 128;
}
// D = rowsum(dout * out) per (b, h, t), which both gradient kernels read
static void attention_row_dot(float* D, const floatX* dout, const floatX* out, int B, int T, int C, int NH, int block) {
    attention_row_dot_kernel<<<ceil_div(B * NH * T, block), block>>>(D, dout, out, B, T, C, NH);
    launchCheck();
}
static void attention_backward3(floatX* dqkv, const floatX* dout, const floatX* qkv, const float* lse, const float* D,
                                int B, int T, int C, int NH, int block) {
    if (block > KERNEL3_MAX_BLOCK) fail("attention_backward version 3: blocks of %d threads, more than %d", block, KERNEL3_MAX_BLOCK);
    int grid = ceil_div(B * NH * T, block);
    switch (head_capacity(C / NH)) {
        case 16: attention_dkv_kernel3<16><<<grid, block>>>(dqkv, dout, qkv, lse, D, B, T, C, NH);
                 attention_dq_kernel3<16><<<grid, block>>>(dqkv, dout, qkv, lse, D, B, T, C, NH); break;
        case 32: attention_dkv_kernel3<32><<<grid, block>>>(dqkv, dout, qkv, lse, D, B, T, C, NH);
                 attention_dq_kernel3<32><<<grid, block>>>(dqkv, dout, qkv, lse, D, B, T, C, NH); break;
        case 64: attention_dkv_kernel3<64><<<grid, block>>>(dqkv, dout, qkv, lse, D, B, T, C, NH);
                 attention_dq_kernel3<64><<<grid, block>>>(dqkv, dout, qkv, lse, D, B, T, C, NH); break;
        default: attention_dkv_kernel3<128><<<grid, block>>>(dqkv, dout, qkv, lse, D, B, T, C, NH);
                 attention_dq_kernel3<128><<<grid, block>>>(dqkv, dout, qkv, lse, D, B, T, C, NH); break;
    }
    launchCheck();
}
static void attention_backward4(floatX* dqkv, const floatX* dout, const floatX* qkv, const float* lse, const float* D,
                                int B, int T, int C, int NH) {
    dim3 grid(ceil_div(T, OWN_ROWS), B * NH);
    switch (head_capacity(C / NH)) {
        case 16: attention_dkv_kernel4<16><<<grid, OWN_ROWS>>>(dqkv, dout, qkv, lse, D, T, C, NH);
                 attention_dq_kernel4<16><<<grid, OWN_ROWS>>>(dqkv, dout, qkv, lse, D, T, C, NH); break;
        case 32: attention_dkv_kernel4<32><<<grid, OWN_ROWS>>>(dqkv, dout, qkv, lse, D, T, C, NH);
                 attention_dq_kernel4<32><<<grid, OWN_ROWS>>>(dqkv, dout, qkv, lse, D, T, C, NH); break;
        case 64: attention_dkv_kernel4<64><<<grid, OWN_ROWS>>>(dqkv, dout, qkv, lse, D, T, C, NH);
                 attention_dq_kernel4<64><<<grid, OWN_ROWS>>>(dqkv, dout, qkv, lse, D, T, C, NH); break;
        default: attention_dkv_kernel4<128><<<grid, OWN_ROWS>>>(dqkv, dout, qkv, lse, D, T, C, NH);
                 attention_dq_kernel4<128><<<grid, OWN_ROWS>>>(dqkv, dout, qkv, lse, D, T, C, NH); break;
    }
    launchCheck();
}

// why a version cannot run at head size hs in this build (nullptr: it can)
static const char* cannot_run(int version, int hs) {
    if (version != 6) return nullptr;
    if (FLOATX_IS_FP32) return "bf16 and fp16 builds only (TF32 tensor cores miss the fp32 build's tolerance)";
    if (!mma_head_size(hs)) return "head size not 16, 32, 64 or 128";
    return nullptr;
}

// ---------------------------------------------------------------- the lab
// versions 1, 2 read att; 3, 4 read out and lse (and write D, their scratch)
// version 5 (the trainer's) reads lse as (B,T,NH), lse_rows, and needs the fp32 AttentionScratch
struct Buffers { floatX *dqkv, *dout, *qkv, *att, *out, *scratch; float *acc, *lse, *D, *lse_rows; AttentionScratch flash; };
static float* device_floats(size_t n) { return (float*)device_malloc(n * sizeof(float)); }
static Buffers upload(const std::vector<floatX>& dout, const std::vector<floatX>& qkv, const std::vector<floatX>& att,
                      const std::vector<floatX>& out, const std::vector<float>& lse, const std::vector<float>& lse_rows, int B, int T,
                      int C, int NH) {
    size_t n = (size_t)B * T * C, stats = (size_t)B * NH * T;
    return {(floatX*)device_malloc(3 * n * sizeof(floatX)), to_device(dout), to_device(qkv), to_device(att), to_device(out),
            (floatX*)device_malloc(materialized_scratch_elements(B, T, C, NH) * sizeof(floatX)),
            device_floats(B * NH * materialized_head_scratch_floats(T, C, NH)), to_device(lse), device_floats(stats), to_device(lse_rows),
            {device_floats(n), device_floats(n), device_floats(2 * n), device_floats(stats)}};
}
static void release(const Buffers& d) {
    device_free(d.dqkv); device_free(d.dout); device_free(d.qkv); device_free(d.att); device_free(d.out);
    device_free(d.scratch); device_free(d.acc); device_free(d.lse); device_free(d.D); device_free(d.lse_rows);
    device_free(d.flash.out); device_free(d.flash.dq); device_free(d.flash.dkv); device_free(d.flash.D);
}
// dqkv and D set to NaN (all bits set, in every precision): a version that leaves an element
// unwritten fails its check instead of passing on the last version's result
static void poison_outputs(const Buffers& d, int B, int T, int C, int NH) {
    cudaCheck(cudaMemset(d.dqkv, 0xFF, (size_t)B * T * 3 * C * sizeof(floatX)));
    cudaCheck(cudaMemset(d.D, 0xFF, (size_t)B * NH * T * sizeof(float)));
}

static void attention_backward_version(int version, int block, const Buffers& d, int B, int T, int C, int NH) {
    if (version == 1) {
        attention_backward_kernel1<<<ceil_div(B * NH, block), block>>>(d.dqkv, d.dout, d.qkv, d.att, d.acc, B, T, C, NH);
        launchCheck();
    } else if (version == 2) {
        materialized_backward(d.dqkv, d.dout, d.qkv, d.att, d.scratch, B, T, C, NH);
    } else if (version >= 5) {  // the trainer's through kernels/attention.cuh: 5 kernels/flash_attention_wmma.cuh
                                // (-fa 1), 6 kernels/flash_attention_mma.cuh (-fa 2)
        attention_backward(d.dqkv, d.dout, d.out, d.lse_rows, d.qkv, d.flash, B, T, C, NH, version == 6 ? 2 : 1);
    } else {
        attention_row_dot(d.D, d.dout, d.out, B, T, C, NH, block);
        if (version == 3) attention_backward3(d.dqkv, d.dout, d.qkv, d.lse, d.D, B, T, C, NH, block);
        else attention_backward4(d.dqkv, d.dout, d.qkv, d.lse, d.D, B, T, C, NH);
    }
}
static bool reads_att(int version) { return version <= 2; }
// version 3 runs at the lab's block sizes up to KERNEL3_MAX_BLOCK (version 4's D kernel takes any);
// versions 5 and 6 ignore the block size and run once
static bool runs_at(int version, int block) {
    return version == 3 ? block <= KERNEL3_MAX_BLOCK : version < 5 || block == LAB_BLOCK_SIZES[0];
}
// qkv and dout read, dqkv written; att read (versions 1, 2) or out and lse read (3, 4). Scratch
// (version 2's permutes, the D of 3 and 4) is not counted
static double compulsory_bytes(int version, int B, int T, int C, int NH) {
    double rows = (double)B * T * 7 * C * sizeof(floatX);
    if (reads_att(version)) return rows + (double)B * NH * T * T * sizeof(floatX);
    return rows + (double)B * T * C * sizeof(floatX) + (double)B * NH * T * sizeof(float);
}

// the inputs every version needs, uploaded: att and out as the trainer's forward (the host twin)
// gives them, lse from float64. dqkv_twin, where given: the host twin's backward, the reference
static Buffers upload_case(const std::vector<floatX>& qkv, const std::vector<floatX>& dout, int B, int T, int C, int NH,
                           std::vector<floatX>* dqkv_twin = nullptr) {
    std::vector<floatX> out((size_t)B * T * C), att((size_t)B * NH * T * T);
    materialized_forward_host(out.data(), att.data(), qkv.data(), B, T, C, NH);
    if (dqkv_twin) {
        dqkv_twin->resize(qkv.size());
        materialized_backward_host(dqkv_twin->data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
    }
    std::vector<double> lse = lse_float64(qkv, B, T, C, NH);  // dev/lab.h: (B,NH,T)
    std::vector<float> lse_rows(lse.size());  // (B,T,NH), as the trainer keeps it
    for (size_t i = 0; i < lse.size(); i++) lse_rows[((i / (NH * T)) * T + i % T) * NH + (i / T) % NH] = (float)lse[i];
    return upload(dout, qkv, att, out, std::vector<float>(lse.begin(), lse.end()), lse_rows, B, T, C, NH);  // fp32, as the forward keeps it
}

// times every wanted version at its block sizes, with each version's compulsory bytes
static void time_backward(const Lab& lab, const Buffers& d, int versions, int B, int T, int C, int NH) {
#ifdef CUDA_EMULATION
    printf("  timing skipped: emulated CUDA\n");
    return;
#endif
    double flops = 8.0 * B * T * T * C;  // four T x T x hs products per head (half of them masked)
    for (int v = 1; v <= versions; v++) {
        if (!lab_wants(lab, v) || cannot_run(v, C / NH)) continue;
        double bytes = compulsory_bytes(v, B, T, C, NH);
        printf("  version %d must move %.1f MB (at B 8, T 1024, C 768, NH 12: %.1f MB)\n", v, bytes / 1e6,
               compulsory_bytes(v, 8, 1024, 768, 12) / 1e6);
        for (int block : LAB_BLOCK_SIZES) {
            if (!runs_at(v, block)) continue;
            float ms = time_ms([&] { attention_backward_version(v, block, d, B, T, C, NH); });
            printf("  version %d, block %4d: %8.4f ms, %7.1f GB/s, %6.1f TFLOP/s\n", v, block, ms, bytes / ms / 1e6, flops / ms / 1e9);
        }
    }
}

int main(int argc, char** argv) {
    const int VERSIONS = 6;
    Lab lab = lab_start(argc, argv, "attention_backward", VERSIONS);
    // the awkward sizes: T = 1, 17, 64, 100 (all but 64 leave version 4's last 32-row tile part
    // empty) at head sizes 16, 64, 128; then the lab's first sizes (head sizes 8, 12, 64); T = 256 and
    // GPT-2's B 8, T 1024 (the attention_forward lab's size; not in the emulated build) are timed
    struct Size { int B, T, C, NH; } sizes[] = {
        {2, 1, 32, 2}, {2, 1, 128, 2}, {1, 1, 256, 2}, {2, 17, 32, 2}, {2, 17, 128, 2}, {1, 17, 256, 2},
        {2, 64, 32, 2}, {1, 64, 128, 2}, {1, 64, 256, 2}, {2, 100, 32, 2}, {1, 100, 128, 2}, {1, 100, 256, 2},
        {2, 8, 16, 2}, {1, 33, 48, 4}, {4, 64, 768, 12}, {4, 256, 768, 12}, {8, 1024, 768, 12}};
    for (Size s : sizes) {
        if (lab_skip_in_emulation((double)s.B * s.NH * s.T * s.T)) continue;
        std::vector<floatX> qkv = random_floatx((size_t)s.B * s.T * 3 * s.C, 1), dout = random_floatx((size_t)s.B * s.T * s.C, 2);
        std::vector<floatX> dqkv;
        Buffers d = upload_case(qkv, dout, s.B, s.T, s.C, s.NH, &dqkv);
        for (int v = 1; v <= VERSIONS; v++) {
            if (!lab_wants(lab, v)) continue;
            if (const char* why = cannot_run(v, s.C / s.NH)) {
                printf("  version %d, B T C NH %d %d %d %d: not run: %s\n", v, s.B, s.T, s.C, s.NH, why);
                continue;
            }
            for (int block : LAB_BLOCK_SIZES) {
                if (!runs_at(v, block)) continue;
                poison_outputs(d, s.B, s.T, s.C, s.NH);
                attention_backward_version(v, block, d, s.B, s.T, s.C, s.NH);
                lab_check(&lab, "dqkv", d.dqkv, dqkv);
            }
            lab_report(&lab, v, "B T C NH", {s.B, s.T, s.C, s.NH});
        }
        if (s.T >= 256) time_backward(lab, d, VERSIONS, s.B, s.T, s.C, s.NH);
        release(d);
    }
    for_each_ref_case("attention", [&](const RefFile& ref, const std::string& p, const std::vector<int>& sz) {
        int B = sz[0], T = sz[1], C = sz[2], NH = sz[3];
        Buffers d = upload_case(ref_floatx(ref, p + "qkv"), ref_floatx(ref, p + "dout"), B, T, C, NH);
        for (int v = 1; v <= VERSIONS; v++) {
            if (!lab_wants(lab, v)) continue;
            if (const char* why = cannot_run(v, C / NH)) {
                printf("  version %d against PyTorch, case %s: not run: %s\n", v, p.c_str(), why);
                continue;
            }
            printf("  version %d against PyTorch, case %s\n", v, p.c_str());
            poison_outputs(d, B, T, C, NH);
            attention_backward_version(v, 256, d, B, T, C, NH);
            lab_check_ref(&lab, "dqkv", d.dqkv, ref, p + "dqkv");
        }
        release(d);
    });
    return lab_finish(lab);
}

/*
kernels/layernorm.cuh: LayerNorm over the channel dimension, eps 1e-5 (GPT-2).

    forward:  mean, rstd = 1/sqrt(var + eps) per row;  out = (x - mean) * rstd * w + b
    backward: with n = (x - mean) * rstd and g = dout * w,
              dx += rstd * (g - mean(g) - n * mean(g * n));  dw += dout * n;  db += dout

mean and rstd are kept in fp32 for the backward: they are B*T floats, cheap, and
recomputing them would need the input again. dinp is accumulated (+=) because in
GPT-2 the input of every LayerNorm is the residual stream, whose gradient is the
sum of the branch gradient and the skip gradient.
GPU kernels: one warp per row, shuffles for the reductions; the weight gradients are
column sums over the rows, in two stages in a fixed order (common.cuh), so a run
repeats bit for bit. The host twin sums each channel's rows in order.
*/
#pragma once
// defines: layernorm_forward, layernorm_backward, layernorm_backward_both, layernorm_backward_input,
//          layernorm_backward_params, layernorm_backward_kernel128, layernorm_backward_both_ledger, LAYERNORM_WARPS,
//          layernorm_write_part, layernorm_backward_row128, layernorm_backward_params_many, LayerNormGrad,
//          LayerNormGrads, LAYERNORM_EPS, LAYERNORM_PACKS_MAX, layernorm_packed_width,
//          layernorm_backward_input_kernel128, layernorm_backward_host, layernorm_backward_input_host,
//          layernorm_backward_params_host, layernorm_backward_input_kernel, layernorm_backward_partials_kernel,
//          layernorm_forward_host, layernorm_forward_kernel, layernorm_forward_row, layernorm_param_grads_channel,
//          warp_sum, layernorm_backward_input_ledger, layernorm_backward_params_ledger, layernorm_forward_ledger,
//          layernorm_forward_warp, residual_layernorm_forward_kernel, residual_layernorm_forward,
//          residual_layernorm_forward_ledger
#include <math.h>  // defines: sqrtf
#include <vector>  // defines: std::vector
#include "common.cuh"
#include "gelu.cuh"    // defines: residual_forward_host (the CPU build's residual_layernorm_forward)

#define LAYERNORM_EPS 1e-5f

// dweight[c] += sum_i dout[i,c] * n[i,c];  dbias[c] += sum_i dout[i,c]: one channel, rows in
// order: the host twin, and dev/layernorm_backward.cu's plainest GPU version
HOST_DEVICE inline void layernorm_param_grads_channel(int c, floatX* dweight, floatX* dbias, const floatX* dout,
                                                      const floatX* inp, const float* mean, const float* rstd, int N,
                                                      int C) {
    float dw = 0.0f, db = 0.0f;
    for (int i = 0; i < N; i++) {
        float n = (to_float(inp[(size_t)i * C + c]) - mean[i]) * rstd[i];
        float dy = to_float(dout[(size_t)i * C + c]);
        dw += dy * n;
        db += dy;
    }
    dweight[c] = from_float(to_float(dweight[c]) + dw);
    dbias[c] = from_float(to_float(dbias[c]) + db);
}

// row i of the forward: its mean and rstd, and its output; the host twin's loop body, and the
// kernel of dev/layernorm_forward.cu's version 1 (a thread per row)
HOST_DEVICE inline void layernorm_forward_row(int i, floatX* out, float* mean, float* rstd, const floatX* inp,
                                              const floatX* weight, const floatX* bias, int C) {
    const floatX* x = inp + (size_t)i * C;
    float m = 0.0f;
    for (int c = 0; c < C; c++) m += to_float(x[c]);
    m /= C;
    float v = 0.0f;
    for (int c = 0; c < C; c++) { float d = to_float(x[c]) - m; v += d * d; }
    v /= C;
    float s = 1.0f / sqrtf(v + LAYERNORM_EPS);
    floatX* y = out + (size_t)i * C;
    for (int c = 0; c < C; c++) {
        float n = (to_float(x[c]) - m) * s;
        y[c] = from_float(n * to_float(weight[c]) + to_float(bias[c]));
    }
    mean[i] = m;
    rstd[i] = s;
}

inline void layernorm_forward_host(floatX* out, float* mean, float* rstd,       // (N,C), (N), (N)
                                   const floatX* inp,                           // (N,C)
                                   const floatX* weight, const floatX* bias,    // (C), (C)
                                   int N, int C) {
    #pragma omp parallel for
    for (int i = 0; i < N; i++) layernorm_forward_row(i, out, mean, rstd, inp, weight, bias, C);
}

// the backward in its two halves, which a zero-bubble pipeline runs apart (pipeline.h): the
// input gradient (B, on the critical path) and the parameter gradients (W, deferrable)
inline void layernorm_backward_input_host(floatX* dinp,                                  // (N,C) = dres + dx
                                          const floatX* dres,                            // (N,C), may be dinp
                                          const floatX* dout, const floatX* inp,         // (N,C), (N,C)
                                          const floatX* weight,                          // (C)
                                          const float* mean, const float* rstd,          // (N), (N)
                                          int N, int C) {
    #pragma omp parallel for
    for (int i = 0; i < N; i++) {
        const floatX* dy = dout + (size_t)i * C;
        const floatX* x = inp + (size_t)i * C;
        const floatX* r = dres + (size_t)i * C;
        floatX* dx = dinp + (size_t)i * C;
        float g_mean = 0.0f, gn_mean = 0.0f;
        for (int c = 0; c < C; c++) {
            float n = (to_float(x[c]) - mean[i]) * rstd[i];
            float g = to_float(dy[c]) * to_float(weight[c]);
            g_mean += g;
            gn_mean += g * n;
        }
        g_mean /= C;
        gn_mean /= C;
        for (int c = 0; c < C; c++) {
            float n = (to_float(x[c]) - mean[i]) * rstd[i];
            float g = to_float(dy[c]) * to_float(weight[c]);
            dx[c] = from_float(to_float(r[c]) + rstd[i] * (g - g_mean - n * gn_mean));
        }
    }
}
inline void layernorm_backward_params_host(floatX* dweight, floatX* dbias,               // (C) +=, (C) +=
                                           const floatX* dout, const floatX* inp,        // (N,C), (N,C)
                                           const float* mean, const float* rstd, int N, int C) {
    #pragma omp parallel for
    for (int c = 0; c < C; c++) layernorm_param_grads_channel(c, dweight, dbias, dout, inp, mean, rstd, N, C);
}
inline void layernorm_backward_host(floatX* dinp, floatX* dweight, floatX* dbias, const floatX* dout, const floatX* inp,
                                    const floatX* weight, const float* mean, const float* rstd, int N, int C) {
    layernorm_backward_input_host(dinp, dinp, dout, inp, weight, mean, rstd, N, C);
    layernorm_backward_params_host(dweight, dbias, dout, inp, mean, rstd, N, C);
}

// the kernel ledger (ledger.cuh) of the launchers below: (N,C) rows, mean and rstd an fp32 each a row;
// the input half adds into dinp (the residual stream's gradient)
inline void layernorm_forward_ledger(Ledger* l, size_t N, size_t C) {
    double X = sizeof(floatX);
    ledger_add(l, {"layernorm_forward_kernel", 8.0 * N * C, N * C * X + 2 * C * X, N * C * X + 8.0 * N, 0});
}
inline void residual_layernorm_forward_ledger(Ledger* l, size_t N,
                                              size_t C) {  // the residual read back from L1: not counted
    double X = sizeof(floatX);
    ledger_add(
        l, {"residual_layernorm_forward_kernel", 9.0 * N * C, 2 * N * C * X + 2 * C * X, 2 * N * C * X + 8.0 * N, 0});
}
// the rows the 16-byte backward kernels take: C a whole number of packs for each of a warp's 32 lanes,
// at most LAYERNORM_PACKS_MAX of them (C up to 1024); the launchers check the pointers' alignment too
// dweight +=, dbias += of one LayerNorm over dout and its input: an entry of layernorm_backward_params_many
struct LayerNormGrad { floatX *dweight, *dbias; const floatX *dout, *inp; const float *mean, *rstd; };
inline bool layernorm_packed_width(size_t C) { return C % (32 * PACK_VALUES) == 0 && C <= 1024; }
// in place (dinp += ...) or, in_place false, dinp = dres + ... (another buffer read, one written)
inline void layernorm_backward_input_ledger(Ledger* l, size_t N, size_t C, bool in_place = true) {
    double X = sizeof(floatX);
    bool packed = layernorm_packed_width(C);
    ledger_add(
        l, {packed ? "layernorm_backward_input_kernel128" : "layernorm_backward_input_kernel", 12.0 * N * C,
            (in_place ? 2.0 : 3.0) * N * C * X + C * X + 8.0 * N, in_place ? 0 : N * C * X, in_place ? N * C * X : 0});
}
// one launch for `count` LayerNorms' parameter gradients
inline void layernorm_backward_params_ledger(Ledger* l, size_t N, size_t C, size_t count = 1) {
    double X = sizeof(floatX), k = (double)count;
    ledger_add(l, {"layernorm_backward_partials_kernel", k * 6.0 * N * C, k * (2.0 * N * C * X + 8.0 * N),
                   k * 2.0 * 4 * COLUMN_PARTS * C, k * 2.0 * C * X});
}
// the whole backward, in one pass where the launcher's condition holds (LAYERNORM_PACKS_MAX): the
// input half's traffic, once, and the parameters' partials and gradients
inline void layernorm_backward_both_ledger(Ledger* l, size_t N, size_t C, bool in_place) {
    double X = sizeof(floatX);
    if (!layernorm_packed_width(C)) {
        layernorm_backward_input_ledger(l, N, C, in_place);
        layernorm_backward_params_ledger(l, N, C);
        return;
    }
    ledger_add(l, {"layernorm_backward_kernel128", 18.0 * N * C, (in_place ? 2.0 : 3.0) * N * C * X + C * X + 8.0 * N,
                   (in_place ? 0 : N * C * X) + 2.0 * 4 * COLUMN_PARTS * C, (in_place ? N * C * X : 0) + 2.0 * C * X});
}

#ifdef __CUDACC__
__device__ inline float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffff, v, offset);
    return v;
}

// a warp's row: the mean (from the sum of the lane's values, `sum`), rstd and the output; a lane
// reads only its own columns c = lane + 32 k
__device__ inline void layernorm_forward_warp(int row, int lane, float sum, floatX* out, float* mean, float* rstd,
                                              const floatX* x, const floatX* weight, const floatX* bias, int C) {
    float m = warp_sum(sum) / C;
    float var = 0.0f;
    for (int c = lane; c < C; c += 32) { float d = to_float(x[c]) - m; var += d * d; }
    float s = rsqrtf(warp_sum(var) / C + LAYERNORM_EPS);
    floatX* y = out + (size_t)row * C;
    for (int c = lane; c < C; c += 32)
        y[c] = from_float((to_float(x[c]) - m) * s * to_float(weight[c]) + to_float(bias[c]));
    if (lane == 0) { mean[row] = m; rstd[row] = s; }
}
__global__ void layernorm_forward_kernel(floatX* out, float* mean, float* rstd, const floatX* inp,
                                         const floatX* weight, const floatX* bias, int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= N) return;
    const floatX* x = inp + (size_t)row * C;
    float sum = 0.0f;
    for (int c = lane; c < C; c += 32) sum += to_float(x[c]);
    layernorm_forward_warp(row, lane, sum, out, mean, rstd, x, weight, bias, C);
}
// the residual add and the LayerNorm after it in one pass (llm.c's fused_residual_forward): the
// row's sum a + b written, rounded as residual_forward rounds it, and normalized from those values,
// which a lane reads back (its own, from its L1): the same bits as the two kernels, one read of a
// and b and no second read of the residual from memory
__global__ void residual_layernorm_forward_kernel(floatX* residual, floatX* out, float* mean, float* rstd,
                                                  const floatX* a, const floatX* b, const floatX* weight,
                                                  const floatX* bias, int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= N) return;
    size_t first = (size_t)row * C;
    floatX* x = residual + first;
    float sum = 0.0f;
    for (int c = lane; c < C; c += 32) {
        x[c] = from_float(to_float(a[first + c]) + to_float(b[first + c]));
        sum += to_float(x[c]);
    }
    layernorm_forward_warp(row, lane, sum, out, mean, rstd, x, weight, bias, C);
}

__global__ void layernorm_backward_input_kernel(floatX* dinp, const floatX* dres, const floatX* dout, const floatX* inp,
                                                const floatX* weight, const float* mean, const float* rstd, int N,
                                                int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= N) return;
    const floatX* dy = dout + (size_t)row * C;
    const floatX* x = inp + (size_t)row * C;
    const floatX* r = dres + (size_t)row * C;
    floatX* dx = dinp + (size_t)row * C;
    float m = mean[row], s = rstd[row];
    float g_sum = 0.0f, gn_sum = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float n = (to_float(x[c]) - m) * s;
        float g = to_float(dy[c]) * to_float(weight[c]);
        g_sum += g;
        gn_sum += g * n;
    }
    float g_mean = warp_sum(g_sum) / C, gn_mean = warp_sum(gn_sum) / C;
    for (int c = lane; c < C; c += 32) {
        float n = (to_float(x[c]) - m) * s;
        float g = to_float(dy[c]) * to_float(weight[c]);
        dx[c] = from_float(to_float(r[c]) + s * (g - g_mean - n * gn_mean));
    }
}

// The same row, every access 16 bytes a lane (Packed128), the row's x, dout and w kept in
// registers between the two passes: a warp's store covers whole 128-byte lines. Measured on an
// H200 (docs/gpu.md) the kernel above takes 210 us for 8192 rows of 768, 15 times the forward's
// 14 us, its warps stalled about 400 cycles an instruction on loads; this one 18 us. Needs C a multiple of 32
// lanes x 8 (bf16) or 4 (fp32) values and at most 1024, and 16-byte aligned rows
#define LAYERNORM_PACKS_MAX (1024 / (32 * PACK_VALUES))  // packs of a lane: C up to 1024 (layernorm_packed_width)
// one row, a warp (a lane its packs): dinp = dres + dx, and with PARAMS the lane's channels' dout n
// and dout added into dw and db (layernorm_backward_kernel128). dres is loaded with x, dout and w:
// one wait on memory a row
template <bool PARAMS>
__device__ inline void layernorm_backward_row128(size_t row, int lane, int packs, floatX* dinp, const floatX* dres,
                                                 const floatX* __restrict__ dout, const floatX* __restrict__ inp,
                                                 const floatX* __restrict__ weight, float m, float s, int C,
                                                 float (&dw)[LAYERNORM_PACKS_MAX][PACK_VALUES],
                                                 float (&db)[LAYERNORM_PACKS_MAX][PACK_VALUES]) {
    constexpr int P = PACK_VALUES;
    size_t first = row * C;
    float n[LAYERNORM_PACKS_MAX][P], g[LAYERNORM_PACKS_MAX][P], g_sum = 0.0f, gn_sum = 0.0f;
    Packed128<floatX> r[LAYERNORM_PACKS_MAX];
    #pragma unroll
    for (int k = 0; k < LAYERNORM_PACKS_MAX; k++) {
        if (k >= packs) continue;
        int c = (k * 32 + lane) * P;
        Packed128<floatX> x = load128(inp + first + c), dy = load128(dout + first + c), w = load128(weight + c);
        r[k] = load128(dres + first + c);
        #pragma unroll
        for (int i = 0; i < P; i++) {
            n[k][i] = (to_float(x.v[i]) - m) * s;
            g[k][i] = to_float(dy.v[i]) * to_float(w.v[i]);
            g_sum += g[k][i];
            gn_sum += g[k][i] * n[k][i];
            if (PARAMS) dw[k][i] += to_float(dy.v[i]) * n[k][i], db[k][i] += to_float(dy.v[i]);
        }
    }
    float g_mean = warp_sum(g_sum) / C, gn_mean = warp_sum(gn_sum) / C;
    #pragma unroll
    for (int k = 0; k < LAYERNORM_PACKS_MAX; k++) {
        if (k >= packs) continue;
        Packed128<floatX> dx = r[k];
        #pragma unroll
        for (int i = 0; i < P; i++)
            dx.v[i] = from_float(to_float(dx.v[i]) + s * (g[k][i] - g_mean - n[k][i] * gn_mean));
        store128(dinp + first + (k * 32 + lane) * P, dx);
    }
}
__global__ void layernorm_backward_input_kernel128(floatX* dinp, const floatX* dres, const floatX* __restrict__ dout,
                                                   const floatX* __restrict__ inp, const floatX* __restrict__ weight,
                                                   const float* __restrict__ mean, const float* __restrict__ rstd,
                                                   int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    float unused[LAYERNORM_PACKS_MAX][PACK_VALUES];
    if (row < N)
        layernorm_backward_row128<false>(row, lane, C / (32 * PACK_VALUES), dinp, dres, dout, inp, weight, mean[row],
                                         rstd[row], C, unused, unused);
}

// The whole backward in one pass over the rows (llm.c's layernorm_backward_kernel10 does so with
// atomics): the row's dinp = dres + dx as the kernel above makes it, and the parameters' column sums
// as layernorm_backward_partials_kernel makes them, without reading dout and inp again. Block `part`
// (grid y, COLUMN_PARTS of them) walks its part's rows (column_part_rows), warp w the rows begin + w,
// begin + w + 8, ..., as the partials kernel's thread row w; a lane keeps its channels' sums of
// dout n and dout in registers; the block's warps add them in warp order in shared memory, the block
// writes its part, and the last block adds the parts in part order: the same bits as the two kernels.
// The grid is the 64 parts, 512 warps, far fewer than a GPU holds (the row kernel's N/8 blocks): whether
// one read of dout and inp outweighs that is a GPU's to say (dev/layernorm_backward.cu versions 3, 4)
#define LAYERNORM_WARPS COLUMN_ROW_THREADS  // a block's warps: the partials kernel's rows of threads
// a block of layernorm_backward_kernel128: its warps' parameter sums (dw, db: a lane's channels)
// added in warp order, as the partials kernel adds its rows of threads, and written as part blockIdx.y
// of `parts`: dweight's parts, then dbias's
__device__ inline void layernorm_write_part(const float (&dw)[LAYERNORM_PACKS_MAX][PACK_VALUES],
                                            const float (&db)[LAYERNORM_PACKS_MAX][PACK_VALUES], float* parts,
                                            int packs, int C) {
    constexpr int P = PACK_VALUES;
    __shared__ float block_dw[32 * P * LAYERNORM_PACKS_MAX], block_db[32 * P * LAYERNORM_PACKS_MAX];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int w = 0; w < LAYERNORM_WARPS; w++) {
        if (warp == w) {
            #pragma unroll
            for (int k = 0; k < LAYERNORM_PACKS_MAX; k++) {
                if (k >= packs) continue;
                #pragma unroll
                for (int i = 0; i < P; i++) {
                    int c = (k * 32 + lane) * P + i;
                    block_dw[c] = w == 0 ? dw[k][i] : block_dw[c] + dw[k][i];
                    block_db[c] = w == 0 ? db[k][i] : block_db[c] + db[k][i];
                }
            }
        }
        __syncthreads();
    }
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        parts[(size_t)blockIdx.y * C + c] = block_dw[c];
        parts[(size_t)(COLUMN_PARTS + blockIdx.y) * C + c] = block_db[c];
    }
}
__global__ void layernorm_backward_kernel128(floatX* dinp, const floatX* dres, floatX* dweight, floatX* dbias,
                                             float* scratch, const floatX* __restrict__ dout,
                                             const floatX* __restrict__ inp, const floatX* __restrict__ weight,
                                             const float* __restrict__ mean, const float* __restrict__ rstd, int N,
                                             int C) {
    constexpr int P = Packed128<floatX>::size;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, packs = C / (32 * P), begin, end;
    column_part_rows(N, blockIdx.y, &begin, &end);
    float dw[LAYERNORM_PACKS_MAX][P] = {}, db[LAYERNORM_PACKS_MAX][P] = {};
    for (int row = begin + warp; row < end; row += LAYERNORM_WARPS)
        layernorm_backward_row128<true>(row, lane, packs, dinp, dres, dout, inp, weight, mean[row], rstd[row], C, dw,
                                        db);
    float* parts = column_partials_parts(scratch);  // dweight's parts, then dbias's (as the partials kernel's)
    layernorm_write_part(dw, db, parts, packs, C);
    if (column_partials_last_block(column_partials_counters(scratch)))
        for (int c = threadIdx.x; c < C; c += blockDim.x) {
            column_partials_add_column(dweight, parts, C, c);
            column_partials_add_column(dbias, parts + (size_t)COLUMN_PARTS * C, C, c);
        }
}

// the two-stage column sums (common.cuh), as bias_backward_partials_kernel, of up to
// COLUMN_SUMS_MAX LayerNorms of one width (a block's two): block (x, part) takes 32 channels of its
// entry over the part's rows; an entry's parts are its dweight parts, then its dbias parts; the last
// of a tile's blocks adds its parts into dweight and dbias
struct LayerNormGrads { LayerNormGrad entry[COLUMN_SUMS_MAX]; ColumnTiles tiles; };
__global__ void layernorm_backward_partials_kernel(LayerNormGrads grads, float* scratch, int N, int C) {
    __shared__ float dw_rows[COLUMN_ROW_THREADS][32], db_rows[COLUMN_ROW_THREADS][32];
    int tile, e = column_tiles_entry(grads.tiles, &tile), part = blockIdx.y, begin, end;
    const LayerNormGrad& g = grads.entry[e];
    int c = tile * 32 + threadIdx.x;
    column_part_rows(N, part, &begin, &end);
    float dw = 0.0f, db = 0.0f;
    if (c < C)
        for (int i = begin + threadIdx.y; i < end; i += COLUMN_ROW_THREADS) {
            float n = (to_float(g.inp[(size_t)i * C + c]) - g.mean[i]) * g.rstd[i];
            float dy = to_float(g.dout[(size_t)i * C + c]);
            dw += dy * n;
            db += dy;
        }
    dw = sum_rows_of_threads(dw, dw_rows);
    db = sum_rows_of_threads(db, db_rows);
    float* parts = column_partials_parts(scratch) + (size_t)2 * COLUMN_PARTS * grads.tiles.first_col[e];
    if (threadIdx.y == 0 && c < C) {
        parts[(size_t)part * C + c] = dw;
        parts[(size_t)(COLUMN_PARTS + part) * C + c] = db;
    }
    if (column_partials_last_block(column_partials_counters(scratch))) {
        column_partials_add(g.dweight, parts, C, tile);
        column_partials_add(g.dbias, parts + (size_t)COLUMN_PARTS * C, C, tile);
    }
}

inline void layernorm_forward(floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* weight,
                              const floatX* bias, int N, int C) {
    const int block = 256, rows_per_block = block / 32;
    if (N == 0) return;  // a grid of 0 blocks is a launch error
    layernorm_forward_kernel<<<ceil_div(N, rows_per_block), block>>>(out, mean, rstd, inp, weight, bias, N, C);
    launchCheck();
}
// residual = a + b, then out = LayerNorm(residual) with its mean and rstd: (N,C) each
inline void residual_layernorm_forward(floatX* residual, floatX* out, float* mean, float* rstd, const floatX* a,
                                       const floatX* b, const floatX* weight, const floatX* bias, int N, int C) {
    const int block = 256, rows_per_block = block / 32;
    if (N == 0) return;
    residual_layernorm_forward_kernel<<<ceil_div(N, rows_per_block), block>>>(residual, out, mean, rstd, a, b, weight,
                                                                              bias, N, C);
    launchCheck();
}
// dinp = dres + the input gradient: the residual stream's gradient after the LayerNorm's backward;
// dres may be dinp (added in place)
inline void layernorm_backward_input(floatX* dinp, const floatX* dres, const floatX* dout, const floatX* inp,
                                     const floatX* weight, const float* mean, const float* rstd, int N, int C) {
    const int block = 256, rows_per_block = block / 32;
    if (N == 0 || C == 0) return;
    bool packed = layernorm_packed_width(C) && packs_fit(C, {dinp, dres, dout, inp, weight});
    if (packed)
        layernorm_backward_input_kernel128<<<ceil_div(N, rows_per_block), block>>>(dinp, dres, dout, inp, weight, mean,
                                                                                   rstd, N, C);
    else
        layernorm_backward_input_kernel<<<ceil_div(N, rows_per_block), block>>>(dinp, dres, dout, inp, weight, mean,
                                                                                rstd, N, C);
    launchCheck();
}
// the parameter gradients of several LayerNorms of width C over N rows each, in as few launches as
// the table and the tile counters allow (one for a block's two). partials: column_partials_elements(2 C
// x the LayerNorms) floats of device scratch
inline void layernorm_backward_params_many(std::initializer_list<LayerNormGrad> grads, int N, int C, float* partials) {
    if (N == 0 || C == 0) return;
    column_partials_check(C);
    std::vector<int> cols(grads.size(), C);
    column_sums_launches(cols.data(), (int)cols.size(), [&](int first, const ColumnTiles& tiles) {
        LayerNormGrads batch = {};
        batch.tiles = tiles;
        for (int e = 0; e < tiles.entries; e++) batch.entry[e] = grads.begin()[first + e];
        layernorm_backward_partials_kernel<<<column_tiles_grid(tiles), column_partials_block()>>>(batch, partials, N,
                                                                                                  C);
        launchCheck();
    });
}
#else
inline void layernorm_forward(floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* weight,
                              const floatX* bias, int N, int C) {
    layernorm_forward_host(out, mean, rstd, inp, weight, bias, N, C);
}
inline void residual_layernorm_forward(floatX* residual, floatX* out, float* mean, float* rstd, const floatX* a,
                                       const floatX* b, const floatX* weight, const floatX* bias, int N, int C) {
    residual_forward_host(residual, a, b, (size_t)N * C);
    layernorm_forward_host(out, mean, rstd, residual, weight, bias, N, C);
}
inline void layernorm_backward_input(floatX* dinp, const floatX* dres, const floatX* dout, const floatX* inp,
                                     const floatX* weight, const float* mean, const float* rstd, int N, int C) {
    layernorm_backward_input_host(dinp, dres, dout, inp, weight, mean, rstd, N, C);
}
inline void layernorm_backward_params_many(std::initializer_list<LayerNormGrad> grads, int N, int C, float* partials) {
    (void)partials;
    for (const LayerNormGrad& g : grads)
        layernorm_backward_params_host(g.dweight, g.dbias, g.dout, g.inp, g.mean, g.rstd, N, C);
}
#endif
// dweight +=, dbias += of one LayerNorm; partials: column_partials_elements(2 * C) floats of device scratch
inline void layernorm_backward_params(floatX* dweight, floatX* dbias, const floatX* dout, const floatX* inp,
                                      const float* mean, const float* rstd, int N, int C, float* partials) {
    layernorm_backward_params_many({{dweight, dbias, dout, inp, mean, rstd}}, N, C, partials);
}
// dinp = dres + the input gradient, and dweight +=, dbias += their sums over the N rows (none where
// dweight is NULL): on the GPU in one pass where C and the pointers allow the 16-byte kernel, else
// the two halves in turn. partials: column_partials_elements(2 * C) floats of device scratch
inline void layernorm_backward_both(floatX* dinp, const floatX* dres, floatX* dweight, floatX* dbias,
                                    const floatX* dout, const floatX* inp, const floatX* weight, const float* mean,
                                    const float* rstd, int N, int C, float* partials) {
    if (!dweight) { layernorm_backward_input(dinp, dres, dout, inp, weight, mean, rstd, N, C); return; }
#ifdef __CUDACC__
    if (N > 0 && layernorm_packed_width(C) && packs_fit(C, {dinp, dres, dout, inp, weight})) {
        layernorm_backward_kernel128<<<dim3(1, COLUMN_PARTS), 32 * LAYERNORM_WARPS>>>(
            dinp, dres, dweight, dbias, partials, dout, inp, weight, mean, rstd, N, C);
        launchCheck();
        return;
    }
#endif
    layernorm_backward_input(dinp, dres, dout, inp, weight, mean, rstd, N, C);
    layernorm_backward_params(dweight, dbias, dout, inp, mean, rstd, N, C, partials);
}
// dinp +=, dweight +=, dbias +=: the whole backward, in place
inline void layernorm_backward(floatX* dinp, floatX* dweight, floatX* dbias, const floatX* dout, const floatX* inp,
                               const floatX* weight, const float* mean, const float* rstd, int N, int C,
                               float* partials) {
    layernorm_backward_both(dinp, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, partials);
}

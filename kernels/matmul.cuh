/*
kernels/matmul.cuh: the linear layer y = x W^T + b and its backward, on a GEMM
from a library: cuBLAS on the GPU, OpenBLAS sgemm on the CPU.

Everything here is row-major, as PyTorch and llm.c lay tensors out; W is (out, in).
    forward:  out(N,OC)   = inp(N,C) @ W^T(C,OC) + b
    backward: dinp(N,C)   = dout(N,OC) @ W(OC,C)            (overwritten)
              dW(OC,C)   += dout^T(OC,N) @ inp(N,C)         (accumulated over micro-steps)
              db(OC)     += sum over rows of dout
The bias sum is a column reduction: the host twin adds each column's rows in order; the
GPU adds them in two stages, a fixed order too (common.cuh), so both repeat bit for bit.

Storage is floatX, accumulation fp32 on both builds: cuBLAS reads bf16/fp16 and
computes in fp32; the CPU build widens to fp32 and calls sgemm. Both round twice in the
forward: the GEMM's fp32 sums once into floatX, then the bias is added and rounded again
(bias_forward). Fusing the bias into cuBLASLt's epilogue rounds once (dev/matmul_forward.cu's
version 4, as llm.c does; version 3 is this file's way): in bf16 the two differ by about one
rounding, 2e-3 relative, which the tolerances of the tests cover.

cuBLAS is column-major. A row-major matrix seen column-major is its transpose, so
C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T: swap A and B, swap M and N,
keep the transpose flags. gemm_batched below is the only place that knows this.
*/
#pragma once
// defines: gemm_batched, matmul_forward, matmul_forward_host, matmul_backward, matmul_backward_input,
//          matmul_backward_weight, bias_forward, bias_backward, bias_backward_many, BiasGrad, BiasGrads,
//          bias_backward_column, bias_backward_host, bias_backward_partials_kernel, bias_forward_host,
//          bias_forward_kernel, bias_forward_kernel128, matmul_forward_element, widen, sgemm_in_pieces,
//          bias_backward_ledger, bias_forward_ledger, gemm_ledger, matmul_backward_input_ledger,
//          matmul_backward_weight_ledger, matmul_forward_ledger, matmul_lt, matmul_lt_epilogue,
//          MatmulLtKey, MatmulLtPlan, matmul_lt_preference, matmul_lt_plan, matmul_lt_pointers,
//          pointer_alignment
#include <algorithm>  // defines: std::min
#include <map>        // defines: std::map
#include <tuple>      // defines: std::tie
#include <vector>     // defines: std::vector
#include "common.cuh"
#ifndef __CUDACC__
#include <cblas.h>  // defines: cblas_sgemm (OpenBLAS)
#include <omp.h>    // defines: omp_in_parallel, omp_get_max_threads
#endif

// C(M,N) = alpha * op(A)(M,K) op(B)(K,N) + beta * C, row-major, `batch` times with strides
#ifdef __CUDACC__
inline void gemm_batched(bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                         const floatX* A, int lda, size_t stride_a, const floatX* B, int ldb, size_t stride_b,
                         float beta, floatX* C, int ldc, size_t stride_c, int batch) {
    cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasCheck(cublasGemmStridedBatchedEx(cublas_handle(), op_b, op_a, N, M, K, &alpha, B, CUBLAS_FLOATX, ldb,
                                           stride_b, A, CUBLAS_FLOATX, lda, stride_a, &beta, C, CUBLAS_FLOATX, ldc,
                                           stride_c, batch, cublas_compute(), CUBLAS_GEMM_DEFAULT));
}
#else
// rows x cols of a row-major matrix with leading dimension ld, widened to a dense fp32 copy
inline std::vector<float> widen(const floatX* m, int rows, int cols, int ld) {
    std::vector<float> out((size_t)rows * cols);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) out[(size_t)r * cols + c] = to_float(m[(size_t)r * ld + c]);
    return out;
}
// OpenBLAS splits a product between its threads evenly, once. On a machine where another program
// takes a core, the thread that shares it does its half at half speed while the other waits. So
// the CPU build cuts the output into pieces along its longer side, 4 per thread and at least 64
// wide, which the OpenMP threads take as they finish (schedule dynamic): the slowed thread does
// fewer. Each piece is one single-threaded sgemm (OpenBLAS runs one thread inside a parallel
// region) whose result does not depend on which thread takes it, so runs repeat bit for bit (the
// bits may differ from one whole call's in the last place: OpenBLAS blocks each size its own way).
// Small products, and calls already inside a parallel region (attention's heads), stay one call
inline void sgemm_in_pieces(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha, const float* A,
                            int lda, const float* B, int ldb, float beta, float* C, int ldc) {
    int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
    bool along_n = N >= M;  // pieces of C's columns (op(B)'s columns) or of its rows (op(A)'s rows)
    int length = along_n ? N : M, pieces = std::min(4 * threads, length / 64);
    if (threads == 1 || pieces <= 1 || (double)M * N * K < 1e6) {
        cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    #pragma omp parallel for schedule(dynamic, 1)
    for (int p = 0; p < pieces; p++) {
        int from = (int)((long long)length * p / pieces), n = (int)((long long)length * (p + 1) / pieces) - from;
        if (along_n)  // op(B)'s columns from..: B's rows (transposed) or columns
            cblas_sgemm(CblasRowMajor, ta, tb, M, n, K, alpha, A, lda,
                        B + (tb == CblasTrans ? (size_t)from * ldb : from), ldb, beta, C + from, ldc);
        else          // op(A)'s rows from..: A's columns (transposed) or rows
            cblas_sgemm(CblasRowMajor, ta, tb, n, N, K, alpha, A + (ta == CblasTrans ? from : (size_t)from * lda), lda,
                        B, ldb, beta, C + (size_t)from * ldc, ldc);
    }
}

inline void gemm_batched(bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                         const floatX* A, int lda, size_t stride_a, const floatX* B, int ldb, size_t stride_b,
                         float beta, floatX* C, int ldc, size_t stride_c, int batch) {
    CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans, tb = trans_b ? CblasTrans : CblasNoTrans;
    for (int i = 0; i < batch; i++) {
#if FLOATX_IS_FP32
        sgemm_in_pieces(ta, tb, M, N, K, alpha, A + i * stride_a, lda, B + i * stride_b, ldb, beta, C + i * stride_c,
                        ldc);
#else
        std::vector<float> a = trans_a ? widen(A + i * stride_a, K, M, lda) : widen(A + i * stride_a, M, K, lda);
        std::vector<float> b = trans_b ? widen(B + i * stride_b, N, K, ldb) : widen(B + i * stride_b, K, N, ldb);
        std::vector<float> c = beta != 0.0f ? widen(C + i * stride_c, M, N, ldc) : std::vector<float>((size_t)M * N);
        sgemm_in_pieces(ta, tb, M, N, K, alpha, a.data(), trans_a ? M : K, b.data(), trans_b ? K : N, beta, c.data(),
                        N);
        for (int r = 0; r < M; r++)
            for (int col = 0; col < N; col++)
                C[i * stride_c + (size_t)r * ldc + col] = from_float(c[(size_t)r * N + col]);
#endif
    }
}
#endif

// column o's sum over the rows, in order: the specification, which the host twin computes in
// SIMD groups of columns (the same bits) and dev/matmul_backward_bias.cu's version 1 on the GPU
HOST_DEVICE inline void bias_backward_column(int o, floatX* dbias, const floatX* dout, int N, int OC) {
    float sum = 0.0f;
    for (int i = 0; i < N; i++) sum += to_float(dout[(size_t)i * OC + o]);
    dbias[o] = from_float(to_float(dbias[o]) + sum);
}

// the forward as its definition, one output at a time in fp32 with the bias added last: the
// reference of dev/matmul_forward.cu, whose version 1 runs the element on the device (the
// CPU build itself runs sgemm, above)
HOST_DEVICE inline void matmul_forward_element(int i, int o, floatX* out, const floatX* inp, const floatX* weight,
                                               const floatX* bias, int C, int OC) {
    float sum = 0.0f;
    for (int c = 0; c < C; c++) sum += to_float(inp[(size_t)i * C + c]) * to_float(weight[(size_t)o * C + c]);
    out[(size_t)i * OC + o] = from_float(sum + (bias ? to_float(bias[o]) : 0.0f));
}
inline void matmul_forward_host(floatX* out, const floatX* inp, const floatX* weight, const floatX* bias, int N, int C,
                                int OC) {
#pragma omp parallel for collapse(2)
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OC; o++) matmul_forward_element(i, o, out, inp, weight, bias, C, OC);
}

inline void bias_forward_host(floatX* out, const floatX* bias, int N, int OC) {  // out(N,OC) += bias(OC)
    #pragma omp parallel for
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OC; o++)
            out[(size_t)i * OC + o] = from_float(to_float(out[(size_t)i * OC + o]) + to_float(bias[o]));
}
// dbias(OC) += column sums, each column's rows in order as bias_backward_column adds them (the
// same bits); 64 columns at a time, so that the inner loop runs along a row, in SIMD lanes
inline void bias_backward_host(floatX* dbias, const floatX* dout, int N, int OC) {
    #pragma omp parallel for
    for (int first = 0; first < OC; first += 64) {
        int width = std::min(64, OC - first);
        float sums[64] = {};
        for (int i = 0; i < N; i++)
            for (int o = 0; o < width; o++) sums[o] += to_float(dout[(size_t)i * OC + first + o]);
        for (int o = 0; o < width; o++) dbias[first + o] = from_float(to_float(dbias[first + o]) + sums[o]);
    }
}

// the kernel ledger (ledger.cuh) of the launchers below. A GEMM (M,N) = (M,K) x (K,N) reads both
// inputs once and writes its output, or adds into it (beta = 1: a weight gradient); tensor cores
// in the bf16 and fp16 builds, CUDA cores in fp32 (no TF32)
inline void gemm_ledger(Ledger* l, size_t M, size_t N, size_t K, bool accumulate) {
    double X = sizeof(floatX), out = (double)M * N * X;
    ledger_add(l, {"cublasGemmStridedBatchedEx", 2.0 * M * N * K, (double)(M * K + K * N) * X, accumulate ? 0 : out,
                   accumulate ? out : 0, !FLOATX_IS_FP32});
}
inline void bias_forward_ledger(Ledger* l, size_t N, size_t OC) {
    double X = sizeof(floatX);
    ledger_add(l, {packs_divide(OC) ? "bias_forward_kernel128" : "bias_forward_kernel", (double)N * OC, OC * X, 0,
                   N * OC * X});
}
// one launch for the bias gradients of outputs OCs wide (the partials written, then read by the
// tiles' last blocks: counted once, they stay in L2; dbias +=)
inline void bias_backward_ledger(Ledger* l, size_t N, std::initializer_list<size_t> OCs) {
    size_t OC = 0;
    for (size_t w : OCs) OC += w;
    ledger_add(l, {"bias_backward_partials_kernel", (double)N * OC, (double)N * OC * sizeof(floatX),
                   4.0 * COLUMN_PARTS * OC, (double)OC * sizeof(floatX)});
}
// with a bias, cuBLASLt adds it in the epilogue when it is 16-byte aligned: the ledger takes the
// trainer's tensors to be when C is a whole number of packs (every parameter tensor's size a multiple of C)
inline void matmul_forward_ledger(Ledger* l, size_t N, size_t C, size_t OC, bool bias) {
    double X = sizeof(floatX);
    if (bias && packs_divide(C)) {
        ledger_add(l, {"cublasLtMatmul", 2.0 * N * OC * C, (double)(N * C + OC * C + OC) * X, (double)N * OC * X, 0,
                       !FLOATX_IS_FP32});
        return;
    }
    gemm_ledger(l, N, OC, C, false);
    if (bias) bias_forward_ledger(l, N, OC);
}
inline void matmul_backward_input_ledger(Ledger* l, size_t N, size_t C, size_t OC) { gemm_ledger(l, N, C, OC, false); }
inline void matmul_backward_weight_ledger(Ledger* l, size_t N, size_t C, size_t OC, bool bias) {
    gemm_ledger(l, OC, C, N, true);
    if (bias) bias_backward_ledger(l, N, {OC});
}

// dbias(OC) += column sums of dout(N,OC): an entry of bias_backward_many. OC 64-bit: the struct has
// no padding (a kernel argument copied whole; the emulated build reads it for device pointers)
struct BiasGrad { floatX* dbias; const floatX* dout; int64_t OC; };

#ifdef __CUDACC__
__global__ void bias_forward_kernel(floatX* out, const floatX* bias, int N, int OC) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < (size_t)N * OC) out[idx] = from_float(to_float(out[idx]) + to_float(bias[idx % OC]));
}
// the two-stage column sum (common.cuh) of up to COLUMN_SUMS_MAX bias gradients: block (x, part)
// sums 32 columns of its entry over the part's rows; the last of a tile's blocks adds the tile's
// parts into the entry's dbias
struct BiasGrads { BiasGrad entry[COLUMN_SUMS_MAX]; ColumnTiles tiles; };
__global__ void bias_backward_partials_kernel(BiasGrads grads, float* scratch, int N) {
    __shared__ float rows_of_threads[COLUMN_ROW_THREADS][32];
    int tile, e = column_tiles_entry(grads.tiles, &tile), begin, end;
    const floatX* dout = grads.entry[e].dout;
    int OC = (int)grads.entry[e].OC, o = tile * 32 + threadIdx.x;
    column_part_rows(N, blockIdx.y, &begin, &end);
    float sum = 0.0f;
    if (o < OC)
        for (int i = begin + threadIdx.y; i < end; i += COLUMN_ROW_THREADS) sum += to_float(dout[(size_t)i * OC + o]);
    sum = sum_rows_of_threads(sum, rows_of_threads);
    float* parts = column_partials_parts(scratch) + (size_t)COLUMN_PARTS * grads.tiles.first_col[e];
    if (threadIdx.y == 0 && o < OC) parts[(size_t)blockIdx.y * OC + o] = sum;
    if (column_partials_last_block(column_partials_counters(scratch)))
        column_partials_add(grads.entry[e].dbias, parts, OC, tile);
}
// a thread a 16-byte pack of columns (Packed128), walking rows: its bias pack loaded once, and no
// division a value (the kernel above takes idx % OC, a 64-bit division: on an H200 it took 44 us
// a call at 8192 rows, this one 15 us, docs/gpu.md). OC a multiple of the pack, out and bias 16-byte aligned
__global__ void bias_forward_kernel128(floatX* out, const floatX* bias, int N, int OC) {
    int c = (blockIdx.x * blockDim.x + threadIdx.x) * Packed128<floatX>::size;
    if (c >= OC) return;
    Packed128<floatX> b = load128(bias + c);
    for (int row = blockIdx.y; row < N; row += gridDim.y) {
        Packed128<floatX> o = load128(out + (size_t)row * OC + c);
        for (int k = 0; k < Packed128<floatX>::size; k++) o.v[k] = from_float(to_float(o.v[k]) + to_float(b.v[k]));
        store128(out + (size_t)row * OC + c, o);
    }
}
inline void bias_forward(floatX* out, const floatX* bias, int N, int OC) {
    if ((size_t)N * OC == 0) return;  // a grid of 0 blocks is a launch error
    if (packs_fit(OC, {out, bias})) {
        dim3 grid(ceil_div(OC / Packed128<floatX>::size, 128), N < 4096 ? N : 4096);
        bias_forward_kernel128<<<grid, 128>>>(out, bias, N, OC);
    } else {
        bias_forward_kernel<<<ceil_div((size_t)N * OC, 256), 256>>>(out, bias, N, OC);
    }
    launchCheck();
}
// the bias gradients of several (N, OC) outputs, as few launches as the table and the tile counters
// allow (one for a block's four). partials: column_partials_elements(the OCs summed) floats of device scratch
inline void bias_backward_many(std::initializer_list<BiasGrad> grads, int N, float* partials) {
    std::vector<BiasGrad> sums;
    std::vector<int> cols;
    for (const BiasGrad& g : grads) {
        if (!g.dbias || g.OC == 0) continue;
        column_partials_check(g.OC);
        sums.push_back(g);
        cols.push_back((int)g.OC);
    }
    column_sums_launches(cols.data(), (int)cols.size(), [&](int first, const ColumnTiles& tiles) {
        BiasGrads batch = {};
        batch.tiles = tiles;
        for (int e = 0; e < tiles.entries; e++) batch.entry[e] = sums[first + e];
        bias_backward_partials_kernel<<<column_tiles_grid(tiles), column_partials_block()>>>(batch, partials, N);
        launchCheck();
    });
}
#else
inline void bias_forward(floatX* out, const floatX* bias, int N, int OC) { bias_forward_host(out, bias, N, OC); }
inline void bias_backward_many(std::initializer_list<BiasGrad> grads, int N, float* partials) {
    (void)partials;
    for (const BiasGrad& g : grads) if (g.dbias) bias_backward_host(g.dbias, g.dout, N, (int)g.OC);
}
#endif
inline void bias_backward(floatX* dbias, const floatX* dout, int N, int OC, float* partials) {
    bias_backward_many({{dbias, dout, OC}}, N, partials);
}

#ifdef __CUDACC__
// the largest power of two up to 256 that divides p's address: what cuBLASLt's heuristic must be told
inline uint32_t pointer_alignment(const void* p) {
    uint32_t a = 256;
    while (a > 1 && (uintptr_t)p % a) a /= 2;
    return a;
}
// D(m,n) = op(A)(m,k) B(k,n), column-major, through cuBLASLt with an epilogue: BIAS adds the bias
// (m) to each column, GELU_AUX_BIAS also applies GELU and keeps its input in aux (kernels/gelu_fusion.cuh),
// DGELU multiplies by GELU's derivative at aux. op(A) = A^T when transpose_a (A stored k x m), else A
// (m x k); aux m x n like D. The epilogue works on the fp32 sums: one pass over D instead of two,
// and one rounding instead of two (the host twins round twice: the results agree within floatX's
// rounding). A workspace only for the GELU epilogues (common.cuh: cublaslt_workspace), whose DGELU
// algorithms without one were slow on a GPU.
//
// The descriptors, layouts and the heuristic's algorithm depend on the shape, the epilogue and the
// operands' alignments, not on the pointers: they are made once per such key (matmul_lt_plan) and
// kept for the process, as the handle is; each call sets only the bias and aux pointers and runs.
// The heuristic is asked with the first call's pointers set (it may read their alignment: the
// emulated cuBLASLt refuses an aux pointer not 16-byte aligned there), so the key holds the bias's
// and aux's alignments too.
// A step of GPT-2 calls cuBLASLt 48 times with 4 keys, so the heuristic's tens of microseconds of
// host time a call are spent 4 times a run. The same key gets the same algorithm each call, so the
// bits are those of asking every time (the heuristic answers alike for alike questions).
struct MatmulLtKey {
    int m, n, k;
    bool transpose_a, bias, aux;
    cublasLtEpilogue_t epilogue;
    uint32_t align_a, align_b, align_d, align_bias, align_aux;  // pointer_alignment of each (C is D; 0: none)
    bool operator<(const MatmulLtKey& o) const {
        return std::tie(m, n, k, transpose_a, bias, aux, epilogue, align_a, align_b, align_d, align_bias, align_aux) <
               std::tie(o.m, o.n, o.k, o.transpose_a, o.bias, o.aux, o.epilogue, o.align_a, o.align_b, o.align_d,
                        o.align_bias, o.align_aux);
    }
};
struct MatmulLtPlan {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
    bool found;              // false: cuBLASLt has no algorithm for this key (the caller takes other kernels)
    size_t workspace_bytes;  // the GELU epilogues' (common.cuh), else 0
};
// the epilogue of a descriptor, its bias type and aux's leading dimension
inline void matmul_lt_epilogue(cublasLtMatmulDesc_t desc, cublasLtEpilogue_t epilogue, bool bias, bool aux,
                               int64_t m) {
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    if (bias) {
        cudaDataType_t bias_type = CUBLAS_FLOATX;
        cublasCheck(
            cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
    }
    if (aux)  // GELU's input, laid out as D: m rows
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &m, sizeof(m)));
}
// each call's operands of the epilogue: the bias and GELU's input
inline void matmul_lt_pointers(cublasLtMatmulDesc_t desc, const floatX* bias, const floatX* aux) {
    if (bias)
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    if (aux)
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
}
// the heuristic's preference: the workspace it may use, and the alignments its algorithm may assume
inline cublasLtMatmulPreference_t matmul_lt_preference(const MatmulLtKey& key, size_t workspace_bytes) {
    cublasLtMatmulPreference_t preference;
    cublasCheck(cublasLtMatmulPreferenceCreate(&preference));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                     &workspace_bytes, sizeof(workspace_bytes)));
    uint32_t align[4] = {key.align_a, key.align_b, key.align_d, key.align_d};
    for (int i = 0; i < 4; i++)  // A, B, C, D: the heuristic keeps to algorithms these alignments allow
        cublasCheck(cublasLtMatmulPreferenceSetAttribute(
            preference, (cublasLtMatmulPreferenceAttributes_t)(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES + i),
            &align[i], sizeof(align[i])));
    return preference;
}
inline const MatmulLtPlan& matmul_lt_plan(const MatmulLtKey& key, const floatX* bias, const floatX* aux) {
    static std::map<MatmulLtKey, MatmulLtPlan> plans;  // one device per process (comm.h), so one table
    auto known = plans.find(key);
    if (known != plans.end()) return known->second;
    MatmulLtPlan p = {};
    cublasCheck(cublasLtMatmulDescCreate(&p.desc, cublas_compute(), CUDA_R_32F));
    cublasOperation_t op_a = key.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N, keep = CUBLAS_OP_N;
    cublasCheck(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
    cublasCheck(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof(keep)));
    matmul_lt_epilogue(p.desc, key.epilogue, key.bias, key.aux, key.m);
    matmul_lt_pointers(p.desc, bias, aux);
    int m = key.m, n = key.n, k = key.k;
    if (key.transpose_a) cublasCheck(cublasLtMatrixLayoutCreate(&p.a, CUBLAS_FLOATX, k, m, k));  // (rows, cols, ld)
    else cublasCheck(cublasLtMatrixLayoutCreate(&p.a, CUBLAS_FLOATX, m, k, m));
    cublasCheck(cublasLtMatrixLayoutCreate(&p.b, CUBLAS_FLOATX, k, n, k));
    cublasCheck(cublasLtMatrixLayoutCreate(&p.d, CUBLAS_FLOATX, m, n, m));
    p.workspace_bytes = key.aux ? CUBLASLT_WORKSPACE_BYTES : 0;
    cublasLtMatmulPreference_t preference = matmul_lt_preference(key, p.workspace_bytes);
    cublasLtMatmulHeuristicResult_t found;
    int count = 0;
    cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(cublaslt_handle(), p.desc, p.a, p.b, p.d, p.d, preference,
                                                           1, &found, &count);
    cublasLtMatmulPreferenceDestroy(preference);
    p.found = status == CUBLAS_STATUS_SUCCESS && count > 0;  // none (NOT_SUPPORTED): the caller's other kernels
    p.algo = found.algo;
    return plans.emplace(key, p).first->second;
}
// False, having done nothing, where cuBLASLt has no algorithm for these sizes and alignments
inline bool matmul_lt(floatX* d, const floatX* a, bool transpose_a, const floatX* b, int m, int n, int k,
                      cublasLtEpilogue_t epilogue, const floatX* bias, const floatX* aux) {
    MatmulLtKey key = {m, n, k, transpose_a, bias != nullptr, aux != nullptr, epilogue,
                       pointer_alignment(a), pointer_alignment(b), pointer_alignment(d),
                       bias ? pointer_alignment(bias) : 0, aux ? pointer_alignment(aux) : 0};
    const MatmulLtPlan& p = matmul_lt_plan(key, bias, aux);
    if (!p.found) return false;
    matmul_lt_pointers(p.desc, bias, aux);
    const float one = 1.0f, zero = 0.0f;
    cublasCheck(cublasLtMatmul(cublaslt_handle(), p.desc, &one, a, p.a, b, p.b, &zero, d, p.d, d, p.d, &p.algo,
                               p.workspace_bytes ? cublaslt_workspace() : nullptr, p.workspace_bytes, 0));
    return true;
}
#endif

inline void matmul_forward(floatX* out,                               // (N,OC)
                           const floatX* inp,                         // (N,C)
                           const floatX* weight, const floatX* bias,  // (OC,C), (OC) or NULL
                           int N, int C, int OC) {
#ifdef __CUDACC__
    // cuBLASLt's bias epilogue wants the bias 16-byte aligned (the trainer's tensors are when C is
    // a whole number of 16-byte packs); else, and in the CPU build, the GEMM, then bias_forward
    // (out^T (OC,N) = W^T inp^T column-major: W (OC,C) row-major is the column-major (C,OC) transposed)
    if (bias && aligned16(bias) && (size_t)N * C * OC > 0 &&
        matmul_lt(out, weight, true, inp, OC, N, C, CUBLASLT_EPILOGUE_BIAS, bias, nullptr))
        return;
#endif
    gemm_batched(false, true, N, OC, C, 1.0f, inp, C, 0, weight, C, 0, 0.0f, out, OC, 0, 1);
    if (bias) bias_forward(out, bias, N, OC);
}

// the backward in its two halves, which a zero-bubble pipeline runs apart (pipeline.h): the
// input gradient (B, on the critical path) and the weight and bias gradients (W, deferrable)
inline void matmul_backward_input(floatX* dinp,                      // (N,C) overwritten
                                  const floatX* dout,                // (N,OC)
                                  const floatX* weight,              // (OC,C)
                                  int N, int C, int OC) {
    gemm_batched(false, false, N, C, OC, 1.0f, dout, OC, 0, weight, C, 0, 0.0f, dinp, C, 0, 1);
}
// partials: the bias sum's scratch, column_partials_elements(OC) floats (GPU; unused on the CPU)
inline void matmul_backward_weight(floatX* dweight, floatX* dbias,  // (OC,C) +=, (OC) += or NULL
                                   const floatX* dout,              // (N,OC)
                                   const floatX* inp,               // (N,C)
                                   int N, int C, int OC, float* partials) {
    gemm_batched(true, false, OC, C, N, 1.0f, dout, OC, 0, inp, C, 0, 1.0f, dweight, C, 0, 1);
    if (dbias) bias_backward(dbias, dout, N, OC, partials);
}
// both halves in turn (dinp NULL: the weight half only)
inline void matmul_backward(floatX* dinp, floatX* dweight, floatX* dbias, const floatX* dout, const floatX* inp,
                            const floatX* weight, int N, int C, int OC, float* partials) {
    if (dinp) matmul_backward_input(dinp, dout, weight, N, C, OC);
    matmul_backward_weight(dweight, dbias, dout, inp, N, C, OC, partials);
}

/*
tests/emu/cublas_emu.cpp: cuBLAS and cuBLASLt for the emulated CUDA build, written from their
documented column-major semantics, not from the project's use of them:

    C(m,n) = alpha op(A)(m,k) op(B)(k,n) + beta C       column-major: element (i,j) of X is X[i + j*ldx]
    A is m x k (lda >= max(1,m)) when op(A) = A, k x m (lda >= max(1,k)) when op(A) = A^T;
    B is k x n (ldb >= max(1,k)) or n x k (ldb >= max(1,n)); C is m x n (ldc >= max(1,m));
    strided batches: matrix i starts stride_i elements after matrix i-1; beta = 0 ignores C.

The checks are the documented ones: a null handle is CUBLAS_STATUS_NOT_INITIALIZED; negative
sizes or leading dimensions below those bounds are CUBLAS_STATUS_INVALID_VALUE; a type
combination outside the table of cublasGemmEx (CUBLAS_COMPUTE_32F: 32F x 32F -> 32F,
16F/16BF x same -> same or 32F) is CUBLAS_STATUS_NOT_SUPPORTED. Every byte a call reads or
writes must lie in one device allocation (cuda_emu.cpp). The products are computed in fp32
by OpenBLAS's column-major sgemm on fp32 copies; TF32 math (CUBLAS_TF32_TENSOR_OP_MATH or
CUBLAS_COMPUTE_32F_FAST_TF32) first rounds fp32 inputs to TF32's 10-bit mantissa, as tensor
cores do. The result, with cuBLASLt's epilogue (bias, GELU), is rounded once into C's type.
*/
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <string>
#include <vector>
#include <cblas.h>
#include "cublasLt.h"
#include "cuda_bf16.h"
#include "cuda_fp16.h"

struct cublasContext { cublasMath_t math = CUBLAS_DEFAULT_MATH; cudaStream_t stream = 0; };

static size_t type_bytes(cudaDataType t) { return t == CUDA_R_32F ? 4 : t == CUDA_R_64F ? 8 : 2; }
static float load(const void* p, cudaDataType t, size_t i) {
    if (t == CUDA_R_32F) return ((const float*)p)[i];
    if (t == CUDA_R_16BF) return __bfloat162float(((const __nv_bfloat16*)p)[i]);
    return __half2float(((const __half*)p)[i]);
}
static void store(void* p, cudaDataType t, size_t i, float v) {
    if (t == CUDA_R_32F) ((float*)p)[i] = v;
    else if (t == CUDA_R_16BF) ((__nv_bfloat16*)p)[i] = __float2bfloat16_rn(v);
    else ((__half*)p)[i] = __float2half_rn(v);
}
static float tf32(float x) {  // round to nearest even at 10 mantissa bits
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu;
    memcpy(&x, &u, 4);
    return x;
}
static bool supported(cudaDataType a, cudaDataType b, cudaDataType c, cublasComputeType_t compute) {
    bool fp32_compute = compute == CUBLAS_COMPUTE_32F || compute == CUBLAS_COMPUTE_32F_PEDANTIC ||
                        compute == CUBLAS_COMPUTE_32F_FAST_TF32 || compute == CUBLAS_COMPUTE_32F_FAST_16F ||
                        compute == CUBLAS_COMPUTE_32F_FAST_16BF;
    if (!fp32_compute || a != b) return false;
    if (a == CUDA_R_32F) return c == CUDA_R_32F;
    if (a == CUDA_R_16F || a == CUDA_R_16BF) return c == a || c == CUDA_R_32F;
    return false;
}

// an optional epilogue: out(i,j) = f(acc(i,j) + bias[i]), f GELU or the identity; with an aux
// matrix (D's type, leading dimension aux_ld), GELU's input is written there (GELU_AUX), or
// out(i,j) = acc(i,j) gelu'(aux(i,j)) (DGELU: the backward through GELU, its input read back)
struct Epilogue { const void* bias; cudaDataType bias_type; bool gelu; void* aux; long long aux_ld; bool dgelu; };
static float tanh_gelu(float v) { return 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v))); }
static float tanh_gelu_slope(float v) {  // d/dv of tanh_gelu
    float t = tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v));
    return 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * 0.7978845608028654f * (1.0f + 0.134145f * v * v);
}

// the operation above for one matrix of each, all checked; a, b, c are where the bytes are
static void gemm_one(bool tf32_inputs, bool trans_a, bool trans_b, int m, int n, int k, float alpha, const void* A,
                     cudaDataType at, int lda, const void* B, cudaDataType bt, int ldb, float beta, const void* C,
                     cudaDataType ct, int ldc, void* D, int ldd, const Epilogue& ep) {
    int a_rows = trans_a ? k : m, a_cols = trans_a ? m : k, b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;
    std::vector<float> a((size_t)a_rows * a_cols), b((size_t)b_rows * b_cols), acc((size_t)m * n, 0.0f);
    for (int j = 0; j < a_cols; j++)
        for (int i = 0; i < a_rows; i++) a[i + (size_t)j * a_rows] = load(A, at, i + (size_t)j * lda);
    for (int j = 0; j < b_cols; j++)
        for (int i = 0; i < b_rows; i++) b[i + (size_t)j * b_rows] = load(B, bt, i + (size_t)j * ldb);
    if (tf32_inputs) { for (float& x : a) x = tf32(x); for (float& x : b) x = tf32(x); }
    if (k > 0)
        cblas_sgemm(CblasColMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha,
                    a.data(), a_rows > 0 ? a_rows : 1, b.data(), b_rows > 0 ? b_rows : 1, 0.0f, acc.data(), m > 0 ? m : 1);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            float v = acc[i + (size_t)j * m];
            if (beta != 0.0f) v += beta * load(C, ct, i + (size_t)j * ldc);
            if (ep.bias) v += load(ep.bias, ep.bias_type, i);
            size_t at = i + (size_t)j * ep.aux_ld;
            if (ep.dgelu) v *= tanh_gelu_slope(load(ep.aux, ct, at));
            else if (ep.aux) store(ep.aux, ct, at, v);
            if (ep.gelu) v = tanh_gelu(v);
            store(D, ct, i + (size_t)j * ldd, v);
        }
}

// elements a column-major (rows x cols) matrix with leading dimension ld spans
static size_t extent(int rows, int cols, long long ld) { return rows == 0 || cols == 0 ? 0 : (size_t)ld * (cols - 1) + rows; }

static cublasStatus_t gemm(cublasHandle_t handle, const char* who, cublasOperation_t transa, cublasOperation_t transb,
                           int m, int n, int k, const void* alpha, const void* A, cudaDataType at, int lda, long long sa,
                           const void* B, cudaDataType bt, int ldb, long long sb, const void* beta, void* C,
                           cudaDataType ct, int ldc, long long sc, int batch, cublasComputeType_t compute) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (transa > CUBLAS_OP_C || transb > CUBLAS_OP_C || m < 0 || n < 0 || k < 0 || batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
    bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;  // real types: conjugate transpose = transpose
    if (lda < (ta ? k : m) || lda < 1 || ldb < (tb ? n : k) || ldb < 1 || ldc < m || ldc < 1) return CUBLAS_STATUS_INVALID_VALUE;
    if (!supported(at, bt, ct, compute)) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
    float al = *(const float*)alpha, be = *(const float*)beta;  // host pointer mode: scalars in host memory
    size_t ea = extent(ta ? k : m, ta ? m : k, lda), eb = extent(tb ? n : k, tb ? k : n, ldb), ec = extent(m, n, ldc);
    std::string what = std::string(who) + " ";
    const char* a = (const char*)cuda_emu::device_bytes(A, (ea + (size_t)sa * (batch - 1)) * type_bytes(at), (what + "A").c_str());
    const char* b = (const char*)cuda_emu::device_bytes(B, (eb + (size_t)sb * (batch - 1)) * type_bytes(bt), (what + "B").c_str());
    char* c = (char*)cuda_emu::device_bytes(C, (ec + (size_t)sc * (batch - 1)) * type_bytes(ct), (what + "C").c_str());
    bool tf32_inputs = at == CUDA_R_32F && (compute == CUBLAS_COMPUTE_32F_FAST_TF32 ||
                                            (handle->math == CUBLAS_TF32_TENSOR_OP_MATH && compute == CUBLAS_COMPUTE_32F));
    cuda_emu::enqueue(handle->stream, [=] {  // the scalars as they were at the call, the GEMM when its stream runs it
        cuda_emu::watch_begin();
        for (int i = 0; i < batch; i++)
            gemm_one(tf32_inputs, ta, tb, m, n, k, al, a + (size_t)i * sa * type_bytes(at), at, lda,
                     b + (size_t)i * sb * type_bytes(bt), bt, ldb, be, c + (size_t)i * sc * type_bytes(ct), ct, ldc,
                     c + (size_t)i * sc * type_bytes(ct), ldc, Epilogue{nullptr, CUDA_R_32F, false});
        cuda_emu::watch_end(who, 2.0 * m * n * k * batch);  // the launch report's FLOPs, from the sizes given
        cuda_emu::check_canaries(who);
    });
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasCreate(cublasHandle_t* handle) { *handle = new cublasContext(); return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasDestroy(cublasHandle_t handle) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (mode < CUBLAS_DEFAULT_MATH || mode > CUBLAS_TF32_TENSOR_OP_MATH) return CUBLAS_STATUS_INVALID_VALUE;
    handle->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->stream = stream;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                            const void* alpha, const void* A, cudaDataType at, int lda, const void* B, cudaDataType bt,
                            int ldb, const void* beta, void* C, cudaDataType ct, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t) {
    return gemm(handle, "cublasGemmEx", transa, transb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta, C, ct, ldc, 0, 1, compute);
}
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
                                          int n, int k, const void* alpha, const void* A, cudaDataType at, int lda,
                                          long long sa, const void* B, cudaDataType bt, int ldb, long long sb,
                                          const void* beta, void* C, cudaDataType ct, int ldc, long long sc, int batch,
                                          cublasComputeType_t compute, cublasGemmAlgo_t) {
    return gemm(handle, "cublasGemmStridedBatchedEx", transa, transb, m, n, k, alpha, A, at, lda, sa, B, bt, ldb, sb, beta,
                C, ct, ldc, sc, batch, compute);
}

// ---------------------------------------------------------------- cuBLASLt
struct cublasLtContext { int unused; };
struct cublasLtMatmulDescOpaque {
    cublasComputeType_t compute;
    cudaDataType_t scale;
    cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    const void* bias = nullptr;
    int bias_type = -1;  // -1: D's type
    void* aux = nullptr;  // GELU's input: written by GELU_AUX(_BIAS), read by DGELU
    int64_t aux_ld = 0;
};
struct cublasLtMatrixLayoutOpaque { cudaDataType type; uint64_t rows, cols; int64_t ld; };
struct cublasLtMatmulPreferenceOpaque {
    size_t max_workspace = 0;
    uint32_t min_alignment[4] = {256, 256, 256, 256};  // A, B, C, D: cuBLASLt's default, 256 bytes
};

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) { *handle = new cublasLtContext(); return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) { delete handle; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType_t scale) {
    *desc = new cublasLtMatmulDescOpaque();
    (*desc)->compute = compute;
    (*desc)->scale = scale;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) { delete desc; return CUBLAS_STATUS_SUCCESS; }
template <typename T> static cublasStatus_t set(T* field, const void* buf, size_t size) {
    if (size != sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(field, buf, sizeof(T));
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              size_t size) {
    switch (attr) {
        case CUBLASLT_MATMUL_DESC_TRANSA: return set(&d->transa, buf, size);
        case CUBLASLT_MATMUL_DESC_TRANSB: return set(&d->transb, buf, size);
        case CUBLASLT_MATMUL_DESC_EPILOGUE: return set(&d->epilogue, buf, size);
        case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return set(&d->bias, buf, size);
        case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return set(&d->bias_type, buf, size);
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return set(&d->aux, buf, size);
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return set(&d->aux_ld, buf, size);
    }
    return CUBLAS_STATUS_INVALID_VALUE;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld) {
    if (ld < (int64_t)rows || ld < 1) return CUBLAS_STATUS_INVALID_VALUE;
    *layout = new cublasLtMatrixLayoutOpaque{type, rows, cols, ld};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) { delete layout; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
    *pref = new cublasLtMatmulPreferenceOpaque();
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) { delete pref; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t size) {
    if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) return set(&pref->max_workspace, buf, size);
    if (attr >= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES && attr <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES)
        return set(&pref->min_alignment[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], buf, size);
    return CUBLAS_STATUS_INVALID_VALUE;
}

// the shapes agree: op(A) (m,k), op(B) (k,n), C and D (m,n) of one type; the epilogue is known
static cublasStatus_t lt_check(cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t A, cublasLtMatrixLayout_t B,
                               cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D) {
    if (!d || !A || !B || !C || !D) return CUBLAS_STATUS_INVALID_VALUE;
    uint64_t m = D->rows, n = D->cols, k = d->transa == CUBLAS_OP_N ? A->cols : A->rows;
    bool a_ok = d->transa == CUBLAS_OP_N ? A->rows == m : A->cols == m;
    bool b_ok = d->transb == CUBLAS_OP_N ? (B->rows == k && B->cols == n) : (B->cols == k && B->rows == n);
    if (!a_ok || !b_ok || C->rows != m || C->cols != n) return CUBLAS_STATUS_INVALID_VALUE;
    if (C->type != D->type || !supported(A->type, B->type, D->type, d->compute) || d->scale != CUDA_R_32F)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    switch (d->epilogue) {
        case CUBLASLT_EPILOGUE_DEFAULT: case CUBLASLT_EPILOGUE_GELU: return CUBLAS_STATUS_SUCCESS;
        case CUBLASLT_EPILOGUE_BIAS: case CUBLASLT_EPILOGUE_GELU_BIAS: return CUBLAS_STATUS_SUCCESS;
        case CUBLASLT_EPILOGUE_GELU_AUX: case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: case CUBLASLT_EPILOGUE_DGELU:
            // the aux matrix: its ld a multiple of 8, at least D's rows (documented); 16-byte aligned
            // (the emulator's bar: the heuristic reads the pointer to learn its alignment)
            if (!d->aux || d->aux_ld % 8 || d->aux_ld < (int64_t)m || (uintptr_t)d->aux % 16) return CUBLAS_STATUS_NOT_SUPPORTED;
            return CUBLAS_STATUS_SUCCESS;
        default: return CUBLAS_STATUS_NOT_SUPPORTED;
    }
}
static bool has_aux(cublasLtEpilogue_t e) {
    return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU;
}
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t A,
                                              cublasLtMatrixLayout_t B, cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D,
                                              cublasLtMatmulPreference_t pref, int requested, cublasLtMatmulHeuristicResult_t* results,
                                              int* returned) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
    cublasStatus_t s = lt_check(desc, A, B, C, D);
    *returned = s == CUBLAS_STATUS_SUCCESS ? 1 : 0;
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    results[0] = cublasLtMatmulHeuristicResult_t{};
    for (int i = 0; i < 4; i++) results[0].algo.data[i] = pref ? pref->min_alignment[i] : 256;  // what the algorithm needs
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t d, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t Ad, const void* B, cublasLtMatrixLayout_t Bd, const void* beta,
                              const void* C, cublasLtMatrixLayout_t Cd, void* D, cublasLtMatrixLayout_t Dd,
                              const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    const void* pointers[4] = {A, B, C, D};
    for (int i = 0; i < 4; i++)  // the heuristic's algorithm needs the alignment its preference allowed (or 256 bytes)
        if ((uintptr_t)pointers[i] % (algo ? algo->data[i] : 256) != 0) return CUBLAS_STATUS_INVALID_VALUE;
    cublasStatus_t s = lt_check(d, Ad, Bd, Cd, Dd);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    bool with_bias = d->epilogue == CUBLASLT_EPILOGUE_BIAS || d->epilogue == CUBLASLT_EPILOGUE_GELU_BIAS ||
                     d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    bool gelu = d->epilogue == CUBLASLT_EPILOGUE_GELU || d->epilogue == CUBLASLT_EPILOGUE_GELU_BIAS ||
                d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX || d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    if (with_bias && !d->bias) return CUBLAS_STATUS_INVALID_VALUE;
    int m = (int)Dd->rows, n = (int)Dd->cols, k = (int)(d->transa == CUBLAS_OP_N ? Ad->cols : Ad->rows);
    if (workspace_bytes) cuda_emu::device_bytes(workspace, workspace_bytes, "cublasLtMatmul workspace");
    float be = *(const float*)beta;
    cudaDataType bias_type = d->bias_type < 0 ? Dd->type : (cudaDataType)d->bias_type;
    void* aux = has_aux(d->epilogue)
        ? cuda_emu::device_bytes(d->aux, extent(m, n, d->aux_ld) * type_bytes(Dd->type), "cublasLtMatmul epilogue aux")
        : nullptr;
    Epilogue ep = {with_bias ? cuda_emu::device_bytes(d->bias, (size_t)m * type_bytes(bias_type), "cublasLtMatmul bias") : nullptr,
                   bias_type, gelu, aux, (long long)d->aux_ld, d->epilogue == CUBLASLT_EPILOGUE_DGELU};
    const void* a = cuda_emu::device_bytes(A, extent((int)Ad->rows, (int)Ad->cols, Ad->ld) * type_bytes(Ad->type), "cublasLtMatmul A");
    const void* b = cuda_emu::device_bytes(B, extent((int)Bd->rows, (int)Bd->cols, Bd->ld) * type_bytes(Bd->type), "cublasLtMatmul B");
    const void* c = be != 0.0f ? cuda_emu::device_bytes(C, extent(m, n, Cd->ld) * type_bytes(Cd->type), "cublasLtMatmul C") : nullptr;
    void* dd = cuda_emu::device_bytes(D, extent(m, n, Dd->ld) * type_bytes(Dd->type), "cublasLtMatmul D");
    bool tf32 = Ad->type == CUDA_R_32F && d->compute == CUBLAS_COMPUTE_32F_FAST_TF32;
    bool ta = d->transa != CUBLAS_OP_N, tb = d->transb != CUBLAS_OP_N;
    float al = *(const float*)alpha;
    cudaDataType at = Ad->type, bt = Bd->type, dt = Dd->type;
    int lda = (int)Ad->ld, ldb = (int)Bd->ld, ldc = (int)Cd->ld, ldd = (int)Dd->ld;
    cuda_emu::enqueue(stream, [=] {  // the descriptors as they were at the call, the GEMM when its stream runs it
        cuda_emu::watch_begin();
        gemm_one(tf32, ta, tb, m, n, k, al, a, at, lda, b, bt, ldb, be, c, dt, ldc, dd, ldd, ep);
        cuda_emu::watch_end("cublasLtMatmul", 2.0 * m * n * k);  // the launch report's FLOPs (the epilogue not counted)
        cuda_emu::check_canaries("cublasLtMatmul");
    });
    return CUBLAS_STATUS_SUCCESS;
}

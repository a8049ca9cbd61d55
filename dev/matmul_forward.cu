/*
dev/matmul_forward.cu: the linear layer out(N,OC) = inp(N,C) @ W^T(C,OC) + b
(kernels/matmul.cuh), fp32 accumulation whatever floatX stores.
It is compute-bound: 2 N C OC flops on (N C + OC C + N OC) elements.

version 1: one thread per output element (the host twin's matmul_forward_element), a dot
           product over C read from global memory (each input element is read OC times,
           each weight N times)
version 2: 16x16 output tiles: the block stages 16x16 tiles of inp and W in shared
           memory, so each global element is read N/16 or OC/16 times instead
version 3: cuBLAS (cublasGemmStridedBatchedEx, fp32 compute), then the bias kernel:
           the trainer's matmul_forward. Tensor cores in bf16; fp32 without TF32
version 4: cuBLASLt with the bias in the GEMM's epilogue: no second pass over out (llm.c's
           way; GELU can be fused the same way, CUBLASLT_EPILOGUE_GELU_BIAS)
The block size applies to version 1.
*/
#include "lab.h"
#include <cublasLt.h>              // defines: cublasLtMatmul (version 4)
#include "../kernels/matmul.cuh"  // defines: matmul_forward_host (the reference), matmul_forward (version 3)

__global__ void matmul_forward_kernel1(floatX* out, const floatX* inp, const floatX* weight, const floatX* bias,
                                       int N, int C, int OC) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < (size_t)N * OC) matmul_forward_element(idx / OC, idx % OC, out, inp, weight, bias, C, OC);  // the twin's element
}

#define TILE 16
// block (x, y): outputs rows y*16.., columns x*16..; thread (tx, ty) owns out[row ty][column tx]
__global__ void matmul_forward_kernel2(floatX* out, const floatX* inp, const floatX* weight, const floatX* bias,
                                       int N, int C, int OC) {
    __shared__ float inp_tile[TILE][TILE], weight_tile[TILE][TILE + 1];  // +1: no bank conflicts on the column read
    int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    int w_row = blockIdx.x * TILE + threadIdx.y;  // the weight row (output channel) this thread loads
    float sum = 0.0f;
    for (int c0 = 0; c0 < C; c0 += TILE) {
        int c = c0 + threadIdx.x;
        inp_tile[threadIdx.y][threadIdx.x] = row < N && c < C ? to_float(inp[(size_t)row * C + c]) : 0.0f;
        weight_tile[threadIdx.y][threadIdx.x] = w_row < OC && c < C ? to_float(weight[(size_t)w_row * C + c]) : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; k++) sum += inp_tile[threadIdx.y][k] * weight_tile[threadIdx.x][k];
        __syncthreads();
    }
    if (row < N && col < OC) out[(size_t)row * OC + col] = from_float(sum + (bias ? to_float(bias[col]) : 0.0f));
}

// cuBLASLt, the bias added by the GEMM's epilogue (one pass over out instead of two). Same
// row-major <-> column-major view as gemm_batched: out^T (OC,N) = W (OC,C as stored: op T) x
// inp^T (C,N). The descriptors and the chosen algorithm are made once per shape and kept.
struct LtMatmul {
    cublasLtHandle_t handle = nullptr;
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t weight = nullptr, inp = nullptr, out = nullptr;
    cublasLtMatmulAlgo_t algo;
    void* workspace = nullptr;
    size_t workspace_bytes = 32u << 20;
    int N = -1, C = -1, OC = -1;
    const floatX* bias = nullptr;
};
static void lt_prepare(LtMatmul* lt, const floatX* bias, int N, int C, int OC) {
    if (lt->N == N && lt->C == C && lt->OC == OC && lt->bias == bias) return;
    if (!lt->handle) {
        cublasCheck(cublasLtCreate(&lt->handle));
        lt->workspace = device_malloc(lt->workspace_bytes);
    }
    if (lt->desc) {
        cublasLtMatmulDescDestroy(lt->desc);
        cublasLtMatrixLayoutDestroy(lt->weight); cublasLtMatrixLayoutDestroy(lt->inp); cublasLtMatrixLayoutDestroy(lt->out);
    }
    cublasCheck(cublasLtMatmulDescCreate(&lt->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t transpose = CUBLAS_OP_T, keep = CUBLAS_OP_N;
    cublasCheck(cublasLtMatmulDescSetAttribute(lt->desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose)));
    cublasCheck(cublasLtMatmulDescSetAttribute(lt->desc, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof(keep)));
    cublasLtEpilogue_t epilogue = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    cublasCheck(cublasLtMatmulDescSetAttribute(lt->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    if (bias) {
        cudaDataType_t bias_type = CUBLAS_FLOATX;
        cublasCheck(cublasLtMatmulDescSetAttribute(lt->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
        cublasCheck(cublasLtMatmulDescSetAttribute(lt->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    }
    cublasCheck(cublasLtMatrixLayoutCreate(&lt->weight, CUBLAS_FLOATX, C, OC, C));  // column-major (rows, cols, ld)
    cublasCheck(cublasLtMatrixLayoutCreate(&lt->inp, CUBLAS_FLOATX, C, N, C));
    cublasCheck(cublasLtMatrixLayoutCreate(&lt->out, CUBLAS_FLOATX, OC, N, OC));
    cublasLtMatmulPreference_t preference;
    cublasCheck(cublasLtMatmulPreferenceCreate(&preference));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                     &lt->workspace_bytes, sizeof(lt->workspace_bytes)));
    cublasLtMatmulHeuristicResult_t found;
    int count = 0;
    cublasCheck(cublasLtMatmulAlgoGetHeuristic(lt->handle, lt->desc, lt->weight, lt->inp, lt->out, lt->out, preference, 1,
                                               &found, &count));
    cublasLtMatmulPreferenceDestroy(preference);
    if (count == 0) fail("cuBLASLt has no algorithm for N %d C %d OC %d", N, C, OC);
    lt->algo = found.algo;
    lt->N = N; lt->C = C; lt->OC = OC; lt->bias = bias;
}
static void matmul_forward_lt(LtMatmul* lt, floatX* out, const floatX* inp, const floatX* weight, const floatX* bias,
                              int N, int C, int OC) {
    lt_prepare(lt, bias, N, C, OC);
    const float one = 1.0f, zero = 0.0f;
    cublasCheck(cublasLtMatmul(lt->handle, lt->desc, &one, weight, lt->weight, inp, lt->inp, &zero, out, lt->out, out, lt->out,
                               &lt->algo, lt->workspace, lt->workspace_bytes, 0));
}
// lt: version 4's cuBLASLt descriptors, made on first use and kept
static void matmul_forward_version(int version, int block, floatX* out, const floatX* inp, const floatX* weight,
                                   const floatX* bias, int N, int C, int OC, LtMatmul* lt) {
    if (version == 1) {
        matmul_forward_kernel1<<<ceil_div((size_t)N * OC, block), block>>>(out, inp, weight, bias, N, C, OC);
        launchCheck();
    } else if (version == 2) {
        matmul_forward_kernel2<<<dim3(ceil_div(OC, TILE), ceil_div(N, TILE)), dim3(TILE, TILE)>>>(out, inp, weight, bias, N, C, OC);
        launchCheck();
    } else if (version == 3) {
        matmul_forward(out, inp, weight, bias, N, C, OC);
    } else {
        matmul_forward_lt(lt, out, inp, weight, bias, N, C, OC);
    }
}

int main(int argc, char** argv) {
    const int VERSIONS = 4;
    Lab lab = lab_start(argc, argv, "matmul_forward", VERSIONS);
    LtMatmul lt;
    struct Size { int N, C, OC; } sizes[] = {{7, 32, 48}, {65, 96, 100}, {1024, 768, 2304}, {8 * 1024, 768, 3072}};
    for (Size s : sizes) {
        if (lab_skip_in_emulation((double)s.N * s.OC)) continue;
        std::vector<floatX> inp = random_floatx((size_t)s.N * s.C, 1), w = random_floatx((size_t)s.OC * s.C, 2, 0.036f),
                            b = random_floatx(s.OC, 3, 0.1f), out((size_t)s.N * s.OC);
        floatX *d_inp = to_device(inp), *d_w = to_device(w), *d_b = to_device(b);
        floatX* d_out = (floatX*)device_malloc(out.size() * sizeof(floatX));
        if (s.N <= 1024) {  // the host twin at GPT-2's largest size would take a while: time it only
            matmul_forward_host(out.data(), inp.data(), w.data(), b.data(), s.N, s.C, s.OC);
            for (int v = 1; v <= VERSIONS; v++) {
                if (!lab_wants(lab, v)) continue;
                for (int block : LAB_BLOCK_SIZES) {
                    matmul_forward_version(v, block, d_out, d_inp, d_w, d_b, s.N, s.C, s.OC, &lt);
                    lab_check(&lab, "out", d_out, out);
                }
                lab_report(&lab, v, "N C OC", {s.N, s.C, s.OC});
            }
        } else {
            double bytes = ((double)s.N * s.C + (double)s.OC * s.C + (double)s.N * s.OC) * sizeof(floatX);
            time_versions(lab, VERSIONS, bytes, [&](int v, int block) {
                matmul_forward_version(v, block, d_out, d_inp, d_w, d_b, s.N, s.C, s.OC, &lt);
            }, 2.0 * s.N * s.C * s.OC);
        }
        device_free(d_inp); device_free(d_w); device_free(d_b); device_free(d_out);
    }
    for_each_ref_case("matmul", [&](const RefFile& ref, const std::string& p, const std::vector<int>& sz) {
        int N = sz[0], C = sz[1], OC = sz[2];
        floatX *d_inp = to_device(ref_floatx(ref, p + "inp")), *d_w = to_device(ref_floatx(ref, p + "weight")),
               *d_b = to_device(ref_floatx(ref, p + "bias")), *d_out = (floatX*)device_malloc((size_t)N * OC * sizeof(floatX));
        for (int v = 1; v <= VERSIONS; v++) {
            if (!lab_wants(lab, v)) continue;
            printf("  version %d against PyTorch, case %s\n", v, p.c_str());
            matmul_forward_version(v, 256, d_out, d_inp, d_w, d_b, N, C, OC, &lt);
            lab_check_ref(&lab, "out", d_out, ref, p + "out");
        }
        device_free(d_inp); device_free(d_w); device_free(d_b); device_free(d_out);
    });
    return lab_finish(lab);
}

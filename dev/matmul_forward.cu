/*
dev/matmul_forward.cu: the linear layer out(N,OC) = inp(N,C) @ W^T(C,OC) + b
(kernels/matmul.cuh), fp32 accumulation whatever floatX stores.
It is compute-bound: 2 N C OC flops on (N C + OC C + N OC) elements.

version 1: one thread per output element (the host twin's matmul_forward_element), a dot
           product over C read from global memory (each input element is read OC times,
           each weight N times)
version 2: 16x16 output tiles: the block stages 16x16 tiles of inp and W in shared
           memory, so each global element is read N/16 or OC/16 times instead
version 3: cuBLAS (cublasGemmStridedBatchedEx, fp32 compute), then the bias kernel (the
           trainer's way before). Tensor cores in bf16; fp32 without TF32
version 4: the trainer's matmul_forward: cuBLASLt with the bias in the GEMM's epilogue, no
           second pass over out and one rounding (llm.c's way; kernels/matmul.cuh:
           matmul_lt; GELU fused the same way under -ge: kernels/gelu_fusion.cuh)
The block size applies to version 1.
*/
#include "lab.h"
#include "../kernels/matmul.cuh"  // defines: matmul_forward_host (the reference), gemm_batched, bias_forward, matmul_forward

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

static void matmul_forward_version(int version, int block, floatX* out, const floatX* inp, const floatX* weight,
                                   const floatX* bias, int N, int C, int OC) {
    if (version == 1) {
        matmul_forward_kernel1<<<ceil_div((size_t)N * OC, block), block>>>(out, inp, weight, bias, N, C, OC);
        launchCheck();
    } else if (version == 2) {
        matmul_forward_kernel2<<<dim3(ceil_div(OC, TILE), ceil_div(N, TILE)), dim3(TILE, TILE)>>>(out, inp, weight, bias, N, C, OC);
        launchCheck();
    } else if (version == 3) {
        gemm_batched(false, true, N, OC, C, 1.0f, inp, C, 0, weight, C, 0, 0.0f, out, OC, 0, 1);
        bias_forward(out, bias, N, OC);
    } else {
        matmul_forward(out, inp, weight, bias, N, C, OC);
    }
}

int main(int argc, char** argv) {
    const int VERSIONS = 4;
    Lab lab = lab_start(argc, argv, "matmul_forward", VERSIONS);
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
                    matmul_forward_version(v, block, d_out, d_inp, d_w, d_b, s.N, s.C, s.OC);
                    lab_check(&lab, "out", d_out, out);
                }
                lab_report(&lab, v, "N C OC", {s.N, s.C, s.OC});
            }
        } else {
            double bytes = ((double)s.N * s.C + (double)s.OC * s.C + (double)s.N * s.OC) * sizeof(floatX);
            time_versions(lab, VERSIONS, bytes, [&](int v, int block) {
                matmul_forward_version(v, block, d_out, d_inp, d_w, d_b, s.N, s.C, s.OC);
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
            matmul_forward_version(v, 256, d_out, d_inp, d_w, d_b, N, C, OC);
            lab_check_ref(&lab, "out", d_out, ref, p + "out");
        }
        device_free(d_inp); device_free(d_w); device_free(d_b); device_free(d_out);
    });
    return lab_finish(lab);
}

/*
kernels/gelu_fusion.cuh: the MLP's GELU inside the GEMMs next to it (llm.c's -ge, gelu_fusion):
cuBLASLt's epilogues instead of gelu.cuh's two kernels.

    -ge 1, forward:   fch      = ln2 W_fc^T + b_fc    written as the epilogue's aux output (the backward reads it)
                      fch_gelu = gelu(fch)             D, from the fp32 sums before they are rounded
    -ge 2, backward:  dfch     = (dfch_gelu) * gelu'(fch), dfch_gelu = dproj W_fcproj, in the GEMM's epilogue

        ln2 ──GEMM──(+b)──┬──> fch (aux)                  one launch: CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                          └──gelu──> fch_gelu
        dproj ──GEMM──(x gelu'(fch))──> dfch              one launch: CUBLASLT_EPILOGUE_DGELU

Cost: passes over the N x 4C activation. Unfused, the forward writes fch, then gelu_forward reads it
and writes fch_gelu (3); fused, fch and fch_gelu are written once each (2). Unfused, the backward
writes dfch_gelu, then gelu_backward reads it and fch and writes dfch (4); fused, fch is read and
dfch written (2). At GPT-2 124M, B 64, T 1024 in bf16 a pass is N 4C x 2 bytes = 403 MB a layer:
3 passes saved of 12 layers is 14.5 GB a step, about 4 ms at an H100's 3.35 TB/s (estimated from
bytes; not yet measured on a GPU), and 2 launches a layer fewer. The fused GEMMs get 32 MiB of
cuBLASLt workspace (common.cuh: cublaslt_workspace, allocated at the first; not in -plan's buffers):
an H200 ran the DGELU GEMM 4x slower without one (docs/gpu.md).

Values: the fused forward applies GELU to the fp32 sum, the unfused one to fch rounded to floatX:
in bf16 and fp16 the two differ by floatX's rounding (in fp32 only by cuBLASLt's own GELU in the
last bits). Whether the DGELU GEMM's algorithm sums split-K parts in floatX (an in-place
reduction, which would round more than once) is for a GPU to say: the next lease logs it.
Recompute (-r >= 1) rebuilds fch_gelu from the kept fch with gelu_forward, as llm.c does, so
under -ge the recompute levels agree within that rounding, not bit for bit. The CPU build has
no cuBLASLt: it runs the two kernels' host twins whatever -ge says (and -h says so).

Applied in train_gpt.cu: block_forward (matmul_gelu_forward), block_backward_input
(matmul_gelu_backward_input)
*/
#pragma once
// defines: matmul_gelu_forward, matmul_gelu_backward_input, matmul_gelu_forward_ledger,
//          matmul_gelu_backward_input_ledger
#include "gelu.cuh"    // defines: gelu_forward, gelu_backward, gelu_forward_ledger, gelu_backward_ledger
#include "matmul.cuh"  // defines: matmul_forward, matmul_backward_input, matmul_lt, their ledgers

// out_gelu = gelu(pre_gelu), pre_gelu = inp W^T + bias: inp (N,C), weight (OC,C), both outputs (N,OC).
// Fused: one cuBLASLt GEMM (where it has an algorithm for these alignments), else the GEMM and gelu_forward
inline void matmul_gelu_forward(floatX* out_gelu, floatX* pre_gelu, const floatX* inp, const floatX* weight,
                                const floatX* bias, int N, int C, int OC, bool fused) {
#ifdef __CUDACC__
    // the aux matrix's leading dimension (OC) a multiple of 8: cuBLASLt's rule for GELU's aux
    if (fused && bias && aligned16(bias) && aligned16(pre_gelu) && OC % 8 == 0 && (size_t)N * C * OC > 0 &&
        matmul_lt(out_gelu, weight, true, inp, OC, N, C, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, bias, pre_gelu))
        return;
#endif
    (void)fused;
    matmul_forward(pre_gelu, inp, weight, bias, N, C, OC);
    gelu_forward(out_gelu, pre_gelu, (size_t)N * OC);
}
// dinp = (dout weight) * gelu'(pre_gelu): the input gradient of a linear layer whose input was
// gelu(pre_gelu), taken on through the GELU. dinp and pre_gelu (N,C), dout (N,OC), weight (OC,C).
// Fused: one cuBLASLt GEMM (column-major dinp^T = W dout^T), else matmul_backward_input and gelu_backward
inline void matmul_gelu_backward_input(floatX* dinp, const floatX* dout, const floatX* weight, const floatX* pre_gelu,
                                       int N, int C, int OC, bool fused) {
#ifdef __CUDACC__
    if (fused && aligned16(pre_gelu) && C % 8 == 0 && (size_t)N * C * OC > 0 &&
        matmul_lt(dinp, weight, false, dout, C, N, OC, CUBLASLT_EPILOGUE_DGELU, nullptr, pre_gelu))
        return;
#endif
    (void)fused;
    matmul_backward_input(dinp, dout, weight, N, C, OC);
    gelu_backward(dinp, pre_gelu, dinp, (size_t)N * C);
}

// the kernel ledger (ledger.cuh): fused, one cuBLASLt GEMM writing two outputs / reading a third
// input, taken to apply when C is a whole number of packs (matmul_forward_ledger's rule for the bias)
// and the aux matrix's leading dimension a multiple of 8, as the launchers above require
inline void matmul_gelu_forward_ledger(Ledger* l, size_t N, size_t C, size_t OC, bool fused) {
    if (!fused || !packs_divide(C) || OC % 8) {
        matmul_forward_ledger(l, N, C, OC, true);
        gelu_forward_ledger(l, N * OC);
        return;
    }
    double X = sizeof(floatX);
    ledger_add(l, {"cublasLtMatmul", 2.0 * N * OC * C, (double)(N * C + OC * C + OC) * X, 2.0 * N * OC * X, 0,
                   !FLOATX_IS_FP32});
}
inline void matmul_gelu_backward_input_ledger(Ledger* l, size_t N, size_t C, size_t OC, bool fused) {
    if (!fused || !packs_divide(C) || C % 8) {
        matmul_backward_input_ledger(l, N, C, OC);
        gelu_backward_ledger(l, N * C);
        return;
    }
    double X = sizeof(floatX);
    ledger_add(l, {"cublasLtMatmul", 2.0 * N * C * OC, (double)(N * OC + OC * C + N * C) * X, (double)N * C * X, 0,
                   !FLOATX_IS_FP32});
}

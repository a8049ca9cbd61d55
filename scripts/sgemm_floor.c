/*
scripts/sgemm_floor.c: the time a GPT-2 training step's matrix products take in
OpenBLAS sgemm alone, at the step's own shapes: the floor for a CPU step.

A step over N = B*T tokens runs, for each linear layer (in -> out) of every block
(qkv C->3C, attention projection C->C, fc C->4C, fc projection 4C->C) and the LM head
(C->Vp): the forward out = inp W^T, and the backward dinp = dout W and dW += dout^T inp.
That is 3 * 2 * N * in * out FLOPs per layer. Attention's own products (q k^T and
att v, 4 B T^2 C per block forward) are small at T=64 and counted too.

    cc -O2 scripts/sgemm_floor.c -lopenblas -o sgemm_floor
    ./sgemm_floor L C Vp B T [REPEATS]      -> prints GFLOP per step, seconds, GFLOP/s
*/
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// row-major C(M,N) = op(A) op(B) (+ C when accumulate), returns FLOPs
static double gemm(int trans_a, int trans_b, int M, int N, int K, const float* A, const float* B, float* C, int accumulate) {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N, K, 1.0f,
                A, trans_a ? M : K, B, trans_b ? K : N, accumulate ? 1.0f : 0.0f, C, N);
    return 2.0 * M * N * K;
}

// forward and backward of one linear layer in -> out over N rows
static double linear_step(int N, int in, int out, float* x, float* w, float* y, float* dx, float* dw) {
    double flops = gemm(0, 1, N, out, in, x, w, y, 0);  // y = x W^T
    flops += gemm(0, 0, N, in, out, y, w, dx, 0);       // dx = dy W
    flops += gemm(1, 0, out, in, N, y, x, dw, 1);       // dW += dy^T x
    return flops;
}

int main(int argc, char** argv) {
    if (argc < 6) { fprintf(stderr, "usage: %s L C Vp B T [REPEATS]\n", argv[0]); return 1; }
    int L = atoi(argv[1]), C = atoi(argv[2]), Vp = atoi(argv[3]), B = atoi(argv[4]), T = atoi(argv[5]);
    int repeats = argc > 6 ? atoi(argv[6]) : 5;
    int N = B * T;
    size_t widest = (size_t)(Vp > 4 * C ? Vp : 4 * C);
    float* x = calloc((size_t)N * widest, sizeof(float));
    float* y = calloc((size_t)N * widest, sizeof(float));
    float* dx = calloc((size_t)N * widest, sizeof(float));
    float* w = calloc(widest * C, sizeof(float));
    float* dw = calloc(widest * C, sizeof(float));
    float* att = calloc((size_t)T * T, sizeof(float));
    for (size_t i = 0; i < (size_t)N * widest; i++) x[i] = (float)(i % 7) * 0.01f;
    for (size_t i = 0; i < widest * C; i++) w[i] = (float)(i % 5) * 0.01f;
    double best = 1e30, flops = 0.0;
    for (int r = 0; r <= repeats; r++) {  // the first round warms up and is not counted
        double start = now();
        flops = 0.0;
        for (int l = 0; l < L; l++) {
            flops += linear_step(N, C, 3 * C, x, w, y, dx, dw);
            flops += linear_step(N, C, C, x, w, y, dx, dw);
            flops += linear_step(N, C, 4 * C, x, w, y, dx, dw);
            flops += linear_step(N, 4 * C, C, x, w, y, dx, dw);
            for (int bh = 0; bh < B * C / 64; bh++) {  // per head (hs 64): q k^T, att v, and their backward
                flops += gemm(0, 1, T, T, 64, x, w, att, 0) + gemm(0, 0, T, 64, T, att, w, y, 0);
                flops += 2 * gemm(0, 0, T, 64, T, att, w, y, 0) + 2 * gemm(0, 1, T, T, 64, x, w, att, 0);
            }
        }
        flops += linear_step(N, C, Vp, x, w, y, dx, dw);
        double seconds = now() - start;
        if (r > 0 && seconds < best) best = seconds;
    }
    printf("%.1f GFLOP per step, %.3f s in sgemm, %.1f GFLOP/s\n", flops * 1e-9, best, flops * 1e-9 / best);
    return 0;
}

/*
tests/test_cp.cpp: ring attention (cp.h) under mpirun, every rank one rank of the ring (c = world),
against one rank's causal attention (kernels/attention.cuh's host twin, which tests/test_kernels.cpp
and the PyTorch comparisons prove) on the same whole sequences:
  - each rank's zig-zag tokens (chunks r and 2c-1-r of 2c) taken out of B whole sequences; the ring's
    output and its q, k, v gradients equal the whole attention's rows at those positions (causal);
  - cp_batch_index maps every local token of every rank to a distinct token of the micro-batch;
  - one rank alone (a ring of one) through the same code, at several chunk sizes: the same result.
Prints "N passed, M failed" on rank 0; exit 1 on any failure.
*/
#include "../cp.h"
#include "../kernels/attention.cuh"
#include "rank_checks.h"

// rank r's local rows of (B, T, width) whole rows: its T/c tokens of each sequence, in cp.h's order
static std::vector<float> local_rows(const std::vector<float>& whole, int B, int T, int width, int c, int r) {
    std::vector<float> mine((size_t)B * (T / c) * width);
    for (size_t row = 0; row < (size_t)B * (T / c); row++)
        for (int i = 0; i < width; i++) mine[row * width + i] = whole[cp_batch_index(c, r, B, T, row) * width + i];
    return mine;
}
static double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() ? max_abs_diff(a.data(), b.data(), a.size()) : INFINITY;
}

// the ring of `ring` (c ranks) on B sequences of T tokens against the whole attention
static void ring_equals_whole(Comm* ring, int B, int T, int C, int NH) {
    int c = ring->size, r = ring->rank, T_local = T / c;
    std::vector<float> qkv = random_normal((size_t)B * T * 3 * C, 7, 1.0f), dout = random_normal((size_t)B * T * C, 8, 1.0f);
    std::vector<float> out((size_t)B * T * C), whole_lse((size_t)B * T * NH), dqkv((size_t)B * T * 3 * C);
    attention_forward_host(out.data(), whole_lse.data(), qkv.data(), B, T, C, NH);
    attention_backward_host(dqkv.data(), dout.data(), out.data(), whole_lse.data(), qkv.data(), B, T, C, NH);
    // this rank's part, round the ring
    std::vector<float> my_qkv = local_rows(qkv, B, T, 3 * C, c, r), my_dout = local_rows(dout, B, T, C, c, r);
    size_t rows = (size_t)B * T_local;
    std::vector<float> my_out(rows * C), lse(rows * NH), my_dqkv(rows * 3 * C);
    std::vector<float> blocks(2 * rows * 2 * C, NAN), dkv(2 * rows * 2 * C, NAN), acc(rows * C, NAN), dq(rows * C, NAN), D(rows * NH, NAN);
    AttentionScratch a = {acc.data(), dq.data(), dkv.data(), D.data()};  // NaN: what is read before it is written shows
    RingBuffers s = {{blocks.data(), blocks.data() + rows * 2 * C}, dkv.data() + rows * 2 * C};
    ring_attention_forward(ring, my_out.data(), lse.data(), my_qkv.data(), a, s, B, T_local, C, NH);
    ring_attention_backward(ring, my_dqkv.data(), my_dout.data(), my_out.data(), lse.data(), my_qkv.data(), a, s, B, T_local, C, NH);
    const double tol = 2e-5;  // fp32: the same sums, merged block by block in another order
    double out_diff = max_abs_diff(my_out, local_rows(out, B, T, C, c, r));
    double lse_diff = max_abs_diff(lse, local_rows(whole_lse, B, T, NH, c, r));
    EXPECT(lse_diff < tol);
    double grad_diff = max_abs_diff(my_dqkv, local_rows(dqkv, B, T, 3 * C, c, r));
    EXPECT(out_diff < tol);
    EXPECT(grad_diff < tol);
    if (r == 0) printf("ring of %d, B %d T %d C %d NH %d: output max |diff| %.2e, dq dk dv %.2e\n", c, B, T, C, NH, out_diff, grad_diff);
}

// every token of the micro-batch held by exactly one (rank, local token); each half's rows are
// consecutive positions of one sequence, chunk by chunk
static void tokens_cover_once(int c, int B, int T) {
    std::vector<int> seen((size_t)B * T, 0);
    for (int r = 0; r < c; r++)
        for (size_t i = 0; i < (size_t)B * T / c; i++) {
            seen[cp_batch_index(c, r, B, T, i)]++;
            if (i % (T / (2 * c)) != 0) EXPECT(cp_batch_index(c, r, B, T, i) == cp_batch_index(c, r, B, T, i - 1) + 1);
        }
    for (int n : seen) EXPECT(n == 1);
}

int main(int argc, char** argv) {
    int world, local_rank;
    comm_start(&argc, &argv, &world, &rank, &local_rank);
    Collectives comm;
    comm_init(&comm, world, rank, local_rank, 1, 1, false);  // the DP group is every rank: the ring
    for (int c = 1; c <= 8; c++) tokens_cover_once(c, 3, 2 * c * 3);
    ring_equals_whole(&comm.replicas, 2, 4 * world, 8, 2);
    ring_equals_whole(&comm.replicas, 1, 2 * world, 12, 3);  // one token a chunk
    if (rank == 0) {  // a ring of one: the zig-zag's two chunks, nothing sent
        Collectives alone = comm_single_process();
        for (int T : {2, 8, 14}) ring_equals_whole(&alone.replicas, 2, T, 8, 2);
    }
    int code = rank_checks_total("cp", world);
    comm_finalize(&comm);
    return code;
}

/*
tests/test_tp.cpp: tensor parallelism's pieces (tp.h) under mpirun, every rank one TP rank
(tp = world), against the unsharded computation on one rank's worth of data:
  - tp_for_each_run: over all ranks, every element of a cut matrix is covered exactly once;
  - vocabulary-parallel cross-entropy (three all-reduces, no gathered logits) equals the
    fused op on the gathered logits: every row's loss, and each rank's gradient columns.
    Padded columns (>= V) fall in the last rank's range and targets fall in every rank's;
  - an MLP pair cut as Megatron cuts it: fc column-parallel (its bias cut with it), fcproj
    row-parallel with g after it and its bias added once (tp_bias_before_g, tp_bias_after_g, as
    block_forward calls them); forward output, input gradient
    (through f) and every weight and bias gradient shard equal the unsharded layer's;
  - the same pair under sequence parallelism (-sp): each rank holds N/tp of the tokens, f
    all-gathers them and g reduce-scatters; each rank's output and input-gradient rows equal the
    unsharded layer's rows of its tokens, the weight gradients as without -sp;
  - sequence parallelism's two collectives against TP's all-reduce on the same data: the
    reduce-scatter is this rank's rows of the all-reduce, the all-gather every rank's rows in order.
Prints "N passed, M failed" on rank 0; exit 1 on any failure.
*/
#include "../tp.h"
#include "../kernels/matmul.cuh"
#include "../kernels/gelu.cuh"
#include "rank_checks.h"
// rank's (rows', cols') part of a (rows, cols) matrix, cut as `p` says
static std::vector<float> shard(const std::vector<float>& whole, TensorPartition p, int rows, int cols, int tp, int r) {
    int lr = rows, lc = cols;
    tp_local_shape(p, tp, &lr, &lc);
    std::vector<float> part((size_t)lr * lc);
    tp_for_each_run(p, rows, cols, tp, r, [&](size_t local, size_t at, size_t count) {
        for (size_t i = 0; i < count; i++) part[local + i] = whole[at + i];
    });
    return part;
}

static void runs_cover_once(int tp) {
    TensorPartition parts[] = {{REPLICATED, 1}, {SPLIT_ROWS, 1}, {SPLIT_ROWS, 3}, {SPLIT_COLUMNS, 1}};
    int rows = 12 * tp, cols = 4 * tp;
    for (TensorPartition p : parts) {
        std::vector<int> covered((size_t)rows * cols, 0);
        size_t local_total = 0;
        for (int r = 0; r < tp; r++) {
            int lr = rows, lc = cols;
            tp_local_shape(p, tp, &lr, &lc);
            local_total += (size_t)lr * lc;
            tp_for_each_run(p, rows, cols, tp, r, [&](size_t local, size_t at, size_t count) {
                EXPECT(local + count <= (size_t)lr * lc);
                for (size_t i = 0; i < count; i++) covered[at + i]++;
            });
        }
        int want = p.split == REPLICATED ? tp : 1;
        for (int c : covered) EXPECT(c == want);
        EXPECT(local_total == (size_t)want * rows * cols);
    }
}

static void vocab_parallel_crossentropy(Collectives* comm, int tp, int r) {
    const int N = 7, Vp = 16 * tp, V = Vp - 5;  // 5 padded columns, all in the last rank's range
    std::vector<float> logits = random_normal((size_t)N * Vp, 11, 3.0f);
    std::vector<int> targets(N);
    for (int i = 0; i < N; i++) targets[i] = (i * 37 + 3) % V;  // spread over every rank's columns
    // the reference: the fused op on the whole logits
    std::vector<float> ref = logits, ref_losses(N);
    const float dloss = 1.0f / N;
    crossentropy_forward_backward_host(ref.data(), ref_losses.data(), targets.data(), N, V, Vp, dloss);
    // this rank's columns
    VocabRange vocab = tp_vocab_range(Vp, tp, r);
    std::vector<float> mine = shard(logits, TensorPartition{SPLIT_COLUMNS, 1}, N, Vp, tp, r), losses(N);
    std::vector<float> mx(N), sum(N), target(N);
    tp_crossentropy(&comm->tp, mine.data(), losses.data(), targets.data(), LossStatistics{mx.data(), sum.data(), target.data()},
                    N, V, vocab, dloss);
    for (int i = 0; i < N; i++) EXPECT(fabs(losses[i] - ref_losses[i]) < 1e-5 * fabs(ref_losses[i]));
    std::vector<float> ref_mine = shard(ref, TensorPartition{SPLIT_COLUMNS, 1}, N, Vp, tp, r);
    EXPECT(max_abs_diff(mine.data(), ref_mine.data(), mine.size()) < 1e-7);
    if (r == tp - 1) for (int i = 0; i < N; i++) for (int j = V - vocab.begin; j < vocab.rows; j++) EXPECT(mine[(size_t)i * vocab.rows + j] == 0.0f);
}

// rows [r N/tp, (r+1) N/tp) of an (N, C) matrix: the tokens TP rank r holds under -sp
static std::vector<float> held_rows(const std::vector<float>& whole, int N, int C, int tp, int r) {
    return std::vector<float>(whole.begin() + (size_t)r * (N / tp) * C, whole.begin() + (size_t)(r + 1) * (N / tp) * C);
}

static void megatron_mlp(Collectives* comm, int tp, int r, bool sequence_parallel) {
    const int N = 3 * tp, C = 4 * tp, H = 4 * C;  // fc: (H, C), fcproj: (C, H)
    const int parts = sequence_parallel ? tp : 1, part = sequence_parallel ? r : 0;  // this rank's tokens outside the pair:
    const int Nh = N / parts;                                                          // all, or its 1/tp
    auto x = random_normal((size_t)N * C, 1, 1.0f), dy = random_normal((size_t)N * C, 2, 1.0f);
    auto fcw = random_normal((size_t)H * C, 3, 0.3f), fcb = random_normal(H, 4, 0.1f);
    auto projw = random_normal((size_t)C * H, 5, 0.3f), projb = random_normal(C, 6, 0.1f);
    // unsharded: y = gelu(x fcw^T + fcb) projw^T + projb, and its backward
    std::vector<float> h(N * H), a(N * H), y(N * C), da(N * H), dh(N * H), dx(N * C);
    std::vector<float> dfcw(H * C, 0.0f), dfcb(H, 0.0f), dprojw(C * H, 0.0f), dprojb(C, 0.0f);
    matmul_forward(h.data(), x.data(), fcw.data(), fcb.data(), N, C, H);
    gelu_forward(a.data(), h.data(), h.size());
    matmul_forward(y.data(), a.data(), projw.data(), projb.data(), N, H, C);
    matmul_backward(da.data(), dprojw.data(), dprojb.data(), dy.data(), a.data(), projw.data(), N, H, C, nullptr);
    gelu_backward(dh.data(), h.data(), da.data(), h.size());
    matmul_backward(dx.data(), dfcw.data(), dfcb.data(), dh.data(), x.data(), fcw.data(), N, C, H, nullptr);
    // this rank's shards, the code path of block_forward / block_backward
    const int Hr = H / tp;
    auto fcw_r = shard(fcw, {SPLIT_ROWS, 1}, H, C, tp, r), fcb_r = shard(fcb, {SPLIT_ROWS, 1}, H, 1, tp, r);
    auto projw_r = shard(projw, {SPLIT_COLUMNS, 1}, C, H, tp, r);
    std::vector<float> h_r(N * Hr), a_r(N * Hr), y_whole(N * C), y_r(Nh * C), da_r(N * Hr), dh_r(N * Hr);
    std::vector<float> x_whole(N * C), dy_whole(N * C), dx_whole(N * C), dx_r(Nh * C);
    std::vector<float> dfcw_r(Hr * C, 0.0f), dfcb_r(Hr, 0.0f), dprojw_r(C * Hr, 0.0f), dprojb_r(C, 0.0f);
    std::vector<float> x_r = held_rows(x, N, C, parts, part), dy_r = held_rows(dy, N, C, parts, part);
    // f and g as block_forward calls them: -sp's gathered tokens into x_whole, g's sum into y_r
    const TensorParallel group = {&comm->tp, sequence_parallel, (size_t)Nh * C, x_whole.data(), y_r.data()};
    float* x_all = tp_f_forward(group, x_r.data());  // x_r itself, or -sp's all-gather
    matmul_forward(h_r.data(), x_all, fcw_r.data(), fcb_r.data(), N, C, Hr);
    gelu_forward(a_r.data(), h_r.data(), h_r.size());
    // the bias as block_forward adds it: through tp.h's two calls, which must add it once, to g's sum
    // (added by every rank before g, the sum would hold it tp times)
    matmul_forward(y_whole.data(), a_r.data(), projw_r.data(), tp_bias_before_g(group, projb.data()), N, Hr, C);
    float* y_held = tp_g_forward(group, y_whole.data());  // y_whole summed, or -sp's y_r
    tp_bias_after_g(group, y_held, projb.data(), C);
    tp_g_backward(group, dy_r.data(), dy_whole.data());
    matmul_backward(da_r.data(), dprojw_r.data(), dprojb_r.data(), dy_whole.data(), a_r.data(), projw_r.data(), N, Hr, C, nullptr);
    gelu_backward(dh_r.data(), h_r.data(), da_r.data(), h_r.size());
    matmul_backward(dx_whole.data(), dfcw_r.data(), dfcb_r.data(), dh_r.data(), x_all, fcw_r.data(), N, C, Hr, nullptr);
    float* dx_held = tp_f_backward(group, dx_whole.data(), dx_r.data());  // dx_whole summed, or dx_r
    const double tol = 1e-5;  // fp32: the sharded sums add the same products in another grouping
    std::vector<float> want_y = held_rows(y, N, C, parts, part), want_dx = held_rows(dx, N, C, parts, part);
    EXPECT(max_abs_diff(y_held, want_y.data(), want_y.size()) < tol);
    EXPECT(max_abs_diff(dx_held, want_dx.data(), want_dx.size()) < tol);
    auto want_dfcw = shard(dfcw, {SPLIT_ROWS, 1}, H, C, tp, r), want_dfcb = shard(dfcb, {SPLIT_ROWS, 1}, H, 1, tp, r);
    auto want_dprojw = shard(dprojw, {SPLIT_COLUMNS, 1}, C, H, tp, r);
    EXPECT(max_abs_diff(dfcw_r.data(), want_dfcw.data(), want_dfcw.size()) < tol);
    EXPECT(max_abs_diff(dfcb_r.data(), want_dfcb.data(), want_dfcb.size()) < tol);
    EXPECT(max_abs_diff(dprojw_r.data(), want_dprojw.data(), want_dprojw.size()) < tol);
    EXPECT(dprojb_r == dprojb);  // replicated: each rank computes the whole bias gradient itself, exactly
}

// -sp's reduce-scatter and all-gather against the all-reduce that TP without -sp does
static void sequence_parallel_collectives(Collectives* comm, int tp, int r) {
    const int N = 2 * tp, C = 3;
    std::vector<float> mine = random_normal((size_t)N * C, 100 + r, 1.0f), summed = mine;  // this rank's partial sums
    tp_g_forward(TensorParallel{&comm->tp, false, summed.size(), nullptr, nullptr}, summed.data());  // all-reduce
    std::vector<float> scattered((size_t)N / tp * C), gathered((size_t)N * C);
    const TensorParallel sp = {&comm->tp, true, scattered.size(), gathered.data(), scattered.data()};
    tp_g_forward(sp, mine.data());
    std::vector<float> want = held_rows(summed, N, C, tp, r);
    EXPECT(max_abs_diff(scattered.data(), want.data(), want.size()) < 1e-6);  // MPI may add in another order
    tp_f_forward(sp, scattered.data());
    EXPECT(max_abs_diff(gathered.data(), summed.data(), summed.size()) < 1e-6);
    std::vector<float> back = held_rows(gathered, N, C, tp, r);  // this rank's rows come back as they left
    EXPECT(back == scattered);
}

int main(int argc, char** argv) {
    int world, local_rank;
    comm_start(&argc, &argv, &world, &rank, &local_rank);
    Collectives comm;
    comm_init(&comm, world, rank, local_rank, world, 1, false);  // every rank one TP rank
    runs_cover_once(world);
    vocab_parallel_crossentropy(&comm, world, comm.grid.tp_rank);
    megatron_mlp(&comm, world, comm.grid.tp_rank, false);
    megatron_mlp(&comm, world, comm.grid.tp_rank, true);
    sequence_parallel_collectives(&comm, world, comm.grid.tp_rank);
    int code = rank_checks_total("tp", world);
    comm_finalize(&comm);
    return code;
}

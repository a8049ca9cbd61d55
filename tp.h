/*
tp.h: Megatron tensor parallelism: each block's matrices cut across tp ranks.

A transformer block is two matrix pairs, each "column-parallel then row-parallel":
    attention  qkvw (3C, C)  then  attprojw (C, C)
    MLP        fcw  (4C, C)  then  fcprojw  (C, 4C)
Weights are (out, in), y = x W^T + b. Cut the first matrix of a pair by rows (its
output features) and the second by columns (its input features): each rank then
runs its share of the pair start to end and only the pair's output needs a sum.

    qkvw (3C, C), by rows: the heads          attprojw (C, C), by columns
    +----------------+ q heads of rank 0      +-------+-------+
    +----------------+ q heads of rank 1      |rank 0 |rank 1 |  (C, C/tp) each:
    +----------------+ k heads of rank 0      |       |       |  the inputs that
    +----------------+ k heads of rank 1      |       |       |  rank's heads made
    +----------------+ v heads of rank 0      +-------+-------+
    +----------------+ v heads of rank 1
    rank r: (3C/tp, C) = its rows of q, k and v, so attention runs on NH/tp whole heads

    fcw (4C, C), by rows: hidden features     fcprojw (C, 4C), by columns
    +----------------+                        +-------+-------+
    |  rank 0's 4C/tp|                        |rank 0 |rank 1 |  (C, 4C/tp) each:
    +----------------+                        |       |       |  the hidden features
    |  rank 1's 4C/tp|                        |       |       |  that rank computed
    +----------------+                        +-------+-------+
    rank r: (4C/tp, C); GELU is elementwise, so it runs on the rank's features alone

The MLP as block matrices (math convention, y = x A: A = fcw^T, B = fcprojw^T), two ranks:
    A = [A_0  A_1]   split by columns: x A = [x A_0   x A_1]       each rank one block
    B = [B_0]        split by rows:    gelu(x A) B = [h_0  h_1] [B_0]  = h_0 B_0 + h_1 B_1
        [B_1]                                                   [B_1]
with h_r = gelu(x A_r): rank r computes h_r B_r, a full (B,T,C) partial output, and g
sums the partials. Attention is the same with A = qkvw^T cut by heads, B = attprojw^T.

    qkvb, fcb: cut with their rows            attprojb, fcprojb: whole, added once after the sum
    ln1w/b, ln2w/b, lnfw/b, wpe: whole on every rank (replicated)
    wte (Vp, C), by rows: the vocabulary, Vp/tp rows per rank (vocab-parallel, below)

Two operators move the data (Megatron's f and g), each a forward/backward pair, and
they are each other's mirror (picotron: CopyToModelParallelRegion and
ReduceFromModelParallelRegion):
                                    forward            backward
    f  before a column-parallel     identity           all-reduce the input's gradient
       matrix (qkv, fc, LM head)                       (each rank's rows gave a part)
    g  after a row-parallel         all-reduce the     identity
       matrix (attproj, fcproj)     output (each rank's columns gave a part)
so a block costs 2 all-reduces forward (tp_g_forward after attproj and fcproj) and 2
backward (tp_f_backward before qkv and fc), each of B*T*C floatX. The identity halves
are called too, so the forward and backward read as mirrors. Everything between f and
g is local: attention heads are independent, GELU is elementwise.

Replicated tensors need no gradient reduction over TP: the residual stream, the
LayerNorms and the row-parallel biases see the same inputs and output gradients on
every rank (f and g make them so), so every rank computes the same gradient and
applies the same update. The gradient norm counts them once (zero.h).

Vocabulary-parallel embedding and loss: rank r holds wte rows [r Vp/tp, (r+1) Vp/tp).
    embedding  each rank looks up the tokens in its rows (zero elsewhere), rank 0 adds
               wpe, then g: one all-reduce of (B,T,C)
    LM head    logits = lnf @ wte_r^T: the rank's Vp/tp columns, never gathered; the
               head is column-parallel, so f's backward all-reduces d(lnf)
    loss       tp_crossentropy: per row, all-reduce the max (over columns < V), then
               the sum of exponentials, then the target's logit (held by one rank):
               3 all-reduces of B*T floats, in place of gathering (B,T,Vp) logits

Per-rank memory, against one rank holding the whole model (Psi parameters):
    parameters, gradients, optimizer state: (Psi - R)/tp + R, R the replicated elements
    (wpe, LayerNorms, row-parallel biases: small); activations of q, k, v, attention,
    fc and GELU: 1/tp; logits: 1/tp; the residual stream and LayerNorm outputs: whole.
Bytes one rank sends per micro-step (ring all-reduce, 2 S (tp-1)/tp for S bytes):
    (4 L + 2) all-reduces of B*T*C*X (+ 2 L more when -r 3 reruns each block's forward)
    + 3 all-reduces of B*T*4 (the loss), and per step one of the squared norm.
Read the four f and g functions first, then tp_crossentropy.
Applied in train_gpt.cu: block_forward, block_backward (f and g around each pair),
embed_forward (g), head_forward/head_backward (f), head_loss (tp_crossentropy);
parameter_partition (how each of GPT-2's tensors is cut) and model_file.h: reorder_part.
*/
#pragma once
// defines: tp_f_forward, tp_f_backward, tp_g_forward, tp_g_backward, TensorSplit, TensorPartition, tp_local_shape, tp_for_each_run,
//          tp_vocab_range, LossStatistics, tp_crossentropy, tp_all_reduce_bytes_per_micro_step
#include <algorithm>                 // defines: std::min, std::max
#include "comm.h"                    // defines: Comm, comm_all_reduce_sum, comm_all_reduce_max
#include "kernels/encoder.cuh"       // defines: VocabRange
#include "kernels/crossentropy.cuh"  // defines: crossentropy_row_max, crossentropy_row_sumexp, ...

// ---------------------------------------------------------------- Megatron's f and g

// f, before a column-parallel matrix. Forward: the identity, every rank already holds the
// whole input. Backward: the input's gradient, summed over the TP group `tp`, since each
// rank's rows of the matrix gave only their part of it.
inline void tp_f_forward(Comm* tp, const floatX* input, size_t n) { (void)tp, (void)input, (void)n; }
inline void tp_f_backward(Comm* tp, floatX* dinput, size_t n) { comm_all_reduce_sum(tp, dinput, n); }

// g, after a row-parallel matrix. Forward: the output, summed over the TP group, since each
// rank's columns gave a partial sum. Backward: the identity, every rank needs the whole
// output gradient, and has it.
inline void tp_g_forward(Comm* tp, floatX* output, size_t n) { comm_all_reduce_sum(tp, output, n); }
inline void tp_g_backward(Comm* tp, const floatX* doutput, size_t n) { (void)tp, (void)doutput, (void)n; }

// ---------------------------------------------------------------- how a tensor is cut

enum TensorSplit { REPLICATED, SPLIT_ROWS, SPLIT_COLUMNS };
// blocks: SPLIT_ROWS cuts each of `blocks` row blocks apart (qkvw: q, k and v, 3 blocks)
struct TensorPartition { TensorSplit split; int blocks; };

// the (rows, cols) one TP rank holds of a (rows, cols) matrix
inline void tp_local_shape(TensorPartition p, int tp, int* rows, int* cols) {
    if (p.split == SPLIT_ROWS) *rows /= tp;
    if (p.split == SPLIT_COLUMNS) *cols /= tp;
}

// TP rank `rank`'s part of one (rows, cols) row-major matrix as contiguous runs:
// visit(local_offset, whole_offset, count) copies count elements between the rank's
// dense (local_rows, local_cols) matrix and the whole one. A row-parallel weight is a
// column slice: one run per row (strided in the file).
template <typename Visit>
inline void tp_for_each_run(TensorPartition p, int rows, int cols, int tp, int rank, Visit visit) {
    if (p.split == REPLICATED) { visit((size_t)0, (size_t)0, (size_t)rows * cols); return; }
    if (p.split == SPLIT_ROWS) {
        int block_rows = rows / p.blocks, mine = block_rows / tp;
        for (int b = 0; b < p.blocks; b++)
            visit((size_t)b * mine * cols, ((size_t)b * block_rows + (size_t)rank * mine) * cols, (size_t)mine * cols);
        return;
    }
    int mine = cols / tp;  // SPLIT_COLUMNS
    for (int r = 0; r < rows; r++) visit((size_t)r * mine, (size_t)r * cols + (size_t)rank * mine, (size_t)mine);
}

// the vocabulary rows of wte (and logit columns) TP rank `rank` holds
inline VocabRange tp_vocab_range(int padded_vocab, int tp, int rank) {
    return VocabRange{rank * (padded_vocab / tp), padded_vocab / tp};
}

// ---------------------------------------------------------------- vocabulary-parallel cross-entropy

// per-row statistics, fp32 device buffers of N each
struct LossStatistics { float *max, *sum, *target_logit; };

// the loss of each of N rows whose logits are split by columns over the TP group, without
// gathering them: logits (N, vocab.rows) are this rank's columns [vocab.begin, ...), and
// become their gradient when dloss != 0 (kernels/crossentropy.cuh). V: the real vocabulary;
// columns >= V are padding. Every TP rank ends with the same losses.
inline void tp_crossentropy(Comm* tp, floatX* logits, float* losses, const int* targets, LossStatistics stats,
                            int N, int V, VocabRange vocab, float dloss) {
    int valid = std::min(std::max(V - vocab.begin, 0), vocab.rows);  // this rank's columns < V
    crossentropy_row_max(stats.max, logits, N, vocab.rows, valid);
    comm_all_reduce_max(tp, stats.max, N);
    crossentropy_row_sumexp(stats.sum, logits, stats.max, N, vocab.rows, valid);
    comm_all_reduce_sum(tp, stats.sum, N);
    crossentropy_target_logit(stats.target_logit, logits, targets, N, vocab.rows, vocab.begin);
    comm_all_reduce_sum(tp, stats.target_logit, N);  // one rank holds it, the others add 0
    crossentropy_finish(logits, losses, targets, stats.max, stats.sum, stats.target_logit, N, vocab.rows, vocab.begin,
                        valid, dloss);
}

// ---------------------------------------------------------------- cost (the formulas above)

// bytes one rank sends in all-reduces over its TP group in one micro-step's forward and
// backward of N tokens through L layers; block_forwards = 2 when -r 3 reruns every block (3 when
// ZB-H1's deferred W reruns it again).
// The embedding's g and the loss's three are on the first and last pipeline stage.
inline unsigned long long tp_all_reduce_bytes_per_micro_step(int L, size_t N, int C, int tp, int block_forwards,
                                                              bool first_stage, bool last_stage) {
    unsigned long long activation = 2 * ring_bytes(N * C * sizeof(floatX), tp);
    unsigned long long statistic = 2 * ring_bytes(N * sizeof(float), tp);
    unsigned long long activations = 2ull * block_forwards * L + 2ull * L + (first_stage ? 1 : 0) + (last_stage ? 1 : 0);
    return activations * activation + (last_stage ? 3 : 0) * statistic;
}

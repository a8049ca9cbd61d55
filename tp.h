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
are called too, so the forward and backward read as mirrors; g's backward copies nothing
when its output is its input (train_gpt.cu: blocks_backward reads fcproj's output gradient
where the residual stream's gradient lies). Everything between f and g is local: attention
heads are independent, GELU is elementwise.

Replicated tensors need no gradient reduction over TP: the residual stream, the
LayerNorms and the row-parallel biases see the same inputs and output gradients on
every rank (f and g make them so), so every rank computes the same gradient and
applies the same update. The gradient norm counts them once (zero.h).

Sequence parallelism (-sp 1; Korthikanti et al. 2022, "Reducing Activation Recomputation in
Large Transformer Models"). Between g and the next f every rank computes the same thing: the
LayerNorms, the residual adds, the bias of a row-parallel matrix. Those work token by token, so
the TP ranks can split the tokens there instead: rank r holds tokens [r N/tp, (r+1) N/tp) of the
micro-batch's N = B*T (flattened, so a rank holds whole sequences when B >= tp, and 1/tp of one
sequence when B = 1, Megatron's case). g's all-reduce becomes a reduce-scatter (each rank keeps
its tokens' sums) and f's identity an all-gather (the matrix needs every token), for tp = 2:

    N = 4 tokens, tp = 2: outside the pair rank 0 holds t0 t1, rank 1 holds t2 t3
      rank 0  x[t0 t1] -> LayerNorm -> f: all-gather -> ln[t0 t1 t2 t3] -> qkv, attention, attproj
      rank 1  x[t2 t3] -> LayerNorm ->                  ln[t0 t1 t2 t3] -> (each rank its heads)
         -> partial[t0 t1 t2 t3] -> g: reduce-scatter -> rank 0: sum[t0 t1] -> + x[t0 t1]
                                                         rank 1: sum[t2 t3] -> + x[t2 t3]
                                    forward                    backward
    f  before a column-parallel     all-gather the tokens      reduce-scatter the input's gradient
    g  after a row-parallel         reduce-scatter the output  all-gather the output's gradient
An all-reduce is a reduce-scatter followed by an all-gather, so f and g move the bytes they moved
before, and every activation outside the pairs (ln1, ln2, the residual stream, the LayerNorm
statistics, the stage's input and the pipeline's messages) is 1/tp of what it was. Costs: the
weight gradients of qkv, fc and the LM head need their whole LayerNorm input, which the backward
gathers again (ln1 and ln2 in every block, lnf on the last stage), and a LayerNorm's weight
and bias gradient, a sum over the tokens, now sums only this rank's: train_gpt.cu sums them over
TP once per step (sum_layernorm_gradients, as Megatron-LM does). The four functions of f and g
choose the collective; without -sp they are the identity and the all-reduce.

Vocabulary-parallel embedding and loss: rank r holds wte rows [r Vp/tp, (r+1) Vp/tp).
    embedding  each rank looks up the tokens in its rows (zero elsewhere), rank 0 adds
               wpe, then g: one all-reduce of (B,T,C)
    LM head    logits = lnf @ wte_r^T: the rank's Vp/tp columns, never gathered; the
               head is column-parallel, so f's backward all-reduces d(lnf)
    loss       tp_crossentropy: per row, all-reduce the max (over columns < V), then
               the sum of exponentials, then the target's logit (held by one rank):
               3 all-reduces of B*T floats, in place of gathering (B,T,Vp) logits; at
               tp = 1 the fused classifier instead (kernels/crossentropy.cuh), no collective

Per-rank memory, against one rank holding the whole model (Psi parameters):
    parameters, gradients, optimizer state: (Psi - R)/tp + R, R the replicated elements
    (wpe, LayerNorms, row-parallel biases: small); activations of q, k, v, attention,
    fc and GELU: 1/tp; logits: 1/tp; the residual stream and LayerNorm outputs: whole,
    and under -sp 1/tp (recompute.h's table).
Bytes one rank sends per micro-step (ring all-reduce, 2 S (tp-1)/tp for S bytes):
    (4 L + 2) all-reduces of B*T*C*X (+ 2 L more when -r 3 reruns each block's forward)
    + 3 all-reduces of B*T*4 (the loss), and per step one of the squared norm.
    -sp: (4 L + 2) reduce-scatters and (6 L + 3) all-gathers of B*T*C*X, S (tp-1)/tp each
    (+ 2 L of each per extra forward at -r 3; a stage without the embedding: one of each fewer,
    without the head: 1 reduce-scatter and 2 all-gathers fewer), the loss's 3 all-reduces,
    and per step an all-reduce of the LayerNorm gradients.
On the critical path, by design: f's and g's collectives run where they are called, and the
next operation reads their result (the qkv GEMM reads f's gathered ln1, the residual add g's
sum), so no compute of the micro-batch is left to hide them behind. Hiding them takes cutting
each GEMM into chunks pipelined with its collective (Megatron-LM's tp_comm_overlap), which this
trainer does not do; -tp belongs inside a node, on NVLink. The data-parallel reduce and ZeRO's
gathers, whose results are needed a layer or a step later, are where overlap pays (zero.h).
Read the four f and g functions first, then tp_crossentropy.
Applied in train_gpt.cu: block_forward, block_backward (f and g around each pair),
embed_forward (g, its N tokens in scratch.proj and the sum into the input), head_forward/head_backward
(f), head_loss (tp_crossentropy), pipeline_stage (-sp: the pipeline's messages are this rank's
tokens); gpt2.h: tensor_parallel (f and g's TensorParallel), parameter_partition (how each of
GPT-2's tensors is cut), tokens_held and sum_layernorm_gradients (-sp); model_file.h: reorder_part.
*/
#pragma once
// defines: TensorParallel, tp_all_tokens, sequence_parallel_buffer_list,
//          tp_f_forward, tp_f_backward, tp_g_forward, tp_g_backward, tp_bias_before_g, tp_bias_after_g, TensorSplit,
//          TensorPartition, tp_local_shape, tp_for_each_run, tp_vocab_range, LossStatistics, tp_crossentropy,
//          TensorParallelTraffic, tp_bytes_per_micro_step
#include <algorithm>                 // defines: std::min, std::max
#include <vector>                    // defines: std::vector
#include "comm.h"  // defines: Comm, comm_all_reduce_sum, comm_all_reduce_max, comm_all_gather, comm_reduce_scatter_sum,
                   //          BufferSpec (base.h)
#include "kernels/encoder.cuh"       // defines: VocabRange
#include "kernels/crossentropy.cuh"  // defines: crossentropy_row_max, crossentropy_row_sumexp, ...
#include "kernels/matmul.cuh"        // defines: bias_forward

// ---------------------------------------------------------------- Megatron's f and g

// The TP group, whether it also splits the tokens between the pairs (-sp), and for the (N, C)
// tensors of a micro-batch: n_held, the elements of one this rank holds (N_held * C: N tokens, or
// N/tp under -sp), and -sp's two buffers (sequence_parallel_buffer_list): all_tokens, where f's
// forward gathers a tensor's N tokens, and summed, where g's forward leaves this rank's tokens of
// the sum. gpt2.h's tensor_parallel makes it; without -sp the buffers are null, never used.
struct TensorParallel {
    Comm* group;
    bool sequence_parallel;
    size_t n_held;
    floatX *all_tokens, *summed;
};

// where a tensor's N tokens go: tp.all_tokens under -sp, where the rank holds N/tp of them in
// `held`; without -sp `held` itself, which holds all N. For the partial sums that f's backward or
// g's forward then sums, and g's backward's gathered gradient
inline floatX* tp_all_tokens(TensorParallel tp, floatX* held) { return tp.sequence_parallel ? tp.all_tokens : held; }
// the two buffers -sp adds, declared for the model's buffer list (gpt2.h): `whole` for a tensor's
// N tokens gathered, `held` for this rank's N/tp tokens of a sum (C channels each); none without -sp
inline std::vector<BufferSpec> sequence_parallel_buffer_list(bool sequence_parallel, floatX** whole, floatX** held,
                                                              size_t N, size_t N_held, size_t C) {
    if (!sequence_parallel) return {};  // f, g and tp_all_tokens give the rank's own buffers; these stay null
    return {{(void**)whole, N * C, sizeof(floatX), MEM_ACTIVATIONS_TRANSIENT},
            {(void**)held, N_held * C, sizeof(floatX), MEM_ACTIVATIONS_TRANSIENT}};
}

// f and g are each other's mirror (picotron's tp_communications.py pairs them likewise): each moves a
// tensor between the tokens this rank holds (n_held elements) and all N tokens. A gather (f's
// forward, g's backward): -sp all-gathers every rank's tokens; without it the rank has them all. A
// sum (f's backward, g's forward) of this rank's part of a sum over the group: -sp reduce-scatters
// it, each rank receiving its tokens' sums; without it an all-reduce in place. Each returns the
// buffer its result is in.

// f, before a column-parallel matrix. Forward: every rank needs the whole input; it has it
// (identity: f returns the input), or under -sp gathers it (into tp.all_tokens, which f returns).
// Backward: the input's gradient summed over the group, since each rank's rows of the matrix gave
// only their part of it (`dpartial` all-reduced in place, or under -sp its tokens' sums in `dheld`).
// Under -sp the forward's result is scratch (tp's buffer), the backward's lands where the caller says.
inline floatX* tp_f_forward(TensorParallel tp, floatX* input) {
    if (!tp.sequence_parallel) return input;
    comm_all_gather(tp.group, input, tp.all_tokens, tp.n_held);
    return tp.all_tokens;
}
inline floatX* tp_f_backward(TensorParallel tp, floatX* dpartial, floatX* dheld) {
    if (!tp.sequence_parallel) { comm_all_reduce_sum(tp.group, dpartial, tp.n_held); return dpartial; }
    comm_reduce_scatter_sum(tp.group, dpartial, dheld, tp.n_held);
    return dheld;
}

// g, after a row-parallel matrix. Forward: the output summed over the group, since each rank's
// columns gave a partial sum: all-reduced in place (g returns `partial`), or under -sp only this
// rank's tokens' sums, reduce-scattered into tp.summed (which g returns). Backward: every rank needs
// the whole output gradient; it has it (identity: a copy into `dwhole` when that is another
// buffer), or under -sp gathers it into `dwhole`.
inline floatX* tp_g_forward(TensorParallel tp, floatX* partial) {
    if (!tp.sequence_parallel) { comm_all_reduce_sum(tp.group, partial, tp.n_held); return partial; }
    comm_reduce_scatter_sum(tp.group, partial, tp.summed, tp.n_held);
    return tp.summed;
}
inline void tp_g_backward(TensorParallel tp, const floatX* doutput, floatX* dwhole) {
    if (tp.sequence_parallel) comm_all_gather(tp.group, doutput, dwhole, tp.n_held);
    else if (dwhole != doutput) device_to_device(dwhole, doutput, tp.n_held * sizeof(floatX));
}

// a row-parallel matrix's bias (attproj, fcproj) is added once, to g's sum. With one rank there is
// no sum: the bias goes to the matrix (the GPU build adds it in cuBLASLt's epilogue, no pass of its
// own: kernels/matmul.cuh) and nothing is left after g. With more, after g, on the tokens held
inline const floatX* tp_bias_before_g(TensorParallel tp, const floatX* bias) {
    return tp.group->size == 1 ? bias : NULL;
}
inline void tp_bias_after_g(TensorParallel tp, floatX* output, const floatX* bias, int C) {
    if (tp.group->size > 1) bias_forward(output, bias, (int)(tp.n_held / C), C);
}

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
    if (tp->size == 1) {  // every column here: the fused classifier, two reads of the logits and one write
        crossentropy_forward_backward(logits, losses, targets, N, V, vocab.rows, dloss);
        return;
    }
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

// bytes one rank sends over its TP group in one micro-step's forward and backward of N tokens
// through L layers, by kind; block_forwards = 2 when -r 3 reruns every block (3 when ZB-H1's
// deferred W reruns it again). The embedding's g is on the first pipeline stage, the head's f
// and the loss's three all-reduces on the last. Without -sp every f and g moves an all-reduce;
// with it each moves an all-gather or a reduce-scatter (half an all-reduce each), and the
// backward gathers each LayerNorm output once more for the weight gradients (2 per block: ln1's, ln2's)
struct TensorParallelTraffic { unsigned long long all_reduce, all_gather, reduce_scatter; };
inline TensorParallelTraffic tp_bytes_per_micro_step(int L, size_t N, int C, int tp, bool sequence_parallel,
                                                     int block_forwards, bool first_stage, bool last_stage) {
    // an all-gather or reduce-scatter of N tokens
    unsigned long long activation = ring_bytes(N * C * sizeof(floatX), tp);
    unsigned long long statistics = (last_stage ? 3 : 0) * 2 * ring_bytes(N * sizeof(float), tp);
    unsigned long long forwards = 2ull * block_forwards * L, first = first_stage ? 1 : 0, last = last_stage ? 1 : 0;
    if (!sequence_parallel)  // f's backward and g's forward: 2 per block forward and 2 per backward
        return TensorParallelTraffic{(forwards + 2ull * L + first + last) * 2 * activation + statistics, 0, 0};
    unsigned long long gathers = forwards + 4ull * L + first + 2 * last;  // f forward, g backward, the gathers again
    unsigned long long scatters = forwards + 2ull * L + first + last;     // g forward, f backward
    return TensorParallelTraffic{statistics, gathers * activation, scatters * activation};
}

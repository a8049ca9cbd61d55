/*
gpt2.h: the part of GPT-2 this rank holds: its configuration and layout (gpt2_config.h), its parameters (the
tensors, their shapes under tensor parallelism, the ZeRO units they are grouped in), its
activations (what a block keeps, the scratch every layer reuses) and their buffers, declared
once for training and for -plan. train_gpt.cu is the model that runs on them; model_file.h
(files, checkpoints) and accounting.h (-plan) read and write them.

    ModelLayout        which layers (pp: a stage's, interleaved: its chunks), which part of each
                       (tp), which tokens (cp: tokens_of_rank, for_each_position_run; -sp:
                       tokens_held)
    parameters         16 tensors (ParameterIndex), in units: 0 the embeddings, 1..L the layers,
                       L+1 the final LayerNorm (gpt2_units); views of a unit's values by name
                       (embedding_parameters, layer_parameters, final_norm_parameters)
    activations        a set per micro-batch in flight (ActivationTensors; activation_set says
                       which), what -r keeps of each layer (recompute.h), ZB-H1's slots of
                       output gradients (waiting_grads), the scratch (ScratchTensors)
    GPT2               all of the above, with ZeRO's shards, the communicators, the staging
                       arena (staging.h), laid out by gpt2_build (its values: gpt2_create, model_file.h)

The gradient's reductions that are the model's to know (each tensor's norm counted once,
sequence parallelism's LayerNorm sums) are here too: gpt2_grad_norm_squared,
sum_layernorm_gradients. Applied in train_gpt.cu: build_model, block_forward, train_step.
*/
#pragma once
// defines: ParameterIndex, parameter_names, parameter_is_matrix, parameter_partition,
//          TensorShape, shape_elements, parameter_count, parameter_shapes, whole_parameter_count, unit_of, slice_of,
//          tensor_of, gpt2_units, EmbeddingParameters, LayerParameters, FinalNormParameters, embedding_parameters,
//          layer_parameters, final_norm_parameters, ActivationTensors, LayerOutputGradients, layer_output_gradient,
//          layer_output_gradient_size, layer_output_gradient_elements, ScratchTensors, LayerActivations, GPT2,
//          gpt2_layers, tensor_parallel, tokens_held, sequence_multiple, gpt2_chunks, chunk_has_embedding,
//          chunk_has_head, final_norm_unit, layer_unit, vocab_range, layer_activations, for_each_layernorm_gradient,
//          gpt2_build,
//          for_each_position_run, tokens_of_rank, activation_set, waiting_grads, scratch_buffer_list,
//          activation_buffer_list, staging_for_step, gpt2_allocate_activations, gpt2_grad_norm_squared,
//          sum_layernorm_gradients, gpt2_free
#include <stddef.h>   // defines: size_t
#include <algorithm>  // defines: std::max
#include <string>     // defines: std::string
#include <vector>     // defines: std::vector
#include "precision.h"            // defines: floatX
#include "kernels/common.cuh"     // defines: BufferSpec, allocate_buffers, device_free (base.h)
#include "kernels/encoder.cuh"    // defines: VocabRange, encoder_bucket_ints
#include "kernels/matmul.cuh"     // defines: column_partials_elements
#include "kernels/attention.cuh"  // defines: AttentionScratch
#include "recompute.h"            // defines: NUM_LAYER_ACTIVATIONS, recompute_keeps, layer_activation_bytes
#include "staging.h"              // defines: HostStaging, staging_free
#include "comm.h"                 // defines: Collectives, ProcessGrid, comm_all_reduce_scalars
#include "step_time.h"            // defines: StepTime
#include "zero.h"                 // defines: Zero, Unit, TensorSlice, zero_grad_norm_squared, zero_sum_gradient_range
#include "tp.h"                   // defines: TensorPartition, TensorParallel, tp_vocab_range
#include "cp.h"                   // defines: RingBuffers, cp_chunk, cp_batch_index
#include "pipeline_run.h"         // defines: received_gradient_buffer_list, StageBuffers (pipeline.h),
                                  //          PipelineLinks, pipeline_links_free (pipeline_links.h)
#include "pipeline_sim.h"         // defines: stage_layer_counts
#include "gpt2_config.h"          // defines: GPT2Config, ModelLayout, GPT2_EOT, layout_layers, model_layer

// ----------------------------------------------------------------------------
// parameters: 16 tensors in llm.c's file order, one contiguous buffer

enum ParameterIndex { WTE, WPE, LN1W, LN1B, QKVW, QKVB, ATTPROJW, ATTPROJB, LN2W, LN2B,
                      FCW, FCB, FCPROJW, FCPROJB, LNFW, LNFB, NUM_PARAMETER_TENSORS };
static const char* parameter_names[NUM_PARAMETER_TENSORS] = {
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b",
    "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};
// weight decay applies to the 2-D matrices only (docs/design.md: Numerical conventions)
static const bool parameter_is_matrix[NUM_PARAMETER_TENSORS] = {
    true, true, false, false, true, false, true, false, false, false, true, false, true, false, false, false};

// how tensor parallelism cuts each tensor (tp.h draws it): column-parallel matrices by rows
// (qkvw in three blocks, so each rank has whole heads of q, k and v), row-parallel ones by columns
static const TensorPartition parameter_partition[NUM_PARAMETER_TENSORS] = {
    {SPLIT_ROWS, 1},     // wte: the vocabulary (vocab-parallel embedding and LM head)
    {REPLICATED, 1},     // wpe
    {REPLICATED, 1}, {REPLICATED, 1},      // ln1w, ln1b
    {SPLIT_ROWS, 3}, {SPLIT_ROWS, 3},      // qkvw, qkvb: column-parallel, this rank's heads
    {SPLIT_COLUMNS, 1}, {REPLICATED, 1},   // attprojw: row-parallel; attprojb: added once, after the sum
    {REPLICATED, 1}, {REPLICATED, 1},      // ln2w, ln2b
    {SPLIT_ROWS, 1}, {SPLIT_ROWS, 1},      // fcw, fcb: column-parallel
    {SPLIT_COLUMNS, 1}, {REPLICATED, 1},   // fcprojw: row-parallel; fcprojb: added once
    {REPLICATED, 1}, {REPLICATED, 1}};     // lnfw, lnfb

// a tensor is `layers` stacked (rows, cols) matrices; vectors have cols = 1
struct TensorShape { int layers, rows, cols; };
inline size_t shape_elements(TensorShape s) { return (size_t)s.layers * s.rows * s.cols; }
inline size_t parameter_count(const TensorShape shapes[NUM_PARAMETER_TENSORS]) {
    size_t n = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) n += shape_elements(shapes[i]);
    return n;
}

// the shapes this rank holds; whole_model_layout gives the shapes of the file
inline void parameter_shapes(TensorShape shapes[NUM_PARAMETER_TENSORS], const GPT2Config& c, const ModelLayout& lay) {
    int C = c.channels, L = layout_layers(lay);
    bool first = is_first_stage(lay), last = is_last_stage(lay);
    // the embedding unit {wte, wpe} lives on the first stage and, whole, on the last: wte is
    // tied to the LM head, and a whole copy keeps the two copies' ZeRO shards aligned
    // (pipeline.h); the last stage's wpe is unused and gets zero gradient
    shapes[WTE]      = {1, (first || last) ? c.padded_vocab_size : 0, C};
    shapes[WPE]      = {1, (first || last) ? c.max_seq_len : 0, C};
    shapes[LN1W]     = {L, C, 1};
    shapes[LN1B]     = {L, C, 1};
    shapes[QKVW]     = {L, 3 * C, C};
    shapes[QKVB]     = {L, 3 * C, 1};
    shapes[ATTPROJW] = {L, C, C};
    shapes[ATTPROJB] = {L, C, 1};
    shapes[LN2W]     = {L, C, 1};
    shapes[LN2B]     = {L, C, 1};
    shapes[FCW]      = {L, 4 * C, C};
    shapes[FCB]      = {L, 4 * C, 1};
    shapes[FCPROJW]  = {L, C, 4 * C};
    shapes[FCPROJB]  = {L, C, 1};
    shapes[LNFW]     = {1, last ? C : 0, 1};
    shapes[LNFB]     = {1, last ? C : 0, 1};
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++)
        tp_local_shape(parameter_partition[i], lay.tp, &shapes[i].rows, &shapes[i].cols);
}
// every parameter of the model (the file's, the padded vocabulary's rows included): MFU's N
inline size_t whole_parameter_count(const GPT2Config& c) {
    TensorShape whole[NUM_PARAMETER_TENSORS];
    parameter_shapes(whole, c, whole_model_layout(c));
    return parameter_count(whole);
}

// Parameters are stored unit by unit (zero.h): unit 0 the embeddings {wte, wpe},
// unit 1+l layer l's 12 tensors, unit L+1 the final LayerNorm {lnfw, lnfb}. A layer is
// then one contiguous block that ZeRO can gather and reduce whole; files keep llm.c's
// tensor-major order, and reorder_part (model_file.h) translates.

inline int unit_of(int tensor, int layer, int L) {
    return tensor <= WPE ? 0 : tensor >= LNFW ? L + 1 : 1 + layer;
}
inline int slice_of(int tensor) { return tensor <= WPE ? tensor : tensor >= LNFW ? tensor - LNFW : tensor - LN1W; }
inline int tensor_of(int unit, int slice, int L) {
    return unit == 0 ? WTE + slice : unit == L + 1 ? LNFW + slice : LN1W + slice;
}

// the units of this rank's part of the model; origins are unit-major, unpadded
inline Unit* gpt2_units(const TensorShape shapes[NUM_PARAMETER_TENSORS], int L) {
    Unit* units = (Unit*)calloc(L + 2, sizeof(Unit));
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        size_t count = (size_t)shapes[i].rows * shapes[i].cols;
        for (int l = 0; l < (i <= WPE || i >= LNFW ? 1 : L); l++) {
            Unit& u = units[unit_of(i, l, L)];
            u.slices[slice_of(i)] =
                TensorSlice{u.size, count, parameter_is_matrix[i], parameter_partition[i].split == REPLICATED};
            u.size += count;
            u.num_slices = slice_of(i) + 1;
        }
    }
    for (int u = 1; u < L + 2; u++) units[u].origin = units[u - 1].origin + units[u - 1].size;
    return units;
}

struct EmbeddingParameters { floatX *wte, *wpe; };
struct LayerParameters {
    floatX *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
};
struct FinalNormParameters { floatX *lnfw, *lnfb; };

// pointers into one unit's parameters (or gradients), from the unit's slice table
inline EmbeddingParameters embedding_parameters(const Unit& u, floatX* base) {
    return EmbeddingParameters{base + u.slices[0].offset, base + u.slices[1].offset};
}
inline LayerParameters layer_parameters(const Unit& u, floatX* base) {
    floatX* p[12];
    for (int k = 0; k < 12; k++) p[k] = base + u.slices[k].offset;
    return LayerParameters{p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11]};
}
inline FinalNormParameters final_norm_parameters(const Unit& u, floatX* base) {
    return FinalNormParameters{base + u.slices[0].offset, base + u.slices[1].offset};
}

// ----------------------------------------------------------------------------
// activations: what the forward of one micro-batch keeps for its backward (recompute.h
// decides which per-layer tensors exist for every layer), and transient scratch. A
// pipeline stage holds one ActivationTensors per micro-batch in flight (pipeline.h; under
// interleaved 1F1B per chunk-forward in flight); without a pipeline there is one.

struct ActivationTensors {
    int first_layer, layers;  // the chunk it serves (activation_set): local layers [first_layer, first_layer + layers)
    floatX* input;  // (B,T,C) the chunk's input: the embeddings (the model's first chunk) or the previous one's output
    void* layer[NUM_LAYER_ACTIVATIONS];  // per recompute.h: its layers if kept, else 1 layer every set reuses
    floatX* lnf;        // (B,T,C) last stage from here on
    float* lnf_mean;    // (B,T)
    float* lnf_rstd;    // (B,T)
    floatX* logits;     // (B,T,Vp/tp): this rank's vocabulary columns; the gradient in place after the loss
    float* losses;      // (B,T)
};

// the gradients of the outputs of a block's six weighted ops: what its backward's input half computes
// on the way to the block's input gradient, and its weight half reads (4C + 7C/tp per token)
struct LayerOutputGradients {
    floatX* fcproj;     // (B,T,C)     = the block's output gradient
    floatX* fc;         // (B,T,4C/tp) after the GELU's backward
    floatX* ln2;        // (B,T,C)     summed over TP (f's backward); -sp: this rank's B*T/tp tokens
    floatX* attproj;    // (B,T,C)     = the gradient of residual2
    floatX* qkv;        // (B,T,3C/tp)
    floatX* ln1;        // (B,T,C)     summed over TP; -sp: this rank's tokens
};
// their one layout: tensor i's field and its elements for one layer and BT tokens, on a rank of a TP
// group of tp (holding BT_held tokens of ln1 and ln2). The scratch gives each its own buffer, ZB-H1's
// slots (waiting_grads) pack them in this order
inline floatX** layer_output_gradient(LayerOutputGradients* d, int i) {
    floatX** fields[] = {&d->fcproj, &d->fc, &d->ln2, &d->attproj, &d->qkv, &d->ln1};
    return fields[i];
}
inline size_t layer_output_gradient_size(int i, size_t BT, size_t BT_held, size_t C, int tp) {
    const size_t sizes[] = {BT * C, BT * 4 * (C / tp), BT_held * C, BT * C, BT * 3 * (C / tp), BT_held * C};
    return sizes[i];
}
inline size_t layer_output_gradient_elements(size_t BT, size_t BT_held, size_t C, int tp) {
    size_t n = 0;
    for (int i = 0; i < 6; i++) n += layer_output_gradient_size(i, BT, BT_held, C, tp);
    return n;
}

struct ScratchTensors {  // reused by every layer; under -sp "held" is this rank's B*T/tp tokens, else all B*T
    floatX* proj;       // (B,T,C) attproj / fcproj output before the residual add (before g's sum)
    floatX* dresidual;  // (held,C) gradient of the residual stream
    floatX* received_gradient;  // (held,C) interleaved 1F1B only: where the next one lands while dresidual leaves
    floatX* dln;        // (B,T,C) gradient of the final LayerNorm's output (before f's sum)
    floatX* all_tokens; // (B,T,C) -sp only: a LayerNorm's output or a gradient, all tokens (tp.h: f, g)
    floatX* summed;     // (held,C) -sp only: this rank's tokens of g's or f's sum (tp.h: tp_g_forward)
    floatX* datty;      // (B,T,C/tp)
    LayerOutputGradients layer_grads;  // one layer's, when its weight half follows its input half at once
    AttentionScratch attention;  // attention's fp32 output, dq, dk dv, D (kernels/attention.cuh)
    RingBuffers ring;   // -cp: ring attention's [k | v] buffers in flight and a second dk dv sum (cp.h)
    float *loss_max, *loss_sum, *loss_target;  // (B,T) each: the vocabulary-parallel loss's row statistics
    floatX* logit_row;  // (Vp): one position's logits gathered over the TP ranks, for sampling
    int* inputs;        // (B,T) a micro-batch's tokens, uploaded for its embedding's forward
    int* token_buckets; // encoder_bucket_ints(B,T): the embedding backward's positions grouped by token
    float* partials;    // column_partials_elements: the two-stage column sums of bias and LayerNorm gradients
    int* targets;       // (B,T)
};

// one layer's view of the activations, as the forward and backward use them
struct LayerActivations {
    floatX *ln1, *qkv, *atty;
    float* lse;  // (B,T,NH/tp) attention's log-sum-exp, what its backward reads (kernels/attention.cuh)
    floatX *residual2, *ln2, *fch, *fch_gelu, *residual3;
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd;
};

// ----------------------------------------------------------------------------
// the model

struct GPT2 {
    GPT2Config config;
    ModelLayout layout;
    TensorShape shapes[NUM_PARAMETER_TENSORS];
    std::vector<int> stage_layers;  // layers of each pipeline stage (-pl, or the even split)
    size_t num_parameters;          // held by this rank, unpadded
    Zero zero;                      // parameters, gradients, optimizer state: zero.h
    Collectives* comm;
    int adam_steps;                 // updates applied (skipped steps do not count)
    int recompute;                  // -r level, recompute.h
    int gelu_fusion;                // -ge: GELU in the fc GEMMs' epilogues (kernels/gelu_fusion.cuh)
    int flash;                      // -fa: flash attention's tensor-core kernels (kernels/attention.cuh)
    ScheduleKind schedule;          // -ps: the pipeline schedule, pipeline.h
    int B, T_local;                 // activation buffers hold up to (B, T_local): T_local = T/cp tokens a sequence
    std::vector<ActivationTensors> sets;  // one per micro-batch (or chunk-forward) in flight: activation_set
    StageBuffers holds;             // the sets, of them those with the head's tensors, the micro-batches
                                    // whose weight half waits (-ps zb), which set a chunk's micro-batch uses
    floatX* waiting_grads;          // their layers' output gradients: by slot (the action's), then layer
    ScratchTensors scratch;
    std::vector<BufferSpec> activation_buffers;  // every buffer of the sets and the scratch, declared once
    HostStaging staging;            // the step's uploads and downloads, queued without waits (staging.h)
    DeviceClock schedule_clock;     // a pipeline's stamps around its compute actions (its bubble: pipeline.h)
    PipelineLinks links;            // -overlap 1: the pipeline's sends and receives on their own stream
    StepTime step_time;             // the CPU build's split of a step's time (step_time.h)
    size_t memory[NUM_MEMORY_KINDS];  // bytes allocated (or, under -plan, to be), by kind
};

inline int gpt2_layers(const GPT2* m) { return layout_layers(m->layout); }
// the tokens of a micro-batch of N that this rank's LayerNorms and residual stream hold: N/tp under -sp
inline int tokens_held(const GPT2* m, int N) { return m->layout.sequence_parallel ? N / m->layout.tp : N; }
// f and g's view of the TP group (tp.h) for a micro-batch of N tokens, with -sp's two buffers
inline TensorParallel tensor_parallel(GPT2* m, int N) {
    return TensorParallel{&m->comm->tp, m->layout.sequence_parallel, (size_t)tokens_held(m, N) * m->config.channels,
                          m->scratch.all_tokens, m->scratch.summed};
}
// the ranks that split a sequence, and so what a sequence's length (-t, sampling's windows) must be
// a multiple of: -cp's 2cp chunks (cp.h), each rank's tokens split again over tp under -sp (tp.h)
inline int sequence_multiple(int cp, int tp, bool sequence_parallel) {
    return (cp > 1 ? 2 * cp : 1) * (sequence_parallel ? tp : 1);
}
inline int gpt2_chunks(const GPT2* m) { return (int)m->layout.chunks.size(); }
// does the chunk of activation set `a` hold the embedding (the model's first chunk) or the head (its last)?
inline bool chunk_has_embedding(const GPT2* m, const ActivationTensors& a) {
    return is_first_stage(m->layout) && a.first_layer == 0;
}
inline bool chunk_has_head(const GPT2* m, const ActivationTensors& a) {
    return is_last_stage(m->layout) && a.first_layer + a.layers == gpt2_layers(m);
}
inline int final_norm_unit(const GPT2* m) { return gpt2_layers(m) + 1; }
// block l's ZeRO unit (gpt2_units: the embeddings are unit 0, the blocks 1..L, the final LayerNorm last)
inline int layer_unit(int l) { return 1 + l; }
inline VocabRange vocab_range(const GPT2* m) {
    return tp_vocab_range(m->config.padded_vocab_size, m->layout.tp, m->layout.tp_rank);
}

inline LayerActivations layer_activations(const GPT2* model, const ActivationTensors& a, int l, int B, int T_local) {
    const GPT2Config& c = model->config;
    void* at[NUM_LAYER_ACTIVATIONS];
    for (int t = 0; t < NUM_LAYER_ACTIVATIONS; t++) {
        size_t layer = recompute_keeps(model->recompute, t) ? l - a.first_layer : 0;
        at[t] = (char*)a.layer[t] + layer * layer_activation_bytes(t, B, T_local, c.channels, c.num_heads,
                                                                    model->layout.tp, model->layout.sequence_parallel);
    }
    return LayerActivations{(floatX*)at[LN1], (floatX*)at[QKV], (floatX*)at[ATTY], (float*)at[LSE],
                            (floatX*)at[RESIDUAL2], (floatX*)at[LN2], (floatX*)at[FCH], (floatX*)at[FCH_GELU],
                            (floatX*)at[RESIDUAL3], (float*)at[LN1_MEAN], (float*)at[LN1_RSTD],
                            (float*)at[LN2_MEAN], (float*)at[LN2_RSTD]};
}

// -sp: a LayerNorm's weight and bias gradients (ln1, ln2, lnf) are sums over the tokens, and each
// TP rank saw only its own; visit(at, n) each range of them in the step's gradient (the part this
// rank holds after the DP reduction, the same part on every rank of the TP group)
template <typename Visit> inline void for_each_layernorm_gradient(const GPT2* model, Visit visit) {
    if (!model->layout.sequence_parallel) return;
    int L = gpt2_layers(model);
    zero_for_each_shard_slice(&model->zero, [&](int u, const TensorSlice& slice, size_t lo, size_t hi, size_t at) {
        int t = tensor_of(u, (int)(&slice - model->zero.units[u].slices), L);
        if (t == LN1W || t == LN1B || t == LN2W || t == LN2B || t == LNFW || t == LNFB) visit(at, hi - lo);
    });
}

// ---------------------------------------------------------------- the model laid out on this rank

// the model of config c as this rank holds it: the layers of each pipeline stage (-pl) and chunk
// (-vp), its TP part of every tensor (parameter_shapes), and the ZeRO units of `stage` over its
// replica group, allocated unless allocate = false (-plan: only laid out). A layout the model does not
// fit is one line on every rank, exit 1. The values come after (model_file.h: gpt2_create)
inline void gpt2_build(GPT2* model, const GPT2Config& c, Collectives* comm, int stage, bool grads_fp32, bool allocate,
                       const char* stage_layers, int chunks, bool master_weights, bool overlap) {
    model->config = c;
    model->comm = comm;
    int tp = comm->grid.tp, pp = comm->grid.pp;
    if (c.num_layers < pp) comm_fail_all("-pp %d: the model has %d layers, fewer than the stages", pp, c.num_layers);
    std::string error;
    model->stage_layers = stage_layer_counts(c.num_layers, pp, stage_layers, &error);
    if (model->stage_layers.empty()) comm_fail_all("-pl %s %s", stage_layers ? stage_layers : "", error.c_str());
    if (chunks > 1 && c.num_layers < pp * chunks)
        comm_fail_all("-vp %d: the model has %d layers, fewer than the pp*vp = %d chunks", chunks, c.num_layers,
                      pp * chunks);
    std::vector<int> over_chunks(pp);  // each stage's layers, over its chunks
    for (int s = 0; s < pp; s++) over_chunks[s] = layout_layers(stage_layout(model->stage_layers, 1, 0, s, chunks));
    model->stage_layers = over_chunks;
    model->layout = model_layout(comm->grid, model->stage_layers, chunks);
    if (c.num_heads % tp != 0 || (4 * c.channels) % tp != 0 || c.padded_vocab_size % tp != 0)
        comm_fail_all("-tp %d must divide the heads NH=%d, the MLP width 4C=%d and the padded vocabulary Vp=%d",
                      tp, c.num_heads, 4 * c.channels, c.padded_vocab_size);
    parameter_shapes(model->shapes, c, model->layout);
    model->num_parameters = parameter_count(model->shapes);
    zero_init(&model->zero, stage, comm, gpt2_units(model->shapes, gpt2_layers(model)), gpt2_layers(model) + 2,
              grads_fp32, master_weights, allocate, model->memory, overlap);
    pipeline_links_init(&model->links, overlap, &comm->pp, allocate);
}

// ----------------------------------------------------------------------------
// the tokens of this rank, and each micro-batch's activation set

// the micro-batch's tokens as runs of consecutive positions: one (B,T) batch, or under -cp the
// rank's two halves, each a (B, T/2) batch from its chunk's first position on (cp.h);
// visit(first token, first position, T of the run)
template <typename Visit> inline void for_each_position_run(const GPT2* model, int B, int T_local, Visit visit) {
    int c = model->layout.cp;
    if (c == 1) { visit((size_t)0, 0, T_local); return; }
    for (int half = 0; half < 2; half++)
        visit((size_t)half * B * (T_local / 2), cp_chunk(c, model->layout.cp_rank, half) * (T_local / 2), T_local / 2);
}

// this rank's tokens of a (B,T) micro-batch: all of them, or under -cp its zig-zag chunks of each
// sequence, in cp_batch_index's order (cp.h)
inline std::vector<int> tokens_of_rank(const GPT2* model, const int* tokens, int B, int T_local) {
    int c = model->layout.cp;
    std::vector<int> mine((size_t)B * T_local / c);
    for (size_t i = 0; i < mine.size(); i++)
        mine[i] = tokens[c == 1 ? i : cp_batch_index(c, model->layout.cp_rank, B, T_local, i)];
    return mine;
}

// micro-batch k's activations in chunk v: set k % sets (pipeline_activation_sets), or under
// interleaved 1F1B the set the schedule gives it (interleaved_set_of), with the head's tensors
// (lnf, logits, losses) of set k % head_sets: they live from forward to backward, which fewer micro-batches
// are between under ZB-H1 (pipeline_backward_sets). The set is for chunk v's layers
inline ActivationTensors activation_set(const GPT2* model, int v, int k) {
    const std::vector<int>& set_of = model->holds.set_of;  // (chunk, micro-batch) -> set, interleaved
    int m = (int)set_of.size() / gpt2_chunks(model);
    ActivationTensors a = model->sets[set_of.empty() ? k % model->sets.size() : set_of[v * m + k]];
    a.first_layer = 0;
    for (int u = 0; u < v; u++) a.first_layer += model->layout.chunks[u].end - model->layout.chunks[u].begin;
    a.layers = model->layout.chunks[v].end - model->layout.chunks[v].begin;
    const ActivationTensors& head = model->sets[k % model->holds.head_sets];
    a.lnf = head.lnf;
    a.lnf_mean = head.lnf_mean;
    a.lnf_rstd = head.lnf_rstd;
    a.logits = head.logits;
    a.losses = head.losses;
    return a;
}

// ZB-H1 (pipeline.h): layer l's output gradients in a slot (the one a B action and its W carry),
// kept from the input half of a micro-batch's backward to its weight half; a slot holds every layer's
inline LayerOutputGradients waiting_grads(GPT2* model, int slot, int l) {
    if (slot < 0 || slot >= model->holds.weight_slots)
        fail("ZB-H1: slot %d of output gradients, but %d allocated", slot, model->holds.weight_slots);
    size_t C = model->config.channels, BT = (size_t)model->B * model->T_local;
    size_t BT_held = tokens_held(model, model->B * model->T_local);
    int tp = model->layout.tp;
    floatX* at = model->waiting_grads +
                 ((size_t)slot * gpt2_layers(model) + l) *
                     layer_output_gradient_elements(BT, BT_held, C, tp);
    LayerOutputGradients d;
    for (int i = 0; i < 6; i++) {
        *layer_output_gradient(&d, i) = at;
        at += layer_output_gradient_size(i, BT, BT_held, C, tp);
    }
    return d;
}

// ----------------------------------------------------------------------------
// the buffers, declared once

// the scratch every layer and set reuses, with what the techniques add (pipeline.h's received
// gradient, tp.h's -sp pair, cp.h's ring): a buffer a technique does not declare is never
// allocated and its pointer stays null, as gpt2_create value-initialises the model
inline std::vector<BufferSpec> scratch_buffer_list(GPT2* model, int B, int T_local) {
    const GPT2Config& c = model->config;
    bool sp = model->layout.sequence_parallel;
    int tp = model->layout.tp;
    size_t BT = (size_t)B * T_local, BT_held = tokens_held(model, B * T_local), C = c.channels, C_rank = C / tp;
    size_t NH_rank = c.num_heads / tp;
    ScratchTensors& s = model->scratch;
    LayerOutputGradients& grads = s.layer_grads;
    const size_t X = sizeof(floatX), FP32 = sizeof(float);
    const MemoryKind WORK = MEM_ACTIVATIONS_TRANSIENT;
    std::vector<BufferSpec> scratch = {
        {(void**)&s.proj, BT * C, X, WORK}, {(void**)&s.dresidual, BT_held * C, X, WORK},
        {(void**)&s.dln, BT * C, X, WORK}, {(void**)&s.datty, BT * C_rank, X, WORK},
    };
    auto append = [&](const std::vector<BufferSpec>& more) { scratch.insert(scratch.end(), more.begin(), more.end()); };
    // what a technique adds, each declared by its own header (none where it is off)
    append(received_gradient_buffer_list(&s.received_gradient, gpt2_chunks(model), BT_held * C));  // pipeline_run.h
    append(sequence_parallel_buffer_list(sp, &s.all_tokens, &s.summed, BT, BT_held, C));              // tp.h
    append(ring_buffer_list(&s.ring, model->layout.cp, BT, C_rank));                                 // cp.h
    for (int i = 0; i < 6; i++) {  // one layer's output gradients, each its own buffer
        size_t n = layer_output_gradient_size(i, BT, BT_held, C, tp);
        scratch.push_back({(void**)layer_output_gradient(&grads, i), n, X, WORK});
    }
    append({
        {(void**)&s.attention.out, BT * C_rank, FP32, WORK}, {(void**)&s.attention.dq, BT * C_rank, FP32, WORK},
        {(void**)&s.attention.dkv, BT * 2 * C_rank, FP32, WORK}, {(void**)&s.attention.D, BT * NH_rank, FP32, WORK},
    });
    append({
        {(void**)&s.loss_max, BT, FP32, WORK},
        {(void**)&s.loss_sum, BT, FP32, WORK},
        {(void**)&s.loss_target, BT, FP32, WORK},
        {(void**)&s.logit_row, (size_t)c.padded_vocab_size, X, WORK},
        {(void**)&s.inputs, BT, sizeof(int), WORK},
        {(void**)&s.targets, BT, sizeof(int), WORK},
        {(void**)&s.token_buckets, encoder_bucket_ints(B, T_local), sizeof(int), WORK},
        // the column sums' partials: a block's four biases, or its two LayerNorms' weights and biases
        {(void**)&s.partials, column_partials_elements(std::max(2 * C + 7 * C_rank, 4 * C)), FP32, WORK},
    });
    return scratch;
}

// the staging arena (staging.h), sized for a step's micro-batches and rewound: each one's tokens,
// targets and losses, and the buckets of up to two position runs (-cp), each piece padded to 64 bytes
inline void staging_for_step(GPT2* model, int grad_accum, int B, int T_local) {
    size_t BT = (size_t)B * T_local;
    staging_reserve(&model->staging, grad_accum * (3 * BT * 4 + 2 * encoder_bucket_ints(B, T_local) * 4 + 5 * 64));
    staging_rewind(&model->staging);
}

// every activation and scratch buffer for micro-batches of up to (B,T), declared once: the
// same list is allocated for training and summed for -plan. model->holds says how many sets of
// what the forward keeps (one per micro-batch in flight, pipeline.h), one of everything else.
inline std::vector<BufferSpec> activation_buffer_list(GPT2* model, int B, int T_local) {
    const StageBuffers& holds = model->holds;
    const GPT2Config& c = model->config;
    int tp = model->layout.tp, L = gpt2_layers(model);
    bool sp = model->layout.sequence_parallel;
    size_t BT = (size_t)B * T_local, BT_held = tokens_held(model, B * T_local), C = c.channels;
    const size_t X = sizeof(floatX), FP32 = sizeof(float);
    const MemoryKind KEPT = MEM_ACTIVATIONS, WORK = MEM_ACTIVATIONS_TRANSIENT;
    int set_layers = 0;  // a set holds a chunk's layers, whichever chunk it serves (one chunk: the stage's)
    for (const LayerRange& r : model->layout.chunks) set_layers = std::max(set_layers, r.end - r.begin);
    model->sets.assign(holds.activation_sets, ActivationTensors{0, set_layers});
    std::vector<BufferSpec> specs;
    for (int i = 0; i < holds.activation_sets; i++) {
        ActivationTensors& a = model->sets[i];
        std::vector<BufferSpec> kept = {{(void**)&a.input, BT_held * C, X, KEPT}};
        if (is_last_stage(model->layout) && i < holds.head_sets) {  // the head's: lnf, logits, losses (activation_set)
            std::vector<BufferSpec> head = {
                {(void**)&a.lnf, BT_held * C, X, KEPT}, {(void**)&a.lnf_mean, BT_held, FP32, KEPT},
                {(void**)&a.lnf_rstd, BT_held, FP32, KEPT}, {(void**)&a.losses, BT, FP32, KEPT},
                {(void**)&a.logits, BT * c.padded_vocab_size / tp, X, MEM_LOGITS},
            };
            kept.insert(kept.end(), head.begin(), head.end());
        }
        for (int t = 0; t < NUM_LAYER_ACTIVATIONS; t++)  // kept: one per layer
            if (recompute_keeps(model->recompute, t))
                kept.push_back(
                    {&a.layer[t], set_layers * layer_activation_bytes(t, B, T_local, C, c.num_heads, tp, sp), 1, KEPT});
        specs.insert(specs.end(), kept.begin(), kept.end());
    }
    for (int t = 0; t < NUM_LAYER_ACTIVATIONS; t++)  // not kept: one layer, which every layer and set reuses
        if (!recompute_keeps(model->recompute, t))
            specs.push_back(
                {&model->sets[0].layer[t], layer_activation_bytes(t, B, T_local, C, c.num_heads, tp, sp), 1, WORK});
    // kept from the backward's input half to its weight half (ZB-H1): the layers' output gradients
    specs.push_back({(void**)&model->waiting_grads,
                     holds.weight_slots * L * layer_output_gradient_elements(BT, BT_held, C, tp), X, KEPT});
    std::vector<BufferSpec> scratch = scratch_buffer_list(model, B, T_local);
    specs.insert(specs.end(), scratch.begin(), scratch.end());
    return specs;
}

// activations for micro-batches of up to (B,T), as many in flight as `holds` says (pipeline.h's
// stage_buffers); allocate = false only books them (-plan)
inline void gpt2_allocate_activations(GPT2* model, int B, int T_local, int recompute, const StageBuffers& holds,
                                      bool allocate) {
    if (recompute < 0 || recompute > 3) fail("-r must be 0, 1, 2 or 3 (got %d)", recompute);
    model->B = B; model->T_local = T_local; model->recompute = recompute; model->holds = holds;
    model->activation_buffers = activation_buffer_list(model, B, T_local);
    allocate_buffers(model->activation_buffers.data(), (int)model->activation_buffers.size(), model->memory, allocate);
    for (ActivationTensors& a : model->sets)  // the reused layer tensors are set 0's
        for (int t = 0; t < NUM_LAYER_ACTIVATIONS; t++)
            if (!recompute_keeps(recompute, t)) a.layer[t] = model->sets[0].layer[t];
}

// ----------------------------------------------------------------------------
// the gradient's reductions that are the model's to know, and the end

// the squared norm of the whole model's gradient, each parameter counted once: a tensor
// replicated over TP on TP rank 0 only, the tied embedding unit on the first stage only
inline double gpt2_grad_norm_squared(GPT2* model) {
    bool tp_copy = model->layout.tp_rank != 0, tied_copy = model->layout.pp > 1 && !is_first_stage(model->layout);
    double sum = zero_grad_norm_squared(&model->zero, [&](int unit, const TensorSlice& slice) {
        return !(slice.replicated && tp_copy) && !(unit == 0 && tied_copy);
    });
    comm_all_reduce_scalars(&model->comm->tp, &sum, 1);  // each TP rank holds a part of each tensor
    comm_all_reduce_scalars(&model->comm->pp, &sum, 1);  // each stage its layers
    return sum;
}

// ...summed over TP, as Megatron-LM sums its sequence-parallel parameters' gradients
inline void sum_layernorm_gradients(GPT2* model) {
    for_each_layernorm_gradient(
        model, [&](size_t at, size_t n) { zero_sum_gradient_range(&model->zero, at, n, &model->comm->tp); });
}

inline void gpt2_free(GPT2* model) {
    for (const BufferSpec& b : model->activation_buffers) device_free(*b.ptr);
    zero_free(&model->zero);
    staging_free(&model->staging);
    device_clock_free(&model->schedule_clock);
    pipeline_links_free(&model->links);
}

/*
train_gpt.cu: GPT-2 training: the model, the step and the loop, in host code.

This file is the model and the program: the parameters' layout, a block's forward and
backward, a pipeline stage (embedding, blocks, final LayerNorm, LM head and loss), the
training step, validation, sampling, the loop and main. It calls *ops* (kernels/,
adamw.h) and never a CUDA, cuBLAS or NCCL API, so it compiles twice:
    nvcc            -> train_gpt      ops are CUDA kernels and cuBLAS
    g++ -x c++      -> train_gpt_cpu  ops are their host twins and OpenBLAS
Every buffer is "device" memory from kernels/common.cuh; on the CPU build that is
host memory, and the same code runs.

GPT-2: learned positions, pre-LayerNorm blocks, tanh-GELU MLP, causal attention,
LM head tied to the token embedding wte. Per block, with x the residual stream:
    x = x + attproj(attention(qkv(ln1(x))))
    x = x + fcproj(gelu(fc(ln2(x))))
One optimizer step (train_step) on micro-batches of (B,T) tokens:
    for each micro-batch, in the order the pipeline schedule says:
        forward   embed -> blocks -> final LayerNorm -> logits -> loss * S/tokens
        backward  the same in reverse, each layer's gradient summed into the step's
    reduce the gradients over DP (ZeRO), sum the tied wte's two copies (pp > 1)
    norm -> finite? (loss scaling) -> clip -> AdamW -> gather the updated parameters

Where each technique enters, at a call a reader can see:
  ZeRO (zero.h)        zero_gather_unit before a unit is used, zero_reduce_unit after
                       its backward, the zero_* calls of train_step; no-ops where the
                       stage does not need them. Data parallelism is each rank reading
                       its slice of the batch (dataloader.h).
  tensor parallelism   tp_f_forward/tp_g_forward and their backward mirrors around each
  (tp.h)               column-then-row-parallel pair; the vocabulary-parallel embedding
                       and loss. A rank holds 3C/tp rows of qkvw, C/tp columns of
                       attprojw, and so on; with tp = 1 this is the single-GPU model.
                       -sp: f and g gather and scatter the tokens, and the LayerNorms and
                       the residual stream hold B*T/tp of them (tokens_held).
  context parallelism  a rank holds T/cp of each sequence (tokens_of_rank); attention goes
  (cp.h)               round the ring (sequence_attention_forward/backward), the embedding
                       adds each chunk's positions (for_each_position_run).
  pipeline (pipeline.h)  the model is written as a stage; pipeline_stage hands it to
                       run_schedule, which runs this stage's list of actions. One stage:
                       forward k, backward k for each micro-batch, and that is all.
                       A block's backward is two halves, block_backward_input (B) and
                       block_backward_weights (W), which ZB-H1 runs apart. Under
                       interleaved 1F1B a stage holds V chunks of layers (ModelLayout's
                       chunks), and an activation set says which chunk it runs.
  loss scaling         train_step: dloss carries the scale S, loss_scaler_update
  (loss_scale.h)       decides, AdamW's grad_scale divides it out.
  recompute            recompute_block, just before each block's backward.
  (recompute.h)
  mixed precision      floatX everywhere, fp32 master and stochastic rounding in AdamW.
  (precision.h)
The plumbing lives in options.h (flags), model_file.h (files, checkpoints) and
accounting.h (-plan, the measured ledger), included after the GPT2 struct.

Read in this order: block_forward, block_backward, stage_forward, stage_backward,
pipeline_stage, train_step, train_loop, main.
*/
#include <stdio.h>     // defines: printf, fopen
#include <stdlib.h>    // defines: malloc, atoi, getenv
#include <limits.h>    // defines: INT_MAX
#include <signal.h>    // defines: raise, SIGSTOP, SIGKILL (TRAIN_GPT_STOP_AT_STEP, _KILL_AT_STEP)
#include <string.h>    // defines: strcmp, strpbrk
#include <math.h>      // defines: sqrt, exp, fmaxf
#include <stdint.h>    // defines: uint64_t
#include <sys/stat.h>  // defines: mkdir
#include <algorithm>   // defines: std::copy, std::max
#include <chrono>      // defines: std::chrono::steady_clock
#include <string>      // defines: std::string, std::to_string
#include <utility>     // defines: std::swap
#include <vector>      // defines: std::vector
#include "precision.h"             // defines: floatX, to_float, from_float, PRECISION_NAME
#include "kernels/common.cuh"      // defines: device_init, device_malloc, host_to_device, fail, file_exists (base.h)
#include "kernels/encoder.cuh"     // defines: encoder_forward, encoder_backward, VocabRange
#include "kernels/layernorm.cuh"   // defines: layernorm_forward, layernorm_backward
#include "kernels/matmul.cuh"      // defines: matmul_forward, matmul_backward, bias_forward
#include "kernels/attention.cuh"   // defines: attention_forward, attention_backward
#include "kernels/gelu.cuh"        // defines: gelu_forward, gelu_backward, residual_forward
#include "kernels/gradients.cuh"   // defines: global_norm_squared, gradient_accumulate
#include "adamw.h"                 // defines: adamw_update (zero.h calls it)
#include "loss_scale.h"            // defines: LossScaler, loss_scaler_init, loss_scaler_update
#include "staging.h"               // defines: HostStaging, staging_upload, staging_download_floats, staging_pending_sum
#include "recompute.h"             // defines: recompute_keeps, layer_activation_bytes
#include "lr_schedule.h"           // defines: learning_rate_at
#include "random.h"                // defines: Rng, rng_normal, rng_uniform, random_u32
#include "dataloader.h"            // defines: DataLoader, dataloader_init, dataloader_next_batch
#include "tokenizer/decoder.h"     // defines: Decoder, decoder_load, decode_append, json_escape_utf8
#include "comm.h"                  // defines: Collectives, comm_init, comm_all_reduce_scalars, comm_fail_all
#include "zero.h"                  // defines: Zero, zero_unit_params, zero_gather_unit, zero_reduce_unit, ...
#include "tp.h"                    // defines: tp_g_forward, tp_f_backward, tp_crossentropy, TensorPartition
#include "cp.h"                    // defines: ring_attention_forward, ring_attention_backward, cp_batch_index, RingBuffers
#include "mfu.h"                   // defines: model_flops_per_token, world_peak_flops, mfu_of, PeakFlops
#include "pipeline.h"              // defines: distribute_layers, pipeline_schedule, PipelineStage, run_schedule
#include "checkpoint.h"            // defines: checkpoint_model_path, check_output_dir, checkpoint_bytes
#include "options.h"               // defines: TrainConfig, parse_args, print_usage

// ----------------------------------------------------------------------------
// configuration and layout

#define MODEL_MAGIC 20240326
#define MODEL_VERSION_FP32 3
#define MODEL_VERSION_BF16 5
#define GPT2_EOT 50256

struct GPT2Config {
    int max_seq_len;        // maxT, 1024 for GPT-2
    int vocab_size;         // V, 50257
    int padded_vocab_size;  // Vp, 50304: V rounded up for fast GEMMs
    int num_layers;         // L
    int num_heads;          // NH
    int channels;           // C
};

// which part of the model this rank holds
struct LayerRange { int begin, end; };  // layers [begin, end) of the model
struct ModelLayout {
    int tp, tp_rank;        // tensor parallel: this rank holds 1/tp of every sharded matrix
    int pp, pp_rank;        // pipeline parallel: this rank holds the layers of its chunks...
    std::vector<LayerRange> chunks;  // ...one range (chunk 0), or V under interleaved 1F1B (pipeline.h)
    bool sequence_parallel = false;  // -sp: outside the TP pairs this rank holds 1/tp of the tokens (tp.h)
    int cp = 1, cp_rank = 0;         // -cp: this rank holds 1/cp of every sequence, its zig-zag chunks (cp.h)
};

// the whole model, as one rank alone holds it and as files store it
inline ModelLayout whole_model_layout(const GPT2Config& c) { return ModelLayout{1, 0, 1, 0, {{0, c.num_layers}}}; }
// the part of pipeline stage pp_rank and TP rank tp_rank: the layers of stage_layers[pp_rank]
// (stage_layer_counts), or with V chunks (interleaved 1F1B) chunk v = virtual stage v*pp + pp_rank
// of the model cut evenly into pp*V (distribute_layers)
inline ModelLayout stage_layout(const std::vector<int>& stage_layers, int tp, int tp_rank, int pp_rank, int V) {
    int p = (int)stage_layers.size(), L = 0;
    for (int n : stage_layers) L += n;
    ModelLayout lay = {tp, tp_rank, p, pp_rank, std::vector<LayerRange>(V)};
    for (int v = 0; v < V; v++) {
        LayerRange& r = lay.chunks[v];
        if (V == 1) stage_layer_range(stage_layers, pp_rank, &r.begin, &r.end);
        else distribute_layers(L, p * V, v * p + pp_rank, &r.begin, &r.end);
    }
    return lay;
}
// this rank's part, from the process grid: the one source of tp, pp and the ranks
inline ModelLayout model_layout(const ProcessGrid& g, const std::vector<int>& stage_layers, int V) {
    return stage_layout(stage_layers, g.tp, g.tp_rank, g.pp_rank, V);
}
inline bool is_first_stage(const ModelLayout& lay) { return lay.pp_rank == 0; }
inline bool is_last_stage(const ModelLayout& lay) { return lay.pp_rank == lay.pp - 1; }
// the layers this rank holds, numbered 0.. chunk after chunk (local), and the model's number of local l
inline int layout_layers(const ModelLayout& lay) {
    int n = 0;
    for (const LayerRange& r : lay.chunks) n += r.end - r.begin;
    return n;
}
inline int model_layer(const ModelLayout& lay, int l) {
    for (const LayerRange& r : lay.chunks) {
        if (l < r.end - r.begin) return r.begin + l;
        l -= r.end - r.begin;
    }
    return -1;
}

// GPT-2 of depth N as llm.c names them: d12, d24, d36, d48 are 124M, 350M, 774M, 1558M
inline GPT2Config gpt2_config_for_depth(int depth) {
    GPT2Config c = {1024, 50257, 50304, depth, depth, 64 * depth};
    if (depth == 12) { c.channels = 768; c.num_heads = 12; }
    else if (depth == 24) { c.channels = 1024; c.num_heads = 16; }
    else if (depth == 36) { c.channels = 1280; c.num_heads = 20; }
    else if (depth == 48) { c.channels = 1600; c.num_heads = 25; }
    return c;
}

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
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) tp_local_shape(parameter_partition[i], lay.tp, &shapes[i].rows, &shapes[i].cols);
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
inline int tensor_of(int unit, int slice, int L) { return unit == 0 ? WTE + slice : unit == L + 1 ? LNFW + slice : LN1W + slice; }

// the units of this rank's part of the model; origins are unit-major, unpadded
inline Unit* gpt2_units(const TensorShape shapes[NUM_PARAMETER_TENSORS], int L) {
    Unit* units = (Unit*)calloc(L + 2, sizeof(Unit));
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        size_t count = (size_t)shapes[i].rows * shapes[i].cols;
        for (int l = 0; l < (i <= WPE || i >= LNFW ? 1 : L); l++) {
            Unit& u = units[unit_of(i, l, L)];
            u.slices[slice_of(i)] = TensorSlice{u.size, count, parameter_is_matrix[i], parameter_partition[i].split == REPLICATED};
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
    floatX* input;      // (B,T,C) the chunk's input: the embeddings (the model's first chunk) or the previous one's output
    void* layer[NUM_LAYER_ACTIVATIONS];  // per recompute.h: its layers if kept, else 1 layer every set reuses
    floatX* lnf;        // (B,T,C) last stage from here on
    float* lnf_mean;    // (B,T)
    float* lnf_rstd;    // (B,T)
    floatX* logits;     // (B,T,Vp/tp): this rank's vocabulary columns; the gradient in place after the loss
    float* losses;      // (B,T)
};

// the gradients of the outputs of a block's six weighted ops: what its B computes on the way to
// the block's input gradient, and its W reads to make the weights' (4C + 7C/tp per token)
struct LayerOutputGradients {
    floatX* fcproj;     // (B,T,C)     = the block's output gradient
    floatX* fc;         // (B,T,4C/tp) after the GELU's backward
    floatX* ln2;        // (B,T,C)     summed over TP (f's backward); -sp: this rank's B*T/tp tokens
    floatX* attproj;    // (B,T,C)     = the gradient of residual2
    floatX* qkv;        // (B,T,3C/tp)
    floatX* ln1;        // (B,T,C)     summed over TP; -sp: this rank's tokens
};
// their elements for one layer and BT tokens, on a rank of a TP group of tp (holding BT_held tokens of ln1 and ln2)
inline size_t layer_output_gradient_elements(size_t BT, size_t BT_held, size_t C, int tp) { return BT * (2 * C + 7 * C / tp) + BT_held * 2 * C; }

struct ScratchTensors {  // reused by every layer; under -sp "held" is this rank's B*T/tp tokens, else all B*T
    floatX* proj;       // (B,T,C) attproj / fcproj output before the residual add (before g's sum)
    floatX* dresidual;  // (held,C) gradient of the residual stream
    floatX* received_gradient;  // (held,C) interleaved 1F1B only: where the next one lands while dresidual leaves
    floatX* dln;        // (B,T,C) gradient of the final LayerNorm's output (before f's sum)
    floatX* gathered;   // (B,T,C) -sp only: a LayerNorm's output or a gradient, all tokens (tp.h: tp_whole)
    floatX* summed;     // (held,C) -sp only: this rank's tokens of g's or f's sum (tp.h: tp_held)
    floatX* datty;      // (B,T,C/tp)
    LayerOutputGradients layer_grads;  // one layer's, when its W follows its B at once
    AttentionScratch attention;  // attention's fp32 output, dq, dk dv, D (kernels/attention.cuh)
    RingBuffers ring;   // -cp: ring attention's [k | v] blocks in flight and a second dk dv sum (cp.h)
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
    ScheduleKind schedule;          // -ps: the pipeline schedule, pipeline.h
    int B, T;                       // activation buffers hold up to (B,T)
    std::vector<ActivationTensors> sets;  // one per micro-batch (or chunk-forward) in flight: activation_set
    StageBuffers holds;             // the sets, of them those with the head's tensors, the micro-batches
                                    // whose W waits (-ps zb), which set a chunk's micro-batch uses: pipeline.h
    floatX* waiting_grads;          // their layers' output gradients: slot k % weight_slots, then layer
    ScratchTensors scratch;
    std::vector<BufferSpec> activation_buffers;  // every buffer of the sets and the scratch, declared once
    HostStaging staging;            // the step's uploads and downloads, queued without waits (staging.h)
    DeviceClock schedule_clock;     // a pipeline's stamps around its compute actions (its bubble: pipeline.h)
    size_t memory[NUM_MEMORY_KINDS];  // bytes allocated (or, under -plan, to be), by kind
};

inline int gpt2_layers(const GPT2* m) { return layout_layers(m->layout); }
inline TensorParallel tensor_parallel(GPT2* m) { return TensorParallel{&m->comm->tp, m->layout.sequence_parallel}; }
// the tokens of a micro-batch of N that this rank's LayerNorms and residual stream hold: N/tp under -sp
inline int tokens_held(const GPT2* m, int N) { return m->layout.sequence_parallel ? N / m->layout.tp : N; }
// the ranks that split a sequence, and so what a sequence's length (-t, sampling's windows) must be
// a multiple of: -cp's 2cp chunks (cp.h), each rank's tokens split again over tp under -sp (tp.h)
inline int sequence_multiple(int cp, int tp, bool sequence_parallel) { return (cp > 1 ? 2 * cp : 1) * (sequence_parallel ? tp : 1); }
inline int gpt2_chunks(const GPT2* m) { return (int)m->layout.chunks.size(); }
// does the chunk of activation set `a` hold the embedding (the model's first chunk) or the head (its last)?
inline bool chunk_has_embedding(const GPT2* m, const ActivationTensors& a) { return is_first_stage(m->layout) && a.first_layer == 0; }
inline bool chunk_has_head(const GPT2* m, const ActivationTensors& a) {
    return is_last_stage(m->layout) && a.first_layer + a.layers == gpt2_layers(m);
}
inline int final_norm_unit(const GPT2* m) { return gpt2_layers(m) + 1; }
inline VocabRange vocab_range(const GPT2* m) { return tp_vocab_range(m->config.padded_vocab_size, m->layout.tp, m->layout.tp_rank); }

inline LayerActivations layer_activations(const GPT2* model, const ActivationTensors& a, int l, int B, int T) {
    const GPT2Config& c = model->config;
    void* at[NUM_LAYER_ACTIVATIONS];
    for (int t = 0; t < NUM_LAYER_ACTIVATIONS; t++) {
        size_t layer = recompute_keeps(model->recompute, t) ? l - a.first_layer : 0;
        at[t] = (char*)a.layer[t] + layer * layer_activation_bytes(t, B, T, c.channels, c.num_heads, model->layout.tp,
                                                                    model->layout.sequence_parallel);
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

// ----------------------------------------------------------------------------
// the plumbing, in headers of their own after the GPT2 they read and write

#include "model_file.h"  // defines: read_model_file, init_model_values, reorder_part, gpt2_write_file, write_checkpoint, resume_state, ...
#include "accounting.h"  // defines: gpt2_plan, print_plans, measured_accounting_json, bubble_json, check_memory, ...

// the model this rank holds, from -e (a model file or dN): its TP part of the whole (every
// layout starts from the same values), with ZeRO `stage` over its DP group.
// allocate = false only lays it out (-plan): no memory, no parameter values.
inline void gpt2_build(GPT2* model, const char* init, uint64_t seed, Collectives* comm, int stage, bool grads_fp32,
                       bool allocate, const char* stage_layers = NULL, int chunks = 1) {
    *model = GPT2{};
    GPT2Config c;
    float* file_values = NULL;
    if (is_depth_init(init)) {
        c = gpt2_config_for_depth(atoi(init + 1));
        gpt2_validate_config(c, "-e");
        if (allocate) file_values = init_model_values(c, seed);
    } else if (allocate) {
        file_values = read_model_file(init, &c);
    } else {
        read_model_header(init, &c, NULL);
    }
    model->config = c;
    model->comm = comm;
    int tp = comm->grid.tp, pp = comm->grid.pp;
    if (c.num_layers < pp) comm_fail_all("-pp %d: the model has %d layers, fewer than the stages", pp, c.num_layers);
    std::string error;
    model->stage_layers = stage_layer_counts(c.num_layers, pp, stage_layers, &error);
    if (model->stage_layers.empty()) comm_fail_all("-pl %s %s", stage_layers, error.c_str());
    if (chunks > 1 && c.num_layers < pp * chunks)
        comm_fail_all("-vp %d: the model has %d layers, fewer than the pp*vp = %d chunks", chunks, c.num_layers, pp * chunks);
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
              grads_fp32, allocate, model->memory);
    if (!allocate) return;
    float* values = (float*)malloc(model->num_parameters * sizeof(float));
    reorder_part(c, model->layout, model->zero.units, file_values, values, true);
    zero_set_params(&model->zero, values);
    free(values);
    free(file_values);
}

// every activation and scratch buffer for micro-batches of up to (B,T), declared once: the
// same list is allocated for training and summed for -plan. model->holds says how many sets of
// what the forward keeps (one per micro-batch in flight, pipeline.h), one of everything else.
inline std::vector<BufferSpec> activation_buffer_list(GPT2* model, int B, int T) {
    const StageBuffers& holds = model->holds;
    const GPT2Config& c = model->config;
    int tp = model->layout.tp, L = gpt2_layers(model);
    bool sp = model->layout.sequence_parallel;
    size_t ring = model->layout.cp > 1 ? 1 : 0;  // -cp: ring attention's scratch beside one rank's
    size_t BT = (size_t)B * T, BT_held = tokens_held(model, B * T), C = c.channels, C_rank = C / tp, NH_rank = c.num_heads / tp;
    ScratchTensors& s = model->scratch;
    LayerOutputGradients& g = s.layer_grads;
    const size_t X = sizeof(floatX), FP32 = sizeof(float);
    const MemoryKind KEPT = MEM_ACTIVATIONS, WORK = MEM_ACTIVATIONS_TRANSIENT;
    int set_layers = 0;  // a set holds a chunk's layers, whichever chunk it serves (one chunk: the stage's)
    for (const LayerRange& r : model->layout.chunks) set_layers = std::max(set_layers, r.end - r.begin);
    model->sets.assign(holds.activation_sets, ActivationTensors{0, set_layers});
    std::vector<BufferSpec> specs;
    for (int i = 0; i < holds.activation_sets; i++) {
        ActivationTensors& a = model->sets[i];
        // lnf, logits and losses: on the last stage, in the first head_sets sets (activation_set)
        size_t head = is_last_stage(model->layout) && i < holds.head_sets ? 1 : 0;
        std::vector<BufferSpec> kept = {
            {(void**)&a.input, BT_held * C, X, KEPT},
            {(void**)&a.lnf, head * BT_held * C, X, KEPT}, {(void**)&a.lnf_mean, head * BT_held, FP32, KEPT},
            {(void**)&a.lnf_rstd, head * BT_held, FP32, KEPT}, {(void**)&a.losses, head * BT, FP32, KEPT},
            {(void**)&a.logits, head * BT * c.padded_vocab_size / tp, X, MEM_LOGITS},
        };
        for (int t = 0; t < NUM_LAYER_ACTIVATIONS; t++)  // kept: one per layer
            if (recompute_keeps(model->recompute, t))
                kept.push_back({&a.layer[t], set_layers * layer_activation_bytes(t, B, T, C, c.num_heads, tp, sp), 1, KEPT});
        specs.insert(specs.end(), kept.begin(), kept.end());
    }
    for (int t = 0; t < NUM_LAYER_ACTIVATIONS; t++)  // not kept: one layer, which every layer and set reuses
        if (!recompute_keeps(model->recompute, t))
            specs.push_back({&model->sets[0].layer[t], layer_activation_bytes(t, B, T, C, c.num_heads, tp, sp), 1, WORK});
    // kept from B to W: the layers' output gradients
    specs.push_back({(void**)&model->waiting_grads, holds.weight_slots * L * layer_output_gradient_elements(BT, BT_held, C, tp), X, KEPT});
    std::vector<BufferSpec> scratch = {
        {(void**)&s.proj, BT * C, X, WORK}, {(void**)&s.dresidual, BT_held * C, X, WORK},
        {(void**)&s.received_gradient, gpt2_chunks(model) > 1 ? BT_held * C : 0, X, WORK},
        {(void**)&s.dln, BT * C, X, WORK}, {(void**)&s.datty, BT * C_rank, X, WORK},
        {(void**)&s.gathered, sp ? BT * C : 0, X, WORK}, {(void**)&s.summed, sp ? BT_held * C : 0, X, WORK},
        {(void**)&g.fcproj, BT * C, X, WORK}, {(void**)&g.fc, BT * 4 * C_rank, X, WORK},
        {(void**)&g.ln2, BT_held * C, X, WORK}, {(void**)&g.attproj, BT * C, X, WORK},
        {(void**)&g.qkv, BT * 3 * C_rank, X, WORK}, {(void**)&g.ln1, BT_held * C, X, WORK},
        {(void**)&s.attention.out, BT * C_rank, FP32, WORK}, {(void**)&s.attention.dq, BT * C_rank, FP32, WORK},
        {(void**)&s.attention.dkv, BT * 2 * C_rank, FP32, WORK}, {(void**)&s.attention.D, BT * NH_rank, FP32, WORK},
        {(void**)&s.ring.block[0], ring * BT * 2 * C_rank, X, WORK}, {(void**)&s.ring.block[1], ring * BT * 2 * C_rank, X, WORK},
        {(void**)&s.ring.dkv, ring * BT * 2 * C_rank, FP32, WORK},
        {(void**)&s.loss_max, BT, FP32, WORK}, {(void**)&s.loss_sum, BT, FP32, WORK}, {(void**)&s.loss_target, BT, FP32, WORK},
        {(void**)&s.logit_row, (size_t)c.padded_vocab_size, X, WORK},
        {(void**)&s.inputs, BT, sizeof(int), WORK}, {(void**)&s.targets, BT, sizeof(int), WORK},
        {(void**)&s.token_buckets, encoder_bucket_ints(B, T), sizeof(int), WORK},
        {(void**)&s.partials, column_partials_elements(std::max(2 * C + 7 * C_rank, 4 * C)), FP32, WORK},  // a block's biases, or its LayerNorms
    };
    specs.insert(specs.end(), scratch.begin(), scratch.end());
    return specs;
}

// activations for micro-batches of up to (B,T), as many in flight as `holds` says (pipeline.h's
// stage_buffers); allocate = false only books them (-plan)
inline void gpt2_allocate_activations(GPT2* model, int B, int T, int recompute, const StageBuffers& holds, bool allocate) {
    if (recompute < 0 || recompute > 3) fail("-r must be 0, 1, 2 or 3 (got %d)", recompute);
    model->B = B; model->T = T; model->recompute = recompute; model->holds = holds;
    model->activation_buffers = activation_buffer_list(model, B, T);
    allocate_buffers(model->activation_buffers.data(), (int)model->activation_buffers.size(), model->memory, allocate);
    for (ActivationTensors& a : model->sets)  // the reused layer tensors are set 0's
        for (int t = 0; t < NUM_LAYER_ACTIVATIONS; t++)
            if (!recompute_keeps(recompute, t)) a.layer[t] = model->sets[0].layer[t];
}

// ----------------------------------------------------------------------------
// a block: forward and backward

// the input of block l (local index): the chunk's input, or the previous block's output
inline floatX* block_input(GPT2* model, const ActivationTensors& a, int l, int B, int T) {
    return l == a.first_layer ? a.input : layer_activations(model, a, l - 1, B, T).residual3;
}
// what this stage (its chunk of set a) hands to the next: its last block's output
inline floatX* stage_output(GPT2* model, const ActivationTensors& a, int B, int T) {
    return block_input(model, a, a.first_layer + a.layers, B, T);
}
inline LayerParameters block_params(GPT2* model, int l) {
    return layer_parameters(model->zero.units[1 + l], zero_unit_params(&model->zero, 1 + l));
}

// the three pieces of a block that recompute.h may drop and rebuild: each is one call, made
// again, before the block's backward, by recompute_block; block_forward makes ln2 together with
// the residual add before it (residual_layernorm_forward: one pass over the rows)
inline void block_ln1(GPT2* model, const ActivationTensors& a, int l, int B, int T) {
    LayerParameters w = block_params(model, l);
    LayerActivations la = layer_activations(model, a, l, B, T);
    layernorm_forward(la.ln1, la.ln1_mean, la.ln1_rstd, block_input(model, a, l, B, T), w.ln1w, w.ln1b, tokens_held(model, B * T),
                      model->config.channels);
}
inline void block_ln2(GPT2* model, const ActivationTensors& a, int l, int B, int T) {
    LayerParameters w = block_params(model, l);
    LayerActivations la = layer_activations(model, a, l, B, T);
    layernorm_forward(la.ln2, la.ln2_mean, la.ln2_rstd, la.residual2, w.ln2w, w.ln2b, tokens_held(model, B * T), model->config.channels);
}
inline void block_gelu(GPT2* model, const ActivationTensors& a, int l, int B, int T) {
    LayerActivations la = layer_activations(model, a, l, B, T);
    gelu_forward(la.fch_gelu, la.fch, (size_t)B * T * 4 * model->config.channels / model->layout.tp);
}

// attention of the rank's heads over whole sequences: one rank's (kernels/attention.cuh), or under
// -cp, where a rank holds B sequences' T/cp zig-zag tokens (T here), round the ring (cp.h)
inline void sequence_attention_forward(GPT2* model, const LayerActivations& la, int B, int T) {
    int C_rank = model->config.channels / model->layout.tp, NH_rank = model->config.num_heads / model->layout.tp;
    const ScratchTensors& s = model->scratch;
    if (model->layout.cp > 1) ring_attention_forward(&model->comm->cp, la.atty, la.lse, la.qkv, s.attention, s.ring, B, T, C_rank, NH_rank);
    else attention_forward(la.atty, la.lse, la.qkv, s.attention, B, T, C_rank, NH_rank);
}
inline void sequence_attention_backward(GPT2* model, const LayerActivations& la, floatX* dqkv, const floatX* datty, int B, int T) {
    int C_rank = model->config.channels / model->layout.tp, NH_rank = model->config.num_heads / model->layout.tp;
    ScratchTensors& s = model->scratch;
    if (model->layout.cp > 1)
        ring_attention_backward(&model->comm->cp, dqkv, datty, la.atty, la.lse, la.qkv, s.attention, s.ring, B, T, C_rank, NH_rank);
    else attention_backward(dqkv, datty, la.atty, la.lse, la.qkv, s.attention, B, T, C_rank, NH_rank);
}

// block l (local index) on its input, writing the layer's activations; its unit must be gathered.
// Each matrix pair is f, column-parallel matrix, local work, row-parallel matrix, g (tp.h). The
// LayerNorms and the residual adds run on the tokens this rank holds (N_held: all N, or N/tp
// under -sp, when f gathers the LayerNorm's output and g scatters the sum); the pair on all N.
inline void block_forward(GPT2* model, const ActivationTensors& a, int l, int B, int T) {
    const GPT2Config& c = model->config;
    int C = c.channels, C_rank = C / model->layout.tp, N = B * T;
    size_t held = (size_t)tokens_held(model, N) * C;
    TensorParallel tp = tensor_parallel(model);
    ScratchTensors& s = model->scratch;
    LayerParameters w = block_params(model, l);
    LayerActivations la = layer_activations(model, a, l, B, T);
    floatX *ln1 = tp_whole(tp, la.ln1, s.gathered), *ln2 = tp_whole(tp, la.ln2, s.gathered);  // each's N tokens
    floatX* proj = tp_held(tp, s.proj, s.summed);  // the tokens this rank holds of g's sum
    // attention: qkv column-parallel (this rank's heads), attproj row-parallel
    block_ln1(model, a, l, B, T);
    tp_f_forward(tp, la.ln1, ln1, held);
    matmul_forward(la.qkv, ln1, w.qkvw, w.qkvb, N, C, 3 * C_rank);
    sequence_attention_forward(model, la, B, T);
    matmul_forward(s.proj, la.atty, w.attprojw, tp_bias_before_g(tp, w.attprojb), N, C_rank, C);
    tp_g_forward(tp, s.proj, proj, held);
    tp_bias_after_g(tp, proj, w.attprojb, held / C, C);  // added once: to the sum over TP ranks
    // MLP: fc column-parallel, fcproj row-parallel; first residual2 = input + proj and ln2 of it
    residual_layernorm_forward(la.residual2, la.ln2, la.ln2_mean, la.ln2_rstd, block_input(model, a, l, B, T), proj, w.ln2w, w.ln2b,
                               tokens_held(model, N), C);
    tp_f_forward(tp, la.ln2, ln2, held);
    matmul_forward(la.fch, ln2, w.fcw, w.fcb, N, C, 4 * C_rank);
    block_gelu(model, a, l, B, T);
    matmul_forward(s.proj, la.fch_gelu, w.fcprojw, tp_bias_before_g(tp, w.fcprojb), N, 4 * C_rank, C);
    tp_g_forward(tp, s.proj, proj, held);
    tp_bias_after_g(tp, proj, w.fcprojb, held / C, C);
    residual_forward(la.residual3, la.residual2, proj, held);
}

// rebuilds what recompute level r did not keep of block l, just before its backward
inline void recompute_block(GPT2* model, const ActivationTensors& a, int l, int B, int T) {
    int r = model->recompute;
    if (r >= 3) { block_forward(model, a, l, B, T); return; }
    if (r >= 2) { block_ln1(model, a, l, B, T); block_ln2(model, a, l, B, T); }
    if (r >= 1) block_gelu(model, a, l, B, T);
}

// block l's backward in two halves (pipeline.h's ZB-H1 runs them apart). B: from dout, the gradient
// of the block's output, to dinp, that of its input (the same buffer, or another); on the way, the
// gradients of the six weighted ops' outputs land in `d`, which W reads. The mirror of block_forward:
// g's backward, then f's, around each pair. The residual stream's gradient is fcproj's output's
// (g's backward: a copy into d.fcproj unless d.fcproj is dout itself, under -sp all N tokens
// gathered), then, with ln2's input gradient added, attproj's: written into d.attproj (-sp: added
// into dout, then gathered), to which ln1's is added into dinp. Given dw (W follows at once), the
// LayerNorms' parameter gradients are summed in the same passes, and W leaves them
inline void block_backward_input(GPT2* model, const ActivationTensors& a, int l, int B, int T, const LayerOutputGradients& d,
                                 floatX* dout, floatX* dinp, const LayerParameters* dw) {
    const GPT2Config& c = model->config;
    int C = c.channels, C_rank = C / model->layout.tp, N = B * T;
    int N_held = tokens_held(model, N);
    size_t held = (size_t)N_held * C;
    TensorParallel tp = tensor_parallel(model);
    ScratchTensors& s = model->scratch;
    LayerParameters w = block_params(model, l);
    LayerActivations la = layer_activations(model, a, l, B, T);
    floatX *dln2 = tp_whole(tp, d.ln2, s.gathered), *dln1 = tp_whole(tp, d.ln1, s.gathered);  // before f's sum
    // MLP
    tp_g_backward(tp, dout, d.fcproj, held);
    matmul_backward_input(d.fc, d.fcproj, w.fcprojw, N, 4 * C_rank, C);
    gelu_backward(d.fc, la.fch, d.fc, (size_t)N * 4 * C_rank);
    matmul_backward_input(dln2, d.fc, w.fcw, N, C, 4 * C_rank);
    tp_f_backward(tp, dln2, d.ln2, held);
    floatX* dresidual2 = tp.sequence_parallel ? dout : d.attproj;  // the gradient of residual2
    layernorm_backward_both(dresidual2, dout, dw ? dw->ln2w : NULL, dw ? dw->ln2b : NULL, d.ln2, la.residual2, w.ln2w, la.ln2_mean,
                            la.ln2_rstd, N_held, C, s.partials);
    // attention
    tp_g_backward(tp, dresidual2, d.attproj, held);
    matmul_backward_input(s.datty, d.attproj, w.attprojw, N, C_rank, C);
    sequence_attention_backward(model, la, d.qkv, s.datty, B, T);
    matmul_backward_input(dln1, d.qkv, w.qkvw, N, C, 3 * C_rank);
    tp_f_backward(tp, dln1, d.ln1, held);
    layernorm_backward_both(dinp, dresidual2, dw ? dw->ln1w : NULL, dw ? dw->ln1b : NULL, d.ln1, block_input(model, a, l, B, T),
                            w.ln1w, la.ln1_mean, la.ln1_rstd, N_held, C, s.partials);
}
// W: block l's parameter gradients accumulate, from `d` and the inputs its forward kept (or that
// recompute_block rebuilt). No weight is read: weight gradient = output gradient^T x input,
// LayerNorm's = sums over the tokens. Nothing crosses a rank except under -sp, where f gathers the
// LayerNorms' outputs again (the forward kept only this rank's tokens of them) and a LayerNorm's
// gradient sums over this rank's tokens only (train_step sums it over TP: sum_layernorm_gradients)
inline void block_backward_weights(GPT2* model, const ActivationTensors& a, int l, int B, int T, const LayerOutputGradients& d,
                                   bool layernorms_done) {
    int C = model->config.channels, C_rank = C / model->layout.tp, N = B * T, N_held = tokens_held(model, N);
    TensorParallel tp = tensor_parallel(model);
    ScratchTensors& s = model->scratch;
    LayerParameters dw = layer_parameters(model->zero.units[1 + l], zero_unit_grads(&model->zero, 1 + l));
    LayerActivations la = layer_activations(model, a, l, B, T);
    floatX *ln1 = tp_whole(tp, la.ln1, s.gathered), *ln2 = tp_whole(tp, la.ln2, s.gathered);
    matmul_backward_weight(dw.fcprojw, NULL, d.fcproj, la.fch_gelu, N, 4 * C_rank, C, s.partials);
    tp_f_forward(tp, la.ln2, ln2, (size_t)N_held * C);
    matmul_backward_weight(dw.fcw, NULL, d.fc, ln2, N, C, 4 * C_rank, s.partials);
    matmul_backward_weight(dw.attprojw, NULL, d.attproj, la.atty, N, C_rank, C, s.partials);
    tp_f_forward(tp, la.ln1, ln1, (size_t)N_held * C);
    matmul_backward_weight(dw.qkvw, NULL, d.qkv, ln1, N, C, 3 * C_rank, s.partials);
    // the four biases' column sums in one launch, the two LayerNorms' in another (unless B summed them)
    bias_backward_many({{dw.fcprojb, d.fcproj, C}, {dw.fcb, d.fc, 4 * C_rank}, {dw.attprojb, d.attproj, C}, {dw.qkvb, d.qkv, 3 * C_rank}},
                       N, s.partials);
    if (!layernorms_done)
        layernorm_backward_params_many({{dw.ln2w, dw.ln2b, d.ln2, la.residual2, la.ln2_mean, la.ln2_rstd},
                                        {dw.ln1w, dw.ln1b, d.ln1, block_input(model, a, l, B, T), la.ln1_mean, la.ln1_rstd}},
                                       N_held, C, s.partials);
}
// both in turn, through the scratch's one layer of output gradients: the backward of every
// schedule but ZB-H1's later stages. Where dinp is not dout, fcproj's output gradient is dout as it
// lies (no copy): W reads it before the next block writes its input's gradient there. B sums the
// LayerNorms' parameter gradients in its LayerNorm passes (one read of their inputs), W does not
inline void block_backward(GPT2* model, const ActivationTensors& a, int l, int B, int T, floatX* dout, floatX* dinp) {
    LayerOutputGradients d = model->scratch.layer_grads;
    if (dinp != dout) d.fcproj = dout;
    LayerParameters dw = layer_parameters(model->zero.units[1 + l], zero_unit_grads(&model->zero, 1 + l));
    block_backward_input(model, a, l, B, T, d, dout, dinp, &dw);
    block_backward_weights(model, a, l, B, T, d, true);
}

// ----------------------------------------------------------------------------
// the stages: embed (first stage), blocks (every stage), head and loss (last stage),
// each with its forward and backward. With one stage they are the whole model.

struct MicroBatch { const int* inputs; const int* targets; };  // host tokens (B,T); targets NULL: no loss

// the micro-batch's tokens as runs of consecutive positions: one (B,T) batch, or under -cp the
// rank's two halves, each a (B, T/2) batch from its chunk's first position on (cp.h);
// visit(first token, first position, T of the run)
template <typename Visit> inline void for_each_position_run(const GPT2* model, int B, int T, Visit visit) {
    int c = model->layout.cp;
    if (c == 1) { visit((size_t)0, 0, T); return; }
    for (int half = 0; half < 2; half++) visit((size_t)half * B * (T / 2), cp_chunk(c, model->layout.cp_rank, half) * (T / 2), T / 2);
}

// vocab-parallel embedding: this rank's wte rows (positions added on TP rank 0 only) for all B*T
// tokens, then g: summed (-sp: this rank's tokens of the sum)
inline void embed_forward(GPT2* model, const ActivationTensors& a, const int* tokens, int B, int T) {
    Zero* z = &model->zero;
    int C = model->config.channels;
    TensorParallel tp = tensor_parallel(model);
    staging_upload(&model->staging, model->scratch.inputs, tokens, (size_t)B * T * sizeof(int));
    EmbeddingParameters e = embedding_parameters(z->units[0], zero_unit_params(z, 0));
    const floatX* positions = model->layout.tp_rank == 0 ? e.wpe : NULL;
    floatX* whole = tp_whole(tp, a.input, model->scratch.proj);
    for_each_position_run(model, B, T, [&](size_t first, int position, int run) {
        encoder_forward(whole + first * C, model->scratch.inputs + first, e.wte, positions ? positions + (size_t)position * C : NULL,
                        B, run, C, vocab_range(model));
    });
    tp_g_forward(tp, whole, a.input, (size_t)tokens_held(model, B * T) * C);
}
// the embedding's backward (g's: the identity, or -sp's gather): this rank's wte rows, and wpe
inline void embed_backward(GPT2* model, const int* tokens, int B, int T) {
    Zero* z = &model->zero;
    int C = model->config.channels;
    TensorParallel tp = tensor_parallel(model);
    EmbeddingParameters de = embedding_parameters(z->units[0], zero_unit_grads(z, 0));
    floatX* dwhole = tp_whole(tp, model->scratch.dresidual, model->scratch.gathered);
    tp_g_backward(tp, model->scratch.dresidual, dwhole, (size_t)tokens_held(model, B * T) * C);
    for_each_position_run(model, B, T, [&](size_t first, int position, int run) {
        int* staged = (int*)staging_take(&model->staging, encoder_bucket_ints(B, run) * sizeof(int));
        encoder_backward(de.wte, de.wpe + (size_t)position * C, dwhole + first * C, tokens + first, model->scratch.token_buckets,
                         staged, B, run, C, vocab_range(model));
    });
}

inline void blocks_forward(GPT2* model, const ActivationTensors& a, int B, int T) {
    for (int l = a.first_layer; l < a.first_layer + a.layers; l++) {
        zero_gather_unit(&model->zero, 1 + l);
        block_forward(model, a, l, B, T);
    }
}
// under ZeRO-2/3 each layer's gradient is reduce-scattered as soon as its backward is done. The
// residual stream's gradient takes turns between scratch.dresidual and the buffer of fcproj's output
// gradient, which it stands in for (g the identity); under -sp (g gathers) it stays in one
inline void blocks_backward(GPT2* model, const ActivationTensors& a, int B, int T) {
    ScratchTensors& s = model->scratch;
    floatX *dout = s.dresidual, *dinp = model->layout.sequence_parallel ? s.dresidual : s.layer_grads.fcproj;
    for (int l = a.first_layer + a.layers - 1; l >= a.first_layer; l--) {
        zero_gather_unit(&model->zero, 1 + l);
        recompute_block(model, a, l, B, T);
        block_backward(model, a, l, B, T, dout, dinp);
        zero_reduce_unit(&model->zero, 1 + l);
        std::swap(dout, dinp);
    }
    if (dout != s.dresidual)  // an odd number of blocks: the stage's input gradient where the pipeline expects it
        device_to_device(s.dresidual, dout, (size_t)tokens_held(model, B * T) * model->config.channels * sizeof(floatX));
}
// ZB-H1 (pipeline.h): every block's B now, its output gradients kept in micro-batch k's slot...
inline LayerOutputGradients waiting_grads(GPT2* model, int k, int l) {
    size_t C = model->config.channels, C_rank = C / model->layout.tp, BT = (size_t)model->B * model->T;
    size_t BT_held = tokens_held(model, model->B * model->T);
    floatX* at = model->waiting_grads + ((size_t)(k % model->holds.weight_slots) * gpt2_layers(model) + l) *
                                        layer_output_gradient_elements(BT, BT_held, C, model->layout.tp);
    LayerOutputGradients d;
    d.fcproj = at;                at += BT * C;
    d.fc = at;                    at += BT * 4 * C_rank;
    d.ln2 = at;                   at += BT_held * C;
    d.attproj = at;               at += BT * C;
    d.qkv = at;                   at += BT * 3 * C_rank;
    d.ln1 = at;
    return d;
}
inline void blocks_backward_input(GPT2* model, const ActivationTensors& a, int k, int B, int T) {
    for (int l = a.first_layer + a.layers - 1; l >= a.first_layer; l--) {
        zero_gather_unit(&model->zero, 1 + l);
        recompute_block(model, a, l, B, T);
        block_backward_input(model, a, l, B, T, waiting_grads(model, k, l), model->scratch.dresidual, model->scratch.dresidual, NULL);
    }
}
// ...and, later, their W's. What recompute level r did not keep is rebuilt again (at r >= 2 from
// the layer's weights, gathered again under ZeRO-3); each layer's gradient is reduce-scattered
// (ZeRO-2/3) after its W, now that it is complete
inline void blocks_backward_weights(GPT2* model, const ActivationTensors& a, int k, int B, int T) {
    for (int l = a.first_layer + a.layers - 1; l >= a.first_layer; l--) {
        if (model->recompute >= 2) zero_gather_unit(&model->zero, 1 + l);
        recompute_block(model, a, l, B, T);
        block_backward_weights(model, a, l, B, T, waiting_grads(model, k, l), false);
        zero_reduce_unit(&model->zero, 1 + l);
    }
}

// final LayerNorm (this rank's tokens) and the tied LM head, column-parallel (f: identity, or -sp's
// gather): this rank's Vp/tp logit columns of all B*T tokens
inline void head_forward(GPT2* model, const ActivationTensors& a, int B, int T) {
    Zero* z = &model->zero;
    int norm_unit = final_norm_unit(model), C = model->config.channels, N_held = tokens_held(model, B * T);
    TensorParallel tp = tensor_parallel(model);
    FinalNormParameters h = final_norm_parameters(z->units[norm_unit], zero_unit_params(z, norm_unit));
    EmbeddingParameters e = embedding_parameters(z->units[0], zero_unit_params(z, 0));
    layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd, stage_output(model, a, B, T), h.lnfw, h.lnfb, N_held, C);
    floatX* lnf = tp_whole(tp, a.lnf, model->scratch.gathered);
    tp_f_forward(tp, a.lnf, lnf, (size_t)N_held * C);
    matmul_forward(a.logits, lnf, e.wte, NULL, B * T, C, vocab_range(model).rows);
}
// cross-entropy of the logits against targets (B,T), vocabulary-parallel (tp.h); with
// dloss != 0 the logits become their gradient. The B*T token losses come down without a wait:
// staging_pending_sum sums them after the step's wait (staging.h)
inline void head_loss(GPT2* model, const ActivationTensors& a, const int* targets, int B, int T, float dloss) {
    int N = B * T;
    ScratchTensors& s = model->scratch;
    staging_upload(&model->staging, s.targets, targets, N * sizeof(int));
    tp_crossentropy(&model->comm->tp, a.logits, a.losses, s.targets, LossStatistics{s.loss_max, s.loss_sum, s.loss_target},
                    N, model->config.vocab_size, vocab_range(model), dloss);
    staging_download_floats(&model->staging, a.losses, N);
}
// the head's backward from dlogits (in a.logits): f sums d(lnf) over TP; dresidual becomes the
// gradient of the stage's output. Under -sp, lnf is gathered again for wte's gradient
inline void head_backward(GPT2* model, const ActivationTensors& a, int B, int T) {
    Zero* z = &model->zero;
    int norm_unit = final_norm_unit(model), C = model->config.channels, N = B * T, N_held = tokens_held(model, N);
    size_t held = (size_t)N_held * C;
    TensorParallel tp = tensor_parallel(model);
    ScratchTensors& s = model->scratch;
    EmbeddingParameters e = embedding_parameters(z->units[0], zero_unit_params(z, 0));
    EmbeddingParameters de = embedding_parameters(z->units[0], zero_unit_grads(z, 0));
    FinalNormParameters h = final_norm_parameters(z->units[norm_unit], zero_unit_params(z, norm_unit));
    FinalNormParameters dh = final_norm_parameters(z->units[norm_unit], zero_unit_grads(z, norm_unit));
    floatX *lnf = tp_whole(tp, a.lnf, s.gathered), *dln = tp_held(tp, s.dln, s.summed);
    tp_f_forward(tp, a.lnf, lnf, held);
    matmul_backward(s.dln, de.wte, NULL, a.logits, lnf, e.wte, N, C, vocab_range(model).rows, s.partials);
    tp_f_backward(tp, s.dln, dln, held);
    device_zero(s.dresidual, held * sizeof(floatX));
    layernorm_backward(s.dresidual, dh.lnfw, dh.lnfb, dln, stage_output(model, a, B, T), h.lnfw, a.lnf_mean, a.lnf_rstd, N_held, C,
                       s.partials);
}

// one micro-batch through this stage, or through the chunk of it that set `a` is for (interleaved
// 1F1B): a.input holds its input unless the chunk is the model's first. On the model's last chunk,
// with targets, its token losses are queued for staging_pending_sum. A collective under ZeRO-3
// (over DP) and TP.
inline void stage_forward(GPT2* model, const ActivationTensors& a, const MicroBatch& mb, int B, int T, float dloss) {
    if (B > model->B || T > model->T) fail("forward with (B=%d,T=%d) exceeds the allocated (%d,%d)", B, T, model->B, model->T);
    bool embedding = chunk_has_embedding(model, a), head = chunk_has_head(model, a);
    if (embedding || head) zero_gather_unit(&model->zero, 0);  // ZeRO-3: the embeddings and the final LayerNorm
    if (head) zero_gather_unit(&model->zero, final_norm_unit(model));  // stay gathered through the micro-batch
    if (embedding) embed_forward(model, a, mb.inputs, B, T);
    blocks_forward(model, a, B, T);
    if (!head) return;
    head_forward(model, a, B, T);
    if (mb.targets) head_loss(model, a, mb.targets, B, T, dloss);
}
// its backward: on the model's last chunk from its loss, elsewhere from the gradient of the
// output in scratch.dresidual, which ends as the gradient of the input. With weights_later
// (ZB-H1) the blocks run only their B, and blocks_backward_weights their W; the head and the
// embedding stay whole (the head's W would keep the logits' gradient, Vp/tp per token)
inline void stage_backward(GPT2* model, const ActivationTensors& a, const MicroBatch& mb, int k, int B, int T, bool weights_later) {
    bool embedding = chunk_has_embedding(model, a), head = chunk_has_head(model, a);
    if (head) head_backward(model, a, B, T);
    if (head) zero_reduce_unit(&model->zero, final_norm_unit(model));
    if (weights_later) blocks_backward_input(model, a, k, B, T);
    else blocks_backward(model, a, B, T);
    if (embedding) embed_backward(model, mb.inputs, B, T);
    if (embedding || head) zero_reduce_unit(&model->zero, 0);  // wte: from the head (last stage) and the lookup (first)
}

// ----------------------------------------------------------------------------
// the pipeline: this stage as pipeline.h's executor sees it

// micro-batch k's activations in chunk v: set k % sets (pipeline_activation_sets), or under
// interleaved 1F1B the set the schedule gives it (interleaved_set_slots), with the head's tensors
// (lnf, logits, losses) of set k % head_sets: they live from forward to B, which fewer micro-batches
// are between under ZB-H1 (pipeline_backward_sets). The set is for chunk v's layers
inline ActivationTensors activation_set(const GPT2* model, int v, int k) {
    const std::vector<int>& slots = model->holds.set_slots;  // (chunk, micro-batch) -> set, interleaved
    int m = (int)slots.size() / gpt2_chunks(model);
    ActivationTensors a = model->sets[slots.empty() ? k % model->sets.size() : slots[v * m + k]];
    a.first_layer = 0;
    for (int u = 0; u < v; u++) a.first_layer += model->layout.chunks[u].end - model->layout.chunks[u].begin;
    a.layers = model->layout.chunks[v].end - model->layout.chunks[v].begin;
    const ActivationTensors& head = model->sets[k % model->holds.head_sets];
    a.lnf = head.lnf; a.lnf_mean = head.lnf_mean; a.lnf_rstd = head.lnf_rstd; a.logits = head.logits; a.losses = head.losses;
    return a;
}

// this stage for one step's micro-batches: forward k and backward k of chunk v (0 but under
// interleaved 1F1B), micro-batch k's input and output, and scratch.dresidual as the one gradient
// buffer (block_backward and head_backward already use it for the gradient of the residual
// stream; interleaved schedules land the next one in scratch.received_gradient). Activations
// and gradients travel as (B,T,C) floatX, under -sp (B*T/tp, C): each TP rank's own tokens.
inline PipelineStage pipeline_stage(GPT2* model, const std::vector<MicroBatch>& batches, float dloss, int B, int T) {
    PipelineStage stage;
    stage.forward = [=, &batches](int v, int k) {  // the loss: summed after the step's wait (staging.h), not here
        stage_forward(model, activation_set(model, v, k), batches[k], B, T, dloss);
        return 0.0;
    };
    stage.backward = [=, &batches](int v, int k) {
        stage_backward(model, activation_set(model, v, k), batches[k], k, B, T, false);
        zero_end_micro_step(&model->zero);
    };
    stage.backward_input = [=, &batches](int v, int k) {  // -ga fp32: each micro-batch's gradients are folded
        stage_backward(model, activation_set(model, v, k), batches[k], k, B, T, true);  // into the fp32 sum
        zero_end_micro_step(&model->zero);         // alone, the head's after B, the layers' after W
    };
    stage.backward_weight = [=](int v, int k) {
        blocks_backward_weights(model, activation_set(model, v, k), k, B, T);
        zero_end_micro_step(&model->zero);
    };
    stage.input = [=](int v, int k) { return activation_set(model, v, k).input; };
    stage.output = [=](int v, int k) { return stage_output(model, activation_set(model, v, k), B, T); };
    stage.gradient = model->scratch.dresidual;
    stage.received_gradient = model->scratch.received_gradient;
    stage.message_elements = (size_t)tokens_held(model, B * T) * model->config.channels;  // -sp: each TP rank its tokens
    return stage;
}

// this rank's tokens of a (B,T) micro-batch: all of them, or under -cp its zig-zag chunks of each
// sequence, in cp_batch_index's order (cp.h)
inline std::vector<int> tokens_of_rank(const GPT2* model, const int* tokens, int B, int T) {
    int c = model->layout.cp;
    std::vector<int> mine((size_t)B * T / c);
    for (size_t i = 0; i < mine.size(); i++) mine[i] = tokens[c == 1 ? i : cp_batch_index(c, model->layout.cp_rank, B, T, i)];
    return mine;
}

// one micro-batch through every stage, forward only (validation, sampling), in set 0; returns
// the token losses' sum on the last stage (0 elsewhere, and without targets)
inline double forward_only(GPT2* model, const MicroBatch& mb, int B, int T) {
    std::vector<MicroBatch> one = {mb};
    pipeline_forward(pipeline_stage(model, one, 0.0f, B, T), &model->comm->pp, gpt2_chunks(model));
    return staging_pending_sum(&model->staging);
}

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
    for_each_layernorm_gradient(model, [&](size_t at, size_t n) { zero_sum_gradient_range(&model->zero, at, n, &model->comm->tp); });
}

inline void gpt2_free(GPT2* model) {
    for (const BufferSpec& b : model->activation_buffers) device_free(*b.ptr);
    zero_free(&model->zero);
    staging_free(&model->staging);
    device_clock_free(&model->schedule_clock);
}

// ----------------------------------------------------------------------------
// training step, validation, sampling

struct StepResult { double loss, norm; float lr, scale; bool skipped; ScheduleTiming timing; };

// one optimizer step: the step's micro-batches through this stage's schedule (pipeline.h;
// without a pipeline: forward, loss and backward of each in turn) on this rank's slice of
// the batch, then the gradient reductions (zero.h; the tied embedding's two copies), the
// finite check, unscaling, clipping and AdamW. `step` counts from 0.
inline StepResult train_step(GPT2* model, DataLoader* loader, LossScaler* scaler, const TrainConfig& tc,
                             int grad_accum, int step, int max_steps) {
    int B = tc.B, T = tc.T, T_rank = T / model->layout.cp, dp = model->comm->grid.dp;
    size_t BT = (size_t)B * T_rank;  // each micro-batch's uploads and downloads (staging.h): tokens, targets, losses, and
    staging_reserve(&model->staging, grad_accum * (3 * BT * 4 + 2 * encoder_bucket_ints(B, T_rank) * 4 + 5 * 64));
    staging_rewind(&model->staging);  // the buckets of up to two position runs (-cp), each piece padded to 64 bytes
    double tokens_per_step = (double)B * T * grad_accum * dp;
    StepResult r = {0.0, 0.0, 0.0f, scaler->scale, false, {}};
    r.timing.clock = model->layout.pp > 1 ? &model->schedule_clock : NULL;  // the bubble, measured with a pipeline
    // the step's loss is the mean over all its tokens on all ranks: summing gradients over
    // micro-steps and ranks gives the gradient of the mean; times the loss scale
    float dloss = (float)(scaler->scale / tokens_per_step);
    // every stage reads the same micro-batches: its DP rank's slice of each, in order (-cp: the
    // rank's T/cp tokens of each sequence)
    std::vector<std::vector<int>> inputs(grad_accum), targets(grad_accum);
    std::vector<MicroBatch> batches(grad_accum);
    for (int k = 0; k < grad_accum; k++) {
        dataloader_next_batch(loader);
        inputs[k] = tokens_of_rank(model, loader->inputs, B, T);
        targets[k] = tokens_of_rank(model, loader->targets, B, T);
        batches[k] = MicroBatch{inputs[k].data(), targets[k].data()};
    }
    zero_begin_step(&model->zero);
    std::vector<PipelineAction> schedule = pipeline_schedule(model->schedule, model->layout.pp_rank, model->layout.pp, grad_accum,
                                                             gpt2_chunks(model));
    run_schedule(pipeline_stage(model, batches, dloss, B, T_rank), schedule, &model->comm->pp, &r.timing);
    if (tc.inject_nonfinite_step == step + 1) zero_poison_gradients(&model->zero);
    zero_reduce_step(&model->zero);
    zero_sum_unit_gradient(&model->zero, 0, &model->comm->embedding);  // the tied wte: first + last stage
    sum_layernorm_gradients(model);  // -sp: each TP rank's tokens
    r.lr = learning_rate_at(step, tc.lr, tc.warmup, max_steps, tc.final_fraction);
    double norm_squared = gpt2_grad_norm_squared(model);  // the step's wait: the host decides on it
    r.norm = sqrt(norm_squared) / scaler->scale;  // unscaled before clipping
    double loss_sum = staging_pending_sum(&model->staging);  // landed by now: the last stage's token losses
    schedule_timing_read(&r.timing);                         // and the schedule's stamps passed
    comm_all_reduce_scalars(&model->comm->pp, &loss_sum, 1);
    comm_all_reduce_scalars(&model->comm->dp, &loss_sum, 1);
    r.loss = loss_sum / tokens_per_step;
    if (!loss_scaler_update(scaler, isfinite(norm_squared))) {
        r.skipped = true;
        return r;
    }
    float clip_scale = (tc.grad_clip > 0.0f && r.norm > tc.grad_clip) ? (float)(tc.grad_clip / r.norm) : 1.0f;
    int t = ++model->adam_steps;
    uint64_t rounding_seed = random_u32((uint64_t)tc.seed, (uint64_t)t);  // fresh stochastic-rounding bits every step
    TraceSpan span(model->comm->world.trace, [] { return std::string("optimizer step"); }, "optimizer", model->comm->grid.rank);
    zero_optimizer_step(&model->zero, r.lr, tc.weight_decay, clip_scale / r.scale, t, rounding_seed);
    zero_gather_updated(&model->zero);
    return r;
}

// mean loss over the first `batches` micro-batches of the validation data
inline double gpt2_validate(GPT2* model, DataLoader* loader, int batches) {
    dataloader_reset(loader);
    double sum = 0.0;
    for (int i = 0; i < batches; i++) {
        dataloader_next_batch(loader);
        std::vector<int> inputs = tokens_of_rank(model, loader->inputs, loader->B, loader->T);
        std::vector<int> targets = tokens_of_rank(model, loader->targets, loader->B, loader->T);
        sum += forward_only(model, MicroBatch{inputs.data(), targets.data()}, loader->B, loader->T / model->layout.cp);
    }
    comm_all_reduce_scalars(&model->comm->pp, &sum, 1);
    comm_all_reduce_scalars(&model->comm->dp, &sum, 1);  // over dp x cp: each cp rank has its tokens' losses
    return sum / ((double)batches * loader->B * loader->T * model->comm->grid.dp);
}

// the logits that follow `context` tokens, into scratch.logit_row on every rank: one forward of
// them padded with EOT to a multiple of the ranks that split the sequence (-sp's tp, -cp's 2cp
// chunks; attention is causal, so what follows the last real position does not change its
// logits). The last stage all-gathers that position's logit columns from its TP ranks; under -cp
// the rank holding the position sends them round its ring; then to the other stages.
inline void next_token_logits(GPT2* model, const int* context_tokens, int context) {
    const ModelLayout& lay = model->layout;
    int Vp = model->config.padded_vocab_size, columns = vocab_range(model).rows;
    int multiple = sequence_multiple(lay.cp, lay.tp, lay.sequence_parallel);
    int padded = (context + multiple - 1) / multiple * multiple;  // <= T, a multiple of `multiple` (check_batch_flags)
    std::vector<int> window(padded, GPT2_EOT);
    std::copy(context_tokens, context_tokens + context, window.begin());
    std::vector<int> mine = tokens_of_rank(model, window.data(), 1, padded);
    forward_only(model, MicroBatch{mine.data(), NULL}, 1, padded / lay.cp);
    int owner = 0;                  // the cp rank holding the last position, and its row there
    size_t row = context - 1;
    if (lay.cp > 1) cp_locate(lay.cp, padded, context - 1, &owner, &row);
    if (is_last_stage(lay)) {
        comm_all_gather(&model->comm->tp, activation_set(model, gpt2_chunks(model) - 1, 0).logits + row * columns,
                        model->scratch.logit_row, columns);
        comm_broadcast(&model->comm->cp, model->scratch.logit_row, Vp, owner);
    }
    comm_broadcast(&model->comm->pp, model->scratch.logit_row, Vp, lay.pp - 1);
}

// samples `n` tokens after EOT at `temperature`, one full forward per token over the last
// T tokens (simple, not fast: no KV cache). A collective: every rank calls it with the
// same Rng state and so draws the same tokens.
inline void gpt2_sample(GPT2* model, int* out, int n, float temperature, Rng* rng) {
    const GPT2Config& c = model->config;
    int T = model->T * model->layout.cp;  // a whole sequence (activations hold T/cp of it)
    std::vector<int> tokens(n + 1);
    std::vector<floatX> row(c.padded_vocab_size);
    std::vector<double> weights(c.vocab_size);
    tokens[0] = GPT2_EOT;
    for (int t = 1; t <= n; t++) {
        int context = t < T ? t : T;
        next_token_logits(model, tokens.data() + (t - context), context);
        device_to_host(row.data(), model->scratch.logit_row, c.padded_vocab_size * sizeof(floatX));
        float maxval = -INFINITY;
        for (int v = 0; v < c.vocab_size; v++) maxval = fmaxf(maxval, to_float(row[v]));
        double sum = 0.0;
        for (int v = 0; v < c.vocab_size; v++) sum += weights[v] = exp((to_float(row[v]) - maxval) / temperature);
        double u = rng_uniform(rng) * sum, acc = 0.0;
        int next = c.vocab_size - 1;
        for (int v = 0; v < c.vocab_size; v++) {
            acc += weights[v];
            if (u < acc) { next = v; break; }
        }
        tokens[t] = out[t - 1] = next;
    }
}

// one JSON object per optimizer step (docs/flags.md: Log rows)
inline void log_step(FILE* log, int step, const StepResult& r, double ms, int tokens, double mfu, bool scaling, bool validated,
                     double val_loss, bool sampled, const std::string& sample, const std::string& accounting,
                     const std::string& bubble) {
    char norm[32] = "null", utilization[32] = "null";  // JSON has no inf or nan: a skipped step's norm; no known peak
    if (isfinite(r.norm)) snprintf(norm, sizeof(norm), "%.17g", r.norm);
    if (mfu >= 0.0) snprintf(utilization, sizeof(utilization), "%.6g", mfu);
    fprintf(log, "{\"step\": %d, \"loss\": %.17g, \"lr\": %.9g, \"norm\": %s, \"ms\": %.3f, \"tok_per_s\": %.1f, \"mfu\": %s",
            step, r.loss, r.lr, norm, ms, tokens / (ms / 1000.0), utilization);
    if (scaling) fprintf(log, ", \"scale\": %.9g", r.scale);
    if (r.skipped) fprintf(log, ", \"skipped\": true");
    if (validated) fprintf(log, ", \"val_loss\": %.9g", val_loss);
    if (sampled) fprintf(log, ", \"sample\": \"%s\"", json_escape_utf8(sample).c_str());
    fprintf(log, "%s%s}\n", bubble.c_str(), accounting.c_str());
    fflush(log);
}

// ----------------------------------------------------------------------------
// main and the steps of a run

// the flags every rank checks alike (one line on every rank, exit 1); returns the
// accumulation steps per optimizer step
inline int check_batch_flags(TrainConfig* tc, const ProcessGrid& grid) {
    int schedule = schedule_kind_from_name(tc->schedule);
    if (schedule < 0) comm_fail_all("-ps expects 1f1b, gpipe, zb or interleaved, got '%s'", tc->schedule);
    if (tc->chunks > 1 && (schedule != SCHEDULE_INTERLEAVED || grid.pp == 1))
        comm_fail_all("-vp %d: model chunks are for -ps interleaved with -pp > 1", tc->chunks);
    if (schedule == SCHEDULE_INTERLEAVED && tc->stage_layers)
        comm_fail_all("-pl with -ps interleaved: its chunks split the layers evenly (pipeline.h)");
    if (tc->sequence_parallel && grid.tp == 1) comm_fail_all("-sp 1 splits the tokens over the TP ranks; it needs -tp > 1");
    int multiple = sequence_multiple(grid.cp, grid.tp, tc->sequence_parallel);  // micro-batches, sampling's windows up to T
    if (grid.cp == 1 && tc->T % multiple != 0)
        comm_fail_all("-sp 1: -t %d must be a multiple of -tp %d, each TP rank holding 1/tp of the tokens", tc->T, grid.tp);
    if (grid.cp > 1 && tc->T % multiple != 0)
        comm_fail_all("-cp %d: -t %d must be a multiple of 2*cp%s = %d: each sequence is cut into 2cp chunks (cp.h)%s", grid.cp,
                      tc->T, tc->sequence_parallel ? "*tp" : "", multiple, tc->sequence_parallel ? ", each rank's split over tp" : "");
    if ((long long)tc->B * tc->T * grid.dp * grid.pp > INT_MAX)  // token counts and indices are int
        comm_fail_all("-b %d x -t %d x dp %d x pp %d tokens per step overflow a 32-bit index; make -b or -t smaller", tc->B,
                      tc->T, grid.dp, grid.pp);
    int tokens_per_micro = tc->B * tc->T * grid.dp;
    if (tc->total_batch_tokens == -1) tc->total_batch_tokens = tokens_per_micro * grid.pp;  // m = p micro-batches
    if (tc->total_batch_tokens <= 0 || tc->total_batch_tokens % tokens_per_micro != 0)
        comm_fail_all("-d %d is not a multiple of B*T*dp = %d*%d*%d = %d", tc->total_batch_tokens, tc->B, tc->T, grid.dp, tokens_per_micro);
    int micro_batches = tc->total_batch_tokens / tokens_per_micro;
    if (schedule == SCHEDULE_INTERLEAVED && micro_batches % grid.pp != 0)  // pipeline.h: interleaved_schedule
        comm_fail_all("-ps interleaved needs the micro-batches per step to be a multiple of -pp %d; -d %d gives %d",
                      grid.pp, tc->total_batch_tokens, micro_batches);
    if (micro_batches < grid.pp && grid.rank == 0)
        printf("note: %d micro-batches for %d pipeline stages: every stage idles at least (p-1)/(m+p-1) = %.0f%% of each step; "
               "raise -d for a smaller bubble\n", micro_batches, grid.pp, 100.0 * pipeline_bubble_fraction(grid.pp, micro_batches));
    if (tc->max_steps == 0) comm_fail_all("-x must be -1 (one epoch) or a number of steps, not 0");
    if (strcmp(tc->grad_accum_type, "fp32") != 0 && strcmp(tc->grad_accum_type, "floatX") != 0)
        comm_fail_all("-ga expects floatX or fp32, got '%s'", tc->grad_accum_type);
    check_ledger_flags(*tc, grid);
    return micro_batches;
}

inline void print_run_header(const GPT2* model, const TrainConfig& tc, bool use_nccl, int grad_accum, int max_steps,
                             const DataLoader& train_loader) {
    const GPT2Config& c = model->config;
    const ProcessGrid& g = model->comm->grid;
    printf("train_gpt | %s | %s | model L=%d NH=%d C=%d V=%d Vp=%d maxT=%d | %zu parameters on rank 0\n", device_name(),
           PRECISION_NAME, c.num_layers, c.num_heads, c.channels, c.vocab_size, c.padded_vocab_size, c.max_seq_len,
           model->num_parameters);
    printf("grid: %d ranks = dp %d x cp %d x tp %d%s x pp %d | ZeRO-%d | %s collectives", g.world, g.dp, g.cp, g.tp,
           tc.sequence_parallel ? " (sequence-parallel)" : "", g.pp, tc.zero_stage, use_nccl ? "NCCL" : "MPI");
    if (g.pp > 1)  // pipeline.h's formula: (p-1)/(m+p-1), ZB-H1's, or interleaved's (p-1)/(Vm+p-1)
        printf(" | %s schedule, %d chunk(s) a stage, bubble %.3f with equal stages", tc.schedule, gpt2_chunks(model),
               schedule_bubble_formula(model->schedule, g.pp, grad_accum, gpt2_chunks(model)));
    printf("\n");
    printf("batch: B=%d T=%d dp=%d, %d tokens per step = %d accumulation steps | %d steps | train %s (%zu tokens)\n",
           tc.B, tc.T, g.dp, tc.total_batch_tokens, grad_accum, max_steps, tc.train_pattern, train_loader.total_tokens);
}


// the step line; elapsed: seconds since this run's first step, steps_run: steps since then
inline void print_step(int done, int max_steps, const StepResult& r, double ms, int tokens, double mfu, bool scaling, double elapsed,
                       int steps_run) {
    double eta = elapsed / steps_run * (max_steps - done);
    printf("step %5d/%d | loss %.6f | norm %.4f | lr %.3e | %.1f ms | %.0f tok/s", done, max_steps, r.loss, r.norm, r.lr, ms,
           tokens / (ms / 1000.0));
    if (mfu >= 0.0) printf(" | MFU %.1f%%", 100.0 * mfu);
    printf(" | %.0f s elapsed, ETA %.0f s", elapsed, eta);
    if (scaling) printf(" | scale %g", r.scale);
    printf("%s\n", r.skipped ? " | skipped: non-finite gradients" : "");
    if (r.skipped && !scaling) fprintf(stderr, "warning: step %d had non-finite gradients and was skipped\n", done);
}

// `n` sampled tokens as text (ids when there is no decoder); a collective
inline std::string sample_text(GPT2* model, const TrainConfig& tc, Rng* rng, const Decoder* decoder, bool can_decode) {
    std::vector<int> tokens(tc.gen_tokens);
    gpt2_sample(model, tokens.data(), tc.gen_tokens, tc.temperature, rng);
    std::string text;
    for (int i = 0; i < tc.gen_tokens; i++) {
        if (can_decode) decode_append(decoder, tokens[i], &text);
        else text += (i ? " " : "") + std::to_string(tokens[i]);
    }
    return text;
}

// -trace: rank 0 writes every rank's spans, one track per rank named by its place in the grid (a collective)
inline void write_trace(Collectives* comm, Trace* trace, const char* path) {
    trace->on = false;
    std::vector<char> mine(trace->events.begin(), trace->events.end());
    std::vector<std::vector<char>> all = comm_gatherv_to_root(&comm->world, mine);
    const ProcessGrid& g = comm->grid;
    if (g.rank != 0) return;
    std::vector<std::string> names;
    for (int q = 0; q < g.world; q++) {
        ProcessGrid other = make_grid(g.world, q, g.tp, g.pp, g.cp);
        names.push_back("rank " + std::to_string(q) + ": stage " + std::to_string(other.pp_rank) + ", dp " +
                        std::to_string(other.dp_rank) + ", tp " + std::to_string(other.tp_rank));
    }
    trace_write_file(path, all, names);
}

// the model this rank holds and its activations for the schedule; allocate = false lays them
// out and books their bytes without allocating (-plan, the memory check)
inline void build_model(GPT2* model, const TrainConfig& tc, Collectives* comm, int grad_accum, bool allocate) {
    gpt2_build(model, tc.init, (uint64_t)tc.seed, comm, tc.zero_stage, strcmp(tc.grad_accum_type, "fp32") == 0, allocate,
               tc.stage_layers, tc.chunks);
    model->layout.sequence_parallel = tc.sequence_parallel;
    model->layout.cp = comm->grid.cp;
    model->layout.cp_rank = comm->grid.cp_rank;
    if (tc.T > model->config.max_seq_len) comm_fail_all("-t %d exceeds the model's maximum sequence length %d", tc.T, model->config.max_seq_len);
    model->schedule = (ScheduleKind)schedule_kind_from_name(tc.schedule);
    StageBuffers holds = stage_buffers(model->schedule, model->layout.pp_rank, model->layout.pp, grad_accum, tc.chunks);
    gpt2_allocate_activations(model, tc.B, tc.T / comm->grid.cp, tc.recompute, holds, allocate);  // -cp: T/cp of each sequence
}

// what the training loop carries from step to step
struct Run {
    GPT2* model;
    const TrainConfig* tc;
    DataLoader train_loader, val_loader;
    bool validate;
    int grad_accum, max_steps, resume_step;
    LossScaler scaler;
    Rng sample_rng;    // the same on every rank: sampling is a collective
    Decoder decoder;
    bool can_decode;
    FILE* log;         // rank 0, with -log
    Trace trace;       // -trace
    double flops_per_token;  // mfu.h: the model's, 6 N + 6 L C T
    PeakFlops peak;          // mfu.h: every rank's peak FLOP/s summed (0: unknown)
};

// the sequences per rank that validation reads: B, or fewer when the smallest validation shard holds
// less than one global micro-batch (dp x B x T + 1 tokens: tinyshakespeare's at 8 ranks); 0, off
inline int validation_batch(const TrainConfig& tc, const ProcessGrid& grid) {
    size_t tokens = dataloader_smallest_shard(tc.val_pattern);
    int B = (int)std::min((size_t)tc.B, tokens > 0 ? (tokens - 1) / ((size_t)grid.dp * tc.T) : 0);
    if (B < tc.B && B > 0 && grid.rank == 0)
        printf("note: validating on B=%d sequences per rank: %s holds %zu tokens, fewer than dp %d x B %d x T %d + 1\n", B,
               tc.val_pattern, tokens, grid.dp, tc.B, tc.T);
    if (B == 0 && grid.rank == 0)
        printf("note: validation is off: %s holds %zu tokens, fewer than one sequence per rank (dp %d x T %d + 1)\n",
               tc.val_pattern, tokens, grid.dp, tc.T);
    return B;
}

// the training and validation shards (every rank reads its DP rank's slices) and the number of steps
inline void open_data(Run* run) {
    const TrainConfig& tc = *run->tc;
    const ProcessGrid& grid = run->model->comm->grid;
    int V = run->model->config.vocab_size;
    if (!file_exists(tc.train_pattern) && strpbrk(tc.train_pattern, "*?[") == NULL)
        comm_fail_all("training shards %s not found: run `make data` for tinyshakespeare, or pass -i", tc.train_pattern);
    if (strcmp(tc.train_pattern, TrainConfig{}.train_pattern) == 0 && grid.rank == 0)
        printf("training on %s, validating on %s: the default shards of `make data`\n", tc.train_pattern, tc.val_pattern);
    dataloader_init(&run->train_loader, tc.train_pattern, tc.B, tc.T, grid.dp_rank, grid.dp, V, tc.shuffle != 0, (uint64_t)tc.seed);
    int val_B = tc.val_every > 0 && tc.val_batches > 0 ? validation_batch(tc, grid) : 0;
    run->validate = val_B > 0;
    if (run->validate) dataloader_init(&run->val_loader, tc.val_pattern, val_B, tc.T, grid.dp_rank, grid.dp, V, false, 0);
    run->max_steps = tc.max_steps > 0 ? tc.max_steps : (int)(run->train_loader.total_tokens / tc.total_batch_tokens);
    if (run->max_steps <= 0) comm_fail_all("the training shards hold fewer tokens than one step (-d %d)", tc.total_batch_tokens);
}

// what the step line's MFU is against (mfu.h): the model's FLOPs per token and every rank's peak, said once
inline void measure_peak(Run* run) {
    const GPT2Config& c = run->model->config;
    run->flops_per_token = model_flops_per_token(whole_parameter_count(c), c.num_layers, c.channels, run->tc->T);
    run->peak = world_peak_flops(device_name());
    int world = run->model->comm->grid.world;
    if (run->model->comm->grid.rank != 0) return;
    if (run->peak.per_s > 0.0)
        printf("MFU: 6N + 6LCT = %.4g FLOPs per token against %.4g FLOP/s (%d rank%s: %s)\n", run->flops_per_token,
               run->peak.per_s, world, world > 1 ? "s" : "", run->peak.source.c_str());
    else
        printf("MFU: not known for this device (%s): not in mfu.h's table\n", run->peak.source.c_str());
}

// the steps, each followed by what the flags ask for: log, validation, samples, trace, checkpoint
inline void train_loop(Run* run) {
    GPT2* model = run->model;
    const TrainConfig& tc = *run->tc;
    int rank = model->comm->grid.rank;
    auto began = std::chrono::steady_clock::now();
    watchdog_start(tc.timeout, rank, model->comm->grid.world);
    for (int step = run->resume_step; step < run->max_steps; step++) {
        watchdog_step(step + 1);
        if (rank == model->comm->grid.world - 1 && (tc.stop_at_step == step + 1 || tc.kill_at_step == step + 1))
            raise(tc.stop_at_step == step + 1 ? SIGSTOP : SIGKILL);  // a test's hung or dead rank
        if (tc.trace_path && step == run->resume_step) { comm_barrier(&model->comm->world); trace_start(&run->trace); }
        CommLedger sent_before = comm_ledger(model);
        device_synchronize();
        auto start = std::chrono::steady_clock::now();
        StepResult r = train_step(model, &run->train_loader, &run->scaler, tc, run->grad_accum, step, run->max_steps);
        device_synchronize();
        double ms = ms_since(start);
        int done = step + 1;
        bool last = done == run->max_steps;
        double mfu = mfu_of(run->flops_per_token, tc.total_batch_tokens / (ms / 1000.0), run->peak.per_s);
        if (rank == 0) print_step(done, run->max_steps, r, ms, tc.total_batch_tokens, mfu, run->scaler.enabled,
                                  ms_since(began) / 1000.0, done - run->resume_step);
        // the first step's measured memory and traffic, per rank, in the log beside the plan
        std::string accounting = step == run->resume_step ? measured_accounting_json(model, sent_before) : "";
        bool validated = run->validate && (done % tc.val_every == 0 || last);
        double val_loss = validated ? gpt2_validate(model, &run->val_loader, tc.val_batches) : 0.0;
        if (validated && rank == 0) printf("val loss %.6f\n", val_loss);
        bool sampled = tc.sample_every > 0 && tc.gen_tokens > 0 && done % tc.sample_every == 0;
        std::string sample = sampled ? sample_text(model, tc, &run->sample_rng, &run->decoder, run->can_decode) : "";
        if (sampled && rank == 0) printf("sample%s:\n---\n%s\n---\n", run->can_decode ? "" : " (token ids)", sample.c_str());
        std::string bubble = bubble_json(model, r.timing, run->grad_accum);
        if (run->log) log_step(run->log, done, r, ms, tc.total_batch_tokens, mfu, run->scaler.enabled, validated, val_loss, sampled,
                               sample, accounting, bubble);
        if (run->trace.on && (done - run->resume_step == tc.trace_steps || last)) write_trace(model->comm, &run->trace, tc.trace_path);
        if (tc.output_dir && ((tc.checkpoint_every > 0 && done % tc.checkpoint_every == 0) || last))
            write_checkpoint(model, tc, done, run->scaler, run->train_loader, run->sample_rng);
    }
    watchdog_stop();
}

#ifndef TESTING
// the tests' faults, from the environment (not flags: no user wants them): a non-finite gradient, a
// rank that dies writing a checkpoint, a rank that stops (the watchdog's case) or dies as a step begins
inline void read_fault_injections(TrainConfig* tc) {
    if (const char* inject = getenv("TRAIN_GPT_INJECT_NONFINITE")) tc->inject_nonfinite_step = atoi(inject);
    if (const char* die = getenv("TRAIN_GPT_DIE_IN_CHECKPOINT")) tc->die_in_checkpoint = atoi(die);
    if (const char* stop = getenv("TRAIN_GPT_STOP_AT_STEP")) tc->stop_at_step = atoi(stop);
    if (const char* kill = getenv("TRAIN_GPT_KILL_AT_STEP")) tc->kill_at_step = atoi(kill);
}

int main(int argc, char** argv) {
    int world, rank, local_rank;
    cpu_wait_politely(argv);      // the CPU build: idle OpenMP threads yield the core soon (restarts itself once)
    device_choose_before_mpi();  // a CUDA-aware MPI_Init opens a context on the current GPU
    comm_start(&argc, &argv, &world, &rank, &local_rank);
    TrainConfig tc;
    if (!parse_args(&tc, argc, argv)) {
        if (rank == 0) print_usage(TrainConfig{});
        comm_shutdown();
        return 0;
    }
    read_fault_injections(&tc);
    bool use_nccl = comm_use_nccl(tc.comm_backend);
    int ranks_on_node = comm_ranks_on_node();
    device_init(local_rank, ranks_on_node);  // before the NCCL communicators, which bind to the current device
    // the ranks of this node on this rank's GPU, told apart by PCI id (CPU build: all, sharing the node's memory)
    int sharing = comm_ranks_on_node_with(device_pci_id()), most = (int)comm_max_over_world(sharing);
    if (use_nccl && most > 1)
        comm_fail_all("%d ranks share one GPU: NCCL needs a GPU per rank; give several ranks one GPU with -comm mpi", most);
    Collectives comm;
    comm_init(&comm, world, rank, local_rank, tc.tp, tc.pp, use_nccl, tc.cp);  // checks that the grid fits the world
    Run run = {};
    run.tc = &tc;
    run.grad_accum = check_batch_flags(&tc, comm.grid);
    char resume_model[4096];
    run.resume_step = find_resume_step(&tc, resume_model, sizeof(resume_model), rank);

    GPT2 model;
    run.model = &model;
    run.scaler = loss_scaler_init(tc.loss_scale, PRECISION == PRECISION_FP16, tc.loss_scale_interval);
    // the model laid out without memory: what -plan prints, and what is checked before allocating
    build_model(&model, tc, &comm, run.grad_accum, false);
    if (tc.plan) {
        print_plans(&model, tc, run.grad_accum);
        comm_finalize(&comm);
        return 0;
    }
    if (tc.output_dir)  // a bad -o ends the run now, not at the first checkpoint
        check_output_dir(tc.output_dir, checkpoint_bytes(model.num_parameters, tc.checkpoint_every > 0), rank, world);
    check_memory(&model, tc, sharing);
    gpt2_free(&model);
    build_model(&model, tc, &comm, run.grad_accum, true);
    open_data(&run);
    if (rank == 0) print_run_header(&model, tc, use_nccl, run.grad_accum, run.max_steps, run.train_loader);
    measure_peak(&run);
    if (rank == 0 && tc.log_path && !(run.log = fopen(tc.log_path, "a"))) fail("cannot open log file %s", tc.log_path);
    run.sample_rng = Rng{(uint64_t)tc.seed + 0x5A5A};
    if (run.resume_step > 0) resume_state(&model, tc, run.resume_step, &run.scaler, &run.train_loader, &run.sample_rng);
    run.can_decode = decoder_load(&run.decoder, tc.tokenizer_path);
    if (!run.can_decode && rank == 0 && tc.sample_every > 0)
        printf("no tokenizer file %s: samples print token ids (`make data` writes it)\n", tc.tokenizer_path);
    if (tc.trace_path) comm_set_trace(&comm, &run.trace);
    train_loop(&run);
    if (run.log) fclose(run.log);
    dataloader_free(&run.train_loader);
    if (run.validate) dataloader_free(&run.val_loader);
    gpt2_free(&model);
    comm_finalize(&comm);
    return 0;
}
#endif

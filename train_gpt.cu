/*
train_gpt.cu: GPT-2 training in one readable file of host code.

This file is the model and the training loop: parameter and activation layout,
forward, backward, gradient clipping, the AdamW step, the learning-rate schedule,
gradient accumulation, validation, sampling, and main. It calls *ops* (kernels/,
adamw.h) and never a CUDA, cuBLAS or NCCL API, so it compiles twice:
    nvcc            -> train_gpt      ops are CUDA kernels and cuBLAS
    g++ -x c++      -> train_gpt_cpu  ops are their host twins and OpenBLAS
Every buffer is "device" memory from kernels/common.cuh; on the CPU build that is
host memory, and the same code runs.

GPT-2: learned positions, pre-LayerNorm blocks, tanh-GELU MLP, causal attention,
LM head tied to the token embedding wte. Per block, with x the residual stream:
    x = x + attproj(attention(qkv(ln1(x))))
    x = x + fcproj(gelu(fc(ln2(x))))
Where the state lives is zero.h's business: the forward and backward ask it for a
unit's parameters and gradients (the embeddings, one layer, the final LayerNorm),
call zero_gather_unit before a unit is used and zero_reduce_unit after its backward;
with ZeRO stages 0-2 the first is a no-op, with 0-1 the second. Data parallelism is
then just each rank reading its slice of the batch (dataloader.h).
Tensor parallelism (tp.h) is visible at its call sites: tp_g_forward after each
row-parallel matrix in the forward, tp_f_backward before each column-parallel one
in the backward, the vocabulary-parallel embedding and loss. Shapes come from the
parallel layout (tp, pp): a rank holds 3C/tp rows of qkvw, C/tp columns of
attprojw, and so on; with tp = 1 the same code is the single-GPU model.

Pipeline parallelism (pipeline.h) cuts the layers into stages. The model is written
as a stage: embed (first stage), blocks, head and loss (last stage), each with its
forward and backward, on an explicit set of activations, one per micro-batch in
flight. A step runs this stage's schedule, a list of actions (run_schedule); with one
stage the list is forward k, backward k for each micro-batch, and that is all.

Read in this order: block_forward, block_backward, stage_forward, stage_backward,
run_schedule, train_step, main.
*/
#include <stdio.h>     // defines: printf, fopen
#include <stdlib.h>    // defines: malloc, strtoll, strtod
#include <errno.h>     // defines: errno, ERANGE
#include <limits.h>    // defines: INT_MAX, INT_MIN
#include <string.h>    // defines: strcmp
#include <math.h>      // defines: sqrt, expf
#include <stdint.h>    // defines: int32_t, uint16_t
#include <sys/stat.h>  // defines: stat, mkdir
#include <chrono>      // defines: std::chrono::steady_clock
#include <cmath>       // defines: std::isfinite
#include "precision.h"             // defines: floatX, to_float, from_float
#include "kernels/common.cuh"      // defines: device_init, device_malloc, host_to_device, fail (base.h)
#include "kernels/encoder.cuh"     // defines: encoder_forward, encoder_backward, VocabRange
#include "kernels/layernorm.cuh"   // defines: layernorm_forward, layernorm_backward
#include "kernels/matmul.cuh"      // defines: matmul_forward, matmul_backward, bias_forward
#include "kernels/attention.cuh"   // defines: attention_forward, attention_backward
#include "kernels/gelu.cuh"        // defines: gelu_forward, gelu_backward, residual_forward
#include "kernels/gradients.cuh"   // defines: global_norm_squared, gradient_accumulate
#include "adamw.h"                 // defines: adamw_update
#include "loss_scale.h"            // defines: LossScaler, loss_scaler_update
#include "recompute.h"             // defines: recompute_keeps, layer_activation_bytes
#include "lr_schedule.h"           // defines: learning_rate_at
#include "random.h"                // defines: Rng, rng_normal
#include "dataloader.h"            // defines: DataLoader
#include "tokenizer/decoder.h"     // defines: Decoder, decoder_load, json_escape_utf8
#include "comm.h"                  // defines: Collectives, comm_init, comm_all_reduce_scalars
#include "zero.h"                  // defines: Zero, zero_unit_params, zero_reduce_unit, ...
#include "tp.h"                    // defines: tp_g_forward, tp_f_backward, tp_crossentropy, TensorPartition
#include "pipeline.h"              // defines: distribute_layers, pipeline_schedule, PipelineAction
#include "checkpoint.h"            // defines: TrainingState, checkpoint_write_state, checkpoint_read_state

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
struct ModelLayout {
    int tp, tp_rank;        // tensor parallel: this rank holds 1/tp of every sharded matrix
    int pp, pp_rank;        // pipeline parallel: this rank holds layers [layer_begin, layer_end)
    int layer_begin, layer_end;
};

// the whole model, as one rank alone holds it and as files store it
inline ModelLayout whole_model_layout(const GPT2Config& c) { return ModelLayout{1, 0, 1, 0, 0, c.num_layers}; }
// the part of pipeline stage pp_rank and TP rank tp_rank
inline ModelLayout stage_layout(const GPT2Config& c, int tp, int tp_rank, int pp, int pp_rank) {
    ModelLayout lay = {tp, tp_rank, pp, pp_rank, 0, 0};
    distribute_layers(c.num_layers, pp, pp_rank, &lay.layer_begin, &lay.layer_end);
    return lay;
}
// this rank's part, from the process grid: the one source of tp, pp and the ranks
inline ModelLayout model_layout(const ProcessGrid& g, const GPT2Config& c) {
    return stage_layout(c, g.tp, g.tp_rank, g.pp, g.pp_rank);
}
inline bool is_first_stage(const ModelLayout& lay) { return lay.pp_rank == 0; }
inline bool is_last_stage(const ModelLayout& lay) { return lay.pp_rank == lay.pp - 1; }

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
// weight decay applies to the 2-D matrices only (DESIGN)
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
    int C = c.channels, L = lay.layer_end - lay.layer_begin;
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

// Parameters are stored unit by unit (zero.h): unit 0 the embeddings {wte, wpe},
// unit 1+l layer l's 12 tensors, unit L+1 the final LayerNorm {lnfw, lnfb}. A layer is
// then one contiguous block that ZeRO can gather and reduce whole; files keep llm.c's
// tensor-major order, and gpt2_reorder translates.

inline int unit_of(int tensor, int layer, int L) {
    return tensor <= WPE ? 0 : tensor >= LNFW ? L + 1 : 1 + layer;
}
inline int slice_of(int tensor) { return tensor <= WPE ? tensor : tensor >= LNFW ? tensor - LNFW : tensor - LN1W; }

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
// pipeline stage holds one ActivationTensors per micro-batch in flight (pipeline.h);
// without a pipeline there is one.

struct ActivationTensors {
    floatX* input;      // (B,T,C) the stage's input: the embeddings (first stage) or the previous stage's output
    void* layer[NUM_LAYER_ACTIVATIONS];  // per recompute.h: L layers if kept, else 1 layer every set reuses
    floatX* lnf;        // (B,T,C) last stage from here on
    float* lnf_mean;    // (B,T)
    float* lnf_rstd;    // (B,T)
    floatX* logits;     // (B,T,Vp/tp): this rank's vocabulary columns; the gradient in place after the loss
    float* losses;      // (B,T)
};

struct ScratchTensors {  // reused by every layer
    floatX* proj;       // (B,T,C) attproj / fcproj output before the residual add
    floatX* dresidual;  // (B,T,C) gradient of the residual stream
    floatX* dln;        // (B,T,C) gradient of a LayerNorm output
    floatX* datty;      // (B,T,C/tp)
    floatX* dqkv;       // (B,T,3C/tp)
    floatX* dfch;       // (B,T,4C/tp)
    floatX* attention;  // attention_scratch_elements
    float *loss_max, *loss_sum, *loss_target;  // (B,T) each: the vocabulary-parallel loss's row statistics
    floatX* logit_row;  // (Vp): one position's logits gathered over the TP ranks, for sampling
    int* inputs;        // (B,T) a micro-batch's tokens, uploaded for its embedding's forward
    int* token_buckets; // encoder_bucket_ints(B,T): the embedding backward's positions grouped by token
    float* partials;    // column_partials_elements: the two-stage column sums of bias and LayerNorm gradients
    int* targets;       // (B,T)
};

// one layer's view of the activations, as the forward and backward use them
struct LayerActivations {
    floatX *ln1, *qkv, *atty, *att, *residual2, *ln2, *fch, *fch_gelu, *residual3;
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd;
};

// ----------------------------------------------------------------------------
// the model

struct GPT2 {
    GPT2Config config;
    ModelLayout layout;
    TensorShape shapes[NUM_PARAMETER_TENSORS];
    size_t num_parameters;          // held by this rank, unpadded
    Zero zero;                      // parameters, gradients, optimizer state: zero.h
    Collectives* comm;
    int adam_steps;                 // updates applied (skipped steps do not count)
    int recompute;                  // -r level, recompute.h
    ScheduleKind schedule;          // -ps: the pipeline schedule, pipeline.h
    int B, T;                       // activation buffers hold up to (B,T)
    std::vector<ActivationTensors> sets;  // one per micro-batch in flight: micro-batch k uses sets[k % size]
    ScratchTensors scratch;
    std::vector<BufferSpec> activation_buffers;  // every buffer of the sets and the scratch, declared once
    float* host_losses;             // (B,T)
    size_t memory[NUM_MEMORY_KINDS];  // bytes allocated (or, under -plan, to be), by kind
};

inline int gpt2_layers(const GPT2* m) { return m->layout.layer_end - m->layout.layer_begin; }
inline int final_norm_unit(const GPT2* m) { return gpt2_layers(m) + 1; }
inline VocabRange vocab_range(const GPT2* m) { return tp_vocab_range(m->config.padded_vocab_size, m->layout.tp, m->layout.tp_rank); }

inline LayerActivations layer_activations(const GPT2* model, const ActivationTensors& a, int l, int B, int T) {
    const GPT2Config& c = model->config;
    void* at[NUM_LAYER_ACTIVATIONS];
    for (int t = 0; t < NUM_LAYER_ACTIVATIONS; t++) {
        size_t layer = recompute_keeps(model->recompute, t) ? l : 0;
        at[t] = (char*)a.layer[t] + layer * layer_activation_bytes(t, B, T, c.channels, c.num_heads, model->layout.tp);
    }
    return LayerActivations{(floatX*)at[LN1], (floatX*)at[QKV], (floatX*)at[ATTY], (floatX*)at[ATT],
                            (floatX*)at[RESIDUAL2], (floatX*)at[LN2], (floatX*)at[FCH], (floatX*)at[FCH_GELU],
                            (floatX*)at[RESIDUAL3], (float*)at[LN1_MEAN], (float*)at[LN1_RSTD],
                            (float*)at[LN2_MEAN], (float*)at[LN2_RSTD]};
}

// values in llm.c's file order (the whole model) <-> the units of the part `lay` describes
// (unit-major, unpadded): copies that part of every tensor (tp.h: tp_for_each_run)
inline void reorder_part(const GPT2Config& c, const ModelLayout& lay, const Unit* units, const float* src, float* dst,
                         bool file_to_units) {
    TensorShape whole[NUM_PARAMETER_TENSORS], part[NUM_PARAMETER_TENSORS];
    parameter_shapes(whole, c, whole_model_layout(c));
    parameter_shapes(part, c, lay);
    int L = lay.layer_end - lay.layer_begin;
    size_t file_offset = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        size_t per_layer = (size_t)whole[i].rows * whole[i].cols;
        bool per_block = i > WPE && i < LNFW;
        for (int l = 0; l < part[i].layers && part[i].rows > 0; l++) {
            const Unit& u = units[unit_of(i, l, L)];
            size_t unit_at = u.origin + u.slices[slice_of(i)].offset;
            size_t file_at = file_offset + (size_t)(per_block ? lay.layer_begin + l : 0) * per_layer;
            tp_for_each_run(parameter_partition[i], whole[i].rows, whole[i].cols, lay.tp, lay.tp_rank,
                            [&](size_t local, size_t whole_offset, size_t count) {
                if (file_to_units) memcpy(dst + unit_at + local, src + file_at + whole_offset, count * sizeof(float));
                else memcpy(dst + file_at + whole_offset, src + unit_at + local, count * sizeof(float));
            });
        }
        file_offset += per_layer * whole[i].layers;
    }
}

inline void gpt2_validate_config(const GPT2Config& c, const char* source) {
    if (c.max_seq_len <= 0 || c.vocab_size <= 0 || c.num_layers <= 0 || c.num_heads <= 0 || c.channels <= 0)
        fail("%s: model dimensions must be positive (maxT=%d V=%d L=%d NH=%d C=%d)", source, c.max_seq_len,
             c.vocab_size, c.num_layers, c.num_heads, c.channels);
    if (c.padded_vocab_size < c.vocab_size) fail("%s: padded vocab %d is smaller than vocab %d", source, c.padded_vocab_size, c.vocab_size);
    if (c.channels % c.num_heads != 0) fail("%s: channels %d not divisible by heads %d", source, c.channels, c.num_heads);
    if (c.vocab_size > 65536) fail("%s: vocab %d does not fit uint16 token shards", source, c.vocab_size);
}

// llm.c model file: int32 header[256] = {magic, version, maxT, V, L, NH, C, Vp}, then the
// parameters in file order. The header alone gives the configuration; returns the version.
inline int read_model_header(const char* path, GPT2Config* config, FILE** opened) {
    FILE* f = fopen(path, "rb");
    if (!f) fail("cannot open model file %s", path);
    int32_t header[256];
    if (fread(header, sizeof(int32_t), 256, f) != 256) fail("model file %s is shorter than its 1024-byte header", path);
    if (header[0] != MODEL_MAGIC) fail("model file %s has magic %d, expected %d (not an llm.c model file?)", path, header[0], MODEL_MAGIC);
    int version = header[1];
    if (version != MODEL_VERSION_FP32 && version != MODEL_VERSION_BF16)
        fail("model file %s has version %d; known versions are 3 (fp32) and 5 (bf16)", path, version);
    *config = GPT2Config{header[2], header[3], header[7], header[4], header[5], header[6]};
    gpt2_validate_config(*config, path);
    if (opened) *opened = f; else fclose(f);
    return version;
}

// the parameters of a model file, as fp32 in file order (a bf16 file is widened)
inline float* read_model_file(const char* path, GPT2Config* config) {
    FILE* f;
    int version = read_model_header(path, config, &f);
    const GPT2Config& c = *config;
    TensorShape full[NUM_PARAMETER_TENSORS];
    parameter_shapes(full, c, whole_model_layout(c));
    size_t n = parameter_count(full), bytes_per = version == MODEL_VERSION_FP32 ? 4 : 2;
    struct stat st;
    stat(path, &st);
    if ((size_t)st.st_size != 1024 + n * bytes_per)
        fail("model file %s should be %zu bytes for this header (%zu parameters) but is %lld", path,
             1024 + n * bytes_per, n, (long long)st.st_size);
    float* values = (float*)malloc(n * sizeof(float));
    if (version == MODEL_VERSION_FP32) {
        if (fread(values, 4, n, f) != n) fail("model file %s: short read", path);
    } else {  // bf16 is the top half of an fp32
        uint16_t* raw = (uint16_t*)malloc(n * 2);
        if (fread(raw, 2, n, f) != n) fail("model file %s: short read", path);
        for (size_t i = 0; i < n; i++) values[i] = float_from_bf16_bits(raw[i]);
        free(raw);
    }
    fclose(f);
    return values;
}

// GPT-2's initialisation: normal(0, 0.02) matrices and embeddings, residual projections scaled by
// 1/sqrt(2L), zero biases, unit LayerNorm weights, zero padded vocabulary rows. Each (tensor, layer)
// draws from its own stream seeded by (seed, tensor, layer), so any rank can make its part alone.
inline void gpt2_init_values(float* out, int index, int layer, TensorShape full, const GPT2Config& c, uint64_t seed) {
    size_t n = (size_t)full.rows * full.cols;
    bool layer_norm_weight = index == LN1W || index == LN2W || index == LNFW;
    if (!parameter_is_matrix[index]) {
        for (size_t i = 0; i < n; i++) out[i] = layer_norm_weight ? 1.0f : 0.0f;
        return;
    }
    double std = 0.02;
    if (index == ATTPROJW || index == FCPROJW) std /= sqrt(2.0 * c.num_layers);
    Rng rng = {seed * 0x100000001B3ull + (uint64_t)index * 1000003ull + (uint64_t)layer};
    size_t real = index == WTE ? (size_t)c.vocab_size * c.channels : n;
    for (size_t i = 0; i < n; i++) out[i] = i < real ? (float)(std * rng_normal(&rng)) : 0.0f;
}

// the whole model's initial values in file order: GPT-2's initialisation, seeded
inline float* init_model_values(const GPT2Config& c, uint64_t seed) {
    TensorShape full[NUM_PARAMETER_TENSORS];
    parameter_shapes(full, c, whole_model_layout(c));
    float* values = (float*)malloc(parameter_count(full) * sizeof(float));
    float* p = values;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++)
        for (int l = 0; l < full[i].layers; l++, p += (size_t)full[i].rows * full[i].cols)
            gpt2_init_values(p, i, l, full[i], c, seed);
    return values;
}

inline bool is_depth_init(const char* init) {  // "dN": GPT-2 of depth N from scratch
    return init[0] == 'd' && init[1] != '\0' && strspn(init + 1, "0123456789") == strlen(init + 1);
}

// the model this rank holds, from -e (a model file or dN): its TP part of the whole (every
// layout starts from the same values), with ZeRO `stage` over its DP group.
// allocate = false only lays it out (-plan): no memory, no parameter values.
inline void gpt2_build(GPT2* model, const char* init, uint64_t seed, Collectives* comm, int stage, bool grads_fp32,
                       bool allocate) {
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
    model->layout = model_layout(comm->grid, c);
    int tp = model->layout.tp;
    if (c.num_layers < model->layout.pp)
        comm_fail_all("-pp %d: the model has %d layers, fewer than the stages", model->layout.pp, c.num_layers);
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

// rank 0: every rank's `mine`, which add_to_part(grid of that rank, its part's units, mine,
// part values) writes into the unit-order values of that rank's part (all of them, or the
// rank's shard), placed in llm.c's file order (the whole model); the other ranks get nothing.
// A collective over the world.
template <typename AddToPart>
inline std::vector<float> gather_in_file_order(GPT2* model, const std::vector<float>& mine, AddToPart add_to_part) {
    const ProcessGrid& g = model->comm->grid;
    std::vector<std::vector<float>> received = comm_gatherv_to_root(&model->comm->world, mine);
    if (g.rank != 0) return {};
    const GPT2Config& c = model->config;
    TensorShape whole[NUM_PARAMETER_TENSORS];
    parameter_shapes(whole, c, whole_model_layout(c));
    std::vector<float> values(parameter_count(whole));
    for (int part = g.tp * g.pp - 1; part >= 0; part--) {  // part 0's copies of shared tensors land last
        int tp_rank = part % g.tp, pp_rank = part / g.tp;
        ModelLayout lay = stage_layout(c, g.tp, tp_rank, g.pp, pp_rank);
        TensorShape shapes[NUM_PARAMETER_TENSORS];
        parameter_shapes(shapes, c, lay);
        int L = lay.layer_end - lay.layer_begin;
        Unit* part_units = gpt2_units(shapes, L);
        std::vector<float> part_values(parameter_count(shapes));
        for (int q = 0; q < g.world; q++) {  // the DP ranks holding this part
            ProcessGrid other = make_grid(g.world, q, g.tp, g.pp);
            if (other.tp_rank == tp_rank && other.pp_rank == pp_rank && !received[q].empty())
                add_to_part(other, part_units, L + 2, received[q], part_values.data());
        }
        reorder_part(c, lay, part_units, part_values.data(), values.data(), false);
        free(part_units);
    }
    return values;
}

// writes an llm.c model file through a temporary name, so a crash never leaves a torn
// file: bf16 builds write version 5, the others fp32 version 3. A collective: ZeRO-3
// gathers over DP; world rank 0 gathers one DP replica's parts (every stage, every TP
// rank) and places each with that part's layout.
inline void gpt2_write_file(GPT2* model, const char* path) {
    const ProcessGrid& g = model->comm->grid;
    std::vector<float> units(model->num_parameters);
    zero_params_to_host(&model->zero, units.data());
    if (g.dp_rank != 0) units.clear();  // the whole model is the parts of one DP replica
    std::vector<float> values = gather_in_file_order(model, units, [](const ProcessGrid&, const Unit*, int,
                                                                       const std::vector<float>& part, float* out) {
        memcpy(out, part.data(), part.size() * sizeof(float));
    });
    if (g.rank != 0) return;
    const GPT2Config& c = model->config;
    size_t total = values.size();
    bool bf16 = PRECISION == PRECISION_BF16;  // the parameters are bf16 values: the conversion is exact
    size_t bytes_per = bf16 ? 2 : 4;
    std::vector<char> body(total * bytes_per);
    for (size_t i = 0; i < total; i++) {
        if (bf16) { uint16_t top = bf16_bits_from_float(values[i]); memcpy(&body[2 * i], &top, 2); }
        else memcpy(&body[4 * i], &values[i], 4);
    }
    int32_t header[256] = {MODEL_MAGIC, bf16 ? MODEL_VERSION_BF16 : MODEL_VERSION_FP32, c.max_seq_len, c.vocab_size,
                           c.num_layers, c.num_heads, c.channels, c.padded_vocab_size};
    WholeFile w = whole_file_open(path, "model file");
    whole_file_write(&w, header, sizeof(header));
    whole_file_write(&w, body.data(), bytes_per * total);
    whole_file_commit(&w);
}

// every activation and scratch buffer for micro-batches of up to (B,T), declared once: the
// same list is allocated for training and summed for -plan. `num_sets` sets of what the
// forward keeps (one per micro-batch in flight, pipeline.h), one of everything else.
inline std::vector<BufferSpec> activation_buffer_list(GPT2* model, int B, int T, int num_sets) {
    const GPT2Config& c = model->config;
    int tp = model->layout.tp, L = gpt2_layers(model);
    size_t BT = (size_t)B * T, C = c.channels, C_rank = C / tp, NH_rank = c.num_heads / tp;
    size_t head = is_last_stage(model->layout) ? 1 : 0;  // lnf, logits and losses live on the last stage
    ScratchTensors& s = model->scratch;
    const size_t X = sizeof(floatX), FP32 = sizeof(float);
    const MemoryKind KEPT = MEM_ACTIVATIONS, WORK = MEM_ACTIVATIONS_TRANSIENT;
    model->sets.assign(num_sets, ActivationTensors{});
    std::vector<BufferSpec> specs;
    for (ActivationTensors& a : model->sets) {
        std::vector<BufferSpec> kept = {
            {(void**)&a.input, BT * C, X, KEPT},
            {(void**)&a.lnf, head * BT * C, X, KEPT}, {(void**)&a.lnf_mean, head * BT, FP32, KEPT},
            {(void**)&a.lnf_rstd, head * BT, FP32, KEPT}, {(void**)&a.losses, head * BT, FP32, KEPT},
            {(void**)&a.logits, head * BT * c.padded_vocab_size / tp, X, MEM_LOGITS},
        };
        for (int t = 0; t < NUM_LAYER_ACTIVATIONS; t++)  // kept: one per layer
            if (recompute_keeps(model->recompute, t))
                kept.push_back({&a.layer[t], L * layer_activation_bytes(t, B, T, C, c.num_heads, tp), 1, KEPT});
        specs.insert(specs.end(), kept.begin(), kept.end());
    }
    for (int t = 0; t < NUM_LAYER_ACTIVATIONS; t++)  // not kept: one layer, which every layer and set reuses
        if (!recompute_keeps(model->recompute, t))
            specs.push_back({&model->sets[0].layer[t], layer_activation_bytes(t, B, T, C, c.num_heads, tp), 1, WORK});
    std::vector<BufferSpec> scratch = {
        {(void**)&s.proj, BT * C, X, WORK}, {(void**)&s.dresidual, BT * C, X, WORK},
        {(void**)&s.dln, BT * C, X, WORK}, {(void**)&s.datty, BT * C_rank, X, WORK},
        {(void**)&s.dqkv, BT * 3 * C_rank, X, WORK}, {(void**)&s.dfch, BT * 4 * C_rank, X, WORK},
        {(void**)&s.attention, attention_scratch_elements(B, T, C_rank, NH_rank), X, WORK},
        {(void**)&s.loss_max, BT, FP32, WORK}, {(void**)&s.loss_sum, BT, FP32, WORK}, {(void**)&s.loss_target, BT, FP32, WORK},
        {(void**)&s.logit_row, (size_t)c.padded_vocab_size, X, WORK},
        {(void**)&s.inputs, BT, sizeof(int), WORK}, {(void**)&s.targets, BT, sizeof(int), WORK},
        {(void**)&s.token_buckets, encoder_bucket_ints(B, T), sizeof(int), WORK},
        {(void**)&s.partials, column_partials_elements(std::max(4 * C_rank, 2 * C)), FP32, WORK},
    };
    specs.insert(specs.end(), scratch.begin(), scratch.end());
    return specs;
}

// activations for micro-batches of up to (B,T), `num_sets` of them in flight;
// allocate = false only books them (-plan)
inline void gpt2_allocate_activations(GPT2* model, int B, int T, int recompute, int num_sets, bool allocate) {
    if (recompute < 0 || recompute > 3) fail("-r must be 0, 1, 2 or 3 (got %d)", recompute);
    model->B = B; model->T = T; model->recompute = recompute;
    model->activation_buffers = activation_buffer_list(model, B, T, num_sets);
    allocate_buffers(model->activation_buffers.data(), (int)model->activation_buffers.size(), model->memory, allocate);
    for (ActivationTensors& a : model->sets)  // the reused layer tensors are set 0's
        for (int t = 0; t < NUM_LAYER_ACTIVATIONS; t++)
            if (!recompute_keeps(recompute, t)) a.layer[t] = model->sets[0].layer[t];
    if (allocate) model->host_losses = (float*)malloc((size_t)B * T * sizeof(float));
}

// ----------------------------------------------------------------------------
// a block: forward and backward

// the input of block l (local index): the stage's input, or the previous block's output
inline floatX* block_input(GPT2* model, ActivationTensors& a, int l, int B, int T) {
    return l == 0 ? a.input : layer_activations(model, a, l - 1, B, T).residual3;
}
// what this stage hands to the next: its last block's output
inline floatX* stage_output(GPT2* model, ActivationTensors& a, int B, int T) { return block_input(model, a, gpt2_layers(model), B, T); }
inline LayerParameters block_params(GPT2* model, int l) {
    return layer_parameters(model->zero.units[1 + l], zero_unit_params(&model->zero, 1 + l));
}

// the three pieces of a block that recompute.h may drop and rebuild: each is one call,
// made by block_forward and again, before the block's backward, by recompute_block
inline void block_ln1(GPT2* model, ActivationTensors& a, int l, int B, int T) {
    LayerParameters w = block_params(model, l);
    LayerActivations la = layer_activations(model, a, l, B, T);
    layernorm_forward(la.ln1, la.ln1_mean, la.ln1_rstd, block_input(model, a, l, B, T), w.ln1w, w.ln1b, B * T, model->config.channels);
}
inline void block_ln2(GPT2* model, ActivationTensors& a, int l, int B, int T) {
    LayerParameters w = block_params(model, l);
    LayerActivations la = layer_activations(model, a, l, B, T);
    layernorm_forward(la.ln2, la.ln2_mean, la.ln2_rstd, la.residual2, w.ln2w, w.ln2b, B * T, model->config.channels);
}
inline void block_gelu(GPT2* model, ActivationTensors& a, int l, int B, int T) {
    LayerActivations la = layer_activations(model, a, l, B, T);
    gelu_forward(la.fch_gelu, la.fch, (size_t)B * T * 4 * model->config.channels / model->layout.tp);
}

// block l (local index) on its input, writing the layer's activations; its unit must be gathered.
// f (tp.h) is the identity here; g sums the row-parallel outputs over the TP ranks.
inline void block_forward(GPT2* model, ActivationTensors& a, int l, int B, int T) {
    const GPT2Config& c = model->config;
    int tp = model->layout.tp, C = c.channels, C_rank = C / tp, NH_rank = c.num_heads / tp, N = B * T;
    ScratchTensors& s = model->scratch;
    LayerParameters w = block_params(model, l);
    LayerActivations la = layer_activations(model, a, l, B, T);
    // attention: qkv column-parallel (this rank's heads), attproj row-parallel
    block_ln1(model, a, l, B, T);
    matmul_forward(la.qkv, la.ln1, w.qkvw, w.qkvb, N, C, 3 * C_rank);
    attention_forward(la.atty, la.att, la.qkv, s.attention, B, T, C_rank, NH_rank);
    matmul_forward(s.proj, la.atty, w.attprojw, NULL, N, C_rank, C);
    tp_g_forward(model->comm, s.proj, (size_t)N * C);
    bias_forward(s.proj, w.attprojb, N, C);  // after the sum over TP ranks: added once
    residual_forward(la.residual2, block_input(model, a, l, B, T), s.proj, (size_t)N * C);
    // MLP: fc column-parallel, fcproj row-parallel
    block_ln2(model, a, l, B, T);
    matmul_forward(la.fch, la.ln2, w.fcw, w.fcb, N, C, 4 * C_rank);
    block_gelu(model, a, l, B, T);
    matmul_forward(s.proj, la.fch_gelu, w.fcprojw, NULL, N, 4 * C_rank, C);
    tp_g_forward(model->comm, s.proj, (size_t)N * C);
    bias_forward(s.proj, w.fcprojb, N, C);
    residual_forward(la.residual3, la.residual2, s.proj, (size_t)N * C);
}

// rebuilds what recompute level r did not keep of block l, just before its backward
inline void recompute_block(GPT2* model, ActivationTensors& a, int l, int B, int T) {
    int r = model->recompute;
    if (r >= 3) { block_forward(model, a, l, B, T); return; }
    if (r >= 2) { block_ln1(model, a, l, B, T); block_ln2(model, a, l, B, T); }
    if (r >= 1) block_gelu(model, a, l, B, T);
}

// block l's backward: model->scratch.dresidual holds the gradient of its output and
// becomes the gradient of its input; the layer's parameter gradients accumulate.
// g's backward is the identity; f's sums the column-parallel inputs' gradients over TP.
inline void block_backward(GPT2* model, ActivationTensors& a, int l, int B, int T) {
    const GPT2Config& c = model->config;
    int tp = model->layout.tp, C = c.channels, C_rank = C / tp, NH_rank = c.num_heads / tp, N = B * T;
    Zero* z = &model->zero;
    ScratchTensors& s = model->scratch;
    LayerParameters w = block_params(model, l);
    LayerParameters dw = layer_parameters(z->units[1 + l], zero_unit_grads(z, 1 + l));
    LayerActivations la = layer_activations(model, a, l, B, T);
    // MLP
    matmul_backward(s.dfch, dw.fcprojw, dw.fcprojb, s.dresidual, la.fch_gelu, w.fcprojw, N, 4 * C_rank, C, s.partials);
    gelu_backward(s.dfch, la.fch, s.dfch, (size_t)N * 4 * C_rank);
    matmul_backward(s.dln, dw.fcw, dw.fcb, s.dfch, la.ln2, w.fcw, N, C, 4 * C_rank, s.partials);
    tp_f_backward(model->comm, s.dln, (size_t)N * C);
    layernorm_backward(s.dresidual, dw.ln2w, dw.ln2b, s.dln, la.residual2, w.ln2w, la.ln2_mean, la.ln2_rstd, N, C, s.partials);
    // attention; s.dresidual is now the gradient of residual2
    matmul_backward(s.datty, dw.attprojw, dw.attprojb, s.dresidual, la.atty, w.attprojw, N, C_rank, C, s.partials);
    attention_backward(s.dqkv, s.datty, la.qkv, la.att, s.attention, B, T, C_rank, NH_rank);
    matmul_backward(s.dln, dw.qkvw, dw.qkvb, s.dqkv, la.ln1, w.qkvw, N, C, 3 * C_rank, s.partials);
    tp_f_backward(model->comm, s.dln, (size_t)N * C);
    layernorm_backward(s.dresidual, dw.ln1w, dw.ln1b, s.dln, block_input(model, a, l, B, T), w.ln1w, la.ln1_mean,
                       la.ln1_rstd, N, C, s.partials);
}

// ----------------------------------------------------------------------------
// the stages: embed (first stage), blocks (every stage), head and loss (last stage),
// each with its forward and backward. With one stage they are the whole model.

struct MicroBatch { const int* inputs; const int* targets; };  // host tokens (B,T); targets NULL: no loss

// vocab-parallel embedding: this rank's wte rows (positions added on TP rank 0 only), then g
inline void embed_forward(GPT2* model, ActivationTensors& a, const int* tokens, int B, int T) {
    Zero* z = &model->zero;
    host_to_device(model->scratch.inputs, tokens, (size_t)B * T * sizeof(int));
    EmbeddingParameters e = embedding_parameters(z->units[0], zero_unit_params(z, 0));
    const floatX* positions = model->layout.tp_rank == 0 ? e.wpe : NULL;
    encoder_forward(a.input, model->scratch.inputs, e.wte, positions, B, T, model->config.channels, vocab_range(model));
    tp_g_forward(model->comm, a.input, (size_t)B * T * model->config.channels);
}
// the embedding's backward (g's is the identity): this rank's wte rows, and wpe
inline void embed_backward(GPT2* model, const int* tokens, int B, int T) {
    Zero* z = &model->zero;
    EmbeddingParameters de = embedding_parameters(z->units[0], zero_unit_grads(z, 0));
    encoder_backward(de.wte, de.wpe, model->scratch.dresidual, tokens, model->scratch.token_buckets, B, T,
                     model->config.channels, vocab_range(model));
}

inline void blocks_forward(GPT2* model, ActivationTensors& a, int B, int T) {
    for (int l = 0; l < gpt2_layers(model); l++) {
        zero_gather_unit(&model->zero, 1 + l);
        block_forward(model, a, l, B, T);
    }
}
// under ZeRO-2/3 each layer's gradient is reduce-scattered as soon as its backward is done
inline void blocks_backward(GPT2* model, ActivationTensors& a, int B, int T) {
    for (int l = gpt2_layers(model) - 1; l >= 0; l--) {
        zero_gather_unit(&model->zero, 1 + l);
        recompute_block(model, a, l, B, T);
        block_backward(model, a, l, B, T);
        zero_reduce_unit(&model->zero, 1 + l);
    }
}

// final LayerNorm and the tied LM head, column-parallel (f: identity): this rank's Vp/tp logit columns
inline void head_forward(GPT2* model, ActivationTensors& a, int B, int T) {
    Zero* z = &model->zero;
    int norm_unit = final_norm_unit(model), C = model->config.channels;
    FinalNormParameters h = final_norm_parameters(z->units[norm_unit], zero_unit_params(z, norm_unit));
    EmbeddingParameters e = embedding_parameters(z->units[0], zero_unit_params(z, 0));
    layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd, stage_output(model, a, B, T), h.lnfw, h.lnfb, B * T, C);
    matmul_forward(a.logits, a.lnf, e.wte, NULL, B * T, C, vocab_range(model).rows);
}
// cross-entropy of the logits against targets (B,T), vocabulary-parallel (tp.h); with
// dloss != 0 the logits become their gradient. Returns the sum of the B*T token losses.
inline double head_loss(GPT2* model, ActivationTensors& a, const int* targets, int B, int T, float dloss) {
    int N = B * T;
    ScratchTensors& s = model->scratch;
    host_to_device(s.targets, targets, N * sizeof(int));
    tp_crossentropy(model->comm, a.logits, a.losses, s.targets, LossStatistics{s.loss_max, s.loss_sum, s.loss_target},
                    N, model->config.vocab_size, vocab_range(model), dloss);
    device_to_host(model->host_losses, a.losses, N * sizeof(float));
    double sum = 0.0;
    for (int i = 0; i < N; i++) sum += model->host_losses[i];
    return sum;
}
// the head's backward from dlogits (in a.logits): f sums d(lnf) over TP; dresidual becomes the
// gradient of the stage's output
inline void head_backward(GPT2* model, ActivationTensors& a, int B, int T) {
    Zero* z = &model->zero;
    int norm_unit = final_norm_unit(model), C = model->config.channels, N = B * T;
    ScratchTensors& s = model->scratch;
    EmbeddingParameters e = embedding_parameters(z->units[0], zero_unit_params(z, 0));
    EmbeddingParameters de = embedding_parameters(z->units[0], zero_unit_grads(z, 0));
    FinalNormParameters h = final_norm_parameters(z->units[norm_unit], zero_unit_params(z, norm_unit));
    FinalNormParameters dh = final_norm_parameters(z->units[norm_unit], zero_unit_grads(z, norm_unit));
    matmul_backward(s.dln, de.wte, NULL, a.logits, a.lnf, e.wte, N, C, vocab_range(model).rows, s.partials);
    tp_f_backward(model->comm, s.dln, (size_t)N * C);
    device_zero(s.dresidual, (size_t)N * C * sizeof(floatX));
    layernorm_backward(s.dresidual, dh.lnfw, dh.lnfb, s.dln, stage_output(model, a, B, T), h.lnfw, a.lnf_mean, a.lnf_rstd, N, C, s.partials);
}

// one micro-batch through this stage: a.input holds its input unless this is the first stage.
// Returns the sum of its token losses on the last stage (0 elsewhere, or without targets).
// A collective under ZeRO-3 (over DP) and TP.
inline double stage_forward(GPT2* model, ActivationTensors& a, const MicroBatch& mb, int B, int T, float dloss) {
    if (B > model->B || T > model->T) fail("forward with (B=%d,T=%d) exceeds the allocated (%d,%d)", B, T, model->B, model->T);
    zero_gather_unit(&model->zero, 0);                  // ZeRO-3: the embeddings and the final LayerNorm
    zero_gather_unit(&model->zero, final_norm_unit(model));   // stay gathered through the micro-batch
    if (is_first_stage(model->layout)) embed_forward(model, a, mb.inputs, B, T);
    blocks_forward(model, a, B, T);
    if (!is_last_stage(model->layout)) return 0.0;
    head_forward(model, a, B, T);
    return mb.targets ? head_loss(model, a, mb.targets, B, T, dloss) : 0.0;
}
// its backward: on the last stage from its loss, elsewhere from the gradient of the stage's
// output in scratch.dresidual, which ends as the gradient of the stage's input
inline void stage_backward(GPT2* model, ActivationTensors& a, const MicroBatch& mb, int B, int T) {
    if (is_last_stage(model->layout)) head_backward(model, a, B, T);
    zero_reduce_unit(&model->zero, final_norm_unit(model));
    blocks_backward(model, a, B, T);
    if (is_first_stage(model->layout)) embed_backward(model, mb.inputs, B, T);
    zero_reduce_unit(&model->zero, 0);  // wte: from the head (last stage) and the lookup (first)
}

// ----------------------------------------------------------------------------
// the pipeline: this stage as pipeline.h's executor sees it

// micro-batch k's activations: set k % sets (pipeline_activation_sets)
inline ActivationTensors& activation_set(GPT2* model, int k) { return model->sets[k % model->sets.size()]; }

// this stage for one step's micro-batches: forward k and backward k, micro-batch k's input and
// output, and scratch.dresidual as the one gradient buffer (block_backward and head_backward
// already use it for the gradient of the residual stream). Activations and gradients travel
// as (B,T,C) floatX.
inline PipelineStage pipeline_stage(GPT2* model, const std::vector<MicroBatch>& batches, float dloss, int B, int T) {
    PipelineStage stage;
    stage.forward = [=, &batches](int k) { return stage_forward(model, activation_set(model, k), batches[k], B, T, dloss); };
    stage.backward = [=, &batches](int k) {
        stage_backward(model, activation_set(model, k), batches[k], B, T);
        zero_end_micro_step(&model->zero);
    };
    stage.input = [=](int k) { return activation_set(model, k).input; };
    stage.output = [=](int k) { return stage_output(model, activation_set(model, k), B, T); };
    stage.gradient = model->scratch.dresidual;
    stage.message_elements = (size_t)B * T * model->config.channels;
    return stage;
}

// one micro-batch through every stage, forward only (validation, sampling), in set 0; returns
// the token losses' sum on the last stage (0 elsewhere, and without targets)
inline double forward_only(GPT2* model, const MicroBatch& mb, int B, int T) {
    std::vector<MicroBatch> one = {mb};
    return pipeline_forward(pipeline_stage(model, one, 0.0f, B, T), &model->comm->pp);
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

inline void gpt2_free(GPT2* model) {
    for (const BufferSpec& b : model->activation_buffers) device_free(*b.ptr);
    zero_free(&model->zero);
    free(model->host_losses);
}

// ----------------------------------------------------------------------------
// training step, validation, sampling

struct TrainConfig {
    const char* init = "d12";
    const char* train_pattern = "data/tinyshakespeare_train.bin";
    const char* val_pattern = "data/tinyshakespeare_val.bin";
    const char* output_dir = NULL;
    const char* log_path = NULL;
    int B = 4, T = 1024;
    int total_batch_tokens = -1;  // -1: one micro-batch per rank
    float lr = 3e-4f;
    int warmup = 0;
    float final_fraction = 1.0f;
    float weight_decay = 0.0f;
    float grad_clip = 1.0f;
    int max_steps = -1;           // -1: one epoch of the training data
    int val_every = 20, val_batches = 20;
    int sample_every = 20, gen_tokens = 64;
    float temperature = 1.0f;
    const char* tokenizer_path = "data/gpt2_tokenizer.bin";
    int checkpoint_every = 0;
    int keep_checkpoints = 0;
    int resume = 0;
    int shuffle = 1;
    int seed = 1337;
    int recompute = 0;
    const char* loss_scale = "default";  // dynamic | off | VALUE; default: dynamic for FP16
    int loss_scale_interval = 2000;
    const char* grad_accum_type = "floatX";  // floatX | fp32
    int zero_stage = 0;
    int tp = 1, pp = 1;
    const char* schedule = "1f1b";           // 1f1b | gpipe (pipeline.h)
    const char* trace_path = NULL;           // -trace: a Chrome trace of the first steps (trace.h)
    int trace_steps = 3;
    const char* comm_backend = "default";    // nccl | mpi; default: nccl on the GPU build
    int plan = 0;
    int inject_nonfinite_step = 0; // from TRAIN_GPT_INJECT_NONFINITE, not a flag
    int die_in_checkpoint = 0;     // from TRAIN_GPT_DIE_IN_CHECKPOINT: the last rank dies writing this step's state
};

struct StepResult { double loss, norm; float lr, scale; bool skipped; ScheduleTiming timing; };

// one optimizer step: the step's micro-batches through this stage's schedule (pipeline.h;
// without a pipeline: forward, loss and backward of each in turn) on this rank's slice of
// the batch, then the gradient reductions (zero.h; the tied embedding's two copies), the
// finite check, unscaling, clipping and AdamW. `step` counts from 0.
inline StepResult train_step(GPT2* model, DataLoader* loader, LossScaler* scaler, const TrainConfig& tc,
                             int grad_accum, int step, int max_steps) {
    int B = tc.B, T = tc.T, dp = model->comm->grid.dp;
    double tokens_per_step = (double)B * T * grad_accum * dp;
    StepResult r = {0.0, 0.0, 0.0f, scaler->scale, false, {}};
    // the step's loss is the mean over all its tokens on all ranks: summing gradients over
    // micro-steps and ranks gives the gradient of the mean; times the loss scale
    float dloss = (float)(scaler->scale / tokens_per_step);
    // every stage reads the same micro-batches: its DP rank's slice of each, in order
    std::vector<std::vector<int>> inputs(grad_accum), targets(grad_accum);
    std::vector<MicroBatch> batches(grad_accum);
    for (int k = 0; k < grad_accum; k++) {
        dataloader_next_batch(loader);
        inputs[k].assign(loader->inputs, loader->inputs + B * T);
        targets[k].assign(loader->targets, loader->targets + B * T);
        batches[k] = MicroBatch{inputs[k].data(), targets[k].data()};
    }
    zero_begin_step(&model->zero);
    std::vector<PipelineAction> schedule = pipeline_schedule(model->schedule, model->layout.pp_rank, model->layout.pp, grad_accum);
    double loss_sum = run_schedule(pipeline_stage(model, batches, dloss, B, T), schedule, &model->comm->pp, &r.timing);
    if (tc.inject_nonfinite_step == step + 1) zero_poison_gradients(&model->zero);
    zero_reduce_step(&model->zero);
    zero_sum_unit_gradient(&model->zero, 0, &model->comm->embedding);  // the tied wte: first + last stage
    comm_all_reduce_scalars(&model->comm->pp, &loss_sum, 1);  // the last stage has it
    comm_all_reduce_scalars(&model->comm->dp, &loss_sum, 1);
    r.loss = loss_sum / tokens_per_step;
    r.lr = learning_rate_at(step, tc.lr, tc.warmup, max_steps, tc.final_fraction);
    double norm_squared = gpt2_grad_norm_squared(model);
    r.norm = sqrt(norm_squared) / scaler->scale;  // unscaled before clipping
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
        sum += forward_only(model, MicroBatch{loader->inputs, loader->targets}, loader->B, loader->T);
    }
    comm_all_reduce_scalars(&model->comm->pp, &sum, 1);
    comm_all_reduce_scalars(&model->comm->dp, &sum, 1);
    return sum / ((double)batches * loader->B * loader->T * model->comm->grid.dp);
}

// samples `n` tokens after EOT at `temperature`, one full forward per token over the last
// T tokens (simple, not fast: no KV cache). A collective: every rank calls it with the
// same Rng state and so draws the same tokens. The last stage all-gathers the last
// position's logit columns from its TP ranks and broadcasts them to the other stages.
inline void gpt2_sample(GPT2* model, int* out, int n, float temperature, Rng* rng) {
    const GPT2Config& c = model->config;
    int* tokens = (int*)malloc((n + 1) * sizeof(int));
    floatX* row = (floatX*)malloc(c.padded_vocab_size * sizeof(floatX));
    std::vector<double> weights(c.vocab_size);
    int columns = vocab_range(model).rows;
    tokens[0] = GPT2_EOT;
    for (int t = 1; t <= n; t++) {
        int context = t < model->T ? t : model->T;
        forward_only(model, MicroBatch{tokens + (t - context), NULL}, 1, context);
        if (is_last_stage(model->layout))
            comm_all_gather(&model->comm->tp, model->sets[0].logits + (size_t)(context - 1) * columns, model->scratch.logit_row, columns);
        comm_broadcast(&model->comm->pp, model->scratch.logit_row, c.padded_vocab_size, model->layout.pp - 1);
        device_to_host(row, model->scratch.logit_row, c.padded_vocab_size * sizeof(floatX));
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
    free(tokens);
    free(row);
}

// ----------------------------------------------------------------------------
// command line: one table gives the parser and -h

enum OptionKind { OPT_INT, OPT_FLOAT, OPT_STRING };
// numbers must be finite and in [min, max] (-b, -t, -d also together: parse_args, check_batch_flags)
struct Option { const char* flag; OptionKind kind; void* value; const char* help; double min = 0, max = 0; };

inline int make_options(TrainConfig* tc, Option* o) {
    Option table[] = {
        {"-e", OPT_STRING, &tc->init, "init: llm.c model file (.bin, fp32 v3 or bf16 v5) or dN = GPT-2 of depth N from scratch (d12 = 124M)"},
        {"-i", OPT_STRING, &tc->train_pattern, "train token shards, glob pattern"},
        {"-j", OPT_STRING, &tc->val_pattern, "validation token shards, glob pattern"},
        {"-o", OPT_STRING, &tc->output_dir, "output directory for checkpoints and the final model (none: write nothing)"},
        {"-log", OPT_STRING, &tc->log_path, "append one JSON object per optimizer step to this file"},
        {"-b", OPT_INT, &tc->B, "micro-batch size per rank, in sequences", 1, 1 << 20},
        {"-t", OPT_INT, &tc->T, "sequence length", 1, 1 << 20},
        {"-d", OPT_INT, &tc->total_batch_tokens, "total tokens per optimizer step (-1: B*T*dp); accumulation steps = d / (B*T*dp)", -1, INT_MAX},
        {"-l", OPT_FLOAT, &tc->lr, "peak learning rate", 0, 10},
        {"-u", OPT_INT, &tc->warmup, "linear warmup steps", 0, INT_MAX},
        {"-q", OPT_FLOAT, &tc->final_fraction, "final learning rate as a fraction of -l (cosine decay; 1 = constant)", 0, 1},
        {"-c", OPT_FLOAT, &tc->weight_decay, "AdamW weight decay (2-D tensors only)", 0, 10},
        {"-gc", OPT_FLOAT, &tc->grad_clip, "clip the global gradient norm to this (0: off)", 0, 1e9},
        {"-x", OPT_INT, &tc->max_steps, "optimizer steps (-1: one epoch of the training shards)", -1, INT_MAX},
        {"-v", OPT_INT, &tc->val_every, "validate every N steps (0: off)", 0, INT_MAX},
        {"-m", OPT_INT, &tc->val_batches, "validation micro-batches", 1, INT_MAX},
        {"-s", OPT_INT, &tc->sample_every, "sample every N steps (0: off)", 0, INT_MAX},
        {"-g", OPT_INT, &tc->gen_tokens, "tokens to generate per sample", 1, 1 << 20},
        {"-temp", OPT_FLOAT, &tc->temperature, "sampling temperature", 1e-6, 1e6},
        {"-tok", OPT_STRING, &tc->tokenizer_path, "llm.c tokenizer file to decode samples (make data writes it)"},
        {"-n", OPT_INT, &tc->checkpoint_every, "write a checkpoint (model + per-rank state) into -o every N steps (0: off)", 0, INT_MAX},
        {"-nk", OPT_INT, &tc->keep_checkpoints, "keep the newest N checkpoints in -o, delete older ones (0: keep all)", 0, INT_MAX},
        {"-y", OPT_INT, &tc->resume, "1: resume from the newest checkpoint in -o (bit-exact continuation)", 0, 1},
        {"-shuffle", OPT_INT, &tc->shuffle, "1: seeded shuffle of shards and samples; 0: llm.c's sequential order", 0, 1},
        {"-seed", OPT_INT, &tc->seed, "seed for initialisation, shuffling, sampling and stochastic rounding", INT_MIN, INT_MAX},
        {"-r", OPT_INT, &tc->recompute, "activation recompute: 0 keep all, 1 GELU, 2 + LayerNorm, 3 whole blocks", 0, 3},
        {"-ls", OPT_STRING, &tc->loss_scale, "loss scaling: dynamic, off or a static VALUE (default: dynamic for FP16, else off)"},
        {"-lsi", OPT_INT, &tc->loss_scale_interval, "dynamic loss scaling: clean steps before the scale doubles", 1, INT_MAX},
        {"-ga", OPT_STRING, &tc->grad_accum_type, "gradient accumulation across micro-steps: floatX or fp32"},
        {"-z", OPT_INT, &tc->zero_stage, "ZeRO stage over the data-parallel group: 0, 1, 2 or 3 (zero.h)", 0, 3},
        {"-tp", OPT_INT, &tc->tp, "tensor-parallel ranks: Megatron column/row-parallel blocks, vocab-parallel embedding and loss (tp.h); dp = world / (tp * pp)", 1, 1 << 16},
        {"-pp", OPT_INT, &tc->pp, "pipeline-parallel stages: contiguous layer ranges, the first stages take the remainder (pipeline.h)", 1, 1 << 16},
        {"-ps", OPT_STRING, &tc->schedule, "pipeline schedule: 1f1b (warmup, steady, cooldown) or gpipe (all forwards, then all backwards)"},
        {"-comm", OPT_STRING, &tc->comm_backend, "collectives: nccl (GPU build default) or mpi (CPU build; GPU build with host staging)"},
        {"-trace", OPT_STRING, &tc->trace_path, "write a timeline of the first 3 steps to this file: Chrome trace-event JSON (Perfetto, chrome://tracing), a track per rank"},
        {"-plan", OPT_INT, &tc->plan, "1: print each rank's memory and per-step traffic from the formulas, allocating nothing, and exit", 0, 1},
    };
    int n = sizeof(table) / sizeof(table[0]);
    for (int i = 0; i < n; i++) o[i] = table[i];
    return n;
}

inline void print_usage(const TrainConfig& defaults) {
    TrainConfig tc = defaults;
    Option options[64];
    int n = make_options(&tc, options);
    printf("usage: mpirun -np N ./train_gpt [flags]   (./train_gpt_cpu: the same program on the CPU)\n\n");
    for (int i = 0; i < n; i++) {
        char def[64];
        if (options[i].kind == OPT_INT) snprintf(def, sizeof(def), "%d", *(int*)options[i].value);
        else if (options[i].kind == OPT_FLOAT) snprintf(def, sizeof(def), "%g", *(float*)options[i].value);
        else snprintf(def, sizeof(def), "%s", *(const char**)options[i].value ? *(const char**)options[i].value : "none");
        printf("  %-9s %s (default %s)\n", options[i].flag, options[i].help, def);
    }
    printf("  %-9s this help\n", "-h");
}

// returns false when -h was given
inline bool parse_args(TrainConfig* tc, int argc, char** argv) {
    Option options[64];
    int n = make_options(tc, options);
    for (int a = 1; a < argc; a++) {
        if (strcmp(argv[a], "-h") == 0 || strcmp(argv[a], "--help") == 0) return false;
        Option* opt = NULL;
        for (int i = 0; i < n; i++) if (strcmp(argv[a], options[i].flag) == 0) opt = &options[i];
        if (!opt) fail("unknown flag '%s' (see -h)", argv[a]);
        if (a + 1 >= argc) fail("flag %s needs a value", argv[a]);
        const char* v = argv[++a];
        char* end = NULL;
        if (opt->kind == OPT_INT) {
            errno = 0;
            long long x = strtoll(v, &end, 10);
            if (*v == '\0' || *end != '\0') fail("flag %s expects an integer, got '%s'", opt->flag, v);
            if (errno == ERANGE || x < opt->min || x > opt->max)
                fail("flag %s must be an integer in [%.0f, %.0f], got %s", opt->flag, opt->min, opt->max, v);
            *(int*)opt->value = (int)x;
        } else if (opt->kind == OPT_FLOAT) {
            double x = strtod(v, &end);
            if (*v == '\0' || *end != '\0') fail("flag %s expects a number, got '%s'", opt->flag, v);
            if (!std::isfinite(x) || x < opt->min || x > opt->max)
                fail("flag %s must be a finite number in [%g, %g], got %s", opt->flag, opt->min, opt->max, v);
            *(float*)opt->value = (float)x;
        } else {
            *(const char**)opt->value = v;
        }
    }
    return true;
}

// -plan and the first step's log: what this rank holds (the ledger of the buffer lists, the
// same whether allocated or not) and what it sends over each of its groups per step (the
// formulas of zero.h and tp.h), beside what the first step measured
enum CommGroup { GROUP_DP, GROUP_TP, GROUP_PP, GROUP_EMBEDDING, NUM_COMM_GROUPS };
[[maybe_unused]] static const char* comm_group_names[NUM_COMM_GROUPS] = {"dp", "tp", "pp", "embedding"};
inline Comm* comm_group(Collectives* c, int group) {
    Comm* groups[NUM_COMM_GROUPS] = {&c->dp, &c->tp, &c->pp, &c->embedding};
    return groups[group];
}

struct Accounting {
    size_t memory[NUM_MEMORY_KINDS];
    unsigned long long comm[NUM_COMM_GROUPS][NUM_COMM_KINDS];
    size_t activations_per_layer;
};

inline Accounting gpt2_plan(const GPT2* model, int B, int T, int grad_accum) {
    const GPT2Config& c = model->config;
    int L = gpt2_layers(model), tp = model->layout.tp;
    Accounting a = {};
    for (int k = 0; k < NUM_MEMORY_KINDS; k++) a.memory[k] = model->memory[k];
    for (int t = 0; t < NUM_LAYER_ACTIVATIONS; t++)
        if (recompute_keeps(model->recompute, t)) a.activations_per_layer += layer_activation_bytes(t, B, T, c.channels, c.num_heads, tp);
    ZeroPlan z = zero_plan(&model->zero, grad_accum);
    for (int k = 0; k < NUM_COMM_KINDS; k++) a.comm[GROUP_DP][k] = z.comm[k];
    int block_forwards = model->recompute == 3 ? 2 : 1;  // -r 3 reruns every block's forward, g included
    a.comm[GROUP_TP][COMM_ALL_REDUCE] = (unsigned long long)grad_accum *
        tp_all_reduce_bytes_per_micro_step(L, (size_t)B * T, c.channels, tp, block_forwards, is_first_stage(model->layout), is_last_stage(model->layout));
    a.comm[GROUP_TP][COMM_SCALARS] = 2 * ring_bytes(sizeof(double), tp);  // the squared norm
    // pipeline: each micro-batch's activation to the next stage and its gradient to the previous
    int p = model->layout.pp;
    unsigned long long message = (unsigned long long)B * T * c.channels * sizeof(floatX);
    a.comm[GROUP_PP][COMM_SEND] = grad_accum * message * ((is_last_stage(model->layout) ? 0 : 1) + (is_first_stage(model->layout) ? 0 : 1));
    a.comm[GROUP_PP][COMM_SCALARS] = 2 * 2 * ring_bytes(sizeof(double), p);  // the loss and the squared norm
    // the tied embedding: the unit's gradient shard summed over {first, last} stage
    int ends = model->comm->embedding.size;
    size_t G = model->zero.grads_fp32 ? sizeof(float) : sizeof(floatX);
    a.comm[GROUP_EMBEDDING][COMM_ALL_REDUCE] = ends > 1 ? 2 * ring_bytes(G * unit_shard(&model->zero, 0), ends) : 0;
    return a;
}

// "memory": {kind: bytes, ...}, "comm": {group: {kind: bytes, ...}, ...}: -plan's JSON line and
// each rank's entry of the log's "measured"
inline std::string accounting_json(const Accounting& a) {
    std::string out = "\"memory\": {";
    for (int k = 0; k < NUM_MEMORY_KINDS; k++)
        out += std::string(k ? ", " : "") + "\"" + memory_kind_names[k] + "\": " + std::to_string(a.memory[k]);
    out += "}, \"comm\": {";
    for (int grp = 0; grp < NUM_COMM_GROUPS; grp++) {
        out += std::string(grp ? ", " : "") + "\"" + comm_group_names[grp] + "\": {";
        for (int k = 0; k < NUM_COMM_KINDS; k++)
            out += std::string(k ? ", " : "") + "\"" + comm_kind_names[k] + "\": " + std::to_string(a.comm[grp][k]);
        out += "}";
    }
    return out + "}";
}

inline void print_plan(const GPT2* model, const Accounting& a, int B, int T) {
    const ProcessGrid& g = model->comm->grid;
    const Zero& z = model->zero;
    printf("[rank %d] grid dp=%d tp=%d pp=%d (dp_rank %d, tp_rank %d) | ZeRO-%d | %s | recompute %d | B=%d T=%d | %zu parameters\n",
           g.rank, g.dp, g.tp, g.pp, g.dp_rank, g.tp_rank, z.stage, PRECISION_NAME, model->recompute, B, T, model->num_parameters);
    if (g.rank == 0) {
        printf("parameter tensors held by this rank (layers x rows x cols):\n");
        for (int i = 0; i < NUM_PARAMETER_TENSORS; i++)
            printf("  %-9s %3d x %6d x %5d\n", parameter_names[i], model->shapes[i].layers, model->shapes[i].rows, model->shapes[i].cols);
    }
    printf("[rank %d]   %-22s %16s\n", g.rank, "memory", "bytes");
    size_t total = 0;
    for (int k = 0; k < NUM_MEMORY_KINDS; k++) {
        printf("[rank %d]   %-22s %16zu\n", g.rank, memory_kind_names[k], a.memory[k]);
        total += a.memory[k];
    }
    size_t state = a.memory[MEM_PARAMETERS] + a.memory[MEM_GRADIENTS] + a.memory[MEM_OPTIMIZER];
    printf("[rank %d]   %-22s %16zu (%.2f GiB)\n", g.rank, "total", total, total / 1073741824.0);
    printf("[rank %d]   persistent model state: %zu bytes = %.2f bytes per parameter held\n", g.rank, state,
           (double)state / model->num_parameters);
    printf("[rank %d]   activation sets: %zu (micro-batches in flight on this stage), layers [%d, %d)\n", g.rank,
           model->sets.size(), model->layout.layer_begin, model->layout.layer_end);
    printf("[rank %d]   %-22s %14s %14s %14s %14s\n", g.rank, "sent per step", "dp group", "tp group", "pp group", "embedding");
    for (int k = 0; k < NUM_COMM_KINDS; k++)
        printf("[rank %d]   %-22s %14llu %14llu %14llu %14llu\n", g.rank, comm_kind_names[k], a.comm[GROUP_DP][k],
               a.comm[GROUP_TP][k], a.comm[GROUP_PP][k], a.comm[GROUP_EMBEDDING][k]);
    printf("{\"rank\": %d, \"dp\": %d, \"tp\": %d, \"pp\": %d, \"pp_rank\": %d, \"zero\": %d, \"precision\": \"%s\", "
           "\"recompute\": %d, \"activation_sets\": %zu, \"num_parameters\": %zu, \"activations_per_layer\": %zu, %s}\n",
           g.rank, g.dp, g.tp, g.pp, g.pp_rank, z.stage, PRECISION_NAME, model->recompute, model->sets.size(),
           model->num_parameters, a.activations_per_layer, accounting_json(a).c_str());
    fflush(stdout);
}

// the bytes each group's ledger holds now, to subtract from after a step
struct CommLedger { unsigned long long bytes[NUM_COMM_GROUPS][NUM_COMM_KINDS]; };
inline CommLedger comm_ledger(GPT2* model) {
    CommLedger l;
    for (int grp = 0; grp < NUM_COMM_GROUPS; grp++)
        memcpy(l.bytes[grp], comm_group(model->comm, grp)->bytes, sizeof(l.bytes[grp]));
    return l;
}

// the first step's per-rank allocated bytes and bytes sent, gathered to rank 0, as
// the log's ", \"measured\": [...]" (a collective; empty on other ranks)
inline std::string measured_accounting_json(GPT2* model, const CommLedger& before) {
    Accounting mine = {};
    CommLedger now = comm_ledger(model);
    for (int grp = 0; grp < NUM_COMM_GROUPS; grp++)
        for (int k = 0; k < NUM_COMM_KINDS; k++) mine.comm[grp][k] = now.bytes[grp][k] - before.bytes[grp][k];
    memcpy(mine.memory, model->memory, sizeof(mine.memory));
    std::vector<std::vector<Accounting>> all = comm_gatherv_to_root(&model->comm->world, std::vector<Accounting>{mine});
    if (model->comm->grid.rank != 0) return "";
    std::string out = ", \"measured\": [";
    for (size_t q = 0; q < all.size(); q++) out += std::string(q ? ", " : "") + "{" + accounting_json(all[q][0]) + "}";
    return out + "]";
}

// one JSON object per optimizer step (README: Log rows)
inline void log_step(FILE* log, int step, const StepResult& r, double ms, int tokens, bool scaling, bool validated,
                     double val_loss, bool sampled, const std::string& sample, const std::string& accounting,
                     const std::string& bubble) {
    char norm[32] = "null";  // JSON has no inf or nan: a skipped step's norm
    if (isfinite(r.norm)) snprintf(norm, sizeof(norm), "%.17g", r.norm);
    fprintf(log, "{\"step\": %d, \"loss\": %.17g, \"lr\": %.9g, \"norm\": %s, \"ms\": %.3f, \"tok_per_s\": %.1f",
            step, r.loss, r.lr, norm, ms, tokens / (ms / 1000.0));
    if (scaling) fprintf(log, ", \"scale\": %.9g", r.scale);
    if (r.skipped) fprintf(log, ", \"skipped\": true");
    if (validated) fprintf(log, ", \"val_loss\": %.9g", val_loss);
    if (sampled) fprintf(log, ", \"sample\": \"%s\"", json_escape_utf8(sample).c_str());
    fprintf(log, "%s%s}\n", bubble.c_str(), accounting.c_str());
    fflush(log);
}

inline bool file_exists(const char* path) { struct stat st; return stat(path, &st) == 0; }

// ----------------------------------------------------------------------------
// main and the steps of a run

// the flags every rank checks alike (one line on every rank, exit 1); returns the
// accumulation steps per optimizer step
inline int check_batch_flags(TrainConfig* tc, const ProcessGrid& grid) {
    if (schedule_kind_from_name(tc->schedule) < 0) comm_fail_all("-ps expects 1f1b or gpipe, got '%s'", tc->schedule);
    if ((long long)tc->B * tc->T * grid.dp * grid.pp > INT_MAX)  // token counts and indices are int
        comm_fail_all("-b %d x -t %d x dp %d x pp %d tokens per step overflow a 32-bit index; make -b or -t smaller", tc->B,
                      tc->T, grid.dp, grid.pp);
    int tokens_per_micro = tc->B * tc->T * grid.dp;
    if (tc->total_batch_tokens == -1) tc->total_batch_tokens = tokens_per_micro * grid.pp;  // m = p micro-batches
    if (tc->total_batch_tokens <= 0 || tc->total_batch_tokens % tokens_per_micro != 0)
        comm_fail_all("-d %d is not a multiple of B*T*dp = %d*%d*%d = %d", tc->total_batch_tokens, tc->B, tc->T, grid.dp, tokens_per_micro);
    int micro_batches = tc->total_batch_tokens / tokens_per_micro;
    if (micro_batches < grid.pp && grid.rank == 0)
        printf("note: %d micro-batches for %d pipeline stages: every stage idles at least (p-1)/(m+p-1) = %.0f%% of each step; "
               "raise -d for a smaller bubble\n", micro_batches, grid.pp, 100.0 * pipeline_bubble_fraction(grid.pp, micro_batches));
    if (tc->max_steps == 0) comm_fail_all("-x must be -1 (one epoch) or a number of steps, not 0");
    if (strcmp(tc->grad_accum_type, "fp32") != 0 && strcmp(tc->grad_accum_type, "floatX") != 0)
        comm_fail_all("-ga expects floatX or fp32, got '%s'", tc->grad_accum_type);
    return micro_batches;
}

// -y 1: the newest checkpoint every rank has replaces -e; returns its step (0: none, start fresh)
inline int find_resume_step(TrainConfig* tc, char* model_path, size_t size, int rank) {
    if (!tc->resume) return 0;
    if (!tc->output_dir) comm_fail_all("-y 1 resumes from the checkpoints in -o; give -o");
    int step = comm_min_over_world(checkpoint_latest_step(tc->output_dir));
    checkpoint_model_path(model_path, size, tc->output_dir, step);
    if (step > 0) tc->init = model_path;
    if (rank == 0 && step > 0) printf("resuming from step %d: %s\n", step, model_path);
    if (rank == 0 && step == 0) printf("no checkpoint in %s: starting fresh\n", tc->output_dir);
    return step;
}

// -plan: each rank's shapes, memory and traffic, one rank at a time so the lines do not interleave
inline void print_plans(GPT2* model, const TrainConfig& tc, int grad_accum) {
    Accounting plan = gpt2_plan(model, tc.B, tc.T, grad_accum);
    for (int r = 0; r < model->comm->grid.world; r++) {
        if (r == model->comm->grid.rank) print_plan(model, plan, tc.B, tc.T);
        comm_barrier(&model->comm->world);
    }
}

inline void print_run_header(const GPT2* model, const TrainConfig& tc, bool use_nccl, int grad_accum, int max_steps,
                             const DataLoader& train_loader) {
    const GPT2Config& c = model->config;
    const ProcessGrid& g = model->comm->grid;
    printf("train_gpt | %s | %s | model L=%d NH=%d C=%d V=%d Vp=%d maxT=%d | %zu parameters on rank 0\n", device_name(),
           PRECISION_NAME, c.num_layers, c.num_heads, c.channels, c.vocab_size, c.padded_vocab_size, c.max_seq_len,
           model->num_parameters);
    printf("grid: %d ranks = dp %d x tp %d x pp %d | ZeRO-%d | %s collectives", g.world, g.dp, g.tp, g.pp, tc.zero_stage,
           use_nccl ? "NCCL" : "MPI");
    if (g.pp > 1) printf(" | %s schedule, bubble (p-1)/(m+p-1) = %.3f", tc.schedule, pipeline_bubble_fraction(g.pp, grad_accum));
    printf("\n");
    printf("batch: B=%d T=%d dp=%d, %d tokens per step = %d accumulation steps | %d steps | train %s (%zu tokens)\n",
           tc.B, tc.T, g.dp, tc.total_batch_tokens, grad_accum, max_steps, tc.train_pattern, train_loader.total_tokens);
}

// the step line; elapsed: seconds since this run's first step, steps_run: steps since then
inline void print_step(int done, int max_steps, const StepResult& r, double ms, int tokens, bool scaling, double elapsed,
                       int steps_run) {
    double eta = elapsed / steps_run * (max_steps - done);
    printf("step %5d/%d | loss %.6f | norm %.4f | lr %.3e | %.1f ms | %.0f tok/s | %.0f s elapsed, ETA %.0f s", done,
           max_steps, r.loss, r.norm, r.lr, ms, tokens / (ms / 1000.0), elapsed, eta);
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

// the optimizer state (m, v, master) apart from the layout: every rank's shard, placed by rank 0
// in llm.c's parameter order (checkpoint.h: optimizer_%08d.bin); a collective
inline void write_optimizer_file(GPT2* model, const char* dir, int step) {
    const Zero* z = &model->zero;
    ZeroOptimizerState opt = zero_optimizer_state(z);
    std::vector<std::vector<float>> buffers;
    for (int k = 0; k < opt.num_buffers; k++) {
        std::vector<float> shard(opt.elements);
        device_to_host(shard.data(), opt.buffers[k], opt.elements * sizeof(float));
        if (z->stage == 0 && model->comm->grid.dp_rank != 0) shard.clear();  // stage 0: every DP rank holds it all
        buffers.push_back(gather_in_file_order(model, shard, [&](const ProcessGrid& other, const Unit* units, int n,
                                                                 const std::vector<float>& part, float* out) {
            std::vector<Unit> laid(units, units + n);  // that rank's shard layout, as zero_init made it
            size_t full, shard_elements;
            zero_lay_out_units(laid.data(), n, z->shards, &full, &shard_elements);
            zero_shard_to_units(laid.data(), n, z->shards, z->stage == 0 ? 0 : other.dp_rank, part.data(), out);
        }));
    }
    if (model->comm->grid.rank == 0) checkpoint_write_optimizer(dir, step, buffers);
}
// its inverse on every rank: the file's values, this rank's part, this rank's shard
inline void read_optimizer_file(GPT2* model, const char* dir, int step) {
    Zero* z = &model->zero;
    ZeroOptimizerState opt = zero_optimizer_state(z);
    TensorShape whole[NUM_PARAMETER_TENSORS];
    parameter_shapes(whole, model->config, whole_model_layout(model->config));
    std::vector<std::vector<float>> buffers = checkpoint_read_optimizer(dir, step, opt.num_buffers, parameter_count(whole));
    std::vector<float> values(model->num_parameters), shard(opt.elements);
    for (int k = 0; k < opt.num_buffers; k++) {
        reorder_part(model->config, model->layout, z->units, buffers[k].data(), values.data(), true);
        zero_units_to_shard(z->units, z->num_units, z->shards, z->shard_rank, values.data(), shard.data());
        host_to_device(opt.buffers[k], shard.data(), opt.elements * sizeof(float));
    }
}

// the model file of step `done`, and with -n the ranks' state files and the optimizer file; a collective
inline void write_checkpoint(GPT2* model, const TrainConfig& tc, int done, const LossScaler& scaler,
                             const DataLoader& loader, const Rng& sample_rng) {
    char path[4096];
    checkpoint_model_path(path, sizeof(path), tc.output_dir, done);
    gpt2_write_file(model, path);
    if (tc.checkpoint_every > 0) {
        const ProcessGrid& g = model->comm->grid;
        TrainingState state = {done, tc.B * tc.T * g.dp, tc.total_batch_tokens, model->adam_steps, scaler, loader.epoch,
                               loader.shard_index, loader.sample_index, sample_rng.state};
        write_optimizer_file(model, tc.output_dir, done);
        checkpoint_write_state(tc.output_dir, &model->zero, &state, g, done == tc.die_in_checkpoint && g.rank == g.world - 1);
        comm_barrier(&model->comm->world);  // every rank's files are complete: now it counts
        if (g.rank == 0) {
            checkpoint_write_marker(tc.output_dir, done, g, tc.zero_stage);
            checkpoint_prune(tc.output_dir, tc.keep_checkpoints);
        }
    }
    if (model->comm->grid.rank == 0) printf("wrote %s%s\n", path, tc.checkpoint_every > 0 ? " and the ranks' state files" : "");
}

// a pipeline's bubble: each rank's idle fraction of the step's schedule (time not spent in
// forwards and backwards), the worst over the ranks and the last stage's, beside the formula
// (a collective; empty without a pipeline). In GPT-2 the last stage carries the LM head, the
// heaviest stage, so its idle time is the schedule's bubble; the worst adds load imbalance.
inline std::string bubble_json(GPT2* model, const StepResult& r, int grad_accum) {
    if (model->layout.pp == 1) return "";
    double idle = r.timing.total_ms > 0 ? 1.0 - r.timing.busy_ms / r.timing.total_ms : 0.0;
    double worst = comm_max_over_world(idle), last = comm_max_over_world(is_last_stage(model->layout) ? idle : -1.0);
    char text[160];
    snprintf(text, sizeof(text), ", \"bubble\": %.4f, \"bubble_last_stage\": %.4f, \"bubble_formula\": %.4f", worst, last,
             pipeline_bubble_fraction(model->layout.pp, grad_accum));
    return text;
}

// -trace: rank 0 writes every rank's spans, one track per rank named by its place in the grid (a collective)
inline void write_trace(Collectives* comm, Trace* trace, const char* path) {
    trace->on = false;
    std::vector<char> mine(trace->events.begin(), trace->events.end());
    std::vector<std::vector<char>> all = comm_gatherv_to_root(&comm->world, mine);
    const ProcessGrid& g = comm->grid;
    if (g.rank != 0) return;
    FILE* f = fopen(path, "w");
    if (!f) fail("cannot write trace file %s", path);
    fprintf(f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
    for (int q = 0; q < g.world; q++) {
        ProcessGrid other = make_grid(g.world, q, g.tp, g.pp);
        fprintf(f, "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": %d, \"args\": {\"name\": "
                   "\"rank %d: stage %d, dp %d, tp %d\"}},\n", q, q, other.pp_rank, other.dp_rank, other.tp_rank);
        fprintf(f, "{\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": 0, \"tid\": %d, \"args\": {\"sort_index\": %d}},\n", q, q);
    }
    bool first = true;
    for (const std::vector<char>& events : all) {
        if (events.empty()) continue;
        fprintf(f, "%s%.*s", first ? "" : ",\n", (int)events.size(), events.data());
        first = false;
    }
    bool ok = fprintf(f, "\n]}\n") > 0;
    if (fclose(f) != 0 || !ok) fail("writing trace file %s failed", path);
    printf("wrote %s: open it in ui.perfetto.dev or chrome://tracing\n", path);
}

// -y 1: under the layout that wrote the checkpoint, from this rank's state file (bit for bit);
// under another, from the optimizer file and rank 0's run state (checkpoint.h)
inline void resume_state(GPT2* model, const TrainConfig& tc, int step, LossScaler* scaler, DataLoader* loader, Rng* sample_rng) {
    TrainingState state = {};
    state.scaler = *scaler;
    const ProcessGrid& g = model->comm->grid;
    bool same = comm_min_over_world(checkpoint_same_layout(tc.output_dir, step, &model->zero, g) ? 1 : 0) == 1;
    if (same) {
        checkpoint_read_state(tc.output_dir, step, &model->zero, &state, g);
    } else {
        checkpoint_read_run_state(tc.output_dir, step, &state);
        if (state.micro_batch_tokens != tc.B * tc.T * g.dp || state.step_tokens != tc.total_batch_tokens)
            comm_fail_all("checkpoint step %d was written with %d tokens per global micro-batch (dp*B*T) and -d %d; "
                          "under another layout it resumes with the same (now %d and %d): they fix the data order",
                          step, state.micro_batch_tokens, state.step_tokens, tc.B * tc.T * g.dp, tc.total_batch_tokens);
        read_optimizer_file(model, tc.output_dir, step);
        if (g.rank == 0) printf("resuming under another layout: the optimizer state re-sharded from %s/optimizer_%08d.bin\n",
                                tc.output_dir, step);
    }
    model->adam_steps = state.adam_steps;
    *scaler = state.scaler;
    dataloader_seek(loader, state.epoch, state.shard_index, state.sample_index);
    sample_rng->state = state.sample_rng;
}

// the model this rank holds and its activations for the schedule; allocate = false lays them
// out and books their bytes without allocating (-plan, the memory check)
inline void build_model(GPT2* model, const TrainConfig& tc, Collectives* comm, int grad_accum, bool allocate) {
    gpt2_build(model, tc.init, (uint64_t)tc.seed, comm, tc.zero_stage, strcmp(tc.grad_accum_type, "fp32") == 0, allocate);
    if (tc.T > model->config.max_seq_len) comm_fail_all("-t %d exceeds the model's maximum sequence length %d", tc.T, model->config.max_seq_len);
    model->schedule = (ScheduleKind)schedule_kind_from_name(tc.schedule);
    int sets = pipeline_activation_sets(model->schedule, model->layout.pp_rank, model->layout.pp, grad_accum);
    gpt2_allocate_activations(model, tc.B, tc.T, tc.recompute, sets, allocate);
}

// before anything is allocated: does every rank's plan fit the memory it can use (the GPU's
// free memory; on the CPU build the node's available memory shared by its ranks, plus the
// model's fp32 values that loading holds for a moment)? If not, one line on every rank, exit 1,
// rather than an out-of-memory kill
inline void check_memory(GPT2* model, const TrainConfig& tc, int ranks_sharing) {
    size_t planned = 0, outside = 0;  // outside the plan: what loading holds (CPU), NCCL's buffers (GPU)
    for (size_t bytes : model->memory) planned += bytes;
#ifdef __CUDACC__
    // NCCL allocates its own buffers at a communicator's first collective: NCCL_BUFFSIZE (4 MiB) for
    // each direction of up to 32 channels, 256 MiB, and as much again for the rest. A margin per
    // communicator, stated here, rather than a measure after the collectives have run
    const char* outside_name = "NCCL buffers";
    Comm* groups[] = {&model->comm->dp, &model->comm->tp, &model->comm->pp, &model->comm->embedding};
    for (Comm* g : groups) outside += g->use_nccl ? (size_t)512 << 20 : 0;
#else
    const char* outside_name = "loading";
    TensorShape whole[NUM_PARAMETER_TENSORS];
    parameter_shapes(whole, model->config, whole_model_layout(model->config));
    outside = sizeof(float) * (parameter_count(whole) + model->num_parameters);  // file order and this rank's units
#endif
    size_t need = planned + outside, have = device_memory_available(ranks_sharing);
    bool short_anywhere = comm_max_over_world(need > have ? 1.0 : 0.0) > 0.0;
    if (!short_anywhere) return;
    const double GiB = 1073741824.0;
    size_t state = model->memory[MEM_PARAMETERS] + model->memory[MEM_GRADIENTS] + model->memory[MEM_OPTIMIZER];
    comm_fail_all("the run does not fit in memory: rank %d needs %.2f GiB (model state %.2f, activations and the rest %.2f, "
                  "%s %.2f) and can use %.2f GiB (%d ranks share this %s); try a smaller -b (now %d), -r 3, "
                  "-z 3 (now %d), or more -tp / -pp", model->comm->grid.rank, need / GiB, state / GiB,
                  (planned - state) / GiB, outside_name, outside / GiB, have / GiB, ranks_sharing,
#ifdef __CUDACC__
                  "GPU's free memory",
#else
                  "node's available memory",
#endif
                  tc.B, tc.zero_stage);
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

// the steps, each followed by what the flags ask for: log, validation, samples, trace, checkpoint
inline void train_loop(Run* run) {
    GPT2* model = run->model;
    const TrainConfig& tc = *run->tc;
    int rank = model->comm->grid.rank;
    auto began = std::chrono::steady_clock::now();
    for (int step = run->resume_step; step < run->max_steps; step++) {
        if (tc.trace_path && step == run->resume_step) { comm_barrier(&model->comm->world); trace_start(&run->trace); }
        CommLedger sent_before = comm_ledger(model);
        device_synchronize();
        auto start = std::chrono::steady_clock::now();
        StepResult r = train_step(model, &run->train_loader, &run->scaler, tc, run->grad_accum, step, run->max_steps);
        device_synchronize();
        double ms = ms_since(start);
        int done = step + 1;
        bool last = done == run->max_steps;
        if (rank == 0) print_step(done, run->max_steps, r, ms, tc.total_batch_tokens, run->scaler.enabled,
                                  ms_since(began) / 1000.0, done - run->resume_step);
        // the first step's measured memory and traffic, per rank, in the log beside the plan
        std::string accounting = step == run->resume_step ? measured_accounting_json(model, sent_before) : "";
        bool validated = run->validate && (done % tc.val_every == 0 || last);
        double val_loss = validated ? gpt2_validate(model, &run->val_loader, tc.val_batches) : 0.0;
        if (validated && rank == 0) printf("val loss %.6f\n", val_loss);
        bool sampled = tc.sample_every > 0 && tc.gen_tokens > 0 && done % tc.sample_every == 0;
        std::string sample = sampled ? sample_text(model, tc, &run->sample_rng, &run->decoder, run->can_decode) : "";
        if (sampled && rank == 0) printf("sample%s:\n---\n%s\n---\n", run->can_decode ? "" : " (token ids)", sample.c_str());
        std::string bubble = bubble_json(model, r, run->grad_accum);
        if (run->log) log_step(run->log, done, r, ms, tc.total_batch_tokens, run->scaler.enabled, validated, val_loss, sampled,
                               sample, accounting, bubble);
        if (run->trace.on && (done - run->resume_step == tc.trace_steps || last)) write_trace(model->comm, &run->trace, tc.trace_path);
        if (tc.output_dir && ((tc.checkpoint_every > 0 && done % tc.checkpoint_every == 0) || last))
            write_checkpoint(model, tc, done, run->scaler, run->train_loader, run->sample_rng);
    }
}

#ifndef TESTING
int main(int argc, char** argv) {
    int world, rank, local_rank;
    comm_start(&argc, &argv, &world, &rank, &local_rank);
    TrainConfig tc;
    if (!parse_args(&tc, argc, argv)) {
        if (rank == 0) print_usage(TrainConfig{});
        comm_shutdown();
        return 0;
    }
    if (const char* inject = getenv("TRAIN_GPT_INJECT_NONFINITE")) tc.inject_nonfinite_step = atoi(inject);
    if (const char* die = getenv("TRAIN_GPT_DIE_IN_CHECKPOINT")) tc.die_in_checkpoint = atoi(die);
    bool use_nccl = comm_use_nccl(tc.comm_backend);
    int ranks_on_node = comm_ranks_on_node();
    device_init(local_rank, ranks_on_node);  // before the NCCL communicators, which bind to the current device
    // the ranks of this node on this rank's GPU, told apart by PCI id (CPU build: all, sharing the node's memory)
    int sharing = comm_ranks_on_node_with(device_pci_id()), most = (int)comm_max_over_world(sharing);
    if (use_nccl && most > 1)
        comm_fail_all("%d ranks share one GPU: NCCL needs a GPU per rank; give several ranks one GPU with -comm mpi", most);
    Collectives comm;
    comm_init(&comm, world, rank, local_rank, tc.tp, tc.pp, use_nccl);  // checks that the grid fits the world
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
    check_memory(&model, tc, sharing);
    gpt2_free(&model);
    build_model(&model, tc, &comm, run.grad_accum, true);
    open_data(&run);
    if (rank == 0 && tc.output_dir && !file_exists(tc.output_dir) && mkdir(tc.output_dir, 0755) != 0)
        fail("cannot create output directory %s", tc.output_dir);
    if (rank == 0) print_run_header(&model, tc, use_nccl, run.grad_accum, run.max_steps, run.train_loader);
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

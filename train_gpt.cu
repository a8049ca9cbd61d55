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
Shapes are computed from the parallel layout (tp, pp) even though both are 1 in
this build stage: under tensor parallelism a rank holds 3C/tp rows of qkvw, C/tp
columns of attprojw, and so on; under pipeline parallelism a contiguous range of
layers. Later parallelism changes these numbers, not the code that uses them.

Read in this order: gpt2_forward, gpt2_backward, train_step, main.
*/
#include <stdio.h>     // defines: printf, fopen
#include <stdlib.h>    // defines: malloc, strtol
#include <string.h>    // defines: strcmp
#include <math.h>      // defines: sqrt, expf
#include <stdint.h>    // defines: int32_t, uint16_t
#include <sys/stat.h>  // defines: stat, mkdir
#include <chrono>      // defines: std::chrono::steady_clock
#include "precision.h"             // defines: floatX, to_float, from_float
#include "kernels/common.cuh"      // defines: device_malloc, host_to_device, fail
#include "kernels/encoder.cuh"     // defines: encoder_forward, encoder_backward
#include "kernels/layernorm.cuh"   // defines: layernorm_forward, layernorm_backward
#include "kernels/matmul.cuh"      // defines: matmul_forward, matmul_backward, bias_forward
#include "kernels/attention.cuh"   // defines: attention_forward, attention_backward
#include "kernels/gelu.cuh"        // defines: gelu_forward, gelu_backward, residual_forward
#include "kernels/crossentropy.cuh"// defines: crossentropy_forward_backward
#include "kernels/gradients.cuh"   // defines: global_norm_squared, gradient_accumulate
#include "adamw.h"                 // defines: adamw_update
#include "loss_scale.h"            // defines: LossScaler, loss_scaler_update
#include "recompute.h"             // defines: recompute_keeps, layer_activation_bytes
#include "schedule.h"              // defines: learning_rate_at
#include "random.h"                // defines: Rng, rng_normal
#include "dataloader.h"            // defines: DataLoader
#include "comm.h"                  // defines: Comm, comm_init

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

inline ModelLayout single_rank_layout(const GPT2Config& c) { return ModelLayout{1, 0, 1, 0, 0, c.num_layers}; }
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

// a tensor is `layers` stacked (rows, cols) matrices; vectors have cols = 1
struct TensorShape { int layers, rows, cols; };
inline size_t shape_elements(TensorShape s) { return (size_t)s.layers * s.rows * s.cols; }

// the shapes this rank holds; tp = 1 and all layers give the shapes of the file
inline void parameter_shapes(TensorShape shapes[NUM_PARAMETER_TENSORS], const GPT2Config& c, const ModelLayout& lay) {
    int C = c.channels, L = lay.layer_end - lay.layer_begin, tp = lay.tp;
    bool first = is_first_stage(lay), last = is_last_stage(lay);
    shapes[WTE]      = {1, (first || last) ? c.padded_vocab_size / tp : 0, C};  // vocab-parallel, tied LM head
    shapes[WPE]      = {1, first ? c.max_seq_len : 0, C};
    shapes[LN1W]     = {L, C, 1};
    shapes[LN1B]     = {L, C, 1};
    shapes[QKVW]     = {L, 3 * C / tp, C};   // column-parallel: this rank's heads
    shapes[QKVB]     = {L, 3 * C / tp, 1};
    shapes[ATTPROJW] = {L, C, C / tp};       // row-parallel
    shapes[ATTPROJB] = {L, C, 1};            // added once, after the reduction
    shapes[LN2W]     = {L, C, 1};
    shapes[LN2B]     = {L, C, 1};
    shapes[FCW]      = {L, 4 * C / tp, C};   // column-parallel
    shapes[FCB]      = {L, 4 * C / tp, 1};
    shapes[FCPROJW]  = {L, C, 4 * C / tp};   // row-parallel
    shapes[FCPROJB]  = {L, C, 1};
    shapes[LNFW]     = {1, last ? C : 0, 1};
    shapes[LNFB]     = {1, last ? C : 0, 1};
}

struct ParameterTensors {  // pointers into one buffer; the same struct holds gradients
    floatX *wte, *wpe, *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb, *ln2w, *ln2b,
           *fcw, *fcb, *fcprojw, *fcprojb, *lnfw, *lnfb;
};

inline void point_parameters(ParameterTensors* p, floatX* memory, const TensorShape shapes[NUM_PARAMETER_TENSORS]) {
    floatX** ptrs[NUM_PARAMETER_TENSORS] = {&p->wte, &p->wpe, &p->ln1w, &p->ln1b, &p->qkvw, &p->qkvb, &p->attprojw,
        &p->attprojb, &p->ln2w, &p->ln2b, &p->fcw, &p->fcb, &p->fcprojw, &p->fcprojb, &p->lnfw, &p->lnfb};
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        *ptrs[i] = memory;
        memory += shape_elements(shapes[i]);
    }
}

// the parameters of one layer l (local index), as the forward and backward use them
struct LayerParameters {
    floatX *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
};
inline LayerParameters layer_parameters(const ParameterTensors& p, int l, int C, int tp) {
    size_t CC = (size_t)C * C / tp;
    return LayerParameters{p.ln1w + (size_t)l * C, p.ln1b + (size_t)l * C,
                           p.qkvw + l * 3 * CC, p.qkvb + (size_t)l * 3 * C / tp,
                           p.attprojw + l * CC, p.attprojb + (size_t)l * C,
                           p.ln2w + (size_t)l * C, p.ln2b + (size_t)l * C,
                           p.fcw + l * 4 * CC, p.fcb + (size_t)l * 4 * C / tp,
                           p.fcprojw + l * 4 * CC, p.fcprojb + (size_t)l * C};
}

// ----------------------------------------------------------------------------
// activations: what the forward keeps for the backward (recompute.h decides which
// per-layer tensors exist for every layer), and transient scratch

struct ActivationTensors {
    floatX* encoded;    // (B,T,C)
    void* layer[NUM_LAYER_ACTIVATIONS];  // per recompute.h: L layers if kept, else 1 reused layer
    floatX* lnf;        // (B,T,C)
    float* lnf_mean;    // (B,T)
    float* lnf_rstd;    // (B,T)
    floatX* logits;     // (B,T,Vp/tp), the gradient in place after the loss
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
    float* norm;        // NORM_PARTS
    int* inputs;        // (B,T)
    int* targets;       // (B,T)
};

// one layer's view of the activations, as the forward and backward use them
struct LayerActivations {
    floatX *ln1, *qkv, *atty, *att, *residual2, *ln2, *fch, *fch_gelu, *residual3;
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd;
};

// ----------------------------------------------------------------------------
// memory ledger: every device allocation is booked under one kind, so the program
// can print what it holds (-plan) and tests can compare it with the formulas

enum MemoryKind { MEM_PARAMETERS, MEM_GRADIENTS, MEM_OPTIMIZER, MEM_ACTIVATIONS, MEM_SCRATCH, NUM_MEMORY_KINDS };
static const char* memory_kind_names[NUM_MEMORY_KINDS] = {"parameters", "gradients", "optimizer", "activations", "scratch"};

struct BufferSpec { void** ptr; size_t elements, element_bytes; MemoryKind kind; };

inline void allocate_buffers(const BufferSpec* specs, int n, size_t ledger[NUM_MEMORY_KINDS]) {
    for (int i = 0; i < n; i++) {
        size_t bytes = specs[i].elements * specs[i].element_bytes;
        *specs[i].ptr = device_malloc(bytes);
        ledger[specs[i].kind] += bytes;
    }
}

// ----------------------------------------------------------------------------
// the model

struct GPT2 {
    GPT2Config config;
    ModelLayout layout;
    TensorShape shapes[NUM_PARAMETER_TENSORS];
    size_t num_parameters;          // held by this rank
    ParameterTensors params, grads;
    floatX* params_memory;
    float* master_memory;           // fp32 master weights; NULL in the fp32 build
    floatX* grads_memory;           // allocated with the training state
    float* grads_fp32;              // -ga fp32: micro-step gradients accumulate here; else NULL
    float* m_memory;                // AdamW first moment
    float* v_memory;                // AdamW second moment
    int adam_steps;                 // updates applied (skipped steps do not count)
    int recompute;                  // -r level, recompute.h
    int B, T;                       // activation buffers hold up to (B,T)
    ActivationTensors acts;
    ScratchTensors scratch;
    float* host_losses;             // (B,T)
    size_t memory[NUM_MEMORY_KINDS];  // bytes allocated, by kind
};

inline size_t tensor_offset(const GPT2* m, int index) {
    size_t off = 0;
    for (int i = 0; i < index; i++) off += shape_elements(m->shapes[i]);
    return off;
}

inline LayerActivations layer_activations(const GPT2* model, int l, int B, int T) {
    const GPT2Config& c = model->config;
    void* at[NUM_LAYER_ACTIVATIONS];
    for (int t = 0; t < NUM_LAYER_ACTIVATIONS; t++) {
        size_t layer = recompute_keeps(model->recompute, t) ? l : 0;
        at[t] = (char*)model->acts.layer[t] + layer * layer_activation_bytes(t, B, T, c.channels, c.num_heads, model->layout.tp);
    }
    return LayerActivations{(floatX*)at[LN1], (floatX*)at[QKV], (floatX*)at[ATTY], (floatX*)at[ATT],
                            (floatX*)at[RESIDUAL2], (floatX*)at[LN2], (floatX*)at[FCH], (floatX*)at[FCH_GELU],
                            (floatX*)at[RESIDUAL3], (float*)at[LN1_MEAN], (float*)at[LN1_RSTD],
                            (float*)at[LN2_MEAN], (float*)at[LN2_RSTD]};
}

// copies `values` (fp32, file order, this rank's part) to the device as floatX parameters,
// and, in a 16-bit build, keeps them unrounded as the fp32 master copy
inline void gpt2_set_parameters(GPT2* model, const float* values) {
    size_t n = model->num_parameters;
    floatX* host = (floatX*)malloc(n * sizeof(floatX));
    for (size_t i = 0; i < n; i++) host[i] = from_float(values[i]);
    BufferSpec specs[] = {{(void**)&model->params_memory, n, sizeof(floatX), MEM_PARAMETERS},
                          {(void**)&model->master_memory, FLOATX_IS_FP32 ? 0 : n, sizeof(float), MEM_OPTIMIZER}};
    allocate_buffers(specs, 2, model->memory);
    host_to_device(model->params_memory, host, n * sizeof(floatX));
    if (model->master_memory) host_to_device(model->master_memory, values, n * sizeof(float));
    point_parameters(&model->params, model->params_memory, model->shapes);
    free(host);
}

inline void gpt2_init_layout(GPT2* model, const GPT2Config& config, const ModelLayout& layout) {
    *model = GPT2{};
    model->config = config;
    model->layout = layout;
    parameter_shapes(model->shapes, config, layout);
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) model->num_parameters += shape_elements(model->shapes[i]);
}

inline void gpt2_validate_config(const GPT2Config& c, const char* source) {
    if (c.max_seq_len <= 0 || c.vocab_size <= 0 || c.num_layers <= 0 || c.num_heads <= 0 || c.channels <= 0)
        fail("%s: model dimensions must be positive (maxT=%d V=%d L=%d NH=%d C=%d)", source, c.max_seq_len,
             c.vocab_size, c.num_layers, c.num_heads, c.channels);
    if (c.padded_vocab_size < c.vocab_size) fail("%s: padded vocab %d is smaller than vocab %d", source, c.padded_vocab_size, c.vocab_size);
    if (c.channels % c.num_heads != 0) fail("%s: channels %d not divisible by heads %d", source, c.channels, c.num_heads);
    if (c.vocab_size > 65536) fail("%s: vocab %d does not fit uint16 token shards", source, c.vocab_size);
}

// llm.c model file: int32 header[256] = {magic, version, maxT, V, L, NH, C, Vp}, then parameters
inline void gpt2_build_from_file(GPT2* model, const char* path, ModelLayout (*make_layout)(const GPT2Config&)) {
    FILE* f = fopen(path, "rb");
    if (!f) fail("cannot open model file %s", path);
    int32_t header[256];
    if (fread(header, sizeof(int32_t), 256, f) != 256) fail("model file %s is shorter than its 1024-byte header", path);
    if (header[0] != MODEL_MAGIC) fail("model file %s has magic %d, expected %d (not an llm.c model file?)", path, header[0], MODEL_MAGIC);
    int version = header[1];
    if (version != MODEL_VERSION_FP32 && version != MODEL_VERSION_BF16)
        fail("model file %s has version %d; known versions are 3 (fp32) and 5 (bf16)", path, version);
    GPT2Config c = {header[2], header[3], header[7], header[4], header[5], header[6]};
    gpt2_validate_config(c, path);
    ModelLayout layout = make_layout(c);
    // the file holds the whole model; this build stage keeps all of it (tp = pp = 1)
    GPT2 full;
    gpt2_init_layout(&full, c, single_rank_layout(c));
    size_t n = full.num_parameters, bytes_per = version == MODEL_VERSION_FP32 ? 4 : 2;
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
        for (size_t i = 0; i < n; i++) { uint32_t bits = (uint32_t)raw[i] << 16; memcpy(&values[i], &bits, 4); }
        free(raw);
    }
    fclose(f);
    gpt2_init_layout(model, c, layout);
    if (model->num_parameters != n) fail("sharded model layouts arrive with tensor and pipeline parallelism");
    gpt2_set_parameters(model, values);
    free(values);
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

inline void gpt2_build_from_scratch(GPT2* model, const GPT2Config& c, uint64_t seed, ModelLayout (*make_layout)(const GPT2Config&)) {
    gpt2_validate_config(c, "-e");
    gpt2_init_layout(model, c, make_layout(c));
    if (model->layout.tp != 1 || model->layout.pp != 1) fail("sharded model layouts arrive with tensor and pipeline parallelism");
    float* values = (float*)malloc(model->num_parameters * sizeof(float));
    float* p = values;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        TensorShape s = model->shapes[i];
        for (int l = 0; l < s.layers; l++) {
            gpt2_init_values(p, i, model->layout.layer_begin + l, s, c, seed);
            p += (size_t)s.rows * s.cols;
        }
    }
    gpt2_set_parameters(model, values);
    free(values);
}

// writes an llm.c model file through a temporary name, so a crash never leaves a torn
// file: bf16 builds write their parameters as version 5, the others fp32 as version 3
inline void gpt2_write_file(const GPT2* model, const char* path) {
    size_t n = model->num_parameters;
    floatX* host = (floatX*)malloc(n * sizeof(floatX));
    device_to_host(host, model->params_memory, n * sizeof(floatX));
    bool bf16 = strcmp(PRECISION_NAME, "bf16") == 0;
    size_t bytes_per = bf16 ? 2 : 4;
    char* body = (char*)malloc(n * bytes_per);
    for (size_t i = 0; i < n; i++) {
        if (bf16) memcpy(body + 2 * i, &host[i], 2);
        else { float f = to_float(host[i]); memcpy(body + 4 * i, &f, 4); }
    }
    const GPT2Config& c = model->config;
    int32_t header[256] = {MODEL_MAGIC, bf16 ? MODEL_VERSION_BF16 : MODEL_VERSION_FP32, c.max_seq_len, c.vocab_size,
                           c.num_layers, c.num_heads, c.channels, c.padded_vocab_size};
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE* f = fopen(tmp, "wb");
    if (!f) fail("cannot write model file %s", tmp);
    bool ok = fwrite(header, sizeof(header), 1, f) == 1 && fwrite(body, bytes_per, n, f) == n;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) fail("writing model file %s failed (disk full?)", path);
    free(body);
    free(host);
}

// gradients, optimizer state and activations for micro-batches of up to (B,T)
inline void gpt2_allocate_training_state(GPT2* model, int B, int T, int recompute, bool grads_in_fp32) {
    const GPT2Config& c = model->config;
    int tp = model->layout.tp, L = model->layout.layer_end - model->layout.layer_begin;
    size_t BT = (size_t)B * T, C = c.channels, Cl = C / tp, NHl = c.num_heads / tp, n = model->num_parameters;
    if (recompute < 0 || recompute > 3) fail("-r must be 0, 1, 2 or 3 (got %d)", recompute);
    model->B = B; model->T = T; model->recompute = recompute;
    ActivationTensors& a = model->acts;
    ScratchTensors& s = model->scratch;
    const size_t X = sizeof(floatX), F = sizeof(float);
    BufferSpec specs[64] = {
        {(void**)&model->grads_memory, n, X, MEM_GRADIENTS},
        {(void**)&model->grads_fp32, grads_in_fp32 ? n : 0, F, MEM_GRADIENTS},
        {(void**)&model->m_memory, n, F, MEM_OPTIMIZER}, {(void**)&model->v_memory, n, F, MEM_OPTIMIZER},
        {(void**)&a.encoded, BT * C, X, MEM_ACTIVATIONS},
        {(void**)&a.lnf, BT * C, X, MEM_ACTIVATIONS}, {(void**)&a.lnf_mean, BT, F, MEM_ACTIVATIONS},
        {(void**)&a.lnf_rstd, BT, F, MEM_ACTIVATIONS},
        {(void**)&a.logits, BT * c.padded_vocab_size / tp, X, MEM_ACTIVATIONS}, {(void**)&a.losses, BT, F, MEM_ACTIVATIONS},
        {(void**)&s.proj, BT * C, X, MEM_SCRATCH}, {(void**)&s.dresidual, BT * C, X, MEM_SCRATCH},
        {(void**)&s.dln, BT * C, X, MEM_SCRATCH}, {(void**)&s.datty, BT * Cl, X, MEM_SCRATCH},
        {(void**)&s.dqkv, BT * 3 * Cl, X, MEM_SCRATCH}, {(void**)&s.dfch, BT * 4 * Cl, X, MEM_SCRATCH},
        {(void**)&s.attention, attention_scratch_elements(B, T, Cl, NHl), X, MEM_SCRATCH},
        {(void**)&s.norm, NORM_PARTS, F, MEM_SCRATCH},
        {(void**)&s.inputs, BT, sizeof(int), MEM_SCRATCH}, {(void**)&s.targets, BT, sizeof(int), MEM_SCRATCH},
    };
    int count = 20;
    for (int t = 0; t < NUM_LAYER_ACTIVATIONS; t++) {  // kept: one per layer (activations); else one reused (scratch)
        bool kept = recompute_keeps(recompute, t);
        size_t bytes = layer_activation_bytes(t, B, T, C, c.num_heads, tp);
        specs[count++] = {&a.layer[t], (kept ? L : 1) * bytes, 1, kept ? MEM_ACTIVATIONS : MEM_SCRATCH};
    }
    allocate_buffers(specs, count, model->memory);
    point_parameters(&model->grads, model->grads_memory, model->shapes);
    device_zero(model->grads_memory, n * X);
    device_zero(model->m_memory, n * F);
    device_zero(model->v_memory, n * F);
    model->host_losses = (float*)malloc(BT * F);
}

// ----------------------------------------------------------------------------
// forward, loss, backward

// block l (local index) on its input `residual`, writing the layer's activations
inline void block_forward(GPT2* model, int l, int B, int T) {
    const GPT2Config& c = model->config;
    int tp = model->layout.tp, C = c.channels, Cl = C / tp, NHl = c.num_heads / tp, N = B * T;
    ActivationTensors& a = model->acts;
    ScratchTensors& s = model->scratch;
    LayerParameters w = layer_parameters(model->params, l, C, tp);
    LayerActivations la = layer_activations(model, l, B, T);
    floatX* residual = l == 0 ? a.encoded : layer_activations(model, l - 1, B, T).residual3;
    // attention: qkv is column-parallel (this rank's heads), attproj row-parallel
    layernorm_forward(la.ln1, la.ln1_mean, la.ln1_rstd, residual, w.ln1w, w.ln1b, N, C);
    matmul_forward(la.qkv, la.ln1, w.qkvw, w.qkvb, N, C, 3 * Cl);
    attention_forward(la.atty, la.att, la.qkv, s.attention, B, T, Cl, NHl);
    matmul_forward(s.proj, la.atty, w.attprojw, NULL, N, Cl, C);
    bias_forward(s.proj, w.attprojb, N, C);  // after the sum over tp ranks: added once
    residual_forward(la.residual2, residual, s.proj, (size_t)N * C);
    // MLP: fc column-parallel, fcproj row-parallel
    layernorm_forward(la.ln2, la.ln2_mean, la.ln2_rstd, la.residual2, w.ln2w, w.ln2b, N, C);
    matmul_forward(la.fch, la.ln2, w.fcw, w.fcb, N, C, 4 * Cl);
    gelu_forward(la.fch_gelu, la.fch, (size_t)N * 4 * Cl);
    matmul_forward(s.proj, la.fch_gelu, w.fcprojw, NULL, N, 4 * Cl, C);
    bias_forward(s.proj, w.fcprojb, N, C);
    residual_forward(la.residual3, la.residual2, s.proj, (size_t)N * C);
}

// runs the model on inputs (B,T) up to the logits
inline void gpt2_forward(GPT2* model, const int* inputs, int B, int T) {
    const GPT2Config& c = model->config;
    int tp = model->layout.tp, L = model->layout.layer_end - model->layout.layer_begin, C = c.channels, N = B * T;
    if (B > model->B || T > model->T) fail("forward with (B=%d,T=%d) exceeds the allocated (%d,%d)", B, T, model->B, model->T);
    ParameterTensors& p = model->params;
    ActivationTensors& a = model->acts;
    host_to_device(model->scratch.inputs, inputs, N * sizeof(int));
    encoder_forward(a.encoded, model->scratch.inputs, p.wte, p.wpe, B, T, C);
    for (int l = 0; l < L; l++) block_forward(model, l, B, T);
    floatX* last = layer_activations(model, L - 1, B, T).residual3;
    layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd, last, p.lnfw, p.lnfb, N, C);
    matmul_forward(a.logits, a.lnf, p.wte, NULL, N, C, c.padded_vocab_size / tp);  // tied LM head
}

// cross-entropy of the logits against targets (B,T); with dloss != 0 the logits become their gradient.
// Returns the sum of the B*T token losses.
inline double gpt2_loss(GPT2* model, const int* targets, int B, int T, float dloss) {
    int N = B * T;
    host_to_device(model->scratch.targets, targets, N * sizeof(int));
    crossentropy_forward_backward(model->acts.logits, model->acts.losses, model->scratch.targets, N,
                                  model->config.vocab_size, model->config.padded_vocab_size, dloss);
    device_to_host(model->host_losses, model->acts.losses, N * sizeof(float));
    double sum = 0.0;
    for (int i = 0; i < N; i++) sum += model->host_losses[i];
    return sum;
}

// rebuilds what recompute level r did not keep of layer l, just before its backward
inline void recompute_layer(GPT2* model, int l, int B, int T) {
    if (model->recompute >= 3) { block_forward(model, l, B, T); return; }
    const GPT2Config& c = model->config;
    int C = c.channels, N = B * T;
    LayerParameters w = layer_parameters(model->params, l, C, model->layout.tp);
    LayerActivations la = layer_activations(model, l, B, T);
    if (model->recompute >= 2) {
        floatX* residual = l == 0 ? model->acts.encoded : layer_activations(model, l - 1, B, T).residual3;
        layernorm_forward(la.ln1, la.ln1_mean, la.ln1_rstd, residual, w.ln1w, w.ln1b, N, C);
        layernorm_forward(la.ln2, la.ln2_mean, la.ln2_rstd, la.residual2, w.ln2w, w.ln2b, N, C);
    }
    if (model->recompute >= 1) gelu_forward(la.fch_gelu, la.fch, (size_t)N * 4 * C / model->layout.tp);
}

// accumulates the gradients of the micro-batch whose forward and loss ran last
inline void gpt2_backward(GPT2* model, int B, int T) {
    const GPT2Config& c = model->config;
    int tp = model->layout.tp, L = model->layout.layer_end - model->layout.layer_begin;
    int C = c.channels, Cl = C / tp, NHl = c.num_heads / tp, N = B * T;
    ParameterTensors& p = model->params;
    ParameterTensors& g = model->grads;
    ActivationTensors& a = model->acts;
    ScratchTensors& s = model->scratch;

    // LM head and final LayerNorm; a.logits holds dlogits now
    floatX* last = layer_activations(model, L - 1, B, T).residual3;
    matmul_backward(s.dln, g.wte, NULL, a.logits, a.lnf, p.wte, N, C, c.padded_vocab_size / tp);
    device_zero(s.dresidual, (size_t)N * C * sizeof(floatX));
    layernorm_backward(s.dresidual, g.lnfw, g.lnfb, s.dln, last, p.lnfw, a.lnf_mean, a.lnf_rstd, N, C);

    for (int l = L - 1; l >= 0; l--) {
        recompute_layer(model, l, B, T);
        floatX* residual = l == 0 ? a.encoded : layer_activations(model, l - 1, B, T).residual3;
        LayerParameters w = layer_parameters(p, l, C, tp);
        LayerParameters dw = layer_parameters(g, l, C, tp);
        LayerActivations la = layer_activations(model, l, B, T);
        // MLP; s.dresidual is the gradient of residual3
        matmul_backward(s.dfch, dw.fcprojw, dw.fcprojb, s.dresidual, la.fch_gelu, w.fcprojw, N, 4 * Cl, C);
        gelu_backward(s.dfch, la.fch, s.dfch, (size_t)N * 4 * Cl);
        matmul_backward(s.dln, dw.fcw, dw.fcb, s.dfch, la.ln2, w.fcw, N, C, 4 * Cl);
        layernorm_backward(s.dresidual, dw.ln2w, dw.ln2b, s.dln, la.residual2, w.ln2w, la.ln2_mean, la.ln2_rstd, N, C);
        // attention; s.dresidual is now the gradient of residual2
        matmul_backward(s.datty, dw.attprojw, dw.attprojb, s.dresidual, la.atty, w.attprojw, N, Cl, C);
        attention_backward(s.dqkv, s.datty, la.qkv, la.att, s.attention, B, T, Cl, NHl);
        matmul_backward(s.dln, dw.qkvw, dw.qkvb, s.dqkv, la.ln1, w.qkvw, N, C, 3 * Cl);
        layernorm_backward(s.dresidual, dw.ln1w, dw.ln1b, s.dln, residual, w.ln1w, la.ln1_mean, la.ln1_rstd, N, C);
    }
    encoder_backward(g.wte, g.wpe, s.dresidual, s.inputs, B, T, C);
}

inline void gpt2_zero_grad(GPT2* model) {
    device_zero(model->grads_memory, model->num_parameters * sizeof(floatX));
    if (model->grads_fp32) device_zero(model->grads_fp32, model->num_parameters * sizeof(float));
}

// after each micro-step's backward: with -ga fp32, move the floatX gradients into the fp32 sum
inline void gpt2_accumulate_micro_step(GPT2* model) {
    if (model->grads_fp32) gradient_accumulate(model->grads_fp32, model->grads_memory, model->num_parameters);
}

// the squared norm of the step's gradient (non-finite when any element is)
inline double gpt2_grad_norm_squared(GPT2* model) {
    if (model->grads_fp32) return global_norm_squared(model->grads_fp32, model->num_parameters, model->scratch.norm);
    return global_norm_squared(model->grads_memory, model->num_parameters, model->scratch.norm);
}

// one AdamW step over every tensor; grad_scale multiplies the stored gradients (clip / loss scale)
inline void gpt2_update(GPT2* model, float lr, float weight_decay, float grad_scale, uint64_t seed) {
    int t = ++model->adam_steps;
    uint64_t rounding_seed = random_u32(seed, (uint64_t)t);  // fresh stochastic-rounding bits every step
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        size_t off = tensor_offset(model, i), n = shape_elements(model->shapes[i]);
        AdamWConfig cfg;
        cfg.lr = lr;
        cfg.weight_decay = parameter_is_matrix[i] ? weight_decay : 0.0f;
        float* master = model->master_memory ? model->master_memory + off : NULL;
        if (model->grads_fp32)
            adamw_update(model->params_memory + off, master, model->grads_fp32 + off, model->m_memory + off,
                         model->v_memory + off, n, cfg, t, grad_scale, rounding_seed, off);
        else
            adamw_update(model->params_memory + off, master, model->grads_memory + off, model->m_memory + off,
                         model->v_memory + off, n, cfg, t, grad_scale, rounding_seed, off);
    }
}

// makes this step's gradient non-finite: the testing aid TRAIN_GPT_INJECT_NONFINITE=STEP
inline void gpt2_poison_gradients(GPT2* model) {
    if (model->grads_fp32) { float inf = INFINITY; host_to_device(model->grads_fp32, &inf, sizeof(float)); }
    else { floatX inf = from_float(INFINITY); host_to_device(model->grads_memory, &inf, sizeof(floatX)); }
}

inline void gpt2_free(GPT2* model) {
    void* buffers[] = {model->params_memory, model->master_memory, model->grads_memory, model->grads_fp32,
                       model->m_memory, model->v_memory, model->acts.encoded, model->acts.lnf, model->acts.lnf_mean,
                       model->acts.lnf_rstd, model->acts.logits, model->acts.losses};
    for (void* b : buffers) device_free(b);
    for (void* b : model->acts.layer) device_free(b);
    void** scratch = (void**)&model->scratch;
    for (size_t i = 0; i < sizeof(ScratchTensors) / sizeof(void*); i++) device_free(scratch[i]);
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
    int checkpoint_every = 0;
    int shuffle = 1;
    int seed = 1337;
    int recompute = 0;
    const char* loss_scale = "default";  // dynamic | off | VALUE; default: dynamic for FP16
    int loss_scale_interval = 2000;
    const char* grad_accum_type = "floatX";  // floatX | fp32
    int plan = 0;
    int inject_nonfinite_step = 0; // from TRAIN_GPT_INJECT_NONFINITE, not a flag
};

struct StepResult { double loss, norm; float lr, scale; bool skipped; };

// one optimizer step: grad_accum micro-steps of forward, loss, backward, then the finite
// check, unscaling, clipping and AdamW. `step` counts from 0.
inline StepResult train_step(GPT2* model, DataLoader* loader, LossScaler* scaler, const TrainConfig& tc,
                             int grad_accum, int step, int max_steps) {
    int B = tc.B, T = tc.T;
    double tokens_per_step = (double)B * T * grad_accum;
    StepResult r = {0.0, 0.0, 0.0f, scaler->scale, false};
    // the step's loss is the mean over all its tokens; its gradient is scaled by the loss scale
    float dloss = (float)(scaler->scale / tokens_per_step);
    double loss_sum = 0.0;
    gpt2_zero_grad(model);
    for (int micro = 0; micro < grad_accum; micro++) {
        dataloader_next_batch(loader);
        gpt2_forward(model, loader->inputs, B, T);
        loss_sum += gpt2_loss(model, loader->targets, B, T, dloss);
        gpt2_backward(model, B, T);
        gpt2_accumulate_micro_step(model);
    }
    if (tc.inject_nonfinite_step == step + 1) gpt2_poison_gradients(model);
    r.loss = loss_sum / tokens_per_step;
    r.lr = learning_rate_at(step, tc.lr, tc.warmup, max_steps, tc.final_fraction);
    double norm_squared = gpt2_grad_norm_squared(model);
    r.norm = sqrt(norm_squared) / scaler->scale;  // unscaled before clipping
    if (!loss_scaler_update(scaler, isfinite(norm_squared))) {
        r.skipped = true;
        return r;
    }
    float clip_scale = (tc.grad_clip > 0.0f && r.norm > tc.grad_clip) ? (float)(tc.grad_clip / r.norm) : 1.0f;
    gpt2_update(model, r.lr, tc.weight_decay, clip_scale / r.scale, (uint64_t)tc.seed);
    return r;
}

// mean loss over the first `batches` micro-batches of the validation data
inline double gpt2_validate(GPT2* model, DataLoader* loader, int batches) {
    dataloader_reset(loader);
    double sum = 0.0;
    for (int i = 0; i < batches; i++) {
        dataloader_next_batch(loader);
        gpt2_forward(model, loader->inputs, loader->B, loader->T);
        sum += gpt2_loss(model, loader->targets, loader->B, loader->T, 0.0f);
    }
    return sum / ((double)batches * loader->B * loader->T);
}

// samples `n` tokens after EOT at temperature 1, one full forward per token over the last T tokens
// (simple, not fast: no KV cache)
inline void gpt2_sample(GPT2* model, int* out, int n, Rng* rng) {
    const GPT2Config& c = model->config;
    int* tokens = (int*)malloc((n + 1) * sizeof(int));
    floatX* row = (floatX*)malloc(c.padded_vocab_size * sizeof(floatX));
    tokens[0] = GPT2_EOT;
    for (int t = 1; t <= n; t++) {
        int context = t < model->T ? t : model->T;
        gpt2_forward(model, tokens + (t - context), 1, context);
        device_to_host(row, model->acts.logits + (size_t)(context - 1) * c.padded_vocab_size, c.padded_vocab_size * sizeof(floatX));
        float maxval = -INFINITY;
        for (int v = 0; v < c.vocab_size; v++) maxval = fmaxf(maxval, to_float(row[v]));
        double sum = 0.0;
        for (int v = 0; v < c.vocab_size; v++) sum += exp(to_float(row[v]) - maxval);
        double u = rng_uniform(rng) * sum, acc = 0.0;
        int next = c.vocab_size - 1;
        for (int v = 0; v < c.vocab_size; v++) {
            acc += exp(to_float(row[v]) - maxval);
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
struct Option { const char* flag; OptionKind kind; void* value; const char* help; };

inline int make_options(TrainConfig* tc, Option* o) {
    Option table[] = {
        {"-e", OPT_STRING, &tc->init, "init: llm.c model file (.bin, fp32 v3 or bf16 v5) or dN = GPT-2 of depth N from scratch (d12 = 124M)"},
        {"-i", OPT_STRING, &tc->train_pattern, "train token shards, glob pattern"},
        {"-j", OPT_STRING, &tc->val_pattern, "validation token shards, glob pattern"},
        {"-o", OPT_STRING, &tc->output_dir, "output directory for checkpoints and the final model (none: write nothing)"},
        {"-log", OPT_STRING, &tc->log_path, "append one JSON object per optimizer step to this file"},
        {"-b", OPT_INT, &tc->B, "micro-batch size per rank, in sequences"},
        {"-t", OPT_INT, &tc->T, "sequence length"},
        {"-d", OPT_INT, &tc->total_batch_tokens, "total tokens per optimizer step (-1: B*T*dp); accumulation steps = d / (B*T*dp)"},
        {"-l", OPT_FLOAT, &tc->lr, "peak learning rate"},
        {"-u", OPT_INT, &tc->warmup, "linear warmup steps"},
        {"-q", OPT_FLOAT, &tc->final_fraction, "final learning rate as a fraction of -l (cosine decay; 1 = constant)"},
        {"-c", OPT_FLOAT, &tc->weight_decay, "AdamW weight decay (2-D tensors only)"},
        {"-gc", OPT_FLOAT, &tc->grad_clip, "clip the global gradient norm to this (0: off)"},
        {"-x", OPT_INT, &tc->max_steps, "optimizer steps (-1: one epoch of the training shards)"},
        {"-v", OPT_INT, &tc->val_every, "validate every N steps (0: off)"},
        {"-m", OPT_INT, &tc->val_batches, "validation micro-batches"},
        {"-s", OPT_INT, &tc->sample_every, "sample every N steps (0: off)"},
        {"-g", OPT_INT, &tc->gen_tokens, "tokens to generate per sample"},
        {"-n", OPT_INT, &tc->checkpoint_every, "write a model checkpoint into -o every N steps (0: off)"},
        {"-shuffle", OPT_INT, &tc->shuffle, "1: seeded shuffle of shards and samples; 0: llm.c's sequential order"},
        {"-seed", OPT_INT, &tc->seed, "seed for initialisation, shuffling, sampling and stochastic rounding"},
        {"-r", OPT_INT, &tc->recompute, "activation recompute: 0 keep all, 1 GELU, 2 + LayerNorm, 3 whole blocks"},
        {"-ls", OPT_STRING, &tc->loss_scale, "loss scaling: dynamic, off or a static VALUE (default: dynamic for FP16, else off)"},
        {"-lsi", OPT_INT, &tc->loss_scale_interval, "dynamic loss scaling: clean steps before the scale doubles"},
        {"-ga", OPT_STRING, &tc->grad_accum_type, "gradient accumulation across micro-steps: floatX or fp32"},
        {"-plan", OPT_INT, &tc->plan, "1: print the memory each rank holds (planned and allocated) and exit"},
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
            long x = strtol(v, &end, 10);
            if (*v == '\0' || *end != '\0') fail("flag %s expects an integer, got '%s'", opt->flag, v);
            *(int*)opt->value = (int)x;
        } else if (opt->kind == OPT_FLOAT) {
            float x = strtof(v, &end);
            if (*v == '\0' || *end != '\0') fail("flag %s expects a number, got '%s'", opt->flag, v);
            *(float*)opt->value = x;
        } else {
            *(const char**)opt->value = v;
        }
    }
    return true;
}

// -plan: each kind of memory from its formula (recompute.h, adamw.h) beside what was allocated.
// The last line is the same as JSON for scripts.
inline void print_memory_plan(const GPT2* model, int B, int T, bool grads_in_fp32) {
    const GPT2Config& c = model->config;
    int L = model->layout.layer_end - model->layout.layer_begin, tp = model->layout.tp;
    size_t n = model->num_parameters, X = sizeof(floatX), C = c.channels, N = (size_t)B * T;
    size_t kept_per_layer = 0, reused = 0;
    for (int t = 0; t < NUM_LAYER_ACTIVATIONS; t++) {
        size_t bytes = layer_activation_bytes(t, B, T, C, c.num_heads, tp);
        if (recompute_keeps(model->recompute, t)) kept_per_layer += bytes; else reused += bytes;
    }
    size_t planned[NUM_MEMORY_KINDS] = {
        n * X,                                                            // parameters
        n * X + (grads_in_fp32 ? n * 4 : 0),                              // gradients (+ fp32 accumulator)
        n * 8 + (FLOATX_IS_FP32 ? 0 : n * 4),                             // m, v (+ fp32 master)
        L * kept_per_layer + N * C * X * 2 + N * 4 * 3 + N * c.padded_vocab_size / tp * X,  // + encoded, lnf, stats, logits, losses
        model->memory[MEM_SCRATCH]};                                      // scratch: measured only
    printf("parameter tensors held by this rank (layers x rows x cols):\n");
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++)
        printf("  %-9s %3d x %6d x %5d\n", parameter_names[i], model->shapes[i].layers, model->shapes[i].rows, model->shapes[i].cols);
    printf("memory per rank (%s, recompute %d, B=%d T=%d, %zu parameters):\n", PRECISION_NAME, model->recompute, B, T, n);
    printf("  %-12s %16s %16s\n", "kind", "planned bytes", "allocated bytes");
    for (int k = 0; k < NUM_MEMORY_KINDS; k++)
        printf("  %-12s %16zu %16zu\n", memory_kind_names[k], planned[k], model->memory[k]);
    printf("  bytes per parameter (parameters + gradients + optimizer): %.2f\n",
           (double)(model->memory[MEM_PARAMETERS] + model->memory[MEM_GRADIENTS] + model->memory[MEM_OPTIMIZER]) / n);
    printf("  activations kept per layer: %zu bytes; reused one-layer working set: %zu bytes\n", kept_per_layer, reused);
    printf("{\"num_parameters\": %zu, \"precision\": \"%s\", \"recompute\": %d, \"activations_per_layer\": %zu",
           n, PRECISION_NAME, model->recompute, kept_per_layer);
    for (int k = 0; k < NUM_MEMORY_KINDS; k++)
        printf(", \"%s\": {\"planned\": %zu, \"allocated\": %zu}", memory_kind_names[k], planned[k], model->memory[k]);
    printf("}\n");
}

inline bool file_exists(const char* path) { struct stat st; return stat(path, &st) == 0; }

// ----------------------------------------------------------------------------
// main

#ifndef TESTING
int main(int argc, char** argv) {
    Comm comm = comm_init(&argc, &argv);
    TrainConfig tc;
    if (!parse_args(&tc, argc, argv)) {
        if (comm.rank == 0) print_usage(TrainConfig{});
        comm_finalize();
        return 0;
    }
    if (comm.world != 1) fail("this build trains on one rank; run without mpirun -np (world size is %d)", comm.world);
    int dp = 1;
    if (const char* inject = getenv("TRAIN_GPT_INJECT_NONFINITE")) tc.inject_nonfinite_step = atoi(inject);
    if (tc.B <= 0 || tc.T <= 0) fail("-b and -t must be positive (got %d, %d)", tc.B, tc.T);
    if (tc.total_batch_tokens == -1) tc.total_batch_tokens = tc.B * tc.T * dp;
    int tokens_per_micro = tc.B * tc.T * dp;
    if (tc.total_batch_tokens <= 0 || tc.total_batch_tokens % tokens_per_micro != 0)
        fail("-d %d is not a multiple of B*T*dp = %d*%d*%d = %d", tc.total_batch_tokens, tc.B, tc.T, dp, tokens_per_micro);
    int grad_accum = tc.total_batch_tokens / tokens_per_micro;
    device_init(comm.local_rank);

    GPT2 model;
    if (tc.init[0] == 'd' && strspn(tc.init + 1, "0123456789") == strlen(tc.init + 1) && tc.init[1] != '\0') {
        gpt2_build_from_scratch(&model, gpt2_config_for_depth(atoi(tc.init + 1)), (uint64_t)tc.seed, single_rank_layout);
    } else {
        gpt2_build_from_file(&model, tc.init, single_rank_layout);
    }
    const GPT2Config& c = model.config;
    if (tc.T > c.max_seq_len) fail("-t %d exceeds the model's maximum sequence length %d", tc.T, c.max_seq_len);

    if (!file_exists(tc.train_pattern) && strpbrk(tc.train_pattern, "*?[") == NULL)
        fail("training shards %s not found: run `make data` for tinyshakespeare, or pass -i", tc.train_pattern);
    DataLoader train_loader, val_loader;
    dataloader_init(&train_loader, tc.train_pattern, tc.B, tc.T, 0, dp, c.vocab_size, tc.shuffle != 0, (uint64_t)tc.seed);
    bool validate = tc.val_every > 0 && tc.val_batches > 0;
    if (validate) dataloader_init(&val_loader, tc.val_pattern, tc.B, tc.T, 0, dp, c.vocab_size, false, 0);
    int max_steps = tc.max_steps > 0 ? tc.max_steps : (int)(train_loader.total_tokens / tc.total_batch_tokens);
    if (max_steps <= 0) fail("the training shards hold fewer tokens than one step (-d %d)", tc.total_batch_tokens);
    if (tc.output_dir && !file_exists(tc.output_dir) && mkdir(tc.output_dir, 0755) != 0)
        fail("cannot create output directory %s", tc.output_dir);

    bool grads_in_fp32 = strcmp(tc.grad_accum_type, "fp32") == 0;
    if (!grads_in_fp32 && strcmp(tc.grad_accum_type, "floatX") != 0) fail("-ga expects floatX or fp32, got '%s'", tc.grad_accum_type);
    LossScaler scaler = loss_scaler_init(tc.loss_scale, strcmp(PRECISION_NAME, "fp16") == 0, tc.loss_scale_interval);
    gpt2_allocate_training_state(&model, tc.B, tc.T, tc.recompute, grads_in_fp32);
    if (tc.plan) {
        print_memory_plan(&model, tc.B, tc.T, grads_in_fp32);
        comm_finalize();
        return 0;
    }
    printf("train_gpt | %s | %s | model L=%d NH=%d C=%d V=%d Vp=%d maxT=%d | %zu parameters\n",
           device_name(), PRECISION_NAME, c.num_layers, c.num_heads, c.channels, c.vocab_size,
           c.padded_vocab_size, c.max_seq_len, model.num_parameters);
    printf("batch: B=%d T=%d dp=%d, %d tokens per step = %d accumulation steps | %d steps | train %s (%zu tokens)\n",
           tc.B, tc.T, dp, tc.total_batch_tokens, grad_accum, max_steps, tc.train_pattern, train_loader.total_tokens);

    FILE* log = NULL;
    if (tc.log_path && !(log = fopen(tc.log_path, "a"))) fail("cannot open log file %s", tc.log_path);
    Rng sample_rng = {(uint64_t)tc.seed + 0x5A5A};
    int* sample_tokens = (int*)malloc((tc.gen_tokens > 0 ? tc.gen_tokens : 1) * sizeof(int));
    for (int step = 0; step < max_steps; step++) {
        device_synchronize();
        auto start = std::chrono::steady_clock::now();
        StepResult r = train_step(&model, &train_loader, &scaler, tc, grad_accum, step, max_steps);
        device_synchronize();
        double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
        int done = step + 1;
        bool last = done == max_steps;
        printf("step %5d/%d | loss %.6f | norm %.4f | lr %.3e | %.1f ms | %.0f tok/s", done, max_steps, r.loss,
               r.norm, r.lr, ms, tc.total_batch_tokens / (ms / 1000.0));
        if (scaler.enabled) printf(" | scale %g", r.scale);
        printf("%s\n", r.skipped ? " | skipped: non-finite gradients" : "");
        if (r.skipped && !scaler.enabled) fprintf(stderr, "warning: step %d had non-finite gradients and was skipped\n", done);
        double val_loss = 0.0;
        bool validated = validate && (done % tc.val_every == 0 || last);
        if (validated) {
            val_loss = gpt2_validate(&model, &val_loader, tc.val_batches);
            printf("val loss %.6f\n", val_loss);
        }
        if (tc.sample_every > 0 && tc.gen_tokens > 0 && done % tc.sample_every == 0) {
            gpt2_sample(&model, sample_tokens, tc.gen_tokens, &sample_rng);
            printf("sample (token ids):");
            for (int i = 0; i < tc.gen_tokens; i++) printf(" %d", sample_tokens[i]);
            printf("\n");
        }
        if (log) {
            char norm[32] = "null";  // JSON has no inf or nan: a skipped step's norm
            if (isfinite(r.norm)) snprintf(norm, sizeof(norm), "%.17g", r.norm);
            fprintf(log, "{\"step\": %d, \"loss\": %.17g, \"lr\": %.9g, \"norm\": %s, \"ms\": %.3f, \"tok_per_s\": %.1f",
                    done, r.loss, r.lr, norm, ms, tc.total_batch_tokens / (ms / 1000.0));
            if (scaler.enabled) fprintf(log, ", \"scale\": %.9g", r.scale);
            if (r.skipped) fprintf(log, ", \"skipped\": true");
            if (validated) fprintf(log, ", \"val_loss\": %.9g", val_loss);
            fprintf(log, "}\n");
            fflush(log);
        }
        if (tc.output_dir && ((tc.checkpoint_every > 0 && done % tc.checkpoint_every == 0) || last)) {
            char path[4096];
            snprintf(path, sizeof(path), "%s/model_%08d.bin", tc.output_dir, done);
            gpt2_write_file(&model, path);
            printf("wrote %s\n", path);
        }
    }
    if (log) fclose(log);
    free(sample_tokens);
    dataloader_free(&train_loader);
    if (validate) dataloader_free(&val_loader);
    gpt2_free(&model);
    comm_finalize();
    return 0;
}
#endif

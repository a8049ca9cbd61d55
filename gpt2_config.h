/*
gpt2_config.h: which GPT-2 (its configuration: llm.c's model descriptors dN, gpt2:dN, gpt3:cC and the
model file's header) and which part of it this rank holds (ModelLayout: its layers, a stage's or under
interleaved 1F1B its chunks', and its tensor-parallel part). gpt2.h builds the rank's parameters,
activations and buffers on them.

    GPT2Config   T, V, Vp, L, NH, C (gpt2_config_for_depth, gpt3_config_for_channels,
                 gpt2_config_for_descriptor: -e)
    ModelLayout  tp and this rank's TP part, pp and this rank's stage, the layer ranges it holds
                 (stage_layout: pipeline_sim.h's split of the layers; model_layout: from the process grid)

Applied in gpt2.h: GPT2, parameter_shapes, gpt2_build (the layout); model_file.h: gpt2_create (-e).
*/
#pragma once
// defines: GPT2Config, ModelLayout, LayerRange, whole_model_layout, stage_layout, model_layout, is_first_stage,
//          is_last_stage, layout_layers, model_layer, gpt2_config_for_depth, gpt3_config_for_channels,
//          gpt2_config_for_descriptor, MODEL_MAGIC, MODEL_VERSION_FP32, MODEL_VERSION_BF16, GPT2_EOT
#include <stdlib.h>   // defines: atoi
#include <string.h>   // defines: strspn, strncmp, strlen
#include <string>     // defines: std::string
#include <vector>     // defines: std::vector
#include "comm.h"           // defines: ProcessGrid
#include "pipeline_sim.h"   // defines: stage_layer_range, distribute_layers

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
inline ModelLayout model_layout(const ProcessGrid& grid, const std::vector<int>& stage_layers, int V) {
    return stage_layout(stage_layers, grid.tp, grid.tp_rank, grid.pp_rank, V);
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

// GPT-2 of depth N as llm.c names them (llm.c's gpt2_set_hyperparameters): d12, d24, d36, d48 are
// 124M, 350M, 774M, 1558M; d6, d60, d72, d84 llm.c's unofficial 30M, 2.7B, 7.3B, 12.2B. Other depths,
// which llm.c refuses: C = 64 N, NH = N (head size 64)
inline GPT2Config gpt2_config_for_depth(int depth) {
    GPT2Config c = {1024, 50257, 50304, depth, depth, 64 * depth};
    static const int table[][3] = {{6, 384, 6},    {12, 768, 12},  {24, 1024, 16}, {36, 1280, 20},
                                   {48, 1600, 25}, {60, 1920, 30}, {72, 2880, 30}, {84, 3456, 36}};
    for (const auto& row : table)
        if (row[0] == depth) { c.channels = row[1]; c.num_heads = row[2]; }
    return c;
}
// GPT-3 by its channels, as llm.c names them (llm.c's gpt3_set_hyperparameters; gpt3:c768 is GPT-3 Small, 125M):
// depth and head size from the GPT-3 paper's table 2.1, T up to 2048, dense attention in every layer
// (GPT-3 alternates dense and banded). 0 layers: no such GPT-3
inline GPT2Config gpt3_config_for_channels(int channels) {
    static const int table[][3] = {{384, 6, 64},    {768, 12, 64},   {1024, 24, 64}, {1536, 24, 96}, {2048, 24, 128},
                                   {2560, 32, 80}, {4096, 32, 128}, {5140, 40, 128}, {12288, 96, 128}};
    for (const auto& row : table)
        if (row[0] == channels) return GPT2Config{2048, 50257, 50304, row[1], channels / row[2], channels};
    return GPT2Config{2048, 50257, 50304, 0, 0, channels};
}
// -e as llm.c reads a model descriptor: dN or gpt2:dN, gpt3:cC. "" when `init` is a descriptor (*c
// set), else why not: "file" for a name that is no descriptor (a model file), or the problem
inline std::string gpt2_config_for_descriptor(const char* init, GPT2Config* c) {
    auto number = [](const char* s) { return s[0] != '\0' && strspn(s, "0123456789") == strlen(s) && strlen(s) < 9; };
    const char* depth = strncmp(init, "gpt2:d", 6) == 0 ? init + 6 : init[0] == 'd' ? init + 1 : NULL;
    if (depth && number(depth)) { *c = gpt2_config_for_depth(atoi(depth)); return ""; }
    if (strncmp(init, "gpt2:", 5) == 0) return "-e gpt2:dN expects a depth N, e.g. gpt2:d12";
    if (strncmp(init, "gpt3:", 5) != 0) return "file";
    if (strncmp(init, "gpt3:c", 6) != 0 || !number(init + 6)) return "-e gpt3:cC expects channels C, e.g. gpt3:c768";
    *c = gpt3_config_for_channels(atoi(init + 6));
    if (c->num_layers == 0)
        return "-e " + std::string(init) + ": GPT-3's channels are 384, 768, 1024, 1536, 2048, 2560, 4096, 5140 "
                                           "or 12288";
    return "";
}

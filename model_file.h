/*
model_file.h: the model's values in files, and the checkpoints of a run.

Files are the whole model in llm.c's order, whatever the layout that reads or writes
them: int32 header[256] = {magic 20240326, version, maxT, V, L, NH, C, Vp}, then the 16
tensors one after another (wte, wpe, then ln1w of every layer, ln1b of every layer, ...,
lnfw, lnfb), fp32 (version 3) or bf16 (version 5). A rank holds its part unit by unit
(gpt2.h: the embeddings, each layer, the final LayerNorm), 1/tp of each split
tensor (tp.h), its stage's layers (pipeline.h). reorder_part translates between the two
orders for one part; gather_in_file_order puts every part's values, gathered to rank 0,
where the file wants them. The same two carry the optimizer state (m, v, fp32 master)
into optimizer_%08d.bin, in the model file's order, so a run resumes under any layout.

    reading  -e FILE or dN -> values in file order -> reorder_part (this rank's part)
             -> zero_set_params (this rank's shard, zero.h): gpt2_create, after gpt2_build
             (gpt2.h) lays out the rank's part of the model and its ZeRO shards
    writing  zero_params_to_host -> gather_in_file_order (rank 0) -> llm.c file
A checkpoint at step n (-o, -n; checkpoint.h has the formats) is the model file, the
optimizer file and one state file per rank, then a marker: only a complete set counts.
Resuming under the same layout reads each rank's state file (bit for bit); under
another it re-shards the optimizer file. The model it reads and writes is gpt2.h's.
*/
#pragma once
// defines: reorder_part, layers_held, gpt2_validate_config, read_model_header, read_model_file, gpt2_init_values,
//          init_model_values, gather_in_file_order, gpt2_write_file, find_resume_step,
//          write_optimizer_file, read_optimizer_file, write_checkpoint, resume_state, gpt2_create, checkpoint_bytes
#include <stdio.h>      // defines: fopen, fread
#include <sys/stat.h>   // defines: stat
#include <vector>       // defines: std::vector
#include "gpt2.h"       // defines: GPT2, GPT2Config, ModelLayout, Unit, parameter_shapes, whole_parameter_count
#include "checkpoint.h" // defines: TrainingState, checkpoint_write_state, checkpoint_read_state, ...
#include "options.h"    // defines: TrainConfig
#include "dataloader.h" // defines: DataLoader

// values in llm.c's file order (the whole model) <-> the units of the part `lay` describes
// (unit-major, unpadded): copies that part of every tensor (tp.h: tp_for_each_run)
inline void reorder_part(const GPT2Config& c, const ModelLayout& lay, const Unit* units, const float* src, float* dst,
                         bool file_to_units) {
    TensorShape whole[NUM_PARAMETER_TENSORS], part[NUM_PARAMETER_TENSORS];
    parameter_shapes(whole, c, whole_model_layout(c));
    parameter_shapes(part, c, lay);
    int L = layout_layers(lay);
    size_t file_offset = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        size_t per_layer = (size_t)whole[i].rows * whole[i].cols;
        bool per_block = i > WPE && i < LNFW;
        for (int l = 0; l < part[i].layers && part[i].rows > 0; l++) {
            const Unit& u = units[unit_of(i, l, L)];
            size_t unit_at = u.origin + u.slices[slice_of(i)].offset;
            size_t file_at = file_offset + (size_t)(per_block ? model_layer(lay, l) : 0) * per_layer;
            tp_for_each_run(parameter_partition[i], whole[i].rows, whole[i].cols, lay.tp, lay.tp_rank,
                            [&](size_t local, size_t whole_offset, size_t count) {
                if (file_to_units) memcpy(dst + unit_at + local, src + file_at + whole_offset, count * sizeof(float));
                else memcpy(dst + file_at + whole_offset, src + unit_at + local, count * sizeof(float));
            });
        }
        file_offset += per_layer * whole[i].layers;
    }
}

// which of the model's layers a rank holds, as one number for its checkpoint state file: the
// FNV-1a hash of their indices in the rank's order (two layouts with the same shard sizes can
// still hold other layers: -pl 2,2 and -vp 2 at pp 2 both give stage 0 two layers)
inline uint64_t layers_held(const ModelLayout& lay) {
    uint64_t hash = 14695981039346656037ull;
    for (int l = 0; l < layout_layers(lay); l++) hash = (hash ^ (uint64_t)model_layer(lay, l)) * 1099511628211ull;
    return hash;
}

inline void gpt2_validate_config(const GPT2Config& c, const char* source) {
    if (c.max_seq_len <= 0 || c.vocab_size <= 0 || c.num_layers <= 0 || c.num_heads <= 0 || c.channels <= 0)
        fail("%s: model dimensions must be positive (maxT=%d V=%d L=%d NH=%d C=%d)", source, c.max_seq_len,
             c.vocab_size, c.num_layers, c.num_heads, c.channels);
    if (c.padded_vocab_size < c.vocab_size)
        fail("%s: padded vocab %d is smaller than vocab %d", source, c.padded_vocab_size, c.vocab_size);
    if (c.channels % c.num_heads != 0)
        fail("%s: channels %d not divisible by heads %d", source, c.channels, c.num_heads);
    if (c.vocab_size > 65536) fail("%s: vocab %d does not fit uint16 token shards", source, c.vocab_size);
}

// llm.c model file: int32 header[256] = {magic, version, maxT, V, L, NH, C, Vp}, then the
// parameters in file order. The header alone gives the configuration; returns the version.
inline int read_model_header(const char* path, GPT2Config* config, FILE** opened) {
    FILE* f = fopen(path, "rb");
    if (!f) fail("cannot open model file %s", path);
    int32_t header[256];
    if (fread(header, sizeof(int32_t), 256, f) != 256) fail("model file %s is shorter than its 1024-byte header", path);
    if (header[0] != MODEL_MAGIC)
        fail("model file %s has magic %d, expected %d (not an llm.c model file?)", path, header[0], MODEL_MAGIC);
    int version = header[1];
    if (version != MODEL_VERSION_FP32 && version != MODEL_VERSION_BF16)
        fail("model file %s has version %d; known versions are 3 (fp32) and 5 (bf16)", path, version);
    *config = GPT2Config{header[2], header[3], header[7], header[4], header[5], header[6]};
    gpt2_validate_config(*config, path);
    // the size the header implies, checked before anything is built on it (a damaged header word
    // of 2^31 - 1 layers would otherwise reach the model's allocations)
    size_t n = whole_parameter_count(*config), bytes_per = version == MODEL_VERSION_FP32 ? 4 : 2;
    struct stat st;
    if (stat(path, &st) != 0 || (size_t)st.st_size != 1024 + n * bytes_per)
        fail("model file %s should be %zu bytes for this header (%zu parameters) but is %lld", path,
             1024 + n * bytes_per, n, (long long)st.st_size);
    if (opened) *opened = f; else fclose(f);
    return version;
}

// the parameters of a model file, as fp32 in file order (a bf16 file is widened)
inline float* read_model_file(const char* path, GPT2Config* config) {
    FILE* f;
    int version = read_model_header(path, config, &f);
    size_t n = whole_parameter_count(*config);  // the file's size checked against it (read_model_header)
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


// rank 0: every rank's `mine`, which add_to_part(grid of that rank, its part's units, mine,
// part values) writes into the unit-order values of that rank's part (all of them, or the
// rank's shard), placed in llm.c's file order (the whole model); the other ranks get nothing.
// A collective over the world.
template <typename AddToPart>
inline std::vector<float> gather_in_file_order(GPT2* model, const std::vector<float>& mine, AddToPart add_to_part) {
    const ProcessGrid& grid = model->comm->grid;
    std::vector<std::vector<float>> received = comm_gatherv_to_root(&model->comm->world, mine);
    if (grid.rank != 0) return {};
    const GPT2Config& c = model->config;
    TensorShape whole[NUM_PARAMETER_TENSORS];
    parameter_shapes(whole, c, whole_model_layout(c));
    std::vector<float> values(parameter_count(whole));
    for (int part = grid.tp * grid.pp - 1; part >= 0; part--) {  // part 0's copies of shared tensors land last
        int tp_rank = part % grid.tp, pp_rank = part / grid.tp;
        ModelLayout lay = stage_layout(model->stage_layers, grid.tp, tp_rank, pp_rank, gpt2_chunks(model));
        TensorShape shapes[NUM_PARAMETER_TENSORS];
        parameter_shapes(shapes, c, lay);
        int L = layout_layers(lay);
        Unit* part_units = gpt2_units(shapes, L);
        std::vector<float> part_values(parameter_count(shapes));
        for (int q = 0; q < grid.world; q++) {  // the DP ranks holding this part
            ProcessGrid other = make_grid(grid.world, q, grid.tp, grid.pp, grid.cp);
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
inline FileDigest gpt2_write_file(GPT2* model, const char* path) {
    const ProcessGrid& grid = model->comm->grid;
    std::vector<float> units(model->num_parameters);
    zero_params_to_host(&model->zero, units.data());
    if (grid.replica_rank != 0) units.clear();  // the whole model is the parts of one DP replica (and of one cp rank)
    std::vector<float> values = gather_in_file_order(model, units, [](const ProcessGrid&, const Unit*, int,
                                                                       const std::vector<float>& part, float* out) {
        memcpy(out, part.data(), part.size() * sizeof(float));
    });
    if (grid.rank != 0) return FileDigest{0, 0};
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
    return whole_file_commit(&w);
}

// -y 1: the newest checkpoint every rank has replaces -e; returns its step (0: none, start fresh)
inline int find_resume_step(TrainConfig* tc, char* model_path, size_t size, int rank) {
    tc->init_given = tc->init;
    if (!tc->resume) return 0;
    if (!tc->output_dir) comm_fail_all("-y 1 resumes from the checkpoints in -o; give -o");
    int step = checkpoint_resume_step(tc->output_dir, rank);
    checkpoint_model_path(model_path, size, tc->output_dir, step);
    if (step > 0) tc->init = model_path;
    if (rank == 0 && step > 0) printf("resuming from step %d: %s\n", step, model_path);
    if (rank == 0 && step == 0) printf("no checkpoint in %s: starting fresh\n", tc->output_dir);
    return step;
}

// the optimizer state (m, v, master) apart from the layout: every rank's shard, placed by rank 0
// in llm.c's parameter order (checkpoint.h: optimizer_%08d.bin); a collective
inline FileDigest write_optimizer_file(GPT2* model, const char* dir, int step) {
    const Zero* z = &model->zero;
    ZeroOptimizerState opt = zero_optimizer_state(z);
    std::vector<std::vector<float>> buffers;
    for (int k = 0; k < opt.num_buffers; k++) {
        std::vector<float> shard(opt.elements);
        device_to_host(shard.data(), opt.buffers[k], opt.elements * sizeof(float));
        if (z->stage == 0 && model->comm->grid.replica_rank != 0) shard.clear();  // stage 0: every DP rank holds it all
        buffers.push_back(gather_in_file_order(model, shard, [&](const ProcessGrid& other, const Unit* units, int n,
                                                                 const std::vector<float>& part, float* out) {
            std::vector<Unit> laid(units, units + n);  // that rank's shard layout, as zero_init made it
            size_t full, shard_elements;
            zero_lay_out_units(laid.data(), n, z->shards, &full, &shard_elements);
            zero_shard_to_units(laid.data(), n, z->shards, z->stage == 0 ? 0 : other.replica_rank, part.data(), out);
        }));
    }
    return model->comm->grid.rank == 0 ? checkpoint_write_optimizer(dir, step, buffers) : FileDigest{0, 0};
}

// its inverse on every rank: the file's values, this rank's part, this rank's shard
inline void read_optimizer_file(GPT2* model, const char* dir, int step) {
    Zero* z = &model->zero;
    ZeroOptimizerState opt = zero_optimizer_state(z);
    TensorShape whole[NUM_PARAMETER_TENSORS];
    parameter_shapes(whole, model->config, whole_model_layout(model->config));
    std::vector<std::vector<float>> buffers =
        checkpoint_read_optimizer(dir, step, opt.num_buffers, parameter_count(whole), model->comm->grid.rank);
    std::vector<float> values(model->num_parameters), shard(opt.elements);
    for (int k = 0; k < opt.num_buffers; k++) {
        reorder_part(model->config, model->layout, z->units, buffers[k].data(), values.data(), true);
        zero_units_to_shard(z->units, z->num_units, z->shards, z->shard_rank, values.data(), shard.data());
        host_to_device(opt.buffers[k], shard.data(), opt.elements * sizeof(float));
    }
}

// the model file of step `done`, and with -n the ranks' state files and the optimizer file; a collective
inline void write_checkpoint(GPT2* model, const TrainConfig& tc, int done, const LossScaler& scaler,
                             const DataLoader& loader, const Rng& sample_rng, const OutlierWindows& outliers) {
    char path[4096];
    checkpoint_model_path(path, sizeof(path), tc.output_dir, done);
    watchdog_progress("writing a checkpoint", nullptr);
    FileDigest model_file = gpt2_write_file(model, path);
    if (tc.checkpoint_every > 0) {
        const ProcessGrid& grid = model->comm->grid;
        TrainingState state = {done, tc.B * tc.T * grid.dp, tc.total_batch_tokens, model->adam_steps, scaler,
                               loader.epoch, loader.shard_index, loader.sample_index, sample_rng.state, outliers};
        FileDigest optimizer_file = write_optimizer_file(model, tc.output_dir, done);
        FileDigest state_file =
            checkpoint_write_state(tc.output_dir, &model->zero, &state, grid, layers_held(model->layout),
                                   done == tc.die_in_checkpoint && grid.rank == grid.world - 1);
        // rank 0: every rank's, after all wrote
        std::vector<FileCheck> states = checkpoint_gather_checks(file_check(state_file), grid);
        if (grid.rank == 0) {  // every rank's files are complete: now it counts
            checkpoint_write_marker(tc.output_dir, done, grid, tc.zero_stage, file_check(model_file),
                                    file_check(optimizer_file), states);
            checkpoint_prune(tc.output_dir, tc.keep_checkpoints, tc.major_checkpoint_every);
            run_dir_record(tc.output_dir, tc, grid);  // the first checkpoint: -o is this run's
        }
        comm_barrier(&model->comm->world);  // no rank goes on before the checkpoint is complete
    }
    if (model->comm->grid.rank == 0)
        printf("wrote %s%s\n", path, tc.checkpoint_every > 0 ? " and the ranks' state files" : "");
}

// bytes one checkpoint takes on disk, every rank's files together (what -o must have free before the
// first step): the model file, whole (fp32, or bf16 in a bf16 build), and with -n the optimizer file
// (m, v and the fp32 master where there is one, whole) and every rank's state file (its shard of the
// same: under ZeRO-0 each data-parallel replica holds its part whole); a collective
inline size_t checkpoint_bytes(const GPT2* model, bool with_state) {
    TensorShape whole[NUM_PARAMETER_TENSORS];
    parameter_shapes(whole, model->config, whole_model_layout(model->config));
    size_t parameters = parameter_count(whole);
    ZeroOptimizerState opt = zero_optimizer_state(&model->zero);
    size_t model_file = sizeof(int32_t) * 256 + parameters * (PRECISION == PRECISION_BF16 ? 2 : 4);
    size_t optimizer_file = sizeof(int32_t) * 256 + parameters * sizeof(float) * opt.num_buffers;
    double states = comm_sum_over_world((double)(sizeof(StateHeader) + opt.num_buffers * opt.elements * sizeof(float)));
    return model_file + (with_state ? optimizer_file + (size_t)states : 0);
}

// -y 1: under the layout that wrote the checkpoint, from this rank's state file (bit for bit);
// under another, from the optimizer file and rank 0's run state (checkpoint.h)
inline void resume_state(GPT2* model, const TrainConfig& tc, int step, LossScaler* scaler, DataLoader* loader,
                         Rng* sample_rng, OutlierWindows* outliers) {
    TrainingState state = {};
    state.scaler = *scaler;
    const ProcessGrid& grid = model->comm->grid;
    uint64_t layers = layers_held(model->layout);
    bool same_here = checkpoint_same_layout(tc.output_dir, step, &model->zero, grid, layers);
    bool same = comm_min_over_world(same_here ? 1 : 0) == 1;
    if (same) {
        checkpoint_read_state(tc.output_dir, step, &model->zero, &state, grid, layers);
    } else {
        checkpoint_read_run_state(tc.output_dir, step, &state);
        if (state.micro_batch_tokens != tc.B * tc.T * grid.dp || state.step_tokens != tc.total_batch_tokens)
            comm_fail_all("checkpoint step %d was written with %d tokens per global micro-batch (dp*B*T) and -d %d; "
                          "under another layout it resumes with the same (now %d and %d): they fix the data order",
                          step, state.micro_batch_tokens, state.step_tokens, tc.B * tc.T * grid.dp,
                          tc.total_batch_tokens);
        read_optimizer_file(model, tc.output_dir, step);
        if (grid.rank == 0)
            printf("resuming under another layout: the optimizer state re-sharded from %s/optimizer_%08d.bin\n",
                   tc.output_dir, step);
    }
    model->adam_steps = state.adam_steps;
    *scaler = state.scaler;
    if (state.shard_index < 0 || state.shard_index >= loader->num_shards || state.epoch < 0)
        comm_fail_all("checkpoint step %d was reading shard %d of its epoch; -i %s matches %d: resume with the shards "
                      "it was written with", step, state.shard_index + 1, tc.train_pattern, loader->num_shards);
    dataloader_seek(loader, state.epoch, state.shard_index, state.sample_index);
    sample_rng->state = state.sample_rng;
    *outliers = state.outliers;
}

// ---------------------------------------------------------------- the model built from a file or from scratch

// -e's model (a model file, or dN from scratch: its values drawn from seed), built as gpt2_build
// lays it out (gpt2.h), with this rank's part of the values set. allocate = false only lays it out
// (-plan): no memory, no parameter values.
inline void gpt2_create(GPT2* model, const char* init, uint64_t seed, Collectives* comm, int stage, bool grads_fp32,
                        bool allocate, const char* stage_layers = NULL, int chunks = 1, bool master_weights = true,
                        bool overlap = false) {
    *model = GPT2{};
    GPT2Config c;
    float* file_values = NULL;
    std::string descriptor = gpt2_config_for_descriptor(init, &c);  // dN, gpt2:dN, gpt3:cC: from scratch
    if (descriptor != "" && descriptor != "file") comm_fail_all("%s", descriptor.c_str());
    if (descriptor == "") {
        gpt2_validate_config(c, "-e");
        if (allocate) file_values = init_model_values(c, seed);
    } else if (allocate) {
        file_values = read_model_file(init, &c);
    } else {
        read_model_header(init, &c, NULL);
    }
    gpt2_build(model, c, comm, stage, grads_fp32, allocate, stage_layers, chunks, master_weights, overlap);
    if (!allocate) return;
    float* values = (float*)malloc(model->num_parameters * sizeof(float));
    reorder_part(c, model->layout, model->zero.units, file_values, values, true);
    zero_set_params(&model->zero, values);
    free(values);
    free(file_values);
}

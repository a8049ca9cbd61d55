/*
checkpoint.h: what a run needs, beyond the model file, to continue bit for bit.

A checkpoint at step s is the model file model_%08d.bin (llm.c's format: the floatX
parameters exactly, fp32 or bf16) plus one state file per rank, state_%08d_%05d.bin,
holding what the parameters alone do not say:
    this rank's optimizer shard: m, v and (16-bit builds) the fp32 master weights
    the optimizer step count (AdamW's bias correction, stochastic-rounding seeds)
    the loss scaler (scale, clean steps)
    the data position (epoch, shard, sample) and the sampling RNG
Everything else is a pure function of the flags and the seed: the LR schedule of the
step, the shuffle order of an epoch, the stochastic-rounding bits of a step. So
`-y 1` (resume from the newest checkpoint in -o) continues the same trajectory, and
the tests compare the resumed run's losses and final model with an unbroken run.

A state file records the layout that wrote it (world size, dp, tp, pp, ZeRO stage,
floatX size, shard length); resuming under another layout is refused with a message, as is
a truncated file. Files are written under a temporary name and renamed, so a crash
never leaves a torn checkpoint and never damages an older one.
*/
#pragma once
// defines: TrainingState, checkpoint_write_state, checkpoint_read_state, checkpoint_latest_step
#include <stdio.h>     // defines: fopen, fwrite
#include <dirent.h>    // defines: opendir, readdir
#include <sys/stat.h>  // defines: stat
#include "comm.h"        // defines: ProcessGrid
#include "zero.h"        // defines: Zero, zero_optimizer_state
#include "loss_scale.h"  // defines: LossScaler

#define STATE_MAGIC 20241122
#define STATE_VERSION 2

struct TrainingState {
    int step;              // optimizer steps done (the checkpoint's step number)
    int adam_steps;        // updates applied: skipped steps do not count
    LossScaler scaler;
    int epoch, shard_index;
    size_t sample_index;   // the data loader's position
    uint64_t sample_rng;
};

struct StateHeader {
    int32_t magic, version, step, world, rank, dp, tp, pp, zero_stage, floatx_bytes, num_buffers;
    int32_t adam_steps, scaler_clean_steps, epoch, shard_index;
    float scaler_scale;
    uint64_t shard_elements, sample_index, sample_rng;
};

inline void state_path(char* out, size_t size, const char* dir, int step, int rank) {
    snprintf(out, size, "%s/state_%08d_%05d.bin", dir, step, rank);
}

inline void checkpoint_write_state(const char* dir, const Zero* z, const TrainingState* s, const ProcessGrid& g) {
    char path[4096], tmp[4200];
    state_path(path, sizeof(path), dir, s->step, g.rank);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    ZeroOptimizerState opt = zero_optimizer_state(z);
    StateHeader h = {STATE_MAGIC, STATE_VERSION, s->step, g.world, g.rank, g.dp, g.tp, g.pp, opt.stage, (int)sizeof(floatX),
                     opt.num_buffers, s->adam_steps, s->scaler.clean_steps, s->epoch, s->shard_index, s->scaler.scale,
                     opt.elements, s->sample_index, s->sample_rng};
    FILE* f = fopen(tmp, "wb");
    if (!f) fail("cannot write checkpoint state %s", tmp);
    bool ok = fwrite(&h, sizeof(h), 1, f) == 1;
    std::vector<float> host(opt.elements);
    for (int k = 0; k < opt.num_buffers && ok; k++) {
        device_to_host(host.data(), opt.buffers[k], host.size() * sizeof(float));
        ok = fwrite(host.data(), sizeof(float), host.size(), f) == host.size();
    }
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) fail("writing checkpoint state %s failed (disk full?)", path);
}

// restores this rank's optimizer shard and the run state; every mismatch is one clear error
inline void checkpoint_read_state(const char* dir, int step, Zero* z, TrainingState* s, const ProcessGrid& g) {
    char path[4096];
    state_path(path, sizeof(path), dir, step, g.rank);
    FILE* f = fopen(path, "rb");
    if (!f) fail("cannot open checkpoint state %s (was the run saved with as many ranks?)", path);
    StateHeader h;
    if (fread(&h, sizeof(h), 1, f) != 1) fail("checkpoint state %s is truncated (no header)", path);
    if (h.magic != STATE_MAGIC || h.version != STATE_VERSION) fail("%s is not a version-%d checkpoint state file", path, STATE_VERSION);
    ZeroOptimizerState opt = zero_optimizer_state(z);
    if (h.world != g.world || h.rank != g.rank || h.dp != g.dp || h.tp != g.tp || h.pp != g.pp || h.zero_stage != opt.stage ||
        h.floatx_bytes != (int)sizeof(floatX) || h.num_buffers != opt.num_buffers || h.shard_elements != opt.elements)
        fail("checkpoint state %s was written by another layout (world %d, dp %d, tp %d, pp %d, ZeRO-%d, %d-byte floatX); "
             "this run is world %d, dp %d, tp %d, pp %d, ZeRO-%d, %d-byte floatX", path, h.world, h.dp, h.tp, h.pp,
             h.zero_stage, h.floatx_bytes, g.world, g.dp, g.tp, g.pp, opt.stage, (int)sizeof(floatX));
    struct stat st;
    stat(path, &st);
    size_t expected = sizeof(h) + opt.num_buffers * opt.elements * sizeof(float);
    if ((size_t)st.st_size != expected)
        fail("checkpoint state %s is truncated or padded: %lld bytes, expected %zu", path, (long long)st.st_size, expected);
    std::vector<float> host(opt.elements);
    for (int k = 0; k < opt.num_buffers; k++) {
        if (fread(host.data(), sizeof(float), host.size(), f) != host.size()) fail("checkpoint state %s: short read", path);
        host_to_device(opt.buffers[k], host.data(), host.size() * sizeof(float));
    }
    fclose(f);
    s->step = h.step;
    s->adam_steps = h.adam_steps;
    s->scaler.scale = h.scaler_scale;
    s->scaler.clean_steps = h.scaler_clean_steps;
    s->epoch = h.epoch;
    s->shard_index = h.shard_index;
    s->sample_index = h.sample_index;
    s->sample_rng = h.sample_rng;
}

// the newest step in dir with a model file and this rank's state file, or 0
inline int checkpoint_latest_step(const char* dir, int rank) {
    DIR* d = opendir(dir);
    if (!d) return 0;
    int best = 0;
    while (struct dirent* e = readdir(d)) {
        const char* name = e->d_name;  // exactly model_XXXXXXXX.bin, not a .tmp left by a crash
        if (strlen(name) != 18 || strncmp(name, "model_", 6) != 0 || strcmp(name + 14, ".bin") != 0) continue;
        int step = atoi(name + 6);
        if (step > best) {
            char state[4096];
            struct stat st;
            state_path(state, sizeof(state), dir, step, rank);
            if (stat(state, &st) == 0) best = step;
        }
    }
    closedir(d);
    return best;
}

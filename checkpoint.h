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
a truncated file.

Crash safety: every file is written under a temporary name and renamed when complete, and
a checkpoint counts only once rank 0 has written its marker, complete_%08d, after every
rank finished its files (a barrier). A rank killed while writing leaves no marker, so
`-y 1` takes the newest step that has one, and the previous checkpoint is untouched.
`-nk N` keeps the newest N checkpoints: older ones lose their marker first, then their files.
*/
#pragma once
// defines: TrainingState, checkpoint_write_state, checkpoint_read_state, checkpoint_write_marker,
//          checkpoint_latest_step, checkpoint_prune
#include <stdio.h>     // defines: fopen, fwrite
#include <dirent.h>    // defines: opendir, readdir
#include <signal.h>    // defines: raise, SIGKILL
#include <unistd.h>    // defines: unlink
#include <algorithm>   // defines: std::sort
#include <string>      // defines: std::string
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

// die_midway: a test hook (tests/test_resume.sh): the process kills itself (SIGKILL) with the
// file half written, as a crash would
inline void checkpoint_write_state(const char* dir, const Zero* z, const TrainingState* s, const ProcessGrid& g,
                                   bool die_midway = false) {
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
        if (die_midway) { fflush(f); raise(SIGKILL); }
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

inline void marker_path(char* out, size_t size, const char* dir, int step) {
    snprintf(out, size, "%s/complete_%08d", dir, step);
}

// rank 0, after every rank's files of `step` are complete: the checkpoint now counts
inline void checkpoint_write_marker(const char* dir, int step, const ProcessGrid& g, int zero_stage) {
    char path[4096], tmp[4200];
    marker_path(path, sizeof(path), dir, step);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE* f = fopen(tmp, "w");
    if (!f) fail("cannot write checkpoint marker %s", tmp);
    bool ok = fprintf(f, "step %d: model file and %d state files, dp %d tp %d pp %d ZeRO-%d\n", step, g.world, g.dp, g.tp,
                      g.pp, zero_stage) > 0;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) fail("writing checkpoint marker %s failed (disk full?)", path);
}

// the steps of dir's files named PREFIX%08dSUFFIX, ascending
inline std::vector<int> steps_named(const char* dir, const char* prefix, const char* suffix) {
    std::vector<int> steps;
    DIR* d = opendir(dir);
    if (!d) return steps;
    size_t p = strlen(prefix), q = strlen(suffix);
    while (struct dirent* e = readdir(d)) {
        const char* name = e->d_name;  // exactly PREFIX + 8 digits + SUFFIX: not a .tmp left by a crash
        if (strlen(name) != p + 8 + q || strncmp(name, prefix, p) != 0 || strcmp(name + p + 8, suffix) != 0) continue;
        if (strspn(name + p, "0123456789") == 8) steps.push_back(atoi(name + p));
    }
    closedir(d);
    std::sort(steps.begin(), steps.end());
    return steps;
}

// the newest step in dir with a marker, a model file and this rank's state file, or 0
inline int checkpoint_latest_step(const char* dir, int rank) {
    int best = 0;
    for (int step : steps_named(dir, "complete_", "")) {
        char model[4096], state[4096];
        struct stat st;
        snprintf(model, sizeof(model), "%s/model_%08d.bin", dir, step);
        state_path(state, sizeof(state), dir, step, rank);
        if (stat(model, &st) == 0 && stat(state, &st) == 0) best = step;
    }
    return best;
}

// -nk: all but the newest `keep` checkpoints go, each marker first (rank 0)
inline void checkpoint_prune(const char* dir, int keep) {
    std::vector<int> steps = steps_named(dir, "complete_", "");
    for (size_t k = 0; keep > 0 && k + keep < steps.size(); k++) {
        char path[4096];
        marker_path(path, sizeof(path), dir, steps[k]);
        unlink(path);
        snprintf(path, sizeof(path), "%s/model_%08d.bin", dir, steps[k]);
        unlink(path);
        char prefix[32];
        snprintf(prefix, sizeof(prefix), "state_%08d_", steps[k]);
        DIR* d = opendir(dir);
        while (struct dirent* e = d ? readdir(d) : NULL)
            if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) unlink((std::string(dir) + "/" + e->d_name).c_str());
        if (d) closedir(d);
    }
}

/*
checkpoint.h: what a run needs, beyond the model file, to continue bit for bit.

A checkpoint at step s is the model file model_%08d.bin (llm.c's format: the floatX
parameters exactly, fp32 or bf16), the optimizer file optimizer_%08d.bin (below), the
marker complete_%08d, and one state file per rank, state_%08d_%05d.bin, holding what the
parameters alone do not say:
    this rank's optimizer shard: m, v and (16-bit builds) the fp32 master weights
    the optimizer step count (AdamW's bias correction, stochastic-rounding seeds)
    the loss scaler (scale, clean steps)
    the data position (epoch, shard, sample) and the sampling RNG
Everything else is a pure function of the flags and the seed: the LR schedule of the
step, the shuffle order of an epoch, the stochastic-rounding bits of a step. So
`-y 1` (resume from the newest checkpoint in -o) continues the same trajectory, and
the tests compare the resumed run's losses and final model with an unbroken run.

A state file records the layout that wrote it (world size, dp, tp, pp, ZeRO stage,
floatX size, shard length). Under the same layout a run resumes from the state files, bit
for bit. Under another one (dp, tp, pp, ZeRO stage; the same precision, total batch -d and
global micro-batch dp*B*T, which fix the data order) it resumes from optimizer_%08d.bin:
m, v and the master weights in llm.c's parameter order, written by rank 0 like a model file
and cut by each rank into its new shard; the run state comes from rank 0's state file.
That continuation equals the unbroken run to fp32 round-off, not bit for bit: the new
layout sums gradients over other ranks, in another order.

Crash safety: every file is written under a temporary name and renamed when complete, and
a checkpoint counts only once rank 0 has written its marker, complete_%08d, after every
rank finished its files; no rank goes on before the marker is written (a barrier). A rank
killed while writing leaves no marker, and a full disk fails the write with one line, its
partial file removed: either way the previous checkpoint is untouched.
Damage after the fact (a truncated file, flipped bits): the marker names every file of the
checkpoint with its size and a 64-bit FNV-1a hash taken as it was written (base.h: FileDigest),
and `-y 1` verifies the checkpoints newest first, passing over each one that does not verify with
one line saying which file and why, down to the newest that does (none: one line, exit 1).
`-nk N` keeps the newest N checkpoints: older ones lose their marker first, then their files.
*/
#pragma once
// defines: TrainingState, checkpoint_model_path, checkpoint_write_state, checkpoint_read_state, checkpoint_same_layout,
//          checkpoint_read_run_state, checkpoint_write_optimizer, checkpoint_read_optimizer, checkpoint_write_marker,
//          checkpoint_prune, OPTIMIZER_MAGIC, STATE_MAGIC, STATE_VERSION, StateHeader, header_matches_layout,
//          marker_path, optimizer_path, read_state_header, state_path, steps_named, take_run_state,
//          remove_unfinished_checkpoints, check_output_dir, output_dir_problem, checkpoint_gather_checks,
//          checkpoint_problem, checkpoint_resume_step
#include <stdio.h>     // defines: fopen, fwrite
#include <dirent.h>    // defines: opendir, readdir
#include <signal.h>    // defines: raise, SIGKILL
#include "run_dir.h"   // defines: run_dir_lock
#include <unistd.h>    // defines: unlink
#include <algorithm>   // defines: std::sort
#include <string>      // defines: std::string
#include <sys/stat.h>  // defines: stat, mkdir
#include <sys/statvfs.h>  // defines: statvfs
#include <errno.h>     // defines: errno
#include "comm.h"        // defines: ProcessGrid
#include "zero.h"        // defines: Zero, zero_optimizer_state
#include "loss_scale.h"  // defines: LossScaler
#include "outlier.h"     // defines: OutlierWindows
#include "options.h"     // defines: TrainConfig

#define STATE_MAGIC 20241122
#define STATE_VERSION 5  // 4: the layers a rank holds (layers_held); 5: the outlier windows (-sl, -sg)
#define OPTIMIZER_MAGIC 20241123

struct TrainingState {
    int step;              // optimizer steps done (the checkpoint's step number)
    int micro_batch_tokens, step_tokens;  // dp*B*T (one sample of the loader) and -d: the data order
    int adam_steps;        // updates applied: skipped steps do not count
    LossScaler scaler;
    int epoch, shard_index;
    size_t sample_index;   // the data loader's position
    uint64_t sample_rng;
    OutlierWindows outliers;  // -sl, -sg: the last steps' losses and norms (outlier.h)
};

struct StateHeader {
    int32_t magic, version, step, world, rank, dp, tp, pp, zero_stage, floatx_bytes, num_buffers;
    int32_t adam_steps, scaler_clean_steps, epoch, shard_index, micro_batch_tokens, step_tokens;
    float scaler_scale;
    uint64_t shard_elements, sample_index, sample_rng;
    uint64_t layers_held;  // which of the model's layers the rank holds (-pl, -vp move them at the same sizes)
    OutlierWindows outliers;
};

inline void checkpoint_model_path(char* out, size_t size, const char* dir, int step) {
    snprintf(out, size, "%s/model_%08d.bin", dir, step);
}
inline void state_path(char* out, size_t size, const char* dir, int step, int rank) {
    snprintf(out, size, "%s/state_%08d_%05d.bin", dir, step, rank);
}

// die_midway: a test hook (tests/test_resume.sh): the process kills itself (SIGKILL) with the
// file half written, as a crash would
inline FileDigest checkpoint_write_state(const char* dir, const Zero* z, const TrainingState* s,
                                        const ProcessGrid& grid, uint64_t layers_held, bool die_midway = false) {
    char path[4096];
    state_path(path, sizeof(path), dir, s->step, grid.rank);
    ZeroOptimizerState opt = zero_optimizer_state(z);
    StateHeader h = {STATE_MAGIC, STATE_VERSION, s->step, grid.world, grid.rank, grid.dp, grid.tp, grid.pp, opt.stage,
                     (int)sizeof(floatX), opt.num_buffers, s->adam_steps, s->scaler.clean_steps, s->epoch,
                     s->shard_index, s->micro_batch_tokens, s->step_tokens, s->scaler.scale, opt.elements,
                     s->sample_index, s->sample_rng, layers_held, s->outliers};
    WholeFile w = whole_file_open(path, "checkpoint state");
    whole_file_write(&w, &h, sizeof(h));
    std::vector<float> host(opt.elements);
    for (int k = 0; k < opt.num_buffers; k++) {
        device_to_host(host.data(), opt.buffers[k], host.size() * sizeof(float));
        whole_file_write(&w, host.data(), host.size() * sizeof(float));
        if (die_midway) { fflush(w.f); raise(SIGKILL); }
    }
    return whole_file_commit(&w);
}

// every rank's state file check (size, hash), at rank 0 (empty elsewhere), once every rank has written its file
inline std::vector<FileCheck> checkpoint_gather_checks(FileCheck mine, const ProcessGrid& grid) {
    uint64_t pair[2] = {(uint64_t)mine.bytes, mine.hash};
    std::vector<uint64_t> all(grid.rank == 0 ? 2 * (size_t)grid.world : 0);
    MPI_Gather(pair, 2, MPI_UINT64_T, all.data(), 2, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    std::vector<FileCheck> checks;
    for (size_t r = 0; r < all.size() / 2; r++) checks.push_back(FileCheck{(size_t)all[2 * r], all[2 * r + 1]});
    return checks;
}

// the header of rank `rank`'s state file of `step`, opened (f: NULL to close it); false if there is no such file
inline bool read_state_header(const char* dir, int step, int rank, StateHeader* h, FILE** opened) {
    char path[4096];
    state_path(path, sizeof(path), dir, step, rank);
    FILE* f = fopen(path, "rb");
    if (!f) return false;
    if (fread(h, sizeof(*h), 1, f) != 1) fail("checkpoint state %s is truncated (no header)", path);
    if (h->magic != STATE_MAGIC || h->version != STATE_VERSION)
        fail("%s is not a version-%d checkpoint state file", path, STATE_VERSION);
    if (opened) *opened = f; else fclose(f);
    return true;
}
// whether the state file's header was written by this layout (rank, grid, layers, ZeRO shard, precision)
inline bool header_matches_layout(const StateHeader& h, const ZeroOptimizerState& opt, const ProcessGrid& grid,
                                  uint64_t layers_held) {
    return h.world == grid.world && h.rank == grid.rank && h.dp == grid.dp && h.tp == grid.tp && h.pp == grid.pp &&
           h.zero_stage == opt.stage && h.floatx_bytes == (int)sizeof(floatX) && h.num_buffers == opt.num_buffers &&
           h.shard_elements == opt.elements && h.layers_held == layers_held;
}
inline void take_run_state(const StateHeader& h, TrainingState* s) {
    s->step = h.step;
    s->adam_steps = h.adam_steps;
    s->scaler.scale = h.scaler_scale;
    s->scaler.clean_steps = h.scaler_clean_steps;
    s->epoch = h.epoch;
    s->shard_index = h.shard_index;
    s->sample_index = h.sample_index;
    s->sample_rng = h.sample_rng;
    s->micro_batch_tokens = h.micro_batch_tokens;
    s->step_tokens = h.step_tokens;
    s->outliers = h.outliers;
}

// whether this rank's state file of `step` was written by this very layout (then it resumes
// bit for bit from it; otherwise from the optimizer file, checkpoint_read_optimizer)
inline bool checkpoint_same_layout(const char* dir, int step, const Zero* z, const ProcessGrid& grid,
                                   uint64_t layers_held) {
    StateHeader h;
    if (!read_state_header(dir, step, grid.rank, &h, NULL)) return false;
    return header_matches_layout(h, zero_optimizer_state(z), grid, layers_held);
}

// the run state alone (step, scaler, data position), from rank 0's state file: what a resume
// under another layout takes, since it is the same on every rank
inline void checkpoint_read_run_state(const char* dir, int step, TrainingState* s) {
    StateHeader h;
    if (!read_state_header(dir, step, 0, &h, NULL))
        fail("checkpoint step %d in %s has no state file of rank 0", step, dir);
    if (h.floatx_bytes != (int)sizeof(floatX))
        fail("checkpoint step %d was written by a %d-byte floatX build; this is %d bytes (%s)", step, h.floatx_bytes,
             (int)sizeof(floatX), PRECISION_NAME);
    take_run_state(h, s);
}

// restores this rank's optimizer shard and the run state; every mismatch is one clear error
inline void checkpoint_read_state(const char* dir, int step, Zero* z, TrainingState* s, const ProcessGrid& grid,
                                  uint64_t layers_held) {
    char path[4096];
    state_path(path, sizeof(path), dir, step, grid.rank);
    StateHeader h;
    FILE* f = NULL;
    if (!read_state_header(dir, step, grid.rank, &h, &f)) fail("cannot open checkpoint state %s", path);
    ZeroOptimizerState opt = zero_optimizer_state(z);
    if (!header_matches_layout(h, opt, grid, layers_held))
        fail(
            "checkpoint state %s was written by another layout (world %d, dp %d, tp %d, pp %d, ZeRO-%d, %d-byte "
            "floatX%s); "
            "this run is world %d, dp %d, tp %d, pp %d, ZeRO-%d, %d-byte floatX",
            path, h.world, h.dp, h.tp, h.pp, h.zero_stage, h.floatx_bytes,
            h.layers_held == layers_held ? "" : ", other layers", grid.world, grid.dp, grid.tp, grid.pp, opt.stage,
            (int)sizeof(floatX));
    struct stat st;
    stat(path, &st);
    size_t expected = sizeof(h) + opt.num_buffers * opt.elements * sizeof(float);
    if ((size_t)st.st_size != expected)
        fail("checkpoint state %s is truncated or padded: %lld bytes, expected %zu", path, (long long)st.st_size,
             expected);
    std::vector<float> host(opt.elements);
    for (int k = 0; k < opt.num_buffers; k++) {
        if (fread(host.data(), sizeof(float), host.size(), f) != host.size())
            fail("checkpoint state %s: short read", path);
        host_to_device(opt.buffers[k], host.data(), host.size() * sizeof(float));
    }
    fclose(f);
    take_run_state(h, s);
}

// optimizer_%08d.bin, rank 0's: the optimizer state apart from any layout: int32 header[256] =
// {OPTIMIZER_MAGIC, 1, buffers, elements (low, high 32 bits)}, then each buffer (m, v, and the
// fp32 master weights in 16-bit builds) as fp32 in llm.c's parameter order, like a model file
inline void optimizer_path(char* out, size_t size, const char* dir, int step) {
    snprintf(out, size, "%s/optimizer_%08d.bin", dir, step);
}
inline FileDigest checkpoint_write_optimizer(const char* dir, int step,
                                             const std::vector<std::vector<float>>& buffers) {
    char path[4096];
    optimizer_path(path, sizeof(path), dir, step);
    size_t n = buffers[0].size();
    int32_t header[256] = {OPTIMIZER_MAGIC, 1, (int32_t)buffers.size(), (int32_t)(n & 0xFFFFFFFF), (int32_t)(n >> 32)};
    WholeFile w = whole_file_open(path, "optimizer state");
    whole_file_write(&w, header, sizeof(header));
    for (const std::vector<float>& b : buffers) whole_file_write(&w, b.data(), n * sizeof(float));
    return whole_file_commit(&w);
}
inline std::vector<std::vector<float>> checkpoint_read_optimizer(const char* dir, int step, int num_buffers,
                                                                 size_t elements, int rank) {
    char path[4096];
    optimizer_path(path, sizeof(path), dir, step);
    FILE* f = fopen(path, "rb");
    if (!f) fail("cannot open %s: a checkpoint resumed under another layout needs its optimizer file", path);
    int32_t header[256];
    if (fread(header, sizeof(header), 1, f) != 1 || header[0] != OPTIMIZER_MAGIC || header[1] != 1)
        fail("%s is not a version-1 optimizer state file", path);
    size_t n = (size_t)(uint32_t)header[3] | (size_t)(uint32_t)header[4] << 32;
    // m and v come first: a run under -w 0 takes them and leaves the master (llm.c warns likewise);
    // the other way there is no master to take (llm.c refuses too)
    if (header[2] == 2 && num_buffers == 3 && n == elements)
        fail("%s was written under -w 0 (no fp32 master weights); resume it with -w 0", path);
    bool master_left = header[2] == 3 && num_buffers == 2;
    if (master_left && rank == 0) printf("note: %s: its fp32 master weights are left (-w 0)\n", path);
    if ((header[2] != num_buffers && !master_left) || n != elements)
        fail("%s holds %d buffers of %zu values; this model needs %d of %zu", path, header[2], n, num_buffers,
             elements);
    std::vector<std::vector<float>> buffers(num_buffers, std::vector<float>(n));
    for (auto& b : buffers)
        if (fread(b.data(), sizeof(float), n, f) != n) fail("optimizer state %s is truncated", path);
    fclose(f);
    return buffers;
}

inline void marker_path(char* out, size_t size, const char* dir, int step) {
    snprintf(out, size, "%s/complete_%08d", dir, step);
}

// rank 0, after every rank's files of `step` are complete: the checkpoint now counts. The marker
// names each file with its size and hash (FileDigest), which a resume verifies before trusting it:
//     step 4: model file and 2 state files, dp 2 tp 1 pp 1 ZeRO-1
//     file model_00000004.bin 1060864 9c1185a5c5e9fc54
//     file state_00000004_00001.bin ...
inline void checkpoint_write_marker(const char* dir, int step, const ProcessGrid& grid, int zero_stage, FileCheck model,
                                    FileCheck optimizer, const std::vector<FileCheck>& states) {
    char path[4096], line[256];
    marker_path(path, sizeof(path), dir, step);
    std::string text = "step " + std::to_string(step) + ": model file and " + std::to_string(grid.world) +
                       " state files, dp " + std::to_string(grid.dp) + " tp " + std::to_string(grid.tp) + " pp " +
                       std::to_string(grid.pp) + " ZeRO-" + std::to_string(zero_stage) + "\n";
    auto add = [&](const char* name, FileCheck d) {
        snprintf(line, sizeof(line), "file %s %zu %016llx\n", name, d.bytes, (unsigned long long)d.hash);
        text += line;
    };
    snprintf(line, sizeof(line), "model_%08d.bin", step), add(std::string(line).c_str(), model);
    snprintf(line, sizeof(line), "optimizer_%08d.bin", step), add(std::string(line).c_str(), optimizer);
    for (int r = 0; r < (int)states.size(); r++)
        snprintf(line, sizeof(line), "state_%08d_%05d.bin", step, r), add(std::string(line).c_str(), states[r]);
    WholeFile w = whole_file_open(path, "checkpoint marker");
    whole_file_write(&w, text.data(), text.size());
    whole_file_commit(&w);
}

// what is wrong with checkpoint `step` in dir: a marker that does not name every file of its checkpoint
// (the model file, the optimizer file and as many state files as its first line says), or a file it
// names missing, of another size, or with another hash; "" when it verifies. A marker is evidence,
// never a default: one naming no files, or cut short, is passed over like a damaged file
inline std::string checkpoint_problem(const char* dir, int step) {
    char path[4096];
    marker_path(path, sizeof(path), dir, step);
    std::string marker = read_whole_file(path, " (a checkpoint's marker)");
    int said_step = -1, states = -1, named = 0;
    sscanf(marker.c_str(), "step %d: model file and %d state files", &said_step, &states);
    for (size_t at = 0; (at = marker.find("\nfile ", at)) != std::string::npos; at++) named++;
    if (said_step != step || states < 1 || named != states + 2)
        return std::string(path) + " does not name every file of its checkpoint (" + std::to_string(named) +
               " named; cut short or damaged)";
    size_t at = 0;
    while ((at = marker.find("\nfile ", at)) != std::string::npos) {
        char name[256];
        unsigned long long bytes, hash;
        if (sscanf(marker.c_str() + at + 6, "%255s %llu %llx", name, &bytes, &hash) != 3)
            return std::string(path) + " is damaged";
        at += 6;
        std::string file = std::string(dir) + "/" + name;
        struct stat st;
        if (stat(file.c_str(), &st) != 0) return file + " is missing";
        if ((unsigned long long)st.st_size != bytes)
            return file + ((unsigned long long)st.st_size < bytes ? " is truncated: " : " is longer than written: ") +
                   std::to_string(st.st_size) + " bytes, its marker says " + std::to_string(bytes);
        FileDigest d = file_digest_start();
        FILE* f = fopen(file.c_str(), "rb");
        std::vector<char> buf(1 << 20);
        for (size_t got; f && (got = fread(buf.data(), 1, buf.size(), f)) > 0;) file_digest_add(&d, buf.data(), got);
        if (f) fclose(f);
        if (file_digest_hash(d) != hash) return file + " does not match its hash in the marker (damaged)";
    }
    return "";
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

// the step -y 1 resumes from: rank 0 verifies the checkpoints newest first (checkpoint_problem) and
// says in one line each one it passes over and why; every rank gets the step (0: none, start fresh).
// Checkpoints that exist but none verifies: one line, exit 1 on every rank
inline int checkpoint_resume_step(const char* dir, int rank) {
    int step = 0, found = 0;
    std::string why;
    if (rank == 0) {
        std::vector<int> steps = steps_named(dir, "complete_", "");
        for (int k = (int)steps.size() - 1; k >= 0 && step == 0; k--) {
            found++;
            std::string problem = checkpoint_problem(dir, steps[k]);
            if (problem.empty()) step = steps[k];
            else printf("checkpoint step %d passed over: %s\n", steps[k], problem.c_str()), why = problem;
        }
    }
    int result[2] = {step, found};
    MPI_Bcast(result, 2, MPI_INT, 0, MPI_COMM_WORLD);
    if (result[0] == 0 && result[1] > 0) {
        char text[1024] = "";
        snprintf(text, sizeof(text), "%s", why.c_str());
        MPI_Bcast(text, sizeof(text), MPI_CHAR, 0, MPI_COMM_WORLD);
        comm_fail_all("-y 1: no checkpoint in %s verifies (the oldest: %s)", dir, text);
    }
    return result[0];
}

// -nk: all but the newest `keep` checkpoints go, each marker first (rank 0), but for -nm's major ones
inline void checkpoint_prune(const char* dir, int keep, int major_every) {
    std::vector<int> steps = steps_named(dir, "complete_", "");
    for (size_t k = 0; keep > 0 && k + keep < steps.size(); k++) {
        if (major_every > 0 && steps[k] % major_every == 0) continue;  // -nm: a major checkpoint stays (llm.c)
        char path[4096];
        marker_path(path, sizeof(path), dir, steps[k]);
        unlink(path);
        checkpoint_model_path(path, sizeof(path), dir, steps[k]);
        unlink(path);
        optimizer_path(path, sizeof(path), dir, steps[k]);
        unlink(path);
        char prefix[32];
        snprintf(prefix, sizeof(prefix), "state_%08d_", steps[k]);
        DIR* d = opendir(dir);
        while (struct dirent* e = d ? readdir(d) : NULL)
            if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) unlink((std::string(dir) + "/" + e->d_name).c_str());
        if (d) closedir(d);
    }
}

// ---------------------------------------------------------------- -o, before any work
// what is wrong with dir as this rank sees it: not a directory, no file can be written in it, or less
// room than one checkpoint; "" when nothing is
inline void output_dir_problem(const char* dir, size_t bytes, int rank, char* problem, size_t size) {
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(problem, size, "-o %s is not a directory", dir);
        return;
    }
    std::string probe = std::string(dir) + "/.write_test_rank" + std::to_string(rank);
    FILE* f = fopen(probe.c_str(), "wb");
    bool wrote = f && fputc(0, f) != EOF;
    int error = errno;
    if (f && fclose(f) != 0) wrote = false;
    unlink(probe.c_str());
    if (!wrote) { snprintf(problem, size, "-o %s: cannot write a file there (%s)", dir, strerror(error)); return; }
    struct statvfs vfs;
    double free_bytes = statvfs(dir, &vfs) == 0 ? (double)vfs.f_bavail * vfs.f_frsize : -1.0;
    if (free_bytes >= 0 && free_bytes < (double)bytes)
        snprintf(problem, size, "-o %s: %.1f MiB free, one checkpoint needs %.1f MiB (a full disk would end the run at "
                 "its first checkpoint)", dir, free_bytes / (1 << 20), (double)bytes / (1 << 20));
}

// rank 0, holding the lock: the files of a checkpoint that never got its marker (a rank died or the
// disk filled while it was written) go, each named in one line: every file of a step without a marker
// that has an optimizer or state file (or a .tmp of one), and any checkpoint file's .tmp (model_,
// optimizer_, state_, complete_, run.json). A model file alone is no checkpoint's (a run without -n
// writes only those): it stays; so does any other file in -o
inline void remove_unfinished_checkpoints(const char* dir) {
    struct Found { std::string name; int step; bool tmp; };  // step: -1 where the name has none
    std::vector<int> markers = steps_named(dir, "complete_", ""), unfinished;
    std::vector<Found> found;
    DIR* d = opendir(dir);
    while (struct dirent* e = d ? readdir(d) : NULL) {
        std::string name = e->d_name;
        bool tmp = name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0;
        int step = -1;
        for (const char* prefix : {"model_", "optimizer_", "state_", "complete_"}) {
            size_t p = strlen(prefix);
            if (name.rfind(prefix, 0) == 0 && name.size() >= p + 8 && strspn(name.c_str() + p, "0123456789") >= 8)
                step = atoi(name.substr(p, 8).c_str());
        }
        if (step < 0 && name != RUN_FILE ".tmp") continue;  // not a checkpoint's
        found.push_back({name, step, tmp});
        bool has_marker = std::binary_search(markers.begin(), markers.end(), step);
        if (step >= 0 && !has_marker && (tmp || name.rfind("optimizer_", 0) == 0 || name.rfind("state_", 0) == 0))
            unfinished.push_back(step);
    }
    if (d) closedir(d);
    std::sort(found.begin(), found.end(), [](const Found& x, const Found& y) { return x.name < y.name; });
    for (const Found& f : found) {
        if (!f.tmp && std::find(unfinished.begin(), unfinished.end(), f.step) == unfinished.end()) continue;
        unlink((std::string(dir) + "/" + f.name).c_str());
        printf("-o %s: removed %s, a file of a checkpoint that never completed\n", dir, f.name.c_str());
    }
}

// -o before any work, so that a bad one costs no training (it used to surface at the first checkpoint):
// rank 0 creates the directory if it is missing; every rank checks it (output_dir_problem: a directory,
// writable, room for `bytes`, checkpoint_bytes); rank 0 takes its lock, checks that this start may use
// it (run_dir.h: run.json) and clears an unfinished checkpoint's files; the first rank that finds a
// problem names it on every rank, which all exit 1
inline void check_output_dir(const TrainConfig& tc, const ProcessGrid& grid, size_t bytes) {
    const char* dir = tc.output_dir;
    char problem[1024] = "";
    // (EEXIST: another run started at the same moment made it; the lock below decides between them)
    if (grid.rank == 0 && !file_exists(dir) && mkdir(dir, 0755) != 0 && errno != EEXIST)
        snprintf(problem, sizeof(problem), "-o %s: cannot create the directory (%s)", dir, strerror(errno));
    MPI_Barrier(MPI_COMM_WORLD);
    if (!problem[0]) output_dir_problem(dir, bytes, grid.rank, problem, sizeof(problem));
    if (grid.rank == 0 && !problem[0]) {
        run_dir_lock(dir, problem, sizeof(problem));  // one run at a time in -o
        std::vector<int> markers = steps_named(dir, "complete_", "");
        if (!problem[0])
            run_dir_check(dir, run_identity(tc, grid), tc.resume != 0, markers.empty() ? 0 : markers.back(), problem,
                          sizeof(problem));
        if (!problem[0]) remove_unfinished_checkpoints(dir);
    }
    comm_fail_if_any(problem);
}

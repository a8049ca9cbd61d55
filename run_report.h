/*
run_report.h: what a run says about itself on rank 0: the header (device, precision, model,
grid, schedule, batch), one line per step (loss, norm, learning rate, time, tokens/s, MFU, the
elapsed time and the ETA), one JSON row per step in -log (docs/flags.md: Log rows) and the -trace
file (every rank's spans, one track per rank). The rates:

    tok/s = tokens per step / (ms / 1000)        ETA = elapsed / steps run x steps left

Applied in train_gpt.cu: train_step (StepResult), prepare_run (print_run_header), train_loop
(print_step, log_step, write_trace).
*/
#pragma once
// defines: StepResult, log_step, print_run_header, print_step, write_trace
#include <math.h>                // defines: isfinite
#include <stdio.h>               // defines: printf, fprintf, snprintf
#include <string>                // defines: std::string, std::to_string
#include <vector>                // defines: std::vector
#include "precision.h"           // defines: PRECISION_NAME
#include "kernels/common.cuh"    // defines: device_name
#include "tokenizer/decoder.h"   // defines: json_escape_utf8
#include "comm.h"                // defines: Collectives, ProcessGrid, make_grid, comm_gatherv_to_root
#include "trace.h"               // defines: Trace, trace_write_file
#include "options.h"             // defines: TrainConfig
#include "dataloader.h"          // defines: DataLoader
#include "gpt2.h"                // defines: GPT2, GPT2Config, gpt2_chunks
#include "pipeline_run.h"        // defines: ScheduleTiming
#include "pipeline_sim.h"        // defines: schedule_bubble_formula

// one optimizer step's outcome, as train_step returns it
struct StepResult {
    double loss, norm;
    float lr, scale;
    bool skipped;            // no update: non-finite gradients (the loss scaler) or an outlier (-sl, -sg)
    ScheduleTiming timing;
    bool outlier;            // skipped as an outlier
    double z_loss, z_norm;   // their z-scores over the last 128 steps (outlier.h; NaN until 128 steps)
};

// one JSON object per optimizer step (docs/flags.md: Log rows)
inline void log_step(FILE* log, int step, const StepResult& r, double ms, int tokens, double mfu, bool scaling,
                     bool validated, double val_loss, bool sampled, const std::string& sample,
                     const std::string& accounting, const std::string& bubble) {
    char norm[32] = "null", utilization[32] = "null";  // JSON has no inf or nan: a skipped step's norm; no known peak
    if (isfinite(r.norm)) snprintf(norm, sizeof(norm), "%.17g", r.norm);
    if (mfu >= 0.0) snprintf(utilization, sizeof(utilization), "%.6g", mfu);
    fprintf(log, "{\"step\": %d, \"loss\": %.17g, \"lr\": %.9g, \"norm\": %s, \"ms\": %.3f, \"tok_per_s\": %.1f, "
                 "\"mfu\": %s", step, r.loss, r.lr, norm, ms, tokens / (ms / 1000.0), utilization);
    if (scaling) fprintf(log, ", \"scale\": %.9g", r.scale);
    if (r.skipped) fprintf(log, ", \"skipped\": true");
    if (r.outlier) fprintf(log, ", \"outlier\": true");
    if (validated) fprintf(log, ", \"val_loss\": %.9g", val_loss);
    if (sampled) fprintf(log, ", \"sample\": \"%s\"", json_escape_utf8(sample).c_str());
    fprintf(log, "%s%s}\n", bubble.c_str(), accounting.c_str());
    fflush(log);
}

inline void print_run_header(const GPT2* model, const TrainConfig& tc, bool use_nccl, int grad_accum, int max_steps,
                             const DataLoader& train_loader) {
    const GPT2Config& c = model->config;
    const ProcessGrid& grid = model->comm->grid;
    printf("train_gpt | %s | %s | model L=%d NH=%d C=%d V=%d Vp=%d maxT=%d | %zu parameters on rank 0\n", device_name(),
           PRECISION_NAME, c.num_layers, c.num_heads, c.channels, c.vocab_size, c.padded_vocab_size, c.max_seq_len,
           model->num_parameters);
    printf("grid: %d ranks = dp %d x cp %d x tp %d%s x pp %d | ZeRO-%d | %s collectives", grid.world, grid.dp, grid.cp,
           grid.tp, tc.sequence_parallel ? " (sequence-parallel)" : "", grid.pp, tc.zero_stage,
           use_nccl ? "NCCL" : "MPI");
    if (grid.pp > 1)  // pipeline.h's formula: (p-1)/(m+p-1), ZB-H1's, or interleaved's (p-1)/(Vm+p-1)
        printf(" | %s schedule, %d chunk(s) a stage, bubble %.3f with equal stages", tc.schedule, gpt2_chunks(model),
               schedule_bubble_formula(model->schedule, grid.pp, grad_accum, gpt2_chunks(model)));
    printf("\n");
    printf("batch: B=%d T=%d dp=%d, %d tokens per step = %d accumulation steps | %d steps | train %s (%zu tokens)\n",
           tc.B, tc.T, grid.dp, tc.total_batch_tokens, grad_accum, max_steps, tc.train_pattern,
           train_loader.total_tokens);
}

// the step line; elapsed: seconds since this run's first step, steps_run: steps since then
inline void print_step(int done, int max_steps, const StepResult& r, double ms, int tokens, double mfu, bool scaling,
                       double elapsed, int steps_run) {
    double eta = elapsed / steps_run * (max_steps - done);
    printf("step %5d/%d | loss %.6f | norm %.4f | lr %.3e | %.1f ms | %.0f tok/s", done, max_steps, r.loss, r.norm,
           r.lr, ms, tokens / (ms / 1000.0));
    if (mfu >= 0.0) printf(" | MFU %.1f%%", 100.0 * mfu);
    printf(" | %.0f s elapsed, ETA %.0f s", elapsed, eta);
    if (scaling) printf(" | scale %g", r.scale);
    if (r.outlier) printf(" | skipped: an outlier, loss z %.2f, norm z %.2f", r.z_loss, r.z_norm);
    printf("%s\n", r.skipped && !r.outlier ? " | skipped: non-finite gradients" : "");
    if (r.skipped && !r.outlier && !scaling)
        fprintf(stderr, "warning: step %d had non-finite gradients and was skipped\n", done);
}

// -trace: rank 0 writes every rank's spans, one track per rank named by its place in the grid (a collective)
inline void write_trace(Collectives* comm, Trace* trace, const char* path) {
    trace->on = false;
    std::vector<char> mine(trace->events.begin(), trace->events.end());
    std::vector<std::vector<char>> all = comm_gatherv_to_root(&comm->world, mine);
    const ProcessGrid& grid = comm->grid;
    if (grid.rank != 0) return;
    std::vector<std::string> names;
    for (int q = 0; q < grid.world; q++) {
        ProcessGrid other = make_grid(grid.world, q, grid.tp, grid.pp, grid.cp);
        names.push_back("rank " + std::to_string(q) + ": stage " + std::to_string(other.pp_rank) + ", dp " +
                        std::to_string(other.dp_rank) + ", tp " + std::to_string(other.tp_rank));
    }
    trace_write_file(path, all, names);
}

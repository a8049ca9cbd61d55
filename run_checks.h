/*
run_checks.h: the flags every rank checks alike before any work, so that bad input ends the run
with one line on every rank and exit 1 (comm_fail_all), never a hang or a crash later: the
schedule's name and what it allows (-ps, -vp, -pl), the sequence split (-sp, -cp: T a multiple
of the ranks that cut it), the batch (-b x -t x dp x pp within a 32-bit index, -d a multiple of
B*T*dp), the steps (-x), the gradient sum's type (-ga) and the ledger's flags (-gpu, -nodes).
The micro-batches per step follow from the batch:

    m = d / (B * T * dp)        (-d defaults to B*T*dp*pp: one micro-batch per pipeline stage)

Applied in train_gpt.cu: main (check_batch_flags, before the model is built).
*/
#pragma once
// defines: check_batch_flags
#include <limits.h>             // defines: INT_MAX
#include <stdio.h>              // defines: printf
#include <string.h>             // defines: strcmp
#include "comm.h"               // defines: ProcessGrid, comm_fail_all
#include "options.h"            // defines: TrainConfig
#include "gpt2.h"               // defines: sequence_multiple
#include "pipeline.h"           // defines: schedule_kind_from_name, SCHEDULE_INTERLEAVED
#include "pipeline_sim.h"       // defines: pipeline_bubble_fraction
#include "accounting.h"         // defines: check_ledger_flags

// the flags every rank checks alike (one line on every rank, exit 1); returns the
// accumulation steps per optimizer step
inline int check_batch_flags(TrainConfig* tc, const ProcessGrid& grid) {
    int schedule = schedule_kind_from_name(tc->schedule);
    if (schedule < 0)
        comm_fail_all("-ps expects 1f1b, gpipe, zb or interleaved, got '%s' (llm.c's -ps, the server IP of its TCP "
                      "init, is not needed under mpirun)", tc->schedule);
    if (tc->chunks > 1 && (schedule != SCHEDULE_INTERLEAVED || grid.pp == 1))
        comm_fail_all("-vp %d: model chunks are for -ps interleaved with -pp > 1", tc->chunks);
    if (schedule == SCHEDULE_INTERLEAVED && tc->stage_layers)
        comm_fail_all("-pl with -ps interleaved: its chunks split the layers evenly (pipeline.h)");
    if (tc->sequence_parallel && grid.tp == 1)
        comm_fail_all("-sp 1 splits the tokens over the TP ranks; it needs -tp > 1");
    // micro-batches, sampling's windows up to T
    int multiple = sequence_multiple(grid.cp, grid.tp, tc->sequence_parallel);
    if (grid.cp == 1 && tc->T % multiple != 0)
        comm_fail_all("-sp 1: -t %d must be a multiple of -tp %d, each TP rank holding 1/tp of the tokens", tc->T,
                      grid.tp);
    if (grid.cp > 1 && tc->T % multiple != 0)
        comm_fail_all("-cp %d: -t %d must be a multiple of 2*cp%s = %d: each sequence is cut into 2cp chunks (cp.h)%s",
                      grid.cp, tc->T, tc->sequence_parallel ? "*tp" : "", multiple,
                      tc->sequence_parallel ? ", each rank's split over tp" : "");
    if ((long long)tc->B * tc->T * grid.dp * grid.pp > INT_MAX)  // token counts and indices are int
        comm_fail_all("-b %d x -t %d x dp %d x pp %d tokens per step overflow a 32-bit index; make -b or -t smaller",
                      tc->B, tc->T, grid.dp, grid.pp);
    int tokens_per_micro = tc->B * tc->T * grid.dp;
    if (tc->total_batch_tokens == -1) tc->total_batch_tokens = tokens_per_micro * grid.pp;  // m = p micro-batches
    if (tc->total_batch_tokens <= 0 || tc->total_batch_tokens % tokens_per_micro != 0)
        comm_fail_all("-d %d is not a multiple of B*T*dp = %d*%d*%d = %d", tc->total_batch_tokens, tc->B, tc->T,
                      grid.dp, tokens_per_micro);
    int micro_batches = tc->total_batch_tokens / tokens_per_micro;
    if (schedule == SCHEDULE_INTERLEAVED && micro_batches % grid.pp != 0)  // pipeline.h: interleaved_schedule
        comm_fail_all("-ps interleaved needs the micro-batches per step to be a multiple of -pp %d; -d %d gives %d",
                      grid.pp, tc->total_batch_tokens, micro_batches);
    if (micro_batches < grid.pp && grid.rank == 0)
        printf(
            "note: %d micro-batches for %d pipeline stages: every stage idles at least (p-1)/(m+p-1) = %.0f%% of each "
            "step; "
            "raise -d for a smaller bubble\n",
            micro_batches, grid.pp, 100.0 * pipeline_bubble_fraction(grid.pp, micro_batches));
    if (tc->max_steps == 0) comm_fail_all("-x must be -1 (one epoch) or a number of steps, not 0");
    if (strcmp(tc->grad_accum_type, "fp32") != 0 && strcmp(tc->grad_accum_type, "floatX") != 0)
        comm_fail_all("-ga expects floatX or fp32, got '%s'", tc->grad_accum_type);
    check_ledger_flags(*tc, grid);
    return micro_batches;
}

/*
llmc.h: llm.c's interfaces kept, so that its users' scripts run here unchanged: the flags of llm.c's
train_gpt2.cu that mean the same (options.h marks them; docs/flags.md) checked, where this build does
something else said in one line (check_llmc_flags), and what llm.c writes into its output directory
(-o), written here too, so that llm.c's scripts and plots read a run of this trainer as one of theirs
(llm.c: llmc/logger.h, train_gpt2.cu):

    -o DIR/main.log       one line per event, rank 0, emptied when a run starts afresh (-y 0):
        s:S trl:LOSS lr:LR norm:NORM    after optimizer step S + 1 (S counts from 0, as llm.c's loop)
        s:S tel:LOSS                    the validation loss after S steps
        s:S eval:ACCURACY               HellaSwag's accuracy after S steps (-h 1)
    -o DIR/DONE_%08d      empty, written when the run has done all its steps: llm.c's scripts
                          loop `while [ ! -f $done_file ]` around a resumable run, and stop here

The JSON log (-log) carries the same numbers at full precision and more; main.log keeps llm.c's
four decimals. Applied in train_gpt.cu: train_loop and main (check_llmc_flags, main_log_done).
*/
#pragma once
// defines: check_llmc_flags, MainLog, main_log_open, main_log_line, main_log_done
#include <stdarg.h>  // defines: va_list
#include <stdio.h>   // defines: fopen, vfprintf
#include <string>    // defines: std::string
#include "base.h"         // defines: fail
#include "comm.h"         // defines: comm_fail_all
#include "hellaswag.h"    // defines: EVAL_ENDINGS
#include "lr_schedule.h"  // defines: lr_schedule_from_name
#include "options.h"      // defines: TrainConfig

// llm.c's flags: what this build cannot do refused on every rank, what it does otherwise said once
inline void check_llmc_flags(const TrainConfig& tc, int rank) {
    if (lr_schedule_from_name(tc.lr_schedule) < 0)
        comm_fail_all("-k expects cosine, linear, constant or wsd, got '%s'", tc.lr_schedule);
    if (tc.hellaswag && tc.B < EVAL_ENDINGS)
        comm_fail_all("-h 1 needs -b >= %d: each example's endings are rows of one micro-batch (llm.c's rule too)",
                      EVAL_ENDINGS);
    if (rank == 0 && !tc.master_weights && FLOATX_IS_FP32)
        printf("note: -w 0: this fp32 build's parameters are their own master copy; nothing changes\n");
#ifndef __CUDACC__
    if (rank == 0 && tc.gelu_fusion > 0)
        printf("note: -ge %d: the CPU build has no cuBLASLt; GELU runs in its own pass (the same values)\n",
               tc.gelu_fusion);
#endif
    if (rank == 0 && tc.tf32 && !FLOATX_IS_FP32)
        printf("note: -f 1: TF32 is for fp32 builds; this build's GEMMs read bf16/fp16 and sum in fp32\n");
#ifndef __CUDACC__
    if (rank == 0 && tc.tf32) printf("note: -f 1: the CPU build has no TF32; its GEMMs stay fp32\n");
#endif
}

struct MainLog {
    std::string path;  // "": not written (no -o, or not rank 0)
};

inline MainLog main_log_open(const char* output_dir, int rank, bool resume) {
    MainLog log;
    if (!output_dir || rank != 0) return log;
    log.path = std::string(output_dir) + "/main.log";
    if (!resume) {  // a fresh run's log starts empty, as llm.c's
        FILE* f = fopen(log.path.c_str(), "w");
        if (!f) fail("cannot write %s", log.path.c_str());
        fclose(f);
    }
    return log;
}

// one line, appended: "s:%d trl:%.4f lr:%.6f norm:%.2f", "s:%d tel:%.4f", "s:%d eval:%.4f"
inline void main_log_line(const MainLog& log, const char* format, ...) {
    if (log.path.empty()) return;
    FILE* f = fopen(log.path.c_str(), "a");
    if (!f) fail("cannot append to %s", log.path.c_str());
    va_list args;
    va_start(args, format);
    vfprintf(f, format, args);
    va_end(args);
    fputc('\n', f);
    fclose(f);
}

// DONE_%08d: the run has done its `steps`
inline void main_log_done(const MainLog& log, const char* output_dir, int steps) {
    if (log.path.empty()) return;
    char path[4096];
    snprintf(path, sizeof(path), "%s/DONE_%08d", output_dir, steps);
    FILE* f = fopen(path, "w");
    if (!f) fail("cannot write %s", path);
    fclose(f);
}

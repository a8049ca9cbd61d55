/*
options.h: the command line. One table (make_options) gives both the parser and -h, so
a flag cannot be parsed without being documented, or documented without being parsed.
Each flag writes one field of TrainConfig, whose initialisers are the defaults that -h
prints. Numbers are checked against the table's [min, max] here; what depends on the
world (the batch against dp, -pp against the layers) is checked on every rank alike
(run_checks.h: check_batch_flags; gpt2.h: gpt2_build).
*/
#pragma once
// defines: TrainConfig, OptionKind, Option, OPTION_FIELD, option_table, option_value, print_usage, llmc_launch_flag,
//          is_help, parse_args
#include <stdio.h>   // defines: printf, snprintf
#include <stdlib.h>  // defines: strtoll, strtod
#include <errno.h>   // defines: errno, ERANGE
#include <limits.h>  // defines: INT_MAX, INT_MIN
#include <string.h>  // defines: strcmp
#include <stddef.h>  // defines: offsetof
#include <cmath>     // defines: std::isfinite
#include "base.h"    // defines: fail

struct TrainConfig {
    const char* init = "d12";
    const char* init_given = NULL;  // -e as given, kept when -y 1 points init at the checkpoint (run_dir.h)
    const char* train_pattern = "data/tinyshakespeare_train.bin";
    const char* val_pattern = "data/tinyshakespeare_val.bin";
    const char* output_dir = NULL;
    const char* log_path = NULL;
    int B = 4, T = 1024;
    int total_batch_tokens = -1;  // -1: one micro-batch per rank
    float lr = 3e-4f;
    int warmup = 0;
    float final_fraction = 1.0f;
    const char* lr_schedule = "cosine";  // -k: cosine | linear | constant | wsd (lr_schedule.h)
    float weight_decay = 0.0f;
    float grad_clip = 1.0f;
    float skip_loss_z = 0.0f, skip_norm_z = 0.0f;  // -sl, -sg: skip an outlier step's update (outlier.h; 0: off)
    int max_steps = -1;           // -1: one epoch of the training data
    int val_every = 20, val_batches = 20;
    int sample_every = 20, gen_tokens = 64;
    float temperature = 1.0f;
    const char* tokenizer_path = "data/gpt2_tokenizer.bin";
    int checkpoint_every = 0;
    int keep_checkpoints = 0;
    int major_checkpoint_every = 0;  // -nm: every N-th step's checkpoint is kept whatever -nk says
    int resume = 0;
    int shuffle = 1;
    int gelu_fusion = 0;             // -ge: llm.c's GELU in cuBLASLt's epilogue (kernels/gelu_fusion.cuh)
    int flash = 1;                   // -fa: flash attention's tensor-core kernels (kernels/attention.cuh)
    int tf32 = 0;                    // -f 1: TF32 GEMMs in the fp32 CUDA build (kernels/common.cuh: cublas_compute)
    int master_weights = 1;          // -w: llm.c's fp32 master copy in 16-bit builds (adamw.h, zero.h)
    int hellaswag = 0;               // -h 1: HellaSwag's accuracy with each validation (llm.c's -h)
    const char* hellaswag_path = "data/hellaswag_val.bin";  // -hf: llm.c's eval file (./tokenize hellaswag)
    int overfit_single_batch = 0;    // -a 1: every step trains on the first batch (llm.c's debugging aid)
    int seed = 1337;
    int recompute = 0;
    const char* loss_scale = "default";  // dynamic | off | VALUE; default: dynamic for FP16
    int loss_scale_interval = 2000;
    const char* grad_accum_type = "floatX";  // floatX | fp32
    int zero_stage = 0;
    int overlap = 1;                 // -overlap: DP reductions beside the backward (overlap.h)
    int tp = 1, pp = 1;
    int sequence_parallel = 0;               // -sp 1: Megatron's sequence parallelism over the TP group (tp.h)
    int cp = 1;                              // -cp: context-parallel ranks, each sequence split over them (cp.h)
    const char* schedule = "1f1b";           // 1f1b | gpipe | zb | interleaved (pipeline.h)
    int chunks = 1;                          // -vp: model chunks per stage under interleaved 1F1B
    const char* stage_layers = NULL;         // -pl "1,3,3,1": layers per pipeline stage (NULL: even)
    const char* trace_path = NULL;           // -trace: a Chrome trace of the first steps (trace.h)
    int trace_steps = 3;
    const char* comm_backend = "default";    // nccl | mpi; default: nccl on the GPU build
    int plan = 0;
    const char* gpu = NULL;                  // -gpu with -plan 1: the kernel ledger's roofline on this GPU (ledger.h)
    int nodes = 1;                           // -nodes with -gpu: the ranks over this many nodes (comm_time.h)
    int timeout = 600;             // seconds without progress before the watchdog ends the job (watchdog.h)
    int inject_nonfinite_step = 0; // from TRAIN_GPT_INJECT_NONFINITE, not a flag
    int stop_at_step = 0;  // from TRAIN_GPT_STOP_AT_STEP: the last rank stops itself (SIGSTOP) as this step begins
    int kill_at_step = 0;  // from TRAIN_GPT_KILL_AT_STEP: the last rank kills itself (SIGKILL) as this step begins
    int die_in_checkpoint = 0;     // from TRAIN_GPT_DIE_IN_CHECKPOINT: the last rank dies writing this step's state
};

enum OptionKind { OPT_INT, OPT_FLOAT, OPT_STRING };

// numbers must be finite and in [min, max] (-b, -t, -d also together: parse_args, check_batch_flags).
// offset: where the flag's value is in a TrainConfig (option_value)
struct Option { const char* flag; OptionKind kind; size_t offset; const char* help; double min = 0, max = 0; };
#define OPTION_FIELD(name) offsetof(TrainConfig, name)

// every flag: -h prints this table, parse_args reads it
static const Option option_table[] = {
    {"-e", OPT_STRING, OPTION_FIELD(init),
     "init: llm.c model file (.bin, fp32 v3 or bf16 v5), or from scratch as llm.c names models: dN or gpt2:dN = "
     "GPT-2 of depth N (d12 124M, d24 350M, d36 774M, d48 1558M; d6 d60 d72 d84 llm.c's; other N: C = 64N), "
     "gpt3:cC = GPT-3 of C channels (gpt3:c768 = 125M, T up to 2048)"},
    {"-i", OPT_STRING, OPTION_FIELD(train_pattern), "train token shards, glob pattern"},
    {"-j", OPT_STRING, OPTION_FIELD(val_pattern), "validation token shards, glob pattern"},
    {"-o", OPT_STRING, OPTION_FIELD(output_dir),
     "output directory for checkpoints and the final model (none: write nothing)"},
    {"-log", OPT_STRING, OPTION_FIELD(log_path), "append one JSON object per optimizer step to this file"},
    {"-b", OPT_INT, OPTION_FIELD(B), "micro-batch size per rank, in sequences", 1, 1 << 20},
    {"-t", OPT_INT, OPTION_FIELD(T), "sequence length", 1, 1 << 20},
    {"-d", OPT_INT, OPTION_FIELD(total_batch_tokens),
     "total tokens per optimizer step (-1: B*T*dp); accumulation steps = d / (B*T*dp)", -1, INT_MAX},
    {"-l", OPT_FLOAT, OPTION_FIELD(lr), "peak learning rate", 0, 10},
    {"-u", OPT_INT, OPTION_FIELD(warmup), "linear warmup steps", 0, INT_MAX},
    {"-q", OPT_FLOAT, OPTION_FIELD(final_fraction),
     "final learning rate as a fraction of -l, reached at the last step (1: no decay)", 0, 1},
    {"-k", OPT_STRING, OPTION_FIELD(lr_schedule),
     "learning-rate schedule after the warmup: cosine, linear (to -q), constant (no warmup either) or wsd (constant, "
     "then 1 - sqrt decay to -q over the last 20% of the steps) (lr_schedule.h)"},
    {"-c", OPT_FLOAT, OPTION_FIELD(weight_decay), "AdamW weight decay (2-D tensors only)", 0, 10},
    {"-gc", OPT_FLOAT, OPTION_FIELD(grad_clip), "clip the global gradient norm to this (0: off)", 0, 1e9},
    {"-sl", OPT_FLOAT, OPTION_FIELD(skip_loss_z),
     "skip the update of a step whose loss has a z-score above this over the last 128 steps (outlier.h; 0: off)", 0,
     1e9},
    {"-sg", OPT_FLOAT, OPTION_FIELD(skip_norm_z),
     "skip the update of a step whose gradient norm has a z-score above this over the last 128 steps (0: off)", 0,
     1e9},
    {"-x", OPT_INT, OPTION_FIELD(max_steps), "optimizer steps (-1: one epoch of the training shards)", -1, INT_MAX},
    {"-v", OPT_INT, OPTION_FIELD(val_every), "validate every N steps (0: off)", 0, INT_MAX},
    {"-m", OPT_INT, OPTION_FIELD(val_batches), "validation micro-batches", 1, INT_MAX},
    {"-h", OPT_INT, OPTION_FIELD(hellaswag),
     "1: HellaSwag's accuracy (completion style, llm.c's) with each validation (-v); -h alone: this help", 0, 1},
    {"-hf", OPT_STRING, OPTION_FIELD(hellaswag_path),
     "-h 1's examples: llm.c's eval file, which ./tokenize hellaswag writes from HellaSwag's JSON lines"},
    {"-s", OPT_INT, OPTION_FIELD(sample_every), "sample every N steps (0: off)", 0, INT_MAX},
    {"-g", OPT_INT, OPTION_FIELD(gen_tokens), "tokens to generate per sample", 1, 1 << 20},
    {"-temp", OPT_FLOAT, OPTION_FIELD(temperature), "sampling temperature", 1e-6, 1e6},
    {"-tok", OPT_STRING, OPTION_FIELD(tokenizer_path), "llm.c tokenizer file to decode samples (make data writes it)"},
    {"-n", OPT_INT, OPTION_FIELD(checkpoint_every),
     "write a checkpoint (model + per-rank state) into -o every N steps (0: off)", 0, INT_MAX},
    {"-nk", OPT_INT, OPTION_FIELD(keep_checkpoints),
     "keep the newest N checkpoints in -o, delete older ones (0: keep all)", 0, INT_MAX},
    {"-nm", OPT_INT, OPTION_FIELD(major_checkpoint_every),
     "every N steps a major checkpoint, which -nk never deletes (0: none)", 0, INT_MAX},
    {"-y", OPT_INT, OPTION_FIELD(resume), "1: resume from the newest checkpoint in -o (bit-exact continuation)", 0, 1},
    {"-shuffle", OPT_INT, OPTION_FIELD(shuffle),
     "1: seeded shuffle of shards and samples; 0: llm.c's sequential order", 0, 1},
    {"-a", OPT_INT, OPTION_FIELD(overfit_single_batch),
     "1: overfit a single batch: every step trains on the step-1 batch again (debugging)", 0, 1},
    {"-ge", OPT_INT, OPTION_FIELD(gelu_fusion),
     "llm.c's GELU fusion into the fc GEMMs' cuBLASLt epilogues (kernels/gelu_fusion.cuh): 0 none, 1 the forward, "
     "2 forward and backward; 16-bit builds round once instead of twice. The CPU build has no cuBLASLt: it accepts "
     "-ge and runs GELU in its own pass", 0, 2},
    {"-fa", OPT_INT, OPTION_FIELD(flash),
     "flash attention's tensor-core kernels (bf16/fp16 GPU builds): 1 WMMA, S and P through shared memory "
     "(kernels/flash_attention_wmma.cuh); 2 FlashAttention-2 with the scores in registers, mma.sync "
     "(kernels/flash_attention_mma.cuh: head sizes 16, 32, 64, 128, not under -cp). Other builds accept it and run "
     "their own kernels", 1, 2},
    {"-f", OPT_INT, OPTION_FIELD(tf32),
     "llm.c's TF32 switch: 1 runs the fp32 CUDA build's GEMMs on TF32 tensor cores (inputs rounded to 10 mantissa "
     "bits); 0 (the default here, llm.c's is 1) keeps them true fp32, checked against float64. 16-bit builds and "
     "the CPU build: no effect, said in one line", 0, 1},
    {"-w", OPT_INT, OPTION_FIELD(master_weights),
     "llm.c's fp32 master weights in 16-bit builds: 1 keep them (16 bytes a parameter), 0 AdamW on the floatX "
     "weights with stochastic rounding (12 bytes); the fp32 build has none either way", 0, 1},
    {"-seed", OPT_INT, OPTION_FIELD(seed),
     "seed for initialisation, shuffling, sampling and stochastic rounding", INT_MIN, INT_MAX},
    {"-r", OPT_INT, OPTION_FIELD(recompute),
     "activation recompute: 0 keep all, 1 GELU, 2 + LayerNorm, 3 whole blocks", 0, 3},
    {"-ls", OPT_STRING, OPTION_FIELD(loss_scale),
     "loss scaling: dynamic, off or a static VALUE (default: dynamic for FP16, else off)"},
    {"-lsi", OPT_INT, OPTION_FIELD(loss_scale_interval),
     "dynamic loss scaling: clean steps before the scale doubles", 1, INT_MAX},
    {"-ga", OPT_STRING, OPTION_FIELD(grad_accum_type), "gradient accumulation across micro-steps: floatX or fp32"},
    {"-z", OPT_INT, OPTION_FIELD(zero_stage), "ZeRO stage over the data-parallel group: 0, 1, 2 or 3 (zero.h)", 0, 3},
    {"-overlap", OPT_INT, OPTION_FIELD(overlap),
     "1: each unit's data-parallel gradient reduction starts when its backward ends and runs beside the rest of the "
     "backward (overlap.h: a stream of its own on the GPU, MPI's non-blocking collectives on the CPU); ZeRO-3 also "
     "gathers each layer while the one before computes (ZeRO 0-1: in the last micro-step; not with -ga fp32 there, "
     "nor through -comm mpi's staging in the GPU build); a pipeline's sends and receives run beside its compute "
     "(pipeline_links.h); 0: each collective and transfer where its result is needed", 0, 1},
    {"-tp", OPT_INT, OPTION_FIELD(tp),
     "tensor-parallel ranks: Megatron column/row-parallel blocks, vocab-parallel embedding and loss (tp.h); dp = "
     "world / (tp * pp)", 1, 1 << 16},
    {"-sp", OPT_INT, OPTION_FIELD(sequence_parallel),
     "1: sequence parallelism with -tp: LayerNorms and the residual stream on 1/tp of the tokens, f and g as "
     "all-gather and reduce-scatter (tp.h)", 0, 1},
    {"-cp", OPT_INT, OPTION_FIELD(cp),
     "context-parallel ranks: each sequence cut into 2cp chunks, rank r holding chunks r and 2cp-1-r, attention round "
     "a ring (cp.h); dp = world / (cp * tp * pp)", 1, 1 << 16},
    {"-pp", OPT_INT, OPTION_FIELD(pp),
     "pipeline-parallel stages: contiguous layer ranges, the first stages take the remainder (pipeline.h)", 1, 1 << 16},
    {"-pl", OPT_STRING, OPTION_FIELD(stage_layers),
     "layers of each pipeline stage, comma-separated, e.g. 1,3,3,1 (none: L/pp each, the first L % pp stages one "
     "more); -plan suggests a split balanced against the LM head"},
    {"-ps", OPT_STRING, OPTION_FIELD(schedule),
     "pipeline schedule: 1f1b (warmup, steady, cooldown), gpipe (all forwards, then all backwards), zb (ZB-H1: 1F1B "
     "with weight gradients deferred into the bubble) or interleaved (1F1B over -vp chunks a stage)"},
    {"-vp", OPT_INT, OPTION_FIELD(chunks),
     "interleaved 1F1B (-ps interleaved): model chunks per pipeline stage, stage s holding chunks s, s+pp, ...; "
     "micro-batches a multiple of -pp", 1, 64},
    {"-comm", OPT_STRING, OPTION_FIELD(comm_backend),
     "collectives: nccl (GPU build default) or mpi (CPU build; GPU build with host staging)"},
    {"-trace", OPT_STRING, OPTION_FIELD(trace_path),
     "write a timeline of the first 3 steps to this file: Chrome trace-event JSON (Perfetto, chrome://tracing), a "
     "track per rank"},
    {"-timeout", OPT_INT, OPTION_FIELD(timeout),
     "watchdog: end the job when a rank makes no progress (no collective, send or step begun) for S seconds; exit "
     "code 3 (watchdog.h; 0: off)", 0, INT_MAX},
    {"-plan", OPT_INT, OPTION_FIELD(plan),
     "1: print each rank's memory and per-step traffic from the formulas, allocating nothing, and exit", 0, 1},
    {"-gpu", OPT_STRING, OPTION_FIELD(gpu),
     "with -plan 1: the CUDA build's kernel ledger of a step and its roofline time on H100, H200 or A100 (ledger.h)"},
    {"-nodes", OPT_INT, OPTION_FIELD(nodes),
     "with -gpu: the ranks spread over this many nodes of equal size, for the time ledger of the data-parallel "
     "communication (comm_time.h: NVLink within one node, InfiniBand across)", 1, 1 << 16},
};
inline void* option_value(TrainConfig* tc, const Option& o) { return (char*)tc + o.offset; }

inline void print_usage(const TrainConfig& defaults) {
    TrainConfig tc = defaults;
    printf("usage: mpirun -np N ./train_gpt [flags]   (./train_gpt_cpu: the same program on the CPU)\n\n");
    for (const Option& o : option_table) {
        char def[64];
        void* value = option_value(&tc, o);
        if (o.kind == OPT_INT) snprintf(def, sizeof(def), "%d", *(int*)value);
        else if (o.kind == OPT_FLOAT) snprintf(def, sizeof(def), "%g", *(float*)value);
        else snprintf(def, sizeof(def), "%s", *(const char**)value ? *(const char**)value : "none");
        printf("  %-9s %s (default %s)\n", o.flag, o.help, def);
    }
}

// llm.c's flags for starting ranks without mpirun (its -pn -pr -pg -pm -pi -pf): mpirun or srun start
// the ranks here, so each is refused, saying so; "" for a flag that is none of them
inline const char* llmc_launch_flag(const char* flag) {
    static const char* names[] = {"-pn", "-pr", "-pg", "-pm", "-pi", "-pf"};  // (not option_table's rows)
    static const char* meanings[] = {"number of processes", "process rank", "GPUs per node", "NCCL init method",
                                     "NCCL init method", "file-system path of its NCCL init"};
    for (int k = 0; k < 6; k++)
        if (strcmp(flag, names[k]) == 0) return meanings[k];
    return "";
}

// -h alone is help; -h N (an integer after it) is llm.c's HellaSwag switch
inline bool is_help(int a, int argc, char** argv) {
    if (strcmp(argv[a], "--help") == 0) return true;
    if (strcmp(argv[a], "-h") != 0) return false;
    char* end = NULL;
    return a + 1 >= argc || (strtol(argv[a + 1], &end, 10), *argv[a + 1] == '\0' || *end != '\0');
}

// returns false when -h was given
inline bool parse_args(TrainConfig* tc, int argc, char** argv) {
    for (int a = 1; a < argc; a++) {
        if (is_help(a, argc, argv)) return false;
        if (*llmc_launch_flag(argv[a]))
            fail("flag %s is llm.c's %s for starting ranks without mpirun: here mpirun or srun starts them "
                 "(mpirun -np 8 ./train_gpt); drop it", argv[a], llmc_launch_flag(argv[a]));
        const Option* opt = NULL;
        for (const Option& o : option_table) if (strcmp(argv[a], o.flag) == 0) opt = &o;
        if (!opt) fail("unknown flag '%s' (see -h)", argv[a]);
        if (a + 1 >= argc) fail("flag %s needs a value", argv[a]);
        const char* v = argv[++a];
        char* end = NULL;
        if (opt->kind == OPT_INT) {
            errno = 0;
            long long x = strtoll(v, &end, 10);
            if (*v == '\0' || *end != '\0')
                fail("flag %s expects an integer, got '%s'%s", opt->flag, v,
                     strcmp(opt->flag, "-pp") == 0 ? " (here: pipeline stages; llm.c's -pp, the file-system path of "
                                                     "its NCCL init, is not needed under mpirun)" : "");
            if (errno == ERANGE || x < opt->min || x > opt->max)
                fail("flag %s must be an integer in [%.0f, %.0f], got %s", opt->flag, opt->min, opt->max, v);
            *(int*)option_value(tc, *opt) = (int)x;
        } else if (opt->kind == OPT_FLOAT) {
            double x = strtod(v, &end);
            if (*v == '\0' || *end != '\0') fail("flag %s expects a number, got '%s'", opt->flag, v);
            if (!std::isfinite(x) || x < opt->min || x > opt->max)
                fail("flag %s must be a finite number in [%g, %g], got %s", opt->flag, opt->min, opt->max, v);
            *(float*)option_value(tc, *opt) = (float)x;
        } else {
            *(const char**)option_value(tc, *opt) = v;
        }
    }
    return true;
}

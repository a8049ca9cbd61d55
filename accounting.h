/*
accounting.h: what a rank holds and sends, planned from formulas and measured.

-plan prints, for every rank, the bytes of each buffer list (the ledger that allocation
keeps, by kind: parameters, gradients, optimizer state, activations, logits, and what
is transient) and the bytes sent per step over each of its groups (dp, tp, pp, the
tied embedding's pair of stages, the cp ring), from the formulas in zero.h, tp.h, cp.h and
pipeline.h.
The first step of a run logs the same two things measured: the ledgers of the
allocations and of every collective (comm.h). tests/accounting.py checks that plan
and measure agree. check_memory uses the plan before anything is allocated, so a run
that does not fit stops with one line instead of an out-of-memory kill. bubble_json
is the pipeline's measured idle fraction beside (p-1)/(m+p-1), and beside what
pipeline_simulate predicts from the measured forward and backward times of each chunk; under -plan,
print_stage_balance predicts each stage's idle time from FLOP counts and suggests the
-pl split that balances the stages against the LM head. The model it counts is gpt2.h's.
*/
#pragma once
// defines: CommGroup, comm_group_names, comm_group, Accounting, gpt2_plan, accounting_json, print_plan, CommLedger,
//          comm_ledger, measured_accounting_json, StageCosts, stage_costs, print_stage_balance, print_plans,
//          bubble_json, check_memory, ledger_model, check_ledger_flags, print_plan_memory, plan_comm_time,
//          step_time_json
#include <stdio.h>      // defines: printf, snprintf
#include "ledger.h"     // defines: LedgerModel, print_ledger, gpu_spec
#include "comm_time.h"  // defines: comm_time, comm_time_sharded, print_comm_time
#include <string.h>     // defines: memcpy
#include <algorithm>    // defines: std::find
#include <string>       // defines: std::string
#include <vector>       // defines: std::vector
#include "gpt2.h"       // defines: GPT2, activation_buffer_list, tokens_held, is_last_stage
#include "comm.h"       // defines: Collectives, Comm, CommKind, ring_bytes, comm_gatherv_to_root, comm_max_over_world
#include "options.h"    // defines: TrainConfig
#include "mfu.h"        // defines: model_flops_per_token
#include "pipeline_run.h"  // defines: ScheduleTiming
#include "pipeline_sim.h"  // defines: pipeline_simulate, balanced_stage_layers, schedule_bubble_formula
#include "cp.h"         // defines: cp_ring_bytes_per_layer

// -plan and the first step's log: what this rank holds (the ledger of the buffer lists, the
// same whether allocated or not) and what it sends over each of its groups per step (the
// formulas of zero.h and tp.h), beside what the first step measured
enum CommGroup { GROUP_DP, GROUP_TP, GROUP_PP, GROUP_EMBEDDING, GROUP_CP, NUM_COMM_GROUPS };

[[maybe_unused]] static const char* comm_group_names[NUM_COMM_GROUPS] = {"dp", "tp", "pp", "embedding", "cp"};

inline Comm* comm_group(Collectives* c, int group) {
    Comm* groups[NUM_COMM_GROUPS] = {&c->replicas, &c->tp, &c->pp, &c->embedding, &c->cp};
    return groups[group];
}

struct Accounting {
    size_t memory[NUM_MEMORY_KINDS];
    unsigned long long comm[NUM_COMM_GROUPS][NUM_COMM_KINDS];
    size_t activations_per_layer;
};

inline Accounting gpt2_plan(const GPT2* model, int B, int T, int grad_accum) {
    const GPT2Config& c = model->config;
    int L = gpt2_layers(model), tp = model->layout.tp;
    Accounting a = {};
    for (int k = 0; k < NUM_MEMORY_KINDS; k++) a.memory[k] = model->memory[k];
    for (int t = 0; t < NUM_LAYER_ACTIVATIONS; t++)
        if (recompute_keeps(model->recompute, t))
            a.activations_per_layer +=
                layer_activation_bytes(t, B, T, c.channels, c.num_heads, tp, model->layout.sequence_parallel);
    ZeroPlan z = zero_plan(&model->zero, grad_accum);
    for (int k = 0; k < NUM_COMM_KINDS; k++) a.comm[GROUP_DP][k] = z.comm[k];
    // ZB-H1's deferred W (a stage with weight slots) rebuilds what -r dropped once more: at -r >= 2
    // from the layers' weights, which ZeRO-3 gathers again; at -r 3 by a third forward of each block
    bool w_recomputes = model->holds.weight_slots > 0;
    if (w_recomputes && model->recompute >= 2 && model->zero.stage == 3) {
        const Zero& zero = model->zero;
        size_t layers = zero.full_elements - zero.units[0].padded - zero.units[zero.num_units - 1].padded;
        a.comm[GROUP_DP][COMM_ALL_GATHER] +=
            grad_accum * ring_bytes(sizeof(floatX) * layers, model->comm->grid.replicas);
    }
    // -r 3 reruns every block's forward, g included
    int block_forwards = model->recompute == 3 ? (w_recomputes ? 3 : 2) : 1;
    TensorParallelTraffic t =
        tp_bytes_per_micro_step(L, (size_t)B * T, c.channels, tp, model->layout.sequence_parallel, block_forwards,
                                is_first_stage(model->layout), is_last_stage(model->layout));
    a.comm[GROUP_TP][COMM_ALL_REDUCE] = grad_accum * t.all_reduce;
    a.comm[GROUP_TP][COMM_ALL_GATHER] = grad_accum * t.all_gather;
    a.comm[GROUP_TP][COMM_REDUCE_SCATTER] = grad_accum * t.reduce_scatter;
    size_t G = model->zero.grads_fp32 ? sizeof(float) : sizeof(floatX);
    for_each_layernorm_gradient(
        model, [&](size_t, size_t n) { a.comm[GROUP_TP][COMM_ALL_REDUCE] += 2 * ring_bytes(G * n, tp); });
    a.comm[GROUP_TP][COMM_SCALARS] = 2 * ring_bytes(sizeof(double), tp);  // the squared norm
    // pipeline: each micro-batch's activation to the next stage and its gradient to the previous
    int p = model->layout.pp;
    unsigned long long message = (unsigned long long)tokens_held(model, B * T) * c.channels * sizeof(floatX);
    int V = gpt2_chunks(model);  // each chunk's; none beyond the model's last chunk, none back from its first
    a.comm[GROUP_PP][COMM_SEND] =
        grad_accum * message *
        ((is_last_stage(model->layout) ? V - 1 : V) + (is_first_stage(model->layout) ? V - 1 : V));
    a.comm[GROUP_PP][COMM_SCALARS] = 2 * 2 * ring_bytes(sizeof(double), p);  // the loss and the squared norm
    // the tied embedding: the unit's gradient shard summed over {first, last} stage
    int ends = model->comm->embedding.size;
    a.comm[GROUP_EMBEDDING][COMM_ALL_REDUCE] = ends > 1 ? 2 * ring_bytes(G * unit_shard(&model->zero, 0), ends) : 0;
    // -cp: each layer's ring attention, forward (again per rerun of the block) and backward (cp.h)
    a.comm[GROUP_CP][COMM_SEND] = (unsigned long long)grad_accum * L *
        cp_ring_bytes_per_layer(model->layout.cp, B, T, c.channels / tp, block_forwards);
    return a;
}

// "memory": {kind: bytes, ...}, "comm": {group: {kind: bytes, ...}, ...}: -plan's JSON line and
// each rank's entry of the log's "measured"
inline std::string accounting_json(const Accounting& a) {
    std::string out = "\"memory\": {";
    for (int k = 0; k < NUM_MEMORY_KINDS; k++)
        out += std::string(k ? ", " : "") + "\"" + memory_kind_names[k] + "\": " + std::to_string(a.memory[k]);
    out += "}, \"comm\": {";
    for (int grp = 0; grp < NUM_COMM_GROUPS; grp++) {
        out += std::string(grp ? ", " : "") + "\"" + comm_group_names[grp] + "\": {";
        for (int k = 0; k < NUM_COMM_KINDS; k++)
            out += std::string(k ? ", " : "") + "\"" + comm_kind_names[k] + "\": " + std::to_string(a.comm[grp][k]);
        out += "}";
    }
    return out + "}";
}

// print_plan's memory: each kind, the total, the state per parameter, the activation sets and ZB-H1's waiting W's
inline void print_plan_memory(const GPT2* model, const Accounting& a, int B, int T) {
    const ProcessGrid& grid = model->comm->grid;
    printf("[rank %d]   %-22s %16s\n", grid.rank, "memory", "bytes");
    size_t total = 0;
    for (int k = 0; k < NUM_MEMORY_KINDS; k++) {
        printf("[rank %d]   %-22s %16zu\n", grid.rank, memory_kind_names[k], a.memory[k]);
        total += a.memory[k];
    }
    size_t state = a.memory[MEM_PARAMETERS] + a.memory[MEM_GRADIENTS] + a.memory[MEM_OPTIMIZER];
    printf("[rank %d]   %-22s %16zu (%.2f GiB)\n", grid.rank, "total", total, total / 1073741824.0);
    printf("[rank %d]   persistent model state: %zu bytes = %.2f bytes per parameter held\n", grid.rank, state,
           (double)state / model->num_parameters);
    std::string layers;
    for (const LayerRange& r : model->layout.chunks)
        layers += " [" + std::to_string(r.begin) + ", " + std::to_string(r.end) + ")";
    printf(
        "[rank %d]   activation sets: %zu (micro-batches in flight on this stage; interleaved: chunk-forwards), "
        "layers%s\n",
        grid.rank, model->sets.size(), layers.c_str());
    if (model->holds.weight_slots > 0)  // ZB-H1: output gradients kept from B to W, within "activations" above
        printf("[rank %d]   waiting W's: %d micro-batches' layer output gradients, %zu bytes\n", grid.rank,
               model->holds.weight_slots,
               (size_t)model->holds.weight_slots * gpt2_layers(model) *
                   layer_output_gradient_elements((size_t)B * T, tokens_held(model, B * T), model->config.channels,
                                                  model->layout.tp) *
                   sizeof(floatX));
}

inline void print_plan(const GPT2* model, const Accounting& a, int B, int T) {
    const ProcessGrid& grid = model->comm->grid;
    const Zero& z = model->zero;
    printf(
        "[rank %d] grid dp=%d cp=%d tp=%d%s pp=%d (dp_rank %d, cp_rank %d, tp_rank %d) | ZeRO-%d | %s | recompute %d | "
        "B=%d T=%d | %zu parameters\n",
        grid.rank, grid.dp, grid.cp, grid.tp, model->layout.sequence_parallel ? " (sequence-parallel)" : "", grid.pp,
        grid.dp_rank, grid.cp_rank, grid.tp_rank, z.stage, PRECISION_NAME, model->recompute, B, T,
        model->num_parameters);
    if (grid.rank == 0) {
        printf("parameter tensors held by this rank (layers x rows x cols):\n");
        for (int i = 0; i < NUM_PARAMETER_TENSORS; i++)
            printf("  %-9s %3d x %6d x %5d\n", parameter_names[i], model->shapes[i].layers, model->shapes[i].rows,
                   model->shapes[i].cols);
    }
    print_plan_memory(model, a, B, T);
    printf("[rank %d]   %-22s %14s %14s %14s %14s %14s\n", grid.rank, "sent per step", "dp group", "tp group",
           "pp group", "embedding", "cp group");
    for (int k = 0; k < NUM_COMM_KINDS; k++)
        printf("[rank %d]   %-22s %14llu %14llu %14llu %14llu %14llu\n", grid.rank, comm_kind_names[k],
               a.comm[GROUP_DP][k], a.comm[GROUP_TP][k], a.comm[GROUP_PP][k], a.comm[GROUP_EMBEDDING][k],
               a.comm[GROUP_CP][k]);
    printf(
        "{\"rank\": %d, \"dp\": %d, \"cp\": %d, \"tp\": %d, \"sp\": %d, \"pp\": %d, \"pp_rank\": %d, \"zero\": %d, "
        "\"precision\": \"%s\", "
        "\"recompute\": %d, \"activation_sets\": %zu, \"weight_slots\": %d, \"num_parameters\": %zu, "
        "\"activations_per_layer\": %zu, %s}\n",
        grid.rank, grid.dp, grid.cp, grid.tp, (int)model->layout.sequence_parallel, grid.pp, grid.pp_rank, z.stage,
        PRECISION_NAME, model->recompute, model->sets.size(), model->holds.weight_slots, model->num_parameters,
        a.activations_per_layer, accounting_json(a).c_str());
    fflush(stdout);
}

// the bytes each group's ledger holds now, to subtract from after a step
struct CommLedger { unsigned long long bytes[NUM_COMM_GROUPS][NUM_COMM_KINDS]; };

inline CommLedger comm_ledger(GPT2* model) {
    CommLedger l;
    for (int grp = 0; grp < NUM_COMM_GROUPS; grp++)
        memcpy(l.bytes[grp], comm_group(model->comm, grp)->bytes, sizeof(l.bytes[grp]));
    return l;
}

// the first step's per-rank allocated bytes and bytes sent, gathered to rank 0, as
// the log's ", \"measured\": [...]" (a collective; empty on other ranks)
inline std::string measured_accounting_json(GPT2* model, const CommLedger& before) {
    Accounting mine = {};
    CommLedger now = comm_ledger(model);
    for (int grp = 0; grp < NUM_COMM_GROUPS; grp++)
        for (int k = 0; k < NUM_COMM_KINDS; k++) mine.comm[grp][k] = now.bytes[grp][k] - before.bytes[grp][k];
    memcpy(mine.memory, model->memory, sizeof(mine.memory));
    std::vector<std::vector<Accounting>> all = comm_gatherv_to_root(&model->comm->world, std::vector<Accounting>{mine});
    if (model->comm->grid.rank != 0) return "";
    std::string out = ", \"measured\": [";
    for (size_t q = 0; q < all.size(); q++) out += std::string(q ? ", " : "") + "{" + accounting_json(all[q][0]) + "}";
    return out + "]";
}

// the FLOPs of one micro-batch's forward and backward (3x the forward's: the backward computes
// the gradients of the inputs and of the weights) through one layer, and through the final
// LayerNorm and LM head, on one TP rank: the matrix products and attention's two
// layer, head: forward + backward FLOPs of a layer and of the LM head; layer_weights: of a layer's
// backward, its W (the weight gradients: one GEMM per matrix, as many FLOPs as the forward's)
struct StageCosts { double layer, head, layer_weights; };
inline StageCosts stage_costs(const GPT2* model, int B, int T) {
    double N = (double)B * T, C = model->config.channels, tp = model->layout.tp;
    double matmuls = 2 * N * 12 * C * C / tp;               // qkv, attproj, fc, fcproj
    double layer = matmuls + 4 * (double)B * T * T * C / tp;  // + QK^T and AV
    double head = 2 * N * C * model->config.padded_vocab_size / tp;
    return StageCosts{3 * layer, 3 * head, matmuls};
}

// rank 0 under -plan with pp > 1: each stage's cost per micro-batch and its idle fraction as
// pipeline_simulate predicts it, for this split and for the split balanced against the head
inline void print_stage_balance(const GPT2* model, int B, int T, int grad_accum) {
    int p = model->layout.pp, L = model->config.num_layers, V = gpt2_chunks(model);
    StageCosts cost = stage_costs(model, B, T);
    auto print_split = [&](const char* label, const std::vector<int>& split) {
        std::vector<std::vector<int>> layers(p);  // [s][v]: chunk v of stage s (one chunk: the split's)
        for (int s = 0; s < p; s++)
            for (const LayerRange& r : stage_layout(split, 1, 0, s, V).chunks) layers[s].push_back(r.end - r.begin);
        auto chunk_layers = [&](int s, int v) { return layers[s][v]; };
        auto chunk_flops = [&](int s, int v) {
            return chunk_layers(s, v) * cost.layer + (s == p - 1 && v == V - 1 ? cost.head : 0.0);
        };
        auto stage_flops = [&](int s) {
            double flops = 0.0;
            for (int v = 0; v < V; v++) flops += chunk_flops(s, v);
            return flops;
        };
        PipelineSimulation sim = pipeline_simulate(
            model->schedule, p, grad_accum,
            [&](int s, PipelineOp op, int v) {
                // W: the layers' only
                double forward = chunk_flops(s, v) / 3, weights = chunk_layers(s, v) * cost.layer_weights;
                return op == FORWARD           ? forward
                       : op == BACKWARD_WEIGHT ? weights
                       : op == BACKWARD_INPUT  ? 2 * forward - weights
                                               : 2 * forward;
            },
            V);
        printf("pipeline, %s: %s", label, V > 1 ? "layers by stage, over its chunks, " : "-pl ");
        for (int s = 0; s < p; s++) printf("%s%d", s ? "," : "", split[s]);
        printf(" | GFLOP per micro-batch by stage:");
        for (int s = 0; s < p; s++) printf(" %.3g", stage_flops(s) / 1e9);
        printf(" | simulated idle (m=%d):", grad_accum);
        for (int s = 0; s < p; s++) printf(" %.3f", 1.0 - sim.busy[s] / sim.step);
        printf("\n");
    };
    print_split("this run", model->stage_layers);
    if (V == 1) print_split("balanced against the LM head", balanced_stage_layers(L, p, cost.layer, 0.0, cost.head));
}

// -plan: each rank's shapes, memory and traffic, one rank at a time so the lines do not interleave
// what ledger.h needs of the model (one GPU holding it whole: check_ledger_flags)
inline LedgerModel ledger_model(const GPT2* model, const TrainConfig& tc, int grad_accum) {
    const GPT2Config& c = model->config;
    return LedgerModel{(size_t)c.num_layers, (size_t)c.channels, (size_t)c.num_heads, (size_t)c.padded_vocab_size,
                       (size_t)c.vocab_size, (size_t)model->B, (size_t)model->T_local, grad_accum, model->recompute,
                       !FLOATX_IS_FP32 && tc.master_weights,
                       strcmp(tc.grad_accum_type, "fp32") == 0, parameter_count(model->shapes), tc.gelu_fusion,
                       tc.flash};
}
// -gpu: a GPU ledger.h knows, for the layout it describes (one GPU holding the whole model), with -plan 1
inline void check_ledger_flags(const TrainConfig& tc, const ProcessGrid& grid) {
    if (!tc.gpu) return;
    if (!gpu_spec(tc.gpu)) comm_fail_all("-gpu expects H100, H200 or A100, got '%s'", tc.gpu);
    if (!tc.plan) comm_fail_all("-gpu %s prints the kernel ledger of -plan 1; add -plan 1", tc.gpu);
    if (grid.tp > 1 || grid.cp > 1 || grid.pp > 1)
        comm_fail_all("-gpu: the kernel ledger describes one GPU holding the whole model (tp, cp, pp 1), "
                      "not tp %d cp %d pp %d", grid.tp, grid.cp, grid.pp);
    if (grid.world % tc.nodes != 0)
        comm_fail_all("-nodes %d does not divide the %d ranks into nodes of equal size", tc.nodes, grid.world);
}
// with -gpu over more than one replica: the data-parallel communication's time and its exposed part
// (comm_time.h), printed, and the roofline's "comm" object; "" at one replica
inline std::string plan_comm_time(GPT2* model, const TrainConfig& tc, const LedgerModel& m) {
    const Zero& z = model->zero;
    if (model->comm->grid.replicas < 2) return "";
    std::vector<size_t> units;
    for (int u = 0; u < z.num_units; u++) units.push_back(z.units[u].padded);
    size_t G = z.grads_fp32 ? sizeof(float) : sizeof(floatX);
    int dp = model->comm->grid.replicas;
    const GpuSpec& gpu = *gpu_spec(tc.gpu);
    return print_comm_time(z.stage <= 1 ? comm_time(m, gpu, units, z.stage, G, z.overlap.on, dp, tc.nodes)
                                        : comm_time_sharded(m, gpu, units, z.stage, z.overlap.on, dp, tc.nodes));
}

inline void print_plans(GPT2* model, const TrainConfig& tc, int grad_accum) {
    // T_local: the tokens of a sequence a rank holds (T/cp; the ledger below is for cp 1, check_ledger_flags)
    Accounting plan = gpt2_plan(model, model->B, model->T_local, grad_accum);
    for (int r = 0; r < model->comm->grid.world; r++) {
        if (r == model->comm->grid.rank) print_plan(model, plan, model->B, model->T_local);
        comm_barrier(&model->comm->world);
    }
    if (model->layout.pp > 1 && model->comm->grid.rank == 0)
        print_stage_balance(model, model->B, model->T_local, grad_accum);
    if (!tc.gpu || model->comm->grid.rank != 0) return;
    LedgerModel m = ledger_model(model, tc, grad_accum);
    std::string comm = plan_comm_time(model, tc, m);
    const GPT2Config& c = model->config;
    double flops_per_token = model_flops_per_token(whole_parameter_count(c), c.num_layers, c.channels, model->T_local);
    print_ledger(m, *gpu_spec(tc.gpu), flops_per_token, comm);
}


// a pipeline's bubble: each rank's idle fraction of the step's schedule (time not spent in
// forwards, backwards, B's and W's), the worst over the ranks and the last stage's, beside the formula
// (a collective; empty without a pipeline). In GPT-2 the last stage carries the LM head, the
// heaviest stage, so its idle time is the schedule's bubble; the worst adds load imbalance.
// Then, for the pipeline of DP and TP rank 0, each stage's idle fraction measured, and as
// pipeline_simulate predicts it from the stages' measured mean forward, backward, B and W times:
// "bubble_stages" and "bubble_simulated".
inline std::string bubble_json(GPT2* model, const ScheduleTiming& timing, int grad_accum) {
    if (model->layout.pp == 1) return "";
    double idle = timing.total_ms > 0 ? 1.0 - timing.busy_ms / timing.total_ms : 0.0;
    double worst = comm_max_over_world(idle), last = comm_max_over_world(is_last_stage(model->layout) ? idle : -1.0);
    const ProcessGrid& grid = model->comm->grid;
    // ranks are pp-major: these come in stage order
    bool pipeline_zero = grid.dp_rank == 0 && grid.tp_rank == 0 && grid.cp_rank == 0;
    std::vector<double> mine;
    const PipelineOp computes[] = {FORWARD, BACKWARD, BACKWARD_INPUT, BACKWARD_WEIGHT};
    int V = gpt2_chunks(model);
    if (pipeline_zero) {
        mine = {idle};
        for (int v = 0; v < V; v++)
            for (PipelineOp op : computes) mine.push_back(timing.mean_ms(op, v));
    }
    std::vector<std::vector<double>> stages = comm_gatherv_to_root(&model->comm->world, mine);
    char text[160];
    snprintf(text, sizeof(text), ", \"bubble\": %.4f, \"bubble_last_stage\": %.4f, \"bubble_formula\": %.4f", worst,
             last, schedule_bubble_formula(model->schedule, model->layout.pp, grad_accum, gpt2_chunks(model)));
    if (grid.rank != 0) return text;
    std::vector<std::vector<double>>
        per_stage;  // idle, then the mean ms of each of `computes` on each chunk, of stage s
    for (const std::vector<double>& q : stages) if (!q.empty()) per_stage.push_back(q);
    PipelineSimulation sim = pipeline_simulate(model->schedule, grid.pp, grad_accum, [&](int s, PipelineOp op, int v) {
        return per_stage[s][1 + 4 * v + (std::find(computes, computes + 4, op) - computes)];
    }, V);
    std::string measured = ", \"bubble_stages\": [", simulated = ", \"bubble_simulated\": [";
    for (int s = 0; s < grid.pp; s++) {
        char a[32], b[32];
        snprintf(a, sizeof(a), "%s%.4f", s ? ", " : "", per_stage[s][0]);
        // as measured: its own span
        snprintf(b, sizeof(b), "%s%.4f", s ? ", " : "", 1.0 - sim.busy[s] / sim.finish[s]);
        measured += a;
        simulated += b;
    }
    return text + measured + "]" + simulated + "]";
}

// the CPU build's split of the step (step_time.h): each part averaged over the ranks (a
// collective), compute what the others leave of each rank's own step time `ms`
inline std::string step_time_json(GPT2* model, double ms) {
#ifdef __CUDACC__
    (void)model, (void)ms;
    return "";  // the host clock sees launches, not kernels
#else
    const StepTime& t = model->step_time;
    double parts[6] = {ms - t.data - t.comm_exposed - t.bubble - t.optimizer, t.comm_exposed, t.bubble, t.optimizer,
                       t.data, t.comm_in_flight};
    comm_all_reduce_scalars(&model->comm->world, parts, 6);
    double n = model->comm->grid.world;
    char text[256];
    snprintf(text, sizeof(text), ", \"time_ms\": {\"compute\": %.3f, \"comm_exposed\": %.3f, \"bubble\": %.3f, "
             "\"optimizer\": %.3f, \"data\": %.3f, \"comm_in_flight\": %.3f}", parts[0] / n, parts[1] / n, parts[2] / n,
             parts[3] / n, parts[4] / n, parts[5] / n);
    return text;
#endif
}

// before anything is allocated: does every rank's plan fit the memory it can use (the GPU's
// free memory; on the CPU build the node's available memory shared by its ranks, plus the
// model's fp32 values that loading holds for a moment)? If not, one line on every rank, exit 1,
// rather than an out-of-memory kill
inline void check_memory(GPT2* model, const TrainConfig& tc, int ranks_sharing) {
    size_t planned = 0, outside = 0;  // outside the plan: what loading holds (CPU), NCCL's buffers (GPU)
    for (size_t bytes : model->memory) planned += bytes;
#ifdef __CUDACC__
    // NCCL allocates its own buffers at a communicator's first collective: NCCL_BUFFSIZE (4 MiB) for
    // each direction of up to 32 channels, 256 MiB, and as much again for the rest. A margin per
    // communicator, stated here, rather than a measure after the collectives have run
    const char* outside_name = "NCCL buffers";
    Collectives* c = model->comm;
    Comm* groups[] = {&c->replicas, &c->tp, &c->pp, &c->embedding, &c->cp};
    for (Comm* group : groups) outside += group->use_nccl ? (size_t)512 << 20 : 0;
#else
    const char* outside_name = "loading";
    TensorShape whole[NUM_PARAMETER_TENSORS];
    parameter_shapes(whole, model->config, whole_model_layout(model->config));
    outside = sizeof(float) * (parameter_count(whole) + model->num_parameters);  // file order and this rank's units
#endif
    size_t need = planned + outside, have = device_memory_available(ranks_sharing);
    bool short_anywhere = comm_max_over_world(need > have ? 1.0 : 0.0) > 0.0;
    if (!short_anywhere) return;
    const double GiB = 1073741824.0;
    size_t state = model->memory[MEM_PARAMETERS] + model->memory[MEM_GRADIENTS] + model->memory[MEM_OPTIMIZER];
    comm_fail_all(
        "the run does not fit in memory: rank %d needs %.2f GiB (model state %.2f, activations and the rest %.2f, "
        "%s %.2f) and can use %.2f GiB (%d ranks share this %s); try a smaller -b (now %d), -r 3, "
        "-z 3 (now %d), or more -tp / -pp",
        model->comm->grid.rank, need / GiB, state / GiB, (planned - state) / GiB, outside_name, outside / GiB,
        have / GiB, ranks_sharing,
#ifdef __CUDACC__
        "GPU's free memory",
#else
        "node's available memory",
#endif
        tc.B, tc.zero_stage);
}

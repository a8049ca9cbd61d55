/*
zero.h: ZeRO, stages 0-3: shard the model state over the data-parallel group.

Data parallelism replicates the model on dp ranks and sums their gradients (under -cp the dp x cp
ranks of the replica group, process_grid.h: their number is the dp written below). Each rank then
holds, per parameter, X bytes of parameter, X of gradient and K of optimizer state (K = 8 for m
and v, + 4 for the fp32 master in 16-bit builds): with X = 2 and K = 12 that is mixed precision's
16 bytes per parameter, Psi parameters -> 16 Psi bytes on every rank. ZeRO removes the redundancy:
    stage 0  nothing sharded; gradients all-reduced                  (X + X + K) Psi
    stage 1  optimizer state sharded                                 (X + X) Psi + K Psi/dp
    stage 2  + gradients: reduce-scattered as each layer's backward  X Psi + (X + K) Psi/dp
             ends, never held whole, summed into the shard
    stage 3  + parameters: each layer all-gathered just before its   (X + X + K) Psi/dp
             forward and again before its backward, into a reused buffer (transient)
(-ga fp32 keeps the gradient sum in fp32: 4 bytes in place of X for the gradient
shard, or + 4 Psi for the full fp32 sum of stages 0-1.)
Communication per rank and step, S(b) = b (dp-1)/dp the ring cost of b bytes, M
micro-steps, G the bytes per gradient element that are reduced:
    stage 0  all-reduce 2 S(G Psi)
    stage 1  reduce-scatter S(G Psi) + all-gather of the updated parameters S(X Psi)
    stage 2  reduce-scatter M S(X Psi) (every micro-step) + all-gather S(X Psi)
    stage 3  all-gather S(X Psi_ends) + 2 M S(X Psi_layers) + reduce-scatter M S(X Psi)
Stages 0-2 move the same bytes per step when M = 1 (all-reduce = reduce-scatter +
all-gather); stage 3 pays 1.5x for holding 1/dp of the parameters (the layers are gathered
twice a micro-step; the two end units, Psi_ends, once a step: their buffers keep them).

What is sharded is a *unit*: the embeddings {wte, wpe}, one transformer layer (its 12
tensors), or the final LayerNorm {lnfw, lnfb}. Parameters are stored unit by unit, each
unit padded to a multiple of dp, and DP rank r owns the r-th contiguous 1/dp of every
unit. With dp = 2 and L = 2 (E: embeddings, L0, L1: layers, N: final norm, . padding):

    full buffer   | E E E E E E E E | L0 L0 L0 L0 L0 . | L1 L1 L1 L1 L1 . | N N |
    owned by rank |  0 0 0 0 1 1 1 1 |  0  0  0  1  1 1 |  0  0  0  1  1 1 | 0 1 |
    rank 1's shard buffer (m, v, master, the step's gradient; stage 3 also the parameters):
                  | E E E E | L0 L0 . | L1 L1 . | N |
A shard is 1/dp of each unit, not 1/dp of the model: a unit is then gathered or reduced
with one collective into one contiguous buffer, and the forward and backward only ever
see whole units, never a rank boundary. `origin` numbers each element as in the unpadded model, so
stochastic rounding draws the same bits for it under any dp.

The life of layer l in one micro-step under stage 3 (gathered: the layer buffers below):
    forward   all-gather l's shards -> gathered[LAYER]; block_forward reads it; reused
              by layer l+1 (so at most one layer is whole at a time; two under overlap, below)
    backward  all-gather l again -> gathered[LAYER]; recompute and block_backward read it and
              accumulate l's gradient into unit_grads[LAYER] (whole, floatX);
              reduce-scatter that -> reduce_buffer (this rank's 1/dp, summed over DP);
              add it into step_grad (the shard); clear unit_grads[LAYER] for layer l-1
    step      AdamW on the shard (parameters, master, m, v, step_grad: the same index)
The unit buffers: BUFFER_EMBEDDING and BUFFER_FINAL_NORM hold the two end units (both ends of the network
use them, the tied wte twice), gathered once a step, right after AdamW updates them
(zero_gather_after_update), and kept; BUFFER_LAYER holds one layer at a time, sized for the
largest. Stage 2 uses unit_grads only.

Overlap (overlap.h, -overlap 1, the default): a unit's reduction starts as soon as its backward
is done and runs while the backward goes on: under stages 0-1 in the last micro-step (each unit
once; zero_reduce_step then only waits), under stages 2-3 every micro-step, the layers taking turns
in two gradient buffers (BUFFER_LAYER, BUFFER_LAYER_2: one more layer of X bytes; stage 3's gathered
layers likewise). Stage 3 gathers each layer one ahead, as FSDP and Megatron-LM prefetch: while
layer l computes, layer l+1 (forward) or l-1 (backward) is gathered into the other layer buffer, so
a layer's gather hides behind its neighbour's compute; each pass's first layer is posted beside the
embeddings' forward or the head's backward (zero_prefetch_unit). After AdamW stages 1-2 gather the
updated parameters, stage 3 its two ends (zero_gather_after_update): the embeddings' slices are
updated first, in a launch of their own, and gathered beside the other units' update; the rest
follow, each waited for just before its unit's next forward (Megatron-LM's overlapped parameter
gather). Stages 1-2:
    default stream | AdamW E | AdamW rest | wait | fwd E | fwd L0 | fwd L1 | ... | head
    comm stream              | gather E   | gather L0 | gather L1 | ... | gather N |
So at pp 1 what is exposed is the part of the embeddings' gather that outlasts the rest of AdamW
(comm_time.h's ledger gives it). Under a pipeline a stage's first layer waits for its input's
receive (pipeline_links.h) before its gather can start, so there it stays exposed.
With -overlap 0 every stage takes turns, which is the plain order to learn first.

Under tensor and pipeline parallelism (tp.h, pipeline.h) each rank runs its own ZeRO
over its own replica group, on its own units; nothing here crosses TP ranks or stages.
The trainer says which tensors the gradient norm counts (a copy is counted once) and
sums the tied embedding's gradient over its two stages (zero_sum_unit_gradient).
Read zero_gather_unit, zero_unit and zero_reduce_unit first: they are what the forward and
backward call.

Applied in gpt2.h: gpt2_units (the units) and gpt2_grad_norm_squared (the norm);
train_gpt.cu: blocks_forward, blocks_backward and stage_forward/stage_backward (zero_gather_unit,
zero_prefetch_unit, zero_reduce_unit), block_params and block_grads (zero_unit), pipeline_stage
(zero_begin_micro_step, zero_end_micro_step), train_step (zero_begin_step, zero_reduce_step,
zero_optimizer_step); model_file.h (files and checkpoints: zero_set_params, zero_params_to_host,
the optimizer shards).
*/
#pragma once
// defines: TensorSlice, Unit, GradientBuffer, with_gradient, UnitBuffer, Zero, unit_buffer, unit_shard,
//          zero_lay_out_units, zero_init, zero_free, ZeroOptimizerState, zero_optimizer_state,
//          zero_for_each_shard_slice, zero_shard_to_units, zero_units_to_shard, zero_set_params, UnitTensors,
//          zero_unit, zero_gather_unit, zero_reduce_unit, zero_begin_step, zero_end_micro_step, zero_reduce_step,
//          zero_grad_norm_squared, zero_sum_gradient_range, zero_sum_unit_gradient, zero_poison_gradients,
//          zero_optimizer_step, zero_params_to_host, ZeroPlan, zero_plan, MAX_UNIT_SLICES,
//          zero_adamw_slices, zero_begin_micro_step, zero_reduce_step_unit, zero_overlaps, zero_all_gather_unit,
//          zero_prefetch_unit, zero_gather_after_update, is_end_unit, gather_buffer
#include <algorithm>               // defines: std::max, std::min
#include <type_traits>             // defines: std::is_same, std::remove_pointer_t
#include <vector>                  // defines: std::vector
#include "comm.h"                  // defines: Collectives, comm_all_gather, comm_reduce_scatter_sum
#include "overlap.h"               // defines: Overlap, overlap_start, overlap_finish
#include "adamw.h"                 // defines: adamw_update
#include "kernels/gradients.cuh"   // defines: global_norm_squared, gradient_accumulate

#define MAX_UNIT_SLICES 12

// one parameter tensor's elements inside a unit. replicated: every TP rank holds the
// same values (LayerNorms, wpe, row-parallel biases), so the norm counts it on one
struct TensorSlice { size_t offset, count; bool decay, replicated; };

struct Unit {
    size_t size;          // elements
    size_t padded;        // size rounded up to a multiple of the number of shards
    size_t offset;        // in the full (padded) buffer
    size_t origin;        // in the unpadded model: stochastic-rounding indices do not depend on dp
    size_t shard_offset;  // of this rank's shard in the local shard buffers
    int num_slices;
    TensorSlice slices[MAX_UNIT_SLICES];
};

// A gradient sum, in the type -ga chose: fp32 or floatX. with_gradient is the one place that
// asks which, and hands the caller a typed pointer, so each use below has one path.
struct GradientBuffer { void* data; bool fp32; };
template <typename Use> inline void with_gradient(GradientBuffer buffer, Use use) {
    if (buffer.fp32) use((float*)buffer.data);
    else use((floatX*)buffer.data);
}

// the transient buffers of stages 2 and 3, one per kind of unit (the header's drawing); under
// overlap the layers take turns in BUFFER_LAYER and BUFFER_LAYER_2 (empty otherwise)
enum UnitBuffer { BUFFER_EMBEDDING, BUFFER_LAYER, BUFFER_FINAL_NORM, BUFFER_LAYER_2, NUM_UNIT_BUFFERS };

struct Zero {
    int stage, shards, shard_rank;  // shards = dp x cp (grid.replicas) from stage 1 on; stage 0: one shard
    int num_units;
    Unit* units;
    size_t full_elements, shard_elements, buffer_elements[NUM_UNIT_BUFFERS], max_unit_shard;
    bool grads_fp32;                // -ga fp32
    Collectives* comm;
    floatX* params;                 // stages 0-2: all units; stage 3: this rank's shard
    floatX* gathered[NUM_UNIT_BUFFERS];    // stage 3: the gathered embeddings, current layer and final norm
    float* master;                  // shard; 16-bit builds only, NULL under -w 0
    float* m;                       // shard
    float* v;                       // shard
    // what the backward writes, always floatX (the kernels' type):
    floatX* grads;                  // stages 0-1: every unit, summed over this rank's micro-steps
    floatX* unit_grads[NUM_UNIT_BUFFERS];  // stages 2-3: one unit's gradient while its backward runs
    // the step's sum (-ga: floatX, or fp32 beside the floatX the backward writes):
    GradientBuffer step_sum_full;   // stages 0-1: every unit; `grads` itself unless -ga fp32
    GradientBuffer step_grad;       // what the optimizer reads, indexed like the shard buffers:
                                    // stage 0 step_sum_full (one shard), 1-3 this rank's shard
    floatX* reduce_buffer;          // stages 2-3: a reduce-scattered unit shard
    float* norm_scratch;            // NORM_PARTS floats for each of norm_ranges ranges (zero_grad_norm_squared)
    int norm_ranges;
    AdamWSlice* adamw_slices;       // every tensor slice of the shard, for AdamW's one launch (adamw.h)
    int num_adamw_slices;
    unsigned adamw_blocks;          // the launch's grid: the slices' blocks summed
    int embedding_slices;           // the table's first entries, the embeddings' (stage 3 updates them first)
    unsigned embedding_blocks;      // their blocks
    Overlap overlap;                // the reductions started during the backward (overlap.h)
    bool last_micro_step;           // the backward running is the step's last micro-step's (stages 0-1 reduce then)
    std::vector<bool> reduced;      // stages 0-1: the units whose reduction overlap started this step
};

inline int unit_buffer(const Zero* z, int u) {
    if (u == 0) return BUFFER_EMBEDDING;
    if (u == z->num_units - 1) return BUFFER_FINAL_NORM;
    return z->stage >= 2 && z->overlap.on && u % 2 == 0 ? BUFFER_LAYER_2 : BUFFER_LAYER;  // layers in turn
}
inline size_t unit_shard(const Zero* z, int u) { return z->units[u].padded / z->shards; }

// each unit padded to a multiple of `shards`, placed in the full buffer (offset), the unpadded
// model (origin) and the shard buffers (shard_offset); returns the two buffers' sizes
inline void zero_lay_out_units(Unit* units, int num_units, int shards, size_t* full_elements, size_t* shard_elements) {
    size_t origin = 0;
    *full_elements = *shard_elements = 0;
    for (int u = 0; u < num_units; u++) {
        Unit& unit = units[u];
        unit.padded = ceil_div(unit.size, shards) * shards;
        unit.offset = *full_elements;
        unit.origin = origin;
        unit.shard_offset = *shard_elements;
        *full_elements += unit.padded;
        *shard_elements += unit.padded / shards;
        origin += unit.size;
    }
}

inline std::vector<AdamWSlice> zero_adamw_slices(Zero* z);  // below: the optimizer step

// whether -overlap 1 applies (overlap.h): under every stage with more than one replica, but not under
// -ga fp32 at stages 0-1, and in the GPU build through NCCL only (-comm mpi's host staging waits anyway)
inline bool zero_overlaps(int stage, const Collectives* comm, bool grads_fp32, bool asked) {
#ifdef __CUDACC__
    if (!comm->replicas.use_nccl) return false;
#endif
    return asked && comm->grid.replicas > 1 && !(stage <= 1 && grads_fp32);
}

// units: each unit's elements and tensor slices (gpt2_units); zero_init takes ownership of them.
// allocate = false lays out the shards without allocating (-plan).
// master_weights: an fp32 master copy of the shard in a 16-bit build (-w 1; the fp32 build never keeps one)
// overlap: -overlap (zero_overlaps says where it applies)
inline void zero_init(Zero* z, int stage, Collectives* comm, Unit* units, int num_units, bool grads_fp32,
                      bool master_weights, bool allocate, size_t ledger[NUM_MEMORY_KINDS], bool overlap = false) {
    if (stage < 0 || stage > 3) fail("-z must be 0, 1, 2 or 3 (got %d)", stage);
    *z = Zero{};
    z->stage = stage, z->comm = comm;
    overlap_init(&z->overlap, zero_overlaps(stage, comm, grads_fp32, overlap), allocate,
                 stage == 3 ? NUM_UNIT_BUFFERS : stage >= 1 ? num_units : 0);  // where gathers land (gather_buffer)
    z->reduced.assign(num_units, false);
    z->shards = stage == 0 ? 1 : comm->grid.replicas;  // the replica group: dp x cp ranks (process_grid.h)
    z->shard_rank = stage == 0 ? 0 : comm->grid.replica_rank;
    z->units = units, z->num_units = num_units, z->grads_fp32 = grads_fp32;
    zero_lay_out_units(units, num_units, z->shards, &z->full_elements, &z->shard_elements);
    for (int u = 0; u < num_units; u++) {
        size_t& largest = z->buffer_elements[unit_buffer(z, u)];
        if (units[u].padded > largest) largest = units[u].padded;
        z->max_unit_shard = std::max(z->max_unit_shard, units[u].padded / z->shards);
    }
    size_t full = z->full_elements, shard = z->shard_elements, X = sizeof(floatX), fp32 = sizeof(float);
    const size_t* size = z->buffer_elements;  // the largest unit of each buffer, padded
    bool gathered = stage == 3, by_unit = stage >= 2, master = !FLOATX_IS_FP32 && master_weights;
    std::vector<AdamWSlice> adamw_table = zero_adamw_slices(z);
    z->norm_ranges = 1;  // the gradient norm's ranges: at most one more than the tensors a rank may skip
    for (int u = 0; u < num_units; u++) z->norm_ranges += units[u].num_slices;
    BufferSpec specs[] = {
        {(void**)&z->params, stage == 3 ? shard : full, X, MEM_PARAMETERS},
        {(void**)&z->gathered[BUFFER_EMBEDDING], gathered ? size[BUFFER_EMBEDDING] : 0, X, MEM_PARAMETERS_TRANSIENT},
        {(void**)&z->gathered[BUFFER_LAYER], gathered ? size[BUFFER_LAYER] : 0, X, MEM_PARAMETERS_TRANSIENT},
        {(void**)&z->gathered[BUFFER_FINAL_NORM], gathered ? size[BUFFER_FINAL_NORM] : 0, X, MEM_PARAMETERS_TRANSIENT},
        {(void**)&z->gathered[BUFFER_LAYER_2], gathered ? size[BUFFER_LAYER_2] : 0, X, MEM_PARAMETERS_TRANSIENT},
        {(void**)&z->master, master ? shard : 0, fp32, MEM_OPTIMIZER},
        {(void**)&z->m, shard, fp32, MEM_OPTIMIZER},
        {(void**)&z->v, shard, fp32, MEM_OPTIMIZER},
        {(void**)&z->grads, stage <= 1 ? full : 0, X, MEM_GRADIENTS},
        {&z->step_sum_full.data, stage <= 1 && grads_fp32 ? full : 0, fp32, MEM_GRADIENTS},
        {&z->step_grad.data, stage >= 1 ? shard : 0, grads_fp32 ? fp32 : X, MEM_GRADIENTS},
        {(void**)&z->unit_grads[BUFFER_EMBEDDING], by_unit ? size[BUFFER_EMBEDDING] : 0, X, MEM_GRADIENTS_TRANSIENT},
        {(void**)&z->unit_grads[BUFFER_LAYER], by_unit ? size[BUFFER_LAYER] : 0, X, MEM_GRADIENTS_TRANSIENT},
        {(void**)&z->unit_grads[BUFFER_FINAL_NORM], by_unit ? size[BUFFER_FINAL_NORM] : 0, X, MEM_GRADIENTS_TRANSIENT},
        {(void**)&z->unit_grads[BUFFER_LAYER_2], by_unit ? size[BUFFER_LAYER_2] : 0, X, MEM_GRADIENTS_TRANSIENT},
        {(void**)&z->reduce_buffer, by_unit ? z->max_unit_shard : 0, X, MEM_GRADIENTS_TRANSIENT},
        {(void**)&z->norm_scratch, NORM_PARTS * (size_t)z->norm_ranges, fp32, MEM_ACTIVATIONS_TRANSIENT},
        {(void**)&z->adamw_slices, adamw_table.size(), sizeof(AdamWSlice), MEM_ACTIVATIONS_TRANSIENT},
    };
    allocate_buffers(specs, sizeof(specs) / sizeof(specs[0]), ledger, allocate);
    z->num_adamw_slices = (int)adamw_table.size();
    if (allocate) host_to_device(z->adamw_slices, adamw_table.data(), adamw_table.size() * sizeof(AdamWSlice));
    z->step_sum_full.fp32 = z->step_grad.fp32 = grads_fp32;
    if (stage <= 1 && !grads_fp32) z->step_sum_full.data = z->grads;  // the backward sums in place
    if (stage == 0) z->step_grad = z->step_sum_full;                   // the whole model is the shard
}

inline void zero_free(Zero* z) {
    overlap_wait_every_ahead(&z->overlap);  // the gathers after the last update (zero_gather_after_update)
    void* state[] = {z->params, z->master, z->m, z->v, z->grads, z->reduce_buffer, z->norm_scratch, z->adamw_slices};
    for (void* b : state) device_free(b);
    if (z->step_sum_full.data != z->grads) device_free(z->step_sum_full.data);  // not aliases of the above
    if (z->stage >= 1) device_free(z->step_grad.data);
    for (int k = 0; k < NUM_UNIT_BUFFERS; k++) { device_free(z->gathered[k]); device_free(z->unit_grads[k]); }
    free(z->units);
    overlap_free(&z->overlap);
}

// what a checkpoint saves of this rank: the optimizer shard (m, v, and the fp32 master if kept)
struct ZeroOptimizerState { int stage, num_buffers; size_t elements; float* buffers[3]; };
inline ZeroOptimizerState zero_optimizer_state(const Zero* z) {
    ZeroOptimizerState s = {z->stage, z->master ? 3 : 2, z->shard_elements, {z->m, z->v, z->master}};
    return s;
}

// calls visit(u, slice, lo, hi, at) for each tensor slice's part [lo, hi) (relative to unit u)
// that lies in this rank's shard, at index `at` of the shard buffers (stage 0: the whole model)
template <typename Visit> inline void zero_for_each_shard_slice(const Zero* z, Visit visit) {
    for (int u = 0; u < z->num_units; u++) {
        const Unit& unit = z->units[u];
        size_t S = unit_shard(z, u), begin = z->shard_rank * S, end = begin + S;
        for (int k = 0; k < unit.num_slices; k++) {
            size_t lo = std::max(unit.slices[k].offset, begin);
            size_t hi = std::min(unit.slices[k].offset + unit.slices[k].count, end);
            if (lo < hi) visit(u, unit.slices[k], lo, hi, unit.shard_offset + (lo - begin));
        }
    }
}

// A shard of a buffer laid out as zero_init lays out the optimizer state (each unit padded to
// a multiple of `shards`, rank `shard_rank` holding its 1/shards of each) <-> every unit's
// elements, unpadded, in unit order. Pure functions of the layout, so rank 0 can place any
// rank's shard (checkpoints that resume under another layout, checkpoint.h).
inline void zero_shard_to_units(const Unit* units, int num_units, int shards, int shard_rank, const float* shard,
                                float* values) {
    for (int u = 0; u < num_units; u++) {
        size_t S = units[u].padded / shards, begin = shard_rank * S;
        for (size_t i = begin; i < begin + S && i < units[u].size; i++)
            values[units[u].origin + i] = shard[units[u].shard_offset + i - begin];
    }
}
inline void zero_units_to_shard(const Unit* units, int num_units, int shards, int shard_rank, const float* values,
                                float* shard) {
    for (int u = 0; u < num_units; u++) {
        size_t S = units[u].padded / shards, begin = shard_rank * S;
        for (size_t i = begin; i < begin + S; i++)
            shard[units[u].shard_offset + i - begin] = i < units[u].size ? values[units[u].origin + i] : 0.0f;
    }
}

// ---------------------------------------------------------------- what forward and backward call

// where unit u's full parameters are now (stage 3: valid after zero_gather_unit), and where the
// backward accumulates its gradients (stages 2-3: a unit buffer, reduced by zero_reduce_unit)
struct UnitTensors { floatX *params, *grads; };
inline UnitTensors zero_unit(const Zero* z, int u) {
    floatX* params = z->stage == 3 ? z->gathered[unit_buffer(z, u)] : z->params + z->units[u].offset;
    floatX* grads = z->stage >= 2 ? z->unit_grads[unit_buffer(z, u)] : z->grads + z->units[u].offset;
    return {params, grads};
}

// the buffer unit u's gather is posted into (overlap.h's Ahead): stage 3 its unit buffer; stages 1-2 one a unit
inline int gather_buffer(const Zero* z, int u) { return z->stage == 3 ? unit_buffer(z, u) : u; }
// unit u's all-gather, for overlap.h to post: stage 3 from the shards into its unit buffer; stages 1-2 in place,
// each rank's updated 1/dp of the full parameters to every rank
inline auto zero_all_gather_unit(Zero* z, int u) {
    return [=](Posted* p) {
        size_t S = unit_shard(z, u);
        if (z->stage == 3) {
            floatX* whole = z->gathered[unit_buffer(z, u)];
            comm_all_gather(&z->comm->replicas, z->params + z->units[u].shard_offset, whole, S, p);
            return;
        }
        floatX* full = z->params + z->units[u].offset;
        comm_all_gather(&z->comm->replicas, full + z->shard_rank * S, full, S, p);
    };
}
// after AdamW updated unit u's shard: its gather for the next step, stage 3's end units (into their
// buffers, where they stay until AdamW next updates them: once a step, not once a micro-step) and
// stages 1-2's every unit (in place); under overlap posted, and zero_gather_unit waits for it
inline void zero_gather_after_update(Zero* z, int u) {
    if (z->units[u].padded == 0) return;  // not on this pipeline stage
    if (z->overlap.on) overlap_post_ahead(&z->overlap, gather_buffer(z, u), u, zero_all_gather_unit(z, u));
    else zero_all_gather_unit(z, u)(nullptr);
}
inline bool is_end_unit(const Zero* z, int u) { return u == 0 || u == z->num_units - 1; }
// Before unit u is used. Stage 3's layers: all-gathered here from the DP shards; under overlap
// (overlap.h) on the comm stream, and `next`, the unit the caller uses after u, gathered while u
// computes, into the other layer buffer (FSDP's and Megatron-LM's prefetch); -1: none. The units
// gathered after each update instead (zero_gather_after_update: stages 1-2's, stage 3's two ends):
// under overlap the default stream waits for that gather (Megatron-LM's overlapped parameter gather)
inline void zero_gather_unit(Zero* z, int u, int next = -1) {
    if (z->stage != 3 || is_end_unit(z, u)) {  // gathered after the update, or never (stage 0)
        if (z->stage >= 1 && z->overlap.on) overlap_wait_ahead(&z->overlap, gather_buffer(z, u));  // if posted
        return;
    }
    if (!z->overlap.on) { zero_all_gather_unit(z, u)(nullptr); return; }
    if (!overlap_ahead_holds(&z->overlap, unit_buffer(z, u), u))  // not gathered ahead: now
        overlap_post_ahead(&z->overlap, unit_buffer(z, u), u, zero_all_gather_unit(z, u));
    overlap_wait_ahead(&z->overlap, unit_buffer(z, u));
    if (next >= 0) overlap_post_ahead(&z->overlap, unit_buffer(z, next), next, zero_all_gather_unit(z, next));
}
// stage 3 under overlap: unit u's gather posted now, beside the compute that comes before its
// zero_gather_unit (the first layer's beside the embeddings' forward, the last layer's beside the
// head's backward, each pass's first layer otherwise exposed)
inline void zero_prefetch_unit(Zero* z, int u) {
    if (z->stage != 3 || !z->overlap.on || is_end_unit(z, u) || overlap_ahead_holds(&z->overlap, unit_buffer(z, u), u))
        return;
    overlap_post_ahead(&z->overlap, unit_buffer(z, u), u, zero_all_gather_unit(z, u));
}

// stages 0-1, unit u of the step's gradient sum: all-reduced in place (0) or reduce-scattered into
// this rank's shard (1); posted: overlap.h
inline void zero_reduce_step_unit(Zero* z, int u, Posted* posted) {
    Comm* dp = &z->comm->replicas;
    const Unit& unit = z->units[u];
    with_gradient(z->step_sum_full, [&](auto* full) {
        auto* shard = (decltype(full))z->step_grad.data;  // the same type
        if (z->stage == 0) comm_all_reduce_sum(dp, full + unit.offset, unit.padded, posted);
        else comm_reduce_scatter_sum(dp, full + unit.offset, shard + unit.shard_offset, unit_shard(z, u), posted);
    });
}

// once unit u's backward is done (its gradient for this micro-step complete). Stages 2-3:
// reduce-scatter its gradient, add this rank's shard into the step's gradient shard and clear
// the unit buffer for the next unit. Under overlap (overlap.h) that runs beside the backward
// that follows, as does stages 0-1's reduction of the unit in the last micro-step
inline void zero_reduce_unit(Zero* z, int u) {
    if (z->units[u].padded == 0) return;  // a unit empty on this pipeline stage
    if (z->stage <= 1) {
        if (!z->overlap.on || !z->last_micro_step) return;  // zero_reduce_step reduces it
        overlap_start(&z->overlap, [&](Posted* p) { zero_reduce_step_unit(z, u, p); }, nullptr, false);
        z->reduced[u] = true;
        return;
    }
    size_t S = unit_shard(z, u), at = z->units[u].shard_offset, bytes = z->units[u].padded * sizeof(floatX);
    floatX *grad = z->unit_grads[unit_buffer(z, u)], *reduced = z->reduce_buffer;
    GradientBuffer step = z->step_grad;
    auto add_and_clear = [=](Stream stream) {
        with_gradient(step, [&](auto* sum) { gradient_accumulate(sum + at, reduced, S, stream); });
        device_zero_on(stream, grad, bytes);
    };
    if (!z->overlap.on) {
        comm_reduce_scatter_sum(&z->comm->replicas, grad, reduced, S);
        add_and_clear(0);
        return;
    }
    Comm* dp = &z->comm->replicas;
    auto reduce = [=](Posted* p) { comm_reduce_scatter_sum(dp, grad, reduced, S, p); };
    overlap_start(&z->overlap, reduce, add_and_clear, true);
}

// ---------------------------------------------------------------- the step

// every gradient buffer of the step to zero (each once: step_sum_full and step_grad may be aliases)
inline void zero_begin_step(Zero* z) {
    size_t G = z->grads_fp32 ? sizeof(float) : sizeof(floatX);
    if (z->stage <= 1) device_zero(z->grads, z->full_elements * sizeof(floatX));
    if (z->stage <= 1 && z->grads_fp32) device_zero(z->step_sum_full.data, z->full_elements * G);
    if (z->stage >= 1) device_zero(z->step_grad.data, z->shard_elements * G);
}

// before a micro-step's backward (or either half of ZB-H1's): whether it is the step's last (stages
// 0-1 reduce in it). Stages 2-3 under overlap: the backward before's reductions done, as this one
// writes the embedding's and head's buffers again (not waited at its end: the last units' reductions
// run beside the next forward, and a pipeline stage's gradient leaves without waiting for them)
inline void zero_begin_micro_step(Zero* z, bool last) {
    z->last_micro_step = last;
    if (z->stage >= 2) overlap_finish(&z->overlap);
}

// after a micro-step's backward (or either half of ZB-H1's). -ga fp32 under stages 0-1: move the
// micro-step's floatX gradients into the fp32 sum
inline void zero_end_micro_step(Zero* z) {
    if (z->stage <= 1 && z->grads_fp32) gradient_accumulate((float*)z->step_sum_full.data, z->grads, z->full_elements);
}

// after the last micro-step: stage 0 all-reduces, stage 1 reduce-scatters each unit into this
// rank's shard, but the units whose reduction overlap started, which are waited for; stages 2-3
// already did, unit by unit, during the backward: for them this is only the default stream's wait
// for the reductions still running (overlap_finish)
inline void zero_reduce_step(Zero* z) {
    overlap_finish(&z->overlap);
    if (z->stage <= 1)
        for (int u = 0; u < z->num_units; u++)
            if (!z->reduced[u] && z->units[u].padded > 0) zero_reduce_step_unit(z, u, nullptr);
    z->reduced.assign(z->num_units, false);
}

// squared norm of this rank's part of the step's gradient, summed over the replica group;
// non-finite when any element is. counts(u, slice) says whether this rank counts a tensor:
// a copy held elsewhere too (a tensor replicated over TP, the tied embedding's second
// copy) is counted by one rank only, and the caller sums over TP ranks and stages. When
// everything counts, the buffer is summed in one range.
template <typename Counts> inline double zero_grad_norm_squared(Zero* z, Counts counts) {
    // the counted ranges of step_grad: the gaps between the slices that do not count
    std::vector<size_t> begins = {0}, ends;
    zero_for_each_shard_slice(z, [&](int u, const TensorSlice& slice, size_t lo, size_t hi, size_t at) {
        if (counts(u, slice)) return;
        ends.push_back(at);                // the counted range ends where this slice starts
        begins.push_back(at + (hi - lo));  // and the next begins after it
    });
    ends.push_back(z->stage == 0 ? z->full_elements : z->shard_elements);
    std::vector<size_t> lo, hi;  // the ranges not empty, read back in one copy
    for (size_t r = 0; r < ends.size(); r++)
        if (ends[r] > begins[r]) { lo.push_back(begins[r]); hi.push_back(ends[r]); }
    if ((int)lo.size() > z->norm_ranges)
        fail("zero_grad_norm_squared: %zu ranges, room for %d", lo.size(), z->norm_ranges);
    double sum = 0.0;
    with_gradient(z->step_grad, [&](auto* grad) {
        sum = global_norm_squared_ranges(grad, lo.data(), hi.data(), (int)lo.size(), z->norm_scratch);
    });
    if (z->stage > 0) comm_all_reduce_scalars(&z->comm->replicas, &sum, 1);  // each DP rank holds a shard
    return sum;
}

// after the step's reductions: elements [at, at + n) of the gradient as the optimizer reads it
// (the step's shard), or unit u's, summed over `group`: the first and last stage's copies of the
// tied embedding (pipeline.h), or under -sp the TP ranks' LayerNorm gradients (tp.h). Both
// copies have the same units and shards, so the sum is elementwise.
inline void zero_sum_gradient_range(Zero* z, size_t at, size_t n, Comm* group) {
    with_gradient(z->step_grad, [&](auto* grad) { comm_all_reduce_sum(group, grad + at, n); });
}
inline void zero_sum_unit_gradient(Zero* z, int u, Comm* group) {
    zero_sum_gradient_range(z, z->units[u].shard_offset, unit_shard(z, u), group);
}

// TRAIN_GPT_INJECT_NONFINITE: make this step's gradient non-finite (the reduction or the norm spreads it)
inline void zero_poison_gradients(Zero* z) {
    overlap_finish(&z->overlap);  // not under a reduction still running
    bool reduced = std::find(z->reduced.begin(), z->reduced.end(), true) != z->reduced.end();  // overlap started them
    GradientBuffer target = z->stage <= 1 && !reduced ? z->step_sum_full : z->step_grad;  // before or after reducing
    with_gradient(target, [&](auto* grad) {
        using Element = std::remove_pointer_t<decltype(grad)>;  // float or floatX
        Element inf;
        if constexpr (std::is_same<Element, float>::value) inf = INFINITY;
        else inf = from_float(INFINITY);
        host_to_device(grad, &inf, sizeof(inf));
    });
}

// the table of AdamW's one launch: every tensor slice of this rank's shard (weight decay is per
// tensor), where its parameters are (stage 3: the shard; else the full buffer) and its state (m, v,
// master and the gradient share the shard index), and its blocks of the grid (z->adamw_blocks; the
// table is in unit order, the embeddings' entries first: z->embedding_slices, z->embedding_blocks)
inline std::vector<AdamWSlice> zero_adamw_slices(Zero* z) {
    std::vector<AdamWSlice> table;
    z->adamw_blocks = 0, z->embedding_slices = 0, z->embedding_blocks = 0;
    zero_for_each_shard_slice(z, [&](int u, const TensorSlice& slice, size_t lo, size_t hi, size_t local) {
        const Unit& unit = z->units[u];
        table.push_back(AdamWSlice{z->stage == 3 ? local : unit.offset + lo, local, hi - lo, unit.origin + lo,
                                   z->adamw_blocks, slice.decay});
        z->adamw_blocks += adamw_slice_blocks(hi - lo);
        if (u == 0) z->embedding_slices++, z->embedding_blocks = z->adamw_blocks;
    });
    return table;
}

// AdamW on this rank's shard of every unit: one launch over the table zero_init made; then the updated
// parameters gathered for the next forward (stages 1-2 every unit, in place; stage 3 its two ends:
// zero_gather_after_update). Two launches under stage 3, and under stages 1-2 with overlap: the
// embeddings' slices first, so that their gather (posted, under overlap) runs beside the other units' update
inline void zero_optimizer_step(Zero* z, float lr, float weight_decay, float grad_scale, int t, uint64_t seed) {
    overlap_wait_every_ahead(&z->overlap);  // the step before's gathers (each waited where its unit ran)
    AdamWConfig c;
    c.lr = lr;
    bool embeddings_first = z->stage == 3 || (z->stage >= 1 && z->overlap.on);
    int k = embeddings_first ? z->embedding_slices : 0;
    unsigned b = embeddings_first ? z->embedding_blocks : 0;
    with_gradient(z->step_grad, [&](auto* grad) {
        auto update = [&](int first, int count, unsigned first_block, unsigned blocks) {
            adamw_update_slices(z->params, z->master, grad, z->m, z->v, z->adamw_slices + first, count, blocks, c,
                                weight_decay, t, grad_scale, seed, first_block);
        };
        update(0, k, 0, b);  // the embeddings (or nothing)
        if (embeddings_first) zero_gather_after_update(z, 0);
        update(k, z->num_adamw_slices - k, b, z->adamw_blocks - b);
    });
    if (z->stage == 3) zero_gather_after_update(z, z->num_units - 1);
    if (z->stage == 1 || z->stage == 2)
        for (int u = embeddings_first ? 1 : 0; u < z->num_units; u++) zero_gather_after_update(z, u);
}

// loads the model: `values` holds every unit unpadded, in unit order, fp32
inline void zero_set_params(Zero* z, const float* values) {
    overlap_wait_every_ahead(&z->overlap);  // none reads the shards now
    for (int u = 0; u < z->num_units; u++) {
        const Unit& unit = z->units[u];
        size_t S = unit_shard(z, u), begin = z->shard_rank * S;
        std::vector<floatX> full(unit.padded, from_float(0.0f));
        for (size_t i = 0; i < unit.size; i++) full[i] = from_float(values[unit.origin + i]);
        if (z->stage == 3) host_to_device(z->params + unit.shard_offset, full.data() + begin, S * sizeof(floatX));
        else host_to_device(z->params + unit.offset, full.data(), unit.padded * sizeof(floatX));
    }
    for (int u : {0, z->num_units - 1})  // stage 3's ends, gathered now, not posted: none in flight if resume fails
        if (z->stage == 3 && z->units[u].padded > 0) zero_all_gather_unit(z, u)(nullptr);
    if (!z->master) return;
    std::vector<float> master(z->shard_elements);
    zero_units_to_shard(z->units, z->num_units, z->shards, z->shard_rank, values, master.data());
    host_to_device(z->master, master.data(), master.size() * sizeof(float));
}

// every unit's parameters, unpadded, to host fp32 (a collective under stage 3)
inline void zero_params_to_host(Zero* z, float* out) {
    for (int u = 0; u < z->num_units; u++) {
        zero_gather_unit(z, u);
        std::vector<floatX> h(z->units[u].padded);
        device_to_host(h.data(), zero_unit(z, u).params, h.size() * sizeof(floatX));
        for (size_t i = 0; i < z->units[u].size; i++) out[z->units[u].origin + i] = to_float(h[i]);
    }
}

// ---------------------------------------------------------------- the plan (formulas above)

// the bytes this rank sends over its replica group per optimizer step (the memory it holds is
// the ledger of zero_init's buffer list). Psi: padded full elements; E, H: padded embedding
// and head units; Psi_layers = Psi - E - H; M micro-steps; p = dp
struct ZeroPlan { unsigned long long comm[NUM_COMM_KINDS]; };
inline ZeroPlan zero_plan(const Zero* z, int grad_accum) {
    ZeroPlan plan = {};
    size_t Psi = z->full_elements, X = sizeof(floatX);
    size_t E = z->units[0].padded, H = z->units[z->num_units - 1].padded;
    int p = z->comm->grid.replicas, s = z->stage;
    size_t G = z->grads_fp32 ? 4 : X;
    unsigned long long M = grad_accum;
    if (s == 0)  // unit by unit, as zero_reduce_step_unit reduces
        for (int u = 0; u < z->num_units; u++)
            plan.comm[COMM_ALL_REDUCE] += 2 * ring_bytes(G * z->units[u].padded, p);
    if (s == 1) plan.comm[COMM_REDUCE_SCATTER] = ring_bytes(G * Psi, p);
    if (s == 2) plan.comm[COMM_REDUCE_SCATTER] = M * ring_bytes(X * Psi, p);
    if (s == 1 || s == 2) plan.comm[COMM_ALL_GATHER] = ring_bytes(X * Psi, p);
    if (s == 3) {
        // the ends once a step (zero_gather_after_update), the layers before their forward and their backward
        plan.comm[COMM_ALL_GATHER] = ring_bytes(X * (E + H), p) + 2 * M * ring_bytes(X * (Psi - E - H), p);
        plan.comm[COMM_REDUCE_SCATTER] = M * ring_bytes(X * Psi, p);
    }
    plan.comm[COMM_SCALARS] = 2 * ring_bytes(8, p) * (s == 0 ? 1 : 2);  // the loss; the norm when sharded
    return plan;
}

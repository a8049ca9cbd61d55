/*
pipeline.h: pipeline parallelism: the layers cut into p stages, and the order in
which each stage runs the m micro-batches of a step: GPipe, 1F1B or ZB-H1, as data.

Stage s of p holds a contiguous range of layers (distribute_layers: L/p each, the
first L % p stages one more; or a split of one's own, -pl, as stage_layer_counts
explains); stage 0 also the embeddings, stage p-1 the final LayerNorm and the LM
head. A micro-batch flows forward through the stages, each sending its output
activation (B,T,C) to the next, and its gradient flows back the same way. The micro-batches
are the gradient-accumulation steps (-d), so m = tokens per step / (B*T*dp).

A schedule is a pure function of (s, p, m): the ordered list of actions stage s
runs in one step (forward k, backward k, receive or send an activation or a
gradient); the training loop executes the list, and the tests check the lists.
  GPipe: every forward, then every backward. Stage s keeps m micro-batches of
         activations.
  1F1B:  warmup: min(p - s - 1, m) forwards; steady: one forward, one backward,
         each backward freeing the oldest micro-batch; cooldown: the remaining
         backwards. Stage s keeps at most min(p - s, m) micro-batches: the same
         bubble as GPipe, with a fraction of its activation memory.
  ZB-H1: 1F1B with each backward split in two (zero-bubble, Qi et al. 2024): B, the
         gradient of the stage's input, which the stage before waits for, and W, the
         weights' gradients, which nobody waits for and which fill the bubble.
  Interleaved 1F1B (Megatron-LM, Narayanan et al. 2021): each stage holds V chunks of
         layers instead of one range, so the bubble's slots are a chunk's forward and
         backward, 1/V as long.
The two for p = 4, m = 8, one slot per forward (F) or backward (B), numbered by
micro-batch; a message leaves at the end of its slot (tests/test_pipeline.cpp renders
these from the schedules and checks them against this comment; ".." is the bubble):

GPipe
  stage 0: F0 F1 F2 F3 F4 F5 F6 F7 .. .. .. .. .. .. B0 B1 B2 B3 B4 B5 B6 B7
  stage 1: .. F0 F1 F2 F3 F4 F5 F6 F7 .. .. .. .. B0 B1 B2 B3 B4 B5 B6 B7 ..
  stage 2: .. .. F0 F1 F2 F3 F4 F5 F6 F7 .. .. B0 B1 B2 B3 B4 B5 B6 B7 .. ..
  stage 3: .. .. .. F0 F1 F2 F3 F4 F5 F6 F7 B0 B1 B2 B3 B4 B5 B6 B7 .. .. ..
1F1B
  stage 0: F0 F1 F2 F3 .. .. .. B0 F4 B1 F5 B2 F6 B3 F7 B4 .. B5 .. B6 .. B7
  stage 1: .. F0 F1 F2 .. .. B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 .. B6 .. B7 ..
  stage 2: .. .. F0 F1 .. B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 .. B7 .. ..
  stage 3: .. .. .. F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7 .. .. ..
Each stage is idle p - 1 forward slots and p - 1 backward slots of every step, so
the bubble is (p - 1) / (m + p - 1) of the step under both (here 3/11 = 27%); more
micro-batches shrink it. Stage 0 holds 4 micro-batches under 1F1B, 8 under GPipe.

Zero bubble. In 1F1B the gradient climbs from stage to stage at the pace of whole backwards;
B alone is enough to send it on. ZB-H1 runs B at once and defers W: stage s runs W k after
B (k + s), so every stage holds micro-batches from forward to W for p of them, what 1F1B's
stage 0 holds (stage 0 itself defers nothing and runs whole backwards). The same p = 4, m = 8
with F, B and W one slot each, 1F1B drawn at that scale beside it:

1F1B, each backward as B and W
  stage 0: F0 F1 F2 F3 .. .. .. .. .. .. B0 W0 F4 B1 W1 F5 B2 W2 F6 B3 W3 F7 B4 W4 .. B5 W5 .. B6 W6 .. B7 W7
  stage 1: .. F0 F1 F2 .. .. .. .. B0 W0 F3 B1 W1 F4 B2 W2 F5 B3 W3 F6 B4 W4 F7 B5 W5 .. B6 W6 .. B7 W7 .. ..
  stage 2: .. .. F0 F1 .. .. B0 W0 F2 B1 W1 F3 B2 W2 F4 B3 W3 F5 B4 W4 F6 B5 W5 F7 B6 W6 .. B7 W7 .. .. .. ..
  stage 3: .. .. .. F0 B0 W0 F1 B1 W1 F2 B2 W2 F3 B3 W3 F4 B4 W4 F5 B5 W5 F6 B6 W6 F7 B7 W7 .. .. .. .. .. ..
ZB-H1
  stage 0: F0 F1 F2 F3 .. .. .. B0 W0 F4 B1 W1 F5 B2 W2 F6 B3 W3 F7 B4 W4 B5 W5 B6 W6 B7 W7
  stage 1: .. F0 F1 F2 .. .. B0 F3 B1 W0 F4 B2 W1 F5 B3 W2 F6 B4 W3 F7 B5 W4 B6 W5 B7 W6 W7
  stage 2: .. .. F0 F1 .. B0 F2 B1 F3 B2 W0 F4 B3 W1 F5 B4 W2 F6 B5 W3 F7 B6 W4 B7 W5 W6 W7
  stage 3: .. .. .. F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 W5 W6 W7
Each stage idles 3 slots of 27 instead of 9 of 33: (p - 1)(F + B - W) per stage while W is the
shortest of F, B, W (the paper's third of 1F1B's bubble when all are equal), in general
(p - 1) max(F + B - W, F, B, W), for m >= p (zb_h1_bubble_fraction; pipeline_simulate checks
it). What it costs: a W needs what its layer's forward kept (the matmul inputs, the LayerNorm
inputs and statistics) and the gradients of the six weighted ops' outputs, 4C + 7C/tp values
per token and layer, kept from B to W for up to s + 1 micro-batches (pipeline_weight_slots);
this trainer keeps a micro-batch's whole activation set until its W, so stage s > 0 holds p
sets where 1F1B holds p - s (the paper frees B's own tensors at B; -plan prints what each stage
holds). The peak over the stages, stage 0's p sets, is 1F1B's. The LM head's weight gradient is
not deferred (it would keep the logits' gradient, Vp/tp per token): the head, the final
LayerNorm and the embedding run whole in B.

Interleaved. With V = 2 the model is cut into p*V = 8 chunks of layers, virtual stages 0..7;
stage s holds chunks s and s + p (chunk 0 and chunk 1 of the stage), so a micro-batch goes round
the ring of stages twice, stage p-1 handing chunk 0's output to stage 0's chunk 1. Micro-batches
go in groups of p: forwards of 0..3 on chunk 0, then 0..3 on chunk 1, then 4..7 on chunk 0, ...;
backwards the same with the chunks reversed (interleaved_order). The phases are 1F1B's, counted
in chunk-forwards: stage s warms up with 2(p - s - 1) + (V - 1)p of them, the round trip of the
first gradient plus the chunk-forwards that come before the first backward. Each cell below is
one chunk's forward or backward, half a stage's (F and B on chunk 0, f and b on chunk 1), and
1F1B is drawn at that scale above it:

1F1B, each forward and backward as two chunks'
  stage 0: F0 F0 F1 F1 F2 F2 F3 F3 .. .. .. .. .. .. B0 B0 F4 F4 B1 B1 F5 F5 B2 B2 F6 F6 B3 B3 F7 F7 B4 B4 .. .. B5 B5 .. .. B6 B6 .. .. B7 B7
  stage 1: .. .. F0 F0 F1 F1 F2 F2 .. .. .. .. B0 B0 F3 F3 B1 B1 F4 F4 B2 B2 F5 F5 B3 B3 F6 F6 B4 B4 F7 F7 B5 B5 .. .. B6 B6 .. .. B7 B7 .. ..
  stage 2: .. .. .. .. F0 F0 F1 F1 .. .. B0 B0 F2 F2 B1 B1 F3 F3 B2 B2 F4 F4 B3 B3 F5 F5 B4 B4 F6 F6 B5 B5 F7 F7 B6 B6 .. .. B7 B7 .. .. .. ..
  stage 3: .. .. .. .. .. .. F0 F0 B0 B0 F1 F1 B1 B1 F2 F2 B2 B2 F3 F3 B3 B3 F4 F4 B4 B4 F5 F5 B5 B5 F6 F6 B6 B6 F7 F7 B7 B7 .. .. .. .. .. ..
interleaved 1F1B, V = 2
  stage 0: F0 F1 F2 F3 f0 f1 f2 f3 F4 F5 .. .. .. F6 b0 F7 b1 f4 b2 f5 b3 f6 B0 f7 B1 B2 .. B3 b4 .. b5 b6 .. b7 B4 B5 B6 B7
  stage 1: .. F0 F1 F2 F3 f0 f1 f2 f3 .. .. F4 b0 F5 b1 F6 b2 F7 b3 f4 B0 f5 B1 f6 B2 f7 B3 b4 .. b5 b6 .. b7 B4 B5 B6 B7 ..
  stage 2: .. .. F0 F1 F2 F3 f0 f1 .. f2 b0 f3 b1 F4 b2 F5 b3 F6 B0 F7 B1 f4 B2 f5 B3 f6 b4 f7 b5 b6 .. b7 B4 B5 B6 B7 .. ..
  stage 3: .. .. .. F0 F1 F2 F3 f0 b0 f1 b1 f2 b2 f3 b3 F4 B0 F5 B1 F6 B2 F7 B3 f4 b4 f5 b5 f6 b6 f7 b7 B4 B5 B6 B7 .. .. ..
Each stage still idles p - 1 forward and p - 1 backward slots, but of a chunk: 6 of 38 instead of
12 of 44. With a stage's forward and backward F and B and each chunk's F/V and B/V, the step is
m(F + B) + (p - 1)(F + B)/V: the bubble is (p - 1)/V of the ideal step, (p - 1)/(Vm + p - 1) of
the real one (interleaved_bubble_fraction; pipeline_simulate checks it for p 1..8, m 1..16,
V 1..4). What it costs: stage s holds up to 2(p - s - 1) + (V - 1)p + 2 chunks' activations
(interleaved_activation_sets: the last, the next forward's input, received while a backward runs,
below), stage 0 p + p/V stages' worth where 1F1B's holds p;
V times the messages, each as large; and m must be a multiple of p (the groups; other m can
deadlock) with at least one layer per chunk (the trainer refuses others: -ps interleaved -vp V).
With V = 1 it is 1F1B.

Messages: stage s and s+1 exchange activations k = 0..m-1 one way and gradients
k = 0..m-1 the other, and both list them in the same order. Where two neighbours
would each send to the other at the same moment (1F1B's steady phase: s sends
activation k and waits for gradient j, while s+1 sends gradient j and waits for
activation k), the two halves are one paired action, comm_send_recv (MPI_Sendrecv;
an NCCL group on the GPU), which posts both before waiting on either. With every
send matched in order and no two blocking sends facing each other, each stage's
next message is always one its neighbour will post without waiting on it: no
schedule here can deadlock (tests/test_pipeline.cpp runs all stages' lists against
each other with blocking semantics and checks that every list completes).
Interleaving closes the line into a ring (stage p-1 sends activations to stage 0, which
sends gradients back), and on a ring a chain of lone blocking sends can close into a cycle
(at p = 2 the two stages send each other gradients). There every send is paired with the
next receive in the same direction round the ring (comm_send_recv again): activations
shift one stage on, SEND_ACTIVATION_RECV_ACTIVATION, then gradients shift one stage
back, SEND_GRADIENT_RECV_GRADIENT; every stage posts each shift whole, as Megatron-LM
batches its sends and receives. In the steady phase the activation shift is listed between the
forward that made its activation and the backward, the gradient shift after the backward, so that
each travels while the stage computes what does not need it (the backward, the next forward),
as Megatron-LM's overlap_p2p_comm posts them; the next input then lands in a set of its own while
the backward still holds one (one set more). Each stage's transfers keep their order, so the
argument above holds as it is.

Cost per stage and step: sends m activations and m gradients of B*T*C*X bytes, B*T*C*X/tp
under -sp, where each TP rank holds its share of the tokens (interleaved: V m of each, but for
the model's two ends); holds (1F1B) min(p - s, m), (GPipe) m or (ZB-H1,
s > 0) min(p, m) micro-batches of its layers' activations (interleaved: up to
2(p - s - 1) + (V - 1)p + 2 of a chunk's layers, each set taken when its input arrives and given
back at its backward, interleaved_set_of, since the chunks' micro-batches do not leave in
the order they came); the
tied wte lives on stage 0 and stage p-1 (its gradient summed between them, once a
step: the embedding group of comm.h).

The formulas assume equal stages; pipeline_sim.h plays the lists against each other with a
cost per stage and action (pipeline_simulate), gives each schedule's bubble formula, and finds
the split of the layers whose largest stage costs least (balanced_stage_layers).

Every list keeps two invariants, on which its executor (pipeline_run.h: run_schedule) relies
(tests/test_pipeline.cpp checks both for all (p, m)):
  - one gradient buffer per stage suffices: a received gradient is used by the very
    next action, the backward (or B) of that micro-batch, which overwrites it with the
    gradient of the stage's input; the next action but W's (which touch no gradient
    buffer) sends that, before any other gradient arrives. So GPT-2's stage keeps one
    (B,T,C) buffer, not m.
  - micro-batch k's activations live in set k % sets (pipeline_activation_sets): its
    input arrives there before forward k, and nothing reuses the set before the end of
    backward k (its W under ZB-H1), because no more than `sets` micro-batches are ever
    in flight. A waiting W's output gradients are in the slot its B and W actions carry
    (PipelineAction::slot, the lowest free at B): at most pipeline_weight_slots are busy.
Interleaved lists keep both in their own form: a gradient's receive is paired with the send
of the one before (the gradient shift), so it lands beside the stage's buffer
(PipelineStage::received_gradient) and is moved in once the other has left, and only
forwards, which touch no gradient, come between it and its backward; and a chunk's
micro-batch takes whichever set is free when its input arrives (interleaved_set_of). Both are
checked for p 2..6, m up to 12, V 2..4.
Read one_f_one_b_schedule first, then zb_h1_schedule (1F1B with the backward split),
interleaved_schedule (1F1B over chunks, round a ring), then pipeline_run.h.

Applied in gpt2.h: activation_set (k % sets, or interleaved_set_of); train_gpt.cu: train_step
(pipeline_schedule, the one place the schedule is chosen, then pipeline_run.h's run_schedule),
build_model (stage_buffers). Which layers each stage holds, the bubble's formulas and the simulator:
pipeline_sim.h.
*/
#pragma once
// defines: ScheduleKind, schedule_kind_from_name, PipelineOp, PipelineAction, take_lowest_free, add_chunk_action,
//          add_action, gpipe_schedule, one_f_one_b_schedule,
//          zb_h1_schedule, interleaved_order, interleaved_warmup, interleaved_schedule, interleaved_activation_sets,
//          interleaved_set_of, pipeline_schedule, pipeline_activation_sets, pipeline_backward_sets,
//          pipeline_weight_slots, StageBuffers, stage_buffers, is_compute
#include <string.h>    // defines: strcmp
#include <math.h>      // defines: INFINITY
#include <algorithm>   // defines: std::max, std::find
#include <utility>     // defines: std::pair
#include <functional>  // defines: std::function
#include <string>      // defines: std::string, std::to_string
#include <vector>      // defines: std::vector

enum ScheduleKind { SCHEDULE_1F1B, SCHEDULE_GPIPE, SCHEDULE_ZB, SCHEDULE_INTERLEAVED };
// "1f1b", "gpipe", "zb" (ZB-H1) or "interleaved" (1F1B over V chunks a stage); -1 for anything else
inline int schedule_kind_from_name(const char* name) {
    return strcmp(name, "1f1b") == 0 ? SCHEDULE_1F1B : strcmp(name, "gpipe") == 0 ? SCHEDULE_GPIPE
         : strcmp(name, "zb") == 0 ? SCHEDULE_ZB : strcmp(name, "interleaved") == 0 ? SCHEDULE_INTERLEAVED : -1;
}

enum PipelineOp {
    FORWARD, BACKWARD,                          // run micro-batch k through this stage
    RECV_ACTIVATION, SEND_ACTIVATION,           // from stage s-1, to stage s+1
    RECV_GRADIENT, SEND_GRADIENT,               // from stage s+1, to stage s-1
    SEND_ACTIVATION_RECV_GRADIENT,              // paired, with stage s+1: activation k out, gradient j in
    SEND_GRADIENT_RECV_ACTIVATION,              // paired, with stage s-1: gradient k out, activation j in
    BACKWARD_INPUT, BACKWARD_WEIGHT,            // k's backward in two (ZB-H1): B, the input gradient; W, the weights'
    SEND_ACTIVATION_RECV_ACTIVATION,            // paired, round the ring (interleaved): activation k to stage s+1,
    SEND_GRADIENT_RECV_GRADIENT,                // j from s-1; gradient k to s-1, j from s+1
    NUM_PIPELINE_OPS
};
// micro: the micro-batch k the action is about (for a paired one, whose message is sent);
// received_micro: a paired action's j, whose message comes in (-1 for the others); chunk and
// received_chunk: which of the stage's model chunks they belong to (interleaved 1F1B; else 0);
// slot: for a B and its W (ZB-H1), where k's output gradients wait between them (else -1)
struct PipelineAction { PipelineOp op; int micro, received_micro; int chunk = 0, received_chunk = 0, slot = -1; };

// the lowest of `busy`'s places that is free, taken (a new one when all are busy)
inline int take_lowest_free(std::vector<bool>* busy) {
    size_t free = std::find(busy->begin(), busy->end(), false) - busy->begin();
    if (free == busy->size()) busy->push_back(false);
    (*busy)[free] = true;
    return (int)free;
}

// appends an action of GPipe's or 1F1B's, left out when it faces a stage that does not exist:
// stage 0 receives no activation and sends no gradient, stage p-1 sends no activation and receives
// no gradient. (1F1B's paired actions face one neighbour, so each is kept or left out whole)
inline void add_action(std::vector<PipelineAction>* list, PipelineOp op, int k, int k2, int s, int p) {
    bool faces_previous = op == RECV_ACTIVATION || op == SEND_GRADIENT || op == SEND_GRADIENT_RECV_ACTIVATION;
    bool faces_next = op == SEND_ACTIVATION || op == RECV_GRADIENT || op == SEND_ACTIVATION_RECV_GRADIENT;
    if ((faces_previous && s == 0) || (faces_next && s == p - 1)) return;
    list->push_back(PipelineAction{op, k, k2});
}

// interleaved 1F1B's add_action, for chunk v (and v2 for what a paired action receives): the
// model's first virtual stage (stage 0's chunk 0) receives no activation and sends no gradient,
// its last (stage p-1's chunk V-1) sends no activation and receives no gradient. A paired action
// that loses one half is the other half alone (round the ring a pair faces both neighbours).
inline void add_chunk_action(std::vector<PipelineAction>* list, PipelineOp op, int k, int v, int k2, int v2, int s,
                             int p, int V) {
    auto missing = [&](PipelineOp half, int chunk) {  // a half with no neighbour on chunk `chunk`
        bool first = s == 0 && chunk == 0, last = s == p - 1 && chunk == V - 1;
        return ((half == RECV_ACTIVATION || half == SEND_GRADIENT) && first) ||
               ((half == SEND_ACTIVATION || half == RECV_GRADIENT) && last);
    };
    struct Halves { PipelineOp paired, out, in; };  // a paired action: what it sends (k, v), what it receives (k2, v2)
    static const Halves pairs[] = {{SEND_ACTIVATION_RECV_GRADIENT, SEND_ACTIVATION, RECV_GRADIENT},
                                   {SEND_GRADIENT_RECV_ACTIVATION, SEND_GRADIENT, RECV_ACTIVATION},
                                   {SEND_ACTIVATION_RECV_ACTIVATION, SEND_ACTIVATION, RECV_ACTIVATION},
                                   {SEND_GRADIENT_RECV_GRADIENT, SEND_GRADIENT, RECV_GRADIENT}};
    for (const Halves& h : pairs) {
        if (op != h.paired) continue;
        if (missing(h.out, v)) { add_chunk_action(list, h.in, k2, v2, -1, 0, s, p, V); return; }
        if (missing(h.in, v2)) { add_chunk_action(list, h.out, k, v, -1, 0, s, p, V); return; }
    }
    if (missing(op, v)) return;
    list->push_back(PipelineAction{op, k, k2, v, v2});
}

// GPipe: all forwards, then all backwards
inline std::vector<PipelineAction> gpipe_schedule(int s, int p, int m) {
    std::vector<PipelineAction> a;
    for (int k = 0; k < m; k++) {
        add_action(&a, RECV_ACTIVATION, k, -1, s, p);
        add_action(&a, FORWARD, k, -1, s, p);
        add_action(&a, SEND_ACTIVATION, k, -1, s, p);
    }
    for (int k = 0; k < m; k++) {
        add_action(&a, RECV_GRADIENT, k, -1, s, p);
        add_action(&a, BACKWARD, k, -1, s, p);
        add_action(&a, SEND_GRADIENT, k, -1, s, p);
    }
    return a;
}

// 1F1B (PipeDream-flush, as Megatron-LM runs it): warmup, steady, cooldown. Every stage's list is
// written alike; add_action leaves out what faces no stage (stage 0's activation receives and
// gradient sends, stage p-1's activation sends and gradient receives)
inline std::vector<PipelineAction> one_f_one_b_schedule(int s, int p, int m) {
    std::vector<PipelineAction> a;
    int warmup = p - s - 1 < m ? p - s - 1 : m, steady = m - warmup;
    // warmup: forwards only, as far ahead as the stages after this one are deep
    for (int k = 0; k < warmup; k++) {
        add_action(&a, RECV_ACTIVATION, k, -1, s, p);
        add_action(&a, FORWARD, k, -1, s, p);
        add_action(&a, SEND_ACTIVATION, k, -1, s, p);
    }
    // steady: forward warmup + j, then backward j. Each step's last action receives the next
    // forward's input along with sending a gradient (paired); the first forward's input has no
    // such action before it, so it is received here, on its own
    if (steady > 0) add_action(&a, RECV_ACTIVATION, warmup, -1, s, p);
    for (int j = 0; j < steady; j++) {
        int f = warmup + j;
        add_action(&a, FORWARD, f, -1, s, p);
        add_action(&a, SEND_ACTIVATION_RECV_GRADIENT, f, j, s, p);
        add_action(&a, BACKWARD, j, -1, s, p);
        if (j == steady - 1) add_action(&a, SEND_GRADIENT, j, -1, s, p);
        else add_action(&a, SEND_GRADIENT_RECV_ACTIVATION, j, f + 1, s, p);
    }
    // cooldown: the backwards of the warmup's micro-batches
    for (int k = steady; k < m; k++) {
        add_action(&a, RECV_GRADIENT, k, -1, s, p);
        add_action(&a, BACKWARD, k, -1, s, p);
        add_action(&a, SEND_GRADIENT, k, -1, s, p);
    }
    return a;
}

// ZB-H1: 1F1B's list with each backward split into B and W, stage s running its W's s backwards
// late (W k after B (k + s)), the last s at the end. A W goes before the paired send of B's
// gradient: that exchange waits for stage s-1 to finish its next forward, and W fills the wait;
// after a lone send (the cooldown), which nothing holds up. Stage 0's W would follow its B at once,
// so it keeps the whole backward, and 1F1B's memory. Each B takes the lowest free slot for its
// output gradients, which its W frees: both actions carry it
inline std::vector<PipelineAction> zb_h1_schedule(int s, int p, int m) {
    std::vector<PipelineAction> one_f_one_b = one_f_one_b_schedule(s, p, m), a;
    if (s == 0) return one_f_one_b;
    std::vector<int> slot(m, -1);  // micro-batch k's, from its B to its W
    std::vector<bool> busy;
    int weights = 0;  // W's listed
    auto weight = [&](int k) {
        busy[slot[k]] = false;
        return PipelineAction{BACKWARD_WEIGHT, k, -1, 0, 0, slot[k]};
    };
    for (PipelineAction action : one_f_one_b) {
        bool w_due = (action.op == SEND_GRADIENT || action.op == SEND_GRADIENT_RECV_ACTIVATION) && action.micro >= s;
        bool w_first = action.op == SEND_GRADIENT_RECV_ACTIVATION;
        if (action.op == BACKWARD) {
            action.op = BACKWARD_INPUT;
            action.slot = slot[action.micro] = take_lowest_free(&busy);
        }
        if (w_due && w_first) a.push_back(weight(weights++));
        a.push_back(action);
        if (w_due && !w_first) a.push_back(weight(weights++));
    }
    while (weights < m) a.push_back(weight(weights++));
    return a;
}

// Interleaved 1F1B (Megatron-LM's): stage s holds V chunks of layers, chunk v being virtual stage
// v*p + s of the p*V the model is cut into, so a micro-batch goes round the ring of stages V
// times. The stages run the micro-batches in groups of p: forward of a group on chunk 0, then on
// chunk 1, ... (the order below); backward in the same groups, chunks in reverse. The phases
// are 1F1B's, counted in chunk-forwards: warmup is how many a stage runs before the first
// gradient comes back, the round trip to the last stage and back, 2(p - s - 1), plus the
// (V - 1) p chunk-forwards that must come before it, at the least. With one chunk, 1F1B itself.
inline void interleaved_order(int i, int p, int V, bool backward, int* k, int* v) {
    int group = i / (p * V), in_group = i % (p * V);
    *v = backward ? V - 1 - in_group / p : in_group / p;
    *k = group * p + in_group % p;
}
// the chunk-forwards stage s runs before its first chunk-backward (above), at most all m V of them
inline int interleaved_warmup(int s, int p, int m, int V) { return std::min(2 * (p - s - 1) + (V - 1) * p, m * V); }
inline std::vector<PipelineAction> interleaved_schedule(int s, int p, int m, int V) {
    if (V == 1) return one_f_one_b_schedule(s, p, m);
    std::vector<PipelineAction> a;
    int total = m * V, warmup = interleaved_warmup(s, p, m, V), steady = total - warmup;
    // chunk-forward i's and chunk-backward i's (k, v); the add_* helpers leave out missing halves
    auto f = [&](int i) { int k, v; interleaved_order(i, p, V, false, &k, &v); return std::make_pair(k, v); };
    auto b = [&](int i) { int k, v; interleaved_order(i, p, V, true, &k, &v); return std::make_pair(k, v); };
    auto add = [&](PipelineOp op, std::pair<int, int> kv) {
        add_chunk_action(&a, op, kv.first, kv.second, -1, 0, s, p, V);
    };
    auto add_pair = [&](PipelineOp op, std::pair<int, int> out, std::pair<int, int> in) {
        add_chunk_action(&a, op, out.first, out.second, in.first, in.second, s, p, V);
    };
    // Every send is paired with the next receive in its direction of the ring (activations to
    // s+1, gradients to s-1), so that each exchange is a shift round the ring that all stages
    // post together: on a ring, unlike a line, lone blocking sends can close a cycle
    add(RECV_ACTIVATION, f(0));
    for (int i = 0; i < warmup; i++) {  // warmup: chunk-forwards only
        add(FORWARD, f(i));
        if (i + 1 < total) add_pair(SEND_ACTIVATION_RECV_ACTIVATION, f(i), f(i + 1));
        else add(SEND_ACTIVATION, f(i));
    }
    add(RECV_GRADIENT, b(0));
    // steady: one chunk-forward, one chunk-backward. The activation shift goes between them, so that
    // it travels while the backward computes (pipeline_links.h), and the gradient shift while the
    // next forward does: the forward after the backward needs only the activation, the backward
    // after that forward only the gradient (Megatron-LM's overlap_p2p_comm). Each stage's transfers
    // keep their order: activation shift, gradient shift, in turn
    for (int j = 0; j < steady; j++) {
        add(FORWARD, f(warmup + j));
        if (warmup + j + 1 < total) add_pair(SEND_ACTIVATION_RECV_ACTIVATION, f(warmup + j), f(warmup + j + 1));
        else add(SEND_ACTIVATION, f(warmup + j));
        add(BACKWARD, b(j));
        add_pair(SEND_GRADIENT_RECV_GRADIENT, b(j), b(j + 1));
    }
    for (int j = steady; j < total; j++) {  // cooldown: the remaining chunk-backwards
        add(BACKWARD, b(j));
        if (j + 1 < total) add_pair(SEND_GRADIENT_RECV_GRADIENT, b(j), b(j + 1));
        else add(SEND_GRADIENT, b(j));
    }
    return a;
}

// the one place the schedule is chosen. With one stage there is no pipeline: all are forward
// k, backward k in turn (1F1B with no warmup), holding one micro-batch.
inline std::vector<PipelineAction> pipeline_schedule(ScheduleKind kind, int s, int p, int m, int chunks = 1) {
    if (p == 1) return one_f_one_b_schedule(s, p, m);
    switch (kind) {
        case SCHEDULE_GPIPE: return gpipe_schedule(s, p, m);
        case SCHEDULE_ZB: return zb_h1_schedule(s, p, m);
        case SCHEDULE_INTERLEAVED: return interleaved_schedule(s, p, m, chunks);
        default: return one_f_one_b_schedule(s, p, m);
    }
}

// micro-batches whose activations stage s holds at once, from forward to the end of the backward
// (W included): micro-batch k uses set k % sets. ZB-H1 holds p on every stage: 1F1B's p - s until
// B, and s more whose W waits
inline int pipeline_activation_sets(ScheduleKind kind, int s, int p, int m) {
    if (p == 1) return 1;  // one stage: each backward follows its forward
    if (kind == SCHEDULE_GPIPE) return m;
    if (kind == SCHEDULE_ZB && s > 0) return p < m ? p : m;
    return p - s < m ? p - s : m;
}
// of those, the micro-batches between forward and B (the logits live only that long)
inline int pipeline_backward_sets(ScheduleKind kind, int s, int p, int m) {
    return pipeline_activation_sets(kind == SCHEDULE_ZB ? SCHEDULE_1F1B : kind, s, p, m);
}
// micro-batches whose B is done and W is not, at most: each keeps its layers' output gradients
// (0: W follows B at once, as in 1F1B and on ZB-H1's stage 0)
inline int pipeline_weight_slots(ScheduleKind kind, int s, int p, int m) {
    if (kind != SCHEDULE_ZB || p == 1 || s == 0) return 0;
    return s + 1 < m ? s + 1 : m;
}
// the chunk-forwards stage s holds at once under interleaved 1F1B: its warmup, one more, and in the
// steady phase (two or more chunk-backwards in it) the next forward's input, received while a
// backward still holds its set
inline int interleaved_activation_sets(int s, int p, int m, int V) {
    if (V == 1) return pipeline_activation_sets(SCHEDULE_1F1B, s, p, m);
    int warmup = interleaved_warmup(s, p, m, V), steady = m * V - warmup;
    return std::min(warmup + 1 + (steady > 1 ? 1 : 0), m * V);
}
// which of those sets chunk v's micro-batch k uses, at index v*m + k: the lowest one free when its
// input arrives (or at its forward, on the model's first chunk), free again after its backward,
// walking the list. (k % sets, as the other schedules do, would not do: the chunks take turns, so
// the micro-batches do not leave in the order they came; sets per chunk would hold more, 12 for
// stage 1 at p 4, m 8, V 2 where 9 are ever busy)
inline std::vector<int> interleaved_set_of(int s, int p, int m, int V) {
    std::vector<int> set_of(m * V, -1);
    std::vector<bool> busy;
    for (const PipelineAction& a : interleaved_schedule(s, p, m, V)) {
        int id = a.chunk * m + a.micro;
        bool receives = a.op == RECV_ACTIVATION || a.op == SEND_ACTIVATION_RECV_ACTIVATION ||
                        a.op == SEND_GRADIENT_RECV_ACTIVATION;  // its input, before its forward
        int arriving = a.op == RECV_ACTIVATION ? id : a.received_chunk * m + a.received_micro;
        if (receives && set_of[arriving] < 0) set_of[arriving] = take_lowest_free(&busy);
        if (a.op == FORWARD && set_of[id] < 0) set_of[id] = take_lowest_free(&busy);
        if (a.op == BACKWARD) busy[set_of[id]] = false;
    }
    return set_of;
}
// the three, for the trainer to allocate, and under interleaved 1F1B the set of each chunk's
// micro-batch (set_of; empty otherwise: micro-batch k uses set k % activation_sets). The head's
// tensors (its chunk's micro-batches, in order) use set k % head_sets under every schedule
struct StageBuffers { int activation_sets, head_sets, weight_slots; std::vector<int> set_of; };
inline StageBuffers stage_buffers(ScheduleKind kind, int s, int p, int m, int V = 1) {
    if (kind == SCHEDULE_INTERLEAVED && p > 1 && V > 1) {
        // the head's chunk (the last stage's last) runs each forward's backward right after it: one set
        return StageBuffers{interleaved_activation_sets(s, p, m, V), 1, 0, interleaved_set_of(s, p, m, V)};
    }
    return StageBuffers{pipeline_activation_sets(kind, s, p, m), pipeline_backward_sets(kind, s, p, m),
                        pipeline_weight_slots(kind, s, p, m), {}};
}

// the actions that compute (the others send and receive)
inline bool is_compute(PipelineOp op) {
    return op == FORWARD || op == BACKWARD || op == BACKWARD_INPUT || op == BACKWARD_WEIGHT;
}

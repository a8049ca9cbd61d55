/*
comm_time.h: the time ledger of a step's data-parallel communication, and what overlap leaves of it
on the critical path (-plan 1 -gpu H100 -nodes N): beside ledger.h's kernels, where a step's time
goes on dp GPUs, read without them.

Links, per GPU and direction, as NCCL's ring moves bytes over them (its "bus bandwidth", the rate
of the bytes one rank sends; the ring is the algorithm process_grid.h pins):
    NVLink 4 (H100, H200 SXM)   370 GB/s   the line rate, 450 GB/s (datasheets: 900 both ways), less
                                           the ~20% NCCL's protocol takes: "NCCL can get an effective
                                           NVLink bandwidth of 370GB/s" with NCCL_ALGO=RING (NVIDIA,
                                           nccl-tests issue 212; nccl issue 1455 measured 365-370)
    NVLink 3 (A100 SXM)         240 GB/s   the line rate, 300 GB/s, less the same 20% (assumed)
    InfiniBand NDR              47 GB/s    a 400 Gb/s adapter: "46-48GB/s per NIC" (NVIDIA, nccl-tests
                                           issue 290), one adapter per GPU (DGX H100: 8 ConnectX-7)
A collective's time, ring algorithm, is a latency and the bytes one rank sends (comm.h's ring_bytes:
all-reduce 2 S (p-1)/p, reduce-scatter and all-gather S (p-1)/p) at the ring's bandwidth:
    t = alpha + ring_bytes / bandwidth,   alpha = 10 us within a node, 20 us across
(alpha is an assumption of the order of NCCL's small-message latency, not a datasheet's number).
Over N > 1 nodes NCCL runs a ring per adapter (its channels), each crossing between the nodes on its
own adapter with its slice of the bytes, so a node's g adapters (g: its GPUs) together carry what one
rank sends, and the ring's bandwidth is min(NVLink's, g x 47 GB/s) ("the busbw is going to reflect
exactly what's going through the NICs", NVIDIA, nccl-tests issue 160; DGX A100, 8 x 200 Gb/s: 192
GB/s measured, nccl issue 812). With 8 GPUs and 8 adapters a node the network keeps up with NVLink
(376 GB/s); with 2 GPUs a node it is 94 GB/s. (This ledger's first model sent the whole ring
through one adapter, 50 GB/s: 8x too slow.)

What the step sends over its replica group (zero.h's formulas, unit by unit as zero_reduce_step_unit does)
and when it can start. The backward ends the units in this order: the head's (the final LayerNorm,
after the logits' backward), the layers from the last to the first, the embeddings' (wte also takes
the logits' gradient, so it is complete only after the embedding's backward, the last). With overlap
(overlap.h, under ZeRO 0-1 in the last micro-step), unit u's reduction becomes ready when its
backward ends, and the comm stream runs them in turn:
    start_u = max(ready_u, end_(u-1)),   end_u = start_u + t_u,
    exposed = max(0, end_(last) - end of the backward)
Without it every reduction waits for the backward: all exposed. Exposed either way: the loss and norm
scalars (the host waits for them). ZeRO 1-2 all-gather the updated parameters after AdamW, a unit
each: without overlap exposed; with it the embeddings' beside AdamW on the other units and the rest
beside the next step's forward, each waited for before its unit runs (updated_gathers_ms).
ZeRO 2-3 reduce-scatter every unit in every micro-step, and ZeRO-3 also gathers each unit before it
is used (the layers before their forward and again before their backward; the embeddings and final
LayerNorm once a step, after AdamW: zero.h's zero_gather_after_update). sharded_micro_step plays overlap.h's
two streams against each other, as zero.h issues the work: a collective starts on the comm stream
once the default stream's work issued before it is done and the collective before it on the comm
stream has ended; the default stream waits for a gather before the unit runs, for the reduction
before the one it starts (one in flight) and for all before the next micro-step's backward (the
last units' reductions run beside the next forward) and at the step's end. The step's first
micro-step, time 0 where the step before's AdamW ended:
    comm    |    g E     | g H | g L1 |  g L2 |  g L3 ...          | r H | g L(L-1) ... r L ... r E |
    default | AdamW rest | wait| emb  | L1     | L2     ... head fwd, bwd | L ...             emb | wait
exposed = the default stream's end - its compute; the gathers' share, what it waited for them: of
the embeddings' gather, what outlasts AdamW on the other units (t_E - t_AdamW_rest, if positive:
nothing else runs before the embeddings' forward).
The compute's times are ledger.h's, calibrated by what the last GPU run measured of each
kernel class (ledger_calibrated_ms); the reduction of the embeddings' unit, the last and largest,
cannot hide behind anything, so it bounds what overlap can reach.
Applied in accounting.h (print_plans).
*/
#pragma once
// defines: LinkSpec, link_spec, CommTime, comm_time, print_comm_time, collective_ms, comm_time_after_step,
//          updated_gathers_ms,
//          MicroStepTimes, sharded_micro_step, micro_step_times, comm_time_sharded, StreamClocks
#include <stdio.h>   // defines: printf
#include <string.h>  // defines: strcmp
#include <algorithm> // defines: std::max
#include <string>    // defines: std::string
#include <vector>    // defines: std::vector
#include "ledger.h"  // defines: LedgerModel, GpuSpec, head_backward_ledger, block_backward_ledger, ledger_calibrated_ms
#include "comm.h"    // defines: ring_bytes

struct LinkSpec { const char* name; double bandwidth, latency; const char* source; };  // bytes/s per direction, s
// the bandwidth of NCCL's ring over `nodes` nodes of `gpus_per_node` GPUs each (above)
inline LinkSpec link_spec(const GpuSpec& gpu, int nodes, int gpus_per_node) {
    LinkSpec nvlink = strcmp(gpu.name, "A100") == 0
        ? LinkSpec{"NVLink 3", 240e9, 10e-6, "A100: 300 GB/s line rate less NCCL's ~20% (assumed as on H100)"}
        : LinkSpec{"NVLink 4", 370e9, 10e-6, "NCCL's ring: 450 GB/s line rate less ~20% (nccl-tests issue 212)"};
    if (nodes == 1) return nvlink;
    double network = gpus_per_node * 47e9;
    return {"InfiniBand NDR, an adapter a GPU", std::min(nvlink.bandwidth, network), 20e-6,
            network < nvlink.bandwidth ? "47 GB/s an adapter (nccl-tests issue 290), the node's rings on all of them"
                                       : "the node's adapters keep up with NVLink: NVLink's"};
}
inline double collective_ms(unsigned long long bytes_sent, const LinkSpec& link) {
    return 1e3 * (link.latency + bytes_sent / link.bandwidth);
}

// a step's DP communication: every collective, the sum, and what overlap leaves exposed
struct CommTime {
    int dp, nodes;
    LinkSpec link;
    double comm_ms, exposed_ms, backward_ms;
    int collectives;
    double gather_ms = 0, gather_exposed_ms = 0;  // ZeRO 1-3's gathers: all, and what the default stream waited
};

// ZeRO 2-3, one micro-step as overlap.h and zero.h run it, the default stream (D) and the comm stream (C)
// played against each other, in ms: compute the six pieces' times, gather and reduce each unit's (units
// in zero.h's order: embeddings, layers, head)
struct MicroStepTimes {
    double f_embed, f_layer, f_head, b_head, b_layer, b_embed;
    std::vector<double> unit;  // a unit's reduce-scatter, or its gather: both ring_bytes of its floatX elements
    double adamw_rest;         // ZeRO 1-3: AdamW on the shard's units but the embeddings (after theirs)
};
// the compute pieces of a micro-step, calibrated by the last GPU run (ledger.h), and each unit's
// gather over dp ranks on `link` (unit_elements: padded, in unit order)
inline MicroStepTimes micro_step_times(const LedgerModel& m, const GpuSpec& gpu,
                                       const std::vector<size_t>& unit_elements, int dp, const LinkSpec& link) {
    MicroStepTimes t;
    Ledger l[6];
    encoder_forward_ledger(&l[0], m.B, m.T, m.C);
    block_forward_ledger(&l[1], m);
    layernorm_forward_ledger(&l[2], m.B * m.T, m.C);  // the head's forward and loss (train_gpt.cu: head_forward)
    matmul_forward_ledger(&l[2], m.B * m.T, m.C, m.Vp, false);
    crossentropy_forward_backward_ledger(&l[2], m.B * m.T, m.Vp, true);
    head_backward_ledger(&l[3], m);
    block_backward_ledger(&l[4], m);
    embed_backward_ledger(&l[5], m);
    double* pieces[] = {&t.f_embed, &t.f_layer, &t.f_head, &t.b_head, &t.b_layer, &t.b_embed};
    for (int i = 0; i < 6; i++) *pieces[i] = ledger_calibrated_ms(l[i], gpu);
    size_t shard_rest = 0;  // this rank's shard of every unit but the embeddings
    for (size_t e : unit_elements) t.unit.push_back(collective_ms(ring_bytes(sizeof(floatX) * e, dp), link));
    for (size_t u = 1; u < unit_elements.size(); u++) shard_rest += unit_elements[u] / dp;
    Ledger adamw;
    adamw_update_slices_ledger(&adamw, shard_rest, m.grads_fp32 ? 4 : sizeof(floatX), m.master);
    t.adamw_rest = ledger_calibrated_ms(adamw, gpu);
    return t;
}

// ZeRO 1-2's all-gathers of the updated parameters, a unit each (zero.h: zero_gather_after_update).
// Returns their time; *waited: what the default stream waits for them. Without overlap, all of it;
// with it, time 0 where the embeddings' update ends, the embeddings' gather beside the rest of AdamW,
// the others posted after it, and each unit's waited for before its forward in the next step:
//     comm    |   g E      | g L1 | g L2 | ... | g H |
//     default | AdamW rest | wait | emb  | L1  | L2 ... | head
inline double updated_gathers_ms(const MicroStepTimes& t, bool overlap, double* waited) {
    double all = 0;
    for (double ms : t.unit) all += ms;
    *waited = all;
    if (!overlap) return all;
    int H = (int)t.unit.size() - 1;
    double D = t.adamw_rest, C = t.unit[0];
    *waited = 0;
    auto wait = [&](double end) { if (end > D) *waited += end - D, D = end; };
    wait(C);  // the embeddings'
    C = std::max(C, t.adamw_rest);  // the others: posted once AdamW has ended
    D += t.f_embed;
    for (int u = 1; u <= H; u++) {
        C += t.unit[u];
        wait(C);
        D += u < H ? t.f_layer : 0;
    }
    return all;
}

// what follows the micro-steps: the loss and the squared norm (the host waits for them: exposed
// whatever the overlap), and at stages 1-2 the updated parameters' gathers
inline void comm_time_after_step(CommTime* c, const MicroStepTimes& t, int stage, bool overlap) {
    double after = 2 * collective_ms(ring_bytes(8, c->dp), c->link);
    c->collectives += 2;
    c->comm_ms += after, c->exposed_ms += after;
    if (stage != 1 && stage != 2) return;
    c->gather_ms = updated_gathers_ms(t, overlap, &c->gather_exposed_ms);
    c->collectives += (int)t.unit.size();
    c->comm_ms += c->gather_ms, c->exposed_ms += c->gather_exposed_ms;
}

// unit_elements: each unit's elements as reduced (padded), in unit order (embeddings, layers, head);
// stage 0 or 1; grad_bytes: G, the reduced gradient's element; overlap: overlap.h applies
inline CommTime comm_time(const LedgerModel& m, const GpuSpec& gpu, const std::vector<size_t>& unit_elements, int stage,
                          size_t grad_bytes, bool overlap, int dp, int nodes) {
    CommTime c = {dp, nodes, link_spec(gpu, nodes, dp / nodes), 0, 0, 0, 0};
    int U = (int)unit_elements.size();
    auto reduce_ms = [&](size_t elements) {
        unsigned long long s = ring_bytes(grad_bytes * elements, dp);
        c.collectives++;
        return collective_ms(stage == 0 ? 2 * s : s, c.link);
    };
    Ledger head, layer, embed;
    head_backward_ledger(&head, m);
    block_backward_ledger(&layer, m);
    embed_backward_ledger(&embed, m);
    double t_head = ledger_calibrated_ms(head, gpu), t_layer = ledger_calibrated_ms(layer, gpu);
    c.backward_ms = t_head + m.L * t_layer + ledger_calibrated_ms(embed, gpu);
    // the units in the order their backward ends: the head, the layers last to first, the embeddings
    std::vector<double> ready, cost;
    ready.push_back(t_head), cost.push_back(reduce_ms(unit_elements[U - 1]));
    for (int u = U - 2; u >= 1; u--)
        ready.push_back(t_head + (U - 1 - u) * t_layer), cost.push_back(reduce_ms(unit_elements[u]));
    ready.push_back(c.backward_ms), cost.push_back(reduce_ms(unit_elements[0]));
    double end = 0;  // the comm stream's: each reduction starts when ready (overlap) or after the backward
    for (size_t i = 0; i < ready.size(); i++) {
        end = std::max(overlap ? ready[i] : c.backward_ms, end) + cost[i];
        c.comm_ms += cost[i];
    }
    c.exposed_ms = std::max(0.0, end - c.backward_ms);
    comm_time_after_step(&c, micro_step_times(m, gpu, unit_elements, dp, c.link), stage, overlap);
    return c;
}

// the two streams' clocks through a step (ms from the step's start): the default stream's (D), the
// comm stream's (C), and the end of the last reduction started (what overlap_finish waits for)
struct StreamClocks { double D = 0, C = 0, previous_reduce = 0; };
// ZeRO 2-3's micro-step, played on from `s`; *gathers_waited: how long the default stream waited for
// ZeRO-3's gathers (at -overlap 0 every collective is waited for at once). first: the step's first
// micro-step, which waits for the ends' gathers of the step before's AdamW. The micro-step's last
// reductions are left running: the next backward waits for them (zero_begin_micro_step), and the
// step's end (zero_reduce_step)
inline void sharded_micro_step(const MicroStepTimes& t, int stage, bool overlap, bool first, StreamClocks* s,
                               double* gathers_waited) {
    int H = (int)t.unit.size() - 1;  // the head's unit; layers 1..H-1
    double &D = s->D, &C = s->C, head_ready = 0;
    auto wait = [&](double end, double* waited) { if (end > D) { if (waited) *waited += end - D; D = end; } };
    auto post = [&](double ms, double* waited) {  // once the default stream's work so far is done
        C = std::max(C, D) + ms;
        if (!overlap) wait(C, waited);
        return C;
    };
    auto reduce = [&](int u) {  // overlap_start's one in flight: the default stream waits for the one before
        double end = post(t.unit[u], nullptr);
        wait(s->previous_reduce, nullptr);
        s->previous_reduce = end;
    };
    if (stage == 3 && first && overlap) {  // zero_gather_after_update: the embeddings' beside the rest of AdamW
        C = t.unit[0] - t.adamw_rest;
        wait(C, gathers_waited);
        head_ready = C = std::max(C, 0.0) + t.unit[H];  // then the final LayerNorm's, once AdamW has ended
    } else if (stage == 3 && first) {  // the two waited for at once
        for (int u : {0, H}) wait(post(t.unit[u], gathers_waited), gathers_waited);
    }
    double ready = stage == 3 ? post(t.unit[1], gathers_waited) : 0;  // the first layer: beside the embeddings
    D += t.f_embed;
    for (int u = 1; u < H; u++) {
        wait(ready, gathers_waited);
        if (stage == 3 && u + 1 < H) ready = post(t.unit[u + 1], gathers_waited);  // beside this layer
        D += t.f_layer;
    }
    wait(head_ready, gathers_waited);
    D += t.f_head;
    wait(s->previous_reduce, nullptr);  // zero_begin_micro_step: the micro-step before's reductions done
    ready = stage == 3 ? post(t.unit[H - 1], gathers_waited) : 0;  // the last layer: beside the head's backward
    D += t.b_head;
    reduce(H);
    for (int u = H - 1; u >= 1; u--) {
        wait(ready, gathers_waited);
        if (stage == 3 && u > 1) ready = post(t.unit[u - 1], gathers_waited);
        D += t.b_layer;
        reduce(u);
    }
    D += t.b_embed;
    reduce(0);
}
// the step at ZeRO 2-3: grad_accum such micro-steps, each unit reduce-scattered, and under ZeRO-3 gathered
// where a micro-step uses it (the layers twice; the embeddings and head once a step, after AdamW), both in
// floatX: a unit's gradient is reduced as the micro-step made it, whatever -ga sums the shard in (zero.h:
// zero_reduce_unit)
inline CommTime comm_time_sharded(const LedgerModel& m, const GpuSpec& gpu, const std::vector<size_t>& unit_elements,
                                  int stage, bool overlap, int dp, int nodes) {
    CommTime c = {dp, nodes, link_spec(gpu, nodes, dp / nodes), 0, 0, 0, 0};
    MicroStepTimes t = micro_step_times(m, gpu, unit_elements, dp, c.link);
    double reduces = 0;
    for (double ms : t.unit) reduces += ms;
    double ends = t.unit.front() + t.unit.back(), layers = reduces - ends;
    double gathers = stage == 3 ? ends + 2 * m.grad_accum * layers : 0;  // a step's: the ends once, layers twice
    int U = (int)unit_elements.size();
    c.collectives = m.grad_accum * U + (stage == 3 ? 2 + m.grad_accum * 2 * (U - 2) : 0);
    double compute = t.f_embed + m.L * (t.f_layer + t.b_layer) + t.f_head + t.b_head + t.b_embed, waited = 0;
    StreamClocks clocks;
    for (int k = 0; k < m.grad_accum; k++)  // after the first micro-step the ends stay gathered
        sharded_micro_step(t, stage, overlap, k == 0, &clocks, &waited);
    double end = std::max(clocks.D, clocks.C);  // zero_reduce_step: every reduction complete
    c.backward_ms = t.b_head + m.L * t.b_layer + t.b_embed;
    c.comm_ms = m.grad_accum * reduces + gathers, c.exposed_ms = end - m.grad_accum * compute;
    c.gather_ms = gathers, c.gather_exposed_ms = waited;
    comm_time_after_step(&c, t, stage, overlap);  // (stage 2: its gathers wait in the forward, before its reductions)
    return c;
}

// its line, and the JSON object the roofline carries ("comm")
inline std::string print_comm_time(const CommTime& c) {
    printf("communication of a step over dp %d on %d node%s (%s, %.0f GB/s a direction: %s; %.0f us a collective): "
           "%d collectives, %.3f ms; %.3f ms exposed (the last micro-step's backward: %.2f ms calibrated)\n",
           c.dp, c.nodes, c.nodes > 1 ? "s" : "", c.link.name, c.link.bandwidth / 1e9, c.link.source,
           c.link.latency * 1e6, c.collectives, c.comm_ms, c.exposed_ms, c.backward_ms);
    if (c.gather_ms > 0)
        printf("  of which the parameters' gathers: %.3f ms, %.3f ms exposed (%.0f%%: what of the embeddings' "
               "outlasts AdamW on the other units)\n",
               c.gather_ms, c.gather_exposed_ms, 100 * c.gather_exposed_ms / c.gather_ms);
    char json[640];
    snprintf(json, sizeof(json),
             "{\"dp\": %d, \"nodes\": %d, \"link\": \"%s\", \"link_bytes_per_s\": %.4g, \"collectives\": %d, "
             "\"comm_ms\": %.4f, \"comm_exposed_ms\": %.4f, \"backward_ms\": %.4f, \"gather_ms\": %.4f, "
             "\"gather_exposed_ms\": %.4f}",
             c.dp, c.nodes, c.link.name, c.link.bandwidth, c.collectives, c.comm_ms, c.exposed_ms, c.backward_ms,
             c.gather_ms, c.gather_exposed_ms);
    return json;
}

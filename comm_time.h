/*
comm_time.h: the time ledger of a step's data-parallel communication, and what overlap leaves of it
on the critical path (-plan 1 -gpu H100 -nodes N): beside ledger.h's kernels, where a step's time
goes on dp GPUs, read without them.

Links, per GPU and direction:
    NVLink 4 (H100, H200 SXM)   450 GB/s   NVIDIA H100/H200 datasheets: 900 GB/s, both directions
    NVLink 3 (A100 SXM)         300 GB/s   NVIDIA A100 datasheet: 600 GB/s, both directions
    InfiniBand NDR              50 GB/s    400 Gb/s, one adapter per GPU (DGX H100: 8 ConnectX-7)
A collective's time, ring algorithm (NCCL's for large messages), is a latency and the bytes one rank
sends (comm.h's ring_bytes: all-reduce 2 S (p-1)/p, reduce-scatter and all-gather S (p-1)/p) over the
slowest link of the ring: NVLink within one node; over N > 1 nodes the ring leaves every node through
the network, so InfiniBand:
    t = alpha + ring_bytes / bandwidth,   alpha = 10 us within a node, 20 us across
(alpha is an assumption of the order of NCCL's small-message latency, not a datasheet's number).

What the step sends over its DP group (zero.h's formulas, unit by unit as zero_reduce_step_unit does)
and when it can start. The backward ends the units in this order: the head's (the final LayerNorm,
after the logits' backward), the layers from the last to the first, the embeddings' (wte also takes
the logits' gradient, so it is complete only after the embedding's backward, the last). With overlap
(overlap.h, under ZeRO 0-1 in the last micro-step), unit u's reduction becomes ready when its
backward ends, and the comm stream runs them in turn:
    start_u = max(ready_u, end_(u-1)),   end_u = start_u + t_u,
    exposed = max(0, end_(last) - end of the backward)
Without it every reduction waits for the backward: all exposed. Exposed either way: ZeRO-1's
all-gather of the updated parameters after AdamW, and the loss and norm scalars (the host waits for
them). The backward's times are ledger.h's, calibrated by what the last GPU run measured of each
kernel class (ledger_calibrated_ms); the reduction of the embeddings' unit, the last and largest,
cannot hide behind anything, so it bounds what overlap can reach.
Applied in accounting.h (print_plans).
*/
#pragma once
// defines: LinkSpec, link_spec, CommTime, comm_time, print_comm_time, collective_ms
#include <stdio.h>   // defines: printf
#include <string.h>  // defines: strcmp
#include <algorithm> // defines: std::max
#include <string>    // defines: std::string
#include <vector>    // defines: std::vector
#include "ledger.h"  // defines: LedgerModel, GpuSpec, head_backward_ledger, block_backward_ledger, ledger_calibrated_ms
#include "comm.h"    // defines: ring_bytes

struct LinkSpec { const char* name; double bandwidth, latency; const char* source; };  // bytes/s per direction, s
// the link a ring over `nodes` nodes of `gpu` is limited by
inline LinkSpec link_spec(const GpuSpec& gpu, int nodes) {
    if (nodes > 1) return {"InfiniBand NDR", 50e9, 20e-6, "400 Gb/s, one adapter per GPU (DGX H100: 8 ConnectX-7)"};
    if (strcmp(gpu.name, "A100") == 0) return {"NVLink 3", 300e9, 10e-6, "NVIDIA A100 datasheet: 600 GB/s both ways"};
    return {"NVLink 4", 450e9, 10e-6, "NVIDIA H100/H200 datasheets: 900 GB/s both ways"};
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
};

// unit_elements: each unit's elements as reduced (padded), in unit order (embeddings, layers, head);
// stage 0 or 1; grad_bytes: G, the reduced gradient's element; overlap: overlap.h applies
inline CommTime comm_time(const LedgerModel& m, const GpuSpec& gpu, const std::vector<size_t>& unit_elements, int stage,
                          size_t grad_bytes, bool overlap, int dp, int nodes) {
    CommTime c = {dp, nodes, link_spec(gpu, nodes), 0, 0, 0, 0};
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
    size_t all = 0;
    for (size_t e : unit_elements) all += e;
    double after = 2 * collective_ms(ring_bytes(8, dp), c.link);  // the loss and the squared norm
    if (stage == 1)  // the updated parameters
        after += collective_ms(ring_bytes(sizeof(floatX) * all, dp), c.link), c.collectives++;
    c.collectives += 2;
    c.comm_ms += after, c.exposed_ms += after;
    return c;
}

// its line, and the JSON object the roofline carries ("comm")
inline std::string print_comm_time(const CommTime& c) {
    printf("communication of a step over dp %d on %d node%s (%s, %.0f GB/s a direction: %s; %.0f us a collective): "
           "%d collectives, %.3f ms; %.3f ms exposed (the last micro-step's backward: %.2f ms calibrated)\n",
           c.dp, c.nodes, c.nodes > 1 ? "s" : "", c.link.name, c.link.bandwidth / 1e9, c.link.source,
           c.link.latency * 1e6, c.collectives, c.comm_ms, c.exposed_ms, c.backward_ms);
    char json[512];
    snprintf(json, sizeof(json),
             "{\"dp\": %d, \"nodes\": %d, \"link\": \"%s\", \"link_bytes_per_s\": %.4g, \"collectives\": %d, "
             "\"comm_ms\": %.4f, \"comm_exposed_ms\": %.4f, \"backward_ms\": %.4f}",
             c.dp, c.nodes, c.link.name, c.link.bandwidth, c.collectives, c.comm_ms, c.exposed_ms, c.backward_ms);
    return json;
}

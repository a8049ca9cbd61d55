/*
pipeline_sim.h: which layers each pipeline stage holds, and pipeline.h's schedules played without
a model: the bubble each one leaves, by formula and by simulation, and the split of the layers
that makes the stages even.

The split: distribute_layers cuts L layers evenly (the first L % p stages one more), -pl names
one (stage_layer_counts), balanced_stage_layers finds the even one by cost (below).

The bubble of equal stages (each stage idles p - 1 forward and p - 1 backward slots a step):

    GPipe, 1F1B:        (p - 1) / (m + p - 1)                      pipeline_bubble_fraction
    ZB-H1 (m >= p):     (p - 1) max(F + B - W, F, B, W) idle        zb_h1_bubble_fraction
                        beside m (F + B + W) of work
    interleaved, V:     (p - 1) / (V m + p - 1)                     interleaved_bubble_fraction

The formula assumes equal stages. GPT-2's are not: the last stage also runs the LM head,
2*B*T*C*Vp FLOPs a forward, 4.5 layers' worth in GPT-2 124M at T = 1024, and the other
stages wait on it every slot. pipeline_simulate plays the lists against each other with
a cost per stage and action and returns each stage's idle time whatever the costs;
balanced_stage_layers finds the split whose largest stage costs least (-pl applies it,
-plan suggests it). With equal costs the simulator gives back the formula above, which
tests/test_pipeline.cpp checks for p 1..8, m 1..16.

The simulator: each stage walks its list; a compute action takes its cost, a message half
(pipeline_messages: which micro-batch, to or from which stage, across which cut) waits until
its peer has posted the matching half; a stage is idle while it waits. Every list completing is
the proof that no schedule deadlocks (pass_messages pairs the halves as the executor's blocking
sends would).

Applied in gpt2_config.h: stage_layout (stage_layer_range, the split; the chunks of distribute_layers
over p*V under interleaving); gpt2.h: gpt2_build (stage_layer_counts, -pl); accounting.h:
bubble_json and print_stage_balance (pipeline_simulate, balanced_stage_layers); run_report.h:
print_run_header (the formulas).
*/
#pragma once
// defines: distribute_layers, stage_layer_counts, stage_layer_range, interleaved_bubble_fraction,
//          pipeline_bubble_fraction, zb_h1_bubble_fraction, PipelineMessage,
//          pipeline_messages, PipelineSimulation, pass_messages, pipeline_simulate_lists, pipeline_simulate,
//          schedule_bubble_formula, balanced_stage_layers
#include <stdlib.h>      // defines: strtol
#include <math.h>        // defines: INFINITY
#include <algorithm>     // defines: std::max
#include <functional>    // defines: std::function
#include <string>        // defines: std::string, std::to_string
#include <vector>        // defines: std::vector
#include "pipeline.h"    // defines: PipelineAction, PipelineOp, ScheduleKind, pipeline_schedule, is_compute

// layers [begin, end) of stage s of p: contiguous, L/p each, the first L % p stages one more
inline void distribute_layers(int L, int p, int s, int* begin, int* end) {
    int base = L / p, extra = L % p;
    *begin = s * base + (s < extra ? s : extra);
    *end = *begin + base + (s < extra ? 1 : 0);
}

// the layers of each of p stages: distribute_layers' split, or `custom` (-pl "1,3,3,1"), which
// must list p counts of at least 1 summing to L. Why a custom split: GPT-2's last stage also
// runs the LM head, a (Vp, C) matrix as heavy as several layers, so an even split leaves
// every other stage waiting on it (Megatron-LM's --decoder-last-pipeline-num-layers).
// Returns an empty list, with the reason in *error, when custom is not such a list.
inline std::vector<int> stage_layer_counts(int L, int p, const char* custom, std::string* error) {
    std::vector<int> counts;
    if (!custom) {
        for (int s = 0, b, e; s < p; s++) { distribute_layers(L, p, s, &b, &e); counts.push_back(e - b); }
        return counts;
    }
    int sum = 0;
    for (const char* c = custom; *c;) {
        char* end;
        long n = strtol(c, &end, 10);
        if (end == c || n < 1 || n > L || (*end != ',' && *end != '\0')) {
            *error = "expects positive layer counts separated by commas, such as 1,3,3,1";
            return {};
        }
        counts.push_back((int)n);
        sum += (int)n;
        c = *end == ',' ? end + 1 : end;
        if (*end == ',' && *c == '\0') { *error = "ends with a comma"; return {}; }
    }
    if ((int)counts.size() != p || sum != L) {
        *error = "lists " + std::to_string(counts.size()) + " stages and " + std::to_string(sum) +
                 " layers; the run has " + std::to_string(p) + " stages (-pp) and the model " + std::to_string(L) +
                 " layers";
        return {};
    }
    return counts;
}

// layers [begin, end) of stage s, under a split from stage_layer_counts
inline void stage_layer_range(const std::vector<int>& counts, int s, int* begin, int* end) {
    *begin = 0;
    for (int q = 0; q < s; q++) *begin += counts[q];
    *end = *begin + counts[s];
}

// interleaved 1F1B's: the same p - 1 idle slots, each 1/V as long (a chunk's forward and
// backward): (p - 1)/V of the m forward-backward pairs, (p - 1)/(V m + p - 1) of the step
inline double interleaved_bubble_fraction(int p, int m, int V) { return (double)(p - 1) / (V * m + p - 1); }

// the idle fraction of a step with equal forward and backward times on every stage (GPipe, 1F1B)
inline double pipeline_bubble_fraction(int p, int m) { return (double)(p - 1) / (m + p - 1); }
// ZB-H1's, for m >= p, with forward, B and W times F, B, W on every stage: each stage idles
// (p - 1)(F + B - W) beside its m(F + B + W) of work when W is the shortest of the three (the
// paper's case), and in general (p - 1) max(F + B - W, F, B, W); (p - 1)/(3m + p - 1) when all
// are equal. tests/test_pipeline.cpp checks it against pipeline_simulate.
inline double zb_h1_bubble_fraction(int p, int m, double F, double B, double W) {
    double idle = (p - 1) * std::max({F + B - W, F, B, W});
    return idle / (m * (F + B + W) + idle);
}

// ---------------------------------------------------------------- simulating a schedule

// one half of a send or receive action: activation or gradient k, to or from stage `peer`, across
// `boundary`, the cut between virtual stages boundary and boundary + 1 (virtual stage v*p + s is
// chunk v of stage s; without interleaving the cut between stages s and s+1). Activations go to
// the next stage and gradients to the one before, round a ring: stage p-1's chunk v feeds stage
// 0's chunk v+1.
struct PipelineMessage { bool send, activation; int micro, peer, boundary; };
inline std::vector<PipelineMessage> pipeline_messages(const PipelineAction& a, int s, int p) {
    int next = (s + 1) % p, previous = (s + p - 1) % p;
    int below = a.chunk * p + s - 1, above = a.chunk * p + s;  // the cuts before and after a.chunk
    int received_below = a.received_chunk * p + s - 1, received_above = a.received_chunk * p + s;
    switch (a.op) {
        case RECV_ACTIVATION: return {{false, true, a.micro, previous, below}};
        case SEND_ACTIVATION: return {{true, true, a.micro, next, above}};
        case RECV_GRADIENT: return {{false, false, a.micro, next, above}};
        case SEND_GRADIENT: return {{true, false, a.micro, previous, below}};
        case SEND_ACTIVATION_RECV_GRADIENT:
            return {{true, true, a.micro, next, above}, {false, false, a.received_micro, next, received_above}};
        case SEND_GRADIENT_RECV_ACTIVATION:
            return {{true, false, a.micro, previous, below}, {false, true, a.received_micro, previous, received_below}};
        case SEND_ACTIVATION_RECV_ACTIVATION:
            return {{true, true, a.micro, next, above}, {false, true, a.received_micro, previous, received_below}};
        case SEND_GRADIENT_RECV_GRADIENT:
            return {{true, false, a.micro, previous, below}, {false, false, a.received_micro, next, received_above}};
        default: return {};
    }
}

// What a schedule costs, before running it: every stage's list played against the others,
// each forward and backward taking cost(s, op, chunk), a message passing when both ends have
// posted it (blocking sends and receives, MPI's rendezvous; transfers take no time).
// busy[s]: stage s's compute time; finish[s]: when it ends its list; step: when the last stage
// ends; idle s = 1 - busy/step (or 1 - busy/finish over its own span, as run_schedule times it);
// peak_sets[s]: micro-batches in flight at most; completed: false if the lists deadlock.
struct PipelineSimulation {
    std::vector<double> busy, finish;
    double step;
    std::vector<int> peak_sets;
    bool completed;
};
// stage s's posted messages that meet one its peer has posted: passed at the later of the two
// clocks (done_at: when all of an action's halves have passed). True if any did
inline bool pass_messages(int s, const std::vector<std::vector<PipelineMessage>>& posted,
                          std::vector<std::vector<bool>>& passed, const std::vector<double>& clock,
                          std::vector<double>& done_at) {
    bool progress = false;
    for (size_t i = 0; i < posted[s].size(); i++) {
        const PipelineMessage& mine = posted[s][i];
        for (size_t j = 0; !passed[s][i] && j < posted[mine.peer].size(); j++) {
            const PipelineMessage& theirs = posted[mine.peer][j];
            if (passed[mine.peer][j] || theirs.send == mine.send || theirs.activation != mine.activation ||
                theirs.micro != mine.micro || theirs.boundary != mine.boundary || theirs.peer != s) continue;
            double t = std::max(clock[s], clock[mine.peer]);  // both have posted it
            passed[s][i] = passed[mine.peer][j] = true;
            done_at[s] = std::max(done_at[s], t);
            done_at[mine.peer] = std::max(done_at[mine.peer], t);
            progress = true;
        }
    }
    return progress;
}

inline PipelineSimulation pipeline_simulate_lists(const std::vector<std::vector<PipelineAction>>& lists,
                                                  const std::function<double(int, PipelineOp, int)>& cost) {
    int p = (int)lists.size();
    PipelineSimulation sim = {std::vector<double>(p, 0.0), std::vector<double>(p, 0.0), 0.0, std::vector<int>(p, 0),
                              true};
    std::vector<size_t> pc(p, 0);
    std::vector<double> clock(p, 0.0), done_at(p, 0.0);  // done_at: when the current action's halves have all passed
    std::vector<int> in_flight(p, 0);
    std::vector<std::vector<PipelineMessage>> posted(p);
    std::vector<std::vector<bool>> passed(p);
    auto post = [&](int s) {  // stage s reaches its next action at clock[s]
        posted[s] = pc[s] < lists[s].size() ? pipeline_messages(lists[s][pc[s]], s, p) : std::vector<PipelineMessage>{};
        passed[s].assign(posted[s].size(), false);
        done_at[s] = clock[s];
    };
    auto finish_action = [&](int s) { pc[s]++; post(s); };
    for (int s = 0; s < p; s++) post(s);
    for (bool progress = true; progress;) {
        progress = false;
        for (int s = 0; s < p; s++) {
            if (pc[s] == lists[s].size()) continue;
            const PipelineAction& a = lists[s][pc[s]];
            if (is_compute(a.op)) {
                double c = cost(s, a.op, a.chunk);
                clock[s] += c;
                sim.busy[s] += c;
                in_flight[s] += a.op == FORWARD ? 1 : a.op == BACKWARD_INPUT ? 0 : -1;  // kept until W is done
                sim.peak_sets[s] = std::max(sim.peak_sets[s], in_flight[s]);
                finish_action(s);
                progress = true;
                continue;
            }
            if (pass_messages(s, posted, passed, clock, done_at)) progress = true;
            if (std::find(passed[s].begin(), passed[s].end(), false) == passed[s].end()) {
                clock[s] = done_at[s];
                finish_action(s);
                progress = true;
            }
        }
    }
    for (int s = 0; s < p; s++) {
        sim.completed = sim.completed && pc[s] == lists[s].size();
        sim.finish[s] = clock[s];
        sim.step = std::max(sim.step, clock[s]);
    }
    return sim;
}
// the same for the lists of a schedule (of `chunks` chunks a stage, interleaved)
inline PipelineSimulation pipeline_simulate(ScheduleKind kind, int p, int m,
                                            const std::function<double(int, PipelineOp, int)>& cost, int chunks = 1) {
    std::vector<std::vector<PipelineAction>> lists(p);
    for (int s = 0; s < p; s++) lists[s] = pipeline_schedule(kind, s, p, m, chunks);
    return pipeline_simulate_lists(lists, cost);
}

// the formula a log row prints beside the measured bubble, for equal times (F = B = W under
// ZB-H1; with fewer micro-batches than stages, where its formula does not hold, the simulator's;
// V chunks a stage under interleaved 1F1B)
inline double schedule_bubble_formula(ScheduleKind kind, int p, int m, int V = 1) {
    if (kind == SCHEDULE_INTERLEAVED) return interleaved_bubble_fraction(p, m, V);
    if (kind != SCHEDULE_ZB) return pipeline_bubble_fraction(p, m);
    if (m >= p) return zb_h1_bubble_fraction(p, m, 1.0, 1.0, 1.0);
    PipelineSimulation sim =
        pipeline_simulate(kind, p, m, [](int, PipelineOp op, int) { return op == BACKWARD ? 2.0 : 1.0; });
    return 1.0 - sim.busy[0] / sim.step;  // every stage does the same work: they idle alike
}

// the split of L layers over p stages whose largest stage costs least: a stage of k layers
// costs k * layer_cost, + first_extra on stage 0 and last_extra on stage p-1 (the embedding,
// and the final LayerNorm with the LM head); every stage keeps at least one layer. Of the
// splits with the same largest stage, the most even (least sum of squared stage costs).
inline std::vector<int> balanced_stage_layers(int L, int p, double layer_cost, double first_extra, double last_extra) {
    auto stage_cost = [&](int s, int k) {
        return k * layer_cost + (s == 0 ? first_extra : 0.0) + (s == p - 1 ? last_extra : 0.0);
    };
    // best[s][l]: (largest cost, sum of squares) of the best split of layers [0, l) over stages 0..s;
    // take[s][l]: stage s's share in it. Dynamic programming over the last stage's share.
    std::vector<std::vector<std::pair<double, double>>> best(
        p, std::vector<std::pair<double, double>>(L + 1, {INFINITY, 0.0}));
    std::vector<std::vector<int>> take(p, std::vector<int>(L + 1, 0));
    for (int l = 1; l <= L; l++) {
        best[0][l] = {stage_cost(0, l), stage_cost(0, l) * stage_cost(0, l)};
        take[0][l] = l;
    }
    for (int s = 1; s < p; s++)
        for (int l = s + 1; l <= L; l++)
            for (int k = 1; k <= l - s; k++) {
                double c = stage_cost(s, k);
                std::pair<double, double> w = {std::max(best[s - 1][l - k].first, c),
                                               best[s - 1][l - k].second + c * c};
                if (w < best[s][l]) { best[s][l] = w; take[s][l] = k; }
            }
    std::vector<int> counts(p);
    for (int s = p - 1, l = L; s >= 0; l -= counts[s], s--) counts[s] = take[s][l];
    return counts;
}

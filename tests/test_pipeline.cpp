/*
tests/test_pipeline.cpp: the schedules of pipeline.h, as data, over many (p, m):
  - distribute_layers: contiguous ranges covering [0, L), sizes L/p or L/p + 1, larger first;
  - each micro-batch runs forward once, then backward once, on every stage;
  - the activations in flight never exceed pipeline_activation_sets, and 1F1B reaches
    exactly min(p - s, m) (its warmup of min(p - s - 1, m) forwards, plus one);
  - every send is matched by the neighbour's receive of the same message, in the same order;
  - all stages' lists run against each other with blocking (rendezvous) sends and receives,
    MPI's worst case, and every list completes: no deadlock;
  - with one slot per forward and backward, every stage idles (p - 1)/(m + p - 1) of the
    step, and the timelines for p = 4, m = 8 are the tables in pipeline.h's header comment;
  - the invariants run_schedule relies on: a received gradient is consumed by the next
    action (its backward), whose result is sent by the action after, so one gradient buffer
    per stage suffices; micro-batch k's activation set is free when its input arrives.
*/
#include <catch2/catch.hpp>
#include <stdio.h>
#include <algorithm>
#include <map>
#include <deque>
#include <string>
#include <vector>
#include "../pipeline.h"
#include "../pipeline_sim.h"

using std::vector;
using std::string;

// rendezvous: a send and its receive complete together, only while both are posted
// (pipeline_simulate_lists). Returns true when every stage's list runs to its end.
static bool runs_without_deadlock(const vector<vector<PipelineAction>>& lists) {
    return pipeline_simulate_lists(lists, [](int, PipelineOp, int) { return 1.0; }).completed;
}

// eager sends (buffered, in order), one slot per forward or backward: each stage's row of
// "Fk"/"Bk" cells, ".." where it waits; every row padded to the step's length. With
// split_backward a whole backward takes two slots, "Bk Wk", as B and W do under ZB-H1; with
// halves, a forward or backward two, "Fk Fk", as two chunks' do under interleaved 1F1B, whose
// second chunk's cells are in lower case, "fk", "bk"
static vector<string> timeline(const vector<vector<PipelineAction>>& lists, bool split_backward = false, bool halves = false) {
    int p = (int)lists.size();
    vector<int> clock(p, 0);
    vector<string> rows(p);
    std::map<std::pair<int, int>, std::deque<std::pair<int, int>>> channel;  // (from, to*2+activation) -> (message, sent at)
    vector<size_t> pc(p, 0);
    vector<bool> sent(p, false);  // the current action's sends are out (a paired action posts them first)
    for (bool progress = true; progress;) {
        progress = false;
        for (int s = 0; s < p; s++) {
            while (pc[s] < lists[s].size()) {
                const PipelineAction& a = lists[s][pc[s]];
                if (is_compute(a.op)) {
                    string k = std::to_string(a.micro);
                    string cell = a.op == FORWARD ? "F" + k : a.op == BACKWARD_WEIGHT ? "W" + k : "B" + k;
                    if (a.chunk == 1) cell[0] = (char)tolower(cell[0]);
                    if (a.op == BACKWARD && split_backward) { cell += " W" + k; clock[s]++; }
                    if (halves) { cell += " " + cell; clock[s]++; }
                    rows[s] += (rows[s].empty() ? "" : " ") + cell;
                    clock[s]++;
                } else {
                    vector<PipelineMessage> ms = pipeline_messages(a, s, p);
                    for (const PipelineMessage& m : ms)  // a message is known by its micro-batch and its cut
                        if (m.send && !sent[s]) channel[{s, m.peer * 2 + m.activation}].push_back({m.micro * 1000 + m.boundary, clock[s]});
                    if (!sent[s]) progress = true;
                    sent[s] = true;
                    bool ready = true;  // every receive's message must have been sent
                    for (const PipelineMessage& m : ms)
                        if (!m.send && channel[{m.peer, s * 2 + m.activation}].empty()) ready = false;
                    if (!ready) break;
                    for (const PipelineMessage& m : ms) {
                        if (m.send) continue;
                        auto& q = channel[{m.peer, s * 2 + m.activation}];
                        REQUIRE(q.front().first == m.micro * 1000 + m.boundary);  // messages arrive in the order they are expected
                        while (clock[s] < q.front().second) { rows[s] += rows[s].empty() ? ".." : " .."; clock[s]++; }
                        q.pop_front();
                    }
                }
                pc[s]++;
                sent[s] = false;
                progress = true;
            }
        }
    }
    int end = 0;
    for (int c : clock) end = std::max(end, c);
    for (int s = 0; s < p; s++) for (int c = clock[s]; c < end; c++) rows[s] += " ..";
    return rows;
}

TEST_CASE("distribute_layers: contiguous, even, the first stages take the remainder") {
    for (int L = 1; L <= 13; L++)
        for (int p = 1; p <= L; p++) {
            int next = 0;
            for (int s = 0; s < p; s++) {
                int b, e;
                distribute_layers(L, p, s, &b, &e);
                CHECK(b == next);
                CHECK((e - b == L / p || e - b == L / p + 1));
                CHECK((e - b == L / p + 1) == (s < L % p));
                next = e;
            }
            CHECK(next == L);
        }
}

static const char* kind_name(ScheduleKind kind) { return kind == SCHEDULE_GPIPE ? "gpipe" : kind == SCHEDULE_ZB ? "zb" : "1f1b"; }

// what each micro-batch does on a stage, in order, and what the stage holds at most: micro-batches
// between forward and the end of their backward (W included), between forward and B, and
// between B and W
struct Holds { int sets, head_sets, weight_slots; };
static Holds check_order_and_holds(const vector<PipelineAction>& list, int m) {
    vector<int> forwarded(m, 0), input_done(m, 0), weight_done(m, 0);
    int in_flight = 0, before_b = 0, waiting_w = 0;
    Holds peak = {0, 0, 0};
    for (const PipelineAction& a : list) {
        if (!is_compute(a.op)) continue;
        int k = a.micro;
        if (a.op == FORWARD) { CHECK(forwarded[k]++ == 0); in_flight++; before_b++; }
        if (a.op == BACKWARD || a.op == BACKWARD_INPUT) { CHECK(forwarded[k] == 1); CHECK(input_done[k]++ == 0); before_b--; }
        if (a.op == BACKWARD_INPUT) waiting_w++;
        if (a.op == BACKWARD_WEIGHT) { CHECK(input_done[k] == 1); waiting_w--; }  // B before W
        if (a.op == BACKWARD || a.op == BACKWARD_WEIGHT) { CHECK(weight_done[k]++ == 0); in_flight--; }
        peak = {std::max(peak.sets, in_flight), std::max(peak.head_sets, before_b), std::max(peak.weight_slots, waiting_w)};
    }
    for (int k = 0; k < m; k++) CHECK((forwarded[k] == 1 && input_done[k] == 1 && weight_done[k] == 1));
    return peak;
}

TEST_CASE("schedules over many (p, m): order, memory bound, matched messages, no deadlock, the bubble") {
    for (ScheduleKind kind : {SCHEDULE_1F1B, SCHEDULE_GPIPE, SCHEDULE_ZB})
        for (int p = 1; p <= 6; p++)
            for (int m = 1; m <= 12; m++) {
                INFO(kind_name(kind) << " p=" << p << " m=" << m);
                vector<vector<PipelineAction>> lists(p);
                for (int s = 0; s < p; s++) lists[s] = pipeline_schedule(kind, s, p, m);
                for (int s = 0; s < p; s++) {
                    Holds peak = check_order_and_holds(lists[s], m);
                    StageBuffers holds = stage_buffers(kind, s, p, m);  // what the trainer allocates
                    CHECK(peak.sets == holds.activation_sets);
                    CHECK(peak.head_sets <= holds.head_sets);
                    CHECK(peak.weight_slots == holds.weight_slots);
                    if (kind == SCHEDULE_1F1B) CHECK(peak.sets == std::min(p - s, m));
                    if (kind == SCHEDULE_GPIPE && p > 1) CHECK(peak.sets == m);
                    if (kind == SCHEDULE_ZB && p > 1) CHECK(peak.sets == std::min(p, m));  // stage 0's, on every stage
                    if (s + 1 < p) {  // what s sends to s+1 is what s+1 receives from s, in order; and back
                        vector<int> sent[2], received[2];
                        for (const PipelineAction& a : lists[s])
                            for (const PipelineMessage& msg : pipeline_messages(a, s, p)) if (msg.peer == s + 1) (msg.send ? sent : received)[msg.activation].push_back(msg.micro);
                        vector<int> sent_back[2], received_back[2];
                        for (const PipelineAction& a : lists[s + 1])
                            for (const PipelineMessage& msg : pipeline_messages(a, s + 1, p)) if (msg.peer == s) (msg.send ? sent_back : received_back)[msg.activation].push_back(msg.micro);
                        CHECK(sent[1] == received_back[1]);   // activations s -> s+1
                        CHECK(sent_back[0] == received[0]);   // gradients s+1 -> s
                        CHECK((int)sent[1].size() == m);
                        CHECK((int)received[0].size() == m);
                    }
                }
                REQUIRE(runs_without_deadlock(lists));
                if (kind == SCHEDULE_ZB) continue;  // its bubble: pipeline_simulate's test below
                vector<string> rows = timeline(lists);
                for (const string& row : rows) {  // cells are separated by one space
                    int cells = 0, idle = 0;
                    for (size_t at = 0; at <= row.size();) {
                        size_t space = row.find(' ', at);
                        if (space == string::npos) space = row.size();
                        cells++;
                        idle += row.compare(at, space - at, "..") == 0;
                        at = space + 1;
                    }
                    CHECK(cells == 2 * (m + p - 1));
                    CHECK(idle == 2 * (p - 1));
                }
            }
}

TEST_CASE("the tables in pipeline.h's header are the schedules' timelines for p = 4, m = 8") {
    FILE* f = fopen("pipeline.h", "r");
    REQUIRE(f != nullptr);
    std::map<string, vector<string>> documented;
    const vector<string> tables = {"GPipe", "1F1B", "1F1B, each backward as B and W", "ZB-H1",
                                   "1F1B, each forward and backward as two chunks'", "interleaved 1F1B, V = 2"};
    string section;
    char line[512];
    while (fgets(line, sizeof(line), f)) {
        string l(line);
        while (!l.empty() && (l.back() == '\n' || l.back() == '\r')) l.pop_back();
        if (std::find(tables.begin(), tables.end(), l) != tables.end()) section = l;
        else if (!section.empty() && l.rfind("  stage ", 0) == 0) documented[section].push_back(l.substr(l.find(": ") + 2));
        else section = "";
    }
    fclose(f);
    const ScheduleKind kinds[] = {SCHEDULE_GPIPE, SCHEDULE_1F1B, SCHEDULE_1F1B, SCHEDULE_ZB, SCHEDULE_1F1B, SCHEDULE_INTERLEAVED};
    for (int t = 0; t < 6; t++) {
        vector<vector<PipelineAction>> lists(4);
        for (int s = 0; s < 4; s++) lists[s] = pipeline_schedule(kinds[t], s, 4, 8, t == 5 ? 2 : 1);
        vector<string> rows = timeline(lists, t == 2 || t == 3, t == 4);  // 2, 3: F, B and W one slot each; 4, 5: chunk slots
        for (int s = 0; s < 4; s++) printf("%s stage %d: %s\n", tables[t].c_str(), s, rows[s].c_str());
        CHECK(documented[tables[t]] == rows);
    }
}

// the gradient of micro-batch k that action a receives, or -1
static int gradient_received(const PipelineAction& a) {
    return a.op == RECV_GRADIENT ? a.micro : a.op == SEND_ACTIVATION_RECV_GRADIENT ? a.received_micro : -1;
}
static int gradient_sent(const PipelineAction& a) {
    return a.op == SEND_GRADIENT || a.op == SEND_GRADIENT_RECV_ACTIVATION ? a.micro : -1;
}
static int activation_received(const PipelineAction& a) {
    return a.op == RECV_ACTIVATION ? a.micro : a.op == SEND_GRADIENT_RECV_ACTIVATION ? a.received_micro : -1;
}

// the next action after i that is not a W (which touches neither the gradient buffer nor a message)
static int next_non_weight(const vector<PipelineAction>& list, int i) {
    int j = i + 1;
    while (j < (int)list.size() && list[j].op == BACKWARD_WEIGHT) j++;
    return j;
}

TEST_CASE("run_schedule's invariants: one gradient buffer per stage, one activation set per micro-batch in flight") {
    for (ScheduleKind kind : {SCHEDULE_1F1B, SCHEDULE_GPIPE, SCHEDULE_ZB})
        for (int p = 1; p <= 6; p++)
            for (int m = 1; m <= 12; m++)
                for (int s = 0; s < p; s++) {
                    INFO(kind_name(kind) << " p=" << p << " m=" << m << " s=" << s);
                    vector<PipelineAction> list = pipeline_schedule(kind, s, p, m);
                    int n = (int)list.size(), sets = pipeline_activation_sets(kind, s, p, m);
                    int slots = pipeline_weight_slots(kind, s, p, m), heads = pipeline_backward_sets(kind, s, p, m);
                    vector<bool> in_flight(m, false), before_b(m, false), waiting_w(m, false);
                    vector<int> slot_of(m, -1);
                    for (int i = 0; i < n; i++) {
                        const PipelineAction& a = list[i];
                        bool backward = a.op == BACKWARD || a.op == BACKWARD_INPUT;
                        // a received gradient is consumed at once by its backward (or B)...
                        if (gradient_received(a) >= 0)
                            CHECK((i + 1 < n && (list[i + 1].op == BACKWARD || list[i + 1].op == BACKWARD_INPUT) &&
                                   list[i + 1].micro == gradient_received(a)));
                        if (backward) {
                            // ...which, except on the last stage, reads nothing but that gradient...
                            if (s < p - 1) CHECK((i > 0 && gradient_received(list[i - 1]) == a.micro));
                            // ...and whose result leaves, past W's only, before the buffer is written again
                            int j = next_non_weight(list, i);
                            if (s > 0) CHECK((j < n && gradient_sent(list[j]) == a.micro));
                            before_b[a.micro] = false;
                        }
                        // a W's output gradients wait in the slot its B and W carry, one of the
                        // `slots` the trainer allocates; no other waiting W uses it
                        if (a.op == BACKWARD_INPUT) {
                            CHECK((a.slot >= 0 && a.slot < slots));
                            for (int q = 0; q < m; q++) CHECK(!(waiting_w[q] && slot_of[q] == a.slot));
                            waiting_w[a.micro] = true;
                            slot_of[a.micro] = a.slot;
                        }
                        if (a.op == BACKWARD_WEIGHT) { CHECK(a.slot == slot_of[a.micro]); waiting_w[a.micro] = false; }
                        if (a.op != BACKWARD_INPUT && a.op != BACKWARD_WEIGHT) CHECK(a.slot == -1);
                        if (a.op == BACKWARD || a.op == BACKWARD_WEIGHT) in_flight[a.micro] = false;
                        // micro-batch k's input lands in set k % sets, its logits in head set k % heads:
                        // no other micro-batch still in flight (before its B, for the head's) uses them
                        int k = activation_received(a) >= 0 ? activation_received(a) : a.op == FORWARD ? a.micro : -1;
                        if (k < 0) continue;
                        for (int j = 0; j < m; j++) {
                            CHECK(!(in_flight[j] && j != k && j % sets == k % sets));
                            CHECK(!(before_b[j] && j != k && j % heads == k % heads));
                        }
                        if (a.op == FORWARD) in_flight[k] = before_b[k] = true;
                    }
                }
}

TEST_CASE("pipeline_simulate: the bubble formula, the activation bound, and an imbalance it can see") {
    // two stages that each send first, to each other, with blocking sends: neither gets to its receive
    vector<vector<PipelineAction>> facing = {{{SEND_ACTIVATION, 0, -1}, {RECV_GRADIENT, 0, -1}},
                                             {{SEND_GRADIENT, 0, -1}, {RECV_ACTIVATION, 0, -1}}};
    CHECK(!runs_without_deadlock(facing));
    for (ScheduleKind kind : {SCHEDULE_1F1B, SCHEDULE_GPIPE})
        for (int p = 1; p <= 8; p++)
            for (int m = 1; m <= 16; m++)
                for (double backward : {1.0, 2.0}) {  // equal stages, a backward as long as a forward or twice
                    INFO((kind == SCHEDULE_GPIPE ? "gpipe" : "1f1b") << " p=" << p << " m=" << m << " B=" << backward);
                    PipelineSimulation sim = pipeline_simulate(kind, p, m, [&](int, PipelineOp op, int) { return op == FORWARD ? 1.0 : backward; });
                    REQUIRE(sim.completed);
                    CHECK(sim.step == Approx((m + p - 1) * (1.0 + backward)));
                    for (int s = 0; s < p; s++) {
                        CHECK(1.0 - sim.busy[s] / sim.step == Approx(pipeline_bubble_fraction(p, m)).margin(1e-12));
                        CHECK(sim.peak_sets[s] == pipeline_activation_sets(kind, s, p, m));
                    }
                }
    // ZB-H1 with forward, B and W times F, B, W: for m >= p every stage idles (p-1) max(F + B - W, F, B, W),
    // never more than 1F1B with a backward of B + W; the peak over the stages holds what 1F1B's does
    for (int p = 1; p <= 8; p++)
        for (int m = 1; m <= 16; m++)
            for (double b : {1.0, 2.0})
                for (double w : {0.5, 1.0, 2.0}) {
                    INFO("zb p=" << p << " m=" << m << " B=" << b << " W=" << w);
                    auto cost = [&](int, PipelineOp op, int) { return op == FORWARD ? 1.0 : op == BACKWARD_INPUT ? b : op == BACKWARD_WEIGHT ? w : b + w; };
                    PipelineSimulation zb = pipeline_simulate(SCHEDULE_ZB, p, m, cost), one = pipeline_simulate(SCHEDULE_1F1B, p, m, cost);
                    REQUIRE(zb.completed);
                    CHECK(zb.step <= one.step + 1e-9);
                    CHECK(*std::max_element(zb.peak_sets.begin(), zb.peak_sets.end()) == *std::max_element(one.peak_sets.begin(), one.peak_sets.end()));
                    for (int s = 0; s < p; s++) {
                        CHECK(zb.peak_sets[s] == pipeline_activation_sets(SCHEDULE_ZB, s, p, m));
                        if (m >= p) CHECK(1.0 - zb.busy[s] / zb.step == Approx(zb_h1_bubble_fraction(p, m, 1.0, b, w)).margin(1e-12));
                    }
                }
    CHECK(zb_h1_bubble_fraction(4, 8, 1, 1, 1) == Approx(3.0 / 27.0));  // the header's table: 3 idle slots of 27
    CHECK(schedule_bubble_formula(SCHEDULE_ZB, 4, 8) == Approx(3.0 / 27.0));
    CHECK(schedule_bubble_formula(SCHEDULE_ZB, 4, 2) < pipeline_bubble_fraction(4, 2));  // m < p: the simulator's, below 1F1B's
    // one heavy stage (GPT-2's last, with the LM head) sets the pace: the others idle the difference
    PipelineSimulation sim = pipeline_simulate(SCHEDULE_1F1B, 2, 8, [](int s, PipelineOp op, int) { return (s == 1 ? 3.0 : 1.0) * (op == FORWARD ? 1 : 2); });
    CHECK(sim.step == Approx(8 * 9.0 + 3.0));  // the last stage's 8 (F + B) of 9, after stage 0's first forward
    CHECK(1.0 - sim.busy[0] / sim.step == Approx(1.0 - 24.0 / 75.0));
}

// Interleaved 1F1B: stage s holds chunks 0..V-1 (virtual stages v*p + s); each (chunk, micro-batch)
// runs forward once, then backward once, each chunk in micro-batch order; what the stage holds at
// once is the stated bound, and interleaved_set_of gives each a set no other one in flight has
static void check_interleaved_order(const vector<PipelineAction>& list, int s, int p, int m, int V) {
    vector<int> forwarded(m * V, 0), backwarded(m * V, 0), next_forward(V, 0), next_backward(V, 0);
    vector<int> set_of = interleaved_set_of(s, p, m, V), holder(m * V, -1);  // holder[set]: the (chunk, k) in it
    int held = 0, most = 0, sets = 0;
    auto take = [&](int id) {  // a chunk-forward's set: from its input's arrival (or its forward) to its backward
        int set = set_of[id];
        REQUIRE((set >= 0 && set < m * V));
        most = std::max(most, ++held);
        CHECK(holder[set] == -1);
        holder[set] = id;
        sets = std::max(sets, set + 1);
    };
    for (const PipelineAction& a : list) {
        if (a.op == RECV_ACTIVATION) take(a.chunk * m + a.micro);
        if (a.op == SEND_ACTIVATION_RECV_ACTIVATION || a.op == SEND_GRADIENT_RECV_ACTIVATION)
            take(a.received_chunk * m + a.received_micro);
        if (!is_compute(a.op)) continue;
        REQUIRE((a.op == FORWARD || a.op == BACKWARD));
        int id = a.chunk * m + a.micro, set = set_of[id];
        REQUIRE((set >= 0 && set < m * V));
        if (a.op == FORWARD) {
            CHECK(forwarded[id]++ == 0);
            CHECK(a.micro == next_forward[a.chunk]++);
            bool arrived = !(s == 0 && a.chunk == 0);  // the model's first chunk receives no input
            if (!arrived) take(id);
            CHECK(holder[set] == id);  // its input is in its set
        }
        if (a.op == BACKWARD) {
            CHECK(forwarded[id] == 1);
            CHECK(backwarded[id]++ == 0);
            CHECK(a.micro == next_backward[a.chunk]++);
            held--;
            CHECK(holder[set] == id);
            holder[set] = -1;
        }
    }
    for (int id = 0; id < m * V; id++) CHECK((forwarded[id] == 1 && backwarded[id] == 1));
    CHECK(most == interleaved_activation_sets(s, p, m, V));
    CHECK(sets == most);  // no set more than are ever busy
    StageBuffers holds = stage_buffers(SCHEDULE_INTERLEAVED, s, p, m, V);
    CHECK(holds.activation_sets == most);
    if (s == p - 1) CHECK(holds.head_sets == 1);  // the head's chunk: each forward's backward comes next
}

// what stage `from` sends to `to` (activations or gradients), as (micro-batch, cut) in order
static vector<std::pair<int, int>> messages_between(const vector<vector<PipelineAction>>& lists, int from, int to, bool send, bool activation) {
    int p = (int)lists.size(), at = send ? from : to, peer = send ? to : from;
    vector<std::pair<int, int>> out;
    for (const PipelineAction& a : lists[at])
        for (const PipelineMessage& msg : pipeline_messages(a, at, p))
            if (msg.send == send && msg.activation == activation && msg.peer == peer) out.push_back({msg.micro, msg.boundary});
    return out;
}

TEST_CASE("interleaved 1F1B over (p, m, V): order, memory, matched messages round the ring, no deadlock, the bubble") {
    for (int V = 1; V <= 4; V++)
        for (int p = 1; p <= 8; p++)
            for (int m = 1; m <= 16; m++) {
                INFO("interleaved p=" << p << " m=" << m << " V=" << V);
                if (V == 1 && p > 1)
                    for (int s = 0; s < p; s++) {  // one chunk is 1F1B
                        vector<PipelineAction> a = pipeline_schedule(SCHEDULE_INTERLEAVED, s, p, m, 1), b = one_f_one_b_schedule(s, p, m);
                        REQUIRE(a.size() == b.size());
                        for (size_t i = 0; i < a.size(); i++) CHECK((a[i].op == b[i].op && a[i].micro == b[i].micro && a[i].chunk == 0));
                    }
                if (m % p != 0) continue;  // the trainer refuses it (the groups of p; it can deadlock)
                vector<vector<PipelineAction>> lists(p);
                for (int s = 0; s < p; s++) lists[s] = pipeline_schedule(SCHEDULE_INTERLEAVED, s, p, m, V);
                if (p > 1)
                    for (int s = 0; s < p; s++) {
                        check_interleaved_order(lists[s], s, p, m, V);
                        int next = (s + 1) % p;  // round the ring: what s sends, its neighbour receives, in order
                        CHECK(messages_between(lists, s, next, true, true) == messages_between(lists, s, next, false, true));
                        CHECK(messages_between(lists, next, s, true, false) == messages_between(lists, next, s, false, false));
                        if (p > 2) CHECK((int)messages_between(lists, s, next, true, true).size() == (s == p - 1 ? V - 1 : V) * m);
                    }
                for (double backward : {1.0, 2.0}) {  // a chunk's forward and backward: 1/V of a stage's
                    INFO("B=" << backward);
                    PipelineSimulation sim = pipeline_simulate(SCHEDULE_INTERLEAVED, p, m,
                                                               [&](int, PipelineOp op, int) { return (op == FORWARD ? 1.0 : backward) / (p > 1 ? V : 1); }, V);
                    REQUIRE(sim.completed);
                    for (int s = 0; s < p; s++)
                        CHECK(1.0 - sim.busy[s] / sim.step == Approx(interleaved_bubble_fraction(p, m, p > 1 ? V : 1)).margin(1e-12));
                }
            }
    // why m must be a multiple of p: otherwise the groups of p leave a stage waiting on a message never sent
    vector<vector<PipelineAction>> uneven(4);
    for (int s = 0; s < 4; s++) uneven[s] = pipeline_schedule(SCHEDULE_INTERLEAVED, s, 4, 6, 2);
    CHECK(!runs_without_deadlock(uneven));
    CHECK(interleaved_bubble_fraction(4, 8, 2) == Approx(3.0 / 19.0));  // the header's table: 6 idle chunk slots of 38
}

// check(list, s, p, m, V) on every interleaved stage's list: V 2..4, p 2..6, m a multiple of p up to 12
template <typename Check> static void for_each_interleaved_list(Check check) {
    for (int V = 2; V <= 4; V++)
        for (int p = 2; p <= 6; p++)
            for (int m = p; m <= 12; m += p)
                for (int s = 0; s < p; s++) {
                    INFO("p=" << p << " m=" << m << " V=" << V << " s=" << s);
                    check(pipeline_schedule(SCHEDULE_INTERLEAVED, s, p, m, V), s, p, m, V);
                }
}

TEST_CASE("interleaved 1F1B's invariants for run_schedule: a received gradient waits only for forwards") {
    for_each_interleaved_list([](const vector<PipelineAction>& list, int s, int p, int m, int V) {
        int waiting = -1;  // the (chunk, micro-batch) whose output gradient is in the buffer
        for (size_t i = 0; i < list.size(); i++) {
            const PipelineAction& a = list[i];
            for (const PipelineMessage& msg : pipeline_messages(a, s, p)) {
                if (msg.activation) continue;
                // a gradient goes out from the buffer and the next comes in (the executor receives it
                // beside the buffer, then moves it in); nothing comes in while one waits
                if (!msg.send) { CHECK(waiting == -1); waiting = (msg.boundary - s) / p * m + msg.micro; }
            }
            if (a.op == BACKWARD) {
                bool head = s == p - 1 && a.chunk == V - 1;  // its gradient comes from the loss
                if (!head) CHECK(waiting == a.chunk * m + a.micro);
                if (!head) waiting = -1;
                // its input gradient is the next gradient to leave (none from the model's first chunk),
                // before any other backward runs
                bool first = s == 0 && a.chunk == 0, sends = false;
                for (size_t j = i + 1; j < list.size() && !sends && list[j].op != BACKWARD; j++)
                    for (const PipelineMessage& msg : pipeline_messages(list[j], s, p))
                        sends |= msg.send && !msg.activation && msg.micro == a.micro && msg.boundary == a.chunk * p + s - 1;
                CHECK(sends == !first);
            }
        }
        CHECK(waiting == -1);
    });
}

// Megatron-LM's overlap_p2p_comm, in the lists: in the steady phase (after the warmup), a received
// activation's forward comes after a backward and a received gradient's backward after a forward
// (until the forwards run out), so on the links stream each shift travels while the stage computes
// something that does not need it (pipeline_links.h). Listed after the backward, the activation
// shift would hold up the very next forward
TEST_CASE("interleaved 1F1B: after the warmup each shift has a compute between it and the compute it feeds") {
    for_each_interleaved_list([](const vector<PipelineAction>& list, int s, int p, int m, int V) {
        // the steady phase begins with the chunk-forward after the warmup's
        int warmup = std::min(2 * (p - s - 1) + (V - 1) * p, m * V), forwards = 0;
        size_t steady = list.size(), last_forward = 0;
        for (size_t i = 0; i < list.size(); i++)
            if (list[i].op == FORWARD) {
                if (forwards++ == warmup) steady = i;
                last_forward = i;
            }
        int shifts = 0;
        for (size_t i = steady; i < list.size(); i++) {
            const PipelineAction& a = list[i];
            // a shift, or its receiving half alone (where the sending half faces no stage)
            bool activation = a.op == SEND_ACTIVATION_RECV_ACTIVATION || a.op == RECV_ACTIVATION;
            bool gradient = a.op == SEND_GRADIENT_RECV_GRADIENT || a.op == RECV_GRADIENT;
            if (!activation && !(gradient && i < last_forward)) continue;
            bool alone = a.op == RECV_ACTIVATION || a.op == RECV_GRADIENT;
            int k = alone ? a.micro : a.received_micro, v = alone ? a.chunk : a.received_chunk;
            PipelineOp fed = activation ? FORWARD : BACKWARD, between = activation ? BACKWARD : FORWARD;
            bool computed_between = false;
            size_t j = i + 1;
            for (; j < list.size(); j++) {
                if (list[j].op == fed && list[j].micro == k && list[j].chunk == v) break;
                computed_between |= list[j].op == between;
            }
            REQUIRE(j < list.size());  // the compute it feeds is listed
            CHECK(computed_between);
            shifts++;
        }
        if (m * V - warmup > 1) CHECK(shifts > 0);  // a steady phase of two or more
    });
}

TEST_CASE("stage_layer_counts and balanced_stage_layers") {
    std::string error;
    CHECK(stage_layer_counts(7, 3, NULL, &error) == vector<int>({3, 2, 2}));
    CHECK(stage_layer_counts(8, 4, "1,3,3,1", &error) == vector<int>({1, 3, 3, 1}));
    for (const char* bad : {"1,3,3", "1,3,3,2", "0,4,3,1", "1,3,x,1", "1,,3,3", "", "1,3,3,1,"}) {
        error.clear();
        CHECK(stage_layer_counts(8, 4, bad, &error).empty());
        CHECK(!error.empty());
    }
    for (int L = 1; L <= 12; L++)
        for (int p = 1; p <= L; p++)
            for (double head : {0.0, 0.5, 2.5, 7.0}) {
                vector<int> split = balanced_stage_layers(L, p, 1.0, 0.0, head);
                int sum = 0;
                double largest = 0.0;
                for (int s = 0; s < p; s++) {
                    CHECK(split[s] >= 1);
                    sum += split[s];
                    largest = std::max(largest, split[s] + (s == p - 1 ? head : 0.0));
                }
                CHECK(sum == L);
                // no split does better: the largest stage is at least the mean, and the last stage at least 1 + head
                double bound = std::max((L + head) / p, 1.0 + head);
                CHECK(largest < bound + 1.0);
                if (head == 0.0) CHECK(largest == (L + p - 1) / p);  // even: the ceiling of L/p
            }
    CHECK(balanced_stage_layers(8, 4, 1.0, 0.0, 2.0) == vector<int>({3, 2, 2, 1}));
}


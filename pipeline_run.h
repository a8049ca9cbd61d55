/*
pipeline_run.h: the executor of pipeline.h's schedules: one stage's list of actions, run in order.

run_schedule walks the list and does each action. It knows the model only through a
PipelineStage: run micro-batch k forward, or backward (or ZB-H1's B and W), and where k's input
and output activations and the stage's gradient buffer are; it relies on the two invariants of
every list that pipeline.h states (one gradient buffer a stage, one activation set a micro-batch
in flight). A compute action calls the stage (run_compute, which stamps the device's clock around
it: ScheduleTiming, the bubble measured); a transfer sends and receives over the pipeline group
(run_transfer: comm.h's comm_send_recv, both halves posted together where the list pairs them).
Under -overlap 1 (the default) run_schedule posts each send and receive, in the list's order, on
a stream of its own and orders it against the compute by events only where they share a buffer
(pipeline_links.h): a send holds up only the compute that writes its tensor again, not the next
one. What a transfer still costs the stage:
    exposed = max(0, t_transfer - the compute between its post and the compute that needs its buffer)
    default stream | fwd 4 | fwd 5 |            -overlap 0: fwd 4, send act 4 (until s+1 takes it), fwd 5
    links stream           | send act 4 |
pipeline_forward runs micro-batch 0 through every stage in turn, forward only (validation,
sampling), its transfers on the default stream.

Applied in train_gpt.cu: pipeline_stage (GPT-2's stage for the executor; block_backward_input and
block_backward_weights are B and W; a chunk is the blocks of one activation set, stage_forward),
train_step (run_schedule with the model's PipelineLinks), forward_only (pipeline_forward, round
the ring V times); gpt2.h: scratch_buffer_list (received_gradient_buffer_list).
*/
#pragma once
// defines: received_gradient_buffer_list, PipelineStage, ScheduleTiming, ms_since, schedule_timing_read,
//          action_name, link_buffers, run_compute, run_transfer, run_schedule, pipeline_forward
#include <chrono>      // defines: std::chrono::steady_clock
#include <functional>  // defines: std::function
#include <string>      // defines: std::string, std::to_string
#include <vector>      // defines: std::vector
#include "pipeline.h"        // defines: PipelineAction, PipelineOp, is_compute
#include "comm.h"            // defines: Comm, comm_send, comm_recv, comm_send_recv, TraceSpan, device_to_device_on
#include "pipeline_links.h"  // defines: PipelineLinks, links_compute, links_transfer, links_finish

// ---------------------------------------------------------------- running a schedule

// the buffer interleaved 1F1B adds, declared for the model's buffer list (gpt2.h): where the next
// gradient lands while the stage's one gradient buffer is sent (PipelineStage::received_gradient);
// none with one chunk a stage
inline std::vector<BufferSpec> received_gradient_buffer_list(floatX** received_gradient, int chunks,
                                                              size_t message_elements) {
    if (chunks <= 1) return {};  // the pointer stays null
    return {{(void**)received_gradient, message_elements, sizeof(floatX), MEM_ACTIVATIONS_TRANSIENT}};
}

// what the executor needs of the model (GPT-2's in train_gpt.cu: pipeline_stage)
// Each function takes the chunk v (0 but under interleaved 1F1B) and the micro-batch k. A forward may
// return its loss sum; GPT-2's returns 0, its token losses coming down through staging.h instead,
// summed after the step's one wait (train_step)
struct PipelineStage {
    std::function<double(int v, int k)> forward;   // k through chunk v; its loss sum on the model's last chunk, else 0
    std::function<void(int v, int k)>
        backward;  // k's backward, from `gradient` (of k's output) to `gradient` (of its input)
    // its B: the same, with the weight gradients left for its W, later (ZB-H1); the output gradients
    // they share wait in the action's slot
    std::function<void(int v, int k, int slot)> backward_input;
    std::function<void(int v, int k, int slot)> backward_weight;
    std::function<floatX*(int v, int k)> input;    // where k's input activation is received (not on the first chunk)
    std::function<floatX*(int v, int k)> output;   // where k's output activation is after its forward (sent on)
    floatX* gradient;                       // the stage's one gradient buffer (the header says why one is enough)
    floatX* received_gradient;              // where a gradient lands while `gradient` is sent (interleaved only)
    size_t message_elements;                // of every activation and gradient: B*T*C (/tp under -sp)
};

// time spent computing (forwards, backwards, B's and W's) and in the whole schedule, for the
// bubble; and each kind of computation's own time on each chunk, which pipeline_simulate can replay.
// The device's times: run_schedule stamps the device's clock (base.h) around each compute action,
// schedule_timing_read reads the stamps once a wait has passed them. clock NULL: not timed
struct ScheduleTiming {
    DeviceClock* clock = nullptr;
    struct Stamped { PipelineOp op; int chunk, from, to; };
    std::vector<Stamped> computes;  // each compute action's stamps, and the schedule's first and last
    int first = 0, last = 0;
    double busy_ms = 0.0, total_ms = 0.0;
    std::vector<double> op_ms;  // [chunk * NUM_PIPELINE_OPS + op]
    std::vector<int> op_count;
    void add(PipelineOp op, int chunk, double ms) {
        size_t at = (size_t)chunk * NUM_PIPELINE_OPS + op;
        if (op_ms.size() <= at) {
            op_ms.resize(at + NUM_PIPELINE_OPS - at % NUM_PIPELINE_OPS, 0.0);
            op_count.resize(op_ms.size(), 0);
        }
        op_ms[at] += ms;
        op_count[at] += 1;
    }
    double mean_ms(PipelineOp op, int chunk) const {
        size_t at = (size_t)chunk * NUM_PIPELINE_OPS + op;
        return at < op_ms.size() && op_count[at] ? op_ms[at] / op_count[at] : 0.0;
    }
};

inline double ms_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}
// after a wait that follows the schedule (the step's, for the gradient norm): the times of its stamps
inline void schedule_timing_read(ScheduleTiming* t) {
    if (!t->clock) return;
    for (const ScheduleTiming::Stamped& c : t->computes) {
        double ms = device_clock_ms(t->clock, c.from, c.to);
        t->busy_ms += ms;
        t->add(c.op, c.chunk, ms);
    }
    t->total_ms = device_clock_ms(t->clock, t->first, t->last);
}

// the trace's name of an action: "forward 3", "send activation 4 / recv gradient 1", "forward 3
// (chunk 1)", ...
inline std::string action_name(const PipelineAction& a) {
    static const char* names[] = {"forward",        "backward",        "recv activation", "send activation",
                                  "recv gradient",  "send gradient",   "send activation", "send gradient",
                                  "backward input", "backward weight", "send activation", "send gradient"};
    std::string name = std::string(names[a.op]) + " " + std::to_string(a.micro);
    if (a.op == SEND_ACTIVATION_RECV_GRADIENT) name += " / recv gradient " + std::to_string(a.received_micro);
    if (a.op == SEND_GRADIENT_RECV_ACTIVATION || a.op == SEND_ACTIVATION_RECV_ACTIVATION)
        name += " / recv activation " + std::to_string(a.received_micro);
    if (a.op == SEND_GRADIENT_RECV_GRADIENT) name += " / recv gradient " + std::to_string(a.received_micro);
    if (a.chunk > 0 || a.received_chunk > 0) name += " (chunk " + std::to_string(a.chunk) + ")";
    return name;
}

// the buffers action a touches (pipeline_links.h): what a transfer sends and receives; a
// compute's activation set (its input and output), and the gradient buffer for a backward or B
inline std::vector<const void*> link_buffers(const PipelineStage& stage, const PipelineAction& a) {
    int v = a.chunk, k = a.micro;
    const void *in = stage.input(v, k), *out = stage.output(v, k), *received_in = nullptr;
    if (a.received_micro >= 0) received_in = stage.input(a.received_chunk, a.received_micro);
    switch (a.op) {
        case FORWARD: case BACKWARD_WEIGHT: return {in, out};
        case BACKWARD: case BACKWARD_INPUT: return {in, out, stage.gradient};
        case RECV_ACTIVATION: return {in};
        case SEND_ACTIVATION: return {out};
        case RECV_GRADIENT: case SEND_GRADIENT: return {stage.gradient};
        case SEND_ACTIVATION_RECV_GRADIENT: return {out, stage.gradient};
        case SEND_GRADIENT_RECV_ACTIVATION: return {stage.gradient, received_in};
        case SEND_ACTIVATION_RECV_ACTIVATION: return {out, received_in};
        case SEND_GRADIENT_RECV_GRADIENT: return {stage.gradient, stage.received_gradient};
        case NUM_PIPELINE_OPS: break;
    }
    return {};
}

// a compute action (forward, backward, B, W); its loss sum (a forward on the model's last chunk)
inline double run_compute(const PipelineStage& stage, const PipelineAction& a, ScheduleTiming* timing) {
    DeviceClock* clock = timing->clock;
    int began = clock ? device_clock_stamp(clock) : 0, v = a.chunk, k = a.micro;
    double loss = 0.0;
    switch (a.op) {
        case FORWARD: loss = stage.forward(v, k); break;
        case BACKWARD: stage.backward(v, k); break;
        case BACKWARD_INPUT: stage.backward_input(v, k, a.slot); break;
        case BACKWARD_WEIGHT: stage.backward_weight(v, k, a.slot); break;
        default: fail("run_compute: action %d is not a computation", (int)a.op);
    }
    if (clock) timing->computes.push_back({a.op, a.chunk, began, device_clock_stamp(clock)});
    return loss;
}

// a transfer action: sends and receives over `pp` (posted: pipeline_links.h; NULL: done on return)
inline void run_transfer(const PipelineStage& stage, const PipelineAction& a, Comm* pp, Posted* posted) {
    int s = pp->rank, next = (s + 1) % pp->size, previous = (s + pp->size - 1) % pp->size;  // a ring
    size_t n = stage.message_elements;
    int v = a.chunk, k = a.micro, received_v = a.received_chunk, received_k = a.received_micro;
    switch (a.op) {
        case RECV_ACTIVATION: comm_recv(pp, stage.input(v, k), n, previous, posted); break;
        case SEND_ACTIVATION: comm_send(pp, stage.output(v, k), n, next, posted); break;
        case RECV_GRADIENT: comm_recv(pp, stage.gradient, n, next, posted); break;
        case SEND_GRADIENT: comm_send(pp, stage.gradient, n, previous, posted); break;
        case SEND_ACTIVATION_RECV_GRADIENT:
            comm_send_recv(pp, stage.output(v, k), next, stage.gradient, next, n, posted);
            break;
        case SEND_GRADIENT_RECV_ACTIVATION:
            comm_send_recv(pp, stage.gradient, previous, stage.input(received_v, received_k), previous, n, posted);
            break;
        case SEND_ACTIVATION_RECV_ACTIVATION:
            comm_send_recv(pp, stage.output(v, k), next, stage.input(received_v, received_k), previous, n, posted);
            break;
        case SEND_GRADIENT_RECV_GRADIENT:  // the next gradient cannot land in the one leaving: beside it, then in
            if (!stage.received_gradient) fail("run_schedule: an interleaved schedule needs received_gradient");
            comm_send_recv(pp, stage.gradient, previous, stage.received_gradient, next, n, posted);
            if (posted) comm_wait_posted(posted);  // the CPU build: the copy needs both (a GPU: in stream order)
            device_to_device_on(posted ? posted->stream : 0, stage.gradient, stage.received_gradient,
                                n * sizeof(floatX));
            break;
        default: fail("run_transfer: action %d is not a transfer", (int)a.op);
    }
}

// does stage pp->rank's actions for one step, over its pipeline group `pp`; returns the sum of
// what the forwards returned (PipelineStage: the last stage's losses, or 0). With timing->clock, stamps the device's
// clock around each compute action, for schedule_timing_read after the step's wait: a receive
// only queues work on the GPU, and its wait falls between one action's end and the next's start,
// where it belongs (the bubble), without the host waiting for either. links (pipeline_links.h,
// -overlap 1): the transfers on a stream of their own, ordered against the computes by events
inline double run_schedule(const PipelineStage& stage, const std::vector<PipelineAction>& actions, Comm* pp,
                           ScheduleTiming* timing, PipelineLinks* links) {
    double loss = 0.0;
    DeviceClock* clock = timing->clock;
    *timing = ScheduleTiming{};
    timing->clock = clock;
    if (clock) clock->used = 0;
    if (clock) timing->first = device_clock_stamp(clock);
    for (const PipelineAction& a : actions) {
        bool compute = is_compute(a.op);
        TraceSpan span(pp->trace, [&] { return action_name(a); }, compute ? "compute" : "pipeline", pp->world_rank);
        if (compute) links_compute(links, link_buffers(stage, a), [&] { loss += run_compute(stage, a, timing); });
        else links_transfer(links, link_buffers(stage, a), [&](Posted* posted) { run_transfer(stage, a, pp, posted); });
    }
    links_finish(links);
    if (clock) timing->last = device_clock_stamp(clock);
    return loss;
}

// micro-batch 0 through every stage in turn, forward only (validation, sampling): no schedule,
// each stage waits for its input, runs, and passes its output on; with V chunks a stage, round
// the ring V times. Returns the loss as run_schedule
inline double pipeline_forward(const PipelineStage& stage, Comm* pp, int V = 1) {
    int s = pp->rank, p = pp->size;
    double loss = 0.0;
    for (int v = 0; v < V; v++) {
        if (s > 0 || v > 0) comm_recv(pp, stage.input(v, 0), stage.message_elements, (s + p - 1) % p);
        loss += stage.forward(v, 0);
        if (s < p - 1 || v < V - 1) comm_send(pp, stage.output(v, 0), stage.message_elements, (s + 1) % p);
    }
    return loss;
}

/*
step_time.h: where a step's time goes, on the CPU build. Each rank splits its host clock over the
step into

    ms = data + compute + comm_exposed + bubble + optimizer

    data          reading the step's micro-batches (dataloader.h)
    comm_exposed  blocked in a collective, or in the wait for a posted one (comm.h, overlap.h)
    bubble        blocked in a pipeline send or receive: waiting for another stage (pipeline.h)
    optimizer     the update itself (zero_optimizer_step), its collectives left out
    compute       the rest: forwards, backwards, the norm, the loss

and, beside them, comm_in_flight: the time at least one collective was under way, from its start
to its completion as this rank saw it. A blocking collective counts alike in both; one that
overlap.h posted runs while the backward goes on, so overlap shows as comm_exposed < comm_in_flight:

    backward  |unit 3|unit 2|unit 1|unit 0|wait|
    reduce           |3  |  |2  |  |1  |  |0   |       in flight: from 3's post to 0's end
    exposed                                |====|       only the wait

The log row carries each part averaged over the ranks ("time_ms", accounting.h: step_time_json),
scripts/plot_log.py stacks them, scripts/bench_overlap.sh compares -overlap 0 with 1. The GPU
build's host clock sees launches, not kernels, so it writes no split (comm_time.h predicts one).
Applied in comm.h (comm_wait, Posted: every collective's wait and flight), train_gpt.cu:
train_step (data, optimizer), train_loop (reset, the row).
*/
#pragma once
// defines: StepTime, step_time_now_ms, step_time_reset, step_time_begin_comm, step_time_end_comm, StepSpan
#include <chrono>  // defines: std::chrono::steady_clock

struct StepTime {
    double data, optimizer, comm_exposed, comm_in_flight, bubble;  // ms, this step
    int in_flight;    // collectives under way now
    double since_ms;  // when the first of them began
};

inline double step_time_now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
// a new step's split; collectives still under way (ZeRO-3's end units, gathered after AdamW for the
// next step: zero.h) stay counted, in flight from the step's start
inline void step_time_reset(StepTime* t) {
    int in_flight = t->in_flight;
    *t = StepTime{};
    t->in_flight = in_flight;
    if (in_flight > 0) t->since_ms = step_time_now_ms();
}

// a collective begins (t NULL: not timed)
inline void step_time_begin_comm(StepTime* t) {
    if (t && t->in_flight++ == 0) t->since_ms = step_time_now_ms();
}
// n collectives complete
inline void step_time_end_comm(StepTime* t, int n = 1) {
    if (!t || n == 0) return;
    t->in_flight -= n;
    if (t->in_flight == 0) t->comm_in_flight += step_time_now_ms() - t->since_ms;
}

// a part's time from its construction to the end of its scope, less the collectives' waits inside
// it (those are comm_exposed's or bubble's already)
struct StepSpan {
    StepTime* t;
    double* part;
    double start, waited_before;
    StepSpan(StepTime* time, double* into)
        : t(time), part(into), start(step_time_now_ms()), waited_before(time->comm_exposed + time->bubble) {}
    ~StepSpan() { *part += step_time_now_ms() - start - (t->comm_exposed + t->bubble - waited_before); }
};

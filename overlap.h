/*
overlap.h: the data-parallel gradient reduction overlapped with the backward.

Data parallelism sums each unit's gradient over the replicas (zero.h). Done after the backward,
the reductions and the compute take turns, and the GPU idles while the links work:

    default stream | bwd N | bwd L1 | bwd L0 | bwd E |                          | norm, AdamW
    links                                           | reduce N, L1, L0, E      |

A unit's gradient is complete as soon as its own backward is: its reduction can start then, on a
stream of its own, while the backward goes on to the next unit (llm.c's train_gpt2.cu reduces
each layer on a side stream, PyTorch DDP and Megatron-LM in buckets of whole layers):

    default stream | bwd N | bwd L1   | bwd L0   | bwd E    | wait | norm, AdamW
    comm stream            | reduce N | reduce L1| reduce L0| reduce E |

What stays on the critical path, the exposed communication, is what the reductions have left when
the backward ends:
    exposed = max(0, t_reduce(all units) - t_backward(after the first unit's))
            = t_reduce(E) when each unit's reduction is shorter than the next unit's backward.
The reductions move the same bytes as before (zero.h's formulas): overlap hides time, it saves none.

Order, on a GPU: the comm stream waits for an event recorded on the default stream after unit u's
backward (its gradient is written) before it reduces it; the default stream waits for the comm
stream's event (the reduction is done) before anything reads the sum (the norm, AdamW) or writes the
buffer again. Which buffers, and so which waits, zero.h decides:
    stages 0-1  the last micro-step's units, each once: all-reduced (0) or reduce-scattered into the
                shard (1) in place; the default stream waits once, at the end of the step. Earlier
                micro-steps only add locally: a reduction each would multiply the traffic.
    stage 2     every micro-step's units: reduce-scattered, then added into the shard and cleared, on
                the comm stream. The layers take turns in two gradient buffers, so layer l's reduction
                runs while layer l-1's backward writes the other: at most one reduction in flight, the
                default stream waiting for the one before whenever it starts one (overlap_start's
                one_in_flight), and for all before the next micro-step's backward (whose head writes the
                embedding's buffer again): the last units' reductions run beside the next forward.
    stage 3     the reductions as stage 2's, and the gathers too: on the comm stream (they share the DP
                group's communicator with the reductions, and one communicator's operations must not run
                on two streams at once), each layer's posted while the layer before it computes, into the
                other of two buffers (overlap_post_ahead, zero.h's zero_gather_unit):
                    default stream | fwd L0  | fwd L1  | fwd L2  |
                    comm stream    | gather L1 | gather L2 | gather L3 |
                Its two events: the comm stream waits for the default stream's work issued so far before
                it writes a buffer (the layer two back still reads it), the default stream for the gather
                before the layer runs.
    stages 1-2  and the gathers of the updated parameters, in place, a unit each (zero.h's
                zero_gather_after_update): the embeddings' beside AdamW on the other units, the
                others once AdamW has ended, each into a buffer of its own (overlap_post_ahead), the
                default stream waiting for each before its unit's next forward.
    not here    -ga fp32 under stages 0-1 (the fp32 sum is made after the micro-step); one replica; TP, CP
                and PP collectives, which the next op needs at once (tp.h, cp.h say why).
The CPU build has no streams: a reduction is MPI's non-blocking call (MPI_Iallreduce,
MPI_Ireduce_scatter_block) posted when the unit is ready, polled as later units start (MPI progresses
only inside its calls) and waited for where the sum is needed; what follows it on a GPU's comm
stream (the add into the shard, the clear) runs once it is complete. Through -comm mpi's host staging
a reduction is done when its call returns, so nothing overlaps.
Risk, said where it is taken: NCCL does not promise that two communicators' kernels progress at once.
The DP reductions and ZeRO-3's gathers on the comm stream (in the forward too, in evaluation and
sampling) and TP, CP or PP collectives on the default stream rely on it, as Megatron-LM does; every
rank issues both streams' work in the same order, and -overlap 0 turns it off.

Applied in zero.h: zero_reduce_unit (overlap_start), zero_gather_unit (overlap_post_ahead,
overlap_wait_ahead), zero_gather_after_update (overlap_post_ahead),
zero_begin_micro_step and zero_reduce_step (overlap_finish); Zero holds the Overlap, zero_init
makes it (-overlap, options.h).
*/
#pragma once
// defines: Ahead, Overlap, overlap_init, overlap_free, overlap_start, overlap_finish, overlap_complete_in_flight,
//          overlap_poll, overlap_wait_ahead, overlap_wait_every_ahead, overlap_ahead_holds, overlap_post_ahead
#include <functional>  // defines: std::function
#include <vector>      // defines: std::vector
#include "comm.h"      // defines: Posted, comm_poll_posted, comm_wait_posted

// A collective posted ahead of the compute that reads what it writes (ZeRO-3's gather of the next
// unit, zero.h): into buffer k, waited for where that compute starts
struct Ahead {
    int unit = -1;          // what it fetches; -1: nothing posted
    Posted posted;
#ifdef __CUDACC__
    cudaEvent_t done;       // recorded on the comm stream after it
#endif
};

// the reductions started and not yet waited for, and the collectives posted ahead
struct Overlap {
    bool on;
    Stream stream;       // the comm stream (GPU); nullptr on the CPU build
#ifdef __CUDACC__
    cudaEvent_t written;    // recorded on the default stream when a unit's gradient is complete
    cudaEvent_t reduced[2]; // recorded on the comm stream after each reduction, in turn
    int started;            // reductions started since overlap_init
#endif
    // CPU build: each posted reduction, and the work that follows it once it is complete
    struct InFlight { Posted posted; std::function<void()> then; };
    std::vector<InFlight> in_flight;
    std::vector<Ahead> ahead;  // one per buffer a collective may be posted ahead into
};

// make_stream = false (-plan): on, for the unit buffers zero.h lays out, but nothing made. buffers: how many
// buffers collectives may be posted ahead into (overlap_post_ahead)
inline void overlap_init(Overlap* o, bool on, bool make_stream, int buffers = 0) {
    *o = Overlap{};
    o->on = on;
    if (on) o->ahead.resize(buffers);
#ifdef __CUDACC__
    if (!on || !make_stream) return;
    cudaCheck(cudaStreamCreateWithFlags(&o->stream, cudaStreamNonBlocking));  // no implicit waits on the default one
    cudaCheck(cudaEventCreateWithFlags(&o->written, cudaEventDisableTiming));
    for (cudaEvent_t& e : o->reduced) cudaCheck(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    for (Ahead& a : o->ahead) cudaCheck(cudaEventCreateWithFlags(&a.done, cudaEventDisableTiming));
#endif
}
inline void overlap_free(Overlap* o) {
#ifdef __CUDACC__
    if (!o->stream) { *o = Overlap{}; return; }  // never made (off, or laid out for -plan)
    cudaCheck(cudaStreamDestroy(o->stream));
    cudaCheck(cudaEventDestroy(o->written));
    for (cudaEvent_t e : o->reduced) cudaCheck(cudaEventDestroy(e));
    for (Ahead& a : o->ahead) cudaCheck(cudaEventDestroy(a.done));
#endif
    *o = Overlap{};
}

// the CPU build: every reduction in flight completed, and what follows each done
inline void overlap_complete_in_flight(Overlap* o) {
    for (Overlap::InFlight& f : o->in_flight) {
        comm_wait_posted(&f.posted);
        if (f.then) f.then();
    }
    o->in_flight.clear();
}

// the CPU build: MPI moves a posted collective on only inside its calls, so each is polled as units start
inline void overlap_poll(Overlap* o) {
    for (Overlap::InFlight& f : o->in_flight) comm_poll_posted(&f.posted);
    for (Ahead& a : o->ahead) comm_poll_posted(&a.posted);
}

// Starts a reduction of a unit whose gradient the default stream has just finished: post(posted)
// issues the collectives (comm.h's posted form), then(stream) what must follow them on the comm
// stream (kernels on `stream`). one_in_flight: the default stream waits for the reduction started
// before this one (its buffers are written next).
inline void overlap_start(Overlap* o, const std::function<void(Posted*)>& post,
                          const std::function<void(Stream)>& then, bool one_in_flight) {
#ifdef __CUDACC__
    cudaCheck(cudaEventRecord(o->written, 0));  // the gradient is written...
    cudaCheck(cudaStreamWaitEvent(o->stream, o->written, 0));  // ...before the comm stream reads it
    Posted posted = {{}, o->stream};
    post(&posted);  // NCCL: queued on the comm stream, no MPI request (zero_overlaps: never host-staged)
    if (then) then(o->stream);
    cudaCheck(cudaEventRecord(o->reduced[o->started % 2], o->stream));
    if (one_in_flight && o->started > 0) cudaCheck(cudaStreamWaitEvent(0, o->reduced[(o->started - 1) % 2], 0));
    o->started++;
#else
    if (one_in_flight) overlap_complete_in_flight(o);  // the one before: its buffers are free again
    Overlap::InFlight f = {{{}, nullptr}, nullptr};
    post(&f.posted);
    if (then) f.then = [then] { then(nullptr); };
    o->in_flight.push_back(std::move(f));
    overlap_poll(o);
#endif
}

// the default stream waits for every reduction started: the sums are complete and their buffers free
inline void overlap_finish(Overlap* o) {
    if (!o->on) return;
#ifdef __CUDACC__
    if (o->started > 0) cudaCheck(cudaStreamWaitEvent(0, o->reduced[(o->started - 1) % 2], 0));
#else
    overlap_complete_in_flight(o);
#endif
}

// the default stream waits for the collective posted into buffer k (if one is): what it wrote is there
inline void overlap_wait_ahead(Overlap* o, int k) {
    Ahead& a = o->ahead[k];
    if (a.unit < 0) return;
#ifdef __CUDACC__
    cudaCheck(cudaStreamWaitEvent(0, a.done, 0));
#else
    comm_wait_posted(&a.posted);
#endif
    a.unit = -1;
}
inline void overlap_wait_every_ahead(Overlap* o) {
    for (int k = 0; k < (int)o->ahead.size(); k++) overlap_wait_ahead(o, k);
}
// whether a collective for `unit` is posted into buffer k and not yet waited for
inline bool overlap_ahead_holds(const Overlap* o, int k, int unit) { return o->ahead[k].unit == unit; }

// Posts post(posted), a collective that writes buffer k, for `unit`: on the comm stream once the
// default stream's work issued so far, the buffer's last reader among it, is done (without that
// wait the comm stream would overwrite a layer the forward has not read yet)
inline void overlap_post_ahead(Overlap* o, int k, int unit, const std::function<void(Posted*)>& post) {
    overlap_wait_ahead(o, k);  // one posted into the buffer before: completed first
    Ahead& a = o->ahead[k];
#ifdef __CUDACC__
    cudaCheck(cudaEventRecord(o->written, 0));
    cudaCheck(cudaStreamWaitEvent(o->stream, o->written, 0));
    a.posted = Posted{{}, o->stream};
    post(&a.posted);
    cudaCheck(cudaEventRecord(a.done, o->stream));
#else
    a.posted = Posted{};
    post(&a.posted);
    overlap_poll(o);
#endif
    a.unit = unit;
}

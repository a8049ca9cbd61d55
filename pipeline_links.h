/*
pipeline_links.h: a pipeline stage's sends and receives beside its compute (-overlap 1).

pipeline_run.h's executor runs a stage's actions in their schedule's order: computes (a forward, a
backward, ZB-H1's B and W) and transfers (a send, a receive, or the two paired). With the transfers
on the default stream (-overlap 0) a send holds up the compute after it until the neighbour has
taken the message (a large message cannot be buffered: it waits for the receiver), though that
compute may not need it at all (stage 0 in 1F1B's warmup, the forwards of GPipe):

    -overlap 0  default stream | fwd 4 | send act 4 (until s+1 takes it) | fwd 5 | send act 5 ...
    -overlap 1  default stream | fwd 4 | fwd 5 | ...
                links stream           | send act 4 (until s+1 takes it) | send act 5 ...

With -overlap 1 the transfers run on a stream of their own, the links stream, and a tensor passes
between the two streams through events, only where they share a buffer:
  - a transfer waits for the last compute that touched its buffers: a send's tensor is written, a
    receive's buffer was read by its last reader (the backward of the micro-batch before it in the
    same activation set);
  - a compute waits for the last transfer that touched its buffers: what it reads has arrived,
    what it writes has left (a forward does not overwrite an activation still leaving).
A transfer so costs the stage only what the compute cannot cover: exposed = max(0, t_transfer -
the compute between its post and the compute that needs its buffer). A receive whose sender has
not finished its own compute stays exposed: that is the bubble, which no stream hides
(pipeline_sim.h). Paired transfers (1F1B's steady phase) stay one group, needed by the very next
compute. The links stream runs the transfers in their list's order (one communicator's operations
on one stream, every rank's in the order pipeline.h's pairing argument proves free of deadlock),
so a receive starts only after the transfers listed before it, and where the list puts it decides
what it overlaps: interleaved 1F1B lists each activation shift before the backward, each gradient
shift before the next forward (pipeline.h, Megatron-LM's overlap_p2p_comm), so both travel beside a
compute; 1F1B's paired exchanges stay on its critical path, as in Megatron-LM (the gradient a
backward needs comes from the very stage it sends to). Under ZeRO 2-3 a backward's gradient
leaves while its micro-step's last reductions still run: zero.h waits for them before the next
backward (zero_begin_micro_step), not at this one's end.

Which buffers an action touches (link_buffers): a forward and W (it reads the saved activations)
the activation set's input and output; a backward and B those and the stage's one gradient
buffer; a transfer what it sends and receives (an interleaved gradient lands beside the one leaving
and is copied in on the links stream, after both).

The CPU build has no streams: a transfer is MPI_Isend / MPI_Irecv posted at its action; a compute
first completes the transfers last on its buffers (that wait is the bubble, step_time.h), a
transfer the ones before it on its buffers (in order, as one stream would); MPI progresses only
inside its calls, so the transfers in flight are polled as each compute ends. Through -comm mpi's
host staging a transfer is done when its call returns: links are off there (as overlap.h's).
Risk, said where it is taken: the PP communicator's kernels on their own stream beside the DP comm
stream's and the TP and CP collectives on the default one; NCCL does not promise that two
communicators' kernels progress at once (overlap.h's note). Every rank issues each stream's work in
its schedule's order, and -overlap 0 turns the links off.

Applied in pipeline_run.h: run_schedule (links_compute, links_transfer, links_finish); gpt2.h: GPT2
holds the PipelineLinks, gpt2_build makes it (-overlap, options.h).
*/
#pragma once
// defines: PipelineLinks, pipeline_links_init, pipeline_links_free, link_buffer, link_event, link_wait_transfer,
//          links_compute, links_transfer, links_finish
#include <functional>  // defines: std::function
#include <vector>      // defines: std::vector
#include "comm.h"      // defines: Posted, comm_wait_posted, comm_poll_posted, Stream

struct PipelineLinks {
    bool on = false;
    Stream stream = nullptr;  // the links stream (GPU); nullptr on the CPU build
    // each buffer an action of this step touched: the last compute (its event) and transfer on it
    struct Buffer { const void* at; int compute, transfer; };
    std::vector<Buffer> buffers;
    std::vector<Posted> transfers;  // this step's, in order (the CPU build: each one's MPI requests)
#ifdef __CUDACC__
    std::vector<cudaEvent_t> events;  // recorded after computes and transfers; reused each step
    int recorded = 0;
    std::vector<int> transfer_event;  // each transfer's
#endif
};

// on: -overlap 1 under a pipeline, in the GPU build through NCCL only (host staging waits anyway)
inline void pipeline_links_init(PipelineLinks* L, bool overlap, const Comm* pp, bool make_stream) {
    *L = PipelineLinks{};
#ifdef __CUDACC__
    L->on = overlap && pp->size > 1 && pp->use_nccl;
    if (L->on && make_stream) cudaCheck(cudaStreamCreateWithFlags(&L->stream, cudaStreamNonBlocking));
#else
    (void)make_stream;
    L->on = overlap && pp->size > 1;
#endif
}
inline void pipeline_links_free(PipelineLinks* L) {
#ifdef __CUDACC__
    for (cudaEvent_t e : L->events) cudaCheck(cudaEventDestroy(e));
    if (L->stream) cudaCheck(cudaStreamDestroy(L->stream));
#endif
    *L = PipelineLinks{};
}

inline PipelineLinks::Buffer* link_buffer(PipelineLinks* L, const void* at) {
    for (PipelineLinks::Buffer& b : L->buffers)
        if (b.at == at) return &b;
    L->buffers.push_back({at, -1, -1});
    return &L->buffers.back();
}
#ifdef __CUDACC__
inline int link_event(PipelineLinks* L, Stream stream) {  // an event recorded on `stream` now
    if (L->recorded == (int)L->events.size()) {
        L->events.emplace_back();
        cudaCheck(cudaEventCreateWithFlags(&L->events.back(), cudaEventDisableTiming));
    }
    cudaCheck(cudaEventRecord(L->events[L->recorded], stream));
    return L->recorded++;
}
#endif
// the default stream (the host, on the CPU build) waits for transfer t
inline void link_wait_transfer(PipelineLinks* L, int t) {
#ifdef __CUDACC__
    cudaCheck(cudaStreamWaitEvent(0, L->events[L->transfer_event[t]], 0));
#else
    comm_wait_posted(&L->transfers[t]);
#endif
}

// runs a compute that touches `touched`, after the transfers last on them
inline void links_compute(PipelineLinks* L, const std::vector<const void*>& touched, const std::function<void()>& run) {
    if (!L->on) { run(); return; }
    for (const void* at : touched)
        if (link_buffer(L, at)->transfer >= 0) link_wait_transfer(L, link_buffer(L, at)->transfer);
    run();
#ifdef __CUDACC__
    int e = link_event(L, 0);
    for (const void* at : touched) link_buffer(L, at)->compute = e;
#else
    for (Posted& p : L->transfers) comm_poll_posted(&p);  // MPI moves them on only inside its calls
#endif
}

// posts a transfer that touches `touched` (post(posted): comm.h's sends and receives; NULL: on the
// default stream, done when it returns), after the computes last on them
inline void links_transfer(PipelineLinks* L, const std::vector<const void*>& touched,
                           const std::function<void(Posted*)>& post) {
    if (!L->on) { post(nullptr); return; }
    for (const void* at : touched) {
        PipelineLinks::Buffer* b = link_buffer(L, at);
#ifdef __CUDACC__
        if (b->compute >= 0) cudaCheck(cudaStreamWaitEvent(L->stream, L->events[b->compute], 0));
#else
        if (b->transfer >= 0) comm_wait_posted(&L->transfers[b->transfer]);  // one buffer's in order
#endif
    }
    L->transfers.emplace_back();
    L->transfers.back().stream = L->stream;
    post(&L->transfers.back());
#ifdef __CUDACC__
    L->transfer_event.push_back(link_event(L, L->stream));
#endif
    for (const void* at : touched) link_buffer(L, at)->transfer = (int)L->transfers.size() - 1;
}

// the end of a schedule: the default stream (the host) waits for every transfer. The next step starts
// afresh: its transfers wait for none of this step's computes, which the host has waited for before it
// issues the next step (the gradient norm's read-back, train_step)
inline void links_finish(PipelineLinks* L) {
    if (!L->on) return;
    for (int t = 0; t < (int)L->transfers.size(); t++) link_wait_transfer(L, t);
    L->buffers.clear();
    L->transfers.clear();
#ifdef __CUDACC__
    L->recorded = 0;
    L->transfer_event.clear();
#endif
}

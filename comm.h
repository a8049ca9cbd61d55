/*
comm.h: the collectives between the processes of a run (the processes and their groups:
process_grid.h).

Collectives on device buffers, two backends:
  NCCL  GPU build default: device buffers directly
  MPI   CPU build (device memory is host memory), and the GPU build with -comm mpi,
        which stages through host memory: several ranks can share one GPU, and
        machines without NCCL still work
16-bit floatX has no MPI type: it travels as 2-byte words and sums with a
user-defined MPI_Op that adds in fp32.

Bytes moved: each call adds to the group's ledger what one rank sends in a ring
algorithm, for a buffer of S bytes over p ranks (the usual cost model):
    all-reduce 2 S (p-1)/p    reduce-scatter S (p-1)/p (S = the whole input)
    all-gather S (p-1)/p (S = the whole output)    broadcast S    send S
(a paired send-and-receive books its send).
Scalar all-reduces on the host (loss, norm) are booked apart, under "scalars".
Each group keeps its own ledger, so the log can say what DP and TP each cost.
The host-staged path copies through page-locked buffers that each group keeps and
reuses, and sends a large buffer in messages of at most 1 GiB (MPI counts are int).

Applied through the techniques: zero.h (the replica group), tp.h (the TP group), cp.h (the CP ring),
pipeline_run.h (the PP group); train_gpt.cu: train_step (the tied embedding's group, the loss and
norm scalars); model_file.h and accounting.h (the world).
*/
#pragma once
// defines: comm_all_reduce_sum, comm_all_reduce_max, comm_reduce_scatter_sum,
//          comm_all_gather, comm_broadcast, comm_send, comm_recv, comm_send_recv, comm_all_reduce_scalars,
//          comm_min_over_world, comm_max_over_world, comm_sum_over_world, comm_gatherv_to_root, comm_barrier,
//          HostView, ReduceOp, comm_all_reduce, comm_staging, for_each_chunk,
//          mpi_count, mpi_sum, nccl_check, ring_bytes, comm_progress, mpi_wait, mpi_wait_all,
//          Posted, comm_poll_posted, comm_wait_posted, comm_post, comm_posted_complete, comm_wait, CommFlight
#include <unistd.h>  // defines: usleep
#include "process_grid.h"  // defines: Comm, Collectives, ProcessGrid, make_grid, comm_fail_all, CommKind
#include "watchdog.h"  // defines: watchdog_progress
#include "trace.h"   // defines: TraceSpan (-trace: a span per collective)
#include "step_time.h"  // defines: step_time_begin_comm, step_time_end_comm, step_time_now_ms

// ---------------------------------------------------------------- types

template <typename T> inline MPI_Datatype mpi_type();
template <> inline MPI_Datatype mpi_type<float>() { return MPI_FLOAT; }
template <> inline MPI_Datatype mpi_type<double>() { return MPI_DOUBLE; }
#if !FLOATX_IS_FP32
template <> inline MPI_Datatype mpi_type<floatX>() { return MPI_UINT16_T; }
#endif
template <typename T> inline MPI_Op mpi_sum(const Comm* c) { (void)c; return MPI_SUM; }
#if !FLOATX_IS_FP32
template <> inline MPI_Op mpi_sum<floatX>(const Comm* c) { return c->sum_floatX; }
#endif

#ifdef __CUDACC__
template <typename T> inline ncclDataType_t nccl_type();
template <> inline ncclDataType_t nccl_type<float>() { return ncclFloat; }
#if defined(ENABLE_BF16)
template <> inline ncclDataType_t nccl_type<floatX>() { return ncclBfloat16; }
#elif defined(ENABLE_FP16)
template <> inline ncclDataType_t nccl_type<floatX>() { return ncclHalf; }
#endif
inline void nccl_check(ncclResult_t r, const char* what) {
    if (r != ncclSuccess) fail("%s: %s", what, ncclGetErrorString(r));
}
#endif

// the GPU build's staging buffer `slot` of a group, page-locked, grown when a call needs
// more and reused after: no allocation per call
inline void* comm_staging(Comm* c, int slot, size_t bytes) {
#ifdef __CUDACC__
    if (bytes > c->staging_bytes[slot]) {
        pinned_host_free(c->staging[slot]);
        c->staging[slot] = pinned_host_malloc(bytes);
        c->staging_bytes[slot] = bytes;
    }
#else
    (void)bytes;
#endif
    return c->staging[slot];
}

// a host copy of a device buffer for MPI, in the group's staging buffer `slot`; on the CPU
// build the device buffer itself
template <typename T> struct HostView {
    T* ptr; size_t n;
    HostView(Comm* c, int slot, T* device, size_t count, bool copy_in) : ptr(device), n(count) {
#ifdef __CUDACC__
        ptr = (T*)comm_staging(c, slot, n * sizeof(T));
        if (copy_in) device_to_host(ptr, device, n * sizeof(T));
#else
        (void)c; (void)slot; (void)copy_in;
#endif
    }
    void copy_out(T* device) {
#ifdef __CUDACC__
        host_to_device(device, ptr, n * sizeof(T));
#else
        (void)device;
#endif
    }
};

// the watchdog's progress (watchdog.h): this rank begins `op` in group c
inline void comm_progress(const Comm* c, const char* op) { watchdog_progress(op, c->name); }

inline unsigned long long ring_bytes(size_t bytes, int p) {
    return p <= 1 ? 0 : (unsigned long long)bytes * (p - 1) / p;
}

// MPI counts are int: byte streams and element-wise reductions go in chunks of at most
// c->chunk_bytes (1 GiB); a collective whose per-rank block itself exceeds an int is refused
inline int mpi_count(size_t n, const char* what) {
    if (n > (size_t)INT32_MAX) fail("%s of %zu elements per rank exceeds MPI's int count; use NCCL", what, n);
    return (int)n;
}
template <typename Chunk> inline void for_each_chunk(size_t total, size_t chunk, Chunk visit) {
    if (chunk == 0) chunk = 1;
    for (size_t at = 0; at < total; at += chunk) visit(at, total - at < chunk ? total - at : chunk);
}

// ---------------------------------------------------------------- collectives

// Every MPI operation below is posted (MPI_Iallreduce, MPI_Isend, ...) and finished by mpi_wait,
// not made by MPI's blocking call, which spins on its core until the peers arrive (MPICH's does).
// With more ranks than cores (the tests' np 8 on 2 cores, a laptop) a spinning rank holds the core
// that the rank it waits for needs, and every collective costs the scheduler's time slices:
// measured on 2 cores, 6 steps at np 4 -tp 4 took 12.3 s blocking and 2.2 s so (one rank: 2.5 s).
// mpi_wait polls (MPI progresses a posted operation inside MPI_Test) and, after a short spin
// that ends most waits on a machine with a core per rank, sleeps between polls.
inline void mpi_wait(MPI_Request* request) {
    int done = 0;
    for (int polls = 0;; polls++) {
        MPI_Test(request, &done, MPI_STATUS_IGNORE);
        if (done) return;
        if (polls >= 64) usleep(polls < 1024 ? 10 : 50);  // 10 us, then 50 us once the wait is long
    }
}
inline void mpi_wait_all(MPI_Request* requests, int n) {
    for (int i = 0; i < n; i++) mpi_wait(&requests[i]);
}
// a group's wait, timed into its step split: the bubble for the pipeline's, else comm_exposed
inline void comm_wait(const Comm* c, MPI_Request* requests, int n = 1) {
    double start = c->time ? step_time_now_ms() : 0.0;
    mpi_wait_all(requests, n);
    if (c->time) *(c->pipeline ? &c->time->bubble : &c->time->comm_exposed) += step_time_now_ms() - start;
}
// a blocking collective's flight (step_time.h): from its start to the end of the scope. The
// pipeline's sends and receives are not counted (their waits are the bubble), nor a posted
// collective here (comm_post counts it until its requests complete)
struct CommFlight {
    StepTime* time;
    explicit CommFlight(const Comm* c, bool posted = false)
        : time(c->pipeline || posted ? nullptr : c->time) { step_time_begin_comm(time); }
    ~CommFlight() { step_time_end_comm(time); }
};

enum ReduceOp { REDUCE_SUM, REDUCE_MAX };

// A posted collective (overlap.h) is started by the call and finished later, by comm_wait_posted:
// through NCCL it is queued on `stream` (the caller orders that stream against the default one
// with events); on the CPU build it is MPI's non-blocking call, whose requests wait in `requests`.
// Through -comm mpi's host staging it is done when the call returns (the staging waits anyway).
// Without a Posted (NULL), a collective is done, as far as the default stream is concerned, when
// the call returns.
struct Posted {
    std::vector<MPI_Request> requests;
    Stream stream;
    const Comm* comm = nullptr;  // the CPU build: whose requests they are
    StepTime* time = nullptr;    // the step split that counted them as begun (step_time.h), if any
    int collectives = 0;         // begun, in flight until the requests complete
};
inline void comm_post(const Comm* c, Posted* p) {
    p->comm = c;
    p->time = c->time;  // (one posted before the split is set is not counted: nor its end)
    p->collectives++;
    step_time_begin_comm(c->time);
}
inline void comm_posted_complete(Posted* p) {
    step_time_end_comm(p->time, p->collectives);
    p->requests.clear();
    p->collectives = 0;
}
// MPI moves a posted operation on only inside its calls: a poll between units keeps it going
inline void comm_poll_posted(Posted* p) {
    int done = 0;
    if (p->requests.empty()) return;
    MPI_Testall((int)p->requests.size(), p->requests.data(), &done, MPI_STATUSES_IGNORE);
    if (done) comm_posted_complete(p);
}
inline void comm_wait_posted(Posted* p) {
    if (p->requests.empty()) return;
    comm_wait(p->comm, p->requests.data(), (int)p->requests.size());
    comm_posted_complete(p);
}

// buf (n) = sum or max over the group, in place
template <typename T> inline void comm_all_reduce(Comm* c, T* buf, size_t n, ReduceOp op, Posted* posted = nullptr) {
    if (c->size <= 1) return;
    c->bytes[COMM_ALL_REDUCE] += 2 * ring_bytes(n * sizeof(T), c->size);
    comm_progress(c, op == REDUCE_MAX ? "an all-reduce (max)" : "an all-reduce");
    TraceSpan span(
        c->trace, [&] { return comm_span_name(c, op == REDUCE_MAX ? "all-reduce max" : "all-reduce"); }, "collective",
        c->world_rank);
#ifdef __CUDACC__
    if (c->use_nccl) {
        ncclRedOp_t nccl_op = op == REDUCE_SUM ? ncclSum : ncclMax;
        nccl_check(ncclAllReduce(buf, buf, n, nccl_type<T>(), nccl_op, c->nccl, posted ? posted->stream : 0),
                   "ncclAllReduce");
        return;
    }
    posted = nullptr;  // host-staged: done when the call returns
#endif
    CommFlight flight(c, posted != nullptr);  // posted: in flight until comm_wait_posted
    if (posted) comm_post(c, posted);
    HostView<T> h(c, 0, buf, n, true);
    MPI_Op mpi_op = op == REDUCE_MAX ? MPI_MAX : mpi_sum<T>(c);
    for_each_chunk(n, c->chunk_bytes / sizeof(T), [&](size_t at, size_t count) {
        MPI_Request r;
        MPI_Iallreduce(MPI_IN_PLACE, h.ptr + at, (int)count, mpi_type<T>(), mpi_op, c->mpi, &r);
        if (posted) posted->requests.push_back(r);
        else comm_wait(c, &r);
    });
    h.copy_out(buf);
}
template <typename T>
inline void comm_all_reduce_sum(Comm* c, T* buf, size_t n, Posted* posted = nullptr) {
    comm_all_reduce(c, buf, n, REDUCE_SUM, posted);
}
// fp32 only (MPI_MAX does not know 16-bit floatX)
inline void comm_all_reduce_max(Comm* c, float* buf, size_t n) { comm_all_reduce(c, buf, n, REDUCE_MAX); }

// recv (n) = this rank's n-element block of the sum of every rank's send (n * size)
template <typename T> inline void comm_reduce_scatter_sum(Comm* c, const T* send, T* recv, size_t n,
                                                          Posted* posted = nullptr) {
    c->bytes[COMM_REDUCE_SCATTER] += ring_bytes(n * c->size * sizeof(T), c->size);
    if (c->size == 1) { if (recv != send) device_to_device(recv, send, n * sizeof(T)); return; }
    comm_progress(c, "a reduce-scatter");
    TraceSpan span(c->trace, [&] { return comm_span_name(c, "reduce-scatter"); }, "collective", c->world_rank);
#ifdef __CUDACC__
    if (c->use_nccl) {
        nccl_check(ncclReduceScatter(send, recv, n, nccl_type<T>(), ncclSum, c->nccl, posted ? posted->stream : 0),
                   "ncclReduceScatter");
        return;
    }
    posted = nullptr;  // host-staged: done when the call returns
#endif
    CommFlight flight(c, posted != nullptr);  // posted: in flight until comm_wait_posted
    if (posted) comm_post(c, posted);
    HostView<T> in(c, 0, (T*)send, n * c->size, true), out(c, 1, recv, n, false);
    MPI_Request r;
    int count = mpi_count(n, "reduce-scatter");
    MPI_Ireduce_scatter_block(in.ptr, out.ptr, count, mpi_type<T>(), mpi_sum<T>(c), c->mpi, &r);
    if (posted) posted->requests.push_back(r);
    else comm_wait(c, &r);
    out.copy_out(recv);
}

// recv (n * size) = every rank's send (n), in rank order; posted: overlap.h
template <typename T> inline void comm_all_gather(Comm* c, const T* send, T* recv, size_t n, Posted* posted = nullptr) {
    c->bytes[COMM_ALL_GATHER] += ring_bytes(n * c->size * sizeof(T), c->size);
    if (c->size == 1) { if (recv != send) device_to_device(recv, send, n * sizeof(T)); return; }
    comm_progress(c, "an all-gather");
    TraceSpan span(c->trace, [&] { return comm_span_name(c, "all-gather"); }, "collective", c->world_rank);
#ifdef __CUDACC__
    if (c->use_nccl) {
        nccl_check(ncclAllGather(send, recv, n, nccl_type<T>(), c->nccl, posted ? posted->stream : 0), "ncclAllGather");
        return;
    }
    posted = nullptr;  // host-staged: done when the call returns
#endif
    CommFlight flight(c, posted != nullptr);  // posted: in flight until comm_wait_posted
    if (posted) comm_post(c, posted);
    int count = mpi_count(n, "all-gather");
    MPI_Request r;
    bool in_place = send == recv + c->rank * n;  // this rank's block already sits in recv
    HostView<T> in(c, 0, (T*)send, in_place ? 0 : n, !in_place), out(c, 1, recv, n * c->size, in_place);
    MPI_Iallgather(in_place ? MPI_IN_PLACE : in.ptr, in_place ? 0 : count, in_place ? MPI_DATATYPE_NULL : mpi_type<T>(),
                   out.ptr, count, mpi_type<T>(), c->mpi, &r);
    if (posted) posted->requests.push_back(r);
    else comm_wait(c, &r);
    out.copy_out(recv);
}

template <typename T> inline void comm_broadcast(Comm* c, T* buf, size_t n, int root) {
    if (c->size <= 1) return;
    if (c->rank == root) c->bytes[COMM_BROADCAST] += n * sizeof(T);
    comm_progress(c, "a broadcast");
    TraceSpan span(c->trace, [&] { return comm_span_name(c, "broadcast"); }, "collective", c->world_rank);
#ifdef __CUDACC__
    if (c->use_nccl) {
        nccl_check(ncclBroadcast(buf, buf, n, nccl_type<T>(), root, c->nccl, 0), "ncclBroadcast");
        return;
    }
#endif
    CommFlight flight(c);
    HostView<T> h(c, 0, buf, n, c->rank == root);
    for_each_chunk(n * sizeof(T), c->chunk_bytes, [&](size_t at, size_t count) {
        MPI_Request r;
        MPI_Ibcast((char*)h.ptr + at, (int)count, MPI_BYTE, root, c->mpi, &r);
        comm_wait(c, &r);
    });
    h.copy_out(buf);
}

// send (n) to send_peer while receiving recv (n) from recv_peer (either NULL: that half only): both
// are posted before either is waited on, so two neighbours exchanging at the same moment cannot
// deadlock (pipeline.h)
template <typename T>
inline void comm_send_recv(Comm* c, const T* send, int send_peer, T* recv, int recv_peer, size_t n,
                           Posted* posted = nullptr) {
    if (send) c->bytes[COMM_SEND] += n * sizeof(T);
    comm_progress(c, send && recv ? "a send and receive" : send ? "a send" : "a receive");
#ifdef __CUDACC__
    if (c->use_nccl) {
        Stream stream = posted ? posted->stream : 0;
        nccl_check(ncclGroupStart(), "ncclGroupStart");
        if (send) nccl_check(ncclSend(send, n, nccl_type<T>(), send_peer, c->nccl, stream), "ncclSend");
        if (recv) nccl_check(ncclRecv(recv, n, nccl_type<T>(), recv_peer, c->nccl, stream), "ncclRecv");
        nccl_check(ncclGroupEnd(), "ncclGroupEnd");
        return;
    }
    posted = nullptr;  // host-staged: done when the call returns
#endif
    CommFlight flight(c);
    if (posted) posted->comm = c;
    HostView<T> out(c, 0, (T*)send, send ? n : 0, send != nullptr), in(c, 1, recv, recv ? n : 0, false);
    for_each_chunk(n * sizeof(T), c->chunk_bytes, [&](size_t at, size_t count) {
        MPI_Request r[2];
        int k = 0;
        if (recv) MPI_Irecv((char*)in.ptr + at, (int)count, MPI_BYTE, recv_peer, 0, c->mpi, &r[k++]);
        if (send) MPI_Isend((char*)out.ptr + at, (int)count, MPI_BYTE, send_peer, 0, c->mpi, &r[k++]);
        if (posted) posted->requests.insert(posted->requests.end(), r, r + k);
        else comm_wait(c, r, k);
    });
    if (recv) in.copy_out(recv);
}

// The pipeline's sends and receives (pipeline.h). posted (pipeline_links.h): through NCCL queued on
// posted->stream; on the CPU build MPI's requests wait in posted->requests, for pipeline_links.h to
// wait for where a compute needs the tensor (its wait is the bubble, as the blocking one's)
template <typename T> inline void comm_send(Comm* c, const T* buf, size_t n, int peer, Posted* posted = nullptr) {
    comm_send_recv(c, buf, peer, (T*)nullptr, -1, n, posted);
}
template <typename T> inline void comm_recv(Comm* c, T* buf, size_t n, int peer, Posted* posted = nullptr) {
    comm_send_recv(c, (const T*)nullptr, -1, buf, peer, n, posted);
}

// host doubles summed over the group (losses, squared norms): small, always through MPI
inline void comm_all_reduce_scalars(Comm* c, double* values, int n) {
    c->bytes[COMM_SCALARS] += 2 * ring_bytes(n * sizeof(double), c->size);
    comm_progress(c, "an all-reduce of scalars");
    if (c->size <= 1) return;
    CommFlight flight(c);
    MPI_Request r;
    MPI_Iallreduce(MPI_IN_PLACE, values, n, MPI_DOUBLE, MPI_SUM, c->mpi, &r);
    comm_wait(c, &r);
}

inline void comm_barrier(Comm* c) {
    comm_progress(c, "a barrier");
    CommFlight flight(c);
    MPI_Request r;
    MPI_Ibarrier(c->mpi, &r);
    comm_wait(c, &r);
}

// the smallest of every rank's value (which checkpoint all ranks have); before the groups exist
inline int comm_min_over_world(int value) {
    MPI_Request r;
    MPI_Iallreduce(MPI_IN_PLACE, &value, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &r);
    mpi_wait(&r);
    return value;
}
// the largest (the worst stage's pipeline bubble)
inline double comm_max_over_world(double value) {
    MPI_Request r;
    MPI_Iallreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, &r);
    mpi_wait(&r);
    return value;
}
// the sum (every rank's peak FLOP/s, mfu.h)
inline double comm_sum_over_world(double value) {
    MPI_Request r;
    MPI_Iallreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &r);
    mpi_wait(&r);
    return value;
}

// host vectors of any length (each under 2^31 elements, and all of them together) to the
// group's rank 0, in rank order (empty elsewhere): model parts, a trace's events, the accounting
template <typename T> inline std::vector<std::vector<T>> comm_gatherv_to_root(Comm* c, const std::vector<T>& mine) {
    if (c->size == 1) return {mine};
    if (mine.size() > (size_t)INT32_MAX) fail("comm_gatherv_to_root: %zu elements exceed MPI's int count", mine.size());
    int length = (int)mine.size();
    std::vector<int> lengths(c->rank == 0 ? c->size : 0), at(c->size, 0);
    MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, c->mpi);
    size_t total = 0;
    for (int r = 0; r < (int)lengths.size(); r++) { at[r] = (int)total; total += lengths[r]; }
    if (total > (size_t)INT32_MAX) fail("comm_gatherv_to_root: %zu elements in all exceed MPI's int count", total);
    MPI_Datatype element;
    MPI_Type_contiguous((int)sizeof(T), MPI_BYTE, &element);
    MPI_Type_commit(&element);
    std::vector<T> all(total);
    MPI_Gatherv(mine.data(), length, element, all.data(), lengths.data(), at.data(), element, 0, c->mpi);
    MPI_Type_free(&element);
    std::vector<std::vector<T>> out;
    for (int r = 0; r < (int)lengths.size(); r++)
        out.emplace_back(all.begin() + at[r], all.begin() + at[r] + lengths[r]);
    return out;
}

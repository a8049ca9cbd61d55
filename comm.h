/*
comm.h: the processes of a run, the groups they form, and the collectives between them.

Process grid: world = dp * cp * tp * pp, with
    rank = ((pp_rank * dp + dp_rank) * cp + cp_rank) * tp + tp_rank.
TP is fastest-varying, so a tensor-parallel group is tp consecutive ranks (one node),
then CP (context parallelism, cp.h: the ring of ranks that share each sequence), then DP;
PP slowest. Each rank belongs to one group of each kind; a Comm is one such group:
    dp  the ranks that hold the same parameters: same tp_rank and pp_rank, dp x cp of
        them (data parallelism's replicas, and the cp ranks, which see other tokens of
        the same sequences: ZeRO shards over them and sums their gradients, as Megatron-LM's
        data-parallel group with context parallelism does)
    cp  the ring: same dp_rank, tp_rank and pp_rank (size 1 without -cp)
    tp, pp  same everything else
The first and last rank of each PP group also form an embedding group (pipeline.h: they
both hold the tied wte); the stages between belong to none (size 0).

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
The local rank, which picks the GPU, comes from MPI itself (MPI_COMM_TYPE_SHARED),
so it is right under mpirun of MPICH or OpenMPI and under srun.

Applied in train_gpt.cu: main (comm_start, comm_init), and through the techniques: zero.h
(the DP group), tp.h (the TP group), cp.h (the CP ring), pipeline.h (the PP group), train_step (the tied
embedding's group, the loss and norm scalars); model_file.h and accounting.h (the world).
*/
#pragma once
// defines: ProcessGrid, Comm, Collectives, comm_start, comm_ranks_on_node, comm_ranks_on_node_with, comm_init,
//          comm_finalize, comm_shutdown, comm_all_reduce_sum, comm_all_reduce_max, comm_reduce_scatter_sum,
//          comm_all_gather, comm_broadcast, comm_send, comm_recv, comm_send_recv, comm_all_reduce_scalars,
//          comm_min_over_world, comm_max_over_world, comm_sum_over_world, comm_gatherv_to_root, comm_barrier,
//          comm_fail_all, comm_fail_if_any, comm_use_nccl, CommKind, HostView, ReduceOp, comm_abort_job,
//          comm_all_reduce, comm_group_init, comm_kind_names, comm_nccl_async_error, comm_set_trace,
//          comm_single_process, comm_span_name, comm_staging, comm_groups, floatX_sum_op, for_each_chunk, make_grid,
//          mpi_count, mpi_sum, nccl_check, ring_bytes, comm_progress, comm_abort_nccl, mpi_wait, mpi_wait_all,
//          Posted, comm_poll_posted, comm_wait_posted, comm_post, comm_posted_complete, comm_wait, CommFlight,
//          comm_set_step_time
#include <mpi.h>     // defines: MPI_Init, MPI_Comm_split, MPI_Iallreduce, MPI_Test, ...
#include <vector>    // defines: std::vector
#include <string>    // defines: std::string
#include <string.h>  // defines: strcmp
#include <unistd.h>  // defines: usleep
#include "base.h"    // defines: fail, fail_hook, device_to_host, host_to_device
#include "watchdog.h"  // defines: watchdog_progress, watchdog
#include "trace.h"   // defines: Trace, TraceSpan (-trace: a span per collective)
#include "step_time.h"  // defines: StepTime, step_time_begin_comm, step_time_end_comm, step_time_now_ms
#ifdef __CUDACC__
#include <nccl.h>    // defines: ncclComm_t, ncclAllReduce, ...
#endif

enum CommKind { COMM_ALL_REDUCE, COMM_REDUCE_SCATTER, COMM_ALL_GATHER, COMM_BROADCAST, COMM_SEND, COMM_SCALARS,
                NUM_COMM_KINDS };
[[maybe_unused]] static const char* comm_kind_names[NUM_COMM_KINDS] = {"all_reduce", "reduce_scatter", "all_gather",
                                                                       "broadcast", "send", "scalars"};

struct ProcessGrid {
    int world, rank, local_rank;
    int dp, tp, pp, cp;
    int dp_rank, tp_rank, pp_rank, cp_rank;
    int replicas, replica_rank;  // the dp group: dp * cp ranks holding the same parameters, and this one's place
};

// rank = ((pp_rank * dp + dp_rank) * cp + cp_rank) * tp + tp_rank
inline ProcessGrid make_grid(int world, int rank, int tp, int pp, int cp = 1) {
    ProcessGrid g = {world, rank, 0, world / (tp * pp * cp), tp, pp, cp, 0, 0, 0, 0, 0, 0};
    g.tp_rank = rank % tp;
    g.cp_rank = (rank / tp) % cp;
    g.dp_rank = (rank / (tp * cp)) % g.dp;
    g.pp_rank = rank / (tp * cp * g.dp);
    g.replicas = g.dp * cp;
    g.replica_rank = g.dp_rank * cp + g.cp_rank;
    return g;
}

struct Comm {
    MPI_Comm mpi;
    int size, rank;                 // size 0: this rank is not in such a group (an embedding group's middle stages)
    bool use_nccl;
    const char* name;               // "dp", "tp", ...: the trace's span names
    Trace* trace;                   // -trace: where this group's collectives record their spans (NULL: off)
    int world_rank;                 // the trace's track
    StepTime* time;                 // the CPU build's step split: where its waits count (NULL: untimed)
    bool pipeline;                  // the pp group: its waits are the bubble, not communication
    size_t chunk_bytes;             // the largest single MPI message (MPI counts are int)
    void* staging[2];               // GPU build, -comm mpi: page-locked host copies, reused
    size_t staging_bytes[2];
#ifdef __CUDACC__
    ncclComm_t nccl;
#endif
    MPI_Op sum_floatX;              // MPI's sum of 16-bit floatX, which MPI has no type for (comm_init makes it)
    unsigned long long bytes[NUM_COMM_KINDS];  // the ledger: bytes this rank sent, by kind
};

struct Collectives {
    ProcessGrid grid;
    Comm world, dp, tp, pp, cp, embedding;
};
// every group, to set or free them all alike
inline std::vector<Comm*> comm_groups(Collectives* c) {
    return {&c->world, &c->dp, &c->tp, &c->pp, &c->cp, &c->embedding};
}
// the CPU build's step split (step_time.h): every group's waits and flights count into `time`.
// The GPU build's host clock sees launches, not kernels: its groups stay untimed
inline void comm_set_step_time(Collectives* c, StepTime* time) {
#ifdef __CUDACC__
    (void)c, (void)time;
#else
    for (Comm* g : comm_groups(c)) g->time = time;
    c->pp.pipeline = true;
#endif
}

// ---------------------------------------------------------------- start-up

// every rank calls this with the same condition: each prints the message, then all exit 1
[[noreturn]] __attribute__((format(printf, 1, 2))) inline void comm_fail_all(const char* format, ...) {
    va_list args;
    va_start(args, format);
    print_error_line(format, args);
    va_end(args);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    exit(EXIT_FAILURE);
}

// a problem some ranks may find and others not (a file only rank 0 opens, a directory one node
// cannot write): the lowest rank whose `problem` is not "" names it on every rank, which all exit 1
inline void comm_fail_if_any(const char* problem) {
    int world, rank;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int mine = problem[0] ? rank : world, first = world;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (first == world) return;
    char line[1024];
    snprintf(line, sizeof(line), "%s", problem);
    MPI_Bcast(line, sizeof(line), MPI_CHAR, first, MPI_COMM_WORLD);
    comm_fail_all("%s", line);
}

inline void floatX_sum_op(void* in, void* inout, int* len, MPI_Datatype*) {
    floatX* a = (floatX*)in;
    floatX* b = (floatX*)inout;
    for (int i = 0; i < *len; i++) b[i] = from_float(to_float(a[i]) + to_float(b[i]));
}

inline void comm_group_init(Comm* c, MPI_Comm mpi, bool use_nccl, const char* name) {
    *c = Comm{};
    c->mpi = mpi;
    c->name = name;
    c->chunk_bytes = (size_t)1 << 30;
    MPI_Comm_rank(MPI_COMM_WORLD, &c->world_rank);
    if (mpi == MPI_COMM_NULL) { c->rank = -1; return; }
    MPI_Comm_size(mpi, &c->size);
    MPI_Comm_rank(mpi, &c->rank);
    c->use_nccl = use_nccl && c->size > 1;
#ifdef __CUDACC__
    if (c->use_nccl) {  // rank 0 of the group makes the id, MPI carries it to the others
        ncclUniqueId id;
        ncclResult_t r = c->rank == 0 ? ncclGetUniqueId(&id) : ncclSuccess;
        if (r != ncclSuccess) fail("ncclGetUniqueId: %s", ncclGetErrorString(r));
        MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, mpi);
        r = ncclCommInitRank(&c->nccl, c->size, id, c->rank);
        if (r != ncclSuccess) fail("ncclCommInitRank (%s group of %d): %s", name, c->size, ncclGetErrorString(r));
    }
#else
    if (use_nccl) fail("NCCL is the GPU build's backend; the CPU build uses -comm mpi");
#endif
}

// -comm: "nccl", "mpi" or "default" (NCCL on the GPU build, MPI on the CPU build)
inline bool comm_use_nccl(const char* choice) {
    if (strcmp(choice, "default") != 0 && strcmp(choice, "nccl") != 0 && strcmp(choice, "mpi") != 0)
        comm_fail_all("-comm expects nccl or mpi, got '%s'", choice);
#ifdef __CUDACC__
    return strcmp(choice, "mpi") != 0;
#else
    if (strcmp(choice, "nccl") == 0) comm_fail_all("NCCL is the GPU build's backend; the CPU build uses -comm mpi");
    return false;
#endif
}

// fail()'s hook: with several ranks the whole job goes down (MPI_Abort), so no rank
// waits forever in a collective for one that failed
inline void comm_abort_job() {
    int world = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (world == 1) return;
    usleep(500 * 1000);  // let the launcher forward this rank's message before the abort tears the job down
    MPI_Abort(MPI_COMM_WORLD, EXIT_FAILURE);
}

#ifdef __CUDACC__
// the watchdog's last act before it ends the rank (watchdog.h): every communicator's work aborted
inline void comm_abort_nccl(void* context) {
    for (Comm* g : comm_groups((Collectives*)context))
        if (g->use_nccl) ncclCommAbort(g->nccl);
}
#endif

// MPI's start-up and the local rank; the grid comes later, once tp and pp are known
inline void comm_start(int* argc, char*** argv, int* world, int* rank, int* local_rank) {
    MPI_Init(argc, argv);
    fail_hook() = comm_abort_job;
    MPI_Comm_size(MPI_COMM_WORLD, world);
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    // a launcher that started N ranks, each of which sees a world of 1: the program was built with
    // another MPI than the launcher's (Open MPI's mpirun, MPICH's trainer). N single-rank runs
    // writing the same files would follow: one line each instead
    const char* launcher_sizes[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_STEP_NUM_TASKS"};
    for (const char* name : launcher_sizes)
        if (*world == 1 && getenv(name) && atoi(getenv(name)) > 1)
            fail(
                "MPI sees 1 rank but the launcher started %s=%s: this program was built with another MPI than the "
                "launcher "
                "that ran it; rebuild with that MPI's mpicxx (make MPICXX=...) or launch with this MPI's mpirun",
                name, getenv(name));
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, *rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, local_rank);
    MPI_Comm_free(&node);
}

// how many ranks of this rank's node (MPI_COMM_TYPE_SHARED) give the same `key`, this one included:
// with the GPU's PCI id, the ranks on one GPU
inline int comm_ranks_on_node_with(int key) {
    MPI_Comm node;
    int size = 1, same = 0;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_size(node, &size);
    std::vector<int> keys(size);
    MPI_Allgather(&key, 1, MPI_INT, keys.data(), 1, MPI_INT, node);
    MPI_Comm_free(&node);
    for (int k : keys) same += k == key;
    return same;
}
// how many ranks run on this rank's node
inline int comm_ranks_on_node() { return comm_ranks_on_node_with(0); }

#ifdef __CUDACC__
// base.h's async_error_watch: the first NCCL communicator of `context` (a Collectives) that reports
// an asynchronous error (a peer gone, a link down), as a line; NULL while all is well
inline const char* comm_nccl_async_error(void* context) {
    Collectives* c = (Collectives*)context;
    static char message[256];
    for (Comm* g : comm_groups(c)) {
        ncclResult_t state = ncclSuccess;
        if (!g->use_nccl || ncclCommGetAsyncError(g->nccl, &state) != ncclSuccess) continue;
        if (state == ncclSuccess || state == ncclInProgress) continue;
        snprintf(message, sizeof(message), "NCCL failed in the %s group: %s", g->name, ncclGetErrorString(state));
        return message;
    }
    return nullptr;
}
#endif

// the grid's groups; every rank must call it with the same tp, pp, cp and backend
inline void comm_init(Collectives* c, int world, int rank, int local_rank, int tp, int pp, bool use_nccl, int cp = 1) {
    if (tp < 1 || pp < 1 || cp < 1 || world % (tp * pp * cp) != 0)
        comm_fail_all("the grid does not fit the world: %d ranks is not a multiple of tp * pp * cp = %d * %d * %d",
                      world, tp, pp, cp);
    c->grid = make_grid(world, rank, tp, pp, cp);
    c->grid.local_rank = local_rank;
    const ProcessGrid& g = c->grid;
    int data = g.dp_rank * cp + g.cp_rank;  // the ranks of a pipeline and a TP group see one sequence slice
    MPI_Comm dp, tpc, ppc, cpc, emb;
    MPI_Comm_split(MPI_COMM_WORLD, g.pp_rank * tp + g.tp_rank, g.replica_rank, &dp);    // same (pp, tp): dp x cp
    MPI_Comm_split(MPI_COMM_WORLD, g.pp_rank * g.replicas + data, g.tp_rank, &tpc);      // same (pp, dp, cp)
    MPI_Comm_split(MPI_COMM_WORLD, data * tp + g.tp_rank, g.pp_rank, &ppc);              // same (dp, cp, tp)
    // same (pp, dp, tp)
    MPI_Comm_split(MPI_COMM_WORLD, (g.pp_rank * g.dp + g.dp_rank) * tp + g.tp_rank, g.cp_rank, &cpc);
    bool ends = g.pp_rank == 0 || g.pp_rank == pp - 1;                                   // first and last stage
    MPI_Comm_split(MPI_COMM_WORLD, ends ? data * tp + g.tp_rank : MPI_UNDEFINED, g.pp_rank, &emb);
    comm_group_init(&c->world, MPI_COMM_WORLD, false, "world");  // host data only (files, logs, scalars): MPI
    comm_group_init(&c->dp, dp, use_nccl, "dp");
    comm_group_init(&c->tp, tpc, use_nccl, "tp");
    comm_group_init(&c->pp, ppc, use_nccl, "pp");
    comm_group_init(&c->cp, cpc, use_nccl, "cp");
    comm_group_init(&c->embedding, emb, use_nccl, "embedding");
    MPI_Op sum_floatX;  // one MPI operation, which every group's 16-bit sums use
    MPI_Op_create(floatX_sum_op, 1, &sum_floatX);
    for (Comm* group : comm_groups(c)) group->sum_floatX = sum_floatX;
#ifdef __CUDACC__
    async_error_watch() = AsyncErrorWatch{comm_nccl_async_error, c};  // waits on the GPU poll NCCL's errors
    watchdog().before_exit = comm_abort_nccl;                          // a hang ends NCCL's work first
    watchdog().context = c;
#endif
}

// -trace: every group's collectives record spans into `trace` (NULL: none)
inline void comm_set_trace(Collectives* c, Trace* trace) {
    for (Comm* g : comm_groups(c)) g->trace = trace;
}
inline std::string comm_span_name(const Comm* c, const char* what) {
    return std::string(what) + " " + (c->name ? c->name : "");
}

// the end of a run that never built the groups (-h)
inline void comm_shutdown() { MPI_Finalize(); }

inline void comm_finalize(Collectives* c) {
#ifdef __CUDACC__
    async_error_watch() = AsyncErrorWatch{nullptr, nullptr};
    for (Comm* g : comm_groups(c)) {
        if (g->use_nccl) ncclCommDestroy(g->nccl);
        for (void* s : g->staging) pinned_host_free(s);
    }
#endif
    MPI_Op_free(&c->world.sum_floatX);  // the others hold the same handle
    MPI_Finalize();
}

// one process without MPI (unit tests): every group has one rank and no collective calls MPI
inline Collectives comm_single_process() {
    Collectives c = {};
    c.grid = make_grid(1, 0, 1, 1);
    for (Comm* g : comm_groups(&c)) { *g = Comm{}; g->size = 1; g->chunk_bytes = (size_t)1 << 30; }
    return c;
}

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
    p->time = c->time;  // (a gather posted at load, before the split is set, is not counted: nor its end)
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

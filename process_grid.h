/*
process_grid.h: the processes of a run and the groups they form (the collectives between them: comm.h).

Process grid: world = dp * cp * tp * pp, with
    rank = ((pp_rank * dp + dp_rank) * cp + cp_rank) * tp + tp_rank.
TP is fastest-varying, so a tensor-parallel group is tp consecutive ranks (one node),
then CP (context parallelism, cp.h: the ring of ranks that share each sequence), then DP;
PP slowest. Each rank belongs to one group of each kind; a Comm is one such group:
    replicas  the ranks that hold the same parameters, same tp_rank and pp_rank,
        dp x cp of them (data parallelism's replicas, and the cp ranks, which see other tokens
        of the same sequences: ZeRO shards over them and sums their gradients, as Megatron-LM's
        data-parallel group with context parallelism does); named "dp" in logs and traces
    cp  the ring: same dp_rank, tp_rank and pp_rank (size 1 without -cp)
    tp, pp  same everything else
The first and last rank of each PP group also form an embedding group (pipeline.h: they
both hold the tied wte); the stages between belong to none (size 0). For rank 5 of
dp 2 x tp 2 x pp 2 (cp 1): tp_rank 1, dp_rank 0, pp_rank 1; its tp group {4, 5}, its dp
group (replicas) {5, 7}, its pp group {1, 5}.

Each group gets an MPI communicator (MPI_Comm_split) and, in the GPU build, an NCCL one
(its rank 0 makes the id, MPI carries it to the others). The local rank, which picks the
GPU, comes from MPI itself (MPI_COMM_TYPE_SHARED), so it is right under mpirun of MPICH or
OpenMPI and under srun. A problem found by some ranks only ends every rank with one line
(comm_fail_if_any); fail() anywhere ends the whole job (comm_abort_job), so no rank waits
forever in a collective for one that failed.

Applied in train_gpt.cu: main (comm_start, comm_finalize), start_collectives (comm_init); the groups are used
through comm.h's collectives by every technique.
*/
#pragma once
// defines: ProcessGrid, Comm, Collectives, comm_start, comm_ranks_on_node, comm_ranks_on_node_with, comm_init,
//          comm_finalize, comm_shutdown, comm_fail_all, comm_fail_if_any, comm_use_nccl, CommKind, comm_abort_job,
//          comm_group_init, comm_kind_names, comm_nccl_async_error, comm_set_trace, comm_single_process,
//          comm_span_name, comm_groups, floatX_sum_op, make_grid, comm_abort_nccl, comm_set_step_time,
//          nccl_pin_sum_order
#include <mpi.h>     // defines: MPI_Init, MPI_Comm_split, MPI_Comm_rank, ...
#include <vector>    // defines: std::vector
#include <string>    // defines: std::string
#include <string.h>  // defines: strcmp
#include <stdlib.h>  // defines: setenv, getenv
#include "base.h"    // defines: fail, fail_hook, print_error_line, pinned_host_free
#include "watchdog.h"  // defines: watchdog
#include "trace.h"   // defines: Trace
#include "step_time.h"  // defines: StepTime
#ifdef __CUDACC__
#include <nccl.h>    // defines: ncclComm_t, ncclCommInitRank, ...
#endif

enum CommKind { COMM_ALL_REDUCE, COMM_REDUCE_SCATTER, COMM_ALL_GATHER, COMM_BROADCAST, COMM_SEND, COMM_SCALARS,
                NUM_COMM_KINDS };
[[maybe_unused]] static const char* comm_kind_names[NUM_COMM_KINDS] = {"all_reduce", "reduce_scatter", "all_gather",
                                                                       "broadcast", "send", "scalars"};

struct ProcessGrid {
    int world, rank, local_rank;
    int dp, tp, pp, cp;
    int dp_rank, tp_rank, pp_rank, cp_rank;
    int replicas, replica_rank;  // the replica group: dp * cp ranks holding the same parameters, and this one's place
};

// rank = ((pp_rank * dp + dp_rank) * cp + cp_rank) * tp + tp_rank
inline ProcessGrid make_grid(int world, int rank, int tp, int pp, int cp = 1) {
    ProcessGrid grid = {world, rank, 0, world / (tp * pp * cp), tp, pp, cp, 0, 0, 0, 0, 0, 0};
    grid.tp_rank = rank % tp;
    grid.cp_rank = (rank / tp) % cp;
    grid.dp_rank = (rank / (tp * cp)) % grid.dp;
    grid.pp_rank = rank / (tp * cp * grid.dp);
    grid.replicas = grid.dp * cp;
    grid.replica_rank = grid.dp_rank * cp + grid.cp_rank;
    return grid;
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
    Comm world;
    Comm replicas;  // the replica group: the grid.replicas = dp x cp ranks that hold the same parameters
    Comm tp, pp, cp, embedding;
};
// every group, to set or free them all alike
inline std::vector<Comm*> comm_groups(Collectives* c) {
    return {&c->world, &c->replicas, &c->tp, &c->pp, &c->cp, &c->embedding};
}
// the CPU build's step split (step_time.h): every group's waits and flights count into `time`.
// The GPU build's host clock sees launches, not kernels: its groups stay untimed
inline void comm_set_step_time(Collectives* c, StepTime* time) {
#ifdef __CUDACC__
    (void)c, (void)time;
#else
    for (Comm* group : comm_groups(c)) group->time = time;
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

// NCCL's sums in one order, so that resume is bit-exact (bf16 sums round at every add, so another
// order gives other bits): NVLink SHARP (NVLS, on NVSwitch machines) sums in the switch in an order
// that may differ between two calls (NVIDIA/nccl issue 1497), and NCCL picks an algorithm and a
// protocol from tuning tables that differ between NCCL versions and machines. Ring, Simple, no NVLS:
// set before the first NCCL call (NCCL reads NCCL_NVLS_ENABLE once, the other two as each
// communicator is made). A variable set in the environment wins (the log says which were used); one
// set only in NCCL's configuration files (/etc/nccl.conf, ~/.nccl.conf) loses to these. The cost:
// NVLS's faster all-reduce on NVSwitch machines, LL/LL128's lower latency on small messages (few
// here: the gradients travel a unit at a time, the loss and the norm through MPI on the host)
inline void nccl_pin_sum_order(int rank) {
    setenv("NCCL_ALGO", "Ring", 0);
    setenv("NCCL_PROTO", "Simple", 0);
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    if (rank == 0)
        printf("NCCL: NCCL_ALGO=%s NCCL_PROTO=%s NCCL_NVLS_ENABLE=%s (process_grid.h: nccl_pin_sum_order)\n",
               getenv("NCCL_ALGO"), getenv("NCCL_PROTO"), getenv("NCCL_NVLS_ENABLE"));
}

// -comm: "nccl", "mpi" or "default" (NCCL on the GPU build, MPI on the CPU build)
inline bool comm_use_nccl(const char* choice) {
    if (strcmp(choice, "default") != 0 && strcmp(choice, "nccl") != 0 && strcmp(choice, "mpi") != 0)
        comm_fail_all("-comm expects nccl or mpi, got '%s'", choice);
#ifdef __CUDACC__
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (strcmp(choice, "mpi") != 0) nccl_pin_sum_order(rank);
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
    for (Comm* group : comm_groups((Collectives*)context))
        if (group->use_nccl) ncclCommAbort(group->nccl);
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
    for (Comm* group : comm_groups(c)) {
        ncclResult_t state = ncclSuccess;
        if (!group->use_nccl || ncclCommGetAsyncError(group->nccl, &state) != ncclSuccess) continue;
        if (state == ncclSuccess || state == ncclInProgress) continue;
        snprintf(message, sizeof(message), "NCCL failed in the %s group: %s", group->name, ncclGetErrorString(state));
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
    const ProcessGrid& grid = c->grid;
    int data = grid.dp_rank * cp + grid.cp_rank;  // the ranks of a pipeline and a TP group see one sequence slice
    MPI_Comm dp, tpc, ppc, cpc, emb;
    MPI_Comm_split(MPI_COMM_WORLD, grid.pp_rank * tp + grid.tp_rank, grid.replica_rank, &dp);  // same (pp, tp): dp x cp
    MPI_Comm_split(MPI_COMM_WORLD, grid.pp_rank * grid.replicas + data, grid.tp_rank, &tpc);      // same (pp, dp, cp)
    MPI_Comm_split(MPI_COMM_WORLD, data * tp + grid.tp_rank, grid.pp_rank, &ppc);              // same (dp, cp, tp)
    // same (pp, dp, tp)
    MPI_Comm_split(MPI_COMM_WORLD, (grid.pp_rank * grid.dp + grid.dp_rank) * tp + grid.tp_rank, grid.cp_rank, &cpc);
    bool ends = grid.pp_rank == 0 || grid.pp_rank == pp - 1;                                   // first and last stage
    MPI_Comm_split(MPI_COMM_WORLD, ends ? data * tp + grid.tp_rank : MPI_UNDEFINED, grid.pp_rank, &emb);
    comm_group_init(&c->world, MPI_COMM_WORLD, false, "world");  // host data only (files, logs, scalars): MPI
    comm_group_init(&c->replicas, dp, use_nccl, "dp");
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
    for (Comm* group : comm_groups(c)) group->trace = trace;
}
inline std::string comm_span_name(const Comm* c, const char* what) {
    return std::string(what) + " " + (c->name ? c->name : "");
}

// the end of a run that never built the groups (-h)
inline void comm_shutdown() { MPI_Finalize(); }

inline void comm_finalize(Collectives* c) {
#ifdef __CUDACC__
    async_error_watch() = AsyncErrorWatch{nullptr, nullptr};
    for (Comm* group : comm_groups(c)) {
        if (group->use_nccl) ncclCommDestroy(group->nccl);
        for (void* s : group->staging) pinned_host_free(s);
    }
#endif
    MPI_Op_free(&c->world.sum_floatX);  // the others hold the same handle
    MPI_Finalize();
}

// one process without MPI (unit tests): every group has one rank and no collective calls MPI
inline Collectives comm_single_process() {
    Collectives c = {};
    c.grid = make_grid(1, 0, 1, 1);
    for (Comm* group : comm_groups(&c)) { *group = Comm{}; group->size = 1; group->chunk_bytes = (size_t)1 << 30; }
    return c;
}

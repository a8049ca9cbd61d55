/*
tests/emu/nccl_emu.cpp: NCCL over MPI for the emulated CUDA build, with NCCL's semantics
(NCCL's user guide and API reference), not the project's:

  - a communicator is made from an ncclUniqueId by nranks processes, each giving its rank;
    the members find each other through MPI_COMM_WORLD (the id names its creator, who must
    be one of them) and get an MPI communicator ordered by NCCL rank. Two members on one
    GPU (the same PCI bus id on the same host) are refused, as NCCL refuses them;
  - collectives take per-rank counts (ncclReduceScatter: recvcount, ncclAllGather:
    sendcount), and are in place exactly when NCCL says (all-reduce and broadcast: same
    buffer; reduce-scatter: recvbuff = sendbuff + rank * recvcount; all-gather: sendbuff =
    recvbuff + rank * sendcount); a partial overlap is refused;
  - every rank of a communicator must make the same collective calls in the same order
    with the same count, type and operation: each call first compares its description
    with every rank's, and a mismatch ends the run with a line naming both; a rank that
    never makes the call leaves the others waiting, a hang the tests' timeouts turn into
    a failure, as on a GPU;
  - every operation is work on its stream (cuda_emu.cpp's streams), queued by the call and run
    when the stream gets to it: started (MPI's non-blocking calls), then polled, so a stream
    waiting for its peers holds back only itself and the other streams go on, as on a GPU. The
    host waits only where it waits for the stream (a synchronisation, a copy to the host);
  - a communicator's operations run one at a time: one that starts while another of the same
    communicator is still running (the two on streams without an event between them) ends the run
    with a line, since NCCL gives such a pair no order and ranks could pair them differently;
  - a send completes only when its receiver has taken it (MPI_Issend): two ranks that both
    send first, outside a group, deadlock, as two GPUs would, and after 3 seconds' wait each says
    so in a line and ends the run (a longer cycle of ranks hangs, for the tests' timeouts); inside
    a group the operations are posted together at ncclGroupEnd; ncclGroupEnd without
    ncclGroupStart is ncclInvalidUsage;
  - bf16 and fp16 sums add in fp32 and round at every step, as NCCL's reductions do; ncclAvg
    multiplies each input by 1/nranks, then sums (floating types).
Buffers are device memory (cuda_emu.cpp checks and translates them, and checks every allocation's
canaries after each call completes).
CUDA_EMU_NCCL_REPORT=1: each communicator says, when destroyed, what it carried (a communicator
that carried nothing should not have been made), and the settings of its sums' order as they were
when it was made (NCCL_ALGO, NCCL_PROTO, NCCL_NVLS_ENABLE: NCCL reads the first two as each
communicator is made, the third at its first call).
CUDA_EMU_NCCL_FAIL_AFTER=N: after N collectives a communicator's link fails: later work
never completes and ncclCommGetAsyncError reports ncclRemoteError (for the trainer's polling).
*/
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>
#include "nccl.h"
#include "cuda_bf16.h"
#include "cuda_fp16.h"

struct ncclComm {
    MPI_Comm mpi;
    int rank, size, device_bus_id;
    int running;                      // its operations started and not complete (one at a time)
    unsigned long long queued;        // its operations issued and not complete
    unsigned long long calls;         // collectives so far: the order every rank must agree on
    unsigned long long transfers;     // sends and receives so far
    std::string settings;             // NCCL_ALGO, NCCL_PROTO, NCCL_NVLS_ENABLE as NCCL would read them at init
    long long fail_after;             // CUDA_EMU_NCCL_FAIL_AFTER, -1: never
    ncclResult_t async_error;
};

[[noreturn]] static void die(const std::string& message) {
    fflush(stdout);
    fprintf(stderr, "error: NCCL emulation: %s\n", message.c_str());
    fflush(stderr);
    _exit(134);
}

const char* ncclGetErrorString(ncclResult_t r) {
    switch (r) {
        case ncclSuccess: return "no error";
        case ncclUnhandledCudaError: return "unhandled cuda error";
        case ncclSystemError: return "unhandled system error";
        case ncclInternalError: return "internal error";
        case ncclInvalidArgument: return "invalid argument";
        case ncclInvalidUsage: return "invalid usage";
        case ncclRemoteError: return "remote process exited or there was a network error";
        case ncclInProgress: return "NCCL operation in progress";
    }
    return "unknown result code";
}

static void free_mpi_objects();
static int live_communicators_count(int change);

// ---------------------------------------------------------------- communicators
struct IdContents { int magic, creator, serial; };
static const int ID_MAGIC = 0x4e43434c, BOOTSTRAP_TAG = 29000;

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
    static int serial = 0;
    IdContents c = {ID_MAGIC, 0, serial++ % 1000};
    MPI_Comm_rank(MPI_COMM_WORLD, &c.creator);
    memset(id, 0, sizeof(*id));
    memcpy(id->internal, &c, sizeof(c));
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* out, int nranks, ncclUniqueId id, int rank) {
    IdContents c;
    memcpy(&c, id.internal, sizeof(c));
    if (c.magic != ID_MAGIC || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
    int world_rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    char host[64] = {};
    gethostname(host, sizeof(host) - 1);
    struct Member { int rank, world_rank, bus_id; char host[64]; } me = {rank, world_rank, cuda_emu::current_device_bus_id(), {}};
    memcpy(me.host, host, sizeof(host));
    std::vector<Member> members(nranks);
    int tag = BOOTSTRAP_TAG + c.serial;
    if (world_rank == c.creator) {  // the creator learns every member, then tells each
        members[rank] = me;
        for (int i = 1; i < nranks; i++) {
            Member m;
            MPI_Recv(&m, sizeof(m), MPI_BYTE, MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (m.rank < 0 || m.rank >= nranks) die("ncclCommInitRank: a member gave rank " + std::to_string(m.rank));
            members[m.rank] = m;
        }
        for (const Member& m : members)
            if (m.world_rank != world_rank) MPI_Send(members.data(), nranks * sizeof(Member), MPI_BYTE, m.world_rank, tag, MPI_COMM_WORLD);
    } else {
        MPI_Send(&me, sizeof(me), MPI_BYTE, c.creator, tag, MPI_COMM_WORLD);
        MPI_Recv(members.data(), nranks * sizeof(Member), MPI_BYTE, c.creator, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    for (int i = 0; i < nranks; i++)
        for (int j = 0; j < i; j++)
            if (members[i].bus_id == members[j].bus_id && strcmp(members[i].host, members[j].host) == 0) {
                fprintf(stderr, "NCCL emulation: Duplicate GPU detected: rank %d and rank %d both on the GPU with PCI bus id "
                        "%x of %s\n", i, j, members[i].bus_id, members[i].host);
                return ncclInvalidUsage;
            }
    std::vector<int> world_ranks(nranks);
    for (int i = 0; i < nranks; i++) world_ranks[i] = members[i].world_rank;
    MPI_Group world_group, group;
    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    MPI_Group_incl(world_group, nranks, world_ranks.data(), &group);
    ncclComm* comm = new ncclComm();
    MPI_Comm_create_group(MPI_COMM_WORLD, group, tag, &comm->mpi);
    MPI_Group_free(&group);
    MPI_Group_free(&world_group);
    comm->rank = rank;
    comm->size = nranks;
    comm->device_bus_id = me.bus_id;
    comm->fail_after = getenv("CUDA_EMU_NCCL_FAIL_AFTER") ? atoll(getenv("CUDA_EMU_NCCL_FAIL_AFTER")) : -1;
    comm->async_error = ncclSuccess;
    for (const char* v : {"NCCL_ALGO", "NCCL_PROTO", "NCCL_NVLS_ENABLE"})
        comm->settings += std::string(" ") + v + "=" + (getenv(v) ? getenv(v) : "(unset)");
    live_communicators_count(+1);
    *out = comm;
    return ncclSuccess;
}
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (!comm) return ncclInvalidArgument;
    if (comm->queued > 0) cudaDeviceSynchronize();  // its queued work runs first, as NCCL's does
    if (getenv("CUDA_EMU_NCCL_REPORT"))
        fprintf(stderr, "NCCL emulation: communicator of %d ranks, rank %d: %llu collectives, %llu sends and receives;%s\n",
                comm->size, comm->rank, comm->calls, comm->transfers, comm->settings.c_str());
    MPI_Comm_free(&comm->mpi);
    delete comm;
    if (live_communicators_count(-1) == 0) free_mpi_objects();
    return ncclSuccess;
}
// its work abandoned (a hang's last act, watchdog.h): a communicator with work queued is left as it is
ncclResult_t ncclCommAbort(ncclComm_t comm) {
    if (!comm) return ncclInvalidArgument;
    return comm->queued > 0 ? ncclSuccess : ncclCommDestroy(comm);
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* e) {
    if (!comm) return ncclInvalidArgument;
    *e = comm->async_error;
    return ncclSuccess;
}
ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) { *count = comm->size; return ncclSuccess; }
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) { *rank = comm->rank; return ncclSuccess; }

// ---------------------------------------------------------------- types and reductions
static size_t type_bytes(ncclDataType_t t) {
    switch (t) {
        case ncclInt8: case ncclUint8: return 1;
        case ncclFloat16: case ncclBfloat16: return 2;
        case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
        default: return 8;
    }
}
static double get(const void* p, ncclDataType_t t, size_t i) {
    switch (t) {
        case ncclFloat32: return ((const float*)p)[i];
        case ncclFloat64: return ((const double*)p)[i];
        case ncclBfloat16: return __bfloat162float(((const __nv_bfloat16*)p)[i]);
        case ncclFloat16: return __half2float(((const __half*)p)[i]);
        case ncclInt32: return ((const int32_t*)p)[i];
        case ncclUint32: return ((const uint32_t*)p)[i];
        case ncclInt8: return ((const int8_t*)p)[i];
        case ncclUint8: return ((const uint8_t*)p)[i];
        case ncclInt64: return (double)((const int64_t*)p)[i];
        case ncclUint64: return (double)((const uint64_t*)p)[i];
    }
    return 0;
}
static void put(void* p, ncclDataType_t t, size_t i, double v) {  // floats round once from the fp32 (fp64) result
    switch (t) {
        case ncclFloat32: ((float*)p)[i] = (float)v; break;
        case ncclFloat64: ((double*)p)[i] = v; break;
        case ncclBfloat16: ((__nv_bfloat16*)p)[i] = __float2bfloat16_rn((float)v); break;
        case ncclFloat16: ((__half*)p)[i] = __float2half_rn((float)v); break;
        case ncclInt32: ((int32_t*)p)[i] = (int32_t)v; break;
        case ncclUint32: ((uint32_t*)p)[i] = (uint32_t)v; break;
        case ncclInt8: ((int8_t*)p)[i] = (int8_t)v; break;
        case ncclUint8: ((uint8_t*)p)[i] = (uint8_t)v; break;
        case ncclInt64: ((int64_t*)p)[i] = (int64_t)v; break;
        case ncclUint64: ((uint64_t*)p)[i] = (uint64_t)v; break;
    }
}
// one element of each NCCL type as an MPI type of its own (so MPI never cuts a value in two, and a
// reduction knows the type from it), and one MPI operation per NCCL operation: several reductions
// of different types may be in progress at once
static MPI_Datatype element_types[10] = {};
static MPI_Op mpi_ops[4] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
static ncclDataType_t type_of(MPI_Datatype d) {
    for (int t = 0; t < 10; t++)
        if (element_types[t] == d) return (ncclDataType_t)t;
    die("a reduction of an MPI type the emulation did not make");
}
// inout = in (op) inout, elementwise, in the buffer's type
template <ncclRedOp_t OP> static void reduce_step(void* in, void* inout, int* len, MPI_Datatype* datatype) {
    ncclDataType_t t = type_of(*datatype);
    for (size_t i = 0; i < (size_t)*len; i++) {
        double a = get(in, t, i), b = get(inout, t, i);
        if (t == ncclFloat32 || t == ncclBfloat16 || t == ncclFloat16) {
            float x = (float)a, y = (float)b;  // fp32 arithmetic for the float types
            put(inout, t, i, OP == ncclMax ? (x > y ? x : y) : OP == ncclMin ? (x < y ? x : y) : OP == ncclProd ? x * y : x + y);
        } else {
            put(inout, t, i, OP == ncclMax ? (a > b ? a : b) : OP == ncclMin ? (a < b ? a : b) : OP == ncclProd ? a * b : a + b);
        }
    }
}
static MPI_Op reduction(ncclRedOp_t op) {
    if (op == ncclAvg) op = ncclSum;  // the inputs were multiplied by 1/nranks
    MPI_User_function* functions[4] = {reduce_step<ncclSum>, reduce_step<ncclProd>, reduce_step<ncclMax>, reduce_step<ncclMin>};
    if (mpi_ops[op] == MPI_OP_NULL) MPI_Op_create(functions[op], 1, &mpi_ops[op]);
    return mpi_ops[op];
}
static MPI_Datatype element(ncclDataType_t t) {
    MPI_Datatype& type = element_types[t];
    if (!type) { MPI_Type_contiguous((int)type_bytes(t), MPI_BYTE, &type); MPI_Type_commit(&type); }
    return type;
}
// the last communicator gone: MPI's objects too (before MPI_Finalize, which reports leaks)
static int live_communicators_count(int change) { static int live = 0; return live += change; }
static void free_mpi_objects() {
    for (MPI_Op& op : mpi_ops)
        if (op != MPI_OP_NULL) MPI_Op_free(&op);
    for (MPI_Datatype& type : element_types)
        if (type) { MPI_Type_free(&type); type = 0; }
}
// ncclAvg on floating types: each input times 1/nranks, then the sum
static void premultiply(void* buf, size_t count, ncclDataType_t t, int nranks) {
    for (size_t i = 0; i < count; i++) put(buf, t, i, (float)get(buf, t, i) * (1.0f / nranks));
}

// ---------------------------------------------------------------- the agreement check
enum Kind { ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER, BROADCAST };
static const char* kind_names[] = {"ncclAllReduce", "ncclReduceScatter", "ncclAllGather", "ncclBroadcast"};
struct Call { int kind, type, op, root; unsigned long long count, serial; };
static std::string describe(const Call& c) {
    static const char* types[] = {"ncclInt8", "ncclUint8", "ncclInt32", "ncclUint32", "ncclInt64", "ncclUint64",
                                  "ncclFloat16", "ncclFloat32", "ncclFloat64", "ncclBfloat16"};
    static const char* ops[] = {"ncclSum", "ncclProd", "ncclMax", "ncclMin", "ncclAvg"};
    std::string type = c.type >= 0 && c.type < 10 ? types[c.type] : std::to_string(c.type);
    std::string op = c.kind == ALL_GATHER || c.kind == BROADCAST ? "-" : c.op >= 0 && c.op < 5 ? ops[c.op] : std::to_string(c.op);
    return std::string(kind_names[c.kind]) + "(count " + std::to_string(c.count) + ", type " + type + ", op " + op +
           ", root " + std::to_string(c.root) + ")";
}
static void check_agreement(const ncclComm* comm, const Call& mine, const std::vector<Call>& all) {
    for (int r = 0; r < comm->size; r++)
        if (memcmp(&all[r], &mine, sizeof(Call)) != 0)
            die("collective #" + std::to_string(mine.serial) + " of a communicator of " + std::to_string(comm->size) +
                ": rank " + std::to_string(comm->rank) + " calls " + describe(mine) + " but rank " + std::to_string(r) +
                " calls " + describe(all[r]));
}

// ---------------------------------------------------------------- operations on a stream
// one at a time per communicator (the header says why): `what` starts while another runs
static void begin_running(ncclComm* comm, const std::string& what) {
    if (comm->running++ > 0)
        die(what + " starts while another operation of its communicator is still running: they are on two streams "
            "with no event between them, and NCCL gives them no order (every rank could pair them differently)");
}
static void end_running(ncclComm* comm) {
    comm->running--;
    comm->queued--;
}

static bool link_failed(ncclComm* comm) {  // CUDA_EMU_NCCL_FAIL_AFTER: the work never completes
    if (comm->fail_after >= 0 && (long long)comm->calls >= comm->fail_after) {
        comm->async_error = ncclRemoteError;
        cuda_emu::stall_default_stream();
        return true;
    }
    return false;
}

// ---------------------------------------------------------------- sends and receives
struct Pending { bool send; char* bytes; size_t size; int peer; ncclComm* comm; cudaStream_t stream; };
static int group_depth = 0;
static std::vector<Pending> pending;

// A send and receive group in progress: posted (MPI_Issend, MPI_Irecv) when its stream gets to it,
// complete when every request is. An ncclSend completes only once its receiver has taken it, so two
// ranks that both send before receiving, outside a group, wait for each other, as two GPUs do.
struct InFlight {
    std::vector<Pending> ops;
    std::vector<MPI_Request> requests;
    double next_check;  // the deadlock check's next time
    int cycle_seen;
};

static void check_received(const std::vector<Pending>& ops, const std::vector<MPI_Status>& statuses) {
    for (size_t i = 0; i < ops.size(); i++) {
        if (ops[i].send) continue;
        int got;
        MPI_Get_count(&statuses[i], MPI_BYTE, &got);
        if ((size_t)got != ops[i].size)
            die("ncclRecv from rank " + std::to_string(ops[i].peer) + " expected " + std::to_string(ops[i].size) +
                " bytes; the peer's ncclSend had " + std::to_string(got));
    }
}
// A send of ours still unmatched while the same peer's message to us waits unreceived (MPI_Iprobe
// sees only messages no posted receive has taken) is the deadlock of two ranks that both send
// first: neither can post its receive before its own send completes. Returns that send, or null
static const Pending* send_cycle(InFlight& f) {
    for (size_t i = 0; i < f.ops.size(); i++) {
        const Pending& p = f.ops[i];
        int sent = 1, waiting = 0;
        if (p.send) MPI_Request_get_status(f.requests[i], &sent, MPI_STATUS_IGNORE);
        if (!sent) MPI_Iprobe(p.peer, 0, p.comm->mpi, &waiting, MPI_STATUS_IGNORE);
        if (waiting) return &p;
    }
    return nullptr;
}
// the communicators a group uses, each once
static std::vector<ncclComm*> communicators(const std::vector<Pending>& ops) {
    std::vector<ncclComm*> comms;
    for (const Pending& p : ops)
        if (std::find(comms.begin(), comms.end(), p.comm) == comms.end()) comms.push_back(p.comm);
    return comms;
}
static void post_point_to_point(InFlight& f) {
    for (ncclComm* comm : communicators(f.ops)) begin_running(comm, "a group of ncclSend and ncclRecv");
    for (const Pending& p : f.ops) {
        MPI_Request request;
        if (p.send) MPI_Issend(p.bytes, (int)p.size, MPI_BYTE, p.peer, 0, p.comm->mpi, &request);
        else MPI_Irecv(p.bytes, (int)p.size, MPI_BYTE, p.peer, 0, p.comm->mpi, &request);
        f.requests.push_back(request);
    }
    f.next_check = MPI_Wtime() + 1.0;
}
// polled: whether the group is complete; a send cycle seen at 3 checks a second apart (a peer's MPI
// can lag, a deadlock stays) ends the run with a line
static bool point_to_point_done(InFlight& f) {
    std::vector<MPI_Status> statuses(f.requests.size());
    int done = 0;
    MPI_Testall((int)f.requests.size(), f.requests.data(), &done, statuses.data());
    if (!done) {
        if (MPI_Wtime() > f.next_check) {
            const Pending* p = send_cycle(f);
            f.cycle_seen = p ? f.cycle_seen + 1 : 0;
            if (f.cycle_seen == 3)
                die("deadlock: rank " + std::to_string(p->comm->rank) + "'s ncclSend to rank " + std::to_string(p->peer) +
                    " never completes: rank " + std::to_string(p->peer) + " sends to it first too and neither has posted "
                    "its ncclRecv (two ranks that both send first need ncclGroupStart/End, as on a GPU)");
            f.next_check += 1.0;
        }
        return false;
    }
    check_received(f.ops, statuses);
    for (ncclComm* comm : communicators(f.ops)) end_running(comm);
    cuda_emu::check_canaries("ncclSend/ncclRecv");
    return true;
}
// the operations of one group, or one send or receive alone, as one piece of work on their stream
static void queue_point_to_point(const std::vector<Pending>& ops) {
    auto f = std::make_shared<InFlight>();
    f->ops = ops;
    f->cycle_seen = 0;
    for (ncclComm* comm : communicators(ops)) comm->queued++;
    cuda_emu::enqueue_started(ops[0].stream, [f] { post_point_to_point(*f); }, [f] { return point_to_point_done(*f); });
}

ncclResult_t ncclGroupStart() { group_depth++; return ncclSuccess; }
ncclResult_t ncclGroupEnd() {
    if (group_depth == 0) return ncclInvalidUsage;
    if (--group_depth > 0) return ncclSuccess;
    std::vector<Pending> ops;
    ops.swap(pending);
    for (const Pending& p : ops)
        if (p.stream != ops[0].stream) die("a group of sends and receives on two streams (this emulation runs a group on one)");
    if (!ops.empty()) queue_point_to_point(ops);
    return ncclSuccess;
}

static ncclResult_t point_to_point(bool send, const void* buf, size_t count, ncclDataType_t t, int peer, ncclComm* comm,
                                   cudaStream_t stream) {
    if (!comm) return ncclInvalidArgument;
    if (peer < 0 || peer >= comm->size) return ncclInvalidArgument;
    if (count * type_bytes(t) > (size_t)INT32_MAX) die("a send of over 2 GiB (the emulation passes it to MPI in one message)");
    Pending p = {send, (char*)cuda_emu::device_bytes(buf, count * type_bytes(t), send ? "ncclSend buffer" : "ncclRecv buffer"),
                 count * type_bytes(t), peer, comm, stream};
    if (link_failed(comm)) return ncclSuccess;
    comm->transfers++;
    if (group_depth > 0) { pending.push_back(p); return ncclSuccess; }
    queue_point_to_point({p});
    return ncclSuccess;
}
ncclResult_t ncclSend(const void* buf, size_t count, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t stream) {
    return point_to_point(true, buf, count, t, peer, comm, stream);
}
ncclResult_t ncclRecv(void* buf, size_t count, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t stream) {
    return point_to_point(false, buf, count, t, peer, comm, stream);
}

// ---------------------------------------------------------------- collectives
static bool overlaps(const char* a, size_t an, const char* b, size_t bn) { return a < b + bn && b < a + an; }

// A collective in progress on its stream. When its stream starts it, it reads its input (into
// `input`, as a NCCL kernel reads it once it runs: a stream that writes the buffer later, with no
// event between, cannot change what is summed) and posts every rank's description (the agreement
// check); once that is in, the data's operation, which writes the output as it goes. Each is an MPI
// request polled until complete
struct Collective {
    ncclComm* comm;
    Call call;
    std::vector<Call> all;
    std::vector<char> input;                           // the input as it was when the collective started
    std::function<void(Collective&)> read;             // fills input
    std::function<void(Collective&, MPI_Request*)> post_data;  // posts the data's operation
    std::function<void(Collective&)> finish;           // after it (null: nothing)
    MPI_Request request;
    bool agreed;
};
static bool collective_done(Collective& c) {
    int done = 0;
    MPI_Test(&c.request, &done, MPI_STATUS_IGNORE);
    if (!done) return false;
    if (!c.agreed) {
        check_agreement(c.comm, c.call, c.all);
        c.agreed = true;
        c.post_data(c, &c.request);
        return false;
    }
    if (c.finish) c.finish(c);
    end_running(c.comm);
    cuda_emu::check_canaries(kind_names[c.call.kind]);
    return true;
}
// common checks, then the collective queued on its stream: read(input, s) when the stream starts it,
// post(collective, r, request) once every rank agreed, finish(collective, r) when it is complete
typedef std::function<void(std::vector<char>& input, const char* s)> ReadInput;
typedef std::function<void(Collective&, char* r, MPI_Request*)> PostData;
typedef std::function<void(Collective&, char* r)> Finish;
static ncclResult_t queue_collective(ncclComm* comm, Call call, const void* send, size_t send_bytes, void* recv,
                                     size_t recv_bytes, cudaStream_t stream, ReadInput read, PostData post,
                                     Finish finish = nullptr) {
    if (!comm) return ncclInvalidArgument;
    if (group_depth > 0) die(std::string(kind_names[call.kind]) + " inside ncclGroupStart/End: this emulation runs only "
                             "sends and receives in groups");
    call.serial = comm->calls;
    char* s = (char*)cuda_emu::device_bytes(send, send_bytes, (std::string(kind_names[call.kind]) + " sendbuff").c_str());
    char* r = (char*)cuda_emu::device_bytes(recv, recv_bytes, (std::string(kind_names[call.kind]) + " recvbuff").c_str());
    if (link_failed(comm)) return ncclSuccess;
    comm->calls++;
    comm->queued++;
    auto c = std::make_shared<Collective>();
    *c = Collective{comm, call, std::vector<Call>(comm->size), {},
                    [read, s](Collective& c) { read(c.input, s); },
                    [post, r](Collective& c, MPI_Request* request) { post(c, r, request); },
                    finish ? std::function<void(Collective&)>([finish, r](Collective& c) { finish(c, r); }) : nullptr,
                    MPI_REQUEST_NULL, false};
    cuda_emu::enqueue_started(
        stream,
        [c] {
            begin_running(c->comm, kind_names[c->call.kind]);
            c->read(*c);
            MPI_Iallgather(&c->call, sizeof(Call), MPI_BYTE, c->all.data(), sizeof(Call), MPI_BYTE, c->comm->mpi, &c->request);
        },
        [c] { return collective_done(*c); });
    return ncclSuccess;
}

// the input, whole, as it is now
static ReadInput read_bytes(size_t bytes) {
    return [bytes](std::vector<char>& input, const char* s) { input.assign(s, s + bytes); };
}
ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
    size_t bytes = count * type_bytes(t);
    if (send != recv && comm && overlaps((const char*)send, bytes, (const char*)recv, bytes))
        die("ncclAllReduce: sendbuff and recvbuff overlap without being the same");
    return queue_collective(
        comm, Call{ALL_REDUCE, t, op, 0, count, 0}, send, bytes, recv, bytes, stream, read_bytes(bytes),
        [=](Collective& c, char*, MPI_Request* request) {
            if (op == ncclAvg) premultiply(c.input.data(), count, t, c.comm->size);
            MPI_Iallreduce(MPI_IN_PLACE, c.input.data(), (int)count, element(t), reduction(op), c.comm->mpi, request);
        },
        [=](Collective& c, char* r) { memcpy(r, c.input.data(), bytes); });
}
ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t recvcount, ncclDataType_t t, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t stream) {
    size_t block = recvcount * type_bytes(t);
    int size = comm ? comm->size : 0;
    bool in_place = comm && (const char*)recv == (const char*)send + comm->rank * block;
    if (comm && !in_place && overlaps((const char*)send, block * size, (const char*)recv, block))
        die("ncclReduceScatter: recvbuff overlaps sendbuff but is not sendbuff + rank * recvcount (NCCL's in-place form)");
    return queue_collective(comm, Call{REDUCE_SCATTER, t, op, 0, recvcount, 0}, send, block * size, recv, block, stream,
                            read_bytes(block * size), [=](Collective& c, char* r, MPI_Request* request) {
                                if (op == ncclAvg) premultiply(c.input.data(), recvcount * size, t, size);
                                std::vector<int> counts(size, (int)recvcount);
                                MPI_Ireduce_scatter(c.input.data(), r, counts.data(), element(t), reduction(op),
                                                    c.comm->mpi, request);
                            });
}
ncclResult_t ncclAllGather(const void* send, void* recv, size_t sendcount, ncclDataType_t t, ncclComm_t comm,
                           cudaStream_t stream) {
    size_t block = sendcount * type_bytes(t);
    int size = comm ? comm->size : 0;
    bool in_place = comm && (const char*)send == (const char*)recv + comm->rank * block;
    if (comm && !in_place && overlaps((const char*)send, block, (const char*)recv, block * size))
        die("ncclAllGather: sendbuff overlaps recvbuff but is not recvbuff + rank * sendcount (NCCL's in-place form)");
    return queue_collective(comm, Call{ALL_GATHER, t, 0, 0, sendcount, 0}, send, block, recv, block * size, stream,
                            read_bytes(block), [=](Collective& c, char* r, MPI_Request* request) {
                                MPI_Iallgather(c.input.data(), (int)block, MPI_BYTE, r, (int)block, MPI_BYTE,
                                               c.comm->mpi, request);
                            });
}
ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t t, int root, ncclComm_t comm,
                           cudaStream_t stream) {
    size_t bytes = count * type_bytes(t);
    if (comm && (root < 0 || root >= comm->size)) return ncclInvalidArgument;
    bool is_root = comm && comm->rank == root;
    if (is_root && send != recv && overlaps((const char*)send, bytes, (const char*)recv, bytes))
        die("ncclBroadcast: sendbuff and recvbuff overlap without being the same");
    return queue_collective(
        comm, Call{BROADCAST, t, 0, root, count, 0}, is_root ? send : recv, bytes, recv, bytes, stream,
        is_root ? read_bytes(bytes) : ReadInput([](std::vector<char>&, const char*) {}),
        [=](Collective& c, char* r, MPI_Request* request) {
            MPI_Ibcast(is_root ? c.input.data() : r, (int)bytes, MPI_BYTE, root, c.comm->mpi, request);
        },
        [=](Collective& c, char* r) { if (is_root) memcpy(r, c.input.data(), bytes); });
}

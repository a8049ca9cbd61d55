/*
tests/emu/cuda_emu.cpp: the emulated CUDA runtime: devices, memory, copies, launches, and
the scheduler that runs every CUDA thread of a block on a fiber (cuda_emu.h says why).

A block runs on one OS thread. Each CUDA thread gets a fiber (a stack of its own) when it
starts; it runs until it reaches __syncthreads, a warp operation or its end, and the scheduler
then runs the next one. A WMMA call (mma.h) is a meeting of all 32 lanes of the warp that also
gathers each lane's share of the fragments (cuda_emu_warp_all_gather). A fiber whose thread
ended serves the next thread, so a kernel without barriers uses one fiber per block. A switch is
a few instructions that swap stacks (switch_stack: no system call on x86-64). Under
ThreadSanitizer (a program built with -fsanitize=thread, this file with CUDA_EMU_TSAN=1) each
thread of a block has a TSan fiber of its own, switched without implied ordering, and the
barriers, the warp meetings and the block's start and end are the only happens-before edges: a
missing __syncthreads between two threads' accesses to shared memory is a reported data race,
as compute-sanitizer's racecheck would report it.

Device memory: each allocation is a mapping of its own, placed so that its data, 32-byte
aligned as WMMA's loads and stores need (256 bits; a real cudaMalloc gives 256 bytes), ends at
the allocation's size rounded up to 32 bytes, just before a PROT_NONE guard page; and a
second, PROT_NONE reservation of the same size whose address is the pointer cudaMalloc
returns. Host code that dereferences it faults; launches, copies and the libraries translate
it to the real mapping. The SIGSEGV handler names the fault: device memory read on the host,
or an access past an allocation's end (and the kernel that made it). The bytes a fault cannot
guard, the slack between the requested size and the 32-byte end and a 64-byte zone before the
first byte, are canaries: they hold the poison below and are checked, in every allocation,
after every launch, copy, memset and library call; a write into them (p[n] of an odd-sized
buffer, p[-1]) ends the run with the same line a fault gives ("N bytes past the end", "N bytes
before the start").

Poison: cudaMalloc does not clear, and here fresh memory (and the canaries) holds the 16-bit
word 0xFFA5 everywhere: a NaN as fp32 (0xFFA5FFA5), bf16 and fp16, a negative int. A kernel
that accumulates into memory nobody zeroed gets NaN in every precision. As fp32 and bf16 it is
a signaling NaN, which no arithmetic produces (arithmetic quiets a NaN: 0xFFE5FFA5, bf16's
0x7FFF), and fp16's NaN from arithmetic on numbers is 0xFE00: a word still 0xFFA5 was never
written (or, in fp16, was computed from such a word, whose payload fp16 arithmetic keeps).
CUDA_EMU_REPORT_UNWRITTEN=1: each cudaMemcpy device-to-host that copies such words says so
on stderr (a line: how many, the first's offset), to tell "read before written" from a NaN.
*/
#include <stdio.h>
#include <stdarg.h>
#include <algorithm>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <ucontext.h>
#include <unistd.h>
#include <sys/mman.h>
#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>
#include "cuda_emu.h"
#ifdef _OPENMP
#include <omp.h>
#endif
// CUDA_EMU_TSAN=1: the program is built with -fsanitize=thread. This file is not: ThreadSanitizer
// sees the kernels' memory accesses and the edges declared here, never the scheduler's own state
#ifndef CUDA_EMU_TSAN
#define CUDA_EMU_TSAN 0
#endif
#if CUDA_EMU_TSAN
#include <sanitizer/tsan_interface.h>
#endif

namespace cuda_emu {

[[noreturn]] static void die(const char* format, ...) __attribute__((format(printf, 1, 2)));
static void die(const char* format, ...) {
    char line[2048] = "error: CUDA emulation: ";
    va_list args;
    va_start(args, format);
    vsnprintf(line + strlen(line), sizeof(line) - strlen(line) - 2, format, args);
    va_end(args);
    strcat(line, "\n");
    fflush(stdout);
    fputs(line, stderr);
    fflush(stderr);
    _exit(134);  // as a failed assertion would: the job's launcher sees it and ends the others
}

// ---------------------------------------------------------------- devices
// CUDA_EMU_DEVICES (default 8) devices of CUDA_EMU_DEVICE_MEMORY bytes (default 80 GiB), PCI bus
// ids 0x10, 0x11, ...; CUDA_VISIBLE_DEVICES picks and orders them as it does on a real machine
struct Devices {
    std::vector<int> visible;  // ordinal -> physical device
    size_t memory;
    int current = 0;
    size_t allocated[64] = {};
};
static Devices& devices() {
    static Devices d = [] {
        Devices d;
        int count = getenv("CUDA_EMU_DEVICES") ? atoi(getenv("CUDA_EMU_DEVICES")) : 8;
        d.memory = getenv("CUDA_EMU_DEVICE_MEMORY") ? (size_t)strtoull(getenv("CUDA_EMU_DEVICE_MEMORY"), NULL, 10)
                                                    : (size_t)80 << 30;
        const char* visible = getenv("CUDA_VISIBLE_DEVICES");
        if (!visible) {
            for (int i = 0; i < count && i < 64; i++) d.visible.push_back(i);
        } else {
            for (const char* p = visible; *p;) {  // "2,3": devices 2 and 3 become 0 and 1; stops at a bad entry
                char* end;
                long id = strtol(p, &end, 10);
                if (end == p || id < 0 || id >= count) break;
                d.visible.push_back((int)id);
                p = *end == ',' ? end + 1 : end;
                if (*end != ',' && *end != '\0') break;
            }
        }
        return d;
    }();
    return d;
}
static int physical_device() { return devices().visible.empty() ? 0 : devices().visible[devices().current]; }
int current_device_bus_id() { return 0x10 + physical_device(); }

// ---------------------------------------------------------------- streams
// Work is queued on its stream when the host issues it and runs later, when the host waits for
// it (a synchronize, a query, an event, a copy to or from pageable memory, cudaFree), as a GPU
// runs behind its host. The queues then run interleaved, within what CUDA promises: each stream
// in its own order; cudaStreamWaitEvent holds a stream until the event's record (the last one
// issued before the wait) has run; the legacy default stream (0) and the blocking streams
// (cudaStreamCreate) each wait for the other's earlier work, cudaStreamNonBlocking streams for
// nothing but their events. Among the streams that may run, CUDA_EMU_STREAMS picks:
//     issue    (default) the one whose next work was issued first: the host's order
//     early    any stream but the default one, as early as its waits allow
//     late     the default stream whenever it can run: the others as late as their waits allow, and
//              started work (NCCL's) completed only when nothing else can run
//     slow     a slow wire: the other streams as early as their waits allow, as in early, but started
//              work completed only when nothing else can run, as in late: each collective in flight
//              for as long as it may be
//     seed:N   one drawn at random (seed N) at each piece of work
// Two streams that share a tensor without an event between them then show it in the bytes: early
// runs a reader before the writer it should have waited for, late lets a buffer be rewritten
// before the other stream read it, slow lets the default stream write a buffer between a
// collective's read of it and the comm stream's next work on it (a clear after a reduce-scatter).
// NCCL's operations (nccl_emu.cpp) are started, then polled: a stream waiting on another rank holds
// back only itself, as a GPU's NCCL kernel does.
static bool stalled = false;
void stall_default_stream() { stalled = true; }
[[noreturn]] static void wait_forever() { for (;;) pause(); }
void pause_between_polls(unsigned polls) {
    if (polls >= 64) usleep(polls < 1024 ? 10 : 50);
}

struct Work {
    enum Kind { RUN, RECORD, WAIT } kind;
    unsigned long long seq;       // the host's issue order over every stream
    std::function<void()> start;  // RUN: the work, or its beginning
    std::function<bool()> done;   // RUN, started work: true once complete (null: complete when start returns)
    cudaEvent_t event;            // RECORD, WAIT
    unsigned long long mark;      // RECORD: this record's number; WAIT: the record waited for
    bool started;
};
}  // namespace cuda_emu
struct CUstream_st { std::deque<cuda_emu::Work> queue; bool blocking; };
struct CUevent_st { double ms; unsigned long long recorded, completed; };  // records issued, records run
namespace cuda_emu {
static double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
static CUstream_st legacy_stream = {{}, true};
static std::vector<CUstream_st*>& live_streams() { static std::vector<CUstream_st*> v = {&legacy_stream}; return v; }
static unsigned long long issued_work = 0;
static CUstream_st* stream_of(cudaStream_t s) { return s == nullptr || s == cudaStreamLegacy ? &legacy_stream : s; }

enum Order { ISSUE, EARLY, LATE, SLOW, SEEDED };
struct Schedule { Order order; uint64_t state; };
static Schedule& schedule() {
    static Schedule s = [] {
        Schedule s = {ISSUE, 0};
        const char* v = getenv("CUDA_EMU_STREAMS");
        if (!v || !*v || !strcmp(v, "issue")) return s;
        if (!strcmp(v, "early")) s.order = EARLY;
        else if (!strcmp(v, "late")) s.order = LATE;
        else if (!strcmp(v, "slow")) s.order = SLOW;
        else if (!strncmp(v, "seed:", 5) && v[5]) s = {SEEDED, strtoull(v + 5, nullptr, 10) * 0x9E3779B97F4A7C15ull + 1};
        else die("CUDA_EMU_STREAMS=%s: expected issue, early, late, slow or seed:N", v);
        return s;
    }();
    return s;
}

static void run_work_left_at_exit();
static void push(cudaStream_t stream, Work w) {
    static bool registered = (live_streams(), atexit(run_work_left_at_exit), true);  // the list outlives the handler
    (void)registered;
    w.seq = ++issued_work;
    stream_of(stream)->queue.push_back(std::move(w));
}
void enqueue(cudaStream_t stream, std::function<void()> run) {
    if (stalled) return;  // queued behind work that never completes: it never runs
    push(stream, Work{Work::RUN, 0, std::move(run), nullptr, nullptr, 0, false});
}
void enqueue_started(cudaStream_t stream, std::function<void()> start, std::function<bool()> done) {
    if (stalled) return;
    push(stream, Work{Work::RUN, 0, std::move(start), std::move(done), nullptr, 0, false});
}

// whether stream s's next work may begin now
static bool may_start(const CUstream_st* s) {
    if (s->queue.empty() || s->queue.front().started) return false;
    const Work& w = s->queue.front();
    if (w.kind == Work::WAIT && w.event->completed < w.mark) return false;
    if (!s->blocking) return true;
    for (const CUstream_st* o : live_streams())  // the legacy stream and a blocking one: the other's earlier work first
        if (o != s && o->blocking && (o == &legacy_stream || s == &legacy_stream) && !o->queue.empty() &&
            o->queue.front().seq < w.seq)
            return false;
    return true;
}
static CUstream_st* pick() {
    std::vector<CUstream_st*> ready;
    for (CUstream_st* s : live_streams())
        if (may_start(s)) ready.push_back(s);
    if (ready.empty()) return nullptr;
    auto first_issued = [&](bool legacy_only, bool others_only) {
        CUstream_st* best = nullptr;
        for (CUstream_st* s : ready)
            if (!(legacy_only && s != &legacy_stream) && !(others_only && s == &legacy_stream) &&
                (!best || s->queue.front().seq < best->queue.front().seq))
                best = s;
        return best;
    };
    Schedule& order = schedule();
    CUstream_st* s = nullptr;
    if (order.order == EARLY || order.order == SLOW) s = first_issued(false, true);
    if (order.order == LATE) s = first_issued(true, false);
    if (order.order == SEEDED) {  // xorshift64
        order.state ^= order.state << 13, order.state ^= order.state >> 7, order.state ^= order.state << 17;
        s = ready[order.state % ready.size()];
    }
    return s ? s : first_issued(false, false);
}
static void run_next(CUstream_st* s) {
    Work& w = s->queue.front();  // a reference a push onto the deque leaves valid
    if (w.kind == Work::RECORD) {
        w.event->completed = std::max(w.event->completed, w.mark);
        w.event->ms = now_ms();
    } else if (w.kind == Work::RUN) {
        w.started = true;
        w.start();
        if (w.done && !w.done()) return;  // in progress: polled by complete_started
    }
    s->queue.pop_front();
}
// at exit, the kernels, copies and GEMMs still queued run (a fault in one is still reported), up to the
// first NCCL operation: MPI may be gone by then
static void run_work_left_at_exit() {
    while (CUstream_st* s = stalled ? nullptr : pick()) {
        if (s->queue.front().done) return;
        run_next(s);
    }
}
// started work that has completed since: retired
static bool complete_started() {
    bool any = false;
    for (CUstream_st* s : live_streams())
        if (!s->queue.empty() && s->queue.front().started && s->queue.front().done()) {
            s->queue.pop_front();
            any = true;
        }
    return any;
}
// whether started work (NCCL's) is polled before more work starts: late and slow complete it only
// when nothing else can run, so its output lands as late as it may; seed:N draws
static bool poll_eagerly() {
    Schedule& order = schedule();
    if (order.order == SEEDED) {
        order.state ^= order.state << 13, order.state ^= order.state >> 7, order.state ^= order.state << 17;
        return order.state & 1;
    }
    return order.order != LATE && order.order != SLOW;
}
// runs queued work until finished() holds (wait) or nothing more can run without waiting (!wait)
template <typename Finished> static bool run_work(Finished finished, bool wait) {
    for (unsigned polls = 0;;) {
        if (stalled) {  // behind a failed link nothing completes
            if (wait) wait_forever();
            return false;
        }
        if (finished()) return true;
        if (poll_eagerly() && complete_started()) { polls = 0; continue; }
        if (CUstream_st* s = pick()) { run_next(s); polls = 0; continue; }
        if (complete_started()) { polls = 0; continue; }
        if (!wait) return false;
        bool in_progress = false;
        for (CUstream_st* s : live_streams()) in_progress |= !s->queue.empty() && s->queue.front().started;
        if (!in_progress) die("queued work that can never run: a stream waits for an event that will not be recorded");
        pause_between_polls(polls++);
    }
}
static bool all_idle() {
    for (CUstream_st* s : live_streams())
        if (!s->queue.empty()) return false;
    return true;
}
static void run_all_work() { run_work(all_idle, true); }
// the work issued so far on `stream` and on what it waits for implicitly: a marker queued behind it
static void run_work_before(cudaStream_t stream) {
    bool reached = false;
    push(stream, Work{Work::RUN, 0, [&reached] { reached = true; }, nullptr, nullptr, 0, false});
    run_work([&] { return reached; }, true);
}

// ---------------------------------------------------------------- errors
static thread_local cudaError_t last_error = cudaSuccess;
static cudaError_t record(cudaError_t e) {
    if (e != cudaSuccess) last_error = e;
    return e;
}

// ---------------------------------------------------------------- memory
struct Allocation {
    char* handle;    // what the program holds: PROT_NONE, never touched
    char* bytes;     // where the data is: ends just before the guard page
    size_t size;     // as requested
    char* map;       // the data mapping (pages + guard), for munmap
    size_t map_size;
    int device;
    std::vector<uint8_t> touched;  // the launch report's marks, a byte per data page (below)
};
static std::mutex memory_mutex;
static std::map<uintptr_t, Allocation>& allocations() { static std::map<uintptr_t, Allocation> m; return m; }
static std::map<uintptr_t, size_t>& pinned() { static std::map<uintptr_t, size_t> m; return m; }
static const size_t PAGE = 4096;
static const size_t FRONT = 64;            // canary bytes before an allocation's first byte
static const uint16_t POISON = 0xFFA5;     // never-written memory, as 16-bit words (the header says why)
static size_t rounded_size(size_t bytes) { return (bytes + 31) / 32 * 32; }  // 32-byte aligned data (the header says why)

// the allocation whose handle range [handle, handle + size] holds p (one past the end included)
static const Allocation* find_allocation(const void* p) {
    auto& all = allocations();
    auto it = all.upper_bound((uintptr_t)p);
    if (it == all.begin()) return nullptr;
    --it;
    const Allocation& a = it->second;
    return (uintptr_t)p <= (uintptr_t)a.handle + a.size ? &a : nullptr;
}
static bool is_pinned(const void* p) {
    auto& all = pinned();
    auto it = all.upper_bound((uintptr_t)p);
    if (it == all.begin()) return false;
    --it;
    return (uintptr_t)p < it->first + it->second;
}
static bool is_device_pointer(const void* p) {
    std::lock_guard<std::mutex> lock(memory_mutex);
    return p && find_allocation(p);
}

void* device_bytes(const void* device, size_t bytes, const char* what) {
    if (!device) return nullptr;
    std::lock_guard<std::mutex> lock(memory_mutex);
    const Allocation* a = find_allocation(device);
    if (!a) die("%s: %p is not device memory (a host pointer where the GPU needs device memory)", what, device);
    size_t offset = (const char*)device - a->handle;
    if (offset + bytes > a->size)
        die("%s: %zu bytes at offset %zu run past the end of a %zu-byte allocation", what, bytes, offset, a->size);
    return a->bytes + offset;
}

}  // namespace cuda_emu
using namespace cuda_emu;


// ---------------------------------------------------------------- the launch report
// CUDA_EMU_LAUNCH_REPORT=FILE (one process): at exit, FILE gets one JSON line per kernel name, a
// cuBLAS call, a device-to-device copy and a memset each counted as a kernel of its own:
//     {"kernel": ..., "launches": ..., "bytes_touched": ..., "flops": ...}
// bytes_touched: the distinct device bytes each launch read or wrote, summed over its launches;
// flops: for cuBLAS's and cuBLASLt's GEMMs, 2 m n k (times the batch) from the sizes the call was
// given (cublas_emu.cpp), summed over the calls, the epilogue's bias and GELU not counted; 0 for a
// kernel, a copy or a memset, whose arithmetic the emulator cannot see;
// what a roofline's memory time counts, if each launch's bytes cross DRAM once. Found by page
// protection: before a launch every allocation's data pages become inaccessible; a launch's first
// access to a page faults, and the handler marks the page and opens it; after the launch each
// allocation counts its bytes on the marked pages. So a launch that touches one byte of a page
// counts the page's bytes of that allocation (up to 4 KB, or the allocation's size): compare at
// sizes where the tensors span many pages. A copy counts its bytes twice, a memset once.
namespace cuda_emu {
struct ReportRow { long long launches = 0; double bytes_touched = 0, flops = 0; };
static std::map<std::string, ReportRow>& report_rows() { static std::map<std::string, ReportRow> m; return m; }
static const char* report_path() { static const char* p = getenv("CUDA_EMU_LAUNCH_REPORT"); return p; }
static volatile bool watching = false;
static uintptr_t first_page(const Allocation& a) { return (uintptr_t)a.bytes / PAGE * PAGE; }
static size_t data_pages(const Allocation& a) {
    return ((uintptr_t)a.bytes + a.size + PAGE - 1) / PAGE - (uintptr_t)a.bytes / PAGE;
}

static void run_work_left_at_exit();
static void write_report() {
    run_work_left_at_exit();  // registered before this, so run after it: its launches count
    FILE* f = fopen(report_path(), "w");
    if (!f) { fprintf(stderr, "CUDA emulation: cannot write the launch report %s\n", report_path()); return; }
    for (auto& [name, row] : report_rows())
        fprintf(f, "{\"kernel\": \"%s\", \"launches\": %lld, \"bytes_touched\": %.0f, \"flops\": %.0f}\n", name.c_str(),
                row.launches, row.bytes_touched, row.flops);
    fclose(f);
}
static void count_launch(const char* name, double bytes, double flops = 0) {
    std::map<std::string, ReportRow>& rows = report_rows();  // constructed before atexit: destroyed after the report
    static bool registered = (atexit(write_report), true);
    (void)registered;
    ReportRow& row = rows[name];
    row.launches++;
    row.bytes_touched += bytes;
    row.flops += flops;
}
// called by the fault handler: true if `at` is on a watched page, now marked and open
static bool mark_touched(uintptr_t at) {
    if (!watching) return false;
    for (auto& [key, a] : allocations()) {
        uintptr_t first = first_page(a);
        if (a.size == 0 || at < first || at >= first + data_pages(a) * PAGE) continue;
        size_t page = (at - first) / PAGE;
        a.touched[page] = 1;
        mprotect((void*)(first + page * PAGE), PAGE, PROT_READ | PROT_WRITE);
        return true;
    }
    return false;
}
// around a launch or a library call (no-ops without CUDA_EMU_LAUNCH_REPORT)
void watch_begin() {
    if (!report_path()) return;
    std::lock_guard<std::mutex> lock(memory_mutex);
    for (auto& [key, a] : allocations()) {
        if (a.size == 0) continue;
        a.touched.assign(data_pages(a), 0);
        mprotect((void*)first_page(a), data_pages(a) * PAGE, PROT_NONE);
    }
    watching = true;
}
void watch_end(const char* name, double flops) {
    if (!report_path()) return;
    watching = false;
    double bytes = 0;
    std::lock_guard<std::mutex> lock(memory_mutex);
    for (auto& [key, a] : allocations()) {
        if (a.size == 0) continue;
        uintptr_t first = first_page(a), begin = (uintptr_t)a.bytes, end = begin + a.size;
        mprotect((void*)first, data_pages(a) * PAGE, PROT_READ | PROT_WRITE);
        for (size_t p = 0; p < a.touched.size(); p++)
            if (a.touched[p]) bytes += std::min(end, first + (p + 1) * PAGE) - std::max(begin, first + p * PAGE);
    }
    count_launch(name, bytes, flops);
}
void count_copy(const char* name, double bytes) { if (report_path()) count_launch(name, bytes); }
}  // namespace cuda_emu

// ---------------------------------------------------------------- faults
// a SIGSEGV inside a device allocation's handle or guard page is a bug of the program under
// test: say which, and where (the kernel running, if any), then end the run
static thread_local const LaunchSite* running_kernel = nullptr;
static void on_fault(int sig, siginfo_t* info, void*) {
    uintptr_t at = (uintptr_t)info->si_addr;
    if (mark_touched(at)) return;  // the launch report's first access to a page: opened, the access retried
    char line[512];
    const char* kernel = running_kernel ? running_kernel->kernel : nullptr;
    int n = 0;
    for (auto& [key, a] : allocations()) {
        if (at >= (uintptr_t)a.handle && at < (uintptr_t)a.handle + a.size + PAGE) {
            n = snprintf(line, sizeof(line), "error: CUDA emulation: host code dereferenced device memory (%zu bytes into a "
                         "%zu-byte cudaMalloc allocation)%s%s\n", (size_t)(at - (uintptr_t)a.handle), a.size,
                         kernel ? " in kernel " : "", kernel ? kernel : "");
            break;
        }
        uintptr_t end = (uintptr_t)a.bytes + a.size, guard = (uintptr_t)a.map + a.map_size - PAGE;
        if (at >= guard && at < guard + PAGE) {
            n = snprintf(line, sizeof(line), "error: CUDA emulation: out-of-range device memory access, %zu bytes past the "
                         "end of a %zu-byte allocation, %s%s%s%s:%d\n", (size_t)(at - end), a.size,
                         kernel ? "in kernel " : "outside any kernel (a copy or a library call)", kernel ? kernel : "",
                         kernel ? " launched at " : "", kernel ? running_kernel->file : "", kernel ? running_kernel->line : 0);
            break;
        }
    }
    if (n > 0) { if (write(2, line, n) < 0) {} _exit(134); }
    signal(sig, SIG_DFL);  // not ours: the ordinary crash
    raise(sig);
}
static void install_fault_handler() {
    static bool installed = false;
    if (installed) return;
    installed = true;
    struct sigaction sa = {};
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigaction(SIGSEGV, &sa, nullptr);
}

// ---------------------------------------------------------------- poison and canaries
static void poison(char* p, size_t bytes) {  // bytes a multiple of 8: 0xFFA5 in every 16-bit word (bytes A5 FF)
    const uint64_t words = 0x0001000100010001ull * POISON;
    for (size_t i = 0; i < bytes; i += 8) memcpy(p + i, &words, 8);
}
// the first byte of [p, p + n) that no longer holds the poison, or null
static const char* first_changed(const char* p, size_t n) {
    alignas(16) static char pattern[FRONT + 32];
    static bool filled = (poison(pattern, sizeof(pattern)), true);
    (void)filled;
    const char* want = pattern + ((uintptr_t)p & 1);  // the pattern in the same phase as p
    if (memcmp(p, want, n) == 0) return nullptr;
    for (size_t i = 0;; i++)
        if (p[i] != want[i]) return p + i;
}
// ---------------------------------------------------------------- host waits
// CUDA_EMU_WAIT_REPORT=FILE: at exit each process appends {"rank": R, "host_waits": N} to FILE: how many times
// the host waited for the device to finish the work issued since it last waited. A wait is a
// synchronize (device, stream, event), a stream query that finds the work done (base.h's
// device_synchronize polls), or a copy between the device and pageable host memory (cudaMemcpy,
// or cudaMemcpyAsync without page-locked memory: both wait for the work before them). A wait with
// nothing issued since the last one costs a GPU nothing and is not counted; a kernel, a copy on
// the device, a memset, a cuBLAS or NCCL call (all end in check_canaries) are work issued.
namespace cuda_emu {
static std::atomic<long long> issued_since_wait{0}, host_waits{0};
static void write_wait_report() {  // the MPI rank from the launcher's environment (MPICH, Open MPI), else 0
    const char* rank = getenv("PMI_RANK") ? getenv("PMI_RANK") : getenv("OMPI_COMM_WORLD_RANK") ? getenv("OMPI_COMM_WORLD_RANK") : "0";
    if (FILE* f = fopen(getenv("CUDA_EMU_WAIT_REPORT"), "a")) {
        fprintf(f, "{\"rank\": %s, \"host_waits\": %lld}\n", rank, host_waits.load());
        fclose(f);
    }
}
static bool wait_report_registered = getenv("CUDA_EMU_WAIT_REPORT") && atexit(write_wait_report) == 0;

// Asynchronous copies with page-locked memory hold the host to a discipline the emulator checks at
// each wait: an upload's host bytes stay as they were queued until a wait has passed (the GPU may
// read them any time before), and a download's host bytes hold nothing before a wait (they are
// 0xFF, NaN as floats, until its work runs, at the wait)
struct QueuedCopy { void* host; std::vector<char> bytes; };  // an upload's host bytes as queued
static std::vector<QueuedCopy>& queued_uploads() { static std::vector<QueuedCopy> v; return v; }
// checked when the upload runs (the bytes it would copy) and again at the wait
static void check_upload_source(const QueuedCopy& u) {
    if (memcmp(u.host, u.bytes.data(), u.bytes.size()))
        die("the host rewrote the %zu bytes at %p, an asynchronous upload's source, before a wait: the device may "
            "read them any time until one (cudaMemcpyAsync from page-locked memory)", u.bytes.size(), u.host);
}
static void land_queued_copies() {
    for (const QueuedCopy& u : queued_uploads()) check_upload_source(u);
    queued_uploads().clear();
}
static void host_waited() {
    land_queued_copies();
    if (issued_since_wait.exchange(0) > 0) host_waits++;
}
}  // namespace cuda_emu

namespace cuda_emu {
// every allocation's canaries still hold the poison; else a write went out of range: end the run,
// naming the kernel (site) or the call that made it
void check_canaries(const char* call, const LaunchSite* site) {
    issued_since_wait++;  // every kernel and library call ends here: work the next wait waits for
    char where[256];
    if (site) snprintf(where, sizeof(where), "in kernel %s launched at %s:%d", site->kernel, site->file, site->line);
    else snprintf(where, sizeof(where), "in %s", call);
    std::lock_guard<std::mutex> lock(memory_mutex);
    for (auto& [key, a] : allocations()) {
        if (const char* at = first_changed(a.bytes - FRONT, FRONT))
            die("out-of-range device memory access, %zu bytes before the start of a %zu-byte allocation, %s",
                (size_t)(a.bytes - at), a.size, where);
        if (const char* at = first_changed(a.bytes + a.size, rounded_size(a.size) - a.size))
            die("out-of-range device memory access, %zu bytes past the end of a %zu-byte allocation, %s",
                (size_t)(at - (a.bytes + a.size)), a.size, where);
    }
}
}  // namespace cuda_emu
// CUDA_EMU_REPORT_UNWRITTEN=1: a copy to the host of words that still hold the poison says so
static void report_unwritten(const char* from, size_t bytes, const void* device) {
    static const bool on = getenv("CUDA_EMU_REPORT_UNWRITTEN") != nullptr;
    if (!on) return;
    size_t count = 0, first = 0;
    for (size_t i = (uintptr_t)from & 1; i + 1 < bytes; i += 2)
        if ((uint8_t)from[i] == (POISON & 0xff) && (uint8_t)from[i + 1] == POISON >> 8 && !count++) first = i;
    if (count)
        fprintf(stderr, "CUDA emulation: cudaMemcpyDeviceToHost of %zu bytes from %p: %zu 16-bit words never written "
                "since cudaMalloc (0x%04X), the first at byte %zu\n", bytes, device, count, POISON, first);
}

// ---------------------------------------------------------------- memory API
cudaError_t cudaMalloc(void** ptr, size_t bytes) {
    install_fault_handler();
    *ptr = nullptr;
    Devices& d = devices();
    int device = physical_device();
    if (d.allocated[device] + bytes > d.memory) return record(cudaErrorMemoryAllocation);
    if (bytes == 0) return cudaSuccess;
    size_t rounded = rounded_size(bytes);                         // 32-byte aligned, as WMMA's loads need
    size_t data_pages = (FRONT + rounded + PAGE - 1) / PAGE * PAGE;  // room for the canaries before it
    Allocation a;
    a.map_size = data_pages + PAGE;
    a.map = (char*)mmap(nullptr, a.map_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    a.handle = (char*)mmap(nullptr, rounded + PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (a.map == MAP_FAILED || a.handle == MAP_FAILED) return record(cudaErrorMemoryAllocation);
    mprotect(a.map + data_pages, PAGE, PROT_NONE);                // the guard page
    a.bytes = a.map + data_pages - rounded;
    poison(a.map, data_pages);                                    // not zero: cudaMalloc does not clear
    a.size = bytes;
    a.device = device;
    std::lock_guard<std::mutex> lock(memory_mutex);
    allocations()[(uintptr_t)a.handle] = a;
    d.allocated[device] += bytes;
    *ptr = a.handle;
    return cudaSuccess;
}
cudaError_t cudaFree(void* ptr) {
    if (!ptr) return cudaSuccess;
    if (!stalled) run_all_work();  // cudaFree waits for the device, whose queued work may use the memory
    std::lock_guard<std::mutex> lock(memory_mutex);
    auto it = allocations().find((uintptr_t)ptr);
    if (it == allocations().end()) return record(cudaErrorInvalidValue);
    Allocation a = it->second;
    allocations().erase(it);
    devices().allocated[a.device] -= a.size;
    munmap(a.map, a.map_size);
    munmap(a.handle, rounded_size(a.size) + PAGE);
    return cudaSuccess;
}
cudaError_t cudaMallocHost(void** ptr, size_t bytes) {
    *ptr = bytes ? aligned_alloc(64, (bytes + 63) / 64 * 64) : nullptr;
    if (bytes && !*ptr) return record(cudaErrorMemoryAllocation);
    std::lock_guard<std::mutex> lock(memory_mutex);
    if (*ptr) pinned()[(uintptr_t)*ptr] = bytes;
    return cudaSuccess;
}
cudaError_t cudaFreeHost(void* ptr) {
    if (!ptr) return cudaSuccess;
    if (!stalled) run_all_work();  // CUDA waits for the device before freeing page-locked memory
    land_queued_copies();
    std::lock_guard<std::mutex> lock(memory_mutex);
    if (!pinned().erase((uintptr_t)ptr)) return record(cudaErrorInvalidValue);
    free(ptr);
    return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
    Devices& d = devices();
    *total_bytes = d.memory;
    *free_bytes = d.memory - d.allocated[physical_device()];
    return cudaSuccess;
}

static const char* copy_kind_names[] = {"HostToHost", "HostToDevice", "DeviceToHost", "DeviceToDevice", "Default"};
// the side a pointer is on must be the side the copy's kind says
static void check_side(const void* p, bool device_side, cudaMemcpyKind kind, const char* which) {
    bool on_device = is_device_pointer(p);
    if (on_device != device_side)
        die("cudaMemcpy%s: the %s pointer %p is %s memory but the kind says %s", copy_kind_names[kind], which, p,
            on_device ? "device" : "host", device_side ? "device" : "host");
}
// a copy's two sides for `kind` (cudaMemcpyDefault: where the pointers are), each pointer checked
// against the side the kind says; false: no such kind
static bool copy_sides(const void* dst, const void* src, cudaMemcpyKind kind, bool* dst_device, bool* src_device) {
    if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) return false;
    *dst_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    *src_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if (kind == cudaMemcpyDefault) { *dst_device = is_device_pointer(dst); *src_device = is_device_pointer(src); }
    check_side(dst, *dst_device, kind, "destination");
    check_side(src, *src_device, kind, "source");
    return true;
}
// what a copy reports once its bytes are read: the launch report's count (device to device), device
// memory read back that nobody wrote, the canaries
static void copy_reported(const char* call, const void* from, const void* src, size_t bytes, bool src_device,
                          bool dst_device) {
    if (src_device && dst_device) count_copy("cudaMemcpyDeviceToDevice", 2.0 * bytes);
    if (src_device && !dst_device) report_unwritten((const char*)from, bytes, src);
    check_canaries(call);
}
// a copy's work, queued on `stream`: the bytes move when it runs
// (an upload from page-locked memory: its source as queued, checked when it runs)
static void queue_copy(const char* call, void* to, const void* from, const void* src, size_t bytes, bool src_device,
                       bool dst_device, cudaStream_t stream) {
    if (!src_device)
        queued_uploads().push_back({(void*)src, std::vector<char>((const char*)src, (const char*)src + bytes)});
    QueuedCopy upload = src_device ? QueuedCopy{} : queued_uploads().back();
    enqueue(stream, [=] {
        if (!src_device) check_upload_source(upload);
        memmove(to, from, bytes);
        copy_reported(call, from, src, bytes, src_device, dst_device);
    });
}
// on the legacy stream: device to device is queued; with host memory on one side the host waits for
// the work before it (its stream's and the blocking streams'), then the copy is done when it returns
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    if (bytes == 0) return cudaSuccess;
    bool dst_device, src_device;
    if (!copy_sides(dst, src, kind, &dst_device, &src_device)) return record(cudaErrorInvalidMemcpyDirection);
    void* to = dst_device ? device_bytes(dst, bytes, "cudaMemcpy destination") : dst;
    const void* from = src_device ? device_bytes(src, bytes, "cudaMemcpy source") : src;
    if (src_device && dst_device) { queue_copy("cudaMemcpy", to, from, src, bytes, true, true, 0); return cudaSuccess; }
    run_work_before(0);  // waits forever behind a failed link
    host_waited();
    memmove(to, from, bytes);
    copy_reported("cudaMemcpy", from, src, bytes, src_device, dst_device);
    issued_since_wait = 0;  // done when it returns: nothing of it to wait for
    return cudaSuccess;
}
// from page-locked memory, queued work (the host goes on); from pageable memory a wait as cudaMemcpy's
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
    bool pageable;
    {
        std::lock_guard<std::mutex> lock(memory_mutex);
        pageable = (!find_allocation(dst) && !is_pinned(dst)) || (!find_allocation(src) && !is_pinned(src));
    }
    if (pageable || bytes == 0 || kind == cudaMemcpyDefault) return cudaMemcpy(dst, src, bytes, kind);
    bool dst_device, src_device;
    if (!copy_sides(dst, src, kind, &dst_device, &src_device)) return record(cudaErrorInvalidMemcpyDirection);
    if (stalled) return cudaSuccess;  // queued behind a failed link: it never runs, the host goes on
    void* to = dst_device ? device_bytes(dst, bytes, "cudaMemcpyAsync destination") : dst;
    const void* from = src_device ? device_bytes(src, bytes, "cudaMemcpyAsync source") : src;
    if (!dst_device) memset(dst, 0xFF, bytes);  // until its work runs the host sees 0xFF
    queue_copy("cudaMemcpyAsync", to, from, src, bytes, src_device, dst_device, stream);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream) {
    if (bytes == 0) return cudaSuccess;
    if (!is_device_pointer(ptr)) die("cudaMemset: %p is not device memory", ptr);
    void* at = device_bytes(ptr, bytes, "cudaMemset");
    enqueue(stream, [=] {
        memset(at, value, bytes);
        count_copy("cudaMemset", bytes);
        check_canaries("cudaMemset");
    });
    return cudaSuccess;
}
cudaError_t cudaMemset(void* ptr, int value, size_t bytes) { return cudaMemsetAsync(ptr, value, bytes, 0); }

// ---------------------------------------------------------------- devices API
cudaError_t cudaGetDeviceCount(int* count) {
    *count = (int)devices().visible.size();
    return *count > 0 ? cudaSuccess : record(cudaErrorNoDevice);
}
cudaError_t cudaSetDevice(int device) {
    if (device < 0 || device >= (int)devices().visible.size()) return record(cudaErrorInvalidDevice);
    devices().current = device;
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) { *device = devices().current; return cudaSuccess; }
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
    if (device < 0 || device >= (int)devices().visible.size()) return record(cudaErrorInvalidDevice);
    *p = cudaDeviceProp{};
    snprintf(p->name, sizeof(p->name), "CUDA emulation (device %d)", devices().visible[device]);
    p->totalGlobalMem = devices().memory;
    p->sharedMemPerBlock = 48 << 10;
    p->sharedMemPerBlockOptin = 227 << 10;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = 1024; p->maxThreadsDim[1] = 1024; p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 2147483647; p->maxGridSize[1] = 65535; p->maxGridSize[2] = 65535;
    p->multiProcessorCount = 132;
    p->major = 9; p->minor = 0;
    p->pciBusID = 0x10 + devices().visible[device];
    return cudaSuccess;
}
cudaError_t cudaDeviceGetPCIBusId(char* bus_id, int length, int device) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, device) != cudaSuccess) return record(cudaErrorInvalidDevice);
    snprintf(bus_id, length, "%08X:%02X:%02X.0", p.pciDomainID, p.pciBusID, p.pciDeviceID);
    return cudaSuccess;
}

// ---------------------------------------------------------------- streams, events, errors
// (the streams section above says when queued work runs)
cudaError_t cudaDeviceSynchronize() { run_all_work(); host_waited(); return cudaSuccess; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
    *stream = new CUstream_st{{}, !(flags & cudaStreamNonBlocking)};
    live_streams().push_back(*stream);
    return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }
cudaError_t cudaStreamDestroy(cudaStream_t stream) {  // its queued work still runs, as CUDA's does
    if (!stream || stream == cudaStreamLegacy) return record(cudaErrorInvalidResourceHandle);
    if (!stalled) run_work([&] { return stream->queue.empty(); }, true);
    auto& v = live_streams();
    v.erase(std::remove(v.begin(), v.end(), stream), v.end());
    delete stream;
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    CUstream_st* s = stream_of(stream);
    run_work([&] { return s->queue.empty(); }, true);
    host_waited();
    return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t stream) {  // runs what can run now: the GPU moved on meanwhile
    CUstream_st* s = stream_of(stream);
    if (!run_work([&] { return s->queue.empty(); }, false)) return cudaErrorNotReady;
    host_waited();  // polled until done: base.h's device_synchronize
    return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned) {
    if (!event) return record(cudaErrorInvalidResourceHandle);
    if (event->recorded > 0 && !stalled) push(stream, Work{Work::WAIT, 0, nullptr, nullptr, event, event->recorded, false});
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned) { *event = new CUevent_st{0.0, 0, 0}; return cudaSuccess; }
cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }
cudaError_t cudaEventDestroy(cudaEvent_t event) {  // a record or wait still queued keeps it until it runs
    if (!stalled) run_all_work();
    delete event;
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
    if (!event) return record(cudaErrorInvalidResourceHandle);
    if (!stalled) push(stream, Work{Work::RECORD, 0, nullptr, nullptr, event, ++event->recorded, false});
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
    unsigned long long mark = event->recorded;
    run_work([&] { return event->completed >= mark; }, true);
    host_waited();
    return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t event) {
    unsigned long long mark = event->recorded;
    return run_work([&] { return event->completed >= mark; }, false) ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
    *ms = (float)(end->ms - start->ms);
    return cudaSuccess;
}
cudaError_t cudaGetLastError() { cudaError_t e = last_error; last_error = cudaSuccess; return e; }
cudaError_t cudaPeekAtLastError() { return last_error; }
const char* cudaGetErrorString(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "no error";
        case cudaErrorInvalidValue: return "invalid argument";
        case cudaErrorMemoryAllocation: return "out of memory";
        case cudaErrorInitializationError: return "initialization error";
        case cudaErrorInvalidConfiguration: return "invalid configuration argument";
        case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
        case cudaErrorNoDevice: return "no CUDA-capable device is detected";
        case cudaErrorInvalidDevice: return "invalid device ordinal";
        case cudaErrorInvalidResourceHandle: return "invalid resource handle";
        case cudaErrorNotReady: return "device not ready";
        case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
        case cudaErrorLaunchFailure: return "unspecified launch failure";
    }
    return "unknown error";
}
const char* cudaGetErrorName(cudaError_t e) { return cudaGetErrorString(e); }

static std::map<const void*, int>& dynamic_shared_limits() { static std::map<const void*, int> m; return m; }
cudaError_t cuda_emu_set_function_attribute(const void* function, cudaFuncAttribute attribute, int value) {
    if (attribute != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 || value > (227 << 10))
        return record(cudaErrorInvalidValue);
    dynamic_shared_limits()[function] = value;
    return cudaSuccess;
}

// ---------------------------------------------------------------- launches
namespace cuda_emu {

// the runtime's launch contract (CUDA programming guide, compute capability 9.0)
bool launch_valid(const void* kernel, const LaunchSite& site, dim3 grid, dim3 block, size_t shared_bytes) {
    const char* problem = nullptr;
    char detail[160];
    unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
    if (grid.x == 0 || grid.y == 0 || grid.z == 0) problem = "a grid dimension of 0 blocks";
    else if (block.x == 0 || block.y == 0 || block.z == 0) problem = "a block dimension of 0 threads";
    else if (threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64) problem = "more than 1024 threads per block";
    else if (grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535) problem = "a grid dimension over its limit";
    if (problem) {
        snprintf(detail, sizeof(detail), "grid (%u,%u,%u), block (%u,%u,%u)", grid.x, grid.y, grid.z, block.x, block.y, block.z);
        fprintf(stderr, "CUDA emulation: launch of %s at %s:%d refused: %s, %s\n", site.kernel, site.file, site.line,
                problem, detail);
        record(cudaErrorInvalidConfiguration);
        return false;
    }
    auto opt_in = dynamic_shared_limits().find(kernel);
    size_t limit = opt_in == dynamic_shared_limits().end() ? (48 << 10) : (size_t)opt_in->second;
    if (shared_bytes > limit) {
        fprintf(stderr, "CUDA emulation: launch of %s at %s:%d refused: %zu bytes of dynamic shared memory, over %zu%s\n",
                site.kernel, site.file, site.line, shared_bytes, limit,
                opt_in == dynamic_shared_limits().end() ? " (more needs cudaFuncSetAttribute's opt-in)" : "");
        record(cudaErrorInvalidValue);
        return false;
    }
    return true;
}

void* kernel_argument(const void* p, const LaunchSite& site, int index) {
    if (!p) return nullptr;
    {
        std::lock_guard<std::mutex> lock(memory_mutex);
        const Allocation* a = find_allocation(p);
        if (a) return a->bytes + ((const char*)p - a->handle);
        if (is_pinned(p)) return (void*)p;  // page-locked host memory is mapped for the device
    }
    die("kernel %s launched at %s:%d: argument %d is the host pointer %p; a kernel can only read device memory", site.kernel,
        site.file, site.line, index + 1, p);
}

void translate_struct_words(void* value, size_t bytes) {
    std::lock_guard<std::mutex> lock(memory_mutex);
    for (size_t at = 0; at + sizeof(void*) <= bytes; at += sizeof(void*)) {
        char* word;
        memcpy(&word, (char*)value + at, sizeof(word));
        const Allocation* a = word ? find_allocation(word) : nullptr;
        if (!a) continue;
        char* real = a->bytes + (word - a->handle);
        memcpy((char*)value + at, &real, sizeof(real));
    }
}

// ---------------------------------------------------------------- the scheduler
enum ThreadState { NOT_STARTED, RUNNABLE, AT_BARRIER, AT_WARP_SYNC, EXITED };
static const size_t STACK_BYTES = 256 << 10;

// A switch between fibers: switch_stack(&from, to) pushes the registers a called function must
// keep (System V x86-64: rbx, rbp, r12-r15) on the running stack, saves its stack pointer in
// *from, loads `to` and pops what that stack pushed when it left: 15 instructions, where glibc's
// _longjmp also demangles pointers and unwinds cleanup handlers (a sixth of an emulated run). A
// new fiber's stack holds six zeros for the registers and fiber_main as the address to return to.
// Elsewhere, ucontext's swapcontext (a system call a switch, for the signal mask): on other
// machines, on x32, and where the build enables CET's shadow stack (-fcf-protection: a ret on
// another stack than its call's faults there; swapcontext switches the shadow stack too). Neither
// saves MXCSR or the x87 control word: nothing here changes them.
#if defined(__x86_64__) && !defined(__ILP32__) && !(defined(__CET__) && (__CET__ & 2))
extern "C" void cuda_emu_switch_stack(void** save, void* load);
asm(".pushsection .text\n.globl cuda_emu_switch_stack\n.type cuda_emu_switch_stack, @function\ncuda_emu_switch_stack:\n"
    "  push %rbp\n  push %rbx\n  push %r12\n  push %r13\n  push %r14\n  push %r15\n"
    "  mov %rsp, (%rdi)\n  mov %rsi, %rsp\n"
    "  pop %r15\n  pop %r14\n  pop %r13\n  pop %r12\n  pop %rbx\n  pop %rbp\n  ret\n"
    ".size cuda_emu_switch_stack, .-cuda_emu_switch_stack\n.popsection\n");
struct Context { void* sp; };
static void switch_stack(Context* from, Context* to) { cuda_emu_switch_stack(&from->sp, to->sp); }
static void first_entry(Context* c, char* stack_top, void (*entry)()) {  // stack_top: 16-byte aligned
    void** sp = (void**)stack_top;
    *--sp = nullptr;          // entry's return address (it never returns): at entry rsp + 8 is 16-byte aligned
    *--sp = (void*)entry;     // where the first switch's ret goes
    for (int i = 0; i < 6; i++) *--sp = nullptr;  // the six registers it pops
    c->sp = sp;
}
#else
struct Context { ucontext_t uc; };
static void switch_stack(Context* from, Context* to) { swapcontext(&from->uc, &to->uc); }
static void first_entry(Context* c, char* stack_top, void (*entry)()) {
    getcontext(&c->uc);
    c->uc.uc_stack.ss_sp = stack_top - STACK_BYTES;
    c->uc.uc_stack.ss_size = STACK_BYTES;
    c->uc.uc_link = nullptr;
    makecontext(&c->uc, entry, 0);
}
#endif
struct Fiber {
    Context context;   // where it stopped (or its first entry)
    char* stack;
#if CUDA_EMU_TSAN
    void* tsan;
#endif
};
struct WarpSync {      // the lanes of one warp meeting at a shuffle, __syncwarp or a WMMA call
    unsigned mask, arrived;
    unsigned exited;         // the lanes that have ended (a bit each: tested at every meeting)
    int generation;
    const char* what;        // the call the waiting lanes are in
    bool whole_warp;         // a WMMA call: every lane must come, to this same call
    uint64_t values[2][32];  // by generation parity: a fast lane's next exchange cannot overwrite this one's
};
static const size_t GATHER_BYTES = cuda_emu_gather_bytes;  // the most a lane leaves in a warp all-gather (mma.h's fragments)
struct Worker {        // one per OS thread that runs blocks
    Context scheduler;
    std::vector<Fiber*> idle;  // fibers whose thread has ended, for the next thread
#if CUDA_EMU_TSAN
    std::vector<Fiber*> pool;  // under ThreadSanitizer: fiber t runs thread t of every block
#endif
    const LaunchSite* site;
    void (*run_thread)(void*);
    void* bound;
    int threads, current, exited, at_barrier;
    std::vector<uint8_t> state;
    std::vector<Fiber*> fiber_of;
    std::vector<WarpSync> warps;
    std::vector<char> gathered;  // all-gathers: per warp, per generation parity, 32 lanes x GATHER_BYTES
#if CUDA_EMU_TSAN
    void* tsan_scheduler;
    char block_start, block_end, barrier[2], warp_sync[32][2];  // their addresses: happens-before edges
    int barrier_generation;
#endif
};
static thread_local Worker* worker = nullptr;

static uint3 thread_index(int t) {
    if (blockDim.y == 1 && blockDim.z == 1) return uint3{(unsigned)t, 0, 0};  // most blocks: no division
    return uint3{(unsigned)t % blockDim.x, (unsigned)t / blockDim.x % blockDim.y, (unsigned)t / (blockDim.x * blockDim.y)};
}
static void describe_thread(char* out, size_t size, int t) {
    uint3 i = thread_index(t);
    snprintf(out, size, "kernel %s (%s:%d), block (%u,%u,%u), thread (%u,%u,%u)", worker->site->kernel, worker->site->file,
             worker->site->line, blockIdx.x, blockIdx.y, blockIdx.z, i.x, i.y, i.z);
}

// the running CUDA thread gives the OS thread back to the scheduler; returns when resumed
static void park(Worker* w) {
    Fiber* f = w->fiber_of[w->current];
#if CUDA_EMU_TSAN
    __tsan_switch_to_fiber(w->tsan_scheduler, __tsan_switch_to_fiber_no_sync);
#endif
    switch_stack(&f->context, &w->scheduler);
}

static void thread_exited(Worker* w);
static Fiber* new_fiber();
// thread t, not started, gets a fiber and becomes runnable: under ThreadSanitizer fiber t of the pool
// (two threads on one fiber would be ordered, hiding their races), else an idle one (the fiber of the
// thread that ended last, or a new one)
static void give_fiber(Worker* w, int t) {
#if CUDA_EMU_TSAN
    while ((int)w->pool.size() <= t) w->pool.push_back(new_fiber());
    w->fiber_of[t] = w->pool[t];
#else
    if (w->idle.empty()) w->idle.push_back(new_fiber());
    w->fiber_of[t] = w->idle.back();
    w->idle.pop_back();
#endif
    w->state[t] = RUNNABLE;
}
// thread t is the one running: its index for the kernel's threadIdx
static void make_current(Worker* w, int t) {
    w->current = t;
    threadIdx = thread_index(t);
}
static void fiber_main() {
    Worker* w = worker;
    for (;;) {
#if CUDA_EMU_TSAN
        __tsan_acquire(&w->block_start);
#endif
        w->run_thread(w->bound);
        thread_exited(w);
#if !CUDA_EMU_TSAN
        // the scheduler would start the next thread, if it has not started, on this fiber (the idle one,
        // as thread_exited left it): start it here, without the two switches there and back (run_block
        // goes on after it)
        int next = w->current + 1;
        if (next < w->threads && w->state[next] == NOT_STARTED) {
            give_fiber(w, next);
            make_current(w, next);
            continue;
        }
#endif
        park(w);  // resumed when the scheduler gives this fiber the next thread
    }
}

static Fiber* new_fiber() {
    Fiber* f = new Fiber();
    f->stack = (char*)mmap(nullptr, STACK_BYTES + PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (f->stack == MAP_FAILED) die("cannot map a fiber stack");
    mprotect(f->stack, PAGE, PROT_NONE);  // a stack overflow faults instead of writing over the next stack
    first_entry(&f->context, f->stack + PAGE + STACK_BYTES, fiber_main);
#if CUDA_EMU_TSAN
    f->tsan = __tsan_create_fiber(0);
#endif
    return f;
}

// runs thread t until it parks or ends
static void resume(Worker* w, int t) {
    make_current(w, t);
    Fiber* f = w->fiber_of[t];
#if CUDA_EMU_TSAN
    __tsan_switch_to_fiber(f->tsan, __tsan_switch_to_fiber_no_sync);
#endif
    switch_stack(&w->scheduler, &f->context);
}

static void release_barrier(Worker* w) {
    for (int t = 0; t < w->threads; t++)
        if (w->state[t] == AT_BARRIER) w->state[t] = RUNNABLE;
    w->at_barrier = 0;
#if CUDA_EMU_TSAN
    w->barrier_generation++;
#endif
}

static void thread_exited(Worker* w) {
    int t = w->current;
    w->state[t] = EXITED;
    w->exited++;
    w->warps[t / 32].exited |= 1u << (t % 32);
#if CUDA_EMU_TSAN
    __tsan_release(&w->block_end);
#else
    w->idle.push_back(w->fiber_of[t]);
#endif
    WarpSync& s = w->warps[t / 32];
    if (s.arrived && (s.mask >> (t % 32) & 1u)) {
        char who[256];
        describe_thread(who, sizeof(who), t);
        if (s.whole_warp)
            die("%s exited while lanes 0x%08x of its warp wait in %s, which every lane of the warp must call", who,
                s.arrived, s.what);
        die("%s exited while lanes 0x%08x of its warp wait in a shuffle or __syncwarp whose mask 0x%08x names it", who,
            s.arrived, s.mask);
    }
    if (w->at_barrier > 0 && w->at_barrier + w->exited == w->threads) release_barrier(w);
}

static void run_block(Worker* w) {
    std::fill(w->state.begin(), w->state.end(), (uint8_t)NOT_STARTED);
    for (WarpSync& s : w->warps) s = WarpSync{};
    w->exited = w->at_barrier = 0;
#if CUDA_EMU_TSAN
    __tsan_release(&w->block_start);
#endif
    while (w->exited < w->threads) {
        bool progress = false;
        for (int t = 0; t < w->threads; t++) {
            if (w->state[t] == NOT_STARTED) give_fiber(w, t);
            if (w->state[t] != RUNNABLE) continue;
            resume(w, t);
            t = w->current;  // the threads fiber_main started after t, in this order, ran: go on after the last
            progress = true;
        }
        if (progress) continue;
        int waiting_block = 0, waiting_warp = 0;
        for (int t = 0; t < w->threads; t++) {
            waiting_block += w->state[t] == AT_BARRIER;
            waiting_warp += w->state[t] == AT_WARP_SYNC;
        }
        die("kernel %s (%s:%d), block (%u,%u,%u) cannot go on: %d threads wait at __syncthreads, %d at a warp operation "
            "whose other lanes never come, %d have exited (a barrier or shuffle in divergent code)", w->site->kernel,
            w->site->file, w->site->line, blockIdx.x, blockIdx.y, blockIdx.z, waiting_block, waiting_warp, w->exited);
    }
#if CUDA_EMU_TSAN
    __tsan_acquire(&w->block_end);
#endif
}

static Worker* this_worker(const LaunchSite& site, dim3 block, void (*run_thread)(void*), void* bound) {
    if (!worker) {
        worker = new Worker();
#if CUDA_EMU_TSAN
        worker->tsan_scheduler = __tsan_get_current_fiber();
        worker->barrier_generation = 0;
#endif
    }
    Worker* w = worker;
    w->site = &site;
    w->run_thread = run_thread;
    w->bound = bound;
    w->threads = (int)(block.x * block.y * block.z);
    w->state.resize(w->threads);
    w->fiber_of.resize(w->threads);
    w->warps.resize((w->threads + 31) / 32);
    size_t gather_space = w->warps.size() * 2 * 32 * GATHER_BYTES;
    if (w->gathered.size() < gather_space) w->gathered.resize(gather_space);  // only grows
    return w;
}

void run_grid(const LaunchSite& site, dim3 grid, dim3 block, void (*run_thread)(void*), void* bound) {
    long long blocks = (long long)grid.x * grid.y * grid.z;
    watch_begin();
    auto run = [&](long long b) {
        Worker* w = this_worker(site, block, run_thread, bound);
        gridDim = grid;
        blockDim = block;
        blockIdx = uint3{(unsigned)(b % grid.x), (unsigned)(b / grid.x % grid.y), (unsigned)(b / ((long long)grid.x * grid.y))};
        running_kernel = &site;
        run_block(w);
        running_kernel = nullptr;
    };
#if defined(_OPENMP) && !CUDA_EMU_TSAN
    if (blocks > 1 && omp_get_max_threads() > 1) {
        #pragma omp parallel for schedule(dynamic, 1)
        for (long long b = 0; b < blocks; b++) run(b);
        watch_end(site.kernel);
        check_canaries(site.kernel, &site);
        return;
    }
#endif
    for (long long b = 0; b < blocks; b++) run(b);
    watch_end(site.kernel);
    check_canaries(site.kernel, &site);
}

// ---------------------------------------------------------------- barriers and shuffles

static void check_in_kernel(const char* what) {
    if (!worker || !running_kernel) die("%s called outside a kernel", what);
}

}  // namespace cuda_emu

void __syncthreads() {
    check_in_kernel("__syncthreads");
    Worker* w = worker;
#if CUDA_EMU_TSAN
    char* sync = &w->barrier[w->barrier_generation & 1];
    __tsan_release(sync);
#endif
    w->at_barrier++;
    if (w->at_barrier + w->exited == w->threads) release_barrier(w);  // the last to arrive goes on
    else { w->state[w->current] = AT_BARRIER; park(w); }
#if CUDA_EMU_TSAN
    __tsan_acquire(sync);
#endif
}

// the calling lane meets the lanes of `mask` in its warp, leaving `bits` (and, for an all-gather,
// `bytes` bytes at `data`); returns the parity of the meeting, whose values stay until the lanes'
// next meeting but one. `whole_warp`: a WMMA call, which the waiting lanes must all be in too
static int warp_meet_at(unsigned mask, uint64_t bits, const void* data, size_t bytes, const char* what, bool whole_warp) {
    check_in_kernel(what);
    Worker* w = worker;
    int t = w->current, warp = t / 32, lane = t % 32, lanes = std::min(32, w->threads - warp * 32);
    char who[256];
    if (!(mask >> lane & 1u)) {
        describe_thread(who, sizeof(who), t);
        die("%s: %s with mask 0x%08x, which does not name the calling lane %d", who, what, mask, lane);
    }
    if (lanes < 32 && (mask >> lanes) != 0) {
        describe_thread(who, sizeof(who), t);
        die("%s: %s with mask 0x%08x names lanes beyond the %d this warp has (blockDim %u)", who, what, mask, lanes,
            blockDim.x * blockDim.y * blockDim.z);
    }
    WarpSync& s = w->warps[warp];
    if (unsigned gone = mask & s.exited) {
        describe_thread(who, sizeof(who), t);
        die("%s: %s with mask 0x%08x names lane %d, which has exited", who, what, mask, __builtin_ctz(gone));
    }
    if (s.arrived && s.mask != mask) {
        describe_thread(who, sizeof(who), t);
        die("%s: %s with mask 0x%08x while lanes 0x%08x wait with mask 0x%08x", who, what, mask, s.arrived, s.mask);
    }
    if (s.arrived && (whole_warp || s.whole_warp) && strcmp(what, s.what) != 0) {
        describe_thread(who, sizeof(who), t);
        die("%s: %s while lanes 0x%08x of its warp wait in %s (a WMMA call every lane of the warp must make)", who, what,
            s.arrived, s.what);
    }
    s.mask = mask;
    s.what = what;
    s.whole_warp = whole_warp;
    int parity = s.generation & 1;
    s.values[parity][lane] = bits;
    if (bytes) memcpy(&w->gathered[((warp * 2 + parity) * 32 + lane) * GATHER_BYTES], data, bytes);
    s.arrived |= 1u << lane;
#if CUDA_EMU_TSAN
    char* sync = &w->warp_sync[warp % 32][parity];
    __tsan_release(sync);
#endif
    if (s.arrived == mask) {  // the last lane: release the others and go on
        for (int l = 0; l < lanes; l++)
            if (mask >> l & 1u) w->state[warp * 32 + l] = RUNNABLE;
        s.arrived = 0;
        s.generation++;
    } else {
        w->state[t] = AT_WARP_SYNC;
        park(w);
    }
#if CUDA_EMU_TSAN
    __tsan_acquire(sync);
#endif
    return parity;
}

// a shuffle or __syncwarp: returns the bits lane `source` left (source < 0: none)
static uint64_t warp_meet(unsigned mask, uint64_t bits, int source, const char* what) {
    int parity = warp_meet_at(mask, bits, nullptr, 0, what, false);
    if (source < 0) return bits;
    // a lane its mask leaves out has no value for it: undefined in CUDA, all ones here (NaN, -1)
    return mask >> source & 1u ? worker->warps[worker->current / 32].values[parity][source] : ~(uint64_t)0;
}

void __syncwarp(unsigned mask) { warp_meet(mask, 0, -1, "__syncwarp"); }

uint64_t cuda_emu_shuffle(unsigned mask, uint64_t bits, CudaEmuShuffle kind, int arg, int width) {
    if (width <= 0 || width > 32 || (width & (width - 1))) die("a shuffle's width must be a power of 2 up to 32, got %d", width);
    int lane = worker ? worker->current % 32 : 0, segment = lane & ~(width - 1), source = lane;
    switch (kind) {  // CUDA's rules: a source outside the lane's segment reads the lane's own value
        case SHUFFLE_IDX: source = segment + (arg & (width - 1)); break;
        case SHUFFLE_UP: source = lane - arg >= segment ? lane - arg : lane; break;
        case SHUFFLE_DOWN: source = lane + arg < segment + width ? lane + arg : lane; break;
        case SHUFFLE_XOR: source = ((lane ^ arg) & ~(width - 1)) <= segment ? lane ^ arg : lane; break;
    }
    return warp_meet(mask, bits, source, "a shuffle");
}

void cuda_emu_kernel_error(const char* format, ...) {
    check_in_kernel("cuda_emu_kernel_error");
    char who[256], message[1024];
    describe_thread(who, sizeof(who), worker->current);
    va_list args;
    va_start(args, format);
    vsnprintf(message, sizeof(message), format, args);
    va_end(args);
    die("%s: %s", who, message);
}

// a WMMA call (mma.h): all 32 lanes of the warp must come, to this same call; a warp of fewer lanes,
// or one with a lane that has exited, can never complete it, and ends the run at once
const void* cuda_emu_warp_all_gather(const char* what, const void* mine, size_t bytes) {
    check_in_kernel(what);
    Worker* w = worker;
    int t = w->current, warp = t / 32, lanes = std::min(32, w->threads - warp * 32);
    if (bytes > GATHER_BYTES)
        cuda_emu_kernel_error("%s gathers %zu bytes a lane, over the emulator's %zu", what, bytes, GATHER_BYTES);
    if (lanes < 32)
        cuda_emu_kernel_error("%s in a warp of %d lanes (blockDim %u): every one of a warp's 32 lanes must call it", what,
                              lanes, blockDim.x * blockDim.y * blockDim.z);
    if (unsigned gone = w->warps[warp].exited)
        cuda_emu_kernel_error("%s while lane %d of its warp has exited: every one of a warp's 32 lanes must call it",
                              what, __builtin_ctz(gone));
    int parity = warp_meet_at(0xffffffffu, 0, mine, bytes, what, true);
    return &w->gathered[(warp * 2 + parity) * 32 * GATHER_BYTES];
}

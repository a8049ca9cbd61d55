/*
base.h: what every file needs, whatever it is built with: the error path (fail),
"device" memory and copies, the memory ledger, and files written whole or not at all.

fail() prints one line and exits 1. It knows nothing of MPI or CUDA, so the
tokenizer builds with plain g++. A multi-rank run must not leave the other ranks
waiting forever in a collective for one that failed: comm.h installs a fail hook
that ends the whole job (MPI_Abort) after the line is out.

The trainer never calls a CUDA API; it calls device_malloc, device_to_host, ...
On the CPU build the "device" is host memory and these are malloc and memcpy, so
the same trainer source runs unchanged.
*/
#pragma once
// defines: fail, FailHook, fail_hook, print_error_line, ceil_div, read_whole_file, WholeFile, whole_file_open,
//          whole_file_write, whole_file_commit, whole_file_abandon, sync_directory_of, FileDigest, file_digest_start,
//          file_digest_add, file_digest_hash, FileCheck, file_check, device_malloc, device_free, AsyncErrorWatch,
//          async_error_watch, host_to_device, device_to_host, device_to_device, device_zero, device_synchronize,
//          pinned_host_malloc, MemoryKind, memory_kind_names, BufferSpec, allocate_buffers, buffer_bytes, file_exists,
//          CALLER, cudaCheck, cuda_check, pinned_host_free, host_to_device_async, device_to_host_async, DeviceClock,
//          device_clock_stamp, device_clock_ms, device_clock_free, Stream, device_zero_on,
//          device_to_device_on
#include <stdio.h>   // defines: fprintf, vsnprintf
#include <stdlib.h>  // defines: exit, aligned_alloc, free
#include <string.h>  // defines: memcpy, memset
#include <stddef.h>  // defines: size_t
#include <stdint.h>  // defines: uint64_t
#include <sys/stat.h>  // defines: stat (file_exists)
#include <fcntl.h>     // defines: open, O_RDONLY
#include <unistd.h>    // defines: fsync, close
#include <stdarg.h>  // defines: va_list
#include <string>   // defines: std::string
#include <vector>   // defines: std::vector
#include <chrono>   // defines: std::chrono::steady_clock
#include "precision.h"  // defines: HOST_DEVICE

// ---------------------------------------------------------------- the error path

// "error: ...\n" in one write, so the lines of several ranks do not interleave
inline void print_error_line(const char* format, va_list args) {
    char line[2048] = "error: ";
    vsnprintf(line + 7, sizeof(line) - 8, format, args);
    strcat(line, "\n");
    fputs(line, stderr);
    fflush(stderr);
}

// called by fail() after the message, before exit: comm.h's ends a multi-rank job. A
// process-wide setting, like a signal handler: there is one way to die per process.
typedef void (*FailHook)(void);
inline FailHook& fail_hook() { static FailHook hook = nullptr; return hook; }

// one line naming the problem and exit 1: the error path of every module. (Errors that
// every rank detects alike use comm_fail_all, which lets each rank print its line first.)
[[noreturn]] __attribute__((format(printf, 1, 2))) inline void fail(const char* format, ...) {
    fflush(stdout);
    va_list args;
    va_start(args, format);
    print_error_line(format, args);
    va_end(args);
    if (fail_hook()) fail_hook()();
    exit(EXIT_FAILURE);
}

HOST_DEVICE inline size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

// ---------------------------------------------------------------- device memory

#ifdef __CUDACC__
#include <cuda_runtime.h>  // defines: cudaMalloc, cudaMemcpy, ...
#include <sched.h>         // defines: sched_yield

inline void cuda_check(cudaError_t err, const char* file, int line) {
    if (err != cudaSuccess) fail("CUDA %s at %s:%d", cudaGetErrorString(err), file, line);
}
#define cudaCheck(err) cuda_check((err), __FILE__, __LINE__)

// Work on a GPU is queued, and a failed NCCL link leaves it queued forever: a blocking wait would
// hang the job. So waits poll the stream and, between polls, ask comm.h (which registers itself
// here, a process-wide setting like fail_hook) whether a communicator reported an asynchronous
// error; if one did, the run ends with that line. NULL: no collectives to ask about.
typedef const char* (*AsyncErrorCheck)(void* context);  // a message, or NULL while all is well
struct AsyncErrorWatch { AsyncErrorCheck check; void* context; };
inline AsyncErrorWatch& async_error_watch() { static AsyncErrorWatch watch = {nullptr, nullptr}; return watch; }

// Errors name the caller's file and line (__builtin_FILE/__builtin_LINE as default arguments),
// not this file's: "CUDA out of memory at zero.h:112"
#define CALLER const char* file = __builtin_FILE(), int line = __builtin_LINE()
inline void device_synchronize(CALLER) {
    for (;;) {
        cudaError_t status = cudaStreamQuery(0);  // the legacy default stream: all work issued so far
        if (status == cudaSuccess) return;
        if (status != cudaErrorNotReady) cuda_check(status, file, line);
        AsyncErrorWatch& w = async_error_watch();
        if (const char* failed = w.check ? w.check(w.context) : nullptr)
            fail("%s (waiting at %s:%d)", failed, file, line);
        sched_yield();  // the core to others between polls: NCCL's proxy thread may share it
    }
}
inline void* device_malloc(size_t bytes, CALLER) {
    void* p = nullptr;
    if (bytes) cuda_check(cudaMalloc(&p, bytes), file, line);
    return p;
}
inline void device_free(void* p, CALLER) { if (p) cuda_check(cudaFree(p), file, line); }
// copies between host and device wait for the work before them: through device_synchronize
inline void host_to_device(void* dst, const void* src, size_t bytes, CALLER) {
    device_synchronize(file, line);
    cuda_check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), file, line);
}
inline void device_to_host(void* dst, const void* src, size_t bytes, CALLER) {
    device_synchronize(file, line);
    cuda_check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), file, line);
}
inline void device_to_device(void* dst, const void* src, size_t bytes, CALLER) {
    cuda_check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice), file, line);
}
inline void device_zero(void* p, size_t bytes, CALLER) { cuda_check(cudaMemset(p, 0, bytes), file, line); }
// Stream: where device work is queued; 0 is the default stream, where the trainer computes, and
// overlap.h's communication stream is another
using Stream = cudaStream_t;
inline void device_zero_on(Stream stream, void* p, size_t bytes, CALLER) {
    cuda_check(cudaMemsetAsync(p, 0, bytes, stream), file, line);
}
inline void device_to_device_on(Stream stream, void* dst, const void* src, size_t bytes, CALLER) {
    cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream), file, line);
}
// page-locked host memory: device copies to and from it run at full speed (MPI staging), and
// without a wait (below)
inline void* pinned_host_malloc(size_t bytes, CALLER) {
    void* p = nullptr;
    if (bytes) cuda_check(cudaMallocHost(&p, bytes), file, line);
    return p;
}
inline void pinned_host_free(void* p, CALLER) { if (p) cuda_check(cudaFreeHost(p), file, line); }
// copies that do not wait: queued behind the work before them, the host goes on. The host side
// must be page-locked (from pageable memory CUDA waits anyway), and left alone until a wait has
// passed: not written while an upload may still read it, not read before a download has landed
// (staging.h hands out such memory for a step)
inline void host_to_device_async(void* dst, const void* src, size_t bytes, CALLER) {
    cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, 0), file, line);
}
inline void device_to_host_async(void* dst, const void* src, size_t bytes, CALLER) {
    cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, 0), file, line);
}
// moments in the device's work, timed without waiting: a stamp is an event recorded where the
// stream has got to; the time between two is read once a wait has passed them both. The events
// are made once and reused (restart: used = 0)
struct DeviceClock { std::vector<cudaEvent_t> events; int used = 0; };
inline int device_clock_stamp(DeviceClock* c, CALLER) {
    if (c->used == (int)c->events.size()) {
        c->events.emplace_back();
        cuda_check(cudaEventCreate(&c->events.back()), file, line);
    }
    cuda_check(cudaEventRecord(c->events[c->used], 0), file, line);
    return c->used++;
}
inline double device_clock_ms(const DeviceClock* c, int from, int to, CALLER) {  // after a wait
    float ms = 0.0f;
    cuda_check(cudaEventElapsedTime(&ms, c->events[from], c->events[to]), file, line);
    return ms;
}
inline void device_clock_free(DeviceClock* c) {
    for (cudaEvent_t e : c->events) cudaEventDestroy(e);
    *c = DeviceClock{};
}
#undef CALLER

#else  // CPU build: device memory is host memory

inline void* device_malloc(size_t bytes) {
    if (bytes == 0) return nullptr;
    void* p = aligned_alloc(64, ceil_div(bytes, 64) * 64);
    if (!p) fail("out of memory allocating %zu bytes", bytes);
    return p;
}
inline void device_free(void* p) { free(p); }
inline void host_to_device(void* dst, const void* src, size_t bytes) { memcpy(dst, src, bytes); }
inline void device_to_host(void* dst, const void* src, size_t bytes) { memcpy(dst, src, bytes); }
inline void device_to_device(void* dst, const void* src, size_t bytes) { memcpy(dst, src, bytes); }
inline void device_zero(void* p, size_t bytes) { memset(p, 0, bytes); }
using Stream = void*;  // the CPU build has no streams: its work is done when the call returns
inline void device_zero_on(Stream, void* p, size_t bytes) { memset(p, 0, bytes); }
inline void device_to_device_on(Stream, void* dst, const void* src, size_t bytes) { memcpy(dst, src, bytes); }
inline void device_synchronize() {}
inline void* pinned_host_malloc(size_t bytes) { return bytes ? device_malloc(bytes) : nullptr; }
inline void pinned_host_free(void* p) { free(p); }
inline void host_to_device_async(void* dst, const void* src, size_t bytes) { memcpy(dst, src, bytes); }
inline void device_to_host_async(void* dst, const void* src, size_t bytes) { memcpy(dst, src, bytes); }
// the CPU's work is done when its calls return: a stamp is the clock
struct DeviceClock { std::vector<std::chrono::steady_clock::time_point> events; int used = 0; };
inline int device_clock_stamp(DeviceClock* c) {
    if (c->used == (int)c->events.size()) c->events.emplace_back();
    c->events[c->used] = std::chrono::steady_clock::now();
    return c->used++;
}
inline double device_clock_ms(const DeviceClock* c, int from, int to) {
    return std::chrono::duration<double, std::milli>(c->events[to] - c->events[from]).count();
}
inline void device_clock_free(DeviceClock* c) { *c = DeviceClock{}; }
#endif

// ---------------------------------------------------------------- memory ledger
// Every device allocation of the trainer is declared once, as a BufferSpec in a list,
// under one kind. The same list is allocated for training and only summed for -plan,
// so what -plan prints is what a run allocates; the tests check both against formulas
// of their own. Persistent: lives through the run. Transient: a working buffer reused
// within a step. Logits are a kind of their own: the largest activation of a small GPT,
// and what the vocabulary-parallel head divides by tp.
enum MemoryKind { MEM_PARAMETERS, MEM_GRADIENTS, MEM_OPTIMIZER, MEM_PARAMETERS_TRANSIENT, MEM_GRADIENTS_TRANSIENT,
                  MEM_ACTIVATIONS, MEM_LOGITS, MEM_ACTIVATIONS_TRANSIENT, NUM_MEMORY_KINDS };
[[maybe_unused]] static const char* memory_kind_names[NUM_MEMORY_KINDS] = {
    "parameters", "gradients", "optimizer", "parameters_transient", "gradients_transient",
    "activations", "logits", "activations_transient"};

struct BufferSpec { void** ptr; size_t elements, element_bytes; MemoryKind kind; };

inline size_t buffer_bytes(const BufferSpec& s) { return s.elements * s.element_bytes; }

// books every buffer's bytes in the ledger; allocate = false (-plan) stops there
inline void allocate_buffers(const BufferSpec* specs, int n, size_t ledger[NUM_MEMORY_KINDS], bool allocate) {
    for (int i = 0; i < n; i++) {
        size_t bytes = buffer_bytes(specs[i]);
        ledger[specs[i].kind] += bytes;
        if (!allocate) continue;
        *specs[i].ptr = device_malloc(bytes);
        if (*specs[i].ptr) device_zero(*specs[i].ptr, bytes);
    }
}

// ---------------------------------------------------------------- files written whole
// A file's size and a 64-bit hash of its bytes, taken as it is written: what a checkpoint's marker
// records of each of its files, so that a damaged file is found before it is trusted (checkpoint.h).
// FNV-1a over 8-byte words: h = (h xor word) * 1099511628211 from 14695981039346656037, the last
// word zero-padded; each step is a bijection, so any one changed word changes the hash. Not a
// cryptographic hash: a check against truncation and flipped bits, at memory speed (8 bytes a step).
// Bytes that do not fill a word wait in `tail`, so the hash does not depend on how the writes cut the file
struct FileDigest { size_t bytes; uint64_t hash, tail; };  // hash: of the whole words so far
inline FileDigest file_digest_start() { return FileDigest{0, 14695981039346656037ull, 0}; }
inline void file_digest_add(FileDigest* d, const void* data, size_t bytes) {
    const unsigned char* p = (const unsigned char*)data;
    uint64_t h = d->hash;
    size_t i = 0;
    for (; i < bytes && (d->bytes + i) % 8 != 0; i++)
        d->tail |= (uint64_t)p[i] << (8 * ((d->bytes + i) % 8));  // finish a word
    if (i > 0 && (d->bytes + i) % 8 == 0) h = (h ^ d->tail) * 1099511628211ull, d->tail = 0;
    for (; i + 8 <= bytes; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 1099511628211ull;
    }
    for (; i < bytes; i++) d->tail |= (uint64_t)p[i] << (8 * ((d->bytes + i) % 8));
    d->hash = h;
    d->bytes += bytes;
}
// the hash of the whole file: the words, then the zero-padded last one
inline uint64_t file_digest_hash(const FileDigest& d) {
    return d.bytes % 8 ? (d.hash ^ d.tail) * 1099511628211ull : d.hash;
}
// what a checkpoint's marker records of a complete file: its size and final hash
struct FileCheck { size_t bytes; uint64_t hash; };
inline FileCheck file_check(const FileDigest& d) { return FileCheck{d.bytes, file_digest_hash(d)}; }
// A file that is complete or absent: written under PATH.tmp and renamed to PATH only once every
// byte is out and closed, so a crash or a full disk never leaves a damaged PATH (model files,
// checkpoints, token shards). `what` names the file in errors ("model file", "shard", ...).
struct WholeFile {
    std::string path, tmp, what;
    FILE* f;
    bool ok;            // every write so far succeeded
    FileDigest digest;  // of the bytes written
};
inline WholeFile whole_file_open(const std::string& path, const char* what) {
    WholeFile w = {path, path + ".tmp", what, fopen((path + ".tmp").c_str(), "wb"), true, file_digest_start()};
    if (!w.f) fail("cannot write %s %s", what, w.tmp.c_str());
    return w;
}
inline void whole_file_write(WholeFile* w, const void* data, size_t bytes) {
    if (w->ok && bytes > 0) w->ok = fwrite(data, 1, bytes, w->f) == bytes;
    file_digest_add(&w->digest, data, bytes);
}
// fsync the directory holding `path`: a rename is on disk only once its directory is
inline bool sync_directory_of(const std::string& path) {
    size_t slash = path.rfind('/');
    std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
    int fd = open(dir.c_str(), O_RDONLY);
    bool ok = fd >= 0 && fsync(fd) == 0;
    if (fd >= 0) close(fd);
    return ok;
}
// flush, fsync, close, rename over PATH, fsync the directory; the file's digest. The order is what a
// power loss needs: a marker renamed into place may name only files whose bytes are on the disk
inline FileDigest whole_file_commit(WholeFile* w) {
    w->ok = fflush(w->f) == 0 && fsync(fileno(w->f)) == 0 && w->ok;
    w->ok = (fclose(w->f) == 0) && w->ok;
    w->f = nullptr;
    if (!w->ok || rename(w->tmp.c_str(), w->path.c_str()) != 0 || !sync_directory_of(w->path)) {
        remove(w->tmp.c_str());  // a full disk: the partial file goes, the previous checkpoint stays whole
        fail("writing %s %s failed (disk full?)", w->what.c_str(), w->path.c_str());
    }
    return w->digest;  // file_digest_hash gives the file's hash
}
inline void whole_file_abandon(WholeFile* w) {  // a failed run: no partial file left behind
    if (w->f) fclose(w->f);
    w->f = nullptr;
    remove(w->tmp.c_str());
}

inline bool file_exists(const char* path) { struct stat st; return stat(path, &st) == 0; }

// the whole file, or an error naming it (`what` says what the file is for)
inline std::string read_whole_file(const char* path, const char* what) {
    FILE* f = fopen(path, "rb");
    if (!f) fail("cannot open %s%s", path, what);
    std::string s;
    char buf[1 << 16];
    size_t got;
    while ((got = fread(buf, 1, sizeof(buf), f)) > 0) s.append(buf, got);
    fclose(f);
    return s;
}

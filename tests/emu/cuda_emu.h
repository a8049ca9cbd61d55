/*
tests/emu/cuda_emu.h: the CUDA language and runtime as the emulated GPU build sees them.

The emulated build compiles the CUDA build's own sources (train_gpt.cu, kernels/,
dev/) with g++, __CUDACC__ defined, against this directory instead of the CUDA
toolkit, so the code that only the GPU build contains runs in CI: every kernel,
every launch site, the cuBLAS calls, the NCCL calls and the host code around them.
It is a test tool, never part of the real GPU build (Makefile: make emu).

    kernels    every CUDA thread really runs, on a fiber of its own (cuda_emu.cpp):
               __syncthreads is a barrier of the block's live threads (exited threads
               leave it, as on sm_70+), shuffles exchange values between the lanes a
               mask names, WMMA's calls (mma.h) meet all 32 lanes of the warp; blocks
               run one after another or on OpenMP threads
    launches   `kernel<<<grid, block, shared>>>(args)` becomes
               `cuda_emu_launch(kernel, "kernel", __FILE__, __LINE__, grid, block, shared)(args)`
               by a mechanical rewrite at build time (rewrite_launches.pl): the kernel
               bodies a reader reads are the ones that run. The launch is checked as the
               runtime checks it: 0 blocks, more than 1024 threads, grid y/z over 65535,
               dynamic shared memory over 48 KB without the opt-in attribute are
               launch errors, returned by cudaGetLastError
    memory     device allocations live in their own mappings, away from host memory:
               the pointer the program holds is an address that faults when host code
               dereferences it, and a launch (its pointer arguments, and pointers inside a struct
               argument), a copy, cuBLAS and NCCL translate it to the
               place the bytes really are; an access past an allocation's end faults on
               a guard page, a write into the bytes a page cannot guard (up to 31 past
               an odd size, 64 before the start) is caught by canaries checked after every
               launch and call. Each ends the run with a line naming it. Fresh memory
               holds a NaN in every precision (0xFFA5 words), as a reminder that cudaMalloc
               does not clear
    copies     cudaMemcpy checks that its pointers are on the sides its kind says
    streams    work is queued on its stream and runs when the host waits for it, as a
               GPU runs behind its host; the streams' queues interleave within CUDA's
               promises (stream order, cudaStreamWaitEvent, the legacy default stream's
               implicit waits) in the order CUDA_EMU_STREAMS picks: issue (default),
               early, late or slow (the adversarial orders: a missing event shows in the
               bytes), seed:N. NCCL's operations are started, then polled, so a stream
               waiting on a peer rank holds back only itself (cuda_emu.cpp: streams)

What it cannot show: speed, the memory model beyond barriers (no reordering,
no caches), two kernels running at the same moment (work on two streams interleaves
kernel by kernel, never inside a kernel), real NCCL transport, numerical details of tensor cores (the GEMMs run
in fp32 on the host through OpenBLAS).
*/
#pragma once
#include <stddef.h>  // defines: size_t
#include <stdint.h>  // defines: uint64_t
#include <string.h>  // defines: memcpy
#include <math.h>    // defines: sqrtf, expf
#include <functional>  // defines: std::function
#include <tuple>     // defines: std::tuple, std::apply
#include <type_traits>  // defines: std::is_class_v, std::has_unique_object_representations_v
#include <utility>   // defines: std::index_sequence

#ifndef CUDA_EMULATION
#define CUDA_EMULATION 1
#endif

// ---------------------------------------------------------------- the language
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
// (no __noinline__: nothing here uses it, and libstdc++ writes __attribute__((__noinline__)), which
// a macro of that name would break: <memory> through nlohmann/json in run_dir.h)
#define __launch_bounds__(...)
// a GNU attribute, not alignas: CUDA code writes `__shared__ __align__(32) T tile[...]`, where the
// attribute stands between the specifiers, which C++ allows only GNU attributes to do
#define __align__(n) __attribute__((aligned(n)))
// a block's shared memory: one copy per OS thread, which runs one block at a time
#define __shared__ static thread_local

struct uint3 { unsigned x, y, z; };
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};
// set by the emulator before a CUDA thread runs (each block runs on one OS thread)
inline thread_local uint3 threadIdx, blockIdx;
inline thread_local dim3 blockDim, gridDim;
static constexpr int warpSize = 32;

// math functions CUDA has and the C library does not (exact, not the GPU's approximations)
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
template <typename T> inline T __ldg(const T* p) { return *p; }
#define CUDA_EMU_MIN_MAX(T) \
    inline T min(T a, T b) { return a < b ? a : b; } \
    inline T max(T a, T b) { return a > b ? a : b; }
CUDA_EMU_MIN_MAX(int) CUDA_EMU_MIN_MAX(unsigned) CUDA_EMU_MIN_MAX(long) CUDA_EMU_MIN_MAX(unsigned long)
CUDA_EMU_MIN_MAX(long long) CUDA_EMU_MIN_MAX(unsigned long long) CUDA_EMU_MIN_MAX(float) CUDA_EMU_MIN_MAX(double)
#undef CUDA_EMU_MIN_MAX

// barriers and warp exchange (cuda_emu.cpp): each may switch to another CUDA thread
void __syncthreads();
void __syncwarp(unsigned mask = 0xffffffffu);
enum CudaEmuShuffle { SHUFFLE_IDX, SHUFFLE_UP, SHUFFLE_DOWN, SHUFFLE_XOR };
uint64_t cuda_emu_shuffle(unsigned mask, uint64_t bits, CudaEmuShuffle kind, int arg, int width);
template <typename T> inline T cuda_emu_shuffle_value(unsigned mask, T v, CudaEmuShuffle kind, int arg, int width) {
    static_assert(sizeof(T) <= 8, "shuffles move at most 8 bytes");
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof(T));
    bits = cuda_emu_shuffle(mask, bits, kind, arg, width);
    T out;
    memcpy((void*)&out, &bits, sizeof(T));
    return out;
}
template <typename T> inline T __shfl_sync(unsigned m, T v, int src, int w = 32) { return cuda_emu_shuffle_value(m, v, SHUFFLE_IDX, src, w); }
template <typename T> inline T __shfl_up_sync(unsigned m, T v, unsigned d, int w = 32) { return cuda_emu_shuffle_value(m, v, SHUFFLE_UP, (int)d, w); }
template <typename T> inline T __shfl_down_sync(unsigned m, T v, unsigned d, int w = 32) { return cuda_emu_shuffle_value(m, v, SHUFFLE_DOWN, (int)d, w); }
template <typename T> inline T __shfl_xor_sync(unsigned m, T v, int lane_mask, int w = 32) { return cuda_emu_shuffle_value(m, v, SHUFFLE_XOR, lane_mask, w); }
inline float atomicAdd(float* address, float v) {
    float old, sum;
    __atomic_load(address, &old, __ATOMIC_RELAXED);
    do { sum = old + v; } while (!__atomic_compare_exchange(address, &old, &sum, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    return old;
}
inline int atomicAdd(int* address, int v) { return __atomic_fetch_add(address, v, __ATOMIC_RELAXED); }
inline unsigned atomicAdd(unsigned* address, unsigned v) { return __atomic_fetch_add(address, v, __ATOMIC_RELAXED); }
// a full fence, as a GPU's: with the relaxed atomics above, what orders one block's writes before
// another block's reads (common.cuh: column_partials_last_block). x86 keeps stores in order anyway,
// so a missing fence does not show here. Under ThreadSanitizer (which has no model of fences) the
// blocks run one after another and a compiler fence is enough
#if defined(__SANITIZE_THREAD__)
inline void __threadfence() { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
#else
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
#endif
// WMMA (mma.h): every one of the warp's 32 lanes must make this call, named `what`, else the run
// ends with a line naming the lanes; each leaves `bytes` bytes (at most 128) from `mine` and gets
// back all 32 lanes' contributions, lane l's at l * 128 bytes, valid until its next warp operation
static constexpr size_t cuda_emu_gather_bytes = 128;
const void* cuda_emu_warp_all_gather(const char* what, const void* mine, size_t bytes);
// ends the run with a line naming the kernel, block and thread, then the message (a contract broken)
[[noreturn]] void cuda_emu_kernel_error(const char* format, ...) __attribute__((format(printf, 1, 2)));

// ---------------------------------------------------------------- the runtime (cuda_emu.cpp)
typedef enum cudaError {
    cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2, cudaErrorInitializationError = 3,
    cudaErrorInvalidConfiguration = 9, cudaErrorInvalidMemcpyDirection = 21, cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101, cudaErrorInvalidResourceHandle = 400, cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700, cudaErrorLaunchFailure = 719
} cudaError_t;
enum cudaMemcpyKind { cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2,
                      cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
typedef enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_64F = 1, CUDA_R_16F = 2, CUDA_R_32I = 10, CUDA_R_16BF = 14 } cudaDataType;
typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;
#define cudaStreamLegacy ((cudaStream_t)0x1)  // the legacy default stream, as stream 0 is
#define cudaStreamDefault 0x0
#define cudaStreamNonBlocking 0x1             // a stream that does not wait for, nor hold back, the legacy stream
#define cudaEventDefault 0x0
#define cudaEventDisableTiming 0x2
struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem, sharedMemPerBlock, sharedMemPerBlockOptin;
    int warpSize, maxThreadsPerBlock, maxThreadsDim[3], maxGridSize[3], multiProcessorCount, major, minor;
    int pciBusID, pciDeviceID, pciDomainID;
};

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaDeviceGetPCIBusId(char* bus_id, int length, int device);
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);
cudaError_t cudaMalloc(void** ptr, size_t bytes);
template <typename T> inline cudaError_t cudaMalloc(T** ptr, size_t bytes) { return cudaMalloc((void**)ptr, bytes); }
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMallocHost(void** ptr, size_t bytes);
template <typename T> inline cudaError_t cudaMallocHost(T** ptr, size_t bytes) { return cudaMallocHost((void**)ptr, bytes); }
cudaError_t cudaFreeHost(void* ptr);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream = 0);
cudaError_t cudaMemset(void* ptr, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream = 0);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamQuery(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags = 0);
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorString(cudaError_t error);
const char* cudaGetErrorName(cudaError_t error);
cudaError_t cuda_emu_set_function_attribute(const void* function, cudaFuncAttribute attribute, int value);
template <typename F> inline cudaError_t cudaFuncSetAttribute(F* function, cudaFuncAttribute attribute, int value) {
    return cuda_emu_set_function_attribute((const void*)function, attribute, value);
}

// ---------------------------------------------------------------- what the libraries' emulations share
namespace cuda_emu {
// where the bytes of a device pointer are (NULL stays NULL); fails the run for a host pointer or
// a range past the allocation. `what` names the user in the message
void* device_bytes(const void* device, size_t bytes, const char* what);
int current_device_bus_id();  // the PCI bus id of the calling thread's current device
// a failed NCCL link: its work, and everything queued after it, never completes (cudaStreamQuery
// says not ready, synchronising waits forever, as on a GPU)
void stall_default_stream();
// Work on a stream (cuda_emu.cpp, "streams"): queued when issued, run when the host waits for it,
// the streams interleaved in the order CUDA_EMU_STREAMS chooses. enqueue: work done when run()
// returns (a kernel, a copy, a GEMM); enqueue_started: work that start() begins and that completes
// when done() first says so, polled meanwhile while other streams go on (NCCL's operations)
void enqueue(cudaStream_t stream, std::function<void()> run);
void enqueue_started(cudaStream_t stream, std::function<void()> start, std::function<bool()> done);
// the pause between two polls of work that waits on another process (a short spin, then sleeps:
// the tests run more ranks than cores)
void pause_between_polls(unsigned polls);
}

// ---------------------------------------------------------------- launches
namespace cuda_emu {
struct LaunchSite { const char* kernel; const char* file; int line; };
// checks the configuration as the runtime does; false: the error is recorded for cudaGetLastError
bool launch_valid(const void* kernel, const LaunchSite& site, dim3 grid, dim3 block, size_t shared_bytes);
// a kernel argument that is a pointer: where its bytes really are (device memory), itself (pinned
// host memory, NULL); a pointer to ordinary host memory fails the run
void* kernel_argument(const void* p, const LaunchSite& site, int index);
// every allocation's canaries (cuda_emu.cpp) are intact, after the kernel at `site` (or, site
// null, the library call named `call`); a write out of range ends the run with a line naming it
void check_canaries(const char* call, const LaunchSite* site = nullptr);
// CUDA_EMU_LAUNCH_REPORT (cuda_emu.cpp): the device bytes touched between watch_begin and
// watch_end(name, flops) count as one launch of `name` (flops: a GEMM's 2 m n k, else 0); count_copy
// counts a launch of known bytes
void watch_begin();
void watch_end(const char* name, double flops = 0);
void count_copy(const char* name, double bytes);
// runs every thread of the grid: run_thread(bound) is one CUDA thread's body
void run_grid(const LaunchSite& site, dim3 grid, dim3 block, void (*run_thread)(void*), void* bound);

// a struct argument (a table of tensors, kernels/matmul.cuh: BiasGrads): each aligned 8-byte word
// holding a device address is translated as a pointer argument is. A pointer is known by its value:
// device addresses lie in the emulator's own mappings, where no size or index of a model falls. Only
// structs without padding or floating-point members (std::has_unique_object_representations) are
// read so: padding holds whatever the stack held, which could look like an address; a struct with
// pointers and padding is passed as it is, and the kernel's first access through one faults
void translate_struct_words(void* value, size_t bytes);
template <typename T> inline void translate(T& value, const LaunchSite&, int) {
    if constexpr (std::is_class_v<T> && std::has_unique_object_representations_v<T>) translate_struct_words(&value, sizeof(T));
    else (void)value;
}
template <typename T> inline void translate(T*& p, const LaunchSite& site, int index) {
    p = (T*)kernel_argument((const void*)p, site, index);
}

template <typename... Params> struct Launch {
    void (*kernel)(Params...);
    LaunchSite site;
    dim3 grid, block;
    size_t shared_bytes;
    cudaStream_t stream;
    struct Bound { void (*kernel)(Params...); std::tuple<Params...> params; };
    template <size_t... I> static void translate_all(std::tuple<Params...>& t, const LaunchSite& site, std::index_sequence<I...>) {
        (translate(std::get<I>(t), site, (int)I), ...);
    }
    static void run_thread(void* bound) {
        Bound* b = (Bound*)bound;
        std::apply(b->kernel, b->params);  // a copy of the arguments per thread, as on the GPU
    }
    void operator()(Params... args) const {  // the arguments convert as in a call of the kernel
        if (!launch_valid((const void*)kernel, site, grid, block, shared_bytes)) return;
        Bound bound = {kernel, std::tuple<Params...>(args...)};
        translate_all(bound.params, site, std::index_sequence_for<Params...>{});
        // the arguments are copied now, as a launch copies them; the grid runs when its stream gets to it
        enqueue(stream, [bound, site = site, grid = grid, block = block]() mutable {
            run_grid(site, grid, block, &run_thread, &bound);
        });
    }
};
template <typename... Params>
inline Launch<Params...> launch(void (*kernel)(Params...), const char* name, const char* file, int line, dim3 grid,
                                dim3 block, size_t shared_bytes = 0, cudaStream_t stream = 0) {
    return Launch<Params...>{kernel, LaunchSite{name, file, line}, grid, block, shared_bytes, stream};
}
}  // namespace cuda_emu
#define cuda_emu_launch cuda_emu::launch

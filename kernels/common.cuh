/*
kernels/common.cuh: what every op needs on both builds: device memory, copies,
error checks, and the library handles of the GPU build.

The trainer never calls a CUDA API; it calls device_malloc, device_to_host, ...
On the CPU build the "device" is host memory and these are malloc and memcpy, so
the same trainer source runs unchanged. The only process-wide state is the cuBLAS
handle of the GPU build: a library resource created once in device_init, not
model state.
*/
#pragma once
// defines: device_init, device_malloc, device_free, host_to_device, device_to_host,
//          device_to_device, device_zero, device_synchronize, ceil_div, fail,
//          MemoryKind, BufferSpec, allocate_buffers
#include <stdio.h>   // defines: fprintf
#include <stdlib.h>  // defines: exit, aligned_alloc, free
#include <string.h>  // defines: memcpy, memset
#include <stddef.h>  // defines: size_t
#include <stdarg.h>  // defines: va_list
#include <unistd.h>  // defines: usleep
#include <mpi.h>     // defines: MPI_Abort (the error path of a multi-rank run)
#include "../precision.h"  // defines: floatX, HOST_DEVICE

// "error: ...\n" in one write, so the lines of several ranks do not interleave
inline void print_error_line(const char* format, va_list args) {
    char line[2048] = "error: ";
    vsnprintf(line + 7, sizeof(line) - 8, format, args);
    strcat(line, "\n");
    fputs(line, stderr);
    fflush(stderr);
}

// one line naming the problem and a non-zero exit: the error path of every module.
// Under MPI with several ranks the whole job goes down (MPI_Abort), so no rank waits
// forever in a collective for one that failed. (Errors every rank detects alike use
// comm_fail_all, which lets each rank print its line first.)
[[noreturn]] __attribute__((format(printf, 1, 2))) inline void fail(const char* format, ...) {
    fflush(stdout);
    va_list args;
    va_start(args, format);
    print_error_line(format, args);
    va_end(args);
    int mpi_up = 0, world = 1;
    MPI_Initialized(&mpi_up);
    if (mpi_up) MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (world > 1) {
        usleep(500 * 1000);  // let the launcher forward this rank's message before the abort tears the job down
        MPI_Abort(MPI_COMM_WORLD, EXIT_FAILURE);
    }
    exit(EXIT_FAILURE);
}

HOST_DEVICE inline size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

#ifdef __CUDACC__
#include <cuda_runtime.h>  // defines: cudaMalloc, cudaMemcpy, ...
#include <cublas_v2.h>     // defines: cublasHandle_t, cublasGemmStridedBatchedEx

inline void cuda_check(cudaError_t err, const char* file, int line) {
    if (err != cudaSuccess) fail("CUDA %s at %s:%d", cudaGetErrorString(err), file, line);
}
inline void cublas_check(cublasStatus_t status, const char* file, int line) {
    if (status != CUBLAS_STATUS_SUCCESS) fail("cuBLAS status %d at %s:%d", (int)status, file, line);
}
#define cudaCheck(err) cuda_check((err), __FILE__, __LINE__)
#define cublasCheck(status) cublas_check((status), __FILE__, __LINE__)
// after every launch: a bad launch configuration is reported where it happened
#define launchCheck() cuda_check(cudaGetLastError(), __FILE__, __LINE__)

inline cublasHandle_t& cublas_handle() { static cublasHandle_t handle = nullptr; return handle; }

inline void device_init(int local_rank) {
    int count = 0;
    cudaCheck(cudaGetDeviceCount(&count));
    if (count == 0) fail("no CUDA device found; the CPU build ./train_gpt_cpu runs without one");
    cudaCheck(cudaSetDevice(local_rank % count));
    cublasCheck(cublasCreate(&cublas_handle()));
    // fp32 builds compute in true fp32 (no TF32), so they can be checked against float64
    cublasCheck(cublasSetMathMode(cublas_handle(), CUBLAS_DEFAULT_MATH));
}
inline const char* device_name() { static cudaDeviceProp p; int d; cudaGetDevice(&d); cudaGetDeviceProperties(&p, d); return p.name; }
inline void* device_malloc(size_t bytes) { void* p = nullptr; if (bytes) cudaCheck(cudaMalloc(&p, bytes)); return p; }
inline void device_free(void* p) { if (p) cudaCheck(cudaFree(p)); }
inline void host_to_device(void* dst, const void* src, size_t bytes) { cudaCheck(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice)); }
inline void device_to_host(void* dst, const void* src, size_t bytes) { cudaCheck(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost)); }
inline void device_to_device(void* dst, const void* src, size_t bytes) { cudaCheck(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice)); }
inline void device_zero(void* p, size_t bytes) { cudaCheck(cudaMemset(p, 0, bytes)); }
inline void device_synchronize() { cudaCheck(cudaDeviceSynchronize()); }

#else  // CPU build: device memory is host memory

inline void device_init(int local_rank) { (void)local_rank; }
inline const char* device_name() { return "CPU"; }
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
inline void device_synchronize() {}
#endif

// ---------------------------------------------------------------- memory ledger
// Every device allocation of the trainer is booked under one kind, so the program can
// print what each rank holds (-plan) and the tests can compare it with the formulas.
// Persistent: lives through the run. Transient: a working buffer reused within a step.
enum MemoryKind { MEM_PARAMETERS, MEM_GRADIENTS, MEM_OPTIMIZER, MEM_PARAMETERS_TRANSIENT, MEM_GRADIENTS_TRANSIENT,
                  MEM_ACTIVATIONS, MEM_ACTIVATIONS_TRANSIENT, NUM_MEMORY_KINDS };
[[maybe_unused]] static const char* memory_kind_names[NUM_MEMORY_KINDS] = {
    "parameters", "gradients", "optimizer", "parameters_transient", "gradients_transient",
    "activations", "activations_transient"};

struct BufferSpec { void** ptr; size_t elements, element_bytes; MemoryKind kind; };

inline void allocate_buffers(const BufferSpec* specs, int n, size_t ledger[NUM_MEMORY_KINDS]) {
    for (int i = 0; i < n; i++) {
        size_t bytes = specs[i].elements * specs[i].element_bytes;
        *specs[i].ptr = device_malloc(bytes);
        if (*specs[i].ptr) device_zero(*specs[i].ptr, bytes);
        ledger[specs[i].kind] += bytes;
    }
}

/*
kernels/common.cuh: what every op needs beyond base.h: the GPU build's library
handle (cuBLAS), launch checks, and the choice of device.

The only process-wide state is the cuBLAS handle of the GPU build: a library
resource created once in device_init, not model state. Device memory, copies, the
error path and the memory ledger are in base.h, which the collectives, the data
loader and the tokenizer use too.
*/
#pragma once
// defines: device_init, device_count, device_name, launchCheck, cublasCheck, cublas_handle (and base.h's)
#include "../base.h"  // defines: fail, device_malloc, host_to_device, ceil_div, MemoryKind, BufferSpec

#ifdef __CUDACC__
#include <cublas_v2.h>     // defines: cublasHandle_t, cublasGemmStridedBatchedEx

inline void cublas_check(cublasStatus_t status, const char* file, int line) {
    if (status != CUBLAS_STATUS_SUCCESS) fail("cuBLAS status %d at %s:%d", (int)status, file, line);
}
#define cublasCheck(status) cublas_check((status), __FILE__, __LINE__)
// after every launch: a bad launch configuration is reported where it happened. In the debug
// build (make DEBUG=1) it also waits for the kernel, so a fault inside it is reported at this
// launch rather than at some later call
#ifdef DEBUG_SYNC
#define launchCheck() (cuda_check(cudaGetLastError(), __FILE__, __LINE__), cuda_check(cudaDeviceSynchronize(), __FILE__, __LINE__))
#else
#define launchCheck() cuda_check(cudaGetLastError(), __FILE__, __LINE__)
#endif

inline cublasHandle_t& cublas_handle() { static cublasHandle_t handle = nullptr; return handle; }

// the GPUs this process can see; 0 where there is no device or no driver
inline int device_count() {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
    return count;
}

inline void device_init(int local_rank) {
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0)
        fail("no CUDA device found (%s): ./train_gpt_cpu takes the same flags and runs on the CPU",
             err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    cudaCheck(cudaSetDevice(local_rank % count));
    cublasCheck(cublasCreate(&cublas_handle()));
    // fp32 builds compute in true fp32 (no TF32), so they can be checked against float64
    cublasCheck(cublasSetMathMode(cublas_handle(), CUBLAS_DEFAULT_MATH));
}
inline const char* device_name() { static cudaDeviceProp p; int d; cudaGetDevice(&d); cudaGetDeviceProperties(&p, d); return p.name; }

#else  // CPU build
inline int device_count() { return 0; }
inline void device_init(int local_rank) { (void)local_rank; }
inline const char* device_name() { return "CPU"; }
#endif

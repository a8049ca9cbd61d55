/*
tests/test_emu_contract.cu: the emulated CUDA build (tests/emu/) refuses what CUDA, cuBLAS and
NCCL refuse, and catches the bugs it claims to catch, so that a test that passes on it means
something. Built only for the emulation (make emu); run by tests/test_emu_contract.sh.

    ./test_emu_contract            the checks that return: launch errors, barriers and shuffles
                                   that work, fresh memory that is NaN, cuBLAS's column-major
                                   results (strided batches too) and its refusals, WMMA's
                                   D = A B + C (bf16, fp16, tf32) against float64
    ./test_emu_contract wmma       the WMMA checks alone (run under ThreadSanitizer too)
    ./test_emu_contract CASE       one bug that must end the run with a line naming it
                                   (host-deref, out-of-range, past-odd-end, before-start,
                                   host-argument, copy-kind, shuffle-exited, shuffle-absent,
                                   divergent-barrier, race, gemm-batch-past-end, caller-line:
                                   base.h's error names this file's line; wmma-half-warp,
                                   wmma-after-exit, wmma-diverging, wmma-short-warp: a WMMA call
                                   that part of a warp reaches; wmma-lane-pointers,
                                   wmma-misaligned, wmma-bad-ldm; wmma-race: a shared tile
                                   loaded without its __syncthreads, under ThreadSanitizer)
    CUDA_EMU_REPORT_UNWRITTEN=1 ./test_emu_contract unwritten   a copy of never-written memory, reported
    mpirun -np 2 ./test_emu_contract nccl            NCCL's in-place forms and per-rank counts
    mpirun -np 2 ./test_emu_contract nccl-CASE       one NCCL bug: ranks disagreeing on a collective's
                                   count, type or operation (mismatch, type-mismatch, op-mismatch),
                                   partially overlapping buffers (overlap-allreduce, -reducescatter,
                                   -allgather, -broadcast), two ranks that both send first (deadlock)
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <vector>
#include <mpi.h>
#include <cublas_v2.h>
#include <nccl.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>
#include <algorithm>
#include <type_traits>
#include "../base.h"  // defines: device_malloc (its errors name the caller's line)

static int failures = 0;
static void expect(bool ok, const char* what) {
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    failures += !ok;
}

__global__ void write_index(int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = i;
}
__global__ void block_sum(float* out, const float* in) {  // shuffles within warps, then warp 0 sums the warps
    __shared__ float warp_sums[32];
    float v = in[threadIdx.x];
    unsigned lanes = blockDim.x % 32 && threadIdx.x / 32 == blockDim.x / 32 ? (1u << (blockDim.x % 32)) - 1 : 0xffffffffu;
    for (int o = 16; o > 0; o /= 2) {
        float other = __shfl_down_sync(lanes, v, o);
        if ((int)(threadIdx.x % 32) + o < 32 && (lanes >> (threadIdx.x % 32 + o) & 1u)) v += other;
    }
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0;
        for (unsigned w = 0; w < (blockDim.x + 31) / 32; w++) s += warp_sums[w];
        *out = s;
    }
}
__global__ void early_exit_then_barrier(int* out) {  // exited threads leave the barrier (sm_70+)
    __shared__ int seen[64];
    if (threadIdx.x >= 40) return;
    seen[threadIdx.x] = (int)threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = seen[39 - threadIdx.x];
}
__global__ void uses_dynamic_shared(int* out) { out[0] = 1; }

__global__ void accumulate(float* out, const float* in, int n) {  // out += in: out must have been written first
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] += in[i];
}
__global__ void read_around(float* out, const float* p, int n) { out[0] = p[-1]; out[1] = p[n]; }  // both out of range

// the bugs: each ends the run
__global__ void write_past_end(float* p, int n) { if (threadIdx.x == 0) p[n] = 1.0f; }
__global__ void write_before_start(float* p) { if (threadIdx.x == 0) p[-1] = 1.0f; }
__global__ void shuffle_after_exit(float* out) {
    if (threadIdx.x == 0) return;
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}
__global__ void shuffle_full_mask(float* out) { out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1); }
__global__ void barrier_in_divergent_code(float* out) {
    if (threadIdx.x < 16) __syncthreads();
    else __syncwarp();
    out[threadIdx.x] = 1.0f;
}
__global__ void missing_barrier(float* out) {  // reads a neighbour's shared value without __syncthreads
    __shared__ float values[64];
    values[threadIdx.x] = (float)threadIdx.x;
    out[threadIdx.x] = values[threadIdx.x ^ 1];
}
__global__ void with_barrier(float* out) {
    __shared__ float values[64];
    values[threadIdx.x] = (float)threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = values[threadIdx.x ^ 1];
}

static void launches() {
    int* d;
    cudaMalloc(&d, 4096 * sizeof(int));
    write_index<<<0, 256>>>(d, 0);
    expect(cudaGetLastError() == cudaErrorInvalidConfiguration, "a grid of 0 blocks is an invalid configuration");
    expect(cudaGetLastError() == cudaSuccess, "cudaGetLastError resets the error");
    write_index<<<1, 1025>>>(d, 10);
    expect(cudaGetLastError() == cudaErrorInvalidConfiguration, "1025 threads per block is an invalid configuration");
    write_index<<<dim3(1, 65536), 32>>>(d, 10);
    expect(cudaGetLastError() == cudaErrorInvalidConfiguration, "grid y of 65536 is an invalid configuration");
    write_index<<<dim3(1, 1, 65535), dim3(1, 1, 64)>>>(d, 0);
    expect(cudaGetLastError() == cudaSuccess, "grid z 65535 and block z 64 are allowed");
    uses_dynamic_shared<<<1, 32, 49 * 1024>>>(d);
    expect(cudaGetLastError() != cudaSuccess, "49 KB of dynamic shared memory needs the opt-in");
    cudaFuncSetAttribute(uses_dynamic_shared, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024);
    uses_dynamic_shared<<<1, 32, 49 * 1024>>>(d);
    expect(cudaGetLastError() == cudaSuccess, "... and is allowed after cudaFuncSetAttribute");
    write_index<<<7, 100>>>(d, 650);
    std::vector<int> h(650);
    cudaMemcpy(h.data(), d, 650 * sizeof(int), cudaMemcpyDeviceToHost);
    bool ok = true;
    for (int i = 0; i < 650; i++) ok = ok && h[i] == i;
    expect(ok, "7 blocks of 100 threads write 650 indices");

    float* f;
    cudaMalloc(&f, 2048 * sizeof(float));
    for (int threads : {32, 96, 100, 1024}) {
        std::vector<float> in(threads);
        double want = 0;
        for (int i = 0; i < threads; i++) want += in[i] = (float)(i % 7) - 2.5f;
        cudaMemcpy(f + 1024, in.data(), threads * sizeof(float), cudaMemcpyHostToDevice);
        block_sum<<<1, threads>>>(f, f + 1024);
        float got;
        cudaMemcpy(&got, f, sizeof(float), cudaMemcpyDeviceToHost);
        char what[96];
        snprintf(what, sizeof(what), "shuffles and a barrier sum %d threads (partial warps masked)", threads);
        expect(got == (float)want, what);
    }
    early_exit_then_barrier<<<1, 64>>>(d);
    cudaMemcpy(h.data(), d, 40 * sizeof(int), cudaMemcpyDeviceToHost);
    ok = true;
    for (int i = 0; i < 40; i++) ok = ok && h[i] == 39 - i;
    expect(ok, "threads that exited before __syncthreads leave the barrier");
    cudaFree(d);
    cudaFree(f);
}

// fresh device memory is NaN in every precision, so a kernel that accumulates into memory nobody
// zeroed fails every check; an out-of-range read of an odd-sized buffer reads that NaN too
// asynchronous copies with page-locked memory: a download holds 0xFF until a wait, then the device's
// bytes as they were when it was queued (a kernel after it does not change what lands); an upload's
// source left alone passes the wait (rewritten, it ends the run: the case upload-rewritten)
__global__ void fill(float* out, float value, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = value;
}
static void async_copies() {
    float *dev, *host;
    cudaMalloc(&dev, 4 * sizeof(float));
    cudaMallocHost(&host, 4 * sizeof(float));
    fill<<<1, 4>>>(dev, 1.5f, 4);
    cudaMemcpyAsync(host, dev, 4 * sizeof(float), cudaMemcpyDeviceToHost, 0);
    fill<<<1, 4>>>(dev, 2.5f, 4);  // after the download, in stream order
    expect(isnan(host[0]) && isnan(host[3]), "a download read before a wait: NaN (0xFF), not yet the device's bytes");
    cudaStreamSynchronize(0);
    expect(host[0] == 1.5f && host[3] == 1.5f, "after the wait: the device's bytes as they were when it was queued");
    for (int i = 0; i < 4; i++) host[i] = 7.0f;
    cudaMemcpyAsync(dev, host, 4 * sizeof(float), cudaMemcpyHostToDevice, 0);
    cudaDeviceSynchronize();
    for (int i = 0; i < 4; i++) host[i] = 0.0f;  // after the wait: free to reuse
    cudaMemcpy(host, dev, 4 * sizeof(float), cudaMemcpyDeviceToHost);
    expect(host[0] == 7.0f && host[3] == 7.0f, "an upload's source left alone until a wait: the device has it");
    cudaFreeHost(host);
    cudaFree(dev);
}
static void upload_rewritten() {
    float *dev, *host;
    cudaMalloc(&dev, 4 * sizeof(float));
    cudaMallocHost(&host, 4 * sizeof(float));
    for (int i = 0; i < 4; i++) host[i] = 1.0f;
    cudaMemcpyAsync(dev, host, 4 * sizeof(float), cudaMemcpyHostToDevice, 0);
    host[2] = 2.0f;  // before any wait: the GPU may still read it
    cudaDeviceSynchronize();
}

// Streams (cuda_emu.cpp): work runs when the host waits for it, the streams interleaved in the order
// CUDA_EMU_STREAMS picks. x passes from the default stream to a non-blocking one and back: written,
// read into y, then overwritten. With both events y is 2 x in every order; without the first, `early`
// runs the reader before the writer (the case stream-reader-early), without the second `late` lets
// the writer overwrite x before the reader read it (stream-writer-late). A blocking stream needs no
// event: the legacy default stream and it wait for each other's earlier work.
__global__ void copy_scaled(float* out, const float* in, float scale, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = scale * in[i];
}
static bool pass_between_streams(cudaStream_t side, bool event_before_read, bool event_after_read) {
    float *x, *y, h[8];
    cudaMalloc(&x, 4 * sizeof(float)); cudaMalloc(&y, 4 * sizeof(float));
    cudaEvent_t written, read;
    cudaEventCreateWithFlags(&written, cudaEventDisableTiming); cudaEventCreateWithFlags(&read, cudaEventDisableTiming);
    fill<<<1, 4>>>(x, 3.0f, 4);
    cudaDeviceSynchronize();     // x = 3, then:
    fill<<<1, 4>>>(x, 1.0f, 4);  // default stream: x = 1
    cudaEventRecord(written, 0);
    if (event_before_read) cudaStreamWaitEvent(side, written, 0);
    copy_scaled<<<1, 4, 0, side>>>(y, x, 2.0f, 4);  // side stream: y = 2 x
    cudaEventRecord(read, side);
    if (event_after_read) cudaStreamWaitEvent(0, read, 0);
    fill<<<1, 4>>>(x, 5.0f, 4);  // default stream: x = 5
    cudaMemcpy(h, y, 4 * sizeof(float), cudaMemcpyDeviceToHost);  // waits for the default stream, and so the side's read
    cudaStreamSynchronize(side);
    cudaMemcpy(h + 4, x, 4 * sizeof(float), cudaMemcpyDeviceToHost);
    cudaEventDestroy(written); cudaEventDestroy(read);
    cudaFree(x); cudaFree(y);
    return h[0] == 2.0f && h[3] == 2.0f && h[4] == 5.0f;
}
static void streams(const char* c) {
    cudaStream_t side, blocking;
    cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
    cudaStreamCreate(&blocking);
    if (!strcmp(c, "stream-reader-early"))
        expect(pass_between_streams(side, false, true), "a tensor read on another stream with no event after its write");
    else if (!strcmp(c, "stream-writer-late"))
        expect(pass_between_streams(side, true, false), "a tensor rewritten with no event after another stream read it");
    else {
        expect(pass_between_streams(side, true, true), "a tensor passed to a non-blocking stream and back, an event each way");
        expect(pass_between_streams(blocking, false, false), "the same through a blocking stream, with no event");
        float *d, h = 0;
        cudaMalloc(&d, sizeof(float));
        fill<<<1, 1>>>(d, 4.0f, 1);
        expect(cudaStreamQuery(0) == cudaSuccess, "cudaStreamQuery runs what it can: a kernel, done");
        cudaMemcpy(&h, d, sizeof(float), cudaMemcpyDeviceToHost);
        expect(h == 4.0f, "and its result is there");
        cudaFree(d);
    }
    cudaStreamDestroy(side);
    cudaStreamDestroy(blocking);
}

static void poison() {
    float *fresh, *in, *odd, *out;
    cudaMalloc(&fresh, 64 * sizeof(float)); cudaMalloc(&in, 64 * sizeof(float));
    cudaMalloc(&odd, 5 * sizeof(float)); cudaMalloc(&out, 2 * sizeof(float));
    uint16_t words[4];
    cudaMemcpy(words, fresh, sizeof(words), cudaMemcpyDeviceToHost);
    float f;
    int32_t i;
    memcpy(&f, words, 4); memcpy(&i, words, 4);
    __nv_bfloat16 b;
    __half h16;
    b.__x = h16.__x = words[0];
    expect(isnan(f) && isnan(__bfloat162float(b)) && isnan(__half2float(h16)) && i < 0,
           "fresh device memory reads as NaN in fp32, bf16 and fp16, and as a negative int");
    std::vector<float> h(64, 1.0f);
    cudaMemcpy(in, h.data(), sizeof(float) * 64, cudaMemcpyHostToDevice);
    accumulate<<<2, 32>>>(fresh, in, 64);
    cudaMemcpy(h.data(), fresh, sizeof(float) * 64, cudaMemcpyDeviceToHost);
    bool all_nan = true;
    for (float v : h) all_nan = all_nan && isnan(v);
    expect(all_nan, "a kernel that accumulates into a fresh allocation nobody zeroed gets NaN");
    cudaMemcpy(odd, h.data(), 5 * sizeof(float), cudaMemcpyHostToDevice);
    read_around<<<1, 1>>>(out, odd, 5);
    float got[2];
    cudaMemcpy(got, out, sizeof(got), cudaMemcpyDeviceToHost);
    expect(isnan(got[0]) && isnan(got[1]), "reading p[-1] and p[5] of a 5-float buffer reads NaN, not a neighbour's data");
    cudaFree(fresh); cudaFree(in); cudaFree(odd); cudaFree(out);
}

// cublasGemmStridedBatchedEx: C_b = 2 A_b^T B + 0.5 C_b for b < 3, A's matrices (4 x 2 with lda 5) 17
// elements apart, one B for all (stride 0), C's (2 x 3 with ldc 3) 11 apart: every gap keeps its value
static void strided_batched(cublasHandle_t handle, int batch) {
    const int m = 2, n = 3, k = 4, lda = 5, ldb = 4, ldc = 3, batches = 3;
    const long long sa = 17, sb = 0, sc = 11;
    std::vector<float> A(sa * batches), B(ldb * n), C(sc * batches);
    for (size_t i = 0; i < A.size(); i++) A[i] = (float)((i * 7) % 11) - 5;
    for (size_t i = 0; i < B.size(); i++) B[i] = (float)((i * 3) % 5) - 2;
    for (size_t i = 0; i < C.size(); i++) C[i] = (float)(i % 9);
    std::vector<float> want = C;  // the host loop, exact: small integers
    for (int b = 0; b < batches; b++)
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                float acc = 0;
                for (int l = 0; l < k; l++) acc += A[b * sa + l + i * lda] * B[b * sb + l + j * ldb];
                want[b * sc + i + j * ldc] = 2 * acc + 0.5f * C[b * sc + i + j * ldc];
            }
    float *dA, *dB, *dC, alpha = 2, beta = 0.5f;
    cudaMalloc(&dA, A.size() * 4); cudaMalloc(&dB, B.size() * 4); cudaMalloc(&dC, C.size() * 4);
    cudaMemcpy(dA, A.data(), A.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dB, B.data(), B.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dC, C.data(), C.size() * 4, cudaMemcpyHostToDevice);
    auto run = [&](int count) {
        return cublasGemmStridedBatchedEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, dA, CUDA_R_32F, lda, sa, dB,
                                          CUDA_R_32F, ldb, sb, &beta, dC, CUDA_R_32F, ldc, sc, count, CUBLAS_COMPUTE_32F,
                                          CUBLAS_GEMM_DEFAULT);
    };
    cublasStatus_t s = run(batch);  // batch 4 on buffers of 3: runs past the end and ends the run
    cudaMemcpy(C.data(), dC, C.size() * 4, cudaMemcpyDeviceToHost);
    expect(s == CUBLAS_STATUS_SUCCESS && C == want, "strided batches (3, A^T with gaps, B shared by stride 0) = the host loop; C's gaps untouched");
    expect(run(-1) == CUBLAS_STATUS_INVALID_VALUE, "a negative batch count is CUBLAS_STATUS_INVALID_VALUE");
    cudaFree(dA); cudaFree(dB); cudaFree(dC);
}

static void cublas() {
    cublasHandle_t handle;
    cublasCreate(&handle);
    // column-major A (2x3) = [1 2 3; 4 5 6] is {1,4, 2,5, 3,6}; B (3x2) = [1 0; 0 1; 1 1] is {1,0,1, 0,1,1}
    float A[6] = {1, 4, 2, 5, 3, 6}, B[6] = {1, 0, 1, 0, 1, 1}, C[4] = {NAN, NAN, NAN, NAN};
    float *dA, *dB, *dC;
    cudaMalloc(&dA, sizeof(A)); cudaMalloc(&dB, sizeof(B)); cudaMalloc(&dC, sizeof(C));
    cudaMemcpy(dA, A, sizeof(A), cudaMemcpyHostToDevice);
    cudaMemcpy(dB, B, sizeof(B), cudaMemcpyHostToDevice);
    cudaMemcpy(dC, C, sizeof(C), cudaMemcpyHostToDevice);
    float one = 1, zero = 0;
    cublasStatus_t s = cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, dA, CUDA_R_32F, 2, dB, CUDA_R_32F, 3, &zero,
                                    dC, CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    cudaMemcpy(C, dC, sizeof(C), cudaMemcpyDeviceToHost);
    // A B = [1+3 2+3; 4+6 5+6] = [4 5; 10 11], column-major {4, 10, 5, 11}; beta 0 ignores C's NaNs
    expect(s == CUBLAS_STATUS_SUCCESS && C[0] == 4 && C[1] == 10 && C[2] == 5 && C[3] == 11, "C = A B, column-major, beta 0 ignores C");
    // A^T (3x2) B^T (2x3): op T on both, A read as 2x3 with lda 2, B as 3x2 with ldb 3: a 3x3 result
    float* dC3;
    cudaMalloc(&dC3, 9 * sizeof(float));
    s = cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_T, 3, 3, 2, &one, dA, CUDA_R_32F, 2, dB, CUDA_R_32F, 3, &zero, dC3,
                     CUDA_R_32F, 3, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    float C3[9];
    cudaMemcpy(C3, dC3, sizeof(C3), cudaMemcpyDeviceToHost);
    // (B A)^T: B A = [1 2 3; 4 5 6; 5 7 9], so C3 column-major = B A row-major = {1,2,3, 4,5,6, 5,7,9}
    float want[9] = {1, 2, 3, 4, 5, 6, 5, 7, 9};
    expect(s == CUBLAS_STATUS_SUCCESS && memcmp(C3, want, sizeof(want)) == 0, "C = A^T B^T, column-major");
    // the refusals: C (2x2) = op(A) B (3x2) with one argument wrong at a time
    auto refused = [&](cublasHandle_t h, cublasOperation_t op_a, int lda, cudaDataType in, cudaDataType out) {
        return cublasGemmEx(h, op_a, CUBLAS_OP_N, 2, 2, 3, &one, dA, in, lda, dB, in, 3, &zero, dC, out, 2, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT);
    };
    expect(refused(handle, CUBLAS_OP_N, 1, CUDA_R_32F, CUDA_R_32F) == CUBLAS_STATUS_INVALID_VALUE, "lda below m is CUBLAS_STATUS_INVALID_VALUE");
    expect(refused(handle, CUBLAS_OP_T, 2, CUDA_R_32F, CUDA_R_32F) == CUBLAS_STATUS_INVALID_VALUE, "op T on A needs lda >= k");
    expect(refused(handle, CUBLAS_OP_N, 2, CUDA_R_16BF, CUDA_R_16F) == CUBLAS_STATUS_NOT_SUPPORTED,
           "bf16 inputs into an fp16 output are CUBLAS_STATUS_NOT_SUPPORTED");
    expect(refused(nullptr, CUBLAS_OP_N, 2, CUDA_R_32F, CUDA_R_32F) == CUBLAS_STATUS_NOT_INITIALIZED,
           "a null handle is CUBLAS_STATUS_NOT_INITIALIZED");
    // TF32: 1 + 2^-12 has no TF32 representation (10 mantissa bits): it rounds to 1 under TF32 math only
    float x = 1.0f + 1.0f / 4096, y = 1.0f, r;
    float *dx, *dy, *dr;
    cudaMalloc(&dx, 4); cudaMalloc(&dy, 4); cudaMalloc(&dr, 4);
    cudaMemcpy(dx, &x, 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dy, &y, 4, cudaMemcpyHostToDevice);
    cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, dx, CUDA_R_32F, 1, dy, CUDA_R_32F, 1, &zero, dr, CUDA_R_32F, 1,
                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    cudaMemcpy(&r, dr, 4, cudaMemcpyDeviceToHost);
    expect(r == x, "CUBLAS_DEFAULT_MATH multiplies fp32 in fp32");
    cublasSetMathMode(handle, CUBLAS_TF32_TENSOR_OP_MATH);
    cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, dx, CUDA_R_32F, 1, dy, CUDA_R_32F, 1, &zero, dr, CUDA_R_32F, 1,
                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    cudaMemcpy(&r, dr, 4, cudaMemcpyDeviceToHost);
    expect(r == 1.0f, "CUBLAS_TF32_TENSOR_OP_MATH rounds fp32 inputs to TF32");
    strided_batched(handle, 3);
    cublasDestroy(handle);
}

// ---------------------------------------------------------------- WMMA (tests/emu/mma.h)
// The kernels between the two "nvcc" lines also compile with the real nvcc and <mma.h> (nvcc begin)
using namespace nvcuda;
enum WmmaFlags { FILL_C = 1, IN_PLACE = 2, C_COL_MAJOR = 4, D_COL_MAJOR = 8 };

// D = A B + C for one 16x16xK tile per warp: warp w's A, B, C and D start w * stride elements in;
// A and B in the layouts LA and LB with leading dimension ld, C and D with ldc; flags: C filled
// with 0.5 instead of loaded, the product accumulated in place (mma_sync(c, a, b, c)), C or D column-major
template <typename Frag, typename Mem, int K, typename LA, typename LB>
__global__ void wmma_tile(float* d, const Mem* a, const Mem* b, const float* c, int ld, int ldc, int stride, int flags) {
    int w = threadIdx.x / 32;
    wmma::fragment<wmma::matrix_a, 16, 16, K, Frag, LA> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, K, Frag, LB> fb;
    wmma::fragment<wmma::accumulator, 16, 16, K, float> fc, fd;
    wmma::load_matrix_sync(fa, a + w * stride, ld);
    wmma::load_matrix_sync(fb, b + w * stride, ld);
    if constexpr (std::is_same<Frag, wmma::precision::tf32>::value) {  // CUDA asks for the inputs rounded to tf32
        for (int i = 0; i < fa.num_elements; i++) fa.x[i] = wmma::__float_to_tf32(fa.x[i]);
        for (int i = 0; i < fb.num_elements; i++) fb.x[i] = wmma::__float_to_tf32(fb.x[i]);
    }
    if (flags & FILL_C) wmma::fill_fragment(fc, 0.5f);
    else wmma::load_matrix_sync(fc, c + w * stride, ldc, flags & C_COL_MAJOR ? wmma::mem_col_major : wmma::mem_row_major);
    if (flags & IN_PLACE) {
        wmma::mma_sync(fc, fa, fb, fc);
        fd = fc;
    } else {
        wmma::mma_sync(fd, fa, fb, fc);
    }
    wmma::store_matrix_sync(d + w * stride, fd, ldc, flags & D_COL_MAJOR ? wmma::mem_col_major : wmma::mem_row_major);
}
// the bugs: each ends the run (ab: a 16x16 bf16 tile, then another)
// lanes 16..31 leave before mma_sync: after lanes 0..15 wait in it (A, B filled), or before (A, B loaded)
__global__ void wmma_half_warp(float* d, const __nv_bfloat16* ab, int load_first) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
    if (load_first) {
        wmma::load_matrix_sync(fa, ab, 16);
        wmma::load_matrix_sync(fb, ab, 16);
    } else {
        wmma::fill_fragment(fa, 1.0f);
        wmma::fill_fragment(fb, 1.0f);
    }
    wmma::fill_fragment(fc, 0.0f);
    if (threadIdx.x >= 16) return;
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(d, fc, 16, wmma::mem_row_major);
}
__global__ void wmma_diverging(float* d, const __nv_bfloat16* ab) {  // lanes 0..15 load, lanes 16..31 store
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
    wmma::fill_fragment(fc, 0.0f);
    if (threadIdx.x < 16) wmma::load_matrix_sync(fa, ab, 16);
    else wmma::store_matrix_sync(d, fc, 16, wmma::mem_row_major);
}
__global__ void wmma_load(const __nv_bfloat16* ab, int offset, int lane_offset, int ldm) {  // the pointer and ldm checks
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
    wmma::load_matrix_sync(fa, ab + offset + (threadIdx.x >= 16 ? lane_offset : 0), ldm);
}
// two warps share a shared-memory tile each loads whole: without the barrier, a data race
__global__ void wmma_shared_tile(float* d, const float* c, int barrier) {
    __shared__ __align__(32) float tile[256];
    for (int i = threadIdx.x; i < 256; i += blockDim.x) tile[i] = c[i];
    if (barrier) __syncthreads();
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
    wmma::load_matrix_sync(fc, tile, 16, wmma::mem_row_major);
    wmma::store_matrix_sync(d + threadIdx.x / 32 * 256, fc, 16, wmma::mem_row_major);
}
// (nvcc end)

// the value of a float rounded to tf32 by another route than mma.h's: 11 significant bits, ties
// away from zero (std::round), for the normal numbers the tests use
static double tf32_host(float x) {
    if (x == 0 || !isfinite(x)) return x;
    int e;
    double m = frexp((double)x, &e);
    return ldexp(round(ldexp(m, 11)), e - 11);
}
static uint32_t wmma_random_state = 12345;
static float wmma_random() {  // in [-1, 1)
    wmma_random_state = wmma_random_state * 1664525u + 1013904223u;
    return (float)(wmma_random_state >> 8) / (float)(1u << 23) - 1.0f;
}
static size_t at(int row, int col, int ld, bool row_major) { return row_major ? (size_t)row * ld + col : (size_t)col * ld + row; }

// wmma_tile against a float64 host loop: each element within the bound of fp32 summation, K + 1
// terms added in any order: (K + 1) 2^-24 (|c| + sum |a b|); the gaps between rows (ld, ldc past
// 16) hold NaN, so reading them shows, and D's gaps must stay NaN (the store writes the tile only)
template <typename Frag, typename Mem, int K, typename LA, typename LB>
static void check_wmma(const char* what, int warps, int ld, int ldc, int flags) {
    const bool a_row = std::is_same<LA, wmma::row_major>::value, b_row = std::is_same<LB, wmma::row_major>::value;
    const bool tf32 = std::is_same<Frag, wmma::precision::tf32>::value;
    int stride = 16 * std::max(ld, ldc);
    size_t n = (size_t)stride * warps;
    std::vector<Mem> A(n, Mem(NAN)), B(n, Mem(NAN));
    std::vector<float> C(n, NAN), D(n, NAN);
    auto input = [&](Mem v) { return tf32 ? tf32_host((float)v) : (double)(float)v; };
    for (int w = 0; w < warps; w++)
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 16; j++) {
                if (j < K) A[w * stride + at(i, j, ld, a_row)] = Mem(wmma_random());
                if (i < K) B[w * stride + at(i, j, ld, b_row)] = Mem(wmma_random());
                C[w * stride + at(i, j, ldc, !(flags & C_COL_MAJOR))] = wmma_random();
            }
    Mem *dA, *dB;
    float *dC, *dD;
    cudaMalloc(&dA, n * sizeof(Mem)); cudaMalloc(&dB, n * sizeof(Mem));
    cudaMalloc(&dC, n * sizeof(float)); cudaMalloc(&dD, n * sizeof(float));
    cudaMemcpy(dA, A.data(), n * sizeof(Mem), cudaMemcpyHostToDevice);
    cudaMemcpy(dB, B.data(), n * sizeof(Mem), cudaMemcpyHostToDevice);
    cudaMemcpy(dC, C.data(), n * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemcpy(dD, D.data(), n * sizeof(float), cudaMemcpyHostToDevice);
    wmma_tile<Frag, Mem, K, LA, LB><<<1, 32 * warps>>>(dD, dA, dB, dC, ld, ldc, stride, flags);
    cudaMemcpy(D.data(), dD, n * sizeof(float), cudaMemcpyDeviceToHost);
    double worst = 0;  // the largest error as a fraction of its bound
    size_t written = 0;
    for (float v : D) written += !isnan(v);
    for (int w = 0; w < warps; w++)
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 16; j++) {
                double c = flags & FILL_C ? 0.5 : C[w * stride + at(i, j, ldc, !(flags & C_COL_MAJOR))];
                double sum = c, magnitude = fabs(c);
                for (int k = 0; k < K; k++) {
                    double p = input(A[w * stride + at(i, k, ld, a_row)]) * input(B[w * stride + at(k, j, ld, b_row)]);
                    sum += p;
                    magnitude += fabs(p);
                }
                double got = D[w * stride + at(i, j, ldc, !(flags & D_COL_MAJOR))];
                double error = fabs(got - sum) / ((K + 1) * ldexp(magnitude, -24));
                worst = isnan(error) ? INFINITY : std::max(worst, error);
            }
    char line[256];
    snprintf(line, sizeof(line), "WMMA %s: D = A B + C within fp32 summation's bound of float64 (worst %.2f of it), "
             "only the tiles written", what, worst);
    expect(worst <= 1 && written == (size_t)256 * warps, line);
    cudaFree(dA); cudaFree(dB); cudaFree(dC); cudaFree(dD);
}

static void wmma_checks() {
    using R = wmma::row_major;
    using Cm = wmma::col_major;
    check_wmma<__nv_bfloat16, __nv_bfloat16, 16, R, Cm>("bf16 16x16x16, A row-major, B col-major, ld 24, C row, D col", 1, 24, 24, D_COL_MAJOR);
    check_wmma<__nv_bfloat16, __nv_bfloat16, 16, Cm, R>("bf16, A col-major, B row-major, ld 40, C col, D row, ldc 16", 1, 40, 16, C_COL_MAJOR);
    check_wmma<__nv_bfloat16, __nv_bfloat16, 16, R, R>("bf16, both row-major, in place, C and D col-major, ldc 32", 1, 16, 32,
                                                      IN_PLACE | C_COL_MAJOR | D_COL_MAJOR);
    check_wmma<__half, __half, 16, R, Cm>("fp16 16x16x16, A row-major, B col-major, ld 24, ldc 20", 1, 24, 20, 0);
    check_wmma<__half, __half, 16, Cm, Cm>("fp16, both col-major, ld 32, D col-major, in place", 1, 32, 24, IN_PLACE | D_COL_MAJOR);
    check_wmma<wmma::precision::tf32, float, 8, R, Cm>("tf32 16x16x8 (inputs through __float_to_tf32), ld 12, ldc 20", 1, 12, 20, 0);
    check_wmma<wmma::precision::tf32, float, 8, Cm, R>("tf32, A col-major, B row-major, ld 20, C and D col-major", 1, 20, 16,
                                                       C_COL_MAJOR | D_COL_MAJOR);
    check_wmma<__nv_bfloat16, __nv_bfloat16, 16, R, Cm>("bf16, two warps of one block, each its own tile", 2, 16, 16, 0);
    check_wmma<__nv_bfloat16, __nv_bfloat16, 16, R, Cm>("bf16, fill_fragment(c, 0.5) for C", 1, 16, 16, FILL_C);
    expect(wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major>::num_elements == 8 &&
           wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major>::num_elements == 16 &&
           wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major>::num_elements == 4 &&
           wmma::fragment<wmma::accumulator, 16, 16, 16, float>::num_elements == 8,
           "WMMA fragments hold as many elements a lane as CUDA's: bf16 a 8, fp16 b 16, tf32 a 4, accumulator 8");
    float tie = 1.0f + 1.0f / 2048, below = tie - 1.0f / 8388608;  // halfway between 1 and 1 + 2^-10, and just under
    expect(wmma::__float_to_tf32(tie) == 1.0f + 1.0f / 1024 && wmma::__float_to_tf32(-tie) == -(1.0f + 1.0f / 1024) &&
           wmma::__float_to_tf32(below) == 1.0f && wmma::__float_to_tf32(1.0f / 3) == (float)tf32_host(1.0f / 3),
           "__float_to_tf32 rounds to 10 mantissa bits, to nearest, ties away from zero (1 + 2^-11 -> 1 + 2^-10)");
    float *c, *d;
    cudaMalloc(&c, 256 * sizeof(float)); cudaMalloc(&d, 512 * sizeof(float));
    std::vector<float> h(512);
    for (int i = 0; i < 256; i++) h[i] = (float)i;
    cudaMemcpy(c, h.data(), 256 * sizeof(float), cudaMemcpyHostToDevice);
    wmma_shared_tile<<<1, 64>>>(d, c, 1);
    cudaMemcpy(h.data(), d, 512 * sizeof(float), cudaMemcpyDeviceToHost);
    bool ok = true;
    for (int i = 0; i < 512; i++) ok = ok && h[i] == (float)(i % 256);
    expect(ok, "WMMA: two warps load a shared-memory tile both wrote, after __syncthreads, and store it");
    cudaFree(c); cudaFree(d);
}

// NCCL under mpirun -np 2, one emulated GPU each
static ncclComm_t nccl_world(int* rank) {
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    cudaSetDevice(*rank);
    ncclUniqueId id;
    if (*rank == 0) ncclGetUniqueId(&id);
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclComm_t comm;
    if (ncclCommInitRank(&comm, 2, id, *rank) != ncclSuccess) { fprintf(stderr, "ncclCommInitRank failed\n"); exit(1); }
    return comm;
}
// A gradient's life under overlap (zero.h: zero_reduce_unit): the default stream writes g (1), the side
// stream all-reduces it into `sum` (2 over two ranks) and clears it, then the default stream adds the
// next micro-step's part (3) into g. With the default stream waiting for the clear g ends 3 in every
// order; without the wait, `slow` keeps the collective in flight while the add lands, after its read
// and before the clear, so the part is lost: g ends 0, the sum 2 (the case nccl-cleared-slow; in
// `late` the add lands before the read: g 0, the sum 8)
struct Cleared { float g, sum; };  // each where the 4 elements agree, else NaN
static Cleared reduce_then_clear(ncclComm_t comm, bool add_waits_for_clear) {
    cudaStream_t side;
    cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
    cudaEvent_t written, cleared;
    cudaEventCreate(&written); cudaEventCreate(&cleared);
    float *g, *sum, *part, h[8];
    cudaMalloc(&g, 4 * sizeof(float)); cudaMalloc(&sum, 4 * sizeof(float)); cudaMalloc(&part, 4 * sizeof(float));
    fill<<<1, 4>>>(part, 3.0f, 4);
    fill<<<1, 4>>>(g, 1.0f, 4);
    cudaEventRecord(written, 0);
    cudaStreamWaitEvent(side, written, 0);
    ncclAllReduce(g, sum, 4, ncclFloat, ncclSum, comm, side);
    cudaMemsetAsync(g, 0, 4 * sizeof(float), side);
    cudaEventRecord(cleared, side);
    if (add_waits_for_clear) cudaStreamWaitEvent(0, cleared, 0);
    accumulate<<<1, 4>>>(g, part, 4);
    cudaDeviceSynchronize();
    cudaMemcpy(h, g, 4 * sizeof(float), cudaMemcpyDeviceToHost);
    cudaMemcpy(h + 4, sum, 4 * sizeof(float), cudaMemcpyDeviceToHost);
    cudaFree(g); cudaFree(sum); cudaFree(part);
    cudaEventDestroy(written); cudaEventDestroy(cleared);
    cudaStreamDestroy(side);
    return {h[0] == h[3] ? h[0] : NAN, h[4] == h[7] ? h[4] : NAN};
}

static void nccl() {
    int rank;
    ncclComm_t comm = nccl_world(&rank);
    float* d;
    cudaMalloc(&d, 8 * sizeof(float));
    float h[8];
    for (int i = 0; i < 8; i++) h[i] = (float)(10 * rank + i);
    cudaMemcpy(d, h, sizeof(h), cudaMemcpyHostToDevice);
    ncclReduceScatter(d, d + rank * 4, 4, ncclFloat, ncclSum, comm, 0);  // in place: recvbuff = sendbuff + rank * recvcount
    cudaMemcpy(h, d + rank * 4, 4 * sizeof(float), cudaMemcpyDeviceToHost);
    bool ok = true;
    for (int i = 0; i < 4; i++) ok = ok && h[i] == (float)(10 + 2 * (rank * 4 + i));  // (0 + i) + (10 + i)
    expect(ok, "in-place ncclReduceScatter: this rank's block of the sum");
    ncclAllGather(d + rank * 4, d, 4, ncclFloat, comm, 0);  // in place: sendbuff = recvbuff + rank * sendcount
    cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost);
    ok = true;
    for (int i = 0; i < 8; i++) ok = ok && h[i] == (float)(10 + 2 * i);
    expect(ok, "in-place ncclAllGather: every rank's block in rank order");
    __nv_bfloat16 b[3] = {__float2bfloat16_rn(1.0f), __float2bfloat16_rn(256.0f), __float2bfloat16_rn(0.5f)};
    __nv_bfloat16* db;
    cudaMalloc(&db, sizeof(b));
    cudaMemcpy(db, b, sizeof(b), cudaMemcpyHostToDevice);
    ncclAllReduce(db, db, 3, ncclBfloat16, ncclAvg, comm, 0);
    cudaMemcpy(b, db, sizeof(b), cudaMemcpyDeviceToHost);
    expect(__bfloat162float(b[0]) == 1.0f && __bfloat162float(b[1]) == 256.0f && __bfloat162float(b[2]) == 0.5f,
           "ncclAvg in bf16: the mean of equal values is the value");
    int peer = 1 - rank;
    ncclGroupStart();  // both ranks send first: fine inside a group
    ncclSend(d, 8, ncclFloat, peer, comm, 0);
    ncclRecv(d, 8, ncclFloat, peer, comm, 0);
    expect(ncclGroupEnd() == ncclSuccess, "a send and a receive to each other inside a group");
    expect(ncclGroupEnd() == ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart is ncclInvalidUsage");
    cudaStream_t side;  // a reduction on a stream of its own, ordered by events both ways
    cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
    cudaEvent_t written, reduced;
    cudaEventCreate(&written); cudaEventCreate(&reduced);
    fill<<<1, 8>>>(d, 1.0f + rank, 8);
    cudaEventRecord(written, 0);
    cudaStreamWaitEvent(side, written, 0);
    ncclAllReduce(d, d, 8, ncclFloat, ncclSum, comm, side);
    cudaEventRecord(reduced, side);
    cudaStreamWaitEvent(0, reduced, 0);
    copy_scaled<<<1, 8>>>(d, d, 10.0f, 8);
    cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost);
    expect(h[0] == 30.0f && h[7] == 30.0f, "ncclAllReduce on a non-blocking stream between two events: 10 (1 + 2)");
    cudaEventDestroy(written); cudaEventDestroy(reduced);
    cudaStreamDestroy(side);
    Cleared cleared = reduce_then_clear(comm, true);
    expect(cleared.g == 3.0f && cleared.sum == 2.0f, "a buffer all-reduced and cleared on a side stream, added into after the clear");
    ncclCommDestroy(comm);
}
// one NCCL bug per case: each must end the run with a line naming it
static void nccl_bug(const char* c) {
    int rank;
    ncclComm_t comm = nccl_world(&rank);
    float *d, *e;
    cudaMalloc(&d, 8 * sizeof(float));
    cudaMalloc(&e, 8 * sizeof(float));
    cudaMemset(d, 0, 8 * sizeof(float));
    int peer = 1 - rank;
    if (!strcmp(c, "nccl-mismatch")) ncclAllReduce(d, d, rank == 0 ? 4 : 8, ncclFloat, ncclSum, comm, 0);  // count
    else if (!strcmp(c, "nccl-type-mismatch")) ncclAllReduce(d, d, 4, rank == 0 ? ncclFloat : ncclBfloat16, ncclSum, comm, 0);
    else if (!strcmp(c, "nccl-op-mismatch")) ncclAllReduce(d, d, 4, ncclFloat, rank == 0 ? ncclSum : ncclMax, comm, 0);
    else if (!strcmp(c, "nccl-overlap-allreduce")) ncclAllReduce(d, d + 1, 4, ncclFloat, ncclSum, comm, 0);
    else if (!strcmp(c, "nccl-overlap-reducescatter")) ncclReduceScatter(d, d + 1, 4, ncclFloat, ncclSum, comm, 0);
    else if (!strcmp(c, "nccl-overlap-allgather")) ncclAllGather(d + 1, d, 4, ncclFloat, comm, 0);  // in place is d + rank * 4
    else if (!strcmp(c, "nccl-overlap-broadcast")) ncclBroadcast(d, d + 1, 4, ncclFloat, 0, comm, 0);
    else if (!strcmp(c, "nccl-two-streams")) {  // one communicator on two streams with no event between them
        cudaStream_t side;
        cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
        ncclAllReduce(d, d, 4, ncclFloat, ncclSum, comm, 0);
        ncclAllReduce(e, e, 4, ncclFloat, ncclSum, comm, side);
    } else if (!strcmp(c, "nccl-deadlock")) {  // both send first, outside a group: each send waits for a receive never posted
        ncclSend(d, 8, ncclFloat, peer, comm, 0);
        ncclRecv(e, 8, ncclFloat, peer, comm, 0);
        cudaDeviceSynchronize();
    } else if (!strcmp(c, "nccl-cleared-slow")) {
        Cleared cleared = reduce_then_clear(comm, false);
        if (cleared.g == 0.0f && cleared.sum == 2.0f) printf("the add landed between the all-reduce's read and the clear\n");
        expect(cleared.g == 3.0f && cleared.sum == 2.0f, "a buffer added into while its all-reduce and clear may be in flight");
        printf(failures ? "%d checks FAILED\n" : "every check passed\n", failures);
    } else { fprintf(stderr, "unknown case %s\n", c); exit(2); }
    cudaDeviceSynchronize();
    ncclCommDestroy(comm);
}

int main(int argc, char** argv) {
    const char* c = argc > 1 ? argv[1] : "";
    if (strncmp(c, "nccl", 4) == 0) {
        MPI_Init(&argc, &argv);
        if (strcmp(c, "nccl") == 0) nccl(); else nccl_bug(c);
        MPI_Finalize();
        return failures ? 1 : 0;
    }
    float* d;
    cudaMalloc(&d, 64 * sizeof(float));
    float* five;
    cudaMalloc(&five, 5 * sizeof(float));
    __nv_bfloat16* ab;  // two 16x16 bf16 tiles, for the WMMA bugs
    cudaMalloc(&ab, 512 * sizeof(__nv_bfloat16));
    cudaMemset(ab, 0, 512 * sizeof(__nv_bfloat16));
    if (!*c) { launches(); poison(); async_copies(); streams(""); cublas(); wmma_checks(); }
    else if (!strcmp(c, "upload-rewritten")) upload_rewritten();
    else if (!strncmp(c, "stream", 6)) streams(c);
    else if (!strcmp(c, "wmma")) wmma_checks();  // also under ThreadSanitizer
    else if (!strcmp(c, "wmma-half-warp")) wmma_half_warp<<<1, 32>>>(d, ab, 0);
    else if (!strcmp(c, "wmma-after-exit")) wmma_half_warp<<<1, 32>>>(d, ab, 1);
    else if (!strcmp(c, "wmma-diverging")) wmma_diverging<<<1, 32>>>(d, ab);
    else if (!strcmp(c, "wmma-short-warp")) wmma_load<<<1, 16>>>(ab, 0, 0, 16);
    else if (!strcmp(c, "wmma-lane-pointers")) wmma_load<<<1, 32>>>(ab, 0, 256, 16);
    else if (!strcmp(c, "wmma-misaligned")) wmma_load<<<1, 32>>>(ab, 8, 0, 16);
    else if (!strcmp(c, "wmma-bad-ldm")) wmma_load<<<1, 32>>>(ab, 0, 0, 12);
    else if (!strcmp(c, "wmma-race")) {
        float* t;  // c: 256 floats, then d: two tiles
        cudaMalloc(&t, 768 * sizeof(float));
        cudaMemset(t, 0, 768 * sizeof(float));
        wmma_shared_tile<<<1, 64>>>(t + 256, t, 0);
    }
    else if (!strcmp(c, "host-deref")) printf("%f\n", d[0]);
    else if (!strcmp(c, "out-of-range")) write_past_end<<<1, 32>>>(d, 64);
    else if (!strcmp(c, "past-odd-end")) write_past_end<<<1, 32>>>(five, 5);  // into the slack before the guard page
    else if (!strcmp(c, "before-start")) write_before_start<<<1, 32>>>(d);
    else if (!strcmp(c, "unwritten")) { float h[4]; cudaMemcpy(h, five, sizeof(h), cudaMemcpyDeviceToHost); }
    else if (!strcmp(c, "gemm-batch-past-end")) { cublasHandle_t h; cublasCreate(&h); strided_batched(h, 4); }
    else if (!strcmp(c, "host-argument")) { std::vector<float> h(64); write_past_end<<<1, 32>>>(h.data(), 0); }
    else if (!strcmp(c, "copy-kind")) { float h[4], g[4] = {}; cudaMemcpy(h, g, sizeof(h), cudaMemcpyDeviceToHost); }
    else if (!strcmp(c, "shuffle-exited")) shuffle_after_exit<<<1, 32>>>(d);
    else if (!strcmp(c, "shuffle-absent")) shuffle_full_mask<<<1, 48>>>(d);
    else if (!strcmp(c, "divergent-barrier")) barrier_in_divergent_code<<<1, 32>>>(d);
    else if (!strcmp(c, "race")) missing_barrier<<<2, 64>>>(d);
    else if (!strcmp(c, "caller-line")) device_malloc((size_t)1 << 50);  // 1 PiB: out of device memory
    else if (!strcmp(c, "no-race")) with_barrier<<<2, 64>>>(d);
    else { fprintf(stderr, "unknown case %s\n", c); return 2; }
    printf(failures ? "%d checks FAILED\n" : "every check passed\n", failures);
    return failures ? 1 : 0;
}

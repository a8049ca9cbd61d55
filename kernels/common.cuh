/*
kernels/common.cuh: what every op needs beyond base.h: the GPU build's library
handle (cuBLAS), launch checks, and the choice of device.

The only process-wide state is the cuBLAS handles of the GPU build and their compute type
(-f: TF32 or not): library settings made once in device_init, not model state. Device memory, copies, the
error path and the memory ledger are in base.h, which the collectives, the data
loader and the tokenizer use too.
*/
#pragma once
// defines: device_init, device_choose_before_mpi, cpu_restart_tuned, cpu_wait_politely, cpu_name_blas_kernels,
//          launcher_local_rank, device_count, device_name,
//          device_memory_available, device_pci_id, launchCheck, cublasCheck, cublas_handle, cublaslt_handle,
//          cublaslt_workspace, CUBLASLT_WORKSPACE_BYTES,
//          cublas_compute, COLUMN_PARTS, column_partials_elements, column_tiles_grid, column_sums_launches,
//          column_partials_block, column_part_rows, sum_rows_of_threads (and base.h's), COLUMN_SUMS_MAX, ColumnTiles,
//          column_tiles, column_tiles_entry, column_partials_add_column, COLUMN_ROW_THREADS,
//          column_partials_last_block, column_partials_add, column_partials_counters, column_partials_scratch,
//          COLUMN_TILES_MAX, column_partials_parts, column_partials_check, cublas_check, Packed128, load128, store128,
//          aligned16, packs_fit, load_values, store_values, store128_rounded
#include <stdint.h>   // defines: SIZE_MAX
#include <initializer_list>  // defines: std::initializer_list
#include "../base.h"  // defines: fail, device_malloc, host_to_device, ceil_div, MemoryKind, BufferSpec
#include "ledger.cuh"  // defines: Ledger, ledger_add, KernelCost, packs_divide

// the row ranges of the GPU's two-stage column sums (below), and the scratch they need for `cols`
// columns: a counter for each of up to COLUMN_TILES_MAX 32-column tiles (4 bytes each), at the
// start, where no use's parts can land, zero when the scratch is made (allocate_buffers zeroes;
// column_partials_scratch) and left zero by each use; then the fp32 parts. The CPU build sums each
// column in one pass and needs none
#define COLUMN_PARTS 64
#define COLUMN_TILES_MAX 1024  // columns up to 32768
inline size_t column_partials_elements(size_t cols) { return COLUMN_TILES_MAX + COLUMN_PARTS * cols; }

#ifdef __CUDACC__
#include <cublas_v2.h>     // defines: cublasHandle_t, cublasGemmStridedBatchedEx
#include <cublasLt.h>      // defines: cublasLtHandle_t, cublasLtMatmul (kernels/matmul.cuh: the bias epilogue)

inline void cublas_check(cublasStatus_t status, const char* file, int line) {
    if (status != CUBLAS_STATUS_SUCCESS) fail("cuBLAS status %d at %s:%d", (int)status, file, line);
}
#define cublasCheck(status) cublas_check((status), __FILE__, __LINE__)
// after every launch: a bad launch configuration is reported where it happened. In the debug
// build (make DEBUG=1) it also waits for the kernel, so a fault inside it is reported at this
// launch rather than at some later call
#ifdef DEBUG_SYNC
#define launchCheck() \
    (cuda_check(cudaGetLastError(), __FILE__, __LINE__), cuda_check(cudaDeviceSynchronize(), __FILE__, __LINE__))
#else
#define launchCheck() cuda_check(cudaGetLastError(), __FILE__, __LINE__)
#endif

inline cublasHandle_t& cublas_handle() { static cublasHandle_t handle = nullptr; return handle; }
inline cublasLtHandle_t& cublaslt_handle() { static cublasLtHandle_t handle = nullptr; return handle; }
// cuBLASLt's workspace for the GELU epilogues (kernels/gelu_fusion.cuh): without one, its DGELU GEMM
// ran 4x slower than the plain GEMM on an H200 (docs/gpu.md); 32 MiB as llm.c gives, allocated at
// the first fused call (-ge runs only). The plain and bias GEMMs run without one, as measured
#define CUBLASLT_WORKSPACE_BYTES ((size_t)32 << 20)
inline void* cublaslt_workspace() { static void* w = device_malloc(CUBLASLT_WORKSPACE_BYTES); return w; }
// the GEMMs' compute type, set with the handles in device_init: true fp32 (CUBLAS_COMPUTE_32F), or,
// with -f 1 in an fp32 build, TF32 (CUBLAS_COMPUTE_32F_FAST_TF32: each input rounded to TF32's 10-bit
// mantissa for the tensor cores, the sums in fp32; llm.c's default, about 8x the fp32 FLOP/s on an
// H100). 16-bit builds compute in fp32 from bf16/fp16 inputs either way
inline cublasComputeType_t& cublas_compute() { static cublasComputeType_t type = CUBLAS_COMPUTE_32F; return type; }

// 16 bytes of T: one load or store instruction moves 8 bf16 or 4 fp32 values, and a warp's 32
// lanes cover 512 contiguous bytes, whole 128-byte lines. The address must be 16-byte aligned:
// a multiple of Packed128<T>::size elements from an allocation
template <typename T> struct Packed128 {
    static constexpr int size = 16 / sizeof(T);
    alignas(16) T v[size];  // the struct's alignment too: a copy is one 128-bit access
};
template <typename T>
__device__ inline Packed128<T> load128(const T* p) {
    return *reinterpret_cast<const Packed128<T>*>(p);
}
template <typename T>
__device__ inline void store128(T* p, const Packed128<T>& x) {
    *reinterpret_cast<Packed128<T>*>(p) = x;
}
HOST_DEVICE inline bool aligned16(const void* p) { return (size_t)p % 16 == 0; }
// n values of arrays that all allow 16-byte packs: n a multiple of the floatX pack, each 16-byte aligned
inline bool packs_fit(size_t n, std::initializer_list<const void*> arrays) {
    if (n % Packed128<floatX>::size) return false;
    for (const void* p : arrays) if (!aligned16(p)) return false;
    return true;
}
// P values of src into dst (registers), 16 bytes a load; and back
template <int P, typename T> __device__ inline void load_values(T* dst, const T* src) {
    for (int q = 0; q < P; q += Packed128<T>::size) {
        Packed128<T> a = load128(src + q);
        for (int r = 0; r < Packed128<T>::size; r++) dst[q + r] = a.v[r];
    }
}
template <int P, typename T> __device__ inline void store_values(T* dst, const T* src) {
    for (int q = 0; q < P; q += Packed128<T>::size) {
        Packed128<T> a;
        for (int r = 0; r < Packed128<T>::size; r++) a.v[r] = src[q + r];
        store128(dst + q, a);
    }
}
// a floatX pack's worth of fp32 values at src, rounded, in one 16-byte store at dst
__device__ inline void store128_rounded(floatX* dst, const float* src) {
    float x[Packed128<floatX>::size];
    load_values<Packed128<floatX>::size>(x, src);
    Packed128<floatX> y;
    for (int k = 0; k < Packed128<floatX>::size; k++) y.v[k] = from_float(x[k]);
    store128(dst, y);
}

// Column sums over many rows (bias and LayerNorm parameter gradients) in two stages, in a fixed
// order so that a run repeats bit for bit (bit-exact resume): stage 1 gives each of COLUMN_PARTS
// row ranges of each 32-column tile a block that writes one partial sum per column to
// partials[part * cols + c]; stage 2 adds the parts to the column in part order, done by the last
// of the tile's blocks to finish (column_partials_last_block), not by a kernel of its own. Which
// block is last changes run to run; the order of the sum does not. The ranges depend on the rows
// only. Stage 1's block is 32 columns x COLUMN_ROW_THREADS rows of threads: a thread sums every
// COLUMN_ROW_THREADS-th row of its part, then sum_rows_of_threads adds the block's rows in order.
#define COLUMN_ROW_THREADS 8
// several column sums in one launch (the bias gradients of a block's four linear layers): entry e's
// 32-column tiles are blocks [first_tile[e], first_tile[e + 1]) of grid x, its parts start
// COLUMN_PARTS x first_col[e] floats into the scratch's parts (first_col: the entries' columns
// before it). Each column is summed as alone, in the same order: the same bits, fewer launches
#define COLUMN_SUMS_MAX 4
struct ColumnTiles { int entries; int first_tile[COLUMN_SUMS_MAX + 1]; int first_col[COLUMN_SUMS_MAX]; };
inline ColumnTiles column_tiles(const int* cols, int entries) {
    ColumnTiles t = {entries, {0}, {0}};
    for (int e = 0; e < entries; e++) {
        t.first_tile[e + 1] = t.first_tile[e] + (int)ceil_div(cols[e], 32);
        if (e + 1 < entries) t.first_col[e + 1] = t.first_col[e] + cols[e];
    }
    return t;
}
inline dim3 column_tiles_grid(const ColumnTiles& t) { return dim3((unsigned)t.first_tile[t.entries], COLUMN_PARTS); }
// n column sums of widths cols[i] (each at most COLUMN_TILES_MAX tiles: column_partials_check) in
// as few launches as COLUMN_SUMS_MAX entries and COLUMN_TILES_MAX tile counters allow:
// launch(first, tiles) for entries [first, first + tiles.entries), in order
template <typename Launch> inline void column_sums_launches(const int* cols, int n, Launch launch) {
    for (int first = 0; first < n;) {
        int count = 0, tiles = 0;
        while (first + count < n && count < COLUMN_SUMS_MAX &&
               tiles + (int)ceil_div(cols[first + count], 32) <= COLUMN_TILES_MAX)
            tiles += (int)ceil_div(cols[first + count++], 32);
        launch(first, column_tiles(cols + first, count));
        first += count;
    }
}
inline dim3 column_partials_block() { return dim3(32, COLUMN_ROW_THREADS); }
// the rows [*begin, *end) of stage 1's part `part` of N rows
__device__ inline void column_part_rows(int N, int part, int* begin, int* end) {
    int per_part = (int)ceil_div(N, COLUMN_PARTS);
    *begin = part * per_part;
    *end = min(N, *begin + per_part);
}
// v summed over the block's rows of threads, in row order, through `shared`: valid in row 0
__device__ inline float sum_rows_of_threads(float v, float (*shared)[32]) {
    shared[threadIdx.y][threadIdx.x] = v;
    __syncthreads();
    for (int y = 1; y < COLUMN_ROW_THREADS; y++) v += shared[y][threadIdx.x];
    return v;
}
// whether this block is the last of its column tile's COLUMN_PARTS blocks (grid y) to have written
// its partials: each counts itself in counters[blockIdx.x] after a fence that makes its partials
// visible to every block (CUDA's threadFenceReduction sample); the last resets the counter to zero
// for the next use, and fences again before it reads the others' partials. Every thread calls it
__device__ inline bool column_partials_last_block(unsigned* counters) {
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0) {
        last = atomicAdd(&counters[blockIdx.x], 1u) == gridDim.y - 1;
        if (last) counters[blockIdx.x] = 0;  // every block of the tile has counted
    }
    __syncthreads();
    if (last) __threadfence();
    return last;
}
// which entry of the launch's table block x's tile belongs to, and the tile's index within it
__device__ inline int column_tiles_entry(const ColumnTiles& t, int* tile) {
    int e = 0;
    while (e + 1 < t.entries && (int)blockIdx.x >= t.first_tile[e + 1]) e++;
    *tile = blockIdx.x - t.first_tile[e];
    return e;
}
// stage 2 for column c: out(c) += its parts, in part order. The parts are read volatile: other
// blocks wrote them, past this SM's L1
__device__ inline void column_partials_add_column(floatX* out, const float* partials, int cols, int c) {
    const volatile float* parts = partials;
    float sum = 0.0f;
    for (int part = 0; part < COLUMN_PARTS; part++) sum += parts[(size_t)part * cols + c];
    out[c] = from_float(to_float(out[c]) + sum);
}
// ... for the tile's 32 columns (row 0 of threads)
__device__ inline void column_partials_add(floatX* out, const float* partials, int cols, int tile) {
    int c = tile * 32 + threadIdx.x;
    if (threadIdx.y == 0 && c < cols) column_partials_add_column(out, partials, cols, c);
}
// a partials scratch's tile counters, and where its parts begin
__device__ inline unsigned* column_partials_counters(float* scratch) { return (unsigned*)scratch; }
__device__ inline float* column_partials_parts(float* scratch) { return scratch + COLUMN_TILES_MAX; }
inline void column_partials_check(size_t cols) {
    if (cols > 32 * (size_t)COLUMN_TILES_MAX)
        fail("column sums over %zu columns: at most %d (COLUMN_TILES_MAX)", cols, 32 * COLUMN_TILES_MAX);
}
// a partials scratch for `cols` columns, its counters zeroed (the trainer's comes from allocate_buffers)
inline float* column_partials_scratch(size_t cols) {
    float* p = (float*)device_malloc(column_partials_elements(cols) * sizeof(float));
    device_zero(p, column_partials_elements(cols) * sizeof(float));
    return p;
}

// the GPUs this process can see; 0 where there is no device or no driver
inline int device_count() {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
    return count;
}

// this process's rank on its node as the launcher tells it (Open MPI, MPICH's Hydra, Slurm), or -1:
// read before MPI_Init, which has no ranks yet
inline int launcher_local_rank() {
    for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "PMI_LOCAL_RANK"})
        if (const char* v = getenv(name)) return atoi(v);
    return -1;
}
inline void cpu_restart_tuned(char** argv) { (void)argv; }  // the GPU build: its waits are the GPU's
// the GPU chosen before MPI_Init, from the launcher's local rank: a CUDA-aware MPI opens a
// context on the current device at MPI_Init, which would otherwise be GPU 0 in every rank.
// device_init keeps that choice: MPI's own node rank decides only where the launcher gave none, so
// a launcher that numbers its ranks otherwise cannot leave MPI's context and the model on two GPUs
inline void device_choose_before_mpi() {
    int count = 0, local = launcher_local_rank();
    if (local >= 0 && cudaGetDeviceCount(&count) == cudaSuccess && count > 0) cudaSetDevice(local % count);
}
inline void device_init(int local_rank, int ranks_on_node, bool tf32 = false) {
    (void)ranks_on_node;
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0)
        fail("no CUDA device found (%s): ./train_gpt_cpu takes the same flags and runs on the CPU",
             err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    int launcher = launcher_local_rank();  // device_choose_before_mpi's choice, where it made one
    cudaCheck(cudaSetDevice((launcher >= 0 ? launcher : local_rank) % count));
    if (!cublas_handle()) cublasCheck(cublasCreate(&cublas_handle()));
    if (!cublaslt_handle()) cublasCheck(cublasLtCreate(&cublaslt_handle()));
    // fp32 builds compute in true fp32 unless -f 1 (TF32), so they can be checked against float64
    cublasCheck(cublasSetMathMode(cublas_handle(), CUBLAS_DEFAULT_MATH));
    cublas_compute() = tf32 && FLOATX_IS_FP32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}
inline const char* device_name() {
    static cudaDeviceProp p;
    int d;
    cudaGetDevice(&d);
    cudaGetDeviceProperties(&p, d);
    return p.name;
}

// the physical GPU this rank uses, as a number unique on its node: its PCI domain, bus and device.
// Device ordinals do not tell GPUs apart: a launcher that binds each rank to one GPU
// (CUDA_VISIBLE_DEVICES, srun --gpus-per-task=1) shows every rank its own GPU as device 0
inline int device_pci_id() {
    int d;
    cudaDeviceProp p;
    cudaCheck(cudaGetDevice(&d));
    cudaCheck(cudaGetDeviceProperties(&p, d));
    return (p.pciDomainID << 16) | (p.pciBusID << 8) | p.pciDeviceID;
}
// the bytes this rank may allocate: its GPU's free memory, shared by the ranks that use that GPU
inline size_t device_memory_available(int ranks_sharing) {
    size_t free_bytes = 0, total = 0;
    cudaCheck(cudaMemGetInfo(&free_bytes, &total));
    return free_bytes / (ranks_sharing > 0 ? ranks_sharing : 1);
}

#else  // CPU build: host memory, OpenMP threads
#include <omp.h>      // defines: omp_set_num_threads, omp_get_max_threads
#include <sched.h>    // defines: sched_getaffinity, CPU_COUNT
#include <unistd.h>   // defines: execv
#include <string.h>   // defines: strcmp
#include <math.h>     // defines: expf, tanhf
#ifdef USE_LIBMVEC
// glibc's libmvec holds SIMD versions of expf and tanhf (4 or 8 lanes). Declared so, the compiler
// vectorises the loops that call them (GELU, the softmaxes, the cross-entropy) instead of calling
// libm once per element: GELU forward 10x faster. Same functions, a few ulp apart from libm's.
// The Makefile defines USE_LIBMVEC and links -lmvec where glibc has it (x86-64).
#pragma omp declare simd notinbranch
extern "C" float expf(float) noexcept;
#pragma omp declare simd notinbranch
extern "C" float tanhf(float) noexcept;
#endif
extern "C" void openblas_set_num_threads(int);  // OpenBLAS's own threads, which would otherwise take every core
extern "C" int openblas_get_parallel(void);      // 0 single-threaded, 1 pthreads, 2 OpenMP
extern "C" char* openblas_get_corename(void);    // the kernels OpenBLAS chose for this CPU

inline int device_count() { return 0; }
inline int device_pci_id() { return 0; }  // every rank of a node shares its memory
// OpenMP threads that wait for work spin first: libgomp's default is 300,000 spins, about a
// millisecond, before they sleep. When another program shares the cores, a spinning thread takes
// the core from the thread that has the work, and the step slows by more than the share taken
// (measured, GPT-2 124M B 4 T 64, 2 threads, one core kept busy: 2.5 s a step spinning, 2.1 s at
// 1,000 spins; the quiet step the same, 1.16 s). libgomp reads GOMP_SPINCOUNT once, as it loads,
// so the program sets it, unless the user chose a policy, and starts itself again (cpu_restart_tuned)
inline bool cpu_wait_politely() {
    if (getenv("GOMP_SPINCOUNT") || getenv("OMP_WAIT_POLICY")) return false;
    setenv("GOMP_SPINCOUNT", "1000", 1);
    return true;
}
// OpenBLAS does not know every CPU it meets: Debian 12's (0.3.21) takes the Xeons this project runs
// on (named "Intel(R) Xeon(R) Processor", with AVX-512) for unknown and falls back to its Prescott
// kernels (SSE3): sgemm 18 GFLOP/s a core where its SkylakeX kernels reach 95 (measured, n 1024), a
// CPU step 2x slower. It reads OPENBLAS_CORETYPE once, as it loads: where it fell back and the CPU
// has AVX-512 or AVX2, the program names the kernels the CPU can run, unless the user named some
inline bool cpu_name_blas_kernels() {
    if (getenv("OPENBLAS_CORETYPE") || strcmp(openblas_get_corename(), "Prescott") != 0) return false;
    const char* kernels = nullptr;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512cd"))
        kernels = "SkylakeX";
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        kernels = "Haswell";
    if (kernels) setenv("OPENBLAS_CORETYPE", kernels, 1);
    return kernels != nullptr;
}
// both read as the libraries load: set, then the program starts itself again, once, before MPI
inline void cpu_restart_tuned(char** argv) {
    bool politely = cpu_wait_politely(), kernels = cpu_name_blas_kernels();
    if (politely || kernels) execv("/proc/self/exe", argv);  // returns only if it failed: go on as before
}
inline void device_choose_before_mpi() {}  // no GPU
// each rank's threads: the cores this process may run on, shared by the ranks on the node,
// unless OMP_NUM_THREADS (and OPENBLAS_NUM_THREADS) say otherwise
inline void device_init(int local_rank, int ranks_on_node, bool tf32 = false) {
    (void)local_rank, (void)tf32;  // (no TF32 on a CPU: sgemm sums fp32 products of fp32 inputs)
    cpu_set_t cores;
    int available = sched_getaffinity(0, sizeof(cores), &cores) == 0 ? CPU_COUNT(&cores) : 1;
    int threads = available / (ranks_on_node > 0 ? ranks_on_node : 1);
    if (threads < 1) threads = 1;
    if (!getenv("OMP_NUM_THREADS")) omp_set_num_threads(threads);
    if (!getenv("OPENBLAS_NUM_THREADS"))
        openblas_set_num_threads(getenv("OMP_NUM_THREADS") ? omp_get_max_threads() : threads);
}
inline const char* device_name() {
    static char name[128];
    // OpenBLAS on pthreads competes with the OpenMP threads for the cores (Makefile: OPENBLAS_OPENMP)
    const char* blas =
        openblas_get_parallel() == 1 ? " (OpenBLAS on pthreads: slower; install libopenblas-openmp-dev)" : "";
    snprintf(name, sizeof(name), "CPU, %d OpenMP threads per rank, OpenBLAS %s kernels%s", omp_get_max_threads(),
             openblas_get_corename(), blas);
    return name;
}
// the node's available memory (/proc/meminfo MemAvailable), shared by the ranks on it;
// SIZE_MAX where it cannot be read
inline size_t device_memory_available(int ranks_sharing) {
    FILE* f = fopen("/proc/meminfo", "r");
    if (!f) return SIZE_MAX;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    fclose(f);
    return kb ? (size_t)(kb * 1024 / (ranks_sharing > 0 ? ranks_sharing : 1)) : SIZE_MAX;
}
#endif

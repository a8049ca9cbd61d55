/*
tests/emu/mma.h: CUDA's <mma.h> (WMMA, the warp-level tensor-core API) as the emulated CUDA build
sees it, so that a kernel written against nvcuda::wmma compiles unchanged with nvcc and here.

The subset the project uses, with the real header's names and signatures (CUDA 13's crt/mma.h):
    fragment<matrix_a | matrix_b, 16, 16, 16, __nv_bfloat16 | __half, row_major | col_major>
    fragment<matrix_a | matrix_b, 16, 16, 8, precision::tf32, row_major | col_major>  (fp32 build)
    fragment<accumulator, 16, 16, 16 | 8, float>
    fill_fragment, load_matrix_sync (a, b: layout from the type; accumulator: a layout_t argument),
    mma_sync(d, a, b, c) (d may be c), store_matrix_sync(p, accumulator, ldm, layout_t), __float_to_tf32
and, for kernels that issue PTX's mma.sync.m16n8k16 themselves, cuda_emu_mma_m16n8k16 (at the end).
Other shapes and types (fp16 accumulators, int8, 32x8x16) have no fragment here: they do not compile.

The contract, as CUDA's programming guide states it, checked at every call:
  - load_matrix_sync, mma_sync and store_matrix_sync are warp-collective: all 32 lanes of the
    warp must reach the same call (cuda_emu_warp_all_gather); a call that part of a warp reaches
    ends the run with a line, as a shuffle naming an exited lane does. Each waits for every lane
    first, then loads, multiplies or stores (so what the warp's lanes wrote before it is seen)
  - the pointer is 256-bit (32-byte) aligned; ldm, in elements, is a multiple of 8 for 16-bit
    types and of 4 for float (16 bytes); pointer, ldm and layout are the same in every lane
  - fill_fragment is not collective: each lane fills its own elements

The element-to-lane mapping (unspecified by CUDA, and a real GPU's differs, so code that assumes
one is wrong on both): a fragment holds a rows x cols matrix (a: 16 x K, b: K x 16, accumulator:
16 x 16), its elements taken in row-major order and dealt out to lanes 0..31 one at a time, round
and round: lane l's x[i] is element 32 i + l, so a lane's elements lie in different rows (in a 16 x
16 accumulator, rows 2 i + l / 16 of column l % 16), as on a GPU, where a lane's accumulator
elements span two rows: code that takes a lane's elements for one row fails here. Code may learn
the mapping only by loading a known matrix (kernels/flash_attention_wmma.cuh: wmma_accumulator_rows).
fp16's a and b fragments have 16 elements a lane, as the real ones do: x[8..15] repeat x[0..7]
(load and fill write both; mma_sync reads x[0..7]).

Arithmetic: mma_sync computes each D[i][j] = C[i][j] + A[i][0]*B[0][j] + ... + A[i][K-1]*B[K-1][j]
in fp32, adding in that order (C first, then k ascending). Every product of two bf16, fp16 or tf32
values is exact in fp32, so only the sums round. A tensor core's order of summation (and the
rounding of its partial sums) is unspecified and differs: compare with a tolerance, never bit for bit.
TF32: __float_to_tf32 rounds to 10 mantissa bits, to nearest with ties away from zero (it is PTX's
cvt.rna.tf32.f32 in CUDA's header); mma_sync reads a tf32 fragment's floats with their 13 low
mantissa bits dropped, so a value not converted first is truncated (CUDA asks that inputs be
converted; a GPU's result for unconverted ones is not documented).

Not emulated: speed, the real fragment layout, shared-memory bank conflicts, the async copies.
*/
#pragma once
#include <stdint.h>  // defines: uint32_t
#include <string.h>  // defines: memcpy
#include <type_traits>  // defines: std::is_same
#include "cuda_emu.h"
#include "cuda_bf16.h"
#include "cuda_fp16.h"

namespace nvcuda {
namespace wmma {

// ---------------------------------------------------------------- tags, layouts, tf32
struct row_major;
struct col_major;
struct matrix_a;
struct matrix_b;
struct accumulator;
namespace precision { struct tf32; }
enum layout_t { mem_row_major, mem_col_major };

// round to nearest, ties away from zero, to tf32's 10 mantissa bits (low 13 bits zero); Inf and NaN as they are
inline float __float_to_tf32(float in) {
    uint32_t u;
    memcpy(&u, &in, 4);
    if ((u & 0x7f800000u) == 0x7f800000u) return in;
    u = (u + 0x1000u) & 0xffffe000u;  // add half of the last kept bit's weight to the magnitude, then cut
    memcpy(&in, &u, 4);
    return in;
}

// ---------------------------------------------------------------- fragments
template <typename T> struct helper_traits { typedef T storage_element_type; typedef T fill_argument_type; };
template <> struct helper_traits<precision::tf32> { typedef float storage_element_type; typedef float fill_argument_type; };

template <typename T, int size, int packed_size = size> struct __frag_base {
    enum { num_elements = size, num_storage_elements = packed_size };
    typedef T element_type;
    typedef typename helper_traits<T>::storage_element_type storage_element_type;
    storage_element_type x[packed_size];
};

template <typename Use, int m, int n, int k, typename T, typename Layout = void> class fragment;  // only those below
template <> class fragment<matrix_a, 16, 16, 16, __nv_bfloat16, row_major> : public __frag_base<__nv_bfloat16, 8> {};
template <> class fragment<matrix_a, 16, 16, 16, __nv_bfloat16, col_major> : public __frag_base<__nv_bfloat16, 8> {};
template <> class fragment<matrix_b, 16, 16, 16, __nv_bfloat16, row_major> : public __frag_base<__nv_bfloat16, 8> {};
template <> class fragment<matrix_b, 16, 16, 16, __nv_bfloat16, col_major> : public __frag_base<__nv_bfloat16, 8> {};
template <> class fragment<matrix_a, 16, 16, 16, __half, row_major> : public __frag_base<__half, 16> {};
template <> class fragment<matrix_a, 16, 16, 16, __half, col_major> : public __frag_base<__half, 16> {};
template <> class fragment<matrix_b, 16, 16, 16, __half, row_major> : public __frag_base<__half, 16> {};
template <> class fragment<matrix_b, 16, 16, 16, __half, col_major> : public __frag_base<__half, 16> {};
template <> class fragment<accumulator, 16, 16, 16, float> : public __frag_base<float, 8> {};
template <> class fragment<matrix_a, 16, 16, 8, precision::tf32, row_major> : public __frag_base<precision::tf32, 4> {};
template <> class fragment<matrix_a, 16, 16, 8, precision::tf32, col_major> : public __frag_base<precision::tf32, 4> {};
template <> class fragment<matrix_b, 16, 16, 8, precision::tf32, row_major> : public __frag_base<precision::tf32, 4> {};
template <> class fragment<matrix_b, 16, 16, 8, precision::tf32, col_major> : public __frag_base<precision::tf32, 4> {};
template <> class fragment<accumulator, 16, 16, 8, float> : public __frag_base<float, 8> {};

template <typename T, int size, int packed_size>
inline void fill_fragment(__frag_base<T, size, packed_size>& f, const typename helper_traits<T>::fill_argument_type& v) {
    for (int i = 0; i < packed_size; i++) f.x[i] = v;
}

}  // namespace wmma
}  // namespace nvcuda

// ---------------------------------------------------------------- the emulation's own parts
namespace cuda_emu_wmma {
using namespace nvcuda::wmma;

// the logical matrix a fragment holds: rows x cols
template <typename Use, int m, int n, int k> struct Shape;
template <int m, int n, int k> struct Shape<matrix_a, m, n, k> { enum { rows = m, cols = k }; };
template <int m, int n, int k> struct Shape<matrix_b, m, n, k> { enum { rows = k, cols = n }; };
template <int m, int n, int k> struct Shape<accumulator, m, n, k> { enum { rows = m, cols = n }; };

inline int lane() { return (int)((threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x) % 32; }

// where element (row, col) of a rows x cols matrix is in memory with leading dimension ldm
inline size_t offset(int row, int col, unsigned ldm, layout_t layout) {
    return layout == mem_row_major ? (size_t)row * ldm + col : (size_t)col * ldm + row;
}

// an element of an a or b fragment as the multiplication reads it: tf32 (float storage) keeps
// 10 mantissa bits, the 13 low ones ignored (a NaN stays a NaN)
inline float input(float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u &= 0xffffe000u;
    memcpy(&v, &u, 4);
    return v;
}
inline float input(__nv_bfloat16 v) { return __bfloat162float(v); }
inline float input(__half v) { return __half2float(v); }

// what every lane of a load or store must agree on; ends the run where the contract is broken
struct MemoryCall { const void* p; unsigned ldm; int layout; };
inline void check_memory_call(const char* what, const void* p, unsigned ldm, layout_t layout, size_t element_bytes) {
    if ((uintptr_t)p % 32)
        cuda_emu_kernel_error("%s: the pointer %p is not 256-bit (32-byte) aligned", what, p);
    if (ldm == 0 || (ldm * element_bytes) % 16)
        cuda_emu_kernel_error("%s: ldm %u is not a multiple of %zu elements (16 bytes of %zu-byte elements)", what, ldm,
                              16 / element_bytes, element_bytes);
    MemoryCall mine = {p, ldm, (int)layout};
    const MemoryCall* all = (const MemoryCall*)cuda_emu_warp_all_gather(what, &mine, sizeof(mine));
    for (int l = 0; l < 32; l++) {
        const MemoryCall& o = *(const MemoryCall*)((const char*)all + l * cuda_emu_gather_bytes);
        if (o.p != p || o.ldm != ldm || o.layout != (int)layout)
            cuda_emu_kernel_error("%s: lane %d passes pointer %p, ldm %u, %s but lane %d passes %p, ldm %u, %s (every lane "
                                  "of the warp must pass the same)", what, lane(), p, ldm, layout ? "col-major" : "row-major",
                                  l, o.p, o.ldm, o.layout ? "col-major" : "row-major");
    }
}

// this lane's share of the fragment's rows x cols matrix: x[i] (and its repeats) is element 32 i + lane
inline int element_index(int lane, int i) { return 32 * i + lane; }
template <int rows, int cols, typename Frag, typename Mem>
inline void load(Frag& f, const Mem* p, unsigned ldm, layout_t layout) {
    const int run = rows * cols / 32;
    for (int i = 0; i < Frag::num_storage_elements; i++) {
        int e = element_index(lane(), i % run);
        f.x[i] = p[offset(e / cols, e % cols, ldm, layout)];
    }
}
template <int rows, int cols, typename Frag>
inline void store(float* p, const Frag& f, unsigned ldm, layout_t layout) {
    const int run = rows * cols / 32;
    for (int i = 0; i < run; i++) {
        int e = element_index(lane(), i);
        p[offset(e / cols, e % cols, ldm, layout)] = f.x[i];
    }
}

// one lane's fragments of an mma_sync, as the lanes gather them
template <typename A, typename B, typename C> struct Operands {
    typename A::storage_element_type a[A::num_storage_elements];
    typename B::storage_element_type b[B::num_storage_elements];
    float c[C::num_storage_elements];
};
// element (row, col) of a rows x cols fragment, from the gathered shares of all lanes
template <int rows, int cols, typename Get> inline float element(int row, int col, Get get) {
    const int e = row * cols + col;
    return get(e % 32, e / 32);  // lane, index: element_index's inverse
}
}  // namespace cuda_emu_wmma

namespace nvcuda {
namespace wmma {

// ---------------------------------------------------------------- the warp-collective calls
template <typename Use, int m, int n, int k, typename T, typename Layout>
inline void load_matrix_sync(fragment<Use, m, n, k, T, Layout>& f,
                             const typename fragment<Use, m, n, k, T, Layout>::storage_element_type* p, unsigned ldm) {
    static_assert(!std::is_same<Use, accumulator>::value, "an accumulator's load_matrix_sync takes a layout_t");
    layout_t layout = std::is_same<Layout, row_major>::value ? mem_row_major : mem_col_major;
    cuda_emu_wmma::check_memory_call("load_matrix_sync", p, ldm, layout, sizeof(*p));
    typedef cuda_emu_wmma::Shape<Use, m, n, k> S;
    cuda_emu_wmma::load<S::rows, S::cols>(f, p, ldm, layout);
}

template <int m, int n, int k>
inline void load_matrix_sync(fragment<accumulator, m, n, k, float>& f, const float* p, unsigned ldm, layout_t layout) {
    cuda_emu_wmma::check_memory_call("load_matrix_sync", p, ldm, layout, sizeof(*p));
    cuda_emu_wmma::load<m, n>(f, p, ldm, layout);
}

template <int m, int n, int k>
inline void store_matrix_sync(float* p, const fragment<accumulator, m, n, k, float>& f, unsigned ldm, layout_t layout) {
    cuda_emu_wmma::check_memory_call("store_matrix_sync", p, ldm, layout, sizeof(*p));
    cuda_emu_wmma::store<m, n>(p, f, ldm, layout);
}

// D = A B + C: the lanes gather every lane's a, b and c, then each computes its own elements of d
template <int m, int n, int k, typename T, typename LA, typename LB>
inline void mma_sync(fragment<accumulator, m, n, k, float>& d, const fragment<matrix_a, m, n, k, T, LA>& a,
                     const fragment<matrix_b, m, n, k, T, LB>& b, const fragment<accumulator, m, n, k, float>& c) {
    typedef fragment<matrix_a, m, n, k, T, LA> A;
    typedef fragment<matrix_b, m, n, k, T, LB> B;
    typedef fragment<accumulator, m, n, k, float> C;
    typedef cuda_emu_wmma::Operands<A, B, C> Ops;
    static_assert(sizeof(Ops) <= cuda_emu_gather_bytes, "the gathered fragments fit the bytes a lane may leave");
    Ops mine;
    memcpy(mine.a, a.x, sizeof(mine.a));
    memcpy(mine.b, b.x, sizeof(mine.b));
    memcpy(mine.c, c.x, sizeof(mine.c));
    const char* all = (const char*)cuda_emu_warp_all_gather("mma_sync", &mine, sizeof(mine));
    auto ops = [&](int l) -> const Ops& { return *(const Ops*)(all + l * cuda_emu_gather_bytes); };
    auto a_at = [&](int l, int i) { return cuda_emu_wmma::input(ops(l).a[i]); };
    auto b_at = [&](int l, int i) { return cuda_emu_wmma::input(ops(l).b[i]); };
    const int run = m * n / 32;
    for (int i = 0; i < run; i++) {  // this lane's elements of d: element 32 i + lane, as for c
        int e = cuda_emu_wmma::element_index(cuda_emu_wmma::lane(), i), row = e / n, col = e % n;
        float sum = mine.c[i];
        for (int kk = 0; kk < k; kk++)
            sum += cuda_emu_wmma::element<m, k>(row, kk, a_at) * cuda_emu_wmma::element<k, n>(kk, col, b_at);
        d.x[i] = sum;
    }
}

}  // namespace wmma
}  // namespace nvcuda

// ---------------------------------------------------------------- PTX's mma.sync.m16n8k16
// The instruction beneath WMMA, whose fragment layout, unlike WMMA's, is documented (the PTX ISA,
// "Matrix Fragments for mma.m16n8k16 with floating point type"), so a kernel may keep its scores
// in registers and read them there (dev/attention_forward.cu version 7). On a GPU the kernel
// issues it as inline PTX; here it calls this function in every lane of the warp:
//     mma.sync.aligned.m16n8k16.row.col.f32.T.T.f32  d, a, b, c      (T: bf16 or f16)
// D (16 x 8, fp32) = A (16 x 16) B (16 x 8) + C. With g = lane / 4 and t = lane % 4, a lane holds
// in its 32-bit registers two 16-bit elements each, the lower-indexed one in the low half:
//     a[0]: A[g][2t, 2t+1]    a[1]: A[g+8][2t, 2t+1]    a[2]: A[g][2t+8, 2t+9]    a[3]: A[g+8][2t+8, 2t+9]
//     b[0]: B[2t, 2t+1][g]    b[1]: B[2t+8, 2t+9][g]
//     c[0], c[1]: C[g][2t, 2t+1]    c[2], c[3]: C[g+8][2t, 2t+1]    (d likewise; d may be c)
// Warp-collective as mma_sync above (every lane must reach it), and summed as it: C first, then k
// ascending, in fp32; a tensor core's order differs, so compare with a tolerance.
template <typename T>
inline void cuda_emu_mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                  const float (&c)[4]) {
    static_assert(std::is_same<T, __nv_bfloat16>::value || std::is_same<T, __half>::value, "bf16 or f16 inputs");
    struct Ops { uint32_t a[4], b[2]; };
    static_assert(sizeof(Ops) <= cuda_emu_gather_bytes, "the gathered registers fit the bytes a lane may leave");
    Ops mine;
    memcpy(mine.a, a, sizeof(mine.a));
    memcpy(mine.b, b, sizeof(mine.b));
    const char* all = (const char*)cuda_emu_warp_all_gather("mma.sync.m16n8k16", &mine, sizeof(mine));
    auto ops = [&](int l) -> const Ops& { return *(const Ops*)(all + l * cuda_emu_gather_bytes); };
    auto half = [](uint32_t r, int k) {  // element k % 2 of a register: the low half first
        uint16_t bits = (uint16_t)(k % 2 ? r >> 16 : r & 0xFFFFu);
        T x;
        memcpy(&x, &bits, 2);
        return cuda_emu_wmma::input(x);
    };
    auto A = [&](int row, int k) { return half(ops(row % 8 * 4 + k % 8 / 2).a[row / 8 + 2 * (k / 8)], k); };
    auto B = [&](int k, int col) { return half(ops(col * 4 + k % 8 / 2).b[k / 8], k); };
    int g = cuda_emu_wmma::lane() / 4, t = cuda_emu_wmma::lane() % 4;
    float out[4];
    for (int i = 0; i < 4; i++) {
        int row = g + 8 * (i / 2), col = 2 * t + i % 2;
        float sum = c[i];
        for (int k = 0; k < 16; k++) sum += A(row, k) * B(k, col);
        out[i] = sum;
    }
    memcpy(d, out, sizeof(out));
}

// ---------------------------------------------------------------- PTX's ldmatrix.m8n8.x4
//     ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16  {r0, r1, r2, r3}, [p]
// Four 8 x 8 matrices of 16-bit elements from shared memory, a row (16 bytes, 16-byte aligned)
// at the address lane 8 m + r gives for row r of matrix m. Lane l receives in r[m] two elements
// of matrix m, the lower-indexed in the low half: without .trans row l / 4, columns 2 (l % 4)
// and 2 (l % 4) + 1 (an mma A or B operand's layout); with .trans column l / 4, rows 2 (l % 4)
// and 2 (l % 4) + 1 (the matrix transposed). Warp-collective, as the instruction is.
inline void cuda_emu_ldmatrix_x4(uint32_t (&r)[4], const void* row, bool transposed) {
    if ((uintptr_t)row % 16)
        cuda_emu_kernel_error("ldmatrix: lane %d's row address %p is not 16-byte aligned", cuda_emu_wmma::lane(), row);
    const char* all = (const char*)cuda_emu_warp_all_gather("ldmatrix.m8n8.x4", &row, sizeof(row));
    auto element = [&](int m, int rr, int cc) {  // matrix m, row rr, column cc
        const uint16_t* p = *(const uint16_t* const*)(all + (8 * m + rr) * cuda_emu_gather_bytes);
        return (uint32_t)p[cc];
    };
    int l = cuda_emu_wmma::lane(), a = l / 4, b = 2 * (l % 4);
    for (int m = 0; m < 4; m++)
        r[m] = transposed ? element(m, b, a) | element(m, b + 1, a) << 16 : element(m, a, b) | element(m, a, b + 1) << 16;
}

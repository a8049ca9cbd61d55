/*
kernels/mma_m16n8k16.cuh: PTX's mma.sync.aligned.m16n8k16 for FlashAttention-2 in registers
(kernels/flash_attention_mma.cuh, the trainer's -fa 2, which the labs dev/attention_forward.cu
version 7 and dev/attention_backward.cu version 6 run), whose fragment layout
the PTX ISA documents, unlike WMMA's: D (16 x 8, fp32) = A (16 x 16) B (16 x 8) + C, A and B in
floatX (bf16 or fp16). With g = lane / 4 and t = lane % 4, a lane holds, two 16-bit elements to a
32-bit register, the lower-indexed one in the low half:
    a[0]: A[g][2t, 2t+1]    a[1]: A[g+8][2t, 2t+1]    a[2]: A[g][2t+8, 2t+9]    a[3]: A[g+8][2t+8, 2t+9]
    b[0]: B[2t, 2t+1][g]    b[1]: B[2t+8, 2t+9][g]
    c[0], c[1]: C[g][2t, 2t+1]    c[2], c[3]: C[g+8][2t, 2t+1]    (d likewise)
So an accumulator pair (columns 0-7 and 8-15 of one row block) is, packed to floatX, one A
operand: P = softmax(S) feeds P V without leaving the registers. On a GPU it is inline PTX
(sm_80 and later); the emulated build calls tests/emu/mma.h's cuda_emu_mma_m16n8k16, which holds
the same layout and is warp-collective as the instruction is. The B operands come from shared
memory by ldmatrix (four 8 x 8 blocks a warp-wide load, .trans where B is the tile as stored
rather than transposed), emulated likewise (cuda_emu_ldmatrix_x4): a few instructions where 32-
and 16-bit loads and packing took many (a reviewer's reading, not yet measured).
Applied in kernels/flash_attention_mma.cuh: flash_forward_mma_kernel, flash_dkv_mma_kernel, flash_dq_mma_kernel.
*/
#pragma once
// defines: mma_head_size, mma_m16n8k16, ldmatrix_x4, ldmatrix_x4_trans, pack_pair, MMA_TILE, MMA_PAD_BYTES, MMA_PAD,
//          mma_load_a, mma_load_tile, mma_rows_times_tile, mma_add_times_tile
#include <stdint.h>  // defines: uint32_t, uint16_t
#include <string.h>  // defines: memcpy
#include "common.cuh"  // defines: Packed128, load128, store128

// the head sizes the mma.sync kernels are compiled for (each one's registers hold a whole row)
inline bool mma_head_size(int hs) { return hs == 16 || hs == 32 || hs == 64 || hs == 128; }
#if !FLOATX_IS_FP32
#ifdef CUDA_EMULATION
#include <mma.h>  // defines: cuda_emu_mma_m16n8k16, cuda_emu_ldmatrix_x4 (tests/emu/mma.h)
#define mma_m16n8k16 cuda_emu_mma_m16n8k16<floatX>  // the documented layout, emulated
__device__ inline void ldmatrix_x4(uint32_t (&r)[4], const floatX* row) { cuda_emu_ldmatrix_x4(r, row, false); }
__device__ inline void ldmatrix_x4_trans(uint32_t (&r)[4], const floatX* row) { cuda_emu_ldmatrix_x4(r, row, true); }
#else
__device__ inline void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                    const float (&c)[4]) {
#if defined(ENABLE_FP16) && !defined(ENABLE_BF16)  // as precision.h picks floatX
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%10,%11,%12,%13};"
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%10,%11,%12,%13};"
#endif
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
                   "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}
// four 8 x 8 matrices from shared memory, lane 8 m + r giving row r of matrix m (16 bytes): r[m]
// holds, in lane l, row l / 4's columns 2 (l % 4), 2 (l % 4) + 1 (_trans: column l / 4's rows)
__device__ inline void ldmatrix_x4(uint32_t (&r)[4], const floatX* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"((uint32_t)__cvta_generic_to_shared(row)));
}
__device__ inline void ldmatrix_x4_trans(uint32_t (&r)[4], const floatX* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"((uint32_t)__cvta_generic_to_shared(row)));
}
#endif

// two floatX in one 32-bit register, lo in the low half (the lower-indexed element, as mma reads it)
__device__ inline uint32_t pack_pair(floatX lo, floatX hi) {
    uint16_t l, h;
    memcpy(&l, &lo, 2);
    memcpy(&h, &hi, 2);
    return (uint32_t)l | (uint32_t)h << 16;
}

// ---------------------------------------------------------------- a warp's 16 rows against a tile
// What FlashAttention-2's kernels do with the instruction: a warp owns 16 rows (queries,
// or keys) held as A fragments, and meets MMA_TILE rows of the other side staged in shared memory
#define MMA_TILE 64    // rows of the other side a tile
#define MMA_PAD_BYTES 16  // after each shared row, so that an ldmatrix's 8 rows start in different banks
#define MMA_PAD (MMA_PAD_BYTES / 2)  // the same in elements (16-bit)

// 16 rows from row `first` (row stride `stride` elements: 3C in qkv, C in dout) as A fragments,
// straight from global memory; rows past T are zeros
template <int HS>
__device__ inline void mma_load_a(uint32_t (&a)[HS / 16][4], const floatX* rows, size_t stride, int first, int T, int g,
                               int t) {
    #pragma unroll
    for (int half = 0; half < 2; half++) {
        int row = first + g + 8 * half;
        const floatX* p = rows + (size_t)row * stride + 2 * t;
        #pragma unroll
        for (int c = 0; c < HS / 16; c++) {
            a[c][half] = row < T ? *(const uint32_t*)(p + 16 * c) : 0u;
            a[c][half + 2] = row < T ? *(const uint32_t*)(p + 16 * c + 8) : 0u;
        }
    }
}
// MMA_TILE rows from `first` (row stride `stride` elements) into a shared tile of rows HS + MMA_PAD; zeros past T
template <int HS>
__device__ inline void mma_load_tile(floatX* tile, const floatX* rows, size_t stride, int first, int T) {
    constexpr int PACKS = HS / 8;
    for (int e = threadIdx.x; e < MMA_TILE * PACKS; e += blockDim.x) {
        int row = e / PACKS, i = e % PACKS * 8;
        Packed128<floatX> pack = {};
        if (first + row < T) pack = load128(rows + (size_t)(first + row) * stride + i);
        store128(tile + row * (HS + MMA_PAD) + i, pack);
    }
}
// acc[n] (16 own rows x 8 columns n) = a (16 x HS) times the tile's rows 8n .. 8n + 7 transposed.
// B[k][n] is the tile's row n, channel k: an 8 x 8 block of rows as stored is b's layout, so
// one ldmatrix_x4 brings b for two column groups n, n + 1 and channels 16c .. 16c + 15 (lane L
// points at row 8 (n + L / 16) + L % 8, channels 16c + 8 (L / 8 % 2))
template <int HS>
__device__ inline void mma_rows_times_tile(float (&acc)[MMA_TILE / 8][4], const uint32_t (&a)[HS / 16][4],
                                        const floatX* tile, int g, int t) {
    int lane = 4 * g + t;
    const floatX* mine = tile + (lane / 16 * 8 + lane % 8) * (HS + MMA_PAD) + lane / 8 % 2 * 8;
    #pragma unroll
    for (int n = 0; n < MMA_TILE / 8; n += 2) {
        #pragma unroll
        for (int i = 0; i < 4; i++) acc[n][i] = acc[n + 1][i] = 0.0f;
        #pragma unroll
        for (int c = 0; c < HS / 16; c++) {
            uint32_t b[4];  // n: b[0], b[1]; n + 1: b[2], b[3]
            ldmatrix_x4(b, mine + 8 * n * (HS + MMA_PAD) + 16 * c);
            uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
            mma_m16n8k16(acc[n], a[c], b0, acc[n]);
            mma_m16n8k16(acc[n + 1], a[c], b1, acc[n + 1]);
        }
    }
}
// out (16 own rows x HS) += x (16 x MMA_TILE, accumulators rounded to floatX) times the tile (MMA_TILE x HS).
// B[k][n] is the tile's row k, channel n: an 8 x 8 block transposed is b's layout, so one
// ldmatrix_x4_trans brings b for rows 16c .. 16c + 15 and channel groups d, d + 1 (lane L points
// at row 16c + 8 (L / 8 % 2) + L % 8, channels 8 (d + L / 16))
template <int HS>
__device__ inline void mma_add_times_tile(float (&out)[HS / 8][4], const float (&x)[MMA_TILE / 8][4],
                                          const floatX* tile, int g, int t) {
    int lane = 4 * g + t;
    const floatX* mine = tile + (lane / 8 % 2 * 8 + lane % 8) * (HS + MMA_PAD) + lane / 16 * 8;
    #pragma unroll
    for (int c = 0; c < MMA_TILE / 16; c++) {
        const float* lo = x[2 * c];
        const float* hi = x[2 * c + 1];
        uint32_t a[4] = {pack_pair(from_float(lo[0]), from_float(lo[1])),
                         pack_pair(from_float(lo[2]), from_float(lo[3])),
                         pack_pair(from_float(hi[0]), from_float(hi[1])),
                         pack_pair(from_float(hi[2]), from_float(hi[3]))};
        #pragma unroll
        for (int d = 0; d < HS / 8; d += 2) {
            uint32_t b[4];  // d: b[0], b[1]; d + 1: b[2], b[3]
            ldmatrix_x4_trans(b, mine + 16 * c * (HS + MMA_PAD) + 8 * d);
            uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
            mma_m16n8k16(out[d], a, b0, out[d]);
            mma_m16n8k16(out[d + 1], a, b1, out[d + 1]);
        }
    }
}
#endif

/*
dev/mma_m16n8k16.h: PTX's mma.sync.aligned.m16n8k16 for the labs' FlashAttention-2 versions
(dev/attention_forward.cu version 7, dev/attention_backward.cu version 6), whose fragment layout
the PTX ISA documents, unlike WMMA's: D (16 x 8, fp32) = A (16 x 16) B (16 x 8) + C, A and B in
floatX (bf16 or fp16). With g = lane / 4 and t = lane % 4, a lane holds, two 16-bit elements to a
32-bit register, the lower-indexed one in the low half:
    a[0]: A[g][2t, 2t+1]    a[1]: A[g+8][2t, 2t+1]    a[2]: A[g][2t+8, 2t+9]    a[3]: A[g+8][2t+8, 2t+9]
    b[0]: B[2t, 2t+1][g]    b[1]: B[2t+8, 2t+9][g]
    c[0], c[1]: C[g][2t, 2t+1]    c[2], c[3]: C[g+8][2t, 2t+1]    (d likewise)
So an accumulator pair (columns 0-7 and 8-15 of one row block) is, packed to floatX, one A
operand: P = softmax(S) feeds P V without leaving the registers. On a GPU it is inline PTX
(sm_80 and later); the emulated build calls tests/emu/mma.h's cuda_emu_mma_m16n8k16, which holds
the same layout and is warp-collective as the instruction is.
*/
#pragma once
// defines: mma_m16n8k16, pack_pair, shared_pair
#include <stdint.h>  // defines: uint32_t, uint16_t
#include <string.h>  // defines: memcpy
#if !FLOATX_IS_FP32
#ifdef CUDA_EMULATION
#include <mma.h>  // defines: cuda_emu_mma_m16n8k16 (tests/emu/mma.h)
#define mma_m16n8k16 cuda_emu_mma_m16n8k16<floatX>  // the documented layout, emulated
#else
__device__ inline void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], const float (&c)[4]) {
#if defined(ENABLE_FP16)
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
#endif

// two floatX in one 32-bit register, lo in the low half (the lower-indexed element, as mma reads it)
__device__ inline uint32_t pack_pair(floatX lo, floatX hi) {
    uint16_t l, h;
    memcpy(&l, &lo, 2);
    memcpy(&h, &hi, 2);
    return (uint32_t)l | (uint32_t)h << 16;
}
__device__ inline uint32_t shared_pair(const floatX* p) { return *(const uint32_t*)p; }  // p even: 4-byte aligned
#endif

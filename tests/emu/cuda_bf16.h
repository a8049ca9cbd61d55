// tests/emu/cuda_bf16.h: bfloat16 as CUDA's cuda_bf16.h defines it for host code: a 16-bit
// class, built from and read as float with round to nearest even (emulated CUDA build)
#pragma once
#include <stdint.h>  // defines: uint32_t
#include <string.h>  // defines: memcpy
#include "cuda_emu.h"

struct __nv_bfloat16 {
    unsigned short __x;
    __nv_bfloat16() = default;
    __nv_bfloat16(float f);
    operator float() const;
};
typedef __nv_bfloat16 nv_bfloat16;
inline float __bfloat162float(__nv_bfloat16 h) {
    uint32_t u = (uint32_t)h.__x << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    __nv_bfloat16 h;
    if ((u & 0x7fffffffu) > 0x7f800000u) { h.__x = 0x7fff; return h; }  // NaN: CUDA's canonical NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    h.__x = (unsigned short)(u >> 16);
    return h;
}
inline __nv_bfloat16::__nv_bfloat16(float f) { __x = __float2bfloat16_rn(f).__x; }
inline __nv_bfloat16::operator float() const { return __bfloat162float(*this); }

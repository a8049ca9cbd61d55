// tests/emu/cuda_fp16.h: IEEE half precision as CUDA's cuda_fp16.h defines it for host code:
// a 16-bit class, converted with round to nearest even (GCC's _Float16 does the rounding)
#pragma once
#include <string.h>  // defines: memcpy
#include "cuda_emu.h"

struct __half {
    unsigned short __x;
    __half() = default;
    __half(float f);
    operator float() const;
};
typedef __half half;
inline float __half2float(__half h) {
    _Float16 v;
    memcpy(&v, &h.__x, 2);
    return (float)v;
}
inline __half __float2half_rn(float f) {
    _Float16 v = (_Float16)f;
    __half h;
    memcpy(&h.__x, &v, 2);
    return h;
}
inline __half::__half(float f) { __x = __float2half_rn(f).__x; }
inline __half::operator float() const { return __half2float(*this); }

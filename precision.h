/*
precision.h: the storage type of parameters, gradients and activations, and how
fp32 values are rounded into it.

Mixed precision is a build choice, as in llm.c:
    make PRECISION=FP32   floatX = float
    make PRECISION=BF16   floatX = bfloat16 (8 exponent bits, 7 mantissa bits)
    make PRECISION=FP16   floatX = half     (5 exponent bits, 10 mantissa bits)
Arithmetic is always fp32: every op loads with to_float() and stores with
from_float() (round to nearest even), so floatX changes storage and rounding, never
the math. The CPU build stores bf16 and fp16 bit for bit as the GPU does (a uint16
bf16 with the same rounding; GCC's _Float16), so mixed-precision effects, fp16
overflow included, are real in CI.

The optimizer keeps an fp32 master copy of the parameters when floatX is 16-bit.
Writing the updated master back into floatX uses stochastic rounding: round up with
probability equal to the distance from the lower neighbour, so the rounding is
unbiased on average and small updates are not lost. The random bits come from a
counter hash of (seed, step, element), so a run is reproducible and every layout
rounds each parameter the same way. Read round_stochastic last: it builds on the rest.

Applied everywhere a floatX is: the buffers of zero.h (parameters, gradients) and of
train_gpt.cu (activations); the fp32 master and the rounding in adamw.h: adamw_update;
model_file.h: read_model_file and gpt2_write_file (bf16 files); comm.h: the 16-bit sum.
*/
#pragma once
// defines: floatX, to_float, from_float, round_stochastic, PRECISION_NAME, Precision, PRECISION, FLOATX_IS_FP32,
//          CUBLAS_FLOATX, bf16_bits_from_float, float_from_bf16_bits, bf16
#include <stdint.h>  // defines: uint16_t, uint32_t, uint64_t
#include <string.h>  // defines: memcpy
#include <math.h>    // defines: isfinite, fabsf
#include "random.h"  // defines: HOST_DEVICE, random_u32 (the bits of stochastic rounding)


// bfloat16 is the top half of an fp32: the one converter of the CPU build's floatX and of
// llm.c's bf16 model files (version 5). Round to nearest even, as __float2bfloat16_rn.
inline uint16_t bf16_bits_from_float(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);  // NaN stays NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
inline float float_from_bf16_bits(uint16_t bits) {
    uint32_t u = (uint32_t)bits << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// the build's precision as a value, for code that must ask (file versions, loss-scaling defaults)
enum Precision { PRECISION_FP32, PRECISION_BF16, PRECISION_FP16 };

#if defined(ENABLE_BF16)
  #define PRECISION_NAME "bf16"
  static const Precision PRECISION = PRECISION_BF16;
  #define FLOATX_IS_FP32 0
  #ifdef __CUDACC__
    #include <cuda_bf16.h>  // defines: __nv_bfloat16
    typedef __nv_bfloat16 floatX;
    #define CUBLAS_FLOATX CUDA_R_16BF
    HOST_DEVICE inline float to_float(floatX x) { return __bfloat162float(x); }
    HOST_DEVICE inline floatX from_float(float x) { return __float2bfloat16_rn(x); }
  #else
    struct bf16 { uint16_t bits; };  // bfloat16: the top half of an fp32
    typedef bf16 floatX;
    inline float to_float(floatX x) { return float_from_bf16_bits(x.bits); }
    inline floatX from_float(float f) { return floatX{bf16_bits_from_float(f)}; }
  #endif
#elif defined(ENABLE_FP16)
  #define PRECISION_NAME "fp16"
  static const Precision PRECISION = PRECISION_FP16;
  #define FLOATX_IS_FP32 0
  #ifdef __CUDACC__
    #include <cuda_fp16.h>  // defines: __half
    typedef __half floatX;
    #define CUBLAS_FLOATX CUDA_R_16F
    HOST_DEVICE inline float to_float(floatX x) { return __half2float(x); }
    HOST_DEVICE inline floatX from_float(float x) { return __float2half_rn(x); }
  #else
    typedef _Float16 floatX;  // IEEE binary16; GCC converts with round to nearest even
    inline float to_float(floatX x) { return (float)x; }
    inline floatX from_float(float x) { return (floatX)x; }
  #endif
#else
  #define PRECISION_NAME "fp32"
  static const Precision PRECISION = PRECISION_FP32;
  #define FLOATX_IS_FP32 1
  typedef float floatX;
  #define CUBLAS_FLOATX CUDA_R_32F
  HOST_DEVICE inline float to_float(floatX x) { return x; }
  HOST_DEVICE inline floatX from_float(float x) { return x; }
#endif

#if !FLOATX_IS_FP32
// fp32 buffers (master weights, fp32 gradient accumulation) go through the same calls
HOST_DEVICE inline float to_float(float x) { return x; }
#endif

// x rounded to one of its two floatX neighbours, the farther one with probability
// (distance to the nearer) / (gap between them); exact and non-finite values round to nearest
HOST_DEVICE inline floatX round_stochastic(float x, uint32_t random) {
#if FLOATX_IS_FP32
    (void)random;
    return x;
#else
    floatX nearest = from_float(x);
    float n = to_float(nearest);
    if (n == x || !isfinite(n) || !isfinite(x)) return nearest;
    uint16_t bits;  // sign-magnitude: +1 on the bits moves one step away from zero
    memcpy(&bits, &nearest, 2);
    if (n == 0.0f) bits = (uint16_t)((x < 0.0f ? 0x8000u : 0u) | 1u);
    else bits = (uint16_t)(fabsf(x) > fabsf(n) ? bits + 1 : bits - 1);
    floatX other;
    memcpy((void*)&other, &bits, 2);  // (void*): floatX may be a class (__nv_bfloat16)
    float p = (x - n) / (to_float(other) - n);  // in (0, 1/2]
    return (float)(random >> 8) * (1.0f / 16777216.0f) < p ? other : nearest;
#endif
}

/*
precision.h: the storage type of parameters, gradients and activations.

Why a type alias at all: mixed precision is a build choice (as in llm.c), so every
buffer that would become bf16 or fp16 is declared `floatX` from the first line of
the trainer. Arithmetic is always done in fp32: kernels and host twins load with
to_float() and store with from_float(), so changing floatX changes storage and
rounding, never the math.

    make PRECISION=FP32   floatX = float      (the default of this build stage)

Read to_float/from_float first: they are the only two places precision enters.
*/
#pragma once
// defines: floatX, to_float, from_float, PRECISION_NAME, HOST_DEVICE

#ifdef __CUDACC__
#define HOST_DEVICE __host__ __device__
#else
#define HOST_DEVICE
#endif

#if defined(ENABLE_BF16) || defined(ENABLE_FP16)
#error "BF16 and FP16 storage arrive with the mixed-precision issue; build with PRECISION=FP32"
#else
typedef float floatX;
#define PRECISION_NAME "fp32"
#endif

HOST_DEVICE inline float to_float(floatX x) { return (float)x; }
HOST_DEVICE inline floatX from_float(float x) { return (floatX)x; }

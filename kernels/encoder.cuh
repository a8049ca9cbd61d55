/*
kernels/encoder.cuh: the input embedding, token row of wte plus position row of wpe.

    forward:  out[b,t,:] = wte[tok[b,t],:] + wpe[t,:]
    backward: dwte[tok[b,t],:] += dout[b,t,:];  dwpe[t,:] += dout[b,t,:]

The backward is a scatter-add: two positions holding the same token add into the
same wte row. The GPU kernel gives each thread one channel c and walks all tokens
in order, so no two threads touch the same address and the sum order is fixed:
deterministic (needed for bit-exact resume) at the price of parallelism C.

Under tensor parallelism (tp.h) a rank holds wte rows [vocab_begin, vocab_begin +
rows) only: a token outside them contributes zero (forward) and no gradient
(backward), and the ranks' outputs are summed. wpe may then be NULL in the forward,
so that only one rank adds the positions and the sum holds them once. Every value
is exactly what one rank holding all of wte computes: one addition, and zeros.
*/
#pragma once
// defines: VocabRange, encoder_forward, encoder_backward
#include "common.cuh"

// the rows of wte one rank holds: [begin, begin + rows)
struct VocabRange { int begin, rows; };

// element (bt, c) of the forward: shared by the host twin and the kernel
HOST_DEVICE inline floatX encoder_element(size_t bt, int t, int c, const int* tokens, const floatX* wte,
                                          const floatX* wpe, int C, VocabRange vocab) {
    int row = tokens[bt] - vocab.begin;
    float token = row >= 0 && row < vocab.rows ? to_float(wte[(size_t)row * C + c]) : 0.0f;
    float position = wpe ? to_float(wpe[(size_t)t * C + c]) : 0.0f;
    return from_float(token + position);
}

inline void encoder_forward_host(floatX* out,                            // (B,T,C)
                                 const int* tokens,                      // (B,T)
                                 const floatX* wte, const floatX* wpe,   // (rows,C), (maxT,C) or NULL
                                 int B, int T, int C, VocabRange vocab) {
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++)
                out[((size_t)b * T + t) * C + c] = encoder_element((size_t)b * T + t, t, c, tokens, wte, wpe, C, vocab);
}

// channel c of the scatter-add, tokens in order: shared by the host twin and the kernel
HOST_DEVICE inline void encoder_backward_channel(int c, floatX* dwte, floatX* dwpe, const floatX* dout,
                                                 const int* tokens, int B, int T, int C, VocabRange vocab) {
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            float d = to_float(dout[((size_t)b * T + t) * C + c]);
            int row = tokens[b * T + t] - vocab.begin;
            if (row >= 0 && row < vocab.rows) {
                floatX* w = dwte + (size_t)row * C + c;
                *w = from_float(to_float(*w) + d);
            }
            floatX* p = dwpe + (size_t)t * C + c;
            *p = from_float(to_float(*p) + d);
        }
    }
}

inline void encoder_backward_host(floatX* dwte, floatX* dwpe,   // (rows,C), (maxT,C), accumulated
                                  const floatX* dout,           // (B,T,C)
                                  const int* tokens, int B, int T, int C, VocabRange vocab) {
    #pragma omp parallel for
    for (int c = 0; c < C; c++) encoder_backward_channel(c, dwte, dwpe, dout, tokens, B, T, C, vocab);
}

#ifdef __CUDACC__
__global__ void encoder_forward_kernel(floatX* out, const int* tokens, const floatX* wte, const floatX* wpe,
                                       int B, int T, int C, VocabRange vocab) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * T * C) return;
    size_t bt = idx / C;
    out[idx] = encoder_element(bt, bt % T, idx % C, tokens, wte, wpe, C, vocab);
}

__global__ void encoder_backward_kernel(floatX* dwte, floatX* dwpe, const floatX* dout, const int* tokens,
                                        int B, int T, int C, VocabRange vocab) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < C) encoder_backward_channel(c, dwte, dwpe, dout, tokens, B, T, C, vocab);
}

inline void encoder_forward(floatX* out, const int* tokens, const floatX* wte, const floatX* wpe, int B, int T, int C,
                            VocabRange vocab) {
    const int block = 256;
    encoder_forward_kernel<<<ceil_div((size_t)B * T * C, block), block>>>(out, tokens, wte, wpe, B, T, C, vocab);
    launchCheck();
}
inline void encoder_backward(floatX* dwte, floatX* dwpe, const floatX* dout, const int* tokens, int B, int T, int C,
                             VocabRange vocab) {
    const int block = 64;
    encoder_backward_kernel<<<ceil_div(C, block), block>>>(dwte, dwpe, dout, tokens, B, T, C, vocab);
    launchCheck();
}
#else
inline void encoder_forward(floatX* out, const int* tokens, const floatX* wte, const floatX* wpe, int B, int T, int C,
                            VocabRange vocab) {
    encoder_forward_host(out, tokens, wte, wpe, B, T, C, vocab);
}
inline void encoder_backward(floatX* dwte, floatX* dwpe, const floatX* dout, const int* tokens, int B, int T, int C,
                             VocabRange vocab) {
    encoder_backward_host(dwte, dwpe, dout, tokens, B, T, C, vocab);
}
#endif

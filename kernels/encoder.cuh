/*
kernels/encoder.cuh: the input embedding, token row of wte plus position row of wpe.

    forward:  out[b,t,:] = wte[tok[b,t],:] + wpe[t,:]
    backward: dwte[tok[b,t],:] += dout[b,t,:];  dwpe[t,:] += dout[b,t,:]

The backward is a scatter-add: two positions holding the same token add into the
same wte row. The GPU kernel gives each thread one channel c and walks all tokens
in order, so no two threads touch the same address and the sum order is fixed:
deterministic (needed for bit-exact resume) at the price of parallelism C.
*/
#pragma once
// defines: encoder_forward, encoder_backward
#include "common.cuh"

inline void encoder_forward_host(floatX* out,                            // (B,T,C)
                                 const int* tokens,                      // (B,T)
                                 const floatX* wte, const floatX* wpe,   // (Vp,C), (maxT,C)
                                 int B, int T, int C) {
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            floatX* out_bt = out + ((size_t)b * T + t) * C;
            const floatX* wte_row = wte + (size_t)tokens[b * T + t] * C;
            const floatX* wpe_row = wpe + (size_t)t * C;
            for (int c = 0; c < C; c++) out_bt[c] = from_float(to_float(wte_row[c]) + to_float(wpe_row[c]));
        }
    }
}

// channel c of the scatter-add, tokens in order: shared by the host twin and the kernel
HOST_DEVICE inline void encoder_backward_channel(int c, floatX* dwte, floatX* dwpe, const floatX* dout,
                                                 const int* tokens, int B, int T, int C) {
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            float d = to_float(dout[((size_t)b * T + t) * C + c]);
            floatX* w = dwte + (size_t)tokens[b * T + t] * C + c;
            floatX* p = dwpe + (size_t)t * C + c;
            *w = from_float(to_float(*w) + d);
            *p = from_float(to_float(*p) + d);
        }
    }
}

inline void encoder_backward_host(floatX* dwte, floatX* dwpe,   // (Vp,C), (maxT,C), accumulated
                                  const floatX* dout,           // (B,T,C)
                                  const int* tokens, int B, int T, int C) {
    #pragma omp parallel for
    for (int c = 0; c < C; c++) encoder_backward_channel(c, dwte, dwpe, dout, tokens, B, T, C);
}

#ifdef __CUDACC__
__global__ void encoder_forward_kernel(floatX* out, const int* tokens, const floatX* wte, const floatX* wpe,
                                       int B, int T, int C) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * T * C) return;
    int c = idx % C;
    size_t bt = idx / C;
    int t = bt % T;
    out[idx] = from_float(to_float(wte[(size_t)tokens[bt] * C + c]) + to_float(wpe[(size_t)t * C + c]));
}

__global__ void encoder_backward_kernel(floatX* dwte, floatX* dwpe, const floatX* dout, const int* tokens,
                                        int B, int T, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < C) encoder_backward_channel(c, dwte, dwpe, dout, tokens, B, T, C);
}

inline void encoder_forward(floatX* out, const int* tokens, const floatX* wte, const floatX* wpe, int B, int T, int C) {
    const int block = 256;
    encoder_forward_kernel<<<ceil_div((size_t)B * T * C, block), block>>>(out, tokens, wte, wpe, B, T, C);
    launchCheck();
}
inline void encoder_backward(floatX* dwte, floatX* dwpe, const floatX* dout, const int* tokens, int B, int T, int C) {
    const int block = 64;
    encoder_backward_kernel<<<ceil_div(C, block), block>>>(dwte, dwpe, dout, tokens, B, T, C);
    launchCheck();
}
#else
inline void encoder_forward(floatX* out, const int* tokens, const floatX* wte, const floatX* wpe, int B, int T, int C) {
    encoder_forward_host(out, tokens, wte, wpe, B, T, C);
}
inline void encoder_backward(floatX* dwte, floatX* dwpe, const floatX* dout, const int* tokens, int B, int T, int C) {
    encoder_backward_host(dwte, dwpe, dout, tokens, B, T, C);
}
#endif

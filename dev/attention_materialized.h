/*
dev/attention_materialized.h: causal self-attention that writes the (B,NH,T,T) probabilities,
softmax(q k^T / sqrt(hs)) v: the trainer's attention until flash attention replaced it
(kernels/attention.cuh), kept as the first versions of the attention labs and their reference.

qkv rows are [q (C) | k (C) | v (C)], head h at channels h*hs ..; att (B,NH,T,T) is kept for the backward.
Host twin: loops over (b, h, t); the backward sums each head's dq, dk, dv in fp32 and stores them
once, and uses the O(T) softmax identity dpre = att * (datt - sum(att * datt)) instead of the Jacobian.
GPU: llm.c's first fast version: permute q, k, v to (B,NH,T,hs), two strided-batched GEMMs
around a causal softmax kernel, permute back. Its scratch holds the permuted tensors and the
(B,NH,T,T) pre-softmax / gradient matrix: 7 B T C + B NH T T floatX.
Applied in dev/attention_forward.cu (versions 1, 2) and dev/attention_backward.cu (versions 1, 2).
*/
#pragma once
// defines: materialized_forward, materialized_backward, materialized_scratch_elements,
//          materialized_backward_head, materialized_backward_host, materialized_forward_host, materialized_forward_row,
//          materialized_head_scratch_floats, causal_softmax_backward_kernel, causal_softmax_kernel,
//          causal_softmax_row, heads_to_rows_kernel, rows_to_heads_kernel
#include <math.h>  // defines: expf, sqrtf
#include <vector>  // defines: std::vector
#include "../kernels/common.cuh"
#include "../kernels/matmul.cuh"  // defines: gemm_batched

// floatX elements of scratch the GPU path needs (the host twin needs none)
inline size_t materialized_scratch_elements(int B, int T, int C, int NH) {
    return 7 * (size_t)B * T * C + (size_t)B * NH * T * T;
}

// row t of a (T,T) score matrix, in place: the softmax over t2 <= t, zero beyond (the causal
// mask). The host twin's softmax (the GPU's is a warp per row, below)
HOST_DEVICE inline void causal_softmax_row(floatX* row, int t, int T) {
    float maxval = -INFINITY, sum = 0.0f;
    #pragma omp simd reduction(max : maxval)
    for (int t2 = 0; t2 <= t; t2++) maxval = fmaxf(maxval, to_float(row[t2]));
    #pragma omp simd reduction(+ : sum)
    for (int t2 = 0; t2 <= t; t2++) sum += expf(to_float(row[t2]) - maxval);
    for (int t2 = 0; t2 < T; t2++) row[t2] = from_float(expf(t2 <= t ? to_float(row[t2]) - maxval : -INFINITY) / sum);
}

// query row t of head h in sequence b: scores, softmax, output. The host twin's loop body and
// the kernel of dev/attention_forward.cu's version 1 (a thread per row)
HOST_DEVICE inline void materialized_forward_row(int b, int h, int t, floatX* out, floatX* att, const floatX* qkv,
                                              int T, int C, int NH) {
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    const floatX* q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
    floatX* att_row = att + (((size_t)b * NH + h) * T + t) * T;
    for (int t2 = 0; t2 <= t; t2++) {
        const floatX* k = qkv + ((size_t)b * T + t2) * 3 * C + C + h * hs;
        float dot = 0.0f;
        for (int i = 0; i < hs; i++) dot += to_float(q[i]) * to_float(k[i]);
        att_row[t2] = from_float(dot * scale);
    }
    causal_softmax_row(att_row, t, T);
    floatX* out_row = out + ((size_t)b * T + t) * C + h * hs;
    for (int i = 0; i < hs; i++) {
        float y = 0.0f;
        for (int t2 = 0; t2 <= t; t2++) y += to_float(att_row[t2]) * to_float(qkv[((size_t)b * T + t2) * 3 * C + 2 * C + h * hs + i]);
        out_row[i] = from_float(y);
    }
}

inline void materialized_forward_host(floatX* out,         // (B,T,C)
                                   floatX* att,         // (B,NH,T,T)
                                   const floatX* qkv,   // (B,T,3C)
                                   int B, int T, int C, int NH) {
    #pragma omp parallel for collapse(3)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) materialized_forward_row(b, h, t, out, att, qkv, T, C, NH);
}

// the fp32 scratch materialized_backward_head needs for one head: dq, dk, dv (T,hs) each, datt (T)
HOST_DEVICE inline size_t materialized_head_scratch_floats(int T, int C, int NH) { return (size_t)3 * T * (C / NH) + T; }

// head h of sequence b of the backward: each (b,h) owns its slice of dqkv (overwritten), so
// heads run in parallel without races. dq, dk, dv are summed in fp32 in `acc`
// (materialized_head_scratch_floats) and stored once. The host twin's loop body, and the kernel
// of dev/attention_backward.cu's version 1 (a thread per head)
HOST_DEVICE inline void materialized_backward_head(int b, int h, floatX* dqkv, const floatX* dout, const floatX* qkv,
                                                const floatX* att, float* acc, int T, int C, int NH) {
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    float *dq_all = acc, *dk_all = acc + (size_t)T * hs, *dv_all = acc + (size_t)2 * T * hs;
    float* datt = acc + (size_t)3 * T * hs;
    for (size_t i = 0; i < (size_t)3 * T * hs; i++) acc[i] = 0.0f;
    for (int t = 0; t < T; t++) {
        const floatX* att_row = att + (((size_t)b * NH + h) * T + t) * T;
        const floatX* dy = dout + ((size_t)b * T + t) * C + h * hs;
        const floatX* q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
        float* dq = dq_all + (size_t)t * hs;
        float att_dot_datt = 0.0f;
        for (int t2 = 0; t2 <= t; t2++) {  // through y = att @ v
            const floatX* v = qkv + ((size_t)b * T + t2) * 3 * C + 2 * C + h * hs;
            float* dv = dv_all + (size_t)t2 * hs;
            float d = 0.0f;
            for (int i = 0; i < hs; i++) {
                d += to_float(dy[i]) * to_float(v[i]);
                dv[i] += to_float(att_row[t2]) * to_float(dy[i]);
            }
            datt[t2] = d;
            att_dot_datt += to_float(att_row[t2]) * d;
        }
        for (int t2 = 0; t2 <= t; t2++) {  // through the softmax, then q k^T * scale
            float dpre = to_float(att_row[t2]) * (datt[t2] - att_dot_datt) * scale;
            const floatX* k = qkv + ((size_t)b * T + t2) * 3 * C + C + h * hs;
            float* dk = dk_all + (size_t)t2 * hs;
            for (int i = 0; i < hs; i++) {
                dq[i] += dpre * to_float(k[i]);
                dk[i] += dpre * to_float(q[i]);
            }
        }
    }
    for (int t = 0; t < T; t++)
        for (int part = 0; part < 3; part++)
            for (int i = 0; i < hs; i++)
                dqkv[((size_t)b * T + t) * 3 * C + part * C + h * hs + i] = from_float(acc[((size_t)part * T + t) * hs + i]);
}

inline void materialized_backward_host(floatX* dqkv,          // (B,T,3C) overwritten
                                    const floatX* dout,    // (B,T,C)
                                    const floatX* qkv,     // (B,T,3C)
                                    const floatX* att,     // (B,NH,T,T)
                                    int B, int T, int C, int NH) {
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            std::vector<float> acc(materialized_head_scratch_floats(T, C, NH));
            materialized_backward_head(b, h, dqkv, dout, qkv, att, acc.data(), T, C, NH);
        }
}

#ifdef __CUDACC__
// rows (B,T, row_stride) with the heads of one part at column offset 0  <->  heads (B,NH,T,hs)
__global__ void rows_to_heads_kernel(floatX* heads, const floatX* rows, int row_stride, int B, int T, int NH, int hs) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;  // index into heads
    if (idx >= (size_t)B * NH * T * hs) return;
    int i = idx % hs; size_t r = idx / hs;
    int t = r % T; r /= T;
    int h = r % NH; int b = r / NH;
    heads[idx] = rows[((size_t)b * T + t) * row_stride + h * hs + i];
}
__global__ void heads_to_rows_kernel(floatX* rows, int row_stride, const floatX* heads, int B, int T, int NH, int hs) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * NH * T * hs) return;
    int i = idx % hs; size_t r = idx / hs;
    int t = r % T; r /= T;
    int h = r % NH; int b = r / NH;
    rows[((size_t)b * T + t) * row_stride + h * hs + i] = heads[idx];
}
// one warp per row (b,h,t): att = softmax(preatt) over t2 <= t, zero beyond. preatt is already
// scaled by 1/sqrt(hs) (in the GEMM), as the host twin stores it: unscaled scores would sit
// sqrt(hs) = 8x closer to fp16's largest value
__global__ void causal_softmax_kernel(floatX* att, const floatX* preatt, int rows, int T) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows) return;
    int t = row % T;
    const floatX* x = preatt + (size_t)row * T;
    floatX* y = att + (size_t)row * T;
    float maxval = -INFINITY;
    for (int t2 = lane; t2 <= t; t2 += 32) maxval = fmaxf(maxval, to_float(x[t2]));
    for (int o = 16; o > 0; o /= 2) maxval = fmaxf(maxval, __shfl_xor_sync(0xffffffff, maxval, o));
    float sum = 0.0f;
    for (int t2 = lane; t2 <= t; t2 += 32) sum += expf(to_float(x[t2]) - maxval);
    for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffff, sum, o);
    for (int t2 = lane; t2 < T; t2 += 32) y[t2] = from_float(t2 <= t ? expf(to_float(x[t2]) - maxval) / sum : 0.0f);
}
// in place: datt -> dpreatt = scale * att * (datt - sum(att * datt)), zero beyond t
__global__ void causal_softmax_backward_kernel(floatX* datt, const floatX* att, float scale, int rows, int T) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows) return;
    int t = row % T;
    floatX* d = datt + (size_t)row * T;
    const floatX* a = att + (size_t)row * T;
    float dot = 0.0f;
    for (int t2 = lane; t2 <= t; t2 += 32) dot += to_float(a[t2]) * to_float(d[t2]);
    for (int o = 16; o > 0; o /= 2) dot += __shfl_xor_sync(0xffffffff, dot, o);
    __syncwarp();
    for (int t2 = lane; t2 < T; t2 += 32) d[t2] = from_float(t2 <= t ? scale * to_float(a[t2]) * (to_float(d[t2]) - dot) : 0.0f);
}

inline void materialized_forward(floatX* out, floatX* att, const floatX* qkv, floatX* scratch, int B, int T, int C, int NH) {
    int hs = C / NH;
    size_t n = (size_t)B * T * C;
    if (n == 0) return;  // a grid of 0 blocks is a launch error
    floatX *q = scratch, *k = q + n, *v = k + n, *y = v + n, *preatt = scratch + 7 * n;
    int grid = ceil_div(n, 256);
    rows_to_heads_kernel<<<grid, 256>>>(q, qkv, 3 * C, B, T, NH, hs);
    rows_to_heads_kernel<<<grid, 256>>>(k, qkv + C, 3 * C, B, T, NH, hs);
    rows_to_heads_kernel<<<grid, 256>>>(v, qkv + 2 * C, 3 * C, B, T, NH, hs);
    launchCheck();
    // preatt(T,T) = q(T,hs) @ k^T(hs,T) / sqrt(hs) for each of the B*NH heads: scaled in the GEMM
    float scale = 1.0f / sqrtf((float)hs);
    gemm_batched(false, true, T, T, hs, scale, q, hs, (size_t)T * hs, k, hs, (size_t)T * hs, 0.0f, preatt, T, (size_t)T * T, B * NH);
    int rows = B * NH * T;
    causal_softmax_kernel<<<ceil_div(rows, 8), 256>>>(att, preatt, rows, T);
    launchCheck();
    // y(T,hs) = att(T,T) @ v(T,hs)
    gemm_batched(false, false, T, hs, T, 1.0f, att, T, (size_t)T * T, v, hs, (size_t)T * hs, 0.0f, y, hs, (size_t)T * hs, B * NH);
    heads_to_rows_kernel<<<grid, 256>>>(out, C, y, B, T, NH, hs);
    launchCheck();
}

inline void materialized_backward(floatX* dqkv, const floatX* dout, const floatX* qkv, const floatX* att, floatX* scratch,
                               int B, int T, int C, int NH) {
    int hs = C / NH;
    size_t n = (size_t)B * T * C;
    if (n == 0) return;
    floatX *q = scratch, *k = q + n, *v = k + n, *dy = v + n, *dq = dy + n, *dk = dq + n, *dv = dk + n, *datt = scratch + 7 * n;
    int grid = ceil_div(n, 256);
    rows_to_heads_kernel<<<grid, 256>>>(q, qkv, 3 * C, B, T, NH, hs);
    rows_to_heads_kernel<<<grid, 256>>>(k, qkv + C, 3 * C, B, T, NH, hs);
    rows_to_heads_kernel<<<grid, 256>>>(v, qkv + 2 * C, 3 * C, B, T, NH, hs);
    rows_to_heads_kernel<<<grid, 256>>>(dy, dout, C, B, T, NH, hs);
    launchCheck();
    size_t sth = (size_t)T * hs, stt = (size_t)T * T;
    // datt(T,T) = dy(T,hs) @ v^T ;  dv(T,hs) = att^T(T,T) @ dy(T,hs)
    gemm_batched(false, true, T, T, hs, 1.0f, dy, hs, sth, v, hs, sth, 0.0f, datt, T, stt, B * NH);
    gemm_batched(true, false, T, hs, T, 1.0f, att, T, stt, dy, hs, sth, 0.0f, dv, hs, sth, B * NH);
    int rows = B * NH * T;
    causal_softmax_backward_kernel<<<ceil_div(rows, 8), 256>>>(datt, att, 1.0f / sqrtf((float)hs), rows, T);
    launchCheck();
    // dq = dpreatt @ k ;  dk = dpreatt^T @ q
    gemm_batched(false, false, T, hs, T, 1.0f, datt, T, stt, k, hs, sth, 0.0f, dq, hs, sth, B * NH);
    gemm_batched(true, false, T, hs, T, 1.0f, datt, T, stt, q, hs, sth, 0.0f, dk, hs, sth, B * NH);
    heads_to_rows_kernel<<<grid, 256>>>(dqkv, 3 * C, dq, B, T, NH, hs);
    heads_to_rows_kernel<<<grid, 256>>>(dqkv + C, 3 * C, dk, B, T, NH, hs);
    heads_to_rows_kernel<<<grid, 256>>>(dqkv + 2 * C, 3 * C, dv, B, T, NH, hs);
    launchCheck();
}
#endif

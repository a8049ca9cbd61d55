/*
kernels/attention_block.cuh: attention of a block of queries against one block of keys and values,
merged into what earlier blocks gave: the pieces of ring attention (cp.h).

With the keys split into blocks, a query's softmax over all of them is built block by block
(the online softmax of flash attention). After some blocks a query row holds its normalized
output o and the log-sum-exp of its scores so far, lse = log sum_j exp(s_j). A new block's
scores s_j continue the same running sum, rescaled to the running maximum m:
    m' = max(m, s_j)     l' = l exp(m - m') + exp(s_j - m')     o' = o exp(m - m') + exp(s_j - m') v_j
starting from m = lse, l = 1 (o is then the sum of its own weights, normalized), and at the end
o = o'/l', lse = m' + log l'. The blocks may come in any order; the result is the softmax over
every key seen, to fp32 round-off. The forward keeps lse (one float per query and head) instead
of the (T,T) probabilities; the backward recomputes each probability from it:
    p_j = exp(s_j - lse)   dp_j = dout . v_j   ds_j = p_j (dp_j - D)   D = dout . out
    dq += ds_j k_j / sqrt(hs)   dk_j += ds_j q / sqrt(hs)   dv_j += p_j dout
(D is the same for every block: the softmax's Jacobian against the whole row).

Rows: q, k and v are read from qkv-layout rows ([q | k | v], 3C each, head h at h*hs); sequence b's
query t is row b * q_rows + q_first + t, its key j row b * kv_rows + kv_first + j, so a block can be
one chunk of each of B sequences (cp.h's zig-zag chunks: q_rows = the chunk's tokens, q_first = where
the B chunks start) without copying it out.
Output, lse (NH per row), dq and dout follow the queries' rows; dkv ([dk | dv], 2C fp32 per row) the keys'.

Host twin: a loop over rows (the specification). GPU: version 1, a thread per query row (forward,
dq) or key row (dk, dv), each looping over the other block: plain and slow, as llm.c's first
attention kernels are; tiles in shared memory are a later lab's work.
*/
#pragma once
// defines: AttentionBlock, attention_block_q_row, attention_block_kv_row, attention_block_forward, attention_block_backward,
//          attention_block_output,
//          attention_block_gradients, attention_block_row_dot,
//          attention_block_keys, attention_block_score, attention_block_forward_row, attention_block_dq_row,
//          attention_block_dkv_row, attention_block_row_dot_row, attention_block_forward_kernel,
//          attention_block_dq_kernel, attention_block_dkv_kernel, attention_block_row_dot_kernel,
//          attention_block_output_kernel, attention_block_gradients_kernel, attention_block_forward_host,
//          attention_block_backward_host, attention_block_row_dot_host, attention_block_output_host,
//          attention_block_gradients_host
#include <math.h>  // defines: expf, logf, sqrtf, INFINITY
#include "common.cuh"

// which rows of q (qkv layout: the queries') and kv (qkv layout: the keys' and values') a block is,
// on this rank's C channels and NH heads. The pointers travel beside it, as arguments of their own:
// the emulated CUDA build (tests/emu) translates a kernel's pointer arguments, not a struct's fields
struct AttentionBlock {
    int q_rows, q_first;   // sequence b's query t at row b * q_rows + q_first + t of q (and of out, lse, dq, dout)
    int kv_rows, kv_first; // its key j at row b * kv_rows + kv_first + j of kv (and of dkv)
    int B, Tq, Tk, C, NH;  // Tq queries and Tk keys of each of B sequences
    bool causal;           // the diagonal block: query t sees keys j <= t only (Tq == Tk)
    bool first;            // forward: no block before this one (what the output and lse hold is ignored)
};

HOST_DEVICE inline size_t attention_block_q_row(const AttentionBlock& a, int b, int t) {
    return (size_t)b * a.q_rows + a.q_first + t;
}
HOST_DEVICE inline size_t attention_block_kv_row(const AttentionBlock& a, int b, int j) {
    return (size_t)b * a.kv_rows + a.kv_first + j;
}
// the keys query t sees: all of the block, or under the causal mask j <= t
HOST_DEVICE inline int attention_block_keys(const AttentionBlock& a, int t) { return a.causal ? t + 1 : a.Tk; }
// q_t . k_j / sqrt(hs) for head h of sequence b
HOST_DEVICE inline float attention_block_score(const AttentionBlock& a, const floatX* qkv_q, const floatX* qkv_kv, int b, int h,
                                               int t, int j) {
    int hs = a.C / a.NH;
    const floatX* q = qkv_q + attention_block_q_row(a, b, t) * 3 * a.C + h * hs;
    const floatX* k = qkv_kv + attention_block_kv_row(a, b, j) * 3 * a.C + a.C + h * hs;
    float dot = 0.0f;
    for (int i = 0; i < hs; i++) dot += to_float(q[i]) * to_float(k[i]);
    return dot / sqrtf((float)hs);
}

// query t of head h, sequence b: the block's keys merged into out (fp32, normalized) and lse
HOST_DEVICE inline void attention_block_forward_row(const AttentionBlock& a, const floatX* q, const floatX* kv, int b, int h, int t,
                                                    float* out, float* lse) {
    int hs = a.C / a.NH;
    size_t row = attention_block_q_row(a, b, t);
    float* o = out + row * a.C + h * hs;
    float* row_lse = lse + row * a.NH + h;
    float m = a.first ? -INFINITY : *row_lse, l = a.first ? 0.0f : 1.0f;  // the blocks so far: weight 1 at m = lse
    if (a.first) for (int i = 0; i < hs; i++) o[i] = 0.0f;
    for (int j = 0; j < attention_block_keys(a, t); j++) {
        float s = attention_block_score(a, q, kv, b, h, t, j);
        float m_new = fmaxf(m, s), rescale = expf(m - m_new), p = expf(s - m_new);
        const floatX* v = kv + attention_block_kv_row(a, b, j) * 3 * a.C + 2 * a.C + h * hs;
        for (int i = 0; i < hs; i++) o[i] = o[i] * rescale + p * to_float(v[i]);
        l = l * rescale + p;
        m = m_new;
    }
    for (int i = 0; i < hs; i++) o[i] /= l;
    *row_lse = m + logf(l);
}

// D = dout . out for one query row and head h (out: what the forward returned, floatX)
HOST_DEVICE inline void attention_block_row_dot_row(size_t row, int h, float* D, const floatX* dout, const floatX* out, int C, int NH) {
    int hs = C / NH;
    float d = 0.0f;
    for (int i = 0; i < hs; i++) d += to_float(dout[row * C + h * hs + i]) * to_float(out[row * C + h * hs + i]);
    D[row * NH + h] = d;
}

// dq of query t, head h: the block's keys' share
HOST_DEVICE inline void attention_block_dq_row(const AttentionBlock& a, const floatX* q, const floatX* kv, int b, int h, int t,
                                               float* dq, const floatX* dout, const float* lse, const float* D) {
    int hs = a.C / a.NH;
    size_t row = attention_block_q_row(a, b, t), stat = row * a.NH + h;
    const floatX* dy = dout + row * a.C + h * hs;
    float* dq_row = dq + row * a.C + h * hs;
    float scale = 1.0f / sqrtf((float)hs);
    for (int j = 0; j < attention_block_keys(a, t); j++) {
        const floatX* key = kv + attention_block_kv_row(a, b, j) * 3 * a.C + h * hs;  // k at +C, v at +2C
        float p = expf(attention_block_score(a, q, kv, b, h, t, j) - lse[stat]), dp = 0.0f;
        for (int i = 0; i < hs; i++) dp += to_float(dy[i]) * to_float(key[2 * a.C + i]);
        float ds = p * (dp - D[stat]) * scale;
        for (int i = 0; i < hs; i++) dq_row[i] += ds * to_float(key[a.C + i]);
    }
}

// dk and dv of key j, head h: from every query of the block that sees it
HOST_DEVICE inline void attention_block_dkv_row(const AttentionBlock& a, const floatX* q, const floatX* kv, int b, int h, int j,
                                                float* dkv, const floatX* dout, const float* lse, const float* D) {
    int hs = a.C / a.NH;
    const floatX* v = kv + attention_block_kv_row(a, b, j) * 3 * a.C + 2 * a.C + h * hs;
    float* dk = dkv + attention_block_kv_row(a, b, j) * 2 * a.C + h * hs;
    float* dv = dk + a.C;
    float scale = 1.0f / sqrtf((float)hs);
    for (int t = a.causal ? j : 0; t < a.Tq; t++) {
        size_t row = attention_block_q_row(a, b, t), stat = row * a.NH + h;
        const floatX* dy = dout + row * a.C + h * hs;
        const floatX* query = q + row * 3 * a.C + h * hs;
        float p = expf(attention_block_score(a, q, kv, b, h, t, j) - lse[stat]), dp = 0.0f;
        for (int i = 0; i < hs; i++) dp += to_float(dy[i]) * to_float(v[i]);
        float ds = p * (dp - D[stat]) * scale;
        for (int i = 0; i < hs; i++) {
            dk[i] += ds * to_float(query[i]);
            dv[i] += p * to_float(dy[i]);
        }
    }
}

// the host twins: a loop over the rows
inline void attention_block_forward_host(const AttentionBlock& a, const floatX* q, const floatX* kv, float* out, float* lse) {
    #pragma omp parallel for collapse(3)
    for (int b = 0; b < a.B; b++)
        for (int h = 0; h < a.NH; h++)
            for (int t = 0; t < a.Tq; t++) attention_block_forward_row(a, q, kv, b, h, t, out, lse);
}
inline void attention_block_backward_host(const AttentionBlock& a, const floatX* q, const floatX* kv, float* dq, float* dkv,
                                          const floatX* dout, const float* lse, const float* D) {
    #pragma omp parallel for collapse(3)
    for (int b = 0; b < a.B; b++)
        for (int h = 0; h < a.NH; h++)
            for (int t = 0; t < a.Tq; t++) attention_block_dq_row(a, q, kv, b, h, t, dq, dout, lse, D);
    #pragma omp parallel for collapse(3)
    for (int b = 0; b < a.B; b++)
        for (int h = 0; h < a.NH; h++)
            for (int j = 0; j < a.Tk; j++) attention_block_dkv_row(a, q, kv, b, h, j, dkv, dout, lse, D);
}
inline void attention_block_row_dot_host(float* D, const floatX* dout, const floatX* out, int rows, int C, int NH) {
    #pragma omp parallel for
    for (int i = 0; i < rows * NH; i++) attention_block_row_dot_row(i / NH, i % NH, D, dout, out, C, NH);
}
inline void attention_block_output_host(floatX* out, const float* acc, size_t n) {
    #pragma omp parallel for
    for (size_t i = 0; i < n; i++) out[i] = from_float(acc[i]);
}
inline void attention_block_gradients_host(floatX* dqkv, const float* dq, const float* dkv, size_t rows, int C) {
    #pragma omp parallel for
    for (size_t row = 0; row < rows; row++)
        for (int c = 0; c < 3 * C; c++) dqkv[row * 3 * C + c] = from_float(c < C ? dq[row * C + c] : dkv[row * 2 * C + c - C]);
}

#ifdef __CUDACC__
__global__ void attention_block_forward_kernel(AttentionBlock a, const floatX* q, const floatX* kv, float* out, float* lse) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;  // (b, h, t)
    if (i < a.B * a.NH * a.Tq) attention_block_forward_row(a, q, kv, i / (a.NH * a.Tq), (i / a.Tq) % a.NH, i % a.Tq, out, lse);
}
__global__ void attention_block_dq_kernel(AttentionBlock a, const floatX* q, const floatX* kv, float* dq, const floatX* dout,
                                          const float* lse, const float* D) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < a.B * a.NH * a.Tq) attention_block_dq_row(a, q, kv, i / (a.NH * a.Tq), (i / a.Tq) % a.NH, i % a.Tq, dq, dout, lse, D);
}
__global__ void attention_block_dkv_kernel(AttentionBlock a, const floatX* q, const floatX* kv, float* dkv, const floatX* dout,
                                           const float* lse, const float* D) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;  // (b, h, j)
    if (i >= a.B * a.NH * a.Tk) return;
    attention_block_dkv_row(a, q, kv, i / (a.NH * a.Tk), (i / a.Tk) % a.NH, i % a.Tk, dkv, dout, lse, D);
}
__global__ void attention_block_row_dot_kernel(float* D, const floatX* dout, const floatX* out, int rows, int C, int NH) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;  // (row, h)
    if (i < rows * NH) attention_block_row_dot_row(i / NH, i % NH, D, dout, out, C, NH);
}
__global__ void attention_block_output_kernel(floatX* out, const float* acc, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = from_float(acc[i]);
}
__global__ void attention_block_gradients_kernel(floatX* dqkv, const float* dq, const float* dkv, size_t rows, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, row = i / (3 * C), c = i % (3 * C);
    if (row < rows) dqkv[i] = from_float(c < (size_t)C ? dq[row * C + c] : dkv[row * 2 * C + c - C]);
}

// the block's keys merged into out (a row of C fp32 per query) and lse (a row of NH per query)
inline void attention_block_forward(const AttentionBlock& a, const floatX* q, const floatX* kv, float* out, float* lse) {
    if (a.B * a.NH * a.Tq == 0) return;  // a grid of 0 blocks is a launch error (so in every launcher below)
    attention_block_forward_kernel<<<ceil_div(a.B * a.NH * a.Tq, 128), 128>>>(a, q, kv, out, lse);
    launchCheck();
}
// the block's share of dq (the queries' rows, C fp32) and of dk, dv (the keys' rows, 2C fp32), added
inline void attention_block_backward(const AttentionBlock& a, const floatX* q, const floatX* kv, float* dq, float* dkv,
                                     const floatX* dout, const float* lse, const float* D) {
    if (a.B * a.NH * a.Tq == 0) return;
    attention_block_dq_kernel<<<ceil_div(a.B * a.NH * a.Tq, 128), 128>>>(a, q, kv, dq, dout, lse, D);
    launchCheck();
    attention_block_dkv_kernel<<<ceil_div(a.B * a.NH * a.Tk, 128), 128>>>(a, q, kv, dkv, dout, lse, D);
    launchCheck();
}
// D (rows, NH) = dout . out per query row and head, for every block's backward
inline void attention_block_row_dot(float* D, const floatX* dout, const floatX* out, int rows, int C, int NH) {
    if (rows * NH == 0) return;
    attention_block_row_dot_kernel<<<ceil_div(rows * NH, 256), 256>>>(D, dout, out, rows, C, NH);
    launchCheck();
}
// the fp32 output of the last block, in floatX
inline void attention_block_output(floatX* out, const float* acc, size_t n) {
    if (n == 0) return;
    attention_block_output_kernel<<<ceil_div(n, 256), 256>>>(out, acc, n);
    launchCheck();
}
// dqkv (rows, 3C) floatX = [dq | dk dv] from the fp32 sums
inline void attention_block_gradients(floatX* dqkv, const float* dq, const float* dkv, size_t rows, int C) {
    if (rows == 0) return;
    attention_block_gradients_kernel<<<ceil_div(rows * 3 * C, 256), 256>>>(dqkv, dq, dkv, rows, C);
    launchCheck();
}
#else
inline void attention_block_forward(const AttentionBlock& a, const floatX* q, const floatX* kv, float* out, float* lse) {
    attention_block_forward_host(a, q, kv, out, lse);
}
inline void attention_block_backward(const AttentionBlock& a, const floatX* q, const floatX* kv, float* dq, float* dkv,
                                     const floatX* dout, const float* lse, const float* D) {
    attention_block_backward_host(a, q, kv, dq, dkv, dout, lse, D);
}
inline void attention_block_row_dot(float* D, const floatX* dout, const floatX* out, int rows, int C, int NH) {
    attention_block_row_dot_host(D, dout, out, rows, C, NH);
}
inline void attention_block_output(floatX* out, const float* acc, size_t n) { attention_block_output_host(out, acc, n); }
inline void attention_block_gradients(floatX* dqkv, const float* dq, const float* dkv, size_t rows, int C) {
    attention_block_gradients_host(dqkv, dq, dkv, rows, C);
}
#endif

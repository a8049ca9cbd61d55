/*
kernels/encoder.cuh: the input embedding, token row of wte plus position row of wpe.

    forward:  out[b,t,:] = wte[tok[b,t],:] + wpe[t,:]
    backward: dwte[tok[b,t],:] += dout[b,t,:];  dwpe[t,:] += dout[b,t,:]

The backward is a scatter-add: two positions holding the same token add into the
same wte row, so a thread per position would race. Instead the host, which has the
tokens, sorts the positions into one bucket per distinct token (positions in order);
then each (bucket, channel) sums its positions in order in fp32 and adds the sum to
the wte row once, and each (t, channel) sums its B positions into wpe. No two threads
touch one address and every sum has a fixed order: deterministic, which bit-exact
resume needs, with parallelism (distinct tokens) x C instead of C. The host twin and
the kernels call the same two element functions, so the builds agree bit for bit.

Under tensor parallelism (tp.h) a rank holds wte rows [vocab_begin, vocab_begin +
rows) only: a token outside them contributes zero (forward) and no gradient
(backward), and the ranks' outputs are summed. wpe may then be NULL in the forward,
so that only one rank adds the positions and the sum holds them once. Every value
is exactly what one rank holding all of wte computes: one addition, and zeros.
*/
#pragma once
// defines: VocabRange, TokenBuckets, token_buckets, encoder_bucket_ints, encoder_forward, encoder_backward,
//          encoder_backward_host, encoder_backward_wpe_element, encoder_backward_wpe_kernel,
//          encoder_backward_wte_element, encoder_backward_wte_kernel, encoder_element, encoder_forward_host,
//          encoder_forward_kernel, encoder_backward_ledger, encoder_forward_ledger
#include <algorithm>  // defines: std::stable_sort
#include <vector>     // defines: std::vector
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

// the positions (b*T + t) of each distinct wte row this rank holds, grouped: bucket k is row
// rows[k], at positions[starts[k]] .. positions[starts[k+1] - 1], in increasing order. Tokens
// outside the rank's rows (tensor parallelism) are in no bucket: they add no gradient.
struct TokenBuckets { std::vector<int> positions, starts, rows; };
inline TokenBuckets token_buckets(const int* tokens, int BT, VocabRange vocab) {
    TokenBuckets tb;
    for (int p = 0; p < BT; p++)
        if (tokens[p] >= vocab.begin && tokens[p] < vocab.begin + vocab.rows) tb.positions.push_back(p);
    std::stable_sort(tb.positions.begin(), tb.positions.end(), [&](int a, int b) { return tokens[a] < tokens[b]; });
    for (size_t i = 0; i < tb.positions.size(); i++)
        if (i == 0 || tokens[tb.positions[i]] != tokens[tb.positions[i - 1]]) {
            tb.starts.push_back((int)i);
            tb.rows.push_back(tokens[tb.positions[i]] - vocab.begin);
        }
    tb.starts.push_back((int)tb.positions.size());
    return tb;
}
// the device scratch (ints) the GPU backward needs for the buckets of (B,T) tokens
inline size_t encoder_bucket_ints(int B, int T) { return 3 * (size_t)B * T + 1; }

// dwte[rows[k], c] += the bucket's dout[position, c], summed in position order
HOST_DEVICE inline void encoder_backward_wte_element(int k, int c, floatX* dwte, const floatX* dout,
                                                     const int* positions, const int* starts, const int* rows, int C) {
    float sum = 0.0f;
    for (int i = starts[k]; i < starts[k + 1]; i++) sum += to_float(dout[(size_t)positions[i] * C + c]);
    floatX* w = dwte + (size_t)rows[k] * C + c;
    *w = from_float(to_float(*w) + sum);
}
// dwpe[t, c] += dout[b, t, c] summed over b in order
HOST_DEVICE inline void encoder_backward_wpe_element(int t, int c, floatX* dwpe, const floatX* dout, int B, int T,
                                                     int C) {
    float sum = 0.0f;
    for (int b = 0; b < B; b++) sum += to_float(dout[((size_t)b * T + t) * C + c]);
    floatX* p = dwpe + (size_t)t * C + c;
    *p = from_float(to_float(*p) + sum);
}

inline void encoder_backward_host(floatX* dwte, floatX* dwpe,   // (rows,C), (maxT,C), accumulated
                                  const floatX* dout,           // (B,T,C)
                                  const int* tokens,            // (B,T), host memory
                                  int B, int T, int C, VocabRange vocab) {
    TokenBuckets tb = token_buckets(tokens, B * T, vocab);
    int buckets = (int)tb.rows.size();
    #pragma omp parallel for
    for (int k = 0; k < buckets; k++)
        for (int c = 0; c < C; c++)
            encoder_backward_wte_element(k, c, dwte, dout, tb.positions.data(), tb.starts.data(), tb.rows.data(), C);
    #pragma omp parallel for
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++) encoder_backward_wpe_element(t, c, dwpe, dout, B, T, C);
}

// the kernel ledger (ledger.cuh) of the launchers below, for N = B*T tokens: a row of wte per token
// (fewer where tokens repeat: the ledger counts min(N, V) distinct rows, an upper bound)
inline void encoder_forward_ledger(Ledger* l, size_t B, size_t T, size_t C) {
    double X = sizeof(floatX), N = (double)B * T;
    ledger_add(l, {"encoder_forward_kernel", N * C, 4.0 * N + N * C * X + T * C * X, N * C * X, 0});
}
inline void encoder_backward_ledger(Ledger* l, size_t B, size_t T, size_t C, size_t V) {
    double X = sizeof(floatX), N = (double)B * T, rows = std::min(N, (double)V);
    ledger_add(l, {"encoder_backward_wte_kernel", N * C, N * C * X + 4.0 * (N + 2 * rows), 0, rows * C * X});
    ledger_add(l, {"encoder_backward_wpe_kernel", N * C, N * C * X, 0, T * C * X});
}

#ifdef __CUDACC__
__global__ void encoder_forward_kernel(floatX* out, const int* tokens, const floatX* wte, const floatX* wpe,
                                       int B, int T, int C, VocabRange vocab) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * T * C) return;
    size_t bt = idx / C;
    out[idx] = encoder_element(bt, bt % T, idx % C, tokens, wte, wpe, C, vocab);
}

// block (k, y): bucket k, channels y*256 ..; and one thread per (t, c) of wpe
__global__ void encoder_backward_wte_kernel(floatX* dwte, const floatX* dout, const int* positions, const int* starts,
                                           const int* rows, int C) {
    int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c < C) encoder_backward_wte_element(blockIdx.x, c, dwte, dout, positions, starts, rows, C);
}
__global__ void encoder_backward_wpe_kernel(floatX* dwpe, const floatX* dout, int B, int T, int C) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < (size_t)T * C) encoder_backward_wpe_element(idx / C, idx % C, dwpe, dout, B, T, C);
}

inline void encoder_forward(floatX* out, const int* tokens, const floatX* wte, const floatX* wpe, int B, int T, int C,
                            VocabRange vocab) {
    const int block = 256;
    if ((size_t)B * T * C == 0) return;  // a grid of 0 blocks is a launch error
    encoder_forward_kernel<<<ceil_div((size_t)B * T * C, block), block>>>(out, tokens, wte, wpe, B, T, C, vocab);
    launchCheck();
}
// tokens: host memory, bucketed here; bucket_scratch: encoder_bucket_ints(B, T) ints of device memory;
// bucket_staging: as many of page-locked host memory (base.h), the upload's source, which the
// caller leaves unwritten until a wait has passed (staging.h): the upload does not wait
inline void encoder_backward(floatX* dwte, floatX* dwpe, const floatX* dout, const int* tokens, int* bucket_scratch,
                             int* bucket_staging, int B, int T, int C, VocabRange vocab) {
    TokenBuckets tb = token_buckets(tokens, B * T, vocab);
    int buckets = (int)tb.rows.size();
    int* packed = bucket_staging;  // one upload: positions, starts, rows
    std::copy(tb.positions.begin(), tb.positions.end(), packed);
    std::copy(tb.starts.begin(), tb.starts.end(), packed + tb.positions.size());
    std::copy(tb.rows.begin(), tb.rows.end(), packed + tb.positions.size() + tb.starts.size());
    host_to_device_async(bucket_scratch, packed,
                         (tb.positions.size() + tb.starts.size() + tb.rows.size()) * sizeof(int));
    const int* positions = bucket_scratch;
    const int* starts = positions + tb.positions.size();
    const int* rows = starts + tb.starts.size();
    if (buckets > 0) {  // a grid dimension of 0 is a launch error
        encoder_backward_wte_kernel<<<dim3(buckets, ceil_div(C, 256)), 256>>>(dwte, dout, positions, starts, rows, C);
        launchCheck();
    }
    if ((size_t)T * C == 0) return;
    encoder_backward_wpe_kernel<<<ceil_div((size_t)T * C, 256), 256>>>(dwpe, dout, B, T, C);
    launchCheck();
}
#else
inline void encoder_forward(floatX* out, const int* tokens, const floatX* wte, const floatX* wpe, int B, int T, int C,
                            VocabRange vocab) {
    encoder_forward_host(out, tokens, wte, wpe, B, T, C, vocab);
}
inline void encoder_backward(floatX* dwte, floatX* dwpe, const floatX* dout, const int* tokens, int* bucket_scratch,
                             int* bucket_staging, int B, int T, int C, VocabRange vocab) {
    (void)bucket_scratch; (void)bucket_staging;
    encoder_backward_host(dwte, dwpe, dout, tokens, B, T, C, vocab);
}
#endif

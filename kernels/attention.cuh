/*
kernels/attention.cuh: causal multi-head self-attention, softmax(q k^T / sqrt(hs)) v, without the
(T,T) matrix: flash attention (Dao et al. 2022; FlashAttention-2, Dao 2023), for one rank and for
each step of ring attention (cp.h).

qkv rows are [q (C) | k (C) | v (C)] with head h at channels h*hs .. h*hs+hs-1, as GPT-2's c_attn
writes them. C and NH are the channels and heads *this rank* holds (C/tp and NH/tp under tensor
parallelism): heads are independent.

The online softmax. Split a query's keys into ranges. After some ranges the row holds its
normalized output o and the log-sum-exp of its scores so far, lse = log sum_j exp(s_j). A new
range's scores s_j continue the same running sum, rescaled to the running maximum m:
    m' = max(m, s_j)     l' = l exp(m - m') + exp(s_j - m')     o' = o exp(m - m') + exp(s_j - m') v_j
starting from m = lse, l = 1 (o, normalized, is the sum of its own weights) or, before any range,
m = -inf, l = 0, o = 0; at the end o = o'/l', lse = m' + log l'. exp never sees a positive argument,
so nothing overflows, and the ranges may come in any order: the result is the softmax over every
key seen, to fp32 round-off. Ring attention merges one rank's keys at a time this way; one rank
runs its whole causal sequence as one range. The forward keeps lse (B,T,NH) fp32 for its backward,
never the probabilities, and the backward recomputes each one from it:
    p_tj = exp(s_tj - lse_t)   dp_tj = dout_t . v_j   ds_tj = p_tj (dp_tj - D_t)   D_t = dout_t . out_t
    dq_t += ds_tj k_j / sqrt(hs)   dk_j += ds_tj q_t / sqrt(hs)   dv_j += p_tj dout_t
(D_t = sum_j p_tj dp_tj is the softmax backward's row sum, the same for every range of the row).

    memory per layer, kept       lse: B T NH fp32 (the (B,NH,T,T) probabilities are gone)
    scratch, one for all layers  the fp32 output and dq (B T C each), dk dv (B T 2C), D (B T NH)
    work per head                2 T^2 hs multiply-adds forward (half masked, skipped by tiles),
                                 4 T^2 hs backward (p recomputed: one more exp per score)

An attention range (AttentionRange) is B sequences' Tq queries against their Tk keys; sequence b's query t is
row b * q_rows + q_first + t of the query rows, its key j row b * kv_rows + kv_first + j of the key
rows, so that ring attention's zig-zag chunks (cp.h) are ranges without copying them out. Queries
are read from qkv rows (q at 0, stride 3C); keys and values from rows of kv_stride values, k at 0 and
v at C: a rank's own qkv (kv = qkv + C, stride 3C) or the [k | v] rows that travel round the ring
(stride 2C). The output (fp32, normalized), lse, dq and dout follow the queries' rows; dkv
([dk | dv], 2C fp32 per row) the keys'. The backward adds into dq and dkv (zeroed by the caller).

    host twin   attention_range_*_host: a loop over rows, the specification (tests compare to it)
    CPU build   per (b, h), 64 queries at a time: their scores against the keys they see by sgemm,
                the online softmax by rows, p v by sgemm; the backward's four products likewise.
                Scratch: a tile of scores (64 x Tk) per thread, O(T)
    GPU         kernels/flash_attention.cuh: tiles of queries and keys in shared memory, on CUDA
                cores in the fp32 build and on tensor cores (WMMA, kernels/flash_attention_wmma.cuh)
                in the bf16 and fp16 builds;
                -fa 2: kernels/flash_attention_mma.cuh, FlashAttention-2 with the scores in
                registers (mma.sync), one rank's whole sequences
Every sum runs in a fixed order (no atomics): the same bits every run, as resume needs.
Read attention_range_forward_row first, then attention_forward. Applied in train_gpt.cu:
sequence_attention_forward and _backward (one rank), and through cp.h's ring attention (-cp).
*/
#pragma once
// defines: AttentionRange, AttentionScratch, attention_whole_sequences, attention_range_q_row, attention_range_kv_row,
//          attention_range_keys, attention_range_score, attention_range_forward_row, attention_range_dq_row,
//          attention_range_dkv_row, attention_range_row_dot_row, attention_range_forward_host,
//          attention_range_backward_host, attention_range_row_dot_host, attention_range_output_host,
//          attention_range_gradients_host, attention_range_forward, attention_range_backward, attention_range_row_dot,
//          attention_range_output, attention_range_gradients, attention_forward, attention_backward,
//          attention_forward_host, attention_backward_host, ATTENTION_CPU_QUERIES, gather_head_rows,
//          attention_range_forward_head, attention_range_backward_head, attention_pack_kv, attention_pack_kv_host,
//          attention_backward_ledger, attention_forward_ledger, flash_wmma_head, flash_kernels_refusal
#include <math.h>    // defines: expf, logf, sqrtf, INFINITY
#include <algorithm> // defines: std::min
#include <vector>    // defines: std::vector
#include "common.cuh"

// an attention range: which rows of the queries (qkv layout) and of the keys and values (kv_stride
// per row) one call attends, on this rank's C channels and NH heads (ring attention calls several a
// step, cp.h; the KV cache one a token, kv_cache.h). The pointers travel beside it, as arguments of their
// own: the emulated CUDA build (tests/emu) translates a kernel's pointer arguments, not a struct's fields
struct AttentionRange {
    int q_rows, q_first;   // sequence b's query t at row b * q_rows + q_first + t (of out, lse, dq, dout too)
    int kv_rows, kv_first; // its key j at row b * kv_rows + kv_first + j (of dkv too)
    int B, Tq, Tk, C, NH;  // Tq queries and Tk keys of each of B sequences
    int kv_stride;         // values per key row: 3C (qkv rows, kv = qkv + C) or 2C ([k | v] rows)
    bool causal;           // on the diagonal: query t sees keys j <= t only (Tq == Tk)
    bool first;            // forward: no range before this one (what out and lse hold is ignored)
};

// one rank's attention: every query of B whole sequences against its own causal keys, one range
inline AttentionRange attention_whole_sequences(int B, int T, int C, int NH) {
    return AttentionRange{T, 0, T, 0, B, T, T, C, NH, 3 * C, true, true};
}

HOST_DEVICE inline size_t attention_range_q_row(const AttentionRange& a, int b, int t) {
    return (size_t)b * a.q_rows + a.q_first + t;
}
HOST_DEVICE inline size_t attention_range_kv_row(const AttentionRange& a, int b, int j) {
    return (size_t)b * a.kv_rows + a.kv_first + j;
}
// the keys query t sees: all of the range, or under the causal mask j <= t
HOST_DEVICE inline int attention_range_keys(const AttentionRange& a, int t) { return a.causal ? t + 1 : a.Tk; }
// q_t . k_j / sqrt(hs) for head h of sequence b
HOST_DEVICE inline float attention_range_score(const AttentionRange& a, const floatX* q, const floatX* kv, int b, int h,
                                               int t, int j) {
    int hs = a.C / a.NH;
    const floatX* q_row = q + attention_range_q_row(a, b, t) * 3 * a.C + h * hs;
    const floatX* k_row = kv + attention_range_kv_row(a, b, j) * a.kv_stride + h * hs;
    float dot = 0.0f;
    for (int i = 0; i < hs; i++) dot += to_float(q_row[i]) * to_float(k_row[i]);
    return dot / sqrtf((float)hs);
}

// ---------------------------------------------------------------- the host twin: the specification
// query t of head h, sequence b: the range's keys merged into out (fp32, normalized) and lse, key by key
HOST_DEVICE inline void attention_range_forward_row(const AttentionRange& a, const floatX* q, const floatX* kv, int b,
                                                    int h, int t, float* out, float* lse) {
    int hs = a.C / a.NH;
    size_t row = attention_range_q_row(a, b, t);
    float* o = out + row * a.C + h * hs;
    float* row_lse = lse + row * a.NH + h;
    float m = a.first ? -INFINITY : *row_lse, l = a.first ? 0.0f : 1.0f;  // the ranges so far: weight 1 at m = lse
    if (a.first) for (int i = 0; i < hs; i++) o[i] = 0.0f;
    for (int j = 0; j < attention_range_keys(a, t); j++) {
        float s = attention_range_score(a, q, kv, b, h, t, j);
        float m_new = fmaxf(m, s), rescale = expf(m - m_new), p = expf(s - m_new);
        const floatX* v = kv + attention_range_kv_row(a, b, j) * a.kv_stride + a.C + h * hs;
        for (int i = 0; i < hs; i++) o[i] = o[i] * rescale + p * to_float(v[i]);
        l = l * rescale + p;
        m = m_new;
    }
    for (int i = 0; i < hs; i++) o[i] /= l;
    *row_lse = m + logf(l);
}

// D = dout . out for one query row and head h (out: what the forward returned, floatX)
HOST_DEVICE inline void attention_range_row_dot_row(size_t row, int h, float* D, const floatX* dout, const floatX* out,
                                                    int C, int NH) {
    int hs = C / NH;
    float d = 0.0f;
    for (int i = 0; i < hs; i++) d += to_float(dout[row * C + h * hs + i]) * to_float(out[row * C + h * hs + i]);
    D[row * NH + h] = d;
}

// dq of query t, head h: the range's keys' share, added
HOST_DEVICE inline void attention_range_dq_row(const AttentionRange& a, const floatX* q, const floatX* kv, int b, int h,
                                               int t, float* dq, const floatX* dout, const float* lse, const float* D) {
    int hs = a.C / a.NH;
    size_t row = attention_range_q_row(a, b, t), stat = row * a.NH + h;
    const floatX* dy = dout + row * a.C + h * hs;
    float* dq_row = dq + row * a.C + h * hs;
    float scale = 1.0f / sqrtf((float)hs);
    for (int j = 0; j < attention_range_keys(a, t); j++) {
        const floatX* key = kv + attention_range_kv_row(a, b, j) * a.kv_stride + h * hs;  // k; v at +C
        float p = expf(attention_range_score(a, q, kv, b, h, t, j) - lse[stat]), dp = 0.0f;
        for (int i = 0; i < hs; i++) dp += to_float(dy[i]) * to_float(key[a.C + i]);
        float ds = p * (dp - D[stat]) * scale;
        for (int i = 0; i < hs; i++) dq_row[i] += ds * to_float(key[i]);
    }
}

// dk and dv of key j, head h: from every query of the range that sees it, added
HOST_DEVICE inline void attention_range_dkv_row(const AttentionRange& a, const floatX* q, const floatX* kv, int b,
                                                int h, int j, float* dkv, const floatX* dout, const float* lse,
                                                const float* D) {
    int hs = a.C / a.NH;
    const floatX* v = kv + attention_range_kv_row(a, b, j) * a.kv_stride + a.C + h * hs;
    float* dk = dkv + attention_range_kv_row(a, b, j) * 2 * a.C + h * hs;
    float* dv = dk + a.C;
    float scale = 1.0f / sqrtf((float)hs);
    for (int t = a.causal ? j : 0; t < a.Tq; t++) {
        size_t row = attention_range_q_row(a, b, t), stat = row * a.NH + h;
        const floatX* dy = dout + row * a.C + h * hs;
        const floatX* query = q + row * 3 * a.C + h * hs;
        float p = expf(attention_range_score(a, q, kv, b, h, t, j) - lse[stat]), dp = 0.0f;
        for (int i = 0; i < hs; i++) dp += to_float(dy[i]) * to_float(v[i]);
        float ds = p * (dp - D[stat]) * scale;
        for (int i = 0; i < hs; i++) {
            dk[i] += ds * to_float(query[i]);
            dv[i] += p * to_float(dy[i]);
        }
    }
}

inline void attention_range_forward_host(const AttentionRange& a, const floatX* q, const floatX* kv, float* out,
                                         float* lse) {
#pragma omp parallel for collapse(3)
    for (int b = 0; b < a.B; b++)
        for (int h = 0; h < a.NH; h++)
            for (int t = 0; t < a.Tq; t++) attention_range_forward_row(a, q, kv, b, h, t, out, lse);
}
inline void attention_range_backward_host(const AttentionRange& a, const floatX* q, const floatX* kv, float* dq,
                                          float* dkv, const floatX* dout, const float* lse, const float* D) {
#pragma omp parallel for collapse(3)
    for (int b = 0; b < a.B; b++)
        for (int h = 0; h < a.NH; h++)
            for (int t = 0; t < a.Tq; t++) attention_range_dq_row(a, q, kv, b, h, t, dq, dout, lse, D);
    #pragma omp parallel for collapse(3)
    for (int b = 0; b < a.B; b++)
        for (int h = 0; h < a.NH; h++)
            for (int j = 0; j < a.Tk; j++) attention_range_dkv_row(a, q, kv, b, h, j, dkv, dout, lse, D);
}
inline void attention_range_row_dot_host(float* D, const floatX* dout, const floatX* out, int rows, int C, int NH) {
    #pragma omp parallel for
    for (int i = 0; i < rows * NH; i++) attention_range_row_dot_row(i / NH, i % NH, D, dout, out, C, NH);
}
inline void attention_range_output_host(floatX* out, const float* acc, size_t n) {
    #pragma omp parallel for
    for (size_t i = 0; i < n; i++) out[i] = from_float(acc[i]);
}
inline void attention_range_gradients_host(floatX* dqkv, const float* dq, const float* dkv, size_t rows, int C) {
    #pragma omp parallel for
    for (size_t row = 0; row < rows; row++)
        for (int c = 0; c < 3 * C; c++)
            dqkv[row * 3 * C + c] = from_float(c < C ? dq[row * C + c] : dkv[row * 2 * C + c - C]);
}
// the [k | v] rows (2C) of qkv rows (3C): what ring attention sends (cp.h)
inline void attention_pack_kv_host(floatX* kv, const floatX* qkv, size_t rows, int C) {
    #pragma omp parallel for
    for (size_t row = 0; row < rows; row++)
        for (int c = 0; c < 2 * C; c++) kv[row * 2 * C + c] = qkv[row * 3 * C + C + c];
}

// one rank's attention by the twin, whole: out (B,T,C) floatX and lse (B,T,NH) from qkv (B,T,3C);
// dqkv (B,T,3C) from dout and what the forward returned. The tests' reference
inline void attention_forward_host(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH) {
    std::vector<float> acc((size_t)B * T * C);
    attention_range_forward_host(attention_whole_sequences(B, T, C, NH), qkv, qkv + C, acc.data(), lse);
    attention_range_output_host(out, acc.data(), acc.size());
}
inline void attention_backward_host(floatX* dqkv, const floatX* dout, const floatX* out, const float* lse,
                                    const floatX* qkv, int B, int T, int C, int NH) {
    size_t rows = (size_t)B * T;
    std::vector<float> D(rows * NH), dq(rows * C, 0.0f), dkv(rows * 2 * C, 0.0f);
    attention_range_row_dot_host(D.data(), dout, out, (int)rows, C, NH);
    attention_range_backward_host(attention_whole_sequences(B, T, C, NH), qkv, qkv + C, dq.data(), dkv.data(), dout,
                                  lse, D.data());
    attention_range_gradients_host(dqkv, dq.data(), dkv.data(), rows, C);
}

// the GPU build's WMMA kernels take head sizes 16, 32, 64, 128 in bf16 and fp16 (flash_attention.cuh)
inline bool flash_wmma_head(int hs) { return !FLOATX_IS_FP32 && (hs == 16 || hs == 32 || hs == 64 || hs == 128); }
// why -fa `flash` cannot run at head size hs under cp, or nullptr: it can (the CPU build runs its own
// attention whatever -fa says; the GPU build's -fa 2 kernels take one rank's whole sequences only)
inline const char* flash_kernels_refusal(int flash, int hs, int cp) {
#ifdef __CUDACC__
    if (flash != 2) return nullptr;
    if (FLOATX_IS_FP32)
        return "FlashAttention-2's mma.sync kernels are the bf16 and fp16 builds' (fp32 has no such tensor cores); "
               "use -fa 1";
    if (!flash_wmma_head(hs))  // the mma.sync kernels are compiled for the WMMA kernels' head sizes
        return "the head size is not 16, 32, 64 or 128, the sizes the mma.sync kernels are compiled for; use -fa 1";
    if (cp > 1) return "ring attention (-cp) runs the WMMA kernels on its ranges; use -fa 1";
#else
    (void)flash, (void)hs, (void)cp;
#endif
    return nullptr;
}

// the kernel ledger (ledger.cuh) of attention_forward and attention_backward below (one rank's
// whole sequences). A head's causal pairs are T(T+1)/2, each a dot product of hs for every
// product: forward q k^T and p v (2), the backward's dq kernel q k^T again, dout v^T and ds k (3),
// its dk dv kernel q k^T, dout v^T, p^T dout and ds^T q (4): the two kernels recompute what
// FlashAttention-2's one backward kernel shares, for no atomics (flash_attention.cuh)
inline void attention_forward_ledger(Ledger* l, size_t B, size_t T, size_t C, size_t NH, int flash) {
    double X = sizeof(floatX), N = (double)B * T, pairs_flops = 2.0 * B * C * T * (T + 1) / 2;
    bool wmma = flash_wmma_head((int)(C / NH));  // out in floatX from the kernel, else fp32 and a pass to round it
    const char* kernel = flash == 2 && wmma ? "flash_forward_mma_kernel<HS>"
                         : wmma     ? "flash_forward_wmma_kernel<HS_MAX, Out>" : "flash_forward_kernel<HS_MAX>";
    ledger_add(l, {kernel, 2 * pairs_flops, 3 * N * C * X, N * C * (wmma ? X : 4) + 4 * N * NH, 0, wmma});
    if (!wmma)
        ledger_add(l, {packs_divide(N * C) ? "flash_output_kernel128" : "flash_output_kernel", N * C, 4 * N * C,
                       N * C * X, 0});
}
// dq, dk dv: written in floatX into dqkv by the WMMA kernels, else summed into zeroed fp32 and rounded
inline void attention_backward_ledger(Ledger* l, size_t B, size_t T, size_t C, size_t NH, int flash) {
    double X = sizeof(floatX), N = (double)B * T, pairs_flops = 2.0 * B * C * T * (T + 1) / 2;
    // attention_range_row_dot's condition
    size_t lanes_a_head = C % (NH * PACK_VALUES) == 0 ? C / NH / PACK_VALUES : 0;
    bool row_packs = lanes_a_head > 0 && lanes_a_head <= 32 && (lanes_a_head & (lanes_a_head - 1)) == 0 &&
                     packs_divide(C);
    ledger_add(
        l, {row_packs ? "flash_row_dot_kernel128" : "flash_row_dot_kernel", 2 * N * C, 2 * N * C * X, 4 * N * NH, 0});
    double reads = 3 * N * C * X + N * C * X + 8 * N * NH;  // q k v, dout, lse and D
    if (flash == 2 && flash_wmma_head((int)(C / NH))) {  // attention_whole_backward_mma: dk dv, then dq
        ledger_add(l, {"flash_dkv_mma_kernel<HS>", 4 * pairs_flops, reads, 2 * N * C * X, 0, true});
        ledger_add(l, {"flash_dq_mma_kernel<HS>", 3 * pairs_flops, reads, N * C * X, 0, true});
        return;
    }
    if (flash_wmma_head((int)(C / NH))) {
        ledger_add(l, {"flash_dq_wmma_kernel<HS_MAX, Out>", 3 * pairs_flops, reads, N * C * X, 0, true});
        ledger_add(l, {"flash_dkv_wmma_kernel<HS_MAX, Out>", 4 * pairs_flops, reads, 2 * N * C * X, 0, true});
        return;
    }
    ledger_add(l, {"cudaMemset", 0, 0, 4 * N * C, 0});  // dq = 0
    ledger_add(l, {"cudaMemset", 0, 0, 8 * N * C, 0});  // dk dv = 0
    ledger_add(l, {"flash_dq_kernel<HS_MAX>", 3 * pairs_flops, reads, 0, 4 * N * C});
    ledger_add(l, {"flash_dkv_kernel<HS_MAX>", 4 * pairs_flops, reads, 0, 8 * N * C});
    ledger_add(l, {packs_divide(C) ? "flash_gradients_kernel128" : "flash_gradients_kernel", 3 * N * C, 12 * N * C,
                   3 * N * C * X, 0});
}

#ifdef __CUDACC__
#include "flash_attention.cuh"  // defines: flash_forward_any_head, flash_backward_any_head, flash_row_dot_kernel, ...
#include "flash_attention_mma.cuh"  // defines: attention_whole_forward_mma, attention_whole_backward_mma
#else
// ---------------------------------------------------------------- the CPU build: tiles through sgemm
#include <cblas.h>  // defines: cblas_sgemm (OpenBLAS)
#define ATTENTION_CPU_QUERIES 64  // queries per tile: a 64 x Tk tile of scores per thread

// head h's rows first .. first + n - 1 of a row-major tensor of `stride` values per row, widened
// to a contiguous fp32 (n, hs) matrix (hs values from column `offset`)
inline void gather_head_rows(float* dst, const floatX* src, size_t stride, size_t first, int n, int offset, int hs) {
    for (int r = 0; r < n; r++)
        for (int i = 0; i < hs; i++) dst[(size_t)r * hs + i] = to_float(src[(first + r) * stride + offset + i]);
}

// one (b, h) of a range: for each tile of queries, s = q k^T / sqrt(hs) against the keys its
// queries see (sgemm), the online softmax by rows (the old output rescaled in place), o += p v (sgemm)
inline void attention_range_forward_head(const AttentionRange& a, const floatX* q, const floatX* kv, int b, int h,
                                         float* out, float* lse) {
    int hs = a.C / a.NH, Tq = a.Tq, Tk = a.Tk;
    float scale = 1.0f / sqrtf((float)hs);
    std::vector<float> Q((size_t)Tq * hs), K((size_t)Tk * hs), V((size_t)Tk * hs),
        S((size_t)ATTENTION_CPU_QUERIES * Tk);
    gather_head_rows(Q.data(), q, 3 * a.C, attention_range_q_row(a, b, 0), Tq, h * hs, hs);
    gather_head_rows(K.data(), kv, a.kv_stride, attention_range_kv_row(a, b, 0), Tk, h * hs, hs);
    gather_head_rows(V.data(), kv, a.kv_stride, attention_range_kv_row(a, b, 0), Tk, a.C + h * hs, hs);
    for (int t0 = 0; t0 < Tq; t0 += ATTENTION_CPU_QUERIES) {
        // keys past the tile's last query: masked
        int nq = std::min(ATTENTION_CPU_QUERIES, Tq - t0), nk = a.causal ? t0 + nq : Tk;
        float* o = out + attention_range_q_row(a, b, t0) * a.C + h * hs;  // the tile's output rows, C apart
        std::vector<float> l(nq);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, hs, scale, Q.data() + (size_t)t0 * hs, hs,
                    K.data(), hs, 0.0f, S.data(), nk);
        for (int r = 0; r < nq; r++) {
            float* s = S.data() + (size_t)r * nk;
            float* row_lse = lse + attention_range_q_row(a, b, t0 + r) * a.NH + h;
            int keys = a.causal ? t0 + r + 1 : nk;
            float m = a.first ? -INFINITY : *row_lse, m_new = m;
            for (int j = 0; j < keys; j++) m_new = fmaxf(m_new, s[j]);
            // the ranges so far: l = 1
            float rescale = a.first ? 0.0f : expf(m - m_new), sum = a.first ? 0.0f : rescale;
            for (int j = 0; j < nk; j++) {
                s[j] = j < keys ? expf(s[j] - m_new) : 0.0f;  // p, unnormalized
                sum += s[j];
            }
            for (int i = 0; i < hs; i++)
                o[(size_t)r * a.C + i] = a.first ? 0.0f : o[(size_t)r * a.C + i] * rescale;  // first: o unset
            l[r] = sum;
            *row_lse = m_new + logf(sum);
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, hs, nk, 1.0f, S.data(), nk, V.data(), hs, 1.0f, o,
                    a.C);
        for (int r = 0; r < nq; r++)
            for (int i = 0; i < hs; i++) o[(size_t)r * a.C + i] /= l[r];
    }
}

// one (b, h) of a range's backward: per tile of queries, p recomputed from lse, then
// dv += p^T dout, dp = dout v^T, ds = p (dp - D) / sqrt(hs), dq += ds k, dk += ds^T q (sgemm each);
// dk and dv summed over the tiles in a (Tk, hs) pair of this head's own, then added to dkv
inline void attention_range_backward_head(const AttentionRange& a, const floatX* q, const floatX* kv, int b, int h,
                                          float* dq, float* dkv, const floatX* dout, const float* lse, const float* D) {
    int hs = a.C / a.NH, Tq = a.Tq, Tk = a.Tk;
    float scale = 1.0f / sqrtf((float)hs);
    size_t q_first = attention_range_q_row(a, b, 0), kv_first = attention_range_kv_row(a, b, 0);
    std::vector<float> Q((size_t)Tq * hs), dY((size_t)Tq * hs), K((size_t)Tk * hs), V((size_t)Tk * hs);
    std::vector<float> dK((size_t)Tk * hs, 0.0f), dV((size_t)Tk * hs, 0.0f);
    std::vector<float> P((size_t)ATTENTION_CPU_QUERIES * Tk), dS((size_t)ATTENTION_CPU_QUERIES * Tk);
    gather_head_rows(Q.data(), q, 3 * a.C, q_first, Tq, h * hs, hs);
    gather_head_rows(dY.data(), dout, a.C, q_first, Tq, h * hs, hs);
    gather_head_rows(K.data(), kv, a.kv_stride, kv_first, Tk, h * hs, hs);
    gather_head_rows(V.data(), kv, a.kv_stride, kv_first, Tk, a.C + h * hs, hs);
    for (int t0 = 0; t0 < Tq; t0 += ATTENTION_CPU_QUERIES) {
        int nq = std::min(ATTENTION_CPU_QUERIES, Tq - t0), nk = a.causal ? t0 + nq : Tk;
        const float *q_tile = Q.data() + (size_t)t0 * hs, *dy_tile = dY.data() + (size_t)t0 * hs;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, hs, scale, q_tile, hs, K.data(), hs, 0.0f,
                    P.data(), nk);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, hs, 1.0f, dy_tile, hs, V.data(), hs, 0.0f,
                    dS.data(), nk);
        for (int r = 0; r < nq; r++) {  // p = exp(s - lse), masked; ds = p (dp - D) / sqrt(hs)
            size_t stat = (q_first + t0 + r) * a.NH + h;
            int keys = a.causal ? t0 + r + 1 : nk;
            for (int j = 0; j < nk; j++) {
                float p = j < keys ? expf(P[(size_t)r * nk + j] - lse[stat]) : 0.0f;
                P[(size_t)r * nk + j] = p;
                dS[(size_t)r * nk + j] = p * (dS[(size_t)r * nk + j] - D[stat]) * scale;
            }
        }
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, hs, nq, 1.0f, P.data(), nk, dy_tile, hs, 1.0f,
                    dV.data(), hs);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, hs, nq, 1.0f, dS.data(), nk, q_tile, hs, 1.0f,
                    dK.data(), hs);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, hs, nk, 1.0f, dS.data(), nk, K.data(), hs, 1.0f,
                    dq + (q_first + t0) * a.C + h * hs, a.C);
    }
    for (int j = 0; j < Tk; j++)
        for (int i = 0; i < hs; i++) {
            dkv[(kv_first + j) * 2 * a.C + h * hs + i] += dK[(size_t)j * hs + i];
            dkv[(kv_first + j) * 2 * a.C + a.C + h * hs + i] += dV[(size_t)j * hs + i];
        }
}
#endif

// ---------------------------------------------------------------- a range's attention, either build
// The GPU build launches kernels/flash_attention.cuh's kernels (a grid of 0 blocks is a launch error,
// hence the early returns; no keys: nothing to merge); the CPU build runs the sgemm tiles above.
// the range's keys merged into out (a row of C fp32 per query) and lse (a row of NH per query)
inline void attention_range_forward(const AttentionRange& a, const floatX* q, const floatX* kv, float* out,
                                    float* lse) {
#ifdef __CUDACC__
    if (a.B * a.NH * a.Tq == 0 || a.Tk == 0) return;
    flash_forward_any_head(a, q, kv, out, lse);
#else
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < a.B; b++)
        for (int h = 0; h < a.NH; h++) attention_range_forward_head(a, q, kv, b, h, out, lse);
#endif
}
// the range's share of dq (the queries' rows, C fp32) and of dk, dv (the keys' rows, 2C fp32), added
inline void attention_range_backward(const AttentionRange& a, const floatX* q, const floatX* kv, float* dq, float* dkv,
                                     const floatX* dout, const float* lse, const float* D) {
#ifdef __CUDACC__
    if (a.B * a.NH * a.Tq == 0 || a.Tk == 0) return;
    flash_backward_any_head(a, q, kv, dq, a.C, dkv, 2 * a.C, dout, lse, D);
#else
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < a.B; b++)
        for (int h = 0; h < a.NH; h++) attention_range_backward_head(a, q, kv, b, h, dq, dkv, dout, lse, D);
#endif
}
// D (rows, NH) = dout . out per query row and head, for every range's backward
inline void attention_range_row_dot(float* D, const floatX* dout, const floatX* out, int rows, int C, int NH) {
#ifdef __CUDACC__
    if (rows * NH == 0) return;
    constexpr int P = Packed128<floatX>::size;
    int lanes_a_head = C % (NH * P) == 0 ? C / NH / P : 0;  // whole packs a head, rows 16-byte apart
    if (lanes_a_head > 0 && lanes_a_head <= 32 && (lanes_a_head & (lanes_a_head - 1)) == 0 && packs_fit(C, {dout, out}))
        flash_row_dot_kernel128<<<ceil_div(rows, 8), 256>>>(D, dout, out, rows, C, NH);
    else
        flash_row_dot_kernel<<<ceil_div(rows * NH, 256), 256>>>(D, dout, out, rows, C, NH);
    launchCheck();
#else
    attention_range_row_dot_host(D, dout, out, rows, C, NH);
#endif
}
// the fp32 output of the last range, in floatX
inline void attention_range_output(floatX* out, const float* acc, size_t n) {
#ifdef __CUDACC__
    if (n == 0) return;
    if (packs_fit(n, {out, acc}))
        flash_output_kernel128<<<ceil_div(n / Packed128<floatX>::size, 256), 256>>>(out, acc, n);
    else
        flash_output_kernel<<<ceil_div(n, 256), 256>>>(out, acc, n);
    launchCheck();
#else
    attention_range_output_host(out, acc, n);
#endif
}
// dqkv (rows, 3C) floatX = [dq | dk dv] from the fp32 sums
inline void attention_range_gradients(floatX* dqkv, const float* dq, const float* dkv, size_t rows, int C) {
#ifdef __CUDACC__
    if (rows == 0) return;
    if (packs_fit(C, {dqkv, dq, dkv}))
        flash_gradients_kernel128<<<ceil_div(rows * 3 * C / Packed128<floatX>::size, 256), 256>>>(dqkv, dq, dkv, rows,
                                                                                                  C);
    else
        flash_gradients_kernel<<<ceil_div(rows * 3 * C, 256), 256>>>(dqkv, dq, dkv, rows, C);
    launchCheck();
#else
    attention_range_gradients_host(dqkv, dq, dkv, rows, C);
#endif
}
// the [k | v] rows (2C) of qkv rows (3C): what ring attention sends (cp.h)
inline void attention_pack_kv(floatX* kv, const floatX* qkv, size_t rows, int C) {
#ifdef __CUDACC__
    if (rows == 0) return;
    flash_pack_kv_kernel<<<ceil_div(rows * 2 * C, 256), 256>>>(kv, qkv, rows, C);
    launchCheck();
#else
    attention_pack_kv_host(kv, qkv, rows, C);
#endif
}

// ---------------------------------------------------------------- one rank's attention
// the fp32 scratch of one rank's attention (and of each ring step, cp.h): the output and dq
// (rows, C), dk dv (rows, 2C), D (rows, NH); one for all layers
struct AttentionScratch { float *out, *dq, *dkv, *D; };

// out (B,T,C) and lse (B,T,NH) from qkv (B,T,3C): one causal range, then the output in floatX.
// The GPU build's tensor-core kernels write it in floatX themselves: flash, -fa, picks them (1 the
// WMMA kernels, flash_wmma_head; 2 the mma.sync ones, where flash_kernels_refusal let train_gpt take them);
// the others (the CPU build, the CUDA-core kernels: the fp32 build's, and any build's at head sizes other
// than 16, 32, 64, 128) fill the fp32 scratch and a pass rounds it
inline void attention_forward(floatX* out, float* lse, const floatX* qkv, const AttentionScratch& s, int B, int T,
                              int C, int NH, int flash) {
    AttentionRange a = attention_whole_sequences(B, T, C, NH);
#ifdef __CUDACC__
    if (flash == 2) { attention_whole_forward_mma(out, lse, qkv, B, T, C, NH); return; }
    if (flash_wmma_head(C / NH)) { attention_whole_forward_wmma(a, qkv, qkv + C, out, lse); return; }
#else
    (void)flash;
#endif
    attention_range_forward(a, qkv, qkv + C, s.out, lse);
    attention_range_output(out, s.out, (size_t)B * T * C);
}
// dqkv (B,T,3C), overwritten, from dout and the forward's out and lse: D = dout . out, then dq and
// dk dv, written in floatX by the WMMA kernels, else summed in the zeroed fp32 scratch and rounded
inline void attention_backward(floatX* dqkv, const floatX* dout, const floatX* out, const float* lse, const floatX* qkv,
                               const AttentionScratch& s, int B, int T, int C, int NH, int flash) {
    size_t rows = (size_t)B * T;
    AttentionRange a = attention_whole_sequences(B, T, C, NH);
    attention_range_row_dot(s.D, dout, out, (int)rows, C, NH);
#ifdef __CUDACC__
    if (flash == 2) { attention_whole_backward_mma(dqkv, dout, qkv, lse, s.D, B, T, C, NH); return; }
    if (flash_wmma_head(C / NH)) { attention_whole_backward_wmma(a, qkv, qkv + C, dqkv, dout, lse, s.D); return; }
#else
    (void)flash;
#endif
    device_zero(s.dq, rows * C * sizeof(float));
    device_zero(s.dkv, rows * 2 * C * sizeof(float));
    attention_range_backward(a, qkv, qkv + C, s.dq, s.dkv, dout, lse, s.D);
    attention_range_gradients(dqkv, s.dq, s.dkv, rows, C);
}

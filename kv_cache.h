/*
kv_cache.h: sampling with a KV cache. The next token needs the logits of the last position only,
and attention is causal: position j's key and value depend on tokens 0..j alone, so once computed
they never change. A full forward per new token recomputes all of them; the cache keeps every
layer's [k | v] of each position so far, and a new token is one row through the model:

    position t     x = wte[token] + wpe[t]
    each layer     [q | k | v] = ln1(x) W_qkv + b_qkv          cache[l][t] = [k | v]
                   a = softmax(q K[0..t]^T / sqrt(hs)) V[0..t]  (per head: one query, t + 1 keys)
                   x = x + a W_proj + b_proj
                   x = x + gelu(ln2(x) W_fc + b_fc) W_fcproj + b_fcproj
    the head       logits = lnf(x) wte^T

              cache[l]  (T rows of [k | v], 2C each)
              +--------+--------+--------+-- - - --+
              | k0 v0  | k1 v1  | k2 v2  |         |   <- row t written by token t's own pass
              +--------+--------+--------+-- - - --+
                  ^        ^        ^
                  +--------+--------+---- q_t of the new token reads rows 0..t

    per token      full forward over t tokens: t rows through every GEMM, ~t^2/2 attention dot
                   products; with the cache: 1 row, t + 1 dot products (the weights read once either way)
    memory         L x T x 2C floatX (GPT-2 124M at T = 1024 in bf16: 37.7 MB), one row of scratch

The one-query attention is kernels/attention.cuh's AttentionRange: 1 query row against t + 1 key rows of
stride 2C, not causal (every cached key is in its past), the kernels ring attention runs; the
rest are the training forward's own launchers at N = 1. The cache holds T positions (the model's
sequence length): past them the window slides, every position's key changes, and each new token
is a full forward again, as without the cache. One rank's whole model only: under -tp, -pp or -cp
a position's work is split over ranks, and sampling takes the full forward (train_gpt.cu:
next_token_logits); dp ranks each compute the same tokens (ZeRO-3 gathers each layer as it goes).
Applied in train_gpt.cu: gpt2_sample (the cache) and gpt2_decode (the row through the model).
*/
#pragma once
// defines: KVCache, kv_cache_allocate, kv_cache_free, kv_cache_embed, kv_cache_block, kv_cache_head
#include "kernels/attention.cuh"  // defines: AttentionRange, attention_range_forward, attention_pack_kv, ...
#include "kernels/encoder.cuh"    // defines: encoder_forward, VocabRange
#include "kernels/gelu.cuh"       // defines: gelu_forward, residual_forward
#include "kernels/layernorm.cuh"  // defines: layernorm_forward, residual_layernorm_forward
#include "kernels/matmul.cuh"     // defines: matmul_forward
#include "gpt2.h"                 // defines: LayerParameters, EmbeddingParameters, FinalNormParameters

struct KVCache {
    int L, capacity, C, NH;  // layers, positions it holds, channels, heads
    int length;              // positions cached so far
    floatX* kv;              // (L, capacity, 2C): each layer's [k | v] rows
    floatX *x, *ln, *qkv, *atty, *proj, *fch, *fch_gelu, *residual;  // one row each: C, C, 3C, C, C, 4C, 4C, C
    float *att, *lse, *mean, *rstd;  // the attention's fp32 output (C), its lse (NH), a LayerNorm's statistics
    int* token;              // the token, uploaded
};

inline KVCache kv_cache_allocate(int L, int capacity, int C, int NH) {
    KVCache k = {L, capacity, C, NH, 0};
    k.kv = (floatX*)device_malloc((size_t)L * capacity * 2 * C * sizeof(floatX));
    floatX** rows[] = {&k.x, &k.ln, &k.qkv, &k.atty, &k.proj, &k.fch, &k.fch_gelu, &k.residual};
    int widths[] = {C, C, 3 * C, C, C, 4 * C, 4 * C, C};
    for (int i = 0; i < 8; i++) *rows[i] = (floatX*)device_malloc((size_t)widths[i] * sizeof(floatX));
    k.att = (float*)device_malloc((size_t)C * sizeof(float));
    k.lse = (float*)device_malloc((size_t)NH * sizeof(float));
    k.mean = (float*)device_malloc(sizeof(float));
    k.rstd = (float*)device_malloc(sizeof(float));
    k.token = (int*)device_malloc(sizeof(int));
    return k;
}
inline void kv_cache_free(KVCache* k) {
    for (void* p : {(void*)k->kv, (void*)k->x, (void*)k->ln, (void*)k->qkv, (void*)k->atty, (void*)k->proj,
                    (void*)k->fch, (void*)k->fch_gelu, (void*)k->residual, (void*)k->att, (void*)k->lse,
                    (void*)k->mean, (void*)k->rstd, (void*)k->token})
        device_free(p);
}

// x = wte[token] + wpe[position], position = the cache's length
inline void kv_cache_embed(KVCache* k, const EmbeddingParameters& e, int token, VocabRange vocab) {
    host_to_device(k->token, &token, sizeof(int));
    encoder_forward(k->x, k->token, e.wte, e.wpe + (size_t)k->length * k->C, 1, 1, k->C, vocab);
}

// layer l on the row x, in place; its k and v become row `length` of the layer's cache
inline void kv_cache_block(KVCache* k, int l, const LayerParameters& w) {
    int C = k->C, t = k->length;
    floatX* cache = k->kv + (size_t)l * k->capacity * 2 * C;
    layernorm_forward(k->ln, k->mean, k->rstd, k->x, w.ln1w, w.ln1b, 1, C);
    matmul_forward(k->qkv, k->ln, w.qkvw, w.qkvb, 1, C, 3 * C);
    attention_pack_kv(cache + (size_t)t * 2 * C, k->qkv, 1, C);
    // sequence 0's query 0 (the row qkv) against keys 0..t of the cache (rows of 2C), all of them in its past
    AttentionRange one = {1, 0, k->capacity, 0, 1, 1, t + 1, C, k->NH, 2 * C, false, true};
    attention_range_forward(one, k->qkv, cache, k->att, k->lse);
    attention_range_output(k->atty, k->att, C);
    matmul_forward(k->proj, k->atty, w.attprojw, w.attprojb, 1, C, C);
    residual_layernorm_forward(k->residual, k->ln, k->mean, k->rstd, k->x, k->proj, w.ln2w, w.ln2b, 1, C);
    matmul_forward(k->fch, k->ln, w.fcw, w.fcb, 1, C, 4 * C);
    gelu_forward(k->fch_gelu, k->fch, 4 * C);
    matmul_forward(k->proj, k->fch_gelu, w.fcprojw, w.fcprojb, 1, 4 * C, C);
    residual_forward(k->x, k->residual, k->proj, C);
}

// the logits of the row (Vp floatX) after the last layer; the position is cached
inline void kv_cache_head(KVCache* k, const FinalNormParameters& h, const EmbeddingParameters& e, floatX* logits,
                          int Vp) {
    layernorm_forward(k->ln, k->mean, k->rstd, k->x, h.lnfw, h.lnfb, 1, k->C);
    matmul_forward(logits, k->ln, e.wte, NULL, 1, k->C, Vp);
    k->length++;
}

/*
recompute.h: activation recompute: keep fewer activations, rebuild them in the backward.

The forward of layer l produces 13 tensors that its backward reads. Keeping all
of them for every layer is the largest memory cost of training at long sequence
lengths; recomputing some of them costs a little compute instead.
    -r 0  keep everything
    -r 1  GELU outputs are recomputed from the fc outputs (llm.c's -r 1)
    -r 2  also the LayerNorm outputs, from their inputs (mean and rstd are recomputed too)
    -r 3  keep only each block's output (the next block's input): the backward of a
          block first runs its whole forward again
A tensor that is not kept is allocated once, for one layer, and every layer reuses
it. Recomputation runs the same kernels on the same inputs, so the losses are
bit-identical across levels.

Bytes kept per layer, with N = B*T tokens, X = sizeof(floatX), heads and channels
per tensor-parallel rank NH/tp and C/tp, stats (mean, rstd) in fp32:
    -r 0: X*(4*N*C + 12*N*C/tp) + 16*N + 4*N*NH/tp
    -r 1: X*(4*N*C +  8*N*C/tp) + 16*N + 4*N*NH/tp
    -r 2: X*(2*N*C +  8*N*C/tp) + 16*N + 4*N*NH/tp
    -r 3: X*N*C
(4*N*NH/tp: flash attention's log-sum-exp per token and head, kernels/attention.cuh, in place of
the (B, NH, T, T) probabilities: every term is per token, so the bytes per token do not depend on T.)
With -sp (tp.h) the terms in N*C and 16*N hold N/tp tokens: -r 0 keeps X*(4*N*C/tp + 12*N*C/tp)
+ 16*N/tp + 4*N*NH/tp. With -cp (cp.h) N is B*T/cp.
plus, once, one layer of every tensor that is not kept. Read recompute_keeps first.

Applied in gpt2.h: activation_buffer_list (what is allocated per layer or once) and
layer_activations (where layer l's tensors are); train_gpt.cu: recompute_block, which
blocks_backward calls before each block_backward: it reruns block_ln1/block_ln2/block_gelu, or
the whole block_forward at -r 3.
*/
#pragma once
// defines: LayerActivation, recompute_keeps, layer_activation_elements, layer_activation_bytes,
//          layer_activation_element_bytes, is_statistic
#include <stddef.h>  // defines: size_t
#include "precision.h"  // defines: floatX

enum LayerActivation { LN1, LN1_MEAN, LN1_RSTD, QKV, ATTY, LSE, RESIDUAL2, LN2, LN2_MEAN, LN2_RSTD,
                       FCH, FCH_GELU, RESIDUAL3, NUM_LAYER_ACTIVATIONS };

// does recompute level `level` keep tensor t for every layer?
inline bool recompute_keeps(int level, int t) {
    switch (t) {
        case RESIDUAL3: return true;         // the next block's input: what level 3 rebuilds from
        case FCH_GELU: return level < 1;
        case LN1: case LN2: return level < 2;
        default: return level < 3;
    }
}

inline bool is_statistic(int t) { return t == LN1_MEAN || t == LN1_RSTD || t == LN2_MEAN || t == LN2_RSTD; }

// the element type of tensor t: fp32 for the LayerNorm statistics and attention's log-sum-exp
inline size_t layer_activation_element_bytes(int t) {
    return is_statistic(t) || t == LSE ? sizeof(float) : sizeof(floatX);
}

// elements of tensor t for one layer on one rank; T is the tokens of a sequence the rank holds
// (T/cp under -cp); with sequence parallelism (tp.h, -sp) the rank holds N/tp tokens of the
// LayerNorms and the residual stream
inline size_t layer_activation_elements(int t, int B, int T, int C, int NH, int tp, bool sequence_parallel) {
    size_t N = (size_t)B * T, N_held = sequence_parallel ? N / tp : N;
    switch (t) {
        case QKV: return 3 * N * C / tp;
        case ATTY: return N * C / tp;
        case LSE: return N * (NH / tp);
        case FCH: case FCH_GELU: return 4 * N * C / tp;
        case LN1_MEAN: case LN1_RSTD: case LN2_MEAN: case LN2_RSTD: return N_held;
        default: return N_held * C;  // LN1, RESIDUAL2, LN2, RESIDUAL3
    }
}

inline size_t layer_activation_bytes(int t, int B, int T, int C, int NH, int tp, bool sequence_parallel) {
    return layer_activation_elements(t, B, T, C, NH, tp, sequence_parallel) * layer_activation_element_bytes(t);
}

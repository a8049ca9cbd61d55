/*
train_gpt.cu: GPT-2 training: the model, the step and the loop, in host code.

This file is the model and the program: a block's forward and backward, a pipeline stage
(embedding, blocks, final LayerNorm, LM head and loss), the training step, validation,
sampling, the loop and main. What the model runs on, the part of GPT-2 this rank holds (its
layout, parameters, activations and their buffers), is gpt2.h. It calls *ops* (kernels/,
adamw.h) and never a CUDA, cuBLAS or NCCL API, so it compiles twice:
    nvcc            -> train_gpt      ops are CUDA kernels and cuBLAS
    g++ -x c++      -> train_gpt_cpu  ops are their host twins and OpenBLAS
Every buffer is "device" memory from kernels/common.cuh; on the CPU build that is
host memory, and the same code runs.

GPT-2: learned positions, pre-LayerNorm blocks, tanh-GELU MLP, causal attention,
LM head tied to the token embedding wte. Per block, with x the residual stream:
    x = x + attproj(attention(qkv(ln1(x))))
    x = x + fcproj(gelu(fc(ln2(x))))
One optimizer step (train_step) on micro-batches of (B,T) tokens:
    for each micro-batch, in the order the pipeline schedule says:
        forward   embed -> blocks -> final LayerNorm -> logits -> loss * S/tokens
        backward  the same in reverse, each layer's gradient summed into the step's
    reduce the gradients over DP (ZeRO), sum the tied wte's two copies (pp > 1)
    norm -> finite? (loss scaling) -> clip -> AdamW -> gather the updated parameters

Where each technique enters, at a call a reader can see:
  ZeRO (zero.h)        zero_gather_unit before a unit is used, zero_reduce_unit after
                       its backward, the zero_* calls of train_step; no-ops where the
                       stage does not need them. Data parallelism is each rank reading
                       its slice of the batch (dataloader.h).
  tensor parallelism   tp_f_forward/tp_g_forward and their backward mirrors around each
  (tp.h)               column-then-row-parallel pair; the vocabulary-parallel embedding
                       and loss. A rank holds 3C/tp rows of qkvw, C/tp columns of
                       attprojw, and so on; with tp = 1 this is the single-GPU model.
                       -sp: f and g gather and scatter the tokens, and the LayerNorms and
                       the residual stream hold B*T/tp of them (tokens_held).
  context parallelism  a rank holds T_local = T/cp tokens of each sequence (tokens_of_rank);
  (cp.h)               attention goes round the ring (sequence_attention_forward/backward),
                       the embedding adds each chunk's positions (for_each_position_run).
                       Without -cp, T_local is T.
  pipeline (pipeline.h)  the model is written as a stage; pipeline_stage hands it to
                       run_schedule (pipeline_run.h), which runs this stage's list. One stage:
                       forward k, backward k for each micro-batch, and that is all.
                       A block's backward is two halves, block_backward_input (B) and
                       block_backward_weights (W), which ZB-H1 runs apart. Under
                       interleaved 1F1B a stage holds V chunks of layers (ModelLayout's
                       chunks), and an activation set says which chunk it runs.
  loss scaling         train_step: dloss carries the scale S, loss_scaler_update
  (loss_scale.h)       decides, AdamW's grad_scale divides it out.
  recompute            recompute_block, just before each block's backward.
  (recompute.h)
  mixed precision      floatX everywhere, fp32 master and stochastic rounding in AdamW.
  (precision.h)
The plumbing lives in options.h (flags), model_file.h (files, checkpoints) and
accounting.h (-plan, the measured ledger); a step's copies without host waits in staging.h.

Read in this order: block_forward, block_backward, stage_forward, stage_backward,
pipeline_stage, train_step, train_loop, main.
*/
#include <stdio.h>     // defines: printf, fopen
#include <stdlib.h>    // defines: malloc, atoi, getenv
#include <limits.h>    // defines: INT_MAX
#include <signal.h>    // defines: raise, SIGSTOP, SIGKILL (TRAIN_GPT_STOP_AT_STEP, _KILL_AT_STEP)
#include <string.h>    // defines: strcmp, strpbrk
#include <math.h>      // defines: sqrt, exp, fmaxf
#include <stdint.h>    // defines: uint64_t
#include <sys/stat.h>  // defines: mkdir
#include <algorithm>   // defines: std::copy, std::max
#include <chrono>      // defines: std::chrono::steady_clock
#include <string>      // defines: std::string, std::to_string
#include <utility>     // defines: std::swap
#include <vector>      // defines: std::vector
#include "precision.h"             // defines: floatX, to_float, from_float, PRECISION_NAME
#include "kernels/common.cuh"      // defines: device_init, device_malloc, host_to_device, fail, file_exists (base.h)
#include "kernels/encoder.cuh"     // defines: encoder_forward, encoder_backward, VocabRange
#include "kernels/layernorm.cuh"   // defines: layernorm_forward, layernorm_backward
#include "kernels/matmul.cuh"      // defines: matmul_forward, matmul_backward, bias_forward
#include "kernels/attention.cuh"   // defines: attention_forward, attention_backward
#include "kernels/gelu.cuh"        // defines: gelu_forward, residual_forward
#include "kernels/gelu_fusion.cuh"  // defines: matmul_gelu_forward, matmul_gelu_backward_input
#include "kernels/gradients.cuh"   // defines: global_norm_squared, gradient_accumulate
#include "adamw.h"                 // defines: adamw_update (zero.h calls it)
#include "loss_scale.h"            // defines: LossScaler, loss_scaler_init, loss_scaler_update
#include "staging.h"               // defines: HostStaging, staging_upload, staging_download_floats, staging_pending_sum
#include "recompute.h"             // defines: recompute_keeps, layer_activation_bytes
#include "lr_schedule.h"           // defines: learning_rate_at, lr_schedule_from_name
#include "random.h"                // defines: Rng, rng_normal, rng_uniform, random_u32
#include "dataloader.h"            // defines: DataLoader, dataloader_init, dataloader_next_batch
#include "tokenizer/decoder.h"     // defines: Decoder, decoder_load, decode_append, json_escape_utf8
#include "comm.h"                  // defines: Collectives, comm_init, comm_all_reduce_scalars, comm_fail_all
#include "zero.h"                  // defines: Zero, zero_unit, zero_gather_unit, zero_reduce_unit, ...
#include "tp.h"                    // defines: tp_g_forward, tp_f_backward, tp_crossentropy, TensorPartition
#include "cp.h"  // defines: ring_attention_forward, ring_attention_backward, cp_batch_index, RingBuffers
#include "mfu.h"                   // defines: model_flops_per_token, world_peak_flops, mfu_of, PeakFlops
#include "pipeline_run.h"          // defines: PipelineStage, run_schedule (pipeline.h: pipeline_schedule)
#include "pipeline_sim.h"          // defines: pipeline_bubble_fraction, schedule_bubble_formula
#include "checkpoint.h"            // defines: checkpoint_model_path, check_output_dir
#include "run_dir.h"               // defines: check_run_files
#include "options.h"               // defines: TrainConfig, parse_args, print_usage
#include "gpt2.h"                  // defines: GPT2, ModelLayout, ActivationTensors, gpt2_allocate_activations, ...
#include "model_file.h"            // defines: read_model_file, init_model_values, reorder_part, write_checkpoint, ...
#include "accounting.h"  // defines: gpt2_plan, print_plans, measured_accounting_json, bubble_json, check_memory
#include "outlier.h"     // defines: OutlierWindows, outlier_step
#include "hellaswag.h"   // defines: EvalExample, eval_file_read, eval_batch_fill, eval_batch_answers, ...
#include "llmc.h"        // defines: MainLog, main_log_open, main_log_line, main_log_done, check_llmc_flags
#include "kv_cache.h"    // defines: KVCache, kv_cache_allocate, kv_cache_embed, kv_cache_block, kv_cache_head
#include "run_checks.h"  // defines: check_batch_flags
#include "run_report.h"  // defines: StepResult, print_run_header, print_step, log_step, write_trace

// ----------------------------------------------------------------------------
// a block: forward and backward

// the input of block l (local index): the chunk's input, or the previous block's output
inline floatX* block_input(GPT2* model, const ActivationTensors& a, int l, int B, int T_local) {
    return l == a.first_layer ? a.input : layer_activations(model, a, l - 1, B, T_local).residual3;
}
// what this stage (its chunk of set a) hands to the next: its last block's output
inline floatX* stage_output(GPT2* model, const ActivationTensors& a, int B, int T_local) {
    return block_input(model, a, a.first_layer + a.layers, B, T_local);
}
// block l's parameters and their gradients, in its ZeRO unit (gathered under ZeRO-3)
inline LayerParameters block_params(GPT2* model, int l) {
    return layer_parameters(model->zero.units[layer_unit(l)], zero_unit(&model->zero, layer_unit(l)).params);
}
inline LayerParameters block_grads(GPT2* model, int l) {
    return layer_parameters(model->zero.units[layer_unit(l)], zero_unit(&model->zero, layer_unit(l)).grads);
}

// the three pieces of a block that recompute.h may drop and rebuild: each is one call, made
// again, before the block's backward, by recompute_block; block_forward makes ln2 together with
// the residual add before it (residual_layernorm_forward: one pass over the rows), and the GELU
// together with the fc GEMM (matmul_gelu_forward: under -ge in its epilogue)
inline void block_ln1(GPT2* model, const ActivationTensors& a, int l, int B, int T_local) {
    LayerParameters w = block_params(model, l);
    LayerActivations la = layer_activations(model, a, l, B, T_local);
    layernorm_forward(la.ln1, la.ln1_mean, la.ln1_rstd, block_input(model, a, l, B, T_local), w.ln1w, w.ln1b,
                      tokens_held(model, B * T_local), model->config.channels);
}
inline void block_ln2(GPT2* model, const ActivationTensors& a, int l, int B, int T_local) {
    LayerParameters w = block_params(model, l);
    LayerActivations la = layer_activations(model, a, l, B, T_local);
    layernorm_forward(la.ln2, la.ln2_mean, la.ln2_rstd, la.residual2, w.ln2w, w.ln2b, tokens_held(model, B * T_local),
                      model->config.channels);
}
inline void block_gelu(GPT2* model, const ActivationTensors& a, int l, int B, int T_local) {
    LayerActivations la = layer_activations(model, a, l, B, T_local);
    gelu_forward(la.fch_gelu, la.fch, (size_t)B * T_local * 4 * model->config.channels / model->layout.tp);
}

// attention of the rank's heads over whole sequences: one rank's (kernels/attention.cuh), or under
// -cp, where a rank holds B sequences' T/cp zig-zag tokens (T_local), round the ring (cp.h)
inline void sequence_attention_forward(GPT2* model, const LayerActivations& la, int B, int T_local) {
    int C_rank = model->config.channels / model->layout.tp, NH_rank = model->config.num_heads / model->layout.tp;
    const ScratchTensors& s = model->scratch;
    if (model->layout.cp > 1)
        ring_attention_forward(&model->comm->cp, la.atty, la.lse, la.qkv, s.attention, s.ring, B, T_local, C_rank,
                               NH_rank);
    else attention_forward(la.atty, la.lse, la.qkv, s.attention, B, T_local, C_rank, NH_rank, model->flash);
}
inline void sequence_attention_backward(GPT2* model, const LayerActivations& la, floatX* dqkv, const floatX* datty,
                                        int B, int T_local) {
    int C_rank = model->config.channels / model->layout.tp, NH_rank = model->config.num_heads / model->layout.tp;
    ScratchTensors& s = model->scratch;
    if (model->layout.cp > 1)
        ring_attention_backward(&model->comm->cp, dqkv, datty, la.atty, la.lse, la.qkv, s.attention, s.ring, B, T_local,
                                C_rank, NH_rank);
    else attention_backward(dqkv, datty, la.atty, la.lse, la.qkv, s.attention, B, T_local, C_rank, NH_rank,
                            model->flash);
}

// block l (local index) on its input, writing the layer's activations; its unit must be gathered.
// Each matrix pair is f, column-parallel matrix, local work, row-parallel matrix, g (tp.h). The
// LayerNorms and the residual adds run on the tokens this rank holds (tokens_held: all N, or N/tp
// under -sp, when f gathers the LayerNorm's output and g scatters the sum); the pair on all N.
inline void block_forward(GPT2* model, const ActivationTensors& a, int l, int B, int T_local) {
    const GPT2Config& c = model->config;
    int C = c.channels, C_rank = C / model->layout.tp, N = B * T_local;
    TensorParallel tp = tensor_parallel(model, N);
    ScratchTensors& s = model->scratch;
    LayerParameters w = block_params(model, l);
    LayerActivations la = layer_activations(model, a, l, B, T_local);
    // attention: qkv column-parallel (this rank's heads), attproj row-parallel
    block_ln1(model, a, l, B, T_local);
    floatX* ln1 = tp_f_forward(tp, la.ln1);  // all N tokens
    matmul_forward(la.qkv, ln1, w.qkvw, w.qkvb, N, C, 3 * C_rank);
    sequence_attention_forward(model, la, B, T_local);
    matmul_forward(s.proj, la.atty, w.attprojw, tp_bias_before_g(tp, w.attprojb), N, C_rank, C);
    floatX* proj = tp_g_forward(tp, s.proj);  // the sum, on the tokens this rank holds
    tp_bias_after_g(tp, proj, w.attprojb, C);  // added once: to the sum over TP ranks
    // MLP: fc column-parallel, fcproj row-parallel; first residual2 = input + proj and ln2 of it
    floatX* input = block_input(model, a, l, B, T_local);
    residual_layernorm_forward(la.residual2, la.ln2, la.ln2_mean, la.ln2_rstd, input, proj, w.ln2w, w.ln2b,
                               tokens_held(model, N), C);
    floatX* ln2 = tp_f_forward(tp, la.ln2);
    matmul_gelu_forward(la.fch_gelu, la.fch, ln2, w.fcw, w.fcb, N, C, 4 * C_rank, model->gelu_fusion >= 1);
    matmul_forward(s.proj, la.fch_gelu, w.fcprojw, tp_bias_before_g(tp, w.fcprojb), N, 4 * C_rank, C);
    proj = tp_g_forward(tp, s.proj);
    tp_bias_after_g(tp, proj, w.fcprojb, C);
    residual_forward(la.residual3, la.residual2, proj, tp.n_held);
}

// rebuilds what recompute level r did not keep of block l, just before its backward
inline void recompute_block(GPT2* model, const ActivationTensors& a, int l, int B, int T_local) {
    int r = model->recompute;
    if (r >= 3) { block_forward(model, a, l, B, T_local); return; }
    if (r >= 2) { block_ln1(model, a, l, B, T_local); block_ln2(model, a, l, B, T_local); }
    if (r >= 1) block_gelu(model, a, l, B, T_local);
}

// block l's backward in two halves, which pipeline.h's ZB-H1 runs apart (its "B" and "W"). The input
// half is the mirror of block_forward, g's backward then f's around each pair: from dout, the
// gradient of the block's output, to dinp, that of its input (the same buffer, or another), leaving
// the gradients of the six weighted ops' outputs in `d` for the weight half. The residual stream:
//     d(residual3) = dout: fcproj's output gradient, handed to d.fcproj by g's backward (a copy, or
//                    under -sp all N tokens gathered; nothing when d.fcproj is dout itself)
//     d(residual2) = that + ln2's input gradient: in d.attproj (-sp: added into dout, then gathered)
//     dinp         = d(residual2) + ln1's input gradient
// Given dw (the weight half follows at once), the LayerNorms' parameter gradients are summed in the
// same passes, and the weight half leaves them
inline void block_backward_input(GPT2* model, const ActivationTensors& a, int l, int B, int T_local,
                                 const LayerOutputGradients& d, floatX* dout, floatX* dinp, const LayerParameters* dw) {
    const GPT2Config& c = model->config;
    int C = c.channels, C_rank = C / model->layout.tp, N = B * T_local;
    int N_held = tokens_held(model, N);
    TensorParallel tp = tensor_parallel(model, N);
    ScratchTensors& s = model->scratch;
    LayerParameters w = block_params(model, l);
    LayerActivations la = layer_activations(model, a, l, B, T_local);
    floatX *dln2 = tp_all_tokens(tp, d.ln2), *dln1 = tp_all_tokens(tp, d.ln1);  // before f
    // MLP
    tp_g_backward(tp, dout, d.fcproj);
    matmul_gelu_backward_input(d.fc, d.fcproj, w.fcprojw, la.fch, N, 4 * C_rank, C, model->gelu_fusion >= 2);
    matmul_backward_input(dln2, d.fc, w.fcw, N, C, 4 * C_rank);
    tp_f_backward(tp, dln2, d.ln2);
    floatX* dresidual2 = tp.sequence_parallel ? dout : d.attproj;  // the gradient of residual2
    layernorm_backward_both(dresidual2, dout, dw ? dw->ln2w : NULL, dw ? dw->ln2b : NULL, d.ln2, la.residual2, w.ln2w,
                            la.ln2_mean, la.ln2_rstd, N_held, C, s.partials);
    // attention
    tp_g_backward(tp, dresidual2, d.attproj);
    matmul_backward_input(s.datty, d.attproj, w.attprojw, N, C_rank, C);
    sequence_attention_backward(model, la, d.qkv, s.datty, B, T_local);
    matmul_backward_input(dln1, d.qkv, w.qkvw, N, C, 3 * C_rank);
    tp_f_backward(tp, dln1, d.ln1);
    layernorm_backward_both(dinp, dresidual2, dw ? dw->ln1w : NULL, dw ? dw->ln1b : NULL, d.ln1,
                            block_input(model, a, l, B, T_local), w.ln1w, la.ln1_mean, la.ln1_rstd, N_held, C,
                            s.partials);
}
// the weight half: block l's parameter gradients accumulate, from `d` and the inputs its forward kept (or that
// recompute_block rebuilt). No weight is read: weight gradient = output gradient^T x input,
// LayerNorm's = sums over the tokens. Nothing crosses a rank except under -sp, where f gathers the
// LayerNorms' outputs again (the forward kept only this rank's tokens of them) and a LayerNorm's
// gradient sums over this rank's tokens only (train_step sums it over TP: sum_layernorm_gradients)
inline void block_backward_weights(GPT2* model, const ActivationTensors& a, int l, int B, int T_local,
                                   const LayerOutputGradients& d, bool layernorms_done) {
    int C = model->config.channels, C_rank = C / model->layout.tp, N = B * T_local, N_held = tokens_held(model, N);
    TensorParallel tp = tensor_parallel(model, N);
    ScratchTensors& s = model->scratch;
    LayerParameters dw = block_grads(model, l);
    LayerActivations la = layer_activations(model, a, l, B, T_local);
    matmul_backward_weight(dw.fcprojw, NULL, d.fcproj, la.fch_gelu, N, 4 * C_rank, C, s.partials);
    floatX* ln2 = tp_f_forward(tp, la.ln2);  // -sp: ln2's N tokens again, as in f
    matmul_backward_weight(dw.fcw, NULL, d.fc, ln2, N, C, 4 * C_rank, s.partials);
    matmul_backward_weight(dw.attprojw, NULL, d.attproj, la.atty, N, C_rank, C, s.partials);
    floatX* ln1 = tp_f_forward(tp, la.ln1);  // and ln1's
    matmul_backward_weight(dw.qkvw, NULL, d.qkv, ln1, N, C, 3 * C_rank, s.partials);
    // the four biases' column sums in one launch, the two LayerNorms' in another (unless the input half did)
    bias_backward_many({{dw.fcprojb, d.fcproj, C}, {dw.fcb, d.fc, 4 * C_rank}, {dw.attprojb, d.attproj, C},
                        {dw.qkvb, d.qkv, 3 * C_rank}}, N, s.partials);
    if (!layernorms_done)
        layernorm_backward_params_many(
            {{dw.ln2w, dw.ln2b, d.ln2, la.residual2, la.ln2_mean, la.ln2_rstd},
             {dw.ln1w, dw.ln1b, d.ln1, block_input(model, a, l, B, T_local), la.ln1_mean, la.ln1_rstd}},
            N_held, C, s.partials);
}
// both in turn, through the scratch's one layer of output gradients: the backward of every
// schedule but ZB-H1's later stages. Where dinp is not dout, fcproj's output gradient is dout as it
// lies (no copy): the weight half reads it before the next block writes its input's gradient there.
// The input half sums the LayerNorms' parameter gradients in its LayerNorm passes (one read of their
// inputs), the weight half does not
inline void block_backward(GPT2* model, const ActivationTensors& a, int l, int B, int T_local, floatX* dout,
                           floatX* dinp) {
    LayerOutputGradients d = model->scratch.layer_grads;
    if (dinp != dout) d.fcproj = dout;
    LayerParameters dw = block_grads(model, l);
    block_backward_input(model, a, l, B, T_local, d, dout, dinp, &dw);
    block_backward_weights(model, a, l, B, T_local, d, true);
}

// ----------------------------------------------------------------------------
// the stages: embed (first stage), blocks (every stage), head and loss (last stage),
// each with its forward and backward. With one stage they are the whole model.

struct MicroBatch { const int* inputs; const int* targets; };  // host tokens (B,T); targets NULL: no loss

// vocab-parallel embedding: this rank's wte rows (positions added on TP rank 0 only) for all B*T
// tokens, then g: summed (-sp: this rank's tokens of the sum)
inline void embed_forward(GPT2* model, const ActivationTensors& a, const int* tokens, int B, int T_local) {
    Zero* z = &model->zero;
    int C = model->config.channels;
    TensorParallel tp = tensor_parallel(model, B * T_local);
    tp.all_tokens = model->scratch.proj, tp.summed = a.input;  // -sp: the N tokens in proj, g's sum into the input
    staging_upload(&model->staging, model->scratch.inputs, tokens, (size_t)B * T_local * sizeof(int));
    EmbeddingParameters e = embedding_parameters(z->units[0], zero_unit(z, 0).params);
    const floatX* positions = model->layout.tp_rank == 0 ? e.wpe : NULL;
    floatX* whole = tp_all_tokens(tp, a.input);
    for_each_position_run(model, B, T_local, [&](size_t first, int position, int run) {
        encoder_forward(whole + first * C, model->scratch.inputs + first, e.wte,
                        positions ? positions + (size_t)position * C : NULL, B, run, C, vocab_range(model));
    });
    tp_g_forward(tp, whole);  // the sum in a.input either way
}
// the embedding's backward (g's: the identity, or -sp's gather): this rank's wte rows, and wpe
inline void embed_backward(GPT2* model, const int* tokens, int B, int T_local) {
    Zero* z = &model->zero;
    int C = model->config.channels;
    TensorParallel tp = tensor_parallel(model, B * T_local);
    EmbeddingParameters de = embedding_parameters(z->units[0], zero_unit(z, 0).grads);
    floatX* dwhole = tp_all_tokens(tp, model->scratch.dresidual);
    tp_g_backward(tp, model->scratch.dresidual, dwhole);
    for_each_position_run(model, B, T_local, [&](size_t first, int position, int run) {
        int* staged = (int*)staging_take(&model->staging, encoder_bucket_ints(B, run) * sizeof(int));
        encoder_backward(de.wte, de.wpe + (size_t)position * C, dwhole + first * C, tokens + first,
                         model->scratch.token_buckets, staged, B, run, C, vocab_range(model));
    });
}

// under ZeRO-3 each layer is gathered before it runs, the next one beside it (-overlap 1)
inline void blocks_forward(GPT2* model, const ActivationTensors& a, int B, int T_local) {
    int end = a.first_layer + a.layers;
    for (int l = a.first_layer; l < end; l++) {
        zero_gather_unit(&model->zero, layer_unit(l), l + 1 < end ? layer_unit(l + 1) : -1);
        block_forward(model, a, l, B, T_local);
    }
}
// under ZeRO-2/3 each layer's gradient is reduce-scattered as soon as its backward is done (ZeRO-3
// gathers it first, the layer below beside it). The
// residual stream's gradient takes turns between scratch.dresidual and the buffer of fcproj's output
// gradient, which it stands in for (g the identity); under -sp (g gathers) it stays in one
inline void blocks_backward(GPT2* model, const ActivationTensors& a, int B, int T_local) {
    ScratchTensors& s = model->scratch;
    floatX *dout = s.dresidual, *dinp = model->layout.sequence_parallel ? s.dresidual : s.layer_grads.fcproj;
    for (int l = a.first_layer + a.layers - 1; l >= a.first_layer; l--) {
        zero_gather_unit(&model->zero, layer_unit(l), l > a.first_layer ? layer_unit(l - 1) : -1);
        recompute_block(model, a, l, B, T_local);
        block_backward(model, a, l, B, T_local, dout, dinp);
        zero_reduce_unit(&model->zero, layer_unit(l));
        std::swap(dout, dinp);
    }
    if (dout != s.dresidual)  // an odd number of blocks: the stage's input gradient where the pipeline expects it
        device_to_device(s.dresidual, dout,
                         (size_t)tokens_held(model, B * T_local) * model->config.channels * sizeof(floatX));
}
// ZB-H1 (pipeline.h): every block's input half now, its output gradients kept in a slot (waiting_grads)...
inline void blocks_backward_input(GPT2* model, const ActivationTensors& a, int slot, int B, int T_local) {
    for (int l = a.first_layer + a.layers - 1; l >= a.first_layer; l--) {
        zero_gather_unit(&model->zero, layer_unit(l), l > a.first_layer ? layer_unit(l - 1) : -1);
        recompute_block(model, a, l, B, T_local);
        block_backward_input(model, a, l, B, T_local, waiting_grads(model, slot, l), model->scratch.dresidual,
                             model->scratch.dresidual, NULL);
    }
}
// ...and, later, their weight halves. What recompute level r did not keep is rebuilt again (at r >= 2
// from the layer's weights, gathered again under ZeRO-3); each layer's gradient is reduce-scattered
// (ZeRO-2/3) after its weight half, now that it is complete
inline void blocks_backward_weights(GPT2* model, const ActivationTensors& a, int slot, int B, int T_local) {
    for (int l = a.first_layer + a.layers - 1; l >= a.first_layer; l--) {
        if (model->recompute >= 2) zero_gather_unit(&model->zero, layer_unit(l));
        recompute_block(model, a, l, B, T_local);
        block_backward_weights(model, a, l, B, T_local, waiting_grads(model, slot, l), false);
        zero_reduce_unit(&model->zero, layer_unit(l));
    }
}

// final LayerNorm (this rank's tokens) and the tied LM head, column-parallel (f: identity, or -sp's
// gather): this rank's Vp/tp logit columns of all B*T tokens
inline void head_forward(GPT2* model, const ActivationTensors& a, int B, int T_local) {
    Zero* z = &model->zero;
    int norm_unit = final_norm_unit(model), C = model->config.channels, N_held = tokens_held(model, B * T_local);
    TensorParallel tp = tensor_parallel(model, B * T_local);
    FinalNormParameters h = final_norm_parameters(z->units[norm_unit], zero_unit(z, norm_unit).params);
    EmbeddingParameters e = embedding_parameters(z->units[0], zero_unit(z, 0).params);
    layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd, stage_output(model, a, B, T_local), h.lnfw, h.lnfb, N_held, C);
    floatX* lnf = tp_f_forward(tp, a.lnf);  // all N tokens
    matmul_forward(a.logits, lnf, e.wte, NULL, B * T_local, C, vocab_range(model).rows);
}
// cross-entropy of the logits against targets (B,T), vocabulary-parallel (tp.h); with
// dloss != 0 the logits become their gradient. The B*T token losses come down without a wait:
// staging_pending_sum sums them after the step's wait (staging.h)
inline void head_loss(GPT2* model, const ActivationTensors& a, const int* targets, int B, int T_local, float dloss) {
    int N = B * T_local;
    ScratchTensors& s = model->scratch;
    staging_upload(&model->staging, s.targets, targets, N * sizeof(int));
    tp_crossentropy(&model->comm->tp, a.logits, a.losses, s.targets,
                    LossStatistics{s.loss_max, s.loss_sum, s.loss_target}, N, model->config.vocab_size,
                    vocab_range(model), dloss);
    staging_download_floats(&model->staging, a.losses, N);
}
// the head's backward from dlogits (in a.logits): f sums d(lnf) over TP; dresidual becomes the
// gradient of the stage's output. Under -sp, lnf is gathered again for wte's gradient
inline void head_backward(GPT2* model, const ActivationTensors& a, int B, int T_local) {
    Zero* z = &model->zero;
    int norm_unit = final_norm_unit(model), C = model->config.channels, N = B * T_local, N_held = tokens_held(model, N);
    TensorParallel tp = tensor_parallel(model, N);
    ScratchTensors& s = model->scratch;
    EmbeddingParameters e = embedding_parameters(z->units[0], zero_unit(z, 0).params);
    EmbeddingParameters de = embedding_parameters(z->units[0], zero_unit(z, 0).grads);
    FinalNormParameters h = final_norm_parameters(z->units[norm_unit], zero_unit(z, norm_unit).params);
    FinalNormParameters dh = final_norm_parameters(z->units[norm_unit], zero_unit(z, norm_unit).grads);
    floatX* lnf = tp_f_forward(tp, a.lnf);  // -sp: lnf's N tokens again, for wte's gradient
    matmul_backward(s.dln, de.wte, NULL, a.logits, lnf, e.wte, N, C, vocab_range(model).rows, s.partials);
    floatX* dln = tp_f_backward(tp, s.dln, s.summed);  // this rank's tokens of the sum
    device_zero(s.dresidual, tp.n_held * sizeof(floatX));
    layernorm_backward(s.dresidual, dh.lnfw, dh.lnfb, dln, stage_output(model, a, B, T_local), h.lnfw, a.lnf_mean,
                       a.lnf_rstd, N_held, C, s.partials);
}

// one micro-batch through this stage, or through the chunk of it that set `a` is for (interleaved
// 1F1B): a.input holds its input unless the chunk is the model's first. On the model's last chunk,
// with targets, its token losses are queued for staging_pending_sum. A collective under ZeRO-3
// (over DP) and TP.
inline void stage_forward(GPT2* model, const ActivationTensors& a, const MicroBatch& mb, int B, int T_local,
                          float dloss) {
    if (B > model->B || T_local > model->T_local)
        fail("forward with (B=%d,T=%d) exceeds the allocated (%d,%d)", B, T_local, model->B, model->T_local);
    bool embedding = chunk_has_embedding(model, a), head = chunk_has_head(model, a);
    if (embedding || head) zero_gather_unit(&model->zero, 0);  // ZeRO-3: the end units, gathered after AdamW
    zero_prefetch_unit(&model->zero, layer_unit(a.first_layer));  // beside the embeddings (-overlap 1)
    if (embedding) embed_forward(model, a, mb.inputs, B, T_local);
    blocks_forward(model, a, B, T_local);
    if (!head) return;
    zero_gather_unit(&model->zero, final_norm_unit(model));  // (waited for here: its gather runs beside the blocks)
    head_forward(model, a, B, T_local);
    if (mb.targets) head_loss(model, a, mb.targets, B, T_local, dloss);
}
// its backward: on the model's last chunk from its loss, elsewhere from the gradient of the
// output in scratch.dresidual, which ends as the gradient of the input. Given a slot (ZB-H1's B
// action carries it; -1: none) the blocks run only their input halves, and blocks_backward_weights
// their weight halves later; the head and the embedding stay whole (deferring the head's would
// keep the logits' gradient)
inline void stage_backward(GPT2* model, const ActivationTensors& a, const MicroBatch& mb, int B, int T_local,
                           int slot) {
    bool embedding = chunk_has_embedding(model, a), head = chunk_has_head(model, a);
    zero_prefetch_unit(&model->zero, layer_unit(a.first_layer + a.layers - 1));  // beside the head (-overlap 1)
    if (head) head_backward(model, a, B, T_local);
    if (head) zero_reduce_unit(&model->zero, final_norm_unit(model));
    if (slot >= 0) blocks_backward_input(model, a, slot, B, T_local);
    else blocks_backward(model, a, B, T_local);
    if (embedding) embed_backward(model, mb.inputs, B, T_local);
    if (embedding || head) zero_reduce_unit(&model->zero, 0);  // wte: from the head (last stage) and the lookup (first)
}

// ----------------------------------------------------------------------------
// the pipeline: this stage as pipeline_run.h's executor sees it

// this stage for one step's micro-batches: forward k and backward k of chunk v (0 but under
// interleaved 1F1B), micro-batch k's input and output, and scratch.dresidual as the one gradient
// buffer (block_backward and head_backward already use it for the gradient of the residual
// stream; interleaved schedules land the next one in scratch.received_gradient). Activations
// and gradients travel as (B,T,C) floatX, under -sp (B*T/tp, C): each TP rank's own tokens.
inline PipelineStage pipeline_stage(GPT2* model, const std::vector<MicroBatch>& batches, float dloss, int B,
                                    int T_local) {
    PipelineStage stage;
    stage.forward = [=, &batches](int v, int k) {  // the loss: summed after the step's wait (staging.h), not here
        stage_forward(model, activation_set(model, v, k), batches[k], B, T_local, dloss);
        return 0.0;
    };
    int last = (int)batches.size() - 1;  // the step's last micro-batch: ZeRO 0-1 reduce in its backward (overlap.h)
    stage.backward = [=, &batches](int v, int k) {
        zero_begin_micro_step(&model->zero, k == last);
        stage_backward(model, activation_set(model, v, k), batches[k], B, T_local, -1);
        zero_end_micro_step(&model->zero);
    };
    // ZB-H1: -ga fp32 folds each micro-batch's gradients into the fp32 sum alone, the head's after its
    // input half, the layers' after their weight halves
    stage.backward_input = [=, &batches](int v, int k, int slot) {
        zero_begin_micro_step(&model->zero, k == last);
        stage_backward(model, activation_set(model, v, k), batches[k], B, T_local, slot);
        zero_end_micro_step(&model->zero);
    };
    stage.backward_weight = [=](int v, int k, int slot) {
        zero_begin_micro_step(&model->zero, k == last);
        blocks_backward_weights(model, activation_set(model, v, k), slot, B, T_local);
        zero_end_micro_step(&model->zero);
    };
    stage.input = [=](int v, int k) { return activation_set(model, v, k).input; };
    stage.output = [=](int v, int k) { return stage_output(model, activation_set(model, v, k), B, T_local); };
    stage.gradient = model->scratch.dresidual;
    stage.received_gradient = model->scratch.received_gradient;
    // -sp: each TP rank its tokens
    stage.message_elements = (size_t)tokens_held(model, B * T_local) * model->config.channels;
    return stage;
}

// one micro-batch through every stage, forward only (validation, sampling), in set 0; returns
// the token losses' sum on the last stage (0 elsewhere, and without targets)
inline double forward_only(GPT2* model, const MicroBatch& mb, int B, int T_local) {
    std::vector<MicroBatch> one = {mb};
    pipeline_forward(pipeline_stage(model, one, 0.0f, B, T_local), &model->comm->pp, gpt2_chunks(model));
    return staging_pending_sum(&model->staging);
}

// ----------------------------------------------------------------------------
// training step, validation, sampling

// the step's micro-batches: every stage reads the same ones, its DP rank's slice of each, in order
// (-cp: the rank's T/cp tokens of each sequence), into `tokens` (inputs, targets), which they point into
inline std::vector<MicroBatch> next_micro_batches(GPT2* model, DataLoader* loader, int grad_accum, int B, int T_local,
                                                  std::vector<std::vector<int>>* tokens) {
    tokens->assign(2 * grad_accum, {});
    std::vector<MicroBatch> batches(grad_accum);
    for (int k = 0; k < grad_accum; k++) {
        dataloader_next_batch(loader);
        (*tokens)[2 * k] = tokens_of_rank(model, loader->inputs, B, T_local);
        (*tokens)[2 * k + 1] = tokens_of_rank(model, loader->targets, B, T_local);
        batches[k] = MicroBatch{(*tokens)[2 * k].data(), (*tokens)[2 * k + 1].data()};
    }
    return batches;
}

// one optimizer step: the step's micro-batches through this stage's schedule (pipeline.h;
// without a pipeline: forward, loss and backward of each in turn) on this rank's slice of
// the batch, then the gradient reductions (zero.h; the tied embedding's two copies), the
// finite check, unscaling, clipping and AdamW. `step` counts from 0.
inline StepResult train_step(GPT2* model, DataLoader* loader, LossScaler* scaler, OutlierWindows* outliers,
                             const TrainConfig& tc, int grad_accum, int step, int max_steps) {
    int B = tc.B, T = tc.T, T_local = T / model->layout.cp, dp = model->comm->grid.dp;
    staging_for_step(model, grad_accum, B, T_local);
    double tokens_per_step = (double)B * T * grad_accum * dp;
    StepResult r = {0.0, 0.0, 0.0f, scaler->scale, false, {}};
    r.timing.clock = model->layout.pp > 1 ? &model->schedule_clock : NULL;  // the bubble, measured with a pipeline
    // the step's loss is the mean over all its tokens on all ranks: summing gradients over
    // micro-steps and ranks gives the gradient of the mean; times the loss scale
    float dloss = (float)(scaler->scale / tokens_per_step);
    std::vector<std::vector<int>> tokens;
    std::vector<MicroBatch> batches;
    { StepSpan data(&model->step_time, &model->step_time.data);
      batches = next_micro_batches(model, loader, grad_accum, B, T, &tokens); }
    zero_begin_step(&model->zero);
    std::vector<PipelineAction> schedule =
        pipeline_schedule(model->schedule, model->layout.pp_rank, model->layout.pp, grad_accum, gpt2_chunks(model));
    run_schedule(pipeline_stage(model, batches, dloss, B, T_local), schedule, &model->comm->pp, &r.timing,
                 &model->links);
    if (tc.inject_nonfinite_step == step + 1) zero_poison_gradients(&model->zero);
    zero_reduce_step(&model->zero);
    zero_sum_unit_gradient(&model->zero, 0, &model->comm->embedding);  // the tied wte: first + last stage
    sum_layernorm_gradients(model);  // -sp: each TP rank's tokens
    int lr_kind = lr_schedule_from_name(tc.lr_schedule);
    r.lr = learning_rate_at(step, tc.lr, tc.warmup, max_steps, tc.final_fraction, lr_kind);
    double norm_squared = gpt2_grad_norm_squared(model);  // the step's wait: the host decides on it
    r.norm = sqrt(norm_squared) / scaler->scale;  // unscaled before clipping
    double loss_sum = staging_pending_sum(&model->staging);  // landed by now: the last stage's token losses
    schedule_timing_read(&r.timing);                         // and the schedule's stamps passed
    comm_all_reduce_scalars(&model->comm->pp, &loss_sum, 1);
    comm_all_reduce_scalars(&model->comm->replicas, &loss_sum, 1);
    r.loss = loss_sum / tokens_per_step;
    if (!loss_scaler_update(scaler, isfinite(norm_squared))) {
        r.skipped = true;
        return r;
    }
    r.outlier = outlier_step(outliers, r.loss, r.norm, tc.skip_loss_z, tc.skip_norm_z, &r.z_loss, &r.z_norm);
    r.skipped = r.outlier;
    if (r.outlier) return r;  // -sl, -sg: llm.c's guard
    float clip_scale = (tc.grad_clip > 0.0f && r.norm > tc.grad_clip) ? (float)(tc.grad_clip / r.norm) : 1.0f;
    int t = ++model->adam_steps;
    uint64_t rounding_seed = random_u32((uint64_t)tc.seed, (uint64_t)t);  // fresh stochastic-rounding bits every step
    TraceSpan span(model->comm->world.trace, [] { return std::string("optimizer step"); }, "optimizer",
                   model->comm->grid.rank);
    { StepSpan optimizer(&model->step_time, &model->step_time.optimizer);
      zero_optimizer_step(&model->zero, r.lr, tc.weight_decay, clip_scale / r.scale, t, rounding_seed); }
    return r;
}

// mean loss over the first `batches` micro-batches of the validation data
inline double gpt2_validate(GPT2* model, DataLoader* loader, int batches) {
    dataloader_reset(loader);
    double sum = 0.0;
    for (int i = 0; i < batches; i++) {
        dataloader_next_batch(loader);
        std::vector<int> inputs = tokens_of_rank(model, loader->inputs, loader->B, loader->T);
        std::vector<int> targets = tokens_of_rank(model, loader->targets, loader->B, loader->T);
        sum += forward_only(model, MicroBatch{inputs.data(), targets.data()}, loader->B, loader->T / model->layout.cp);
    }
    comm_all_reduce_scalars(&model->comm->pp, &sum, 1);
    comm_all_reduce_scalars(&model->comm->replicas, &sum, 1);  // over dp x cp: each cp rank has its tokens' losses
    return sum / ((double)batches * loader->B * loader->T * model->comm->grid.dp);
}

// HellaSwag's examples answered right (hellaswag.h): this data-parallel rank's, B/4 to a micro-batch;
// each row's masked loss sum over the tokens this rank holds (-cp: its chunks, cp_batch_index),
// summed over the cp ranks and from the last stage to every stage; each example's answer, counted
// once a data-parallel rank (its cp rank 0) and summed over them
inline int gpt2_hellaswag(GPT2* model, const std::vector<EvalExample>& examples, int B, int T) {
    const ProcessGrid& grid = model->comm->grid;
    size_t first, end;
    eval_rank_examples(examples.size(), grid.dp, grid.dp_rank, &first, &end);
    FILE* out = eval_scores_file(grid.dp_rank, grid.tp_rank == 0 && grid.cp_rank == 0 && grid.pp_rank == 0);
    int cp = model->layout.cp, right = 0;
    EvalBatch batch;
    std::vector<float> losses((size_t)B * T / cp);
    for (size_t k = 0; k < eval_batches_per_rank(examples.size(), grid.dp, B); k++) {
        eval_batch_fill(&batch, examples, first + k * (B / EVAL_ENDINGS), end, B, T);
        std::vector<int> inputs = tokens_of_rank(model, batch.inputs.data(), B, T);
        std::vector<int> targets = tokens_of_rank(model, batch.targets.data(), B, T);
        std::vector<int> mask = tokens_of_rank(model, batch.mask.data(), B, T);
        forward_only(model, MicroBatch{inputs.data(), targets.data()}, B, T / cp);
        std::vector<double> sums(B, 0.0), counts(B, 0.0), scores;
        if (is_last_stage(model->layout)) {
            device_to_host(losses.data(), activation_set(model, gpt2_chunks(model) - 1, 0).losses,
                           losses.size() * sizeof(float));
            for (size_t i = 0; i < losses.size(); i++) {
                size_t row = (cp == 1 ? i : cp_batch_index(cp, model->layout.cp_rank, B, T, i)) / T;
                if (mask[i]) sums[row] += losses[i], counts[row] += 1.0;
            }
        }
        for (Comm* group : {&model->comm->cp, &model->comm->pp}) {
            comm_all_reduce_scalars(group, sums.data(), B);
            comm_all_reduce_scalars(group, counts.data(), B);
        }
        right += eval_batch_answers(batch, examples, sums, counts, &scores);
        for (size_t e = 0; out && e < batch.example.size() && batch.example[e] >= 0; e++)
            for (int j = 0; j < EVAL_ENDINGS; j++)
                fprintf(out, "%d %d %.17g\n", batch.example[e], j, scores[EVAL_ENDINGS * e + j]);
    }
    if (out) fclose(out);
    double total = grid.cp_rank == 0 ? right : 0;  // the cp ranks agree: counted once
    comm_all_reduce_scalars(&model->comm->replicas, &total, 1);  // over dp x cp
    return (int)total;
}

// the logits that follow `context` tokens, into scratch.logit_row on every rank: one forward of
// them padded with EOT to a multiple of the ranks that split the sequence (-sp's tp, -cp's 2cp
// chunks; attention is causal, so what follows the last real position does not change its
// logits). The last stage all-gathers that position's logit columns from its TP ranks; under -cp
// the rank holding the position sends them round its ring; then to the other stages.
inline void next_token_logits(GPT2* model, const int* context_tokens, int context) {
    const ModelLayout& lay = model->layout;
    int Vp = model->config.padded_vocab_size, columns = vocab_range(model).rows;
    int multiple = sequence_multiple(lay.cp, lay.tp, lay.sequence_parallel);
    int padded = (context + multiple - 1) / multiple * multiple;  // <= T, a multiple of `multiple` (check_batch_flags)
    std::vector<int> window(padded, GPT2_EOT);
    std::copy(context_tokens, context_tokens + context, window.begin());
    std::vector<int> mine = tokens_of_rank(model, window.data(), 1, padded);
    forward_only(model, MicroBatch{mine.data(), NULL}, 1, padded / lay.cp);
    int owner = 0;                  // the cp rank holding the last position, and its row there
    size_t row = context - 1;
    if (lay.cp > 1) cp_locate(lay.cp, padded, context - 1, &owner, &row);
    if (is_last_stage(lay)) {
        comm_all_gather(&model->comm->tp, activation_set(model, gpt2_chunks(model) - 1, 0).logits + row * columns,
                        model->scratch.logit_row, columns);
        comm_broadcast(&model->comm->cp, model->scratch.logit_row, Vp, owner);
    }
    comm_broadcast(&model->comm->pp, model->scratch.logit_row, Vp, lay.pp - 1);
}

// the logits after `token` at the cache's next position, into scratch.logit_row: one row through
// one rank's whole model (kv_cache.h), the units gathered as stage_forward gathers them
inline void gpt2_decode(GPT2* model, KVCache* cache, int token) {
    Zero* z = &model->zero;
    int norm_unit = final_norm_unit(model);
    zero_gather_unit(z, 0);  // ZeRO-3: the embeddings and the final LayerNorm stay gathered throughout
    zero_gather_unit(z, norm_unit);
    EmbeddingParameters e = embedding_parameters(z->units[0], zero_unit(z, 0).params);
    kv_cache_embed(cache, e, token, vocab_range(model));
    for (int l = 0; l < cache->L; l++) {
        zero_gather_unit(z, layer_unit(l));
        kv_cache_block(cache, l, block_params(model, l));
    }
    FinalNormParameters h = final_norm_parameters(z->units[norm_unit], zero_unit(z, norm_unit).params);
    kv_cache_head(cache, h, e, model->scratch.logit_row, model->config.padded_vocab_size);
}

// one rank's whole model: the KV cache applies (kv_cache.h); TRAIN_GPT_SAMPLE_FULL_FORWARD=1 turns it
// off, so that tests compare the two
inline bool kv_cache_applies(const GPT2* model) {
    const ModelLayout& lay = model->layout;
    const char* off = getenv("TRAIN_GPT_SAMPLE_FULL_FORWARD");
    return lay.tp == 1 && lay.pp == 1 && lay.cp == 1 && !(off && strcmp(off, "1") == 0);
}

// samples `n` tokens after EOT at `temperature`. Each token's logits come from the KV cache (one
// row through the model) while the positions fit in T, else from a full forward over the last T
// tokens (the window slides: every position moves). A collective: every rank calls it with the
// same Rng state and so draws the same tokens.
inline void gpt2_sample(GPT2* model, int* out, int n, float temperature, Rng* rng) {
    const GPT2Config& c = model->config;
    int T = model->T_local * model->layout.cp;  // a whole sequence (activations hold T/cp of it)
    std::vector<int> tokens(n + 1);
    std::vector<floatX> row(c.padded_vocab_size);
    std::vector<double> weights(c.vocab_size);
    bool cached = kv_cache_applies(model);
    KVCache cache = cached ? kv_cache_allocate(gpt2_layers(model), T, c.channels, c.num_heads) : KVCache{};
    tokens[0] = GPT2_EOT;
    for (int t = 1; t <= n; t++) {
        int context = t < T ? t : T;
        if (cached && t <= T) gpt2_decode(model, &cache, tokens[t - 1]);
        else next_token_logits(model, tokens.data() + (t - context), context);
        device_to_host(row.data(), model->scratch.logit_row, c.padded_vocab_size * sizeof(floatX));
        float maxval = -INFINITY;
        for (int v = 0; v < c.vocab_size; v++) maxval = fmaxf(maxval, to_float(row[v]));
        double sum = 0.0;
        for (int v = 0; v < c.vocab_size; v++) sum += weights[v] = exp((to_float(row[v]) - maxval) / temperature);
        double u = rng_uniform(rng) * sum, acc = 0.0;
        int next = c.vocab_size - 1;
        for (int v = 0; v < c.vocab_size; v++) {
            acc += weights[v];
            if (u < acc) { next = v; break; }
        }
        tokens[t] = out[t - 1] = next;
    }
    if (cached) kv_cache_free(&cache);
}

// ----------------------------------------------------------------------------
// main and the steps of a run

// `n` sampled tokens as text (ids when there is no decoder); a collective
inline std::string sample_text(GPT2* model, const TrainConfig& tc, Rng* rng, const Decoder* decoder, bool can_decode) {
    std::vector<int> tokens(tc.gen_tokens);
    gpt2_sample(model, tokens.data(), tc.gen_tokens, tc.temperature, rng);
    std::string text;
    for (int i = 0; i < tc.gen_tokens; i++) {
        if (can_decode) decode_append(decoder, tokens[i], &text);
        else text += (i ? " " : "") + std::to_string(tokens[i]);
    }
    return text;
}

// the model this rank holds and its activations for the schedule; allocate = false lays them
// out and books their bytes without allocating (-plan, the memory check)
inline void build_model(GPT2* model, const TrainConfig& tc, Collectives* comm, int grad_accum, bool allocate) {
    gpt2_create(model, tc.init, (uint64_t)tc.seed, comm, tc.zero_stage, strcmp(tc.grad_accum_type, "fp32") == 0,
                allocate, tc.stage_layers, tc.chunks, tc.master_weights != 0, tc.overlap != 0);
    model->layout.sequence_parallel = tc.sequence_parallel;
    model->layout.cp = comm->grid.cp;
    model->layout.cp_rank = comm->grid.cp_rank;
    if (tc.T > model->config.max_seq_len)
        comm_fail_all("-t %d exceeds the model's maximum sequence length %d", tc.T, model->config.max_seq_len);
    model->schedule = (ScheduleKind)schedule_kind_from_name(tc.schedule);
    StageBuffers holds = stage_buffers(model->schedule, model->layout.pp_rank, model->layout.pp, grad_accum, tc.chunks);
    // -cp: T/cp of each sequence
    gpt2_allocate_activations(model, tc.B, tc.T / comm->grid.cp, tc.recompute, holds, allocate);
    model->gelu_fusion = tc.gelu_fusion;
    model->flash = tc.flash;
    if (const char* why = flash_kernels_refusal(tc.flash, model->config.channels / model->config.num_heads,
                                                comm->grid.cp))
        comm_fail_all("-fa %d: %s", tc.flash, why);
}

// what the training loop carries from step to step
struct Run {
    GPT2* model;
    const TrainConfig* tc;
    DataLoader train_loader, val_loader;
    bool validate;
    int grad_accum, max_steps, resume_step;
    LossScaler scaler;
    int nonfinite_streak;     // steps in a row with non-finite gradients and no scale left (loss_scale.h)
    OutlierWindows outliers;  // -sl, -sg: the last 128 steps' losses and norms (outlier.h)
    std::vector<EvalExample> hellaswag;  // -h 1: the examples of -hf (hellaswag.h)
    Rng sample_rng;    // the same on every rank: sampling is a collective
    Decoder decoder;
    bool can_decode;
    FILE* log;         // rank 0, with -log
    MainLog main_log;  // rank 0, with -o: llm.c's main.log
    Trace trace;       // -trace
    double flops_per_token;  // mfu.h: the model's, 6 N + 6 L C T
    PeakFlops peak;          // mfu.h: every rank's peak FLOP/s summed (0: unknown)
};

// the sequences per rank that validation reads: B, or fewer when the smallest validation shard holds
// less than one global micro-batch (dp x B x T + 1 tokens: tinyshakespeare's at 8 ranks); 0, off
inline int validation_batch(const TrainConfig& tc, const ProcessGrid& grid) {
    size_t tokens = dataloader_smallest_shard(tc.val_pattern);
    int B = (int)std::min((size_t)tc.B, tokens > 0 ? (tokens - 1) / ((size_t)grid.dp * tc.T) : 0);
    if (B < tc.B && B > 0 && grid.rank == 0)
        printf("note: validating on B=%d sequences per rank: %s holds %zu tokens, fewer than dp %d x B %d x T %d + 1\n",
               B, tc.val_pattern, tokens, grid.dp, tc.B, tc.T);
    if (B == 0 && grid.rank == 0)
        printf("note: validation is off: %s holds %zu tokens, fewer than one sequence per rank (dp %d x T %d + 1)\n",
               tc.val_pattern, tokens, grid.dp, tc.T);
    return B;
}

// the training and validation shards (every rank reads its DP rank's slices) and the number of steps
inline void open_data(Run* run) {
    const TrainConfig& tc = *run->tc;
    const ProcessGrid& grid = run->model->comm->grid;
    int V = run->model->config.vocab_size;
    if (!file_exists(tc.train_pattern) && strpbrk(tc.train_pattern, "*?[") == NULL)
        comm_fail_all("training shards %s not found: run `make data` for tinyshakespeare, or pass -i",
                      tc.train_pattern);
    if (strcmp(tc.train_pattern, TrainConfig{}.train_pattern) == 0 && grid.rank == 0)
        printf("training on %s, validating on %s: the default shards of `make data`\n", tc.train_pattern,
               tc.val_pattern);
    dataloader_init(&run->train_loader, tc.train_pattern, tc.B, tc.T, grid.dp_rank, grid.dp, V, tc.shuffle != 0,
                    (uint64_t)tc.seed);
    int val_B = tc.val_every > 0 && tc.val_batches > 0 ? validation_batch(tc, grid) : 0;
    run->validate = val_B > 0;
    if (run->validate)
        dataloader_init(&run->val_loader, tc.val_pattern, val_B, tc.T, grid.dp_rank, grid.dp, V, false, 0);
    if (tc.hellaswag) run->hellaswag = eval_file_read(tc.hellaswag_path);  // every rank: one line each if bad
    size_t longest = eval_longest(run->hellaswag);
    if (longest > (size_t)tc.T)
        comm_fail_all("-hf %s: an example of %zu tokens, longer than -t %d", tc.hellaswag_path, longest, tc.T);
    size_t epoch_steps = dataloader_epoch_samples(&run->train_loader) / run->grad_accum;  // -x -1: every sample once
    run->max_steps = tc.max_steps > 0 ? tc.max_steps : (int)epoch_steps;
    if (run->max_steps <= 0)
        comm_fail_all("the training shards hold fewer samples than one step needs (%d of dp*B*T + 1 tokens, -d %d)",
                      run->grad_accum, tc.total_batch_tokens);
}

// what the step line's MFU is against (mfu.h): the model's FLOPs per token and every rank's peak, said once
inline void measure_peak(Run* run) {
    const GPT2Config& c = run->model->config;
    run->flops_per_token = model_flops_per_token(whole_parameter_count(c), c.num_layers, c.channels, run->tc->T);
    run->peak = world_peak_flops(device_name());
    int world = run->model->comm->grid.world;
    if (run->model->comm->grid.rank != 0) return;
    if (run->peak.per_s > 0.0)
        printf("MFU: 6N + 6LCT = %.4g FLOPs per token against %.4g FLOP/s (%d rank%s: %s)\n", run->flops_per_token,
               run->peak.per_s, world, world > 1 ? "s" : "", run->peak.source.c_str());
    else
        printf("MFU: not known for this device (%s): not in mfu.h's table\n", run->peak.source.c_str());
}

// the steps, each followed by what the flags ask for: log, validation, samples, trace, checkpoint
// -h 1's result: printed, in main.log, and the JSON log's fields (returned)
inline std::string hellaswag_report(Run* run, int done, int right) {
    size_t total = run->hellaswag.size();
    if (run->model->comm->grid.rank == 0) printf("HellaSwag: %d / %zu = %.4f\n", right, total, (double)right / total);
    main_log_line(run->main_log, "s:%d eval:%.4f", done, (double)right / total);
    return ", \"hellaswag_correct\": " + std::to_string(right) + ", \"hellaswag_total\": " + std::to_string(total);
}

// after step `done`: a run that cannot train ends (loss_scale.h: the non-finite streak), else the
// checkpoint when one is due, unless the step's loss is non-finite (the forward itself failed: the
// parameters or the data are broken, a state not worth keeping); every rank alike
inline void end_of_step_files(Run* run, const StepResult& r, int done, bool last) {
    const TrainConfig& tc = *run->tc;
    if (nonfinite_streak_ends_run(&run->nonfinite_streak, r.skipped && !r.outlier, run->scaler)) {
        watchdog_stop();  // its thread ends before the process does
        comm_fail_all("step %d: %d steps in a row had non-finite gradients%s: the parameters or the data are "
                      "broken; ended with no checkpoint of this state (-y 1 resumes the newest)", done,
                      run->nonfinite_streak, run->scaler.dynamic ? " at loss scale 1" : "");
    }
    bool due = tc.output_dir && ((tc.checkpoint_every > 0 && done % tc.checkpoint_every == 0) || last);
    if (!due) return;
    if (comm_min_over_world(isfinite(r.loss) ? 1 : 0) == 0) {
        if (run->model->comm->grid.rank == 0) printf("step %d: no checkpoint written: the loss is non-finite\n", done);
        return;
    }
    write_checkpoint(run->model, tc, done, run->scaler, run->train_loader, run->sample_rng, run->outliers);
}

inline void train_loop(Run* run) {
    GPT2* model = run->model;
    const TrainConfig& tc = *run->tc;
    int rank = model->comm->grid.rank;
    auto began = std::chrono::steady_clock::now();
    watchdog_start(tc.timeout, rank, model->comm->grid.world);
    for (int step = run->resume_step; step < run->max_steps; step++) {
        watchdog_step(step + 1);
        if (rank == model->comm->grid.world - 1 && (tc.stop_at_step == step + 1 || tc.kill_at_step == step + 1))
            raise(tc.stop_at_step == step + 1 ? SIGSTOP : SIGKILL);  // a test's hung or dead rank
        if (tc.trace_path && step == run->resume_step) { comm_barrier(&model->comm->world); trace_start(&run->trace); }
        CommLedger sent_before = comm_ledger(model);
        device_synchronize();
        step_time_reset(&model->step_time);
        auto start = std::chrono::steady_clock::now();
        if (tc.overfit_single_batch) dataloader_reset(&run->train_loader);  // -a 1: the first batch again
        StepResult r = train_step(model, &run->train_loader, &run->scaler, &run->outliers, tc, run->grad_accum, step,
                                  run->max_steps);
        device_synchronize();
        double ms = ms_since(start);
        int done = step + 1;
        bool last = done == run->max_steps;
        double mfu = mfu_of(run->flops_per_token, tc.total_batch_tokens / (ms / 1000.0), run->peak.per_s);
        if (rank == 0) print_step(done, run->max_steps, r, ms, tc.total_batch_tokens, mfu, run->scaler.enabled,
                                  ms_since(began) / 1000.0, done - run->resume_step);
        // the first step's measured memory and traffic, per rank, in the log beside the plan
        std::string accounting = step == run->resume_step ? measured_accounting_json(model, sent_before) : "";
        bool validated = run->validate && (done % tc.val_every == 0 || last);
        double val_loss = validated ? gpt2_validate(model, &run->val_loader, tc.val_batches) : 0.0;
        if (validated && rank == 0) printf("val loss %.6f\n", val_loss);
        main_log_line(run->main_log, "s:%d trl:%.4f lr:%.6f norm:%.2f", step, r.loss, r.lr, r.norm);
        if (validated) main_log_line(run->main_log, "s:%d tel:%.4f", done, val_loss);
        bool evaluated = tc.hellaswag && tc.val_every > 0 && (done % tc.val_every == 0 || last);
        std::string hellaswag =
            evaluated ? hellaswag_report(run, done, gpt2_hellaswag(model, run->hellaswag, tc.B, tc.T)) : "";
        bool sampled = tc.sample_every > 0 && tc.gen_tokens > 0 && done % tc.sample_every == 0;
        std::string sample = sampled ? sample_text(model, tc, &run->sample_rng, &run->decoder, run->can_decode) : "";
        if (sampled && rank == 0)
            printf("sample%s:\n---\n%s\n---\n", run->can_decode ? "" : " (token ids)", sample.c_str());
        std::string bubble = bubble_json(model, r.timing, run->grad_accum) + step_time_json(model, ms);
        if (run->log)
            log_step(run->log, done, r, ms, tc.total_batch_tokens, mfu, run->scaler.enabled, validated, val_loss,
                     sampled, sample, accounting, bubble + hellaswag);
        if (run->trace.on && (done - run->resume_step == tc.trace_steps || last))
            write_trace(model->comm, &run->trace, tc.trace_path);
        end_of_step_files(run, r, done, last);
    }
    watchdog_stop();
}

#ifndef TESTING
// the tests' faults, from the environment (not flags: no user wants them): a non-finite gradient, a
// rank that dies writing a checkpoint, a rank that stops (the watchdog's case) or dies as a step begins
inline void read_fault_injections(TrainConfig* tc) {
    if (const char* inject = getenv("TRAIN_GPT_INJECT_NONFINITE")) tc->inject_nonfinite_step = atoi(inject);
    if (const char* die = getenv("TRAIN_GPT_DIE_IN_CHECKPOINT")) tc->die_in_checkpoint = atoi(die);
    if (const char* stop = getenv("TRAIN_GPT_STOP_AT_STEP")) tc->stop_at_step = atoi(stop);
    if (const char* kill = getenv("TRAIN_GPT_KILL_AT_STEP")) tc->kill_at_step = atoi(kill);
}

// the GPU chosen, the ranks that share it counted (returned), the communicators made
inline int start_collectives(Collectives* comm, const TrainConfig& tc, bool use_nccl, int world, int rank,
                             int local_rank) {
    device_init(local_rank, comm_ranks_on_node(), tc.tf32 != 0);  // before NCCL's communicators, bound to the device
    // the ranks of this node on this rank's GPU, told apart by PCI id (CPU build: all, sharing the node's memory)
    int sharing = comm_ranks_on_node_with(device_pci_id()), most = (int)comm_max_over_world(sharing);
    if (use_nccl && most > 1)
        comm_fail_all("%d ranks share one GPU: NCCL needs a GPU per rank; give several ranks one GPU with -comm mpi",
                      most);
    comm_init(comm, world, rank, local_rank, tc.tp, tc.pp, use_nccl, tc.cp);  // checks that the grid fits the world
    return sharing;
}

// what the first step needs once the model is allocated: the data, the run's header, the log,
// the state it resumes (-y 1), the tokenizer for samples, the trace
inline void prepare_run(Run* run, Collectives* comm, bool use_nccl) {
    const TrainConfig& tc = *run->tc;
    int rank = comm->grid.rank;
    open_data(run);
    if (rank == 0) print_run_header(run->model, tc, use_nccl, run->grad_accum, run->max_steps, run->train_loader);
    measure_peak(run);
    if (rank == 0 && tc.log_path && !(run->log = fopen(tc.log_path, "a"))) fail("cannot open log file %s", tc.log_path);
    run->main_log = main_log_open(tc.output_dir, rank, tc.resume != 0);
    run->sample_rng = Rng{(uint64_t)tc.seed + 0x5A5A};
    if (run->resume_step > 0)
        resume_state(run->model, tc, run->resume_step, &run->scaler, &run->train_loader, &run->sample_rng,
                     &run->outliers);
    run->can_decode = decoder_load(&run->decoder, tc.tokenizer_path);
    if (!run->can_decode && rank == 0 && tc.sample_every > 0)
        printf("no tokenizer file %s: samples print token ids (`make data` writes it)\n", tc.tokenizer_path);
    if (tc.trace_path) comm_set_trace(comm, &run->trace);
    comm_set_step_time(comm, &run->model->step_time);
}

int main(int argc, char** argv) {
    int world, rank, local_rank;
    cpu_restart_tuned(argv);      // the CPU build: OpenMP's idle threads, OpenBLAS's kernels (restarts itself once)
    device_choose_before_mpi();  // a CUDA-aware MPI_Init opens a context on the current GPU
    comm_start(&argc, &argv, &world, &rank, &local_rank);
    TrainConfig tc;
    if (!parse_args(&tc, argc, argv)) {
        if (rank == 0) print_usage(TrainConfig{});
        comm_shutdown();
        return 0;
    }
    read_fault_injections(&tc);
    bool use_nccl = comm_use_nccl(tc.comm_backend);
    Collectives comm;
    int sharing = start_collectives(&comm, tc, use_nccl, world, rank, local_rank);
    Run run = {};
    run.tc = &tc;
    run.grad_accum = check_batch_flags(&tc, comm.grid);
    check_llmc_flags(tc, rank);
    char resume_model[4096];
    run.resume_step = find_resume_step(&tc, resume_model, sizeof(resume_model), rank);

    GPT2 model;
    run.model = &model;
    run.scaler = loss_scaler_init(tc.loss_scale, PRECISION == PRECISION_FP16, tc.loss_scale_interval);
    // the model laid out without memory: what -plan prints, and what is checked before allocating
    build_model(&model, tc, &comm, run.grad_accum, false);
    if (tc.plan) {
        print_plans(&model, tc, run.grad_accum);
        comm_finalize(&comm);
        return 0;
    }
    if (tc.output_dir)  // a bad -o ends the run now, not at the first checkpoint
        check_output_dir(tc, comm.grid, checkpoint_bytes(&model, tc.checkpoint_every > 0));
    check_run_files(tc, rank);  // run_dir.h: -n without -o, -tok, -log, -trace (-log may be in -o: after it)
    check_memory(&model, tc, sharing);
    gpt2_free(&model);
    build_model(&model, tc, &comm, run.grad_accum, true);
    prepare_run(&run, &comm, use_nccl);
    train_loop(&run);
    main_log_done(run.main_log, tc.output_dir, run.max_steps);  // llm.c's DONE file: the run is over
    if (run.log) fclose(run.log);
    dataloader_free(&run.train_loader);
    if (run.validate) dataloader_free(&run.val_loader);
    gpt2_free(&model);
    comm_finalize(&comm);
    return 0;
}
#endif

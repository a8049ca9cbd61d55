/*
ledger.h: the kernel ledger of one training step of the CUDA build, and its roofline on a GPU
(-plan 1 -gpu H100|A100|H200): where a step's time must go, read without a GPU.

The launches of a step, in the order the trainer makes them, each from its launcher's formula
(the *_ledger functions beside the kernels; kernels/ledger.cuh says what FLOPs and bytes count):

    micro-step (x grad_accum)                          step
    embed      encoder_forward                         zero the gradients (cudaMemset)
    block x L  LN, qkv (+bias), attention, attproj,    the gradient norm (norm_partials)
               bias, residual, LN, fc (+bias), GELU,   AdamW, one launch for every tensor
               fcproj, bias, residual
    head       LN, logits, cross-entropy (dlogits in place), their backward
    block x L  what -r did not keep again, then the backward of each op, input half then weights
    embed      encoder_backward (wte, wpe)

then per kernel the roofline time, max(FLOPs / (peak x f), DRAM bytes / bandwidth), and their
sum: ms per micro-step, a step, tokens per second and MFU (mfu.h's model FLOPs per token over
the GPU's dense bf16 peak, llm.c's convention), and the step calibrated by what the last GPU run
measured of each kernel class (kernel_classes below). It describes one GPU holding the whole model
(tp, cp, pp 1; ZeRO 0 or 1 at dp 1, the layout scripts/bench_gpu.sh measures); over dp > 1 it is one
replica's compute (comm_time.h adds the communication), where ZeRO 1-3's AdamW over the 1/dp shard and
ZeRO 2-3's adds of each reduced shard are not booked apart (AdamW booked whole, as at dp 1). The emulated
build counts what the kernels really launch and touch (CUDA_EMU_LAUNCH_REPORT) and
tests/test_ledger.sh holds this ledger to it: the same kernels, the same launches, every kernel's
bytes within 5%, the GEMMs' FLOPs equal to the emulated cuBLAS's 2mnk and every other kernel's to a
formula in the test. docs/gpu.md sets llm.c's kernels beside it.
Applied in accounting.h (print_plans).
*/
#pragma once
// defines: LedgerModel, GpuSpec, gpu_spec, block_forward_ledger, block_backward_ledger, micro_step_ledger, step_ledger,
//          ledger_roofline_ms, print_ledger, device_copy_ledger, device_zero_ledger, print_ledger_rows,
//          KernelClass, kernel_classes, kernel_class, ledger_calibrated_ms, head_backward_ledger, embed_backward_ledger
#include <stdio.h>   // defines: printf
#include <string.h>  // defines: strcmp, strcspn
#include <algorithm> // defines: std::max
#include <string>    // defines: std::string
#include <vector>    // defines: std::vector
#include "kernels/common.cuh"     // defines: Ledger, ledger_add, ledger_traffic (kernels/ledger.cuh)
#include "kernels/encoder.cuh"    // defines: encoder_forward_ledger, encoder_backward_ledger
#include "kernels/layernorm.cuh"  // defines: layernorm_forward_ledger, layernorm_backward_input_ledger, ...
#include "kernels/matmul.cuh"     // defines: matmul_forward_ledger, matmul_backward_input_ledger, ...
#include "kernels/attention.cuh"  // defines: attention_forward_ledger, attention_backward_ledger
#include "kernels/gelu.cuh"       // defines: gelu_forward_ledger, residual_forward_ledger
#include "kernels/gelu_fusion.cuh"  // defines: matmul_gelu_forward_ledger, matmul_gelu_backward_input_ledger
#include "kernels/crossentropy.cuh"  // defines: crossentropy_forward_backward_ledger
#include "kernels/gradients.cuh"  // defines: norm_partials_ledger
#include "adamw.h"                // defines: adamw_update_slices_ledger

// what the ledger needs of the model and the run
struct LedgerModel {
    size_t L, C, NH, Vp;         // layers, channels, heads, padded vocabulary
    size_t V;                    // the vocabulary (wte rows a batch can touch)
    size_t B, T;                 // the micro-batch
    int grad_accum, recompute;   // micro-steps a step, -r
    bool master, grads_fp32;     // an fp32 master copy (bf16/fp16 builds); -ga fp32
    size_t P;                    // parameters (the gradient's and AdamW's values)
    int gelu_fusion;             // -ge: GELU in the fc GEMMs' epilogues (kernels/gelu_fusion.cuh)
    int flash;                   // -fa: flash attention's tensor-core kernels (kernels/attention.cuh)
};

// a device-to-device copy (tp.h's f and g at tp 1 copy where they do not alias) and a memset
inline void device_copy_ledger(Ledger* l, double bytes) {
    ledger_add(l, {"cudaMemcpyDeviceToDevice", 0, bytes, bytes, 0});
}
inline void device_zero_ledger(Ledger* l, double bytes) { ledger_add(l, {"cudaMemset", 0, 0, bytes, 0}); }

// train_gpt.cu's block_forward at tp 1
inline void block_forward_ledger(Ledger* l, const LedgerModel& m) {
    size_t N = m.B * m.T, C = m.C;
    layernorm_forward_ledger(l, N, C);
    matmul_forward_ledger(l, N, C, 3 * C, true);
    attention_forward_ledger(l, m.B, m.T, C, m.NH, m.flash);
    matmul_forward_ledger(l, N, C, C, true);  // at tp 1 the bias goes to the matrix (tp.h: tp_bias_before_g)
    residual_layernorm_forward_ledger(l, N, C);
    matmul_gelu_forward_ledger(l, N, C, 4 * C, m.gelu_fusion >= 1);
    matmul_forward_ledger(l, N, 4 * C, C, true);
    residual_forward_ledger(l, N * C);
}
// recompute_block, then block_backward_input and block_backward_weights at tp 1
inline void block_backward_ledger(Ledger* l, const LedgerModel& m) {
    size_t N = m.B * m.T, C = m.C;
    if (m.recompute >= 3) block_forward_ledger(l, m);
    if (m.recompute == 2) { layernorm_forward_ledger(l, N, C); layernorm_forward_ledger(l, N, C); }
    if (m.recompute == 1 || m.recompute == 2) gelu_forward_ledger(l, N * 4 * C);
    // g's backward the identity: no copies (train_gpt.cu: blocks_backward)
    matmul_gelu_backward_input_ledger(l, N, 4 * C, C, m.gelu_fusion >= 2);
    matmul_backward_input_ledger(l, N, C, 4 * C);
    layernorm_backward_both_ledger(l, N, C, false);  // with the parameters' sums: W follows at once
    matmul_backward_input_ledger(l, N, C, C);
    attention_backward_ledger(l, m.B, m.T, C, m.NH, m.flash);
    matmul_backward_input_ledger(l, N, C, 3 * C);
    layernorm_backward_both_ledger(l, N, C, false);
    matmul_backward_weight_ledger(l, N, 4 * C, C, false);
    matmul_backward_weight_ledger(l, N, C, 4 * C, false);
    matmul_backward_weight_ledger(l, N, C, C, false);
    matmul_backward_weight_ledger(l, N, C, 3 * C, false);
    bias_backward_ledger(l, N, {C, 4 * C, C, 3 * C});
}
// the head's backward after the loss (train_gpt.cu: head_backward): the logits' GEMMs, the final LayerNorm
inline void head_backward_ledger(Ledger* l, const LedgerModel& m) {
    size_t N = m.B * m.T, C = m.C;
    matmul_backward_input_ledger(l, N, C, m.Vp);
    matmul_backward_weight_ledger(l, N, C, m.Vp, false);
    device_zero_ledger(l, (double)N * C * sizeof(floatX));  // the residual stream's gradient
    layernorm_backward_both_ledger(l, N, C, true);
}
// after the blocks' backward (train_gpt.cu: blocks_backward's last copy, embed_backward)
inline void embed_backward_ledger(Ledger* l, const LedgerModel& m) {
    size_t N = m.B * m.T, C = m.C;
    if (m.L % 2) device_copy_ledger(l, (double)N * C * sizeof(floatX));  // the input gradient back in scratch.dresidual
    encoder_backward_ledger(l, m.B, m.T, C, m.V);
}
// one micro-batch forward and backward (train_gpt.cu's stage_forward, stage_backward)
inline Ledger micro_step_ledger(const LedgerModel& m) {
    Ledger l;
    size_t N = m.B * m.T, C = m.C;
    encoder_forward_ledger(&l, m.B, m.T, C);
    for (size_t i = 0; i < m.L; i++) block_forward_ledger(&l, m);
    layernorm_forward_ledger(&l, N, C);
    matmul_forward_ledger(&l, N, C, m.Vp, false);
    crossentropy_forward_backward_ledger(&l, N, m.Vp, true);
    head_backward_ledger(&l, m);
    for (size_t i = 0; i < m.L; i++) block_backward_ledger(&l, m);
    embed_backward_ledger(&l, m);
    if (m.grads_fp32) {  // zero.h's zero_end_micro_step: the fp32 sum += the micro-step's gradient, which is cleared
        ledger_add(&l, {"gradient_accumulate_kernel<Acc>", (double)m.P, 0, 0, m.P * (4.0 + sizeof(floatX))});
    }
    return l;
}
// what a step does once, after its micro-steps (zero.h: zero_begin_step, the norm, zero_optimizer_step)
inline Ledger step_ledger(const LedgerModel& m) {
    Ledger l;
    size_t P = m.P, grad_bytes = m.grads_fp32 ? 4 : sizeof(floatX);
    device_zero_ledger(&l, (double)P * sizeof(floatX));
    if (m.grads_fp32) device_zero_ledger(&l, 4.0 * P);
    norm_partials_ledger(&l, P, grad_bytes);
    // one launch over every tensor (zero.h: zero_optimizer_step)
    adamw_update_slices_ledger(&l, P, grad_bytes, m.master);
    return l;
}

// ---------------------------------------------------------------- GPUs and the roofline
struct GpuSpec {
    const char* name;
    double tensor_flops, fp32_flops;  // FLOP/s: dense bf16/fp16 on tensor cores, fp32 on CUDA cores
    double bandwidth;                 // bytes/s of its memory
    const char* source;
};
inline const GpuSpec* gpu_spec(const char* name) {
    static const GpuSpec table[] = {
        {"H100", 989.4e12, 66.9e12, 3.35e12,
         "NVIDIA H100 datasheet (2023), SXM5: 989.4 TFLOP/s bf16 dense, 66.9 fp32, 3.35 TB/s HBM3"},
        {"H200", 989.4e12, 66.9e12, 4.8e12,
         "NVIDIA H200 datasheet (2024), SXM: 989.4 TFLOP/s bf16 dense, 66.9 fp32, 4.8 TB/s HBM3e"},
        {"A100", 312e12, 19.5e12, 2.039e12,
         "NVIDIA A100 datasheet (2021), SXM4 80GB: 312 TFLOP/s bf16 dense, 19.5 fp32, 2.039 TB/s HBM2e"},
    };
    for (const GpuSpec& gpu : table) if (strcmp(gpu.name, name) == 0) return &gpu;
    return nullptr;
}
// a row's roofline time in ms: its FLOPs at the peak (a fraction of it on tensor cores), its bytes at the bandwidth
inline double ledger_roofline_ms(const LedgerRow& r, const GpuSpec& gpu) {
    double flops_per_s = r.tensor_cores ? TENSOR_CORE_FRACTION * gpu.tensor_flops : gpu.fp32_flops;
    return 1e3 * std::max(r.flops / flops_per_s, ledger_traffic(r) / gpu.bandwidth);
}
inline double ledger_roofline_ms(const Ledger& l, const GpuSpec& gpu) {
    double ms = 0;
    for (const LedgerRow& r : l.rows) ms += ledger_roofline_ms(r, gpu);
    return ms;
}
// ---------------------------------------------------------------- calibrated by the last GPU run
// The roofline is a floor. What the kernels reached on a GPU, per class: ncu's time of the class in
// one step over this ledger's roofline of it, at the same shape (GPT-2 124M, B 8, T 1024, H200):
// docs/gpu-runs/ncu_2026-11-26_11a79f0_B8.json, the second lease's run 5 (commit 11a79f0).
// tests/test_ledger_calibration.sh recomputes each slowdown from that record and this ledger's rows and wants
// the table to agree, and the calibrated step within 10% of the record's total: a change of a
// kernel's formula or of the record asks for the table to be refit. The next GPU run's record
// replaces it. Kernels of no class (the embedding, memsets) keep their roofline.
struct KernelClass { const char* name; const char* prefixes; double slowdown; };  // prefixes: "|"-separated
static const KernelClass kernel_classes[] = {
    {"gemm", "cublas", 0.972},
    {"flash_attention", "flash_", 12.92},  // WMMA kernels round-tripping S, P, dS through shared memory
    {"crossentropy", "crossentropy", 2.56},
    {"adamw", "adamw", 1.144},
    {"layernorm_backward_and_column_sums", "layernorm_backward|bias_backward", 3.40},
    {"gelu", "gelu_", 1.288},
    {"residual_and_layernorm_forward", "residual_|layernorm_forward", 2.01},
    {"global_norm", "norm_partials", 3.47},
};
inline const KernelClass* kernel_class(const std::string& kernel) {
    for (const KernelClass& c : kernel_classes)
        for (const char* p = c.prefixes; *p;) {
            size_t n = strcspn(p, "|");
            if (kernel.compare(0, n, p, n) == 0) return &c;
            p += n + (p[n] == '|');
        }
    return nullptr;
}
inline double ledger_calibrated_ms(const Ledger& l, const GpuSpec& gpu) {
    double ms = 0;
    for (const LedgerRow& r : l.rows) {
        const KernelClass* c = kernel_class(r.kernel);
        ms += ledger_roofline_ms(r, gpu) * (c ? c->slowdown : 1.0);
    }
    return ms;
}

// the rows, largest time first, as text; and as JSON rows appended to `json`
inline void print_ledger_rows(const Ledger& l, const GpuSpec& gpu, const char* per, std::string* json) {
    std::vector<LedgerRow> rows = l.rows;
    std::stable_sort(rows.begin(), rows.end(),
                     [&](const LedgerRow& a, const LedgerRow& b) { return ledger_roofline_ms(a,
                         gpu) > ledger_roofline_ms(b, gpu); });
    for (const LedgerRow& r : rows) {
        double ms = ledger_roofline_ms(r, gpu);
        printf("  %-36s %5s %8lld %10.1f %10.1f %10.1f %9.3f\n", r.kernel.c_str(), per, r.launches, r.flops / 1e9,
               (r.read + r.written + r.updated) / 1e6, ledger_traffic(r) / 1e6, ms);
        char row[512];
        const KernelClass* c = kernel_class(r.kernel);
        snprintf(row, sizeof(row), "%s{\"kernel\": \"%s\", \"per\": \"%s\", \"launches\": %lld, \"flops\": %.0f, "
                 "\"bytes_read\": %.0f, \"bytes_written\": %.0f, \"bytes_updated\": %.0f, \"ms\": %.6f, "
                 "\"class\": \"%s\", \"slowdown\": %g}", json->empty() ? "" : ", ", r.kernel.c_str(), per, r.launches,
                 r.flops, r.read, r.written, r.updated, ms, c ? c->name : "", c ? c->slowdown : 1.0);
        *json += row;
    }
}
// the ledger of a step on `gpu`, its sums, and one JSON line {"ledger": [...], "roofline": {...}}
// comm: the roofline's "comm" object (comm_time.h), or ""
inline void print_ledger(const LedgerModel& m, const GpuSpec& gpu, double flops_per_token,
                         const std::string& comm = "") {
    Ledger micro = micro_step_ledger(m), once = step_ledger(m);
    double micro_ms = ledger_roofline_ms(micro, gpu), step_ms = m.grad_accum * micro_ms + ledger_roofline_ms(once, gpu);
    double tokens_per_s = (double)m.B * m.T * m.grad_accum / (step_ms / 1e3),
                           mfu = flops_per_token * tokens_per_s / gpu.tensor_flops;
    long long launches = 0;
    for (const LedgerRow& r : micro.rows) launches += r.launches;
    printf("kernel ledger of a step on an %s (%s; tensor-core kernels at %.0f%% of peak), B=%zu T=%zu, "
           "%d micro-step%s:\n",
           gpu.name, gpu.source, 100 * TENSOR_CORE_FRACTION, m.B, m.T, m.grad_accum, m.grad_accum > 1 ? "s" : "");
    printf("  %-36s %5s %8s %10s %10s %10s %9s\n", "kernel", "per", "launches", "GFLOP", "MB touched", "MB DRAM", "ms");
    std::string json;
    print_ledger_rows(micro, gpu, "micro", &json);
    print_ledger_rows(once, gpu, "step", &json);
    double calibrated_ms = m.grad_accum * ledger_calibrated_ms(micro, gpu) + ledger_calibrated_ms(once, gpu);
    printf("  roofline: %.2f ms per micro-step (%lld launches, %.1f per layer), %.2f ms per step, %.0f tokens/s, "
           "MFU %.1f%%\n", micro_ms, launches, (double)launches / m.L, step_ms, tokens_per_s, 100 * mfu);
    printf("  calibrated (each kernel class at the slowdown the last GPU run measured, ledger.h: kernel_classes): "
           "%.2f ms per step, %.0f tokens/s\n", calibrated_ms, tokens_per_s * step_ms / calibrated_ms);
    printf("{\"ledger\": [%s], \"roofline\": {\"gpu\": \"%s\", \"ms_per_micro_step\": %.4f, \"ms_per_step\": %.4f, "
           "\"tokens_per_s\": %.1f, \"mfu\": %.4f, \"launches_per_layer\": %.2f, \"calibrated_ms_per_step\": %.4f"
           "%s%s}}\n",
           json.c_str(), gpu.name, micro_ms, step_ms, tokens_per_s, mfu, (double)launches / m.L, calibrated_ms,
           comm.empty() ? "" : ", \"comm\": ", comm.c_str());
}

/*
mfu.h: model FLOPs utilization: the share of the hardware's peak that the model's own arithmetic
runs at (Kaplan et al. 2020, section 2.1; PaLM's "MFU"), in llm.c's convention (train_gpt2.cu's
gpt2_estimate_mfu):

    model FLOPs per token = 6 N + 6 L C T
        N      every parameter of the whole model (the padded vocabulary's rows included: the
               classifier multiplies them); 6 = 2 forward + 4 backward per weight and token
        6LCT   attention's two products, q k^T and att v, forward and backward, per token
               (the causal half is counted, as llm.c counts it)
    MFU = model FLOPs per token x tokens per second / (the peaks of all ranks)

What MFU does not count is the point of it: recompute (-r), the padding of a pipeline's bubble,
collectives and element-wise kernels all lower it. Peaks:
    GPU build   the device's dense rate from NVIDIA's datasheets, by device name: bf16 and fp16
                on tensor cores; the fp32 build's CUDA-core fp32 rate (its GEMMs use no TF32).
                A GPU not in the table: no MFU ("mfu": null in the log)
    CPU build   what OpenBLAS's sgemm reaches, measured at start-up by every rank at once (ranks
                sharing cores share the rate) and summed over the ranks: MFU against sgemm, not
                against a datasheet
Applied in train_gpt.cu: measure_peak (the peak, once); run_report.h: print_run_header, print_step and log_step.
*/
#pragma once
// defines: PeakFlops, model_flops_per_token, device_peak_flops, sgemm_flops_per_s, rank_peak_flops, world_peak_flops,
//          mfu_of
#include <string.h>  // defines: strcmp
#include <chrono>    // defines: std::chrono::steady_clock
#include <string>    // defines: std::string
#include <vector>    // defines: std::vector
#include "comm.h"       // defines: comm_sum_over_world, comm_min_over_world
#include "precision.h"  // defines: PRECISION, PRECISION_FP32
#ifndef __CUDACC__
#include <cblas.h>  // defines: cblas_sgemm
#endif

struct PeakFlops {
    double per_s;        // 0: unknown
    std::string source;  // where the number comes from, for the run's header
};

// llm.c's 6 N + 6 L C T
inline double model_flops_per_token(size_t parameters, int L, int C, int T) {
    return 6.0 * (double)parameters + 6.0 * L * C * T;
}

// a GPU's dense peak by its name (cudaDeviceProp::name); 0 when it is not in the table
inline double device_peak_flops(const char* name, bool fp32) {
    struct Gpu { const char* name; double tensor_16bit, fp32; };  // TFLOP/s, dense (without sparsity)
    static const Gpu table[] = {
        // NVIDIA H100 datasheet (2023): SXM5 989.4 / 66.9, PCIe 756.5 / 51.2; H200 datasheet: as H100 SXM
        {"NVIDIA H100 80GB HBM3", 989.4, 66.9}, {"NVIDIA H100 PCIe", 756.5, 51.2}, {"NVIDIA H100 NVL", 835.0, 60.0},
        {"NVIDIA H200", 989.4, 66.9},
        // NVIDIA A100 datasheet (2021): 312 / 19.5, every form factor
        {"NVIDIA A100-SXM4-80GB", 312.0, 19.5}, {"NVIDIA A100-SXM4-40GB", 312.0, 19.5},
        {"NVIDIA A100 80GB PCIe", 312.0, 19.5}, {"NVIDIA A100-PCIE-40GB", 312.0, 19.5},
    };
    for (const Gpu& gpu : table)
        if (strcmp(gpu.name, name) == 0) return 1e12 * (fp32 ? gpu.fp32 : gpu.tensor_16bit);
    return 0.0;
}

#ifndef __CUDACC__
// FLOP/s of one 512 x 512 x 512 sgemm as the CPU build calls it (OpenBLAS's own threads), best of 3:
// 4 ms each on one core of the 2-core machine, near 1024's rate (which took 45 ms each: every rank of
// every run of make test paid it at start-up)
inline double sgemm_flops_per_s() {
    const int n = 512;
    std::vector<float> a((size_t)n * n, 0.5f), b((size_t)n * n, 0.25f), c((size_t)n * n);
    double best = 1e30;
    for (int r = 0; r < 3; r++) {
        auto start = std::chrono::steady_clock::now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(),
                    n);
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    return 2.0 * n * n * n / best;
}
#endif

// this rank's peak: the device's by name (GPU build) or sgemm's measured rate (CPU build)
inline PeakFlops rank_peak_flops(const char* device) {
#ifdef __CUDACC__
    bool fp32 = PRECISION == PRECISION_FP32;
    double peak = device_peak_flops(device, fp32);
    return PeakFlops{peak, std::string(device) + (peak <= 0.0 ? ""
                                                  : fp32      ? ": fp32 CUDA cores, datasheet"
                                                              : ": tensor cores, datasheet")};
#else
    (void)device;
    return PeakFlops{sgemm_flops_per_s(), "OpenBLAS sgemm measured at start-up"};
#endif
}

// every rank's peak summed (0 where any rank's is unknown), measured by all ranks at once
inline PeakFlops world_peak_flops(const char* device) {
    PeakFlops mine = rank_peak_flops(device);
    double total = comm_sum_over_world(mine.per_s);
    bool known = comm_min_over_world(mine.per_s > 0.0 ? 1 : 0) == 1;
    return PeakFlops{known ? total : 0.0, mine.source};
}

// MFU of a step, or a negative number where the peak is unknown
inline double mfu_of(double flops_per_token, double tokens_per_s, double peak_per_s) {
    return peak_per_s > 0.0 ? flops_per_token * tokens_per_s / peak_per_s : -1.0;
}

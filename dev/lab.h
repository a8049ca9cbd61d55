/*
dev/lab.h: what every kernel lab in dev/ shares. A lab is one .cu file with numbered
kernel versions of one op, from the plainest to the fastest; its main
  1. checks every version against the trainer's host twin (the kernels/ headers) on random
     inputs at several sizes and block sizes,
  2. checks it against PyTorch's outputs from dev/pytorch_ref.py (dev/ref/<op>.bin, or
     $DEV_REF_DIR), the bf16 cases in a bf16 build and the fp32 ones in an fp32 build,
  3. times it (median of LAB_REPEATS launches, CUDA events).
    ./dev/layernorm_backward       every version
    ./dev/layernorm_backward 2     version 2 only
Exit status 1 if any check failed.

Tolerances, relative L2 error over a tensor, as tests/test_ops_vs_pytorch.cpp argues them:
fp32 1e-5 (24-bit rounding in another order); bf16 1e-2 against the host twin and
float64 (a few stores of 2^-9 each), 2e-2 against PyTorch's own bf16 (its error, ~1e-2, plus ours).
*/
#pragma once
// defines: Lab, LAB_BLOCK_SIZES, lab_start, lab_finish, lab_wants, lab_report, lab_check_value, time_versions, lab_skip_in_emulation, ref_floats, ref_floatx, random_floats, random_floatx, random_tokens, to_device, from_device,
//          lab_check, lab_check_ref, time_ms, lab_ref_file, ref_prefix, for_each_ref_case, as_floatx, lse_float64
#include <stdio.h>     // defines: printf
#include <stdlib.h>    // defines: atoi, getenv
#include <algorithm>   // defines: std::sort
#include <math.h>      // defines: exp, log, sqrt, fmax, INFINITY
#include <initializer_list>  // defines: std::initializer_list
#include <string>      // defines: std::string
#include <vector>      // defines: std::vector
#include "../kernels/common.cuh"  // defines: floatX, cudaCheck, launchCheck, cublas_handle, device_malloc
#include "../random.h"            // defines: Rng, rng_normal
#include "pytorch_ref.h"          // defines: RefFile, read_ref_file, check_close

static const int LAB_REPEATS = 20;

struct Lab {
    int only_version;  // 0: every version
    int failures;
    int checks;        // lab_check calls since the last lab_report, and their worst relative error
    double worst;
};
static const int LAB_BLOCK_SIZES[] = {64, 128, 256, 512, 1024};

inline Lab lab_start(int argc, char** argv, const char* name, int versions) {
    Lab lab = {argc > 1 ? atoi(argv[1]) : 0, 0, 0, 0.0};
    if (argc > 2 || lab.only_version < 0 || lab.only_version > versions) {
        fprintf(stderr, "usage: %s [VERSION]   (VERSION 1..%d; none: every version)\n", argv[0], versions);
        exit(1);
    }
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) fail("%s: no CUDA device found", name);
    cudaCheck(cudaSetDevice(0));
    cublasCheck(cublasCreate(&cublas_handle()));
    cublasCheck(cublasSetMathMode(cublas_handle(), CUBLAS_DEFAULT_MATH));  // fp32 without TF32, as the trainer
    cublasCheck(cublasLtCreate(&cublaslt_handle()));  // the trainer's matmul_forward (the bias in cuBLASLt's epilogue)
    cudaDeviceProp p;
    cudaCheck(cudaGetDeviceProperties(&p, 0));
    printf("%s on %s, floatX %s\n", name, p.name, PRECISION_NAME);
    return lab;
}
inline bool lab_wants(const Lab& lab, int version) { return lab.only_version == 0 || lab.only_version == version; }
inline int lab_finish(const Lab& lab) {
    printf(lab.failures ? "%d checks FAILED\n" : "every check passed\n", lab.failures);
    return lab.failures ? 1 : 0;
}

// ---------------------------------------------------------------- data
inline std::vector<float> random_floats(size_t n, uint64_t seed, float scale = 1.0f, float offset = 0.0f) {
    Rng rng = {seed};
    std::vector<float> v(n);
    for (float& x : v) x = offset + scale * (float)rng_normal(&rng);
    return v;
}
inline std::vector<floatX> as_floatx(const std::vector<float>& v) {
    std::vector<floatX> out(v.size());
    for (size_t i = 0; i < v.size(); i++) out[i] = from_float(v[i]);
    return out;
}
inline std::vector<floatX> random_floatx(size_t n, uint64_t seed, float scale = 1.0f, float offset = 0.0f) {
    return as_floatx(random_floats(n, seed, scale, offset));
}
inline std::vector<int> random_tokens(size_t n, int V, uint64_t seed) {  // ids in [0, V)
    Rng rng = {seed};
    std::vector<int> tokens(n);
    for (int& t : tokens) t = (int)(rng_next(&rng) % V);
    return tokens;
}
template <typename T> inline T* to_device(const std::vector<T>& host) {
    T* d = (T*)device_malloc(host.size() * sizeof(T));
    host_to_device(d, host.data(), host.size() * sizeof(T));
    return d;
}
template <typename T> inline std::vector<T> from_device(const T* d, size_t n) {
    std::vector<T> host(n);
    device_to_host(host.data(), d, n * sizeof(T));
    return host;
}

// ---------------------------------------------------------------- checks

// a device result against the host twin's: n elements of T (floatX or float). Quiet unless it
// fails; lab_report then prints one line for the checks since the last report
template <typename T>
inline void lab_check(Lab* lab, const char* what, const T* device, const std::vector<T>& host, double tol = REF_TOL,
                      bool on_host = false) {
    std::vector<T> ours = on_host ? std::vector<T>(device, device + host.size()) : from_device(device, host.size());
    RefTensor twin;
    twin.values.resize(host.size());
    for (size_t i = 0; i < host.size(); i++) twin.values[i] = as_double(host[i]);
    double err;
    if (!check_close(what, ours.data(), twin, tol, [](T x) { return as_double(x); }, true, &err)) lab->failures++;
    lab->checks++;
    if (!(err <= lab->worst)) lab->worst = err;
}
// a number (a norm, a loss) against the host twin's
inline void lab_check_value(Lab* lab, const char* what, double ours, double twin, double tol = REF_TOL) {
    std::vector<double> theirs = {twin};
    lab_check(lab, what, &ours, theirs, tol, true);
}
// one line for the checks since the last report: "version 2, B T C 4 64 768: ..."
inline void lab_report(Lab* lab, int version, const char* size_names, std::initializer_list<long> sizes) {
    std::string label = "version " + std::to_string(version) + ", " + size_names;
    for (long s : sizes) label += " " + std::to_string(s);
    printf("  %-44s %3d checks against the host twin, worst rel err %.2e\n", label.c_str(), lab->checks, lab->worst);
    lab->checks = 0;
    lab->worst = 0.0;
}

inline RefFile lab_ref_file(const char* op) {
    const char* dir = getenv("DEV_REF_DIR");
    return read_ref_file(std::string(dir ? dir : "dev/ref") + "/" + op + ".bin");
}
inline std::vector<float> ref_floats(const RefFile& file, const std::string& name) {
    return file.get(name).as<float>([](double d) { return (float)d; });
}
inline std::vector<floatX> ref_floatx(const RefFile& file, const std::string& name) { return as_floatx(ref_floats(file, name)); }
// "bf16/k/" or "fp32/k/": this build's cases
inline std::string ref_prefix(int k) { return std::string(PRECISION_NAME) + "/" + std::to_string(k) + "/"; }
// check(ref, prefix, sizes) for each of this build's cases in the op's PyTorch file: tensor NAME
// of the case is ref.get(prefix + NAME)
template <typename Check> inline void for_each_ref_case(const char* op, Check check) {
    RefFile ref = lab_ref_file(op);
    for (int k = 0; k < ref.cases(PRECISION_NAME); k++) {
        std::string prefix = ref_prefix(k);
        check(ref, prefix, ref.get(prefix + "sizes").as_ints());
    }
}

// a device result against PyTorch: fp32 build, float64; bf16 build, float64 of the same bf16
// inputs (NAME_f64, where the file has it) and PyTorch's bf16
template <typename T>
inline void lab_check_ref(Lab* lab, const char* what, const T* device, const RefFile& file, const std::string& name) {
    std::vector<T> ours = from_device(device, file.get(name).values.size());
    if (!check_against_pytorch(what, ours.data(), file, name)) lab->failures++;
}

// 128-bit access (Packed128, load128, store128): kernels/common.cuh, shared with the trainer's kernels

// The emulated CUDA build (tests/emu/, run by make test) checks every version at the sizes that
// take it seconds, not minutes, and times nothing: its times would be the host's
inline bool lab_skip_in_emulation(double elements) {
#ifdef CUDA_EMULATION
    if (elements > (1 << 18)) {
        printf("  a size of %.0f elements: skipped in the emulated build\n", elements);
        return true;
    }
#endif
    (void)elements;
    return false;
}

// ---------------------------------------------------------------- timing
// median milliseconds of one launch(), after one warm-up call
template <typename Launch> inline float time_ms(Launch launch) {
    cudaEvent_t start, stop;
    cudaCheck(cudaEventCreate(&start));
    cudaCheck(cudaEventCreate(&stop));
    launch();
    std::vector<float> times;
    for (int r = 0; r < LAB_REPEATS; r++) {
        cudaCheck(cudaEventRecord(start));
        launch();
        cudaCheck(cudaEventRecord(stop));
        cudaCheck(cudaEventSynchronize(stop));
        float ms;
        cudaCheck(cudaEventElapsedTime(&ms, start, stop));
        times.push_back(ms);
    }
    cudaCheck(cudaEventDestroy(start));
    cudaCheck(cudaEventDestroy(stop));
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
}
// times run(version, block) for every wanted version and block size; prints milliseconds and
// the bandwidth the op's compulsory bytes imply, and TFLOP/s where flops > 0
template <typename Run> inline void time_versions(const Lab& lab, int versions, double bytes, Run run, double flops = 0.0) {
#ifdef CUDA_EMULATION
    printf("  timing skipped: emulated CUDA\n");
    return;
#endif
    for (int v = 1; v <= versions; v++) {
        if (!lab_wants(lab, v)) continue;
        for (int block : LAB_BLOCK_SIZES) {
            float ms = time_ms([&] { run(v, block); });
            printf("  version %d, block %4d: %8.4f ms, %7.1f GB/s", v, block, ms, bytes / ms / 1e6);
            if (flops > 0.0) printf(", %6.1f TFLOP/s", flops / ms / 1e9);
            printf("\n");
        }
    }
}

// lse[b, h, t] = log sum_{j <= t} exp(q_t . k_j / sqrt(hs)) in float64, from the same floatX
// inputs: the flash attention versions' reference (the host twin keeps att, not lse), in
// attention_forward's and attention_backward's labs
inline std::vector<double> lse_float64(const std::vector<floatX>& qkv, int B, int T, int C, int NH) {
    int hs = C / NH;
    std::vector<double> lse((size_t)B * NH * T), s(T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const floatX* q = &qkv[((size_t)b * T + t) * 3 * C + h * hs];
                double max = -INFINITY, sum = 0.0;
                for (int j = 0; j <= t; j++) {
                    const floatX* k = &qkv[((size_t)b * T + j) * 3 * C + C + h * hs];
                    double dot = 0.0;
                    for (int i = 0; i < hs; i++) dot += as_double(q[i]) * as_double(k[i]);
                    s[j] = dot / sqrt((double)hs);
                    max = fmax(max, s[j]);
                }
                for (int j = 0; j <= t; j++) sum += exp(s[j] - max);
                lse[((size_t)b * NH + h) * T + t] = max + log(sum);
            }
    return lse;
}

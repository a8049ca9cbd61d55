/*
dev/layernorm_forward.cu: LayerNorm over the channels, eps 1e-5 (kernels/layernorm.cuh):
    mean, rstd = 1/sqrt(var + eps) per row;  out = (x - mean) * rstd * w + b
A row is C = 768 values for GPT-2 small: the question is how many threads share a row.

version 1: one thread per row, three passes (mean, variance, output): the host twin's
           row (layernorm_forward_row) on the device; a warp's 32 threads read 32
           different rows, so no load is coalesced
version 2: one warp per row (the trainer's layernorm_forward_kernel): lanes read
           neighbouring channels (coalesced) and the sums are warp shuffles
version 3: version 2 with 16-byte loads and stores (8 bf16 per access, C a multiple of 8)
*/
#include "lab.h"
#include "../kernels/layernorm.cuh"  // defines: layernorm_forward_host (the reference), layernorm_forward_row (version 1),
                                     //          layernorm_forward_kernel (version 2)

__global__ void layernorm_forward_kernel1(floatX* out, float* mean, float* rstd, const floatX* inp,
                                          const floatX* weight, const floatX* bias, int N, int C) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < N) layernorm_forward_row(row, out, mean, rstd, inp, weight, bias, C);  // the host twin's row
}

// one warp per row, every access 16 bytes: lane l takes the packs at channels l*P, l*P + 32*P, ...
// (C a multiple of P = Packed128<floatX>::size). The second and third passes re-read the row,
// which the first brought into L1/L2
__global__ void layernorm_forward_kernel3(floatX* out, float* mean, float* rstd, const floatX* inp,
                                          const floatX* weight, const floatX* bias, int N, int C) {
    const int P = Packed128<floatX>::size;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const floatX* x = inp + (size_t)row * C;
    float sum = 0.0f;
    for (int c = lane * P; c < C; c += 32 * P) {
        Packed128<floatX> v = load128(x + c);
        for (int k = 0; k < P; k++) sum += to_float(v.v[k]);
    }
    float m = warp_sum(sum) / C, var = 0.0f;
    for (int c = lane * P; c < C; c += 32 * P) {
        Packed128<floatX> v = load128(x + c);
        for (int k = 0; k < P; k++) { float d = to_float(v.v[k]) - m; var += d * d; }
    }
    float s = rsqrtf(warp_sum(var) / C + LAYERNORM_EPS);
    for (int c = lane * P; c < C; c += 32 * P) {
        Packed128<floatX> v = load128(x + c), w = load128(weight + c), b = load128(bias + c), y;
        for (int k = 0; k < P; k++) y.v[k] = from_float((to_float(v.v[k]) - m) * s * to_float(w.v[k]) + to_float(b.v[k]));
        store128(out + (size_t)row * C + c, y);
    }
    if (lane == 0) { mean[row] = m; rstd[row] = s; }
}

static void layernorm_forward_version(int version, int block, floatX* out, float* mean, float* rstd, const floatX* inp,
                                      const floatX* weight, const floatX* bias, int N, int C) {
    if (version == 1) layernorm_forward_kernel1<<<ceil_div(N, block), block>>>(out, mean, rstd, inp, weight, bias, N, C);
    else if (version == 2) layernorm_forward_kernel<<<ceil_div(N, block / 32), block>>>(out, mean, rstd, inp, weight, bias, N, C);
    else layernorm_forward_kernel3<<<ceil_div(N, block / 32), block>>>(out, mean, rstd, inp, weight, bias, N, C);
    launchCheck();
}

struct Buffers { floatX *out, *inp, *weight, *bias; float *mean, *rstd; };
static Buffers upload(const std::vector<floatX>& inp, const std::vector<floatX>& w, const std::vector<floatX>& b, int N, int C) {
    return {(floatX*)device_malloc((size_t)N * C * sizeof(floatX)), to_device(inp), to_device(w), to_device(b),
            (float*)device_malloc(N * sizeof(float)), (float*)device_malloc(N * sizeof(float))};
}
static void release(Buffers d) {
    device_free(d.out); device_free(d.inp); device_free(d.weight); device_free(d.bias); device_free(d.mean); device_free(d.rstd);
}

int main(int argc, char** argv) {
    const int VERSIONS = 3;
    Lab lab = lab_start(argc, argv, "layernorm_forward", VERSIONS);
    struct Size { int N, C; } sizes[] = {{7, 32}, {65, 96}, {1000, 768}, {8 * 1024, 768}};
    for (Size s : sizes) {
        if (lab_skip_in_emulation((double)s.N * s.C)) continue;
        std::vector<floatX> inp = random_floatx((size_t)s.N * s.C, 1, 2.0f, 0.5f), w = random_floatx(s.C, 2, 0.1f, 1.0f),
                            b = random_floatx(s.C, 3, 0.1f), out((size_t)s.N * s.C);
        std::vector<float> mean(s.N), rstd(s.N);
        layernorm_forward_host(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), s.N, s.C);
        Buffers d = upload(inp, w, b, s.N, s.C);
        for (int v = 1; v <= VERSIONS; v++) {
            if (!lab_wants(lab, v)) continue;
            for (int block : LAB_BLOCK_SIZES) {
                layernorm_forward_version(v, block, d.out, d.mean, d.rstd, d.inp, d.weight, d.bias, s.N, s.C);
                lab_check(&lab, "out", d.out, out);
                lab_check(&lab, "mean", d.mean, mean, 1e-5);  // fp32 statistics in every build
                lab_check(&lab, "rstd", d.rstd, rstd, 1e-5);
            }
            lab_report(&lab, v, "N C", {s.N, s.C});
        }
        if (s.N == 8 * 1024)
            time_versions(lab, VERSIONS, 2.0 * s.N * s.C * sizeof(floatX), [&](int v, int block) {
                layernorm_forward_version(v, block, d.out, d.mean, d.rstd, d.inp, d.weight, d.bias, s.N, s.C);
            });
        release(d);
    }
    for_each_ref_case("layernorm", [&](const RefFile& ref, const std::string& p, const std::vector<int>& sz) {
        int N = sz[0], C = sz[1];
        Buffers d = upload(ref_floatx(ref, p + "inp"), ref_floatx(ref, p + "weight"), ref_floatx(ref, p + "bias"), N, C);
        for (int v = 1; v <= VERSIONS; v++) {
            if (!lab_wants(lab, v)) continue;
            printf("  version %d against PyTorch, case %s\n", v, p.c_str());
            layernorm_forward_version(v, 256, d.out, d.mean, d.rstd, d.inp, d.weight, d.bias, N, C);
            lab_check_ref(&lab, "out", d.out, ref, p + "out");
            lab_check_ref(&lab, "mean", d.mean, ref, p + "mean");
            lab_check_ref(&lab, "rstd", d.rstd, ref, p + "rstd");
        }
        release(d);
    });
    return lab_finish(lab);
}

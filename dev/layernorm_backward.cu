/*
dev/layernorm_backward.cu: LayerNorm's backward (kernels/layernorm.cuh), with n = (x - mean) * rstd
and g = dout * w:
    dx += rstd * (g - mean(g) - n * mean(g * n))   per row: a warp per row, as the forward (in place here)
    dw += sum over rows of dout * n;  db += sum over rows of dout   column sums over N rows
The column sums are where the versions differ; both keep a fixed order of additions,
so a run repeats bit for bit (bit-exact resume).

version 1: the row kernel, then one thread per channel walking all N rows: C threads
           (768 for GPT-2) each reading a column with stride C
version 2: the row kernel, then two stages: 64 blocks of rows x 32-channel tiles write
           fp32 partial sums (8 threads per column, warps reading 32 neighbouring
           channels), and one thread per channel adds the 64 parts in order
version 3: version 2 with the row kernel's every access 16 bytes a lane and the row's x,
           dout, w in registers between its two passes (where C allows: a multiple of 256
           bf16 or 128 fp32 values, at most 1024). On an H200 at N 8192, C 768 version 2's
           row kernel took 210 us, 15 times the forward's, version 3's 18 us; at the timed
           N 16384: 0.435 and 0.071 ms with the column sums
version 4: the trainer's: one pass (layernorm_backward_kernel128): a block per part of the
           rows, its warps walking them as version 3's rows, each lane summing its channels'
           dweight and dbias in registers; the block's warps add in order, the last block
           the parts: version 3's bits without reading dout and inp twice. 64 blocks (the
           parts): whether that fills a GPU better than version 3's two launches is for a GPU
The block size applies to the row kernels (versions 3 and 4 fix theirs); the column stages have fixed shapes.
*/
#include "lab.h"
#include "../kernels/layernorm.cuh"  // defines: layernorm_backward_host (the reference), layernorm_backward (version 4)

__global__ void layernorm_params_kernel1(floatX* dweight, floatX* dbias, const floatX* dout, const floatX* inp,
                                         const float* mean, const float* rstd, int N, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < C) layernorm_param_grads_channel(c, dweight, dbias, dout, inp, mean, rstd, N, C);
}

struct Buffers { floatX *dinp, *dweight, *dbias, *dout, *inp, *weight; float *mean, *rstd, *partials; };

static void layernorm_backward_version(int version, int block, const Buffers& d, int N, int C) {
    if (version == 1) {
        layernorm_backward_input_kernel<<<ceil_div(N, block / 32), block>>>(d.dinp, d.dinp, d.dout, d.inp, d.weight, d.mean, d.rstd, N, C);
        launchCheck();
        layernorm_params_kernel1<<<ceil_div(C, 128), 128>>>(d.dweight, d.dbias, d.dout, d.inp, d.mean, d.rstd, N, C);
        launchCheck();
    } else if (version == 2) {
        layernorm_backward_input_kernel<<<ceil_div(N, block / 32), block>>>(d.dinp, d.dinp, d.dout, d.inp, d.weight, d.mean, d.rstd, N, C);
        launchCheck();
        layernorm_backward_params(d.dweight, d.dbias, d.dout, d.inp, d.mean, d.rstd, N, C, d.partials);
    } else if (version == 3) {
        layernorm_backward_input(d.dinp, d.dinp, d.dout, d.inp, d.weight, d.mean, d.rstd, N, C);
        layernorm_backward_params(d.dweight, d.dbias, d.dout, d.inp, d.mean, d.rstd, N, C, d.partials);
    } else {
        layernorm_backward(d.dinp, d.dweight, d.dbias, d.dout, d.inp, d.weight, d.mean, d.rstd, N, C, d.partials);
    }
}

// the host's inputs and earlier gradients (+=) on the device
struct HostCase { std::vector<floatX> dinp, dweight, dbias, dout, inp, weight; std::vector<float> mean, rstd; };
static Buffers upload(const HostCase& h, int C) {
    return {to_device(h.dinp), to_device(h.dweight), to_device(h.dbias), to_device(h.dout), to_device(h.inp),
            to_device(h.weight), to_device(h.mean), to_device(h.rstd),
            column_partials_scratch(2 * (size_t)C)};
}
static void reset(const Buffers& d, const HostCase& h) {  // the gradients back to their values before the call
    host_to_device(d.dinp, h.dinp.data(), h.dinp.size() * sizeof(floatX));
    host_to_device(d.dweight, h.dweight.data(), h.dweight.size() * sizeof(floatX));
    host_to_device(d.dbias, h.dbias.data(), h.dbias.size() * sizeof(floatX));
}
static void release(const Buffers& d) {
    for (void* p : {(void*)d.dinp, (void*)d.dweight, (void*)d.dbias, (void*)d.dout, (void*)d.inp, (void*)d.weight,
                    (void*)d.mean, (void*)d.rstd, (void*)d.partials}) device_free(p);
}

int main(int argc, char** argv) {
    const int VERSIONS = 4;
    Lab lab = lab_start(argc, argv, "layernorm_backward", VERSIONS);
    struct Size { int N, C; } sizes[] = {{7, 32}, {65, 96}, {33, 512}, {1000, 768}, {16 * 1024, 768}};  // 512: versions 3 and 4's packs
    for (Size s : sizes) {
        if (lab_skip_in_emulation((double)s.N * s.C)) continue;
        size_t n = (size_t)s.N * s.C;
        HostCase h = {random_floatx(n, 4, 0.1f), random_floatx(s.C, 5, 0.1f), random_floatx(s.C, 6, 0.1f),
                      random_floatx(n, 3), random_floatx(n, 1, 2.0f, 0.5f), random_floatx(s.C, 2, 0.1f, 1.0f),
                      std::vector<float>(s.N), std::vector<float>(s.N)};
        std::vector<floatX> out(n), bias = random_floatx(s.C, 7);
        layernorm_forward_host(out.data(), h.mean.data(), h.rstd.data(), h.inp.data(), h.weight.data(), bias.data(), s.N, s.C);
        Buffers d = upload(h, s.C);
        HostCase twin = h;
        layernorm_backward_host(twin.dinp.data(), twin.dweight.data(), twin.dbias.data(), h.dout.data(), h.inp.data(),
                                h.weight.data(), h.mean.data(), h.rstd.data(), s.N, s.C);
        for (int v = 1; v <= VERSIONS; v++) {
            if (!lab_wants(lab, v)) continue;
            for (int block : LAB_BLOCK_SIZES) {
                reset(d, h);
                layernorm_backward_version(v, block, d, s.N, s.C);
                lab_check(&lab, "dinp", d.dinp, twin.dinp);
                lab_check(&lab, "dweight", d.dweight, twin.dweight);
                lab_check(&lab, "dbias", d.dbias, twin.dbias);
            }
            lab_report(&lab, v, "N C", {s.N, s.C});
        }
        if (s.N == 16 * 1024)  // dout, inp read, dinp read and written
            time_versions(lab, VERSIONS, 4.0 * n * sizeof(floatX), [&](int v, int block) { layernorm_backward_version(v, block, d, s.N, s.C); });
        release(d);
    }
    for_each_ref_case("layernorm", [&](const RefFile& ref, const std::string& p, const std::vector<int>& sz) {
        int N = sz[0], C = sz[1];
        HostCase h = {std::vector<floatX>((size_t)N * C, from_float(0.0f)), std::vector<floatX>(C, from_float(0.0f)),
                      std::vector<floatX>(C, from_float(0.0f)), ref_floatx(ref, p + "dout"), ref_floatx(ref, p + "inp"),
                      ref_floatx(ref, p + "weight"), std::vector<float>(N), std::vector<float>(N)};
        std::vector<floatX> out((size_t)N * C), bias = ref_floatx(ref, p + "bias");
        layernorm_forward_host(out.data(), h.mean.data(), h.rstd.data(), h.inp.data(), h.weight.data(), bias.data(), N, C);
        Buffers d = upload(h, C);
        for (int v = 1; v <= VERSIONS; v++) {
            if (!lab_wants(lab, v)) continue;
            printf("  version %d against PyTorch, case %s\n", v, p.c_str());
            reset(d, h);
            layernorm_backward_version(v, 256, d, N, C);
            lab_check_ref(&lab, "dinp", d.dinp, ref, p + "dinp");
            lab_check_ref(&lab, "dweight", d.dweight, ref, p + "dweight");
            lab_check_ref(&lab, "dbias", d.dbias, ref, p + "dbias");
        }
        release(d);
    });
    return lab_finish(lab);
}

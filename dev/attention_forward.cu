/*
dev/attention_forward.cu: causal self-attention (kernels/attention.cuh), per head h of size
hs = C/NH:  att = softmax(q k^T / sqrt(hs)) over t2 <= t;  out = att v.
qkv rows are [q | k | v] with the heads side by side, as GPT-2's c_attn writes them; att
(B,NH,T,T) is kept for the backward.

version 1: one thread per (b, h, t) query row: the host twin's row (attention_forward_row)
           on the device, the scores staged in att itself. O(T hs) serial work per
           thread, no reuse of k, v
version 2: the trainer's attention_forward: q, k, v permuted to (B,NH,T,hs), two
           strided-batched cuBLAS GEMMs (scores scaled in the GEMM) around a warp-per-row
           causal softmax, the output permuted back. Materialises (B,NH,T,T) scores
The block size applies to version 1. A flash-attention version (no T x T matrix) is the
next one to add here.
*/
#include "lab.h"
#include "../kernels/attention.cuh"  // defines: attention_forward_host (the reference), attention_forward_row (version 1),
                                     //          attention_forward (version 2)

__global__ void attention_forward_kernel1(floatX* out, floatX* att, const floatX* qkv, int B, int T, int C, int NH) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;  // (b * NH + h) * T + t
    if (idx < B * NH * T) attention_forward_row(idx / (T * NH), (idx / T) % NH, idx % T, out, att, qkv, T, C, NH);
}

struct Buffers { floatX *out, *att, *qkv, *scratch; };
static Buffers upload(const std::vector<floatX>& qkv, int B, int T, int C, int NH) {
    return {(floatX*)device_malloc((size_t)B * T * C * sizeof(floatX)), (floatX*)device_malloc((size_t)B * NH * T * T * sizeof(floatX)),
            to_device(qkv), (floatX*)device_malloc(attention_scratch_elements(B, T, C, NH) * sizeof(floatX))};
}
static void release(const Buffers& d) { device_free(d.out); device_free(d.att); device_free(d.qkv); device_free(d.scratch); }

static void attention_forward_version(int version, int block, const Buffers& d, int B, int T, int C, int NH) {
    if (version == 1) {
        attention_forward_kernel1<<<ceil_div(B * NH * T, block), block>>>(d.out, d.att, d.qkv, B, T, C, NH);
        launchCheck();
    } else {
        attention_forward(d.out, d.att, d.qkv, d.scratch, B, T, C, NH);
    }
}

int main(int argc, char** argv) {
    const int VERSIONS = 2;
    Lab lab = lab_start(argc, argv, "attention_forward", VERSIONS);
    struct Size { int B, T, C, NH; } sizes[] = {{2, 8, 16, 2}, {1, 33, 48, 4}, {4, 64, 768, 12}, {8, 1024, 768, 12}};
    for (Size s : sizes) {
        if (lab_skip_in_emulation((double)s.B * s.NH * s.T * s.T)) continue;
        std::vector<floatX> qkv = random_floatx((size_t)s.B * s.T * 3 * s.C, 1), out((size_t)s.B * s.T * s.C),
                            att((size_t)s.B * s.NH * s.T * s.T);
        attention_forward_host(out.data(), att.data(), qkv.data(), s.B, s.T, s.C, s.NH);
        Buffers d = upload(qkv, s.B, s.T, s.C, s.NH);
        for (int v = 1; v <= VERSIONS; v++) {
            if (!lab_wants(lab, v)) continue;
            for (int block : LAB_BLOCK_SIZES) {
                attention_forward_version(v, block, d, s.B, s.T, s.C, s.NH);
                lab_check(&lab, "out", d.out, out);
                lab_check(&lab, "att", d.att, att);
            }
            lab_report(&lab, v, "B T C NH", {s.B, s.T, s.C, s.NH});
        }
        if (s.T == 1024) {  // qkv read, out and att written
            double bytes = ((double)s.B * s.T * 4 * s.C + (double)s.B * s.NH * s.T * s.T) * sizeof(floatX);
            time_versions(lab, VERSIONS, bytes, [&](int v, int block) { attention_forward_version(v, block, d, s.B, s.T, s.C, s.NH); },
                          4.0 * s.B * s.T * s.T * s.C);  // two T x T x hs products per head, half of them masked
        }
        release(d);
    }
    for_each_ref_case("attention", [&](const RefFile& ref, const std::string& p, const std::vector<int>& sz) {
        int B = sz[0], T = sz[1], C = sz[2], NH = sz[3];
        Buffers d = upload(ref_floatx(ref, p + "qkv"), B, T, C, NH);
        for (int v = 1; v <= VERSIONS; v++) {
            if (!lab_wants(lab, v)) continue;
            printf("  version %d against PyTorch, case %s\n", v, p.c_str());
            attention_forward_version(v, 256, d, B, T, C, NH);
            lab_check_ref(&lab, "out", d.out, ref, p + "out");
            lab_check_ref(&lab, "att", d.att, ref, p + "att");
        }
        release(d);
    });
    return lab_finish(lab);
}

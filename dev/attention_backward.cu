/*
dev/attention_backward.cu: causal self-attention's backward (kernels/attention.cuh): from
dout and the kept att, through out = att v, the softmax (dpre = att * (datt - sum(att *
datt)), the O(T) identity instead of the T x T Jacobian) and q k^T / sqrt(hs), to dqkv.

version 1: one thread per (b, h): the host twin's head (attention_backward_head) on the
           device, dq, dk, dv summed in fp32 in global scratch and stored once. Only
           B*NH threads: a reference
version 2: the trainer's attention_backward: permutes, four strided-batched cuBLAS GEMMs
           (datt = dy v^T, dv = att^T dy, dq = dpre k, dk = dpre^T q) around a
           warp-per-row softmax backward, permuted back
The block size applies to version 1.
*/
#include "lab.h"
#include "../kernels/attention.cuh"  // defines: attention_backward_host (the reference), attention_backward_head
                                     //          (version 1), attention_backward (version 2)

// acc: attention_head_scratch_floats per (b, h)
__global__ void attention_backward_kernel1(floatX* dqkv, const floatX* dout, const floatX* qkv, const floatX* att,
                                           float* acc, int B, int T, int C, int NH) {
    int bh = blockIdx.x * blockDim.x + threadIdx.x;
    if (bh < B * NH)
        attention_backward_head(bh / NH, bh % NH, dqkv, dout, qkv, att, acc + bh * attention_head_scratch_floats(T, C, NH), T, C, NH);
}

struct Buffers { floatX *dqkv, *dout, *qkv, *att, *scratch; float* acc; };
static Buffers upload(const std::vector<floatX>& dout, const std::vector<floatX>& qkv, const std::vector<floatX>& att,
                      int B, int T, int C, int NH) {
    return {(floatX*)device_malloc((size_t)B * T * 3 * C * sizeof(floatX)), to_device(dout), to_device(qkv), to_device(att),
            (floatX*)device_malloc(attention_scratch_elements(B, T, C, NH) * sizeof(floatX)),
            (float*)device_malloc(B * NH * attention_head_scratch_floats(T, C, NH) * sizeof(float))};
}
static void release(const Buffers& d) {
    device_free(d.dqkv); device_free(d.dout); device_free(d.qkv); device_free(d.att); device_free(d.scratch); device_free(d.acc);
}

static void attention_backward_version(int version, int block, const Buffers& d, int B, int T, int C, int NH) {
    if (version == 1) {
        attention_backward_kernel1<<<ceil_div(B * NH, block), block>>>(d.dqkv, d.dout, d.qkv, d.att, d.acc, B, T, C, NH);
        launchCheck();
    } else {
        attention_backward(d.dqkv, d.dout, d.qkv, d.att, d.scratch, B, T, C, NH);
    }
}

int main(int argc, char** argv) {
    const int VERSIONS = 2;
    Lab lab = lab_start(argc, argv, "attention_backward", VERSIONS);
    struct Size { int B, T, C, NH; } sizes[] = {{2, 8, 16, 2}, {1, 33, 48, 4}, {4, 64, 768, 12}, {4, 256, 768, 12}};
    for (Size s : sizes) {
        if (lab_skip_in_emulation((double)s.B * s.NH * s.T * s.T)) continue;
        std::vector<floatX> qkv = random_floatx((size_t)s.B * s.T * 3 * s.C, 1), dout = random_floatx((size_t)s.B * s.T * s.C, 2);
        std::vector<floatX> out((size_t)s.B * s.T * s.C), att((size_t)s.B * s.NH * s.T * s.T), dqkv(qkv.size());
        attention_forward_host(out.data(), att.data(), qkv.data(), s.B, s.T, s.C, s.NH);
        attention_backward_host(dqkv.data(), dout.data(), qkv.data(), att.data(), s.B, s.T, s.C, s.NH);
        Buffers d = upload(dout, qkv, att, s.B, s.T, s.C, s.NH);
        for (int v = 1; v <= VERSIONS; v++) {
            if (!lab_wants(lab, v)) continue;
            for (int block : LAB_BLOCK_SIZES) {
                attention_backward_version(v, block, d, s.B, s.T, s.C, s.NH);
                lab_check(&lab, "dqkv", d.dqkv, dqkv);
            }
            lab_report(&lab, v, "B T C NH", {s.B, s.T, s.C, s.NH});
        }
        if (s.T == 256) {
            double bytes = ((double)s.B * s.T * 7 * s.C + (double)s.B * s.NH * s.T * s.T) * sizeof(floatX);
            time_versions(lab, VERSIONS, bytes, [&](int v, int block) { attention_backward_version(v, block, d, s.B, s.T, s.C, s.NH); },
                          8.0 * s.B * s.T * s.T * s.C);
        }
        release(d);
    }
    for_each_ref_case("attention", [&](const RefFile& ref, const std::string& p, const std::vector<int>& sz) {
        int B = sz[0], T = sz[1], C = sz[2], NH = sz[3];
        std::vector<floatX> qkv = ref_floatx(ref, p + "qkv"), out((size_t)B * T * C), att((size_t)B * NH * T * T);
        attention_forward_host(out.data(), att.data(), qkv.data(), B, T, C, NH);  // att as the trainer keeps it
        Buffers d = upload(ref_floatx(ref, p + "dout"), qkv, att, B, T, C, NH);
        for (int v = 1; v <= VERSIONS; v++) {
            if (!lab_wants(lab, v)) continue;
            printf("  version %d against PyTorch, case %s\n", v, p.c_str());
            attention_backward_version(v, 256, d, B, T, C, NH);
            lab_check_ref(&lab, "dqkv", d.dqkv, ref, p + "dqkv");
        }
        release(d);
    });
    return lab_finish(lab);
}

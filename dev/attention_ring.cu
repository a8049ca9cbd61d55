/*
dev/attention_ring.cu: one step of ring attention (cp.h): a rank's two query chunks against the
[k | v] rows a visiting rank sent, merged into the output and log-sum-exp of the steps before, and
that step's backward, adding into dq and the visiting rows' dk dv sums. At c = 2, rank 1 holds
chunks 1 and 2 of each sequence and the visitor (rank 0) chunks 0 and 3: the step is two whole
(non-causal) ranges, chunk 1 and chunk 2 against chunk 0 (cp.h's cp_for_each_range).

version 1: a thread per query row (forward, dq) or key row (dk, dv), looping over the other range
           one key or query at a time, the running output in global fp32 memory: the kernels ring
           attention began with, the host twin's rows (kernels/attention.cuh) on the device
version 2: the trainer's: one rank's flash attention kernels on each range (kernels/
           flash_attention*.cuh: tiles through shared memory; tensor cores in bf16 and fp16 at
           head sizes a multiple of 16)
Both are checked against the host twin (attention_range_*_host) after the step: the output and
lse, then dq and dk dv; the earlier steps' output and lse, and the sums the backward adds into,
are random. Timed at B 8, T 1024 (chunks of 256 at c 2), C 768, NH 12: the FLOPs of the two
ranges (4 B chunk^2 C each forward, 8 backward).
*/
#include "lab.h"
#include "../kernels/attention.cuh"  // defines: AttentionRange, attention_range_forward_row, attention_range_forward, ...

// ---------------------------------------------------------------- version 1: a thread per row
__global__ void ring_forward_kernel1(AttentionRange a, const floatX* q, const floatX* kv, float* out, float* lse) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;  // (b, h, t)
    if (i < a.B * a.NH * a.Tq) attention_range_forward_row(a, q, kv, i / (a.NH * a.Tq), (i / a.Tq) % a.NH, i % a.Tq, out, lse);
}
__global__ void ring_dq_kernel1(AttentionRange a, const floatX* q, const floatX* kv, float* dq, const floatX* dout, const float* lse,
                                const float* D) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < a.B * a.NH * a.Tq) attention_range_dq_row(a, q, kv, i / (a.NH * a.Tq), (i / a.Tq) % a.NH, i % a.Tq, dq, dout, lse, D);
}
__global__ void ring_dkv_kernel1(AttentionRange a, const floatX* q, const floatX* kv, float* dkv, const floatX* dout,
                                 const float* lse, const float* D) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;  // (b, h, j)
    if (i < a.B * a.NH * a.Tk) attention_range_dkv_row(a, q, kv, i / (a.NH * a.Tk), (i / a.Tk) % a.NH, i % a.Tk, dkv, dout, lse, D);
}

// ---------------------------------------------------------------- the lab
struct Step {  // one rank's rows (2 chunks of B sequences) and the visitor's [k | v] rows
    int B, chunk, C, NH;
    AttentionRange ranges[2];
    floatX *qkv, *kv, *dout;
    float *out, *lse, *dq, *dkv, *D;
};
static Step make_step(int B, int chunk, int C, int NH) {
    Step s = {B, chunk, C, NH, {}, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr};
    for (int half = 0; half < 2; half++)  // this rank's chunk `half` against the visitor's early chunk (its rows 0 ..)
        s.ranges[half] = AttentionRange{chunk, half * B * chunk, chunk, 0, B, chunk, chunk, C, NH, 2 * C, false, false};
    return s;
}
static void forward_version(int version, int block, const Step& s) {
    for (const AttentionRange& a : s.ranges) {
        if (version == 1) {
            ring_forward_kernel1<<<ceil_div(a.B * a.NH * a.Tq, block), block>>>(a, s.qkv, s.kv, s.out, s.lse);
            launchCheck();
        } else {
            attention_range_forward(a, s.qkv, s.kv, s.out, s.lse);
        }
    }
}
static void backward_version(int version, int block, const Step& s) {
    for (const AttentionRange& a : s.ranges) {
        if (version == 1) {
            ring_dq_kernel1<<<ceil_div(a.B * a.NH * a.Tq, block), block>>>(a, s.qkv, s.kv, s.dq, s.dout, s.lse, s.D);
            ring_dkv_kernel1<<<ceil_div(a.B * a.NH * a.Tk, block), block>>>(a, s.qkv, s.kv, s.dkv, s.dout, s.lse, s.D);
            launchCheck();
        } else {
            attention_range_backward(a, s.qkv, s.kv, s.dq, s.dkv, s.dout, s.lse, s.D);
        }
    }
}

// every version against the host twin at one size; timed at the largest
static void check_size(Lab* lab, int versions, int B, int chunk, int C, int NH) {
    size_t rows = (size_t)2 * B * chunk, stats = rows * NH;
    std::vector<floatX> qkv = random_floatx(rows * 3 * C, 1), kv = random_floatx(rows * 2 * C, 2), dout = random_floatx(rows * C, 3);
    // the steps before: a normalized output (any values) and a finite lse; the sums the backward adds to
    std::vector<float> out0 = random_floats(rows * C, 4), lse0 = random_floats(stats, 5, 1.0f, 2.0f), D = random_floats(stats, 6);
    std::vector<float> dq0 = random_floats(rows * C, 7), dkv0 = random_floats(rows * 2 * C, 8);
    Step s = make_step(B, chunk, C, NH);
    std::vector<float> out = out0, lse = lse0, dq = dq0, dkv = dkv0;
    for (const AttentionRange& a : s.ranges) attention_range_forward_host(a, qkv.data(), kv.data(), out.data(), lse.data());
    for (const AttentionRange& a : s.ranges)
        attention_range_backward_host(a, qkv.data(), kv.data(), dq.data(), dkv.data(), dout.data(), lse.data(), D.data());
    s.qkv = to_device(qkv), s.kv = to_device(kv), s.dout = to_device(dout), s.D = to_device(D);
    s.out = to_device(out0), s.lse = to_device(lse0), s.dq = to_device(dq0), s.dkv = to_device(dkv0);
    auto reset = [&] {  // the step's inputs again: out, lse, dq and dkv are what it changes
        host_to_device(s.out, out0.data(), out0.size() * sizeof(float));
        host_to_device(s.lse, lse0.data(), lse0.size() * sizeof(float));
        host_to_device(s.dq, dq0.data(), dq0.size() * sizeof(float));
        host_to_device(s.dkv, dkv0.data(), dkv0.size() * sizeof(float));
    };
    for (int v = 1; v <= versions; v++) {
        if (!lab_wants(*lab, v)) continue;
        for (int block : LAB_BLOCK_SIZES) {
            if (v == 2 && block != LAB_BLOCK_SIZES[0]) continue;  // version 2 chooses its own blocks
            reset();
            forward_version(v, block, s);
            lab_check(lab, "out", s.out, out);
            lab_check(lab, "lse", s.lse, lse);
            host_to_device(s.lse, lse.data(), lse.size() * sizeof(float));  // the backward reads the twin's lse
            backward_version(v, block, s);
            lab_check(lab, "dq", s.dq, dq);
            lab_check(lab, "dk dv", s.dkv, dkv);
        }
        lab_report(lab, v, "B chunk C NH", {B, chunk, C, NH});
    }
    if (chunk >= 256) {
        double fwd_flops = 2 * 4.0 * B * chunk * chunk * C;  // two ranges, two products of chunk x chunk x hs per head
        printf("  forward (two ranges merged):\n");
        time_versions(*lab, versions, 0.0, [&](int v, int block) { forward_version(v, block, s); }, fwd_flops);
        printf("  backward:\n");
        time_versions(*lab, versions, 0.0, [&](int v, int block) { backward_version(v, block, s); }, 2 * fwd_flops);
    }
    for (void* p : {(void*)s.qkv, (void*)s.kv, (void*)s.dout, (void*)s.D, (void*)s.out, (void*)s.lse, (void*)s.dq, (void*)s.dkv})
        device_free(p);
}

int main(int argc, char** argv) {
    const int VERSIONS = 2;
    Lab lab = lab_start(argc, argv, "attention_ring", VERSIONS);
    // chunks of 7 and 50 (no tile's multiple), 32; head sizes 8, 16, 64 (tensor cores from 16 on); then timed
    struct Size { int B, chunk, C, NH; } sizes[] = {{2, 7, 16, 2}, {2, 50, 32, 2}, {1, 32, 128, 2}, {2, 50, 128, 2}, {8, 256, 768, 12}};
    for (Size z : sizes) {
        if (lab_skip_in_emulation((double)z.B * z.NH * z.chunk * z.chunk * 4)) continue;
        check_size(&lab, VERSIONS, z.B, z.chunk, z.C, z.NH);
    }
    return lab_finish(lab);
}

/*
dev/encoder_backward.cu: the embedding's backward, a scatter-add (kernels/encoder.cuh):
    dwte[tok[b,t],:] += dout[b,t,:];  dwpe[t,:] += dout[b,t,:]
Two positions with the same token add into the same row, so the versions differ in how
they avoid races while keeping a fixed order of additions (bit-exact resume needs it).

version 1: one thread per channel walks every position in order, adding into floatX
           each time: race-free and deterministic, but only C threads (768 for GPT-2)
           and one bf16 rounding per addition
version 2: the trainer's encoder_backward: the host sorts the positions into one bucket
           per distinct token, one thread per (bucket, channel) sums its positions in
           fp32 and adds once; one thread per (t, channel) sums the B positions of wpe.
           Parallelism (distinct tokens) x C; the host's sort and upload are timed too
*/
#include "lab.h"
#include "../kernels/encoder.cuh"  // defines: encoder_backward_host (the reference), encoder_backward (version 2)

__global__ void encoder_backward_kernel1(floatX* dwte, floatX* dwpe, const floatX* dout, const int* tokens,
                                         int B, int T, int C, VocabRange vocab) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    for (int bt = 0; bt < B * T; bt++) {
        float d = to_float(dout[(size_t)bt * C + c]);
        int row = tokens[bt] - vocab.begin;
        if (row >= 0 && row < vocab.rows) dwte[(size_t)row * C + c] = from_float(to_float(dwte[(size_t)row * C + c]) + d);
        dwpe[(size_t)(bt % T) * C + c] = from_float(to_float(dwpe[(size_t)(bt % T) * C + c]) + d);
    }
}

// tokens: host (version 2) and device (version 1) copies
static void encoder_backward_version(int version, int block, floatX* dwte, floatX* dwpe, const floatX* dout,
                                     const int* tokens_host, const int* tokens_device, int* bucket_scratch,
                                     int* bucket_staging, int B, int T, int C, VocabRange vocab) {
    if (version == 1) {
        encoder_backward_kernel1<<<ceil_div(C, block), block>>>(dwte, dwpe, dout, tokens_device, B, T, C, vocab);
        launchCheck();
    } else {
        encoder_backward(dwte, dwpe, dout, tokens_host, bucket_scratch, bucket_staging, B, T, C, vocab);
    }
}

// staging: the buckets' page-locked upload source; the timed loop rewrites it while an upload may be
// queued, with the same bytes each time (the same tokens), so what lands is the same
struct Buffers { int *tokens, *buckets, *staging; floatX *dwte, *dwpe, *dout; };

int main(int argc, char** argv) {
    const int VERSIONS = 2;
    Lab lab = lab_start(argc, argv, "encoder_backward", VERSIONS);
    struct Size { int B, T, C, V; } sizes[] = {{2, 16, 64, 20}, {4, 64, 768, 1000}, {8, 1024, 768, 50257}};
    for (Size s : sizes) {
        if (lab_skip_in_emulation((double)s.B * s.T * s.C)) continue;
        size_t n = (size_t)s.B * s.T * s.C;
        std::vector<int> tokens = random_tokens(s.B * s.T, s.V, 7);  // V = 20: many repeats
        std::vector<floatX> dout = random_floatx(n, 3), dwte0 = random_floatx((size_t)s.V * s.C, 4),
                            dwpe0 = random_floatx((size_t)s.T * s.C, 5);  // += onto earlier gradients
        std::vector<floatX> dwte = dwte0, dwpe = dwpe0;
        VocabRange all = {0, s.V};
        encoder_backward_host(dwte.data(), dwpe.data(), dout.data(), tokens.data(), s.B, s.T, s.C, all);
        Buffers d = {to_device(tokens), (int*)device_malloc(encoder_bucket_ints(s.B, s.T) * sizeof(int)),
                     (int*)pinned_host_malloc(encoder_bucket_ints(s.B, s.T) * sizeof(int)), to_device(dwte0), to_device(dwpe0), to_device(dout)};
        auto reset = [&] {
            host_to_device(d.dwte, dwte0.data(), dwte0.size() * sizeof(floatX));
            host_to_device(d.dwpe, dwpe0.data(), dwpe0.size() * sizeof(floatX));
        };
        for (int v = 1; v <= VERSIONS; v++) {
            if (!lab_wants(lab, v)) continue;
            for (int block : LAB_BLOCK_SIZES) {
                reset();
                encoder_backward_version(v, block, d.dwte, d.dwpe, d.dout, tokens.data(), d.tokens, d.buckets, d.staging, s.B, s.T, s.C, all);
                lab_check(&lab, "dwte", d.dwte, dwte);
                lab_check(&lab, "dwpe", d.dwpe, dwpe);
            }
            lab_report(&lab, v, "B T C V", {s.B, s.T, s.C, s.V});
        }
        if (s.V == 50257)
            time_versions(lab, VERSIONS, 3.0 * n * sizeof(floatX), [&](int v, int block) {
                encoder_backward_version(v, block, d.dwte, d.dwpe, d.dout, tokens.data(), d.tokens, d.buckets, d.staging, s.B, s.T, s.C, all);
            });
        device_free(d.tokens); device_free(d.buckets); device_free(d.dwte); device_free(d.dwpe); device_free(d.dout);
        pinned_host_free(d.staging);
    }
    for_each_ref_case("encoder", [&](const RefFile& ref, const std::string& p, const std::vector<int>& sz) {
        std::vector<int> tokens = ref.get(p + "tokens").as_ints();
        int B = sz[0], T = sz[1], C = sz[2], V = sz[3];
        std::vector<floatX> zeros_wte((size_t)V * C, from_float(0.0f)), zeros_wpe((size_t)T * C, from_float(0.0f));
        Buffers d = {to_device(tokens), (int*)device_malloc(encoder_bucket_ints(B, T) * sizeof(int)),
                     (int*)pinned_host_malloc(encoder_bucket_ints(B, T) * sizeof(int)), to_device(zeros_wte), to_device(zeros_wpe), to_device(ref_floatx(ref, p + "dout"))};
        for (int v = 1; v <= VERSIONS; v++) {
            if (!lab_wants(lab, v)) continue;
            printf("  version %d against PyTorch, case %s\n", v, p.c_str());
            host_to_device(d.dwte, zeros_wte.data(), zeros_wte.size() * sizeof(floatX));
            host_to_device(d.dwpe, zeros_wpe.data(), zeros_wpe.size() * sizeof(floatX));
            encoder_backward_version(v, 256, d.dwte, d.dwpe, d.dout, tokens.data(), d.tokens, d.buckets, d.staging, B, T, C, VocabRange{0, V});
            lab_check_ref(&lab, "dwte", d.dwte, ref, p + "dwte");
            lab_check_ref(&lab, "dwpe", d.dwpe, ref, p + "dwpe");
        }
        device_free(d.tokens); device_free(d.buckets); device_free(d.dwte); device_free(d.dwpe); device_free(d.dout);
        pinned_host_free(d.staging);
    });
    return lab_finish(lab);
}

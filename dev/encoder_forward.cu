/*
dev/encoder_forward.cu: the embedding, out[b,t,:] = wte[tok[b,t],:] + wpe[t,:]
(kernels/encoder.cuh). A pure copy-and-add: its speed is memory bandwidth.

version 1: one thread per output element: the trainer's encoder_forward_kernel
version 2: one thread per 16 bytes (8 bf16 or 4 fp32 channels): 128-bit loads and
           stores, and one index computation per 16 bytes instead of per element
*/
#include "lab.h"
#include "../kernels/encoder.cuh"  // defines: encoder_forward_host (the reference), encoder_forward_kernel (version 1)

// needs C a multiple of Packed128<floatX>::size
__global__ void encoder_forward_kernel2(floatX* out, const int* tokens, const floatX* wte, const floatX* wpe,
                                        int B, int T, int C, VocabRange vocab) {
    const int P = Packed128<floatX>::size;
    size_t idx = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * P;
    if (idx >= (size_t)B * T * C) return;
    size_t bt = idx / C;
    int t = bt % T, c = idx % C, row = tokens[bt] - vocab.begin;
    bool held = row >= 0 && row < vocab.rows;
    Packed128<floatX> w, p, o;
    if (held) w = load128(wte + (size_t)row * C + c);
    if (wpe) p = load128(wpe + (size_t)t * C + c);
    for (int k = 0; k < P; k++)
        o.v[k] = from_float((held ? to_float(w.v[k]) : 0.0f) + (wpe ? to_float(p.v[k]) : 0.0f));
    store128(out + idx, o);
}

static void encoder_forward_version(int version, int block, floatX* out, const int* tokens, const floatX* wte,
                                    const floatX* wpe, int B, int T, int C, VocabRange vocab) {
    size_t n = (size_t)B * T * C;
    if (version == 1) encoder_forward_kernel<<<ceil_div(n, block), block>>>(out, tokens, wte, wpe, B, T, C, vocab);
    else encoder_forward_kernel2<<<ceil_div(n / Packed128<floatX>::size, block), block>>>(out, tokens, wte, wpe, B, T, C, vocab);
    launchCheck();
}

int main(int argc, char** argv) {
    const int VERSIONS = 2;
    Lab lab = lab_start(argc, argv, "encoder_forward", VERSIONS);
    struct Size { int B, T, C, V; } sizes[] = {{2, 16, 64, 100}, {4, 64, 768, 1000}, {8, 1024, 768, 50257}};
    for (Size s : sizes) {
        if (lab_skip_in_emulation((double)s.B * s.T * s.C)) continue;
        size_t n = (size_t)s.B * s.T * s.C;
        std::vector<int> tokens = random_tokens(s.B * s.T, s.V, 7);
        std::vector<floatX> wte = random_floatx((size_t)s.V * s.C, 1), wpe = random_floatx((size_t)s.T * s.C, 2), out(n);
        VocabRange all = {0, s.V}, half = {s.V / 2, s.V - s.V / 2};  // half: a tensor-parallel rank's rows
        encoder_forward_host(out.data(), tokens.data(), wte.data(), wpe.data(), s.B, s.T, s.C, all);
        std::vector<floatX> out_half(n);
        encoder_forward_host(out_half.data(), tokens.data(), wte.data() + (size_t)half.begin * s.C, nullptr, s.B, s.T, s.C, half);
        int* d_tokens = to_device(tokens);
        floatX *d_wte = to_device(wte), *d_wpe = to_device(wpe), *d_out = (floatX*)device_malloc(n * sizeof(floatX));
        for (int v = 1; v <= VERSIONS; v++) {
            if (!lab_wants(lab, v)) continue;
            for (int block : LAB_BLOCK_SIZES) {
                encoder_forward_version(v, block, d_out, d_tokens, d_wte, d_wpe, s.B, s.T, s.C, all);
                lab_check(&lab, "out", d_out, out);
                encoder_forward_version(v, block, d_out, d_tokens, d_wte + (size_t)half.begin * s.C, nullptr, s.B, s.T, s.C, half);
                lab_check(&lab, "out (half the vocabulary, no wpe)", d_out, out_half);
            }
            lab_report(&lab, v, "B T C V", {s.B, s.T, s.C, s.V});
        }
        if (s.V == 50257)  // GPT-2's sizes: time every version
            time_versions(lab, VERSIONS, 3.0 * n * sizeof(floatX), [&](int v, int block) {
                encoder_forward_version(v, block, d_out, d_tokens, d_wte, d_wpe, s.B, s.T, s.C, all);
            });
        device_free(d_tokens); device_free(d_wte); device_free(d_wpe); device_free(d_out);
    }
    for_each_ref_case("encoder", [&](const RefFile& ref, const std::string& p, const std::vector<int>& sz) {
        int B = sz[0], T = sz[1], C = sz[2], V = sz[3];
        int* d_tokens = to_device(ref.get(p + "tokens").as_ints());
        floatX *d_wte = to_device(ref_floatx(ref, p + "wte")), *d_wpe = to_device(ref_floatx(ref, p + "wpe"));
        floatX* d_out = (floatX*)device_malloc((size_t)B * T * C * sizeof(floatX));
        for (int v = 1; v <= VERSIONS; v++) {
            if (!lab_wants(lab, v)) continue;
            printf("  version %d against PyTorch, case %s\n", v, p.c_str());
            encoder_forward_version(v, 256, d_out, d_tokens, d_wte, d_wpe, B, T, C, VocabRange{0, V});
            lab_check_ref(&lab, "out", d_out, ref, p + "out");
        }
        device_free(d_tokens); device_free(d_wte); device_free(d_wpe); device_free(d_out);
    });
    return lab_finish(lab);
}

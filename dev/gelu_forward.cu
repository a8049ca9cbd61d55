/*
dev/gelu_forward.cu: GPT-2's tanh GELU, out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
(kernels/gelu.cuh: gelu_value, shared by the host twin and every version). Elementwise:
its speed is memory bandwidth, 2 x 2 bytes per bf16 element.

version 1: one thread per element: the trainer's gelu_forward_kernel where packs do not fit
version 2: one thread per 16 bytes (8 bf16 or 4 fp32): 128-bit loads and stores, the trainer's
           gelu_forward_kernel128 (n a multiple of the pack, arrays 16-byte aligned)
*/
#include "lab.h"
#include "../kernels/gelu.cuh"  // defines: gelu_forward_host (the reference), gelu_value, gelu_forward_kernel (version 1), gelu_forward_kernel128 (version 2)

static void gelu_forward_version(int version, int block, floatX* out, const floatX* inp, size_t n) {
    if (version == 1) gelu_forward_kernel<<<ceil_div(n, block), block>>>(out, inp, n);
    else gelu_forward_kernel128<<<ceil_div(n / Packed128<floatX>::size, block), block>>>(out, inp, n);
    launchCheck();
}

int main(int argc, char** argv) {
    const int VERSIONS = 2;
    Lab lab = lab_start(argc, argv, "gelu_forward", VERSIONS);
    const size_t sizes[] = {1000, 4096 * 8, (size_t)16 * 1024 * 3072};  // the last: GPT-2 small's fc at B*T = 16k
    for (size_t n : sizes) {
        if (lab_skip_in_emulation((double)n)) continue;
        std::vector<floatX> inp = random_floatx(n, 1, 2.0f), out(n);
        gelu_forward_host(out.data(), inp.data(), n);
        floatX *d_inp = to_device(inp), *d_out = (floatX*)device_malloc(n * sizeof(floatX));
        for (int v = 1; v <= VERSIONS; v++) {
            if (!lab_wants(lab, v)) continue;
            for (int block : LAB_BLOCK_SIZES) {
                gelu_forward_version(v, block, d_out, d_inp, n);
                lab_check(&lab, "out", d_out, out);
            }
            lab_report(&lab, v, "n", {(long)n});
        }
        if (n > 1000000)
            time_versions(lab, VERSIONS, 2.0 * n * sizeof(floatX), [&](int v, int block) { gelu_forward_version(v, block, d_out, d_inp, n); });
        device_free(d_inp); device_free(d_out);
    }
    for_each_ref_case("gelu", [&](const RefFile& ref, const std::string& p, const std::vector<int>& sz) {
        size_t n = sz[0];
        floatX *d_inp = to_device(ref_floatx(ref, p + "inp")), *d_out = (floatX*)device_malloc(n * sizeof(floatX));
        for (int v = 1; v <= VERSIONS; v++) {
            if (!lab_wants(lab, v) || (v == 2 && n % Packed128<floatX>::size != 0)) continue;  // version 2: whole packs
            printf("  version %d against PyTorch, case %s\n", v, p.c_str());
            gelu_forward_version(v, 256, d_out, d_inp, n);
            lab_check_ref(&lab, "out", d_out, ref, p + "out");
        }
        device_free(d_inp); device_free(d_out);
    });
    return lab_finish(lab);
}

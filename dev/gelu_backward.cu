/*
dev/gelu_backward.cu: GELU's backward, dinp = gelu'(x) * dout (kernels/gelu.cuh:
gelu_derivative, shared by the host twin and every version). The trainer runs it in
place (dinp = dout), which every version allows: each element is read before written.

version 1: one thread per element: the trainer's gelu_backward_kernel where packs do not fit
version 2: one thread per 16 bytes (8 bf16 or 4 fp32): 128-bit loads and stores, the trainer's
           gelu_backward_kernel128 (n a multiple of the pack, arrays 16-byte aligned)
*/
#include "lab.h"
#include "../kernels/gelu.cuh"  // defines: gelu_backward_host (the reference), gelu_derivative, gelu_backward_kernel (version 1), gelu_backward_kernel128 (version 2)

static void gelu_backward_version(int version, int block, floatX* dinp, const floatX* inp, const floatX* dout, size_t n) {
    if (version == 1) gelu_backward_kernel<<<ceil_div(n, block), block>>>(dinp, inp, dout, n);
    else gelu_backward_kernel128<<<ceil_div(n / Packed128<floatX>::size, block), block>>>(dinp, inp, dout, n);
    launchCheck();
}

int main(int argc, char** argv) {
    const int VERSIONS = 2;
    Lab lab = lab_start(argc, argv, "gelu_backward", VERSIONS);
    const size_t sizes[] = {1000, 4096 * 8, (size_t)16 * 1024 * 3072};
    for (size_t n : sizes) {
        if (lab_skip_in_emulation((double)n)) continue;
        std::vector<floatX> inp = random_floatx(n, 1, 2.0f), dout = random_floatx(n, 2), dinp(n);
        gelu_backward_host(dinp.data(), inp.data(), dout.data(), n);
        floatX *d_inp = to_device(inp), *d_dout = to_device(dout), *d_dinp = (floatX*)device_malloc(n * sizeof(floatX));
        for (int v = 1; v <= VERSIONS; v++) {
            if (!lab_wants(lab, v)) continue;
            for (int block : LAB_BLOCK_SIZES) {
                gelu_backward_version(v, block, d_dinp, d_inp, d_dout, n);
                lab_check(&lab, "dinp", d_dinp, dinp);
                floatX* in_place = to_device(dout);  // as the trainer calls it: dinp = dout
                gelu_backward_version(v, block, in_place, d_inp, in_place, n);
                lab_check(&lab, "dinp (in place)", in_place, dinp);
                device_free(in_place);
            }
            lab_report(&lab, v, "n", {(long)n});
        }
        if (n > 1000000)
            time_versions(lab, VERSIONS, 3.0 * n * sizeof(floatX), [&](int v, int block) {
                gelu_backward_version(v, block, d_dinp, d_inp, d_dout, n);
            });
        device_free(d_inp); device_free(d_dout); device_free(d_dinp);
    }
    for_each_ref_case("gelu", [&](const RefFile& ref, const std::string& p, const std::vector<int>& sz) {
        size_t n = sz[0];
        floatX *d_inp = to_device(ref_floatx(ref, p + "inp")), *d_dout = to_device(ref_floatx(ref, p + "dout"));
        floatX* d_dinp = (floatX*)device_malloc(n * sizeof(floatX));
        for (int v = 1; v <= VERSIONS; v++) {
            if (!lab_wants(lab, v) || (v == 2 && n % Packed128<floatX>::size != 0)) continue;  // version 2: whole packs
            printf("  version %d against PyTorch, case %s\n", v, p.c_str());
            gelu_backward_version(v, 256, d_dinp, d_inp, d_dout, n);
            lab_check_ref(&lab, "dinp", d_dinp, ref, p + "dinp");
        }
        device_free(d_inp); device_free(d_dout); device_free(d_dinp);
    });
    return lab_finish(lab);
}

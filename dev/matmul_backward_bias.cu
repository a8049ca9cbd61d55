/*
dev/matmul_backward_bias.cu: the bias gradient, dbias(OC) += column sums of dout(N,OC)
(kernels/matmul.cuh). N = B*T rows (16k for GPT-2 small at B=16), OC up to 3072.
Every version adds in a fixed order, so a run repeats bit for bit (bit-exact resume).

version 1: one thread per column walks its N rows in order (bias_backward_column, the
           host twin's specification): OC threads only, e.g. 24 blocks of 128 for OC 3072
version 2: the trainer's bias_backward: two stages in one launch. 64 row ranges x 32-column
           tiles, 8 threads per column, write fp32 partial sums; the last of a tile's 64 blocks
           to finish adds the tile's parts in order (common.cuh: column_partials_last_block),
           where a second kernel did before (one launch a bias instead of two)
The block size applies to version 1; version 2's shape is fixed.
*/
#include "lab.h"
#include "../kernels/matmul.cuh"  // defines: bias_backward_host (the reference), bias_backward_column, bias_backward (version 2)

__global__ void bias_backward_kernel1(floatX* dbias, const floatX* dout, int N, int OC) {
    int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o < OC) bias_backward_column(o, dbias, dout, N, OC);
}

static void bias_backward_version(int version, int block, floatX* dbias, const floatX* dout, int N, int OC, float* partials) {
    if (version == 1) {
        bias_backward_kernel1<<<ceil_div(OC, block), block>>>(dbias, dout, N, OC);
        launchCheck();
    } else {
        bias_backward(dbias, dout, N, OC, partials);
    }
}

int main(int argc, char** argv) {
    const int VERSIONS = 2;
    Lab lab = lab_start(argc, argv, "matmul_backward_bias", VERSIONS);
    struct Size { int N, OC; } sizes[] = {{7, 48}, {65, 100}, {1000, 768}, {16 * 1024, 3072}};
    for (Size s : sizes) {
        if (lab_skip_in_emulation((double)s.N * s.OC)) continue;
        std::vector<floatX> dout = random_floatx((size_t)s.N * s.OC, 1), dbias0 = random_floatx(s.OC, 2), dbias = dbias0;
        bias_backward_host(dbias.data(), dout.data(), s.N, s.OC);
        floatX *d_dout = to_device(dout), *d_dbias = to_device(dbias0);
        float* d_partials = column_partials_scratch(s.OC);
        for (int v = 1; v <= VERSIONS; v++) {
            if (!lab_wants(lab, v)) continue;
            for (int block : LAB_BLOCK_SIZES) {
                host_to_device(d_dbias, dbias0.data(), s.OC * sizeof(floatX));  // += onto an earlier gradient
                bias_backward_version(v, block, d_dbias, d_dout, s.N, s.OC, d_partials);
                lab_check(&lab, "dbias", d_dbias, dbias);
            }
            lab_report(&lab, v, "N OC", {s.N, s.OC});
        }
        if (s.N == 16 * 1024)
            time_versions(lab, VERSIONS, (double)s.N * s.OC * sizeof(floatX), [&](int v, int block) {
                bias_backward_version(v, block, d_dbias, d_dout, s.N, s.OC, d_partials);
            });
        device_free(d_dout); device_free(d_dbias); device_free(d_partials);
    }
    for_each_ref_case("matmul", [&](const RefFile& ref, const std::string& p, const std::vector<int>& sz) {
        int N = sz[0], OC = sz[2];
        std::vector<floatX> zeros(OC, from_float(0.0f));
        floatX *d_dout = to_device(ref_floatx(ref, p + "dout")), *d_dbias = to_device(zeros);
        float* d_partials = column_partials_scratch(OC);
        for (int v = 1; v <= VERSIONS; v++) {
            if (!lab_wants(lab, v)) continue;
            printf("  version %d against PyTorch, case %s\n", v, p.c_str());
            host_to_device(d_dbias, zeros.data(), OC * sizeof(floatX));
            bias_backward_version(v, 256, d_dbias, d_dout, N, OC, d_partials);
            lab_check_ref(&lab, "dbias", d_dbias, ref, p + "dbias");
        }
        device_free(d_dout); device_free(d_dbias); device_free(d_partials);
    });
    return lab_finish(lab);
}

/*
dev/global_norm.cu: the squared L2 norm of a gradient buffer, for clipping and the loss
scaler's overflow check (kernels/gradients.cuh). Deterministic in every version: the
device writes NORM_PARTS partial sums, each in a fixed order, and the host adds them in
order in double, so a resumed run sees the same norm bit for bit. (An atomicAdd per
block would be shorter, and its order would change from run to run.)

version 1: one block of 1024 threads strides over everything; thread partials added
           by thread 0 in order. One SM does all the work
version 2: the trainer's norm_partials_kernel: NORM_PARTS blocks grid-striding, each
           reduced by a shared-memory tree (fixed shape: 256 threads)
version 3: as version 2, the block reduced by warp shuffles and one shared-memory step
The block size applies to versions 1 (as the thread count) and 3.
*/
#include "lab.h"
#include "../kernels/gradients.cuh"  // defines: norm_partials_host (the reference), norm_partials_kernel (version 2), NORM_PARTS

__global__ void norm_partials_kernel1(float* partials, const floatX* x, size_t n) {
    __shared__ float thread_sums[1024];
    float sum = 0.0f;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) sum += to_float(x[i]) * to_float(x[i]);
    thread_sums[threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.x != 0) return;
    for (int t = 1; t < (int)blockDim.x; t++) sum += thread_sums[t];
    partials[0] = sum;
    for (int p = 1; p < NORM_PARTS; p++) partials[p] = 0.0f;
}

__global__ void norm_partials_kernel3(float* partials, const floatX* x, size_t n) {
    __shared__ float warp_sums[32];
    float sum = 0.0f;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        sum += to_float(x[i]) * to_float(x[i]);
    for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffff, sum, o);
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    if (lane == 0) warp_sums[warp] = sum;
    __syncthreads();
    if (warp != 0) return;
    sum = lane < warps ? warp_sums[lane] : 0.0f;
    for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffff, sum, o);
    if (lane == 0) partials[blockIdx.x] = sum;
}

// the squared norm: the version's partials, added on the host in order in double
static double global_norm_version(int version, int block, float* partials, const floatX* x, size_t n) {
    if (version == 1) norm_partials_kernel1<<<1, block>>>(partials, x, n);
    else if (version == 2) norm_partials_kernel<floatX><<<NORM_PARTS, 256>>>(partials, x, n);
    else norm_partials_kernel3<<<NORM_PARTS, block>>>(partials, x, n);
    launchCheck();
    std::vector<float> host = from_device(partials, NORM_PARTS);
    double total = 0.0;
    for (float p : host) total += p;
    return total;
}

int main(int argc, char** argv) {
    const int VERSIONS = 3;
    Lab lab = lab_start(argc, argv, "global_norm", VERSIONS);
    const size_t sizes[] = {1000, 100003, (size_t)124 * 1000 * 1000};  // the last: GPT-2 small's parameter count
    for (size_t n : sizes) {
        if (lab_skip_in_emulation((double)n)) continue;
        std::vector<floatX> x = random_floatx(n, 1, 0.01f);
        std::vector<float> partials(NORM_PARTS);
        norm_partials_host(partials.data(), x.data(), n);
        double twin = 0.0;
        for (float p : partials) twin += p;
        floatX* d_x = to_device(x);
        float* d_partials = (float*)device_malloc(NORM_PARTS * sizeof(float));
        for (int v = 1; v <= VERSIONS; v++) {
            if (!lab_wants(lab, v)) continue;
            for (int block : LAB_BLOCK_SIZES) {
                double ours = global_norm_version(v, block, d_partials, d_x, n);
                lab_check_value(&lab, "norm squared", ours, twin, 1e-5);  // an fp32 sum in every build
                lab_check_value(&lab, "norm squared, again (bit for bit)", global_norm_version(v, block, d_partials, d_x, n), ours, 0.0);
            }
            lab_report(&lab, v, "n", {(long)n});
        }
        if (n > 1000000)
            time_versions(lab, VERSIONS, (double)n * sizeof(floatX), [&](int v, int block) { global_norm_version(v, block, d_partials, d_x, n); });
        device_free(d_x); device_free(d_partials);
    }
    for_each_ref_case("global_norm", [&](const RefFile& ref, const std::string& p, const std::vector<int>& sz) {
        size_t n = sz[0];
        floatX* d_x = to_device(ref_floatx(ref, p + "inp"));
        float* d_partials = (float*)device_malloc(NORM_PARTS * sizeof(float));
        for (int v = 1; v <= VERSIONS; v++) {
            if (!lab_wants(lab, v)) continue;
            printf("  version %d against PyTorch, case %s\n", v, p.c_str());
            double ours = global_norm_version(v, 256, d_partials, d_x, n);
            if (!check_close("norm squared", &ours, ref.get(p + "norm_squared"), 1e-5, [](double d) { return d; })) lab.failures++;
        }
        device_free(d_x); device_free(d_partials);
    });
    return lab_finish(lab);
}

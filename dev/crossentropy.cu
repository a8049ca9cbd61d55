/*
dev/crossentropy.cu: fused softmax + cross-entropy + its gradient over the first V of Vp
logit columns (kernels/crossentropy.cuh), the gradient written over the logits:
    loss_i = log(sum_{j<V} exp(z_ij)) - z_i,target
    dz_ij  = (softmax(z_i)_j - [j == target_i]) * dloss   (j < V),   0 for V <= j < Vp
The (N, Vp) logits are the largest tensor of a small GPT: every pass over them counts.

version 1: one thread per row, three passes (max, sum of exponentials, gradient): the
           host twin's row (crossentropy_forward_backward_row) on the device; a warp reads
           32 rows far apart
version 2: the trainer's four pieces under tensor parallelism, one block of 512 per row each: row max, row sum
           of exp(z - max), the target's logit, then loss and gradient. Four launches
           and three reads of the row before the gradient, so that under tensor
           parallelism the three per-row numbers can be all-reduced between pieces
version 3: one block per row, one kernel: an online softmax keeps a running (max, sum)
           per thread, rescaling the sum when the max grows, and merges the pairs across
           the block; then the gradient pass. Two reads of the row instead of four: the
           trainer's at one tensor-parallel rank (kernels/crossentropy.cuh's
           crossentropy_forward_backward, 512 threads a row), 16 bytes a thread where the
           padded row allows (crossentropy_fused_kernel128; on an H200 the 2-byte kernel took
           1.92 ms for 8192 rows of 50304); tensor parallelism needs version 2's split
The block size applies to versions 1 and 3.
*/
#include "lab.h"
#include "../kernels/crossentropy.cuh"  // defines: crossentropy_forward_backward_host (the reference), the pieces (version 2),
                                        //          crossentropy_forward_backward (version 3)

__global__ void crossentropy_kernel1(floatX* logits, float* losses, const int* targets, int N, int V, int Vp, float dloss) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) crossentropy_forward_backward_row(i, logits, losses, targets, V, Vp, dloss);  // the host twin's row
}

struct Buffers { floatX* logits; float *losses, *maxes, *sums, *target_logits; int* targets; };

static void crossentropy_version(int version, int block, const Buffers& d, int N, int V, int Vp, float dloss) {
    if (version == 1) {
        crossentropy_kernel1<<<ceil_div(N, block), block>>>(d.logits, d.losses, d.targets, N, V, Vp, dloss);
        launchCheck();
    } else if (version == 2) {
        crossentropy_row_max(d.maxes, d.logits, N, Vp, V);
        crossentropy_row_sumexp(d.sums, d.logits, d.maxes, N, Vp, V);
        crossentropy_target_logit(d.target_logits, d.logits, d.targets, N, Vp, 0);
        crossentropy_finish(d.logits, d.losses, d.targets, d.maxes, d.sums, d.target_logits, N, Vp, 0, V, dloss);
    } else {
        crossentropy_forward_backward(d.logits, d.losses, d.targets, N, V, Vp, dloss, block);  // the trainer's at tp = 1
    }
}
static Buffers upload(const std::vector<floatX>& logits, const std::vector<int>& targets, int N) {
    return {to_device(logits), (float*)device_malloc(N * sizeof(float)), (float*)device_malloc(N * sizeof(float)),
            (float*)device_malloc(N * sizeof(float)), (float*)device_malloc(N * sizeof(float)), to_device(targets)};
}
static void release(const Buffers& d) {
    device_free(d.logits); device_free(d.losses); device_free(d.maxes); device_free(d.sums); device_free(d.target_logits);
    device_free(d.targets);
}

int main(int argc, char** argv) {
    const int VERSIONS = 3;
    Lab lab = lab_start(argc, argv, "crossentropy", VERSIONS);
    struct Size { int N, V, Vp; } sizes[] = {{4, 50, 64}, {7, 1000, 1024}, {64, 50257, 50304}, {4096, 50257, 50304}};
    for (Size s : sizes) {
        if (lab_skip_in_emulation((double)s.N * s.Vp)) continue;
        size_t n = (size_t)s.N * s.Vp;
        std::vector<floatX> logits = random_floatx(n, 1, 3.0f), dlogits = logits;
        std::vector<int> targets = random_tokens(s.N, s.V, 2);
        std::vector<float> losses(s.N);
        float dloss = 1.0f / s.N;
        crossentropy_forward_backward_host(dlogits.data(), losses.data(), targets.data(), s.N, s.V, s.Vp, dloss);
        Buffers d = upload(logits, targets, s.N);
        for (int v = 1; v <= VERSIONS; v++) {
            if (!lab_wants(lab, v)) continue;
            for (int block : LAB_BLOCK_SIZES) {
                host_to_device(d.logits, logits.data(), n * sizeof(floatX));  // the gradient overwrote them
                crossentropy_version(v, block, d, s.N, s.V, s.Vp, dloss);
                lab_check(&lab, "losses", d.losses, losses);
                lab_check(&lab, "dlogits", d.logits, dlogits);
            }
            lab_report(&lab, v, "N V Vp", {s.N, s.V, s.Vp});
        }
        if (s.N == 4096)  // timed on the gradients the last check left: the same work
            time_versions(lab, VERSIONS, 2.0 * n * sizeof(floatX), [&](int v, int block) { crossentropy_version(v, block, d, s.N, s.V, s.Vp, dloss); });
        release(d);
    }
    for_each_ref_case("crossentropy", [&](const RefFile& ref, const std::string& p, const std::vector<int>& sz) {
        int N = sz[0], V = sz[1], Vp = sz[2];
        std::vector<floatX> logits = ref_floatx(ref, p + "logits");
        float dloss = (float)ref.get(p + "dloss").values[0];
        Buffers d = upload(logits, ref.get(p + "targets").as_ints(), N);
        for (int v = 1; v <= VERSIONS; v++) {
            if (!lab_wants(lab, v)) continue;
            printf("  version %d against PyTorch, case %s\n", v, p.c_str());
            host_to_device(d.logits, logits.data(), logits.size() * sizeof(floatX));
            crossentropy_version(v, 256, d, N, V, Vp, dloss);
            lab_check_ref(&lab, "losses", d.losses, ref, p + "losses");
            lab_check_ref(&lab, "dlogits", d.logits, ref, p + "dlogits");
        }
        release(d);
    });
    return lab_finish(lab);
}

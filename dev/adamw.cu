/*
dev/adamw.cu: the AdamW update (adamw.h: adamw_apply, one element, shared by the host
loop and every version). Per parameter it reads gradient, m, v, the parameter (and the
fp32 master in 16-bit builds) and writes all but the gradient back: 26 bytes in bf16,
so its speed is memory bandwidth. The 16-bit builds round the master into the
parameter stochastically, the random bits a hash of (seed, element).

version 1: one thread per element: the trainer's adamw_kernel where an array is not 16-byte aligned
version 2: one thread per 16 bytes of parameters (8 bf16 or 4 fp32): 128-bit loads and
           stores of every array, the elements updated by the same adamw_apply: the
           trainer's adamw_kernel128
*/
#include "lab.h"
#include "../adamw.h"  // defines: adamw_apply (the reference's and every version's element), adamw_kernel (version 1),
                       //          adamw_kernel128 (version 2)

struct State { std::vector<floatX> params, grads; std::vector<float> master, m, v; };  // master empty in fp32 builds
struct Buffers { floatX *params, *grads; float *master, *m, *v; };
static Buffers upload(const State& s) {
    return {to_device(s.params), to_device(s.grads), s.master.empty() ? nullptr : to_device(s.master), to_device(s.m), to_device(s.v)};
}
static void reset(const Buffers& d, const State& s) {
    host_to_device(d.params, s.params.data(), s.params.size() * sizeof(floatX));
    if (d.master) host_to_device(d.master, s.master.data(), s.master.size() * sizeof(float));
    host_to_device(d.m, s.m.data(), s.m.size() * sizeof(float));
    host_to_device(d.v, s.v.data(), s.v.size() * sizeof(float));
}
static void release(const Buffers& d) { device_free(d.params); device_free(d.grads); device_free(d.master); device_free(d.m); device_free(d.v); }

static const AdamWConfig CONFIG = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
static const int STEP = 5;
static const float GRAD_SCALE = 0.5f;
static const uint64_t SEED = 1234;

static void adamw_version(int version, int block, const Buffers& d, size_t n) {
    float bc1 = 1.0f - powf(CONFIG.beta1, (float)STEP), bc2 = 1.0f - powf(CONFIG.beta2, (float)STEP);
    if (version == 1)
        adamw_kernel<floatX><<<ceil_div(n, block), block>>>(d.params, d.master, d.grads, d.m, d.v, n, CONFIG, bc1, bc2, GRAD_SCALE, SEED, 0);
    else
        adamw_kernel128<floatX><<<ceil_div(n, (size_t)block * Packed128<floatX>::size), block>>>(d.params, d.master, d.grads, d.m, d.v, n,
                                                                                    CONFIG, bc1, bc2, GRAD_SCALE, SEED, 0);
    launchCheck();
}

static State make_state(std::vector<float> params, std::vector<floatX> grads, std::vector<float> m, std::vector<float> v) {
    State s = {as_floatx(params), grads, FLOATX_IS_FP32 ? std::vector<float>() : params, m, v};
    return s;
}

int main(int argc, char** argv) {
    const int VERSIONS = 2;
    Lab lab = lab_start(argc, argv, "adamw", VERSIONS);
    const size_t sizes[] = {1000, 4099, (size_t)124 * 1000 * 1000};
    for (size_t n : sizes) {
        if (lab_skip_in_emulation((double)n)) continue;
        std::vector<float> v0 = random_floats(n, 4, 0.01f);
        for (float& x : v0) x *= x;
        State s = make_state(random_floats(n, 1, 0.1f), random_floatx(n, 2, 0.1f), random_floats(n, 3, 0.01f), v0), twin = s;
        float bc1 = 1.0f - powf(CONFIG.beta1, (float)STEP), bc2 = 1.0f - powf(CONFIG.beta2, (float)STEP);
        float* twin_master = twin.master.empty() ? nullptr : twin.master.data();
        for (size_t i = 0; i < n; i++)  // the host twin: adamw_update's host loop
            adamw_apply(i, twin.params.data(), twin_master, twin.grads.data(), twin.m.data(), twin.v.data(), CONFIG, bc1, bc2,
                        GRAD_SCALE, SEED, 0);
        Buffers d = upload(s);
        for (int v = 1; v <= VERSIONS; v++) {
            if (!lab_wants(lab, v)) continue;
            for (int block : LAB_BLOCK_SIZES) {
                reset(d, s);
                adamw_version(v, block, d, n);
                lab_check(&lab, "params", d.params, twin.params);
                lab_check(&lab, "m", d.m, twin.m, 1e-5);
                lab_check(&lab, "v", d.v, twin.v, 1e-5);
                if (d.master) lab_check(&lab, "master", d.master, twin.master, 1e-5);
            }
            lab_report(&lab, v, "n", {(long)n});
        }
        if (n > 1000000)  // params, m, v (and master) read and written, gradients read
            time_versions(lab, VERSIONS, (double)n * (3 * sizeof(floatX) + (d.master ? 24 : 16)),
                          [&](int v, int block) { adamw_version(v, block, d, n); });
        release(d);
    }
    // the file's hyperparameters are CONFIG, STEP, GRAD_SCALE (checked below)
    for_each_ref_case("adamw", [&](const RefFile& ref, const std::string& p, const std::vector<int>& sz) {
        size_t n = sz[0];
        const std::vector<double>& h = ref.get(p + "hyper").values;  // lr, beta1, beta2, eps, wd, t, grad_scale
        if ((float)h[0] != CONFIG.lr || (float)h[1] != CONFIG.beta1 || (float)h[2] != CONFIG.beta2 || (float)h[3] != CONFIG.eps ||
            (float)h[4] != CONFIG.weight_decay || (int)h[5] != STEP || (float)h[6] != GRAD_SCALE)
            fail("%s: hyperparameters differ from this lab's CONFIG, STEP, GRAD_SCALE", ref.path.c_str());
        State s = make_state(ref_floats(ref, p + "params"), ref_floatx(ref, p + "grads"), ref_floats(ref, p + "m"), ref_floats(ref, p + "v"));
        Buffers d = upload(s);
        for (int v = 1; v <= VERSIONS; v++) {
            if (!lab_wants(lab, v)) continue;
            printf("  version %d against PyTorch, case %s\n", v, p.c_str());
            reset(d, s);
            adamw_version(v, 256, d, n);
            lab_check_ref(&lab, d.master ? "params (rounded)" : "params", d.params, ref, p + "params_out");
            if (d.master) lab_check_ref(&lab, "master", d.master, ref, p + "params_out");
            lab_check_ref(&lab, "m", d.m, ref, p + "m_out");
            lab_check_ref(&lab, "v", d.v, ref, p + "v_out");
        }
        release(d);
    });
    return lab_finish(lab);
}

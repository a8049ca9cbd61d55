/*
tests/test_ops_vs_pytorch.cpp: every op's host twin (and the CPU build's fast path where
it has its own) against PyTorch's outputs and gradients from dev/pytorch_ref.py, the
same files the dev/ labs check their GPU kernels with.

Built twice. The fp32 build runs the files' fp32 cases (inputs fp32, PyTorch in float64);
the bf16 build runs their bf16 cases (inputs bf16, PyTorch in bf16).
    ./test_ops_vs_pytorch_fp32 DIR    (DIR: where dev/pytorch_ref.py --out wrote)
Tolerances, relative L2 error over a tensor (measured values: make test's log):
  fp32 1e-5 against float64: fp32 keeps 24 bits (u = 6e-8); the longest sums here have
             ~1000 terms, whose rounding grows like sqrt(n) u ~ 2e-6; 1e-5 leaves 5x.
             Measured: at most 2e-7.
  bf16 1e-2 against float64 on the same bf16 inputs: bf16 keeps 8 bits, up to 2^-9 = 2e-3
             relative per store, and an op stores one to three times (attention: scores,
             probabilities, output): a few times 2e-3. Measured: at most 3.4e-3.
  bf16 2e-2 against PyTorch's bf16: PyTorch's own error, up to 1.2e-2 from float64 (it sums
             LayerNorm's parameter gradients in bf16), plus ours.
AdamW and the global norm run in fp32 on both builds (fp32 state; the norm of bf16 values
is an fp32 sum) and are held to the fp32 tolerance, and the bf16 build's parameters,
rounded stochastically from the fp32 master, to one bf16 step (2^-8 relative).
*/
#include <stdio.h>
#include <string>
#include <vector>
#include "../precision.h"             // defines: floatX, to_float, from_float, PRECISION_NAME
#include "../kernels/encoder.cuh"     // defines: encoder_forward_host, encoder_backward_host
#include "../kernels/layernorm.cuh"   // defines: layernorm_forward_host, layernorm_backward_host
#include "../kernels/matmul.cuh"      // defines: matmul_forward, matmul_backward
#include "../kernels/attention.cuh"   // defines: attention_forward_host, attention_backward_host, attention_forward
#include "../kernels/gelu.cuh"        // defines: gelu_forward_host, gelu_backward_host
#include "../kernels/crossentropy.cuh" // defines: crossentropy_forward_backward_host, crossentropy_row_max, ...
#include "../kernels/gradients.cuh"   // defines: global_norm_squared, NORM_PARTS
#include "../adamw.h"                 // defines: adamw_update, AdamWConfig
#include "../dev/pytorch_ref.h"       // defines: RefFile, read_ref_file, check_close, check_against_pytorch

using std::string;
using std::vector;

static const bool FP32 = FLOATX_IS_FP32;
static const double STATE_TOL = 1e-5, BF16_STEP = 1.0 / 256;  // fp32 state; one bf16 step (REF_TOL: pytorch_ref.h)

static vector<floatX> floatx(const RefTensor& t) { return t.as<floatX>([](double d) { return from_float((float)d); }); }
static vector<float> floats(const RefTensor& t) { return t.as<float>([](double d) { return (float)d; }); }
static double of(floatX x) { return as_double(x); }
static double of_float(float x) { return x; }

struct Case {  // one size of one op: tensor k of it is file.get(prefix + k)
    const RefFile& file;
    string prefix;
    const RefTensor& operator[](const string& name) const { return file.get(prefix + name); }
    vector<int> sizes() const { return (*this)["sizes"].as_ints(); }
};

// an output against PyTorch (pytorch_ref.h: float64, and in a bf16 build PyTorch's bf16 too)
template <typename T>
static bool check_output(const Case& c, const char* what, const T* ours, const char* name) {
    return check_against_pytorch(what, ours, c.file, c.prefix + name);
}

static bool encoder_case(const Case& c) {
    vector<int> s = c.sizes();
    int B = s[0], T = s[1], C = s[2], V = s[3];
    vector<int> tokens = c["tokens"].as_ints();
    vector<floatX> wte = floatx(c["wte"]), wpe = floatx(c["wpe"]), dout = floatx(c["dout"]);
    vector<floatX> out((size_t)B * T * C), dwte((size_t)V * C, from_float(0)), dwpe((size_t)T * C, from_float(0));
    encoder_forward_host(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, VocabRange{0, V});
    encoder_backward_host(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C, VocabRange{0, V});
    return check_output(c, "out", out.data(), "out") & check_output(c, "dwte", dwte.data(), "dwte") &
           check_output(c, "dwpe", dwpe.data(), "dwpe");
}

static bool layernorm_case(const Case& c) {
    vector<int> s = c.sizes();
    int N = s[0], C = s[1];
    vector<floatX> inp = floatx(c["inp"]), w = floatx(c["weight"]), b = floatx(c["bias"]), dout = floatx(c["dout"]);
    vector<floatX> out((size_t)N * C), dinp((size_t)N * C, from_float(0)), dw(C, from_float(0)), db(C, from_float(0));
    vector<float> mean(N), rstd(N);
    layernorm_forward_host(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
    layernorm_backward_host(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), mean.data(), rstd.data(), N, C);
    return check_output(c, "out", out.data(), "out") &
           check_close("mean", mean.data(), c["mean"], STATE_TOL, of_float) &  // fp32 statistics in every build
           check_close("rstd", rstd.data(), c["rstd"], STATE_TOL, of_float) &
           check_output(c, "dinp", dinp.data(), "dinp") & check_output(c, "dweight", dw.data(), "dweight") &
           check_output(c, "dbias", db.data(), "dbias");
}

static bool matmul_case(const Case& c) {  // the forward's twin, and the CPU build's path: sgemm and the bias twins
    vector<int> s = c.sizes();
    int N = s[0], C = s[1], OC = s[2];
    vector<floatX> inp = floatx(c["inp"]), w = floatx(c["weight"]), b = floatx(c["bias"]), dout = floatx(c["dout"]);
    vector<floatX> out((size_t)N * OC), dinp((size_t)N * C), dw((size_t)OC * C, from_float(0)), db(OC, from_float(0));
    vector<floatX> twin_out((size_t)N * OC);
    matmul_forward_host(twin_out.data(), inp.data(), w.data(), b.data(), N, C, OC);
    matmul_forward(out.data(), inp.data(), w.data(), b.data(), N, C, OC);
    matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, C, OC, nullptr);
    return check_output(c, "out (twin)", twin_out.data(), "out") & check_output(c, "out", out.data(), "out") & check_output(c, "dinp", dinp.data(), "dinp") &
           check_output(c, "dweight", dw.data(), "dweight") & check_output(c, "dbias", db.data(), "dbias");
}

static bool attention_case(const Case& c) {  // the twin, then the CPU build's sgemm tiles
    vector<int> s = c.sizes();
    int B = s[0], T = s[1], C = s[2], NH = s[3];
    size_t n = (size_t)B * T * C, stats = (size_t)B * T * NH;
    vector<floatX> qkv = floatx(c["qkv"]), dout = floatx(c["dout"]);
    bool ok = true;
    for (int fast = 0; fast < 2; fast++) {
        printf("   %s\n", fast ? "attention_forward/backward (CPU build)" : "host twin");
        vector<floatX> out(n), dqkv(3 * n);
        vector<float> lse(stats), acc(n), dq(n), dkv(2 * n), D(stats);
        if (fast) {
            AttentionScratch scratch = {acc.data(), dq.data(), dkv.data(), D.data()};
            attention_forward(out.data(), lse.data(), qkv.data(), scratch, B, T, C, NH, 1);
            attention_backward(dqkv.data(), dout.data(), out.data(), lse.data(), qkv.data(), scratch, B, T, C, NH, 1);
        } else {
            attention_forward_host(out.data(), lse.data(), qkv.data(), B, T, C, NH);
            attention_backward_host(dqkv.data(), dout.data(), out.data(), lse.data(), qkv.data(), B, T, C, NH);
        }
        ok &= check_output(c, "out", out.data(), "out") & check_output(c, "lse", lse.data(), "lse") &
              check_output(c, "dqkv", dqkv.data(), "dqkv");
    }
    return ok;
}

static bool gelu_case(const Case& c) {
    size_t n = c.sizes()[0];
    vector<floatX> inp = floatx(c["inp"]), dout = floatx(c["dout"]), out(n), dinp(n);
    gelu_forward_host(out.data(), inp.data(), n);
    gelu_backward_host(dinp.data(), inp.data(), dout.data(), n);
    return check_output(c, "out", out.data(), "out") & check_output(c, "dinp", dinp.data(), "dinp");
}

static bool crossentropy_case(const Case& c) {  // the fused twin, then the four pieces the trainer calls
    vector<int> s = c.sizes();
    int N = s[0], V = s[1], Vp = s[2];
    vector<int> targets = c["targets"].as_ints();
    float dloss = (float)c["dloss"].values[0];
    vector<floatX> fused = floatx(c["logits"]), pieces = fused;
    vector<float> losses(N), pieces_losses(N), maxes(N), sums(N), target_logits(N);
    crossentropy_forward_backward_host(fused.data(), losses.data(), targets.data(), N, V, Vp, dloss);
    crossentropy_row_max(maxes.data(), pieces.data(), N, Vp, V);
    crossentropy_row_sumexp(sums.data(), pieces.data(), maxes.data(), N, Vp, V);
    crossentropy_target_logit(target_logits.data(), pieces.data(), targets.data(), N, Vp, 0);
    crossentropy_finish(pieces.data(), pieces_losses.data(), targets.data(), maxes.data(), sums.data(),
                        target_logits.data(), N, Vp, 0, V, dloss);
    return check_output(c, "losses (fused)", losses.data(), "losses") &
           check_output(c, "dlogits (fused)", fused.data(), "dlogits") &
           check_output(c, "losses (pieces)", pieces_losses.data(), "losses") &
           check_output(c, "dlogits (pieces)", pieces.data(), "dlogits");
}

static bool adamw_case(const Case& c) {
    size_t n = c.sizes()[0];
    const vector<double>& h = c["hyper"].values;  // lr, beta1, beta2, eps, wd, t, grad_scale
    AdamWConfig config;
    config.lr = (float)h[0]; config.beta1 = (float)h[1]; config.beta2 = (float)h[2]; config.eps = (float)h[3];
    config.weight_decay = (float)h[4];
    vector<floatX> params = floatx(c["params"]), grads = floatx(c["grads"]);
    vector<float> m = floats(c["m"]), v = floats(c["v"]), master = floats(c["params"]);
    adamw_update(params.data(), FP32 ? nullptr : master.data(), grads.data(), m.data(), v.data(), n, config, (int)h[5],
                 (float)h[6], 1234, 0);
    bool ok = check_close("m", m.data(), c["m_out"], STATE_TOL, of_float) &
              check_close("v", v.data(), c["v_out"], STATE_TOL, of_float);
    if (FP32) return ok & check_close("params", params.data(), c["params_out"], STATE_TOL, of);
    return ok & check_close("master params", master.data(), c["params_out"], STATE_TOL, of_float) &
           check_close("params (stochastic rounding)", params.data(), c["params_out"], BF16_STEP, of);
}

static bool global_norm_case(const Case& c) {
    size_t n = c.sizes()[0];
    vector<floatX> x = floatx(c["inp"]);
    vector<float> scratch(NORM_PARTS);
    double norm_squared = global_norm_squared(x.data(), n, scratch.data());
    return check_close("norm squared", &norm_squared, c["norm_squared"], STATE_TOL, [](double d) { return d; });
}

int main(int argc, char** argv) {
    if (argc != 2) { fprintf(stderr, "usage: %s DIR (the --out of dev/pytorch_ref.py)\n", argv[0]); return 2; }
    struct Op { const char* name; bool (*run)(const Case&); };
    const Op ops[] = {{"encoder", encoder_case},     {"layernorm", layernorm_case}, {"matmul", matmul_case},
                      {"attention", attention_case}, {"gelu", gelu_case},           {"crossentropy", crossentropy_case},
                      {"adamw", adamw_case},         {"global_norm", global_norm_case}};
    int failed = 0, checked = 0;
    for (const Op& op : ops) {
        RefFile file = read_ref_file(string(argv[1]) + "/" + op.name + ".bin");
        int cases = file.cases(PRECISION_NAME);
        if (cases == 0) { printf("%s: no %s cases in %s\n", op.name, PRECISION_NAME, file.path.c_str()); failed++; }
        for (int k = 0; k < cases; k++) {
            Case c{file, string(PRECISION_NAME) + "/" + std::to_string(k) + "/"};
            vector<int> s = c.sizes();
            printf("%s %s case %d (sizes", op.name, PRECISION_NAME, k);
            for (int v : s) printf(" %d", v);
            printf(")\n");
            bool ok = op.run(c);
            failed += !ok;
            checked++;
        }
    }
    printf("%d op cases checked against PyTorch (%s), %d failed\n", checked, PRECISION_NAME, failed);
    return failed ? 1 : 0;
}

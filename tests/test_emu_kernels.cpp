/*
tests/test_emu_kernels.cpp: every kernel launcher of the CUDA build (kernels/, adamw.h) against
its host twin, run in the emulated CUDA build (tests/emu/) in fp32, bf16 and fp16, at odd sizes
(rows that are not multiples of a block, heads of 8, 7 or 5 channels, a vocabulary split
across ranks), and with zero sizes, which must launch nothing. Where the twin is the CPU
build's sgemm (the linear layer's backward), the reference is a float64 loop.
Tolerance, relative L2 over a tensor: fp32 1e-5 (other summation orders); bf16 1e-2 (a value
stored in 16 bits, then used again, differs by a rounding or two of 2^-9 relative each; measured
<= 2.5e-3); fp16 2e-3 (its roundings are 8x finer, 2^-12; measured <= 3.3e-4).
    ./test_emu_kernels     prints one line per check, exit 1 if any failed
*/
#include <stdio.h>
#include <math.h>
#include <vector>
#include <string>
#include <string.h>
#include "../kernels/encoder.cuh"
#include "../kernels/layernorm.cuh"
#include "../kernels/matmul.cuh"
#include "../kernels/attention.cuh"
#include "../kernels/gelu.cuh"
#include "../kernels/gelu_fusion.cuh"
#include "../kernels/crossentropy.cuh"
#include "../kernels/gradients.cuh"
#include "../adamw.h"
#include "../random.h"

using std::vector;
static const double TOL = PRECISION == PRECISION_FP32 ? 1e-5 : PRECISION == PRECISION_BF16 ? 1e-2 : 2e-3;
static int failures = 0;

static double value(float x) { return x; }
#if !FLOATX_IS_FP32
static double value(floatX x) { return to_float(x); }
#endif
template <typename T> static void check(const char* what, const vector<T>& ours, const vector<T>& twin, double tol = TOL) {
    double diff = 0, norm = 1e-30;
    bool finite = true;
    for (size_t i = 0; i < twin.size(); i++) {
        double a = value(ours[i]), b = value(twin[i]);
        finite = finite && std::isfinite(a) == std::isfinite(b);
        diff += (a - b) * (a - b);
        norm += b * b;
    }
    double err = sqrt(diff / norm);
    bool ok = finite && err <= tol;
    printf("%s %-52s rel L2 %.2e (tolerance %.0e)\n", ok ? "ok  " : "FAIL", what, err, tol);
    failures += !ok;
}
template <typename T> static T* upload(const vector<T>& h) {
    T* d = (T*)device_malloc(h.size() * sizeof(T));
    host_to_device(d, h.data(), h.size() * sizeof(T));
    return d;
}
template <typename T> static vector<T> download(const T* d, size_t n) {
    vector<T> h(n);
    device_to_host(h.data(), d, n * sizeof(T));
    return h;
}
static vector<floatX> randx(size_t n, uint64_t seed, float scale = 1.0f) {
    Rng r = {seed};
    vector<floatX> v(n);
    for (floatX& x : v) x = from_float((float)(scale * rng_normal(&r)));
    return v;
}
static vector<int> tokens(size_t n, int V, uint64_t seed) {
    Rng r = {seed};
    vector<int> t(n);
    for (int& x : t) x = (int)(rng_next(&r) % V);
    return t;
}

static void encoder(int B, int T, int C, int V, VocabRange vocab, bool positions) {
    vector<int> tok = tokens((size_t)B * T, V, 1);
    vector<floatX> wte = randx((size_t)vocab.rows * C, 2), wpe = randx((size_t)T * C, 3), out((size_t)B * T * C);
    vector<floatX> dout = randx(out.size(), 4), dwte = randx(wte.size(), 5), dwpe = randx(wpe.size(), 6);
    floatX *d_wte = upload(wte), *d_wpe = upload(wpe), *d_out = upload(out), *d_dout = upload(dout);
    floatX *d_dwte = upload(dwte), *d_dwpe = upload(dwpe);
    int* d_tok = upload(tok);
    int* scratch = (int*)device_malloc(encoder_bucket_ints(B, T) * sizeof(int));
    encoder_forward(d_out, d_tok, d_wte, positions ? d_wpe : NULL, B, T, C, vocab);
    encoder_forward_host(out.data(), tok.data(), wte.data(), positions ? wpe.data() : NULL, B, T, C, vocab);
    check("encoder_forward", download(d_out, out.size()), out);
    int* staging = (int*)pinned_host_malloc(encoder_bucket_ints(B, T) * sizeof(int));  // the upload's page-locked source
    encoder_backward(d_dwte, d_dwpe, d_dout, tok.data(), scratch, staging, B, T, C, vocab);
    encoder_backward_host(dwte.data(), dwpe.data(), dout.data(), tok.data(), B, T, C, vocab);
    check("encoder_backward dwte", download(d_dwte, dwte.size()), dwte, 0.0);  // the same sums in the same order
    check("encoder_backward dwpe", download(d_dwpe, dwpe.size()), dwpe, 0.0);
    for (void* p : {(void*)d_wte, (void*)d_wpe, (void*)d_out, (void*)d_dout, (void*)d_dwte, (void*)d_dwpe, (void*)d_tok, (void*)scratch})
        device_free(p);
    pinned_host_free(staging);
}

static void layernorm(int N, int C) {
    vector<floatX> inp = randx((size_t)N * C, 7, 2.0f), w = randx(C, 8), b = randx(C, 9), out(inp.size());
    vector<float> mean(N), rstd(N);
    floatX *d_inp = upload(inp), *d_w = upload(w), *d_b = upload(b), *d_out = upload(out);
    float *d_mean = upload(mean), *d_rstd = upload(rstd);
    layernorm_forward(d_out, d_mean, d_rstd, d_inp, d_w, d_b, N, C);
    layernorm_forward_host(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
    check("layernorm_forward out", download(d_out, out.size()), out);
    check("layernorm_forward mean", download(d_mean, N), mean, 1e-5);
    check("layernorm_forward rstd", download(d_rstd, N), rstd, 1e-5);
    vector<floatX> dout = randx(inp.size(), 10), dinp = randx(inp.size(), 11), dw = randx(C, 12), db = randx(C, 13);
    floatX *d_dout = upload(dout), *d_dinp = upload(dinp), *d_dw = upload(dw), *d_db = upload(db);
    float* partials = column_partials_scratch(2 * C);
    layernorm_backward(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean, d_rstd, N, C, partials);
    layernorm_backward_host(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), mean.data(), rstd.data(), N, C);
    check("layernorm_backward dinp", download(d_dinp, dinp.size()), dinp);
    check("layernorm_backward dweight", download(d_dw, C), dw);
    check("layernorm_backward dbias", download(d_db, C), db);
    // out of place (the trainer's residual stream between two buffers): dinp = dres + the input
    // gradient, dres untouched, against the twin and bit for bit the in-place kernel's result
    vector<floatX> dres = randx(inp.size(), 15), dnew = dres, in_place = dres;
    floatX *d_dres = upload(dres), *d_dnew = (floatX*)device_malloc(inp.size() * sizeof(floatX)), *d_in_place = upload(dres);
    layernorm_backward_input(d_dnew, d_dres, d_dout, d_inp, d_w, d_mean, d_rstd, N, C);
    layernorm_backward_input(d_in_place, d_in_place, d_dout, d_inp, d_w, d_mean, d_rstd, N, C);
    layernorm_backward_input_host(dnew.data(), dres.data(), dout.data(), inp.data(), w.data(), mean.data(), rstd.data(), N, C);
    check("layernorm_backward_input, out of place", download(d_dnew, dnew.size()), dnew);
    check("layernorm_backward_input, out of place = in place", download(d_dnew, dnew.size()), download(d_in_place, dnew.size()), 0.0);
    check("layernorm_backward_input, its dres untouched", download(d_dres, dres.size()), dres, 0.0);
    // the whole backward in one pass (C a multiple of the lane's packs) against the twins, and bit
    // for bit the two kernels' results (the input half, then the parameters' column sums)
    vector<floatX> dw2 = download(d_dw, C), db2 = download(d_db, C);  // the gradients so far, on both sides
    floatX *d_dw2 = upload(dw2), *d_db2 = upload(db2);
    layernorm_backward_both(d_dnew, d_dres, d_dw, d_db, d_dout, d_inp, d_w, d_mean, d_rstd, N, C, partials);
    layernorm_backward_input(d_in_place, d_dres, d_dout, d_inp, d_w, d_mean, d_rstd, N, C);
    layernorm_backward_params(d_dw2, d_db2, d_dout, d_inp, d_mean, d_rstd, N, C, partials);
    layernorm_backward_params_host(dw2.data(), db2.data(), dout.data(), inp.data(), mean.data(), rstd.data(), N, C);
    check("layernorm_backward_both dinp", download(d_dnew, dnew.size()), dnew);
    check("layernorm_backward_both dweight", download(d_dw, C), dw2);
    check("layernorm_backward_both dbias", download(d_db, C), db2);
    check("layernorm_backward_both dinp = the input half's", download(d_dnew, dnew.size()), download(d_in_place, dnew.size()), 0.0);
    check("layernorm_backward_both dweight = the column sums'", download(d_dw, C), download(d_dw2, C), 0.0);
    check("layernorm_backward_both dbias = the column sums'", download(d_db, C), download(d_db2, C), 0.0);
    for (void* p : {(void*)d_dres, (void*)d_dnew, (void*)d_in_place, (void*)d_dw2, (void*)d_db2}) device_free(p);
    // the residual add and the LayerNorm in one pass: the residual, the output, mean and rstd, each
    // the same bits as residual_forward's and layernorm_forward's (their host twins)
    vector<floatX> a = randx(inp.size(), 14, 2.0f), residual(inp.size());
    floatX *d_a = upload(a), *d_residual = (floatX*)device_malloc(inp.size() * sizeof(floatX));
    residual_layernorm_forward(d_residual, d_out, d_mean, d_rstd, d_a, d_inp, d_w, d_b, N, C);
    residual_forward_host(residual.data(), a.data(), inp.data(), inp.size());
    layernorm_forward_host(out.data(), mean.data(), rstd.data(), residual.data(), w.data(), b.data(), N, C);
    check("residual_layernorm_forward residual", download(d_residual, residual.size()), residual, 0.0);
    check("residual_layernorm_forward out", download(d_out, out.size()), out);
    check("residual_layernorm_forward mean", download(d_mean, N), mean, 1e-5);
    check("residual_layernorm_forward rstd", download(d_rstd, N), rstd, 1e-5);
    for (void* p : {(void*)d_inp, (void*)d_w, (void*)d_b, (void*)d_out, (void*)d_mean, (void*)d_rstd, (void*)d_dout, (void*)d_dinp,
                    (void*)d_dw, (void*)d_db, (void*)partials, (void*)d_a, (void*)d_residual})
        device_free(p);
}

static void matmul(int N, int C, int OC) {
    vector<floatX> inp = randx((size_t)N * C, 14), w = randx((size_t)OC * C, 15, 0.2f), b = randx(OC, 16), out((size_t)N * OC);
    floatX *d_inp = upload(inp), *d_w = upload(w), *d_b = upload(b), *d_out = upload(out);
    for (bool bias : {true, false}) {
        matmul_forward(d_out, d_inp, d_w, bias ? d_b : NULL, N, C, OC);
        matmul_forward_host(out.data(), inp.data(), w.data(), bias ? b.data() : NULL, N, C, OC);
        check(bias ? "matmul_forward with bias" : "matmul_forward without bias", download(d_out, out.size()), out);
    }
    // backward against float64: dinp = dout W, dW += dout^T inp, db += column sums of dout
    vector<floatX> dout = randx(out.size(), 17), dw0 = randx(w.size(), 18), db0 = randx(OC, 19);
    floatX *d_dout = upload(dout), *d_dinp = upload(inp), *d_dw = upload(dw0), *d_db = upload(db0);
    float* partials = column_partials_scratch(OC);
    matmul_backward(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, N, C, OC, partials);
    vector<float> dinp((size_t)N * C), dw(w.size()), db(OC);
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int o = 0; o < OC; o++) s += value(dout[(size_t)i * OC + o]) * value(w[(size_t)o * C + c]);
            dinp[(size_t)i * C + c] = (float)s;
        }
    for (int o = 0; o < OC; o++) {
        double sb = value(db0[o]);
        for (int i = 0; i < N; i++) sb += value(dout[(size_t)i * OC + o]);
        db[o] = (float)sb;
        for (int c = 0; c < C; c++) {
            double s = value(dw0[(size_t)o * C + c]);
            for (int i = 0; i < N; i++) s += value(dout[(size_t)i * OC + o]) * value(inp[(size_t)i * C + c]);
            dw[(size_t)o * C + c] = (float)s;
        }
    }
    auto widen = [](const vector<floatX>& v) { vector<float> f(v.size()); for (size_t i = 0; i < v.size(); i++) f[i] = (float)value(v[i]); return f; };
    check("matmul_backward dinp (float64)", widen(download(d_dinp, dinp.size())), dinp);
    check("matmul_backward dweight (float64)", widen(download(d_dw, dw.size())), dw);
    check("matmul_backward dbias (float64)", widen(download(d_db, OC)), db);
    vector<floatX> db_twin = db0;
    bias_backward_host(db_twin.data(), dout.data(), N, OC);
    check("bias_backward against its host twin", download(d_db, OC), db_twin);
    for (void* p : {(void*)d_inp, (void*)d_w, (void*)d_b, (void*)d_out, (void*)d_dout, (void*)d_dinp, (void*)d_dw, (void*)d_db, (void*)partials})
        device_free(p);
}

// -ge's fused GEMMs (kernels/gelu_fusion.cuh) against their host twins: the forward's two outputs
// against matmul_forward_host and gelu_forward_host, the backward's input gradient against float64
// (dout W) gelu'(pre). At OC 40 (the aux ld a multiple of 8) cuBLASLt's epilogues must take the call
// (asserted); at OC 37 they cannot, and the two-kernel fallback must give the same
static void gelu_fusion(int N, int C, int OC) {
    vector<floatX> inp = randx((size_t)N * C, 24), w = randx((size_t)OC * C, 25, 0.2f), b = randx(OC, 26);
    vector<floatX> pre((size_t)N * OC), out((size_t)N * OC), dout((size_t)N * C), dinp((size_t)N * OC);
    floatX *d_inp = upload(inp), *d_w = upload(w), *d_b = upload(b), *d_pre = upload(pre), *d_out = upload(out);
    matmul_gelu_forward(d_out, d_pre, d_inp, d_w, d_b, N, C, OC, true);
    matmul_forward_host(pre.data(), inp.data(), w.data(), b.data(), N, C, OC);
    gelu_forward_host(out.data(), pre.data(), out.size());
    check(OC % 8 ? "matmul_gelu_forward fallback, pre-GELU" : "matmul_gelu_forward fused, pre-GELU", download(d_pre, pre.size()), pre);
    check(OC % 8 ? "matmul_gelu_forward fallback, GELU" : "matmul_gelu_forward fused, GELU", download(d_out, out.size()), out);
    // backward: the layer after GELU maps OC channels to C: weight w2 (C,OC), dout (N,C), dinp (N,OC)
    vector<floatX> w2 = randx((size_t)C * OC, 27, 0.2f), g = randx(dout.size(), 28);
    floatX *d_w2 = upload(w2), *d_g = upload(g), *d_dinp = upload(dinp);
    matmul_gelu_backward_input(d_dinp, d_g, d_w2, d_pre, N, OC, C, true);
    vector<float> want(dinp.size());
    vector<floatX> pre_d = download(d_pre, pre.size());  // the pre-GELU values the backward read
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OC; o++) {
            double s = 0, x = value(pre_d[(size_t)i * OC + o]);
            for (int c = 0; c < C; c++) s += value(g[(size_t)i * C + c]) * value(w2[(size_t)c * OC + o]);
            double t = tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x));
            double slope = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * sqrt(2.0 / M_PI) * (1 + 3 * 0.044715 * x * x);
            want[(size_t)i * OC + o] = (float)(s * slope);
        }
    vector<floatX> got = download(d_dinp, dinp.size());
    vector<float> got_f(got.size());
    for (size_t i = 0; i < got.size(); i++) got_f[i] = (float)value(got[i]);
    check(OC % 8 ? "matmul_gelu_backward_input fallback (float64)" : "matmul_gelu_backward_input fused (float64)", got_f, want);
    // (last: it writes the outputs the checks above read) the epilogue took the call, or refused it
    bool fused = matmul_lt(d_out, d_w, true, d_inp, OC, N, C, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, d_b, d_pre);
    printf("%s matmul_lt GELU_AUX_BIAS at OC %d: %s\n", fused == (OC % 8 == 0) ? "ok  " : "FAIL", OC,
           fused ? "taken" : "refused");
    failures += fused != (OC % 8 == 0);
    for (void* p : {(void*)d_inp, (void*)d_w, (void*)d_b, (void*)d_pre, (void*)d_out, (void*)d_w2, (void*)d_g, (void*)d_dinp})
        device_free(p);
}

// the column sums' scratch shared, as the trainer shares it, by calls of different widths: the
// widest first, then narrower bias and LayerNorm sums, each against its host twin (each call's
// tile counters must be where no other call's parts land, and left zero)
static void column_sums_sharing_scratch(int N) {
    float* scratch = column_partials_scratch(300);
    for (int cols : {300, 100, 37, 300}) {
        vector<floatX> dout = randx((size_t)N * cols, 31 + cols), db0 = randx(cols, 32);
        floatX *d_dout = upload(dout), *d_db = upload(db0);
        bias_backward(d_db, d_dout, N, cols, scratch);
        vector<floatX> db = db0;
        bias_backward_host(db.data(), dout.data(), N, cols);
        check(("bias_backward, " + std::to_string(cols) + " columns after wider ones").c_str(), download(d_db, cols), db);
        device_free(d_dout); device_free(d_db);
    }
    int C = 120;  // LayerNorm's parameters: 2 x 120 columns of parts in the same scratch
    vector<floatX> dout = randx((size_t)N * C, 41), inp = randx((size_t)N * C, 42), dw0 = randx(C, 43), db0 = randx(C, 44);
    vector<float> mean(N), rstd(N);
    for (int i = 0; i < N; i++) mean[i] = 0.01f * i, rstd[i] = 1.0f + 0.02f * i;
    floatX *d_dout = upload(dout), *d_inp = upload(inp), *d_dw = upload(dw0), *d_db = upload(db0);
    float *d_mean = upload(mean), *d_rstd = upload(rstd);
    layernorm_backward_params(d_dw, d_db, d_dout, d_inp, d_mean, d_rstd, N, C, scratch);
    vector<floatX> dw = dw0, db = db0;
    layernorm_backward_params_host(dw.data(), db.data(), dout.data(), inp.data(), mean.data(), rstd.data(), N, C);
    check("layernorm_backward_params dweight, scratch shared", download(d_dw, C), dw);
    check("layernorm_backward_params dbias, scratch shared", download(d_db, C), db);
    for (void* p : {(void*)d_dout, (void*)d_inp, (void*)d_dw, (void*)d_db, (void*)d_mean, (void*)d_rstd, (void*)scratch}) device_free(p);
}

// several column sums in one launch (a block's four biases, its two LayerNorms) against the host
// twins, and bit for bit the sums one launch each gives; entries wider than the tile counters
// allow in one launch are split into several, and a NULL bias is skipped
static void column_sums_many(int N) {
    const int widths[4] = {40, 100, 37, 64};
    float* scratch = column_partials_scratch(2 * 32768);
    vector<vector<floatX>> dout(4), db0(4);
    vector<floatX*> d_dout(4), d_db(4), d_one(4);
    for (int e = 0; e < 4; e++) {
        dout[e] = randx((size_t)N * widths[e], 51 + e), db0[e] = randx(widths[e], 55 + e);
        d_dout[e] = upload(dout[e]), d_db[e] = upload(db0[e]), d_one[e] = upload(db0[e]);
    }
    bias_backward_many({{d_db[0], d_dout[0], 40}, {d_db[1], d_dout[1], 100}, {NULL, d_dout[2], 37}, {d_db[2], d_dout[2], 37},
                        {d_db[3], d_dout[3], 64}}, N, scratch);
    for (int e = 0; e < 4; e++) {
        bias_backward(d_one[e], d_dout[e], N, widths[e], scratch);
        vector<floatX> db = db0[e];
        bias_backward_host(db.data(), dout[e].data(), N, widths[e]);
        std::string what = "bias_backward_many, entry " + std::to_string(e);
        check(what.c_str(), download(d_db[e], widths[e]), db);
        check((what + " = one launch each").c_str(), download(d_db[e], widths[e]), download(d_one[e], widths[e]), 0.0);
        device_free(d_dout[e]); device_free(d_db[e]); device_free(d_one[e]);
    }
    // 2 x 20000 columns: 2 x 625 tiles, more than COLUMN_TILES_MAX, two launches. Not under
    // ThreadSanitizer: its 1250 blocks took 150 of the 250 s the launchers' run there took, and the
    // launch split is logic, which the fp32, bf16 and fp16 builds check; the kernel's barriers are
    // the same at every width, and the widths above run there
#if !defined(__SANITIZE_THREAD__)
    {
        int wide = 20000, rows = 3;  // 2 x 625 tiles: more than COLUMN_TILES_MAX, two launches
        vector<floatX> wa = randx((size_t)rows * wide, 61), wb = randx((size_t)rows * wide, 62), z(wide, from_float(0.0f));
        floatX *d_wa = upload(wa), *d_wb = upload(wb), *d_za = upload(z), *d_zb = upload(z);
        bias_backward_many({{d_za, d_wa, wide}, {d_zb, d_wb, wide}}, rows, scratch);
        vector<floatX> ha = z, hb = z;
        bias_backward_host(ha.data(), wa.data(), rows, wide);
        bias_backward_host(hb.data(), wb.data(), rows, wide);
        check("bias_backward_many, 2 x 20000 columns: two launches", download(d_zb, wide), hb);
        check("bias_backward_many, 2 x 20000 columns, the first", download(d_za, wide), ha);
        for (void* p : {(void*)d_wa, (void*)d_wb, (void*)d_za, (void*)d_zb}) device_free(p);
    }
#endif
    int C = 72;  // two LayerNorms in one launch
    vector<float> mean(N), rstd(N);
    for (int i = 0; i < N; i++) mean[i] = 0.01f * i, rstd[i] = 1.0f + 0.02f * i;
    float *d_mean = upload(mean), *d_rstd = upload(rstd);
    vector<vector<floatX>> ldout(2), linp(2), ldw(2), ldb(2);
    vector<floatX*> d_ldout(2), d_linp(2), d_ldw(2), d_ldb(2);
    for (int e = 0; e < 2; e++) {
        ldout[e] = randx((size_t)N * C, 71 + e), linp[e] = randx((size_t)N * C, 73 + e), ldw[e] = randx(C, 75 + e), ldb[e] = randx(C, 77 + e);
        d_ldout[e] = upload(ldout[e]), d_linp[e] = upload(linp[e]), d_ldw[e] = upload(ldw[e]), d_ldb[e] = upload(ldb[e]);
    }
    layernorm_backward_params_many({{d_ldw[0], d_ldb[0], d_ldout[0], d_linp[0], d_mean, d_rstd},
                                    {d_ldw[1], d_ldb[1], d_ldout[1], d_linp[1], d_mean, d_rstd}}, N, C, scratch);
    for (int e = 0; e < 2; e++) {
        layernorm_backward_params_host(ldw[e].data(), ldb[e].data(), ldout[e].data(), linp[e].data(), mean.data(), rstd.data(), N, C);
        check(("layernorm_backward_params_many dweight, entry " + std::to_string(e)).c_str(), download(d_ldw[e], C), ldw[e]);
        check(("layernorm_backward_params_many dbias, entry " + std::to_string(e)).c_str(), download(d_ldb[e], C), ldb[e]);
        for (void* p : {(void*)d_ldout[e], (void*)d_linp[e], (void*)d_ldw[e], (void*)d_ldb[e]}) device_free(p);
    }
    for (void* p : {(void*)d_mean, (void*)d_rstd, (void*)scratch}) device_free(p);
}

// fp32 device memory the kernels must write before they read: fresh, so the emulator's NaN poison
static float* fresh_floats(size_t n) { return (float*)device_malloc(n * sizeof(float)); }

// one rank's flash attention (kernels/attention.cuh, kernels/flash_attention.cuh; -fa 2:
// kernels/flash_attention_mma.cuh) against the twin: out, lse and dqkv, the scratch fresh (NaN) so
// that what is read before it is written shows
static void attention(int B, int T, int C, int NH, int flash = 1) {
    size_t n = (size_t)B * T * C, stats = (size_t)B * T * NH;
    vector<floatX> qkv = randx(3 * n, 20), out(n), dout = randx(n, 21), dqkv(3 * n);
    vector<float> lse(stats);
    floatX *d_qkv = upload(qkv), *d_out = (floatX*)device_malloc(n * sizeof(floatX)), *d_dout = upload(dout);
    floatX* d_dqkv = (floatX*)device_malloc(3 * n * sizeof(floatX));
    float* d_lse = fresh_floats(stats);
    AttentionScratch s = {fresh_floats(n), fresh_floats(n), fresh_floats(2 * n), fresh_floats(stats)};
    attention_forward(d_out, d_lse, d_qkv, s, B, T, C, NH, flash);
    attention_forward_host(out.data(), lse.data(), qkv.data(), B, T, C, NH);
    std::string at = " B T hs NH " + std::to_string(B) + " " + std::to_string(T) + " " + std::to_string(C / NH) + " " +
                     std::to_string(NH) + (flash == 2 ? " -fa 2" : "");
    check(("attention_forward out" + at).c_str(), download(d_out, n), out);
    check(("attention_forward lse" + at).c_str(), download(d_lse, stats), lse, 1e-5 + (FLOATX_IS_FP32 ? 0 : 1e-3));
    attention_backward(d_dqkv, d_dout, d_out, d_lse, d_qkv, s, B, T, C, NH, flash);
    attention_backward_host(dqkv.data(), dout.data(), out.data(), lse.data(), qkv.data(), B, T, C, NH);
    check(("attention_backward dqkv" + at).c_str(), download(d_dqkv, dqkv.size()), dqkv);
    for (void* p : {(void*)d_qkv, (void*)d_out, (void*)d_dout, (void*)d_dqkv, (void*)d_lse, (void*)s.out, (void*)s.dq, (void*)s.dkv,
                    (void*)s.D})
        device_free(p);
}

// ring attention's pieces (cp.h): chunk 1 of each sequence's queries against chunk 0's keys (whole,
// the first block, its output and lse fresh), then against its own (causal, merged into the first),
// and their backward; the keys either in the qkv rows (stride 3C) or packed as [k | v] rows (2C)
static vector<float> randf(size_t n, uint64_t seed) {
    vector<float> v(n);
    Rng r = {seed};
    for (float& x : v) x = (float)rng_normal(&r);
    return v;
}
static void attention_ranges(int B, int chunk, int C, int NH, bool packed) {
    int rows = 2 * chunk;  // each sequence: chunk 0, then chunk 1
    size_t n = (size_t)B * rows * C, stats = (size_t)B * NH * rows;
    vector<floatX> qkv = randx(3 * n, 40), dout = randx(n, 41), out(n), dqkv(3 * n), kv(2 * n);
    vector<float> acc(n), lse(stats), D(stats), dq = randf(n, 42), dkv = randf(2 * n, 43);
    floatX *d_qkv = upload(qkv), *d_dout = upload(dout), *d_out = upload(out), *d_dqkv = upload(dqkv), *d_kv = upload(kv);
    float *d_acc = fresh_floats(n), *d_lse = fresh_floats(stats), *d_D = upload(D), *d_dq = upload(dq), *d_dkv = upload(dkv);
    attention_pack_kv(d_kv, d_qkv, (size_t)B * rows, C);
    attention_pack_kv_host(kv.data(), qkv.data(), (size_t)B * rows, C);
    if (packed) check("attention_pack_kv", download(d_kv, 2 * n), kv, 0.0);
    const floatX *keys = packed ? kv.data() : qkv.data() + C, *d_keys = packed ? d_kv : d_qkv + C;
    int stride = packed ? 2 * C : 3 * C;
    AttentionRange ranges[2] = {{rows, chunk, rows, 0, B, chunk, chunk, C, NH, stride, false, true},  // each sequence's rows
                                {rows, chunk, rows, chunk, B, chunk, chunk, C, NH, stride, true, false}};  // are chunk 0, chunk 1
    for (const AttentionRange& a : ranges) {
        attention_range_forward(a, d_qkv, d_keys, d_acc, d_lse);
        attention_range_forward_host(a, qkv.data(), keys, acc.data(), lse.data());
    }
    vector<float> got_acc = download(d_acc, n), got_lse = download(d_lse, stats);
    for (int b = 0; b < B; b++)  // chunk 0's queries are in no block: their rows stay fresh, set to 0 here and there
        for (int t = 0; t < chunk; t++) {
            size_t row = (size_t)b * rows + t;
            for (int c = 0; c < C; c++) got_acc[row * C + c] = 0.0f;
            for (int h = 0; h < NH; h++) got_lse[row * NH + h] = 0.0f;
        }
    std::string how = packed ? " ([k | v] rows)" : " (qkv rows)";
    check(("attention_range_forward out, two ranges merged" + how).c_str(), got_acc, acc);
    check(("attention_range_forward lse" + how).c_str(), got_lse, lse, 1e-5 + (FLOATX_IS_FP32 ? 0 : 1e-3));
    host_to_device(d_acc, got_acc.data(), n * sizeof(float));
    host_to_device(d_lse, got_lse.data(), stats * sizeof(float));
    attention_range_output(d_out, d_acc, n);
    attention_range_output_host(out.data(), acc.data(), n);
    attention_range_row_dot(d_D, d_dout, d_out, B * rows, C, NH);
    attention_range_row_dot_host(D.data(), dout.data(), out.data(), B * rows, C, NH);
    check("attention_range_row_dot", download(d_D, stats), D);
    for (const AttentionRange& a : ranges) {
        attention_range_backward(a, d_qkv, d_keys, d_dq, d_dkv, d_dout, d_lse, d_D);
        attention_range_backward_host(a, qkv.data(), keys, dq.data(), dkv.data(), dout.data(), lse.data(), D.data());
    }
    check(("attention_range_backward dq" + how).c_str(), download(d_dq, n), dq);
    check(("attention_range_backward dk dv" + how).c_str(), download(d_dkv, 2 * n), dkv);
    attention_range_gradients(d_dqkv, d_dq, d_dkv, (size_t)B * rows, C);
    attention_range_gradients_host(dqkv.data(), dq.data(), dkv.data(), (size_t)B * rows, C);
    check("attention_range_gradients dqkv", download(d_dqkv, 3 * n), dqkv);
    for (void* p : {(void*)d_qkv, (void*)d_dout, (void*)d_out, (void*)d_dqkv, (void*)d_kv, (void*)d_acc, (void*)d_lse, (void*)d_D,
                    (void*)d_dq, (void*)d_dkv})
        device_free(p);
}

static void elementwise(size_t n) {
    vector<floatX> a = randx(n, 22), b = randx(n, 23), out(n), dinp(n);
    floatX *d_a = upload(a), *d_b = upload(b), *d_out = upload(out);
    gelu_forward(d_out, d_a, n);
    gelu_forward_host(out.data(), a.data(), n);
    check("gelu_forward", download(d_out, n), out);
    gelu_backward(d_out, d_a, d_b, n);
    gelu_backward_host(dinp.data(), a.data(), b.data(), n);
    check("gelu_backward", download(d_out, n), dinp);
    residual_forward(d_out, d_a, d_b, n);
    residual_forward_host(out.data(), a.data(), b.data(), n);
    check("residual_forward", download(d_out, n), out);
    for (void* p : {(void*)d_a, (void*)d_b, (void*)d_out}) device_free(p);
}

static void crossentropy(int N, int cols, int valid, int vocab_begin) {
    vector<floatX> logits = randx((size_t)N * cols, 24, 3.0f), twin = logits;
    vector<int> targets = tokens(N, valid + vocab_begin, 25);
    vector<float> maxes(N), sums(N), target_logits(N), losses(N);
    floatX* d_logits = upload(logits);
    int* d_targets = upload(targets);
    float *d_maxes = upload(maxes), *d_sums = upload(sums), *d_target = upload(target_logits), *d_losses = upload(losses);
    crossentropy_row_max(d_maxes, d_logits, N, cols, valid);
    crossentropy_row_max_host(maxes.data(), twin.data(), N, cols, valid);
    check("crossentropy_row_max", download(d_maxes, N), maxes, 0.0);
    crossentropy_row_sumexp(d_sums, d_logits, d_maxes, N, cols, valid);
    crossentropy_row_sumexp_host(sums.data(), twin.data(), maxes.data(), N, cols, valid);
    check("crossentropy_row_sumexp", download(d_sums, N), sums, 1e-5);
    crossentropy_target_logit(d_target, d_logits, d_targets, N, cols, vocab_begin);
    crossentropy_target_logit_host(target_logits.data(), twin.data(), targets.data(), N, cols, vocab_begin);
    check("crossentropy_target_logit", download(d_target, N), target_logits, 0.0);
    crossentropy_finish(d_logits, d_losses, d_targets, d_maxes, d_sums, d_target, N, cols, vocab_begin, valid, 1.0f / N);
    crossentropy_finish_host(twin.data(), losses.data(), targets.data(), maxes.data(), sums.data(), target_logits.data(), N,
                             cols, vocab_begin, valid, 1.0f / N);
    check("crossentropy_finish losses", download(d_losses, N), losses, 1e-5);
    check("crossentropy_finish dlogits", download(d_logits, logits.size()), twin);
    if (vocab_begin == 0 && valid <= cols) {  // one rank's whole vocabulary: the fused classifier, fresh losses
        vector<floatX> fused_twin = logits;
        float* d_fused_losses = (float*)device_malloc(N * sizeof(float));
        host_to_device(d_logits, logits.data(), logits.size() * sizeof(floatX));
        crossentropy_forward_backward(d_logits, d_fused_losses, d_targets, N, valid, cols, 1.0f / N);
        crossentropy_forward_backward_host(fused_twin.data(), losses.data(), targets.data(), N, valid, cols, 1.0f / N);
        check("crossentropy_forward_backward (fused) losses", download(d_fused_losses, N), losses, 1e-5);
        check("crossentropy_forward_backward (fused) dlogits", download(d_logits, logits.size()), fused_twin);
        device_free(d_fused_losses);
    }
    for (void* p : {(void*)d_logits, (void*)d_targets, (void*)d_maxes, (void*)d_sums, (void*)d_target, (void*)d_losses}) device_free(p);
}

// AdamW's one launch over a table of slices (adamw.h: adamw_update_slices), as zero.h makes it:
// three slices of the n values, one with weight decay, one not 16-byte aligned, the parameters at
// other offsets than the state (stage 0-2's full buffer), each element against adamw_apply
static void adamw_slices(floatX* d_p, vector<floatX>& p, float* d_master, vector<float>& master, floatX* d_g, const vector<floatX>& g,
                         float* d_m, vector<float>& m, float* d_v, vector<float>& v, size_t n, AdamWConfig c) {
    size_t a = n / 3, b = n / 3 + 1;  // the second slice starts one value past a pack boundary (n/3 = 683 for n 2049)
    vector<AdamWSlice> table = {{16, 0, a - 16, 500, 0, 1}, {a, a, b - a + 100, 900, 0, 0}, {b + 100, b + 100, n - b - 100, 7, 0, 1}};
    unsigned blocks = 0;
    for (AdamWSlice& s : table) s.first_block = blocks, blocks += adamw_slice_blocks(s.n);
    AdamWSlice* d_table = (AdamWSlice*)device_malloc(table.size() * sizeof(AdamWSlice));
    host_to_device(d_table, table.data(), table.size() * sizeof(AdamWSlice));
    adamw_update_slices(d_p, d_master, d_g, d_m, d_v, d_table, (int)table.size(), blocks, c, 0.1f, 5, 0.75f, 4321);
    float bc1 = 1.0f - powf(c.beta1, 5.0f), bc2 = 1.0f - powf(c.beta2, 5.0f);
    for (const AdamWSlice& s : table) {
        AdamWConfig cs = c;
        cs.weight_decay = s.decay ? 0.1f : 0.0f;
        for (size_t i = 0; i < s.n; i++)
            adamw_apply(i, p.data() + s.param, d_master ? master.data() + s.state : NULL, g.data() + s.state, m.data() + s.state,
                        v.data() + s.state, cs, bc1, bc2, 0.75f, 4321, s.index);
    }
    check("adamw_update_slices params (one launch, three slices)", download(d_p, n), p, 0.0);
    check("adamw_update_slices m", download(d_m, n), m, 0.0);
    check("adamw_update_slices v", download(d_v, n), v, 0.0);
    device_free(d_table);
}

static void gradients_and_adamw(size_t n) {
    vector<floatX> g = randx(n, 26), p = randx(n, 27);
    vector<float> acc32(n, 0.5f), m(n, 0.01f), v(n, 0.02f), master(n);
    for (size_t i = 0; i < n; i++) master[i] = to_float(p[i]);
    vector<floatX> accx = randx(n, 28);
    floatX *d_g = upload(g), *d_p = upload(p), *d_accx = upload(accx);
    float *d_acc32 = upload(acc32), *d_m = upload(m), *d_v = upload(v), *d_master = upload(master);
    float* scratch = (float*)device_malloc(NORM_PARTS * sizeof(float));
    double ours = global_norm_squared(d_g, n, scratch), twin = 0;
    vector<float> partials(NORM_PARTS);
    norm_partials_host(partials.data(), g.data(), n);
    for (float x : partials) twin += x;
    check("global_norm_squared", vector<double>{ours}, vector<double>{twin}, 1e-5);
    gradient_accumulate(d_accx, d_g, n);
    gradient_accumulate_host(accx.data(), g.data(), n);
    check("gradient_accumulate floatX", download(d_accx, n), accx, 0.0);
    check("gradient_accumulate clears g", download(d_g, n), g, 0.0);
    host_to_device(d_g, randx(n, 26).data(), n * sizeof(floatX));
    g = randx(n, 26);
    gradient_accumulate(d_acc32, d_g, n);
    gradient_accumulate_host(acc32.data(), g.data(), n);
    check("gradient_accumulate fp32", download(d_acc32, n), acc32, 0.0);
    AdamWConfig c;
    c.lr = 1e-3f;
    c.weight_decay = 0.1f;
    host_to_device(d_g, randx(n, 29).data(), n * sizeof(floatX));
    g = randx(n, 29);
    float* master_or_null = FLOATX_IS_FP32 ? NULL : d_master;
    adamw_update(d_p, master_or_null, d_g, d_m, d_v, n, c, 3, 0.5f, 1234, 77);
    float bc1 = 1.0f - powf(c.beta1, 3.0f), bc2 = 1.0f - powf(c.beta2, 3.0f);
    for (size_t i = 0; i < n; i++)
        adamw_apply(i, p.data(), FLOATX_IS_FP32 ? NULL : master.data(), g.data(), m.data(), v.data(), c, bc1, bc2, 0.5f, 1234, 77);
    check("adamw_update params", download(d_p, n), p, 0.0);  // the same element function: the same bits
    check("adamw_update m", download(d_m, n), m, 0.0);
    check("adamw_update v", download(d_v, n), v, 0.0);
    // fp32 gradients (the accumulation buffer), slices from element 8 (16-byte aligned: the packed
    // kernel, its last pack partial) and from element 1 (not aligned: a value a thread)
    float bc1_4 = 1.0f - powf(c.beta1, 4.0f), bc2_4 = 1.0f - powf(c.beta2, 4.0f);
    for (size_t from : {(size_t)8, (size_t)1}) {
        adamw_update(d_p + from, master_or_null ? d_master + from : NULL, d_acc32 + from, d_m + from, d_v + from, n - from, c, 4, 0.25f,
                     99, 5);
        for (size_t i = 0; i < n - from; i++)
            adamw_apply(i, p.data() + from, FLOATX_IS_FP32 ? NULL : master.data() + from, acc32.data() + from, m.data() + from,
                        v.data() + from, c, bc1_4, bc2_4, 0.25f, 99, 5);
        check("adamw_update params, fp32 gradients", download(d_p, n), p, 0.0);
        check("adamw_update m, fp32 gradients", download(d_m, n), m, 0.0);
    }
    adamw_slices(d_p, p, master_or_null, master, d_g, g, d_m, m, d_v, v, n, c);
    if (!FLOATX_IS_FP32) adamw_slices(d_p, p, NULL, master, d_g, g, d_m, m, d_v, v, n, c);  // -w 0: no master
    for (void* q : {(void*)d_g, (void*)d_p, (void*)d_accx, (void*)d_acc32, (void*)d_m, (void*)d_v, (void*)d_master, (void*)scratch})
        device_free(q);
}

// zero sizes: a pipeline stage's empty unit under ZeRO-2/3, an empty slice; nothing is launched
static void zero_sizes() {
    floatX* x = (floatX*)device_malloc(64 * sizeof(floatX));
    float* f = (float*)device_malloc(64 * sizeof(float));
    gradient_accumulate(f, x, 0);
    gradient_accumulate(x, x, 0);
    gelu_forward(x, x, 0);
    gelu_backward(x, x, x, 0);
    residual_forward(x, x, x, 0);
    bias_forward(x, x, 0, 5);
    AdamWConfig c;
    c.lr = 1e-3f;
    c.weight_decay = 0.0f;
    adamw_update(x, f, x, f, f, 0, c, 1, 1.0f, 1, 0);
    crossentropy_forward_backward(x, f, (const int*)f, 0, 8, 8, 1.0f);
    AttentionRange none = {0, 0, 0, 0, 0, 4, 4, 8, 2, 24, true, true};  // no sequences
    attention_range_forward(none, x, x, f, f);
    attention_range_backward(none, x, x, f, f, x, f, f);
    attention_range_row_dot(f, x, x, 0, 8, 2);
    attention_range_output(x, f, 0);
    attention_range_gradients(x, f, f, 0, 8);
    attention_pack_kv(x, x, 0, 8);
    bool ok = cudaGetLastError() == cudaSuccess;
    printf("%s %-52s\n", ok ? "ok  " : "FAIL", "zero sizes launch nothing");
    failures += !ok;
    device_free(x);
    device_free(f);
}

// test_emu_kernels [GROUP...]: every group, else only those named (a mutant's check runs the one
// its bug is in, under ThreadSanitizer minutes less than all)
int main(int argc, char** argv) {
    device_init(0, 1);
    printf("every kernel launcher against its host twin, floatX %s, emulated CUDA\n", PRECISION_NAME);
    auto wanted = [&](const char* group) {
        for (int i = 1; i < argc; i++)
            if (strcmp(argv[i], group) == 0) return true;
        return argc == 1;
    };
    if (wanted("encoder")) {
        encoder(3, 7, 40, 61, VocabRange{0, 61}, true);
        encoder(2, 5, 24, 61, VocabRange{30, 31}, false);  // a TP rank's rows; positions on another rank
    }
    if (wanted("layernorm")) {
        layernorm(21, 40);
        layernorm(9, 768);
        layernorm(520, 256);  // 9 rows a part (of 64): every warp of the one-pass backward has rows
    }
    if (wanted("matmul")) {
        matmul(21, 40, 37);
        matmul(21, 40, 40);  // then the same m (OC) and n (N) with another k (C): matmul_lt_plan's
        matmul(21, 80, 40);  // cached descriptors must be another key's (as attproj's and fcproj's)
        gelu_fusion(21, 40, 40);
        gelu_fusion(21, 40, 37);
        column_sums_sharing_scratch(70);
        column_sums_many(70);
    }
    if (wanted("attention")) {
        attention(2, 7, 40, 5);   // head sizes 8 and 7: the CUDA-core kernels in every build
        attention(1, 33, 21, 3);
        for (int T : {1, 17, 64, 100})  // T a multiple of no tile, of the 32-key tile, of every tile
            for (int hs : {16, 64, 128}) {
                attention(1, T, 2 * hs, 2);  // capacities 16, 64, 128 (and WMMA in bf16, fp16)
                if (flash_mma_head(hs)) attention(1, T, 2 * hs, 2, 2);  // FlashAttention-2 in registers (mma.sync)
            }
        if (flash_mma_head(32)) attention(2, 130, 96, 3, 2);  // head size 32, three query tiles (the last ragged)
        attention_ranges(2, 7, 40, 5, false);
        attention_ranges(3, 5, 21, 3, true);
        attention_ranges(2, 20, 64, 2, true);  // head size 32: WMMA in bf16, fp16
    }
    if (wanted("elementwise")) elementwise(1000);
    if (wanted("crossentropy")) {
        crossentropy(13, 53, 50, 0);
        crossentropy(5, 1500, 1337, 0);  // rows longer than a block of 512: each thread several columns
        crossentropy(5, 8200, 8195, 0);  // rows of 16-byte packs (bf16: 1025 of them), padding inside the last pack
        crossentropy(13, 27, 23, 27);  // the second TP rank of a padded vocabulary
    }
    if (wanted("adamw")) gradients_and_adamw(2049);
    if (wanted("zero_sizes")) zero_sizes();
    printf("%s\n", failures ? "FAILED" : "every check passed");
    return failures ? 1 : 0;
}

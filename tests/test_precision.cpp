/*
tests/test_precision.cpp: 16-bit storage, stochastic rounding and the loss scaler.
Compiled twice, with -DENABLE_BF16 and with -DENABLE_FP16 (Makefile).

References are independent of precision.h: round-to-nearest-even is checked against
a float64 search over the format's grid (computed with frexp/ldexp from the format's
mantissa width), stochastic rounding against its definition (always a neighbour,
unbiased in the mean), the scaler against the rules written in its issue. The 16-bit
AdamW path (adamw.h: an fp32 master, the floatX weights its stochastic rounding) against
torch.optim.AdamW's update written here in float64, and its rounding's random bits against
what independent draws would give: unbiased per element, per step and overall, and no two of
(element, slice, step) sharing bits.
*/
#include <catch2/catch.hpp>
#include <math.h>
#include "../precision.h"
#include "../loss_scale.h"
#include "../random.h"
#include "../adamw.h"
#include <vector>

#if defined(ENABLE_BF16)
static const int MANTISSA_BITS = 8, MIN_EXP = -125;   // significand bits incl. the implicit one; smallest normal 2^-126
#else
static const int MANTISSA_BITS = 11, MIN_EXP = -13;   // fp16: smallest normal 2^-14
#endif

// the two grid points around x (same sign), from the format's definition, in double; *even_out is
// the one whose last significand bit is 0 (where round-to-nearest-even sends a tie)
static void grid_neighbours(double x, double* lo, double* hi, double* even_out = nullptr) {
    int e;
    frexp(fabs(x), &e);                         // |x| = f * 2^e, f in [0.5, 1)
    if (e < MIN_EXP) e = MIN_EXP;               // subnormals share the smallest exponent's spacing
    double ulp = ldexp(1.0, e - MANTISSA_BITS);
    double k = floor(fabs(x) / ulp), a = k * ulp, b = a + ulp;  // |x| in [k, k + 1) ulps
    double even = fmod(k, 2.0) == 0.0 ? a : b;  // at 2^e, b = 2^MANTISSA_BITS ulps: even too
    *lo = x < 0 ? -b : a;
    *hi = x < 0 ? -a : b;
    if (*lo > *hi) { double t = *lo; *lo = *hi; *hi = t; }
    if (even_out) *even_out = x < 0 ? -even : even;
}

// the expected rounding of x: the nearer neighbour, a tie to the even one
static double nearest_even(double x) {
    double lo, hi, even;
    grid_neighbours(x, &lo, &hi, &even);
    return fabs(x - lo) < fabs(hi - x) ? lo : fabs(x - lo) > fabs(hi - x) ? hi : even;
}

TEST_CASE("from_float rounds to the nearest grid point, ties to even") {
    Rng rng = {5};
    for (int i = 0; i < 20000; i++) {
        float x = (float)(rng_normal(&rng) * pow(10.0, (int)(rng_uniform(&rng) * 8) - 5));
        INFO("x = " << x);
        REQUIRE(to_float(from_float(x)) == nearest_even(x));
    }
}

// random values almost never sit exactly halfway, so build ties: halfway between two grid points,
// both parities, both signs, normal and subnormal. Round-half-away-from-zero or half-up fails here
TEST_CASE("from_float sends an exact tie to the even neighbour") {
    Rng rng = {6};
    int to_lower = 0, to_upper = 0;
    for (int i = 0; i < 4000; i++) {
        int e = MIN_EXP - 3 + (int)(rng_uniform(&rng) * (12 - MIN_EXP));  // exponents from subnormal up
        double ulp = ldexp(1.0, (e < MIN_EXP ? MIN_EXP : e) - MANTISSA_BITS);
        double k = floor(rng_uniform(&rng) * ldexp(1.0, MANTISSA_BITS - 1)) + (e < MIN_EXP ? 0 : ldexp(1.0, MANTISSA_BITS - 1));
        double x = (k + 0.5) * ulp * (i % 2 ? -1.0 : 1.0);
        if ((double)(float)x != x) continue;  // a float holds every tie of a 16-bit format; be sure
        double want = fmod(k, 2.0) == 0.0 ? k * ulp : (k + 1) * ulp;
        want = i % 2 ? -want : want;
        INFO("tie x = " << x << " (k " << k << " ulp " << ulp << ") expected " << want);
        REQUIRE(to_float(from_float((float)x)) == want);
        (fabs(want) < fabs(x) ? to_lower : to_upper)++;
    }
    CHECK(to_lower > 1000);  // both ways taken: ties really were built
    CHECK(to_upper > 1000);
}

TEST_CASE("stochastic rounding picks a neighbour and is unbiased") {
    Rng rng = {9};
    for (int trial = 0; trial < 20; trial++) {
        float x = (float)(rng_normal(&rng) * 0.3);
        double lo, hi;
        grid_neighbours(x, &lo, &hi);
        double sum = 0;
        const int n = 200000;
        for (int i = 0; i < n; i++) {
            double r = to_float(round_stochastic(x, random_u32(trial, i)));
            REQUIRE((r == lo || r == hi));
            sum += r;
        }
        double p = (x - lo) / (hi - lo), sd = (hi - lo) * sqrt(p * (1 - p) / n);
        INFO("stochastic rounding of x = " << x << ": mean of " << n << " draws " << sum / n << ", standard error "
                                            << sd);
        CHECK(fabs(sum / n - x) <= 5 * sd + 1e-12);  // five standard errors
    }
    CHECK(to_float(round_stochastic(0.5f, 123)) == 0.5f);  // exact values stay exact
    CHECK(isinf(to_float(round_stochastic(INFINITY, 7))));
}

// ---------------------------------------------------------------- the 16-bit AdamW step
// Two slices, as zero.h hands a shard to adamw_update_slices: a matrix (weight decay) and a vector
// (none), the second one's elements at index 3000.. of the model (the rounding's bits)
static const size_t N_MATRIX = 3000, N_VECTOR = 1000;
static void two_slices(AdamWSlice* s, unsigned* blocks) {
    s[0] = AdamWSlice{0, 0, N_MATRIX, 0, 0, 1};
    s[1] = AdamWSlice{N_MATRIX, N_MATRIX, N_VECTOR, N_MATRIX, adamw_slice_blocks(N_MATRIX), 0};
    *blocks = adamw_slice_blocks(N_MATRIX) + adamw_slice_blocks(N_VECTOR);
}

// is r one of x's two grid neighbours (x itself where x is on the grid)?
static bool is_neighbour(double r, double x) {
    double lo, hi;
    grid_neighbours(x, &lo, &hi);
    return r == lo || r == hi;
}

TEST_CASE("16-bit AdamW: the fp32 master against float64 AdamW, the floatX weights a rounding of it") {
    const size_t n = N_MATRIX + N_VECTOR;
    AdamWSlice slices[2];
    unsigned blocks;
    two_slices(slices, &blocks);
    Rng rng = {31};
    std::vector<float> master(n), m(n, 0.0f), v(n, 0.0f);
    std::vector<floatX> params(n), grads(n);
    std::vector<double> pd(n), md(n, 0.0), vd(n, 0.0);  // torch.optim.AdamW's state, float64
    for (size_t i = 0; i < n; i++) {
        master[i] = (float)(0.1 * rng_normal(&rng));
        params[i] = from_float(master[i]);
        pd[i] = master[i];
    }
    const double wd = 0.1, b1 = 0.9, b2 = 0.95, eps = 1e-8;
    const float grad_scale = 0.7f / 1024.0f;  // a clip factor over a loss scale, as train_step passes
    AdamWConfig c;
    c.weight_decay = 0.0f;  // per slice: adamw_update_slices' weight_decay argument
    double lr_sum = 0, worst = 0;
    for (int t = 1; t <= 8; t++) {
        c.lr = (float)(1e-3 * (1.0 + 0.25 * t));  // a new lr every step, as a schedule gives
        lr_sum += c.lr;
        for (size_t i = 0; i < n; i++) grads[i] = from_float((float)(1024.0 * 0.05 * rng_normal(&rng)));
        adamw_update_slices(params.data(), master.data(), grads.data(), m.data(), v.data(), slices, 2, blocks, c,
                            (float)wd, t, grad_scale, random_u32(5, (uint64_t)t));
        double bc1 = 1 - pow(b1, t), bc2 = 1 - pow(b2, t), lr = c.lr;
        for (size_t i = 0; i < n; i++) {  // torch.optim.AdamW: decoupled decay, then the Adam step
            double g = (double)to_float(grads[i]) * grad_scale;
            pd[i] *= 1 - lr * (i < N_MATRIX ? wd : 0.0);
            md[i] = b1 * md[i] + (1 - b1) * g;
            vd[i] = b2 * vd[i] + (1 - b2) * g * g;
            pd[i] -= lr / bc1 * md[i] / (sqrt(vd[i]) / sqrt(bc2) + eps);
        }
        for (size_t i = 0; i < n; i++) {
            // fp32's own rounding: half an ulp of the master a step, and the update's fp32 arithmetic
            // (~1e-6 of it): measured 0.37 of this bar (bf16 and fp16). A tenth of an update, lr / 10, is ~800x it
            double err = fabs(master[i] - pd[i]), bar = 2.0 * t * ldexp(1.0, ilogb(pd[i]) - 23) + 1e-5 * lr_sum;
            worst = fmax(worst, err / bar);
            INFO("step " << t << " element " << i << " fp32 master " << master[i] << " float64 AdamW " << pd[i]);
            REQUIRE(err <= bar);
            INFO("floatX weight " << to_float(params[i]));
            REQUIRE(is_neighbour(to_float(params[i]), master[i]));  // the master rounded, one way or the other
        }
    }
    printf("16-bit AdamW master against float64: worst error %.3g of the bar\n", worst);
}

// -w 0 (llm.c's AdamW without the fp32 master): the update reads the floatX weight itself and writes
// it back by stochastic rounding. One step from weights on the grid, repeated over S seeds: each
// element's mean is float64 AdamW's value from the same weight, within 5 standard errors of the
// rounding (p(1 - p) floored at 0.01, so that a p near 0 or 1 cannot fail on one unlucky draw).
// Rounding to nearest instead (adamw.h's no-master branch once) leaves each element at its nearest
// neighbour, off by min(p, 1 - p) of a step: most elements fail
TEST_CASE("16-bit AdamW without the master (-w 0): the floatX weights an unbiased rounding of float64 AdamW") {
    const size_t n = N_MATRIX + N_VECTOR;
    AdamWSlice slices[2];
    unsigned blocks;
    two_slices(slices, &blocks);
    Rng rng = {37};
    std::vector<floatX> start(n), params(n), grads(n);
    std::vector<double> want(n), lo(n), hi(n), sum(n, 0.0);
    const double wd = 0.1, lr = 2e-3, b1 = 0.9, b2 = 0.95, eps = 1e-8;
    AdamWConfig c;
    c.lr = (float)lr;
    c.weight_decay = 0.0f;
    for (size_t i = 0; i < n; i++) {
        start[i] = from_float((float)(0.1 * rng_normal(&rng)));
        grads[i] = from_float((float)(0.05 * rng_normal(&rng)));
        double x = to_float(start[i]), g = to_float(grads[i]);  // torch.optim.AdamW's first step, float64
        double md = (1 - b1) * g, vd = (1 - b2) * g * g;
        want[i] = x * (1 - lr * (i < N_MATRIX ? wd : 0.0)) - lr / (1 - b1) * md / (sqrt(vd) / sqrt(1 - b2) + eps);
        grid_neighbours(want[i], &lo[i], &hi[i]);
    }
    const int S = 400;
    int off_grid = 0;
    for (int s = 0; s < S; s++) {
        std::vector<float> m(n, 0.0f), v(n, 0.0f);
        params = start;
        adamw_update_slices(params.data(), (float*)nullptr, grads.data(), m.data(), v.data(), slices, 2, blocks, c,
                            (float)wd, 1, 1.0f, random_u32(13, (uint64_t)s));
        for (size_t i = 0; i < n; i++) {
            double r = to_float(params[i]);
            off_grid += !(r == lo[i] || r == hi[i]);
            sum[i] += r;
        }
    }
    int biased = 0, moved = 0;
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        if (hi[i] == lo[i]) continue;  // float64 AdamW landed on the grid
        moved++;
        double p = (want[i] - lo[i]) / (hi[i] - lo[i]), mean = sum[i] / S;
        double se = (hi[i] - lo[i]) * sqrt(fmax(p * (1 - p), 0.01) / S);
        worst = fmax(worst, fabs(mean - want[i]) / se);
        biased += fabs(mean - want[i]) > 5 * se;
    }
    INFO("-w 0: " << off_grid << " weights not a grid neighbour of float64 AdamW's value; " << biased << " of " << moved
                  << " elements whose mean over " << S << " seeds is off by over 5 standard errors (worst " << worst
                  << ")");
    CHECK(off_grid == 0);
    CHECK(moved > (int)n / 2);
    CHECK(biased == 0);
    printf("16-bit AdamW without the master: %d elements, worst mean %.2f standard errors from float64\n", moved, worst);
}

// P(two independent draws agree) = p^2 + (1 - p)^2; within five standard errors over `pairs` pairs
static void check_agreement(const char* what, int agree, int pairs, double p) {
    double q = p * p + (1 - p) * (1 - p), se = sqrt(q * (1 - q) / pairs), got = (double)agree / pairs;
    INFO("stochastic rounding: " << what << ": the same way " << got << " of the time, independent bits " << q
                                 << " (standard error " << se << ")");
    CHECK(fabs(got - q) <= 5 * se);
}

// Through adamw_update_slices itself: lr 0, no gradient, so the master stays x and only the rounding
// moves. Over many seeds (the trainer draws one a step) each element's mean is x; within one step
// the elements' mean is x; and the bits of (element, other slice, next seed, next element) are
// unrelated. A seed reused by every step, every element or every slice fails here
TEST_CASE("16-bit AdamW's stochastic rounding: unbiased over seeds, fresh bits per element, slice and step") {
    const size_t n = N_MATRIX + N_VECTOR;
    AdamWSlice slices[2];
    unsigned blocks;
    two_slices(slices, &blocks);
    double ulp = ldexp(1.0, 1 - MANTISSA_BITS);  // the grid's spacing in [1, 2)
    float x = (float)(1.0 + 0.3 * ulp);
    double lo, hi;
    grid_neighbours(x, &lo, &hi);
    double p = (x - lo) / (hi - lo);  // P(up)
    REQUIRE((p > 0.25 && p < 0.35));
    const int S = 1000;  // seeds
    std::vector<std::vector<uint8_t>> up(S, std::vector<uint8_t>(n));
    std::vector<float> master(n), m(n, 0.0f), v(n, 0.0f);
    std::vector<floatX> params(n), grads(n, from_float(0.0f));
    AdamWConfig c;
    c.lr = 0.0f;
    c.weight_decay = 0.0f;
    for (int s = 0; s < S; s++) {
        for (size_t i = 0; i < n; i++) master[i] = x;
        adamw_update_slices(params.data(), master.data(), grads.data(), m.data(), v.data(), slices, 2, blocks, c, 0.1f,
                            s + 1, 1.0f, random_u32(11, (uint64_t)s));
        for (size_t i = 0; i < n; i++) {
            REQUIRE(master[i] == x);  // lr 0: only the rounding is under test
            double r = to_float(params[i]);
            REQUIRE((r == lo || r == hi));
            up[s][i] = r == hi;
        }
    }
    double total = 0;
    int worst_element = 0, worst_step = 0;
    double se_element = sqrt(p * (1 - p) / S), se_step = sqrt(p * (1 - p) / n);
    for (size_t i = 0; i < n; i++) {  // each element over the seeds
        int k = 0;
        for (int s = 0; s < S; s++) k += up[s][i];
        total += k;
        if (fabs((double)k / S - p) > 5 * se_element) worst_element++;
    }
    for (int s = 0; s < S; s++) {  // each step over the elements
        int k = 0;
        for (size_t i = 0; i < n; i++) k += up[s][i];
        if (fabs((double)k / n - p) > 5 * se_step) worst_step++;
    }
    double mean = lo + (hi - lo) * total / ((double)S * n), se = (hi - lo) * sqrt(p * (1 - p) / ((double)S * n));
    {  // (each INFO in its own block: Catch prints a failure's messages of the enclosing scope)
        INFO("stochastic rounding: mean of the rounded weights " << mean << " against the master " << (double)x
                                                                 << " (standard error " << se << ")");
        CHECK(fabs(mean - x) <= 5 * se);
    }
    {
        INFO("stochastic rounding: elements whose mean over " << S << " seeds is off by over 5 standard errors");
        CHECK(worst_element == 0);
    }
    {
        INFO("stochastic rounding: steps whose mean over the " << n << " elements is off by over 5 standard errors");
        CHECK(worst_step == 0);
    }
    int same_slice = 0, same_seed = 0, same_next = 0;
    for (int s = 0; s + 1 < S; s++)
        for (size_t i = 0; i < N_VECTOR; i++) {
            same_slice += up[s][i] == up[s][N_MATRIX + i];  // element i of each slice, the same step
            same_seed += up[s][i] == up[s + 1][i];           // one element, consecutive steps
            same_next += up[s][i] == up[s][i + 1];           // neighbouring elements
        }
    int pairs = (S - 1) * (int)N_VECTOR;
    check_agreement("element i of the two slices", same_slice, pairs, p);
    check_agreement("one element at consecutive seeds", same_seed, pairs, p);
    check_agreement("neighbouring elements", same_next, pairs, p);
}

// ---------------------------------------------------------------- the loss scaler
TEST_CASE("loss scaler: overflow skips and halves, growth after the interval, floor at 1") {
    LossScaler s = loss_scaler_init("dynamic", true, 3);
    CHECK(s.enabled);
    CHECK(s.scale == 65536.0f);
    CHECK_FALSE(loss_scaler_update(&s, false));  // overflow: skip, back off
    CHECK(s.scale == 32768.0f);
    CHECK(loss_scaler_update(&s, true));
    CHECK(loss_scaler_update(&s, true));
    CHECK(s.scale == 32768.0f);
    CHECK(loss_scaler_update(&s, true));         // third clean step in a row: grow
    CHECK(s.scale == 65536.0f);
    CHECK(loss_scaler_update(&s, true));
    CHECK(loss_scaler_update(&s, true));
    CHECK_FALSE(loss_scaler_update(&s, false));  // an overflow resets the clean count
    CHECK(s.scale == 32768.0f);
    CHECK(loss_scaler_update(&s, true));
    CHECK(loss_scaler_update(&s, true));
    CHECK(s.scale == 32768.0f);
    for (int i = 0; i < 40; i++) loss_scaler_update(&s, false);
    CHECK(s.scale == 1.0f);                      // never below 1

    LossScaler fixed = loss_scaler_init("1024", false, 3);
    CHECK(fixed.enabled);
    CHECK_FALSE(fixed.dynamic);
    CHECK_FALSE(loss_scaler_update(&fixed, false));  // a static scale still skips bad steps
    for (int i = 0; i < 10; i++) loss_scaler_update(&fixed, true);
    CHECK(fixed.scale == 1024.0f);                   // but never moves

    LossScaler off = loss_scaler_init("off", true, 3);
    CHECK_FALSE(off.enabled);
    CHECK(off.scale == 1.0f);
    CHECK_FALSE(loss_scaler_update(&off, false));    // non-finite steps are skipped with scaling off too
    CHECK(off.scale == 1.0f);
    CHECK(loss_scaler_init("default", true, 3).dynamic);   // default: dynamic for fp16
    CHECK_FALSE(loss_scaler_init("default", false, 3).enabled);  // off for bf16 / fp32
}

// The rules of loss_scale.h's header, kept here as their own state machine: an overflow skips the
// step, halves the scale (never below 1) and starts the clean count again; `interval` clean steps
// in a row double the scale. Overflows come as they do in training: when the scale passes what the
// gradients allow (a limit that wanders), so the scale rises and falls through thousands of steps
TEST_CASE("loss scaler: thousands of steps against the rules as an independent state machine") {
    for (int interval : {1, 2, 3, 10}) {
        LossScaler s = loss_scaler_init("dynamic", true, interval);
        double scale = 65536.0;
        int clean = 0, grew = 0, halved = 0;
        Rng rng = {(uint64_t)interval};
        for (int step = 0; step < 5000; step++) {
            bool finite = scale <= ldexp(1.0, 8 + (int)(rng_uniform(&rng) * 12));  // overflows above 2^8..2^19
            bool applied = loss_scaler_update(&s, finite);
            if (!finite) {
                scale = fmax(1.0, scale / 2);
                clean = 0;
                halved++;
            } else if (++clean == interval) {
                scale *= 2;
                clean = 0;
                grew++;
            }
            INFO("loss scale at step " << step << " (interval " << interval << ", gradients "
                                      << (finite ? "finite" : "not finite") << "): " << s.scale << ", the rules give "
                                      << scale);
            REQUIRE(applied == finite);
            REQUIRE(s.scale == scale);
        }
        CHECK(grew > 100);  // both ways, many times
        CHECK(halved > 100);
    }
}

/*
tests/test_precision.cpp: 16-bit storage, stochastic rounding and the loss scaler.
Compiled twice, with -DENABLE_BF16 and with -DENABLE_FP16 (Makefile).

References are independent of precision.h: round-to-nearest-even is checked against
a float64 search over the format's grid (computed with frexp/ldexp from the format's
mantissa width), stochastic rounding against its definition (always a neighbour,
unbiased in the mean), the scaler against the rules written in its issue.
*/
#include <catch2/catch.hpp>
#include <math.h>
#include "../precision.h"
#include "../loss_scale.h"
#include "../random.h"

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
        INFO("x " << x << " mean " << sum / n);
        CHECK(fabs(sum / n - x) <= 5 * sd + 1e-12);  // five standard errors
    }
    CHECK(to_float(round_stochastic(0.5f, 123)) == 0.5f);  // exact values stay exact
    CHECK(isinf(to_float(round_stochastic(INFINITY, 7))));
}

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

/*
tests/rank_checks.h: what the unit tests that run under mpirun (tests/test_tp.cpp, tests/test_cp.cpp)
share: EXPECT counts a check and reports a failure with its rank, random_normal makes the same data on
every rank, max_abs_diff compares (a NaN anywhere makes it NaN, which fails every `< tol`), and rank_checks_total prints "NAME WORLD: N passed, M failed" over
all ranks on rank 0 and returns the exit code.
*/
#pragma once
#include <stdio.h>
#include <math.h>
#include <mpi.h>
#include <vector>
#include "../random.h"

static int checks = 0, failures = 0, rank = 0;
#define EXPECT(cond) do { checks++; if (!(cond)) { failures++; fprintf(stderr, "[rank %d] failed: %s (line %d)\n", rank, #cond, __LINE__); } } while (0)

static std::vector<float> random_normal(size_t n, uint64_t seed, float scale) {
    Rng rng = {seed};
    std::vector<float> v(n);
    for (auto& x : v) x = scale * (float)rng_normal(&rng);
    return v;
}
static double max_abs_diff(const float* a, const float* b, size_t n) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (std::isnan(d) || d > worst) worst = d;  // a NaN is the worst (fmax(x, NaN) is x) and stays: NaN < tol fails
    }
    return worst;
}
static int rank_checks_total(const char* name, int world) {
    int totals[2] = {checks, failures};
    MPI_Allreduce(MPI_IN_PLACE, totals, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("%s %d: %d passed, %d failed\n", name, world, totals[0] - totals[1], totals[1]);
    return totals[1] != 0;
}

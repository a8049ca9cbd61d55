/*
random.h: a small seeded random number generator (splitmix64) shared by
initialisation and data shuffling. Being our own, its stream is the same on every
platform and build, so "same seed, same model" holds for every layout.
*/
#pragma once
// defines: Rng, rng_next, rng_uniform, rng_normal
#include <stdint.h>  // defines: uint64_t
#include <math.h>    // defines: sqrt, log, cos

struct Rng { uint64_t state; };

inline uint64_t rng_next(Rng* r) {
    uint64_t z = (r->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
inline double rng_uniform(Rng* r) { return (rng_next(r) >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
inline double rng_normal(Rng* r) {  // Box-Muller
    double u1 = 1.0 - rng_uniform(r), u2 = rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

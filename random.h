/*
random.h: seeded random numbers from one mixing function, splitmix64's finaliser.
Two generators use it:
  Rng          a sequential stream (state += golden ratio, then mix): initialisation,
               data shuffling, sampling. Our own, so its stream is the same on every
               platform and build, and "same seed, same model" holds for every layout.
  random_u32   counter-based: 32 bits from (seed, index) with no state, so a GPU
               thread can draw the bits for element `index` alone (stochastic rounding,
               precision.h; the index is the parameter's place in the unsharded model,
               so the bits do not depend on the layout).
*/
#pragma once
// defines: HOST_DEVICE, splitmix64_mix, Rng, rng_next, rng_uniform, rng_normal, random_u32
#include <stdint.h>  // defines: uint64_t, uint32_t
#include <math.h>    // defines: sqrt, log, cos

#ifdef __CUDACC__
#define HOST_DEVICE __host__ __device__
#else
#define HOST_DEVICE
#endif

// splitmix64's finaliser: a bijection of 64-bit words that scatters every input bit
HOST_DEVICE inline uint64_t splitmix64_mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

struct Rng { uint64_t state; };
inline uint64_t rng_next(Rng* r) { return splitmix64_mix(r->state += 0x9E3779B97F4A7C15ull); }
inline double rng_uniform(Rng* r) { return (rng_next(r) >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
inline double rng_normal(Rng* r) {  // Box-Muller
    double u1 = 1.0 - rng_uniform(r), u2 = rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

// 32 random bits from (seed, index), the high half of the mixed counter
HOST_DEVICE inline uint32_t random_u32(uint64_t seed, uint64_t index) {
    return (uint32_t)(splitmix64_mix(seed * 0x9E3779B97F4A7C15ull + index + 0x632BE59BD9B4E019ull) >> 32);
}

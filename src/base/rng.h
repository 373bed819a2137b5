/* A small, portable, seedable random generator: xoshiro256** seeded by splitmix64. */
#ifndef SP_RNG_H
#define SP_RNG_H

/*
 * DESIGN: simulators, generators and start vectors must give the same
 * numbers for a seed on every machine and libc, so rand() is out.  Header
 * only: the functions are tiny and inlined in hot loops.
 */

#include <math.h>
#include <stdint.h>

typedef struct sp_rng {
	uint64_t s[4];
} sp_rng_t;

/* splitmix64: advances *x and returns the next output. */
static inline uint64_t sp_splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15u);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	return z ^ (z >> 31);
}

/* Seeds stream `stream` of `seed`: streams are independent generators (one
 * per fibre, say) that do not depend on how many numbers others drew. */
static inline void sp_rng_seed(sp_rng_t *r, uint64_t seed, uint64_t stream)
{
	uint64_t x = seed ^ (stream * 0xd1b54a32d192ed03u);
	for (int e = 0; e < 4; e++)
		r->s[e] = sp_splitmix64(&x);
}

static inline uint64_t sp__rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static inline uint64_t sp_rng_next(sp_rng_t *r)
{
	uint64_t *s = r->s, res = sp__rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = sp__rotl(s[3], 45);
	return res;
}

/* Uniform in [0, 1), 53 random bits. */
static inline double sp_rng_uniform(sp_rng_t *r)
{
	return (double)(sp_rng_next(r) >> 11) * 0x1.0p-53;
}

/* N(0, 1) by Box-Muller (one of the pair). */
static inline double sp_rng_gaussian(sp_rng_t *r)
{
	double u = 1.0 - sp_rng_uniform(r), v = sp_rng_uniform(r);
	return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

#endif /* SP_RNG_H */

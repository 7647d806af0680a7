/* A small, serialisable random number generator (splitmix64) and the counter-based hashes
 * that make per-example randomness a function of (seed, epoch, example index) alone. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* One step of splitmix64: the state lives in checkpoints, so samples drawn after a resume
 * are the ones a run without a stop would give. */
guint64 cohort_rng_next(guint64 *state);
/* Uniform in [0, 1). */
double cohort_rng_uniform(guint64 *state);

/* The seed of tensor `index`'s initialisation stream in a model initialised from `seed`: each
 * tensor gets its own stream, so one tensor's values do not depend on the sizes of others. */
guint64 cohort_rng_tensor_seed(guint64 seed, guint index);

/* Fills dst[0..n) with U(-bound, bound) from a stream started at `seed` (one draw each). */
void cohort_rng_fill_uniform(float *dst, size_t n, double bound, guint64 seed);

/* A well-mixed 64-bit hash of three integers: the seed of a per-example stream. */
guint64 cohort_rng_key(guint64 a, guint64 b, guint64 c);

G_END_DECLS

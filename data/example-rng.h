/* Randomness per example: a counter-based generator whose stream is a pure function of
 * (seed, epoch, example index, purpose), never of the rank, the thread or the order of calls,
 * so N ranks that each see part of an epoch draw exactly what one process would. The key is
 * mixed with the splitmix64 finaliser (Steele, Lea & Flood 2014); drawing steps a Weyl
 * sequence through the same finaliser, which is splitmix64 itself. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* Purposes, so that one example's augmentation never shares draws with its other randomness
 * (noise, timesteps: give each its own stream number). */
enum {
  COHORT_RNG_STREAM_AUGMENT = 1,
  COHORT_RNG_STREAM_NOISE = 2,        /* diffusion noise ε */
  COHORT_RNG_STREAM_TIMESTEP = 3,     /* diffusion time t */
  COHORT_RNG_STREAM_LABEL_DROP = 4,   /* classifier-free guidance's label dropout */
  COHORT_RNG_STREAM_CAPTION_DROP = 5, /* caption dropout (data/captions.h) */
};

typedef struct {
  guint64 state;
} CohortExampleRng;

/* Starts the stream of (seed, epoch, index, stream). Different keys give unrelated streams. */
void cohort_example_rng_init(CohortExampleRng *rng, guint64 seed, guint64 epoch, guint64 index,
                             guint64 stream);
/* The next 64 random bits. */
guint64 cohort_example_rng_next(CohortExampleRng *rng);
/* Uniform in [0, n), without modulo bias (Lemire's multiply-and-reject); n > 0. */
guint32 cohort_example_rng_below(CohortExampleRng *rng, guint32 n);
/* Uniform in [0, 1) with 53 random bits. */
double cohort_example_rng_uniform(CohortExampleRng *rng);

G_END_DECLS

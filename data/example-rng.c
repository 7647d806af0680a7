/* Counter-based per-example randomness (see example-rng.h). */
#include "data/example-rng.h"

#define GOLDEN G_GUINT64_CONSTANT(0x9e3779b97f4a7c15)

static guint64 mix64(guint64 z)
{
  z = (z ^ (z >> 30)) * G_GUINT64_CONSTANT(0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * G_GUINT64_CONSTANT(0x94d049bb133111eb);
  return z ^ (z >> 31);
}

void cohort_example_rng_init(CohortExampleRng *rng, guint64 seed, guint64 epoch, guint64 index,
                             guint64 stream)
{
  /* Each part goes through the finaliser before the next is folded in, so (a, b) and (b, a)
   * or carries between parts cannot collide the way a plain sum or xor would. */
  guint64 h = mix64(seed + GOLDEN);
  h = mix64(h ^ (epoch + 2 * GOLDEN));
  h = mix64(h ^ (index + 3 * GOLDEN));
  h = mix64(h ^ (stream + 4 * GOLDEN));
  rng->state = h;
}

guint64 cohort_example_rng_next(CohortExampleRng *rng)
{
  rng->state += GOLDEN;
  return mix64(rng->state);
}

guint32 cohort_example_rng_below(CohortExampleRng *rng, guint32 n)
{
  g_return_val_if_fail(n > 0, 0);
  guint64 m = (cohort_example_rng_next(rng) >> 32) * (guint64)n;
  guint32 low = (guint32)m;
  if (low < n) {
    guint32 threshold = (guint32)(-n) % n;
    while (low < threshold) {
      m = (cohort_example_rng_next(rng) >> 32) * (guint64)n;
      low = (guint32)m;
    }
  }
  return (guint32)(m >> 32);
}

double cohort_example_rng_uniform(CohortExampleRng *rng)
{
  return (double)(cohort_example_rng_next(rng) >> 11) * (1.0 / 9007199254740992.0);
}

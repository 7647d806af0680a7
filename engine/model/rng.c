#include "engine/model/rng.h"

guint64 cohort_rng_next(guint64 *state)
{
  guint64 z = (*state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

double cohort_rng_uniform(guint64 *state)
{
  return (double)(cohort_rng_next(state) >> 11) * (1.0 / 9007199254740992.0);
}

guint64 cohort_rng_tensor_seed(guint64 seed, guint index)
{
  guint64 st = seed ^ (0xD1B54A32D192ED03ULL * (index + 1));
  return cohort_rng_next(&st);
}

void cohort_rng_fill_uniform(float *dst, size_t n, double bound, guint64 seed)
{
  guint64 st = seed;
  for (size_t i = 0; i < n; i++)
    dst[i] = (float)((2 * cohort_rng_uniform(&st) - 1) * bound);
}

guint64 cohort_rng_key(guint64 a, guint64 b, guint64 c)
{
  /* Three rounds of splitmix64 chained through the inputs: distinct (a, b, c) give
   * unrelated streams, and no input is a simple offset of another's. */
  guint64 s = a ^ 0x243F6A8885A308D3ULL;
  guint64 h = cohort_rng_next(&s);
  s = h ^ b;
  h = cohort_rng_next(&s);
  s = h ^ c;
  return cohort_rng_next(&s);
}

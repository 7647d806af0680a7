/* The reference bfloat16 rounding and the per-rank values of the bf16 collective tests
 * (header-only, tests only): expected values come from a rounding written here (nearest of
 * the two neighbouring bfloat16 values, measured in double), not from the engine's own. */
#pragma once

#include <glib.h>
#include <math.h>
#include <string.h>

#include "engine/distributed/comm.h"

static inline float bf16_value(guint16 h)
{
  guint32 u = (guint32)h << 16;
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

/* The bfloat16 nearest to finite x, ties to the even one: of the value that keeps x's top 16
 * bits and the next one away from zero, the closer in double arithmetic. */
static inline guint16 ref_bf16(float x)
{
  guint32 u;
  memcpy(&u, &x, sizeof u);
  guint16 lo = (guint16)(u >> 16), hi = (guint16)(lo + 1);
  double dl = fabs((double)x - bf16_value(lo)), dh = fabs((double)bf16_value(hi) - (double)x);
  if (dl != dh)
    return dl < dh ? lo : hi;
  return (lo & 1) ? hi : lo;
}

static inline float ref_round(float x)
{
  return bf16_value(ref_bf16(x));
}

/* Rank r's value at index i: deterministic, so every rank can compute every other's. Four
 * kinds by i % 4: random floats; exact ties (x + 2^-8 x's exponent, half an ulp); near
 * cancellation (rank 1 about -rank 0); magnitudes 2^9 to 2^16 apart. */
static inline guint64 mix(guint64 x)
{
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static inline float random_float(guint64 h)
{
  float m = 1.0f + (float)(h & 0x7fffff) / 8388608.0f;
  int e = (int)((h >> 23) % 17) - 8;
  return ((h >> 40) & 1 ? -1.0f : 1.0f) * ldexpf(m, e);
}

static inline float value(int rank, gsize i)
{
  guint64 h0 = mix(i * 4 + 0), hr = mix(i * 4 + 1 + (guint64)rank);
  float base = random_float(h0);
  if (rank >= 2)
    return random_float(hr);
  switch (i % 4) {
  case 1: { /* a bfloat16 value plus half its ulp */
    float b = ref_round(base);
    int e;
    frexpf(b, &e);
    return rank == 0 ? b : copysignf(ldexpf(1.0f, e - 9), b);
  }
  case 2: /* nearly cancelling */
    return rank == 0 ? base : -base * (1.0f + (float)(hr & 0xffff) / 65536.0f * 0.02f);
  case 3: /* far apart */
    return rank == 0 ? base : ldexpf(random_float(hr), -9 - (int)(hr % 8));
  default:
    return random_float(hr);
  }
}

/* Every rank's `n` 16-bit values equal rank 0's. */
static inline gboolean same_on_all_ranks(CohortComm *c, const guint16 *mine, gsize n, int world,
                                         GError **error)
{
  g_autofree guint16 *all = g_new(guint16, n * (gsize)world);
  if (!cohort_comm_all_gather(c, mine, n * sizeof *mine, all, 20, error))
    return FALSE;
  for (int r = 1; r < world; r++)
    if (memcmp(all, all + (gsize)r * n, n * sizeof *mine) != 0)
      return FALSE;
  return TRUE;
}

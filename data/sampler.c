/* DistributedSampler and torch.randperm, bit-compatible with PyTorch's CPU generator. */
#include "data/sampler.h"

#define MT_N 624
#define MT_M 397

/* ATen's at::mt19937: the reference MT19937, seeded with init_genrand on the low 32 bits of
 * the 64-bit seed torch.Generator.manual_seed receives. */
typedef struct {
  guint32 state[MT_N];
  int next;
} Mt19937;

static void mt_seed(Mt19937 *mt, guint64 seed)
{
  mt->state[0] = (guint32)(seed & 0xffffffffu);
  for (int i = 1; i < MT_N; i++) {
    guint32 prev = mt->state[i - 1];
    mt->state[i] = 1812433253u * (prev ^ (prev >> 30)) + (guint32)i;
  }
  mt->next = MT_N;
}

static void mt_twist(Mt19937 *mt)
{
  for (int k = 0; k < MT_N; k++) {
    guint32 y = (mt->state[k] & 0x80000000u) | (mt->state[(k + 1) % MT_N] & 0x7fffffffu);
    mt->state[k] = mt->state[(k + MT_M) % MT_N] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
  }
  mt->next = 0;
}

static guint32 mt_next(Mt19937 *mt)
{
  if (mt->next >= MT_N)
    mt_twist(mt);
  guint32 y = mt->state[mt->next++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

guint64 *cohort_randperm(guint64 n, guint64 seed)
{
  guint64 *r = g_new(guint64, n > 0 ? n : 1);
  for (guint64 i = 0; i < n; i++)
    r[i] = i;
  if (n < 2)
    return r;

  Mt19937 mt;
  mt_seed(&mt, seed);
  /* One 32-bit draw per swap, as torch 1.13's CPU randperm does for every n (checked against
   * it at n = 214748364, where some later releases switch to 64-bit draws). */
  for (guint64 i = 0; i + 1 < n; i++) {
    guint64 draw = mt_next(&mt);
    guint64 z = draw % (n - i);
    guint64 tmp = r[i];
    r[i] = r[i + z];
    r[i + z] = tmp;
  }
  return r;
}

/* The strided split's count per rank: PyTorch's len(sampler). */
static guint64 strided_count(const CohortSamplerSpec *spec)
{
  guint64 w = (guint64)MAX(spec->world_size, 1);
  /* PyTorch: ceil((n - w) / w) with drop_last and a remainder, which is floor(n / w). */
  if (spec->drop_last)
    return spec->n / w;
  return (spec->n + w - 1) / w;
}

guint64 cohort_sampler_global_batches(const CohortSamplerSpec *spec)
{
  if (spec->global_batch == 0)
    return 0;
  /* The padded order is as long as the strided split's: world_size × its count. */
  guint64 padded = strided_count(spec) * (guint64)MAX(spec->world_size, 1);
  return padded / spec->global_batch;
}

guint64 cohort_sampler_num_samples(const CohortSamplerSpec *spec)
{
  if (spec->global_batch > 0)
    return cohort_sampler_global_batches(spec) * spec->share;
  return strided_count(spec);
}

guint64 *cohort_sampler_indices(const CohortSamplerSpec *spec, guint64 epoch, guint64 *n_out)
{
  guint64 w = (guint64)MAX(spec->world_size, 1);
  guint64 rank = (guint64)MAX(spec->rank, 0);
  guint64 count = cohort_sampler_num_samples(spec);
  guint64 *out = g_new(guint64, count > 0 ? count : 1);
  *n_out = count;
  if (count == 0 || spec->n == 0) {
    *n_out = 0;
    return out;
  }

  /* seed + epoch wraps like the uint64 manual_seed receives. */
  guint64 *perm = spec->shuffle ? cohort_randperm(spec->n, (guint64)spec->seed + epoch) : NULL;
  /* Padding repeats the (shuffled) list from its start, so position p of the padded list is
   * position p % n of the list; drop_last just never reaches past n. */
  for (guint64 j = 0; j < count; j++) {
    guint64 p = spec->global_batch > 0
                    ? (j / spec->share) * spec->global_batch + spec->share_offset + j % spec->share
                    : rank + j * w;
    p %= spec->n;
    out[j] = perm ? perm[p] : p;
  }
  g_free(perm);
  return out;
}

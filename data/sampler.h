/* DistributedSampler with PyTorch's semantics exactly (torch.utils.data.DistributedSampler):
 * the permutation is torch.randperm(n, generator=g) with g = torch.Generator() seeded with
 * seed + epoch (mt19937, ATen's CPU Fisher–Yates), then padded by wrap-around to a multiple
 * of world_size (or cut, with drop_last), then indices[rank::world_size]. With one process it
 * is a plain seeded shuffle. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

typedef struct {
  guint64 n; /* dataset length */
  int world_size;
  int rank;
  gboolean shuffle;
  gint64 seed;
  gboolean drop_last;
} CohortSamplerSpec;

/* Samples per rank per epoch (len(sampler) in PyTorch). */
guint64 cohort_sampler_num_samples(const CohortSamplerSpec *spec);

/* The rank's indices for `epoch`; *n_out = cohort_sampler_num_samples. g_free the result. */
guint64 *cohort_sampler_indices(const CohortSamplerSpec *spec, guint64 epoch, guint64 *n_out);

/* torch.randperm(n) with a generator seeded by `seed`; g_free the result. */
guint64 *cohort_randperm(guint64 n, guint64 seed);

G_END_DECLS

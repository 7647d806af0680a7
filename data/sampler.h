/* DistributedSampler with PyTorch's semantics exactly (torch.utils.data.DistributedSampler):
 * the permutation is torch.randperm(n, generator=g) with g = torch.Generator() seeded with
 * seed + epoch (mt19937, ATen's CPU Fisher–Yates), then padded by wrap-around to a multiple
 * of world_size (or cut, with drop_last), then indices[rank::world_size]. With one process it
 * is a plain seeded shuffle.
 *
 * With shares (rank_batch_sizes, engine/config/rank-batches.h) the same padded order is cut into
 * global micro-batches of `global_batch` examples, and the rank takes `share` examples from
 * `share_offset` of each: the global micro-batches are the same examples whatever the split,
 * and every example is seen once per epoch (the padded order's tail shorter than a global
 * micro-batch is left out, as a batch of the strided split is). */
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
  /* Shares: examples per global micro-batch (0: PyTorch's strided split above), this rank's
   * first position in each and how many it takes. */
  guint64 global_batch;
  guint64 share_offset;
  guint64 share;
} CohortSamplerSpec;

/* Samples per rank per epoch (len(sampler) in PyTorch; with shares, whole global micro-batches
 * × share). */
guint64 cohort_sampler_num_samples(const CohortSamplerSpec *spec);

/* The rank's indices for `epoch`; *n_out = cohort_sampler_num_samples. g_free the result. */
guint64 *cohort_sampler_indices(const CohortSamplerSpec *spec, guint64 epoch, guint64 *n_out);

/* Global micro-batches per epoch with shares: the padded order's length over global_batch. */
guint64 cohort_sampler_global_batches(const CohortSamplerSpec *spec);

/* torch.randperm(n) with a generator seeded by `seed`; g_free the result. */
guint64 *cohort_randperm(guint64 n, guint64 seed);

G_END_DECLS

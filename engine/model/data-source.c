/* Data sources for the trainer: token windows (data/dataset.h), images (data/images.h) and
 * their latents (data/latent-set.h), behind one numbered-sample interface. */
#include "engine/model/data-source.h"

#include "data/augment.h"
#include "data/dataset.h"
#include "data/images.h"

#include <string.h>

struct CohortDataSource {
  CohortDataFormat format;
  CohortDataset *windows; /* text and token shards */
  int T;
  CohortImageSet *images;     /* images */
  CohortLatentTable *latents; /* or latents of them (vae_from) */
  int C, S;
  CohortAugment augment;
  guint64 seed;
};

static CohortDataSource *open_images(CohortDataSource *s, const CohortConfig *cfg, const char *path,
                                     const char *cache_dir, GError **error)
{
  s->images = cohort_image_set_open(path, cfg->image_size, cfg->image_channels,
                                    cfg->skip_bad_images, cache_dir, error);
  if (!s->images) {
    cohort_data_source_free(s);
    return NULL;
  }
  s->C = cfg->image_channels;
  s->S = cfg->image_size;
  s->augment = (CohortAugment)cfg->augment;
  s->seed = (guint64)cfg->seed;
  return s;
}

CohortDataSource *cohort_data_source_open(const CohortConfig *cfg, const char *path,
                                          const char *cache_dir, GError **error)
{
  g_autofree char *resolved = cohort_resolve_path(path);
  CohortDataSource *s = g_new0(CohortDataSource, 1);
  s->format = cfg->data_format;
  if (cfg->data_format == COHORT_DATA_IMAGES)
    return open_images(s, cfg, resolved, cache_dir, error);
  s->T = cfg->seq_len;
  s->windows = cohort_dataset_open_prepared(resolved, cfg->data_format, cfg->vocab_size,
                                            cfg->seq_len, cache_dir, NULL, error);
  if (!s->windows) {
    cohort_data_source_free(s);
    return NULL;
  }
  return s;
}

CohortDataSource *cohort_data_source_new_latents(const CohortConfig *cfg, CohortLatentTable *table)
{
  CohortDataSource *s = g_new0(CohortDataSource, 1);
  s->format = COHORT_DATA_IMAGES;
  s->latents = table;
  s->C = table->channels;
  s->S = table->size;
  s->augment = (CohortAugment)cfg->augment;
  s->seed = (guint64)cfg->seed;
  return s;
}

void cohort_data_source_free(CohortDataSource *s)
{
  if (!s)
    return;
  g_clear_pointer(&s->latents, cohort_latent_table_free);
  g_clear_pointer(&s->windows, cohort_dataset_free);
  g_clear_pointer(&s->images, cohort_image_set_free);
  g_free(s);
}

guint64 cohort_data_source_count(const CohortDataSource *s)
{
  if (s->latents)
    return s->latents->n;
  return s->images ? cohort_image_set_len(s->images) : cohort_dataset_num_windows(s->windows);
}

int cohort_data_source_num_classes(const CohortDataSource *s)
{
  if (s->latents)
    return (int)g_strv_length(s->latents->classes);
  return s->images ? cohort_image_set_num_classes(s->images) : 0;
}

const char *const *cohort_data_source_class_names(const CohortDataSource *s)
{
  if (s->latents)
    return (const char *const *)s->latents->classes;
  return s->images ? cohort_image_set_class_names(s->images) : NULL;
}

guint cohort_data_source_num_skipped(const CohortDataSource *s)
{
  return s->images ? cohort_image_set_num_skipped(s->images) : 0;
}

CohortBatch *cohort_data_source_batch_new(const CohortDataSource *s, int capacity)
{
  if (s->images || s->latents)
    return cohort_batch_new(capacity, 0, s->C, s->S, s->S);
  return cohort_batch_new(capacity, s->T, 0, 0, 0);
}

/* The latent of `index`, mirrored when training with flip draws it so. */
static gboolean load_latent(const CohortDataSource *s, CohortBatch *b, int row, guint64 index)
{
  const CohortLatentTable *t = s->latents;
  size_t D = (size_t)t->channels * t->size * t->size;
  int top, left;
  gboolean flip = FALSE;
  if (b->epoch >= 0 && s->augment == COHORT_AUGMENT_FLIP && t->variants == 2)
    cohort_augment_draw(s->augment, s->seed, (guint64)b->epoch, index, &top, &left, &flip);
  memcpy(b->images + row * D, t->values + ((size_t)index * t->variants + (flip ? 1 : 0)) * D,
         D * sizeof(float));
  b->labels[row] = t->labels[index];
  return TRUE;
}

gboolean cohort_data_source_load(const CohortDataSource *s, CohortBatch *b, int row, guint64 index,
                                 GError **error)
{
  b->example_ids[row] = index;
  if (s->latents)
    return load_latent(s, b, row, index);
  if (!s->images)
    return cohort_dataset_window(s->windows, index, b->inputs + (size_t)row * b->T,
                                 b->targets + (size_t)row * b->T, error);
  size_t D = (size_t)s->C * s->S * s->S;
  float *dst = b->images + row * D;
  if (b->epoch < 0 || s->augment == COHORT_AUGMENT_NONE) {
    cohort_image_set_get(s->images, index, dst, &b->labels[row]);
    return TRUE;
  }
  /* Training: the augmentation of (seed, epoch, index), the same on every rank. The image
   * before it goes to memory of this call's own: loader threads call this at once. */
  g_autofree float *scratch = g_new(float, D);
  cohort_image_set_get(s->images, index, scratch, &b->labels[row]);
  cohort_augment_apply(s->augment, s->seed, (guint64)b->epoch, index, s->C, s->S, s->S, scratch,
                       dst);
  return TRUE;
}

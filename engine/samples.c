#include "engine/samples.h"

#include "data/dataset.h"

struct CohortSamples {
  CohortDataFormat format;
  CohortDataset *windows; /* text and token shards */
  int T;
};

CohortSamples *cohort_samples_open(const CohortConfig *cfg, const char *path, const char *cache_dir,
                                   GError **error)
{
  g_autofree char *resolved = cohort_resolve_path(path);
  CohortSamples *s = g_new0(CohortSamples, 1);
  s->format = cfg->data_format;
  s->T = cfg->seq_len;
  s->windows = cohort_dataset_open_prepared(resolved, cfg->data_format, cfg->vocab_size,
                                            cfg->seq_len, cache_dir, NULL, error);
  if (!s->windows) {
    cohort_samples_free(s);
    return NULL;
  }
  return s;
}

void cohort_samples_free(CohortSamples *s)
{
  if (!s)
    return;
  g_clear_pointer(&s->windows, cohort_dataset_free);
  g_free(s);
}

guint64 cohort_samples_count(const CohortSamples *s)
{
  return cohort_dataset_num_windows(s->windows);
}

CohortBatch *cohort_samples_batch_new(const CohortSamples *s, int capacity)
{
  return cohort_batch_new(capacity, s->T, 0, 0, 0);
}

void cohort_samples_load(const CohortSamples *s, CohortBatch *b, int row, guint64 index)
{
  cohort_dataset_window(s->windows, index, b->inputs + (size_t)row * b->T,
                        b->targets + (size_t)row * b->T);
  b->sample_ids[row] = index;
}

#include "engine/batch.h"

CohortBatch *cohort_batch_new(int capacity, int T, int C, int H, int W)
{
  CohortBatch *b = g_new0(CohortBatch, 1);
  b->B = capacity;
  b->T = T;
  b->C = C;
  b->H = H;
  b->W = W;
  if (T > 0) {
    b->inputs = g_new0(int, (size_t)capacity *T);
    b->targets = g_new0(int, (size_t)capacity *T);
  }
  if (C > 0) {
    b->images = g_new0(float, (size_t)capacity *C *H *W);
    b->labels = g_new0(int, capacity);
  }
  b->sample_ids = g_new0(guint64, capacity);
  return b;
}

void cohort_batch_free(CohortBatch *b)
{
  if (!b)
    return;
  g_free(b->inputs);
  g_free(b->targets);
  g_free(b->images);
  g_free(b->labels);
  g_free(b->sample_ids);
  g_free(b);
}

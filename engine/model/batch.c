#include "engine/model/batch.h"

#include <string.h>

static void *zeroed(void *(*alloc)(size_t), size_t bytes)
{
  void *p = alloc(bytes);
  if (p != NULL)
    memset(p, 0, bytes);
  return p;
}

static void *host_alloc(size_t bytes)
{
  return g_malloc0(bytes);
}

CohortBatch *cohort_batch_new_with(int capacity, int T, int C, int H, int W, void *(*alloc)(size_t),
                                   void (*release)(void *))
{
  CohortBatch *b = g_new0(CohortBatch, 1);
  b->B = capacity;
  b->T = T;
  b->C = C;
  b->H = H;
  b->W = W;
  b->release = release;
  size_t rows = (size_t)capacity;
  gboolean ok = TRUE;
  if (T > 0) {
    b->inputs = zeroed(alloc, rows * T * sizeof(int));
    b->targets = zeroed(alloc, rows * T * sizeof(int));
    ok = b->inputs && b->targets;
  }
  if (C > 0) {
    b->images = zeroed(alloc, rows * C * H * W * sizeof(float));
    b->labels = zeroed(alloc, rows * sizeof(int));
    ok = ok && b->images && b->labels;
  }
  b->example_ids = g_new0(guint64, capacity);
  if (!ok) {
    cohort_batch_free(b);
    return NULL;
  }
  return b;
}

CohortBatch *cohort_batch_new(int capacity, int T, int C, int H, int W)
{
  return cohort_batch_new_with(capacity, T, C, H, W, host_alloc, NULL);
}

void cohort_batch_add_text(CohortBatch *b, int M, int text_dim)
{
  g_return_if_fail(M > 0 && text_dim > 0 && !b->text);
  b->M = M;
  b->text_dim = text_dim;
  b->text = g_new0(float, (size_t)b->B *M *text_dim);
  b->text_len = g_new0(int, b->B);
}

void cohort_batch_free(CohortBatch *b)
{
  if (!b)
    return;
  void (*release)(void *) = b->release ? b->release : g_free;
  if (b->inputs)
    release(b->inputs);
  if (b->targets)
    release(b->targets);
  if (b->images)
    release(b->images);
  if (b->labels)
    release(b->labels);
  g_free(b->text);
  g_free(b->text_len);
  g_free(b->example_ids);
  g_free(b);
}

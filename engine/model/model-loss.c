/* Training losses as the families' forwards report them, and the log that lets the trainer
 * read a whole step's losses with one download instead of waiting for the device after
 * every forward (engine/model/model.h). */
#include "engine/model/model.h"

#include <math.h>

#include "kernels/backend.h"

struct CohortLossLog {
  gboolean on;
  gboolean failed; /* an allocation failed: this step's loss is unknown */
  float *dev;      /* backend memory, cap floats */
  float *host;     /* cap floats */
  size_t cap, used;
  GArray *counts; /* LossCount: the losses of each forward, in order */
};

typedef struct {
  size_t n;   /* losses */
  double div; /* what their sum is divided by */
} LossCount;

double cohort_model_loss_sum(CohortModel *m, const float *losses, size_t n, float *host)
{
  m->be->download(host, losses, n * sizeof(float));
  double sum = 0;
  for (size_t i = 0; i < n; i++)
    sum += host[i];
  return sum;
}

/* Room for `want` floats, the logged ones kept. Allocates (a device-wide wait on a GPU) only
 * while the log grows: in a run's first step. */
static gboolean grow(CohortModel *m, CohortLossLog *log, size_t want)
{
  size_t cap = MAX(want, 2 * log->cap);
  float *dev = m->be->alloc(cap * sizeof(float));
  if (dev == NULL)
    return FALSE;
  if (log->used > 0)
    m->be->copy(dev, log->dev, log->used * sizeof(float));
  if (log->dev)
    m->be->free(log->dev);
  log->dev = dev;
  log->host = g_renew(float, log->host, cap);
  log->cap = cap;
  return TRUE;
}

float cohort_model_mean_loss(CohortModel *m, const float *losses, size_t n, float *host)
{
  return cohort_model_loss_over(m, losses, n, (double)n, host);
}

float cohort_model_loss_over(CohortModel *m, const float *losses, size_t n, double div, float *host)
{
  CohortLossLog *log = m->loss_log;
  if (log == NULL || !log->on)
    return (float)(cohort_model_loss_sum(m, losses, n, host) / div);
  if (log->used + n > log->cap && !grow(m, log, log->used + n)) {
    log->failed = TRUE;
    return NAN;
  }
  m->be->copy(log->dev + log->used, losses, n * sizeof(float));
  log->used += n;
  LossCount c = {n, div};
  g_array_append_val(log->counts, c);
  return NAN;
}

double cohort_batch_loss_div(const int *targets, size_t n, double loss_norm, size_t *counted)
{
  size_t c = 0;
  for (size_t i = 0; i < n; i++)
    c += targets[i] >= 0;
  if (counted)
    *counted = c;
  return loss_norm > 0 ? loss_norm : (double)MAX(c, 1);
}

void cohort_model_begin_losses(CohortModel *m)
{
  if (m->loss_log == NULL) {
    m->loss_log = g_new0(CohortLossLog, 1);
    m->loss_log->counts = g_array_new(FALSE, FALSE, sizeof(LossCount));
  }
  m->loss_log->on = TRUE;
  m->loss_log->failed = FALSE;
  m->loss_log->used = 0;
  g_array_set_size(m->loss_log->counts, 0);
}

gboolean cohort_model_take_losses(CohortModel *m, double *sum, guint *forwards)
{
  CohortLossLog *log = m->loss_log;
  *sum = NAN;
  *forwards = 0;
  if (log == NULL || !log->on)
    return FALSE;
  log->on = FALSE;
  if (log->failed)
    return FALSE;
  m->be->download(log->host, log->dev, log->used * sizeof(float));
  /* each forward's mean as it would have returned it, added in the order of the forwards */
  double total = 0;
  size_t off = 0;
  for (guint k = 0; k < log->counts->len; k++) {
    LossCount c = g_array_index(log->counts, LossCount, k);
    size_t n = c.n;
    double s = 0;
    for (size_t i = 0; i < n; i++)
      s += log->host[off + i];
    total += (float)(s / c.div);
    off += n;
  }
  *sum = total;
  *forwards = log->counts->len;
  return TRUE;
}

void cohort_model_free_losses(CohortModel *m)
{
  CohortLossLog *log = m->loss_log;
  if (log == NULL)
    return;
  if (m->be)
    m->be->free(log->dev);
  g_free(log->host);
  g_array_unref(log->counts);
  g_free(log);
  m->loss_log = NULL;
}

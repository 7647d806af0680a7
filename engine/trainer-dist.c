#include "trainer-dist.h"

#include <omp.h>

#include "kernels/backend.h"

struct CohortTrainDist {
  CohortComm *comm;
  int rank;
  int world_size;
  gint64 data_us, step_us, comm_us;
  int steps_since_report;
};

CohortTrainDist *cohort_train_dist_new(CohortComm *comm, int rank, int world_size,
                                       const CohortConfig *cfg)
{
  (void)cfg;
  CohortTrainDist *d = g_new0(CohortTrainDist, 1);
  d->comm = world_size > 1 ? comm : NULL;
  d->rank = rank;
  d->world_size = world_size;
  return d;
}

void cohort_train_dist_free(CohortTrainDist *d)
{
  g_free(d);
}

void cohort_train_dist_attach(CohortTrainDist *d, CohortGpt *gpt, double bucket_cap_mb)
{
  (void)d;
  (void)gpt;
  (void)bucket_cap_mb;
}

void cohort_train_dist_begin_backward(CohortTrainDist *d, gboolean sync)
{
  (void)d;
  (void)sync;
}

gboolean cohort_train_dist_end_backward(CohortTrainDist *d, GError **error)
{
  (void)d;
  (void)error;
  return TRUE;
}

gboolean cohort_train_dist_sum(CohortTrainDist *d, double *values, int n, GError **error)
{
  (void)d;
  (void)values;
  (void)n;
  (void)error;
  return TRUE;
}

gboolean cohort_train_dist_barrier(CohortTrainDist *d, const char *what, GError **error)
{
  (void)d;
  (void)what;
  (void)error;
  return TRUE;
}

gboolean cohort_train_dist_broadcast_params(CohortTrainDist *d, float *params, size_t n,
                                            GError **error)
{
  (void)d;
  (void)params;
  (void)n;
  (void)error;
  return TRUE;
}

gboolean cohort_train_dist_should_stop(CohortTrainDist *d, volatile int *stop_flag)
{
  (void)d;
  return stop_flag && *stop_flag;
}

void cohort_train_dist_add_data_time(CohortTrainDist *d, gint64 us)
{
  d->data_us += us;
}

void cohort_train_dist_add_step_time(CohortTrainDist *d, gint64 us)
{
  d->step_us += us;
  d->steps_since_report++;
}

gboolean cohort_train_dist_report_ranks(CohortTrainDist *d, CohortProgress *progress,
                                        gint64 step, GError **error)
{
  (void)progress;
  (void)step;
  (void)error;
  if (d->world_size == 1)
    return TRUE;
  return TRUE;
}

void cohort_train_set_threads(int threads)
{
  cohort_backend_cpu()->set_threads(threads);
}

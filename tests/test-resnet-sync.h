/* Part of tests/test-resnet.c: SyncBatchNorm between two "ranks" that are two threads of this
 * process, each with its own model and half the batch, their collectives an exchange through
 * shared memory. With the communicator, the ranks' mean loss, their averaged gradients (what
 * DDP applies) and each rank's running statistics equal one model's on the whole batch; without
 * it they measurably do not. With freeze_bn_stats (BatchNorm in eval mode) the ranks equal one
 * model either way, and no BatchNorm collective runs. */

typedef struct {
  GMutex lock;
  GCond cond;
  int arrived;
  guint64 generation;
  const float *send[2];
  int calls; /* collectives issued, both ranks together */
} Exchange;

typedef struct {
  Exchange *x;
  int rank;
  CohortModel *m;
  CohortModelComm comm;
  float loss;
} RankCtx;

static void exchange_barrier(Exchange *x)
{
  g_mutex_lock(&x->lock);
  x->calls++;
  guint64 gen = x->generation;
  if (++x->arrived == 2) {
    x->arrived = 0;
    x->generation++;
    g_cond_broadcast(&x->cond);
  } else {
    while (gen == x->generation)
      g_cond_wait(&x->cond, &x->lock);
  }
  g_mutex_unlock(&x->lock);
}

static gboolean fake_all_gather(gpointer data, const float *send, size_t count, float *recv)
{
  RankCtx *c = data;
  c->x->send[c->rank] = send;
  exchange_barrier(c->x);
  for (int r = 0; r < 2; r++)
    memcpy(recv + r * count, c->x->send[r], count * sizeof(float));
  exchange_barrier(c->x); /* nobody reuses its row before both have read it */
  return TRUE;
}

static gboolean fake_all_reduce_sum(gpointer data, float *buf, size_t count)
{
  RankCtx *c = data;
  c->x->send[c->rank] = buf;
  exchange_barrier(c->x);
  g_autofree float *sum = g_new(float, count);
  for (size_t i = 0; i < count; i++)
    sum[i] = c->x->send[0][i] + c->x->send[1][i]; /* the same order on both ranks */
  exchange_barrier(c->x);
  memcpy(buf, sum, count * sizeof(float));
  return TRUE;
}

static gpointer rank_main(gpointer data)
{
  RankCtx *c = data;
  int half = B / 2;
  cohort_model_zero_grad(c->m);
  c->loss = cohort_resnet_forward_given(c->m, images + (size_t)c->rank * half * D,
                                        labels + c->rank * half, half, COHORT_FORWARD_TRAIN, NULL);
  c->m->ops->backward(c->m, 1.0f);
  return NULL;
}

/* Largest |a - b| over n values, relative to max |b|. */
static double rel_diff(const float *a, const float *b, size_t n)
{
  double mx = 0, worst = 0;
  for (size_t i = 0; i < n; i++)
    mx = fmax(mx, fabs(b[i]));
  for (size_t i = 0; i < n; i++)
    worst = fmax(worst, fabs((double)a[i] - b[i]));
  return mx > 0 ? worst / mx : worst;
}

/* Two ranks on halves of the batch, with or without the communicator: returns the worst
 * relative differences from one model on the whole batch (loss, gradients, running
 * statistics). */
static int two_ranks(gboolean sync, const char *extra, double *d_loss, double *d_grad,
                     double *d_stats)
{
  g_autoptr(CohortModel) one = make_model_with(41, B, extra);
  randomise(one, 43);
  cohort_model_zero_grad(one);
  float loss = cohort_resnet_forward_given(one, images, labels, B, COHORT_FORWARD_TRAIN, NULL);
  one->ops->backward(one, 1.0f);

  Exchange x = {0};
  g_mutex_init(&x.lock);
  g_cond_init(&x.cond);
  RankCtx ctx[2];
  for (int r = 0; r < 2; r++) {
    ctx[r] = (RankCtx){.x = &x, .rank = r, .m = make_model_with(41, B / 2, extra)};
    randomise(ctx[r].m, 43);
    ctx[r].comm = (CohortModelComm){2, fake_all_gather, fake_all_reduce_sum, &ctx[r]};
    g_autoptr(GError) error = NULL;
    g_assert_true(cohort_model_set_comm(ctx[r].m, sync ? &ctx[r].comm : NULL, &error));
  }
  GThread *t1 = g_thread_new("rank1", rank_main, &ctx[1]);
  rank_main(&ctx[0]);
  g_thread_join(t1);

  size_t n = one->n_params;
  g_autofree float *avg = g_new(float, n);
  for (size_t i = 0; i < n; i++)
    avg[i] = (ctx[0].m->grads[i] + ctx[1].m->grads[i]) / 2; /* DDP's average */
  *d_loss = fabs((ctx[0].loss + ctx[1].loss) / 2 - loss) / fabs(loss);
  *d_grad = rel_diff(avg, one->grads, n);
  *d_stats = 0;
  for (int r = 0; r < 2; r++)
    for (guint i = 0; i < one->n_buffers; i++) {
      const CohortTensorInfo *t = &one->buffers[i];
      *d_stats = fmax(*d_stats, rel_diff(ctx[r].m->buffer_data + t->offset,
                                         one->buffer_data + t->offset, t->numel));
    }
  for (int r = 0; r < 2; r++)
    cohort_model_free(ctx[r].m);
  g_mutex_clear(&x.lock);
  g_cond_clear(&x.cond);
  return x.calls;
}

static void test_syncbn_in_process(void)
{
  double loss, grad, stats;
  g_assert_cmpint(two_ranks(TRUE, NULL, &loss, &grad, &stats), >, 0);
  g_test_message("SyncBatchNorm, 2 × 4 vs 1 × 8: loss %.2e, gradients %.2e, running statistics "
                 "%.2e (relative)",
                 loss, grad, stats);
  g_assert_cmpfloat(loss, <=, 1e-5);
  g_assert_cmpfloat(grad, <=, 1e-5);
  g_assert_cmpfloat(stats, <=, 1e-5);
  two_ranks(FALSE, NULL, &loss, &grad, &stats);
  g_test_message("per-rank BatchNorm, 2 × 4 vs 1 × 8: loss %.2e, gradients %.2e, running "
                 "statistics %.2e",
                 loss, grad, stats);
  g_assert_cmpfloat(loss, >, 1e-3);
  g_assert_cmpfloat(grad, >, 1e-2);
  g_assert_cmpfloat(stats, >, 1e-3);
}

/* freeze_bn_stats with sync_batchnorm's communicator, and without: 2 ranks on halves of the
 * batch equal 1 process on the whole (the statistics are the running ones, the same on every
 * rank), and BatchNorm issues no collective. */
static void test_frozen_bn_two_ranks(void)
{
  for (int sync = 1; sync >= 0; sync--) {
    double loss, grad, stats;
    int calls = two_ranks(sync, "freeze_bn_stats=true", &loss, &grad, &stats);
    g_test_message("freeze_bn_stats, 2 × 4 vs 1 × 8 (%s): loss %.2e, gradients %.2e, running "
                   "statistics %.2e; %d collectives",
                   sync ? "sync_batchnorm" : "per rank", loss, grad, stats, calls);
    g_assert_cmpint(calls, ==, 0);
    g_assert_cmpfloat(loss, <=, 1e-5);
    g_assert_cmpfloat(grad, <=, 1e-5);
    g_assert_cmpfloat(stats, ==, 0);
  }
}

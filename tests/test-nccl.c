/* The NCCL backend: one rank on one GPU (every collective on device buffers, values checked,
 * bfloat16 all-reduce and the in-place all-gather included), the DDP reducer's bf16 reduction over
 * NCCL with one rank (each gradient becomes its bfloat16 rounding, bit for bit), two ranks forked
 * onto the same GPU (a clear error naming both ranks and the GPU), two ranks on two GPUs when there
 * are two (bfloat16 sums exactly bf16(a + b); ZeRO's reduce-scatter and all-gather with equal and
 * uneven counts), and a device that does not exist (an error, never a
 * crash, with or without a GPU). Cases that need a GPU are skipped without one.
 *
 * CUDA does not survive fork(): the multi-process cases run in a fresh test subprocess
 * (g_test_trap_subprocess executes this program again), which forks its ranks before anything
 * touches CUDA. */
#include "engine/distributed/comm.h"
#include "engine/distributed/cuda-query.h"
#include "engine/distributed/reducer.h"
#include "rank-harness.h"
#include "cuda-share.h"
#include "kernels/cuda/cuda-backend.h"
#include "kernels/math-inline.h"
#include "wait-ranks.h"

#include <cuda_runtime_api.h>
#include <glib.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static gboolean need_gpus(int n)
{
  int have = cohort_cuda_device_count();
  if (have >= n)
    return TRUE;
  g_autofree char *msg = NULL;
  if (have == 0) {
    const char *why = cohort_cuda_probe_error();
    msg = g_strdup_printf("no CUDA device: %s", why ? why : "none visible");
  } else {
    msg = g_strdup_printf("needs %d CUDA devices, %d visible", n, have);
  }
  g_test_skip(msg);
  return FALSE;
}

static void *device_copy(const void *host, gsize bytes)
{
  void *d = NULL;
  g_assert_cmpint(cudaMalloc(&d, bytes), ==, cudaSuccess);
  g_assert_cmpint(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice), ==, cudaSuccess);
  return d;
}

static void host_copy(void *host, const void *dev, gsize bytes)
{
  g_assert_cmpint(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost), ==, cudaSuccess);
}

static void test_available(void)
{
  /* This test is built only with NCCL: the answer is about the build, GPU or not. */
  g_assert_true(cohort_comm_backend_available("nccl"));
}

/* ---- the poll step, with a fake query (runs everywhere) ---- */

/* Stands in for the runtime: the thread's last-error slot, and a query that answers from a
 * script and leaves each failure in the slot, as cudaStreamQuery does. */
static cudaError_t fake_slot = cudaSuccess;
static const cudaError_t *fake_answers;

static cudaError_t fake_query(gpointer obj)
{
  (void)obj;
  cudaError_t e = *fake_answers++;
  if (e != cudaSuccess)
    fake_slot = e;
  return e;
}

static cudaError_t fake_take_error(void)
{
  cudaError_t e = fake_slot;
  fake_slot = cudaSuccess;
  return e;
}

static void test_query_clears_not_ready(void)
{
  static const cudaError_t answers[] = {cudaErrorNotReady, cudaErrorNotReady, cudaSuccess,
                                        cudaErrorLaunchFailure};
  fake_answers = answers;
  cudaError_t failure = cudaSuccess;
  for (int i = 0; i < 2; i++) {
    g_assert_cmpint(cohort_cuda_query(fake_query, NULL, fake_take_error, &failure), ==,
                    COHORT_CUDA_QUERY_PENDING);
    /* what the next launch check (cudaGetLastError) would read */
    g_assert_cmpint(fake_slot, ==, cudaSuccess);
  }
  g_assert_cmpint(cohort_cuda_query(fake_query, NULL, fake_take_error, &failure), ==,
                  COHORT_CUDA_QUERY_DONE);
  g_assert_cmpint(failure, ==, cudaSuccess);
  g_assert_cmpint(cohort_cuda_query(fake_query, NULL, fake_take_error, &failure), ==,
                  COHORT_CUDA_QUERY_FAILED);
  g_assert_cmpint(failure, ==, cudaErrorLaunchFailure);
  g_assert_cmpint(fake_slot, ==, cudaSuccess);
}

/* A failed setup leaves nothing in this thread's CUDA error slot: the bad index's
 * cudaSetDevice in setup and in the clean-up is cleared (a later launch check would read it
 * as its own failure). */
static void test_bad_device_leaves_no_error(void)
{
  if (g_test_subprocess()) {
    g_autoptr(CohortDistEnv) env = cohort_dist_env_new_single();
    g_autoptr(GError) error = NULL;
    g_autoptr(CohortStore) store = cohort_store_open(env, "t", 10, &error);
    g_assert_no_error(error);
    int count = cohort_cuda_device_count();
    g_assert_null(cohort_comm_new_nccl(store, env, count + 3, 10, &error));
    g_assert_nonnull(error);
    /* Without a driver the runtime's initialisation failure is sticky: nothing to check. */
    if (count > 0)
      g_assert_cmpint(cudaPeekAtLastError(), ==, cudaSuccess);
    return;
  }
  /* A fresh process, so that the CUDA state of other cases does not leak in. */
  g_test_trap_subprocess(NULL, 60 * G_USEC_PER_SEC, G_TEST_SUBPROCESS_INHERIT_STDERR);
  g_test_trap_assert_passed();
}

/* A device index past the last one: every rank fails in setup with a message, GPU or not. */
static void test_bad_device(void)
{
  g_autoptr(CohortDistEnv) env = cohort_dist_env_new_single();
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortStore) store = cohort_store_open(env, "t", 10, &error);
  g_assert_no_error(error);
  int count = cohort_cuda_device_count();
  g_autoptr(CohortComm) c = cohort_comm_new_nccl(store, env, count, 10, &error);
  g_assert_null(c);
  g_assert_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_FAILED);
  g_test_message("%s", error->message);
  g_assert_nonnull(strstr(error->message, "rank 0"));
  g_assert_true(strstr(error->message, "does not exist") != NULL ||
                strstr(error->message, "no usable CUDA device") != NULL);
}

/* Runs a collective and fails with its message when it fails. */
#define OK(call)                                                                                   \
  do {                                                                                             \
    gboolean ok_ = (call);                                                                         \
    g_assert_no_error(error);                                                                      \
    g_assert_true(ok_);                                                                            \
  } while (0)

static void test_one_rank(void)
{
  if (!need_gpus(1))
    return;
  g_autoptr(CohortDistEnv) env = cohort_dist_env_new_single();
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortStore) store = cohort_store_open(env, "t", 10, &error);
  g_assert_no_error(error);
  /* A first communicator, freed at once (finalized, not aborted); the second one gets keys
   * of its own in the store. */
  CohortComm *first = cohort_comm_new_nccl(store, env, 0, 60, &error);
  g_assert_no_error(error);
  OK(cohort_comm_barrier(first, 10, &error));
  cohort_comm_free(first);
  g_autoptr(CohortComm) c = cohort_comm_new_nccl(store, env, 0, 60, &error);
  g_assert_no_error(error);
  g_assert_nonnull(c);
  g_assert_cmpstr(cohort_comm_backend_name(c), ==, "nccl");
  g_assert_cmpint(cohort_comm_world_size(c), ==, 1);
  g_assert_cmpint(cohort_comm_rank(c), ==, 0);

  enum { N = 4099 };
  float *f = g_new(float, N), *fo = g_new(float, N);
  double *d = g_new(double, N), *dout = g_new(double, N);
  for (int i = 0; i < N; i++) {
    f[i] = 0.25f * (float)i - 7.0f;
    d[i] = 1.0 / (i + 1);
  }
  float *df = device_copy(f, N * sizeof *f);
  double *dd = device_copy(d, N * sizeof *d);
  for (int op = COHORT_REDUCE_SUM; op <= COHORT_REDUCE_AVG; op++) {
    OK(cohort_comm_all_reduce_f32(c, df, N, op, 10, &error));
    OK(cohort_comm_all_reduce_f64(c, dd, N, op, 10, &error));
    host_copy(fo, df, N * sizeof *f);
    host_copy(dout, dd, N * sizeof *d);
    g_assert_cmpmem(fo, N * sizeof *f, f, N * sizeof *f);
    g_assert_cmpmem(dout, N * sizeof *d, d, N * sizeof *d);
  }
  OK(cohort_comm_all_reduce_f32(c, df, 0, COHORT_REDUCE_SUM, 10, &error));

  /* bfloat16 over one rank: SUM and AVG (ncclAvg) leave the bits as they are. */
  guint16 *h = g_new(guint16, N), *ho = g_new(guint16, N);
  for (int i = 0; i < N; i++)
    h[i] = cohort_f32_to_bf16(f[i] * 1.37f);
  guint16 *dh = device_copy(h, N * sizeof *h);
  for (int op = COHORT_REDUCE_SUM; op <= COHORT_REDUCE_AVG; op++) {
    OK(cohort_comm_all_reduce_bf16(c, dh, N, op, 10, &error));
    host_copy(ho, dh, N * sizeof *h);
    g_assert_cmpmem(ho, N * sizeof *h, h, N * sizeof *h);
  }
  cudaFree(dh);
  g_free(h);
  g_free(ho);

  guint8 bytes[1000], got[1000];
  for (int i = 0; i < 1000; i++)
    bytes[i] = (guint8)(i * 7);
  guint8 *db = device_copy(bytes, sizeof bytes);
  OK(cohort_comm_broadcast(c, db, sizeof bytes, 0, 10, &error));
  host_copy(got, db, sizeof got);
  g_assert_cmpmem(got, sizeof got, bytes, sizeof bytes);

  guint8 *drecv = NULL;
  g_assert_cmpint(cudaMalloc((void **)&drecv, sizeof bytes), ==, cudaSuccess);
  g_assert_cmpint(cudaMemset(drecv, 0, sizeof bytes), ==, cudaSuccess);
  OK(cohort_comm_all_gather(c, db, sizeof bytes, drecv, 10, &error));
  host_copy(got, drecv, sizeof got);
  g_assert_cmpmem(got, sizeof got, bytes, sizeof bytes);
  OK(cohort_comm_all_gather_inplace(c, drecv, sizeof bytes, 10, &error));
  host_copy(got, drecv, sizeof got);
  g_assert_cmpmem(got, sizeof got, bytes, sizeof bytes);

  /* ZeRO's collectives over one rank: the reduce-scatter is a copy, the all-gather nothing. */
  gsize counts[1] = {N}, nbytes[1] = {sizeof bytes};
  float *dsend = device_copy(f, N * sizeof *f);
  float *drs = NULL;
  g_assert_cmpint(cudaMalloc((void **)&drs, N * sizeof *f), ==, cudaSuccess);
  for (int op = COHORT_REDUCE_SUM; op <= COHORT_REDUCE_AVG; op++) {
    OK(cohort_comm_reduce_scatter_f32(c, dsend, drs, counts, op, 10, &error));
    host_copy(fo, drs, N * sizeof *f);
    g_assert_cmpmem(fo, N * sizeof *f, f, N * sizeof *f);
  }
  OK(cohort_comm_all_gather_v(c, db, nbytes, 10, &error));
  host_copy(got, db, sizeof got);
  g_assert_cmpmem(got, sizeof got, bytes, sizeof bytes);
  cudaFree(dsend);
  cudaFree(drs);

  OK(cohort_comm_barrier(c, 10, &error));

  /* After an abort every collective fails at once. */
  cohort_comm_abort(c, "test");
  g_assert_false(cohort_comm_barrier(c, 10, &error));
  g_assert_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_ABORTED);

  cudaFree(df);
  cudaFree(dd);
  cudaFree(db);
  cudaFree(drecv);
  g_free(f);
  g_free(fo);
  g_free(d);
  g_free(dout);
}

/* The DDP reducer's bf16 reduction over NCCL with one rank: each bucket is converted on the
 * reducer's stream after its event, all-reduced as ncclBfloat16 and divided by 1, so every
 * gradient ends as its bfloat16 rounding; a no_sync pass changes nothing. */
static void test_reducer_bf16_one_rank(void)
{
  if (!need_gpus(1))
    return;
  g_autoptr(CohortDistEnv) env = cohort_dist_env_new_single();
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortStore) store = cohort_store_open(env, "t", 10, &error);
  g_assert_no_error(error);
  g_autoptr(CohortComm) c = cohort_comm_new_nccl(store, env, 0, 60, &error);
  g_assert_no_error(error);
  enum { N = 50021 };
  static const size_t sizes[] = {21, 9000, 1, 15000, 26000 - 1};
  CohortTensorInfo t[G_N_ELEMENTS(sizes)];
  size_t off = 0;
  for (guint i = 0; i < G_N_ELEMENTS(sizes); i++) {
    t[i] = (CohortTensorInfo){.name = "t", .ndim = 1, .offset = off, .numel = sizes[i]};
    t[i].shape[0] = (int)sizes[i];
    off += sizes[i];
  }
  g_assert_cmpuint(off, ==, N);
  float *g = g_new(float, N), *got = g_new(float, N);
  for (int i = 0; i < N; i++)
    g[i] = ldexpf(1.0f + (float)((i * 2654435761u) % 8388608u) / 8388608.0f, i % 13 - 6) *
           (i % 3 ? 1.0f : -1.0f);
  float *dg = device_copy(g, N * sizeof *g);
  CohortReducer *r = cohort_reducer_new_cuda(c, dg, N, t, G_N_ELEMENTS(t), 0.04, 0.02, 0, FALSE);
  g_assert_cmpuint(cohort_reducer_num_buckets(r), >=, 3);
  g_assert_true(cohort_reducer_set_precision(r, COHORT_REDUCE_BF16, &error));
  g_assert_no_error(error);
  for (int sync = 0; sync <= 1; sync++) {
    cohort_reducer_prepare(r, sync);
    for (guint i = G_N_ELEMENTS(t); i-- > 0;)
      cohort_reducer_grad_ready(t[i].offset, t[i].numel, r);
    g_assert_true(cohort_reducer_finish(r, NULL, &error));
    g_assert_no_error(error);
    host_copy(got, dg, N * sizeof *g);
    size_t rounded = 0;
    for (int i = 0; i < N; i++) {
      float want = sync ? cohort_round_bf16(g[i]) : g[i];
      g_assert_cmpmem(&got[i], sizeof(float), &want, sizeof(float));
      rounded += got[i] != g[i];
    }
    if (sync)
      g_assert_cmpuint(rounded, >, N / 2);
  }
  g_assert_null(cohort_cuda_last_error());
  cohort_reducer_free(r);
  cudaFree(dg);
  g_free(g);
  g_free(got);
}

/* ---- forked ranks ---- */

typedef enum { SCENARIO_SAME_GPU, SCENARIO_TWO_GPUS } Scenario;

static int same_gpu(int rank, CohortStore *store, CohortComm *c, GError *error)
{
  CHECK(c == NULL);
  CHECK(error != NULL);
  fprintf(stderr, "rank %d got: %s\n", rank, error->message);
  CHECK(g_error_matches(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_ENV));
  CHECK(strstr(error->message, "ranks 0 and 1 both use the GPU with PCI bus id") != NULL);
  CHECK(strstr(error->message, g_get_host_name()) != NULL);
  /* rank 0 hosts the store: it stays until rank 1 has read everything */
  g_autoptr(GError) e = NULL;
  if (rank == 1)
    CHECK(cohort_store_set(store, "test/done", "1", 1, &e));
  else
    g_bytes_unref(cohort_store_get(store, "test/done", 20, &e));
  return 0;
}

/* ZeRO stages 2 and 3's collectives over two GPUs: reduce-scatter with equal counts
 * (ncclReduceScatter) and uneven ones (grouped ncclReduce), float32 and bfloat16, and the
 * all-gather with uneven counts (grouped ncclBroadcast) in place. Returns 0 when all hold. */
static int zero_collectives(int rank, CohortComm *c)
{
  g_autoptr(GError) e = NULL;
  enum { TOTAL = 1000 };
  const gsize layouts[2][2] = {{500, 500}, {640, 360}};
  float host[TOTAL], got[TOTAL];
  float *dsend = NULL, *drecv = NULL;
  CHECK(cudaMalloc((void **)&dsend, sizeof host) == cudaSuccess);
  CHECK(cudaMalloc((void **)&drecv, sizeof host) == cudaSuccess);
  for (int k = 0; k < 2; k++) {
    const gsize *counts = layouts[k];
    gsize off = rank == 0 ? 0 : counts[0];
    for (int i = 0; i < TOTAL; i++)
      host[i] = (float)(i % 97) + 1000.0f * (float)rank;
    CHECK(cudaMemcpy(dsend, host, sizeof host, cudaMemcpyHostToDevice) == cudaSuccess);
    CHECK(cohort_comm_reduce_scatter_f32(c, dsend, drecv, counts, COHORT_REDUCE_SUM, 30, &e));
    CHECK(cudaMemcpy(got, drecv, counts[rank] * sizeof(float), cudaMemcpyDeviceToHost) ==
          cudaSuccess);
    for (gsize i = 0; i < counts[rank]; i++)
      CHECK(got[i] == 2.0f * (float)((off + i) % 97) + 1000.0f);
    /* bfloat16 halves of the same layout: small integers, exact */
    guint16 h[TOTAL], hg[TOTAL];
    for (int i = 0; i < TOTAL; i++)
      h[i] = cohort_f32_to_bf16((float)(i % 17 + rank));
    CHECK(cudaMemcpy(dsend, h, sizeof h, cudaMemcpyHostToDevice) == cudaSuccess);
    CHECK(cohort_comm_reduce_scatter_bf16(c, (guint16 *)dsend, (guint16 *)drecv, counts,
                                          COHORT_REDUCE_SUM, 30, &e));
    CHECK(cudaMemcpy(hg, drecv, counts[rank] * 2, cudaMemcpyDeviceToHost) == cudaSuccess);
    for (gsize i = 0; i < counts[rank]; i++)
      CHECK(hg[i] == cohort_f32_to_bf16((float)(2 * ((off + i) % 17) + 1)));
    /* all-gather in place: only this rank's piece is written before */
    gsize nbytes[2] = {counts[0] * sizeof(float), counts[1] * sizeof(float)};
    for (int i = 0; i < TOTAL; i++)
      host[i] = (gsize)i >= off && (gsize)i < off + counts[rank] ? (float)i : -1.0f;
    CHECK(cudaMemcpy(dsend, host, sizeof host, cudaMemcpyHostToDevice) == cudaSuccess);
    CHECK(cohort_comm_all_gather_v(c, dsend, nbytes, 30, &e));
    CHECK(cudaMemcpy(got, dsend, sizeof got, cudaMemcpyDeviceToHost) == cudaSuccess);
    for (int i = 0; i < TOTAL; i++)
      CHECK(got[i] == (float)i);
  }
  cudaFree(dsend);
  cudaFree(drecv);
  return 0;
}

static int two_gpus(int rank, CohortComm *c)
{
  CHECK(c != NULL);
  g_autoptr(GError) e = NULL;
  enum { N = 4099, B = 17 };
  float f[N];
  double d[N];
  for (int i = 0; i < N; i++) {
    f[i] = (float)(rank + 1 + i);
    d[i] = rank + 1 + i * 0.5;
  }
  float *df = NULL;
  double *dd = NULL;
  guint8 *db = NULL, *dg = NULL;
  CHECK(cudaMalloc((void **)&df, sizeof f) == cudaSuccess);
  CHECK(cudaMalloc((void **)&dd, sizeof d) == cudaSuccess);
  CHECK(cudaMalloc((void **)&db, B) == cudaSuccess);
  CHECK(cudaMalloc((void **)&dg, 2 * B) == cudaSuccess);
  CHECK(cudaMemcpy(df, f, sizeof f, cudaMemcpyHostToDevice) == cudaSuccess);
  CHECK(cudaMemcpy(dd, d, sizeof d, cudaMemcpyHostToDevice) == cudaSuccess);
  CHECK(cohort_comm_all_reduce_f32(c, df, N, COHORT_REDUCE_SUM, 30, &e));
  CHECK(cohort_comm_all_reduce_f64(c, dd, N, COHORT_REDUCE_AVG, 30, &e));
  CHECK(cudaMemcpy(f, df, sizeof f, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(cudaMemcpy(d, dd, sizeof d, cudaMemcpyDeviceToHost) == cudaSuccess);
  for (int i = 0; i < N; i++) {
    CHECK(f[i] == (float)(3 + 2 * i));
    CHECK(d[i] == 1.5 + i * 0.5);
  }
  guint8 mine[B], got[2 * B];
  memset(mine, 0x10 + rank, B);
  CHECK(cudaMemcpy(db, mine, B, cudaMemcpyHostToDevice) == cudaSuccess);
  CHECK(cohort_comm_all_gather(c, db, B, dg, 30, &e));
  CHECK(cudaMemcpy(got, dg, 2 * B, cudaMemcpyDeviceToHost) == cudaSuccess);
  for (int i = 0; i < 2 * B; i++)
    CHECK(got[i] == 0x10 + i / B);
  /* In place (ZeRO-1's parameter gather): only this rank's slot is written before. */
  memset(got, 0xEE, sizeof got);
  memset(got + rank * B, 0x20 + rank, B);
  CHECK(cudaMemcpy(dg, got, 2 * B, cudaMemcpyHostToDevice) == cudaSuccess);
  CHECK(cohort_comm_all_gather_inplace(c, dg, B, 30, &e));
  CHECK(cudaMemcpy(got, dg, 2 * B, cudaMemcpyDeviceToHost) == cudaSuccess);
  for (int i = 0; i < 2 * B; i++)
    CHECK(got[i] == 0x20 + i / B);
  CHECK(cohort_comm_broadcast(c, db, B, 1, 30, &e));
  CHECK(cudaMemcpy(mine, db, B, cudaMemcpyDeviceToHost) == cudaSuccess);
  for (int i = 0; i < B; i++)
    CHECK(mine[i] == 0x11);
  /* bfloat16: values whose rounding matters (exact ties among them); NCCL's sum of two
   * bfloat16 values is the bfloat16 nearest to a + b. */
  guint16 h[N], want[N];
  guint16 *dh = NULL;
  for (int i = 0; i < N; i++) {
    float a = cohort_round_bf16(1.0f + (float)i / 512.0f), b = i % 2 ? 0x1p-8f : -0.37f * a;
    h[i] = cohort_f32_to_bf16(rank == 0 ? a : b);
    want[i] = cohort_f32_to_bf16(a + cohort_round_bf16(b));
  }
  CHECK(cudaMalloc((void **)&dh, sizeof h) == cudaSuccess);
  CHECK(cudaMemcpy(dh, h, sizeof h, cudaMemcpyHostToDevice) == cudaSuccess);
  CHECK(cohort_comm_all_reduce_bf16(c, dh, N, COHORT_REDUCE_SUM, 30, &e));
  CHECK(cudaMemcpy(h, dh, sizeof h, cudaMemcpyDeviceToHost) == cudaSuccess);
  for (int i = 0; i < N; i++)
    CHECK(h[i] == want[i]);
  CHECK(zero_collectives(rank, c) == 0);
  CHECK(cohort_comm_barrier(c, 30, &e));
  cudaFree(df);
  cudaFree(dd);
  cudaFree(db);
  cudaFree(dg);
  cudaFree(dh);
  return 0;
}

static int child(int rank, int port, int device, Scenario s)
{
  CohortDistEnv env = rank_env(rank, 2, port, "test-nccl");
  g_autoptr(GError) error = NULL;
  g_autofree char *token = cohort_dist_job_token(&env);
  g_autoptr(CohortStore) store = cohort_store_open(&env, token, 20, &error);
  CHECK(store != NULL);
  g_autoptr(CohortComm) c = cohort_comm_new_nccl(store, &env, device, 60, &error);
  if (s == SCENARIO_SAME_GPU)
    return same_gpu(rank, store, c, error);
  if (c == NULL)
    fprintf(stderr, "rank %d: %s\n", rank, error->message);
  return two_gpus(rank, c);
}

/* In the test subprocess: forks 2 ranks (on devices[r]) and fails unless both exit 0. */
static void run_ranks(const int devices[2], Scenario s)
{
  int port = cohort_store_find_free_port(0);
  g_assert_cmpint(port, >, 0);
  pid_t pids[2];
  for (int r = 0; r < 2; r++) {
    pids[r] = fork();
    g_assert_cmpint(pids[r], >=, 0);
    if (pids[r] == 0)
      _exit(child(r, port, devices[r], s));
  }
  tu_wait_ranks(pids, 2, 90);
}

static void test_same_gpu(void)
{
  if (g_test_subprocess()) {
    /* Fresh process: nothing has touched CUDA yet. */
    run_ranks((const int[2]){0, 0}, SCENARIO_SAME_GPU);
    return;
  }
  if (!need_gpus(1) || !need_shared_gpu(0))
    return;
  g_test_trap_subprocess(NULL, 120 * G_USEC_PER_SEC, G_TEST_SUBPROCESS_INHERIT_STDERR);
  g_test_trap_assert_passed();
}

static void test_two_gpus(void)
{
  if (g_test_subprocess()) {
    run_ranks((const int[2]){0, 1}, SCENARIO_TWO_GPUS);
    return;
  }
  if (!need_gpus(2))
    return;
  g_test_trap_subprocess(NULL, 120 * G_USEC_PER_SEC, G_TEST_SUBPROCESS_INHERIT_STDERR);
  g_test_trap_assert_passed();
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  /* Nothing here may touch CUDA: the subprocess cases fork before it is initialized. */
  g_test_add_func("/nccl/available", test_available);
  g_test_add_func("/nccl/query-clears-not-ready", test_query_clears_not_ready);
  g_test_add_func("/nccl/bad-device", test_bad_device);
  g_test_add_func("/nccl/bad-device-leaves-no-error", test_bad_device_leaves_no_error);
  g_test_add_func("/nccl/one-rank", test_one_rank);
  g_test_add_func("/nccl/reducer-bf16-one-rank", test_reducer_bf16_one_rank);
  g_test_add_func("/nccl/same-gpu", test_same_gpu);
  g_test_add_func("/nccl/two-gpus", test_two_gpus);
  return g_test_run();
}

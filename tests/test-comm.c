/* Collectives: the local backend, and Gloo across 2 and 3 forked processes over loopback
 * (exact values, broadcast, all_gather, in place too, barrier), a peer that exits and a peer that
 * is late (the others get an error naming the collective and the rank, within the timeout); and the
 * bfloat16 all-reduce: with 2 ranks every element is exactly bf16(bf16(a) + bf16(b)) (values
 * chosen so that the rounding matters: ties, cancellation, far-apart magnitudes) for 1, 3 and
 * 1000003 elements (the last spans several Gloo segments), and AVG; with 3 ranks every rank
 * gets the same bits, each a sum rounded pair by pair; a peer that exits or is late gives an
 * error naming the bfloat16 all_reduce, within the timeout. */
#include "bf16-ref.h"
#include "engine/launch/build-info.h"
#include "rank-harness.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void test_local(void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortComm) c = cohort_comm_new_local();
  g_assert_cmpint(cohort_comm_world_size(c), ==, 1);
  g_assert_cmpstr(cohort_comm_backend_name(c), ==, "local");
  float f[3] = {1, 2, 3};
  g_assert_true(cohort_comm_all_reduce_f32(c, f, 3, COHORT_REDUCE_AVG, 0, &error));
  g_assert_cmpfloat(f[2], ==, 3);
  char send[4] = "abc", recv[4] = {0};
  g_assert_true(cohort_comm_all_gather(c, send, 4, recv, 0, &error));
  g_assert_cmpstr(recv, ==, "abc");
  g_assert_true(cohort_comm_all_gather_inplace(c, recv, 4, 0, &error));
  g_assert_cmpstr(recv, ==, "abc");
  g_assert_true(cohort_comm_barrier(c, 0, &error));
  g_assert_false(cohort_comm_broadcast(c, send, 4, 1, 0, &error));
  g_assert_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_INVALID);
}

/* The in-place all-gather (ZeRO-1's parameter gather): each rank writes only its own slot of
 * the full buffer, sets the others to a poison value, and must find every rank's slot filled,
 * for a slot of one float, an odd one, and one larger than Gloo's 1 MiB segment. */
static gboolean gather_in_place(CohortComm *c, int rank, int world)
{
  static const gsize slots[] = {1, 1001, 300 * 1024 + 3};
  for (guint k = 0; k < G_N_ELEMENTS(slots); k++) {
    gsize n = slots[k];
    g_autofree float *all = g_new(float, n *(gsize)world);
    for (gsize i = 0; i < n * (gsize)world; i++)
      all[i] = -1.0f;
    for (gsize i = 0; i < n; i++)
      all[(gsize)rank * n + i] = (float)rank * 1e6f + (float)i;
    g_autoptr(GError) error = NULL;
    if (!cohort_comm_all_gather_inplace(c, all, n * sizeof(float), 10, &error)) {
      fprintf(stderr, "rank %d: %s\n", rank, error->message);
      return FALSE;
    }
    for (int r = 0; r < world; r++)
      for (gsize i = 0; i < n; i++)
        if (all[(gsize)r * n + i] != (float)r * 1e6f + (float)i) {
          fprintf(stderr, "rank %d: slot %d element %zu is %g\n", rank, r, i,
                  all[(gsize)r * n + i]);
          return FALSE;
        }
  }
  return TRUE;
}

static int values(CohortComm *c, int rank, int world)
{
  g_autoptr(GError) error = NULL;
  /* Small integers and halves: every sum is exact in float32, so equality is the test. */
  enum { N = 1000 };
  float f[N];
  for (int i = 0; i < N; i++)
    f[i] = (float)(rank + 1) + 0.5f * (float)i;
  CHECK(cohort_comm_all_reduce_f32(c, f, N, COHORT_REDUCE_SUM, 10, &error));
  float ranks_sum = (float)(world * (world + 1) / 2);
  for (int i = 0; i < N; i++)
    CHECK(f[i] == ranks_sum + (float)world * 0.5f * (float)i);
  for (int i = 0; i < N; i++)
    f[i] = (float)(rank + 1) + 0.5f * (float)i;
  CHECK(cohort_comm_all_reduce_f32(c, f, N, COHORT_REDUCE_AVG, 10, &error));
  for (int i = 0; i < N; i++)
    CHECK(f[i] == (ranks_sum + (float)world * 0.5f * (float)i) / (float)world);

  /* A buffer larger than Gloo's 1 MiB segment, so the ring runs several segments. */
  gsize big = 3 * 1024 * 1024 / 8 + 17;
  g_autofree double *d = g_new(double, big);
  for (gsize i = 0; i < big; i++)
    d[i] = (double)rank * 1e6 + (double)i;
  CHECK(cohort_comm_all_reduce_f64(c, d, big, COHORT_REDUCE_SUM, 20, &error));
  double rs = 1e6 * world * (world - 1) / 2.0;
  for (gsize i = 0; i < big; i++)
    CHECK(d[i] == rs + (double)world * (double)i);

  char buf[64];
  memset(buf, 0, sizeof buf);
  if (rank == world - 1)
    g_snprintf(buf, sizeof buf, "from the last rank, %d", rank);
  CHECK(cohort_comm_broadcast(c, buf, sizeof buf, world - 1, 10, &error));
  g_autofree char *want = g_strdup_printf("from the last rank, %d", world - 1);
  CHECK(strcmp(buf, want) == 0);

  guint32 mine[3] = {(guint32)rank, (guint32)rank * 10, 0xC0FFEE};
  g_autofree guint32 *all = g_new0(guint32, 3 * world);
  CHECK(cohort_comm_all_gather(c, mine, sizeof mine, all, 10, &error));
  for (int r = 0; r < world; r++)
    CHECK(all[3 * r] == (guint32)r && all[3 * r + 1] == (guint32)r * 10 &&
          all[3 * r + 2] == 0xC0FFEE);
  CHECK(gather_in_place(c, rank, world));
  CHECK(cohort_comm_barrier(c, 10, &error));
  if (error != NULL)
    fprintf(stderr, "rank %d: %s\n", rank, error->message);
  /* rank 0 hosts the store: let the others finish with it first */
  CHECK(cohort_comm_barrier(c, 10, &error));
  return 0;
}

/* The last rank leaves after the first barrier; the others must fail their all_reduce fast,
 * with a message naming it. */
static int peer_exits(CohortComm *c, int rank, int world)
{
  g_autoptr(GError) error = NULL;
  CHECK(cohort_comm_barrier(c, 10, &error));
  if (rank == world - 1)
    _exit(0);
  float f[16] = {0};
  gint64 t0 = g_get_monotonic_time();
  gboolean ok = cohort_comm_all_reduce_f32(c, f, 16, COHORT_REDUCE_SUM, 5, &error);
  gint64 took = g_get_monotonic_time() - t0;
  CHECK(!ok);
  fprintf(stderr, "rank %d got, after %.2f s: %s\n", rank, took / 1e6, error->message);
  CHECK(took < 6 * G_USEC_PER_SEC);
  CHECK(strstr(error->message, "all_reduce #2") != NULL);
  if (rank == 0) /* rank 0's store outlives the others' reads: it can always tell */
    CHECK(strstr(error->message, "rank 2") != NULL);
  /* the communicator stays broken */
  g_clear_error(&error);
  CHECK(!cohort_comm_barrier(c, 1, &error));
  CHECK(strstr(error->message, "broken") != NULL);
  return 0;
}

/* Rank 1 is alive but late: rank 0's barrier times out and names rank 1. */
static int peer_late(CohortComm *c, int rank, int world)
{
  (void)world;
  g_autoptr(GError) error = NULL;
  if (rank == 1) {
    g_usleep(3 * G_USEC_PER_SEC);
    return 0;
  }
  gint64 t0 = g_get_monotonic_time();
  gboolean ok = cohort_comm_barrier(c, 1.0, &error);
  gint64 took = g_get_monotonic_time() - t0;
  CHECK(!ok);
  fprintf(stderr, "rank %d got, after %.2f s: %s\n", rank, took / 1e6, error->message);
  CHECK(g_error_matches(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_TIMEOUT));
  CHECK(took >= 900000 && took < 3 * G_USEC_PER_SEC);
  CHECK(strstr(error->message, "barrier #1") != NULL);
  CHECK(strstr(error->message, "rank 1 did not arrive") != NULL);
  /* keep the store up until rank 1 is done with it */
  g_usleep(2500 * 1000);
  return 0;
}

static void test_gloo_2(void)
{
  run_gloo_ranks(2, "test-comm", values, 60);
}

static void test_gloo_3(void)
{
  run_gloo_ranks(3, "test-comm", values, 60);
}

static void test_peer_exits(void)
{
  run_gloo_ranks(3, "test-comm", peer_exits, 60);
}

static void test_peer_late(void)
{
  run_gloo_ranks(2, "test-comm", peer_late, 60);
}

/* ---- reduce-scatter and all-gather with a count per rank (ZeRO stages 2 and 3) ---- */

/* The count layouts ZeRO's shards produce: one value, pieces of any size, 64-value pieces with
 * a short or empty last one (a unit smaller than a piece: all on rank 0), and a total larger
 * than Gloo's 1 MiB segment. */
static void shard_counts(int world, guint k, gsize *counts)
{
  static const gsize totals[] = {1, 12, 64, 100, 1003, 300 * 1024 + 7};
  gsize total = totals[k], each = (total + (gsize)world - 1) / (gsize)world;
  /* 64-value pieces as the shard plan makes them (the last takes what is left) */
  each = k >= 2 ? (each + 63) / 64 * 64 : each;
  for (int r = 0; r < world; r++) {
    gsize lo = MIN(total, (gsize)r * each), hi = MIN(total, lo + each);
    counts[r] = hi - lo;
  }
}

/* Rank r's value at i: small integers and halves, so every sum is exact in float32. */
static float rs_value(int r, gsize i)
{
  return (float)((i * 7 + (gsize)r * 3) % 1000) * 0.5f - 100.0f;
}

static int scatter_gather(CohortComm *c, int rank, int world)
{
  g_autoptr(GError) error = NULL;
  for (guint k = 0; k < 6; k++) {
    gsize counts[8], total = 0, off = 0;
    shard_counts(world, k, counts);
    for (int r = 0; r < world; r++) {
      off += r < rank ? counts[r] : 0;
      total += counts[r];
    }
    g_autofree float *send = g_new(float, MAX(total, 1));
    g_autofree float *recv = g_new(float, MAX(counts[rank], 1));
    for (int op = COHORT_REDUCE_SUM; op <= COHORT_REDUCE_AVG; op++) {
      for (gsize i = 0; i < total; i++)
        send[i] = rs_value(rank, i);
      CHECK(cohort_comm_reduce_scatter_f32(c, send, recv, counts, op, 20, &error));
      for (gsize i = 0; i < counts[rank]; i++) {
        float want = 0;
        for (int r = 0; r < world; r++)
          want += rs_value(r, off + i);
        if (op == COHORT_REDUCE_AVG)
          want /= (float)world;
        if (recv[i] != want)
          fprintf(stderr, "rank %d, %zu values: [%zu] got %g want %g\n", rank, total, i,
                  (double)recv[i], (double)want);
        CHECK(recv[i] == want);
      }
    }
    /* all_gather_v: only this rank's piece is set before; poison elsewhere */
    gsize bytes[8];
    for (int r = 0; r < world; r++)
      bytes[r] = counts[r] * sizeof(float);
    for (gsize i = 0; i < total; i++)
      send[i] = -1.0f;
    for (gsize i = 0; i < counts[rank]; i++)
      send[off + i] = rs_value(rank, off + i);
    CHECK(cohort_comm_all_gather_v(c, send, bytes, 20, &error));
    gsize at = 0;
    for (int r = 0; r < world; r++)
      for (gsize i = 0; i < counts[r]; i++, at++)
        CHECK(send[at] == rs_value(r, at));
  }
  CHECK(cohort_comm_barrier(c, 20, &error));
  return 0;
}

/* Random data: every rank's piece is the all-reduce's of the same buffer, bit for bit, in
 * float32 (AVG) and bfloat16 (SUM), on 2 and 3 ranks; run 5 times, as a result that depends on
 * timing would show. */
static int scatter_like_all_reduce(CohortComm *c, int rank, int world)
{
  g_autoptr(GError) error = NULL;
  gsize counts[8], total = 0, off = 0;
  shard_counts(world, 5, counts);
  for (int r = 0; r < world; r++) {
    off += r < rank ? counts[r] : 0;
    total += counts[r];
  }
  g_autofree float *all = g_new(float, total);
  g_autofree float *send = g_new(float, total);
  g_autofree float *recv = g_new(float, counts[rank]);
  g_autofree guint16 *hall = g_new(guint16, total);
  g_autofree guint16 *hsend = g_new(guint16, total);
  g_autofree guint16 *hrecv = g_new(guint16, counts[rank]);
  for (int rep = 0; rep < 5; rep++) {
    for (gsize i = 0; i < total; i++) {
      all[i] = send[i] = value(rank, i + (gsize)rep);
      hall[i] = hsend[i] = ref_bf16(value(rank, i + (gsize)rep));
    }
    CHECK(cohort_comm_all_reduce_f32(c, all, total, COHORT_REDUCE_AVG, 20, &error));
    CHECK(cohort_comm_reduce_scatter_f32(c, send, recv, counts, COHORT_REDUCE_AVG, 20, &error));
    CHECK(cohort_comm_all_reduce_bf16(c, hall, total, COHORT_REDUCE_SUM, 20, &error));
    CHECK(cohort_comm_reduce_scatter_bf16(c, hsend, hrecv, counts, COHORT_REDUCE_SUM, 20, &error));
    CHECK(memcmp(recv, all + off, counts[rank] * sizeof(float)) == 0);
    CHECK(memcmp(hrecv, hall + off, counts[rank] * sizeof(guint16)) == 0);
  }
  CHECK(cohort_comm_barrier(c, 20, &error));
  return 0;
}

/* The last rank leaves: the others' reduce-scatter and all-gather fail fast, naming them. */
static int scatter_peer_exits(CohortComm *c, int rank, int world)
{
  g_autoptr(GError) error = NULL;
  CHECK(cohort_comm_barrier(c, 10, &error));
  if (rank == world - 1)
    _exit(0);
  float send[300], recv[100];
  gsize counts[3] = {100, 100, 100}, bytes[3] = {400, 400, 400};
  memset(send, 0, sizeof send);
  gint64 t0 = g_get_monotonic_time();
  gboolean ok = rank == 0 ? cohort_comm_reduce_scatter_f32(c, send, recv, counts, COHORT_REDUCE_SUM,
                                                           5, &error)
                          : cohort_comm_all_gather_v(c, send, bytes, 5, &error);
  gint64 took = g_get_monotonic_time() - t0;
  CHECK(!ok);
  fprintf(stderr, "rank %d got, after %.2f s: %s\n", rank, took / 1e6, error->message);
  CHECK(took < 6 * G_USEC_PER_SEC);
  CHECK(strstr(error->message, rank == 0 ? "reduce_scatter #2" : "all_gather_v #2") != NULL);
  return 0;
}

static void test_scatter_peer_exits(void)
{
  run_gloo_ranks(3, "test-comm", scatter_peer_exits, 60);
}

static void test_scatter_gather_local(void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortComm) c = cohort_comm_new_local();
  float send[3] = {1, 2, 3}, recv[3] = {0};
  gsize counts[1] = {3}, bytes[1] = {12};
  g_assert_true(
      cohort_comm_reduce_scatter_f32(c, send, recv, counts, COHORT_REDUCE_AVG, 0, &error));
  g_assert_cmpmem(recv, sizeof recv, send, sizeof send);
  g_assert_true(cohort_comm_all_gather_v(c, send, bytes, 0, &error));
  g_assert_false(cohort_comm_reduce_scatter_f32(c, send, recv, NULL, COHORT_REDUCE_SUM, 0, &error));
  g_assert_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_INVALID);
}

static void test_scatter_gather_2(void)
{
  run_gloo_ranks(2, "test-comm", scatter_gather, 60);
  run_gloo_ranks(2, "test-comm", scatter_like_all_reduce, 60);
}

static void test_scatter_gather_3(void)
{
  run_gloo_ranks(3, "test-comm", scatter_gather, 60);
  run_gloo_ranks(3, "test-comm", scatter_like_all_reduce, 60);
}

/* ---- the bfloat16 all-reduce ---- */

static void test_bf16_local(void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortComm) c = cohort_comm_new_local();
  guint16 h[3] = {0x3f80, 0xc0a1, 0x0001};
  for (int op = COHORT_REDUCE_SUM; op <= COHORT_REDUCE_AVG; op++) {
    g_assert_true(cohort_comm_all_reduce_bf16(c, h, 3, op, 0, &error));
    g_assert_no_error(error);
    g_assert_cmphex(h[0], ==, 0x3f80);
    g_assert_cmphex(h[1], ==, 0xc0a1);
    g_assert_cmphex(h[2], ==, 0x0001);
  }
  g_assert_false(cohort_comm_all_reduce_bf16(NULL, h, 3, COHORT_REDUCE_SUM, 0, &error));
  g_assert_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_INVALID);
}

/* The reference itself: ties go to even, and a value that is already bfloat16 stays. */
static void test_bf16_reference(void)
{
  g_assert_cmphex(ref_bf16(1.0f + 1.0f / 256), ==, 0x3f80);                /* tie, down to even */
  g_assert_cmphex(ref_bf16(1.0f + 3.0f / 256), ==, 0x3f82);                /* tie, up to even */
  g_assert_cmphex(ref_bf16(1.0f + 1.0f / 256 + 1.0f / 65536), ==, 0x3f81); /* above the tie */
  g_assert_cmphex(ref_bf16(-2.5f), ==, 0xc020);
  g_assert_cmphex(ref_bf16(0.0f), ==, 0x0000);
}

/* 2 ranks: bit-exact sums for each size, and AVG. */
static int bf16_exact_pairs(CohortComm *c, int rank, int world)
{
  (void)world;
  g_autoptr(GError) error = NULL;
  const gsize sizes[] = {1, 3, 1000003};
  for (guint s = 0; s < G_N_ELEMENTS(sizes); s++) {
    gsize n = sizes[s];
    g_autofree guint16 *h = g_new(guint16, n);
    g_autofree guint16 *want = g_new(guint16, n);
    gsize rounding_matters = 0;
    for (gsize i = 0; i < n; i++) {
      float a = value(0, i), b = value(1, i);
      h[i] = ref_bf16(value(rank, i));
      want[i] = ref_bf16(ref_round(a) + ref_round(b));
      rounding_matters += want[i] != ref_bf16(a + b);
    }
    CHECK(cohort_comm_all_reduce_bf16(c, h, n, COHORT_REDUCE_SUM, 20, &error));
    for (gsize i = 0; i < n; i++) {
      if (h[i] != want[i])
        fprintf(stderr, "rank %d, %zu elements: [%zu] got 0x%04x, want 0x%04x (%g + %g)\n", rank, n,
                i, h[i], want[i], (double)value(0, i), (double)value(1, i));
      CHECK(h[i] == want[i]);
    }
    if (n > 1000) {
      /* The data would catch a reduction that skipped rounding the inputs. */
      if (rank == 0)
        fprintf(stderr, "%zu of %zu sums differ from the once-rounded sum\n", rounding_matters, n);
      CHECK(rounding_matters > n / 20);
    }
    /* AVG: the bfloat16 sum halved, rounded again (exact here: halving a bfloat16 is). */
    for (gsize i = 0; i < n; i++)
      h[i] = ref_bf16(value(rank, i));
    CHECK(cohort_comm_all_reduce_bf16(c, h, n, COHORT_REDUCE_AVG, 20, &error));
    for (gsize i = 0; i < n; i++)
      CHECK(h[i] == ref_bf16(bf16_value(want[i]) / 2.0f));
  }
  CHECK(cohort_comm_all_reduce_bf16(c, NULL, 0, COHORT_REDUCE_SUM, 20, &error));
  CHECK(cohort_comm_barrier(c, 20, &error));
  return 0;
}

/* 3 ranks: Gloo picks the order of the sums; every element must be one of the three orders,
 * each pairwise sum rounded, and the same on every rank. */
static int bf16_three_ranks(CohortComm *c, int rank, int world)
{
  g_autoptr(GError) error = NULL;
  const gsize n = 300007;
  g_autofree guint16 *h = g_new(guint16, n);
  for (gsize i = 0; i < n; i++)
    h[i] = ref_bf16(value(rank, i));
  CHECK(cohort_comm_all_reduce_bf16(c, h, n, COHORT_REDUCE_SUM, 20, &error));
  gsize order_matters = 0;
  for (gsize i = 0; i < n; i++) {
    float x[3] = {ref_round(value(0, i)), ref_round(value(1, i)), ref_round(value(2, i))};
    guint16 w0 = ref_bf16(ref_round(x[0] + x[1]) + x[2]);
    guint16 w1 = ref_bf16(ref_round(x[1] + x[2]) + x[0]);
    guint16 w2 = ref_bf16(ref_round(x[2] + x[0]) + x[1]);
    order_matters += w0 != w1 || w1 != w2;
    CHECK(h[i] == w0 || h[i] == w1 || h[i] == w2);
  }
  CHECK(order_matters > 0);
  CHECK(same_on_all_ranks(c, h, n, world, &error));
  CHECK(cohort_comm_barrier(c, 20, &error));
  return 0;
}

/* The last rank leaves after a barrier: rank 0's bf16 all_reduce fails fast, naming it. */
static int bf16_peer_exits(CohortComm *c, int rank, int world)
{
  g_autoptr(GError) error = NULL;
  CHECK(cohort_comm_barrier(c, 10, &error));
  if (rank == world - 1)
    _exit(0);
  guint16 h[16] = {0};
  gint64 t0 = g_get_monotonic_time();
  gboolean ok = cohort_comm_all_reduce_bf16(c, h, 16, COHORT_REDUCE_SUM, 5, &error);
  gint64 took = g_get_monotonic_time() - t0;
  CHECK(!ok);
  fprintf(stderr, "rank %d got, after %.2f s: %s\n", rank, took / 1e6, error->message);
  CHECK(took < 6 * G_USEC_PER_SEC);
  CHECK(strstr(error->message, "all_reduce #2 (bfloat16, 16 elements)") != NULL);
  CHECK(strstr(error->message, "rank 1") != NULL);
  g_clear_error(&error);
  CHECK(!cohort_comm_all_reduce_bf16(c, h, 16, COHORT_REDUCE_SUM, 1, &error));
  CHECK(strstr(error->message, "broken") != NULL);
  return 0;
}

/* Rank 1 is alive but late: rank 0's bf16 all_reduce times out and names it. */
static int bf16_peer_late(CohortComm *c, int rank, int world)
{
  (void)world;
  g_autoptr(GError) error = NULL;
  if (rank == 1) {
    g_usleep(3 * G_USEC_PER_SEC);
    return 0;
  }
  guint16 h[16] = {0};
  gint64 t0 = g_get_monotonic_time();
  gboolean ok = cohort_comm_all_reduce_bf16(c, h, 16, COHORT_REDUCE_SUM, 1.0, &error);
  gint64 took = g_get_monotonic_time() - t0;
  CHECK(!ok);
  fprintf(stderr, "rank %d got, after %.2f s: %s\n", rank, took / 1e6, error->message);
  CHECK(g_error_matches(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_TIMEOUT));
  CHECK(took >= 900000 && took < 3 * G_USEC_PER_SEC);
  CHECK(strstr(error->message, "all_reduce #1 (bfloat16") != NULL);
  CHECK(strstr(error->message, "rank 1 did not arrive") != NULL);
  g_usleep(2500 * 1000); /* keep the store up until rank 1 is done with it */
  return 0;
}

static void test_bf16_gloo_exact(void)
{
  run_gloo_ranks(2, "test-comm-bf16", bf16_exact_pairs, 100);
}

static void test_bf16_gloo_three(void)
{
  run_gloo_ranks(3, "test-comm-bf16", bf16_three_ranks, 100);
}

static void test_bf16_peer_exits(void)
{
  run_gloo_ranks(2, "test-comm-bf16", bf16_peer_exits, 100);
}

static void test_bf16_peer_late(void)
{
  run_gloo_ranks(2, "test-comm-bf16", bf16_peer_late, 100);
}

/* What the window learns from the build information is what the distributed part has. */
static void test_build_info(void)
{
  const char *names[] = {"local", "gloo", "nccl", "mpi", ""};
  for (guint i = 0; i < G_N_ELEMENTS(names); i++)
    g_assert_cmpint(cohort_build_has_backend(names[i]), ==,
                    cohort_comm_backend_available(names[i]));
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/comm/build-info", test_build_info);
  g_test_add_func("/comm/local", test_local);
  g_test_add_func("/comm/gloo/2-ranks", test_gloo_2);
  g_test_add_func("/comm/gloo/3-ranks", test_gloo_3);
  g_test_add_func("/comm/gloo/peer-exits", test_peer_exits);
  g_test_add_func("/comm/gloo/peer-late", test_peer_late);
  g_test_add_func("/comm/scatter-gather/local", test_scatter_gather_local);
  g_test_add_func("/comm/scatter-gather/gloo/2-ranks", test_scatter_gather_2);
  g_test_add_func("/comm/scatter-gather/gloo/3-ranks", test_scatter_gather_3);
  g_test_add_func("/comm/scatter-gather/gloo/peer-exits", test_scatter_peer_exits);
  g_test_add_func("/comm/bf16/reference-rounding", test_bf16_reference);
  g_test_add_func("/comm/bf16/local", test_bf16_local);
  g_test_add_func("/comm/bf16/gloo/2-ranks-exact", test_bf16_gloo_exact);
  g_test_add_func("/comm/bf16/gloo/3-ranks", test_bf16_gloo_three);
  g_test_add_func("/comm/bf16/gloo/peer-exits", test_bf16_peer_exits);
  g_test_add_func("/comm/bf16/gloo/peer-late", test_bf16_peer_late);
  return g_test_run();
}

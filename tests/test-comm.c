/* Collectives: the local backend, and Gloo across 2 and 3 forked processes over loopback
 * (exact values, broadcast, all_gather, barrier), a peer that exits and a peer that is late
 * (the others get an error naming the collective and the rank, within the timeout). */
#include "engine/build-info.h"
#include "engine/distributed/comm.h"
#include "wait-ranks.h"

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
  g_assert_true(cohort_comm_barrier(c, 0, &error));
  g_assert_false(cohort_comm_broadcast(c, send, 4, 1, 0, &error));
  g_assert_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_INVALID);
}

typedef enum { SCENARIO_VALUES, SCENARIO_PEER_EXITS, SCENARIO_PEER_LATE } Scenario;

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "rank %d: check failed at line %d: %s\n", rank, __LINE__, #cond);            \
      return 1;                                                                                    \
    }                                                                                              \
  } while (0)

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
  CHECK(cohort_comm_barrier(c, 10, &error));
  if (error != NULL)
    fprintf(stderr, "rank %d: %s\n", rank, error->message);
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

static int child(int rank, int world, int port, Scenario s)
{
  g_autoptr(GError) error = NULL;
  CohortDistEnv env = {.rank = rank,
                       .local_rank = rank,
                       .world_size = world,
                       .local_world_size = world,
                       .master_addr = (char *)"127.0.0.1",
                       .master_port = port,
                       .run_id = (char *)"test",
                       .source = "torchrun"};
  g_autofree char *token = cohort_dist_job_token(&env);
  g_autoptr(CohortStore) store = cohort_store_open(&env, token, 20, &error);
  CHECK(store != NULL);
  g_autoptr(CohortComm) c = cohort_comm_new_gloo(store, &env, 20, &error);
  if (c == NULL)
    fprintf(stderr, "rank %d: %s\n", rank, error->message);
  CHECK(c != NULL);
  CHECK(cohort_comm_world_size(c) == world && cohort_comm_rank(c) == rank);
  int rc = s == SCENARIO_VALUES       ? values(c, rank, world)
           : s == SCENARIO_PEER_EXITS ? peer_exits(c, rank, world)
                                      : peer_late(c, rank, world);
  /* rank 0 hosts the store: let the others finish with it first */
  if (s == SCENARIO_VALUES) {
    g_autoptr(GError) e2 = NULL;
    CHECK(cohort_comm_barrier(c, 10, &e2));
  }
  return rc;
}

/* Forks `world` ranks and waits (bounded) for them; every rank must exit 0. */
static void run_ranks(int world, Scenario s)
{
  if (!cohort_comm_backend_available("gloo")) {
    g_test_skip("built without Gloo");
    return;
  }
  int port = cohort_store_find_free_port(0);
  g_assert_cmpint(port, >, 0);
  pid_t pids[8];
  for (int r = 0; r < world; r++) {
    pids[r] = fork();
    g_assert_cmpint(pids[r], >=, 0);
    if (pids[r] == 0)
      _exit(child(r, world, port, s));
  }
  tu_wait_ranks(pids, world, 60);
}

static void test_gloo_2(void)
{
  run_ranks(2, SCENARIO_VALUES);
}

static void test_gloo_3(void)
{
  run_ranks(3, SCENARIO_VALUES);
}

static void test_peer_exits(void)
{
  run_ranks(3, SCENARIO_PEER_EXITS);
}

static void test_peer_late(void)
{
  run_ranks(2, SCENARIO_PEER_LATE);
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
  return g_test_run();
}

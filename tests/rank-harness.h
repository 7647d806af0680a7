/* Forked ranks for the collective tests (header-only, tests only): a CHECK that fails the
 * rank with a message, the environment of rank r of a loopback job, and forking `world` ranks
 * that each open the store and a Gloo communicator and run a function, with a bounded wait. */
#pragma once

#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "engine/distributed/comm.h"
#include "wait-ranks.h"

/* In a rank function (which has `rank` in scope and returns an exit status). */
#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "rank %d: check failed at line %d: %s\n", rank, __LINE__, #cond);            \
      return 1;                                                                                    \
    }                                                                                              \
  } while (0)

/* Rank `rank` of a `world`-rank job on loopback whose store listens on `port`, as torchrun
 * would describe it. */
static inline CohortDistEnv rank_env(int rank, int world, int port, const char *run_id)
{
  CohortDistEnv env = {.rank = rank,
                       .local_rank = rank,
                       .world_size = world,
                       .local_world_size = world,
                       .master_addr = (char *)"127.0.0.1",
                       .master_port = port,
                       .run_id = (char *)run_id,
                       .source = "torchrun"};
  return env;
}

typedef int (*RankFunc)(CohortComm *c, int rank, int world);

/* One forked rank: the store, a Gloo communicator, then fn. Dies with its parent. */
static inline int rank_child(int rank, int world, int port, const char *run_id, RankFunc fn)
{
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  g_autoptr(GError) error = NULL;
  CohortDistEnv env = rank_env(rank, world, port, run_id);
  g_autofree char *token = cohort_dist_job_token(&env);
  g_autoptr(CohortStore) store = cohort_store_open(&env, token, 20, &error);
  CHECK(store != NULL);
  g_autoptr(CohortComm) c = cohort_comm_new_gloo(store, &env, 20, &error);
  if (c == NULL)
    fprintf(stderr, "rank %d: %s\n", rank, error->message);
  CHECK(c != NULL);
  CHECK(cohort_comm_world_size(c) == world && cohort_comm_rank(c) == rank);
  return fn(c, rank, world);
}

/* Forks `world` ranks running fn over Gloo and waits at most timeout_s; every rank must exit
 * 0. Skips the test in builds without Gloo. */
static inline void run_gloo_ranks(int world, const char *run_id, RankFunc fn, int timeout_s)
{
  if (!cohort_comm_backend_available("gloo")) {
    g_test_skip("built without Gloo");
    return;
  }
  int port = cohort_store_find_free_port(0);
  g_assert_cmpint(port, >, 0);
  pid_t pids[16];
  g_assert_cmpint(world, <=, 16);
  for (int r = 0; r < world; r++) {
    pids[r] = fork();
    g_assert_cmpint(pids[r], >=, 0);
    if (pids[r] == 0)
      _exit(rank_child(r, world, port, run_id, fn));
  }
  tu_wait_ranks(pids, world, timeout_s);
}

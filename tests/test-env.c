/* Rank discovery: a table of environments and what each must give, or which error. */
#include "engine/distributed/env.h"

#include <string.h>

typedef struct {
  const char *name;
  const char *env; /* space-separated KEY=VALUE */
  /* expected, when ok */
  const char *source;
  int rank, local_rank, world, local_world, group_rank;
  const char *addr;
  int port, restarts;
  /* expected, when an error: words the message must contain */
  const char *error_words;
} Case;

static const Case cases[] = {
    {"nothing", "", "single", 0, 0, 1, 1, 0, "127.0.0.1", 0, 0, NULL},
    {"torchrun",
     "RANK=5 LOCAL_RANK=1 WORLD_SIZE=8 LOCAL_WORLD_SIZE=4 GROUP_RANK=1 MASTER_ADDR=node01 "
     "MASTER_PORT=29500 TORCHELASTIC_RESTART_COUNT=2",
     "torchrun", 5, 1, 8, 4, 1, "node01", 29500, 2, NULL},
    {"env:// minimal", "RANK=1 WORLD_SIZE=2 MASTER_ADDR=::1 MASTER_PORT=1234", "torchrun", 1, 1, 2,
     2, 0, "::1", 1234, 0, NULL},
    {"torchrun single", "RANK=0 WORLD_SIZE=1", "torchrun", 0, 0, 1, 1, 0, "127.0.0.1", 0, 0, NULL},
    {"slurm brackets",
     "SLURM_PROCID=6 SLURM_NTASKS=8 SLURM_LOCALID=2 SLURM_NODEID=1 SLURM_TASKS_PER_NODE=4(x2) "
     "SLURM_NODELIST=node[07-08],gpu5 SLURM_JOB_ID=123456",
     "slurm", 6, 2, 8, 4, 1, "node07", 20000 + 123456 % 20000, 0, NULL},
    {"slurm master env wins",
     "SLURM_PROCID=0 SLURM_NTASKS=2 SLURM_LOCALID=0 SLURM_NODEID=0 SLURM_NTASKS_PER_NODE=2 "
     "SLURM_NODELIST=a1 SLURM_JOB_ID=7 MASTER_ADDR=10.0.0.1 MASTER_PORT=4000",
     "slurm", 0, 0, 2, 2, 0, "10.0.0.1", 4000, 0, NULL},
    {"slurm uneven nodes",
     "SLURM_PROCID=4 SLURM_NTASKS=5 SLURM_LOCALID=0 SLURM_NODEID=2 SLURM_TASKS_PER_NODE=2(x2),1 "
     "SLURM_JOB_NODELIST=n[1-3] SLURM_JOB_ID=20001 SLURM_RESTART_COUNT=1",
     "slurm", 4, 0, 5, 1, 2, "n1", 20001, 1, NULL},
    {"mpi one node",
     "OMPI_COMM_WORLD_RANK=2 OMPI_COMM_WORLD_SIZE=3 OMPI_COMM_WORLD_LOCAL_RANK=2 "
     "OMPI_COMM_WORLD_LOCAL_SIZE=3 OMPI_MCA_ess_base_jobid=41",
     "mpi", 2, 2, 3, 3, 0, "127.0.0.1", 20041, 0, NULL},
    {"mpi two nodes",
     "OMPI_COMM_WORLD_RANK=3 OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_LOCAL_RANK=1 "
     "OMPI_COMM_WORLD_LOCAL_SIZE=2 MASTER_ADDR=head MASTER_PORT=29400",
     "mpi", 3, 1, 4, 2, 1, "head", 29400, 0, NULL},
    {"torchrun wins over slurm", "RANK=0 WORLD_SIZE=1 SLURM_PROCID=3 SLURM_NTASKS=4", "torchrun", 0,
     0, 1, 1, 0, "127.0.0.1", 0, 0, NULL},
    /* inconsistencies */
    {"rank >= world", "RANK=2 WORLD_SIZE=2 MASTER_ADDR=h MASTER_PORT=1", NULL, 0, 0, 0, 0, 0, NULL,
     0, 0, "RANK=2|WORLD_SIZE=2"},
    {"rank without world", "RANK=0", NULL, 0, 0, 0, 0, 0, NULL, 0, 0, "WORLD_SIZE"},
    {"world without rank", "WORLD_SIZE=2", NULL, 0, 0, 0, 0, 0, NULL, 0, 0, "RANK"},
    {"not a number", "RANK=one WORLD_SIZE=2", NULL, 0, 0, 0, 0, 0, NULL, 0, 0, "RANK=\"one\""},
    {"negative", "RANK=-1 WORLD_SIZE=2", NULL, 0, 0, 0, 0, 0, NULL, 0, 0, "RANK"},
    {"zero world", "RANK=0 WORLD_SIZE=0", NULL, 0, 0, 0, 0, 0, NULL, 0, 0, "WORLD_SIZE=0"},
    {"no master addr", "RANK=0 WORLD_SIZE=2 MASTER_PORT=29500", NULL, 0, 0, 0, 0, 0, NULL, 0, 0,
     "MASTER_ADDR"},
    {"no master port", "RANK=0 WORLD_SIZE=2 MASTER_ADDR=h", NULL, 0, 0, 0, 0, 0, NULL, 0, 0,
     "MASTER_PORT"},
    {"port out of range", "RANK=0 WORLD_SIZE=2 MASTER_ADDR=h MASTER_PORT=70000", NULL, 0, 0, 0, 0,
     0, NULL, 0, 0, "MASTER_PORT=70000|65535"},
    {"local rank too big",
     "RANK=1 WORLD_SIZE=4 LOCAL_RANK=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=h MASTER_PORT=5", NULL, 0, 0,
     0, 0, 0, NULL, 0, 0, "LOCAL_RANK=2|LOCAL_WORLD_SIZE=2"},
    {"local world too big",
     "RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 LOCAL_WORLD_SIZE=4 MASTER_ADDR=h MASTER_PORT=5", NULL, 0, 0,
     0, 0, 0, NULL, 0, 0, "LOCAL_WORLD_SIZE=4"},
    {"slurm bad brackets",
     "SLURM_PROCID=0 SLURM_NTASKS=2 SLURM_NTASKS_PER_NODE=2 SLURM_NODELIST=node[01-03 "
     "SLURM_JOB_ID=1",
     NULL, 0, 0, 0, 0, 0, NULL, 0, 0, "SLURM_NODELIST|unbalanced"},
    {"slurm reversed range",
     "SLURM_PROCID=0 SLURM_NTASKS=2 SLURM_NTASKS_PER_NODE=2 SLURM_NODELIST=node[05-03] "
     "SLURM_JOB_ID=1",
     NULL, 0, 0, 0, 0, 0, NULL, 0, 0, "reversed"},
    {"slurm no master", "SLURM_PROCID=0 SLURM_NTASKS=2 SLURM_NTASKS_PER_NODE=2 SLURM_JOB_ID=1",
     NULL, 0, 0, 0, 0, 0, NULL, 0, 0, "master address|SLURM_NODELIST"},
    {"slurm procid too big",
     "SLURM_PROCID=4 SLURM_NTASKS=4 SLURM_NTASKS_PER_NODE=4 SLURM_NODELIST=a SLURM_JOB_ID=1", NULL,
     0, 0, 0, 0, 0, NULL, 0, 0, "SLURM_PROCID=4"},
    {"slurm uneven without list",
     "SLURM_PROCID=0 SLURM_NTASKS=3 SLURM_NNODES=2 SLURM_NODELIST=a,b SLURM_JOB_ID=1", NULL, 0, 0,
     0, 0, 0, NULL, 0, 0, "SLURM_NNODES=2"},
    {"slurm tasks list too short",
     "SLURM_PROCID=0 SLURM_NTASKS=2 SLURM_NODEID=3 SLURM_TASKS_PER_NODE=1(x2) SLURM_NODELIST=a "
     "SLURM_JOB_ID=1",
     NULL, 0, 0, 0, 0, 0, NULL, 0, 0, "SLURM_TASKS_PER_NODE"},
    {"mpi multi-node without master",
     "OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_LOCAL_RANK=0 "
     "OMPI_COMM_WORLD_LOCAL_SIZE=2 OMPI_MCA_ess_base_jobid=5",
     NULL, 0, 0, 0, 0, 0, NULL, 0, 0, "MASTER_ADDR"},
    {"mpi without port",
     "OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK=0 "
     "OMPI_COMM_WORLD_LOCAL_SIZE=2",
     NULL, 0, 0, 0, 0, 0, NULL, 0, 0, "MASTER_PORT"},
};

static void test_table(void)
{
  for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
    const Case *c = &cases[i];
    g_auto(GStrv) envp = g_strsplit(c->env, " ", -1);
    if (c->env[0] == '\0') {
      g_strfreev(envp);
      envp = g_new0(char *, 1);
    }
    g_autoptr(GError) error = NULL;
    g_autoptr(CohortDistEnv) env = cohort_dist_env_from_environ((const char *const *)envp, &error);
    g_test_message("case %s: %s", c->name, error ? error->message : "ok");
    if (c->error_words == NULL) {
      g_assert_no_error(error);
      g_assert_nonnull(env);
      g_assert_cmpstr(env->source, ==, c->source);
      g_assert_cmpint(env->rank, ==, c->rank);
      g_assert_cmpint(env->local_rank, ==, c->local_rank);
      g_assert_cmpint(env->world_size, ==, c->world);
      g_assert_cmpint(env->local_world_size, ==, c->local_world);
      g_assert_cmpint(env->group_rank, ==, c->group_rank);
      g_assert_cmpstr(env->master_addr, ==, c->addr);
      g_assert_cmpint(env->master_port, ==, c->port);
      g_assert_cmpint(env->restart_count, ==, c->restarts);
    } else {
      g_assert_null(env);
      g_assert_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_ENV);
      g_auto(GStrv) words = g_strsplit(c->error_words, "|", -1);
      for (int w = 0; words[w] != NULL; w++)
        if (strstr(error->message, words[w]) == NULL)
          g_error("case %s: \"%s\" lacks \"%s\"", c->name, error->message, words[w]);
    }
  }
}

static void test_nodelist(void)
{
  g_autoptr(GError) error = NULL;
  g_auto(GStrv) a = cohort_dist_expand_nodelist("node[01-03,07],gpu5", "X", &error);
  g_assert_no_error(error);
  const char *want_a[] = {"node01", "node02", "node03", "node07", "gpu5", NULL};
  g_assert_true(g_strv_equal((const char *const *)a, want_a));
  g_auto(GStrv) b = cohort_dist_expand_nodelist("r[1-2]-n[8-9]", "X", &error);
  g_assert_no_error(error);
  const char *want_b[] = {"r1-n8", "r1-n9", "r2-n8", "r2-n9", NULL};
  g_assert_true(g_strv_equal((const char *const *)b, want_b));
  g_auto(GStrv) c = cohort_dist_expand_nodelist("x[9-11]", "X", &error);
  g_assert_no_error(error);
  const char *want_c[] = {"x9", "x10", "x11", NULL};
  g_assert_true(g_strv_equal((const char *const *)c, want_c));
  g_assert_null(cohort_dist_expand_nodelist("a,,b", "X", &error));
  g_assert_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_ENV);
  g_clear_error(&error);
  g_assert_null(cohort_dist_expand_nodelist("a[x-2]", "X", &error));
  g_assert_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_ENV);
  g_clear_error(&error);
  g_assert_null(cohort_dist_expand_nodelist("", "X", &error));
  g_assert_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_ENV);
}

static void test_tasks_per_node(void)
{
  g_autoptr(GError) error = NULL;
  g_assert_cmpint(cohort_dist_tasks_on_node("4(x2),3", 0, &error), ==, 4);
  g_assert_cmpint(cohort_dist_tasks_on_node("4(x2),3", 1, &error), ==, 4);
  g_assert_cmpint(cohort_dist_tasks_on_node("4(x2),3", 2, &error), ==, 3);
  g_assert_no_error(error);
  g_assert_cmpint(cohort_dist_tasks_on_node("4(x2),3", 3, &error), ==, -1);
  g_assert_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_ENV);
  g_clear_error(&error);
  g_assert_cmpint(cohort_dist_tasks_on_node("4(2)", 0, &error), ==, -1);
  g_assert_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_ENV);
}

/* The token rank `env_text` derives (space-separated KEY=VALUE), and its secret source. */
static char *token_of(const char *env_text, const char **secret_source, GError **error)
{
  g_auto(GStrv) envp = g_strsplit(env_text, " ", -1);
  g_autoptr(CohortDistEnv) env = cohort_dist_env_from_environ((const char *const *)envp, error);
  if (env == NULL)
    return NULL;
  *secret_source = env->secret_source;
  return cohort_dist_job_token(env);
}

/* The job secret: COHORT_JOB_TOKEN when given (checked, and never echoed in an error);
 * Open MPI's per-job random key; else job ids. Every rank of a job derives the same token,
 * and other jobs another. */
static void test_job_secret(void)
{
  g_autoptr(GError) error = NULL;
  const char *src = NULL;
  const char *tr0 = "RANK=0 WORLD_SIZE=2 MASTER_ADDR=h MASTER_PORT=5 TORCHELASTIC_RUN_ID=job";
  const char *tr1 = "RANK=1 WORLD_SIZE=2 MASTER_ADDR=h MASTER_PORT=5 TORCHELASTIC_RUN_ID=job";
  g_autofree char *plain0 = token_of(tr0, &src, &error);
  g_assert_no_error(error);
  g_assert_null(src); /* derived from the run id: guessable, and rank 0 will say so */
  g_autofree char *plain1 = token_of(tr1, &src, &error);
  g_assert_cmpstr(plain0, ==, plain1);

  g_autofree char *with0 = g_strdup_printf("%s COHORT_JOB_TOKEN=5f0c2a9d81e34b6a90d1", tr0);
  g_autofree char *with1 = g_strdup_printf("%s COHORT_JOB_TOKEN=5f0c2a9d81e34b6a90d1", tr1);
  g_autofree char *other = g_strdup_printf("%s COHORT_JOB_TOKEN=77777777777777777777", tr1);
  g_autofree char *s0 = token_of(with0, &src, &error);
  g_assert_cmpstr(src, ==, "COHORT_JOB_TOKEN");
  g_autofree char *s1 = token_of(with1, &src, &error);
  g_autofree char *s2 = token_of(other, &src, &error);
  g_assert_no_error(error);
  g_assert_cmpstr(s0, ==, s1);
  g_assert_cmpstr(s0, !=, s2);
  g_assert_cmpstr(s0, !=, plain0);

  g_autofree char *weak = g_strdup_printf("%s COHORT_JOB_TOKEN=hunter2", tr0);
  g_assert_null(token_of(weak, &src, &error));
  g_assert_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_ENV);
  g_assert_nonnull(strstr(error->message, "COHORT_JOB_TOKEN"));
  g_assert_nonnull(strstr(error->message, "16"));
  g_assert_null(strstr(error->message, "hunter2"));
  g_clear_error(&error);

  const char *mpi = "OMPI_COMM_WORLD_RANK=%d OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK=%d "
                    "OMPI_COMM_WORLD_LOCAL_SIZE=2 OMPI_MCA_ess_base_jobid=41 "
                    "OMPI_MCA_orte_precondition_transports=%s";
  g_autofree char *m0 = g_strdup_printf(mpi, 0, 0, "7ca00410092c1db3-7c4c2c1201ed36f9");
  g_autofree char *m1 = g_strdup_printf(mpi, 1, 1, "7ca00410092c1db3-7c4c2c1201ed36f9");
  g_autofree char *m2 = g_strdup_printf(mpi, 1, 1, "0000000000000001-7c4c2c1201ed36f9");
  g_autofree char *t0 = token_of(m0, &src, &error);
  g_assert_cmpstr(src, ==, "Open MPI's job key");
  g_autofree char *t1 = token_of(m1, &src, &error);
  g_autofree char *t2 = token_of(m2, &src, &error);
  g_assert_no_error(error);
  g_assert_cmpstr(t0, ==, t1);
  g_assert_cmpstr(t0, !=, t2);

  const char *slurm = "SLURM_PROCID=%d SLURM_NTASKS=2 SLURM_NTASKS_PER_NODE=2 SLURM_NODELIST=a "
                      "SLURM_JOB_ID=%d SLURM_JOB_UID=1000";
  g_autofree char *j0 = g_strdup_printf(slurm, 0, 7);
  g_autofree char *j1 = g_strdup_printf(slurm, 1, 7);
  g_autofree char *k1 = g_strdup_printf(slurm, 1, 8);
  g_autofree char *u0 = token_of(j0, &src, &error);
  g_assert_null(src);
  g_autofree char *u1 = token_of(j1, &src, &error);
  g_autofree char *v1 = token_of(k1, &src, &error);
  g_assert_no_error(error);
  g_assert_cmpstr(u0, ==, u1);
  g_assert_cmpstr(u0, !=, v1);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/env/table", test_table);
  g_test_add_func("/env/nodelist", test_nodelist);
  g_test_add_func("/env/tasks-per-node", test_tasks_per_node);
  g_test_add_func("/env/job-secret", test_job_secret);
  return g_test_run();
}

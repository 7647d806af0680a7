/* The launch plan (engine/launch/launch-plan.h) and the printed commands
 * (engine/launch/launch-commands.h): processes per node by the one rule, who starts them, what is
 * refused and why, global batch and scaled learning rate, the command lines, and what
 * --print-commands prints for each launcher (the runs of the printed commands are in
 * test-commands-run). */
#include <string.h>

#include "engine/launch/build-info.h"
#include "engine/launch/launch-commands.h"
#include "engine/launch/launch-plan.h"
#include "engine/base/secret.h"

static CohortConfig *config(const char *const *sets)
{
  CohortConfig *cfg = cohort_config_new();
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_config_apply_assignments(cfg, sets, "test", &error));
  g_assert_no_error(error);
  return cfg;
}

static CohortLaunchPlan *plan_of(const char *const *sets, int gpus, GError **error)
{
  g_autoptr(CohortConfig) cfg = config(sets);
  CohortMachine m = {.gpus = gpus};
  return cohort_launch_plan_new(cfg, "run.json", &m, error);
}

static void test_derived(void)
{
  g_autoptr(CohortConfig) cfg =
      config((const char *[]){"learning_rate=0.001", "gradient_accumulation_steps=4", NULL});
  g_assert_cmpint(cohort_launch_global_batch(cfg, 8), ==, 16 * 4 * 8);
  g_assert_cmpint(cohort_launch_global_batch(cfg, 0), ==, 16 * 4);
  g_assert_cmpfloat(cohort_launch_scaled_lr(cfg, 4), ==, 0.001);
  cfg->lr_scaling = COHORT_LR_SCALING_LINEAR;
  g_assert_cmpfloat(cohort_launch_scaled_lr(cfg, 4), ==, 0.004);
  cfg->lr_scaling = COHORT_LR_SCALING_SQRT;
  g_assert_cmpfloat_with_epsilon(cohort_launch_scaled_lr(cfg, 4), 0.002, 1e-15);
  cfg->batch_size = 65536;
  cfg->gradient_accumulation_steps = 4096;
  g_assert_cmpint(cohort_launch_global_batch(cfg, 65536), ==, G_MAXINT);
}

/* Processes per node: nproc_per_node, else device_indexes, else world_size / num_nodes, else 1
 * on the CPU, else one per GPU (at least 1); 1 with multi-GPU off. */
static void test_local_processes(void)
{
  struct {
    const char *sets[6];
    int gpus;
    int local, world;
    CohortLaunchKind kind;
  } rows[] = {
      {{"nproc_per_node=4", NULL}, 8, 1, 1, COHORT_LAUNCH_SINGLE},
      {{"enable_multi_gpu=true", "nproc_per_node=3", NULL}, 0, 3, 3, COHORT_LAUNCH_COHORT_RUN},
      {{"enable_multi_gpu=true", "device_indexes=0,2", NULL}, 4, 2, 2, COHORT_LAUNCH_COHORT_RUN},
      {{"enable_multi_gpu=true", "world_size=6", "num_nodes=2", "master_addr=10.0.0.1", NULL},
       0,
       3,
       6,
       COHORT_LAUNCH_COHORT_RUN},
      {{"enable_multi_gpu=true", "device=cpu", NULL}, 4, 1, 1, COHORT_LAUNCH_SINGLE},
      {{"enable_multi_gpu=true", "use_torchrun=false", NULL}, 3, 3, 3, COHORT_LAUNCH_SPAWN},
      {{"enable_multi_gpu=true", NULL}, 0, 1, 1, COHORT_LAUNCH_SINGLE},
      {{"enable_multi_gpu=true", NULL}, -1, 0, 0, COHORT_LAUNCH_COHORT_RUN},
      {{"enable_multi_gpu=true", "use_torchrun=false", "nproc_per_node=2", NULL},
       0,
       2,
       2,
       COHORT_LAUNCH_SPAWN},
  };
  for (guint i = 0; i < G_N_ELEMENTS(rows); i++) {
    g_autoptr(GError) error = NULL;
    g_autoptr(CohortLaunchPlan) p = plan_of(rows[i].sets, rows[i].gpus, &error);
    g_assert_no_error(error);
    g_autofree char *d = cohort_launch_plan_describe(p);
    g_test_message("row %u: %s", i, d);
    g_assert_cmpint(p->local_processes, ==, rows[i].local);
    g_assert_cmpint(p->world_size, ==, rows[i].world);
    g_assert_cmpint(p->kind, ==, rows[i].kind);
  }
  g_assert_cmpint(cohort_launch_auto_processes(0), ==, 1);
  g_assert_cmpint(cohort_launch_auto_processes(5), ==, 5);
}

/* Combinations no launcher can run are refused with the keys named. */
static void test_refusals(void)
{
  struct {
    const char *sets[7];
    int gpus;
    const char *words; /* '|'-separated, all in the message */
  } rows[] = {
      {{"enable_multi_gpu=true", "use_torchrun=false", "nproc_per_node=2", "num_nodes=2",
        "master_addr=10.0.0.1", NULL},
       0,
       "run.json: key \"use_torchrun\"|spawn mode|\"num_nodes\" is 2"},
      {{"num_nodes=2", NULL}, 0, "\"num_nodes\": 2 needs \"enable_multi_gpu\""},
      {{"enable_multi_gpu=true", "nproc_per_node=3", "device_indexes=0,1", NULL},
       4,
       "\"nproc_per_node\": 3|\"device_indexes\" lists 2 GPUs"},
      {{"enable_multi_gpu=true", "nproc_per_node=2", "world_size=6", NULL},
       0,
       "\"world_size\": 6|1 × 2"},
      {{"enable_multi_gpu=true", "world_size=5", "num_nodes=2", NULL},
       0,
       "\"world_size\": 5 is not a multiple of \"num_nodes\": 2"},
      {{"enable_multi_gpu=true", "nproc_per_node=2", "distributed_backend=nccl", "device=cpu",
        NULL},
       0,
       cohort_build_has_backend("nccl") ? "\"nccl\" needs GPU ranks|\"cpu\""
                                        : "\"nccl\" is not supported: this build has no NCCL"},
  };
  for (guint i = 0; i < G_N_ELEMENTS(rows); i++) {
    g_autoptr(GError) error = NULL;
    g_autoptr(CohortLaunchPlan) p = plan_of(rows[i].sets, rows[i].gpus, &error);
    g_assert_null(p);
    g_assert_nonnull(error);
    g_test_message("row %u: %s", i, error->message);
    g_auto(GStrv) words = g_strsplit(rows[i].words, "|", -1);
    for (guint w = 0; words[w]; w++)
      g_assert_nonnull(strstr(error->message, words[w]));
  }
  /* NCCL and the machine's GPUs (only in builds with NCCL; elsewhere the build refuses). */
  const char *nccl[] = {"enable_multi_gpu=true", "nproc_per_node=3", "distributed_backend=nccl",
                        NULL};
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortLaunchPlan) none = plan_of(nccl, 0, &error);
  g_assert_null(none);
  g_test_message("nccl, no GPU: %s", error->message);
  g_assert_nonnull(strstr(error->message,
                          cohort_build_has_backend("nccl") ? "no NVIDIA GPU" : "no NCCL backend"));
  g_clear_error(&error);
  g_autoptr(CohortLaunchPlan) two = plan_of(nccl, 2, &error);
  g_assert_null(two);
  g_assert_nonnull(strstr(error->message, cohort_build_has_backend("nccl") ? "this machine has 2"
                                                                           : "no NCCL backend"));
  g_clear_error(&error);
  /* A machine not known here (printed commands): the nodes check their own GPUs and build. */
  g_autoptr(CohortLaunchPlan) unknown = plan_of(nccl, -1, &error);
  g_assert_no_error(error);
  g_assert_cmpint(unknown->world_size, ==, 3);
}

/* Under a launcher the process is one rank of its job, whatever the config says; a world_size
 * in the config must match. */
static void test_external(void)
{
  g_autoptr(CohortConfig) cfg = config(
      (const char *[]){"enable_multi_gpu=true", "use_torchrun=false", "lr_scaling=linear", NULL});
  CohortMachine m = {
      .gpus = 0, .launched_by = "torchrun", .launched_world_size = 4, .launched_local_size = 2};
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortLaunchPlan) p = cohort_launch_plan_new(cfg, "run.json", &m, &error);
  g_assert_no_error(error);
  g_assert_cmpint(p->kind, ==, COHORT_LAUNCH_EXTERNAL);
  g_assert_cmpint(p->world_size, ==, 4);
  g_assert_cmpint(p->num_nodes, ==, 2);
  g_assert_cmpint(p->global_batch, ==, 16 * 4);
  g_assert_cmpfloat(p->scaled_lr, ==, cfg->learning_rate * 4);
  cfg->world_size = 8;
  g_autoptr(CohortLaunchPlan) bad = cohort_launch_plan_new(cfg, "run.json", &m, &error);
  g_assert_null(bad);
  g_assert_nonnull(strstr(error->message, "\"world_size\": 8, but torchrun started 4"));
}

static char *argv_text(const CohortLaunchPlan *p, int node)
{
  const char *targs[] = {"--config", "/w/run.json", NULL};
  CohortLaunchArgs a = {.train_program = "/b/cohort-train",
                        .run_program = "/b/cohort-run",
                        .train_args = targs,
                        .progress_fd = 3};
  g_auto(GStrv) argv = cohort_launch_plan_argv(p, node, &a);
  return g_strjoinv(" ", argv);
}

static void test_argv(void)
{
  g_autoptr(CohortLaunchPlan) single = plan_of((const char *[]){NULL}, 0, NULL);
  g_autofree char *s = argv_text(single, -1);
  g_assert_cmpstr(s, ==, "/b/cohort-train --config /w/run.json --progress-fd 3");
  g_autoptr(CohortLaunchPlan) spawn = plan_of(
      (const char *[]){"enable_multi_gpu=true", "use_torchrun=false", "nproc_per_node=4", NULL}, 0,
      NULL);
  g_autofree char *sp = argv_text(spawn, -1);
  g_assert_cmpstr(sp, ==, "/b/cohort-train --config /w/run.json --progress-fd 3 --nproc 4");
  g_autoptr(CohortLaunchPlan) run =
      plan_of((const char *[]){"enable_multi_gpu=true", "nproc_per_node=2", "max_restarts=1", NULL},
              0, NULL);
  g_autofree char *r = argv_text(run, -1);
  g_assert_cmpstr(r, ==,
                  "/b/cohort-run --standalone --nproc-per-node 2 --max-restarts 1 --progress-fd 3 "
                  "/b/cohort-train --config /w/run.json");
  g_autoptr(CohortLaunchPlan) nodes =
      plan_of((const char *[]){"enable_multi_gpu=true", "nproc_per_node=2", "num_nodes=3",
                               "node_rank=2", "master_addr=10.1.2.3", "master_port=29600", NULL},
              0, NULL);
  g_autofree char *own = argv_text(nodes, -1);
  g_autofree char *first = argv_text(nodes, 0);
  g_assert_cmpstr(own, ==,
                  "/b/cohort-run --nnodes 3 --nproc-per-node 2 --node-rank 2 --master-addr "
                  "10.1.2.3 --master-port 29600 --progress-fd 3 /b/cohort-train --config "
                  "/w/run.json");
  g_assert_nonnull(strstr(first, "--node-rank 0 "));
  g_autoptr(CohortLaunchPlan) autos =
      plan_of((const char *[]){"enable_multi_gpu=true", NULL}, -1, NULL);
  g_autofree char *au = argv_text(autos, -1);
  g_assert_nonnull(strstr(au, "--nproc-per-node auto "));
}

static void test_nproc(void)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *fake = g_test_build_filename(G_TEST_DIST, "ui", "fake-nvidia-smi.sh", NULL);
  g_setenv("COHORT_NVIDIA_SMI", "/nonexistent/nvidia-smi", TRUE);
  g_assert_cmpint(cohort_machine_count_gpus(), ==, 0);
  g_assert_cmpint(cohort_launch_resolve_nproc("auto", "--nproc-per-node", &error), ==, 1);
  g_assert_cmpint(cohort_launch_resolve_nproc("gpu", "--nproc-per-node", &error), ==, -1);
  g_assert_nonnull(strstr(error->message, "no GPU found"));
  g_clear_error(&error);
  g_setenv("COHORT_NVIDIA_SMI", fake, TRUE);
  g_assert_cmpint(cohort_machine_count_gpus(), ==, 2);
  g_assert_cmpint(cohort_launch_resolve_nproc("auto", "--nproc-per-node", &error), ==, 2);
  g_assert_cmpint(cohort_launch_resolve_nproc("gpu", "--nproc-per-node", &error), ==, 2);
  /* The automatic count follows what a CUDA process would see, not the machine's list. */
  g_setenv("CUDA_VISIBLE_DEVICES", "1", TRUE);
  g_assert_cmpint(cohort_machine_count_gpus(), ==, 1);
  g_assert_cmpint(cohort_launch_resolve_nproc("auto", "--nproc-per-node", &error), ==, 1);
  g_setenv("CUDA_VISIBLE_DEVICES", "", TRUE);
  g_assert_cmpint(cohort_launch_resolve_nproc("gpu", "--nproc-per-node", &error), ==, -1);
  g_assert_nonnull(strstr(error->message, "CUDA_VISIBLE_DEVICES"));
  g_clear_error(&error);
  g_unsetenv("CUDA_VISIBLE_DEVICES");
  g_unsetenv("COHORT_NVIDIA_SMI");
  g_assert_cmpint(cohort_launch_resolve_nproc("3", "--nproc-per-node", &error), ==, 3);
  g_assert_cmpint(cohort_launch_resolve_nproc("cpu", "--nproc-per-node", &error), ==, 1);
  g_assert_no_error(error);
  const char *bad[] = {"0", "-2", "two", "", "3x", "4097"};
  for (guint i = 0; i < G_N_ELEMENTS(bad); i++) {
    g_assert_cmpint(cohort_launch_resolve_nproc(bad[i], "--nproc-per-node", &error), ==, -1);
    g_assert_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID);
    g_assert_nonnull(strstr(error->message, "--nproc-per-node"));
    g_clear_error(&error);
  }
}

/* CUDA_VISIBLE_DEVICES read as the CUDA runtime reads it, over nvidia-smi -L's list. */
static void test_visible_gpus(void)
{
  const char *list = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5f0c6a1e-aaaa)\n"
                     "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-5f0c6a1e-bbbb)\n"
                     "GPU 2: NVIDIA A100-SXM4-40GB (UUID: GPU-77d1c2e3-cccc)\n"
                     "  MIG 3g.20gb     Device  0: (UUID: MIG-0a1b2c3d-dddd)\n"
                     "  MIG 3g.20gb     Device  1: (UUID: MIG-0a1b2c3d-eeee)\n";
  const struct {
    const char *vis;
    int want;
  } cases[] = {
      {NULL, 3},                                  /* unset: every GPU */
      {"", 0},                                    /* set and empty: none */
      {"-1", 0},                                  /* a common way to hide them all */
      {"0", 1},                                   /* SLURM --gpus-per-task=1 */
      {"2,0", 2},                                 /* order does not matter for the count */
      {" 1 , 2 ", 2},                             /* spaces around entries */
      {"0,7,1", 1},                               /* cut at the first bad index */
      {"1,1", 1},                                 /* a repeat ends the list */
      {"GPU-77d1c2e3-cccc", 1},                   /* a UUID */
      {"GPU-5f0c6a1e-bb,GPU-77", 2},              /* unique prefixes */
      {"GPU-5f0c6a1e", 0},                        /* a prefix of two: ambiguous */
      {"GPU-5f0c6a1e-aaaa,0", 1},                 /* the same GPU twice */
      {"MIG-0a1b2c3d-eeee", 1},                   /* a MIG instance */
      {"MIG-0a1b2c3d-dddd,MIG-0a1b2c3d-eeee", 1}, /* one MIG instance per process */
      {"GPU-ffff", 0},                            /* no such GPU */
      {"x", 0},
  };
  for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
    g_test_message("CUDA_VISIBLE_DEVICES=%s", cases[i].vis ? cases[i].vis : "(unset)");
    g_assert_cmpint(cohort_visible_gpu_count(list, cases[i].vis), ==, cases[i].want);
  }
  g_assert_cmpint(cohort_visible_gpu_count("", NULL), ==, 0);
  g_assert_cmpint(cohort_visible_gpu_count("", "0"), ==, 0);
}

static const CohortLaunchCommand *find_cmd(GPtrArray *cmds, const char *launcher)
{
  for (guint i = 0; i < cmds->len; i++) {
    const CohortLaunchCommand *c = cmds->pdata[i];
    if (strcmp(c->launcher, launcher) == 0)
      return c;
  }
  return NULL;
}

static void assert_has(const char *text, const char *words)
{
  g_auto(GStrv) w = g_strsplit(words, "|", -1);
  for (int i = 0; w[i] != NULL; i++)
    if (strstr(text, w[i]) == NULL)
      g_error("\"%s\" lacks \"%s\"", text, w[i]);
}

static CohortConfig *cluster_config(void)
{
  return config((const char *[]){"num_nodes=2", "nproc_per_node=4", "enable_multi_gpu=true",
                                 "device=cuda", "distributed_backend=gloo", "master_addr=10.1.2.3",
                                 "master_port=29400", "max_restarts=2", NULL});
}

static void test_commands(void)
{
  g_autoptr(CohortConfig) cfg = cluster_config();
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) cmds = cohort_launch_commands(cfg, "/runs/my run.json", NULL, NULL, &error);
  g_assert_no_error(error);
  g_autofree char *text = cohort_launch_commands_to_text(cmds);
  g_test_message("%s", text);

  /* cohort-run: the plan's own command lines, one per node. */
  g_assert_null(find_cmd(cmds, "cohort-train")); /* spawn mode is one machine's */
  const CohortLaunchCommand *run = find_cmd(cmds, "cohort-run");
  g_assert_cmpuint(g_strv_length(run->commands), ==, 2);
  CohortMachine nodes = {.gpus = -1};
  g_autoptr(CohortLaunchPlan) plan = cohort_launch_plan_new(cfg, "x", &nodes, &error);
  const char *targs[] = {"--config", "/runs/my run.json", NULL};
  CohortLaunchArgs a = {.train_args = targs, .progress_fd = -1};
  for (int n = 0; n < 2; n++) {
    g_autofree char *nr = g_strdup_printf("--node-rank %d ", n);
    assert_has(run->commands[n], "cohort-run --nnodes 2 --nproc-per-node 4 |--master-addr "
                                 "10.1.2.3 --master-port 29400|--max-restarts 2|cohort-train "
                                 "--config '/runs/my run.json'");
    assert_has(run->commands[n], nr);
    g_auto(GStrv) argv = cohort_launch_plan_argv(plan, n, &a);
    g_autofree char *joined = g_strjoinv(" ", argv);
    /* The same words, quoting aside. */
    g_autofree char *line = g_strdup(strchr(run->commands[n], ' ') + 1);
    g_auto(GStrv) words = NULL;
    g_assert_true(g_shell_parse_argv(line, NULL, &words, NULL));
    g_autofree char *unquoted = g_strjoinv(" ", words);
    g_assert_cmpstr(unquoted, ==, joined);
  }
  /* torchrun: underscore flags (torch 1.x knows no others), the notes on Debian and ports. */
  const CohortLaunchCommand *tr = find_cmd(cmds, "torchrun");
  g_assert_cmpuint(g_strv_length(tr->commands), ==, 2);
  assert_has(tr->commands[1], "torchrun --nnodes=2 --nproc_per_node=4 --node_rank=1 "
                              "|--master_addr=10.1.2.3 --master_port=29400|--max_restarts=2 "
                              "|--no_python cohort-train --config '/runs/my run.json'");
  g_assert_null(strstr(tr->commands[1], "--nproc-per-node"));
  g_assert_null(strstr(tr->commands[1], "-r 1"));
  assert_has(tr->note, "master_port + 1 (29401|-r 1 -t 1|Debian");
  const CohortLaunchCommand *srun = find_cmd(cmds, "srun");
  assert_has(srun->commands[0], "srun --nodes=2 --ntasks-per-node=4 |"
                                "MASTER_PORT=29400|cohort-train --config '/runs/my run.json'");
  /* The GPUs are asked for only when the ranks use NCCL on them. */
  g_assert_null(strstr(srun->commands[0], "--gpus-per-node"));
  const CohortLaunchCommand *sb = find_cmd(cmds, "sbatch");
  assert_has(sb->commands[0], "#!/bin/bash\n|#SBATCH --nodes=2\n|#SBATCH --ntasks-per-node=4\n|"
                              "srun cohort-train --config '/runs/my run.json'");
  const CohortLaunchCommand *mpi = find_cmd(cmds, "mpirun");
  assert_has(mpi->commands[0], "mpirun -np 8 |--hostfile hostfile |ppr:4:node|-x "
                               "MASTER_ADDR=10.1.2.3|-x MASTER_PORT=29400|cohort-train --config "
                               "'/runs/my run.json'");
  assert_has(mpi->note, "hostfile lists the nodes|node_hosts");

  /* The nodes share one secret, in the environment of their commands, fresh for each call;
   * commands run once draw theirs in the shell, and mpirun passes it by name. */
  const char *secret = run->commands[0] + strlen("COHORT_JOB_TOKEN=");
  g_assert_true(g_str_has_prefix(run->commands[0], "COHORT_JOB_TOKEN="));
  g_assert_cmpint(strspn(secret, "0123456789abcdef"), ==, 32);
  g_assert_cmpint(secret[32], ==, ' ');
  g_autofree char *prefix = g_strndup(run->commands[0], strlen("COHORT_JOB_TOKEN=") + 33);
  for (int n = 0; n < 2; n++) {
    g_assert_true(g_str_has_prefix(run->commands[n], prefix));
    g_assert_true(g_str_has_prefix(tr->commands[n], prefix));
  }
  assert_has(srun->commands[0], "COHORT_JOB_TOKEN=$(od -An -N16 -tx1 /dev/urandom");
  assert_has(sb->commands[0], "export COHORT_JOB_TOKEN=$(od -An -N16 -tx1 /dev/urandom");
  assert_has(mpi->commands[0], "COHORT_JOB_TOKEN=$(od |-x COHORT_JOB_TOKEN ");
  g_autofree char *hex = g_strndup(secret, 32);
  g_assert_null(strstr(srun->commands[0], hex));
  g_assert_null(strstr(mpi->commands[0], hex));
  g_autoptr(GPtrArray) again = cohort_launch_commands(cfg, "/runs/my run.json", NULL, NULL, &error);
  g_assert_no_error(error);
  g_assert_false(g_str_has_prefix(find_cmd(again, "cohort-run")->commands[0], prefix));

  /* two nodes cannot meet at a loopback master */
  g_free(cfg->master_addr);
  cfg->master_addr = g_strdup("127.0.0.1");
  g_assert_null(cohort_launch_commands(cfg, "/runs/x.json", NULL, NULL, &error));
  g_assert_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID);
  g_assert_nonnull(strstr(error->message, "master_addr"));
}

/* One node: spawn mode and cohort-run draw their own secret; torchrun draws one in its shell. */
static void test_commands_one_node(void)
{
  g_autoptr(CohortConfig) cfg =
      config((const char *[]){"enable_multi_gpu=true", "nproc_per_node=2", "use_torchrun=false",
                              "master_port=29411", NULL});
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) one =
      cohort_launch_commands(cfg, "/runs/x.json", "/b/cohort-train", "/b/cohort-run", &error);
  g_assert_no_error(error);
  g_assert_cmpstr(find_cmd(one, "cohort-train")->commands[0], ==,
                  "/b/cohort-train --config /runs/x.json --nproc 2");
  g_assert_cmpstr(find_cmd(one, "cohort-run")->commands[0], ==,
                  "/b/cohort-run --standalone --nproc-per-node 2 /b/cohort-train --config "
                  "/runs/x.json");
  assert_has(find_cmd(one, "torchrun")->commands[0],
             "COHORT_JOB_TOKEN=$(od |torchrun --nnodes=1 --nproc_per_node=2 --node_rank=0 "
             "--master_addr=127.0.0.1 --master_port=29411 --no_python /b/cohort-train");
  const char *mpi = find_cmd(one, "mpirun")->commands[0];
  assert_has(mpi, "mpirun -np 2 --map-by ppr:2:node");
  g_assert_null(strstr(mpi, "hostfile"));
  /* An automatic count stays automatic where each node counts, and is assumed 1 where a
   * number is needed, with a note. */
  cfg->nproc_per_node = 0;
  cfg->device = COHORT_DEVICE_CUDA;
  cfg->use_torchrun = TRUE;
  g_autoptr(GPtrArray) autos = cohort_launch_commands(cfg, "/runs/x.json", NULL, NULL, &error);
  g_assert_no_error(error);
  assert_has(find_cmd(autos, "cohort-run")->commands[0], "--nproc-per-node auto ");
  assert_has(find_cmd(autos, "torchrun")->commands[0], "--nproc_per_node=gpu ");
  assert_has(find_cmd(autos, "srun")->note, "nproc_per_node is auto");
}

/* Named nodes: mpirun's command writes the hostfile beside the config and names it. */
static void test_hostfile(void)
{
  g_autoptr(CohortConfig) cfg = cluster_config();
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_config_set(cfg, "node_hosts", "gpu-a, gpu-b", "t", &error));
  g_autofree char *hf = cohort_launch_hostfile(cfg, 4);
  g_assert_cmpstr(hf, ==, "gpu-a slots=4\ngpu-b slots=4\n");
  g_autoptr(GPtrArray) cmds = cohort_launch_commands(cfg, "/runs/job/run.json", NULL, NULL, &error);
  g_assert_no_error(error);
  const char *mpi = find_cmd(cmds, "mpirun")->commands[0];
  g_test_message("%s", mpi);
  g_assert_true(g_str_has_prefix(mpi, "cat > /runs/job/hostfile <<'EOF'\n"
                                      "gpu-a slots=4\ngpu-b slots=4\nEOF\n"));
  assert_has(mpi, "--hostfile /runs/job/hostfile ");

  g_assert_true(cohort_config_set(cfg, "node_hosts", "gpu-a", "t", &error));
  g_assert_null(cohort_launch_commands(cfg, "/runs/job/run.json", NULL, NULL, &error));
  g_assert_nonnull(strstr(error->message, "\"node_hosts\" names 1 host but \"num_nodes\" is 2"));
  g_clear_error(&error);
  g_assert_true(cohort_config_set(cfg, "node_hosts", "gpu-a,gpu b", "t", &error));
  g_assert_null(cohort_launch_commands(cfg, "/runs/job/run.json", NULL, NULL, &error));
  g_assert_nonnull(strstr(error->message, "host 1 is \"gpu b\""));
}

static void test_secret(void)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *a = cohort_secret_new(&error);
  g_autofree char *b = cohort_secret_new(&error);
  g_assert_no_error(error);
  g_assert_cmpuint(strlen(a), ==, 32);
  g_assert_cmpuint(strspn(a, "0123456789abcdef"), ==, 32);
  g_assert_cmpstr(a, !=, b);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/launch-plan/derived", test_derived);
  g_test_add_func("/launch-plan/local-processes", test_local_processes);
  g_test_add_func("/launch-plan/refusals", test_refusals);
  g_test_add_func("/launch-plan/external", test_external);
  g_test_add_func("/launch-plan/argv", test_argv);
  g_test_add_func("/launch-plan/nproc", test_nproc);
  g_test_add_func("/launch-plan/visible-gpus", test_visible_gpus);
  g_test_add_func("/launch-plan/commands", test_commands);
  g_test_add_func("/launch-plan/commands-one-node", test_commands_one_node);
  g_test_add_func("/launch-plan/hostfile", test_hostfile);
  g_test_add_func("/launch-plan/secret", test_secret);
  return g_test_run();
}

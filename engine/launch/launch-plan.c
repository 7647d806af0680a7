/* The launch plan: processes, launcher, global batch, learning rate and command line of a
 * config on one machine. */
#include "engine/launch/launch-plan.h"

#include <math.h>
#include <string.h>

#include "engine/launch/build-info.h"
#include "engine/base/error.h"
#include "engine/config/rank-batches.h"

static const char *src(const char *source)
{
  return source ? source : "config";
}

int cohort_launch_auto_processes(int gpus)
{
  return MAX(1, gpus);
}

int cohort_launch_global_batch(const CohortConfig *cfg, int world_size)
{
  gint64 global = cohort_rank_batches_global(cfg, world_size) * cfg->gradient_accumulation_steps;
  /* Table bounds allow products past G_MAXINT; saturate rather than wrap. */
  return (int)MIN(global, (gint64)G_MAXINT);
}

double cohort_launch_scaled_lr(const CohortConfig *cfg, int world_size)
{
  /* The learning rate is set for batch_size examples: scaled by how many times that the global
   * micro-batch holds (the world size when every rank takes batch_size). */
  double times = (double)cohort_rank_batches_global(cfg, world_size) / MAX(cfg->batch_size, 1);
  if (cohort_rank_batches_kind(cfg) != COHORT_SPLIT_LIST)
    times = MAX(world_size, 1);
  switch (cfg->lr_scaling) {
  case COHORT_LR_SCALING_LINEAR:
    return cfg->learning_rate * times;
  case COHORT_LR_SCALING_SQRT:
    return cfg->learning_rate * sqrt(times);
  case COHORT_LR_SCALING_NONE:
  default:
    return cfg->learning_rate;
  }
}

const char *cohort_launch_kind_name(CohortLaunchKind kind)
{
  switch (kind) {
  case COHORT_LAUNCH_SPAWN:
    return "spawn";
  case COHORT_LAUNCH_COHORT_RUN:
    return "cohort-run";
  case COHORT_LAUNCH_EXTERNAL:
    return "external";
  case COHORT_LAUNCH_SINGLE:
  default:
    return "single";
  }
}

char *cohort_launch_plan_describe(const CohortLaunchPlan *p)
{
  static const char *const scaling[] = {"none", "linear", "sqrt"};
  GString *s = g_string_new(NULL);
  if (p->local_processes == 0)
    g_string_append_printf(s, "%d node%s × one process per GPU", p->num_nodes,
                           p->num_nodes == 1 ? "" : "s");
  else
    g_string_append_printf(s, "%d node%s × %d process%s = world size %d", p->num_nodes,
                           p->num_nodes == 1 ? "" : "s", p->local_processes,
                           p->local_processes == 1 ? "" : "es", p->world_size);
  if (p->world_size > 0)
    g_string_append_printf(s, " · global batch %d", p->global_batch);
  if (p->world_size > 1 && p->split && g_str_equal(p->split, "auto"))
    g_string_append(s, " (split among the ranks by their measured speed)");
  else if (p->world_size > 1 && p->split)
    g_string_append_printf(s, " (the ranks' shares: %s)", p->split);
  char a[G_ASCII_DTOSTR_BUF_SIZE], b[G_ASCII_DTOSTR_BUF_SIZE];
  g_ascii_formatd(a, sizeof a, "%g", p->learning_rate);
  g_ascii_formatd(b, sizeof b, "%g", p->scaled_lr);
  if (p->world_size > 0)
    g_string_append_printf(s, " · learning rate %s → %s (lr_scaling %s)", a, b,
                           scaling[p->lr_scaling]);
  else
    g_string_append_printf(s, " · learning rate %s (lr_scaling %s)", a, scaling[p->lr_scaling]);
  g_string_append_printf(s, " · started by %s", cohort_launch_kind_name(p->kind));
  return g_string_free(s, FALSE);
}

static guint n_device_indexes(const CohortConfig *cfg)
{
  return cfg->device_indexes ? cfg->device_indexes->len : 0;
}

/* Processes on this node by the one rule (launch-plan.h); 0 = automatic on an unknown
 * machine. FALSE when world_size and num_nodes do not divide. */
static gboolean local_processes(const CohortConfig *cfg, const char *source, int gpus, int *out,
                                GError **error)
{
  if (cfg->nproc_per_node > 0) {
    *out = cfg->nproc_per_node;
  } else if (n_device_indexes(cfg) > 0) {
    *out = (int)n_device_indexes(cfg);
  } else if (cfg->world_size > 0) {
    if (cfg->world_size % cfg->num_nodes != 0)
      return cohort_fail(
          error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
          "%s: key \"world_size\": %d is not a multiple of \"num_nodes\": %d; every node "
          "runs the same number of processes, so allowed: a multiple of %d, or 0 "
          "(num_nodes × nproc_per_node)",
          src(source), cfg->world_size, cfg->num_nodes, cfg->num_nodes);
    *out = cfg->world_size / cfg->num_nodes;
  } else if (cfg->device == COHORT_DEVICE_CPU) {
    *out = 1;
  } else {
    *out = gpus < 0 ? 0 : cohort_launch_auto_processes(gpus);
  }
  return TRUE;
}

/* The rules between the keys and this machine that no launcher could run past. */
static gboolean check_group(const CohortConfig *cfg, const char *source, const CohortMachine *m,
                            const CohortLaunchPlan *p, GError **error)
{
  const char *s = src(source);
  guint n_idx = n_device_indexes(cfg);
  if (n_idx > 0 && (guint)p->local_processes > n_idx)
    return cohort_fail(
        error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
        "%s: key \"nproc_per_node\": %d processes per node but \"device_indexes\" lists "
        "%u GPU%s; allowed: at most %u, or one more entry in device_indexes per process",
        s, p->local_processes, n_idx, n_idx == 1 ? "" : "s", n_idx);
  if (cfg->world_size > 0 && p->local_processes > 0 &&
      cfg->world_size != p->local_processes * p->num_nodes)
    return cohort_fail(
        error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
        "%s: key \"world_size\": %d is not \"num_nodes\" %d × %d processes per node = "
        "%d; allowed: %d, or 0 (computed)",
        s, cfg->world_size, p->num_nodes, p->local_processes, p->local_processes * p->num_nodes,
        p->local_processes * p->num_nodes);
  if (p->world_size == 1 || cfg->distributed_backend != COHORT_BACKEND_NCCL)
    return TRUE;
  gboolean here = m->gpus >= 0 || m->launched_by != NULL;
  if (here && !cohort_build_has_backend("nccl"))
    return cohort_fail(
        error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_UNSUPPORTED,
        "%s: key \"distributed_backend\": \"nccl\" is not supported: this build has no "
        "NCCL backend; use \"gloo\"",
        s);
  if (cfg->device == COHORT_DEVICE_CPU)
    return cohort_fail(
        error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
        "%s: key \"distributed_backend\": \"nccl\" needs GPU ranks but \"device\" is "
        "\"cpu\"; allowed: \"gloo\" for CPU ranks, or device \"cuda\" or \"auto\"",
        s);
  /* Under a launcher each rank checks its own device when it selects it. */
  if (m->gpus < 0 || p->kind == COHORT_LAUNCH_EXTERNAL)
    return TRUE;
  if (m->gpus == 0)
    return cohort_fail(
        error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_UNSUPPORTED,
        "%s: key \"distributed_backend\": \"nccl\" needs a GPU per process, and this "
        "machine has no NVIDIA GPU; use \"gloo\" to train on the CPU",
        s);
  if (n_idx == 0 && p->local_processes > m->gpus)
    return cohort_fail(
        error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_UNSUPPORTED,
        "%s: key \"nproc_per_node\": %d processes with \"nccl\" need a GPU each, and "
        "this machine has %d; allowed: at most %d, or \"gloo\" to let processes share "
        "GPUs",
        s, p->local_processes, m->gpus, m->gpus);
  return TRUE;
}

/* Who starts the processes (an unknown automatic count, 0, is never one); FALSE for spawn
 * mode across nodes. */
static gboolean choose_kind(const CohortConfig *cfg, const char *source, CohortLaunchPlan *p,
                            GError **error)
{
  if (p->local_processes == 1 && p->num_nodes == 1) {
    p->kind = COHORT_LAUNCH_SINGLE;
  } else if (cfg->use_torchrun) {
    p->kind = COHORT_LAUNCH_COHORT_RUN;
  } else if (p->num_nodes > 1) {
    return cohort_fail(
        error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
        "%s: key \"use_torchrun\": false (spawn mode) starts processes on this machine "
        "only, but \"num_nodes\" is %d; allowed: use_torchrun true (cohort-run on every "
        "node), or num_nodes 1",
        src(source), p->num_nodes);
  } else {
    p->kind = COHORT_LAUNCH_SPAWN;
  }
  return TRUE;
}

/* The global batch and learning rate; a rank_batch_sizes list must give every process of a
 * known world size one share. */
static gboolean finish(const CohortConfig *cfg, const char *source, CohortLaunchPlan *p,
                       GError **error)
{
  p->global_batch = cohort_launch_global_batch(cfg, MAX(p->world_size, 1));
  p->learning_rate = cfg->learning_rate;
  p->scaled_lr = cohort_launch_scaled_lr(cfg, MAX(p->world_size, 1));
  p->lr_scaling = cfg->lr_scaling;
  if (cohort_rank_batches_kind(cfg) != COHORT_SPLIT_EVEN)
    p->split = g_strstrip(g_strdup(cfg->rank_batch_sizes));
  if (p->world_size <= 0)
    return TRUE;
  g_autofree int *shares = g_new(int, p->world_size);
  return cohort_rank_batches_start(cfg, source, p->world_size, shares, error);
}

CohortLaunchPlan *cohort_launch_plan_new(const CohortConfig *cfg, const char *source,
                                         const CohortMachine *machine, GError **error)
{
  /* What this build supports matters where it runs: not for commands printed for others. */
  gboolean here = machine->gpus >= 0 || machine->launched_by != NULL;
  if (here && !cohort_config_check_supported(cfg, source, error))
    return NULL;
  g_autoptr(CohortLaunchPlan) p = g_new0(CohortLaunchPlan, 1);
  p->master_addr = g_strdup(cfg->master_addr);
  p->master_port = cfg->master_port;
  p->max_restarts = cfg->max_restarts;
  p->gpu_processes =
      cfg->device != COHORT_DEVICE_CPU && cfg->distributed_backend == COHORT_BACKEND_NCCL;

  if (machine->launched_by != NULL) {
    /* The launcher decided; the config may only confirm its world size. */
    p->kind = COHORT_LAUNCH_EXTERNAL;
    p->num_nodes = MAX(1, machine->launched_world_size / MAX(1, machine->launched_local_size));
    p->local_processes = MAX(1, machine->launched_local_size);
    p->world_size = MAX(1, machine->launched_world_size);
    if (cfg->world_size > 0 && cfg->world_size != p->world_size) {
      cohort_fail(
          error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
          "%s: key \"world_size\": %d, but %s started %d processes; allowed: %d, or 0 (take "
          "it from the launcher)",
          src(source), cfg->world_size, machine->launched_by, p->world_size, p->world_size);
      return NULL;
    }
    if (!check_group(cfg, source, machine, p, error) || !finish(cfg, source, p, error))
      return NULL;
    return g_steal_pointer(&p);
  }

  if (!cfg->enable_multi_gpu) {
    if (cfg->num_nodes > 1) {
      cohort_fail(
          error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
          "%s: key \"num_nodes\": %d needs \"enable_multi_gpu\": true; allowed: num_nodes 1 "
          "for a run in one process, or enable_multi_gpu true",
          src(source), cfg->num_nodes);
      return NULL;
    }
    p->kind = COHORT_LAUNCH_SINGLE;
    p->num_nodes = p->local_processes = p->world_size = 1;
    if (!finish(cfg, source, p, error))
      return NULL;
    return g_steal_pointer(&p);
  }

  p->num_nodes = cfg->num_nodes;
  p->node_rank = cfg->node_rank;
  if (!local_processes(cfg, source, machine->gpus, &p->local_processes, error))
    return NULL;
  p->world_size = p->local_processes * p->num_nodes;
  if (!choose_kind(cfg, source, p, error) || !check_group(cfg, source, machine, p, error) ||
      !finish(cfg, source, p, error))
    return NULL;
  return g_steal_pointer(&p);
}

void cohort_launch_plan_free(CohortLaunchPlan *plan)
{
  if (plan == NULL)
    return;
  g_free(plan->master_addr);
  g_free(plan->split);
  g_free(plan);
}

static void add_int(GStrvBuilder *b, int v)
{
  g_autofree char *t = g_strdup_printf("%d", v);
  g_strv_builder_add(b, t);
}

static void add_train(GStrvBuilder *b, const CohortLaunchArgs *args)
{
  g_strv_builder_add(b, args->train_program ? args->train_program : "cohort-train");
  if (args->train_args != NULL)
    g_strv_builder_addv(b, (const char **)args->train_args);
}

static void add_progress(GStrvBuilder *b, const CohortLaunchArgs *args)
{
  if (args->progress_fd >= 0) {
    g_strv_builder_add(b, "--progress-fd");
    add_int(b, args->progress_fd);
  }
  if (args->control_fd > 0) {
    g_strv_builder_add(b, "--control-fd");
    add_int(b, args->control_fd);
  }
}

GStrv cohort_launch_plan_argv(const CohortLaunchPlan *p, int node_rank,
                              const CohortLaunchArgs *args)
{
  g_autoptr(GStrvBuilder) b = g_strv_builder_new();
  int node = node_rank >= 0 ? node_rank : p->node_rank;
  switch (p->kind) {
  case COHORT_LAUNCH_SPAWN:
    add_train(b, args);
    add_progress(b, args);
    g_strv_builder_add(b, "--nproc");
    add_int(b, p->local_processes);
    break;
  case COHORT_LAUNCH_COHORT_RUN:
    g_strv_builder_add(b, args->run_program ? args->run_program : "cohort-run");
    if (p->num_nodes > 1) {
      g_strv_builder_add(b, "--nnodes");
      add_int(b, p->num_nodes);
    } else {
      /* One node: a free port on 127.0.0.1, so two runs on one machine never collide. */
      g_strv_builder_add(b, "--standalone");
    }
    g_strv_builder_add(b, "--nproc-per-node");
    if (p->local_processes > 0)
      add_int(b, p->local_processes);
    else
      g_strv_builder_add(b, "auto");
    if (p->num_nodes > 1) {
      g_strv_builder_add(b, "--node-rank");
      add_int(b, node);
      g_strv_builder_add_many(b, "--master-addr", p->master_addr, "--master-port", NULL);
      add_int(b, p->master_port);
    }
    if (p->max_restarts > 0) {
      g_strv_builder_add(b, "--max-restarts");
      add_int(b, p->max_restarts);
    }
    add_progress(b, args);
    add_train(b, args);
    break;
  case COHORT_LAUNCH_SINGLE:
  case COHORT_LAUNCH_EXTERNAL:
  default:
    add_train(b, args);
    add_progress(b, args);
    break;
  }
  return g_strv_builder_end(b);
}

/* The one entry of `uuids` that `token` (a UUID or a unique prefix of one) names, or NULL. */
static gpointer uuid_named(const char *token, GPtrArray *uuids)
{
  gpointer hit = NULL;
  for (guint i = 0; i < uuids->len; i++)
    if (g_str_has_prefix(g_ptr_array_index(uuids, i), token)) {
      if (hit != NULL)
        return NULL;
      hit = g_ptr_array_index(uuids, i);
    }
  return hit;
}

int cohort_visible_gpu_count(const char *smi_list, const char *cuda_visible_devices)
{
  g_autoptr(GPtrArray) gpus = g_ptr_array_new_with_free_func(g_free); /* UUIDs, in order */
  g_autoptr(GPtrArray) migs = g_ptr_array_new_with_free_func(g_free);
  g_auto(GStrv) lines = g_strsplit(smi_list ? smi_list : "", "\n", -1);
  for (int i = 0; lines[i] != NULL; i++) {
    const char *u = strstr(lines[i], "(UUID: ");
    g_autofree char *uuid = u ? g_strndup(u + 7, strcspn(u + 7, ")")) : g_strdup("");
    if (g_str_has_prefix(lines[i], "GPU "))
      g_ptr_array_add(gpus, g_steal_pointer(&uuid));
    else if (g_str_has_prefix(g_strchug(lines[i]), "MIG "))
      g_ptr_array_add(migs, g_steal_pointer(&uuid));
  }
  if (cuda_visible_devices == NULL)
    return (int)gpus->len;
  /* The CUDA runtime's reading: a comma-separated list of indexes or UUIDs, cut at the first
   * entry that names no device (or one already named); one MIG instance at most. */
  g_auto(GStrv) tokens = g_strsplit(cuda_visible_devices, ",", -1);
  g_autoptr(GHashTable) seen = g_hash_table_new(NULL, NULL); /* the entries named so far */
  int n = 0;
  for (int i = 0; tokens[i] != NULL; i++) {
    char *t = g_strstrip(tokens[i]);
    char *end = NULL;
    gint64 index = g_ascii_strtoll(t, &end, 10);
    gpointer device = NULL;
    if (end != t && *end == '\0' && g_ascii_isdigit(t[0]))
      device = index < (gint64)gpus->len ? g_ptr_array_index(gpus, index) : NULL;
    else if (g_str_has_prefix(t, "GPU-"))
      device = uuid_named(t, gpus);
    else if (g_str_has_prefix(t, "MIG-") && n == 0)
      device = uuid_named(t, migs);
    if (device == NULL || !g_hash_table_add(seen, device))
      break;
    n++;
    if (g_str_has_prefix(t, "MIG-"))
      break; /* CUDA enumerates one MIG instance per process */
  }
  return n;
}

int cohort_machine_count_gpus(void)
{
  const char *tool = g_getenv("COHORT_NVIDIA_SMI");
  g_autofree char *smi = tool && *tool ? g_strdup(tool) : g_find_program_in_path("nvidia-smi");
  if (smi == NULL)
    return 0;
  g_autofree char *out = NULL;
  const char *argv[] = {smi, "-L", NULL};
  int status = 0;
  if (!g_spawn_sync(NULL, (char **)argv, NULL, G_SPAWN_STDERR_TO_DEV_NULL, NULL, NULL, &out, NULL,
                    &status, NULL) ||
      !g_spawn_check_wait_status(status, NULL))
    return 0;
  return cohort_visible_gpu_count(out, g_getenv("CUDA_VISIBLE_DEVICES"));
}

int cohort_launch_resolve_nproc(const char *text, const char *flag, GError **error)
{
  if (g_strcmp0(text, "cpu") == 0)
    return 1;
  if (g_strcmp0(text, "auto") == 0 || g_strcmp0(text, "gpu") == 0) {
    int gpus = cohort_machine_count_gpus();
    if (text[0] == 'a')
      return cohort_launch_auto_processes(gpus);
    if (gpus > 0)
      return gpus;
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "%s gpu: no GPU found (nvidia-smi -L lists none, or CUDA_VISIBLE_DEVICES hides "
                "them); use a number or cpu",
                flag);
    return -1;
  }
  char *end = NULL;
  gint64 v = text ? g_ascii_strtoll(text, &end, 10) : 0;
  if (text == NULL || end == text || *end != '\0' || v < 1 || v > 4096) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "%s \"%s\" is not allowed; expected a number from 1 to 4096, auto, cpu or gpu",
                flag, text ? text : "");
    return -1;
  }
  return (int)v;
}

/* Rank discovery from torchrun, SLURM or Open MPI variables. */
#include "engine/distributed/env.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* clang-format off */
G_DEFINE_QUARK(cohort-dist-error-quark, cohort_dist_error)
/* clang-format on */

#define env_error(error, ...)                                                                      \
  g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_ENV, __VA_ARGS__)

static const char *lookup(const char *const *envp, const char *name)
{
  return g_environ_getenv((char **)envp, name);
}

/* A plain decimal integer in [min, max]; anything else names the variable. */
static gboolean parse_int(const char *text, const char *name, gint64 min, gint64 max,
                          const char *allowed, gint64 *out, GError **error)
{
  const char *p = text;
  if (*p == '+')
    p++;
  if (*p == '\0' || !g_ascii_isdigit(*p)) {
    env_error(error, "%s=\"%s\" is not a number; expected %s", name, text, allowed);
    return FALSE;
  }
  errno = 0;
  char *end = NULL;
  gint64 v = g_ascii_strtoll(p, &end, 10);
  if (errno != 0 || *end != '\0') {
    env_error(error, "%s=\"%s\" is not a number; expected %s", name, text, allowed);
    return FALSE;
  }
  if (v < min || v > max) {
    env_error(error, "%s=%s is out of range; expected %s", name, text, allowed);
    return FALSE;
  }
  *out = v;
  return TRUE;
}

/* Reads an optional int variable; `*present` tells whether it was set. */
static gboolean get_int(const char *const *envp, const char *name, gint64 min, gint64 max,
                        const char *allowed, gboolean *present, gint64 *out, GError **error)
{
  const char *v = lookup(envp, name);
  *present = v != NULL;
  if (v == NULL)
    return TRUE;
  return parse_int(v, name, min, max, allowed, out, error);
}

static gboolean require_int(const char *const *envp, const char *name, const char *needed_by,
                            gint64 min, gint64 max, const char *allowed, gint64 *out,
                            GError **error)
{
  gboolean present;
  if (!get_int(envp, name, min, max, allowed, &present, out, error))
    return FALSE;
  if (!present) {
    env_error(error, "%s is set but %s is not; a %s launch sets both", needed_by, name,
              g_str_has_prefix(name, "SLURM")  ? "SLURM"
              : g_str_has_prefix(name, "OMPI") ? "Open MPI"
                                               : "torchrun");
    return FALSE;
  }
  return TRUE;
}

CohortDistEnv *cohort_dist_env_new_single(void)
{
  CohortDistEnv *env = g_new0(CohortDistEnv, 1);
  env->world_size = 1;
  env->local_world_size = 1;
  env->master_addr = g_strdup("127.0.0.1");
  env->run_id = g_strdup("none");
  env->source = "single";
  return env;
}

CohortDistEnv *cohort_dist_env_copy(const CohortDistEnv *env)
{
  CohortDistEnv *c = g_new0(CohortDistEnv, 1);
  *c = *env;
  c->master_addr = g_strdup(env->master_addr);
  c->run_id = g_strdup(env->run_id);
  c->job_secret = g_strdup(env->job_secret);
  return c;
}

void cohort_dist_env_free(CohortDistEnv *env)
{
  if (env == NULL)
    return;
  g_free(env->master_addr);
  g_free(env->run_id);
  if (env->job_secret != NULL) {
    explicit_bzero(env->job_secret, strlen(env->job_secret));
    g_free(env->job_secret);
  }
  g_free(env);
}

/* The rules every source must satisfy. */
static gboolean check_consistent(const CohortDistEnv *env, const char *rank_var,
                                 const char *world_var, const char *local_var,
                                 const char *local_world_var, const char *addr_hint, GError **error)
{
  if (env->rank >= env->world_size) {
    env_error(error, "%s=%d is not below %s=%d; ranks go from 0 to %d", rank_var, env->rank,
              world_var, env->world_size, env->world_size - 1);
    return FALSE;
  }
  if (env->local_world_size > env->world_size) {
    env_error(error, "%s=%d is larger than %s=%d", local_world_var, env->local_world_size,
              world_var, env->world_size);
    return FALSE;
  }
  if (env->local_rank >= env->local_world_size) {
    env_error(error, "%s=%d is not below %s=%d; local ranks go from 0 to %d", local_var,
              env->local_rank, local_world_var, env->local_world_size, env->local_world_size - 1);
    return FALSE;
  }
  if (env->world_size > 1) {
    if (env->master_addr == NULL || env->master_addr[0] == '\0') {
      env_error(error, "%s=%d but no master address is set; %s", world_var, env->world_size,
                addr_hint);
      return FALSE;
    }
    if (env->master_port <= 0) {
      env_error(error, "%s=%d but no master port is set; set MASTER_PORT (1-65535)", world_var,
                env->world_size);
      return FALSE;
    }
  }
  return TRUE;
}

/* A launcher's job id, from `var` (else `old_var`, if given), names the run and gives the
 * default port, 20000 + id % 20000, so every rank of one job derives the same port. */
static gboolean read_job_id(const char *const *envp, const char *var, const char *old_var,
                            CohortDistEnv *env, GError **error)
{
  const char *job = lookup(envp, var);
  if (job == NULL && old_var != NULL)
    job = lookup(envp, old_var);
  if (job == NULL)
    return TRUE;
  gint64 v;
  if (!parse_int(job, var, 0, G_MAXINT64, "a job number", &v, error))
    return FALSE;
  env->master_port = 20000 + (int)(v % 20000);
  g_free(env->run_id);
  env->run_id = g_strdup(job);
  return TRUE;
}

/* MASTER_ADDR/MASTER_PORT when present; `port` keeps its value otherwise. */
static gboolean read_master(const char *const *envp, CohortDistEnv *env, GError **error)
{
  const char *addr = lookup(envp, "MASTER_ADDR");
  if (addr != NULL) {
    if (addr[0] == '\0' || strpbrk(addr, " \t\n/") != NULL) {
      env_error(error, "MASTER_ADDR=\"%s\" is not a host name or address", addr);
      return FALSE;
    }
    g_free(env->master_addr);
    env->master_addr = g_strdup(addr);
  }
  gboolean present;
  gint64 port;
  if (!get_int(envp, "MASTER_PORT", 1, 65535, "a TCP port from 1 to 65535", &present, &port, error))
    return FALSE;
  if (present)
    env->master_port = (int)port;
  return TRUE;
}

static gboolean read_store_fds(const char *const *envp, CohortDistEnv *env, GError **error);

static CohortDistEnv *from_torchrun(const char *const *envp, GError **error)
{
  g_autoptr(CohortDistEnv) env = cohort_dist_env_new_single();
  env->source = "torchrun";
  gint64 v;
  gboolean present;
  const char *n = "a non-negative integer";
  if (!require_int(envp, "WORLD_SIZE", "RANK", 1, G_MAXINT, "a positive integer", &v, error))
    return NULL;
  env->world_size = (int)v;
  if (!require_int(envp, "RANK", "WORLD_SIZE", 0, G_MAXINT, n, &v, error))
    return NULL;
  env->rank = (int)v;
  /* PyTorch's env:// needs only RANK and WORLD_SIZE: the rest defaults to one node. */
  if (!get_int(envp, "LOCAL_RANK", 0, G_MAXINT, n, &present, &v, error))
    return NULL;
  env->local_rank = present ? (int)v : env->rank;
  if (!get_int(envp, "LOCAL_WORLD_SIZE", 1, G_MAXINT, "a positive integer", &present, &v, error))
    return NULL;
  env->local_world_size = present ? (int)v : env->world_size;
  if (!get_int(envp, "GROUP_RANK", 0, G_MAXINT, n, &present, &v, error))
    return NULL;
  env->group_rank = present ? (int)v : 0;
  if (!get_int(envp, "TORCHELASTIC_RESTART_COUNT", 0, G_MAXINT, n, &present, &v, error))
    return NULL;
  env->restart_count = present ? (int)v : 0;
  const char *run_id = lookup(envp, "TORCHELASTIC_RUN_ID");
  if (run_id != NULL && run_id[0] != '\0') {
    g_free(env->run_id);
    env->run_id = g_strdup(run_id);
  }
  g_clear_pointer(&env->master_addr, g_free);
  if (!read_master(envp, env, error))
    return NULL;
  if (!check_consistent(env, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                        "set MASTER_ADDR", error))
    return NULL;
  if (env->master_addr == NULL)
    env->master_addr = g_strdup("127.0.0.1");
  if (!read_store_fds(envp, env, error))
    return NULL;
  /* torchrun's static rendezvous hosts its own store (the agent store) on MASTER_PORT, and
   * says so with TORCHELASTIC_USE_AGENT_STORE=True; ours takes the next port. */
  if (g_strcmp0(lookup(envp, "TORCHELASTIC_USE_AGENT_STORE"), "True") == 0) {
    if (env->master_port >= 65535) {
      env_error(error,
                "MASTER_PORT=%d leaves no port for Cohort's store beside torchrun's "
                "agent store (it uses MASTER_PORT + 1); allowed: 1 to 65534",
                env->master_port);
      return NULL;
    }
    env->master_port++;
  }
  return g_steal_pointer(&env);
}

GStrv cohort_dist_expand_nodelist(const char *nodelist, const char *variable, GError **error)
{
  g_autoptr(GPtrArray) out = g_ptr_array_new_with_free_func(g_free);
  const char *p = nodelist;
  while (*p != '\0') {
    /* One item: prefix[ranges]suffix…, up to a comma outside brackets. */
    const char *start = p;
    int depth = 0;
    while (*p != '\0' && (depth > 0 || *p != ',')) {
      if (*p == '[')
        depth++;
      else if (*p == ']' && --depth < 0)
        break;
      p++;
    }
    if (depth != 0) {
      env_error(error, "%s=\"%s\" has unbalanced brackets", variable, nodelist);
      return NULL;
    }
    g_autofree char *item = g_strndup(start, p - start);
    if (*p == ',')
      p++;
    if (item[0] == '\0') {
      env_error(error, "%s=\"%s\" has an empty host name", variable, nodelist);
      return NULL;
    }
    char *open = strchr(item, '[');
    if (open == NULL) {
      g_ptr_array_add(out, g_steal_pointer(&item));
      continue;
    }
    char *close = strchr(open, ']');
    if (strchr(open + 1, '[') != NULL && strchr(open + 1, '[') < close) {
      env_error(error, "%s=\"%s\" has nested brackets", variable, nodelist);
      return NULL;
    }
    g_autofree char *prefix = g_strndup(item, open - item);
    g_autofree char *ranges = g_strndup(open + 1, close - open - 1);
    /* The suffix may hold more bracket groups ("rack[1-2]-n[1-2]"): expand it recursively. */
    g_auto(GStrv) suffixes = NULL;
    if (close[1] != '\0') {
      suffixes = cohort_dist_expand_nodelist(close + 1, variable, error);
      if (suffixes == NULL)
        return NULL;
    }
    g_auto(GStrv) parts = g_strsplit(ranges, ",", -1);
    if (parts[0] == NULL) {
      env_error(error, "%s=\"%s\" has an empty bracket", variable, nodelist);
      return NULL;
    }
    for (int i = 0; parts[i] != NULL; i++) {
      char *dash = strchr(parts[i], '-');
      g_autofree char *lo_s = dash ? g_strndup(parts[i], dash - parts[i]) : g_strdup(parts[i]);
      const char *hi_s = dash ? dash + 1 : parts[i];
      gint64 lo, hi;
      if (!parse_int(lo_s, variable, 0, G_MAXINT, "host ranges like node[01-03,07]", &lo, error) ||
          !parse_int(hi_s, variable, 0, G_MAXINT, "host ranges like node[01-03,07]", &hi, error))
        return NULL;
      if (hi < lo) {
        env_error(error, "%s=\"%s\" has a reversed range \"%s\"", variable, nodelist, parts[i]);
        return NULL;
      }
      if (hi - lo > 100000) {
        env_error(error, "%s=\"%s\" has a range of more than 100000 hosts", variable, nodelist);
        return NULL;
      }
      int width = (int)strlen(lo_s);
      for (gint64 k = lo; k <= hi; k++) {
        if (suffixes == NULL) {
          g_ptr_array_add(out, g_strdup_printf("%s%0*" G_GINT64_FORMAT, prefix, width, k));
        } else {
          for (int s = 0; suffixes[s] != NULL; s++)
            g_ptr_array_add(
                out, g_strdup_printf("%s%0*" G_GINT64_FORMAT "%s", prefix, width, k, suffixes[s]));
        }
      }
    }
    /* A suffix expansion consumed the rest of this item only; continue after it. */
  }
  if (out->len == 0) {
    env_error(error, "%s is empty; expected a host list like node[01-03,07],gpu5", variable);
    return NULL;
  }
  g_ptr_array_add(out, NULL);
  return (GStrv)g_ptr_array_free(g_steal_pointer(&out), FALSE);
}

int cohort_dist_tasks_on_node(const char *tasks_per_node, int node_id, GError **error)
{
  g_auto(GStrv) parts = g_strsplit(tasks_per_node, ",", -1);
  int node = 0;
  for (int i = 0; parts[i] != NULL; i++) {
    char *paren = strchr(parts[i], '(');
    gint64 count, repeat = 1;
    g_autofree char *count_s = paren ? g_strndup(parts[i], paren - parts[i]) : g_strdup(parts[i]);
    if (!parse_int(count_s, "SLURM_TASKS_PER_NODE", 1, G_MAXINT, "a list like 4(x2),3", &count,
                   error))
      return -1;
    if (paren != NULL) {
      size_t len = strlen(paren);
      if (len < 4 || paren[1] != 'x' || paren[len - 1] != ')') {
        env_error(error, "SLURM_TASKS_PER_NODE=\"%s\" is malformed; expected a list like 4(x2),3",
                  tasks_per_node);
        return -1;
      }
      g_autofree char *rep_s = g_strndup(paren + 2, len - 3);
      if (!parse_int(rep_s, "SLURM_TASKS_PER_NODE", 1, G_MAXINT, "a list like 4(x2),3", &repeat,
                     error))
        return -1;
    }
    if (node_id < node + repeat)
      return (int)count;
    node += (int)repeat;
  }
  env_error(error, "SLURM_TASKS_PER_NODE=\"%s\" lists %d nodes, but SLURM_NODEID is %d",
            tasks_per_node, node, node_id);
  return -1;
}

static CohortDistEnv *from_slurm(const char *const *envp, GError **error)
{
  g_autoptr(CohortDistEnv) env = cohort_dist_env_new_single();
  env->source = "slurm";
  gint64 v;
  gboolean present;
  const char *n = "a non-negative integer";
  if (!require_int(envp, "SLURM_NTASKS", "SLURM_PROCID", 1, G_MAXINT, "a positive integer", &v,
                   error))
    return NULL;
  env->world_size = (int)v;
  if (!require_int(envp, "SLURM_PROCID", "SLURM_NTASKS", 0, G_MAXINT, n, &v, error))
    return NULL;
  env->rank = (int)v;
  if (!get_int(envp, "SLURM_LOCALID", 0, G_MAXINT, n, &present, &v, error))
    return NULL;
  env->local_rank = present ? (int)v : 0;
  if (!get_int(envp, "SLURM_NODEID", 0, G_MAXINT, n, &present, &v, error))
    return NULL;
  env->group_rank = present ? (int)v : 0;

  const char *tpn = lookup(envp, "SLURM_TASKS_PER_NODE");
  const char *ntpn = lookup(envp, "SLURM_NTASKS_PER_NODE");
  if (tpn != NULL) {
    int c = cohort_dist_tasks_on_node(tpn, env->group_rank, error);
    if (c < 0)
      return NULL;
    env->local_world_size = c;
  } else if (ntpn != NULL) {
    if (!parse_int(ntpn, "SLURM_NTASKS_PER_NODE", 1, G_MAXINT, "a positive integer", &v, error))
      return NULL;
    env->local_world_size = (int)v;
  } else {
    gint64 nodes = 1;
    if (!get_int(envp, "SLURM_NNODES", 1, G_MAXINT, "a positive integer", &present, &nodes, error))
      return NULL;
    if (env->world_size % nodes != 0) {
      env_error(error,
                "SLURM_NTASKS=%d does not divide evenly over SLURM_NNODES=%" G_GINT64_FORMAT
                " and SLURM_TASKS_PER_NODE is not set",
                env->world_size, nodes);
      return NULL;
    }
    env->local_world_size = env->world_size / (int)nodes;
  }

  g_clear_pointer(&env->master_addr, g_free);
  const char *var = "SLURM_NODELIST";
  const char *list = lookup(envp, var);
  if (list == NULL) {
    var = "SLURM_JOB_NODELIST";
    list = lookup(envp, var);
  }
  if (list != NULL) {
    g_auto(GStrv) hosts = cohort_dist_expand_nodelist(list, var, error);
    if (hosts == NULL)
      return NULL;
    env->master_addr = g_strdup(hosts[0]);
  }
  if (!read_job_id(envp, "SLURM_JOB_ID", "SLURM_JOBID", env, error) ||
      !read_master(envp, env, error))
    return NULL;
  if (!get_int(envp, "SLURM_RESTART_COUNT", 0, G_MAXINT, n, &present, &v, error))
    return NULL;
  env->restart_count = present ? (int)v : 0;
  if (!check_consistent(env, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
                        "local tasks (SLURM_TASKS_PER_NODE)", "set SLURM_NODELIST or MASTER_ADDR",
                        error))
    return NULL;
  if (env->master_addr == NULL)
    env->master_addr = g_strdup("127.0.0.1");
  return g_steal_pointer(&env);
}

static CohortDistEnv *from_mpi(const char *const *envp, GError **error)
{
  g_autoptr(CohortDistEnv) env = cohort_dist_env_new_single();
  env->source = "mpi";
  gint64 v;
  gboolean present;
  const char *n = "a non-negative integer";
  if (!require_int(envp, "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", 1, G_MAXINT,
                   "a positive integer", &v, error))
    return NULL;
  env->world_size = (int)v;
  if (!require_int(envp, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", 0, G_MAXINT, n, &v, error))
    return NULL;
  env->rank = (int)v;
  if (!get_int(envp, "OMPI_COMM_WORLD_LOCAL_RANK", 0, G_MAXINT, n, &present, &v, error))
    return NULL;
  env->local_rank = present ? (int)v : 0;
  if (!get_int(envp, "OMPI_COMM_WORLD_LOCAL_SIZE", 1, G_MAXINT, "a positive integer", &present, &v,
               error))
    return NULL;
  env->local_world_size = present ? (int)v : 1;
  env->group_rank = env->rank / env->local_world_size;

  g_clear_pointer(&env->master_addr, g_free);
  if (env->local_world_size == env->world_size)
    env->master_addr = g_strdup("127.0.0.1");
  if (!read_job_id(envp, "OMPI_MCA_ess_base_jobid", NULL, env, error) ||
      !read_master(envp, env, error))
    return NULL;
  if (!check_consistent(env, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                        "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
                        "ranks span several nodes: pass `mpirun -x MASTER_ADDR=<first host>`",
                        error))
    return NULL;
  if (env->master_addr == NULL)
    env->master_addr = g_strdup("127.0.0.1");
  return g_steal_pointer(&env);
}

/* ---- the job secret and token ---- */

gboolean cohort_dist_check_secret(const char *secret, GError **error)
{
  gsize n = strlen(secret);
  if (n < COHORT_JOB_TOKEN_MIN || n > 4096) {
    env_error(error,
              "%s is %zu bytes long; use %d to 4096 random characters (e.g. `openssl rand -hex "
              "16`), the same on every node",
              COHORT_JOB_TOKEN_VAR, n, COHORT_JOB_TOKEN_MIN);
    return FALSE;
  }
  for (const char *p = secret; *p; p++) {
    if ((guchar)*p < 0x20 || *p == 0x7f) {
      env_error(error, "%s holds a control character; use printable characters only",
                COHORT_JOB_TOKEN_VAR);
      return FALSE;
    }
  }
  return TRUE;
}

char *cohort_dist_new_secret(GError **error)
{
  GError *local = NULL;
  char *secret = cohort_secret_new(&local);
  if (secret == NULL) {
    g_set_error_literal(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_FAILED, local->message);
    g_error_free(local);
  }
  return secret;
}

/* "NAME=value\n" for each of `names` that is set: what every rank of one job sees alike. */
static char *job_identity(const char *const *envp, const char *source, const char *const *names)
{
  GString *s = g_string_new(source);
  g_string_append_c(s, '\n');
  for (int i = 0; names[i] != NULL; i++) {
    const char *v = lookup(envp, names[i]);
    if (v != NULL)
      g_string_append_printf(s, "%s=%s\n", names[i], v);
  }
  return g_string_free(s, FALSE);
}

/* Fills env->job_secret and env->secret_source (see env.h). */
static gboolean read_secret(const char *const *envp, CohortDistEnv *env, GError **error)
{
  const char *given = lookup(envp, COHORT_JOB_TOKEN_VAR);
  if (given != NULL) {
    if (!cohort_dist_check_secret(given, error))
      return FALSE;
    env->job_secret = g_strdup(given);
    env->secret_source = COHORT_JOB_TOKEN_VAR;
    return TRUE;
  }
  if (g_str_equal(env->source, "mpi") &&
      lookup(envp, "OMPI_MCA_orte_precondition_transports") != NULL) {
    /* mpirun draws this key at random for each job and gives it to every rank. */
    static const char *const mpi_key[] = {"OMPI_MCA_orte_precondition_transports",
                                          "OMPI_MCA_ess_base_jobid", NULL};
    env->job_secret = job_identity(envp, "mpi", mpi_key);
    env->secret_source = "Open MPI's job key";
    return TRUE;
  }
  static const char *const torchrun_ids[] = {"TORCHELASTIC_RUN_ID", NULL};
  static const char *const slurm_ids[] = {"SLURM_CLUSTER_NAME", "SLURM_JOB_ID",     "SLURM_JOB_UID",
                                          "SLURM_JOB_NAME",     "SLURM_SUBMIT_DIR", NULL};
  static const char *const mpi_ids[] = {"OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE", NULL};
  const char *const *ids = g_str_equal(env->source, "slurm") ? slurm_ids
                           : g_str_equal(env->source, "mpi") ? mpi_ids
                                                             : torchrun_ids;
  g_autofree char *identity = job_identity(envp, env->source, ids);
  /* The node list under either of SLURM's names, the same on every task. */
  const char *nodes = lookup(envp, "SLURM_JOB_NODELIST");
  if (nodes == NULL)
    nodes = lookup(envp, "SLURM_NODELIST");
  env->job_secret = g_strdup_printf("%snodes=%s\n", identity,
                                    g_str_equal(env->source, "slurm") && nodes ? nodes : "");
  env->secret_source = NULL;
  return TRUE;
}

char *cohort_dist_job_token(const CohortDistEnv *env)
{
  const char *run = env->run_id ? env->run_id : "none";
  g_autofree char *job = g_strdup_printf("cohort-store/2\njob %s\n", run);
  g_autofree char *attempt = g_strdup_printf("%sattempt %d\n", job, env->restart_count);
  const char *key = env->job_secret ? env->job_secret : "";
  g_autofree char *a =
      g_compute_hmac_for_string(G_CHECKSUM_SHA256, (const guchar *)key, strlen(key), job, -1);
  g_autofree char *b =
      g_compute_hmac_for_string(G_CHECKSUM_SHA256, (const guchar *)key, strlen(key), attempt, -1);
  return g_strconcat(a, ".", b, NULL);
}

/* COHORT_STORE_FDS: the launcher's listening sockets, for global rank 0 ("3" or "3,4"). Each
 * must be an open listening TCP socket on MASTER_PORT. */
static gboolean read_store_fds(const char *const *envp, CohortDistEnv *env, GError **error)
{
  const char *value = lookup(envp, COHORT_STORE_FDS_VAR);
  if (value == NULL || env->rank != 0)
    return TRUE;
  g_auto(GStrv) parts = g_strsplit(value, ",", -1);
  for (guint i = 0; parts[i] != NULL; i++) {
    guint64 fd = 0;
    int listening = 0, type = 0;
    socklen_t len = sizeof listening, tlen = sizeof type;
    struct sockaddr_storage ss;
    socklen_t slen = sizeof ss;
    gboolean ok =
        i < COHORT_STORE_MAX_FDS && g_ascii_string_to_unsigned(parts[i], 10, 3, 65535, &fd, NULL) &&
        getsockopt((int)fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 && listening &&
        getsockopt((int)fd, SOL_SOCKET, SO_TYPE, &type, &tlen) == 0 && type == SOCK_STREAM &&
        getsockname((int)fd, (struct sockaddr *)&ss, &slen) == 0 &&
        (ss.ss_family == AF_INET || ss.ss_family == AF_INET6) &&
        ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                       : ((struct sockaddr_in *)&ss)->sin_port) == env->master_port;
    if (!ok) {
      env_error(error,
                "%s=%s: \"%s\" is not a listening socket on MASTER_PORT %d that this process "
                "inherited; it is set by cohort-run for rank 0 only (unset it)",
                COHORT_STORE_FDS_VAR, value, parts[i], env->master_port);
      return FALSE;
    }
    env->store_fds[env->n_store_fds++] = (int)fd;
  }
  return TRUE;
}

CohortDistEnv *cohort_dist_env_from_environ(const char *const *envp, GError **error)
{
  g_auto(GStrv) own = NULL;
  if (envp == NULL) {
    own = g_get_environ();
    envp = (const char *const *)own;
  }
  g_autoptr(CohortDistEnv) env = NULL;
  if (lookup(envp, "RANK") != NULL || lookup(envp, "WORLD_SIZE") != NULL)
    env = from_torchrun(envp, error);
  else if (lookup(envp, "SLURM_PROCID") != NULL)
    env = from_slurm(envp, error);
  else if (lookup(envp, "OMPI_COMM_WORLD_RANK") != NULL ||
           lookup(envp, "OMPI_COMM_WORLD_SIZE") != NULL)
    env = from_mpi(envp, error);
  else
    return cohort_dist_env_new_single();
  if (env == NULL || !read_secret(envp, env, error))
    return NULL;
  return g_steal_pointer(&env);
}

/* A rank's process group: store, config check and backend in one call. */
#include "engine/distributed/group.h"

#include <stdio.h>
#include <string.h>

/* Rank 0 warns, once, when its store can be reached from other hosts and its token derives
 * from job ids a stranger could learn. The token itself is never printed. */
static void warn_if_exposed(CohortStore *store, const CohortDistEnv *env)
{
  CohortStoreServer *server = cohort_store_get_server(store);
  if (server == NULL || !cohort_store_server_is_exposed(server) || env->secret_source != NULL)
    return;
  fprintf(stderr,
          "cohort-train: warning: the rendezvous store listens on port %d of a network address, "
          "and no job secret is set: its token derives from job ids that others on the network "
          "may learn. Export the same %s on every node (e.g. from `openssl rand -hex 16`); see "
          "docs/launching.md.\n",
          cohort_store_server_port(server), COHORT_JOB_TOKEN_VAR);
}

CohortDistGroup *cohort_dist_group_join(const CohortDistEnv *env, const CohortConfig *cfg,
                                        const char *source, int cuda_device, GError **error)
{
  g_autoptr(CohortDistGroup) g = g_new0(CohortDistGroup, 1);
  if (env->world_size <= 1)
    return g_steal_pointer(&g);
  if (cfg->distributed_backend == COHORT_BACKEND_NCCL && cuda_device < 0) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_UNSUPPORTED,
                "%s: key \"distributed_backend\": \"nccl\" needs GPU ranks (device \"cuda\", or "
                "\"auto\" with a GPU); use \"gloo\" for CPU ranks",
                source ? source : "config");
    return NULL;
  }
  g_autofree char *token = cohort_dist_job_token(env);
  g->store = cohort_store_open(env, token, cfg->timeout_s, error);
  explicit_bzero(token, strlen(token));
  if (g->store == NULL)
    return NULL;
  warn_if_exposed(g->store, env);
  if (!cohort_dist_check_config(g->store, env, cfg, cfg->timeout_s, error))
    return NULL;
  if (cfg->distributed_backend == COHORT_BACKEND_NCCL)
    g->comm = cohort_comm_new_nccl(g->store, env, cuda_device, cfg->timeout_s, error);
  else
    g->comm = cohort_comm_new_gloo(g->store, env, cfg->timeout_s, error);
  if (g->comm == NULL)
    return NULL;
  return g_steal_pointer(&g);
}

void cohort_dist_group_free(CohortDistGroup *group)
{
  if (group == NULL)
    return;
  g_clear_pointer(&group->comm, cohort_comm_free);
  g_clear_pointer(&group->store, cohort_store_free);
  g_free(group);
}

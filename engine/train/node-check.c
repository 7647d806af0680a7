/* Ranks against cores and memory; see node-check.h. */
#include "engine/train/node-check.h"

#include <string.h>
#include <unistd.h>

#include "engine/base/error.h"
#include "engine/models/registry.h"

guint64 cohort_rank_memory_estimate(const CohortConfig *cfg, gint64 *params)
{
  gint64 p = cohort_model_count_params(cfg);
  if (params)
    *params = p;
  if (p <= 0)
    return 0;
  guint copies = 2; /* weights and gradients */
  if (cfg->optimizer == COHORT_OPTIMIZER_ADAMW)
    copies += 2;
  else if (cfg->momentum > 0)
    copies += 1;
  if (cfg->ema_decay > 0)
    copies += 2; /* the EMA weights and the copy they are swapped with */
  guint64 example = cfg->data_format == COHORT_DATA_IMAGES
                        ? (guint64)cfg->image_channels * cfg->image_size * cfg->image_size
                        : (guint64)cfg->seq_len * 2; /* inputs and targets */
  return (guint64)p * copies * 4 + (guint64)cfg->batch_size * example * 4;
}

/* "Name:   12345 kB" in /proc/meminfo, in bytes. */
static guint64 meminfo(const char *name)
{
  g_autofree char *text = NULL;
  if (!g_file_get_contents("/proc/meminfo", &text, NULL, NULL))
    return 0;
  const char *p = strstr(text, name);
  return p ? g_ascii_strtoull(p + strlen(name), NULL, 10) << 10 : 0;
}

guint64 cohort_node_memory(void)
{
  guint64 total = meminfo("MemTotal:");
  g_autofree char *limit = NULL;
  if (g_file_get_contents("/sys/fs/cgroup/memory.max", &limit, NULL, NULL) &&
      g_ascii_isdigit(limit[0])) {
    guint64 cg = g_ascii_strtoull(limit, NULL, 10);
    if (cg > 0 && (total == 0 || cg < total))
      total = cg;
  }
  return total;
}

static char *gib(guint64 bytes)
{
  return g_strdup_printf("%.1f GiB", bytes / 1073741824.0);
}

gboolean cohort_node_check(const CohortConfig *cfg, const char *source, gboolean cpu,
                           int local_ranks, char **warning, GError **error)
{
  if (warning)
    *warning = NULL;
  if (!cpu)
    return TRUE;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (warning && cores > 0 && local_ranks > cores)
    *warning = g_strdup_printf(
        "%d ranks on this node but %ld CPU cores: each rank gets less than a core and runs "
        "slower than one rank alone would (nproc_per_node %ld or fewer suits this machine)",
        local_ranks, cores, cores);
  gint64 params = 0;
  guint64 per_rank = cohort_rank_memory_estimate(cfg, &params);
  guint64 machine = cohort_node_memory();
  guint64 needed = per_rank * (guint64)local_ranks;
  if (machine == 0 || per_rank == 0 || needed <= machine)
    return TRUE;
  g_autofree char *need = gib(needed), *have = gib(machine), *one = gib(per_rank);
  return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                     "%s: %d ranks on this node need at least %s of memory (%s each: "
                     "%" G_GINT64_FORMAT " parameters as fp32 weights, gradients, optimizer "
                     "state%s, and a batch of %d; activations not counted), more than this "
                     "machine's %s; allowed: fewer ranks per node (nproc_per_node), or a smaller "
                     "model or batch",
                     source ? source : "config", local_ranks, need, one, params,
                     cfg->ema_decay > 0 ? " and EMA" : "", cfg->batch_size, have);
}

/* rank_batch_sizes (rank-batches.h). */
#include "engine/config/rank-batches.h"

#include <string.h>

#include "engine/base/error.h"
#include "engine/config/config-private.h"

static const char *src(const char *source)
{
  return source ? source : "config";
}

CohortSplitKind cohort_rank_batches_kind(const CohortConfig *cfg)
{
  const char *s = cfg->rank_batch_sizes;
  if (s == NULL || *s == '\0')
    return COHORT_SPLIT_EVEN;
  g_autofree char *t = g_strstrip(g_strdup(s));
  if (*t == '\0')
    return COHORT_SPLIT_EVEN;
  return g_ascii_strcasecmp(t, "auto") == 0 ? COHORT_SPLIT_AUTO : COHORT_SPLIT_LIST;
}

#define ALLOWED                                                                                    \
  "\"\" (batch_size on every process), \"auto\", or one integer from 1 to 65536 per process "      \
  "separated by commas, like \"12,4\""

GArray *cohort_rank_batches_list(const CohortConfig *cfg, const char *source, GError **error)
{
  if (cohort_rank_batches_kind(cfg) != COHORT_SPLIT_LIST)
    return NULL;
  g_autoptr(GArray) out = g_array_new(FALSE, FALSE, sizeof(int));
  const char *p = cfg->rank_batch_sizes;
  for (int rank = 0;; rank++) {
    const char *comma = strchr(p, ',');
    g_autofree char *part = g_strstrip(comma ? g_strndup(p, (gsize)(comma - p)) : g_strdup(p));
    gint64 v = 0;
    if (!g_ascii_string_to_signed(part, 10, G_MININT64, G_MAXINT64, &v, NULL)) {
      /* quoted and escaped (and cut short) as the config's messages show any text */
      g_autoptr(JsonNode) node = config_string_node(part);
      g_autofree char *shown = config_node_text(node);
      cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                  "%s: key \"rank_batch_sizes\": entry %d (rank %d) is %s, not an integer; "
                  "allowed: " ALLOWED,
                  src(source), rank, rank, shown);
      return NULL;
    }
    if (v < 1 || v > COHORT_MAX_RANK_BATCH) {
      cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                  "%s: key \"rank_batch_sizes\": entry %d (rank %d) is %" G_GINT64_FORMAT
                  "%s; allowed: " ALLOWED,
                  src(source), rank, rank, v,
                  v < 1 ? ": every process needs at least one example of each micro-batch"
                        : ", above the most one process may take");
      return NULL;
    }
    int iv = (int)v;
    g_array_append_val(out, iv);
    if (out->len > COHORT_MAX_RANK_BATCH) {
      cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                  "%s: key \"rank_batch_sizes\" has more than %d entries; allowed: " ALLOWED,
                  src(source), COHORT_MAX_RANK_BATCH);
      return NULL;
    }
    if (!comma)
      break;
    p = comma + 1;
  }
  return g_steal_pointer(&out);
}

gint64 cohort_rank_batches_global(const CohortConfig *cfg, int world)
{
  g_autoptr(GArray) list = cohort_rank_batches_list(cfg, NULL, NULL);
  gint64 sum = 0;
  if (list) {
    for (guint i = 0; i < list->len; i++)
      sum += g_array_index(list, int, i);
  } else {
    sum = (gint64)cfg->batch_size * MAX(world, 1);
  }
  return MIN(sum, (gint64)G_MAXINT);
}

gboolean cohort_rank_batches_start(const CohortConfig *cfg, const char *source, int world,
                                   int *shares, GError **error)
{
  GError *local = NULL;
  g_autoptr(GArray) list = cohort_rank_batches_list(cfg, source, &local);
  if (local) {
    g_propagate_error(error, local);
    return FALSE;
  }
  if (list && (int)list->len != world)
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "%s: key \"rank_batch_sizes\": \"%s\" gives %u process%s a share but the "
                       "job has %d; allowed: one share per process (%d entries), \"auto\" or \"\"",
                       src(source), cfg->rank_batch_sizes, list->len, list->len == 1 ? "" : "es",
                       world, world);
  for (int r = 0; r < world; r++)
    shares[r] = list ? g_array_index(list, int, r) : cfg->batch_size;
  return TRUE;
}

char *cohort_rank_batches_text(const int *shares, int world)
{
  GString *s = g_string_new(NULL);
  for (int r = 0; r < world; r++)
    g_string_append_printf(s, "%s%d", r ? "," : "", shares[r]);
  return g_string_free(s, FALSE);
}

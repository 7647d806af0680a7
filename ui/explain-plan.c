#include "ui/explain-plan.h"

#include <glib/gi18n.h>
#include <json-glib/json-glib.h>

#include "engine/base/json-read.h"
#include "engine/progress/explain-json.h"

/* Member `name` of `o` (called `where` in messages), a JSON node of `type`, or NULL after
 * setting `error`. */
static JsonNode *need(JsonObject *o, const char *where, const char *name, JsonNodeType type,
                      GError **error)
{
  JsonNode *n = o != NULL ? json_object_get_member(o, name) : NULL;
  if (n != NULL && JSON_NODE_TYPE(n) == type)
    return n;
  /* TRANSLATORS: a member of the engine's JSON, like memory.per_rank.params_bytes. */
  g_set_error(error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA, _("the plan has no %s%s"), where, name);
  return NULL;
}

static gboolean need_int(JsonObject *o, const char *where, const char *name, gint64 *out,
                         GError **error)
{
  JsonNode *n = need(o, where, name, JSON_NODE_VALUE, error);
  if (n == NULL)
    return FALSE;
  if (json_node_get_value_type(n) != G_TYPE_INT64) {
    g_set_error(error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA, _("the plan has no %s%s"), where, name);
    return FALSE;
  }
  *out = json_node_get_int(n);
  return TRUE;
}

gboolean cohort_explain_memory_read(const char *json, CohortExplainMemory *m, GError **error)
{
  *m = (CohortExplainMemory){.fits = TRUE};
  g_autoptr(JsonNode) root = cohort_json_parse_strict(json, -1, "--explain", 0, error);
  if (root == NULL)
    return FALSE;
  JsonObject *top = JSON_NODE_HOLDS_OBJECT(root) ? json_node_get_object(root) : NULL;
  JsonNode *mem = need(top, "", COHORT_EXPLAIN_MEMORY, JSON_NODE_OBJECT, error);
  if (mem == NULL)
    return FALSE;
  JsonObject *mo = json_node_get_object(mem);
  const char *in_mem = COHORT_EXPLAIN_MEMORY ".";
  const char *in_rank = COHORT_EXPLAIN_MEMORY "." COHORT_EXPLAIN_PER_RANK ".";
  JsonNode *pr = need(mo, in_mem, COHORT_EXPLAIN_PER_RANK, JSON_NODE_OBJECT, error);
  gint64 stage = 0, local = 0;
  if (pr == NULL || !need_int(mo, in_mem, COHORT_EXPLAIN_ZERO_STAGE, &stage, error) ||
      !need_int(mo, in_mem, COHORT_EXPLAIN_LOCAL_RANKS, &local, error))
    return FALSE;
  m->zero_stage = (int)stage;
  m->local_ranks = (int)local;
  JsonObject *ro = json_node_get_object(pr);
  const struct {
    const char *name;
    gint64 *to;
  } bytes[] = {
      {COHORT_EXPLAIN_PARAMS_BYTES, &m->params},
      {COHORT_EXPLAIN_GRADS_BYTES, &m->grads},
      {COHORT_EXPLAIN_OPTIM_BYTES, &m->optim},
      {COHORT_EXPLAIN_EMA_BYTES, &m->ema},
      {COHORT_EXPLAIN_ACTIVATIONS_BYTES, &m->activations},
      {COHORT_EXPLAIN_WORKING_BYTES, &m->working},
      {COHORT_EXPLAIN_TEACHER_BYTES, &m->teacher},
      {COHORT_EXPLAIN_STARTUP_BYTES, &m->startup},
  };
  for (guint i = 0; i < G_N_ELEMENTS(bytes); i++)
    if (!need_int(ro, in_rank, bytes[i].name, bytes[i].to, error))
      return FALSE;
  /* The machine's figures are left out for GPU ranks (each checks its device). */
  if (!json_object_has_member(mo, COHORT_EXPLAIN_MACHINE_BYTES))
    return TRUE;
  JsonNode *fits = need(mo, in_mem, COHORT_EXPLAIN_FITS, JSON_NODE_VALUE, error);
  if (!need_int(mo, in_mem, COHORT_EXPLAIN_MACHINE_BYTES, &m->machine, error) ||
      !need_int(mo, in_mem, COHORT_EXPLAIN_MACHINE_NEED_BYTES, &m->machine_need, error) ||
      fits == NULL)
    return FALSE;
  m->fits = json_node_get_boolean(fits);
  return TRUE;
}

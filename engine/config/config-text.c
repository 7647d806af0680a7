/* The text form of values: cohort_config_get and --set (cohort_config_set and friends). */
#include "engine/config/config-private.h"

#include <math.h>
#include <string.h>

/* ---- text form of values, --set ---- */

char *cohort_config_get(const CohortConfig *cfg, const char *key)
{
  const CohortConfigKey *k = cohort_config_find_key(key);
  if (!k)
    return NULL;
  switch (k->type) {
  case COHORT_KEY_INT:
    return g_strdup_printf("%d", *CFIELD(cfg, k, int));
  case COHORT_KEY_INT64:
    return g_strdup_printf("%" G_GINT64_FORMAT, *CFIELD(cfg, k, gint64));
  case COHORT_KEY_DOUBLE: {
    GString *out = g_string_new(NULL);
    config_append_double(out, *CFIELD(cfg, k, double));
    return g_string_free(out, FALSE);
  }
  case COHORT_KEY_BOOL:
    return g_strdup(*CFIELD(cfg, k, gboolean) ? "true" : "false");
  case COHORT_KEY_STRING: {
    const char *s = *CFIELD(cfg, k, char *);
    return g_strdup(s ? s : "");
  }
  case COHORT_KEY_CHOICE: {
    int v = *CFIELD(cfg, k, int);
    if (v < 0 || (guint)v >= g_strv_length((char **)k->choices))
      return g_strdup_printf("%d", v);
    return g_strdup(k->choices[v]);
  }
  case COHORT_KEY_INT_LIST: {
    const GArray *list = *CFIELD(cfg, k, GArray *);
    GString *out = g_string_new(NULL);
    for (guint i = 0; list && i < list->len; i++)
      g_string_append_printf(out, "%s%d", i ? "," : "", g_array_index(list, int, i));
    return g_string_free(out, FALSE);
  }
  }
  return NULL;
}

static gboolean set_one(CohortConfig *cfg, const char *key, const char *value, const char *source,
                        gboolean cross_check, GError **error)
{
  const CohortConfigKey *k = cohort_config_find_key(key);
  if (!k) {
    if (g_strcmp0(key, "version") == 0)
      g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                  "%s: key \"version\" cannot be set; Cohort always writes version %d",
                  config_src(source), COHORT_CONFIG_VERSION);
    else
      config_unknown_key_error(source, key ? key : "", error);
    return FALSE;
  }
  g_autoptr(JsonNode) node = config_text_to_node(k, value ? value : "");
  /* A list's parsed form would not look like what was typed. */
  const char *typed = k->type == COHORT_KEY_INT_LIST ? value : NULL;
  if (!config_check_typed(k, node, typed, source, error))
    return FALSE;
  g_autoptr(CohortConfig) edited = cohort_config_copy(cfg);
  config_store_node(edited, k, node);
  if (cross_check && !cohort_config_validate(edited, source, error))
    return FALSE;
  /* Swap so that the caller's pointer stays valid and the old fields are freed with `edited`. */
  CohortConfig old = *cfg;
  *cfg = *edited;
  *edited = old;
  return TRUE;
}

gboolean cohort_config_set(CohortConfig *cfg, const char *key, const char *value,
                           const char *source, GError **error)
{
  return set_one(cfg, key, value, source, TRUE, error);
}

static gboolean split_assignment(const char *assignment, char **key, const char **value,
                                 const char *source, GError **error)
{
  const char *eq = assignment ? strchr(assignment, '=') : NULL;
  if (!eq) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "%s: \"%s\" is not an assignment; allowed: key=value, like learning_rate=3e-4",
                config_src(source), assignment ? assignment : "");
    return FALSE;
  }
  *key = g_strstrip(g_strndup(assignment, (gsize)(eq - assignment)));
  *value = eq + 1;
  return TRUE;
}

gboolean cohort_config_apply_assignments(CohortConfig *cfg, const char *const *assignments,
                                         const char *source, GError **error)
{
  g_autoptr(CohortConfig) edited = cohort_config_copy(cfg);
  for (guint i = 0; assignments && assignments[i]; i++) {
    g_autofree char *key = NULL;
    const char *value = NULL;
    if (!split_assignment(assignments[i], &key, &value, source, error) ||
        !set_one(edited, key, value, source, FALSE, error))
      return FALSE;
  }
  if (!cohort_config_validate(edited, source, error))
    return FALSE;
  CohortConfig old = *cfg;
  *cfg = *edited;
  *edited = old;
  return TRUE;
}

gboolean cohort_config_set_assignment(CohortConfig *cfg, const char *assignment, const char *source,
                                      GError **error)
{
  g_autofree char *key = NULL;
  const char *value = NULL;
  return split_assignment(assignment, &key, &value, source, error) &&
         cohort_config_set(cfg, key, value, source, error);
}

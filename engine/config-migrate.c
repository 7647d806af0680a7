/* Older config versions: the renames and the migrations that bring a file to the current
 * version on load. */
#include "engine/config-private.h"

#include <math.h>
#include <string.h>

/* Keys renamed by a migration; a file of the current version that still uses an old name gets
 * the new one suggested. */
typedef struct {
  const char *old_name;
  const char *new_name;
} Rename;

static const Rename v0_renames[] = {
    {"multi_gpu", "enable_multi_gpu"},
    {"backend", "distributed_backend"},
    {"lr", "learning_rate"},
};

const char *config_renamed_key(const char *name)
{
  for (guint i = 0; i < G_N_ELEMENTS(v0_renames); i++)
    if (strcmp(name, v0_renames[i].old_name) == 0)
      return cohort_config_find_key(v0_renames[i].new_name)->name;
  return NULL;
}

/* ---- versions ---- */

typedef gboolean (*Migration)(JsonObject *obj, const char *source, GError **error);

/* Version 0 is the seeds' spelling: three keys had shorter names. */
static gboolean migrate_0_to_1(JsonObject *obj, const char *source, GError **error)
{
  for (guint i = 0; i < G_N_ELEMENTS(v0_renames); i++) {
    const Rename *r = &v0_renames[i];
    JsonNode *old = json_object_get_member(obj, r->old_name);
    if (!old)
      continue;
    if (json_object_has_member(obj, r->new_name)) {
      g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                  "%s: key \"%s\" is the version 0 name of \"%s\", and both are given; "
                  "allowed: only one of them",
                  config_src(source), r->old_name, r->new_name);
      return FALSE;
    }
    json_object_set_member(obj, r->new_name, json_node_copy(old));
    json_object_remove_member(obj, r->old_name);
  }
  return TRUE;
}

/* migrations[v] turns a version-v object into version v + 1. */
static const Migration migrations[] = {migrate_0_to_1};
G_STATIC_ASSERT(G_N_ELEMENTS(migrations) == COHORT_CONFIG_VERSION);

gboolean config_migrate(JsonObject *obj, const char *source, GError **error)
{
  const char *s = config_src(source);
  JsonNode *vn = json_object_get_member(obj, "version");
  if (!vn) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_VERSION,
                "%s: no \"version\" key; add \"version\": %d as the first key", s,
                COHORT_CONFIG_VERSION);
    return FALSE;
  }
  if (!config_is_int_node(vn) || json_node_get_int(vn) < 0) {
    g_autofree char *shown = config_node_text(vn);
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_VERSION,
                "%s: key \"version\": %s is not allowed; allowed: an integer from 0 to %d", s,
                shown, COHORT_CONFIG_VERSION);
    return FALSE;
  }
  gint64 version = json_node_get_int(vn);
  if (version > COHORT_CONFIG_VERSION) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_VERSION,
                "%s: \"version\" %" G_GINT64_FORMAT
                " is newer than this build's version %d; use a newer Cohort to read it",
                s, version, COHORT_CONFIG_VERSION);
    return FALSE;
  }
  for (gint64 v = version; v < COHORT_CONFIG_VERSION; v++)
    if (!migrations[v](obj, source, error))
      return FALSE;
  return TRUE;
}

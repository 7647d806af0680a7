/* state.json: written by hand (doubles exact, the uint64 RNG as a string) and read back with
 * every field checked, so a damaged file is an error naming the field, never a wrong resume. */
#include "engine/progress/checkpoint-state.h"

#include <math.h>
#include <string.h>
#include <json-glib/json-glib.h>

#include "engine/base/json-read.h"
#include "engine/base/json-write.h"

void cohort_state_extras_clear(CohortStateExtras *x)
{
  g_clear_pointer(&x->model_sha256, g_free);
  g_clear_pointer(&x->config_json, g_free);
  g_clear_pointer(&x->base_path, g_free);
  g_clear_pointer(&x->adapter_path, g_free);
}

static gboolean valid_run_id(const char *id)
{
  gsize n = strlen(id);
  if (n == 0 || n >= COHORT_RUN_ID_LEN)
    return FALSE;
  for (gsize i = 0; i < n; i++)
    if (!g_ascii_isxdigit(id[i]) || g_ascii_isupper(id[i]))
      return FALSE;
  return TRUE;
}

/* `key`: the absolute path of a config path value (builtin: resolved). */
static void append_path(GString *out, const char *key, const char *value)
{
  g_autofree char *resolved = cohort_resolve_path(value);
  g_autofree char *abs = g_canonicalize_filename(resolved, NULL);
  g_string_append_printf(out, "  \"%s\": ", key);
  cohort_json_append_string(out, abs);
  g_string_append(out, ",\n");
}

/* The reference to the base of a checkpoint of only what learns (docs/finetuning.md). */
static void append_base(GString *out, const CohortConfig *cfg, const CohortTrainState *st)
{
  if (st->base_sha256[0]) {
    append_path(out, "base_path", cfg->init_from);
    g_string_append_printf(out, "  \"base_sha256\": \"%s\",\n", st->base_sha256);
  }
  if (cfg->adapter_from && *cfg->adapter_from)
    append_path(out, "adapter_path", cfg->adapter_from);
  g_string_append_printf(out, "  \"frozen_sha256\": \"%s\",\n", st->frozen_sha256);
}

char *cohort_state_to_json(const CohortConfig *cfg, const CohortTrainState *st, const char *sha,
                           gboolean has_ema, gboolean has_optim, GError **error)
{
  /* The config's own JSON (doubles keep their ".0"), parsed first so that text a reader
   * would refuse fails the save rather than the load. */
  g_autofree char *cfg_json = cohort_config_to_json(cfg, FALSE);
  g_autoptr(JsonNode) cfg_node = cohort_json_parse_strict(cfg_json, -1, "config", 0, error);
  if (!cfg_node)
    return NULL;
  GString *out = g_string_new("{\n");
  g_string_append_printf(out, "  \"version\": %d,\n", st->frozen_sha256[0] ? 2 : 1);
  if (st->run_id[0])
    g_string_append_printf(out, "  \"run_id\": \"%s\",\n", st->run_id);
  g_string_append_printf(out, "  \"step\": %" G_GINT64_FORMAT ",\n", st->step);
  g_string_append_printf(out, "  \"epoch\": %" G_GINT64_FORMAT ",\n", st->epoch);
  g_string_append_printf(out, "  \"batch_in_epoch\": %" G_GINT64_FORMAT ",\n", st->batch_in_epoch);
  if (st->global_batch > 0) {
    g_string_append_printf(out, "  \"global_batch\": %" G_GINT64_FORMAT ",\n", st->global_batch);
    g_string_append_printf(out, "  \"epoch_samples\": %" G_GINT64_FORMAT ",\n", st->epoch_samples);
  }
  g_string_append_printf(out, "  \"tokens_seen\": %" G_GINT64_FORMAT ",\n", st->tokens_seen);
  /* A string: JSON numbers lose uint64 precision in many readers. */
  g_string_append_printf(out, "  \"sample_rng\": \"%" G_GUINT64_FORMAT "\",\n", st->sample_rng);
  g_string_append(out, "  \"loss_scale\": ");
  cohort_json_append_double(out, st->loss_scale);
  g_string_append(out, ",\n");
  g_string_append_printf(out, "  \"scale_good_steps\": %" G_GINT64_FORMAT ",\n",
                         st->scale_good_steps);
  g_string_append_printf(out, "  \"skipped_steps\": %" G_GINT64_FORMAT ",\n", st->skipped_steps);
  g_string_append_printf(out, "  \"has_ema\": %s,\n", has_ema ? "true" : "false");
  g_string_append_printf(out, "  \"has_optim\": %s,\n", has_optim ? "true" : "false");
  g_string_append_printf(out, "  \"model_sha256\": \"%s\",\n", sha);
  if (st->teacher_sha256[0]) {
    g_autofree char *path = cohort_resolve_path(cfg->teacher_from);
    g_string_append(out, "  \"teacher_path\": ");
    cohort_json_append_string(out, path);
    g_string_append(out, ",\n");
    g_string_append_printf(out, "  \"teacher_sha256\": \"%s\",\n", st->teacher_sha256);
  }
  if (st->frozen_sha256[0])
    append_base(out, cfg, st);
  g_string_append(out, "  \"config\": ");
  g_string_append(out, cfg_json);
  g_string_append(out, "\n}\n");
  return g_string_free(out, FALSE);
}

static gboolean get_int(JsonObject *o, const char *path, const char *key, gint64 *out,
                        GError **error)
{
  JsonNode *n = json_object_get_member(o, key);
  if (!n || !JSON_NODE_HOLDS_VALUE(n) || json_node_get_value_type(n) != G_TYPE_INT64 ||
      json_node_get_int(n) < 0)
    return cohort_checkpoint_corrupt(error, path, "\"%s\" is missing or not a non-negative integer",
                                     key);
  *out = json_node_get_int(n);
  return TRUE;
}

static const char *get_string(JsonObject *o, const char *path, const char *key, GError **error)
{
  JsonNode *n = json_object_get_member(o, key);
  if (!n || !JSON_NODE_HOLDS_VALUE(n) || json_node_get_value_type(n) != G_TYPE_STRING) {
    cohort_checkpoint_corrupt(error, path, "\"%s\" is missing or not a string", key);
    return NULL;
  }
  return json_node_get_string(n);
}

static gboolean get_bool(JsonObject *o, const char *path, const char *key, gboolean *out,
                         GError **error)
{
  JsonNode *n = json_object_get_member(o, key);
  if (!n)
    return TRUE; /* optional: absent in early checkpoints */
  if (!JSON_NODE_HOLDS_VALUE(n) || json_node_get_value_type(n) != G_TYPE_BOOLEAN)
    return cohort_checkpoint_corrupt(error, path, "\"%s\" is not true or false", key);
  *out = json_node_get_boolean(n);
  return TRUE;
}

/* Optional since fp16 training: absent, the trainer starts the scale afresh. */
static gboolean parse_loss_scale(JsonObject *o, const char *path, CohortTrainState *s,
                                 GError **error)
{
  if (!json_object_has_member(o, "loss_scale"))
    return TRUE;
  JsonNode *ls = json_object_get_member(o, "loss_scale");
  GType t = JSON_NODE_HOLDS_VALUE(ls) ? json_node_get_value_type(ls) : G_TYPE_INVALID;
  if (t != G_TYPE_DOUBLE && t != G_TYPE_INT64)
    return cohort_checkpoint_corrupt(error, path, "\"loss_scale\" is not a number");
  s->loss_scale = json_node_get_double(ls);
  if (!(s->loss_scale >= 0) || isinf(s->loss_scale))
    return cohort_checkpoint_corrupt(error, path, "\"loss_scale\" %g is not a finite number >= 0",
                                     s->loss_scale);
  if (!get_int(o, path, "scale_good_steps", &s->scale_good_steps, error) ||
      !get_int(o, path, "skipped_steps", &s->skipped_steps, error))
    return FALSE;
  if (s->skipped_steps > s->step)
    return cohort_checkpoint_corrupt(error, path,
                                     "\"skipped_steps\" %" G_GINT64_FORMAT
                                     " is out of range (0 to step %" G_GINT64_FORMAT ")",
                                     s->skipped_steps, s->step);
  return TRUE;
}

/* An optional digest `key`, 64 lowercase hex digits, into out[65] (left "" when absent). */
static gboolean parse_digest(JsonObject *o, const char *path, const char *key, char *out,
                             GError **error)
{
  if (!json_object_has_member(o, key))
    return TRUE;
  const char *sha = get_string(o, path, key, error);
  if (!sha)
    return FALSE;
  gboolean ok = strlen(sha) == 64;
  for (const char *c = sha; ok && *c; c++)
    ok = g_ascii_isxdigit(*c) && !g_ascii_isupper(*c);
  if (!ok)
    return cohort_checkpoint_corrupt(error, path, "\"%s\" \"%s\" is not 64 lowercase hex digits",
                                     key, sha);
  g_strlcpy(out, sha, 65);
  return TRUE;
}

/* An optional absolute path `key` (a file name, at most 4095 bytes) into *out. */
static gboolean parse_path(JsonObject *o, const char *path, const char *key, char **out,
                           GError **error)
{
  if (!json_object_has_member(o, key))
    return TRUE;
  const char *p = get_string(o, path, key, error);
  if (!p)
    return FALSE;
  if (!g_path_is_absolute(p) || strlen(p) >= 4096)
    return cohort_checkpoint_corrupt(
        error, path, "\"%s\" \"%.200s\" is not an absolute path of at most 4095 bytes", key, p);
  *out = g_strdup(p);
  return TRUE;
}

/* Since version 2, a checkpoint of only what learns: frozen_sha256 (required), the base's
 * path and digest together or neither (a base made from the seed), adapter_path optional. */
static gboolean parse_base(JsonObject *o, const char *path, gint64 version, CohortTrainState *s,
                           CohortStateExtras *x, GError **error)
{
  if (!parse_digest(o, path, "base_sha256", s->base_sha256, error) ||
      !parse_digest(o, path, "frozen_sha256", s->frozen_sha256, error) ||
      !parse_path(o, path, "base_path", &x->base_path, error) ||
      !parse_path(o, path, "adapter_path", &x->adapter_path, error))
    return FALSE;
  if ((version >= 2) != (s->frozen_sha256[0] != 0))
    return cohort_checkpoint_corrupt(error, path,
                                     "version %" G_GINT64_FORMAT
                                     " %s \"frozen_sha256\"; allowed: version 2 with it "
                                     "(a checkpoint of what learns), version 1 without",
                                     version, s->frozen_sha256[0] ? "has" : "lacks");
  if ((x->base_path != NULL) != (s->base_sha256[0] != 0))
    return cohort_checkpoint_corrupt(
        error, path, "\"%s\" is given without \"%s\"; a base file needs both",
        x->base_path ? "base_path" : "base_sha256", x->base_path ? "base_sha256" : "base_path");
  return TRUE;
}

static gboolean parse_position(JsonObject *o, const char *path, CohortTrainState *s, GError **error)
{
  if (!get_int(o, path, "step", &s->step, error) || !get_int(o, path, "epoch", &s->epoch, error) ||
      !get_int(o, path, "batch_in_epoch", &s->batch_in_epoch, error) ||
      !get_int(o, path, "tokens_seen", &s->tokens_seen, error))
    return FALSE;
  if (json_object_has_member(o, "global_batch")) {
    if (!get_int(o, path, "global_batch", &s->global_batch, error) ||
        !get_int(o, path, "epoch_samples", &s->epoch_samples, error))
      return FALSE;
    if (s->global_batch == 0)
      return cohort_checkpoint_corrupt(error, path,
                                       "\"global_batch\" is 0; allowed: a positive integer");
  }
  if (json_object_has_member(o, "run_id")) {
    const char *id = get_string(o, path, "run_id", error);
    if (!id)
      return FALSE;
    if (!valid_run_id(id))
      return cohort_checkpoint_corrupt(error, path,
                                       "\"run_id\" \"%s\" is not 1 to 32 lowercase hex digits", id);
    g_strlcpy(s->run_id, id, sizeof s->run_id);
  }
  const char *rng = get_string(o, path, "sample_rng", error);
  if (!rng)
    return FALSE;
  if (!g_ascii_string_to_unsigned(rng, 10, 0, G_MAXUINT64, &s->sample_rng, NULL))
    return cohort_checkpoint_corrupt(
        error, path, "\"sample_rng\" \"%s\" is not an unsigned 64-bit integer", rng);
  return TRUE;
}

gboolean cohort_state_parse(const char *text, gsize len, const char *path, CohortTrainState *st,
                            CohortStateExtras *x, GError **error)
{
  g_autoptr(GError) local = NULL;
  g_autoptr(JsonNode) root = cohort_json_parse_strict(text, (gssize)len, path, 0, &local);
  if (!root) {
    g_set_error_literal(error, COHORT_CHECKPOINT_ERROR, COHORT_CHECKPOINT_ERROR_CORRUPT,
                        local->message);
    return FALSE;
  }
  if (!JSON_NODE_HOLDS_OBJECT(root))
    return cohort_checkpoint_corrupt(error, path, "not a JSON object");
  JsonObject *o = json_node_get_object(root);

  gint64 version = 0;
  CohortTrainState s = {0};
  CohortStateExtras e = {0};
  if (!get_int(o, path, "version", &version, error))
    return FALSE;
  if (version < 1 || version > COHORT_CHECKPOINT_VERSION)
    return cohort_checkpoint_corrupt(error, path,
                                     "version %" G_GINT64_FORMAT " is not supported (1 to %d)",
                                     version, COHORT_CHECKPOINT_VERSION);
  if (!parse_position(o, path, &s, error) || !parse_loss_scale(o, path, &s, error) ||
      !parse_digest(o, path, "teacher_sha256", s.teacher_sha256, error) ||
      !parse_base(o, path, version, &s, &e, error) ||
      !get_bool(o, path, "has_ema", &e.has_ema, error) ||
      !get_bool(o, path, "has_optim", &e.has_optim, error)) {
    cohort_state_extras_clear(&e);
    return FALSE;
  }
  const char *sha = get_string(o, path, "model_sha256", error);
  if (!sha) {
    cohort_state_extras_clear(&e);
    return FALSE;
  }
  JsonNode *cfg_node = json_object_get_member(o, "config");
  if (!cfg_node || !JSON_NODE_HOLDS_OBJECT(cfg_node)) {
    cohort_state_extras_clear(&e);
    return cohort_checkpoint_corrupt(error, path, "\"config\" is missing or not an object");
  }
  e.model_sha256 = g_strdup(sha);
  e.config_json = cohort_json_to_string(cfg_node, FALSE);
  *st = s;
  *x = e;
  return TRUE;
}

/* TrainConfig: JSON load and save, validation, --set, hashing and diffs, all driven by the key
 * table in config-keys.c. A value is checked as a JsonNode whether it came from a file or from
 * --set text, so both paths give the same messages. */
#include "engine/config/config-private.h"
#include "engine/config/rank-batches.h"
#include "engine/base/error.h"
#include "engine/base/json-read.h"
#include "engine/base/json-write.h"
#include "cohort-build-config.h"

#include <errno.h>
#include <fcntl.h>
#include <json-glib/json-glib.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

GQuark cohort_config_error_quark(void)
{
  return g_quark_from_static_string("cohort-config-error-quark");
}

/* Choice fields are stored through an int pointer. */
G_STATIC_ASSERT(sizeof(CohortDataFormat) == sizeof(int));
G_STATIC_ASSERT(sizeof(CohortLrSchedule) == sizeof(int));
G_STATIC_ASSERT(sizeof(CohortOptimizerKind) == sizeof(int));
G_STATIC_ASSERT(sizeof(CohortPrecision) == sizeof(int));
G_STATIC_ASSERT(sizeof(CohortDevice) == sizeof(int));
G_STATIC_ASSERT(sizeof(CohortDistBackend) == sizeof(int));
G_STATIC_ASSERT(sizeof(CohortLrScaling) == sizeof(int));
G_STATIC_ASSERT(sizeof(CohortFinetune) == sizeof(int));
G_STATIC_ASSERT(sizeof(gboolean) == sizeof(int));

/* ---- life cycle ---- */

CohortConfig *cohort_config_new(void)
{
  guint n;
  const CohortConfigKey *keys = cohort_config_keys(&n);
  CohortConfig *cfg = g_new0(CohortConfig, 1);
  cfg->version = COHORT_CONFIG_VERSION;
  for (guint i = 0; i < n; i++) {
    g_autoptr(JsonNode) node = config_text_to_node(&keys[i], cohort_config_key_default(&keys[i]));
    g_autoptr(GError) error = NULL;
    if (!config_check_node(&keys[i], node, "the built-in defaults", &error))
      g_error("%s", error->message);
    config_store_node(cfg, &keys[i], node);
  }
  return cfg;
}

void cohort_config_free(CohortConfig *cfg)
{
  guint n;
  const CohortConfigKey *keys = cohort_config_keys(&n);
  if (!cfg)
    return;
  for (guint i = 0; i < n; i++) {
    if (keys[i].type == COHORT_KEY_STRING) {
      g_free(*FIELD(cfg, &keys[i], char *));
    } else if (keys[i].type == COHORT_KEY_INT_LIST) {
      GArray *list = *FIELD(cfg, &keys[i], GArray *);
      if (list)
        g_array_unref(list);
    }
  }
  g_free(cfg);
}

CohortConfig *cohort_config_copy(const CohortConfig *cfg)
{
  guint n;
  const CohortConfigKey *keys = cohort_config_keys(&n);
  CohortConfig *copy = g_memdup2(cfg, sizeof *cfg);
  for (guint i = 0; i < n; i++) {
    if (keys[i].type == COHORT_KEY_STRING) {
      char **field = FIELD(copy, &keys[i], char *);
      *field = g_strdup(*field);
    } else if (keys[i].type == COHORT_KEY_INT_LIST) {
      GArray **field = FIELD(copy, &keys[i], GArray *);
      const GArray *old = *field;
      *field = g_array_new(FALSE, FALSE, sizeof(int));
      if (old)
        g_array_append_vals(*field, old->data, old->len);
    }
  }
  return copy;
}

/* ---- key names ---- */

static guint edit_distance(const char *a, const char *b)
{
  gsize la = strlen(a), lb = strlen(b);
  g_autofree guint *prev = g_new(guint, lb + 1);
  g_autofree guint *cur = g_new(guint, lb + 1);
  for (gsize j = 0; j <= lb; j++)
    prev[j] = (guint)j;
  for (gsize i = 1; i <= la; i++) {
    cur[0] = (guint)i;
    for (gsize j = 1; j <= lb; j++) {
      guint sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
      cur[j] = MIN(sub, MIN(prev[j], cur[j - 1]) + 1);
    }
    guint *t = prev;
    prev = cur;
    cur = t;
  }
  return prev[lb];
}

const char *cohort_config_suggest_key(const char *name)
{
  guint n_keys;
  const CohortConfigKey *keys = cohort_config_keys(&n_keys);
  if (!name || !*name || strlen(name) > 200)
    return NULL;
  const char *renamed = config_renamed_key(name);
  if (renamed)
    return renamed;

  g_autofree char *lower = g_ascii_strdown(name, -1);
  const char *best = NULL;
  guint best_d = G_MAXUINT;
  for (guint i = 0; i < n_keys; i++) {
    guint d = edit_distance(lower, keys[i].name);
    if (d < best_d) {
      best_d = d;
      best = keys[i].name;
    }
  }
  /* Close means a few typos (up to 3) or up to a third of a long name; short names get less
   * room, or every three-letter word would "mean" eps. */
  int len = (int)strlen(name);
  int limit = MAX(len / 3, MIN(3, (len - 1) / 2));
  return (int)best_d <= limit ? best : NULL;
}

void config_unknown_key_error(const char *source, const char *name, GError **error)
{
  const char *why = config_meaningless_key(name);
  if (why != NULL) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_UNKNOWN_KEY,
                "%s: key \"%s\" is not a Cohort setting: %s; remove it", config_src(source), name,
                why);
    return;
  }
  const char *suggestion = cohort_config_suggest_key(name);
  /* Escaped and cut short: a name may hold a newline or be a megabyte long. */
  g_autoptr(JsonNode) node = config_string_node(name);
  g_autofree char *shown = config_node_text(node);
  if (suggestion)
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_UNKNOWN_KEY,
                "%s: unknown key %s; did you mean \"%s\"?", config_src(source), shown, suggestion);
  else
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_UNKNOWN_KEY,
                "%s: unknown key %s; the keys are listed in docs/config.md", config_src(source),
                shown);
}

/* ---- validation ---- */

/* Whether text may go through a tokenizer: one is named, or init_from is a folder that holds
 * one, or a path not there yet (the trainer then says what is missing). */
static gboolean may_have_tokenizer(const CohortConfig *cfg)
{
  g_autofree char *found = cohort_config_tokenizer_path(cfg);
  if (found)
    return TRUE;
  if (!cohort_config_takes_tokenizer(cfg) || !cfg->init_from || !*cfg->init_from)
    return FALSE;
  g_autofree char *init = cohort_resolve_path(cfg->init_from);
  return !g_file_test(init, G_FILE_TEST_EXISTS);
}

gboolean cohort_config_validate(const CohortConfig *cfg, const char *source, GError **error)
{
  const char *s = config_src(source);
  guint n;
  const CohortConfigKey *keys = cohort_config_keys(&n);
  for (guint i = 0; i < n; i++) {
    g_autoptr(JsonNode) node = config_value_node(cfg, &keys[i]);
    if (!config_check_node(&keys[i], node, source, error))
      return FALSE;
  }

  if (cfg->image_channels == 2)
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "%s: key \"image_channels\": 2 is not allowed; allowed: 1 (grey) or 3 "
                       "(RGB)",
                       s);
  float mean[3], std[3];
  if (!cohort_config_image_normalisation(cfg, source, mean, std, error))
    return FALSE;
  /* a llama's explicit head_dim need not be n_embd / n_head (its family checks the rest) */
  gboolean head_dim =
      cfg->head_dim > 0 && cohort_config_key_in_effect(cohort_config_find_key("head_dim"), cfg);
  if (cfg->n_embd % cfg->n_head != 0 && !head_dim)
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "%s: key \"n_embd\": %d is not a multiple of \"n_head\": %d; allowed: "
                       "n_embd divisible by n_head, like %d",
                       s, cfg->n_embd, cfg->n_head,
                       cfg->n_head * MAX(1, cfg->n_embd / cfg->n_head));
  GError *split_error = NULL;
  g_autoptr(GArray) split = cohort_rank_batches_list(cfg, source, &split_error);
  if (split_error) {
    g_propagate_error(error, split_error);
    return FALSE;
  }
  if (cfg->node_rank >= cfg->num_nodes)
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "%s: key \"node_rank\": %d is not allowed with \"num_nodes\": %d; allowed: "
                       "an integer from 0 to %d",
                       s, cfg->node_rank, cfg->num_nodes, cfg->num_nodes - 1);
  /* With a tokenizer, the trainer checks vocab_size against it (it has to read it). */
  if (cfg->data_format == COHORT_DATA_TEXT && cfg->vocab_size != 256 && !may_have_tokenizer(cfg))
    return cohort_fail(
        error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
        "%s: key \"vocab_size\": %d is not allowed with \"data_format\": \"text\" and "
        "\"tokenizer\": \"bytes\"; allowed: 256 (one token per byte), a tokenizer (key "
        "\"tokenizer\", or an init_from folder that holds one), or data_format \"tokens\"",
        s, cfg->vocab_size);
  if (cfg->data_format == COHORT_DATA_CHAT && !may_have_tokenizer(cfg))
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "%s: key \"data_format\": \"chat\" is not allowed with \"tokenizer\": "
                       "\"bytes\"; allowed: a tokenizer folder whose tokenizer_config.json holds "
                       "a chat_template (key \"tokenizer\", or an init_from folder that holds one)",
                       s);
  return TRUE;
}

gboolean cohort_config_check_supported(const CohortConfig *cfg, const char *source, GError **error)
{
  /* Whether a GPU is there is the trainer's run-time check (cohort_device_select). */
  if ((cfg->cpu_matmul == COHORT_CPU_MATMUL_ONEDNN ||
       cfg->cpu_matmul == COHORT_CPU_MATMUL_MEASURE) &&
      !COHORT_HAVE_ONEDNN) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_UNSUPPORTED,
                "%s: key \"cpu_matmul\": \"%s\" is not supported: this build has no oneDNN; "
                "allowed: \"auto\" or \"openblas\"",
                config_src(source),
                cfg->cpu_matmul == COHORT_CPU_MATMUL_ONEDNN ? "onednn" : "measure");
    return FALSE;
  }
  if (cfg->device == COHORT_DEVICE_CUDA && !COHORT_HAVE_CUDA) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_UNSUPPORTED,
                "%s: key \"device\": \"cuda\" is not supported: this build has no CUDA path; "
                "use \"cpu\" or \"auto\"",
                config_src(source));
    return FALSE;
  }
  return TRUE;
}

char *cohort_config_hash(const CohortConfig *cfg)
{
  g_autofree char *json = cohort_config_to_json(cfg, FALSE);
  return g_compute_checksum_for_string(G_CHECKSUM_SHA256, json, -1);
}

GStrv cohort_config_diff(const CohortConfig *a, const CohortConfig *b)
{
  guint n;
  const CohortConfigKey *keys = cohort_config_keys(&n);
  g_autoptr(GStrvBuilder) names = g_strv_builder_new();
  for (guint i = 0; i < n; i++) {
    /* Text forms are exact (doubles print their shortest round-trip spelling). */
    g_autofree char *va = cohort_config_get(a, keys[i].name);
    g_autofree char *vb = cohort_config_get(b, keys[i].name);
    if (strcmp(va, vb) != 0)
      g_strv_builder_add(names, keys[i].name);
  }
  return g_strv_builder_end(names);
}

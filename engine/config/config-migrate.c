/* Older config versions: the spellings of version 0 (the seeds' keys: what the trainers Cohort
 * grew from, and PyTorch DDP scripts, call these settings), how each becomes a current key on
 * load, and the seed keys that mean nothing in Cohort, refused with the reason. */
#include "engine/config/config-private.h"

#include <math.h>
#include <string.h>

/* A value of version 0 rewritten for its new key; FALSE with an error naming the old key. */
typedef gboolean (*Convert)(const char *old_name, JsonNode *old, JsonNode **out, const char *source,
                            GError **error);

typedef struct {
  const char *old_name;
  const char *new_name;
  Convert convert; /* NULL: the value as it is */
  const char *note;
} Spelling;

static gboolean bad_value(const char *source, const char *old_name, JsonNode *old,
                          const char *allowed, GError **error)
{
  g_autofree char *shown = config_node_text(old);
  g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
              "%s: key \"%s\" (version 0): %s is not allowed; allowed: %s", config_src(source),
              old_name, shown, allowed);
  return FALSE;
}

static gboolean is_bool(JsonNode *n)
{
  return JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == G_TYPE_BOOLEAN;
}

static gboolean is_string(JsonNode *n)
{
  return JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == G_TYPE_STRING;
}

/* use_amp: PyTorch's autocast with a GradScaler, which is fp16. */
static gboolean convert_amp(const char *old_name, JsonNode *old, JsonNode **out, const char *source,
                            GError **error)
{
  if (!is_bool(old))
    return bad_value(source, old_name, old, "true or false", error);
  *out = config_string_node(json_node_get_boolean(old) ? "fp16" : "fp32");
  return TRUE;
}

/* mixed_precision: accelerate's "no" | "fp16" | "bf16", or a boolean as use_amp. */
static gboolean convert_mixed(const char *old_name, JsonNode *old, JsonNode **out,
                              const char *source, GError **error)
{
  if (is_bool(old))
    return convert_amp(old_name, old, out, source, error);
  const char *v = is_string(old) ? json_node_get_string(old) : NULL;
  const char *to = g_strcmp0(v, "no") == 0 || g_strcmp0(v, "fp32") == 0 ? "fp32"
                   : g_strcmp0(v, "fp16") == 0                          ? "fp16"
                   : g_strcmp0(v, "bf16") == 0                          ? "bf16"
                                                                        : NULL;
  if (to == NULL)
    return bad_value(source, old_name, old, "\"no\", \"fp16\", \"bf16\", true or false", error);
  *out = config_string_node(to);
  return TRUE;
}

/* use_ema: on with the usual decay. */
static gboolean convert_ema(const char *old_name, JsonNode *old, JsonNode **out, const char *source,
                            GError **error)
{
  if (!is_bool(old))
    return bad_value(source, old_name, old, "true or false", error);
  *out = json_node_new(JSON_NODE_VALUE);
  json_node_set_double(*out, json_node_get_boolean(old) ? 0.999 : 0.0);
  return TRUE;
}

/* gpu_ids: a list, or the text "0,1" the seeds' command lines gave. */
static gboolean convert_gpu_ids(const char *old_name, JsonNode *old, JsonNode **out,
                                const char *source, GError **error)
{
  if (JSON_NODE_HOLDS_ARRAY(old)) {
    *out = json_node_copy(old);
    return TRUE;
  }
  const CohortConfigKey *key = cohort_config_find_key("device_indexes");
  if (!is_string(old))
    return bad_value(source, old_name, old, key->allowed, error);
  *out = config_text_to_node(key, json_node_get_string(old));
  return TRUE;
}

static const Spelling v0_spellings[] = {
    {"multi_gpu", "enable_multi_gpu", NULL, NULL},
    {"backend", "distributed_backend", NULL, NULL},
    {"initial_port", "master_port", NULL, NULL},
    {"sync_bn", "sync_batchnorm", NULL, NULL},
    {"use_amp", "precision", convert_amp,
     "true becomes \"fp16\" (autocast with loss scaling), "
     "false \"fp32\""},
    {"mixed_precision", "precision", convert_mixed,
     "\"no\" becomes \"fp32\"; \"fp16\" and \"bf16\" stay; true and false as use_amp"},
    {"num_gpus", "nproc_per_node", NULL,
     "processes (GPUs) per node; above 1 it also turns enable_multi_gpu on unless the file sets "
     "it"},
    {"gpu_ids", "device_indexes", convert_gpu_ids, "a list, or text like \"0,1\""},
    {"batch_size_per_gpu", "batch_size", NULL, "batch_size is per process"},
    {"num_epochs", "epochs", NULL, NULL},
    {"gradient_clipping", "grad_clip", NULL, NULL},
    {"lr", "learning_rate", NULL, NULL},
    {"use_ema", "ema_decay", convert_ema, "true becomes 0.999, false 0 (off)"},
    {"output_dir", "workspace_dir", NULL, NULL},
    {"data_path", "train_data", NULL, NULL},
};

/* Seed keys with no meaning here, and why; in any version. */
static const struct {
  const char *name;
  const char *why;
} meaningless[] = {
    {"local_rank", "each process learns its rank from its launcher (LOCAL_RANK, or cohort-train "
                   "--local_rank), never from a file every rank shares"},
    {"rank", "each process learns its rank from its launcher (RANK), never from a file every "
             "rank shares"},
    {"dist_url", "the rendezvous address is master_addr and master_port"},
    {"init_method", "the rendezvous address is master_addr and master_port"},
    {"find_unused_parameters", "every parameter of Cohort's models gets a gradient in every "
                               "step, so the reducer never waits for unused ones"},
    {"gradient_as_bucket_view", "gradients already live in one buffer that the reducer "
                                "all-reduces in place, bucket by bucket"},
    {"static_graph", "Cohort's models have a fixed graph; there is nothing to declare"},
    {"cudnn_benchmark", "Cohort calls no cuDNN; its kernels have no autotuning to switch on"},
    {"torch_compile", "there is no PyTorch in Cohort to compile; the kernels are compiled C and "
                      "CUDA"},
};

const char *config_renamed_key(const char *name)
{
  for (guint i = 0; i < G_N_ELEMENTS(v0_spellings); i++)
    if (strcmp(name, v0_spellings[i].old_name) == 0)
      return cohort_config_find_key(v0_spellings[i].new_name)->name;
  return NULL;
}

const char *config_meaningless_key(const char *name)
{
  for (guint i = 0; i < G_N_ELEMENTS(meaningless); i++)
    if (strcmp(name, meaningless[i].name) == 0)
      return meaningless[i].why;
  return NULL;
}

void config_append_spellings_doc(GString *out)
{
  g_string_append(out, "| version 0 key | current key | how the value moves |\n"
                       "| --- | --- | --- |\n");
  for (guint i = 0; i < G_N_ELEMENTS(v0_spellings); i++) {
    const Spelling *sp = &v0_spellings[i];
    g_string_append_printf(out, "| `%s` | `%s` | %s |\n", sp->old_name, sp->new_name,
                           sp->note ? sp->note : "as it is");
  }
  g_string_append(out, "\nRefused in every version, with the reason, since they mean nothing in "
                       "Cohort:\n\n| key | why |\n| --- | --- |\n");
  for (guint i = 0; i < G_N_ELEMENTS(meaningless); i++)
    g_string_append_printf(out, "| `%s` | %s |\n", meaningless[i].name, meaningless[i].why);
}

/* ---- versions ---- */

typedef gboolean (*Migration)(JsonObject *obj, const char *source, GError **error);

/* Version 0 is the seeds' spelling. */
static gboolean migrate_0_to_1(JsonObject *obj, const char *source, GError **error)
{
  /* num_gpus above 1 asked for several GPUs: multi-GPU on, unless the file says otherwise. */
  JsonNode *gpus = json_object_get_member(obj, "num_gpus");
  gboolean wants_many = gpus && config_is_int_node(gpus) && json_node_get_int(gpus) > 1 &&
                        !json_object_has_member(obj, "multi_gpu") &&
                        !json_object_has_member(obj, "enable_multi_gpu");
  for (guint i = 0; i < G_N_ELEMENTS(v0_spellings); i++) {
    const Spelling *sp = &v0_spellings[i];
    JsonNode *old = json_object_get_member(obj, sp->old_name);
    if (!old)
      continue;
    if (json_object_has_member(obj, sp->new_name)) {
      g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                  "%s: key \"%s\" is the version 0 name of \"%s\", and both are given; "
                  "allowed: only one of them",
                  config_src(source), sp->old_name, sp->new_name);
      return FALSE;
    }
    JsonNode *value = NULL;
    if (sp->convert == NULL)
      value = json_node_copy(old);
    else if (!sp->convert(sp->old_name, old, &value, source, error))
      return FALSE;
    json_object_set_member(obj, sp->new_name, value);
    json_object_remove_member(obj, sp->old_name);
  }
  if (wants_many)
    json_object_set_boolean_member(obj, "enable_multi_gpu", TRUE);
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

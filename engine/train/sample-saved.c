#include "engine/train/sample-saved.h"

#include "engine/train/run-outputs.h"

#include <sys/stat.h>

#include "data/images.h"
#include "engine/base/fileio.h"
#include "engine/model/checkpoint-base.h"
#include "engine/model/checkpoint.h"
#include "engine/model/frozen-store.h"
#include "engine/train/device.h"
#include "engine/model/lora-io.h"
#include "engine/model/hf-weights.h"
#include "engine/base/json-read.h"
#include "engine/models/gpt-io.h"
#include "engine/models/llama-io.h"
#include "engine/model/model-io.h"
#include "engine/model/model.h"
#include "kernels/backend.h"
#include "engine/models/registry.h"

/* What --sample was given: a checkpoint folder, a folder as a run's export leaves it, or a plain
 * Hugging Face folder of a family that reads one (config.json, its weights, its tokenizer). */
typedef enum { SAVED_CHECKPOINT, SAVED_EXPORT, SAVED_HF } SavedKind;

/* GPT-2's config.json: model_type "gpt2", or GPT-2's own key names without one. Anything else
 * (and a file that cannot be read: its reader says why) is the llama family's to accept or
 * refuse by name. */
static gboolean is_gpt2(const char *hf_cfg)
{
  gsize len = 0;
  g_autofree char *text = cohort_file_read_regular(hf_cfg, 16u << 20, "a config.json", &len, NULL);
  g_autoptr(JsonNode) root =
      text ? cohort_json_parse_strict(text, (gssize)len, hf_cfg, 0, NULL) : NULL;
  if (!root || !JSON_NODE_HOLDS_OBJECT(root))
    return FALSE;
  JsonObject *o = json_node_get_object(root);
  JsonNode *type = json_object_get_member(o, "model_type");
  if (type && JSON_NODE_HOLDS_VALUE(type) && json_node_get_value_type(type) == G_TYPE_STRING)
    return g_str_equal(json_node_get_string(type), "gpt2");
  return json_object_has_member(o, "n_layer");
}

/* A plain Hugging Face folder's config: the family's shape keys from config.json, the folder as
 * init_from (its tokenizer comes with it) and a context of the smaller of the base's
 * max_position_embeddings and COHORT_HF_SAMPLE_SEQ_LEN (seq_len sizes the key/value cache and
 * the --perplexity windows; --set seq_len changes it). */
static CohortConfig *hf_folder_config(const char *path, const char *hf_cfg, GError **error)
{
  g_autoptr(CohortConfig) cfg = cohort_config_new();
  int maxpos = 0;
  if (is_gpt2(hf_cfg)) {
    /* its context is its position table's (n_positions) */
    if (!cohort_gpt_read_hf_config(hf_cfg, cfg, error))
      return NULL;
  } else {
    if (!cohort_llama_read_hf_config(hf_cfg, cfg, &maxpos, error))
      return NULL;
    cfg->seq_len = maxpos > 0 ? MIN(maxpos, COHORT_HF_SAMPLE_SEQ_LEN) : COHORT_HF_SAMPLE_SEQ_LEN;
  }
  cfg->data_format = COHORT_DATA_TEXT;
  g_free(cfg->init_from);
  cfg->init_from = g_strdup(path);
  return g_steal_pointer(&cfg);
}

/* The config and, for a checkpoint, its state. */
static CohortConfig *load_config(const char *path, SavedKind *kind, CohortTrainState *st,
                                 GError **error)
{
  g_autofree char *state = g_build_filename(path, "state.json", NULL);
  g_autofree char *cfg_file = g_build_filename(path, "cohort-config.json", NULL);
  g_autofree char *hf_cfg = g_build_filename(path, "config.json", NULL);
  if (g_file_test(state, G_FILE_TEST_IS_REGULAR)) {
    *kind = SAVED_CHECKPOINT;
    CohortConfig *cfg = NULL;
    return cohort_checkpoint_read_state(path, st, &cfg, error) ? cfg : NULL;
  }
  if (g_file_test(cfg_file, G_FILE_TEST_IS_REGULAR)) {
    *kind = SAVED_EXPORT;
    return cohort_config_load_file(cfg_file, error);
  }
  if (g_file_test(hf_cfg, G_FILE_TEST_IS_REGULAR)) {
    *kind = SAVED_HF;
    return hf_folder_config(path, hf_cfg, error);
  }
  g_set_error(error, G_FILE_ERROR, G_FILE_ERROR_NOENT,
              "%s: neither a checkpoint folder (state.json), a model folder (cohort-config.json) "
              "nor a Hugging Face folder (config.json)",
              path);
  return NULL;
}

/* The weights: a checkpoint's EMA when it has one (else its parameters) — over its base,
 * rebuilt from the file it names (or `init_from`, when --set moved it) when it holds only what
 * learns —, a folder's model-ema.safetensors when present (else model.safetensors), with
 * finetune lora plus the folder's adapter/ (its weights as trained: the export keeps no EMA of
 * the adapters); a Hugging Face folder's weights as init_from imports them. */
static gboolean load_weights(CohortModel *m, const char *path, SavedKind kind,
                             const char *init_from, GError **error)
{
  if (kind == SAVED_HF) /* as a run starting from it reads it */
    return cohort_model_import(m, path, NULL, error);
  if (kind == SAVED_CHECKPOINT) {
    g_autofree float *ema = g_new(float, m->n_params);
    if (!cohort_checkpoint_rebuild_base(path, m, init_from, error) ||
        !cohort_checkpoint_load(path, m, NULL, ema, NULL, NULL, error))
      return FALSE;
    cohort_model_upload_params(m, ema);
    return TRUE;
  }
  g_autofree char *ema_file = g_build_filename(path, "model-ema.safetensors", NULL);
  g_autofree char *file = g_build_filename(path, "model.safetensors", NULL);
  g_autofree char *index = g_build_filename(path, COHORT_HF_INDEX_FILE, NULL);
  gboolean ema = g_file_test(ema_file, G_FILE_TEST_EXISTS);
  if (!ema && !g_file_test(file, G_FILE_TEST_EXISTS) && g_file_test(index, G_FILE_TEST_EXISTS)) {
    /* an export cut into shards (max_shard_size_mb): read as the family imports them */
    if (!cohort_model_import(m, index, NULL, error))
      return FALSE;
  } else if (!cohort_model_load(m, ema ? ema_file : file, error)) {
    return FALSE;
  }
  /* finetune lora: the folder's model is the base, its adapter beside it (adapter/) */
  g_autofree char *adapter = g_build_filename(path, "adapter", NULL);
  return !m->lora || cohort_lora_load(m, adapter, error);
}

/* The class names saved beside the model (a checkpoint's are in its workspace); NULL when
 * there is no classes.json. A classes.json that cannot be read is an error, never ignored. */
static gboolean class_names(const char *path, gboolean is_checkpoint, GStrv *names, GError **error)
{
  g_autofree char *file = is_checkpoint ? g_build_filename(path, "..", "..", "classes.json", NULL)
                                        : g_build_filename(path, "classes.json", NULL);
  *names = NULL;
  if (!g_file_test(file, G_FILE_TEST_EXISTS) && !g_file_test(file, G_FILE_TEST_IS_SYMLINK))
    return TRUE;
  *names = cohort_image_classes_read(file, error);
  return *names != NULL;
}

/* --sample -o (or the default name): a new file or a regular one to replace, in a folder that
 * exists, and none of the files the sample is made from (engine/base/outputs.h): the saved
 * model's, and its base's (`init_from`, NULL before the config is read). Checked before the
 * model is loaded, so a wrong path costs nothing; no folder is made. */
static gboolean check_output(const char *output, const char *path, const char *init_from,
                             GError **error)
{
  g_autoptr(CohortOutputs) io = cohort_outputs_new();
  cohort_outputs_add_model_input(io, path);
  g_autofree char *workspace_classes = g_build_filename(path, "..", "..", "classes.json", NULL);
  cohort_outputs_add_input(io, workspace_classes);
  cohort_outputs_add_model_input(io, init_from);
  if (!cohort_outputs_add(io, output, "-o", error))
    return FALSE;
  g_autofree char *dir = g_path_get_dirname(output);
  if (!g_file_test(dir, G_FILE_TEST_IS_DIR)) {
    g_set_error(error, G_FILE_ERROR, G_FILE_ERROR_NOENT,
                "-o %s: the folder %s does not exist; allowed: a file in an existing folder "
                "(create the folder first)",
                output, dir);
    return FALSE;
  }
  return TRUE;
}

CohortModel *cohort_model_load_saved(const char *path, const char *const *sets, int max_batch,
                                     CohortConfig **cfg_out, gint64 *step, GError **error)
{
  SavedKind kind = SAVED_EXPORT;
  CohortTrainState st = {0};
  g_autoptr(CohortConfig) cfg = load_config(path, &kind, &st, error);
  g_autofree char *saved_init = cfg ? g_strdup(cfg->init_from) : NULL;
  if (!cfg || (sets && !cohort_config_apply_assignments(cfg, sets, "--set", error)) ||
      !cohort_config_check_supported(cfg, path, error) ||
      !cohort_model_check_config(cfg, path, error))
    return NULL;
  CohortComputeDevice dev;
  if (!cohort_device_select(cfg, path, 0, 1, &dev, error))
    return NULL;
  /* frozen_dtype bf16: a model that only samples keeps its base whole (on any device), rounded
   * as the run had it (an export holds it rounded; a checkpoint rebuilds it unrounded). */
  CohortFrozenDtype frozen_dtype = cfg->frozen_dtype;
  cfg->frozen_dtype = COHORT_FROZEN_FP32;
  g_autoptr(CohortModel) m = cohort_model_new(dev.be, cfg, max_batch, error);
  cfg->frozen_dtype = frozen_dtype;
  /* A checkpoint's base is where it recorded it, unless --set init_from names it anew. */
  const char *moved = g_strcmp0(saved_init, cfg->init_from) != 0 ? cfg->init_from : NULL;
  if (!m || !load_weights(m, path, kind, moved, error) ||
      !cohort_model_check_finite(m, path, error))
    return NULL;
  if (frozen_dtype == COHORT_FROZEN_BF16 && cfg->finetune != COHORT_FINETUNE_FULL)
    cohort_frozen_store_round(m);
  if (step)
    *step = st.step;
  if (cfg_out)
    *cfg_out = g_steal_pointer(&cfg);
  return g_steal_pointer(&m);
}

CohortConfig *cohort_saved_config(const char *path, const char *const *sets, GError **error)
{
  SavedKind kind = SAVED_EXPORT;
  CohortTrainState st = {0};
  g_autoptr(CohortConfig) cfg = load_config(path, &kind, &st, error);
  if (!cfg || (sets && !cohort_config_apply_assignments(cfg, sets, "--set", error)))
    return NULL;
  return g_steal_pointer(&cfg);
}

/* The tokenizer a saved model was trained with: the files an export put beside the weights,
 * else the one its config names (a checkpoint's config names the path the run used). */
static gboolean saved_tokenizer(const char *path, gboolean is_checkpoint, const CohortConfig *cfg,
                                CohortTokenizer **tok, GError **error)
{
  g_autofree char *named = cohort_config_tokenizer_path(cfg);
  const char *from = !is_checkpoint && cohort_tokenizer_in_folder(path, NULL) ? path : named;
  if (!from)
    return TRUE;
  *tok = cohort_tokenizer_load(from, error);
  if (!*tok)
    return FALSE;
  /* a padded embedding (more rows than tokens) samples only real tokens (text-sample.c) */
  if (cohort_tokenizer_vocab_size(*tok) > cfg->vocab_size) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "%s: the tokenizer %s has %d tokens but the model's vocab_size is %d; allowed: a "
                "vocab_size of at least the tokenizer's",
                path, from, cohort_tokenizer_vocab_size(*tok), cfg->vocab_size);
    return FALSE;
  }
  return TRUE;
}

gboolean cohort_saved_tokenizer(const char *path, const CohortConfig *cfg, CohortTokenizer **tok,
                                GError **error)
{
  g_autofree char *state = g_build_filename(path, "state.json", NULL);
  return saved_tokenizer(path, g_file_test(state, G_FILE_TEST_IS_REGULAR), cfg, tok, error);
}

JsonObject *cohort_sample_saved(const char *path, const char *const *sets, const char *output,
                                GError **error)
{
  if (output && !check_output(output, path, NULL, error))
    return NULL;
  /* The class names before the model: a bad classes.json costs no model load. */
  g_autofree char *state = g_build_filename(path, "state.json", NULL);
  gboolean is_checkpoint = g_file_test(state, G_FILE_TEST_IS_REGULAR);
  g_auto(GStrv) classes = NULL;
  if (!class_names(path, is_checkpoint, &classes, error))
    return NULL;
  g_autoptr(CohortConfig) cfg = NULL;
  gint64 step = 0;
  /* Sampling batches: a guided grid runs conditional and unconditional rows together; text
   * is one sequence (a model built for more would hold 32 × seq_len logits for nothing). */
  g_autoptr(CohortConfig) peek = cohort_saved_config(path, sets, error);
  if (!peek)
    return NULL;
  int max_batch = cohort_config_takes_tokenizer(peek) ? 1 : 32;
  g_autoptr(CohortModel) m = cohort_model_load_saved(path, sets, max_batch, &cfg, &step, error);
  if (!m)
    return NULL;
  if (!m->ops->sample) {
    g_set_error(
        error, G_IO_ERROR, G_IO_ERROR_NOT_SUPPORTED,
        "%s: a %s model does not generate samples (--sample is for gpt, llama and dit models)",
        path, cfg->model);
    return NULL;
  }
  g_autofree char *default_out = g_strdup_printf("sample-step-%" G_GINT64_FORMAT ".png", step);
  if (!check_output(output ? output : default_out, path, cfg->init_from, error))
    return NULL;
  g_autoptr(CohortTokenizer) tok = NULL;
  if (!saved_tokenizer(path, is_checkpoint, cfg, &tok, error))
    return NULL;
  /* A prompt named on the command line is what the sample shows, even where the run's config
   * lists sample_prompts for its periodic samples (unless the command line sets those too). */
  gboolean named_prompt = FALSE, named_list = FALSE;
  for (guint i = 0; sets && sets[i]; i++) {
    named_prompt = named_prompt || g_str_has_prefix(sets[i], "sample_prompt=");
    named_list = named_list || g_str_has_prefix(sets[i], "sample_prompts=");
  }
  if (named_prompt && !named_list) {
    g_free(cfg->sample_prompts);
    cfg->sample_prompts = g_strdup("");
  }
  guint64 rng = (guint64)cfg->seed ^ 0x5eed5a3b1e5ULL;
  CohortSampleRequest req = {
      .cfg = cfg,
      .step = step,
      .workspace = ".",
      .image_path = output ? output : default_out,
      .rng = &rng,
      .class_names = (const char *const *)classes,
      .tokenizer = tok,
  };
  JsonObject *fields = json_object_new();
  if (!m->ops->sample(m, &req, fields, error)) {
    json_object_unref(fields);
    return NULL;
  }
  return fields;
}

/* A Llama-family Hugging Face folder as the frozen text encoder (see text-encoder.h): its
 * config.json, the weights of the blocks up to the layer read, its tokenizer, and a fingerprint
 * of their contents. */
#include "engine/models/text-encoder-private.h"

#include <string.h>

#include "engine/base/error.h"
#include "engine/base/fileio.h"
#include "engine/model/hf-weights.h"
#include "engine/models/llama-io.h"
#include "engine/models/llama-private.h"

#define ALLOWED_FOLDER                                                                             \
  "allowed: \"builtin\" or a Hugging Face Llama, Mistral, Qwen2 or Qwen3 folder (config.json, "    \
  "its weights and tokenizer)"

/* An error about the folder: key text_encoder, its value, what is wrong. */
static gboolean folder_error(GError **error, const char *value, const char *what)
{
  return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                     "config: key \"text_encoder\": \"%s\": %s; " ALLOWED_FOLDER, value, what);
}

/* Every tensor of `m` from the folder's weights (the blocks built are the first ones of the
 * folder's; the later blocks and lm_head are not read). */
static gboolean load_weights(CohortModel *m, const CohortHfWeights *w, GError **error)
{
  g_autofree float *host = g_try_new0(float, m->n_params);
  if (!host)
    return cohort_fail(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_IO,
                       "%s: out of memory for %zu parameters", cohort_hf_weights_main_file(w),
                       m->n_params);
  for (guint i = 0; i < m->n_tensors; i++) {
    const CohortTensorInfo *t = &m->tensors[i];
    const CohortStFile *f = cohort_hf_weights_find(w, t->name, NULL);
    if (!f)
      return cohort_fail(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_MISSING,
                         "%s: tensor \"%s\" is missing; its config.json's model needs it",
                         cohort_hf_weights_main_file(w), t->name);
    int64_t shape[COHORT_TENSOR_MAX_DIMS];
    for (int d = 0; d < t->ndim; d++)
      shape[d] = t->shape[d];
    if (!cohort_safetensors_read_f32(f, t->name, t->ndim, shape, host + t->offset, error))
      return FALSE;
  }
  m->be->upload(m->params, host, m->n_params * sizeof(float));
  return TRUE;
}

/* Adds "NAME\0SHA256\0" of the file `path` to `sum`. */
static gboolean add_file(GChecksum *sum, const char *path, GError **error)
{
  g_autofree char *hex = cohort_file_sha256(path, error);
  if (!hex)
    return FALSE;
  g_autofree char *name = g_path_get_basename(path);
  g_checksum_update(sum, (const guchar *)name, strlen(name) + 1);
  g_checksum_update(sum, (const guchar *)hex, strlen(hex) + 1);
  return TRUE;
}

static gint by_name(gconstpointer a, gconstpointer b)
{
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* One SHA-256 over the contents of config.json, every weights file (the main one, then the
 * shards in name order) and the tokenizer's files. All of it is hashed, not sampled: the
 * weights are read anyway, and a weight changed in place must change the key. */
static char *folder_digest(const char *config, const CohortHfWeights *w, const CohortTokenizer *tok,
                           GError **error)
{
  g_autoptr(GChecksum) sum = g_checksum_new(G_CHECKSUM_SHA256);
  g_autoptr(GPtrArray) files = g_ptr_array_new();
  for (const char *const *name = cohort_hf_weights_names(w); *name; name++) {
    const char *path = NULL;
    cohort_hf_weights_find(w, *name, &path);
    gboolean seen = FALSE;
    for (guint i = 0; i < files->len && !seen; i++)
      seen = g_str_equal(files->pdata[i], path);
    if (!seen)
      g_ptr_array_add(files, (gpointer)path);
  }
  g_ptr_array_sort(files, by_name);
  const char *main_file = cohort_hf_weights_main_file(w);
  if (!add_file(sum, config, error) || !add_file(sum, main_file, error))
    return NULL;
  for (guint i = 0; i < files->len; i++)
    if (!g_str_equal(files->pdata[i], main_file) && !add_file(sum, files->pdata[i], error))
      return NULL;
  const char *tok_sha = cohort_tokenizer_sha256(tok);
  g_checksum_update(sum, (const guchar *)tok_sha, strlen(tok_sha) + 1);
  return g_strdup(g_checksum_get_string(sum));
}

/* The folder's tokenizer, which must fit the model's vocabulary. */
static CohortTokenizer *open_tokenizer(const char *value, const char *dir, int vocab,
                                       GError **error)
{
  if (!cohort_tokenizer_in_folder(dir, NULL)) {
    folder_error(error, value, "the folder has no tokenizer.json nor vocab.json + merges.txt");
    return NULL;
  }
  g_autoptr(CohortTokenizer) tok = cohort_tokenizer_load(dir, error);
  if (!tok) {
    g_prefix_error(error, "config: key \"text_encoder\": ");
    return NULL;
  }
  if (cohort_tokenizer_vocab_size(tok) > vocab) {
    g_autofree char *what =
        g_strdup_printf("its tokenizer has %d ids but config.json's vocab_size is %d",
                        cohort_tokenizer_vocab_size(tok), vocab);
    folder_error(error, value, what);
    return NULL;
  }
  return g_steal_pointer(&tok);
}

/* The blocks up to hidden_states index h of the folder's model, frozen and loaded. */
static CohortModel *open_model(const CohortBackend *be, CohortConfig *c, int h, const char *dir,
                               CohortHfWeights **weights, GError **error)
{
  c->n_layer = h;
  CohortLlamaShape s = cohort_family_llama_shape(c);
  s.tied = TRUE; /* no lm_head: the head is never run */
  g_autoptr(CohortHfWeights) w = cohort_hf_weights_open(dir, error);
  if (!w) {
    g_prefix_error(error, "config: key \"text_encoder\": ");
    return NULL;
  }
  cohort_model_set_creating_frozen(TRUE);
  g_autoptr(CohortModel) m = cohort_llama_new_on(be, &s, 1, error);
  cohort_model_set_creating_frozen(FALSE);
  if (!m)
    return NULL;
  m->frozen = TRUE;
  if (!load_weights(m, w, error)) {
    g_prefix_error(error, "config: key \"text_encoder\": ");
    return NULL;
  }
  *weights = g_steal_pointer(&w);
  return g_steal_pointer(&m);
}

gboolean cohort_text_encoder_open_folder(CohortTextEncoder *e, const CohortBackend *be,
                                         const CohortConfig *cfg, GError **error)
{
  const char *value = cfg->text_encoder ? cfg->text_encoder : "";
  g_autofree char *dir = cohort_resolve_path(value);
  if (!*value || !g_file_test(dir, G_FILE_TEST_IS_DIR))
    return folder_error(error, value, "no such folder");
  g_autofree char *config = g_build_filename(dir, "config.json", NULL);
  if (!g_file_test(config, G_FILE_TEST_IS_REGULAR))
    return folder_error(error, value, "the folder has no config.json");
  g_autoptr(CohortConfig) c = cohort_config_new();
  if (!cohort_llama_read_hf_config(config, c, NULL, error)) {
    g_prefix_error(error, "config: key \"text_encoder\": ");
    return FALSE;
  }
  int blocks = c->n_layer, h = cohort_text_hidden_index(cfg->text_encoder_layer, blocks);
  if (h < 0)
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "config: key \"text_encoder_layer\": %d is not a layer of text_encoder "
                       "\"%s\" (%d blocks); allowed: 1 to %d, or -1 to -%d",
                       cfg->text_encoder_layer, value, blocks, blocks, blocks);
  e->tokenizer = open_tokenizer(value, dir, c->vocab_size, error);
  if (!e->tokenizer)
    return FALSE;
  c->seq_len = e->max_tokens;
  g_autoptr(CohortHfWeights) w = NULL;
  e->model = open_model(be, c, h, dir, &w, error);
  if (!e->model)
    return FALSE;
  g_autofree char *digest = folder_digest(config, w, e->tokenizer, error);
  if (!digest) {
    g_prefix_error(error, "config: key \"text_encoder\": ");
    return FALSE;
  }
  e->width = c->n_embd;
  e->final_norm = h == blocks;
  e->encoder = cohort_encoder_new(e->tokenizer);
  e->scratch[0] = g_array_new(FALSE, FALSE, sizeof(gint32));
  e->scratch[1] = g_array_new(FALSE, FALSE, sizeof(gint32));
  e->fingerprint = g_strdup_printf("%s folder sha256 %s, layer %d of %d%s, %d tokens",
                                   cohort_family_llama_archs[c->architecture], digest, h, blocks,
                                   e->final_norm ? " (after model.norm)" : "", e->max_tokens);
  return TRUE;
}

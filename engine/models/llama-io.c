/* The llama family's weights in and out of Hugging Face folders (see llama-io.h). */
#include "engine/models/llama-io.h"
#include "engine/models/llama-private.h"

#include <math.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/base/fileio.h"
#include "engine/model/hf-weights.h"

/* The folder of `path`: itself, or the folder of an index file; NULL for a lone weights file. */
static char *folder_of(const char *path)
{
  if (g_file_test(path, G_FILE_TEST_IS_DIR))
    return g_strdup(path);
  return g_str_has_suffix(path, ".index.json") ? g_path_get_dirname(path) : NULL;
}

char *cohort_llama_import_file(const char *path)
{
  return cohort_hf_weights_main_path(path);
}

/* The settings of model `m` as a config (the keys its shape comes from; the architecture the
 * first of those that build its network). */
static CohortConfig *config_of_model(const CohortModel *m)
{
  const CohortLlamaShape *s = cohort_llama_shape(m);
  CohortConfig *c = cohort_config_new();
  g_free(c->model);
  c->model = g_strdup("llama");
  c->architecture = s->qk_norm                  ? COHORT_LLAMA_ARCH_QWEN3
                    : s->qkv_bias && !s->o_bias ? COHORT_LLAMA_ARCH_QWEN2
                                                : COHORT_LLAMA_ARCH_LLAMA;
  c->n_layer = s->n_layer, c->n_embd = s->hidden, c->n_head = s->n_head;
  c->num_key_value_heads = s->n_kv_head, c->head_dim = s->head_dim;
  c->intermediate_size = s->intermediate, c->vocab_size = s->vocab_size;
  c->seq_len = s->seq_len, c->rms_norm_eps = s->rms_eps;
  c->rope_theta = s->rope.theta, c->rope_scaling = (int)s->rope.type;
  if (s->rope.type != COHORT_ROPE_DEFAULT)
    c->rope_scaling_factor = s->rope.factor;
  if (s->rope.type == COHORT_ROPE_LLAMA3) {
    c->rope_low_freq_factor = s->rope.low_freq_factor;
    c->rope_high_freq_factor = s->rope.high_freq_factor;
    c->rope_original_max_position_embeddings = s->rope.original_max_positions;
  }
  c->attention_bias = s->o_bias, c->tie_word_embeddings = s->tied;
  return c;
}

/* Two shapes build the same network. */
static gboolean same_shape(const CohortLlamaShape *a, const CohortLlamaShape *b)
{
  return a->n_layer == b->n_layer && a->hidden == b->hidden && a->intermediate == b->intermediate &&
         a->n_head == b->n_head && a->n_kv_head == b->n_kv_head && a->head_dim == b->head_dim &&
         a->vocab_size == b->vocab_size && a->rms_eps == b->rms_eps &&
         a->rope.type == b->rope.type && a->rope.theta == b->rope.theta &&
         a->rope.factor == b->rope.factor && a->rope.low_freq_factor == b->rope.low_freq_factor &&
         a->rope.high_freq_factor == b->rope.high_freq_factor &&
         a->rope.original_max_positions == b->rope.original_max_positions &&
         a->qkv_bias == b->qkv_bias && a->o_bias == b->o_bias && a->qk_norm == b->qk_norm &&
         a->tied == b->tied;
}

/* config.json must describe the model; the message says which settings would. */
static gboolean check_folder_config(const CohortModel *m, const char *dir, GPtrArray *notes,
                                    GError **error)
{
  g_autofree char *path = g_build_filename(dir, "config.json", NULL);
  if (!g_file_test(path, G_FILE_TEST_EXISTS))
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "init_from %s: config.json is missing; allowed: a Hugging Face folder "
                       "(config.json and model.safetensors or its shards)",
                       dir);
  const CohortLlamaShape *s = cohort_llama_shape(m);
  int maxpos = 0;
  g_autoptr(CohortConfig) ours = config_of_model(m);
  g_autoptr(CohortConfig) folder = cohort_config_copy(ours);
  if (!cohort_llama_read_hf_config(path, folder, &maxpos, error))
    return FALSE;
  folder->seq_len = s->seq_len;
  CohortLlamaShape fs = cohort_family_llama_shape(folder);
  if (!same_shape(s, &fs)) {
    g_autofree char *set = cohort_llama_shape_mismatch(ours, folder);
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "%s: init_from's config.json describes another model than these "
                       "settings; set %s to use it",
                       path, set ? set : "the folder's shape keys");
  }
  if (notes && maxpos > 0 && s->seq_len > maxpos)
    g_ptr_array_add(notes, g_strdup_printf("seq_len %d is above the base's "
                                           "max_position_embeddings %d",
                                           s->seq_len, maxpos));
  return TRUE;
}

/* Tensors of the file the model has no place for: rotary inv_freq buffers of older exports,
 * and a tied model's lm_head.weight (checked against the embedding). */
static gboolean ignored(const CohortModel *m, const char *name)
{
  return g_str_has_suffix(name, ".rotary_emb.inv_freq") ||
         (cohort_llama_shape(m)->tied && g_str_equal(name, "lm_head.weight"));
}

static gboolean read_all(CohortModel *m, const CohortHfWeights *w, float *dst, GError **error)
{
  for (guint i = 0; i < m->n_tensors; i++) {
    const CohortTensorInfo *t = &m->tensors[i];
    const char *path = NULL;
    const CohortStFile *f = cohort_hf_weights_find(w, t->name, &path);
    if (!f)
      return cohort_fail(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_MISSING,
                         "%s: tensor \"%s\" is missing; the model (its config) needs it",
                         cohort_hf_weights_main_file(w), t->name);
    int64_t shape[COHORT_TENSOR_MAX_DIMS];
    for (int d = 0; d < t->ndim; d++)
      shape[d] = t->shape[d];
    if (!cohort_safetensors_read_f32(f, t->name, t->ndim, shape, dst + t->offset, error))
      return FALSE;
  }
  return TRUE;
}

/* A tied model's file may hold lm_head.weight too: it must be the embedding. */
static gboolean check_tied_head(const CohortModel *m, const CohortHfWeights *w, const float *p,
                                GError **error)
{
  const char *path = NULL;
  const CohortStFile *f = cohort_hf_weights_find(w, "lm_head.weight", &path);
  if (!f || !cohort_llama_shape(m)->tied)
    return TRUE;
  const CohortTensorInfo *e = &m->tensors[0];
  g_autofree float *h = g_try_new(float, e->numel);
  int64_t shape[2] = {e->shape[0], e->shape[1]};
  if (!h)
    return cohort_fail(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_IO,
                       "%s: out of memory", path);
  if (!cohort_safetensors_read_f32(f, "lm_head.weight", 2, shape, h, error))
    return FALSE;
  if (memcmp(h, p + e->offset, e->numel * sizeof(float)) != 0)
    return cohort_fail(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_SHAPE,
                       "%s: tensor \"lm_head.weight\" differs from \"%s\" but the model ties its "
                       "head to the embedding; allowed: tie_word_embeddings false",
                       path, e->name);
  return TRUE;
}

gboolean cohort_llama_import(CohortModel *m, const char *path, GPtrArray *notes, GError **error)
{
  g_autofree char *dir = folder_of(path);
  if (dir && !check_folder_config(m, dir, notes, error))
    return FALSE;
  g_autoptr(CohortHfWeights) w = cohort_hf_weights_open(path, error);
  if (!w)
    return FALSE;
  for (const char *const *name = cohort_hf_weights_names(w); *name; name++)
    if (!cohort_model_find_tensor(m, *name) && !ignored(m, *name)) {
      const char *file = NULL;
      cohort_hf_weights_find(w, *name, &file);
      return cohort_fail(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_SHAPE,
                         "%s: tensor \"%s\" is not part of this model (%d layers%s); the file is "
                         "for a differently shaped model",
                         file, *name, cohort_llama_shape(m)->n_layer,
                         cohort_llama_shape(m)->tied ? ", tied head" : "");
    }
  g_autofree float *tmp = g_try_new0(float, MAX(m->n_params, 1));
  if (!tmp)
    return cohort_fail(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_IO,
                       "%s: out of memory for %zu parameters", path, m->n_params);
  if (!read_all(m, w, tmp, error) || !check_tied_head(m, w, tmp, error))
    return FALSE;
  cohort_model_upload_params(m, tmp);
  if (notes && cohort_hf_weights_n_files(w) > 1)
    g_ptr_array_add(notes,
                    g_strdup_printf("read %u shards listed by %s", cohort_hf_weights_n_files(w),
                                    cohort_hf_weights_main_file(w)));
  return TRUE;
}

/* ---- export ---- */

/* The base folder's files that belong beside the weights: the tokenizer's and the generation
 * defaults, copied as they are (the run's own tokenizer export may write its files again). */
static gboolean copy_base_files(const CohortConfig *cfg, const char *dir, GError **error)
{
  static const char *const names[] = {
      "tokenizer.json",
      "tokenizer_config.json",
      "special_tokens_map.json",
      "vocab.json",
      "merges.txt",
      "tokenizer.model",
      "added_tokens.json",
      "generation_config.json",
      "chat_template.jinja",
  };
  if (!cfg || !cfg->init_from || !*cfg->init_from)
    return TRUE;
  g_autofree char *init = cohort_resolve_path(cfg->init_from);
  g_autofree char *base = folder_of(init);
  if (!base)
    return TRUE;
  g_autofree char *a = g_canonicalize_filename(base, NULL);
  g_autofree char *b = g_canonicalize_filename(dir, NULL);
  if (g_str_equal(a, b))
    return TRUE;
  for (guint i = 0; i < G_N_ELEMENTS(names); i++) {
    g_autofree char *from = g_build_filename(base, names[i], NULL);
    g_autofree char *to = g_build_filename(dir, names[i], NULL);
    if (!g_file_test(from, G_FILE_TEST_IS_REGULAR))
      continue;
    gsize len = 0;
    g_autofree char *text =
        cohort_file_read_regular(from, 256u << 20, "a tokenizer file", &len, error);
    if (!text || !cohort_write_file_atomic(to, text, len, error))
      return FALSE;
  }
  return TRUE;
}

gboolean cohort_llama_export_extra(const CohortModel *m, const CohortConfig *cfg, const char *dir,
                                   GError **error)
{
  g_autofree char *json = cohort_llama_hf_config_text(m, cfg);
  g_autofree char *path = g_build_filename(dir, "config.json", NULL);
  if (!cohort_write_file_atomic(path, json, strlen(json), error))
    return FALSE;
  double mb = cfg ? cfg->max_shard_size_mb : 5000.0;
  guint64 max_bytes = (guint64)fmax(1.0, floor(mb * 1e6));
  return cohort_hf_weights_reshard(dir, max_bytes, NULL, error) && copy_base_files(cfg, dir, error);
}

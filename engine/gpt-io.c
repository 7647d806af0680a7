/* Hugging Face GPT-2 .safetensors import and export over the model's named-tensor table. */
#include "engine/gpt-io.h"

#include <string.h>

#define HF_PREFIX "transformer."

CohortStEntry *cohort_gpt_st_entries(const CohortGpt *gpt, const float *buffer, const char *prefix,
                                     GPtrArray *names, guint *n_out)
{
  guint n = 0;
  const CohortTensorInfo *t = cohort_gpt_tensors(gpt, &n);
  CohortStEntry *e = g_new0(CohortStEntry, n > 0 ? n : 1);
  for (guint i = 0; i < n; i++) {
    char *name = g_strconcat(prefix ? prefix : "", t[i].name, NULL);
    g_ptr_array_add(names, name);
    e[i].name = name;
    e[i].data = buffer + t[i].offset;
    e[i].ndim = t[i].ndim;
    for (int d = 0; d < t[i].ndim; d++)
      e[i].shape[d] = t[i].shape[d];
  }
  *n_out = n;
  return e;
}

gboolean cohort_gpt_read_tensors(const CohortGpt *gpt, const CohortStFile *f, const char *prefix,
                                 float *dst, GError **error)
{
  guint n = 0;
  const CohortTensorInfo *t = cohort_gpt_tensors(gpt, &n);
  for (guint i = 0; i < n; i++) {
    g_autofree char *name = g_strconcat(prefix ? prefix : "", t[i].name, NULL);
    int64_t shape[2] = {t[i].shape[0], t[i].shape[1]};
    if (!cohort_safetensors_read_f32(f, name, t[i].ndim, shape, dst + t[i].offset, error))
      return FALSE;
  }
  return TRUE;
}

/* The buffers HF keeps in GPT-2 state dicts that are not parameters. */
static gboolean is_ignored_buffer(const char *name)
{
  if (!g_str_has_prefix(name, "h."))
    return FALSE;
  return g_str_has_suffix(name, ".attn.bias") || g_str_has_suffix(name, ".attn.masked_bias");
}

/* Vocabulary and context sizes get their own message: a shape error on wte/wpe is nearly
 * always a model configured for another tokenizer or context length. */
static gboolean check_embedding(const CohortGpt *gpt, const CohortStFile *f, const char *path,
                                const char *prefix, const char *name, int expect_rows,
                                const char *key, GError **error)
{
  g_autofree char *full = g_strconcat(prefix, name, NULL);
  int64_t shape[8];
  int nd = cohort_safetensors_shape(f, full, shape);
  int C = cohort_gpt_shape(gpt)->n_embd;
  if (nd == 2 && shape[1] == C && shape[0] != expect_rows) {
    g_set_error(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_SHAPE,
                "%s: tensor \"%s\" has %" G_GINT64_FORMAT " rows but the model has %s %d; set "
                "%s to %" G_GINT64_FORMAT " to use these weights",
                path, full, shape[0], key, expect_rows, key, shape[0]);
    return FALSE;
  }
  return TRUE;
}

gboolean cohort_gpt_load_hf(CohortGpt *gpt, const char *path, GError **error)
{
  g_autoptr(CohortStFile) f = cohort_safetensors_open(path, error);
  if (!f)
    return FALSE;
  const CohortGptShape *s = cohort_gpt_shape(gpt);
  const char *prefix =
      !cohort_safetensors_has(f, "wte.weight") && cohort_safetensors_has(f, HF_PREFIX "wte.weight")
          ? HF_PREFIX
          : "";

  if (!check_embedding(gpt, f, path, prefix, "wte.weight", s->vocab_size, "vocab_size", error) ||
      !check_embedding(gpt, f, path, prefix, "wpe.weight", s->seq_len, "seq_len", error))
    return FALSE;

  /* Every tensor in the file must be used or knowingly ignored: an extra "h.12.*" means the
   * file has more layers than the model. */
  gsize plen = strlen(prefix);
  for (const char *const *name = cohort_safetensors_names(f); *name; name++) {
    const char *bare = g_str_has_prefix(*name, prefix) ? *name + plen : *name;
    if (strcmp(*name, "lm_head.weight") == 0 || strcmp(bare, "lm_head.weight") == 0 ||
        is_ignored_buffer(bare) || cohort_gpt_find_tensor(gpt, bare))
      continue;
    g_set_error(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_SHAPE,
                "%s: tensor \"%s\" is not part of this model (n_layer %d, n_embd %d); the file "
                "is for a differently shaped GPT-2",
                path, *name, s->n_layer, s->n_embd);
    return FALSE;
  }

  size_t n = cohort_gpt_num_params(gpt);
  g_autofree float *tmp = g_try_new(float, n);
  if (!tmp) {
    g_set_error(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_IO,
                "%s: out of memory for %zu parameters", path, n);
    return FALSE;
  }
  if (!cohort_gpt_read_tensors(gpt, f, prefix, tmp, error))
    return FALSE;

  /* An untied head cannot be represented; a tied one is a copy of wte. */
  const char *head = cohort_safetensors_has(f, "lm_head.weight") ? "lm_head.weight" : NULL;
  g_autofree char *prefixed_head = g_strconcat(prefix, "lm_head.weight", NULL);
  if (!head && *prefix && cohort_safetensors_has(f, prefixed_head))
    head = prefixed_head;
  if (head) {
    const CohortTensorInfo *wte = cohort_gpt_find_tensor(gpt, "wte.weight");
    g_autofree float *h = g_try_new(float, wte->numel);
    int64_t shape[2] = {wte->shape[0], wte->shape[1]};
    if (!h || !cohort_safetensors_read_f32(f, head, 2, shape, h, error)) {
      if (!h)
        g_set_error(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_IO,
                    "%s: out of memory", path);
      return FALSE;
    }
    if (memcmp(h, tmp + wte->offset, wte->numel * sizeof(float)) != 0) {
      g_set_error(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_SHAPE,
                  "%s: tensor \"%s\" differs from \"%swte.weight\"; Cohort's GPT ties the "
                  "output head to the token embedding",
                  path, head, prefix);
      return FALSE;
    }
  }

  cohort_gpt_upload_params(gpt, tmp);
  return TRUE;
}

gboolean cohort_gpt_save_hf(const CohortGpt *gpt, const float *params_or_NULL, const char *path,
                            GHashTable *metadata, GError **error)
{
  /* The tensor table and parameter buffer are only read here. */
  g_autofree float *copy = NULL;
  const float *params = params_or_NULL ? params_or_NULL : cohort_gpt_params_host(gpt, &copy);
  g_autoptr(GPtrArray) names = g_ptr_array_new_with_free_func(g_free);
  guint n = 0;
  g_autofree CohortStEntry *entries = cohort_gpt_st_entries(gpt, params, "", names, &n);

  g_autoptr(GHashTable) meta = g_hash_table_new(g_str_hash, g_str_equal);
  if (metadata) {
    GHashTableIter it;
    gpointer k, v;
    g_hash_table_iter_init(&it, metadata);
    while (g_hash_table_iter_next(&it, &k, &v))
      g_hash_table_insert(meta, k, v);
  }
  if (!g_hash_table_contains(meta, "format"))
    g_hash_table_insert(meta, "format", "pt");
  return cohort_safetensors_write(path, entries, n, meta, error);
}

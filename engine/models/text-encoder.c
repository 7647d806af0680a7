/* The frozen text encoder of a text-conditioned DiT; see text-encoder.h. */
#include "engine/models/text-encoder-private.h"

#include <math.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/families/dit.h"
#include "engine/model/rng.h"
#include "engine/models/llama-private.h"

/* The built-in encoder's shape (text-encoder.h) and the seed of its weights: changing any of
 * them changes every embedding, so the fingerprint names a version. */
#define BUILTIN_BLOCKS       5
#define BUILTIN_HEADS        4
#define BUILTIN_INTERMEDIATE 128
#define BUILTIN_VOCAB        256
#define BUILTIN_SEED         0x636f686f7274ull /* "cohort" */
#define BUILTIN_VERSION      "builtin-v2"

/* The built-in weights: uniform with standard deviation 1/√fan_in for matrices (so the random
 * blocks mix tokens rather than pass the embedding through), unit-variance embeddings, norms 1. */
static void builtin_weights(CohortModel *m)
{
  float *host = g_new0(float, m->n_params);
  for (guint i = 0; i < m->n_tensors; i++) {
    const CohortTensorInfo *t = &m->tensors[i];
    float *dst = host + t->offset;
    guint64 seed = cohort_rng_tensor_seed(BUILTIN_SEED, i);
    if (t->ndim == 2 && i == 0)
      cohort_rng_fill_uniform(dst, t->numel, sqrt(3.0), seed);
    else if (t->ndim == 2)
      cohort_rng_fill_uniform(dst, t->numel, sqrt(3.0 / t->shape[1]), seed);
    else
      for (size_t k = 0; k < t->numel; k++)
        dst[k] = 1.0f;
  }
  m->be->upload(m->params, host, m->n_params * sizeof(float));
  g_free(host);
}

CohortTextEncoder *cohort_text_encoder_open(const CohortBackend *be, const CohortConfig *cfg,
                                            GError **error)
{
  g_autoptr(CohortTextEncoder) e = g_new0(CohortTextEncoder, 1);
  e->max_tokens = cfg->max_text_tokens;
  e->ids = g_new(int, e->max_tokens);
  if (g_strcmp0(cfg->text_encoder, "builtin") != 0)
    return cohort_text_encoder_open_folder(e, be, cfg, error) ? g_steal_pointer(&e) : NULL;
  int h = cohort_text_hidden_index(cfg->text_encoder_layer, BUILTIN_BLOCKS);
  if (h < 0) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "config: key \"text_encoder_layer\": %d is not a layer of the built-in text "
                "encoder; allowed: 1 to %d, or -1 to -%d",
                cfg->text_encoder_layer, BUILTIN_BLOCKS, BUILTIN_BLOCKS);
    return NULL;
  }
  CohortLlamaShape s = {
      .n_layer = h,
      .hidden = COHORT_TEXT_BUILTIN_WIDTH,
      .intermediate = BUILTIN_INTERMEDIATE,
      .n_head = BUILTIN_HEADS,
      .n_kv_head = BUILTIN_HEADS,
      .head_dim = COHORT_TEXT_BUILTIN_WIDTH / BUILTIN_HEADS,
      .vocab_size = BUILTIN_VOCAB,
      .seq_len = cfg->max_text_tokens,
      .rms_eps = 1e-6,
      .rope = {.type = COHORT_ROPE_DEFAULT, .theta = 10000.0},
      .tied = TRUE,
  };
  cohort_model_set_creating_frozen(TRUE);
  CohortModel *m = cohort_llama_new_on(be, &s, 1, error);
  cohort_model_set_creating_frozen(FALSE);
  if (!m)
    return NULL;
  m->frozen = TRUE;
  builtin_weights(m);
  e->model = m;
  e->width = s.hidden;
  /* its layers are raw block outputs, -1 included (no final norm): what v2 defined */
  e->final_norm = FALSE;
  e->fingerprint = g_strdup_printf("%s layer %d of %d, %d tokens", BUILTIN_VERSION, h,
                                   BUILTIN_BLOCKS, e->max_tokens);
  return g_steal_pointer(&e);
}

void cohort_text_encoder_free(CohortTextEncoder *e)
{
  if (!e)
    return;
  cohort_model_free(e->model);
  g_free(e->fingerprint);
  g_free(e->ids);
  cohort_encoder_free(e->encoder);
  cohort_tokenizer_free(e->tokenizer);
  for (int i = 0; i < 2; i++)
    if (e->scratch[i])
      g_array_unref(e->scratch[i]);
  g_free(e);
}

int cohort_text_encoder_width(const CohortTextEncoder *e)
{
  return e->width;
}

const char *cohort_text_encoder_fingerprint(const CohortTextEncoder *e)
{
  return e->fingerprint;
}

/* The folder tokenizer's ids of `text` into e->ids, as Hugging Face's tokenizer(text,
 * truncation=True, max_length=max_text_tokens) gives them: special tokens written in the text
 * are recognised, the post-processor adds its tokens (Llama 3's <|begin_of_text|>; Qwen's adds
 * none), and a long caption loses its last text tokens, not those. */
static gboolean folder_tokens(CohortTextEncoder *e, const char *text, int *len, GError **error)
{
  GArray *full = e->scratch[0], *bare = e->scratch[1];
  g_array_set_size(full, 0);
  g_array_set_size(bare, 0);
  gsize n = strlen(text);
  guint flags = COHORT_ENCODE_SPECIAL;
  if (!cohort_encoder_encode(e->encoder, text, n, flags | COHORT_ENCODE_ADD_SPECIAL, full, error) ||
      !cohort_encoder_encode(e->encoder, text, n, flags, bare, error))
    return FALSE;
  const gint32 *f = (const gint32 *)(void *)full->data, *b = (const gint32 *)(void *)bare->data;
  guint added = full->len - bare->len, pre = 0;
  /* where the text's ids sit among the post-processor's */
  while (pre < added && memcmp(f + pre, b, bare->len * sizeof(gint32)) != 0)
    pre++;
  guint keep = (guint)e->max_tokens > added ? MIN(bare->len, (guint)e->max_tokens - added) : 0;
  int k = 0;
  for (guint i = 0; i < pre && k < e->max_tokens; i++)
    e->ids[k++] = f[i];
  for (guint i = 0; i < keep; i++)
    e->ids[k++] = b[i];
  for (guint i = pre + bare->len; i < full->len && k < e->max_tokens; i++)
    e->ids[k++] = f[i];
  *len = k;
  return TRUE;
}

gboolean cohort_text_encoder_encode(CohortTextEncoder *e, const char *text, float **out, int *len,
                                    GError **error)
{
  *out = NULL;
  *len = 0;
  int n = 0;
  if (e->tokenizer) {
    if (!folder_tokens(e, text, &n, error)) {
      g_prefix_error(error, "text_encoder: ");
      return FALSE;
    }
  } else {
    /* the built-in tokenizer: one token per UTF-8 byte, cut at max_text_tokens */
    n = (int)MIN(strlen(text), (size_t)e->max_tokens);
    for (int i = 0; i < n; i++)
      e->ids[i] = (guint8)text[i];
  }
  *len = n;
  if (n == 0)
    return TRUE;
  const float *hidden = cohort_llama_hidden(e->model, e->ids, n, e->final_norm);
  *out = g_new(float, (size_t)n * e->width);
  e->model->be->download(*out, hidden, (size_t)n * e->width * sizeof(float));
  return TRUE;
}

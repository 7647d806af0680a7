/* The frozen text encoder of a text-conditioned DiT; see text-encoder.h. */
#include "engine/models/text-encoder.h"

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

struct CohortTextEncoder {
  CohortModel *model; /* the blocks up to the layer read, frozen */
  int width, max_tokens;
  char *fingerprint;
  int *ids; /* [max_tokens] */
};

/* hidden_states index of text_encoder_layer for an encoder of `blocks` blocks, or -1. */
static int hidden_index(int layer, int blocks)
{
  int h = layer < 0 ? blocks + 1 + layer : layer;
  return h >= 1 && h <= blocks ? h : -1;
}

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
  if (g_strcmp0(cfg->text_encoder, "builtin") != 0) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "config: key \"text_encoder\": \"%s\": reading a Llama-family folder as the "
                "text encoder is not built yet; allowed: \"builtin\"",
                cfg->text_encoder ? cfg->text_encoder : "");
    return NULL;
  }
  int h = hidden_index(cfg->text_encoder_layer, BUILTIN_BLOCKS);
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
  CohortTextEncoder *e = g_new0(CohortTextEncoder, 1);
  e->model = m;
  e->width = s.hidden;
  e->max_tokens = cfg->max_text_tokens;
  e->ids = g_new(int, e->max_tokens);
  e->fingerprint = g_strdup_printf("%s layer %d of %d, %d tokens", BUILTIN_VERSION, h,
                                   BUILTIN_BLOCKS, e->max_tokens);
  return e;
}

void cohort_text_encoder_free(CohortTextEncoder *e)
{
  if (!e)
    return;
  cohort_model_free(e->model);
  g_free(e->fingerprint);
  g_free(e->ids);
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

void cohort_text_encoder_encode(CohortTextEncoder *e, const char *text, float **out, int *len)
{
  /* the built-in tokenizer: one token per UTF-8 byte, cut at max_text_tokens */
  size_t n = MIN(strlen(text), (size_t)e->max_tokens);
  for (size_t i = 0; i < n; i++)
    e->ids[i] = (guint8)text[i];
  *len = (int)n;
  *out = NULL;
  if (n == 0)
    return;
  Llama *l = llama_of(e->model);
  cohort_llama_forward(e->model, e->ids, NULL, 1, (int)n);
  /* a forward-only model's blocks share their buffers: the last block's output is the state */
  const float *hidden = l->acts.blocks[l->shape.n_layer - 1].res_out;
  *out = g_new(float, n * e->width);
  e->model->be->download(*out, hidden, n * e->width * sizeof(float));
}

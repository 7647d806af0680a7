/* Scoring text with a saved language model (engine/train/perplexity.h). */
#include "engine/train/perplexity.h"

#include <string.h>

#include "engine/base/fileio.h"
#include "engine/model/batch.h"
#include "engine/models/registry.h"
#include "engine/train/sample-saved.h"

gboolean cohort_perplexity_ids(CohortModel *m, int seq_len, int vocab_size, const int *ids, gsize n,
                               double *loss, gint64 *predicted, GError **error)
{
  if (n < 2) {
    g_set_error(error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                "the text is %" G_GSIZE_FORMAT " token%s; allowed: at least two (a token and "
                "the next one to predict)",
                n, n == 1 ? "" : "s");
    return FALSE;
  }
  for (gsize i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= vocab_size) {
      g_set_error(error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                  "token %d (at %" G_GSIZE_FORMAT ") is outside the model's vocabulary "
                  "(vocab_size %d)",
                  ids[i], i, vocab_size);
      return FALSE;
    }
  g_autoptr(CohortBatch) batch = cohort_batch_new(1, seq_len, 0, 0, 0);
  batch->B = 1;
  batch->epoch = -1;
  double sum = 0;
  for (gsize start = 0; start + 1 < n;) {
    int T = (int)MIN((gsize)seq_len, n - 1 - start);
    batch->T = T;
    memcpy(batch->inputs, ids + start, (size_t)T * sizeof(int));
    memcpy(batch->targets, ids + start + 1, (size_t)T * sizeof(int));
    sum += (double)m->ops->forward(m, batch, COHORT_FORWARD_EVAL) * T;
    start += (gsize)T;
  }
  *predicted = (gint64)n - 1;
  *loss = sum / (double)(n - 1);
  return TRUE;
}

/* The ids of `text`: the tokenizer's, as Hugging Face's tokenizer(text) gives them, or bytes. */
static int *encode(const CohortTokenizer *tok, const char *text, gsize len, gsize *n,
                   GError **error)
{
  if (tok)
    return cohort_tokenizer_encode(tok, text, len,
                                   COHORT_ENCODE_SPECIAL | COHORT_ENCODE_ADD_SPECIAL, n, error);
  int *ids = g_new(int, MAX(len, 1));
  for (gsize i = 0; i < len; i++)
    ids[i] = (guint8)text[i];
  *n = len;
  return ids;
}

/* A text family's model with a way from text to its ids. */
static gboolean check_text_model(const char *path, const CohortConfig *cfg,
                                 const CohortTokenizer *tok, GError **error)
{
  const CohortModelClass *klass = cohort_model_class_find(cfg->model);
  gboolean text = FALSE;
  for (guint i = 0; klass && i < klass->n_formats; i++)
    text = text || klass->formats[i] == COHORT_DATA_TEXT;
  if (!text) {
    g_set_error(error, G_IO_ERROR, G_IO_ERROR_NOT_SUPPORTED,
                "%s: a %s model does not model text; allowed: --perplexity with a model of a text "
                "family (gpt, llama)",
                path, cfg->model);
    return FALSE;
  }
  if (!tok && cfg->data_format != COHORT_DATA_TEXT) {
    g_set_error(error, G_IO_ERROR, G_IO_ERROR_NOT_SUPPORTED,
                "%s: the model was trained on token shards and names no tokenizer, so nothing "
                "says which ids a text is; allowed: a model with a tokenizer (--set "
                "tokenizer=DIR names the one its shards were made with)",
                path);
    return FALSE;
  }
  return TRUE;
}

gboolean cohort_perplexity_saved(const char *path, const char *const *sets, const char *file,
                                 double *loss, gint64 *predicted, GError **error)
{
  gsize len = 0;
  g_autofree char *text =
      cohort_file_read_regular(file, COHORT_PERPLEXITY_MAX_FILE, "--perplexity file", &len, error);
  if (!text) {
    g_prefix_error(error, "--perplexity ");
    return FALSE;
  }
  if (len == 0) {
    g_set_error(error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                "--perplexity %s: the file is empty; allowed: a text of at least two tokens", file);
    return FALSE;
  }
  /* the family and the tokenizer before the weights: a wrong model costs no load */
  g_autoptr(CohortConfig) cfg = cohort_saved_config(path, sets, error);
  g_autoptr(CohortTokenizer) tok = NULL;
  if (!cfg || !cohort_saved_tokenizer(path, cfg, &tok, error) ||
      !check_text_model(path, cfg, tok, error))
    return FALSE;
  gsize n = 0;
  g_autofree int *ids = encode(tok, text, len, &n, error);
  if (!ids) {
    g_prefix_error(error, "--perplexity %s: ", file);
    return FALSE;
  }
  g_autoptr(CohortConfig) loaded = NULL;
  g_autoptr(CohortModel) m = cohort_model_load_saved(path, sets, 1, &loaded, NULL, error);
  if (!m)
    return FALSE;
  if (!cohort_perplexity_ids(m, loaded->seq_len, loaded->vocab_size, ids, n, loss, predicted,
                             error)) {
    g_prefix_error(error, "--perplexity %s: ", file);
    return FALSE;
  }
  return TRUE;
}

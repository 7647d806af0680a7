#include "engine/models/gpt-generate.h"
#include "engine/base/phase.h"

#include "data/dataset.h"

#include <math.h>
#include <string.h>

typedef struct {
  float logit;
  int id;
} Candidate;

static int candidate_desc(const void *a, const void *b)
{
  const Candidate *x = a, *y = b;
  if (x->logit != y->logit)
    return x->logit < y->logit ? 1 : -1;
  return x->id - y->id; /* ties broken by id, so the order is deterministic */
}

int *cohort_generate(CohortGpt *gpt, const int *prompt, int n_prompt, int n_new, int top_k,
                     double temperature, guint64 *rng_state, int *n_out)
{
  const CohortGptShape *shape = cohort_gpt_shape(gpt);
  int V = shape->vocab_size;
  int total = n_prompt + n_new;
  int *seq = g_new(int, MAX(total, 1));
  if (n_prompt > 0)
    memcpy(seq, prompt, sizeof(int) * (size_t)n_prompt);
  int len = n_prompt;
  if (len == 0)
    seq[len++] = 0; /* an empty prompt starts from token 0 */
  Candidate *cand = g_new(Candidate, V);
  float *logits = g_new(float, V); /* the last position's row, on the host */
  if (top_k <= 0 || top_k > V)
    top_k = V;
  if (temperature <= 0)
    temperature = 1.0;

  while (len < MAX(total, 1)) {
    int T = MIN(len, shape->seq_len);
    const int *ctx = seq + (len - T);
    cohort_gpt_forward(gpt, ctx, NULL, 1, T);
    cohort_gpt_download_logits(gpt, (size_t)(T - 1) * V, (size_t)V, logits);
    for (int i = 0; i < V; i++)
      cand[i] = (Candidate){logits[i], i};
    qsort(cand, (size_t)V, sizeof(Candidate), candidate_desc);
    double sum = 0;
    double maxl = cand[0].logit;
    for (int i = 0; i < top_k; i++)
      sum += exp((cand[i].logit - maxl) / temperature);
    double r = cohort_rng_uniform(rng_state) * sum;
    int pick = cand[top_k - 1].id;
    double acc = 0;
    for (int i = 0; i < top_k; i++) {
      acc += exp((cand[i].logit - maxl) / temperature);
      if (r < acc) {
        pick = cand[i].id;
        break;
      }
    }
    seq[len++] = pick;
    cohort_phase_tick(); /* a long sample keeps the ranks waiting for rank 0 alive */
  }
  g_free(cand);
  g_free(logits);
  *n_out = len;
  return seq;
}

char *cohort_bytes_to_utf8(const int *tokens, int n)
{
  g_autofree char *raw = g_new(char, (gsize)n + 1);
  for (int i = 0; i < n; i++)
    raw[i] = (char)(tokens[i] & 0xff);
  raw[n] = 0;
  return g_utf8_make_valid(raw, n);
}

/* The prompt's ids: through the tokenizer (special tokens such as <|endoftext|> written in the
 * prompt count as themselves; an empty prompt starts from <|endoftext|>, as GPT-2's
 * unconditional samples do), or its bytes. */
static int *encode_prompt(const CohortSampleRequest *req, int *n, GError **error)
{
  const CohortConfig *cfg = req->cfg;
  const CohortTokenizer *tok = req->tokenizer;
  if (!tok)
    return cohort_text_encode(cfg->sample_prompt, n);
  const char *p = cfg->sample_prompt ? cfg->sample_prompt : "";
  gsize len = 0;
  int *ids = cohort_tokenizer_encode(tok, p, strlen(p), COHORT_ENCODE_SPECIAL, &len, error);
  if (!ids) {
    g_prefix_error(error, "sample_prompt: ");
    return NULL;
  }
  if (len == 0 && cohort_tokenizer_eot(tok) >= 0) {
    ids = g_renew(int, ids, 1);
    ids[0] = cohort_tokenizer_eot(tok);
    len = 1;
  }
  *n = (int)len;
  return ids;
}

/* Ids as text: the tokenizer's bytes (or the ids as bytes), invalid UTF-8 replaced by U+FFFD
 * (a sample may end inside a character). */
static char *decode_sample(const CohortSampleRequest *req, const int *ids, int n)
{
  if (!req->tokenizer)
    return cohort_bytes_to_utf8(ids, n);
  g_autoptr(GByteArray) bytes = g_byte_array_new();
  /* Ids come from the model's vocab_size, which equals the tokenizer's (checked at set-up). */
  if (!cohort_tokenizer_decode(req->tokenizer, ids, (gsize)n, bytes, NULL))
    return g_strdup("");
  return g_utf8_make_valid((const char *)bytes->data, bytes->len);
}

gboolean cohort_gpt_sample(CohortModel *m, const CohortSampleRequest *req, JsonObject *fields,
                           GError **error)
{
  const CohortConfig *cfg = req->cfg;
  int n_prompt = 0;
  g_autofree int *prompt = NULL;
  gboolean text = cfg->data_format == COHORT_DATA_TEXT || req->tokenizer;
  if (text && !(prompt = encode_prompt(req, &n_prompt, error)))
    return FALSE;
  int n_out = 0;
  g_autofree int *seq =
      cohort_generate(m, prompt, n_prompt, cfg->sample_tokens, 40, 1.0, req->rng, &n_out);
  json_object_set_string_member(fields, COHORT_FIELD_PROMPT, cfg->sample_prompt);
  if (text) {
    g_autofree char *decoded = decode_sample(req, seq, n_out);
    json_object_set_string_member(fields, COHORT_FIELD_TEXT, decoded);
  }
  if (!text || req->tokenizer) {
    JsonArray *ids = json_array_new();
    for (int i = 0; i < n_out; i++)
      json_array_add_int_element(ids, seq[i]);
    json_object_set_array_member(fields, COHORT_FIELD_TOKENS, ids);
  }
  return TRUE;
}

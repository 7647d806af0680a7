/* Generation from a Llama with a key/value cache (engine/models/llama-generate.h). */
#include "engine/models/llama-generate.h"

#include <string.h>

#include "engine/base/phase.h"
#include "engine/models/llama-private.h"
#include "engine/models/text-sample.h"

struct CohortLlamaCache {
  Llama *m;
  CohortLlamaKv kv;
};

CohortLlamaCache *cohort_llama_cache_new(CohortModel *base, GError **error)
{
  g_return_val_if_fail(cohort_is_llama(base), NULL);
  Llama *m = llama_of(base);
  const CohortLlamaShape *s = &m->shape;
  size_t bytes = (size_t)2 * s->n_layer * s->seq_len * s->n_kv_head * s->head_dim * sizeof(float);
  float *mem = base->be->alloc(bytes);
  if (!mem) {
    g_set_error(error, G_IO_ERROR, G_IO_ERROR_NO_SPACE,
                "llama model: out of %s memory for the key/value cache of %.1f MiB (n_layer %d, "
                "seq_len %d, num_key_value_heads %d, head_dim %d); allowed: a shorter seq_len",
                base->be->name, bytes / 1048576.0, s->n_layer, s->seq_len, s->n_kv_head,
                s->head_dim);
    return NULL;
  }
  CohortLlamaCache *c = g_new0(CohortLlamaCache, 1);
  c->m = m;
  c->kv.mem = mem;
  return c;
}

void cohort_llama_cache_free(CohortLlamaCache *c)
{
  if (!c)
    return;
  c->m->base.be->free(c->kv.mem);
  g_free(c);
}

int cohort_llama_cache_len(const CohortLlamaCache *c)
{
  return c->kv.len;
}

void cohort_llama_cache_clear(CohortLlamaCache *c)
{
  c->kv.len = 0;
}

void cohort_llama_cache_feed(CohortLlamaCache *c, const int *tokens, int n, float *logits)
{
  Llama *m = c->m;
  const CohortBackend *be = m->base.be;
  int V = m->shape.vocab_size;
  g_return_if_fail(n >= 1 && c->kv.len + n <= m->shape.seq_len);
  for (int i = 0; i < n; i++)
    g_return_if_fail(tokens[i] >= 0 && tokens[i] < V);
  be->upload(m->acts.tokens, tokens, (size_t)n * sizeof(int));
  cohort_llama_net_forward_cached(m, &c->kv, n);
  /* what the model interface reports of this forward: one row of logits, no backward */
  m->last_B = m->last_T = 1;
  m->have_targets = FALSE;
  be->download(logits, m->acts.logits, (size_t)V * sizeof(float));
}

int *cohort_llama_generate(CohortModel *base, const int *prompt, int n_prompt, int n_new,
                           const CohortTokenPick *pick, int stop, guint64 *rng,
                           CohortLlamaStepFunc step, gpointer user_data, int *n_out, GError **error)
{
  g_return_val_if_fail(cohort_is_llama(base) && n_prompt >= 0 && n_new >= 0, NULL);
  const CohortLlamaShape *s = cohort_llama_shape(base);
  int S = s->seq_len, V = s->vocab_size, keep = MAX(S / 2, 1);
  for (int i = 0; i < n_prompt; i++)
    if (prompt[i] < 0 || prompt[i] >= V) {
      g_set_error(error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                  "sample_prompt: token %d (at %d) is outside the model's vocabulary "
                  "(vocab_size %d)",
                  prompt[i], i, V);
      return NULL;
    }
  g_autoptr(CohortLlamaCache) cache = cohort_llama_cache_new(base, error);
  if (!cache)
    return NULL;
  int total = MAX(n_prompt + n_new, 1);
  int *seq = g_new(int, total);
  if (n_prompt > 0)
    memcpy(seq, prompt, sizeof(int) * (size_t)n_prompt);
  int len = n_prompt;
  if (len == 0)
    seq[len++] = 0; /* an empty prompt starts from token 0 */
  g_autoptr(CohortTokenPicker) picker = cohort_token_picker_new(pick, V);
  g_autofree float *logits = g_new(float, V);
  int w0 = MAX(0, len - S); /* the window the cache holds: seq[w0 .. len) */
  if (len < total)
    cohort_llama_cache_feed(cache, seq + w0, len - w0, logits);
  while (len < total) {
    if (step)
      step(logits, seq + w0, len - w0, user_data);
    int next = cohort_token_picker_pick(picker, logits, rng);
    seq[len++] = next;
    cohort_phase_tick(); /* a long sample keeps the ranks waiting for rank 0 alive */
    if (next == stop || len == total)
      break;
    if (cohort_llama_cache_len(cache) == S) {
      /* full: the last `keep` tokens, the new one among them, from position 0 again */
      w0 = len - keep;
      cohort_llama_cache_clear(cache);
      cohort_llama_cache_feed(cache, seq + w0, keep, logits);
    } else {
      cohort_llama_cache_feed(cache, &next, 1, logits);
    }
  }
  *n_out = len;
  return seq;
}

static int *llama_generate(CohortModel *m, const int *prompt, int n_prompt, int n_new,
                           const CohortTokenPick *pick, int stop, guint64 *rng, int *n_out,
                           GError **error)
{
  return cohort_llama_generate(m, prompt, n_prompt, n_new, pick, stop, rng, NULL, NULL, n_out,
                               error);
}

gboolean cohort_llama_sample(CohortModel *m, const CohortSampleRequest *req, JsonObject *fields,
                             GError **error)
{
  return cohort_text_sample(m, req, llama_generate, fields, error);
}

/* Generation from the llama family with a key/value cache (engine/models/llama-generate.h), at
 * tiny shapes of its four architectures: the logits each step is picked from, computed from the
 * cache, equal those of a full forward over the same window (within 1e-5 of the row's largest
 * magnitude) — through the prefill, one token at a time, a prompt longer than seq_len and the
 * context shifts when the cache is full; greedy and sampled. Also the token picker shared with
 * the gpt family (engine/models/token-pick.h): greedy ties, top-k, the nucleus cut, the
 * distribution it draws from, and the gpt sampler's draws at its old settings; and the `sample`
 * op of a llama model through the text-sample path (prompt, text, tokens). */
#include <glib.h>
#include <math.h>
#include <string.h>

#include "engine/model/rng.h"
#include "engine/models/llama-generate.h"
#include "engine/models/llama.h"
#include "engine/models/text-sample.h"
#include "engine/models/token-pick.h"
#include "engine/progress/protocol.h"
#include "kernels/backend.h"

typedef struct {
  const char *arch;
  CohortLlamaShape shape;
} Case;

static CohortLlamaShape base_shape(void)
{
  CohortLlamaShape s = {.n_layer = 2, .seq_len = 8, .rms_eps = 1e-5};
  s.rope.theta = 10000.0;
  return s;
}

/* The shapes of tests/test-llama.c: Llama (GQA 4/2, head_dim 8, llama3 rope scaling, biases on
 * q/k/v/o, separate head), Mistral (multi-query), Qwen2 (q/k/v biases, GQA 6/2, tied), Qwen3
 * (q/k norms, head_dim 16, linear rope scaling, tied). */
static Case make_case(int i)
{
  Case c = {NULL, base_shape()};
  CohortLlamaShape *s = &c.shape;
  switch (i) {
  case 0:
    c.arch = "LlamaForCausalLM";
    s->hidden = 24, s->intermediate = 40, s->n_head = 4, s->n_kv_head = 2, s->head_dim = 8;
    s->vocab_size = 37, s->qkv_bias = s->o_bias = TRUE;
    s->rope = (CohortRope){COHORT_ROPE_LLAMA3, 10000.0, 8.0, 1.0, 4.0, 64};
    break;
  case 1:
    c.arch = "MistralForCausalLM";
    s->hidden = 32, s->intermediate = 48, s->n_head = 4, s->n_kv_head = 1, s->head_dim = 8;
    s->vocab_size = 41, s->rope.theta = 1e6;
    break;
  case 2:
    c.arch = "Qwen2ForCausalLM";
    s->hidden = 24, s->intermediate = 40, s->n_head = 6, s->n_kv_head = 2, s->head_dim = 4;
    s->vocab_size = 37, s->rms_eps = 1e-6, s->rope.theta = 1e6, s->qkv_bias = TRUE;
    s->tied = TRUE;
    break;
  default:
    c.arch = "Qwen3ForCausalLM";
    s->hidden = 16, s->intermediate = 32, s->n_head = 4, s->n_kv_head = 2, s->head_dim = 16;
    s->vocab_size = 29, s->rms_eps = 1e-6, s->rope.theta = 1e6, s->qk_norm = TRUE;
    s->tied = TRUE, s->rope.type = COHORT_ROPE_LINEAR, s->rope.factor = 2.0;
    break;
  }
  return c;
}

static guint32 lcg = 7;

static float urand(void)
{
  lcg = lcg * 1664525u + 1013904223u;
  return (float)((lcg >> 8) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

/* Weights as tests/test-llama.c draws them: matrices U(±1.7/sqrt(fan_in)), tables U(±1), norms
 * 1 ± 0.3, biases ±0.3 (CPU backend: the parameters are host memory). */
static CohortModel *make_model(const Case *c)
{
  g_autoptr(GError) error = NULL;
  CohortModel *m = cohort_llama_new_on(cohort_backend_cpu(), &c->shape, 1, &error);
  g_assert_no_error(error);
  for (guint i = 0; i < m->n_tensors; i++) {
    const CohortTensorInfo *t = &m->tensors[i];
    gboolean norm = g_str_has_suffix(t->name, "norm.weight");
    gboolean table = i == 0 || g_str_equal(t->name, "lm_head.weight");
    float a = t->ndim == 2 ? (table ? 1.0f : 1.7f / sqrtf((float)t->shape[1])) : 0.3f;
    for (size_t k = 0; k < t->numel; k++)
      m->params[t->offset + k] = (norm ? 1.0f : 0.0f) + a * urand();
  }
  return m;
}

typedef struct {
  CohortModel *m;
  int steps, shifts, longest;
  const int *last_window;
  double worst; /* the largest difference seen, relative to its row's largest magnitude */
} Check;

/* The step hook: the same window through the full forward, its last row against the cache's. */
static void check_step(const float *logits, const int *window, int n, gpointer data)
{
  Check *c = data;
  int V = cohort_llama_shape(c->m)->vocab_size;
  g_assert_cmpint(n, >=, 1);
  g_assert_cmpint(n, <=, cohort_llama_shape(c->m)->seq_len);
  if (c->steps > 0 && window != c->last_window)
    c->shifts++; /* the window moved: a context shift */
  c->last_window = window;
  c->longest = MAX(c->longest, n);
  cohort_llama_forward(c->m, window, NULL, 1, n);
  const float *full = cohort_llama_logits(c->m) + (size_t)(n - 1) * V;
  double big = 0, diff = 0;
  for (int v = 0; v < V; v++) {
    big = MAX(big, fabs(full[v]));
    diff = MAX(diff, fabs((double)full[v] - logits[v]));
  }
  g_assert_cmpfloat(big, >, 0);
  c->worst = MAX(c->worst, diff / big);
  c->steps++;
}

static void run_case(const Case *k, const int *prompt, int n_prompt, int n_new,
                     const CohortTokenPick *pick, int want_shifts)
{
  g_autoptr(CohortModel) m = make_model(k);
  Check c = {.m = m};
  guint64 rng = 1234;
  int n_out = 0;
  g_autoptr(GError) error = NULL;
  g_autofree int *seq = cohort_llama_generate(m, prompt, n_prompt, n_new, pick, -1, &rng,
                                              check_step, &c, &n_out, &error);
  g_assert_no_error(error);
  g_assert_cmpint(n_out, ==, MAX(n_prompt, 1) + n_new - (n_prompt == 0));
  if (n_prompt > 0)
    g_assert_cmpint(memcmp(seq, prompt, sizeof(int) * (size_t)n_prompt), ==, 0);
  g_assert_cmpint(c.steps, ==, n_out - MAX(n_prompt, 1));
  g_assert_cmpint(c.shifts, ==, want_shifts);
  for (int i = 0; i < n_out; i++)
    g_assert_true(seq[i] >= 0 && seq[i] < k->shape.vocab_size);
  g_test_message("%s: %d steps, %d context shifts, window up to %d: largest difference %.3g of "
                 "the row's largest logit",
                 k->arch, c.steps, c.shifts, c.longest, c.worst);
  g_assert_cmpfloat(c.worst, <=, 1e-5);
}

/* Prompt 5, seq_len 8: prefill of 5, steps to 8, then shifts to the last 4 every 4 tokens. */
static void test_cache_greedy(void)
{
  const int prompt[] = {3, 1, 4, 1, 5};
  CohortTokenPick greedy = {0, 0, 1.0, 0};
  for (int i = 0; i < 4; i++) {
    Case k = make_case(i);
    /* 20 new tokens: windows 5..8 (4 picks), then 4..8 after each shift */
    run_case(&k, prompt, 5, 20, &greedy, 4);
  }
}

/* Sampled tokens (temperature, top-k, top-p), and a prompt longer than seq_len. */
static void test_cache_sampled(void)
{
  const int prompt[] = {2, 7, 1, 8, 2, 8, 1, 8, 2, 8, 4};
  CohortTokenPick pick = {0.9, 10, 0.95, 0};
  for (int i = 0; i < 4; i++) {
    Case k = make_case(i);
    /* the last 8 of 11, full at once: a shift every 4 tokens from the first step on */
    run_case(&k, prompt, 11, 9, &pick, 2);
  }
}

/* An empty prompt starts from token 0; a single position; no new tokens returns the prompt. */
static void test_cache_edges(void)
{
  Case k = make_case(3);
  CohortTokenPick greedy = {0, 0, 1.0, 0};
  run_case(&k, NULL, 0, 3, &greedy, 0);
  k.shape.seq_len = 1; /* every step a shift: the newest token alone */
  run_case(&k, (const int[]){5}, 1, 4, &greedy, 3);
  k.shape.seq_len = 8;
  g_autoptr(CohortModel) m = make_model(&k);
  guint64 rng = 1;
  int n_out = 0;
  g_autofree int *same = cohort_llama_generate(m, (const int[]){1, 2}, 2, 0, &greedy, -1, &rng,
                                               NULL, NULL, &n_out, NULL);
  g_assert_cmpint(n_out, ==, 2);
  g_assert_cmpint(same[1], ==, 2);
  g_autoptr(GError) error = NULL;
  g_assert_null(cohort_llama_generate(m, (const int[]){1, 29}, 2, 3, &greedy, -1, &rng, NULL, NULL,
                                      &n_out, &error));
  g_assert_error(error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA);
  g_assert_nonnull(strstr(error->message, "vocab_size 29"));
}

/* A stop token ends the continuation after it. */
static void test_stop(void)
{
  Case k = make_case(0);
  g_autoptr(CohortModel) m = make_model(&k);
  CohortTokenPick greedy = {0, 0, 1.0, 0};
  guint64 rng = 1;
  int n_out = 0;
  g_autofree int *all = cohort_llama_generate(m, (const int[]){4, 2}, 2, 6, &greedy, -1, &rng, NULL,
                                              NULL, &n_out, NULL);
  g_assert_cmpint(n_out, ==, 8);
  int stop = all[4];
  g_autofree int *cut = cohort_llama_generate(m, (const int[]){4, 2}, 2, 6, &greedy, stop, &rng,
                                              NULL, NULL, &n_out, NULL);
  int first = 2;
  while (all[first] != stop)
    first++;
  g_assert_cmpint(n_out, ==, first + 1);
  g_assert_cmpint(memcmp(cut, all, sizeof(int) * (size_t)n_out), ==, 0);
}

/* ---- the token picker ---- */

static int pick_once(const CohortTokenPick *how, const float *logits, int V, guint64 *rng)
{
  g_autoptr(CohortTokenPicker) p = cohort_token_picker_new(how, V);
  return cohort_token_picker_pick(p, logits, rng);
}

static void test_pick_greedy(void)
{
  const float logits[] = {0.5f, 2.0f, -1.0f, 2.0f, NAN, 1.9f};
  CohortTokenPick greedy = {0, 0, 1.0, 0}, top1 = {1.0, 1, 1.0, 0}, tiny_p = {1.0, 0, 1e-9, 0};
  guint64 rng = 5, before = rng;
  g_assert_cmpint(pick_once(&greedy, logits, 6, &rng), ==, 1); /* the first of equal maxima */
  g_assert_cmpuint(rng, ==, before);                           /* greedy draws nothing */
  g_assert_cmpint(pick_once(&top1, logits, 6, &rng), ==, 1);
  g_assert_cmpint(pick_once(&tiny_p, logits, 6, &rng), ==, 1);
  const float nan_first[] = {NAN, -3.0f, -2.0f};
  g_assert_cmpint(pick_once(&greedy, nan_first, 3, &rng), ==, 2);
}

/* A padded embedding's rows past the tokenizer (`below`) are never picked, however large
 * their logits, greedy or drawn. */
static void test_pick_below(void)
{
  const float logits[] = {0.5f, 2.0f, -1.0f, 9.0f, 8.0f, 7.0f};
  CohortTokenPick greedy = {0, 0, 1.0, 3}, drawn = {1.0, 0, 1.0, 3}, all = {0, 0, 1.0, 0};
  guint64 rng = 7;
  g_assert_cmpint(pick_once(&all, logits, 6, &rng), ==, 3);
  g_assert_cmpint(pick_once(&greedy, logits, 6, &rng), ==, 1);
  for (int i = 0; i < 200; i++)
    g_assert_cmpint(pick_once(&drawn, logits, 6, &rng), <, 3);
}

/* Probabilities 0.5, 0.3, 0.15, 0.05: top_p 0.6 keeps the first two (0.5 before the second is
 * below 0.6, 0.8 before the third is not), drawn 5 : 3; top_k 3 draws 10 : 6 : 3. */
static void test_pick_distribution(void)
{
  const float logits[] = {logf(0.15f), logf(0.5f), logf(0.05f), logf(0.3f)};
  CohortTokenPick nucleus = {1.0, 0, 0.6, 0}, k3 = {1.0, 3, 1.0, 0};
  g_autoptr(CohortTokenPicker) p = cohort_token_picker_new(&nucleus, 4);
  g_autoptr(CohortTokenPicker) q = cohort_token_picker_new(&k3, 4);
  int count[4] = {0}, count3[4] = {0}, n = 40000;
  guint64 rng = 99;
  for (int i = 0; i < n; i++) {
    count[cohort_token_picker_pick(p, logits, &rng)]++;
    count3[cohort_token_picker_pick(q, logits, &rng)]++;
  }
  g_assert_cmpint(count[0] + count[2], ==, 0);
  g_assert_cmpfloat(fabs(count[1] / (double)n - 0.625), <, 0.01);
  g_assert_cmpint(count3[2], ==, 0);
  g_assert_cmpfloat(fabs(count3[1] / (double)n - 0.5 / 0.95), <, 0.01);
  g_assert_cmpfloat(fabs(count3[0] / (double)n - 0.15 / 0.95), <, 0.01);
  /* temperature 0.5 squares the odds of the nucleus' two: 25 : 9 */
  CohortTokenPick cold = {0.5, 0, 1.0, 0};
  g_autoptr(CohortTokenPicker) r = cohort_token_picker_new(&cold, 4);
  int c1 = 0, c3 = 0;
  for (int i = 0; i < n; i++) {
    int t = cohort_token_picker_pick(r, logits, &rng);
    c1 += t == 1;
    c3 += t == 3;
  }
  double z = 0.25 + 0.09 + 0.0225 + 0.0025;
  g_assert_cmpfloat(fabs(c1 / (double)n - 0.25 / z), <, 0.01);
  g_assert_cmpfloat(fabs(c3 / (double)n - 0.09 / z), <, 0.01);
}

/* The gpt sampler before these keys: a full sort, top-k 40 at temperature 1 (its code). */
static int old_gpt_pick(const float *logits, int V, guint64 *rng)
{
  g_autofree int *order = g_new(int, V);
  for (int i = 0; i < V; i++)
    order[i] = i;
  for (int i = 1; i < V; i++) /* insertion sort: logit descending, ties by id */
    for (int j = i; j > 0; j--) {
      int a = order[j - 1], b = order[j];
      gboolean swap = logits[b] > logits[a] || (logits[b] == logits[a] && b < a);
      if (!swap)
        break;
      order[j - 1] = b, order[j] = a;
    }
  int top_k = MIN(40, V);
  double sum = 0, maxl = logits[order[0]];
  for (int i = 0; i < top_k; i++)
    sum += exp((logits[order[i]] - maxl) / 1.0);
  double r = cohort_rng_uniform(rng) * sum;
  int pick = order[top_k - 1];
  double acc = 0;
  for (int i = 0; i < top_k; i++) {
    acc += exp((logits[order[i]] - maxl) / 1.0);
    if (r < acc) {
      pick = order[i];
      break;
    }
  }
  return pick;
}

static void test_pick_gpt_default(void)
{
  enum { V = 300 };
  float logits[V];
  CohortTokenPick def = {1.0, 40, 1.0, 0};
  g_autoptr(CohortTokenPicker) p = cohort_token_picker_new(&def, V);
  guint64 a = 17, b = 17;
  for (int round = 0; round < 200; round++) {
    for (int i = 0; i < V; i++)
      logits[i] = roundf(urand() * 40.0f) / 8.0f; /* many ties */
    g_assert_cmpint(cohort_token_picker_pick(p, logits, &a), ==, old_gpt_pick(logits, V, &b));
  }
  g_assert_cmpuint(a, ==, b);
}

/* The sample op of a llama model: fields as the gpt family's (byte-level text). */
static void test_sample_op(void)
{
  Case k = make_case(1);
  k.shape.vocab_size = 256;
  k.shape.seq_len = 16;
  g_autoptr(CohortModel) m = make_model(&k);
  g_assert_nonnull(m->ops->sample);
  g_autoptr(CohortConfig) cfg = cohort_config_new();
  g_assert_true(cohort_config_set(cfg, "sample_prompt", "Once", "test", NULL));
  g_assert_true(cohort_config_set(cfg, "sample_tokens", "12", "test", NULL));
  g_assert_true(cohort_config_set(cfg, "sample_temperature", "0", "test", NULL));
  guint64 rng = 3;
  CohortSampleRequest req = {.cfg = cfg, .rng = &rng};
  g_autoptr(JsonObject) f = json_object_new();
  g_autoptr(GError) error = NULL;
  g_assert_true(m->ops->sample(m, &req, f, &error));
  g_assert_no_error(error);
  g_assert_cmpstr(json_object_get_string_member(f, COHORT_FIELD_PROMPT), ==, "Once");
  const char *text = json_object_get_string_member(f, COHORT_FIELD_TEXT);
  g_assert_true(g_str_has_prefix(text, "Once"));
  g_assert_false(json_object_has_member(f, COHORT_FIELD_TOKENS));
  /* the same greedy continuation through the generator */
  CohortTokenPick greedy = {0, 40, 1.0, 0};
  int n_out = 0;
  g_autofree int *seq = cohort_llama_generate(m, (const int[]){'O', 'n', 'c', 'e'}, 4, 12, &greedy,
                                              -1, &rng, NULL, NULL, &n_out, NULL);
  g_autofree char *want = cohort_bytes_to_utf8(seq, n_out);
  g_assert_cmpstr(text, ==, want);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/llama-kv/cache-greedy", test_cache_greedy);
  g_test_add_func("/llama-kv/cache-sampled", test_cache_sampled);
  g_test_add_func("/llama-kv/cache-edges", test_cache_edges);
  g_test_add_func("/llama-kv/stop", test_stop);
  g_test_add_func("/llama-kv/pick-greedy", test_pick_greedy);
  g_test_add_func("/llama-kv/pick-distribution", test_pick_distribution);
  g_test_add_func("/llama-kv/pick-below", test_pick_below);
  g_test_add_func("/llama-kv/pick-gpt-default", test_pick_gpt_default);
  g_test_add_func("/llama-kv/sample-op", test_sample_op);
  return g_test_run();
}

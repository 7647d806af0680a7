/* The llama family's numerics on tiny shapes of its four architectures (and a forward at
 * SmolLM2-135M's shape), against
 * tests/torch_llama_ref.py: Hugging Face's LlamaForCausalLM (GQA, explicit head_dim, llama3 rope
 * scaling, attention_bias, a separate head), MistralForCausalLM (multi-query), Qwen2ForCausalLM
 * (q/k/v biases, tied head) and Qwen3ForCausalLM (per-head q/k norms, head_dim above
 * hidden / heads, linear rope scaling), written in float64 PyTorch with transformers' module
 * names, loading our file with strict=True. Logits, loss and every gradient must be within 1e-5
 * of each tensor's largest value. Also: the tensor table, the grad-ready hook, the rope
 * frequencies of the three llama3 regimes, and refusals of impossible shapes. */
#include <glib.h>
#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

#include "engine/model/model-io.h"
#include "engine/models/llama.h"
#include "kernels/backend.h"
#include "torch-ref.h"

enum { B = 2, T = 7 };

typedef struct {
  const char *arch;
  CohortLlamaShape shape;
  gboolean attention_bias; /* the config's key (what qkv_bias and o_bias come from) */
} Case;

static CohortLlamaShape base_shape(void)
{
  CohortLlamaShape s = {.n_layer = 2, .seq_len = 8, .rms_eps = 1e-5};
  s.rope.theta = 10000.0;
  return s;
}

/* Llama: GQA 4/2, head_dim 8 (hidden / heads is 6), llama3 scaling whose original length puts
 * the four frequencies in all three regimes, attention_bias (q/k/v and o), a separate head. */
static Case llama_case(void)
{
  Case c = {"LlamaForCausalLM", base_shape(), TRUE};
  CohortLlamaShape *s = &c.shape;
  s->hidden = 24, s->intermediate = 40, s->n_head = 4, s->n_kv_head = 2, s->head_dim = 8;
  s->vocab_size = 37, s->qkv_bias = s->o_bias = TRUE;
  s->rope = (CohortRope){COHORT_ROPE_LLAMA3, 10000.0, 8.0, 1.0, 4.0, 64};
  return c;
}

/* Mistral: multi-query (one key/value head), rope_theta 1e6, a separate head. */
static Case mistral_case(void)
{
  Case c = {"MistralForCausalLM", base_shape(), FALSE};
  CohortLlamaShape *s = &c.shape;
  s->hidden = 32, s->intermediate = 48, s->n_head = 4, s->n_kv_head = 1, s->head_dim = 8;
  s->vocab_size = 41, s->rope.theta = 1e6;
  return c;
}

/* Qwen2: q/k/v biases (no o_proj bias), GQA 6/2 with head size 4, tied head, eps 1e-6. */
static Case qwen2_case(void)
{
  Case c = {"Qwen2ForCausalLM", base_shape(), FALSE};
  CohortLlamaShape *s = &c.shape;
  s->hidden = 24, s->intermediate = 40, s->n_head = 6, s->n_kv_head = 2, s->head_dim = 4;
  s->vocab_size = 37, s->rms_eps = 1e-6, s->rope.theta = 1e6, s->qkv_bias = TRUE, s->tied = TRUE;
  return c;
}

/* Qwen3: per-head q/k norms, head_dim 16 with hidden / heads 4, linear rope scaling, tied. */
static Case qwen3_case(void)
{
  Case c = {"Qwen3ForCausalLM", base_shape(), FALSE};
  CohortLlamaShape *s = &c.shape;
  s->hidden = 16, s->intermediate = 32, s->n_head = 4, s->n_kv_head = 2, s->head_dim = 16;
  s->vocab_size = 29, s->rms_eps = 1e-6, s->rope.theta = 1e6, s->qk_norm = TRUE, s->tied = TRUE;
  s->rope.type = COHORT_ROPE_LINEAR, s->rope.factor = 2.0;
  return c;
}

static guint32 lcg = 99;

static float urand(void)
{
  lcg = lcg * 1664525u + 1013904223u;
  return (float)((lcg >> 8) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

/* Weights that let every path carry a gradient: matrices U(±1.7/sqrt(fan_in)), the embedding
 * and head U(±1), norms 1 ± 0.3, biases ±0.3. */
static void randomise(CohortModel *m)
{
  for (guint i = 0; i < m->n_tensors; i++) {
    const CohortTensorInfo *t = &m->tensors[i];
    gboolean norm = g_str_has_suffix(t->name, "norm.weight");
    gboolean table = i == 0 || g_str_equal(t->name, "lm_head.weight");
    float a = t->ndim == 2 ? (table ? 1.0f : 1.7f / sqrtf((float)t->shape[1])) : 0.3f;
    for (size_t k = 0; k < t->numel; k++)
      m->params[t->offset + k] = (norm ? 1.0f : 0.0f) + a * urand();
  }
}

static CohortModel *make_model(const Case *c)
{
  g_autoptr(GError) error = NULL;
  CohortModel *m = cohort_llama_new_on(cohort_backend_cpu(), &c->shape, B, &error);
  g_assert_no_error(error);
  randomise(m);
  return m;
}

static void make_tokens_n(int *inputs, int *targets, int vocab, int n)
{
  for (int i = 0; i < n; i++) {
    inputs[i] = (int)((urand() + 1.0f) * 0.5f * vocab) % vocab;
    targets[i] = (int)((urand() + 1.0f) * 0.5f * vocab) % vocab;
  }
}

static void make_tokens(int *inputs, int *targets, int vocab)
{
  make_tokens_n(inputs, targets, vocab, B * T);
}

/* config.json as Hugging Face writes it for the case. */
static char *config_json(const Case *c)
{
  const CohortLlamaShape *s = &c->shape;
  g_autofree char *rope = NULL;
  if (s->rope.type == COHORT_ROPE_LLAMA3)
    rope = g_strdup_printf("{\"rope_type\": \"llama3\", \"factor\": %.17g, \"low_freq_factor\": "
                           "%.17g, \"high_freq_factor\": %.17g, "
                           "\"original_max_position_embeddings\": %d}",
                           s->rope.factor, s->rope.low_freq_factor, s->rope.high_freq_factor,
                           s->rope.original_max_positions);
  else if (s->rope.type == COHORT_ROPE_LINEAR)
    rope = g_strdup_printf("{\"type\": \"linear\", \"factor\": %.17g}", s->rope.factor);
  else
    rope = g_strdup("null");
  return g_strdup_printf(
      "{\"architectures\": [\"%s\"], \"hidden_size\": %d, \"intermediate_size\": %d, "
      "\"num_hidden_layers\": %d, \"num_attention_heads\": %d, \"num_key_value_heads\": %d, "
      "\"head_dim\": %d, \"rms_norm_eps\": %.17g, \"rope_theta\": %.17g, \"rope_scaling\": %s, "
      "\"attention_bias\": %s, \"tie_word_embeddings\": %s, \"vocab_size\": %d, "
      "\"max_position_embeddings\": %d}",
      c->arch, s->hidden, s->intermediate, s->n_layer, s->n_head, s->n_kv_head, s->head_dim,
      s->rms_eps, s->rope.theta, rope, c->attention_bias ? "true" : "false",
      s->tied ? "true" : "false", s->vocab_size, s->seq_len);
}

static gboolean have_torch(void)
{
  return g_file_test("/usr/bin/python3", G_FILE_TEST_IS_EXECUTABLE) &&
         system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
}

/* The reference's output: name → values ("loss", "logits", then each parameter). */
static GHashTable *run_reference(const Case *c, CohortModel *m, const int *inputs,
                                 const int *targets, int nb, int nt, const char *mode)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *dir = g_dir_make_tmp("cohort-test-llama-XXXXXX", &error);
  g_assert_no_error(error);
  g_autofree char *config = g_build_filename(dir, "config.json", NULL);
  g_autofree char *weights = g_build_filename(dir, "model.safetensors", NULL);
  g_autofree char *tokens = g_build_filename(dir, "inputs.bin", NULL);
  g_autofree char *json = config_json(c);
  g_assert_true(g_file_set_contents(config, json, -1, &error));
  g_assert_true(cohort_model_save(m, NULL, weights, NULL, &error));
  size_t n = (size_t)nb * nt;
  g_autofree int *buf = g_new(int, 2 + 2 * n);
  buf[0] = nb, buf[1] = nt;
  memcpy(buf + 2, inputs, sizeof(int) * n);
  memcpy(buf + 2 + n, targets, sizeof(int) * n);
  g_assert_true(g_file_set_contents(tokens, (char *)buf, sizeof(int) * (2 + 2 * n), &error));
  const char *args[] = {config, weights, tokens, mode, NULL};
  g_autofree char *out = torch_ref_run("torch_llama_ref.py", args);
  g_unlink(config), g_unlink(weights), g_unlink(tokens), g_rmdir(dir);

  GHashTable *ref =
      g_hash_table_new_full(g_str_hash, g_str_equal, g_free, (GDestroyNotify)g_array_unref);
  g_auto(GStrv) lines = g_strsplit(g_strstrip(out), "\n", -1);
  for (guint i = 0; lines[i]; i++) {
    g_auto(GStrv) f = g_strsplit(lines[i], " ", -1);
    GArray *v = g_array_new(FALSE, FALSE, sizeof(double));
    for (guint k = 1; f[k]; k++) {
      double x = g_ascii_strtod(f[k], NULL);
      g_array_append_val(v, x);
    }
    g_hash_table_insert(ref, g_strdup(f[0]), v);
  }
  return ref;
}

/* |ours - ref| <= 1e-5 * max|ref| over the tensor (and 1e-12 for an all-zero one); returns the
 * error relative to that maximum. */
static double compare(const char *what, const float *ours, const GArray *ref, size_t n)
{
  g_assert_nonnull(ref);
  g_assert_cmpuint(ref->len, ==, n);
  double mx = 0, worst = 0;
  for (size_t k = 0; k < n; k++)
    mx = fmax(mx, fabs(g_array_index(ref, double, k)));
  for (size_t k = 0; k < n; k++) {
    double r = g_array_index(ref, double, k), e = fabs(ours[k] - r);
    if (e > 1e-5 * mx + 1e-12)
      g_error("%s[%zu]: ours %.9g, PyTorch %.9g (tensor max %.3g)", what, k, ours[k], r, mx);
    worst = fmax(worst, mx > 0 ? e / mx : 0);
  }
  return worst;
}

static Case (*const cases[])(void) = {llama_case, mistral_case, qwen2_case, qwen3_case};

static void check_against_torch(gconstpointer data)
{
  Case c = cases[GPOINTER_TO_INT(data)]();
  if (!have_torch()) {
    g_test_skip("PyTorch is not importable by /usr/bin/python3");
    return;
  }
  g_autoptr(CohortModel) m = make_model(&c);
  int inputs[B * T], targets[B * T];
  make_tokens(inputs, targets, c.shape.vocab_size);
  cohort_model_zero_grad(m);
  float loss = cohort_llama_forward(m, inputs, targets, B, T);
  m->ops->backward(m, 1.0f);
  g_autoptr(GHashTable) ref = run_reference(&c, m, inputs, targets, B, T, NULL);

  GArray *rl = g_hash_table_lookup(ref, "loss");
  g_assert_nonnull(rl);
  double ref_loss = g_array_index(rl, double, 0);
  g_assert_cmpfloat(fabs(loss - ref_loss), <=, 1e-5 * fabs(ref_loss));
  double worst_logit = compare("logits", cohort_llama_logits(m), g_hash_table_lookup(ref, "logits"),
                               (size_t)B * T * c.shape.vocab_size);
  double worst = 0;
  /* every parameter the reference has is ours and the other way round */
  g_assert_cmpuint(g_hash_table_size(ref), ==, 2 + m->n_tensors);
  for (guint i = 0; i < m->n_tensors; i++) {
    const CohortTensorInfo *t = &m->tensors[i];
    worst = fmax(
        worst, compare(t->name, m->grads + t->offset, g_hash_table_lookup(ref, t->name), t->numel));
  }
  g_test_message("%s: loss %.8f vs PyTorch %.8f; largest error of the tensor max: logits %.2e, "
                 "gradients %.2e",
                 c.arch, loss, ref_loss, worst_logit, worst);
}

/* SmolLM2-135M's shape (its config.json: 30 layers, hidden 576, 9 heads of 64 over 3 key/value
 * heads, intermediate 1536, 49152 tokens, tied, rope_theta 1e5) with random weights: the
 * forward's loss and logits over 16 positions. A frozen model: no gradient buffer. It takes about
 * a minute and 3 GB of reference output, so it runs only with COHORT_TEST_LARGE=1
 * (docs/models.md). */
static void test_smollm2_forward(void)
{
  if (g_strcmp0(g_getenv("COHORT_TEST_LARGE"), "1") != 0) {
    g_test_skip("a full-size shape: set COHORT_TEST_LARGE=1 to run it");
    return;
  }
  if (!have_torch()) {
    g_test_skip("PyTorch is not importable by /usr/bin/python3");
    return;
  }
  enum { NT = 16 };
  Case c = {"LlamaForCausalLM", base_shape(), FALSE};
  CohortLlamaShape *s = &c.shape;
  s->n_layer = 30, s->hidden = 576, s->intermediate = 1536, s->n_head = 9, s->n_kv_head = 3;
  s->head_dim = 64, s->vocab_size = 49152, s->seq_len = NT, s->tied = TRUE;
  s->rope.theta = 100000.0;
  g_autoptr(GError) error = NULL;
  cohort_model_set_creating_frozen(TRUE);
  g_autoptr(CohortModel) m = cohort_llama_new_on(cohort_backend_cpu(), s, 1, &error);
  cohort_model_set_creating_frozen(FALSE);
  g_assert_no_error(error);
  g_assert_cmpuint(m->n_params, ==, 134515008); /* SmolLM2-135M's count */
  randomise(m);
  int inputs[NT], targets[NT];
  make_tokens_n(inputs, targets, s->vocab_size, NT);
  float loss = cohort_llama_forward(m, inputs, targets, 1, NT);
  g_autoptr(GHashTable) ref = run_reference(&c, m, inputs, targets, 1, NT, "forward");
  double ref_loss = g_array_index((GArray *)g_hash_table_lookup(ref, "loss"), double, 0);
  g_assert_cmpfloat(fabs(loss - ref_loss), <=, 1e-5 * fabs(ref_loss));
  double worst = compare("logits", cohort_llama_logits(m), g_hash_table_lookup(ref, "logits"),
                         (size_t)NT * s->vocab_size);
  g_test_message("SmolLM2-135M shape: loss %.7f vs PyTorch %.7f; largest logit error %.2e of the "
                 "max",
                 loss, ref_loss, worst);
}

static void test_table(void)
{
  Case c = qwen3_case();
  g_autoptr(CohortModel) m = make_model(&c);
  /* embed, 2 × (2 norms, q, k, v, q_norm, k_norm, o, gate, up, down), norm; tied: no lm_head */
  g_assert_cmpuint(m->n_tensors, ==, 1 + 2 * 11 + 1);
  size_t off = 0;
  int layer = -1;
  for (guint i = 0; i < m->n_tensors; i++) {
    g_assert_cmpuint(m->tensors[i].offset, ==, off);
    g_assert_cmpint(m->tensors[i].layer, >=, layer); /* forward order */
    layer = m->tensors[i].layer;
    off += m->tensors[i].numel;
  }
  g_assert_cmpuint(off, ==, m->n_params);
  const CohortTensorInfo *q = cohort_model_find_tensor(m, "model.layers.1.self_attn.q_proj.weight");
  g_assert_nonnull(q);
  g_assert_cmpint(q->shape[0], ==, 4 * 16); /* heads · head_dim, hidden */
  g_assert_cmpint(q->shape[1], ==, 16);
  g_assert_cmpint(q->adapt, ==, COHORT_ADAPT_LINEAR);
  const CohortTensorInfo *kn =
      cohort_model_find_tensor(m, "model.layers.0.self_attn.k_norm.weight");
  g_assert_nonnull(kn);
  g_assert_cmpint(kn->shape[0], ==, 16);
  g_assert_null(cohort_model_find_tensor(m, "lm_head.weight"));
  g_assert_null(cohort_model_find_tensor(m, "model.layers.0.self_attn.q_proj.bias"));
  Case l = llama_case();
  g_autoptr(CohortModel) ml = make_model(&l);
  g_assert_nonnull(cohort_model_find_tensor(ml, "lm_head.weight"));
  g_assert_nonnull(cohort_model_find_tensor(ml, "model.layers.0.self_attn.o_proj.bias"));
  g_assert_null(cohort_model_find_tensor(ml, "model.layers.0.self_attn.q_norm.weight"));
}

typedef struct {
  size_t next;
  guint calls;
} Hook;

static void on_ready(size_t offset, size_t count, gpointer data)
{
  Hook *h = data;
  g_assert_cmpuint(offset + count, ==, h->next); /* contiguous, in decreasing offsets */
  h->next = offset;
  h->calls++;
}

static void test_grad_ready(void)
{
  Case c = llama_case();
  g_autoptr(CohortModel) m = make_model(&c);
  Hook h = {.next = m->n_params};
  cohort_model_set_grad_ready_func(m, on_ready, &h);
  int inputs[B * T], targets[B * T];
  make_tokens(inputs, targets, c.shape.vocab_size);
  cohort_model_zero_grad(m);
  cohort_llama_forward(m, inputs, targets, B, T);
  m->ops->backward(m, 1.0f);
  g_assert_cmpuint(h.next, ==, 0);
  g_assert_cmpuint(h.calls, ==, c.shape.n_layer + 2); /* norm and head, each block, embedding */
}

/* llama3: with theta 1e4, head_dim 8 and an original length of 64, the wavelengths 2π·10^k are
 * below 64/4 (kept), between (the ramp) and above 64 (divided by the factor). */
static void test_rope_llama3(void)
{
  CohortRope r = {COHORT_ROPE_LLAMA3, 10000.0, 8.0, 1.0, 4.0, 64};
  double inv[4];
  cohort_rope_inv_freq(&r, 8, inv);
  g_assert_cmpfloat(inv[0], ==, 1.0);
  double smooth = (64.0 / (2 * G_PI / 0.1) - 1.0) / 3.0;
  g_assert_cmpfloat(fabs(inv[1] - ((1 - smooth) * 0.1 / 8 + smooth * 0.1)), <, 1e-15);
  g_assert_cmpfloat(fabs(inv[2] - 0.01 / 8), <, 1e-15);
  g_assert_cmpfloat(fabs(inv[3] - 0.001 / 8), <, 1e-16);
  CohortRope lin = {.type = COHORT_ROPE_LINEAR, .theta = 10000.0, .factor = 2.0};
  cohort_rope_inv_freq(&lin, 8, inv);
  g_assert_cmpfloat(fabs(inv[1] - 0.05), <, 1e-15);
}

static void test_bad_shapes(void)
{
  CohortLlamaShape s = llama_case().shape;
  g_autoptr(GError) error = NULL;
  s.n_kv_head = 3; /* 4 heads */
  g_assert_false(cohort_llama_check_shape(&s, &error));
  g_assert_nonnull(strstr(error->message, "\"num_key_value_heads\": 3 does not divide"));
  g_clear_error(&error);
  s = llama_case().shape;
  s.head_dim = 7;
  g_assert_null(cohort_llama_new_on(cohort_backend_cpu(), &s, 1, &error));
  g_assert_nonnull(strstr(error->message, "\"head_dim\": 7"));
  g_clear_error(&error);
  s = llama_case().shape;
  s.rope.high_freq_factor = 0.5;
  g_assert_false(cohort_llama_check_shape(&s, &error));
  g_assert_nonnull(strstr(error->message, "high_freq_factor 0.5"));
  g_clear_error(&error);
  s = llama_case().shape;
  s.hidden = 0;
  g_assert_false(cohort_llama_check_shape(&s, &error));
  g_assert_nonnull(strstr(error->message, "\"hidden_size\": 0"));
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/llama/table", test_table);
  g_test_add_func("/llama/grad-ready-hook", test_grad_ready);
  g_test_add_func("/llama/rope-llama3", test_rope_llama3);
  g_test_add_func("/llama/bad-shapes", test_bad_shapes);
  g_test_add_func("/llama/torch/smollm2-135m-forward", test_smollm2_forward);
  const char *names[] = {"llama", "mistral", "qwen2", "qwen3"};
  for (int i = 0; i < (int)G_N_ELEMENTS(names); i++) {
    g_autofree char *path = g_strdup_printf("/llama/torch/%s", names[i]);
    g_test_add_data_func(path, GINT_TO_POINTER(i), check_against_torch);
  }
  return g_test_run();
}

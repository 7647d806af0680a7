/* data_format chat end to end (suite dist): tiny-gpt's shape (and a tiny llama) on
 * conversations through a tiny built tokenizer and a hand chat template; 2 ranks × batch 2
 * compute, step by step, what one process computes with batch 4, although the ranks hold
 * different numbers of assistant tokens (each step's loss is over the step's assistant tokens on
 * all ranks); a bad line stops cohort-train with one line naming the file, the line and the
 * field. */
#include <math.h>
#include <string.h>

#include "data/tokenizer.h"
#include "test-util.h"
#include "tokenizer-fixtures.h"

static const char *const base_sets[] = {
    "n_layer=2",      "n_head=2",     "n_embd=32",      "seq_len=64",          "data_format=chat",
    "warmup_steps=1", "eval_every=0", "sample_every=0", "save_every=0",        "threads=1",
    "timeout_s=60",   "val_data=",    "shuffle=true",   "learning_rate=0.001", NULL,
};
#define DDP_BASE_SETS base_sets
#include "ddp-run.h"

static const char hand_template[] =
    "{% for m in messages %}{% if loop.first %}<|endoftext|>{% endif %}"
    "{{ m.role + '\\n' + m.content | trim }}<|end|>{{ '\\n' }}{% endfor %}";

typedef struct {
  char *dir, *tok_set, *data_set, *vocab_set;
} Fixture;

/* The tokenizer folder and 24 conversations whose assistants say 1 to 6 words. */
static void fixture(Fixture *f)
{
  f->dir = tu_mkdtemp("chat-ddp");
  TinyTok *t = tf_new(3, 8);
  g_autofree char *json = tf_tokenizer_json(t, FALSE);
  tf_free(t);
  g_autofree char *tp = g_build_filename(f->dir, "tokenizer.json", NULL);
  g_assert_true(g_file_set_contents(tp, json, -1, NULL));
  g_autofree char *lit = tf_json_string(hand_template);
  g_autofree char *cfg =
      g_strdup_printf("{\"chat_template\": %s, \"eos_token\": \"<|end|>\"}", lit);
  g_autofree char *cp = g_build_filename(f->dir, "tokenizer_config.json", NULL);
  g_assert_true(g_file_set_contents(cp, cfg, -1, NULL));
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortTokenizer) tok = cohort_tokenizer_load(f->dir, &error);
  g_assert_no_error(error);
  g_autoptr(GString) lines = g_string_new(NULL);
  for (int i = 0; i < 24; i++) {
    g_autoptr(GString) reply = g_string_new(NULL);
    for (int w = 0; w <= i % 6; w++)
      g_string_append(reply, w % 2 ? " world" : " hello");
    g_string_append_printf(lines,
                           "{\"messages\": [{\"role\": \"user\", \"content\": \"say %d\"}, "
                           "{\"role\": \"assistant\", \"content\": \"%s\"}]}\n",
                           i, reply->str);
  }
  g_autofree char *data = g_build_filename(f->dir, "chats.jsonl", NULL);
  g_assert_true(g_file_set_contents(data, lines->str, -1, NULL));
  f->tok_set = g_strdup_printf("tokenizer=%s", f->dir);
  f->data_set = g_strdup_printf("train_data=%s", data);
  f->vocab_set = g_strdup_printf("vocab_size=%d", cohort_tokenizer_vocab_size(tok));
}

static void fixture_free(Fixture *f)
{
  tu_rm_rf(f->dir);
  g_free(f->dir);
  g_free(f->tok_set);
  g_free(f->data_set);
  g_free(f->vocab_set);
}

/* The llama family on the same widths: grouped-query attention 2/1, a SwiGLU of 64. */
static const char *const llama_sets[] = {"model=llama", "num_key_value_heads=1",
                                         "intermediate_size=64", NULL};

/* 2 ranks × `batch` equal one process × 2·batch (both with `accum` micro-batches a step): every
 * step's loss and the final weights (tolerance as in test-ddp: a thousandth of what AdamW can
 * move a weight in the run). `model` (NULL-terminated, or NULL) sets another family; `split`
 * (or NULL) is the 2 ranks' rank_batch_sizes, whose shares add up to 2·batch. */
static void check_two_ranks_split(int batch, int accum, const char *const *model, const char *split)
{
  Fixture f;
  fixture(&f);
  const int steps = 6;
  g_autofree char *b2 = g_strdup_printf("batch_size=%d", batch);
  g_autofree char *b1 = g_strdup_printf("batch_size=%d", 2 * batch);
  g_autofree char *ga = g_strdup_printf("gradient_accumulation_steps=%d", accum);
  const char *m0 = model ? model[0] : NULL, *m1 = m0 ? model[1] : NULL;
  const char *m2 = m1 ? model[2] : NULL;
  g_autofree char *rbs = split ? g_strdup_printf("rank_batch_sizes=%s", split) : NULL;
  const char *two[] = {f.tok_set, f.data_set, f.vocab_set, b2,   ga,  "max_steps=6",
                       m0,        m1,         m2,          NULL, NULL};
  two[m0 ? (m1 ? (m2 ? 9 : 8) : 7) : 6] = rbs;
  const char *one[] = {f.tok_set, f.data_set, f.vocab_set, b1, ga, "max_steps=6", m0, m1, m2, NULL};
  GArray *l2 = NULL, *l1 = NULL;
  g_autoptr(GArray) w2 = train_run(2, two, "chat-2", &l2);
  g_autoptr(GArray) w1 = train_run(1, one, "chat-1", &l1);
  g_assert_cmpuint(l1->len, ==, (guint)steps);
  g_assert_cmpuint(l2->len, ==, (guint)steps);
  for (int s = 0; s < steps; s++) {
    double a = g_array_index(l1, double, s), b = g_array_index(l2, double, s);
    g_test_message("step %d: loss %.6f (1 process) %.6f (2 ranks)", s + 1, a, b);
    g_assert_cmpfloat(fabs(a - b), <=, 1e-5 * fabs(a));
  }
  double diff = max_abs_diff(w1, w2), tol = 1e-3 * 1e-3 * steps;
  g_test_message("max |Δw| %.3g (tolerance %.3g)", diff, tol);
  g_assert_cmpfloat(diff, <=, tol);
  /* The loss fell and the weights moved far beyond the tolerance. */
  g_assert_cmpfloat(g_array_index(l1, double, steps - 1), <, g_array_index(l1, double, 0));
  const char *first[] = {f.tok_set,     f.data_set, f.vocab_set, b1, ga,
                         "max_steps=1", m0,         m1,          m2, NULL};
  g_autoptr(GArray) w0 = train_weights(1, first, "chat-0");
  g_assert_cmpfloat(max_abs_diff(w0, w1), >, 100 * tol);
  g_array_unref(l1);
  g_array_unref(l2);
  fixture_free(&f);
}

static void check_two_ranks(int batch, int accum, const char *const *model)
{
  check_two_ranks_split(batch, accum, model, NULL);
}

static void test_two_ranks(void)
{
  check_two_ranks(2, 1, NULL);
}

static void test_two_ranks_accum(void)
{
  check_two_ranks(1, 2, NULL);
}

static void test_two_ranks_llama(void)
{
  check_two_ranks(2, 1, llama_sets);
}

/* Uneven shares (rank_batch_sizes): rank 0 takes 3 conversations, rank 1 one, and the step
 * is still the mean over every assistant token of the 4 (each rank's loss norm carries its
 * share's weight, which the gradient's weighting then cancels). */
static void test_uneven(void)
{
  check_two_ranks_split(2, 2, NULL, "3,1");
}

/* A bad line: exit non-zero, one line naming the file, the line and the field. */
static void test_bad_line(void)
{
  Fixture f;
  fixture(&f);
  g_autofree char *bad = g_build_filename(f.dir, "bad.jsonl", NULL);
  g_assert_true(g_file_set_contents(
      bad,
      "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", "
      "\"content\": \"b\"}]}\n\n{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, "
      "{\"role\": \"bot\", \"content\": \"b\"}]}\n",
      -1, NULL));
  g_autofree char *ws = tu_mkdtemp("chat-bad");
  g_autofree char *data_set = g_strdup_printf("train_data=%s", bad);
  g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(argv, g_strdup(program("COHORT_TRAIN")));
  g_ptr_array_add(argv, g_strdup("--quiet"));
  add_sets(argv, ws, (const char *[]){f.tok_set, data_set, f.vocab_set, "max_steps=1", NULL});
  Result r = run(argv, NULL, NULL);
  g_assert_cmpint(r.status, !=, 0);
  g_autofree char *where = g_strdup_printf("%s:3: field \"messages[1].role\": bot; allowed:", bad);
  const char *hit = strstr(r.err, where);
  g_assert_nonnull(hit);
  g_assert_nonnull(strstr(hit, "allowed: system, user, assistant, tool\n"));
  g_free(r.err);
  tu_rm_rf(ws);
  fixture_free(&f);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/chat-ddp/two-ranks", test_two_ranks);
  g_test_add_func("/chat-ddp/two-ranks-accumulation", test_two_ranks_accum);
  g_test_add_func("/chat-ddp/two-ranks-llama", test_two_ranks_llama);
  g_test_add_func("/chat-ddp/uneven", test_uneven);
  g_test_add_func("/chat-ddp/bad-line", test_bad_line);
  return g_test_run();
}

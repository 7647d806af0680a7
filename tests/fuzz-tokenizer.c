/* Fuzzing the tokenizer readers and .jsonl documents (in process): a small valid tokenizer
 * (tests/tokenizer-fixtures.h) as tokenizer.json and as vocab.json + merges.txt, broken on
 * purpose (truncations, bytes that are never valid, deep nesting, ids out of range or given
 * twice, merges of unknown tokens, wrong types) and changed at random (bit flips, random
 * bytes, shuffled lines), and .jsonl files with mutated lines. A refusal is one line naming
 * the file (and for .jsonl the line); an accepted tokenizer must encode random bytes and
 * decode them back unchanged. See fuzz-util.h for the rules. */
#include "data/text-sources.h"
#include "data/tokenize-job.h"
#include "data/tokenizer.h"
#include "fuzz-util.h"
#include "tokenizer-fixtures.h"

typedef struct {
  FuzzTally t;
  FuzzRng rng;
  char *json;           /* the valid tokenizer.json */
  char *vocab, *merges; /* the valid vocab.json and merges.txt */
} Ctx;

/* An accepted tokenizer works: random bytes (any at all) come back from decode(encode()). */
static void check_works(Ctx *c, const char *path, CohortTokenizer *tok)
{
  g_autoptr(GByteArray) back = g_byte_array_new();
  for (guint k = 0; k < 20; k++) {
    guint8 text[200];
    gsize n = fuzz_below(&c->rng, sizeof text);
    for (gsize i = 0; i < n; i++)
      text[i] = (guint8)fuzz_below(&c->rng, 256);
    gsize m = 0;
    g_autofree int *ids = cohort_tokenizer_encode(tok, (char *)text, n, k % 2, &m, NULL);
    g_byte_array_set_size(back, 0);
    if (!cohort_tokenizer_decode(tok, ids, m, back, NULL) || back->len != n ||
        memcmp(back->data, text, n) != 0) {
      fuzz_fail(&c->t, path, "accepted, but bytes do not come back from decode(encode())");
      return;
    }
  }
}

/* Loads `path` (a tokenizer file or folder) and judges the outcome; `named` is what the
 * message must name. */
static void judge(Ctx *c, const char *path, const char *named, FuzzExpect expect,
                  const char *needle)
{
  fuzz_set_current(path);
  c->t.cases++;
  g_autoptr(GError) error = NULL;
  gint64 t0 = g_get_monotonic_time();
  g_autoptr(CohortTokenizer) tok = cohort_tokenizer_load(path, &error);
  fuzz_set_current("");
  double secs = (double)(g_get_monotonic_time() - t0) / 1e6;
  if (secs > 2.0 * fuzz_time_scale())
    fuzz_fail(&c->t, path, "took %.1f s (a small tokenizer loads in milliseconds)", secs);
  if (tok) {
    if (expect == FUZZ_REFUSE) {
      fuzz_fail(&c->t, path, "wrong accept: this case must be refused");
      return;
    }
    c->t.accepted++;
    check_works(c, path, tok);
    return;
  }
  if (expect == FUZZ_ACCEPT) {
    fuzz_fail(&c->t, path, "refused a valid tokenizer: %s", error ? error->message : "?");
    return;
  }
  c->t.refused++;
  const char *problem = error ? fuzz_message_problem(error->message, named) : "no error";
  if (!problem && needle && !strstr(error->message, needle))
    problem = "the message does not say what is wrong";
  if (problem)
    fuzz_fail(&c->t, path, "%s (want \"%s\"): %s", problem, needle ? needle : "",
              error ? error->message : "");
}

static void json_case(Ctx *c, const char *name, const char *text, gsize len, FuzzExpect expect,
                      const char *needle)
{
  g_autofree char *file = g_strconcat(name, ".json", NULL);
  g_autofree char *path = fuzz_case_path(&c->t, file);
  fuzz_write(path, text, len);
  judge(c, path, path, expect, needle);
}

/* vocab.json and merges.txt in a folder of their own; the message must name `culprit`. */
static void pair_case(Ctx *c, const char *name, const char *vocab, gsize vlen, const char *merges,
                      gsize mlen, FuzzExpect expect, const char *needle)
{
  g_autofree char *dir = fuzz_case_path(&c->t, name);
  g_assert_cmpint(g_mkdir(dir, 0755), ==, 0);
  g_autofree char *vp = g_build_filename(dir, "vocab.json", NULL);
  g_autofree char *mp = g_build_filename(dir, "merges.txt", NULL);
  fuzz_write(vp, vocab, vlen);
  fuzz_write(mp, merges, mlen);
  judge(c, dir, dir, expect, needle);
}

/* Replaces the first `from` in text by `to`. */
static char *edit(const char *text, const char *from, const char *to)
{
  const char *at = strstr(text, from);
  g_assert_nonnull(at);
  return g_strdup_printf("%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
}

static void broken_json(Ctx *c)
{
  const char *t = c->json;
  gsize len = strlen(t);
  json_case(c, "valid", t, len, FUZZ_ACCEPT, NULL);
  json_case(c, "empty", "", 0, FUZZ_REFUSE, "not valid JSON");
  json_case(c, "null", "null", 4, FUZZ_REFUSE, "not a JSON object");
  json_case(c, "array", "[1, 2]", 6, FUZZ_REFUSE, "not a JSON object");
  json_case(c, "no-model", "{\"version\": \"1.0\"}", 18, FUZZ_REFUSE, "has no \"model\"");
  for (guint i = 0; i < 40; i++) {
    gsize cut = fuzz_below(&c->rng, len - 2);
    json_case(c, "truncated", t, cut, FUZZ_REFUSE, NULL);
  }
  for (guint i = 0; i < 40; i++) {
    g_autofree char *bad = g_strdup(t);
    bad[fuzz_below(&c->rng, len)] = (char)fuzz_never_valid_byte(&c->rng);
    json_case(c, "never-valid-byte", bad, len, FUZZ_REFUSE, NULL);
  }
  for (guint i = 0; i < 80; i++) {
    g_autofree char *flip = g_strdup(t);
    for (guint k = 0, n = 1 + fuzz_below(&c->rng, 3); k < n; k++)
      flip[fuzz_below(&c->rng, len)] ^= (char)(1u << fuzz_below(&c->rng, 8));
    json_case(c, "bit-flips", flip, len, FUZZ_EITHER, NULL);
  }
  struct {
    const char *from, *to, *needle;
  } edits[] = {
      {"\"vocab\": {", "\"vocab\": {\"zq\": 99999999999, ", "not allowed"},
      {"\"vocab\": {", "\"vocab\": {\"zq\": -5, ", "id -5"},
      {"\"vocab\": {", "\"vocab\": {\"zq\": 1.5, ", "no integer id"},
      {"\"vocab\": {", "\"vocab\": {\"zq\": \"1\", ", "no integer id"},
      {"\"vocab\": {", "\"vocab\": {\"\": 9999, ", "byte characters"},
      {"\"vocab\": {", "\"vocab\": {\"zq\": 3, ", "given to two tokens"},
      {"\"vocab\": {",
       "\"vocab\": {\"zq\": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
       "[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"
       "]]]]], ",
       "nested"},
      {"\"merges\": [", "\"merges\": [\"q zz\", ", "is not a token"},
      {"\"merges\": [", "\"merges\": [[\"a\"], ", "is not a merge"},
      {"\"merges\": [", "\"merges\": [7, ", "is not a merge"},
      {"\"merges\": [", "\"merges\": [\" a\", ", "is not a merge"},
      {"\"merges\": [", "\"merges\": [\"a  b\", ", "is not a merge"},
      {"\"merges\": [", "\"merges\": {\"x\": 1}, \"m\": [", "not an array"},
      {"\"vocab\": {", "\"vocab\": [], \"v\": {", "not a JSON object of tokens"},
      {"\"added_tokens\": [", "\"added_tokens\": [{\"id\": 1}, ", "non-empty \"content\""},
      {"\"added_tokens\": [", "\"added_tokens\": 5, \"x\": [", "not an array"},
      {"\"pre_tokenizer\": {", "\"pre_tokenizer\": 1, \"y\": {", "pre_tokenizer"},
      {"\"decoder\": {\"type\": \"ByteLevel\"}", "\"decoder\": {\"type\": \"WordPiece\"}",
       "decoder"},
  };
  for (guint i = 0; i < G_N_ELEMENTS(edits); i++) {
    g_autofree char *bad = edit(t, edits[i].from, edits[i].to);
    json_case(c, "edited", bad, strlen(bad), FUZZ_REFUSE, edits[i].needle);
  }
}

static void broken_pair(Ctx *c)
{
  gsize vl = strlen(c->vocab), ml = strlen(c->merges);
  pair_case(c, "pair-valid", c->vocab, vl, c->merges, ml, FUZZ_ACCEPT, NULL);
  for (guint i = 0; i < 30; i++)
    pair_case(c, "vocab-truncated", c->vocab, fuzz_below(&c->rng, vl - 2), c->merges, ml,
              FUZZ_REFUSE, NULL);
  g_auto(GStrv) lines = g_strsplit(c->merges, "\n", -1);
  guint n = g_strv_length(lines);
  for (guint i = 0; i < 60; i++) {
    g_autofree char *m = g_strdup(c->merges);
    for (guint k = 0, nf = 1 + fuzz_below(&c->rng, 4); k < nf; k++)
      m[fuzz_below(&c->rng, ml)] = (char)fuzz_below(&c->rng, 256);
    pair_case(c, "merges-bytes", c->vocab, vl, m, ml, FUZZ_EITHER, NULL);
  }
  /* The lines in another order: still merges of known tokens, still a tokenizer. */
  for (guint i = 0; i < 20; i++) {
    for (guint k = n - 2; k > 1; k--) {
      guint j = 1 + (guint)fuzz_below(&c->rng, k);
      char *x = lines[k];
      lines[k] = lines[j];
      lines[j] = x;
    }
    g_autofree char *m = g_strjoinv("\n", lines);
    pair_case(c, "merges-shuffled", c->vocab, vl, m, strlen(m), FUZZ_ACCEPT, NULL);
  }
  g_autofree char *extra = g_strconcat(c->merges, "zzz\n", NULL);
  pair_case(c, "merges-one-part", c->vocab, vl, extra, strlen(extra), FUZZ_REFUSE,
            "is not a merge");
  const char bad_utf8[] = "#version: 0.2\na \xff\n";
  pair_case(c, "merges-not-utf8", c->vocab, vl, bad_utf8, sizeof bad_utf8 - 1, FUZZ_REFUSE,
            "not UTF-8");
}

static gboolean ignore(const gint32 *ids, gsize n, gpointer data, GError **error)
{
  (void)ids, (void)n, (void)data, (void)error;
  return TRUE;
}

/* .jsonl lines mutated: refused with the file and the line, or tokenized. */
static void jsonl(Ctx *c, CohortTokenizer *tok)
{
  static const char *const good[] = {
      "{\"text\": \"hello world\"}", "{\"text\": \"caf\\u00e9 \\ud83d\\ude00\", \"id\": 3}",
      "{\"meta\": {\"a\": [1, 2]}, \"text\": \"x\"}", "", "{\"text\": \"\"}"};
  for (guint i = 0; i < 80; i++) {
    g_autoptr(GString) s = g_string_new(NULL);
    guint n = 1 + fuzz_below(&c->rng, 6);
    guint broken = i % 2 ? fuzz_below(&c->rng, n) : G_MAXUINT;
    for (guint k = 0; k < n; k++) {
      g_autofree char *line = g_strdup(good[fuzz_below(&c->rng, G_N_ELEMENTS(good))]);
      gsize len = strlen(line);
      if (k == broken && len > 0)
        line[fuzz_below(&c->rng, len)] = (char)fuzz_below(&c->rng, 256);
      g_string_append_len(s, line, (gssize)len);
      g_string_append_c(s, '\n');
    }
    g_autofree char *path = fuzz_case_path(&c->t, "docs.jsonl");
    fuzz_write(path, s->str, s->len);
    fuzz_set_current(path);
    c->t.cases++;
    const char *paths[] = {path, NULL};
    g_autoptr(GError) error = NULL;
    g_autoptr(CohortTextSources) src = cohort_text_sources_open(paths, &error);
    gboolean ok = src != NULL;
    if (ok) {
      CohortTokenizeJob job = {
          .tokenizer = tok, .threads = 2, .end = cohort_text_sources_size(src), .sink = ignore};
      ok = cohort_tokenize_run(src, &job, NULL, NULL, &error);
    }
    fuzz_set_current("");
    if (ok) {
      c->t.accepted++;
      continue;
    }
    c->t.refused++;
    g_autofree char *where = g_strdup_printf("%s: line ", path);
    const char *problem = fuzz_message_problem(error ? error->message : NULL, path);
    if (!problem && !strstr(error->message, where))
      problem = "the message does not name the line";
    if (problem || broken == G_MAXUINT)
      fuzz_fail(&c->t, path, "%s: %s", problem ? problem : "refused unbroken documents",
                error ? error->message : "");
  }
}

static void test_tokenizer_fuzz(void)
{
  Ctx c = {.rng = fuzz_rng_new(24)};
  fuzz_tally_init(&c.t, "tokenizer");
  TinyTok *tiny = tf_new(3, 40);
  c.json = tf_tokenizer_json(tiny, FALSE);
  g_autofree char *dir = fuzz_case_path(&c.t, "tiny");
  g_assert_cmpint(g_mkdir(dir, 0755), ==, 0);
  tf_write_vocab_merges(tiny, dir);
  g_autofree char *vp = g_build_filename(dir, "vocab.json", NULL);
  g_autofree char *mp = g_build_filename(dir, "merges.txt", NULL);
  g_assert_true(g_file_get_contents(vp, &c.vocab, NULL, NULL));
  g_assert_true(g_file_get_contents(mp, &c.merges, NULL, NULL));
  g_autoptr(CohortTokenizer) tok = cohort_tokenizer_load(dir, NULL);
  g_assert_nonnull(tok);
  broken_json(&c);
  broken_pair(&c);
  jsonl(&c, tok);
  tf_free(tiny);
  g_free(c.json);
  g_free(c.vocab);
  g_free(c.merges);
  fuzz_tally_finish(&c.t, 300);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  fuzz_watch_crashes();
  g_test_add_func("/fuzz/tokenizer", test_tokenizer_fuzz);
  return g_test_run();
}

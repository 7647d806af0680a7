/* The byte-level BPE tokenizer (data/tokenizer.h) on small tokenizers made here
 * (tests/tokenizer-fixtures.h): the GPT-2 split against GLib's own regular expressions
 * (PCRE2) and pinned cases, the merges against a plain re-implementation of GPT-2's bpe() on
 * short and long pieces, both file formats alike, special tokens only where asked, round
 * trips of any bytes, safe cuts, and the loader's refusals. The real GPT-2 vocabulary is
 * test-tokenizer-gpt2's. */
#include <glib/gstdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>

#include "data/tokenizer.h"
#include "text-corpus.h"
#include "tokenizer-fixtures.h"

#define GPT2_PATTERN                                                                               \
  "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

typedef struct {
  char *dir;
  TinyTok *tiny;
  CohortTokenizer *tok; /* from vocab.json + merges.txt */
} Fixture;

static void setup(Fixture *f, gconstpointer data)
{
  (void)data;
  f->dir = g_dir_make_tmp("cohort-tokenizer-XXXXXX", NULL);
  f->tiny = tf_new(7, 120);
  tf_write_vocab_merges(f->tiny, f->dir);
  g_autoptr(GError) error = NULL;
  f->tok = cohort_tokenizer_load(f->dir, &error);
  g_assert_no_error(error);
}

static void teardown(Fixture *f, gconstpointer data)
{
  (void)data;
  cohort_tokenizer_free(f->tok);
  tf_free(f->tiny);
  g_autofree char *rm = g_strdup_printf("rm -rf '%s'", f->dir);
  g_assert_cmpint(system(rm), ==, 0);
  g_free(f->dir);
}

/* ---- the split ---- */

static GArray *regex_split(GRegex *re, const char *text)
{
  GArray *ends = g_array_new(FALSE, FALSE, sizeof(gsize));
  g_autoptr(GMatchInfo) m = NULL;
  gsize at = 0;
  g_regex_match(re, text, 0, &m);
  while (g_match_info_matches(m)) {
    int s, e;
    g_match_info_fetch_pos(m, 0, &s, &e);
    g_assert_cmpint(s, ==, (int)at); /* the matches tile the text */
    at = (gsize)e;
    g_array_append_val(ends, at);
    g_match_info_next(m, NULL);
  }
  g_assert_cmpuint(at, ==, strlen(text));
  return ends;
}

static void assert_same_split(GRegex *re, const char *text)
{
  g_autoptr(GArray) want = regex_split(re, text);
  g_autoptr(GArray) got = cohort_bpe_split(text, strlen(text));
  if (got->len != want->len ||
      (got->len > 0 && memcmp(got->data, want->data, got->len * sizeof(gsize)) != 0)) {
    g_autofree char *shown = g_strescape(text, NULL);
    g_error("split of \"%.200s\" differs from PCRE's (%u pieces, PCRE %u)", shown, got->len,
            want->len);
  }
}

/* Valid UTF-8 without U+0085 and U+FEFF, where the two \s agree (PCRE2's is Perl's: the
 * separators and \t\n\v\f\r), against GRegex. */
static void test_split_regex(void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GRegex) re = g_regex_new(GPT2_PATTERN, G_REGEX_OPTIMIZE, 0, &error);
  g_assert_no_error(error);
  static const char *const cases[] = {
      "",
      " ",
      "  ",
      "a",
      " a",
      "  a",
      "a  b",
      "\n\nx",
      "x\n\n",
      "x \n y",
      "I'm here",
      "'s's",
      "''s",
      " 's",
      "'S",
      "it's'",
      "a'll've",
      "123abc456",
      " 12 34",
      "a\t\tb",
      "\r\n\r\n",
      "x  ",
      "  \tx",
      "!!! ?? ..",
      " !x",
      "é e\xcc\x81",
      "日本語 の",
      "١٢٣ ٤",
      "\xc2\xa0x",
      "x\xe3\x80\x80\xe3\x80\x80y",
      "😀 😀😀 a😀",
      "\t",
      "ǅx ʰy",
      "a\xe2\x80\xa8"
      "b",
  };
  for (guint i = 0; i < G_N_ELEMENTS(cases); i++)
    assert_same_split(re, cases[i]);
  g_autoptr(GString) s = g_string_new(NULL);
  for (guint i = 0; i < 400; i++) {
    corpus_document(3, i, s);
    if (!g_utf8_validate(s->str, (gssize)s->len, NULL))
      continue;
    assert_same_split(re, s->str);
  }
}

static void assert_pieces(const char *text, gsize len, const char *const *pieces)
{
  g_autoptr(GArray) ends = cohort_bpe_split(text, len);
  gsize at = 0;
  guint i = 0;
  for (; pieces[i]; i++) {
    g_assert_cmpuint(i, <, ends->len);
    gsize end = g_array_index(ends, gsize, i);
    g_assert_cmpmem(text + at, end - at, pieces[i], strlen(pieces[i]));
    at = end;
  }
  g_assert_cmpuint(i, ==, ends->len);
}

/* What only Cohort's split decides: U+0085 is a space and U+FEFF is not (Unicode's
 * White_Space, as GPT-2's Python and tiktoken; JavaScript says the opposite), and bytes that
 * are not UTF-8 are "other" characters, one per byte. */
static void test_split_pinned(void)
{
  const char *const nel[] = {"a", "\xc2\x85", "\xc2\x85", "b", NULL};
  assert_pieces("a\xc2\x85\xc2\x85"
                "b",
                6, nel);
  const char *const nel2[] = {"x", " ", "\xc2\x85", "y", NULL};
  assert_pieces("x \xc2\x85y", 5, nel2);
  const char *const bom[] = {"a", " \xef\xbb\xbf", "b", NULL};
  assert_pieces("a \xef\xbb\xbf"
                "b",
                6, bom);
  const char *const bad[] = {"ab", " \xff\xfe", "c", "\x80", " ", " \xc3", NULL};
  assert_pieces("ab \xff\xfe"
                "c\x80  \xc3",
                10, bad);
  /* A truncated character before a letter: the lead byte alone is "other". */
  const char *const cut[] = {"\xe2\x82", "x", NULL};
  assert_pieces("\xe2\x82x", 3, cut);
  /* NUL is a character like any other (an "other" one). */
  g_autoptr(GArray) nul = cohort_bpe_split("a\0b", 3);
  g_assert_cmpuint(nul->len, ==, 3);
  g_assert_cmpuint(g_array_index(nul, gsize, 1), ==, 2);
}

/* ---- the merges against GPT-2's bpe() ---- */

/* GPT-2's bpe() on byte strings: the lowest-ranked adjacent pair, all its occurrences merged
 * left to right, until no pair has a rank (ranks: "left\x01right" → rank; later wins). */
static GPtrArray *ref_bpe(GHashTable *ranks, const guint8 *p, gsize n)
{
  GPtrArray *w = g_ptr_array_new_with_free_func(g_free);
  for (gsize i = 0; i < n; i++)
    g_ptr_array_add(w, g_strndup((const char *)p + i, 1));
  for (;;) {
    gint best = G_MAXINT, at = -1;
    for (guint i = 0; i + 1 < w->len; i++) {
      g_autofree char *key = g_strconcat(w->pdata[i], "\x01", w->pdata[i + 1], NULL);
      gpointer v = g_hash_table_lookup(ranks, key);
      if (v && GPOINTER_TO_INT(v) - 1 < best) {
        best = GPOINTER_TO_INT(v) - 1;
        at = (gint)i;
      }
    }
    if (at < 0)
      break;
    g_autofree char *a = g_strdup(w->pdata[at]), *b = g_strdup(w->pdata[at + 1]);
    GPtrArray *nw = g_ptr_array_new_with_free_func(g_free);
    for (guint i = 0; i < w->len;) {
      if (i + 1 < w->len && g_str_equal(w->pdata[i], a) && g_str_equal(w->pdata[i + 1], b)) {
        g_ptr_array_add(nw, g_strconcat(a, b, NULL));
        i += 2;
      } else {
        g_ptr_array_add(nw, g_strdup(w->pdata[i++]));
      }
    }
    g_ptr_array_unref(w);
    w = nw;
  }
  return w;
}

static GHashTable *ref_ranks(TinyTok *t)
{
  GHashTable *ranks = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
  for (guint i = 0; i < t->merges->len; i++) {
    gsize la, lb;
    const char *a = g_bytes_get_data(t->merge_parts->pdata[2 * i], &la);
    const char *b = g_bytes_get_data(t->merge_parts->pdata[2 * i + 1], &lb);
    g_hash_table_insert(ranks, g_strdup_printf("%.*s\x01%.*s", (int)la, a, (int)lb, b),
                        GINT_TO_POINTER((int)i + 1));
  }
  return ranks;
}

/* Strings of a and b (one piece each) of every length to 300: pieces up to 64 bytes take the
 * array path, longer ones the heap. */
static void test_merges(Fixture *f, gconstpointer data)
{
  (void)data;
  g_autoptr(GHashTable) ranks = ref_ranks(f->tiny);
  GRand *r = g_rand_new_with_seed(11);
  g_autoptr(GString) s = g_string_new(NULL);
  for (guint n = 1; n <= 300; n++) {
    for (guint rep = 0; rep < 4; rep++) {
      g_string_truncate(s, 0);
      for (guint i = 0; i < n; i++)
        g_string_append_c(s, rep == 0 ? 'a' : g_rand_boolean(r) ? 'a' : 'b');
      g_autoptr(GPtrArray) want = ref_bpe(ranks, (const guint8 *)s->str, s->len);
      gsize m = 0;
      g_autofree int *got = cohort_tokenizer_encode(f->tok, s->str, s->len, FALSE, &m, NULL);
      g_assert_cmpuint(m, ==, want->len);
      for (guint i = 0; i < want->len; i++) {
        const char *w = want->pdata[i];
        g_assert_cmpint(got[i], ==, tf_find(f->tiny, (const guint8 *)w, strlen(w)));
      }
    }
  }
  g_rand_free(r);
}

/* ---- formats, specials, round trips, decoding ---- */

static CohortTokenizer *load_json_text(Fixture *f, const char *text, GError **error)
{
  g_autofree char *path = g_build_filename(f->dir, "tokenizer.json", NULL);
  g_assert_true(g_file_set_contents(path, text, -1, NULL));
  CohortTokenizer *t = cohort_tokenizer_load(path, error);
  g_unlink(path);
  return t;
}

static void test_formats(Fixture *f, gconstpointer data)
{
  (void)data;
  for (int pairs = 0; pairs < 2; pairs++) {
    g_autofree char *json = tf_tokenizer_json(f->tiny, pairs);
    g_autoptr(GError) error = NULL;
    g_autoptr(CohortTokenizer) t = load_json_text(f, json, &error);
    g_assert_no_error(error);
    g_assert_cmpint(cohort_tokenizer_vocab_size(t), ==, f->tiny->tokens->len + 2);
    g_assert_cmpint(cohort_tokenizer_eot(t), ==, f->tiny->tokens->len);
    g_assert_cmpstr(cohort_tokenizer_kind(t), ==, "tokenizer.json");
    g_autoptr(GString) s = g_string_new(NULL);
    for (guint i = 0; i < 50; i++) {
      corpus_document(5, i, s);
      g_string_append(s, " hello world aabbab 123 's");
      gsize n1, n2;
      g_autofree int *a = cohort_tokenizer_encode(f->tok, s->str, s->len, FALSE, &n1, NULL);
      g_autofree int *b = cohort_tokenizer_encode(t, s->str, s->len, FALSE, &n2, NULL);
      g_assert_cmpmem(a, n1 * sizeof(int), b, n2 * sizeof(int));
    }
  }
  g_assert_cmpstr(cohort_tokenizer_kind(f->tok), ==, "vocab.json + merges.txt");
  g_assert_cmpint(cohort_tokenizer_eot(f->tok), ==, f->tiny->tokens->len);
  /* GPT-2's split lets threads and ranks share a document. */
  g_assert_true(cohort_tokenizer_cuts_documents(f->tok));
  gsize n;
  g_autofree int *hello = cohort_tokenizer_encode(f->tok, " hello world", 12, FALSE, &n, NULL);
  g_assert_cmpuint(n, ==, 2);
  g_assert_cmpint(hello[0], ==, tf_find(f->tiny, (const guint8 *)" hello", 6));
  g_assert_cmpint(hello[1], ==, tf_find(f->tiny, (const guint8 *)" world", 6));
}

static void test_special(Fixture *f, gconstpointer data)
{
  (void)data;
  g_autofree char *json = tf_tokenizer_json(f->tiny, FALSE);
  g_autoptr(CohortTokenizer) t = load_json_text(f, json, NULL);
  g_assert_nonnull(t);
  int eot = (int)f->tiny->tokens->len, end = eot + 1;
  const char *text = "a<|endoftext|><|end|>b<|end|x";
  gsize n;
  g_autofree int *on = cohort_tokenizer_encode(t, text, strlen(text), TRUE, &n, NULL);
  int want[] = {'a', eot, end, 'b', '<', '|', 'e', 'n', 'd', '|', 'x'};
  g_assert_cmpuint(n, ==, G_N_ELEMENTS(want));
  for (guint i = 0; i < n; i++)
    g_assert_cmpint(on[i], ==,
                    want[i] < 256 ? tf_find(f->tiny, (guint8[]){(guint8)want[i]}, 1) : want[i]);
  /* Not asked: the special tokens are text. */
  gsize m;
  g_autofree int *off = cohort_tokenizer_encode(t, text, strlen(text), FALSE, &m, NULL);
  for (guint i = 0; i < m; i++)
    g_assert_cmpint(off[i], <, eot);
  g_autoptr(GByteArray) back = g_byte_array_new();
  g_assert_true(cohort_tokenizer_decode(t, on, n, back, NULL));
  g_assert_cmpmem(back->data, back->len, text, strlen(text));
  /* vocab.json + merges.txt: <|endoftext|> is special (as Hugging Face's GPT2Tokenizer has it). */
  g_autofree int *v = cohort_tokenizer_encode(f->tok, "<|endoftext|>", 13, TRUE, &n, NULL);
  g_assert_cmpuint(n, ==, 1);
  g_assert_cmpint(v[0], ==, eot);
}

static void test_round_trip(Fixture *f, gconstpointer data)
{
  (void)data;
  GRand *r = g_rand_new_with_seed(3);
  g_autoptr(GByteArray) back = g_byte_array_new();
  for (guint k = 0; k < 2000; k++) {
    guint n = (guint)g_rand_int_range(r, 0, 400);
    g_autofree guint8 *bytes = g_malloc(n + 1);
    for (guint i = 0; i < n; i++) /* bias towards spaces, letters and high bytes */
      bytes[i] = (guint8)(k % 3 == 0   ? g_rand_int_range(r, 0, 256)
                          : k % 3 == 1 ? " ab\n\xc3\xa9\x80\xff"[g_rand_int_range(r, 0, 9)]
                                       : "  \t\xe3\x80\x80x"[g_rand_int_range(r, 0, 7)]);
    gsize m;
    g_autofree int *ids = cohort_tokenizer_encode(f->tok, (char *)bytes, n, k % 2, &m, NULL);
    g_byte_array_set_size(back, 0);
    g_assert_true(cohort_tokenizer_decode(f->tok, ids, m, back, NULL));
    g_assert_cmpmem(back->data, back->len, bytes, n);
  }
  g_rand_free(r);
  int bad[] = {1, cohort_tokenizer_vocab_size(f->tok)};
  g_autoptr(GError) error = NULL;
  g_byte_array_set_size(back, 0);
  g_assert_false(cohort_tokenizer_decode(f->tok, bad, 2, back, &error));
  g_assert_error(error, COHORT_TOKENIZER_ERROR, COHORT_TOKENIZER_ERROR_ID);
  g_assert_nonnull(strstr(error->message, "position 1"));
  g_assert_cmpuint(back->len, ==, 0);
}

/* Encoding two parts cut at a safe place gives the ids of the whole. */
static void test_safe_cut(Fixture *f, gconstpointer data)
{
  (void)data;
  g_autoptr(GString) s = g_string_new(NULL);
  guint cuts = 0;
  for (guint i = 0; i < 120; i++) {
    corpus_document(9, i, s);
    gsize n;
    g_autofree int *whole = cohort_tokenizer_encode(f->tok, s->str, s->len, FALSE, &n, NULL);
    for (gsize want = 0; want < s->len; want += 97) {
      gsize p = cohort_bpe_safe_cut(s->str, s->len, want);
      if (p >= s->len)
        break;
      g_assert_cmpuint(p, >=, want);
      gsize a, b;
      g_autofree int *x = cohort_tokenizer_encode(f->tok, s->str, p, FALSE, &a, NULL);
      g_autofree int *y = cohort_tokenizer_encode(f->tok, s->str + p, s->len - p, FALSE, &b, NULL);
      g_assert_cmpuint(a + b, ==, n);
      g_assert_cmpmem(x, a * sizeof(int), whole, a * sizeof(int));
      g_assert_cmpmem(y, b * sizeof(int), whole + a, b * sizeof(int));
      cuts++;
    }
  }
  g_assert_cmpuint(cuts, >, 1000);
  /* Text without spaces is cut after a newline between two non-spaces. */
  const char *cjk = "日本語\n中文。\n\n한국어";
  g_assert_cmpuint(cohort_bpe_safe_cut(cjk, strlen(cjk), 1), ==, strlen("日本語\n"));
  g_assert_cmpuint(cohort_bpe_safe_cut(cjk, strlen(cjk), strlen("日本語\n") + 1), ==, strlen(cjk));
}

/* ---- refusals ---- */

static void test_refusals(Fixture *f, gconstpointer data)
{
  (void)data;
  struct {
    const char *from, *to, *needle;
  } edits[] = {
      {"\"normalizer\": null", "\"normalizer\": {\"type\": \"BertNormalizer\"}",
       "normalizer.type \"BertNormalizer\" is not a normalizer Cohort implements"},
      {"\"normalizer\": null",
       "\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": "
       "[{\"type\": \"NFC\"}, {\"type\": \"Precompiled\"}]}",
       "normalizer.normalizers[1].type \"Precompiled\""},
      {"\"dropout\": null", "\"dropout\": 0.1", "model.dropout"},
      {"\"fuse_unk\": false, ", "\"fuse_unk\": false, \"byte_fallback\": true, ",
       "model.byte_fallback"},
      {"\"type\": \"BPE\"", "\"type\": \"WordPiece\"", "model.type \"WordPiece\""},
      {"\"continuing_subword_prefix\": \"\"", "\"continuing_subword_prefix\": \"##\"",
       "model.continuing_subword_prefix"},
      {"\"type\": \"ByteLevel\", \"add_prefix_space\"",
       "\"type\": \"Whitespace\", \"add_prefix_space\"", "pre_tokenizer.type \"Whitespace\""},
      {"\"decoder\": {\"type\": \"ByteLevel\"}", "\"decoder\": {\"type\": \"WordPiece\"}",
       "decoder.type \"WordPiece\""},
      {"\"decoder\": {\"type\": \"ByteLevel\"}", "\"decoder\": {\"type\": \"Fuse\"}",
       "needs the ByteLevel decoder"},
      {"\"post_processor\": {\"type\": \"ByteLevel\"}",
       "\"post_processor\": {\"type\": \"BertPostProcessor\"}",
       "post_processor.type \"BertPostProcessor\""},
      {"\"pre_tokenizer\": {",
       "\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": "
       "\"Split\", \"pattern\": {\"Regex\": \"(a\"}, \"behavior\": \"Isolated\"}]}, \"p\": {",
       "pre_tokenizer.pretokenizers[0].pattern.Regex: the regular expression \"(a\" is not one "
       "PCRE2 reads"},
      {"\"pre_tokenizer\": {",
       "\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": "
       "\"Split\", \"pattern\": {\"Regex\": \"(a+)+$\"}, \"behavior\": \"Isolated\"}]}, \"p\": {",
       "match limit"},
      {"\"pre_tokenizer\": {",
       "\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": "
       "\"ByteLevel\"}, {\"type\": \"Digits\"}]}, \"p\": {",
       "ByteLevel as the last pre-tokenizer"},
      {"\"id\": ", "\"single_word\": true, \"id\": ", "single_word is true"},
      {"\"merges\": [", "\"merges\": [\"a zz\", ", "\"zz\" is not a token"},
      {"\"merges\": [", "\"merges\": [\"a\", ", "is not a merge"},
      {"\"merges\": [", "\"merges\": [\"b b b\", ", "is not a merge"},
      {"\"vocab\": {", "\"vocab\": {\"\\u3042\": 9999, ", "GPT-2's byte characters"},
      {"\"vocab\": {", "\"vocab\": {\"zq\": 9999, ", "no token has id"},
      {"\"vocab\": {", "\"vocab\": {\"zq\": 0, ", "given to two tokens"},
      {"\"vocab\": {", "\"vocab\": {\"zq\": -1, ", "id -1 is not allowed"},
      {"\"vocab\": {", "\"vocab\": {\"zq\": 4194304, ", "id 4194304 is not allowed"},
      {"\"id\": ", "\"id\": 7, \"x\": ", "another token in model.vocab"},
  };
  g_autofree char *good = tf_tokenizer_json(f->tiny, FALSE);
  for (guint i = 0; i < G_N_ELEMENTS(edits); i++) {
    g_autofree char *json = NULL;
    char *at = strstr(good, edits[i].from);
    g_assert_nonnull(at);
    json = g_strdup_printf("%.*s%s%s", (int)(at - good), good, edits[i].to,
                           at + strlen(edits[i].from));
    g_autoptr(GError) error = NULL;
    CohortTokenizer *t = load_json_text(f, json, &error);
    g_assert_null(t);
    g_test_message("%s", error->message);
    g_assert_nonnull(strstr(error->message, edits[i].needle));
    g_assert_nonnull(strstr(error->message, "tokenizer.json"));
  }
}

static void test_refusals_files(Fixture *f, gconstpointer data)
{
  (void)data;
  g_autoptr(GError) error = NULL;
  g_autofree char *missing = g_build_filename(f->dir, "nothing", NULL);
  g_assert_null(cohort_tokenizer_load(missing, &error));
  g_assert_nonnull(strstr(error->message, "no such file or folder"));
  g_clear_error(&error);
  g_autofree char *empty = g_build_filename(f->dir, "empty", NULL);
  g_assert_cmpint(g_mkdir(empty, 0755), ==, 0);
  g_assert_null(cohort_tokenizer_load(empty, &error));
  g_assert_nonnull(strstr(error->message, "holds neither tokenizer.json nor vocab.json"));
  g_clear_error(&error);
  /* merges.txt without vocab.json beside it */
  g_autofree char *lone = g_build_filename(empty, "merges.txt", NULL);
  g_assert_true(g_file_set_contents(lone, "#version: 0.2\n", -1, NULL));
  g_assert_null(cohort_tokenizer_load(lone, &error));
  g_assert_nonnull(strstr(error->message, "vocab.json is missing"));
  g_clear_error(&error);
  /* A FIFO is never opened for reading (it would block). */
  g_autofree char *fifo_dir = g_build_filename(f->dir, "fifo", NULL);
  g_assert_cmpint(g_mkdir(fifo_dir, 0755), ==, 0);
  g_autofree char *fifo = g_build_filename(fifo_dir, "tokenizer.json", NULL);
  g_assert_cmpint(mkfifo(fifo, 0644), ==, 0);
  g_assert_null(cohort_tokenizer_load(fifo, &error));
  g_assert_nonnull(strstr(error->message, "not a regular file"));
  g_clear_error(&error);
  /* A merges line that is not a merge names its line. */
  g_autofree char *merges = g_build_filename(f->dir, "merges.txt", NULL);
  g_autofree char *text = NULL;
  g_assert_true(g_file_get_contents(merges, &text, NULL, NULL));
  g_autofree char *broken = g_strconcat(text, "x y z\n", NULL);
  g_assert_true(g_file_set_contents(merges, broken, -1, NULL));
  g_assert_null(cohort_tokenizer_load(f->dir, &error));
  g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
  guint line = g_strv_length(lines);
  g_autofree char *where = g_strdup_printf("merges.txt: line %u:", line);
  g_test_message("%s", error->message);
  g_assert_nonnull(strstr(error->message, where));
  g_clear_error(&error);
  /* Not byte-level: a byte without a token. */
  g_autofree char *vocab = g_build_filename(f->dir, "vocab.json", NULL);
  g_assert_true(g_file_set_contents(merges, "#version: 0.2\n", -1, NULL));
  g_assert_true(g_file_set_contents(vocab, "{\"a\": 0}", -1, NULL));
  g_assert_null(cohort_tokenizer_load(f->dir, &error));
  g_assert_nonnull(strstr(error->message, "no token for byte 0x00"));
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/tokenizer/split-regex", test_split_regex);
  g_test_add_func("/tokenizer/split-pinned", test_split_pinned);
  g_test_add("/tokenizer/merges", Fixture, NULL, setup, test_merges, teardown);
  g_test_add("/tokenizer/formats", Fixture, NULL, setup, test_formats, teardown);
  g_test_add("/tokenizer/special", Fixture, NULL, setup, test_special, teardown);
  g_test_add("/tokenizer/round-trip", Fixture, NULL, setup, test_round_trip, teardown);
  g_test_add("/tokenizer/safe-cut", Fixture, NULL, setup, test_safe_cut, teardown);
  g_test_add("/tokenizer/refusals", Fixture, NULL, setup, test_refusals, teardown);
  g_test_add("/tokenizer/refusals-files", Fixture, NULL, setup, test_refusals_files, teardown);
  return g_test_run();
}

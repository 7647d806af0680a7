/* Small byte-level BPE tokenizers made by tests (header-only, tests only): 256 byte tokens in
 * GPT-2's alphabet, merges over a few letters, special tokens; written as vocab.json +
 * merges.txt and as a Hugging Face tokenizer.json, so both readers see the same tokenizer. */
#pragma once

#include <glib.h>
#include <string.h>

/* GPT-2's bytes_to_unicode, computed here independently of data/bpe-vocab.c. */
static inline gunichar tf_byte_char(int b)
{
  int n = 0;
  for (int x = 0; x < 256; x++) {
    gboolean printable = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174;
    if (x == b)
      return printable ? (gunichar)x : (gunichar)(256 + n);
    if (!printable)
      n++;
  }
  return 0;
}

/* Bytes as a vocab.json key. */
static inline char *tf_key(const guint8 *p, gsize n)
{
  GString *s = g_string_new(NULL);
  for (gsize i = 0; i < n; i++)
    g_string_append_unichar(s, tf_byte_char(p[i]));
  return g_string_free(s, FALSE);
}

/* A JSON string literal of `s`. */
static inline char *tf_json_string(const char *s)
{
  GString *o = g_string_new("\"");
  for (const char *p = s; *p; p++) {
    if (*p == '"' || *p == '\\')
      g_string_append_printf(o, "\\%c", *p);
    else if ((guint8)*p < 0x20)
      g_string_append_printf(o, "\\u%04x", (guint8)*p);
    else
      g_string_append_c(o, *p);
  }
  g_string_append_c(o, '"');
  return g_string_free(o, FALSE);
}

typedef struct {
  GPtrArray *tokens;      /* GBytes by id */
  GPtrArray *merges;      /* "left right" in vocab.json's characters, rank order */
  GPtrArray *merge_parts; /* GBytes left, right, alternating */
  GPtrArray *specials;    /* char * (added tokens) */
} TinyTok;

static inline int tf_find(TinyTok *t, const guint8 *p, gsize n)
{
  for (guint i = 0; i < t->tokens->len; i++) {
    gsize m;
    const guint8 *q = g_bytes_get_data(t->tokens->pdata[i], &m);
    if (m == n && memcmp(p, q, n) == 0)
      return (int)i;
  }
  return -1;
}

static inline void tf_add_merge(TinyTok *t, const char *left, const char *right)
{
  g_autofree char *kl = tf_key((const guint8 *)left, strlen(left));
  g_autofree char *kr = tf_key((const guint8 *)right, strlen(right));
  g_ptr_array_add(t->merges, g_strdup_printf("%s %s", kl, kr));
  g_ptr_array_add(t->merge_parts, g_bytes_new(left, strlen(left)));
  g_ptr_array_add(t->merge_parts, g_bytes_new(right, strlen(right)));
  g_autofree char *both = g_strconcat(left, right, NULL);
  if (tf_find(t, (const guint8 *)both, strlen(both)) < 0)
    g_ptr_array_add(t->tokens, g_bytes_new(both, strlen(both)));
}

/* 256 bytes, then merges of random pairs of tokens over "ab" and a few words, in a random
 * order of ranks (a token may exist before the merge that makes it), then specials. */
static inline TinyTok *tf_new(guint64 seed, guint n_random)
{
  TinyTok *t = g_new0(TinyTok, 1);
  t->tokens = g_ptr_array_new_with_free_func((GDestroyNotify)g_bytes_unref);
  t->merges = g_ptr_array_new_with_free_func(g_free);
  t->merge_parts = g_ptr_array_new_with_free_func((GDestroyNotify)g_bytes_unref);
  t->specials = g_ptr_array_new_with_free_func(g_free);
  for (int b = 0; b < 256; b++) {
    guint8 c = (guint8)b;
    g_ptr_array_add(t->tokens, g_bytes_new(&c, 1));
  }
  static const char *const words[][2] = {
      {"h", "e"}, {"l", "l"},   {"he", "ll"}, {"hell", "o"},  {" ", "hello"},   {" ", "w"},
      {"o", "r"}, {" w", "or"}, {"l", "d"},   {" wor", "ld"}, {" ", " "},       {"  ", "  "},
      {"1", "2"}, {"12", "3"},  {"'", "s"},   {"\n", "\n"},   {"\xc3", "\xa9"}, {" ", "a"},
  };
  for (guint i = 0; i < G_N_ELEMENTS(words); i++)
    tf_add_merge(t, words[i][0], words[i][1]);
  GRand *r = g_rand_new_with_seed((guint32)seed);
  /* Tokens over "ab" up to 8 bytes, merged from two shorter ones. */
  GPtrArray *ab = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(ab, g_strdup("a"));
  g_ptr_array_add(ab, g_strdup("b"));
  for (guint i = 0; i < n_random * 4 && t->merges->len < G_N_ELEMENTS(words) + n_random; i++) {
    const char *x = ab->pdata[g_rand_int_range(r, 0, (gint32)ab->len)];
    const char *y = ab->pdata[g_rand_int_range(r, 0, (gint32)ab->len)];
    g_autofree char *both = g_strconcat(x, y, NULL);
    gboolean seen = FALSE;
    for (guint k = 0; k < ab->len && !seen; k++)
      seen = g_str_equal(ab->pdata[k], both);
    if (seen || strlen(both) > 8)
      continue;
    g_ptr_array_add(ab, g_strdup(both));
    tf_add_merge(t, x, y);
  }
  /* Shuffle the ab merges' ranks: later ranks may make tokens earlier ones use. */
  guint first = G_N_ELEMENTS(words);
  for (guint i = t->merges->len - 1; i > first; i--) {
    guint j = first + (guint)g_rand_int_range(r, 0, (gint32)(i - first + 1));
    gpointer m = t->merges->pdata[i];
    t->merges->pdata[i] = t->merges->pdata[j];
    t->merges->pdata[j] = m;
    for (guint k = 0; k < 2; k++) {
      gpointer p = t->merge_parts->pdata[2 * i + k];
      t->merge_parts->pdata[2 * i + k] = t->merge_parts->pdata[2 * j + k];
      t->merge_parts->pdata[2 * j + k] = p;
    }
  }
  g_ptr_array_unref(ab);
  g_rand_free(r);
  g_ptr_array_add(t->specials, g_strdup("<|endoftext|>"));
  g_ptr_array_add(t->specials, g_strdup("<|end|>"));
  return t;
}

static inline void tf_free(TinyTok *t)
{
  g_ptr_array_unref(t->tokens);
  g_ptr_array_unref(t->merges);
  g_ptr_array_unref(t->merge_parts);
  g_ptr_array_unref(t->specials);
  g_free(t);
}

/* The vocabulary object, the model's tokens only. */
static inline char *tf_vocab_json(TinyTok *t)
{
  GString *s = g_string_new("{");
  for (guint i = 0; i < t->tokens->len; i++) {
    gsize n;
    const guint8 *p = g_bytes_get_data(t->tokens->pdata[i], &n);
    g_autofree char *key = tf_key(p, n);
    g_autofree char *lit = tf_json_string(key);
    g_string_append_printf(s, "%s%s: %u", i ? ", " : "", lit, i);
  }
  g_string_append(s, "}");
  return g_string_free(s, FALSE);
}

/* vocab.json (with <|endoftext|> as its last token, as GPT-2's) and merges.txt in `dir`. */
static inline void tf_write_vocab_merges(TinyTok *t, const char *dir)
{
  g_autofree char *vocab = tf_vocab_json(t);
  /* GPT-2 lists <|endoftext|> in vocab.json: its characters are printable ASCII. */
  GString *v = g_string_new(vocab);
  g_string_truncate(v, v->len - 1);
  g_string_append_printf(v, ", \"<|endoftext|>\": %u}", t->tokens->len);
  g_autofree char *vp = g_build_filename(dir, "vocab.json", NULL);
  g_assert_true(g_file_set_contents(vp, v->str, (gssize)v->len, NULL));
  g_string_free(v, TRUE);
  GString *m = g_string_new("#version: 0.2\n");
  for (guint i = 0; i < t->merges->len; i++)
    g_string_append_printf(m, "%s\n", (const char *)t->merges->pdata[i]);
  g_autofree char *mp = g_build_filename(dir, "merges.txt", NULL);
  g_assert_true(g_file_set_contents(mp, m->str, (gssize)m->len, NULL));
  g_string_free(m, TRUE);
}

/* tokenizer.json: the model, the GPT-2 pipeline, and the specials as added tokens (the first
 * at id n, the next at n + 1). Merges as strings, or as pairs when `pairs`. */
static inline char *tf_tokenizer_json(TinyTok *t, gboolean pairs)
{
  g_autofree char *vocab = tf_vocab_json(t);
  GString *s = g_string_new("{\"version\": \"1.0\", \"truncation\": null, \"padding\": null,\n");
  g_string_append(s, "\"added_tokens\": [");
  for (guint i = 0; i < t->specials->len; i++) {
    g_autofree char *lit = tf_json_string(t->specials->pdata[i]);
    g_string_append_printf(s, "%s{\"id\": %u, \"content\": %s, \"special\": true}", i ? ", " : "",
                           t->tokens->len + i, lit);
  }
  g_string_append(s, "],\n\"normalizer\": null,\n");
  g_string_append(s, "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
                     "\"trim_offsets\": true, \"use_regex\": true},\n");
  g_string_append(s, "\"post_processor\": {\"type\": \"ByteLevel\"},\n");
  g_string_append(s, "\"decoder\": {\"type\": \"ByteLevel\"},\n");
  g_string_append_printf(s,
                         "\"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, "
                         "\"continuing_subword_prefix\": \"\", \"end_of_word_suffix\": \"\", "
                         "\"fuse_unk\": false, \"vocab\": %s, \"merges\": [",
                         vocab);
  for (guint i = 0; i < t->merges->len; i++) {
    const char *m = t->merges->pdata[i];
    if (pairs) {
      g_auto(GStrv) two = g_strsplit(m, " ", 2);
      g_autofree char *a = tf_json_string(two[0]), *b = tf_json_string(two[1]);
      g_string_append_printf(s, "%s[%s, %s]", i ? ", " : "", a, b);
    } else {
      g_autofree char *lit = tf_json_string(m);
      g_string_append_printf(s, "%s%s", i ? ", " : "", lit);
    }
  }
  g_string_append(s, "]}}\n");
  return g_string_free(s, FALSE);
}

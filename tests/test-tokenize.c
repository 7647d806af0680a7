/* Text to token shards: cohort-tokenize as a user runs it (documents, .jsonl, folders and
 * patterns, EOT before each document, --shard-tokens, --val-fraction, --decode, files that
 * are not UTF-8 named in the summary, bad input refused with the file named), the
 * multi-threaded job against one pass, and the token cache's rules. The tokenizer is a small
 * one made here (tests/tokenizer-fixtures.h). */
#include <glib/gstdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "data/dataset.h"
#include "data/text-sources.h"
#include "data/token-cache.h"
#include "data/tokenize-job.h"
#include "data/tokenizer.h"
#include "text-corpus.h"
#include "tokenizer-fixtures.h"

typedef struct {
  char *dir, *tokdir;
  CohortTokenizer *tok;
  int eot;
} Fixture;

static void setup(Fixture *f, gconstpointer data)
{
  (void)data;
  f->dir = g_dir_make_tmp("cohort-tokenize-XXXXXX", NULL);
  f->tokdir = g_build_filename(f->dir, "tok", NULL);
  g_assert_cmpint(g_mkdir(f->tokdir, 0755), ==, 0);
  TinyTok *t = tf_new(5, 60);
  tf_write_vocab_merges(t, f->tokdir);
  f->eot = (int)t->tokens->len;
  tf_free(t);
  f->tok = cohort_tokenizer_load(f->tokdir, NULL);
  g_assert_nonnull(f->tok);
}

static void teardown(Fixture *f, gconstpointer data)
{
  (void)data;
  cohort_tokenizer_free(f->tok);
  g_autofree char *rm = g_strdup_printf("rm -rf '%s'", f->dir);
  g_assert_cmpint(system(rm), ==, 0);
  g_free(f->dir);
  g_free(f->tokdir);
}

static char *put_file(Fixture *f, const char *name, const char *text, gssize len)
{
  char *path = g_build_filename(f->dir, name, NULL);
  g_autofree char *parent = g_path_get_dirname(path);
  g_assert_cmpint(g_mkdir_with_parents(parent, 0755), ==, 0);
  g_assert_true(g_file_set_contents(path, text, len, NULL));
  return path;
}

typedef struct {
  int status;
  char *out, *err;
} Run;

static Run run(const char *const *args)
{
  g_autoptr(GPtrArray) argv = g_ptr_array_new();
  g_ptr_array_add(argv, (gpointer)g_getenv("COHORT_TOKENIZE"));
  for (guint i = 0; args[i]; i++)
    g_ptr_array_add(argv, (gpointer)args[i]);
  g_ptr_array_add(argv, NULL);
  Run r = {-1, NULL, NULL};
  g_autoptr(GError) error = NULL;
  g_assert_true(g_spawn_sync(NULL, (char **)argv->pdata, NULL, G_SPAWN_DEFAULT, NULL, NULL, &r.out,
                             &r.err, &r.status, &error));
  g_assert_no_error(error);
  r.status = WIFEXITED(r.status) ? WEXITSTATUS(r.status) : 128 + WTERMSIG(r.status);
  return r;
}

static void run_clear(Run *r)
{
  g_free(r->out);
  g_free(r->err);
}

/* The tokens of a shard (checked header). */
static GArray *read_shard(const char *path)
{
  g_autofree char *text = NULL;
  gsize len = 0;
  g_assert_true(g_file_get_contents(path, &text, &len, NULL));
  gsize n = 0;
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_token_shard_check((guint8 *)text, len, path, &n, &error));
  GArray *ids = g_array_new(FALSE, FALSE, sizeof(int));
  for (gsize i = 0; i < n; i++) {
    guint16 t;
    memcpy(&t, text + COHORT_SHARD_HEADER_BYTES + 2 * i, 2);
    int id = GUINT16_FROM_LE(t);
    g_array_append_val(ids, id);
  }
  return ids;
}

/* EOT, then the document's ids. */
static void expect_doc(Fixture *f, GArray *want, const char *text, gsize len)
{
  g_array_append_val(want, f->eot);
  gsize n;
  g_autofree int *ids = cohort_tokenizer_encode(f->tok, text, len, FALSE, &n, NULL);
  g_array_append_vals(want, ids, (guint)n);
}

static void assert_ids(GArray *got, GArray *want)
{
  g_assert_cmpuint(got->len, ==, want->len);
  g_assert_cmpmem(got->data, got->len * sizeof(int), want->data, want->len * sizeof(int));
}

/* Files, a .jsonl and a folder in one call: documents in order, each after <|endoftext|>;
 * empty documents left out; --decode gives the text back. */
static void test_cli_documents(Fixture *f, gconstpointer data)
{
  (void)data;
  g_autofree char *a = put_file(f, "a.txt", "hello world, it's 12 o'clock", -1);
  g_autofree char *j =
      put_file(f, "docs.jsonl",
               "{\"text\": \"first <|endoftext|> doc\"}\n\n"
               "{\"text\": \"\", \"id\": 2}\r\n{\"text\": \"caf\\u00e9 \\ud83d\\ude00\"}\n",
               -1);
  g_autofree char *e = put_file(f, "empty.txt", "", 0);
  g_autofree char *b1 = put_file(f, "more/b1.txt", "abab  bab\n\n", -1);
  g_autofree char *b2 = put_file(f, "more/b2.jsonl", "{\"text\": \"x\"}", -1);
  g_autofree char *skip = put_file(f, "more/notes.md", "not read", -1);
  g_autofree char *more = g_build_filename(f->dir, "more", NULL);
  g_autofree char *out = g_build_filename(f->dir, "out.bin", NULL);
  const char *args[] = {"--tokenizer", f->tokdir, "-o", out, a, j, e, more, NULL};
  Run r = run(args);
  g_assert_cmpint(r.status, ==, 0);
  g_assert_nonnull(strstr(r.out, "5 documents"));
  g_assert_null(strstr(r.out, "not UTF-8"));
  run_clear(&r);
  g_autoptr(GArray) want = g_array_new(FALSE, FALSE, sizeof(int));
  expect_doc(f, want, "hello world, it's 12 o'clock", 28);
  expect_doc(f, want, "first <|endoftext|> doc", 23); /* text, not the special token */
  expect_doc(f, want, "caf\xc3\xa9 \xf0\x9f\x98\x80", 10);
  expect_doc(f, want, "abab  bab\n\n", 11);
  expect_doc(f, want, "x", 1);
  g_autoptr(GArray) got = read_shard(out);
  assert_ids(got, want);

  const char *dec[] = {"--tokenizer", f->tokdir, "--decode", out, NULL};
  r = run(dec);
  g_assert_cmpint(r.status, ==, 0);
  g_assert_cmpstr(r.out, ==,
                  "<|endoftext|>hello world, it's 12 o'clock<|endoftext|>first <|endoftext|> "
                  "doc<|endoftext|>caf\xc3\xa9 \xf0\x9f\x98\x80<|endoftext|>abab  "
                  "bab\n\n<|endoftext|>x");
  run_clear(&r);
}

/* --shard-tokens cuts, --val-fraction puts the first tokens aside; a pattern picks files. */
static void test_cli_shards(Fixture *f, gconstpointer data)
{
  (void)data;
  g_autoptr(GString) s = g_string_new(NULL);
  g_autoptr(GArray) want = g_array_new(FALSE, FALSE, sizeof(int));
  for (guint i = 0; i < 6; i++) {
    corpus_document(1, i, s);
    g_autofree char *name = g_strdup_printf("in/doc%u.txt", i);
    g_autofree char *p = put_file(f, name, s->str, (gssize)s->len);
    expect_doc(f, want, s->str, s->len);
  }
  g_autofree char *pattern = g_build_filename(f->dir, "in", "doc*.txt", NULL);
  g_autofree char *out = g_build_filename(f->dir, "sh.bin", NULL);
  const char *args[] = {"--tokenizer",    f->tokdir, "-o",        out, "--shard-tokens", "1000",
                        "--val-fraction", "0.25",    "--threads", "3", pattern,          NULL};
  Run r = run(args);
  g_assert_cmpint(r.status, ==, 0);
  run_clear(&r);
  guint n_val = (guint)(0.25 * want->len + 0.5);
  g_autoptr(GArray) got = g_array_new(FALSE, FALSE, sizeof(int));
  for (int val = 1; val >= 0; val--) {
    guint expect = val ? n_val : want->len - n_val;
    guint k = 0;
    for (;; k++) {
      g_autofree char *name = g_strdup_printf("sh%s_%06u.bin", val ? "_val" : "", k);
      g_autofree char *path = g_build_filename(f->dir, name, NULL);
      if (!g_file_test(path, G_FILE_TEST_EXISTS))
        break;
      g_autoptr(GArray) part = read_shard(path);
      g_assert_cmpuint(part->len, <=, 1000);
      g_array_append_vals(got, part->data, part->len);
    }
    g_assert_cmpuint(k, ==, (expect + 999) / 1000);
  }
  assert_ids(got, want);
  g_autofree char *tmp = g_build_filename(f->dir, "sh.bin", NULL);
  g_assert_false(g_file_test(tmp, G_FILE_TEST_EXISTS));
}

/* Bytes that are not UTF-8 are tokenized as they are and the file is named. */
static void test_cli_not_utf8(Fixture *f, gconstpointer data)
{
  (void)data;
  const char raw[] = "ok \xff\xfe bytes \xc3( end";
  g_autofree char *bad = put_file(f, "bad.txt", raw, sizeof raw - 1);
  g_autofree char *good = put_file(f, "good.txt", "fine", -1);
  g_autofree char *out = g_build_filename(f->dir, "o.bin", NULL);
  const char *args[] = {"--tokenizer", f->tokdir, "-o", out, good, bad, NULL};
  Run r = run(args);
  g_assert_cmpint(r.status, ==, 0);
  g_assert_nonnull(strstr(r.out, "1 file is not UTF-8"));
  g_assert_nonnull(strstr(r.out, bad));
  run_clear(&r);
  const char *dec[] = {"--tokenizer", f->tokdir, "--decode", out, NULL};
  r = run(dec);
  g_autofree char *want = g_strdup_printf("<|endoftext|>fine<|endoftext|>%s", raw);
  g_assert_cmpmem(r.out, strlen(r.out), want, strlen(want));
  run_clear(&r);
}

/* Refusals: one line naming the file and what is wrong, status 1 (2 for the command line),
 * and no output file. */
static void test_cli_refusals(Fixture *f, gconstpointer data)
{
  (void)data;
  g_autofree char *out = g_build_filename(f->dir, "never.bin", NULL);
  g_autofree char *bad_json = put_file(f, "bad.jsonl", "{\"text\": \"a\"}\n{\"txt\": \"b\"}\n", -1);
  g_autofree char *not_json = put_file(f, "worse.jsonl", "{\"text\": \"a\"}\n\n{text}\n", -1);
  g_autofree char *fine = put_file(f, "fine.txt", "fine", -1);
  g_autofree char *missing = g_build_filename(f->dir, "missing.txt", NULL);
  g_autofree char *odd = g_build_filename(f->dir, "odd", NULL);
  g_assert_cmpint(g_mkdir(odd, 0755), ==, 0);
  g_autofree char *txt_out = g_build_filename(odd, "tokens.txt", NULL);
  /* Issue 33: a FIFO is refused as what it is, never opened (it would block). */
  g_autofree char *fifo = g_build_filename(odd, "pipe.bin", NULL);
  g_assert_cmpint(mkfifo(fifo, 0644), ==, 0);
  g_autofree char *fifo_tok = g_build_filename(odd, "fifo-tok", NULL);
  g_assert_cmpint(g_mkdir(fifo_tok, 0755), ==, 0);
  g_autofree char *fifo_json = g_build_filename(fifo_tok, "tokenizer.json", NULL);
  g_assert_cmpint(mkfifo(fifo_json, 0644), ==, 0);
  g_autofree char *fifo_pair = g_build_filename(odd, "fifo-pair", NULL);
  g_assert_cmpint(g_mkdir(fifo_pair, 0755), ==, 0);
  g_autofree char *pair_vocab = g_build_filename(fifo_pair, "vocab.json", NULL);
  g_autofree char *pair_merges = g_build_filename(fifo_pair, "merges.txt", NULL);
  g_assert_true(g_file_set_contents(pair_vocab, "{}", -1, NULL));
  g_assert_cmpint(mkfifo(pair_merges, 0644), ==, 0);
  struct {
    const char *args[8];
    int status;
    const char *needle;
  } cases[] = {
      {{"--tokenizer", f->tokdir, "-o", out, bad_json, NULL}, 1, "bad.jsonl: line 2: no string"},
      {{"--tokenizer", f->tokdir, "-o", out, not_json, NULL}, 1, "worse.jsonl: line 3"},
      {{"--tokenizer", f->tokdir, "-o", out, missing, NULL}, 1, "missing.txt: no such file"},
      {{"--tokenizer", f->tokdir, "-o", "/dev/null", fine, NULL}, 1, "/dev/null (-o): it is a"},
      {{"--tokenizer", f->tokdir, "-o", txt_out, fine, NULL}, 1, "not a shard's name"},
      {{"--tokenizer", f->tokdir, "--decode", fifo, NULL}, 1, "FIFO"},
      {{"--tokenizer", fifo_tok, "-o", out, fine, NULL}, 1, "tokenizer.json: it is a FIFO"},
      {{"--tokenizer", pair_merges, "-o", out, fine, NULL}, 1, "merges.txt: it is a FIFO"},
      {{"--tokenizer", f->dir, "-o", out, fine, NULL}, 1, "holds neither tokenizer.json"},
      {{"--tokenizer", f->tokdir, fine, NULL}, 2, "-o OUT.bin is required"},
      {{"-o", out, fine, NULL}, 2, "--tokenizer PATH is required"},
      {{"--tokenizer", f->tokdir, "-o", out, "--val-fraction", "1", fine, NULL},
       2,
       "--val-fraction"},
      {{"--tokenizer", f->tokdir, "-o", out, "--shard-tokens", "0", fine, NULL},
       2,
       "--shard-tokens"},
      {{"--tokenizer", f->tokdir, "--decode", fine, NULL}, 1, "fine.txt: 4 bytes is shorter"},
  };
  for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
    Run r = run(cases[i].args);
    g_test_message("%s", r.err);
    g_assert_cmpint(r.status, ==, cases[i].status);
    g_assert_nonnull(strstr(r.err, cases[i].needle));
    g_assert_cmpuint(strlen(r.err), >, 0);
    g_assert_true(strchr(r.err, '\n') == r.err + strlen(r.err) - 1); /* one line */
    run_clear(&r);
    g_assert_false(g_file_test(out, G_FILE_TEST_EXISTS));
  }
  g_assert_false(g_file_test("/dev/null.bin", G_FILE_TEST_EXISTS));
  g_assert_false(g_file_test(txt_out, G_FILE_TEST_EXISTS));
  /* Nothing half-written is left behind either. */
  g_autoptr(GDir) d = g_dir_open(f->dir, 0, NULL);
  const char *name;
  while ((name = g_dir_read_name(d)))
    g_assert_null(strstr(name, ".tmp-"));
}

/* A vocabulary above 65,536 ids: llm.c's uint32 shards (magic 20240801, version 7), which
 * --decode and the dataset reader read back. */
static void test_cli_wide(Fixture *f, gconstpointer data)
{
  (void)data;
  g_autofree char *big = g_build_filename(f->dir, "big", NULL);
  g_assert_cmpint(g_mkdir(big, 0755), ==, 0);
  g_autoptr(GString) vocab = g_string_new("{");
  int n_ids = 70000;
  for (int i = 0; i < n_ids - 1; i++) {
    guint8 bytes[3] = {(guint8)(i & 0xff), (guint8)(i >> 8), (guint8)(i >> 16)};
    g_autofree char *key = tf_key(bytes, i < 256 ? 1 : 3);
    g_autofree char *lit = tf_json_string(key);
    g_string_append_printf(vocab, "%s%s: %d", i ? ", " : "", lit, i);
  }
  g_string_append_printf(vocab, ", \"<|endoftext|>\": %d}", n_ids - 1);
  g_autofree char *vp = g_build_filename(big, "vocab.json", NULL);
  g_autofree char *mp = g_build_filename(big, "merges.txt", NULL);
  g_assert_true(g_file_set_contents(vp, vocab->str, (gssize)vocab->len, NULL));
  g_assert_true(g_file_set_contents(mp, "#version: 0.2\n", -1, NULL));
  /* The document token, 69,999, needs 32 bits. */
  g_autofree char *text = put_file(f, "wide.txt", "p wide", -1);
  g_autofree char *out = g_build_filename(f->dir, "wide.bin", NULL);
  const char *args[] = {"--tokenizer", big, "-o", out, text, "--quiet", NULL};
  Run r = run(args);
  g_assert_cmpint(r.status, ==, 0);
  run_clear(&r);
  g_autofree char *shard = NULL;
  gsize len = 0;
  g_assert_true(g_file_get_contents(out, &shard, &len, NULL));
  gint32 head[3];
  memcpy(head, shard, sizeof head);
  g_assert_cmpint(GINT32_FROM_LE(head[0]), ==, COHORT_SHARD32_MAGIC);
  g_assert_cmpint(GINT32_FROM_LE(head[1]), ==, COHORT_SHARD32_VERSION);
  g_assert_cmpuint(len, ==, COHORT_SHARD_HEADER_BYTES + 4 * (gsize)GINT32_FROM_LE(head[2]));
  const guint8 *body = (const guint8 *)shard + COHORT_SHARD_HEADER_BYTES;
  g_assert_cmpuint(cohort_shard_token(body, 4, 0), ==, (guint)n_ids - 1);
  g_assert_cmpuint(cohort_shard_token(body, 4, 1), ==, 'p');
  /* Decoded back to the text, after the document token. */
  const char *dec[] = {"--tokenizer", big, "--decode", out, NULL};
  r = run(dec);
  g_assert_cmpint(r.status, ==, 0);
  g_assert_cmpstr(r.out, ==, "<|endoftext|>p wide");
  run_clear(&r);
  /* The trainer's reader takes it, range-checked against the vocabulary. */
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortDataset) ds = cohort_dataset_open(out, COHORT_DATA_TOKENS, n_ids, 2, &error);
  g_assert_no_error(error);
  int in[2], tg[2];
  g_assert_true(cohort_dataset_window(ds, 0, in, tg, NULL));
  g_assert_cmpint(in[0], ==, n_ids - 1);
  g_assert_cmpint(in[1], ==, 'p');
  g_autoptr(CohortDataset) small = cohort_dataset_open(out, COHORT_DATA_TOKENS, 1000, 2, &error);
  g_assert_null(small);
  g_assert_nonnull(strstr(error->message, "is not below vocab_size 1000"));
}

static gboolean collect(const gint32 *ids, gsize n, gpointer data, GError **error)
{
  (void)error;
  g_array_append_vals(data, ids, (guint)n);
  return TRUE;
}

/* Several threads, many chunks, several files and .jsonl lines: the ids of one pass; and a
 * range cut into parts gives the same ids part after part. */
static void test_job(Fixture *f, gconstpointer data)
{
  (void)data;
  g_autoptr(GString) s = g_string_new(NULL), big = g_string_new(NULL), lines = g_string_new(NULL);
  g_autoptr(GArray) want = g_array_new(FALSE, FALSE, sizeof(int));
  for (guint i = 0; big->len < (3u << 20); i++) {
    corpus_document(2, i, s);
    g_string_append_len(big, s->str, (gssize)s->len);
  }
  g_autofree char *p1 = put_file(f, "big.txt", big->str, (gssize)big->len);
  expect_doc(f, want, big->str, big->len);
  for (guint i = 0; i < 3000; i++) {
    g_autofree char *w = g_strdup_printf("line %u: %s", i, corpus_words[i % 300]);
    g_string_append_printf(lines, "{\"text\": \"%s\"}\n", w);
    expect_doc(f, want, w, strlen(w));
  }
  g_autofree char *p2 = put_file(f, "lines.jsonl", lines->str, (gssize)lines->len);
  const char *paths[] = {p1, p2, NULL};
  g_autoptr(CohortTextSources) src = cohort_text_sources_open(paths, NULL);
  g_assert_nonnull(src);
  for (int threads = 1; threads <= 4; threads += 3) {
    for (guint parts = 1; parts <= 5; parts += 2) {
      g_autoptr(GArray) got = g_array_new(FALSE, FALSE, sizeof(gint32));
      for (guint k = 0; k < parts; k++) {
        CohortTokenizeJob job = {.tokenizer = f->tok,
                                 .threads = threads,
                                 .begin = cohort_text_sources_cut(src, f->tok, k, parts),
                                 .end = cohort_text_sources_cut(src, f->tok, k + 1, parts),
                                 .sink = collect,
                                 .user_data = got};
        g_assert_true(cohort_tokenize_run(src, &job, NULL, NULL, NULL));
      }
      assert_ids(got, want);
    }
  }
}

/* The cache: a folder named by the sources and the tokenizer; ready only when its manifest
 * names exactly its shards with their sizes. */
static void test_cache(Fixture *f, gconstpointer data)
{
  (void)data;
  g_autofree char *p = put_file(f, "t.txt", "some text to cache, some text", -1);
  const char *paths[] = {p, NULL};
  g_autoptr(CohortTextSources) src = cohort_text_sources_open(paths, NULL);
  g_autofree char *cache = g_build_filename(f->dir, "cache", NULL);
  g_autofree char *folder = cohort_token_cache_folder(cache, src, f->tok);
  g_assert_false(cohort_token_cache_ready(folder, NULL));
  g_assert_true(cohort_token_cache_clear(folder, NULL));
  for (guint k = 0; k < 2; k++)
    g_assert_true(
        cohort_token_cache_write_part(folder, src, f->tok, k, 2, 1, NULL, NULL, NULL, NULL, NULL));
  g_assert_false(cohort_token_cache_ready(folder, NULL));
  g_assert_true(cohort_token_cache_seal(folder, NULL));
  guint64 n = 0;
  g_assert_true(cohort_token_cache_ready(folder, &n));
  gsize m;
  g_autofree int *ids =
      cohort_tokenizer_encode(f->tok, "some text to cache, some text", 29, FALSE, &m, NULL);
  g_assert_cmpuint(n, ==, m + 1);
  /* A stray shard, or one cut short, and the folder is not used. */
  g_autofree char *stray = g_build_filename(folder, "part-00007_000000.bin", NULL);
  g_autofree char *p0 = g_build_filename(folder, "part-00000_000000.bin", NULL);
  g_assert_true(g_file_set_contents(stray, "x", 1, NULL));
  g_assert_false(cohort_token_cache_ready(folder, NULL));
  g_unlink(stray);
  g_assert_true(cohort_token_cache_ready(folder, NULL));
  g_assert_cmpint(truncate(p0, COHORT_SHARD_HEADER_BYTES), ==, 0);
  g_assert_false(cohort_token_cache_ready(folder, NULL));
  /* Another tokenizer or changed text: another folder. */
  g_autofree char *p2 = put_file(f, "t.txt", "some text to cache, more text", -1);
  g_autoptr(CohortTextSources) src2 = cohort_text_sources_open(paths, NULL);
  g_autofree char *folder2 = cohort_token_cache_folder(cache, src2, f->tok);
  g_assert_cmpstr(folder, !=, folder2);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add("/tokenize/cli-documents", Fixture, NULL, setup, test_cli_documents, teardown);
  g_test_add("/tokenize/cli-shards", Fixture, NULL, setup, test_cli_shards, teardown);
  g_test_add("/tokenize/cli-not-utf8", Fixture, NULL, setup, test_cli_not_utf8, teardown);
  g_test_add("/tokenize/cli-refusals", Fixture, NULL, setup, test_cli_refusals, teardown);
  g_test_add("/tokenize/cli-wide", Fixture, NULL, setup, test_cli_wide, teardown);
  g_test_add("/tokenize/job", Fixture, NULL, setup, test_job, teardown);
  g_test_add("/tokenize/cache", Fixture, NULL, setup, test_cache, teardown);
  return g_test_run();
}

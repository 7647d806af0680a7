/* Issue 33's tokenizer defects, each pinned: one long line of one letter tokenizes in bounded
 * memory (it aborted in g_malloc under `ulimit -v`; ~17 bytes per byte of the line) and the
 * cuts it needs are reported; SIGINT while tokenizing leaves no temporary file; token caches
 * of earlier data are pruned, and nothing else in the cache folder is. */
#include <glib/gstdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "data/dataset.h"
#include "data/text-sources.h"
#include "data/token-cache.h"
#include "data/tokenize-job.h"
#include "data/tokenizer.h"
#include "tokenizer-fixtures.h"

/* Bytes of the long line, and the address space cohort-tokenize gets for it: the old code
 * needed about 17 times the line (more than 1 GiB), the new one a bounded amount. */
#define LINE_BYTES  (64u << 20)
#define LIMIT_BYTES (768u << 20)

/* Set by the sanitizers' runtime: an address-space limit breaks them. */
extern void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

typedef struct {
  char *dir, *tokdir;
} Fixture;

static void setup(Fixture *f, gconstpointer data)
{
  (void)data;
  f->dir = g_dir_make_tmp("cohort-tokenize-limits-XXXXXX", NULL);
  f->tokdir = g_build_filename(f->dir, "tok", NULL);
  g_assert_cmpint(g_mkdir(f->tokdir, 0755), ==, 0);
  TinyTok *t = tf_new(5, 60);
  tf_write_vocab_merges(t, f->tokdir);
  tf_free(t);
}

static void teardown(Fixture *f, gconstpointer data)
{
  (void)data;
  g_autofree char *cmd = g_strdup_printf("rm -rf '%s'", f->dir);
  g_assert_cmpint(system(cmd), ==, 0);
  g_free(f->dir);
  g_free(f->tokdir);
}

static void limit_memory(gpointer data)
{
  (void)data;
  struct rlimit r = {LIMIT_BYTES, LIMIT_BYTES};
  setrlimit(RLIMIT_AS, &r);
}

static void test_long_line(Fixture *f, gconstpointer data)
{
  (void)data;
  g_autofree char *text = g_build_filename(f->dir, "line.txt", NULL);
  {
    g_autofree char *line = g_malloc(LINE_BYTES + 1);
    memset(line, 'a', LINE_BYTES);
    line[LINE_BYTES] = '\n';
    g_assert_true(g_file_set_contents(text, line, LINE_BYTES + 1, NULL));
  }
  g_autofree char *out = g_build_filename(f->dir, "line.bin", NULL);
  const char *argv[] = {g_getenv("COHORT_TOKENIZE"),
                        "--tokenizer",
                        f->tokdir,
                        "-o",
                        out,
                        "--threads",
                        "2",
                        text,
                        NULL};
  gboolean sanitized = __sanitizer_set_death_callback != NULL;
  g_autofree char *err = NULL;
  int status = -1;
  g_assert_true(g_spawn_sync(NULL, (char **)argv, NULL, G_SPAWN_STDOUT_TO_DEV_NULL,
                             sanitized ? NULL : limit_memory, NULL, NULL, &err, &status, NULL));
  g_test_message("%s", err);
  if (!g_spawn_check_wait_status(status, NULL))
    g_error("cohort-tokenize on a %u MiB line under a %u MiB address-space limit: %s",
            LINE_BYTES >> 20, LIMIT_BYTES >> 20, err);
  g_assert_nonnull(strstr(err, "cuts in text the tokenizer allows no cut in"));
  g_assert_nonnull(strstr(err, text));
  /* Every byte was tokenized: the shard decodes back to the line. */
  g_autofree char *shard = NULL;
  gsize len = 0;
  g_assert_true(g_file_get_contents(out, &shard, &len, NULL));
  gsize n = 0;
  g_assert_true(cohort_token_shard_check((guint8 *)shard, len, out, &n, NULL));
  g_assert_cmpuint(n, >, 1000);
  /* The trainer's first-use tokenization runs the same job: it names the file too. */
  const char *paths[] = {text, NULL};
  g_autoptr(CohortTextSources) src = cohort_text_sources_open(paths, NULL);
  g_autoptr(CohortTokenizer) tok = cohort_tokenizer_load(f->tokdir, NULL);
  CohortTokenizeProgress done = {0};
  g_autofree char *folder = g_build_filename(f->dir, "cache", "tokens-0123456789abcdef", NULL);
  g_assert_true(cohort_token_cache_clear(folder, NULL));
  g_assert_true(
      cohort_token_cache_write_part(folder, src, tok, 0, 2, 2, NULL, NULL, &done, NULL, NULL));
  g_assert_cmpuint(done.cuts, >, 0);
}

/* SIGINT while tokenizing: the collected tokens lived in an unnamed file, so nothing stays. */
static void test_sigint(Fixture *f, gconstpointer data)
{
  (void)data;
  g_autofree char *text = g_build_filename(f->dir, "big.txt", NULL);
  g_autoptr(GString) s = g_string_new(NULL);
  while (s->len < (48u << 20))
    g_string_append(s, "hello world aabbab 123 's and some more words to tokenize\n");
  g_assert_true(g_file_set_contents(text, s->str, (gssize)s->len, NULL));
  g_autofree char *out = g_build_filename(f->dir, "big.bin", NULL);
  const char *argv[] = {g_getenv("COHORT_TOKENIZE"),
                        "--tokenizer",
                        f->tokdir,
                        "-o",
                        out,
                        "--threads",
                        "1",
                        "--quiet",
                        text,
                        NULL};
  GPid pid;
  g_assert_true(
      g_spawn_async(NULL, (char **)argv, NULL, G_SPAWN_DO_NOT_REAP_CHILD, NULL, NULL, &pid, NULL));
  g_usleep(400000);
  kill(pid, SIGINT);
  int status = 0;
  g_assert_cmpint(waitpid(pid, &status, 0), ==, pid);
  g_autoptr(GDir) d = g_dir_open(f->dir, 0, NULL);
  const char *name;
  while ((name = g_dir_read_name(d)))
    if (strstr(name, ".tmp-"))
      g_error("SIGINT left %s behind", name);
  /* Either it was stopped (no shard) or it had finished (a whole shard). */
  if (g_file_test(out, G_FILE_TEST_EXISTS)) {
    g_autofree char *shard = NULL;
    gsize len = 0, n = 0;
    g_assert_true(g_file_get_contents(out, &shard, &len, NULL));
    g_assert_true(cohort_token_shard_check((guint8 *)shard, len, out, &n, NULL));
  } else {
    g_assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT);
  }
}

static void cache_like(const char *folder, const char *extra)
{
  g_assert_cmpint(g_mkdir_with_parents(folder, 0755), ==, 0);
  const char *names[] = {"part-00000_000000.bin", "manifest.json", extra};
  for (guint i = 0; i < G_N_ELEMENTS(names) && names[i]; i++) {
    g_autofree char *p = g_build_filename(folder, names[i], NULL);
    g_assert_true(g_file_set_contents(p, "x", 1, NULL));
  }
}

/* Caches the current data no longer names go; what is not a cache of Cohort's stays. */
static void test_prune(Fixture *f, gconstpointer data)
{
  (void)data;
  g_autofree char *cache = g_build_filename(f->dir, "cache", NULL);
  g_autofree char *old = g_build_filename(cache, "tokens-aaaaaaaaaaaaaaaa", NULL);
  g_autofree char *cur = g_build_filename(cache, "tokens-bbbbbbbbbbbbbbbb", NULL);
  g_autofree char *val = g_build_filename(cache, "tokens-cccccccccccccccc", NULL);
  g_autofree char *users = g_build_filename(cache, "tokens-dddddddddddddddd", NULL);
  g_autofree char *other = g_build_filename(cache, "tokens-notacache", NULL);
  g_autofree char *tmp_old = g_build_filename(cache, "tokens-eeeeeeeeeeeeeeee", NULL);
  cache_like(old, NULL);
  cache_like(cur, NULL);
  cache_like(val, NULL);
  cache_like(users, "notes.txt"); /* a file no cache makes: not ours */
  cache_like(other, NULL);
  cache_like(tmp_old, "part-00001.bin.tmp-AbC123");
  g_autofree char *index = g_build_filename(cache, "data-index.txt", NULL);
  g_assert_true(g_file_set_contents(index, "x", 1, NULL));
  const char *keep[] = {cur, val, NULL};
  g_autoptr(GPtrArray) removed = g_ptr_array_new_with_free_func(g_free);
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_token_cache_prune(cache, keep, removed, &error));
  g_assert_no_error(error);
  g_assert_cmpuint(removed->len, ==, 2);
  g_assert_false(g_file_test(old, G_FILE_TEST_EXISTS));
  g_assert_false(g_file_test(tmp_old, G_FILE_TEST_EXISTS));
  g_assert_true(g_file_test(cur, G_FILE_TEST_IS_DIR));
  g_assert_true(g_file_test(val, G_FILE_TEST_IS_DIR));
  g_assert_true(g_file_test(users, G_FILE_TEST_IS_DIR));
  g_assert_true(g_file_test(other, G_FILE_TEST_IS_DIR));
  g_assert_true(g_file_test(index, G_FILE_TEST_EXISTS));
  /* No cache folder yet: nothing to do. */
  g_autofree char *none = g_build_filename(f->dir, "no-cache", NULL);
  g_assert_true(cohort_token_cache_prune(none, keep, NULL, NULL));
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add("/tokenize-limits/long-line", Fixture, NULL, setup, test_long_line, teardown);
  g_test_add("/tokenize-limits/sigint", Fixture, NULL, setup, test_sigint, teardown);
  g_test_add("/tokenize-limits/prune", Fixture, NULL, setup, test_prune, teardown);
  return g_test_run();
}

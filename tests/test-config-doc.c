/* docs/config.md must be what the key table generates, so the reference never goes stale. */
#include "engine/config/config-doc.h"
#include "engine/config/config.h"

#include <string.h>

static void test_doc_current(void)
{
  g_autofree char *path = g_test_build_filename(G_TEST_DIST, "..", "docs", "config.md", NULL);
  g_autofree char *committed = NULL;
  g_autoptr(GError) error = NULL;
  g_assert_true(g_file_get_contents(path, &committed, NULL, &error));
  g_assert_no_error(error);
  g_autofree char *generated = cohort_config_doc_markdown();
  if (strcmp(committed, generated) == 0)
    return;

  g_auto(GStrv) want = g_strsplit(generated, "\n", -1);
  g_auto(GStrv) have = g_strsplit(committed, "\n", -1);
  guint line = 0;
  while (want[line] && have[line] && strcmp(want[line], have[line]) == 0)
    line++;
  g_test_message("docs/config.md is stale from line %u; regenerate it with "
                 "cohort-config-doc docs/config.md",
                 line + 1);
  g_test_message("generated: %s", want[line] ? want[line] : "(end)");
  g_test_message("committed: %s", have[line] ? have[line] : "(end)");
  g_test_fail();
}

static void test_doc_covers_keys(void)
{
  g_autofree char *doc = cohort_config_doc_markdown();
  guint n;
  const CohortConfigKey *keys = cohort_config_keys(&n);
  for (guint i = 0; i < n; i++) {
    g_autofree char *row = g_strdup_printf("| `%s` |", keys[i].name);
    g_assert_nonnull(strstr(doc, row));
    g_assert_nonnull(strstr(doc, keys[i].help));
  }
  g_assert_nonnull(strstr(doc, "| `learning_rate` | number | `0.002` | a number > 0 and <= 10 |"));
  g_assert_nonnull(strstr(doc, "| `device_indexes` | list of integers | `[]` |"));
  g_assert_nonnull(strstr(doc, "$XDG_CONFIG_HOME/cohort/presets/"));
  g_assert_nonnull(strstr(doc, "fineweb10B/train"));
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/config-doc/current", test_doc_current);
  g_test_add_func("/config-doc/covers-keys", test_doc_covers_keys);
  return g_test_run();
}

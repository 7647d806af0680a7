/* Translations load: with LANGUAGE=de the window is German (C strings and .ui strings), and
 * the French catalog answers too. */
#include <glib/gi18n.h>

#include "tests/ui/ui-test.h"
#include "engine/config/model-families.h"
#include "ui/config-form-private.h"
#include "ui/key-labels.h"
#include "ui/key-messages.h"
#include "ui/run-page-private.h"
#include "ui/window-private.h"

/* glibc caches translations; bumping this counter makes it look at LANGUAGE again. */
extern int _nl_msg_cat_cntr;

static char *tmp_dir;

static const char *page_title(CohortWindow *win, const char *name)
{
  GtkWidget *page = GTK_WIDGET(cohort_window_get_run_page(win));
  GtkStack *stack = GTK_STACK(gtk_widget_get_parent(page));
  GtkWidget *child = gtk_stack_get_child_by_name(stack, name);
  return gtk_stack_page_get_title(gtk_stack_get_page(stack, child));
}

static gboolean find_button_label(GtkWidget *w, const char *label)
{
  if (GTK_IS_BUTTON(w) && g_strcmp0(gtk_button_get_label(GTK_BUTTON(w)), label) == 0)
    return TRUE;
  for (GtkWidget *c = gtk_widget_get_first_child(w); c != NULL; c = gtk_widget_get_next_sibling(c))
    if (find_button_label(c, label))
      return TRUE;
  return FALSE;
}

static void test_german_window(void)
{
  g_test_message("locale dir: %s", cohort_app_locale_dir());
  g_assert_cmpstr(_("Model"), ==, "Modell");
  g_assert_cmpstr(cohort_key_label("n_layer"), ==, "Schichten");
  g_assert_cmpstr(cohort_key_label("zero_stage"), ==, "Über Prozesse aufteilen (ZeRO-Stufe)");
  /* enable_multi_gpu as a machine without GPUs names it */
  gboolean gpus = cohort_key_labels_get_gpus();
  cohort_key_labels_set_gpus(FALSE);
  g_assert_cmpstr(cohort_key_label("enable_multi_gpu"), ==, "Mit mehreren Prozessen trainieren");
  cohort_key_labels_set_gpus(gpus);
  CohortWindow *win = cohort_window_new(NULL);
  g_assert_cmpstr(page_title(win, "model"), ==, "Modell");
  g_assert_cmpstr(page_title(win, "distributed"), ==, "Verteilt");
  g_assert_cmpstr(page_title(win, "run"), ==, "Lauf");
  g_assert_true(g_str_has_prefix(cohort_window_get_summary(win), "Batch pro Prozess 16"));
  g_assert_cmpstr(cohort_window_get_status(win), ==, "Startbereit.");
  g_assert_true(g_str_has_prefix(
      cohort_run_page_get_figure(cohort_window_get_run_page(win), "status"), "Kein Lauf aktiv"));
  /* Strings from the GtkBuilder templates. */
  /* The header bar is part of the window's content (AdwApplicationWindow). */
  g_assert_true(find_button_label(GTK_WIDGET(win), "_Starten"));
  g_assert_true(find_button_label(GTK_WIDGET(win), "_Anhalten"));
  g_assert_cmpstr(gtk_window_get_title(GTK_WINDOW(cohort_window_get_multinode_dialog(win))), ==,
                  "Mehrknoten-Einstellungen");
  gtk_window_destroy(GTK_WINDOW(win));
}

/* Every key's help sentence (the engine's key table, shown as the tooltip of its row) and the
 * window's new words are German in the German window. */
static void test_key_help_translated(void)
{
  guint n;
  const CohortConfigKey *keys = cohort_config_keys(&n);
  GString *missing = g_string_new(NULL);
  for (guint i = 0; i < n; i++)
    if (keys[i].help != NULL && g_str_equal(cohort_key_help(&keys[i]), keys[i].help))
      g_string_append_printf(missing, " %s", keys[i].name);
  if (missing->len > 0)
    g_error("help texts without a German translation:%s", missing->str);
  g_string_free(missing, TRUE);
  g_assert_cmpstr(cohort_key_help(cohort_config_find_key("momentum")), ==,
                  "SGD-Momentum; 0 ist einfaches SGD.");
  g_autofree char *allowed = cohort_key_allowed(cohort_config_find_key("n_layer"));
  g_assert_cmpstr(allowed, ==, "1 bis 96");
  g_autoptr(CohortConfigForm) form = cohort_config_form_new();
  g_assert_false(cohort_config_form_set_text(form, "batch_size", "xyz"));
  g_assert_cmpstr(cohort_config_form_get_error(form, "batch_size"), ==,
                  "Batchgröße pro Prozess: „xyz“ ist keine ganze Zahl; erlaubt: 1 bis 65536");
  g_assert_cmpstr(_("Resume the Earlier Run?"), ==, "Den früheren Lauf fortsetzen?");
}

static void test_french_catalog(void)
{
  g_setenv("LANGUAGE", "fr", TRUE);
  ++_nl_msg_cat_cntr;
  g_assert_cmpstr(_("Model"), ==, "Modèle");
  g_assert_cmpstr(cohort_key_label("zero_stage"), ==, "Répartir entre les processus (niveau ZeRO)");
  g_assert_cmpstr(
      ngettext("%u setting is not valid: %s", "%u settings are not valid; first: %s", 2), ==,
      "%u paramètres ne sont pas valides ; le premier : %s");
  CohortWindow *win = cohort_window_new(NULL);
  g_assert_cmpstr(page_title(win, "training"), ==, "Entraînement");
  g_assert_cmpstr(cohort_key_help(cohort_config_find_key("momentum")), ==,
                  "Momentum de SGD ; 0 donne un SGD simple.");
  guint n;
  const CohortConfigKey *keys = cohort_config_keys(&n);
  for (guint i = 0; i < n; i++)
    if (keys[i].help != NULL && g_str_equal(cohort_key_help(&keys[i]), keys[i].help))
      g_error("%s: its help has no French translation", keys[i].name);
  gtk_window_destroy(GTK_WINDOW(win));
}

/* Whether `msgid` has a translation in the current language: gettext hands back the msgid
 * itself when the catalog has none (a translation may read like the English one). */
static gboolean translated(const char *msgid)
{
  return gettext(msgid) != msgid;
}

/* Every key is complete: a label, its label and help translated in every language the window
 * ships, and a row in docs/config.md; every model family's label is translated too. (This
 * replaces counting the keys: a new key fails here until it has all of these.) */
static void test_every_key_complete(void)
{
  g_autofree char *doc_path = g_test_build_filename(G_TEST_DIST, "..", "docs", "config.md", NULL);
  g_autofree char *doc = NULL;
  g_assert_true(g_file_get_contents(doc_path, &doc, NULL, NULL));
  guint n, n_families;
  const CohortConfigKey *keys = cohort_config_keys(&n);
  const CohortFamily *families = cohort_families(&n_families);
  g_autoptr(GString) missing = g_string_new(NULL);
  for (guint i = 0; i < n; i++) {
    g_autofree char *row = g_strdup_printf("\n| `%s` |", keys[i].name);
    if (strstr(doc, row) == NULL)
      g_string_append_printf(missing, " %s (no row in docs/config.md)", keys[i].name);
    if (cohort_key_label_msgid(keys[i].name) == NULL)
      g_string_append_printf(missing, " %s (no label in ui/key-labels.c)", keys[i].name);
    if (keys[i].help == NULL || *keys[i].help == '\0')
      g_string_append_printf(missing, " %s (no help in the key table)", keys[i].name);
  }
  /* The languages the window ships: po/LINGUAS. */
  g_autofree char *linguas_path = g_test_build_filename(G_TEST_DIST, "..", "po", "LINGUAS", NULL);
  g_autofree char *linguas = NULL;
  g_assert_true(g_file_get_contents(linguas_path, &linguas, NULL, NULL));
  g_auto(GStrv) languages = g_regex_split_simple("\\s+", g_strstrip(linguas), 0, 0);
  g_assert_true(g_strv_contains((const char *const *)languages, "de"));
  g_assert_true(g_strv_contains((const char *const *)languages, "fr"));
  for (guint l = 0; languages[l] != NULL; l++) {
    g_setenv("LANGUAGE", languages[l], TRUE);
    ++_nl_msg_cat_cntr;
    /* a label as a machine with GPUs and as one without names it */
    for (int gpus = 1; gpus >= 0; gpus--) {
      cohort_key_labels_set_gpus(gpus);
      for (guint i = 0; i < n; i++) {
        const char *label = cohort_key_label_msgid(keys[i].name);
        if (label != NULL && !translated(label))
          g_string_append_printf(missing, " %s (label \"%s\" not in po/%s.po)", keys[i].name, label,
                                 languages[l]);
        if (gpus && keys[i].help != NULL && !translated(keys[i].help))
          g_string_append_printf(missing, " %s (help not in po/%s.po)", keys[i].name, languages[l]);
      }
    }
    cohort_key_labels_set_gpus(TRUE);
    for (guint f = 0; f < n_families; f++)
      if (!translated(families[f].label))
        g_string_append_printf(missing, " model %s (label not in po/%s.po)", families[f].name,
                               languages[l]);
  }
  g_setenv("LANGUAGE", "de", TRUE);
  ++_nl_msg_cat_cntr;
  if (missing->len > 0)
    g_error("incomplete keys:%s", missing->str);
}

int main(int argc, char **argv)
{
  /* As `LANGUAGE=de cohort` from a shell without LANG: the window falls back to C.UTF-8. */
  g_unsetenv("LC_ALL");
  g_unsetenv("LC_MESSAGES");
  g_unsetenv("LANG");
  g_setenv("LANGUAGE", "de", TRUE);
  tmp_dir = ui_test_init(&argc, &argv);
  g_test_add_func("/ui/i18n/german-window", test_german_window);
  g_test_add_func("/ui/i18n/key-help-translated", test_key_help_translated);
  g_test_add_func("/ui/i18n/french-catalog", test_french_catalog);
  g_test_add_func("/ui/i18n/every-key-complete", test_every_key_complete);
  int rc = g_test_run();
  ui_test_rmtree(tmp_dir);
  return rc;
}

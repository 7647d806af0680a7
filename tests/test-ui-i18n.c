/* Translations load: with LANGUAGE=de the window is German (C strings and .ui strings), and
 * the French catalog answers too. */
#include <glib/gi18n.h>

#include "tests/ui/ui-test.h"
#include "ui/key-labels.h"
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
  g_assert_cmpstr(cohort_key_label("zero_stage"), ==, "Optimiererzustand aufteilen (ZeRO-Stufe)");
  CohortWindow *win = cohort_window_new(NULL);
  g_assert_cmpstr(page_title(win, "model"), ==, "Modell");
  g_assert_cmpstr(page_title(win, "distributed"), ==, "Verteilt");
  g_assert_cmpstr(page_title(win, "run"), ==, "Lauf");
  g_assert_true(g_str_has_prefix(cohort_window_get_summary(win), "Batch pro Prozess 16"));
  g_assert_cmpstr(cohort_window_get_status(win), ==, "Startbereit.");
  g_assert_true(g_str_has_prefix(
      cohort_run_page_get_figure(cohort_window_get_run_page(win), "status"), "Kein Lauf aktiv"));
  /* Strings from the GtkBuilder templates. */
  GtkWidget *titlebar = gtk_window_get_titlebar(GTK_WINDOW(win));
  g_assert_true(find_button_label(titlebar, "_Starten"));
  g_assert_true(find_button_label(titlebar, "_Anhalten"));
  g_assert_cmpstr(gtk_window_get_title(GTK_WINDOW(cohort_window_get_multinode_dialog(win))), ==,
                  "Mehrknoten-Einstellungen");
  gtk_window_destroy(GTK_WINDOW(win));
}

static void test_french_catalog(void)
{
  g_setenv("LANGUAGE", "fr", TRUE);
  ++_nl_msg_cat_cntr;
  g_assert_cmpstr(_("Model"), ==, "Modèle");
  g_assert_cmpstr(cohort_key_label("zero_stage"), ==,
                  "Répartir l’état de l’optimiseur (niveau ZeRO)");
  g_assert_cmpstr(
      ngettext("%u setting is not valid: %s", "%u settings are not valid; first: %s", 2), ==,
      "%u paramètres ne sont pas valides ; le premier : %s");
  CohortWindow *win = cohort_window_new(NULL);
  g_assert_cmpstr(page_title(win, "training"), ==, "Entraînement");
  gtk_window_destroy(GTK_WINDOW(win));
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
  g_test_add_func("/ui/i18n/french-catalog", test_french_catalog);
  int rc = g_test_run();
  ui_test_rmtree(tmp_dir);
  return rc;
}

/* The window's distillation parts: the Distillation section of the Training page with its five
 * keys (each family sees those it reads: a temperature for gpt and resnet, a guidance scale for
 * dit), the folder chooser of teacher_from (a chosen folder becomes the key's value), the Run
 * page plotting a recorded distillation's two loss parts (and none for a plain run), and the
 * German and French labels. */
#include <glib/gi18n.h>

#include "tests/ui/ui-test.h"
#include "ui/config-form-private.h"
#include "ui/key-labels.h"
#include "ui/path-chooser.h"
#include "ui/run-page-private.h"
#include "ui/window-private.h"

/* glibc caches translations; bumping this counter makes it look at LANGUAGE again. */
extern int _nl_msg_cat_cntr;

static char *tmp_dir;

static const char *const distill_keys[] = {"teacher_from",        "distill_alpha",
                                           "distill_temperature", "distill_cfg_scale",
                                           "student_init",        NULL};

/* The heading of the section a control sits in: the first label of its section box. */
static const char *section_of(GtkWidget *control)
{
  for (GtkWidget *w = control; w != NULL; w = gtk_widget_get_parent(w)) {
    GtkWidget *first = gtk_widget_get_first_child(w);
    if (GTK_IS_BOX(w) && GTK_IS_LABEL(first) && gtk_widget_has_css_class(first, "heading"))
      return gtk_label_get_text(GTK_LABEL(first));
  }
  return NULL;
}

static const char *page_of(CohortWindow *win, GtkWidget *control)
{
  GtkWidget *page = GTK_WIDGET(cohort_window_get_run_page(win));
  GtkStack *stack = GTK_STACK(gtk_widget_get_parent(page));
  for (GtkWidget *w = control; w != NULL; w = gtk_widget_get_parent(w))
    if (gtk_widget_get_parent(w) == GTK_WIDGET(stack))
      return gtk_stack_page_get_name(gtk_stack_get_page(stack, w));
  return NULL;
}

static void test_section(void)
{
  CohortWindow *win = cohort_window_new(NULL);
  CohortConfigForm *form = cohort_window_get_form(win);
  for (const char *const *k = distill_keys; *k; k++) {
    GtkWidget *c = cohort_config_form_get_control(form, *k);
    g_assert_nonnull(c);
    g_assert_cmpstr(section_of(c), ==, "Distillation");
    g_assert_cmpstr(page_of(win, c), ==, "training");
  }
  g_assert_true(cohort_config_form_set_text(form, "student_init", "teacher_layers"));
  g_assert_true(cohort_config_form_set_text(form, "distill_alpha", "0.8"));
  g_assert_false(cohort_config_form_set_text(form, "distill_temperature", "0"));
  const CohortConfig *cfg = cohort_config_form_get_config(form);
  g_assert_cmpint(cfg->student_init, ==, COHORT_STUDENT_INIT_TEACHER_LAYERS);
  g_assert_cmpfloat(cfg->distill_alpha, ==, 0.8);
  g_assert_cmpfloat(cfg->distill_temperature, ==, 2.0);
  g_assert_nonnull(cohort_config_form_get_error(form, "distill_temperature"));
  gtk_window_destroy(GTK_WINDOW(win));
}

/* Visible: the control's row and its section. */
static gboolean visible(CohortConfigForm *form, const char *key)
{
  GtkWidget *row =
      gtk_widget_get_ancestor(cohort_config_form_get_control(form, key), GTK_TYPE_LIST_BOX_ROW);
  g_assert_nonnull(row);
  GtkWidget *section = gtk_widget_get_parent(gtk_widget_get_parent(row));
  return gtk_widget_get_visible(row) && gtk_widget_get_visible(section);
}

static void test_keys_per_model(void)
{
  const struct {
    const char *model;
    gboolean temperature, cfg_scale;
  } cases[] = {{"resnet", TRUE, FALSE}, {"dit", FALSE, TRUE}, {"gpt", TRUE, FALSE}};
  CohortWindow *win = cohort_window_new(NULL);
  CohortConfigForm *form = cohort_window_get_form(win);
  for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
    g_assert_true(cohort_config_form_set_text(form, "model", cases[i].model));
    g_assert_true(visible(form, "teacher_from"));
    g_assert_true(visible(form, "distill_alpha"));
    g_assert_true(visible(form, "student_init"));
    g_assert_cmpint(visible(form, "distill_temperature"), ==, cases[i].temperature);
    g_assert_cmpint(visible(form, "distill_cfg_scale"), ==, cases[i].cfg_scale);
  }
  gtk_window_destroy(GTK_WINDOW(win));
}

static void test_folder_chooser(void)
{
  CohortWindow *win = cohort_window_new(NULL);
  CohortConfigForm *form = cohort_window_get_form(win);
  GtkWidget *button = cohort_config_form_get_chooser(form, "teacher_from");
  g_assert_nonnull(button);
  g_assert_cmpint(cohort_path_chooser_action(button), ==, GTK_FILE_CHOOSER_ACTION_SELECT_FOLDER);
  /* the teacher is a folder, as a GPT's init_from (a Hugging Face folder) is */
  g_assert_cmpint(cohort_path_chooser_action(cohort_config_form_get_chooser(form, "init_from")), ==,
                  GTK_FILE_CHOOSER_ACTION_SELECT_FOLDER);
  g_assert_true(gtk_widget_get_parent(button) ==
                gtk_widget_get_parent(cohort_config_form_get_control(form, "teacher_from")));
  g_assert_null(cohort_path_chooser_get_open(button));

  g_signal_emit_by_name(button, "clicked");
  GtkNativeDialog *chooser = cohort_path_chooser_get_open(button);
  g_assert_nonnull(chooser);
  g_assert_cmpint(gtk_file_chooser_get_action(GTK_FILE_CHOOSER(chooser)), ==,
                  GTK_FILE_CHOOSER_ACTION_SELECT_FOLDER);
  g_autofree char *teacher = g_build_filename(tmp_dir, "teacher", NULL);
  g_assert_cmpint(g_mkdir(teacher, 0755), ==, 0);
  g_autoptr(GFile) dir = g_file_new_for_path(teacher);
  g_assert_true(gtk_file_chooser_set_current_folder(GTK_FILE_CHOOSER(chooser), dir, NULL));
  ui_test_spin(0.2);
  g_autoptr(GFile) got = gtk_file_chooser_get_file(GTK_FILE_CHOOSER(chooser));
  g_assert_nonnull(got);
  g_assert_cmpstr(g_file_peek_path(got), ==, teacher);
  g_signal_emit_by_name(chooser, "response", GTK_RESPONSE_ACCEPT);
  g_assert_cmpstr(cohort_config_form_get_config(form)->teacher_from, ==, teacher);
  g_autofree char *shown = cohort_config_form_get_text(form, "teacher_from");
  g_assert_cmpstr(shown, ==, teacher);
  g_assert_null(cohort_path_chooser_get_open(button));

  /* a cancelled chooser changes nothing */
  g_signal_emit_by_name(button, "clicked");
  chooser = cohort_path_chooser_get_open(button);
  g_assert_nonnull(chooser);
  g_signal_emit_by_name(chooser, "response", GTK_RESPONSE_CANCEL);
  g_assert_cmpstr(cohort_config_form_get_config(form)->teacher_from, ==, teacher);
  /* and one still open when the window closes goes with it */
  g_signal_emit_by_name(button, "clicked");
  g_assert_nonnull(cohort_path_chooser_get_open(button));
  gtk_window_destroy(GTK_WINDOW(win));
  g_rmdir(teacher);
}

static gboolean run_finished(gpointer data)
{
  return cohort_run_get_summary(data) != NULL;
}

static CohortRunPage *replay(CohortWindow *win, const char *name)
{
  g_autofree char *path = g_test_build_filename(G_TEST_DIST, "ui", name, NULL);
  cohort_window_replay(win, path);
  g_assert_true(ui_test_wait(run_finished, cohort_window_get_run(win), 10));
  return cohort_window_get_run_page(win);
}

static void test_run_page_parts(void)
{
  CohortWindow *win = cohort_window_new(NULL);
  CohortRunPage *page = replay(win, "progress-distill.jsonl");
  g_assert_cmpuint(cohort_run_page_count_points(page, FALSE), ==, 4);
  g_assert_cmpuint(cohort_run_page_count_parts(page, TRUE), ==, 4);
  g_assert_cmpuint(cohort_run_page_count_parts(page, FALSE), ==, 4);
  gtk_window_destroy(GTK_WINDOW(win));

  win = cohort_window_new(NULL);
  page = replay(win, "progress-sample.jsonl");
  g_assert_cmpuint(cohort_run_page_count_points(page, FALSE), ==, 6);
  g_assert_cmpuint(cohort_run_page_count_parts(page, TRUE), ==, 0);
  g_assert_cmpuint(cohort_run_page_count_parts(page, FALSE), ==, 0);
  gtk_window_destroy(GTK_WINDOW(win));
}

static void test_translations(void)
{
  g_setenv("LANGUAGE", "de", TRUE);
  ++_nl_msg_cat_cntr;
  g_assert_cmpstr(_("Distillation"), ==, "Destillation");
  g_assert_cmpstr(cohort_key_label("teacher_from"), ==, "Lehrer-Ordner");
  g_assert_cmpstr(cohort_key_choice_label("teacher_layers"), ==, "jeder k-te Block des Lehrers");
  g_setenv("LANGUAGE", "fr", TRUE);
  ++_nl_msg_cat_cntr;
  g_assert_cmpstr(cohort_key_label("student_init"), ==, "Initialisation de l'élève");
  g_assert_cmpstr(_("distillation loss"), ==, "perte de distillation");
  g_setenv("LANGUAGE", "en", TRUE);
  ++_nl_msg_cat_cntr;
}

int main(int argc, char **argv)
{
  /* GTK's own file chooser saves its settings; without a session bus, into memory. */
  g_setenv("GSETTINGS_BACKEND", "memory", TRUE);
  g_setenv("GTK_USE_PORTAL", "0", TRUE);
  tmp_dir = ui_test_init(&argc, &argv);
  g_test_add_func("/ui/distill/section", test_section);
  g_test_add_func("/ui/distill/keys-per-model", test_keys_per_model);
  g_test_add_func("/ui/distill/folder-chooser", test_folder_chooser);
  g_test_add_func("/ui/distill/run-page-parts", test_run_page_parts);
  g_test_add_func("/ui/distill/translations", test_translations);
  int rc = g_test_run();
  ui_test_rmtree(tmp_dir);
  return rc;
}

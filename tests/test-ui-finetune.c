/* The window's Fine-tuning section (Training page): the finetune choice with its labels, the
 * LoRA keys shown with lora only, trainable with lora and frozen, values that reach the config,
 * and the German and French labels. */
#include <glib/gi18n.h>

#include "tests/ui/ui-test.h"
#include "ui/config-form-private.h"
#include "ui/key-labels.h"
#include "ui/window-private.h"

/* glibc caches translations; bumping this counter makes it look at LANGUAGE again. */
extern int _nl_msg_cat_cntr;

static const char *const finetune_keys[] = {"finetune",     "lora_rank",     "lora_alpha",
                                            "lora_dropout", "lora_targets",  "trainable",
                                            "adapter_from", "merge_adapter", NULL};

static const char *section_of(GtkWidget *control)
{
  for (GtkWidget *w = control; w != NULL; w = gtk_widget_get_parent(w)) {
    GtkWidget *first = gtk_widget_get_first_child(w);
    if (GTK_IS_BOX(w) && GTK_IS_LABEL(first) && gtk_widget_has_css_class(first, "heading"))
      return gtk_label_get_text(GTK_LABEL(first));
  }
  return NULL;
}

static gboolean visible(CohortConfigForm *form, const char *key)
{
  GtkWidget *row =
      gtk_widget_get_ancestor(cohort_config_form_get_control(form, key), GTK_TYPE_LIST_BOX_ROW);
  g_assert_nonnull(row);
  GtkWidget *section = gtk_widget_get_parent(gtk_widget_get_parent(row));
  return gtk_widget_get_visible(row) && gtk_widget_get_visible(section);
}

static void test_section(void)
{
  CohortWindow *win = cohort_window_new(NULL);
  CohortConfigForm *form = cohort_window_get_form(win);
  for (const char *const *k = finetune_keys; *k; k++) {
    GtkWidget *c = cohort_config_form_get_control(form, *k);
    g_assert_nonnull(c);
    g_assert_cmpstr(section_of(c), ==, "Fine-tuning");
  }
  /* full: the mode alone */
  g_assert_true(visible(form, "finetune"));
  g_assert_false(visible(form, "lora_rank"));
  g_assert_false(visible(form, "trainable"));
  g_assert_true(cohort_config_form_set_text(form, "finetune", "lora"));
  for (const char *const *k = finetune_keys; *k; k++)
    g_assert_true(visible(form, *k));
  g_assert_false(cohort_config_form_set_text(form, "lora_rank", "0"));
  g_assert_nonnull(cohort_config_form_get_error(form, "lora_rank"));
  g_assert_true(cohort_config_form_set_text(form, "lora_rank", "16"));
  g_assert_true(cohort_config_form_set_text(form, "lora_targets", "c_attn"));
  const CohortConfig *cfg = cohort_config_form_get_config(form);
  g_assert_cmpint(cfg->finetune, ==, COHORT_FINETUNE_LORA);
  g_assert_cmpint(cfg->lora_rank, ==, 16);
  g_assert_cmpstr(cfg->lora_targets, ==, "c_attn");
  /* frozen: trainable, no LoRA keys */
  g_assert_true(cohort_config_form_set_text(form, "finetune", "frozen"));
  g_assert_true(visible(form, "trainable"));
  g_assert_false(visible(form, "lora_rank"));
  g_assert_false(visible(form, "merge_adapter"));
  gtk_window_destroy(GTK_WINDOW(win));
}

static void test_translations(void)
{
  g_setenv("LANGUAGE", "de", TRUE);
  ++_nl_msg_cat_cntr;
  g_assert_cmpstr(_("Fine-tuning"), ==, "Feinabstimmung");
  g_assert_cmpstr(cohort_key_label("lora_rank"), ==, "LoRA-Rang (r)");
  g_assert_cmpstr(cohort_key_choice_label("frozen"), ==,
                  "eingefroren (nur die trainierbaren lernen)");
  g_setenv("LANGUAGE", "fr", TRUE);
  ++_nl_msg_cat_cntr;
  g_assert_cmpstr(cohort_key_label("trainable"), ==, "Paramètres qui apprennent encore");
  g_assert_cmpstr(cohort_key_choice_label("lora"), ==, "adaptateurs LoRA (PEFT)");
  g_setenv("LANGUAGE", "en", TRUE);
  ++_nl_msg_cat_cntr;
}

int main(int argc, char **argv)
{
  char *tmp_dir = ui_test_init(&argc, &argv);
  g_test_add_func("/ui/finetune/section", test_section);
  g_test_add_func("/ui/finetune/translations", test_translations);
  int rc = g_test_run();
  ui_test_rmtree(tmp_dir);
  return rc;
}

/* The window's Fine-tuning section (Training page): the finetune choice with its labels, the
 * LoRA keys shown with lora only, trainable with lora and frozen, values that reach the config,
 * what the patterns match shown live under lora_targets and trainable, the summary's count of
 * the parameters that learn, and the German and French labels. */
#include <glib/gi18n.h>
#include <string.h>

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

/* The line under lora_targets and trainable: what the patterns match in the configured
 * model, as they are typed and when the model's keys change (tiny-gpt: 4 layers of width 256;
 * each of the four projections takes lora_rank · (in + out) adapter parameters). */
static void test_matched_count(void)
{
  CohortWindow *win = cohort_window_new(NULL);
  CohortConfigForm *form = cohort_window_get_form(win);
  g_assert_true(cohort_config_form_set_text(form, "model", "gpt"));
  g_assert_true(cohort_config_form_set_text(form, "n_layer", "4"));
  g_assert_true(cohort_config_form_set_text(form, "finetune", "full"));
  g_assert_null(cohort_config_form_get_hint(form, "lora_targets"));
  g_assert_true(cohort_config_form_set_text(form, "finetune", "lora"));
  g_assert_true(cohort_config_form_set_text(form, "lora_rank", "8"));
  g_assert_true(cohort_config_form_set_text(form, "lora_targets", ""));
  g_assert_cmpstr(cohort_config_form_get_hint(form, "lora_targets"), ==,
                  "Matches 16 layers: 131.1 k adapter parameters");
  g_assert_true(cohort_config_form_set_text(form, "lora_targets", "h.0.*.c_*"));
  g_assert_cmpstr(cohort_config_form_get_hint(form, "lora_targets"), ==,
                  "Matches 4 layers: 32.8 k adapter parameters");
  g_assert_true(cohort_config_form_set_text(form, "lora_targets", "h.0.attn.c_attn"));
  g_assert_cmpstr(cohort_config_form_get_hint(form, "lora_targets"), ==,
                  "Matches 1 layer: 8192 adapter parameters");
  g_assert_true(cohort_config_form_set_text(form, "lora_targets", "c_attn, q_proj"));
  g_assert_cmpstr(cohort_config_form_get_hint(form, "lora_targets"), ==,
                  "“q_proj” matches no layer of this model");
  g_assert_true(cohort_config_form_hint_is_error(form, "lora_targets"));
  /* a run would be refused: Start is off and the status line says why */
  g_assert_false(cohort_window_can_start(win));
  g_assert_cmpstr(cohort_window_get_status(win), ==,
                  "Cannot start: “q_proj” matches no layer of this model");
  g_assert_true(cohort_config_form_set_text(form, "lora_targets", "ln_1"));
  g_assert_cmpstr(cohort_config_form_get_hint(form, "lora_targets"), ==,
                  "“h.0.ln_1” cannot take an adapter");
  /* the model's keys change the count */
  g_assert_true(cohort_config_form_set_text(form, "lora_targets", "c_fc"));
  g_assert_true(cohort_config_form_set_text(form, "n_layer", "6"));
  g_assert_cmpstr(cohort_config_form_get_hint(form, "lora_targets"), ==,
                  "Matches 6 layers: 61.4 k adapter parameters");
  g_assert_false(cohort_config_form_hint_is_error(form, "lora_targets"));
  g_assert_true(cohort_window_can_start(win));
  /* trainable: tensors named, in lora and frozen */
  g_assert_null(cohort_config_form_get_hint(form, "trainable"));
  g_assert_true(cohort_config_form_set_text(form, "trainable", "ln_f"));
  g_assert_cmpstr(cohort_config_form_get_hint(form, "trainable"), ==,
                  "Matches 2 tensors: 512 parameters");
  g_assert_true(cohort_config_form_set_text(form, "finetune", "frozen"));
  g_assert_null(cohort_config_form_get_hint(form, "lora_targets"));
  g_assert_true(cohort_config_form_set_text(form, "trainable", "*.bias,xyz"));
  g_assert_cmpstr(cohort_config_form_get_hint(form, "trainable"), ==,
                  "“xyz” matches no parameter of this model");
  g_assert_true(cohort_config_form_set_text(form, "trainable", ""));
  g_assert_cmpstr(cohort_config_form_get_hint(form, "trainable"), ==,
                  "Matches nothing: with “frozen” nothing would learn");
  /* a ResNet's classifier */
  g_assert_true(cohort_config_form_set_text(form, "model", "resnet"));
  g_assert_true(cohort_config_form_set_text(form, "data_format", "images"));
  g_assert_true(cohort_config_form_set_text(form, "n_layer", "8"));
  g_assert_true(cohort_config_form_set_text(form, "trainable", "fc.*"));
  g_assert_nonnull(strstr(cohort_config_form_get_hint(form, "trainable"), "Matches 2 tensors"));
  g_assert_true(cohort_config_form_set_text(form, "model", "gpt"));
  g_assert_true(cohort_config_form_set_text(form, "data_format", "text"));
  g_assert_true(cohort_config_form_set_text(form, "n_layer", "4"));
  g_assert_true(cohort_config_form_set_text(form, "trainable", ""));
  g_assert_true(cohort_config_form_set_text(form, "lora_targets", ""));
  g_assert_true(cohort_config_form_set_text(form, "finetune", "full"));
  gtk_window_destroy(GTK_WINDOW(win));
}

/* The run summary says how many parameters learn, in every mode: tiny-gpt has 3 257 856;
 * LoRA at rank 8 adds 131 072 which alone learn; frozen with ln_f trains 512. */
static void test_summary(void)
{
  CohortWindow *win = cohort_window_new(NULL);
  CohortConfigForm *form = cohort_window_get_form(win);
  g_assert_true(cohort_config_form_set_text(form, "model", "gpt"));
  g_assert_true(cohort_config_form_set_text(form, "n_layer", "4"));
  g_assert_true(cohort_config_form_set_text(form, "finetune", "full"));
  const char *s = cohort_window_get_summary(win);
  g_test_message("summary: %s", s);
  g_assert_nonnull(strstr(s, " · 3.26 M of 3.26 M parameters learn (100 %)"));
  g_assert_true(cohort_config_form_set_text(form, "finetune", "lora"));
  g_assert_true(cohort_config_form_set_text(form, "lora_rank", "8"));
  s = cohort_window_get_summary(win);
  g_test_message("summary: %s", s);
  g_assert_nonnull(strstr(s, "131.1 k of 3.39 M parameters learn (3.87 %)"));
  g_assert_true(cohort_config_form_set_text(form, "lora_rank", "16"));
  g_assert_nonnull(strstr(cohort_window_get_summary(win), "262.1 k of 3.52 M parameters learn"));
  g_assert_true(cohort_config_form_set_text(form, "finetune", "frozen"));
  g_assert_true(cohort_config_form_set_text(form, "trainable", "ln_f"));
  s = cohort_window_get_summary(win);
  g_test_message("summary: %s", s);
  g_assert_nonnull(strstr(s, "512 of 3.26 M parameters learn (0.0157 %)"));
  g_assert_true(cohort_config_form_set_text(form, "trainable", ""));
  g_assert_true(cohort_config_form_set_text(form, "lora_rank", "8"));
  g_assert_true(cohort_config_form_set_text(form, "finetune", "full"));
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

/* The matched count and the summary's share in German and French (numbers in the C locale's
 * form: the tests run with LC_ALL=C.UTF-8). */
static void test_count_translations(void)
{
  CohortWindow *win = cohort_window_new(NULL);
  CohortConfigForm *form = cohort_window_get_form(win);
  g_assert_true(cohort_config_form_set_text(form, "model", "gpt"));
  g_assert_true(cohort_config_form_set_text(form, "n_layer", "4"));
  g_assert_true(cohort_config_form_set_text(form, "finetune", "lora"));
  g_assert_true(cohort_config_form_set_text(form, "lora_rank", "8"));
  g_setenv("LANGUAGE", "de", TRUE);
  ++_nl_msg_cat_cntr;
  g_assert_true(cohort_config_form_set_text(form, "lora_targets", "c_fc"));
  g_assert_cmpstr(cohort_config_form_get_hint(form, "lora_targets"), ==,
                  "Trifft 4 Schichten: 41.0 Tsd. Adapter-Parameter");
  g_assert_true(cohort_config_form_set_text(form, "lora_targets", "q_proj"));
  g_assert_cmpstr(cohort_config_form_get_hint(form, "lora_targets"), ==,
                  "„q_proj“ trifft keine Schicht dieses Modells");
  g_assert_true(cohort_config_form_set_text(form, "lora_targets", ""));
  g_assert_nonnull(strstr(cohort_window_get_summary(win),
                          "131.1 Tsd. von 3.39 Mio. Parametern lernen (3.87 %)"));
  g_setenv("LANGUAGE", "fr", TRUE);
  ++_nl_msg_cat_cntr;
  g_assert_true(cohort_config_form_set_text(form, "trainable", "ln_f"));
  g_assert_cmpstr(cohort_config_form_get_hint(form, "trainable"), ==,
                  "Désigne 2 tenseurs : 512 paramètres");
  g_assert_true(cohort_config_form_set_text(form, "trainable", ""));
  g_assert_nonnull(
      strstr(cohort_window_get_summary(win), "131.1 k paramètres sur 3.39 M apprennent (3.87 %)"));
  g_setenv("LANGUAGE", "en", TRUE);
  ++_nl_msg_cat_cntr;
  g_assert_true(cohort_config_form_set_text(form, "finetune", "full"));
  gtk_window_destroy(GTK_WINDOW(win));
}

int main(int argc, char **argv)
{
  char *tmp_dir = ui_test_init(&argc, &argv);
  g_test_add_func("/ui/finetune/section", test_section);
  g_test_add_func("/ui/finetune/matched-count", test_matched_count);
  g_test_add_func("/ui/finetune/summary", test_summary);
  g_test_add_func("/ui/finetune/translations", test_translations);
  g_test_add_func("/ui/finetune/count-translations", test_count_translations);
  int rc = g_test_run();
  ui_test_rmtree(tmp_dir);
  return rc;
}

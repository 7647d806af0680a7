/* The config ↔ controls binding: every key has a control, values go both ways for every
 * key, the engine's validation marks a control and disables Start, the summary follows. */
#include <math.h>

#include "engine/config/model-families.h"
#include "tests/ui/ui-test.h"
#include "ui/config-form-private.h"
#include "ui/key-labels.h"
#include "ui/window-private.h"

static char *tmp_dir;

static gboolean same_value(const CohortConfigKey *key, const char *a, const char *b)
{
  if (a == NULL || b == NULL)
    return a == b;
  if (key->type == COHORT_KEY_DOUBLE)
    return fabs(g_ascii_strtod(a, NULL) - g_ascii_strtod(b, NULL)) <=
           1e-12 * MAX(1.0, fabs(g_ascii_strtod(a, NULL)));
  return g_str_equal(a, b);
}

/* Values to try for a key, the first the engine accepts (and that differs) is used. */
static GPtrArray *candidates(const CohortConfigKey *key, const char *current)
{
  GPtrArray *c = g_ptr_array_new_with_free_func(g_free);
  double cur = g_ascii_strtod(current, NULL);
  switch (key->type) {
  case COHORT_KEY_BOOL:
    g_ptr_array_add(c, g_strdup(g_str_equal(current, "true") ? "false" : "true"));
    break;
  case COHORT_KEY_CHOICE:
    for (const char *const *ch = key->choices; *ch != NULL; ch++)
      g_ptr_array_add(c, g_strdup(*ch));
    break;
  case COHORT_KEY_INT:
    g_ptr_array_add(c, g_strdup_printf("%d", (int)cur + 1));
    g_ptr_array_add(c, g_strdup_printf("%d", (int)cur * 2));
    g_ptr_array_add(c, g_strdup_printf("%d", (int)key->min));
    g_ptr_array_add(c, g_strdup_printf("%d", (int)key->min + 1));
    g_ptr_array_add(c, g_strdup_printf("%d", (int)cur - 1));
    g_ptr_array_add(c, g_strdup_printf("%d", (int)MIN(key->max, 1e9)));
    break;
  case COHORT_KEY_INT64:
    g_ptr_array_add(c, g_strdup("42"));
    g_ptr_array_add(c, g_strdup("7"));
    break;
  case COHORT_KEY_DOUBLE: {
    double v[] = {cur * 0.5, cur * 2, 0.5, 0.25, 2, 0.01};
    for (guint i = 0; i < G_N_ELEMENTS(v); i++) {
      char buf[G_ASCII_DTOSTR_BUF_SIZE];
      g_ptr_array_add(c, g_strdup(g_ascii_dtostr(buf, sizeof buf, v[i])));
    }
    break;
  }
  case COHORT_KEY_INT_LIST:
    g_ptr_array_add(c, g_strdup("0,1"));
    g_ptr_array_add(c, g_strdup("1"));
    break;
  case COHORT_KEY_STRING:
    for (const char *const *ch = key->choices; ch && *ch != NULL; ch++)
      g_ptr_array_add(c, g_strdup(*ch));
    g_ptr_array_add(c, g_strconcat(current, "-x", NULL));
    g_ptr_array_add(c, g_strdup("other"));
    g_ptr_array_add(c, g_strdup("0.25")); /* a per-channel number list (image_mean) */
    break;
  }
  return c;
}

static void test_every_key_has_a_control(void)
{
  CohortWindow *win = cohort_window_new(NULL);
  CohortConfigForm *form = cohort_window_get_form(win);
  guint n;
  const CohortConfigKey *keys = cohort_config_keys(&n);
  g_assert_cmpuint(n, >, 40);
  for (guint i = 0; i < n; i++) {
    GtkWidget *control = cohort_config_form_get_control(form, keys[i].name);
    g_assert_nonnull(control);
    /* Placed in the window or in the multi-node dialog, so a user can reach it. */
    GtkRoot *root = gtk_widget_get_root(control);
    g_assert_true(root == GTK_ROOT(win) ||
                  root == GTK_ROOT(cohort_window_get_multinode_dialog(win)));
  }
  gtk_window_destroy(GTK_WINDOW(win));
}

static void test_round_trip_every_key(void)
{
  g_autoptr(CohortConfigForm) form = cohort_config_form_new();
  guint n;
  const CohortConfigKey *keys = cohort_config_keys(&n);
  guint changed = 0;
  GString *unchanged = g_string_new(NULL);

  /* Controls → config: change every key through its control. A second pass takes the keys
   * that a cross-key rule held back (vocab_size is 256 until data_format is tokens). */
  g_autofree gboolean *is_changed = g_new0(gboolean, n);
  for (guint pass = 0, i = 0; pass < 2; i = (i + 1) % n, pass += i == 0) {
    const CohortConfigKey *key = &keys[i];
    if (is_changed[i])
      continue;
    const CohortConfig *cfg = cohort_config_form_get_config(form);
    g_autofree char *current = cohort_config_get(cfg, key->name);
    g_autoptr(GPtrArray) cands = candidates(key, current);
    gboolean done = FALSE;
    for (guint j = 0; j < cands->len && !done; j++) {
      const char *cand = g_ptr_array_index(cands, j);
      g_autoptr(CohortConfig) ref = cohort_config_copy(cfg);
      if (!cohort_config_set(ref, key->name, cand, "test", NULL))
        continue;
      g_autofree char *want = cohort_config_get(ref, key->name);
      if (same_value(key, want, current))
        continue;
      g_assert_true(cohort_config_form_set_text(form, key->name, cand));
      g_assert_null(cohort_config_form_get_error(form, key->name));
      g_autofree char *got = cohort_config_get(cohort_config_form_get_config(form), key->name);
      if (!same_value(key, got, want))
        g_error("%s: typed %s, config has %s, expected %s", key->name, cand, got, want);
      g_autofree char *shown = cohort_config_form_get_text(form, key->name);
      g_assert_true(same_value(key, shown, want));
      done = TRUE;
    }
    if (done) {
      changed++;
      is_changed[i] = TRUE;
    } else if (pass == 1) {
      g_string_append_printf(unchanged, " %s", key->name);
    }
  }
  if (unchanged->len > 0)
    g_test_message("keys with no other valid value:%s", unchanged->str);
  /* Only keys with a single allowed value ("model": "gpt") may stay. */
  g_assert_cmpuint(changed, >=, n - 1);
  g_string_free(unchanged, TRUE);
  g_assert_cmpuint(cohort_config_form_count_errors(form), ==, 0);

  /* Config → controls: a second form shows exactly this config. */
  g_autoptr(CohortConfig) edited = cohort_config_copy(cohort_config_form_get_config(form));
  g_autoptr(CohortConfigForm) other = cohort_config_form_new();
  cohort_config_form_set_config(other, edited);
  for (guint i = 0; i < n; i++) {
    g_autofree char *want = cohort_config_get(edited, keys[i].name);
    g_autofree char *shown = cohort_config_form_get_text(other, keys[i].name);
    if (!same_value(&keys[i], shown, want))
      g_error("%s: control shows %s, config has %s", keys[i].name, shown, want);
  }
  g_autofree char *h1 = cohort_config_hash(edited);
  g_autofree char *h2 = cohort_config_hash(cohort_config_form_get_config(other));
  g_assert_cmpstr(h1, ==, h2);
  g_autoptr(CohortConfig) defaults = cohort_config_new();
  g_auto(GStrv) diff = cohort_config_diff(defaults, edited);
  g_assert_cmpuint(g_strv_length(diff), ==, changed);
}

static void test_invalid_value_disables_start(void)
{
  CohortWindow *win = cohort_window_new(NULL);
  CohortConfigForm *form = cohort_window_get_form(win);
  g_assert_true(cohort_window_can_start(win));

  g_assert_false(cohort_config_form_set_text(form, "learning_rate", "-1"));
  const char *err = cohort_config_form_get_error(form, "learning_rate");
  g_assert_nonnull(err);
  /* The field is named by its label, not its config key. */
  g_assert_true(g_str_has_prefix(err, "Learning rate: "));
  g_assert_null(strstr(err, "learning_rate"));
  GtkWidget *control = cohort_config_form_get_control(form, "learning_rate");
  g_assert_true(gtk_widget_has_css_class(control, "error"));
  g_assert_cmpstr(gtk_widget_get_tooltip_text(control), ==, err);
  g_assert_false(cohort_window_can_start(win));
  g_assert_nonnull(strstr(cohort_window_get_status(win), err));
  /* The config keeps its last valid value. */
  g_assert_cmpfloat(cohort_config_form_get_config(form)->learning_rate, >, 0);

  g_assert_false(cohort_config_form_set_text(form, "beta1", "abc"));
  g_assert_cmpuint(cohort_config_form_count_errors(form), ==, 2);
  g_assert_true(cohort_config_form_set_text(form, "learning_rate", "0.0025"));
  g_assert_false(gtk_widget_has_css_class(control, "error"));
  g_assert_false(cohort_window_can_start(win));
  g_assert_true(cohort_config_form_set_text(form, "beta1", "0.8"));
  g_assert_true(cohort_window_can_start(win));
  g_assert_cmpfloat(cohort_config_form_get_config(form)->learning_rate, ==, 0.0025);

  /* A cross-key rule: n_embd must be a multiple of n_head. The refused head count becomes
   * valid once the width fits it. */
  g_assert_true(cohort_config_form_set_text(form, "n_embd", "256"));
  g_assert_false(cohort_config_form_set_text(form, "n_head", "3"));
  g_assert_nonnull(cohort_config_form_get_error(form, "n_head"));
  g_assert_false(cohort_window_can_start(win));
  g_assert_true(cohort_config_form_set_text(form, "n_embd", "384"));
  g_assert_null(cohort_config_form_get_error(form, "n_head"));
  g_assert_cmpint(cohort_config_form_get_config(form)->n_head, ==, 3);
  g_assert_true(cohort_window_can_start(win));
  gtk_window_destroy(GTK_WINDOW(win));
}

static void test_hidden_choice(void)
{
  g_autoptr(CohortConfigForm) form = cohort_config_form_new();
  cohort_config_form_hide_choice(form, "distributed_backend", "nccl", "needs CUDA");
  GtkWidget *dd = cohort_config_form_get_control(form, "distributed_backend");
  GListModel *model = gtk_drop_down_get_model(GTK_DROP_DOWN(dd));
  g_assert_cmpuint(g_list_model_get_n_items(model), ==, 1);
  g_autoptr(CohortConfig) cfg = cohort_config_copy(cohort_config_form_get_config(form));
  g_assert_true(cohort_config_set(cfg, "distributed_backend", "nccl", "test", NULL));
  cohort_config_form_set_config(form, cfg);
  /* The reason, after the field's label. */
  g_assert_cmpstr(cohort_config_form_get_error(form, "distributed_backend"), ==,
                  "Communication backend: needs CUDA");
  g_autofree char *shown = cohort_config_form_get_text(form, "distributed_backend");
  g_assert_cmpstr(shown, ==, "nccl");
  g_assert_true(cohort_config_form_set_text(form, "distributed_backend", "gloo"));
  g_assert_cmpuint(cohort_config_form_count_errors(form), ==, 0);
}

static void test_summary(void)
{
  CohortWindow *win = cohort_window_new(NULL);
  CohortConfigForm *form = cohort_window_get_form(win);
  g_assert_true(cohort_config_form_set_text(form, "batch_size", "16"));
  g_assert_true(cohort_config_form_set_text(form, "gradient_accumulation_steps", "2"));
  g_assert_true(cohort_config_form_set_text(form, "learning_rate", "0.001"));
  g_assert_true(cohort_config_form_set_text(form, "enable_multi_gpu", "true"));
  g_assert_true(cohort_config_form_set_text(form, "nproc_per_node", "4"));
  g_assert_true(cohort_config_form_set_text(form, "lr_scaling", "linear"));
  const char *s = cohort_window_get_summary(win);
  g_test_message("summary: %s", s);
  g_assert_nonnull(strstr(s, "world size 4"));
  g_assert_nonnull(strstr(s, "global batch 128"));
  g_assert_nonnull(strstr(s, "0.004"));
  /* and how many parameters learn (tests/test-ui-finetune.c checks the modes) */
  g_assert_nonnull(strstr(s, " parameters learn (100 %)"));
  /* counts in words with their plural forms, not "node(s)" */
  g_assert_nonnull(strstr(s, " · 1 node × 4 processes, started by "));
  g_assert_null(strstr(s, "(s)"));
  g_assert_null(strstr(s, "(es)"));
  g_assert_true(cohort_config_form_set_text(form, "lr_scaling", "sqrt"));
  g_assert_nonnull(strstr(cohort_window_get_summary(win), "0.002"));
  g_assert_true(cohort_config_form_set_text(form, "enable_multi_gpu", "false"));
  g_assert_nonnull(strstr(cohort_window_get_summary(win), "world size 1"));
  g_assert_nonnull(strstr(cohort_window_get_summary(win), "sequences"));
  g_assert_nonnull(
      strstr(cohort_window_get_summary(win), " · 1 node × 1 process, started by one process"));
  /* an image model's batch is images, without tokens */
  g_assert_true(cohort_config_form_set_text(form, "model", "resnet"));
  g_assert_true(cohort_config_form_set_text(form, "data_format", "images"));
  s = cohort_window_get_summary(win);
  g_test_message("summary: %s", s);
  g_assert_nonnull(strstr(s, "global batch 32 images"));
  g_assert_null(strstr(s, "tokens"));
  /* back to the language model: the window keeps its last config for the next test */
  g_assert_true(cohort_config_form_set_text(form, "model", "gpt"));
  g_assert_true(cohort_config_form_set_text(form, "data_format", "text"));
  gtk_window_destroy(GTK_WINDOW(win));
}

/* Shown: the row (a list row in a section) and its section. */
static gboolean shown(CohortConfigForm *form, const char *key)
{
  GtkWidget *row =
      gtk_widget_get_ancestor(cohort_config_form_get_control(form, key), GTK_TYPE_LIST_BOX_ROW);
  g_assert_nonnull(row);
  GtkWidget *section = gtk_widget_get_parent(gtk_widget_get_parent(row));
  return gtk_widget_get_visible(row) && gtk_widget_get_visible(section);
}

/* The title of the section that places `key` (NULL: the page's "Other"). */
static const char *section_of(const char *key)
{
  guint n = 0;
  const CohortKeySection *s = cohort_key_sections(&n);
  for (guint i = 0; i < n; i++)
    if (g_strv_contains((const char *const *)s[i].keys, key))
      return s[i].title;
  return NULL;
}

/* The model is a drop-down of the registered families, and only the chosen family's keys
 * show: a GPT has a vocabulary and no patches, a DiT the other way round. */
static void test_keys_per_model(void)
{
  CohortWindow *win = cohort_window_new(NULL);
  CohortConfigForm *form = cohort_window_get_form(win);
  g_assert_true(GTK_IS_DROP_DOWN(cohort_config_form_get_control(form, "model")));
  g_assert_true(shown(form, "vocab_size"));
  g_assert_true(shown(form, "sample_prompt"));
  g_assert_false(shown(form, "patch_size"));
  g_assert_false(shown(form, "image_size")); /* and its whole "Images" section */
  g_assert_true(shown(form, "learning_rate"));
  g_assert_true(shown(form, "zero_stage"));                            /* every family's */
  g_assert_cmpstr(section_of("zero_stage"), ==, "Gradients and data"); /* Distributed page */

  g_assert_true(cohort_config_form_set_text(form, "model", "dit"));
  g_assert_cmpstr(cohort_config_form_get_config(form)->model, ==, "dit");
  g_assert_false(shown(form, "vocab_size"));
  g_assert_false(shown(form, "sample_tokens"));
  g_assert_true(shown(form, "sample_prompt")); /* the caption of text-to-image samples */
  g_assert_true(shown(form, "sample_prompts"));
  g_assert_true(shown(form, "patch_size"));
  g_assert_true(shown(form, "image_size"));
  g_assert_true(shown(form, "cfg_scale"));
  g_assert_true(shown(form, "learning_rate"));
  gtk_window_destroy(GTK_WINDOW(win));
}

/* SGD's momentum rows only with sgd, StepLR's only with the step schedule; a value set while
 * they were hidden is kept. */
static void test_keys_per_optimizer(void)
{
  CohortWindow *win = cohort_window_new(NULL);
  CohortConfigForm *form = cohort_window_get_form(win);
  g_assert_true(cohort_config_form_set_text(form, "optimizer", "adamw"));
  g_assert_true(cohort_config_form_set_text(form, "lr_schedule", "cosine"));
  g_assert_true(shown(form, "optimizer"));
  g_assert_false(shown(form, "momentum"));
  g_assert_false(shown(form, "nesterov"));
  g_assert_false(shown(form, "lr_step_size"));
  g_assert_false(shown(form, "lr_gamma"));
  g_assert_true(cohort_config_form_set_text(form, "optimizer", "sgd"));
  g_assert_true(shown(form, "momentum"));
  g_assert_true(shown(form, "nesterov"));
  g_assert_false(shown(form, "lr_gamma"));
  g_assert_true(cohort_config_form_set_text(form, "momentum", "0.8"));
  g_assert_true(cohort_config_form_set_text(form, "lr_schedule", "step"));
  g_assert_true(shown(form, "lr_step_size"));
  g_assert_true(shown(form, "lr_gamma"));
  g_assert_true(cohort_config_form_set_text(form, "optimizer", "adamw"));
  g_assert_false(shown(form, "momentum"));
  g_assert_cmpfloat(cohort_config_form_get_config(form)->momentum, ==, 0.8);
  gtk_window_destroy(GTK_WINDOW(win));
}

/* The form shows exactly the keys the key table says are in effect, for every family and every
 * value of every key another key depends on: it reads the table's conditions, and has none of
 * its own. */
static void test_rows_follow_the_key_table(void)
{
  CohortWindow *win = cohort_window_new(NULL);
  CohortConfigForm *form = cohort_window_get_form(win);
  guint n, n_families;
  const CohortConfigKey *keys = cohort_config_keys(&n);
  const CohortFamily *families = cohort_families(&n_families);
  guint checked = 0;
  for (guint f = 0; f < n_families; f++)
    for (guint d = 0; d < n; d++) {
      const CohortConfigKey *on =
          keys[d].when_key ? cohort_config_find_key(keys[d].when_key) : NULL;
      for (const char *const *v = on ? on->choices : NULL; v != NULL && *v != NULL; v++) {
        g_autoptr(CohortConfig) cfg = cohort_config_new();
        g_assert_true(cohort_config_set(cfg, "model", families[f].name, "test", NULL));
        g_assert_true(cohort_config_set(cfg, on->name, *v, "test", NULL));
        cohort_config_form_set_config(form, cfg);
        for (guint i = 0; i < n; i++)
          if (shown(form, keys[i].name) != cohort_config_key_in_effect(&keys[i], cfg))
            g_error("model %s, %s %s: key %s is %s", families[f].name, on->name, *v, keys[i].name,
                    shown(form, keys[i].name) ? "shown" : "hidden");
        checked++;
      }
    }
  g_assert_cmpuint(checked, >=, n_families * 4);
  gtk_window_destroy(GTK_WINDOW(win));
}

int main(int argc, char **argv)
{
  tmp_dir = ui_test_init(&argc, &argv);
  g_test_add_func("/ui/binding/every-key-has-a-control", test_every_key_has_a_control);
  g_test_add_func("/ui/binding/round-trip", test_round_trip_every_key);
  g_test_add_func("/ui/binding/invalid-disables-start", test_invalid_value_disables_start);
  g_test_add_func("/ui/binding/hidden-choice", test_hidden_choice);
  g_test_add_func("/ui/binding/summary", test_summary);
  g_test_add_func("/ui/binding/keys-per-model", test_keys_per_model);
  g_test_add_func("/ui/binding/keys-per-optimizer", test_keys_per_optimizer);
  g_test_add_func("/ui/binding/rows-follow-the-key-table", test_rows_follow_the_key_table);
  int rc = g_test_run();
  ui_test_rmtree(tmp_dir);
  return rc;
}

/* Checks before launch: Start stays off, with the reason in the status line and on the field
 * (named by its label), when a data path does not exist or holds no data, when a preset's data
 * is missing (gpt2-124m), when NCCL or CUDA is chosen and no GPU is found; the sidebar marks
 * the pages that hold such a field; a number field keeps text it cannot read and marks it
 * invalid instead of replacing it; path fields have file-chooser buttons. */
#include "tests/ui/ui-test.h"
#include "ui/config-form-private.h"
#include "ui/key-labels.h"
#include "ui/launch-check.h"
#include "ui/page-sidebar.h"
#include "ui/path-chooser.h"
#include "ui/window-private.h"

static char *tmp_dir;

static gboolean gpus_known(gpointer data)
{
  CohortWindow *win = data;
  return win->gpus >= 0;
}

/* A window whose GPU detection finds none (an nvidia-smi that fails). */
static CohortWindow *window_without_gpus(void)
{
  g_setenv("COHORT_NVIDIA_SMI", "/bin/false", TRUE);
  CohortWindow *win = cohort_window_new(NULL);
  g_assert_true(ui_test_wait(gpus_known, win, 10));
  g_assert_cmpint(win->gpus, ==, 0);
  /* Not the last test's settings, which the window restores. */
  g_assert_true(cohort_window_load_preset(win, "tiny-gpt"));
  return win;
}

static gboolean page_marked(CohortWindow *win, const char *page)
{
  return cohort_page_sidebar_get_attention(COHORT_PAGE_SIDEBAR(cohort_window_get_sidebar(win)),
                                           page);
}

static void test_missing_data(void)
{
  CohortWindow *win = window_without_gpus();
  CohortConfigForm *form = cohort_window_get_form(win);
  g_assert_true(cohort_window_can_start(win));
  g_assert_false(page_marked(win, "data"));

  g_autofree char *missing = g_build_filename(tmp_dir, "no-such-file.txt", NULL);
  g_assert_true(cohort_config_form_set_text(form, "train_data", missing));
  g_assert_false(cohort_window_can_start(win));
  const char *problem = cohort_config_form_get_problem(form, "train_data");
  g_assert_nonnull(problem);
  g_test_message("problem: %s", problem);
  g_autofree char *want = g_strdup_printf("Training data: “%s” does not exist", missing);
  g_assert_cmpstr(problem, ==, want);
  g_assert_null(strstr(problem, "train_data"));
  g_autofree char *status = g_strdup_printf("Cannot start: %s", want);
  g_assert_cmpstr(cohort_window_get_status(win), ==, status);
  GtkWidget *control = cohort_config_form_get_control(form, "train_data");
  g_assert_true(gtk_widget_has_css_class(control, "error"));
  g_assert_cmpstr(gtk_widget_get_tooltip_text(control), ==, want);
  g_assert_true(page_marked(win, "data"));
  g_assert_false(page_marked(win, "model"));
  /* Start refuses with the same reason when called anyway. */
  g_autoptr(GError) error = NULL;
  g_assert_false(cohort_window_start(win, &error));
  g_assert_nonnull(strstr(error->message, "does not exist"));

  /* An empty folder holds no data; a folder with a .txt file does. */
  g_autofree char *folder = g_build_filename(tmp_dir, "texts", NULL);
  g_mkdir_with_parents(folder, 0755);
  g_assert_true(cohort_config_form_set_text(form, "train_data", folder));
  g_assert_false(cohort_window_can_start(win));
  g_assert_nonnull(strstr(cohort_config_form_get_problem(form, "train_data"), "holds no .txt"));
  g_autofree char *empty = g_build_filename(folder, "a.txt", NULL);
  g_assert_true(g_file_set_contents(empty, "", 0, NULL));
  g_assert_true(cohort_config_form_set_text(form, "train_data", empty));
  g_assert_nonnull(strstr(cohort_config_form_get_problem(form, "train_data"), "is empty"));
  g_assert_true(g_file_set_contents(empty, "Some text to train on.\n", -1, NULL));
  g_assert_true(cohort_config_form_set_text(form, "train_data", folder));
  g_assert_null(cohort_config_form_get_problem(form, "train_data"));
  g_assert_false(gtk_widget_has_css_class(control, "error"));
  g_assert_false(page_marked(win, "data"));
  g_assert_true(cohort_window_can_start(win));

  /* Images: a folder without images is refused, one with a class folder of PNGs is not. */
  g_assert_true(cohort_config_form_set_text(form, "model", "dit"));
  g_assert_true(cohort_config_form_set_text(form, "data_format", "images"));
  g_assert_true(cohort_config_form_set_text(form, "val_data", ""));
  g_assert_nonnull(strstr(cohort_config_form_get_problem(form, "train_data"), "no PNG or JPEG"));
  g_autofree char *cls = g_build_filename(folder, "cat", NULL);
  g_mkdir_with_parents(cls, 0755);
  g_autofree char *png = g_build_filename(cls, "one.png", NULL);
  g_assert_true(g_file_set_contents(png, "not checked here", -1, NULL));
  g_assert_true(cohort_config_form_set_text(form, "train_data", cls));
  g_assert_true(cohort_config_form_set_text(form, "train_data", folder));
  g_assert_null(cohort_config_form_get_problem(form, "train_data"));
  gtk_window_destroy(GTK_WINDOW(win));
}

/* gpt2-124m names fineweb10B shards that are not there, and wants CUDA and NCCL: three reasons,
 * before any process starts. */
static void test_preset_without_data(void)
{
  CohortWindow *win = window_without_gpus();
  g_assert_true(cohort_window_load_preset(win, "gpt2-124m"));
  g_assert_false(cohort_window_can_start(win));
  CohortConfigForm *form = cohort_window_get_form(win);
  g_assert_nonnull(cohort_config_form_get_problem(form, "train_data"));
  g_assert_nonnull(cohort_config_form_get_problem(form, "val_data"));
  const char *status = cohort_window_get_status(win);
  g_test_message("status: %s", status);
  /* In a build without NCCL the backend is refused outright; with it, the missing GPU is the
   * problem. Either way the status names the first field by its label. */
  g_assert_true(g_str_has_prefix(status, "Cannot start") ||
                g_str_has_prefix(status, "1 setting is not valid"));
  g_assert_true(strstr(status, "Training data: ") != NULL ||
                strstr(status, "Communication backend: ") != NULL);
  g_autoptr(GError) error = NULL;
  g_assert_false(cohort_window_start(win, &error));
  g_assert_true(page_marked(win, "data"));
  gtk_window_destroy(GTK_WINDOW(win));
}

/* A file with `text` at `dir`/`name`, folders made on the way. */
static void put_file(const char *dir, const char *name, const char *text)
{
  g_autofree char *path = g_build_filename(dir, name, NULL);
  g_autofree char *parent = g_path_get_dirname(path);
  g_assert_cmpint(g_mkdir_with_parents(parent, 0755), ==, 0);
  g_assert_true(g_file_set_contents(path, text, -1, NULL));
}

/* The path keys come from the key table, so each is checked: a VAE or a PEFT adapter that is
 * not there (or a folder without what the engine reads first) is a problem on that field and
 * keeps Start off; mending it, or a key out of effect (adapter_from without LoRA), gives Start
 * back. */
static void test_path_keys(void)
{
  CohortWindow *win = window_without_gpus();
  CohortConfigForm *form = cohort_window_get_form(win);
  g_assert_true(cohort_window_load_preset(win, "tiny-dit"));
  g_assert_true(cohort_window_can_start(win));

  g_autofree char *no_vae = g_build_filename(tmp_dir, "no-such-vae", NULL);
  g_assert_true(cohort_config_form_set_text(form, "vae_from", no_vae));
  g_autofree char *want = g_strdup_printf("VAE for latent training: “%s” does not exist", no_vae);
  g_assert_cmpstr(cohort_config_form_get_problem(form, "vae_from"), ==, want);
  g_assert_false(cohort_window_can_start(win));
  g_assert_true(page_marked(win, "data"));
  g_autofree char *status = g_strdup_printf("Cannot start: %s", want);
  g_assert_cmpstr(cohort_window_get_status(win), ==, status);
  /* A folder, but no VAE in it nor in a pipeline's vae/. */
  g_autofree char *vae = g_build_filename(tmp_dir, "pipeline", NULL);
  g_assert_cmpint(g_mkdir_with_parents(vae, 0755), ==, 0);
  g_assert_true(cohort_config_form_set_text(form, "vae_from", vae));
  g_autofree char *lacks = g_strdup_printf(
      "VAE for latent training: the folder “%s” has no config.json or vae/config.json", vae);
  g_assert_cmpstr(cohort_config_form_get_problem(form, "vae_from"), ==, lacks);
  g_assert_false(cohort_window_can_start(win));
  put_file(vae, "vae/config.json", "{}");
  g_assert_true(cohort_config_form_set_text(form, "vae_from", ""));
  g_assert_true(cohort_config_form_set_text(form, "vae_from", vae));
  g_assert_null(cohort_config_form_get_problem(form, "vae_from"));
  g_assert_false(page_marked(win, "data"));
  g_assert_true(cohort_window_can_start(win));
  /* A built-in name is looked up in Cohort's data folder: the VAE the build trains is there,
   * another name is not. */
  g_autofree char *tiny = cohort_resolve_path("builtin:vae/tiny");
  if (g_file_test(tiny, G_FILE_TEST_IS_DIR)) {
    g_assert_true(cohort_config_form_set_text(form, "vae_from", "builtin:vae/tiny"));
    g_assert_null(cohort_config_form_get_problem(form, "vae_from"));
  }
  g_assert_true(cohort_config_form_set_text(form, "vae_from", "builtin:vae/no-such"));
  g_assert_cmpstr(cohort_config_form_get_problem(form, "vae_from"), ==,
                  "VAE for latent training: “builtin:vae/no-such” does not exist");
  /* A file is not a VAE folder. */
  g_autofree char *file = g_build_filename(vae, "vae", "config.json", NULL);
  g_assert_true(cohort_config_form_set_text(form, "vae_from", file));
  g_assert_nonnull(strstr(cohort_config_form_get_problem(form, "vae_from"), "a folder is needed"));
  g_assert_true(cohort_config_form_set_text(form, "vae_from", ""));
  g_assert_true(cohort_window_can_start(win));

  /* adapter_from, read with finetune lora only. */
  g_assert_true(cohort_window_load_preset(win, "tiny-gpt"));
  g_assert_true(cohort_config_form_set_text(form, "finetune", "lora"));
  g_assert_true(cohort_window_can_start(win));
  g_autofree char *no_adapter = g_build_filename(tmp_dir, "no-such-adapter", NULL);
  g_assert_true(cohort_config_form_set_text(form, "adapter_from", no_adapter));
  g_autofree char *missing = g_strdup_printf("Start from adapter: “%s” does not exist", no_adapter);
  g_assert_cmpstr(cohort_config_form_get_problem(form, "adapter_from"), ==, missing);
  g_assert_false(cohort_window_can_start(win));
  g_assert_true(page_marked(win, "training"));
  g_autofree char *adapter = g_build_filename(tmp_dir, "adapter", NULL);
  put_file(adapter, "adapter_config.json", "{}");
  g_assert_true(cohort_config_form_set_text(form, "adapter_from", adapter));
  g_autofree char *half = g_strdup_printf(
      "Start from adapter: the folder “%s” has no adapter_model.safetensors", adapter);
  g_assert_cmpstr(cohort_config_form_get_problem(form, "adapter_from"), ==, half);
  /* The files made elsewhere (a file manager): the window looks again when it is back in
   * front, so no stale problem keeps Start off. */
  put_file(adapter, "adapter_model.safetensors", "x");
  g_assert_nonnull(cohort_config_form_get_problem(form, "adapter_from"));
  g_object_notify(G_OBJECT(win), "is-active");
  g_assert_null(cohort_config_form_get_problem(form, "adapter_from"));
  g_assert_true(cohort_window_can_start(win));
  /* Out of effect, it is not read: no problem, whatever it holds. */
  g_assert_true(cohort_config_form_set_text(form, "adapter_from", no_adapter));
  g_assert_false(cohort_window_can_start(win));
  g_assert_true(cohort_config_form_set_text(form, "finetune", "full"));
  g_assert_null(cohort_config_form_get_problem(form, "adapter_from"));
  g_assert_false(page_marked(win, "training"));
  g_assert_true(cohort_window_can_start(win));
  g_assert_true(cohort_config_form_set_text(form, "finetune", "lora"));
  g_assert_nonnull(cohort_config_form_get_problem(form, "adapter_from"));

  /* A tokenizer: "bytes" names no file, a folder must hold one. */
  g_assert_true(cohort_window_load_preset(win, "tiny-gpt"));
  g_assert_true(cohort_config_form_set_text(form, "tokenizer", adapter));
  g_assert_nonnull(strstr(cohort_config_form_get_problem(form, "tokenizer"),
                          "has no tokenizer.json or vocab.json + merges.txt"));
  g_assert_true(cohort_config_form_set_text(form, "tokenizer", "bytes"));
  g_assert_null(cohort_config_form_get_problem(form, "tokenizer"));
  g_assert_true(cohort_window_can_start(win));
  gtk_window_destroy(GTK_WINDOW(win));
}

/* Data named by a glob pattern (the readers take one when nothing has the path's own name) is
 * there when the pattern matches a file. */
static void test_data_pattern(void)
{
  g_autoptr(CohortConfig) cfg = cohort_config_new();
  g_autofree char *dir = g_build_filename(tmp_dir, "shards", NULL);
  g_autofree char *pattern = g_build_filename(dir, "train_*.bin", NULL);
  g_assert_true(cohort_config_set(cfg, "data_format", "tokens", "test", NULL));
  g_assert_true(cohort_config_set(cfg, "train_data", pattern, "test", NULL));
  g_assert_true(cohort_config_set(cfg, "val_data", "", "test", NULL));
  g_autoptr(GPtrArray) none = cohort_launch_check_paths(cfg);
  g_assert_cmpuint(none->len, ==, 1);
  g_assert_cmpstr(((CohortLaunchProblem *)g_ptr_array_index(none, 0))->key, ==, "train_data");
  put_file(dir, "train_000.bin", "xx");
  g_autoptr(GPtrArray) found = cohort_launch_check_paths(cfg);
  g_assert_cmpuint(found->len, ==, 0);
}

/* NCCL between several processes, or device cuda, without a GPU; the check itself, and the
 * window once detection has found none. */
static void test_nccl_without_gpu(void)
{
  g_autoptr(CohortConfig) cfg = cohort_config_new();
  g_assert_true(cohort_config_set(cfg, "enable_multi_gpu", "true", "test", NULL));
  g_assert_true(cohort_config_set(cfg, "distributed_backend", "nccl", "test", NULL));
  g_autoptr(GPtrArray) none = cohort_launch_check(cfg, 0);
  g_assert_cmpuint(none->len, ==, 1);
  CohortLaunchProblem *p = g_ptr_array_index(none, 0);
  g_assert_cmpstr(p->key, ==, "distributed_backend");
  g_assert_cmpstr(p->message, ==,
                  "Communication backend: NCCL needs NVIDIA GPUs and none was found on this "
                  "machine; choose Gloo");
  /* Not while detection runs, nor with a GPU. */
  g_autoptr(GPtrArray) unknown = cohort_launch_check(cfg, -1);
  g_assert_cmpuint(unknown->len, ==, 0);
  g_autoptr(GPtrArray) one = cohort_launch_check(cfg, 1);
  g_assert_cmpuint(one->len, ==, 0);
  g_assert_true(cohort_config_set(cfg, "device", "cuda", "test", NULL));
  g_autoptr(GPtrArray) cuda = cohort_launch_check(cfg, 0);
  g_assert_cmpuint(cuda->len, ==, 2);
  g_assert_cmpstr(((CohortLaunchProblem *)g_ptr_array_index(cuda, 0))->key, ==, "device");

  CohortWindow *win = window_without_gpus();
  CohortConfigForm *form = cohort_window_get_form(win);
  g_assert_true(cohort_config_form_set_text(form, "enable_multi_gpu", "true"));
  g_test_message("status: %s", cohort_window_get_status(win));
  g_assert_true(cohort_window_can_start(win));
  /* NCCL is refused by the form in builds without it, by the check in builds with it. */
  cohort_config_form_set_text(form, "distributed_backend", "nccl");
  g_assert_false(cohort_window_can_start(win));
  const char *why = cohort_config_form_get_error(form, "distributed_backend");
  if (why == NULL)
    why = cohort_config_form_get_problem(form, "distributed_backend");
  g_assert_nonnull(why);
  g_test_message("NCCL: %s", why);
  g_assert_nonnull(strstr(cohort_window_get_status(win), "NCCL"));
  g_assert_true(page_marked(win, "distributed"));
  g_assert_true(cohort_config_form_set_text(form, "distributed_backend", "gloo"));
  g_assert_true(cohort_window_can_start(win));
  g_assert_false(page_marked(win, "distributed"));
  gtk_window_destroy(GTK_WINDOW(win));
}

static gboolean has_label(GtkWidget *w, const char *text)
{
  if (GTK_IS_LABEL(w) && g_strcmp0(gtk_label_get_text(GTK_LABEL(w)), text) == 0)
    return TRUE;
  for (GtkWidget *c = gtk_widget_get_first_child(w); c != NULL; c = gtk_widget_get_next_sibling(c))
    if (has_label(c, text))
      return TRUE;
  return FALSE;
}

/* enable_multi_gpu's switch is named for what it does here: on a machine without a GPU (or
 * settings kept to the CPU) it starts several CPU processes, and its section says so; the
 * key keeps its name. In builds with the CUDA path and a GPU it trains on several GPUs. */
static void test_multi_process_label(void)
{
  CohortWindow *win = window_without_gpus();
  CohortConfigForm *form = cohort_window_get_form(win);
  g_assert_cmpstr(cohort_config_form_get_label(form, "enable_multi_gpu"), ==,
                  "Train on several processes");
  GtkWidget *page = cohort_window_get_dist_top(win);
  while (gtk_widget_get_parent(page) != NULL && !GTK_IS_SCROLLED_WINDOW(page))
    page = gtk_widget_get_parent(page);
  g_assert_true(has_label(page, "Processes"));
  g_assert_false(has_label(page, "GPUs"));
  g_assert_true(has_label(page, "enable_multi_gpu"));
  /* Where GPUs train (a CUDA build with one, device not cpu), the words come back. */
  cohort_key_labels_set_gpus(TRUE);
  cohort_config_form_relabel(form);
  g_assert_cmpstr(cohort_config_form_get_label(form, "enable_multi_gpu"), ==,
                  "Train on several GPUs");
  g_assert_true(has_label(page, "GPUs"));
  /* and the window names it for its machine (no GPU) again at the next change */
  g_assert_true(cohort_config_form_set_text(form, "batch_size", "12"));
  g_assert_cmpstr(cohort_config_form_get_label(form, "enable_multi_gpu"), ==,
                  "Train on several processes");
  g_assert_false(has_label(page, "GPUs"));
  gtk_window_destroy(GTK_WINDOW(win));
}

/* frozen_dtype bf16 with a key the engine would refuse it with: each conflict is a problem on
 * frozen_dtype, and the window keeps Start off until it is mended. */
static void test_frozen_dtype(void)
{
  g_autoptr(CohortConfig) cfg = cohort_config_new();
  const char *ok[] = {"finetune=lora", "precision=bf16", "frozen_dtype=bf16", NULL};
  g_assert_true(cohort_config_apply_assignments(cfg, ok, "test", NULL));
  g_autoptr(GPtrArray) none = cohort_launch_check(cfg, 0);
  g_assert_cmpuint(none->len, ==, 0);
  const char *const conflicts[][2] = {{"finetune", "full"},
                                      {"precision", "fp32"},
                                      {"zero_stage", "2"},
                                      {"ema_decay", "0.999"},
                                      {"student_init", "teacher_layers"},
                                      {"device", "cuda"}};
  for (guint i = 0; i < G_N_ELEMENTS(conflicts); i++) {
    g_autoptr(CohortConfig) c = cohort_config_copy(cfg);
    g_assert_true(cohort_config_set(c, conflicts[i][0], conflicts[i][1], "test", NULL));
    g_autoptr(GPtrArray) got = cohort_launch_check(c, 1);
    guint found = 0;
    for (guint k = 0; k < got->len; k++) {
      CohortLaunchProblem *p = g_ptr_array_index(got, k);
      if (g_str_equal(p->key, "frozen_dtype")) {
        found++;
        g_test_message("%s=%s: %s", conflicts[i][0], conflicts[i][1], p->message);
        g_assert_true(g_str_has_prefix(p->message, "Frozen base stored as: bf16 "));
      }
    }
    g_assert_cmpuint(found, ==, 1);
  }

  CohortWindow *win = window_without_gpus();
  CohortConfigForm *form = cohort_window_get_form(win);
  g_assert_true(cohort_config_form_set_text(form, "finetune", "lora"));
  g_assert_true(cohort_config_form_set_text(form, "frozen_dtype", "bf16"));
  g_assert_false(cohort_window_can_start(win));
  g_assert_nonnull(strstr(cohort_window_get_status(win), "bf16 precision"));
  g_assert_true(cohort_config_form_set_text(form, "precision", "bf16"));
  g_assert_true(cohort_window_can_start(win));
  gtk_window_destroy(GTK_WINDOW(win));
}

/* Typing text into a number field keeps the text, marks it invalid and keeps Start off: the
 * spin button does not replace it with a number of its own, not even when it loses focus. */
static void test_number_field_text(void)
{
  CohortWindow *win = cohort_window_new(NULL);
  CohortConfigForm *form = cohort_window_get_form(win);
  GtkWidget *spin = cohort_config_form_get_control(form, "batch_size");
  g_assert_true(GTK_IS_SPIN_BUTTON(spin));
  int before = cohort_config_form_get_config(form)->batch_size;

  gtk_editable_set_text(GTK_EDITABLE(spin), "xyz");
  g_assert_cmpstr(gtk_editable_get_text(GTK_EDITABLE(spin)), ==, "xyz");
  const char *err = cohort_config_form_get_error(form, "batch_size");
  g_assert_nonnull(err);
  g_test_message("error: %s", err);
  g_assert_cmpstr(err, ==,
                  "Batch size per process: “xyz” is not a whole number; allowed: 1 to 65536");
  g_assert_true(gtk_widget_has_css_class(spin, "error"));
  g_assert_false(cohort_window_can_start(win));
  g_assert_cmpint(cohort_config_form_get_config(form)->batch_size, ==, before);
  g_assert_true(page_marked(win, "training"));
  /* What focus-out and Enter do: the text stays, the error too. */
  gtk_spin_button_update(GTK_SPIN_BUTTON(spin));
  g_assert_cmpstr(gtk_editable_get_text(GTK_EDITABLE(spin)), ==, "xyz");
  g_assert_nonnull(cohort_config_form_get_error(form, "batch_size"));
  g_assert_cmpint(cohort_config_form_get_config(form)->batch_size, ==, before);

  /* Out of range likewise (0 used to become the minimum, 1). */
  gtk_editable_set_text(GTK_EDITABLE(spin), "0");
  gtk_spin_button_update(GTK_SPIN_BUTTON(spin));
  g_assert_cmpstr(gtk_editable_get_text(GTK_EDITABLE(spin)), ==, "0");
  g_assert_cmpstr(cohort_config_form_get_error(form, "batch_size"), ==,
                  "Batch size per process: 0 is not allowed; allowed: 1 to 65536");

  /* A number typed in is taken, and the arrows work from it. */
  gtk_editable_set_text(GTK_EDITABLE(spin), "24");
  gtk_spin_button_update(GTK_SPIN_BUTTON(spin));
  g_assert_null(cohort_config_form_get_error(form, "batch_size"));
  g_assert_cmpint(cohort_config_form_get_config(form)->batch_size, ==, 24);
  gtk_spin_button_spin(GTK_SPIN_BUTTON(spin), GTK_SPIN_STEP_FORWARD, 1);
  g_assert_cmpint(cohort_config_form_get_config(form)->batch_size, ==, 25);
  g_assert_cmpstr(gtk_editable_get_text(GTK_EDITABLE(spin)), ==, "25");
  g_assert_true(cohort_window_can_start(win));
  g_assert_false(page_marked(win, "training"));
  gtk_window_destroy(GTK_WINDOW(win));
}

/* Cross-key refusals in the window's words, naming both fields by label. */
static void test_messages_name_labels(void)
{
  g_autoptr(CohortConfigForm) form = cohort_config_form_new();
  g_assert_true(cohort_config_form_set_text(form, "n_embd", "256"));
  g_assert_false(cohort_config_form_set_text(form, "n_head", "3"));
  g_assert_cmpstr(cohort_config_form_get_error(form, "n_head"), ==,
                  "Attention heads: the embedding width (256) must be a multiple of the "
                  "attention heads (3)");
  g_assert_false(cohort_config_form_set_text(form, "learning_rate", "fast"));
  g_assert_cmpstr(cohort_config_form_get_error(form, "learning_rate"), ==,
                  "Learning rate: “fast” is not a number; allowed: a number above 0 and at most "
                  "10");
}

/* Every path key of the key table gets a button that opens a file chooser (data, tokenizer,
 * VAE, teacher, adapter, initial weights, workspace): a folder for folder keys, for image
 * data, and for a GPT's initial weights (a Hugging Face folder; other families start from a
 * file). */
static void test_path_choosers(void)
{
  g_autoptr(CohortConfigForm) form = cohort_config_form_new();
  g_assert_cmpint(cohort_path_chooser_action(cohort_config_form_get_chooser(form, "init_from")), ==,
                  GTK_FILE_CHOOSER_ACTION_SELECT_FOLDER);
  const char *files[] = {"train_data", "val_data"};
  for (guint i = 0; i < G_N_ELEMENTS(files); i++) {
    GtkWidget *b = cohort_config_form_get_chooser(form, files[i]);
    g_assert_nonnull(b);
    g_assert_cmpint(cohort_path_chooser_action(b), ==, GTK_FILE_CHOOSER_ACTION_OPEN);
  }
  GtkWidget *ws = cohort_config_form_get_chooser(form, "workspace_dir");
  g_assert_cmpint(cohort_path_chooser_action(ws), ==, GTK_FILE_CHOOSER_ACTION_SELECT_FOLDER);
  /* A chooser for every key the table calls a path, and for no other; a text key whose
   * allowed values speak of a path, a file or a folder must be one. */
  guint n = 0;
  const CohortConfigKey *keys = cohort_config_keys(&n);
  for (guint i = 0; i < n; i++) {
    gboolean speaks = keys[i].type == COHORT_KEY_STRING &&
                      (strstr(keys[i].allowed, "path") || strstr(keys[i].allowed, "folder") ||
                       strstr(keys[i].allowed, "file"));
    if (speaks != (keys[i].path != NULL))
      g_error("key %s: allowed \"%s\", but %s path kind", keys[i].name, keys[i].allowed,
              keys[i].path ? "a" : "no");
    g_assert_true((cohort_config_form_get_chooser(form, keys[i].name) != NULL) ==
                  (keys[i].path != NULL));
  }
  const char *folders[] = {"teacher_from", "vae_from", "adapter_from", "tokenizer"};
  for (guint i = 0; i < G_N_ELEMENTS(folders); i++)
    g_assert_cmpint(cohort_path_chooser_action(cohort_config_form_get_chooser(form, folders[i])),
                    ==, GTK_FILE_CHOOSER_ACTION_SELECT_FOLDER);
  g_assert_null(cohort_config_form_get_chooser(form, "sample_prompt"));
  g_assert_true(cohort_config_form_set_text(form, "model", "dit"));
  g_assert_true(cohort_config_form_set_text(form, "data_format", "images"));
  g_assert_cmpint(cohort_path_chooser_action(cohort_config_form_get_chooser(form, "train_data")),
                  ==, GTK_FILE_CHOOSER_ACTION_SELECT_FOLDER);
  g_assert_cmpint(cohort_path_chooser_action(cohort_config_form_get_chooser(form, "init_from")), ==,
                  GTK_FILE_CHOOSER_ACTION_OPEN);
  /* A chosen path inside the current folder is written relative to it, as presets are. */
  g_autofree char *cwd = g_get_current_dir();
  g_autofree char *inside = g_build_filename(cwd, "runs", "x", NULL);
  g_autofree char *shown = cohort_path_chooser_shown_path(inside);
  g_assert_cmpstr(shown, ==, "runs/x");
  g_autofree char *outside = cohort_path_chooser_shown_path("/etc/hosts");
  g_assert_cmpstr(outside, ==, "/etc/hosts");
}

int main(int argc, char **argv)
{
  tmp_dir = ui_test_init(&argc, &argv);
  g_test_add_func("/ui/checks/missing-data", test_missing_data);
  g_test_add_func("/ui/checks/preset-without-data", test_preset_without_data);
  g_test_add_func("/ui/checks/path-keys", test_path_keys);
  g_test_add_func("/ui/checks/data-pattern", test_data_pattern);
  g_test_add_func("/ui/checks/nccl-without-gpu", test_nccl_without_gpu);
  g_test_add_func("/ui/checks/frozen-dtype", test_frozen_dtype);
  g_test_add_func("/ui/checks/multi-process-label", test_multi_process_label);
  g_test_add_func("/ui/checks/number-field-text", test_number_field_text);
  g_test_add_func("/ui/checks/messages-name-labels", test_messages_name_labels);
  g_test_add_func("/ui/checks/path-choosers", test_path_choosers);
  int rc = g_test_run();
  ui_test_rmtree(tmp_dir);
  return rc;
}

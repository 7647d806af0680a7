/* ui-states STATE [WORKSPACE]: opens the window in one of the states scripts/screenshots
 * photographs, states that take clicks to reach (a dialog, a menu, a popover, a live run), and
 * keeps it open until killed. Not installed; a tool of the screenshot script.
 *   resume     Start pressed in WORKSPACE, which holds a run: the question
 *   history    the Run page with WORKSPACE's last run, every earlier run compared, History open
 *   narrow     the Run page at 800×600 showing WORKSPACE's last run
 *   menu       the main menu open
 *   invalid    "xyz" typed into the batch size, and a training data path that does not exist
 *   live       a real run in WORKSPACE, Sample now pressed and answered
 *   probe      the Distributed page after Test connection on 2 processes of a small model
 *   about      the About window
 *   shortcuts  the Keyboard Shortcuts window
 *   tokenizer  the gpt2-finetune preset with init_from WORKSPACE (a Hugging Face GPT-2 folder):
 *              the Data page, the tokenizer found
 *   finetune   LoRA on c_attn and c_fc with ln_f trainable: the Training page's Fine-tuning
 *              section with what the patterns match, and the summary's parameters that learn
 *   adapter    LoRA from a PEFT adapter folder WORKSPACE that lacks its weights: the problem on
 *              adapter_from, Start off
 *   stopped    the Run page with WORKSPACE's last run, one that was stopped
 *   nofit      the Distributed page with a model whose 2 processes do not fit this machine */
#include <glib/gi18n.h>

#include "ui/app.h"
#include "ui/config-form-private.h"
#include "ui/history-popover.h"
#include "ui/probe-view.h"
#include "ui/run-page-private.h"
#include "ui/window-private.h"

static CohortWindow *win;

static void replay_workspace(const char *ws)
{
  g_autofree char *events = g_build_filename(ws, "events.jsonl", NULL);
  cohort_window_replay(win, events);
  cohort_window_show_page(win, "run");
}

/* Once the replay has shown the whole run. */
static gboolean open_history(gpointer data)
{
  (void)data;
  if (cohort_run_get_summary(cohort_window_get_run(win)) == NULL)
    return G_SOURCE_CONTINUE;
  CohortRunPage *page = cohort_window_get_run_page(win);
  CohortHistoryPopover *history = cohort_run_page_get_history(page);
  GPtrArray *runs = cohort_history_popover_get_runs(history);
  for (guint i = 0; runs != NULL && i + 1 < runs->len; i++)
    cohort_history_popover_compare(history, ((CohortPastRun *)g_ptr_array_index(runs, i))->id,
                                   TRUE);
  gtk_popover_popup(GTK_POPOVER(history));
  return G_SOURCE_REMOVE;
}

static gboolean open_menu(gpointer data)
{
  (void)data;
  gtk_menu_button_popup(GTK_MENU_BUTTON(win->main_menu_button));
  return G_SOURCE_REMOVE;
}

/* The latent preset's VAE row: focused, so the Data page scrolls to it. */
static gboolean focus_vae(gpointer data)
{
  (void)data;
  gtk_widget_grab_focus(cohort_config_form_get_control(cohort_window_get_form(win), "vae_from"));
  return G_SOURCE_REMOVE;
}

/* The last fine-tuning key focused, so the Training page scrolls to show the section. */
static gboolean focus_targets(gpointer data)
{
  (void)data;
  gtk_widget_grab_focus(
      cohort_config_form_get_control(cohort_window_get_form(win), "merge_adapter"));
  return G_SOURCE_REMOVE;
}

/* The adapter's row focused, so the Training page scrolls to it. */
static gboolean focus_adapter(gpointer data)
{
  (void)data;
  gtk_widget_grab_focus(
      cohort_config_form_get_control(cohort_window_get_form(win), "adapter_from"));
  return G_SOURCE_REMOVE;
}

/* Late enough that the run has a curve, early enough that the toast still shows. */
static gboolean press_sample_now(gpointer data)
{
  (void)data;
  g_action_group_activate_action(G_ACTION_GROUP(win), "sample-now", NULL);
  return G_SOURCE_REMOVE;
}

static void set(const char *key, const char *value)
{
  cohort_config_form_set_text(cohort_window_get_form(win), key, value);
}

/* The live run's small model: steps are quick and a sample comes back at once. */
static void small_model(const char *ws)
{
  const char *sets[][2] = {
      {"workspace_dir", ws},
      {"n_layer", "2"},
      {"n_embd", "64"},
      {"n_head", "4"},
      {"seq_len", "32"},
      {"batch_size", "8"},
      {"max_steps", "5000"},
      {"warmup_steps", "10"},
      {"eval_every", "100"},
      {"sample_every", "0"},
      {"save_every", "0"},
      {"threads", "1"},
      {"device", "cpu"},
      {"sample_tokens", "60"},
      {"enable_multi_gpu", "true"},
      {"nproc_per_node", "2"},
      {"distributed_backend", "gloo"},
  };
  for (guint i = 0; i < G_N_ELEMENTS(sets); i++)
    set(sets[i][0], sets[i][1]);
}

static gboolean setup(const char *state, const char *ws)
{
  g_autoptr(GError) error = NULL;
  if (g_str_equal(state, "resume")) {
    set("workspace_dir", ws);
    return cohort_window_start(win, &error) && cohort_window_get_question(win) != NULL;
  }
  if (g_str_equal(state, "history")) {
    set("workspace_dir", ws);
    replay_workspace(ws);
    cohort_history_popover_reload(cohort_run_page_get_history(cohort_window_get_run_page(win)),
                                  NULL);
    g_timeout_add(200, open_history, NULL);
  } else if (g_str_equal(state, "narrow")) {
    gtk_window_set_default_size(GTK_WINDOW(win), 800, 600);
    set("workspace_dir", ws);
    replay_workspace(ws);
  } else if (g_str_equal(state, "menu")) {
    g_timeout_add(1000, open_menu, NULL);
  } else if (g_str_equal(state, "invalid")) {
    set("train_data", "data/fineweb10B/train");
    gtk_editable_set_text(
        GTK_EDITABLE(cohort_config_form_get_control(cohort_window_get_form(win), "batch_size")),
        "xyz");
    cohort_window_show_page(win, "training");
  } else if (g_str_equal(state, "live")) {
    small_model(ws);
    if (!cohort_window_start(win, &error))
      return FALSE;
    g_timeout_add_seconds(7, press_sample_now, NULL);
  } else if (g_str_equal(state, "probe")) {
    small_model(ws);
    cohort_window_show_page(win, "distributed");
    cohort_probe_view_start(COHORT_PROBE_VIEW(cohort_window_get_probe_view(win)));
  } else if (g_str_equal(state, "latent")) {
    if (!cohort_window_load_preset(win, "tiny-latent-dit"))
      return FALSE;
    cohort_window_show_page(win, "data");
    g_timeout_add(500, focus_vae, NULL);
  } else if (g_str_equal(state, "about")) {
    g_action_group_activate_action(G_ACTION_GROUP(win), "about", NULL);
  } else if (g_str_equal(state, "shortcuts")) {
    g_action_group_activate_action(G_ACTION_GROUP(win), "show-help-overlay", NULL);
  } else if (g_str_equal(state, "finetune")) {
    set("finetune", "lora");
    set("lora_targets", "c_attn, c_fc");
    set("trainable", "ln_f");
    cohort_window_show_page(win, "training");
    g_timeout_add(500, focus_targets, NULL);
  } else if (g_str_equal(state, "adapter")) {
    set("finetune", "lora");
    set("adapter_from", ws);
    cohort_window_show_page(win, "training");
    g_timeout_add(500, focus_adapter, NULL);
  } else if (g_str_equal(state, "nofit")) {
    const char *sets[][2] = {{"device", "cpu"},       {"enable_multi_gpu", "true"},
                             {"nproc_per_node", "2"}, {"n_layer", "64"},
                             {"n_embd", "8192"},      {"n_head", "32"}};
    for (guint i = 0; i < G_N_ELEMENTS(sets); i++)
      set(sets[i][0], sets[i][1]);
    cohort_window_show_page(win, "distributed");
  } else if (g_str_equal(state, "stopped")) {
    set("workspace_dir", ws);
    replay_workspace(ws);
  } else if (g_str_equal(state, "tokenizer")) {
    if (!cohort_window_load_preset(win, "gpt2-finetune"))
      return FALSE;
    set("init_from", ws);
    cohort_window_show_page(win, "data");
  } else {
    return FALSE;
  }
  return TRUE;
}

int main(int argc, char **argv)
{
  cohort_app_init_i18n();
  gtk_init();
  cohort_app_load_css();
  if (argc < 2) {
    g_printerr("usage: ui-states STATE [WORKSPACE]\n");
    return 2;
  }
  const char *ws = argc > 2 ? argv[2] : "runs/screenshots";
  /* The application, for its actions, shortcuts and icon, but not its own window. */
  g_autoptr(GtkApplication) app = cohort_app_new();
  g_application_set_flags(G_APPLICATION(app), G_APPLICATION_NON_UNIQUE);
  g_autoptr(GError) error = NULL;
  if (!g_application_register(G_APPLICATION(app), NULL, &error)) {
    g_printerr("ui-states: %s\n", error->message);
    return 1;
  }
  win = cohort_window_new(app);
  g_assert_true(cohort_window_load_preset(win, "tiny-gpt"));
  gtk_window_present(GTK_WINDOW(win));
  if (!setup(argv[1], ws)) {
    g_printerr("ui-states: cannot show state %s\n", argv[1]);
    return 1;
  }
  GMainLoop *loop = g_main_loop_new(NULL, FALSE);
  g_main_loop_run(loop);
  return 0;
}

/* The window and text through a tokenizer: the init_from and tokenizer choosers pick folders
 * (a Hugging Face GPT-2 folder), the tokenizer row says which tokenizer the config uses and
 * where it was found, a text folder of .jsonl files is data, and the run page shows the
 * tokenize events ("Tokenizing train_data: 12.3 MB of 80.0 MB"). */
#include "tests/ui/ui-test.h"
#include "ui/config-form-private.h"
#include "ui/path-chooser.h"
#include "ui/run-page-private.h"
#include "ui/window-private.h"

static char *tmp_dir;

static char *make_folder(const char *name, const char *const *files)
{
  char *dir = g_build_filename(tmp_dir, name, NULL);
  g_assert_cmpint(g_mkdir_with_parents(dir, 0755), ==, 0);
  for (guint i = 0; files[i]; i++) {
    g_autofree char *path = g_build_filename(dir, files[i], NULL);
    g_assert_true(g_file_set_contents(path, "{}", -1, NULL));
  }
  return dir;
}

static void test_tokenizer_row(void)
{
  CohortWindow *win = cohort_window_new(NULL);
  g_assert_true(cohort_window_load_preset(win, "gpt2-finetune"));
  CohortConfigForm *form = cohort_window_get_form(win);
  const char *hint = cohort_config_form_get_hint(form, "tokenizer");
  g_test_message("preset: %s", hint);
  g_assert_cmpstr(hint, ==,
                  "Looks for a tokenizer in the initial weights' folder “gpt2”, which does not "
                  "exist");
  /* A Hugging Face folder, chosen as a folder. */
  GtkWidget *init = cohort_config_form_get_chooser(form, "init_from");
  g_assert_cmpint(cohort_path_chooser_action(init), ==, GTK_FILE_CHOOSER_ACTION_SELECT_FOLDER);
  g_assert_cmpint(cohort_path_chooser_action(cohort_config_form_get_chooser(form, "tokenizer")), ==,
                  GTK_FILE_CHOOSER_ACTION_SELECT_FOLDER);
  const char *hf_files[] = {"config.json", "model.safetensors", "vocab.json", "merges.txt", NULL};
  g_autofree char *hf = make_folder("gpt2-medium", hf_files);
  g_assert_true(cohort_config_form_set_text(form, "init_from", hf));
  g_assert_cmpstr(cohort_config_form_get_hint(form, "tokenizer"), ==,
                  "Found vocab.json + merges.txt in the initial weights' folder “gpt2-medium”");
  g_assert_null(cohort_config_form_get_problem(form, "init_from"));
  /* The tokenizer key wins over the folder's. */
  const char *tok_files[] = {"tokenizer.json", NULL};
  g_autofree char *tok = make_folder("my-tokenizer", tok_files);
  g_assert_true(cohort_config_form_set_text(form, "tokenizer", tok));
  g_assert_cmpstr(cohort_config_form_get_hint(form, "tokenizer"), ==,
                  "Found tokenizer.json in “my-tokenizer”");
  /* Without either, byte-level text (and vocab_size must be 256 again). */
  g_assert_true(cohort_config_form_set_text(form, "tokenizer", "bytes"));
  g_assert_true(cohort_config_form_set_text(form, "vocab_size", "256"));
  g_assert_true(cohort_config_form_set_text(form, "init_from", ""));
  g_assert_cmpstr(cohort_config_form_get_hint(form, "tokenizer"), ==,
                  "Text is read as bytes, one token each (no tokenizer)");
  /* A vocab_size for a tokenizer with none is refused, saying what would allow it. */
  cohort_config_form_set_text(form, "vocab_size", "50257");
  const char *err = cohort_config_form_get_error(form, "vocab_size");
  g_assert_nonnull(err);
  g_test_message("vocab_size: %s", err);
  g_assert_nonnull(strstr(err, "tokenizer"));
  g_assert_true(cohort_config_form_set_text(form, "vocab_size", "256"));
  /* Token shards need no tokenizer: no line. */
  g_assert_true(cohort_config_form_set_text(form, "data_format", "tokens"));
  g_assert_null(cohort_config_form_get_hint(form, "tokenizer"));
  /* Other families start from a Cohort export file. */
  g_assert_true(cohort_config_form_set_text(form, "model", "dit"));
  g_assert_cmpint(cohort_path_chooser_action(init), ==, GTK_FILE_CHOOSER_ACTION_OPEN);
  gtk_window_destroy(GTK_WINDOW(win));
}

/* A folder of .jsonl documents is text data. */
static void test_jsonl_folder(void)
{
  CohortWindow *win = cohort_window_new(NULL);
  g_assert_true(cohort_window_load_preset(win, "tiny-gpt"));
  CohortConfigForm *form = cohort_window_get_form(win);
  const char *none[] = {NULL};
  g_autofree char *empty = make_folder("no-text", none);
  g_assert_true(cohort_config_form_set_text(form, "train_data", empty));
  g_assert_nonnull(
      strstr(cohort_config_form_get_problem(form, "train_data"), "holds no .txt or .jsonl files"));
  const char *jsonl[] = {"docs.jsonl", NULL};
  g_autofree char *docs = make_folder("jsonl-text", jsonl);
  g_assert_true(cohort_config_form_set_text(form, "train_data", docs));
  g_assert_null(cohort_config_form_get_problem(form, "train_data"));
  gtk_window_destroy(GTK_WINDOW(win));
}

static JsonObject *event(const char *json)
{
  g_autoptr(JsonNode) node = json_from_string(json, NULL);
  return json_object_ref(json_node_get_object(node));
}

static void test_tokenize_events(void)
{
  CohortWindow *win = cohort_window_new(NULL);
  CohortRunPage *page = cohort_window_get_run_page(win);
  g_autoptr(JsonObject) one = event(
      "{\"event\":\"tokenize\",\"time\":1,\"data\":\"train_data\",\"path\":\"notes\","
      "\"done_bytes\":12300000,\"total_bytes\":80000000,\"source_bytes\":80000000,\"ranks\":1,"
      "\"tokens\":3000000,\"documents\":12,\"mb_per_s\":20.5,\"eta_s\":3.3}");
  cohort_run_page_handle_event(page, one);
  g_assert_cmpstr(cohort_run_page_get_figure(page, "status"), ==,
                  "Tokenizing train_data: 12.3 MB of 80.0 MB");
  g_autoptr(JsonObject) two =
      event("{\"event\":\"tokenize\",\"time\":2,\"data\":\"val_data\",\"path\":\"notes\","
            "\"done_bytes\":1000000,\"total_bytes\":4000000,\"source_bytes\":8000000,\"ranks\":2,"
            "\"tokens\":3000,\"documents\":1,\"mb_per_s\":20.5}");
  cohort_run_page_handle_event(page, two);
  g_assert_cmpstr(cohort_run_page_get_figure(page, "status"), ==,
                  "Tokenizing val_data: 1.0 MB of 4.0 MB (rank 0's share of 8.0 MB)");
  gtk_window_destroy(GTK_WINDOW(win));
}

int main(int argc, char **argv)
{
  tmp_dir = ui_test_init(&argc, &argv);
  g_test_add_func("/ui/tokenizer/row", test_tokenizer_row);
  g_test_add_func("/ui/tokenizer/jsonl-folder", test_jsonl_folder);
  g_test_add_func("/ui/tokenizer/events", test_tokenize_events);
  int rc = g_test_run();
  ui_test_rmtree(tmp_dir);
  return rc;
}

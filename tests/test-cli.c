/* cohort-train end to end: learning on the default preset, stop and resume giving the same
 * numbers as an uninterrupted run, the progress protocol, --explain, and one-line errors. */
#include "cohort-build-config.h"
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <gio/gio.h>

#include "engine/models/gpt.h"
#include "test-util.h"
#include "train-run.h"

static int count_lines(const char *text)
{
  int n = 0;
  for (const char *c = text; *c; c++)
    n += *c == '\n';
  return n;
}

/* The default preset learns: a short run ends well under the loss of a byte-frequency
 * model of the same text (3.30 nats on the validation file; see data/sample/README.md). */
static void test_default_preset_learns(void)
{
#ifdef __SANITIZE_ADDRESS__
  /* 40 full-size steps are minutes under AddressSanitizer and check learning, not memory: the
   * same training code runs there in /cli/stop-and-resume and /cli/ema. */
  g_test_skip("learning is checked in the plain build (AddressSanitizer build)");
  return;
#endif
  g_autofree char *ws = tu_mkdtemp("learn");
  g_autofree char *events_path = g_build_filename(ws, "progress.jsonl", NULL);
  g_autoptr(GPtrArray) a = g_ptr_array_new_with_free_func(g_free);
  const char *sets[] = {"max_steps=40",   "warmup_steps=5", "eval_every=0", "eval_steps=8",
                        "sample_every=0", "save_every=0",   "threads=2",    NULL};
  for (guint i = 0; sets[i]; i++) {
    g_ptr_array_add(a, g_strdup("--set"));
    g_ptr_array_add(a, g_strdup(sets[i]));
  }
  g_ptr_array_add(a, g_strdup("--set"));
  g_ptr_array_add(a, g_strdup_printf("workspace_dir=%s", ws));
  RunResult r = run_train(a, events_path);
  g_assert_cmpint(r.status, ==, 0);
  g_autoptr(GPtrArray) ev = tu_read_events(events_path);
  g_autoptr(GArray) val = tu_event_values(ev, "eval", "val_loss");
  g_assert_cmpuint(val->len, ==, 1);
  double v = g_array_index(val, double, 0);
  g_test_message("tiny-gpt after 40 steps: val loss %.4f (byte-frequency model: 3.30)", v);
  g_assert_cmpfloat(v, <, 2.9);
  run_result_clear(&r);
  tu_rm_rf(ws);
}

/* Every line is an event with a time; start first, done last; steps count up by one. */
static void check_protocol(GPtrArray *ev, const char *status)
{
  static const char *const known[] = {"start", "step", "eval",  "sample", "checkpoint",
                                      "ranks", "log",  "error", "done",   NULL};
  g_assert_cmpuint(ev->len, >=, 2);
  JsonObject *first = g_ptr_array_index(ev, 0), *last = NULL;
  g_assert_cmpstr(json_object_get_string_member(first, "event"), ==, "start");
  gint64 prev = -1;
  int n_done = 0;
  for (guint i = 0; i < ev->len; i++) {
    JsonObject *o = g_ptr_array_index(ev, i);
    const char *name = json_object_get_string_member(o, "event");
    g_assert_true(g_strv_contains(known, name));
    if (g_str_equal(name, "step")) {
      gint64 s = json_object_get_int_member(o, "step");
      if (prev >= 0)
        g_assert_cmpint(s, ==, prev + 1);
      prev = s;
      g_assert_true(json_object_has_member(o, "loss"));
      g_assert_true(json_object_has_member(o, "tokens_per_s"));
    }
    if (g_str_equal(name, "done")) {
      n_done++;
      last = o;
    }
  }
  g_assert_cmpint(n_done, ==, 1);
  g_assert_cmpstr(json_object_get_string_member(last, "status"), ==, status);
}

static GArray *step_losses_from(GPtrArray *ev, gint64 from_step)
{
  GArray *out = g_array_new(FALSE, FALSE, sizeof(double));
  for (guint i = 0; i < ev->len; i++) {
    JsonObject *o = g_ptr_array_index(ev, i);
    if (g_str_equal(json_object_get_string_member(o, "event"), "step") &&
        json_object_get_int_member(o, "step") >= from_step) {
      double l = json_object_get_double_member(o, "loss");
      g_array_append_val(out, l);
    }
  }
  return out;
}

/* SIGTERM mid-run saves a checkpoint, reports "stopped" and exits 143; --resume auto then finishes
 * with the same losses and bit-identical weights as a run that never stopped. */
static void test_stop_and_resume(void)
{
  g_autofree char *ws_a = tu_mkdtemp("full");
  g_autofree char *ws_b = tu_mkdtemp("stopped");
  g_autofree char *ev_a = g_build_filename(ws_a, "progress.jsonl", NULL);
  g_autofree char *ev_b1 = g_build_filename(ws_b, "events-1.jsonl", NULL);
  g_autofree char *ev_b2 = g_build_filename(ws_b, "events-2.jsonl", NULL);

  g_autoptr(GPtrArray) args_a = small_args(ws_a, NULL);
  RunResult ra = run_train(args_a, ev_a);
  g_assert_cmpint(ra.status, ==, 0);
  g_autoptr(GPtrArray) events_a = tu_read_events(ev_a);
  check_protocol(events_a, "completed");

  /* Stop the second run once it has made some steps. */
  g_autoptr(GPtrArray) args_b = small_args(ws_b, NULL);
  g_autoptr(GSubprocess) p = start_train(args_b, ev_b1);
  gint64 deadline = g_get_monotonic_time() + 120 * G_USEC_PER_SEC;
  for (;;) {
    g_autofree char *text = NULL;
    g_file_get_contents(ev_b1, &text, NULL, NULL);
    if (text && strstr(text, "\"step\":7,"))
      break;
    g_assert_cmpint(g_get_monotonic_time(), <, deadline);
    g_usleep(20000);
  }
  g_subprocess_send_signal(p, SIGTERM);
  RunResult rb1 = finish_train(p);
  /* Stopped, not completed: 128 + SIGTERM, after the checkpoint. */
  g_assert_cmpint(rb1.status, ==, 128 + SIGTERM);
  g_autoptr(GPtrArray) events_b1 = tu_read_events(ev_b1);
  check_protocol(events_b1, "stopped");
  g_autoptr(GArray) ck = tu_event_values(events_b1, "checkpoint", "step");
  g_assert_cmpuint(ck->len, ==, 1);
  gint64 stopped_at = (gint64)g_array_index(ck, double, 0);
  g_assert_cmpint(stopped_at, >=, 7);
  g_assert_cmpint(stopped_at, <, 120);

  const char *resume[] = {"--resume", "auto", NULL};
  g_autoptr(GPtrArray) args_b2 = small_args(ws_b, resume);
  RunResult rb2 = run_train(args_b2, ev_b2);
  g_assert_cmpint(rb2.status, ==, 0);
  g_autoptr(GPtrArray) events_b2 = tu_read_events(ev_b2);
  check_protocol(events_b2, "completed");
  JsonObject *start = g_ptr_array_index(events_b2, 0);
  g_assert_cmpint(json_object_get_int_member(start, "start_step"), ==, stopped_at);

  g_autoptr(GArray) la = step_losses_from(events_a, stopped_at + 1);
  g_autoptr(GArray) lb = step_losses_from(events_b2, stopped_at + 1);
  g_assert_cmpuint(la->len, ==, lb->len);
  for (guint i = 0; i < la->len; i++)
    g_assert_cmpfloat(g_array_index(la, double, i), ==, g_array_index(lb, double, i));

  g_autofree char *wa = g_build_filename(ws_a, "model.safetensors", NULL);
  g_autofree char *wb = g_build_filename(ws_b, "model.safetensors", NULL);
  g_autoptr(GArray) a = tu_read_weights(wa);
  g_autoptr(GArray) b = tu_read_weights(wb);
  g_assert_cmpuint(a->len, ==, b->len);
  g_assert_cmpint(memcmp(a->data, b->data, a->len * sizeof(float)), ==, 0);

  run_result_clear(&ra);
  run_result_clear(&rb1);
  run_result_clear(&rb2);
  tu_rm_rf(ws_a);
  tu_rm_rf(ws_b);
}

/* EMA weights: evaluated and sampled with, exported beside the raw weights, and the EMA of
 * the weight trajectory, so not the final raw weights. */
static void test_ema(void)
{
  g_autofree char *ws = tu_mkdtemp("ema");
  g_autofree char *ev_path = g_build_filename(ws, "progress.jsonl", NULL);
  const char *extra[] = {"--set", "ema_decay=0.5", "--set", "max_steps=12", NULL};
  g_autoptr(GPtrArray) args = small_args(ws, extra);
  RunResult r = run_train(args, ev_path);
  g_assert_cmpint(r.status, ==, 0);
  g_autoptr(GPtrArray) ev = tu_read_events(ev_path);
  guint evals = 0;
  for (guint i = 0; i < ev->len; i++) {
    JsonObject *o = g_ptr_array_index(ev, i);
    if (g_str_equal(json_object_get_string_member(o, "event"), "eval")) {
      g_assert_true(json_object_get_boolean_member(o, "ema"));
      evals++;
    }
  }
  g_assert_cmpuint(evals, >, 0);
  g_autofree char *raw_path = g_build_filename(ws, "model.safetensors", NULL);
  g_autofree char *ema_path = g_build_filename(ws, "model-ema.safetensors", NULL);
  g_autoptr(GArray) raw = tu_read_weights(raw_path);
  g_autoptr(GArray) ema = tu_read_weights(ema_path);
  g_assert_cmpuint(raw->len, ==, ema->len);
  g_assert_cmpfloat(tu_max_rel_diff(raw, ema, 1e-3), >, 1e-4);
  run_result_clear(&r);
  tu_rm_rf(ws);
}

/* The key cpu_matmul picks the library of the fp32 products, which the start log names; a
 * short run trains with each. With measure, the run times both libraries on each product shape,
 * says how many shapes went where, and leaves one line per shape in the measurement file. */
static void test_cpu_matmul(void)
{
  const char *libs[][2] = {
      {"openblas", "OpenBLAS sgemm"}, {"onednn", "oneDNN"}, {"measure", "per shape"}};
  for (guint k = 0; k < G_N_ELEMENTS(libs); k++) {
    if (k >= 1 && !COHORT_HAVE_ONEDNN)
      continue;
    g_autofree char *ws = tu_mkdtemp("matmul");
    g_autofree char *measured = g_build_filename(ws, "choices.tsv", NULL);
    g_setenv("COHORT_CPU_GEMM_CACHE", measured, TRUE);
    g_autofree char *ev_path = g_build_filename(ws, "progress.jsonl", NULL);
    g_autofree char *set = g_strdup_printf("cpu_matmul=%s", libs[k][0]);
    const char *extra[] = {"--set", set, "--set", "max_steps=2", NULL};
    g_autoptr(GPtrArray) args = small_args(ws, extra);
    RunResult r = run_train(args, ev_path);
    g_assert_cmpint(r.status, ==, 0);
    g_autoptr(GPtrArray) ev = tu_read_events(ev_path);
    gboolean named = FALSE, counted = FALSE;
    for (guint i = 0; i < ev->len; i++) {
      JsonObject *o = g_ptr_array_index(ev, i);
      const char *msg = json_object_get_string_member_with_default(o, "message", "");
      if (g_str_has_prefix(msg, "fp32 matrix products: ")) {
        g_test_message("%s: %s", set, msg);
        named = strstr(msg, libs[k][1]) != NULL;
      }
      if (g_str_has_prefix(msg, "fp32 matrix products measured per shape: ")) {
        g_test_message("%s", msg);
        counted = strstr(msg, "timed in this run") != NULL && strstr(msg, measured) != NULL;
      }
    }
    g_assert_true(named);
    g_assert_true(counted == (k == 2));
    if (k == 2) {
      g_autofree char *text = NULL;
      g_assert_true(g_file_get_contents(measured, &text, NULL, NULL));
      g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
      /* the header, a line per product shape timed three times on each library in the two
       * steps (the small GPT's products per layer), "" */
      g_assert_cmpint(g_strv_length(lines), >=, 3);
      for (guint l = 1; lines[l + 1]; l++)
        g_assert_true(strstr(lines[l], " openblas ") || strstr(lines[l], " onednn "));
    }
    g_unsetenv("COHORT_CPU_GEMM_CACHE");
    run_result_clear(&r);
    tu_rm_rf(ws);
  }
}

/* Runs cohort-train with `args` and expects a failure with a one-line message containing
 * every string of `needles`. */
static void expect_error(const char *const *args, const char *const *needles)
{
  g_autoptr(GPtrArray) a = g_ptr_array_new();
  for (guint i = 0; args[i]; i++)
    g_ptr_array_add(a, (gpointer)args[i]);
  RunResult r = run_train(a, NULL);
  g_test_message("stderr: %s", r.err);
  g_assert_cmpint(r.status, !=, 0);
  g_assert_cmpint(r.status, <, 128); /* an error, not a crash */
  g_assert_cmpint(count_lines(r.err), ==, 1);
  for (guint i = 0; needles[i]; i++)
    g_assert_nonnull(strstr(r.err, needles[i]));
  run_result_clear(&r);
}

/* device "cuda" where no GPU is usable (none on this machine, or hidden from the child with
 * CUDA_VISIBLE_DEVICES="" where there is one): one line naming the key, exit status 1. */
static void test_cuda_without_device(void)
{
  g_autofree char *ws = tu_mkdtemp("cuda-none");
  const char *extra[] = {"--set", "device=cuda", NULL};
  g_autoptr(GPtrArray) args = small_args(ws, extra);
  g_autofree char *old = g_strdup(g_getenv("CUDA_VISIBLE_DEVICES"));
  g_setenv("CUDA_VISIBLE_DEVICES", "", TRUE);
  RunResult r = run_train(args, NULL);
  if (old)
    g_setenv("CUDA_VISIBLE_DEVICES", old, TRUE);
  else
    g_unsetenv("CUDA_VISIBLE_DEVICES");
  g_test_message("stderr: %s", r.err);
  g_assert_cmpint(r.status, ==, 1);
  g_assert_cmpint(count_lines(r.err), ==, 1);
  g_assert_nonnull(strstr(r.err, "key \"device\""));
  g_assert_nonnull(strstr(r.err, "\"cuda\""));
  g_assert_nonnull(strstr(r.err, COHORT_HAVE_CUDA ? "no CUDA device is usable" : "no CUDA path"));
  run_result_clear(&r);
}

static void test_errors(void)
{
  g_autofree char *dir = tu_mkdtemp("errors");
  g_autofree char *bad_json = g_build_filename(dir, "bad.json", NULL);
  g_assert_true(g_file_set_contents(bad_json, "{\"version\": 1, \"n_layer\": ", -1, NULL));
  expect_error((const char *[]){"--config", bad_json, NULL},
               (const char *[]){bad_json, "JSON", NULL});

  g_autofree char *bad_value = g_build_filename(dir, "bad-value.json", NULL);
  g_assert_true(
      g_file_set_contents(bad_value, "{\"version\": 1, \"lr_schedule\": \"cosin\"}", -1, NULL));
  expect_error((const char *[]){"--config", bad_value, NULL},
               (const char *[]){bad_value, "lr_schedule", "cosin", "cosine", NULL});

  expect_error((const char *[]){"--set", "train_data=/nonexistent/cohort/train.txt", NULL},
               (const char *[]){"/nonexistent/cohort/train.txt", NULL});
  expect_error((const char *[]){"--set", "learnig_rate=0.1", NULL},
               (const char *[]){"learnig_rate", "learning_rate", NULL});
  expect_error((const char *[]){"--preset", "no-such-preset", NULL},
               (const char *[]){"no-such-preset", "tiny-gpt", NULL});
  expect_error((const char *[]){"--set", "device=cuda", NULL}, (const char *[]){"cuda", NULL});
  expect_error((const char *[]){"--set", "threads=1", "--resume", "/nonexistent/ckpt", NULL},
               (const char *[]){"/nonexistent/ckpt", NULL});

  /* A truncated checkpoint is refused with the file named. */
  g_autofree char *ws = g_build_filename(dir, "ws", NULL);
  const char *save[] = {"--set", "max_steps=4",  "--set", "warmup_steps=1",
                        "--set", "eval_every=0", "--set", "sample_every=0",
                        "--set", "keep_last=0",  NULL};
  g_autoptr(GPtrArray) args = small_args(ws, save);
  RunResult r = run_train(args, NULL);
  g_assert_cmpint(r.status, ==, 0);
  run_result_clear(&r);
  g_autofree char *ckpt = g_build_filename(ws, "checkpoints", "step-00000004", NULL);
  g_autofree char *weights = g_build_filename(ckpt, "model.safetensors", NULL);
  g_assert_true(g_file_test(weights, G_FILE_TEST_EXISTS));
  g_assert_cmpint(truncate(weights, 1000), ==, 0);
  g_autofree char *ws_set = g_strdup_printf("workspace_dir=%s", ws);
  expect_error((const char *[]){"--set", "n_layer=2", "--set", "n_head=2", "--set", "n_embd=32",
                                "--set", "seq_len=32", "--set", "batch_size=4", "--set",
                                "max_steps=8", "--set", "warmup_steps=1", "--set", ws_set,
                                "--resume", ckpt, NULL},
               (const char *[]){"model.safetensors", NULL});
  tu_rm_rf(dir);
}

static void test_explain(void)
{
  const char *args[] = {"--explain", "--nproc", "2", "--set", "lr_scaling=sqrt", NULL};
  g_autoptr(GPtrArray) a = g_ptr_array_new();
  for (guint i = 0; args[i]; i++)
    g_ptr_array_add(a, (gpointer)args[i]);
  RunResult r = run_train(a, NULL);
  g_assert_cmpint(r.status, ==, 0);
  g_autoptr(GError) error = NULL;
  g_autoptr(JsonNode) node = json_from_string(r.out, &error);
  g_assert_no_error(error);
  JsonObject *o = json_node_get_object(node);
  CohortGptShape shape = {4, 4, 256, 128, 256};
  g_autoptr(CohortGpt) gpt = cohort_gpt_new(&shape, 1, &error);
  g_assert_no_error(error);
  g_assert_cmpint(json_object_get_int_member(o, "params"), ==, cohort_gpt_num_params(gpt));
  g_assert_cmpint(json_object_get_int_member(o, "world_size"), ==, 2);
  g_assert_cmpint(json_object_get_int_member(o, "global_batch"), ==, 32);
  g_assert_cmpint(json_object_get_int_member(o, "tokens_per_step"), ==, 32 * 128);
  g_assert_cmpfloat_with_epsilon(json_object_get_double_member(o, "scaled_learning_rate"),
                                 0.002 * sqrt(2.0), 1e-12);
  JsonArray *first = json_object_get_array_member(o, "first_indices");
  g_assert_cmpuint(json_array_get_length(first), ==, 2);
  /* Interleaved: rank r reads positions r, r + world, … of one permutation, so the two
   * ranks never share an index. */
  JsonArray *i0 = json_object_get_array_member(json_array_get_object_element(first, 0), "indices");
  JsonArray *i1 = json_object_get_array_member(json_array_get_object_element(first, 1), "indices");
  g_assert_cmpuint(json_array_get_length(i0), ==, 8);
  for (guint i = 0; i < 8; i++)
    for (guint j = 0; j < 8; j++)
      g_assert_cmpint(json_array_get_int_element(i0, i), !=, json_array_get_int_element(i1, j));
  JsonObject *cfg = json_object_get_object_member(o, "config");
  g_assert_cmpstr(json_object_get_string_member(cfg, "lr_scaling"), ==, "sqrt");
  run_result_clear(&r);
}

/* Runs cohort-train with `args` under the locale `lc_all` (LOCPATH `locpath` when not NULL). */
static RunResult run_in_locale(const char *const *args, const char *lc_all, const char *locpath)
{
  g_autoptr(GSubprocessLauncher) l =
      g_subprocess_launcher_new(G_SUBPROCESS_FLAGS_STDOUT_PIPE | G_SUBPROCESS_FLAGS_STDERR_PIPE);
  g_subprocess_launcher_setenv(l, "LC_ALL", lc_all, TRUE);
  if (locpath)
    g_subprocess_launcher_setenv(l, "LOCPATH", locpath, TRUE);
  g_autoptr(GPtrArray) argv = g_ptr_array_new();
  g_ptr_array_add(argv, (gpointer)train_program());
  for (guint i = 0; args[i]; i++)
    g_ptr_array_add(argv, (gpointer)args[i]);
  g_ptr_array_add(argv, NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(GSubprocess) p =
      g_subprocess_launcher_spawnv(l, (const char *const *)argv->pdata, &error);
  g_assert_no_error(error);
  return finish_train(p);
}

/* A UTF-8 argument reaches the config under a UTF-8 locale (setlocale was never called, so
 * GLib took the C locale's ASCII and refused "Über"), numbers keep their C spelling under a
 * locale that writes 0,5 (de_DE, built with localedef when the system can), and a locale
 * that cannot hold the argument gets a hint, not only iconv's words. */
static void test_locale(void)
{
  const char *args[] = {"--explain",
                        "--set",
                        "sample_prompt=\xC3\x9C"
                        "ber",
                        "--set",
                        "learning_rate=0.5",
                        NULL};
  g_autofree char *dir = tu_mkdtemp("locale");
  g_autofree char *de_cmd = g_strdup_printf("localedef -i de_DE -f UTF-8 %s/de_DE.UTF-8", dir);
  int de_status = system(de_cmd);
  const char *locales[][2] = {{"C.UTF-8", NULL}, {"de_DE.UTF-8", dir}};
  for (guint i = 0; i < G_N_ELEMENTS(locales); i++) {
    if (i == 1 && de_status != 0) {
      g_test_message("localedef cannot build de_DE.UTF-8 here: that locale is not checked");
      continue;
    }
    RunResult r = run_in_locale(args, locales[i][0], locales[i][1]);
    g_test_message("%s: status %d, stderr %s", locales[i][0], r.status, r.err);
    g_assert_cmpint(r.status, ==, 0);
    g_autoptr(GError) error = NULL;
    g_autoptr(JsonNode) node = json_from_string(r.out, &error);
    g_assert_no_error(error);
    JsonObject *cfg = json_object_get_object_member(json_node_get_object(node), "config");
    g_assert_cmpstr(json_object_get_string_member(cfg, "sample_prompt"), ==,
                    "\xC3\x9C"
                    "ber");
    g_assert_cmpfloat(json_object_get_double_member(cfg, "learning_rate"), ==, 0.5);
    run_result_clear(&r);
  }
  RunResult c = run_in_locale(args, "C", NULL);
  g_assert_cmpint(c.status, ==, 2);
  g_assert_cmpint(count_lines(c.err), ==, 1);
  g_assert_nonnull(strstr(c.err, "use a UTF-8 locale, like LC_ALL=C.UTF-8"));
  run_result_clear(&c);
  tu_rm_rf(dir);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/cli/explain", test_explain);
  g_test_add_func("/cli/errors", test_errors);
  g_test_add_func("/cli/locale", test_locale);
  g_test_add_func("/cli/cuda-without-device", test_cuda_without_device);
  g_test_add_func("/cli/ema", test_ema);
  g_test_add_func("/cli/cpu-matmul", test_cpu_matmul);
  g_test_add_func("/cli/stop-and-resume", test_stop_and_resume);
  g_test_add_func("/cli/default-preset-learns", test_default_preset_learns);
  return g_test_run();
}

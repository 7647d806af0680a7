/* Running cohort-train (the program named by $COHORT_TRAIN) from end-to-end tests: a small
 * model on the sample text, progress events to a file. Header-only, tests only. */
#pragma once

#include <fcntl.h>
#include <gio/gio.h>
#include <glib.h>
#include <unistd.h>

static inline const char *train_program(void)
{
  const char *p = g_getenv("COHORT_TRAIN");
  g_assert_nonnull(p);
  return p;
}

/* A small model on the sample text: seconds per run. */
static const char *const small_sets[] = {
    "n_layer=2",        "n_head=2",       "n_embd=32",    "seq_len=32",   "batch_size=4",
    "max_steps=120",    "warmup_steps=4", "eval_every=8", "eval_steps=2", "sample_every=12",
    "sample_tokens=16", "save_every=0",   "threads=1",    NULL,
};

typedef struct {
  int status; /* exit code, or 128 + signal */
  char *out;
  char *err;
} RunResult;

static inline void run_result_clear(RunResult *r)
{
  g_free(r->out);
  g_free(r->err);
}

/* Starts cohort-train with `args`, progress events to `progress_path` (may be NULL). */
static inline GSubprocess *start_train(GPtrArray *args, const char *progress_path)
{
  g_autoptr(GSubprocessLauncher) l =
      g_subprocess_launcher_new(G_SUBPROCESS_FLAGS_STDOUT_PIPE | G_SUBPROCESS_FLAGS_STDERR_PIPE);
  g_autoptr(GPtrArray) argv = g_ptr_array_new();
  g_ptr_array_add(argv, (gpointer)train_program());
  if (progress_path) {
    int fd = open(progress_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    g_assert_cmpint(fd, >=, 0);
    g_subprocess_launcher_take_fd(l, fd, 3);
    g_ptr_array_add(argv, "--progress-fd");
    g_ptr_array_add(argv, "3");
  }
  for (guint i = 0; i < args->len; i++)
    g_ptr_array_add(argv, g_ptr_array_index(args, i));
  g_ptr_array_add(argv, NULL);
  g_autoptr(GError) error = NULL;
  GSubprocess *p = g_subprocess_launcher_spawnv(l, (const char *const *)argv->pdata, &error);
  g_assert_no_error(error);
  return p;
}

static inline RunResult finish_train(GSubprocess *p)
{
  RunResult r = {0};
  g_autoptr(GError) error = NULL;
  g_subprocess_communicate_utf8(p, NULL, NULL, &r.out, &r.err, &error);
  g_assert_no_error(error);
  if (g_subprocess_get_if_signaled(p))
    r.status = 128 + g_subprocess_get_term_sig(p);
  else
    r.status = g_subprocess_get_exit_status(p);
  return r;
}

static inline RunResult run_train(GPtrArray *args, const char *progress_path)
{
  g_autoptr(GSubprocess) p = start_train(args, progress_path);
  return finish_train(p);
}

/* args = the small config into `workspace` plus `extra` (NULL-terminated). */
static inline GPtrArray *small_args(const char *workspace, const char *const *extra)
{
  GPtrArray *a = g_ptr_array_new_with_free_func(g_free);
  for (guint i = 0; small_sets[i]; i++) {
    g_ptr_array_add(a, g_strdup("--set"));
    g_ptr_array_add(a, g_strdup(small_sets[i]));
  }
  g_ptr_array_add(a, g_strdup("--set"));
  g_ptr_array_add(a, g_strdup_printf("workspace_dir=%s", workspace));
  for (guint i = 0; extra && extra[i]; i++)
    g_ptr_array_add(a, g_strdup(extra[i]));
  return a;
}

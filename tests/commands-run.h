/* Running the commands `cohort-run --print-commands` prints, as a user pastes them into a shell
 * (header-only, tests only): a config file for a small run, the printed text, one launcher's
 * command out of it, and a shell that runs it with the build's programs on PATH. */
#pragma once

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <gio/gio.h>

#include "engine/config/config.h"
#include "test-util.h"

/* Small and quick, on the sample text. */
static const char *const cr_small[] = {
    "n_layer=2",
    "n_head=2",
    "n_embd=32",
    "seq_len=32",
    "warmup_steps=1",
    "eval_every=0",
    "eval_steps=2",
    "sample_every=0",
    "threads=1",
    "learning_rate=0.001",
    "max_steps=6",
    "enable_multi_gpu=true",
    NULL,
};

/* Writes the small config with `extra` ("key=value", NULL-ended) to DIR/run.json, with its
 * workspace DIR/ws; returns the file. */
static inline char *cr_write_config(const char *dir, const char *const *extra)
{
  g_autoptr(CohortConfig) cfg = cohort_config_new();
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_config_apply_assignments(cfg, cr_small, "test", &error));
  if (extra)
    g_assert_true(cohort_config_apply_assignments(cfg, extra, "test", &error));
  g_assert_no_error(error);
  g_free(cfg->workspace_dir);
  cfg->workspace_dir = g_build_filename(dir, "ws", NULL);
  /* The data as an absolute path: every node's process reads the same file. */
  g_free(cfg->train_data);
  cfg->train_data = cohort_resolve_path("builtin:sample/train.txt");
  g_free(cfg->val_data);
  cfg->val_data = g_strdup("");
  char *path = g_build_filename(dir, "run.json", NULL);
  g_assert_true(cohort_config_save_file(cfg, path, &error));
  return path;
}

/* What `cohort-run --print-commands --config PATH` prints. */
static inline char *cr_print(const char *config)
{
  const char *argv[] = {g_getenv("COHORT_RUN"), "--print-commands", "--config", config, NULL};
  g_assert_nonnull(argv[0]);
  g_autofree char *out = NULL, *err = NULL;
  int status = -1;
  g_autoptr(GError) error = NULL;
  g_assert_true(g_spawn_sync(NULL, (char **)argv, NULL, G_SPAWN_DEFAULT, NULL, NULL, &out, &err,
                             &status, &error));
  if (!g_spawn_check_wait_status(status, NULL))
    g_error("--print-commands failed: %s", err);
  return g_steal_pointer(&out);
}

/* The command (one or more lines) of `launcher` for `node` in the printed text: the lines of its
 * section that are not comments, the node's when the section has one per node. */
static inline char *cr_command(const char *text, const char *launcher, int node)
{
  g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
  g_autofree char *title = g_strdup_printf("# %s", launcher);
  gboolean in = FALSE;
  int at = -1;
  GString *cmd = g_string_new(NULL);
  for (guint i = 0; lines[i] != NULL; i++) {
    const char *l = lines[i];
    if (g_str_has_prefix(l, "# ") && (i == 0 || lines[i - 1][0] == '\0')) {
      in = g_str_has_prefix(l, title) && (l[strlen(title)] == ' ' || l[strlen(title)] == '\0');
      at = -1;
      continue;
    }
    if (!in)
      continue;
    if (g_str_has_prefix(l, "# node ")) {
      at = atoi(l + strlen("# node "));
      continue;
    }
    if (l[0] == '#' && cmd->len == 0)
      continue; /* the section's notes */
    if (l[0] == '\0')
      break;
    if (at < 0 || at == node)
      g_string_append_printf(cmd, "%s\n", l);
  }
  if (cmd->len == 0)
    g_error("no %s command for node %d in:\n%s", launcher, node, text);
  return g_string_free(cmd, FALSE);
}

/* A folder whose `torchrun` is Debian's with the -r 1 -t 1 that the printed note asks for
 * (Debian bookworm's PyTorch 1.13 on Python 3.11 does not start without them). */
static inline char *cr_torchrun_shim(const char *dir)
{
  g_autofree char *bin = g_build_filename(dir, "shim", NULL);
  g_mkdir_with_parents(bin, 0755);
  char *path = g_build_filename(bin, "torchrun", NULL);
  const char *text = "#!/bin/sh\nexec /usr/bin/torchrun -r 1 -t 1 \"$@\"\n";
  g_assert_true(g_file_set_contents(path, text, -1, NULL));
  g_assert_cmpint(chmod(path, 0755), ==, 0);
  g_free(path);
  return g_steal_pointer(&bin);
}

/* The environment a printed command runs in: the build's programs first on PATH (as an
 * installation puts them there), then `extra_path` (may be NULL). */
static inline char **cr_environ(const char *extra_path)
{
  g_autofree char *cli = g_path_get_dirname(g_getenv("COHORT_TRAIN"));
  g_autofree char *path = g_strdup_printf("%s%s%s:%s", cli, extra_path ? ":" : "",
                                          extra_path ? extra_path : "", g_getenv("PATH"));
  char **env = g_get_environ();
  env = g_environ_setenv(env, "PATH", path, TRUE);
  env = g_environ_setenv(env, "OMP_NUM_THREADS", "1", TRUE);
  /* mpirun refuses root without these (tests run as root in CI). */
  env = g_environ_setenv(env, "OMPI_ALLOW_RUN_AS_ROOT", "1", TRUE);
  env = g_environ_setenv(env, "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", TRUE);
  env = g_environ_unsetenv(env, "COHORT_JOB_TOKEN");
  return env;
}

static inline void cr_die_with_parent(gpointer data)
{
  (void)data;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  /* Its own process group, so a test can stop everything it started. */
  setpgid(0, 0);
}

/* Starts `prefix` (argv, NULL-ended, may be NULL) + `sh -c COMMAND` with `env`; stderr to a
 * pipe, stdout discarded. */
static inline GSubprocess *cr_start(const char *const *prefix, const char *command, char **env)
{
  g_autoptr(GSubprocessLauncher) l =
      g_subprocess_launcher_new(G_SUBPROCESS_FLAGS_STDOUT_SILENCE | G_SUBPROCESS_FLAGS_STDERR_PIPE);
  g_subprocess_launcher_set_environ(l, env);
  g_subprocess_launcher_set_child_setup(l, cr_die_with_parent, NULL, NULL);
  g_autoptr(GPtrArray) argv = g_ptr_array_new();
  for (guint i = 0; prefix && prefix[i]; i++)
    g_ptr_array_add(argv, (gpointer)prefix[i]);
  g_ptr_array_add(argv, "sh");
  g_ptr_array_add(argv, "-c");
  g_ptr_array_add(argv, (gpointer)command);
  g_ptr_array_add(argv, NULL);
  g_autoptr(GError) error = NULL;
  GSubprocess *p = g_subprocess_launcher_spawnv(l, (const char *const *)argv->pdata, &error);
  g_assert_no_error(error);
  return p;
}

/* Waits for `p`; returns its exit status (128 + signal) and its stderr in *err. */
static inline int cr_finish(GSubprocess *p, char **err)
{
  g_autoptr(GError) error = NULL;
  g_subprocess_communicate_utf8(p, NULL, NULL, NULL, err, &error);
  g_assert_no_error(error);
  return g_subprocess_get_if_signaled(p) ? 128 + g_subprocess_get_term_sig(p)
                                         : g_subprocess_get_exit_status(p);
}

/* The final weights a run left in DIR/ws. */
static inline GArray *cr_weights(const char *dir)
{
  g_autofree char *path = g_build_filename(dir, "ws", "model.safetensors", NULL);
  return tu_read_weights(path);
}

/* Largest |a - b|. */
static inline double cr_max_diff(GArray *a, GArray *b)
{
  g_assert_cmpuint(a->len, ==, b->len);
  double worst = 0;
  for (guint i = 0; i < a->len; i++)
    worst = MAX(worst, fabs((double)g_array_index(a, float, i) - g_array_index(b, float, i)));
  return worst;
}

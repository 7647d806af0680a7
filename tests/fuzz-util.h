/* The fuzz suite's common parts (header-only, tests only): a seeded generator, the expected
 * outcome of each case, the tally that names every failing input, byte mutations, and running
 * cohort-train with a time limit.
 *
 * Every case is generated from a fixed seed (COHORT_FUZZ_SEED overrides it), written to a
 * folder under the system's temporary folder, and judged against what its generator broke:
 * FUZZ_REFUSE must end in a clear one-line error naming the file, FUZZ_ACCEPT must be
 * accepted (with its values checked where the case knows them), FUZZ_EITHER (random noise,
 * whose meaning no generator can know) may do either but must still obey the rules of both.
 * A crash, a hang or a wrong accept fails the test and prints the input's path; the inputs
 * are then kept (also with COHORT_FUZZ_KEEP=1). */
#pragma once

#include <fcntl.h>
#include <gio/gio.h>
#include <glib.h>
#include <glib/gstdio.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef enum { FUZZ_ACCEPT, FUZZ_REFUSE, FUZZ_EITHER } FuzzExpect;

static inline const char *fuzz_expect_name(FuzzExpect e)
{
  return e == FUZZ_ACCEPT ? "accept" : e == FUZZ_REFUSE ? "refuse" : "either";
}

/* ---- the generator: splitmix64, the same sequence on every machine ---- */

typedef struct {
  guint64 state;
} FuzzRng;

static inline FuzzRng fuzz_rng_new(guint64 stream)
{
  const char *env = g_getenv("COHORT_FUZZ_SEED");
  guint64 seed = env ? g_ascii_strtoull(env, NULL, 10) : 20240520u;
  FuzzRng r = {seed * 0x9E3779B97F4A7C15ull + stream};
  return r;
}

static inline guint64 fuzz_next(FuzzRng *r)
{
  guint64 z = (r->state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Uniform in [0, n); n > 0. */
static inline gsize fuzz_below(FuzzRng *r, gsize n)
{
  return (gsize)(fuzz_next(r) % n);
}

/* A byte that is never valid anywhere in JSON text: a control character other than the four
 * whitespace ones, or a byte that never occurs in UTF-8. */
static inline guint8 fuzz_never_valid_byte(FuzzRng *r)
{
  static const guint8 bytes[] = {0x00, 0x01, 0x02, 0x07, 0x08, 0x0B, 0x0C, 0x0E,
                                 0x1B, 0x1F, 0xC0, 0xC1, 0xF5, 0xF8, 0xFE, 0xFF};
  return bytes[fuzz_below(r, sizeof bytes)];
}

/* ---- naming the input an in-process case crashed on ---- */

/* Set by the sanitizers' runtime when the program is built with them. */
extern void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

/* How much slower than a plain build this one runs: sanitizers cost several times. */
static inline double fuzz_time_scale(void)
{
  return __sanitizer_set_death_callback ? 4.0 : 1.0;
}

/* The case being read; printed when the process dies on it (signal or sanitizer report). */
static char fuzz_current[4096];

/* Seconds an in-process case may take before it counts as a hang (SIGALRM). */
#define FUZZ_CASE_LIMIT_S 20

/* Names the case about to be read ("" when none) and arms the hang watchdog. */
static inline void fuzz_set_current(const char *path)
{
  g_strlcpy(fuzz_current, path, sizeof fuzz_current);
  alarm(*path ? (unsigned)(FUZZ_CASE_LIMIT_S * fuzz_time_scale()) : 0);
}

static inline void fuzz_say_current(void)
{
  static const char intro[] = "\nfuzz: crashed or hung on input ";
  if (fuzz_current[0] == '\0')
    return;
  if (write(2, intro, sizeof intro - 1) < 0 || write(2, fuzz_current, strlen(fuzz_current)) < 0 ||
      write(2, "\n", 1) < 0)
    return;
}

static inline void fuzz_on_crash(int sig)
{
  fuzz_say_current();
  signal(sig, SIG_DFL);
  raise(sig);
}

static inline void fuzz_watch_crashes(void)
{
  /* Its own stack: the crash to report may be a stack overflow. */
  static char alt[1 << 16];
  stack_t ss = {.ss_sp = alt, .ss_size = sizeof alt};
  sigaltstack(&ss, NULL);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = fuzz_on_crash;
  sa.sa_flags = SA_ONSTACK;
  int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGALRM};
  for (guint i = 0; i < G_N_ELEMENTS(sigs); i++)
    sigaction(sigs[i], &sa, NULL);
  if (__sanitizer_set_death_callback)
    __sanitizer_set_death_callback(fuzz_say_current);
}

/* ---- the tally ---- */

typedef struct {
  char *dir; /* the cases of this run */
  guint cases, accepted, refused, failures;
  GString *summary; /* one line per failure */
} FuzzTally;

static inline void fuzz_tally_init(FuzzTally *t, const char *name)
{
  memset(t, 0, sizeof *t);
  g_autoptr(GError) error = NULL;
  g_autofree char *tmpl = g_strdup_printf("cohort-fuzz-%s-XXXXXX", name);
  t->dir = g_dir_make_tmp(tmpl, &error);
  g_assert_no_error(error);
  t->summary = g_string_new(NULL);
}

static inline void fuzz_rm_rf(const char *path)
{
  g_autofree char *quoted = g_shell_quote(path);
  g_autofree char *cmd = g_strdup_printf("rm -rf %s", quoted);
  g_assert_cmpint(system(cmd), ==, 0);
}

/* Records a failure of the case at `path`; the message says what went wrong. */
static inline void fuzz_fail(FuzzTally *t, const char *path, const char *fmt, ...)
    G_GNUC_PRINTF(3, 4);

static inline void fuzz_fail(FuzzTally *t, const char *path, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  g_autofree char *msg = g_strdup_vprintf(fmt, ap);
  va_end(ap);
  t->failures++;
  g_string_append_printf(t->summary, "FAIL %s: %s\n", path, msg);
  g_printerr("FAIL %s: %s\n", path, msg);
}

/* Ends the run: passes when no case failed; the cases are removed unless something failed
 * or COHORT_FUZZ_KEEP is set. `min_cases` is the least the suite promises to run. */
static inline void fuzz_tally_finish(FuzzTally *t, guint min_cases)
{
  g_test_message("%u cases: %u accepted, %u refused, %u failed", t->cases, t->accepted, t->refused,
                 t->failures);
  gboolean keep = t->failures > 0 || g_getenv("COHORT_FUZZ_KEEP") != NULL;
  if (keep)
    g_test_message("the inputs are kept in %s", t->dir);
  else
    fuzz_rm_rf(t->dir);
  if (t->failures > 0) {
    g_test_message("%s", t->summary->str);
    g_test_fail();
  }
  g_assert_cmpuint(t->cases, >=, min_cases);
  g_string_free(t->summary, TRUE);
  g_free(t->dir);
}

/* A new path under the run's folder: "<dir>/<index>-<name>". */
static inline char *fuzz_case_path(FuzzTally *t, const char *name)
{
  return g_strdup_printf("%s/%03u-%s", t->dir, t->cases, name);
}

/* Writes a case file (no fsync: cases are thrown away). */
static inline void fuzz_write(const char *path, const void *data, gsize len)
{
  FILE *f = fopen(path, "wb");
  g_assert_nonnull(f);
  g_assert_cmpuint(fwrite(data, 1, len, f), ==, len);
  g_assert_cmpint(fclose(f), ==, 0);
}

/* ---- an error message a user can act on: one line that names the input ---- */

/* NULL when `msg` is a fine error message for the input called `name`; else what is wrong. */
static inline const char *fuzz_message_problem(const char *msg, const char *name)
{
  if (msg == NULL || *msg == '\0')
    return "no message";
  gsize len = strlen(msg);
  if (msg[len - 1] == '\n')
    len--;
  if (memchr(msg, '\n', len) != NULL)
    return "the message spans several lines";
  if (len > 2000)
    return "the message is longer than 2000 characters";
  if (!g_utf8_validate(msg, (gssize)len, NULL))
    return "the message is not UTF-8";
  if (name != NULL && strstr(msg, name) == NULL)
    return "the message does not name the input";
  return NULL;
}

/* ---- running cohort-train ---- */

typedef struct {
  int status; /* exit code; 128 + signal when killed; -1 when it outlived its time */
  char *out, *err;
  double seconds;
} FuzzRun;

static inline void fuzz_run_clear(FuzzRun *r)
{
  g_free(r->out);
  g_free(r->err);
}

typedef struct {
  gboolean done;
  char *out, *err;
} FuzzWait;

static inline void fuzz_on_communicated(GObject *source, GAsyncResult *res, gpointer data)
{
  FuzzWait *w = data;
  g_subprocess_communicate_utf8_finish(G_SUBPROCESS(source), res, &w->out, &w->err, NULL);
  w->done = TRUE;
}

/* Runs $COHORT_TRAIN with `args` (NULL-terminated) and progress events to `progress_path`
 * (may be NULL); kills it after `limit_s` seconds. `fd4` (-1 = none) is given to it as
 * descriptor 4 (taken); `env` (NAME, VALUE pairs, may be NULL) is added to its environment. */
static inline FuzzRun fuzz_run_train_with(const char *const *args, const char *progress_path,
                                          double limit_s, int fd4, const char *const *env)
{
  const char *program = g_getenv("COHORT_TRAIN");
  g_assert_nonnull(program);
  g_autoptr(GSubprocessLauncher) l =
      g_subprocess_launcher_new(G_SUBPROCESS_FLAGS_STDOUT_PIPE | G_SUBPROCESS_FLAGS_STDERR_PIPE);
  for (guint i = 0; env && env[i]; i += 2)
    g_subprocess_launcher_setenv(l, env[i], env[i + 1], TRUE);
  if (fd4 >= 0)
    g_subprocess_launcher_take_fd(l, fd4, 4);
  g_autoptr(GPtrArray) argv = g_ptr_array_new();
  g_ptr_array_add(argv, (gpointer)program);
  if (progress_path) {
    int fd = g_open(progress_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    g_assert_cmpint(fd, >=, 0);
    g_subprocess_launcher_take_fd(l, fd, 3);
    g_ptr_array_add(argv, "--progress-fd");
    g_ptr_array_add(argv, "3");
  }
  for (guint i = 0; args[i]; i++)
    g_ptr_array_add(argv, (gpointer)args[i]);
  g_ptr_array_add(argv, NULL);
  g_autoptr(GError) error = NULL;
  gint64 t0 = g_get_monotonic_time();
  g_autoptr(GSubprocess) p =
      g_subprocess_launcher_spawnv(l, (const char *const *)argv->pdata, &error);
  g_assert_no_error(error);
  FuzzWait w = {FALSE, NULL, NULL};
  g_subprocess_communicate_utf8_async(p, NULL, NULL, fuzz_on_communicated, &w);
  gint64 deadline = t0 + (gint64)(limit_s * G_USEC_PER_SEC);
  gboolean hung = FALSE;
  while (!w.done) {
    if (!hung && g_get_monotonic_time() > deadline) {
      hung = TRUE;
      g_subprocess_force_exit(p);
    }
    g_main_context_iteration(NULL, FALSE);
    if (!w.done)
      g_usleep(2000);
  }
  g_subprocess_wait(p, NULL, NULL);
  FuzzRun r = {0, w.out, w.err, (double)(g_get_monotonic_time() - t0) / 1e6};
  if (hung)
    r.status = -1;
  else if (g_subprocess_get_if_signaled(p))
    r.status = 128 + g_subprocess_get_term_sig(p);
  else
    r.status = g_subprocess_get_exit_status(p);
  return r;
}

static inline FuzzRun fuzz_run_train(const char *const *args, const char *progress_path,
                                     double limit_s)
{
  return fuzz_run_train_with(args, progress_path, limit_s, -1, NULL);
}

/* Judges a run of a case at `path` (the name the error must contain is `name`): refused means
 * exit status 1 or 2 and a one-line message naming the input; accepted means status 0.
 * Returns TRUE when the run was accepted (and that was allowed). */
static inline gboolean fuzz_judge_run(FuzzTally *t, const char *path, const char *name,
                                      FuzzExpect expect, const FuzzRun *r)
{
  t->cases++;
  if (r->status == -1) {
    fuzz_fail(t, path, "hang: still running after %.0f s", r->seconds);
    return FALSE;
  }
  if (r->status >= 128) {
    fuzz_fail(t, path, "crash: killed by signal %d; stderr: %s", r->status - 128, r->err);
    return FALSE;
  }
  if (r->status == 0) {
    if (expect == FUZZ_REFUSE) {
      fuzz_fail(t, path, "wrong accept: exit status 0 for an input that must be refused");
      return FALSE;
    }
    t->accepted++;
    return TRUE;
  }
  if (expect == FUZZ_ACCEPT) {
    fuzz_fail(t, path, "refused a valid input (status %d): %s", r->status, r->err);
    return FALSE;
  }
  if (r->status != 1 && r->status != 2) {
    fuzz_fail(t, path, "exit status %d, not 1 or 2; stderr: %s", r->status, r->err);
    return FALSE;
  }
  const char *problem = fuzz_message_problem(r->err, name);
  if (problem) {
    fuzz_fail(t, path, "%s: %s", problem, r->err);
    return FALSE;
  }
  t->refused++;
  return FALSE;
}

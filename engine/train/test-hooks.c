#include "engine/train/test-hooks.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "engine/base/phase.h"
#include "kernels/backend.h"

#define HOOKS_VAR "COHORT_TEST_HOOKS"

/* The hooks of the environment that match (kind, rank, step), each split at ':'. */
static GPtrArray *matching(const char *kind, int rank, gint64 step)
{
  const char *spec = g_getenv(HOOKS_VAR);
  if (spec == NULL || spec[0] == '\0')
    return NULL;
  GPtrArray *out = g_ptr_array_new_with_free_func((GDestroyNotify)g_strfreev);
  g_auto(GStrv) hooks = g_strsplit(spec, ";", 64);
  for (int i = 0; hooks[i] != NULL; i++) {
    GStrv f = g_strsplit(hooks[i], ":", 8);
    guint n = g_strv_length(f);
    if (n >= 4 && g_str_equal(f[0], kind) && g_ascii_strtoll(f[1], NULL, 10) == rank &&
        g_ascii_strtoll(f[2], NULL, 10) == step)
      g_ptr_array_add(out, f);
    else
      g_strfreev(f);
  }
  return out;
}

void cohort_test_hooks_sleep(int rank, gint64 step, const char *where)
{
  g_autoptr(GPtrArray) hooks = matching("sleep", rank, step);
  for (guint i = 0; hooks != NULL && i < hooks->len; i++) {
    GStrv f = g_ptr_array_index(hooks, i);
    if (g_strv_length(f) < 5)
      continue;
    gboolean in_forward = g_str_equal(f[3], "forward");
    if (in_forward != g_str_equal(where, "forward"))
      continue;
    int phase = cohort_phase_from_name(f[3]);
    if (phase < 0) {
      fprintf(stderr, "cohort-train: %s: no phase \"%s\"\n", HOOKS_VAR, f[3]);
      continue;
    }
    double seconds = g_ascii_strtod(f[4], NULL);
    gboolean tick = !in_forward && !(f[5] != NULL && g_str_equal(f[5], "still"));
    CohortRankPhase was = in_forward ? COHORT_RANK_PHASE_FORWARD : cohort_phase_enter(phase);
    gint64 end = g_get_monotonic_time() + (gint64)(seconds * G_USEC_PER_SEC);
    while (g_get_monotonic_time() < end) {
      g_usleep((gulong)MIN(250000, MAX(end - g_get_monotonic_time(), 0)));
      if (tick)
        cohort_phase_tick();
    }
    if (!in_forward)
      cohort_phase_enter(was);
  }
}

void cohort_test_hooks_kill(int rank, gint64 count, const char *where)
{
  g_autoptr(GPtrArray) hooks = matching("kill", rank, count);
  for (guint i = 0; hooks != NULL && i < hooks->len; i++) {
    GStrv f = g_ptr_array_index(hooks, i);
    if (g_str_equal(f[3], where))
      raise(SIGKILL);
  }
}

void cohort_test_hooks_perturb(int rank, gint64 step, CohortModel *m, const CohortBackend *be)
{
  g_autoptr(GPtrArray) hooks = matching("perturb", rank, step);
  for (guint i = 0; hooks != NULL && i < hooks->len; i++) {
    GStrv f = g_ptr_array_index(hooks, i);
    const CohortTensorInfo *t = cohort_tensor_find(m->tensors, m->n_tensors, f[3]);
    if (t == NULL) {
      fprintf(stderr, "cohort-train: %s: no parameter \"%s\"\n", HOOKS_VAR, f[3]);
      continue;
    }
    float v = 0;
    be->download(&v, m->params + t->offset, sizeof v);
    v += 1e-3f;
    be->upload(m->params + t->offset, &v, sizeof v);
  }
}

void cohort_test_hooks_slow(int rank, int examples)
{
  const char *spec = g_getenv(HOOKS_VAR);
  if (spec == NULL || spec[0] == '\0' || strstr(spec, "slow:") == NULL)
    return;
  g_auto(GStrv) hooks = g_strsplit(spec, ";", 64);
  for (int i = 0; hooks[i] != NULL; i++) {
    g_auto(GStrv) f = g_strsplit(hooks[i], ":", 4);
    if (g_strv_length(f) == 3 && g_str_equal(f[0], "slow") &&
        g_ascii_strtoll(f[1], NULL, 10) == rank)
      g_usleep((gulong)MAX(g_ascii_strtod(f[2], NULL) * examples, 0));
  }
}

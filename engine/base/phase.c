#include "engine/base/phase.h"

#include <string.h>

static GMutex lock;
static CohortPhaseState state = {.phase = COHORT_RANK_PHASE_STARTUP};

/* The protocol's words (engine/progress/protocol.h's COHORT_PHASE_*; tests/test-protocol.c
 * holds the two lists together). */
static const char *const names[COHORT_RANK_N_PHASES] = {
    [COHORT_RANK_PHASE_STARTUP] = "startup",       [COHORT_RANK_PHASE_DATA] = "data",
    [COHORT_RANK_PHASE_TOKENIZING] = "tokenizing", [COHORT_RANK_PHASE_CACHING] = "caching",
    [COHORT_RANK_PHASE_FORWARD] = "forward",       [COHORT_RANK_PHASE_BACKWARD] = "backward",
    [COHORT_RANK_PHASE_OPTIMIZER] = "optimizer",   [COHORT_RANK_PHASE_EVALUATION] = "evaluation",
    [COHORT_RANK_PHASE_SAMPLE] = "sample",         [COHORT_RANK_PHASE_CHECKPOINT] = "checkpoint",
    [COHORT_RANK_PHASE_EXPORT] = "export",         [COHORT_RANK_PHASE_HEALTH] = "health",
    [COHORT_RANK_PHASE_PROBE] = "probe",           [COHORT_RANK_PHASE_DONE] = "done",
};

CohortRankPhase cohort_phase_enter(CohortRankPhase phase)
{
  g_mutex_lock(&lock);
  CohortRankPhase was = state.phase;
  state.phase = phase;
  state.since_us = g_get_monotonic_time();
  state.ticks = 0;
  state.changes++;
  g_mutex_unlock(&lock);
  return was;
}

void cohort_phase_tick(void)
{
  g_mutex_lock(&lock);
  state.ticks++;
  state.changes++;
  g_mutex_unlock(&lock);
}

void cohort_phase_set_step(gint64 step)
{
  g_mutex_lock(&lock);
  if (state.step != step) {
    state.step = step;
    state.changes++;
  }
  g_mutex_unlock(&lock);
}

void cohort_phase_get(CohortPhaseState *out)
{
  g_mutex_lock(&lock);
  /* Before the first enter the process is starting up: from the first look on. */
  if (state.since_us == 0)
    state.since_us = g_get_monotonic_time();
  *out = state;
  g_mutex_unlock(&lock);
}

const char *cohort_phase_name(CohortRankPhase phase)
{
  return (int)phase >= 0 && phase < COHORT_RANK_N_PHASES ? names[phase] : "?";
}

int cohort_phase_from_name(const char *name)
{
  for (int i = 0; name != NULL && i < COHORT_RANK_N_PHASES; i++)
    if (strcmp(names[i], name) == 0)
      return i;
  return -1;
}

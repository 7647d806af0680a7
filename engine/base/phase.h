/* What this rank is doing now: one process-wide record of the training phase (data loading,
 * forward, backward, a checkpoint, caching, tokenizing, …), the step, and a progress counter
 * that long phases advance. The communication layer publishes it (engine/distributed/
 * heartbeat.h), so that when a collective waits for a rank, the others can say where that rank
 * is, and so that a rank busy alone in a long phase keeps the others' timeouts from firing
 * while it makes progress (docs/launching.md, "Where a hang is").
 *
 * It lives in engine/base so every layer can report its phase: the data pipeline (first-use
 * tokenization), the model layer (checkpoint writing), the families (latent caching,
 * sampling) and the trainer. Cheap enough for every step: one uncontended lock per call.
 *
 * How a long phase keeps a job alive:
 *
 *     CohortRankPhase was = cohort_phase_enter(COHORT_RANK_PHASE_CACHING);
 *     for (i = 0; i < n; i++) {
 *       encode_one(i);
 *       cohort_phase_tick();     // "still moving": extends the others' wait
 *     }
 *     cohort_phase_enter(was);
 *
 * Ranks waiting for it extend their collective's deadline by `timeout_s` from each change they
 * see (a phase entered, a tick, a collective reached); a rank that shows none for `timeout_s`
 * fails the collective with its phase named. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* The phases; their names (cohort_phase_name) are the progress protocol's `phase` values. */
typedef enum {
  COHORT_RANK_PHASE_STARTUP,    /* set-up: data, model, weights, resume */
  COHORT_RANK_PHASE_DATA,       /* waiting for or loading a training batch */
  COHORT_RANK_PHASE_TOKENIZING, /* first-use tokenization of a text data set */
  COHORT_RANK_PHASE_CACHING,    /* a per-rank cache (latents) being filled */
  COHORT_RANK_PHASE_FORWARD,
  COHORT_RANK_PHASE_BACKWARD,
  COHORT_RANK_PHASE_OPTIMIZER, /* clipping, the update, ZeRO's gather, EMA */
  COHORT_RANK_PHASE_EVALUATION,
  COHORT_RANK_PHASE_SAMPLE,
  COHORT_RANK_PHASE_CHECKPOINT,
  COHORT_RANK_PHASE_EXPORT,
  COHORT_RANK_PHASE_HEALTH, /* the ranks' parameter checksums */
  COHORT_RANK_PHASE_PROBE,  /* cohort-train --probe's measurements */
  COHORT_RANK_PHASE_DONE,   /* the run ended on this rank */
  COHORT_RANK_N_PHASES
} CohortRankPhase;

/* A snapshot of the record. */
typedef struct {
  CohortRankPhase phase;
  gint64 since_us; /* monotonic time the phase was entered */
  gint64 step;     /* optimizer steps done (cohort_phase_set_step) */
  guint64 ticks;   /* progress in this phase */
  guint64 changes; /* every enter, tick and step so far: a reader compares two snapshots */
} CohortPhaseState;

/* Enters `phase` (its clock and ticks start again, even when it is the current one) and returns
 * the phase it replaces, so a nested phase can put it back. */
CohortRankPhase cohort_phase_enter(CohortRankPhase phase);
/* A long phase made progress (an image cached, a shard tokenized, a tensor written). */
void cohort_phase_tick(void);
/* The optimizer steps done. */
void cohort_phase_set_step(gint64 step);
void cohort_phase_get(CohortPhaseState *out);

/* "forward", "checkpoint", …; "?" outside the enum. */
const char *cohort_phase_name(CohortRankPhase phase);
/* The phase named `name`, or -1. */
int cohort_phase_from_name(const char *name);

G_END_DECLS

/* The memory plan of `cohort-train --explain` as the window reads it: its JSON (the members of
 * engine/progress/explain-json.h) into numbers, and nothing else; no GTK. The Distributed page
 * shows it (ui/dist-page.c). */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* What each process needs, in bytes, and what this machine has. */
typedef struct {
  int zero_stage;
  int local_ranks; /* processes on this machine */
  gint64 params, grads, optim, ema, activations, working, teacher, startup;
  gint64 machine;      /* this machine's memory; 0 when the plan leaves it out (GPU ranks) */
  gint64 machine_need; /* the local processes together */
  gboolean fits;       /* TRUE when the plan leaves it out */
} CohortExplainMemory;

/* Reads the `memory` object of --explain's output `json`. A member the window needs that the
 * plan lacks (or of another type) is an error naming it ("memory.per_rank.params_bytes"). */
gboolean cohort_explain_memory_read(const char *json, CohortExplainMemory *m, GError **error);

G_END_DECLS

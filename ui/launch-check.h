/* Checks before Start: what would make a run fail seconds after it started that the config's
 * own validation (which never looks at the disk or the machine) cannot see. The window keeps
 * Start disabled while any problem stands, shows each on its field and the first in the
 * status line. Messages name keys by their labels. The launch plan's refusals join here. */
#pragma once

#include <glib.h>

#include "engine/config/config.h"

G_BEGIN_DECLS

typedef struct {
  char *key;     /* the config key the problem belongs to */
  char *message; /* translated, "<label>: …" */
} CohortLaunchProblem;

void cohort_launch_problem_free(CohortLaunchProblem *problem);

/* The problems of the path keys in effect in `cfg` (the key table's CohortKeyPath: data,
 * tokenizer, VAE, teacher, adapter, initial weights, workspace), in the table's order: a path
 * that does not exist, data that holds nothing to read in the config's data_format (a glob
 * pattern must match a file), a file where a folder is needed or the other way round, a
 * folder without the files the key names (a PEFT adapter's two files). Relative paths are
 * taken from the current folder, as the engine does; "builtin:REL" from Cohort's data folder.
 * Cheap enough for every edit: it reads file metadata and stops at the first data file a
 * folder holds. */
GPtrArray *cohort_launch_check_paths(const CohortConfig *cfg);

/* What cohort_launch_check_paths reads of `cfg`, as one text: while it stays the same (and the
 * disk does), so do the path problems. Derived from the same table. */
char *cohort_launch_paths_read(const CohortConfig *cfg);

/* The problems that are rules, not files: device cuda in a build without CUDA, a frozen_dtype
 * bf16 the engine would refuse with the other keys (engine/config/finetune-rules.h) or on
 * device cuda, and, when `gpus` is known (>= 0, -1 while detection runs), NCCL between several
 * processes or device cuda without a GPU. Reads no file. */
GPtrArray *cohort_launch_check_rules(const CohortConfig *cfg, int gpus);

/* Both, paths first (an empty array when `cfg` can start). */
GPtrArray *cohort_launch_check(const CohortConfig *cfg, int gpus);

G_END_DECLS

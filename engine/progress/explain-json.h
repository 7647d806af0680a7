/* The members of `cohort-train --explain`'s JSON (docs/launching.md, "What --explain prints"):
 * the engine writes them with these names (engine/train/explain.c, memory-plan.c) and the
 * window reads them with the same ones (ui/explain-plan.c), so neither side spells one by
 * hand. tests/test-explain-json.c checks that every name here is documented, that a plan
 * writes no member without a constant, and that it writes every member the window reads.
 *
 * Adding a member: a constant here, the writer, a sentence on the page. */
#pragma once

/* The top level. */
#define COHORT_EXPLAIN_CONFIG               "config"
#define COHORT_EXPLAIN_LAUNCH               "launch"
#define COHORT_EXPLAIN_PARAMS               "params"
#define COHORT_EXPLAIN_DEVICE               "device"
#define COHORT_EXPLAIN_THREADS_PER_RANK     "threads_per_rank"
#define COHORT_EXPLAIN_WORLD_SIZE           "world_size"
#define COHORT_EXPLAIN_GLOBAL_BATCH         "global_batch"
#define COHORT_EXPLAIN_RANK_BATCH_SIZES     "rank_batch_sizes"
#define COHORT_EXPLAIN_TOKENS_PER_STEP      "tokens_per_step"
#define COHORT_EXPLAIN_LEARNING_RATE        "learning_rate"
#define COHORT_EXPLAIN_SCALED_LEARNING_RATE "scaled_learning_rate"
#define COHORT_EXPLAIN_TRAIN_WINDOWS        "train_windows"
/* text through a tokenizer only: TRUE while its tokens are not in the workspace's cache, so
 * train_windows and the steps after it are estimated from the first MiB's tokens per byte */
#define COHORT_EXPLAIN_TRAIN_WINDOWS_ESTIMATED    "train_windows_estimated"
#define COHORT_EXPLAIN_SAMPLES_PER_RANK_PER_EPOCH "samples_per_rank_per_epoch"
#define COHORT_EXPLAIN_STEPS_PER_EPOCH            "steps_per_epoch"
#define COHORT_EXPLAIN_TOTAL_STEPS                "total_steps"
#define COHORT_EXPLAIN_MEMORY                     "memory"
#define COHORT_EXPLAIN_FIRST_INDICES              "first_indices"
#define COHORT_EXPLAIN_HEALTH                     "health"
#define COHORT_EXPLAIN_PROBE                      "probe"

/* `launch`. */
#define COHORT_EXPLAIN_KIND            "kind"
#define COHORT_EXPLAIN_NUM_NODES       "num_nodes"
#define COHORT_EXPLAIN_NODE_RANK       "node_rank"
#define COHORT_EXPLAIN_LOCAL_PROCESSES "local_processes"
#define COHORT_EXPLAIN_SUMMARY         "summary"
#define COHORT_EXPLAIN_ARGV            "argv"

/* `rank_batch_sizes` (and `kind`: "even", "list" or "auto"). */
#define COHORT_EXPLAIN_EVEN      "even"
#define COHORT_EXPLAIN_CHOSEN    "chosen"
#define COHORT_EXPLAIN_CHOSEN_BY "chosen_by"

/* `memory` (and world_size above). */
#define COHORT_EXPLAIN_ZERO_STAGE         "zero_stage"
#define COHORT_EXPLAIN_LOCAL_RANKS        "local_ranks"
#define COHORT_EXPLAIN_TRAINABLE          "trainable"
#define COHORT_EXPLAIN_FROZEN             "frozen"
#define COHORT_EXPLAIN_UNITS              "units"
#define COHORT_EXPLAIN_PER_RANK           "per_rank"
#define COHORT_EXPLAIN_MACHINE_BYTES      "machine_bytes"
#define COHORT_EXPLAIN_MACHINE_NEED_BYTES "machine_need_bytes"
#define COHORT_EXPLAIN_FITS               "fits"

/* `memory.per_rank`: bytes. */
#define COHORT_EXPLAIN_PARAMS_BYTES      "params_bytes"
#define COHORT_EXPLAIN_FROZEN_BYTES      "frozen_bytes"
#define COHORT_EXPLAIN_GRADS_BYTES       "grads_bytes"
#define COHORT_EXPLAIN_OPTIM_BYTES       "optim_bytes"
#define COHORT_EXPLAIN_EMA_BYTES         "ema_bytes"
#define COHORT_EXPLAIN_ACTIVATIONS_BYTES "activations_bytes"
#define COHORT_EXPLAIN_WORKING_BYTES     "working_bytes"
#define COHORT_EXPLAIN_TEACHER_BYTES     "teacher_bytes"
#define COHORT_EXPLAIN_TOTAL_BYTES       "total_bytes"
#define COHORT_EXPLAIN_STARTUP_BYTES     "startup_bytes"

/* `first_indices`' objects. */
#define COHORT_EXPLAIN_RANK    "rank"
#define COHORT_EXPLAIN_INDICES "indices"

/* `health`. */
#define COHORT_EXPLAIN_COMPARED   "compared"
#define COHORT_EXPLAIN_WHY_NOT    "why_not"
#define COHORT_EXPLAIN_SAVE_EVERY "save_every"
#define COHORT_EXPLAIN_BUFFERS    "buffers"
#define COHORT_EXPLAIN_LAST       "last"

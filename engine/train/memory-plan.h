/* The memory a run will need, per rank, before it starts: what --explain and the window's
 * Distributed page show, and what a launch that cannot fit is refused with.
 *
 * Per rank, in bytes, for the config's model, zero_stage, optimizer, EMA and world size (the
 * rank with the largest shard: rank 0):
 *   parameters   4 P (stage 3: 4 S, its shard of them)
 *   gradients    4 P (stages 2 and 3: 4 S)
 *   optimizer    4 k P, k = 2 for AdamW, 1 for SGD with momentum, 0 without (stage 1: its
 *                range of ~P/N; stages 2 and 3: 4 k S)
 *   EMA          8 P: the weights and the copy swapped out while they evaluate (stage 2: 8 S;
 *                stage 3: 4 S, no copy)
 *   activations  the family's, for batch_size (its act_bytes; with activation_checkpointing
 *                one input per block and one block's buffers, engine/families/family.h)
 *   working set  stages 2 and 3: the gradients of the units in flight (four largest: a tied
 *                embedding written at both ends of backward, the layer backward is in, two
 *                waiting for their reduce-scatter) and at stage 3 the gathered parameters
 *                (three largest: the layer in use, the next, one gathered ahead), plus a
 *                bfloat16 copy of a unit with reduce_precision bf16; on a CPU rank with
 *                precision bf16 or fp16, the rounded copies of the largest operands of its
 *                products (the family's gemm_operands, engine/families/family.h)
 *   teacher      a distillation teacher's weights and activations (replicated, never sharded)
 * with S the rank's shard of the P parameters (engine/distributed/shard-plan.h). At stage 3 a
 * start from init_from or from teacher layers writes the whole model once (then each rank
 * keeps its pieces): the start-up peak adds 4 P.
 *
 * With finetune lora or frozen, P counts the adapters too and only the T floats that learn
 * have gradients, optimizer state and EMA weights: at stages 0 and 1 these are 4 T, 4 k T (stage
 * 1: ~T/N) and 8 (P) as above; at stages 2 and 3 S is the rank's shard of the T (the units cover
 * what learns alone) and the frozen base, P − T, is whole on every rank: parameters 4 (P − T)
 * plus 4 T (stage 2) or 4 S (stage 3); such a start at stage 3 always writes what learns whole
 * once (adds 4 T to the start-up peak).
 *
 * CPU ranks of one machine share its memory: a plan whose local ranks together need more than
 * the machine has is refused. A GPU rank needs its own device's memory for its share. */
#pragma once

#include <json-glib/json-glib.h>

#include "engine/config/config.h"

G_BEGIN_DECLS

typedef struct {
  int stage;        /* the stage that runs: the config's, 0 with one rank */
  int world, local; /* ranks, and ranks on this machine */
  gint64 params;    /* the family's; with finetune lora the adapters come on top */
  gint64 trainable; /* the floats that learn (engine/model/finetune.h): params with full */
  gint64 frozen;    /* stages 2 and 3 with finetune lora or frozen: the base's floats, whole on
                     * every rank (only what learns is sharded); 0 otherwise */
  guint units;      /* stages 2 and 3: layer units */
  gint64 param_bytes, grad_bytes, optim_bytes, ema_bytes, act_bytes, working_bytes, teacher_bytes;
  /* The frozen base (finetune lora or frozen; 0 with full): its bytes in params_bytes, and
   * with frozen_dtype bf16 the floats stored in bf16 (engine/model/frozen-store.h). */
  gint64 frozen_bytes, frozen_bf16;
  gint64 total_bytes;   /* per rank, while it trains */
  gint64 startup_bytes; /* per rank, the most at start (>= total_bytes) */
} CohortMemoryPlan;

/* The plan for `cfg` on `world` ranks, `local` of them on this machine. FALSE with an error
 * when the config names no model the build has. */
gboolean cohort_memory_plan(const CohortConfig *cfg, int world, int local, CohortMemoryPlan *plan,
                            GError **error);

/* The machine's memory (MemTotal of /proc/meminfo), or 0 when it cannot tell. */
guint64 cohort_machine_memory_bytes(void);

/* CPU ranks: FALSE with an error giving the numbers (per rank, the ranks on this machine,
 * the machine's memory) and what would fit, when the local ranks together need more than
 * `machine_bytes` (0: no check). */
gboolean cohort_memory_plan_check_host(const CohortMemoryPlan *plan, const CohortConfig *cfg,
                                       guint64 machine_bytes, GError **error);
/* A GPU rank: FALSE with an error giving the numbers when its share needs more than the
 * device's `device_bytes`. */
gboolean cohort_memory_plan_check_device(const CohortMemoryPlan *plan, const CohortConfig *cfg,
                                         int cuda_device, guint64 device_bytes, GError **error);

/* A rank's check once its device is known (cuda_device -1: the CPU): the host check over the
 * machine's local ranks, or the device check against its GPU's memory. */
gboolean cohort_memory_plan_check_rank(const CohortConfig *cfg, int world, int local,
                                       int cuda_device, GError **error);

/* The plan as the "memory" member of --explain's JSON. */
void cohort_memory_plan_add_json(const CohortMemoryPlan *plan, guint64 machine_bytes, gboolean gpu,
                                 JsonBuilder *b);

G_END_DECLS

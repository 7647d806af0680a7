/* Whether this node can take the ranks a launch puts on it, checked by every rank before its
 * model is allocated (so 64 ranks on a 2-core, 24 GiB machine are told at once, not by the
 * kernel's OOM killer):
 *  - on the CPU device, more ranks on the node than CPU cores is a warning: they run, each
 *    slower than one rank alone;
 *  - on the CPU device, ranks whose estimated memory together exceeds the machine's are
 *    refused with the numbers.
 * The estimate is a lower bound, so that nothing is refused that might fit: the parameter count
 * of the config's model (cohort_model_count_params) times 4 bytes for each fp32 copy a rank
 * keeps — the weights, their gradients, the optimizer's moments (2 for AdamW, 1 for SGD with
 * momentum, 0 without) and, with ema_decay, the EMA weights and the copy they are swapped
 * with — plus one batch of inputs (batch_size examples of seq_len tokens, or of
 * image_channels × image_size² pixels, 4 bytes each). Activations, a teacher and the data set
 * are not counted. The machine's memory is MemTotal, or the cgroup's memory.max when lower. */
#pragma once

#include <glib.h>

#include "engine/config/config.h"

G_BEGIN_DECLS

/* The lower-bound bytes one rank of `cfg` needs (see above); *params gets the parameter
 * count (may be NULL). 0 when the family is unknown. */
guint64 cohort_rank_memory_estimate(const CohortConfig *cfg, gint64 *params);

/* The memory of this machine (or its cgroup) in bytes; 0 when unknown. */
guint64 cohort_node_memory(void);

/* Checks `local_ranks` ranks of `cfg` on this node (`cpu`: on the CPU device; nothing is
 * checked on a GPU). FALSE with an error (COHORT_CONFIG_ERROR_INVALID naming `source`) when
 * their memory cannot fit; *warning (g_free it; may be NULL) when there are more ranks than
 * cores. */
gboolean cohort_node_check(const CohortConfig *cfg, const char *source, gboolean cpu,
                           int local_ranks, char **warning, GError **error);

G_END_DECLS

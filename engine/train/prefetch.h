/* Data loading off the critical path: background threads fill the next micro-batches of an
 * epoch while the current one trains, through a bounded set of batches, so a slow reader costs
 * the training loop nothing as long as it keeps up on average (PyTorch DataLoader's num_workers
 * and prefetching).
 *
 * Micro-batches are numbered by (epoch, micro), micro from 0 to micros_per_epoch − 1, and are
 * asked for in that order: after (e, micros_per_epoch − 1) comes (e + 1, 0). The workers load
 * ahead in that order; asking for any other position (the first call, a resumed run) drops what
 * was loaded ahead and starts again from there. What a batch holds depends only on its
 * position, never on which thread loaded it, so runs are the same with any number of
 * workers. */
#pragma once

#include <glib.h>

#include "engine/model/batch.h"

G_BEGIN_DECLS

/* Fills `batch` with micro-batch (epoch, micro). Called from the worker threads, several at
 * once for different batches; FALSE with an error stops at that batch. */
typedef gboolean (*CohortPrefetchLoad)(gpointer data, CohortBatch *batch, gint64 epoch,
                                       gint64 micro, GError **error);

typedef struct CohortPrefetch CohortPrefetch;

/* `n_workers` threads (>= 1) and `n_batches` batches (>= 2: one the caller holds, the rest
 * loaded ahead), each made by `new_batch(data)` and freed by `free_batch`. `micros_per_epoch`
 * >= 1. The threads start at the first cohort_prefetch_get. */
CohortPrefetch *cohort_prefetch_new(int n_workers, int n_batches, gint64 micros_per_epoch,
                                    CohortPrefetchLoad load, CohortBatch *(*new_batch)(gpointer),
                                    void (*free_batch)(CohortBatch *), gpointer data);

/* Micro-batch (epoch, micro), once loaded; the caller holds it until its next call (and
 * releases it then). *waited_us (may be NULL) gets how long this call waited for it: the time
 * data loading cost the caller. NULL with the loader's error for that batch. */
CohortBatch *cohort_prefetch_get(CohortPrefetch *p, gint64 epoch, gint64 micro, gint64 *waited_us,
                                 GError **error);

/* Stops the threads (a load under way finishes first) and frees the batches. */
void cohort_prefetch_free(CohortPrefetch *p);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortPrefetch, cohort_prefetch_free)

G_END_DECLS

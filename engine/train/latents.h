/* vae_from: the latent phase of a run's set-up. Every image of the training (and validation)
 * folder is encoded once by the VAE into the latent cache of the workspace (data/latent-cache.h,
 * keyed as data/latent-set.h says: <cache folder>/latents-train.bin and latents-val.bin), then
 * every rank holds all the latents and trains on them.
 *
 *  - distributed_data_loading: rank r encodes the images i with i mod world_size = r (disjoint
 *    shares whose union is the data set), each into its own cache folder (cache/rank-r), all at
 *    once; without it rank 0 encodes everything (cache/) while the others wait.
 *  - Waiting is on the rendezvous store (ready keys, polled), never in a collective, so no
 *    communication timeout can end a run while one rank caches for hours; a rank that fails
 *    puts its reason in the store and the waiting ranks fail with it.
 *  - Then the latents go to every rank in one collective (all-gather of the shares, or rank
 *    0's broadcast): N ranks train on exactly the latents one process would.
 *  - Rank 0 emits `latents` progress events (images done of all ranks, images/s, ETA) and a
 *    live status line; a stop (SIGTERM, the window's Stop) ends caching at once, and what was
 *    cached stays for the next run, which encodes only the rest. */
#pragma once

#include "engine/train/trainer-run.h"

G_BEGIN_DECLS

/* The error a stop during set-up gives (the run then ends as stopped, not failed). */
#define COHORT_RANK_RUN_STOPPED (cohort_rank_run_stopped_quark())
GQuark cohort_rank_run_stopped_quark(void);

/* Opens `path` (`which`: "train" or "val") as latents with the cache in `cache_dir`. */
CohortDataSource *cohort_rank_run_open_latents(CohortRankRun *r, const char *which,
                                               const char *path, const char *cache_dir,
                                               GError **error);

G_END_DECLS

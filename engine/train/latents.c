/* The latent phase of set-up (vae_from); see latents.h. */
#include "engine/train/latents.h"

#include "engine/progress/protocol.h"

#include <string.h>

#include "data/augment.h"
#include "engine/base/error.h"
#include "engine/base/phase.h"
#include "engine/models/dit.h"
#include "engine/models/vae.h"

/* clang-format off */
G_DEFINE_QUARK(cohort-rank-run-stopped-quark, cohort_rank_run_stopped)
/* clang-format on */

/* Images encoded at a time (each with its mirror image when flips are cached). */
#define ENCODE_BATCH 4
/* Seconds between progress events, and between looks at the store while waiting. */
#define EMIT_EVERY_S 1.0
#define POLL_S       1.0

typedef struct {
  CohortRankRun *r;
  const char *which;
  CohortLatentFiles *files;
  gsize n;
  int world, rank;
  gboolean ddl;
  int variants, L, s;
  size_t D;       /* floats of one latent */
  gsize share;    /* positions per rank (the largest share) */
  gsize my_count; /* positions this rank encodes */
  float *mine;    /* [share, variants, D] */
  float *bad;     /* [share]: 1 where the image could not be read (skip_bad_images) */
  guint64 done, cached, encoded, reported_done, reported_encoded;
  gint64 t0, last_emit;
  gboolean emitted_any;
} Phase;

static gsize index_of(const Phase *ph, gsize pos, int rank)
{
  return ph->ddl ? pos * (gsize)ph->world + (gsize)rank : pos;
}

/* Positions rank q encodes. */
static gsize count_of(const Phase *ph, int q)
{
  if (!ph->ddl)
    return q == 0 ? ph->n : 0;
  return ph->n > (gsize)q ? (ph->n - (gsize)q + (gsize)ph->world - 1) / (gsize)ph->world : 0;
}

static char *store_key(const Phase *ph, const char *what)
{
  return g_strdup_printf("latents/%s/%s", ph->which, what);
}

static gboolean stopping(const Phase *ph)
{
  return ph->r->opts->stop_flag && *ph->r->opts->stop_flag;
}

static gboolean stopped_error(const Phase *ph, GError **error)
{
  return cohort_fail(error, COHORT_RANK_RUN_STOPPED, 0,
                     "stopped while caching the latents of the %s data; the cache keeps what was "
                     "encoded and the next run encodes only the rest",
                     ph->which);
}

/* Rank 0: the `latents` event and the live line, at most every EMIT_EVERY_S (always at the end). */
static void emit(Phase *ph, guint64 done, guint64 encoded, gboolean final)
{
  gint64 now = g_get_monotonic_time();
  if (ph->rank != 0 || (!final && ph->emitted_any && now - ph->last_emit < EMIT_EVERY_S * 1e6))
    return;
  ph->last_emit = now;
  ph->emitted_any = TRUE;
  double secs = (now - ph->t0) / 1e6, rate = secs > 0 ? done / secs : 0;
  double eta = rate > 0 ? (ph->n - done) / rate : -1;
  JsonObject *f = json_object_new();
  json_object_set_string_member(f, COHORT_FIELD_SET, ph->which);
  json_object_set_int_member(f, COHORT_FIELD_DONE, (gint64)done);
  json_object_set_int_member(f, COHORT_FIELD_TOTAL, (gint64)ph->n);
  json_object_set_int_member(f, COHORT_FIELD_ENCODED, (gint64)encoded);
  json_object_set_double_member(f, COHORT_FIELD_IMAGES_PER_S, rate);
  if (eta >= 0 && !final)
    json_object_set_double_member(f, COHORT_FIELD_ETA_S, eta);
  json_object_set_double_member(f, COHORT_FIELD_ELAPSED_S, secs);
  json_object_set_boolean_member(f, COHORT_FIELD_FINISHED, final);
  cohort_progress_emit(ph->r->progress, COHORT_EVENT_LATENTS, f);
  g_autofree char *left = eta >= 0 ? cohort_format_duration(eta) : g_strdup("?");
  cohort_progress_status(ph->r->progress, final,
                         "caching latents (%s): %" G_GUINT64_FORMAT
                         "/%zu images, %.1f images/s, %s left",
                         ph->which, done, (size_t)ph->n, rate, final ? "nothing" : left);
}

/* This rank's counts into the store (every rank), then rank 0's view of all of them. */
static gboolean report(Phase *ph, gboolean final, GError **error)
{
  CohortStore *store = ph->r->opts->store;
  guint64 done = ph->done, encoded = ph->encoded;
  if (store && ph->world > 1 && ph->ddl) {
    g_autofree char *kd = store_key(ph, "done"), *ke = store_key(ph, "encoded");
    gint64 td, te;
    if (!cohort_store_add(store, kd, (gint64)(ph->done - ph->reported_done), &td, error) ||
        !cohort_store_add(store, ke, (gint64)(ph->encoded - ph->reported_encoded), &te, error))
      return FALSE;
    ph->reported_done = ph->done;
    ph->reported_encoded = ph->encoded;
    done = (guint64)td;
    encoded = (guint64)te;
  }
  emit(ph, done, encoded, final);
  return TRUE;
}

typedef struct {
  float *pix; /* [ENCODE_BATCH × variants, C, S, S]: each image, then its mirror */
  gsize pos[ENCODE_BATCH];
  guint8 keys[ENCODE_BATCH][2][COHORT_LATENT_KEY_BYTES];
  int count;
} Pending;

static gboolean flush(Phase *ph, CohortVae *vae, CohortLatentCache *cache, Pending *q,
                      GError **error)
{
  if (q->count == 0)
    return TRUE;
  int B = q->count * ph->variants;
  g_autofree float *lat = g_new(float, (size_t)B * ph->D);
  cohort_vae_encode(vae, q->pix, B, lat);
  for (int k = 0; k < q->count; k++)
    for (int v = 0; v < ph->variants; v++) {
      const float *l = lat + (size_t)(k * ph->variants + v) * ph->D;
      if (!cohort_latent_cache_append(cache, q->keys[k][v], l, error))
        return FALSE;
      memcpy(ph->mine + (q->pos[k] * ph->variants + v) * ph->D, l, ph->D * sizeof(float));
    }
  ph->done += (guint64)q->count;
  ph->encoded += (guint64)q->count;
  q->count = 0;
  return report(ph, FALSE, error);
}

/* One position: from the cache when every variant is there, else decoded into the batch. */
static gboolean take(Phase *ph, const char *vae_sha, GHashTable *keep, CohortLatentCache *cache,
                     CohortVae *vae, Pending *q, gsize pos, GError **error)
{
  const CohortConfig *cfg = ph->r->cfg;
  gsize i = index_of(ph, pos, ph->rank);
  guint8 content[32];
  guint8 *keys = q->keys[q->count][0];
  g_autoptr(GError) bad = NULL;
  if (!cohort_latent_files_read(ph->files, i, content, NULL, &bad))
    goto unreadable;
  gboolean all = TRUE;
  for (int v = 0; v < ph->variants; v++) {
    guint8 *key = keys + v * COHORT_LATENT_KEY_BYTES;
    cohort_latent_key(content, vae_sha, cfg->image_size, cfg->image_channels, v == 1, key);
    g_hash_table_add(keep, g_bytes_new(key, COHORT_LATENT_KEY_BYTES));
    const float *hit = cohort_latent_cache_lookup(cache, key);
    if (hit)
      memcpy(ph->mine + (pos * ph->variants + v) * ph->D, hit, ph->D * sizeof(float));
    all = all && hit;
  }
  if (all) {
    ph->done++;
    ph->cached++;
    return ph->cached % 256 ? TRUE : report(ph, FALSE, error);
  }
  size_t P = (size_t)cfg->image_channels * cfg->image_size * cfg->image_size;
  float *img = q->pix + (size_t)q->count * ph->variants * P;
  if (!cohort_latent_files_read(ph->files, i, content, img, &bad))
    goto unreadable;
  if (ph->variants == 2)
    cohort_latent_hflip(img, cfg->image_channels, cfg->image_size, cfg->image_size, img + P);
  q->pos[q->count++] = pos;
  return q->count < ENCODE_BATCH || flush(ph, vae, cache, q, error);
unreadable:
  if (!cfg->skip_bad_images) {
    g_propagate_error(error, g_steal_pointer(&bad));
    return FALSE;
  }
  ph->bad[pos] = 1.0f;
  ph->done++;
  return TRUE;
}

/* This rank's share: from the cache, or encoded and appended to it. */
static gboolean encode_share(Phase *ph, const char *cache_dir, GError **error)
{
  CohortRankRun *r = ph->r;
  const CohortConfig *cfg = r->cfg;
  g_autofree char *vae_dir = cohort_resolve_path(cfg->vae_from);
  g_autoptr(CohortVae) vae = cohort_vae_load(r->be, vae_dir, COHORT_VAE_ENCODE,
                                             ENCODE_BATCH * ph->variants, cfg->image_size, error);
  if (!vae)
    return FALSE;
  g_autofree char *name = g_strdup_printf("latents-%s.bin", ph->which);
  g_autofree char *path = g_build_filename(cache_dir, name, NULL);
  g_autoptr(CohortLatentCache) cache = cohort_latent_cache_open(path, ph->D, error);
  if (!cache)
    return FALSE;
  if (cohort_latent_cache_cut_bytes(cache) > 0 && ph->rank == 0)
    cohort_progress_log(r->progress, "info",
                        "%s: a run stopped while writing it; %u latents kept, the torn end cut",
                        path, cohort_latent_cache_count(cache));
  g_autoptr(GHashTable) keep =
      g_hash_table_new_full(g_bytes_hash, g_bytes_equal, (GDestroyNotify)g_bytes_unref, NULL);
  size_t P = (size_t)cfg->image_channels * cfg->image_size * cfg->image_size;
  Pending q = {.pix = g_new(float, P *ENCODE_BATCH * ph->variants)};
  const char *sha = cohort_vae_sha256(vae);
  gboolean ok = TRUE;
  /* A long one-rank phase: the ranks waiting for this one see it tick (engine/base/phase.h). */
  CohortRankPhase was = cohort_phase_enter(COHORT_RANK_PHASE_CACHING);
  for (gsize pos = 0; ok && pos < ph->my_count; pos++) {
    cohort_phase_tick();
    if (stopping(ph)) {
      ok = cohort_latent_cache_sync(cache, NULL) && stopped_error(ph, error);
      break;
    }
    ok = take(ph, sha, keep, cache, vae, &q, pos, error);
  }
  ok = ok && flush(ph, vae, cache, &q, error) && cohort_latent_cache_sync(cache, error) &&
       cohort_latent_cache_compact(cache, keep, error);
  g_free(q.pix);
  cohort_phase_enter(was);
  return ok;
}

/* Waits, on the store, until every rank has its share (rank 0 keeps reporting); fails with
 * the reason of a rank that failed. */
static gboolean wait_all(Phase *ph, GError **error)
{
  CohortStore *store = ph->r->opts->store;
  if (!store || ph->world < 2)
    return TRUE;
  g_autofree char *mine = g_strdup_printf("latents/%s/ready/%d", ph->which, ph->rank);
  g_autofree char *failed = store_key(ph, "failed");
  if (!cohort_store_set(store, mine, "1", 1, error))
    return FALSE;
  g_autoptr(GPtrArray) keys = g_ptr_array_new_with_free_func(g_free);
  for (int q = 0; q < ph->world; q++)
    g_ptr_array_add(keys, g_strdup_printf("latents/%s/ready/%d", ph->which, q));
  g_ptr_array_add(keys, NULL);
  for (;;) {
    g_autoptr(GBytes) why = cohort_store_try_get(store, failed, error);
    if (why) {
      gsize len;
      const char *text = g_bytes_get_data(why, &len);
      return cohort_fail(error, G_FILE_ERROR, G_FILE_ERROR_FAILED, "%.*s", (int)len, text);
    }
    if (error && *error)
      return FALSE;
    if (stopping(ph))
      return stopped_error(ph, error);
    g_autoptr(GError) local = NULL;
    if (cohort_store_wait(store, (const char *const *)keys->pdata, POLL_S, &local))
      return TRUE;
    if (!g_error_matches(local, COHORT_DIST_ERROR, COHORT_DIST_ERROR_TIMEOUT)) {
      g_propagate_error(error, g_steal_pointer(&local));
      return FALSE;
    }
    if (!report(ph, FALSE, error))
      return FALSE;
  }
}

/* Every rank's shares to every rank, as one table in data set order (bad images left out). */
static CohortLatentTable *gather(Phase *ph, GError **error)
{
  size_t per = (size_t)ph->variants * ph->D;
  gsize W = ph->ddl ? (gsize)ph->world : 1;
  g_autofree float *all = g_try_new(float, W * ph->share * (per + 1));
  if (!all) {
    cohort_fail(error, G_FILE_ERROR, G_FILE_ERROR_NOMEM, "out of memory for %zu latents",
                (size_t)ph->n);
    return NULL;
  }
  if (ph->ddl) {
    /* [mine | bad] of every rank, side by side */
    g_autofree float *send = g_new(float, ph->share *(per + 1));
    memcpy(send, ph->mine, ph->share * per * sizeof(float));
    memcpy(send + ph->share * per, ph->bad, ph->share * sizeof(float));
    if (!cohort_train_dist_all_gather_host(ph->r->dist, send, ph->share * (per + 1) * 4, all,
                                           error))
      return NULL;
  } else {
    if (ph->rank == 0) {
      memcpy(all, ph->mine, ph->share * per * sizeof(float));
      memcpy(all + ph->share * per, ph->bad, ph->share * sizeof(float));
    }
    if (!cohort_train_dist_broadcast_host(ph->r->dist, all, ph->share * (per + 1) * 4, error))
      return NULL;
  }
  CohortLatentTable *t = g_new0(CohortLatentTable, 1);
  t->variants = ph->variants;
  t->channels = ph->L;
  t->size = ph->s;
  t->values = g_new(float, MAX(ph->n, 1) * per);
  t->labels = g_new(int, MAX(ph->n, 1));
  t->paths = g_new0(char *, ph->n + 1);
  g_autofree gboolean *good = g_new0(gboolean, MAX(ph->n, 1));
  t->classes = g_strdupv((char **)cohort_latent_files_classes(ph->files));
  for (gsize q = 0; q < W; q++) {
    const float *block = all + q * ph->share * (per + 1);
    for (gsize pos = 0; pos < count_of(ph, (int)q); pos++)
      if (block[ph->share * per + pos] == 0.0f) {
        gsize i = index_of(ph, pos, (int)q);
        memcpy(t->values + i * per, block + pos * per, per * sizeof(float));
        good[i] = TRUE;
      }
  }
  /* Close the gaps of bad images, keeping the data set's order. */
  for (gsize i = 0; i < ph->n; i++)
    if (good[i]) {
      memmove(t->values + t->n * per, t->values + i * per, per * sizeof(float));
      t->labels[t->n] = cohort_latent_files_label(ph->files, i);
      t->paths[t->n++] = g_strdup(cohort_latent_files_path(ph->files, i));
    }
  return t;
}

/* A failure of this rank, where the waiting ranks look for one. */
static void publish_failure(const Phase *ph, const GError *e)
{
  CohortStore *store = ph->r->opts->store;
  if (!store || ph->world < 2 || g_error_matches(e, COHORT_RANK_RUN_STOPPED, 0))
    return;
  g_autofree char *key = store_key(ph, "failed");
  g_autofree char *msg =
      g_strdup_printf("rank %d could not cache its latents: %s", ph->rank, e->message);
  cohort_store_set(store, key, msg, strlen(msg), NULL);
}

static void log_done(Phase *ph, const char *folder, const char *cache_dir, gsize n_table)
{
  CohortRankRun *r = ph->r;
  if (ph->rank != 0)
    return;
  double secs = (g_get_monotonic_time() - ph->t0) / 1e6;
  guint64 encoded = ph->ddl ? ph->reported_encoded : ph->encoded;
  CohortStore *store = r->opts->store;
  if (store && ph->ddl && ph->world > 1) {
    g_autofree char *ke = store_key(ph, "encoded");
    gint64 te = 0;
    if (cohort_store_add(store, ke, 0, &te, NULL))
      encoded = (guint64)te;
  }
  cohort_progress_log(r->progress, "info",
                      "latents of %s: %zu images (%zu left out as unreadable), %" G_GUINT64_FORMAT
                      " encoded and %" G_GUINT64_FORMAT " from the cache in %.1f s by %d rank%s; "
                      "cache in %s%s",
                      folder, (size_t)n_table, (size_t)(ph->n - n_table), encoded,
                      (guint64)ph->n - (guint64)(ph->n - n_table) - encoded, secs,
                      ph->ddl ? ph->world : 1, ph->ddl && ph->world > 1 ? "s" : "", cache_dir,
                      ph->ddl && ph->world > 1 ? " (and the other ranks' rank-N folders)" : "");
}

CohortDataSource *cohort_rank_run_open_latents(CohortRankRun *r, const char *which,
                                               const char *path, const char *cache_dir,
                                               GError **error)
{
  const CohortConfig *cfg = r->cfg;
  const CohortTrainOptions *o = r->opts;
  int s, L;
  if (!cohort_dit_latent_geometry(cfg, o->config_source, &s, &L, error))
    return NULL;
  g_autofree char *folder = cohort_resolve_path(path);
  Phase ph = {.r = r,
              .which = which,
              .world = o->world_size,
              .rank = o->rank,
              .ddl = cfg->distributed_data_loading && o->world_size > 1,
              .variants = cfg->augment == COHORT_AUGMENT_FLIP ? 2 : 1,
              .L = L,
              .s = s,
              .D = (size_t)L * s * s,
              .t0 = g_get_monotonic_time()};
  ph.files = cohort_latent_files_scan(folder, cfg->image_size, cfg->image_channels,
                                      cfg->skip_bad_images, error);
  if (!ph.files)
    return NULL;
  ph.n = cohort_latent_files_len(ph.files);
  ph.share = count_of(&ph, 0);
  ph.my_count = count_of(&ph, ph.rank);
  ph.mine = g_try_new0(float, MAX(ph.share, 1) * ph.variants * ph.D);
  ph.bad = g_new0(float, MAX(ph.share, 1));
  GError *local = NULL;
  CohortLatentTable *table = NULL;
  if (!ph.mine)
    cohort_fail(&local, G_FILE_ERROR, G_FILE_ERROR_NOMEM, "%s: out of memory for %zu latents",
                folder, (size_t)ph.share);
  else if (report(&ph, FALSE, &local) && (ph.my_count == 0 || encode_share(&ph, cache_dir, &local)))
    report(&ph, FALSE, &local); /* the last counts, before this rank says it is ready */
  if (local)
    publish_failure(&ph, local);
  if (!local && wait_all(&ph, &local) && report(&ph, TRUE, &local))
    table = gather(&ph, &local);
  if (table)
    log_done(&ph, folder, cache_dir, table->n);
  g_free(ph.mine);
  g_free(ph.bad);
  cohort_latent_files_free(ph.files);
  if (!table) {
    g_propagate_error(error, local);
    return NULL;
  }
  if (table->n == 0) {
    cohort_latent_table_free(table);
    cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "%s: no readable image (all were left out as unreadable)", folder);
    return NULL;
  }
  CohortDataSource *src = cohort_data_source_new_latents(cfg, table);
  /* the text layout: each latent trains with its image's caption (encoded by the caption
   * phase that follows, engine/train/text-embeds.h) */
  if (cfg->text_encoder && *cfg->text_encoder &&
      !cohort_data_source_read_latent_captions(src, cfg, folder, error))
    g_clear_pointer(&src, cohort_data_source_free);
  return src;
}

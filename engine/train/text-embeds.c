/* The caption phase of set-up (text_encoder); see text-embeds.h. */
#include "engine/train/text-embeds.h"

#include <string.h>

#include "data/latent-cache.h"
#include "engine/base/error.h"
#include "engine/models/text-encoder.h"
#include "engine/progress/protocol.h"
#include "engine/train/latents.h" /* COHORT_RANK_RUN_STOPPED */
#include "engine/train/test-hooks.h"

typedef struct {
  CohortRankRun *r;
  CohortTextEncoder *enc;
  const char *which; /* "train" or "val" */
  int W, me;         /* ranks sharing the work, and this one's place among them */
  int M, D;
  gsize rec; /* floats per record: 1 + M·D */
  guint encoded, cached;
} Phase;

/* The cache key of `caption`: SHA-256 of the fingerprint, a NUL, the caption. */
static void caption_key(const Phase *ph, const char *caption, guint8 key[32])
{
  g_autoptr(GChecksum) sum = g_checksum_new(G_CHECKSUM_SHA256);
  const char *fp = cohort_text_encoder_fingerprint(ph->enc);
  g_checksum_update(sum, (const guchar *)fp, (gssize)strlen(fp) + 1);
  g_checksum_update(sum, (const guchar *)caption, (gssize)strlen(caption));
  gsize len = 32;
  g_checksum_get_digest(sum, key, &len);
}

static gint by_bytes(gconstpointer a, gconstpointer b)
{
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The distinct captions of `s` and "", in byte order (the same list on every rank). */
static GPtrArray *distinct_captions(CohortDataSource *s)
{
  g_autoptr(GHashTable) set = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
  g_hash_table_add(set, g_strdup(""));
  guint64 n = cohort_data_source_count(s);
  for (guint64 i = 0; i < n; i++)
    g_hash_table_add(set, cohort_data_source_caption(s, i, -1));
  GPtrArray *out = g_ptr_array_new_with_free_func(g_free);
  GHashTableIter it;
  gpointer key;
  g_hash_table_iter_init(&it, set);
  while (g_hash_table_iter_next(&it, &key, NULL)) {
    g_ptr_array_add(out, key);
    g_hash_table_iter_steal(&it);
  }
  g_ptr_array_sort(out, by_bytes);
  return out;
}

/* This rank's share of `caps` into `mine` (record k: caption me + k·W), from the cache or
 * encoded and appended to it. */
static gboolean encode_share(Phase *ph, GPtrArray *caps, const char *cache_dir, float *mine,
                             GError **error)
{
  g_autofree char *name = g_strdup_printf("text-%s.bin", ph->which);
  g_autofree char *path = g_build_filename(cache_dir, name, NULL);
  g_autoptr(CohortLatentCache) cache = cohort_latent_cache_open(path, ph->rec, error);
  if (!cache)
    return FALSE;
  g_autoptr(GHashTable) keep =
      g_hash_table_new_full(g_bytes_hash, g_bytes_equal, (GDestroyNotify)g_bytes_unref, NULL);
  volatile int *stop = ph->r->opts->stop_flag;
  CohortRankPhase was = cohort_phase_enter(COHORT_RANK_PHASE_CACHING);
  gboolean ok = TRUE;
  for (guint i = (guint)ph->me, k = 0; ok && i < caps->len; i += (guint)ph->W, k++) {
    cohort_phase_tick(); /* ranks waiting for this one see it alive */
    if (stop && *stop) {
      ok = cohort_latent_cache_sync(cache, NULL) &&
           cohort_fail(error, COHORT_RANK_RUN_STOPPED, 0,
                       "stopped while encoding the captions of the %s data; the cache keeps what "
                       "was encoded",
                       ph->which);
      break;
    }
    guint8 key[32];
    caption_key(ph, caps->pdata[i], key);
    g_hash_table_add(keep, g_bytes_new(key, sizeof key));
    float *rec = mine + (gsize)k * ph->rec;
    const float *hit = cohort_latent_cache_lookup(cache, key);
    if (hit) {
      memcpy(rec, hit, ph->rec * sizeof(float));
      ph->cached++;
      continue;
    }
    g_autofree float *values = NULL;
    int len;
    if (!cohort_text_encoder_encode(ph->enc, caps->pdata[i], &values, &len, error)) {
      ok = FALSE;
      break;
    }
    memset(rec, 0, ph->rec * sizeof(float));
    rec[0] = (float)len; /* exact: len <= 4096 */
    if (len)
      memcpy(rec + 1, values, (gsize)len * ph->D * sizeof(float));
    ph->encoded++;
    ok = cohort_latent_cache_append(cache, key, rec, error);
    if (ok)
      cohort_test_hooks_kill(ph->r->opts->rank, ph->encoded, "captions");
  }
  ok = ok && cohort_latent_cache_sync(cache, error) &&
       cohort_latent_cache_compact(cache, keep, error);
  cohort_phase_enter(was);
  return ok;
}

/* Every rank's records to every rank, then the table of all captions. */
static CohortTextTable *gather(Phase *ph, GPtrArray *caps, float *mine, gsize share, GError **error)
{
  g_autofree float *all = NULL;
  if (ph->W > 1) {
    all = g_try_new(float, share * ph->rec * ph->W);
    if (!all) {
      cohort_fail(error, G_FILE_ERROR, G_FILE_ERROR_NOMEM,
                  "out of memory for the embeddings of %u captions", caps->len);
      return NULL;
    }
    if (!cohort_train_dist_all_gather_host(ph->r->dist, mine, share * ph->rec * sizeof(float), all,
                                           error))
      return NULL;
  }
  const float *from = ph->W > 1 ? all : mine;
  CohortTextTable *t = cohort_text_table_new(ph->D, ph->M);
  for (guint i = 0; i < caps->len; i++) {
    const float *rec = from + ((gsize)(i % ph->W) * share + i / ph->W) * ph->rec;
    int len = (int)rec[0];
    cohort_text_table_insert(t, caps->pdata[i], len,
                             len ? g_memdup2(rec + 1, (gsize)len * ph->D * sizeof(float)) : NULL);
  }
  return t;
}

static gboolean encode_source(CohortRankRun *r, CohortTextEncoder *enc, CohortDataSource *s,
                              const char *key, const char *which, const char *cache_dir,
                              GError **error)
{
  const CohortTrainOptions *o = r->opts;
  if (!cohort_data_source_has_captions(s))
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "%s: key \"text_encoder\" needs captioned images; allowed: image folders "
                       "with IMAGE.txt captions or a metadata.jsonl",
                       key);
  if (o->rank == 0) {
    g_autofree char *summary = cohort_captions_summary(cohort_data_source_captions(s));
    cohort_progress_log(r->progress, COHORT_LEVEL_INFO, "%s: %s", key, summary);
  }
  gboolean ddl = r->cfg->distributed_data_loading && o->world_size > 1;
  Phase ph = {.r = r,
              .enc = enc,
              .which = which,
              .W = ddl ? o->world_size : 1,
              .me = ddl ? o->rank : 0,
              .M = r->cfg->max_text_tokens,
              .D = cohort_text_encoder_width(enc)};
  ph.rec = 1 + (gsize)ph.M * ph.D;
  g_autoptr(GPtrArray) caps = distinct_captions(s);
  gsize share = (caps->len + (guint)ph.W - 1) / (guint)ph.W;
  g_autofree float *mine = g_try_new0(float, share *ph.rec);
  GError *local = NULL;
  gboolean ok = mine != NULL;
  if (!ok)
    cohort_fail(&local, G_FILE_ERROR, G_FILE_ERROR_NOMEM,
                "out of memory for the embeddings of %zu captions", (size_t)share);
  ok = ok && encode_share(&ph, caps, cache_dir, mine, &local);
  /* under distributed_data_loading every rank is here at once: all fail together */
  if (ddl && !cohort_rank_run_all_ok(r, ok, local, "encode its captions", error))
    return FALSE;
  if (!ok) {
    g_propagate_error(error, local);
    return FALSE;
  }
  CohortTextTable *table = gather(&ph, caps, mine, share, error);
  if (!table)
    return FALSE;
  guint counts[2] = {ph.encoded, ph.cached};
  if (ddl) { /* the whole set's figures, for rank 0's line */
    double sums[2] = {ph.encoded, ph.cached};
    if (!cohort_train_dist_sum(r->dist, sums, 2, error)) {
      cohort_text_table_free(table);
      return FALSE;
    }
    counts[0] = (guint)sums[0], counts[1] = (guint)sums[1];
  }
  if (o->rank == 0)
    cohort_progress_log(r->progress, COHORT_LEVEL_INFO,
                        "%s: %u distinct captions: %u encoded, %u from the cache (%s; %s)", key,
                        caps->len, counts[0], counts[1], cohort_text_encoder_fingerprint(enc),
                        cache_dir);
  cohort_data_source_set_text(s, table);
  return TRUE;
}

gboolean cohort_rank_run_encode_captions(CohortRankRun *r, const char *cache_dir, GError **error)
{
  g_autoptr(CohortTextEncoder) enc = cohort_text_encoder_open(r->be, r->cfg, error);
  if (!enc)
    return FALSE;
  return encode_source(r, enc, r->train, "train_data", "train", cache_dir, error) &&
         (!r->val || encode_source(r, enc, r->val, "val_data", "val", cache_dir, error));
}

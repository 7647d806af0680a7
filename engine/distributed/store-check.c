/* Start-of-job checks over the store: every rank arrives, and runs the same config. */
#include "engine/distributed/store.h"

#include <string.h>

/* "2, 3" or "4-60, 62" (runs of three or more as ranges), at most a dozen items. */
static char *format_ranks(const gboolean *missing, int world, int *count)
{
  GString *s = g_string_new(NULL);
  int items = 0;
  *count = 0;
  for (int r = 0; r < world; r++) {
    if (!missing[r])
      continue;
    int end = r;
    while (end + 1 < world && missing[end + 1])
      end++;
    *count += end - r + 1;
    for (int k = r; k <= end && items < 12; k++) {
      if (end - r >= 2) {
        g_string_append_printf(s, "%s%d-%d", items ? ", " : "", r, end);
        items++;
        break;
      }
      g_string_append_printf(s, "%s%d", items ? ", " : "", k);
      items++;
    }
    r = end;
  }
  if (items >= 12)
    g_string_append(s, ", …");
  return g_string_free(s, FALSE);
}

/* After a rendezvous wait timed out: replaces the error, which names store keys, with one
 * that names the ranks that never published their config. Returns how many did not, -1 when
 * that cannot be told. */
static int name_missing_ranks(CohortStore *store, const CohortDistEnv *env, double timeout_s,
                              GError **error)
{
  if (error == NULL || *error == NULL ||
      !g_error_matches(*error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_TIMEOUT))
    return -1;
  g_autofree gboolean *missing = g_new0(gboolean, env->world_size);
  for (int r = 0; r < env->world_size; r++) {
    g_autofree char *key = g_strdup_printf("config/hash/%d", r);
    gboolean exists = TRUE;
    if (!cohort_store_check(store, key, &exists, NULL))
      return -1; /* the store is gone: the timeout is the better message */
    missing[r] = !exists;
  }
  int n = 0;
  g_autofree char *ranks = format_ranks(missing, env->world_size, &n);
  g_clear_error(error);
  if (n == 0) {
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_TIMEOUT,
                "rendezvous timed out after %g s: every rank joined, but rank 0 gave no verdict "
                "on their configs",
                timeout_s);
    return 0;
  }
  g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_TIMEOUT,
              "rendezvous timed out after %g s: rank%s %s of %d never joined; check that every "
              "node started its ranks, that they reach the master at %s:%d, and that they share "
              "COHORT_JOB_TOKEN",
              timeout_s, n > 1 ? "s" : "", ranks, env->world_size, env->master_addr,
              env->master_port);
  return n;
}

/* The config as the ranks compare it: node_rank is the one key that differs between nodes. */
static CohortConfig *comparable(const CohortConfig *cfg)
{
  CohortConfig *c = cohort_config_copy(cfg);
  c->node_rank = 0;
  return c;
}

/* Rank 0: compares everyone's published config with its own; returns the verdict text, "ok"
 * when all agree. When ranks never arrive, *n_missing says how many. */
static char *judge(CohortStore *store, const CohortDistEnv *env, const char *own_hash,
                   const CohortConfig *own, double timeout_s, int *n_missing, GError **error)
{
  g_autoptr(GPtrArray) keys = g_ptr_array_new_with_free_func(g_free);
  for (int r = 0; r < env->world_size; r++)
    g_ptr_array_add(keys, g_strdup_printf("config/hash/%d", r));
  g_ptr_array_add(keys, NULL);
  if (!cohort_store_wait(store, (const char *const *)keys->pdata, timeout_s, error)) {
    *n_missing = name_missing_ranks(store, env, timeout_s, error);
    return NULL;
  }

  g_autoptr(GString) ranks = g_string_new(NULL);
  g_autoptr(GPtrArray) diff_keys = g_ptr_array_new_with_free_func(g_free);
  int n_bad = 0;
  for (int r = 1; r < env->world_size; r++) {
    g_autoptr(GBytes) h = cohort_store_get(store, keys->pdata[r], timeout_s, error);
    if (h == NULL)
      return NULL;
    if (g_bytes_get_size(h) == strlen(own_hash) &&
        memcmp(g_bytes_get_data(h, NULL), own_hash, strlen(own_hash)) == 0)
      continue;
    n_bad++;
    g_string_append_printf(ranks, "%s%d", ranks->len ? ", " : "", r);
    g_autofree char *key = g_strdup_printf("config/json/%d", r);
    g_autoptr(GBytes) json = cohort_store_get(store, key, timeout_s, error);
    if (json == NULL)
      return NULL;
    g_autofree char *src = g_strdup_printf("rank %d's config", r);
    g_autoptr(GError) perr = NULL;
    g_autoptr(CohortConfig) other = NULL;
    /* The strict reader (engine/base/json-read.h) refuses deep nesting before parsing: a value
     * nested a million deep is reported as unreadable, it cannot exhaust rank 0's stack. */
    other = cohort_config_load_data(g_bytes_get_data(json, NULL), (gssize)g_bytes_get_size(json),
                                    src, &perr);
    if (other == NULL) {
      g_ptr_array_add(diff_keys, g_strdup_printf("(unreadable: %s)", perr->message));
      continue;
    }
    g_autoptr(CohortConfig) cmp = comparable(other);
    g_auto(GStrv) diff = cohort_config_diff(own, cmp);
    for (int i = 0; diff != NULL && diff[i] != NULL; i++) {
      gboolean dup = FALSE;
      for (guint k = 0; k < diff_keys->len; k++)
        dup = dup || strcmp(diff_keys->pdata[k], diff[i]) == 0;
      if (!dup)
        g_ptr_array_add(diff_keys, g_strdup(diff[i]));
    }
  }
  if (n_bad == 0)
    return g_strdup("ok");
  g_autoptr(GString) keys_text = g_string_new(NULL);
  for (guint k = 0; k < diff_keys->len; k++)
    g_string_append_printf(keys_text, "%s%s", k ? ", " : "", (char *)diff_keys->pdata[k]);
  return g_strdup_printf("rank%s %s run%s a different config from rank 0 (keys differ: %s); "
                         "every rank must load the same config",
                         n_bad > 1 ? "s" : "", ranks->str, n_bad > 1 ? "" : "s",
                         keys_text->len ? keys_text->str : "none reported");
}

/* The verdict rank 0 publishes when ranks never arrived: this, then the message naming them,
 * so the ranks that did arrive report the same. */
#define TIMEOUT_VERDICT "timeout\n"

/* Rank 0 hosts the store and is about to exit: gives the `readers` other ranks a few seconds
 * to read the verdict first, so every rank reports the same reason, not a lost connection. */
static void wait_for_readers(CohortStore *store, gint64 readers, double timeout_s)
{
  gint64 deadline = g_get_monotonic_time() + (gint64)(MIN(timeout_s, 10.0) * G_USEC_PER_SEC);
  gint64 read = 0;
  while (read < readers && g_get_monotonic_time() < deadline) {
    if (!cohort_store_add(store, "config/verdict_read", 0, &read, NULL))
      break;
    g_usleep(10000);
  }
}

/* Rank 0's verdict, published; NULL with an error when there is none to publish. */
static char *rank0_verdict(CohortStore *store, const CohortDistEnv *env, const char *hash,
                           const CohortConfig *own, double timeout_s, GError **error)
{
  int n_missing = -1;
  GError *local = NULL;
  char *verdict = judge(store, env, hash, own, timeout_s, &n_missing, &local);
  if (verdict == NULL && n_missing > 0)
    verdict = g_strconcat(TIMEOUT_VERDICT, local->message, NULL);
  if (verdict == NULL) {
    g_propagate_error(error, local);
    return NULL;
  }
  g_clear_error(&local);
  if (!cohort_store_set(store, "config/verdict", verdict, strlen(verdict), error)) {
    g_free(verdict);
    return NULL;
  }
  if (strcmp(verdict, "ok") != 0)
    wait_for_readers(store, env->world_size - 1 - MAX(n_missing, 0), timeout_s);
  return verdict;
}

gboolean cohort_dist_check_config(CohortStore *store, const CohortDistEnv *env,
                                  const CohortConfig *cfg, double timeout_s, GError **error)
{
  g_autoptr(CohortConfig) own = comparable(cfg);
  g_autofree char *hash = cohort_config_hash(own);
  g_autofree char *json = cohort_config_to_json(own, FALSE);
  g_autofree char *hash_key = g_strdup_printf("config/hash/%d", env->rank);
  g_autofree char *json_key = g_strdup_printf("config/json/%d", env->rank);
  /* JSON first: rank 0 reads it only after it has seen the hash. */
  if (env->rank != 0 && !cohort_store_set(store, json_key, json, strlen(json), error))
    return FALSE;
  if (!cohort_store_set(store, hash_key, hash, strlen(hash), error))
    return FALSE;

  g_autofree char *verdict = NULL;
  if (env->rank == 0) {
    verdict = rank0_verdict(store, env, hash, own, timeout_s, error);
    if (verdict == NULL)
      return FALSE;
  } else {
    g_autoptr(GBytes) v = cohort_store_get(store, "config/verdict", timeout_s, error);
    if (v == NULL) {
      name_missing_ranks(store, env, timeout_s, error);
      return FALSE;
    }
    verdict = g_strndup(g_bytes_get_data(v, NULL), g_bytes_get_size(v));
    /* Tell rank 0 this rank has the verdict, so it may stop the store. */
    if (strcmp(verdict, "ok") != 0)
      cohort_store_add(store, "config/verdict_read", 1, NULL, NULL);
  }
  if (g_str_has_prefix(verdict, TIMEOUT_VERDICT)) {
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_TIMEOUT, "%s",
                verdict + strlen(TIMEOUT_VERDICT));
    return FALSE;
  }
  if (strcmp(verdict, "ok") != 0) {
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_MISMATCH, "%s", verdict);
    return FALSE;
  }
  return TRUE;
}

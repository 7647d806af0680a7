/* Text data with a tokenizer: the run's tokenizer, and the text's tokens in the workspace
 * cache (data/token-cache.h), made on first use and reused while the files and the tokenizer
 * are unchanged.
 *
 * Without distributed_data_loading, rank 0 tokenizes everything on all the machine's cores
 * into <workspace>/cache while the other ranks wait (open_data's barrier), then every rank
 * reads that folder. With it, each rank keeps its own cache (<workspace>/cache/rank-N), which
 * need not be on a shared disk: rank r tokenizes part r of the text, then each rank sends its
 * part to the others through the collectives (broadcast from its rank), so every rank ends
 * with the whole token stream, identical to what one process makes. */
#include "engine/train/text-tokens.h"

#include <string.h>
#include <unistd.h>

#include "data/chat-data.h"
#include "data/token-cache.h"
#include "engine/base/error.h"
#include "engine/base/fileio.h"

/* Bytes of a part sent per broadcast. */
#define SEND_CHUNK (16u << 20)
/* Seconds between tokenize events. */
#define EVENT_EVERY_US 500000

/* The tokenizer of this rank, checked against vocab_size. */
static gboolean load_here(CohortRankRun *r, const char *path, GError **error)
{
  const CohortConfig *cfg = r->cfg;
  if (!path && cfg->data_format == COHORT_DATA_TEXT && cfg->vocab_size != 256) {
    g_autofree char *init = cohort_resolve_path(cfg->init_from);
    if (!g_file_test(init, G_FILE_TEST_EXISTS))
      return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                         "init_from %s: no such file or folder; a Hugging Face GPT-2 folder "
                         "(config.json, model.safetensors, tokenizer files) is expected here",
                         init);
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "key \"vocab_size\": %d needs a tokenizer for text, and init_from %s "
                       "holds none (tokenizer.json, or vocab.json and merges.txt); allowed: "
                       "vocab_size 256 for byte-level text, or a tokenizer (key \"tokenizer\")",
                       cfg->vocab_size, cfg->init_from);
  }
  if (!path)
    return TRUE;
  r->tokenizer = cohort_tokenizer_load(path, error);
  if (!r->tokenizer) {
    g_prefix_error(error, "tokenizer: ");
    return FALSE;
  }
  /* Every id must have a row of the embedding; a model may have more rows than its tokenizer
   * has tokens (Qwen's embeddings are padded: Qwen3-0.6B's 151936 rows for 151669 tokens). */
  int n = cohort_tokenizer_vocab_size(r->tokenizer);
  if (n > cfg->vocab_size)
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "tokenizer %s has %d tokens but key \"vocab_size\" is %d; allowed: "
                       "vocab_size %d (the tokenizer's) or more",
                       path, n, cfg->vocab_size, n);
  return TRUE;
}

gboolean cohort_rank_run_load_tokenizer(CohortRankRun *r, GError **error)
{
  g_autofree char *path = cohort_config_tokenizer_path(r->cfg);
  GError *local = NULL;
  gboolean ok = load_here(r, path, &local);
  if (!cohort_rank_run_all_ok(r, ok, local, "load the tokenizer", error))
    return FALSE;
  if (!r->tokenizer)
    return TRUE;
  /* Ranks that tokenize their own shares must encode alike: the same files everywhere. */
  char sha[65];
  g_strlcpy(sha, cohort_tokenizer_sha256(r->tokenizer), sizeof sha);
  if (!cohort_train_dist_broadcast_host(r->dist, sha, sizeof sha, error))
    return FALSE;
  gboolean same = strcmp(sha, cohort_tokenizer_sha256(r->tokenizer)) == 0;
  if (!same)
    cohort_fail(&local, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "rank %d: tokenizer %s has sha256 %s but rank 0's has %s; every rank needs the "
                "same tokenizer files",
                r->opts->rank, path, cohort_tokenizer_sha256(r->tokenizer), sha);
  if (!cohort_rank_run_all_ok(r, same, local, "find rank 0's tokenizer", error))
    return FALSE;
  cohort_progress_log(
      r->progress, COHORT_LEVEL_INFO, "tokenizer: %s (%s, %d tokens, sha256 %.12s…)", path,
      cohort_tokenizer_kind(r->tokenizer), cohort_tokenizer_vocab_size(r->tokenizer),
      cohort_tokenizer_sha256(r->tokenizer));
  return TRUE;
}

typedef struct {
  CohortRankRun *r;
  const char *key, *path;
  guint64 source_bytes;
  guint n_parts;
  gint64 last_us;
} Reporter;

/* The tokenize event (rank 0, throttled) and the live status line. */
static void report(const CohortTokenizeProgress *p, gpointer data)
{
  Reporter *rep = data;
  gint64 now = g_get_monotonic_time();
  gboolean last = p->bytes_done >= p->bytes_total;
  if (!last && now - rep->last_us < EVENT_EVERY_US)
    return;
  rep->last_us = now;
  double mb_s = p->elapsed_s > 0 ? p->bytes_done / 1e6 / p->elapsed_s : 0;
  JsonObject *f = json_object_new();
  json_object_set_string_member(f, COHORT_FIELD_DATA, rep->key);
  json_object_set_string_member(f, COHORT_FIELD_PATH, rep->path);
  json_object_set_int_member(f, COHORT_FIELD_DONE_BYTES, (gint64)p->bytes_done);
  json_object_set_int_member(f, COHORT_FIELD_TOTAL_BYTES, (gint64)p->bytes_total);
  json_object_set_int_member(f, COHORT_FIELD_SOURCE_BYTES, (gint64)rep->source_bytes);
  json_object_set_int_member(f, COHORT_FIELD_RANKS, rep->n_parts);
  json_object_set_int_member(f, COHORT_FIELD_TOKENS, (gint64)p->tokens);
  json_object_set_int_member(f, COHORT_FIELD_DOCUMENTS, (gint64)p->documents);
  json_object_set_double_member(f, COHORT_FIELD_MB_PER_S, mb_s);
  if (mb_s > 0)
    json_object_set_double_member(f, COHORT_FIELD_ETA_S,
                                  (p->bytes_total - p->bytes_done) / 1e6 / mb_s);
  cohort_progress_emit(rep->r->progress, COHORT_EVENT_TOKENIZE, f);
  cohort_progress_status(rep->r->progress, last, "tokenizing %s: %.1f MB of %.1f MB, %.1f MB/s",
                         rep->key, p->bytes_done / 1e6, p->bytes_total / 1e6, mb_s);
}

/* Part `root`'s files, from rank `root` to every rank's own folder. */
typedef struct {
  CohortTrainDist *dist;
  int root;
  const guint8 *data; /* the root's file; NULL elsewhere */
  guint64 size;
  GError **error;
} Transfer;

static gboolean transfer_write(int fd, gpointer data)
{
  Transfer *t = data;
  g_autofree guint8 *buf = g_malloc(MIN(t->size, SEND_CHUNK) + 1);
  for (guint64 at = 0; at < t->size; at += SEND_CHUNK) {
    gsize n = (gsize)MIN(SEND_CHUNK, t->size - at);
    if (t->data)
      memcpy(buf, t->data + at, n);
    if (!cohort_train_dist_broadcast_from(t->dist, buf, n, t->root, t->error))
      return FALSE;
    if (!t->data && !cohort_write_all(fd, buf, n))
      return FALSE;
  }
  return TRUE;
}

/* Every part's files reach every rank: for each part, its rank broadcasts how many files it
 * has, then each file's name and size and bytes. */
static gboolean exchange_parts(CohortRankRun *r, const char *folder, GError **error)
{
  int me = r->opts->rank;
  for (int root = 0; root < r->opts->world_size; root++) {
    g_autoptr(GPtrArray) mine =
        me == root ? cohort_token_cache_part_files(folder, root, error) : NULL;
    if (me == root && !mine)
      return FALSE;
    guint64 n_files = mine ? mine->len : 0;
    if (!cohort_train_dist_broadcast_from(r->dist, &n_files, sizeof n_files, root, error))
      return FALSE;
    for (guint64 i = 0; i < n_files; i++) {
      struct {
        char name[64];
        guint64 size;
      } head = {"", 0};
      g_autoptr(GMappedFile) map = NULL;
      if (mine) {
        g_autofree char *path = g_build_filename(folder, mine->pdata[i], NULL);
        map = g_mapped_file_new(path, FALSE, error);
        if (!map)
          return FALSE;
        g_strlcpy(head.name, mine->pdata[i], sizeof head.name);
        head.size = g_mapped_file_get_length(map);
      }
      if (!cohort_train_dist_broadcast_from(r->dist, &head, sizeof head, root, error))
        return FALSE;
      head.name[sizeof head.name - 1] = 0;
      Transfer t = {r->dist, root, map ? (const guint8 *)g_mapped_file_get_contents(map) : NULL,
                    head.size, error};
      g_autofree char *path = g_build_filename(folder, head.name, NULL);
      if (me == root) {
        if (!transfer_write(-1, &t))
          return FALSE;
      } else {
        GError *local = NULL;
        gboolean ok = cohort_write_atomic(path, transfer_write, &t, &local);
        /* A failed broadcast set *error already; a failed write is the file's. */
        if (!ok && !(error && *error))
          g_propagate_error(error, local);
        else
          g_clear_error(&local);
        if (!ok)
          return FALSE;
      }
    }
  }
  return TRUE;
}

/* Tokenizes this rank's part (or, alone, everything) into `folder`. */
static gboolean tokenize_part(CohortRankRun *r, const CohortTextSources *src, const char *folder,
                              guint k, guint n, int threads, const char *key, GError **error)
{
  Reporter rep = {r, key, cohort_text_sources_path(src, 0), cohort_text_sources_size(src), n, 0};
  CohortTokenizeProgress done = {0};
  g_autoptr(GPtrArray) not_utf8 = g_ptr_array_new_with_free_func(g_free);
  if (!cohort_token_cache_clear(folder, error) ||
      !cohort_token_cache_write_part(folder, src, r->tokenizer, k, n, threads, report, &rep, &done,
                                     not_utf8, error))
    return FALSE;
  cohort_progress_finish_line(r->progress);
  cohort_progress_log(r->progress, COHORT_LEVEL_INFO,
                      "%s: tokenized %.1f MB (%" G_GUINT64_FORMAT
                      " documents%s) into %" G_GUINT64_FORMAT " tokens in %.1f s",
                      key, done.bytes_done / 1e6, done.documents, n > 1 ? ", rank 0's share" : "",
                      done.tokens, done.elapsed_s);
  for (guint i = 0; i < not_utf8->len; i++)
    cohort_progress_log(r->progress, COHORT_LEVEL_WARNING,
                        "%s: not UTF-8; its bytes were tokenized as they are",
                        (const char *)not_utf8->pdata[i]);
  return TRUE;
}

/* Rank 0 tokenizes (when the cache lacks the tokens); the others wait in open_data. */
static gboolean tokenize_on_rank0(CohortRankRun *r, const CohortTextSources *src,
                                  const char *folder, const char *key, GError **error)
{
  if (r->opts->rank != 0 || cohort_token_cache_ready(folder, NULL))
    return TRUE;
  /* The others wait: this rank may use every core. */
  return tokenize_part(r, src, folder, 0, 1, 0, key, error) &&
         cohort_token_cache_seal(folder, error);
}

/* Each rank its part, then the exchange, unless every rank has the tokens already. */
static gboolean tokenize_shared(CohortRankRun *r, const CohortTextSources *src, const char *folder,
                                const char *key, GError **error)
{
  double missing = cohort_token_cache_ready(folder, NULL) ? 0 : 1;
  if (!cohort_train_dist_sum(r->dist, &missing, 1, error))
    return FALSE;
  if (missing == 0)
    return TRUE;
  int threads = cohort_train_threads(r->cfg, r->opts->local_world_size);
  GError *local = NULL;
  gboolean ok = tokenize_part(r, src, folder, (guint)r->opts->rank, (guint)r->opts->world_size,
                              threads, key, &local);
  return cohort_rank_run_all_ok(r, ok, local, "tokenize its share", error) &&
         exchange_parts(r, folder, error) && cohort_token_cache_seal(folder, error);
}

char *cohort_rank_run_text_tokens(CohortRankRun *r, const char *path, const char *key,
                                  const char *cache_dir, GError **error)
{
  g_autofree char *resolved = cohort_resolve_path(path);
  const char *paths[] = {resolved, NULL};
  gboolean shared = r->cfg->distributed_data_loading && r->opts->world_size > 1;
  GError *local = NULL;
  g_autoptr(CohortTextSources) src = cohort_text_sources_open(paths, &local);
  /* Ranks that share the work all need the files (a missing one would leave the others
   * waiting in the exchange). */
  if (shared ? !cohort_rank_run_all_ok(r, src != NULL, local, "read the text", error) : !src) {
    if (!shared)
      g_propagate_error(error, local);
    return NULL;
  }
  g_autofree char *folder = cohort_token_cache_folder(cache_dir, src, r->tokenizer);
  if (!(shared ? tokenize_shared(r, src, folder, key, error)
               : tokenize_on_rank0(r, src, folder, key, error)))
    return NULL;
  guint64 n = 0;
  if (r->opts->rank == 0 && cohort_token_cache_ready(folder, &n))
    cohort_progress_log(r->progress, COHORT_LEVEL_INFO, "%s: %" G_GUINT64_FORMAT " tokens in %s",
                        key, n, folder);
  return g_steal_pointer(&folder);
}

/* Builds the conversations' cache file when it is not there (or not whole). */
static gboolean chat_here(CohortRankRun *r, const char *path, const char *key, const char *file,
                          guint64 max_tokens, GError **error)
{
  g_autoptr(CohortChatSet) have = cohort_chat_set_load(file, r->cfg->vocab_size, NULL);
  if (have)
    return TRUE;
  gint64 t0 = g_get_monotonic_time();
  g_autoptr(CohortChatSet) set = cohort_chat_set_build(path, r->tokenizer, max_tokens, error);
  if (!set || !cohort_chat_set_save(set, file, error))
    return FALSE;
  guint64 tokens = 0, counted = 0, n = cohort_chat_set_count(set);
  for (guint64 i = 0; i < n; i++) {
    tokens += cohort_chat_set_tokens(set, i);
    counted += cohort_chat_set_counted(set, i);
  }
  cohort_progress_log(r->progress, COHORT_LEVEL_INFO,
                      "%s: %" G_GUINT64_FORMAT " conversations, %" G_GUINT64_FORMAT
                      " tokens (%" G_GUINT64_FORMAT " the assistant's) in %.1f s, in %s",
                      key, n, tokens, counted, (g_get_monotonic_time() - t0) / 1e6, file);
  return TRUE;
}

char *cohort_rank_run_chat_data(CohortRankRun *r, const char *path, const char *key,
                                const char *cache_dir, GError **error)
{
  if (!r->tokenizer) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "key \"data_format\": \"chat\" needs a tokenizer with a chat template (key "
                "\"tokenizer\")");
    return NULL;
  }
  g_autofree char *resolved = cohort_resolve_path(path);
  guint64 max_tokens = (guint64)r->cfg->seq_len + 1;
  gboolean shared = r->cfg->distributed_data_loading && r->opts->world_size > 1;
  GError *local = NULL;
  g_autofree char *file =
      cohort_chat_cache_file(cache_dir, resolved, r->tokenizer, max_tokens, &local);
  /* Each rank its own cache (distributed_data_loading), or rank 0 first while the others wait
   * in open_data and then read rank 0's file. */
  gboolean ok = file && (!shared && r->opts->rank != 0
                             ? TRUE
                             : chat_here(r, resolved, key, file, max_tokens, &local));
  if (shared ? !cohort_rank_run_all_ok(r, ok, local, "read the chat data", error) : !ok) {
    if (!shared)
      g_propagate_error(error, local);
    return NULL;
  }
  return g_steal_pointer(&file);
}

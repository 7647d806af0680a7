/* The tokenized-text cache; see token-cache.h. */
#include "data/token-cache.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>

#include "data/dataset.h"
#include "data/token-shards.h"
#include "engine/base/fileio.h"
#include "engine/base/json-read.h"

/* Bump when tokenizing would give other tokens for the same files and tokenizer. */
#define CACHE_VERSION 1
#define MANIFEST      "manifest.json"
/* Parts are cut into shards of at most this many tokens (a header counts in an int32). */
#define PART_SHARD_TOKENS (1u << 30)

char *cohort_token_cache_folder(const char *cache_dir, const CohortTextSources *src,
                                const CohortTokenizer *tok)
{
  g_autofree char *sources = cohort_text_sources_fingerprint(src);
  g_autofree char *key = g_strdup_printf("cohort-tokens %d\n%s\n%s\n", CACHE_VERSION,
                                         cohort_tokenizer_sha256(tok), sources);
  g_autofree char *sum = g_compute_checksum_for_string(G_CHECKSUM_SHA256, key, -1);
  g_autofree char *name = g_strdup_printf("tokens-%.16s", sum);
  return g_build_filename(cache_dir, name, NULL);
}

static gint by_name(gconstpointer a, gconstpointer b)
{
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

GPtrArray *cohort_token_cache_part_files(const char *folder, guint k, GError **error)
{
  g_autoptr(GDir) d = g_dir_open(folder, 0, error);
  if (!d)
    return NULL;
  g_autofree char *prefix = k == G_MAXUINT ? g_strdup("part-") : g_strdup_printf("part-%05u_", k);
  GPtrArray *names = g_ptr_array_new_with_free_func(g_free);
  const char *name;
  while ((name = g_dir_read_name(d)))
    if (g_str_has_prefix(name, prefix) && g_str_has_suffix(name, ".bin"))
      g_ptr_array_add(names, g_strdup(name));
  g_ptr_array_sort(names, by_name);
  return names;
}

/* The token count in a shard's header, or -1 when the file is not a shard of its size. */
static gint64 shard_tokens(const char *path)
{
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return -1;
  struct stat st;
  guint8 header[COHORT_SHARD_HEADER_BYTES];
  gboolean ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
                read(fd, header, sizeof header) == (ssize_t)sizeof header;
  close(fd);
  gsize n = 0;
  /* The size check needs the whole length: the header and the file's size suffice. */
  if (!ok || st.st_size < (off_t)sizeof header)
    return -1;
  gint32 count, magic;
  memcpy(&magic, header, sizeof magic);
  memcpy(&count, header + 8, sizeof count);
  count = GINT32_FROM_LE(count);
  guint64 width = GINT32_FROM_LE(magic) == COHORT_SHARD32_MAGIC ? 4 : 2;
  if (count < 0 || (guint64)st.st_size != sizeof header + width * (guint64)count)
    return -1;
  if (!cohort_token_shard_check(header, sizeof header + (gsize)width * (gsize)count, path, &n,
                                NULL))
    return -1;
  return (gint64)n;
}

gboolean cohort_token_cache_ready(const char *folder, guint64 *n_tokens)
{
  g_autofree char *path = g_build_filename(folder, MANIFEST, NULL);
  g_autofree char *text = NULL;
  gsize len = 0;
  if (!g_file_get_contents(path, &text, &len, NULL) || len > (1u << 20))
    return FALSE;
  g_autoptr(JsonNode) root = cohort_json_parse_strict(text, (gssize)len, path, 0, NULL);
  JsonObject *o = root && JSON_NODE_HOLDS_OBJECT(root) ? json_node_get_object(root) : NULL;
  JsonNode *files = o ? json_object_get_member(o, "files") : NULL;
  if (!files || !JSON_NODE_HOLDS_ARRAY(files) ||
      json_object_get_int_member_with_default(o, "version", 0) != CACHE_VERSION)
    return FALSE;
  g_autoptr(GPtrArray) have = cohort_token_cache_part_files(folder, G_MAXUINT, NULL);
  JsonArray *a = json_node_get_array(files);
  if (!have || have->len != json_array_get_length(a))
    return FALSE;
  guint64 total = 0;
  for (guint i = 0; i < have->len; i++) {
    JsonObject *f = json_array_get_object_element(a, i);
    const char *name = f ? json_object_get_string_member_with_default(f, "name", "") : "";
    gint64 want = f ? json_object_get_int_member_with_default(f, "tokens", -1) : -1;
    g_autofree char *file = g_build_filename(folder, name, NULL);
    if (strcmp(name, have->pdata[i]) != 0 || want < 0 || shard_tokens(file) != want)
      return FALSE;
    total += (guint64)want;
  }
  if (n_tokens)
    *n_tokens = total;
  return TRUE;
}

gboolean cohort_token_cache_clear(const char *folder, GError **error)
{
  cohort_remove_tree(folder);
  if (g_mkdir_with_parents(folder, 0755) != 0) {
    int e = errno;
    g_set_error(error, G_FILE_ERROR, g_file_error_from_errno(e), "%s: cannot create: %s", folder,
                g_strerror(e));
    return FALSE;
  }
  return TRUE;
}

typedef struct {
  CohortShardWriter *w;
  CohortTokenizeProgressFunc progress;
  gpointer user_data;
} PartJob;

static gboolean part_sink(const gint32 *ids, gsize n, gpointer data, GError **error)
{
  return cohort_shard_writer_add(((PartJob *)data)->w, ids, n, error);
}

static void part_progress(const CohortTokenizeProgress *p, gpointer data)
{
  PartJob *j = data;
  if (j->progress)
    j->progress(p, j->user_data);
}

gboolean cohort_token_cache_write_part(const char *folder, const CohortTextSources *src,
                                       const CohortTokenizer *tok, guint k, guint n, int threads,
                                       CohortTokenizeProgressFunc progress, gpointer user_data,
                                       CohortTokenizeProgress *done, GPtrArray *not_utf8,
                                       GError **error)
{
  g_autofree char *name = g_strdup_printf("part-%05u.bin", k);
  g_autofree char *out = g_build_filename(folder, name, NULL);
  g_autoptr(CohortShardWriter) w =
      cohort_shard_writer_new(out, cohort_tokenizer_vocab_size(tok), error);
  if (!w)
    return FALSE;
  PartJob pj = {w, progress, user_data};
  CohortTokenizeJob job = {.tokenizer = tok,
                           .threads = threads,
                           .begin = cohort_text_sources_cut(src, tok, k, n),
                           .end = cohort_text_sources_cut(src, tok, k + 1, n),
                           .sink = part_sink,
                           .progress = part_progress,
                           .user_data = &pj};
  return cohort_tokenize_run(src, &job, done, not_utf8, error) &&
         cohort_shard_writer_finish(w, PART_SHARD_TOKENS, 0, NULL, error);
}

gboolean cohort_token_cache_seal(const char *folder, GError **error)
{
  g_autoptr(GPtrArray) names = cohort_token_cache_part_files(folder, G_MAXUINT, error);
  if (!names)
    return FALSE;
  g_autoptr(GString) json = g_string_new(NULL);
  g_string_append_printf(json, "{\"version\": %d, \"files\": [", CACHE_VERSION);
  for (guint i = 0; i < names->len; i++) {
    g_autofree char *file = g_build_filename(folder, names->pdata[i], NULL);
    gint64 n = shard_tokens(file);
    if (n < 0) {
      g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_FORMAT,
                  "%s: not a complete token shard", file);
      return FALSE;
    }
    g_string_append_printf(json, "%s\n  {\"name\": \"%s\", \"tokens\": %" G_GINT64_FORMAT "}",
                           i ? "," : "", (const char *)names->pdata[i], n);
  }
  g_string_append(json, "\n]}\n");
  g_autofree char *path = g_build_filename(folder, MANIFEST, NULL);
  return cohort_write_file_atomic(path, json->str, json->len, error);
}

/* Whether `name` is a folder name cohort_token_cache_folder makes: tokens-<16 hex digits>. */
static gboolean cache_folder_name(const char *name)
{
  if (!g_str_has_prefix(name, "tokens-") || strlen(name) != 7 + 16)
    return FALSE;
  for (const char *p = name + 7; *p; p++)
    if (!g_ascii_isxdigit(*p) || g_ascii_isupper(*p))
      return FALSE;
  return TRUE;
}

/* Whether the folder holds only what a token cache holds: part-*.bin shards, manifest.json,
 * and temporary files of either; regular files, no folders. */
static gboolean holds_only_cache_files(const char *folder)
{
  g_autoptr(GDir) d = g_dir_open(folder, 0, NULL);
  if (!d)
    return FALSE;
  const char *name;
  while ((name = g_dir_read_name(d))) {
    g_autofree char *path = g_build_filename(folder, name, NULL);
    GStatBuf st;
    if (g_lstat(path, &st) != 0 || !S_ISREG(st.st_mode))
      return FALSE;
    gboolean ours = (g_str_has_prefix(name, "part-") &&
                     (g_str_has_suffix(name, ".bin") || strstr(name, ".bin.tmp-"))) ||
                    g_str_equal(name, MANIFEST) || g_str_has_prefix(name, MANIFEST ".tmp-");
    if (!ours)
      return FALSE;
  }
  return TRUE;
}

gboolean cohort_token_cache_prune(const char *cache_dir, const char *const *keep,
                                  GPtrArray *removed, GError **error)
{
  g_autoptr(GError) local = NULL;
  g_autoptr(GDir) d = g_dir_open(cache_dir, 0, &local);
  if (!d)
    return TRUE; /* no cache folder yet: nothing to prune */
  g_autoptr(GPtrArray) doomed = g_ptr_array_new_with_free_func(g_free);
  const char *name;
  while ((name = g_dir_read_name(d))) {
    if (!cache_folder_name(name))
      continue;
    g_autofree char *path = g_build_filename(cache_dir, name, NULL);
    gboolean kept = FALSE;
    for (guint i = 0; keep && keep[i] && !kept; i++) {
      g_autofree char *base = g_path_get_basename(keep[i]);
      kept = g_str_equal(base, name);
    }
    GStatBuf st;
    if (kept || g_lstat(path, &st) != 0 || !S_ISDIR(st.st_mode) || !holds_only_cache_files(path))
      continue;
    g_ptr_array_add(doomed, g_steal_pointer(&path));
  }
  for (guint i = 0; i < doomed->len; i++) {
    const char *path = doomed->pdata[i];
    cohort_remove_tree(path);
    if (g_file_test(path, G_FILE_TEST_EXISTS)) {
      g_set_error(error, G_FILE_ERROR, G_FILE_ERROR_FAILED,
                  "%s: cannot remove this token cache of earlier data", path);
      return FALSE;
    }
    if (removed)
      g_ptr_array_add(removed, g_strdup(path));
  }
  return TRUE;
}

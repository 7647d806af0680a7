#include "engine/train/explain-windows.h"

#include <json-glib/json-glib.h>
#include <string.h>

#include "data/text-sources.h"
#include "data/token-cache.h"
#include "data/tokenizer.h"
#include "engine/base/json-read.h"
#include "engine/model/data-source.h"

/* The sample the estimate encodes: enough text for a steady tokens-per-byte figure, little
 * enough for --explain to stay interactive (the window asks it at each change). */
#define SAMPLE_BYTES (1u << 20)

/* Tokens of one .jsonl piece's "text" fields (the tokenizing job encodes those alone, and the
 * bytes around them count as the piece's bytes). */
static gboolean encode_lines(const CohortTokenizer *tok, const char *data, gsize len,
                             guint64 *tokens, GError **error)
{
  const char *p = data, *end = data + len;
  while (p < end) {
    const char *nl = memchr(p, '\n', (gsize)(end - p));
    const char *line_end = nl ? nl : end;
    g_autoptr(JsonNode) root = cohort_json_parse_strict(p, line_end - p, "a .jsonl line", 0, NULL);
    JsonObject *o = root && JSON_NODE_HOLDS_OBJECT(root) ? json_node_get_object(root) : NULL;
    const char *text = o && json_object_has_member(o, "text")
                           ? json_object_get_string_member_with_default(o, "text", NULL)
                           : NULL;
    gsize n = 0;
    g_autofree int *ids =
        text ? cohort_tokenizer_encode(tok, text, strlen(text), 0, &n, error) : NULL;
    if (text && !ids)
      return FALSE;
    *tokens += n;
    p = nl ? nl + 1 : end;
  }
  return TRUE;
}

/* Tokens per byte over the first chunks of the text, up to SAMPLE_BYTES. */
static gboolean tokens_per_byte(const CohortTextSources *src, const CohortTokenizer *tok,
                                double *ratio, GError **error)
{
  guint64 end = cohort_text_sources_size(src), pos = 0, bytes = 0, tokens = 0;
  CohortTextChunk c;
  while (bytes < SAMPLE_BYTES &&
         cohort_text_sources_next_chunk(src, tok, end, SAMPLE_BYTES, &pos, &c)) {
    gsize len = c.end - c.begin;
    if (c.jsonl) {
      if (!encode_lines(tok, c.data + c.begin, len, &tokens, error))
        return FALSE;
    } else {
      gsize n = 0;
      g_autofree int *ids = cohort_tokenizer_encode(
          tok, c.data + c.begin, len, c.begin > 0 ? COHORT_ENCODE_CONTINUES : 0, &n, error);
      if (!ids && len > 0)
        return FALSE;
      tokens += n;
    }
    bytes += len;
  }
  *ratio = bytes > 0 ? (double)tokens / (double)bytes : 0;
  return TRUE;
}

gboolean cohort_explain_text_windows(const CohortConfig *cfg, gboolean *applies, guint64 *n,
                                     gboolean *estimated, GError **error)
{
  *applies = *estimated = FALSE;
  *n = 0;
  g_autofree char *tok_path = cohort_config_tokenizer_path(cfg);
  if (cfg->data_format != COHORT_DATA_TEXT || !tok_path)
    return TRUE;
  g_autofree char *resolved = cohort_resolve_path(cfg->train_data);
  const char *paths[] = {resolved, NULL};
  g_autoptr(CohortTextSources) src = cohort_text_sources_open(paths, error);
  if (!src)
    return FALSE;
  *applies = TRUE;
  /* A tokenizer that is not there yet (a preset naming the folder the user brings) still gets
   * a plan: one token per byte, the most a byte-level BPE gives, and said to be an estimate
   * (the run itself refuses the missing folder) */
  g_autoptr(CohortTokenizer) tok = cohort_tokenizer_load(tok_path, NULL);
  if (!tok) {
    *estimated = TRUE;
    guint64 bytes = cohort_text_sources_size(src);
    *n = bytes > (guint64)cfg->seq_len ? (bytes - 1) / (guint64)cfg->seq_len : 0;
    return TRUE;
  }
  /* the folder the run's rank 0 tokenizes into (engine/train/trainer-setup.c; with
   * distributed_data_loading each rank has its own, and the estimate stands) */
  g_autofree char *cache_dir = g_build_filename(cfg->workspace_dir, "cache", NULL);
  g_autofree char *folder = cohort_token_cache_folder(cache_dir, src, tok);
  if (!cfg->distributed_data_loading && cohort_token_cache_ready(folder, NULL)) {
    g_autoptr(CohortDataSource) ds = cohort_data_source_open_tokens(cfg, folder, cache_dir, NULL);
    if (ds) {
      *n = cohort_data_source_count(ds);
      return TRUE;
    }
  }
  double ratio = 0;
  if (!tokens_per_byte(src, tok, &ratio, error))
    return FALSE;
  double tokens = ratio * (double)cohort_text_sources_size(src);
  *estimated = TRUE;
  *n = tokens > cfg->seq_len + 1 ? (guint64)((tokens - 1) / cfg->seq_len) : 0;
  return TRUE;
}

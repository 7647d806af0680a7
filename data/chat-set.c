/* Tokenized conversations (data/chat-data.h): read from .jsonl files, kept in one cache file,
 * served as windows. The file: a header (magic, version, conversations, tokens; little-endian
 * as llm.c's shards), the conversations' token offsets (n + 1 × uint64), then every token as
 * uint32 id << 1 | counted. */
#include "data/chat-data.h"

#include <string.h>

#include "data/dataset.h"
#include "data/file-list.h"
#include "engine/base/fileio.h"

#define MAGIC   0x54484343u /* "CCHT" */
#define VERSION 1u
/* Bump when the same files and tokenizer would give other tokens or flags. */
#define CACHE_VERSION 1

typedef struct {
  guint32 magic, version;
  guint64 n, tokens;
} Header;

struct CohortChatSet {
  GMappedFile *map;          /* a loaded file, or NULL */
  const guint64 *off;        /* [n + 1] */
  const guint32 *tok;        /* [off[n]] */
  GArray *off_mem, *tok_mem; /* a built set */
  guint64 n;
};

void cohort_chat_set_free(CohortChatSet *s)
{
  if (!s)
    return;
  if (s->map)
    g_mapped_file_unref(s->map);
  if (s->off_mem)
    g_array_unref(s->off_mem);
  if (s->tok_mem)
    g_array_unref(s->tok_mem);
  g_free(s);
}

static CohortChatSet *set_new(void)
{
  CohortChatSet *s = g_new0(CohortChatSet, 1);
  s->off_mem = g_array_new(FALSE, FALSE, sizeof(guint64));
  s->tok_mem = g_array_new(FALSE, FALSE, sizeof(guint32));
  guint64 zero = 0;
  g_array_append_val(s->off_mem, zero);
  return s;
}

static void set_point(CohortChatSet *s)
{
  s->off = (const guint64 *)s->off_mem->data;
  s->tok = (const guint32 *)s->tok_mem->data;
  s->n = s->off_mem->len - 1;
}

/* The conversations of one file, appended. */
static gboolean add_file(CohortChatSet *s, const char *path, const CohortChatTemplate *t,
                         const CohortTokenizer *tok, CohortEncoder *enc, guint64 max_tokens,
                         GError **error)
{
  g_autoptr(GMappedFile) map = cohort_map_regular_file(path, NULL, error);
  if (!map)
    return FALSE;
  const char *p = g_mapped_file_get_contents(map), *end = p + g_mapped_file_get_length(map);
  g_autoptr(GArray) ids = g_array_new(FALSE, FALSE, sizeof(gint32));
  g_autoptr(GArray) counted = g_array_new(FALSE, FALSE, sizeof(guint8));
  for (guint64 line = 1; p < end; line++) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    const char *stop = nl ? nl : end;
    gsize len = (gsize)(stop - p);
    gboolean blank = TRUE;
    for (gsize i = 0; i < len && blank; i++)
      blank = g_ascii_isspace(p[i]);
    if (!blank) {
      g_autofree char *where = g_strdup_printf("%s:%" G_GUINT64_FORMAT, path, line);
      g_array_set_size(ids, 0);
      g_array_set_size(counted, 0);
      if (!cohort_chat_encode_line(t, tok, enc, p, len, where, ids, counted, error))
        return FALSE;
      if (ids->len > max_tokens) {
        g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_FORMAT,
                    "%s: field \"messages\": the conversation is %u tokens; allowed: at most "
                    "%" G_GUINT64_FORMAT
                    " (seq_len + 1): one conversation fills at most one window, so shorten or "
                    "split it, or raise seq_len",
                    where, ids->len, max_tokens);
        return FALSE;
      }
      for (guint k = 0; k < ids->len; k++) {
        guint32 v = (guint32)g_array_index(ids, gint32, k) << 1 | g_array_index(counted, guint8, k);
        g_array_append_val(s->tok_mem, v);
      }
      guint64 at = s->tok_mem->len;
      g_array_append_val(s->off_mem, at);
    }
    p = nl ? nl + 1 : end;
  }
  return TRUE;
}

CohortChatSet *cohort_chat_set_build(const char *path, const CohortTokenizer *tok,
                                     guint64 max_tokens, GError **error)
{
  const char *text = cohort_tokenizer_chat_template(tok);
  if (!text) {
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_FORMAT,
                "tokenizer %s: no chat_template in tokenizer_config.json; data_format \"chat\" "
                "renders each conversation with the tokenizer's chat template",
                cohort_tokenizer_files(tok)[0]);
    return NULL;
  }
  g_autofree char *dir = g_path_get_dirname(cohort_tokenizer_files(tok)[0]);
  g_autofree char *source = g_build_filename(dir, "tokenizer_config.json", NULL);
  g_autoptr(CohortChatTemplate) t = cohort_chat_template_new(text, source, error);
  if (!t)
    return NULL;
  const char *const suffixes[] = {".jsonl", NULL};
  g_autoptr(GPtrArray) files = cohort_list_data_files(path, suffixes, error);
  if (!files)
    return NULL;
  g_autoptr(CohortEncoder) enc = cohort_encoder_new(tok);
  g_autoptr(CohortChatSet) s = set_new();
  for (guint i = 0; i < files->len; i++)
    if (!add_file(s, files->pdata[i], t, tok, enc, max_tokens, error))
      return NULL;
  set_point(s);
  if (s->n == 0) {
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_TOO_SMALL,
                "%s: no conversation (one JSON object per line: {\"messages\": [...]})", path);
    return NULL;
  }
  return g_steal_pointer(&s);
}

char *cohort_chat_cache_file(const char *cache_dir, const char *path, const CohortTokenizer *tok,
                             guint64 max_tokens, GError **error)
{
  const char *const suffixes[] = {".jsonl", NULL};
  g_autoptr(GPtrArray) files = cohort_list_data_files(path, suffixes, error);
  if (!files)
    return NULL;
  g_autoptr(GString) key = g_string_new(NULL);
  g_string_append_printf(key, "cohort-chat %d\n%s\n%" G_GUINT64_FORMAT "\n", CACHE_VERSION,
                         cohort_tokenizer_sha256(tok), max_tokens);
  for (guint i = 0; i < files->len; i++) {
    struct stat st;
    g_autoptr(GMappedFile) map = cohort_map_regular_file(files->pdata[i], &st, error);
    if (!map)
      return NULL;
    g_autofree char *fp = cohort_file_fingerprint(files->pdata[i], &st, map);
    g_string_append_printf(key, "%s\n", fp);
  }
  g_autofree char *sum = g_compute_checksum_for_string(G_CHECKSUM_SHA256, key->str, -1);
  g_autofree char *name = g_strdup_printf("chat-%.16s.bin", sum);
  return g_build_filename(cache_dir, name, NULL);
}

static gboolean write_set(int fd, gpointer data)
{
  const CohortChatSet *s = data;
  Header h = {MAGIC, VERSION, s->n, s->off[s->n]};
  return cohort_write_all(fd, &h, sizeof h) &&
         cohort_write_all(fd, s->off, (s->n + 1) * sizeof(guint64)) &&
         cohort_write_all(fd, s->tok, s->off[s->n] * sizeof(guint32));
}

gboolean cohort_chat_set_save(const CohortChatSet *s, const char *file, GError **error)
{
  g_autofree char *dir = g_path_get_dirname(file);
  if (g_mkdir_with_parents(dir, 0755) != 0) {
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_IO, "%s: cannot make the folder", dir);
    return FALSE;
  }
  return cohort_write_atomic(file, write_set, (gpointer)s, error);
}

CohortChatSet *cohort_chat_set_load(const char *file, int vocab_size, GError **error)
{
  g_autoptr(GMappedFile) map = cohort_map_regular_file(file, NULL, error);
  if (!map)
    return NULL;
  gsize size = g_mapped_file_get_length(map);
  const guint8 *p = (const guint8 *)g_mapped_file_get_contents(map);
  Header h = {0};
  if (size >= sizeof h)
    memcpy(&h, p, sizeof h);
  gboolean ok = size >= sizeof h && h.magic == MAGIC && h.version == VERSION &&
                h.n < size / sizeof(guint64) && h.tokens < size / sizeof(guint32) &&
                size == sizeof h + (h.n + 1) * sizeof(guint64) + h.tokens * sizeof(guint32);
  const guint64 *off = (const guint64 *)(p + sizeof h);
  const guint32 *tok = (const guint32 *)(off + h.n + 1);
  for (guint64 i = 0; ok && i < h.n; i++)
    ok = off[i] < off[i + 1];
  ok = ok && off[0] == 0 && off[h.n] == h.tokens;
  for (guint64 i = 0; ok && i < h.tokens; i++)
    ok = (tok[i] >> 1) < (guint32)vocab_size;
  if (!ok) {
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_FORMAT,
                "%s: not a chat cache of this version with ids below vocab_size %d", file,
                vocab_size);
    return NULL;
  }
  CohortChatSet *s = g_new0(CohortChatSet, 1);
  s->map = g_steal_pointer(&map);
  s->off = off;
  s->tok = tok;
  s->n = h.n;
  return s;
}

guint64 cohort_chat_set_count(const CohortChatSet *s)
{
  return s->n;
}

guint64 cohort_chat_set_tokens(const CohortChatSet *s, guint64 i)
{
  return s->off[i + 1] - s->off[i];
}

guint64 cohort_chat_set_counted(const CohortChatSet *s, guint64 i)
{
  guint64 c = 0;
  for (guint64 k = s->off[i] + 1; k < s->off[i + 1]; k++)
    c += s->tok[k] & 1;
  return c;
}

void cohort_chat_set_window(const CohortChatSet *s, guint64 i, int T, int pad, int *inputs,
                            int *targets)
{
  const guint32 *t = s->tok + s->off[i];
  guint64 n = MIN(cohort_chat_set_tokens(s, i), (guint64)T + 1);
  for (int k = 0; k < T; k++) {
    gboolean real = (guint64)k + 1 < n;
    inputs[k] = (guint64)k < n ? (int)(t[k] >> 1) : pad;
    targets[k] = real && (t[k + 1] & 1) ? (int)(t[k + 1] >> 1) : COHORT_TARGET_IGNORED;
  }
}

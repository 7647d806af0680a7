/* Tokenizing on several threads; see tokenize-job.h. The caller's thread cuts the range into
 * chunks of about a MiB and hands them to worker threads (each with its own encoder and piece
 * cache); finished chunks go to the sink strictly in order, and at most a few chunks per
 * thread are in flight, so memory stays bounded whatever the size of the text. */
#include "data/tokenize-job.h"

#include <string.h>
#include <sys/resource.h>
#include <json-glib/json-glib.h>

#include "engine/base/json-read.h"

#define CHUNK_BYTES (1u << 20)
#define MAX_THREADS 64

typedef struct {
  CohortTextChunk chunk;
  const char *path;
  guint64 line; /* .jsonl: number of the chunk's first line */
  GArray *ids;  /* gint32 */
  guint64 docs;
  gboolean not_utf8;
  guint64 cuts; /* cuts where the tokenizer allows none (forced chunk ends, long words) */
  GError *error;
  gboolean done;
} Unit;

typedef struct {
  const CohortTokenizer *tok;
  GAsyncQueue *todo;
  GMutex lock;
  GCond cond;
} Shared;

static Unit stop_unit;

/* User and system CPU seconds of the whole process. */
static double cpu_seconds(void)
{
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0)
    return 0;
  return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
         ru.ru_stime.tv_usec / 1e6;
}

static void unit_free(Unit *u)
{
  g_array_unref(u->ids);
  g_clear_error(&u->error);
  g_free(u);
}

/* Encodes text into the unit; a failure names the file and the byte range. */
static gboolean encode_text(CohortEncoder *enc, Unit *u, const char *text, gsize len, guint flags,
                            const char *where)
{
  if (cohort_encoder_encode(enc, text, len, flags, u->ids, &u->error))
    return TRUE;
  g_prefix_error(&u->error, "%s: %s: ", u->path, where);
  return FALSE;
}

static gboolean add_document(CohortEncoder *enc, Unit *u, const char *text, gsize len, gint32 eot,
                             const char *where)
{
  if (len == 0)
    return TRUE;
  g_array_append_val(u->ids, eot);
  u->docs++;
  return encode_text(enc, u, text, len, 0, where);
}

/* One .jsonl line: a JSON object whose "text" is the document. */
static gboolean add_json_line(CohortEncoder *enc, Unit *u, const char *line, gsize len,
                              guint64 number, gint32 eot)
{
  gsize i = 0;
  while (i < len && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r'))
    i++;
  if (i == len)
    return TRUE; /* blank lines separate nothing */
  if (len > COHORT_TEXT_MAX_LINE) {
    g_set_error(&u->error, COHORT_TOKENIZER_ERROR, COHORT_TOKENIZER_ERROR_FORMAT,
                "%s: line %" G_GUINT64_FORMAT " is %" G_GSIZE_FORMAT
                " bytes; allowed: at most %u MiB per document",
                u->path, number, len, COHORT_TEXT_MAX_LINE >> 20);
    return FALSE;
  }
  g_autofree char *source = g_strdup_printf("%s: line %" G_GUINT64_FORMAT, u->path, number);
  g_autoptr(JsonNode) node = cohort_json_parse_strict(line, (gssize)len, source, 0, &u->error);
  if (!node)
    return FALSE;
  JsonObject *o = JSON_NODE_HOLDS_OBJECT(node) ? json_node_get_object(node) : NULL;
  JsonNode *text = o ? json_object_get_member(o, "text") : NULL;
  if (!text || !JSON_NODE_HOLDS_VALUE(text) || json_node_get_value_type(text) != G_TYPE_STRING) {
    g_set_error(&u->error, COHORT_TOKENIZER_ERROR, COHORT_TOKENIZER_ERROR_FORMAT,
                "%s: %s; allowed: one JSON object per line with the document in its string "
                "member \"text\"",
                source, o ? "no string member \"text\"" : "not a JSON object");
    return FALSE;
  }
  const char *s = json_node_get_string(text);
  g_autofree char *where = g_strdup_printf("line %" G_GUINT64_FORMAT, number);
  return add_document(enc, u, s, strlen(s), eot, where);
}

static void encode_unit(CohortEncoder *enc, const CohortTokenizer *tok, Unit *u)
{
  const CohortTextChunk *c = &u->chunk;
  const char *p = c->data + c->begin;
  gsize len = c->end - c->begin;
  gint32 eot = cohort_tokenizer_eot(tok);
  guint64 cut0 = cohort_encoder_pieces_cut(enc);
  if (!c->jsonl) {
    u->not_utf8 = !cohort_text_is_utf8(p, len);
    g_autofree char *where =
        g_strdup_printf("bytes %" G_GSIZE_FORMAT " to %" G_GSIZE_FORMAT, c->begin, c->end);
    if (c->begin == 0)
      add_document(enc, u, p, len, eot, where);
    else
      encode_text(enc, u, p, len, COHORT_ENCODE_CONTINUES, where);
    u->cuts = cohort_encoder_pieces_cut(enc) - cut0 + (c->forced ? 1 : 0);
    return;
  }
  guint64 number = u->line;
  for (gsize i = 0; i < len; number++) {
    const char *nl = memchr(p + i, '\n', len - i);
    gsize stop = nl ? (gsize)(nl - p) : len;
    if (!add_json_line(enc, u, p + i, stop - i, number, eot))
      return;
    i = stop + 1;
  }
  u->cuts = cohort_encoder_pieces_cut(enc) - cut0;
}

static gpointer worker(gpointer data)
{
  Shared *sh = data;
  g_autoptr(CohortEncoder) enc = cohort_encoder_new(sh->tok);
  for (;;) {
    Unit *u = g_async_queue_pop(sh->todo);
    if (u == &stop_unit)
      break;
    encode_unit(enc, sh->tok, u);
    g_mutex_lock(&sh->lock);
    u->done = TRUE;
    g_cond_broadcast(&sh->cond);
    g_mutex_unlock(&sh->lock);
  }
  return NULL;
}

static guint64 count_lines(const char *p, gsize len)
{
  guint64 n = 0;
  for (const char *end = p + len; (p = memchr(p, '\n', (gsize)(end - p))); p++)
    n++;
  return n;
}

/* Where .jsonl line numbers stand: the file and offset the last chunk ended at. */
typedef struct {
  guint file;
  gsize end;
  guint64 line;
} LineState;

static Unit *next_unit(const CohortTextSources *src, const CohortTokenizeJob *job, guint64 *pos,
                       LineState *ls)
{
  CohortTextChunk c;
  if (!cohort_text_sources_next_chunk(src, job->tokenizer, job->end, CHUNK_BYTES, pos, &c))
    return NULL;
  Unit *u = g_new0(Unit, 1);
  u->chunk = c;
  u->path = cohort_text_sources_path(src, c.file);
  u->ids = g_array_sized_new(FALSE, FALSE, sizeof(gint32), (guint)((c.end - c.begin) / 3 + 16));
  if (c.jsonl) {
    if (c.file != ls->file || c.begin != ls->end)
      ls->line = 1 + count_lines(c.data, c.begin);
    u->line = ls->line;
    ls->line += count_lines(c.data + c.begin, c.end - c.begin);
    ls->file = c.file;
    ls->end = c.end;
  }
  return u;
}

static void wait_done(Shared *sh, Unit *u)
{
  g_mutex_lock(&sh->lock);
  while (!u->done)
    g_cond_wait(&sh->cond, &sh->lock);
  g_mutex_unlock(&sh->lock);
}

gboolean cohort_tokenize_run(const CohortTextSources *src, const CohortTokenizeJob *job,
                             CohortTokenizeProgress *done, GPtrArray *not_utf8, GError **error)
{
  if (cohort_tokenizer_eot(job->tokenizer) < 0) {
    g_set_error(error, COHORT_TOKENIZER_ERROR, COHORT_TOKENIZER_ERROR_FORMAT,
                "%s: the tokenizer has no <|endoftext|> token and tokenizer_config.json names no "
                "bos_token, one of which begins each document",
                cohort_tokenizer_files(job->tokenizer)[0]);
    return FALSE;
  }
  int n_threads = job->threads > 0 ? job->threads : (int)g_get_num_processors();
  n_threads = CLAMP(n_threads, 1, MAX_THREADS);
  Shared sh = {.tok = job->tokenizer, .todo = g_async_queue_new()};
  g_mutex_init(&sh.lock);
  g_cond_init(&sh.cond);
  GThread *threads[MAX_THREADS];
  for (int i = 0; i < n_threads; i++)
    threads[i] = g_thread_new("tokenize", worker, &sh);

  CohortTokenizeProgress prog = {.bytes_total = job->end - job->begin};
  g_autoptr(GHashTable) bad_files = g_hash_table_new(NULL, NULL);
  g_autoptr(GHashTable) cut_files = g_hash_table_new(NULL, NULL);
  GQueue window = G_QUEUE_INIT;
  LineState ls = {.file = G_MAXUINT};
  guint64 pos = job->begin;
  gint64 t0 = g_get_monotonic_time();
  double cpu0 = cpu_seconds();
  GError *failure = NULL;
  for (;;) {
    while (!failure && window.length < (guint)(2 * n_threads + 2)) {
      Unit *u = next_unit(src, job, &pos, &ls);
      if (!u)
        break;
      g_queue_push_tail(&window, u);
      g_async_queue_push(sh.todo, u);
    }
    Unit *u = g_queue_pop_head(&window);
    if (!u)
      break;
    wait_done(&sh, u);
    if (!failure && u->error)
      failure = g_steal_pointer(&u->error);
    if (!failure &&
        !job->sink((const gint32 *)u->ids->data, u->ids->len, job->user_data, &failure)) {
      if (!failure)
        g_set_error(&failure, COHORT_TOKENIZER_ERROR, COHORT_TOKENIZER_ERROR_IO, "cannot write");
    }
    if (!failure) {
      prog.bytes_done += u->chunk.end - u->chunk.begin;
      prog.tokens += u->ids->len;
      prog.documents += u->docs;
      prog.elapsed_s = (double)(g_get_monotonic_time() - t0) / 1e6;
      prog.cpu_s = cpu_seconds() - cpu0;
      prog.cuts += u->cuts;
      if (u->cuts && !g_hash_table_contains(cut_files, GUINT_TO_POINTER(u->chunk.file + 1))) {
        g_hash_table_add(cut_files, GUINT_TO_POINTER(u->chunk.file + 1));
        if (job->cut_files)
          g_ptr_array_add(job->cut_files, g_strdup(u->path));
      }
      if (u->not_utf8 && !g_hash_table_contains(bad_files, GUINT_TO_POINTER(u->chunk.file + 1))) {
        g_hash_table_add(bad_files, GUINT_TO_POINTER(u->chunk.file + 1));
        if (not_utf8)
          g_ptr_array_add(not_utf8, g_strdup(u->path));
      }
      if (job->progress)
        job->progress(&prog, job->user_data);
    }
    unit_free(u);
  }
  for (int i = 0; i < n_threads; i++)
    g_async_queue_push(sh.todo, &stop_unit);
  for (int i = 0; i < n_threads; i++)
    g_thread_join(threads[i]);
  g_async_queue_unref(sh.todo);
  g_mutex_clear(&sh.lock);
  g_cond_clear(&sh.cond);
  if (done)
    *done = prog;
  if (failure) {
    g_propagate_error(error, failure);
    return FALSE;
  }
  return TRUE;
}

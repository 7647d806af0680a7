/* Text sources; see text-sources.h. */
#include "data/text-sources.h"

#include <string.h>

#include "data/dataset.h"
#include "data/file-list.h"
#include "data/tokenizer.h"

typedef struct {
  char *path;
  GMappedFile *map;
  const char *data;
  gsize size;
  guint64 start; /* offset of the file's first byte in the whole range */
  gboolean jsonl;
  char *fingerprint;
} TextFile;

struct CohortTextSources {
  GArray *files; /* of TextFile */
  guint64 size;
};

static void text_file_clear(gpointer p)
{
  TextFile *f = p;
  g_clear_pointer(&f->path, g_free);
  g_clear_pointer(&f->map, g_mapped_file_unref);
  g_clear_pointer(&f->fingerprint, g_free);
}

void cohort_text_sources_free(CohortTextSources *s)
{
  if (!s)
    return;
  g_array_unref(s->files);
  g_free(s);
}

CohortTextSources *cohort_text_sources_open(const char *const *paths, GError **error)
{
  g_autoptr(CohortTextSources) s = g_new0(CohortTextSources, 1);
  s->files = g_array_new(FALSE, TRUE, sizeof(TextFile));
  g_array_set_clear_func(s->files, text_file_clear);
  static const char *const suffixes[] = {".txt", ".jsonl", NULL};
  for (guint p = 0; paths[p]; p++) {
    g_autoptr(GPtrArray) names = cohort_list_data_files(paths[p], suffixes, error);
    if (!names)
      return NULL;
    for (guint i = 0; i < names->len; i++) {
      struct stat st;
      TextFile f = {.path = g_strdup(names->pdata[i]), .start = s->size};
      f.map = cohort_map_regular_file(f.path, &st, error);
      g_array_append_val(s->files, f);
      TextFile *in = &g_array_index(s->files, TextFile, s->files->len - 1);
      if (!in->map)
        return NULL;
      in->data = g_mapped_file_get_contents(in->map);
      in->size = g_mapped_file_get_length(in->map);
      in->jsonl = g_str_has_suffix(in->path, ".jsonl");
      in->fingerprint = cohort_file_fingerprint(in->path, &st, in->map);
      s->size += in->size;
    }
  }
  return g_steal_pointer(&s);
}

guint64 cohort_text_sources_size(const CohortTextSources *s)
{
  return s->size;
}

guint cohort_text_sources_n_files(const CohortTextSources *s)
{
  return s->files->len;
}

const char *cohort_text_sources_path(const CohortTextSources *s, guint i)
{
  return g_array_index(s->files, TextFile, i).path;
}

char *cohort_text_sources_fingerprint(const CohortTextSources *s)
{
  g_autoptr(GChecksum) sum = g_checksum_new(G_CHECKSUM_SHA256);
  for (guint i = 0; i < s->files->len; i++) {
    const TextFile *f = &g_array_index(s->files, TextFile, i);
    g_checksum_update(sum, (const guchar *)f->fingerprint, (gssize)strlen(f->fingerprint) + 1);
  }
  return g_strdup(g_checksum_get_string(sum));
}

/* The file holding offset `pos` (< size). */
static guint file_at(const CohortTextSources *s, guint64 pos)
{
  guint lo = 0, hi = s->files->len;
  while (hi - lo > 1) {
    guint mid = lo + (hi - lo) / 2;
    if (g_array_index(s->files, TextFile, mid).start <= pos)
      lo = mid;
    else
      hi = mid;
  }
  /* Empty files share their start with the next one: take the one that holds pos. */
  while (lo + 1 < s->files->len && g_array_index(s->files, TextFile, lo).size == 0)
    lo++;
  return lo;
}

/* The start of the character that holds byte `p` of s (not before `floor`). */
static gsize char_floor(const char *s, gsize p, gsize floor)
{
  while (p > floor && ((guint8)s[p] & 0xC0) == 0x80)
    p--;
  return p;
}

/* The next place after `p` (a cut place of text file f) where f may be cut: the tokenizer's
 * next safe place when there is one within COHORT_TEXT_MAX_RUN bytes, else a forced cut that
 * many bytes on (at a character boundary; *forced set). These places depend on the text alone
 * (each forced cut is counted from the safe place or the start before it), so any reader that
 * starts at one of them finds the same ones after it. */
static gsize next_place(const CohortTokenizer *tok, const TextFile *f, gsize p, gboolean *forced)
{
  gsize span = MIN(f->size, p + COHORT_TEXT_MAX_RUN + 8);
  gsize s = cohort_tokenizer_safe_cut(tok, f->data, span, p + 1);
  *forced = s > p + COHORT_TEXT_MAX_RUN || (s == span && span < f->size);
  if (!*forced)
    return s == span ? f->size : s;
  gsize c = char_floor(f->data, p + COHORT_TEXT_MAX_RUN, p + 1);
  return c > p ? c : p + COHORT_TEXT_MAX_RUN;
}

/* The first place at or after `want` (< limit) walking from `p`, a place; *forced says whether
 * it is a forced cut. */
static gsize walk(const CohortTokenizer *tok, const TextFile *f, gsize p, gsize want, gsize limit,
                  gboolean *forced)
{
  *forced = FALSE;
  while (p < want && p < limit)
    p = next_place(tok, f, p, forced);
  return MIN(p, limit);
}

/* A place at or before `want` in text file f from which to walk: a safe place (the tokenizer
 * allows one), else the file's start. */
static gsize place_before(const CohortTokenizer *tok, const TextFile *f, gsize want)
{
  return cohort_tokenizer_safe_cut_before(tok, f->data, f->size, want, 0);
}

/* The first place at or after `want` (an offset in file f) where f's bytes may be cut, up to
 * `limit`: after a newline in a .jsonl file, else where the tokenizer allows (data/tok-cut.c)
 * or a long run without such a place must be cut. */
static gsize cut_in_file(const CohortTokenizer *tok, const TextFile *f, gsize want, gsize limit)
{
  if (want == 0 || want >= limit)
    return MIN(want, limit);
  if (f->jsonl) {
    const char *nl = memchr(f->data + want - 1, '\n', limit - (want - 1));
    return nl ? (gsize)(nl - f->data) + 1 : limit;
  }
  gboolean forced;
  return walk(tok, f, place_before(tok, f, want), want, limit, &forced);
}

guint64 cohort_text_sources_cut(const CohortTextSources *s, const CohortTokenizer *tok, guint k,
                                guint n)
{
  if (k >= n || s->size == 0)
    return k >= n ? s->size : 0;
  guint64 want = (guint64)((double)s->size * k / n);
  if (want == 0)
    return 0;
  guint i = file_at(s, want);
  const TextFile *f = &g_array_index(s->files, TextFile, i);
  return f->start + cut_in_file(tok, f, (gsize)(want - f->start), f->size);
}

gboolean cohort_text_sources_next_chunk(const CohortTextSources *s, const CohortTokenizer *tok,
                                        guint64 end, gsize chunk_bytes, guint64 *pos,
                                        CohortTextChunk *chunk)
{
  while (*pos < end) {
    guint i = file_at(s, *pos);
    const TextFile *f = &g_array_index(s->files, TextFile, i);
    gsize begin = (gsize)(*pos - f->start);
    gsize limit = (gsize)MIN(end - f->start, (guint64)f->size);
    if (begin >= limit) {
      *pos = f->start + f->size;
      continue;
    }
    gboolean forced = FALSE;
    gsize stop;
    if (f->jsonl) {
      stop = cut_in_file(tok, f, MIN(begin + chunk_bytes, limit), limit);
    } else {
      /* From begin (a place) to the first place at or after begin + chunk_bytes; a forced
       * place on the way ends the chunk there, so every reader cuts at it. */
      stop = begin;
      do
        stop = next_place(tok, f, stop, &forced);
      while (!forced && stop < begin + chunk_bytes && stop < limit);
      stop = MIN(stop, limit);
    }
    *chunk = (CohortTextChunk){.file = i,
                               .jsonl = f->jsonl,
                               .begin = begin,
                               .end = stop,
                               .data = f->data,
                               .forced = forced && stop < f->size};
    *pos = f->start + stop;
    return TRUE;
  }
  return FALSE;
}

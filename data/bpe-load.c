/* Reading tokenizers: Hugging Face's tokenizer.json and GPT-2's vocab.json + merges.txt, as
 * input from strangers (regular files of bounded size, strict JSON, counts and ids checked). */
#include "data/bpe-private.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>

#include "engine/base/fileio.h"
#include "engine/base/json-read.h"

/* The whole of a regular file no larger than COHORT_TOKENIZER_MAX_FILE. */
static char *read_file(const char *path, gsize *len, GError **error)
{
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    int e = errno;
    if (fd >= 0)
      close(fd);
    g_set_error(error, COHORT_TOKENIZER_ERROR, COHORT_TOKENIZER_ERROR_IO, "%s: cannot read: %s",
                path, g_strerror(e));
    return NULL;
  }
  if (!S_ISREG(st.st_mode) || (guint64)st.st_size > COHORT_TOKENIZER_MAX_FILE) {
    close(fd);
    g_set_error(error, COHORT_TOKENIZER_ERROR, COHORT_TOKENIZER_ERROR_IO,
                S_ISREG(st.st_mode) ? "%s: %" G_GINT64_FORMAT
                                      " bytes; allowed: a tokenizer file of at most %u MiB"
                                    : "%s: not a regular file (%" G_GINT64_FORMAT
                                      " bytes); allowed: a regular file, at most %u MiB",
                path, (gint64)st.st_size, COHORT_TOKENIZER_MAX_FILE >> 20);
    return NULL;
  }
  gsize n = (gsize)st.st_size, got = 0;
  char *buf = g_malloc(n + 1);
  while (got < n) {
    ssize_t r = read(fd, buf + got, n - got);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0) {
      int e = r < 0 ? errno : EIO;
      close(fd);
      g_free(buf);
      g_set_error(error, COHORT_TOKENIZER_ERROR, COHORT_TOKENIZER_ERROR_IO, "%s: cannot read: %s",
                  path, r < 0 ? g_strerror(e) : "the file got shorter");
      return NULL;
    }
    got += (gsize)r;
  }
  close(fd);
  buf[n] = 0;
  *len = n;
  return buf;
}

/* merges.txt: "#version…" lines, then one "left right" per line, in rank order. */
static gboolean read_merges_txt(Build *b, CohortTokenizer *t, char *text)
{
  g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
  guint n = g_strv_length(lines);
  if (n > COHORT_TOKENIZER_MAX_TOKENS)
    return bpe_fail(b, "%u lines; allowed: at most %d merges", n, COHORT_TOKENIZER_MAX_TOKENS);
  bpe_merges_alloc(t, n);
  guint32 rank = 0;
  for (guint i = 0; i < n; i++) {
    char *line = lines[i];
    gsize len = strlen(line);
    if (len > 0 && line[len - 1] == '\r')
      line[--len] = 0;
    if (len == 0 || g_str_has_prefix(line, "#version"))
      continue;
    g_autofree char *where = g_strdup_printf("line %u", i + 1);
    if (!g_utf8_validate(line, (gssize)len, NULL))
      return bpe_fail(b, "%s is not UTF-8 text", where);
    char *left, *right;
    if (!bpe_split_merge(line, &left, &right)) {
      g_autofree char *k = bpe_shown(line);
      return bpe_fail(b, "%s: \"%s\" is not a merge; allowed: two tokens separated by one space",
                      where, k);
    }
    if (!bpe_add_merge(b, t, left, right, rank++, where))
      return FALSE;
  }
  return TRUE;
}

static char *hash_files(char **texts, gsize *lens, guint n)
{
  g_autoptr(GChecksum) sum = g_checksum_new(G_CHECKSUM_SHA256);
  for (guint i = 0; i < n; i++)
    g_checksum_update(sum, (const guchar *)texts[i], (gssize)lens[i]);
  return g_strdup(g_checksum_get_string(sum));
}

static void bpe_file_free(gpointer p)
{
  BpeFile *f = p;
  g_free(f->name);
  g_bytes_unref(f->bytes);
  g_free(f);
}

static void keep(CohortTokenizer *t, const char *name, const char *text, gsize len)
{
  BpeFile *f = g_new(BpeFile, 1);
  f->name = g_strdup(name);
  f->bytes = g_bytes_new(text, len);
  g_ptr_array_add(t->exports, f);
}

/* tokenizer_config.json and special_tokens_map.json beside the tokenizer: not read, only
 * kept for the export (AutoTokenizer reads them). Small regular files only. */
static void keep_companions(CohortTokenizer *t, const char *dir)
{
  static const char *const names[] = {"tokenizer_config.json", "special_tokens_map.json"};
  for (guint i = 0; i < G_N_ELEMENTS(names); i++) {
    g_autofree char *path = g_build_filename(dir, names[i], NULL);
    GStatBuf st;
    g_autofree char *text = NULL;
    gsize len = 0;
    if (g_stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size <= (1 << 20) &&
        g_file_get_contents(path, &text, &len, NULL))
      keep(t, names[i], text, len);
  }
}

gboolean cohort_tokenizer_export(const CohortTokenizer *t, const char *dir, GError **error)
{
  for (guint i = 0; i < t->exports->len; i++) {
    const BpeFile *f = t->exports->pdata[i];
    g_autofree char *path = g_build_filename(dir, f->name, NULL);
    gsize len;
    const void *data = g_bytes_get_data(f->bytes, &len);
    if (!cohort_write_file_atomic(path, data, len, error))
      return FALSE;
  }
  return TRUE;
}

static gboolean load_json(CohortTokenizer *t, const char *path, GError **error)
{
  gsize len = 0;
  g_autofree char *text = read_file(path, &len, error);
  if (!text)
    return FALSE;
  keep(t, "tokenizer.json", text, len);
  t->sha256 = hash_files(&text, &len, 1);
  g_autoptr(JsonNode) root = cohort_json_parse_strict(text, (gssize)len, path, 0, error);
  if (!root)
    return FALSE;
  Build b = {0};
  bpe_build_init(&b, path, error);
  gboolean ok = bpe_read_tokenizer_json(&b, t, root) && tok_finish(&b, t);
  bpe_build_clear(&b);
  return ok;
}

static gboolean load_vocab_merges(CohortTokenizer *t, const char *vocab, const char *merges,
                                  GError **error)
{
  gsize lens[2] = {0, 0};
  g_autofree char *vtext = read_file(vocab, &lens[0], error);
  if (!vtext)
    return FALSE;
  g_autofree char *mtext = read_file(merges, &lens[1], error);
  if (!mtext)
    return FALSE;
  char *texts[2] = {vtext, mtext};
  keep(t, "vocab.json", vtext, lens[0]);
  keep(t, "merges.txt", mtext, lens[1]);
  t->sha256 = hash_files(texts, lens, 2);
  g_autoptr(JsonNode) root = cohort_json_parse_strict(vtext, (gssize)lens[0], vocab, 0, error);
  if (!root)
    return FALSE;
  Build b = {0};
  bpe_build_init(&b, vocab, error);
  gboolean ok = bpe_read_vocab(&b, root, "the vocabulary");
  if (ok) {
    b.source = merges;
    if (!g_utf8_validate(mtext, (gssize)lens[1], NULL))
      ok = bpe_fail(&b, "not UTF-8 text");
    ok = ok && read_merges_txt(&b, t, mtext);
    b.source = vocab;
    ok = ok && bpe_finish(&b, t);
  }
  bpe_build_clear(&b);
  return ok;
}

static gboolean is_file(const char *path)
{
  return g_file_test(path, G_FILE_TEST_IS_REGULAR);
}

/* An error when `path` exists but is not a regular file (a FIFO, a device, a folder). */
static gboolean not_regular(const char *path, GError **error)
{
  GStatBuf st;
  if (g_stat(path, &st) != 0 || S_ISREG(st.st_mode))
    return FALSE;
  g_set_error(error, COHORT_TOKENIZER_ERROR, COHORT_TOKENIZER_ERROR_IO,
              "%s: it is %s, not a regular file; allowed: a regular file", path,
              cohort_file_kind(st.st_mode));
  return TRUE;
}

gboolean cohort_tokenizer_in_folder(const char *dir, const char **what)
{
  g_autofree char *json = g_build_filename(dir, "tokenizer.json", NULL);
  g_autofree char *vocab = g_build_filename(dir, "vocab.json", NULL);
  g_autofree char *merges = g_build_filename(dir, "merges.txt", NULL);
  const char *found = is_file(json)                       ? "tokenizer.json"
                      : is_file(vocab) && is_file(merges) ? "vocab.json + merges.txt"
                                                          : NULL;
  if (what)
    *what = found;
  return found != NULL;
}

gboolean cohort_tokenizer_find(const char *path, char **json, char **vocab, char **merges,
                               GError **error)
{
  *json = *vocab = *merges = NULL;
  if (g_file_test(path, G_FILE_TEST_IS_DIR)) {
    const char *what = NULL;
    static const char *const names[] = {"tokenizer.json", "vocab.json", "merges.txt"};
    for (guint i = 0; i < G_N_ELEMENTS(names); i++) {
      g_autofree char *p = g_build_filename(path, names[i], NULL);
      if (not_regular(p, error))
        return FALSE;
    }
    if (!cohort_tokenizer_in_folder(path, &what)) {
      g_set_error(error, COHORT_TOKENIZER_ERROR, COHORT_TOKENIZER_ERROR_IO,
                  "%s: the folder holds neither tokenizer.json nor vocab.json and merges.txt; "
                  "allowed: a Hugging Face tokenizer folder or file",
                  path);
      return FALSE;
    }
    if (g_str_equal(what, "tokenizer.json")) {
      *json = g_build_filename(path, "tokenizer.json", NULL);
    } else {
      *vocab = g_build_filename(path, "vocab.json", NULL);
      *merges = g_build_filename(path, "merges.txt", NULL);
    }
    return TRUE;
  }
  if (!g_file_test(path, G_FILE_TEST_EXISTS)) {
    g_set_error(error, COHORT_TOKENIZER_ERROR, COHORT_TOKENIZER_ERROR_IO,
                "%s: no such file or folder", path);
    return FALSE;
  }
  g_autofree char *dir = g_path_get_dirname(path);
  g_autofree char *base = g_path_get_basename(path);
  if (not_regular(path, error))
    return FALSE;
  if (g_str_equal(base, "vocab.json") || g_str_equal(base, "merges.txt")) {
    *vocab = g_build_filename(dir, "vocab.json", NULL);
    *merges = g_build_filename(dir, "merges.txt", NULL);
    if (not_regular(*vocab, error) || not_regular(*merges, error)) {
      g_clear_pointer(vocab, g_free);
      g_clear_pointer(merges, g_free);
      return FALSE;
    }
    const char *missing = !is_file(*vocab) ? *vocab : !is_file(*merges) ? *merges : NULL;
    if (missing) {
      g_set_error(error, COHORT_TOKENIZER_ERROR, COHORT_TOKENIZER_ERROR_IO,
                  "%s: %s is missing; a GPT-2 tokenizer is vocab.json and merges.txt side by side",
                  path, missing);
      g_clear_pointer(vocab, g_free);
      g_clear_pointer(merges, g_free);
      return FALSE;
    }
    return TRUE;
  }
  *json = g_strdup(path);
  return TRUE;
}

/* The id whose text is `s` (an added token's content), or -1. */
static int find_text(const CohortTokenizer *t, const char *s)
{
  gsize n = strlen(s);
  for (int id = t->n_ids - 1; id >= 0; id--)
    if (t->spans[id].len == n && memcmp(t->blob + t->spans[id].offset, s, n) == 0)
      return id;
  return -1;
}

CohortTokenizer *cohort_tokenizer_load(const char *path, GError **error)
{
  g_autofree char *json = NULL, *vocab = NULL, *merges = NULL;
  if (!cohort_tokenizer_find(path, &json, &vocab, &merges, error))
    return NULL;
  bpe_split_init();
  g_autoptr(CohortTokenizer) t = g_new0(CohortTokenizer, 1);
  t->exports = g_ptr_array_new_with_free_func(bpe_file_free);
  if (json) {
    t->kind = "tokenizer.json";
    if (!load_json(t, json, error))
      return NULL;
    const char *files[] = {json, NULL};
    t->files = g_new0(char *, 2);
    t->files[0] = g_canonicalize_filename(files[0], NULL);
  } else {
    t->kind = "vocab.json + merges.txt";
    if (!load_vocab_merges(t, vocab, merges, error))
      return NULL;
    t->files = g_new0(char *, 3);
    t->files[0] = g_canonicalize_filename(vocab, NULL);
    t->files[1] = g_canonicalize_filename(merges, NULL);
  }
  g_autofree char *dir = g_path_get_dirname(t->files[0]);
  keep_companions(t, dir);
  if (!tok_read_config(t, dir, error))
    return NULL;
  if (t->eot < 0 && t->bos_token)
    t->eot = find_text(t, t->bos_token);
  return g_steal_pointer(&t);
}

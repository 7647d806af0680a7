/* Captions of an image folder; see captions.h for the rules. */
#include "data/captions.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/dataset.h"
#include "data/example-rng.h"
#include "engine/base/json-read.h"
#include "engine/base/json-write.h"

static const char *const problem_words[COHORT_CAPTION_KINDS] = {
    [COHORT_CAPTION_MISSING] = "missing",
    [COHORT_CAPTION_UNREADABLE] = "unreadable",
    [COHORT_CAPTION_TOO_LONG] = "over 64 KiB",
    [COHORT_CAPTION_NOT_UTF8] = "not UTF-8",
    [COHORT_CAPTION_BINARY] = "binary (control characters)",
    [COHORT_CAPTION_EMPTY] = "empty",
    [COHORT_CAPTION_IGNORED_TXT] = ".txt ignored (metadata.jsonl wins)",
    [COHORT_CAPTION_UNKNOWN] = "metadata.jsonl lines naming no image here",
};

static void note(CohortCaptions *c, CohortCaptionProblem kind, const char *name)
{
  if (c->count[kind]++ < COHORT_CAPTION_NAMES)
    g_ptr_array_add(c->names[kind], cohort_utf8_escape(name));
}

/* The caption of `len` bytes of text: runs of white space made one space, ends trimmed. NULL
 * with *kind set when the text is not a caption (too long, not UTF-8, control characters). */
static char *normalize(const char *text, size_t len, CohortCaptionProblem *kind)
{
  if (len > COHORT_CAPTION_MAX_BYTES) {
    *kind = COHORT_CAPTION_TOO_LONG;
    return NULL;
  }
  if (!g_utf8_validate(text, (gssize)len, NULL)) { /* a NUL byte fails here too */
    *kind = memchr(text, '\0', len) ? COHORT_CAPTION_BINARY : COHORT_CAPTION_NOT_UTF8;
    return NULL;
  }
  GString *out = g_string_sized_new(len);
  gboolean space = FALSE;
  for (size_t i = 0; i < len; i++) {
    unsigned char ch = (unsigned char)text[i];
    if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r') {
      space = TRUE;
      continue;
    }
    if (ch < 0x20 || ch == 0x7f) {
      *kind = COHORT_CAPTION_BINARY;
      g_string_free(out, TRUE);
      return NULL;
    }
    if (space && out->len > 0)
      g_string_append_c(out, ' ');
    space = FALSE;
    g_string_append_c(out, (char)ch);
  }
  return g_string_free(out, FALSE);
}

/* The caption file of image `rel`: its path with the extension made ".txt". */
static char *txt_path(const char *folder, const char *rel)
{
  const char *slash = strrchr(rel, '/'), *dot = strrchr(rel, '.');
  size_t stem = dot && (!slash || dot > slash) ? (size_t)(dot - rel) : strlen(rel);
  g_autofree char *name = g_strdup_printf("%.*s.txt", (int)stem, rel);
  return g_build_filename(folder, name, NULL);
}

/* Reads a caption file without ever holding more than the limit: NULL with *kind set when
 * there is none or it is no caption. */
static char *read_txt(const char *path, CohortCaptionProblem *kind)
{
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not block */
  if (fd < 0) {
    *kind = errno == ENOENT ? COHORT_CAPTION_MISSING : COHORT_CAPTION_UNREADABLE;
    return NULL;
  }
  struct stat st;
  char *text = NULL;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    *kind = COHORT_CAPTION_UNREADABLE;
  } else if (st.st_size > COHORT_CAPTION_MAX_BYTES) {
    *kind = COHORT_CAPTION_TOO_LONG;
  } else {
    char *buf = g_malloc(COHORT_CAPTION_MAX_BYTES + 1);
    size_t got = 0;
    ssize_t n = 1;
    while (got <= COHORT_CAPTION_MAX_BYTES &&
           (n = read(fd, buf + got, COHORT_CAPTION_MAX_BYTES + 1 - got)) > 0)
      got += (size_t)n;
    if (n < 0)
      *kind = COHORT_CAPTION_UNREADABLE;
    else
      text = normalize(buf, got, kind); /* a file grown past the limit: TOO_LONG */
    g_free(buf);
  }
  close(fd);
  return text;
}

static void read_txt_captions(const char *folder, const CohortImageListing *listing,
                              CohortCaptions *c)
{
  for (guint i = 0; i < listing->entries->len; i++) {
    const CohortImageEntry *e = &g_array_index(listing->entries, CohortImageEntry, i);
    if (e->bad)
      continue;
    g_autofree char *path = txt_path(folder, e->rel);
    CohortCaptionProblem kind = COHORT_CAPTION_MISSING;
    char *text = read_txt(path, &kind);
    if (!text) {
      note(c, kind, e->rel);
      continue;
    }
    c->captions->pdata[i] = text;
  }
}

/* Reads one line of at most COHORT_CAPTION_MAX_LINE bytes into `line` (without its '\n');
 * returns FALSE at the end of the file. *too_long is set for a longer line, of which the rest
 * is skipped unread into memory. */
static gboolean read_line(FILE *f, GString *line, gboolean *too_long)
{
  g_string_truncate(line, 0);
  *too_long = FALSE;
  int ch = EOF;
  gboolean any = FALSE;
  while ((ch = getc(f)) != EOF) {
    any = TRUE;
    if (ch == '\n')
      break;
    if (line->len < COHORT_CAPTION_MAX_LINE)
      g_string_append_c(line, (char)ch);
    else
      *too_long = TRUE;
  }
  return any;
}

static gboolean line_error(GError **error, const char *path, guint no, const char *what)
{
  g_autofree char *shown = cohort_utf8_escape(path);
  g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_FORMAT,
              "%s:%u: %s; allowed: one JSON object a line with \"file_name\" (an image's path "
              "below the folder, as \"a.png\" or \"class/a.png\") and \"text\" (its caption) "
              "strings, each image once",
              shown, no, what);
  return FALSE;
}

/* One metadata.jsonl line: the caption of the image it names, or a counted problem. */
static gboolean jsonl_line(CohortCaptions *c, GHashTable *index, GHashTable *seen, const char *path,
                           guint no, const GString *line, GError **error)
{
  g_autofree char *source = g_strdup_printf("%s:%u", path, no);
  g_autoptr(GError) local = NULL;
  g_autoptr(JsonNode) node =
      cohort_json_parse_strict(line->str, (gssize)line->len, source, 0, &local);
  if (!node)
    return line_error(error, path, no, local->message);
  JsonObject *o = JSON_NODE_HOLDS_OBJECT(node) ? json_node_get_object(node) : NULL;
  JsonNode *name = o ? json_object_get_member(o, "file_name") : NULL;
  JsonNode *text = o ? json_object_get_member(o, "text") : NULL;
  if (!name || json_node_get_value_type(name) != G_TYPE_STRING)
    return line_error(error, path, no, "no \"file_name\" string");
  if (!text || json_node_get_value_type(text) != G_TYPE_STRING)
    return line_error(error, path, no, "no \"text\" string");
  const char *rel = json_node_get_string(name);
  gpointer at = NULL;
  if (!g_hash_table_lookup_extended(index, rel, NULL, &at)) {
    note(c, COHORT_CAPTION_UNKNOWN, rel);
    return TRUE;
  }
  gpointer before = g_hash_table_lookup(seen, rel);
  if (before) {
    g_autofree char *what = g_strdup_printf("\"%s\" is captioned again (first on line %u)", rel,
                                            GPOINTER_TO_UINT(before));
    return line_error(error, path, no, what);
  }
  g_hash_table_insert(seen, g_strdup(rel), GUINT_TO_POINTER(no));
  const char *s = json_node_get_string(text);
  CohortCaptionProblem kind = COHORT_CAPTION_MISSING;
  char *caption = normalize(s, strlen(s), &kind);
  if (!caption)
    note(c, kind, rel);
  c->captions->pdata[GPOINTER_TO_UINT(at)] = caption;
  return TRUE;
}

static gboolean read_jsonl_captions(const char *folder, const char *path,
                                    const CohortImageListing *listing, CohortCaptions *c,
                                    GError **error)
{
  /* O_NONBLOCK: a FIFO named metadata.jsonl must not wait for a writer */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
  struct stat st;
  if (fd >= 0 && !f)
    close(fd);
  if (!f || fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    g_autofree char *shown = cohort_utf8_escape(path);
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_IO,
                "%s: cannot read captions: %s; allowed: a regular file of JSON lines", shown,
                f ? "not a regular file" : g_strerror(errno));
    if (f)
      fclose(f);
    return FALSE;
  }
  g_autoptr(GHashTable) index = g_hash_table_new(g_str_hash, g_str_equal);
  g_autoptr(GHashTable) seen = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
  for (guint i = 0; i < listing->entries->len; i++) {
    const CohortImageEntry *e = &g_array_index(listing->entries, CohortImageEntry, i);
    if (!e->bad)
      g_hash_table_insert(index, e->rel, GUINT_TO_POINTER(i));
  }
  g_autoptr(GString) line = g_string_new(NULL);
  gboolean too_long = FALSE, ok = TRUE;
  for (guint no = 1; ok && read_line(f, line, &too_long); no++) {
    if (too_long) {
      g_autofree char *what = g_strdup_printf("a line over %d bytes", COHORT_CAPTION_MAX_LINE);
      ok = line_error(error, path, no, what);
    } else if (line->len > 0 && strspn(line->str, " \t\r") < line->len) { /* blank: skipped */
      ok = jsonl_line(c, index, seen, path, no, line, error);
    }
  }
  fclose(f);
  if (!ok)
    return FALSE;
  /* images without a line, and the .txt files this choice leaves unread */
  for (guint i = 0; i < listing->entries->len; i++) {
    const CohortImageEntry *e = &g_array_index(listing->entries, CohortImageEntry, i);
    if (e->bad)
      continue;
    if (!g_hash_table_contains(seen, e->rel))
      note(c, COHORT_CAPTION_MISSING, e->rel);
    g_autofree char *txt = txt_path(folder, e->rel);
    if (g_file_test(txt, G_FILE_TEST_EXISTS))
      note(c, COHORT_CAPTION_IGNORED_TXT, e->rel);
  }
  return TRUE;
}

gboolean cohort_captions_read(const char *folder, const CohortImageListing *listing,
                              CohortCaptions *out, GError **error)
{
  memset(out, 0, sizeof(*out));
  out->captions = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_set_size(out->captions, (gint)listing->entries->len);
  for (int k = 0; k < COHORT_CAPTION_KINDS; k++)
    out->names[k] = g_ptr_array_new_with_free_func(g_free);
  g_autofree char *jsonl = g_build_filename(folder, "metadata.jsonl", NULL);
  gboolean ok = TRUE;
  if (g_file_test(jsonl, G_FILE_TEST_EXISTS)) {
    out->source = COHORT_CAPTIONS_JSONL;
    ok = read_jsonl_captions(folder, jsonl, listing, out, error);
  } else {
    out->source = COHORT_CAPTIONS_TXT;
    read_txt_captions(folder, listing, out);
  }
  guint images = 0;
  for (guint i = 0; ok && i < listing->entries->len; i++) {
    const CohortImageEntry *e = &g_array_index(listing->entries, CohortImageEntry, i);
    const char *caption = out->captions->pdata[i];
    images += !e->bad;
    out->captioned += caption != NULL;
    if (caption && !*caption)
      note(out, COHORT_CAPTION_EMPTY, e->rel);
  }
  if (ok && images > 0 && out->captioned == 0) {
    g_autofree char *shown = cohort_utf8_escape(folder);
    g_autofree char *summary = cohort_captions_summary(out);
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_FORMAT,
                "%s: no image has a caption (%s); allowed: IMAGE.txt beside each image (kohya's "
                "convention) or a metadata.jsonl at the folder's root with \"file_name\" and "
                "\"text\" (Hugging Face ImageFolder's)",
                shown, summary);
    ok = FALSE;
  }
  if (!ok)
    cohort_captions_clear(out);
  return ok;
}

void cohort_captions_clear(CohortCaptions *c)
{
  if (c->captions)
    g_ptr_array_unref(c->captions);
  for (int k = 0; k < COHORT_CAPTION_KINDS; k++)
    if (c->names[k])
      g_ptr_array_unref(c->names[k]);
  memset(c, 0, sizeof(*c));
}

char *cohort_captions_summary(const CohortCaptions *c)
{
  GString *s = g_string_new(NULL);
  g_string_append_printf(s, "captions from %s: %u of %u images",
                         c->source == COHORT_CAPTIONS_JSONL ? "metadata.jsonl" : ".txt files",
                         c->captioned, c->captions ? c->captions->len : 0);
  for (int k = 0; k < COHORT_CAPTION_KINDS; k++) {
    if (!c->count[k])
      continue;
    g_string_append_printf(s, "; %u %s (", c->count[k], problem_words[k]);
    for (guint i = 0; i < c->names[k]->len; i++)
      g_string_append_printf(s, "%s%s", i ? ", " : "", (const char *)c->names[k]->pdata[i]);
    g_string_append(s, c->count[k] > c->names[k]->len ? ", …)" : ")");
  }
  return g_string_free(s, FALSE);
}

char *cohort_caption_for_example(const CohortCaptions *c, guint index, const char *prefix,
                                 double dropout, guint64 seed, guint64 epoch)
{
  g_return_val_if_fail(index < c->captions->len, NULL);
  if (dropout > 0) {
    CohortExampleRng rng;
    cohort_example_rng_init(&rng, seed, epoch, index, COHORT_RNG_STREAM_CAPTION_DROP);
    if (cohort_example_rng_uniform(&rng) < dropout)
      return g_strdup("");
  }
  const char *caption = c->captions->pdata[index];
  gboolean has_prefix = prefix && *prefix, has_caption = caption && *caption;
  if (has_prefix && has_caption)
    return g_strconcat(prefix, ", ", caption, NULL);
  return g_strdup(has_prefix ? prefix : has_caption ? caption : "");
}

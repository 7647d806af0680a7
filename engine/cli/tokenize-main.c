/* cohort-tokenize: text to llm.c token shards with a GPT-2 byte-level BPE tokenizer, in C and
 * on all cores; and shards back to text. */
#include "cohort-build-config.h"
#include "data/dataset.h"
#include "data/text-sources.h"
#include "data/token-shards.h"
#include "data/tokenize-job.h"
#include "data/tokenizer.h"
#include "engine/base/outputs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
    "Usage: cohort-tokenize --tokenizer PATH -o OUT.bin [OPTIONS] FILE...\n"
    "       cohort-tokenize --tokenizer PATH --decode FILE.bin\n"
    "\n"
    "Encodes text with a GPT-2 byte-level BPE tokenizer into llm.c token shards (a header of\n"
    "256 little-endian int32: magic 20240520, version 1, token count; then the tokens as\n"
    "uint16), each document preceded by <|endoftext|>. A FILE is one document; a .jsonl file\n"
    "holds one document per line in its \"text\" member; a folder stands for its .txt and\n"
    ".jsonl files (in name order), and a pattern such as 'books/*.txt' for the files it\n"
    "matches. Bytes that are not UTF-8 are tokenized as they are; such files are named in the\n"
    "summary.\n"
    "\n"
    "  --tokenizer PATH     tokenizer.json, vocab.json (with merges.txt beside it), or a\n"
    "                       folder holding either (a Hugging Face model folder)\n"
    "  -o, --output OUT.bin where the tokens go\n"
    "  --shard-tokens N     cut the output into OUT_000000.bin, OUT_000001.bin, ... of at\n"
    "                       most N tokens each (default: one file)\n"
    "  --val-fraction F     the first F of the tokens (0 <= F < 1) go to OUT_val.bin, a\n"
    "                       validation shard, as llm.c's data scripts put validation first\n"
    "  --threads N          encoding threads (default 0: one per processor)\n"
    "  --decode FILE.bin    print the text of a shard (its bytes, as they were) and exit\n"
    "  --quiet              no progress line and no summary\n"
    "  --version, --help\n"
    "\n"
    "Exit status: 0 done, 1 a file could not be read or written (the message names it),\n"
    "2 a bad command line.\n";

typedef struct {
  const char *tokenizer, *output, *decode;
  guint64 shard_tokens;
  double val_fraction;
  int threads;
  gboolean quiet;
  GPtrArray *files;
} Options;

static int bad_usage(const char *fmt, ...) G_GNUC_PRINTF(1, 2);
static int bad_usage(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  g_autofree char *msg = g_strdup_vprintf(fmt, ap);
  va_end(ap);
  fprintf(stderr, "cohort-tokenize: %s (see --help)\n", msg);
  return 2;
}

static int failed(GError *error)
{
  fprintf(stderr, "cohort-tokenize: %s\n", error->message);
  g_error_free(error);
  return 1;
}

/* The value of "--flag VALUE" or "--flag=VALUE" at argv[*i]; NULL when `flag` is not it. */
static const char *flag_value(int argc, char **argv, int *i, const char *flag, gboolean *missing)
{
  const char *a = argv[*i];
  gsize n = strlen(flag);
  if (strncmp(a, flag, n) != 0)
    return NULL;
  if (a[n] == '=')
    return a + n + 1;
  if (a[n] != '\0')
    return NULL;
  if (*i + 1 >= argc) {
    *missing = TRUE;
    return NULL;
  }
  return argv[++*i];
}

static gboolean parse_number(const char *flag, const char *text, double min, double max,
                             double *out)
{
  char *end = NULL;
  double v = g_ascii_strtod(text, &end);
  if (end == text || *end != '\0' || !(v >= min && v <= max)) {
    bad_usage("%s \"%s\" is not allowed; allowed: a number from %g to %g", flag, text, min, max);
    return FALSE;
  }
  *out = v;
  return TRUE;
}

static gboolean parse_whole(const char *flag, const char *text, guint64 min, guint64 max,
                            guint64 *out)
{
  char *end = NULL;
  guint64 v = g_ascii_strtoull(text, &end, 10);
  if (end == text || *end != '\0' || text[0] == '-' || v < min || v > max) {
    bad_usage("%s \"%s\" is not allowed; allowed: a whole number from %" G_GUINT64_FORMAT
              " to %" G_GUINT64_FORMAT,
              flag, text, min, max);
    return FALSE;
  }
  *out = v;
  return TRUE;
}

/* Parses the command line into `o`; returns -1 to go on, else the exit status. */
static int parse(int argc, char **argv, Options *o)
{
  o->files = g_ptr_array_new();
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v;
    gboolean missing = FALSE;
    guint64 whole;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      fputs(usage, stdout);
      return 0;
    } else if (strcmp(a, "--version") == 0) {
      printf("cohort-tokenize %s\n", COHORT_VERSION);
      return 0;
    } else if (strcmp(a, "--quiet") == 0) {
      o->quiet = TRUE;
    } else if ((v = flag_value(argc, argv, &i, "--tokenizer", &missing))) {
      o->tokenizer = v;
    } else if ((v = flag_value(argc, argv, &i, "--output", &missing)) ||
               (v = flag_value(argc, argv, &i, "-o", &missing))) {
      o->output = v;
    } else if ((v = flag_value(argc, argv, &i, "--decode", &missing))) {
      o->decode = v;
    } else if ((v = flag_value(argc, argv, &i, "--shard-tokens", &missing))) {
      if (!parse_whole("--shard-tokens", v, 1, COHORT_SHARD_MAX_TOKENS, &o->shard_tokens))
        return 2;
    } else if ((v = flag_value(argc, argv, &i, "--val-fraction", &missing))) {
      if (!parse_number("--val-fraction", v, 0, 0.999999, &o->val_fraction))
        return 2;
    } else if ((v = flag_value(argc, argv, &i, "--threads", &missing))) {
      if (!parse_whole("--threads", v, 0, 64, &whole))
        return 2;
      o->threads = (int)whole;
    } else if (missing) {
      return bad_usage("%s needs a value", a);
    } else if (a[0] == '-' && a[1] != '\0') {
      return bad_usage("unknown option %s", a);
    } else {
      g_ptr_array_add(o->files, (gpointer)a);
    }
  }
  if (!o->tokenizer)
    return bad_usage("--tokenizer PATH is required");
  if (o->decode && (o->output || o->files->len > 0))
    return bad_usage("--decode takes no output and no other files");
  if (!o->decode && (!o->output || o->files->len == 0))
    return bad_usage(o->output ? "no input files" : "-o OUT.bin is required");
  return -1;
}

/* --decode: the shard's tokens as bytes on stdout. */
static int decode(const CohortTokenizer *tok, const char *path)
{
  GError *error = NULL;
  g_autoptr(GMappedFile) map = g_mapped_file_new(path, FALSE, &error);
  if (!map)
    return failed(error);
  const guint8 *bytes = (const guint8 *)g_mapped_file_get_contents(map);
  gsize n = 0;
  if (!cohort_token_shard_check(bytes, g_mapped_file_get_length(map), path, &n, &error))
    return failed(error);
  const guint8 *tokens = bytes + COHORT_SHARD_HEADER_BYTES;
  g_autoptr(GByteArray) out = g_byte_array_new();
  int ids[4096];
  for (gsize at = 0; at < n;) {
    gsize k = MIN(n - at, G_N_ELEMENTS(ids));
    for (gsize i = 0; i < k; i++) {
      guint16 t;
      memcpy(&t, tokens + 2 * (at + i), sizeof t);
      ids[i] = GUINT16_FROM_LE(t);
    }
    g_byte_array_set_size(out, 0);
    if (!cohort_tokenizer_decode(tok, ids, k, out, &error)) {
      g_prefix_error(&error, "%s: position %" G_GSIZE_FORMAT ": ", path, at);
      return failed(error);
    }
    if (fwrite(out->data, 1, out->len, stdout) != out->len) {
      fprintf(stderr, "cohort-tokenize: cannot write the text to standard output\n");
      return 1;
    }
    at += k;
  }
  return fflush(stdout) == 0 ? 0 : 1;
}

typedef struct {
  CohortShardWriter *writer;
  gboolean live;
  gint64 last_us;
} Progress;

static gboolean sink(const gint32 *ids, gsize n, gpointer data, GError **error)
{
  Progress *p = data;
  return cohort_shard_writer_add(p->writer, ids, n, error);
}

static void show_progress(const CohortTokenizeProgress *s, gpointer data)
{
  Progress *p = data;
  gint64 now = g_get_monotonic_time();
  if (!p->live || (now - p->last_us < 200000 && s->bytes_done < s->bytes_total))
    return;
  p->last_us = now;
  double mb_s = s->elapsed_s > 0 ? s->bytes_done / 1e6 / s->elapsed_s : 0;
  double eta = mb_s > 0 ? (s->bytes_total - s->bytes_done) / 1e6 / mb_s : 0;
  fprintf(stderr,
          "\rtokenizing: %.1f MB of %.1f MB, %.1f MB/s, %" G_GUINT64_FORMAT
          " tokens, ETA %.0f s   ",
          s->bytes_done / 1e6, s->bytes_total / 1e6, mb_s, s->tokens, eta);
}

static void summary(const Options *o, const CohortTokenizeProgress *s, GPtrArray *written,
                    GPtrArray *not_utf8)
{
  if (o->quiet)
    return;
  printf("%" G_GUINT64_FORMAT " documents, %.1f MB, %" G_GUINT64_FORMAT
         " tokens in %.2f s (%.2f MB/s; %.2f CPU s, %.2f MB per CPU second)\n",
         s->documents, s->bytes_done / 1e6, s->tokens, s->elapsed_s,
         s->elapsed_s > 0 ? s->bytes_done / 1e6 / s->elapsed_s : 0.0, s->cpu_s,
         s->cpu_s > 0 ? s->bytes_done / 1e6 / s->cpu_s : 0.0);
  for (guint i = 0; i < written->len; i++)
    printf("wrote %s\n", (const char *)written->pdata[i]);
  if (not_utf8->len > 0)
    printf("%u file%s not UTF-8 (tokenized as bytes):\n", not_utf8->len,
           not_utf8->len == 1 ? " is" : "s are");
  for (guint i = 0; i < not_utf8->len; i++)
    printf("  %s\n", (const char *)not_utf8->pdata[i]);
}

/* The one output rule (engine/base/outputs.h), before a byte is tokenized: no file this run
 * writes (-o's NAME.bin, NAME_val.bin, numbered shards) may be one of its inputs (the text
 * files, the tokenizer's), and -o must be a new or regular file, never a device such as
 * /dev/null (its shards would be made beside it: /dev/null.bin). */
static gboolean check_outputs(const Options *o, const CohortTokenizer *tok,
                              const CohortTextSources *src, GError **error)
{
  g_autoptr(CohortOutputs) io = cohort_outputs_new();
  for (const char *const *f = cohort_tokenizer_files(tok); *f; f++)
    cohort_outputs_add_input(io, *f);
  for (guint i = 0; i < cohort_text_sources_n_files(src); i++)
    cohort_outputs_add_input(io, cohort_text_sources_path(src, i));
  g_autofree char *stem = g_str_has_suffix(o->output, ".bin")
                              ? g_strndup(o->output, strlen(o->output) - 4)
                              : g_strdup(o->output);
  g_autoptr(GPtrArray) names = g_ptr_array_new_with_free_func(g_free);
  if (o->shard_tokens == 0) {
    g_ptr_array_add(names, g_strconcat(stem, ".bin", NULL));
    if (o->val_fraction > 0)
      g_ptr_array_add(names, g_strconcat(stem, "_val.bin", NULL));
  } else {
    /* numbered shards: the inputs that bear one's name beside -o */
    g_autofree char *dir = g_path_get_dirname(stem), *base = g_path_get_basename(stem);
    g_autofree char *escaped = g_regex_escape_string(base, -1);
    g_autofree char *pattern = g_strdup_printf("^%s(_val)?_[0-9]{6}\\.bin$", escaped);
    for (guint i = 0; i < cohort_text_sources_n_files(src); i++) {
      g_autofree char *name = g_path_get_basename(cohort_text_sources_path(src, i));
      if (g_regex_match_simple(pattern, name, 0, 0))
        g_ptr_array_add(names, g_build_filename(dir, name, NULL));
    }
  }
  g_autoptr(CohortOutputs) alone = cohort_outputs_new();
  if (!cohort_outputs_add(alone, o->output, "-o", error))
    return FALSE;
  for (guint i = 0; i < names->len; i++)
    if (!cohort_outputs_add(io, names->pdata[i], "-o's shard", error))
      return FALSE;
  return TRUE;
}

static int encode(const Options *o, const CohortTokenizer *tok)
{
  GError *error = NULL;
  g_ptr_array_add(o->files, NULL);
  g_autoptr(CohortTextSources) src =
      cohort_text_sources_open((const char *const *)o->files->pdata, &error);
  if (!src || !check_outputs(o, tok, src, &error))
    return failed(error);
  g_autoptr(CohortShardWriter) w =
      cohort_shard_writer_new(o->output, cohort_tokenizer_vocab_size(tok), &error);
  if (!w)
    return failed(error);
  Progress p = {.writer = w, .live = !o->quiet && isatty(STDERR_FILENO)};
  CohortTokenizeJob job = {.tokenizer = tok,
                           .threads = o->threads,
                           .begin = 0,
                           .end = cohort_text_sources_size(src),
                           .sink = sink,
                           .progress = show_progress,
                           .user_data = &p};
  CohortTokenizeProgress done = {0};
  g_autoptr(GPtrArray) not_utf8 = g_ptr_array_new_with_free_func(g_free);
  g_autoptr(GPtrArray) written = g_ptr_array_new_with_free_func(g_free);
  gboolean ok = cohort_tokenize_run(src, &job, &done, not_utf8, &error);
  if (p.live)
    fputc('\n', stderr);
  if (!ok || !cohort_shard_writer_finish(w, o->shard_tokens, o->val_fraction, written, &error))
    return failed(error);
  summary(o, &done, written, not_utf8);
  return 0;
}

int main(int argc, char **argv)
{
  Options o = {0};
  int rc = parse(argc, argv, &o);
  if (rc < 0) {
    GError *error = NULL;
    g_autoptr(CohortTokenizer) tok = cohort_tokenizer_load(o.tokenizer, &error);
    rc = !tok ? failed(error) : o.decode ? decode(tok, o.decode) : encode(&o, tok);
  }
  g_ptr_array_unref(o.files);
  return rc;
}

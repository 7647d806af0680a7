/* cohort-tokenize's modes besides writing shards: --decode (a shard back to text), --ids (the
 * ids of whole files, as the tokenizers library encodes them) and --render-chat
 * (conversations through the tokenizer's chat template). */
#include "engine/cli/tokenize-cli.h"

#include <stdio.h>
#include <string.h>

#include "data/chat-template.h"
#include "data/dataset.h"
#include "engine/base/fileio.h"

/* Files given to --ids are read whole. */
#define MAX_IDS_FILE (1u << 30)

int tokenize_failed(GError *error)
{
  fprintf(stderr, "cohort-tokenize: %s\n", error->message);
  g_error_free(error);
  return 1;
}

static int write_out(const void *p, gsize n)
{
  if (n && fwrite(p, 1, n, stdout) != n) {
    fprintf(stderr, "cohort-tokenize: cannot write to standard output\n");
    return 1;
  }
  return 0;
}

int tokenize_decode(const CohortTokenizer *tok, const char *path)
{
  GError *error = NULL;
  /* A regular file only: a FIFO or a device would block or never end. */
  g_autoptr(GMappedFile) map = cohort_file_map_regular(path, G_MAXUINT64, "token shard", &error);
  if (!map)
    return tokenize_failed(error);
  const guint8 *bytes = (const guint8 *)g_mapped_file_get_contents(map);
  gsize n = 0;
  int width = 2;
  if (!cohort_token_shard_check_width(bytes, g_mapped_file_get_length(map), path, &n, &width,
                                      &error))
    return tokenize_failed(error);
  const guint8 *tokens = bytes + COHORT_SHARD_HEADER_BYTES;
  g_autoptr(GByteArray) out = g_byte_array_new();
  int ids[4096];
  for (gsize at = 0; at < n;) {
    gsize k = MIN(n - at, G_N_ELEMENTS(ids));
    for (gsize i = 0; i < k; i++)
      ids[i] = (int)cohort_shard_token(tokens, width, at + i);
    g_byte_array_set_size(out, 0);
    if (!cohort_tokenizer_decode_part(tok, ids, k, at == 0, out, &error)) {
      g_prefix_error(&error, "%s: position %" G_GSIZE_FORMAT ": ", path, at);
      return tokenize_failed(error);
    }
    if (write_out(out->data, out->len))
      return 1;
    at += k;
  }
  return fflush(stdout) == 0 ? 0 : 1;
}

int tokenize_ids(const CohortTokenizer *tok, GPtrArray *files, gboolean add_special)
{
  g_autoptr(CohortEncoder) enc = cohort_encoder_new(tok);
  g_autoptr(GArray) ids = g_array_new(FALSE, FALSE, sizeof(gint32));
  g_autoptr(GString) line = g_string_new(NULL);
  for (guint f = 0; f < files->len; f++) {
    const char *path = files->pdata[f];
    GError *error = NULL;
    gsize len = 0;
    g_autofree char *text = cohort_file_read_regular(path, MAX_IDS_FILE, "text file", &len, &error);
    if (!text)
      return tokenize_failed(error);
    g_array_set_size(ids, 0);
    guint flags = COHORT_ENCODE_SPECIAL | (add_special ? COHORT_ENCODE_ADD_SPECIAL : 0);
    if (!cohort_encoder_encode(enc, text, len, flags, ids, &error)) {
      g_prefix_error(&error, "%s: ", path);
      return tokenize_failed(error);
    }
    g_string_truncate(line, 0);
    for (guint i = 0; i < ids->len; i++)
      g_string_append_printf(line, i ? " %d" : "%d", g_array_index(ids, gint32, i));
    g_string_append_c(line, '\n');
    if (write_out(line->str, line->len))
      return 1;
  }
  if (cohort_encoder_pieces_cut(enc) > 0)
    fprintf(stderr,
            "cohort-tokenize: %" G_GUINT64_FORMAT " words longer than 1 MiB were cut where the "
            "tokenizer allows no cut; the ids there differ from the tokenizers library's\n",
            cohort_encoder_pieces_cut(enc));
  return fflush(stdout) == 0 ? 0 : 1;
}

int tokenize_render_chat(const CohortTokenizer *tok, const char *path, gboolean generation_prompt)
{
  GError *error = NULL;
  const char *source = cohort_tokenizer_files(tok)[0];
  g_autofree char *dir = g_path_get_dirname(source);
  g_autofree char *where = g_build_filename(dir, "tokenizer_config.json", NULL);
  if (!cohort_tokenizer_chat_template(tok)) {
    fprintf(stderr,
            "cohort-tokenize: %s: no chat_template (nor chat_template.jinja beside it); "
            "allowed: a tokenizer folder whose tokenizer_config.json has one\n",
            where);
    return 1;
  }
  g_autoptr(CohortChatTemplate) tmpl =
      cohort_chat_template_new(cohort_tokenizer_chat_template(tok), where, &error);
  if (!tmpl)
    return tokenize_failed(error);
  gsize len = 0;
  g_autofree char *text =
      cohort_file_read_regular(path, MAX_IDS_FILE, "conversations file", &len, &error);
  if (!text)
    return tokenize_failed(error);
  g_autoptr(GString) out = g_string_new(NULL);
  guint64 number = 0;
  for (char *p = text, *end = text + len; p < end;) {
    char *nl = memchr(p, '\n', (gsize)(end - p));
    gsize n = nl ? (gsize)(nl - p) : (gsize)(end - p);
    number++;
    g_autofree char *at = g_strdup_printf("%s: line %" G_GUINT64_FORMAT, path, number);
    g_autofree char *rendered = NULL;
    gboolean blank = TRUE;
    for (gsize i = 0; i < n && blank; i++)
      blank = p[i] == ' ' || p[i] == '\t' || p[i] == '\r';
    if (!blank) {
      rendered = cohort_chat_render_line(tmpl, tok, p, n, generation_prompt, at, &error);
      if (!rendered)
        return tokenize_failed(error);
      g_string_truncate(out, 0);
      cohort_json_string_append(out, rendered);
      g_string_append_c(out, '\n');
      if (write_out(out->str, out->len))
        return 1;
    }
    p += n + 1;
  }
  return fflush(stdout) == 0 ? 0 : 1;
}

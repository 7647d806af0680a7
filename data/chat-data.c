/* Chat data: conversations rendered, tokenized and flagged (data/chat-data.h); the cache file
 * is data/chat-cache.c. */
#include "data/chat-data.h"

#include <string.h>

#include "data/dataset.h"
#include "data/file-list.h"
#include "engine/base/json-read.h"

static const char *const roles[] = {"system", "user", "assistant", "tool", NULL};

static gboolean bad(GError **error, const char *where, const char *fmt, ...) G_GNUC_PRINTF(3, 4);
static gboolean bad(GError **error, const char *where, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  g_autofree char *msg = g_strdup_vprintf(fmt, ap);
  va_end(ap);
  g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_FORMAT, "%s: %s", where, msg);
  return FALSE;
}

static gboolean is_string(JsonNode *n)
{
  return n && JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == G_TYPE_STRING;
}

/* The conversation's object, its messages checked; *assistant gets, per message, whether it is
 * the assistant's (a new array). */
static JsonNode *read_line(const char *line, gsize len, const char *where, GArray **assistant,
                           GError **error)
{
  g_autoptr(JsonNode) root = cohort_json_parse_strict(line, (gssize)len, where, 0, error);
  if (!root)
    return NULL;
  if (!JSON_NODE_HOLDS_OBJECT(root))
    return bad(error, where,
               "not a JSON object; allowed: {\"messages\": [{\"role\": …, "
               "\"content\": …}, …]}"),
           NULL;
  JsonNode *msgs = json_object_get_member(json_node_get_object(root), "messages");
  if (!msgs || !JSON_NODE_HOLDS_ARRAY(msgs))
    return bad(error, where,
               "field \"messages\": %s; allowed: a list of {\"role\": …, "
               "\"content\": …}",
               msgs ? "not a list" : "missing"),
           NULL;
  JsonArray *a = json_node_get_array(msgs);
  g_autoptr(GArray) is_assistant = g_array_new(FALSE, TRUE, sizeof(gboolean));
  gboolean any = FALSE;
  for (guint i = 0; i < json_array_get_length(a); i++) {
    JsonNode *m = json_array_get_element(a, i);
    JsonObject *mo = JSON_NODE_HOLDS_OBJECT(m) ? json_node_get_object(m) : NULL;
    JsonNode *role = mo ? json_object_get_member(mo, "role") : NULL;
    JsonNode *content = mo ? json_object_get_member(mo, "content") : NULL;
    if (!mo)
      return bad(error, where, "field \"messages[%u]\": not an object", i), NULL;
    if (!is_string(role) || !g_strv_contains(roles, json_node_get_string(role)))
      return bad(error, where, "field \"messages[%u].role\": %s; allowed: %s", i,
                 is_string(role) ? json_node_get_string(role) : "not a string", COHORT_CHAT_ROLES),
             NULL;
    if (!is_string(content))
      return bad(error, where, "field \"messages[%u].content\": %s; allowed: a string", i,
                 content ? "not a string" : "missing"),
             NULL;
    gboolean mine = strcmp(json_node_get_string(role), "assistant") == 0;
    any |= mine;
    g_array_append_val(is_assistant, mine);
  }
  if (!any)
    return bad(error, where,
               "field \"messages\": no message of role \"assistant\"; the loss "
               "counts only the assistant's tokens"),
           NULL;
  *assistant = g_steal_pointer(&is_assistant);
  return g_steal_pointer(&root);
}

/* off[k] = where token k's text begins in `text` (off[n] = len): the tokens' decoded bytes,
 * which must give back the text byte for byte. */
static gboolean token_offsets(const CohortTokenizer *tok, const GArray *ids, const char *text,
                              gsize len, const char *where, GArray *off, GError **error)
{
  g_autoptr(GByteArray) out = g_byte_array_new();
  for (guint k = 0; k <= ids->len; k++) {
    gsize at = out->len;
    g_array_append_val(off, at);
    if (k < ids->len &&
        !cohort_tokenizer_decode_part(tok, &g_array_index(ids, gint32, k), 1, k == 0, out, error))
      return FALSE;
  }
  if (out->len != len || memcmp(out->data, text, len) != 0)
    return bad(error, where,
               "the tokenizer's ids do not give back the rendered text byte for byte (its "
               "normalizer or pre-tokenizer changes it), so the assistant's tokens cannot be "
               "found; data_format \"chat\" needs a tokenizer that keeps the text, such as a "
               "byte-level one"),
           FALSE;
  return TRUE;
}

/* Whether token `id` is a special token: its text encodes to it only where special tokens are
 * recognised. */
static gboolean is_special(CohortEncoder *enc, const char *text, gsize len, gint32 id)
{
  g_autoptr(GArray) with = g_array_new(FALSE, FALSE, sizeof(gint32));
  g_autoptr(GArray) without = g_array_new(FALSE, FALSE, sizeof(gint32));
  if (!cohort_encoder_encode(enc, text, len, COHORT_ENCODE_SPECIAL, with, NULL) ||
      !cohort_encoder_encode(enc, text, len, 0, without, NULL))
    return FALSE;
  return with->len == 1 && g_array_index(with, gint32, 0) == id &&
         !(without->len == 1 && g_array_index(without, gint32, 0) == id);
}

/* Flags the tokens holding a byte of [start, end), and the special token that begins at end. */
static void flag_span(CohortEncoder *enc, const char *text, const GArray *ids, const GArray *off,
                      gsize start, gsize end, guint8 *flags)
{
  guint n = ids->len, k = 0;
  while (k < n && g_array_index(off, gsize, k + 1) <= start)
    k++;
  for (; k < n && g_array_index(off, gsize, k) < end; k++)
    flags[k] = 1;
  if (k < n && g_array_index(off, gsize, k) == end) {
    gsize a = end, b = g_array_index(off, gsize, k + 1);
    if (b > a && is_special(enc, text + a, b - a, g_array_index(ids, gint32, k)))
      flags[k] = 1;
  }
}

gboolean cohort_chat_encode_line(const CohortChatTemplate *t, const CohortTokenizer *tok,
                                 CohortEncoder *enc, const char *line, gsize len, const char *where,
                                 GArray *ids, GArray *counted, GError **error)
{
  g_autoptr(GArray) assistant = NULL;
  g_autoptr(JsonNode) root = read_line(line, len, where, &assistant, error);
  if (!root)
    return FALSE;
  g_autoptr(GArray) spans = g_array_new(FALSE, FALSE, sizeof(CohortChatSpan));
  g_autofree char *text = cohort_chat_template_render_spans(
      t, json_node_get_object(root), cohort_tokenizer_bos_token(tok),
      cohort_tokenizer_eos_token(tok), FALSE, where, spans, error);
  if (!text)
    return FALSE;
  gsize n_text = strlen(text);
  g_autoptr(GArray) mine = g_array_new(FALSE, FALSE, sizeof(gint32));
  g_autoptr(GArray) off = g_array_new(FALSE, FALSE, sizeof(gsize));
  if (!cohort_encoder_encode(enc, text, n_text, COHORT_ENCODE_SPECIAL, mine, error)) {
    g_prefix_error(error, "%s: ", where);
    return FALSE;
  }
  if (!token_offsets(tok, mine, text, n_text, where, off, error))
    return FALSE;
  g_autofree guint8 *flags = g_new0(guint8, mine->len + 1);
  g_autofree gboolean *landed = g_new0(gboolean, assistant->len);
  for (guint i = 0; i < spans->len; i++) {
    const CohortChatSpan *s = &g_array_index(spans, CohortChatSpan, i);
    if (s->message >= assistant->len || !g_array_index(assistant, gboolean, s->message))
      continue;
    landed[s->message] = TRUE;
    flag_span(enc, text, mine, off, s->start, s->end, flags);
  }
  for (guint i = 0; i < assistant->len; i++)
    if (g_array_index(assistant, gboolean, i) && !landed[i])
      return bad(error, where,
                 "field \"messages[%u].content\": the chat template does not write this "
                 "assistant message's content where Cohort can follow it (empty, left out, "
                 "or changed by a filter), so its tokens cannot be counted",
                 i);
  g_array_append_vals(ids, mine->data, mine->len);
  g_array_append_vals(counted, flags, mine->len);
  return TRUE;
}

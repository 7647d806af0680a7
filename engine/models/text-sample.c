/* Text samples of the language-model families (engine/models/text-sample.h). */
#include "engine/models/text-sample.h"

#include <string.h>

#include "data/chat-template.h"
#include "data/dataset.h"

char *cohort_bytes_to_utf8(const int *tokens, int n)
{
  g_autofree char *raw = g_new(char, (gsize)n + 1);
  for (int i = 0; i < n; i++)
    raw[i] = (char)(tokens[i] & 0xff);
  raw[n] = 0;
  return g_utf8_make_valid(raw, n);
}

/* The id of the single token `text` encodes to (special tokens recognised), or -1. */
static int single_token(const CohortTokenizer *tok, const char *text)
{
  if (!text || !*text)
    return -1;
  gsize n = 0;
  g_autofree int *ids =
      cohort_tokenizer_encode(tok, text, strlen(text), COHORT_ENCODE_SPECIAL, &n, NULL);
  return ids && n == 1 ? ids[0] : -1;
}

/* sample_prompt as one user message with the generation prompt, by the tokenizer's template. */
static char *render_chat(const CohortTokenizer *tok, const char *prompt, GError **error)
{
  g_autofree char *dir = g_path_get_dirname(cohort_tokenizer_files(tok)[0]);
  g_autofree char *source = g_build_filename(dir, "tokenizer_config.json", NULL);
  g_autoptr(CohortChatTemplate) t =
      cohort_chat_template_new(cohort_tokenizer_chat_template(tok), source, error);
  if (!t)
    return NULL;
  g_autoptr(JsonObject) vars = json_object_new();
  JsonArray *messages = json_array_new();
  JsonObject *user = json_object_new();
  json_object_set_string_member(user, "role", "user");
  json_object_set_string_member(user, "content", prompt);
  json_array_add_object_element(messages, user);
  json_object_set_array_member(vars, "messages", messages);
  return cohort_chat_template_render(t, vars, cohort_tokenizer_bos_token(tok),
                                     cohort_tokenizer_eos_token(tok), TRUE, "sample_prompt", error);
}

int *cohort_text_sample_prompt(const CohortConfig *cfg, const CohortTokenizer *tok, int *n,
                               int *stop, GError **error)
{
  *stop = -1;
  if (!tok)
    return cohort_text_encode(cfg->sample_prompt, n);
  const char *p = cfg->sample_prompt ? cfg->sample_prompt : "";
  g_autofree char *chat = NULL;
  if (cfg->sample_chat && cohort_tokenizer_chat_template(tok)) {
    if (!(chat = render_chat(tok, p, error))) {
      g_prefix_error(error, "sample_chat: ");
      return NULL;
    }
    *stop = single_token(tok, cohort_tokenizer_eos_token(tok));
  }
  guint flags = COHORT_ENCODE_SPECIAL | (chat ? 0 : COHORT_ENCODE_ADD_SPECIAL);
  const char *text = chat ? chat : p;
  gsize len = 0;
  int *ids = cohort_tokenizer_encode(tok, text, strlen(text), flags, &len, error);
  if (!ids) {
    g_prefix_error(error, "sample_prompt: ");
    return NULL;
  }
  if (len == 0 && cohort_tokenizer_eot(tok) >= 0) {
    ids = g_renew(int, ids, 1);
    ids[0] = cohort_tokenizer_eot(tok);
    len = 1;
  }
  *n = (int)len;
  return ids;
}

/* Ids as text: the tokenizer's bytes (or the ids as bytes), invalid UTF-8 replaced by U+FFFD
 * (a sample may end inside a character). */
static char *decode_sample(const CohortTokenizer *tok, const int *ids, int n)
{
  if (!tok)
    return cohort_bytes_to_utf8(ids, n);
  g_autoptr(GByteArray) bytes = g_byte_array_new();
  /* Ids are below the tokenizer's size (the picker's `below`; the model's vocab_size may be
   * larger, never smaller: checked at set-up). */
  if (!cohort_tokenizer_decode(tok, ids, (gsize)n, bytes, NULL))
    return g_strdup("");
  return g_utf8_make_valid((const char *)bytes->data, bytes->len);
}

gboolean cohort_text_sample(CohortModel *m, const CohortSampleRequest *req,
                            CohortGenerateFunc generate, JsonObject *fields, GError **error)
{
  const CohortConfig *cfg = req->cfg;
  int n_prompt = 0, stop = -1;
  g_autofree int *prompt = NULL;
  gboolean text = cfg->data_format == COHORT_DATA_TEXT || req->tokenizer;
  if (text && !(prompt = cohort_text_sample_prompt(cfg, req->tokenizer, &n_prompt, &stop, error)))
    return FALSE;
  CohortTokenPick pick = cohort_token_pick_from_config(cfg);
  if (req->tokenizer) /* a padded embedding's extra rows are no token: never picked */
    pick.below = cohort_tokenizer_vocab_size(req->tokenizer);
  int n_out = 0;
  g_autofree int *seq =
      generate(m, prompt, n_prompt, cfg->sample_tokens, &pick, stop, req->rng, &n_out, error);
  if (!seq)
    return FALSE;
  json_object_set_string_member(fields, COHORT_FIELD_PROMPT, cfg->sample_prompt);
  if (text) {
    g_autofree char *decoded = decode_sample(req->tokenizer, seq, n_out);
    json_object_set_string_member(fields, COHORT_FIELD_TEXT, decoded);
  }
  if (!text || req->tokenizer) {
    JsonArray *ids = json_array_new();
    for (int i = 0; i < n_out; i++)
      json_array_add_int_element(ids, seq[i]);
    json_object_set_array_member(fields, COHORT_FIELD_TOKENS, ids);
  }
  return TRUE;
}

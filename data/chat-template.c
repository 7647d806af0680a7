/* Chat templates; see chat-template.h. */
#include "data/chat-template.h"

#include <string.h>

#include "data/jinja-private.h"
#include "engine/base/json-read.h"
#include "engine/base/json-write.h"

/* A conversation line is read whole. */
#define MAX_LINE (64u << 20)

struct CohortChatTemplate {
  JjArena *arena;
  GPtrArray *body;
  char *source;
};

CohortChatTemplate *cohort_chat_template_new(const char *text, const char *source, GError **error)
{
  g_autofree char *where = g_strdup_printf("%s: chat_template", source);
  JjErrors e = {.source = where};
  JjArena *arena = jj_arena_new();
  gsize len = strlen(text);
  GArray *toks = g_utf8_validate(text, (gssize)len, NULL) ? jj_lex(text, len, arena, &e) : NULL;
  if (!toks && !e.error)
    jj_fail(&e, 1, "the template is not UTF-8 text");
  GPtrArray *body = toks ? jj_parse(toks, arena, &e) : NULL;
  if (toks)
    g_array_unref(toks);
  if (!body) {
    jj_arena_free(arena);
    g_propagate_error(error, e.error);
    return NULL;
  }
  CohortChatTemplate *t = g_new0(CohortChatTemplate, 1);
  t->arena = arena;
  t->body = body;
  t->source = g_steal_pointer(&where);
  return t;
}

void cohort_chat_template_free(CohortChatTemplate *t)
{
  if (!t)
    return;
  jj_arena_free(t->arena);
  g_free(t->source);
  g_free(t);
}

static JjValue *from_json(JjRender *r, JsonNode *n)
{
  switch (json_node_get_node_type(n)) {
  case JSON_NODE_NULL:
    return jj_none(r);
  case JSON_NODE_VALUE: {
    GType t = json_node_get_value_type(n);
    if (t == G_TYPE_STRING) {
      const char *s = json_node_get_string(n);
      return jj_string(r, s, strlen(s));
    }
    if (t == G_TYPE_BOOLEAN)
      return jj_bool(r, json_node_get_boolean(n));
    if (t == G_TYPE_INT64)
      return jj_int(r, json_node_get_int(n));
    return jj_float(r, json_node_get_double(n));
  }
  case JSON_NODE_ARRAY: {
    JsonArray *a = json_node_get_array(n);
    JjValue *l = jj_list(r);
    for (guint i = 0; i < json_array_get_length(a); i++)
      jj_list_add(l, from_json(r, json_array_get_element(a, i)));
    return l;
  }
  default: {
    JjValue *d = jj_dict(r);
    JsonObjectIter it;
    const char *key;
    JsonNode *value;
    json_object_iter_init_ordered(&it, json_node_get_object(n));
    while (json_object_iter_next_ordered(&it, &key, &value))
      jj_dict_set(r, d, key, from_json(r, value));
    return d;
  }
  }
}

/* Each message's "content" string is marked as its own, so the render can say where it lands. */
static void mark_messages(JjRender *r, JjValue *messages)
{
  for (guint i = 0; messages->type == JV_LIST && i < messages->items->len; i++) {
    JjValue *m = messages->items->pdata[i];
    JjValue *content = m->type == JV_DICT ? jj_dict_get(m, "content") : NULL;
    if (content)
      jj_mark_all(r, content, i);
  }
}

/* The render's marks as spans. */
static void take_spans(const GArray *marks, GArray *spans)
{
  for (guint i = 0; i < marks->len; i++) {
    const JjMark *m = &g_array_index(marks, JjMark, i);
    CohortChatSpan s = {m->start, m->start + m->len, m->msg};
    g_array_append_val(spans, s);
  }
}

char *cohort_chat_template_render(const CohortChatTemplate *t, JsonObject *vars,
                                  const char *bos_token, const char *eos_token,
                                  gboolean add_generation_prompt, const char *where, GError **error)
{
  return cohort_chat_template_render_spans(t, vars, bos_token, eos_token, add_generation_prompt,
                                           where, NULL, error);
}

char *cohort_chat_template_render_spans(const CohortChatTemplate *t, JsonObject *vars,
                                        const char *bos_token, const char *eos_token,
                                        gboolean add_generation_prompt, const char *where,
                                        GArray *spans, GError **error)
{
  g_autofree char *source = g_strdup_printf("%s (%s)", t->source, where);
  JjErrors e = {.source = source};
  JjRender r = {.arena = jj_arena_new(), .errors = &e, .out = g_string_new(NULL)};
  if (spans)
    r.marks = g_array_new(FALSE, FALSE, sizeof(JjMark));
  JjEnv *globals = jj_env_new(&r, NULL);
  jj_add_globals(&r, globals);
  JjEnv *env = jj_env_new(&r, globals);
  JsonObjectIter it;
  const char *key;
  JsonNode *value;
  json_object_iter_init_ordered(&it, vars);
  while (json_object_iter_next_ordered(&it, &key, &value)) {
    JjValue *v = from_json(&r, value);
    if (spans && strcmp(key, "messages") == 0)
      mark_messages(&r, v);
    jj_env_set(&r, env, key, v);
  }
  jj_env_set(&r, env, "add_generation_prompt", jj_bool(&r, add_generation_prompt));
  if (bos_token)
    jj_env_set(&r, env, "bos_token", jj_string(&r, bos_token, strlen(bos_token)));
  if (eos_token)
    jj_env_set(&r, env, "eos_token", jj_string(&r, eos_token, strlen(eos_token)));
  gboolean ok = jj_exec(&r, env, t->body);
  char *text = ok ? g_string_free(r.out, FALSE) : (g_string_free(r.out, TRUE), NULL);
  if (ok && spans)
    take_spans(r.marks, spans);
  if (r.marks)
    g_array_unref(r.marks);
  jj_arena_free(r.arena);
  if (!ok)
    g_propagate_error(error, e.error);
  return text;
}

char *cohort_chat_render_line(const CohortChatTemplate *t, const CohortTokenizer *tok,
                              const char *line, gsize len, gboolean add_generation_prompt,
                              const char *where, GError **error)
{
  if (len > MAX_LINE) {
    g_set_error(error, COHORT_TOKENIZER_ERROR, COHORT_TOKENIZER_ERROR_FORMAT,
                "%s: %" G_GSIZE_FORMAT " bytes; allowed: at most %u MiB per conversation", where,
                len, MAX_LINE >> 20);
    return NULL;
  }
  g_autoptr(JsonNode) root = cohort_json_parse_strict(line, (gssize)len, where, 0, error);
  if (!root)
    return NULL;
  JsonObject *o = JSON_NODE_HOLDS_OBJECT(root) ? json_node_get_object(root) : NULL;
  JsonNode *msgs = o ? json_object_get_member(o, "messages") : NULL;
  if (!msgs || !JSON_NODE_HOLDS_ARRAY(msgs)) {
    g_set_error(error, COHORT_TOKENIZER_ERROR, COHORT_TOKENIZER_ERROR_FORMAT,
                "%s: %s; allowed: {\"messages\": [{\"role\": …, \"content\": …}, …]}", where,
                o ? "no list \"messages\"" : "not a JSON object");
    return NULL;
  }
  JsonArray *a = json_node_get_array(msgs);
  for (guint i = 0; i < json_array_get_length(a); i++) {
    JsonNode *m = json_array_get_element(a, i);
    JsonObject *mo = JSON_NODE_HOLDS_OBJECT(m) ? json_node_get_object(m) : NULL;
    JsonNode *role = mo ? json_object_get_member(mo, "role") : NULL;
    if (!role || !JSON_NODE_HOLDS_VALUE(role) || json_node_get_value_type(role) != G_TYPE_STRING) {
      g_set_error(error, COHORT_TOKENIZER_ERROR, COHORT_TOKENIZER_ERROR_FORMAT,
                  "%s: messages[%u] is not an object with a string \"role\"", where, i);
      return NULL;
    }
  }
  return cohort_chat_template_render(t, o, cohort_tokenizer_bos_token(tok),
                                     cohort_tokenizer_eos_token(tok), add_generation_prompt, where,
                                     error);
}

void cohort_json_string_append(GString *out, const char *text)
{
  cohort_json_append_string(out, text);
}

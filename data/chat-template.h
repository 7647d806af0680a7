/* Chat templates: tokenizer_config.json's chat_template rendered by Cohort's Jinja subset
 * (data/jinja-*.c) as transformers renders it (Jinja2 with trim_blocks and lstrip_blocks):
 * statements if/elif/else, for (loop.*), set and namespace, macro, break, continue; filters
 * and tests such as trim, length, tojson, default, join, selectattr, is defined, is string;
 * string and dict methods such as startswith, split, strip, get, items; raise_exception and
 * strftime_now. A template that uses anything else is refused when it is read, naming the
 * construct and its line; one that fails while rendering names the line. docs/data.md. */
#pragma once

#include <glib.h>
#include <json-glib/json-glib.h>

#include "data/tokenizer.h"

G_BEGIN_DECLS

typedef struct CohortChatTemplate CohortChatTemplate;

/* Reads the template `text`; `source` names it in messages ("DIR/tokenizer_config.json"). */
CohortChatTemplate *cohort_chat_template_new(const char *text, const char *source, GError **error);
void cohort_chat_template_free(CohortChatTemplate *t);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortChatTemplate, cohort_chat_template_free)

/* Renders a conversation: `vars` (a JSON object: "messages", and any other variables such as
 * "tools" or "enable_thinking") with bos_token, eos_token and add_generation_prompt. Errors
 * name `where` (the conversation) and the template's line. */
char *cohort_chat_template_render(const CohortChatTemplate *t, JsonObject *vars,
                                  const char *bos_token, const char *eos_token,
                                  gboolean add_generation_prompt, const char *where,
                                  GError **error);

/* Where message `message`'s "content" lands in a render: output bytes [start, end) are that
 * content, byte for byte. A message's content may land in several stretches (a template that
 * cuts it) or nowhere (one that leaves it out). */
typedef struct {
  gsize start, end;
  guint message;
} CohortChatSpan;

/* cohort_chat_template_render that also appends to `spans` (CohortChatSpan, in output order)
 * the stretches of the output that are a message's content. They are followed through the
 * template's strings (substrings such as trim, strip and split, concatenation, macro calls and
 * set blocks), never found by searching the output; content that passes through anything else
 * (replace, a case change, tojson) is no longer reported. */
char *cohort_chat_template_render_spans(const CohortChatTemplate *t, JsonObject *vars,
                                        const char *bos_token, const char *eos_token,
                                        gboolean add_generation_prompt, const char *where,
                                        GArray *spans, GError **error);

/* One line of a conversations file: a JSON object whose "messages" is a list of {"role",
 * "content", …}; the tokenizer gives bos_token and eos_token. */
char *cohort_chat_render_line(const CohortChatTemplate *t, const CohortTokenizer *tok,
                              const char *line, gsize len, gboolean add_generation_prompt,
                              const char *where, GError **error);

/* Appends `text` as a JSON string literal. */
void cohort_json_string_append(GString *out, const char *text);

G_END_DECLS

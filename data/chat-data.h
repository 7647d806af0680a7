/* Chat data (data_format chat): conversations, one JSON object per line of .jsonl files,
 * {"messages": [{"role": "system" | "user" | "assistant" | "tool", "content": "…"}, …]}, each
 * rendered with the tokenizer's chat template (data/chat-template.h) and tokenized, with a flag
 * per token that says whether the loss counts it: the assistant's tokens do, the rest do not.
 * The flags come from where the render put each message's content (CohortChatSpan), never
 * from guessing token boundaries. docs/data.md has a worked example. */
#pragma once

#include <glib.h>

#include "data/chat-template.h"
#include "data/tokenizer.h"

G_BEGIN_DECLS

/* A target that counts in no loss (a batch's targets, engine/model/batch.h). */
#define COHORT_TARGET_IGNORED (-1)

/* The roles a message may have. */
#define COHORT_CHAT_ROLES "system, user, assistant, tool"

/* One conversation line `line` (len bytes; `where` is "FILE:LINE" for messages): its tokens
 * appended to `ids` (gint32) and, per token, 1 (the assistant's) or 0 to `counted` (guint8).
 * A token counts when it holds a byte of an assistant message's content, or when it is the
 * special token that the template writes right after that content (<|im_end|>, <|eot_id|>:
 * the model learns to end its turn). Refused, with one line naming `where` and the field: not
 * a JSON object, no list "messages", a message that is not an object, a role that is not a
 * string or not one of COHORT_CHAT_ROLES, content that is not a string, no assistant message,
 * a template that fails or leaves an assistant's content out, and a tokenizer whose ids do not
 * give back the rendered text byte for byte (its normalizer changed it). */
gboolean cohort_chat_encode_line(const CohortChatTemplate *t, const CohortTokenizer *tok,
                                 CohortEncoder *enc, const char *line, gsize len, const char *where,
                                 GArray *ids, GArray *counted, GError **error);

/* Tokenized conversations: each one's tokens and flags, in file and line order. */
typedef struct CohortChatSet CohortChatSet;

/* The conversations of `path` (a .jsonl file, a folder's .jsonl files in name order, or a
 * pattern; blank lines are passed over) through tokenizer `tok`, whose tokenizer_config.json
 * must hold a chat_template. A conversation of more than max_tokens tokens is refused, naming
 * its file, line and length: one conversation fills at most one window of seq_len + 1 tokens
 * (docs/data.md). */
CohortChatSet *cohort_chat_set_build(const char *path, const CohortTokenizer *tok,
                                     guint64 max_tokens, GError **error);
void cohort_chat_set_free(CohortChatSet *s);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortChatSet, cohort_chat_set_free)

/* The cache file of `path`'s conversations in `cache_dir`: chat-<16 hex digits>.bin, named by
 * a SHA-256 of the tokenizer's files, max_tokens and every file's fingerprint (path, inode,
 * size, times, sampled content: data/file-list.h), so changed files or another tokenizer make
 * another file. NULL when the files cannot be listed. */
char *cohort_chat_cache_file(const char *cache_dir, const char *path, const CohortTokenizer *tok,
                             guint64 max_tokens, GError **error);
/* Writes the set to `file` atomically; reads it back, checking its header, its sizes and every
 * id against vocab_size. */
gboolean cohort_chat_set_save(const CohortChatSet *s, const char *file, GError **error);
CohortChatSet *cohort_chat_set_load(const char *file, int vocab_size, GError **error);

guint64 cohort_chat_set_count(const CohortChatSet *s);
/* Tokens of conversation i, and how many of its targets count (flags of tokens 1…). */
guint64 cohort_chat_set_tokens(const CohortChatSet *s, guint64 i);
guint64 cohort_chat_set_counted(const CohortChatSet *s, guint64 i);
/* Conversation i as one window of T positions (it has at most T + 1 tokens): inputs are its
 * tokens without the last, then `pad`; targets[t] is token t + 1 where that token counts, else
 * COHORT_TARGET_IGNORED (padding included). */
void cohort_chat_set_window(const CohortChatSet *s, guint64 i, int T, int pad, int *inputs,
                            int *targets);

G_END_DECLS

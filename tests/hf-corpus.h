/* Text and conversations for comparing Cohort with the Hugging Face references (header-only,
 * tests only): test-text-corpus.h's documents made valid UTF-8 (the references take
 * JavaScript strings), with what Hugging Face tokenizers meet besides: text that looks like
 * special tokens, Llama's ▁ and <0x0A>, GPT-2's Ġ, CRLF, combining sequences that NFC composes,
 * compatibility characters, more scripts and emoji sequences. Deterministic from a seed.
 *
 * Left out on purpose, where the JavaScript references differ from the tokenizers library and
 * Jinja2 (docs/data.md lists them): U+0085 and U+FEFF (JavaScript's \s), an apostrophe before
 * ſ or K (the case-insensitive contractions of Llama 3's and Qwen's patterns), characters
 * newer than Unicode 14 (PCRE2 10.42's tables), and in conversations, white space next to the
 * newlines Qwen3's template strips (JavaScript's strip() ignores its argument). */
#pragma once

#include "text-corpus.h"

static const char *const hf_lookalikes[] = {
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
    "<s>",
    "</s>",
    "<unk>",
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|eot_id|>",
    "<|start_header_id|>user<|end_header_id|>",
    "<think>",
    "</think>",
    "<tool_call>",
    "<|im_start",
    "im_end|>",
    "<|endoftext",
    "< s>",
    "<s >",
    "<<s>>",
    "<|im_start|><|im_end|>",
    " <s> ",
    "[INST]",
    "[/INST]",
    "<0x0A>",
    "<0xFF>",
    "▁",
    "▁▁▁",
    "Ġ",
    "ĠĠhello",
    "<|reserved_special_token_5|>",
    "<|fim_prefix|>",
    "<tool_response>",
    "<|vision_pad|>",
    "<|python_tag|>",
};

static const char *const hf_extras[] = {
    "e\xcc\x81\xcc\xa3 o\xcc\x88\xcc\x84 A\xcc\x8a \xe1\x84\x92\xe1\x85\xa1\xe1\x86\xab",
    "ﬁ ﬂ ﬃ ㎏ ℡ ™ ⑳ ㊿ ｶﾀｶﾅ Ｈｅｌｌｏ",
    "Ω Å Å ﬀ Ǆ ǅ",
    "አማርኛ ፊደል ፩፪፫",
    "ភាសាខ្មែរ",
    "བོད་ཡིག",
    "ᠮᠣᠩᠭᠣᠯ",
    "ᏣᎳᎩ",
    "தமிழ் ௧௨௩",
    "𝐀𝐁𝐂 𝑥 𝔸 𝟘𝟙𝟚",
    "👩🏾‍🚀 🧑‍🤝‍🧑 🏴󠁧󠁢󠁳󠁣󠁴󠁿 🇺🇳 #️⃣ "
    "👁️‍🗨️",
    "Line one\r\nLine two\r\n\r\nLine four\r",
    "tab\tseparated\tvalues\t\t\n",
    "CAPS'S and Mixed'Re and 'LL 'VE",
    "$$ x^2 + y^2 = z^2 $$ \\frac{a}{b}",
    "¿Qué? ¡Sí! «Guillemets» „Anführung“ ‚single‘",
};

/* Document `index` of the corpus (valid UTF-8). */
static inline void hf_document(guint64 seed, guint index, GString *s)
{
  corpus_document(seed, index, s);
  g_autofree char *valid = g_utf8_make_valid(s->str, (gssize)s->len);
  g_string_assign(s, valid);
  CorpusRng r = {seed * 31 + index};
  for (guint i = 0, n = 4 + corpus_below(&r, 12); i < n; i++) {
    gsize at = corpus_below(&r, (guint)s->len + 1);
    while (at < s->len && ((guint8)s->str[at] & 0xC0) == 0x80)
      at++;
    const char *add =
        corpus_below(&r, 2) ? CORPUS_PICK(&r, hf_lookalikes) : CORPUS_PICK(&r, hf_extras);
    g_string_insert(s, (gssize)at, add);
  }
}

/* Conversation `index` as a JSON Lines line: {"messages": [...]} with a system prompt now and
 * then, several turns, and (for templates that know them) reasoning and tool calls. */
static inline void hf_conversation(guint index, gboolean rich, GString *line)
{
  CorpusRng r = {0xC0FFEEull + index};
  g_autoptr(GString) text = g_string_new(NULL);
  g_string_assign(line, "{\"messages\": [");
  guint turns = 1 + corpus_below(&r, 4);
  gboolean system = corpus_below(&r, 2);
  gboolean first = TRUE;
  for (guint t = 0; t < turns * 2 + system; t++) {
    const char *role = system && t == 0 ? "system" : (t - system) % 2 == 0 ? "user" : "assistant";
    g_string_truncate(text, 0);
    if (g_str_equal(role, "system")) {
      g_string_append(text, "You are a helpful assistant. Answer briefly.");
    } else {
      corpus_sentence(&r, text, FALSE);
      if (corpus_below(&r, 3) == 0) {
        g_string_append(text, "\n\n");
        g_string_append(text, CORPUS_PICK(&r, corpus_scripts));
      }
      if (corpus_below(&r, 4) == 0) {
        g_string_append(text, "\n```python\n");
        g_string_append(text, CORPUS_PICK(&r, corpus_code));
        g_string_append(text, "```");
      }
      if (rich && g_str_equal(role, "assistant") && corpus_below(&r, 3) == 0) {
        g_autoptr(GString) think = g_string_new("<think>\nLet me think. ");
        corpus_sentence(&r, think, FALSE);
        g_string_append(think, "\n</think>\n\n");
        g_string_prepend(text, think->str);
      }
    }
    g_autofree char *valid = g_utf8_make_valid(text->str, (gssize)text->len);
    GString *esc = g_string_new(NULL);
    for (const char *p = valid; *p; p++) {
      if (*p == '"' || *p == '\\')
        g_string_append_printf(esc, "\\%c", *p);
      else if (*p == '\n')
        g_string_append(esc, "\\n");
      else if (*p == '\t')
        g_string_append(esc, "\\t");
      else if (*p == '\r')
        g_string_append(esc, "\\r");
      else if ((guint8)*p < 0x20)
        g_string_append_printf(esc, "\\u%04x", *p);
      else
        g_string_append_c(esc, *p);
    }
    g_string_append_printf(line, "%s{\"role\": \"%s\", \"content\": \"%s\"", first ? "" : ", ",
                           role, esc->str);
    g_string_free(esc, TRUE);
    if (rich && g_str_equal(role, "assistant") && corpus_below(&r, 4) == 0)
      g_string_append_printf(
          line,
          ", \"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": "
          "\"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": %u}}}]",
          1 + corpus_below(&r, 7));
    g_string_append_c(line, '}');
    first = FALSE;
    if (rich && g_str_equal(role, "assistant") && corpus_below(&r, 5) == 0)
      g_string_append(line, ", {\"role\": \"tool\", \"content\": \"{\\\"temperature\\\": 21}\"}");
  }
  g_string_append(line, "]");
  if (rich && index % 5 == 0)
    g_string_append(line, ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": "
                          "\"get_weather\", \"description\": \"Weather by city\", \"parameters\": "
                          "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": "
                          "\"string\"}}, \"required\": [\"city\"]}}}]");
  g_string_append(line, "}");
}

/* A deterministic text corpus for tokenizer tests (header-only, tests only): documents of
 * English prose with contractions, code, numbers, whitespace runs, non-Latin scripts, emoji
 * and invalid UTF-8, from a seeded generator, the same on every machine. U+0085 and U+FEFF
 * are left out on purpose: JavaScript's \s (the reference's) and Unicode's White_Space
 * (GPT-2's Python regex, tiktoken, Cohort) disagree on exactly those two; test-tokenizer
 * pins Cohort's treatment of them. */
#pragma once

#include <glib.h>
#include <string.h>

typedef struct {
  guint64 s;
} CorpusRng;

static inline guint64 corpus_next(CorpusRng *r)
{
  guint64 z = (r->s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static inline guint corpus_below(CorpusRng *r, guint n)
{
  return (guint)(corpus_next(r) % n);
}

#define CORPUS_PICK(r, arr) ((arr)[corpus_below((r), G_N_ELEMENTS(arr))])

static const char *const corpus_words[] = {
    "the",      "of",        "and",       "to",        "in",       "is",       "that",
    "it",       "was",       "for",       "on",        "are",      "as",       "with",
    "his",      "they",      "at",        "be",        "this",     "from",     "have",
    "or",       "by",        "one",       "had",       "not",      "but",      "what",
    "all",      "were",      "when",      "we",        "there",    "can",      "an",
    "your",     "which",     "their",     "said",      "if",       "do",       "will",
    "each",     "about",     "how",       "up",        "out",      "them",     "then",
    "she",      "many",      "some",      "so",        "these",    "would",    "other",
    "into",     "has",       "more",      "her",       "two",      "like",     "him",
    "see",      "time",      "could",     "no",        "make",     "than",     "first",
    "been",     "its",       "who",       "now",       "people",   "my",       "made",
    "over",     "did",       "down",      "only",      "way",      "find",     "use",
    "may",      "water",     "long",      "little",    "very",     "after",    "words",
    "called",   "just",      "where",     "most",      "know",     "get",      "through",
    "back",     "much",      "before",    "go",        "good",     "new",      "write",
    "our",      "used",      "me",        "man",       "too",      "any",      "day",
    "same",     "right",     "look",      "think",     "also",     "around",   "another",
    "came",     "come",      "work",      "three",     "word",     "must",     "because",
    "does",     "part",      "even",      "place",     "well",     "such",     "here",
    "take",     "why",       "things",    "help",      "put",      "years",    "different",
    "away",     "again",     "off",       "went",      "old",      "number",   "great",
    "tell",     "men",       "say",       "small",     "every",    "found",    "still",
    "between",  "name",      "should",    "home",      "big",      "give",     "air",
    "line",     "set",       "own",       "under",     "read",     "last",     "never",
    "us",       "left",      "end",       "along",     "while",    "might",    "next",
    "sound",    "below",     "saw",       "something", "thought",  "both",     "few",
    "those",    "always",    "looked",    "show",      "large",    "often",    "together",
    "asked",    "house",     "world",     "going",     "want",     "school",   "important",
    "until",    "form",      "food",      "keep",      "children", "feet",     "land",
    "side",     "without",   "boy",       "once",      "animals",  "life",     "enough",
    "took",     "sometimes", "four",      "head",      "above",    "kind",     "began",
    "almost",   "live",      "page",      "got",       "earth",    "need",     "far",
    "hand",     "high",      "year",      "mother",    "light",    "parts",    "country",
    "father",   "let",       "night",     "following", "picture",  "being",    "study",
    "second",   "eyes",      "soon",      "times",     "story",    "boys",     "since",
    "white",    "days",      "paper",     "hard",      "near",     "sentence", "better",
    "best",     "across",    "during",    "today",     "others",   "however",  "sure",
    "means",    "knew",      "try",       "told",      "young",    "miles",    "sun",
    "ways",     "thing",     "whole",     "hear",      "example",  "heard",    "several",
    "change",   "answer",    "room",      "sea",       "against",  "top",      "turned",
    "learn",    "point",     "city",      "play",      "toward",   "five",     "using",
    "himself",  "usually",   "Tokyo",     "Zürich",    "naïve",    "café",     "résumé",
    "Ångström", "façade",    "coöperate", "jalapeño",  "Straße",   "über",     "TensorFlow",
    "PyTorch",  "GPT-2",     "llm.c",     "Hugging",   "Face",     "GPUs",     "NCCL",
};

static const char *const corpus_contractions[] = {
    "don't", "it's",  "we're",  "I'll",  "they've",     "I'd",     "I'm",   "can't",
    "won't", "she'd", "you're", "he'll", "that's",      "there's", "isn't", "o'clock",
    "DON'T", "IT'S",  "We'RE",  "I'M",   "rock'n'roll", "'tis",    "y'all", "'s",
    "'t",    "'re",   "'ve",    "'m",    "'ll",         "'d",      "''s",   "' s",
};

static const char *const corpus_scripts[] = {
    "Привет, мир! Как дела? Сегодня хорошая погода.",
    "Γειά σου Κόσμε· η γλώσσα είναι ελληνική.",
    "שלום עולם, זה טקסט בעברית.",
    "مرحبا بالعالم، هذا نص عربي ٠١٢٣٤٥٦٧٨٩.",
    "नमस्ते दुनिया, यह हिंदी पाठ है। ०१२३",
    "สวัสดีชาวโลก นี่คือข้อความภาษาไทย",
    "你好，世界！这是一个中文句子。我们在测试分词器。",
    "こんにちは世界。これは日本語のテキストです。カタカナとひらがな。",
    "안녕하세요 세계, 이것은 한국어 문장입니다.",
    "გამარჯობა მსოფლიო",
    "Բարեւ աշխարհ",
    "ᚠᛇᚻ᛫ᛒᛦᚦ ᚠᚱᚩᚠᚢᚱ",
    "Ⅻ Ⅳ ½ ¾ ² ³ ① ② １２３ ＡＢＣ",
    "ǅ ǈ ǋ ʰ ʲ ª º ꜰ",
    "e\xcc\x81 a\xcc\x8a n\xcc\x83 Z\xcc\xa7",
    "Tiếng Việt có dấu: Hà Nội, Thành phố Hồ Chí Minh.",
    "Türkçe: ığüşöç İĞÜŞÖÇ",
    "Polski: zażółć gęślą jaźń",
};

static const char *const corpus_emoji[] = {
    "😀",    "😃",  "👍",      "👍🏽", "👩‍💻", "👨‍👩‍👧‍👦",
    "🇩🇪",   "🇯🇵", "❤️", "✔️",   "1️⃣",     "🏳️‍🌈",
    "🙂", "🚀",  "🎉",      "🤖",     "∑",           "∞",
    "→",    "©",
};

static const char *const corpus_spaces[] = {
    " ",
    "  ",
    "   ",
    "\t",
    "\t\t",
    "\n",
    "\n\n",
    "\n\n\n",
    " \n",
    "\r\n",
    " \t ",
    "\xc2\xa0",
    "\xe3\x80\x80",
    "\xe2\x80\xa8",
    "\xe2\x80\x83",
    "\xe2\x80\x89",
    "\n    ",
    "\n\t",
    "    \n",
    "\xe2\x80\x8b",
};

static const char *const corpus_code[] = {
    "int main(int argc, char **argv)\n{\n  return 0;\n}\n",
    "def f(x):\n    return x ** 2 + 3 * x - 1  # square\n",
    "for (size_t i = 0; i < n; i++) {\n\tsum += a[i] * b[i];\n}\n",
    "if (a && b || !c) { printf(\"%d\\n\", x); }\n",
    "const x = {key: 'value', n: 0x1F, f: 1.5e-3};\n",
    "SELECT name, COUNT(*) FROM users WHERE age >= 18 GROUP BY name;\n",
    "    elif self.value is None:\n        raise ValueError(f\"bad {self!r}\")\n",
    "#include <stdio.h>\n#define MAX(a, b) ((a) > (b) ? (a) : (b))\n",
    "<div class=\"row\"><a href=\"https://example.com/?q=1&x=2\">link</a></div>\n",
    "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }\n",
    "$ ls -la | grep '\\.txt$' > out.log 2>&1\n",
    "{\"event\":\"step\",\"loss\":2.3456,\"lr\":3e-4}\n",
    "x=[1,2,3];y=x[::-1];print(y)\n",
    "    /* comment */    // another ---- ====== ******\n",
};

/* Appends a number in one of many spellings. */
static inline void corpus_number(CorpusRng *r, GString *s)
{
  switch (corpus_below(r, 8)) {
  case 0:
    g_string_append_printf(s, "%u", corpus_below(r, 100000));
    break;
  case 1:
    g_string_append_printf(s, "%u.%02u", corpus_below(r, 1000), corpus_below(r, 100));
    break;
  case 2:
    g_string_append_printf(s, "%u,%03u,%03u", corpus_below(r, 999) + 1, corpus_below(r, 1000),
                           corpus_below(r, 1000));
    break;
  case 3:
    g_string_append_printf(s, "%04u-%02u-%02u", 1900 + corpus_below(r, 200),
                           1 + corpus_below(r, 12), 1 + corpus_below(r, 28));
    break;
  case 4:
    g_string_append_printf(s, "%.3e", (double)corpus_below(r, 1000000) / 7.0);
    break;
  case 5:
    for (guint i = 0, n = 10 + corpus_below(r, 50); i < n; i++)
      g_string_append_c(s, (char)('0' + corpus_below(r, 10)));
    break;
  case 6:
    g_string_append_printf(s, "+1 (%03u) %03u-%04u", corpus_below(r, 1000), corpus_below(r, 1000),
                           corpus_below(r, 10000));
    break;
  default:
    g_string_append_printf(s, "0x%08x", (guint)corpus_next(r));
  }
}

/* Bytes that are not UTF-8: a lone continuation byte, a truncated sequence, an overlong
 * form, an encoded surrogate, bytes that never occur, or random high bytes. */
static inline void corpus_invalid(CorpusRng *r, GString *s)
{
  static const char *const bad[] = {"\x80",         "\xbf",     "\xc3",         "\xe2\x82",
                                    "\xf0\x9f\x98", "\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80",
                                    "\xed\xbf\xbf", "\xf5",     "\xfe\xff",     "\xff"};
  if (corpus_below(r, 3) == 0) {
    for (guint i = 0, n = 1 + corpus_below(r, 6); i < n; i++)
      g_string_append_c(s, (char)(0x80 + corpus_below(r, 128)));
  } else {
    g_string_append(s, CORPUS_PICK(r, bad));
  }
}

/* A sentence of prose with contractions, numbers and now and then something else. */
static inline void corpus_sentence(CorpusRng *r, GString *s, gboolean invalid)
{
  guint n = 4 + corpus_below(r, 16);
  for (guint i = 0; i < n; i++) {
    if (i > 0)
      g_string_append_c(s, ' ');
    guint k = corpus_below(r, 100);
    const char *w = CORPUS_PICK(r, corpus_words);
    if (k < 8)
      g_string_append(s, CORPUS_PICK(r, corpus_contractions));
    else if (k < 13)
      corpus_number(r, s);
    else if (k < 15)
      g_string_append(s, CORPUS_PICK(r, corpus_emoji));
    else if (k < 17)
      g_string_append_printf(s, "\"%s\"", w);
    else if (k < 19)
      g_string_append_printf(s, "(%s)", w);
    else if (i == 0 || k < 22)
      g_string_append_printf(s, "%c%s", g_ascii_toupper(w[0]), w + 1);
    else
      g_string_append(s, w);
    if (k > 96)
      g_string_append(s, CORPUS_PICK(r, corpus_spaces));
    if (invalid && k == 50)
      corpus_invalid(r, s);
  }
  static const char *const ends[] = {".", ".", ".", "?", "!", "...", ";", ":", " -", "!!"};
  g_string_append(s, CORPUS_PICK(r, ends));
}

/* Document `index`: each is mostly one kind (prose, code, numbers, whitespace, scripts,
 * emoji) with others mixed in; about one in six holds invalid UTF-8. */
static inline void corpus_document(guint64 seed, guint index, GString *s)
{
  CorpusRng r = {seed * 0x9E3779B97F4A7C15ull + index};
  gboolean invalid = corpus_below(&r, 6) == 0;
  guint kind = index % 6;
  g_string_truncate(s, 0);
  while (s->len < 800 + corpus_below(&r, 3000)) {
    guint k = corpus_below(&r, 100);
    if (kind == 1 || (kind == 0 && k < 5))
      g_string_append(s, CORPUS_PICK(&r, corpus_code));
    if (kind == 2 || k < 3) {
      corpus_number(&r, s);
      g_string_append(s, CORPUS_PICK(&r, corpus_spaces));
    }
    if (kind == 3 || k < 6)
      for (guint i = 0, n = corpus_below(&r, 6); i < n; i++)
        g_string_append(s, CORPUS_PICK(&r, corpus_spaces));
    if (kind == 4 || k < 8) {
      g_string_append(s, CORPUS_PICK(&r, corpus_scripts));
      g_string_append(s, CORPUS_PICK(&r, corpus_spaces));
    }
    if (kind == 5 || k < 4)
      for (guint i = 0, n = 1 + corpus_below(&r, 5); i < n; i++)
        g_string_append(s, CORPUS_PICK(&r, corpus_emoji));
    corpus_sentence(&r, s, invalid);
    g_string_append(s, k < 70 ? " " : k < 90 ? "\n" : "\n\n");
    if (invalid && k > 95)
      corpus_invalid(&r, s);
  }
  /* Runs of whitespace and digits long enough for the long-piece merge path (> 64 bytes). */
  if (index % 17 == 0) {
    for (guint i = 0, n = 65 + corpus_below(&r, 60); i < n; i++)
      g_string_append_c(s, index % 2 ? ' ' : '\n');
    g_string_append(s, "end");
  }
  if (index % 23 == 0)
    for (guint i = 0, n = 70 + corpus_below(&r, 60); i < n; i++)
      g_string_append_c(s, (char)('0' + corpus_below(&r, 10)));
}

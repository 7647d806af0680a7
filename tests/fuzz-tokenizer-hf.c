/* Fuzzing Hugging Face tokenizer folders (in process): a small tokenizer.json with a full
 * pipeline (NFC, a Split by Qwen's pattern then ByteLevel, added tokens, TemplateProcessing),
 * broken on purpose (unknown components and members, regexes that do not compile or that
 * backtrack without end, nesting, contradictory merges, templates naming missing tokens,
 * files too large) and changed at random; tokenizer_config.json beside it, broken and
 * changed; chat templates changed at random and hostile ones (deep, endless, recursive). A
 * refusal is one line naming the file; an accepted tokenizer encodes random text and decodes
 * it back (or refuses it with its regular expression's limit); a template either renders or
 * fails with one line. See fuzz-util.h. */
#include "data/chat-template.h"
#include "data/tokenizer.h"
#include "fuzz-util.h"
#include "tokenizer-fixtures.h"

#define QWEN_PATTERN                                                                               \
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}| "                \
  "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+"

typedef struct {
  FuzzTally t;
  FuzzRng rng;
  char *json; /* the valid pipeline tokenizer.json */
  guint n_tokens;
} Ctx;

static char *edit(const char *text, const char *from, const char *to)
{
  const char *at = strstr(text, from);
  g_assert_nonnull(at);
  return g_strdup_printf("%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
}

/* An accepted tokenizer works: random text comes back from decode(encode()), or encoding
 * stops at a regular expression's limit with a message that says so. */
static void check_works(Ctx *c, const char *path, CohortTokenizer *tok)
{
  g_autoptr(GByteArray) back = g_byte_array_new();
  static const char *const bits[] = {
      "a", "b",    " ",  "\n", "ab", "hello", "é", "日本", "🙂", "1", "<|endoftext|>",
      "x", "\r\n", "'s", ".",  "\t"};
  for (guint k = 0; k < 12; k++) {
    g_autoptr(GString) s = g_string_new(NULL);
    for (guint i = 0, n = (guint)fuzz_below(&c->rng, 40); i < n; i++)
      g_string_append(s, bits[fuzz_below(&c->rng, G_N_ELEMENTS(bits))]);
    gsize m = 0;
    g_autoptr(GError) error = NULL;
    g_autofree int *ids = cohort_tokenizer_encode(tok, s->str, s->len, k % 2, &m, &error);
    if (!ids) {
      if (!error || error->code != COHORT_TOKENIZER_ERROR_REGEX)
        fuzz_fail(&c->t, path, "encoding failed without a regex limit: %s",
                  error ? error->message : "?");
      continue;
    }
    g_byte_array_set_size(back, 0);
    if (!cohort_tokenizer_decode(tok, ids, m, back, NULL))
      fuzz_fail(&c->t, path, "accepted, but its ids do not decode");
  }
}

static void judge(Ctx *c, const char *path, const char *named, FuzzExpect expect,
                  const char *needle)
{
  fuzz_set_current(path);
  c->t.cases++;
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortTokenizer) tok = cohort_tokenizer_load(path, &error);
  if (tok) {
    if (expect == FUZZ_REFUSE)
      fuzz_fail(&c->t, path, "wrong accept: this case must be refused");
    else
      c->t.accepted++, check_works(c, path, tok);
    fuzz_set_current("");
    return;
  }
  fuzz_set_current("");
  if (expect == FUZZ_ACCEPT) {
    fuzz_fail(&c->t, path, "refused a valid tokenizer: %s", error ? error->message : "?");
    return;
  }
  c->t.refused++;
  const char *problem = error ? fuzz_message_problem(error->message, named) : "no error";
  if (!problem && needle && !strstr(error->message, needle))
    problem = "the message does not say what is wrong";
  if (problem)
    fuzz_fail(&c->t, path, "%s (want \"%s\"): %s", problem, needle ? needle : "",
              error ? error->message : "");
}

/* A folder with tokenizer.json (and tokenizer_config.json when `config` is not NULL). */
static char *folder_case(Ctx *c, const char *json, gsize jlen, const char *config, gsize clen)
{
  g_autofree char *dir = fuzz_case_path(&c->t, "tok");
  g_assert_cmpint(g_mkdir(dir, 0755), ==, 0);
  g_autofree char *jp = g_build_filename(dir, "tokenizer.json", NULL);
  fuzz_write(jp, json, jlen);
  if (config) {
    g_autofree char *cp = g_build_filename(dir, "tokenizer_config.json", NULL);
    fuzz_write(cp, config, clen);
  }
  return g_steal_pointer(&dir);
}

static void json_case(Ctx *c, const char *text, FuzzExpect expect, const char *needle)
{
  g_autofree char *dir = folder_case(c, text, strlen(text), NULL, 0);
  g_autofree char *jp = g_build_filename(dir, "tokenizer.json", NULL);
  judge(c, dir, jp, expect, needle);
}

static void broken_pipeline(Ctx *c)
{
  const char *t = c->json;
  json_case(c, t, FUZZ_ACCEPT, NULL);
  struct {
    const char *from, *to, *needle;
    FuzzExpect expect;
  } edits[] = {
      {"{\"type\": \"NFC\"}", "{\"type\": \"Precompiled\"}", "\"Precompiled\" is not a normalizer",
       FUZZ_REFUSE},
      {"{\"type\": \"NFC\"}", "{\"type\": \"NFC\", \"x\": 1}", "the member \"x\"", FUZZ_REFUSE},
      {"{\"type\": \"NFC\"}",
       "{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Sequence\", \"normalizers\": "
       "[{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Sequence\", \"normalizers\": "
       "[{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Sequence\", \"normalizers\": "
       "[]}]}]}]}]}]}",
       "nested", FUZZ_REFUSE},
      {QWEN_PATTERN, "(a+)+$", "match limit", FUZZ_REFUSE},
      {QWEN_PATTERN, "(a|aa)+$", "match limit", FUZZ_REFUSE},
      /* Nested stars that PCRE2 reduces: linear for it, so either outcome is right. */
      {QWEN_PATTERN, "((a*)*)*b", NULL, FUZZ_EITHER},
      {QWEN_PATTERN, "(\\\\w+\\\\s?)+$", "match limit", FUZZ_REFUSE},
      {QWEN_PATTERN, "(unclosed", "is not one PCRE2 reads", FUZZ_REFUSE},
      {QWEN_PATTERN, "\\\\p{Nonsense}", "is not one PCRE2 reads", FUZZ_REFUSE},
      /* Fine on the probes, endless on some texts: encoding stops at the limit. */
      {QWEN_PATTERN, "(x+x+)+y", NULL, FUZZ_ACCEPT},
      {"\"Isolated\"", "\"Sideways\"", "behavior", FUZZ_REFUSE},
      {"\"Isolated\"", "\"Removed\"", NULL, FUZZ_ACCEPT},
      {"\"Isolated\", \"invert\": false", "\"MergedWithNext\", \"invert\": true", NULL,
       FUZZ_ACCEPT},
      {"\"type\": \"Split\"", "\"type\": \"Whitespace\"", "\"Whitespace\" is not a pre-tokenizer",
       FUZZ_REFUSE},
      {"\"use_regex\": false}", "\"use_regex\": false}, {\"type\": \"Digits\"}",
       "ByteLevel as the last pre-tokenizer", FUZZ_REFUSE},
      {"\"type\": \"TemplateProcessing\"", "\"type\": \"BertPostProcessor\"",
       "\"BertPostProcessor\"", FUZZ_REFUSE},
      {"\"ids\": [", "\"ids\": [99999999, ", "is not a token", FUZZ_REFUSE},
      {"{\"SpecialToken\": {\"id\": \"<|endoftext|>\"", "{\"SpecialToken\": {\"id\": \"<nope>\"",
       "special_tokens does not give", FUZZ_REFUSE},
      {"\"decoder\": {\"type\": \"ByteLevel\"}", "\"decoder\": {\"type\": \"CTC\"}",
       "\"CTC\" is not a decoder", FUZZ_REFUSE},
      {"\"special\": false", "\"special\": false, \"single_word\": true", "single_word",
       FUZZ_REFUSE},
      {"\"fuse_unk\": false", "\"fuse_unk\": false, \"byte_fallback\": true", "byte_fallback",
       FUZZ_REFUSE},
      {"\"unk_token\": null", "\"unk_token\": \"<nope>\"", "unk_token", FUZZ_REFUSE},
      {"\"type\": \"BPE\"", "\"type\": \"Unigram\"", "\"Unigram\"", FUZZ_REFUSE},
      {"\"dropout\": null", "\"dropout\": 0.5", "dropout", FUZZ_REFUSE},
      /* Contradictory merges: a pair given twice (the later rank wins, as the library has
       * it), a merge of tokens that make no token. */
      {"\"merges\": [", "\"merges\": [\"h e\", \"h e\", ", NULL, FUZZ_ACCEPT},
      {"\"merges\": [", "\"merges\": [\"a zzz\", ", "is not a token", FUZZ_REFUSE},
  };
  for (guint i = 0; i < G_N_ELEMENTS(edits); i++) {
    g_autofree char *bad = edit(t, edits[i].from, edits[i].to);
    json_case(c, bad, edits[i].expect, edits[i].needle);
  }
  gsize len = strlen(t);
  for (guint i = 0; i < 80; i++) {
    g_autofree char *flip = g_strdup(t);
    for (guint k = 0, n = 1 + fuzz_below(&c->rng, 3); k < n; k++)
      flip[fuzz_below(&c->rng, len)] ^= (char)(1u << fuzz_below(&c->rng, 8));
    json_case(c, flip, FUZZ_EITHER, NULL);
  }
  /* A file larger than any tokenizer is refused before it is read. */
  g_autofree char *dir = folder_case(c, "{}", 2, NULL, 0);
  g_autofree char *jp = g_build_filename(dir, "tokenizer.json", NULL);
  g_assert_cmpint(truncate(jp, (off_t)COHORT_TOKENIZER_MAX_FILE + 1), ==, 0);
  judge(c, dir, jp, FUZZ_REFUSE, "MiB");
}

static void config_case(Ctx *c, const char *config, gsize len, FuzzExpect expect,
                        const char *needle)
{
  g_autofree char *dir = folder_case(c, c->json, strlen(c->json), config, len);
  g_autofree char *cp = g_build_filename(dir, "tokenizer_config.json", NULL);
  judge(c, dir, cp, expect, needle);
}

static void broken_config(Ctx *c)
{
  const char *good = "{\"bos_token\": \"<|endoftext|>\", \"eos_token\": {\"content\": \"<|end|>\", "
                     "\"lstrip\": false}, \"model_max_length\": 1000000000000000019884624838656, "
                     "\"chat_template\": \"{% for m in messages %}{{ m.content }}{% endfor %}\"}";
  config_case(c, good, strlen(good), FUZZ_ACCEPT, NULL);
  struct {
    const char *text, *needle;
  } bad[] = {
      {"[1, 2]", "not a JSON object"},
      {"{\"bos_token\": 7}", "bos_token is not a string"},
      {"{\"chat_template\": 7}", "chat_template is not a string"},
      {"{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"x\"}]}", "no \"default\""},
      {"{\"chat_template\": \"x\", \"chat_template\": \"y\"}", "more than once"},
      {"{\"a\": "
       "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]"
       "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}",
       "nested"},
  };
  for (guint i = 0; i < G_N_ELEMENTS(bad); i++)
    config_case(c, bad[i].text, strlen(bad[i].text), FUZZ_REFUSE, bad[i].needle);
  gsize len = strlen(good);
  for (guint i = 0; i < 40; i++) {
    g_autofree char *flip = g_strdup(good);
    flip[fuzz_below(&c->rng, len)] = (char)fuzz_below(&c->rng, 256);
    config_case(c, flip, len, FUZZ_EITHER, NULL);
  }
  g_autofree char *dir = folder_case(c, c->json, strlen(c->json), "{}", 2);
  g_autofree char *cp = g_build_filename(dir, "tokenizer_config.json", NULL);
  g_assert_cmpint(truncate(cp, 32 << 20), ==, 0);
  judge(c, dir, cp, FUZZ_REFUSE, "bytes");
}

#include "fuzz-tokenizer-hf-chat.h"

static void test_fuzz(void)
{
  Ctx c = {.rng = fuzz_rng_new(35)};
  fuzz_tally_init(&c.t, "tokenizer-hf");
  TinyTok *tiny = tf_new(3, 40);
  c.n_tokens = tiny->tokens->len;
  g_autofree char *base = tf_tokenizer_json(tiny, FALSE);
  g_autofree char *a = edit(base, "\"normalizer\": null", "\"normalizer\": {\"type\": \"NFC\"}");
  g_autofree char *b = edit(a,
                            "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": "
                            "false, \"trim_offsets\": true, \"use_regex\": true}",
                            "\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": "
                            "[{\"type\": \"Split\", \"pattern\": {\"Regex\": \"" QWEN_PATTERN
                            "\"}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": "
                            "\"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}]}");
  g_autofree char *cc = edit(b, "\"post_processor\": {\"type\": \"ByteLevel\"}",
                             "\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": "
                             "[{\"SpecialToken\": {\"id\": \"<|endoftext|>\", \"type_id\": 0}}, "
                             "{\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], \"pair\": [], "
                             "\"special_tokens\": {\"<|endoftext|>\": {\"id\": \"<|endoftext|>\", "
                             "\"ids\": [EOT], \"tokens\": [\"<|endoftext|>\"]}}}");
  g_autofree char *eot = g_strdup_printf("%u", c.n_tokens);
  g_autofree char *cc2 = edit(cc, "EOT", eot);
  c.json = edit(cc2, "\"special\": true}", "\"special\": true, \"normalized\": false}");
  g_autofree char *hello =
      g_strdup_printf("\"added_tokens\": [{\"id\": %u, \"content\": \"hello\", "
                      "\"special\": false, \"normalized\": true}, ",
                      c.n_tokens + 2);
  g_autofree char *d = edit(c.json, "\"added_tokens\": [", hello);
  g_free(c.json);
  c.json = g_steal_pointer(&d);
  broken_pipeline(&c);
  broken_config(&c);
  chat_templates(&c);
  tf_free(tiny);
  g_free(c.json);
  fuzz_tally_finish(&c.t, 200);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  fuzz_watch_crashes();
  g_test_add_func("/fuzz/tokenizer-hf", test_fuzz);
  return g_test_run();
}

/* Fuzzing TrainConfig loading (cohort_config_load_data, in process): boundary values and
 * swapped types of every key of the key table, and mutations of a full config (truncations,
 * bytes that are never valid, random bytes, deep nesting, repeated keys, huge numbers,
 * NaN/Infinity text, \u0000, a BOM, comments, trailing garbage, leading zeros, hex, single
 * quotes, control characters, escapes), then the saved regression inputs. Each case ends in
 * a one-line error naming the file (and the key, where a value is wrong) or in a config whose
 * values are the ones the case wrote. See fuzz-util.h for the rules. */
#include <math.h>

#include "engine/config/config.h"
#include "fuzz-util.h"

typedef struct {
  FuzzTally t;
  FuzzRng rng;
  CohortConfig *defaults;
  GPtrArray *members; /* "\"key\": value" of every key at its default, in table order */
} Ctx;

/* What an accepted case must hold beyond being valid: `key` has the text form `want` (as
 * cohort_config_get gives it; numbers compare as numbers), or with `same` the whole config
 * equals the defaults. */
typedef struct {
  const char *key;
  const char *want;
  gboolean same;
} Want;

static const Want NO_WANT = {NULL, NULL, FALSE};
static const Want SAME = {NULL, NULL, TRUE};

static gboolean same_text(const CohortConfigKey *k, const char *got, const char *want)
{
  if (k->type == COHORT_KEY_DOUBLE)
    return g_ascii_strtod(got, NULL) == g_ascii_strtod(want, NULL);
  return strcmp(got, want) == 0;
}

static void check_accepted(Ctx *c, const char *path, CohortConfig *cfg, Want w)
{
  g_autoptr(GError) error = NULL;
  if (!cohort_config_validate(cfg, path, &error)) {
    fuzz_fail(&c->t, path, "accepted a config that does not validate: %s", error->message);
    return;
  }
  /* What was accepted saves and reads back unchanged. */
  g_autofree char *json = cohort_config_to_json(cfg, FALSE);
  g_autoptr(CohortConfig) again = cohort_config_load_data(json, -1, path, &error);
  g_auto(GStrv) diff = again ? cohort_config_diff(cfg, again) : NULL;
  if (!again || diff[0]) {
    fuzz_fail(&c->t, path, "the accepted config does not round-trip: %s",
              error ? error->message : diff[0]);
    return;
  }
  if (w.key) {
    g_autofree char *got = cohort_config_get(cfg, w.key);
    if (!same_text(cohort_config_find_key(w.key), got, w.want))
      fuzz_fail(&c->t, path, "wrong accept: key \"%s\" reads as %s, the file says %s", w.key, got,
                w.want);
  }
  if (w.same) {
    g_auto(GStrv) d = cohort_config_diff(cfg, c->defaults);
    if (d[0])
      fuzz_fail(&c->t, path, "wrong accept: key \"%s\" differs from the text", d[0]);
  }
}

/* One case: `text` must be accepted (holding `w`) or refused (with `needle` in the message,
 * when given), or either. */
static void run_case(Ctx *c, const char *name, const char *text, gsize len, FuzzExpect expect,
                     Want w, const char *needle)
{
  g_autofree char *file = g_strconcat(name, ".json", NULL);
  g_autofree char *path = fuzz_case_path(&c->t, file);
  fuzz_write(path, text, len);
  fuzz_set_current(path);
  c->t.cases++;
  g_autoptr(GError) error = NULL;
  gint64 t0 = g_get_monotonic_time();
  g_autoptr(CohortConfig) cfg = cohort_config_load_data(text, (gssize)len, path, &error);
  fuzz_set_current("");
  double secs = (double)(g_get_monotonic_time() - t0) / 1e6;
  if (secs > 2.0 * fuzz_time_scale())
    fuzz_fail(&c->t, path, "took %.1f s (a config is read in milliseconds)", secs);
  if (cfg && error)
    fuzz_fail(&c->t, path, "returned a config and an error");
  if (cfg) {
    if (expect == FUZZ_REFUSE) {
      fuzz_fail(&c->t, path, "wrong accept: this %s must be refused", name);
      return;
    }
    c->t.accepted++;
    check_accepted(c, path, cfg, w);
    return;
  }
  if (!error) {
    fuzz_fail(&c->t, path, "refused without an error");
    return;
  }
  if (expect == FUZZ_ACCEPT) {
    fuzz_fail(&c->t, path, "refused a valid config: %s", error->message);
    return;
  }
  c->t.refused++;
  const char *problem = fuzz_message_problem(error->message, path);
  if (!problem && !g_str_has_prefix(error->message, path))
    problem = "the message does not start with the file";
  if (!problem && needle && !strstr(error->message, needle))
    problem = "the message does not say what is wrong";
  if (problem)
    fuzz_fail(&c->t, path, "%s (want \"%s\"): %s", problem, needle ? needle : "", error->message);
}

static void run_text(Ctx *c, const char *name, const char *text, FuzzExpect expect, Want w,
                     const char *needle)
{
  run_case(c, name, text, strlen(text), expect, w, needle);
}

/* ---- boundary values and types of every key ---- */

/* {"version": 1, companions..., "key": literal}: the companions keep the rules across keys
 * out of the way (n_head 1 divides any n_embd, max_steps 0 bounds no warmup, token data
 * allows any vocab_size, the most nodes allow any node_rank but the largest). */
static char *permissive(const char *key, const char *literal)
{
  static const char *const companions[][2] = {{"n_head", "1"},
                                              {"max_steps", "0"},
                                              {"data_format", "\"tokens\""},
                                              {"num_nodes", "2147483647"}};
  GString *s = g_string_new("{\"version\": 1");
  for (guint i = 0; i < G_N_ELEMENTS(companions); i++)
    if (strcmp(companions[i][0], key) != 0)
      g_string_append_printf(s, ", \"%s\": %s", companions[i][0], companions[i][1]);
  g_string_append_printf(s, ", \"%s\": %s}", key, literal);
  return g_string_free(s, FALSE);
}

/* `literal` for `key`: accepted with the value `want`, or refused naming the key. */
static void key_case(Ctx *c, const CohortConfigKey *k, const char *what, const char *literal,
                     const char *want)
{
  g_autofree char *text = permissive(k->name, literal);
  g_autofree char *name = g_strdup_printf("%s-%s", k->name, what);
  g_autofree char *needle = g_strdup_printf("key \"%s\"", k->name);
  if (want)
    run_text(c, name, text, FUZZ_ACCEPT, (Want){k->name, want, FALSE}, NULL);
  else
    run_text(c, name, text, FUZZ_REFUSE, NO_WANT, needle);
}

static char *dtext(double v)
{
  char buf[G_ASCII_DTOSTR_BUF_SIZE];
  return g_strdup(g_ascii_formatd(buf, sizeof buf, "%.17g", v));
}

static void int_bounds(Ctx *c, const CohortConfigKey *k)
{
  gint64 lo = (gint64)k->min, hi = (gint64)k->max;
  g_autofree char *min = g_strdup_printf("%" G_GINT64_FORMAT, lo);
  g_autofree char *max = g_strdup_printf("%" G_GINT64_FORMAT, hi);
  g_autofree char *below = g_strdup_printf("%" G_GINT64_FORMAT, lo - 1);
  g_autofree char *above = g_strdup_printf("%" G_GINT64_FORMAT, hi + 1);
  g_autofree char *as_double = g_strdup_printf("%s.0", min);
  g_autofree char *as_string = g_strdup_printf("\"%s\"", min);
  g_autofree char *in_list = g_strdup_printf("[%s]", min);
  key_case(c, k, "min", min, min);
  /* The one rule the companions cannot lift: node_rank below num_nodes (at most G_MAXINT). */
  key_case(c, k, "max", max, strcmp(k->name, "node_rank") == 0 ? NULL : max);
  key_case(c, k, "below-min", below, NULL);
  key_case(c, k, "above-max", above, NULL);
  key_case(c, k, "as-double", as_double, NULL);
  key_case(c, k, "as-string", as_string, NULL);
  key_case(c, k, "in-list", in_list, NULL);
  key_case(c, k, "fraction", "1.5", NULL);
  key_case(c, k, "bool", "true", NULL);
}

static void double_bounds(Ctx *c, const CohortConfigKey *k)
{
  gboolean above_zero = k->min == 0x1p-1074, below_one = k->max == 0x1.fffffffffffffp-1;
  gboolean unbounded = k->max == G_MAXDOUBLE;
  g_autofree char *min = above_zero ? g_strdup("5e-324") : dtext(k->min);
  g_autofree char *max = below_one   ? g_strdup("0.9999999999999999")
                         : unbounded ? g_strdup("1.7976931348623157e308")
                                     : dtext(k->max);
  g_autofree char *below = above_zero    ? g_strdup("0")
                           : k->min == 0 ? g_strdup("-5e-324")
                                         : dtext(nextafter(k->min, -INFINITY));
  key_case(c, k, "min", min, min);
  key_case(c, k, "max", max, max);
  key_case(c, k, "below-min", below, NULL);
  if (below_one) {
    key_case(c, k, "one", "1", NULL);
  } else if (!unbounded) {
    g_autofree char *above = dtext(nextafter(k->max, INFINITY));
    key_case(c, k, "above-max", above, NULL);
  }
  /* An integer spelling of an allowed number is that number. */
  if (k->min <= 1 && k->max >= 1)
    key_case(c, k, "integer", "1", "1");
  key_case(c, k, "as-string", "\"0.5\"", NULL);
  key_case(c, k, "bool", "false", NULL);
  key_case(c, k, "in-list", "[0.5]", NULL);
}

/* Strings that hold numbers, one per image channel (image_mean, image_std): a number is the
 * shortest such text, and text that is no number is refused naming the key. */
static gboolean number_list(const CohortConfigKey *k)
{
  return strcmp(k->name, "image_mean") == 0 || strcmp(k->name, "image_std") == 0;
}

static void string_bounds(Ctx *c, const CohortConfigKey *k)
{
  if (number_list(k)) {
    key_case(c, k, "shortest", "\"1\"", "1");
    key_case(c, k, "not-a-number", "\"x\"", NULL);
    key_case(c, k, "empty", "\"\"", NULL);
    key_case(c, k, "escapes", "\"\\u00dcber \\ud83d\\ude00\"", NULL);
    key_case(c, k, "number", "5", NULL);
    key_case(c, k, "list", "[\"1\"]", NULL);
    return;
  }
  if (strcmp(k->name, "rank_batch_sizes") == 0) {
    key_case(c, k, "shortest", "\"\"", "");
    key_case(c, k, "auto", "\"auto\"", "auto");
    key_case(c, k, "not-a-number", "\"x\"", NULL);
    key_case(c, k, "zero", "\"0\"", NULL);
    key_case(c, k, "escapes", "\"\\u00dcber \\ud83d\\ude00\"", NULL);
    key_case(c, k, "number", "5", NULL);
    key_case(c, k, "list", "[\"1\"]", NULL);
    return;
  }
  gboolean model = strcmp(k->name, "model") == 0;
  key_case(c, k, "shortest",
           model         ? "\"gpt\""
           : k->min >= 1 ? "\"x\""
                         : "\"\"",
           model         ? "gpt"
           : k->min >= 1 ? "x"
                         : "");
  if (k->min >= 1)
    key_case(c, k, "empty", "\"\"", NULL);
  /* Escapes, a surrogate pair among them, read as the characters they stand for. */
  key_case(c, k, "escapes", "\"\\u00dcber \\ud83d\\ude00 \\\"q\\\" \\\\ \\/\"",
           model ? NULL
                 : "\xC3\x9C"
                   "ber \xF0\x9F\x98\x80 \"q\" \\ /");
  key_case(c, k, "number", "5", NULL);
  key_case(c, k, "bool", "false", NULL);
  key_case(c, k, "list", "[\"x\"]", NULL);
}

static void choice_bounds(Ctx *c, const CohortConfigKey *k)
{
  for (guint i = 0; k->choices[i]; i++) {
    g_autofree char *literal = g_strdup_printf("\"%s\"", k->choices[i]);
    g_autofree char *what = g_strdup_printf("choice-%u", i);
    /* Chat data needs a tokenizer with a chat template; the defaults have bytes. */
    gboolean refused = strcmp(k->name, "data_format") == 0 && strcmp(k->choices[i], "chat") == 0;
    key_case(c, k, what, literal, refused ? NULL : k->choices[i]);
  }
  g_autofree char *upper = g_ascii_strup(k->choices[0], -1);
  g_autofree char *upper_literal = g_strdup_printf("\"%s\"", upper);
  key_case(c, k, "upper-case", upper_literal, NULL);
  key_case(c, k, "empty", "\"\"", NULL);
  key_case(c, k, "index", "0", NULL);
}

/* A JSON list of `n` indexes, i % 1024, and its text form. */
static char *index_list(guint n, gboolean json)
{
  GString *s = g_string_new(json ? "[" : "");
  for (guint i = 0; i < n; i++)
    g_string_append_printf(s, "%s%u", i ? "," : "", i % 1024);
  if (json)
    g_string_append_c(s, ']');
  return g_string_free(s, FALSE);
}

static void list_bounds(Ctx *c, const CohortConfigKey *k)
{
  g_autofree char *all = index_list(1024, TRUE);
  g_autofree char *all_text = index_list(1024, FALSE);
  g_autofree char *too_many = index_list(1025, TRUE);
  key_case(c, k, "empty", "[]", "");
  key_case(c, k, "one", "[0]", "0");
  key_case(c, k, "ends", "[1023, 0]", "1023,0");
  key_case(c, k, "1024-entries", all, all_text);
  key_case(c, k, "1025-entries", too_many, NULL);
  key_case(c, k, "1024", "[1024]", NULL);
  key_case(c, k, "negative", "[-1]", NULL);
  key_case(c, k, "repeat", "[3, 1, 3]", NULL);
  key_case(c, k, "fraction", "[0.5]", NULL);
  key_case(c, k, "string", "[\"0\"]", NULL);
  key_case(c, k, "nested", "[[0]]", NULL);
  key_case(c, k, "number", "0", NULL);
}

static void gen_key_table(Ctx *c)
{
  guint n = 0;
  const CohortConfigKey *keys = cohort_config_keys(&n);
  for (guint i = 0; i < n; i++) {
    const CohortConfigKey *k = &keys[i];
    key_case(c, k, "null", "null", NULL);
    key_case(c, k, "object", "{\"a\": 1}", NULL);
    switch (k->type) {
    case COHORT_KEY_INT:
    case COHORT_KEY_INT64:
      int_bounds(c, k);
      break;
    case COHORT_KEY_DOUBLE:
      double_bounds(c, k);
      break;
    case COHORT_KEY_BOOL:
      key_case(c, k, "true", "true", "true");
      key_case(c, k, "false", "false", "false");
      key_case(c, k, "one", "1", NULL);
      key_case(c, k, "string", "\"true\"", NULL);
      break;
    case COHORT_KEY_STRING:
      string_bounds(c, k);
      break;
    case COHORT_KEY_CHOICE:
      choice_bounds(c, k);
      break;
    case COHORT_KEY_INT_LIST:
      list_bounds(c, k);
      break;
    }
  }
}

/* ---- mutations of a full config ---- */

/* The default config with member `i` replaced by `member` (NULL: left out), members in
 * `order` (NULL: table order), `sep` between them. */
static char *assemble(Ctx *c, int i, const char *member, const guint *order, const char *sep)
{
  GString *s = g_string_new("{\"version\": 1");
  for (guint j = 0; j < c->members->len; j++) {
    guint m = order ? order[j] : j;
    const char *text = (int)m == i ? member : c->members->pdata[m];
    if (text)
      g_string_append_printf(s, ",%s%s", sep, text);
  }
  g_string_append(s, "}");
  return g_string_free(s, FALSE);
}

static char *with_value(Ctx *c, const char *key, const char *literal)
{
  guint n;
  const CohortConfigKey *keys = cohort_config_keys(&n);
  int i = (int)(cohort_config_find_key(key) - keys);
  g_autofree char *member = g_strdup_printf("\"%s\": %s", key, literal);
  return assemble(c, i, member, NULL, "\n  ");
}

/* A key of `type` picked by the generator. */
static const char *some_key(Ctx *c, CohortKeyType type)
{
  guint n;
  const CohortConfigKey *keys = cohort_config_keys(&n);
  for (;;) {
    const CohortConfigKey *k = &keys[fuzz_below(&c->rng, n)];
    if (k->type == type)
      return k->name;
  }
}

static void gen_valid_variants(Ctx *c)
{
  g_autofree char *base = assemble(c, -1, NULL, NULL, "\n  ");
  run_text(c, "defaults", base, FUZZ_ACCEPT, SAME, NULL);
  g_autofree char *compact = assemble(c, -1, NULL, NULL, "");
  run_text(c, "compact", compact, FUZZ_ACCEPT, SAME, NULL);
  g_autofree char *ws = g_strdup_printf(" \r\n\t%s \n\t\r ", base);
  run_text(c, "whitespace-around", ws, FUZZ_ACCEPT, SAME, NULL);
  g_autofree char *crlf = assemble(c, -1, NULL, NULL, "\r\n\t");
  run_text(c, "crlf-tabs", crlf, FUZZ_ACCEPT, SAME, NULL);
  g_autofree guint *order = g_new(guint, c->members->len);
  for (guint j = 0; j < c->members->len; j++)
    order[j] = c->members->len - 1 - j;
  g_autofree char *reversed = assemble(c, -1, NULL, order, " ");
  run_text(c, "reversed-order", reversed, FUZZ_ACCEPT, SAME, NULL);
  g_autofree char *escaped_key = with_value(c, "n_layer", "4");
  char *at = strstr(escaped_key, "\"n_layer\"");
  g_autofree char *esc = g_strdup_printf("%.*s\"n\\u005flayer\"%s", (int)(at - escaped_key),
                                         escaped_key, at + strlen("\"n_layer\""));
  run_text(c, "escaped-key-name", esc, FUZZ_ACCEPT, SAME, NULL);
  run_text(c, "version-only", "{\"version\": 1}", FUZZ_ACCEPT, SAME, NULL);
  run_text(c, "version-0-lr", "{\"version\": 0, \"lr\": 0.25}", FUZZ_ACCEPT,
           (Want){"learning_rate", "0.25", FALSE}, NULL);
  g_autoptr(GString) long_prompt = g_string_new("{\"version\": 1, \"sample_prompt\": \"");
  for (int i = 0; i < 100000; i++)
    g_string_append(long_prompt, "ab\\u00e9");
  g_string_append(long_prompt, "\"}");
  run_text(c, "long-string", long_prompt->str, FUZZ_ACCEPT, NO_WANT, NULL);
  g_autofree char *tiny = with_value(c, "weight_decay", "1e-400");
  run_text(c, "underflow-to-zero", tiny, FUZZ_ACCEPT, (Want){"weight_decay", "0", FALSE}, NULL);
}

static void gen_broken_syntax(Ctx *c)
{
  g_autofree char *base = assemble(c, -1, NULL, NULL, "\n  ");
  gsize len = strlen(base);
  /* Cut anywhere before the closing brace. */
  for (int i = 0; i < 12; i++) {
    gsize cut = fuzz_below(&c->rng, len);
    g_autofree char *name = g_strdup_printf("truncated-at-%zu", cut);
    run_case(c, name, base, cut, FUZZ_REFUSE, NO_WANT, "not valid JSON");
  }
  const char *tails[][2] = {{"{\"n_layer\": 1}", "second-object"},
                            {"x", "garbage"},
                            {"// c", "line-comment"},
                            {"/* c */", "block-comment"},
                            {",", "comma"},
                            {"]", "bracket"},
                            {"}", "brace"},
                            {"\x1B", "escape-byte"}};
  for (guint i = 0; i < G_N_ELEMENTS(tails); i++) {
    g_autofree char *text = g_strdup_printf("%s\n%s", base, tails[i][0]);
    g_autofree char *name = g_strdup_printf("trailing-%s", tails[i][1]);
    run_text(c, name, text, FUZZ_REFUSE, NO_WANT, "after the end of the value");
  }
  g_autofree char *nul_tail = g_strdup_printf("%s?", base);
  nul_tail[len] = '\0';
  run_case(c, "trailing-nul", nul_tail, len + 1, FUZZ_REFUSE, NO_WANT, "NUL byte");
  g_autofree char *bom = g_strdup_printf("\xEF\xBB\xBF%s", base);
  run_text(c, "bom", bom, FUZZ_REFUSE, NO_WANT, "byte order mark");
  const char *comments[] = {"/* c */", "// c\n", "# c\n"};
  for (guint i = 0; i < G_N_ELEMENTS(comments); i++) {
    const char *comma = strchr(base + fuzz_below(&c->rng, len / 2), ',');
    g_autofree char *text =
        g_strdup_printf("%.*s %s%s", (int)(comma + 1 - base), base, comments[i], comma + 1);
    g_autofree char *name = g_strdup_printf("comment-%u", i);
    run_text(c, name, text, FUZZ_REFUSE, NO_WANT, i < 2 ? "comments are not allowed" : NULL);
  }
  /* Every member once more, somewhere: the second is refused, never silently kept. */
  for (int i = 0; i < 6; i++) {
    guint m = (guint)fuzz_below(&c->rng, c->members->len);
    g_autofree char *text =
        g_strdup_printf("%.*s, %s}", (int)(len - 1), base, (char *)c->members->pdata[m]);
    g_autofree char *name = g_strdup_printf("repeated-member-%u", m);
    run_text(c, name, text, FUZZ_REFUSE, NO_WANT, "is given more than once");
  }
  run_text(c, "repeated-version", "{\"version\": 1, \"version\": 1}", FUZZ_REFUSE, NO_WANT,
           "\"version\" is given more than once");
}

static void gen_bytes(Ctx *c)
{
  g_autofree char *base = assemble(c, -1, NULL, NULL, "\n  ");
  gsize len = strlen(base);
  /* A byte that JSON never allows, replacing one or inserted. */
  for (int i = 0; i < 36; i++) {
    g_autofree char *text = g_malloc(len + 2);
    gsize at = fuzz_below(&c->rng, len);
    guint8 b = fuzz_never_valid_byte(&c->rng);
    gboolean insert = i % 3 == 0;
    memcpy(text, base, at);
    text[at] = (char)b;
    memcpy(text + at + 1, base + at + !insert, len - at - !insert);
    gsize n = len + insert;
    g_autofree char *name =
        g_strdup_printf("%s-0x%02X-at-%zu", insert ? "insert" : "replace", b, at);
    run_case(c, name, text, n, FUZZ_REFUSE, NO_WANT, "not valid JSON");
  }
  /* Random bytes anywhere, deletions: their meaning is unknown, the rules still hold. */
  for (int i = 0; i < 40; i++) {
    g_autofree char *text = g_strdup(base);
    gsize at = fuzz_below(&c->rng, len);
    guint8 b = (guint8)fuzz_below(&c->rng, 256);
    text[at] = (char)b;
    g_autofree char *name = g_strdup_printf("random-0x%02X-at-%zu", b, at);
    run_case(c, name, text, len, FUZZ_EITHER, NO_WANT, NULL);
  }
  for (int i = 0; i < 10; i++) {
    g_autofree char *text = g_strdup(base);
    gsize at = fuzz_below(&c->rng, len);
    memmove(text + at, text + at + 1, len - at);
    g_autofree char *name = g_strdup_printf("deleted-at-%zu", at);
    run_case(c, name, text, len - 1, FUZZ_EITHER, NO_WANT, NULL);
  }
}

/* A value of `depth` nested arrays. */
static char *deep(guint depth)
{
  GString *s = g_string_new(NULL);
  for (guint i = 0; i < depth; i++)
    g_string_append_c(s, '[');
  for (guint i = 0; i < depth; i++)
    g_string_append_c(s, ']');
  return g_string_free(s, FALSE);
}

static void gen_values(Ctx *c)
{
  guint depths[] = {65, 1000, 60000};
  for (guint i = 0; i < G_N_ELEMENTS(depths); i++) {
    guint n;
    const CohortConfigKey *keys = cohort_config_keys(&n);
    g_autofree char *value = deep(depths[i]);
    g_autofree char *text = with_value(c, keys[fuzz_below(&c->rng, n)].name, value);
    g_autofree char *name = g_strdup_printf("nested-%u", depths[i]);
    run_text(c, name, text, FUZZ_REFUSE, NO_WANT, "nested deeper than 64 levels");
  }
  const char *non_finite[] = {"NaN", "Infinity", "-Infinity", "nan", "inf", "-inf"};
  for (guint i = 0; i < G_N_ELEMENTS(non_finite); i++) {
    g_autofree char *text = with_value(c, some_key(c, COHORT_KEY_DOUBLE), non_finite[i]);
    g_autofree char *name = g_strdup_printf("non-finite-%u", i);
    run_text(c, name, text, FUZZ_REFUSE, NO_WANT, "NaN and Infinity");
  }
  const char *huge[][2] = {{"1e400", "too large"},
                           {"-1e400", "too large"},
                           {"18446744073709551617", "outside the 64-bit range"},
                           {"9223372036854775808", "outside the 64-bit range"},
                           {"-9223372036854775809", "outside the 64-bit range"},
                           {"123456789012345678901234567890", "outside the 64-bit range"}};
  for (guint i = 0; i < G_N_ELEMENTS(huge); i++) {
    CohortKeyType type = i < 2 ? COHORT_KEY_DOUBLE : COHORT_KEY_INT;
    g_autofree char *text = with_value(c, some_key(c, type), huge[i][0]);
    g_autofree char *name = g_strdup_printf("huge-%u", i);
    run_text(c, name, text, FUZZ_REFUSE, NO_WANT, huge[i][1]);
  }
  const char *spellings[][2] = {{"01", "leading zero"},
                                {"-01", "leading zero"},
                                {"0x10", "hexadecimal"},
                                {"+1", "cannot start with '+'"},
                                {".5", "digit before the decimal point"},
                                {"1.", "a digit must follow the decimal point"},
                                {"1e", "a digit must follow the exponent"},
                                {"'gloo'", "single quotes"},
                                {"True", "where a value"},
                                {"\"a\tb\"", "raw control character"},
                                {"\"a\nb\"", "raw control character"},
                                {"\"ws\\u0000/etc\"", "\\u0000"},
                                {"\"\\ud800\"", "surrogate"},
                                {"\"\\udc00\"", "surrogate"},
                                {"\"\\x41\"", "unknown escape"},
                                {"\"\xC3\"", "not UTF-8"},
                                {"\"\xED\xA0\x80\"", "not UTF-8"}};
  for (guint i = 0; i < G_N_ELEMENTS(spellings); i++) {
    CohortKeyType type = spellings[i][0][0] == '"' ? COHORT_KEY_STRING : COHORT_KEY_INT;
    g_autofree char *text = with_value(c, some_key(c, type), spellings[i][0]);
    g_autofree char *name = g_strdup_printf("spelling-%u", i);
    run_text(c, name, text, FUZZ_REFUSE, NO_WANT, spellings[i][1]);
  }
  run_text(c, "single-quoted-key", "{\"version\": 1, 'n_layer': 2}", FUZZ_REFUSE, NO_WANT,
           "double quotes");
  run_text(c, "unquoted-key", "{\"version\": 1, n_layer: 2}", FUZZ_REFUSE, NO_WANT,
           "a key in double quotes");
  run_text(c, "trailing-comma", "{\"version\": 1, \"n_layer\": 2,}", FUZZ_REFUSE, NO_WANT,
           "a comma before");
  run_text(c, "version-0-and-1-names", "{\"version\": 0, \"lr\": 0.1, \"learning_rate\": 0.2}",
           FUZZ_REFUSE, NO_WANT, "both are given");
}

static void gen_shapes(Ctx *c)
{
  const char *tops[] = {"[]", "\"x\"", "1", "null", "true", "{}", ""};
  for (guint i = 0; i < G_N_ELEMENTS(tops); i++) {
    g_autofree char *name = g_strdup_printf("top-level-%u", i);
    run_text(c, name, tops[i], FUZZ_REFUSE, NO_WANT, NULL);
  }
  const char *versions[] = {"2", "-1", "\"1\"", "1.0", "null", "99999999999999999999"};
  for (guint i = 0; i < G_N_ELEMENTS(versions); i++) {
    g_autofree char *text = g_strdup_printf("{\"version\": %s}", versions[i]);
    g_autofree char *name = g_strdup_printf("version-%u", i);
    run_text(c, name, text, FUZZ_REFUSE, NO_WANT, NULL);
  }
  run_text(c, "no-version", "{\"n_layer\": 2}", FUZZ_REFUSE, NO_WANT, "no \"version\" key");
  /* Unknown keys, even odd ones, make a short one-line message. */
  run_text(c, "unknown-key-newline", "{\"version\": 1, \"a\\nb\": 1}", FUZZ_REFUSE, NO_WANT,
           "unknown key \"a\\nb\"");
  g_autoptr(GString) long_key = g_string_new("{\"version\": 1, \"");
  for (int i = 0; i < 100000; i++)
    g_string_append_c(long_key, 'k');
  g_string_append(long_key, "\": 1}");
  run_text(c, "unknown-key-long", long_key->str, FUZZ_REFUSE, NO_WANT, "unknown key");
  run_text(c, "model-newline", "{\"version\": 1, \"model\": \"g\\npt\"}", FUZZ_REFUSE, NO_WANT,
           "key \"model\"");
}

/* The inputs the issue names, generated because they are large. */
static void gen_named_regressions(Ctx *c)
{
  g_autofree char *nested = deep(60000);
  g_autofree char *text = g_strdup_printf("{\"version\": 1, \"device_indexes\": %s}", nested);
  run_text(c, "regression-device-indexes-60000-deep", text, FUZZ_REFUSE, NO_WANT,
           "nested deeper than 64 levels");
  g_autofree char *many = index_list(400000, TRUE);
  g_autofree char *text2 = g_strdup_printf("{\"version\": 1, \"device_indexes\": %s}", many);
  run_text(c, "regression-device-indexes-400000", text2, FUZZ_REFUSE, NO_WANT,
           "(400000 entries, more than 1024)");
}

/* tests/fuzz/regressions/config/{accept,refuse}-*.json, each a small input once wrongly read. */
static void replay_regressions(Ctx *c)
{
  g_autofree char *dir = g_test_build_filename(G_TEST_DIST, "fuzz", "regressions", "config", NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(GDir) d = g_dir_open(dir, 0, &error);
  g_assert_no_error(error);
  guint n = 0;
  const char *name;
  while ((name = g_dir_read_name(d))) {
    g_autofree char *path = g_build_filename(dir, name, NULL);
    g_autofree char *text = NULL;
    gsize len = 0;
    g_assert_true(g_file_get_contents(path, &text, &len, NULL));
    g_autofree char *stem = g_strndup(name, strlen(name) - strlen(".json"));
    gboolean accept = g_str_has_prefix(name, "accept-");
    g_assert_true(accept || g_str_has_prefix(name, "refuse-"));
    run_case(c, stem, text, len, accept ? FUZZ_ACCEPT : FUZZ_REFUSE, NO_WANT, NULL);
    n++;
  }
  g_test_message("%u saved regression inputs", n);
  g_assert_cmpuint(n, >=, 10);
}

static void test_config_fuzz(void)
{
  Ctx c;
  fuzz_tally_init(&c.t, "config");
  c.rng = fuzz_rng_new(1);
  c.defaults = cohort_config_new();
  /* The members of the defaults, one per line of the pretty form. */
  g_autofree char *pretty = cohort_config_to_json(c.defaults, TRUE);
  g_auto(GStrv) lines = g_strsplit(pretty, "\n", -1);
  c.members = g_ptr_array_new_with_free_func(g_free);
  for (guint i = 2; lines[i] && lines[i + 1]; i++) {
    char *m = g_strstrip(g_strdup(lines[i]));
    if (g_str_has_suffix(m, ","))
      m[strlen(m) - 1] = '\0';
    g_ptr_array_add(c.members, m);
  }

  gen_key_table(&c);
  gen_valid_variants(&c);
  gen_broken_syntax(&c);
  gen_bytes(&c);
  gen_values(&c);
  gen_shapes(&c);
  gen_named_regressions(&c);
  replay_regressions(&c);

  g_ptr_array_unref(c.members);
  cohort_config_free(c.defaults);
  fuzz_tally_finish(&c.t, 300);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  fuzz_watch_crashes();
  g_test_add_func("/fuzz/config", test_config_fuzz);
  return g_test_run();
}

/* Fuzzing training data through the real program: cohort-train --set train_data=FILE on
 * byte-level text and llm.c token shards made here, broken on purpose (bytes that are not
 * UTF-8, tokens at and beyond vocab_size, header fields, sizes off by a token, truncation),
 * changed harmlessly (bit flips whose token stays below vocab_size, the header's unused
 * ints), and things that are not regular files (FIFOs, devices, dangling links) alone or in
 * a data folder; plus a shard rewritten in place behind the prepared-data index. An accepted
 * file must give the number of steps per epoch its token count implies; a refused one ends in
 * exit status 1 or 2 with one line naming the file at fault. See fuzz-util.h for the rules. */
#include <json-glib/json-glib.h>
#include <sys/stat.h>

#include "fuzz-util.h"

#define VOCAB  512 /* for token shards */
#define T      8   /* seq_len */
#define MAGIC  20240520
#define HEADER 1024

static const char *const small[] = {
    "--quiet",        "--set", "n_layer=1",    "--set", "n_head=1",     "--set",
    "n_embd=8",       "--set", "seq_len=8",    "--set", "batch_size=1", "--set",
    "warmup_steps=0", "--set", "eval_every=0", "--set", "eval_steps=1", "--set",
    "sample_every=0", "--set", "threads=1",    "--set", "val_data=",    "--set",
    "save_every=0",   "--set", "max_steps=2",  NULL};

typedef struct {
  FuzzTally t;
  FuzzRng rng;
} Ctx;

static gint64 steps_per_epoch(const char *events)
{
  g_autofree char *text = NULL;
  if (!g_file_get_contents(events, &text, NULL, NULL))
    return -1;
  g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
  for (guint i = 0; lines[i]; i++) {
    g_autoptr(JsonNode) node = *lines[i] ? json_from_string(lines[i], NULL) : NULL;
    if (node && JSON_NODE_HOLDS_OBJECT(node)) {
      JsonObject *o = json_node_get_object(node);
      if (g_str_equal(json_object_get_string_member_with_default(o, "event", ""), "start"))
        return json_object_get_int_member_with_default(o, "steps_per_epoch", -1);
    }
  }
  return -1;
}

/* Trains on `data` (text or tokens) in workspace `ws`; the error must name `culprit`, and an
 * accepted run must count `tokens` tokens in all. */
static void train_on(Ctx *c, const char *data, gboolean tokens, const char *ws, const char *culprit,
                     FuzzExpect expect, gsize n_tokens)
{
  g_autoptr(GPtrArray) args = g_ptr_array_new_with_free_func(g_free);
  for (guint i = 0; small[i]; i++)
    g_ptr_array_add(args, g_strdup(small[i]));
  g_ptr_array_add(args, g_strdup("--set"));
  g_ptr_array_add(args, g_strdup_printf("train_data=%s", data));
  g_ptr_array_add(args, g_strdup("--set"));
  g_ptr_array_add(args, g_strdup_printf("workspace_dir=%s", ws));
  if (tokens) {
    const char *more[] = {"--set", "data_format=tokens", "--set", "vocab_size=512"};
    for (guint i = 0; i < G_N_ELEMENTS(more); i++)
      g_ptr_array_add(args, g_strdup(more[i]));
  }
  g_ptr_array_add(args, NULL);
  g_autofree char *events = g_strconcat(ws, ".events", NULL);
  FuzzRun r = fuzz_run_train((const char *const *)args->pdata, events, 30 * fuzz_time_scale());
  if (fuzz_judge_run(&c->t, data, culprit, expect, &r) && expect == FUZZ_ACCEPT) {
    gint64 want = (gint64)((n_tokens - 1) / T), got = steps_per_epoch(events);
    if (got != want)
      fuzz_fail(&c->t, data,
                "wrong accept: %" G_GINT64_FORMAT " steps per epoch, the data "
                "holds %" G_GINT64_FORMAT " windows",
                got, want);
  }
  fuzz_run_clear(&r);
}

/* Writes a case file `name` and trains on it. */
static void file_case(Ctx *c, const char *name, const void *bytes, gsize len, gboolean tokens,
                      FuzzExpect expect, gsize n_tokens)
{
  g_autofree char *path = fuzz_case_path(&c->t, name);
  fuzz_write(path, bytes, len);
  g_autofree char *ws = g_strconcat(path, ".ws", NULL);
  train_on(c, path, tokens, ws, path, expect, n_tokens);
}

/* ---- text ---- */

static GString *ascii_text(gsize n)
{
  GString *s = g_string_new(NULL);
  for (gsize i = 0; i < n; i++)
    g_string_append_c(s, (char)('a' + i % 26));
  return s;
}

static void gen_text(Ctx *c)
{
  g_autoptr(GString) ascii = ascii_text(200);
  file_case(c, "ascii.txt", ascii->str, ascii->len, FALSE, FUZZ_ACCEPT, 200);
  g_autoptr(GString) utf8 = g_string_new(NULL);
  for (int i = 0; i < 20; i++)
    g_string_append(utf8, "\xC3\x9C"
                          "ber \xF0\x9F\x98\x80 ");
  file_case(c, "multibyte.txt", utf8->str, utf8->len, FALSE, FUZZ_ACCEPT, utf8->len);
  file_case(c, "one-window.txt", ascii->str, T + 1, FALSE, FUZZ_ACCEPT, T + 1);
  file_case(c, "too-short.txt", ascii->str, T, FALSE, FUZZ_REFUSE, 0);
  file_case(c, "empty.txt", "", 0, FALSE, FUZZ_REFUSE, 0);
  const char *bad[] = {"\xFF", "\x80", "\xC0\xAF", "\xED\xA0\x80", "\xF5\x80\x80\x80", "\0"};
  for (guint i = 0; i < G_N_ELEMENTS(bad); i++) {
    g_autoptr(GString) s = ascii_text(200);
    gsize at = fuzz_below(&c->rng, 190);
    gsize n = i == G_N_ELEMENTS(bad) - 1 ? 1 : strlen(bad[i]);
    g_string_overwrite_len(s, at, bad[i], (gssize)n);
    g_autofree char *name = g_strdup_printf("not-utf8-%u-at-%zu.txt", i, at);
    file_case(c, name, s->str, s->len, FALSE, FUZZ_REFUSE, 0);
  }
  /* A multibyte character cut by the end of the file. */
  g_autoptr(GString) cut = ascii_text(100);
  g_string_append(cut, "\xE2\x82");
  file_case(c, "cut-character.txt", cut->str, cut->len, FALSE, FUZZ_REFUSE, 0);
}

/* ---- things that are not regular files, and folders ---- */

static void gen_kinds(Ctx *c)
{
  g_autoptr(GString) ascii = ascii_text(120);
  g_autofree char *fifo = fuzz_case_path(&c->t, "fifo.txt");
  g_assert_cmpint(mkfifo(fifo, 0600), ==, 0);
  g_autofree char *ws = g_strconcat(fifo, ".ws", NULL);
  train_on(c, fifo, FALSE, ws, fifo, FUZZ_REFUSE, 0);
  g_autofree char *ws2 = fuzz_case_path(&c->t, "device.ws");
  train_on(c, "/dev/zero", FALSE, ws2, "/dev/zero", FUZZ_REFUSE, 0);

  g_autofree char *target = fuzz_case_path(&c->t, "target.txt");
  fuzz_write(target, ascii->str, ascii->len);
  g_autofree char *link = fuzz_case_path(&c->t, "link.txt");
  g_assert_cmpint(symlink(target, link), ==, 0);
  g_autofree char *ws3 = g_strconcat(link, ".ws", NULL);
  train_on(c, link, FALSE, ws3, link, FUZZ_ACCEPT, ascii->len);
  g_autofree char *dangling = fuzz_case_path(&c->t, "dangling.txt");
  g_assert_cmpint(symlink("/nonexistent/cohort/data.txt", dangling), ==, 0);
  g_autofree char *ws4 = g_strconcat(dangling, ".ws", NULL);
  train_on(c, dangling, FALSE, ws4, dangling, FUZZ_REFUSE, 0);

  /* Folders: read in name order; a FIFO, a bad file or nothing to read is an error naming
   * the file (or the folder); a sub-folder is passed over. */
  const char *kinds[] = {"good", "with-fifo", "with-bad-file", "empty", "no-txt", "with-subfolder"};
  for (guint k = 0; k < G_N_ELEMENTS(kinds); k++) {
    g_autofree char *name = g_strdup_printf("folder-%s", kinds[k]);
    g_autofree char *dir = fuzz_case_path(&c->t, name);
    g_assert_cmpint(g_mkdir(dir, 0755), ==, 0);
    g_autofree char *culprit = g_strdup(dir);
    gsize n = 0;
    if (k != 3 && k != 4) {
      for (int i = 0; i < 3; i++) {
        g_autofree char *p = g_strdup_printf("%s/part-%d.txt", dir, i);
        fuzz_write(p, ascii->str, ascii->len);
        n += ascii->len;
      }
    }
    if (k == 1) {
      g_free(culprit);
      culprit = g_strdup_printf("%s/part-1b.txt", dir);
      g_assert_cmpint(mkfifo(culprit, 0600), ==, 0);
    } else if (k == 2) {
      g_free(culprit);
      culprit = g_strdup_printf("%s/part-2.txt", dir);
      fuzz_write(culprit, "abc\xFF", 4);
    } else if (k == 4) {
      g_autofree char *p = g_strdup_printf("%s/notes.md", dir);
      fuzz_write(p, ascii->str, ascii->len);
    } else if (k == 5) {
      g_autofree char *p = g_strdup_printf("%s/sub.txt", dir);
      g_assert_cmpint(g_mkdir(p, 0755), ==, 0);
    }
    g_autofree char *wsd = g_strconcat(dir, ".ws", NULL);
    FuzzExpect e = k == 0 || k == 5 ? FUZZ_ACCEPT : FUZZ_REFUSE;
    train_on(c, dir, FALSE, wsd, culprit, e, n);
  }
}

/* ---- token shards ---- */

/* A shard of `n` tokens (i * 7 % VOCAB) whose header says `count`. */
static GByteArray *shard(gsize n, gint32 magic, gint32 version, gint32 count)
{
  GByteArray *b = g_byte_array_new();
  g_byte_array_set_size(b, HEADER + 2 * (guint)n);
  memset(b->data, 0, HEADER);
  gint32 h[3] = {GINT32_TO_LE(magic), GINT32_TO_LE(version), GINT32_TO_LE(count)};
  memcpy(b->data, h, sizeof h);
  for (gsize i = 0; i < n; i++) {
    guint16 t = GUINT16_TO_LE((guint16)(i * 7 % VOCAB));
    memcpy(b->data + HEADER + 2 * i, &t, 2);
  }
  return b;
}

static void set_token(GByteArray *b, gsize i, guint16 v)
{
  v = GUINT16_TO_LE(v);
  memcpy(b->data + HEADER + 2 * i, &v, 2);
}

static guint16 get_token(const GByteArray *b, gsize i)
{
  guint16 v;
  memcpy(&v, b->data + HEADER + 2 * i, 2);
  return GUINT16_FROM_LE(v);
}

static void shard_case(Ctx *c, const char *name, GByteArray *b, FuzzExpect expect, gsize n)
{
  file_case(c, name, b->data, b->len, TRUE, expect, n);
  g_byte_array_unref(b);
}

static void gen_shards(Ctx *c)
{
  const gsize N = 200;
  shard_case(c, "valid.bin", shard(N, MAGIC, 1, (gint32)N), FUZZ_ACCEPT, N);
  GByteArray *top = shard(N, MAGIC, 1, (gint32)N);
  set_token(top, fuzz_below(&c->rng, N), VOCAB - 1);
  shard_case(c, "largest-token.bin", top, FUZZ_ACCEPT, N);
  gsize places[] = {0, N / 2, N - 1};
  for (guint i = 0; i < G_N_ELEMENTS(places); i++) {
    GByteArray *b = shard(N, MAGIC, 1, (gint32)N);
    set_token(b, places[i], VOCAB);
    g_autofree char *name = g_strdup_printf("token-vocab-at-%zu.bin", places[i]);
    shard_case(c, name, b, FUZZ_REFUSE, 0);
  }
  GByteArray *max = shard(N, MAGIC, 1, (gint32)N);
  set_token(max, 17, 65535);
  shard_case(c, "token-65535.bin", max, FUZZ_REFUSE, 0);
  struct {
    const char *name;
    gint32 magic, version, count;
    gsize n;
  } headers[] = {
      {"bad-magic.bin", 12345, 1, 200, 200},      {"version-2.bin", MAGIC, 2, 200, 200},
      {"negative-count.bin", MAGIC, 1, -1, 200},  {"count-one-more.bin", MAGIC, 1, 201, 200},
      {"count-one-less.bin", MAGIC, 1, 199, 200}, {"header-only.bin", MAGIC, 1, 0, 0},
      {"too-few-tokens.bin", MAGIC, 1, 5, 5}};
  for (guint i = 0; i < G_N_ELEMENTS(headers); i++)
    shard_case(c, headers[i].name,
               shard(headers[i].n, headers[i].magic, headers[i].version, headers[i].count),
               FUZZ_REFUSE, 0);
  GByteArray *cut = shard(N, MAGIC, 1, (gint32)N);
  g_byte_array_set_size(cut, 100);
  shard_case(c, "header-cut.bin", cut, FUZZ_REFUSE, 0);
  /* A bit flip in a token: the generator knows the new id, so whether it is allowed. */
  for (int i = 0; i < 8; i++) {
    GByteArray *b = shard(N, MAGIC, 1, (gint32)N);
    gsize at = fuzz_below(&c->rng, N);
    guint bit = (guint)fuzz_below(&c->rng, 16);
    guint16 v = get_token(b, at) ^ (guint16)(1u << bit);
    set_token(b, at, v);
    g_autofree char *name = g_strdup_printf("token-%zu-flip-bit-%u.bin", at, bit);
    shard_case(c, name, b, v < VOCAB ? FUZZ_ACCEPT : FUZZ_REFUSE, N);
  }
  /* The header's ints after the first three are not read. */
  for (int i = 0; i < 3; i++) {
    GByteArray *b = shard(N, MAGIC, 1, (gint32)N);
    gsize at = 12 + fuzz_below(&c->rng, HEADER - 12);
    b->data[at] ^= 0xFF;
    g_autofree char *name = g_strdup_printf("header-reserved-%zu.bin", at);
    shard_case(c, name, b, FUZZ_ACCEPT, N);
  }
  g_autoptr(GString) text = ascii_text(2000);
  file_case(c, "text-as-tokens.bin", text->str, text->len, TRUE, FUZZ_REFUSE, 0);
  /* A folder of shards with one bad token in the last. */
  g_autofree char *dir = fuzz_case_path(&c->t, "shard-folder");
  g_assert_cmpint(g_mkdir(dir, 0755), ==, 0);
  g_autofree char *bad = NULL;
  for (int i = 0; i < 3; i++) {
    g_autoptr(GByteArray) b = shard(N, MAGIC, 1, (gint32)N);
    if (i == 2)
      set_token(b, 3, VOCAB + 1);
    g_autofree char *p = g_strdup_printf("%s/shard-%d.bin", dir, i);
    fuzz_write(p, b->data, b->len);
    if (i == 2)
      bad = g_strdup(p);
  }
  g_autofree char *ws = g_strconcat(dir, ".ws", NULL);
  train_on(c, dir, TRUE, ws, bad, FUZZ_REFUSE, 0);
}

/* The stale index: a shard read once, then rewritten in place with a bad token, the same
 * size and the same mtime to the nanosecond; the second run (same workspace, so the same
 * prepared-data index) must refuse it. */
static void gen_stale_index(Ctx *c)
{
  g_autofree char *path = fuzz_case_path(&c->t, "regression-stale-index.bin");
  g_autoptr(GByteArray) b = shard(200, MAGIC, 1, 200);
  fuzz_write(path, b->data, b->len);
  g_autofree char *ws = g_strconcat(path, ".ws", NULL);
  train_on(c, path, TRUE, ws, path, FUZZ_ACCEPT, 200);
  struct stat st;
  g_assert_cmpint(stat(path, &st), ==, 0);
  FILE *f = fopen(path, "r+b");
  g_assert_nonnull(f);
  guint16 v = GUINT16_TO_LE(VOCAB + 3);
  g_assert_cmpint(fseek(f, HEADER + 2 * 50, SEEK_SET), ==, 0);
  g_assert_cmpuint(fwrite(&v, 2, 1, f), ==, 1);
  g_assert_cmpint(fclose(f), ==, 0);
  struct timespec keep[2] = {st.st_atim, st.st_mtim};
  g_assert_cmpint(utimensat(AT_FDCWD, path, keep, 0), ==, 0);
  train_on(c, path, TRUE, ws, path, FUZZ_REFUSE, 0);
}

/* tests/fuzz/regressions/data/{accept,refuse}-*.{txt,bin}. */
static void replay_regressions(Ctx *c)
{
  g_autofree char *dir = g_test_build_filename(G_TEST_DIST, "fuzz", "regressions", "data", NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(GDir) d = g_dir_open(dir, 0, &error);
  g_assert_no_error(error);
  guint n = 0;
  const char *name;
  while ((name = g_dir_read_name(d))) {
    g_autofree char *path = g_build_filename(dir, name, NULL);
    g_autofree char *bytes = NULL;
    gsize len = 0;
    g_assert_true(g_file_get_contents(path, &bytes, &len, NULL));
    gboolean accept = g_str_has_prefix(name, "accept-");
    gboolean tokens = g_str_has_suffix(name, ".bin");
    g_assert_true(accept || g_str_has_prefix(name, "refuse-"));
    gsize n_tokens = tokens ? (len - HEADER) / 2 : len;
    file_case(c, name, bytes, len, tokens, accept ? FUZZ_ACCEPT : FUZZ_REFUSE, n_tokens);
    n++;
  }
  g_test_message("%u saved regression inputs", n);
  g_assert_cmpuint(n, >=, 4);
}

static void test_data_fuzz(void)
{
  Ctx c;
  fuzz_tally_init(&c.t, "data");
  c.rng = fuzz_rng_new(4);
  gen_text(&c);
  gen_kinds(&c);
  gen_shards(&c);
  gen_stale_index(&c);
  replay_regressions(&c);
  fuzz_tally_finish(&c.t, 40);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/fuzz/data", test_data_fuzz);
  return g_test_run();
}

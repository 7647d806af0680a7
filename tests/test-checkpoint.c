/* Checkpoints (round trip, pruning, discovery, corruption) and GPT-2 weights in and out. */
#include <string.h>
#include <glib/gstdio.h>
#include "engine/model/checkpoint.h"
#include "engine/models/gpt-io.h"
#include "test-util.h"

static const CohortGptShape small = {
    .n_layer = 2, .n_head = 2, .n_embd = 16, .seq_len = 8, .vocab_size = 32};

static char *tmp_dir;

static char *fresh_dir(const char *name)
{
  char *dir = g_build_filename(tmp_dir, name, NULL);
  tu_rm_rf(dir);
  g_assert_cmpint(g_mkdir_with_parents(dir, 0755), ==, 0);
  return dir;
}

static CohortGpt *new_gpt(const CohortGptShape *shape, guint64 seed)
{
  g_autoptr(GError) error = NULL;
  CohortGpt *gpt = cohort_gpt_new(shape, 1, &error);
  g_assert_no_error(error);
  if (seed)
    cohort_gpt_init_weights(gpt, seed);
  return gpt;
}

static void fill(float *v, size_t n, guint32 seed)
{
  g_autoptr(GRand) r = g_rand_new_with_seed(seed);
  for (size_t i = 0; i < n; i++)
    v[i] = (float)g_rand_double_range(r, -1.0, 1.0);
}

static gboolean save_step(const char *ws, CohortGpt *gpt, CohortAdamW *opt, gint64 step,
                          int keep_last)
{
  g_autoptr(CohortConfig) cfg = cohort_config_new();
  CohortTrainState st = {.step = step};
  g_autoptr(GError) error = NULL;
  gboolean ok = cohort_checkpoint_save(ws, cfg, gpt, opt, NULL, &st, keep_last, NULL, &error);
  g_assert_no_error(error);
  return ok;
}

static void test_round_trip(void)
{
  g_autofree char *ws = fresh_dir("round");
  g_autoptr(CohortGpt) gpt = new_gpt(&small, 1);
  size_t n = cohort_gpt_num_params(gpt);
  g_autoptr(CohortAdamW) opt = cohort_adamw_new(n);
  fill(cohort_adamw_m(opt), n, 2);
  fill(cohort_adamw_v(opt), n, 3);
  g_autofree float *ema = g_new(float, n);
  fill(ema, n, 4);
  g_autoptr(CohortConfig) cfg = cohort_config_new();
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_config_set(cfg, "seed", "77", "test", &error));
  CohortTrainState st = {.step = 12,
                         .epoch = 3,
                         .batch_in_epoch = 5,
                         .tokens_seen = 123456789012,
                         .sample_rng = G_GUINT64_CONSTANT(0x8000000000000005)};
  g_autofree char *dir = NULL;
  g_assert_true(cohort_checkpoint_save(ws, cfg, gpt, opt, ema, &st, 0, &dir, &error));
  g_assert_no_error(error);
  g_autofree char *expect_dir = g_build_filename(ws, "checkpoints", "step-00000012", NULL);
  g_assert_cmpstr(dir, ==, expect_dir);
  g_autofree char *latest = cohort_checkpoint_find_latest(ws);
  g_assert_cmpstr(latest, ==, expect_dir);

  g_autoptr(CohortGpt) gpt2 = new_gpt(&small, 0);
  g_autoptr(CohortAdamW) opt2 = cohort_adamw_new(n);
  g_autofree float *ema2 = g_new0(float, n);
  CohortTrainState st2 = {0};
  g_autoptr(CohortConfig) saved = NULL;
  g_assert_true(cohort_checkpoint_load(dir, gpt2, opt2, ema2, &st2, &saved, &error));
  g_assert_no_error(error);
  g_assert_cmpmem(cohort_gpt_params(gpt2), n * 4, cohort_gpt_params(gpt), n * 4);
  g_assert_cmpmem(cohort_adamw_m(opt2), n * 4, cohort_adamw_m(opt), n * 4);
  g_assert_cmpmem(cohort_adamw_v(opt2), n * 4, cohort_adamw_v(opt), n * 4);
  g_assert_cmpmem(ema2, n * 4, ema, n * 4);
  g_assert_cmpmem(&st2, sizeof st2, &st, sizeof st);
  g_assert_nonnull(saved);
  g_assert_cmpint(saved->seed, ==, 77);

  /* Without EMA in the checkpoint, the EMA starts as a copy of the weights. */
  g_autofree char *ws2 = fresh_dir("round-no-ema");
  g_assert_true(save_step(ws2, gpt, opt, 1, 0));
  g_autofree char *dir2 = cohort_checkpoint_find_latest(ws2);
  g_assert_true(cohort_checkpoint_load(dir2, gpt2, NULL, ema2, NULL, NULL, &error));
  g_assert_no_error(error);
  g_assert_cmpmem(ema2, n * 4, cohort_gpt_params(gpt), n * 4);

  /* The weights are readable as a plain HF file too. */
  g_autofree char *model = g_build_filename(dir, "model.safetensors", NULL);
  g_autoptr(CohortGpt) gpt3 = new_gpt(&small, 0);
  g_assert_false(cohort_gpt_load_hf(gpt3, model, &error)); /* ema./optim. are extra */
  g_clear_error(&error);
}

static guint count_dirs(const char *ws)
{
  g_autofree char *ck = g_build_filename(ws, "checkpoints", NULL);
  g_autoptr(GDir) d = g_dir_open(ck, 0, NULL);
  guint n = 0;
  while (d && g_dir_read_name(d))
    n++;
  return n;
}

static void test_keep_last(void)
{
  g_autofree char *ws = fresh_dir("keep");
  g_autoptr(CohortGpt) gpt = new_gpt(&small, 1);
  for (int s = 1; s <= 5; s++)
    g_assert_true(save_step(ws, gpt, NULL, s * 10, 2));
  g_assert_cmpuint(count_dirs(ws), ==, 2);
  g_autofree char *latest = cohort_checkpoint_find_latest(ws);
  g_assert_true(g_str_has_suffix(latest, "step-00000050"));
  g_autofree char *kept = g_build_filename(ws, "checkpoints", "step-00000040", NULL);
  g_assert_true(g_file_test(kept, G_FILE_TEST_IS_DIR));

  /* keep_last 0 keeps everything; the same step saved twice is replaced, not doubled. */
  g_autofree char *ws_all = fresh_dir("keep-all");
  for (int s = 1; s <= 4; s++)
    g_assert_true(save_step(ws_all, gpt, NULL, s, 0));
  g_assert_true(save_step(ws_all, gpt, NULL, 4, 0));
  g_assert_cmpuint(count_dirs(ws_all), ==, 4);
}

static void test_find_latest(void)
{
  g_autofree char *ws = fresh_dir("latest");
  g_assert_null(cohort_checkpoint_find_latest(ws));
  g_autoptr(CohortGpt) gpt = new_gpt(&small, 1);
  g_assert_true(save_step(ws, gpt, NULL, 5, 0));
  g_autofree char *good = cohort_checkpoint_find_latest(ws);

  /* A killed save (complete files, but still .tmp) and a folder without model.safetensors. */
  g_autofree char *ck = g_build_filename(ws, "checkpoints", NULL);
  g_autofree char *tmp = g_build_filename(ck, "step-00000009.tmp", NULL);
  g_autofree char *partial = g_build_filename(ck, "step-00000008", NULL);
  g_autofree char *other = g_build_filename(ck, "step-00000007-backup", NULL);
  const char *dirs[] = {tmp, partial, other};
  for (int i = 0; i < 3; i++) {
    g_mkdir(dirs[i], 0755);
    g_autofree char *state = g_build_filename(dirs[i], "state.json", NULL);
    g_assert_true(g_file_set_contents(state, "{}", -1, NULL));
    if (dirs[i] != partial) {
      g_autofree char *model = g_build_filename(dirs[i], "model.safetensors", NULL);
      g_assert_true(g_file_set_contents(model, "x", -1, NULL));
    }
  }
  g_autofree char *latest = cohort_checkpoint_find_latest(ws);
  g_assert_cmpstr(latest, ==, good);

  /* The next save cleans the stale .tmp folder. */
  g_assert_true(save_step(ws, gpt, NULL, 6, 0));
  g_assert_false(g_file_test(tmp, G_FILE_TEST_EXISTS));
  g_autofree char *latest2 = cohort_checkpoint_find_latest(ws);
  g_assert_true(g_str_has_suffix(latest2, "step-00000006"));
}

static void test_corrupt(void)
{
  g_autofree char *ws = fresh_dir("corrupt");
  g_autoptr(CohortGpt) gpt = new_gpt(&small, 1);
  size_t n = cohort_gpt_num_params(gpt);
  g_autoptr(CohortAdamW) opt = cohort_adamw_new(n);
  g_assert_true(save_step(ws, gpt, opt, 3, 0));
  g_autofree char *dir = cohort_checkpoint_find_latest(ws);
  g_autofree char *model = g_build_filename(dir, "model.safetensors", NULL);
  g_autofree char *state = g_build_filename(dir, "state.json", NULL);

  g_autoptr(CohortGpt) target = new_gpt(&small, 9);
  g_autofree float *before = g_memdup2(cohort_gpt_params(target), n * 4);
  g_autoptr(GError) error = NULL;

  /* A model of another shape is refused before anything changes. */
  CohortGptShape deeper = small;
  deeper.n_layer = 1;
  g_autoptr(CohortGpt) other = new_gpt(&deeper, 0);
  g_assert_false(cohort_checkpoint_load(dir, other, NULL, NULL, NULL, NULL, &error));
  g_assert_error(error, COHORT_CHECKPOINT_ERROR, COHORT_CHECKPOINT_ERROR_MISMATCH);
  g_clear_error(&error);
  CohortGptShape wider = small;
  wider.vocab_size = 40;
  g_autoptr(CohortGpt) wide = new_gpt(&wider, 0);
  g_assert_false(cohort_checkpoint_load(dir, wide, NULL, NULL, NULL, NULL, &error));
  g_assert_error(error, COHORT_CHECKPOINT_ERROR, COHORT_CHECKPOINT_ERROR_MISMATCH);
  g_assert_nonnull(strstr(error->message, "[32, 16]"));
  g_clear_error(&error);

  /* Truncated weights: the sha256 no longer matches. */
  g_autofree char *contents = NULL;
  gsize len = 0;
  g_assert_true(g_file_get_contents(model, &contents, &len, NULL));
  g_assert_true(g_file_set_contents(model, contents, (gssize)(len - 100), NULL));
  g_assert_false(cohort_checkpoint_load(dir, target, NULL, NULL, NULL, NULL, &error));
  g_assert_error(error, COHORT_CHECKPOINT_ERROR, COHORT_CHECKPOINT_ERROR_CORRUPT);
  g_assert_nonnull(strstr(error->message, model));
  g_assert_null(strchr(error->message, '\n'));
  g_clear_error(&error);
  g_assert_cmpmem(cohort_gpt_params(target), n * 4, before, n * 4);

  /* One flipped byte is caught the same way. */
  contents[len - 5] ^= 1;
  g_assert_true(g_file_set_contents(model, contents, (gssize)len, NULL));
  g_assert_false(cohort_checkpoint_load(dir, target, NULL, NULL, NULL, NULL, &error));
  g_assert_error(error, COHORT_CHECKPOINT_ERROR, COHORT_CHECKPOINT_ERROR_CORRUPT);
  g_clear_error(&error);
  contents[len - 5] ^= 1;
  g_assert_true(g_file_set_contents(model, contents, (gssize)len, NULL));
  g_assert_true(cohort_checkpoint_load(dir, target, opt, NULL, NULL, NULL, &error));
  g_assert_no_error(error);

  /* A state.json that is not JSON, or lacks a field. */
  g_assert_true(g_file_set_contents(state, "{\"version\": 1, \"step\":", -1, NULL));
  g_assert_false(cohort_checkpoint_load(dir, target, NULL, NULL, NULL, NULL, &error));
  g_assert_error(error, COHORT_CHECKPOINT_ERROR, COHORT_CHECKPOINT_ERROR_CORRUPT);
  g_assert_nonnull(strstr(error->message, state));
  g_clear_error(&error);
  g_assert_true(g_file_set_contents(state, "{\"version\": 1, \"step\": 3}", -1, NULL));
  g_assert_false(cohort_checkpoint_load(dir, target, NULL, NULL, NULL, NULL, &error));
  g_assert_error(error, COHORT_CHECKPOINT_ERROR, COHORT_CHECKPOINT_ERROR_CORRUPT);
  g_assert_nonnull(strstr(error->message, "epoch"));
  g_clear_error(&error);

  g_autofree char *missing = g_build_filename(ws, "nope", NULL);
  g_assert_false(cohort_checkpoint_load(missing, target, NULL, NULL, NULL, NULL, &error));
  g_assert_error(error, COHORT_CHECKPOINT_ERROR, COHORT_CHECKPOINT_ERROR_IO);
}

/* Writes the model's tensors under `prefix`, plus HF's buffers and a tied lm_head. */
static void write_hf_file(const char *path, CohortGpt *gpt, const char *prefix,
                          gboolean untied_head)
{
  const CohortGptShape *s = cohort_gpt_shape(gpt);
  g_autoptr(GPtrArray) names = g_ptr_array_new_with_free_func(g_free);
  guint n = 0;
  g_autofree CohortStEntry *e =
      cohort_gpt_st_entries(gpt, cohort_gpt_params(gpt), prefix, names, &n);
  g_autoptr(GArray) all = g_array_new(FALSE, TRUE, sizeof(CohortStEntry));
  g_array_append_vals(all, e, n);
  const CohortTensorInfo *wte = cohort_gpt_find_tensor(gpt, "wte.weight");
  g_autofree float *head = g_memdup2(cohort_gpt_params(gpt) + wte->offset, wte->numel * 4);
  if (untied_head)
    head[7] += 1.0f;
  CohortStEntry h = {
      .name = "lm_head.weight", .data = head, .ndim = 2, .shape = {wte->shape[0], wte->shape[1]}};
  g_array_append_val(all, h);
  g_autofree float *tril = g_new0(float, s->seq_len * s->seq_len);
  float masked = -1e4f;
  for (int l = 0; l < s->n_layer; l++) {
    char *bias = g_strdup_printf("%sh.%d.attn.bias", prefix, l);
    char *mb = g_strdup_printf("%sh.%d.attn.masked_bias", prefix, l);
    g_ptr_array_add(names, bias);
    g_ptr_array_add(names, mb);
    CohortStEntry b = {
        .name = bias, .data = tril, .ndim = 4, .shape = {1, 1, s->seq_len, s->seq_len}};
    CohortStEntry m = {.name = mb, .data = &masked, .ndim = 0};
    g_array_append_val(all, b);
    g_array_append_val(all, m);
  }
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_safetensors_write(path, (CohortStEntry *)all->data, all->len, NULL, &error));
  g_assert_no_error(error);
}

static void expect_hf_error(CohortGpt *gpt, const char *path, const char *needle)
{
  size_t n = cohort_gpt_num_params(gpt);
  g_autofree float *before = g_memdup2(cohort_gpt_params(gpt), n * 4);
  g_autoptr(GError) error = NULL;
  g_assert_false(cohort_gpt_load_hf(gpt, path, &error));
  g_assert_nonnull(error);
  g_test_message("%s", error->message);
  g_assert_nonnull(strstr(error->message, path));
  g_assert_nonnull(strstr(error->message, needle));
  g_assert_cmpmem(cohort_gpt_params(gpt), n * 4, before, n * 4);
}

/* A file exported from a model of another `shape`, which `gpt` must refuse. */
static void expect_shape_refused(CohortGpt *gpt, const char *dir, const char *name,
                                 const CohortGptShape *shape, const char *needle)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortGpt) other = new_gpt(shape, 3);
  g_autofree char *path = g_build_filename(dir, name, NULL);
  g_assert_true(cohort_gpt_save_hf(other, NULL, path, NULL, &error));
  expect_hf_error(gpt, path, needle);
}

static void test_hf_round_trip(void)
{
  g_autofree char *dir = fresh_dir("hf");
  g_autoptr(CohortGpt) src = new_gpt(&small, 5);
  size_t n = cohort_gpt_num_params(src);
  g_autoptr(GError) error = NULL;

  /* HF layout with the "transformer." prefix, buffers and a tied head. */
  g_autofree char *prefixed = g_build_filename(dir, "prefixed.safetensors", NULL);
  write_hf_file(prefixed, src, "transformer.", FALSE);
  g_autoptr(CohortGpt) dst = new_gpt(&small, 0);
  g_assert_true(cohort_gpt_load_hf(dst, prefixed, &error));
  g_assert_no_error(error);
  g_assert_cmpmem(cohort_gpt_params(dst), n * 4, cohort_gpt_params(src), n * 4);

  /* Export, with other weights (as EMA would be), and import again. */
  g_autofree float *ema = g_new(float, n);
  fill(ema, n, 11);
  g_autofree char *exported = g_build_filename(dir, "export.safetensors", NULL);
  g_autoptr(GHashTable) meta = g_hash_table_new(g_str_hash, g_str_equal);
  g_hash_table_insert(meta, "cohort.step", "42");
  g_assert_true(cohort_gpt_save_hf(src, ema, exported, meta, &error));
  g_assert_no_error(error);
  g_assert_true(cohort_gpt_load_hf(dst, exported, &error));
  g_assert_no_error(error);
  g_assert_cmpmem(cohort_gpt_params(dst), n * 4, ema, n * 4);
  g_autoptr(CohortStFile) f = cohort_safetensors_open(exported, &error);
  g_assert_no_error(error);
  g_assert_cmpstr(cohort_safetensors_metadata(f, "format"), ==, "pt");
  g_assert_cmpstr(cohort_safetensors_metadata(f, "cohort.step"), ==, "42");
  g_assert_cmpstr(cohort_safetensors_names(f)[0], ==, "wte.weight");
  int64_t shape[8];
  g_assert_cmpint(cohort_safetensors_shape(f, "h.1.attn.c_attn.weight", shape), ==, 2);
  g_assert_cmpint(shape[0], ==, 16);
  g_assert_cmpint(shape[1], ==, 48);

  /* Error cases, each leaving the model untouched. */
  g_autofree char *untied = g_build_filename(dir, "untied.safetensors", NULL);
  write_hf_file(untied, src, "", TRUE);
  expect_hf_error(dst, untied, "lm_head.weight");

  CohortGptShape other = small;
  other.vocab_size = 50;
  expect_shape_refused(dst, dir, "vocab.safetensors", &other, "vocab_size 32");
  other = small;
  other.seq_len = 4;
  expect_shape_refused(dst, dir, "ctx.safetensors", &other, "seq_len 8");
  /* A longer context (n_positions above the model's seq_len) is taken: its first seq_len
   * positions, as Hugging Face uses them with shorter inputs. */
  {
    other = small;
    other.seq_len = 16;
    g_autoptr(CohortGpt) longer = new_gpt(&other, 9);
    g_autofree char *path = g_build_filename(dir, "longer.safetensors", NULL);
    g_assert_true(cohort_gpt_save_hf(longer, NULL, path, NULL, &error));
    g_autoptr(CohortGpt) shorter = new_gpt(&small, 0);
    g_assert_true(cohort_gpt_load_hf(shorter, path, &error));
    g_assert_no_error(error);
    const CohortTensorInfo *a = cohort_gpt_find_tensor(longer, "wpe.weight");
    const CohortTensorInfo *b = cohort_gpt_find_tensor(shorter, "wpe.weight");
    g_assert_cmpuint(b->numel * 2, ==, a->numel);
    g_assert_cmpmem(cohort_gpt_params(shorter) + b->offset, b->numel * 4,
                    cohort_gpt_params(longer) + a->offset, b->numel * 4);
  }
  other = small;
  other.n_layer = 3;
  expect_shape_refused(dst, dir, "deep.safetensors", &other, "h.2.");

  /* A missing tensor (a shallower file) and a wrong shape (a wider one). */
  other = small;
  other.n_layer = 1;
  expect_shape_refused(dst, dir, "shallow.safetensors", &other, "\"h.1.ln_1.weight\" is missing");

  g_autofree char *bad_shape = g_build_filename(dir, "shape.safetensors", NULL);
  {
    g_autoptr(GPtrArray) names = g_ptr_array_new_with_free_func(g_free);
    guint ne = 0;
    g_autofree CohortStEntry *e =
        cohort_gpt_st_entries(src, cohort_gpt_params(src), "", names, &ne);
    for (guint i = 0; i < ne; i++) {
      if (strcmp(e[i].name, "h.0.mlp.c_fc.weight") == 0) {
        e[i].shape[0] = 64; /* [4C, C] instead of [C, 4C]: a transposed (Linear) layout */
        e[i].shape[1] = 16;
      }
    }
    g_assert_true(cohort_safetensors_write(bad_shape, e, ne, NULL, &error));
  }
  expect_hf_error(dst, bad_shape, "has shape [64, 16], expected [16, 64]");

  /* Truncated. */
  g_autofree char *contents = NULL;
  gsize len = 0;
  g_assert_true(g_file_get_contents(exported, &contents, &len, NULL));
  g_autofree char *trunc = g_build_filename(dir, "trunc.safetensors", NULL);
  g_assert_true(g_file_set_contents(trunc, contents, (gssize)(len / 2), NULL));
  expect_hf_error(dst, trunc, "outside");
}

static gboolean have_python_torch(void)
{
  const char *argv[] = {"/usr/bin/python3", "-c", "import torch, numpy", NULL};
  int status = -1;
  if (!g_spawn_sync(NULL, (char **)argv, NULL,
                    G_SPAWN_STDOUT_TO_DEV_NULL | G_SPAWN_STDERR_TO_DEV_NULL, NULL, NULL, NULL, NULL,
                    &status, NULL))
    return FALSE;
  return g_spawn_check_wait_status(status, NULL);
}

static void run_python(const char *const *args)
{
  g_autoptr(GPtrArray) argv = g_ptr_array_new();
  g_autofree char *script = g_test_build_filename(G_TEST_DIST, "make_hf_gpt2.py", NULL);
  g_ptr_array_add(argv, "/usr/bin/python3");
  g_ptr_array_add(argv, script);
  for (const char *const *a = args; *a; a++)
    g_ptr_array_add(argv, (gpointer)*a);
  g_ptr_array_add(argv, NULL);
  g_autofree char *out = NULL, *err = NULL;
  int status = -1;
  g_autoptr(GError) error = NULL;
  g_assert_true(
      g_spawn_sync(NULL, (char **)argv->pdata, NULL, 0, NULL, NULL, &out, &err, &status, &error));
  g_assert_no_error(error);
  g_test_message("python: %s%s", out, err);
  g_assert_true(g_spawn_check_wait_status(status, NULL));
}

/* A file written by Python in HF's layout loads; an exported one reads back in Python. */
static void test_python_interop(void)
{
  if (!have_python_torch()) {
    g_test_skip("/usr/bin/python3 with torch and numpy is not available");
    return;
  }
  g_autofree char *dir = fresh_dir("python");
  g_autofree char *in = g_build_filename(dir, "hf.safetensors", NULL);
  g_autofree char *out = g_build_filename(dir, "cohort.safetensors", NULL);
  const char *write[] = {"write",     in,          "--n-layer", "2",  "--n-embd", "16",
                         "--seq-len", "8",         "--vocab",   "32", "--prefix", "transformer.",
                         "--buffers", "--lm-head", NULL};
  run_python(write);
  g_autoptr(CohortGpt) gpt = new_gpt(&small, 0);
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_gpt_load_hf(gpt, in, &error));
  g_assert_no_error(error);
  /* Spot check against the file itself: c_attn keeps HF's [C, 3C] input-major layout. */
  g_autoptr(CohortStFile) f = cohort_safetensors_open(in, &error);
  g_assert_no_error(error);
  float ref[16 * 48];
  g_assert_true(cohort_safetensors_read_f32(f, "transformer.h.1.attn.c_attn.weight", 2,
                                            (int64_t[]){16, 48}, ref, &error));
  const CohortTensorInfo *t = cohort_gpt_find_tensor(gpt, "h.1.attn.c_attn.weight");
  g_assert_cmpmem(cohort_gpt_params(gpt) + t->offset, sizeof ref, ref, sizeof ref);
  g_assert_cmpfloat(ref[0], !=, 0.0f);

  g_assert_true(cohort_gpt_save_hf(gpt, NULL, out, NULL, &error));
  g_assert_no_error(error);
  const char *compare[] = {"compare", in, out, NULL};
  run_python(compare);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  tmp_dir = tu_mkdtemp("ckpt");
  g_test_add_func("/checkpoint/round-trip", test_round_trip);
  g_test_add_func("/checkpoint/keep-last", test_keep_last);
  g_test_add_func("/checkpoint/find-latest", test_find_latest);
  g_test_add_func("/checkpoint/corrupt", test_corrupt);
  g_test_add_func("/gpt-io/hf-round-trip", test_hf_round_trip);
  g_test_add_func("/gpt-io/python-interop", test_python_interop);
  int rc = g_test_run();
  tu_rm_rf(tmp_dir);
  g_free(tmp_dir);
  return rc;
}

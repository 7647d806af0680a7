/* Text-to-image on latents (suite dist): the dit family's text layout (text_encoder builtin)
 * with vae_from, on 64 px RGB images the test makes (two colours, four layouts, a .txt caption
 * beside each):
 *  - the data source pairs each cached latent with its own image's caption (matched by path,
 *    whatever order the latent table has), the same caption for the mirrored latent of
 *    augment=flip;
 *  - cohort-train trains and validates on the cached latents and the captions' cached
 *    embeddings (finite losses, the latent and text caches of both sets), and `cohort-train
 * --sample` with a prompt decodes its samples through the VAE into a grid of 64 px RGB cells;
 *  - 2 ranks with batch 2 compute what one process computes with batch 4, with and without
 *    distributed_data_loading (each rank its share of both caches).
 * The VAE is builtin:vae/tiny (the one the build trains) where the environment names it
 * (T2I_LATENTS_VAE, set by tests/meson.build outside sanitizer builds), else a small random
 * one made here: the plumbing does not need a VAE that reconstructs well. */
#include <math.h>
#include <stdlib.h>

#include "data/augment.h"
#include "data/image-decode.h"
#include "data/latent-set.h"
#include "data/text-table.h"
#include "engine/config/config.h"
#include "engine/model/data-source.h"
#include "engine/models/vae.h"
#include "test-util.h"

static const char *const base_sets[] = {
    "model=dit",
    "data_format=images",
    "val_data=",
    "image_size=64",
    "image_channels=3",
    "patch_size=4",
    "n_layer=1",
    "n_head=2",
    "n_embd=32",
    "text_encoder=builtin",
    "max_text_tokens=8",
    "cfg_dropout=0.2",
    "warmup_steps=1",
    "eval_every=0",
    "sample_every=0",
    "save_every=0",
    "threads=1",
    "timeout_s=60",
    NULL,
};
#define DDP_BASE_SETS base_sets
#include "ddp-run.h"

static const char *const captions[] = {"red top", "red left", "blue top", "blue left"};
#define IMAGES 8
#define S      64

static char *root, *data_dir, *vae_set;

/* IMAGES images of 64×64 RGB: image i lit in colour (i / 2) mod 2 on side i mod 2 (top or
 * left), with a little noise of its own, and its caption beside it. */
static void make_data(void)
{
  data_dir = g_build_filename(root, "data", NULL);
  g_assert_cmpint(g_mkdir_with_parents(data_dir, 0755), ==, 0);
  guint32 s = 5;
  for (int i = 0; i < IMAGES; i++) {
    int kind = i % 4;
    g_autofree guint8 *px = g_new(guint8, S * S * 3);
    for (int y = 0; y < S; y++)
      for (int x = 0; x < S; x++) {
        gboolean lit = kind % 2 == 0 ? y < S / 2 : x < S / 2;
        for (int c = 0; c < 3; c++) {
          s = s * 1664525u + 1013904223u;
          int on = lit && c == (kind < 2 ? 0 : 2);
          px[(y * S + x) * 3 + c] = (guint8)((on ? 220 : 25) + (s >> 28));
        }
      }
    g_autofree char *png = g_strdup_printf("%s/%02d.png", data_dir, i);
    g_autofree char *txt = g_strdup_printf("%s/%02d.txt", data_dir, i);
    g_autoptr(GError) error = NULL;
    g_assert_true(cohort_image_write_png(png, px, S, S, 3, &error));
    g_assert_true(g_file_set_contents(txt, captions[kind], -1, &error));
  }
}

/* The VAE: the environment's, or a small random AutoencoderKL (64 px → 32×32×4, as the
 * built-in one) saved under root. */
static void choose_vae(void)
{
  const char *named = g_getenv("T2I_LATENTS_VAE");
  if (named && *named) {
    g_autofree char *dir = cohort_resolve_path(named);
    if (!g_file_test(dir, G_FILE_TEST_IS_DIR))
      g_error("%s (%s): no such VAE folder; the build makes it (tiny_vae_target)", named, dir);
    vae_set = g_strdup_printf("vae_from=%s", named);
    g_test_message("the VAE: %s (%s)", named, dir);
    return;
  }
  const CohortVaeConfig small = {
      .in_channels = 3,
      .out_channels = 3,
      .n_blocks = 2,
      .block_out_channels = {8, 16},
      .layers_per_block = 1,
      .latent_channels = 4,
      .norm_num_groups = 4,
      .scaling_factor = 0.7,
      .use_quant_conv = TRUE,
      .use_post_quant_conv = TRUE,
      .mid_block_add_attention = FALSE,
      .sample_size = S,
  };
  g_autofree char *dir = g_build_filename(root, "vae", NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortVae) v =
      cohort_vae_new(cohort_backend_cpu(), &small, COHORT_VAE_ENCODE, 1, S, 1, &error);
  g_assert_no_error(error);
  g_assert_true(cohort_vae_save(v, dir, &error));
  vae_set = g_strdup_printf("vae_from=%s", dir);
  g_test_message("the VAE: a random one made here (%s)", dir);
}

/* The data source of a latent table whose rows are the images in reverse order: each row's
 * text is its own image's caption's embedding, mirrored or not; the empty caption, drawn by
 * cfg_dropout, has no token. */
static void test_source_pairs(void)
{
  g_autoptr(CohortConfig) cfg = cohort_config_new();
  cfg->augment = COHORT_AUGMENT_FLIP;
  cfg->seed = 11;
  cfg->cfg_dropout = 0.0;
  const int D = 3, M = 4;
  CohortLatentTable *t = g_new0(CohortLatentTable, 1);
  *t = (CohortLatentTable){.n = IMAGES,
                           .variants = 2,
                           .channels = 1,
                           .size = 1,
                           .values = g_new(float, 2 * IMAGES),
                           .labels = g_new(int, IMAGES),
                           .classes = g_new0(char *, 1),
                           .paths = g_new0(char *, IMAGES + 1)};
  for (int i = 0; i < IMAGES; i++) {
    t->paths[i] = g_strdup_printf("%02d.png", IMAGES - 1 - i);
    t->labels[i] = -1;
    t->values[2 * i] = (float)(10 * i), t->values[2 * i + 1] = (float)(10 * i + 1);
  }
  g_autoptr(CohortDataSource) ds = cohort_data_source_new_latents(cfg, t);
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_data_source_read_latent_captions(ds, cfg, data_dir, &error));
  g_assert_no_error(error);
  g_assert_true(cohort_data_source_has_captions(ds));
  CohortTextTable *text = cohort_text_table_new(D, M);
  cohort_text_table_insert(text, "", 0, NULL);
  for (int k = 0; k < 4; k++) {
    float *v = g_new0(float, D);
    v[0] = (float)(k + 1); /* one token saying which caption */
    cohort_text_table_insert(text, captions[k], 1, v);
  }
  cohort_data_source_set_text(ds, text);
  g_autoptr(CohortBatch) b = cohort_data_source_batch_new(ds, 1);
  g_assert_nonnull(b->text);
  g_assert_cmpint(b->M, ==, M);
  int mirrored = 0;
  for (gint64 epoch = 0; epoch < 4; epoch++)
    for (int i = 0; i < IMAGES; i++) {
      b->epoch = epoch;
      g_assert_true(cohort_data_source_load(ds, b, 0, (guint64)i, &error));
      g_assert_no_error(error);
      int image = IMAGES - 1 - i, top, left;
      gboolean flip;
      cohort_augment_draw(COHORT_AUGMENT_FLIP, 11, (guint64)epoch, (guint64)i, &top, &left, &flip);
      g_assert_cmpfloat(b->images[0], ==, (float)(10 * i + (flip ? 1 : 0)));
      mirrored += flip;
      g_assert_cmpint(b->text_len[0], ==, 1);
      g_assert_cmpfloat(b->text[0], ==, (float)(image % 4 + 1));
    }
  g_test_message("%d of %d rows mirrored, each with its image's caption", mirrored, 4 * IMAGES);
  g_assert_cmpint(mirrored, >, 0);
  g_assert_cmpint(mirrored, <, 4 * IMAGES);
}

/* Trains a few steps on latents with captions, then samples one prompt through the VAE. */
static void test_trains_and_samples(void)
{
  g_autofree char *ws = tu_mkdtemp("t2i-latents");
  g_autofree char *events = g_build_filename(ws, "progress.jsonl", NULL);
  g_autofree char *data = g_strdup_printf("train_data=%s", data_dir);
  g_autofree char *val = g_strdup_printf("val_data=%s", data_dir);
  g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(argv, g_strdup(program("COHORT_TRAIN")));
  g_ptr_array_add(argv, g_strdup("--quiet"));
  g_ptr_array_add(argv, g_strdup("--progress-fd=3"));
  add_sets(argv, ws,
           (const char *[]){data, val, "eval_every=6", vae_set, "augment=flip", "max_steps=12",
                            "batch_size=4", "learning_rate=0.003", NULL});
  Result r = run(argv, events, NULL);
  g_assert_cmpint(r.status, ==, 0);
  g_free(r.err);
  g_autoptr(GPtrArray) ev = tu_read_events(events);
  g_autoptr(GArray) losses = tu_event_values(ev, "step", "loss");
  g_assert_cmpuint(losses->len, ==, 12);
  for (guint i = 0; i < losses->len; i++)
    g_assert_true(isfinite(g_array_index(losses, double, i)));
  g_test_message("loss of step 1 %.4f, of step 12 %.4f", g_array_index(losses, double, 0),
                 g_array_index(losses, double, 11));
  /* every image (and its mirror image) encoded once, before the first step */
  g_autoptr(GArray) encoded = tu_event_values(ev, "latents", "encoded");
  g_assert_cmpuint(encoded->len, >, 0);
  g_assert_cmpfloat(g_array_index(encoded, double, encoded->len - 1), ==, IMAGES);
  /* validation on latents with captions too */
  g_autoptr(GArray) val_loss = tu_event_values(ev, "eval", "val_loss");
  g_assert_cmpuint(val_loss->len, >, 0);
  for (guint i = 0; i < val_loss->len; i++)
    g_assert_true(isfinite(g_array_index(val_loss, double, i)));
  const char *files[] = {"latents-train.bin", "text-train.bin", "latents-val.bin", "text-val.bin"};
  for (guint i = 0; i < G_N_ELEMENTS(files); i++) {
    g_autofree char *path = g_build_filename(ws, "cache", files[i], NULL);
    if (!g_file_test(path, G_FILE_TEST_IS_REGULAR))
      g_error("%s: not written", path);
  }
  /* the captions were encoded after the latents: four and the empty one */
  gboolean logged = FALSE;
  for (guint i = 0; i < ev->len; i++) {
    JsonObject *o = ev->pdata[i];
    const char *msg = json_object_get_string_member_with_default(o, "message", "");
    logged |= g_str_has_prefix(msg, "train_data: 5 distinct captions: 5 encoded");
  }
  g_assert_true(logged);
  g_autofree char *png = g_build_filename(ws, "two.png", NULL);
  g_autoptr(GPtrArray) a = g_ptr_array_new_with_free_func(g_free);
  const char *sample[] = {"--sample",       ws,   "--set", "sample_prompt=red top", "--set",
                          "sample_count=2", "-o", png};
  g_ptr_array_add(a, g_strdup(program("COHORT_TRAIN")));
  for (guint i = 0; i < G_N_ELEMENTS(sample); i++)
    g_ptr_array_add(a, g_strdup(sample[i]));
  Result s = run(a, NULL, NULL);
  g_assert_cmpint(s.status, ==, 0);
  g_free(s.err);
  CohortRawImage g = {0};
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_image_load(png, 3, &g, &error));
  /* two decoded 64 px cells, 2 px apart (not the 32 px latents) */
  g_assert_cmpint(g.width, ==, 2 * S + 3 * 2);
  g_assert_cmpint(g.height, ==, S + 2 * 2);
  g_assert_cmpint(g.channels, ==, 3);
  /* the cells are images, not a constant: two noise draws decode to different pixels */
  double diff = 0;
  for (int y = 0; y < S; y++)
    for (int x = 0; x < S * 3; x++) {
      size_t row = (size_t)(2 + y) * g.width * 3;
      diff += fabs((double)g.pixels[row + 2 * 3 + x] - g.pixels[row + (2 + S + 2) * 3 + x]);
    }
  diff /= S * S * 3;
  g_test_message("mean |difference| of the two decoded cells: %.2f of 255", diff);
  g_assert_cmpfloat(diff, >, 0.5);
  cohort_raw_image_clear(&g);
  tu_rm_rf(ws);
}

/* 2 ranks × batch 2 = 1 process × batch 4 on latents with captions: each step's loss to 1e-5
 * relative, weights to a thousandth of what AdamW moves them in the steps (the self-attention
 * key biases left out, as tests/test-t2i.c says why). With `ddl` each rank encodes its share of
 * the images and of the captions (distributed_data_loading), else rank 0 all of both. */
static void check_ranks(gboolean ddl)
{
  const int steps = 4;
  const double lr = 1e-3;
  g_autofree char *data = g_strdup_printf("train_data=%s", data_dir);
  const char *multi[] = {data,
                         vae_set,
                         "max_steps=4",
                         "learning_rate=0.001",
                         "batch_size=2",
                         "bucket_cap_mb=0.02",
                         ddl ? "distributed_data_loading=true" : NULL,
                         NULL};
  const char *single[] = {data,           vae_set, "max_steps=4", "learning_rate=0.001",
                          "batch_size=4", NULL};
  const char *one_step[] = {data,           vae_set, "max_steps=1", "learning_rate=0.001",
                            "batch_size=4", NULL};
  const char *const *runs[] = {multi, single, one_step};
  GArray *w[3], *l[3];
  for (int k = 0; k < 3; k++) {
    g_autofree char *ws = tu_mkdtemp("t2i-latents-ddp");
    g_autofree char *events = g_build_filename(ws, "progress.jsonl", NULL);
    g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func(g_free);
    g_ptr_array_add(argv, g_strdup(program("COHORT_TRAIN")));
    g_ptr_array_add(argv, g_strdup("--quiet"));
    g_ptr_array_add(argv, g_strdup("--progress-fd=3"));
    if (k == 0) {
      g_ptr_array_add(argv, g_strdup("--nproc"));
      g_ptr_array_add(argv, g_strdup("2"));
    }
    add_sets(argv, ws, runs[k]);
    Result r = run(argv, events, NULL);
    g_assert_cmpint(r.status, ==, 0);
    g_free(r.err);
    g_autoptr(GPtrArray) ev = tu_read_events(events);
    l[k] = tu_event_values(ev, "step", "loss");
    g_autofree char *path = g_build_filename(ws, "model.safetensors", NULL);
    w[k] = tu_read_weights_except(path, "attn1.to_k.bias");
    for (int q = 0; k == 0 && ddl && q < 2; q++) { /* each rank cached its own shares */
      g_autofree char *rank = g_strdup_printf("rank-%d", q);
      g_autofree char *lat = g_build_filename(ws, "cache", rank, "latents-train.bin", NULL);
      g_autofree char *txt = g_build_filename(ws, "cache", rank, "text-train.bin", NULL);
      g_assert_true(g_file_test(lat, G_FILE_TEST_IS_REGULAR));
      g_assert_true(g_file_test(txt, G_FILE_TEST_IS_REGULAR));
    }
    tu_rm_rf(ws);
  }
  g_assert_cmpuint(l[0]->len, ==, steps);
  g_assert_cmpuint(l[1]->len, ==, steps);
  for (int s = 0; s < steps; s++) {
    double a = g_array_index(l[0], double, s), b = g_array_index(l[1], double, s);
    if (fabs(a - b) > 1e-5 * fabs(b))
      g_error("step %d: 2 ranks loss %.8g, one process %.8g", s + 1, a, b);
  }
  double diff = max_abs_diff(w[0], w[1]), tol = 1e-3 * lr * steps;
  g_test_message("2 ranks × batch 2%s vs 1 × 4: max |Δw| = %.3g (tolerance %.3g)",
                 ddl ? " (distributed_data_loading)" : "", diff, tol);
  g_assert_cmpfloat(diff, <=, tol);
  /* the runs trained: four steps move the weights far beyond the tolerance of one */
  g_assert_cmpfloat(max_abs_diff(w[2], w[1]), >, 100 * tol);
  for (int k = 0; k < 3; k++) {
    g_array_unref(w[k]);
    g_array_unref(l[k]);
  }
}

static void test_2_ranks(void)
{
  check_ranks(FALSE);
}

static void test_2_ranks_shares(void)
{
  check_ranks(TRUE);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  root = tu_mkdtemp("t2i-latents-root");
  make_data();
  choose_vae();
  g_test_add_func("/t2i-latents/source-pairs", test_source_pairs);
  g_test_add_func("/t2i-latents/trains-and-samples", test_trains_and_samples);
  g_test_add_func("/t2i-latents/2-ranks", test_2_ranks);
  g_test_add_func("/t2i-latents/2-ranks-shares", test_2_ranks_shares);
  int rc = g_test_run();
  tu_rm_rf(root);
  g_free(root);
  g_free(data_dir);
  g_free(vae_set);
  return rc;
}

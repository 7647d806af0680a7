/* Text-to-image training end to end (suite dist): the dit family's text layout
 * (text_encoder builtin) on tiny captioned images the test makes (8×8 grey, four captions, a
 * .txt beside each image): the loss falls, N ranks with batch b compute what one process
 * computes with batch N·b (losses of every step and the final weights; caption dropout, noise
 * and timesteps are functions of (seed, epoch, example), never of the rank), the export carries
 * diffusers' PixArtTransformer2DModel names, the captions' embeddings are cached (a second run
 * encodes nothing, a changed caption is encoded alone, each rank its share under
 * distributed_data_loading, a kill -9 while encoding keeps what was written), and bad input
 * fails naming what is wrong. */
#include <math.h>
#include <signal.h>
#include <stdlib.h>

#include "data/latent-cache.h"
#include "engine/families/dit.h" /* COHORT_TEXT_BUILTIN_WIDTH */
#include "engine/model/safetensors.h"
#include "test-util.h"

#include "t2i-data.h"

static const char *const base_sets[] = {
    T2I_BASE_SETS,
    NULL,
};
#define DDP_BASE_SETS base_sets
#include "ddp-run.h"

static char *data_dir;

static double mean(GArray *a, guint from, guint n)
{
  double s = 0;
  for (guint i = from; i < from + n; i++)
    s += g_array_index(a, double, i);
  return s / n;
}

static void test_trains(void)
{
  g_autofree char *data = g_strdup_printf("train_data=%s", data_dir);
  const char *sets[] = {data, "max_steps=24", "batch_size=8", "learning_rate=0.003", NULL};
  GArray *losses = NULL;
  g_autoptr(GArray) w = train_run(1, sets, "t2i-trains", &losses);
  g_assert_cmpuint(losses->len, ==, 24);
  for (guint i = 0; i < losses->len; i++)
    g_assert_true(isfinite(g_array_index(losses, double, i)));
  double first = mean(losses, 0, 6), last = mean(losses, 18, 6);
  g_test_message("mean loss of steps 1-6 %.4f, of steps 19-24 %.4f", first, last);
  g_assert_cmpfloat(last, <, 0.8 * first);
  g_array_unref(losses);
}

/* The weights of `path` except the self-attention key biases: their gradient is zero in exact
 * arithmetic (a softmax does not change when every key's logit moves by the same q·b), so AdamW
 * turns the rounding of sums taken in another order into steps of up to lr there. */
static GArray *weights_but_key_bias(const char *path)
{
  return tu_read_weights_except(path, "attn1.to_k.bias");
}

/* cohort-train with nproc ranks: the weights (weights_but_key_bias) and each step's loss. */
static GArray *train_ranks(int nproc, const char *const *extra, GArray **losses)
{
  g_autofree char *ws = tu_mkdtemp("t2i-ddp");
  g_autofree char *events = g_build_filename(ws, "progress.jsonl", NULL);
  g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(argv, g_strdup(program("COHORT_TRAIN")));
  g_ptr_array_add(argv, g_strdup("--quiet"));
  g_ptr_array_add(argv, g_strdup("--progress-fd=3"));
  if (nproc > 1) {
    g_ptr_array_add(argv, g_strdup("--nproc"));
    g_ptr_array_add(argv, g_strdup_printf("%d", nproc));
  }
  add_sets(argv, ws, extra);
  Result r = run(argv, events, NULL);
  g_assert_cmpint(r.status, ==, 0);
  g_free(r.err);
  g_autoptr(GPtrArray) ev = tu_read_events(events);
  *losses = tu_event_values(ev, "step", "loss");
  g_autofree char *path = g_build_filename(ws, "model.safetensors", NULL);
  GArray *w = weights_but_key_bias(path);
  /* each rank cached its own share */
  for (int q = 0; q < nproc && g_strv_contains(extra, "distributed_data_loading=true"); q++) {
    g_autofree char *rank = g_strdup_printf("rank-%d", q);
    g_autofree char *file = g_build_filename(ws, "cache", rank, "text-train.bin", NULL);
    g_assert_true(g_file_test(file, G_FILE_TEST_IS_REGULAR));
  }
  tu_rm_rf(ws);
  return w;
}

/* As test-dit-ddp.c: losses of each step to 1e-5 relative, weights to a thousandth of what
 * AdamW can move them in K steps. */
static void check_ranks(int world, int batch, gboolean ddl)
{
  const int steps = 6;
  const double lr = 1e-3;
  g_autofree char *data = g_strdup_printf("train_data=%s", data_dir);
  g_autofree char *s_bn = g_strdup_printf("batch_size=%d", batch);
  g_autofree char *s_b1 = g_strdup_printf("batch_size=%d", batch * world);
  const char *multi[] = {data, "max_steps=6",        "learning_rate=0.001",
                         s_bn, "bucket_cap_mb=0.02", ddl ? "distributed_data_loading=true" : NULL,
                         NULL};
  const char *single[] = {data, "max_steps=6", "learning_rate=0.001", s_b1, NULL};
  GArray *ln = NULL, *l1 = NULL, *l0 = NULL;
  g_autoptr(GArray) wn = train_ranks(world, multi, &ln);
  g_autoptr(GArray) w1 = train_ranks(1, single, &l1);
  g_assert_cmpuint(ln->len, ==, steps);
  g_assert_cmpuint(l1->len, ==, steps);
  for (int s = 0; s < steps; s++) {
    double a = g_array_index(ln, double, s), b = g_array_index(l1, double, s);
    if (fabs(a - b) > 1e-5 * fabs(b))
      g_error("step %d: %d ranks loss %.8g, one process %.8g", s + 1, world, a, b);
  }
  double diff = max_abs_diff(wn, w1), tol = 1e-3 * lr * steps;
  g_test_message("%d ranks × batch %d vs 1 × %d: max |Δw| = %.3g (tolerance %.3g)", world, batch,
                 batch * world, diff, tol);
  g_assert_cmpfloat(diff, <=, tol);
  /* the runs trained: six steps move the weights far beyond the tolerance */
  g_autoptr(GArray) w0 = train_ranks(1, (const char *[]){data, "max_steps=1", s_b1, NULL}, &l0);
  g_assert_cmpfloat(max_abs_diff(w0, w1), >, 100 * tol);
  g_array_unref(ln);
  g_array_unref(l1);
  g_array_unref(l0);
}

static void test_2_ranks(void)
{
  check_ranks(2, 4, FALSE);
}

/* distributed_data_loading: each rank encodes its share of the captions into its own cache
 * folder and the shares are gathered; the embeddings are one process's (same losses and
 * weights). */
static void test_2_ranks_shares(void)
{
  check_ranks(2, 4, TRUE);
}

/* The export's names and shapes are diffusers' PixArtTransformer2DModel's. */
static void test_export_names(void)
{
  g_autofree char *ws = tu_mkdtemp("t2i-export");
  g_autofree char *data = g_strdup_printf("train_data=%s", data_dir);
  g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(argv, g_strdup(program("COHORT_TRAIN")));
  g_ptr_array_add(argv, g_strdup("--quiet"));
  add_sets(argv, ws, (const char *[]){data, "max_steps=1", "batch_size=4", NULL});
  Result r = run(argv, NULL, NULL);
  g_assert_cmpint(r.status, ==, 0);
  g_free(r.err);
  g_autofree char *path = g_build_filename(ws, "model.safetensors", NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortStFile) f = cohort_safetensors_open(path, &error);
  g_assert_no_error(error);
  const struct {
    const char *name;
    int nd;
    int64_t d0, d1;
  } want[] = {
      {"pos_embed.proj.weight", 4, 32, 1},
      {"adaln_single.emb.timestep_embedder.linear_1.weight", 2, 32, 256},
      {"adaln_single.linear.weight", 2, 192, 32},
      {"caption_projection.linear_1.weight", 2, 32, 64},
      {"caption_projection.linear_2.bias", 1, 32, 0},
      {"transformer_blocks.1.scale_shift_table", 2, 6, 32},
      {"transformer_blocks.1.attn2.to_v.weight", 2, 32, 32},
      {"transformer_blocks.0.ff.net.2.weight", 2, 32, 128},
      {"scale_shift_table", 2, 2, 32},
      {"proj_out.weight", 2, 4, 32},
  };
  for (size_t i = 0; i < G_N_ELEMENTS(want); i++) {
    int64_t shape[8];
    int nd = cohort_safetensors_shape(f, want[i].name, shape);
    if (nd != want[i].nd)
      g_error("%s: %d dimensions, want %d", want[i].name, nd, want[i].nd);
    g_assert_cmpint(shape[0], ==, want[i].d0);
    if (nd > 1)
      g_assert_cmpint(shape[1], ==, want[i].d1);
  }
  int64_t none[8];
  g_assert_cmpint(cohort_safetensors_shape(f, "y_embedder.embedding_table.weight", none), <, 0);
  tu_rm_rf(ws);
}

/* One step in workspace `ws` (kept, --overwrite); the log line of the train captions' encoding,
 * and the weights into *w. */
static char *caption_run(const char *ws, const char *data, GArray **w)
{
  g_autofree char *events = g_build_filename(ws, "progress.jsonl", NULL);
  g_autofree char *s_data = g_strdup_printf("train_data=%s", data);
  g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(argv, g_strdup(program("COHORT_TRAIN")));
  g_ptr_array_add(argv, g_strdup("--quiet"));
  g_ptr_array_add(argv, g_strdup("--overwrite"));
  g_ptr_array_add(argv, g_strdup("--progress-fd=3"));
  add_sets(argv, ws, (const char *[]){s_data, "max_steps=2", "batch_size=8", NULL});
  Result r = run(argv, events, NULL);
  g_assert_cmpint(r.status, ==, 0);
  g_free(r.err);
  g_autofree char *model = g_build_filename(ws, "model.safetensors", NULL);
  *w = tu_read_weights(model);
  g_autoptr(GPtrArray) ev = tu_read_events(events);
  for (guint i = 0; i < ev->len; i++) {
    JsonObject *o = ev->pdata[i];
    const char *msg =
        json_object_has_member(o, "message") ? json_object_get_string_member(o, "message") : NULL;
    if (msg && g_str_has_prefix(msg, "train_data: ") && strstr(msg, "distinct captions"))
      return g_strdup(msg);
  }
  g_error("no log line of the captions' encoding in %s", events);
}

/* The embedding cache: the second run encodes nothing and trains the same weights (cached
 * floats are the encoder's, bit for bit); a changed caption is encoded again, alone. */
static void test_cache(void)
{
  g_autofree char *ws = tu_mkdtemp("t2i-cache");
  g_autofree char *data = tu_mkdtemp("t2i-cache-data");
  g_autofree char *copy = g_strdup_printf("cp -r %s/. %s", data_dir, data);
  g_assert_cmpint(system(copy), ==, 0);
  GArray *w1, *w2, *w3;
  g_autofree char *a = caption_run(ws, data, &w1);
  g_test_message("%s", a);
  g_assert_nonnull(strstr(a, "5 distinct captions: 5 encoded, 0 from the cache"));
  g_autofree char *file = g_build_filename(ws, "cache", "text-train.bin", NULL);
  g_assert_true(g_file_test(file, G_FILE_TEST_IS_REGULAR));
  g_autofree char *b = caption_run(ws, data, &w2);
  g_test_message("%s", b);
  g_assert_nonnull(strstr(b, "5 distinct captions: 0 encoded, 5 from the cache"));
  g_assert_cmpfloat(max_abs_diff(w1, w2), ==, 0.0);
  g_autofree char *txt = g_build_filename(data, "00.txt", NULL);
  g_assert_true(g_file_set_contents(txt, "white top, bright", -1, NULL));
  g_autofree char *c = caption_run(ws, data, &w3);
  g_test_message("%s", c);
  g_assert_nonnull(strstr(c, "6 distinct captions: 1 encoded, 5 from the cache"));
  g_array_unref(w1);
  g_array_unref(w2);
  g_array_unref(w3);
  tu_rm_rf(ws);
  tu_rm_rf(data);
}

/* A kill -9 while the captions are encoded keeps every record written before it (the latent
 * cache's journal): with 300 distinct captions and a crash right after the 100th record (the
 * kill test hook), the next run reads those 100 from the cache, encodes the other 201 (with
 * ""), and trains the weights of a run that never crashed, bit for bit. */
static void test_kill_while_caching(void)
{
  enum { N = 300, KILL_AT = 100 };
  g_autofree char *data = tu_mkdtemp("t2i-kill-data");
  guint8 px[64];
  for (int i = 0; i < N; i++) {
    for (int k = 0; k < 64; k++)
      px[k] = (guint8)((i * 7 + k * 13) % 251);
    g_autofree char *png = g_strdup_printf("%s/%03d.png", data, i);
    g_autofree char *txt = g_strdup_printf("%s/%03d.txt", data, i);
    g_autofree char *caption = g_strdup_printf("caption %03d", i);
    g_assert_true(cohort_image_write_png(png, px, 8, 8, 1, NULL));
    g_assert_true(g_file_set_contents(txt, caption, -1, NULL));
  }
  g_autofree char *ws = tu_mkdtemp("t2i-kill"), *fresh = tu_mkdtemp("t2i-kill-fresh");
  g_autofree char *s_data = g_strdup_printf("train_data=%s", data);
  g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(argv, g_strdup(program("COHORT_TRAIN")));
  g_ptr_array_add(argv, g_strdup("--quiet"));
  add_sets(argv, ws, (const char *[]){s_data, "max_steps=2", "batch_size=8", NULL});
  g_autofree char *hook = g_strdup_printf("kill:0:%d:captions", KILL_AT);
  Result r = run(argv, NULL, (const char *[]){"COHORT_TEST_HOOKS", hook, NULL});
  g_assert_cmpint(r.status, ==, 128 + SIGKILL);
  g_free(r.err);
  g_autofree char *file = g_build_filename(ws, "cache", "text-train.bin", NULL);
  {
    g_autoptr(GError) error = NULL;
    g_autoptr(CohortLatentCache) c =
        cohort_latent_cache_open(file, 1 + 16 * COHORT_TEXT_BUILTIN_WIDTH, &error);
    g_assert_no_error(error);
    g_assert_cmpuint(cohort_latent_cache_count(c), ==, KILL_AT);
  }
  GArray *w_again, *w_fresh;
  g_autofree char *again = caption_run(ws, data, &w_again);
  g_test_message("after the kill: %s", again);
  g_autofree char *want = g_strdup_printf("%d distinct captions: %d encoded, %d from the cache",
                                          N + 1, N + 1 - KILL_AT, KILL_AT);
  g_assert_nonnull(strstr(again, want));
  g_autofree char *never = caption_run(fresh, data, &w_fresh);
  g_assert_nonnull(strstr(never, "0 from the cache"));
  g_assert_cmpfloat(max_abs_diff(w_again, w_fresh), ==, 0.0);
  g_array_unref(w_again);
  g_array_unref(w_fresh);
  tu_rm_rf(ws);
  tu_rm_rf(fresh);
  tu_rm_rf(data);
}

/* Mean of the grey pixels of cell (row, col) of a sample grid (8×8 cells, 2 pixels apart) on
 * `side` (0 top, 1 bottom, 2 left, 3 right). */
static double side_mean(const CohortRawImage *g, int row, int col, int side)
{
  int x0 = 2 + col * 10, y0 = 2 + row * 10;
  double sum = 0;
  for (int y = 0; y < 8; y++)
    for (int x = 0; x < 8; x++) {
      gboolean on = side == 0 ? y < 4 : side == 1 ? y >= 4 : side == 2 ? x < 4 : x >= 4;
      if (on)
        sum += g->pixels[(size_t)(y0 + y) * g->width + x0 + x];
    }
  return sum / 32;
}

/* Samples follow their prompts: after a short training, `cohort-train --sample` with the four
 * captions gives a grid whose row k is lit on side k; sample_count images of sample_prompt. */
static void test_prompts(void)
{
  g_autofree char *ws = tu_mkdtemp("t2i-prompts");
  g_autofree char *data = g_strdup_printf("train_data=%s", data_dir);
  g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(argv, g_strdup(program("COHORT_TRAIN")));
  g_ptr_array_add(argv, g_strdup("--quiet"));
  add_sets(argv, ws,
           (const char *[]){data, "max_steps=1200", "batch_size=8", "learning_rate=0.003", NULL});
  Result r = run(argv, NULL, NULL);
  g_assert_cmpint(r.status, ==, 0);
  g_free(r.err);
  g_autofree char *grid = g_build_filename(ws, "grid.png", NULL);
  g_autofree char *one = g_build_filename(ws, "one.png", NULL);
  const char *sample[][8] = {
      {"--sample", ws, "--set", "sample_prompts=white top|white bottom|white left|white right",
       "--set", "sample_steps=16", "-o", grid},
      {"--sample", ws, "--set", "sample_prompt=white left", "--set", "sample_count=3", "-o", one},
  };
  for (guint k = 0; k < G_N_ELEMENTS(sample); k++) {
    g_autoptr(GPtrArray) a = g_ptr_array_new_with_free_func(g_free);
    g_ptr_array_add(a, g_strdup(program("COHORT_TRAIN")));
    for (int i = 0; i < 8; i++)
      g_ptr_array_add(a, g_strdup(sample[k][i]));
    Result s = run(a, NULL, NULL);
    g_assert_cmpint(s.status, ==, 0);
    g_free(s.err);
  }
  CohortRawImage g = {0}, o = {0};
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_image_load(grid, 1, &g, &error));
  g_assert_cmpint(g.width, ==, 8 * 8 + 9 * 2);
  g_assert_cmpint(g.height, ==, 4 * 8 + 5 * 2);
  int follow = 0;
  for (int row = 0; row < 4; row++)
    for (int col = 0; col < 8; col++) {
      int opposite = row ^ 1; /* top-bottom, left-right */
      follow += side_mean(&g, row, col, row) > side_mean(&g, row, col, opposite) + 64;
    }
  g_test_message("%d of 32 samples lit on the side their caption names (chance: 16)", follow);
  g_assert_cmpint(follow, >=, 28);
  g_assert_true(cohort_image_load(one, 1, &o, &error));
  g_assert_cmpint(o.width, ==, 3 * 8 + 4 * 2);
  g_assert_cmpint(o.height, ==, 8 + 2 * 2);
  cohort_raw_image_clear(&g);
  cohort_raw_image_clear(&o);
  tu_rm_rf(ws);
}

/* Runs a 1-step training with `extra` that must fail; its stderr. */
static char *failing(const char *const *extra)
{
  g_autofree char *ws = tu_mkdtemp("t2i-bad");
  g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(argv, g_strdup(program("COHORT_TRAIN")));
  g_ptr_array_add(argv, g_strdup("--quiet"));
  add_sets(argv, ws, extra);
  Result r = run(argv, NULL, NULL);
  g_assert_cmpint(r.status, !=, 0);
  tu_rm_rf(ws);
  return r.err;
}

static void test_bad_input(void)
{
  g_autofree char *data = g_strdup_printf("train_data=%s", data_dir);
  /* a missing encoder folder: the key, the value, what is allowed */
  g_autofree char *e1 =
      failing((const char *[]){data, "max_steps=1", "text_encoder=/nonexistent/qwen3", NULL});
  g_assert_nonnull(strstr(e1, "\"text_encoder\""));
  g_assert_nonnull(strstr(e1, "/nonexistent/qwen3"));
  g_assert_nonnull(strstr(e1, "allowed"));
  /* images without captions */
  g_autofree char *bare = tu_mkdtemp("t2i-bare");
  guint8 px[64] = {0};
  g_autofree char *png = g_build_filename(bare, "a.png", NULL);
  g_assert_true(cohort_image_write_png(png, px, 8, 8, 1, NULL));
  g_autofree char *bare_set = g_strdup_printf("train_data=%s", bare);
  g_autofree char *e2 = failing((const char *[]){bare_set, "max_steps=1", NULL});
  g_assert_nonnull(strstr(e2, "no image has a caption"));
  /* a layer the encoder does not have */
  g_autofree char *e3 =
      failing((const char *[]){data, "max_steps=1", "text_encoder_layer=9", NULL});
  g_assert_nonnull(strstr(e3, "\"text_encoder_layer\": 9"));
  tu_rm_rf(bare);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  data_dir = t2i_make_data();
  g_test_add_func("/t2i/trains", test_trains);
  g_test_add_func("/t2i/2-ranks", test_2_ranks);
  g_test_add_func("/t2i/2-ranks-caption-shares", test_2_ranks_shares);
  g_test_add_func("/t2i/embedding-cache", test_cache);
  g_test_add_func("/t2i/kill-while-caching", test_kill_while_caching);
  g_test_add_func("/t2i/export-names", test_export_names);
  g_test_add_func("/t2i/prompts", test_prompts);
  g_test_add_func("/t2i/bad-input", test_bad_input);
  int rc = g_test_run();
  tu_rm_rf(data_dir);
  g_free(data_dir);
  return rc;
}

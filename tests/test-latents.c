/* Latent training (vae_from) end to end, through cohort-train (suite dist), on a copy of part of
 * the built-in colour glyph set and a small VAE made here:
 *  - shares: 2 ranks with distributed_data_loading encode disjoint shares (rank r the images i
 *    with i mod 2 = r) into cache/rank-r, whose union is the data set; a changed image is
 *    encoded again alone, a changed VAE re-encodes everything (and the stale records go);
 *  - N ranks = 1 process: 2 ranks (with and without distributed_data_loading) train exactly as
 *    one process with their combined batch on the latents;
 *  - no collective timeout: with rank 0 caching alone for longer than timeout_s, the others
 *    wait on the store and the run succeeds;
 *  - stop and resume: a SIGTERM during caching ends the run as stopped (exit 143, a `done` event
 *    "stopped"), a SIGKILL leaves at most a torn record; each next run encodes only what the
 *    cache lacks;
 *  - flip: augment flip caches the mirror image's latent beside each (what the VAE gives for the
 *    mirrored pixels), and training batches take it when the per-example draw says so. */
#include "test-util.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>
#include <gio/gio.h>

#include "data/augment.h"
#include "data/image-decode.h"
#include "data/latent-set.h"
#include "engine/base/fileio.h"
#include "engine/config/config.h"
#include "engine/model/data-source.h"
#include "engine/models/vae.h"

static const CohortVaeConfig small_vae = {
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
    .mid_block_add_attention = TRUE,
    .sample_size = 16,
};

static void die_with_parent(gpointer data)
{
  (void)data;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
}

/* `per_class` images of classes A, B, C of the colour set, into dir/{A,B,C}/. */
static void copy_images(const char *dir, int per_class)
{
  g_autofree char *src = cohort_resolve_path("builtin:colour-glyphs/train");
  if (!g_file_test(src, G_FILE_TEST_IS_DIR))
    g_error("%s: the build did not make the colour glyph set", src);
  const char *classes[] = {"A", "B", "C"};
  for (guint c = 0; c < G_N_ELEMENTS(classes); c++) {
    g_autofree char *to = g_build_filename(dir, classes[c], NULL);
    g_assert_cmpint(g_mkdir_with_parents(to, 0755), ==, 0);
    for (int i = 0; i < per_class; i++) {
      g_autofree char *name = g_strdup_printf("%04d.png", i);
      g_autofree char *a = g_build_filename(src, classes[c], name, NULL);
      g_autofree char *b = g_build_filename(to, name, NULL);
      g_autofree char *data = NULL;
      gsize len;
      g_assert_true(g_file_get_contents(a, &data, &len, NULL));
      g_assert_true(g_file_set_contents(b, data, (gssize)len, NULL));
    }
  }
}

static void save_vae(const CohortVaeConfig *cfg, int size, guint64 seed, const char *dir)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortVae) v =
      cohort_vae_new(cohort_backend_cpu(), cfg, COHORT_VAE_ENCODE, 1, size, seed, &error);
  g_assert_no_error(error);
  g_assert_true(cohort_vae_save(v, dir, &error));
}

typedef struct {
  char *root, *data, *vae;
  int size;
} Fixture;

static Fixture fixture(const char *name, int per_class, int size, const CohortVaeConfig *cfg)
{
  Fixture f = {.root = tu_mkdtemp(name), .size = size};
  f.data = g_build_filename(f.root, "data", NULL);
  f.vae = g_build_filename(f.root, "vae", NULL);
  copy_images(f.data, per_class);
  save_vae(cfg, size, 1, f.vae);
  return f;
}

static void fixture_clear(Fixture *f)
{
  tu_rm_rf(f->root);
  g_free(f->root), g_free(f->data), g_free(f->vae);
}

/* cohort-train on the fixture with `nproc` ranks and `extra` settings, into `ws`, progress events
 * to ws/progress.jsonl. Returns the process; *events gets that path. */
static GSubprocess *start(const Fixture *f, int nproc, const char *const *extra, const char *ws,
                          char **events)
{
  g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(argv, g_strdup(g_getenv("COHORT_TRAIN")));
  g_ptr_array_add(argv, g_strdup("--quiet"));
  g_ptr_array_add(argv, g_strdup("--overwrite"));
  g_ptr_array_add(argv, g_strdup("--progress-fd=3"));
  if (nproc > 1) {
    g_ptr_array_add(argv, g_strdup("--nproc"));
    g_ptr_array_add(argv, g_strdup_printf("%d", nproc));
  }
  const char *base[] = {"model=dit",        "data_format=images", "val_data=",     "patch_size=2",
                        "n_layer=1",        "n_head=2",           "n_embd=32",     "warmup_steps=1",
                        "eval_every=0",     "sample_every=0",     "save_every=0",  "threads=1",
                        "image_channels=3", "learning_rate=1e-3", "num_workers=0", NULL};
  g_autofree char *s_data = g_strdup_printf("train_data=%s", f->data);
  g_autofree char *s_vae = g_strdup_printf("vae_from=%s", f->vae);
  g_autofree char *s_size = g_strdup_printf("image_size=%d", f->size);
  g_autofree char *s_ws = g_strdup_printf("workspace_dir=%s", ws);
  const char *mine[] = {s_data, s_vae, s_size, s_ws, NULL};
  const char *const *lists[] = {base, mine, extra};
  for (guint l = 0; l < G_N_ELEMENTS(lists); l++)
    for (guint i = 0; lists[l] && lists[l][i]; i++) {
      g_ptr_array_add(argv, g_strdup("--set"));
      g_ptr_array_add(argv, g_strdup(lists[l][i]));
    }
  g_ptr_array_add(argv, NULL);
  g_mkdir_with_parents(ws, 0755);
  *events = g_build_filename(ws, "progress.jsonl", NULL);
  g_autoptr(GSubprocessLauncher) l =
      g_subprocess_launcher_new(G_SUBPROCESS_FLAGS_STDOUT_SILENCE | G_SUBPROCESS_FLAGS_STDERR_PIPE);
  g_subprocess_launcher_set_child_setup(l, die_with_parent, NULL, NULL);
  int fd = open(*events, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  g_assert_cmpint(fd, >=, 0);
  g_subprocess_launcher_take_fd(l, fd, 3);
  g_autoptr(GError) error = NULL;
  GSubprocess *p = g_subprocess_launcher_spawnv(l, (const char *const *)argv->pdata, &error);
  g_assert_no_error(error);
  return p;
}

static int finish(GSubprocess *p)
{
  g_autofree char *err = NULL;
  g_autoptr(GError) error = NULL;
  g_subprocess_communicate_utf8(p, NULL, NULL, NULL, &err, &error);
  g_assert_no_error(error);
  int status = g_subprocess_get_if_signaled(p) ? 128 + g_subprocess_get_term_sig(p)
                                               : g_subprocess_get_exit_status(p);
  if (status != 0)
    g_test_message("exit %d, stderr:\n%s", status, err);
  return status;
}

/* Runs to the end (exit 0 expected) and returns the last `latents` event of the training set. */
static JsonObject *train_ok(const Fixture *f, int nproc, const char *const *extra, const char *ws)
{
  g_autofree char *events = NULL;
  g_autoptr(GSubprocess) p = start(f, nproc, extra, ws, &events);
  g_assert_cmpint(finish(p), ==, 0);
  g_autoptr(GPtrArray) ev = tu_read_events(events);
  JsonObject *last = NULL;
  for (guint i = 0; i < ev->len; i++) {
    JsonObject *o = g_ptr_array_index(ev, i);
    if (g_str_equal(json_object_get_string_member(o, "event"), "latents") &&
        g_str_equal(json_object_get_string_member(o, "set"), "train"))
      last = o;
  }
  g_assert_nonnull(last);
  g_assert_true(json_object_get_boolean_member(last, "finished"));
  return json_object_ref(last);
}

static gint64 member(JsonObject *o, const char *name)
{
  return json_object_get_int_member(o, name);
}

/* The cache keys of every image of the fixture under its current VAE, in data set order. */
static GPtrArray *expected_keys(const Fixture *f, gboolean flipped)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortVae) v =
      cohort_vae_load(cohort_backend_cpu(), f->vae, COHORT_VAE_ENCODE, 1, f->size, &error);
  g_assert_no_error(error);
  g_autoptr(CohortLatentFiles) files = cohort_latent_files_scan(f->data, f->size, 3, FALSE, &error);
  g_assert_no_error(error);
  GPtrArray *keys = g_ptr_array_new_with_free_func((GDestroyNotify)g_bytes_unref);
  for (gsize i = 0; i < cohort_latent_files_len(files); i++) {
    guint8 content[32], key[32];
    g_assert_true(cohort_latent_files_read(files, i, content, NULL, &error));
    cohort_latent_key(content, cohort_vae_sha256(v), f->size, 3, flipped, key);
    g_ptr_array_add(keys, g_bytes_new(key, 32));
  }
  return keys;
}

static CohortLatentCache *open_cache(const char *ws, const char *sub, gsize floats)
{
  g_autofree char *path = sub ? g_build_filename(ws, "cache", sub, "latents-train.bin", NULL)
                              : g_build_filename(ws, "cache", "latents-train.bin", NULL);
  g_assert_true(g_file_test(path, G_FILE_TEST_IS_REGULAR));
  g_autoptr(GError) error = NULL;
  CohortLatentCache *c = cohort_latent_cache_open(path, floats, &error);
  g_assert_no_error(error);
  return c;
}

/* Rank r's cache holds exactly the keys of the images i with i mod 2 = r. */
static void check_shares(const Fixture *f, const char *ws, gsize floats)
{
  g_autoptr(GPtrArray) keys = expected_keys(f, FALSE);
  for (int r = 0; r < 2; r++) {
    g_autofree char *sub = g_strdup_printf("rank-%d", r);
    g_autoptr(CohortLatentCache) c = open_cache(ws, sub, floats);
    guint mine = 0;
    for (guint i = 0; i < keys->len; i++) {
      gboolean has = cohort_latent_cache_lookup(c, g_bytes_get_data(keys->pdata[i], NULL)) != NULL;
      g_assert_true(has == ((int)(i % 2) == r));
      mine += has;
    }
    g_assert_cmpuint(mine, ==, (keys->len + 1 - (guint)r) / 2);
    g_assert_cmpuint(cohort_latent_cache_count(c), ==, mine);
  }
}

/* Rewrites image `rel` of the fixture with its colours inverted (another content). */
static void change_image(const Fixture *f, const char *rel)
{
  g_autofree char *path = g_build_filename(f->data, rel, NULL);
  CohortRawImage img;
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_image_load(path, 3, &img, &error));
  for (int i = 0; i < img.width * img.height * 3; i++)
    img.pixels[i] = (guint8)(255 - img.pixels[i]);
  g_assert_true(cohort_image_write_png(path, img.pixels, img.width, img.height, 3, &error));
  cohort_raw_image_clear(&img);
}

static void test_shares_and_changes(void)
{
  Fixture f = fixture("latents-shares", 6, 16, &small_vae);
  g_autofree char *ws = g_build_filename(f.root, "ws", NULL);
  gsize floats = 4 * 8 * 8;
  const char *ddl[] = {"distributed_data_loading=true", "batch_size=2", "max_steps=1", NULL};
  g_autoptr(JsonObject) a = train_ok(&f, 2, ddl, ws);
  g_assert_cmpint(member(a, "total"), ==, 18);
  g_assert_cmpint(member(a, "done"), ==, 18);
  g_assert_cmpint(member(a, "encoded"), ==, 18);
  check_shares(&f, ws, floats);
  /* an unchanged set: nothing to encode */
  g_autoptr(JsonObject) same = train_ok(&f, 2, ddl, ws);
  g_assert_cmpint(member(same, "encoded"), ==, 0);
  /* image 7 (B/0001.png, rank 1's): encoded again, alone */
  change_image(&f, "B/0001.png");
  g_autoptr(JsonObject) b = train_ok(&f, 2, ddl, ws);
  g_assert_cmpint(member(b, "encoded"), ==, 1);
  g_autoptr(GPtrArray) keys = expected_keys(&f, FALSE);
  g_autoptr(CohortLatentCache) r1 = open_cache(ws, "rank-1", floats);
  g_assert_nonnull(cohort_latent_cache_lookup(r1, g_bytes_get_data(keys->pdata[7], NULL)));
  /* another VAE: everything again, and the old records are compacted away */
  save_vae(&small_vae, 16, 2, f.vae);
  g_autoptr(JsonObject) c = train_ok(&f, 2, ddl, ws);
  g_assert_cmpint(member(c, "encoded"), ==, 18);
  check_shares(&f, ws, floats);
  fixture_clear(&f);
}

static void test_n_ranks_equal_one(void)
{
  Fixture f = fixture("latents-ranks", 4, 16, &small_vae);
  const int steps = 4;
  const double lr = 1e-3;
  struct {
    int nproc;
    const char *batch, *ddl;
  } runs[] = {{1, "batch_size=4", "distributed_data_loading=false"},
              {2, "batch_size=2", "distributed_data_loading=true"},
              {2, "batch_size=2", "distributed_data_loading=false"}};
  g_autoptr(GArray) w1 = NULL;
  for (guint k = 0; k < G_N_ELEMENTS(runs); k++) {
    g_autofree char *ws = g_strdup_printf("%s/ws-%u", f.root, k);
    const char *extra[] = {runs[k].batch, runs[k].ddl, "max_steps=4", NULL};
    g_autoptr(JsonObject) last = train_ok(&f, runs[k].nproc, extra, ws);
    g_assert_cmpint(member(last, "done"), ==, 12);
    g_autofree char *model = g_build_filename(ws, "model.safetensors", NULL);
    GArray *w = tu_read_weights(model);
    if (k == 0) {
      w1 = w;
      continue;
    }
    double worst = 0;
    for (guint i = 0; i < w->len; i++)
      worst = fmax(worst, fabs(g_array_index(w, float, i) - g_array_index(w1, float, i)));
    g_test_message("%d ranks, %s: max |Δw| against one process %.3g (tolerance %.3g)",
                   runs[k].nproc, runs[k].ddl, worst, 1e-3 * lr * steps);
    g_assert_cmpfloat(worst, <=, 1e-3 * lr * steps);
    g_array_unref(w);
    /* without distributed_data_loading rank 0 alone has a cache */
    g_autofree char *r1 = g_build_filename(ws, "cache", "rank-1", NULL);
    g_assert_true(g_file_test(r1, G_FILE_TEST_IS_DIR) == (g_str_has_suffix(runs[k].ddl, "true")));
  }
  /* the runs trained: one step leaves the weights far from four */
  g_autofree char *ws0 = g_strdup_printf("%s/ws-one-step", f.root);
  g_autoptr(JsonObject) one =
      train_ok(&f, 1, (const char *[]){"batch_size=4", "max_steps=1", NULL}, ws0);
  g_autofree char *m0 = g_build_filename(ws0, "model.safetensors", NULL);
  g_autoptr(GArray) w0 = tu_read_weights(m0);
  double moved = 0;
  for (guint i = 0; i < w0->len; i++)
    moved = fmax(moved, fabs(g_array_index(w0, float, i) - g_array_index(w1, float, i)));
  g_assert_cmpfloat(moved, >, 100 * 1e-3 * lr * steps);
  fixture_clear(&f);
}

/* A heavier VAE on 64-pixel images: caching takes seconds. */
static const CohortVaeConfig slow_vae = {
    .in_channels = 3,
    .out_channels = 3,
    .n_blocks = 2,
    .block_out_channels = {32, 64},
    .layers_per_block = 2,
    .latent_channels = 4,
    .norm_num_groups = 8,
    .scaling_factor = 1.0,
    .use_quant_conv = TRUE,
    .use_post_quant_conv = TRUE,
    .mid_block_add_attention = TRUE,
    .sample_size = 64,
};

static void test_no_collective_timeout(void)
{
  /* 100 images a class: about 5 s of caching here when idle, over twice timeout_s */
  Fixture f = fixture("latents-wait", 100, 64, &slow_vae);
  g_autofree char *ws = g_build_filename(f.root, "ws", NULL);
  const char *extra[] = {"distributed_data_loading=false",
                         "batch_size=2",
                         "max_steps=1",
                         "timeout_s=2",
                         "patch_size=8",
                         NULL};
  g_autoptr(JsonObject) last = train_ok(&f, 2, extra, ws);
  double secs = json_object_get_double_member(last, "elapsed_s");
  g_test_message("rank 0 cached alone for %.1f s with timeout_s 2", secs);
  g_assert_cmpfloat(secs, >, 2.0);
  g_assert_cmpint(member(last, "encoded"), ==, 300);
  fixture_clear(&f);
}

/* Waits until the events file shows a training `latents` event with done >= n. */
static void wait_for_progress(const char *events, gint64 n)
{
  for (int tries = 0; tries < 6000; tries++) {
    g_autofree char *text = NULL;
    if (g_file_get_contents(events, &text, NULL, NULL)) {
      g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
      for (guint i = 0; lines[i]; i++) {
        g_autoptr(JsonNode) node = json_from_string(lines[i], NULL);
        if (!node || !JSON_NODE_HOLDS_OBJECT(node))
          continue;
        JsonObject *o = json_node_get_object(node);
        if (g_strcmp0(json_object_get_string_member_with_default(o, "event", ""), "latents") == 0 &&
            json_object_get_int_member_with_default(o, "done", 0) >= n)
          return;
      }
    }
    g_usleep(10000);
  }
  g_error("%s: no latents progress to %" G_GINT64_FORMAT " images", events, n);
}

static guint records(const char *ws)
{
  g_autoptr(CohortLatentCache) c = open_cache(ws, NULL, 4 * 32 * 32);
  return cohort_latent_cache_count(c);
}

static void test_stop_and_resume(void)
{
  /* 100 images a class (about 5 s of caching when idle), so a stop lands part way */
  Fixture f = fixture("latents-resume", 100, 64, &slow_vae);
  g_autofree char *ws = g_build_filename(f.root, "ws", NULL);
  const char *extra[] = {"batch_size=2", "max_steps=1", "patch_size=8", NULL};
  /* SIGTERM: a stop, not a failure */
  g_autofree char *events = NULL;
  g_autoptr(GSubprocess) p = start(&f, 1, extra, ws, &events);
  wait_for_progress(events, 4);
  g_subprocess_send_signal(p, SIGTERM);
  g_assert_cmpint(finish(p), ==, 143);
  g_autoptr(GPtrArray) ev = tu_read_events(events);
  JsonObject *done = g_ptr_array_index(ev, ev->len - 1);
  g_assert_cmpstr(json_object_get_string_member(done, "event"), ==, "done");
  g_assert_cmpstr(json_object_get_string_member(done, "status"), ==, "stopped");
  guint k1 = records(ws);
  g_test_message("stopped with %u of 300 latents cached", k1);
  g_assert_cmpuint(k1, >=, 4);
  g_assert_cmpuint(k1, <, 300);
  /* SIGKILL: the journal keeps what it holds, a torn record at most is cut */
  g_autofree char *events2 = NULL;
  g_autoptr(GSubprocess) q = start(&f, 1, extra, ws, &events2);
  wait_for_progress(events2, k1 + 4);
  g_subprocess_force_exit(q);
  g_assert_cmpint(finish(q), ==, 128 + SIGKILL);
  guint k2 = records(ws);
  g_test_message("killed with %u of 300 latents cached", k2);
  g_assert_cmpuint(k2, >, k1);
  g_autoptr(JsonObject) last = train_ok(&f, 1, extra, ws);
  g_assert_cmpint(member(last, "encoded"), ==, 300 - (gint64)k2);
  g_assert_cmpuint(records(ws), ==, 300);
  fixture_clear(&f);
}

static void test_flip(void)
{
  Fixture f = fixture("latents-flip", 3, 16, &small_vae);
  g_autofree char *ws = g_build_filename(f.root, "ws", NULL);
  const char *extra[] = {"augment=flip", "batch_size=3", "max_steps=2", NULL};
  g_autoptr(JsonObject) last = train_ok(&f, 1, extra, ws);
  g_assert_cmpint(member(last, "encoded"), ==, 9);
  gsize floats = 4 * 8 * 8;
  g_autoptr(CohortLatentCache) c = open_cache(ws, NULL, floats);
  g_assert_cmpuint(cohort_latent_cache_count(c), ==, 18);
  /* the flipped record of image 4 is the VAE's latent of the mirrored pixels */
  g_autoptr(GPtrArray) flipped = expected_keys(&f, TRUE);
  const float *rec = cohort_latent_cache_lookup(c, g_bytes_get_data(flipped->pdata[4], NULL));
  g_assert_nonnull(rec);
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortVae) v =
      cohort_vae_load(cohort_backend_cpu(), f.vae, COHORT_VAE_ENCODE, 1, 16, &error);
  g_autoptr(CohortLatentFiles) files = cohort_latent_files_scan(f.data, 16, 3, FALSE, &error);
  float px[3 * 16 * 16], mirrored[3 * 16 * 16], lat[4 * 8 * 8];
  guint8 content[32];
  g_assert_true(cohort_latent_files_read(files, 4, content, px, &error));
  cohort_latent_hflip(px, 3, 16, 16, mirrored);
  cohort_vae_encode(v, mirrored, 1, lat);
  for (gsize i = 0; i < floats; i++)
    g_assert_cmpfloat_with_epsilon(rec[i], lat[i], 1e-6);
  /* the data source: training rows take the mirrored latent when the draw says so */
  g_autoptr(CohortConfig) cfg = cohort_config_new();
  cfg->augment = COHORT_AUGMENT_FLIP;
  cfg->seed = 7;
  CohortLatentTable *t = g_new0(CohortLatentTable, 1);
  *t = (CohortLatentTable){.n = 40,
                           .variants = 2,
                           .channels = 1,
                           .size = 1,
                           .values = g_new(float, 80),
                           .labels = g_new0(int, 40),
                           .classes = g_new0(char *, 1)};
  for (int i = 0; i < 80; i++)
    t->values[i] = (float)i;
  g_autoptr(CohortDataSource) ds = cohort_data_source_new_latents(cfg, t);
  g_autoptr(CohortBatch) b = cohort_data_source_batch_new(ds, 1);
  int mirrored_rows = 0;
  for (int i = 0; i < 40; i++) {
    int top, left;
    gboolean flip;
    cohort_augment_draw(COHORT_AUGMENT_FLIP, 7, 3, (guint64)i, &top, &left, &flip);
    b->epoch = 3;
    g_assert_true(cohort_data_source_load(ds, b, 0, (guint64)i, NULL));
    g_assert_cmpfloat(b->images[0], ==, (float)(2 * i + (flip ? 1 : 0)));
    mirrored_rows += flip;
    b->epoch = -1; /* evaluation: never mirrored */
    g_assert_true(cohort_data_source_load(ds, b, 0, (guint64)i, NULL));
    g_assert_cmpfloat(b->images[0], ==, (float)(2 * i));
  }
  g_assert_cmpint(mirrored_rows, >, 5);
  g_assert_cmpint(mirrored_rows, <, 35);
  fixture_clear(&f);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  cohort_backend_cpu()->set_threads(1);
  g_test_add_func("/latents/shares-and-changes", test_shares_and_changes);
  g_test_add_func("/latents/n-ranks-equal-one", test_n_ranks_equal_one);
  g_test_add_func("/latents/no-collective-timeout", test_no_collective_timeout);
  g_test_add_func("/latents/stop-and-resume", test_stop_and_resume);
  g_test_add_func("/latents/flip", test_flip);
  return g_test_run();
}

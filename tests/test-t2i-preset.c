/* The tiny-t2i preset (suite dist): the built-in captioned glyph set (builtin:t2i-glyphs, a
 * capital in one of eight named colours, "red A", 64 captions) and a text-conditioned DiT that
 * must read the caption as a whole to draw it: 2 ranks as `make run PRESET=tiny-t2i` runs it,
 * then `cohort-train --sample` with captions of the validation set. The proof that samples
 * follow their prompts: for each sample, the nearest validation image (sum of squared pixel
 * differences) carries the asked caption far more often than chance (1 in 64: every caption
 * has the same number of validation images); the goal of issue 39 is 8× chance.
 *
 * make check trains COHORT_T2I_STEPS steps (default below) rather than the preset's schedule,
 * to stay in its time; bench/run-t2i-preset runs this program with COHORT_T2I_STEPS=preset, the
 * whole schedule, for the figure docs/benchmarks.md gives. COHORT_T2I_MODEL=WS scores a run
 * made elsewhere (`make run PRESET=tiny-t2i` leaves runs/tiny-t2i) without training;
 * COHORT_T2I_GRID=FILE keeps the sample grid. */
#include "test-util.h"

#include <signal.h>
#include <sys/prctl.h>
#include <gio/gio.h>

#include "data/image-decode.h"
#include "engine/config/config.h"

/* Steps make check trains (of the preset's 1500); enough for the samples to pass the bound. */
#define CHECK_STEPS "600"
#define COLOURS     8
#define GLYPHS      8
#define CAPTIONS    (COLOURS * GLYPHS)
#define CELLS       8 /* samples per prompt: a grid row */

/* Prompts of the validation set: each colour and each capital twice, in pairs that differ in
 * both from the row above (so neither attribute alone can score). */
static const char *const prompts[] = {
    "red A", "orange B", "yellow C", "green E", "cyan H", "blue O", "magenta S", "white T",
    "red H", "orange O", "yellow S", "green T", "cyan A", "blue B", "magenta C", "white E",
};

static void die_with_parent(gpointer data)
{
  (void)data;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
}

static void run(const char *const *argv)
{
  g_autoptr(GSubprocessLauncher) l =
      g_subprocess_launcher_new(G_SUBPROCESS_FLAGS_STDOUT_SILENCE | G_SUBPROCESS_FLAGS_STDERR_PIPE);
  g_subprocess_launcher_set_child_setup(l, die_with_parent, NULL, NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(GSubprocess) p = g_subprocess_launcher_spawnv(l, argv, &error);
  g_assert_no_error(error);
  g_autofree char *err = NULL;
  g_subprocess_communicate_utf8(p, NULL, NULL, NULL, &err, &error);
  g_assert_no_error(error);
  if (g_subprocess_get_exit_status(p) != 0)
    g_test_message("%s exited %d: %s", argv[1], g_subprocess_get_exit_status(p), err);
  g_assert_cmpint(g_subprocess_get_exit_status(p), ==, 0);
}

typedef struct {
  GPtrArray *captions; /* per image */
  GArray *pixels;      /* guint8, RGB, image after image */
  int side;
} ImageSet;

/* The images of a split of the captioned set, with their captions. */
static void read_split(const char *split, ImageSet *s)
{
  g_autofree char *rel = g_strdup_printf("builtin:t2i-glyphs/%s", split);
  g_autofree char *dir = cohort_resolve_path(rel);
  g_autoptr(GError) error = NULL;
  s->captions = g_ptr_array_new_with_free_func(g_free);
  s->pixels = g_array_new(FALSE, FALSE, 1);
  for (int i = 0;; i++) {
    g_autofree char *png = g_strdup_printf("%s/%04d.png", dir, i);
    g_autofree char *txt = g_strdup_printf("%s/%04d.txt", dir, i);
    if (!g_file_test(png, G_FILE_TEST_EXISTS))
      break;
    char *caption = NULL;
    g_assert_true(g_file_get_contents(txt, &caption, NULL, &error));
    g_ptr_array_add(s->captions, caption);
    CohortRawImage img = {0};
    g_assert_true(cohort_image_load(png, 3, &img, &error));
    g_assert_cmpint(img.width, ==, img.height);
    s->side = img.width;
    g_array_append_vals(s->pixels, img.pixels, (guint)(img.width * img.height * 3));
    cohort_raw_image_clear(&img);
  }
}

static void clear_split(ImageSet *s)
{
  g_ptr_array_unref(s->captions);
  g_array_unref(s->pixels);
}

/* The set as the build renders it: 64 captions "<colour> <capital>", each with the same number
 * of images in a split, and the preset's image size. */
static void test_set(void)
{
  const char *splits[] = {"train", "val"};
  const int per_caption[] = {12, 2};
  for (int k = 0; k < 2; k++) {
    ImageSet s;
    read_split(splits[k], &s);
    g_assert_cmpint(s.captions->len, ==, CAPTIONS * per_caption[k]);
    g_autoptr(GHashTable) counts = g_hash_table_new(g_str_hash, g_str_equal);
    for (guint i = 0; i < s.captions->len; i++) {
      const char *c = g_ptr_array_index(s.captions, i);
      g_assert_nonnull(strchr(c, ' '));
      gpointer n = g_hash_table_lookup(counts, c);
      g_hash_table_insert(counts, (gpointer)c, GINT_TO_POINTER(GPOINTER_TO_INT(n) + 1));
    }
    g_assert_cmpint(g_hash_table_size(counts), ==, CAPTIONS);
    for (guint p = 0; p < G_N_ELEMENTS(prompts); p++)
      g_assert_cmpint(GPOINTER_TO_INT(g_hash_table_lookup(counts, prompts[p])), ==, per_caption[k]);
    clear_split(&s);
  }
}

/* Index of the image of `set` nearest to the side×side RGB cell at (x0, y0) of `grid`. */
static guint nearest(const ImageSet *set, const CohortRawImage *grid, int x0, int y0)
{
  int side = set->side;
  size_t n = (size_t)side * side * 3;
  guint best = 0;
  double best_d = INFINITY;
  for (guint i = 0; i < set->captions->len; i++) {
    const guint8 *img = (const guint8 *)set->pixels->data + i * n;
    double d = 0;
    for (int y = 0; y < side; y++)
      for (int x = 0; x < side * 3; x++) {
        double v = grid->pixels[(size_t)(y0 + y) * grid->width * 3 + x0 * 3 + x];
        double e = v - img[(size_t)y * side * 3 + x];
        d += e * e;
      }
    if (d < best_d)
      best_d = d, best = i;
  }
  return best;
}

static void test_prompts(void)
{
  const char *train = g_getenv("COHORT_TRAIN");
  const char *steps = g_getenv("COHORT_T2I_STEPS");
  const char *given = g_getenv("COHORT_T2I_MODEL");
  if (!steps || !*steps)
    steps = CHECK_STEPS;
  g_autofree char *ws = tu_mkdtemp("t2i-preset");
  g_autofree char *model = given ? g_strdup(given) : g_strdup_printf("%s/run", ws);
  g_autofree char *s_ws = g_strdup_printf("workspace_dir=%s", model);
  g_autofree char *s_steps = g_strdup_printf("max_steps=%s", steps);
  gboolean whole = g_str_equal(steps, "preset");
  const char *argv[] = {train,
                        "--preset",
                        "tiny-t2i",
                        "--nproc",
                        "2",
                        "--set",
                        s_ws,
                        "--set",
                        "threads=1",
                        "--set",
                        "eval_every=0",
                        "--set",
                        "sample_every=0",
                        whole ? NULL : "--set",
                        s_steps,
                        NULL};
  gint64 t0 = g_get_monotonic_time();
  if (!given)
    run(argv);
  double train_s = (g_get_monotonic_time() - t0) / 1e6;

  g_autoptr(GString) s_prompts = g_string_new("sample_prompts=");
  for (guint p = 0; p < G_N_ELEMENTS(prompts); p++)
    g_string_append_printf(s_prompts, "%s%s", p ? "|" : "", prompts[p]);
  g_autofree char *grid_path = g_getenv("COHORT_T2I_GRID") ? g_strdup(g_getenv("COHORT_T2I_GRID"))
                                                           : g_build_filename(ws, "grid.png", NULL);
  const char *sample[] = {train, "--sample", model, "--set", s_prompts->str, "-o", grid_path, NULL};
  run(sample);

  ImageSet val;
  read_split("val", &val);
  CohortRawImage grid = {0};
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_image_load(grid_path, 3, &grid, &error));
  int side = val.side, n_prompts = G_N_ELEMENTS(prompts);
  g_assert_cmpint(grid.width, ==, CELLS * side + (CELLS + 1) * 2);
  g_assert_cmpint(grid.height, ==, n_prompts * side + (n_prompts + 1) * 2);
  int both = 0, colour = 0, glyph = 0, n = 0;
  for (int r = 0; r < n_prompts; r++)
    for (int c = 0; c < CELLS; c++, n++) {
      guint k = nearest(&val, &grid, 2 + c * (side + 2), 2 + r * (side + 2));
      const char *got = g_ptr_array_index(val.captions, k), *want = prompts[r];
      const char *got_sp = strchr(got, ' '), *want_sp = strchr(want, ' ');
      both += g_str_equal(got, want);
      colour += got_sp - got == want_sp - want && strncmp(got, want, (size_t)(got_sp - got)) == 0;
      glyph += g_str_equal(got_sp, want_sp);
    }
  double times = (double)both / n * CAPTIONS;
  /* The metric's ceiling: real training images scored the same way (their nearest validation
   * image is another image of the caption unless shape jitter and faces make another caption's
   * nearer). */
  ImageSet tr;
  read_split("train", &tr);
  CohortRawImage one = {.width = side, .height = side, .channels = 3};
  int real = 0;
  for (guint i = 0; i < tr.captions->len; i++) {
    one.pixels = (guint8 *)tr.pixels->data + (size_t)i * side * side * 3;
    guint k = nearest(&val, &one, 0, 0);
    real += g_str_equal(g_ptr_array_index(val.captions, k), g_ptr_array_index(tr.captions, i));
  }
  g_test_message("real training images: %d of %u, %.1f times chance", real, tr.captions->len,
                 (double)real / tr.captions->len * CAPTIONS);
  clear_split(&tr);
  g_test_message(
      "tiny-t2i (%s), %s steps on 2 ranks in %.0f s: the nearest validation image carries "
      "the asked caption for %d of %d samples, %.1f times chance (1 in %d); the colour "
      "for %d (chance 1 in %d), the capital for %d (chance 1 in %d)",
      given ? given : "trained here", given ? "its" : steps, train_s, both, n, times, CAPTIONS,
      colour, COLOURS, glyph, GLYPHS);
  g_assert_cmpfloat(times, >=, 8.0);
  cohort_raw_image_clear(&grid);
  clear_split(&val);
  tu_rm_rf(ws);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/t2i-preset/set", test_set);
  g_test_add_func("/t2i-preset/prompts", test_prompts);
  return g_test_run();
}

/* Fuzzing the newer surface of cohort-train with the inputs issue 20 found crashing, hanging
 * or costing without bound, and their neighbours (see fuzz-util.h for the rules):
 *  - teacher folders: cohort-config.json, config.json, classes.json and model.safetensors as
 *    FIFOs, as a link to /dev/zero, or nested a million deep; each refused in one line naming
 *    the file, without waiting or reading for ever;
 *  - --sample: a model folder whose classes.json is deep or a FIFO, and -o onto a FIFO or into
 *    a folder that does not exist;
 *  - control channels: /dev/zero, the run's own events.jsonl (refused), a watcher that writes
 *    garbage without end (the run finishes, its events stay small);
 *  - image folders: a 16384² grey decompression bomb, a 1 × 16384 sliver, a progressive JPEG
 *    claiming 16384², PNGs with a zTXt bomb and a 40 MiB text chunk, names that are not
 *    UTF-8, random byte flips of a good PNG and JPEG;
 *  - the saved inputs in tests/fuzz/regressions/images/ (each alone in a class folder).
 * The suite runs with G_DEBUG=fatal-criticals: a GLib critical anywhere is a crash. */
#include <json-glib/json-glib.h>
#include <sys/stat.h>

#include "fuzz-util.h"
#include "image-fixtures.h"

#define DEEP 1000000

typedef struct {
  FuzzTally t;
  FuzzRng rng;
} Ctx;

static const char *const gpt_sets[] = {
    "--quiet",        "--set", "n_layer=1",    "--set", "n_head=1",     "--set",
    "n_embd=8",       "--set", "seq_len=8",    "--set", "batch_size=1", "--set",
    "warmup_steps=0", "--set", "eval_every=0", "--set", "eval_steps=1", "--set",
    "sample_every=0", "--set", "threads=1",    "--set", "val_data=",    "--set",
    "save_every=0",   "--set", "max_steps=2",  NULL};

static const char *const image_sets[] = {
    "--quiet",      "--set", "model=resnet",  "--set", "data_format=images", "--set",
    "image_size=8", "--set", "n_layer=8",     "--set", "resnet_width=4",     "--set",
    "batch_size=1", "--set", "optimizer=sgd", "--set", "warmup_steps=0",     "--set",
    "eval_every=0", "--set", "eval_steps=1",  "--set", "sample_every=0",     "--set",
    "threads=1",    "--set", "val_data=",     "--set", "save_every=0",       "--set",
    "max_steps=1",  NULL};

/* args = `base`, then "--set KEY=VALUE" for each of `sets` (pairs), then `flags`. */
static GPtrArray *args_of(const char *const *base, const char *const *sets,
                          const char *const *flags)
{
  GPtrArray *a = g_ptr_array_new_with_free_func(g_free);
  for (guint i = 0; base && base[i]; i++)
    g_ptr_array_add(a, g_strdup(base[i]));
  for (guint i = 0; sets && sets[i]; i += 2) {
    g_ptr_array_add(a, g_strdup("--set"));
    g_ptr_array_add(a, g_strdup_printf("%s=%s", sets[i], sets[i + 1]));
  }
  for (guint i = 0; flags && flags[i]; i++)
    g_ptr_array_add(a, g_strdup(flags[i]));
  g_ptr_array_add(a, NULL);
  return a;
}

/* Runs a case and judges it: the error must name `culprit`. */
static gboolean run_case(Ctx *c, const char *path, const char *culprit, FuzzExpect expect,
                         GPtrArray *args, int fd4)
{
  /* The run's own deadline judges a hang (no in-process watchdog: nothing runs in here). */
  FuzzRun r = fuzz_run_train_with((const char *const *)args->pdata, NULL, 60 * fuzz_time_scale(),
                                  fd4, NULL);
  gboolean ok = fuzz_judge_run(&c->t, path, culprit, expect, &r);
  fuzz_run_clear(&r);
  return ok;
}

static void write_deep(const char *path, const char *prefix, const char *suffix)
{
  GString *s = g_string_new(prefix);
  for (int i = 0; i < DEEP; i++)
    g_string_append_c(s, '[');
  for (int i = 0; i < DEEP; i++)
    g_string_append_c(s, ']');
  g_string_append(s, suffix);
  fuzz_write(path, s->str, s->len);
  g_string_free(s, TRUE);
}

static void save_config(const char *path, const char *const *sets)
{
  g_autofree char *json = g_strdup("{\"version\": 1");
  for (guint i = 0; sets && sets[i]; i += 2) {
    char *more = g_strdup_printf("%s, \"%s\": %s", json, sets[i], sets[i + 1]);
    g_free(json);
    json = more;
  }
  g_autofree char *text = g_strconcat(json, "}\n", NULL);
  fuzz_write(path, text, strlen(text));
}

/* A folder of `n` good 8x8 images in classes a and b; returns it. */
static char *image_folder(const char *root, int n)
{
  char *dir = g_build_filename(root, "images", NULL);
  for (int i = 0; i < n; i++) {
    g_autofree char *cls = g_build_filename(dir, i % 2 ? "b" : "a", NULL);
    g_assert_cmpint(g_mkdir_with_parents(cls, 0755), ==, 0);
    g_autofree char *p = g_strdup_printf("%s/good-%d.png", cls, i);
    guint8 px[8 * 8 * 3];
    fx_fill(px, sizeof px, (guint32)i + 1);
    fx_write_png8(p, 8, 8, 3, px);
  }
  return dir;
}

/* ---- teacher folders ---- */

typedef enum { STUDENT_GPT, STUDENT_IMAGES } Student;

/* Trains a student on teacher folder `teacher`; the error must name `culprit`. */
static void teacher_case(Ctx *c, const char *teacher, Student who, const char *culprit)
{
  g_autofree char *ws = g_strconcat(teacher, ".ws", NULL);
  g_autofree char *data = who == STUDENT_IMAGES ? image_folder(ws, 4) : NULL;
  const char *sets[] = {
      "teacher_from", teacher, "workspace_dir", ws, who == STUDENT_IMAGES ? "train_data" : NULL,
      data,           NULL};
  g_autoptr(GPtrArray) args = args_of(who == STUDENT_IMAGES ? image_sets : gpt_sets, sets, NULL);
  run_case(c, teacher, culprit, FUZZ_REFUSE, args, -1);
}

static const char *const gpt_teacher_cfg[] = {"model",  "\"gpt\"", "n_layer", "1", "n_head", "1",
                                              "n_embd", "8",       "seq_len", "8", NULL};
static const char *const image_teacher_cfg[] = {
    "model",   "\"resnet\"", "data_format",  "\"images\"", "image_size", "8",
    "n_layer", "8",          "resnet_width", "4",          NULL};

static void gen_teachers(Ctx *c)
{
  const char *kinds[] = {"cfg-fifo",     "cfg-deep",     "hf-fifo",      "hf-deep",
                         "classes-fifo", "classes-zero", "classes-deep", "weights-fifo"};
  for (guint k = 0; k < G_N_ELEMENTS(kinds); k++) {
    g_autofree char *name = g_strdup_printf("teacher-%s", kinds[k]);
    g_autofree char *dir = fuzz_case_path(&c->t, name);
    g_assert_cmpint(g_mkdir(dir, 0755), ==, 0);
    g_autofree char *cfg = g_build_filename(dir, "cohort-config.json", NULL);
    g_autofree char *hf = g_build_filename(dir, "config.json", NULL);
    g_autofree char *classes = g_build_filename(dir, "classes.json", NULL);
    g_autofree char *weights = g_build_filename(dir, "model.safetensors", NULL);
    const char *culprit = NULL;
    Student who = STUDENT_GPT;
    if (k == 0 || k == 1) {
      culprit = cfg;
      if (k == 0)
        g_assert_cmpint(mkfifo(cfg, 0600), ==, 0);
      else
        write_deep(cfg, "{\"version\": 1, \"device_indexes\": ", "}");
    } else if (k == 2 || k == 3) {
      culprit = hf;
      if (k == 2)
        g_assert_cmpint(mkfifo(hf, 0600), ==, 0);
      else
        write_deep(hf, "{\"model_type\": \"gpt2\", \"x\": ", "}");
    } else if (k <= 6) {
      culprit = classes;
      who = STUDENT_IMAGES;
      save_config(cfg, image_teacher_cfg);
      if (k == 4)
        g_assert_cmpint(mkfifo(classes, 0600), ==, 0);
      else if (k == 5)
        g_assert_cmpint(symlink("/dev/zero", classes), ==, 0);
      else
        write_deep(classes, "{\"classes\": ", "}");
    } else {
      culprit = weights;
      save_config(cfg, gpt_teacher_cfg);
      g_assert_cmpint(mkfifo(weights, 0600), ==, 0);
    }
    teacher_case(c, dir, who, culprit);
  }
}

/* ---- --sample ---- */

static void gen_samples(Ctx *c)
{
  static const char *const dit_cfg[] = {
      "model",   "\"dit\"", "data_format", "\"images\"", "image_size", "8", "patch_size", "4",
      "n_layer", "1",       "n_head",      "1",          "n_embd",     "8", NULL};
  for (int k = 0; k < 4; k++) {
    const char *names[] = {"sample-classes-deep", "sample-classes-fifo", "sample-out-fifo",
                           "sample-out-missing-folder"};
    g_autofree char *dir = fuzz_case_path(&c->t, names[k]);
    g_assert_cmpint(g_mkdir(dir, 0755), ==, 0);
    g_autofree char *cfg = g_build_filename(dir, "cohort-config.json", NULL);
    save_config(cfg, dit_cfg);
    g_autofree char *classes = g_build_filename(dir, "classes.json", NULL);
    g_autofree char *out = g_strconcat(dir, k == 3 ? "/missing/grid.png" : ".png", NULL);
    const char *culprit = classes;
    if (k == 0)
      write_deep(classes, "{\"classes\": ", "}");
    else if (k == 1)
      g_assert_cmpint(mkfifo(classes, 0600), ==, 0);
    else if (k == 2)
      g_assert_cmpint(mkfifo(out, 0600), ==, 0);
    if (k >= 2)
      culprit = out;
    const char *flags[] = {"--sample", dir, "-o", out, NULL};
    g_autoptr(GPtrArray) args = args_of(NULL, NULL, flags);
    run_case(c, dir, culprit, FUZZ_REFUSE, args, -1);
  }
}

/* ---- control channels ---- */

static gpointer garbage_writer(gpointer data)
{
  int fd = GPOINTER_TO_INT(data);
  char block[4096];
  for (gsize i = 0; i < sizeof block; i += 8)
    memcpy(block + i, "garbage\n", 8);
  while (write(fd, block, sizeof block) > 0)
    ;
  close(fd);
  return NULL;
}

static void gen_control(Ctx *c)
{
  const char *names[] = {"control-dev-zero", "control-own-events", "control-garbage"};
  for (guint k = 0; k < G_N_ELEMENTS(names); k++) {
    g_autofree char *ws = fuzz_case_path(&c->t, names[k]);
    g_assert_cmpint(g_mkdir(ws, 0755), ==, 0);
    g_autofree char *events = g_build_filename(ws, "events.jsonl", NULL);
    fuzz_write(events, "", 0);
    const char *sets[] = {"workspace_dir", ws, "max_steps", "30", NULL};
    const char *flags[] = {"--control-fd", "4", NULL};
    g_autoptr(GPtrArray) args = args_of(gpt_sets, sets, flags);
    int fd = -1;
    GThread *writer = NULL;
    if (k == 0) {
      fd = open("/dev/zero", O_RDONLY | O_CLOEXEC);
    } else if (k == 1) {
      fd = open(events, O_RDONLY | O_CLOEXEC);
    } else {
      int p[2];
      g_assert_cmpint(pipe2(p, O_CLOEXEC), ==, 0);
      fd = p[0];
      writer = g_thread_new("garbage", garbage_writer, GINT_TO_POINTER(p[1]));
    }
    gboolean accepted =
        run_case(c, ws, "--control-fd 4", k == 2 ? FUZZ_ACCEPT : FUZZ_REFUSE, args, fd);
    if (writer)
      g_thread_join(writer);
    GStatBuf st;
    if (accepted && g_stat(events, &st) == 0 && st.st_size > (1 << 20))
      fuzz_fail(&c->t, ws,
                "a flood on the control channel made events.jsonl %" G_GINT64_FORMAT " bytes",
                (gint64)st.st_size);
  }
}

/* ---- image folders ---- */

/* Trains on a folder holding `file` (already written into its class folder "a", beside one
 * good image in "b"). */
static void image_case(Ctx *c, const char *folder, const char *culprit, FuzzExpect expect,
                       const char *const *extra_sets)
{
  g_autofree char *ws = g_strconcat(folder, ".ws", NULL);
  g_autofree char *b = g_build_filename(folder, "b", NULL);
  g_assert_cmpint(g_mkdir_with_parents(b, 0755), ==, 0);
  g_autofree char *good = g_build_filename(b, "good.png", NULL);
  guint8 px[8 * 8 * 3];
  fx_fill(px, sizeof px, 99);
  fx_write_png8(good, 8, 8, 3, px);
  g_autoptr(GPtrArray) sets = g_ptr_array_new();
  const char *base[] = {"train_data", folder, "workspace_dir", ws};
  for (guint i = 0; i < G_N_ELEMENTS(base); i++)
    g_ptr_array_add(sets, (gpointer)base[i]);
  for (guint i = 0; extra_sets && extra_sets[i]; i++)
    g_ptr_array_add(sets, (gpointer)extra_sets[i]);
  g_ptr_array_add(sets, NULL);
  g_autoptr(GPtrArray) args = args_of(image_sets, (const char *const *)sets->pdata, NULL);
  run_case(c, folder, culprit, expect, args, -1);
}

/* A case folder with class folder "a"; *file gets "<folder>/a/<name>". */
static char *case_folder(Ctx *c, const char *name, const char *file_name, char **file)
{
  char *folder = fuzz_case_path(&c->t, name);
  g_autofree char *a = g_build_filename(folder, "a", NULL);
  g_assert_cmpint(g_mkdir_with_parents(a, 0755), ==, 0);
  *file = g_build_filename(a, file_name, NULL);
  return folder;
}

static void gen_images(Ctx *c)
{
  g_autofree char *f = NULL;
  g_autofree char *bomb = case_folder(c, "image-grey-16384", "bomb.png", &f);
  fx_write_flat_png(f, 16384, 16384, 1, 3);
  image_case(c, bomb, f, FUZZ_ACCEPT, NULL);
  g_clear_pointer(&f, g_free);

  g_autofree char *thin = case_folder(c, "image-thin-1x16384", "thin.png", &f);
  guint8 *column = g_malloc0(16384);
  fx_write_png8(f, 1, 16384, 1, column);
  g_free(column);
  const char *big[] = {"image_size", "512", NULL};
  image_case(c, thin, f, FUZZ_ACCEPT, big);
  g_clear_pointer(&f, g_free);

  g_autofree char *jpeg = case_folder(c, "image-progressive-16384", "claims.jpg", &f);
  fx_write_progressive_jpeg_claiming(f, 16384, 16384);
  image_case(c, jpeg, f, FUZZ_REFUSE, NULL);
  g_clear_pointer(&f, g_free);

  g_autofree char *ztxt = case_folder(c, "image-ztxt-bomb", "ztxt.png", &f);
  fx_write_png_ztxt(f, (gsize)1 << 30, FALSE);
  image_case(c, ztxt, f, FUZZ_ACCEPT, NULL);
  g_clear_pointer(&f, g_free);

  g_autofree char *text = case_folder(c, "image-40mib-text-chunk", "text.png", &f);
  fx_write_png_ztxt(f, (gsize)40 << 20, TRUE);
  image_case(c, text, f, FUZZ_ACCEPT, NULL);
  g_clear_pointer(&f, g_free);

  /* Names that are not UTF-8: a good image trains; a bad one is named, as \xHH. */
  g_autofree char *foreign = case_folder(c, "image-names-latin1", "caf\xe9.png", &f);
  guint8 px[8 * 8 * 3];
  fx_fill(px, sizeof px, 7);
  fx_write_png8(f, 8, 8, 3, px);
  image_case(c, foreign, f, FUZZ_ACCEPT, NULL);
  g_clear_pointer(&f, g_free);
  g_autofree char *foreign_bad = case_folder(c, "image-names-latin1-bad", "na\xefve.png", &f);
  fuzz_write(f, "not an image", 12);
  g_autofree char *shown = g_strconcat(foreign_bad, "/a/na\\xefve.png", NULL);
  image_case(c, foreign_bad, shown, FUZZ_REFUSE, NULL);
  g_clear_pointer(&f, g_free);

  /* Byte flips of a good PNG and a good JPEG: either way, never a crash or a bad message. */
  for (int i = 0; i < 12; i++) {
    gboolean png = i % 2 == 0;
    g_autofree char *name = g_strdup_printf("image-flip-%02d", i);
    g_autofree char *folder = case_folder(c, name, png ? "x.png" : "x.jpg", &f);
    guint8 pix[16 * 16 * 3];
    fx_pattern(pix, 16, 16, 3, i);
    if (png)
      fx_write_png8(f, 16, 16, 3, pix);
    else
      fx_write_jpeg(f, 16, 16, 3, pix, 90);
    g_autofree guint8 *bytes = NULL;
    gsize len = 0;
    g_assert_true(g_file_get_contents(f, (char **)&bytes, &len, NULL));
    for (int flips = 0; flips < 3; flips++)
      bytes[fuzz_below(&c->rng, len)] ^= (guint8)(1u << fuzz_below(&c->rng, 8));
    fuzz_write(f, bytes, len);
    image_case(c, folder, f, FUZZ_EITHER, NULL);
    g_clear_pointer(&f, g_free);
  }
}

static void replay_regressions(Ctx *c)
{
  g_autofree char *dir = g_test_build_filename(G_TEST_DIST, "fuzz", "regressions", "images", NULL);
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
    g_assert_true(accept || g_str_has_prefix(name, "refuse-"));
    g_autofree char *f = NULL;
    g_autofree char *case_name = g_strdup_printf("saved-%s", name);
    g_autofree char *folder = case_folder(c, case_name, name, &f);
    fuzz_write(f, bytes, len);
    image_case(c, folder, f, accept ? FUZZ_ACCEPT : FUZZ_REFUSE, NULL);
    n++;
  }
  g_test_message("%u saved regression inputs", n);
  g_assert_cmpuint(n, >=, 2);
}

static void test_folders_fuzz(void)
{
  Ctx c;
  fuzz_tally_init(&c.t, "folders");
  c.rng = fuzz_rng_new(20);
  gen_teachers(&c);
  gen_samples(&c);
  gen_control(&c);
  gen_images(&c);
  replay_regressions(&c);
  fuzz_tally_finish(&c.t, 35);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  fuzz_watch_crashes();
  /* The flood writer learns that the run is gone from EPIPE. */
  signal(SIGPIPE, SIG_IGN);
  g_test_add_func("/fuzz/folders", test_folders_fuzz);
  return g_test_run();
}

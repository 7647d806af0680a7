/* Image folders as users have them, through the real cohort-train on a small ResNet:
 *  - file and class names that are not UTF-8 (a Latin-1 "café" from another system) train
 *    without a GLib critical (the run has G_DEBUG=fatal-criticals), keep their cache from one
 *    run to the next, and give a classes.json that is valid JSON (the bytes as \xHH), which
 *    the same folder's next run accepts as a teacher;
 *  - skip_bad_images names what it leaves out: the first 20 files, each with its reason, then
 *    how many more, for the training and the validation data alike. */
#include <string.h>
#include <sys/stat.h>

#include "engine/base/json-read.h"
#include "image-fixtures.h"
#include "test-util.h"
#include "train-run.h"

static char *tmp;

static const char *const resnet[] = {
    "--set", "model=resnet",   "--set", "data_format=images", "--set", "image_size=8",
    "--set", "n_layer=8",      "--set", "resnet_width=4",     "--set", "batch_size=2",
    "--set", "warmup_steps=0", "--set", "eval_every=0",       "--set", "eval_steps=1",
    "--set", "sample_every=0", "--set", "save_every=0",       "--set", "threads=1",
    "--set", "optimizer=sgd",  "--set", "max_steps=2",        NULL,
};

static void write_image(const char *dir, const char *name, guint32 seed)
{
  g_autofree char *path = g_build_filename(dir, name, NULL);
  guint8 px[8 * 8 * 3];
  fx_fill(px, sizeof px, seed);
  fx_write_png8(path, 8, 8, 3, px);
}

static char *class_dir(const char *root, const char *name)
{
  char *dir = g_build_filename(root, name, NULL);
  g_assert_cmpint(g_mkdir_with_parents(dir, 0755), ==, 0);
  return dir;
}

/* cohort-train on `train` (and `val`, may be NULL) into `ws`, with G_DEBUG=fatal-criticals. */
static RunResult train_on(const char *ws, const char *train, const char *val, const char *events,
                          const char *const *extra)
{
  g_autoptr(GPtrArray) args = g_ptr_array_new_with_free_func(g_free);
  for (guint i = 0; resnet[i]; i++)
    g_ptr_array_add(args, g_strdup(resnet[i]));
  const char *sets[] = {"workspace_dir", ws, "train_data", train, "val_data", val ? val : ""};
  for (guint i = 0; i < G_N_ELEMENTS(sets); i += 2) {
    g_ptr_array_add(args, g_strdup("--set"));
    g_ptr_array_add(args, g_strdup_printf("%s=%s", sets[i], sets[i + 1]));
  }
  for (guint i = 0; extra && extra[i]; i++)
    g_ptr_array_add(args, g_strdup(extra[i]));
  RunResult r = run_train(args, events);
  if (r.status != 0)
    g_test_message("exit %d: %s", r.status, r.err);
  return r;
}

static void test_non_utf8_names(void)
{
  g_autofree char *data = g_build_filename(tmp, "foreign", NULL);
  g_autofree char *cafe = class_dir(data, "caf\xe9");
  g_autofree char *plain = class_dir(data, "plain");
  write_image(cafe, "\xff\xfe.png", 1);
  write_image(cafe, "ok.png", 2);
  write_image(plain, "na\xefve.png", 3);
  write_image(plain, "b.png", 4);
  g_autofree char *ws = g_build_filename(tmp, "foreign-ws", NULL);
  RunResult a = train_on(ws, data, NULL, NULL, NULL);
  g_assert_cmpint(a.status, ==, 0);

  /* classes.json: valid JSON for the strict reader, the byte shown as \xe9. */
  g_autofree char *classes = g_build_filename(ws, "classes.json", NULL);
  g_autofree char *text = NULL;
  gsize len = 0;
  g_assert_true(g_file_get_contents(classes, &text, &len, NULL));
  g_autoptr(GError) error = NULL;
  g_autoptr(JsonNode) root = cohort_json_parse_strict(text, (gssize)len, classes, 0, &error);
  g_assert_no_error(error);
  JsonArray *names = json_object_get_array_member(json_node_get_object(root), "classes");
  g_assert_cmpstr(json_array_get_string_element(names, 0), ==, "caf\\xe9");
  g_assert_cmpstr(json_array_get_string_element(names, 1), ==, "plain");

  /* The cache file made by the first run serves the second as it is. */
  g_autofree char *cache_dir = g_build_filename(ws, "cache", NULL);
  g_autofree char *cmd = g_strdup_printf("find '%s' -name 'images-*.bin'", cache_dir);
  g_autofree char *found = NULL;
  g_assert_true(g_spawn_command_line_sync(cmd, &found, NULL, NULL, NULL));
  g_strstrip(found);
  g_assert_cmpstr(found, !=, "");
  struct stat before, after;
  g_assert_cmpint(stat(found, &before), ==, 0);
  const char *again[] = {"--overwrite", NULL};
  RunResult b = train_on(ws, data, NULL, NULL, again);
  g_assert_cmpint(b.status, ==, 0);
  g_assert_cmpint(stat(found, &after), ==, 0);
  g_assert_cmpuint(before.st_ino, ==, after.st_ino);
  g_assert_cmpint(before.st_mtim.tv_nsec, ==, after.st_mtim.tv_nsec);

  /* The folder's export as a teacher of a student on the same folder: the names agree. */
  g_autofree char *student = g_build_filename(tmp, "foreign-student", NULL);
  g_autofree char *teacher = g_strdup_printf("teacher_from=%s", ws);
  const char *distil[] = {"--set", teacher, NULL};
  RunResult c = train_on(student, data, NULL, NULL, distil);
  g_assert_cmpint(c.status, ==, 0);
  run_result_clear(&a);
  run_result_clear(&b);
  run_result_clear(&c);
}

/* The warning lines of a progress file that name a skipped file, and the summary. */
static void test_skipped_named(void)
{
  g_autofree char *train = g_build_filename(tmp, "skips-train", NULL);
  g_autofree char *val = g_build_filename(tmp, "skips-val", NULL);
  const char *cls[] = {"a", "b"};
  for (guint c = 0; c < 2; c++) {
    g_autofree char *t = class_dir(train, cls[c]);
    g_autofree char *v = class_dir(val, cls[c]);
    write_image(t, "good-1.png", c * 10 + 1);
    write_image(t, "good-2.png", c * 10 + 2);
    write_image(v, "good.png", c * 10 + 3);
  }
  g_autofree char *bad_dir = g_build_filename(train, "a", NULL);
  for (int i = 0; i < 25; i++) {
    g_autofree char *bad = g_strdup_printf("%s/bad-%02d.png", bad_dir, i);
    g_assert_true(g_file_set_contents(bad, "not an image", -1, NULL));
  }
  g_autofree char *val_bad = g_build_filename(val, "b", "broken.jpg", NULL);
  g_assert_true(g_file_set_contents(val_bad, "\xff\xd8\xff", 3, NULL));
  g_autofree char *ws = g_build_filename(tmp, "skips-ws", NULL);
  g_autofree char *events = g_build_filename(tmp, "skips.jsonl", NULL);
  const char *skip[] = {"--set", "skip_bad_images=true", NULL};
  RunResult r = train_on(ws, train, val, events, skip);
  g_assert_cmpint(r.status, ==, 0);
  g_autoptr(GPtrArray) ev = tu_read_events(events);
  guint named = 0, summaries = 0, val_named = 0;
  for (guint i = 0; i < ev->len; i++) {
    JsonObject *o = g_ptr_array_index(ev, i);
    if (!g_str_equal(json_object_get_string_member(o, "event"), "log"))
      continue;
    const char *msg = json_object_get_string_member(o, "message");
    if (strstr(msg, "bad-") && strstr(msg, "not a PNG or JPEG image")) {
      g_test_message("%s", msg);
      named++;
    }
    if (strstr(msg, "and 5 more") && strstr(msg, train))
      summaries++;
    if (strstr(msg, val_bad) && strstr(msg, "JPEG")) {
      g_test_message("%s", msg);
      val_named++;
    }
  }
  g_assert_cmpuint(named, ==, 20);
  g_assert_cmpuint(summaries, ==, 1);
  g_assert_cmpuint(val_named, ==, 1);
  run_result_clear(&r);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  /* Every cohort-train of this test: a GLib critical is a crash. */
  g_setenv("G_DEBUG", "fatal-criticals", TRUE);
  g_autoptr(GError) error = NULL;
  tmp = g_dir_make_tmp("cohort-image-names-XXXXXX", &error);
  g_assert_no_error(error);
  g_test_add_func("/image-names/non-utf8", test_non_utf8_names);
  g_test_add_func("/image-names/skipped-named", test_skipped_named);
  int rc = g_test_run();
  tu_rm_rf(tmp);
  g_free(tmp);
  return rc;
}

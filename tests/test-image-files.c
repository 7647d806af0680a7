/* Image files that go wrong, and the per-rank cache: every kind of broken file gives an
 * error naming it (or is skipped and counted with skip_bad); the cache decodes nothing on
 * an unchanged folder, only the changed files otherwise, and rebuilds a damaged cache
 * file. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "data/images.h"
#include "image-fixtures.h"

/* A good 8x8 RGB PNG of pseudo-random pixels (so its IDAT is large and incompressible). */
static void write_good(const char *path, guint32 seed)
{
  guint8 px[8 * 8 * 3];
  fx_fill(px, sizeof px, seed);
  fx_write_png8(path, 8, 8, 3, px);
}

typedef struct {
  const char *name;
  const char *fragment; /* what the message must say, besides the path */
} BadFile;

/* Makes every kind of broken file in `dir`; returns them (names and expected messages). */
static GArray *make_bad_files(const char *dir, gboolean *can_deny)
{
  GArray *bad = g_array_new(FALSE, FALSE, sizeof(BadFile));
#define BAD(n, f) g_array_append_val(bad, ((BadFile){n, f}))
  g_autofree char *good = g_build_filename(dir, "source.tmp", NULL);
  write_good(good, 1);
  g_autofree char *data = NULL;
  gsize len;
  g_assert_true(g_file_get_contents(good, &data, &len, NULL));

  g_autofree char *p = g_build_filename(dir, "truncated.png", NULL);
  fx_truncate_copy(good, p, len / 2);
  BAD("truncated.png", "truncated PNG");
  g_free(p), p = g_build_filename(dir, "no-iend.png", NULL);
  fx_truncate_copy(good, p, len - 12);
  BAD("no-iend.png", "truncated PNG");
  g_free(p), p = g_build_filename(dir, "bad-crc.png", NULL);
  data[len - 30] ^= 0x55; /* inside the IDAT data */
  g_assert_true(g_file_set_contents(p, data, (gssize)len, NULL));
  BAD("bad-crc.png", "corrupt PNG");

  guint8 px[32 * 32 * 4];
  fx_fill(px, sizeof px, 5);
  g_autofree char *jpeg = g_build_filename(dir, "source-jpeg.tmp", NULL);
  fx_write_jpeg(jpeg, 32, 32, 3, px, 90);
  g_autofree char *jdata = NULL;
  gsize jlen;
  g_assert_true(g_file_get_contents(jpeg, &jdata, &jlen, NULL));
  g_free(p), p = g_build_filename(dir, "truncated.jpg", NULL);
  fx_truncate_copy(jpeg, p, jlen / 2);
  BAD("truncated.jpg", "truncated JPEG");
  g_free(p), p = g_build_filename(dir, "garbage.jpeg", NULL);
  memset(jdata + 3, 0x42, 40); /* the markers after SOI */
  g_assert_true(g_file_set_contents(p, jdata, (gssize)jlen, NULL));
  BAD("garbage.jpeg", "corrupt JPEG");
  g_free(p), p = g_build_filename(dir, "cmyk.jpg", NULL);
  fx_write_jpeg(p, 32, 32, 4, px, 90);
  BAD("cmyk.jpg", "CMYK");

  guint8 noise[300];
  fx_fill(noise, sizeof noise, 9);
  g_free(p), p = g_build_filename(dir, "noise.png", NULL);
  g_assert_true(g_file_set_contents(p, (const char *)noise, sizeof noise, NULL));
  BAD("noise.png", "not a PNG or JPEG image");
  g_free(p), p = g_build_filename(dir, "really-a-gif.png", NULL);
  g_assert_true(g_file_set_contents(p, "GIF89a\x01\x00\x01\x00", 10, NULL));
  BAD("really-a-gif.png", "a GIF image");
  g_free(p), p = g_build_filename(dir, "empty.png", NULL);
  g_assert_true(g_file_set_contents(p, "", 0, NULL));
  BAD("empty.png", "empty file");
  g_free(p), p = g_build_filename(dir, "huge.png", NULL);
  fx_write_png_header_only(p, 20000, 20000);
  BAD("huge.png", "too large");
  g_free(p), p = g_build_filename(dir, "huge-bytes.png", NULL);
  fx_write_png_header_only(p, 16000, 16000); /* sides allowed, 768 MB decoded is not */
  BAD("huge-bytes.png", "too large");
  g_free(p), p = g_build_filename(dir, "zero-width.png", NULL);
  fx_write_png_header_only(p, 0, 5);
  BAD("zero-width.png", "at least 1x1");
  g_free(p), p = g_build_filename(dir, "a-folder.png", NULL);
  g_assert_cmpint(g_mkdir(p, 0755), ==, 0);
  BAD("a-folder.png", "it is a folder");
  g_free(p), p = g_build_filename(dir, "dangling.png", NULL);
  g_assert_cmpint(symlink("/nonexistent/cohort-test.png", p), ==, 0);
  BAD("dangling.png", "No such file");
  g_free(p), p = g_build_filename(dir, "fifo.png", NULL);
  g_assert_cmpint(mkfifo(p, 0644), ==, 0);
  BAD("fifo.png", "not a regular file");
  g_free(p), p = g_build_filename(dir, "anim.webp", NULL);
  g_assert_true(g_file_set_contents(p, "RIFF0000WEBP", 12, NULL));
  BAD("anim.webp", ".webp files are not read");
  /* Root reads files whatever their mode: then this case cannot be made. */
  *can_deny = geteuid() != 0;
  if (*can_deny) {
    g_free(p), p = g_build_filename(dir, "denied.png", NULL);
    write_good(p, 2);
    g_assert_cmpint(chmod(p, 0), ==, 0);
    BAD("denied.png", "Permission denied");
  }
#undef BAD
  g_unlink(good);
  g_unlink(jpeg);
  return bad;
}

/* Each broken file on its own beside a good one: an error naming it; all of them with
 * skip_bad: skipped, counted, each reason naming its file. */
static void test_broken_files(void)
{
  g_autofree char *dir = fx_mkdtemp("broken");
  g_autofree char *store = fx_subdir(dir, "store");
  gboolean can_deny;
  g_autoptr(GArray) bad = make_bad_files(store, &can_deny);
  if (!can_deny)
    g_test_message("running as root: the unreadable-file case is covered by the dangling link");
  g_autofree char *set_dir = fx_subdir(dir, "set");
  g_autofree char *cls = fx_subdir(set_dir, "c");
  g_autofree char *good = g_build_filename(cls, "good.png", NULL);
  write_good(good, 3);

  for (guint i = 0; i < bad->len; i++) {
    const BadFile *b = &g_array_index(bad, BadFile, i);
    g_autofree char *from = g_build_filename(store, b->name, NULL);
    g_autofree char *to = g_build_filename(cls, b->name, NULL);
    g_assert_cmpint(g_rename(from, to), ==, 0);
    g_autoptr(GError) error = NULL;
    g_autoptr(CohortImageSet) set = cohort_image_set_open(set_dir, 8, 3, FALSE, NULL, &error);
    g_assert_null(set);
    g_assert_nonnull(error);
    g_assert_true(error->domain == COHORT_DATA_ERROR);
    if (!strstr(error->message, to) || !strstr(error->message, b->fragment))
      g_error("%s: \"%s\" should name the file and say \"%s\"", b->name, error->message,
              b->fragment);
    g_assert_null(strchr(error->message, '\n'));
    g_assert_cmpint(g_rename(to, from), ==, 0);
  }

  /* All at once, skipped. */
  for (guint i = 0; i < bad->len; i++) {
    const BadFile *b = &g_array_index(bad, BadFile, i);
    g_autofree char *from = g_build_filename(store, b->name, NULL);
    g_autofree char *to = g_build_filename(cls, b->name, NULL);
    g_assert_cmpint(g_rename(from, to), ==, 0);
  }
  g_autofree char *good2 = g_build_filename(cls, "zz-good.jpg", NULL);
  guint8 px[8 * 8 * 3];
  fx_pattern(px, 8, 8, 3, 0);
  fx_write_jpeg(good2, 8, 8, 3, px, 90);
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortImageSet) set = cohort_image_set_open(set_dir, 8, 3, TRUE, NULL, &error);
  g_assert_no_error(error);
  g_assert_cmpuint(cohort_image_set_len(set), ==, 2);
  g_assert_cmpstr(cohort_image_set_path(set, 0), ==, "c/good.png");
  g_assert_cmpstr(cohort_image_set_path(set, 1), ==, "c/zz-good.jpg");
  g_assert_cmpuint(cohort_image_set_num_skipped(set), ==, bad->len);
  for (guint i = 0; i < bad->len; i++) {
    const BadFile *b = &g_array_index(bad, BadFile, i);
    g_autofree char *path = g_build_filename(cls, b->name, NULL);
    gboolean found = FALSE;
    for (guint k = 0; k < cohort_image_set_num_skipped(set); k++)
      found = found || (strstr(cohort_image_set_skipped_reason(set, k), path) &&
                        strstr(cohort_image_set_skipped_reason(set, k), b->fragment));
    if (!found)
      g_error("no skipped reason names %s with \"%s\"", path, b->fragment);
  }

  /* Nothing readable at all: an error even with skip_bad. */
  g_unlink(good);
  g_unlink(good2);
  g_clear_pointer(&set, cohort_image_set_free);
  set = cohort_image_set_open(set_dir, 8, 3, TRUE, NULL, &error);
  g_assert_null(set);
  g_assert_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_TOO_SMALL);
  g_assert_nonnull(strstr(error->message, "no readable image"));
  fx_rm_rf(dir);
}

static CohortImageSet *open_cached(const char *folder, int size, const char *cache,
                                   gboolean skip_bad, guint want_decoded)
{
  g_autoptr(GError) error = NULL;
  CohortImageSet *set = cohort_image_set_open(folder, size, 3, skip_bad, cache, &error);
  g_assert_no_error(error);
  g_assert_cmpuint(cohort_image_set_num_decoded(set), ==, want_decoded);
  return set;
}

/* The set equals one opened without a cache, byte for byte. */
static void assert_same_as_fresh(const CohortImageSet *set, const char *folder, int size)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortImageSet) fresh = cohort_image_set_open(folder, size, 3, TRUE, NULL, &error);
  g_assert_no_error(error);
  g_assert_cmpuint(cohort_image_set_len(set), ==, cohort_image_set_len(fresh));
  gsize bytes = (gsize)size * size * 3;
  for (gsize i = 0; i < cohort_image_set_len(set); i++) {
    g_assert_cmpstr(cohort_image_set_path(set, i), ==, cohort_image_set_path(fresh, i));
    g_assert_cmpint(cohort_image_set_label(set, i), ==, cohort_image_set_label(fresh, i));
    g_assert_cmpmem(cohort_image_set_get_bytes(set, i), bytes, cohort_image_set_get_bytes(fresh, i),
                    bytes);
  }
}

/* The cache files in `cache`; fails on a leftover temporary file. */
static GPtrArray *cache_files(const char *cache)
{
  GPtrArray *files = g_ptr_array_new_with_free_func(g_free);
  g_autoptr(GDir) d = g_dir_open(cache, 0, NULL);
  const char *name;
  while (d && (name = g_dir_read_name(d))) {
    g_assert_true(g_str_has_prefix(name, "images-") && g_str_has_suffix(name, ".bin"));
    g_ptr_array_add(files, g_build_filename(cache, name, NULL));
  }
  return files;
}

static void damage(const char *path, const char *how)
{
  g_autofree char *data = NULL;
  gsize len;
  g_assert_true(g_file_get_contents(path, &data, &len, NULL));
  if (strcmp(how, "flip") == 0)
    data[len - 1] ^= 1; /* last pixel byte */
  else if (strcmp(how, "truncate") == 0)
    len = len * 2 / 3;
  else if (strcmp(how, "magic") == 0)
    data[0] = 'X';
  else
    len = 0;
  g_assert_true(g_file_set_contents(path, data, (gssize)len, NULL));
}

static void touch(const char *path, int seconds_later)
{
  struct stat st;
  g_assert_cmpint(stat(path, &st), ==, 0);
  struct timespec times[2] = {st.st_atim, st.st_mtim};
  times[1].tv_sec += seconds_later;
  g_assert_cmpint(utimensat(AT_FDCWD, path, times, 0), ==, 0);
}

static void test_cache(void)
{
  g_autofree char *dir = fx_mkdtemp("cache");
  g_autofree char *data = fx_subdir(dir, "data");
  g_autofree char *cache = g_build_filename(dir, "cache", "rank-0", NULL);
  char *paths[6];
  for (int i = 0; i < 6; i++) {
    g_autofree char *cls = fx_subdir(data, i < 3 ? "a" : "b");
    paths[i] = g_strdup_printf("%s/%d.png", cls, i);
    write_good(paths[i], (guint32)i + 10);
  }
  g_autoptr(CohortImageSet) set = open_cached(data, 6, cache, FALSE, 6);
  g_autoptr(GPtrArray) files = cache_files(cache);
  g_assert_cmpuint(files->len, ==, 1);
  const char *cache_file = files->pdata[0];

  /* Unchanged: nothing decoded, the same bytes, and the cache file is used as it is (not
   * written again: same inode and mtime). */
  struct stat before, after;
  g_assert_cmpint(stat(cache_file, &before), ==, 0);
  g_clear_pointer(&set, cohort_image_set_free);
  set = open_cached(data, 6, cache, FALSE, 0);
  assert_same_as_fresh(set, data, 6);
  g_assert_cmpint(stat(cache_file, &after), ==, 0);
  g_assert_cmpuint(before.st_ino, ==, after.st_ino);
  g_assert_cmpint(before.st_mtim.tv_nsec, ==, after.st_mtim.tv_nsec);
  g_assert_cmpint(before.st_mtim.tv_sec, ==, after.st_mtim.tv_sec);

  /* A newer mtime, new content (size), a new inode with the same size and mtime: each
   * decodes that one file, and the next open decodes nothing. */
  touch(paths[1], 5);
  g_clear_pointer(&set, cohort_image_set_free);
  set = open_cached(data, 6, cache, FALSE, 1);
  g_clear_pointer(&set, cohort_image_set_free);
  set = open_cached(data, 6, cache, FALSE, 0);
  guint8 px[5 * 7 * 3];
  fx_fill(px, sizeof px, 77);
  fx_write_png8(paths[4], 5, 7, 3, px);
  g_clear_pointer(&set, cohort_image_set_free);
  set = open_cached(data, 6, cache, FALSE, 1);
  assert_same_as_fresh(set, data, 6);
  /* Rewritten in place (same inode) with its old mtime put back: the size tells. */
  g_assert_cmpint(stat(paths[5], &before), ==, 0);
  fx_write_png8(paths[5], 5, 7, 3, px);
  struct timespec times[2] = {before.st_atim, before.st_mtim};
  g_assert_cmpint(utimensat(AT_FDCWD, paths[5], times, 0), ==, 0);
  g_assert_cmpint(stat(paths[5], &after), ==, 0);
  g_assert_cmpuint(before.st_ino, ==, after.st_ino);
  g_assert_cmpint(before.st_size, !=, after.st_size);
  g_clear_pointer(&set, cohort_image_set_free);
  set = open_cached(data, 6, cache, FALSE, 1);
  assert_same_as_fresh(set, data, 6);
  /* Rewritten in place with the same size, inode and mtime (other pixels of the same size):
   * ctime and the content hash tell, as for text data. */
  g_assert_cmpint(stat(paths[3], &before), ==, 0);
  g_autofree char *same_size = g_strconcat(paths[3], ".candidate", NULL);
  struct stat cand = {0};
  for (guint32 seed = 1000; cand.st_size != before.st_size; seed++) {
    g_assert_cmpuint(seed, <, 2000);
    write_good(same_size, seed);
    g_assert_cmpint(stat(same_size, &cand), ==, 0);
  }
  g_autofree char *bytes = NULL;
  gsize len = 0;
  g_assert_true(g_file_get_contents(same_size, &bytes, &len, NULL));
  g_unlink(same_size);
  FILE *fp = fopen(paths[3], "r+b");
  g_assert_nonnull(fp);
  g_assert_cmpuint(fwrite(bytes, 1, len, fp), ==, len);
  g_assert_cmpint(fclose(fp), ==, 0);
  struct timespec same_times[2] = {before.st_atim, before.st_mtim};
  g_assert_cmpint(utimensat(AT_FDCWD, paths[3], same_times, 0), ==, 0);
  g_assert_cmpint(stat(paths[3], &after), ==, 0);
  g_assert_cmpuint(before.st_ino, ==, after.st_ino);
  g_assert_cmpint(before.st_size, ==, after.st_size);
  g_assert_cmpint(before.st_mtim.tv_sec, ==, after.st_mtim.tv_sec);
  g_assert_cmpint(before.st_mtim.tv_nsec, ==, after.st_mtim.tv_nsec);
  g_clear_pointer(&set, cohort_image_set_free);
  set = open_cached(data, 6, cache, FALSE, 1);
  assert_same_as_fresh(set, data, 6);
  g_autofree char *copy = g_strconcat(paths[2], ".new", NULL);
  g_autofree char *cmd =
      g_strdup_printf("cp -p '%s' '%s' && mv '%s' '%s'", paths[2], copy, copy, paths[2]);
  g_assert_cmpint(system(cmd), ==, 0);
  g_clear_pointer(&set, cohort_image_set_free);
  set = open_cached(data, 6, cache, FALSE, 1);

  /* An added file decodes alone; a removed one decodes nothing but rewrites the index. */
  g_autofree char *added = g_strdup_printf("%s/a/9.png", data);
  write_good(added, 99);
  g_clear_pointer(&set, cohort_image_set_free);
  set = open_cached(data, 6, cache, FALSE, 1);
  g_assert_cmpuint(cohort_image_set_len(set), ==, 7);
  g_unlink(paths[0]);
  g_clear_pointer(&set, cohort_image_set_free);
  set = open_cached(data, 6, cache, FALSE, 0);
  g_assert_cmpuint(cohort_image_set_len(set), ==, 6);
  assert_same_as_fresh(set, data, 6);
  g_clear_pointer(&set, cohort_image_set_free);
  set = open_cached(data, 6, cache, FALSE, 0);

  /* A damaged cache file is rebuilt (all 6 decoded), then trusted again. */
  const char *hows[] = {"flip", "truncate", "magic", "empty"};
  for (guint i = 0; i < G_N_ELEMENTS(hows); i++) {
    g_clear_pointer(&set, cohort_image_set_free);
    damage(cache_file, hows[i]);
    set = open_cached(data, 6, cache, FALSE, 6);
    assert_same_as_fresh(set, data, 6);
    g_clear_pointer(&set, cohort_image_set_free);
    set = open_cached(data, 6, cache, FALSE, 0);
  }

  /* Another size is another cache file. */
  g_clear_pointer(&set, cohort_image_set_free);
  set = open_cached(data, 4, cache, FALSE, 6);
  g_clear_pointer(&files, g_ptr_array_unref);
  files = cache_files(cache);
  g_assert_cmpuint(files->len, ==, 2);
  for (int i = 0; i < 6; i++)
    g_free(paths[i]);
  fx_rm_rf(dir);
}

/* Bad files are remembered by the cache: skipped again without decoding, and still an
 * error, naming the file, when skip_bad is off. A cache that cannot be written fails. */
static void test_cache_bad_files(void)
{
  g_autofree char *dir = fx_mkdtemp("cache-bad");
  g_autofree char *data = fx_subdir(dir, "data");
  g_autofree char *cache = g_build_filename(dir, "cache", NULL);
  g_autofree char *good = g_build_filename(data, "good.png", NULL);
  g_autofree char *bad = g_build_filename(data, "bad.png", NULL);
  write_good(good, 1);
  g_assert_true(g_file_set_contents(bad, "not an image at all", -1, NULL));
  g_autoptr(CohortImageSet) set = open_cached(data, 8, cache, TRUE, 2);
  g_assert_cmpuint(cohort_image_set_num_skipped(set), ==, 1);
  g_clear_pointer(&set, cohort_image_set_free);
  set = open_cached(data, 8, cache, TRUE, 0);
  g_assert_cmpuint(cohort_image_set_len(set), ==, 1);
  g_assert_cmpuint(cohort_image_set_num_skipped(set), ==, 1);
  g_assert_nonnull(strstr(cohort_image_set_skipped_reason(set, 0), bad));

  g_autoptr(GError) error = NULL;
  g_autoptr(CohortImageSet) strict = cohort_image_set_open(data, 8, 3, FALSE, cache, &error);
  g_assert_null(strict);
  g_assert_nonnull(strstr(error->message, bad));
  g_assert_nonnull(strstr(error->message, "not a PNG or JPEG image"));
  g_clear_error(&error);

  g_autofree char *blocked = g_build_filename(dir, "blocked", NULL);
  g_assert_true(g_file_set_contents(blocked, "a file where the cache folder should be", -1, NULL));
  g_autofree char *under = g_build_filename(blocked, "rank-0", NULL);
  strict = cohort_image_set_open(data, 8, 3, TRUE, under, &error);
  g_assert_null(strict);
  g_assert_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_IO);
  g_assert_nonnull(strstr(error->message, under));
  fx_rm_rf(dir);
}

/* Opening a folder with a file the process may not read (made in a child that drops root,
 * since root reads any file): the error names it; skip_bad skips it. 0 when both hold. */
static int open_unreadable(const char *set_dir, const char *denied)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortImageSet) set = cohort_image_set_open(set_dir, 8, 3, FALSE, NULL, &error);
  if (set || !strstr(error->message, denied) || !strstr(error->message, "Permission denied"))
    return 1;
  g_autoptr(CohortImageSet) skipping = cohort_image_set_open(set_dir, 8, 3, TRUE, NULL, NULL);
  return skipping && cohort_image_set_len(skipping) == 1 &&
                 cohort_image_set_num_skipped(skipping) == 1
             ? 0
             : 2;
}

static void test_unreadable(void)
{
  g_autofree char *dir = fx_mkdtemp("unreadable");
  g_assert_cmpint(chmod(dir, 0755), ==, 0);
  g_autofree char *cls = fx_subdir(dir, "c");
  g_autofree char *good = g_build_filename(cls, "good.png", NULL);
  g_autofree char *denied = g_build_filename(cls, "denied.png", NULL);
  write_good(good, 1);
  write_good(denied, 2);
  g_assert_cmpint(chmod(denied, 0), ==, 0);
  if (geteuid() != 0) {
    g_assert_cmpint(open_unreadable(dir, denied), ==, 0);
    fx_rm_rf(dir);
    return;
  }
  pid_t pid = fork();
  g_assert_cmpint(pid, >=, 0);
  if (pid == 0) {
    const uid_t nobody = 65534;
    if (setgroups(0, NULL) != 0 || setgid(nobody) != 0 || setuid(nobody) != 0)
      _exit(77);
    _exit(open_unreadable(dir, denied));
  }
  int status;
  g_assert_cmpint(waitpid(pid, &status, 0), ==, pid);
  g_assert_true(WIFEXITED(status));
  if (WEXITSTATUS(status) == 77)
    g_test_skip("cannot drop root to make a file unreadable");
  else
    g_assert_cmpint(WEXITSTATUS(status), ==, 0);
  fx_rm_rf(dir);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/image-files/broken", test_broken_files);
  g_test_add_func("/image-files/unreadable", test_unreadable);
  g_test_add_func("/image-files/cache", test_cache);
  g_test_add_func("/image-files/cache-bad-files", test_cache_bad_files);
  return g_test_run();
}

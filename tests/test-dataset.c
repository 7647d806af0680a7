/* Dataset readers: text file and folder, .bin shards, windows, and every bad-file case. */
#include <string.h>
#include <glib/gstdio.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utime.h>
#include "data/dataset.h"

/* A fresh temporary folder per test, removed afterwards. */
typedef struct {
  char *dir;
} Fixture;

static void fixture_setup(Fixture *fx, gconstpointer data)
{
  (void)data;
  g_autoptr(GError) error = NULL;
  fx->dir = g_dir_make_tmp("cohort-dataset-XXXXXX", &error);
  g_assert_no_error(error);
}

static void remove_tree(const char *path)
{
  if (g_file_test(path, G_FILE_TEST_IS_DIR)) {
    g_autoptr(GDir) d = g_dir_open(path, 0, NULL);
    const char *name;
    while (d && (name = g_dir_read_name(d))) {
      g_autofree char *child = g_build_filename(path, name, NULL);
      remove_tree(child);
    }
    g_rmdir(path);
  } else {
    g_unlink(path);
  }
}

static void fixture_teardown(Fixture *fx, gconstpointer data)
{
  (void)data;
  remove_tree(fx->dir);
  g_free(fx->dir);
}

static char *write_file(const char *dir, const char *name, const void *data, gsize len)
{
  char *path = g_build_filename(dir, name, NULL);
  g_autoptr(GError) error = NULL;
  g_file_set_contents(path, data, (gssize)len, &error);
  g_assert_no_error(error);
  return path;
}

/* An llm.c shard with `count` tokens tok[i] = (start + i) % modulo, header fields editable. */
static char *write_shard(const char *dir, const char *name, gint32 magic, gint32 version,
                         gint32 header_count, int count, int start, int modulo)
{
  gsize size = 1024 + 2 * (gsize)count;
  g_autofree guint8 *buf = g_malloc0(size);
  gint32 header[3] = {GINT32_TO_LE(magic), GINT32_TO_LE(version), GINT32_TO_LE(header_count)};
  memcpy(buf, header, sizeof header);
  for (int i = 0; i < count; i++) {
    guint16 t = GUINT16_TO_LE((guint16)((start + i) % modulo));
    memcpy(buf + 1024 + 2 * i, &t, 2);
  }
  return write_file(dir, name, buf, size);
}

static void expect_error(const char *path, CohortDataFormat fmt, int vocab, int T, int code,
                         const char *needle)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortDataset) ds = cohort_dataset_open(path, fmt, vocab, T, &error);
  g_assert_null(ds);
  g_assert_error(error, COHORT_DATA_ERROR, code);
  g_test_message("%s", error->message);
  g_assert_nonnull(strstr(error->message, path));
  if (needle)
    g_assert_nonnull(strstr(error->message, needle));
  g_assert_null(strchr(error->message, '\n'));
}

static void test_text_file(Fixture *fx, gconstpointer data)
{
  (void)data;
  const char *text = "hello, world! h\xc3\xa9llo";
  g_autofree char *path = write_file(fx->dir, "a.txt", text, strlen(text));
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortDataset) ds = cohort_dataset_open(path, COHORT_DATA_TEXT, 256, 4, &error);
  g_assert_no_error(error);
  g_assert_cmpuint(cohort_dataset_num_tokens(ds), ==, strlen(text));
  g_assert_cmpuint(cohort_dataset_num_windows(ds), ==, (strlen(text) - 1) / 4);
  g_assert_cmpint(cohort_dataset_seq_len(ds), ==, 4);
  int in[4], tg[4];
  g_assert_true(cohort_dataset_window(ds, 1, in, tg, NULL));
  for (int t = 0; t < 4; t++) {
    g_assert_cmpint(in[t], ==, (guint8)text[4 + t]);
    g_assert_cmpint(tg[t], ==, (guint8)text[5 + t]);
  }
  /* The last window reaches the é bytes (above 127). */
  gsize last = cohort_dataset_num_windows(ds) - 1;
  g_assert_true(cohort_dataset_window(ds, last, in, tg, NULL));
  g_assert_cmpint(tg[3], ==, (guint8)text[last * 4 + 4]);
}

/* Overwrites token `pos` of the shard at `path` in place with `value`. */
static void poke_token(const char *path, gsize pos, guint16 value)
{
  FILE *f = fopen(path, "r+b");
  g_assert_nonnull(f);
  g_assert_cmpint(fseek(f, 1024 + 2 * (long)pos, SEEK_SET), ==, 0);
  guint16 le = GUINT16_TO_LE(value);
  g_assert_cmpuint(fwrite(&le, 2, 1, f), ==, 1);
  g_assert_cmpint(fclose(f), ==, 0);
}

/* The prepared-data index: a second open of an unchanged file skips the content scan; a file
 * rewritten in place with the same size and mtime (the stale-index bug: its bad token used to
 * reach the model) is scanned again and refused; another vocab is another preparation. */
static void test_prepared_index(Fixture *fx, gconstpointer data)
{
  (void)data;
  g_autofree char *path = write_shard(fx->dir, "s.bin", 20240520, 1, 64, 64, 0, 50);
  g_autofree char *index_dir = g_build_filename(fx->dir, "cache", NULL);
  g_autoptr(GError) error = NULL;
  guint scanned = 99;
  g_autoptr(CohortDataset) other =
      cohort_dataset_open_prepared(path, COHORT_DATA_TOKENS, 61, 8, index_dir, &scanned, &error);
  g_assert_no_error(error);
  g_assert_cmpuint(scanned, ==, 1);
  g_autoptr(CohortDataset) a =
      cohort_dataset_open_prepared(path, COHORT_DATA_TOKENS, 50, 8, index_dir, &scanned, &error);
  g_assert_no_error(error);
  g_assert_cmpuint(scanned, ==, 1);
  g_autoptr(CohortDataset) again =
      cohort_dataset_open_prepared(path, COHORT_DATA_TOKENS, 50, 8, index_dir, &scanned, &error);
  g_assert_no_error(error);
  g_assert_cmpuint(scanned, ==, 0);

  /* Same size, and the modification time put back to the nanosecond (as touch -r or rsync
   * -t would). */
  struct stat st;
  g_assert_cmpint(stat(path, &st), ==, 0);
  poke_token(path, 10, 60);
  struct timespec keep[2] = {st.st_atim, st.st_mtim};
  g_assert_cmpint(utimensat(AT_FDCWD, path, keep, 0), ==, 0);
  struct stat now;
  g_assert_cmpint(stat(path, &now), ==, 0);
  g_assert_cmpint(now.st_size, ==, st.st_size);
  g_assert_cmpint(now.st_mtim.tv_sec, ==, st.st_mtim.tv_sec);
  g_assert_cmpint(now.st_mtim.tv_nsec, ==, st.st_mtim.tv_nsec);
  g_autoptr(CohortDataset) b =
      cohort_dataset_open_prepared(path, COHORT_DATA_TOKENS, 50, 8, index_dir, &scanned, &error);
  g_assert_null(b);
  g_assert_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_VOCAB);
  g_assert_nonnull(strstr(error->message, "token 60 at position 10"));
}

/* A file that changes while a dataset has it mapped (the index or the scan vouched for it
 * before): the window that holds the bad token fails, naming the file and the offset, and
 * hands nothing to the caller; other windows still read. */
static void test_window_range_check(Fixture *fx, gconstpointer data)
{
  (void)data;
  g_autofree char *path = write_shard(fx->dir, "w.bin", 20240520, 1, 64, 64, 0, 50);
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortDataset) ds = cohort_dataset_open(path, COHORT_DATA_TOKENS, 50, 8, &error);
  g_assert_no_error(error);
  /* Through the file, not the mapping: the private mapping still shows the page cache. */
  poke_token(path, 20, 50);
  int in[8] = {0}, tg[8] = {0};
  g_assert_true(cohort_dataset_window(ds, 0, in, tg, &error));
  g_assert_no_error(error);
  int before[8];
  memcpy(before, in, sizeof before);
  g_assert_false(cohort_dataset_window(ds, 2, in, tg, &error));
  g_assert_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_VOCAB);
  g_test_message("%s", error->message);
  g_assert_nonnull(strstr(error->message, path));
  g_assert_nonnull(strstr(error->message,
                          "token 50 at position 20 (byte offset 1064) is not below vocab_size 50"));
  g_assert_cmpmem(in, sizeof in, before, sizeof before);
  g_clear_error(&error);
  /* Window 3 (tokens 24 to 32) does not hold it. */
  g_assert_true(cohort_dataset_window(ds, 3, in, tg, &error));
  g_assert_no_error(error);
}

/* Only regular files are data: a FIFO would block the reader forever, a device never ends.
 * Refused at once with the path and what it is, given directly or inside a data folder. */
static void test_not_regular(Fixture *fx, gconstpointer data)
{
  (void)data;
  g_autofree char *fifo = g_build_filename(fx->dir, "pipe.txt", NULL);
  g_assert_cmpint(mkfifo(fifo, 0600), ==, 0);
  gint64 t0 = g_get_monotonic_time();
  expect_error(fifo, COHORT_DATA_TEXT, 256, 4, COHORT_DATA_ERROR_IO,
               "is a FIFO (named pipe); allowed: a regular file, or a folder of regular files");
  expect_error("/dev/zero", COHORT_DATA_TEXT, 256, 4, COHORT_DATA_ERROR_IO, "is a device");

  g_autofree char *folder = g_build_filename(fx->dir, "corpus", NULL);
  g_mkdir(folder, 0755);
  g_free(write_file(folder, "a.txt", "abcdefghij", 10));
  g_autofree char *inner = g_build_filename(folder, "b.txt", NULL);
  g_assert_cmpint(mkfifo(inner, 0600), ==, 0);
  expect_error(folder, COHORT_DATA_TEXT, 256, 4, COHORT_DATA_ERROR_IO, "b.txt: is a FIFO");
  g_assert_cmpint(g_get_monotonic_time() - t0, <, 5 * G_USEC_PER_SEC);

  /* A folder whose name has the suffix is skipped, not read; a symlink to a file is read. */
  g_unlink(inner);
  g_autofree char *sub = g_build_filename(folder, "sub.txt", NULL);
  g_mkdir(sub, 0755);
  g_autofree char *target = write_file(fx->dir, "target.txt", "KLMNO", 5);
  g_autofree char *link = g_build_filename(folder, "c.txt", NULL);
  g_assert_cmpint(symlink(target, link), ==, 0);
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortDataset) ds = cohort_dataset_open(folder, COHORT_DATA_TEXT, 256, 4, &error);
  g_assert_no_error(error);
  g_assert_cmpuint(cohort_dataset_num_tokens(ds), ==, 15);
}

static void test_text_folder(Fixture *fx, gconstpointer data)
{
  (void)data;
  g_autofree char *sub = g_build_filename(fx->dir, "corpus", NULL);
  g_mkdir(sub, 0755);
  g_free(write_file(sub, "b.txt", "DEFG", 4));
  g_free(write_file(sub, "a.txt", "ABC", 3));
  g_free(write_file(sub, "notes.md", "zzzz", 4));
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortDataset) ds = cohort_dataset_open(sub, COHORT_DATA_TEXT, 256, 3, &error);
  g_assert_no_error(error);
  g_assert_cmpuint(cohort_dataset_num_tokens(ds), ==, 7);
  g_assert_cmpuint(cohort_dataset_num_windows(ds), ==, 2);
  /* Window 1 crosses from a.txt into b.txt: "CDE" -> "DEF". */
  int in[3], tg[3];
  g_assert_true(cohort_dataset_window(ds, 0, in, tg, NULL));
  g_assert_cmpint(in[0], ==, 'A');
  g_assert_cmpint(tg[2], ==, 'D');
  g_assert_true(cohort_dataset_window(ds, 1, in, tg, NULL));
  g_assert_cmpint(in[0], ==, 'D');
  g_assert_cmpint(in[2], ==, 'F');
  g_assert_cmpint(tg[2], ==, 'G');
}

static void test_shards(Fixture *fx, gconstpointer data)
{
  (void)data;
  g_autofree char *sub = g_build_filename(fx->dir, "shards", NULL);
  g_mkdir(sub, 0755);
  g_free(write_shard(sub, "train_000001.bin", 20240520, 1, 10, 10, 10, 50257));
  g_free(write_shard(sub, "train_000000.bin", 20240520, 1, 10, 10, 50000, 50257));
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortDataset) ds = cohort_dataset_open(sub, COHORT_DATA_TOKENS, 50257, 4, &error);
  g_assert_no_error(error);
  g_assert_cmpuint(cohort_dataset_num_tokens(ds), ==, 20);
  g_assert_cmpuint(cohort_dataset_num_windows(ds), ==, 4);
  int in[4], tg[4];
  /* Window 2: tokens 8..12, crossing from shard 0 (50000..50009) into shard 1 (10..19). */
  g_assert_true(cohort_dataset_window(ds, 2, in, tg, NULL));
  g_assert_cmpint(in[0], ==, 50008);
  g_assert_cmpint(in[1], ==, 50009);
  g_assert_cmpint(in[2], ==, 10);
  g_assert_cmpint(tg[3], ==, 12);

  g_autofree char *one = write_shard(fx->dir, "single.bin", 20240520, 1, 5, 5, 1, 7);
  g_autoptr(CohortDataset) ds1 = cohort_dataset_open(one, COHORT_DATA_TOKENS, 7, 2, &error);
  g_assert_no_error(error);
  g_assert_true(cohort_dataset_window(ds1, 1, in, tg, NULL));
  g_assert_cmpint(in[0], ==, 3);
  g_assert_cmpint(tg[1], ==, 5);
}

/* llm.c's layout: one folder holds both splits, and a pattern picks one. */
static void test_glob(Fixture *fx, gconstpointer data)
{
  (void)data;
  g_free(write_shard(fx->dir, "fineweb_train_000002.bin", 20240520, 1, 10, 10, 20, 100));
  g_free(write_shard(fx->dir, "fineweb_train_000001.bin", 20240520, 1, 10, 10, 10, 100));
  g_free(write_shard(fx->dir, "fineweb_val_000000.bin", 20240520, 1, 10, 10, 90, 100));
  g_autofree char *sub = g_build_filename(fx->dir, "fineweb_train_folder.bin", NULL);
  g_mkdir(sub, 0755); /* a folder the pattern matches is passed over */
  g_autofree char *train = g_build_filename(fx->dir, "fineweb_train_*.bin", NULL);
  g_autofree char *val = g_build_filename(fx->dir, "fineweb_val_*.bin", NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortDataset) tr = cohort_dataset_open(train, COHORT_DATA_TOKENS, 100, 4, &error);
  g_assert_no_error(error);
  g_assert_cmpuint(cohort_dataset_num_tokens(tr), ==, 20);
  int in[4], tg[4];
  /* In name order: 000001 (10..19) before 000002 (20..29). */
  g_assert_true(cohort_dataset_window(tr, 0, in, tg, NULL));
  g_assert_cmpint(in[0], ==, 10);
  g_assert_true(cohort_dataset_window(tr, 2, in, tg, NULL));
  g_assert_cmpint(in[2], ==, 20);
  g_autoptr(CohortDataset) va = cohort_dataset_open(val, COHORT_DATA_TOKENS, 100, 4, &error);
  g_assert_no_error(error);
  g_assert_cmpuint(cohort_dataset_num_tokens(va), ==, 10);
  g_assert_true(cohort_dataset_window(va, 0, in, tg, NULL));
  g_assert_cmpint(in[0], ==, 90);

  g_autofree char *none = g_build_filename(fx->dir, "fineweb_test_*.bin", NULL);
  expect_error(none, COHORT_DATA_TOKENS, 100, 4, COHORT_DATA_ERROR_IO,
               "no file matches this pattern");
  g_autofree char *fifo = g_build_filename(fx->dir, "fineweb_pipe_0.bin", NULL);
  g_assert_cmpint(mkfifo(fifo, 0644), ==, 0);
  g_autofree char *pipes = g_build_filename(fx->dir, "fineweb_pipe_*.bin", NULL);
  g_autoptr(CohortDataset) p = cohort_dataset_open(pipes, COHORT_DATA_TOKENS, 100, 4, &error);
  g_assert_null(p);
  g_assert_nonnull(strstr(error->message, fifo));
}

static void test_bad_files(Fixture *fx, gconstpointer data)
{
  (void)data;
  g_autofree char *missing = g_build_filename(fx->dir, "missing.bin", NULL);
  expect_error(missing, COHORT_DATA_TOKENS, 256, 4, COHORT_DATA_ERROR_IO, NULL);

  g_autofree char *magic = write_shard(fx->dir, "magic.bin", 12345, 1, 20, 20, 0, 256);
  expect_error(magic, COHORT_DATA_TOKENS, 256, 4, COHORT_DATA_ERROR_FORMAT, "12345");

  g_autofree char *version = write_shard(fx->dir, "version.bin", 20240520, 2, 20, 20, 0, 256);
  expect_error(version, COHORT_DATA_TOKENS, 256, 4, COHORT_DATA_ERROR_FORMAT, "version 2");

  g_autofree char *trunc = write_shard(fx->dir, "trunc.bin", 20240520, 1, 30, 20, 0, 256);
  expect_error(trunc, COHORT_DATA_TOKENS, 256, 4, COHORT_DATA_ERROR_FORMAT, "truncated");

  g_autofree char *trailing = write_shard(fx->dir, "trailing.bin", 20240520, 1, 10, 20, 0, 256);
  expect_error(trailing, COHORT_DATA_TOKENS, 256, 4, COHORT_DATA_ERROR_FORMAT, "trailing");

  g_autofree char *tiny = write_file(fx->dir, "tiny.bin", "abc", 3);
  expect_error(tiny, COHORT_DATA_TOKENS, 256, 4, COHORT_DATA_ERROR_FORMAT, "header");

  g_autofree char *vocab = write_shard(fx->dir, "vocab.bin", 20240520, 1, 20, 20, 250, 300);
  expect_error(vocab, COHORT_DATA_TOKENS, 256, 4, COHORT_DATA_ERROR_VOCAB, "256");

  g_autofree char *small = write_shard(fx->dir, "small.bin", 20240520, 1, 4, 4, 0, 256);
  expect_error(small, COHORT_DATA_TOKENS, 256, 4, COHORT_DATA_ERROR_TOO_SMALL, NULL);

  g_autofree char *short_text = write_file(fx->dir, "short.txt", "abcd", 4);
  expect_error(short_text, COHORT_DATA_TEXT, 256, 4, COHORT_DATA_ERROR_TOO_SMALL, NULL);

  g_autofree char *binary = write_file(fx->dir, "binary.txt",
                                       "ab\xff\xfe"
                                       "cdefgh",
                                       10);
  expect_error(binary, COHORT_DATA_TEXT, 256, 4, COHORT_DATA_ERROR_FORMAT, "UTF-8");

  g_autofree char *upper = write_file(fx->dir, "upper.txt", "abcdefgh", 8);
  expect_error(upper, COHORT_DATA_TEXT, 98, 4, COHORT_DATA_ERROR_VOCAB, "vocab_size 98");

  g_autofree char *empty_dir = g_build_filename(fx->dir, "empty", NULL);
  g_mkdir(empty_dir, 0755);
  expect_error(empty_dir, COHORT_DATA_TOKENS, 256, 4, COHORT_DATA_ERROR_IO, ".bin");

  /* A bad shard inside a folder is named by its own path. */
  g_autofree char *mixed = g_build_filename(fx->dir, "mixed", NULL);
  g_mkdir(mixed, 0755);
  g_free(write_shard(mixed, "a.bin", 20240520, 1, 20, 20, 0, 256));
  g_autofree char *bad = write_shard(mixed, "b.bin", 1, 1, 20, 20, 0, 256);
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortDataset) ds = cohort_dataset_open(mixed, COHORT_DATA_TOKENS, 256, 4, &error);
  g_assert_null(ds);
  g_assert_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_FORMAT);
  g_assert_nonnull(strstr(error->message, bad));
}

static void test_builtin_sample(void)
{
  const char *root = g_getenv("COHORT_DATA_DIR");
  if (!root) {
    g_test_skip("COHORT_DATA_DIR is not set");
    return;
  }
  g_autofree char *path = g_build_filename(root, "sample", "train.txt", NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortDataset) ds = cohort_dataset_open(path, COHORT_DATA_TEXT, 256, 128, &error);
  g_assert_no_error(error);
  g_assert_cmpuint(cohort_dataset_num_windows(ds), >, 100);
}

static void test_encode(void)
{
  int n = -1;
  g_autofree int *t = cohort_text_encode("A\xc3\xa9", &n);
  g_assert_cmpint(n, ==, 3);
  g_assert_cmpint(t[0], ==, 65);
  g_assert_cmpint(t[1], ==, 0xc3);
  g_assert_cmpint(t[2], ==, 0xa9);
  g_autofree int *e = cohort_text_encode("", &n);
  g_assert_cmpint(n, ==, 0);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add("/dataset/text-file", Fixture, NULL, fixture_setup, test_text_file, fixture_teardown);
  g_test_add("/dataset/text-folder", Fixture, NULL, fixture_setup, test_text_folder,
             fixture_teardown);
  g_test_add("/dataset/shards", Fixture, NULL, fixture_setup, test_shards, fixture_teardown);
  g_test_add("/dataset/glob", Fixture, NULL, fixture_setup, test_glob, fixture_teardown);
  g_test_add("/dataset/bad-files", Fixture, NULL, fixture_setup, test_bad_files, fixture_teardown);
  g_test_add("/dataset/prepared-index", Fixture, NULL, fixture_setup, test_prepared_index,
             fixture_teardown);
  g_test_add("/dataset/window-range-check", Fixture, NULL, fixture_setup, test_window_range_check,
             fixture_teardown);
  g_test_add("/dataset/not-regular", Fixture, NULL, fixture_setup, test_not_regular,
             fixture_teardown);
  g_test_add_func("/dataset/builtin-sample", test_builtin_sample);
  g_test_add_func("/dataset/encode", test_encode);
  return g_test_run();
}

/* The latent cache's journal (data/latent-cache.h) and the keys of latents (data/latent-set.h):
 *  - records written are found again after reopening, the newer of a key twice wins;
 *  - a torn end (a killed append) is cut at the last whole record, a record whose bytes were
 *    damaged ends the good part there, and appends go on from the cut;
 *  - a header of another latent size or of another kind of file starts the file afresh;
 *  - compaction keeps exactly the records asked for, only when enough are unwanted;
 *  - keys depend on the image's bytes (not its name), the VAE, the size, channels and flip;
 *  - reading a file hashes its bytes and decodes and fits it as the image set does. */
#include "data/image-decode.h"
#include "data/image-resize.h"
#include "data/latent-set.h"
#include "image-fixtures.h"
#include "test-util.h"

#include <fcntl.h>
#include <unistd.h>

#define F 6 /* floats per record */

static void key_of(int k, guint8 *key)
{
  memset(key, 0, COHORT_LATENT_KEY_BYTES);
  key[0] = (guint8)k;
  key[31] = (guint8)(k * 7);
}

static void values_of(int k, float *v)
{
  for (int i = 0; i < F; i++)
    v[i] = (float)(k * 10 + i);
}

static void append_n(CohortLatentCache *c, int from, int to)
{
  g_autoptr(GError) error = NULL;
  for (int k = from; k < to; k++) {
    guint8 key[32];
    float v[F];
    key_of(k, key);
    values_of(k, v);
    g_assert_true(cohort_latent_cache_append(c, key, v, &error));
    g_assert_no_error(error);
  }
}

static void expect_records(CohortLatentCache *c, int n)
{
  g_assert_cmpuint(cohort_latent_cache_count(c), ==, n);
  for (int k = 0; k < n; k++) {
    guint8 key[32];
    float v[F];
    key_of(k, key);
    values_of(k, v);
    const float *got = cohort_latent_cache_lookup(c, key);
    g_assert_nonnull(got);
    g_assert_cmpmem(got, sizeof v, v, sizeof v);
  }
}

static gsize record_bytes(void)
{
  return 32 + 4 + F * 4;
}

static void test_journal(void)
{
  g_autofree char *dir = tu_mkdtemp("latent-cache");
  g_autofree char *path = g_build_filename(dir, "sub", "latents.bin", NULL);
  g_autoptr(GError) error = NULL;
  CohortLatentCache *c = cohort_latent_cache_open(path, F, &error);
  g_assert_no_error(error);
  g_assert_cmpuint(cohort_latent_cache_count(c), ==, 0);
  append_n(c, 0, 70); /* past one group of fsyncs */
  guint8 missing[32];
  key_of(200, missing);
  g_assert_null(cohort_latent_cache_lookup(c, missing));
  cohort_latent_cache_free(c);

  c = cohort_latent_cache_open(path, F, &error);
  g_assert_no_error(error);
  g_assert_cmpuint(cohort_latent_cache_count_at_open(c), ==, 70);
  g_assert_cmpuint(cohort_latent_cache_cut_bytes(c), ==, 0);
  expect_records(c, 70);
  /* a key written again: the newer values win, after reopening too */
  guint8 key[32];
  float v[F] = {-1, -2, -3, -4, -5, -6};
  key_of(3, key);
  g_assert_true(cohort_latent_cache_append(c, key, v, &error));
  cohort_latent_cache_free(c);
  c = cohort_latent_cache_open(path, F, &error);
  g_assert_cmpuint(cohort_latent_cache_count(c), ==, 70);
  g_assert_cmpmem(cohort_latent_cache_lookup(c, key), sizeof v, v, sizeof v);
  cohort_latent_cache_free(c);
  tu_rm_rf(dir);
}

static void test_torn_end(void)
{
  g_autofree char *dir = tu_mkdtemp("latent-cache");
  g_autofree char *path = g_build_filename(dir, "latents.bin", NULL);
  g_autoptr(GError) error = NULL;
  CohortLatentCache *c = cohort_latent_cache_open(path, F, &error);
  append_n(c, 0, 5);
  cohort_latent_cache_free(c);
  /* a killed append: half of a sixth record */
  g_autofree guint8 *half = g_malloc0(record_bytes() / 2);
  int fd = open(path, O_WRONLY | O_APPEND);
  g_assert_cmpint(write(fd, half, record_bytes() / 2), ==, (ssize_t)(record_bytes() / 2));
  close(fd);
  c = cohort_latent_cache_open(path, F, &error);
  g_assert_no_error(error);
  g_assert_cmpuint(cohort_latent_cache_cut_bytes(c), ==, record_bytes() / 2);
  expect_records(c, 5);
  append_n(c, 5, 8); /* appends continue from the cut */
  cohort_latent_cache_free(c);
  c = cohort_latent_cache_open(path, F, &error);
  expect_records(c, 8);
  cohort_latent_cache_free(c);
  /* a damaged byte in record 4 (of 0..7): records 0-3 stay, the rest is cut */
  fd = open(path, O_RDWR);
  guint8 b = 0xff;
  g_assert_cmpint(pwrite(fd, &b, 1, 32 + 4 * record_bytes() + 40), ==, 1);
  close(fd);
  c = cohort_latent_cache_open(path, F, &error);
  g_assert_no_error(error);
  expect_records(c, 4);
  g_assert_cmpuint(cohort_latent_cache_cut_bytes(c), ==, 4 * record_bytes());
  cohort_latent_cache_free(c);
  /* another record size (another VAE's latents): a fresh file */
  c = cohort_latent_cache_open(path, F + 1, &error);
  g_assert_no_error(error);
  g_assert_cmpuint(cohort_latent_cache_count(c), ==, 0);
  cohort_latent_cache_free(c);
  /* not a cache at all: a fresh file too */
  g_assert_true(
      g_file_set_contents(path, "something else entirely, longer than a header", -1, NULL));
  c = cohort_latent_cache_open(path, F, &error);
  g_assert_no_error(error);
  g_assert_cmpuint(cohort_latent_cache_count(c), ==, 0);
  cohort_latent_cache_free(c);
  /* a folder where the file should be: an error naming it */
  g_unlink(path);
  g_mkdir(path, 0755);
  g_assert_null(cohort_latent_cache_open(path, F, &error));
  g_assert_nonnull(strstr(error->message, path));
  tu_rm_rf(dir);
}

static void test_compact(void)
{
  g_autofree char *dir = tu_mkdtemp("latent-cache");
  g_autofree char *path = g_build_filename(dir, "latents.bin", NULL);
  g_autoptr(GError) error = NULL;
  CohortLatentCache *c = cohort_latent_cache_open(path, F, &error);
  append_n(c, 0, 20);
  g_autoptr(GHashTable) keep =
      g_hash_table_new_full(g_bytes_hash, g_bytes_equal, (GDestroyNotify)g_bytes_unref, NULL);
  for (int k = 0; k < 18; k++) {
    guint8 key[32];
    key_of(k, key);
    g_hash_table_add(keep, g_bytes_new(key, 32));
  }
  /* 2 of 20 unwanted: not worth a rewrite */
  g_assert_true(cohort_latent_cache_compact(c, keep, &error));
  g_assert_cmpuint(cohort_latent_cache_count(c), ==, 20);
  g_hash_table_remove_all(keep);
  for (int k = 0; k < 10; k++) {
    guint8 key[32];
    key_of(k, key);
    g_hash_table_add(keep, g_bytes_new(key, 32));
  }
  g_assert_true(cohort_latent_cache_compact(c, keep, &error));
  g_assert_no_error(error);
  expect_records(c, 10);
  append_n(c, 10, 12); /* appends go to the rewritten file */
  cohort_latent_cache_free(c);
  GStatBuf st;
  g_assert_cmpint(g_stat(path, &st), ==, 0);
  g_assert_cmpint(st.st_size, ==, 32 + 12 * record_bytes());
  c = cohort_latent_cache_open(path, F, &error);
  expect_records(c, 12);
  cohort_latent_cache_free(c);
  tu_rm_rf(dir);
}

static void test_keys_and_files(void)
{
  g_autofree char *dir = tu_mkdtemp("latent-files");
  g_autofree char *cls = g_build_filename(dir, "a", NULL);
  g_mkdir(cls, 0755);
  guint8 px[12 * 10 * 3];
  for (int i = 0; i < 12 * 10 * 3; i++)
    px[i] = (guint8)(i * 7);
  g_autofree char *p1 = g_build_filename(cls, "one.png", NULL);
  g_autofree char *p2 = g_build_filename(cls, "two.png", NULL);
  fx_write_png8(p1, 12, 10, 3, px);
  fx_write_png8(p2, 12, 10, 3, px); /* the same image under another name */
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortLatentFiles) f = cohort_latent_files_scan(dir, 8, 3, FALSE, &error);
  g_assert_no_error(error);
  g_assert_cmpuint(cohort_latent_files_len(f), ==, 2);
  g_assert_cmpstr(cohort_latent_files_classes(f)[0], ==, "a");
  guint8 c1[32], c2[32];
  float pix[3 * 8 * 8];
  g_assert_true(cohort_latent_files_read(f, 0, c1, pix, &error));
  g_assert_true(cohort_latent_files_read(f, 1, c2, NULL, &error));
  g_assert_cmpmem(c1, 32, c2, 32);
  /* the pixels are what the image set gives for the file */
  CohortRawImage raw;
  g_assert_true(cohort_image_load(p1, 3, &raw, &error));
  guint8 chw[3 * 8 * 8];
  g_assert_true(cohort_image_fit(&raw, 8, 3, chw));
  cohort_raw_image_clear(&raw);
  for (int i = 0; i < 3 * 8 * 8; i++)
    g_assert_cmpfloat(pix[i], ==, chw[i] / 127.5f - 1.0f);
  /* keys: the same for the same bytes, different for anything else that matters */
  guint8 k[6][32];
  cohort_latent_key(c1, "aaaa", 8, 3, FALSE, k[0]);
  cohort_latent_key(c2, "aaaa", 8, 3, FALSE, k[1]);
  cohort_latent_key(c1, "aaab", 8, 3, FALSE, k[2]);
  cohort_latent_key(c1, "aaaa", 16, 3, FALSE, k[3]);
  cohort_latent_key(c1, "aaaa", 8, 1, FALSE, k[4]);
  cohort_latent_key(c1, "aaaa", 8, 3, TRUE, k[5]);
  g_assert_cmpmem(k[0], 32, k[1], 32);
  for (int i = 2; i < 6; i++)
    for (int j = 0; j < i; j++)
      g_assert_true(memcmp(k[i], k[j], 32) != 0);
  /* a changed image is another content */
  px[5] ^= 1;
  fx_write_png8(p2, 12, 10, 3, px);
  g_assert_true(cohort_latent_files_read(f, 1, c2, NULL, &error));
  g_assert_true(memcmp(c1, c2, 32) != 0);
  /* an unreadable image names its file */
  g_assert_true(g_file_set_contents(p2, "not a png", -1, NULL));
  g_assert_false(cohort_latent_files_read(f, 1, c2, pix, &error));
  g_assert_nonnull(strstr(error->message, "two.png"));
  /* the mirror image */
  float in[2 * 2 * 3] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, out[12];
  const float want[12] = {3, 2, 1, 6, 5, 4, 9, 8, 7, 12, 11, 10};
  cohort_latent_hflip(in, 2, 2, 3, out);
  g_assert_cmpmem(out, sizeof out, want, sizeof want);
  tu_rm_rf(dir);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/latent-cache/journal", test_journal);
  g_test_add_func("/latent-cache/torn-end", test_torn_end);
  g_test_add_func("/latent-cache/compact", test_compact);
  g_test_add_func("/latent-cache/keys-and-files", test_keys_and_files);
  return g_test_run();
}

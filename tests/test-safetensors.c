/* .safetensors: round trip, conversions, every bad-file case, and the atomic write. */
#include <math.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <glib/gstdio.h>
#include "engine/model/safetensors.h"
#include "test-util.h"

static char *tmp_dir;

static char *tmp_path(const char *name)
{
  return g_build_filename(tmp_dir, name, NULL);
}

/* A file made by hand: 8-byte length, the header text as given, then `data`. */
static char *write_raw(const char *name, guint64 header_len, const char *header, const void *data,
                       gsize data_len)
{
  char *path = tmp_path(name);
  gsize hl = strlen(header);
  g_autofree guint8 *buf = g_malloc(8 + hl + data_len + 1);
  guint64 le = GUINT64_TO_LE(header_len);
  memcpy(buf, &le, 8);
  memcpy(buf + 8, header, hl);
  if (data_len)
    memcpy(buf + 8 + hl, data, data_len);
  g_autoptr(GError) error = NULL;
  g_file_set_contents(path, (const char *)buf, (gssize)(8 + hl + data_len), &error);
  g_assert_no_error(error);
  return path;
}

static char *write_simple(const char *name, const char *header, const void *data, gsize len)
{
  return write_raw(name, strlen(header), header, data, len);
}

static void expect_open_error(const char *path, int code, const char *needle)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortStFile) f = cohort_safetensors_open(path, &error);
  g_assert_null(f);
  g_assert_error(error, COHORT_SAFETENSORS_ERROR, code);
  g_test_message("%s", error->message);
  g_assert_nonnull(strstr(error->message, path));
  if (needle)
    g_assert_nonnull(strstr(error->message, needle));
}

static void test_round_trip(void)
{
  float a[6] = {1.5f, -2.25f, 3e-8f, 1e30f, 0.0f, -0.0f};
  float b[24];
  for (int i = 0; i < 24; i++)
    b[i] = (float)i * 0.1f - 1.0f;
  float c[1] = {42.0f};
  CohortStEntry entries[] = {
      {.name = "h.0.attn.c_attn.weight", .data = a, .ndim = 2, .shape = {2, 3}},
      {.name = "cube", .data = b, .ndim = 3, .shape = {2, 3, 4}},
      {.name = "scalar", .data = c, .ndim = 0},
      {.name = "empty", .data = NULL, .ndim = 1, .shape = {0}},
  };
  g_autoptr(GHashTable) meta = g_hash_table_new(g_str_hash, g_str_equal);
  g_hash_table_insert(meta, "format", "pt");
  g_hash_table_insert(meta, "step", "1200");
  g_autofree char *path = tmp_path("round.safetensors");
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_safetensors_write(path, entries, G_N_ELEMENTS(entries), meta, &error));
  g_assert_no_error(error);

  /* The data section starts 8-byte aligned. */
  g_autofree char *contents = NULL;
  gsize len = 0;
  g_assert_true(g_file_get_contents(path, &contents, &len, NULL));
  guint64 hl;
  memcpy(&hl, contents, 8);
  g_assert_cmpuint(GUINT64_FROM_LE(hl) % 8, ==, 0);
  g_assert_cmpuint(len, ==, 8 + GUINT64_FROM_LE(hl) + 4 * (6 + 24 + 1));

  g_autoptr(CohortStFile) f = cohort_safetensors_open(path, &error);
  g_assert_no_error(error);
  const char *const *names = cohort_safetensors_names(f);
  g_assert_cmpuint(g_strv_length((char **)names), ==, 4);
  g_assert_cmpstr(names[0], ==, "h.0.attn.c_attn.weight");
  g_assert_cmpstr(cohort_safetensors_metadata(f, "format"), ==, "pt");
  g_assert_cmpstr(cohort_safetensors_metadata(f, "step"), ==, "1200");
  g_assert_null(cohort_safetensors_metadata(f, "nope"));
  g_assert_true(cohort_safetensors_has(f, "cube"));
  g_assert_false(cohort_safetensors_has(f, "cub"));

  int64_t shape[8];
  g_assert_cmpint(cohort_safetensors_shape(f, "cube", shape), ==, 3);
  g_assert_cmpint(shape[2], ==, 4);
  g_assert_cmpint(cohort_safetensors_shape(f, "scalar", shape), ==, 0);
  g_assert_cmpint(cohort_safetensors_shape(f, "missing", shape), ==, -1);

  float ra[6], rb[24], rc[1];
  g_assert_true(cohort_safetensors_read_f32(f, entries[0].name, 2, (int64_t[]){2, 3}, ra, &error));
  g_assert_true(cohort_safetensors_read_f32(f, "cube", 3, (int64_t[]){2, 3, 4}, rb, &error));
  g_assert_true(cohort_safetensors_read_f32(f, "scalar", 0, NULL, rc, &error));
  g_assert_no_error(error);
  g_assert_cmpmem(ra, sizeof ra, a, sizeof a);
  g_assert_cmpmem(rb, sizeof rb, b, sizeof b);
  g_assert_cmpfloat(rc[0], ==, 42.0f);
}

static void test_conversions(void)
{
  /* F16: 1, -2, 65504 (max), 2^-24 (smallest subnormal), +inf, 1/3 rounded. */
  guint16 h[6] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x7c00, 0x3555};
  /* BF16: 1, -3.140625, 2^-126 (smallest normal), 10 */
  guint16 bf[4] = {0x3f80, 0xc049, 0x0080, 0x4120};
  guint8 data[20];
  for (int i = 0; i < 6; i++) {
    guint16 v = GUINT16_TO_LE(h[i]);
    memcpy(data + 2 * i, &v, 2);
  }
  for (int i = 0; i < 4; i++) {
    guint16 v = GUINT16_TO_LE(bf[i]);
    memcpy(data + 12 + 2 * i, &v, 2);
  }
  g_autofree char *path =
      write_simple("conv.safetensors",
                   "{\"h\":{\"dtype\":\"F16\",\"shape\":[6],\"data_offsets\":[0,12]},"
                   "\"b\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[12,20]}}",
                   data, sizeof data);
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortStFile) f = cohort_safetensors_open(path, &error);
  g_assert_no_error(error);
  float rh[6], rb[4];
  g_assert_true(cohort_safetensors_read_f32(f, "h", 1, (int64_t[]){6}, rh, &error));
  g_assert_true(cohort_safetensors_read_f32(f, "b", 2, (int64_t[]){2, 2}, rb, &error));
  g_assert_no_error(error);
  g_assert_cmpfloat(rh[0], ==, 1.0f);
  g_assert_cmpfloat(rh[1], ==, -2.0f);
  g_assert_cmpfloat(rh[2], ==, 65504.0f);
  g_assert_cmpfloat(rh[3], ==, 5.9604644775390625e-8f);
  g_assert_true(isinf(rh[4]) && rh[4] > 0);
  g_assert_cmpfloat(rh[5], ==, 0.333251953125f);
  g_assert_cmpfloat(rb[0], ==, 1.0f);
  g_assert_cmpfloat(rb[1], ==, -3.140625f);
  g_assert_cmpfloat(rb[2], ==, 1.1754943508222875e-38f);
  g_assert_cmpfloat(rb[3], ==, 10.0f);
}

static void test_bad_files(void)
{
  float data[8] = {0};
  const char *good = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,4],\"data_offsets\":[0,32]}}";

  g_autofree char *missing = tmp_path("does-not-exist.safetensors");
  expect_open_error(missing, COHORT_SAFETENSORS_ERROR_IO, NULL);

  g_autofree char *trunc_data = write_simple("trunc-data.safetensors", good, data, 20);
  expect_open_error(trunc_data, COHORT_SAFETENSORS_ERROR_FORMAT, "outside");

  /* The length says more header than there is file. */
  g_autofree char *trunc_header =
      write_raw("trunc-header.safetensors", strlen(good), "{\"a\":{\"dt", NULL, 0);
  expect_open_error(trunc_header, COHORT_SAFETENSORS_ERROR_FORMAT, "header length");

  g_autofree char *absurd =
      write_raw("absurd.safetensors", G_GUINT64_CONSTANT(1) << 62, good, data, 32);
  expect_open_error(absurd, COHORT_SAFETENSORS_ERROR_FORMAT, "header length");

  g_autofree char *tiny = write_raw("tiny.safetensors", 0, "", NULL, 0);
  g_assert_true(g_file_set_contents(tiny, "abc", 3, NULL));
  expect_open_error(tiny, COHORT_SAFETENSORS_ERROR_FORMAT, "too short");

  g_autofree char *not_json = write_simple("notjson.safetensors", "{\"a\": [1, 2", data, 32);
  expect_open_error(not_json, COHORT_SAFETENSORS_ERROR_FORMAT, "JSON");

  g_autofree char *out_of_range =
      write_simple("range.safetensors",
                   "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,4],\"data_offsets\":[8,40]}}", data, 32);
  expect_open_error(out_of_range, COHORT_SAFETENSORS_ERROR_FORMAT, "outside");

  g_autofree char *reversed =
      write_simple("reversed.safetensors",
                   "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,0]}}", data, 32);
  expect_open_error(reversed, COHORT_SAFETENSORS_ERROR_FORMAT, "outside");

  g_autofree char *overlap =
      write_simple("overlap.safetensors",
                   "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[12,28]}}",
                   data, 32);
  expect_open_error(overlap, COHORT_SAFETENSORS_ERROR_FORMAT, "overlap");

  g_autofree char *size_mismatch =
      write_simple("size.safetensors",
                   "{\"a\":{\"dtype\":\"F32\",\"shape\":[3,4],\"data_offsets\":[0,32]}}", data, 32);
  expect_open_error(size_mismatch, COHORT_SAFETENSORS_ERROR_FORMAT, "[3, 4]");

  g_autofree char *unknown =
      write_simple("dtype.safetensors",
                   "{\"a\":{\"dtype\":\"F33\",\"shape\":[2,4],\"data_offsets\":[0,32]}}", data, 32);
  expect_open_error(unknown, COHORT_SAFETENSORS_ERROR_FORMAT, "F33");

  g_autofree char *neg = write_simple(
      "neg.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2,4],\"data_offsets\":[0,32]}}",
      data, 32);
  expect_open_error(neg, COHORT_SAFETENSORS_ERROR_FORMAT, "shape");

  g_autofree char *bad_meta =
      write_simple("meta.safetensors", "{\"__metadata__\":{\"a\":3}}", NULL, 0);
  expect_open_error(bad_meta, COHORT_SAFETENSORS_ERROR_FORMAT, "__metadata__");

  g_autofree char *array_root = write_simple("array.safetensors", "[1,2]", NULL, 0);
  expect_open_error(array_root, COHORT_SAFETENSORS_ERROR_FORMAT, "object");
}

/* Rewrites the 8-byte header length of the file at `path` to its value + `delta`. */
static void shift_header_length(const char *path, gint64 delta)
{
  g_autofree char *bytes = NULL;
  gsize len = 0;
  g_assert_true(g_file_get_contents(path, &bytes, &len, NULL));
  guint64 hl;
  memcpy(&hl, bytes, 8);
  hl = GUINT64_TO_LE((guint64)((gint64)GUINT64_FROM_LE(hl) + delta));
  memcpy(bytes, &hl, 8);
  g_assert_true(g_file_set_contents(path, bytes, (gssize)len, NULL));
}

/* The data section must be tiled exactly by the tensors, the header must be strict JSON, and
 * only regular files are opened. */
static void test_tiling_and_strict(void)
{
  float data[8] = {0};
  float v[6] = {1, 2, 3, 4, 5, 6};
  CohortStEntry e[] = {{"a", v, 1, {2}, FALSE, NULL}, {"b", v + 2, 2, {2, 2}, FALSE, NULL}};
  g_autoptr(GError) error = NULL;

  /* The header length off by one either way: every tensor would be shifted a byte. The
   * writer pads the header with spaces, so one byte less is still valid JSON. */
  for (gint64 delta = -1; delta <= 1; delta += 2) {
    g_autofree char *name = g_strdup_printf("shift%+d.safetensors", (int)delta);
    g_autofree char *path = tmp_path(name);
    g_assert_true(cohort_safetensors_write(path, e, 2, NULL, &error));
    g_assert_no_error(error);
    shift_header_length(path, delta);
    expect_open_error(path, COHORT_SAFETENSORS_ERROR_FORMAT,
                      delta < 0 ? "the tensors cover 24 bytes but the data section after the "
                                  "header has 25"
                                : NULL);
  }

  g_autofree char *gap =
      write_simple("gap.safetensors",
                   "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[16,32]}}",
                   data, 32);
  expect_open_error(gap, COHORT_SAFETENSORS_ERROR_FORMAT,
                    "tensor \"b\" starts at byte 16 of the data section but the tensors before "
                    "it end at byte 8");
  g_autofree char *not_at_zero =
      write_simple("late.safetensors",
                   "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", data, 16);
  expect_open_error(not_at_zero, COHORT_SAFETENSORS_ERROR_FORMAT, "starts at byte 8");
  guint8 longer[33] = {0};
  g_autofree char *trailing = write_simple(
      "trailing.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,4],\"data_offsets\":[0,32]}}",
      longer, sizeof longer);
  expect_open_error(trailing, COHORT_SAFETENSORS_ERROR_FORMAT,
                    "cover 32 bytes but the data section after the header has 33");
  g_autofree char *empty_but_data = write_simple("empty-data.safetensors", "{}", data, 4);
  expect_open_error(empty_but_data, COHORT_SAFETENSORS_ERROR_FORMAT, "cover 0 bytes");

  /* Valid: header order differs from data order, zero-size tensors, no tensors at all. */
  g_autofree char *shuffled =
      write_simple("shuffled.safetensors",
                   "{\"z\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[32,32]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[16,32]},"
                   "\"a\":{\"dtype\":\"F16\",\"shape\":[8],\"data_offsets\":[0,16]}}  \n",
                   data, 32);
  g_autoptr(CohortStFile) ok = cohort_safetensors_open(shuffled, &error);
  g_assert_no_error(error);
  const char *const *names = cohort_safetensors_names(ok);
  g_assert_cmpstr(names[0], ==, "a");
  g_assert_cmpstr(names[1], ==, "b");
  g_assert_cmpstr(names[2], ==, "z");
  g_autofree char *nothing = write_simple("nothing.safetensors", "{}", NULL, 0);
  g_autoptr(CohortStFile) none = cohort_safetensors_open(nothing, &error);
  g_assert_no_error(error);

  /* Strict JSON: a repeated tensor or metadata key, a BOM, trailing text are refused. */
  g_autofree char *dup =
      write_simple("dup.safetensors",
                   "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                   "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
                   data, 16);
  expect_open_error(dup, COHORT_SAFETENSORS_ERROR_FORMAT,
                    "header: key \"a\" is given more than once (at 1:55)");
  g_autofree char *dup_meta =
      write_simple("dupmeta.safetensors", "{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", NULL, 0);
  expect_open_error(dup_meta, COHORT_SAFETENSORS_ERROR_FORMAT, "key \"k\" is given more than once");
  g_autofree char *bom = write_simple("bom.safetensors", "\xEF\xBB\xBF{}", NULL, 0);
  expect_open_error(bom, COHORT_SAFETENSORS_ERROR_FORMAT, "header: not valid JSON: 1:1: a byte");
  g_autofree char *second = write_simple("second.safetensors", "{}{}", NULL, 0);
  expect_open_error(second, COHORT_SAFETENSORS_ERROR_FORMAT, "1:3: '{' after the end");

  /* A FIFO would block the reader forever; a folder is no file. */
  g_autofree char *fifo = tmp_path("fifo.safetensors");
  g_assert_cmpint(mkfifo(fifo, 0600), ==, 0);
  expect_open_error(fifo, COHORT_SAFETENSORS_ERROR_IO, "it is a FIFO (named pipe), not a regular");
  expect_open_error(tmp_dir, COHORT_SAFETENSORS_ERROR_IO, "it is a folder, not a regular file");
}

static void test_read_errors(void)
{
  gint32 ints[8] = {0};
  float data[8] = {0};
  g_autofree char *path =
      write_simple("read.safetensors",
                   "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,4],\"data_offsets\":[0,32]},"
                   "\"i\":{\"dtype\":\"I32\",\"shape\":[8],\"data_offsets\":[32,64]}}",
                   (guint8[64]){0}, 64);
  (void)ints;
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortStFile) f = cohort_safetensors_open(path, &error);
  g_assert_no_error(error);

  g_assert_false(cohort_safetensors_read_f32(f, "a", 2, (int64_t[]){4, 2}, data, &error));
  g_assert_error(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_SHAPE);
  g_assert_nonnull(strstr(error->message, "has shape [2, 4], expected [4, 2]"));
  g_assert_nonnull(strstr(error->message, path));
  g_clear_error(&error);

  g_assert_false(cohort_safetensors_read_f32(f, "a", 1, (int64_t[]){8}, data, &error));
  g_assert_error(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_SHAPE);
  g_clear_error(&error);

  g_assert_false(cohort_safetensors_read_f32(f, "b", 1, (int64_t[]){8}, data, &error));
  g_assert_error(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_MISSING);
  g_assert_nonnull(strstr(error->message, "\"b\""));
  g_clear_error(&error);

  g_assert_false(cohort_safetensors_read_f32(f, "i", 1, (int64_t[]){8}, data, &error));
  g_assert_error(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_DTYPE);
  g_assert_nonnull(strstr(error->message, "I32"));
}

static void test_write_errors(void)
{
  float v[2] = {1, 2};
  CohortStEntry twice[] = {
      {.name = "a", .data = v, .ndim = 1, .shape = {2}},
      {.name = "a", .data = v, .ndim = 1, .shape = {2}},
  };
  g_autofree char *path = tmp_path("twice.safetensors");
  g_autoptr(GError) error = NULL;
  g_assert_false(cohort_safetensors_write(path, twice, 2, NULL, &error));
  g_assert_error(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_FORMAT);
  g_assert_nonnull(strstr(error->message, "\"a\" is given twice"));
  g_assert_false(g_file_test(path, G_FILE_TEST_EXISTS));
  g_clear_error(&error);
  CohortStEntry reserved = {.name = "__metadata__", .data = v, .ndim = 1, .shape = {2}};
  g_assert_false(cohort_safetensors_write(path, &reserved, 1, NULL, &error));
  g_assert_error(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_FORMAT);
}

static guint count_entries(const char *dir)
{
  g_autoptr(GDir) d = g_dir_open(dir, 0, NULL);
  guint n = 0;
  while (d && g_dir_read_name(d))
    n++;
  return n;
}

/* A write that fails part-way (the file size limit is hit) leaves the old target as it was
 * and no temporary file behind. */
static void test_atomic_write(void)
{
  g_autofree char *dir = tmp_path("atomic");
  g_autofree char *target = g_build_filename(dir, "model.safetensors", NULL);
  if (!g_test_subprocess()) {
    g_mkdir(dir, 0755);
    g_assert_true(g_file_set_contents(target, "previous", -1, NULL));
  }

  if (g_test_subprocess()) {
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {.rlim_cur = 4096, .rlim_max = 4096};
    g_assert_cmpint(setrlimit(RLIMIT_FSIZE, &rl), ==, 0);
    g_autofree float *big = g_new0(float, 100000);
    CohortStEntry e = {.name = "big", .data = big, .ndim = 1, .shape = {100000}};
    g_autoptr(GError) error = NULL;
    g_assert_false(cohort_safetensors_write(target, &e, 1, NULL, &error));
    g_assert_error(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_IO);
    g_assert_nonnull(strstr(error->message, target));
    g_assert_cmpuint(count_entries(dir), ==, 1);
    g_print("atomic-subprocess-ran\n");
    return;
  }
  g_test_trap_subprocess(NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_passed();
  g_test_trap_assert_stdout("*atomic-subprocess-ran*");
  g_autofree char *contents = NULL;
  g_assert_true(g_file_get_contents(target, &contents, NULL, NULL));
  g_assert_cmpstr(contents, ==, "previous");
  g_assert_cmpuint(count_entries(dir), ==, 1);

  /* A folder that does not exist: a clean error, nothing created. */
  g_autofree char *nowhere = g_build_filename(dir, "no", "such", "x.safetensors", NULL);
  float v = 1;
  CohortStEntry e = {.name = "v", .data = &v, .ndim = 1, .shape = {1}};
  g_autoptr(GError) error = NULL;
  g_assert_false(cohort_safetensors_write(nowhere, &e, 1, NULL, &error));
  g_assert_error(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_IO);

  /* A read-only folder stops everyone but root. */
  if (geteuid() != 0) {
    g_assert_cmpint(g_chmod(dir, 0555), ==, 0);
    g_clear_error(&error);
    g_assert_false(cohort_safetensors_write(target, &e, 1, NULL, &error));
    g_assert_error(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_IO);
    g_chmod(dir, 0755);
    g_free(contents);
    g_assert_true(g_file_get_contents(target, &contents, NULL, NULL));
    g_assert_cmpstr(contents, ==, "previous");
  }
}

/* Counters (BatchNorm's num_batches_tracked) are written as I64, their bytes little-endian
 * int64, and read back as float32. */
static void test_i64(void)
{
  float w[2] = {0.5f, -1.0f}, n[1] = {12345.0f}, v[3] = {0.0f, 3.0f, 16777216.0f};
  CohortStEntry entries[] = {
      {.name = "w", .data = w, .ndim = 1, .shape = {2}},
      {.name = "bn.num_batches_tracked", .data = n, .ndim = 0, .int64 = TRUE},
      {.name = "counts", .data = v, .ndim = 1, .shape = {3}, .int64 = TRUE},
  };
  g_autofree char *path = tmp_path("i64.safetensors");
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_safetensors_write(path, entries, G_N_ELEMENTS(entries), NULL, &error));
  g_autofree char *contents = NULL;
  gsize len = 0;
  g_assert_true(g_file_get_contents(path, &contents, &len, NULL));
  guint64 hl;
  memcpy(&hl, contents, 8);
  hl = GUINT64_FROM_LE(hl);
  g_assert_cmpuint(len, ==, 8 + hl + 4 * 2 + 8 * 1 + 8 * 3);
  g_autofree char *header = g_strndup(contents + 8, hl);
  g_assert_nonnull(strstr(header, "\"bn.num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[]"));
  g_assert_nonnull(strstr(header, "\"counts\":{\"dtype\":\"I64\""));
  g_assert_nonnull(strstr(header, "\"w\":{\"dtype\":\"F32\""));
  gint64 raw;
  memcpy(&raw, contents + 8 + hl + 8, 8); /* after w's 8 bytes */
  g_assert_cmpint(GINT64_FROM_LE(raw), ==, 12345);

  g_autoptr(CohortStFile) f = cohort_safetensors_open(path, &error);
  g_assert_no_error(error);
  float rn[1], rv[3];
  g_assert_true(cohort_safetensors_read_f32(f, "bn.num_batches_tracked", 0, NULL, rn, &error));
  g_assert_true(cohort_safetensors_read_f32(f, "counts", 1, (int64_t[]){3}, rv, &error));
  g_assert_no_error(error);
  g_assert_cmpfloat(rn[0], ==, 12345.0f);
  g_assert_cmpmem(rv, sizeof rv, v, sizeof v);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  /* A subprocess of test_atomic_write works in its parent's folder. */
  if (g_test_subprocess())
    tmp_dir = g_strdup(g_getenv("COHORT_TEST_TMP"));
  else
    tmp_dir = tu_mkdtemp("st");
  g_assert_nonnull(tmp_dir);
  g_setenv("COHORT_TEST_TMP", tmp_dir, TRUE);
  g_test_add_func("/safetensors/round-trip", test_round_trip);
  g_test_add_func("/safetensors/f16-bf16", test_conversions);
  g_test_add_func("/safetensors/bad-files", test_bad_files);
  g_test_add_func("/safetensors/tiling-and-strict", test_tiling_and_strict);
  g_test_add_func("/safetensors/read-errors", test_read_errors);
  g_test_add_func("/safetensors/write-errors", test_write_errors);
  g_test_add_func("/safetensors/atomic-write", test_atomic_write);
  g_test_add_func("/safetensors/i64-counters", test_i64);
  int rc = g_test_run();
  if (!g_test_subprocess())
    tu_rm_rf(tmp_dir);
  g_free(tmp_dir);
  return rc;
}

/* PyTorch weight files (engine/model/torch-file.h) against files torch.save made
 * (tests/torch_pth_files.py) and PyTorch's own verdicts: every dtype, strided views and shared
 * storages read to the value; a training checkpoint's nested state dict; pickles that call
 * os.system or builtins.eval, build a collections.Counter or hold a whole module refused with
 * the global named, and nothing run; protocol 4 refused with the opcode named; the legacy
 * format refused with how to re-save; a deflated archive, a damaged CRC, a truncated file and a
 * folder refused; and the allowlist equal to the running PyTorch's. */
#include <glib.h>
#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

#include "engine/model/torch-allowlist.h"
#include "engine/base/fileio.h"
#include "engine/model/safetensors.h"
#include "engine/model/torch-file.h"
#include "engine/model/weights-file.h"
#include "engine/model/zip-stored.h"
#include "torch-ref.h"

static char *dir;

static gboolean have_torch(void)
{
  return g_file_test("/usr/bin/python3", G_FILE_TEST_IS_EXECUTABLE) &&
         system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
}

static char *path_of(const char *name)
{
  return g_build_filename(dir, name, NULL);
}

/* PyTorch's verdict on one of the files. */
static gboolean torch_accepts(const char *name)
{
  g_autofree char *p = path_of("verdicts.txt"), *text = NULL;
  g_assert_true(g_file_get_contents(p, &text, NULL, NULL));
  g_autofree char *want = g_strconcat(name, " accept\n", NULL);
  return strstr(text, want) != NULL;
}

static void test_values(void)
{
  g_autofree char *p = path_of("dtypes.pth"), *vp = path_of("values.txt"), *text = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortTorchFile) f = cohort_torch_file_open(p, &error);
  g_assert_no_error(error);
  g_assert_true(torch_accepts("dtypes.pth"));
  g_assert_cmpstr(cohort_torch_file_dict_path(f), ==, "");
  g_assert_true(g_file_get_contents(vp, &text, NULL, NULL));
  g_auto(GStrv) lines = g_strsplit(g_strstrip(text), "\n", -1);
  guint i = 0;
  for (; lines[i]; i++) {
    g_auto(GStrv) halves = g_strsplit(lines[i], " : ", 2);
    g_auto(GStrv) head = g_strsplit(halves[0], " ", -1);
    g_auto(GStrv) vals = g_strsplit(halves[1] ? halves[1] : "", " ", -1);
    const char *name = head[0];
    int ndim = atoi(head[1]);
    int64_t shape[8], got[8];
    size_t n = 1;
    for (int d = 0; d < ndim; d++)
      n *= (size_t)(shape[d] = g_ascii_strtoll(head[2 + d], NULL, 10));
    g_assert_cmpstr(cohort_torch_file_names(f)[i], ==, name); /* the dict's order */
    g_assert_cmpint(cohort_torch_file_shape(f, name, got), ==, ndim);
    g_autofree float *v = g_new0(float, MAX(n, 1));
    g_assert_true(cohort_torch_file_read_f32(f, name, ndim, shape, v, &error));
    g_assert_no_error(error);
    for (size_t k = 0; k < n; k++) /* float32 values, converted exactly */
      g_assert_cmpfloat(v[k], ==, (float)g_ascii_strtod(vals[k], NULL));
  }
  g_assert_null(cohort_torch_file_names(f)[i]);
  g_assert_cmpuint(i, ==, 10);
  /* a wrong shape or name is an error naming the tensor */
  int64_t wrong[2] = {3, 2};
  float buf[6];
  g_assert_false(cohort_torch_file_read_f32(f, "f32", 2, wrong, buf, &error));
  g_assert_error(error, COHORT_TORCH_FILE_ERROR, COHORT_TORCH_FILE_ERROR_SHAPE);
  g_assert_nonnull(strstr(error->message, "\"f32\" has shape [2, 3], expected [3, 2]"));
  g_clear_error(&error);
  g_assert_false(cohort_torch_file_read_f32(f, "nope", 2, wrong, buf, &error));
  g_assert_error(error, COHORT_TORCH_FILE_ERROR, COHORT_TORCH_FILE_ERROR_MISSING);
}

static void test_checkpoint(void)
{
  g_autofree char *p = path_of("checkpoint.pth");
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortTorchFile) f = cohort_torch_file_open(p, &error);
  g_assert_no_error(error);
  g_assert_true(torch_accepts("checkpoint.pth"));
  g_assert_cmpstr(cohort_torch_file_dict_path(f), ==, "state_dict");
  g_assert_cmpstr(cohort_torch_file_names(f)[0], ==, "f32");
  g_assert_cmpstr(cohort_torch_file_names(f)[1], ==, "count");
  float c;
  g_assert_true(cohort_torch_file_read_f32(f, "count", 0, NULL, &c, &error));
  g_assert_cmpfloat(c, ==, 7.0f);
}

/* Refused, as PyTorch refuses it, with a message that has `needle`; nothing ran. */
static void expect_refused(const char *name, int code, const char *needle)
{
  g_autofree char *p = path_of(name), *marker = path_of("MARKER");
  g_autoptr(GError) error = NULL;
  g_assert_null(cohort_torch_file_open(p, &error));
  g_assert_error(error, COHORT_TORCH_FILE_ERROR, code);
  if (!strstr(error->message, needle) || !strstr(error->message, p))
    g_error("%s: message \"%s\" lacks \"%s\" or the path", name, error->message, needle);
  g_assert_false(g_file_test(marker, G_FILE_TEST_EXISTS));
  g_test_message("%s", error->message);
}

static void test_malicious(void)
{
  const char *names[] = {"os_system.pth", "builtins_eval.pth", "counter.pth", "module.pth",
                         "protocol4.pth"};
  for (guint i = 0; i < G_N_ELEMENTS(names); i++)
    g_assert_false(torch_accepts(names[i]));
  expect_refused("os_system.pth", COHORT_TORCH_FILE_ERROR_REFUSED, "global \"posix.system\"");
  expect_refused("builtins_eval.pth", COHORT_TORCH_FILE_ERROR_REFUSED,
                 "global \"__builtin__.eval\"");
  expect_refused("counter.pth", COHORT_TORCH_FILE_ERROR_REFUSED, "global \"collections.Counter\"");
  expect_refused("module.pth", COHORT_TORCH_FILE_ERROR_REFUSED,
                 "global \"torch.nn.modules.linear.Linear\"");
  expect_refused("protocol4.pth", COHORT_TORCH_FILE_ERROR_REFUSED, "opcode FRAME (0x95)");
}

/* Two files PyTorch reads that Cohort refuses on purpose (docs/resnet.md): the legacy format,
 * which only an unrestricted unpickler reads in full, and a deflated archive, which torch.save
 * never writes. */
static void test_refused_formats(void)
{
  expect_refused("legacy.pth", COHORT_TORCH_FILE_ERROR_LEGACY, "torch.save(torch.load(");
  expect_refused("deflated.pth", COHORT_TORCH_FILE_ERROR_FORMAT, "is compressed (method 8)");
  g_autoptr(GError) error = NULL;
  g_assert_null(cohort_torch_file_open(dir, &error));
  g_assert_error(error, COHORT_TORCH_FILE_ERROR, COHORT_TORCH_FILE_ERROR_IO);
  g_assert_nonnull(strstr(error->message, "not a regular file"));
  g_clear_error(&error);

  /* A flipped byte in a tensor's record: the CRC says so when it is read; a cut file fails at
   * once. */
  g_autofree char *p = path_of("dtypes.pth"), *text = NULL;
  gsize len;
  g_assert_true(g_file_get_contents(p, &text, &len, NULL));
  g_autofree char *bent = path_of("bent.pth"), *cut = path_of("cut.pth");
  char *copy = g_memdup2(text, len);
  g_autoptr(CohortZip) zip = cohort_zip_open((const guint8 *)text, len, &error);
  g_assert_no_error(error);
  const CohortZipEntry *rec = cohort_zip_find(zip, "dtypes/data/0"); /* torch.save's folder */
  g_assert_nonnull(rec);
  copy[rec->offset + 2] ^= 0x40;
  g_assert_true(g_file_set_contents(bent, copy, (gssize)len, NULL));
  g_autoptr(CohortTorchFile) f = cohort_torch_file_open(bent, &error);
  int64_t shape[2] = {2, 3};
  float v[6];
  g_assert_no_error(error);
  g_assert_false(cohort_torch_file_read_f32(f, "f32", 2, shape, v, &error));
  g_assert_nonnull(strstr(error->message, "CRC-32"));
  g_clear_error(&error);
  g_assert_true(g_file_set_contents(cut, text, (gssize)(len - 30), NULL));
  g_assert_null(cohort_torch_file_open(cut, &error));
  g_assert_error(error, COHORT_TORCH_FILE_ERROR, COHORT_TORCH_FILE_ERROR_FORMAT);
  g_free(copy);
  g_unlink(bent);
  g_unlink(cut);
}

/* What init_from sends to this reader: ZIP archives and legacy pickles, not a safetensors
 * file whose 8-byte header length happens to start with 0x80. */
static void test_sniff(void)
{
  g_assert_true(cohort_torch_file_sniff((const guint8 *)"PK\x03\x04", 4));
  g_assert_true(cohort_torch_file_sniff((const guint8 *)"\x80\x02\x8a\x0a", 4));
  g_assert_false(cohort_torch_file_sniff((const guint8 *)"\x80\x00\x00\x00\x00\x00\x00\x00", 8));
  g_assert_false(cohort_torch_file_sniff((const guint8 *)"\x80\x02\x00\x00", 4));
  g_assert_false(cohort_torch_file_sniff((const guint8 *)"PK", 2));
}

/* A file to `name` in a fresh folder; returns its path (the folder is its parent). */
static char *scratch_file(const char *name, const void *bytes, gsize len)
{
  g_autofree char *d = g_dir_make_tmp("cohort-test-pth-XXXXXX", NULL);
  g_assert_nonnull(d);
  char *p = g_build_filename(d, name, NULL);
  g_assert_true(g_file_set_contents(p, bytes, (gssize)len, NULL));
  return p;
}

/* `path` through init_from's reader: refused in one line naming the file and `needle`, not
 * as a damaged safetensors file. */
static void expect_named(const char *path, const char *needle)
{
  g_autoptr(GError) error = NULL;
  g_assert_null(cohort_weights_file_open(path, &error));
  g_assert_nonnull(error);
  g_test_message("%s", error->message);
  g_assert_null(strchr(error->message, '\n'));
  if (!strstr(error->message, needle) || !strstr(error->message, path))
    g_error("\"%s\" lacks \"%s\" or the path", error->message, needle);
  g_assert_null(strstr(error->message, "header length"));
  g_autofree char *d = g_path_get_dirname(path);
  cohort_remove_tree(d);
}

/* A .pth that is no ZIP archive says what it is (a pickle: the legacy format of another
 * protocol, or pickle.dump) or what it is not; a safetensors-only reader names a ZIP archive
 * as PyTorch's format. No PyTorch needed. */
static void test_not_zip(void)
{
  /* pickle protocol 4, as torch.save(..., _use_new_zipfile_serialization=False,
   * pickle_protocol=4) and pickle.dump start: PROTO 4, FRAME */
  const guint8 p4[] = {0x80, 0x04, 0x95, 0x0b, 0, 0, 0, 0, 0, 0, 0, 0x7d, 0x94, 0x2e};
  g_autofree char *pickle = scratch_file("weights.pth", p4, sizeof p4);
  expect_named(pickle, "a Python pickle");
  const char junk[] = "these are not the weights you are looking for";
  g_autofree char *text = scratch_file("model.pth", junk, sizeof junk);
  expect_named(text, "torch.save has written ZIP archives since PyTorch 1.6");
  /* a ZIP archive where only safetensors is taken */
  const guint8 zip[] = {'P', 'K', 5, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  g_autofree char *pt = scratch_file("model.safetensors", zip, sizeof zip);
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortStFile) f = cohort_safetensors_open(pt, &error);
  g_assert_null(f);
  g_test_message("%s", error->message);
  g_assert_nonnull(strstr(error->message, "a ZIP archive (PyTorch's torch.save format"));
  g_autofree char *d = g_path_get_dirname(pt);
  cohort_remove_tree(d);
}

static void test_allowlist(void)
{
  g_autofree char *p = path_of("allowlist.txt"), *text = NULL;
  g_assert_true(g_file_get_contents(p, &text, NULL, NULL));
  g_auto(GStrv) names = g_strsplit(g_strstrip(text), "\n", -1);
  for (guint i = 0; names[i]; i++)
    if (!cohort_torch_allowlist_find(names[i]))
      g_error("PyTorch allows \"%s\"; Cohort's table lacks it", names[i]);
  g_assert_cmpuint(cohort_torch_allowlist_count(), ==, g_strv_length(names));
  g_assert_null(cohort_torch_allowlist_find("posix.system"));
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/torch-file/sniff", test_sniff);
  g_test_add_func("/torch-file/not-zip", test_not_zip);
  if (!have_torch()) {
    g_test_message("PyTorch is not importable by /usr/bin/python3: no files to read");
    return g_test_run();
  }
  g_autoptr(GError) error = NULL;
  dir = g_dir_make_tmp("cohort-test-torch-file-XXXXXX", &error);
  g_assert_no_error(error);
  g_free(torch_ref_run("torch_pth_files.py", (const char *const[]){dir, NULL}));
  g_test_add_func("/torch-file/values", test_values);
  g_test_add_func("/torch-file/checkpoint", test_checkpoint);
  g_test_add_func("/torch-file/malicious", test_malicious);
  g_test_add_func("/torch-file/refused-formats", test_refused_formats);
  g_test_add_func("/torch-file/allowlist", test_allowlist);
  int rc = g_test_run();
  cohort_remove_tree(dir);
  g_free(dir);
  return rc;
}

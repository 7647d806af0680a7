/* Running tests/torch_distill_ref.py (float64 PyTorch) from the distillation tests: a JSON spec,
 * the inputs as raw float32/int32, results back as float64 (header-only, tests only). */
#pragma once

#include <glib.h>
#include <glib/gstdio.h>
#include <math.h>
#include <stdlib.h>

#include "torch-ref.h"

/* TRUE when /usr/bin/python3 imports torch; else marks the test skipped. */
static inline gboolean ref_have_torch(void)
{
  if (g_file_test("/usr/bin/python3", G_FILE_TEST_IS_EXECUTABLE) &&
      system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0)
    return TRUE;
  g_test_skip("PyTorch is not importable by /usr/bin/python3");
  return FALSE;
}

/* Runs the script on `spec` (JSON text) and `inputs`; returns its doubles (g_free them). */
static inline double *ref_run(const char *spec, GByteArray *inputs, size_t *n_out)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *dir = g_dir_make_tmp("cohort-distill-ref-XXXXXX", &error);
  g_assert_no_error(error);
  g_autofree char *spec_path = g_build_filename(dir, "spec.json", NULL);
  g_autofree char *in_path = g_build_filename(dir, "in.bin", NULL);
  g_autofree char *out_path = g_build_filename(dir, "out.bin", NULL);
  g_assert_true(g_file_set_contents(spec_path, spec, -1, &error));
  g_assert_true(g_file_set_contents(in_path, (const char *)inputs->data, inputs->len, &error));
  g_free(
      torch_ref_run("torch_distill_ref.py", (const char *[]){spec_path, in_path, out_path, NULL}));
  char *data = NULL;
  gsize len = 0;
  g_assert_true(g_file_get_contents(out_path, &data, &len, &error));
  g_unlink(spec_path), g_unlink(in_path), g_unlink(out_path), g_rmdir(dir);
  *n_out = len / sizeof(double);
  return (double *)data;
}

/* Fails unless |ours[i] - ref[i]| <= rtol * max|ref| + atol for every i; returns the largest
 * difference. */
static inline double ref_compare(const char *what, const float *ours, const double *ref, size_t n,
                                 double rtol, double atol)
{
  double mx = 0, worst = 0;
  for (size_t i = 0; i < n; i++)
    mx = fmax(mx, fabs(ref[i]));
  for (size_t i = 0; i < n; i++) {
    double e = fabs(ours[i] - ref[i]);
    if (!(e <= rtol * mx + atol))
      g_error("%s[%zu]: ours %.9g, PyTorch %.9g (largest |PyTorch| %.3g)", what, i, ours[i], ref[i],
              mx);
    worst = fmax(worst, e);
  }
  g_test_message("%s: %zu values, largest difference %.2e (largest |PyTorch| %.3g)", what, n, worst,
                 mx);
  return worst;
}

/* Cross-attention with key padding (kernels/backend.h: cross_attention_*) and the PixArt-α block
 * (engine/models/pixart-block.h) on the CPU backend:
 *   - the op's forward against a float64 loop, its gradients against central finite
 *     differences, keys past klen without influence or gradient, an example without keys
 *     giving zeros;
 *   - the block's output, d(x), d(temb), d(ctx) and every weight gradient against
 *     tests/torch_pixart_ref.py (diffusers' BasicTransformerBlock for PixArt in float64 PyTorch,
 *     loading our tensors by name with strict=True), within 1e-5 of each tensor's largest
 *     value, with padding in one example and no text at all in another. */
#include <glib.h>
#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

#include "engine/models/pixart-block.h"
#include "kernels/backend.h"
#include "torch-ref.h"

static guint32 lcg = 12345;

static float urand(float lo, float hi)
{
  lcg = lcg * 1664525u + 1013904223u;
  return lo + (hi - lo) * (float)(lcg >> 8) / 16777216.0f;
}

static void fill(float *x, size_t n, float lo, float hi)
{
  for (size_t i = 0; i < n; i++)
    x[i] = urand(lo, hi);
}

/* ---- the op ---- */
enum { XB = 3, XQ = 5, XK = 6, XH = 2, XD = 4, XC = XH * XD };
static const int xklen[XB] = {6, 2, 0};

/* out of the op in float64, from its definition. */
static void cross_ref(double *out, const float *q, const float *k, const float *v)
{
  for (int b = 0; b < XB; b++)
    for (int h = 0; h < XH; h++)
      for (int i = 0; i < XQ; i++) {
        double s[XK], mx = -INFINITY, sum = 0;
        const float *qi = q + ((size_t)b * XQ + i) * XC + h * XD;
        for (int j = 0; j < xklen[b]; j++) {
          const float *kj = k + ((size_t)b * XK + j) * XC + h * XD;
          s[j] = 0;
          for (int d = 0; d < XD; d++)
            s[j] += (double)qi[d] * kj[d];
          s[j] /= sqrt(XD);
          mx = fmax(mx, s[j]);
        }
        for (int j = 0; j < xklen[b]; j++)
          sum += s[j] = exp(s[j] - mx);
        for (int d = 0; d < XD; d++) {
          double acc = 0;
          for (int j = 0; j < xklen[b]; j++)
            acc += s[j] / sum * v[((size_t)b * XK + j) * XC + h * XD + d];
          out[((size_t)b * XQ + i) * XC + h * XD + d] = acc;
        }
      }
}

static double cross_loss(const CohortBackend *be, const float *q, const float *k, const float *v,
                         const float *R)
{
  float out[XB * XQ * XC], lse[XB * XH * XQ];
  be->cross_attention_forward(out, lse, q, k, v, xklen, XB, XQ, XK, XH, XD);
  double L = 0;
  for (int i = 0; i < XB * XQ * XC; i++)
    L += (double)out[i] * R[i];
  return L;
}

static void test_cross_op(void)
{
  const CohortBackend *be = cohort_backend_cpu();
  float q[XB * XQ * XC], k[XB * XK * XC], v[XB * XK * XC], R[XB * XQ * XC];
  fill(q, G_N_ELEMENTS(q), -1, 1), fill(k, G_N_ELEMENTS(k), -1, 1);
  fill(v, G_N_ELEMENTS(v), -1, 1), fill(R, G_N_ELEMENTS(R), -1, 1);
  float out[XB * XQ * XC], lse[XB * XH * XQ];
  double ref[XB * XQ * XC];
  be->cross_attention_forward(out, lse, q, k, v, xklen, XB, XQ, XK, XH, XD);
  cross_ref(ref, q, k, v);
  for (int i = 0; i < XB * XQ * XC; i++)
    g_assert_cmpfloat(fabs(out[i] - ref[i]), <, 1e-6);
  for (int i = 0; i < XQ * XC; i++) /* the example without keys: zeros */
    g_assert_cmpfloat(out[2 * XQ * XC + i], ==, 0.0f);
  for (int i = 0; i < XH * XQ; i++)
    g_assert_true(isinf(lse[2 * XH * XQ + i]) && lse[2 * XH * XQ + i] < 0);

  /* keys and values past klen change nothing, bit for bit */
  float k2[G_N_ELEMENTS(k)], v2[G_N_ELEMENTS(v)], out2[G_N_ELEMENTS(out)], lse2[G_N_ELEMENTS(lse)];
  memcpy(k2, k, sizeof k), memcpy(v2, v, sizeof v);
  for (int b = 0; b < XB; b++)
    for (int j = xklen[b]; j < XK; j++)
      for (int c = 0; c < XC; c++)
        k2[((size_t)b * XK + j) * XC + c] = 1e3f, v2[((size_t)b * XK + j) * XC + c] = NAN;
  be->cross_attention_forward(out2, lse2, q, k2, v2, xklen, XB, XQ, XK, XH, XD);
  g_assert_cmpmem(out, sizeof out, out2, sizeof out2);

  /* gradients of L = sum(out * R) against central differences (float forward: eps 1e-2) */
  float dq[G_N_ELEMENTS(q)], dk[G_N_ELEMENTS(k)], dv[G_N_ELEMENTS(v)];
  be->cross_attention_backward(dq, dk, dv, R, q, k, v, out, lse, xklen, XB, XQ, XK, XH, XD);
  struct {
    const char *name;
    float *x, *g;
    size_t n;
  } wrt[] = {
      {"q", q, dq, G_N_ELEMENTS(q)}, {"k", k, dk, G_N_ELEMENTS(k)}, {"v", v, dv, G_N_ELEMENTS(v)}};
  double worst = 0;
  for (guint t = 0; t < G_N_ELEMENTS(wrt); t++)
    for (size_t i = 0; i < wrt[t].n; i++) {
      float keep = wrt[t].x[i], eps = 1e-2f;
      wrt[t].x[i] = keep + eps;
      double up = cross_loss(be, q, k, v, R);
      wrt[t].x[i] = keep - eps;
      double down = cross_loss(be, q, k, v, R);
      wrt[t].x[i] = keep;
      double fd = (up - down) / (2 * eps), e = fabs(fd - wrt[t].g[i]);
      worst = fmax(worst, e);
      if (e > 2e-4)
        g_error("d%s[%zu]: backward %.6g, finite differences %.6g", wrt[t].name, i, wrt[t].g[i],
                fd);
    }
  g_test_message("cross-attention: worst |backward - finite differences| %.2g", worst);
  /* masked keys: exactly zero gradients; the example without keys: dq zero too */
  for (int b = 0; b < XB; b++)
    for (int j = xklen[b]; j < XK; j++)
      for (int c = 0; c < XC; c++) {
        g_assert_cmpfloat(dk[((size_t)b * XK + j) * XC + c], ==, 0.0f);
        g_assert_cmpfloat(dv[((size_t)b * XK + j) * XC + c], ==, 0.0f);
      }
  for (int i = 0; i < XQ * XC; i++)
    g_assert_cmpfloat(dq[2 * XQ * XC + i], ==, 0.0f);
}

/* ---- the block ---- */
enum { B = 3, N = 10, M = 7 };
static const CohortPixartShape shape = {
    .hidden = 32, .n_head = 4, .cross_dim = 24, .ff_inner = 128};
static const int klen[B] = {7, 3, 0};

static gboolean have_torch(void)
{
  return g_file_test("/usr/bin/python3", G_FILE_TEST_IS_EXECUTABLE) &&
         system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
}

/* |ours - ref| <= 1e-5 max(max|ref|, floor) (1e-12 for an all-zero tensor); returns the worst
 * relative error. */
static double max_abs(const GArray *ref)
{
  double mx = 0;
  for (guint k = 0; k < ref->len; k++)
    mx = fmax(mx, fabs(g_array_index(ref, double, k)));
  return mx;
}

static double compare(const char *what, const float *ours, const GArray *ref, size_t n,
                      double floor)
{
  g_assert_nonnull(ref);
  g_assert_cmpuint(ref->len, ==, n);
  double mx = floor, worst = 0;
  for (size_t k = 0; k < n; k++)
    mx = fmax(mx, fabs(g_array_index(ref, double, k)));
  for (size_t k = 0; k < n; k++) {
    double r = g_array_index(ref, double, k), e = fabs(ours[k] - r);
    if (!(e <= 1e-5 * mx + 1e-12))
      g_error("%s[%zu]: ours %.9g, PyTorch %.9g (tensor max %.3g)", what, k, ours[k], r, mx);
    worst = fmax(worst, mx > 0 ? e / mx : 0);
  }
  return worst;
}

/* Runs the reference on these inputs and tensors: name → values. */
static GHashTable *run_reference(const float *x, const float *temb, const float *ctx,
                                 const float *R, float *const *t)
{
  const CohortPixartShape *s = &shape;
  int C = s->hidden;
  g_autoptr(GError) error = NULL;
  g_autofree char *dir = g_dir_make_tmp("cohort-test-pixart-XXXXXX", &error);
  g_assert_no_error(error);
  g_autofree char *inputs = g_build_filename(dir, "inputs.bin", NULL);
  g_autofree char *names = g_build_filename(dir, "names.txt", NULL);
  GByteArray *bin = g_byte_array_new();
  int head[7] = {B, N, M, C, s->n_head, s->cross_dim, s->ff_inner};
  g_byte_array_append(bin, (const guint8 *)head, sizeof head);
  g_byte_array_append(bin, (const guint8 *)klen, sizeof klen);
  g_byte_array_append(bin, (const guint8 *)x, sizeof(float) * B * N * C);
  g_byte_array_append(bin, (const guint8 *)temb, sizeof(float) * B * 6 * C);
  g_byte_array_append(bin, (const guint8 *)ctx, sizeof(float) * B * M * s->cross_dim);
  g_byte_array_append(bin, (const guint8 *)R, sizeof(float) * B * N * C);
  GString *list = g_string_new(NULL);
  for (int p = 0; p < PB_COUNT; p++) {
    g_byte_array_append(bin, (const guint8 *)t[p],
                        (guint)(sizeof(float) * cohort_pixart_block_numel(s, p)));
    g_string_append_printf(list, "%s\n", cohort_pixart_block_name(p));
  }
  g_assert_true(g_file_set_contents(inputs, (const char *)bin->data, bin->len, &error));
  g_assert_true(g_file_set_contents(names, list->str, -1, &error));
  g_byte_array_unref(bin), g_string_free(list, TRUE);
  const char *args[] = {inputs, names, NULL};
  g_autofree char *out = torch_ref_run("torch_pixart_ref.py", args);
  g_unlink(inputs), g_unlink(names), g_rmdir(dir);

  GHashTable *ref =
      g_hash_table_new_full(g_str_hash, g_str_equal, g_free, (GDestroyNotify)g_array_unref);
  g_auto(GStrv) lines = g_strsplit(g_strstrip(out), "\n", -1);
  for (guint i = 0; lines[i]; i++) {
    g_auto(GStrv) f = g_strsplit(lines[i], " ", -1);
    GArray *v = g_array_new(FALSE, FALSE, sizeof(double));
    for (guint k = 1; f[k]; k++) {
      double d = g_ascii_strtod(f[k], NULL);
      g_array_append_val(v, d);
    }
    g_hash_table_insert(ref, g_strdup(f[0]), v);
  }
  return ref;
}

static void test_block_torch(void)
{
  if (!have_torch()) {
    g_test_skip("PyTorch is not importable by /usr/bin/python3");
    return;
  }
  const CohortBackend *be = cohort_backend_cpu();
  const CohortPixartShape *s = &shape;
  int C = s->hidden, D = s->cross_dim;
  size_t nx = (size_t)B * N * C, nt = (size_t)B * 6 * C, nc = (size_t)B * M * D;
  /* tensors and their gradients (CPU backend memory is host memory) */
  CohortPixartWeights w = {0}, g = {0};
  for (int p = 0; p < PB_COUNT; p++) {
    int dims[2];
    int rank = cohort_pixart_block_dims(s, p, dims);
    size_t n = cohort_pixart_block_numel(s, p);
    w.t[p] = be->alloc(sizeof(float) * n);
    g.t[p] = be->alloc(sizeof(float) * n);
    float r = p == PB_TABLE ? 0.4f : rank == 2 ? 1.0f / sqrtf((float)dims[1]) : 0.1f;
    fill(w.t[p], n, -r, r);
  }
  float *x = be->alloc(sizeof(float) * nx), *temb = be->alloc(sizeof(float) * nt);
  float *ctx = be->alloc(sizeof(float) * nc), *R = be->alloc(sizeof(float) * nx);
  float *dres = be->alloc(sizeof(float) * nx), *dtemb = be->alloc(sizeof(float) * nt);
  float *dctx = be->alloc(sizeof(float) * nc);
  fill(x, nx, -1, 1), fill(temb, nt, -0.5f, 0.5f), fill(ctx, nc, -1, 1), fill(R, nx, -1, 1);
  size_t floats = cohort_pixart_acts_floats(s, B, N, M);
  float *mem = be->alloc(sizeof(float) * floats);
  CohortPixartActs a;
  cohort_pixart_acts_layout(&a, mem, s, B, N, M);

  double t0 = g_get_monotonic_time();
  cohort_pixart_block_forward(be, s, &w, &a, x, temb, ctx, klen, B, N, M);
  memcpy(dres, R, sizeof(float) * nx); /* d(sum(out * R)) / d out */
  cohort_pixart_block_backward(be, s, &w, &g, &a, x, ctx, klen, B, N, M, dres, dtemb, dctx);
  double ours_ms = (g_get_monotonic_time() - t0) / 1e3;

  g_autoptr(GHashTable) ref = run_reference(x, temb, ctx, R, w.t);
  double worst = 0;
  worst = fmax(worst, compare("out", a.out, g_hash_table_lookup(ref, "out"), nx, 0));
  worst = fmax(worst, compare("dx", dres, g_hash_table_lookup(ref, "dx"), nx, 0));
  worst = fmax(worst, compare("dtemb", dtemb, g_hash_table_lookup(ref, "dtemb"), nt, 0));
  worst = fmax(worst, compare("dctx", dctx, g_hash_table_lookup(ref, "dctx"), nc, 0));
  for (int p = 0; p < PB_COUNT; p++) {
    const char *name = cohort_pixart_block_name(p);
    /* a key bias moves every score of a row alike, which softmax ignores: its gradient is 0 in
     * exact arithmetic and rounding noise here, measured against its weight's gradient */
    double floor = 0;
    if (p == PB_K1_B || p == PB_K2_B)
      floor = max_abs(g_hash_table_lookup(ref, cohort_pixart_block_name(p - 1)));
    worst = fmax(worst, compare(name, g.t[p], g_hash_table_lookup(ref, name),
                                cohort_pixart_block_numel(s, p), floor));
  }
  /* padding text tokens (and every token of the example without text) get no gradient */
  for (int b = 0; b < B; b++)
    for (int j = klen[b]; j < M; j++)
      for (int c = 0; c < D; c++)
        g_assert_cmpfloat(dctx[((size_t)b * M + j) * D + c], ==, 0.0f);
  g_test_message("PixArt block vs float64 PyTorch: worst error %.2g of a tensor's largest value "
                 "(forward + backward %.1f ms)",
                 worst, ours_ms);

  for (int p = 0; p < PB_COUNT; p++)
    be->free(w.t[p]), be->free(g.t[p]);
  be->free(x), be->free(temb), be->free(ctx), be->free(R), be->free(dres), be->free(dtemb);
  be->free(dctx), be->free(mem);
}

/* diffusers' names and shapes, which exports and LoRA targets (attn2.*) will use. */
static void test_block_names(void)
{
  int dims[2];
  g_assert_cmpstr(cohort_pixart_block_name(PB_K2_W), ==, "attn2.to_k.weight");
  g_assert_cmpint(cohort_pixart_block_dims(&shape, PB_K2_W, dims), ==, 2);
  g_assert_cmpint(dims[0], ==, 32);
  g_assert_cmpint(dims[1], ==, 24);
  g_assert_cmpint(cohort_pixart_block_dims(&shape, PB_K2_B, dims), ==, 1);
  g_assert_cmpint(dims[0], ==, 32);
  g_assert_cmpstr(cohort_pixart_block_name(PB_FF1_W), ==, "ff.net.0.proj.weight");
  g_assert_cmpuint(cohort_pixart_block_numel(&shape, PB_FF1_W), ==, 128 * 32);
  g_assert_cmpuint(cohort_pixart_block_numel(&shape, PB_TABLE), ==, 6 * 32);
  size_t total = 0;
  for (int p = 0; p < PB_COUNT; p++)
    total += cohort_pixart_block_numel(&shape, p);
  /* 6C + 6 (C² + C) + 2 (C D + C) + 2 (C F) + F + C */
  g_assert_cmpuint(total, ==,
                   6 * 32 + 6 * (32 * 32 + 32) + 2 * (32 * 24 + 32) + 2 * 32 * 128 + 128 + 32);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/pixart/cross-attention/op", test_cross_op);
  g_test_add_func("/pixart/block/names", test_block_names);
  g_test_add_func("/pixart/block/torch", test_block_torch);
  return g_test_run();
}

/* The CPU kernels the VAE (diffusers' AutoencoderKL) adds: GroupNorm, nearest up-sampling, zero
 * padding, a convolution's channel bias and the softmax of rows.
 *  - forwards against loops in double written here (1e-5 relative);
 *  - gradients against central finite differences of J = sum(out * R) (tests/fd-check.h): the
 *    linear ops (up-sampling, padding, bias) with step 0.5, where only float rounding is left,
 *    GroupNorm and softmax with the header's step and tolerances;
 *  - backward passes accumulate where the table says so;
 *  - every op forward and backward against float64 PyTorch (tests/torch_vae_ops_ref.py, the
 *    functional ops diffusers calls: F.group_norm, F.interpolate(mode="nearest"), F.pad,
 *    softmax), |ours - torch| <= 1e-5 of the largest |torch| value of each output; skipped
 *    when /usr/bin/python3 cannot import torch. */
#include "fd-check.h"
#include "torch-ref.h"
#include "kernels/backend.h"

#include <glib/gstdio.h>
#include <stdlib.h>
#include <string.h>

static const CohortBackend *be;

/* Analytic gradient against central differences with step h and tolerances of our own (the
 * linear ops: no truncation error). */
static void check_grad_h(float *x, const float *grad, size_t n, Objective f, gpointer ctx, float h,
                         double atol, const char *what)
{
  double worst = 0.0;
  for (size_t i = 0; i < n; i++) {
    float keep = x[i];
    x[i] = keep + h;
    double jp = f(ctx);
    x[i] = keep - h;
    double jm = f(ctx);
    x[i] = keep;
    double fd = (jp - jm) / (2.0 * (double)h);
    double err = fabs(fd - grad[i]);
    if (err > atol + 1e-5 * fabs(grad[i]))
      g_error("%s: d/dx[%zu] analytic %.8g, finite difference %.8g", what, i, grad[i], fd);
    worst = fmax(worst, err);
  }
  g_test_message("%s: %zu gradients, largest |fd - analytic| %.2e", what, n, worst);
}

/* ---- GroupNorm ---- */
typedef struct {
  int B, C, HW, G;
  float *x, *w, *b, *y, *r, *mean, *rstd;
} Gn;

static size_t gn_n(const Gn *g)
{
  return (size_t)g->B * g->C * g->HW;
}

static double gn_obj(gpointer p)
{
  Gn *g = p;
  be->group_norm_forward(g->y, g->mean, g->rstd, g->x, g->w, g->b, g->B, g->C, g->HW, g->G, 1e-6f);
  return dotd(g->y, g->r, gn_n(g));
}

static double *gn_reference(const Gn *g)
{
  double *ref = g_new(double, gn_n(g));
  int cg = g->C / g->G;
  size_t n = (size_t)cg * g->HW;
  for (int i = 0; i < g->B * g->G; i++) {
    const float *x = g->x + (size_t)i * n;
    double m = 0.0, v = 0.0;
    for (size_t j = 0; j < n; j++)
      m += x[j];
    m /= n;
    for (size_t j = 0; j < n; j++)
      v += (x[j] - m) * (x[j] - m);
    double rs = 1.0 / sqrt(v / n + 1e-6);
    for (size_t j = 0; j < n; j++) {
      int ch = i % g->G * cg + (int)(j / g->HW);
      ref[(size_t)i * n + j] = (x[j] - m) * rs * (g->w ? g->w[ch] : 1.0) + (g->b ? g->b[ch] : 0.0);
    }
  }
  return ref;
}

static void gn_case(int B, int C, int HW, int G, gboolean affine)
{
  Gn g = {.B = B, .C = C, .HW = HW, .G = G};
  size_t n = gn_n(&g);
  g.x = randv(n, 2.0f);
  for (size_t i = 0; i < n; i++)
    g.x[i] += 0.7f; /* a mean away from zero */
  g.w = affine ? randv(C, 1.0f) : NULL;
  g.b = affine ? randv(C, 1.0f) : NULL;
  g.y = g_new(float, n);
  g.r = randv(n, 1.0f);
  g.mean = g_new(float, B *G);
  g.rstd = g_new(float, B *G);
  gn_obj(&g);
  g_autofree double *ref = gn_reference(&g);
  assert_close_vec(g.y, ref, n, 1e-5, "group_norm forward");
  /* backward, onto gradients that already hold 1 (accumulates) */
  float *dx = g_new(float, n), *dw = g_new(float, C), *db = g_new(float, C);
  for (size_t i = 0; i < n; i++)
    dx[i] = 1.0f;
  for (int c = 0; c < C; c++)
    dw[c] = db[c] = 1.0f;
  be->group_norm_backward(dx, affine ? dw : NULL, affine ? db : NULL, g.r, g.x, g.w, g.mean, g.rstd,
                          B, C, HW, G);
  for (size_t i = 0; i < n; i++)
    dx[i] -= 1.0f;
  check_grad(g.x, dx, n, gn_obj, &g, "group_norm dx");
  if (affine) {
    for (int c = 0; c < C; c++) {
      dw[c] -= 1.0f;
      db[c] -= 1.0f;
    }
    check_grad(g.w, dw, C, gn_obj, &g, "group_norm dweight");
    check_grad(g.b, db, C, gn_obj, &g, "group_norm dbias");
  }
  g_free(dx), g_free(dw), g_free(db);
  g_free(g.x), g_free(g.w), g_free(g.b), g_free(g.y), g_free(g.r), g_free(g.mean), g_free(g.rstd);
}

static void test_group_norm(void)
{
  gn_case(2, 6, 10, 3, TRUE);
  gn_case(3, 4, 7, 4, FALSE); /* a group per channel, no affine */
  gn_case(1, 8, 9, 1, TRUE);  /* one group: LayerNorm over the whole image */
}

/* ---- up-sampling, padding, channel bias: linear maps ---- */
typedef struct {
  int B, C, H, W, f, top, bottom, left, right;
  float *x, *y, *r;
  size_t nx, ny;
  int op; /* 0 up-sampling, 1 padding, 2 bias (x is the bias, y starts from base) */
  float *base;
} Lin;

static void lin_forward(Lin *l)
{
  if (l->op == 0)
    be->upsample_nearest_forward(l->y, l->x, l->B, l->C, l->H, l->W, l->f);
  else if (l->op == 1)
    be->pad2d_forward(l->y, l->x, l->B, l->C, l->H, l->W, l->top, l->bottom, l->left, l->right);
  else {
    memcpy(l->y, l->base, l->ny * sizeof(float));
    be->channel_bias_forward(l->y, l->x, l->B, l->C, l->H * l->W);
  }
}

static double lin_obj(gpointer p)
{
  Lin *l = p;
  lin_forward(l);
  return dotd(l->y, l->r, l->ny);
}

/* The output value at (plane, y, x) of the op, straight from the definitions. */
static double lin_ref_at(const Lin *l, size_t plane, int y, int x)
{
  if (l->op == 0)
    return l->x[(plane * l->H + y / l->f) * l->W + x / l->f];
  if (l->op == 1) {
    int sy = y - l->top, sx = x - l->left;
    return sy >= 0 && sy < l->H && sx >= 0 && sx < l->W ? l->x[(plane * l->H + sy) * l->W + sx]
                                                        : 0.0;
  }
  return (double)l->base[(plane * l->H + y) * l->W + x] + l->x[plane % l->C];
}

static void lin_case(Lin l, const char *what)
{
  int Ho = l.op == 0 ? l.H * l.f : l.op == 1 ? l.H + l.top + l.bottom : l.H;
  int Wo = l.op == 0 ? l.W * l.f : l.op == 1 ? l.W + l.left + l.right : l.W;
  size_t planes = (size_t)l.B * l.C;
  l.nx = l.op == 2 ? (size_t)l.C : planes * l.H * l.W;
  l.ny = planes * Ho * Wo;
  l.x = randv(l.nx, 1.0f);
  l.y = g_new(float, l.ny);
  l.r = randv(l.ny, 1.0f);
  l.base = l.op == 2 ? randv(l.ny, 1.0f) : NULL;
  lin_forward(&l);
  g_autofree double *ref = g_new(double, l.ny);
  for (size_t p = 0; p < planes; p++)
    for (int y = 0; y < Ho; y++)
      for (int x = 0; x < Wo; x++)
        ref[(p * Ho + y) * Wo + x] = lin_ref_at(&l, p, y, x);
  assert_close_vec(l.y, ref, l.ny, 1e-6, what);
  float *dx = g_new(float, l.nx);
  for (size_t i = 0; i < l.nx; i++)
    dx[i] = 2.0f;
  if (l.op == 0)
    be->upsample_nearest_backward(dx, l.r, l.B, l.C, l.H, l.W, l.f);
  else if (l.op == 1)
    be->pad2d_backward(dx, l.r, l.B, l.C, l.H, l.W, l.top, l.bottom, l.left, l.right);
  else
    be->channel_bias_backward(dx, l.r, l.B, l.C, l.H * l.W);
  for (size_t i = 0; i < l.nx; i++)
    dx[i] -= 2.0f;
  check_grad_h(l.x, dx, l.nx, lin_obj, &l, 0.5f, 2e-5, what);
  g_free(dx), g_free(l.x), g_free(l.y), g_free(l.r), g_free(l.base);
}

static void test_upsample(void)
{
  lin_case((Lin){.B = 2, .C = 3, .H = 4, .W = 5, .f = 2, .op = 0}, "upsample x2");
  lin_case((Lin){.B = 1, .C = 2, .H = 3, .W = 2, .f = 3, .op = 0}, "upsample x3");
}

static void test_pad(void)
{
  lin_case((Lin){.B = 2, .C = 3, .H = 5, .W = 4, .bottom = 1, .right = 1, .op = 1},
           "pad (0, 1, 0, 1)");
  lin_case(
      (Lin){.B = 1, .C = 2, .H = 3, .W = 3, .top = 2, .bottom = 1, .left = 3, .right = 0, .op = 1},
      "pad (3, 0, 2, 1)");
}

static void test_channel_bias(void)
{
  lin_case((Lin){.B = 3, .C = 4, .H = 5, .W = 3, .op = 2}, "channel bias");
}

/* ---- softmax of rows ---- */
typedef struct {
  int N, V;
  float scale;
  float *x, *y, *r;
} Sm;

static double sm_obj(gpointer p)
{
  Sm *s = p;
  be->softmax_forward(s->y, s->x, s->N, s->V, s->scale);
  return dotd(s->y, s->r, (size_t)s->N * s->V);
}

static void test_softmax(void)
{
  Sm s = {.N = 5, .V = 9, .scale = 0.7f};
  size_t n = (size_t)s.N * s.V;
  s.x = randv(n, 4.0f);
  s.x[3] = 90.0f; /* a large value: the maximum must be subtracted */
  s.y = g_new(float, n);
  s.r = randv(n, 1.0f);
  sm_obj(&s);
  g_autofree double *ref = g_new(double, n);
  for (int i = 0; i < s.N; i++) {
    double m = -INFINITY, sum = 0.0;
    for (int v = 0; v < s.V; v++)
      m = fmax(m, (double)s.x[i * s.V + v] * s.scale);
    for (int v = 0; v < s.V; v++)
      sum += exp((double)s.x[i * s.V + v] * s.scale - m);
    for (int v = 0; v < s.V; v++)
      ref[i * s.V + v] = exp((double)s.x[i * s.V + v] * s.scale - m) / sum;
  }
  assert_close_vec(s.y, ref, n, 1e-6, "softmax forward");
  /* in place on its input, as the VAE's attention uses it */
  g_autofree float *inplace = g_memdup2(s.x, n * sizeof(float));
  be->softmax_forward(inplace, inplace, s.N, s.V, s.scale);
  g_assert_cmpmem(inplace, n * sizeof(float), s.y, n * sizeof(float));
  g_autofree float *dx = g_new(float, n);
  be->softmax_backward(dx, s.y, s.r, s.N, s.V, s.scale);
  s.x[3] = 3.0f; /* finite differences away from the saturated row */
  sm_obj(&s);
  be->softmax_backward(dx, s.y, s.r, s.N, s.V, s.scale);
  check_grad(s.x, dx, n, sm_obj, &s, "softmax dx");
  g_free(s.x), g_free(s.y), g_free(s.r);
}

/* ---- against PyTorch ---- */
typedef struct {
  GByteArray *file;
  GPtrArray *expect; /* of Expect */
} RefRun;

typedef struct {
  char *what;
  float *values;
  size_t n;
} Expect;

static void expect_free(gpointer p)
{
  Expect *e = p;
  g_free(e->what), g_free(e->values), g_free(e);
}

static void ref_case(RefRun *run, const char *name, const int *ints, int n_ints,
                     const float *const *arrays, const size_t *lens, int n_arrays)
{
  gint32 len = (gint32)strlen(name);
  g_byte_array_append(run->file, (guint8 *)&len, 4);
  g_byte_array_append(run->file, (const guint8 *)name, len);
  g_byte_array_append(run->file, (guint8 *)&n_ints, 4);
  g_byte_array_append(run->file, (const guint8 *)ints, 4 * n_ints);
  g_byte_array_append(run->file, (guint8 *)&n_arrays, 4);
  for (int i = 0; i < n_arrays; i++) {
    gint64 m = (gint64)lens[i];
    g_byte_array_append(run->file, (guint8 *)&m, 8);
    g_byte_array_append(run->file, (const guint8 *)arrays[i], 4 * lens[i]);
  }
}

static void ref_expect(RefRun *run, const char *what, float *values, size_t n)
{
  Expect *e = g_new(Expect, 1);
  *e = (Expect){g_strdup(what), values, n};
  g_ptr_array_add(run->expect, e);
}

static void torch_group_norm(RefRun *run, int B, int C, int H, int W, int G)
{
  size_t n = (size_t)B * C * H * W;
  float *x = randv(n, 3.0f), *w = randv(C, 1.0f), *b = randv(C, 1.0f), *dy = randv(n, 1.0f);
  float *y = g_new(float, n), *dx = g_new0(float, n), *dw = g_new0(float, C);
  float *db = g_new0(float, C), *mean = g_new(float, B *G), *rstd = g_new(float, B *G);
  be->group_norm_forward(y, mean, rstd, x, w, b, B, C, H * W, G, 1e-6f);
  be->group_norm_backward(dx, dw, db, dy, x, w, mean, rstd, B, C, H * W, G);
  int ints[] = {B, C, H, W, G};
  const float *arrays[] = {x, w, b, dy};
  size_t lens[] = {n, C, C, n};
  ref_case(run, "group_norm", ints, 5, arrays, lens, 4);
  ref_expect(run, "group_norm y", y, n);
  ref_expect(run, "group_norm dx", dx, n);
  ref_expect(run, "group_norm dweight", dw, C);
  ref_expect(run, "group_norm dbias", db, C);
  g_free(x), g_free(w), g_free(b), g_free(dy), g_free(mean), g_free(rstd);
}

static void torch_resample(RefRun *run)
{
  enum { B = 2, C = 3, H = 5, W = 4, F = 2 };
  size_t n = B * C * H * W, nu = n * F * F, np = (size_t)B * C * (H + 1) * (W + 1);
  float *x = randv(n, 1.0f), *du = randv(nu, 1.0f), *dp = randv(np, 1.0f);
  float *u = g_new(float, nu), *p = g_new(float, np);
  float *dxu = g_new0(float, n), *dxp = g_new0(float, n);
  be->upsample_nearest_forward(u, x, B, C, H, W, F);
  be->upsample_nearest_backward(dxu, du, B, C, H, W, F);
  be->pad2d_forward(p, x, B, C, H, W, 0, 1, 0, 1);
  be->pad2d_backward(dxp, dp, B, C, H, W, 0, 1, 0, 1);
  int ints[] = {B, C, H, W, F};
  const float *arrays[] = {x, du, dp};
  size_t lens[] = {n, nu, np};
  ref_case(run, "resample", ints, 5, arrays, lens, 3);
  ref_expect(run, "upsample y", u, nu);
  ref_expect(run, "upsample dx", dxu, n);
  ref_expect(run, "pad y", p, np);
  ref_expect(run, "pad dx", dxp, n);
  g_free(x), g_free(du), g_free(dp);
}

static void torch_softmax(RefRun *run)
{
  enum { N = 6, V = 11 };
  float scale = 0.25f, *x = randv(N * V, 5.0f), *dy = randv(N * V, 1.0f);
  float *y = g_new(float, N *V), *dx = g_new(float, N *V);
  be->softmax_forward(y, x, N, V, scale);
  be->softmax_backward(dx, y, dy, N, V, scale);
  int ints[] = {N, V};
  const float *arrays[] = {x, dy, &scale};
  size_t lens[] = {N * V, N * V, 1};
  ref_case(run, "softmax", ints, 2, arrays, lens, 3);
  ref_expect(run, "softmax y", y, N * V);
  ref_expect(run, "softmax dx", dx, N * V);
  g_free(x), g_free(dy);
}

static void test_against_torch(void)
{
  if (!g_file_test("/usr/bin/python3", G_FILE_TEST_IS_EXECUTABLE) ||
      system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
    g_test_skip("PyTorch is not importable by /usr/bin/python3");
    return;
  }
  RefRun run = {g_byte_array_new(), g_ptr_array_new_with_free_func(expect_free)};
  torch_group_norm(&run, 2, 8, 3, 5, 4);
  torch_group_norm(&run, 1, 6, 4, 4, 6);
  torch_resample(&run);
  torch_softmax(&run);
  g_autoptr(GError) error = NULL;
  g_autofree char *dir = g_dir_make_tmp("cohort-test-vae-ops-XXXXXX", &error);
  g_assert_no_error(error);
  g_autofree char *path = g_build_filename(dir, "cases.bin", NULL);
  g_file_set_contents(path, (char *)run.file->data, run.file->len, &error);
  g_assert_no_error(error);
  g_autofree char *out = torch_ref_run("torch_vae_ops_ref.py", (const char *[]){path, NULL});
  g_unlink(path);
  g_rmdir(dir);
  g_auto(GStrv) lines = g_strsplit(g_strstrip(out), "\n", -1);
  g_assert_cmpuint(g_strv_length(lines), ==, run.expect->len);
  for (guint k = 0; k < run.expect->len; k++) {
    Expect *e = g_ptr_array_index(run.expect, k);
    g_auto(GStrv) vals = g_strsplit(lines[k], " ", -1);
    if (g_strv_length(vals) != e->n)
      g_error("%s: PyTorch gave %u values, ours %zu", e->what, g_strv_length(vals), e->n);
    double mx = 0.0, worst = 0.0;
    for (size_t i = 0; i < e->n; i++)
      mx = fmax(mx, fabs(g_ascii_strtod(vals[i], NULL)));
    for (size_t i = 0; i < e->n; i++) {
      double ref = g_ascii_strtod(vals[i], NULL), d = fabs(e->values[i] - ref);
      if (d > 1e-5 * mx)
        g_error("%s[%zu]: ours %.9g, PyTorch %.9g (largest |value| %.3g)", e->what, i, e->values[i],
                ref, mx);
      worst = fmax(worst, mx > 0 ? d / mx : 0.0);
    }
    g_test_message("%s: %zu values, largest error %.1e of the largest value", e->what, e->n, worst);
  }
  g_byte_array_unref(run.file);
  g_ptr_array_unref(run.expect);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  be = cohort_backend_cpu();
  g_test_add_func("/layers-vae/group-norm", test_group_norm);
  g_test_add_func("/layers-vae/upsample-nearest", test_upsample);
  g_test_add_func("/layers-vae/pad2d", test_pad);
  g_test_add_func("/layers-vae/channel-bias", test_channel_bias);
  g_test_add_func("/layers-vae/softmax", test_softmax);
  g_test_add_func("/layers-vae/against-torch", test_against_torch);
  return g_test_run();
}

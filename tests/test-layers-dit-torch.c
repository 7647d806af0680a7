/* The DiT ops of the CPU backend against tests/torch_dit_ops_ref.py, the same operations in
 * float64 PyTorch as the public DiT model writes them: non-causal attention (output,
 * log-sum-exp, gradient), modulate, the gated residual, LayerNorm without affine parameters
 * (eps 1e-6), SiLU, the timestep features, patch embedding (patchify + GEMM against
 * Conv2d(kernel p, stride p)), unpatchify (against DiT's einsum) and the per-sample MSE.
 * Per result tensor, |ours - torch| <= rtol * max|torch| + atol with the tolerances given at
 * each op. Skipped when /usr/bin/python3 cannot import torch. */
#include "torch-ref.h"
#include "fd-check.h"
#include "kernels/backend.h"

#include <glib.h>
#include <glib/gstdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const CohortBackend *be;

typedef struct {
  char *name;
  float *v; /* ours */
  size_t n;
  double rtol, atol;
} Out;

typedef struct {
  GByteArray *in;  /* the records for the script */
  GArray *pending; /* the inputs of the record being written */
  GPtrArray *outs; /* our results, in the order the script returns its own */
} Ref;

static void out_free(gpointer p)
{
  Out *o = p;
  g_free(o->name), g_free(o->v), g_free(o);
}

static void rec_begin(Ref *r, int op, const int *ints, int n)
{
  g_byte_array_append(r->in, (const guint8 *)&op, 4);
  g_byte_array_append(r->in, (const guint8 *)&n, 4);
  g_byte_array_append(r->in, (const guint8 *)ints, 4 * n);
  g_array_set_size(r->pending, 0);
}

static void rec_add(Ref *r, const float *v, size_t n)
{
  g_array_append_vals(r->pending, v, n);
}

static void rec_end(Ref *r)
{
  gint64 m = r->pending->len;
  g_byte_array_append(r->in, (const guint8 *)&m, 8);
  g_byte_array_append(r->in, (const guint8 *)r->pending->data, 4 * r->pending->len);
}

static void expect(Ref *r, const char *name, const float *v, size_t n, double rtol, double atol)
{
  Out *o = g_new(Out, 1);
  *o = (Out){g_strdup(name), g_memdup2(v, n * 4), n, rtol, atol};
  g_ptr_array_add(r->outs, o);
}

static void add_attention(Ref *r, int B, int T, int C, int NH)
{
  size_t n = (size_t)B * T * C;
  int ints[] = {B, T, C, NH};
  float *qkv = randv(3 * n, 1.5f), *rr = randv(n, 1.0f), *out = g_new(float, n);
  float *lse = g_new(float, (size_t)B *NH *T), *dqkv = g_new(float, 3 * n);
  be->attention_forward(out, lse, qkv, B, T, C, NH, 0);
  be->attention_backward(dqkv, rr, qkv, out, lse, B, T, C, NH, 0);
  rec_begin(r, 1, ints, 4), rec_add(r, qkv, 3 * n), rec_add(r, rr, n), rec_end(r);
  expect(r, "attention out", out, n, 1e-5, 1e-6);
  expect(r, "attention lse", lse, (size_t)B * NH * T, 1e-6, 1e-6);
  expect(r, "attention dqkv", dqkv, 3 * n, 1e-5, 1e-6);
  g_free(qkv), g_free(rr), g_free(out), g_free(lse), g_free(dqkv);
}

static void add_modulate(Ref *r, int B, int T, int C)
{
  int ld = 6 * C, shift = 3 * C, scale = 4 * C; /* DiT's MLP shift and scale */
  size_t n = (size_t)B * T * C;
  int ints[] = {B, T, C, ld, shift, scale};
  float *x = randv(n, 2.0f), *mod = randv((size_t)B * ld, 1.0f), *rr = randv(n, 1.0f);
  float *out = g_new(float, n), *dx = g_new0(float, n), *dmod = g_new0(float, (size_t)B *ld);
  be->modulate_forward(out, x, mod + shift, mod + scale, B, T, C, ld);
  be->modulate_backward(dx, dmod + shift, dmod + scale, rr, x, mod + scale, B, T, C, ld);
  rec_begin(r, 2, ints, 6), rec_add(r, x, n), rec_add(r, mod, (size_t)B * ld), rec_add(r, rr, n);
  rec_end(r);
  expect(r, "modulate out", out, n, 1e-6, 1e-7);
  expect(r, "modulate dx", dx, n, 1e-6, 1e-7);
  expect(r, "modulate dmod", dmod, (size_t)B * ld, 1e-6, 1e-6);
  g_free(x), g_free(mod), g_free(rr), g_free(out), g_free(dx), g_free(dmod);
}

static void add_gated(Ref *r, int B, int T, int C)
{
  int ld = 6 * C, gate = 2 * C; /* DiT's attention gate */
  size_t n = (size_t)B * T * C;
  int ints[] = {B, T, C, ld, gate};
  float *x = randv(n, 1.0f), *mod = randv((size_t)B * ld, 1.0f), *y = randv(n, 2.0f);
  float *rr = randv(n, 1.0f), *out = g_new(float, n), *dx = g_new0(float, n);
  float *dy = g_new(float, n), *dmod = g_new0(float, (size_t)B *ld);
  be->gated_residual_forward(out, x, mod + gate, y, B, T, C, ld);
  be->gated_residual_backward(dx, dy, dmod + gate, rr, mod + gate, y, B, T, C, ld);
  rec_begin(r, 3, ints, 5), rec_add(r, x, n), rec_add(r, mod, (size_t)B * ld), rec_add(r, y, n);
  rec_add(r, rr, n), rec_end(r);
  expect(r, "gated_residual out", out, n, 1e-6, 1e-7);
  expect(r, "gated_residual dx", dx, n, 0, 0); /* dx = R exactly */
  expect(r, "gated_residual dy", dy, n, 1e-6, 1e-7);
  expect(r, "gated_residual dmod", dmod, (size_t)B * ld, 1e-6, 1e-6);
  g_free(x), g_free(mod), g_free(y), g_free(rr), g_free(out), g_free(dx), g_free(dy);
  g_free(dmod);
}

static void add_layernorm(Ref *r, int N, int C)
{
  size_t n = (size_t)N * C;
  int ints[] = {N, C};
  float eps = 1e-6f, *x = randv(n, 2.0f), *rr = randv(n, 1.0f);
  for (int k = 0; k < C; k++) /* a row whose variance is of the order of eps */
    x[k] *= 1e-3f;
  float *out = g_new(float, n), *mean = g_new(float, N), *rstd = g_new(float, N);
  float *dx = g_new0(float, n);
  be->layernorm_forward(out, mean, rstd, x, NULL, NULL, N, C, eps);
  be->layernorm_backward(dx, NULL, NULL, rr, x, NULL, mean, rstd, N, C);
  rec_begin(r, 4, ints, 2), rec_add(r, &eps, 1), rec_add(r, x, n), rec_add(r, rr, n), rec_end(r);
  expect(r, "layernorm (no affine, eps 1e-6) out", out, n, 1e-5, 1e-6);
  expect(r, "layernorm (no affine, eps 1e-6) dx", dx, n, 1e-5, 1e-5);
  g_free(x), g_free(rr), g_free(out), g_free(mean), g_free(rstd), g_free(dx);
}

static void add_silu(Ref *r, int n)
{
  float *x = randv(n, 8.0f), *rr = randv(n, 1.0f), *out = g_new(float, n), *dx = g_new(float, n);
  be->silu_forward(out, x, n);
  be->silu_backward(dx, x, rr, n);
  rec_begin(r, 5, &n, 1), rec_add(r, x, n), rec_add(r, rr, n), rec_end(r);
  expect(r, "silu out", out, n, 1e-6, 1e-7);
  expect(r, "silu dx", dx, n, 1e-6, 1e-7);
  g_free(x), g_free(rr), g_free(out), g_free(dx);
}

static void add_timesteps(Ref *r, int dim)
{
  float t[] = {0.0f, 1.0f, 0.37f, 250.25f, 999.0f}, max_period = 10000.0f;
  int B = G_N_ELEMENTS(t), ints[] = {B, dim};
  float *out = g_new(float, (size_t)B *dim);
  be->timestep_embedding(out, t, B, dim, max_period);
  rec_begin(r, 6, ints, 2), rec_add(r, &max_period, 1), rec_add(r, t, B), rec_end(r);
  expect(r, "timestep_embedding", out, (size_t)B * dim, 0, 1e-7);
  g_free(out);
}

/* Patch embedding as the model does it: tokens [B*T, C p p] @ weight[hidden, C p p]^T. */
static void add_patch_embed(Ref *r, int B, int C, int H, int W, int p, int hidden)
{
  int T = (H / p) * (W / p), K = C * p * p, ints[] = {B, C, H, W, p, hidden};
  size_t n = (size_t)B * C * H * W;
  float *img = randv(n, 1.0f), *w = randv((size_t)hidden * K, 1.0f), *tok = g_new(float, n);
  float *out = g_new(float, (size_t)B *T *hidden);
  be->patchify(tok, img, B, C, H, W, p);
  be->gemm(0, 1, B * T, hidden, K, 1.0f, tok, K, w, K, 0.0f, out, hidden);
  rec_begin(r, 7, ints, 6), rec_add(r, img, n), rec_add(r, w, (size_t)hidden * K), rec_end(r);
  expect(r, "patchify + gemm vs conv2d", out, (size_t)B * T * hidden, 1e-6, 1e-6);
  g_free(img), g_free(w), g_free(tok), g_free(out);
}

static void add_unpatchify(Ref *r, int B, int C, int H, int W, int p)
{
  int ints[] = {B, C, H, W, p};
  size_t n = (size_t)B * C * H * W;
  float *tok = randv(n, 1.0f), *img = g_new(float, n);
  be->unpatchify(img, tok, B, C, H, W, p);
  rec_begin(r, 8, ints, 5), rec_add(r, tok, n), rec_end(r);
  expect(r, "unpatchify vs einsum", img, n, 0, 0); /* a permutation: exact */
  g_free(tok), g_free(img);
}

static void add_mse(Ref *r, int B, int D)
{
  int ints[] = {B, D};
  size_t n = (size_t)B * D;
  float *pred = randv(n, 2.0f), *target = randv(n, 2.0f), *losses = g_new(float, B);
  float *dpred = g_new(float, n);
  be->mse_forward(losses, pred, target, B, D);
  be->mse_backward(dpred, pred, target, B, D, 1.0f / B);
  rec_begin(r, 9, ints, 2), rec_add(r, pred, n), rec_add(r, target, n), rec_end(r);
  expect(r, "mse losses", losses, B, 1e-6, 0);
  expect(r, "mse dpred", dpred, n, 1e-6, 0);
  g_free(pred), g_free(target), g_free(losses), g_free(dpred);
}

/* Runs the script on r's records; returns its float64 results (g_free), n_doubles set. */
static double *run_reference(Ref *r, size_t *n_doubles)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *dir = g_dir_make_tmp("cohort-test-dit-XXXXXX", &error);
  g_assert_no_error(error);
  g_autofree char *in = g_build_filename(dir, "in.bin", NULL);
  g_autofree char *out = g_build_filename(dir, "out.bin", NULL);
  g_file_set_contents(in, (const char *)r->in->data, r->in->len, &error);
  g_assert_no_error(error);
  g_free(torch_ref_run("torch_dit_ops_ref.py", (const char *[]){in, out, NULL}));
  char *data = NULL;
  gsize len = 0;
  g_file_get_contents(out, &data, &len, &error);
  g_assert_no_error(error);
  g_unlink(in), g_unlink(out), g_rmdir(dir);
  *n_doubles = len / sizeof(double);
  return (double *)data;
}

static void test_against_torch(void)
{
  if (!g_file_test("/usr/bin/python3", G_FILE_TEST_IS_EXECUTABLE) ||
      system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
    g_test_skip("PyTorch is not importable by /usr/bin/python3");
    return;
  }
  Ref r = {g_byte_array_new(), g_array_new(FALSE, FALSE, sizeof(float)),
           g_ptr_array_new_with_free_func(out_free)};
  add_attention(&r, 2, 37, 48, 3); /* several heads, T no multiple of any tile */
  add_attention(&r, 1, 20, 128, 2);
  add_modulate(&r, 2, 9, 37);
  add_gated(&r, 2, 9, 37);
  add_layernorm(&r, 6, 40);
  add_silu(&r, 301);
  add_timesteps(&r, 256);
  add_timesteps(&r, 7);
  add_patch_embed(&r, 2, 3, 8, 12, 4, 5); /* not square, so rows and columns cannot swap */
  add_patch_embed(&r, 1, 4, 6, 6, 2, 8);
  add_unpatchify(&r, 2, 3, 8, 12, 4);
  add_unpatchify(&r, 1, 4, 6, 6, 2);
  add_mse(&r, 3, 300);
  size_t n_ref = 0, pos = 0;
  g_autofree double *ref = run_reference(&r, &n_ref);
  for (guint k = 0; k < r.outs->len; k++) {
    Out *o = g_ptr_array_index(r.outs, k);
    g_assert_cmpuint(pos + o->n, <=, n_ref);
    double mx = 0, worst = 0;
    for (size_t i = 0; i < o->n; i++)
      mx = fmax(mx, fabs(ref[pos + i]));
    for (size_t i = 0; i < o->n; i++) {
      double e = fabs(o->v[i] - ref[pos + i]);
      if (e > o->rtol * mx + o->atol)
        g_error("%s[%zu]: ours %.9g, PyTorch %.9g (tensor max %.3g)", o->name, i, o->v[i],
                ref[pos + i], mx);
      worst = fmax(worst, e);
    }
    g_test_message("%s: %zu values, largest difference %.2e (tensor max %.3g)", o->name, o->n,
                   worst, mx);
    pos += o->n;
  }
  g_assert_cmpuint(pos, ==, n_ref);
  g_byte_array_unref(r.in), g_array_unref(r.pending), g_ptr_array_unref(r.outs);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  be = cohort_backend_cpu();
  g_test_add_func("/dit-layers/against-torch", test_against_torch);
  return g_test_run();
}

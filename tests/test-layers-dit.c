/* The CPU kernels a diffusion transformer (DiT, adaLN-Zero) adds, and the two it changes
 * (non-causal attention, LayerNorm without affine parameters and with its own eps): each
 * forward against a naive double loop written here, each backward against central finite
 * differences of J = sum(out * R) (tests/fd-check.h), and the accumulate / overwrite /
 * in-place contracts of kernels/backend.h. tests/test-layers-dit-torch.c compares the same
 * ops with PyTorch. */
#include "fd-check.h"
#include "kernels/backend.h"

#include <glib.h>
#include <math.h>
#include <string.h>

static const CohortBackend *be;

/* a == b + c up to float rounding: accumulating ops may fuse the multiply and the add. */
static void assert_sum(float a, float b, float c)
{
  g_assert_cmpfloat(fabs((double)a - ((double)b + c)), <=, 1e-6 * (1.0 + fabs(a)));
}

/* Samples' vectors are slices of a wider [B, LD] matrix, as of the adaLN output: the ops
 * must use the row stride and touch nothing outside their slice. */
enum { MB = 2, MT = 5, MC = 37, LD = 6 * MC + 3, SHIFT_COL = MC, SCALE_COL = 4 * MC };

/* ---- modulate ---- */
typedef struct {
  float *x, *mod, *out, *r;
} Mod;

static double mod_obj(gpointer p)
{
  Mod *c = p;
  be->modulate_forward(c->out, c->x, c->mod + SHIFT_COL, c->mod + SCALE_COL, MB, MT, MC, LD);
  return dotd(c->out, c->r, MB * MT * MC);
}

static void test_modulate(void)
{
  size_t n = MB * MT * MC;
  Mod c = {randv(n, 2.0f), randv(MB * LD, 1.0f), g_new(float, n), randv(n, 1.0f)};
  mod_obj(&c);
  double *ref = g_new(double, n);
  for (int b = 0; b < MB; b++)
    for (int t = 0; t < MT; t++)
      for (int k = 0; k < MC; k++) {
        size_t i = ((size_t)b * MT + t) * MC + k;
        ref[i] =
            (double)c.x[i] * (1.0 + c.mod[b * LD + SCALE_COL + k]) + c.mod[b * LD + SHIFT_COL + k];
      }
  assert_close_vec(c.out, ref, n, 1e-6, "modulate forward");

  float *dx = g_new0(float, n), *dmod = g_new0(float, MB *LD);
  be->modulate_backward(dx, dmod + SHIFT_COL, dmod + SCALE_COL, c.r, c.x, c.mod + SCALE_COL, MB, MT,
                        MC, LD);
  check_grad(c.x, dx, n, mod_obj, &c, "modulate dx");
  check_grad(c.mod, dmod, MB * LD, mod_obj, &c, "modulate dshift, dscale"); /* 0 elsewhere */

  /* all three accumulate, and columns outside the two slices keep their values */
  float *ax = randv(n, 1.0f), *amod = randv(MB * LD, 1.0f);
  float *ax0 = g_memdup2(ax, n * 4), *amod0 = g_memdup2(amod, MB * LD * 4);
  be->modulate_backward(ax, amod + SHIFT_COL, amod + SCALE_COL, c.r, c.x, c.mod + SCALE_COL, MB, MT,
                        MC, LD);
  for (size_t i = 0; i < n; i++)
    assert_sum(ax[i], ax0[i], dx[i]);
  for (int i = 0; i < MB * LD; i++)
    assert_sum(amod[i], amod0[i], dmod[i]);
  g_free(c.x), g_free(c.mod), g_free(c.out), g_free(c.r), g_free(ref), g_free(dx), g_free(dmod);
  g_free(ax), g_free(amod), g_free(ax0), g_free(amod0);
}

/* ---- gated residual ---- */
typedef struct {
  float *x, *mod, *y, *out, *r;
} Gated;

static double gated_obj(gpointer p)
{
  Gated *c = p;
  be->gated_residual_forward(c->out, c->x, c->mod + SCALE_COL, c->y, MB, MT, MC, LD);
  return dotd(c->out, c->r, MB * MT * MC);
}

static void test_gated_residual(void)
{
  size_t n = MB * MT * MC;
  Gated c = {randv(n, 1.0f), randv(MB * LD, 1.0f), randv(n, 2.0f), g_new(float, n), randv(n, 1.0f)};
  gated_obj(&c);
  for (int b = 0; b < MB; b++)
    for (int t = 0; t < MT; t++)
      for (int k = 0; k < MC; k++) {
        size_t i = ((size_t)b * MT + t) * MC + k;
        double want = (double)c.x[i] + (double)c.mod[b * LD + SCALE_COL + k] * c.y[i];
        g_assert_cmpfloat(fabs(c.out[i] - want), <=, 1e-6 * fmax(1.0, fabs(want)));
      }
  /* in place on the residual stream: the same values */
  float *inplace = g_memdup2(c.x, n * 4);
  be->gated_residual_forward(inplace, inplace, c.mod + SCALE_COL, c.y, MB, MT, MC, LD);
  g_assert_cmpmem(inplace, n * 4, c.out, n * 4);

  float *dx = g_new0(float, n), *dmod = g_new0(float, MB *LD), *dy = randv(n, 1e3f);
  be->gated_residual_backward(dx, dy, dmod + SCALE_COL, c.r, c.mod + SCALE_COL, c.y, MB, MT, MC,
                              LD);
  check_grad(c.x, dx, n, gated_obj, &c, "gated residual dx");
  check_grad(c.y, dy, n, gated_obj, &c, "gated residual dy"); /* overwrote the 1e3 junk */
  check_grad(c.mod, dmod, MB * LD, gated_obj, &c, "gated residual dgate");

  /* dx NULL: the caller keeps dout as x's gradient; dgate accumulates, dy overwrites */
  float *dy2 = randv(n, 1e3f), *amod = randv(MB * LD, 1.0f);
  float *amod0 = g_memdup2(amod, MB * LD * 4);
  be->gated_residual_backward(NULL, dy2, amod + SCALE_COL, c.r, c.mod + SCALE_COL, c.y, MB, MT, MC,
                              LD);
  g_assert_cmpmem(dy2, n * 4, dy, n * 4);
  for (int i = 0; i < MB * LD; i++)
    assert_sum(amod[i], amod0[i], dmod[i]);
  g_free(c.x), g_free(c.mod), g_free(c.y), g_free(c.out), g_free(c.r), g_free(inplace);
  g_free(dx), g_free(dmod), g_free(dy), g_free(dy2), g_free(amod), g_free(amod0);
}

/* ---- SiLU ---- */
typedef struct {
  size_t n;
  float *x, *y, *r;
} Elem;

static double silu_obj(gpointer p)
{
  Elem *c = p;
  be->silu_forward(c->y, c->x, c->n);
  return dotd(c->y, c->r, c->n);
}

static void test_silu(void)
{
  Elem c = {.n = 300};
  c.x = randv(c.n, 6.0f);
  c.x[0] = 0.0f, c.x[1] = 100.0f, c.x[2] = -100.0f, c.x[3] = -1000.0f; /* no NaN, no inf */
  c.r = randv(c.n, 1.0f);
  c.y = g_new(float, c.n);
  silu_obj(&c);
  double *ref = g_new(double, c.n);
  for (size_t i = 0; i < c.n; i++)
    ref[i] = c.x[i] / (1.0 + exp(-(double)c.x[i]));
  assert_close_vec(c.y, ref, c.n, 1e-6, "silu forward");
  float *dx = g_new(float, c.n);
  be->silu_backward(dx, c.x, c.r, c.n);
  for (size_t i = 0; i < 4; i++)
    g_assert_true(isfinite(dx[i]));
  check_grad(c.x, dx, c.n, silu_obj, &c, "silu dx");
  float *inplace = g_memdup2(c.r, c.n * sizeof(float));
  be->silu_backward(inplace, c.x, inplace, c.n);
  g_assert_cmpmem(inplace, c.n * sizeof(float), dx, c.n * sizeof(float));
  g_free(c.x), g_free(c.r), g_free(c.y), g_free(ref), g_free(dx), g_free(inplace);
}

/* ---- LayerNorm without affine parameters, eps 1e-6 ---- */
typedef struct {
  int N, C;
  float eps;
  float *x, *w, *out, *mean, *rstd, *r;
} Ln;

static double ln_obj(gpointer p)
{
  Ln *c = p;
  be->layernorm_forward(c->out, c->mean, c->rstd, c->x, c->w, NULL, c->N, c->C, c->eps);
  return dotd(c->out, c->r, (size_t)c->N * c->C);
}

/* (x - mean) / sqrt(var + eps) * (w or 1), in double */
static double *ln_ref(const Ln *c, double eps)
{
  double *ref = g_new(double, (size_t)c->N * c->C);
  for (int n = 0; n < c->N; n++) {
    const float *x = c->x + (size_t)n * c->C;
    double m = 0, v = 0;
    for (int k = 0; k < c->C; k++)
      m += x[k];
    m /= c->C;
    for (int k = 0; k < c->C; k++)
      v += (x[k] - m) * (x[k] - m);
    v /= c->C;
    for (int k = 0; k < c->C; k++)
      ref[n * c->C + k] = (x[k] - m) / sqrt(v + eps) * (c->w ? c->w[k] : 1.0);
  }
  return ref;
}

static void test_layernorm_no_affine(void)
{
  Ln c = {.N = 5, .C = 37, .eps = 1e-6f};
  size_t n = (size_t)c.N * c.C;
  c.x = randv(n, 2.0f), c.r = randv(n, 1.0f), c.out = g_new(float, n);
  c.mean = g_new(float, c.N), c.rstd = g_new(float, c.N);
  for (int k = 0; k < c.C; k++) /* a row of variance ~3e-7, where eps 1e-6 and 1e-5 differ */
    c.x[k] = 1e-3f * c.x[c.C + k];
  ln_obj(&c);
  double *ref = ln_ref(&c, 1e-6), *ref5 = ln_ref(&c, 1e-5);
  assert_close_vec(c.out, ref, n, 1e-5, "layernorm forward, no affine, eps 1e-6");
  g_assert_cmpfloat(fabs(ref5[0] - ref[0]), >, 0.1); /* the row that shows eps matters */
  g_free(ref5);

  float *dx = g_new0(float, n);
  be->layernorm_backward(dx, NULL, NULL, c.r, c.x, NULL, c.mean, c.rstd, c.N, c.C);
  for (int k = 0; k < c.C; k++) /* back to ordinary rows for the finite differences */
    c.x[k] = 2.0f * c.x[2 * c.C + k];
  ln_obj(&c);
  memset(dx, 0, n * 4);
  be->layernorm_backward(dx, NULL, NULL, c.r, c.x, NULL, c.mean, c.rstd, c.N, c.C);
  check_grad(c.x, dx, n, ln_obj, &c, "layernorm (no affine) dx");

  /* a weight and no bias: dw accumulates, db NULL is skipped */
  c.w = randv(c.C, 1.0f);
  ln_obj(&c);
  float *dw = randv(c.C, 1.0f), *dw0 = g_memdup2(dw, c.C * 4);
  memset(dx, 0, n * 4);
  be->layernorm_backward(dx, dw, NULL, c.r, c.x, c.w, c.mean, c.rstd, c.N, c.C);
  for (int k = 0; k < c.C; k++)
    dw[k] -= dw0[k];
  check_grad(c.x, dx, n, ln_obj, &c, "layernorm (weight only) dx");
  check_grad(c.w, dw, c.C, ln_obj, &c, "layernorm (weight only) dw");
  g_free(c.x), g_free(c.r), g_free(c.out), g_free(c.mean), g_free(c.rstd), g_free(c.w);
  g_free(ref), g_free(dx), g_free(dw), g_free(dw0);
}

/* ---- non-causal attention ---- */
typedef struct {
  int B, T, C, NH;
  float *qkv, *out, *lse, *r;
} Attn;

static double attn_obj(gpointer p)
{
  Attn *c = p;
  be->attention_forward(c->out, c->lse, c->qkv, c->B, c->T, c->C, c->NH, 0);
  return dotd(c->out, c->r, (size_t)c->B * c->T * c->C);
}

static void check_full_attention(int B, int T, int C, int NH)
{
  Attn c = {.B = B, .T = T, .C = C, .NH = NH};
  int hd = C / NH;
  size_t n_out = (size_t)B * T * C, s3 = 3 * (size_t)C;
  c.qkv = randv(n_out * 3, 1.5f), c.r = randv(n_out, 1.0f);
  c.out = g_new(float, n_out), c.lse = g_new(float, (size_t)B *NH *T);
  attn_obj(&c);
  /* every query sees every key: a full score row, softmax, weighted sum */
  double *ref = g_new0(double, n_out), *sc = g_new(double, T);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int i = 0; i < T; i++) {
        const float *q = c.qkv + (b * T + i) * s3 + h * hd;
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < T; j++) {
          const float *k = c.qkv + (b * T + j) * s3 + C + h * hd;
          double s = 0;
          for (int d = 0; d < hd; d++)
            s += (double)q[d] * k[d];
          sc[j] = s / sqrt(hd);
          mx = fmax(mx, sc[j]);
        }
        for (int j = 0; j < T; j++)
          sum += (sc[j] = exp(sc[j] - mx));
        for (int j = 0; j < T; j++)
          for (int d = 0; d < hd; d++)
            ref[(b * T + i) * C + h * hd + d] +=
                sc[j] / sum * c.qkv[(b * T + j) * s3 + 2 * C + h * hd + d];
        g_assert_cmpfloat_with_epsilon(c.lse[(b * NH + h) * T + i], mx + log(sum), 1e-5);
      }
  assert_close_vec(c.out, ref, n_out, 1e-5, "attention (non-causal) forward");
  float *dqkv = g_new(float, n_out * 3);
  memset(dqkv, 0xff, n_out * 3 * sizeof(float)); /* backward must overwrite every element */
  be->attention_backward(dqkv, c.r, c.qkv, c.out, c.lse, B, T, C, NH, 0);
  check_grad(c.qkv, dqkv, n_out * 3, attn_obj, &c, "attention (non-causal) dqkv");
  g_free(c.qkv), g_free(c.r), g_free(c.out), g_free(c.lse), g_free(ref), g_free(sc);
  g_free(dqkv);
}

static void test_attention_full(void)
{
  check_full_attention(2, 5, 12, 3);  /* head size 4: scalar tails; T below one tile */
  check_full_attention(1, 37, 48, 3); /* T = 37: no multiple of 8, 16 or 32; head size 16 */
}

/* ---- label rows: gather and scatter-add ---- */
enum { RB = 7, RV = 5, RC = 70 }; /* RC: a full 64-channel stripe and a tail */
static const int label_rows[RB] = {3, 1, 3, 0, 3, 4, 1};

typedef struct {
  float *table, *out, *r;
} Rows;

static double rows_obj(gpointer p)
{
  Rows *c = p;
  be->rows_gather(c->out, c->table, label_rows, RB, RC);
  return dotd(c->out, c->r, RB * RC);
}

static void test_rows(void)
{
  Rows c = {randv(RV * RC, 1.0f), g_new(float, RB *RC), randv(RB * RC, 1.0f)};
  rows_obj(&c);
  for (int b = 0; b < RB; b++)
    g_assert_cmpmem(c.out + b * RC, RC * 4, c.table + label_rows[b] * RC, RC * 4);
  float *dt = g_new0(float, RV *RC);
  be->rows_scatter_add(dt, c.r, label_rows, RB, RC);
  check_grad(c.table, dt, RV * RC, rows_obj, &c, "rows_scatter_add (repeated rows)");
  /* accumulates, in order of b: row 3 gets ((d + r0) + r2) + r4 */
  float *acc = randv(RV * RC, 1.0f), *acc0 = g_memdup2(acc, RV * RC * 4);
  be->rows_scatter_add(acc, c.r, label_rows, RB, RC);
  for (int k = 0; k < RC; k++) {
    g_assert_cmpfloat(acc[3 * RC + k], ==,
                      acc0[3 * RC + k] + c.r[k] + c.r[2 * RC + k] + c.r[4 * RC + k]);
    g_assert_cmpfloat(acc[2 * RC + k], ==, acc0[2 * RC + k]); /* no sample has row 2 */
  }
  g_free(c.table), g_free(c.out), g_free(c.r), g_free(dt), g_free(acc), g_free(acc0);
}

/* ---- patchify and unpatchify ---- */
enum { PB = 2, PC = 3, PH = 6, PW = 8, PP = 2, PT = (PH / PP) * (PW / PP), PK = PP * PP * PC };

static void test_patchify(void)
{
  size_t n = (size_t)PB * PC * PH * PW;
  g_assert_cmpuint(n, ==, (size_t)PB * PT * PK);
  float *img = randv(n, 1.0f), *tok = randv(n, 1e3f), *back = randv(n, 1e3f);
  be->patchify(tok, img, PB, PC, PH, PW, PP);
  be->unpatchify(back, img, PB, PC, PH, PW, PP); /* img read as tokens: any n values do */
  /* the two orders, written out: conv weight (c, py, px) and DiT's output (py, px, c) */
  for (int b = 0; b < PB; b++)
    for (int c = 0; c < PC; c++)
      for (int y = 0; y < PH; y++)
        for (int x = 0; x < PW; x++) {
          int t = (y / PP) * (PW / PP) + x / PP, py = y % PP, px = x % PP;
          size_t pix = (((size_t)b * PC + c) * PH + y) * PW + x;
          g_assert_cmpfloat(tok[(b * PT + t) * PK + (c * PP + py) * PP + px], ==, img[pix]);
          g_assert_cmpfloat(back[pix], ==, img[(b * PT + t) * PK + (py * PP + px) * PC + c]);
        }
  /* each backward inverts its forward (and overwrites every element) */
  float *round = randv(n, 1e3f);
  be->patchify_backward(round, tok, PB, PC, PH, PW, PP);
  g_assert_cmpmem(round, n * 4, img, n * 4);
  be->unpatchify_backward(round, back, PB, PC, PH, PW, PP);
  g_assert_cmpmem(round, n * 4, img, n * 4);
  /* ... and is its adjoint: <P x, y> = <x, P^T y> */
  float *x = randv(n, 1.0f), *y = randv(n, 1.0f), *px = g_new(float, n), *pty = g_new(float, n);
  be->patchify(px, x, PB, PC, PH, PW, PP);
  be->patchify_backward(pty, y, PB, PC, PH, PW, PP);
  g_assert_cmpfloat(fabs(dotd(px, y, n) - dotd(x, pty, n)), <=, 1e-12 * n);
  be->unpatchify(px, x, PB, PC, PH, PW, PP);
  be->unpatchify_backward(pty, y, PB, PC, PH, PW, PP);
  g_assert_cmpfloat(fabs(dotd(px, y, n) - dotd(x, pty, n)), <=, 1e-12 * n);
  /* the two orders differ when C > 1 and p > 1 */
  be->patchify(px, img, PB, PC, PH, PW, PP);
  be->unpatchify_backward(pty, img, PB, PC, PH, PW, PP);
  g_assert_true(memcmp(px, pty, n * 4) != 0);
  g_free(img), g_free(tok), g_free(back), g_free(round), g_free(x), g_free(y), g_free(px);
  g_free(pty);
}

/* ---- per-sample MSE ---- */
typedef struct {
  int B, D;
  float *pred, *target, *losses;
} Mse;

static double mse_obj(gpointer p)
{
  Mse *c = p;
  be->mse_forward(c->losses, c->pred, c->target, c->B, c->D);
  double s = 0;
  for (int b = 0; b < c->B; b++)
    s += c->losses[b];
  return s / c->B;
}

static void test_mse(void)
{
  Mse c = {.B = 3, .D = 37};
  size_t n = (size_t)c.B * c.D;
  c.pred = randv(n, 2.0f), c.target = randv(n, 2.0f), c.losses = g_new(float, c.B);
  mse_obj(&c);
  double ref[3];
  for (int b = 0; b < c.B; b++) {
    double s = 0;
    for (int d = 0; d < c.D; d++) {
      double e = (double)c.pred[b * c.D + d] - c.target[b * c.D + d];
      s += e * e;
    }
    ref[b] = s / c.D;
  }
  assert_close_vec(c.losses, ref, c.B, 1e-6, "mse forward");
  float *dp = randv(n, 1e3f); /* overwritten */
  be->mse_backward(dp, c.pred, c.target, c.B, c.D, 1.0f / c.B);
  check_grad(c.pred, dp, n, mse_obj, &c, "mse dpred");
  g_free(c.pred), g_free(c.target), g_free(c.losses), g_free(dp);
}

/* ---- timestep features against DiT's formula in double ---- */
static void check_timesteps(int dim)
{
  const float t[] = {0.0f, 1.0f, 0.37f, 250.25f, 999.0f};
  int B = G_N_ELEMENTS(t), half = dim / 2;
  float *out = randv((size_t)B * dim, 1e3f);
  be->timestep_embedding(out, t, B, dim, 10000.0f);
  for (int b = 0; b < B; b++) {
    for (int i = 0; i < half; i++) {
      double f = exp(-log(10000.0) * i / half), a = (double)t[b] * f;
      g_assert_cmpfloat(fabs(out[b * dim + i] - cos(a)), <=, 1e-7);
      g_assert_cmpfloat(fabs(out[b * dim + half + i] - sin(a)), <=, 1e-7);
    }
    if (dim % 2)
      g_assert_cmpfloat(out[b * dim + dim - 1], ==, 0.0f);
  }
  g_free(out);
}

static void test_timestep_embedding(void)
{
  check_timesteps(256); /* DiT's frequency_embedding_size */
  check_timesteps(7);   /* odd: a zero column at the end */
}

/* ---- axpby, and the position embedding through add_bias ---- */
static void test_axpby(void)
{
  size_t n = 50000; /* above the threshold where the loop goes parallel */
  float *x = randv(n, 1.0f), *y = randv(n, 1.0f), *out = g_new(float, n);
  be->axpby(out, 0.75f, x, -2.5f, y, n);
  for (size_t i = 0; i < n; i++)
    g_assert_cmpfloat(fabs(out[i] - (0.75 * x[i] - 2.5 * y[i])), <=, 1e-6);
  float *in_x = g_memdup2(x, n * 4), *in_y = g_memdup2(y, n * 4);
  be->axpby(in_x, 0.75f, in_x, -2.5f, y, n); /* Euler step: x = x + dt * v */
  be->axpby(in_y, 0.75f, x, -2.5f, in_y, n);
  g_assert_cmpmem(in_x, n * 4, out, n * 4);
  g_assert_cmpmem(in_y, n * 4, out, n * 4);
  g_free(x), g_free(y), g_free(out), g_free(in_x), g_free(in_y);
}

static void test_position_add(void)
{
  enum { B = 3, T = 16, C = 24 };
  float *x = randv(B * T * C, 1.0f), *pos = randv(T * C, 1.0f), *out = g_memdup2(x, B * T * C * 4);
  be->add_bias(out, pos, B, T * C); /* out[b, t, c] = x[b, t, c] + pos[t, c] */
  for (int b = 0; b < B; b++)
    for (int i = 0; i < T * C; i++)
      g_assert_cmpfloat(out[b * T * C + i], ==, x[b * T * C + i] + pos[i]);
  g_free(x), g_free(pos), g_free(out);
}

/* The backwards that sum over tokens or samples give the same bits on 1 and 2 threads, at
 * sizes where their loops go parallel. */
static void run_backwards(float *const out[4], const float *x, const float *mod, const float *g,
                          const int *rows, int B, int T, int C, int NH)
{
  size_t n = (size_t)B * T * C;
  float *lse = g_new(float, (size_t)B *NH *T), *att = g_new(float, n);
  memset(out[1], 0, n * 4), memset(out[2], 0, (size_t)B * 6 * C * 4), memset(out[3], 0, n * 4);
  be->attention_forward(att, lse, x, B, T / 3, C, NH, 0); /* x read as qkv [B, T/3, 3C] */
  be->attention_backward(out[0], g, x, att, lse, B, T / 3, C, NH, 0);
  be->modulate_backward(out[1], out[2], out[2] + C, g, x, mod + C, B, T, C, 6 * C);
  be->gated_residual_backward(out[1], out[3], out[2] + 2 * C, g, mod + 2 * C, x, B, T, C, 6 * C);
  be->rows_scatter_add(out[2], g, rows, B * T, C); /* every token a sample; 5 distinct rows */
  g_free(lse), g_free(att);
}

static void test_thread_independence(void)
{
  enum { B = 4, T = 48, C = 128, NH = 4 };
  size_t n = (size_t)B * T * C, nm = (size_t)B * 6 * C;
  float *x = randv(n, 1.0f), *mod = randv(nm, 1.0f), *g = randv(n, 1.0f);
  int *rows = g_new(int, B *T);
  for (int i = 0; i < B * T; i++)
    rows[i] = (i * 7) % 5;
  float *r1[4] = {g_new(float, n), g_new(float, n), g_new(float, nm), g_new(float, n)};
  float *r2[4] = {g_new(float, n), g_new(float, n), g_new(float, nm), g_new(float, n)};
  int keep = be->get_threads();
  be->set_threads(1);
  run_backwards(r1, x, mod, g, rows, B, T, C, NH);
  be->set_threads(2);
  run_backwards(r2, x, mod, g, rows, B, T, C, NH);
  be->set_threads(keep);
  g_assert_cmpmem(r1[0], n * 4, r2[0], n * 4);
  g_assert_cmpmem(r1[1], n * 4, r2[1], n * 4);
  g_assert_cmpmem(r1[2], nm * 4, r2[2], nm * 4);
  g_assert_cmpmem(r1[3], n * 4, r2[3], n * 4);
  for (int k = 0; k < 4; k++)
    g_free(r1[k]), g_free(r2[k]);
  g_free(x), g_free(mod), g_free(g), g_free(rows);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  be = cohort_backend_cpu();
  g_test_add_func("/dit-layers/modulate", test_modulate);
  g_test_add_func("/dit-layers/gated-residual", test_gated_residual);
  g_test_add_func("/dit-layers/silu", test_silu);
  g_test_add_func("/dit-layers/layernorm-no-affine", test_layernorm_no_affine);
  g_test_add_func("/dit-layers/attention-non-causal", test_attention_full);
  g_test_add_func("/dit-layers/rows", test_rows);
  g_test_add_func("/dit-layers/patchify", test_patchify);
  g_test_add_func("/dit-layers/mse", test_mse);
  g_test_add_func("/dit-layers/timestep-embedding", test_timestep_embedding);
  g_test_add_func("/dit-layers/axpby", test_axpby);
  g_test_add_func("/dit-layers/position-add", test_position_add);
  g_test_add_func("/dit-layers/threads", test_thread_independence);
  return g_test_run();
}

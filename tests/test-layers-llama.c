/* The CPU kernels of the Llama family (RMSNorm, rotary embeddings, SwiGLU, grouped-query
 * attention): forward against naive loops in double written here, backward against central
 * finite differences of J = sum(out * R) (tests/fd-check.h gives the tolerances). */
#include "fd-check.h"
#include "kernels/backend.h"
#include "kernels/math-inline.h"

#include <glib.h>
#include <math.h>
#include <string.h>

static const CohortBackend *be;

/* ---- RMSNorm ---- */
typedef struct {
  int N, C;
  gboolean weight;
  float *x, *w, *out, *rstd, *r;
} Rms;

static double rms_obj(gpointer p)
{
  Rms *c = p;
  be->rmsnorm_forward(c->out, c->rstd, c->x, c->weight ? c->w : NULL, c->N, c->C, 1e-5f);
  return dotd(c->out, c->r, (size_t)c->N * c->C);
}

static void check_rmsnorm(gboolean weight)
{
  /* C = 37: the 16-lane loop and its tail */
  Rms c = {.N = 5, .C = 37, .weight = weight};
  size_t n = (size_t)c.N * c.C;
  c.x = randv(n, 2.0f);
  c.w = randv(c.C, 1.0f);
  c.r = randv(n, 1.0f);
  c.out = g_new(float, n);
  c.rstd = g_new(float, c.N);
  rms_obj(&c);
  double *ref = g_new(double, n);
  for (int i = 0; i < c.N; i++) {
    double ss = 0;
    for (int k = 0; k < c.C; k++)
      ss += (double)c.x[i * c.C + k] * c.x[i * c.C + k];
    double rs = 1.0 / sqrt(ss / c.C + 1e-5);
    g_assert_cmpfloat(fabs(c.rstd[i] - rs), <=, 1e-6 * rs);
    for (int k = 0; k < c.C; k++)
      ref[i * c.C + k] = c.x[i * c.C + k] * rs * (weight ? c.w[k] : 1.0);
  }
  assert_close_vec(c.out, ref, n, 1e-5, "rmsnorm forward");
  float *dx = g_new0(float, n), *dw = g_new0(float, c.C);
  be->rmsnorm_backward(dx, weight ? dw : NULL, c.r, c.x, weight ? c.w : NULL, c.rstd, c.N, c.C);
  check_grad(c.x, dx, n, rms_obj, &c, "rmsnorm dx");
  if (weight)
    check_grad(c.w, dw, c.C, rms_obj, &c, "rmsnorm dw");
  else
    for (int k = 0; k < c.C; k++)
      g_assert_cmpfloat(dw[k], ==, 0.0f);
  /* dinp accumulates (the forward again: the checks left rstd of a perturbed input) */
  rms_obj(&c);
  float *dx2 = g_memdup2(dx, n * sizeof(float));
  be->rmsnorm_backward(dx2, NULL, c.r, c.x, weight ? c.w : NULL, c.rstd, c.N, c.C);
  for (size_t i = 0; i < n; i++)
    g_assert_cmpfloat(dx2[i], ==, 2.0f * dx[i]);
  g_free(c.x), g_free(c.w), g_free(c.r), g_free(c.out), g_free(c.rstd), g_free(ref);
  g_free(dx), g_free(dw), g_free(dx2);
}

static void test_rmsnorm(void)
{
  check_rmsnorm(TRUE);
  check_rmsnorm(FALSE);
}

/* ---- rotary embedding ---- */
typedef struct {
  int B, T, H, hd, pos0;
  float *x, *cos, *sin, *out, *r;
} Rope;

static double rope_obj(gpointer p)
{
  Rope *c = p;
  be->rope_forward(c->out, c->x, c->cos, c->sin, c->B, c->T, c->H, c->hd, c->pos0);
  return dotd(c->out, c->r, (size_t)c->B * c->T * c->H * c->hd);
}

static void test_rope(void)
{
  Rope c = {.B = 2, .T = 5, .H = 3, .hd = 8, .pos0 = 2};
  int half = c.hd / 2, P = c.pos0 + c.T;
  size_t n = (size_t)c.B * c.T * c.H * c.hd;
  c.x = randv(n, 1.0f);
  c.r = randv(n, 1.0f);
  c.out = g_new(float, n);
  c.cos = g_new(float, P *half);
  c.sin = g_new(float, P *half);
  for (int p = 0; p < P; p++)
    for (int i = 0; i < half; i++) {
      double a = p * pow(10000.0, -2.0 * i / c.hd);
      c.cos[p * half + i] = (float)cos(a);
      c.sin[p * half + i] = (float)sin(a);
    }
  rope_obj(&c);
  /* Hugging Face's form: x * cat(cos, cos) + rotate_half(x) * cat(sin, sin), with
   * rotate_half(x) = cat(-x2, x1) */
  double *ref = g_new(double, n);
  for (size_t row = 0; row < n / c.hd; row++) {
    int t = (int)(row / c.H % c.T), p = c.pos0 + t;
    const float *x = c.x + row * c.hd;
    for (int d = 0; d < c.hd; d++) {
      double rot = d < half ? -x[d + half] : x[d - half];
      ref[row * c.hd + d] =
          x[d] * (double)c.cos[p * half + d % half] + rot * (double)c.sin[p * half + d % half];
    }
  }
  assert_close_vec(c.out, ref, n, 1e-6, "rope forward");
  float *dx = g_new(float, n);
  be->rope_backward(dx, c.r, c.cos, c.sin, c.B, c.T, c.H, c.hd, c.pos0);
  check_grad(c.x, dx, n, rope_obj, &c, "rope dx");
  /* in place, as the model calls it: forward then backward gives the input back */
  rope_obj(&c); /* out again: the checks left that of a perturbed input */
  float *y = g_memdup2(c.x, n * sizeof(float));
  be->rope_forward(y, y, c.cos, c.sin, c.B, c.T, c.H, c.hd, c.pos0);
  g_assert_cmpmem(y, n * sizeof(float), c.out, n * sizeof(float));
  be->rope_backward(y, y, c.cos, c.sin, c.B, c.T, c.H, c.hd, c.pos0);
  for (size_t i = 0; i < n; i++)
    g_assert_cmpfloat(fabs(y[i] - c.x[i]), <=, 1e-6);
  g_free(c.x), g_free(c.r), g_free(c.out), g_free(c.cos), g_free(c.sin), g_free(ref);
  g_free(dx), g_free(y);
}

/* ---- SwiGLU ---- */
typedef struct {
  size_t n;
  float *gate, *up, *out, *r;
} Swiglu;

static double swiglu_obj(gpointer p)
{
  Swiglu *c = p;
  be->swiglu_forward(c->out, c->gate, c->up, c->n);
  return dotd(c->out, c->r, c->n);
}

static void test_swiglu(void)
{
  Swiglu c = {.n = 300};
  c.gate = randv(c.n, 6.0f);
  c.gate[0] = 0.0f, c.gate[1] = 90.0f, c.gate[2] = -90.0f; /* saturation must not give NaN */
  c.up = randv(c.n, 2.0f);
  c.r = randv(c.n, 1.0f);
  c.out = g_new(float, c.n);
  swiglu_obj(&c);
  double *ref = g_new(double, c.n);
  for (size_t i = 0; i < c.n; i++)
    ref[i] = c.gate[i] / (1.0 + exp(-(double)c.gate[i])) * c.up[i];
  assert_close_vec(c.out, ref, c.n, 1e-6, "swiglu forward");
  float *dg = g_new(float, c.n), *du = g_new(float, c.n);
  be->swiglu_backward(dg, du, c.r, c.gate, c.up, c.n);
  check_grad(c.gate, dg, c.n, swiglu_obj, &c, "swiglu dgate");
  check_grad(c.up, du, c.n, swiglu_obj, &c, "swiglu dup");
  /* dgate over dout, as the model calls it */
  float *inplace = g_memdup2(c.r, c.n * sizeof(float)), *du2 = g_new(float, c.n);
  be->swiglu_backward(inplace, du2, inplace, c.gate, c.up, c.n);
  g_assert_cmpmem(inplace, c.n * sizeof(float), dg, c.n * sizeof(float));
  g_assert_cmpmem(du2, c.n * sizeof(float), du, c.n * sizeof(float));
  g_free(c.gate), g_free(c.up), g_free(c.r), g_free(c.out), g_free(ref), g_free(dg), g_free(du);
  g_free(inplace), g_free(du2);
}

/* ---- grouped-query attention ---- */
typedef struct {
  int B, T, NH, NKV, hd, causal;
  float *q, *k, *v, *out, *lse, *r;
} Gqa;

static double gqa_obj(gpointer p)
{
  Gqa *c = p;
  be->attention_gqa_forward(c->out, c->lse, c->q, c->k, c->v, c->B, c->T, c->NH, c->NKV, c->hd,
                            c->causal);
  return dotd(c->out, c->r, (size_t)c->B * c->T * c->NH * c->hd);
}

/* The naive reference: each query head against its group's key/value head. */
static double *gqa_reference(const Gqa *c)
{
  int G = c->NH / c->NKV, hd = c->hd;
  size_t lq = (size_t)c->NH * hd, lkv = (size_t)c->NKV * hd;
  double *ref = g_new0(double, (size_t)c->B * c->T * lq);
  g_autofree double *sc = g_new(double, c->T); /* one row's scores */
  for (int b = 0; b < c->B; b++)
    for (int h = 0; h < c->NH; h++)
      for (int i = 0; i < c->T; i++) {
        double mx = -INFINITY, sum = 0;
        int last = c->causal ? i : c->T - 1;
        const float *q = c->q + (b * c->T + i) * lq + h * hd;
        for (int j = 0; j <= last; j++) {
          const float *k = c->k + (b * c->T + j) * lkv + (h / G) * hd;
          double s = 0;
          for (int d = 0; d < hd; d++)
            s += (double)q[d] * k[d];
          sc[j] = s / sqrt(hd);
          mx = fmax(mx, sc[j]);
        }
        for (int j = 0; j <= last; j++)
          sum += (sc[j] = exp(sc[j] - mx));
        for (int j = 0; j <= last; j++)
          for (int d = 0; d < hd; d++)
            ref[(b * c->T + i) * lq + h * hd + d] +=
                sc[j] / sum * c->v[(b * c->T + j) * lkv + (h / G) * hd + d];
        g_assert_cmpfloat_with_epsilon(c->lse[(b * c->NH + h) * c->T + i], mx + log(sum), 1e-5);
      }
  return ref;
}

/* with_dq FALSE: only dk and dv against finite differences (the costly large case) */
static void check_gqa(int B, int T, int NH, int NKV, int hd, int causal, gboolean with_dq)
{
  Gqa c = {.B = B, .T = T, .NH = NH, .NKV = NKV, .hd = hd, .causal = causal};
  size_t nq = (size_t)B * T * NH * hd, nkv = (size_t)B * T * NKV * hd;
  c.q = randv(nq, 1.5f);
  c.k = randv(nkv, 1.5f);
  c.v = randv(nkv, 1.5f);
  c.r = randv(nq, 1.0f);
  c.out = g_new(float, nq);
  c.lse = g_new(float, (size_t)B *NH *T);
  gqa_obj(&c);
  g_autofree double *ref = gqa_reference(&c);
  assert_close_vec(c.out, ref, nq, 1e-5, "gqa forward");
  float *dq = g_new(float, nq), *dk = g_new(float, nkv), *dv = g_new(float, nkv);
  /* backward must overwrite every element */
  memset(dq, 0xff, nq * sizeof(float));
  memset(dk, 0xff, nkv * sizeof(float));
  memset(dv, 0xff, nkv * sizeof(float));
  be->attention_gqa_backward(dq, dk, dv, c.r, c.q, c.k, c.v, c.out, c.lse, B, T, NH, NKV, hd,
                             causal);
  if (with_dq)
    check_grad(c.q, dq, nq, gqa_obj, &c, "gqa dq");
  check_grad(c.k, dk, nkv, gqa_obj, &c, "gqa dk");
  check_grad(c.v, dv, nkv, gqa_obj, &c, "gqa dv");
  g_free(c.q), g_free(c.k), g_free(c.v), g_free(c.r), g_free(c.out), g_free(c.lse);
  g_free(dq), g_free(dk), g_free(dv);
}

static void test_gqa(void)
{
  /* groups of 3, head size 4 (the scalar tails); multi-query with T = 37 (several query blocks
   * and a partial last one); a group of 2 without the causal mask; head size 64 (the key and
   * value gradients' register rows) over T = 66: two of backward's super-blocks of 64 query rows,
   * the second partial (dq there is computed per block of 8 rows, as at T = 37) */
  check_gqa(2, 5, 6, 2, 4, 1, TRUE);
  check_gqa(1, 37, 2, 1, 32, 1, TRUE);
  check_gqa(1, 9, 4, 2, 8, 0, TRUE);
  check_gqa(1, 66, 1, 1, 64, 1, FALSE);
}

/* GPT's interleaved op and the grouped one with NKV = NH compute the same bits. */
static void test_gqa_equals_mha(void)
{
  enum { B = 2, T = 19, NH = 3, HD = 16, C = NH * HD };
  size_t n = (size_t)B * T * C;
  float *qkv = randv(3 * n, 1.0f), *dout = randv(n, 1.0f);
  float *q = g_new(float, n), *k = g_new(float, n), *v = g_new(float, n);
  for (size_t r = 0; r < (size_t)B * T; r++) {
    memcpy(q + r * C, qkv + r * 3 * C, C * sizeof(float));
    memcpy(k + r * C, qkv + r * 3 * C + C, C * sizeof(float));
    memcpy(v + r * C, qkv + r * 3 * C + 2 * C, C * sizeof(float));
  }
  float *o1 = g_new(float, n), *o2 = g_new(float, n);
  float *l1 = g_new(float, B *NH *T), *l2 = g_new(float, B *NH *T);
  be->attention_forward(o1, l1, qkv, B, T, C, NH, 1);
  be->attention_gqa_forward(o2, l2, q, k, v, B, T, NH, NH, HD, 1);
  g_assert_cmpmem(o1, n * sizeof(float), o2, n * sizeof(float));
  g_assert_cmpmem(l1, B * NH * T * sizeof(float), l2, B * NH * T * sizeof(float));
  float *dqkv = g_new(float, 3 * n), *dq = g_new(float, n), *dk = g_new(float, n);
  float *dv = g_new(float, n);
  be->attention_backward(dqkv, dout, qkv, o1, l1, B, T, C, NH, 1);
  be->attention_gqa_backward(dq, dk, dv, dout, q, k, v, o2, l2, B, T, NH, NH, HD, 1);
  for (size_t r = 0; r < (size_t)B * T; r++) {
    g_assert_cmpmem(dqkv + r * 3 * C, C * sizeof(float), dq + r * C, C * sizeof(float));
    g_assert_cmpmem(dqkv + r * 3 * C + C, C * sizeof(float), dk + r * C, C * sizeof(float));
    g_assert_cmpmem(dqkv + r * 3 * C + 2 * C, C * sizeof(float), dv + r * C, C * sizeof(float));
  }
  g_free(qkv), g_free(dout), g_free(q), g_free(k), g_free(v), g_free(o1), g_free(o2);
  g_free(l1), g_free(l2), g_free(dqkv), g_free(dq), g_free(dk), g_free(dv);
}

/* Attention over a key/value cache: the last Tq query rows of one sequence over its Tk = T keys
 * compute the bits of those rows of the causal forward, for prefills and single steps, with
 * and without grouping. */
static void test_gqa_cached(void)
{
  static const int shapes[][4] = {{29, 6, 2, 16}, {37, 4, 1, 8}, {9, 2, 2, 30}, {1, 4, 2, 16}};
  for (guint c = 0; c < G_N_ELEMENTS(shapes); c++) {
    int T = shapes[c][0], NH = shapes[c][1], NKV = shapes[c][2], HD = shapes[c][3];
    size_t nq = (size_t)T * NH * HD, nkv = (size_t)T * NKV * HD;
    float *q = randv(nq, 1.0f), *k = randv(nkv, 1.0f), *v = randv(nkv, 1.0f);
    float *full = g_new(float, nq), *lse = g_new(float, (size_t)NH *T);
    float *cached = g_new(float, nq);
    be->attention_gqa_forward(full, lse, q, k, v, 1, T, NH, NKV, HD, 1);
    for (int Tq = 1; Tq <= T; Tq += Tq < 3 ? 1 : 7) {
      size_t skip = (size_t)(T - Tq) * NH * HD;
      be->attention_gqa_cached(cached, q + skip, k, v, Tq, T, NH, NKV, HD);
      g_assert_cmpmem(cached, (nq - skip) * sizeof(float), full + skip,
                      (nq - skip) * sizeof(float));
    }
    g_free(q), g_free(k), g_free(v), g_free(full), g_free(lse), g_free(cached);
  }
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  be = cohort_backend_cpu();
  g_test_add_func("/layers-llama/rmsnorm", test_rmsnorm);
  g_test_add_func("/layers-llama/rope", test_rope);
  g_test_add_func("/layers-llama/swiglu", test_swiglu);
  g_test_add_func("/layers-llama/gqa", test_gqa);
  g_test_add_func("/layers-llama/gqa-equals-mha", test_gqa_equals_mha);
  g_test_add_func("/layers-llama/gqa-cached", test_gqa_cached);
  return g_test_run();
}

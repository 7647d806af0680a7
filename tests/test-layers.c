/* Every CPU kernel: forward against a naive loop written here, backward against central
 * finite differences of the scalar J = sum(out * R) for a fixed random R (tests/fd-check.h
 * gives the tolerances). Forwards must match the naive loops to 1e-5 relative (only the
 * summation order differs). */
#include "fd-check.h"
#include "kernels/backend.h"
#include "kernels/math-inline.h"

#include <glib.h>
#include <math.h>
#include <string.h>

static const CohortBackend *be;

/* ---- linear: y = x @ W + b through gemm + add_bias ---- */
typedef struct {
  int N, in, out;
  float *x, *w, *b, *y, *r;
} Linear;

static double linear_obj(gpointer p)
{
  Linear *c = p;
  be->gemm(0, 0, c->N, c->out, c->in, 1.0f, c->x, c->in, c->w, c->out, 0.0f, c->y, c->out);
  be->add_bias(c->y, c->b, c->N, c->out);
  return dotd(c->y, c->r, (size_t)c->N * c->out);
}

static void test_linear(void)
{
  Linear c = {.N = 6, .in = 5, .out = 7};
  c.x = randv(c.N * c.in, 1.0f);
  c.w = randv(c.in * c.out, 1.0f);
  c.b = randv(c.out, 1.0f);
  c.r = randv(c.N * c.out, 1.0f);
  c.y = g_new(float, c.N *c.out);
  linear_obj(&c);
  double *ref = g_new0(double, c.N *c.out);
  for (int n = 0; n < c.N; n++)
    for (int o = 0; o < c.out; o++) {
      double s = c.b[o];
      for (int i = 0; i < c.in; i++)
        s += (double)c.x[n * c.in + i] * c.w[i * c.out + o];
      ref[n * c.out + o] = s;
    }
  assert_close_vec(c.y, ref, c.N * c.out, 1e-5, "linear forward");

  /* backward as the model does it: dx = R W^T, dW += x^T R, db += colsum(R) */
  float *dx = g_new0(float, c.N *c.in), *dw = g_new0(float, c.in *c.out);
  float *db = g_new0(float, c.out);
  be->gemm(0, 1, c.N, c.in, c.out, 1.0f, c.r, c.out, c.w, c.out, 0.0f, dx, c.in);
  be->gemm(1, 0, c.in, c.out, c.N, 1.0f, c.x, c.in, c.r, c.out, 1.0f, dw, c.out);
  be->bias_backward(db, c.r, c.N, c.out);
  check_grad(c.x, dx, c.N * c.in, linear_obj, &c, "linear dx");
  check_grad(c.w, dw, c.in * c.out, linear_obj, &c, "linear dW");
  check_grad(c.b, db, c.out, linear_obj, &c, "linear db");
  /* bias_backward accumulates */
  be->bias_backward(db, c.r, c.N, c.out);
  for (int o = 0; o < c.out; o++) {
    double s = 0.0;
    for (int n = 0; n < c.N; n++)
      s += c.r[n * c.out + o];
    g_assert_cmpfloat_with_epsilon(db[o], 2.0 * s, 1e-5);
  }
  g_free(c.x), g_free(c.w), g_free(c.b), g_free(c.r), g_free(c.y), g_free(ref);
  g_free(dx), g_free(dw), g_free(db);
}

/* ---- embedding ---- */
typedef struct {
  int B, T, C, V;
  int *tok;
  float *wte, *wpe, *out, *r;
} Embed;

static double embed_obj(gpointer p)
{
  Embed *c = p;
  be->embedding_forward(c->out, c->tok, c->wte, c->wpe, c->B, c->T, c->C);
  return dotd(c->out, c->r, (size_t)c->B * c->T * c->C);
}

static void test_embedding(void)
{
  Embed c = {.B = 2, .T = 4, .C = 5, .V = 6};
  int tok[8] = {1, 5, 1, 0, 3, 3, 1, 2}; /* repeats: gradients of one row must add */
  c.tok = tok;
  c.wte = randv(c.V * c.C, 1.0f);
  c.wpe = randv(c.T * c.C, 1.0f);
  c.r = randv(c.B * c.T * c.C, 1.0f);
  c.out = g_new(float, c.B *c.T *c.C);
  embed_obj(&c);
  double *ref = g_new(double, c.B *c.T *c.C);
  for (int b = 0; b < c.B; b++)
    for (int t = 0; t < c.T; t++)
      for (int k = 0; k < c.C; k++)
        ref[(b * c.T + t) * c.C + k] =
            (double)c.wte[tok[b * c.T + t] * c.C + k] + c.wpe[t * c.C + k];
  assert_close_vec(c.out, ref, c.B * c.T * c.C, 1e-6, "embedding forward");
  float *dwte = g_new0(float, c.V *c.C), *dwpe = g_new0(float, c.T *c.C);
  be->embedding_backward(dwte, dwpe, c.r, tok, c.B, c.T, c.C);
  check_grad(c.wte, dwte, c.V * c.C, embed_obj, &c, "embedding dwte");
  check_grad(c.wpe, dwpe, c.T * c.C, embed_obj, &c, "embedding dwpe");
  g_free(c.wte), g_free(c.wpe), g_free(c.r), g_free(c.out), g_free(ref), g_free(dwte);
  g_free(dwpe);
}

/* ---- layernorm ---- */
typedef struct {
  int N, C;
  float *x, *w, *b, *out, *mean, *rstd, *r;
} Ln;

static double ln_obj(gpointer p)
{
  Ln *c = p;
  be->layernorm_forward(c->out, c->mean, c->rstd, c->x, c->w, c->b, c->N, c->C, 1e-5f);
  return dotd(c->out, c->r, (size_t)c->N * c->C);
}

static void test_layernorm(void)
{
  /* C = 37 exercises the 16-lane loop and its tail */
  Ln c = {.N = 5, .C = 37};
  c.x = randv(c.N * c.C, 2.0f);
  c.w = randv(c.C, 1.0f);
  c.b = randv(c.C, 1.0f);
  c.r = randv(c.N * c.C, 1.0f);
  c.out = g_new(float, c.N *c.C);
  c.mean = g_new(float, c.N);
  c.rstd = g_new(float, c.N);
  ln_obj(&c);
  double *ref = g_new(double, c.N *c.C);
  for (int n = 0; n < c.N; n++) {
    double m = 0, v = 0;
    for (int k = 0; k < c.C; k++)
      m += c.x[n * c.C + k];
    m /= c.C;
    for (int k = 0; k < c.C; k++)
      v += (c.x[n * c.C + k] - m) * (c.x[n * c.C + k] - m);
    v /= c.C;
    for (int k = 0; k < c.C; k++)
      ref[n * c.C + k] = (c.x[n * c.C + k] - m) / sqrt(v + 1e-5) * c.w[k] + c.b[k];
  }
  assert_close_vec(c.out, ref, c.N * c.C, 1e-5, "layernorm forward");
  float *dx = g_new0(float, c.N *c.C), *dw = g_new0(float, c.C), *db = g_new0(float, c.C);
  be->layernorm_backward(dx, dw, db, c.r, c.x, c.w, c.mean, c.rstd, c.N, c.C);
  check_grad(c.x, dx, c.N * c.C, ln_obj, &c, "layernorm dx");
  check_grad(c.w, dw, c.C, ln_obj, &c, "layernorm dw");
  check_grad(c.b, db, c.C, ln_obj, &c, "layernorm db");
  g_free(c.x), g_free(c.w), g_free(c.b), g_free(c.r), g_free(c.out), g_free(c.mean);
  g_free(c.rstd), g_free(ref), g_free(dx), g_free(dw), g_free(db);
}

/* ---- attention ---- */
typedef struct {
  int B, T, C, NH;
  float *qkv, *out, *lse, *r;
} Attn;

static double attn_obj(gpointer p)
{
  Attn *c = p;
  be->attention_forward(c->out, c->lse, c->qkv, c->B, c->T, c->C, c->NH, 1);
  return dotd(c->out, c->r, (size_t)c->B * c->T * c->C);
}

static void check_attention(int B, int T, int C, int NH)
{
  Attn c = {.B = B, .T = T, .C = C, .NH = NH};
  int hd = c.C / c.NH;
  size_t n_out = (size_t)c.B * c.T * c.C;
  c.qkv = randv(n_out * 3, 1.5f);
  c.r = randv(n_out, 1.0f);
  c.out = g_new(float, n_out);
  c.lse = g_new(float, c.B *c.NH *c.T);
  attn_obj(&c);
  /* naive: full score matrix with the causal mask, softmax, weighted sum */
  double *ref = g_new0(double, n_out);
  for (int b = 0; b < c.B; b++)
    for (int h = 0; h < c.NH; h++)
      for (int i = 0; i < c.T; i++) {
        double sc[64], mx = -INFINITY, sum = 0;
        for (int j = 0; j <= i; j++) {
          double s = 0;
          for (int d = 0; d < hd; d++)
            s += (double)c.qkv[(b * c.T + i) * 3 * c.C + h * hd + d] *
                 c.qkv[(b * c.T + j) * 3 * c.C + c.C + h * hd + d];
          sc[j] = s / sqrt(hd);
          mx = fmax(mx, sc[j]);
        }
        for (int j = 0; j <= i; j++)
          sum += (sc[j] = exp(sc[j] - mx));
        for (int j = 0; j <= i; j++)
          for (int d = 0; d < hd; d++)
            ref[(b * c.T + i) * c.C + h * hd + d] +=
                sc[j] / sum * c.qkv[(b * c.T + j) * 3 * c.C + 2 * c.C + h * hd + d];
        g_assert_cmpfloat_with_epsilon(c.lse[(b * c.NH + h) * c.T + i], mx + log(sum), 1e-5);
      }
  assert_close_vec(c.out, ref, n_out, 1e-5, "attention forward");
  float *dqkv = g_new(float, n_out * 3);
  memset(dqkv, 0xff, n_out * 3 * sizeof(float)); /* backward must overwrite every element */
  be->attention_backward(dqkv, c.r, c.qkv, c.out, c.lse, c.B, c.T, c.C, c.NH, 1);
  check_grad(c.qkv, dqkv, n_out * 3, attn_obj, &c, "attention dqkv");
  g_free(c.qkv), g_free(c.r), g_free(c.out), g_free(c.lse), g_free(ref), g_free(dqkv);
}

static void test_attention(void)
{
  /* head size 4: the scalar tails; head size 32 and T = 37: full 16-wide tiles, several
   * query blocks and a partial last one */
  check_attention(2, 5, 12, 3);
  check_attention(1, 37, 64, 2);
}

/* ---- gelu and residual ---- */
typedef struct {
  size_t n;
  float *x, *y, *r;
} Elem;

static double gelu_obj(gpointer p)
{
  Elem *c = p;
  be->gelu_forward(c->y, c->x, c->n);
  return dotd(c->y, c->r, c->n);
}

static void test_gelu(void)
{
  Elem c = {.n = 300};
  c.x = randv(c.n, 6.0f);
  c.x[0] = 0.0f, c.x[1] = 30.0f, c.x[2] = -30.0f; /* saturation must not give NaN */
  c.r = randv(c.n, 1.0f);
  c.y = g_new(float, c.n);
  gelu_obj(&c);
  double *ref = g_new(double, c.n);
  for (size_t i = 0; i < c.n; i++) {
    double x = c.x[i];
    ref[i] = 0.5 * x * (1.0 + tanh(sqrt(2.0 / G_PI) * (x + 0.044715 * x * x * x)));
  }
  assert_close_vec(c.y, ref, c.n, 1e-6, "gelu forward");
  float *dx = g_new(float, c.n);
  be->gelu_backward(dx, c.x, c.r, c.n);
  check_grad(c.x, dx, c.n, gelu_obj, &c, "gelu dx");
  /* in place, as the model calls it */
  float *inplace = g_memdup2(c.r, c.n * sizeof(float));
  be->gelu_backward(inplace, c.x, inplace, c.n);
  g_assert_cmpmem(inplace, c.n * sizeof(float), dx, c.n * sizeof(float));
  g_free(c.x), g_free(c.r), g_free(c.y), g_free(ref), g_free(dx), g_free(inplace);
}

static void test_residual(void)
{
  size_t n = 50000; /* above the threshold where the loop goes parallel */
  float *a = randv(n, 1.0f), *b = randv(n, 1.0f), *out = g_new(float, n);
  be->residual_forward(out, a, b, n);
  for (size_t i = 0; i < n; i++)
    g_assert_cmpfloat(out[i], ==, a[i] + b[i]);
  g_free(a), g_free(b), g_free(out);
}

/* ---- softmax + cross-entropy ---- */
typedef struct {
  int N, V;
  int *tg;
  float *x, *losses, *lse;
} Xent;

static double xent_obj(gpointer p)
{
  Xent *c = p;
  be->crossentropy_forward(c->losses, c->lse, c->x, c->tg, c->N, c->V);
  double s = 0;
  for (int n = 0; n < c->N; n++)
    s += c->losses[n];
  return s / c->N;
}

static void test_crossentropy(void)
{
  int tg[4] = {0, 6, 3, 3};
  Xent c = {.N = 4, .V = 7, .tg = tg};
  c.x = randv(c.N * c.V, 3.0f);
  c.x[5] = 80.0f; /* large logits must not overflow */
  c.losses = g_new(float, c.N);
  c.lse = g_new(float, c.N);
  xent_obj(&c);
  double ref[4];
  for (int n = 0; n < c.N; n++) {
    double mx = -INFINITY, s = 0;
    for (int v = 0; v < c.V; v++)
      mx = fmax(mx, c.x[n * c.V + v]);
    for (int v = 0; v < c.V; v++)
      s += exp(c.x[n * c.V + v] - mx);
    ref[n] = mx + log(s) - c.x[n * c.V + tg[n]];
  }
  assert_close_vec(c.losses, ref, c.N, 1e-5, "cross-entropy forward");
  float *dx = g_new(float, c.N *c.V);
  be->crossentropy_backward(dx, c.x, c.lse, tg, c.N, c.V, 1.0f / c.N);
  check_grad(c.x, dx, c.N * c.V, xent_obj, &c, "cross-entropy dlogits");
  g_free(c.x), g_free(c.losses), g_free(c.lse), g_free(dx);
}

/* ---- optimizer ops ---- */
static void test_sum_squares_and_scale(void)
{
  size_t n = 100003;
  float *x = randv(n, 1.0f);
  double ref = 0;
  for (size_t i = 0; i < n; i++)
    ref += (double)x[i] * x[i];
  g_assert_cmpfloat_with_epsilon(be->sum_squares(x, n), ref, 1e-9 * ref);
  g_assert_cmpfloat(be->sum_squares(x, 0), ==, 0.0);
  float *y = g_memdup2(x, n * sizeof(float));
  be->scale(y, n, 0.5f);
  for (size_t i = 0; i < n; i++)
    g_assert_cmpfloat(y[i], ==, x[i] * 0.5f);
  /* the same sum on 1 and 2 threads: the order is fixed by n */
  int keep = be->get_threads();
  be->set_threads(1);
  double s1 = be->sum_squares(x, n);
  be->set_threads(2);
  double s2 = be->sum_squares(x, n);
  be->set_threads(keep);
  g_assert_cmpfloat(s1, ==, s2);
  g_free(x), g_free(y);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  be = cohort_backend_cpu();
  g_test_add_func("/layers/linear", test_linear);
  g_test_add_func("/layers/embedding", test_embedding);
  g_test_add_func("/layers/layernorm", test_layernorm);
  g_test_add_func("/layers/attention", test_attention);
  g_test_add_func("/layers/gelu", test_gelu);
  g_test_add_func("/layers/residual", test_residual);
  g_test_add_func("/layers/crossentropy", test_crossentropy);
  g_test_add_func("/layers/sum-squares-scale", test_sum_squares_and_scale);
  return g_test_run();
}

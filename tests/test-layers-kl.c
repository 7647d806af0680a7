/* The CPU backend's kl_div_forward / kl_div_backward (knowledge distillation's KL term):
 *  - the gradient against central finite differences of sum_n KL_n (tests/fd-check.h);
 *  - backward accumulates, and scales by `scale`;
 *  - a student equal to its teacher has a KL of exactly 0 and no gradient;
 *  - losses and gradients against float64 PyTorch (tests/torch_distill_ref.py) at
 *    temperatures 1 and 4 (and 2, and logits spread over ±80, where a naive exp overflows):
 *    per tensor |ours - torch| <= 1e-5 · max|torch| + atol (1e-7 losses, 1e-9 gradients).
 *    PyTorch is skipped cleanly when /usr/bin/python3 cannot import it. */
#include "distill-ref.h"
#include "fd-check.h"
#include "kernels/backend.h"

#include <string.h>

static const CohortBackend *be;

typedef struct {
  int N, V;
  float tau;
  float *s, *t, *losses, *lse;
} Kl;

static double kl_sum(gpointer p)
{
  Kl *c = p;
  be->kl_div_forward(c->losses, c->lse, c->s, c->t, c->N, c->V, c->tau);
  double sum = 0;
  for (int n = 0; n < c->N; n++)
    sum += c->losses[n];
  return sum;
}

static void fd_case(float tau)
{
  Kl c = {.N = 5, .V = 7, .tau = tau};
  c.s = randv((size_t)c.N * c.V, 3.0f);
  c.t = randv((size_t)c.N * c.V, 3.0f);
  c.losses = g_new(float, c.N);
  c.lse = g_new(float, 2 * c.N);
  kl_sum(&c);
  for (int n = 0; n < c.N; n++)
    g_assert_cmpfloat(c.losses[n], >, 0);
  float *grad = g_new0(float, (size_t)c.N *c.V);
  be->kl_div_backward(grad, c.s, c.t, c.lse, c.N, c.V, tau, 1.0f);
  g_autofree char *what = g_strdup_printf("kl_div d/dstudent (tau %g)", tau);
  check_grad(c.s, grad, (size_t)c.N * c.V, kl_sum, &c, what);
  g_free(c.s), g_free(c.t), g_free(c.losses), g_free(c.lse), g_free(grad);
}

static void test_finite_differences(void)
{
  fd_case(1.0f);
  fd_case(4.0f);
}

/* d += (q - p) / tau · scale: twice with half the scale onto a start value gives start + the
 * gradient at scale 1. */
static void test_accumulates(void)
{
  enum { N = 4, V = 33 };
  float *s = randv(N * V, 2.0f), *t = randv(N * V, 2.0f), *start = randv(N * V, 1.0f);
  float losses[N], lse[2 * N], once[N * V] = {0}, twice[N * V];
  be->kl_div_forward(losses, lse, s, t, N, V, 3.0f);
  be->kl_div_backward(once, s, t, lse, N, V, 3.0f, 1.0f);
  memcpy(twice, start, sizeof twice);
  be->kl_div_backward(twice, s, t, lse, N, V, 3.0f, 0.5f);
  be->kl_div_backward(twice, s, t, lse, N, V, 3.0f, 0.5f);
  for (int i = 0; i < N * V; i++)
    g_assert_cmpfloat(fabs(twice[i] - (start[i] + once[i])), <=, 1e-6);
  g_free(s), g_free(t), g_free(start);
}

static void test_identical_is_zero(void)
{
  enum { N = 3, V = 257 };
  float *s = randv(N * V, 20.0f), losses[N], lse[2 * N], d[N * V] = {0};
  be->kl_div_forward(losses, lse, s, s, N, V, 2.0f);
  be->kl_div_backward(d, s, s, lse, N, V, 2.0f, 1.0f);
  for (int n = 0; n < N; n++)
    g_assert_cmpfloat(losses[n], ==, 0.0f);
  for (int i = 0; i < N * V; i++)
    g_assert_cmpfloat(d[i], ==, 0.0f);
  g_free(s);
}

typedef struct {
  GString *spec;
  GByteArray *in;
  GPtrArray *ours; /* float arrays, in the script's order */
  GArray *sizes;
  GArray *tols; /* atol per array */
} Cases;

static void add_case(Cases *c, int N, int V, float tau, float spread)
{
  size_t n = (size_t)N * V;
  float *s = randv(n, spread), *t = randv(n, spread);
  float *losses = g_new(float, N), *lse = g_new(float, 2 * N), *d = g_new0(float, n);
  be->kl_div_forward(losses, lse, s, t, N, V, tau);
  be->kl_div_backward(d, s, t, lse, N, V, tau, 1.0f);
  g_string_append_printf(c->spec, "%s{\"N\": %d, \"V\": %d, \"tau\": %.9g}",
                         c->ours->len ? ", " : "", N, V, tau);
  g_byte_array_append(c->in, (const guint8 *)s, n * 4);
  g_byte_array_append(c->in, (const guint8 *)t, n * 4);
  size_t sizes[] = {(size_t)N, n};
  double tols[] = {1e-7, 1e-9};
  g_ptr_array_add(c->ours, losses);
  g_ptr_array_add(c->ours, d);
  g_array_append_vals(c->sizes, sizes, 2);
  g_array_append_vals(c->tols, tols, 2);
  g_free(s), g_free(t), g_free(lse);
}

static void test_against_torch(void)
{
  if (!ref_have_torch())
    return;
  Cases c = {g_string_new("{\"mode\": \"kl\", \"cases\": ["), g_byte_array_new(),
             g_ptr_array_new_with_free_func(g_free), g_array_new(FALSE, FALSE, sizeof(size_t)),
             g_array_new(FALSE, FALSE, sizeof(double))};
  add_case(&c, 6, 50, 1.0f, 3.0f);
  add_case(&c, 6, 50, 4.0f, 3.0f);
  add_case(&c, 8, 256, 2.0f, 5.0f);   /* the byte-level GPT's vocabulary */
  add_case(&c, 3, 1000, 1.0f, 80.0f); /* exp(80) overflows a float without the max shift */
  add_case(&c, 3, 1000, 4.0f, 80.0f);
  g_string_append(c.spec, "]}");
  size_t n_ref = 0, pos = 0;
  g_autofree double *ref = ref_run(c.spec->str, c.in, &n_ref);
  for (guint k = 0; k < c.ours->len; k++) {
    size_t n = g_array_index(c.sizes, size_t, k);
    g_assert_cmpuint(pos + n, <=, n_ref);
    g_autofree char *what = g_strdup_printf("case %u %s", k / 2, k % 2 ? "dstudent" : "KL");
    ref_compare(what, g_ptr_array_index(c.ours, k), ref + pos, n, 1e-5,
                g_array_index(c.tols, double, k));
    pos += n;
  }
  g_assert_cmpuint(pos, ==, n_ref);
  g_string_free(c.spec, TRUE), g_byte_array_unref(c.in), g_ptr_array_unref(c.ours);
  g_array_unref(c.sizes), g_array_unref(c.tols);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  be = cohort_backend_cpu();
  g_test_add_func("/kl/finite-differences", test_finite_differences);
  g_test_add_func("/kl/accumulates", test_accumulates);
  g_test_add_func("/kl/identical-is-zero", test_identical_is_zero);
  g_test_add_func("/kl/against-torch", test_against_torch);
  return g_test_run();
}

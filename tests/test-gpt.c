/* The whole GPT model on a tiny shape (L2 H2 C16 T8 V32, B2): gradients against finite
 * differences of the loss, loss at init, determinism, gradient accumulation, the grad-ready
 * hook, and loss and gradients against the same model in PyTorch when it is installed. */
#include "torch-ref.h"
#include "engine/models/gpt.h"
#include "kernels/backend.h"

#include <glib.h>
#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

static const CohortGptShape shape = {
    .n_layer = 2, .n_head = 2, .n_embd = 16, .seq_len = 8, .vocab_size = 32};
enum { B = 2, T = 8 };

static int inputs[B * T], targets[B * T];

static void make_tokens(void)
{
  guint32 s = 7;
  for (int i = 0; i < B * T; i++) {
    s = s * 1664525u + 1013904223u;
    inputs[i] = (s >> 10) % shape.vocab_size;
    s = s * 1664525u + 1013904223u;
    targets[i] = (s >> 10) % shape.vocab_size;
  }
}

static CohortGpt *make_model(guint64 seed)
{
  g_autoptr(GError) error = NULL;
  CohortGpt *gpt = cohort_gpt_new(&shape, B, &error);
  g_assert_no_error(error);
  cohort_gpt_init_weights(gpt, seed);
  return gpt;
}

/* GPT-2's init makes most gradients tiny; larger random weights make every path through the
 * model carry a gradient that finite differences can see. */
static void randomise(CohortGpt *gpt, guint32 seed)
{
  guint n_t;
  const CohortTensorInfo *t = cohort_gpt_tensors(gpt, &n_t);
  float *p = cohort_gpt_params(gpt);
  for (guint i = 0; i < n_t; i++)
    for (size_t k = 0; k < t[i].numel; k++) {
      seed = seed * 1664525u + 1013904223u;
      float u = (float)((seed >> 8) * (1.0 / 16777216.0)) - 0.5f;
      p[t[i].offset + k] = t[i].ndim == 2 ? 0.5f * u : p[t[i].offset + k] + 0.4f * u;
    }
}

static void test_table(void)
{
  g_autoptr(CohortGpt) gpt = make_model(1);
  guint n_t;
  const CohortTensorInfo *t = cohort_gpt_tensors(gpt, &n_t);
  g_assert_cmpuint(n_t, ==, 2 + 12 * shape.n_layer + 2);
  size_t off = 0;
  for (guint i = 0; i < n_t; i++) {
    g_assert_cmpuint(t[i].offset, ==, off); /* contiguous, in table order */
    off += t[i].numel;
  }
  g_assert_cmpuint(off, ==, cohort_gpt_num_params(gpt));
  const CohortTensorInfo *a = cohort_gpt_find_tensor(gpt, "h.1.attn.c_attn.weight");
  g_assert_nonnull(a);
  g_assert_cmpint(a->shape[0], ==, 16);
  g_assert_cmpint(a->shape[1], ==, 48);
  g_assert_true(a->decay);
  g_assert_cmpint(a->layer, ==, 1);
  const CohortTensorInfo *b = cohort_gpt_find_tensor(gpt, "h.0.mlp.c_proj.bias");
  g_assert_nonnull(b);
  g_assert_false(b->decay);
  g_assert_cmpint(cohort_gpt_find_tensor(gpt, "ln_f.weight")->layer, ==, shape.n_layer);
  g_assert_null(cohort_gpt_find_tensor(gpt, "lm_head.weight"));
  /* init: LN weights 1, biases 0, matrices ~N(0, 0.02), residual projections smaller */
  float *p = cohort_gpt_params(gpt);
  g_assert_cmpfloat(p[cohort_gpt_find_tensor(gpt, "h.0.ln_2.weight")->offset], ==, 1.0f);
  g_assert_cmpfloat(p[b->offset], ==, 0.0f);
  const CohortTensorInfo *w = cohort_gpt_find_tensor(gpt, "wte.weight");
  double ss = 0;
  for (size_t k = 0; k < w->numel; k++)
    ss += (double)p[w->offset + k] * p[w->offset + k];
  g_assert_cmpfloat(fabs(sqrt(ss / w->numel) - 0.02), <, 0.002);

  g_autoptr(GError) error = NULL;
  CohortGptShape bad = shape;
  bad.n_head = 3;
  g_assert_null(cohort_gpt_new(&bad, 1, &error));
  g_assert_nonnull(error);
  g_assert_nonnull(strstr(error->message, "n_head"));
}

static void test_loss_at_init(void)
{
  g_autoptr(CohortGpt) gpt = make_model(3);
  float loss = cohort_gpt_forward(gpt, inputs, targets, B, T);
  g_assert_cmpfloat(fabs(loss - log(shape.vocab_size)), <, 0.05);
  /* without targets: loss 0, the same logits */
  size_t n = (size_t)B * T * shape.vocab_size;
  float *logits = g_memdup2(cohort_gpt_logits(gpt), n * sizeof(float));
  g_assert_cmpfloat(cohort_gpt_forward(gpt, inputs, NULL, B, T), ==, 0.0f);
  g_assert_cmpmem(logits, n * sizeof(float), cohort_gpt_logits(gpt), n * sizeof(float));
  g_free(logits);
}

/* Central differences of the loss at up to 5 elements of every tensor. The loss comes back
 * as a float (~3.5, resolution 2.4e-7), so with h = 1e-2 the difference quotient carries
 * ~2e-5 of rounding noise; a gradient passes at |fd - analytic| <= 2e-4 + 1e-2 |analytic|. */
static void test_finite_differences(void)
{
  g_autoptr(CohortGpt) gpt = make_model(5);
  randomise(gpt, 99);
  cohort_gpt_zero_grad(gpt);
  cohort_gpt_forward(gpt, inputs, targets, B, T);
  cohort_gpt_backward(gpt, 1.0f);
  size_t n = cohort_gpt_num_params(gpt);
  float *grad = g_memdup2(cohort_gpt_grads(gpt), n * sizeof(float));
  float *p = cohort_gpt_params(gpt);
  guint n_t;
  const CohortTensorInfo *t = cohort_gpt_tensors(gpt, &n_t);
  const float h = 1e-2f;
  double worst = 0;
  int checked = 0;
  for (guint i = 0; i < n_t; i++)
    for (int s = 0; s < 5; s++) {
      size_t k = t[i].offset + (t[i].numel - 1) * s / 4;
      float keep = p[k];
      p[k] = keep + h;
      double lp = cohort_gpt_forward(gpt, inputs, targets, B, T);
      p[k] = keep - h;
      double lm = cohort_gpt_forward(gpt, inputs, targets, B, T);
      p[k] = keep;
      double fd = (lp - lm) / (2.0 * h);
      double err = fabs(fd - grad[k]);
      if (err > 2e-4 + 1e-2 * fabs(grad[k]))
        g_error("%s[%zu]: analytic %.6g, finite difference %.6g", t[i].name, k - t[i].offset,
                grad[k], fd);
      worst = fmax(worst, err);
      checked++;
    }
  g_test_message("%d gradients checked, largest |fd - analytic| %.2e", checked, worst);
  g_free(grad);
}

static float *run_grads(int threads, float *loss)
{
  const CohortBackend *be = cohort_backend_cpu();
  int keep = be->get_threads();
  be->set_threads(threads);
  g_autoptr(CohortGpt) gpt = make_model(11);
  cohort_gpt_zero_grad(gpt);
  *loss = cohort_gpt_forward(gpt, inputs, targets, B, T);
  cohort_gpt_backward(gpt, 1.0f);
  be->set_threads(keep);
  return g_memdup2(cohort_gpt_grads(gpt), cohort_gpt_num_params(gpt) * sizeof(float));
}

static void test_determinism(void)
{
  g_autoptr(CohortGpt) probe = make_model(11);
  size_t bytes = cohort_gpt_num_params(probe) * sizeof(float);
  for (int threads = 1; threads <= 2; threads++) {
    float l1, l2;
    float *g1 = run_grads(threads, &l1), *g2 = run_grads(threads, &l2);
    g_assert_cmpmem(&l1, sizeof l1, &l2, sizeof l2);
    g_assert_cmpmem(g1, bytes, g2, bytes);
    g_free(g1), g_free(g2);
  }
}

/* The loss log (engine/model/model-loss.c): logged forwards return NAN, and the log gives the
 * sum of the means they would have returned, bit for bit, with the number of forwards; with
 * no forward logged it says 0; without a log begun it refuses. */
static void test_loss_log(void)
{
  g_autoptr(CohortGpt) gpt = make_model(13);
  float direct[3];
  double want = 0;
  for (int k = 0; k < 3; k++) {
    direct[k] = cohort_gpt_forward(gpt, inputs, targets, B - k % 2, T);
    want += direct[k];
  }
  double sum = 0;
  guint forwards = 9;
  g_assert_false(cohort_model_take_losses(gpt, &sum, &forwards));
  g_assert_cmpuint(forwards, ==, 0);
  for (int round = 0; round < 2; round++) { /* a second step reuses the grown log */
    cohort_model_begin_losses(gpt);
    for (int k = 0; k < 3; k++)
      g_assert_true(isnan(cohort_gpt_forward(gpt, inputs, targets, B - k % 2, T)));
    g_assert_true(cohort_model_take_losses(gpt, &sum, &forwards));
    g_assert_cmpuint(forwards, ==, 3);
    g_assert_cmpmem(&sum, sizeof sum, &want, sizeof want);
  }
  /* after the log: the forward returns its loss again */
  float again = cohort_gpt_forward(gpt, inputs, targets, B, T);
  g_assert_cmpmem(&again, sizeof again, &direct[0], sizeof again);
  cohort_model_begin_losses(gpt);
  g_assert_true(cohort_model_take_losses(gpt, &sum, &forwards));
  g_assert_cmpuint(forwards, ==, 0);
  g_assert_cmpfloat(sum, ==, 0);
}

static double rel_diff(const float *a, const float *b, size_t n)
{
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    den += (double)a[i] * a[i];
  }
  return sqrt(num / den);
}

/* Two half-batches with grad_scale 0.5 give the full batch's gradient: ||a - b|| / ||a||
 * <= 1e-6 (only float summation order differs). */
static void test_accumulation(void)
{
  g_autoptr(CohortGpt) gpt = make_model(13);
  randomise(gpt, 5);
  size_t n = cohort_gpt_num_params(gpt);
  cohort_gpt_zero_grad(gpt);
  float full_loss = cohort_gpt_forward(gpt, inputs, targets, B, T);
  cohort_gpt_backward(gpt, 1.0f);
  float *full = g_memdup2(cohort_gpt_grads(gpt), n * sizeof(float));
  cohort_gpt_zero_grad(gpt);
  double half_loss = 0;
  for (int b = 0; b < B; b++) {
    half_loss += 0.5 * cohort_gpt_forward(gpt, inputs + b * T, targets + b * T, 1, T);
    cohort_gpt_backward(gpt, 0.5f);
  }
  double rd = rel_diff(full, cohort_gpt_grads(gpt), n);
  g_test_message("accumulated vs full batch: relative difference %.2e", rd);
  g_assert_cmpfloat(rd, <=, 1e-6);
  g_assert_cmpfloat_with_epsilon(half_loss, full_loss, 1e-6);
  g_free(full);
}

typedef struct {
  CohortGpt *gpt;
  GArray *calls; /* pairs of size_t */
  float *snapshot;
} HookLog;

static void on_ready(size_t offset, size_t count, gpointer user_data)
{
  HookLog *log = user_data;
  size_t pair[2] = {offset, count};
  g_array_append_vals(log->calls, pair, 2);
  memcpy(log->snapshot + offset, cohort_gpt_grads(log->gpt) + offset, count * sizeof(float));
}

static void test_grad_ready_hook(void)
{
  g_autoptr(CohortGpt) gpt = make_model(17);
  size_t n = cohort_gpt_num_params(gpt);
  HookLog log = {gpt, g_array_new(FALSE, FALSE, sizeof(size_t)), g_new0(float, n)};
  cohort_gpt_set_grad_ready_func(gpt, on_ready, &log);
  cohort_gpt_zero_grad(gpt);
  cohort_gpt_forward(gpt, inputs, targets, B, T);
  cohort_gpt_backward(gpt, 1.0f);
  /* ln_f, each block, the embeddings: contiguous, decreasing, covering everything once */
  guint calls = log.calls->len / 2;
  g_assert_cmpuint(calls, ==, 1 + shape.n_layer + 1);
  size_t end = n;
  for (guint c = 0; c < calls; c++) {
    size_t off = g_array_index(log.calls, size_t, 2 * c);
    size_t cnt = g_array_index(log.calls, size_t, 2 * c + 1);
    g_assert_cmpuint(off + cnt, ==, end);
    g_assert_cmpuint(cnt, >, 0);
    end = off;
  }
  g_assert_cmpuint(end, ==, 0);
  /* what the hook saw was final */
  g_assert_cmpmem(log.snapshot, n * sizeof(float), cohort_gpt_grads(gpt), n * sizeof(float));
  /* removed: no more calls */
  cohort_gpt_set_grad_ready_func(gpt, NULL, NULL);
  cohort_gpt_forward(gpt, inputs, targets, B, T);
  cohort_gpt_backward(gpt, 1.0f);
  g_assert_cmpuint(log.calls->len / 2, ==, calls);
  g_array_unref(log.calls);
  g_free(log.snapshot);
}

/* Loss and every gradient against tests/torch_gpt_ref.py (float64 PyTorch). Per tensor,
 * |ours - torch| <= 1e-4 * max|torch over that tensor| + 1e-7; the loss to 1e-4 relative. */
static void test_against_torch(void)
{
  if (!g_file_test("/usr/bin/python3", G_FILE_TEST_IS_EXECUTABLE) ||
      system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
    g_test_skip("PyTorch is not importable by /usr/bin/python3");
    return;
  }
  g_autoptr(CohortGpt) gpt = make_model(23);
  randomise(gpt, 77);
  size_t n = cohort_gpt_num_params(gpt);
  cohort_gpt_zero_grad(gpt);
  float loss = cohort_gpt_forward(gpt, inputs, targets, B, T);
  cohort_gpt_backward(gpt, 1.0f);

  g_autoptr(GError) error = NULL;
  g_autofree char *dir = g_dir_make_tmp("cohort-test-gpt-XXXXXX", &error);
  g_assert_no_error(error);
  g_autofree char *path = g_build_filename(dir, "model.bin", NULL);
  GByteArray *buf = g_byte_array_new();
  int hdr[6] = {shape.n_layer, shape.n_head, shape.n_embd, shape.seq_len, shape.vocab_size, B};
  g_byte_array_append(buf, (guint8 *)hdr, sizeof hdr);
  g_byte_array_append(buf, (guint8 *)inputs, sizeof inputs);
  g_byte_array_append(buf, (guint8 *)targets, sizeof targets);
  g_byte_array_append(buf, (guint8 *)cohort_gpt_params(gpt), n * sizeof(float));
  g_file_set_contents(path, (char *)buf->data, buf->len, &error);
  g_assert_no_error(error);
  g_byte_array_unref(buf);

  g_autofree char *out = torch_ref_run("torch_gpt_ref.py", (const char *[]){path, NULL});
  g_unlink(path);
  g_rmdir(dir);

  g_auto(GStrv) lines = g_strsplit(g_strstrip(out), "\n", -1);
  g_assert_cmpuint(g_strv_length(lines), ==, 1 + n);
  double ref_loss = g_ascii_strtod(lines[0], NULL);
  g_assert_cmpfloat(fabs(loss - ref_loss), <=, 1e-4 * fabs(ref_loss));
  guint n_t;
  const CohortTensorInfo *t = cohort_gpt_tensors(gpt, &n_t);
  const float *g = cohort_gpt_grads(gpt);
  double worst = 0;
  for (guint i = 0; i < n_t; i++) {
    double mx = 0;
    for (size_t k = 0; k < t[i].numel; k++)
      mx = fmax(mx, fabs(g_ascii_strtod(lines[1 + t[i].offset + k], NULL)));
    for (size_t k = 0; k < t[i].numel; k++) {
      double r = g_ascii_strtod(lines[1 + t[i].offset + k], NULL);
      double e = fabs(g[t[i].offset + k] - r);
      if (e > 1e-4 * mx + 1e-7)
        g_error("%s[%zu]: ours %.8g, PyTorch %.8g (tensor max %.3g)", t[i].name, k,
                g[t[i].offset + k], r, mx);
      worst = fmax(worst, mx > 0 ? e / mx : 0);
    }
  }
  g_test_message("loss %.7f vs PyTorch %.7f; largest gradient error %.2e of the tensor max", loss,
                 ref_loss, worst);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  make_tokens();
  g_test_add_func("/gpt/table-and-init", test_table);
  g_test_add_func("/gpt/loss-at-init", test_loss_at_init);
  g_test_add_func("/gpt/finite-differences", test_finite_differences);
  g_test_add_func("/gpt/determinism", test_determinism);
  g_test_add_func("/gpt/loss-log", test_loss_log);
  g_test_add_func("/gpt/accumulation", test_accumulation);
  g_test_add_func("/gpt/grad-ready-hook", test_grad_ready_hook);
  g_test_add_func("/gpt/against-torch", test_against_torch);
  return g_test_run();
}

/* The DiT family on a tiny shape (L2 H2 C16, 8×8 grey images, patch 2, 3 classes, B3): the
 * tensor table and adaLN-Zero init, gradients against finite differences of the loss, the
 * grad-ready hook, and — through tests/torch_dit_ref.py, a PyTorch module with the DiT
 * reference's structure that loads our file with strict=True — loss, every gradient, the
 * position embedding, and 10 AdamW steps against float64 PyTorch. */
#include <glib.h>
#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

#include "torch-ref.h"
#include "engine/model/model-io.h"
#include "engine/models/dit.h"
#include "engine/model/optim.h"
#include "kernels/backend.h"
#include "engine/models/registry.h"

enum { L = 2, NH = 2, HID = 16, SIZE = 8, CH = 1, PATCH = 2, CLASSES = 3, B = 3 };
#define D (CH * SIZE * SIZE)

static float x_t[B * D], target[B * D], tt[B];
static int labels[B];

static void make_inputs(void)
{
  guint32 s = 11;
  for (int i = 0; i < B * D; i++) {
    s = s * 1664525u + 1013904223u;
    x_t[i] = (float)((s >> 8) * (1.0 / 16777216.0)) * 2 - 1;
    s = s * 1664525u + 1013904223u;
    target[i] = (float)((s >> 8) * (1.0 / 16777216.0)) * 2 - 1;
  }
  const float ts[B] = {0.1f, 0.55f, 0.93f};
  const int ls[B] = {0, 2, CLASSES}; /* the last is the "no label" row */
  memcpy(tt, ts, sizeof ts);
  memcpy(labels, ls, sizeof ls);
}

static CohortModel *make_model(guint64 seed)
{
  g_autoptr(CohortConfig) cfg = cohort_config_new();
  g_autoptr(GError) error = NULL;
  const char *sets[] = {
      "model=dit",    "data_format=images", "n_layer=2",    "n_head=2",      "n_embd=16",
      "image_size=8", "image_channels=1",   "patch_size=2", "num_classes=3", NULL};
  g_assert_true(cohort_config_apply_assignments(cfg, sets, "test", &error));
  CohortModel *m = cohort_model_new(cohort_backend_cpu(), cfg, B, &error);
  g_assert_no_error(error);
  m->ops->init_weights(m, seed);
  return m;
}

/* adaLN-Zero makes almost every gradient zero at init; random weights let every path carry a
 * gradient. */
static void randomise(CohortModel *m, guint32 seed)
{
  for (guint i = 0; i < m->n_tensors; i++)
    for (size_t k = 0; k < m->tensors[i].numel; k++) {
      seed = seed * 1664525u + 1013904223u;
      float u = (float)((seed >> 8) * (1.0 / 16777216.0)) - 0.5f;
      m->params[m->tensors[i].offset + k] = 0.6f * u;
    }
}

static void test_table_and_init(void)
{
  g_autoptr(CohortModel) m = make_model(1);
  g_assert_cmpuint(m->n_tensors, ==, 7 + 10 * L + 4);
  size_t off = 0;
  for (guint i = 0; i < m->n_tensors; i++) {
    g_assert_cmpuint(m->tensors[i].offset, ==, off);
    off += m->tensors[i].numel;
  }
  g_assert_cmpuint(off, ==, m->n_params);
  const CohortTensorInfo *x = cohort_model_find_tensor(m, "x_embedder.proj.weight");
  g_assert_nonnull(x);
  g_assert_cmpint(x->ndim, ==, 4);
  g_assert_cmpint(x->shape[1], ==, CH);
  g_assert_cmpint(x->shape[3], ==, PATCH);
  const CohortTensorInfo *y = cohort_model_find_tensor(m, "y_embedder.embedding_table.weight");
  g_assert_cmpint(y->shape[0], ==, CLASSES + 1);
  g_assert_nonnull(cohort_model_find_tensor(m, "blocks.1.adaLN_modulation.1.weight"));
  g_assert_nonnull(cohort_model_find_tensor(m, "final_layer.linear.bias"));
  const CohortTensorInfo *pos = cohort_model_find_buffer(m, "pos_embed");
  g_assert_nonnull(pos);
  g_assert_cmpint(pos->shape[1], ==, (SIZE / PATCH) * (SIZE / PATCH));
  /* adaLN-Zero: every modulation and the final linear start at zero, so the first prediction
   * is exactly zero and the loss the mean square of the target */
  const CohortTensorInfo *ada = cohort_model_find_tensor(m, "blocks.0.adaLN_modulation.1.weight");
  for (size_t k = 0; k < ada->numel; k++)
    g_assert_cmpfloat(m->params[ada->offset + k], ==, 0.0f);
  float v[B * D];
  cohort_dit_velocity(m, x_t, tt, labels, B, v);
  for (int i = 0; i < B * D; i++)
    g_assert_cmpfloat(v[i], ==, 0.0f);
  float loss = cohort_dit_forward_given(m, x_t, tt, labels, target, B);
  double ms = 0;
  for (int i = 0; i < B * D; i++)
    ms += (double)target[i] * target[i];
  g_assert_cmpfloat(fabs(loss - ms / (B * D)), <, 1e-6);
}

/* Central differences at up to 4 elements of every tensor. The loss is a float near 0.5
 * (resolution 6e-8); with h = 1e-2 rounding adds ~1e-5, so a gradient passes at
 * |fd - analytic| <= 2e-4 + 2e-2 |analytic|. */
static void test_finite_differences(void)
{
  g_autoptr(CohortModel) m = make_model(5);
  randomise(m, 7);
  cohort_model_zero_grad(m);
  cohort_dit_forward_given(m, x_t, tt, labels, target, B);
  m->ops->backward(m, 1.0f);
  g_autofree float *grad = g_memdup2(m->grads, m->n_params * sizeof(float));
  const float h = 1e-2f;
  guint checked = 0;
  for (guint i = 0; i < m->n_tensors; i++) {
    const CohortTensorInfo *t = &m->tensors[i];
    for (size_t j = 0; j < MIN(t->numel, 4); j++) {
      size_t k = t->offset + (j * 7919) % t->numel;
      float keep = m->params[k];
      m->params[k] = keep + h;
      double up = cohort_dit_forward_given(m, x_t, tt, labels, target, B);
      m->params[k] = keep - h;
      double down = cohort_dit_forward_given(m, x_t, tt, labels, target, B);
      m->params[k] = keep;
      double fd = (up - down) / (2 * h);
      if (fabs(fd - grad[k]) > 2e-4 + 2e-2 * fabs(grad[k]))
        g_error("%s[%zu]: finite difference %.6g, backward %.6g", t->name, k - t->offset, fd,
                grad[k]);
      checked++;
    }
  }
  g_test_message("%u gradients checked", checked);
}

typedef struct {
  size_t next; /* the lowest offset reported so far */
  guint calls;
} Hook;

static void on_ready(size_t offset, size_t count, gpointer data)
{
  Hook *h = data;
  g_assert_cmpuint(offset + count, ==, h->next); /* contiguous, in decreasing offsets */
  h->next = offset;
  h->calls++;
}

static void test_grad_ready(void)
{
  g_autoptr(CohortModel) m = make_model(2);
  Hook h = {.next = m->n_params};
  cohort_model_set_grad_ready_func(m, on_ready, &h);
  cohort_model_zero_grad(m);
  cohort_dit_forward_given(m, x_t, tt, labels, target, B);
  m->ops->backward(m, 1.0f);
  g_assert_cmpuint(h.next, ==, 0);
  g_assert_cmpuint(h.calls, ==, L + 2); /* final layer, each block, the embedders */
}

static gboolean have_torch(void)
{
  return g_file_test("/usr/bin/python3", G_FILE_TEST_IS_EXECUTABLE) &&
         system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
}

/* Writes the weights and the inputs, runs the reference, returns its output lines. */
static GStrv run_reference(CohortModel *m, const char *mode, const char *const *extra)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *dir = g_dir_make_tmp("cohort-test-dit-XXXXXX", &error);
  g_assert_no_error(error);
  g_autofree char *weights = g_build_filename(dir, "model.safetensors", NULL);
  g_autofree char *inputs = g_build_filename(dir, "inputs.bin", NULL);
  g_assert_true(cohort_model_save(m, NULL, weights, NULL, &error));
  GByteArray *buf = g_byte_array_new();
  int hdr[8] = {L, NH, HID, SIZE, CH, PATCH, CLASSES, B};
  g_byte_array_append(buf, (guint8 *)hdr, sizeof hdr);
  g_byte_array_append(buf, (guint8 *)x_t, sizeof x_t);
  g_byte_array_append(buf, (guint8 *)tt, sizeof tt);
  g_byte_array_append(buf, (guint8 *)labels, sizeof labels);
  g_byte_array_append(buf, (guint8 *)target, sizeof target);
  g_assert_true(g_file_set_contents(inputs, (char *)buf->data, buf->len, &error));
  g_byte_array_unref(buf);

  g_autoptr(GPtrArray) args = g_ptr_array_new();
  const char *fixed[] = {weights, inputs, mode};
  for (guint i = 0; i < G_N_ELEMENTS(fixed); i++)
    g_ptr_array_add(args, (gpointer)fixed[i]);
  for (guint i = 0; extra && extra[i]; i++)
    g_ptr_array_add(args, (gpointer)extra[i]);
  g_ptr_array_add(args, NULL);
  g_autofree char *out = torch_ref_run("torch_dit_ref.py", (const char *const *)args->pdata);
  g_unlink(weights);
  g_unlink(inputs);
  g_rmdir(dir);
  return g_strsplit(g_strstrip(out), "\n", -1);
}

/* Loss and every gradient: per tensor |ours - torch| <= 1e-4 * max|torch| + 1e-7. */
static void test_against_torch(void)
{
  if (!have_torch()) {
    g_test_skip("PyTorch is not importable by /usr/bin/python3");
    return;
  }
  g_autoptr(CohortModel) m = make_model(23);
  randomise(m, 77);
  cohort_model_zero_grad(m);
  float loss = cohort_dit_forward_given(m, x_t, tt, labels, target, B);
  m->ops->backward(m, 1.0f);
  g_auto(GStrv) lines = run_reference(m, "grads", NULL);
  g_assert_cmpuint(g_strv_length(lines), ==, 2 + m->n_params);
  double pos_diff = g_ascii_strtod(lines[0], NULL);
  g_assert_cmpfloat(pos_diff, <, 1e-6); /* our pos_embed against the reference's formula */
  double ref_loss = g_ascii_strtod(lines[1], NULL);
  g_assert_cmpfloat(fabs(loss - ref_loss), <=, 1e-5 * fabs(ref_loss));
  double worst = 0;
  for (guint i = 0; i < m->n_tensors; i++) {
    const CohortTensorInfo *t = &m->tensors[i];
    double mx = 0;
    for (size_t k = 0; k < t->numel; k++)
      mx = fmax(mx, fabs(g_ascii_strtod(lines[2 + t->offset + k], NULL)));
    for (size_t k = 0; k < t->numel; k++) {
      double r = g_ascii_strtod(lines[2 + t->offset + k], NULL);
      double e = fabs(m->grads[t->offset + k] - r);
      if (e > 1e-4 * mx + 1e-7)
        g_error("%s[%zu]: ours %.8g, PyTorch %.8g (tensor max %.3g)", t->name, k,
                m->grads[t->offset + k], r, mx);
      worst = fmax(worst, mx > 0 ? e / mx : 0);
    }
  }
  g_test_message("loss %.7f vs PyTorch %.7f; largest gradient error %.2e of the tensor max", loss,
                 ref_loss, worst);
}

/* 10 AdamW steps on one batch (lr 3e-3, betas 0.9/0.95, weight decay 0.1 on matrices): every
 * loss within 1e-4 relative of PyTorch's. */
static void test_adamw_against_torch(void)
{
  if (!have_torch()) {
    g_test_skip("PyTorch is not importable by /usr/bin/python3");
    return;
  }
  enum { STEPS = 10 };
  g_autoptr(CohortModel) m = make_model(31);
  randomise(m, 5);
  const char *extra[] = {"10", "0.003", NULL};
  g_auto(GStrv) lines = run_reference(m, "adamw", extra);
  g_assert_cmpuint(g_strv_length(lines), ==, STEPS);
  g_autoptr(CohortAdamW) opt = cohort_adamw_new(m->n_params);
  for (int s = 0; s < STEPS; s++) {
    cohort_model_zero_grad(m);
    float loss = cohort_dit_forward_given(m, x_t, tt, labels, target, B);
    m->ops->backward(m, 1.0f);
    cohort_adamw_step(opt, m->params, m->grads, m->tensors, m->n_tensors, 0.003, 0.9, 0.95, 1e-8,
                      0.1, s + 1);
    double ref = g_ascii_strtod(lines[s], NULL);
    if (fabs(loss - ref) > 1e-4 * fabs(ref))
      g_error("step %d: loss %.8g, PyTorch %.8g", s + 1, loss, ref);
  }
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  make_inputs();
  g_test_add_func("/dit/table-and-init", test_table_and_init);
  g_test_add_func("/dit/finite-differences", test_finite_differences);
  g_test_add_func("/dit/grad-ready-hook", test_grad_ready);
  g_test_add_func("/dit/against-torch", test_against_torch);
  g_test_add_func("/dit/adamw-against-torch", test_adamw_against_torch);
  return g_test_run();
}

/* The dit family's text layout (text_encoder: PixArt-α's, diffusers' names) on a tiny shape
 * (L2 H2 C16, 8×8 grey images, patch 2, text width 64 of the built-in encoder, up to 5 text
 * tokens, B3 with captions of 5, 2 and 0 tokens): the tensor table, PixArt's init (proj_out
 * zero: the first prediction is exactly zero), gradients against finite differences of the loss
 * through every tensor (caption projection, adaLN-single, the blocks, the final table), that
 * padding rows of the text change nothing, and the grad-ready hook's order. The block itself is
 * checked against float64 PyTorch in test-pixart-block. */
#include <glib.h>
#include <math.h>
#include <string.h>

#include "engine/families/dit.h"
#include "engine/models/dit.h"
#include "engine/models/registry.h"
#include "kernels/backend.h"

enum { L = 2, HID = 16, SIZE = 8, B = 3, M = 5, TD = COHORT_TEXT_BUILTIN_WIDTH };
#define D (SIZE * SIZE)

static float x_t[B * D], target[B * D], tt[B], text[B * M * TD];
static const int klen[B] = {5, 2, 0};

static float uniform(guint32 *s)
{
  *s = *s * 1664525u + 1013904223u;
  return (float)((*s >> 8) * (1.0 / 16777216.0)) * 2 - 1;
}

static void make_inputs(void)
{
  guint32 s = 11;
  for (int i = 0; i < B * D; i++) {
    x_t[i] = uniform(&s);
    target[i] = uniform(&s);
  }
  for (int b = 0; b < B; b++)
    for (int k = 0; k < M * TD; k++)
      text[b * M * TD + k] = k < klen[b] * TD ? uniform(&s) : 0.0f;
  const float ts[B] = {0.1f, 0.55f, 0.93f};
  memcpy(tt, ts, sizeof ts);
}

static CohortModel *make_model(guint64 seed)
{
  g_autoptr(CohortConfig) cfg = cohort_config_new();
  g_autoptr(GError) error = NULL;
  const char *sets[] = {"model=dit",
                        "data_format=images",
                        "n_layer=2",
                        "n_head=2",
                        "n_embd=16",
                        "image_size=8",
                        "image_channels=1",
                        "patch_size=2",
                        "text_encoder=builtin",
                        "max_text_tokens=5",
                        NULL};
  g_assert_true(cohort_config_apply_assignments(cfg, sets, "test", &error));
  CohortModel *m = cohort_model_new(cohort_backend_cpu(), cfg, B, &error);
  g_assert_no_error(error);
  m->ops->init_weights(m, seed);
  return m;
}

/* PixArt's init zeroes proj_out and each attn2.to_out: random weights let every path carry a
 * gradient. */
static void randomise(CohortModel *m, guint32 seed)
{
  for (guint i = 0; i < m->n_tensors; i++)
    for (size_t k = 0; k < m->tensors[i].numel; k++)
      m->params[m->tensors[i].offset + k] = 0.3f * uniform(&seed);
}

static void test_table_and_init(void)
{
  g_autoptr(CohortModel) m = make_model(1);
  g_assert_cmpuint(m->n_tensors, ==, DX_HEAD_COUNT + PB_COUNT * L + DXF_COUNT);
  size_t off = 0;
  for (guint i = 0; i < m->n_tensors; i++) {
    g_assert_cmpuint(m->tensors[i].offset, ==, off);
    off += m->tensors[i].numel;
  }
  g_assert_cmpuint(off, ==, m->n_params);
  const struct {
    const char *name;
    int d0, d1;
  } want[] = {
      {"pos_embed.proj.weight", HID, 1},
      {"adaln_single.emb.timestep_embedder.linear_1.weight", HID, 256},
      {"adaln_single.linear.weight", 6 * HID, HID},
      {"caption_projection.linear_1.weight", HID, TD},
      {"caption_projection.linear_2.weight", HID, HID},
      {"transformer_blocks.1.scale_shift_table", 6, HID},
      {"transformer_blocks.1.attn2.to_k.weight", HID, HID},
      {"transformer_blocks.0.ff.net.0.proj.weight", 4 * HID, HID},
      {"scale_shift_table", 2, HID},
      {"proj_out.weight", 4, HID},
  };
  for (size_t i = 0; i < G_N_ELEMENTS(want); i++) {
    const CohortTensorInfo *t = cohort_model_find_tensor(m, want[i].name);
    g_assert_nonnull(t);
    g_assert_cmpint(t->shape[0], ==, want[i].d0);
    g_assert_cmpint(t->shape[1], ==, want[i].d1);
  }
  g_assert_null(cohort_model_find_tensor(m, "y_embedder.embedding_table.weight"));
  g_assert_nonnull(cohort_model_find_buffer(m, "pos_embed.pos_embed"));
  /* proj_out starts at zero: the prediction is zero and the loss the target's mean square */
  float loss = cohort_dit_text_forward_given(m, x_t, tt, text, klen, M, target, B);
  double ms = 0;
  for (int i = 0; i < B * D; i++)
    ms += (double)target[i] * target[i];
  g_assert_cmpfloat(fabs(loss - ms / (B * D)), <, 1e-6);
}

/* Central differences at up to 4 elements of every tensor; tolerance as test-dit.c's. */
static void test_finite_differences(void)
{
  g_autoptr(CohortModel) m = make_model(5);
  randomise(m, 7);
  cohort_model_zero_grad(m);
  cohort_dit_text_forward_given(m, x_t, tt, text, klen, M, target, B);
  m->ops->backward(m, 1.0f);
  g_autofree float *grad = g_memdup2(m->grads, m->n_params * sizeof(float));
  const float h = 1e-2f;
  guint checked = 0, nonzero = 0;
  for (guint i = 0; i < m->n_tensors; i++) {
    const CohortTensorInfo *t = &m->tensors[i];
    for (size_t j = 0; j < MIN(t->numel, 4); j++) {
      size_t k = t->offset + (j * 7919) % t->numel;
      float keep = m->params[k];
      m->params[k] = keep + h;
      double up = cohort_dit_text_forward_given(m, x_t, tt, text, klen, M, target, B);
      m->params[k] = keep - h;
      double down = cohort_dit_text_forward_given(m, x_t, tt, text, klen, M, target, B);
      m->params[k] = keep;
      double fd = (up - down) / (2 * h);
      if (fabs(fd - grad[k]) > 2e-4 + 2e-2 * fabs(grad[k]))
        g_error("%s[%zu]: finite difference %.6g, backward %.6g", t->name, k - t->offset, fd,
                grad[k]);
      checked++;
      nonzero += fabs(grad[k]) > 1e-6;
    }
  }
  g_test_message("%u gradients checked, %u of them non-zero", checked, nonzero);
  g_assert_cmpuint(nonzero, >, checked * 3 / 4);
}

/* Rows past a caption's length are never read: garbage there changes no prediction. */
static void test_padding_ignored(void)
{
  g_autoptr(CohortModel) m = make_model(5);
  randomise(m, 9);
  float a = cohort_dit_text_forward_given(m, x_t, tt, text, klen, M, target, B);
  g_autofree float *noisy = g_memdup2(text, sizeof text);
  for (int b = 0; b < B; b++)
    for (int k = klen[b] * TD; k < M * TD; k++)
      noisy[b * M * TD + k] = 100.0f;
  float b2 = cohort_dit_text_forward_given(m, x_t, tt, noisy, klen, M, target, B);
  g_assert_cmpfloat(a, ==, b2);
  /* and the text matters: another caption for example 0 changes its loss */
  noisy[0] += 1.0f;
  float c = cohort_dit_text_forward_given(m, x_t, tt, noisy, klen, M, target, B);
  g_assert_cmpfloat(fabs(c - a), >, 1e-6);
}

typedef struct {
  size_t next;
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
  cohort_dit_text_forward_given(m, x_t, tt, text, klen, M, target, B);
  m->ops->backward(m, 1.0f);
  g_assert_cmpuint(h.next, ==, 0);
  g_assert_cmpuint(h.calls, ==, L + 2); /* final layer, each block, the embedders */
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  make_inputs();
  g_test_add_func("/dit-text/table-and-init", test_table_and_init);
  g_test_add_func("/dit-text/finite-differences", test_finite_differences);
  g_test_add_func("/dit-text/padding-ignored", test_padding_ignored);
  g_test_add_func("/dit-text/grad-ready-hook", test_grad_ready);
  return g_test_run();
}

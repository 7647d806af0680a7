/* The dit family's text layout (text_encoder: PixArt-α's, diffusers' names) on a tiny shape
 * (L2 H2 C16, 8×8 grey images, patch 2, text width 64 of the built-in encoder, up to 5 text
 * tokens, B3 with captions of 5, 2 and 0 tokens): the tensor table, PixArt's init (proj_out
 * zero: the first prediction is exactly zero), gradients against finite differences of the loss
 * through every tensor (caption projection, adaLN-single, the blocks, the final table), that
 * padding rows of the text change nothing, the grad-ready hook's order, and LoRA (its default
 * targets, every block's attn1, attn2 and ff, and its gradients by the chain rule through the
 * full model at the merged weights, whose own gradients the finite differences check). The
 * block itself is checked against float64 PyTorch in test-pixart-block, and the whole model
 * (width 32) with its loss in `/dit-text/torch-reference` (tests/torch_pixart_model_ref.py). */
#include <glib.h>
#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

#include "engine/families/dit.h"
#include "engine/model/lora.h"
#include "engine/models/dit-private.h"
#include "engine/models/dit.h"
#include "engine/models/registry.h"
#include "kernels/backend.h"
#include "torch-ref.h"

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

/* The tiny text-layout DiT with `finetune` (full, lora with rank 2 and alpha 3, frozen with
 * trainable *.bias) and activation_checkpointing `ckpt`, weights from `seed`. */
static CohortModel *make_sized(const char *finetune, gboolean ckpt, guint64 seed, int width)
{
  g_autoptr(CohortConfig) cfg = cohort_config_new();
  g_autoptr(GError) error = NULL;
  g_autofree char *mode = g_strdup_printf("finetune=%s", finetune);
  const char *sets[] = {mode,
                        ckpt ? "activation_checkpointing=true" : "activation_checkpointing=false",
                        "lora_rank=2",
                        "lora_alpha=3",
                        g_str_equal(finetune, "frozen") ? "trainable=*.bias" : "trainable=",
                        "model=dit",
                        "data_format=images",
                        "n_layer=2",
                        "n_head=2",
                        width == 32 ? "n_embd=32" : "n_embd=16",
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

static CohortModel *make_with(const char *finetune, gboolean ckpt, guint64 seed)
{
  return make_sized(finetune, ckpt, seed, HID);
}

static CohortModel *make_tuned(const char *finetune, guint64 seed)
{
  return make_with(finetune, FALSE, seed);
}

static CohortModel *make_model(guint64 seed)
{
  return make_tuned("full", seed);
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

/* Copies `src`'s base tensors, with its adapters merged (W + s B A) when it has any, into
 * `dst` (a full model). */
static void load_merged(CohortModel *dst, const CohortModel *src)
{
  g_autofree float *merged = g_new(float, src->n_params);
  if (src->lora)
    cohort_lora_merge(src, src->params, merged);
  else
    memcpy(merged, src->params, src->n_params * sizeof(float));
  for (guint i = 0; i < dst->n_tensors; i++) {
    const CohortTensorInfo *t = &dst->tensors[i];
    const CohortTensorInfo *from = cohort_model_find_tensor(src, t->name);
    memcpy(dst->params + t->offset, merged + from->offset, t->numel * sizeof(float));
  }
}

/* The worst error of `lora`'s adapter gradients against the chain rule through `full`'s
 * weight gradients at the merged weights (dB = s dW Aᵀ, dA = s Bᵀ dW), relative to the largest
 * expected value of each adapter. */
static double chain_rule_error(const CohortModel *lora, const CohortModel *full)
{
  const CohortLora *Lo = lora->lora;
  double worst = 0;
  for (guint ad = 0; ad < Lo->n; ad++) {
    const CohortTensorInfo *A = &Lo->tensors[2 * ad], *Bt = &Lo->tensors[2 * ad + 1];
    const CohortTensorInfo *W =
        cohort_model_find_tensor(full, lora->tensors[Lo->adapters[ad].target].name);
    int r = A->shape[0], in = A->shape[1], out = Bt->shape[0];
    const float *dW = full->grads + W->offset, *a = lora->params + A->offset;
    const float *b = lora->params + Bt->offset;
    double err = 0, mx = 0;
    for (int o = 0; o < out; o++)
      for (int k = 0; k < r; k++) {
        double want = 0;
        for (int i = 0; i < in; i++)
          want += Lo->scale * (double)dW[o * in + i] * a[k * in + i];
        mx = fmax(mx, fabs(want));
        err = fmax(err, fabs(lora->grads[Bt->offset + o * r + k] - want));
      }
    for (int k = 0; k < r; k++)
      for (int i = 0; i < in; i++) {
        double want = 0;
        for (int o = 0; o < out; o++)
          want += Lo->scale * (double)b[o * r + k] * dW[o * in + i];
        mx = fmax(mx, fabs(want));
        err = fmax(err, fabs(lora->grads[A->offset + k * in + i] - want));
      }
    if (mx == 0)
      g_error("adapter of %s has no gradient", lora->tensors[Lo->adapters[ad].target].name);
    worst = fmax(worst, err / mx);
  }
  return worst;
}

/* finetune lora on the text layout: the default targets are each block's attn1 and attn2
 * (to_q, to_k, to_v, to_out.0) and ff; a fresh adapter leaves the loss exactly the base's;
 * with random weights and adapters the loss is the full model's at the merged weights and
 * every adapter's gradient follows the chain rule; the base gets no gradient. finetune frozen
 * with trainable *.bias gives the biases the full model's gradients, bit for bit. */
static void test_lora(void)
{
  g_autoptr(CohortModel) full = make_model(5), lora = make_tuned("lora", 5);
  g_assert_nonnull(lora->lora);
  g_assert_cmpuint(lora->lora->n, ==, L * 10);
  const char *modules[] = {"attn1.to_q",    "attn1.to_k", "attn1.to_v", "attn1.to_out.0",
                           "attn2.to_q",    "attn2.to_k", "attn2.to_v", "attn2.to_out.0",
                           "ff.net.0.proj", "ff.net.2"};
  for (int l = 0; l < L; l++)
    for (guint k = 0; k < G_N_ELEMENTS(modules); k++) {
      g_autofree char *name = g_strdup_printf("transformer_blocks.%d.%s.weight", l, modules[k]);
      const CohortLoraAdapter *ad = &lora->lora->adapters[l * 10 + k];
      g_assert_cmpstr(lora->tensors[ad->target].name, ==, name);
    }
  randomise(full, 7);
  load_merged(lora, full); /* lora_B is still zero: the merge is the base */
  float f0 = cohort_dit_text_forward_given(full, x_t, tt, text, klen, M, target, B);
  float l0 = cohort_dit_text_forward_given(lora, x_t, tt, text, klen, M, target, B);
  g_assert_cmpfloat(f0, ==, l0);

  guint32 seed = 21;
  for (guint k = 0; k < lora->lora->n_tensors; k++) {
    const CohortTensorInfo *t = &lora->lora->tensors[k];
    for (size_t i = 0; i < t->numel; i++)
      lora->params[t->offset + i] = 0.3f * uniform(&seed);
  }
  load_merged(full, lora);
  cohort_model_zero_grad(full);
  cohort_model_zero_grad(lora);
  float fl = cohort_dit_text_forward_given(full, x_t, tt, text, klen, M, target, B);
  full->ops->backward(full, 1.0f);
  float ll = cohort_dit_text_forward_given(lora, x_t, tt, text, klen, M, target, B);
  lora->ops->backward(lora, 1.0f);
  g_assert_cmpfloat(fabs(ll - fl), <=, 1e-5 * fabs(fl));
  double worst = chain_rule_error(lora, full);
  g_test_message("text-layout LoRA: loss %.8g vs merged full %.8g; worst adapter gradient "
                 "error %.3g",
                 ll, fl, worst);
  g_assert_cmpfloat(worst, <=, 1e-5);
  for (guint i = 0; i < lora->n_tensors; i++) {
    g_assert_true(lora->tensors[i].frozen);
    g_assert_null(cohort_model_grad(lora, i));
  }

  /* frozen with trainable *.bias: the biases learn, with the full model's gradients */
  g_autoptr(CohortModel) fr = make_tuned("frozen", 5);
  load_merged(fr, full);
  cohort_model_zero_grad(fr);
  float rl = cohort_dit_text_forward_given(fr, x_t, tt, text, klen, M, target, B);
  fr->ops->backward(fr, 1.0f);
  g_assert_cmpfloat(rl, ==, fl);
  guint biases = 0;
  for (guint i = 0; i < fr->n_tensors; i++) {
    const CohortTensorInfo *t = &fr->tensors[i];
    g_assert_true(t->frozen == !g_str_has_suffix(t->name, ".bias"));
    if (t->frozen)
      continue;
    const CohortTensorInfo *ft = cohort_model_find_tensor(full, t->name);
    g_assert_cmpmem(full->grads + ft->offset, ft->numel * 4, fr->grads + t->offset, t->numel * 4);
    biases++;
  }
  g_assert_cmpuint(biases, >, 20);
}

/* activation_checkpointing: each block computed again in backward from its kept input gives
 * the same loss and gradients, bit for bit (full fine-tuning and LoRA), in fewer bytes. */
static void test_checkpointing(void)
{
  const char *modes[] = {"full", "lora"};
  for (guint k = 0; k < G_N_ELEMENTS(modes); k++) {
    g_autoptr(CohortModel) off = make_with(modes[k], FALSE, 5), on = make_with(modes[k], TRUE, 5);
    g_assert_cmpuint(on->act_bytes, <, off->act_bytes);
    randomise(off, 7);
    guint32 seed = 23; /* the adapters too: A and B both zero would leave them no gradient */
    for (guint t = 0; off->lora && t < off->lora->n_tensors; t++)
      for (size_t i = 0; i < off->lora->tensors[t].numel; i++)
        off->params[off->lora->tensors[t].offset + i] = 0.3f * uniform(&seed);
    memcpy(on->params, off->params, off->n_params * sizeof(float));
    cohort_model_zero_grad(off);
    cohort_model_zero_grad(on);
    float a = cohort_dit_text_forward_given(off, x_t, tt, text, klen, M, target, B);
    off->ops->backward(off, 1.0f);
    float b = cohort_dit_text_forward_given(on, x_t, tt, text, klen, M, target, B);
    on->ops->backward(on, 1.0f);
    g_assert_cmpfloat(a, ==, b);
    g_assert_cmpuint(on->n_trainable, ==, off->n_trainable);
    g_assert_cmpmem(on->grads, on->n_trainable * 4, off->grads, off->n_trainable * 4);
    double norm = 0;
    for (size_t i = 0; i < on->n_trainable; i++)
      norm += (double)on->grads[i] * on->grads[i];
    g_assert_cmpfloat(norm, >, 0);
    g_test_message("%s: activations %zu bytes with checkpointing, %zu without; same gradients",
                   modes[k], on->act_bytes, off->act_bytes);
  }
}

/* ---- the whole model against float64 PyTorch (tests/torch_pixart_model_ref.py) ---- */

static gboolean have_torch(void)
{
  return g_file_test("/usr/bin/python3", G_FILE_TEST_IS_EXECUTABLE) &&
         system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
}

/* The reference's output: "loss v" and "NAME g g ..." lines, name → values. */
static GHashTable *parse_reference(char *out)
{
  GHashTable *ref =
      g_hash_table_new_full(g_str_hash, g_str_equal, g_free, (GDestroyNotify)g_array_unref);
  g_auto(GStrv) lines = g_strsplit(g_strstrip(out), "\n", -1);
  for (guint i = 0; lines[i]; i++) {
    g_auto(GStrv) f = g_strsplit(lines[i], " ", -1);
    GArray *v = g_array_new(FALSE, FALSE, sizeof(double));
    for (guint k = 1; f[k]; k++) {
      double x = g_ascii_strtod(f[k], NULL);
      g_array_append_val(v, x);
    }
    g_hash_table_insert(ref, g_strdup(f[0]), v);
  }
  return ref;
}

static double ref_max(const GArray *ref)
{
  double mx = 0;
  for (guint k = 0; k < ref->len; k++)
    mx = fmax(mx, fabs(g_array_index(ref, double, k)));
  return mx;
}

/* A training step of the tiny text layout at width 32 (L2, 2 heads, 8×8, patch 2, B3 with
 * captions of 5, 2 and 0 tokens) on a CohortBatch, so the model draws each example's noise and
 * timestep from (seed, epoch, example id) itself; the draw is read back from its host scratch
 * (t, and noise = target + x0) and handed to the reference with the clean images, the text and
 * every tensor (all perturbed: PixArt's init zeroes attn2.to_out and proj_out). The loss agrees
 * within 1e-6 relative and every gradient within 1e-5 of its tensor's largest value (a key
 * bias, whose gradient is 0 in exact arithmetic, against its weight's). */
static void test_torch_reference(void)
{
  if (!have_torch()) {
    g_test_skip("PyTorch is not importable by /usr/bin/python3");
    return;
  }
  enum { W = 32 };
  g_autoptr(CohortModel) m = make_sized("full", FALSE, 3, W);
  guint32 p = 13; /* PixArt's init plus U(-0.1, 0.1) everywhere: no tensor stays zero */
  for (size_t k = 0; k < m->n_params; k++)
    m->params[k] += 0.1f * uniform(&p);
  g_assert_cmpuint(m->n_tensors, ==, DX_HEAD_COUNT + PB_COUNT * L + DXF_COUNT);
  float x0[B * D], text_in[B * M * TD];
  int labels[B] = {-1, -1, -1}, lens[B];
  guint64 ids[B] = {4, 17, 29};
  guint32 s = 31;
  for (int i = 0; i < B * D; i++)
    x0[i] = uniform(&s);
  memcpy(text_in, text, sizeof text_in);
  memcpy(lens, klen, sizeof lens);
  CohortBatch batch = {.B = B,
                       .C = 1,
                       .H = SIZE,
                       .W = SIZE,
                       .images = x0,
                       .labels = labels,
                       .M = M,
                       .text_dim = TD,
                       .text = text_in,
                       .text_len = lens,
                       .example_ids = ids,
                       .epoch = 3};
  cohort_model_zero_grad(m);
  float loss = m->ops->forward(m, &batch, COHORT_FORWARD_TRAIN);
  m->ops->backward(m, 1.0f);
  const Dit *d = dit_of(m);
  float t[B], noise[B * D];
  memcpy(t, d->host_t, sizeof t);
  for (int i = 0; i < B * D; i++)
    noise[i] = d->host_target[i] + x0[i];
  g_assert_cmpfloat(t[0], !=, t[1]); /* drawn per example */

  g_autoptr(GError) error = NULL;
  g_autofree char *dir = g_dir_make_tmp("cohort-test-dit-text-XXXXXX", &error);
  g_assert_no_error(error);
  g_autofree char *inputs = g_build_filename(dir, "inputs.bin", NULL);
  g_autofree char *names = g_build_filename(dir, "names.txt", NULL);
  GByteArray *bin = g_byte_array_new();
  const int head[9] = {B, 1, SIZE, 2, W, 2, TD, M, L};
  g_byte_array_append(bin, (const guint8 *)head, sizeof head);
  g_byte_array_append(bin, (const guint8 *)klen, sizeof klen);
  g_byte_array_append(bin, (const guint8 *)x0, sizeof x0);
  g_byte_array_append(bin, (const guint8 *)noise, sizeof noise);
  g_byte_array_append(bin, (const guint8 *)t, sizeof t);
  g_byte_array_append(bin, (const guint8 *)text, sizeof text);
  GString *list = g_string_new(NULL);
  for (guint i = 0; i < m->n_tensors; i++) {
    const CohortTensorInfo *ti = &m->tensors[i];
    g_byte_array_append(bin, (const guint8 *)(m->params + ti->offset),
                        (guint)(ti->numel * sizeof(float)));
    g_string_append_printf(list, "%s\n", ti->name);
  }
  g_assert_true(g_file_set_contents(inputs, (const char *)bin->data, bin->len, &error));
  g_assert_true(g_file_set_contents(names, list->str, -1, &error));
  g_byte_array_unref(bin), g_string_free(list, TRUE);
  const char *args[] = {inputs, names, NULL};
  g_autofree char *out = torch_ref_run("torch_pixart_model_ref.py", args);
  g_unlink(inputs), g_unlink(names), g_rmdir(dir);
  g_autoptr(GHashTable) ref = parse_reference(out);

  const GArray *rl = g_hash_table_lookup(ref, "loss");
  g_assert_nonnull(rl);
  g_assert_cmpuint(rl->len, ==, 1);
  double want = g_array_index(rl, double, 0), loss_err = fabs(loss - want) / fabs(want);
  if (!(loss_err <= 1e-6))
    g_error("loss: ours %.9g, PyTorch %.9g", loss, want);
  double worst = 0;
  const char *worst_name = "";
  for (guint i = 0; i < m->n_tensors; i++) {
    const CohortTensorInfo *ti = &m->tensors[i];
    const GArray *r = g_hash_table_lookup(ref, ti->name);
    g_assert_nonnull(r);
    g_assert_cmpuint(r->len, ==, ti->numel);
    double mx = ref_max(r);
    if (g_str_has_suffix(ti->name, "to_k.bias")) {
      g_autofree char *wname =
          g_strdup_printf("%.*sweight", (int)(strlen(ti->name) - strlen("bias")), ti->name);
      mx = fmax(mx, ref_max(g_hash_table_lookup(ref, wname)));
    }
    g_assert_cmpfloat(mx, >, 0); /* every tensor carries signal */
    const float *g = cohort_model_grad(m, i);
    double err = 0;
    for (size_t k = 0; k < ti->numel; k++)
      err = fmax(err, fabs(g[k] - g_array_index(r, double, k)));
    if (!(err <= 1e-5 * mx))
      g_error("%s: gradient off PyTorch's by %.3g (tensor max %.3g)", ti->name, err, mx);
    if (err / mx > worst)
      worst = err / mx, worst_name = ti->name;
  }
  g_test_message("text-layout DiT vs float64 PyTorch: loss %.9g vs %.9g (relative error %.2g); "
                 "worst gradient error %.2g of its tensor's largest value (%s)",
                 loss, want, loss_err, worst, worst_name);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  make_inputs();
  g_test_add_func("/dit-text/table-and-init", test_table_and_init);
  g_test_add_func("/dit-text/finite-differences", test_finite_differences);
  g_test_add_func("/dit-text/padding-ignored", test_padding_ignored);
  g_test_add_func("/dit-text/grad-ready-hook", test_grad_ready);
  g_test_add_func("/dit-text/lora", test_lora);
  g_test_add_func("/dit-text/activation-checkpointing", test_checkpointing);
  g_test_add_func("/dit-text/torch-reference", test_torch_reference);
  return g_test_run();
}

/* The resnet family on a tiny ResNet-8 (width 4, 8×8 grey images, 5 classes, batch 8): the
 * tensor and buffer tables and torchvision's initialisation, gradients against finite
 * differences, the grad-ready hook, SyncBatchNorm between two in-process "ranks" against one
 * model on the combined batch, and — through tests/torch_resnet_ref.py, a float64 PyTorch module
 * that loads our file with strict=True — a training-mode forward/backward (loss, every
 * gradient, the running statistics), evaluation mode, and 10 SGD steps with StepLR. */
#include <glib.h>
#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

#include "torch-ref.h"
#include "engine/model/model-io.h"
#include "engine/models/resnet.h"
#include "engine/model/optim.h"
#include "kernels/backend.h"
#include "engine/models/registry.h"
#include "kernels/cpu/conv-paths.h"

enum { NB = 1, WIDTH = 4, SIZE = 8, CH = 1, CLASSES = 5, B = 8 };
#define D        (CH * SIZE * SIZE)
#define MOMENTUM 0.2f

static float images[B * D];
static int labels[B];

static float lcg(guint32 *s)
{
  *s = *s * 1664525u + 1013904223u;
  return (float)((*s >> 8) * (1.0 / 16777216.0));
}

static void make_inputs(void)
{
  guint32 s = 11;
  for (int i = 0; i < B * D; i++)
    images[i] = 2 * lcg(&s) - 1;
  for (int i = 0; i < B; i++)
    labels[i] = (i * 3 + 1) % CLASSES;
}

static CohortConfig *make_config(void)
{
  CohortConfig *cfg = cohort_config_new();
  g_autoptr(GError) error = NULL;
  const char *sets[] = {"model=resnet",
                        "data_format=images",
                        "n_layer=8",
                        "resnet_width=4",
                        "image_size=8",
                        "image_channels=1",
                        "num_classes=5",
                        "bn_momentum=0.2",
                        "optimizer=sgd",
                        "lr_schedule=step",
                        NULL};
  g_assert_true(cohort_config_apply_assignments(cfg, sets, "test", &error));
  return cfg;
}

static CohortModel *make_model_with(guint64 seed, int max_batch, const char *extra)
{
  g_autoptr(CohortConfig) cfg = make_config();
  g_autoptr(GError) error = NULL;
  if (extra)
    g_assert_true(cohort_config_set_assignment(cfg, extra, "test", &error));
  CohortModel *m = cohort_model_new(cohort_backend_cpu(), cfg, max_batch, &error);
  g_assert_no_error(error);
  m->ops->init_weights(m, seed);
  return m;
}

static CohortModel *make_model(guint64 seed, int max_batch)
{
  return make_model_with(seed, max_batch, NULL);
}

/* BatchNorm scales near 1 and shifts near 0 of both signs, convolutions and the classifier
 * at a scale that keeps activations O(1); running statistics away from 0 and 1. */
static void randomise(CohortModel *m, guint32 seed)
{
  for (guint i = 0; i < m->n_tensors; i++) {
    const CohortTensorInfo *t = &m->tensors[i];
    gboolean bn_scale =
        t->ndim == 1 && strstr(t->name, "bn") && g_str_has_suffix(t->name, "weight");
    bn_scale = bn_scale || g_str_has_suffix(t->name, "downsample.1.weight");
    double fan_in = t->ndim == 4 ? (double)t->shape[1] * t->shape[2] * t->shape[3] : 4.0;
    for (size_t k = 0; k < t->numel; k++) {
      float u = lcg(&seed) - 0.5f;
      m->params[t->offset + k] = bn_scale ? 1.0f + u : (float)(u * 3.0 / sqrt(fan_in));
    }
  }
  for (guint i = 0; i < m->n_buffers; i++) {
    const CohortTensorInfo *t = &m->buffers[i];
    for (size_t k = 0; k < t->numel; k++) {
      float u = lcg(&seed);
      float *v = &m->buffer_data[t->offset + k];
      if (g_str_has_suffix(t->name, "running_mean"))
        *v = u - 0.5f;
      else if (g_str_has_suffix(t->name, "running_var"))
        *v = 0.5f + u;
      else
        *v = 3.0f;
    }
  }
}

static void test_table_and_init(void)
{
  g_autoptr(CohortModel) m = make_model(1, B);
  /* stem 3, layer1.0 6, layer2.0 and layer3.0 9 each (with downsample), fc 2 */
  g_assert_cmpuint(m->n_tensors, ==, 3 + 6 + 9 + 9 + 2);
  g_assert_cmpuint(m->n_buffers, ==, 3 * 9);
  size_t off = 0;
  for (guint i = 0; i < m->n_tensors; i++) {
    g_assert_cmpuint(m->tensors[i].offset, ==, off);
    g_assert_cmpint(m->tensors[i].decay, ==, m->tensors[i].ndim >= 2);
    off += m->tensors[i].numel;
  }
  g_assert_cmpuint(off, ==, m->n_params);
  g_assert_cmpint(cohort_model_count_params(&(CohortConfig){.model = (char *)"resnet"}), ==,
                  0); /* n_layer 0 */
  const char *names[] = {"conv1.weight",
                         "bn1.bias",
                         "layer1.0.conv2.weight",
                         "layer2.0.downsample.0.weight",
                         "layer3.0.downsample.1.weight",
                         "fc.weight",
                         "fc.bias"};
  for (guint i = 0; i < G_N_ELEMENTS(names); i++)
    g_assert_nonnull(cohort_model_find_tensor(m, names[i]));
  g_assert_null(cohort_model_find_tensor(m, "layer1.0.downsample.0.weight"));
  const CohortTensorInfo *ds = cohort_model_find_tensor(m, "layer2.0.downsample.0.weight");
  g_assert_cmpint(ds->shape[0], ==, 2 * WIDTH);
  g_assert_cmpint(ds->shape[1], ==, WIDTH);
  g_assert_cmpint(ds->shape[2], ==, 1);
  const CohortTensorInfo *fc = cohort_model_find_tensor(m, "fc.weight");
  g_assert_cmpint(fc->shape[0], ==, CLASSES);
  g_assert_cmpint(fc->shape[1], ==, 4 * WIDTH);
  const CohortTensorInfo *nbt = cohort_model_find_buffer(m, "layer3.0.bn2.num_batches_tracked");
  g_assert_nonnull(nbt);
  g_assert_cmpint(nbt->ndim, ==, 0);
  g_assert_true(nbt->int64);
  g_assert_false(nbt->decay);
  /* torchvision's init: BN scale 1 and shift 0, running variance 1, kaiming_normal fan_out */
  const CohortTensorInfo *g = cohort_model_find_tensor(m, "layer2.0.bn1.weight");
  const CohortTensorInfo *rv = cohort_model_find_buffer(m, "layer2.0.bn1.running_var");
  for (size_t k = 0; k < g->numel; k++) {
    g_assert_cmpfloat(m->params[g->offset + k], ==, 1.0f);
    g_assert_cmpfloat(m->buffer_data[rv->offset + k], ==, 1.0f);
  }
  const CohortTensorInfo *w = cohort_model_find_tensor(m, "layer3.0.conv2.weight");
  double ss = 0;
  for (size_t k = 0; k < w->numel; k++)
    ss += (double)m->params[w->offset + k] * m->params[w->offset + k];
  double std = sqrt(ss / w->numel), want = sqrt(2.0 / (w->shape[0] * 9));
  g_assert_cmpfloat(fabs(std - want), <, 0.1 * want);
}

/* Shapes that are not this ResNet, and data it cannot classify, are refused with the key. */
static void test_bad_config(void)
{
  g_autoptr(CohortConfig) cfg = make_config();
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_config_set(cfg, "n_layer", "10", "test", &error));
  g_assert_false(cohort_model_check_config(cfg, "run.json", &error));
  g_assert_cmpstr(error->message, ==,
                  "run.json: key \"n_layer\": 10 is not a depth of this ResNet; allowed: 6n+2 "
                  "for n BasicBlocks per stage (8, 14, 20, 26, 32, 38, 44, 50, 56 … 92)");
  g_clear_error(&error);
  g_assert_true(cohort_config_set(cfg, "n_layer", "14", "test", &error));
  g_assert_true(cohort_model_check_config(cfg, "run.json", &error));
  g_assert_true(cohort_config_set(cfg, "data_format", "text", "test", &error));
  g_assert_false(cohort_model_check_config(cfg, "run.json", &error));
  g_assert_nonnull(strstr(error->message, "cannot train model \"resnet\"; allowed: \"images\""));
  g_clear_error(&error);
  /* unlabelled images (a flat folder: 0 classes) */
  g_assert_true(cohort_config_set(cfg, "data_format", "images", "test", &error));
  cfg->num_classes = 0;
  g_assert_null(cohort_model_new(cohort_backend_cpu(), cfg, B, &error));
  g_assert_nonnull(strstr(error->message, "a classifier needs labelled images"));
  g_assert_cmpint(cohort_model_count_params(cfg), >, 0);
}

/* A training forward advances every num_batches_tracked and moves the running statistics;
 * an evaluation forward changes no buffer. */
static void test_buffers_in_train_and_eval(void)
{
  g_autoptr(CohortModel) m = make_model(3, B);
  g_autofree float *before = g_memdup2(m->buffer_data, m->n_buffer_floats * sizeof(float));
  cohort_resnet_forward_given(m, images, labels, B, COHORT_FORWARD_EVAL, NULL);
  g_assert_cmpmem(before, m->n_buffer_floats * sizeof(float), m->buffer_data,
                  m->n_buffer_floats * sizeof(float));
  cohort_resnet_forward_given(m, images, labels, B, COHORT_FORWARD_TRAIN, NULL);
  cohort_resnet_forward_given(m, images, labels, B, COHORT_FORWARD_TRAIN, NULL);
  for (guint i = 0; i < m->n_buffers; i++) {
    const CohortTensorInfo *t = &m->buffers[i];
    if (t->int64)
      g_assert_cmpfloat(m->buffer_data[t->offset], ==, 2.0f);
    else
      g_assert_cmpfloat(fabs(m->buffer_data[t->offset] - before[t->offset]), >, 0);
  }
}

/* Central differences at up to 4 elements of every tensor, training mode (batch
 * statistics). BatchNorm centres what each ReLU sees, so many activations sit near its kink:
 * in float64 PyTorch the differences of this model already miss by 4 % at h = 2e-3 and agree
 * at 5e-4, the h used here; float32 rounding of the loss (near 2.4) then adds about 2e-4:
 * |fd - analytic| <= 5e-4 + 2e-2 |analytic|. */
static void test_finite_differences(void)
{
  g_autoptr(CohortModel) m = make_model(5, B);
  randomise(m, 7);
  cohort_model_zero_grad(m);
  cohort_resnet_forward_given(m, images, labels, B, COHORT_FORWARD_TRAIN, NULL);
  m->ops->backward(m, 1.0f);
  g_autofree float *grad = g_memdup2(m->grads, m->n_params * sizeof(float));
  const float h = 5e-4f;
  guint checked = 0;
  double worst = 0;
  for (guint i = 0; i < m->n_tensors; i++) {
    const CohortTensorInfo *t = &m->tensors[i];
    for (size_t j = 0; j < MIN(t->numel, 4); j++) {
      size_t k = t->offset + (j * 7919) % t->numel;
      float keep = m->params[k];
      m->params[k] = keep + h;
      double up = cohort_resnet_forward_given(m, images, labels, B, COHORT_FORWARD_TRAIN, NULL);
      m->params[k] = keep - h;
      double down = cohort_resnet_forward_given(m, images, labels, B, COHORT_FORWARD_TRAIN, NULL);
      m->params[k] = keep;
      double fd = (up - down) / (2 * h), tol = 5e-4 + 2e-2 * fabs(grad[k]);
      if (fabs(fd - grad[k]) > tol)
        g_error("%s[%zu]: finite difference %.6g, backward %.6g", t->name, k - t->offset, fd,
                grad[k]);
      worst = fmax(worst, fabs(fd - grad[k]) / tol);
      checked++;
    }
  }
  g_test_message("%u gradients checked; the worst used %.0f%% of its tolerance", checked,
                 100 * worst);
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
  g_autoptr(CohortModel) m = make_model(2, B);
  Hook h = {.next = m->n_params};
  cohort_model_set_grad_ready_func(m, on_ready, &h);
  cohort_model_zero_grad(m);
  cohort_resnet_forward_given(m, images, labels, B, COHORT_FORWARD_TRAIN, NULL);
  m->ops->backward(m, 1.0f);
  g_assert_cmpuint(h.next, ==, 0);
  g_assert_cmpuint(h.calls, ==, 3 * NB + 2); /* the classifier, each block, the stem */
}

#include "test-resnet-sync.h"

static gboolean have_torch(void)
{
  return g_file_test("/usr/bin/python3", G_FILE_TEST_IS_EXECUTABLE) &&
         system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
}

/* Writes the weights and the inputs, runs the reference, returns its output lines (the first,
 * the number of counters stored as I64, is checked here). */
static GStrv run_reference(CohortModel *m, const char *mode, const char *const *extra)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *dir = g_dir_make_tmp("cohort-test-resnet-XXXXXX", &error);
  g_assert_no_error(error);
  g_autofree char *weights = g_build_filename(dir, "model.safetensors", NULL);
  g_autofree char *inputs = g_build_filename(dir, "inputs.bin", NULL);
  g_assert_true(cohort_model_save(m, NULL, weights, NULL, &error));
  GByteArray *buf = g_byte_array_new();
  int hdr[6] = {NB, WIDTH, CH, SIZE, CLASSES, B};
  float mom = MOMENTUM;
  g_byte_array_append(buf, (guint8 *)hdr, sizeof hdr);
  g_byte_array_append(buf, (guint8 *)&mom, sizeof mom);
  g_byte_array_append(buf, (guint8 *)images, sizeof images);
  g_byte_array_append(buf, (guint8 *)labels, sizeof labels);
  g_assert_true(g_file_set_contents(inputs, (char *)buf->data, buf->len, &error));
  g_byte_array_unref(buf);

  g_autoptr(GPtrArray) args = g_ptr_array_new();
  const char *fixed[] = {weights, inputs, mode};
  for (guint i = 0; i < G_N_ELEMENTS(fixed); i++)
    g_ptr_array_add(args, (gpointer)fixed[i]);
  for (guint i = 0; extra && extra[i]; i++)
    g_ptr_array_add(args, (gpointer)extra[i]);
  g_ptr_array_add(args, NULL);
  g_autofree char *out = torch_ref_run("torch_resnet_ref.py", (const char *const *)args->pdata);
  g_unlink(weights);
  g_unlink(inputs);
  g_rmdir(dir);
  GStrv lines = g_strsplit(g_strstrip(out), "\n", -1);
  g_assert_cmpstr(lines[0], ==, "9"); /* every num_batches_tracked written as I64 */
  return lines;
}

static double line(GStrv lines, size_t i)
{
  g_assert_nonnull(lines[i]);
  return g_ascii_strtod(lines[i], NULL);
}

/* Per tensor of `table`: |ours - ref| <= rel * max|ref| + abs_tol. Returns the worst error
 * relative to the tensor's largest value. */
static double compare_table(const CohortTensorInfo *table, guint n, const float *ours, GStrv lines,
                            size_t first, double rel, double abs_tol, const char *what)
{
  double worst = 0;
  for (guint i = 0; i < n; i++) {
    const CohortTensorInfo *t = &table[i];
    double mx = 0;
    for (size_t k = 0; k < t->numel; k++)
      mx = fmax(mx, fabs(line(lines, first + t->offset + k)));
    for (size_t k = 0; k < t->numel; k++) {
      double r = line(lines, first + t->offset + k), e = fabs(ours[t->offset + k] - r);
      if (e > rel * mx + abs_tol)
        g_error("%s %s[%zu]: ours %.8g, PyTorch %.8g (tensor max %.3g)", what, t->name, k,
                ours[t->offset + k], r, mx);
      worst = fmax(worst, mx > 0 ? e / mx : 0);
    }
  }
  return worst;
}

/* The buffers, in the file's order, are the lines after `first`; our memory keeps the
 * counters elsewhere, so they are compared through each entry's own offset. */
static double compare_buffers(const CohortModel *m, GStrv lines, size_t first, double rel)
{
  double worst = 0;
  size_t at = first;
  for (guint i = 0; i < m->n_buffers; i++) {
    const CohortTensorInfo *t = &m->buffers[i];
    double mx = 0;
    for (size_t k = 0; k < t->numel; k++)
      mx = fmax(mx, fabs(line(lines, at + k)));
    for (size_t k = 0; k < t->numel; k++) {
      double r = line(lines, at + k), e = fabs(m->buffer_data[t->offset + k] - r);
      if (e > rel * mx + 1e-7)
        g_error("buffer %s[%zu]: ours %.8g, PyTorch %.8g", t->name, k,
                m->buffer_data[t->offset + k], r);
      worst = fmax(worst, mx > 0 ? e / mx : 0);
    }
    at += t->numel;
  }
  return worst;
}

/* Training mode: the loss within 1e-5 relative, every gradient within 1e-5 of its tensor's
 * largest value, the running statistics after the forward within 1e-5. */
static void test_train_against_torch(void)
{
  if (!have_torch()) {
    g_test_skip("PyTorch is not importable by /usr/bin/python3");
    return;
  }
  g_autoptr(CohortModel) m = make_model(23, B);
  randomise(m, 77);
  g_auto(GStrv) lines = run_reference(m, "train", NULL);
  cohort_model_zero_grad(m);
  float loss = cohort_resnet_forward_given(m, images, labels, B, COHORT_FORWARD_TRAIN, NULL);
  m->ops->backward(m, 1.0f);
  g_assert_cmpuint(g_strv_length(lines), ==, 2 + m->n_params + m->n_buffer_floats);
  double ref = line(lines, 1);
  g_assert_cmpfloat(fabs(loss - ref), <=, 1e-5 * fabs(ref));
  double gw = compare_table(m->tensors, m->n_tensors, m->grads, lines, 2, 1e-5, 1e-9, "gradient");
  double bw = compare_buffers(m, lines, 2 + m->n_params, 1e-5);
  g_test_message("loss %.8f vs PyTorch %.8f; worst gradient error %.2e, buffer error %.2e of "
                 "the tensor max",
                 loss, ref, gw, bw);
}

/* freeze_bn_stats: training with every BatchNorm in eval mode, as PyTorch's bn.eval() after
 * model.train() (the running statistics normalise, and neither they nor the counters move):
 * the loss, every gradient (BatchNorm's weight and bias included, and the input gradients
 * through the fixed statistics) within 1e-5, the buffers exactly as they were. */
static void test_freeze_bn_stats_against_torch(void)
{
  if (!have_torch()) {
    g_test_skip("PyTorch is not importable by /usr/bin/python3");
    return;
  }
  g_autoptr(CohortModel) m = make_model_with(31, B, "freeze_bn_stats=true");
  randomise(m, 53);
  g_autofree float *before = g_memdup2(m->buffer_data, m->n_buffer_floats * sizeof(float));
  g_auto(GStrv) lines = run_reference(m, "train-bn-eval", NULL);
  cohort_model_zero_grad(m);
  float loss = cohort_resnet_forward_given(m, images, labels, B, COHORT_FORWARD_TRAIN, NULL);
  m->ops->backward(m, 1.0f);
  g_assert_cmpuint(g_strv_length(lines), ==, 2 + m->n_params + m->n_buffer_floats);
  double ref = line(lines, 1);
  g_assert_cmpfloat(fabs(loss - ref), <=, 1e-5 * fabs(ref));
  double gw = compare_table(m->tensors, m->n_tensors, m->grads, lines, 2, 1e-5, 1e-9, "gradient");
  double bw = compare_buffers(m, lines, 2 + m->n_params, 0);
  g_assert_cmpmem(m->buffer_data, m->n_buffer_floats * sizeof(float), before,
                  m->n_buffer_floats * sizeof(float));
  /* and not the batch's statistics: the same model without the key computes another loss */
  g_autoptr(CohortModel) live = make_model(31, B);
  randomise(live, 53);
  float live_loss =
      cohort_resnet_forward_given(live, images, labels, B, COHORT_FORWARD_TRAIN, NULL);
  g_assert_cmpfloat(fabs(live_loss - loss), >, 1e-3 * fabs(loss));
  g_test_message("freeze_bn_stats: loss %.8f vs PyTorch %.8f (train-mode BatchNorm: %.8f); "
                 "worst gradient error %.2e, buffers unchanged (%.2e)",
                 loss, ref, live_loss, gw, bw);
}

/* Evaluation mode normalises with the running statistics: loss and logits within 1e-5. */
static void test_eval_against_torch(void)
{
  if (!have_torch()) {
    g_test_skip("PyTorch is not importable by /usr/bin/python3");
    return;
  }
  g_autoptr(CohortModel) m = make_model(29, B);
  randomise(m, 91);
  g_auto(GStrv) lines = run_reference(m, "eval", NULL);
  g_assert_cmpuint(g_strv_length(lines), ==, 2 + B * CLASSES);
  int correct = -1;
  float loss = cohort_resnet_forward_given(m, images, labels, B, COHORT_FORWARD_EVAL, &correct);
  double ref = line(lines, 1);
  g_assert_cmpfloat(fabs(loss - ref), <=, 1e-5 * fabs(ref));
  float logits[B * CLASSES];
  cohort_resnet_logits(m, logits);
  int ref_correct = 0;
  for (int b = 0; b < B; b++) {
    int best = 0;
    for (int k = 0; k < CLASSES; k++) {
      double r = line(lines, 2 + b * CLASSES + k);
      g_assert_cmpfloat(fabs(logits[b * CLASSES + k] - r), <=, 1e-5 * fmax(1.0, fabs(r)));
      if (r > line(lines, 2 + b * CLASSES + best))
        best = k;
    }
    ref_correct += best == labels[b];
  }
  g_assert_cmpint(correct, ==, ref_correct);
  /* and the metric sums the trainer adds across ranks */
  CohortBatch batch = {.B = B, .images = images, .labels = labels, .epoch = -1};
  double sums[3] = {0};
  m->ops->eval_batch(m, &batch, sums);
  g_assert_cmpfloat(fabs(sums[0] - ref * B), <=, 1e-5 * fabs(ref) * B);
  g_assert_cmpfloat(sums[1], ==, ref_correct);
  g_assert_cmpfloat(sums[2], ==, B);
  g_test_message("eval loss %.8f vs %.8f, %d of %d correct", loss, ref, correct, B);
}

/* 10 SGD steps (momentum 0.9, Nesterov, weight decay 5e-4 on kernels and matrices) with
 * StepLR (step size 3, gamma 0.5) on one batch: every loss, the running statistics and the
 * weights after them within 1e-4 relative of PyTorch's. */
static void test_sgd_against_torch(void)
{
  if (!have_torch()) {
    g_test_skip("PyTorch is not importable by /usr/bin/python3");
    return;
  }
  enum { STEPS = 10 };
  g_autoptr(CohortModel) m = make_model(31, B);
  randomise(m, 5);
  const char *extra[] = {"10", "0.1", "0.9", "1", "0.0005", "3", "0.5", NULL};
  g_auto(GStrv) lines = run_reference(m, "sgd", extra);
  g_assert_cmpuint(g_strv_length(lines), ==, 1 + STEPS + m->n_buffer_floats + m->n_params);
  g_autoptr(CohortConfig) cfg = make_config();
  g_autoptr(GError) error = NULL;
  const char *sets[] = {"momentum=0.9",
                        "nesterov=true",
                        "weight_decay=0.0005",
                        "warmup_steps=0",
                        "lr_step_size=3",
                        "lr_gamma=0.5",
                        NULL};
  g_assert_true(cohort_config_apply_assignments(cfg, sets, "test", &error));
  g_autoptr(CohortOptimizer) opt = cohort_optimizer_new_for(cfg, cohort_backend_cpu(), m->n_params);
  g_assert_cmpint(cohort_optimizer_kind(opt), ==, COHORT_OPTIMIZER_SGD);
  for (int s = 0; s < STEPS; s++) {
    cohort_model_zero_grad(m);
    float loss = cohort_resnet_forward_given(m, images, labels, B, COHORT_FORWARD_TRAIN, NULL);
    m->ops->backward(m, 1.0f);
    double lr = cohort_lr_for(cfg, 0.1, cfg->warmup_steps, s, STEPS);
    cohort_optimizer_step(opt, m->params, m->grads, m->tensors, m->n_tensors, cfg, lr, s + 1);
    double ref = line(lines, 1 + s);
    if (fabs(loss - ref) > 1e-4 * fabs(ref))
      g_error("step %d: loss %.8g, PyTorch %.8g", s + 1, loss, ref);
  }
  double bw = compare_buffers(m, lines, 1 + STEPS, 1e-4);
  double pw = compare_table(m->tensors, m->n_tensors, m->params, lines,
                            1 + STEPS + m->n_buffer_floats, 1e-4, 1e-7, "weight");
  g_test_message("final loss %s; running statistics within %.2e, weights within %.2e", lines[STEPS],
                 bw, pw);
}

/* The convolution paths on a whole network where oneDNN picks Winograd (3×3, stride 1,
 * batch 16, 32 channels and more: the second and third stages): a training forward's loss and
 * running statistics and an evaluation's logits within 1e-5 of the im2col reference's. (Gradients
 * are compared layer by layer in tests/test-layers-nhwc.c: across a network a ReLU input within
 * rounding of 0 takes either side, see tests/test-resnet-tv.c.) */
static void test_conv_paths(void)
{
  if (!cohort_cpu_conv_path_available(COHORT_CPU_CONV_ONEDNN)) {
    g_test_skip("this build has no oneDNN");
    return;
  }
  enum { NB = 16, S = 16, K = 5 };
  g_autoptr(CohortConfig) cfg = cohort_config_new();
  g_autoptr(GError) error = NULL;
  const char *sets[] = {"model=resnet",  "data_format=images", "n_layer=8",     "resnet_width=16",
                        "image_size=16", "image_channels=3",   "num_classes=5", NULL};
  g_assert_true(cohort_config_apply_assignments(cfg, sets, "test", &error));
  g_autofree float *x = g_new(float, NB * 3 * S * S);
  int y[NB];
  guint32 seed = 3;
  for (int i = 0; i < NB * 3 * S * S; i++)
    x[i] = 2 * lcg(&seed) - 1;
  for (int i = 0; i < NB; i++)
    y[i] = i % K;
  float loss[2], logits[2][NB * K];
  float *stats[2] = {NULL, NULL}; /* freed below: g_autofree frees one pointer, not an array */
  CohortCpuConvPath start = cohort_cpu_conv_path();
  for (int p = 0; p < 2; p++) {
    g_assert_true(cohort_cpu_conv_select(p ? COHORT_CPU_CONV_ONEDNN : COHORT_CPU_CONV_IM2COL));
    g_autoptr(CohortModel) m = cohort_model_new(cohort_backend_cpu(), cfg, NB, &error);
    g_assert_no_error(error);
    m->ops->init_weights(m, 9);
    loss[p] = cohort_resnet_forward_given(m, x, y, NB, COHORT_FORWARD_TRAIN, NULL);
    stats[p] = g_memdup2(m->buffer_data, m->n_buffer_floats * sizeof(float));
    cohort_resnet_forward_given(m, x, y, NB, COHORT_FORWARD_EVAL, NULL);
    cohort_resnet_logits(m, logits[p]);
    if (p) {
      CohortConvDims d;
      cohort_conv_dims(&d, NB, 32, S / 2, S / 2, 32, 3, 1, 1);
      g_test_message("oneDNN's 3×3 convolution of the second stage: %s",
                     cohort_onednn_conv2d_impl(0, 1, &d));
      for (size_t i = 0; i < m->n_buffer_floats; i++)
        g_assert_cmpfloat(fabs(stats[1][i] - stats[0][i]), <=, 1e-5 * (1 + fabs(stats[0][i])));
    }
  }
  cohort_cpu_conv_select(start);
  g_free(stats[0]);
  g_free(stats[1]);
  g_assert_cmpfloat(fabs(loss[1] - loss[0]), <=, 1e-5 * fabs(loss[0]));
  for (int i = 0; i < NB * K; i++)
    g_assert_cmpfloat(fabs(logits[1][i] - logits[0][i]), <=, 1e-5 * (1 + fabs(logits[0][i])));
  g_test_message("loss %.8f (oneDNN) against %.8f (im2col)", loss[1], loss[0]);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  make_inputs();
  g_test_add_func("/resnet/table-and-init", test_table_and_init);
  g_test_add_func("/resnet/bad-config", test_bad_config);
  g_test_add_func("/resnet/buffers-train-and-eval", test_buffers_in_train_and_eval);
  g_test_add_func("/resnet/finite-differences", test_finite_differences);
  g_test_add_func("/resnet/grad-ready-hook", test_grad_ready);
  g_test_add_func("/resnet/syncbn-two-ranks-in-process", test_syncbn_in_process);
  g_test_add_func("/resnet/freeze-bn-stats-two-ranks", test_frozen_bn_two_ranks);
  g_test_add_func("/resnet/train-against-torch", test_train_against_torch);
  g_test_add_func("/resnet/eval-against-torch", test_eval_against_torch);
  g_test_add_func("/resnet/freeze-bn-stats-against-torch", test_freeze_bn_stats_against_torch);
  g_test_add_func("/resnet/sgd-steplr-against-torch", test_sgd_against_torch);
  g_test_add_func("/resnet/conv-paths-winograd", test_conv_paths);
  return g_test_run();
}

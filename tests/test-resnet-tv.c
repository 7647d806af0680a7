/* torchvision's ImageNet ResNets (resnet_variant resnet18 … resnet101) against torchvision's
 * own models (tests/torch_resnet_tv.py, float64): torchvision loads Cohort's export with
 * strict=True, and one training-mode forward and backward at 32×32, batch 2, gives the same
 * loss, every gradient and the running statistics within 1e-4 of each tensor's largest value;
 * evaluation-mode logits likewise. init_from reads a torch.save'd torchvision state dict
 * (.pth) and a .safetensors one and gives torchvision's logits; a file with another number of
 * classes re-initialises fc (noted, with both sizes) and loads everything else; a file for
 * another variant is refused naming the tensor. zero_init_residual zeroes each block's last
 * BatchNorm scale. */
#include <glib.h>
#include <glib/gstdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/fileio.h"
#include "engine/model/model-io.h"
#include "engine/model/torch-file.h"
#include "engine/models/registry.h"
#include "engine/models/resnet.h"
#include "kernels/backend.h"
#include "torch-ref.h"

enum { SIZE = 64, CLASSES = 5, B = 2 };
#define D        (3 * SIZE * SIZE)
#define MOMENTUM 0.2f
#define TOL      1e-4

static float images[B * D];
static int labels[B] = {1, 3};
static char *dir;

static float lcg(guint32 *s)
{
  *s = *s * 1664525u + 1013904223u;
  return (float)((*s >> 8) * (1.0 / 16777216.0));
}

static gboolean have_torch(void)
{
  return g_file_test("/usr/bin/python3", G_FILE_TEST_IS_EXECUTABLE) &&
         system("/usr/bin/python3 -c 'import torch, torchvision' >/dev/null 2>&1") == 0;
}

static CohortModel *make_model(int variant, int classes, const char *extra)
{
  g_autoptr(CohortConfig) cfg = cohort_config_new();
  g_autoptr(GError) error = NULL;
  g_autofree char *v = g_strdup_printf("resnet_variant=resnet%d", variant);
  g_autofree char *k = g_strdup_printf("num_classes=%d", classes);
  const char *sets[] = {"model=resnet",
                        "data_format=images",
                        v,
                        "image_size=64",
                        "image_channels=3",
                        k,
                        "bn_momentum=0.2",
                        extra,
                        NULL};
  g_assert_true(cohort_config_apply_assignments(cfg, sets, "test", &error));
  CohortModel *m = cohort_model_new(cohort_backend_cpu(), cfg, B, &error);
  g_assert_no_error(error);
  m->ops->init_weights(m, 7);
  return m;
}

/* BatchNorm's affine parameters and running statistics away from 1 and 0, each block's last
 * scale small (0.05–0.2). Why small: at torchvision's initialisation a deep ResNet's training-
 * mode gradients are ill-conditioned in float32 (PyTorch's own float32 gradients of resnet50 and
 * resnet101 at 64×64 differ from its float64 ones by 10–30 % of a tensor's largest value), so
 * no float32 implementation could meet 1e-4 there; with small residual branches, as training
 * starts with zero_init_residual, PyTorch's float32 agrees with float64 to 2e-5 and the
 * comparison means something. */
static void randomise_bn(CohortModel *m, int variant, guint32 seed)
{
  const char *last = variant >= 50 ? ".bn3.weight" : ".bn2.weight";
  for (guint i = 0; i < m->n_tensors; i++) {
    const CohortTensorInfo *t = &m->tensors[i];
    if (t->ndim != 1 || g_str_has_prefix(t->name, "fc."))
      continue;
    gboolean scale = g_str_has_suffix(t->name, ".weight");
    gboolean small = g_str_has_prefix(t->name, "layer") && g_str_has_suffix(t->name, last);
    for (size_t k = 0; k < t->numel; k++) {
      float u = lcg(&seed);
      m->params[t->offset + k] = small ? 0.05f + 0.15f * u : scale ? 0.5f + u : 0.4f * (u - 0.5f);
    }
  }
  for (guint i = 0; i < m->n_buffers; i++) {
    const CohortTensorInfo *t = &m->buffers[i];
    for (size_t k = 0; k < t->numel; k++) {
      float *v = &m->buffer_data[t->offset + k];
      if (g_str_has_suffix(t->name, "running_mean"))
        *v = 0.4f * (lcg(&seed) - 0.5f);
      else if (g_str_has_suffix(t->name, "running_var"))
        *v = 0.5f + lcg(&seed);
      else
        *v = 2.0f;
    }
  }
}

static char *write_inputs(int variant)
{
  g_autofree char *path = g_strdup_printf("%s/inputs-%d.bin", dir, variant);
  GByteArray *buf = g_byte_array_new();
  int hdr[4] = {variant, SIZE, CLASSES, B};
  float mom = MOMENTUM;
  g_byte_array_append(buf, (guint8 *)hdr, sizeof hdr);
  g_byte_array_append(buf, (guint8 *)&mom, sizeof mom);
  g_byte_array_append(buf, (guint8 *)images, sizeof images);
  g_byte_array_append(buf, (guint8 *)labels, sizeof labels);
  g_assert_true(g_file_set_contents(path, (char *)buf->data, buf->len, NULL));
  g_byte_array_unref(buf);
  return g_steal_pointer(&path);
}

static char *save(CohortModel *m, const float *params, const char *name)
{
  char *path = g_build_filename(dir, name, NULL);
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_model_save(m, params, path, NULL, &error));
  return path;
}

/* Lines "grad|buffer NAME MAXREF MAXDIFF [MAXDIFF32]": each within TOL of its tensor's
 * largest value. MAXDIFF32, torchvision's own float32 against its float64 (its ReLUs free to
 * take their own sides), is reported for scale. */
static void check_tensors(GStrv lines, guint *n_grads, guint *n_bufs)
{
  double worst = 0, worst32 = 0;
  for (guint i = 0; lines[i]; i++) {
    g_auto(GStrv) f = g_strsplit(lines[i], " ", -1);
    if (strcmp(f[0], "grad") != 0 && strcmp(f[0], "buffer") != 0)
      continue;
    double ref = g_ascii_strtod(f[2], NULL), diff = g_ascii_strtod(f[3], NULL);
    double own = f[4] ? g_ascii_strtod(f[4], NULL) : 0; /* torchvision's float32 */
    if (diff > TOL * ref + 1e-7)
      g_error("%s %s: differs by %.3g from torchvision's float64 (largest value %.3g; "
              "torchvision's float32 differs by %.3g)",
              f[0], f[1], diff, ref, own);
    worst = fmax(worst, ref > 0 ? diff / ref : 0);
    worst32 = fmax(worst32, ref > 0 ? own / ref : 0);
    (*(f[0][0] == 'g' ? n_grads : n_bufs))++;
  }
  g_test_message("worst difference %.2e of a tensor's largest value (torchvision's float32: "
                 "%.2e)",
                 worst, worst32);
}

static void check_logits(GStrv lines, const float *ours, guint first)
{
  for (int b = 0; b < B; b++) {
    g_auto(GStrv) f = g_strsplit(lines[first + b], " ", -1);
    g_assert_cmpstr(f[0], ==, "logits");
    for (int k = 0; k < CLASSES; k++) {
      double ref = g_ascii_strtod(f[1 + k], NULL);
      if (fabs(ours[b * CLASSES + k] - ref) > TOL * fmax(1.0, fabs(ref)))
        g_error("logit [%d, %d]: %.7g, torchvision %.7g", b, k, ours[b * CLASSES + k], ref);
    }
  }
}

static void against_torchvision(gconstpointer data)
{
  int variant = GPOINTER_TO_INT(data);
  if (!have_torch()) {
    g_test_skip("PyTorch and torchvision are not importable by /usr/bin/python3");
    return;
  }
  g_autoptr(CohortModel) m = make_model(variant, CLASSES, NULL);
  randomise_bn(m, variant, 100 + variant);
  g_autofree char *inputs = write_inputs(variant), *weights = save(m, NULL, "weights.safetensors");

  /* evaluation mode first: it changes no buffer; then a training step */
  float logits[B * CLASSES];
  float eval_loss = cohort_resnet_forward_given(m, images, labels, B, COHORT_FORWARD_EVAL, NULL);
  cohort_resnet_logits(m, logits);
  cohort_model_zero_grad(m);
  float loss = cohort_resnet_forward_given(m, images, labels, B, COHORT_FORWARD_TRAIN, NULL);
  m->ops->backward(m, 1.0f);
  /* the gradients under the parameters' names, and the buffers after the forward; the sides
   * every ReLU took */
  g_autofree char *grads = save(m, m->grads, "grads.safetensors");
  g_autofree char *sides = g_build_filename(dir, "sides.bin", NULL);
  size_t n_sides;
  g_autofree guint8 *side_bytes = cohort_resnet_relu_sides(m, &n_sides);
  g_assert_true(g_file_set_contents(sides, (const char *)side_bytes, (gssize)n_sides, NULL));
  g_autofree char *out = torch_ref_run(
      "torch_resnet_tv.py", (const char *const[]){"eval", weights, inputs, grads, sides, NULL});
  g_auto(GStrv) lines = g_strsplit(g_strstrip(out), "\n", -1);
  double eref = g_ascii_strtod(lines[0] + 5, NULL);
  g_assert_cmpfloat(fabs(eval_loss - eref), <=, TOL * fabs(eref));
  check_logits(lines, logits, 1);
  g_assert_true(g_str_has_prefix(lines[1 + B], "flipped "));
  int flipped = atoi(lines[1 + B] + 8);
  g_assert_cmpint(flipped, <=, 3); /* a few inputs within rounding of 0, never a pattern */
  double ref = g_ascii_strtod(lines[2 + B] + 5, NULL);
  g_assert_cmpfloat(fabs(loss - ref), <=, TOL * fabs(ref));
  guint n_grads = 0, n_bufs = 0;
  check_tensors(lines, &n_grads, &n_bufs);
  g_assert_cmpuint(n_grads, ==, m->n_tensors);
  g_assert_cmpuint(n_bufs, ==, m->n_buffers);
  g_test_message("resnet%d: %zu parameters; loss %.7f vs %.7f; %zu ReLU outputs, %d on the "
                 "other side in float64",
                 variant, m->n_params, loss, ref, n_sides, flipped);
  const char *files[] = {inputs, weights, grads, sides};
  for (guint i = 0; i < G_N_ELEMENTS(files); i++)
    g_unlink(files[i]);
}

/* init_from a torchvision state dict: .pth and .safetensors give torchvision's logits. */
static void test_import(void)
{
  if (!have_torch()) {
    g_test_skip("PyTorch and torchvision are not importable by /usr/bin/python3");
    return;
  }
  g_autofree char *inputs = write_inputs(18);
  g_autofree char *pth = g_build_filename(dir, "tv.pth", NULL);
  g_autofree char *st = g_build_filename(dir, "tv.safetensors", NULL);
  g_autofree char *out = torch_ref_run(
      "torch_resnet_tv.py", (const char *const[]){"save", pth, st, inputs, "11", "5", NULL});
  g_auto(GStrv) lines = g_strsplit(g_strstrip(out), "\n", -1);
  const char *files[] = {pth, st};
  for (guint i = 0; i < G_N_ELEMENTS(files); i++) {
    g_autoptr(CohortModel) m = make_model(18, CLASSES, NULL);
    g_autoptr(GError) error = NULL;
    g_autoptr(GPtrArray) notes = g_ptr_array_new_with_free_func(g_free);
    g_assert_true(cohort_model_import(m, files[i], notes, &error));
    g_assert_no_error(error);
    g_assert_cmpuint(notes->len, ==, 0);
    const CohortTensorInfo *nbt = cohort_model_find_buffer(m, "layer4.1.bn2.num_batches_tracked");
    g_assert_cmpfloat(m->buffer_data[nbt->offset], ==, 11.0f);
    float logits[B * CLASSES];
    cohort_resnet_forward_given(m, images, labels, B, COHORT_FORWARD_EVAL, NULL);
    cohort_resnet_logits(m, logits);
    check_logits(lines, logits, 0);
  }
}

/* Another class count: fc keeps the initialisation (noted with both sizes), the rest is the
 * file's. A file for another variant is refused naming the tensor. */
static void test_import_transfer(void)
{
  if (!have_torch()) {
    g_test_skip("PyTorch and torchvision are not importable by /usr/bin/python3");
    return;
  }
  g_autofree char *inputs = write_inputs(18);
  g_autofree char *pth = g_build_filename(dir, "tv7.pth", NULL);
  g_autofree char *st = g_build_filename(dir, "tv7.safetensors", NULL);
  g_free(torch_ref_run("torch_resnet_tv.py",
                       (const char *const[]){"save", pth, st, inputs, "3", "7", NULL}));
  g_autoptr(CohortModel) m = make_model(18, CLASSES, NULL), fresh = make_model(18, CLASSES, NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) notes = g_ptr_array_new_with_free_func(g_free);
  g_assert_true(cohort_model_import(m, pth, notes, &error));
  g_assert_cmpuint(notes->len, ==, 1);
  g_assert_cmpstr(notes->pdata[0], ==,
                  "fc has 7 classes in the file and 5 in this model: fc re-initialised, every "
                  "other tensor loaded");
  g_autoptr(CohortTorchFile) f = cohort_torch_file_open(pth, &error);
  g_assert_no_error(error);
  for (guint i = 0; i < m->n_tensors; i++) {
    const CohortTensorInfo *t = &m->tensors[i];
    if (g_str_has_prefix(t->name, "fc.")) { /* the family's initialisation, seed 7 */
      g_assert_cmpmem(m->params + t->offset, t->numel * 4, fresh->params + t->offset, t->numel * 4);
      continue;
    }
    int64_t shape[4];
    for (int d = 0; d < t->ndim; d++)
      shape[d] = t->shape[d];
    g_autofree float *want = g_new(float, t->numel);
    g_assert_true(cohort_torch_file_read_f32(f, t->name, t->ndim, shape, want, &error));
    g_assert_cmpmem(m->params + t->offset, t->numel * 4, want, t->numel * 4);
  }

  g_autoptr(CohortModel) deeper = make_model(34, CLASSES, NULL);
  g_assert_false(cohort_model_import(deeper, pth, NULL, &error));
  g_assert_nonnull(strstr(error->message, "tensor \"layer1.2.conv1.weight\" of a resnet34 is "
                                          "missing"));
  g_assert_nonnull(strstr(error->message, pth));
}

static void test_zero_init_residual(void)
{
  g_autoptr(CohortModel) m = make_model(50, CLASSES, "zero_init_residual=true");
  for (guint i = 0; i < m->n_tensors; i++) {
    const CohortTensorInfo *t = &m->tensors[i];
    if (t->ndim != 1 || !g_str_has_suffix(t->name, ".weight") || g_str_has_prefix(t->name, "fc"))
      continue;
    gboolean last = g_str_has_suffix(t->name, ".bn3.weight");
    for (size_t k = 0; k < t->numel; k++)
      g_assert_cmpfloat(m->params[t->offset + k], ==, last ? 0.0f : 1.0f);
  }
  /* every block then starts as the identity: a BasicBlock's bn2 likewise */
  g_autoptr(CohortModel) basic = make_model(18, CLASSES, "zero_init_residual=true");
  const CohortTensorInfo *bn2 = cohort_model_find_tensor(basic, "layer3.1.bn2.weight");
  g_assert_cmpfloat(basic->params[bn2->offset], ==, 0.0f);
}

/* RGB only, and 32 pixels or more: refused with the key. */
static void test_bad_config(void)
{
  g_autoptr(CohortConfig) cfg = cohort_config_new();
  g_autoptr(GError) error = NULL;
  const char *sets[] = {"model=resnet",
                        "data_format=images",
                        "resnet_variant=resnet50",
                        "image_size=16",
                        "image_channels=3",
                        "num_classes=3",
                        NULL};
  g_assert_true(cohort_config_apply_assignments(cfg, sets, "test", &error));
  g_assert_false(cohort_model_check_config(cfg, "run.json", &error));
  g_assert_nonnull(strstr(error->message, "key \"image_size\": 16 is too small for "
                                          "resnet_variant \"resnet50\""));
  g_clear_error(&error);
  cfg->image_size = 32;
  cfg->image_channels = 1;
  g_assert_false(cohort_model_check_config(cfg, "run.json", &error));
  g_assert_nonnull(strstr(error->message, "key \"image_channels\": 1 is not allowed"));
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  /* The images' seed. The float64 reference takes each ReLU's side from Cohort's float32
   * forward: a ReLU input within float32's rounding of 0 (about 1 in 10^6 of them, and a
   * resnet50 at 64×64 has 1.5·10^6) would otherwise take the other side in one of the two,
   * and the gradients of everything before it would differ by 10^-3 and more, for Cohort and
   * for torchvision's own float32 alike. */
  guint32 s = 4;
  for (int i = 0; i < B * D; i++)
    images[i] = 2 * lcg(&s) - 1;
  g_autoptr(GError) error = NULL;
  dir = g_dir_make_tmp("cohort-test-resnet-tv-XXXXXX", &error);
  g_assert_no_error(error);
  const int variants[] = {18, 34, 50, 101};
  for (guint i = 0; i < G_N_ELEMENTS(variants); i++) {
    g_autofree char *name = g_strdup_printf("/resnet-tv/resnet%d-against-torchvision", variants[i]);
    g_test_add_data_func(name, GINT_TO_POINTER(variants[i]), against_torchvision);
  }
  g_test_add_func("/resnet-tv/import-pth-and-safetensors", test_import);
  g_test_add_func("/resnet-tv/import-other-class-count", test_import_transfer);
  g_test_add_func("/resnet-tv/zero-init-residual", test_zero_init_residual);
  g_test_add_func("/resnet-tv/bad-config", test_bad_config);
  int rc = g_test_run();
  cohort_remove_tree(dir);
  g_free(dir);
  return rc;
}

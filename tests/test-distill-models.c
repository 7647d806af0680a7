/* Distillation of whole models, on the CPU backend (engine/distill.h):
 *  - GPT: the mixed loss alpha tau² KL + (1 − alpha) CE, both parts and every student gradient
 *    against float64 PyTorch (tests/torch_distill_ref.py), with a teacher deeper, wider and
 *    with a longer context than the student, at temperatures 1 and 2.5;
 *  - DiT: the velocity distillation loss (plain and classifier-free-guided teacher velocity,
 *    a teacher of another width, depth and patch size), parts and gradients likewise;
 *  - alpha 0 is plain training, bit for bit; a student identical to its teacher at alpha 1 has
 *    a loss and gradients of exactly 0;
 *  - the teacher: no gradient buffer, memory = weights + buffers + activations (and the heap
 *    grows by that, 4 bytes a parameter less than a trainable model), weights and buffers
 *    bit-identical after distillation steps with AdamW on the student;
 *  - student_init teacher_layers: which teacher block each student block gets, and the errors
 *    for a deeper or wider student. */
#include <malloc.h>
#include <string.h>

#include "distill-ref.h"
#include "engine/distill.h"
#include "engine/model-io.h"
#include "engine/models/dit.h"
#include "engine/optim.h"
#include "kernels/backend.h"

static const CohortBackend *cpu;

static CohortConfig *gpt_cfg(int L, int H, int C, int T)
{
  CohortConfig *cfg = cohort_config_new();
  cfg->n_layer = L, cfg->n_head = H, cfg->n_embd = C, cfg->seq_len = T, cfg->vocab_size = 40;
  return cfg;
}

static CohortConfig *dit_cfg(int L, int H, int C, int patch)
{
  CohortConfig *cfg = cohort_config_new();
  g_free(cfg->model);
  cfg->model = g_strdup("dit");
  cfg->data_format = COHORT_DATA_IMAGES;
  cfg->n_layer = L, cfg->n_head = H, cfg->n_embd = C, cfg->patch_size = patch;
  cfg->image_size = 8, cfg->image_channels = 1, cfg->num_classes = 3;
  return cfg;
}

static CohortModel *make(const CohortConfig *cfg, int B, gboolean frozen, guint64 seed)
{
  g_autoptr(GError) error = NULL;
  CohortModel *m =
      frozen ? cohort_model_new_frozen(cpu, cfg, B, &error) : cohort_model_new(cpu, cfg, B, &error);
  g_assert_no_error(error);
  m->ops->init_weights(m, seed);
  return m;
}

/* Uniform noise on every parameter: no zero-initialised layer hides a wrong gradient. */
static void randomise(CohortModel *m, guint32 seed, float amp)
{
  for (size_t k = 0; k < m->n_params; k++) {
    seed = seed * 1664525u + 1013904223u;
    m->params[k] += amp * ((float)((seed >> 8) * (1.0 / 16777216.0)) - 0.5f);
  }
}

static CohortDistill *distiller(CohortModel *s, CohortModel *t, double alpha, double tau,
                                double cfg_scale)
{
  CohortDistillSettings st = {.alpha = alpha, .temperature = tau, .cfg_scale = cfg_scale};
  g_autoptr(GError) error = NULL;
  CohortDistill *d = cohort_distill_new(s, t, &st, &error);
  g_assert_no_error(error);
  return d;
}

enum { GB = 3, GT = 12, GV = 40 };
static int tokens[GB * GT], targets[GB * GT];

static CohortBatch *gpt_batch(void)
{
  CohortBatch *b = cohort_batch_new(GB, GT, 0, 0, 0);
  b->B = GB;
  memcpy(b->inputs, tokens, sizeof tokens);
  memcpy(b->targets, targets, sizeof targets);
  return b;
}

static char *save(const CohortModel *m, const char *dir, const char *name)
{
  g_autoptr(GError) error = NULL;
  char *path = g_build_filename(dir, name, NULL);
  g_assert_true(cohort_model_save(m, NULL, path, NULL, &error));
  return path;
}

static void names_json(GString *spec, const CohortModel *m)
{
  g_string_append(spec, "\"names\": [");
  for (guint i = 0; i < m->n_tensors; i++)
    g_string_append_printf(spec, "%s\"%s\"", i ? ", " : "", m->tensors[i].name);
  g_string_append(spec, "]}");
}

/* parts, loss and gradients against the reference's [teacher, task, loss, grads...]. */
static void compare(const CohortModel *s, const double *parts, float loss, const double *ref,
                    size_t n_ref)
{
  g_assert_cmpuint(n_ref, ==, 3 + s->n_params);
  const char *what[] = {"teacher term", "task term"};
  for (int k = 0; k < 2; k++) {
    g_test_message("%s: ours %.9g, PyTorch %.9g", what[k], parts[k], ref[k]);
    g_assert_cmpfloat(fabs(parts[k] - ref[k]), <=, 1e-5 * fabs(ref[k]) + 1e-7);
  }
  g_assert_cmpfloat(fabs(loss - ref[2]), <=, 1e-5 * fabs(ref[2]) + 1e-7);
  for (guint i = 0; i < s->n_tensors; i++) {
    const CohortTensorInfo *t = &s->tensors[i];
    ref_compare(t->name, s->grads + t->offset, ref + 3 + t->offset, t->numel, 1e-4, 1e-7);
  }
}

static void gpt_case(double alpha, double tau)
{
  g_autoptr(CohortConfig) tc = gpt_cfg(3, 4, 48, 16);
  g_autoptr(CohortConfig) sc = gpt_cfg(2, 2, 32, GT);
  g_autoptr(CohortModel) teacher = make(tc, GB, TRUE, 11);
  g_autoptr(CohortModel) student = make(sc, GB, FALSE, 12);
  randomise(teacher, 5, 0.4f);
  randomise(student, 6, 0.4f);
  g_autoptr(CohortDistill) d = distiller(student, teacher, alpha, tau, 1);
  g_autoptr(CohortBatch) batch = gpt_batch();
  double parts[COHORT_DISTILL_N_PARTS];
  cohort_model_zero_grad(student);
  float loss = cohort_distill_forward(d, batch, parts);
  cohort_distill_backward(d, 1.0f);

  g_autoptr(GError) error = NULL;
  g_autofree char *dir = g_dir_make_tmp("cohort-distill-gpt-XXXXXX", &error);
  g_autofree char *sp = save(student, dir, "student.safetensors");
  g_autofree char *tp = save(teacher, dir, "teacher.safetensors");
  g_autoptr(GString) spec = g_string_new(NULL);
  g_string_printf(spec,
                  "{\"mode\": \"gpt\", \"B\": %d, \"T\": %d, \"alpha\": %.17g, \"tau\": %.17g, "
                  "\"student\": \"%s\", \"teacher\": \"%s\", \"student_layers\": 2, "
                  "\"student_heads\": 2, \"teacher_layers\": 3, \"teacher_heads\": 4, ",
                  GB, GT, alpha, tau, sp, tp);
  names_json(spec, student);
  g_autoptr(GByteArray) in = g_byte_array_new();
  g_byte_array_append(in, (const guint8 *)tokens, sizeof tokens);
  g_byte_array_append(in, (const guint8 *)targets, sizeof targets);
  size_t n_ref = 0;
  g_autofree double *ref = ref_run(spec->str, in, &n_ref);
  compare(student, parts, loss, ref, n_ref);
  g_unlink(sp), g_unlink(tp), g_rmdir(dir);
}

static void test_gpt_against_torch(void)
{
  if (!ref_have_torch())
    return;
  gpt_case(0.6, 2.5);
  gpt_case(0.9, 1.0);
}

enum { DB = 4, DS = 8, DD = DS * DS };
static float x_t[DB * DD], tt[DB], target[DB * DD];
static const int labels[DB] = {0, 1, 3, 2}; /* 3 = no label */

static void dit_case(double alpha, double cfg_scale)
{
  g_autoptr(CohortConfig) tc = dit_cfg(2, 2, 32, 4);
  g_autoptr(CohortConfig) sc = dit_cfg(1, 2, 16, 2);
  g_autoptr(CohortModel) teacher = make(tc, DB, TRUE, 21);
  g_autoptr(CohortModel) student = make(sc, DB, FALSE, 22);
  randomise(teacher, 7, 0.6f);
  randomise(student, 8, 0.6f);
  g_autoptr(CohortDistill) d = distiller(student, teacher, alpha, 1, cfg_scale);
  double parts[COHORT_DISTILL_N_PARTS];
  cohort_model_zero_grad(student);
  float loss = cohort_dit_distill_forward_given(d, x_t, tt, labels, target, DB, parts);
  cohort_distill_backward(d, 1.0f);

  g_autoptr(GError) error = NULL;
  g_autofree char *dir = g_dir_make_tmp("cohort-distill-dit-XXXXXX", &error);
  g_autofree char *sp = save(student, dir, "student.safetensors");
  g_autofree char *tp = save(teacher, dir, "teacher.safetensors");
  g_autoptr(GString) spec = g_string_new(NULL);
  g_string_printf(spec,
                  "{\"mode\": \"dit\", \"B\": %d, \"image_size\": %d, \"channels\": 1, "
                  "\"num_classes\": 3, \"alpha\": %.17g, \"cfg_scale\": %.17g, \"student\": "
                  "\"%s\", \"teacher\": \"%s\", \"student_shape\": [1, 2, 16, %d, 1, 2, 3], "
                  "\"teacher_shape\": [2, 2, 32, %d, 1, 4, 3], ",
                  DB, DS, alpha, cfg_scale, sp, tp, DS, DS);
  names_json(spec, student);
  g_autoptr(GByteArray) in = g_byte_array_new();
  g_byte_array_append(in, (const guint8 *)x_t, sizeof x_t);
  g_byte_array_append(in, (const guint8 *)tt, sizeof tt);
  g_byte_array_append(in, (const guint8 *)labels, sizeof labels);
  g_byte_array_append(in, (const guint8 *)target, sizeof target);
  size_t n_ref = 0;
  g_autofree double *ref = ref_run(spec->str, in, &n_ref);
  compare(student, parts, loss, ref, n_ref);
  g_unlink(sp), g_unlink(tp), g_rmdir(dir);
}

static void test_dit_against_torch(void)
{
  if (!ref_have_torch())
    return;
  dit_case(0.7, 1.0);
  dit_case(0.7, 2.5); /* guidance distilled: the teacher runs with and without labels */
  dit_case(1.0, 4.0);
}

/* alpha 0: the distiller's loss and gradients are the plain forward's and backward's. */
static void test_alpha_zero_is_plain(void)
{
  g_autoptr(CohortConfig) gc = gpt_cfg(2, 2, 32, GT);
  g_autoptr(CohortModel) gt = make(gc, GB, TRUE, 3);
  g_autoptr(CohortModel) g1 = make(gc, GB, FALSE, 4), g2 = make(gc, GB, FALSE, 4);
  g_autoptr(CohortDistill) gd = distiller(g2, gt, 0, 2, 1);
  g_autoptr(CohortBatch) batch = gpt_batch();
  double parts[COHORT_DISTILL_N_PARTS];
  cohort_model_zero_grad(g1), cohort_model_zero_grad(g2);
  float plain = g1->ops->forward(g1, batch, COHORT_FORWARD_TRAIN);
  g1->ops->backward(g1, 0.5f);
  float mixed = cohort_distill_forward(gd, batch, parts);
  cohort_distill_backward(gd, 0.5f);
  g_assert_cmpfloat(plain, ==, mixed);
  g_assert_cmpmem(g1->grads, g1->n_params * 4, g2->grads, g2->n_params * 4);
  g_assert_cmpfloat(parts[COHORT_DISTILL_PART_TEACHER], >, 0);

  g_autoptr(CohortConfig) dc = dit_cfg(1, 2, 16, 2);
  g_autoptr(CohortModel) dt = make(dc, DB, TRUE, 5);
  g_autoptr(CohortModel) d1 = make(dc, DB, FALSE, 6), d2 = make(dc, DB, FALSE, 6);
  randomise(d1, 9, 0.5f), randomise(d2, 9, 0.5f), randomise(dt, 10, 0.5f);
  g_autoptr(CohortDistill) dd = distiller(d2, dt, 0, 1, 3);
  cohort_model_zero_grad(d1), cohort_model_zero_grad(d2);
  plain = cohort_dit_forward_given(d1, x_t, tt, labels, target, DB);
  d1->ops->backward(d1, 0.5f);
  mixed = cohort_dit_distill_forward_given(dd, x_t, tt, labels, target, DB, parts);
  cohort_distill_backward(dd, 0.5f);
  g_assert_cmpfloat(plain, ==, mixed);
  g_assert_cmpmem(d1->grads, d1->n_params * 4, d2->grads, d2->n_params * 4);
}

static gboolean all_zero(const float *v, size_t n)
{
  for (size_t i = 0; i < n; i++)
    if (v[i] != 0.0f)
      return FALSE;
  return TRUE;
}

/* A student that is its teacher (teacher_layers at equal depth) learns nothing at alpha 1. */
static void test_identical_teacher(void)
{
  g_autoptr(GError) error = NULL;
  double parts[COHORT_DISTILL_N_PARTS];
  g_autoptr(CohortConfig) gc = gpt_cfg(2, 2, 32, GT);
  g_autoptr(CohortModel) gt = make(gc, GB, TRUE, 3), gs = make(gc, GB, FALSE, 4);
  randomise(gt, 1, 0.4f);
  g_assert_true(cohort_distill_copy_teacher_layers(gs, 2, gt, 2, &error));
  g_autoptr(CohortDistill) gd = distiller(gs, gt, 1, 3, 1);
  g_autoptr(CohortBatch) batch = gpt_batch();
  cohort_model_zero_grad(gs);
  g_assert_cmpfloat(cohort_distill_forward(gd, batch, parts), ==, 0);
  cohort_distill_backward(gd, 1.0f);
  g_assert_true(all_zero(gs->grads, gs->n_params));

  g_autoptr(CohortConfig) dc = dit_cfg(2, 2, 16, 2);
  g_autoptr(CohortModel) dt = make(dc, DB, TRUE, 5), ds = make(dc, DB, FALSE, 6);
  randomise(dt, 2, 0.5f);
  g_assert_true(cohort_distill_copy_teacher_layers(ds, 2, dt, 2, &error));
  g_autoptr(CohortDistill) dd = distiller(ds, dt, 1, 1, 1);
  cohort_model_zero_grad(ds);
  g_assert_cmpfloat(cohort_dit_distill_forward_given(dd, x_t, tt, labels, target, DB, parts), ==,
                    0);
  cohort_distill_backward(dd, 1.0f);
  g_assert_true(all_zero(ds->grads, ds->n_params));
}

static size_t heap_in_use(void)
{
  struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
}

static void check_frozen(const CohortConfig *cfg, int B)
{
  size_t h0 = heap_in_use();
  CohortModel *frozen = make(cfg, B, TRUE, 1);
  size_t h1 = heap_in_use();
  CohortModel *normal = make(cfg, B, FALSE, 1);
  size_t h2 = heap_in_use();
  g_assert_true(frozen->frozen && frozen->grads == NULL);
  g_assert_false(normal->frozen);
  size_t f = h1 - h0, n = h2 - h1, want = frozen->n_params * sizeof(float);
  g_test_message("%s: heap +%zu bytes frozen, +%zu trainable; memory_bytes %zu, gradients %zu",
                 cfg->model, f, n, cohort_model_memory_bytes(frozen), want);
  g_assert_cmpuint(cohort_model_memory_bytes(normal), ==,
                   (normal->n_params * 2 + normal->n_buffer_floats) * 4 + normal->act_bytes);
  g_assert_cmpuint(cohort_model_memory_bytes(frozen), ==,
                   (frozen->n_params + frozen->n_buffer_floats) * 4 + frozen->act_bytes);
  /* forward only: no backward scratch, one set of block buffers */
  g_assert_cmpuint(frozen->act_bytes, >, 0);
  g_assert_cmpuint(frozen->act_bytes, <, normal->act_bytes / 2);
  /* measured: each holds about what memory_bytes says (small host tables and scratch aside,
   * and page rounding of the large blocks), the trainable one a gradient per parameter more
   * and more activations. AddressSanitizer replaces malloc, so glibc's counters do not see
   * the models there. */
#ifndef __SANITIZE_ADDRESS__
  g_assert_cmpfloat(fabs((double)f - (double)cohort_model_memory_bytes(frozen)), <=,
                    0.05 * (double)f + 65536);
  g_assert_cmpfloat(fabs((double)n - (double)cohort_model_memory_bytes(normal)), <=,
                    0.05 * (double)n + 65536);
  g_assert_cmpfloat((double)n - (double)f, >=, (double)want);
#else
  g_test_message("heap figures not checked: AddressSanitizer's allocator");
#endif
  cohort_model_zero_grad(frozen); /* nothing to zero, and no crash */
  /* the shared block buffers compute what the trainable model computes */
  g_autofree float *w = g_new(float, frozen->n_params);
  cohort_model_download_params(frozen, w);
  cohort_model_upload_params(normal, w);
  if (g_str_equal(cfg->model, "gpt")) {
    g_autoptr(CohortBatch) b = cohort_batch_new(B, cfg->seq_len, 0, 0, 0);
    b->B = B;
    for (int i = 0; i < B * cfg->seq_len; i++)
      b->inputs[i] = (i * 7) % 40, b->targets[i] = (i * 3) % 40;
    float lf = frozen->ops->forward(frozen, b, COHORT_FORWARD_EVAL);
    float ln = normal->ops->forward(normal, b, COHORT_FORWARD_EVAL);
    g_assert_cmpfloat(lf, ==, ln);
    int rows, classes;
    const float *a = frozen->ops->logits(frozen, &rows, &classes);
    const float *c = normal->ops->logits(normal, &rows, &classes);
    g_assert_cmpmem(a, (size_t)rows * classes * 4, c, (size_t)rows * classes * 4);
  } else {
    g_autofree float *va = g_new(float, DB *DD), *vb = g_new(float, DB *DD);
    cohort_dit_velocity(frozen, x_t, tt, labels, DB, va);
    cohort_dit_velocity(normal, x_t, tt, labels, DB, vb);
    g_assert_cmpmem(va, DB * DD * 4, vb, DB * DD * 4);
  }
  cohort_model_free(normal);
  cohort_model_free(frozen);
}

static void test_teacher_frozen(void)
{
  g_autoptr(CohortConfig) gc = gpt_cfg(4, 4, 128, 64);
  check_frozen(gc, 8);
  g_autoptr(CohortConfig) dc = dit_cfg(3, 2, 64, 2);
  check_frozen(dc, DB);
}

/* Distillation steps with AdamW on the student leave the teacher as it was, bit for bit. */
static void test_teacher_unchanged(void)
{
  g_autoptr(CohortConfig) gc = gpt_cfg(3, 4, 48, 16);
  g_autoptr(CohortConfig) sc = gpt_cfg(2, 2, 32, GT);
  g_autoptr(CohortModel) teacher = make(gc, GB, TRUE, 1), student = make(sc, GB, FALSE, 2);
  g_autofree float *before = g_memdup2(teacher->params, teacher->n_params * 4);
  g_autoptr(CohortDistill) d = distiller(student, teacher, 0.5, 2, 1);
  g_autoptr(CohortBatch) batch = gpt_batch();
  CohortOptimizer *opt = cohort_adamw_new_on(cpu, student->n_params);
  g_autofree float *s0 = g_memdup2(student->params, student->n_params * 4);
  double parts[COHORT_DISTILL_N_PARTS];
  for (int step = 1; step <= 3; step++) {
    cohort_model_zero_grad(student);
    cohort_distill_forward(d, batch, parts);
    cohort_distill_backward(d, 1.0f);
    cohort_adamw_step(opt, student->params, student->grads, student->tensors, student->n_tensors,
                      1e-2, 0.9, 0.95, 1e-8, 0.1, step);
  }
  g_assert_true(memcmp(s0, student->params, student->n_params * 4) != 0); /* it trained */
  g_assert_cmpmem(before, teacher->n_params * 4, teacher->params, teacher->n_params * 4);
  g_assert_null(teacher->grads);
  cohort_optimizer_free(opt);

  g_autoptr(CohortConfig) tc2 = dit_cfg(2, 2, 32, 4), sc2 = dit_cfg(1, 2, 16, 2);
  g_autoptr(CohortModel) dt = make(tc2, DB, TRUE, 3), ds = make(sc2, DB, FALSE, 4);
  randomise(dt, 3, 0.5f);
  g_autofree float *dp = g_memdup2(dt->params, dt->n_params * 4);
  g_autofree float *db = g_memdup2(dt->buffer_data, dt->n_buffer_floats * 4);
  g_autoptr(CohortDistill) dd = distiller(ds, dt, 0.5, 1, 2);
  for (int step = 0; step < 2; step++) {
    cohort_dit_distill_forward_given(dd, x_t, tt, labels, target, DB, parts);
    cohort_distill_backward(dd, 1.0f);
  }
  g_assert_cmpmem(dp, dt->n_params * 4, dt->params, dt->n_params * 4);
  g_assert_cmpmem(db, dt->n_buffer_floats * 4, dt->buffer_data, dt->n_buffer_floats * 4);
}

static void assert_same_tensor(const CohortModel *s, const char *sn, const CohortModel *t,
                               const char *tn)
{
  const CohortTensorInfo *a = cohort_model_find_tensor(s, sn), *b = cohort_model_find_tensor(t, tn);
  g_assert_nonnull(a);
  g_assert_nonnull(b);
  g_assert_cmpmem(s->params + a->offset, a->numel * 4, t->params + b->offset, b->numel * 4);
}

static void test_teacher_layers(void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortConfig) tc = gpt_cfg(4, 2, 32, 16), sc = gpt_cfg(2, 2, 32, GT);
  sc->seq_len = 16;
  g_autoptr(CohortModel) t = make(tc, 2, TRUE, 1), s = make(sc, 2, FALSE, 2);
  g_assert_true(cohort_distill_copy_teacher_layers(s, 2, t, 4, &error));
  g_assert_no_error(error);
  assert_same_tensor(s, "wte.weight", t, "wte.weight");
  assert_same_tensor(s, "wpe.weight", t, "wpe.weight");
  assert_same_tensor(s, "h.0.attn.c_attn.weight", t, "h.0.attn.c_attn.weight");
  assert_same_tensor(s, "h.1.attn.c_attn.weight", t, "h.2.attn.c_attn.weight"); /* k = 2 */
  assert_same_tensor(s, "h.1.mlp.c_proj.bias", t, "h.2.mlp.c_proj.bias");
  assert_same_tensor(s, "ln_f.weight", t, "ln_f.weight");

  /* a deeper student, another width: errors, and nothing copied */
  g_autofree float *keep = g_memdup2(s->params, s->n_params * 4);
  g_assert_false(cohort_distill_copy_teacher_layers(t, 4, s, 2, &error));
  g_test_message("%s", error->message);
  g_assert_nonnull(strstr(error->message, "4 blocks"));
  g_clear_error(&error);
  g_autoptr(CohortConfig) wc = gpt_cfg(2, 2, 48, 16);
  g_autoptr(CohortModel) wide = make(wc, 2, FALSE, 3);
  g_assert_false(cohort_distill_copy_teacher_layers(s, 2, wide, 2, &error));
  g_test_message("%s", error->message);
  g_assert_nonnull(strstr(error->message, "\"wte.weight\" has shape [40, 32]"));
  g_assert_nonnull(strstr(error->message, "[40, 48]"));
  g_assert_cmpmem(keep, s->n_params * 4, s->params, s->n_params * 4);
  g_clear_error(&error);

  g_autoptr(CohortConfig) dtc = dit_cfg(3, 2, 32, 4), dsc = dit_cfg(1, 2, 32, 4);
  g_autoptr(CohortModel) dt = make(dtc, 2, TRUE, 4), ds = make(dsc, 2, FALSE, 5);
  randomise(dt, 4, 0.5f);
  g_assert_true(cohort_distill_copy_teacher_layers(ds, 1, dt, 3, &error));
  assert_same_tensor(ds, "blocks.0.adaLN_modulation.1.weight", dt,
                     "blocks.0.adaLN_modulation.1.weight");
  assert_same_tensor(ds, "x_embedder.proj.weight", dt, "x_embedder.proj.weight");
  assert_same_tensor(ds, "final_layer.linear.weight", dt, "final_layer.linear.weight");
  g_autoptr(CohortConfig) dpc = dit_cfg(1, 2, 32, 2); /* another patch size */
  g_autoptr(CohortModel) dp = make(dpc, 2, FALSE, 6);
  g_assert_false(cohort_distill_copy_teacher_layers(dp, 1, dt, 3, &error));
  g_test_message("%s", error->message);
  g_assert_nonnull(strstr(error->message, "x_embedder.proj.weight"));
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  cpu = cohort_backend_cpu();
  cpu->set_threads(1);
  guint32 r = 99;
  for (int i = 0; i < GB * GT; i++) {
    r = r * 1664525u + 1013904223u;
    tokens[i] = (int)((r >> 8) % GV);
    targets[i] = (int)((r >> 16) % GV);
  }
  for (int i = 0; i < DB * DD; i++) {
    r = r * 1664525u + 1013904223u;
    x_t[i] = (float)((r >> 8) * (1.0 / 16777216.0)) * 4 - 2;
    r = r * 1664525u + 1013904223u;
    target[i] = (float)((r >> 8) * (1.0 / 16777216.0)) * 4 - 2;
  }
  for (int i = 0; i < DB; i++)
    tt[i] = 0.1f + 0.25f * i;
  g_test_add_func("/distill/gpt-against-torch", test_gpt_against_torch);
  g_test_add_func("/distill/dit-against-torch", test_dit_against_torch);
  g_test_add_func("/distill/alpha-zero-is-plain", test_alpha_zero_is_plain);
  g_test_add_func("/distill/identical-teacher", test_identical_teacher);
  g_test_add_func("/distill/teacher-frozen", test_teacher_frozen);
  g_test_add_func("/distill/teacher-unchanged", test_teacher_unchanged);
  g_test_add_func("/distill/teacher-layers", test_teacher_layers);
  return g_test_run();
}

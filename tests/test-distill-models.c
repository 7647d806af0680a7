/* Distillation of whole models, on the CPU backend (engine/model/distill.h):
 *  - GPT: the mixed loss alpha tau² KL + (1 − alpha) CE, both parts and every student gradient
 *    against float64 PyTorch (tests/torch_distill_ref.py), with a teacher deeper, wider and
 *    with a longer context than the student, at temperatures 1 and 2.5;
 *  - llama: the same against float64 PyTorch (tests/torch_llama_ref.py's models), a Qwen3
 *    student of a deeper, wider Llama teacher with a tied head and a longer context;
 *  - DiT: the velocity distillation loss (plain and classifier-free-guided teacher velocity,
 *    a teacher of another width, depth and patch size), parts and gradients likewise;
 *  - ResNet: a ResNet-8 student in training mode (batch statistics) against a ResNet-14 teacher
 *    of another width in evaluation mode (running statistics), parts and gradients likewise;
 *    a teacher loaded from a folder has the folder's BatchNorm statistics (they change its
 *    logits); teacher_layers is refused for it;
 *  - alpha 0 is plain training, bit for bit; a student identical to its teacher at alpha 1 has
 *    a loss and gradients of exactly 0;
 *  - the teacher: no gradient buffer, memory = weights + buffers + activations (and the heap
 *    grows by that, 4 bytes a parameter less than a trainable model), weights and buffers
 *    bit-identical after distillation steps with AdamW on the student;
 *  - student_init teacher_layers: which teacher block each student block gets, and the errors
 *    for a deeper or wider student, or a ResNet. */
#include <malloc.h>
#include <string.h>

#include "distill-ref.h"
#include "engine/base/fileio.h"
#include "engine/model/distill.h"
#include "engine/model/model-io.h"
#include "engine/models/dit.h"
#include "engine/models/resnet.h"
#include "engine/train/teacher.h"
#include "engine/model/optim.h"
#include "kernels/backend.h"
#include "engine/models/registry.h"

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

enum { RB = 6, RS = 16, RD = RS * RS, RK = 5 };
static float r_images[RB * RD];
static const int r_labels[RB] = {0, 1, 2, 3, 4, 2};

static CohortConfig *resnet_cfg(int n_layer, int width)
{
  CohortConfig *cfg = cohort_config_new();
  g_free(cfg->model);
  cfg->model = g_strdup("resnet");
  cfg->data_format = COHORT_DATA_IMAGES;
  cfg->n_layer = n_layer, cfg->resnet_width = width, cfg->bn_momentum = 0.3;
  cfg->image_size = RS, cfg->image_channels = 1, cfg->num_classes = RK;
  return cfg;
}

static CohortBatch *resnet_batch(void)
{
  CohortBatch *b = cohort_batch_new(RB, 0, 1, RS, RS);
  b->B = RB;
  memcpy(b->images, r_images, sizeof r_images);
  memcpy(b->labels, r_labels, sizeof r_labels);
  return b;
}

/* Running means of both signs and variances away from 1, so evaluation mode is not the
 * initial identity; the counters at 7. */
static void randomise_buffers(CohortModel *m, guint32 seed)
{
  for (guint i = 0; i < m->n_buffers; i++) {
    const CohortTensorInfo *t = &m->buffers[i];
    for (size_t k = 0; k < t->numel; k++) {
      seed = seed * 1664525u + 1013904223u;
      float u = (float)((seed >> 8) * (1.0 / 16777216.0));
      float *v = &m->buffer_data[t->offset + k];
      *v = g_str_has_suffix(t->name, "running_mean")  ? u - 0.5f
           : g_str_has_suffix(t->name, "running_var") ? 0.5f + u
                                                      : 7.0f;
    }
  }
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

/* Randomises both models, runs one distillation step of the student on the token batch and
 * returns its loss (parts[] gets the terms). */
static float token_step(CohortModel *student, CohortModel *teacher, double alpha, double tau,
                        double *parts)
{
  randomise(teacher, 5, 0.4f);
  randomise(student, 6, 0.4f);
  g_autoptr(CohortDistill) d = distiller(student, teacher, alpha, tau, 1);
  g_autoptr(CohortBatch) batch = gpt_batch();
  cohort_model_zero_grad(student);
  float loss = cohort_distill_forward(d, batch, parts);
  cohort_distill_backward(d, 1.0f);
  return loss;
}

/* `spec` (the mode's keys so far) completed with the student's names, run on the token batch
 * and compared with the step's parts, loss and gradients. */
static void check_tokens_ref(GString *spec, const CohortModel *student, const double *parts,
                             float loss)
{
  names_json(spec, student);
  g_autoptr(GByteArray) in = g_byte_array_new();
  g_byte_array_append(in, (const guint8 *)tokens, sizeof tokens);
  g_byte_array_append(in, (const guint8 *)targets, sizeof targets);
  size_t n_ref = 0;
  g_autofree double *ref = ref_run(spec->str, in, &n_ref);
  compare(student, parts, loss, ref, n_ref);
}

static void gpt_case(double alpha, double tau)
{
  g_autoptr(CohortConfig) tc = gpt_cfg(3, 4, 48, 16);
  g_autoptr(CohortConfig) sc = gpt_cfg(2, 2, 32, GT);
  g_autoptr(CohortModel) teacher = make(tc, GB, TRUE, 11);
  g_autoptr(CohortModel) student = make(sc, GB, FALSE, 12);
  double parts[COHORT_DISTILL_N_PARTS];
  float loss = token_step(student, teacher, alpha, tau, parts);

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
  check_tokens_ref(spec, student, parts, loss);
  g_unlink(sp), g_unlink(tp), g_rmdir(dir);
}

static void test_gpt_against_torch(void)
{
  if (!ref_have_torch())
    return;
  gpt_case(0.6, 2.5);
  gpt_case(0.9, 1.0);
}

/* A llama-family config of `arch` at vocab GV on tokens. */
static CohortConfig *llama_cfg(const char *arch, int L, int C, int T, const char *tied)
{
  g_autofree char *a = g_strdup_printf("architecture=%s", arch);
  g_autofree char *l = g_strdup_printf("n_layer=%d", L);
  g_autofree char *c = g_strdup_printf("n_embd=%d", C);
  g_autofree char *t = g_strdup_printf("seq_len=%d", T);
  const char *sets[] = {"model=llama",
                        "data_format=tokens",
                        a,
                        l,
                        c,
                        t,
                        "n_head=4",
                        "num_key_value_heads=2",
                        "head_dim=8",
                        "intermediate_size=40",
                        "vocab_size=40",
                        tied,
                        NULL};
  CohortConfig *cfg = cohort_config_new();
  g_autoptr(GError) error = NULL;
  cohort_config_apply_assignments(cfg, sets, "test", &error);
  g_assert_no_error(error);
  return cfg;
}

/* `m` as a Hugging Face folder `name` in `dir`: model.safetensors and the class's config.json. */
static char *save_folder(const CohortModel *m, const CohortConfig *cfg, const char *dir,
                         const char *name)
{
  char *folder = g_build_filename(dir, name, NULL);
  g_assert_cmpint(g_mkdir_with_parents(folder, 0755), ==, 0);
  g_free(save(m, folder, "model.safetensors"));
  g_autoptr(GError) error = NULL;
  g_assert_true(m->klass->export_extra(m, cfg, folder, &error));
  g_assert_no_error(error);
  return folder;
}

/* A Qwen3 student (q/k norms, a separate head) of a deeper and wider Llama teacher (tied
 * head) with a longer context: parts and every student gradient against
 * tests/torch_distill_ref.py's llama mode. */
static void llama_case(double alpha, double tau)
{
  g_autoptr(CohortConfig) tc = llama_cfg("LlamaForCausalLM", 3, 48, 16, "tie_word_embeddings=true");
  g_autoptr(CohortConfig) sc =
      llama_cfg("Qwen3ForCausalLM", 2, 32, GT, "tie_word_embeddings=false");
  g_autoptr(CohortModel) teacher = make(tc, GB, TRUE, 11);
  g_autoptr(CohortModel) student = make(sc, GB, FALSE, 12);
  double parts[COHORT_DISTILL_N_PARTS];
  float loss = token_step(student, teacher, alpha, tau, parts);

  g_autoptr(GError) error = NULL;
  g_autofree char *dir = g_dir_make_tmp("cohort-distill-llama-XXXXXX", &error);
  g_autofree char *sp = save_folder(student, sc, dir, "student");
  g_autofree char *tp = save_folder(teacher, tc, dir, "teacher");
  g_autoptr(GString) spec = g_string_new(NULL);
  g_string_printf(spec,
                  "{\"mode\": \"llama\", \"B\": %d, \"T\": %d, \"alpha\": %.17g, \"tau\": "
                  "%.17g, \"student\": \"%s\", \"teacher\": \"%s\", ",
                  GB, GT, alpha, tau, sp, tp);
  check_tokens_ref(spec, student, parts, loss);
  cohort_remove_tree(dir);
}

static void test_llama_against_torch(void)
{
  if (!ref_have_torch())
    return;
  llama_case(0.6, 2.5);
  llama_case(0.9, 1.0);
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

static void resnet_case(double alpha, double tau)
{
  g_autoptr(CohortConfig) tc = resnet_cfg(14, 12);
  g_autoptr(CohortConfig) sc = resnet_cfg(8, 8);
  g_autoptr(CohortModel) teacher = make(tc, RB, TRUE, 31);
  g_autoptr(CohortModel) student = make(sc, RB, FALSE, 32);
  randomise(teacher, 11, 0.3f);
  randomise(student, 12, 0.3f);
  randomise_buffers(teacher, 13);
  g_autoptr(CohortDistill) d = distiller(student, teacher, alpha, tau, 1);
  g_autoptr(CohortBatch) batch = resnet_batch();
  double parts[COHORT_DISTILL_N_PARTS];
  g_autoptr(GError) error = NULL;
  g_autofree char *dir = g_dir_make_tmp("cohort-distill-resnet-XXXXXX", &error);
  /* the student's file before the forward: it updates the running statistics, which the
   * reference's training-mode forward does not read */
  g_autofree char *sp = save(student, dir, "student.safetensors");
  g_autofree char *tp = save(teacher, dir, "teacher.safetensors");
  cohort_model_zero_grad(student);
  float loss = cohort_distill_forward(d, batch, parts);
  cohort_distill_backward(d, 1.0f);

  g_autoptr(GString) spec = g_string_new(NULL);
  g_string_printf(spec,
                  "{\"mode\": \"resnet\", \"B\": %d, \"image_size\": %d, \"channels\": 1, "
                  "\"num_classes\": %d, \"bn_momentum\": 0.3, \"alpha\": %.17g, \"tau\": %.17g, "
                  "\"student\": \"%s\", \"teacher\": \"%s\", \"student_shape\": [1, 8], "
                  "\"teacher_shape\": [2, 12], ",
                  RB, RS, RK, alpha, tau, sp, tp);
  names_json(spec, student);
  g_autoptr(GByteArray) in = g_byte_array_new();
  g_byte_array_append(in, (const guint8 *)r_images, sizeof r_images);
  g_byte_array_append(in, (const guint8 *)r_labels, sizeof r_labels);
  size_t n_ref = 0;
  g_autofree double *ref = ref_run(spec->str, in, &n_ref);
  compare(student, parts, loss, ref, n_ref);
  g_unlink(sp), g_unlink(tp), g_rmdir(dir);
}

static void test_resnet_against_torch(void)
{
  if (!ref_have_torch())
    return;
  resnet_case(0.7, 2.0);
  resnet_case(0.3, 1.0);
  resnet_case(1.0, 4.0);
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

  g_autoptr(CohortConfig) rc = resnet_cfg(8, 8), rtc = resnet_cfg(14, 8);
  g_autoptr(CohortModel) rt = make(rtc, RB, TRUE, 7);
  g_autoptr(CohortModel) r1 = make(rc, RB, FALSE, 8), r2 = make(rc, RB, FALSE, 8);
  randomise_buffers(rt, 3);
  g_autoptr(CohortDistill) rd = distiller(r2, rt, 0, 2, 1);
  g_autoptr(CohortBatch) rb = resnet_batch();
  cohort_model_zero_grad(r1), cohort_model_zero_grad(r2);
  plain = r1->ops->forward(r1, rb, COHORT_FORWARD_TRAIN);
  r1->ops->backward(r1, 0.5f);
  mixed = cohort_distill_forward(rd, rb, parts);
  cohort_distill_backward(rd, 0.5f);
  g_assert_cmpfloat(plain, ==, mixed);
  g_assert_cmpmem(r1->grads, r1->n_params * 4, r2->grads, r2->n_params * 4);
  g_assert_cmpmem(r1->buffer_data, r1->n_buffer_floats * 4, r2->buffer_data,
                  r2->n_buffer_floats * 4);
  g_assert_cmpfloat(parts[COHORT_DISTILL_PART_TEACHER], >, 0);
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

/* Sets the teacher's running statistics to the statistics training mode normalises `batch`
 * with in each BatchNorm layer: a training forward at momentum 1 leaves the batch mean and the
 * unbiased variance m2 / (n − 1); times (n − 1) / n it is the variance training divides by, n
 * being batch × side² of the layer (the side halves at stages 2 and 3). */
static void running_from_batch(CohortModel *teacher, const CohortConfig *cfg,
                               const CohortBatch *batch)
{
  g_autoptr(CohortConfig) c1 = cohort_config_copy(cfg);
  c1->bn_momentum = 1;
  g_autoptr(CohortModel) probe = make(c1, RB, FALSE, 1);
  cohort_model_upload_params(probe, teacher->params);
  probe->ops->forward(probe, batch, COHORT_FORWARD_TRAIN);
  for (guint i = 0; i < probe->n_buffers; i++) {
    const CohortTensorInfo *t = &probe->buffers[i];
    int stage = 1;
    if (sscanf(t->name, "layer%d.", &stage) != 1)
      stage = 1;
    double n = (double)batch->B * (RS >> (stage - 1)) * (RS >> (stage - 1));
    gboolean var = g_str_has_suffix(t->name, "running_var");
    for (size_t k = 0; k < t->numel; k++)
      teacher->buffer_data[t->offset + k] =
          (float)(probe->buffer_data[t->offset + k] * (var ? (n - 1) / n : 1.0));
  }
}

static double max_abs(const float *v, size_t n)
{
  double m = 0;
  for (size_t i = 0; i < n; i++)
    m = fmax(m, fabs(v[i]));
  return m;
}

/* A ResNet student's teacher of the same weights runs in evaluation mode: with running
 * statistics that are the batch's own, the teacher term and the gradients at alpha 1 vanish
 * (to float rounding: the two modes compute the same normalisation in different orders, and
 * the KL of nearly equal rows is a difference of nearly equal sums); with other running
 * statistics they do not. */
static void test_identical_resnet_teacher(void)
{
  g_autoptr(CohortConfig) rc = resnet_cfg(8, 8);
  g_autoptr(CohortModel) rt = make(rc, RB, TRUE, 5), rs = make(rc, RB, FALSE, 6);
  randomise(rt, 2, 0.3f);
  cohort_model_upload_params(rs, rt->params);
  g_autoptr(CohortBatch) batch = resnet_batch();
  double parts[COHORT_DISTILL_N_PARTS];
  g_autoptr(CohortDistill) d = distiller(rs, rt, 1, 2, 1);
  /* the initial running statistics (mean 0, variance 1): not the batch's */
  cohort_model_zero_grad(rs);
  double far = cohort_distill_forward(d, batch, parts);
  cohort_distill_backward(d, 1.0f);
  double far_grad = max_abs(rs->grads, rs->n_params);
  running_from_batch(rt, rc, batch);
  cohort_model_zero_grad(rs);
  double near = cohort_distill_forward(d, batch, parts);
  cohort_distill_backward(d, 1.0f);
  double near_grad = max_abs(rs->grads, rs->n_params);
  g_test_message("teacher term %.3g, largest gradient %.3g; with the batch's statistics %.3g, "
                 "%.3g",
                 far, far_grad, near, near_grad);
  g_assert_cmpfloat(far, >, 1e-3);
  g_assert_cmpfloat(far_grad, >, 1e-3);
  g_assert_cmpfloat(fabs(near), <, 1e-5 * far); /* the KL kernel's float rounding: ~1e-8 */
  g_assert_cmpfloat(near_grad, <, 1e-5 * far_grad);
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
  if (g_str_equal(cfg->model, "gpt") || g_str_equal(cfg->model, "llama")) {
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
  } else if (g_str_equal(cfg->model, "resnet")) {
    g_autofree float *la = g_new(float, RB *RK), *lb = g_new(float, RB *RK);
    randomise_buffers(frozen, 4);
    cohort_model_upload_buffers(normal, frozen->buffer_data);
    for (int mode = 0; mode < 2; mode++) { /* TRAIN, EVAL: both run on the shared buffers */
      float lf = cohort_resnet_forward_given(frozen, r_images, r_labels, RB, mode, NULL);
      float ln = cohort_resnet_forward_given(normal, r_images, r_labels, RB, mode, NULL);
      g_assert_cmpfloat(lf, ==, ln);
      cohort_resnet_logits(frozen, la);
      cohort_resnet_logits(normal, lb);
      g_assert_cmpmem(la, RB * RK * 4, lb, RB * RK * 4);
    }
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
  g_autoptr(CohortConfig) lc =
      llama_cfg("Qwen3ForCausalLM", 4, 64, 64, "tie_word_embeddings=false");
  check_frozen(lc, 8);
  g_autoptr(CohortConfig) dc = dit_cfg(3, 2, 64, 2);
  check_frozen(dc, DB);
  g_autoptr(CohortConfig) rc = resnet_cfg(20, 16);
  check_frozen(rc, RB);
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

  /* a ResNet teacher in evaluation mode: its running statistics and counters stay */
  g_autoptr(CohortConfig) rtc = resnet_cfg(14, 8), rsc = resnet_cfg(8, 4);
  g_autoptr(CohortModel) rt = make(rtc, RB, TRUE, 5), rs = make(rsc, RB, FALSE, 6);
  randomise_buffers(rt, 5);
  g_autofree float *rp = g_memdup2(rt->params, rt->n_params * 4);
  g_autofree float *rbuf = g_memdup2(rt->buffer_data, rt->n_buffer_floats * 4);
  g_autoptr(CohortDistill) rd = distiller(rs, rt, 0.5, 2, 1);
  g_autoptr(CohortBatch) rb = resnet_batch();
  for (int step = 0; step < 2; step++) {
    cohort_distill_forward(rd, rb, parts);
    cohort_distill_backward(rd, 1.0f);
  }
  g_assert_cmpmem(rp, rt->n_params * 4, rt->params, rt->n_params * 4);
  g_assert_cmpmem(rbuf, rt->n_buffer_floats * 4, rt->buffer_data, rt->n_buffer_floats * 4);
  const CohortTensorInfo *nbt = cohort_model_find_buffer(rs, "bn1.num_batches_tracked");
  g_assert_cmpfloat(rs->buffer_data[nbt->offset], ==, 2); /* the student's did count */
}

/* A ResNet teacher read from a model folder (engine/train/teacher.c) holds the folder's running
 * statistics and gives the saved model's evaluation logits, bit for bit; the same weights with
 * the initial statistics give other logits, so the statistics are what is checked. */
static void test_resnet_teacher_buffers(void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortConfig) tc = resnet_cfg(14, 8);
  g_autoptr(CohortModel) src = make(tc, RB, FALSE, 41);
  randomise(src, 14, 0.3f);
  randomise_buffers(src, 15);
  g_autofree char *dir = g_dir_make_tmp("cohort-resnet-teacher-XXXXXX", &error);
  g_autofree char *weights = save(src, dir, "model.safetensors");
  g_autofree char *cfg_path = g_build_filename(dir, "cohort-config.json", NULL);
  g_assert_true(cohort_config_save_file(tc, cfg_path, &error));
  g_autoptr(CohortConfig) sc = resnet_cfg(8, 4);
  g_free(sc->teacher_from);
  sc->teacher_from = g_strdup(dir);
  g_autoptr(CohortTeacher) t = cohort_teacher_load(cpu, sc, NULL, RB, &error);
  g_assert_no_error(error);
  CohortModel *tm = t->model;
  g_assert_true(tm->frozen);
  g_assert_cmpmem(src->buffer_data, src->n_buffer_floats * 4, tm->buffer_data,
                  tm->n_buffer_floats * 4);
  g_autofree float *want = g_new(float, RB *RK), *got = g_new(float, RB *RK);
  g_autofree float *bare = g_new(float, RB *RK);
  cohort_resnet_forward_given(src, r_images, r_labels, RB, COHORT_FORWARD_EVAL, NULL);
  cohort_resnet_logits(src, want);
  cohort_resnet_forward_given(tm, r_images, r_labels, RB, COHORT_FORWARD_EVAL, NULL);
  cohort_resnet_logits(tm, got);
  g_assert_cmpmem(want, RB * RK * 4, got, RB * RK * 4);
  g_autoptr(CohortModel) unloaded = make(tc, RB, TRUE, 1);
  cohort_model_upload_params(unloaded, src->params);
  cohort_resnet_forward_given(unloaded, r_images, r_labels, RB, COHORT_FORWARD_EVAL, NULL);
  cohort_resnet_logits(unloaded, bare);
  double diff = 0;
  for (int i = 0; i < RB * RK; i++)
    diff = fmax(diff, fabs(bare[i] - want[i]));
  g_test_message("logits without the folder's statistics differ by up to %.3g", diff);
  g_assert_cmpfloat(diff, >, 0.1);
  g_unlink(weights), g_unlink(cfg_path), g_rmdir(dir);
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
  g_clear_error(&error);

  /* ResNet stages change width with depth: refused, by the config check and by the copy */
  g_autoptr(CohortConfig) rtc = resnet_cfg(14, 8), rsc = resnet_cfg(8, 8);
  g_autoptr(CohortModel) rt = make(rtc, 2, TRUE, 7), rs = make(rsc, 2, FALSE, 8);
  g_assert_false(cohort_distill_copy_teacher_layers(rs, 8, rt, 14, &error));
  g_test_message("%s", error->message);
  g_assert_nonnull(strstr(error->message, "the resnet family's blocks change shape"));
  g_clear_error(&error);
  g_free(rsc->teacher_from);
  rsc->teacher_from = g_strdup("runs/tiny-resnet");
  rsc->student_init = COHORT_STUDENT_INIT_TEACHER_LAYERS;
  g_assert_false(cohort_distill_check_config(rsc, "student.json", &error));
  g_test_message("%s", error->message);
  g_assert_cmpstr(error->message, ==,
                  "student.json: key \"student_init\": \"teacher_layers\" is not allowed for "
                  "model \"resnet\" (its blocks change shape with depth); allowed: \"random\"");
  g_clear_error(&error);
  rsc->student_init = COHORT_STUDENT_INIT_RANDOM;
  g_assert_true(cohort_distill_check_config(rsc, "student.json", &error));
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
  for (int i = 0; i < RB * RD; i++) {
    r = r * 1664525u + 1013904223u;
    r_images[i] = (float)((r >> 8) * (1.0 / 16777216.0)) * 2 - 1;
  }
  g_test_add_func("/distill/gpt-against-torch", test_gpt_against_torch);
  g_test_add_func("/distill/llama-against-torch", test_llama_against_torch);
  g_test_add_func("/distill/dit-against-torch", test_dit_against_torch);
  g_test_add_func("/distill/resnet-against-torch", test_resnet_against_torch);
  g_test_add_func("/distill/alpha-zero-is-plain", test_alpha_zero_is_plain);
  g_test_add_func("/distill/identical-teacher", test_identical_teacher);
  g_test_add_func("/distill/identical-resnet-teacher", test_identical_resnet_teacher);
  g_test_add_func("/distill/teacher-frozen", test_teacher_frozen);
  g_test_add_func("/distill/teacher-unchanged", test_teacher_unchanged);
  g_test_add_func("/distill/teacher-layers", test_teacher_layers);
  g_test_add_func("/distill/resnet-teacher-buffers", test_resnet_teacher_buffers);
  return g_test_run();
}

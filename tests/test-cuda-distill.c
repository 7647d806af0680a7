/* Distillation on a GPU (suite cuda): a frozen teacher and its student on the CUDA backend
 * against the same pair on the CPU backend (tests/test-distill-models.c checks the CPU against
 * PyTorch), for a GPT (KL term) and a DiT (guided teacher velocity): both loss parts to
 * 1e-4 relative, every student gradient to 1e-3 of its tensor's largest, and no gradient buffer
 * for the teacher. Skips without a CUDA device. */
#include "engine/model/distill.h"
#include "engine/models/dit.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda-backend.h"
#include "engine/models/registry.h"

#include <math.h>
#include <string.h>

static gboolean need_gpu(void)
{
  if (cohort_cuda_device_count() > 0 && cohort_cuda_set_device(0) == 0)
    return TRUE;
  const char *why = cohort_cuda_probe_error();
  g_autofree char *msg = g_strdup_printf("no CUDA device: %s", why ? why : "none usable");
  g_test_skip(msg);
  return FALSE;
}

typedef struct {
  CohortModel *teacher, *student;
  CohortDistill *d;
} Pair;

/* Teacher and student of `tc` and `sc` on `be`, with the weights seeded the same way on every
 * backend (initialised, then shifted so no layer starts at zero). */
static Pair make_pair(const CohortBackend *be, const CohortConfig *tc, const CohortConfig *sc,
                      int B, const CohortDistillSettings *s)
{
  g_autoptr(GError) error = NULL;
  Pair p = {cohort_model_new_frozen(be, tc, B, &error), cohort_model_new(be, sc, B, &error), NULL};
  g_assert_no_error(error);
  CohortModel *both[] = {p.teacher, p.student};
  for (int k = 0; k < 2; k++) {
    CohortModel *m = both[k];
    m->ops->init_weights(m, 7 + k);
    g_autofree float *w = g_new(float, m->n_params);
    cohort_model_download_params(m, w);
    for (size_t i = 0; i < m->n_params; i++)
      w[i] += 0.05f * sinf(0.37f * (float)i + k);
    cohort_model_upload_params(m, w);
  }
  g_assert_true(p.teacher->frozen && p.teacher->grads == NULL);
  p.d = cohort_distill_new(p.student, p.teacher, s, &error);
  g_assert_no_error(error);
  cohort_model_zero_grad(p.student);
  return p;
}

static void pair_free(Pair *p)
{
  cohort_distill_free(p->d);
  cohort_model_free(p->student);
  cohort_model_free(p->teacher);
}

static void compare(const Pair *cpu, const Pair *gpu, const double *pc, const double *pg)
{
  for (int k = 0; k < COHORT_DISTILL_N_PARTS; k++) {
    g_test_message("part %d: cpu %.8g, gpu %.8g", k, pc[k], pg[k]);
    g_assert_cmpfloat(fabs(pc[k] - pg[k]), <=, 1e-4 * fabs(pc[k]) + 1e-6);
  }
  const CohortModel *s = cpu->student;
  g_autofree float *g = g_new(float, s->n_params);
  gpu->student->be->download(g, gpu->student->grads, s->n_params * sizeof(float));
  for (guint i = 0; i < s->n_tensors; i++) {
    const CohortTensorInfo *t = &s->tensors[i];
    double mx = 0;
    for (size_t j = 0; j < t->numel; j++)
      mx = fmax(mx, fabs(s->grads[t->offset + j]));
    for (size_t j = 0; j < t->numel; j++)
      if (fabs(g[t->offset + j] - s->grads[t->offset + j]) > 1e-3 * mx + 1e-7)
        g_error("%s[%zu]: gpu %.8g, cpu %.8g (tensor max %.3g)", t->name, j, g[t->offset + j],
                s->grads[t->offset + j], mx);
  }
}

static void test_gpt(void)
{
  if (!need_gpu())
    return;
  enum { B = 4, T = 32 };
  g_autoptr(CohortConfig) tc = cohort_config_new(), sc = cohort_config_new();
  tc->n_layer = 3, tc->n_head = 4, tc->n_embd = 64, tc->seq_len = T;
  sc->n_layer = 1, sc->n_head = 2, sc->n_embd = 32, sc->seq_len = T;
  CohortDistillSettings s = {.alpha = 0.6, .temperature = 2, .cfg_scale = 1};
  g_autoptr(CohortBatch) batch = cohort_batch_new(B, T, 0, 0, 0);
  batch->B = B;
  for (int i = 0; i < B * T; i++)
    batch->inputs[i] = (i * 37) % 256, batch->targets[i] = (i * 91 + 5) % 256;
  Pair c = make_pair(cohort_backend_cpu(), tc, sc, B, &s);
  Pair g = make_pair(cohort_backend_cuda(), tc, sc, B, &s);
  double pc[COHORT_DISTILL_N_PARTS], pg[COHORT_DISTILL_N_PARTS];
  cohort_distill_forward(c.d, batch, pc);
  cohort_distill_backward(c.d, 1.0f);
  cohort_distill_forward(g.d, batch, pg);
  cohort_distill_backward(g.d, 1.0f);
  g_assert_null(cohort_cuda_last_error());
  compare(&c, &g, pc, pg);
  pair_free(&c), pair_free(&g);
}

static void test_dit(void)
{
  if (!need_gpu())
    return;
  enum { B = 4, S = 16, D = S * S };
  g_autoptr(CohortConfig) tc = cohort_config_new(), sc = cohort_config_new();
  CohortConfig *both[] = {tc, sc};
  for (int k = 0; k < 2; k++) {
    g_free(both[k]->model);
    both[k]->model = g_strdup("dit");
    both[k]->data_format = COHORT_DATA_IMAGES;
    both[k]->image_size = S, both[k]->image_channels = 1, both[k]->num_classes = 5;
    both[k]->n_head = 2;
  }
  tc->n_layer = 2, tc->n_embd = 64, tc->patch_size = 4;
  sc->n_layer = 1, sc->n_embd = 32, sc->patch_size = 2;
  CohortDistillSettings s = {.alpha = 0.7, .temperature = 1, .cfg_scale = 3};
  float x_t[B * D], t[B], target[B * D];
  int labels[B] = {0, 4, 5, 2};
  for (int i = 0; i < B * D; i++)
    x_t[i] = sinf(0.1f * i), target[i] = cosf(0.07f * i);
  for (int i = 0; i < B; i++)
    t[i] = 0.15f + 0.2f * i;
  Pair c = make_pair(cohort_backend_cpu(), tc, sc, B, &s);
  Pair g = make_pair(cohort_backend_cuda(), tc, sc, B, &s);
  double pc[COHORT_DISTILL_N_PARTS], pg[COHORT_DISTILL_N_PARTS];
  cohort_dit_distill_forward_given(c.d, x_t, t, labels, target, B, pc);
  cohort_distill_backward(c.d, 1.0f);
  cohort_dit_distill_forward_given(g.d, x_t, t, labels, target, B, pg);
  cohort_distill_backward(g.d, 1.0f);
  g_assert_null(cohort_cuda_last_error());
  compare(&c, &g, pc, pg);
  pair_free(&c), pair_free(&g);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  cohort_backend_cpu()->set_threads(1);
  g_test_add_func("/cuda-distill/gpt", test_gpt);
  g_test_add_func("/cuda-distill/dit", test_dit);
  return g_test_run();
}

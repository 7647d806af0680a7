/* The GPT-2-style model over the backend table (kernels/backend.h): its set-up from the
 * family's description (engine/families/gpt.h), initialisation, the calls written before the
 * model interface, and the class. Activations for max_batch sequences are allocated once, so a
 * training step allocates nothing; forward and backward are gpt-forward.c. */
#include "engine/models/gpt-private.h"
#include "engine/base/error.h"
#include "engine/model/rng.h"

#include "engine/model/distill.h"
#include "engine/models/gpt-generate.h"
#include "engine/models/gpt-io.h"

#include <math.h>
#include <string.h>

static const CohortModelOps gpt_ops;

gboolean cohort_is_gpt(const CohortModel *m)
{
  return m && m->klass == &cohort_gpt_class;
}

static void build_table(Gpt *gpt)
{
  CohortFamilyTables t;
  cohort_family_gpt_tables(&gpt->shape, &t);
  cohort_model_take_tables(&gpt->base, &t);
}

static gboolean check_shape(const CohortGptShape *s, int max_batch, GError **error)
{
  struct {
    const char *name;
    int value, min, max;
  } f[] = {
      {"n_layer", s->n_layer, 1, 1024},          {"n_head", s->n_head, 1, 1024},
      {"n_embd", s->n_embd, 1, 65536},           {"seq_len", s->seq_len, 1, 1 << 20},
      {"vocab_size", s->vocab_size, 1, 1 << 24}, {"max_batch", max_batch, 1, 1 << 20},
  };
  for (guint i = 0; i < G_N_ELEMENTS(f); i++) {
    if (f[i].value < f[i].min || f[i].value > f[i].max) {
      g_set_error(error, GPT_ERROR, 0, "GPT model: %s is %d; allowed: an integer from %d to %d",
                  f[i].name, f[i].value, f[i].min, f[i].max);
      return FALSE;
    }
  }
  if (s->n_embd % s->n_head != 0) {
    g_set_error(error, GPT_ERROR, 0,
                "GPT model: n_embd %d is not a multiple of n_head %d; allowed: n_embd "
                "divisible by n_head",
                s->n_embd, s->n_head);
    return FALSE;
  }
  return TRUE;
}

CohortGpt *cohort_gpt_new(const CohortGptShape *shape, int max_batch, GError **error)
{
  return cohort_gpt_new_on(cohort_backend_cpu(), shape, max_batch, error);
}

static void gpt_finalize(CohortModel *m)
{
  Gpt *gpt = (Gpt *)m;
  if (m->be)
    m->be->free(gpt->act_mem);
  g_free(gpt->acts.blocks);
  g_free(gpt->host_losses);
  g_free(gpt);
}

static const CohortMetric gpt_metrics[] = {{COHORT_FIELD_VAL_LOSS, 0, 1}};

/* keep: what the activations keep for backward (a model made frozen keeps none). */
static CohortGpt *gpt_new(const CohortBackend *be, const CohortGptShape *shape, int max_batch,
                          CohortActKeep keep, GError **error)
{
  g_return_val_if_fail(be != NULL && shape != NULL, NULL);
  if (!check_shape(shape, max_batch, error))
    return NULL;
  Gpt *gpt = g_new0(Gpt, 1);
  CohortModel *m = &gpt->base;
  m->klass = &cohort_gpt_class;
  m->ops = &gpt_ops;
  m->be = be;
  m->max_batch = max_batch;
  /* sums: loss × positions, positions */
  m->metrics = gpt_metrics;
  m->n_metrics = G_N_ELEMENTS(gpt_metrics);
  m->n_sums = 2;
  gpt->shape = *shape;
  gpt->forward_only = cohort_model_creating_frozen();
  if (gpt->forward_only)
    keep = COHORT_ACTS_FORWARD;
  gpt->checkpoint = keep == COHORT_ACTS_CHECKPOINT;
  gpt->acts_block = -1;
  build_table(gpt);
  m->lora_rows = (size_t)max_batch * shape->seq_len;
  gpt->acts.blocks = g_new0(CohortGptBlockActs, shape->n_layer);
  size_t act_bytes = cohort_family_gpt_layout(&gpt->acts, shape, max_batch, keep, NULL);
  gpt->act_mem = be->alloc(act_bytes);
  gpt->host_losses = g_try_new(float, (size_t)max_batch * shape->seq_len);
  GError *local = NULL;
  if (!cohort_model_alloc_tables(m, &local) && local->domain == COHORT_CONFIG_ERROR) {
    g_propagate_error(error, local); /* the fine-tuning keys do not fit the model */
    cohort_model_free(m);
    return NULL;
  }
  g_clear_error(&local);
  if (!m->params || (!gpt->forward_only && !m->grads) || !gpt->act_mem || !gpt->host_losses) {
    g_set_error(error, GPT_ERROR, 1,
                "GPT model: out of %s memory for %zu parameters and %.1f MiB of activations "
                "(max_batch %d, seq_len %d); allowed: a smaller model or batch",
                be->name, m->n_params, act_bytes / 1048576.0, max_batch, shape->seq_len);
    cohort_model_free(m);
    return NULL;
  }
  cohort_family_gpt_layout(&gpt->acts, shape, max_batch, keep, gpt->act_mem);
  m->act_bytes = act_bytes;
  return m;
}

CohortGpt *cohort_gpt_new_on(const CohortBackend *be, const CohortGptShape *shape, int max_batch,
                             GError **error)
{
  return gpt_new(be, shape, max_batch, COHORT_ACTS_ALL, error);
}

void cohort_gpt_free(CohortGpt *gpt)
{
  cohort_model_free(gpt);
}

const CohortGptShape *cohort_gpt_shape(const CohortGpt *m)
{
  return &gpt_of(m)->shape;
}

size_t cohort_gpt_num_params(const CohortGpt *m)
{
  return m->n_params;
}

float *cohort_gpt_params(CohortGpt *m)
{
  return m->params;
}

float *cohort_gpt_grads(CohortGpt *m)
{
  return m->grads;
}

const CohortBackend *cohort_gpt_backend(const CohortGpt *m)
{
  return m->be;
}

gboolean cohort_gpt_on_host(const CohortGpt *m)
{
  return cohort_model_on_host(m);
}

void cohort_gpt_download_params(const CohortGpt *m, float *host)
{
  cohort_model_download_params(m, host);
}

void cohort_gpt_upload_params(CohortGpt *m, const float *host)
{
  cohort_model_upload_params(m, host);
}

void cohort_gpt_download_grads(const CohortGpt *m, float *host)
{
  m->be->download(host, m->grads, m->n_trainable * sizeof(float));
}

void cohort_gpt_upload_grads(CohortGpt *m, const float *host)
{
  m->be->upload(m->grads, host, m->n_trainable * sizeof(float));
}

const float *cohort_gpt_params_host(const CohortGpt *m, float **tmp)
{
  return cohort_model_params_host(m, tmp);
}

void cohort_gpt_download_logits(const CohortGpt *m, size_t offset, size_t count, float *host)
{
  const Gpt *gpt = gpt_of(m);
  m->be->download(host, gpt->acts.logits + offset, count * sizeof(float));
}

const CohortTensorInfo *cohort_gpt_tensors(const CohortGpt *m, guint *n_tensors)
{
  if (n_tensors)
    *n_tensors = m->n_tensors;
  return m->tensors;
}

const CohortTensorInfo *cohort_gpt_find_tensor(const CohortGpt *m, const char *name)
{
  return cohort_model_find_tensor(m, name);
}

static double uniform01(guint64 *state)
{
  /* 53 random bits in (0, 1]: never 0, so log() below is finite */
  return ((cohort_rng_next(state) >> 11) + 1) * (1.0 / 9007199254740992.0);
}

static void fill_normal(float *dst, size_t n, double stddev, guint64 seed)
{
  guint64 st = seed;
  for (size_t i = 0; i < n; i += 2) {
    double u1 = uniform01(&st), u2 = uniform01(&st);
    double r = sqrt(-2.0 * log(u1)) * stddev;
    dst[i] = (float)(r * cos(2.0 * G_PI * u2));
    if (i + 1 < n)
      dst[i + 1] = (float)(r * sin(2.0 * G_PI * u2));
  }
}

/* GPT-2's initialisation of tensor i: N(0, 0.02) matrices (the residual projections scaled by
 * 1/sqrt(2 n_layer)), LayerNorm weights 1, biases 0. */
static void gpt_init_tensor(CohortModel *m, guint64 seed, guint i, float *dst)
{
  Gpt *gpt = gpt_of(m);
  const double std = 0.02;
  const double proj_std = 0.02 / sqrt(2.0 * gpt->shape.n_layer);
  const CohortTensorInfo *t = &m->tensors[i];
  memset(dst, 0, t->numel * sizeof(float));
  if (t->ndim == 2) {
    gboolean proj = g_str_has_suffix(t->name, "c_proj.weight");
    fill_normal(dst, t->numel, proj ? proj_std : std, cohort_rng_tensor_seed(seed, i));
  } else if (g_str_has_suffix(t->name, "ln_1.weight") || g_str_has_suffix(t->name, "ln_2.weight") ||
             strcmp(t->name, "ln_f.weight") == 0) {
    for (size_t k = 0; k < t->numel; k++)
      dst[k] = 1.0f;
  }
}

void cohort_gpt_init_weights(CohortGpt *m, guint64 seed)
{
  size_t n = m->n_params;
  float *host = g_new0(float, n);
  for (guint i = 0; i < m->n_tensors; i++)
    gpt_init_tensor(m, seed, i, host + m->tensors[i].offset);
  m->be->upload(m->params, host, n * sizeof(float));
  g_free(host);
}

const float *cohort_gpt_logits(const CohortGpt *m)
{
  return gpt_of(m)->acts.logits;
}

void cohort_gpt_zero_grad(CohortGpt *m)
{
  cohort_model_zero_grad(m);
}

void cohort_gpt_set_grad_ready_func(CohortGpt *m, CohortGradReadyFunc func, gpointer user_data)
{
  cohort_model_set_grad_ready_func(m, func, user_data);
}

static void gpt_init_buffers(CohortModel *m)
{
  (void)m; /* the GPT has none */
}

static void gpt_init(CohortModel *m, guint64 seed)
{
  cohort_gpt_init_weights(m, seed);
}

static const CohortModelOps gpt_ops = {
    .forward = cohort_gpt_forward_batch,
    .backward = cohort_gpt_backward_op,
    .init_weights = gpt_init,
    .init_tensor = gpt_init_tensor,
    .init_buffers = gpt_init_buffers,
    .eval_batch = cohort_gpt_eval_batch,
    .sample = cohort_gpt_sample,
    .flops_per_example = cohort_gpt_flops_per_example,
    .finalize = gpt_finalize,
    .logits = cohort_gpt_logits_op,
    .backward_logits = cohort_gpt_backward_logits,
};

static CohortModel *gpt_create(const CohortBackend *be, const CohortConfig *cfg, int max_batch,
                               GError **error)
{
  CohortGptShape shape = cohort_family_gpt_shape(cfg);
  return gpt_new(be, &shape, max_batch, cohort_family_act_keep(cfg, FALSE), error);
}

static const CohortDataFormat gpt_formats[] = {COHORT_DATA_TEXT, COHORT_DATA_TOKENS,
                                               COHORT_DATA_CHAT};

const CohortModelClass cohort_gpt_class = {
    .name = "gpt",
    .title = "GPT-2-style decoder (text)",
    .formats = gpt_formats,
    .n_formats = G_N_ELEMENTS(gpt_formats),
    .family = &cohort_family_gpt,
    .create = gpt_create,
    .import_weights = cohort_gpt_import,
    .import_file = cohort_gpt_import_file,
    .export_extra = cohort_gpt_write_hf_config,
    .check_teacher = cohort_gpt_check_teacher,
    .distill_new = cohort_logits_distill_new,
    .copies_blocks = TRUE,
    .position_table = "wpe.weight",
    .lora_module_prefix = "transformer.",
    .lora_task_type = "CAUSAL_LM",
    .frozen_layout = TRUE,
};

/* The ResNet family: its set-up from the description's plan of layers (engine/families/
 * resnet.h), initialisation and registry entry. */
#include "engine/models/resnet-private.h"

#include <math.h>
#include <string.h>

#include "engine/model/distill.h"
#include "engine/model/rng.h"

/* clang-format off */
G_DEFINE_QUARK(cohort-resnet-error-quark, cohort_resnet_error)
/* clang-format on */

/* The plan and tables of the description (engine/families/resnet.h) for the model's shape. */
static void build_tables(Resnet *r)
{
  CohortFamilyTables t;
  cohort_family_resnet_build(&r->shape, &r->net, &t);
  cohort_model_take_tables(&r->base, &t);
}

static void fill_normal(float *dst, size_t n, double std, guint64 seed)
{
  guint64 st = seed;
  for (size_t i = 0; i < n; i += 2) {
    double u1 = 1.0 - cohort_rng_uniform(&st);
    double u2 = cohort_rng_uniform(&st);
    double rad = sqrt(-2.0 * log(u1)) * std;
    dst[i] = (float)(rad * cos(2 * G_PI * u2));
    if (i + 1 < n)
      dst[i + 1] = (float)(rad * sin(2 * G_PI * u2));
  }
}

/* With zero_init_residual, each block's last BatchNorm scale starts at 0 (torchvision). */
static gboolean starts_at_zero(const Resnet *r, size_t offset)
{
  if (!r->shape.zero_init_residual)
    return FALSE;
  for (int b = 0; b < r->net.n_blocks; b++)
    if (r->net.blocks[b].unit[r->net.blocks[b].n_units - 1].g_off == offset)
      return TRUE;
  return FALSE;
}

static void resnet_init_tensor(CohortModel *m, guint64 seed, guint i, float *dst)
{
  Resnet *r = resnet_of(m);
  const CohortTensorInfo *t = &m->tensors[i];
  guint64 s = cohort_rng_tensor_seed(seed, i);
  memset(dst, 0, t->numel * sizeof(float));
  if (g_str_has_prefix(t->name, "fc.")) {
    cohort_rng_fill_uniform(dst, t->numel, 1.0 / sqrt((double)r->net.feat), s);
  } else if (t->ndim == 4) {
    double fan_out = (double)t->shape[0] * t->shape[2] * t->shape[3];
    fill_normal(dst, t->numel, sqrt(2.0 / fan_out), s);
  } else if (g_str_has_suffix(t->name, ".weight") && !starts_at_zero(r, t->offset)) {
    for (size_t k = 0; k < t->numel; k++)
      dst[k] = 1.0f; /* BatchNorm's scale */
  }
}

static void resnet_init_buffers(CohortModel *m)
{
  float *bufs = g_new0(float, m->n_buffer_floats);
  for (guint i = 0; i < m->n_buffers; i++)
    if (g_str_has_suffix(m->buffers[i].name, ".running_var"))
      for (size_t k = 0; k < m->buffers[i].numel; k++)
        bufs[m->buffers[i].offset + k] = 1.0f;
  cohort_model_upload_buffers(m, bufs);
  g_free(bufs);
}

/* torchvision's ResNet initialisation: convolutions kaiming_normal_(mode="fan_out",
 * nonlinearity="relu"), i.e. N(0, 2 / (c_out·k²)); BatchNorm weight 1 (0 for each block's last
 * with zero_init_residual) and bias 0; the
 * classifier as nn.Linear's default, U(±1/√fan_in) for weight and bias. Running mean 0,
 * running variance 1, no batches tracked. */
static void resnet_init(CohortModel *m, guint64 seed)
{
  float *host = g_new0(float, m->n_params);
  for (guint i = 0; i < m->n_tensors; i++)
    resnet_init_tensor(m, seed, i, host + m->tensors[i].offset);
  cohort_model_upload_params(m, host);
  g_free(host);
  resnet_init_buffers(m);
}

static void free_sync_scratch(Resnet *r)
{
  if (r->gather && r->base.be)
    r->base.be->free(r->gather);
  r->gather = NULL;
  g_clear_pointer(&r->gather_host, g_free);
  r->gather_world = 0;
}

static gboolean resnet_set_comm(CohortModel *m, const CohortModelComm *comm, GError **error)
{
  Resnet *r = resnet_of(m);
  if (comm->world_size == r->gather_world)
    return TRUE;
  free_sync_scratch(r);
  size_t n = (size_t)comm->world_size * (2 * (size_t)r->net.max_c + 1);
  r->gather = m->be->alloc(n * sizeof(float));
  if (!r->gather) {
    g_set_error(error, cohort_resnet_error_quark(), 2,
                "SyncBatchNorm: out of %s memory for the statistics of %d ranks", m->be->name,
                comm->world_size);
    return FALSE;
  }
  r->gather_host = g_new(float, n);
  r->gather_world = comm->world_size;
  return TRUE;
}

static void resnet_finalize(CohortModel *m)
{
  Resnet *r = resnet_of(m);
  free_sync_scratch(r);
  if (m->be)
    m->be->free(r->act_mem);
  cohort_family_resnet_net_clear(&r->net);
  g_free(r->host_losses);
  g_free(r->host_img);
  g_free(r);
}

/* Multiply-adds of the convolutions (the bulk) and the classifier, times 6: forward 2 FLOPs
 * per multiply-add, backward 4 (input and weight gradients). */
static double unit_macs(const ResnetConvBn *u)
{
  return (double)u->c_in * u->k * u->k * u->c_out * u->h_out * u->h_out;
}

static double resnet_flops_per_example(const CohortModel *m)
{
  const Resnet *r = resnet_of(m);
  double macs = unit_macs(&r->net.stem);
  for (int i = 0; i < r->net.n_blocks; i++) {
    const ResnetBlock *b = &r->net.blocks[i];
    for (int u = 0; u < b->n_units; u++)
      macs += unit_macs(&b->unit[u]);
    if (b->has_down)
      macs += unit_macs(&b->down);
  }
  macs += (double)r->net.feat * r->shape.num_classes;
  return 6.0 * macs;
}

const CohortResnetShape *cohort_resnet_shape(const CohortModel *m)
{
  g_return_val_if_fail(m && m->klass == &cohort_resnet_class, NULL);
  return &resnet_of(m)->shape;
}

/* Validation loss and top-1 accuracy over: summed losses, correct rows, rows. */
static const CohortMetric resnet_metrics[] = {{COHORT_FIELD_VAL_LOSS, 0, 2},
                                              {COHORT_FIELD_ACCURACY, 1, 2}};

static const CohortModelOps resnet_ops = {
    .forward = cohort_resnet_forward_batch,
    .backward = cohort_resnet_backward,
    .init_weights = resnet_init,
    .init_tensor = resnet_init_tensor,
    .init_buffers = resnet_init_buffers,
    .eval_batch = cohort_resnet_eval_batch,
    .flops_per_example = resnet_flops_per_example,
    .finalize = resnet_finalize,
    .logits = cohort_resnet_logits_op,
    .backward_logits = cohort_resnet_backward_logits,
    .set_comm = resnet_set_comm,
};

static void move_unit(const CohortModel *m, ResnetConvBn *u)
{
  u->w_off = cohort_model_moved(m, u->w_off);
  u->g_off = cohort_model_moved(m, u->g_off);
  u->b_off = cohort_model_moved(m, u->b_off);
}

/* The offsets kept above, after cohort_model_alloc_tables laid the tensors out for
 * finetune frozen (engine/model/finetune.h); unchanged otherwise. */
static void move_offsets(Resnet *r)
{
  const CohortModel *m = &r->base;
  move_unit(m, &r->net.stem);
  for (int i = 0; i < r->net.n_blocks; i++) {
    for (int u = 0; u < r->net.blocks[i].n_units; u++)
      move_unit(m, &r->net.blocks[i].unit[u]);
    if (r->net.blocks[i].has_down)
      move_unit(m, &r->net.blocks[i].down);
  }
  r->net.fc_w_off = cohort_model_moved(m, r->net.fc_w_off);
  r->net.fc_b_off = cohort_model_moved(m, r->net.fc_b_off);
}

static CohortModel *resnet_create(const CohortBackend *be, const CohortConfig *cfg, int max_batch,
                                  GError **error)
{
  if (!cohort_family_resnet.check_config(cfg, NULL, error))
    return NULL;
  if (cfg->num_classes < 1 || max_batch < 1) {
    g_set_error(error, cohort_resnet_error_quark(), 0,
                "ResNet model: %d classes and max_batch %d; a classifier needs labelled images "
                "(train_data with one folder per class, or num_classes >= 1) and a batch of 1 or "
                "more",
                cfg->num_classes, max_batch);
    return NULL;
  }
  Resnet *r = g_new0(Resnet, 1);
  CohortModel *m = &r->base;
  m->klass = &cohort_resnet_class;
  m->ops = &resnet_ops;
  m->be = be;
  m->max_batch = max_batch;
  m->metrics = resnet_metrics;
  m->n_metrics = G_N_ELEMENTS(resnet_metrics);
  m->n_sums = 3;
  r->shape = cohort_family_resnet_shape(cfg);
  r->bn_momentum = (float)cfg->bn_momentum;
  r->freeze_bn_stats = cfg->freeze_bn_stats;
  r->forward_only = cohort_model_creating_frozen();
  build_tables(r);
  m->lora_rows = (size_t)max_batch; /* the classifier's rows: one per image */
  size_t act_bytes =
      cohort_family_resnet_layout(&r->net, &r->shape, max_batch, r->forward_only, NULL);
  r->act_mem = be->alloc(act_bytes);
  r->host_losses = g_new(float, max_batch);
  r->host_img =
      g_new(float, (size_t)max_batch * cfg->image_channels * cfg->image_size * cfg->image_size);
  GError *local = NULL;
  if (!cohort_model_alloc_tables(m, &local) && local->domain == COHORT_CONFIG_ERROR) {
    g_propagate_error(error, local); /* the fine-tuning keys do not fit the model */
    cohort_model_free(m);
    return NULL;
  }
  g_clear_error(&local);
  if (!m->params || (!r->forward_only && !m->grads) || !r->act_mem) {
    g_set_error(error, cohort_resnet_error_quark(), 1,
                "ResNet model: out of %s memory for %zu parameters and %.1f MiB of activations "
                "(batch %d of %d×%d images); allowed: a smaller model or batch",
                be->name, m->n_params, act_bytes / 1048576.0, max_batch, cfg->image_size,
                cfg->image_size);
    cohort_model_free(m);
    return NULL;
  }
  move_offsets(r);
  cohort_family_resnet_layout(&r->net, &r->shape, max_batch, r->forward_only, r->act_mem);
  m->act_bytes = act_bytes;
  g_autofree float *ones = g_new(float, r->net.n_bn);
  for (int i = 0; i < r->net.n_bn; i++)
    ones[i] = 1.0f;
  be->upload(r->net.ones, ones, (size_t)r->net.n_bn * sizeof(float));
  return m;
}

static const CohortDataFormat resnet_formats[] = {COHORT_DATA_IMAGES};

const CohortModelClass cohort_resnet_class = {
    .name = "resnet",
    .title = "ResNet image classifier (BatchNorm)",
    .formats = resnet_formats,
    .n_formats = G_N_ELEMENTS(resnet_formats),
    .family = &cohort_family_resnet,
    .create = resnet_create,
    .import_weights = cohort_resnet_import,
    .check_teacher = cohort_distill_check_images,
    .distill_new = cohort_logits_distill_new,
    .frozen_layout = TRUE,
};

/* The DiT family: its tensor table, activations, initialisation and registry entry. */
#include "engine/models/dit-private.h"

#include <math.h>
#include <string.h>

#include "data/augment.h"
#include "engine/base/error.h"
#include "engine/model/distill.h"
#include "engine/model/rng.h"
#include "engine/models/vae.h"

/* clang-format off */
G_DEFINE_QUARK(cohort-dit-error-quark, cohort_dit_error)
/* clang-format on */

static const char *const head_names[DT_HEAD_COUNT] = {
    "x_embedder.proj.weight",
    "x_embedder.proj.bias",
    "t_embedder.mlp.0.weight",
    "t_embedder.mlp.0.bias",
    "t_embedder.mlp.2.weight",
    "t_embedder.mlp.2.bias",
    "y_embedder.embedding_table.weight",
};
static const char *const block_names[DB_COUNT] = {
    "attn.qkv.weight",         "attn.qkv.bias",  "attn.proj.weight",
    "attn.proj.bias",          "mlp.fc1.weight", "mlp.fc1.bias",
    "mlp.fc2.weight",          "mlp.fc2.bias",   "adaLN_modulation.1.weight",
    "adaLN_modulation.1.bias",
};
static const char *const final_names[DF_COUNT] = {
    "final_layer.linear.weight",
    "final_layer.linear.bias",
    "final_layer.adaLN_modulation.1.weight",
    "final_layer.adaLN_modulation.1.bias",
};

static void add(GArray *arr, char *name, int ndim, const int *shape, int layer, size_t *off)
{
  CohortTensorInfo t = {.name = name, .ndim = ndim, .layer = layer, .offset = *off, .numel = 1};
  for (int d = 0; d < ndim; d++) {
    t.shape[d] = shape[d];
    t.numel *= (size_t)shape[d];
  }
  /* Weight decay on matrices and the patch embedding, not on biases or the label table
   * (an embedding, decayed as GPT's are). */
  t.decay = ndim >= 2;
  *off += t.numel;
  g_array_append_val(arr, t);
}

static void build_tables(Dit *d)
{
  const CohortDitShape *s = &d->shape;
  int C = s->hidden, P = s->patch, K = d->k_patch;
  GArray *arr = g_array_new(FALSE, TRUE, sizeof(CohortTensorInfo));
  size_t off = 0;
  /* The embedders first: their gradients are final only at the very end of backward (every
   * block reads c), so they belong in the last bucket, at the lowest offsets. */
  const int head_shapes[DT_HEAD_COUNT][5] = {
      {4, C, s->channels, P, P},  {1, C}, {2, C, DIT_FREQ_DIM}, {1, C}, {2, C, C}, {1, C},
      {2, s->num_classes + 1, C},
  };
  for (int i = 0; i < DT_HEAD_COUNT; i++)
    add(arr, g_strdup(head_names[i]), head_shapes[i][0], head_shapes[i] + 1, -1, &off);
  for (int l = 0; l < s->n_layer; l++) {
    const int shapes[DB_COUNT][3] = {
        {2, 3 * C, C}, {1, 3 * C},    {2, C, C}, {1, C},        {2, 4 * C, C},
        {1, 4 * C},    {2, C, 4 * C}, {1, C},    {2, 6 * C, C}, {1, 6 * C},
    };
    for (int p = 0; p < DB_COUNT; p++)
      add(arr, g_strdup_printf("blocks.%d.%s", l, block_names[p]), shapes[p][0], shapes[p] + 1, l,
          &off);
  }
  const int final_shapes[DF_COUNT][3] = {{2, K, C}, {1, K}, {2, 2 * C, C}, {1, 2 * C}};
  for (int p = 0; p < DF_COUNT; p++)
    add(arr, g_strdup(final_names[p]), final_shapes[p][0], final_shapes[p] + 1, s->n_layer, &off);
  d->base.n_tensors = arr->len;
  d->base.tensors = (CohortTensorInfo *)g_array_free(arr, FALSE);
  /* nn.Linear weights, [out, in]: LoRA targets (finetune lora); not the patch embedding (a
   * convolution) nor the label table */
  for (guint i = 0; i < d->base.n_tensors; i++)
    if (d->base.tensors[i].ndim == 2 && i != DT_Y_TABLE)
      d->base.tensors[i].adapt = COHORT_ADAPT_LINEAR;
  d->base.n_params = off;

  /* pos_embed: a fixed (requires_grad=False) parameter in the reference, so it is in the state
   * dict; here a buffer, exported under the same name. */
  CohortTensorInfo *pos = g_new0(CohortTensorInfo, 1);
  pos->name = g_strdup("pos_embed");
  pos->ndim = 3;
  pos->shape[0] = 1;
  pos->shape[1] = d->T;
  pos->shape[2] = C;
  pos->numel = (size_t)d->T * C;
  d->base.buffers = pos;
  d->base.n_buffers = 1;
  d->base.n_buffer_floats = pos->numel;
}

/* Carves the activations out of one allocation: the first pass (base NULL) only counts. */
static size_t layout_acts(Dit *d, char *base)
{
  const CohortDitShape *s = &d->shape;
  size_t B = (size_t)d->base.max_batch, T = (size_t)d->T, N = B * T, C = (size_t)s->hidden;
  size_t img = B * (size_t)s->channels * s->image_size * s->image_size;
  size_t K = (size_t)d->k_patch, NH = (size_t)s->n_head;
  size_t used = 0;
#define TAKE(ptr, count, type)                                                                     \
  do {                                                                                             \
    size_t bytes_ = ((count) * sizeof(type) + 63) / 64 * 64;                                       \
    if (base)                                                                                      \
      (ptr) = (type *)(base + used);                                                               \
    used += bytes_;                                                                                \
  } while (0)
  TAKE(d->img, img, float);
  TAKE(d->target, img, float);
  TAKE(d->t, B, float);
  TAKE(d->labels, B, int);
  TAKE(d->tokens_in, N * K, float);
  TAKE(d->x0, N * C, float);
  TAKE(d->tfreq, B * DIT_FREQ_DIM, float);
  TAKE(d->th, B * C, float);
  TAKE(d->ths, B * C, float);
  TAKE(d->temb, B * C, float);
  TAKE(d->c, B * C, float);
  TAKE(d->sc, B * C, float);
  for (int l = 0; l < s->n_layer; l++) {
    DitBlockActs *a = &d->blocks[l];
    if (d->forward_only && l > 0) {
      *a = d->blocks[0];
      continue;
    }
    TAKE(a->mod, B * 6 * C, float);
    TAKE(a->h1, N * C, float);
    TAKE(a->mean1, N, float);
    TAKE(a->rstd1, N, float);
    TAKE(a->m1, N * C, float);
    TAKE(a->qkv, N * 3 * C, float);
    TAKE(a->att, N * C, float);
    TAKE(a->lse, B * NH * T, float);
    TAKE(a->a, N * C, float);
    TAKE(a->x1, N * C, float);
    TAKE(a->h2, N * C, float);
    TAKE(a->mean2, N, float);
    TAKE(a->rstd2, N, float);
    TAKE(a->m2, N * C, float);
    TAKE(a->f, N * 4 * C, float);
    TAKE(a->g, N * 4 * C, float);
    TAKE(a->o, N * C, float);
    TAKE(a->x_out, N * C, float);
  }
  TAKE(d->fmod, B * 2 * C, float);
  TAKE(d->fh, N * C, float);
  TAKE(d->fmean, N, float);
  TAKE(d->frstd, N, float);
  TAKE(d->fm, N * C, float);
  TAKE(d->fout, N * K, float);
  TAKE(d->pred, img, float);
  TAKE(d->losses, B, float);
  if (d->forward_only)
    return used;
  TAKE(d->dres, N * C, float);
  TAKE(d->dh, N * C, float);
  TAKE(d->dm, N * C, float);
  TAKE(d->dbig, N * 4 * C, float);
  TAKE(d->dqkv, N * 3 * C, float);
  TAKE(d->datt, N * C, float);
  TAKE(d->da, N * C, float);
  TAKE(d->dmod, B * 6 * C, float);
  TAKE(d->dsc, B * C, float);
  TAKE(d->dc, B * C, float);
  TAKE(d->dtmp, B * C, float);
  TAKE(d->dimg, img, float);
  TAKE(d->dtok, N * K, float);
#undef TAKE
  return used;
}

/* The reference's 2-D sine-cosine table: for the token in row i, column j of the patch grid,
 * the first half of the channels encodes j and the second half i, each as sin then cos of
 * the position times 1/10000^(k / (D/4)). */
static void pos_embed_2d(float *out, int grid, int C)
{
  int quarter = C / 4;
  for (int i = 0; i < grid; i++)
    for (int j = 0; j < grid; j++) {
      float *row = out + (size_t)(i * grid + j) * C;
      const double pos[2] = {j, i};
      for (int half = 0; half < 2; half++)
        for (int k = 0; k < quarter; k++) {
          double omega = 1.0 / pow(10000.0, (double)k / quarter);
          row[half * 2 * quarter + k] = (float)sin(pos[half] * omega);
          row[half * 2 * quarter + quarter + k] = (float)cos(pos[half] * omega);
        }
    }
}

static void fill_normal(float *dst, size_t n, double std, guint64 seed)
{
  guint64 st = seed;
  for (size_t i = 0; i < n; i += 2) {
    double u1 = (cohort_rng_next(&st) >> 11) * (1.0 / 9007199254740992.0) + 1e-300;
    double u2 = cohort_rng_uniform(&st);
    double r = sqrt(-2.0 * log(u1)) * std;
    dst[i] = (float)(r * cos(2 * G_PI * u2));
    if (i + 1 < n)
      dst[i + 1] = (float)(r * sin(2 * G_PI * u2));
  }
}

/* torch.nn.init.xavier_uniform_: U(-a, a), a = sqrt(6 / (fan_in + fan_out)). */
static void fill_xavier(float *dst, size_t n, int fan_in, int fan_out, guint64 seed)
{
  cohort_rng_fill_uniform(dst, n, sqrt(6.0 / (fan_in + fan_out)), seed);
}

/* The reference's initialize_weights: Xavier-uniform linears (the patch embedding viewed as
 * one), zero biases, N(0, 0.02) for the label table and the timestep MLP, and zeros for every
 * adaLN modulation and the final linear — adaLN-Zero: each block starts as the identity. */
static void dit_init_tensor(CohortModel *m, guint64 seed, guint i, float *dst)
{
  const CohortTensorInfo *t = &m->tensors[i];
  guint64 s = cohort_rng_tensor_seed(seed, i);
  memset(dst, 0, t->numel * sizeof(float));
  if (t->ndim < 2 || strstr(t->name, "adaLN_modulation") ||
      g_str_has_prefix(t->name, "final_layer.linear"))
    return; /* zeros */
  if (g_str_has_prefix(t->name, "t_embedder") || g_str_has_prefix(t->name, "y_embedder")) {
    fill_normal(dst, t->numel, 0.02, s);
  } else {
    int fan_out = t->shape[0];
    int fan_in = (int)(t->numel / (size_t)fan_out);
    fill_xavier(dst, t->numel, fan_in, fan_out, s);
  }
}

static void dit_init_buffers(CohortModel *m)
{
  Dit *d = dit_of(m);
  cohort_dit_fill_pos_embed(d);
}

void cohort_dit_fill_pos_embed(Dit *d)
{
  float *pos = g_new(float, d->base.n_buffer_floats);
  pos_embed_2d(pos, d->shape.image_size / d->shape.patch, d->shape.hidden);
  cohort_model_upload_buffers(&d->base, pos);
  g_free(pos);
}

static void dit_init(CohortModel *m, guint64 seed)
{
  float *host = g_new0(float, m->n_params);
  for (guint i = 0; i < m->n_tensors; i++)
    dit_init_tensor(m, seed, i, host + m->tensors[i].offset);
  m->be->upload(m->params, host, m->n_params * sizeof(float));
  g_free(host);
  dit_init_buffers(m);
}

static void dit_finalize(CohortModel *m)
{
  Dit *d = dit_of(m);
  if (m->be)
    m->be->free(d->act_mem);
  cohort_vae_free(d->vae);
  g_free(d->vae_dir);
  g_free(d->blocks);
  g_free(d->host_img);
  g_free(d->host_target);
  g_free(d->host_t);
  g_free(d->host_losses);
  g_free(d->host_labels);
  g_free(d);
}

static double dit_flops_per_example(const CohortModel *m)
{
  const Dit *d = dit_of(m);
  double C = d->shape.hidden, T = d->T;
  /* 6 per weight per token (forward 2, backward 4) through the blocks and the linear maps on
   * tokens, plus attention's QK^T and AV over all T keys. */
  double per_token = d->shape.n_layer * 12.0 * C * C + 2.0 * d->k_patch * C;
  double attn = d->shape.n_layer * 2.0 * C * T;
  return 6.0 * T * (per_token + attn);
}

const CohortDitShape *cohort_dit_shape(const CohortModel *m)
{
  g_return_val_if_fail(m && m->klass == &cohort_dit_class, NULL);
  return &dit_of(m)->shape;
}

static const CohortMetric dit_metrics[] = {{COHORT_FIELD_VAL_LOSS, 0, 1}};

static const CohortModelOps dit_ops = {
    .forward = cohort_dit_forward_batch,
    .backward = cohort_dit_backward,
    .init_weights = dit_init,
    .init_tensor = dit_init_tensor,
    .init_buffers = dit_init_buffers,
    .eval_batch = cohort_dit_eval_batch,
    .sample = cohort_dit_sample,
    .flops_per_example = dit_flops_per_example,
    .finalize = dit_finalize,
};

gboolean cohort_dit_latent_geometry(const CohortConfig *cfg, const char *source, int *size,
                                    int *channels, GError **error)
{
  const char *src = source ? source : "config";
  *size = cfg->image_size;
  *channels = cfg->image_channels;
  if (!cfg->vae_from || !*cfg->vae_from)
    return TRUE;
  g_autofree char *dir = cohort_resolve_path(cfg->vae_from);
  g_autoptr(GError) local = NULL;
  g_autofree char *folder = cohort_vae_find_folder(dir, &local);
  g_autofree char *cfg_path = folder ? g_build_filename(folder, "config.json", NULL) : NULL;
  CohortVaeConfig vc;
  if (!folder || !cohort_vae_config_read(cfg_path, &vc, &local))
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "%s: key \"vae_from\": %s", src, local->message);
  int f = cohort_vae_downsample_factor(&vc);
  if (cfg->image_size % f != 0)
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "%s: key \"image_size\": %d is not allowed with vae_from %s, whose VAE "
                       "halves images %d times; allowed: a multiple of %d",
                       src, cfg->image_size, cfg->vae_from, vc.n_blocks - 1, f);
  if (cfg->image_channels != vc.in_channels)
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "%s: key \"image_channels\": %d is not allowed with vae_from %s; allowed: "
                       "%d (its in_channels)",
                       src, cfg->image_channels, cfg->vae_from, vc.in_channels);
  *size = cfg->image_size / f;
  *channels = vc.latent_channels;
  return TRUE;
}

static gboolean dit_check_config(const CohortConfig *cfg, const char *source, GError **error)
{
  const char *src = source ? source : "config";
  int size, channels;
  gboolean latent = cfg->vae_from && *cfg->vae_from;
  if (!cohort_dit_latent_geometry(cfg, source, &size, &channels, error))
    return FALSE;
  if (latent && cfg->augment != COHORT_AUGMENT_NONE && cfg->augment != COHORT_AUGMENT_FLIP) {
    g_autofree char *aug = cohort_config_get(cfg, "augment");
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "%s: key \"augment\": \"%s\" is not allowed with vae_from (a crop "
                       "shifts pixels, and the latents are encoded once); allowed: \"none\", "
                       "\"flip\" (the mirrored latent is cached too)",
                       src, aug);
  }
  if (size % cfg->patch_size != 0) {
    if (latent)
      return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                         "%s: key \"patch_size\": %d does not divide the latent size %d "
                         "(image_size %d through vae_from's VAE); allowed: a divisor of %d",
                         src, cfg->patch_size, size, cfg->image_size, size);
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "%s: key \"patch_size\": %d does not divide image_size %d; allowed: a divisor of "
                "image_size",
                src, cfg->patch_size, cfg->image_size);
    return FALSE;
  }
  if (cfg->n_embd % (4 * cfg->n_head) != 0 || cfg->n_embd % 4 != 0) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "%s: key \"n_embd\": %d must be a multiple of 4 (the 2-D position embedding) and "
                "of n_head %d",
                src, cfg->n_embd, cfg->n_head);
    return FALSE;
  }
  return TRUE;
}

static gint64 dit_count_params(const CohortConfig *cfg)
{
  int size, channels;
  if (!cohort_dit_latent_geometry(cfg, NULL, &size, &channels, NULL))
    channels = cfg->image_channels; /* the VAE is unreadable: create() will say why */
  gint64 C = cfg->n_embd, P = cfg->patch_size, Ch = channels;
  gint64 K = Ch * P * P;
  gint64 classes = MAX(cfg->num_classes, 1); /* 0 = from the data, unknown here */
  gint64 head = K * C + C + DIT_FREQ_DIM * C + C + C * C + C + (classes + 1) * C;
  gint64 block = 3 * C * C + 3 * C + C * C + C + 8 * C * C + 5 * C + 6 * C * C + 6 * C;
  gint64 final = K * C + K + 2 * C * C + 2 * C;
  return head + cfg->n_layer * block + final;
}

static size_t dit_act_bytes(const CohortConfig *cfg, int max_batch)
{
  if (cfg->patch_size < 1 || cfg->image_size % cfg->patch_size != 0)
    return 0;
  Dit probe = {.shape = {.n_layer = cfg->n_layer,
                         .n_head = cfg->n_head,
                         .hidden = cfg->n_embd,
                         .image_size = cfg->image_size,
                         .channels = cfg->image_channels,
                         .patch = cfg->patch_size,
                         .num_classes = cfg->num_classes}};
  probe.base.max_batch = max_batch;
  int grid = cfg->image_size / cfg->patch_size;
  probe.T = grid * grid;
  probe.k_patch = cfg->image_channels * cfg->patch_size * cfg->patch_size;
  probe.blocks = g_new0(DitBlockActs, MAX(cfg->n_layer, 1));
  size_t bytes = layout_acts(&probe, NULL);
  g_free(probe.blocks);
  return bytes;
}

static CohortTensorInfo *dit_param_table(const CohortConfig *cfg, guint *n_tensors,
                                         size_t *n_floats)
{
  if (cfg->patch_size < 1 || cfg->image_size % cfg->patch_size != 0)
    return NULL;
  Dit probe = {.shape = {.n_layer = cfg->n_layer,
                         .n_head = cfg->n_head,
                         .hidden = cfg->n_embd,
                         .image_size = cfg->image_size,
                         .channels = cfg->image_channels,
                         .patch = cfg->patch_size,
                         .num_classes = MAX(cfg->num_classes, 1)}};
  int grid = cfg->image_size / cfg->patch_size;
  probe.T = grid * grid;
  probe.k_patch = cfg->image_channels * cfg->patch_size * cfg->patch_size;
  build_tables(&probe);
  cohort_tensor_table_free(probe.base.buffers, probe.base.n_buffers);
  *n_tensors = probe.base.n_tensors;
  *n_floats = probe.base.n_params;
  return probe.base.tensors;
}

static CohortModel *dit_create(const CohortBackend *be, const CohortConfig *cfg, int max_batch,
                               GError **error)
{
  if (!dit_check_config(cfg, NULL, error))
    return NULL;
  if (cfg->num_classes < 0 || max_batch < 1) {
    g_set_error(error, cohort_dit_error_quark(), 0,
                "DiT model: num_classes %d and max_batch %d; allowed: 0 or more, and 1 or more",
                cfg->num_classes, max_batch);
    return NULL;
  }
  int size, channels;
  if (!cohort_dit_latent_geometry(cfg, NULL, &size, &channels, error))
    return NULL;
  Dit *d = g_new0(Dit, 1);
  CohortModel *m = &d->base;
  m->klass = &cohort_dit_class;
  m->ops = &dit_ops;
  m->be = be;
  m->max_batch = max_batch;
  m->metrics = dit_metrics;
  m->n_metrics = G_N_ELEMENTS(dit_metrics);
  m->n_sums = 2; /* squared error summed over examples, examples */
  d->shape = (CohortDitShape){
      .n_layer = cfg->n_layer,
      .n_head = cfg->n_head,
      .hidden = cfg->n_embd,
      .image_size = size,
      .channels = channels,
      .patch = cfg->patch_size,
      .num_classes = cfg->num_classes,
  };
  if (cfg->vae_from && *cfg->vae_from) {
    d->vae_dir = cohort_resolve_path(cfg->vae_from);
    d->pixel_size = cfg->image_size;
  }
  int grid = size / cfg->patch_size;
  d->T = grid * grid;
  d->k_patch = channels * cfg->patch_size * cfg->patch_size;
  d->timestep_logit_normal = cfg->timestep_sampling == COHORT_TIMESTEPS_LOGIT_NORMAL;
  d->timestep_shift = cfg->timestep_shift;
  d->cfg_dropout = cfg->cfg_dropout;
  d->seed = (guint64)cfg->seed;
  d->forward_only = cohort_model_creating_frozen();
  build_tables(d);
  d->blocks = g_new0(DitBlockActs, cfg->n_layer);
  size_t act_bytes = layout_acts(d, NULL);
  d->act_mem = be->alloc(act_bytes);
  size_t img = (size_t)max_batch * channels * size * size;
  d->host_img = g_try_new(float, img);
  d->host_target = g_try_new(float, img);
  d->host_t = g_new(float, max_batch);
  d->host_losses = g_new(float, max_batch);
  d->host_labels = g_new(int, max_batch);
  m->lora_rows = (size_t)max_batch * d->T; /* the blocks' rows; adaLN sees max_batch */
  GError *local = NULL;
  if (!cohort_model_alloc_tables(m, &local) && local->domain == COHORT_CONFIG_ERROR) {
    g_propagate_error(error, local); /* the fine-tuning keys do not fit the model */
    cohort_model_free(m);
    return NULL;
  }
  g_clear_error(&local);
  if (!m->params || (!d->forward_only && !m->grads) || !d->act_mem || !d->host_img ||
      !d->host_target) {
    g_set_error(error, cohort_dit_error_quark(), 1,
                "DiT model: out of %s memory for %zu parameters and %.1f MiB of activations "
                "(batch %d of %d×%d images); allowed: a smaller model or batch",
                be->name, m->n_params, act_bytes / 1048576.0, max_batch, cfg->image_size,
                cfg->image_size);
    cohort_model_free(m);
    return NULL;
  }
  layout_acts(d, d->act_mem);
  m->act_bytes = act_bytes;
  d->xL = cfg->n_layer > 0 ? d->blocks[cfg->n_layer - 1].x_out : d->x0;
  return m;
}

static const CohortDataFormat dit_formats[] = {COHORT_DATA_IMAGES};

const CohortModelClass cohort_dit_class = {
    .name = "dit",
    .title = "Diffusion transformer (images, flow matching)",
    .formats = dit_formats,
    .n_formats = G_N_ELEMENTS(dit_formats),
    .check_config = dit_check_config,
    .count_params = dit_count_params,
    .act_bytes = dit_act_bytes,
    .param_table = dit_param_table,
    .frozen_layout = TRUE,
    .lora_targets = "attn.qkv,attn.proj,mlp.fc1,mlp.fc2,adaLN_modulation.1",
    .create = dit_create,
    .import_weights = cohort_dit_import,
    .import_file = cohort_dit_import_file,
    .check_teacher = cohort_dit_check_teacher,
    .distill_new = cohort_dit_distill_new,
    .copies_blocks = TRUE,
};

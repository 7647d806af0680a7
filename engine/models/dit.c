/* The DiT family: its set-up from the description (engine/families/dit.h), initialisation and
 * registry entry. */
#include "engine/models/dit-private.h"

#include <math.h>
#include <string.h>

#include "data/augment.h"
#include "engine/base/error.h"
#include "engine/model/distill.h"
#include "engine/model/rng.h"
#include "engine/models/text-encoder.h"
#include "engine/models/vae.h"

/* clang-format off */
G_DEFINE_QUARK(cohort-dit-error-quark, cohort_dit_error)
/* clang-format on */

/* The tables of the description (engine/families/dit.h) for the model's shape. */
static void build_tables(Dit *d)
{
  CohortFamilyTables t;
  if (d->text)
    cohort_family_dit_text_tables(&d->shape, &t);
  else
    cohort_family_dit_tables(&d->shape, &t);
  cohort_model_take_tables(&d->base, &t);
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

void cohort_dit_fill_normal(float *dst, size_t n, double std, guint64 seed)
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
  if (dit_of(m)->text) {
    cohort_dit_text_init_tensor(dit_of(m), seed, i, dst);
    return;
  }
  memset(dst, 0, t->numel * sizeof(float));
  if (t->ndim < 2 || strstr(t->name, "adaLN_modulation") ||
      g_str_has_prefix(t->name, "final_layer.linear"))
    return; /* zeros */
  if (g_str_has_prefix(t->name, "t_embedder") || g_str_has_prefix(t->name, "y_embedder")) {
    cohort_dit_fill_normal(dst, t->numel, 0.02, s);
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
  g_free(d->acts.blocks);
  g_free(d->pacts);
  g_free(d->host_text);
  g_free(d->host_klen);
  cohort_text_encoder_free(d->encoder);
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

/* The text layout: the same objective on captions, samples of prompts. */
static const CohortModelOps dit_text_ops = {
    .forward = cohort_dit_forward_batch,
    .backward = cohort_dit_backward,
    .init_weights = dit_init,
    .init_tensor = dit_init_tensor,
    .init_buffers = dit_init_buffers,
    .eval_batch = cohort_dit_eval_batch,
    .sample = cohort_dit_text_sample,
    .flops_per_example = dit_flops_per_example,
    .finalize = dit_finalize,
};

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

/* The rules that read vae_from's VAE (the rest are the description's, engine/families/dit.c):
 * it fits image_size and image_channels, and the patch divides the latents. */
static gboolean dit_check_latents(const CohortConfig *cfg, const char *source, GError **error)
{
  int size, channels;
  if (!cohort_dit_latent_geometry(cfg, source, &size, &channels, error))
    return FALSE;
  if (cfg->vae_from && *cfg->vae_from && size % cfg->patch_size != 0)
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "%s: key \"patch_size\": %d does not divide the latent size %d "
                       "(image_size %d through vae_from's VAE); allowed: a divisor of %d",
                       source ? source : "config", cfg->patch_size, size, cfg->image_size, size);
  return TRUE;
}

/* The DiT sees vae_from's latents: their size and channels are the shape's. */
static void dit_runtime_shape(const CohortConfig *cfg, CohortConfig *shape)
{
  int size, channels;
  if (cohort_dit_latent_geometry(cfg, NULL, &size, &channels, NULL)) {
    shape->image_size = size;
    shape->image_channels = channels;
  }
}

/* The text layout's activations in d->act_mem, each block's PixArt activations in its part of
 * tacts.blocks, and the host scratch of a batch's text. */
static void text_layout(Dit *d, int max_batch, CohortActKeep keep)
{
  const CohortDitShape *s = &d->shape;
  cohort_family_dit_text_layout(&d->tacts, s, max_batch, keep, d->act_mem);
  d->pshape = cohort_family_dit_pixart_shape(s);
  d->pacts = g_new0(CohortPixartActs, MAX(s->n_layer, 1));
  size_t nc = (size_t)max_batch * d->T * s->hidden;
  /* activation_checkpointing: every block's activations in the one set, its output apart */
  for (int l = 0; l < s->n_layer; l++) {
    size_t set = d->checkpoint ? 0 : (size_t)l;
    cohort_pixart_acts_layout(&d->pacts[l], d->tacts.blocks + set * d->tacts.block_floats,
                              &d->pshape, max_batch, d->T, s->text_tokens);
    if (d->checkpoint)
      d->pacts[l].out = d->tacts.block_out + (size_t)l * nc;
  }
  d->host_text = g_new0(float, (size_t)max_batch * s->text_tokens * s->text_dim);
  d->host_klen = g_new0(int, max_batch);
}

static CohortModel *dit_create(const CohortBackend *be, const CohortConfig *cfg, int max_batch,
                               GError **error)
{
  if (!cohort_family_dit.check_config(cfg, NULL, error) || !dit_check_latents(cfg, NULL, error))
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
      .text_dim = cohort_family_dit_text_width(cfg),
      .text_tokens = cfg->max_text_tokens,
  };
  d->text = d->shape.text_dim > 0;
  if (d->text)
    m->ops = &dit_text_ops;
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
  CohortActKeep keep = cohort_family_act_keep(cfg, d->forward_only);
  d->checkpoint = keep == COHORT_ACTS_CHECKPOINT;
  d->acts_block = -1;
  build_tables(d);
  d->acts.blocks = g_new0(CohortDitBlockActs, cfg->n_layer);
  size_t act_bytes =
      d->text ? cohort_family_dit_text_layout(&d->tacts, &d->shape, max_batch, keep, NULL)
              : cohort_family_dit_layout(&d->acts, &d->shape, max_batch, keep, NULL);
  d->act_mem = be->alloc(act_bytes);
  size_t img = (size_t)max_batch * channels * size * size;
  d->host_img = g_try_new(float, img);
  d->host_target = g_try_new(float, img);
  d->host_t = g_new(float, max_batch);
  d->host_losses = g_new(float, max_batch);
  d->host_labels = g_new(int, max_batch);
  /* the blocks' rows (adaLN sees max_batch); the text layout's caption projection and attn2's
   * keys and values run on max_text_tokens rows an example */
  m->lora_rows = (size_t)max_batch * MAX(d->T, d->text ? d->shape.text_tokens : 0);
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
  m->act_bytes = act_bytes;
  if (d->text) {
    text_layout(d, max_batch, keep);
    return m;
  }
  cohort_family_dit_layout(&d->acts, &d->shape, max_batch, keep, d->act_mem);
  d->xL = cfg->n_layer > 0 ? d->acts.blocks[cfg->n_layer - 1].x_out : d->acts.x0;
  return m;
}

static const CohortDataFormat dit_formats[] = {COHORT_DATA_IMAGES};

const CohortModelClass cohort_dit_class = {
    .name = "dit",
    .title = "Diffusion transformer (images, flow matching)",
    .formats = dit_formats,
    .n_formats = G_N_ELEMENTS(dit_formats),
    .check_config = dit_check_latents,
    .family = &cohort_family_dit,
    .runtime_shape = dit_runtime_shape,
    .frozen_layout = TRUE,
    .create = dit_create,
    .import_weights = cohort_dit_import,
    .import_file = cohort_dit_import_file,
    .check_teacher = cohort_dit_check_teacher,
    .distill_new = cohort_dit_distill_new,
    .copies_blocks = TRUE,
};

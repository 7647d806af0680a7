/* The "dit" family's description (see dit.h). */
#include "engine/families/dit.h"

#include "data/augment.h" /* CohortAugment */

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

CohortDitShape cohort_family_dit_shape(const CohortConfig *cfg)
{
  return (CohortDitShape){.n_layer = cfg->n_layer,
                          .n_head = cfg->n_head,
                          .hidden = cfg->n_embd,
                          .image_size = cfg->image_size,
                          .channels = cfg->image_channels,
                          .patch = cfg->patch_size,
                          .num_classes = cfg->num_classes,
                          .text_dim = cohort_family_dit_text_width(cfg),
                          .text_tokens = cfg->max_text_tokens};
}

gboolean cohort_family_dit_tables(const CohortDitShape *s, CohortFamilyTables *out)
{
  *out = (CohortFamilyTables){0};
  if (s->patch < 1 || s->image_size % s->patch != 0)
    return FALSE;
  int C = s->hidden, P = s->patch, K = s->channels * P * P, grid = s->image_size / P;
  CohortTableBuilder b;
  cohort_table_builder_init(&b);
  size_t *off = &b.param_floats;
  /* The embedders first: their gradients are final only at the very end of backward (every
   * block reads c), so they belong in the last bucket, at the lowest offsets. */
  const int head_shapes[DT_HEAD_COUNT][5] = {
      {4, C, s->channels, P, P},  {1, C}, {2, C, DIT_FREQ_DIM}, {1, C}, {2, C, C}, {1, C},
      {2, s->num_classes + 1, C},
  };
  for (int i = 0; i < DT_HEAD_COUNT; i++)
    cohort_table_add(b.params, g_strdup(head_names[i]), head_shapes[i][0], head_shapes[i] + 1, -1,
                     off);
  const int shapes[DB_COUNT][3] = {
      {2, 3 * C, C}, {1, 3 * C},    {2, C, C}, {1, C},        {2, 4 * C, C},
      {1, 4 * C},    {2, C, 4 * C}, {1, C},    {2, 6 * C, C}, {1, 6 * C},
  };
  for (int l = 0; l < s->n_layer; l++)
    for (int p = 0; p < DB_COUNT; p++)
      cohort_table_add(b.params, g_strdup_printf("blocks.%d.%s", l, block_names[p]), shapes[p][0],
                       shapes[p] + 1, l, off);
  const int final_shapes[DF_COUNT][3] = {{2, K, C}, {1, K}, {2, 2 * C, C}, {1, 2 * C}};
  for (int p = 0; p < DF_COUNT; p++)
    cohort_table_add(b.params, g_strdup(final_names[p]), final_shapes[p][0], final_shapes[p] + 1,
                     s->n_layer, off);
  /* nn.Linear weights, [out, in], take adapters; not the patch embedding (a convolution) nor
   * the label table */
  for (guint i = 0; i < b.params->len; i++) {
    CohortTensorInfo *t = &g_array_index(b.params, CohortTensorInfo, i);
    if (t->ndim == 2 && i != DT_Y_TABLE)
      t->adapt = COHORT_ADAPT_LINEAR;
  }
  /* pos_embed: a fixed (requires_grad=False) parameter in the reference, so it is in the state
   * dict; here a buffer, exported under the same name. */
  CohortTensorInfo *pos = cohort_table_add(b.buffers, g_strdup("pos_embed"), 3,
                                           (int[]){1, grid * grid, C}, 0, &b.buffer_floats);
  pos->decay = FALSE;
  cohort_table_builder_finish(&b, out);
  return TRUE;
}

size_t cohort_family_dit_layout(CohortDitActs *a, const CohortDitShape *s, int max_batch,
                                CohortActKeep keep, char *base)
{
  gboolean forward_only = keep == COHORT_ACTS_FORWARD;
  size_t grid = (size_t)(s->image_size / s->patch);
  size_t B = (size_t)max_batch, T = grid * grid, N = B * T, C = (size_t)s->hidden;
  size_t img = B * (size_t)s->channels * s->image_size * s->image_size;
  size_t K = (size_t)s->channels * s->patch * s->patch, NH = (size_t)s->n_head;
  CohortActCarver k = {.base = base};
  COHORT_ACT_TAKE(&k, a->img, img, float);
  COHORT_ACT_TAKE(&k, a->target, img, float);
  COHORT_ACT_TAKE(&k, a->t, B, float);
  COHORT_ACT_TAKE(&k, a->labels, B, int);
  COHORT_ACT_TAKE(&k, a->tokens_in, N * K, float);
  COHORT_ACT_TAKE(&k, a->x0, N * C, float);
  COHORT_ACT_TAKE(&k, a->tfreq, B * DIT_FREQ_DIM, float);
  COHORT_ACT_TAKE(&k, a->th, B * C, float);
  COHORT_ACT_TAKE(&k, a->ths, B * C, float);
  COHORT_ACT_TAKE(&k, a->temb, B * C, float);
  COHORT_ACT_TAKE(&k, a->c, B * C, float);
  COHORT_ACT_TAKE(&k, a->sc, B * C, float);
  CohortDitBlockActs counted;
  for (int l = 0; l < s->n_layer; l++) {
    CohortDitBlockActs *b = a->blocks ? &a->blocks[l] : &counted;
    if (keep != COHORT_ACTS_ALL && l > 0) {
      *b = a->blocks ? a->blocks[0] : counted;
      if (keep == COHORT_ACTS_CHECKPOINT)
        COHORT_ACT_TAKE(&k, b->x_out, N * C, float);
      continue;
    }
    COHORT_ACT_TAKE(&k, b->mod, B * 6 * C, float);
    COHORT_ACT_TAKE(&k, b->h1, N * C, float);
    COHORT_ACT_TAKE(&k, b->mean1, N, float);
    COHORT_ACT_TAKE(&k, b->rstd1, N, float);
    COHORT_ACT_TAKE(&k, b->m1, N * C, float);
    COHORT_ACT_TAKE(&k, b->qkv, N * 3 * C, float);
    COHORT_ACT_TAKE(&k, b->att, N * C, float);
    COHORT_ACT_TAKE(&k, b->lse, B * NH * T, float);
    COHORT_ACT_TAKE(&k, b->a, N * C, float);
    COHORT_ACT_TAKE(&k, b->x1, N * C, float);
    COHORT_ACT_TAKE(&k, b->h2, N * C, float);
    COHORT_ACT_TAKE(&k, b->mean2, N, float);
    COHORT_ACT_TAKE(&k, b->rstd2, N, float);
    COHORT_ACT_TAKE(&k, b->m2, N * C, float);
    COHORT_ACT_TAKE(&k, b->f, N * 4 * C, float);
    COHORT_ACT_TAKE(&k, b->g, N * 4 * C, float);
    COHORT_ACT_TAKE(&k, b->o, N * C, float);
    COHORT_ACT_TAKE(&k, b->x_out, N * C, float);
  }
  COHORT_ACT_TAKE(&k, a->fmod, B * 2 * C, float);
  COHORT_ACT_TAKE(&k, a->fh, N * C, float);
  COHORT_ACT_TAKE(&k, a->fmean, N, float);
  COHORT_ACT_TAKE(&k, a->frstd, N, float);
  COHORT_ACT_TAKE(&k, a->fm, N * C, float);
  COHORT_ACT_TAKE(&k, a->fout, N * K, float);
  COHORT_ACT_TAKE(&k, a->pred, img, float);
  COHORT_ACT_TAKE(&k, a->losses, B, float);
  if (forward_only)
    return k.used;
  COHORT_ACT_TAKE(&k, a->dres, N * C, float);
  COHORT_ACT_TAKE(&k, a->dh, N * C, float);
  COHORT_ACT_TAKE(&k, a->dm, N * C, float);
  COHORT_ACT_TAKE(&k, a->dbig, N * 4 * C, float);
  COHORT_ACT_TAKE(&k, a->dqkv, N * 3 * C, float);
  COHORT_ACT_TAKE(&k, a->datt, N * C, float);
  COHORT_ACT_TAKE(&k, a->da, N * C, float);
  COHORT_ACT_TAKE(&k, a->dmod, B * 6 * C, float);
  COHORT_ACT_TAKE(&k, a->dsc, B * C, float);
  COHORT_ACT_TAKE(&k, a->dc, B * C, float);
  COHORT_ACT_TAKE(&k, a->dtmp, B * C, float);
  COHORT_ACT_TAKE(&k, a->dimg, img, float);
  COHORT_ACT_TAKE(&k, a->dtok, N * K, float);
  return k.used;
}

/* The text layout's rules: an encoder whose width is known, and what the layout does not do. */
static gboolean dit_check_text(const CohortConfig *cfg, const char *src, GError **error)
{
  if (cohort_family_dit_text_width(cfg) < 1) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "%s: key \"text_encoder\": \"%s\" has no readable config.json with a "
                "hidden_size; allowed: \"builtin\" or a Hugging Face Llama, Mistral, Qwen2 or "
                "Qwen3 folder",
                src, cfg->text_encoder);
    return FALSE;
  }
  const char *refused = cfg->teacher_from && *cfg->teacher_from ? "teacher_from" : NULL;
  if (refused) {
    g_autofree char *value = cohort_config_get(cfg, refused);
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "%s: key \"%s\": %s is not allowed with text_encoder (the text layout does not "
                "have it yet); allowed: its default",
                src, refused, value);
    return FALSE;
  }
  return TRUE;
}

/* The rules that need only the config; those that read vae_from's VAE are the class's
 * (engine/models/dit.c). */
static gboolean dit_check_config(const CohortConfig *cfg, const char *source, GError **error)
{
  const char *src = source ? source : "config";
  gboolean latent = cfg->vae_from && *cfg->vae_from;
  if (latent && cfg->augment != COHORT_AUGMENT_NONE && cfg->augment != COHORT_AUGMENT_FLIP) {
    g_autofree char *aug = cohort_config_get(cfg, "augment");
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "%s: key \"augment\": \"%s\" is not allowed with vae_from (a crop shifts pixels, "
                "and the latents are encoded once); allowed: \"none\", \"flip\" (the mirrored "
                "latent is cached too)",
                src, aug);
    return FALSE;
  }
  if (!latent && cfg->image_size % cfg->patch_size != 0) {
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
  return !cfg->text_encoder || !*cfg->text_encoder || dit_check_text(cfg, src, error);
}

static gboolean dit_tables(const CohortConfig *cfg, CohortFamilyTables *out)
{
  CohortDitShape s = cohort_family_dit_shape(cfg);
  if (cfg->text_encoder && *cfg->text_encoder)
    return cohort_family_dit_text_tables(&s, out);
  return cohort_family_dit_tables(&s, out);
}

static size_t dit_act_bytes(const CohortConfig *cfg, int max_batch, gboolean forward_only)
{
  CohortDitShape s = cohort_family_dit_shape(cfg);
  if (s.patch < 1 || s.image_size % s.patch != 0)
    return 0;
  if (s.text_dim > 0) {
    CohortDitTextActs t = {0};
    return cohort_family_dit_text_layout(&t, &s, max_batch,
                                         cohort_family_act_keep(cfg, forward_only), NULL);
  }
  CohortDitActs a = {0};
  return cohort_family_dit_layout(&a, &s, max_batch, cohort_family_act_keep(cfg, forward_only),
                                  NULL);
}

/* engine/models/dit-forward.c: a linear's weight is [out, in] (forward x [rows, in] by its
 * transpose; backward dy [rows, out] by it and by x). Per token (N = batch · patches): the
 * patch embedding K → C, the block's C → 3C, C → C, C → 4C, 4C → C and the final C → K; per
 * image: the timestep MLP 256 → C → C and the modulations C → 6C and C → 2C. The text layout
 * (text_encoder) has the same per-token products; its caption rows (batch · max_text_tokens,
 * the encoder's width D → C, then C → C for the keys and values) are counted only as far as
 * these bound them, which holds while max_text_tokens · D stays under patches · 4C. */
static void dit_gemm_operands(const CohortConfig *cfg, int max_batch, size_t *a, size_t *b)
{
  CohortDitShape s = cohort_family_dit_shape(cfg);
  if (s.patch < 1 || s.image_size % s.patch != 0)
    return;
  size_t side = (size_t)(s.image_size / s.patch), C = s.hidden, B = max_batch;
  size_t N = B * side * side, K = (size_t)s.channels * s.patch * s.patch;
  size_t token_in = MAX(4 * C, K), image_in = MAX((size_t)DIT_FREQ_DIM, C);
  *a = MAX(N * token_in, B * MAX(6 * C, (size_t)DIT_FREQ_DIM));
  *b = MAX(MAX(6 * C * C, MAX(K * C, (size_t)DIT_FREQ_DIM * C)), MAX(N * token_in, B * image_in));
}

/* The text layout adapts every block's attention (attn2, the cross-attention, among them) and
 * feed-forward, as PixArt LoRA trainings do; it has no per-block modulation linear to adapt
 * (adaLN-single is shared). */
static const char *dit_lora_targets_of(const CohortConfig *cfg)
{
  if (cfg->text_encoder && *cfg->text_encoder)
    return "to_q,to_k,to_v,to_out.0,ff.net.0.proj,ff.net.2";
  return cohort_family_dit.lora_targets;
}

const CohortFamilyDesc cohort_family_dit = {
    .name = "dit",
    .lora_targets = "attn.qkv,attn.proj,mlp.fc1,mlp.fc2,adaLN_modulation.1",
    .lora_targets_of = dit_lora_targets_of,
    .check_config = dit_check_config,
    .tables = dit_tables,
    .gemm_operands = dit_gemm_operands,
    .act_bytes = dit_act_bytes,
    .activation_checkpointing = TRUE,
};

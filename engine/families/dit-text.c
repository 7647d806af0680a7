/* The dit family's text layout (text_encoder set): diffusers' PixArtTransformer2DModel, its
 * tables and activations (engine/families/dit.h, docs/t2i-design.md). */
#include "engine/families/dit.h"

#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <sys/stat.h>

/* Files above this are not a config.json. */
#define CONFIG_JSON_MAX (1 << 20)

static const char *const head_names[DX_HEAD_COUNT] = {
    "pos_embed.proj.weight",
    "pos_embed.proj.bias",
    "adaln_single.emb.timestep_embedder.linear_1.weight",
    "adaln_single.emb.timestep_embedder.linear_1.bias",
    "adaln_single.emb.timestep_embedder.linear_2.weight",
    "adaln_single.emb.timestep_embedder.linear_2.bias",
    "adaln_single.linear.weight",
    "adaln_single.linear.bias",
    "caption_projection.linear_1.weight",
    "caption_projection.linear_1.bias",
    "caption_projection.linear_2.weight",
    "caption_projection.linear_2.bias",
};
static const char *const final_names[DXF_COUNT] = {"scale_shift_table", "proj_out.weight",
                                                   "proj_out.bias"};

CohortPixartShape cohort_family_dit_pixart_shape(const CohortDitShape *s)
{
  /* the caption is projected to C before the blocks, so attn2 reads width C */
  return (CohortPixartShape){
      .hidden = s->hidden, .n_head = s->n_head, .cross_dim = s->hidden, .ff_inner = 4 * s->hidden};
}

gboolean cohort_family_dit_text_tables(const CohortDitShape *s, CohortFamilyTables *out)
{
  *out = (CohortFamilyTables){0};
  if (s->patch < 1 || s->image_size % s->patch != 0 || s->text_dim < 1)
    return FALSE;
  int C = s->hidden, P = s->patch, K = s->channels * P * P, grid = s->image_size / P;
  int D = s->text_dim;
  CohortTableBuilder b;
  cohort_table_builder_init(&b);
  size_t *off = &b.param_floats;
  /* the embedders first (lowest offsets, the last bucket): every block reads their outputs */
  const int head_shapes[DX_HEAD_COUNT][5] = {
      {4, C, s->channels, P, P},
      {1, C},
      {2, C, DIT_FREQ_DIM},
      {1, C},
      {2, C, C},
      {1, C},
      {2, 6 * C, C},
      {1, 6 * C},
      {2, C, D},
      {1, C},
      {2, C, C},
      {1, C},
  };
  for (int i = 0; i < DX_HEAD_COUNT; i++)
    cohort_table_add(b.params, g_strdup(head_names[i]), head_shapes[i][0], head_shapes[i] + 1, -1,
                     off);
  CohortPixartShape ps = cohort_family_dit_pixart_shape(s);
  for (int l = 0; l < s->n_layer; l++)
    for (int p = 0; p < PB_COUNT; p++) {
      int dims[2];
      int rank = cohort_pixart_block_dims(&ps, p, dims);
      CohortTensorInfo *t = cohort_table_add(
          b.params, g_strdup_printf("transformer_blocks.%d.%s", l, cohort_pixart_block_name(p)),
          rank, dims, l, off);
      t->decay = t->decay && p != PB_TABLE; /* a modulation offset, not a weight matrix */
    }
  const int final_shapes[DXF_COUNT][3] = {{2, 2, C}, {2, K, C}, {1, K}};
  for (int p = 0; p < DXF_COUNT; p++) {
    CohortTensorInfo *t = cohort_table_add(b.params, g_strdup(final_names[p]), final_shapes[p][0],
                                           final_shapes[p] + 1, s->n_layer, off);
    t->decay = t->decay && p != DXF_TABLE;
  }
  /* nn.Linear weights take adapters (PEFT's LoRA layers); not the patch embedding (a
   * convolution) nor the scale-shift tables, which are added, not multiplied */
  for (guint i = 0; i < b.params->len; i++) {
    CohortTensorInfo *t = &g_array_index(b.params, CohortTensorInfo, i);
    if (t->ndim == 2 && !g_str_has_suffix(t->name, "scale_shift_table"))
      t->adapt = COHORT_ADAPT_LINEAR;
  }
  /* diffusers' PatchEmbed keeps its sine-cosine table as a buffer; here it is exported under
   * its name (diffusers does not persist it: docs/t2i-design.md) */
  CohortTensorInfo *pos = cohort_table_add(b.buffers, g_strdup("pos_embed.pos_embed"), 3,
                                           (int[]){1, grid * grid, C}, 0, &b.buffer_floats);
  pos->decay = FALSE;
  cohort_table_builder_finish(&b, out);
  return TRUE;
}

size_t cohort_family_dit_text_layout(CohortDitTextActs *a, const CohortDitShape *s, int max_batch,
                                     CohortActKeep keep, char *base)
{
  size_t grid = (size_t)(s->image_size / s->patch);
  size_t B = (size_t)max_batch, T = grid * grid, N = B * T, C = (size_t)s->hidden;
  size_t M = (size_t)s->text_tokens, D = (size_t)s->text_dim;
  size_t img = B * (size_t)s->channels * s->image_size * s->image_size;
  size_t K = (size_t)s->channels * s->patch * s->patch;
  CohortPixartShape ps = cohort_family_dit_pixart_shape(s);
  a->block_floats = cohort_pixart_acts_floats(&ps, max_batch, (int)T, (int)M);
  CohortActCarver k = {.base = base};
  COHORT_ACT_TAKE(&k, a->img, img, float);
  COHORT_ACT_TAKE(&k, a->target, img, float);
  COHORT_ACT_TAKE(&k, a->t, B, float);
  COHORT_ACT_TAKE(&k, a->text, B * M * D, float);
  COHORT_ACT_TAKE(&k, a->klen, B, int);
  COHORT_ACT_TAKE(&k, a->tokens_in, N * K, float);
  COHORT_ACT_TAKE(&k, a->x0, N * C, float);
  COHORT_ACT_TAKE(&k, a->tfreq, B * DIT_FREQ_DIM, float);
  COHORT_ACT_TAKE(&k, a->th, B * C, float);
  COHORT_ACT_TAKE(&k, a->ths, B * C, float);
  COHORT_ACT_TAKE(&k, a->emb, B * C, float);
  COHORT_ACT_TAKE(&k, a->semb, B * C, float);
  COHORT_ACT_TAKE(&k, a->temb, B * 6 * C, float);
  COHORT_ACT_TAKE(&k, a->cap1, B * M * C, float);
  COHORT_ACT_TAKE(&k, a->capg, B * M * C, float);
  COHORT_ACT_TAKE(&k, a->ctx, B * M * C, float);
  if (keep == COHORT_ACTS_CHECKPOINT) {
    COHORT_ACT_TAKE(&k, a->blocks, a->block_floats, float);
    COHORT_ACT_TAKE(&k, a->block_out, (size_t)s->n_layer * N * C, float);
  } else {
    COHORT_ACT_TAKE(&k, a->blocks, (size_t)s->n_layer * a->block_floats, float);
    a->block_out = NULL;
  }
  COHORT_ACT_TAKE(&k, a->fmod, B * 2 * C, float);
  COHORT_ACT_TAKE(&k, a->fh, N * C, float);
  COHORT_ACT_TAKE(&k, a->fmean, N, float);
  COHORT_ACT_TAKE(&k, a->frstd, N, float);
  COHORT_ACT_TAKE(&k, a->fm, N * C, float);
  COHORT_ACT_TAKE(&k, a->fout, N * K, float);
  COHORT_ACT_TAKE(&k, a->pred, img, float);
  COHORT_ACT_TAKE(&k, a->losses, B, float);
  COHORT_ACT_TAKE(&k, a->dtemb, B * 6 * C, float);
  COHORT_ACT_TAKE(&k, a->dsemb, B * C, float);
  COHORT_ACT_TAKE(&k, a->demb, B * C, float);
  COHORT_ACT_TAKE(&k, a->dtmp, B * C, float);
  COHORT_ACT_TAKE(&k, a->dctx, B * M * C, float);
  COHORT_ACT_TAKE(&k, a->dcap, B * M * C, float);
  COHORT_ACT_TAKE(&k, a->dfmod, B * 2 * C, float);
  COHORT_ACT_TAKE(&k, a->dres, N * C, float);
  COHORT_ACT_TAKE(&k, a->dh, N * C, float);
  COHORT_ACT_TAKE(&k, a->dm, N * C, float);
  COHORT_ACT_TAKE(&k, a->dimg, img, float);
  COHORT_ACT_TAKE(&k, a->dtok, N * K, float);
  return k.used;
}

/* hidden_size of a folder's config.json; 0 when it cannot be read. */
static int folder_width(const char *folder)
{
  g_autofree char *dir = cohort_resolve_path(folder);
  g_autofree char *path = g_build_filename(dir, "config.json", NULL);
  g_autofree char *text = NULL;
  gsize len = 0;
  GStatBuf st;
  if (g_stat(path, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > CONFIG_JSON_MAX ||
      !g_file_get_contents(path, &text, &len, NULL))
    return 0;
  g_autoptr(JsonParser) parser = json_parser_new();
  if (!json_parser_load_from_data(parser, text, (gssize)len, NULL))
    return 0;
  JsonNode *root = json_parser_get_root(parser);
  if (!JSON_NODE_HOLDS_OBJECT(root))
    return 0;
  JsonNode *h = json_object_get_member(json_node_get_object(root), "hidden_size");
  if (!h || !JSON_NODE_HOLDS_VALUE(h) || json_node_get_value_type(h) != G_TYPE_INT64)
    return 0;
  gint64 w = json_node_get_int(h);
  return w > 0 && w <= 65536 ? (int)w : 0;
}

int cohort_family_dit_text_width(const CohortConfig *cfg)
{
  if (!cfg->text_encoder || !*cfg->text_encoder)
    return 0;
  if (g_strcmp0(cfg->text_encoder, "builtin") == 0)
    return COHORT_TEXT_BUILTIN_WIDTH;
  return folder_width(cfg->text_encoder);
}

/* init_from for the DiT: weights with the public DiT reference's names (facebookresearch/DiT,
 * which Cohort's own files use) or with diffusers' DiTTransformer2DModel / Transformer2DModel
 * names (a diffusers transformer folder, a pipeline folder with one in transformer/, or its
 * .safetensors file). A checkpoint trained with learned sigma (out_channels = 2 · in) keeps the
 * first half of the final layer's channels, the noise prediction, and the model says so. What
 * cannot be represented is refused with the reason: another patch size, channel count, width,
 * depth or number of classes, and diffusers files whose per-block copies of the timestep and
 * label embeddings have drifted apart (Cohort's DiT has one of each, as the reference). The
 * text layout (text_encoder) reads diffusers' PixArtTransformer2DModel names, strictly. */
#include "engine/models/dit-private.h"

#include <stdio.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/model/model-io.h"
#include "engine/model/safetensors.h"

typedef struct {
  const char *path;
  CohortStFile *f;
  gboolean diffusers;
  int out_channels; /* of the file's final layer */
  GString *note;
} Import;

static gboolean refuse(GError **error, const Import *im, const char *fmt, ...) G_GNUC_PRINTF(3, 4);
static gboolean refuse(GError **error, const Import *im, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  g_autofree char *msg = g_strdup_vprintf(fmt, ap);
  va_end(ap);
  return cohort_fail(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_SHAPE, "%s: %s",
                     im->path, msg);
}

/* diffusers' name of the reference tensor `name` (block tensors of block l; emb copies from
 * block `emb_block`). NULL for qkv, which diffusers splits in three. */
static char *diffusers_name(const char *name, int emb_block)
{
  static const char *const head[][2] = {
      {"x_embedder.proj.", "pos_embed.proj."},
      {"t_embedder.mlp.0.", "norm1.emb.timestep_embedder.linear_1."},
      {"t_embedder.mlp.2.", "norm1.emb.timestep_embedder.linear_2."},
      {"y_embedder.embedding_table.", "norm1.emb.class_embedder.embedding_table."},
      {"final_layer.adaLN_modulation.1.", "proj_out_1."},
      {"final_layer.linear.", "proj_out_2."},
  };
  static const char *const block[][2] = {
      {"adaLN_modulation.1.", "norm1.linear."},
      {"attn.proj.", "attn1.to_out.0."},
      {"mlp.fc1.", "ff.net.0.proj."},
      {"mlp.fc2.", "ff.net.2."},
  };
  for (guint i = 0; i < G_N_ELEMENTS(head); i++)
    if (g_str_has_prefix(name, head[i][0])) {
      const char *rest = name + strlen(head[i][0]);
      if (i >= 1 && i <= 3)
        return g_strdup_printf("transformer_blocks.%d.%s%s", emb_block, head[i][1], rest);
      return g_strconcat(head[i][1], rest, NULL);
    }
  int l, used = 0;
  if (sscanf(name, "blocks.%d.%n", &l, &used) == 1 && used > 0)
    for (guint i = 0; i < G_N_ELEMENTS(block); i++)
      if (g_str_has_prefix(name + used, block[i][0]))
        return g_strdup_printf("transformer_blocks.%d.%s%s", l, block[i][1],
                               name + used + strlen(block[i][0]));
  return NULL;
}

/* Reads tensor `name` of the file (shape `shape`, ndim) into dst, or refuses naming both. */
static gboolean read_tensor(const Import *im, const char *name, int ndim, const int *shape,
                            float *dst, GError **error)
{
  int64_t want[4], found[8];
  for (int d = 0; d < ndim; d++)
    want[d] = shape[d];
  int nd = cohort_safetensors_shape(im->f, name, found);
  if (nd < 0)
    return refuse(error, im, "tensor \"%s\" is missing; allowed: a DiT with %s names", name,
                  im->diffusers ? "diffusers'" : "the reference's");
  return cohort_safetensors_read_f32(im->f, name, ndim, want, dst, error);
}

/* qkv of block l: diffusers' to_q, to_k, to_v stacked (weights [C, C] each, biases [C]). */
static gboolean read_qkv(const Import *im, int l, gboolean bias, int C, float *dst, GError **error)
{
  static const char *const parts[3] = {"to_q", "to_k", "to_v"};
  for (int k = 0; k < 3; k++) {
    g_autofree char *name =
        g_strdup_printf("transformer_blocks.%d.attn1.%s.%s", l, parts[k], bias ? "bias" : "weight");
    int shape[2] = {C, C};
    if (!read_tensor(im, name, bias ? 1 : 2, shape, dst + (size_t)k * C * (bias ? 1 : C), error))
      return FALSE;
  }
  return TRUE;
}

/* The final linear layer: out rows (py, px, c) for c < channels, from a file with 2 · channels
 * per position when it learned sigma. */
static gboolean read_final(const Import *im, const CohortTensorInfo *t, const char *name, int C,
                           float *dst, GError **error)
{
  if (im->out_channels == C)
    return read_tensor(im, name, t->ndim, t->shape, dst, error);
  int pp = t->shape[0] / C, cols = t->ndim == 2 ? t->shape[1] : 1;
  int shape[2] = {pp * 2 * C, cols};
  g_autofree float *all = g_new(float, (size_t)shape[0] * cols);
  if (!read_tensor(im, name, t->ndim, shape, all, error))
    return FALSE;
  for (int p = 0; p < pp; p++)
    memcpy(dst + (size_t)p * C * cols, all + (size_t)p * 2 * C * cols,
           (size_t)C * cols * sizeof(float));
  return TRUE;
}

/* diffusers keeps a copy of the timestep and label embeddings in every block: all must equal
 * block 0's, since Cohort's DiT (like the reference) has one. */
static gboolean check_copies(const Import *im, const Dit *d, GError **error)
{
  for (int p = DT_T0_W; p <= DT_Y_TABLE; p++) {
    const CohortTensorInfo *t = &d->base.tensors[p];
    g_autofree float *first = g_new(float, t->numel), *other = g_new(float, t->numel);
    g_autofree char *n0 = diffusers_name(t->name, 0);
    if (!read_tensor(im, n0, t->ndim, t->shape, first, error))
      return FALSE;
    for (int l = 1; l < d->shape.n_layer; l++) {
      g_autofree char *nl = diffusers_name(t->name, l);
      if (!read_tensor(im, nl, t->ndim, t->shape, other, error))
        return FALSE;
      if (memcmp(first, other, t->numel * sizeof(float)) != 0)
        return refuse(error, im,
                      "tensor \"%s\" differs from \"%s\": the blocks' timestep and label "
                      "embeddings were trained apart, which Cohort's DiT (one embedding, as the "
                      "DiT reference) cannot hold; allowed: files whose copies are equal (as "
                      "diffusers' conversion of the reference writes them)",
                      nl, n0);
    }
  }
  return TRUE;
}

/* What the file's shapes say against the model's, before anything is read. */
static gboolean check_shapes(Import *im, const Dit *d, GError **error)
{
  const CohortDitShape *s = &d->shape;
  int64_t sh[8];
  const char *xw = im->diffusers ? "pos_embed.proj.weight" : "x_embedder.proj.weight";
  int nd = cohort_safetensors_shape(im->f, xw, sh);
  if (nd != 4)
    return refuse(error, im,
                  "tensor \"%s\" is %s; allowed: a DiT's patch embedding [hidden, "
                  "channels, patch, patch]",
                  xw, nd < 0 ? "missing" : "not 4-dimensional");
  if (sh[2] != s->patch || sh[3] != s->patch)
    return refuse(error, im,
                  "its patches are %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT ", the "
                  "model's %dx%d (key \"patch_size\"); allowed: the same patch size",
                  sh[2], sh[3], s->patch, s->patch);
  if (sh[1] != s->channels)
    return refuse(error, im,
                  "it takes %" G_GINT64_FORMAT " input channels, the model %d "
                  "(image_channels, or the VAE's latent_channels with vae_from); "
                  "allowed: the same channels",
                  sh[1], s->channels);
  if (sh[0] != s->hidden)
    return refuse(error, im, "its width is %" G_GINT64_FORMAT ", the model's %d (key \"n_embd\")",
                  sh[0], s->hidden);
  g_autofree char *over =
      im->diffusers ? g_strdup_printf("transformer_blocks.%d.norm1.linear.weight", s->n_layer)
                    : g_strdup_printf("blocks.%d.adaLN_modulation.1.weight", s->n_layer);
  if (cohort_safetensors_has(im->f, over))
    return refuse(error, im,
                  "it has more than the model's %d blocks (\"%s\" exists; key "
                  "\"n_layer\"); allowed: the same depth",
                  s->n_layer, over);
  g_autofree char *last =
      im->diffusers ? g_strdup_printf("transformer_blocks.%d.norm1.linear.weight", s->n_layer - 1)
                    : g_strdup_printf("blocks.%d.adaLN_modulation.1.weight", s->n_layer - 1);
  if (!cohort_safetensors_has(im->f, last))
    return refuse(error, im,
                  "it has fewer than the model's %d blocks (no \"%s\"; key \"n_layer\"); "
                  "allowed: the same depth",
                  s->n_layer, last);
  const char *yw = im->diffusers ? "transformer_blocks.0.norm1.emb.class_embedder.embedding_table."
                                   "weight"
                                 : "y_embedder.embedding_table.weight";
  if (cohort_safetensors_shape(im->f, yw, sh) == 2 && sh[0] != s->num_classes + 1)
    return refuse(error, im,
                  "its label table has %" G_GINT64_FORMAT " rows, the model %d "
                  "classes and the \"no label\" row (key \"num_classes\")",
                  sh[0], s->num_classes);
  const char *fw = im->diffusers ? "proj_out_2.weight" : "final_layer.linear.weight";
  int pp = s->patch * s->patch;
  if (cohort_safetensors_shape(im->f, fw, sh) == 2 && sh[0] % pp == 0)
    im->out_channels = (int)(sh[0] / pp);
  if (im->out_channels != s->channels && im->out_channels != 2 * s->channels)
    return refuse(error, im,
                  "its final layer predicts %d channels per pixel; allowed: %d, or %d "
                  "(learned sigma, whose second half is dropped)",
                  im->out_channels, s->channels, 2 * s->channels);
  return TRUE;
}

static gboolean read_all(Import *im, Dit *d, float *host, GError **error)
{
  CohortModel *m = &d->base;
  int C = d->shape.hidden;
  for (guint i = 0; i < m->n_tensors; i++) {
    const CohortTensorInfo *t = &m->tensors[i];
    float *dst = host + t->offset;
    int l = 0, used = 0;
    gboolean is_block = sscanf(t->name, "blocks.%d.%n", &l, &used) == 1 && used > 0;
    if (im->diffusers && is_block && g_str_has_prefix(t->name + used, "attn.qkv.")) {
      if (!read_qkv(im, l, g_str_has_suffix(t->name, "bias"), C, dst, error))
        return FALSE;
      continue;
    }
    g_autofree char *name = im->diffusers ? diffusers_name(t->name, 0) : g_strdup(t->name);
    gboolean final = g_str_has_prefix(t->name, "final_layer.linear.");
    if (!(final ? read_final(im, t, name, d->shape.channels, dst, error)
                : read_tensor(im, name, t->ndim, t->shape, dst, error)))
      return FALSE;
  }
  /* pos_embed is the fixed sine-cosine table: recomputed, but one of another grid is refused */
  int64_t sh[8];
  if (!im->diffusers && cohort_safetensors_shape(im->f, "pos_embed", sh) >= 0 &&
      (sh[0] != 1 || sh[1] != d->T || sh[2] != C))
    return refuse(error, im,
                  "tensor \"pos_embed\" is for another grid of patches than the "
                  "model's %d (key \"image_size\"); allowed: the same image size",
                  d->T);
  return TRUE;
}

/* The names a file of this DiT holds: the reference's (pos_embed optional), or diffusers'. */
static GHashTable *expected_names(const Import *im, const Dit *d)
{
  GHashTable *set = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
  const CohortModel *m = &d->base;
  if (!im->diffusers)
    g_hash_table_add(set, g_strdup("pos_embed"));
  for (guint i = 0; i < m->n_tensors; i++) {
    const char *name = m->tensors[i].name;
    int l = 0, used = 0;
    gboolean is_block = sscanf(name, "blocks.%d.%n", &l, &used) == 1 && used > 0;
    if (!im->diffusers) {
      g_hash_table_add(set, g_strdup(name));
    } else if (is_block && g_str_has_prefix(name + used, "attn.qkv.")) {
      const char *kind = g_str_has_suffix(name, "bias") ? "bias" : "weight";
      for (int k = 0; k < 3; k++)
        g_hash_table_add(
            set, g_strdup_printf("transformer_blocks.%d.attn1.to_%c.%s", l, "qkv"[k], kind));
    } else if ((int)i >= DT_T0_W && (int)i <= DT_Y_TABLE) {
      for (int b = 0; b < d->shape.n_layer; b++)
        g_hash_table_add(set, diffusers_name(name, b));
    } else {
      g_hash_table_add(set, diffusers_name(name, 0));
    }
  }
  return set;
}

/* Every tensor of the file must be one of them (strict, as PyTorch's load_state_dict). */
static gboolean check_unused(const Import *im, const Dit *d, GError **error)
{
  g_autoptr(GHashTable) names = expected_names(im, d);
  for (const char *const *n = cohort_safetensors_names(im->f); *n; n++)
    if (!g_hash_table_contains(names, *n))
      return refuse(error, im,
                    "tensor \"%s\" is not part of a DiT of this shape; allowed: "
                    "exactly the tensors of one",
                    *n);
  return TRUE;
}

/* The weights file of `path`: itself, or in a diffusers folder (or its transformer/). */
char *cohort_dit_import_file(const char *path)
{
  if (!g_file_test(path, G_FILE_TEST_IS_DIR))
    return g_strdup(path);
  const char *subs[] = {"", "transformer"};
  for (guint i = 0; i < G_N_ELEMENTS(subs); i++) {
    char *p = g_build_filename(path, subs[i], "diffusion_pytorch_model.safetensors", NULL);
    if (g_file_test(p, G_FILE_TEST_IS_REGULAR))
      return p;
    g_free(p);
  }
  return g_build_filename(path, "diffusion_pytorch_model.safetensors", NULL);
}

/* The text layout's init_from: exactly the model's tensors under diffusers'
 * PixArtTransformer2DModel names, as its own export writes them, with or without the fixed
 * sine-cosine table pos_embed.pos_embed (diffusers does not persist it), which is recomputed.
 * What the model has beside the table (LoRA adapters) is kept. */
static gboolean import_text(Dit *d, const char *weights, CohortStFile *f, GError **error)
{
  CohortModel *m = &d->base;
  Import im = {.path = weights, .f = f};
  int64_t sh[8];
  int nd = cohort_safetensors_shape(f, "pos_embed.pos_embed", sh);
  if (nd >= 0 && (nd != 3 || sh[0] != 1 || sh[1] != d->T || sh[2] != d->shape.hidden))
    return refuse(error, &im,
                  "tensor \"pos_embed.pos_embed\" is for another grid of patches or width than "
                  "the model's %d patches of width %d (keys \"image_size\", \"patch_size\", "
                  "\"n_embd\"); allowed: the same shape",
                  d->T, d->shape.hidden);
  for (const char *const *n = cohort_safetensors_names(f); *n; n++)
    if (!g_str_equal(*n, "pos_embed.pos_embed") && !cohort_model_find_tensor(m, *n))
      return refuse(error, &im,
                    "tensor \"%s\" is not part of this text-layout DiT (text_encoder); "
                    "allowed: exactly the tensors of a PixArtTransformer2DModel of its shape",
                    *n);
  if (!cohort_tensor_check(m->tensors, m->n_tensors, f, weights, "", error))
    return FALSE;
  g_autofree float *host = g_try_new(float, MAX(m->n_params, 1));
  if (!host)
    return refuse(error, &im, "out of memory for %zu parameters", m->n_params);
  cohort_model_download_params(m, host);
  if (!cohort_tensor_read(m->tensors, m->n_tensors, f, "", host, error))
    return FALSE;
  cohort_model_upload_params(m, host);
  cohort_dit_fill_pos_embed(d);
  return TRUE;
}

gboolean cohort_dit_import(CohortModel *m, const char *path, GPtrArray *notes, GError **error)
{
  Dit *d = dit_of(m);
  g_autofree char *weights = cohort_dit_import_file(path);
  g_autoptr(CohortStFile) f = cohort_safetensors_open(weights, error);
  if (!f)
    return FALSE;
  if (d->text)
    return import_text(d, weights, f, error);
  Import im = {.path = weights, .f = f, .out_channels = d->shape.channels};
  im.diffusers = cohort_safetensors_has(f, "pos_embed.proj.weight") &&
                 !cohort_safetensors_has(f, "x_embedder.proj.weight");
  if (!check_shapes(&im, d, error) || !check_unused(&im, d, error) ||
      (im.diffusers && !check_copies(&im, d, error)))
    return FALSE;
  g_autofree float *host = g_try_new(float, MAX(m->n_params, 1));
  if (!host)
    return refuse(error, &im, "out of memory for %zu parameters", m->n_params);
  if (!read_all(&im, d, host, error))
    return FALSE;
  cohort_model_upload_params(m, host);
  cohort_dit_fill_pos_embed(d);
  GString *note = g_string_new(NULL);
  if (im.diffusers)
    g_string_append_printf(note,
                           "%s: diffusers' DiT names mapped to the reference's (one timestep "
                           "and label embedding: the blocks' copies are equal; diffusers "
                           "computes the timestep features with downscale_freq_shift 1, "
                           "Cohort as the reference)",
                           weights);
  if (im.out_channels != d->shape.channels)
    g_string_append_printf(note,
                           "%s%s: learned sigma (%d output channels): the first %d, the "
                           "noise prediction, are kept, the variance channels dropped",
                           note->len ? "; " : "", weights, im.out_channels, d->shape.channels);
  if (notes && note->len)
    g_ptr_array_add(notes, g_string_free(note, FALSE));
  else
    g_string_free(note, TRUE);
  return TRUE;
}

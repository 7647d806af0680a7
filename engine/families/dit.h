/* The "dit" family's description (engine/families/family.h): a diffusion transformer's shape,
 * its tensors with the public DiT reference's names, its position table, and where its
 * activations go. The model itself is engine/models/dit*.c. */
#pragma once

#include "engine/families/family.h"
#include "engine/families/pixart.h"

G_BEGIN_DECLS

/* The "dit" family's description. */
extern const CohortFamilyDesc cohort_family_dit;

typedef struct {
  int n_layer, n_head, hidden;
  int image_size, channels, patch;
  int num_classes; /* the "no label" row is num_classes */
  /* The text layout (text_encoder set): the encoder's width D, and the most text tokens of an
   * example (max_text_tokens); text_dim 0 is the class layout. */
  int text_dim, text_tokens;
} CohortDitShape;

/* The width of the built-in text encoder's hidden states (engine/models/text-encoder.h). */
#define COHORT_TEXT_BUILTIN_WIDTH 64

/* Frequency features of the timestep embedding, as in the reference. */
#define DIT_FREQ_DIM 256

/* Tensors of one block, in the order of the reference's state dict. */
enum {
  DB_QKV_W,
  DB_QKV_B,
  DB_PROJ_W,
  DB_PROJ_B,
  DB_FC1_W,
  DB_FC1_B,
  DB_FC2_W,
  DB_FC2_B,
  DB_ADA_W,
  DB_ADA_B,
  DB_COUNT
};

/* The tensors before the blocks (layer -1) and after them (the final layer, layer n_layer). */
enum { DT_X_W, DT_X_B, DT_T0_W, DT_T0_B, DT_T2_W, DT_T2_B, DT_Y_TABLE, DT_HEAD_COUNT };
enum { DF_LIN_W, DF_LIN_B, DF_ADA_W, DF_ADA_B, DF_COUNT };

/* What one block keeps from forward for backward. [N, width] with N = B·T, mod [B, 6C]. */
typedef struct {
  float *mod;
  float *h1, *mean1, *rstd1, *m1;
  float *qkv, *att, *lse, *a;
  float *x1;
  float *h2, *mean2, *rstd2, *m2;
  float *f, *g, *o;
  float *x_out; /* the residual stream after the block: the next block's input */
} CohortDitBlockActs;

/* A DiT's activations (backend memory) for max_batch images. */
typedef struct {
  float *img;       /* x_t [B, C, H, W] */
  float *target;    /* v target [B, C, H, W] */
  float *t;         /* [B], the timestep fed to the embedding (1000·t) */
  int *labels;      /* [B], num_classes = no label */
  float *tokens_in; /* patchified x_t [N, k_patch] */
  float *x0;        /* the embedded tokens [N, C] (the blocks' first input) */
  float *tfreq, *th, *ths, *temb, *c, *sc; /* [B, 256], [B, C] … */
  CohortDitBlockActs *blocks; /* n_layer entries, allocated by the caller; NULL to count */
  float *fmod, *fh, *fmean, *frstd, *fm, *fout; /* final layer */
  float *pred;                                  /* [B, C, H, W] */
  float *losses;                                /* [B] */
  /* backward scratch (NULL in a forward-only model) */
  float *dres, *dh, *dm, *dbig, *dqkv, *datt, *da, *dmod, *dsc, *dc, *dtmp, *dimg, *dtok;
} CohortDitActs;

/* The text layout's tensors before the blocks (layer -1): pos_embed.proj, adaln_single's
 * timestep MLP and its linear, caption_projection; after them (layer n_layer): the final
 * scale_shift_table and proj_out. Blocks are PixArt's (engine/families/pixart.h). */
enum {
  DX_X_W,
  DX_X_B,
  DX_T1_W,
  DX_T1_B,
  DX_T2_W,
  DX_T2_B,
  DX_ADA_W,
  DX_ADA_B,
  DX_CAP1_W,
  DX_CAP1_B,
  DX_CAP2_W,
  DX_CAP2_B,
  DX_HEAD_COUNT
};
enum { DXF_TABLE, DXF_OUT_W, DXF_OUT_B, DXF_COUNT };

/* The text layout's activations (backend memory) beyond the blocks', for max_batch images of T
 * tokens and M = text_tokens text tokens. */
typedef struct {
  float *img, *target, *t; /* as CohortDitActs */
  float *text;             /* the encoder's tokens [B, M, D], zeros past each klen */
  int *klen;               /* [B] */
  float *tokens_in, *x0;
  float *tfreq, *th, *ths, *emb, *semb, *temb; /* [B, 256], [B, C] ×4, temb [B, 6C] */
  float *cap1, *capg, *ctx;                    /* caption_projection [B·M, C] */
  /* n_layer × cohort_pixart_acts_floats; with activation_checkpointing one set that every
   * block writes, and block_out: each block's output [B, T, C] (the next one's input) */
  float *blocks, *block_out;
  size_t block_floats;
  float *fmod, *fh, *fmean, *frstd, *fm, *fout, *pred, *losses;
  /* backward */
  float *dtemb, *dsemb, *demb, *dtmp, *dctx, *dcap, *dfmod, *dres, *dh, *dm, *dimg, *dtok;
} CohortDitTextActs;

/* The PixArt block shape of a text-layout DiT. */
CohortPixartShape cohort_family_dit_pixart_shape(const CohortDitShape *s);
/* The text layout's tables (diffusers' PixArtTransformer2DModel names) and the fixed position
 * table "pos_embed.pos_embed" (a buffer); FALSE when the patch does not divide the image. */
gboolean cohort_family_dit_text_tables(const CohortDitShape *s, CohortFamilyTables *out);
/* Lays the text layout's activations out from `base` (NULL: only counts) for `keep` (ALL, or
 * CHECKPOINT; forward-only models are not made of the text layout); returns the bytes. */
size_t cohort_family_dit_text_layout(CohortDitTextActs *a, const CohortDitShape *s, int max_batch,
                                     CohortActKeep keep, char *base);
/* The hidden width of text_encoder's model: COHORT_TEXT_BUILTIN_WIDTH for "builtin", a folder's
 * config.json hidden_size, 0 when text_encoder is "" or the folder's config cannot be read. */
int cohort_family_dit_text_width(const CohortConfig *cfg);

/* The shape `cfg` describes in pixel space (image_size, image_channels: before any vae_from
 * latents), with num_classes as set. */
CohortDitShape cohort_family_dit_shape(const CohortConfig *cfg);
/* The tables of a DiT of shape `s`: the parameters, and the fixed position table pos_embed
 * (a buffer); FALSE when the patch does not divide the image. */
gboolean cohort_family_dit_tables(const CohortDitShape *s, CohortFamilyTables *out);
/* Lays the activations out from `base` (NULL: only counts) and returns their bytes; a
 * forward-only model (a distillation teacher) has no backward scratch and one set of block
 * buffers; with COHORT_ACTS_CHECKPOINT the blocks share one set too, but each keeps its own
 * x_out (the next block's input). */
size_t cohort_family_dit_layout(CohortDitActs *a, const CohortDitShape *s, int max_batch,
                                CohortActKeep keep, char *base);

G_END_DECLS

/* A PixArt-α transformer block (diffusers' BasicTransformerBlock with norm_type
 * "ada_norm_single", as PixArtTransformer2DModel stacks them), forward and backward over the
 * backend table: the unit the dit family's text layout stacks (docs/t2i-design.md); its names
 * and shapes are engine/families/pixart.h.
 *
 * For image tokens x [B, N, C], the timestep's modulation temb [B, 6C] (adaLN-single: one
 * projection of the timestep embedding shared by every block, PixArt's t_block) and text tokens
 * ctx [B, M, D] of which example b has klen[b]:
 *   shift1, scale1, gate1, shift2, scale2, gate2 = (scale_shift_table + temb).chunk(6)
 *   x1 = x + gate1 * attn1(LN(x) * (1 + scale1) + shift1)          self-attention
 *   x2 = x1 + attn2(x1, ctx, key padding klen)                      cross-attention, no norm
 *   out = x2 + gate2 * ff(LN(x2) * (1 + scale2) + shift2)          ff: Linear, GELU-tanh, Linear
 * LayerNorms without affine parameters, eps 1e-6; every attention projection has a bias (PixArt's
 * attention_bias); attn2's keys and values read width D (cross_attention_dim; PixArt projects
 * the caption to C first, D = C). Masked text tokens get no weight; an example without text
 * tokens (klen 0) takes nothing from attn2 (its output there is 0 plus to_out.0's bias; see
 * cross_attention_forward in kernels/backend.h). */
#pragma once

#include <glib.h>
#include <stddef.h>

#include "engine/families/pixart.h"
#include "kernels/backend.h"

typedef struct CohortModel CohortModel;

/* Pointers to the block's tensors (backend memory); for gradients, NULL skips one (frozen).
 * `lora` (read from the weights, not the gradients): the model whose LoRA adapters
 * (engine/model/lora.h) the block's linears run, tensor p being its table index first + p;
 * NULL: none (a block outside a model, as the tests run it). */
typedef struct {
  float *t[PB_COUNT];
  CohortModel *lora;
  guint first;
} CohortPixartWeights;

/* The block on x [B, N, C] into a->out, keeping what backward needs. temb [B, 6C], ctx
 * [B, M, D], klen int [B] (backend memory; NULL: all M tokens of every example). */
void cohort_pixart_block_forward(const CohortBackend *be, const CohortPixartShape *s,
                                 const CohortPixartWeights *w, CohortPixartActs *a, const float *x,
                                 const float *temb, const float *ctx, const int *klen, int B, int N,
                                 int M);
/* Backward of the last forward with these inputs: dres holds d(out) and is overwritten with
 * d(x); the weight gradients (grads, NULL entries skipped), dtemb [B, 6C] and dctx [B, M, D]
 * accumulate (either NULL: not needed). */
void cohort_pixart_block_backward(const CohortBackend *be, const CohortPixartShape *s,
                                  const CohortPixartWeights *w, const CohortPixartWeights *grads,
                                  CohortPixartActs *a, const float *x, const float *ctx,
                                  const int *klen, int B, int N, int M, float *dres, float *dtemb,
                                  float *dctx);

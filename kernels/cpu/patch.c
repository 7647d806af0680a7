/* Images [B, C, H, W] to patch tokens [B, T, p * p * C] and back. Patchify orders a token's
 * values (c, py, px), as a Conv2d(kernel p, stride p) weight flattens, so patch embedding is a
 * GEMM; DiT's final layer produces (py, px, c) (its unpatchify einsum "nhwpqc->nchpwq").
 * Both are permutations, so each backward is the other direction of the same map. */
#include "cpu.h"
#include "kernels/math-inline.h"

typedef struct {
  int B, C, H, W, p, gw, T;
  int channel_last; /* token values in (py, px, c) order, else (c, py, px) */
} PatchMap;

/* to_tokens: dst is the token tensor and src the image; else the reverse. One task per image
 * row. Only whole patches are read or written (H and W are multiples of p for every caller). */
static void patch_map(float *dst, const float *src, const PatchMap *m, int to_tokens)
{
  int H = (m->H / m->p) * m->p, w = m->gw * m->p, rows = m->B * m->C * H;
#pragma omp parallel for schedule(static) if ((size_t)rows * w >= COHORT_CPU_PAR_MIN)
  for (int r = 0; r < rows; r++) {
    int y = r % H, bc = r / H, c = bc % m->C, b = bc / m->C;
    size_t row = ((size_t)bc * m->H + y) * m->W;
    for (int x = 0; x < w; x++) {
      size_t k = cohort_patch_offset(b, c, y, x, m->C, m->p, m->gw, m->T, m->channel_last);
      if (to_tokens)
        dst[k] = src[row + x];
      else
        dst[row + x] = src[k];
    }
  }
}

static PatchMap patch_shape(int B, int C, int H, int W, int p, int channel_last)
{
  PatchMap m = {B, C, H, W, p, W / p, (H / p) * (W / p), channel_last};
  return m;
}

void cohort_cpu_patchify(float *out, const float *img, int B, int C, int H, int W, int p)
{
  if (p <= 0)
    return;
  PatchMap m = patch_shape(B, C, H, W, p, 0);
  patch_map(out, img, &m, 1);
}

void cohort_cpu_patchify_backward(float *dimg, const float *dtokens, int B, int C, int H, int W,
                                  int p)
{
  if (p <= 0)
    return;
  PatchMap m = patch_shape(B, C, H, W, p, 0);
  patch_map(dimg, dtokens, &m, 0);
}

void cohort_cpu_unpatchify(float *img, const float *tokens, int B, int C, int H, int W, int p)
{
  if (p <= 0)
    return;
  PatchMap m = patch_shape(B, C, H, W, p, 1);
  patch_map(img, tokens, &m, 0);
}

void cohort_cpu_unpatchify_backward(float *dtokens, const float *dimg, int B, int C, int H, int W,
                                    int p)
{
  if (p <= 0)
    return;
  PatchMap m = patch_shape(B, C, H, W, p, 1);
  patch_map(dtokens, dimg, &m, 1);
}

/* Embeddings: token + position rows (GPT), label rows, sinusoidal timestep features and
 * image patches to tokens and back (DiT), rotary position embeddings (Llama). */
#include "cpu.h"
#include "kernels/math-inline.h"
#include "reduce.h"

#include <string.h>

#define CHUNK  4096
#define STRIPE 64

void cohort_cpu_timestep_embedding(float *out, const float *t, int B, int dim, float max_period)
{
  for (int b = 0; b < B; b++)
    for (int j = 0; j < dim; j++)
      out[(size_t)b * dim + j] = cohort_timestep_feature(t[b], j, dim / 2, max_period);
}

void cohort_cpu_rows_gather(float *out, const float *table, const int *rows, int B, int C)
{
  for (int b = 0; b < B; b++)
    memcpy(out + (size_t)b * C, table + (size_t)rows[b] * C, sizeof(float) * C);
}

COHORT_VEC static void acc_stripe(float *restrict dst, const float *restrict src, int width)
{
  for (int j = 0; j < width; j++)
    dst[j] += src[j];
}

/* Parallel over stripes of channels, samples in order inside a stripe: two samples with the
 * same row never race, and the order of the sum is fixed. */
void cohort_cpu_rows_scatter_add(float *dtable, const float *dout, const int *rows, int B, int C)
{
  int stripes = (C + STRIPE - 1) / STRIPE;
#pragma omp parallel for schedule(static) if ((size_t)B * C >= COHORT_CPU_PAR_MIN)
  for (int s = 0; s < stripes; s++) {
    int c0 = s * STRIPE;
    int width = C - c0 < STRIPE ? C - c0 : STRIPE;
    for (int b = 0; b < B; b++)
      acc_stripe(dtable + (size_t)rows[b] * C + c0, dout + (size_t)b * C + c0, width);
  }
}

COHORT_VEC static void add_rows(float *restrict out, const float *restrict a,
                                const float *restrict b, int C)
{
  for (int c = 0; c < C; c++)
    out[c] = a[c] + b[c];
}

void cohort_cpu_embedding_forward(float *out, const int *tokens, const float *wte, const float *wpe,
                                  int B, int T, int C)
{
#pragma omp parallel for schedule(static) if ((size_t)B * T * C >= COHORT_CPU_PAR_MIN)
  for (int bt = 0; bt < B * T; bt++) {
    int t = bt % T;
    add_rows(out + (size_t)bt * C, wte + (size_t)tokens[bt] * C, wpe + (size_t)t * C, C);
  }
}

COHORT_VEC static void acc_row(float *restrict dst, const float *restrict src, int width)
{
  for (int c = 0; c < width; c++)
    dst[c] += src[c];
}

/* Parallel over stripes of channels, positions in order inside a stripe: two positions with
 * the same token never race, and the sum order is fixed. */
void cohort_cpu_embedding_backward(float *dwte, float *dwpe, const float *dout, const int *tokens,
                                   int B, int T, int C)
{
  if (!dwte && !dwpe)
    return;
  int stripes = (C + 63) / 64;
#pragma omp parallel for schedule(static) if ((size_t)B * T * C >= COHORT_CPU_PAR_MIN)
  for (int s = 0; s < stripes; s++) {
    int c0 = s * 64;
    int width = C - c0 < 64 ? C - c0 : 64;
    for (int bt = 0; bt < B * T; bt++) {
      const float *g = dout + (size_t)bt * C + c0;
      if (dwte)
        acc_row(dwte + (size_t)tokens[bt] * C + c0, g, width);
      if (dwpe)
        acc_row(dwpe + (size_t)(bt % T) * C + c0, g, width);
    }
  }
}

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

/* One head's row at position table row `c`/`s`: rotated by the angle (sign +1) or back (-1). */
COHORT_VEC static void rope_row(float *out, const float *x, const float *restrict c,
                                const float *restrict s, int half, float sign)
{
  for (int i = 0; i < half; i++) {
    float x1 = x[i], x2 = x[i + half], sn = sign * s[i];
    out[i] = x1 * c[i] - x2 * sn;
    out[i + half] = x2 * c[i] + x1 * sn;
  }
}

static void rope(float *out, const float *inp, const float *cos, const float *sin, int B, int T,
                 int H, int hd, int pos0, float sign)
{
  int half = hd / 2;
  long rows = (long)B * T * H;
#pragma omp parallel for schedule(static) if ((size_t)rows * hd >= COHORT_CPU_PAR_MIN)
  for (long r = 0; r < rows; r++) {
    size_t p = (size_t)pos0 + (size_t)(r / H % T);
    rope_row(out + (size_t)r * hd, inp + (size_t)r * hd, cos + p * half, sin + p * half, half,
             sign);
  }
}

void cohort_cpu_rope_forward(float *out, const float *inp, const float *cos, const float *sin,
                             int B, int T, int H, int hd, int pos0)
{
  rope(out, inp, cos, sin, B, T, H, hd, pos0, 1.0f);
}

void cohort_cpu_rope_backward(float *dinp, const float *dout, const float *cos, const float *sin,
                              int B, int T, int H, int hd, int pos0)
{
  rope(dinp, dout, cos, sin, B, T, H, hd, pos0, -1.0f);
}

/* The im2col reference convolution, NCHW: each image's column matrix (one row per (c, kh, kw),
 * one column per output pixel) times the weight through the backend's gemm, so the GEMM mode
 * applies. The tests compare oneDNN's primitives against it; it is also the fallback where
 * oneDNN is absent (kernels/cpu/conv-paths.h). */
#include "cpu.h"
#include "kernels/cpu/conv-paths.h"

#include <stddef.h>

typedef struct {
  int C, H, W, K, stride, pad, Ho, Wo;
} ConvShape;

/* The output columns ow in [lo, hi) whose input column ow * stride + off lies in [0, W). */
static void valid_cols(const ConvShape *s, int off, int *lo, int *hi)
{
  int a = off < 0 ? (-off + s->stride - 1) / s->stride : 0;
  int b = s->W - off <= 0 ? 0 : (s->W - off + s->stride - 1) / s->stride;
  *lo = a < s->Wo ? a : s->Wo;
  *hi = b < *lo ? *lo : (b < s->Wo ? b : s->Wo);
}

/* One row (c, kh, kw) of the column matrix for one image: dst[oh * Wo + ow] =
 * src[ih, iw] with ih = oh*stride - pad + kh, iw likewise, or 0 in the padding. Plain loops
 * rather than memcpy/memset: the runs are 8 to 32 floats, where calls cost more than copies. */
COHORT_VEC static void im2col_row(float *restrict dst, const float *restrict src,
                                  const ConvShape *s, int kh, int kw)
{
  int off = kw - s->pad, lo, hi, Wo = s->Wo, st = s->stride;
  valid_cols(s, off, &lo, &hi);
  for (int oh = 0; oh < s->Ho; oh++, dst += Wo) {
    int ih = oh * st - s->pad + kh;
    if (ih < 0 || ih >= s->H) {
      for (int ow = 0; ow < Wo; ow++)
        dst[ow] = 0.0f;
      continue;
    }
    const float *row = src + (size_t)ih * s->W;
    for (int ow = 0; ow < lo; ow++)
      dst[ow] = 0.0f;
    if (st == 1)
      for (int ow = lo; ow < hi; ow++)
        dst[ow] = row[ow + off];
    else
      for (int ow = lo; ow < hi; ow++)
        dst[ow] = row[ow * st + off];
    for (int ow = hi; ow < Wo; ow++)
      dst[ow] = 0.0f;
  }
}

/* Stride 1 with W_out == W ("same" convolutions: ResNet's 3x3 with padding 1). The rows of the
 * input plane that a (c, kh, kw) row reads are one run of the plane shifted by `off`, so one
 * long copy fills its valid rows. The |off| columns per row that the shift wraps into the
 * neighbouring row are padding and get zeroed. This is im2col_row's result with a long
 * vectorised loop instead of a short one per row. */
typedef struct {
  int oh0, oh1;    /* the output rows whose input row exists */
  long base;       /* plane index of dst element oh0 * W */
  long t_lo, t_hi; /* [t_lo, t_hi): the run's elements inside the plane */
} SameRun;

static SameRun same_run(const ConvShape *s, int kh, int off)
{
  SameRun r;
  r.oh0 = s->pad - kh > 0 ? s->pad - kh : 0;
  r.oh1 = s->H + s->pad - kh < s->Ho ? s->H + s->pad - kh : s->Ho;
  if (r.oh1 < r.oh0)
    r.oh1 = r.oh0;
  long n = (long)(r.oh1 - r.oh0) * s->W, plane = (long)s->H * s->W;
  r.base = (long)(r.oh0 - s->pad + kh) * s->W + off;
  r.t_lo = r.base < 0 ? -r.base : 0;
  r.t_hi = plane - r.base < n ? plane - r.base : n;
  if (r.t_hi < r.t_lo)
    r.t_hi = r.t_lo;
  return r;
}

/* Zeroes, in rows [oh0, oh1) of d (width W), the columns that a shift by off wraps. */
static void zero_wrapped(float *d, int oh0, int oh1, int W, int off)
{
  int c0 = off < 0 ? 0 : (W - off > 0 ? W - off : 0);
  int c1 = off < 0 ? (-off < W ? -off : W) : W;
  for (int oh = oh0; oh < oh1; oh++)
    for (int c = c0; c < c1; c++)
      d[(size_t)oh * W + c] = 0.0f;
}

COHORT_VEC static void im2col_row_same(float *restrict dst, const float *restrict src,
                                       const ConvShape *s, int kh, int kw)
{
  int W = s->W, off = kw - s->pad;
  SameRun r = same_run(s, kh, off);
  long n = (long)(r.oh1 - r.oh0) * W, tail = (long)(s->Ho - r.oh1) * W;
  float *d = dst + (size_t)r.oh0 * W;
  for (long t = 0; t < (long)r.oh0 * W; t++)
    dst[t] = 0.0f;
  for (long t = 0; t < r.t_lo; t++)
    d[t] = 0.0f;
  for (long t = r.t_lo; t < r.t_hi; t++)
    d[t] = src[r.base + t];
  for (long t = r.t_hi; t < n + tail; t++)
    d[t] = 0.0f;
  if (off != 0)
    zero_wrapped(dst, r.oh0, r.oh1, W, off);
}

/* col [C*K*K, Ho*Wo] of one image. */
static void im2col(float *col, const float *inp, const ConvShape *s)
{
  int rows = s->C * s->K * s->K;
  size_t howo = (size_t)s->Ho * s->Wo, hw = (size_t)s->H * s->W;
#pragma omp parallel for schedule(static) if ((size_t)rows * howo >= COHORT_CPU_PAR_MIN)
  for (int r = 0; r < rows; r++) {
    int c = r / (s->K * s->K), kh = r / s->K % s->K, kw = r % s->K;
    if (s->stride == 1 && s->Wo == s->W)
      im2col_row_same(col + r * howo, inp + c * hw, s, kh, kw);
    else
      im2col_row(col + r * howo, inp + c * hw, s, kh, kw);
  }
}

/* The transpose of im2col_row: dst[ih, iw] += src[oh * Wo + ow]. */
COHORT_VEC static void col2im_row(float *restrict dst, const float *restrict src,
                                  const ConvShape *s, int kh, int kw)
{
  int off = kw - s->pad, lo, hi, Wo = s->Wo, st = s->stride;
  valid_cols(s, off, &lo, &hi);
  for (int oh = 0; oh < s->Ho; oh++, src += Wo) {
    int ih = oh * st - s->pad + kh;
    if (ih < 0 || ih >= s->H)
      continue;
    float *row = dst + (size_t)ih * s->W;
    if (st == 1)
      for (int ow = lo; ow < hi; ow++)
        row[ow + off] += src[ow];
    else
      for (int ow = lo; ow < hi; ow++)
        row[ow * st + off] += src[ow];
  }
}

/* col2im_row for "same" convolutions (see im2col_row_same): the wrapped columns of src, which
 * belong to the padding, are zeroed first (src is the convolution's scratch), then one long
 * loop adds the run. Adding those zeros changes no sum. */
COHORT_VEC static void col2im_row_same(float *restrict dst, float *restrict src, const ConvShape *s,
                                       int kh, int kw)
{
  int W = s->W, off = kw - s->pad;
  SameRun r = same_run(s, kh, off);
  float *d = src + (size_t)r.oh0 * W;
  if (off != 0)
    zero_wrapped(src, r.oh0, r.oh1, W, off);
  for (long t = r.t_lo; t < r.t_hi; t++)
    dst[r.base + t] += d[t];
}

/* dinp of one image += col2im(dcol). One thread per input channel, so each dinp element gets
 * its terms in (kh, kw) order whatever the thread count. */
static void col2im(float *dinp, float *dcol, const ConvShape *s)
{
  size_t howo = (size_t)s->Ho * s->Wo, hw = (size_t)s->H * s->W;
  int KK = s->K * s->K, same = s->stride == 1 && s->Wo == s->W;
#pragma omp parallel for schedule(static) if ((size_t)s->C * KK * howo >= COHORT_CPU_PAR_MIN)
  for (int c = 0; c < s->C; c++)
    for (int k = 0; k < KK; k++) {
      float *row = dcol + ((size_t)c * KK + k) * howo;
      if (same)
        col2im_row_same(dinp + c * hw, row, s, k / s->K, k % s->K);
      else
        col2im_row(dinp + c * hw, row, s, k / s->K, k % s->K);
    }
}

static void shape_of(ConvShape *s, const CohortConvDims *d)
{
  *s = (ConvShape){.C = d->C,
                   .H = d->H,
                   .W = d->W,
                   .K = d->K,
                   .stride = d->S,
                   .pad = d->P,
                   .Ho = d->Ho,
                   .Wo = d->Wo};
}

void cohort_cpu_conv2d_im2col_forward(float *out, const float *inp, const float *weight,
                                      const CohortConvDims *d)
{
  ConvShape s;
  shape_of(&s, d);
  int ckk = d->C * d->K * d->K, howo = s.Ho * s.Wo;
  size_t hw = (size_t)d->H * d->W;
  float *col = cohort_cpu_conv_scratch(COHORT_CONV_SCRATCH_COL, (size_t)ckk * howo * sizeof(float));
  for (int b = 0; b < d->B; b++) {
    im2col(col, inp + (size_t)b * d->C * hw, &s);
    cohort_cpu_gemm(0, 0, d->O, howo, ckk, 1.0f, weight, ckk, col, howo, 0.0f,
                    out + (size_t)b * d->O * howo, howo);
  }
}

/* dweight [C_out, ckk] += dwt^T, dwt [ckk, C_out] */
static void add_transposed(float *dweight, const float *dwt, int C_out, int ckk)
{
  for (int o = 0; o < C_out; o++)
    for (int r = 0; r < ckk; r++)
      dweight[(size_t)o * ckk + r] += dwt[(size_t)r * C_out + o];
}

void cohort_cpu_conv2d_im2col_backward(float *dinp, float *dweight, const float *dout,
                                       const float *inp, const float *weight,
                                       const CohortConvDims *d)
{
  ConvShape s;
  shape_of(&s, d);
  int ckk = d->C * d->K * d->K, howo = s.Ho * s.Wo, C_out = d->O;
  size_t hw = (size_t)d->H * d->W;
  if (!dinp && !dweight)
    return;
  float *col = cohort_cpu_conv_scratch(COHORT_CONV_SCRATCH_COL, (size_t)ckk * howo * sizeof(float));
  float *dwt = dweight ? cohort_cpu_conv_scratch(COHORT_CONV_SCRATCH_DWEIGHT,
                                                 (size_t)ckk * C_out * sizeof(float))
                       : NULL;
  for (int b = 0; b < d->B; b++) {
    const float *g = dout + (size_t)b * C_out * howo;
    /* dwt [ckk, C_out] (+)= col @ g^T, summed over the images in order (frozen weights: none) */
    if (dweight) {
      im2col(col, inp + (size_t)b * d->C * hw, &s);
      cohort_cpu_gemm(0, 1, ckk, C_out, howo, 1.0f, col, howo, g, howo, b ? 1.0f : 0.0f, dwt,
                      C_out);
    }
    if (!dinp)
      continue;
    /* dcol [ckk, howo] = weight^T @ g, into the column buffer (no longer needed) */
    cohort_cpu_gemm(1, 0, ckk, howo, C_out, 1.0f, weight, ckk, g, howo, 0.0f, col, howo);
    col2im(dinp + (size_t)b * d->C * hw, col, &s);
  }
  if (dweight)
    add_transposed(dweight, dwt, C_out, ckk);
}

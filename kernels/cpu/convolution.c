/* Convolution and pooling ops of the table: conv2d in NCHW and channels-last (NHWC) on the
 * path kernels/cpu/conv-paths.h describes (oneDNN, or the im2col reference), global average
 * pooling in both layouts and max-pooling (the ImageNet ResNets' stem) in NHWC. */
#include "cpu.h"
#include "kernels/cpu/conv-paths.h"
#include "kernels/math-inline.h"
#include "reduce.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cohort-build-config.h"

/* ---- scratch: per-thread buffers, grown on demand and kept, since a training step makes the
 * same convolutions every time; freed when the thread ends, and the main thread's at exit ---- */
#define SCRATCH_BUFS COHORT_CONV_SCRATCH_COUNT

typedef struct {
  void *buf[SCRATCH_BUFS];
  size_t cap[SCRATCH_BUFS];
} ConvScratch;

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void scratch_free(void *p)
{
  ConvScratch *s = p;
  if (!s)
    return;
  for (int i = 0; i < SCRATCH_BUFS; i++)
    free(s->buf[i]);
  free(s);
}

static void scratch_free_at_exit(void)
{
  ConvScratch *s = pthread_getspecific(scratch_key);
  pthread_setspecific(scratch_key, NULL);
  scratch_free(s);
}

static void scratch_init(void)
{
  if (pthread_key_create(&scratch_key, scratch_free) == 0)
    atexit(scratch_free_at_exit);
}

void *cohort_cpu_conv_scratch(CohortConvScratch which, size_t bytes)
{
  pthread_once(&scratch_once, scratch_init);
  ConvScratch *s = pthread_getspecific(scratch_key);
  if (!s) {
    s = calloc(1, sizeof *s);
    if (!s || pthread_setspecific(scratch_key, s) != 0)
      goto oom;
  }
  if ((int)which < 0 || which >= SCRATCH_BUFS)
    abort();
  if (s->cap[which] < bytes) {
    free(s->buf[which]);
    size_t rounded = (bytes + 63) / 64 * 64;
    s->buf[which] = aligned_alloc(64, rounded);
    s->cap[which] = s->buf[which] ? rounded : 0;
    if (!s->buf[which])
      goto oom;
  }
  return s->buf[which];
oom:
  fprintf(stderr, "cohort: out of memory for a convolution's scratch (%zu bytes)\n", bytes);
  abort();
}

/* ---- which path ---- */
static CohortCpuConvPath conv_path = COHORT_CPU_CONV_ONEDNN;
static pthread_once_t path_once = PTHREAD_ONCE_INIT;

static void choose_default(void)
{
  if (!cohort_cpu_conv_path_available(COHORT_CPU_CONV_ONEDNN))
    conv_path = COHORT_CPU_CONV_IM2COL;
}

int cohort_cpu_conv_path_available(CohortCpuConvPath path)
{
  if (path == COHORT_CPU_CONV_IM2COL)
    return 1;
#if COHORT_HAVE_ONEDNN
  /* oneDNN is there when it makes a primitive for the smallest convolution. */
  CohortConvDims one;
  cohort_conv_dims(&one, 1, 1, 1, 1, 1, 1, 1, 0);
  return path == COHORT_CPU_CONV_ONEDNN && cohort_onednn_conv2d_impl(0, 1, &one) != NULL;
#else
  return 0;
#endif
}

int cohort_cpu_conv_select(CohortCpuConvPath path)
{
  pthread_once(&path_once, choose_default);
  if (!cohort_cpu_conv_path_available(path))
    return 0;
  conv_path = path;
  return 1;
}

CohortCpuConvPath cohort_cpu_conv_path(void)
{
  pthread_once(&path_once, choose_default);
  return conv_path;
}

static int use_onednn(void)
{
#if COHORT_HAVE_ONEDNN
  return cohort_cpu_conv_path() == COHORT_CPU_CONV_ONEDNN;
#else
  return 0;
#endif
}

int cohort_conv_dims(CohortConvDims *d, int B, int C, int H, int W, int O, int K, int S, int P)
{
  *d = (CohortConvDims){.B = B, .C = C, .H = H, .W = W, .O = O, .K = K, .S = S, .P = P};
  if (B <= 0 || C <= 0 || O <= 0 || K < 1 || S < 1 || P < 0 || H + 2 * P < K || W + 2 * P < K)
    return 0;
  d->Ho = (H + 2 * P - K) / S + 1;
  d->Wo = (W + 2 * P - K) / S + 1;
  return d->Ho > 0 && d->Wo > 0;
}

/* In bf16 and fp16 mode, a copy of src rounded to the mode's precision in scratch `which`;
 * otherwise src itself. (The im2col path needs none: its gemm rounds.) */
static const float *rounded(CohortConvScratch which, const float *src, size_t n)
{
  CohortGemmMode mode = cohort_cpu_get_gemm_mode();
  if (mode != COHORT_GEMM_BF16 && mode != COHORT_GEMM_FP16)
    return src;
  float *dst = cohort_cpu_conv_scratch(which, n * sizeof(float));
  for (size_t i = 0; i < n; i++)
    dst[i] = mode == COHORT_GEMM_BF16 ? cohort_round_bf16(src[i]) : cohort_round_fp16(src[i]);
  return dst;
}

static size_t n_in(const CohortConvDims *d)
{
  return (size_t)d->B * d->C * d->H * d->W;
}

static size_t n_out(const CohortConvDims *d)
{
  return (size_t)d->B * d->O * d->Ho * d->Wo;
}

static size_t n_weight(const CohortConvDims *d)
{
  return (size_t)d->O * d->C * d->K * d->K;
}

/* ---- NCHW ---- */
void cohort_cpu_conv2d_forward(float *out, const float *inp, const float *weight, int B, int C_in,
                               int H, int W, int C_out, int K, int stride, int pad)
{
  CohortConvDims d;
  if (!cohort_conv_dims(&d, B, C_in, H, W, C_out, K, stride, pad))
    return;
  if (use_onednn() && cohort_onednn_conv2d_forward(
                          0, out, rounded(COHORT_CONV_SCRATCH_ROUNDED_X, inp, n_in(&d)),
                          rounded(COHORT_CONV_SCRATCH_ROUNDED_W, weight, n_weight(&d)), &d))
    return;
  cohort_cpu_conv2d_im2col_forward(out, inp, weight, &d);
}

/* The backward on oneDNN: the weight gradient first, so that a failure there leaves nothing
 * added. Returns 0 when the caller must run the reference instead; *data_done tells whether
 * dinp has been taken care of. */
static int onednn_backward(int nhwc, float *dinp, int accumulate, float *dweight, const float *dout,
                           const float *inp, const float *weight, const CohortConvDims *d,
                           int *data_done)
{
  *data_done = 0;
  if (!use_onednn())
    return 0;
  const float *g = rounded(COHORT_CONV_SCRATCH_ROUNDED_DY, dout, n_out(d));
  /* dweight NULL: frozen weights (finetune), nothing to add */
  if (dweight && !cohort_onednn_conv2d_backward_weights(
                     nhwc, dweight, g, rounded(COHORT_CONV_SCRATCH_ROUNDED_X, inp, n_in(d)), d))
    return 0;
  *data_done = !dinp || cohort_onednn_conv2d_backward_data(
                            nhwc, dinp, accumulate, g,
                            rounded(COHORT_CONV_SCRATCH_ROUNDED_W, weight, n_weight(d)), d);
  return 1;
}

void cohort_cpu_conv2d_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                                const float *weight, int B, int C_in, int H, int W, int C_out,
                                int K, int stride, int pad)
{
  CohortConvDims d;
  if (!cohort_conv_dims(&d, B, C_in, H, W, C_out, K, stride, pad))
    return;
  int data_done;
  if (onednn_backward(0, dinp, 1, dweight, dout, inp, weight, &d, &data_done)) {
    if (data_done)
      return;
    /* oneDNN took the weights but not the data: the reference for dinp alone. */
    cohort_cpu_conv2d_im2col_backward(dinp, NULL, dout, inp, weight, &d);
    return;
  }
  cohort_cpu_conv2d_im2col_backward(dinp, dweight, dout, inp, weight, &d);
}

/* ---- NHWC ---- */

/* dst [B, C, HW] from src [B, HW, C], and back. */
static void nhwc_to_nchw(float *dst, const float *src, int B, int C, size_t HW)
{
#pragma omp parallel for schedule(static) if ((size_t)B * C * HW >= COHORT_CPU_PAR_MIN)
  for (int b = 0; b < B; b++)
    for (size_t p = 0; p < HW; p++)
      for (int c = 0; c < C; c++)
        dst[((size_t)b * C + c) * HW + p] = src[((size_t)b * HW + p) * C + c];
}

static void nchw_to_nhwc(float *dst, const float *src, int B, int C, size_t HW)
{
#pragma omp parallel for schedule(static) if ((size_t)B * C * HW >= COHORT_CPU_PAR_MIN)
  for (int b = 0; b < B; b++)
    for (size_t p = 0; p < HW; p++)
      for (int c = 0; c < C; c++)
        dst[((size_t)b * HW + p) * C + c] = src[((size_t)b * C + c) * HW + p];
}

void cohort_cpu_conv2d_nhwc_forward(float *out, const float *inp, const float *weight, int B,
                                    int C_in, int H, int W, int C_out, int K, int stride, int pad)
{
  CohortConvDims d;
  if (!cohort_conv_dims(&d, B, C_in, H, W, C_out, K, stride, pad))
    return;
  if (use_onednn() && cohort_onednn_conv2d_forward(
                          1, out, rounded(COHORT_CONV_SCRATCH_ROUNDED_X, inp, n_in(&d)),
                          rounded(COHORT_CONV_SCRATCH_ROUNDED_W, weight, n_weight(&d)), &d))
    return;
  float *x = cohort_cpu_conv_scratch(COHORT_CONV_SCRATCH_NCHW_X, n_in(&d) * sizeof(float));
  float *y = cohort_cpu_conv_scratch(COHORT_CONV_SCRATCH_NCHW_Y, n_out(&d) * sizeof(float));
  nhwc_to_nchw(x, inp, B, C_in, (size_t)H * W);
  cohort_cpu_conv2d_im2col_forward(y, x, weight, &d);
  nchw_to_nhwc(out, y, B, C_out, (size_t)d.Ho * d.Wo);
}

/* A 1×1 convolution without padding, NHWC, is a product over the pixels it reads (every S-th
 * row and column): dweight [O, C] += dout^T xs and dxs = dout weight, xs and dxs those pixels'
 * input and input gradient [B·Ho·Wo, C]. oneDNN 2.6 builds no backward for the strided one on
 * AVX2 (ResNets' downsampling shortcuts), where the im2col reference went through NCHW copies.
 * dinp or dweight NULL: that gradient is not wanted. */
static void conv1x1_nhwc_backward(float *dinp, int accumulate, float *dweight, const float *dout,
                                  const float *inp, const float *weight, const CohortConvDims *d)
{
  int C = d->C, O = d->O, S = d->S;
  size_t P = (size_t)d->B * d->Ho * d->Wo;
  const float *xs = inp;
  if (dweight) {
    if (S != 1) {
      float *g = cohort_cpu_conv_scratch(COHORT_CONV_SCRATCH_NCHW_X, P * C * sizeof(float));
#pragma omp parallel for schedule(static) if (P * C >= COHORT_CPU_PAR_MIN)
      for (size_t p = 0; p < P; p++) {
        size_t b = p / ((size_t)d->Ho * d->Wo), r = p % ((size_t)d->Ho * d->Wo);
        size_t y = r / d->Wo * S, x = r % d->Wo * S;
        memcpy(g + p * C, inp + ((b * d->H + y) * d->W + x) * C, sizeof(float) * C);
      }
      xs = g;
    }
    /* Image by image, in order: each image's terms are then summed the same way whatever the
     * batch, as the reference does, so a batch split across ranks adds up to the whole batch
     * on one rank but for the order of the images' sums. One product over all the pixels
     * summed batch 2 and batch 4 apart, and in a small ResNet that was enough to flip a ReLU
     * within ten steps (tests/test-lora-ddp.c, /lora-ddp/resnet-conv: 3e-3 instead of 4e-6). */
    size_t HWo = (size_t)d->Ho * d->Wo;
    for (int b = 0; b < d->B; b++)
      cohort_cpu_gemm(1, 0, O, C, (int)HWo, 1.0f, dout + b * HWo * O, O, xs + b * HWo * C, C, 1.0f,
                      dweight, C);
  }
  if (!dinp)
    return;
  if (S == 1) {
    cohort_cpu_gemm(0, 0, (int)P, C, O, 1.0f, dout, O, weight, C, accumulate ? 1.0f : 0.0f, dinp,
                    C);
    return;
  }
  float *dxs = cohort_cpu_conv_scratch(COHORT_CONV_SCRATCH_NCHW_DX, P * C * sizeof(float));
  cohort_cpu_gemm(0, 0, (int)P, C, O, 1.0f, dout, O, weight, C, 0.0f, dxs, C);
  if (!accumulate)
    memset(dinp, 0, sizeof(float) * (size_t)d->B * d->H * d->W * C);
#pragma omp parallel for schedule(static) if (P * C >= COHORT_CPU_PAR_MIN)
  for (size_t p = 0; p < P; p++) {
    size_t b = p / ((size_t)d->Ho * d->Wo), r = p % ((size_t)d->Ho * d->Wo);
    size_t y = r / d->Wo * S, x = r % d->Wo * S;
    float *dst = dinp + ((b * d->H + y) * d->W + x) * C;
    const float *src = dxs + p * C;
    for (int c = 0; c < C; c++)
      dst[c] += src[c];
  }
}

void cohort_cpu_conv2d_nhwc_backward(float *dinp, int accumulate, float *dweight, const float *dout,
                                     const float *inp, const float *weight, int B, int C_in, int H,
                                     int W, int C_out, int K, int stride, int pad)
{
  CohortConvDims d;
  if (!cohort_conv_dims(&d, B, C_in, H, W, C_out, K, stride, pad))
    return;
  int data_done;
  int weights_done =
      onednn_backward(1, dinp, accumulate, dweight, dout, inp, weight, &d, &data_done);
  if (weights_done && data_done)
    return;
  if (K == 1 && pad == 0) {
    conv1x1_nhwc_backward(data_done ? NULL : dinp, accumulate, weights_done ? NULL : dweight, dout,
                          inp, weight, &d);
    return;
  }
  size_t HW = (size_t)H * W;
  float *g = cohort_cpu_conv_scratch(COHORT_CONV_SCRATCH_NCHW_DY, n_out(&d) * sizeof(float));
  float *x = cohort_cpu_conv_scratch(COHORT_CONV_SCRATCH_NCHW_X, n_in(&d) * sizeof(float));
  float *dx =
      dinp ? cohort_cpu_conv_scratch(COHORT_CONV_SCRATCH_NCHW_DX, n_in(&d) * sizeof(float)) : NULL;
  nhwc_to_nchw(g, dout, B, C_out, (size_t)d.Ho * d.Wo);
  nhwc_to_nchw(x, inp, B, C_in, HW);
  if (dx && accumulate)
    nhwc_to_nchw(dx, dinp, B, C_in, HW);
  else if (dx)
    memset(dx, 0, n_in(&d) * sizeof(float));
  /* When oneDNN already added the weight gradient, the reference computes dinp alone. */
  float *dw = weights_done ? NULL : dweight;
  cohort_cpu_conv2d_im2col_backward(dx, dw, g, x, weight, &d);
  if (dx)
    nchw_to_nhwc(dinp, dx, B, C_in, HW);
}

/* ---- global average pooling ---- */
void cohort_cpu_avgpool_global_forward(float *out, const float *inp, int B, int C, int HW)
{
  if (HW <= 0)
    return;
#pragma omp parallel for schedule(static) if ((size_t)B * C * HW >= COHORT_CPU_PAR_MIN)
  for (int i = 0; i < B * C; i++)
    out[i] = cohort_row_sum(inp + (size_t)i * HW, HW) / (float)HW;
}

COHORT_VEC static void add_const(float *restrict d, float v, int n)
{
  for (int i = 0; i < n; i++)
    d[i] += v;
}

void cohort_cpu_avgpool_global_backward(float *dinp, const float *dout, int B, int C, int HW)
{
  if (HW <= 0)
    return;
#pragma omp parallel for schedule(static) if ((size_t)B * C * HW >= COHORT_CPU_PAR_MIN)
  for (int i = 0; i < B * C; i++)
    add_const(dinp + (size_t)i * HW, dout[i] / (float)HW, HW);
}

COHORT_VEC static void add_row(float *restrict acc, const float *restrict x, int n)
{
  for (int i = 0; i < n; i++)
    acc[i] += x[i];
}

COHORT_VEC static void add_scaled_row(float *restrict d, const float *restrict g, float s, int n)
{
  for (int i = 0; i < n; i++)
    d[i] += g[i] * s;
}

void cohort_cpu_avgpool_global_nhwc_forward(float *out, const float *inp, int B, int C, int HW)
{
  if (HW <= 0 || C <= 0)
    return;
#pragma omp parallel for schedule(static) if ((size_t)B * C * HW >= COHORT_CPU_PAR_MIN)
  for (int b = 0; b < B; b++) {
    float *o = out + (size_t)b * C;
    const float *x = inp + (size_t)b * HW * C;
    memset(o, 0, (size_t)C * sizeof(float));
    for (int p = 0; p < HW; p++)
      add_row(o, x + (size_t)p * C, C);
    for (int c = 0; c < C; c++)
      o[c] /= (float)HW;
  }
}

void cohort_cpu_avgpool_global_nhwc_backward(float *dinp, const float *dout, int B, int C, int HW)
{
  if (HW <= 0 || C <= 0)
    return;
  float s = 1.0f / (float)HW;
#pragma omp parallel for schedule(static) if ((size_t)B * C * HW >= COHORT_CPU_PAR_MIN)
  for (int b = 0; b < B; b++)
    for (int p = 0; p < HW; p++)
      add_scaled_row(dinp + ((size_t)b * HW + p) * C, dout + (size_t)b * C, s, C);
}

/* ---- max-pooling, NHWC ---- */

/* PyTorch's rule per channel, in window order (kh, kw): a value wins when it is greater than
 * the current maximum or is NaN, so the first maximum wins and a NaN propagates (the last NaN
 * of the window). The maximum starts at -inf with the window's first element as its place. */
COHORT_VEC static void max_step(float *restrict best, int *restrict at, const float *restrict x,
                                int where, int C)
{
  for (int c = 0; c < C; c++) {
    float v = x[c];
    int take = v > best[c] || v != v;
    best[c] = take ? v : best[c];
    at[c] = take ? where : at[c];
  }
}

typedef struct {
  int C, H, W, K, S, P, Ho, Wo;
} PoolShape;

static int pool_shape(PoolShape *s, int C, int H, int W, int K, int S, int P)
{
  *s = (PoolShape){.C = C, .H = H, .W = W, .K = K, .S = S, .P = P};
  if (C <= 0 || K < 1 || S < 1 || P < 0 || 2 * P > K || H + 2 * P < K || W + 2 * P < K)
    return 0;
  s->Ho = (H + 2 * P - K) / S + 1;
  s->Wo = (W + 2 * P - K) / S + 1;
  return 1;
}

/* The maximum of output pixel (oh, ow) of one image into best[C], its input pixels into at[C]. */
static void pool_window(const PoolShape *s, const float *img, int oh, int ow, float *best, int *at)
{
  int h0 = oh * s->S - s->P, w0 = ow * s->S - s->P;
  int h1 = h0 + s->K < s->H ? h0 + s->K : s->H, w1 = w0 + s->K < s->W ? w0 + s->K : s->W;
  h0 = h0 > 0 ? h0 : 0;
  w0 = w0 > 0 ? w0 : 0;
  for (int c = 0; c < s->C; c++) {
    best[c] = -INFINITY;
    at[c] = h0 * s->W + w0;
  }
  for (int h = h0; h < h1; h++)
    for (int w = w0; w < w1; w++)
      max_step(best, at, img + ((size_t)h * s->W + w) * s->C, h * s->W + w, s->C);
}

void cohort_cpu_maxpool2d_nhwc_forward(float *out, const float *inp, int B, int C, int H, int W,
                                       int K, int stride, int pad)
{
  PoolShape s;
  if (B <= 0 || !pool_shape(&s, C, H, W, K, stride, pad))
    return;
  size_t plane = (size_t)H * W * C, oplane = (size_t)s.Ho * s.Wo * C;
#pragma omp parallel if ((size_t)B * oplane * K * K >= COHORT_CPU_PAR_MIN)
  {
    int *at = malloc((size_t)C * sizeof(int));
    if (!at)
      abort();
#pragma omp for schedule(static)
    for (int b = 0; b < B; b++)
      for (int oh = 0; oh < s.Ho; oh++)
        for (int ow = 0; ow < s.Wo; ow++)
          pool_window(&s, inp + b * plane, oh, ow, out + b * oplane + ((size_t)oh * s.Wo + ow) * C,
                      at);
    free(at);
  }
}

void cohort_cpu_maxpool2d_nhwc_backward(float *dinp, const float *dout, const float *inp, int B,
                                        int C, int H, int W, int K, int stride, int pad)
{
  PoolShape s;
  if (B <= 0 || !pool_shape(&s, C, H, W, K, stride, pad))
    return;
  size_t plane = (size_t)H * W * C, oplane = (size_t)s.Ho * s.Wo * C;
  /* One image per thread: each input element gets its terms in the outputs' order. */
#pragma omp parallel if ((size_t)B * oplane * K * K >= COHORT_CPU_PAR_MIN)
  {
    int *at = malloc((size_t)C * sizeof(int));
    float *best = malloc((size_t)C * sizeof(float));
    if (!at || !best)
      abort();
#pragma omp for schedule(static)
    for (int b = 0; b < B; b++)
      for (int oh = 0; oh < s.Ho; oh++)
        for (int ow = 0; ow < s.Wo; ow++) {
          pool_window(&s, inp + b * plane, oh, ow, best, at);
          const float *g = dout + b * oplane + ((size_t)oh * s.Wo + ow) * C;
          float *dx = dinp + b * plane;
          for (int c = 0; c < C; c++)
            dx[(size_t)at[c] * C + c] += g[c];
        }
    free(at);
    free(best);
  }
}

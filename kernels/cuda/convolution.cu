/* Convolution and pooling: conv2d in NCHW and channels-last (NHWC) through cuDNN where the
 * build has it (convolution-cudnn.cu), else im2col + cuBLAS (NHWC through transposes); global
 * average pooling in both layouts, max-pooling in NHWC. */
#include "cuda.cuh"
#include "cohort-build-config.h"

#define MAX_DEVICES 64
#define THREADS     256
/* The column matrix of a group stays under this many floats (256 MiB): a ResNet-20 batch of
 * 128 CIFAR images needs 19M at most, so it is one group there. */
#define GROUP_FLOATS   ((size_t)64 << 20)
#define ROWS_PER_BLOCK 8

/* The convolutions' own buffers, per device: the column matrix, and the output (forward) or dout
 * (backward) in the GEMM layout.
 * Not cohort_cuda_scratch: the bf16/fp16 GEMM takes that one for its rounded operands while
 * the column matrix is still needed. Freed when the process ends, with its CUDA context. */
static float *conv_buf[MAX_DEVICES][2];

static size_t conv_cap[MAX_DEVICES][2];

static float *conv_scratch(int which, size_t n)
{
  int d = cohort_cuda_get_device();
  if (d < 0 || d >= MAX_DEVICES) {
    cohort_cuda_fail("cuda: conv2d: no usable device for scratch memory");
    return NULL;
  }
  if (conv_cap[d][which] < n) {
    /* cudaFree waits for the device, so no kernel still uses the old buffer. */
    cohort_cuda_ok(cudaFree(conv_buf[d][which]), "cudaFree (conv2d scratch)");
    conv_buf[d][which] = NULL;
    conv_cap[d][which] = 0;
    if (!cohort_cuda_ok(cudaMalloc(&conv_buf[d][which], n * sizeof(float)),
                        "cudaMalloc (conv2d scratch)"))
      return NULL;
    conv_cap[d][which] = n;
  }
  return conv_buf[d][which];
}

struct ConvShape {
  int C, H, W, K, stride, pad, Ho, Wo;
};

/* col [C*K*K, G*Ho*Wo] of G images: row r = (c, kh, kw), column g*Ho*Wo + oh*Wo + ow. */
__global__ static void im2col_kernel(float *col, const float *inp, int G, ConvShape s)
{
  size_t howo = (size_t)s.Ho * s.Wo, ncol = (size_t)G * howo;
  size_t total = (size_t)s.C * s.K * s.K * ncol;
  COHORT_GRID_STRIDE(i, total)
  {
    size_t r = i / ncol, j = i % ncol;
    int g = (int)(j / howo), p = (int)(j % howo);
    int c = (int)(r / (s.K * s.K)), kh = (int)(r / s.K % s.K), kw = (int)(r % s.K);
    int ih = p / s.Wo * s.stride - s.pad + kh, iw = p % s.Wo * s.stride - s.pad + kw;
    float v = 0.0f;
    if (ih >= 0 && ih < s.H && iw >= 0 && iw < s.W)
      v = inp[(((size_t)g * s.C + c) * s.H + ih) * s.W + iw];
    col[i] = v;
  }
}

/* dinp += col2im(dcol), gathered: each input element adds the columns that read it, in
 * (kh, kw) order (the CPU backend's order), so no two threads write one element. */
__global__ static void col2im_kernel(float *dinp, const float *dcol, int G, ConvShape s)
{
  size_t howo = (size_t)s.Ho * s.Wo, ncol = (size_t)G * howo;
  size_t total = (size_t)G * s.C * s.H * s.W;
  COHORT_GRID_STRIDE(i, total)
  {
    int iw = (int)(i % s.W), ih = (int)(i / s.W % s.H);
    int c = (int)(i / ((size_t)s.W * s.H) % s.C), g = (int)(i / ((size_t)s.W * s.H * s.C));
    float d = dinp[i];
    for (int kh = 0; kh < s.K; kh++) {
      int th = ih + s.pad - kh; /* = oh * stride */
      if (th < 0 || th % s.stride != 0 || th / s.stride >= s.Ho)
        continue;
      int oh = th / s.stride;
      for (int kw = 0; kw < s.K; kw++) {
        int tw = iw + s.pad - kw;
        if (tw < 0 || tw % s.stride != 0 || tw / s.stride >= s.Wo)
          continue;
        size_t r = ((size_t)c * s.K + kh) * s.K + kw;
        d += dcol[r * ncol + (size_t)g * howo + (size_t)oh * s.Wo + tw / s.stride];
      }
    }
    dinp[i] = d;
  }
}

/* Between the GEMM layout [rows, G*run] and NCHW [G, rows, run]. */
__global__ static void regroup_kernel(float *dst, const float *src, int G, int rows, size_t run,
                                      int to_nchw)
{
  size_t total = (size_t)G * rows * run;
  COHORT_GRID_STRIDE(i, total)
  {
    size_t k = i % run, gr = i / run; /* i indexes NCHW: gr = g * rows + r */
    size_t g = gr / rows, r = gr % rows;
    size_t gemm = (r * G + g) * run + k;
    if (to_nchw)
      dst[i] = src[gemm];
    else
      dst[gemm] = src[i];
  }
}

static bool conv_shape(ConvShape *s, int C_in, int H, int W, int K, int stride, int pad)
{
  *s = ConvShape{C_in, H, W, K, stride, pad, 0, 0};
  if (K < 1 || stride < 1 || pad < 0 || H + 2 * pad < K || W + 2 * pad < K)
    return false;
  s->Ho = (H + 2 * pad - K) / stride + 1;
  s->Wo = (W + 2 * pad - K) / stride + 1;
  return s->Ho > 0 && s->Wo > 0;
}

static int conv_group(int B, size_t ckk, size_t howo)
{
  size_t g = GROUP_FLOATS / (ckk * howo);
  return g < 1 ? 1 : (g > (size_t)B ? B : (int)g);
}

static void im2col_forward(float *out, const float *inp, const float *weight, int B, int C_in,
                           int H, int W, int C_out, int K, int stride, int pad)
{
  ConvShape s;
  if (!conv_shape(&s, C_in, H, W, K, stride, pad) || B <= 0 || C_in <= 0 || C_out <= 0)
    return;
  int ckk = C_in * K * K;
  size_t howo = (size_t)s.Ho * s.Wo, hw = (size_t)H * W;
  int G = conv_group(B, ckk, howo);
  float *col = conv_scratch(0, (size_t)ckk * G * howo);
  float *tmp = G > 1 ? conv_scratch(1, (size_t)C_out * G * howo) : NULL;
  if (!col || (G > 1 && !tmp))
    return;
  for (int b0 = 0; b0 < B; b0 += G) {
    int g = B - b0 < G ? B - b0 : G;
    size_t ncol = (size_t)g * howo;
    float *o = out + (size_t)b0 * C_out * howo;
    im2col_kernel<<<cohort_cuda_blocks((size_t)ckk * ncol, THREADS), THREADS>>>(
        col, inp + (size_t)b0 * C_in * hw, g, s);
    if (!cohort_cuda_launched("conv2d_forward (im2col)"))
      return;
    /* one image: the GEMM's result is already NCHW */
    cohort_cuda_gemm(0, 0, C_out, (int)ncol, ckk, 1.0f, weight, ckk, col, (int)ncol, 0.0f,
                     g > 1 ? tmp : o, (int)ncol);
    if (g == 1)
      continue;
    size_t n_out = (size_t)C_out * ncol;
    regroup_kernel<<<cohort_cuda_blocks(n_out, THREADS), THREADS>>>(o, tmp, g, C_out, howo, 1);
    if (!cohort_cuda_launched("conv2d_forward (to NCHW)"))
      return;
  }
}

static void im2col_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                            const float *weight, int B, int C_in, int H, int W, int C_out, int K,
                            int stride, int pad)
{
  ConvShape s;
  if (!conv_shape(&s, C_in, H, W, K, stride, pad) || B <= 0 || C_in <= 0 || C_out <= 0 ||
      (!dinp && !dweight))
    return;
  int ckk = C_in * K * K;
  size_t howo = (size_t)s.Ho * s.Wo, hw = (size_t)H * W;
  int G = conv_group(B, ckk, howo);
  float *col = conv_scratch(0, (size_t)ckk * G * howo);
  float *dt = G > 1 ? conv_scratch(1, (size_t)C_out * G * howo) : NULL;
  if (!col || (G > 1 && !dt))
    return;
  for (int b0 = 0; b0 < B; b0 += G) {
    int g = B - b0 < G ? B - b0 : G;
    size_t ncol = (size_t)g * howo, n_out = (size_t)C_out * ncol;
    const float *d = dout + (size_t)b0 * C_out * howo;
    if (g > 1) {
      regroup_kernel<<<cohort_cuda_blocks(n_out, THREADS), THREADS>>>(dt, d, g, C_out, howo, 0);
      if (!cohort_cuda_launched("conv2d_backward (to GEMM layout)"))
        return;
      d = dt;
    }
    if (dweight) {
      im2col_kernel<<<cohort_cuda_blocks((size_t)ckk * ncol, THREADS), THREADS>>>(
          col, inp + (size_t)b0 * C_in * hw, g, s);
      if (!cohort_cuda_launched("conv2d_backward (im2col)"))
        return;
      /* dweight [C_out, ckk] += dout [C_out, ncol] @ col^T, groups in order */
      cohort_cuda_gemm(0, 1, C_out, ckk, (int)ncol, 1.0f, d, (int)ncol, col, (int)ncol, 1.0f,
                       dweight, ckk);
    }
    if (!dinp)
      continue;
    /* dcol [ckk, ncol] = weight^T @ dout, into the column buffer */
    cohort_cuda_gemm(1, 0, ckk, (int)ncol, C_out, 1.0f, weight, ckk, d, (int)ncol, 0.0f, col,
                     (int)ncol);
    size_t n_in = (size_t)g * C_in * hw;
    col2im_kernel<<<cohort_cuda_blocks(n_in, THREADS), THREADS>>>(dinp + (size_t)b0 * C_in * hw,
                                                                  col, g, s);
    if (!cohort_cuda_launched("conv2d_backward (col2im)"))
      return;
  }
}

void cohort_cuda_conv2d_forward(float *out, const float *inp, const float *weight, int B, int C_in,
                                int H, int W, int C_out, int K, int stride, int pad)
{
#if COHORT_HAVE_CUDNN
  if (cohort_cudnn_conv2d_forward(false, out, inp, weight, B, C_in, H, W, C_out, K, stride, pad))
    return;
#endif
  im2col_forward(out, inp, weight, B, C_in, H, W, C_out, K, stride, pad);
}

void cohort_cuda_conv2d_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                                 const float *weight, int B, int C_in, int H, int W, int C_out,
                                 int K, int stride, int pad)
{
#if COHORT_HAVE_CUDNN
  if (cohort_cudnn_conv2d_backward(false, dinp, true, dweight, dout, inp, weight, B, C_in, H, W,
                                   C_out, K, stride, pad))
    return;
#endif
  im2col_backward(dinp, dweight, dout, inp, weight, B, C_in, H, W, C_out, K, stride, pad);
}

/* dst [B, C, HW] from src [B, HW, C] (to_nchw) or back; i indexes dst. With `add`, dst +=. */
__global__ static void layout_kernel(float *dst, const float *src, int C, size_t HW, size_t total,
                                     bool to_nchw, bool add)
{
  COHORT_GRID_STRIDE(i, total)
  {
    size_t b, c, p;
    if (to_nchw) {
      p = i % HW;
      c = i / HW % C;
      b = i / (HW * C);
    } else {
      c = i % C;
      p = i / C % HW;
      b = i / (HW * C);
    }
    size_t from = to_nchw ? (b * HW + p) * C + c : (b * C + c) * HW + p;
    dst[i] = add ? dst[i] + src[from] : src[from];
  }
}

static bool relayout(float *dst, const float *src, int B, int C, size_t HW, bool to_nchw, bool add)
{
  size_t total = (size_t)B * C * HW;
  layout_kernel<<<cohort_cuda_blocks(total, THREADS), THREADS>>>(dst, src, C, HW, total, to_nchw,
                                                                 add);
  return cohort_cuda_launched("conv2d_nhwc (layout)");
}

/* The NHWC fallback's buffers: the convolution's own two are im2col's, so these are separate. */
static float *nhwc_buf[MAX_DEVICES][3];
static size_t nhwc_cap[MAX_DEVICES][3];

static float *nhwc_scratch(int which, size_t n)
{
  int d = cohort_cuda_get_device();
  if (d < 0 || d >= MAX_DEVICES) {
    cohort_cuda_fail("cuda: conv2d_nhwc: no usable device for scratch memory");
    return NULL;
  }
  if (nhwc_cap[d][which] < n) {
    cohort_cuda_ok(cudaFree(nhwc_buf[d][which]), "cudaFree (conv2d_nhwc scratch)");
    nhwc_buf[d][which] = NULL;
    nhwc_cap[d][which] = 0;
    if (!cohort_cuda_ok(cudaMalloc(&nhwc_buf[d][which], n * sizeof(float)),
                        "cudaMalloc (conv2d_nhwc scratch)"))
      return NULL;
    nhwc_cap[d][which] = n;
  }
  return nhwc_buf[d][which];
}

void cohort_cuda_conv2d_nhwc_forward(float *out, const float *inp, const float *weight, int B,
                                     int C_in, int H, int W, int C_out, int K, int stride, int pad)
{
  ConvShape s;
  if (!conv_shape(&s, C_in, H, W, K, stride, pad) || B <= 0 || C_in <= 0 || C_out <= 0)
    return;
#if COHORT_HAVE_CUDNN
  if (cohort_cudnn_conv2d_forward(true, out, inp, weight, B, C_in, H, W, C_out, K, stride, pad))
    return;
#endif
  size_t hw = (size_t)H * W, howo = (size_t)s.Ho * s.Wo;
  float *x = nhwc_scratch(0, (size_t)B * C_in * hw), *y = nhwc_scratch(1, (size_t)B * C_out * howo);
  if (!x || !y || !relayout(x, inp, B, C_in, hw, true, false))
    return;
  im2col_forward(y, x, weight, B, C_in, H, W, C_out, K, stride, pad);
  relayout(out, y, B, C_out, howo, false, false);
}

void cohort_cuda_conv2d_nhwc_backward(float *dinp, int accumulate, float *dweight,
                                      const float *dout, const float *inp, const float *weight,
                                      int B, int C_in, int H, int W, int C_out, int K, int stride,
                                      int pad)
{
  ConvShape s;
  if (!conv_shape(&s, C_in, H, W, K, stride, pad) || B <= 0 || C_in <= 0 || C_out <= 0)
    return;
#if COHORT_HAVE_CUDNN
  if (cohort_cudnn_conv2d_backward(true, dinp, accumulate != 0, dweight, dout, inp, weight, B, C_in,
                                   H, W, C_out, K, stride, pad))
    return;
#endif
  size_t hw = (size_t)H * W, howo = (size_t)s.Ho * s.Wo, n_in = (size_t)B * C_in * hw;
  float *g = nhwc_scratch(0, (size_t)B * C_out * howo), *x = nhwc_scratch(1, n_in);
  float *dx = dinp ? nhwc_scratch(2, n_in) : NULL;
  if (!g || !x || (dinp && !dx) || !relayout(g, dout, B, C_out, howo, true, false) ||
      !relayout(x, inp, B, C_in, hw, true, false))
    return;
  if (dx && !cohort_cuda_ok(cudaMemset(dx, 0, n_in * sizeof(float)), "cudaMemset (conv2d_nhwc)"))
    return;
  im2col_backward(dx, dweight, g, x, weight, B, C_in, H, W, C_out, K, stride, pad);
  if (dx)
    relayout(dinp, dx, B, C_in, hw, false, accumulate != 0);
}

__global__ static void pool_kernel(float *out, const float *inp, int rows, int HW)
{
  int lane = threadIdx.x % COHORT_WARP;
  int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / COHORT_WARP;
  if (row >= rows)
    return; /* whole warps leave together */
  const float *x = inp + (size_t)row * HW;
  float s = 0.0f;
  for (int i = lane; i < HW; i += COHORT_WARP)
    s += x[i];
  s = cohort_warp_sum(s);
  if (lane == 0)
    out[row] = s / (float)HW;
}

__global__ static void pool_back_kernel(float *dinp, const float *dout, int HW, size_t total)
{
  COHORT_GRID_STRIDE(i, total)
  dinp[i] += dout[i / HW] / (float)HW;
}

void cohort_cuda_avgpool_global_forward(float *out, const float *inp, int B, int C, int HW)
{
  int rows = B * C;
  if (rows <= 0 || HW <= 0)
    return;
  pool_kernel<<<(rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK, ROWS_PER_BLOCK * COHORT_WARP>>>(
      out, inp, rows, HW);
  cohort_cuda_launched("avgpool_global_forward");
}

void cohort_cuda_avgpool_global_backward(float *dinp, const float *dout, int B, int C, int HW)
{
  size_t total = (size_t)(B > 0 ? B : 0) * (C > 0 ? C : 0) * (HW > 0 ? HW : 0);
  if (total == 0)
    return;
  pool_back_kernel<<<cohort_cuda_blocks(total, 256), 256>>>(dinp, dout, HW, total);
  cohort_cuda_launched("avgpool_global_backward");
}

/* out[b, c] = mean over p of inp[b, p, c]: one thread per (b, c), neighbours read neighbours. */
__global__ static void pool_nhwc_kernel(float *out, const float *inp, int C, int HW, size_t total)
{
  COHORT_GRID_STRIDE(i, total)
  {
    size_t b = i / C, c = i % C;
    const float *x = inp + b * HW * C + c;
    float s = 0.0f;
    for (int p = 0; p < HW; p++)
      s += x[(size_t)p * C];
    out[i] = s / (float)HW;
  }
}

__global__ static void pool_nhwc_back_kernel(float *dinp, const float *dout, int C, int HW,
                                             size_t total)
{
  COHORT_GRID_STRIDE(i, total)
  {
    size_t c = i % C, b = i / ((size_t)HW * C);
    dinp[i] += dout[b * C + c] * (1.0f / (float)HW);
  }
}

void cohort_cuda_avgpool_global_nhwc_forward(float *out, const float *inp, int B, int C, int HW)
{
  if (B <= 0 || C <= 0 || HW <= 0)
    return;
  size_t total = (size_t)B * C;
  pool_nhwc_kernel<<<cohort_cuda_blocks(total, THREADS), THREADS>>>(out, inp, C, HW, total);
  cohort_cuda_launched("avgpool_global_nhwc_forward");
}

void cohort_cuda_avgpool_global_nhwc_backward(float *dinp, const float *dout, int B, int C, int HW)
{
  if (B <= 0 || C <= 0 || HW <= 0)
    return;
  size_t total = (size_t)B * HW * C;
  pool_nhwc_back_kernel<<<cohort_cuda_blocks(total, THREADS), THREADS>>>(dinp, dout, C, HW, total);
  cohort_cuda_launched("avgpool_global_nhwc_backward");
}

struct PoolShape {
  int C, H, W, K, S, P, Ho, Wo;
};

/* The CPU backend's rule (kernels/cpu/convolution.c): in window order, a value wins when it is
 * greater or NaN; the maximum starts at -inf at the window's first pixel. Returns the winning
 * pixel (h * W + w) of channel c of one image, its value in *best. */
__device__ static int pool_argmax(const float *img, const PoolShape &s, int oh, int ow, int c,
                                  float *best)
{
  int h0 = oh * s.S - s.P, w0 = ow * s.S - s.P;
  int h1 = min(h0 + s.K, s.H), w1 = min(w0 + s.K, s.W);
  h0 = max(h0, 0);
  w0 = max(w0, 0);
  float m = -INFINITY;
  int at = h0 * s.W + w0;
  for (int h = h0; h < h1; h++)
    for (int w = w0; w < w1; w++) {
      float v = img[((size_t)h * s.W + w) * s.C + c];
      if (v > m || v != v) {
        m = v;
        at = h * s.W + w;
      }
    }
  *best = m;
  return at;
}

__global__ static void maxpool_kernel(float *out, const float *inp, PoolShape s, size_t total)
{
  COHORT_GRID_STRIDE(i, total)
  {
    int c = (int)(i % s.C), ow = (int)(i / s.C % s.Wo), oh = (int)(i / ((size_t)s.C * s.Wo) % s.Ho);
    size_t b = i / ((size_t)s.C * s.Wo * s.Ho);
    float m;
    pool_argmax(inp + b * s.H * s.W * s.C, s, oh, ow, c, &m);
    out[i] = m;
  }
}

/* Gathered: each input element adds the gradients of the windows whose maximum it is, in the
 * windows' order (the CPU's), so no two threads write one element. */
__global__ static void maxpool_back_kernel(float *dinp, const float *dout, const float *inp,
                                           PoolShape s, size_t total)
{
  COHORT_GRID_STRIDE(i, total)
  {
    int c = (int)(i % s.C), w = (int)(i / s.C % s.W), h = (int)(i / ((size_t)s.C * s.W) % s.H);
    size_t b = i / ((size_t)s.C * s.W * s.H);
    const float *img = inp + b * s.H * s.W * s.C;
    int oh0 = max(0, (h + s.P - s.K + s.S) / s.S), oh1 = min(s.Ho - 1, (h + s.P) / s.S);
    int ow0 = max(0, (w + s.P - s.K + s.S) / s.S), ow1 = min(s.Wo - 1, (w + s.P) / s.S);
    float d = dinp[i], m;
    for (int oh = oh0; oh <= oh1; oh++)
      for (int ow = ow0; ow <= ow1; ow++)
        if (pool_argmax(img, s, oh, ow, c, &m) == h * s.W + w)
          d += dout[((b * s.Ho + oh) * s.Wo + ow) * s.C + c];
    dinp[i] = d;
  }
}

static bool pool_shape(PoolShape *s, int C, int H, int W, int K, int S, int P)
{
  *s = PoolShape{C, H, W, K, S, P, 0, 0};
  if (C <= 0 || K < 1 || S < 1 || P < 0 || 2 * P > K || H + 2 * P < K || W + 2 * P < K)
    return false;
  s->Ho = (H + 2 * P - K) / S + 1;
  s->Wo = (W + 2 * P - K) / S + 1;
  return true;
}

void cohort_cuda_maxpool2d_nhwc_forward(float *out, const float *inp, int B, int C, int H, int W,
                                        int K, int stride, int pad)
{
  PoolShape s;
  if (B <= 0 || !pool_shape(&s, C, H, W, K, stride, pad))
    return;
  size_t total = (size_t)B * s.Ho * s.Wo * C;
  maxpool_kernel<<<cohort_cuda_blocks(total, THREADS), THREADS>>>(out, inp, s, total);
  cohort_cuda_launched("maxpool2d_nhwc_forward");
}

void cohort_cuda_maxpool2d_nhwc_backward(float *dinp, const float *dout, const float *inp, int B,
                                         int C, int H, int W, int K, int stride, int pad)
{
  PoolShape s;
  if (B <= 0 || !pool_shape(&s, C, H, W, K, stride, pad))
    return;
  size_t total = (size_t)B * H * W * C;
  maxpool_back_kernel<<<cohort_cuda_blocks(total, THREADS), THREADS>>>(dinp, dout, inp, s, total);
  cohort_cuda_launched("maxpool2d_nhwc_backward");
}

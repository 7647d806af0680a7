/* Convolutional layers: conv2d (im2col + GEMM) and global average pooling, NCHW. */
#include "cuda.cuh"

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

void cohort_cuda_conv2d_forward(float *out, const float *inp, const float *weight, int B, int C_in,
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

void cohort_cuda_conv2d_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                                 const float *weight, int B, int C_in, int H, int W, int C_out,
                                 int K, int stride, int pad)
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

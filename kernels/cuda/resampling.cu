/* Resampling and padding of NCHW images: nearest up-sampling by an integer factor and zero
 * padding on each side. Backward passes are gathers (each input element sums its own outputs),
 * so no atomics. */
#include "cuda.cuh"

#define THREADS 256

__global__ static void upsample_kernel(float *out, const float *inp, size_t planes, int H, int W,
                                       int f)
{
  int Ho = H * f, Wo = W * f;
  size_t n = planes * Ho * Wo;
  COHORT_GRID_STRIDE(i, n)
  {
    size_t p = i / ((size_t)Ho * Wo);
    int y = (int)(i / Wo % Ho), x = (int)(i % Wo);
    out[i] = inp[(p * H + y / f) * W + x / f];
  }
}

__global__ static void upsample_back_kernel(float *dinp, const float *dout, size_t planes, int H,
                                            int W, int f)
{
  int Wo = W * f;
  size_t n = planes * H * W;
  COHORT_GRID_STRIDE(i, n)
  {
    size_t p = i / ((size_t)H * W);
    int y = (int)(i / W % H), x = (int)(i % W);
    const float *src = dout + (p * H * f + (size_t)y * f) * Wo + (size_t)x * f;
    float s = 0.0f;
    for (int ky = 0; ky < f; ky++)
      for (int kx = 0; kx < f; kx++)
        s += src[(size_t)ky * Wo + kx];
    dinp[i] += s;
  }
}

void cohort_cuda_upsample_nearest_forward(float *out, const float *inp, int B, int C, int H, int W,
                                          int f)
{
  size_t n = (size_t)B * C * H * W * f * f;
  if (n == 0)
    return;
  upsample_kernel<<<cohort_cuda_blocks(n, THREADS), THREADS>>>(out, inp, (size_t)B * C, H, W, f);
  cohort_cuda_launched("upsample_nearest_forward");
}

void cohort_cuda_upsample_nearest_backward(float *dinp, const float *dout, int B, int C, int H,
                                           int W, int f)
{
  size_t n = (size_t)B * C * H * W;
  if (n == 0 || f <= 0)
    return;
  upsample_back_kernel<<<cohort_cuda_blocks(n, THREADS), THREADS>>>(dinp, dout, (size_t)B * C, H, W,
                                                                    f);
  cohort_cuda_launched("upsample_nearest_backward");
}

__global__ static void pad_kernel(float *out, const float *inp, size_t planes, int H, int W,
                                  int top, int left, int Ho, int Wo)
{
  size_t n = planes * Ho * Wo;
  COHORT_GRID_STRIDE(i, n)
  {
    size_t p = i / ((size_t)Ho * Wo);
    int y = (int)(i / Wo % Ho) - top, x = (int)(i % Wo) - left;
    out[i] = y >= 0 && y < H && x >= 0 && x < W ? inp[(p * H + y) * W + x] : 0.0f;
  }
}

__global__ static void pad_back_kernel(float *dinp, const float *dout, size_t planes, int H, int W,
                                       int top, int left, int Ho, int Wo)
{
  size_t n = planes * H * W;
  COHORT_GRID_STRIDE(i, n)
  {
    size_t p = i / ((size_t)H * W);
    int y = (int)(i / W % H), x = (int)(i % W);
    dinp[i] += dout[(p * Ho + y + top) * Wo + x + left];
  }
}

void cohort_cuda_pad2d_forward(float *out, const float *inp, int B, int C, int H, int W, int top,
                               int bottom, int left, int right)
{
  int Ho = H + top + bottom, Wo = W + left + right;
  size_t n = (size_t)B * C * Ho * Wo;
  if (n == 0)
    return;
  pad_kernel<<<cohort_cuda_blocks(n, THREADS), THREADS>>>(out, inp, (size_t)B * C, H, W, top, left,
                                                          Ho, Wo);
  cohort_cuda_launched("pad2d_forward");
}

void cohort_cuda_pad2d_backward(float *dinp, const float *dout, int B, int C, int H, int W, int top,
                                int bottom, int left, int right)
{
  int Ho = H + top + bottom, Wo = W + left + right;
  size_t n = (size_t)B * C * H * W;
  if (n == 0)
    return;
  pad_back_kernel<<<cohort_cuda_blocks(n, THREADS), THREADS>>>(dinp, dout, (size_t)B * C, H, W, top,
                                                               left, Ho, Wo);
  cohort_cuda_launched("pad2d_backward");
}

/* Resampling and padding of NCHW images: nearest up-sampling by an integer factor (diffusers'
 * Upsample2D, F.interpolate(mode="nearest")) and zero padding by any amount on each side
 * (diffusers' Downsample2D pads right and bottom by one before its stride-2 convolution). */
#include "cpu.h"

#include <string.h>

void cohort_cpu_upsample_nearest_forward(float *out, const float *inp, int B, int C, int H, int W,
                                         int f)
{
  int Wo = W * f;
  size_t plane_in = (size_t)H * W, plane_out = plane_in * f * f;
#pragma omp parallel for schedule(static) if ((size_t)B * C * plane_out >= COHORT_CPU_PAR_MIN)
  for (int i = 0; i < B * C; i++) {
    const float *src = inp + (size_t)i * plane_in;
    float *dst = out + (size_t)i * plane_out;
    for (int y = 0; y < H; y++) {
      float *row = dst + (size_t)y * f * Wo;
      for (int x = 0; x < W; x++)
        for (int k = 0; k < f; k++)
          row[x * f + k] = src[(size_t)y * W + x];
      for (int k = 1; k < f; k++)
        memcpy(row + (size_t)k * Wo, row, (size_t)Wo * sizeof(float));
    }
  }
}

void cohort_cpu_upsample_nearest_backward(float *dinp, const float *dout, int B, int C, int H,
                                          int W, int f)
{
  int Wo = W * f;
  size_t plane_in = (size_t)H * W, plane_out = plane_in * f * f;
#pragma omp parallel for schedule(static) if ((size_t)B * C * plane_out >= COHORT_CPU_PAR_MIN)
  for (int i = 0; i < B * C; i++) {
    const float *src = dout + (size_t)i * plane_out;
    float *dst = dinp + (size_t)i * plane_in;
    for (int y = 0; y < H; y++)
      for (int x = 0; x < W; x++) {
        float s = 0.0f;
        for (int ky = 0; ky < f; ky++)
          for (int kx = 0; kx < f; kx++)
            s += src[((size_t)y * f + ky) * Wo + (size_t)x * f + kx];
        dst[(size_t)y * W + x] += s;
      }
  }
}

void cohort_cpu_pad2d_forward(float *out, const float *inp, int B, int C, int H, int W, int top,
                              int bottom, int left, int right)
{
  int Ho = H + top + bottom, Wo = W + left + right;
  size_t plane_out = (size_t)Ho * Wo;
#pragma omp parallel for schedule(static) if ((size_t)B * C * plane_out >= COHORT_CPU_PAR_MIN)
  for (int i = 0; i < B * C; i++) {
    float *dst = out + (size_t)i * plane_out;
    const float *src = inp + (size_t)i * H * W;
    memset(dst, 0, (size_t)top * Wo * sizeof(float));
    for (int y = 0; y < H; y++) {
      float *row = dst + (size_t)(y + top) * Wo;
      memset(row, 0, (size_t)left * sizeof(float));
      memcpy(row + left, src + (size_t)y * W, (size_t)W * sizeof(float));
      memset(row + left + W, 0, (size_t)right * sizeof(float));
    }
    memset(dst + (size_t)(H + top) * Wo, 0, (size_t)bottom * Wo * sizeof(float));
  }
}

void cohort_cpu_pad2d_backward(float *dinp, const float *dout, int B, int C, int H, int W, int top,
                               int bottom, int left, int right)
{
  int Ho = H + top + bottom, Wo = W + left + right;
  size_t plane_out = (size_t)Ho * Wo;
#pragma omp parallel for schedule(static) if ((size_t)B * C * plane_out >= COHORT_CPU_PAR_MIN)
  for (int i = 0; i < B * C; i++) {
    const float *src = dout + (size_t)i * plane_out;
    float *dst = dinp + (size_t)i * H * W;
    for (int y = 0; y < H; y++)
      for (int x = 0; x < W; x++)
        dst[(size_t)y * W + x] += src[(size_t)(y + top) * Wo + left + x];
  }
}

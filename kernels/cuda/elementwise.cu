/* Element-wise arithmetic: residual sums, axpby, scaling, and adaLN-Zero's modulation and
 * gated residual (per-example vectors broadcast over tokens). */
#include "cuda.cuh"
#include "kernels/math-inline.h"

#define TX          32 /* channels per block */
#define TY          8  /* token lanes per block */
#define MSE_THREADS 256
/* sum_squares: a fixed grid whatever the GPU, so the sum's order depends on n alone. */
#define SS_BLOCKS  512
#define SS_THREADS 256

__global__ static void add_kernel(float *out, const float *a, const float *b, size_t n)
{
  COHORT_GRID_STRIDE(i, n)
  out[i] = a[i] + b[i];
}

void cohort_cuda_residual_forward(float *out, const float *a, const float *b, size_t n)
{
  if (n == 0)
    return;
  add_kernel<<<cohort_cuda_blocks(n, 256), 256>>>(out, a, b, n);
  cohort_cuda_launched("residual_forward");
}

__global__ static void dropout_kernel(float *out, const float *inp, const uint64_t *keys,
                                      int rows_per_key, int cols, uint64_t salt, uint64_t threshold,
                                      float keep_scale, size_t n)
{
  COHORT_GRID_STRIDE(i, n)
  {
    int r = (int)(i / cols), c = (int)(i % cols);
    int keep = cohort_dropout_keep(keys[r / rows_per_key], (uint32_t)(r % rows_per_key),
                                   (uint32_t)c, salt, threshold);
    out[i] = keep ? inp[i] * keep_scale : 0.0f;
  }
}

void cohort_cuda_dropout(float *out, const float *inp, const uint64_t *keys, int rows,
                         int rows_per_key, int cols, uint64_t salt, float p)
{
  if (rows <= 0 || cols <= 0 || rows_per_key <= 0)
    return;
  size_t n = (size_t)rows * cols;
  dropout_kernel<<<cohort_cuda_blocks(n, 256), 256>>>(
      out, inp, keys, rows_per_key, cols, salt, cohort_dropout_threshold(p), 1.0f / (1.0f - p), n);
  cohort_cuda_launched("dropout");
}

/* Blocks for the backward kernels: channel tiles x samples (grid-stride over samples). */
static dim3 sample_grid(int B, int C)
{
  return dim3((unsigned)((C + TX - 1) / TX), (unsigned)(B < 65535 ? B : 65535));
}

__global__ static void modulate_kernel(float *out, const float *x, const float *shift,
                                       const float *scale, int T, int C, int ld, size_t n)
{
  COHORT_GRID_STRIDE(i, n)
  {
    size_t bt = i / C, v = (bt / T) * ld + i % C;
    out[i] = x[i] * (1.0f + scale[v]) + shift[v];
  }
}

void cohort_cuda_modulate_forward(float *out, const float *x, const float *shift,
                                  const float *scale, int B, int T, int C, int ld)
{
  size_t n = (size_t)B * T * C;
  if (B <= 0 || T <= 0 || C <= 0)
    return;
  modulate_kernel<<<cohort_cuda_blocks(n, 256), 256>>>(out, x, shift, scale, T, C, ld, n);
  cohort_cuda_launched("modulate_forward");
}

__global__ static void modulate_back_kernel(float *dx, float *dshift, float *dscale,
                                            const float *dout, const float *x, const float *scale,
                                            int B, int T, int C, int ld)
{
  __shared__ float sh_s[TY][TX + 1], sh_c[TY][TX + 1];
  int c = blockIdx.x * TX + threadIdx.x;
  for (int b = blockIdx.y; b < B; b += gridDim.y) { /* uniform over the block */
    float as = 0.0f, ac = 0.0f;
    if (c < C) {
      float k = 1.0f + scale[(size_t)b * ld + c];
      for (int t = threadIdx.y; t < T; t += TY) {
        size_t i = ((size_t)b * T + t) * C + c;
        float g = dout[i];
        dx[i] += g * k;
        as += g;
        ac += g * x[i];
      }
    }
    sh_s[threadIdx.y][threadIdx.x] = as;
    sh_c[threadIdx.y][threadIdx.x] = ac;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
      float s = 0.0f, q = 0.0f;
      for (int y = 0; y < TY; y++) {
        s += sh_s[y][threadIdx.x];
        q += sh_c[y][threadIdx.x];
      }
      dshift[(size_t)b * ld + c] += s;
      dscale[(size_t)b * ld + c] += q;
    }
    __syncthreads(); /* the next sample reuses the shared sums */
  }
}

void cohort_cuda_modulate_backward(float *dx, float *dshift, float *dscale, const float *dout,
                                   const float *x, const float *scale, int B, int T, int C, int ld)
{
  if (B <= 0 || T <= 0 || C <= 0)
    return;
  modulate_back_kernel<<<sample_grid(B, C), dim3(TX, TY)>>>(dx, dshift, dscale, dout, x, scale, B,
                                                            T, C, ld);
  cohort_cuda_launched("modulate_backward");
}

/* out may alias x: each element is read before the same thread writes it. */
__global__ static void gated_kernel(float *out, const float *x, const float *gate, const float *y,
                                    int T, int C, int ld, size_t n)
{
  COHORT_GRID_STRIDE(i, n)
  {
    size_t bt = i / C, v = (bt / T) * ld + i % C;
    out[i] = x[i] + gate[v] * y[i];
  }
}

void cohort_cuda_gated_residual_forward(float *out, const float *x, const float *gate,
                                        const float *y, int B, int T, int C, int ld)
{
  size_t n = (size_t)B * T * C;
  if (B <= 0 || T <= 0 || C <= 0)
    return;
  gated_kernel<<<cohort_cuda_blocks(n, 256), 256>>>(out, x, gate, y, T, C, ld, n);
  cohort_cuda_launched("gated_residual_forward");
}

__global__ static void gated_back_kernel(float *dx, float *dy, float *dgate, const float *dout,
                                         const float *gate, const float *y, int B, int T, int C,
                                         int ld)
{
  __shared__ float sh[TY][TX + 1];
  int c = blockIdx.x * TX + threadIdx.x;
  for (int b = blockIdx.y; b < B; b += gridDim.y) {
    float ag = 0.0f;
    if (c < C) {
      float k = gate[(size_t)b * ld + c];
      for (int t = threadIdx.y; t < T; t += TY) {
        size_t i = ((size_t)b * T + t) * C + c;
        float g = dout[i];
        ag += g * y[i];
        dy[i] = k * g;
        if (dx)
          dx[i] += g;
      }
    }
    sh[threadIdx.y][threadIdx.x] = ag;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
      float s = 0.0f;
      for (int q = 0; q < TY; q++)
        s += sh[q][threadIdx.x];
      dgate[(size_t)b * ld + c] += s;
    }
    __syncthreads();
  }
}

void cohort_cuda_gated_residual_backward(float *dx, float *dy, float *dgate, const float *dout,
                                         const float *gate, const float *y, int B, int T, int C,
                                         int ld)
{
  if (B <= 0 || T <= 0 || C <= 0)
    return;
  gated_back_kernel<<<sample_grid(B, C), dim3(TX, TY)>>>(dx, dy, dgate, dout, gate, y, B, T, C, ld);
  cohort_cuda_launched("gated_residual_backward");
}

/* out may alias x or y: each element is read before the same thread writes it. */
__global__ static void axpby_kernel(float *out, float a, const float *x, float b, const float *y,
                                    size_t n)
{
  COHORT_GRID_STRIDE(i, n)
  out[i] = a * x[i] + b * y[i];
}

void cohort_cuda_axpby(float *out, float a, const float *x, float b, const float *y, size_t n)
{
  if (n == 0)
    return;
  axpby_kernel<<<cohort_cuda_blocks(n, 256), 256>>>(out, a, x, b, y, n);
  cohort_cuda_launched("axpby");
}

__global__ static void scale_kernel(float *x, size_t n, float s)
{
  COHORT_GRID_STRIDE(i, n)
  x[i] *= s;
}

void cohort_cuda_scale(float *values, size_t n, float s)
{
  if (n == 0)
    return;
  scale_kernel<<<cohort_cuda_blocks(n, 256), 256>>>(values, n, s);
  cohort_cuda_launched("scale");
}

/* Per-element math shared by the CPU kernels and the CUDA kernels, so both backends compute
 * the same formulas. COHORT_HD marks a function callable on host and device under nvcc. */
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define COHORT_HD __host__ __device__
#else
#define COHORT_HD
#endif

#define COHORT_GELU_SCALE 0.7978845608028654f /* sqrt(2 / pi) */

/* The splitmix64 finaliser (Steele, Lea & Flood 2014): a well-mixed 64-bit hash. */
COHORT_HD static inline uint64_t cohort_mix64(uint64_t z)
{
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* Dropout's decision for value `col` of row `row` (within its key's rows) under `key` and
 * `salt`: TRUE (1) keeps it. A value is dropped when its hash, as a fraction of 2^64, is below
 * `threshold` = p · 2^64 (cohort_dropout_threshold). */
COHORT_HD static inline int cohort_dropout_keep(uint64_t key, uint32_t row, uint32_t col,
                                                uint64_t salt, uint64_t threshold)
{
  uint64_t z = key ^ cohort_mix64(salt + 0x9e3779b97f4a7c15ULL * (((uint64_t)row << 32) | col));
  return cohort_mix64(z + 0x9e3779b97f4a7c15ULL) >= threshold;
}

/* p · 2^64 rounded down, for 0 <= p < 1. */
COHORT_HD static inline uint64_t cohort_dropout_threshold(float p)
{
  return p <= 0.0f ? 0 : (uint64_t)((double)p * 18446744073709551616.0);
}
#define COHORT_GELU_CUBE 0.044715f

/* exp(x) for float, without a libm call so loops over it vectorise: x = n ln2 + r with
 * |r| <= ln2/2, a degree-6 polynomial for e^r (Cephes' coefficients, ~1 ulp), and 2^n put
 * into the exponent bits. The input is clamped to [-87.3, 88]: below, the result is the
 * smallest normal float (~1e-38) instead of a denormal or 0, which no caller can tell from 0
 * after adding it to something of order 1; +inf gives e^88. NaN, which passes the clamp,
 * is computed as 0 and returned as itself: n must stay in [-126, 127], or the exponent bits
 * below would come from a negative number shifted left (undefined behaviour).
 * Written without a branch around arithmetic (every value is computed, then selected), so
 * that GCC if-converts it and vectorises the loops that call it (AVX2 / AVX-512 clones of
 * COHORT_VEC); a multiplication inside a ?: arm kept them scalar. */
COHORT_HD static inline float cohort_expf(float x_in)
{
  float x = x_in < -87.3f ? -87.3f : x_in;
  x = x > 88.0f ? 88.0f : x;
  x = x == x ? x : 0.0f;
  /* round to nearest by the 1.5 * 2^23 trick: exact for |v| < 2^22, no rint call */
  float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float y = p * r * r + r + 1.0f;
  int32_t bits = ((int32_t)n + 127) * 8388608; /* (n + 127) << 23, n + 127 in [1, 254] */
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  float e = y * scale;
  return x_in == x_in ? e : x_in;
}

/* tanh written through one exp so that compilers can vectorise it (libm's tanhf is a call
 * per element). For |u| large, exp overflows to inf and the result saturates at +-1. */
COHORT_HD static inline float cohort_tanh(float u)
{
  float e = cohort_expf(-2.0f * fabsf(u));
  float t = (1.0f - e) / (1.0f + e);
  return copysignf(t, u);
}

/* GELU, tanh approximation (GPT-2's, PyTorch's approximate="tanh"). */
COHORT_HD static inline float cohort_gelu(float x)
{
  float u = COHORT_GELU_SCALE * (x + COHORT_GELU_CUBE * x * x * x);
  return 0.5f * x * (1.0f + cohort_tanh(u));
}

/* d gelu(x) / dx */
COHORT_HD static inline float cohort_gelu_grad(float x)
{
  float u = COHORT_GELU_SCALE * (x + COHORT_GELU_CUBE * x * x * x);
  float t = cohort_tanh(u);
  float du = COHORT_GELU_SCALE * (1.0f + 3.0f * COHORT_GELU_CUBE * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

/* SiLU, x * sigmoid(x), through the clamped exp: for x far below 0 the denominator stays
 * finite (~1.7e38) and the result a tiny number, never NaN. */
COHORT_HD static inline float cohort_silu(float x)
{
  return x / (1.0f + cohort_expf(-x));
}

/* d silu(x) / dx = s (1 + x (1 - s)), s = sigmoid(x) */
COHORT_HD static inline float cohort_silu_grad(float x)
{
  float s = 1.0f / (1.0f + cohort_expf(-x));
  return s * (1.0f + x * (1.0f - s));
}

/* Column j of DiT's sinusoidal timestep features of time t, half = dim / 2: cos(t f_j) for
 * j < half, sin(t f_(j - half)) for j < 2 half, 0 after (odd dim), with
 * f_i = exp(-ln(max_period) i / half). In double, so both backends round the same value. */
COHORT_HD static inline float cohort_timestep_feature(float t, int j, int half, float max_period)
{
  if (j >= 2 * half)
    return 0.0f;
  int i = j < half ? j : j - half;
  double a = (double)t * exp(-log((double)max_period) * i / half);
  return (float)(j < half ? cos(a) : sin(a));
}

/* Where pixel (b, c, y, x) of an image [B, C, H, W] goes among patch tokens [B, T, p p C]:
 * patches of p x p in row-major order (gw = W / p per row, T of them), each token's values in
 * the order (py, px, c) when channel_last (DiT's output) and (c, py, px) otherwise (a Conv2d
 * weight [hidden, C, p, p] flattened). */
COHORT_HD static inline size_t cohort_patch_offset(int b, int c, int y, int x, int C, int p, int gw,
                                                   int T, int channel_last)
{
  int py = y % p, px = x % p, t = (y / p) * gw + x / p;
  int k = channel_last ? (py * p + px) * C + c : (c * p + py) * p + px;
  return ((size_t)b * T + t) * (size_t)(p * p * C) + k;
}

/* LayerNorm's normalised value before the affine part. */
COHORT_HD static inline float cohort_ln_norm(float x, float mean, float rstd)
{
  return (x - mean) * rstd;
}

/* One AdamW element, PyTorch's order: decoupled decay, moments, bias-corrected step.
 * bc1 = 1 - beta1^t, bc2 = 1 - beta2^t. */
COHORT_HD static inline void cohort_adamw_elem(float *p, float g, float *m, float *v, float lr,
                                               float beta1, float beta2, float eps, float wd,
                                               float bc1, float bc2)
{
  float pv = *p * (1.0f - lr * wd);
  float mv = beta1 * *m + (1.0f - beta1) * g;
  float vv = beta2 * *v + (1.0f - beta2) * g * g;
  *m = mv;
  *v = vv;
  float denom = sqrtf(vv) / sqrtf(bc2) + eps;
  *p = pv - (lr / bc1) * mv / denom;
}

/* The bits of a float and back, without aliasing tricks (memcpy compiles to a move). */
COHORT_HD static inline uint32_t cohort_f32_bits(float x)
{
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

COHORT_HD static inline float cohort_f32_from_bits(uint32_t u)
{
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

/* bfloat16 is the top half of a float. Rounding to nearest, ties to even, adds 0x7fff plus
 * the lowest kept bit before cutting; a NaN is kept a (quiet) NaN instead, since the carry
 * could turn its payload into inf. */
COHORT_HD static inline uint16_t cohort_f32_to_bf16(float x)
{
  uint32_t u = cohort_f32_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return (uint16_t)((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

COHORT_HD static inline float cohort_bf16_to_f32(uint16_t h)
{
  return cohort_f32_from_bits((uint32_t)h << 16);
}

/* x rounded to the nearest bfloat16 value, as a float. */
COHORT_HD static inline float cohort_round_bf16(float x)
{
  return cohort_bf16_to_f32(cohort_f32_to_bf16(x));
}

/* x rounded to the nearest IEEE binary16 value (ties to even), as a float: past the largest
 * half (65504, or from 65520 on after rounding) it is inf, below 2^-14 it keeps the absolute
 * spacing of half's subnormals (2^-24), and NaN stays NaN. Done in float arithmetic: adding
 * and removing a power of two whose ulp is the target spacing rounds to that spacing in the
 * current (nearest-even) mode, the same trick as in cohort_expf. */
COHORT_HD static inline float cohort_round_fp16(float x)
{
  float a = fabsf(x);
  if (!(a < 65520.0f)) /* inf, NaN, or rounds past 65504 */
    return a != a ? x : copysignf(INFINITY, x);
  float spacing;
  if (a < 6.103515625e-05f) {          /* 2^-14: half's subnormal range */
    spacing = 5.9604644775390625e-08f; /* 2^-24 */
  } else {
    /* the power of two at or below a, times 2^-10 (half has 10 fraction bits) */
    uint32_t e = cohort_f32_bits(a) & 0x7f800000u;
    spacing = cohort_f32_from_bits(e - (10u << 23));
  }
  float big = spacing * 8388608.0f; /* spacing * 2^23: its float ulp is `spacing` */
  float r = (a + big) - big;
  return copysignf(r, x);
}

/* One torch.optim.SGD element: weight decay into the gradient, the momentum buffer (the
 * gradient itself on the first step, then momentum buf + (1 - dampening) g), Nesterov's
 * look-ahead, the step. */
COHORT_HD static inline void cohort_sgd_elem(float *p, float g, float *buf, float lr,
                                             float momentum, float dampening, float wd,
                                             int nesterov, int first_step)
{
  float d = wd != 0.0f ? g + wd * *p : g;
  if (momentum != 0.0f) {
    float b = first_step ? d : momentum * *buf + (1.0f - dampening) * d;
    *buf = b;
    d = nesterov ? d + momentum * b : b;
  }
  *p = *p - lr * d;
}

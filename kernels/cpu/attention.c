/* Causal multi-head attention, fused: scores, softmax and the weighted sum of values are
 * computed one query row at a time, so the [T, T] attention matrix is never stored; the
 * backward recomputes the probabilities from the saved log-sum-exp (as FlashAttention). Each
 * (batch, head) is one task, so gradients of keys and values sum in a fixed order. */
#include "cpu.h"
#include "kernels/math-inline.h"
#include "reduce.h"

#include <math.h>
#include <string.h>

/* One (batch, head): q, k, v rows are `stride` floats apart. */
COHORT_VEC static void attn_fwd_head(float *restrict out, float *restrict lse,
                                     const float *restrict q, const float *restrict k,
                                     const float *restrict v, int T, int hd, size_t stride,
                                     size_t out_stride, float scale, float *restrict s)
{
  for (int i = 0; i < T; i++) {
    const float *qi = q + (size_t)i * stride;
    float mx = -INFINITY;
    for (int j = 0; j <= i; j++) {
      s[j] = scale * cohort_row_dot(qi, k + (size_t)j * stride, hd);
      mx = s[j] > mx ? s[j] : mx;
    }
    float sum = 0.0f;
    for (int j = 0; j <= i; j++) {
      s[j] = cohort_expf(s[j] - mx);
      sum += s[j];
    }
    float inv = 1.0f / sum;
    float *yi = out + (size_t)i * out_stride;
    memset(yi, 0, sizeof(float) * hd);
    for (int j = 0; j <= i; j++) {
      const float *vj = v + (size_t)j * stride;
      float p = s[j] * inv;
      for (int d = 0; d < hd; d++)
        yi[d] += p * vj[d];
    }
    lse[i] = mx + logf(sum);
  }
}

void cohort_cpu_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C,
                                  int NH)
{
  int hd = C / NH;
  float scale = 1.0f / sqrtf((float)hd);
  size_t stride = (size_t)3 * C;
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * NH; bh++) {
    int b = bh / NH, h = bh % NH;
    float s[T];
    const float *base = qkv + (size_t)b * T * stride + (size_t)h * hd;
    attn_fwd_head(out + (size_t)b * T * C + (size_t)h * hd, lse + (size_t)bh * T, base, base + C,
                  base + 2 * C, T, hd, stride, C, scale, s);
  }
}

COHORT_VEC static void attn_bwd_head(float *restrict dq, float *restrict dk, float *restrict dv,
                                     const float *restrict dout, const float *restrict q,
                                     const float *restrict k, const float *restrict v,
                                     const float *restrict out, const float *restrict lse, int T,
                                     int hd, size_t stride, size_t out_stride, float scale,
                                     float *restrict p)
{
  for (int i = 0; i < T; i++) {
    memset(dq + (size_t)i * stride, 0, sizeof(float) * hd);
    memset(dk + (size_t)i * stride, 0, sizeof(float) * hd);
    memset(dv + (size_t)i * stride, 0, sizeof(float) * hd);
  }
  for (int i = 0; i < T; i++) {
    const float *qi = q + (size_t)i * stride;
    const float *gi = dout + (size_t)i * out_stride;
    float *dqi = dq + (size_t)i * stride;
    /* sum_j p_j * (dout_i . v_j) equals dout_i . out_i */
    float D = cohort_row_dot(gi, out + (size_t)i * out_stride, hd);
    for (int j = 0; j <= i; j++)
      p[j] = scale * cohort_row_dot(qi, k + (size_t)j * stride, hd);
    for (int j = 0; j <= i; j++)
      p[j] = cohort_expf(p[j] - lse[i]);
    for (int j = 0; j <= i; j++) {
      const float *kj = k + (size_t)j * stride;
      const float *vj = v + (size_t)j * stride;
      float *dkj = dk + (size_t)j * stride;
      float *dvj = dv + (size_t)j * stride;
      float dp = cohort_row_dot(gi, vj, hd);
      float ds = p[j] * (dp - D) * scale;
      for (int d = 0; d < hd; d++) {
        dqi[d] += ds * kj[d];
        dkj[d] += ds * qi[d];
        dvj[d] += p[j] * gi[d];
      }
    }
  }
}

void cohort_cpu_attention_backward(float *dqkv, const float *dout, const float *qkv,
                                   const float *out, const float *lse, int B, int T, int C, int NH)
{
  int hd = C / NH;
  float scale = 1.0f / sqrtf((float)hd);
  size_t stride = (size_t)3 * C;
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * NH; bh++) {
    int b = bh / NH, h = bh % NH;
    float p[T];
    size_t off = (size_t)b * T * stride + (size_t)h * hd;
    size_t ooff = (size_t)b * T * C + (size_t)h * hd;
    attn_bwd_head(dqkv + off, dqkv + off + C, dqkv + off + 2 * C, dout + ooff, qkv + off,
                  qkv + off + C, qkv + off + 2 * C, out + ooff, lse + (size_t)bh * T, T, hd, stride,
                  C, scale, p);
  }
}

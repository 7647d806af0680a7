/* Multi-head attention, fused: one (batch, head) is one task; its queries go through in
 * blocks of QB rows, each against the keys it may see (causal: those at or before the block's
 * last row; otherwise all T), with register-sized tiles so the compiler vectorises over 16 keys or
 * 16 channels at a time. The [T, T] probabilities are never stored: backward recomputes them from
 * the saved log-sum-exp (as FlashAttention), and the sum D_i = dout_i . out_i replaces the row sums
 * of dP * P. Key and value gradients of one head sum over query blocks (and, with grouped-query
 * attention, over the query heads that share it) in order, so results do not depend on the
 * thread count. */
#include "cpu.h"
#include "kernels/math-inline.h"
#include "reduce.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#define QB 8  /* query rows per block */
#define JW 16 /* tile width, one AVX-512 register of floats */

/* Per-thread scratch, kept between calls (grown when a larger shape comes): a training step
 * allocates nothing. Indexed by OpenMP thread number, owned by the calling thread. */
static _Thread_local float *scratch;
static _Thread_local size_t scratch_floats;

static float *thread_scratch(size_t per_thread, int threads)
{
  size_t want = per_thread * threads;
  if (want > scratch_floats) {
    free(scratch);
    scratch = aligned_alloc(64, (want * sizeof(float) + 63) / 64 * 64);
    scratch_floats = scratch ? want : 0;
  }
  return scratch;
}

static size_t round16(size_t n)
{
  return (n + 15) / 16 * 16;
}

/* dst[d * ld + j] = src[j * stride + d]: rows of keys (or values) become columns. */
static void transpose(float *restrict dst, size_t ld, const float *restrict src, size_t stride,
                      int rows, int hd)
{
  for (int j = 0; j < rows; j++)
    for (int d = 0; d < hd; d++)
      dst[(size_t)d * ld + j] = src[(size_t)j * stride + d];
}

/* 16 floats as one value: the tiles below keep QB of these as accumulators in registers
 * (GCC vector extensions; AVX-512 in the x86-64-v4 clone, split into SSE in the default). */
typedef float v16 __attribute__((vector_size(64), aligned(4)));

/* S[r][j] = sum_d a[r][d] * BT[d][j] for the QB rows a[r] and keys j < n (n % JW == 0). */
COHORT_VEC static void tile_scores(float *restrict S, size_t ls, const float *const *a,
                                   const float *restrict BT, size_t lb, int n, int hd)
{
  for (int j0 = 0; j0 < n; j0 += JW) {
    v16 acc[QB];
#pragma GCC unroll 8
    for (int r = 0; r < QB; r++)
      acc[r] = (v16){0};
    for (int d = 0; d < hd; d++) {
      v16 b = *(const v16 *)(BT + (size_t)d * lb + j0);
#pragma GCC unroll 8
      for (int r = 0; r < QB; r++)
        acc[r] += a[r][d] * b;
    }
#pragma GCC unroll 8
    for (int r = 0; r < QB; r++)
      *(v16 *)(S + (size_t)r * ls + j0) = acc[r];
  }
}

/* Y[r][:] = sum_{j < n} P[r][j] * X[j][:] for the first `rows` of QB rows (X rows `xs`
 * apart); overwrites Y. */
COHORT_VEC static void tile_weighted_sum(float *restrict Y, size_t ys, int rows,
                                         const float *restrict P, size_t lp,
                                         const float *restrict X, size_t xs, int n, int hd)
{
  int d0 = 0;
  for (; d0 + JW <= hd; d0 += JW) {
    v16 acc[QB];
#pragma GCC unroll 8
    for (int r = 0; r < QB; r++)
      acc[r] = (v16){0};
    for (int j = 0; j < n; j++) {
      v16 x = *(const v16 *)(X + (size_t)j * xs + d0);
#pragma GCC unroll 8
      for (int r = 0; r < QB; r++)
        acc[r] += P[(size_t)r * lp + j] * x;
    }
    for (int r = 0; r < rows; r++)
      *(v16 *)(Y + (size_t)r * ys + d0) = acc[r];
  }
  if (d0 < hd) { /* head sizes that are not a multiple of 16 */
    /* keys in order, the channels innermost: how the compiler splits this loop into vectors
     * depends on hd alone, never on n, so a row's sum does not depend on its block (over a
     * key/value cache a row sits in another block than in the full forward) */
    for (int r = 0; r < rows; r++) {
      float *restrict y = Y + (size_t)r * ys;
      for (int d = d0; d < hd; d++)
        y[d] = 0.0f;
      for (int j = 0; j < n; j++) {
        float p = P[(size_t)r * lp + j];
        const float *restrict x = X + (size_t)j * xs;
        for (int d = d0; d < hd; d++)
          y[d] += p * x[d];
      }
    }
  }
}

/* G[j][:] += sum_r W[r][j] * X[r][:] over the first `rows` rows, for keys j < n: the
 * key/value gradient update. Rows are added in order r = 0, 1, ... for every element. */
COHORT_VEC static void tile_outer_acc(float *restrict G, size_t gs, const float *restrict W,
                                      size_t lw, const float *restrict X, size_t xs, int rows,
                                      int n, int hd)
{
  for (int j = 0; j < n; j++) {
    float *g = G + (size_t)j * gs;
    int d0 = 0;
    for (; d0 + JW <= hd; d0 += JW) {
      v16 acc = *(v16 *)(g + d0);
      for (int r = 0; r < rows; r++)
        acc += W[(size_t)r * lw + j] * *(const v16 *)(X + (size_t)r * xs + d0);
      *(v16 *)(g + d0) = acc;
    }
    for (int d = d0; d < hd; d++)
      for (int r = 0; r < rows; r++)
        g[d] += W[(size_t)r * lw + j] * X[(size_t)r * xs + d];
  }
}

/* Where one call's tensors are: q, k, v with their row strides (GPT's one [B, T, 3C] tensor,
 * or three contiguous ones), out and dout with theirs; NH query heads read NKV key/value
 * heads of size hd, query head h the key/value head h / (NH / NKV). T queries and Tk keys per
 * sequence; causal: query i sees keys 0 .. i + off (off = Tk - T: the queries are the last
 * positions, as over a key/value cache; 0 in training, where Tk = T). */
typedef struct {
  const float *q, *k, *v;
  size_t ldq, ldk, ldv, ldo;
  int B, T, NH, NKV, hd, causal;
  int Tk, off;
} AttnArgs;

/* The last key that query row i sees. */
static inline int last_key(int i, const AttnArgs *x)
{
  return x->causal ? i + x->off : x->Tk - 1;
}

/* Softmax of QB score rows (query rows i0 + r) over the keys each sees, scaled; the other
 * keys up to n get 0. Returns the log-sum-exp of each row in lse. */
COHORT_VEC static void block_softmax(float *restrict S, size_t ls, int i0, int rows, int n,
                                     float scale, float *restrict lse, const AttnArgs *x)
{
  for (int r = 0; r < rows; r++) {
    float *s = S + (size_t)r * ls;
    int last = last_key(i0 + r, x);
    float mx = -INFINITY;
    for (int j = 0; j <= last; j++)
      mx = s[j] * scale > mx ? s[j] * scale : mx;
    float sum = 0.0f;
    for (int j = 0; j <= last; j++) {
      s[j] = cohort_expf(s[j] * scale - mx);
      sum += s[j];
    }
    float inv = 1.0f / sum;
    for (int j = 0; j <= last; j++)
      s[j] *= inv;
    for (int j = last + 1; j < n; j++)
      s[j] = 0.0f;
    lse[r] = mx + logf(sum);
  }
  for (int r = rows; r < QB; r++)
    memset(S + (size_t)r * ls, 0, sizeof(float) * n);
}

static void attn_forward(float *out, float *lse, const AttnArgs *x)
{
  int hd = x->hd, T = x->T, Tk = x->Tk, NH = x->NH, G = x->NH / x->NKV;
  float scale = 1.0f / sqrtf((float)hd);
  size_t lt = round16(Tk);
  size_t per_thread = (size_t)hd * lt + QB * lt + round16(hd);
  float *buf = thread_scratch(per_thread, omp_get_max_threads());
  if (!buf)
    abort(); /* out of memory for a few hundred KiB */
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < x->B * NH; bh++) {
    int b = bh / NH, h = bh % NH;
    float *KT = buf + per_thread * omp_get_thread_num();
    float *S = KT + (size_t)hd * lt;
    float *zero_row = S + QB * lt;
    const float *q = x->q + (size_t)b * T * x->ldq + (size_t)h * hd;
    const float *k = x->k + (size_t)b * Tk * x->ldk + (size_t)(h / G) * hd;
    const float *v = x->v + (size_t)b * Tk * x->ldv + (size_t)(h / G) * hd;
    float *o = out + (size_t)b * T * x->ldo + (size_t)h * hd;
    memset(KT, 0, sizeof(float) * (hd * lt + QB * lt + round16(hd)));
    transpose(KT, lt, k, x->ldk, Tk, hd);
    for (int i0 = 0; i0 < T; i0 += QB) {
      int rows = T - i0 < QB ? T - i0 : QB;
      int keys = last_key(i0 + rows - 1, x) + 1; /* keys this block can see */
      int n = (int)round16(keys);                /* padded to a tile */
      const float *a[QB];
      for (int r = 0; r < QB; r++)
        a[r] = r < rows ? q + (size_t)(i0 + r) * x->ldq : zero_row;
      tile_scores(S, lt, a, KT, lt, n, hd);
      float unkept[QB]; /* the log-sum-exps of a call that keeps none */
      block_softmax(S, lt, i0, rows, n, scale, lse ? lse + (size_t)bh * T + i0 : unkept, x);
      tile_weighted_sum(o + (size_t)i0 * x->ldo, x->ldo, rows, S, lt, v, x->ldv, keys, hd);
    }
  }
}

/* One query head's share of the backward: dq (overwritten) and its terms of dk and dv (added;
 * the caller zeroes them before the group's first head). */
static void attn_backward_head(float *dq, float *dk, float *dv, const float *g, const float *o,
                               const float *l, const float *q, const float *k, const float *KT,
                               const float *VT, float *P, float *dS, const float *zero_row,
                               const AttnArgs *x)
{
  int hd = x->hd, T = x->T;
  float scale = 1.0f / sqrtf((float)hd);
  size_t lt = round16(T);
  for (int i0 = 0; i0 < T; i0 += QB) {
    int rows = T - i0 < QB ? T - i0 : QB;
    int keys = last_key(i0 + rows - 1, x) + 1;
    int n = (int)round16(keys);
    /* P = exp(scale * q k^T - lse), zero for the keys a row does not see */
    const float *a[QB], *ga[QB];
    for (int r = 0; r < QB; r++) {
      a[r] = r < rows ? q + (size_t)(i0 + r) * x->ldq : zero_row;
      ga[r] = r < rows ? g + (size_t)(i0 + r) * x->ldo : zero_row;
    }
    tile_scores(P, lt, a, KT, lt, n, hd);
    /* dP = dout v^T */
    tile_scores(dS, lt, ga, VT, lt, n, hd);
    for (int r = 0; r < QB; r++) {
      float *p = P + (size_t)r * lt, *ds = dS + (size_t)r * lt;
      int last = r < rows ? last_key(i0 + r, x) : -1;
      float lr = r < rows ? l[i0 + r] : 0.0f;
      float D = r < rows ? cohort_row_dot(g + (size_t)(i0 + r) * x->ldo,
                                          o + (size_t)(i0 + r) * x->ldo, hd)
                         : 0.0f;
      for (int j = 0; j <= last; j++) {
        p[j] = cohort_expf(p[j] * scale - lr);
        ds[j] = p[j] * (ds[j] - D) * scale;
      }
      for (int j = last + 1; j < n; j++)
        p[j] = ds[j] = 0.0f;
    }
    /* dq = dS k; dk += dS^T q; dv += P^T dout */
    tile_weighted_sum(dq + (size_t)i0 * x->ldq, x->ldq, rows, dS, lt, k, x->ldk, keys, hd);
    tile_outer_acc(dk, x->ldk, dS, lt, q + (size_t)i0 * x->ldq, x->ldq, rows, keys, hd);
    tile_outer_acc(dv, x->ldv, P, lt, g + (size_t)i0 * x->ldo, x->ldo, rows, keys, hd);
  }
}

/* One task per (batch, key/value head): its dk and dv sum over the group's query heads in head
 * order on one thread, so nothing races and the sum does not depend on the thread count. */
static void attn_backward(float *dq, float *dk, float *dv, const float *dout, const float *out,
                          const float *lse, const AttnArgs *x)
{
  int hd = x->hd, T = x->T, NH = x->NH, NKV = x->NKV, G = NH / NKV;
  size_t lt = round16(T);
  size_t per_thread = (size_t)2 * hd * lt + 2 * QB * lt + round16(hd);
  float *buf = thread_scratch(per_thread, omp_get_max_threads());
  if (!buf)
    abort();
#pragma omp parallel for schedule(static)
  for (int bk = 0; bk < x->B * NKV; bk++) {
    int b = bk / NKV, kvh = bk % NKV;
    float *KT = buf + per_thread * omp_get_thread_num();
    float *VT = KT + (size_t)hd * lt;
    float *P = VT + (size_t)hd * lt;
    float *dS = P + QB * lt;
    float *zero_row = dS + QB * lt;
    size_t koff = (size_t)b * T * x->ldk + (size_t)kvh * hd;
    size_t voff = (size_t)b * T * x->ldv + (size_t)kvh * hd;
    const float *k = x->k + koff, *v = x->v + voff;
    float *dkh = dk + koff, *dvh = dv + voff;
    memset(KT, 0, sizeof(float) * per_thread);
    transpose(KT, lt, k, x->ldk, T, hd);
    transpose(VT, lt, v, x->ldv, T, hd);
    for (int i = 0; i < T; i++) {
      memset(dkh + (size_t)i * x->ldk, 0, sizeof(float) * hd);
      memset(dvh + (size_t)i * x->ldv, 0, sizeof(float) * hd);
    }
    for (int gi = 0; gi < G; gi++) {
      int h = kvh * G + gi;
      size_t qoff = (size_t)b * T * x->ldq + (size_t)h * hd;
      size_t ooff = (size_t)b * T * x->ldo + (size_t)h * hd;
      attn_backward_head(dq + qoff, dkh, dvh, dout + ooff, out + ooff,
                         lse + ((size_t)b * NH + h) * T, x->q + qoff, k, KT, VT, P, dS, zero_row,
                         x);
    }
  }
}

/* GPT's interleaved [B, T, 3C]: q, k and v are column blocks of one tensor. */
static AttnArgs interleaved(const float *qkv, int B, int T, int C, int NH, int causal)
{
  size_t ld = (size_t)3 * C;
  return (AttnArgs){qkv, qkv + C, qkv + 2 * C, ld,     ld,     ld, (size_t)C, B,
                    T,   NH,      NH,          C / NH, causal, T,  0};
}

static AttnArgs grouped(const float *q, const float *k, const float *v, int B, int T, int NH,
                        int NKV, int hd, int causal)
{
  size_t lq = (size_t)NH * hd, lkv = (size_t)NKV * hd;
  return (AttnArgs){q, k, v, lq, lkv, lkv, lq, B, T, NH, NKV, hd, causal, T, 0};
}

void cohort_cpu_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C,
                                  int NH, int causal)
{
  AttnArgs x = interleaved(qkv, B, T, C, NH, causal);
  attn_forward(out, lse, &x);
}

void cohort_cpu_attention_backward(float *dqkv, const float *dout, const float *qkv,
                                   const float *out, const float *lse, int B, int T, int C, int NH,
                                   int causal)
{
  AttnArgs x = interleaved(qkv, B, T, C, NH, causal);
  attn_backward(dqkv, dqkv + C, dqkv + 2 * C, dout, out, lse, &x);
}

void cohort_cpu_attention_gqa_forward(float *out, float *lse, const float *q, const float *k,
                                      const float *v, int B, int T, int NH, int NKV, int hd,
                                      int causal)
{
  AttnArgs x = grouped(q, k, v, B, T, NH, NKV, hd, causal);
  attn_forward(out, lse, &x);
}

void cohort_cpu_attention_gqa_backward(float *dq, float *dk, float *dv, const float *dout,
                                       const float *q, const float *k, const float *v,
                                       const float *out, const float *lse, int B, int T, int NH,
                                       int NKV, int hd, int causal)
{
  AttnArgs x = grouped(q, k, v, B, T, NH, NKV, hd, causal);
  attn_backward(dq, dk, dv, dout, out, lse, &x);
}

void cohort_cpu_attention_gqa_cached(float *out, const float *q, const float *k, const float *v,
                                     int Tq, int Tk, int NH, int NKV, int hd)
{
  AttnArgs x = grouped(q, k, v, 1, Tq, NH, NKV, hd, 1);
  x.Tk = Tk;
  x.off = Tk - Tq;
  attn_forward(out, NULL, &x);
}

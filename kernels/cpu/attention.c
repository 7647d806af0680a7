/* Multi-head attention, fused: one (batch, head) is one task; its queries go through in
 * blocks of QB rows, each against the keys it may see (causal: those at or before the block's
 * last row; otherwise all T), with register-sized tiles so the compiler vectorises over 16 keys or
 * 16 channels at a time. The [T, T] probabilities are never stored: backward recomputes them from
 * the saved log-sum-exp (as FlashAttention), and the sum D_i = dout_i . out_i replaces the row sums
 * of dP * P. Key and value gradients of one head sum over query blocks (and, with grouped-query
 * attention, over the query heads that share it) in order, so results do not depend on the
 * thread count. Cross-attention is the same code with Tq queries over Tk keys, of which example b
 * sees its first klen[b] (key padding): the others get no weight and zero gradients, and an
 * example with no key at all gets zero output (and lse -inf) rather than 0/0. */
#include "cpu.h"
#include "kernels/math-inline.h"
#include "reduce.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#define QB 8  /* query rows per block */
#define JW 16 /* tile width, one AVX-512 register of floats */
#define SB 64 /* query rows whose P and dS backward keeps for one dk, dv update (SB % QB == 0) */

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

/* The row stride of the transposed keys and values and of the score rows: a multiple of 16
 * floats plus 16, so that a column of them (what tile_scores and tile_outer_acc read) is not at a
 * power-of-two stride, which would map it onto a few of the L1 cache's sets. */
static size_t p_stride(size_t n)
{
  return round16(n) + 16;
}

/* dst[r * hd + d] = src[r * stride + d]: rows made contiguous. */
static void pack_rows(float *restrict dst, const float *restrict src, size_t stride, int rows,
                      int hd)
{
  for (int r = 0; r < rows; r++)
    memcpy(dst + (size_t)r * hd, src + (size_t)r * stride, sizeof(float) * hd);
}

/* dst[d * ld + j] = src[j * stride + d]: rows of keys (or values) become columns; the columns
 * from `rows` to ld are zeroed (the tiles read keys up to a multiple of 16). */
static void transpose(float *restrict dst, size_t ld, const float *restrict src, size_t stride,
                      int rows, int hd)
{
  for (int j = 0; j < rows; j++)
    for (int d = 0; d < hd; d++)
      dst[(size_t)d * ld + j] = src[(size_t)j * stride + d];
  for (int d = 0; d < hd; d++)
    memset(dst + (size_t)d * ld + rows, 0, sizeof(float) * (ld - (size_t)rows));
}

/* The tiles, in two instances of attention-tiles.h: 16-float vectors (AVX-512 registers in
 * COHORT_VEC's x86-64-v4 clone, split by the compiler elsewhere) and, for CPUs with AVX2 but
 * not AVX-512, 8-float vectors compiled for x86-64-v3. GCC handles a 16-float vector on AVX2
 * through the stack (the tiles ran 5-10x slower there), so those CPUs take the second. Both sum
 * every element's terms in the same order: the results are the same. */
typedef float v16 __attribute__((vector_size(64), aligned(4)));
#define TILE_V        v16
#define TILE_W        16
#define TILE_ATTR     COHORT_VEC
#define TILE_FN(name) name##_v16
#include "attention-tiles.h"
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) &&                             \
    !defined(__SANITIZE_ADDRESS__)
typedef float v8 __attribute__((vector_size(32), aligned(4)));
#define TILE_V        v8
#define TILE_W        8
#define TILE_ATTR     __attribute__((target("arch=x86-64-v3")))
#define TILE_FN(name) name##_v8
#include "attention-tiles.h"
#define HAVE_V8 1
#endif

#ifdef HAVE_V8
/* TRUE where the 8-float tiles are faster: AVX2 with FMA and no AVX-512. (Builds without the
 * 8-float tiles, AddressSanitizer's among them, always take the 16-float ones.) */
static int use_v8(void)
{
  static int v = -1;
  if (v < 0)
    v = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        !__builtin_cpu_supports("avx512f");
  return v;
}

#define TILE_CALL(name, ...) (use_v8() ? name##_v8(__VA_ARGS__) : name##_v16(__VA_ARGS__))
#else
#define TILE_CALL(name, ...) name##_v16(__VA_ARGS__)
#endif
#define tile_scores(...)       TILE_CALL(tile_scores, __VA_ARGS__)
#define tile_weighted_sum(...) TILE_CALL(tile_weighted_sum, __VA_ARGS__)
#define tile_outer_acc(...)    TILE_CALL(tile_outer_acc, __VA_ARGS__)

/* Where one call's tensors are: q, k, v with their row strides (GPT's one [B, T, 3C] tensor,
 * or three contiguous ones), out and dout with theirs; NH query heads read NKV key/value
 * heads of size hd, query head h the key/value head h / (NH / NKV). Tq query rows and Tk key
 * rows per example (equal for self-attention); klen (NULL: all Tk) the keys each example sees;
 * causal: query i sees keys 0 .. i + off (off = Tk - Tq: the queries are the last positions, as
 * over a key/value cache; 0 in training, where Tk = Tq). */
typedef struct {
  const float *q, *k, *v;
  size_t ldq, ldk, ldv, ldo;
  int B, Tq, Tk, NH, NKV, hd, causal;
  const int *klen;
  int off;
} AttnArgs;

/* The keys example b sees: its klen clamped to [0, Tk], or all Tk. */
static inline int keys_of(const AttnArgs *x, int b)
{
  if (!x->klen)
    return x->Tk;
  int n = x->klen[b];
  return n < 0 ? 0 : n > x->Tk ? x->Tk : n;
}

/* The last key that query row i sees, of the T its example sees. */
static inline int last_key(int i, int T, const AttnArgs *x)
{
  return x->causal ? i + x->off : T - 1;
}

/* Softmax of QB score rows (query rows i0 + r) over the keys each sees, scaled; the other
 * keys up to n get 0. Returns the log-sum-exp of each row in lse. */
COHORT_VEC static void block_softmax(float *restrict S, size_t ls, int i0, int rows, int n,
                                     float scale, float *restrict lse, int T, const AttnArgs *x)
{
  for (int r = 0; r < rows; r++) {
    float *s = S + (size_t)r * ls;
    int last = last_key(i0 + r, T, x);
    /* scale > 0 and rounding is monotone: the largest scaled score is the largest score,
     * scaled. The maximum and the sum go by reduce.h's lanes, so that they vectorise. */
    float mx = cohort_row_max(s, last + 1) * scale;
    for (int j = 0; j <= last; j++)
      s[j] = cohort_expf(s[j] * scale - mx);
    float sum = cohort_row_sum(s, last + 1);
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
  int hd = x->hd, Tq = x->Tq, Tk = x->Tk, NH = x->NH, G = x->NH / x->NKV;
  float scale = 1.0f / sqrtf((float)hd);
  size_t lt = p_stride(Tk); /* KT's and S's row stride */
  size_t per_thread = (size_t)hd * lt + QB * lt + (size_t)Tk * hd + round16(hd);
  float *buf = thread_scratch(per_thread, omp_get_max_threads());
  if (!buf)
    abort(); /* out of memory for a few hundred KiB */
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < x->B * NH; bh++) {
    int b = bh / NH, h = bh % NH;
    float *KT = buf + per_thread * omp_get_thread_num();
    float *S = KT + (size_t)hd * lt;
    float *Vp = S + QB * lt; /* v's rows packed (in place they are 3C floats apart in GPT) */
    float *zero_row = Vp + (size_t)Tk * hd;
    const float *q = x->q + (size_t)b * Tq * x->ldq + (size_t)h * hd;
    const float *k = x->k + (size_t)b * Tk * x->ldk + (size_t)(h / G) * hd;
    const float *v = x->v + (size_t)b * Tk * x->ldv + (size_t)(h / G) * hd;
    float *o = out + (size_t)b * Tq * x->ldo + (size_t)h * hd;
    int T = keys_of(x, b);
    if (T == 0) { /* no key: zero output, log-sum-exp of nothing */
      for (int i = 0; i < Tq; i++) {
        memset(o + (size_t)i * x->ldo, 0, sizeof(float) * hd);
        if (lse)
          lse[(size_t)bh * Tq + i] = -INFINITY;
      }
      continue;
    }
    /* every value the tiles read is written before (S by tile_scores and block_softmax), so
     * only the transposed keys' padding and the zero row need zeros */
    memset(zero_row, 0, sizeof(float) * round16(hd));
    transpose(KT, lt, k, x->ldk, T, hd);
    pack_rows(Vp, v, x->ldv, T, hd);
    for (int i0 = 0; i0 < Tq; i0 += QB) {
      int rows = Tq - i0 < QB ? Tq - i0 : QB;
      int keys = last_key(i0 + rows - 1, T, x) + 1; /* keys this block can see */
      int n = (int)round16(keys);                   /* padded to a tile */
      const float *a[QB];
      for (int r = 0; r < QB; r++)
        a[r] = r < rows ? q + (size_t)(i0 + r) * x->ldq : zero_row;
      tile_scores(S, lt, a, KT, lt, n, hd);
      float unkept[QB]; /* the log-sum-exps of a call that keeps none */
      block_softmax(S, lt, i0, rows, n, scale, lse ? lse + (size_t)bh * Tq + i0 : unkept, T, x);
      tile_weighted_sum(o + (size_t)i0 * x->ldo, x->ldo, rows, S, lt, Vp, (size_t)hd, keys, hd);
    }
  }
}

/* A row of backward: p = exp(scale s - lse) from the scores s (in place) and ds = p (dP - D)
 * scale from dP (in place), over the keys 0 .. n - 1 the row sees. Its own COHORT_VEC function,
 * so that the exp loop gets the AVX2 / AVX-512 clones. */
COHORT_VEC static void probs_and_grads(float *restrict p, float *restrict ds, int n, float scale,
                                       float lse, float D)
{
  for (int j = 0; j < n; j++) {
    p[j] = cohort_expf(p[j] * scale - lse);
    ds[j] = p[j] * (ds[j] - D) * scale;
  }
}

/* One query head's share of the backward: dq (overwritten) and its terms of dk and dv (added;
 * the caller zeroes them before the group's first head); T is the keys the example sees. P and
 * dS of SB query rows are kept so that dk and dv are updated once per SB rows, not per block of
 * QB: each element still adds the rows in order, so the sums are the same. k is the key
 * rows packed (hd floats apart). */
static void attn_backward_head(float *dq, float *dk, float *dv, const float *g, const float *o,
                               const float *l, const float *q, const float *k, const float *KT,
                               const float *VT, float *P, float *dS, float *Xp,
                               const float *zero_row, int T, const AttnArgs *x)
{
  int hd = x->hd, Tq = x->Tq;
  float scale = 1.0f / sqrtf((float)hd);
  size_t lp = p_stride(x->Tk);
  if (T == 0) { /* no key: the output was zero whatever q was */
    for (int i = 0; i < Tq; i++)
      memset(dq + (size_t)i * x->ldq, 0, sizeof(float) * hd);
    return;
  }
  for (int s0 = 0; s0 < Tq; s0 += SB) {
    int srows = Tq - s0 < SB ? Tq - s0 : SB;
    int skeys = last_key(s0 + srows - 1, T, x) + 1; /* keys the super-block sees */
    int sn = (int)round16(skeys);
    for (int i0 = s0; i0 < s0 + srows; i0 += QB) {
      int rows = s0 + srows - i0 < QB ? s0 + srows - i0 : QB;
      int keys = last_key(i0 + rows - 1, T, x) + 1;
      int n = (int)round16(keys);
      float *Pb = P + (size_t)(i0 - s0) * lp, *dSb = dS + (size_t)(i0 - s0) * lp;
      /* P = exp(scale * q k^T - lse), zero for the keys a row does not see */
      const float *a[QB], *ga[QB];
      for (int r = 0; r < QB; r++) {
        a[r] = r < rows ? q + (size_t)(i0 + r) * x->ldq : zero_row;
        ga[r] = r < rows ? g + (size_t)(i0 + r) * x->ldo : zero_row;
      }
      tile_scores(Pb, lp, a, KT, lp, n, hd);
      /* dP = dout v^T */
      tile_scores(dSb, lp, ga, VT, lp, n, hd);
      for (int r = 0; r < rows; r++) {
        float *p = Pb + (size_t)r * lp, *ds = dSb + (size_t)r * lp;
        int last = last_key(i0 + r, T, x);
        float lr = l[i0 + r];
        float D = cohort_row_dot(g + (size_t)(i0 + r) * x->ldo, o + (size_t)(i0 + r) * x->ldo, hd);
        probs_and_grads(p, ds, last + 1, scale, lr, D);
        for (int j = last + 1; j < sn; j++)
          p[j] = ds[j] = 0.0f;
      }
      /* dq = dS k */
      tile_weighted_sum(dq + (size_t)i0 * x->ldq, x->ldq, rows, dSb, lp, k, (size_t)hd, keys, hd);
    }
    /* dk += dS^T q; dv += P^T dout, over the super-block's rows */
    /* the rows of q (and dout) packed first: in place they sit 3C (C) floats apart, a stride
     * that maps the super-block's rows onto a quarter of the L1 cache's sets */
    pack_rows(Xp, q + (size_t)s0 * x->ldq, x->ldq, srows, hd);
    tile_outer_acc(dk, x->ldk, dS, lp, Xp, (size_t)hd, srows, skeys, hd);
    pack_rows(Xp, g + (size_t)s0 * x->ldo, x->ldo, srows, hd);
    tile_outer_acc(dv, x->ldv, P, lp, Xp, (size_t)hd, srows, skeys, hd);
  }
}

/* One task per (batch, key/value head): its dk and dv sum over the group's query heads in head
 * order on one thread, so nothing races and the sum does not depend on the thread count. */
static void attn_backward(float *dq, float *dk, float *dv, const float *dout, const float *out,
                          const float *lse, const AttnArgs *x)
{
  int hd = x->hd, Tq = x->Tq, Tk = x->Tk, NH = x->NH, NKV = x->NKV, G = NH / NKV;
  size_t lp = p_stride(Tk); /* the row stride of KT, VT, P and dS */
  size_t per_thread =
      (size_t)2 * hd * lp + 2 * SB * lp + (size_t)SB * round16(hd) + (size_t)Tk * hd + round16(hd);
  float *buf = thread_scratch(per_thread, omp_get_max_threads());
  if (!buf)
    abort();
#pragma omp parallel for schedule(static)
  for (int bk = 0; bk < x->B * NKV; bk++) {
    int b = bk / NKV, kvh = bk % NKV;
    float *KT = buf + per_thread * omp_get_thread_num();
    float *VT = KT + (size_t)hd * lp;
    float *P = VT + (size_t)hd * lp;
    float *dS = P + SB * lp;
    float *Xp = dS + SB * lp;
    float *Kp = Xp + (size_t)SB * round16(hd); /* k's rows packed, hd floats apart */
    float *zero_row = Kp + (size_t)Tk * hd;
    size_t koff = (size_t)b * Tk * x->ldk + (size_t)kvh * hd;
    size_t voff = (size_t)b * Tk * x->ldv + (size_t)kvh * hd;
    const float *k = x->k + koff, *v = x->v + voff;
    float *dkh = dk + koff, *dvh = dv + voff;
    int T = keys_of(x, b);
    /* every value of P, dS and Xp that is read is written first (attn_backward_head), so only
     * the transposed keys' and values' padding and the zero row need zeros */
    memset(zero_row, 0, sizeof(float) * round16(hd));
    transpose(KT, lp, k, x->ldk, T, hd);
    transpose(VT, lp, v, x->ldv, T, hd);
    pack_rows(Kp, k, x->ldk, T, hd);
    for (int i = 0; i < Tk; i++) { /* keys past klen keep zero gradients */
      memset(dkh + (size_t)i * x->ldk, 0, sizeof(float) * hd);
      memset(dvh + (size_t)i * x->ldv, 0, sizeof(float) * hd);
    }
    for (int gi = 0; gi < G; gi++) {
      int h = kvh * G + gi;
      size_t qoff = (size_t)b * Tq * x->ldq + (size_t)h * hd;
      size_t ooff = (size_t)b * Tq * x->ldo + (size_t)h * hd;
      attn_backward_head(dq + qoff, dkh, dvh, dout + ooff, out + ooff,
                         lse + ((size_t)b * NH + h) * Tq, x->q + qoff, Kp, KT, VT, P, dS, Xp,
                         zero_row, T, x);
    }
  }
}

/* GPT's interleaved [B, T, 3C]: q, k and v are column blocks of one tensor. */
static AttnArgs interleaved(const float *qkv, int B, int T, int C, int NH, int causal)
{
  size_t ld = (size_t)3 * C;
  return (AttnArgs){qkv, qkv + C, qkv + 2 * C, ld, ld,     ld,     (size_t)C, B,
                    T,   T,       NH,          NH, C / NH, causal, NULL,      0};
}

static AttnArgs grouped(const float *q, const float *k, const float *v, int B, int T, int NH,
                        int NKV, int hd, int causal)
{
  size_t lq = (size_t)NH * hd, lkv = (size_t)NKV * hd;
  return (AttnArgs){q, k, v, lq, lkv, lkv, lq, B, T, T, NH, NKV, hd, causal, NULL, 0};
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

/* Cross-attention: Tq queries over Tk keys, klen[b] of them seen by example b. */
static AttnArgs crossed(const float *q, const float *k, const float *v, const int *klen, int B,
                        int Tq, int Tk, int NH, int hd)
{
  size_t ld = (size_t)NH * hd;
  return (AttnArgs){q, k, v, ld, ld, ld, ld, B, Tq, Tk, NH, NH, hd, 0, klen, 0};
}

void cohort_cpu_cross_attention_forward(float *out, float *lse, const float *q, const float *k,
                                        const float *v, const int *klen, int B, int Tq, int Tk,
                                        int NH, int hd)
{
  AttnArgs x = crossed(q, k, v, klen, B, Tq, Tk, NH, hd);
  attn_forward(out, lse, &x);
}

void cohort_cpu_cross_attention_backward(float *dq, float *dk, float *dv, const float *dout,
                                         const float *q, const float *k, const float *v,
                                         const float *out, const float *lse, const int *klen, int B,
                                         int Tq, int Tk, int NH, int hd)
{
  AttnArgs x = crossed(q, k, v, klen, B, Tq, Tk, NH, hd);
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

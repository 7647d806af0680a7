/* Multi-head attention, causal or not, fused (FlashAttention style): keys and values stream
 * through shared memory in tiles of 32, each query row keeps a running max and sum (online
 * softmax), so the [T, T] matrix is never stored; lse is kept for the backward, which
 * recomputes the probabilities. One warp owns one row (a query in the forward and for dq, a key
 * for dk and dv): lanes take keys (or queries) for the dot products and head dimensions for the
 * weighted sums. Every gradient is summed by one warp in a fixed order, so no atomics; with
 * grouped-query attention a key's warp sums over the query heads of its group in head order.
 * GPT's interleaved [B, T, 3C] and three separate tensors are the same kernels with other row
 * strides. Cross-attention is the same kernels with Tq queries over Tk keys, example b seeing its
 * first klen[b]: the others get no weight and zero gradients, and an example with no key gets
 * zero output and lse -inf. Self-attention whose [T, T] matrices fit the limit (the training
 * shapes) goes through batched products instead: attention-gemm.cu. */
#include "attention.cuh"

#define ATT_MAXD 128                      /* largest head size */
#define ATT_DPL  (ATT_MAXD / COHORT_WARP) /* head dimensions per lane */
#define ATT_ROWS 8                        /* rows (warps) per block */
#define ATT_TILE COHORT_WARP              /* keys or queries per shared tile */

/* The keys example b sees. */
__device__ static inline int keys_of(int b, const AttnShape &s)
{
  return s.klen ? min(max(s.klen[b], 0), s.Tk) : s.Tk;
}

/* One past the last key that query row i of example b sees. */
__device__ static inline int key_end(int i, int b, const AttnShape &s)
{
  return s.causal ? i + s.off + 1 : keys_of(b, s);
}

/* rows r0 .. r0 + ATT_TILE of src (row stride `stride`, hd wide) into dst (row stride hd + 1,
 * so that lanes reading different rows hit different banks); rows past `rows` read as zeros. */
__device__ static void load_tile(float *dst, const float *src, size_t stride, int r0, int rows,
                                 const AttnShape &s)
{
  int ld = s.hd + 1;
  for (int e = threadIdx.x; e < ATT_TILE * s.hd; e += blockDim.x) {
    int r = e / s.hd, d = e % s.hd;
    dst[r * ld + d] = r0 + r < rows ? src[(size_t)(r0 + r) * stride + d] : 0.0f;
  }
}

/* a . b over hd, a contiguous (broadcast), b one lane's row. */
__device__ static inline float dot_hd(const float *a, const float *b, int hd)
{
  float dot = 0.0f;
  for (int d = 0; d < hd; d++)
    dot += a[d] * b[d];
  return dot;
}

__global__ static void attn_fwd_kernel(float *out, float *lse, const float *q, const float *k,
                                       const float *v, AttnShape s)
{
  extern __shared__ float sm[];
  int warp = threadIdx.x / COHORT_WARP, lane = threadIdx.x % COHORT_WARP;
  int bh = blockIdx.x / s.qtiles, b = bh / s.NH, h = bh % s.NH, kvh = h / s.G;
  int hd = s.hd, ld = hd + 1, kn = keys_of(b, s);
  const float *qb = q + (size_t)b * s.Tq * s.ldq + (size_t)h * hd;
  const float *kb = k + (size_t)b * s.Tk * s.ldk + (size_t)kvh * hd;
  const float *vb = v + (size_t)b * s.Tk * s.ldv + (size_t)kvh * hd;
  int i0 = (blockIdx.x % s.qtiles) * ATT_ROWS, i = i0 + warp;
  int kend = key_end(i, b, s), block_kend = key_end(min(i0 + ATT_ROWS, s.Tq) - 1, b, s);
  float *qs = sm + warp * hd, *ks = sm + ATT_ROWS * hd, *vs = ks + ATT_TILE * ld;
  if (i < s.Tq)
    for (int d = lane; d < hd; d += COHORT_WARP)
      qs[d] = qb[(size_t)i * s.ldq + d];
  float m = -INFINITY, l = 0.0f, acc[ATT_DPL];
#pragma unroll
  for (int e = 0; e < ATT_DPL; e++)
    acc[e] = 0.0f;

  for (int j0 = 0; j0 < block_kend; j0 += ATT_TILE) {
    __syncthreads(); /* the previous tile is consumed */
    load_tile(ks, kb, s.ldk, j0, kn, s);
    load_tile(vs, vb, s.ldv, j0, kn, s);
    __syncthreads();
    if (i >= s.Tq || j0 >= kend)
      continue; /* warp-uniform */
    int j = j0 + lane;
    float sc = j < kend ? s.scale * dot_hd(qs, ks + lane * ld, hd) : -INFINITY;
    float m_new = fmaxf(m, cohort_warp_max(sc)); /* finite: lane 0's key j0 < kend */
    float p = j < kend ? expf(sc - m_new) : 0.0f;
    float corr = expf(m - m_new); /* 0 on the first tile, where m is -inf */
    l = l * corr + cohort_warp_sum(p);
    m = m_new;
#pragma unroll
    for (int e = 0; e < ATT_DPL; e++)
      acc[e] *= corr;
    int nk = min(ATT_TILE, kend - j0);
    for (int jj = 0; jj < nk; jj++) {
      float pj = __shfl_sync(COHORT_FULL_MASK, p, jj);
      const float *vr = vs + jj * ld;
#pragma unroll
      for (int e = 0; e < ATT_DPL; e++) {
        int d = lane + e * COHORT_WARP;
        if (d < hd)
          acc[e] += pj * vr[d];
      }
    }
  }
  if (i >= s.Tq)
    return;
  float inv = kend > 0 ? 1.0f / l : 0.0f; /* no key: zero output */
  float *y = out + ((size_t)b * s.Tq + i) * s.ldo + (size_t)h * hd;
#pragma unroll
  for (int e = 0; e < ATT_DPL; e++) {
    int d = lane + e * COHORT_WARP;
    if (d < hd)
      y[d] = acc[e] * inv;
  }
  if (lane == 0 && lse)
    lse[(size_t)bh * s.Tq + i] = kend > 0 ? m + logf(l) : -INFINITY;
}

/* D[bh, i] = dout_i . out_i, which equals sum_j p_ij (dout_i . v_j). */
__global__ static void attn_delta_kernel(float *D, const float *dout, const float *out, int B,
                                         AttnShape s)
{
  int lane = threadIdx.x % COHORT_WARP;
  size_t row = (size_t)blockIdx.x * ATT_ROWS + threadIdx.x / COHORT_WARP; /* (bh, i) */
  if (row >= (size_t)B * s.NH * s.Tq)
    return;
  int i = (int)(row % s.Tq), bh = (int)(row / s.Tq), b = bh / s.NH, h = bh % s.NH;
  size_t off = ((size_t)b * s.Tq + i) * s.ldo + (size_t)h * s.hd;
  float acc = 0.0f;
  for (int d = lane; d < s.hd; d += COHORT_WARP)
    acc += dout[off + d] * out[off + d];
  acc = cohort_warp_sum(acc);
  if (lane == 0)
    D[row] = acc;
}

/* dq_i = sum_j ds_ij k_j, ds_ij = p_ij (dout_i . v_j - D_i) * scale. */
__global__ static void attn_dq_kernel(float *dq, const float *dout, const float *q, const float *k,
                                      const float *v, const float *lse, const float *D, AttnShape s)
{
  extern __shared__ float sm[];
  int warp = threadIdx.x / COHORT_WARP, lane = threadIdx.x % COHORT_WARP;
  int bh = blockIdx.x / s.qtiles, b = bh / s.NH, h = bh % s.NH, kvh = h / s.G;
  int hd = s.hd, ld = hd + 1, kn = keys_of(b, s);
  const float *qb = q + (size_t)b * s.Tq * s.ldq + (size_t)h * hd;
  const float *kb = k + (size_t)b * s.Tk * s.ldk + (size_t)kvh * hd;
  const float *vb = v + (size_t)b * s.Tk * s.ldv + (size_t)kvh * hd;
  const float *gbase = dout + (size_t)b * s.Tq * s.ldo + (size_t)h * hd;
  int i0 = (blockIdx.x % s.qtiles) * ATT_ROWS, i = i0 + warp;
  int kend = key_end(i, b, s), block_kend = key_end(min(i0 + ATT_ROWS, s.Tq) - 1, b, s);
  float *qs = sm + warp * hd, *gs = sm + (ATT_ROWS + warp) * hd;
  float *ks = sm + 2 * ATT_ROWS * hd, *vs = ks + ATT_TILE * ld;
  float li = 0.0f, Di = 0.0f;
  if (i < s.Tq) {
    for (int d = lane; d < hd; d += COHORT_WARP) {
      qs[d] = qb[(size_t)i * s.ldq + d];
      gs[d] = gbase[(size_t)i * s.ldo + d];
    }
    li = lse[(size_t)bh * s.Tq + i];
    Di = D[(size_t)bh * s.Tq + i];
  }
  float acc[ATT_DPL];
#pragma unroll
  for (int e = 0; e < ATT_DPL; e++)
    acc[e] = 0.0f;

  for (int j0 = 0; j0 < block_kend; j0 += ATT_TILE) {
    __syncthreads();
    load_tile(ks, kb, s.ldk, j0, kn, s);
    load_tile(vs, vb, s.ldv, j0, kn, s);
    __syncthreads();
    if (i >= s.Tq || j0 >= kend)
      continue;
    int j = j0 + lane;
    float ds = 0.0f;
    if (j < kend) {
      float p = expf(s.scale * dot_hd(qs, ks + lane * ld, hd) - li);
      ds = p * (dot_hd(gs, vs + lane * ld, hd) - Di) * s.scale;
    }
    int nk = min(ATT_TILE, kend - j0);
    for (int jj = 0; jj < nk; jj++) {
      float dsj = __shfl_sync(COHORT_FULL_MASK, ds, jj);
      const float *kr = ks + jj * ld;
#pragma unroll
      for (int e = 0; e < ATT_DPL; e++) {
        int d = lane + e * COHORT_WARP;
        if (d < hd)
          acc[e] += dsj * kr[d];
      }
    }
  }
  if (i >= s.Tq)
    return;
  float *dqr = dq + ((size_t)b * s.Tq + i) * s.ldq + (size_t)h * hd;
#pragma unroll
  for (int e = 0; e < ATT_DPL; e++) {
    int d = lane + e * COHORT_WARP;
    if (d < hd)
      dqr[d] = acc[e];
  }
}

/* For key row j of key/value head kvh: dk_j = sum_i ds_ij q_i and dv_j = sum_i p_ij dout_i over
 * the queries that see key j (causal: i >= j; otherwise all) of each query head of the group,
 * heads in order. */
__global__ static void attn_dkv_kernel(float *dk, float *dv, const float *dout, const float *q,
                                       const float *k, const float *v, const float *lse,
                                       const float *D, AttnShape s)
{
  extern __shared__ float sm[];
  int warp = threadIdx.x / COHORT_WARP, lane = threadIdx.x % COHORT_WARP;
  int bk = blockIdx.x / s.ktiles, b = bk / s.NKV, kvh = bk % s.NKV;
  int hd = s.hd, ld = hd + 1, kn = keys_of(b, s);
  int j_first = (blockIdx.x % s.ktiles) * ATT_ROWS, j = j_first + warp;
  float *kr = sm + warp * hd, *vr = sm + (ATT_ROWS + warp) * hd;
  float *qs = sm + 2 * ATT_ROWS * hd, *gs = qs + ATT_TILE * ld;
  size_t krow = ((size_t)b * s.Tk + j) * s.ldk + (size_t)kvh * hd;
  size_t vrow = ((size_t)b * s.Tk + j) * s.ldv + (size_t)kvh * hd;
  if (j < s.Tk)
    for (int d = lane; d < hd; d += COHORT_WARP) {
      kr[d] = k[krow + d];
      vr[d] = v[vrow + d];
    }
  float dka[ATT_DPL], dva[ATT_DPL];
#pragma unroll
  for (int e = 0; e < ATT_DPL; e++)
    dka[e] = dva[e] = 0.0f;

  for (int gi = 0; gi < s.G; gi++) {
    int h = kvh * s.G + gi, bh = b * s.NH + h;
    const float *qb = q + (size_t)b * s.Tq * s.ldq + (size_t)h * hd;
    const float *gbase = dout + (size_t)b * s.Tq * s.ldo + (size_t)h * hd;
    const float *lse_bh = lse + (size_t)bh * s.Tq, *D_bh = D + (size_t)bh * s.Tq;
    for (int i0 = s.causal ? j_first : 0; i0 < s.Tq; i0 += ATT_TILE) {
      __syncthreads();
      load_tile(qs, qb, s.ldq, i0, s.Tq, s);
      load_tile(gs, gbase, s.ldo, i0, s.Tq, s);
      __syncthreads();
      if (j >= kn || (s.causal && i0 + ATT_TILE <= j))
        continue; /* no query of this tile sees key j (keys past klen: none does) */
      int i = i0 + lane;
      float p = 0.0f, ds = 0.0f;
      if ((!s.causal || i >= j) && i < s.Tq) {
        p = expf(s.scale * dot_hd(qs + lane * ld, kr, hd) - lse_bh[i]);
        ds = p * (dot_hd(gs + lane * ld, vr, hd) - D_bh[i]) * s.scale;
      }
      int first = s.causal ? max(0, j - i0) : 0, end = min(ATT_TILE, s.Tq - i0);
      for (int ii = first; ii < end; ii++) {
        float pi = __shfl_sync(COHORT_FULL_MASK, p, ii);
        float dsi = __shfl_sync(COHORT_FULL_MASK, ds, ii);
        const float *qr = qs + ii * ld, *gr = gs + ii * ld;
#pragma unroll
        for (int e = 0; e < ATT_DPL; e++) {
          int d = lane + e * COHORT_WARP;
          if (d < hd) {
            dva[e] += pi * gr[d];
            dka[e] += dsi * qr[d];
          }
        }
      }
    }
  }
  if (j >= s.Tk)
    return;
#pragma unroll
  for (int e = 0; e < ATT_DPL; e++) {
    int d = lane + e * COHORT_WARP;
    if (d < hd) {
      dk[krow + d] = dka[e];
      dv[vrow + d] = dva[e];
    }
  }
}

/* Fills `s` or records why the shape cannot run here. */
static bool attn_shape(AttnShape *s, int B, int T, int NH, int NKV, int hd, int causal,
                       const char *op)
{
  if (B <= 0 || T <= 0 || NH <= 0 || NKV <= 0 || hd <= 0 || NH % NKV != 0) {
    cohort_cuda_fail("cuda: %s: shape B=%d T=%d NH=%d NKV=%d hd=%d is invalid (all positive, NKV "
                     "dividing NH)",
                     op, B, T, NH, NKV, hd);
    return false;
  }
  if (hd > ATT_MAXD) {
    cohort_cuda_fail("cuda: %s: head size %d is larger than the %d supported", op, hd, ATT_MAXD);
    return false;
  }
  s->Tq = s->Tk = T;
  s->NH = NH;
  s->NKV = NKV;
  s->G = NH / NKV;
  s->hd = hd;
  s->qtiles = s->ktiles = (T + ATT_ROWS - 1) / ATT_ROWS;
  s->causal = causal != 0;
  s->klen = NULL;
  s->off = 0;
  s->scale = 1.0f / sqrtf((float)hd);
  /* three contiguous tensors; interleaved() below changes the strides for GPT's one */
  s->ldq = s->ldo = (size_t)NH * hd;
  s->ldk = s->ldv = (size_t)NKV * hd;
  return true;
}

/* GPT's [B, T, 3C]: q, k and v are column blocks of one tensor. */
static bool interleaved(AttnShape *s, int B, int T, int C, int NH, int causal, const char *op)
{
  if (NH <= 0 || C <= 0 || C % NH != 0) {
    cohort_cuda_fail("cuda: %s: shape B=%d T=%d C=%d NH=%d is invalid (C must be a multiple of "
                     "NH, all positive)",
                     op, B, T, C, NH);
    return false;
  }
  if (!attn_shape(s, B, T, NH, NH, C / NH, causal, op))
    return false;
  s->ldq = s->ldk = s->ldv = (size_t)3 * C;
  s->ldo = (size_t)C;
  return true;
}

static size_t fwd_shmem(const AttnShape &s)
{
  return sizeof(float) * (ATT_ROWS * s.hd + 2 * ATT_TILE * (s.hd + 1));
}

static void attn_forward(float *out, float *lse, const float *q, const float *k, const float *v,
                         int B, const AttnShape &s)
{
  int jc = cohort_attn_gemm_heads(s, 1, lse != NULL);
  if (jc > 0) {
    float *work = (float *)cohort_cuda_scratch(sizeof(float) * jc * s.Tq * s.Tk);
    if (work)
      cohort_attn_gemm_forward(out, lse, q, k, v, B, jc, work, s);
    return;
  }
  unsigned blocks = (unsigned)((size_t)B * s.NH * s.qtiles);
  attn_fwd_kernel<<<blocks, ATT_ROWS * COHORT_WARP, fwd_shmem(s)>>>(out, lse, q, k, v, s);
  cohort_cuda_launched("attention_forward");
}

static void attn_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                          const float *k, const float *v, const float *out, const float *lse, int B,
                          const AttnShape &s)
{
  size_t rows = (size_t)B * s.NH * s.Tq, d_floats = (rows + 63) / 64 * 64;
  int jc = cohort_attn_gemm_heads(s, 2, lse != NULL);
  float *D =
      (float *)cohort_cuda_scratch(sizeof(float) * (d_floats + 2 * (size_t)jc * s.Tq * s.Tk));
  if (!D)
    return;
  attn_delta_kernel<<<(unsigned)((rows + ATT_ROWS - 1) / ATT_ROWS), ATT_ROWS * COHORT_WARP>>>(
      D, dout, out, B, s);
  if (!cohort_cuda_launched("attention_backward (row deltas)"))
    return;
  if (jc > 0) {
    cohort_attn_gemm_backward(dq, dk, dv, dout, q, k, v, lse, D, B, jc, D + d_floats, s);
    return;
  }
  size_t shmem = sizeof(float) * (2 * ATT_ROWS * s.hd + 2 * ATT_TILE * (s.hd + 1));
  unsigned q_blocks = (unsigned)((size_t)B * s.NH * s.qtiles);
  attn_dq_kernel<<<q_blocks, ATT_ROWS * COHORT_WARP, shmem>>>(dq, dout, q, k, v, lse, D, s);
  if (!cohort_cuda_launched("attention_backward (queries)"))
    return;
  unsigned kv_blocks = (unsigned)((size_t)B * s.NKV * s.ktiles);
  attn_dkv_kernel<<<kv_blocks, ATT_ROWS * COHORT_WARP, shmem>>>(dk, dv, dout, q, k, v, lse, D, s);
  cohort_cuda_launched("attention_backward (keys, values)");
}

void cohort_cuda_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C,
                                   int NH, int causal)
{
  AttnShape s;
  if (interleaved(&s, B, T, C, NH, causal, "attention_forward"))
    attn_forward(out, lse, qkv, qkv + C, qkv + 2 * C, B, s);
}

void cohort_cuda_attention_backward(float *dqkv, const float *dout, const float *qkv,
                                    const float *out, const float *lse, int B, int T, int C, int NH,
                                    int causal)
{
  AttnShape s;
  if (interleaved(&s, B, T, C, NH, causal, "attention_backward"))
    attn_backward(dqkv, dqkv + C, dqkv + 2 * C, dout, qkv, qkv + C, qkv + 2 * C, out, lse, B, s);
}

void cohort_cuda_attention_gqa_forward(float *out, float *lse, const float *q, const float *k,
                                       const float *v, int B, int T, int NH, int NKV, int hd,
                                       int causal)
{
  AttnShape s;
  if (attn_shape(&s, B, T, NH, NKV, hd, causal, "attention_gqa_forward"))
    attn_forward(out, lse, q, k, v, B, s);
}

void cohort_cuda_attention_gqa_backward(float *dq, float *dk, float *dv, const float *dout,
                                        const float *q, const float *k, const float *v,
                                        const float *out, const float *lse, int B, int T, int NH,
                                        int NKV, int hd, int causal)
{
  AttnShape s;
  if (attn_shape(&s, B, T, NH, NKV, hd, causal, "attention_gqa_backward"))
    attn_backward(dq, dk, dv, dout, q, k, v, out, lse, B, s);
}

/* Cross-attention's shape: Tq queries over Tk keys, klen[b] of them seen by example b. */
static bool crossed(AttnShape *s, const int *klen, int B, int Tq, int Tk, int NH, int hd,
                    const char *op)
{
  if (Tq <= 0 || Tk <= 0) {
    cohort_cuda_fail("cuda: %s: shape Tq=%d Tk=%d is invalid (both positive)", op, Tq, Tk);
    return false;
  }
  if (!attn_shape(s, B, Tq, NH, NH, hd, 0, op))
    return false;
  s->Tk = Tk;
  s->ktiles = (Tk + ATT_ROWS - 1) / ATT_ROWS;
  s->klen = klen;
  return true;
}

void cohort_cuda_cross_attention_forward(float *out, float *lse, const float *q, const float *k,
                                         const float *v, const int *klen, int B, int Tq, int Tk,
                                         int NH, int hd)
{
  AttnShape s;
  if (crossed(&s, klen, B, Tq, Tk, NH, hd, "cross_attention_forward"))
    attn_forward(out, lse, q, k, v, B, s);
}

void cohort_cuda_cross_attention_backward(float *dq, float *dk, float *dv, const float *dout,
                                          const float *q, const float *k, const float *v,
                                          const float *out, const float *lse, const int *klen,
                                          int B, int Tq, int Tk, int NH, int hd)
{
  AttnShape s;
  if (crossed(&s, klen, B, Tq, Tk, NH, hd, "cross_attention_backward"))
    attn_backward(dq, dk, dv, dout, q, k, v, out, lse, B, s);
}

void cohort_cuda_attention_gqa_cached(float *out, const float *q, const float *k, const float *v,
                                      int Tq, int Tk, int NH, int NKV, int hd)
{
  AttnShape s;
  if (Tk < Tq) {
    cohort_cuda_fail("cuda: attention_gqa_cached: %d queries over %d keys (allowed: Tq <= Tk)", Tq,
                     Tk);
    return;
  }
  if (!attn_shape(&s, 1, Tq, NH, NKV, hd, 1, "attention_gqa_cached"))
    return;
  s.Tk = Tk;
  s.ktiles = (Tk + ATT_ROWS - 1) / ATT_ROWS;
  s.off = Tk - Tq;
  attn_forward(out, NULL, q, k, v, 1, s);
}

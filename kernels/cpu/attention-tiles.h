/* The register tiles of kernels/cpu/attention.c, included once per vector width: TILE_V (a GCC
 * vector of TILE_W floats, 16 or 8), TILE_ATTR (the functions' target attribute) and TILE_FN
 * (the name with its width's suffix) are defined before each inclusion and undefined here. Each
 * output element sums its terms in the same order whatever the width. */

/* A tile of tile_scores and tile_weighted_sum: TILE_RG rows by TILE_CV vectors of accumulators.
 * AVX-512: 4 x 1 of 16 floats. AVX2: 4 x 2 of 8 floats, 8 of its 16 registers, so that each
 * step loads 2 vectors and broadcasts 4 values for its 8 fused multiply-adds (8 x 1 needed 9
 * loads, 8 of them broadcasts, which Zen 3 issues 2 per cycle: slower than the FMAs). */
#define TILE_RG 4
#define TILE_CV (TILE_W == 16 ? 1 : 2)
/* Vectors of a row of G that tile_outer_acc keeps in registers: 64 floats, a common head. */
#define TILE_TG (64 / TILE_W)

/* S[r][j] = sum_d a[r][d] * BT[d][j] for the QB rows a[r] and keys j < n (n % JW == 0). */
TILE_ATTR static void TILE_FN(tile_scores)(float *restrict S, size_t ls, const float *const *a,
                                           const float *restrict BT, size_t lb, int n, int hd)
{
  for (int j0 = 0; j0 < n; j0 += TILE_W * TILE_CV)
    for (int r0 = 0; r0 < QB; r0 += TILE_RG) {
      TILE_V acc[TILE_RG][TILE_CV];
#pragma GCC unroll 8
      for (int r = 0; r < TILE_RG; r++)
#pragma GCC unroll 2
        for (int c = 0; c < TILE_CV; c++)
          acc[r][c] = (TILE_V){0};
      for (int d = 0; d < hd; d++) {
        TILE_V b[TILE_CV];
#pragma GCC unroll 2
        for (int c = 0; c < TILE_CV; c++)
          b[c] = *(const TILE_V *)(BT + (size_t)d * lb + j0 + c * TILE_W);
#pragma GCC unroll 8
        for (int r = 0; r < TILE_RG; r++) {
          float av = a[r0 + r][d];
#pragma GCC unroll 2
          for (int c = 0; c < TILE_CV; c++)
            acc[r][c] += av * b[c];
        }
      }
#pragma GCC unroll 8
      for (int r = 0; r < TILE_RG; r++)
#pragma GCC unroll 2
        for (int c = 0; c < TILE_CV; c++)
          *(TILE_V *)(S + (size_t)(r0 + r) * ls + j0 + c * TILE_W) = acc[r][c];
    }
}

/* Y[r][:] = sum_{j < n} P[r][j] * X[j][:] for the first `rows` of QB rows (X rows `xs`
 * apart); overwrites Y. */
TILE_ATTR static void TILE_FN(tile_weighted_sum)(float *restrict Y, size_t ys, int rows,
                                                 const float *restrict P, size_t lp,
                                                 const float *restrict X, size_t xs, int n, int hd)
{
  int d0 = 0;
  for (; d0 + TILE_W * TILE_CV <= hd; d0 += TILE_W * TILE_CV)
    for (int r0 = 0; r0 < rows; r0 += TILE_RG) {
      TILE_V acc[TILE_RG][TILE_CV];
#pragma GCC unroll 8
      for (int r = 0; r < TILE_RG; r++)
#pragma GCC unroll 2
        for (int c = 0; c < TILE_CV; c++)
          acc[r][c] = (TILE_V){0};
      for (int j = 0; j < n; j++) {
        TILE_V x[TILE_CV];
#pragma GCC unroll 2
        for (int c = 0; c < TILE_CV; c++)
          x[c] = *(const TILE_V *)(X + (size_t)j * xs + d0 + c * TILE_W);
#pragma GCC unroll 8
        for (int r = 0; r < TILE_RG; r++) {
          float pv = P[(size_t)(r0 + r) * lp + j];
#pragma GCC unroll 2
          for (int c = 0; c < TILE_CV; c++)
            acc[r][c] += pv * x[c];
        }
      }
      for (int r = 0; r < TILE_RG && r0 + r < rows; r++)
#pragma GCC unroll 2
        for (int c = 0; c < TILE_CV; c++)
          *(TILE_V *)(Y + (size_t)(r0 + r) * ys + d0 + c * TILE_W) = acc[r][c];
    }
  for (; d0 + TILE_W <= hd; d0 += TILE_W) /* one vector left (AVX2, hd % 16 == 8) */
    for (int r0 = 0; r0 < rows; r0 += TILE_RG) {
      TILE_V acc[TILE_RG];
#pragma GCC unroll 8
      for (int r = 0; r < TILE_RG; r++)
        acc[r] = (TILE_V){0};
      for (int j = 0; j < n; j++) {
        TILE_V x = *(const TILE_V *)(X + (size_t)j * xs + d0);
#pragma GCC unroll 8
        for (int r = 0; r < TILE_RG; r++)
          acc[r] += P[(size_t)(r0 + r) * lp + j] * x;
      }
      for (int r = 0; r < TILE_RG && r0 + r < rows; r++)
        *(TILE_V *)(Y + (size_t)(r0 + r) * ys + d0) = acc[r];
    }
  if (d0 < hd) { /* head sizes that are not a multiple of the width */
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
 * key/value gradient update. Rows are added in order r = 0, 1, ... for every element. TILE_TG
 * vectors of a row of G stay in registers over all rows, so G is loaded and stored once per
 * call and each broadcast W[r][j] serves them all. */
TILE_ATTR static void TILE_FN(tile_outer_acc)(float *restrict G, size_t gs, const float *restrict W,
                                              size_t lw, const float *restrict X, size_t xs,
                                              int rows, int n, int hd)
{
  int full = hd / TILE_W * TILE_W;
  int j = 0;
  /* A head of half the register block (DiT's 32 channels): two keys at a time, so that as many
   * independent sums are in flight as with a full block (one vector per key and row would wait
   * on each fused multiply-add's latency). Each element still adds the rows in order. */
  if (full == TILE_TG / 2 * TILE_W)
    for (; j + 1 < n; j += 2) {
      float *g0 = G + (size_t)j * gs, *g1 = g0 + gs;
      TILE_V a0[TILE_TG / 2], a1[TILE_TG / 2];
#pragma GCC unroll 8
      for (int t = 0; t < TILE_TG / 2; t++) {
        a0[t] = *(TILE_V *)(g0 + t * TILE_W);
        a1[t] = *(TILE_V *)(g1 + t * TILE_W);
      }
      for (int r = 0; r < rows; r++) {
        float w0 = W[(size_t)r * lw + j], w1 = W[(size_t)r * lw + j + 1];
        const float *x = X + (size_t)r * xs;
#pragma GCC unroll 8
        for (int t = 0; t < TILE_TG / 2; t++) {
          TILE_V xv = *(const TILE_V *)(x + t * TILE_W);
          a0[t] += w0 * xv;
          a1[t] += w1 * xv;
        }
      }
#pragma GCC unroll 8
      for (int t = 0; t < TILE_TG / 2; t++) {
        *(TILE_V *)(g0 + t * TILE_W) = a0[t];
        *(TILE_V *)(g1 + t * TILE_W) = a1[t];
      }
      for (int d = full; d < hd; d++)
        for (int r = 0; r < rows; r++) {
          g0[d] += W[(size_t)r * lw + j] * X[(size_t)r * xs + d];
          g1[d] += W[(size_t)r * lw + j + 1] * X[(size_t)r * xs + d];
        }
    }
  for (; j < n; j++) {
    float *g = G + (size_t)j * gs;
    int d0 = 0;
    for (; d0 + TILE_TG * TILE_W <= full; d0 += TILE_TG * TILE_W) {
      TILE_V acc[TILE_TG];
#pragma GCC unroll 8
      for (int t = 0; t < TILE_TG; t++)
        acc[t] = *(TILE_V *)(g + d0 + t * TILE_W);
      for (int r = 0; r < rows; r++) {
        float w = W[(size_t)r * lw + j];
        const float *x = X + (size_t)r * xs + d0;
#pragma GCC unroll 8
        for (int t = 0; t < TILE_TG; t++)
          acc[t] += w * *(const TILE_V *)(x + t * TILE_W);
      }
#pragma GCC unroll 8
      for (int t = 0; t < TILE_TG; t++)
        *(TILE_V *)(g + d0 + t * TILE_W) = acc[t];
    }
    for (; d0 < full; d0 += TILE_W) {
      TILE_V acc = *(TILE_V *)(g + d0);
      for (int r = 0; r < rows; r++)
        acc += W[(size_t)r * lw + j] * *(const TILE_V *)(X + (size_t)r * xs + d0);
      *(TILE_V *)(g + d0) = acc;
    }
    for (int d = full; d < hd; d++)
      for (int r = 0; r < rows; r++)
        g[d] += W[(size_t)r * lw + j] * X[(size_t)r * xs + d];
  }
}

#undef TILE_RG
#undef TILE_CV
#undef TILE_TG
#undef TILE_V
#undef TILE_W
#undef TILE_ATTR
#undef TILE_FN

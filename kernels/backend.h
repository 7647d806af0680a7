/* The compute backend table. The models (engine/models/) and the optimizer call every op through
 * one CohortBackend, so the CPU backend (kernels/cpu) and a CUDA backend provide the same
 * table and the model is written once.
 *
 * Conventions for every op:
 *  - pointers to tensors are backend memory (from `alloc`); host memory moves in and out only
 *    through `upload` / `download`;
 *  - tensors are row-major, contiguous; N is the number of rows (B*T positions);
 *  - "accumulates" means the op ADDS into its output (gradients accumulate over micro-batches
 *    and over the several uses of a tensor); every other output is overwritten;
 *  - results depend only on the inputs and the thread count (no atomics, fixed reduction
 *    order), so runs with the same seed and thread count are bit-identical. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* How `gemm` computes. The mode is a setting of the backend (for the whole process, every
 * device), changed only between steps. In every mode the accumulation and C are fp32. */
typedef enum CohortGemmMode {
  COHORT_GEMM_FP32, /* fp32 products (the default) */
  COHORT_GEMM_TF32, /* fp32 operands on TF32 tensor cores where the backend has them (CUDA);
                       the CPU computes fp32 */
  COHORT_GEMM_BF16, /* A and B rounded to bfloat16 (to nearest, ties to even) before the
                       product: tensor cores on a GPU; the CPU rounds, then multiplies in fp32,
                       which gives the same products (bf16 x bf16 is exact in fp32) */
  COHORT_GEMM_FP16, /* the same with IEEE binary16: magnitudes past 65504 become inf, tiny ones
                       subnormal or 0 (why fp16 training needs loss scaling) */
} CohortGemmMode;

typedef struct CohortBackend {
  const char *name; /* "cpu", "cuda" */

  /* Threads for the backend's own loops and its BLAS; n <= 0 keeps the current setting. */
  void (*set_threads)(int n);
  int (*get_threads)(void);
  /* Memory. `alloc` returns `bytes` of zeroed, 64-byte aligned memory, or NULL. */
  void *(*alloc)(size_t bytes);
  void (*free)(void *p);
  void (*zero)(void *p, size_t bytes);
  void (*copy)(void *dst, const void *src, size_t bytes);      /* backend to backend */
  void (*upload)(void *dst, const void *host, size_t bytes);   /* host to backend */
  void (*download)(void *host, const void *src, size_t bytes); /* backend to host */
  /* Address space with memory behind only the parts in use (ZeRO stage 3's parameters and
   * stages 2 and 3's gradients, which are whole only one layer at a time; frozen_dtype bf16's
   * base): `reserve` returns `bytes` of 64-byte aligned address range, or NULL. Only committed
   * bytes may be read or written: `commit` gives [p, p + bytes) memory (what was committed
   * keeps its contents, the rest reads zeros) and returns 0, or -1 when there is no memory for
   * it (last_error says why on a device); `decommit` makes [p, p + bytes) read as zeros when
   * committed again and gives back the memory no committed byte shares any more (a page on the
   * CPU, a granule of 2 MiB on a GPU: neighbours that share one keep it until both are gone),
   * once the work queued so far has finished; `unreserve` frees a range `reserve` returned,
   * after waiting for the device. On the CPU memory appears wherever the range is written and
   * `commit` does nothing, except in the strict mode of tests (COHORT_STRICT_RESERVE,
   * kernels/cpu/reserve.c), where an access outside what is committed faults as on a GPU.
   * NULL (all four) where the backend has no such memory. */
  void *(*reserve)(size_t bytes);
  int (*commit)(void *p, size_t bytes);
  void (*decommit)(void *p, size_t bytes);
  void (*unreserve)(void *p, size_t bytes);

  /* Queues of work, for devices whose ops run asynchronously (CUDA); all NULL on the CPU,
   * whose ops have finished when they return. The DDP reducer overlaps the all-reduce with
   * backward through these. Each int-returning op returns 0, or -1 with the reason in
   * last_error(); pointer-returning ones return NULL on failure. */
  int (*set_device)(int index); /* makes device `index` current for the calling thread */
  void *(*event_new)(void);
  void (*event_free)(void *event);
  /* Records `event` after the work queued so far by the table's ops on this thread's device. */
  int (*event_record)(void *event);
  void *(*stream_new)(void); /* a queue that does not wait for the table's ops */
  void (*stream_free)(void *stream);
  /* On `stream`: waits for `after_event` (NULL: nothing), copies `bytes` device to host
   * (to_host) or host to device, and returns when the copy is done. */
  int (*stream_copy)(void *stream, void *after_event, void *dst, const void *src, size_t bytes,
                     int to_host);
  void *(*host_alloc)(size_t bytes); /* page-locked host memory for fast copies */
  void (*host_free)(void *p);
  /* to_bf16 on `stream` after `after_event`, then records `done_event` (either may be NULL);
   * returns without waiting. */
  int (*to_bf16_on)(void *stream, void *after_event, uint16_t *dst, const float *src, size_t n,
                    void *done_event);
  /* dst = fp32(src) / divisor on `stream`; returns when done. */
  int (*from_bf16_div_on)(void *stream, float *dst, const uint16_t *src, size_t n, float divisor);
  /* The first failure since the last clear, one line, or NULL. */
  const char *(*last_error)(void);

  /* ---- Matrix products. The linear layers of every family are `gemm` + `add_bias`. ---- */
  /* C = alpha * op(A) @ op(B) + beta * C with op(X) = X or X^T; op(A) is [M, K], op(B)
   * [K, N], C [M, N]; lda/ldb/ldc are the row strides of the stored matrices. */
  void (*gemm)(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
               const float *B, int ldb, float beta, float *C, int ldc);
  /* Sets the mode of every later `gemm` (see CohortGemmMode). */
  void (*set_gemm_mode)(CohortGemmMode mode);
  CohortGemmMode (*get_gemm_mode)(void);
  /* What computes products in `mode` now, in words for the log (e.g. "oneDNN 2.6.3 matmul
   * (AVX-512 BF16): bf16 operands, fp32 accumulation in hardware"); NULL where the backend
   * does not say. The string is static. */
  const char *(*describe_gemm)(CohortGemmMode mode);
  /* out[n, :] += bias for each of the N rows of width `cols`. */
  void (*add_bias)(float *out, const float *bias, int N, int cols);
  /* dbias += column sums of dout [N, cols] (accumulates). */
  void (*bias_backward)(float *dbias, const float *dout, int N, int cols);

  /* ---- Precision: bfloat16 copies (the reducer's bf16 all-reduce, mixed precision). ---- */
  /* dst = the bfloat16 bits of src (to nearest, ties to even; NaN stays NaN), n values. */
  void (*to_bf16)(uint16_t *dst, const float *src, size_t n);
  /* dst = s * src, bfloat16 bits to fp32 (the product rounded once, in fp32). */
  void (*from_bf16)(float *dst, const uint16_t *src, size_t n, float s);

  /* ---- Activations, element-wise over n values. ---- */
  /* out = gelu_tanh(inp) over n values. */
  void (*gelu_forward)(float *out, const float *inp, size_t n);
  /* dinp = dout * gelu_tanh'(inp); dinp may be dout (in place). */
  void (*gelu_backward)(float *dinp, const float *inp, const float *dout, size_t n);
  /* out = inp * sigmoid(inp) over n values. */
  void (*silu_forward)(float *out, const float *inp, size_t n);
  /* dinp = dout * silu'(inp); dinp may be dout (in place). */
  void (*silu_backward)(float *dinp, const float *inp, const float *dout, size_t n);
  /* out = max(inp, 0) over n values (NaN stays NaN, as torch.relu). */
  void (*relu_forward)(float *out, const float *inp, size_t n);
  /* dinp = dout where x > 0, else 0; x is relu's input or its output (same sign test).
   * dinp may be dout (in place). */
  void (*relu_backward)(float *dinp, const float *x, const float *dout, size_t n);
  /* Per row of inp [N, V]: out = softmax(scale * inp) (the row's maximum subtracted first);
   * out may be inp. Attention written as matrix products (the VAE's single head). */
  void (*softmax_forward)(float *out, const float *inp, int N, int V, float scale);
  /* dinp = scale * out * (dout - sum over the row of dout * out), from the forward's out
   * (overwrites; dinp may be dout). */
  void (*softmax_backward)(float *dinp, const float *out, const float *dout, int N, int V,
                           float scale);
  /* SwiGLU, the gated MLP of Llama-family models: out = silu(gate) * up over n values. */
  void (*swiglu_forward)(float *out, const float *gate, const float *up, size_t n);
  /* dgate = dout * up * silu'(gate) and dup = dout * silu(gate) (both overwritten); either may
   * be dout (in place), not each other. */
  void (*swiglu_backward)(float *dgate, float *dup, const float *dout, const float *gate,
                          const float *up, size_t n);

  /* ---- Element-wise arithmetic. adaLN-Zero's per-example vectors (shift, scale, gate) are column
   * slices of the [B, 6C] modulation output: element c of example b is at v[b * ld + c], ld
   * being that matrix's row stride; token tensors are [B, T, C]. ---- */
  /* out = a + b over n values. */
  void (*residual_forward)(float *out, const float *a, const float *b, size_t n);
  /* out = a * x + b * y over n values; out may be x or y (classifier-free guidance, Euler
   * steps). */
  void (*axpby)(float *out, float a, const float *x, float b, const float *y, size_t n);
  /* values *= s */
  void (*scale)(float *values, size_t n, float s);
  /* Dropout with a mask that depends only on where a value is: out = inp / (1 - p) where kept,
   * 0 where dropped, over rows × cols; value (r, c) is dropped with probability p by
   * cohort_dropout_keep (kernels/math-inline.h) of keys[r / rows_per_key], r % rows_per_key, c
   * and `salt`, so the same arguments drop the same values on every backend and the backward
   * is the same call on the gradient. keys (backend memory) has rows / rows_per_key entries;
   * out may be inp. */
  void (*dropout)(float *out, const float *inp, const uint64_t *keys, int rows, int rows_per_key,
                  int cols, uint64_t salt, float p);
  /* out[b, t, c] = x[b, t, c] * (1 + scale[b * ld + c]) + shift[b * ld + c]. */
  void (*modulate_forward)(float *out, const float *x, const float *shift, const float *scale,
                           int B, int T, int C, int ld);
  /* dx += dout * (1 + scale); dshift[b * ld + c] += sum_t dout; dscale[b * ld + c] +=
   * sum_t dout * x (all three accumulate; dx must not alias dout). */
  void (*modulate_backward)(float *dx, float *dshift, float *dscale, const float *dout,
                            const float *x, const float *scale, int B, int T, int C, int ld);
  /* out[b, t, c] = x[b, t, c] + gate[b * ld + c] * y[b, t, c]; out may be x (in place). */
  void (*gated_residual_forward)(float *out, const float *x, const float *gate, const float *y,
                                 int B, int T, int C, int ld);
  /* dx += dout (accumulates; NULL when the caller keeps dout itself as x's gradient, the
   * in-place residual stream); dy = gate * dout (overwrites, as y is a layer's fresh output);
   * dgate[b * ld + c] += sum_t dout * y (accumulates). dy must not alias dout. */
  void (*gated_residual_backward)(float *dx, float *dy, float *dgate, const float *dout,
                                  const float *gate, const float *y, int B, int T, int C, int ld);

  /* ---- Normalisation: LayerNorm per row, BatchNorm2d over NCHW in the steps SyncBatchNorm
   * combines across ranks. ---- */
  /* out = (inp - mean) * rstd * w + b per row, rstd = 1 / sqrt(variance + eps) (GPT-2: eps
   * 1e-5, DiT: 1e-6); mean and rstd [N] are kept for backward. w NULL means no scale (all
   * ones) and b NULL no shift (zeros): LayerNorm without affine parameters. */
  void (*layernorm_forward)(float *out, float *mean, float *rstd, const float *inp, const float *w,
                            const float *b, int N, int C, float eps);
  /* Accumulates dinp, dw and db. w as in the forward (NULL: ones); dw or db NULL skips that
   * gradient (no affine parameters). eps is not needed: rstd holds it. */
  void (*layernorm_backward)(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                             const float *w, const float *mean, const float *rstd, int N, int C);
  /* BatchNorm2d over x [B, C, HW], split so that SyncBatchNorm can combine statistics across
   * ranks between the steps. Per channel c the n = B*HW values x[:, c, :]:
   * mean[c] and m2[c] = sum of (x - mean)^2 (overwrite), two passes in double. Ranks'
   * (n, mean, m2) combine exactly with Chan's formula (bn_combine_stats). */
  void (*bn_stats)(const float *x, int B, int C, int HW, float *mean, float *m2);
  /* Chan's parallel formula over R ranks in rank order: `ranks` is [R, 2C+1], row r holding
   * rank r's mean[C], m2[C] and its count n_r (a float: exact up to 2^24 values per channel);
   * writes the global mean [C] and m2 [C]. */
  void (*bn_combine_stats)(float *mean, float *m2, const float *ranks, int R, int C);
  /* rstd[c] = 1 / sqrt(var[c] * scale + eps): train mode passes m2 and scale = 1/count (the
   * biased variance), eval mode the running variance and scale = 1. */
  void (*bn_rstd)(float *rstd, const float *var, double scale, float eps, int C);
  /* y = (x - mean[c]) * rstd[c] * weight[c] + bias[c] (overwrites; y may be x). */
  void (*bn_forward)(float *y, const float *x, const float *mean, const float *rstd,
                     const float *weight, const float *bias, int B, int C, int HW);
  /* PyTorch's running statistics: running_mean = (1 - momentum) running_mean + momentum mean,
   * running_var likewise with the unbiased variance m2 / (count - 1) (m2 / count when
   * count == 1, as no estimate exists). */
  void (*bn_running_update)(float *running_mean, float *running_var, const float *mean,
                            const float *m2, double count, float momentum, int C);
  /* The two per-channel sums of the train-mode backward (overwrite): sum_dy[c] = sum of dy,
   * sum_dy_xhat[c] = sum of dy * (x - mean[c]) * rstd[c]; what SyncBatchNorm all-reduces. */
  void (*bn_backward_reduce)(const float *dy, const float *x, const float *mean, const float *rstd,
                             int B, int C, int HW, float *sum_dy, float *sum_dy_xhat);
  /* dx (+)= weight[c] rstd[c] (dy - sum_dy[c]/count - xhat sum_dy_xhat[c]/count) with `count`
   * the number of values per channel over all ranks and the sums reduced over all ranks; added
   * to dx when `accumulate`, written over it (dx need not be set) when not. */
  void (*bn_backward_dx)(float *dx, int accumulate, const float *dy, const float *x,
                         const float *mean, const float *rstd, const float *weight,
                         const float *sum_dy, const float *sum_dy_xhat, double count, int B, int C,
                         int HW);
  /* dweight += sum_dy_xhat, dbias += sum_dy over C channels: pass this rank's own sums (as
   * PyTorch's SyncBatchNorm does; DDP then averages the gradients). There is no eval-mode
   * backward. dweight or dbias NULL skips that gradient (a frozen parameter). */
  void (*bn_backward_params)(float *dweight, float *dbias, const float *sum_dy,
                             const float *sum_dy_xhat, int C);
  /* GroupNorm over x [B, C, HW] in G groups of C / G consecutive channels (C % G == 0):
   * out = (x - mean) * rstd * w[c] + b[c] with the mean and biased variance of each
   * (example, group) taken over its C / G * HW values in double; mean and rstd [B, G] are kept
   * for backward. w or b NULL: no scale (ones) or shift (zeros). */
  void (*group_norm_forward)(float *out, float *mean, float *rstd, const float *inp, const float *w,
                             const float *b, int B, int C, int HW, int G, float eps);
  /* Accumulates dinp, dw and db (dw or db NULL skips it), from the forward's mean and rstd;
   * w as in the forward. */
  void (*group_norm_backward)(float *dinp, float *dw, float *db, const float *dout,
                              const float *inp, const float *w, const float *mean,
                              const float *rstd, int B, int C, int HW, int G);
  /* RMSNorm per row (Llama, Qwen; Qwen3's per-head q/k norms are rows of head_dim):
   * out = (inp * rstd) * w, rstd = 1 / sqrt(mean of inp^2 + eps) kept [N] for backward; w NULL
   * means no scale. */
  void (*rmsnorm_forward)(float *out, float *rstd, const float *inp, const float *w, int N, int C,
                          float eps);
  /* Accumulates dinp and dw (dw NULL skips it: a frozen weight) from the forward's rstd; w as in
   * the forward. */
  void (*rmsnorm_backward)(float *dinp, float *dw, const float *dout, const float *inp,
                           const float *w, const float *rstd, int N, int C);

  /* ---- Embeddings: token and position rows, label rows, timestep features, image patches. A
   * position embedding added to every example is `add_bias` with N = B and cols = T * C. ---- */
  /* out[b, t, :] = wte[tokens[b, t], :] + wpe[t, :]. */
  void (*embedding_forward)(float *out, const int *tokens, const float *wte, const float *wpe,
                            int B, int T, int C);
  /* dwte[tokens[b, t], :] += dout[b, t, :], each token's rows added in order of position;
   * dwpe[t, :] += sum over b (accumulate). tokens (backend memory) must index rows of dwte
   * (the caller checks). dwte or dwpe NULL skips that gradient (a frozen table). */
  void (*embedding_backward)(float *dwte, float *dwpe, const float *dout, const int *tokens, int B,
                             int T, int C);
  /* out[b, :] = table[rows[b], :] for b < B, rows of width C; rows (backend memory) must index
   * rows of the table (the caller checks labels). */
  void (*rows_gather)(float *out, const float *table, const int *rows, int B, int C);
  /* dtable[rows[b], :] += dout[b, :], repeated rows added in order of b (no atomics). */
  void (*rows_scatter_add)(float *dtable, const float *dout, const int *rows, int B, int C);
  /* Sinusoidal timestep features (DiT's): with half = dim / 2 and f_i = max_period^(-i / half),
   * out[b, i] = cos(t[b] f_i), out[b, half + i] = sin(t[b] f_i), and a last column of zeros
   * when dim is odd. t [B] is backend memory. Computed in double, rounded once. */
  void (*timestep_embedding)(float *out, const float *t, int B, int dim, float max_period);
  /* Image [B, C, H, W] to patch tokens [B, T, C * p * p], T = (H / p) * (W / p) in row-major
   * patch order, each token's values in the order (c, py, px) of a Conv2d(kernel p, stride p)
   * weight [hidden, C, p, p] flattened, so that patch embedding is this and a GEMM. H and W
   * must be multiples of p. Overwrites out. */
  void (*patchify)(float *out, const float *img, int B, int C, int H, int W, int p);
  /* The adjoint (and inverse) of patchify: dimg from dtokens (overwrites). */
  void (*patchify_backward)(float *dimg, const float *dtokens, int B, int C, int H, int W, int p);
  /* Patch tokens [B, T, p * p * C] in the order (py, px, c) (DiT's final layer) to an image
   * [B, C, H, W]; overwrites img. */
  void (*unpatchify)(float *img, const float *tokens, int B, int C, int H, int W, int p);
  /* The adjoint (and inverse) of unpatchify: dtokens from dimg (overwrites). */
  void (*unpatchify_backward)(float *dtokens, const float *dimg, int B, int C, int H, int W, int p);
  /* Rotary position embedding in the rotate-half layout (GPT-NeoX, Llama, Qwen): rows of
   * x [B, T, H, hd] (H heads of an even hd, contiguous) at position p = pos0 + t are rotated
   * pairwise, for i < hd / 2 with c = cos[p, i], s = sin[p, i]:
   *   out[i] = x[i] c - x[i + hd/2] s,   out[i + hd/2] = x[i + hd/2] c + x[i] s.
   * cos and sin [positions, hd / 2] (backend memory) are the caller's tables, which is where
   * rope_theta and a scaling of the frequencies come in. out may be inp. */
  void (*rope_forward)(float *out, const float *inp, const float *cos, const float *sin, int B,
                       int T, int H, int hd, int pos0);
  /* Its backward, the inverse rotation: dinp from dout (overwrites; dinp may be dout). */
  void (*rope_backward)(float *dinp, const float *dout, const float *cos, const float *sin, int B,
                        int T, int H, int hd, int pos0);

  /* ---- Attention. ---- */
  /* Multi-head attention. qkv [B, T, 3C] holds q, k, v (heads of C/NH inside each);
   * out [B, T, C]; lse [B, NH, T] keeps each softmax row's log-sum-exp for backward.
   * causal != 0: position i attends to positions 0..i (GPT); causal == 0: to all T (DiT). */
  void (*attention_forward)(float *out, float *lse, const float *qkv, int B, int T, int C, int NH,
                            int causal);
  /* Writes dqkv [B, T, 3C] (overwrites) from dout, the forward's qkv, out and lse; causal as
   * in the forward. */
  void (*attention_backward)(float *dqkv, const float *dout, const float *qkv, const float *out,
                             const float *lse, int B, int T, int C, int NH, int causal);
  /* Grouped-query attention (Llama, Mistral, Qwen): q [B, T, NH * hd], k and v
   * [B, T, NKV * hd], each contiguous, NKV dividing NH: query head h reads key/value head
   * h / (NH / NKV) (NKV == NH is multi-head attention, NKV == 1 multi-query). The head size hd
   * is given (it need not be the width / NH), the scale is 1 / sqrt(hd); out [B, T, NH * hd],
   * lse [B, NH, T]; causal as above. attention_forward is this op with NKV = NH and q, k, v
   * interleaved in one tensor, and computes the same values. */
  void (*attention_gqa_forward)(float *out, float *lse, const float *q, const float *k,
                                const float *v, int B, int T, int NH, int NKV, int hd, int causal);
  /* Writes dq, dk and dv (overwrites; each laid out as its input), from dout and the forward's
   * inputs, out and lse. A key/value head's gradients sum over the query heads of its group in
   * head order. */
  void (*attention_gqa_backward)(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                 const float *k, const float *v, const float *out, const float *lse,
                                 int B, int T, int NH, int NKV, int hd, int causal);
  /* Cross-attention (PixArt-α's attn2, Wan's): queries q [B, Tq, NH * hd] (the image tokens)
   * over keys and values k, v [B, Tk, NH * hd] (the text tokens), scale 1 / sqrt(hd); out
   * [B, Tq, NH * hd], lse [B, NH, Tq]. Key padding: example b sees only its first klen[b] keys
   * (klen, int [B] in backend memory, values clamped to [0, Tk]; NULL: all Tk), the others get
   * no weight, as an attention mask of -inf would give. An example with klen 0 gets output 0
   * and lse -inf (a softmax over no key would be 0/0, NaN in PyTorch with a boolean mask;
   * diffusers' additive -10000 mask would average all the padding instead): its image tokens
   * then take nothing from the text. */
  void (*cross_attention_forward)(float *out, float *lse, const float *q, const float *k,
                                  const float *v, const int *klen, int B, int Tq, int Tk, int NH,
                                  int hd);
  /* Writes dq, dk and dv (overwrites; the keys past klen[b] and every key of an example with
   * klen 0 get zero gradients, as does dq of such an example) from dout and the forward's
   * inputs, out and lse. */
  void (*cross_attention_backward)(float *dq, float *dk, float *dv, const float *dout,
                                   const float *q, const float *k, const float *v, const float *out,
                                   const float *lse, const int *klen, int B, int Tq, int Tk, int NH,
                                   int hd);
  /* Grouped-query attention of one sequence over a key/value cache (generation): Tq new
   * queries q [Tq, NH * hd] at positions Tk - Tq .. Tk - 1 over the Tk cached keys and values
   * k, v [Tk, NKV * hd] (positions 0 .. Tk - 1, the new ones included; 1 <= Tq <= Tk), causal:
   * query i sees keys 0 .. Tk - Tq + i. out [Tq, NH * hd]; heads and scale as
   * attention_gqa_forward, whose rows it equals (the same sums in the same order on the CPU).
   * Nothing is kept for a backward. */
  void (*attention_gqa_cached)(float *out, const float *q, const float *k, const float *v, int Tq,
                               int Tk, int NH, int NKV, int hd);

  /* ---- Convolution and pooling, NCHW layouts as PyTorch's: H_out = (H + 2 pad - K) / stride + 1,
   * W_out likewise; a shape whose output would be empty does nothing. A classifier head is
   * `gemm` + `add_bias` and `crossentropy_*` with V = the classes, N = the batch (checked
   * against PyTorch in tests/test-layers-conv.c). ---- */
  /* out [B, C_out, H_out, W_out] = conv of inp [B, C_in, H, W] with weight
   * [C_out, C_in, K, K] (no bias), zero padding `pad`, step `stride` (overwrites). The GEMM mode
   * applies: in bf16 and fp16 mode the operands are rounded first. */
  void (*conv2d_forward)(float *out, const float *inp, const float *weight, int B, int C_in, int H,
                         int W, int C_out, int K, int stride, int pad);
  /* dinp += d/dinp and dweight += d/dweight of conv2d_forward for gradient dout (both
   * accumulate); dinp may be NULL when no input gradient is needed (the first layer), dweight
   * when the kernel is frozen. */
  void (*conv2d_backward)(float *dinp, float *dweight, const float *dout, const float *inp,
                          const float *weight, int B, int C_in, int H, int W, int C_out, int K,
                          int stride, int pad);
  /* out [B, C] = the mean of each row of inp [B, C, HW]. */
  void (*avgpool_global_forward)(float *out, const float *inp, int B, int C, int HW);
  /* dinp [B, C, HW] += dout[b, c] / HW (accumulates). */
  void (*avgpool_global_backward)(float *dinp, const float *dout, int B, int C, int HW);
  /* A convolution's bias: out [B, C, HW] += bias[c] over each channel. */
  void (*channel_bias_forward)(float *out, const float *bias, int B, int C, int HW);
  /* dbias[c] += the sum of dout [B, C, HW] over examples and positions (accumulates). */
  void (*channel_bias_backward)(float *dbias, const float *dout, int B, int C, int HW);

  /* ---- Resampling and padding of NCHW images. ---- */
  /* Nearest up-sampling by an integer factor f: out [B, C, H f, W f], out[y, x] =
   * inp[y / f, x / f] (F.interpolate(mode="nearest"), diffusers' Upsample2D). */
  void (*upsample_nearest_forward)(float *out, const float *inp, int B, int C, int H, int W, int f);
  /* dinp [B, C, H, W] += the sum of each f x f block of dout (accumulates). */
  void (*upsample_nearest_backward)(float *dinp, const float *dout, int B, int C, int H, int W,
                                    int f);
  /* Zero padding: out [B, C, H + top + bottom, W + left + right] with inp at (top, left)
   * (F.pad(x, (left, right, top, bottom)); diffusers pads (0, 1, 0, 1) before a stride-2
   * convolution). Overwrites out. */
  void (*pad2d_forward)(float *out, const float *inp, int B, int C, int H, int W, int top,
                        int bottom, int left, int right);
  /* dinp [B, C, H, W] += the interior of dout (accumulates). */
  void (*pad2d_backward)(float *dinp, const float *dout, int B, int C, int H, int W, int top,
                         int bottom, int left, int right);

  /* ---- Channels last (NHWC): activations [B, H, W, C], the layout that oneDNN's and cuDNN's
   * direct convolutions read in place, kept between the layers of a convolutional network (the
   * ResNet). Weights stay PyTorch's [C_out, C_in, K, K]; sizes and padding as above. A
   * per-channel op over NHWC values is the NCHW op with B = batch·H·W and HW = 1 (BatchNorm's
   * ops have a fast path for that case). ---- */
  /* out [B, H_out, W_out, C_out] = conv of inp [B, H, W, C_in] (overwrites); the GEMM mode
   * applies as in conv2d_forward. */
  void (*conv2d_nhwc_forward)(float *out, const float *inp, const float *weight, int B, int C_in,
                              int H, int W, int C_out, int K, int stride, int pad);
  /* dweight += d/dweight; dinp = d/dinp, or dinp += d/dinp when `accumulate` (dinp NULL: no
   * input gradient). */
  void (*conv2d_nhwc_backward)(float *dinp, int accumulate, float *dweight, const float *dout,
                               const float *inp, const float *weight, int B, int C_in, int H, int W,
                               int C_out, int K, int stride, int pad);
  /* out [B, H_out, W_out, C] = the maximum over each K×K window (stride, padding with -inf,
   * 2·pad <= K) of inp [B, H, W, C], as torch.nn.MaxPool2d: NaN propagates. */
  void (*maxpool2d_nhwc_forward)(float *out, const float *inp, int B, int C, int H, int W, int K,
                                 int stride, int pad);
  /* dinp += dout routed to each window's maximum (the first one; the last NaN), found again in
   * inp (accumulates). */
  void (*maxpool2d_nhwc_backward)(float *dinp, const float *dout, const float *inp, int B, int C,
                                  int H, int W, int K, int stride, int pad);
  /* out [B, C] = the mean over the HW pixels of inp [B, HW, C]. */
  void (*avgpool_global_nhwc_forward)(float *out, const float *inp, int B, int C, int HW);
  /* dinp [B, HW, C] += dout[b, c] / HW (accumulates). */
  void (*avgpool_global_nhwc_backward)(float *dinp, const float *dout, int B, int C, int HW);

  /* ---- Losses and metrics. ---- */
  /* Per row of logits [N, V]: lse[n] = log sum exp, losses[n] = lse[n] - logits[n, target];
   * a negative target counts in no loss: losses[n] = 0 and its dlogits row 0 (PyTorch's
   * ignore_index; chat data's tokens that are not the assistant's). */
  void (*crossentropy_forward)(float *losses, float *lse, const float *logits, const int *targets,
                               int N, int V);
  /* dlogits = (softmax(logits) - onehot(target)) * dloss (overwrites). */
  void (*crossentropy_backward)(float *dlogits, const float *logits, const float *lse,
                                const int *targets, int N, int V, float dloss);
  /* Knowledge distillation, per row of student logits s [N, V] and teacher logits t [N, V] at
   * temperature tau > 0: with p = softmax(t / tau) and q = softmax(s / tau),
   * losses[n] = KL(p || q) = sum_v p_v (log p_v - log q_v); lse [N, 2] keeps the log-sum-exp of
   * s / tau and of t / tau for backward. Row sums in double (CPU) or a fixed-order tree
   * (CUDA). The family scales by tau^2 and mixes with cross-entropy (GPT, classifiers). */
  void (*kl_div_forward)(float *losses, float *lse, const float *student, const float *teacher,
                         int N, int V, float tau);
  /* dstudent += (q - p) / tau * scale (accumulates, so it adds onto crossentropy_backward's
   * dlogits); scale carries dloss/dlosses[n], e.g. alpha tau^2 / N for a mean over rows. */
  void (*kl_div_backward)(float *dstudent, const float *student, const float *teacher,
                          const float *lse, int N, int V, float tau, float scale);
  /* losses[b] = mean over d < D of (pred[b, d] - target[b, d])^2; the batch mean is the
   * model's. */
  void (*mse_forward)(float *losses, const float *pred, const float *target, int B, int D);
  /* dpred = 2 * (pred - target) / D * scale (overwrites); scale carries dloss/dlosses[b] (1/B
   * for a batch mean) times any loss scale. */
  void (*mse_backward)(float *dpred, const float *pred, const float *target, int B, int D,
                       float scale);
  /* Number of rows of logits [N, V] whose first maximum (torch.argmax) is at labels[n]
   * (labels in backend memory); the count is returned to the host. -1 on a backend failure. */
  int (*accuracy_count)(const float *logits, const int *labels, int N, int V);

  /* ---- Optimizers and what clipping and EMA need. ---- */
  /* PyTorch AdamW over n values: p -= lr*wd*p (when wd != 0), then the Adam update with
   * bias corrections bc1 = 1 - beta1^t, bc2 = 1 - beta2^t. */
  void (*adamw_update)(float *params, const float *grads, float *m, float *v, size_t n, float lr,
                       float beta1, float beta2, float eps, float wd, float bc1, float bc2);
  /* torch.optim.SGD over n values: g = grad + weight_decay * p; with momentum != 0,
   * buf = g on the first step, else momentum buf + (1 - dampening) g, and g = g + momentum buf
   * (nesterov) or buf; then p -= lr g. momentum_buf may be NULL when momentum == 0. */
  void (*sgd_update)(float *params, const float *grads, float *momentum_buf, size_t n, float lr,
                     float momentum, float dampening, float weight_decay, int nesterov,
                     int first_step);
  /* ema = decay * ema + (1 - decay) * params */
  void (*ema_update)(float *ema, const float *params, size_t n, float decay);
  /* Sum of squares of n values in double, in an order fixed by n alone. */
  double (*sum_squares)(const float *values, size_t n);
} CohortBackend;

/* The CPU backend: C with OpenMP, GEMMs through OpenBLAS or oneDNN. Always available. */
const CohortBackend *cohort_backend_cpu(void);

#ifdef __cplusplus
}
#endif

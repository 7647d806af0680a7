/* What computes the CPU backend's convolutions, and the paths themselves.
 *
 * Two paths compute conv2d_forward / conv2d_backward (NCHW) and their channels-last (NHWC)
 * versions. oneDNN's convolution primitives (kernels/cpu/convolution-onednn.c) run where the
 * build has oneDNN: direct or Winograd kernels as oneDNN chooses for the shape, NHWC read in
 * place (3×3 stride-1 ones reordered, for Winograd), NCHW reordered to oneDNN's blocked
 * layouts and back (as PyTorch does). im2col + the
 * backend's gemm (kernels/cpu/convolution-im2col.c) is the plain reference the tests compare
 * against and the fallback where oneDNN is absent or declines a shape; NHWC reaches it through
 * transposes.
 *
 * GEMM modes: in bf16 and fp16 mode the operands of each product are rounded first (as the
 * gemm op does) and the fp32 convolution multiplies them, so a convolution in bf16 mode equals
 * the fp32 convolution of the rounded operands on the same path. */
#pragma once

#include <stddef.h>

typedef enum CohortCpuConvPath {
  COHORT_CPU_CONV_IM2COL, /* im2col + gemm, NCHW (NHWC through transposes) */
  COHORT_CPU_CONV_ONEDNN, /* oneDNN convolution primitives */
} CohortCpuConvPath;

/* 1 when `path` can run in this build. */
int cohort_cpu_conv_path_available(CohortCpuConvPath path);
/* Chooses the path of every later convolution; 0 and no change when it is not available. The
 * start-up choice is oneDNN where available. Not thread-safe: call between steps. */
int cohort_cpu_conv_select(CohortCpuConvPath path);
CohortCpuConvPath cohort_cpu_conv_path(void);

/* A convolution's sizes: input [B, C, H, W] (or [B, H, W, C]), weight [O, C, K, K], output
 * Ho x Wo, step S, zero padding P on every side. */
typedef struct CohortConvDims {
  int B, C, H, W, O, K, S, P, Ho, Wo;
} CohortConvDims;

/* Fills d; 0 when the shape has no output (the ops then do nothing). */
int cohort_conv_dims(CohortConvDims *d, int B, int C, int H, int W, int O, int K, int S, int P);

/* The im2col reference (convolution-im2col.c), NCHW, with the table's semantics: the forward
 * overwrites `out`; the backward accumulates into dinp (may be NULL) and dweight. */
void cohort_cpu_conv2d_im2col_forward(float *out, const float *inp, const float *weight,
                                      const CohortConvDims *d);
void cohort_cpu_conv2d_im2col_backward(float *dinp, float *dweight, const float *dout,
                                       const float *inp, const float *weight,
                                       const CohortConvDims *d);

/* oneDNN (convolution-onednn.c, builds with oneDNN): `nhwc` picks the activations' layout.
 * Each returns 0 when oneDNN cannot make or run the primitive (the caller falls back).
 * forward overwrites out; backward_data writes dinp (adds to it when `accumulate`);
 * backward_weights adds to dweight. */
int cohort_onednn_conv2d_forward(int nhwc, float *out, const float *inp, const float *weight,
                                 const CohortConvDims *d);
int cohort_onednn_conv2d_backward_data(int nhwc, float *dinp, int accumulate, const float *dout,
                                       const float *weight, const CohortConvDims *d);
int cohort_onednn_conv2d_backward_weights(int nhwc, float *dweight, const float *dout,
                                          const float *inp, const CohortConvDims *d);
/* oneDNN's name for the implementation of a pass (0 forward, 1 backward data, 2 backward
 * weights) of that shape, e.g. "brgconv:avx512_core"; NULL when there is none. */
const char *cohort_onednn_conv2d_impl(int pass, int nhwc, const CohortConvDims *d);

/* The convolutions' per-thread scratch buffers, one meaning each: a function that falls back
 * from one path to another never finds a buffer it still needs overwritten. */
typedef enum CohortConvScratch {
  COHORT_CONV_SCRATCH_COL,        /* im2col: one image's column matrix [C·K·K, Ho·Wo] */
  COHORT_CONV_SCRATCH_DWEIGHT,    /* im2col backward: the weight gradient [C·K·K, O], transposed
                                     into dweight at the end */
  COHORT_CONV_SCRATCH_ROUNDED_X,  /* bf16/fp16 mode, for oneDNN: the input rounded to the mode */
  COHORT_CONV_SCRATCH_ROUNDED_W,  /* … the weight rounded */
  COHORT_CONV_SCRATCH_ROUNDED_DY, /* … the output gradient rounded */
  COHORT_CONV_SCRATCH_NCHW_X,     /* NHWC through im2col: the input transposed to NCHW */
  COHORT_CONV_SCRATCH_NCHW_Y,     /* … the forward's NCHW output, before it goes back to NHWC */
  COHORT_CONV_SCRATCH_NCHW_DY,    /* … the output gradient in NCHW */
  COHORT_CONV_SCRATCH_NCHW_DX,    /* … the input gradient in NCHW */
  /* oneDNN: the primitive's own copy of each operand whose layout differs from the caller's
   * (the pass's two inputs, then its output, in that order), and its scratchpad */
  COHORT_CONV_SCRATCH_ONEDNN_ARG0,
  COHORT_CONV_SCRATCH_ONEDNN_ARG1,
  COHORT_CONV_SCRATCH_ONEDNN_ARG2,
  COHORT_CONV_SCRATCH_ONEDNN_PAD,
  COHORT_CONV_SCRATCH_COUNT
} CohortConvScratch;

/* Per-thread scratch memory of the convolutions: buffer `which` of at least `bytes`, 64-byte
 * aligned, kept and reused; freed when the thread ends. Aborts when memory runs out (the
 * table's ops cannot fail, and running out mid-step is not recoverable). */
void *cohort_cpu_conv_scratch(CohortConvScratch which, size_t bytes);

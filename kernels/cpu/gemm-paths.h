/* The libraries behind the CPU backend's gemm, and which one computes each GEMM mode.
 *
 * fp32 (and tf32, which the CPU computes in fp32) products run on one fp32 library: OpenBLAS
 * or oneDNN, chosen by the build option `cpu_blas` (docs/benchmarks.md, "CPU matrix
 * products", has the measurements behind the default). bf16 products run on bf16 hardware
 * (oneDNN's matmul with bf16 operands and fp32 accumulation, vdpbf16ps) where the CPU has the
 * instructions and the build has oneDNN; elsewhere, and for fp16 always, the operands are
 * rounded and the fp32 library multiplies them (the emulation of a GPU's tensor cores).
 *
 * The bf16 hardware path rounds each operand with cohort_f32_to_bf16 (the tested rule, bit
 * for bit). Its sums are not those of sgemm on the rounded operands: vdpbf16ps adds each pair
 * of products to the fp32 accumulator by two fused multiply-adds (odd element first), rounded
 * to nearest even, with subnormal inputs read as zero and subnormal results flushed to zero,
 * and oneDNN orders the K terms its own way. Element-wise, against the exact sum S of the
 * rounded operands' products, |C - (alpha S + beta C0)| <= gamma(K + 2) (|alpha| sum |a b| +
 * |beta C0|) + |alpha| (K + 1) 2^-126, gamma(n) = n u / (1 - n u), u = 2^-24: the standard
 * bound for any order of fp32 sums, plus what flushing subnormals can lose (operands are never
 * subnormal after bf16 rounding of values of a GEMM's usual magnitudes; see the tests). */
#pragma once

#include <stdint.h>

#include "kernels/backend.h"

typedef enum CohortCpuGemmPath {
  COHORT_CPU_GEMM_OPENBLAS,    /* cblas_sgemm, fp32 */
  COHORT_CPU_GEMM_ONEDNN,      /* oneDNN dnnl_sgemm, fp32 */
  COHORT_CPU_GEMM_ONEDNN_BF16, /* oneDNN matmul, bf16 operands, fp32 accumulation */
} CohortCpuGemmPath;

/* 1 when `path` can run in this build on this CPU (ONEDNN_BF16: the CPU has avx512_bf16 and
 * oneDNN may use it). */
int cohort_cpu_gemm_path_available(CohortCpuGemmPath path);

/* Chooses the fp32 library (OPENBLAS or ONEDNN) and whether bf16 products use the hardware
 * path. Returns 0 and changes nothing when the choice is not available. The start-up choice
 * is the build's (`cpu_blas`; with auto, oneDNN on AVX-512 cores and OpenBLAS on the others, as
 * measured; bf16 hardware where available); the benchmarks and tests switch between paths with
 * this. Not thread-safe: call between GEMMs. */
int cohort_cpu_gemm_select(CohortCpuGemmPath fp32, int bf16_hardware);

/* The fp32 library by name, "openblas" or "onednn" (the key cpu_matmul), leaving the bf16 path
 * as chosen. 0 when that library cannot run here (oneDNN missing from the build or failing to
 * start). Not thread-safe: call before the first GEMM. */
int cohort_cpu_gemm_force(const char *library);

/* The current choice. */
CohortCpuGemmPath cohort_cpu_gemm_fp32_path(void);
int cohort_cpu_gemm_bf16_hardware(void);

/* One line for the log: what computes products in `mode` now, e.g. "oneDNN 2.6.3 matmul
 * (AVX-512 BF16): bf16 operands, fp32 accumulation in hardware". A static string. */
const char *cohort_cpu_gemm_describe(CohortGemmMode mode);

/* C = alpha op(A) op(B) + beta C on one path, whatever the current choice and mode (BLAS
 * semantics: with beta = 0, C is not read; with alpha = 0 or K = 0, A and B are not read).
 * ONEDNN_BF16 rounds A and B to bf16 first. For the benchmarks and tests. */
void cohort_cpu_gemm_run(CohortCpuGemmPath path, int trans_a, int trans_b, int M, int N, int K,
                         float alpha, const float *A, int lda, const float *B, int ldb, float beta,
                         float *C, int ldc);

/* The bf16 bits of a rows x cols matrix with row stride ld, packed (row stride cols) into a
 * per-thread buffer (`which` 0 or 1: one per operand). NULL when out of memory. */
const uint16_t *cohort_cpu_pack_bf16(int which, const float *src, int rows, int cols, int ld);

/* oneDNN (kernels/cpu/gemm-onednn.c), in builds with it. The gemm functions return 0 when
 * oneDNN could not make or run the primitive; `impl`, when not NULL, receives oneDNN's name for
 * the implementation it ran. */
int cohort_onednn_ready(void);
int cohort_onednn_has_bf16_hardware(void);
const char *cohort_onednn_isa_name(void);
const char *cohort_onednn_version(void);
int cohort_onednn_gemm_f32(int trans_a, int trans_b, int M, int N, int K, float alpha,
                           const float *A, int lda, const float *B, int ldb, float beta, float *C,
                           int ldc, const char **impl);
int cohort_onednn_gemm_bf16(int trans_a, int trans_b, int M, int N, int K, float alpha,
                            const uint16_t *A, int lda, const uint16_t *B, int ldb, float beta,
                            float *C, int ldc, const char **impl);
/* dnnl_sgemm, oneDNN's BLAS-style entry point: the ONEDNN path. (cohort_onednn_gemm_f32, its
 * matmul primitive in fp32, is timed beside it in bench/bench-gemm.) */
int cohort_onednn_sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                        int lda, const float *B, int ldb, float beta, float *C, int ldc);

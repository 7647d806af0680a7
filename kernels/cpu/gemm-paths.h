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
  COHORT_CPU_GEMM_MEASURE,     /* fp32: per shape, OPENBLAS or ONEDNN, whichever was measured
                                * faster on this CPU (kernels/cpu/gemm-measure.c) */
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

/* The fp32 library by name, "openblas", "onednn" or "measure" (the key cpu_matmul), leaving the
 * bf16 path as chosen. 0 when that library cannot run here (oneDNN missing from the build or
 * failing to start; "measure" chooses between the two, so it needs both). Not thread-safe:
 * call before the first GEMM. */
int cohort_cpu_gemm_force(const char *library);

/* What auto runs fp32 products on: OPENBLAS or ONEDNN (the build's cpu_blas, and with auto
 * the CPU's kind). "measure" keeps it where two libraries measure within 3 % of each other. */
CohortCpuGemmPath cohort_cpu_gemm_default_fp32_path(void);

/* The MEASURE path (kernels/cpu/gemm-measure.c, builds with oneDNN): C = alpha op(A) op(B) +
 * beta C on the library this product shape runs faster on here, at the current OpenMP thread
 * count. The choice comes from this process's table, else from the measurement file; a shape
 * neither knows is computed by OpenBLAS and oneDNN in turn, three times each, timed, and the
 * faster is appended to the file (under its lock: the processes of one machine agree, the
 * first to finish deciding). Thread-safe. */
void cohort_cpu_gemm_measured(int ta, int tb, int M, int N, int K, float alpha, const float *A,
                              int lda, const float *B, int ldb, float beta, float *C, int ldc);

/* The measurement file: $COHORT_CPU_GEMM_CACHE when set ("" = none, memory only), else
 * cohort/cpu-gemm-IDENTITY.tsv under $XDG_CACHE_HOME or ~/.cache, IDENTITY naming the CPU
 * (vendor, family, model, stepping) and both libraries. "" when there is none. */
const char *cohort_cpu_gemm_measure_file(void);

/* For the log: the shapes this process has asked for, how many of them run on oneDNN, how many
 * are still being timed, and how many it decided itself (the others came from the file). */
void cohort_cpu_gemm_measure_counts(int *shapes_used, int *on_onednn, int *still_timing,
                                    int *measured_now);

/* Empties the table and reads the environment again at the next product (tests). */
void cohort_cpu_gemm_measure_forget(void);

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

/* The CPU backend table, its memory and its threads. */
#include "kernels/backend.h"
#include "cpu.h"
#include "kernels/cpu/gemm-paths.h"

#include <cblas.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

void cohort_cpu_set_threads(int n)
{
  if (n <= 0)
    return;
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int cohort_cpu_get_threads(void)
{
  return omp_get_max_threads();
}

static void *cpu_alloc(size_t bytes)
{
  size_t rounded = (bytes + 63) / 64 * 64;
  void *p = aligned_alloc(64, rounded ? rounded : 64);
  if (p)
    memset(p, 0, rounded ? rounded : 64);
  return p;
}

static void cpu_free(void *p)
{
  free(p);
}

static void cpu_zero(void *p, size_t bytes)
{
  memset(p, 0, bytes);
}

static void cpu_copy(void *dst, const void *src, size_t bytes)
{
  if (dst != src)
    memmove(dst, src, bytes);
}

static const CohortBackend cpu_backend = {
    .name = "cpu",
    .set_threads = cohort_cpu_set_threads,
    .get_threads = cohort_cpu_get_threads,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .reserve = cohort_cpu_reserve,
    .commit = cohort_cpu_commit,
    .decommit = cohort_cpu_decommit,
    .unreserve = cohort_cpu_unreserve,
    .zero = cpu_zero,
    .copy = cpu_copy,
    .upload = cpu_copy,
    .download = cpu_copy,
    .gemm = cohort_cpu_gemm,
    .set_gemm_mode = cohort_cpu_set_gemm_mode,
    .get_gemm_mode = cohort_cpu_get_gemm_mode,
    .describe_gemm = cohort_cpu_gemm_describe,
    .add_bias = cohort_cpu_add_bias,
    .bias_backward = cohort_cpu_bias_backward,
    .to_bf16 = cohort_cpu_to_bf16,
    .from_bf16 = cohort_cpu_from_bf16,
    /* Diffusion transformers */
    .gelu_forward = cohort_cpu_gelu_forward,
    .gelu_backward = cohort_cpu_gelu_backward,
    .silu_forward = cohort_cpu_silu_forward,
    .silu_backward = cohort_cpu_silu_backward,
    .relu_forward = cohort_cpu_relu_forward,
    .relu_backward = cohort_cpu_relu_backward,
    .softmax_forward = cohort_cpu_softmax_forward,
    .softmax_backward = cohort_cpu_softmax_backward,
    .swiglu_forward = cohort_cpu_swiglu_forward,
    .swiglu_backward = cohort_cpu_swiglu_backward,
    .residual_forward = cohort_cpu_residual_forward,
    .axpby = cohort_cpu_axpby,
    /* Convolutional networks */
    .scale = cohort_cpu_scale,
    .dropout = cohort_cpu_dropout,
    .modulate_forward = cohort_cpu_modulate_forward,
    .modulate_backward = cohort_cpu_modulate_backward,
    .gated_residual_forward = cohort_cpu_gated_residual_forward,
    .gated_residual_backward = cohort_cpu_gated_residual_backward,
    .layernorm_forward = cohort_cpu_layernorm_forward,
    .layernorm_backward = cohort_cpu_layernorm_backward,
    .bn_stats = cohort_cpu_bn_stats,
    .bn_combine_stats = cohort_cpu_bn_combine_stats,
    .bn_rstd = cohort_cpu_bn_rstd,
    .bn_forward = cohort_cpu_bn_forward,
    .bn_running_update = cohort_cpu_bn_running_update,
    .bn_backward_reduce = cohort_cpu_bn_backward_reduce,
    .bn_backward_dx = cohort_cpu_bn_backward_dx,
    .bn_backward_params = cohort_cpu_bn_backward_params,
    .group_norm_forward = cohort_cpu_group_norm_forward,
    .group_norm_backward = cohort_cpu_group_norm_backward,
    .rmsnorm_forward = cohort_cpu_rmsnorm_forward,
    .rmsnorm_backward = cohort_cpu_rmsnorm_backward,
    .embedding_forward = cohort_cpu_embedding_forward,
    .embedding_backward = cohort_cpu_embedding_backward,
    .rows_gather = cohort_cpu_rows_gather,
    .rows_scatter_add = cohort_cpu_rows_scatter_add,
    .timestep_embedding = cohort_cpu_timestep_embedding,
    .patchify = cohort_cpu_patchify,
    .patchify_backward = cohort_cpu_patchify_backward,
    .unpatchify = cohort_cpu_unpatchify,
    .unpatchify_backward = cohort_cpu_unpatchify_backward,
    .rope_forward = cohort_cpu_rope_forward,
    .rope_backward = cohort_cpu_rope_backward,
    .attention_forward = cohort_cpu_attention_forward,
    .attention_backward = cohort_cpu_attention_backward,
    .attention_gqa_forward = cohort_cpu_attention_gqa_forward,
    .attention_gqa_backward = cohort_cpu_attention_gqa_backward,
    .cross_attention_forward = cohort_cpu_cross_attention_forward,
    .cross_attention_backward = cohort_cpu_cross_attention_backward,
    .attention_gqa_cached = cohort_cpu_attention_gqa_cached,
    .conv2d_forward = cohort_cpu_conv2d_forward,
    .conv2d_backward = cohort_cpu_conv2d_backward,
    .avgpool_global_forward = cohort_cpu_avgpool_global_forward,
    .avgpool_global_backward = cohort_cpu_avgpool_global_backward,
    .channel_bias_forward = cohort_cpu_channel_bias_forward,
    .channel_bias_backward = cohort_cpu_channel_bias_backward,
    .upsample_nearest_forward = cohort_cpu_upsample_nearest_forward,
    .upsample_nearest_backward = cohort_cpu_upsample_nearest_backward,
    .pad2d_forward = cohort_cpu_pad2d_forward,
    .pad2d_backward = cohort_cpu_pad2d_backward,
    .conv2d_nhwc_forward = cohort_cpu_conv2d_nhwc_forward,
    .conv2d_nhwc_backward = cohort_cpu_conv2d_nhwc_backward,
    .maxpool2d_nhwc_forward = cohort_cpu_maxpool2d_nhwc_forward,
    .maxpool2d_nhwc_backward = cohort_cpu_maxpool2d_nhwc_backward,
    .avgpool_global_nhwc_forward = cohort_cpu_avgpool_global_nhwc_forward,
    .avgpool_global_nhwc_backward = cohort_cpu_avgpool_global_nhwc_backward,
    .crossentropy_forward = cohort_cpu_crossentropy_forward,
    .crossentropy_backward = cohort_cpu_crossentropy_backward,
    .kl_div_forward = cohort_cpu_kl_div_forward,
    .kl_div_backward = cohort_cpu_kl_div_backward,
    .mse_forward = cohort_cpu_mse_forward,
    .mse_backward = cohort_cpu_mse_backward,
    .accuracy_count = cohort_cpu_accuracy_count,
    .adamw_update = cohort_cpu_adamw_update,
    .sgd_update = cohort_cpu_sgd_update,
    .ema_update = cohort_cpu_ema_update,
    .sum_squares = cohort_cpu_sum_squares,
};

const CohortBackend *cohort_backend_cpu(void)
{
  return &cpu_backend;
}

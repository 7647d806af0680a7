/* The CUDA backend's table, devices, memory, cuBLAS handles and error record. */
#include "cuda.cuh"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define MAX_DEVICES 64

static pthread_mutex_t state_lock = PTHREAD_MUTEX_INITIALIZER;
static char error_text[512];
static int have_error;
static char probe_text[256];
static int tf32_enabled;
static CohortGemmMode gemm_mode = COHORT_GEMM_FP32;
static cublasHandle_t handles[MAX_DEVICES];
static void *scratch_ptr[MAX_DEVICES];
static size_t scratch_size[MAX_DEVICES];
static size_t scratch_peak[MAX_DEVICES]; /* the largest request since the last trim */

static void record_error(const char *text)
{
  pthread_mutex_lock(&state_lock);
  if (!have_error) {
    snprintf(error_text, sizeof error_text, "%s", text);
    have_error = 1;
  }
  pthread_mutex_unlock(&state_lock);
}

void cohort_cuda_fail(const char *fmt, ...)
{
  char text[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  record_error(text);
}

bool cohort_cuda_ok(cudaError_t e, const char *what)
{
  if (e == cudaSuccess)
    return true;
  cohort_cuda_fail("cuda: %s: %s", what, cudaGetErrorString(e));
  /* The runtime also keeps a failed call's status as this thread's last error, where the next
   * launch check would report it again under that kernel's name: it is recorded now. */
  (void)cudaGetLastError();
  return false;
}

bool cohort_cuda_blas_ok(cublasStatus_t s, const char *what)
{
  if (s == CUBLAS_STATUS_SUCCESS)
    return true;
  cohort_cuda_fail("cublas: %s: %s", what, cublasGetStatusString(s));
  return false;
}

const char *cohort_cuda_last_error(void)
{
  pthread_mutex_lock(&state_lock);
  const char *r = have_error ? error_text : NULL;
  pthread_mutex_unlock(&state_lock);
  return r;
}

void cohort_cuda_clear_error(void)
{
  pthread_mutex_lock(&state_lock);
  have_error = 0;
  error_text[0] = '\0';
  pthread_mutex_unlock(&state_lock);
  (void)cudaGetLastError();
}

int cohort_cuda_device_count(void)
{
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    /* Without a driver the runtime says so here; remember why, and leave no error behind. */
    snprintf(probe_text, sizeof probe_text, "%s", cudaGetErrorString(e));
    (void)cudaGetLastError();
    return 0;
  }
  if (n == 0)
    snprintf(probe_text, sizeof probe_text, "the CUDA runtime lists no device");
  else
    probe_text[0] = '\0';
  return n;
}

const char *cohort_cuda_probe_error(void)
{
  return probe_text[0] ? probe_text : NULL;
}

int cohort_cuda_runtime_version(void)
{
  int v = 0;
  if (cudaRuntimeGetVersion(&v) != cudaSuccess) {
    (void)cudaGetLastError();
    return CUDART_VERSION; /* the headers it was built with */
  }
  return v;
}

int cohort_cuda_driver_version(void)
{
  int v = 0;
  if (cudaDriverGetVersion(&v) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return v;
}

int cohort_cuda_set_device(int index)
{
  int n = cohort_cuda_device_count();
  if (index < 0 || index >= n || index >= MAX_DEVICES) {
    cohort_cuda_fail("cuda: device %d does not exist (%d visible%s%s)", index, n, n ? "" : ": ",
                     n ? "" : probe_text);
    return -1;
  }
  return cohort_cuda_ok(cudaSetDevice(index), "cudaSetDevice") ? 0 : -1;
}

int cohort_cuda_get_device(void)
{
  int d = -1;
  if (cudaGetDevice(&d) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  return d;
}

int cohort_cuda_device_info(int index, CohortCudaDeviceInfo *info)
{
  int n = cohort_cuda_device_count();
  if (index < 0 || index >= n) {
    cohort_cuda_fail("cuda: device %d does not exist (%d visible)", index, n);
    return -1;
  }
  cudaDeviceProp prop;
  if (!cohort_cuda_ok(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties"))
    return -1;
  memset(info, 0, sizeof *info);
  snprintf(info->name, sizeof info->name, "%s", prop.name);
  info->total_bytes = prop.totalGlobalMem;
  info->cc_major = prop.major;
  info->cc_minor = prop.minor;
  info->sm_count = prop.multiProcessorCount;
  return 0;
}

int cohort_cuda_memory(size_t *free_bytes, size_t *total_bytes)
{
  return cohort_cuda_ok(cudaMemGetInfo(free_bytes, total_bytes), "cudaMemGetInfo") ? 0 : -1;
}

int cohort_cuda_device_shareable(int index)
{
  int mode = cudaComputeModeDefault;
  if (cudaDeviceGetAttribute(&mode, cudaDevAttrComputeMode, index) != cudaSuccess) {
    (void)cudaGetLastError();
    return 1;
  }
  return mode != cudaComputeModeExclusiveProcess && mode != cudaComputeModeProhibited;
}

int cohort_cuda_can_access_peer(int a, int b)
{
  int n = cohort_cuda_device_count();
  if (a < 0 || b < 0 || a >= n || b >= n || a == b)
    return 0;
  int can = 0;
  if (cudaDeviceCanAccessPeer(&can, a, b) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return can != 0;
}

static cublasMath_t math_mode(void)
{
  return tf32_enabled ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
}

void cohort_cuda_set_tf32(int enable)
{
  pthread_mutex_lock(&state_lock);
  tf32_enabled = enable != 0;
  pthread_mutex_unlock(&state_lock);
  for (int d = 0; d < MAX_DEVICES; d++)
    if (handles[d])
      cohort_cuda_blas_ok(cublasSetMathMode(handles[d], math_mode()), "cublasSetMathMode");
}

void cohort_cuda_set_gemm_mode(CohortGemmMode mode)
{
  pthread_mutex_lock(&state_lock);
  gemm_mode = mode;
  pthread_mutex_unlock(&state_lock);
  /* Only the fp32 GEMMs (cublasSgemm) follow the handle's math mode. */
  cohort_cuda_set_tf32(mode == COHORT_GEMM_TF32);
}

CohortGemmMode cohort_cuda_get_gemm_mode(void)
{
  pthread_mutex_lock(&state_lock);
  CohortGemmMode m = gemm_mode;
  pthread_mutex_unlock(&state_lock);
  return m;
}

cublasHandle_t cohort_cuda_blas(void)
{
  int d = cohort_cuda_get_device();
  if (d < 0 || d >= MAX_DEVICES) {
    cohort_cuda_fail("cuda: no usable device for cuBLAS");
    return NULL;
  }
  if (!handles[d]) {
    cublasHandle_t h;
    if (!cohort_cuda_blas_ok(cublasCreate(&h), "cublasCreate"))
      return NULL;
    cohort_cuda_blas_ok(cublasSetMathMode(h, math_mode()), "cublasSetMathMode");
    handles[d] = h;
  }
  return handles[d];
}

void *cohort_cuda_scratch(size_t bytes)
{
  int d = cohort_cuda_get_device();
  if (d < 0 || d >= MAX_DEVICES) {
    cohort_cuda_fail("cuda: no usable device for scratch memory");
    return NULL;
  }
  if (scratch_peak[d] < bytes)
    scratch_peak[d] = bytes;
  if (scratch_size[d] < bytes) {
    /* cudaFree waits for the device, so no kernel still reads the old buffer. */
    cohort_cuda_ok(cudaFree(scratch_ptr[d]), "cudaFree (scratch)");
    scratch_ptr[d] = NULL;
    scratch_size[d] = 0;
    size_t want = bytes < ((size_t)1 << 20) ? ((size_t)1 << 20) : bytes;
    if (!cohort_cuda_ok(cudaMalloc(&scratch_ptr[d], want), "cudaMalloc (scratch)"))
      return NULL;
    scratch_size[d] = want;
  }
  return scratch_ptr[d];
}

/* Frees scratch that the requests since the last trim would fit in half of: memory a one-off
 * (a sample, an evaluation, a larger batch) left behind goes back, while a step that needs
 * the same every time keeps its buffer (cudaFree waits for the whole device). */
void cohort_cuda_scratch_trim(void)
{
  int d = cohort_cuda_get_device();
  if (d < 0 || d >= MAX_DEVICES)
    return;
  size_t keep = scratch_peak[d] < ((size_t)1 << 20) ? ((size_t)1 << 20) : scratch_peak[d];
  if (scratch_size[d] > 2 * keep) {
    cohort_cuda_ok(cudaFree(scratch_ptr[d]), "cudaFree (scratch)");
    scratch_ptr[d] = NULL;
    scratch_size[d] = 0;
  }
  scratch_peak[d] = 0;
}

size_t cohort_cuda_scratch_bytes(void)
{
  int d = cohort_cuda_get_device();
  return d < 0 || d >= MAX_DEVICES ? 0 : scratch_size[d];
}

int cohort_cuda_device_pci_bus_id(int index, char *buf, int len)
{
  /* An ordinal out of range is refused here, not by the runtime: its error would be one a
   * sanitizer reports (the first H200 run's memcheck counted four). */
  if (index < 0 || index >= cohort_cuda_device_count())
    return -1;
  if (cudaDeviceGetPCIBusId(buf, len, index) == cudaSuccess)
    return 0;
  (void)cudaGetLastError(); /* a probe: its failure is the caller's, not the backend's */
  return -1;
}

void *cohort_cuda_event_new(void)
{
  cudaEvent_t e = NULL;
  if (!cohort_cuda_ok(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate"))
    return NULL;
  return (void *)e;
}

void cohort_cuda_event_free(void *event)
{
  if (event)
    cohort_cuda_ok(cudaEventDestroy((cudaEvent_t)event), "cudaEventDestroy");
}

int cohort_cuda_event_record(void *event)
{
  return cohort_cuda_ok(cudaEventRecord((cudaEvent_t)event, cudaStreamLegacy), "cudaEventRecord")
             ? 0
             : -1;
}

void *cohort_cuda_stream_new(void)
{
  cudaStream_t s = NULL;
  if (!cohort_cuda_ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate"))
    return NULL;
  return (void *)s;
}

void cohort_cuda_stream_free(void *stream)
{
  if (stream)
    cohort_cuda_ok(cudaStreamDestroy((cudaStream_t)stream), "cudaStreamDestroy");
}

int cohort_cuda_stream_copy(void *stream, void *after_event, void *dst, const void *src,
                            size_t bytes, int to_host)
{
  cudaStream_t s = (cudaStream_t)stream;
  if (after_event &&
      !cohort_cuda_ok(cudaStreamWaitEvent(s, (cudaEvent_t)after_event, 0), "cudaStreamWaitEvent"))
    return -1;
  if (bytes &&
      !cohort_cuda_ok(cudaMemcpyAsync(dst, src, bytes,
                                      to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, s),
                      to_host ? "cudaMemcpyAsync (bucket to host)"
                              : "cudaMemcpyAsync (bucket to device)"))
    return -1;
  return cohort_cuda_ok(cudaStreamSynchronize(s), "cudaStreamSynchronize") ? 0 : -1;
}

void *cohort_cuda_host_alloc(size_t bytes)
{
  void *p = NULL;
  if (!cohort_cuda_ok(cudaMallocHost(&p, bytes ? bytes : 1), "cudaMallocHost"))
    return NULL;
  return p;
}

void cohort_cuda_host_free(void *p)
{
  if (p)
    cohort_cuda_ok(cudaFreeHost(p), "cudaFreeHost");
}

int cohort_cuda_synchronize(void)
{
  cohort_cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  return cohort_cuda_last_error() ? -1 : 0;
}

/* A GPU has no host threads to set: the knob stays at one. */
static void cuda_set_threads(int n)
{
  (void)n;
}

static int cuda_get_threads(void)
{
  return 1;
}

static void *cuda_alloc(size_t bytes)
{
  /* cudaMalloc aligns to 256 bytes; a size of 0 still gets a real pointer, as on the CPU. */
  size_t rounded = bytes ? (bytes + 255) / 256 * 256 : 256;
  void *p = NULL;
  if (!cohort_cuda_ok(cudaMalloc(&p, rounded), "cudaMalloc"))
    return NULL;
  if (!cohort_cuda_ok(cudaMemset(p, 0, rounded), "cudaMemset")) {
    cudaFree(p);
    return NULL;
  }
  return p;
}

static void cuda_free(void *p)
{
  if (p)
    cohort_cuda_ok(cudaFree(p), "cudaFree");
}

static void cuda_zero(void *p, size_t bytes)
{
  if (bytes)
    cohort_cuda_ok(cudaMemsetAsync(p, 0, bytes, 0), "cudaMemsetAsync");
}

static void cuda_copy(void *dst, const void *src, size_t bytes)
{
  if (bytes && dst != src)
    cohort_cuda_ok(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0),
                   "cudaMemcpy (device to device)");
}

static void cuda_upload(void *dst, const void *host, size_t bytes)
{
  if (bytes)
    cohort_cuda_ok(cudaMemcpy(dst, host, bytes, cudaMemcpyHostToDevice),
                   "cudaMemcpy (host to device)");
}

static void cuda_download(void *host, const void *src, size_t bytes)
{
  if (bytes)
    cohort_cuda_ok(cudaMemcpy(host, src, bytes, cudaMemcpyDeviceToHost),
                   "cudaMemcpy (device to host)");
}

static const CohortBackend cuda_backend = {
    .name = "cuda",
    .set_threads = cuda_set_threads,
    .get_threads = cuda_get_threads,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .zero = cuda_zero,
    .copy = cuda_copy,
    .upload = cuda_upload,
    .download = cuda_download,
    /* CUDA's virtual memory management (reserve.cu) */
    .reserve = cohort_cuda_reserve,
    .commit = cohort_cuda_commit,
    .decommit = cohort_cuda_decommit,
    .unreserve = cohort_cuda_unreserve,
    .set_device = cohort_cuda_set_device,
    .event_new = cohort_cuda_event_new,
    .event_free = cohort_cuda_event_free,
    .event_record = cohort_cuda_event_record,
    .stream_new = cohort_cuda_stream_new,
    .stream_free = cohort_cuda_stream_free,
    .stream_copy = cohort_cuda_stream_copy,
    .host_alloc = cohort_cuda_host_alloc,
    .host_free = cohort_cuda_host_free,
    .to_bf16_on = cohort_cuda_to_bf16_on,
    .from_bf16_div_on = cohort_cuda_from_bf16_div_on,
    .last_error = cohort_cuda_last_error,
    .gemm = cohort_cuda_gemm,
    .set_gemm_mode = cohort_cuda_set_gemm_mode,
    .get_gemm_mode = cohort_cuda_get_gemm_mode,
    .describe_gemm = NULL, /* cuBLAS in every mode: docs/cuda.md */
    .add_bias = cohort_cuda_add_bias,
    .bias_backward = cohort_cuda_bias_backward,
    .to_bf16 = cohort_cuda_to_bf16,
    .from_bf16 = cohort_cuda_from_bf16,
    /* Diffusion transformers */
    .gelu_forward = cohort_cuda_gelu_forward,
    .gelu_backward = cohort_cuda_gelu_backward,
    .silu_forward = cohort_cuda_silu_forward,
    .silu_backward = cohort_cuda_silu_backward,
    .relu_forward = cohort_cuda_relu_forward,
    .relu_backward = cohort_cuda_relu_backward,
    .softmax_forward = cohort_cuda_softmax_forward,
    .softmax_backward = cohort_cuda_softmax_backward,
    .swiglu_forward = cohort_cuda_swiglu_forward,
    .swiglu_backward = cohort_cuda_swiglu_backward,
    .residual_forward = cohort_cuda_residual_forward,
    .axpby = cohort_cuda_axpby,
    /* Convolutional networks */
    .scale = cohort_cuda_scale,
    .dropout = cohort_cuda_dropout,
    .modulate_forward = cohort_cuda_modulate_forward,
    .modulate_backward = cohort_cuda_modulate_backward,
    .gated_residual_forward = cohort_cuda_gated_residual_forward,
    .gated_residual_backward = cohort_cuda_gated_residual_backward,
    .layernorm_forward = cohort_cuda_layernorm_forward,
    .layernorm_backward = cohort_cuda_layernorm_backward,
    .bn_stats = cohort_cuda_bn_stats,
    .bn_combine_stats = cohort_cuda_bn_combine_stats,
    .bn_rstd = cohort_cuda_bn_rstd,
    .bn_forward = cohort_cuda_bn_forward,
    .bn_running_update = cohort_cuda_bn_running_update,
    .bn_backward_reduce = cohort_cuda_bn_backward_reduce,
    .bn_backward_dx = cohort_cuda_bn_backward_dx,
    .bn_backward_params = cohort_cuda_bn_backward_params,
    .group_norm_forward = cohort_cuda_group_norm_forward,
    .group_norm_backward = cohort_cuda_group_norm_backward,
    .rmsnorm_forward = cohort_cuda_rmsnorm_forward,
    .rmsnorm_backward = cohort_cuda_rmsnorm_backward,
    .embedding_forward = cohort_cuda_embedding_forward,
    .embedding_backward = cohort_cuda_embedding_backward,
    .rows_gather = cohort_cuda_rows_gather,
    .rows_scatter_add = cohort_cuda_rows_scatter_add,
    .timestep_embedding = cohort_cuda_timestep_embedding,
    .patchify = cohort_cuda_patchify,
    .patchify_backward = cohort_cuda_patchify_backward,
    .unpatchify = cohort_cuda_unpatchify,
    .unpatchify_backward = cohort_cuda_unpatchify_backward,
    .rope_forward = cohort_cuda_rope_forward,
    .rope_backward = cohort_cuda_rope_backward,
    .attention_forward = cohort_cuda_attention_forward,
    .attention_backward = cohort_cuda_attention_backward,
    .attention_gqa_forward = cohort_cuda_attention_gqa_forward,
    .attention_gqa_backward = cohort_cuda_attention_gqa_backward,
    .cross_attention_forward = cohort_cuda_cross_attention_forward,
    .cross_attention_backward = cohort_cuda_cross_attention_backward,
    .attention_gqa_cached = cohort_cuda_attention_gqa_cached,
    .conv2d_forward = cohort_cuda_conv2d_forward,
    .conv2d_backward = cohort_cuda_conv2d_backward,
    .avgpool_global_forward = cohort_cuda_avgpool_global_forward,
    .avgpool_global_backward = cohort_cuda_avgpool_global_backward,
    .channel_bias_forward = cohort_cuda_channel_bias_forward,
    .channel_bias_backward = cohort_cuda_channel_bias_backward,
    .upsample_nearest_forward = cohort_cuda_upsample_nearest_forward,
    .upsample_nearest_backward = cohort_cuda_upsample_nearest_backward,
    .pad2d_forward = cohort_cuda_pad2d_forward,
    .pad2d_backward = cohort_cuda_pad2d_backward,
    .conv2d_nhwc_forward = cohort_cuda_conv2d_nhwc_forward,
    .conv2d_nhwc_backward = cohort_cuda_conv2d_nhwc_backward,
    .maxpool2d_nhwc_forward = cohort_cuda_maxpool2d_nhwc_forward,
    .maxpool2d_nhwc_backward = cohort_cuda_maxpool2d_nhwc_backward,
    .avgpool_global_nhwc_forward = cohort_cuda_avgpool_global_nhwc_forward,
    .avgpool_global_nhwc_backward = cohort_cuda_avgpool_global_nhwc_backward,
    .crossentropy_forward = cohort_cuda_crossentropy_forward,
    .crossentropy_backward = cohort_cuda_crossentropy_backward,
    .kl_div_forward = cohort_cuda_kl_div_forward,
    .kl_div_backward = cohort_cuda_kl_div_backward,
    .mse_forward = cohort_cuda_mse_forward,
    .mse_backward = cohort_cuda_mse_backward,
    .accuracy_count = cohort_cuda_accuracy_count,
    .adamw_update = cohort_cuda_adamw_update,
    .sgd_update = cohort_cuda_sgd_update,
    .ema_update = cohort_cuda_ema_update,
    .sum_squares = cohort_cuda_sum_squares,
};

const CohortBackend *cohort_backend_cuda(void)
{
  return &cuda_backend;
}

/* Convolutions on cuDNN: forward, backward data and backward filter through cuDNN's
 * convolution API (deprecated in cuDNN 9 in favour of the graph API, still shipped and
 * supported there; it needs a tenth of the code), for NCHW and channels-last (NHWC)
 * activations.
 *
 * Per device, a plan per problem (shape, layout, math mode) is kept: descriptors and the
 * algorithms cuDNN's heuristics rank first among the deterministic ones that fit the workspace
 * limit (and, but in tf32 mode, neither FFT nor Winograd), so runs with the same inputs give the
 * same bits, as every other op of the backend.
 * fp32 mode forbids TF32 (CUDNN_FMA_MATH), tf32 mode allows it; in bf16 and fp16 mode the
 * operands are rounded first and multiplied in fp32, as the CPU backend does.
 *
 * Weights are PyTorch's [O, C, K, K]. For NHWC activations cuDNN wants the filter in NHWC too
 * ([O, K, K, C]), so the weights are transposed into scratch on each call and the filter
 * gradient is computed there and added back transposed. */
#include "cuda.cuh"
#include "kernels/math-inline.h"

#include <cudnn.h>
#include <pthread.h>
#include <string.h>

#define MAX_DEVICES 64
#define THREADS     256
#define PLANS       160
/* Algorithms that want more workspace than this are passed over. */
#define WORKSPACE_LIMIT ((size_t)1 << 30)

struct PlanKey {
  int nhwc, tf32, B, C, H, W, O, K, S, P;
};

struct Plan {
  PlanKey key;
  bool used, ok;
  cudnnTensorDescriptor_t x, y;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t conv;
  cudnnConvolutionFwdAlgo_t fwd;
  cudnnConvolutionBwdDataAlgo_t bwd_data;
  cudnnConvolutionBwdFilterAlgo_t bwd_filter;
  size_t ws_fwd, ws_data, ws_filter;
};

struct DeviceState {
  cudnnHandle_t handle;
  Plan plans[PLANS];
  unsigned next_victim;
  void *buf[4]; /* 0 workspace, 1 filter (NHWC), 2 filter gradient (NHWC), 3 rounded copies */
  size_t cap[4];
};

static DeviceState *states[MAX_DEVICES];
static pthread_mutex_t states_lock = PTHREAD_MUTEX_INITIALIZER;

static bool dnn_ok(cudnnStatus_t s, const char *what)
{
  if (s == CUDNN_STATUS_SUCCESS)
    return true;
  cohort_cuda_fail("cuDNN: %s: %s", what, cudnnGetErrorString(s));
  return false;
}

static DeviceState *state(void)
{
  int d = cohort_cuda_get_device();
  if (d < 0 || d >= MAX_DEVICES)
    return NULL;
  pthread_mutex_lock(&states_lock);
  DeviceState *st = states[d];
  if (!st) {
    st = new DeviceState();
    if (cudnnCreate(&st->handle) != CUDNN_STATUS_SUCCESS) {
      delete st;
      st = NULL;
    }
    states[d] = st;
  }
  pthread_mutex_unlock(&states_lock);
  return st;
}

static void *buffer(DeviceState *st, int which, size_t bytes)
{
  if (bytes == 0)
    return NULL;
  if (st->cap[which] < bytes) {
    cohort_cuda_ok(cudaFree(st->buf[which]), "cudaFree (cuDNN scratch)");
    st->buf[which] = NULL;
    st->cap[which] = 0;
    if (!cohort_cuda_ok(cudaMalloc(&st->buf[which], bytes), "cudaMalloc (cuDNN scratch)"))
      return NULL;
    st->cap[which] = bytes;
  }
  return st->buf[which];
}

static void plan_drop(Plan *p)
{
  if (p->x)
    cudnnDestroyTensorDescriptor(p->x);
  if (p->y)
    cudnnDestroyTensorDescriptor(p->y);
  if (p->w)
    cudnnDestroyFilterDescriptor(p->w);
  if (p->conv)
    cudnnDestroyConvolutionDescriptor(p->conv);
  memset(p, 0, sizeof *p);
}

/* FFT and Winograd algorithms: they transform the operands (with constants such as 1/6 that
 * floats do not hold exactly), so their error is not that of a sum of exact products in another
 * order, which is what the op table's bounds and the CPU's results assume (and what bf16/fp16
 * mode's rounded operands rely on). Used in tf32 mode only, whose bounds are TF32's. */
static bool transforming(cudnnConvolutionFwdAlgo_t a)
{
  return a == CUDNN_CONVOLUTION_FWD_ALGO_FFT || a == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
}

static bool transforming(cudnnConvolutionBwdDataAlgo_t a)
{
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT ||
         a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD ||
         a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
}

static bool transforming(cudnnConvolutionBwdFilterAlgo_t a)
{
  return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
}

/* The first deterministic, successful algorithm within the workspace limit, from a ranked list
 * (no transforming one unless `tf32`); -1 when there is none. */
template <typename Perf> static int pick(const Perf *perf, int n, bool tf32, size_t *ws)
{
  for (int i = 0; i < n; i++)
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].determinism == CUDNN_DETERMINISTIC &&
        perf[i].memory <= WORKSPACE_LIMIT && (tf32 || !transforming(perf[i].algo))) {
      *ws = perf[i].memory;
      return i;
    }
  return -1;
}

static bool plan_build(DeviceState *st, Plan *p, const PlanKey &k)
{
  p->key = k;
  p->used = true;
  cudnnTensorFormat_t fmt = k.nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  int Ho = (k.H + 2 * k.P - k.K) / k.S + 1, Wo = (k.W + 2 * k.P - k.K) / k.S + 1;
  if (cudnnCreateTensorDescriptor(&p->x) != CUDNN_STATUS_SUCCESS ||
      cudnnCreateTensorDescriptor(&p->y) != CUDNN_STATUS_SUCCESS ||
      cudnnCreateFilterDescriptor(&p->w) != CUDNN_STATUS_SUCCESS ||
      cudnnCreateConvolutionDescriptor(&p->conv) != CUDNN_STATUS_SUCCESS ||
      cudnnSetTensor4dDescriptor(p->x, fmt, CUDNN_DATA_FLOAT, k.B, k.C, k.H, k.W) !=
          CUDNN_STATUS_SUCCESS ||
      cudnnSetTensor4dDescriptor(p->y, fmt, CUDNN_DATA_FLOAT, k.B, k.O, Ho, Wo) !=
          CUDNN_STATUS_SUCCESS ||
      cudnnSetFilter4dDescriptor(p->w, CUDNN_DATA_FLOAT, fmt, k.O, k.C, k.K, k.K) !=
          CUDNN_STATUS_SUCCESS ||
      cudnnSetConvolution2dDescriptor(p->conv, k.P, k.P, k.S, k.S, 1, 1, CUDNN_CROSS_CORRELATION,
                                      CUDNN_DATA_FLOAT) != CUDNN_STATUS_SUCCESS ||
      cudnnSetConvolutionMathType(p->conv, k.tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH) !=
          CUDNN_STATUS_SUCCESS)
    return false;
  enum { N = 16 };
  int n = 0, i;
  cudnnConvolutionFwdAlgoPerf_t fwd[N];
  if (cudnnGetConvolutionForwardAlgorithm_v7(st->handle, p->x, p->w, p->conv, p->y, N, &n, fwd) !=
          CUDNN_STATUS_SUCCESS ||
      (i = pick(fwd, n, k.tf32, &p->ws_fwd)) < 0)
    return false;
  p->fwd = fwd[i].algo;
  cudnnConvolutionBwdDataAlgoPerf_t data[N];
  if (cudnnGetConvolutionBackwardDataAlgorithm_v7(st->handle, p->w, p->y, p->conv, p->x, N, &n,
                                                  data) != CUDNN_STATUS_SUCCESS ||
      (i = pick(data, n, k.tf32, &p->ws_data)) < 0)
    return false;
  p->bwd_data = data[i].algo;
  cudnnConvolutionBwdFilterAlgoPerf_t filt[N];
  if (cudnnGetConvolutionBackwardFilterAlgorithm_v7(st->handle, p->x, p->y, p->conv, p->w, N, &n,
                                                    filt) != CUDNN_STATUS_SUCCESS ||
      (i = pick(filt, n, k.tf32, &p->ws_filter)) < 0)
    return false;
  p->bwd_filter = filt[i].algo;
  p->ok = true;
  return true;
}

static Plan *plan_for(DeviceState *st, bool nhwc, int B, int C, int H, int W, int O, int K, int S,
                      int P)
{
  PlanKey k =
      PlanKey{nhwc, cohort_cuda_get_gemm_mode() == COHORT_GEMM_TF32, B, C, H, W, O, K, S, P};
  for (int i = 0; i < PLANS; i++)
    if (st->plans[i].used && memcmp(&st->plans[i].key, &k, sizeof k) == 0)
      return st->plans[i].ok ? &st->plans[i] : NULL;
  Plan *p = &st->plans[st->next_victim++ % PLANS];
  plan_drop(p);
  if (!plan_build(st, p, k)) {
    plan_drop(p);
    p->key = k;
    p->used = true;
    return NULL;
  }
  return p;
}

/* dst [O, K, K, C] from src [O, C, K, K] (to_ohwi), or dst [O, C, K, K] += src [O, K, K, C]. */
__global__ static void filter_kernel(float *dst, const float *src, int C, int KK, size_t total,
                                     bool to_ohwi)
{
  COHORT_GRID_STRIDE(i, total)
  {
    if (to_ohwi) {
      size_t c = i % C, r = i / C % KK, o = i / ((size_t)C * KK);
      dst[i] = src[(o * C + c) * KK + r];
    } else {
      size_t r = i % KK, c = i / KK % C, o = i / ((size_t)KK * C);
      dst[i] += src[(o * KK + r) * C + c];
    }
  }
}

__global__ static void round_kernel(float *dst, const float *src, size_t n, bool fp16)
{
  COHORT_GRID_STRIDE(i, n)
  dst[i] = fp16 ? cohort_round_fp16(src[i]) : cohort_round_bf16(src[i]);
}

/* In bf16/fp16 mode: the operands rounded into one scratch buffer (offsets in floats, each
 * rounded to 64), returned in order; else the operands themselves. */
static bool round_operands(DeviceState *st, const float **ops, const size_t *n, int count)
{
  CohortGemmMode mode = cohort_cuda_get_gemm_mode();
  if (mode != COHORT_GEMM_BF16 && mode != COHORT_GEMM_FP16)
    return true;
  size_t total = 0;
  for (int i = 0; i < count; i++)
    total += (n[i] + 63) / 64 * 64;
  float *dst = (float *)buffer(st, 3, total * sizeof(float));
  if (!dst)
    return false;
  for (int i = 0; i < count; i++) {
    round_kernel<<<cohort_cuda_blocks(n[i], THREADS), THREADS>>>(dst, ops[i], n[i],
                                                                 mode == COHORT_GEMM_FP16);
    if (!cohort_cuda_launched("conv2d (rounding)"))
      return false;
    ops[i] = dst;
    dst += (n[i] + 63) / 64 * 64;
  }
  return true;
}

/* The weights in the filter layout of plan p: themselves (NCHW), else transposed (NHWC). */
static const float *filter_in(DeviceState *st, const Plan *p, const float *weight)
{
  if (!p->key.nhwc)
    return weight;
  size_t n = (size_t)p->key.O * p->key.C * p->key.K * p->key.K;
  float *t = (float *)buffer(st, 1, n * sizeof(float));
  if (!t)
    return NULL;
  filter_kernel<<<cohort_cuda_blocks(n, THREADS), THREADS>>>(t, weight, p->key.C,
                                                             p->key.K * p->key.K, n, true);
  return cohort_cuda_launched("conv2d_nhwc (filter layout)") ? t : NULL;
}

bool cohort_cudnn_conv2d_forward(bool nhwc, float *out, const float *inp, const float *weight,
                                 int B, int C_in, int H, int W, int C_out, int K, int stride,
                                 int pad)
{
  DeviceState *st = state();
  Plan *p = st ? plan_for(st, nhwc, B, C_in, H, W, C_out, K, stride, pad) : NULL;
  if (!p)
    return false;
  const float *ops[2] = {inp, weight};
  size_t n[2] = {(size_t)B * C_in * H * W, (size_t)C_out * C_in * K * K};
  const float *w = NULL;
  void *ws = buffer(st, 0, p->ws_fwd);
  if (!round_operands(st, ops, n, 2) || !(w = filter_in(st, p, ops[1])) || (p->ws_fwd && !ws))
    return true;
  const float one = 1.0f, zero = 0.0f;
  dnn_ok(cudnnConvolutionForward(st->handle, &one, p->x, ops[0], p->w, w, p->conv, p->fwd, ws,
                                 p->ws_fwd, &zero, p->y, out),
         "cudnnConvolutionForward");
  return true;
}

bool cohort_cudnn_conv2d_backward(bool nhwc, float *dinp, bool accumulate, float *dweight,
                                  const float *dout, const float *inp, const float *weight, int B,
                                  int C_in, int H, int W, int C_out, int K, int stride, int pad)
{
  DeviceState *st = state();
  Plan *p = st ? plan_for(st, nhwc, B, C_in, H, W, C_out, K, stride, pad) : NULL;
  if (!p)
    return false;
  int Ho = (H + 2 * pad - K) / stride + 1, Wo = (W + 2 * pad - K) / stride + 1;
  size_t nw = (size_t)C_out * C_in * K * K;
  const float *ops[3] = {dout, inp, weight};
  size_t n[3] = {(size_t)B * C_out * Ho * Wo, (size_t)B * C_in * H * W, nw};
  if (!round_operands(st, ops, n, 3))
    return true;
  size_t ws_bytes = p->ws_data > p->ws_filter ? p->ws_data : p->ws_filter;
  void *ws = buffer(st, 0, ws_bytes);
  if (ws_bytes && !ws)
    return true;
  const float one = 1.0f, zero = 0.0f;
  /* The filter gradient: straight into dweight (NCHW), or via NHWC scratch added back; none
   * for frozen weights (dweight NULL, finetune). */
  float *dw = !dweight ? NULL : nhwc ? (float *)buffer(st, 2, nw * sizeof(float)) : dweight;
  if (dweight &&
      (!dw || !dnn_ok(cudnnConvolutionBackwardFilter(st->handle, &one, p->x, ops[1], p->y, ops[0],
                                                     p->conv, p->bwd_filter, ws, p->ws_filter,
                                                     nhwc ? &zero : &one, p->w, dw),
                      "cudnnConvolutionBackwardFilter")))
    return true;
  if (nhwc && dweight) {
    filter_kernel<<<cohort_cuda_blocks(nw, THREADS), THREADS>>>(dweight, dw, C_in, K * K, nw,
                                                                false);
    if (!cohort_cuda_launched("conv2d_nhwc (filter gradient layout)"))
      return true;
  }
  if (!dinp)
    return true;
  const float *w = filter_in(st, p, ops[2]);
  if (w)
    dnn_ok(cudnnConvolutionBackwardData(st->handle, &one, p->w, w, p->y, ops[0], p->conv,
                                        p->bwd_data, ws, p->ws_data, accumulate ? &one : &zero,
                                        p->x, dinp),
           "cudnnConvolutionBackwardData");
  return true;
}

/* The CUDA backend: the same CohortBackend table as the CPU backend, on one NVIDIA GPU, with
 * GEMMs through cuBLAS. Plain C, so the engine includes it without the CUDA headers.
 *
 * All ops run in order on the device's default stream; `upload` and `download` wait for the
 * work before them, so host code sees finished results. Ops return nothing: a CUDA or cuBLAS
 * failure is recorded (the first one wins) and reported by cohort_cuda_last_error(), which
 * the engine checks after each step. Nothing here aborts the process. */
#pragma once

#include "kernels/backend.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The CUDA table. Its ops work on the current device (cohort_cuda_set_device). */
const CohortBackend *cohort_backend_cuda(void);

/* Number of CUDA devices visible to this process (CUDA_VISIBLE_DEVICES applies); 0 when
 * there is no driver or no device. Never fails. */
int cohort_cuda_device_count(void);

/* Why cohort_cuda_device_count() returned 0, as the CUDA runtime words it ("no CUDA-capable
 * device is detected", "CUDA driver version is insufficient…"), or NULL when devices were
 * found. Valid after cohort_cuda_device_count() has been called. */
const char *cohort_cuda_probe_error(void);

/* The CUDA runtime's version (1000 major + 10 minor: 13000 for 13.0), which needs no driver;
 * and the newest CUDA version the installed driver supports, 0 without a driver. Neither
 * records an error. */
int cohort_cuda_runtime_version(void);
int cohort_cuda_driver_version(void);

/* Makes device `index` (0 ≤ index < device count) current for the calling thread. Returns 0,
 * or -1 with the reason in cohort_cuda_last_error(). */
int cohort_cuda_set_device(int index);

/* Index of the current device, or -1 when none can be used. */
int cohort_cuda_get_device(void);

/* What the engine reports about a device. */
typedef struct CohortCudaDeviceInfo {
  char name[256];     /* "NVIDIA H100 80GB HBM3" */
  size_t total_bytes; /* global memory */
  int cc_major;       /* compute capability, e.g. 9.0 */
  int cc_minor;
  int sm_count; /* streaming multiprocessors */
} CohortCudaDeviceInfo;

/* Fills `info` for device `index`. Returns 0, or -1 with the reason in
 * cohort_cuda_last_error(). */
int cohort_cuda_device_info(int index, CohortCudaDeviceInfo *info);

/* Free and total memory of the current device in bytes. Returns 0, or -1 with the reason in
 * cohort_cuda_last_error(). */
int cohort_cuda_memory(size_t *free_bytes, size_t *total_bytes);

/* 0 when device `index` is in the exclusive-process or prohibited compute mode
 * (`nvidia-smi -c`), where no second process can use it (tests that put two ranks on one GPU
 * skip then); 1 otherwise, also when it cannot tell. Records nothing. */
int cohort_cuda_device_shareable(int index);

/* 1 when device `a` can read and write device `b`'s memory directly (NVLink or PCIe P2P),
 * else 0 (also for bad indexes or a == b). */
int cohort_cuda_can_access_peer(int a, int b);

/* Lets cuBLAS use TF32 tensor cores for fp32 GEMMs (enable != 0) or keeps full fp32 (the
 * default). Applies to every device's handle, now and later. */
void cohort_cuda_set_tf32(int enable);

/* PCI bus id of device `index` ("0000:17:00.0"), for matching it in NVML. Returns 0, or -1;
 * a failure is not recorded as the backend's (cohort_cuda_last_error() stays as it was), as
 * the query is optional. */
int cohort_cuda_device_pci_bus_id(int index, char *buf, int len);

/* Streams, events and pinned host memory for the DDP reducer, as opaque pointers so C code
 * needs no CUDA header. The table's ops run on the legacy default stream. Each returns
 * NULL / -1 on failure with the reason in cohort_cuda_last_error(). */
void *cohort_cuda_event_new(void);
void cohort_cuda_event_free(void *event);
/* Records `event` on the legacy default stream: it completes when the work queued so far on
 * the calling thread's current device is done. */
int cohort_cuda_event_record(void *event);
/* A stream that does not synchronize with the legacy default stream. */
void *cohort_cuda_stream_new(void);
void cohort_cuda_stream_free(void *stream);
/* On `stream`: waits for `after_event` (NULL: nothing), copies `bytes` (device to host when
 * to_host, else host to device), and returns when the copy is done. */
int cohort_cuda_stream_copy(void *stream, void *after_event, void *dst, const void *src,
                            size_t bytes, int to_host);
/* Page-locked host memory (cudaMallocHost), NULL on failure; free with cohort_cuda_host_free. */
void *cohort_cuda_host_alloc(size_t bytes);
void cohort_cuda_host_free(void *p);

/* The weights' 16-bit copy. Between cohort_cuda_weights_begin and cohort_cuda_weights_end the
 * caller promises that the n floats at `params` (device memory of the current device) do not
 * change. The first bf16/fp16 GEMM in the scope rounds them all once into a 16-bit copy (kept
 * for the process, allocated at the first scope), and every GEMM operand that lies inside
 * them is read from the copy instead of being rounded again; the results are those of
 * rounding per call. Outside a scope every GEMM rounds its operands. The trainer opens a
 * scope around each step's forwards and backwards and closes it before the optimizer, so the
 * copy is refreshed once after each optimizer step. Returns 0, or -1 when no copy can be had
 * (nothing recorded: the GEMMs then round per call). */
int cohort_cuda_weights_begin(const float *params, size_t n);
void cohort_cuda_weights_end(void);
/* GEMM operands read from the copy since the process began, per piece of a product (a product
 * whose extents are not multiples of 8 runs as several; for tests). */
size_t cohort_cuda_weights_uses(void);
/* The most memory, in bytes, one bf16/fp16 GEMM holds for operands it rounds (256 MiB; 0
 * restores that): larger operands are rounded and multiplied in chunks of rows of op(A) and
 * columns of op(B). For tests. */
void cohort_cuda_set_pack_limit(size_t bytes);
/* The most memory, in bytes, self-attention's batched products hold for the [T, T] score
 * matrices of a chunk of heads (256 MiB; 0 restores that): a shape whose one head does not fit
 * runs the fused kernels instead. For tests (1 forces the fused kernels). */
void cohort_cuda_set_attention_limit(size_t bytes);
/* The shared scratch memory of the ops: its size now, and a trim (after a step) that frees it
 * when the requests since the last trim would fit in half of it. */
size_t cohort_cuda_scratch_bytes(void);
void cohort_cuda_scratch_trim(void);

/* A reserved range (the table's `reserve`, CUDA's virtual memory management): after waiting
 * for the device and releasing what waited for it, the bytes of the range holding `p` that
 * have memory now and at most so far, and its granule (2 MiB on current GPUs). Returns 0, or
 * -1 when `p` is in no reserved range. For tests and logs. */
int cohort_cuda_reserve_usage(const void *p, size_t *now, size_t *peak, size_t *granule);

/* Waits for all work on the current device. Returns 0, or -1 when this or any earlier op
 * failed (see cohort_cuda_last_error()). */
int cohort_cuda_synchronize(void);

/* The first CUDA/cuBLAS failure since the last clear, as one line naming the op and the
 * runtime's reason, or NULL when none happened. */
const char *cohort_cuda_last_error(void);

/* Forgets the recorded failure. A "sticky" CUDA error (an illegal address) still poisons the
 * process's context: after one of those, only a new process can use the device again. */
void cohort_cuda_clear_error(void);

/* The conversions of the DDP reducer's bf16 all-reduce, on `stream` (cohort_cuda_stream_new)
 * rather than the legacy default stream, so they can overlap backward.
 * cohort_cuda_to_bf16_on: waits for `after_event` (NULL: nothing), writes dst = the bfloat16
 * bits of src (n values, rounded as the table's to_bf16), then records `done_event` (NULL:
 * none) on the stream; returns without waiting.
 * cohort_cuda_from_bf16_div_on: dst = src converted to fp32 and divided by `divisor` (one
 * rounding, as the fp32 all-reduce's average), n values; returns when it is done.
 * Both return 0, or -1 with the reason in cohort_cuda_last_error(). */
int cohort_cuda_to_bf16_on(void *stream, void *after_event, uint16_t *dst, const float *src,
                           size_t n, void *done_event);
int cohort_cuda_from_bf16_div_on(void *stream, float *dst, const uint16_t *src, size_t n,
                                 float divisor);

#ifdef __cplusplus
}
#endif

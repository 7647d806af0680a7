/* One look at asynchronous CUDA work, for the NCCL backend's polling waits. Separate from
 * comm-nccl.c so that a test can drive it with a fake query (tests/test-nccl.c). */
#pragma once

#include <cuda_runtime_api.h>
#include <glib.h>

G_BEGIN_DECLS

typedef enum {
  COHORT_CUDA_QUERY_DONE,    /* the work has finished */
  COHORT_CUDA_QUERY_PENDING, /* not yet (cudaErrorNotReady): poll again */
  COHORT_CUDA_QUERY_FAILED,  /* the query reported a failure, in *failure */
} CohortCudaQuery;

/* Runs `query` on `obj` (cudaStreamQuery on a stream, cudaEventQuery on an event, wrapped to
 * take a pointer). cudaErrorNotReady is no failure, but the runtime also keeps it as the
 * calling thread's last error, where the next kernel launch's check (cudaGetLastError) would
 * read it as that launch's failure and stop the run with "device not ready". So after any
 * answer but cudaSuccess, `take_error` (cudaGetLastError, which returns and resets the
 * thread's slot) is called and its answer dropped. */
CohortCudaQuery cohort_cuda_query(cudaError_t (*query)(gpointer obj), gpointer obj,
                                  cudaError_t (*take_error)(void), cudaError_t *failure);

/* cudaStreamQuery and cudaEventQuery with the signature cohort_cuda_query takes. */
cudaError_t cohort_cuda_stream_query(gpointer stream);
cudaError_t cohort_cuda_event_query(gpointer event);

G_END_DECLS

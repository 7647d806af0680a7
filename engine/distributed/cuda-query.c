#include "engine/distributed/cuda-query.h"

CohortCudaQuery cohort_cuda_query(cudaError_t (*query)(gpointer obj), gpointer obj,
                                  cudaError_t (*take_error)(void), cudaError_t *failure)
{
  cudaError_t e = query(obj);
  if (e == cudaSuccess)
    return COHORT_CUDA_QUERY_DONE;
  (void)take_error();
  if (e == cudaErrorNotReady)
    return COHORT_CUDA_QUERY_PENDING;
  if (failure != NULL)
    *failure = e;
  return COHORT_CUDA_QUERY_FAILED;
}

cudaError_t cohort_cuda_stream_query(gpointer stream)
{
  return cudaStreamQuery((cudaStream_t)stream);
}

cudaError_t cohort_cuda_event_query(gpointer event)
{
  return cudaEventQuery((cudaEvent_t)event);
}

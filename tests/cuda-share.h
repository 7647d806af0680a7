/* Tests that put two processes on one GPU (tests only, CUDA builds): the exclusive-process
 * and prohibited compute modes (`nvidia-smi -c`) let only one process use it, so such a test
 * skips there with the reason instead of failing. */
#pragma once

#include "kernels/cuda/cuda-backend.h"

#include <glib.h>

static inline gboolean need_shared_gpu(int device)
{
  if (cohort_cuda_device_shareable(device))
    return TRUE;
  g_autofree char *msg = g_strdup_printf(
      "GPU %d is in exclusive-process compute mode: two processes cannot share it (nvidia-smi "
      "-i %d -c DEFAULT allows it)",
      device, device);
  g_test_skip(msg);
  return FALSE;
}

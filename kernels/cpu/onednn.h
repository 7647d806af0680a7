/* The oneDNN engine and stream the CPU backend's oneDNN paths share (matrix products in
 * gemm-onednn.c, convolutions in convolution-onednn.c); in builds with oneDNN only. */
#pragma once

#include <oneapi/dnnl/dnnl.h>

/* The CPU engine and its stream, made on first use; NULL when oneDNN cannot make them. */
dnnl_engine_t cohort_onednn_engine(void);
dnnl_stream_t cohort_onednn_stream(void);

/* The element types collectives move, shared by the C backends and the C++ Gloo shim (plain
 * C, no GLib). */
#pragma once

typedef enum {
  COHORT_DTYPE_F32,
  COHORT_DTYPE_F64,
  /* bfloat16 bits in uint16_t. Backends add two values in float32 and round the sum to
   * bfloat16 (nearest, ties to even: cohort_f32_to_bf16), pair by pair. */
  COHORT_DTYPE_BF16,
} CohortDtype;

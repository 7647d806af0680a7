/* The rotary embedding's frequencies and tables, as Hugging Face's modeling_rope_utils defines
 * rope_theta and the rope_scaling types `linear` and `llama3`; computed in double, so the tables
 * are the exact angles rounded once (the reference library rounds the frequencies to float
 * first). */
#include "engine/models/llama-private.h"

#include <math.h>

void cohort_rope_inv_freq(const CohortRope *rope, int head_dim, double *inv_freq)
{
  int half = head_dim / 2;
  for (int i = 0; i < half; i++) {
    double f = 1.0 / pow(rope->theta, (double)(2 * i) / head_dim);
    if (rope->type == COHORT_ROPE_LINEAR) {
      f /= rope->factor;
    } else if (rope->type == COHORT_ROPE_LLAMA3) {
      /* wavelengths shorter than original / high_freq_factor keep their frequency, longer
       * than original / low_freq_factor are divided by factor, and a ramp in between */
      double old = rope->original_max_positions, wavelen = 2.0 * G_PI / f;
      if (wavelen > old / rope->low_freq_factor) {
        f /= rope->factor;
      } else if (wavelen >= old / rope->high_freq_factor) {
        double smooth = (old / wavelen - rope->low_freq_factor) /
                        (rope->high_freq_factor - rope->low_freq_factor);
        f = (1.0 - smooth) * f / rope->factor + smooth * f;
      }
    }
    inv_freq[i] = f;
  }
}

void cohort_rope_tables(const CohortRope *rope, int head_dim, int positions, float *cos_out,
                        float *sin_out)
{
  int half = head_dim / 2;
  double *inv = g_new(double, half);
  cohort_rope_inv_freq(rope, head_dim, inv);
  for (int p = 0; p < positions; p++)
    for (int i = 0; i < half; i++) {
      double a = (double)p * inv[i];
      cos_out[(size_t)p * half + i] = (float)cos(a);
      sin_out[(size_t)p * half + i] = (float)sin(a);
    }
  g_free(inv);
}

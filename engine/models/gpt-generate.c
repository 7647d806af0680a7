/* Text samples from a GPT (engine/models/gpt-generate.h): each token recomputes the forward over
 * the context window. */
#include "engine/models/gpt-generate.h"
#include "engine/base/phase.h"

#include <string.h>

int *cohort_generate(CohortGpt *gpt, const int *prompt, int n_prompt, int n_new,
                     const CohortTokenPick *pick, int stop, guint64 *rng_state, int *n_out)
{
  const CohortGptShape *shape = cohort_gpt_shape(gpt);
  int V = shape->vocab_size;
  int total = n_prompt + n_new;
  int *seq = g_new(int, MAX(total, 1));
  if (n_prompt > 0)
    memcpy(seq, prompt, sizeof(int) * (size_t)n_prompt);
  int len = n_prompt;
  if (len == 0)
    seq[len++] = 0; /* an empty prompt starts from token 0 */
  g_autoptr(CohortTokenPicker) picker = cohort_token_picker_new(pick, V);
  float *logits = g_new(float, V); /* the last position's row, on the host */

  while (len < MAX(total, 1)) {
    int T = MIN(len, shape->seq_len);
    const int *ctx = seq + (len - T);
    cohort_gpt_forward(gpt, ctx, NULL, 1, T);
    cohort_gpt_download_logits(gpt, (size_t)(T - 1) * V, (size_t)V, logits);
    int next = cohort_token_picker_pick(picker, logits, rng_state);
    seq[len++] = next;
    cohort_phase_tick(); /* a long sample keeps the ranks waiting for rank 0 alive */
    if (next == stop)
      break;
  }
  g_free(logits);
  *n_out = len;
  return seq;
}

static int *gpt_generate(CohortModel *m, const int *prompt, int n_prompt, int n_new,
                         const CohortTokenPick *pick, int stop, guint64 *rng, int *n_out,
                         GError **error)
{
  (void)error;
  return cohort_generate(m, prompt, n_prompt, n_new, pick, stop, rng, n_out);
}

gboolean cohort_gpt_sample(CohortModel *m, const CohortSampleRequest *req, JsonObject *fields,
                           GError **error)
{
  return cohort_text_sample(m, req, gpt_generate, fields, error);
}

/* How the text families' samplers (gpt, llama) pick the next token from a row of logits, in
 * Hugging Face generate's order: the logits divided by the temperature, the top_k most likely
 * kept, then the smallest set of those whose probability reaches top_p (nucleus sampling), and
 * one token drawn from what is left in proportion to its probability; temperature 0 is greedy
 * decoding, the first largest logit (torch.argmax), and draws nothing. */
#pragma once

#include <glib.h>

#include "engine/config/config.h"

G_BEGIN_DECLS

typedef struct {
  double temperature; /* > 0; 0: greedy */
  int top_k;          /* the k most likely tokens; 0 or >= vocab: all */
  double top_p;       /* in (0, 1]; 1: no nucleus cut */
  /* only ids below this are picked: the tokenizer's size where the model's embedding has
   * padding rows past it (Qwen's 151,936 rows for 151,669 tokens); 0: every id */
  int below;
} CohortTokenPick;

/* sample_temperature, sample_top_k and sample_top_p. */
CohortTokenPick cohort_token_pick_from_config(const CohortConfig *cfg);

/* A picker for rows of `vocab` logits: its scratch, allocated once. */
typedef struct CohortTokenPicker CohortTokenPicker;
CohortTokenPicker *cohort_token_picker_new(const CohortTokenPick *how, int vocab);
void cohort_token_picker_free(CohortTokenPicker *p);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortTokenPicker, cohort_token_picker_free)

/* The next token from `logits` (host memory, `vocab` values). Draws one uniform number from
 * `rng` (cohort_rng_uniform), except when greedy. Ties between equal logits go to the lower id,
 * so the result depends only on the logits and the draw. */
int cohort_token_picker_pick(CohortTokenPicker *p, const float *logits, guint64 *rng);

G_END_DECLS

/* One micro-batch as the trainer hands it to a model: token windows for language models,
 * images and labels for image models, and for every row the dataset index it came from, so a
 * model can derive per-example randomness from (seed, epoch, example id) alone. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

typedef struct {
  int B; /* rows in use (<= the capacity it was allocated for) */

  /* token models: [B, T] ids; targets are the inputs shifted by one. A negative target
   * (COHORT_TARGET_IGNORED, data/chat-data.h) counts in no loss: chat data's tokens that are not
   * the assistant's, and padding. */
  int T;
  int *inputs;
  int *targets;
  /* What a token model's loss divides the sum over the counted targets by: > 0 as the trainer
   * sets it for a training step whose data ignores targets (the step's counted targets on all
   * ranks over the micro-batches of all ranks, so every target weighs the same and N ranks
   * equal one process); 0 for the counted targets of this batch (their mean). */
  double loss_norm;

  /* image models: [B, C, H, W] in [-1, 1], and a class index per row (-1 = unlabelled) */
  int C, H, W;
  float *images;
  int *labels;

  /* captioned images (text_encoder): each row's caption as the encoder's hidden states
   * [B, M, text_dim] (host memory from g_malloc, zeros past the row's length), and the lengths
   * text_len [B] (0 for the empty caption); M is the most tokens a caption keeps. */
  int M, text_dim;
  float *text;
  int *text_len;

  guint64 *example_ids; /* [B]: the index of each row in its data set */
  gint64 epoch;         /* the sampler's epoch; -1 for evaluation batches */

  void (*release)(void *); /* frees the arrays above; NULL = g_free */
} CohortBatch;

/* Host memory for up to `capacity` rows of T tokens (T > 0) and/or C×H×W images (C > 0);
 * the parts not asked for stay NULL. */
CohortBatch *cohort_batch_new(int capacity, int T, int C, int H, int W);
/* The same, with the token, image and label arrays in memory from `alloc` (zeroed here) that
 * `release` frees: page-locked host memory on GPU ranks, so uploads go at the bus's speed
 * (PyTorch's pin_memory). NULL when `alloc` fails. */
CohortBatch *cohort_batch_new_with(int capacity, int T, int C, int H, int W, void *(*alloc)(size_t),
                                   void (*release)(void *));
/* Adds room for captions of up to M tokens of width text_dim to `b` (M, text_dim > 0). */
void cohort_batch_add_text(CohortBatch *b, int M, int text_dim);
void cohort_batch_free(CohortBatch *b);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortBatch, cohort_batch_free)

G_END_DECLS

/* The GPT-2-style model: token + position embedding, pre-LayerNorm blocks of causal
 * multi-head self-attention and a tanh-GELU MLP, final LayerNorm, head tied to the token
 * embedding.
 *
 * Parameters and gradients each live in one contiguous float buffer with a table of named
 * tensors over it. Names and layouts are Hugging Face GPT-2's ("wte.weight",
 * "h.0.attn.c_attn.weight" of shape [C, 3C], input-major like HF's Conv1D, …) so weights go
 * in and out of .safetensors as plain copies. Tensors are laid out layer by layer in forward
 * order (wte, wpe, h.0.*, h.1.*, …, ln_f.*), so reverse layer order is decreasing offsets:
 * the DDP reducer cuts buckets from the end of the gradient buffer. */
#pragma once

#include <glib.h>
#include <stddef.h>

#include "engine/families/gpt.h" /* CohortGptShape */
#include "engine/model/model.h"
#include "engine/base/tensor.h"

G_BEGIN_DECLS

typedef struct CohortBackend CohortBackend;

/* A GPT is a CohortModel of the "gpt" family (engine/model/model.h): every cohort_model_* call
 * works on it, and the functions below are the family's own. */
typedef struct CohortModel CohortGpt;

/* The "gpt" family for the model registry. */
extern const CohortModelClass cohort_gpt_class;

/* Allocates parameters, gradients and activations for micro-batches of up to
 * `max_batch` sequences of up to shape->seq_len tokens. Parameters are zero until
 * cohort_gpt_init_weights or a load. */
CohortGpt *cohort_gpt_new(const CohortGptShape *shape, int max_batch, GError **error);
/* The same on backend `be` (kernels/backend.h): parameters, gradients and activations live in
 * that backend's memory. cohort_gpt_new is cohort_gpt_new_on(cohort_backend_cpu(), …). */
CohortGpt *cohort_gpt_new_on(const CohortBackend *be, const CohortGptShape *shape, int max_batch,
                             GError **error);
/* cohort_model_free. */
void cohort_gpt_free(CohortGpt *gpt);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortGpt, cohort_gpt_free)

/* TRUE when `m` is a model of the "gpt" family. */
gboolean cohort_is_gpt(const CohortModel *m);

const CohortGptShape *cohort_gpt_shape(const CohortGpt *gpt);

/* GPT-2 initialisation from `seed`: weights N(0, 0.02), residual projections scaled by
 * 1/sqrt(2 n_layer), biases 0, LayerNorm weights 1. Deterministic. */
void cohort_gpt_init_weights(CohortGpt *gpt, guint64 seed);

/* The model's fields, for callers written before the model interface: */
size_t cohort_gpt_num_params(const CohortGpt *gpt);
/* The parameter and gradient buffers, in BACKEND memory: host pointers only when
 * cohort_gpt_on_host() is TRUE (the CPU backend). Elsewhere move data with the copies below. */
float *cohort_gpt_params(CohortGpt *gpt);
float *cohort_gpt_grads(CohortGpt *gpt);
const CohortBackend *cohort_gpt_backend(const CohortGpt *gpt);
gboolean cohort_gpt_on_host(const CohortGpt *gpt);
void cohort_gpt_download_params(const CohortGpt *gpt, float *host);
void cohort_gpt_upload_params(CohortGpt *gpt, const float *host);
void cohort_gpt_download_grads(const CohortGpt *gpt, float *host);
void cohort_gpt_upload_grads(CohortGpt *gpt, const float *host);
const float *cohort_gpt_params_host(const CohortGpt *gpt, float **tmp);
const CohortTensorInfo *cohort_gpt_tensors(const CohortGpt *gpt, guint *n_tensors);
const CohortTensorInfo *cohort_gpt_find_tensor(const CohortGpt *gpt, const char *name);
void cohort_gpt_zero_grad(CohortGpt *gpt);
void cohort_gpt_set_grad_ready_func(CohortGpt *gpt, CohortGradReadyFunc func, gpointer user_data);

/* Forward over `inputs` [B, T] (token ids). With `targets` [B, T] returns the mean
 * cross-entropy over the positions whose target counts (a negative target counts in no loss:
 * COHORT_TARGET_IGNORED) and keeps what backward needs; with targets NULL returns 0 and only
 * computes logits. B <= max_batch, T <= seq_len. */
float cohort_gpt_forward(CohortGpt *gpt, const int *inputs, const int *targets, int B, int T);
/* The same with the sum of the counted positions' losses divided by loss_norm when it is > 0
 * (engine/model/batch.h). */
float cohort_gpt_forward_norm(CohortGpt *gpt, const int *inputs, const int *targets, int B, int T,
                              double loss_norm);

/* Logits [B, T, vocab_size] of the last forward, in backend memory (see cohort_gpt_params). */
const float *cohort_gpt_logits(const CohortGpt *gpt);
/* Copies `count` logits of the last forward from float offset `offset` to `host`. */
void cohort_gpt_download_logits(const CohortGpt *gpt, size_t offset, size_t count, float *host);

/* Backward of the last forward (which had targets): ADDS d(loss * grad_scale)/d(params) into
 * the gradient buffer, so micro-batches accumulate (grad_scale = 1/accumulation_steps). */
void cohort_gpt_backward(CohortGpt *gpt, float grad_scale);

/* Multiply-adds of one forward+backward per token, for tokens/s → FLOP/s (6N + attention). */
double cohort_gpt_flops_per_token(const CohortGpt *gpt, int T);

/* The family's check_teacher (engine/models/gpt-distill.c): the teacher needs the student's
 * vocab_size and a context (seq_len) at least the student's. */
gboolean cohort_gpt_check_teacher(const CohortConfig *student, const CohortConfig *teacher,
                                  const char *teacher_dir, GError **error);

G_END_DECLS

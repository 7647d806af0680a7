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

G_BEGIN_DECLS

typedef struct CohortBackend CohortBackend;

typedef struct {
  int n_layer;
  int n_head;
  int n_embd;
  int seq_len; /* maximum context, the size of wpe */
  int vocab_size;
} CohortGptShape;

typedef struct {
  const char *name; /* HF GPT-2 name, e.g. "h.3.mlp.c_fc.weight" */
  int ndim;
  int shape[2];
  size_t offset; /* in floats, into the parameter (and gradient) buffer */
  size_t numel;
  gboolean decay; /* AdamW weight decay applies (matrices and embeddings, not biases/LN) */
  int layer;      /* block index; -1 for embeddings, n_layer for ln_f */
} CohortTensorInfo;

typedef struct CohortGpt CohortGpt;

/* Called during backward each time a contiguous range of gradients is final for this
 * micro-batch, in decreasing offset order: ln_f, then each block from the last to the first,
 * then the embeddings. The DDP reducer starts all-reducing a bucket from here. */
typedef void (*CohortGradReadyFunc)(size_t offset, size_t count, gpointer user_data);

/* Allocates parameters, gradients and activations for micro-batches of up to
 * `max_batch` sequences of up to shape->seq_len tokens. Parameters are zero until
 * cohort_gpt_init_weights or a load. */
CohortGpt *cohort_gpt_new(const CohortGptShape *shape, int max_batch, GError **error);
/* The same on backend `be` (kernels/backend.h): parameters, gradients and activations live in
 * that backend's memory. cohort_gpt_new is cohort_gpt_new_on(cohort_backend_cpu(), …). */
CohortGpt *cohort_gpt_new_on(const CohortBackend *be, const CohortGptShape *shape, int max_batch,
                             GError **error);
void cohort_gpt_free(CohortGpt *gpt);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortGpt, cohort_gpt_free)

const CohortGptShape *cohort_gpt_shape(const CohortGpt *gpt);

/* GPT-2 initialisation from `seed`: weights N(0, 0.02), residual projections scaled by
 * 1/sqrt(2 n_layer), biases 0, LayerNorm weights 1. Deterministic. */
void cohort_gpt_init_weights(CohortGpt *gpt, guint64 seed);

size_t cohort_gpt_num_params(const CohortGpt *gpt);
/* The parameter and gradient buffers, in BACKEND memory: host pointers only when
 * cohort_gpt_on_host() is TRUE (the CPU backend). Elsewhere move data with the copies below. */
float *cohort_gpt_params(CohortGpt *gpt);
float *cohort_gpt_grads(CohortGpt *gpt);
const CohortBackend *cohort_gpt_backend(const CohortGpt *gpt);
/* TRUE when the model's buffers are host memory (the CPU backend). */
gboolean cohort_gpt_on_host(const CohortGpt *gpt);

/* Explicit copies between the model's buffers and host memory (num_params floats). On the
 * CPU backend they are plain copies; callers that run every step use the pointers above
 * when cohort_gpt_on_host() instead. */
void cohort_gpt_download_params(const CohortGpt *gpt, float *host);
void cohort_gpt_upload_params(CohortGpt *gpt, const float *host);
void cohort_gpt_download_grads(const CohortGpt *gpt, float *host);
void cohort_gpt_upload_grads(CohortGpt *gpt, const float *host);
/* The parameters on the host: the buffer itself on the CPU backend, else a downloaded copy
 * stored in *tmp (g_free it; NULL when no copy was made). */
const float *cohort_gpt_params_host(const CohortGpt *gpt, float **tmp);
const CohortTensorInfo *cohort_gpt_tensors(const CohortGpt *gpt, guint *n_tensors);
const CohortTensorInfo *cohort_gpt_find_tensor(const CohortGpt *gpt, const char *name);

/* Forward over `inputs` [B, T] (token ids). With `targets` [B, T] returns the mean
 * cross-entropy over the B*T positions and keeps what backward needs; with targets NULL
 * returns 0 and only computes logits. B <= max_batch, T <= seq_len. */
float cohort_gpt_forward(CohortGpt *gpt, const int *inputs, const int *targets, int B, int T);

/* Logits [B, T, vocab_size] of the last forward, in backend memory (see cohort_gpt_params). */
const float *cohort_gpt_logits(const CohortGpt *gpt);
/* Copies `count` logits of the last forward from float offset `offset` to `host`. */
void cohort_gpt_download_logits(const CohortGpt *gpt, size_t offset, size_t count, float *host);

void cohort_gpt_zero_grad(CohortGpt *gpt);

/* Backward of the last forward (which had targets): ADDS d(loss * grad_scale)/d(params) into
 * the gradient buffer, so micro-batches accumulate (grad_scale = 1/accumulation_steps). */
void cohort_gpt_backward(CohortGpt *gpt, float grad_scale);

/* Optional hook, see CohortGradReadyFunc. NULL to remove. */
void cohort_gpt_set_grad_ready_func(CohortGpt *gpt, CohortGradReadyFunc func, gpointer user_data);

/* Multiply-adds of one forward+backward per token, for tokens/s → FLOP/s (6N + attention). */
double cohort_gpt_flops_per_token(const CohortGpt *gpt, int T);

G_END_DECLS

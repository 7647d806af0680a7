/* Named tensors over one flat float buffer: how every model lays out its parameters (and
 * gradients, optimizer moments, EMA weights, buffers), so checkpoints, the DDP reducer and the
 * optimizer work on any model without knowing it. */
#pragma once

#include <glib.h>
#include <stddef.h>

G_BEGIN_DECLS

#define COHORT_TENSOR_MAX_DIMS 4

typedef struct {
  const char *name; /* the name in files, e.g. "h.3.mlp.c_fc.weight", "bn1.running_mean" */
  int ndim;
  int shape[COHORT_TENSOR_MAX_DIMS]; /* unused dimensions are 0 */
  size_t offset;                     /* in floats, into the buffer the table describes */
  size_t numel;
  gboolean decay; /* AdamW/SGD weight decay applies (matrices, embeddings, convolutions) */
  int layer;      /* position in forward order, for messages; the reducer only needs offsets */
  gboolean int64; /* exported as I64 (a counter such as num_batches_tracked); stored as float */
  /* Fine-tuning (engine/model/finetune.h): a frozen parameter gets no gradient and no
   * optimizer state; `adapt` says whether and how a LoRA adapter can attach to it. */
  gboolean frozen;
  int adapt; /* CohortAdaptKind */
} CohortTensorInfo;

/* How a LoRA adapter attaches to a parameter: not at all, to a linear map stored [out, in]
 * (PyTorch's nn.Linear) or stored [in, out] (Hugging Face GPT-2's Conv1D: PEFT's
 * fan_in_fan_out), both run through cohort_lora_forward, or to a convolution kernel
 * [out, in, k, k] (nn.Conv2d), adapted on the flattened kernel [out, in·k·k] and run through
 * cohort_lora_conv_kernel. */
typedef enum {
  COHORT_ADAPT_NONE,
  COHORT_ADAPT_LINEAR,
  COHORT_ADAPT_CONV1D,
  COHORT_ADAPT_CONV2D
} CohortAdaptKind;

/* Called during backward each time a contiguous range of gradients is final for this
 * micro-batch, in decreasing offset order (the reverse of forward). The DDP reducer starts
 * all-reducing a bucket from here. */
typedef void (*CohortGradReadyFunc)(size_t offset, size_t count, gpointer user_data);

/* What a model is about to do with one layer's parameters (the tensors whose `layer` is that
 * layer), announced through the layer hook (ZeRO stage 3 brings them in before and lets them
 * go after). */
typedef enum {
  COHORT_LAYER_FORWARD,  /* reads the parameters */
  COHORT_LAYER_BACKWARD, /* reads the parameters and adds into their gradients */
  COHORT_LAYER_GRADS,    /* only adds into the gradients (an embedding's backward) */
} CohortLayerUse;

/* Called with begin TRUE before a model's forward or backward touches `layer`'s parameters or
 * gradients, and with begin FALSE once it is done with them. Calls come in pairs, may nest
 * for different layers (a tied weight used again), and come in the same order on every rank. */
typedef void (*CohortLayerHookFunc)(int layer, CohortLayerUse use, gboolean begin,
                                    gpointer user_data);

/* The entry of `tensors` named `name`, or NULL. */
const CohortTensorInfo *cohort_tensor_find(const CohortTensorInfo *tensors, guint n,
                                           const char *name);

/* "[3, 16, 16]". g_free it. */
char *cohort_tensor_dims_string(int ndim, const gint64 *shape);

G_END_DECLS

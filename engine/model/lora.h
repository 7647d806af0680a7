/* LoRA adapters (finetune lora), as PEFT defines them: a weight W of a linear map gets
 * lora_A [r, in] and lora_B [out, r], and the layer computes
 *
 *   y = W x + b + (alpha / r) · B A dropout(x)
 *
 * (alpha / sqrt(r) with rank-stabilised LoRA, PEFT's use_rslora: lora_rslora)
 * with A Kaiming-uniform (PEFT's kaiming_uniform_ with a = sqrt(5): U(±1/sqrt(in))) and B zero
 * at the start, so a fresh adapter leaves the model exactly as it was. The adapters are
 * parameters of the model (its trainable part, engine/model/finetune.h) but not of its family's
 * table: they have their own, `tensors`, named "<layer>.lora_A.weight" and
 * "<layer>.lora_B.weight" as PEFT names them under "base_model.model.". The weight itself is
 * never changed: sampling, evaluation and training all run the base and the adapter side by
 * side; cohort_lora_merge folds them together for an export. */
#pragma once

#include "engine/model/batch.h"
#include "engine/model/finetune.h"
#include "engine/model/model.h"

G_BEGIN_DECLS

typedef struct {
  guint target; /* the weight it adapts (parameter table index) */
  int in, out;
  int kind;     /* CohortAdaptKind of the weight */
  float *h;     /* backend [rows, r]: dropout(x) A^T of the last forward */
  guint64 salt; /* dropout's: the adapter's index */
} CohortLoraAdapter;

struct CohortLora {
  int rank;
  double alpha, dropout;
  gboolean rslora; /* PEFT's use_rslora */
  float scale;     /* alpha / rank, or alpha / sqrt(rank) with rslora */
  guint n;
  CohortLoraAdapter *adapters;
  int *of_tensor;            /* [n_tensors of the model]: an adapter index or -1 */
  CohortTensorInfo *tensors; /* 2n: adapter i's lora_A is 2i, its lora_B 2i + 1 */
  guint n_tensors;
  size_t rows;       /* rows each h holds */
  int max_in;        /* the widest input of any adapter */
  size_t max_kernel; /* the largest adapted convolution kernel, in floats */
  float *kernel;     /* backend scratch [max_kernel]: a kernel with its adapter folded in */
  float *dkernel;    /* backend scratch [max_kernel]: that kernel's gradient */
  float *dh;         /* backend scratch [rows, r] */
  float *drop;       /* backend scratch [rows, max_in] (dropout only) */
  guint64 *keys;     /* backend [max_batch]: one dropout key per example */
  int max_batch;
  int drop_batch; /* examples of the batch dropout is on for; 0: off */
  size_t scratch_bytes;
};

/* For cohort_model_alloc_tables: the adapters of `plan` laid out as `layout` (whose adapter
 * table it takes), with their scratch for `rows` rows and `max_batch` examples. NULL with an
 * error when out of backend memory. */
CohortLora *cohort_lora_new(const CohortModel *m, const CohortFinetunePlan *plan,
                            CohortFinetuneLayout *layout, size_t rows, GError **error);
void cohort_lora_free(const CohortBackend *be, CohortLora *lora);

/* For families, right after the product with weight `target` (parameter table index):
 * y [N, out] += scale · dropout(x) A^T B^T, when the weight has an adapter. */
void cohort_lora_forward(CohortModel *m, guint target, float *y, const float *x, int N);
/* For families, in backward, with dy [N, out] the gradient of that product's output and x its
 * input: lora_A's and lora_B's gradients accumulate, and dx [N, in] (may be NULL: no input
 * gradient) gets the adapter's share added. */
void cohort_lora_backward(CohortModel *m, guint target, float *dx, const float *dy, const float *x,
                          int N);

/* For families, before a convolution whose kernel is weight `target` (parameter table index,
 * an COHORT_ADAPT_CONV2D weight) at `w`: the kernel to convolve with: `w` itself without an
 * adapter, else w + scale · B A over the flattened kernel [out, c_in·k·k] in scratch, valid
 * until the next call. A convolution with that kernel is PEFT's base(x) + lora_B(lora_A(x))
 * · scale, lora_A being a convolution with the kernel's stride and padding and lora_B 1×1. */
const float *cohort_lora_conv_kernel(CohortModel *m, guint target, const float *w);
/* For families, in backward, before that convolution's backward (which should read the kernel
 * cohort_lora_conv_kernel gives again): where the kernel's gradient goes: `dw` (the weight's
 * own, NULL when it is frozen) without an adapter, else zeroed scratch that
 * cohort_lora_conv_grads then hands on. */
float *cohort_lora_conv_grad(CohortModel *m, guint target, float *dw);
/* After it: the adapter's gradients from the kernel's (dA += scale B^T dK, dB += scale dK A^T),
 * and dK added to `dw` when the weight learns too. */
void cohort_lora_conv_grads(CohortModel *m, guint target, float *dw);

/* lora_A Kaiming-uniform from `seed` (each adapter its own stream), lora_B zeros. */
void cohort_lora_init(CohortModel *m, guint64 seed);
/* The same for adapter tensor k (of lora->tensors) into `dst` (host, its numel floats): ZeRO
 * stage 3 initialises one layer at a time. */
void cohort_lora_init_tensor(const CohortModel *m, guint64 seed, guint k, float *dst);

/* For the trainer, around the forwards and backwards of a training micro-batch: dropout on
 * the adapters' inputs with a mask drawn from (seed, the batch's epoch, each row's example
 * id), never from the rank; NULL turns it off (evaluation, samples). Nothing without
 * adapters or with lora_dropout 0. */
void cohort_lora_set_train_batch(CohortModel *m, const CohortBatch *batch, guint64 seed);

/* The model's parameters with every adapter folded in: merged = params (host, laid out as
 * the model's vector) with scale · B A added to each adapted weight ((B A)^T for a weight
 * stored [in, out]), in float64 before one rounding. `merged` has n_params floats; it may be
 * `params` itself. */
void cohort_lora_merge(const CohortModel *m, const float *params, float *merged);

G_END_DECLS

/* The ResNet family's model struct, shared by its files (resnet.c: tables, set-up and
 * initialisation; resnet-forward.c: the network forward and backward with (Sync)BatchNorm;
 * resnet-classify.c: the classifier's loss, accuracy and evaluation on batches; resnet-import.c:
 * torchvision and timm weights for init_from). Activations are NHWC. */
#pragma once

#include "engine/models/resnet.h"
#include "kernels/backend.h"

G_BEGIN_DECLS

/* BatchNorm2d's default epsilon in PyTorch. */
#define RESNET_BN_EPS 1e-5f

/* A convolution (no bias) followed by BatchNorm: the unit the network is made of. Offsets are
 * in floats, into the parameter (and gradient) buffer or into the buffer table's memory. */
typedef struct {
  int c_in, c_out, k, stride, pad;
  int h_in, h_out;          /* sides of the square input and output */
  size_t w_off;             /* the convolution's weight [c_out, c_in, k, k] */
  guint w_index;            /* its index in the parameter table (its LoRA adapter's key) */
  size_t g_off, b_off;      /* BatchNorm weight and bias [c_out] */
  size_t mean_off, var_off; /* running_mean, running_var [c_out] */
  /* kept from the last forward for backward (backend memory, max_batch images) */
  float *conv_out; /* [B, h_out, h_out, c_out]: BatchNorm's input */
  float *stat;     /* [2 c_out + 1]: mean, sum of squared deviations (global ones under
                      SyncBatchNorm) and this rank's count, the row SyncBatchNorm gathers */
  float *rstd;     /* [c_out] */
  double count;    /* values per channel the statistics span (over all ranks) */
} ResnetConvBn;

/* A BasicBlock (2 units: conv1/bn1, conv2/bn2) or a Bottleneck (3: … conv3/bn3). */
typedef struct {
  ResnetConvBn unit[3], down;
  int n_units;
  gboolean has_down;     /* a 1×1 convolution + BatchNorm shortcut (the shape changes) */
  float *hidden[2];      /* relu(bn_i(conv_i(…))) of the units before the last */
  float *out;            /* relu(bn(conv(hidden)) + shortcut) of the last unit */
  size_t p_begin, p_end; /* the block's range of parameters */
} ResnetBlock;

typedef struct {
  CohortModel base;
  CohortResnetShape shape;
  float bn_momentum;
  gboolean freeze_bn_stats; /* BatchNorm in eval mode in training too (freeze_bn_stats) */

  ResnetConvBn stem; /* conv1, bn1 */
  float *stem_out;   /* relu(bn1(conv1(image))) */
  gboolean has_pool; /* the ImageNet stem's 3×3 stride-2 max-pooling */
  int pool_side;     /* its output's side */
  float *pool_out;   /* maxpool(stem_out); the first block's input */
  ResnetBlock *blocks;
  int n_blocks;
  int n_bn;        /* BatchNorm layers; their num_batches_tracked are the last n_bn buffers */
  size_t nbt_off;  /* the first num_batches_tracked in the buffer memory */
  size_t fc_w_off; /* fc.weight [num_classes, feat] */
  guint fc_index;  /* fc.weight's index in the parameter table (its LoRA adapter's key) */
  size_t fc_b_off; /* fc.bias [num_classes] (not always right after fc.weight: finetune.h) */
  int feat;        /* the last stage's channels: the pooled features */
  int last_side;   /* the last stage's side */
  size_t max_act;  /* floats of the largest activation, for the backward scratch */
  int max_c;       /* the most channels of any BatchNorm */

  /* Created frozen (a distillation teacher): forward buffers shared, no backward scratch. */
  gboolean forward_only;

  /* activations and scratch (backend memory), for max_batch images */
  void *act_mem;
  float *img; /* [B, H, W, C] */
  int *labels;
  float *pooled, *logits, *lse, *losses; /* [B, feat], [B, K], [B], [B] */
  /* dlogits, dpooled, da, db, dh and sums are NULL when forward_only; dconv holds the
   * downsampling shortcut's output in forward */
  float *dlogits, *dpooled;
  float *da, *db, *dh[2], *dconv; /* [max_act] each */
  float *sums;                    /* [2 max_c]: BatchNorm backward's two per-channel sums */
  float *ones;                    /* [n_bn] of 1: what each training forward adds to the counters */

  /* SyncBatchNorm scratch for comm->world_size ranks (resnet_set_comm) */
  float *gather;      /* backend memory [world × (2 max_c + 1)] */
  float *gather_host; /* host copy, for the counts */
  int gather_world;

  float *host_losses; /* [max_batch] */
  float *host_img;    /* [max_batch, H, W, C]: the batch turned channels-last */
  int last_B;
  gboolean have_train; /* the last forward was TRAIN: backward may follow */
} Resnet;

static inline Resnet *resnet_of(const CohortModel *m)
{
  return (Resnet *)m;
}

/* resnet-forward.c: the network on r->img (backend memory) up to r->logits. TRAIN mode uses
 * (and under SyncBatchNorm combines) batch statistics and updates the running ones; EVAL
 * normalises with the running statistics. */
void cohort_resnet_net_forward(Resnet *r, int B, CohortForwardMode mode);
/* Backward from r->dlogits (d loss / d logits, already scaled), accumulating into the
 * gradients and reporting each block's range to the grad-ready hook. */
void cohort_resnet_net_backward(Resnet *r, int B);

/* resnet-classify.c: the family's CohortModelOps forward, backward, eval_batch, logits and
 * backward_logits (engine/model/model.h). */
float cohort_resnet_forward_batch(CohortModel *m, const CohortBatch *batch, CohortForwardMode mode);
void cohort_resnet_backward(CohortModel *m, float grad_scale);
const float *cohort_resnet_logits_op(const CohortModel *m, int *rows, int *classes);
void cohort_resnet_backward_logits(CohortModel *m, float grad_scale, float task_weight,
                                   CohortLogitsGradFunc add, gpointer user_data);
void cohort_resnet_eval_batch(CohortModel *m, const CohortBatch *batch, double *sums);

/* resnet-import.c: the class's import_weights (engine/model/model.h). */
gboolean cohort_resnet_import(CohortModel *m, const char *path, GPtrArray *notes, GError **error);

G_END_DECLS

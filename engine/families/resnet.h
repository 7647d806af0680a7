/* The "resnet" family's description (engine/families/family.h): a ResNet's shape, its plan of
 * layers (each convolution + BatchNorm unit with its geometry and its place in the tables),
 * its tensors and buffers with torchvision's names, and where its activations go. The model
 * itself, which runs the plan, is engine/models/resnet*.c. */
#pragma once

#include "engine/families/family.h"

G_BEGIN_DECLS

/* The "resnet" family's description. */
extern const CohortFamilyDesc cohort_family_resnet;

/* The config's resnet_variant, in the order of its choices. */
typedef enum {
  COHORT_RESNET_CIFAR,
  COHORT_RESNET_18,
  COHORT_RESNET_34,
  COHORT_RESNET_50,
  COHORT_RESNET_101,
} CohortResnetVariant;

typedef struct {
  CohortResnetVariant variant;
  int blocks_per_stage; /* cifar: n = (n_layer - 2) / 6 */
  int width;            /* channels of the first stage (64 for the ImageNet variants) */
  int image_size, channels;
  int num_classes;
  gboolean zero_init_residual;
} CohortResnetShape;

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
  double count;    /* values per channel the statistics span (over all ranks); set by forward */
} CohortResnetUnit;

/* A BasicBlock (2 units: conv1/bn1, conv2/bn2) or a Bottleneck (3: … conv3/bn3). */
typedef struct {
  CohortResnetUnit unit[3], down;
  int n_units;
  gboolean has_down;     /* a 1×1 convolution + BatchNorm shortcut (the shape changes) */
  float *hidden[2];      /* relu(bn_i(conv_i(…))) of the units before the last */
  float *out;            /* relu(bn(conv(hidden)) + shortcut) of the last unit */
  size_t p_begin, p_end; /* the block's range of parameters */
} CohortResnetBlock;

/* The network of a shape: its layers, where they are in the tables, and its activations
 * (NHWC, backend memory, for max_batch images). */
typedef struct {
  CohortResnetUnit stem; /* conv1, bn1 */
  float *stem_out;       /* relu(bn1(conv1(image))) */
  gboolean has_pool;     /* the ImageNet stem's 3×3 stride-2 max-pooling */
  int pool_side;         /* its output's side */
  float *pool_out;       /* maxpool(stem_out); the first block's input */
  CohortResnetBlock *blocks;
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

  /* activations and scratch */
  float *img; /* [B, H, W, C] */
  int *labels;
  float *pooled, *logits, *lse, *losses; /* [B, feat], [B, K], [B], [B] */
  /* dlogits, dpooled, da, db, dh and sums are NULL when forward-only; dconv holds the
   * downsampling shortcut's output in forward */
  float *dlogits, *dpooled;
  float *da, *db, *dh[2], *dconv; /* [max_act] each */
  float *sums;                    /* [2 max_c]: BatchNorm backward's two per-channel sums */
  float *ones;                    /* [n_bn] of 1: what each training forward adds to the counters */
} CohortResnetNet;

/* The shape `cfg` describes (num_classes as set). */
CohortResnetShape cohort_family_resnet_shape(const CohortConfig *cfg);
/* The layers of shape `s` into `net` (its blocks allocated: clear with
 * cohort_family_resnet_net_clear) and its tables into `out`, in torchvision's order: the stem
 * (and the ImageNet stem's max-pooling), the stages of blocks (the first of every stage after
 * the first with stride 2), the classifier. */
void cohort_family_resnet_build(const CohortResnetShape *s, CohortResnetNet *net,
                                CohortFamilyTables *out);
void cohort_family_resnet_net_clear(CohortResnetNet *net);
/* Lays the activations out from `base` (NULL: only counts) and returns their bytes. A
 * forward-only model (a distillation teacher) has no backward scratch, and every unit's
 * convolution output, the blocks' hidden activations and the block outputs (two, in turn)
 * share buffers of the largest activation's size, since nothing keeps them for a backward. */
size_t cohort_family_resnet_layout(CohortResnetNet *net, const CohortResnetShape *s, int max_batch,
                                   gboolean forward_only, char *base);

G_END_DECLS

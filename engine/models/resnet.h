/* The "resnet" family: the CIFAR-style ResNet of He et al. (2016, section 4.2) as an image
 * classifier with BatchNorm, trained with cross-entropy.
 *
 * A 3×3 convolution to `width` channels, BatchNorm and ReLU (the stem); three stages of n
 * BasicBlocks with width, 2·width and 4·width channels, the second and third starting with a
 * stride-2 block; global average pooling and a linear classifier. Depth n_layer = 6n + 2. A
 * BasicBlock is conv3×3 (stride s) → BN → ReLU → conv3×3 → BN, plus the shortcut, then ReLU;
 * where the shape changes the shortcut is a 1×1 stride-s convolution and BN (option B).
 * Convolutions have no bias. BatchNorm has eps 1e-5 and momentum bn_momentum: training uses
 * batch statistics and updates the running mean and unbiased variance; evaluation uses the
 * running statistics.
 *
 * Tensor names are torchvision's (conv1.weight, bn1.running_mean, layer2.0.downsample.0.weight,
 * fc.weight …), so a PyTorch module of this shape (tests/torch_resnet_ref.py) loads the export
 * with strict=True. The running statistics and num_batches_tracked (exported as I64) are the
 * model's buffers.
 *
 * SyncBatchNorm: with a communicator set (cohort_model_set_comm), every BatchNorm layer in
 * training combines the per-rank count, mean and squared deviations of its input into the
 * global batch's statistics (an all-gather and Chan's formula), and backward all-reduces the
 * two per-channel sums the input gradient needs, as torch.nn.SyncBatchNorm does: N ranks then
 * normalise exactly as one process on the combined batch. */
#pragma once

#include "engine/model/model.h"

G_BEGIN_DECLS

/* The "resnet" family for the model registry. */
extern const CohortModelClass cohort_resnet_class;

typedef struct {
  int blocks_per_stage; /* n = (n_layer - 2) / 6 */
  int width;            /* channels of the first stage */
  int image_size, channels;
  int num_classes;
} CohortResnetShape;

/* The model's shape. */
const CohortResnetShape *cohort_resnet_shape(const CohortModel *m);

/* The classifier on a batch given explicitly: images [B, C, H, W] and labels [B] (in
 * 0..num_classes-1) in HOST memory. Returns the mean cross-entropy; in TRAIN mode keeps what
 * ops->backward needs and updates the running statistics. When `correct` is not NULL it gets
 * the number of rows whose top-1 class is the label. Tests call it; the trainer's forward
 * takes a CohortBatch. */
float cohort_resnet_forward_given(CohortModel *m, const float *images, const int *labels, int B,
                                  CohortForwardMode mode, int *correct);

/* The logits of the last forward, [B, num_classes], into host `out`. */
void cohort_resnet_logits(const CohortModel *m, float *out);

G_END_DECLS

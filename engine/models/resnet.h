/* The "resnet" family: image classifiers with BatchNorm, trained with cross-entropy, in two
 * kinds (resnet_variant):
 *
 * cifar: the CIFAR-style ResNet of He et al. (2016, section 4.2).
 * A 3×3 convolution to `width` channels, BatchNorm and ReLU (the stem); three stages of n
 * BasicBlocks with width, 2·width and 4·width channels, the second and third starting with a
 * stride-2 block; global average pooling and a linear classifier. Depth n_layer = 6n + 2. A
 * BasicBlock is conv3×3 (stride s) → BN → ReLU → conv3×3 → BN, plus the shortcut, then ReLU;
 * where the shape changes the shortcut is a 1×1 stride-s convolution and BN (option B).
 * Convolutions have no bias. BatchNorm has eps 1e-5 and momentum bn_momentum: training uses
 * batch statistics and updates the running mean and unbiased variance; evaluation uses the
 * running statistics.
 *
 * resnet18, resnet34, resnet50, resnet101: torchvision 0.14's ImageNet ResNets exactly
 * (torchvision.models.resnet): a 7×7 stride-2 convolution to 64 channels, BatchNorm, ReLU and a
 * 3×3 stride-2 max-pooling; four stages of [2, 2, 2, 2] or [3, 4, 6, 3] BasicBlocks (18, 34) or
 * [3, 4, 6, 3] or [3, 4, 23, 3] Bottlenecks (50, 101) with 64, 128, 256 and 512 planes, stages
 * 2–4 starting with stride 2; a Bottleneck is 1×1 → BN → ReLU → 3×3 (the stride here, "ResNet
 * v1.5") → BN → ReLU → 1×1 to 4 × planes → BN, plus the shortcut, then ReLU; a shortcut is a
 * 1×1 stride-s convolution and BN where the shape changes; global average pooling, fc. RGB
 * input of any side of 32 or more.
 *
 * zero_init_residual starts the last BatchNorm scale of every block (bn2 of a BasicBlock, bn3
 * of a Bottleneck) at 0, as torchvision's option does.
 *
 * Activations are channels-last (NHWC) inside the network, the layout oneDNN's and cuDNN's
 * convolutions prefer, so no layer reorders them; images come in and weights go out in
 * PyTorch's layouts.
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

#include "engine/families/resnet.h" /* CohortResnetShape */
#include "engine/model/model.h"

G_BEGIN_DECLS

/* The "resnet" family for the model registry. */
extern const CohortModelClass cohort_resnet_class;

/* The model's shape. */
const CohortResnetShape *cohort_resnet_shape(const CohortModel *m);

/* The classifier on a batch given explicitly: images [B, C, H, W] (NCHW, as PyTorch's) and
 * labels [B] (in
 * 0..num_classes-1) in HOST memory. Returns the mean cross-entropy; in TRAIN mode keeps what
 * ops->backward needs and updates the running statistics. When `correct` is not NULL it gets
 * the number of rows whose top-1 class is the label. Tests call it; the trainer's forward
 * takes a CohortBatch. */
float cohort_resnet_forward_given(CohortModel *m, const float *images, const int *labels, int B,
                                  CohortForwardMode mode, int *correct);

/* The logits of the last forward, [B, num_classes], into host `out`. */
void cohort_resnet_logits(const CohortModel *m, float *out);

/* For tests: which way every ReLU of the last forward went, 1 where its output is positive,
 * in torchvision's order of ReLU calls (the stem's, then each block's, its last after the
 * residual sum), each [B, C, H, W] as PyTorch lays it out; a new array of *n bytes (g_free
 * it). A float64 reference made to take the same sides compares gradients that no ReLU input
 * within rounding of 0 can tip (tests/test-resnet-tv.c). */
guint8 *cohort_resnet_relu_sides(const CohortModel *m, size_t *n);

G_END_DECLS

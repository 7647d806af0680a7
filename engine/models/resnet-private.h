/* The ResNet family's model struct, shared by its files (resnet.c: tables, set-up and
 * initialisation; resnet-forward.c: the network forward and backward with (Sync)BatchNorm;
 * resnet-classify.c: the classifier's loss, accuracy and evaluation on batches; resnet-import.c:
 * torchvision and timm weights for init_from). Activations are NHWC. */
#pragma once

#include "engine/families/resnet.h"
#include "engine/models/resnet.h"
#include "kernels/backend.h"

G_BEGIN_DECLS

/* BatchNorm2d's default epsilon in PyTorch. */
#define RESNET_BN_EPS 1e-5f

/* The units and blocks of the family's plan (engine/families/resnet.h). */
typedef CohortResnetUnit ResnetConvBn;
typedef CohortResnetBlock ResnetBlock;

typedef struct {
  CohortModel base;
  CohortResnetShape shape;
  float bn_momentum;
  gboolean freeze_bn_stats; /* BatchNorm in eval mode in training too (freeze_bn_stats) */

  CohortResnetNet net; /* the layers, their places in the tables, the activations */

  /* Created frozen (a distillation teacher): forward buffers shared, no backward scratch. */
  gboolean forward_only;

  void *act_mem; /* where net's activations are */

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

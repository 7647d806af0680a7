/* The model interface: what the trainer, the DDP reducer, checkpoints, exports and the window
 * need from a model, and nothing more. Each model family (engine/models/) is a
 * CohortModelClass in a small registry; `model` in the config picks one.
 *
 * A model owns, in one backend's memory:
 *  - its parameters and gradients, one contiguous buffer each, described by a tensor table in
 *    forward order, so reverse layer order is decreasing offsets (the reducer's buckets);
 *  - its buffers: tensors that are saved, exported and broadcast but never optimised (BatchNorm
 *    running statistics, a fixed position embedding), in a second table over one buffer;
 *  - its activations, allocated once for micro-batches of up to max_batch examples.
 * Forward takes a CohortBatch (engine/model/batch.h); every random choice a model makes for an
 * example (noise, timesteps, label dropout) is a function of (seed, epoch, example id), never of
 * the rank, so N ranks compute what one process computes on the combined batch. */
#pragma once

#include <glib.h>
#include <json-glib/json-glib.h>

#include "engine/model/batch.h"
#include "engine/config/config.h"
#include "engine/base/tensor.h"
#include "engine/families/family.h"
#include "engine/progress/protocol.h"
#include "data/tokenizer.h"

G_BEGIN_DECLS

typedef struct CohortBackend CohortBackend;
typedef struct CohortModel CohortModel;
typedef struct CohortModelClass CohortModelClass;
typedef struct CohortLossLog CohortLossLog;
typedef struct CohortLora CohortLora; /* engine/model/lora.h */

typedef enum {
  COHORT_FORWARD_TRAIN, /* keeps what backward needs; BatchNorm uses batch statistics */
  COHORT_FORWARD_EVAL,  /* no backward follows; BatchNorm uses running statistics */
} CohortForwardMode;

/* One evaluation metric: value = sums[numerator] / sums[denominator] over the whole
 * validation set, summed across ranks before the division (never an average of averages). */
typedef struct {
  const char *name; /* an `eval` member: COHORT_FIELD_VAL_LOSS, COHORT_FIELD_ACCURACY */
  int numerator;
  int denominator;
} CohortMetric;

/* Knowledge distillation (engine/model/distill.h): a frozen teacher's outputs on the student's own
 * micro-batch become part of the student's loss. */
typedef struct CohortDistill CohortDistill;

/* The distillation keys of the config, as the families read them. */
typedef struct {
  double alpha;       /* weight of the teacher's term; the task's (labels, targets) is 1 - alpha */
  double temperature; /* logits families: the softmax temperature of both distributions */
  double cfg_scale;   /* dit: classifier-free guidance of the teacher's velocity; 1 = none */
} CohortDistillSettings;

/* Adds another loss's gradient onto dlogits [rows, classes] (backend memory), which holds the
 * task loss's gradient already; `logits` are the forward's. */
typedef void (*CohortLogitsGradFunc)(float *dlogits, const float *logits, int rows, int classes,
                                     gpointer user_data);

/* What a sample routine gets. */
typedef struct {
  const CohortConfig *cfg;
  gint64 step;
  const char *workspace;          /* where image samples go (samples/step-N.png) */
  const char *image_path;         /* or exactly this file, when not NULL */
  guint64 *rng;                   /* the sampling RNG, saved in checkpoints */
  const char *const *class_names; /* the data's classes in index order, or NULL */
  /* The other ranks of a ZeRO run compute the sample with rank 0 (a sharded model's layers
   * are gathered by all of them) but write no file. */
  gboolean compute_only;
  const CohortTokenizer *tokenizer; /* text through a BPE tokenizer; NULL for byte-level text */
} CohortSampleRequest;

/* Collectives a model may issue inside forward and backward: SyncBatchNorm's. The trainer
 * sets them (cohort_model_set_comm) when sync_batchnorm is on and there is more than one rank;
 * without them every layer works on its own rank's batch. Buffers are the model's backend
 * memory, and every rank makes the same calls in the same order. A FALSE return means the
 * communicator failed: the model goes on with what it has (its values are then meaningless)
 * and the trainer reports the failure when backward has returned. */
typedef struct {
  int world_size;
  /* recv [world_size × count] gets every rank's send [count], in rank order. */
  gboolean (*all_gather)(gpointer data, const float *send, size_t count, float *recv);
  /* buf [count] becomes its sum over all ranks. */
  gboolean (*all_reduce_sum)(gpointer data, float *buf, size_t count);
  gpointer data;
} CohortModelComm;

/* The operations of one model family. Every pointer is set unless marked optional. */
typedef struct {
  /* Forward over `batch` (batch->B <= max_batch). Returns the mean loss over the batch; in
   * TRAIN mode keeps what backward needs. */
  float (*forward)(CohortModel *m, const CohortBatch *batch, CohortForwardMode mode);
  /* ADDS d(loss * grad_scale)/d(params) into the gradients (micro-batches accumulate),
   * calling the grad-ready hook as ranges become final. After a TRAIN forward only. */
  void (*backward)(CohortModel *m, float grad_scale);
  /* The family's initialisation from `seed`; deterministic. Buffers get their initial
   * values too. */
  void (*init_weights)(CohortModel *m, guint64 seed);
  /* What init_weights gives parameter tensor i, into `dst` (host memory, its numel floats),
   * and the buffers' initial values: ZeRO stage 3 initialises one layer at a time with them,
   * never the whole model at once. */
  void (*init_tensor)(CohortModel *m, guint64 seed, guint i, float *dst);
  void (*init_buffers)(CohortModel *m);
  /* Adds this validation batch's metric sums into `sums` (n_sums entries, see metrics). */
  void (*eval_batch)(CohortModel *m, const CohortBatch *batch, double *sums);
  /* Produces a sample artifact (text, an image grid) and puts its fields ("text", "tokens",
   * "image": path) into `fields` of the `sample` event. Optional: a classifier has none. */
  gboolean (*sample)(CohortModel *m, const CohortSampleRequest *req, JsonObject *fields,
                     GError **error);
  /* Multiply-adds of one training example's forward + backward (for FLOP/s). Optional. */
  double (*flops_per_example)(const CohortModel *m);
  /* Frees what the family allocated beyond the base (activations, its own struct). */
  void (*finalize)(CohortModel *m);

  /* Logits families (GPT, classifiers): what cohort_logits_distill_new needs. Optional. */
  /* The logits of the last forward, [*rows, *classes] in backend memory. */
  const float *(*logits)(const CohortModel *m, int *rows, int *classes);
  /* ops->backward with the task loss's gradient of the logits scaled by task_weight, `add`
   * (may be NULL) called on that gradient, then the rest of backward through the network. */
  void (*backward_logits)(CohortModel *m, float grad_scale, float task_weight,
                          CohortLogitsGradFunc add, gpointer user_data);
  /* Prepares for collectives among comm->world_size ranks (scratch memory); FALSE with an
   * error when that memory cannot be had. Optional: families without collectives ignore the
   * communicator. */
  gboolean (*set_comm)(CohortModel *m, const CohortModelComm *comm, GError **error);
} CohortModelOps;

struct CohortModel {
  const CohortModelClass *klass;
  const CohortModelOps *ops;
  const CohortBackend *be;
  int max_batch;

  CohortTensorInfo *tensors; /* parameters, forward order, names owned by the model */
  guint n_tensors;
  size_t n_params;
  float *params; /* backend memory */
  float *grads;  /* backend memory */

  CohortTensorInfo *buffers; /* may be empty */
  guint n_buffers;
  size_t n_buffer_floats;
  float *buffer_data; /* backend memory; NULL when n_buffers is 0 */

  const CohortMetric *metrics; /* n_metrics entries over n_sums sums */
  guint n_metrics;
  guint n_sums;

  CohortGradReadyFunc grad_ready;
  gpointer grad_ready_data;
  CohortLayerHookFunc layer_hook; /* NULL: every parameter is always in memory */
  gpointer layer_hook_data;
  /* ZeRO stages 2 and 3 (cohort_model_set_creating_sharded): the gradients (and at stage 3
   * the parameters) are a reserved address range (kernels/backend.h `reserve`) in which only
   * the layers in use have memory; NULL-free like the rest. */
  gboolean grads_reserved, params_reserved;
  /* frozen_dtype bf16 (engine/model/frozen-store.h): the parameters are a reserved range too,
   * whole until cohort_frozen_store_take moves the frozen matrices into `frozen_store`; from
   * then on each is in place only between its layer's begin and end. */
  gboolean params_range;
  struct CohortFrozenStore *frozen_store;

  /* A model made by cohort_model_new_frozen (a distillation teacher): no gradient buffer
   * (grads is NULL), forward only. */
  gboolean frozen;
  /* Bytes of activations (and backward scratch) the family allocated for max_batch; 0 when
   * the family does not say. */
  size_t act_bytes;
  const CohortModelComm *comm; /* NULL: this rank's batch alone (cohort_model_set_comm) */
  CohortLossLog *loss_log;     /* the base's (engine/model/model-loss.c); NULL until used */

  /* Fine-tuning (engine/model/finetune.h): the parameters that learn, and the LoRA adapters
   * among them, come first in the parameter vector, [0, n_trainable); the frozen ones follow.
   * `grads` holds n_trainable floats, and the optimizer, EMA weights, the DDP reducer and
   * ZeRO's shards cover that part alone, described by the train table (`train`, in increasing
   * offsets, each layer's tensors together). With finetune full, and for a model made without
   * a fine-tuning config, n_trainable is n_params and the train table is the parameter table.
   * n_params counts the adapters too; the parameter table (`tensors`) holds the family's
   * tensors only, the adapters' are lora->tensors. */
  size_t n_trainable;
  CohortTensorInfo *train; /* n_train entries; names borrowed from the tables */
  guint n_train;
  CohortFinetune finetune;
  CohortLora *lora;   /* finetune lora: the adapters; NULL otherwise */
  size_t *moved_from; /* each tensor's offset before the layout; NULL when nothing moved */
  /* For families that take adapters, set before cohort_model_alloc_tables: the most rows any
   * adapted linear map sees in one forward of max_batch examples (B·T for a GPT). */
  size_t lora_rows;
};

/* A model family. */
struct CohortModelClass {
  const char *name;  /* the config's `model` value: "gpt" */
  const char *title; /* for people: "GPT-2-style decoder (text)" */
  /* Data formats the family trains on; its first is the default. */
  const CohortDataFormat *formats;
  guint n_formats;
  /* Rules across keys that only this family has and that need more than the config (a file
   * to read), checked after the generic ones and the description's; errors name the key.
   * Optional. */
  gboolean (*check_config)(const CohortConfig *cfg, const char *source, GError **error);
  /* The family's description (engine/families/family.h): its tables, default LoRA targets,
   * counts and activation bytes from the config alone, which create builds the model from.
   * Where it names lora_targets, the family's forward and backward call cohort_lora_forward
   * and cohort_lora_backward (engine/model/lora.h) on every weight whose `adapt` it sets. */
  const CohortFamilyDesc *family;
  /* Sets the shape keys of `shape` (a shallow copy of `cfg`) to those the model is built with
   * when that takes more than the config (a DiT's vae_from: the latents' size and channels,
   * from the VAE's config.json); the memory plan reads the description over it. Optional:
   * the config's own keys. */
  void (*runtime_shape)(const CohortConfig *cfg, CohortConfig *shape);
  /* Allocates the model for micro-batches of up to max_batch examples on backend `be`.
   * Parameters are zero until init_weights or a load. */
  CohortModel *(*create)(const CohortBackend *be, const CohortConfig *cfg, int max_batch,
                         GError **error);
  /* Loads pretrained weights for `init_from` (a file in the family's own exchange format,
   * e.g. Hugging Face GPT-2 .safetensors) over the family's initialisation, which tensors the
   * file does not fill keep; adapting the file to the model (a classifier re-initialised for
   * another class count) adds a line for the run's log to `notes` (may be NULL; g_free'd
   * strings). Optional: NULL = Cohort's own export format. */
  gboolean (*import_weights)(CohortModel *m, const char *path, GPtrArray *notes, GError **error);
  /* The file import_weights reads for `path` (a folder's weights file), whose sha256 a
   * checkpoint of only what learns records (engine/model/checkpoint-base.h); g_free it.
   * Optional: NULL = `path` itself. */
  char *(*import_file)(const char *path);
  /* Writes files that belong beside an exported model.safetensors in `dir` (a Hugging Face
   * config.json, the class names). Optional. */
  gboolean (*export_extra)(const CohortModel *m, const CohortConfig *cfg, const char *dir,
                           GError **error);
  /* Prefix a foreign exchange format may put before every name ("transformer." for HF
   * GPT-2); NULL = none. Used by the generic import. */
  const char *import_prefix;
  /* A parameter whose rows are positions ("wpe.weight" for GPT-2; NULL: none): a file may
   * hold more rows than the model (its n_positions above the run's seq_len), of which
   * cohort_model_load reads the first. */
  const char *position_table;

  /* The module path of the family's layers inside the Hugging Face model PEFT wraps
   * ("transformer." for GPT2LMHeadModel; NULL: none), and PEFT's task_type (NULL: none):
   * for the adapter folder (engine/model/lora-io.h). */
  const char *lora_module_prefix;
  const char *lora_task_type;
  /* TRUE when the family's backward skips frozen gradients (cohort_model_grad,
   * cohort_model_grad_at) and keeps no offsets that cohort_model_moved does not map: it can
   * run finetune frozen (and lora, with lora_targets). */
  gboolean frozen_layout;

  /* Distillation (engine/model/distill.h); a family without distill_new cannot be a student. */
  /* What a teacher's config must share with the student's beyond the family (vocabulary;
   * image size, channels and classes); errors name the key, both values and `teacher_dir`.
   * Optional. */
  gboolean (*check_teacher)(const CohortConfig *student, const CohortConfig *teacher,
                            const char *teacher_dir, GError **error);
  /* The family's distiller: cohort_logits_distill_new for logits families. Optional. */
  CohortDistill *(*distill_new)(CohortModel *student, CohortModel *teacher,
                                const CohortDistillSettings *settings, GError **error);
  /* student_init teacher_layers applies: the blocks (table `layer` 0 … n_layer − 1) are
   * alike, so a shallower student of the teacher's width can take every k-th of them. FALSE
   * where depth changes the shapes (a ResNet's stages). */
  gboolean copies_blocks;
};

/* Frees a table a family made (the names too). */
void cohort_tensor_table_free(CohortTensorInfo *tensors, guint n);

/* Frees the model: the family's ops->finalize (its activations and its own struct), then the
 * base's tables and buffers. */
void cohort_model_free(CohortModel *m);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortModel, cohort_model_free)

/* For the registry: marks this thread as creating a frozen model (see below). */
void cohort_model_set_creating_frozen(gboolean frozen);
/* For families' create: TRUE while cohort_model_new_frozen runs it on this thread, so a family
 * may lay out forward-only activations (no backward scratch, one set of block buffers that
 * every block reuses). */
gboolean cohort_model_creating_frozen(void);

/* For the registry: while set on this thread (NULL clears it), models created here are laid
 * out for `cfg`'s fine-tuning keys (engine/model/finetune.h), except frozen ones (teachers). */
void cohort_model_set_creating_finetune(const CohortConfig *cfg);

/* For the trainer: while set on this thread (2 or 3; 0 clears it), models created here get
 * their gradients (stage 2) or their gradients and parameters (stage 3) as reserved address
 * ranges instead of whole buffers (CohortModel.grads_reserved, params_reserved), which ZeRO
 * fills one layer at a time. */
void cohort_model_set_creating_sharded(int stage);

/* For families: takes the tables of the family's description (engine/families/family.h) as
 * the model's parameter and buffer tables (`t` is emptied), before cohort_model_alloc_tables. */
void cohort_model_take_tables(CohortModel *m, CohortFamilyTables *t);

/* For families: allocates params, grads and buffer_data for the tables already set on `m`
 * (zeroed, backend memory); no grads inside cohort_model_new_frozen; reserved ranges inside
 * cohort_model_set_creating_sharded. Inside cohort_model_set_creating_finetune it first lays
 * the tensors out for the config (their offsets change: a family that keeps offsets of its
 * own maps them with cohort_model_moved) and makes the adapters. FALSE with an error naming
 * the sizes when out of memory (or, for a reserved range, when the backend cannot reserve
 * address space), or naming the key when the fine-tuning keys do not fit the model. */
gboolean cohort_model_alloc_tables(CohortModel *m, GError **error);

/* A reserved parameter range (ZeRO stage 3, frozen_dtype bf16) has memory only where it is
 * committed (kernels/backend.h `commit`), which on a GPU is the only memory that may be read
 * or written. cohort_model_alloc_tables commits the whole range when the start writes it
 * whole anyway (frozen_dtype bf16, or a frozen part at stage 3); this commits its first `n`
 * floats (all for n_params) before code that writes or reads them whole, such as a stage-3
 * start from init_from, and cohort_model_commit_whole commits every parameter and gradient (a
 * model used whole, as the probe's). Nothing for whole buffers. FALSE with an error naming
 * the sizes when the backend has no memory for it. */
gboolean cohort_model_commit_params(CohortModel *m, size_t n, GError **error);
gboolean cohort_model_commit_whole(CohortModel *m, GError **error);

/* For families: where the tensor that the family laid out at `offset` (before
 * cohort_model_alloc_tables) is now; `offset` itself when nothing moved. */
size_t cohort_model_moved(const CohortModel *m, size_t offset);

/* For families: the gradient of parameter tensor i (backend memory), or NULL when it is
 * frozen or the model has no gradients: its gradient is then not computed. */
float *cohort_model_grad(const CohortModel *m, guint i);
/* For families: the gradient of the parameter tensor laid out at `offset` (its offset after
 * cohort_model_alloc_tables), or NULL when it is frozen or the model has no gradients. */
float *cohort_model_grad_at(const CohortModel *m, size_t offset);
/* For families, in backward: the gradients of every trainable tensor of `layer` (adapters
 * included) are final; reports their range to the grad-ready hook (nothing when the layer has
 * none). */
void cohort_model_layer_grads_ready(CohortModel *m, int layer);
/* Whether anything learns in `layer` or before it (table order of layers: a family whose
 * layer numbers grow in forward order may end backward once this is FALSE). */
gboolean cohort_model_learns_up_to(const CohortModel *m, int layer);

/* `view` becomes `m` with the train table in place of the parameter table (tensors = train,
 * n_params = n_trainable), sharing every buffer: for code that saves, loads or shares the
 * trainable part by name (checkpoints, ZeRO's files). Never free it or call its ops. */
void cohort_model_train_view(const CohortModel *m, CohortModel *view);

/* Initialises the model from `seed`: the family's init_weights, then the adapters (lora_A
 * Kaiming-uniform, lora_B zeros, as PEFT). */
void cohort_model_init(CohortModel *m, guint64 seed);

/* Backend bytes the model holds: parameters, gradients (none when frozen; the trainable part
 * otherwise), buffers, the adapters' scratch and the activations the family reports in
 * act_bytes. */
size_t cohort_model_memory_bytes(const CohortModel *m);

/* TRUE when the model's memory is host memory (the CPU backend). */
gboolean cohort_model_on_host(const CohortModel *m);
/* Zeroes the gradients; nothing for a frozen model, nor for reserved gradients (ZeRO zeroes
 * each layer's when backward first reaches it). */
void cohort_model_zero_grad(CohortModel *m);
void cohort_model_set_grad_ready_func(CohortModel *m, CohortGradReadyFunc func, gpointer user_data);
/* Gives the model collectives for layers that span ranks (SyncBatchNorm); NULL takes them
 * away. `comm` must outlive its use. FALSE with an error (and no communicator set) when the
 * family cannot prepare for them. */
gboolean cohort_model_set_comm(CohortModel *m, const CohortModelComm *comm, GError **error);
/* Calls the grad-ready hook, if any (families call it from backward). */
void cohort_model_grad_ready(CohortModel *m, size_t offset, size_t count);
/* Sets the layer hook (NULL removes it). */
void cohort_model_set_layer_hook(CohortModel *m, CohortLayerHookFunc func, gpointer user_data);
/* For families: around every use of a layer's parameters or gradients in forward and backward
 * (CohortLayerHookFunc); nothing without a hook. Every tensor a family reads or adds into
 * between a begin and its end has that layer. */
void cohort_model_layer_begin(CohortModel *m, int layer, CohortLayerUse use);
void cohort_model_layer_end(CohortModel *m, int layer, CohortLayerUse use);

const CohortTensorInfo *cohort_model_find_tensor(const CohortModel *m, const char *name);
const CohortTensorInfo *cohort_model_find_buffer(const CohortModel *m, const char *name);

/* Host views of backend memory: the buffer itself on the CPU backend, else a downloaded copy
 * stored in *tmp (g_free it; NULL when no copy was made). */
const float *cohort_model_params_host(const CohortModel *m, float **tmp);
const float *cohort_model_buffers_host(const CohortModel *m, float **tmp);
/* Explicit copies between the model's buffers and host memory. */
void cohort_model_download_params(const CohortModel *m, float *host);
void cohort_model_upload_params(CohortModel *m, const float *host);
void cohort_model_upload_buffers(CohortModel *m, const float *host);

/* FALSE with an error naming `source` (the file the weights came from) and the first tensor
 * holding a NaN or an infinity, among the parameters and buffers. */
gboolean cohort_model_check_finite(const CohortModel *m, const char *source, GError **error);
/* The name of the first tensor (parameters, adapters, buffers) holding a NaN or an infinity;
 * NULL when every value is finite. */
const char *cohort_model_first_non_finite(const CohortModel *m);

/* Losses. For families: the sum (in double, index order) of `n` losses in backend memory,
 * through `host` (n floats), and their mean as every family's forward returns it:
 * (float)(sum / n). Between cohort_model_begin_losses and cohort_model_take_losses the mean
 * is not computed: the losses are copied, device to device without waiting, into the model's
 * log and NAN is returned, so a GPU step never waits for the device in its forwards. */
double cohort_model_loss_sum(CohortModel *m, const float *losses, size_t n, float *host);
float cohort_model_mean_loss(CohortModel *m, const float *losses, size_t n, float *host);
/* The same with the sum divided by `div` instead of n: (float)(sum / div) (a batch whose
 * ignored targets count in no loss, engine/model/batch.h's loss_norm). */
float cohort_model_loss_over(CohortModel *m, const float *losses, size_t n, double div,
                             float *host);
/* The divisor of a token batch's loss: b->loss_norm when set, else the targets it counts (at
 * least 1); *counted (may be NULL) gets how many targets count. */
double cohort_batch_loss_div(const int *targets, size_t n, double loss_norm, size_t *counted);
/* For the trainer: starts logging the means of the coming forwards (see above). */
void cohort_model_begin_losses(CohortModel *m);
/* Ends the log: *sum = the sum, in the order of the forwards, of each forward's mean rounded
 * to float as the forward would have returned it (so the total has the bits of adding the
 * returned values), with one download; *forwards = how many forwards logged one (0 for a
 * family that reports its loss without cohort_model_mean_loss: its forwards returned it).
 * FALSE (and NAN) when no log was begun or memory for it could not be had. */
gboolean cohort_model_take_losses(CohortModel *m, double *sum, guint *forwards);
/* Frees the log (cohort_model_free does). */
void cohort_model_free_losses(CohortModel *m);

/* The value of each metric from summed `sums` (n_sums); values[n_metrics]. */
void cohort_model_metric_values(const CohortModel *m, const double *sums, double *values);

G_END_DECLS

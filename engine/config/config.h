/* TrainConfig: the one flat JSON object that describes a training run.
 *
 * Loading validates every key and fails with a message that names the file, the key, the
 * bad value and what is allowed; unknown keys are errors that suggest the closest known
 * key; older "version"s migrate forward. The key table (cohort_config_keys) is the single
 * description of every key: the CLI's --set, the GUI's controls and the docs use it. */
#pragma once

#include <glib.h>
#include "data/format.h"

G_BEGIN_DECLS

/* The version this build writes. Files with a lower version are migrated on load. */
#define COHORT_CONFIG_VERSION 1

typedef enum {
  COHORT_LR_CONSTANT,
  COHORT_LR_COSINE,
  COHORT_LR_LINEAR,
  COHORT_LR_STEP /* PyTorch's StepLR: times lr_gamma every lr_step_size steps */
} CohortLrSchedule;
typedef enum { COHORT_OPTIMIZER_ADAMW, COHORT_OPTIMIZER_SGD } CohortOptimizerKind;
typedef enum { COHORT_TIMESTEPS_UNIFORM, COHORT_TIMESTEPS_LOGIT_NORMAL } CohortTimestepSampling;
typedef enum {
  COHORT_PRECISION_FP32,
  COHORT_PRECISION_BF16,
  COHORT_PRECISION_FP16
} CohortPrecision;
typedef enum { COHORT_REDUCE_FP32, COHORT_REDUCE_BF16 } CohortReducePrecision;
typedef enum { COHORT_DEVICE_AUTO, COHORT_DEVICE_CPU, COHORT_DEVICE_CUDA } CohortDevice;
/* The CPU's fp32 matrix-product library (kernels/cpu/gemm-paths.h); auto: measured per CPU. */
typedef enum {
  COHORT_CPU_MATMUL_AUTO,
  COHORT_CPU_MATMUL_OPENBLAS,
  COHORT_CPU_MATMUL_ONEDNN,
  COHORT_CPU_MATMUL_MEASURE
} CohortCpuMatmul;
typedef enum {
  COHORT_STUDENT_INIT_RANDOM,        /* the family's initialisation (or init_from) */
  COHORT_STUDENT_INIT_TEACHER_LAYERS /* every k-th teacher block (engine/model/distill.h) */
} CohortStudentInit;
typedef enum { COHORT_BACKEND_NCCL, COHORT_BACKEND_GLOO } CohortDistBackend;
/* What learns (engine/model/finetune.h): every parameter, low-rank adapters on frozen weights
 * (PEFT's LoRA), or only the parameters `trainable` names. */
typedef enum { COHORT_FINETUNE_FULL, COHORT_FINETUNE_LORA, COHORT_FINETUNE_FROZEN } CohortFinetune;
/* How the frozen base is stored (engine/model/frozen-store.h). */
typedef enum { COHORT_FROZEN_FP32, COHORT_FROZEN_BF16 } CohortFrozenDtype;
typedef enum {
  COHORT_LR_SCALING_NONE,
  COHORT_LR_SCALING_LINEAR,
  COHORT_LR_SCALING_SQRT
} CohortLrScaling;

typedef struct {
  int version;

  /* model */
  char *model; /* a registered family: "gpt", "dit", "resnet" */
  int n_layer;
  int n_head;
  int n_embd;
  int seq_len;
  int vocab_size;
  int patch_size;              /* dit */
  int resnet_width;            /* resnet: channels of the first stage (then 2x, 4x) */
  int resnet_variant;          /* CohortResnetVariant (engine/models/resnet.h) */
  gboolean zero_init_residual; /* resnet: each block's last BatchNorm scale starts at 0 */
  int architecture;            /* llama: CohortLlamaArch (engine/families/llama.h) */
  int num_key_value_heads;     /* llama: grouped-query attention; 0 = n_head */
  int head_dim;                /* llama: 0 = n_embd / n_head */
  int intermediate_size;       /* llama: the SwiGLU MLP's width */
  double rms_norm_eps;         /* llama */
  double rope_theta;           /* llama */
  int rope_scaling;            /* llama: CohortRopeType (none, linear, llama3) */
  double rope_scaling_factor;  /* llama: rope_scaling linear and llama3 */
  double rope_low_freq_factor; /* llama: rope_scaling llama3 */
  double rope_high_freq_factor;
  int rope_original_max_position_embeddings;
  gboolean attention_bias;      /* llama: Llama's and Qwen3's attention_bias */
  gboolean tie_word_embeddings; /* llama: the output head is the token embedding */

  /* data; a path that starts with "builtin:" names a file under Cohort's data dir */
  char *train_data;
  char *val_data; /* "" = no validation */
  CohortDataFormat data_format;
  char *tokenizer; /* "bytes" or a tokenizer file or folder (data/tokenizer.h) */
  gboolean shuffle;
  gint64 seed;
  gboolean drop_last; /* DistributedSampler's drop_last */
  int image_size;     /* images: side of the square images the model sees */
  int image_resize;   /* resnet: shorter side before the centre crop; 0 = image_size */
  int image_channels; /* images: 1 (grey) or 3 (RGB) */
  char *image_mean;   /* resnet: per-channel mean of 0–1 pixels, "0.485,0.456,0.406" */
  char *image_std;    /* resnet: per-channel standard deviation */
  int num_classes;    /* images: 0 = as many as train_data has class folders */
  gboolean skip_bad_images;
  int augment;        /* CohortAugment (data/augment.h) */
  char *vae_from;     /* dit: "" = pixel space; else a diffusers AutoencoderKL folder */
  char *text_encoder; /* dit: "" = class labels; "builtin" or a llama-family folder (captions) */
  int text_encoder_layer; /* dit: the encoder's hidden state read (-1 last, -2 last but one) */
  int max_text_tokens;    /* dit: tokens of a caption kept */
  int num_workers;        /* threads loading micro-batches ahead; 0 = on the training thread */
  gboolean pin_memory;    /* GPU ranks: batches in page-locked host memory */

  /* optimisation */
  int batch_size; /* per process (rank_batch_sizes may give each its own share) */
  int gradient_accumulation_steps;
  CohortOptimizerKind optimizer;
  double learning_rate;
  CohortLrSchedule lr_schedule;
  int warmup_steps;
  double min_lr_ratio;
  int lr_step_size; /* step schedule: optimizer steps between decays */
  double lr_gamma;  /* step schedule: factor of each decay */
  double weight_decay;
  double momentum;   /* sgd */
  gboolean nesterov; /* sgd */
  double beta1;
  double beta2;
  double eps;
  double grad_clip; /* 0 = off */
  int max_steps;    /* optimizer steps; 0 = run `epochs` whole epochs */
  int epochs;
  double ema_decay; /* 0 = off */
  CohortPrecision precision;
  gboolean allow_tf32;                      /* fp32 GEMMs on TF32 tensor cores (GPU only) */
  double loss_scale_init;                   /* fp16: first dynamic loss scale */
  int loss_scale_growth_interval;           /* fp16: clean steps before the scale doubles */
  CohortTimestepSampling timestep_sampling; /* dit: how t is drawn */
  double timestep_shift;                    /* dit: t ← s·t / (1 + (s − 1)·t) */
  double cfg_dropout;                       /* dit: probability of training without the label */
  double bn_momentum;                       /* resnet: BatchNorm running-statistics momentum */
  gboolean freeze_bn_stats; /* resnet: BatchNorm in eval mode while training (running statistics) */
  CohortDevice device;
  int threads; /* 0 = auto */
  CohortCpuMatmul cpu_matmul;
  /* keep each block's input only and recompute the block in backward (less memory, one more
   * forward of the blocks) */
  gboolean activation_checkpointing;

  /* distillation (engine/model/distill.h) */
  char *teacher_from;         /* "" = no teacher; a Cohort model folder or a HF GPT-2 folder */
  double distill_alpha;       /* weight of the teacher's term */
  double distill_temperature; /* logits families: softmax temperature */
  double distill_cfg_scale;   /* dit: guidance of the teacher's velocity; 1 = none */
  CohortStudentInit student_init;

  /* fine-tuning (engine/model/finetune.h) */
  CohortFinetune finetune;
  int lora_rank;
  double lora_alpha;    /* the adapter's output is scaled by lora_alpha / lora_rank */
  gboolean lora_rslora; /* PEFT's use_rslora: scaled by lora_alpha / sqrt(lora_rank) instead */
  double lora_dropout;
  char *lora_targets;     /* name patterns of the layers to adapt; "" = the family's default */
  char *trainable;        /* name patterns of base parameters that learn in lora and frozen modes */
  char *adapter_from;     /* "" or a PEFT adapter folder to start the adapter from */
  gboolean merge_adapter; /* the export also writes the model with the adapter folded in */
  CohortFrozenDtype frozen_dtype; /* bf16: the frozen matrices stored rounded to bfloat16 */

  /* output */
  char *workspace_dir;
  int save_every; /* 0 = only at the end */
  int keep_last;  /* 0 = keep all */
  int eval_every; /* 0 = only at the end */
  int eval_steps;
  int sample_every; /* 0 = off */
  char *sample_prompt;
  char *sample_prompts; /* dit with text_encoder: prompts separated by "|", a grid row each */
  int sample_count;     /* dit with text_encoder: images of sample_prompt */
  int sample_tokens;
  double sample_temperature; /* gpt, llama: 0 = greedy */
  int sample_top_k;          /* gpt, llama: 0 = every token */
  double sample_top_p;       /* gpt, llama: nucleus; 1 = off */
  gboolean sample_chat;      /* gpt, llama: sample_prompt through the chat template */
  int sample_steps;          /* dit: Euler steps of a sample */
  double cfg_scale;          /* dit: classifier-free guidance of samples; 1 = none */
  char *init_from;           /* "" = random init; else a .safetensors with GPT-2 names */
  double max_shard_size_mb;  /* llama: export shards above this size (Hugging Face's) */

  /* distributed (docs/config.md, "Distributed", describes each key) */
  gboolean enable_multi_gpu;
  CohortDistBackend distributed_backend;
  int world_size;         /* 0 = auto */
  GArray *device_indexes; /* of int; empty = LOCAL_RANK */
  gboolean use_torchrun;
  gboolean distributed_data_loading;
  char *master_addr;
  int master_port;
  int num_nodes;
  int node_rank;
  char *node_hosts;   /* "" or "host0,host1,…": mpirun's hostfile */
  int nproc_per_node; /* 0 = auto */
  CohortLrScaling lr_scaling;
  /* "" = batch_size on every rank; "auto"; or one share per rank, "12,4" (engine/config/
   * rank-batches.h) */
  char *rank_batch_sizes;
  int rebalance_every; /* auto: optimizer steps between revisions of the split; 0 = never */
  double bucket_cap_mb;
  CohortReducePrecision reduce_precision; /* number format of the gradient all-reduce */
  gboolean broadcast_buffers;             /* rank 0's buffers to all before each forward */
  gboolean sync_batchnorm;
  int zero_stage; /* ZeRO: 0 nothing sharded; 1 optimizer state; 2 also gradients; 3 also parameters
                   */
  int max_restarts;
  double timeout_s;     /* rendezvous; a collective without progress of the ranks it waits for */
  double hang_report_s; /* a collective waiting this long is reported (0 = never) */
} CohortConfig;

/* How a key's value is typed; the GUI picks a control from it. */
typedef enum {
  COHORT_KEY_INT,
  COHORT_KEY_INT64,
  COHORT_KEY_DOUBLE,
  COHORT_KEY_BOOL,
  COHORT_KEY_STRING,
  COHORT_KEY_CHOICE,   /* a string out of `choices` */
  COHORT_KEY_INT_LIST, /* JSON array of ints; "0,1,2" on the command line */
} CohortKeyType;

/* What a key that names a file or folder names (CohortConfigKey.path). Every such key also
 * takes "builtin:REL", a file or folder under Cohort's data folder (cohort_resolve_path:
 * builtin:vae/tiny, builtin:sample/train.txt), and "" when its least length is 0. The window
 * derives its file choosers and its checks before Start from these. */
typedef enum {
  COHORT_PATH_FILE,   /* a file that must exist */
  COHORT_PATH_FOLDER, /* a folder that must exist */
  COHORT_PATH_DATA,   /* data as data_format reads it: a file, a folder or a glob pattern */
  COHORT_PATH_OUTPUT, /* a folder the run writes into, made when missing */
} CohortPathKind;

typedef struct {
  CohortPathKind kind;
  gboolean or_other; /* a FILE key takes a folder too, a FOLDER key a file */
  /* What a folder must hold for the engine to read it: alternatives separated by "|", each
   * one file name or several joined by "+" ("tokenizer.json|vocab.json+merges.txt"); NULL
   * when the key says nothing of it. */
  const char *holds;
  const char *word; /* a value that names no file ("bytes"), or NULL */
} CohortKeyPath;

/* One row of the key table. */
typedef struct {
  const char *name;
  CohortKeyType type;
  const char *page; /* the window page and docs/config.md section it is on: "model", "data",
                     * "training", "distributed", "output" */
  const char *const *choices; /* NULL-terminated, for COHORT_KEY_CHOICE */
  double min, max;            /* inclusive bounds for numbers */
  const char *allowed;        /* human text, e.g. "an integer from 1 to 1024" */
  const char *help;           /* one sentence for tooltips and docs */
  const char *models;         /* the families that read it ("dit", "gpt,dit"); NULL = all */
  /* A key that means something only under some values of another key (momentum: optimizer
   * sgd): that key and the values' text forms, separated by commas ("lora,frozen"); NULL =
   * always. */
  const char *when_key;
  const char *when_value;
  const CohortKeyPath *path; /* a file or folder key: what it names; NULL for other keys */
} CohortConfigKey;

#define COHORT_CONFIG_ERROR (cohort_config_error_quark())
GQuark cohort_config_error_quark(void);

typedef enum {
  COHORT_CONFIG_ERROR_IO,          /* file could not be read or written */
  COHORT_CONFIG_ERROR_PARSE,       /* not JSON, or not one object */
  COHORT_CONFIG_ERROR_UNKNOWN_KEY, /* message suggests the closest known key */
  COHORT_CONFIG_ERROR_INVALID,     /* wrong type, out of range, not an allowed choice */
  COHORT_CONFIG_ERROR_VERSION,     /* newer than this build, or not a number */
  COHORT_CONFIG_ERROR_UNSUPPORTED, /* valid, but this build cannot run it (e.g. device cuda) */
} CohortConfigError;

/* A config with every key at its default (the tiny-gpt shape). */
CohortConfig *cohort_config_new(void);
void cohort_config_free(CohortConfig *cfg);
CohortConfig *cohort_config_copy(const CohortConfig *cfg);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortConfig, cohort_config_free)

/* TRUE when key `key` means something for model family `model`. */
gboolean cohort_config_key_applies(const CohortConfigKey *key, const char *model);

/* TRUE when key `key` means something in `cfg`: its family reads it and the key it depends on
 * (when_key) has the value it needs. The window shows only those. */
gboolean cohort_config_key_in_effect(const CohortConfigKey *key, const CohortConfig *cfg);

/* The key table, in the order keys are written to JSON. */
const CohortConfigKey *cohort_config_keys(guint *n_keys);
const CohortConfigKey *cohort_config_find_key(const char *name);

/* Parses JSON text. `source` names the origin in error messages (a file path). Keys that are
 * absent keep their defaults. Every key is validated, then cross-key rules
 * (cohort_config_validate). */
CohortConfig *cohort_config_load_data(const char *json, gssize length, const char *source,
                                      GError **error);
CohortConfig *cohort_config_load_file(const char *path, GError **error);

/* Writes the config as pretty JSON with "version" first. Atomic: a temporary file in the same
 * folder, synced and renamed, so a failure never leaves a half-written file. */
gboolean cohort_config_save_file(const CohortConfig *cfg, const char *path, GError **error);
char *cohort_config_to_json(const CohortConfig *cfg, gboolean pretty);

/* Sets one key from its text form, as `--set key=value` gives it (numbers, true/false,
 * choices, "0,1,2" for lists). Validates that key; on error the config is unchanged.
 * `source` names the origin in messages (e.g. "--set"). */
gboolean cohort_config_set(CohortConfig *cfg, const char *key, const char *value,
                           const char *source, GError **error);
/* Applies "key=value". */
gboolean cohort_config_set_assignment(CohortConfig *cfg, const char *assignment, const char *source,
                                      GError **error);
/* Applies several "key=value" assignments as one edit: each key is checked as it is set,
 * the rules across keys once at the end, so their order does not matter
 * (`--set n_head=12 --set n_embd=768`). On error the config is unchanged. */
gboolean cohort_config_apply_assignments(CohortConfig *cfg, const char *const *assignments,
                                         const char *source, GError **error);
/* The text form of one key's value (what cohort_config_set accepts); NULL for an unknown
 * key. */
char *cohort_config_get(const CohortConfig *cfg, const char *key);

/* Rules across keys (n_embd divisible by n_head, num_nodes vs node_rank, …). Loading and
 * cohort_config_set call it; a config that passes can be saved and edited. */
gboolean cohort_config_validate(const CohortConfig *cfg, const char *source, GError **error);

/* The per-channel normalisation of images, (pixel / 255 - mean[c]) / std[c], from image_mean
 * and image_std for image_channels channels (a single value stands for every channel), after
 * checking them and image_resize (0, or image_size or more). cohort_config_validate calls it;
 * errors name the key and the value. */
gboolean cohort_config_image_normalisation(const CohortConfig *cfg, const char *source,
                                           float mean[3], float std[3], GError **error);

/* What this build can run (COHORT_CONFIG_ERROR_UNSUPPORTED): device "cuda" needs a build with
 * the CUDA path. The trainer calls it before starting, so a preset for a GPU still loads and
 * edits everywhere. */
gboolean cohort_config_check_supported(const CohortConfig *cfg, const char *source, GError **error);

/* A stable hex digest of the resolved config, ranks compare it at start. */
char *cohort_config_hash(const CohortConfig *cfg);
/* Names of the keys whose values differ, NULL-terminated (empty when equal). */
GStrv cohort_config_diff(const CohortConfig *a, const CohortConfig *b);

/* The closest known key to `name` (edit distance), or NULL when nothing is close. */
const char *cohort_config_suggest_key(const char *name);

/* Cohort's data folder (presets, sample data): $COHORT_DATA_DIR, else the installed
 * datadir, else the source tree's data/ (running from a build dir). */
const char *cohort_data_dir(void);
/* Resolves "builtin:REL" to a path under cohort_data_dir(); other paths are returned as
 * they are. */
char *cohort_resolve_path(const char *path);
/* The tokenizer files a folder holds: "tokenizer.json", "vocab.json + merges.txt", or NULL.
 * The names are those data/tokenizer.h's cohort_tokenizer_in_folder looks for (the window
 * links no data library, so the config layer has its own copy of the rule). */
const char *cohort_folder_tokenizer(const char *dir);
/* TRUE when cfg's family reads text through a tokenizer: one of the families the key table
 * tags the `tokenizer` key with. */
gboolean cohort_config_takes_tokenizer(const CohortConfig *cfg);
/* The tokenizer a config whose family takes one uses, resolved: its `tokenizer` path, or with
 * "bytes" the init_from folder when that holds tokenizer files; NULL for byte-level text and
 * for other families. */
char *cohort_config_tokenizer_path(const CohortConfig *cfg);

G_END_DECLS

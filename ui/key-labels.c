#include "ui/key-labels.h"

#include <glib/gi18n.h>

#include "engine/config/model-families.h"

/* Whether this build and machine train on GPUs (cohort_key_labels_set_gpus). */
static gboolean have_gpus = TRUE;

static const struct {
  const char *key;
  const char *label;
} labels[] = {
    {"model", N_("Model type")},
    {"n_layer", N_("Layers")},
    {"n_head", N_("Attention heads")},
    {"n_embd", N_("Embedding width")},
    {"seq_len", N_("Context length")},
    {"vocab_size", N_("Vocabulary size")},
    {"patch_size", N_("Patch size")},
    {"resnet_width", N_("Channels of the first stage")},
    {"resnet_variant", N_("ResNet variant")},
    {"zero_init_residual", N_("Residual blocks start as the identity")},
    {"architecture", N_("Architecture (Hugging Face class)")},
    {"num_key_value_heads", N_("Key/value heads")},
    {"head_dim", N_("Head width")},
    {"intermediate_size", N_("MLP width")},
    {"rms_norm_eps", N_("RMSNorm epsilon")},
    {"rope_theta", N_("Rotary base (θ)")},
    {"rope_scaling", N_("Rotary scaling")},
    {"rope_scaling_factor", N_("Rotary scaling factor")},
    {"rope_low_freq_factor", N_("Low-frequency factor (llama3)")},
    {"rope_high_freq_factor", N_("High-frequency factor (llama3)")},
    {"rope_original_max_position_embeddings", N_("Original context length (llama3)")},
    {"attention_bias", N_("Attention biases")},
    {"tie_word_embeddings", N_("Output head tied to the embedding")},
    {"train_data", N_("Training data")},
    {"val_data", N_("Validation data")},
    {"data_format", N_("Data format")},
    {"tokenizer", N_("Tokenizer")},
    {"shuffle", N_("Shuffle")},
    {"seed", N_("Random seed")},
    {"drop_last", N_("Drop incomplete last batch")},
    {"image_size", N_("Image size")},
    {"image_resize", N_("Resize before the centre crop")},
    {"image_channels", N_("Colour channels")},
    {"image_mean", N_("Normalisation mean")},
    {"image_std", N_("Normalisation standard deviation")},
    {"num_classes", N_("Classes")},
    {"skip_bad_images", N_("Skip unreadable images")},
    {"augment", N_("Augmentation")},
    {"vae_from", N_("VAE for latent training")},
    {"text_encoder", N_("Text encoder (captions)")},
    {"text_encoder_layer", N_("Text encoder layer")},
    {"max_text_tokens", N_("Longest caption in tokens")},
    {"num_workers", N_("Loader threads")},
    {"pin_memory", N_("Page-locked batches (GPU)")},
    {"batch_size", N_("Batch size per process")},
    {"gradient_accumulation_steps", N_("Gradient accumulation steps")},
    {"optimizer", N_("Optimizer")},
    {"learning_rate", N_("Learning rate")},
    {"lr_schedule", N_("Learning rate schedule")},
    {"warmup_steps", N_("Warm-up steps")},
    {"min_lr_ratio", N_("Final learning rate ratio")},
    {"lr_step_size", N_("Steps between learning rate decays")},
    {"lr_gamma", N_("Learning rate decay factor")},
    {"weight_decay", N_("Weight decay")},
    {"momentum", N_("SGD momentum")},
    {"nesterov", N_("Nesterov momentum")},
    {"beta1", N_("Adam β₁")},
    {"beta2", N_("Adam β₂")},
    {"eps", N_("Adam ε")},
    {"grad_clip", N_("Gradient clipping")},
    {"max_steps", N_("Maximum steps")},
    {"epochs", N_("Epochs")},
    {"ema_decay", N_("EMA decay")},
    {"precision", N_("Precision")},
    {"allow_tf32", N_("Allow TF32 matrix products")},
    {"loss_scale_init", N_("Initial loss scale (fp16)")},
    {"loss_scale_growth_interval", N_("Loss scale growth interval (fp16)")},
    {"timestep_sampling", N_("Timestep sampling")},
    {"timestep_shift", N_("Timestep shift")},
    {"cfg_dropout", N_("Label dropout for guidance")},
    {"bn_momentum", N_("BatchNorm momentum")},
    {"freeze_bn_stats", N_("Freeze BatchNorm statistics")},
    {"device", N_("Device")},
    {"threads", N_("CPU threads")},
    {"activation_checkpointing", N_("Recompute activations in backward")},
    {"teacher_from", N_("Teacher folder")},
    {"distill_alpha", N_("Teacher's share of the loss (α)")},
    {"distill_temperature", N_("Temperature (τ)")},
    {"distill_cfg_scale", N_("Teacher guidance scale")},
    {"student_init", N_("Student initialisation")},
    {"finetune", N_("Fine-tuning mode")},
    {"lora_rank", N_("LoRA rank (r)")},
    {"lora_alpha", N_("LoRA alpha (α)")},
    {"lora_rslora", N_("Rank-stabilised LoRA (α/√r)")},
    {"lora_dropout", N_("LoRA dropout")},
    {"lora_targets", N_("Layers with adapters")},
    {"trainable", N_("Parameters that still learn")},
    {"adapter_from", N_("Start from adapter")},
    {"merge_adapter", N_("Also export the merged model")},
    {"frozen_dtype", N_("Frozen base stored as")},
    {"workspace_dir", N_("Workspace folder")},
    {"save_every", N_("Save a checkpoint every")},
    {"keep_last", N_("Checkpoints to keep")},
    {"eval_every", N_("Evaluate every")},
    {"eval_steps", N_("Evaluation batches")},
    {"sample_every", N_("Generate a sample every")},
    {"sample_prompt", N_("Sample prompt")},
    {"sample_prompts", N_("Sample prompts (images)")},
    {"sample_count", N_("Images per sample")},
    {"sample_tokens", N_("Sample length")},
    {"sample_temperature", N_("Sampling temperature")},
    {"sample_top_k", N_("Top-k tokens")},
    {"sample_top_p", N_("Top-p (nucleus)")},
    {"sample_chat", N_("Prompt as a chat message")},
    {"sample_steps", N_("Sampling steps")},
    {"cfg_scale", N_("Guidance scale")},
    {"init_from", N_("Initial weights")},
    {"max_shard_size_mb", N_("Export shard size (MB)")},
    {"enable_multi_gpu", N_("Train on several GPUs")},
    {"distributed_backend", N_("Communication backend")},
    {"world_size", N_("World size")},
    {"device_indexes", N_("GPU indexes")},
    {"use_torchrun", N_("Launch with cohort-run (torchrun style)")},
    {"distributed_data_loading", N_("Each rank reads only its shard")},
    {"master_addr", N_("Master address")},
    {"master_port", N_("Master port")},
    {"num_nodes", N_("Number of nodes")},
    {"node_rank", N_("This node's rank")},
    {"node_hosts", N_("Node host names")},
    {"nproc_per_node", N_("Processes per node")},
    {"lr_scaling", N_("Learning rate scaling")},
    {"rank_batch_sizes", N_("Examples per process")},
    {"rebalance_every", N_("Re-balance every (steps)")},
    {"bucket_cap_mb", N_("Gradient bucket size (MB)")},
    {"reduce_precision", N_("Gradient reduction precision")},
    {"cpu_matmul", N_("CPU matrix-product library")},
    {"broadcast_buffers", N_("Broadcast rank 0's buffers")},
    {"sync_batchnorm", N_("Synchronise BatchNorm")},
    {"zero_stage", N_("Shard across processes (ZeRO stage)")},
    {"max_restarts", N_("Maximum restarts")},
    {"timeout_s", N_("Timeout (seconds)")},
    {"hang_report_s", N_("Report a waiting collective after (seconds)")},
};

static const char *const arch_keys[] = {"model",
                                        "architecture",
                                        "n_layer",
                                        "n_head",
                                        "num_key_value_heads",
                                        "head_dim",
                                        "n_embd",
                                        "intermediate_size",
                                        "seq_len",
                                        "vocab_size",
                                        "tie_word_embeddings",
                                        "attention_bias",
                                        "rms_norm_eps",
                                        "rope_theta",
                                        "rope_scaling",
                                        "rope_scaling_factor",
                                        "rope_low_freq_factor",
                                        "rope_high_freq_factor",
                                        "rope_original_max_position_embeddings",
                                        "patch_size",
                                        "resnet_width",
                                        "resnet_variant",
                                        "zero_init_residual",
                                        NULL};
static const char *const image_keys[] = {"image_size",
                                         "image_resize",
                                         "image_channels",
                                         "image_mean",
                                         "image_std",
                                         "num_classes",
                                         "augment",
                                         "skip_bad_images",
                                         "vae_from",
                                         "text_encoder",
                                         "text_encoder_layer",
                                         "max_text_tokens",
                                         NULL};
static const char *const flow_keys[] = {"timestep_sampling", "timestep_shift", "cfg_dropout", NULL};
static const char *const files_keys[] = {"train_data", "val_data", "data_format", "tokenizer",
                                         NULL};
static const char *const order_keys[] = {"shuffle", "seed", "drop_last", NULL};
static const char *const loading_keys[] = {"num_workers", "pin_memory", NULL};
static const char *const batch_keys[] = {"batch_size", "gradient_accumulation_steps", "max_steps",
                                         "epochs", NULL};
static const char *const optim_keys[] = {"optimizer", "learning_rate", "weight_decay",
                                         "momentum",  "nesterov",      "beta1",
                                         "beta2",     "eps",           NULL};
static const char *const sched_keys[] = {"lr_schedule",  "warmup_steps", "min_lr_ratio",
                                         "lr_step_size", "lr_gamma",     NULL};
static const char *const norm_keys[] = {"bn_momentum", NULL};
static const char *const stab_keys[] = {"grad_clip", "ema_decay", NULL};
static const char *const prec_keys[] = {
    "precision", "allow_tf32", "loss_scale_init", "loss_scale_growth_interval",
    "device",    "threads",    "cpu_matmul",      "activation_checkpointing",
    NULL};
static const char *const gpus_keys[] = {"enable_multi_gpu", "distributed_backend", "world_size",
                                        "nproc_per_node",   "device_indexes",      NULL};
static const char *const launch_keys[] = {"use_torchrun", "max_restarts", "timeout_s",
                                          "hang_report_s", NULL};
static const char *const grad_keys[] = {
    "lr_scaling",
    "rank_batch_sizes",
    "rebalance_every",
    "bucket_cap_mb",
    "reduce_precision",
    "broadcast_buffers",
    "sync_batchnorm",
    "zero_stage",
    "distributed_data_loading",
    NULL,
};
static const char *const distill_keys[] = {"teacher_from",        "distill_alpha",
                                           "distill_temperature", "distill_cfg_scale",
                                           "student_init",        NULL};
static const char *const finetune_keys[] = {
    "finetune",  "lora_rank",    "lora_alpha",    "lora_dropout", "lora_targets",
    "trainable", "adapter_from", "merge_adapter", "frozen_dtype", NULL};
static const char *const ws_keys[] = {"workspace_dir", "init_from",         "save_every",
                                      "keep_last",     "max_shard_size_mb", NULL};
static const char *const eval_keys[] = {"eval_every", "eval_steps", NULL};
static const char *const sample_keys[] = {"sample_every", "sample_prompt", "sample_prompts",
                                          "sample_count", "sample_tokens", "sample_temperature",
                                          "sample_top_k", "sample_top_p",  "sample_chat",
                                          "sample_steps", "cfg_scale",     NULL};

static const CohortKeySection sections[] = {
    {"model", N_("Architecture"), arch_keys},
    {"data", N_("Files"), files_keys},
    {"data", N_("Order"), order_keys},
    {"data", N_("Images"), image_keys},
    {"data", N_("Loading"), loading_keys},
    {"training", N_("Batch and length"), batch_keys},
    {"training", N_("Optimizer"), optim_keys},
    {"training", N_("Schedule"), sched_keys},
    {"training", N_("Flow matching"), flow_keys},
    {"training", N_("BatchNorm"), norm_keys},
    {"training", N_("Clipping and EMA"), stab_keys},
    {"training", N_("Precision and device"), prec_keys},
    {"training", N_("Distillation"), distill_keys},
    {"training", N_("Fine-tuning"), finetune_keys},
    {"distributed", N_("GPUs"), gpus_keys},
    {"distributed", N_("Launcher"), launch_keys},
    {"distributed", N_("Gradients and data"), grad_keys},
    {"output", N_("Workspace and checkpoints"), ws_keys},
    {"output", N_("Evaluation"), eval_keys},
    {"output", N_("Samples"), sample_keys},
};

static const char *const pages[] = {"model", "data", "training", "distributed", "output", NULL};

static const char *const multinode_keys[] = {"num_nodes",   "node_rank",  "master_addr",
                                             "master_port", "node_hosts", NULL};

static const struct {
  const char *value;
  const char *label;
} choice_labels[] = {
    {"text", N_("text (.txt, .jsonl)")},
    {"tokens", N_("tokens (llm.c .bin)")},
    {"constant", N_("constant")},
    {"cosine", N_("cosine")},
    {"linear", N_("linear")},
    {"auto", N_("automatic")},
    {"none", N_("none")},
    {"sqrt", N_("square root")},
    {"images", N_("images (class folders of PNG/JPEG)")},
    {"chat", N_("chat (.jsonl conversations)")},
    {"adamw", N_("AdamW")},
    {"sgd", N_("SGD with momentum")},
    {"crop", N_("random crop")},
    {"crop_flip", N_("random crop and flip")},
    {"resized_crop_flip", N_("random resized crop and flip (ImageNet)")},
    {"cifar", N_("CIFAR (3×3 stem, three stages)")},
    {"resnet18", N_("ResNet-18 (torchvision)")},
    {"resnet34", N_("ResNet-34 (torchvision)")},
    {"resnet50", N_("ResNet-50 (torchvision)")},
    {"resnet101", N_("ResNet-101 (torchvision)")},
    {"flip", N_("random flip")},
    {"uniform", N_("uniform")},
    {"logit_normal", N_("logit-normal")},
    {"random", N_("random")},
    {"teacher_layers", N_("every k-th teacher block")},
    {"step", N_("step (StepLR)")},
    {"full", N_("full (every parameter learns)")},
    {"lora", N_("LoRA adapters (PEFT)")},
    {"frozen", N_("frozen (only the trainable ones learn)")},
};

/* Where there is no GPU to train on, what a label or section title (by its msgid) says
 * instead: enable_multi_gpu starts several CPU processes there. */
static const struct {
  const char *label;
  const char *no_gpu;
} no_gpu_words[] = {
    {"Train on several GPUs", N_("Train on several processes")},
    {"GPUs", N_("Processes")},
};

static const char *for_machine(const char *msgid)
{
  for (guint i = 0; !have_gpus && msgid != NULL && i < G_N_ELEMENTS(no_gpu_words); i++)
    if (g_str_equal(no_gpu_words[i].label, msgid))
      return no_gpu_words[i].no_gpu;
  return msgid;
}

void cohort_key_labels_set_gpus(gboolean gpus)
{
  have_gpus = gpus;
}

gboolean cohort_key_labels_get_gpus(void)
{
  return have_gpus;
}

const char *cohort_key_label_msgid(const char *key)
{
  for (guint i = 0; i < G_N_ELEMENTS(labels); i++)
    if (g_str_equal(labels[i].key, key))
      return for_machine(labels[i].label);
  return NULL;
}

const char *cohort_key_section_title(const CohortKeySection *section)
{
  return _(for_machine(section->title));
}

const char *cohort_key_label(const char *key)
{
  const char *label = cohort_key_label_msgid(key);
  return label != NULL ? _(label) : NULL;
}

const CohortKeySection *cohort_key_sections(guint *n_sections)
{
  *n_sections = G_N_ELEMENTS(sections);
  return sections;
}

const char *const *cohort_key_pages(void)
{
  return pages;
}

const char *cohort_key_page_title(const char *page)
{
  if (g_str_equal(page, "model"))
    return _("Model");
  if (g_str_equal(page, "data"))
    return _("Data");
  if (g_str_equal(page, "training"))
    return _("Training");
  if (g_str_equal(page, "distributed"))
    return _("Distributed");
  if (g_str_equal(page, "output"))
    return _("Output");
  return page;
}

const char *const *cohort_key_multinode_keys(void)
{
  return multinode_keys;
}

const char *cohort_key_choice_label(const char *value)
{
  /* The families' labels come with their declaration (engine/config/model-families.h). */
  const CohortFamily *family = cohort_family_find(value);
  if (family != NULL)
    return _(family->label);
  for (guint i = 0; i < G_N_ELEMENTS(choice_labels); i++)
    if (g_str_equal(choice_labels[i].value, value))
      return _(choice_labels[i].label);
  return value;
}

/* The key table: the one description of every TrainConfig key. Parsing, validation, --set,
 * cohort_config_get, JSON writing and docs/config.md all walk it, so a key is added here and
 * nowhere else. Rows follow the field order of CohortConfig, which is also the JSON order. */
#include "engine/config/config-keys.h"
#include "engine/config/model-families.h"

#include <stddef.h>
#include <string.h>

typedef struct {
  CohortConfigKey key;
  gsize offset;
  const char *def; /* text form */
} KeyRow;

#define FAMILY_NAME(name, label) #name,
static const char *const model_choices[] = {COHORT_MODEL_FAMILIES(FAMILY_NAME) NULL};
#undef FAMILY_NAME
static const char *const data_format_choices[] = {"text", "tokens", "images", "chat", NULL};
static const char *const augment_choices[] = {"none", "crop", "crop_flip", "resized_crop_flip",
                                              "flip", NULL};
static const char *const resnet_variant_choices[] = {"cifar",    "resnet18",  "resnet34",
                                                     "resnet50", "resnet101", NULL};
static const char *const timestep_choices[] = {"uniform", "logit_normal", NULL};
static const char *const lr_schedule_choices[] = {"constant", "cosine", "linear", "step", NULL};
static const char *const optimizer_choices[] = {"adamw", "sgd", NULL};
static const char *const precision_choices[] = {"fp32", "bf16", "fp16", NULL};
static const char *const reduce_precision_choices[] = {"fp32", "bf16", NULL};
static const char *const device_choices[] = {"auto", "cpu", "cuda", NULL};
static const char *const cpu_matmul_choices[] = {"auto", "openblas", "onednn", "measure", NULL};
static const char *const backend_choices[] = {"nccl", "gloo", NULL};
static const char *const lr_scaling_choices[] = {"none", "linear", "sqrt", NULL};
static const char *const student_init_choices[] = {"random", "teacher_layers", NULL};
static const char *const finetune_choices[] = {"full", "lora", "frozen", NULL};
static const char *const frozen_dtype_choices[] = {"fp32", "bf16", NULL};
/* engine/families/llama.h's CohortLlamaArch and CohortRopeType, in their order */
static const char *const architecture_choices[] = {"LlamaForCausalLM", "MistralForCausalLM",
                                                   "Qwen2ForCausalLM", "Qwen3ForCausalLM", NULL};
static const char *const rope_scaling_choices[] = {"none", "linear", "llama3", NULL};

#define OFF(field) offsetof(CohortConfig, field)
#define NO_MAX_INT ((double)G_MAXINT)
#define NO_MAX     G_MAXDOUBLE

/* A NULL `allowed` is filled in from type, bounds and choices (see fill_allowed), so the text
 * can never disagree with what is checked. For strings, `min` is the least length. The 8th
 * argument of every ROW macro is the help sentence (po/meson.build extracts it). */
#define ROW_ALL(n, t, g, c, lo, hi, a, h, d, m, wk, wv)                                            \
  {                                                                                                \
    {.name = #n,                                                                                   \
     .type = COHORT_KEY_##t,                                                                       \
     .page = g,                                                                                    \
     .choices = c,                                                                                 \
     .min = lo,                                                                                    \
     .max = hi,                                                                                    \
     .allowed = a,                                                                                 \
     .help = h,                                                                                    \
     .models = m,                                                                                  \
     .when_key = wk,                                                                               \
     .when_value = wv},                                                                            \
        OFF(n), d                                                                                  \
  }
/* A key only the families in `m` read ("gpt,dit"). */
#define ROWM(n, t, g, c, lo, hi, a, h, d, m) ROW_ALL(n, t, g, c, lo, hi, a, h, d, m, NULL, NULL)
/* A key only the families in `m` read, and only while key `wk` has one of the values `wv`. */
#define ROWM_WHEN(n, t, g, c, lo, hi, a, h, d, m, wk, wv)                                          \
  ROW_ALL(n, t, g, c, lo, hi, a, h, d, m, wk, wv)
/* A key every model family reads. */
#define ROW(n, t, g, c, lo, hi, a, h, d) ROWM(n, t, g, c, lo, hi, a, h, d, NULL)
/* A key that means something only while key `wk` has the value `wv` (its text form; several
 * separated by commas): SGD's momentum with optimizer sgd. The engine ignores it otherwise;
 * the window hides it. */
#define ROW_WHEN(n, t, g, c, lo, hi, a, h, d, wk, wv)                                              \
  ROW_ALL(n, t, g, c, lo, hi, a, h, d, NULL, wk, wv)
/* A key that names a file or folder: a string whose CohortKeyPath `p` says what it names (the
 * window's file chooser and its check before Start follow from it). `lo` is the least length;
 * the 6th argument is the help sentence (po/meson.build extracts it). */
#define ROW_PATH(n, g, p, lo, a, h, d, m, wk, wv)                                                  \
  {                                                                                                \
    {.name = #n,                                                                                   \
     .type = COHORT_KEY_STRING,                                                                    \
     .page = g,                                                                                    \
     .min = lo,                                                                                    \
     .allowed = a,                                                                                 \
     .help = h,                                                                                    \
     .models = m,                                                                                  \
     .when_key = wk,                                                                               \
     .when_value = wv,                                                                             \
     .path = p},                                                                                   \
        OFF(n), d                                                                                  \
  }

/* What the path keys name. The folders' contents are what the engine looks for first: the
 * tokenizer's files (cohort_folder_tokenizer), a diffusers VAE's config.json, here or in a
 * pipeline's vae/ (cohort_vae_find_folder), a teacher's Cohort or Hugging Face config, a PEFT
 * adapter's two files (lora-io.c). */
static const CohortKeyPath data_path = {COHORT_PATH_DATA, FALSE, NULL, NULL};
static const CohortKeyPath tokenizer_path = {COHORT_PATH_FOLDER, TRUE,
                                             "tokenizer.json|vocab.json+merges.txt", "bytes"};
static const CohortKeyPath vae_path = {COHORT_PATH_FOLDER, FALSE, "config.json|vae/config.json",
                                       NULL};
static const CohortKeyPath text_encoder_path = {COHORT_PATH_FOLDER, FALSE, "config.json",
                                                "builtin"};
static const CohortKeyPath teacher_path = {COHORT_PATH_FOLDER, FALSE,
                                           "cohort-config.json|config.json", NULL};
static const CohortKeyPath adapter_path = {COHORT_PATH_FOLDER, FALSE,
                                           "adapter_config.json+adapter_model.safetensors", NULL};
static const CohortKeyPath workspace_path = {COHORT_PATH_OUTPUT, FALSE, NULL, NULL};
static const CohortKeyPath weights_path = {COHORT_PATH_FILE, TRUE, NULL, NULL};

static const KeyRow rows[] = {
    /* model */
    ROW(model, STRING, "model", model_choices, 1, 0, NULL,
        "The model family to train: a GPT-2-style language model, a Llama-family language model "
        "(Llama, Mistral, Qwen2, Qwen3, SmolLM), a diffusion transformer on images, or a ResNet "
        "image classifier with BatchNorm.",
        "gpt"),
    ROW(n_layer, INT, "model", NULL, 1, 96, NULL,
        "Number of transformer blocks; for resnet the depth 6n+2 (8, 14, 20, 26 … 92) of n "
        "BasicBlocks per stage.",
        "4"),
    ROWM(n_head, INT, "model", NULL, 1, 128, NULL,
         "Number of attention heads; n_embd must be a multiple of it.", "4", "gpt,dit,llama"),
    ROWM(n_embd, INT, "model", NULL, 8, 12288, NULL, "Width of the embeddings and hidden states.",
         "256", "gpt,dit,llama"),
    ROWM(seq_len, INT, "model", NULL, 2, 65536, NULL,
         "Context length in tokens, also the length of each training window.", "128", "gpt,llama"),
    ROWM(vocab_size, INT, "model", NULL, 2, 1000000, NULL,
         "Number of distinct tokens; 256 for byte-level text.", "256", "gpt,llama"),
    ROWM(patch_size, INT, "model", NULL, 1, 64, NULL,
         "Side in pixels of the square patches an image is cut into, one token each; "
         "image_size must be a multiple of it.",
         "2", "dit"),
    ROWM(resnet_width, INT, "model", NULL, 1, 1024, NULL,
         "Channels of the first of the three stages; the second and third have twice and four "
         "times as many (16 is the paper's 16/32/64, 160 a ten-times-wide ResNet).",
         "16", "resnet"),
    ROWM(resnet_variant, CHOICE, "model", resnet_variant_choices, 0, 0, NULL,
         "The ResNet: cifar (a 3×3 stem and three stages, depth n_layer and width "
         "resnet_width) or torchvision's ImageNet ResNets (a 7×7 stride-2 stem, 3×3 max-pooling, "
         "four stages of 64 to 512 channels; BasicBlocks for 18 and 34, Bottlenecks for 50 and "
         "101), which ignore n_layer and resnet_width and take RGB images of 32 pixels or more.",
         "cifar", "resnet"),
    ROWM(zero_init_residual, BOOL, "model", NULL, 0, 0, NULL,
         "Start each block's last BatchNorm scale at 0, so every residual block begins as the "
         "identity (torchvision's zero_init_residual).",
         "false", "resnet"),
    ROWM(architecture, CHOICE, "model", architecture_choices, 0, 0, NULL,
         "Which of Hugging Face's decoders (config.json's architectures): Llama (attention_bias "
         "on all four projections), Mistral (no biases), Qwen2 (biases on q, k and v) or Qwen3 "
         "(an RMSNorm on each head's queries and keys).",
         "LlamaForCausalLM", "llama"),
    ROWM(num_key_value_heads, INT, "model", NULL, 0, 128, NULL,
         "Key/value heads of grouped-query attention, a divisor of n_head (1 is multi-query); 0 "
         "= n_head.",
         "0", "llama"),
    ROWM(head_dim, INT, "model", NULL, 0, 1024, NULL,
         "Width of each attention head, an even number (Qwen3 sets it above n_embd / n_head); 0 "
         "= n_embd / n_head.",
         "0", "llama"),
    ROWM(intermediate_size, INT, "model", NULL, 1, 262144, NULL,
         "Width of the SwiGLU MLP (gate_proj and up_proj).", "704", "llama"),
    ROWM(rms_norm_eps, DOUBLE, "model", NULL, COHORT_KEY_ABOVE_ZERO, COHORT_KEY_BELOW_ONE, NULL,
         "Epsilon of every RMSNorm.", "1e-05", "llama"),
    ROWM(rope_theta, DOUBLE, "model", NULL, 1, 1e12, NULL,
         "Base of the rotary embeddings' frequencies (above 1).", "10000.0", "llama"),
    ROWM(rope_scaling, CHOICE, "model", rope_scaling_choices, 0, 0, NULL,
         "How rotary frequencies are stretched for longer contexts (config.json's "
         "rope_scaling.rope_type): none, linear (all divided by the factor) or llama3 (low "
         "frequencies divided, high ones kept, a ramp between).",
         "none", "llama"),
    ROWM_WHEN(rope_scaling_factor, DOUBLE, "model", NULL, 1, 1e6, NULL,
              "rope_scaling's factor: how many times longer the context is.", "8.0", "llama",
              "rope_scaling", "linear,llama3"),
    ROWM_WHEN(rope_low_freq_factor, DOUBLE, "model", NULL, COHORT_KEY_ABOVE_ZERO, 1e6, NULL,
              "llama3 scaling: wavelengths above original_max_position_embeddings divided by "
              "this are stretched fully.",
              "1.0", "llama", "rope_scaling", "llama3"),
    ROWM_WHEN(rope_high_freq_factor, DOUBLE, "model", NULL, COHORT_KEY_ABOVE_ZERO, 1e6, NULL,
              "llama3 scaling: wavelengths below original_max_position_embeddings divided by "
              "this keep their frequency.",
              "4.0", "llama", "rope_scaling", "llama3"),
    ROWM_WHEN(rope_original_max_position_embeddings, INT, "model", NULL, 1, 1 << 24, NULL,
              "llama3 scaling: the context length the model was first trained at.", "8192", "llama",
              "rope_scaling", "llama3"),
    ROWM_WHEN(attention_bias, BOOL, "model", NULL, 0, 0, NULL,
              "Biases on the attention's q, k, v and o projections (config.json's "
              "attention_bias).",
              "false", "llama", "architecture", "LlamaForCausalLM,Qwen3ForCausalLM"),
    ROWM(tie_word_embeddings, BOOL, "model", NULL, 0, 0, NULL,
         "The output head is the token embedding (one matrix); false gives lm_head its own.",
         "true", "llama"),

    /* data */
    ROW_PATH(train_data, "data", &data_path, 1,
             "a non-empty path to a file or folder, or a pattern like data/fineweb_train_*.bin; "
             "\"builtin:REL\" names one under Cohort's data folder",
             "Training data: text (a file, a folder of .txt and .jsonl files, or a pattern), or "
             "llm.c .bin token shards (a file, a folder, or a pattern that picks them out of one).",
             "builtin:sample/train.txt", NULL, NULL, NULL),
    ROW_PATH(val_data, "data", &data_path, 0, "a path like train_data, or \"\" for no validation",
             "Validation data in the same format as train_data.", "builtin:sample/val.txt", NULL,
             NULL, NULL),
    ROW(data_format, CHOICE, "data", data_format_choices, 0, 0, NULL,
        "How to read the data: text (tokenized by the tokenizer), llm.c uint16 token shards, "
        "images, or chat: conversations in .jsonl files, rendered with the tokenizer's chat "
        "template, the loss on the assistant's tokens only.",
        "text"),
    ROW_PATH(
        tokenizer, "data", &tokenizer_path, 1,
        "bytes, or a path to a tokenizer.json, a vocab.json (merges.txt beside it) or a folder "
        "holding either",
        "How text becomes tokens: bytes (each byte a token, vocab_size 256), or a GPT-2 "
        "byte-level BPE tokenizer; with bytes, an init_from folder that holds a tokenizer "
        "supplies it. Text is tokenized once into the workspace cache.",
        "bytes", "gpt,llama", NULL, NULL),
    ROW(shuffle, BOOL, "data", NULL, 0, 0, NULL,
        "Visit training windows in a seeded random order that changes every epoch.", "true"),
    ROW(seed, INT64, "data", NULL, 0, COHORT_KEY_MAX_SEED, NULL,
        "Seed of the weight initialisation, the data order and sampling.", "1337"),
    ROW(drop_last, BOOL, "data", NULL, 0, 0, NULL,
        "Drop the tail of the data that does not divide evenly among processes, instead of "
        "padding by wrap-around.",
        "false"),
    ROWM(image_size, INT, "data", NULL, 4, 4096, NULL,
         "Images are resized on their shorter side and centre-cropped to this many pixels "
         "square.",
         "32", "dit,resnet"),
    ROWM(image_resize, INT, "data", NULL, 0, 4096, NULL,
         "Side the shorter edge is resized to before the centre crop to image_size (ImageNet's "
         "evaluation: 256 for 224); 0 = image_size. Training crops come from the same square.",
         "0", "resnet"),
    ROWM(image_channels, INT, "data", NULL, 1, 3, "1 (grey) or 3 (RGB)",
         "Colour channels the model sees: 1 for grey, 3 for RGB.", "1", "dit,resnet"),
    ROWM(image_mean, STRING, "data", NULL, 1, 0,
         "one number per channel, separated by commas, or one for all",
         "Mean subtracted from each channel of the pixels scaled to 0–1 (torchvision's "
         "Normalize; ImageNet: 0.485,0.456,0.406).",
         "0.5", "resnet"),
    ROWM(image_std, STRING, "data", NULL, 1, 0,
         "one number above 0 per channel, separated by commas, or one for all",
         "Standard deviation each channel is divided by after the mean (ImageNet: "
         "0.229,0.224,0.225); 0.5 and 0.5 scale pixels to [-1, 1].",
         "0.5", "resnet"),
    ROWM(num_classes, INT, "data", NULL, 0, 1000000, NULL,
         "Number of classes; 0 takes the number of class folders in train_data (0 folders: an "
         "unconditional model).",
         "0", "dit,resnet"),
    ROWM(skip_bad_images, BOOL, "data", NULL, 0, 0, NULL,
         "Leave out image files that cannot be read (and say how many) instead of stopping.",
         "false", "dit,resnet"),
    ROWM(augment, CHOICE, "data", augment_choices, 0, 0, NULL,
         "Training augmentation: none, a random crop after 4 pixels of padding, the crop and a "
         "random horizontal flip, torchvision's RandomResizedCrop (8–100 % of the area, "
         "aspect 3/4–4/3) and a random horizontal flip, or the flip alone (what latent training "
         "allows).",
         "none", "dit,resnet"),
    ROW_PATH(vae_from, "data", &vae_path, 0,
             "\"\" or a folder: a diffusers AutoencoderKL (config.json and "
             "diffusion_pytorch_model.safetensors) or a pipeline folder with one in vae/; "
             "\"builtin:REL\" names one under Cohort's data folder",
             "Train in the latent space of this VAE: every image is encoded once into a latent "
             "cache in the workspace, image_size is the size the VAE sees, and samples are decoded "
             "through it; \"\" trains on pixels.",
             "", "dit", NULL, NULL),
    ROW_PATH(text_encoder, "data", &text_encoder_path, 0,
             "\"\", \"builtin\" or a Hugging Face Llama, Mistral, Qwen2 or Qwen3 folder "
             "(config.json, its weights and tokenizer)",
             "Condition on captions instead of class labels: each image's caption (IMAGE.txt "
             "beside it, or metadata.jsonl) goes through this frozen text encoder, and the DiT "
             "takes PixArt-α's layout with cross-attention; \"builtin\" is a small encoder "
             "Cohort makes itself; \"\" trains on class labels.",
             "", "dit", NULL, NULL),
    ROWM(text_encoder_layer, INT, "data", NULL, -96, 96,
         "an integer from -96 to 96 but 0: k the output of block k, -1 the last block's, -2 "
         "the one before it",
         "Which hidden state of the text encoder the DiT reads, counted as Hugging Face's "
         "hidden_states: -2 (the last but one, as Z-Image and FLUX.2 read Qwen3) is the default.",
         "-2", "dit"),
    ROWM(max_text_tokens, INT, "data", NULL, 1, 4096, NULL,
         "Tokens of a caption the text encoder reads; longer captions are cut (PixArt-α reads "
         "120).",
         "120", "dit"),
    ROW(num_workers, INT, "data", NULL, 0, 64, NULL,
        "Threads that load the next micro-batches while the current one trains (a bounded "
        "queue of 2 per thread); 0 loads them on the training thread.",
        "1"),
    ROW(pin_memory, BOOL, "data", NULL, 0, 0, NULL,
        "On GPU ranks, load batches into page-locked host memory, so their copy to the GPU is "
        "faster; CPU ranks ignore it.",
        "true"),

    /* training */
    ROW(batch_size, INT, "training", NULL, 1, 65536, NULL,
        "Examples per micro-batch in each process (rank_batch_sizes can give each process its "
        "own share).",
        "16"),
    ROW(gradient_accumulation_steps, INT, "training", NULL, 1, 4096, NULL,
        "Micro-batches whose gradients are summed before each optimizer step.", "1"),
    ROW(optimizer, CHOICE, "training", optimizer_choices, 0, 0, NULL,
        "The update rule: AdamW, or SGD with momentum (as torch.optim.SGD).", "adamw"),
    ROW(learning_rate, DOUBLE, "training", NULL, COHORT_KEY_ABOVE_ZERO, 10, NULL,
        "Peak learning rate of the optimizer, before lr_scaling.", "0.002"),
    ROW(lr_schedule, CHOICE, "training", lr_schedule_choices, 0, 0, NULL,
        "How the learning rate falls after warmup: towards min_lr_ratio times the peak "
        "(constant, cosine, linear), or by lr_gamma every lr_step_size steps (step, PyTorch's "
        "StepLR).",
        "cosine"),
    ROW(warmup_steps, INT, "training", NULL, 0, NO_MAX_INT, NULL,
        "Optimizer steps of linear warmup from zero to the peak learning rate.", "20"),
    ROW(min_lr_ratio, DOUBLE, "training", NULL, 0, 1, NULL,
        "Final learning rate as a fraction of the peak.", "0.1"),
    ROW_WHEN(lr_step_size, INT, "training", NULL, 1, NO_MAX_INT, NULL,
             "step schedule: optimizer steps (counted after warmup) between two decays of the "
             "learning rate.",
             "1000", "lr_schedule", "step"),
    ROW_WHEN(lr_gamma, DOUBLE, "training", NULL, COHORT_KEY_ABOVE_ZERO, 1, NULL,
             "step schedule: the factor the learning rate is multiplied by at each decay.", "0.1",
             "lr_schedule", "step"),
    ROW(weight_decay, DOUBLE, "training", NULL, 0, 1, NULL,
        "Weight decay on weight matrices and convolution kernels only (never on biases or "
        "normalisation parameters): decoupled for AdamW, added to the gradient for SGD.",
        "0.1"),
    ROW_WHEN(momentum, DOUBLE, "training", NULL, 0, COHORT_KEY_BELOW_ONE, NULL,
             "SGD momentum; 0 is plain SGD.", "0.9", "optimizer", "sgd"),
    ROW_WHEN(nesterov, BOOL, "training", NULL, 0, 0, NULL,
             "SGD with Nesterov momentum; with momentum 0 it is plain SGD.", "false", "optimizer",
             "sgd"),
    ROW(beta1, DOUBLE, "training", NULL, 0, COHORT_KEY_BELOW_ONE, NULL,
        "AdamW decay rate of the first moment.", "0.9"),
    ROW(beta2, DOUBLE, "training", NULL, 0, COHORT_KEY_BELOW_ONE, NULL,
        "AdamW decay rate of the second moment.", "0.95"),
    ROW(eps, DOUBLE, "training", NULL, COHORT_KEY_ABOVE_ZERO, 1, NULL,
        "AdamW term added to the denominator for numerical stability.", "1e-08"),
    ROW(grad_clip, DOUBLE, "training", NULL, 0, NO_MAX, NULL,
        "Clip gradients to this global L2 norm; 0 turns clipping off.", "1.0"),
    ROW(max_steps, INT, "training", NULL, 0, NO_MAX_INT, NULL,
        "Optimizer steps to train; 0 trains `epochs` whole epochs instead.", "200"),
    ROW(epochs, INT, "training", NULL, 1, NO_MAX_INT, NULL,
        "Passes over the training data when max_steps is 0.", "1"),
    ROW(ema_decay, DOUBLE, "training", NULL, 0, COHORT_KEY_BELOW_ONE, NULL,
        "Decay of an exponential moving average of the weights, used for eval and samples; 0 "
        "turns it off.",
        "0.0"),
    ROW(precision, CHOICE, "training", precision_choices, 0, 0, NULL,
        "Number format of the matrix products: fp32, or bf16/fp16 operands summed in fp32 "
        "(mixed precision); weights, optimizer moments and checkpoints stay fp32.",
        "fp32"),
    ROW(allow_tf32, BOOL, "training", NULL, 0, 0, NULL,
        "Let fp32 matrix products on a GPU use TF32 tensor cores: several times faster, about "
        "three significant digits per product; no effect on the CPU.",
        "false"),
    ROW(loss_scale_init, DOUBLE, "training", NULL, COHORT_KEY_ABOVE_ZERO, 4294967296.0, NULL,
        "fp16 only: the first dynamic loss scale; it halves when gradients overflow (the step "
        "is skipped) and doubles after loss_scale_growth_interval clean steps.",
        "65536.0"),
    ROW(loss_scale_growth_interval, INT, "training", NULL, 1, NO_MAX_INT, NULL,
        "fp16 only: clean steps in a row after which the loss scale doubles.", "2000"),
    ROWM(timestep_sampling, CHOICE, "training", timestep_choices, 0, 0, NULL,
         "How the flow-matching time t of each sample is drawn: uniform, or the sigmoid of a "
         "standard normal (logit-normal, as SD3).",
         "logit_normal", "dit"),
    ROWM(timestep_shift, DOUBLE, "training", NULL, COHORT_KEY_ABOVE_ZERO, 100, NULL,
         "Shift s of the timesteps, t becomes s·t/(1+(s−1)·t): above 1 trains more on noisy "
         "timesteps (larger images); 1 leaves t as drawn.",
         "1.0", "dit"),
    ROWM(cfg_dropout, DOUBLE, "training", NULL, 0, 1, NULL,
         "Probability that a training sample's label (its caption, with text_encoder) is "
         "replaced by \"no label\" (the empty caption), which classifier-free guidance needs.",
         "0.1", "dit"),
    ROWM(bn_momentum, DOUBLE, "training", NULL, 0, 1, NULL,
         "BatchNorm running statistics: each training batch moves them this fraction of the "
         "way to its own mean and unbiased variance (PyTorch's momentum).",
         "0.1", "resnet"),
    ROWM(freeze_bn_stats, BOOL, "training", NULL, 0, 0, NULL,
         "BatchNorm in eval mode while training (PyTorch's module.eval() on every BatchNorm, "
         "freeze_bn_stats in torch.ao): each layer normalises with its running statistics and "
         "no longer updates them; its weight and bias still learn where they are trainable.",
         "false", "resnet"),
    ROW(device, CHOICE, "training", device_choices, 0, 0, NULL,
        "Where to compute; auto picks a GPU when the build and machine have one.", "auto"),
    ROW(threads, INT, "training", NULL, 0, 1024, NULL,
        "CPU threads per process; 0 lets Cohort choose.", "0"),
    ROW(cpu_matmul, CHOICE, "training", cpu_matmul_choices, 0, 0, NULL,
        "Library of the CPU's fp32 matrix products: auto picks the one measured faster on this "
        "kind of CPU (oneDNN with AVX-512, OpenBLAS without); measure times both on each "
        "product shape the first time this CPU meets it and keeps the faster in a file (per "
        "shape, same result on every later run); the start log names it.",
        "auto"),
    ROW(activation_checkpointing, BOOL, "training", NULL, 0, 0, NULL,
        "Keep only each block's input from the forward and compute the block again in "
        "backward: activation memory falls to about one block's plus one input per block, for "
        "about a third more compute per step; the results are the same. GPU ranks run the same "
        "model code.",
        "false"),
    ROW_PATH(
        teacher_from, "training", &teacher_path, 0,
        "\"\" or a folder: a Cohort model folder (model.safetensors and cohort-config.json, as "
        "a run's export leaves them) or a Hugging Face GPT-2 or Llama-family folder "
        "(config.json and its weights)",
        "Teacher to distil from: a frozen model of the same family run on every batch; \"\" "
        "trains without one.",
        "", NULL, NULL, NULL),
    ROW(distill_alpha, DOUBLE, "training", NULL, 0, 1, NULL,
        "Weight of the teacher's term in the loss; the task's (labels, or the flow-matching "
        "target) gets 1 − alpha.",
        "0.5"),
    ROWM(distill_temperature, DOUBLE, "training", NULL, COHORT_KEY_ABOVE_ZERO, 100, NULL,
         "Softmax temperature of the teacher's and the student's distributions; the KL term "
         "is multiplied by its square.",
         "2.0", "gpt,resnet,llama"),
    ROWM(distill_cfg_scale, DOUBLE, "training", NULL, 0, 100, NULL,
         "Classifier-free guidance of the teacher's velocity that the student learns: 1 "
         "distils the conditional velocity, larger values distil guidance into one pass.",
         "1.0", "dit"),
    ROW(student_init, CHOICE, "training", student_init_choices, 0, 0, NULL,
        "How the student starts: the family's random initialisation (or init_from), or a copy "
        "of every k-th block of a teacher of the same width (gpt and dit only).",
        "random"),
    ROW(finetune, CHOICE, "training", finetune_choices, 0, 0, NULL,
        "What learns: every parameter (full), low-rank adapters on frozen weights (lora, as "
        "PEFT), or only the parameters `trainable` names (frozen).",
        "full"),
    ROW_WHEN(lora_rank, INT, "training", NULL, 1, 4096, NULL,
             "Rank r of each LoRA adapter: lora_A is r x in, lora_B is out x r.", "8", "finetune",
             "lora"),
    ROW_WHEN(
        lora_alpha, DOUBLE, "training", NULL, COHORT_KEY_ABOVE_ZERO, 100000, NULL,
        "LoRA's alpha: the adapter's output is scaled by lora_alpha / lora_rank, as PEFT does.",
        "16.0", "finetune", "lora"),
    ROW_WHEN(lora_rslora, BOOL, "training", NULL, 0, 0, NULL,
             "Rank-stabilised LoRA (PEFT's use_rslora): the adapter's output is scaled by "
             "lora_alpha / √lora_rank instead of lora_alpha / lora_rank.",
             "false", "finetune", "lora"),
    ROW_WHEN(lora_dropout, DOUBLE, "training", NULL, 0, COHORT_KEY_BELOW_ONE, NULL,
             "Dropout on the input of each adapter while training (PEFT's lora_dropout).", "0.0",
             "finetune", "lora"),
    ROW_WHEN(lora_targets, STRING, "training", NULL, 0, 0,
             "\"\" or layer names separated by commas, each the end of a layer's name (c_attn) "
             "or a pattern with * and ? (h.*.mlp.c_fc)",
             "The layers that get adapters, as PEFT's target_modules; \"\" takes the family's "
             "default (gpt: the attention and MLP projections c_attn, c_proj and c_fc; dit: "
             "attention, MLP and adaLN modulation, with text_encoder every block's attn1 and "
             "attn2 to_q, to_k, to_v, to_out.0 and ff; resnet: the classifier fc).",
             "", "finetune", "lora"),
    ROW_WHEN(trainable, STRING, "training", NULL, 0, 0,
             "\"\" or parameter names separated by commas, patterns with * and ? (ln_f.*, *.bias)",
             "Base parameters that still learn in lora and frozen modes, by name pattern (a "
             "ResNet's classifier fc.* for transfer learning, ln_f, *.bias).",
             "", "finetune", "lora,frozen"),
    ROW_PATH(adapter_from, "training", &adapter_path, 0,
             "\"\" or a PEFT adapter folder (adapter_config.json and adapter_model.safetensors)",
             "A PEFT adapter folder to start from (a run's adapter/), to train it further.", "",
             NULL, "finetune", "lora"),
    ROW_WHEN(merge_adapter, BOOL, "training", NULL, 0, 0, NULL,
             "The export also writes the model with the adapter folded into its weights, in "
             "merged/ beside the adapter folder adapter/.",
             "false", "finetune", "lora"),
    ROW_WHEN(frozen_dtype, CHOICE, "training", frozen_dtype_choices, 0, 0, NULL,
             "How the frozen base is stored: fp32, or bf16 (with precision bf16): every frozen "
             "matrix and embedding table rounded once to bfloat16 and widened one "
             "layer at a time while it is used, which halves their memory; norms and biases "
             "stay fp32.",
             "fp32", "finetune", "lora,frozen"),

    /* output */
    ROW_PATH(workspace_dir, "output", &workspace_path, 1, "a non-empty folder path",
             "Folder for checkpoints, samples and logs of this run.", "runs/tiny-gpt", NULL, NULL,
             NULL),
    ROW(save_every, INT, "output", NULL, 0, NO_MAX_INT, NULL,
        "Write a checkpoint every this many optimizer steps; 0 saves only at the end.", "100"),
    ROW(keep_last, INT, "output", NULL, 0, NO_MAX_INT, NULL,
        "Number of recent checkpoints to keep; 0 keeps all.", "2"),
    ROW(eval_every, INT, "output", NULL, 0, NO_MAX_INT, NULL,
        "Measure validation loss every this many optimizer steps; 0 only at the end.", "100"),
    /* Bounded: a billion validation batches would run for ever. */
    ROW(eval_steps, INT, "output", NULL, 1, 100000, NULL,
        "Batches averaged for each validation loss.", "20"),
    ROWM(sample_every, INT, "output", NULL, 0, NO_MAX_INT, NULL,
         "Generate a sample (text, or a grid of images) every this many optimizer steps; 0 turns "
         "samples off.",
         "100", "gpt,llama,dit"),
    ROWM(sample_prompt, STRING, "output", NULL, 0, 0, "any text",
         "Text the samples continue (gpt, llama), or the caption of the images samples show (dit "
         "with text_encoder, when sample_prompts is empty).",
         "This License", "gpt,llama,dit"),
    ROWM(sample_prompts, STRING, "output", NULL, 0, 0,
         "\"\" or captions separated by \"|\" (white A|red B)",
         "Captions of the periodic image samples of a text-conditioned DiT, one grid row of 8 "
         "images each; \"\" shows sample_count images of sample_prompt.",
         "", "dit"),
    ROWM(sample_count, INT, "output", NULL, 1, 1024, NULL,
         "Images of sample_prompt in a sample of a text-conditioned DiT when sample_prompts is "
         "empty (cohort-train --sample), 8 to a row.",
         "8", "dit"),
    ROWM(sample_tokens, INT, "output", NULL, 0, 100000, NULL,
         "Number of tokens generated per sample.", "120", "gpt,llama"),
    ROWM(sample_temperature, DOUBLE, "output", NULL, 0, 100, NULL,
         "Softmax temperature of text samples: lower is more likely text, higher more varied; 0 "
         "always takes the most likely token (greedy decoding).",
         "1.0", "gpt,llama"),
    ROWM(sample_top_k, INT, "output", NULL, 0, 1 << 24, NULL,
         "Text samples draw only from this many of the most likely tokens; 0 draws from all.", "40",
         "gpt,llama"),
    ROWM(sample_top_p, DOUBLE, "output", NULL, COHORT_KEY_ABOVE_ZERO, 1, NULL,
         "Nucleus sampling: text samples draw from the fewest most likely tokens whose "
         "probabilities add up to this; 1 turns it off.",
         "1.0", "gpt,llama"),
    ROWM(sample_chat, BOOL, "output", NULL, 0, 0, NULL,
         "Render sample_prompt with the tokenizer's chat template, as one user message followed "
         "by the assistant's turn, and end the sample where the model ends that turn.",
         "false", "gpt,llama"),
    ROWM(sample_steps, INT, "output", NULL, 1, 1000, NULL,
         "Euler steps from noise to image in each sample.", "32", "dit"),
    ROWM(cfg_scale, DOUBLE, "output", NULL, 0, 100, NULL,
         "Classifier-free guidance of samples: 1 samples the model as it is, larger values "
         "follow the label (or the prompt) more closely.",
         "4.0", "dit"),
    ROW_PATH(
        init_from, "output", &weights_path, 0,
        "\"\" or a path to a weights file: Hugging Face GPT-2 .safetensors or a Hugging Face "
        "GPT-2 folder (config.json, model.safetensors and the tokenizer's files) for gpt, a "
        "torchvision or timm ResNet state dict (.safetensors, or a torch.save .pth/.pt) for "
        "resnet, the DiT reference's names or diffusers' DiTTransformer2DModel (a .safetensors "
        "file or a diffusers folder) for dit, a Hugging Face Llama, Mistral, Qwen2 or Qwen3 "
        "folder (config.json, model.safetensors or shards with model.safetensors.index.json) for "
        "llama, a Cohort export (model.safetensors) for every model",
        "Weights to start from instead of a random initialisation.", "", NULL, NULL, NULL),
    ROWM(max_shard_size_mb, DOUBLE, "output", NULL, COHORT_KEY_ABOVE_ZERO, 1e9, NULL,
         "The export's model.safetensors is cut into shards of at most this many megabytes "
         "(10^6 bytes), with model.safetensors.index.json, as Hugging Face's max_shard_size.",
         "5000.0", "llama"),

    /* distributed */
    ROW(enable_multi_gpu, BOOL, "distributed", NULL, 0, 0, NULL,
        "Train data-parallel over several processes (one per GPU, or per CPU slot with gloo).",
        "false"),
    ROW(distributed_backend, CHOICE, "distributed", backend_choices, 0, 0, NULL,
        "Collective communication library: nccl for GPUs, gloo for CPUs.", "gloo"),
    ROW(world_size, INT, "distributed", NULL, 0, 65536, NULL,
        "Total number of processes; 0 takes it from the launcher or num_nodes x "
        "nproc_per_node.",
        "0"),
    ROW(device_indexes, INT_LIST, "distributed", NULL, 0, 1023,
        "at most 1024 distinct integers from 0 to 1023, like [0, 1] (\"0,1\" with --set); [] "
        "uses the local rank",
        "GPU index for each local process, in local-rank order.", ""),
    ROW(use_torchrun, BOOL, "distributed", NULL, 0, 0, NULL,
        "Start processes through the torchrun-style launcher (cohort-run) instead of spawning "
        "them from cohort-train.",
        "true"),
    ROW(distributed_data_loading, BOOL, "distributed", NULL, 0, 0, NULL,
        "Each process reads only its own share of the data instead of the whole data set.",
        "false"),
    ROW(master_addr, STRING, "distributed", NULL, 1, 0, "a non-empty host name or IP address",
        "Address of the rank-0 host, where the rendezvous store listens.", "127.0.0.1"),
    ROW(master_port, INT, "distributed", NULL, 1, 65535, NULL,
        "TCP port of the rendezvous store on master_addr.", "29500"),
    ROW(num_nodes, INT, "distributed", NULL, 1, NO_MAX_INT, NULL, "Number of machines in the job.",
        "1"),
    ROW(node_rank, INT, "distributed", NULL, 0, NO_MAX_INT, NULL,
        "Index of this machine, from 0 to num_nodes - 1.", "0"),
    ROW(node_hosts, STRING, "distributed", NULL, 0, 0,
        "\"\" or host names separated by commas, one per node, node 0 first",
        "The nodes' host names, for the hostfile of the printed mpirun command.", ""),
    ROW(nproc_per_node, INT, "distributed", NULL, 0, 1024, NULL,
        "Processes per machine; 0 lets Cohort choose from the devices it sees.", "0"),
    ROW(lr_scaling, CHOICE, "distributed", lr_scaling_choices, 0, 0, NULL,
        "How the learning rate grows with the number of processes: unchanged, times world "
        "size, or times its square root.",
        "none"),
    ROW(rank_batch_sizes, STRING, "distributed", NULL, 0, 0,
        "\"\" (batch_size on every process), \"auto\", or one integer from 1 to 65536 per "
        "process separated by commas, like \"12,4\"",
        "Examples each process takes from every micro-batch of the global batch: a list, one per "
        "process in rank order (their sum is the global micro-batch), or auto, which splits "
        "batch_size times the number of processes so that every process's step takes as long, "
        "from measured step times and each device's memory; empty gives every process "
        "batch_size. Any split trains exactly what one process would on the whole batch.",
        ""),
    ROW(rebalance_every, INT, "distributed", NULL, 0, 1000000, NULL,
        "With rank_batch_sizes auto: optimizer steps between revisions of the split from the "
        "measured step times (a revision changes no result, only which process computes which "
        "examples); 0 keeps the split chosen at the start.",
        "50"),
    ROW(bucket_cap_mb, DOUBLE, "distributed", NULL, 0, 10240, NULL,
        "Size in MiB of the gradient buckets that are all-reduced while backward runs; 0 sizes "
        "them from the model (about an eighth of the gradients each).",
        "0.0"),
    ROW(reduce_precision, CHOICE, "distributed", reduce_precision_choices, 0, 0, NULL,
        "Number format of the gradient all-reduce: bf16 halves the traffic and rounds each "
        "gradient to about three significant digits.",
        "fp32"),
    ROWM(broadcast_buffers, BOOL, "distributed", NULL, 0, 0, NULL,
         "Copy rank 0's buffers (BatchNorm running statistics) to every process before each "
         "step's forward, as PyTorch DDP's broadcast_buffers.",
         "true", "resnet"),
    ROWM(sync_batchnorm, BOOL, "distributed", NULL, 0, 0, NULL,
         "Compute BatchNorm statistics over the global batch of all processes instead of per "
         "process (SyncBatchNorm).",
         "false", "resnet"),
    ROW(zero_stage, INT, "distributed", NULL, 0, 3, "0 to 3",
        "What each process keeps 1/N of (ZeRO, as DeepSpeed and FSDP): 1 the optimizer state, "
        "2 also the gradients (reduce-scattered while backward runs), 3 also the parameters "
        "(each layer gathered when it runs), so a model bigger than one process's memory "
        "trains; 0 keeps a full copy of everything on every process. Every stage computes "
        "the same weights; see docs/launching.md, \"Choosing a ZeRO stage\".",
        "0"),
    ROW(max_restarts, INT, "distributed", NULL, 0, 1000, NULL,
        "Times the launcher restarts the whole group after a process fails.", "0"),
    ROW(timeout_s, DOUBLE, "distributed", NULL, COHORT_KEY_ABOVE_ZERO, 86400, NULL,
        "Seconds to wait for rendezvous, and for a collective while the processes it waits for "
        "show no progress, before failing.",
        "300.0"),
    ROW(hang_report_s, DOUBLE, "distributed", NULL, 0, 86400, NULL,
        "Seconds a collective may wait before rank 0 reports which processes have not arrived "
        "and what each is doing; the job keeps waiting. 0 turns the report off.",
        "60.0"),
};

static char *bound_text(double v)
{
  char buf[G_ASCII_DTOSTR_BUF_SIZE];
  return g_strdup(g_ascii_formatd(buf, sizeof buf, "%.15g", v));
}

static char *fill_allowed(const CohortConfigKey *k)
{
  switch (k->type) {
  case COHORT_KEY_INT:
  case COHORT_KEY_INT64: {
    gint64 lo = (gint64)k->min, hi = (gint64)k->max;
    if (k->max >= G_MAXINT && k->type == COHORT_KEY_INT)
      return g_strdup_printf("an integer >= %" G_GINT64_FORMAT, lo);
    return g_strdup_printf("an integer from %" G_GINT64_FORMAT " to %" G_GINT64_FORMAT, lo, hi);
  }
  case COHORT_KEY_DOUBLE: {
    g_autofree char *lo = bound_text(k->min);
    g_autofree char *hi = bound_text(k->max);
    g_autofree char *low =
        k->min == COHORT_KEY_ABOVE_ZERO ? g_strdup("> 0") : g_strdup_printf(">= %s", lo);
    if (k->max == G_MAXDOUBLE)
      return g_strdup_printf("a number %s", low);
    if (k->max == COHORT_KEY_BELOW_ONE)
      return g_strdup_printf("a number %s and < 1", low);
    return g_strdup_printf("a number %s and <= %s", low, hi);
  }
  case COHORT_KEY_BOOL:
    return g_strdup("true or false");
  case COHORT_KEY_CHOICE:
    return g_strjoinv(", ", (char **)k->choices);
  case COHORT_KEY_STRING:
    if (k->choices) /* a string limited to choices (model) */
      return g_strjoinv(", ", (char **)k->choices);
    G_GNUC_FALLTHROUGH;
  default:
    g_error("config key \"%s\" needs an allowed text", k->name);
  }
}

static CohortConfigKey *public_keys;

static CohortConfigKey *table(void)
{
  static gsize done;
  if (g_once_init_enter(&done)) {
    public_keys = g_new0(CohortConfigKey, G_N_ELEMENTS(rows));
    for (guint i = 0; i < G_N_ELEMENTS(rows); i++) {
      public_keys[i] = rows[i].key;
      if (!public_keys[i].allowed)
        public_keys[i].allowed = fill_allowed(&rows[i].key);
    }
    g_once_init_leave(&done, 1);
  }
  return public_keys;
}

const CohortConfigKey *cohort_config_keys(guint *n_keys)
{
  if (n_keys)
    *n_keys = G_N_ELEMENTS(rows);
  return table();
}

const CohortConfigKey *cohort_config_find_key(const char *name)
{
  const CohortConfigKey *keys = table();
  if (!name)
    return NULL;
  for (guint i = 0; i < G_N_ELEMENTS(rows); i++)
    if (strcmp(keys[i].name, name) == 0)
      return &keys[i];
  return NULL;
}

static const KeyRow *row_of(const CohortConfigKey *key)
{
  const CohortConfigKey *keys = table();
  g_return_val_if_fail(key >= keys && key < keys + G_N_ELEMENTS(rows), &rows[0]);
  return &rows[key - keys];
}

gsize cohort_config_key_offset(const CohortConfigKey *key)
{
  return row_of(key)->offset;
}

const char *cohort_config_key_default(const CohortConfigKey *key)
{
  return row_of(key)->def;
}

gboolean cohort_config_key_applies(const CohortConfigKey *key, const char *model)
{
  if (!key->models)
    return TRUE;
  g_auto(GStrv) names = g_strsplit(key->models, ",", -1);
  return model && g_strv_contains((const char *const *)names, model);
}

gboolean cohort_config_key_in_effect(const CohortConfigKey *key, const CohortConfig *cfg)
{
  if (!cohort_config_key_applies(key, cfg->model))
    return FALSE;
  if (!key->when_key)
    return TRUE;
  g_autofree char *value = cohort_config_get(cfg, key->when_key);
  g_auto(GStrv) values = g_strsplit(key->when_value, ",", -1);
  return value && g_strv_contains((const char *const *)values, value);
}

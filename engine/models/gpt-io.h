/* GPT-2 weights in and out as .safetensors with Hugging Face names and layouts, so real GPT-2
 * weights can be fine-tuned and exported weights read by Python tools. The same helpers
 * write and read the named groups of a checkpoint ("ema.", "optim.m.", …). */
#pragma once

#include <glib.h>
#include "engine/models/gpt.h"
#include "engine/model/safetensors.h"

G_BEGIN_DECLS

/* Loads a Hugging Face GPT-2 .safetensors into the model's parameters. Names are those of
 * the model's tensor table, optionally prefixed "transformer."; the buffers "h.N.attn.bias"
 * and "h.N.attn.masked_bias" are ignored, and so is "lm_head.weight" when it equals
 * "wte.weight" (the model's head is tied). Any other tensor the model does not have, a
 * missing tensor, a wrong shape (message: expected vs found), a vocab size that differs from
 * the model's or fewer positions than its seq_len, or a truncated file is an error naming the
 * file (more positions are fine: the first seq_len are read, as Hugging Face uses them); on
 * error
 * the parameters are left as they were. F16 and BF16 files convert to float32. */
gboolean cohort_gpt_load_hf(CohortGpt *gpt, const char *path, GError **error);

/* Exports `params` (laid out like the model's parameters, e.g. EMA weights; NULL = the
 * model's own) under the model's Hugging Face names as F32, atomically. `metadata` (string
 * to string, may be NULL) goes into "__metadata__", with "format": "pt" added unless
 * given. */
gboolean cohort_gpt_save_hf(const CohortGpt *gpt, const float *params_or_NULL, const char *path,
                            GHashTable *metadata, GError **error);

/* Entries for cohort_safetensors_write: one per model tensor, named `prefix` + its name,
 * pointing into `buffer` (laid out like the parameters). The names are kept alive by
 * `names` (an array with g_free as free function). g_free the result; *n_out gets the
 * count. */
CohortStEntry *cohort_gpt_st_entries(const CohortGpt *gpt, const float *buffer, const char *prefix,
                                     GPtrArray *names, guint *n_out);

/* Reads every model tensor, named `prefix` + its name, from `f` into `dst` (laid out like
 * the parameters), checking each shape. Errors name the file and the tensor. */
gboolean cohort_gpt_read_tensors(const CohortGpt *gpt, const CohortStFile *f, const char *prefix,
                                 float *dst, GError **error);

/* The family's export_extra: config.json beside model.safetensors in Hugging Face's GPT2Config
 * form (n_layer, n_head, n_embd, n_positions, vocab_size, activation_function "gelu_new",
 * layer_norm_epsilon 1e-5, tied embeddings), so GPT2LMHeadModel.from_pretrained(dir) loads
 * the folder. Written atomically. A run at a seq_len below its init_from's n_positions (which
 * used the first seq_len positions) exports the base's n_positions: dir's model.safetensors
 * and model-ema.safetensors are rewritten with wpe's rows from seq_len on taken from the base
 * as they were (when the base can still be read; else n_positions is seq_len). */
gboolean cohort_gpt_write_hf_config(const CohortModel *m, const CohortConfig *cfg, const char *dir,
                                    GError **error);

/* The rows of "wpe.weight" (or "transformer.wpe.weight") in the safetensors file `path`: its
 * n_positions; -1 when it cannot be read. */
int cohort_gpt_file_positions(const char *path);

/* Reads a Hugging Face GPT2Config (config.json) into the shape keys of `cfg` (model "gpt",
 * n_layer, n_head, n_embd, seq_len from n_positions, vocab_size). Configs this model cannot
 * reproduce are errors naming the file and the key: another model_type, an activation other
 * than the tanh GELU, an inner width other than 4 n_embd, untied embeddings. */
gboolean cohort_gpt_read_hf_config(const char *path, CohortConfig *cfg, GError **error);

G_END_DECLS

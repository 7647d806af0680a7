/* cohort-train's inputs and outputs under the one output rule (run-outputs.h). */
#include "engine/train/run-outputs.h"

#include <string.h>

#include "engine/base/error.h"

/* The files Cohort reads from a folder it is given: a model folder (Cohort's export or a
 * Hugging Face one), a checkpoint, a PEFT adapter, a diffusers VAE, a tokenizer. */
static const char *const model_files[] = {
    "model.safetensors",
    "model-ema.safetensors",
    "cohort-config.json",
    "config.json",
    "classes.json",
    "state.json",
    "adapter_config.json",
    "adapter_model.safetensors",
    "diffusion_pytorch_model.safetensors",
    "diffusion_pytorch_model.fp16.safetensors",
    "tokenizer.json",
    "vocab.json",
    "merges.txt",
    "tokenizer_config.json",
    "special_tokens_map.json",
};

/* The subfolders a folder of another tool holds its parts in. */
static const char *const model_subfolders[] = {"adapter", "vae", "transformer"};

static void add_folder(CohortOutputs *io, const char *dir)
{
  for (guint i = 0; i < G_N_ELEMENTS(model_files); i++) {
    g_autofree char *path = g_build_filename(dir, model_files[i], NULL);
    cohort_outputs_add_input(io, path);
  }
}

void cohort_outputs_add_model_input(CohortOutputs *io, const char *path)
{
  if (!path || !*path)
    return;
  g_autofree char *resolved = cohort_resolve_path(path);
  if (!g_file_test(resolved, G_FILE_TEST_IS_DIR)) {
    cohort_outputs_add_input(io, resolved);
    return;
  }
  add_folder(io, resolved);
  for (guint i = 0; i < G_N_ELEMENTS(model_subfolders); i++) {
    g_autofree char *sub = g_build_filename(resolved, model_subfolders[i], NULL);
    add_folder(io, sub);
  }
}

/* What the export writes into the workspace (trainer-output.c), or removes there as stale.
 * (The tokenizer's files are left out: the export writes them back with the bytes they were
 * read with, so a tokenizer inside the workspace is not harmed.) */
static const char *const export_files[] = {
    "model.safetensors",
    "model-ema.safetensors",
    "config.json",
    "cohort-config.json",
    "classes.json",
    "adapter/adapter_model.safetensors",
    "adapter/adapter_config.json",
    "merged/model.safetensors",
    "merged/config.json",
};

gboolean cohort_run_check_outputs(const CohortConfig *cfg, GError **error)
{
  const struct {
    const char *key, *value;
  } inputs[] = {
      {"init_from", cfg->init_from},
      {"teacher_from", cfg->teacher_from},
      {"adapter_from", cfg->adapter_from},
      {"vae_from", cfg->vae_from},
  };
  for (guint i = 0; i < G_N_ELEMENTS(inputs); i++) {
    if (!inputs[i].value || !*inputs[i].value)
      continue;
    g_autoptr(CohortOutputs) io = cohort_outputs_new();
    cohort_outputs_add_model_input(io, inputs[i].value);
    for (guint k = 0; k < G_N_ELEMENTS(export_files); k++) {
      g_autofree char *path = g_build_filename(cfg->workspace_dir, export_files[k], NULL);
      g_autoptr(GError) local = NULL;
      if (cohort_outputs_add(io, path, "the export", &local))
        continue;
      if (!g_error_matches(local, G_FILE_ERROR, G_FILE_ERROR_EXIST))
        return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                           "workspace_dir %s: %s", cfg->workspace_dir, local->message);
      return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                         "key \"%s\": \"%s\" is one of this run's inputs, and its export "
                         "would write %s over it (workspace_dir %s); allowed: another "
                         "workspace_dir, or a copy of the input outside the export's files",
                         inputs[i].key, inputs[i].value, path, cfg->workspace_dir);
    }
  }
  return TRUE;
}

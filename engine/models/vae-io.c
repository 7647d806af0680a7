/* A VAE's diffusers folder in and out: config.json and diffusion_pytorch_model.safetensors, read
 * strictly (every tensor the config implies, with its shape, and nothing else), written with
 * diffusers' current names; and the content hash the latent cache keys by. */
#include "engine/models/vae-private.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <glib/gstdio.h>

#include "engine/base/error.h"
#include "engine/base/fileio.h"
#include "engine/model/safetensors.h"

static const char *const weight_files[] = {"diffusion_pytorch_model.safetensors",
                                           "diffusion_pytorch_model.fp16.safetensors"};

char *cohort_vae_find_folder(const char *dir, GError **error)
{
  g_autofree char *cfg = g_build_filename(dir, "config.json", NULL);
  if (g_file_test(cfg, G_FILE_TEST_IS_REGULAR))
    return g_strdup(dir);
  g_autofree char *sub = g_build_filename(dir, "vae", NULL);
  g_autofree char *sub_cfg = g_build_filename(sub, "config.json", NULL);
  if (g_file_test(sub_cfg, G_FILE_TEST_IS_REGULAR))
    return g_steal_pointer(&sub);
  cohort_fail(error, COHORT_VAE_ERROR, 0,
              "%s: not a diffusers VAE folder: neither %s nor %s exists (a folder with "
              "AutoencoderKL's config.json and diffusion_pytorch_model.safetensors, or a "
              "pipeline folder with one in vae/)",
              dir, cfg, sub_cfg);
  return NULL;
}

/* The older diffusers names of the mid-block attention's tensors (before 0.14), which
 * checkpoints such as SD's VAE still carry; diffusers converts them when it loads. */
static const char *const old_names[][2] = {
    {".to_q.", ".query."},
    {".to_k.", ".key."},
    {".to_v.", ".value."},
    {".to_out.0.", ".proj_attn."},
};

/* The name `want` has in f: itself, or its older spelling. NULL when neither is there. */
static char *name_in_file(const CohortStFile *f, const char *want)
{
  if (cohort_safetensors_has(f, want))
    return g_strdup(want);
  for (guint i = 0; i < G_N_ELEMENTS(old_names); i++) {
    const char *at = strstr(want, old_names[i][0]);
    if (!at)
      continue;
    g_autofree char *head = g_strndup(want, (gsize)(at - want));
    char *old = g_strconcat(head, old_names[i][1], at + strlen(old_names[i][0]), NULL);
    if (cohort_safetensors_has(f, old))
      return old;
    g_free(old);
  }
  return NULL;
}

/* The first tensor of the VAE's table holding a NaN or an infinity in `host` (the weights,
 * laid out as the VAE's), or NULL. */
static const CohortTensorInfo *first_non_finite(const CohortVae *v, const float *host)
{
  for (guint i = 0; i < v->table->len; i++) {
    const CohortTensorInfo *t = vae_param(v, (int)i);
    for (size_t k = 0; k < t->numel; k++)
      if (!isfinite(host[t->offset + k]))
        return t;
  }
  return NULL;
}

static gboolean read_weights(CohortVae *v, const char *path, GError **error)
{
  g_autoptr(CohortStFile) f = cohort_safetensors_open(path, error);
  if (!f)
    return FALSE;
  g_autofree float *host = g_try_new(float, MAX(v->n_params, 1));
  if (!host)
    return cohort_fail(error, COHORT_VAE_ERROR, 1, "%s: out of memory for %zu parameters", path,
                       v->n_params);
  g_autoptr(GHashTable) used = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
  for (guint i = 0; i < v->table->len; i++) {
    const CohortTensorInfo *t = vae_param(v, (int)i);
    char *name = name_in_file(f, t->name);
    if (!name)
      return cohort_fail(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_MISSING,
                         "%s: tensor \"%s\" is missing; the file is not of the AutoencoderKL "
                         "its config.json describes",
                         path, t->name);
    int64_t shape[4];
    for (int d = 0; d < t->ndim; d++)
      shape[d] = t->shape[d];
    g_hash_table_add(used, name);
    if (!cohort_safetensors_read_f32(f, name, t->ndim, shape, host + t->offset, error))
      return FALSE;
  }
  for (const char *const *n = cohort_safetensors_names(f); *n; n++)
    if (!g_hash_table_contains(used, *n))
      return cohort_fail(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_SHAPE,
                         "%s: tensor \"%s\" is not part of the AutoencoderKL its config.json "
                         "describes; allowed: exactly the tensors of that model",
                         path, *n);
  const CohortTensorInfo *bad = first_non_finite(v, host);
  if (bad)
    return cohort_fail(error, COHORT_VAE_ERROR, 1,
                       "%s: tensor \"%s\" holds a NaN or an infinity; a VAE with non-finite "
                       "weights gives non-finite latents (was it trained with too high a "
                       "learning rate?); allowed: finite weights",
                       path, bad->name);
  cohort_vae_upload_params(v, host);
  return TRUE;
}

static gboolean hash_file(GChecksum *sum, const char *path, GError **error)
{
  FILE *fp = fopen(path, "rb");
  if (!fp)
    return cohort_fail(error, G_FILE_ERROR, g_file_error_from_errno(errno), "%s: cannot read: %s",
                       path, g_strerror(errno));
  g_autofree guchar *buf = g_malloc(1 << 20);
  size_t n;
  while ((n = fread(buf, 1, 1 << 20, fp)) > 0)
    g_checksum_update(sum, buf, (gssize)n);
  int failed = ferror(fp), e = errno;
  fclose(fp);
  if (failed)
    return cohort_fail(error, G_FILE_ERROR, g_file_error_from_errno(e), "%s: cannot read: %s", path,
                       g_strerror(e));
  return TRUE;
}

CohortVae *cohort_vae_load(const CohortBackend *be, const char *dir, CohortVaeUse use,
                           int max_batch, int image_size, GError **error)
{
  g_autofree char *folder = cohort_vae_find_folder(dir, error);
  if (!folder)
    return NULL;
  g_autofree char *cfg_path = g_build_filename(folder, "config.json", NULL);
  CohortVaeConfig cfg;
  if (!cohort_vae_config_read(cfg_path, &cfg, error))
    return NULL;
  g_autofree char *weights = NULL;
  for (guint i = 0; i < G_N_ELEMENTS(weight_files) && !weights; i++) {
    char *p = g_build_filename(folder, weight_files[i], NULL);
    if (g_file_test(p, G_FILE_TEST_IS_REGULAR))
      weights = p;
    else
      g_free(p);
  }
  if (!weights)
    return cohort_fail(error, COHORT_VAE_ERROR, 0,
                       "%s: no %s (nor %s) beside config.json; diffusers' weights file is "
                       "needed (a .bin checkpoint must be converted to safetensors first)",
                       folder, weight_files[0], weight_files[1]),
           NULL;
  g_autoptr(GError) local = NULL;
  g_autoptr(CohortVae) v = cohort_vae_create(be, &cfg, use, max_batch, image_size, &local);
  if (!v) {
    g_propagate_prefixed_error(error, g_steal_pointer(&local), "%s: ", folder);
    return NULL;
  }
  if (!read_weights(v, weights, error))
    return NULL;
  g_autoptr(GChecksum) sum = g_checksum_new(G_CHECKSUM_SHA256);
  if (!hash_file(sum, cfg_path, error) || !hash_file(sum, weights, error))
    return NULL;
  v->sha256 = g_strdup(g_checksum_get_string(sum));
  v->folder = g_steal_pointer(&folder);
  return g_steal_pointer(&v);
}

/* `host` (the weights) as safetensors entries with diffusers' current names. */
static gboolean write_weights(const CohortVae *v, const float *host, const char *path,
                              GError **error)
{
  g_autoptr(GArray) entries = g_array_new(FALSE, TRUE, sizeof(CohortStEntry));
  for (guint i = 0; i < v->table->len; i++) {
    const CohortTensorInfo *t = vae_param(v, (int)i);
    CohortStEntry e = {.name = t->name, .data = host + t->offset, .ndim = t->ndim};
    for (int d = 0; d < t->ndim; d++)
      e.shape[d] = t->shape[d];
    g_array_append_val(entries, e);
  }
  g_autoptr(GHashTable) meta = g_hash_table_new(g_str_hash, g_str_equal);
  g_hash_table_insert(meta, "format", "pt");
  return cohort_safetensors_write(path, (CohortStEntry *)entries->data, entries->len, meta, error);
}

gboolean cohort_vae_save(const CohortVae *v, const char *dir, GError **error)
{
  g_autofree char *cfg_path = g_build_filename(dir, "config.json", NULL);
  g_autofree char *weights = g_build_filename(dir, weight_files[0], NULL);
  /* Nothing non-finite is written (a diverged training): checked before the folder is made. */
  g_autofree float *host = g_new(float, MAX(v->n_params, 1));
  cohort_vae_download_params(v, host);
  const CohortTensorInfo *bad = first_non_finite(v, host);
  if (bad)
    return cohort_fail(error, COHORT_VAE_ERROR, 1,
                       "%s: not written: tensor \"%s\" holds a NaN or an infinity (training "
                       "diverged: try a lower learning rate)",
                       weights, bad->name);
  if (!cohort_vae_config_check(&v->cfg, cfg_path, error))
    return FALSE;
  if (g_mkdir_with_parents(dir, 0755) != 0)
    return cohort_fail(error, G_FILE_ERROR, g_file_error_from_errno(errno), "%s: cannot create: %s",
                       dir, g_strerror(errno));
  g_autofree char *json = cohort_vae_config_to_json(&v->cfg);
  return write_weights(v, host, weights, error) &&
         cohort_write_file_atomic(cfg_path, json, strlen(json), error);
}

const char *cohort_vae_sha256(const CohortVae *v)
{
  if (!v->sha256) {
    /* Made in code (or changed since loading): the config text and the weights as they would
     * be written. */
    CohortVae *mv = (CohortVae *)v;
    g_autofree char *json = cohort_vae_config_to_json(&v->cfg);
    g_autofree float *host = g_new(float, MAX(v->n_params, 1));
    cohort_vae_download_params(v, host);
    g_autoptr(GChecksum) sum = g_checksum_new(G_CHECKSUM_SHA256);
    g_checksum_update(sum, (const guchar *)json, (gssize)strlen(json));
    g_checksum_update(sum, (const guchar *)host, (gssize)(v->n_params * sizeof(float)));
    mv->sha256 = g_strdup(g_checksum_get_string(sum));
  }
  return v->sha256;
}

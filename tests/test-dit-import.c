/* init_from for the DiT (engine/models/dit-import.c), with checkpoints written by
 * tests/torch_dit_import.py as the public DiT reference and diffusers write them:
 *  - the reference's names with learned sigma: the first half of the final layer is kept (the
 *    note says so) and the velocity equals the reference model's noise prediction in float64
 *    PyTorch within 1e-4 of its largest value;
 *  - the same model under diffusers' DiTTransformer2DModel names (a transformer folder, and a
 *    pipeline folder with transformer/): exactly the same weights;
 *  - without learned sigma: no note;
 *  - refused, naming the file and the key to change: another patch size, input channels,
 *    width, depth (more or fewer blocks) or class count, an unknown extra tensor, and diffusers
 *    per-block embeddings that differ from block 0's.
 * Skipped without PyTorch (it writes the files). */
#include "torch-ref.h"
#include "test-util.h"
#include "engine/base/fileio.h"
#include "engine/model/model-io.h"
#include "engine/model/safetensors.h"
#include "engine/models/dit.h"
#include "engine/config/presets.h"
#include "engine/models/registry.h"
#include "kernels/backend.h"

#include <stdlib.h>

enum { L = 2, H = 2, C = 32, S = 8, CH = 3, P = 2, K = 3, B = 3 };

static gboolean have_torch(void)
{
  return g_file_test("/usr/bin/python3", G_FILE_TEST_IS_EXECUTABLE) &&
         system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
}

static void make_files(const char *dir, gboolean sigma)
{
  g_autofree char *sig = g_strdup_printf("%d", sigma ? 1 : 0);
  g_free(torch_ref_run("torch_dit_import.py", (const char *[]){"make", dir, "2", "2", "32", "8",
                                                               "3", "2", "3", sig, "5", NULL}));
}

/* A DiT of the test's shape with `extra` settings over it. */
static CohortModel *model_with(const char *const *extra, GError **error)
{
  g_autoptr(CohortConfig) cfg = cohort_config_new();
  const char *sets[] = {
      "model=dit",    "data_format=images", "n_layer=2",    "n_head=2",      "n_embd=32",
      "image_size=8", "image_channels=3",   "patch_size=2", "num_classes=3", NULL};
  g_assert_true(cohort_config_apply_assignments(cfg, sets, "test", NULL));
  if (extra)
    g_assert_true(cohort_config_apply_assignments(cfg, extra, "test", NULL));
  return cohort_model_new(cohort_backend_cpu(), cfg, B, error);
}

static float *import_ok(const char *path, char **note)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortModel) m = model_with(NULL, &error);
  g_assert_no_error(error);
  g_autoptr(GPtrArray) notes = g_ptr_array_new_with_free_func(g_free);
  g_assert_true(cohort_model_import(m, path, notes, &error));
  g_assert_no_error(error);
  *note = notes->len ? g_strdup(g_ptr_array_index(notes, 0)) : NULL;
  float *p = g_new(float, m->n_params);
  cohort_model_download_params(m, p);
  return p;
}

static void expect_refused(const char *path, const char *const *extra, const char *needle)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortModel) m = model_with(extra, &error);
  g_assert_no_error(error);
  g_assert_false(cohort_model_import(m, path, NULL, &error));
  g_assert_nonnull(error);
  g_test_message("%s", error->message);
  if (!strstr(error->message, needle))
    g_error("expected \"%s\" in: %s", needle, error->message);
  g_assert_nonnull(strstr(error->message, ".safetensors"));
}

/* The model's noise prediction against the reference's in PyTorch. */
static void compare_velocity(const char *dir, const char *path)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortModel) m = model_with(NULL, &error);
  g_assert_true(cohort_model_import(m, path, NULL, &error));
  enum { D = CH * S * S };
  float x[B * D], t[B] = {0.1f, 0.5f, 0.9f}, v[B * D];
  int labels[B] = {0, 2, K};
  guint32 s = 9;
  for (int i = 0; i < B * D; i++) {
    s = s * 1664525u + 1013904223u;
    x[i] = (float)((s >> 8) * (1.0 / 16777216.0)) * 2 - 1;
  }
  cohort_dit_velocity(m, x, t, labels, B, v);
  g_autofree char *inputs = g_build_filename(dir, "inputs.bin", NULL);
  g_autoptr(GByteArray) buf = g_byte_array_new();
  gint32 nb = B;
  g_byte_array_append(buf, (guint8 *)&nb, 4);
  g_byte_array_append(buf, (guint8 *)x, sizeof x);
  g_byte_array_append(buf, (guint8 *)t, sizeof t);
  g_byte_array_append(buf, (guint8 *)labels, sizeof labels);
  g_assert_true(g_file_set_contents(inputs, (char *)buf->data, buf->len, NULL));
  g_autofree char *out =
      torch_ref_run("torch_dit_import.py", (const char *[]){"run", dir, inputs, NULL});
  g_auto(GStrv) lines = g_strsplit(g_strstrip(out), "\n", -1);
  g_assert_cmpuint(g_strv_length(lines), ==, B * D);
  double mx = 0, worst = 0;
  for (int i = 0; i < B * D; i++)
    mx = fmax(mx, fabs(g_ascii_strtod(lines[i], NULL)));
  for (int i = 0; i < B * D; i++) {
    double ref = g_ascii_strtod(lines[i], NULL), d = fabs(v[i] - ref);
    if (d > 1e-4 * mx)
      g_error("velocity[%d]: ours %.8g, reference %.8g (largest %.3g)", i, v[i], ref, mx);
    worst = fmax(worst, d / mx);
  }
  g_test_message("velocity: %d values, largest error %.1e of the largest %.3g", B * D, worst, mx);
}

/* The diffusers file with block 1's copy of the timestep MLP changed. */
static void drift_copy(const char *diff_dir)
{
  g_autofree char *path = g_build_filename(diff_dir, "diffusion_pytorch_model.safetensors", NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortStFile) f = cohort_safetensors_open(path, &error);
  g_assert_no_error(error);
  g_autoptr(GArray) entries = g_array_new(FALSE, TRUE, sizeof(CohortStEntry));
  g_autoptr(GPtrArray) data = g_ptr_array_new_with_free_func(g_free);
  for (const char *const *n = cohort_safetensors_names(f); *n; n++) {
    int64_t shape[8];
    int nd = cohort_safetensors_shape(f, *n, shape);
    size_t numel = 1;
    for (int d = 0; d < nd; d++)
      numel *= (size_t)shape[d];
    float *v = g_new(float, numel);
    g_assert_true(cohort_safetensors_read_f32(f, *n, nd, shape, v, NULL));
    if (strcmp(*n, "transformer_blocks.1.norm1.emb.timestep_embedder.linear_1.weight") == 0)
      v[0] += 0.5f;
    g_ptr_array_add(data, v);
    CohortStEntry e = {.name = g_strdup(*n), .data = v, .ndim = nd};
    for (int d = 0; d < nd; d++)
      e.shape[d] = shape[d];
    g_array_append_val(entries, e);
  }
  g_clear_pointer(&f, cohort_safetensors_close);
  g_assert_true(
      cohort_safetensors_write(path, (CohortStEntry *)entries->data, entries->len, NULL, &error));
  for (guint i = 0; i < entries->len; i++)
    g_free((char *)g_array_index(entries, CohortStEntry, i).name);
}

static void test_learned_sigma_and_names(void)
{
  if (!have_torch()) {
    g_test_skip("PyTorch is not importable by /usr/bin/python3");
    return;
  }
  g_autofree char *dir = tu_mkdtemp("dit-import");
  make_files(dir, TRUE);
  g_autofree char *ref = g_build_filename(dir, "reference.safetensors", NULL);
  g_autofree char *diff = g_build_filename(dir, "diffusers", NULL);
  g_autofree char *note_ref = NULL, *note_diff = NULL, *note_pipe = NULL;
  g_autofree float *p_ref = import_ok(ref, &note_ref);
  g_autofree float *p_diff = import_ok(diff, &note_diff);
  g_test_message("notes: %s | %s", note_ref, note_diff);
  g_assert_nonnull(strstr(note_ref, "learned sigma (6 output channels)"));
  g_assert_nonnull(strstr(note_diff, "diffusers' DiT names"));
  g_assert_nonnull(strstr(note_diff, "learned sigma"));
  g_autoptr(CohortModel) probe = model_with(NULL, NULL);
  g_assert_cmpmem(p_ref, probe->n_params * 4, p_diff, probe->n_params * 4);
  /* a pipeline folder: the transformer in transformer/ */
  g_autofree char *pipe = g_build_filename(dir, "pipeline", NULL);
  g_autofree char *sub = g_build_filename(pipe, "transformer", NULL);
  g_mkdir_with_parents(pipe, 0755);
  g_assert_cmpint(g_rename(diff, sub), ==, 0);
  g_autofree float *p_pipe = import_ok(pipe, &note_pipe);
  g_assert_cmpmem(p_ref, probe->n_params * 4, p_pipe, probe->n_params * 4);
  g_assert_cmpint(g_rename(sub, diff), ==, 0);
  compare_velocity(dir, ref);
  /* refusals */
  expect_refused(ref, (const char *[]){"patch_size=4", NULL}, "patch_size");
  expect_refused(ref, (const char *[]){"image_channels=1", NULL}, "input channels");
  expect_refused(ref, (const char *[]){"n_embd=64", NULL}, "n_embd");
  expect_refused(ref, (const char *[]){"n_layer=1", NULL}, "n_layer");
  expect_refused(ref, (const char *[]){"n_layer=3", NULL}, "fewer than the model's 3 blocks");
  expect_refused(ref, (const char *[]){"num_classes=5", NULL}, "num_classes");
  expect_refused(diff, (const char *[]){"n_layer=1", NULL}, "n_layer");
  drift_copy(diff);
  expect_refused(diff, NULL, "trained apart");
  tu_rm_rf(dir);
}

static void test_plain_and_extra(void)
{
  if (!have_torch()) {
    g_test_skip("PyTorch is not importable by /usr/bin/python3");
    return;
  }
  g_autofree char *dir = tu_mkdtemp("dit-import");
  make_files(dir, FALSE);
  g_autofree char *ref = g_build_filename(dir, "reference.safetensors", NULL);
  g_autofree char *note = NULL;
  g_autofree float *p = import_ok(ref, &note);
  g_assert_null(note);
  compare_velocity(dir, ref);
  /* Cohort's own export loads through the importer too, and an extra tensor is refused */
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortModel) m = model_with(NULL, &error);
  g_assert_true(cohort_model_import(m, ref, NULL, &error));
  g_autofree char *mine = g_build_filename(dir, "mine.safetensors", NULL);
  g_autoptr(GHashTable) meta = g_hash_table_new(g_str_hash, g_str_equal);
  g_hash_table_insert(meta, "format", "pt");
  g_assert_true(cohort_model_save(m, NULL, mine, meta, &error));
  g_autofree char *n2 = NULL;
  g_autofree float *p2 = import_ok(mine, &n2);
  g_assert_cmpmem(p, m->n_params * 4, p2, m->n_params * 4);
  g_autofree char *extra = g_build_filename(dir, "extra.safetensors", NULL);
  float one = 1;
  CohortStEntry e = {.name = "blocks.0.attn.extra", .data = &one, .ndim = 1, .shape = {1}};
  g_autoptr(GArray) entries = g_array_new(FALSE, TRUE, sizeof(CohortStEntry));
  g_autoptr(CohortStFile) f = cohort_safetensors_open(mine, &error);
  g_autoptr(GPtrArray) keep = g_ptr_array_new_with_free_func(g_free);
  for (const char *const *n = cohort_safetensors_names(f); *n; n++) {
    int64_t shape[8];
    int nd = cohort_safetensors_shape(f, *n, shape);
    size_t numel = 1;
    for (int d = 0; d < nd; d++)
      numel *= (size_t)shape[d];
    float *v = g_new(float, numel);
    g_assert_true(cohort_safetensors_read_f32(f, *n, nd, shape, v, NULL));
    g_ptr_array_add(keep, v);
    CohortStEntry x = {.name = *n, .data = v, .ndim = nd};
    for (int d = 0; d < nd; d++)
      x.shape[d] = shape[d];
    g_array_append_val(entries, x);
  }
  g_array_append_val(entries, e);
  g_assert_true(
      cohort_safetensors_write(extra, (CohortStEntry *)entries->data, entries->len, NULL, &error));
  expect_refused(extra, NULL, "blocks.0.attn.extra");
  tu_rm_rf(dir);
}

/* The DiT-S/2 and DiT-B/2 presets on the latents of SD's VAE at 256 px (a config.json of its
 * shape is all they need to be sized): 32×32×4 latents in 2×2 patches, and the parameter
 * counts of the DiT paper's table 4 (33M and 130M, with learned sigma's few more). */
static void test_presets(void)
{
  g_autofree char *dir = tu_mkdtemp("sd-vae-config");
  g_autofree char *cfg_path = g_build_filename(dir, "config.json", NULL);
  g_assert_true(g_file_set_contents(
      cfg_path,
      "{\"_class_name\": \"AutoencoderKL\", \"block_out_channels\": [128, 256, 512, 512], "
      "\"layers_per_block\": 2, \"latent_channels\": 4, \"norm_num_groups\": 32, "
      "\"sample_size\": 256, \"scaling_factor\": 0.18215}",
      -1, NULL));
  const struct {
    const char *name;
    int layers, width;
    double params;
  } presets[] = {{"dit-s2-latent", 12, 384, 33e6}, {"dit-b2-latent", 12, 768, 130e6}};
  for (guint i = 0; i < G_N_ELEMENTS(presets); i++) {
    g_autoptr(GError) error = NULL;
    g_autoptr(CohortConfig) cfg = cohort_preset_load(presets[i].name, &error);
    g_assert_no_error(error);
    g_assert_cmpint(cfg->image_size, ==, 256);
    g_assert_cmpint(cfg->patch_size, ==, 2);
    g_assert_cmpint(cfg->n_layer, ==, presets[i].layers);
    g_assert_cmpint(cfg->n_embd, ==, presets[i].width);
    g_assert_cmpstr(cfg->vae_from, !=, "");
    g_free(cfg->vae_from);
    cfg->vae_from = g_strdup(dir);
    cfg->num_classes = 1000;
    int size, channels;
    g_assert_true(cohort_dit_latent_geometry(cfg, presets[i].name, &size, &channels, &error));
    g_assert_cmpint(size, ==, 32);
    g_assert_cmpint(channels, ==, 4);
    g_assert_true(cohort_model_check_config(cfg, presets[i].name, &error));
    gint64 n = cohort_model_count_params(cfg);
    g_test_message("%s: %" G_GINT64_FORMAT " parameters", presets[i].name, n);
    g_assert_cmpfloat(fabs(n / presets[i].params - 1.0), <, 0.02);
  }
  tu_rm_rf(dir);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  cohort_backend_cpu()->set_threads(1);
  g_test_add_func("/dit-import/learned-sigma-and-names", test_learned_sigma_and_names);
  g_test_add_func("/dit-import/plain-and-extra", test_plain_and_extra);
  g_test_add_func("/dit-import/presets", test_presets);
  return g_test_run();
}

/* The VAE (diffusers' AutoencoderKL) against a plain PyTorch AutoencoderKL written from diffusers'
 * architecture with diffusers' names (tests/torch_vae_ref.py), both ways, in several configs
 * (4 and 16 latent channels, with and without quant_conv and mid-block attention, 1 and 3
 * image channels, 1 and 2 layers per block, diffusers' older attention names):
 *  - PyTorch makes a folder with random weights; Cohort loads it strictly and its posterior
 *    moments and decoded images agree with PyTorch's float64 run within 1e-4 of the largest
 *    value of each output;
 *  - Cohort makes a VAE with diffusers' initialisation and saves it; PyTorch loads that with
 *    load_state_dict(strict=True) and they agree the same way.
 * Without PyTorch those cases are skipped. Then what needs no PyTorch: the config rules and
 * their one-line errors, strict loading (a missing or extra tensor, a wrong shape), scaling of
 * latents, the content hash, batch independence, and the training loss's gradient against
 * finite differences (a tiny VAE). */
#include "fd-check.h"
#include "torch-ref.h"
#include "engine/base/fileio.h"
#include "engine/model/safetensors.h"
#include "engine/models/vae.h"

#include <glib/gstdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const CohortBackend *be;

static gboolean have_torch(void)
{
  return g_file_test("/usr/bin/python3", G_FILE_TEST_IS_EXECUTABLE) &&
         system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
}

static char *tmp_dir(void)
{
  GError *error = NULL;
  char *d = g_dir_make_tmp("cohort-test-vae-XXXXXX", &error);
  g_assert_no_error(error);
  return d;
}

static void write_config(const char *dir, const CohortVaeConfig *cfg)
{
  g_autofree char *json = cohort_vae_config_to_json(cfg);
  g_autofree char *path = g_build_filename(dir, "config.json", NULL);
  g_assert_true(g_file_set_contents(path, json, -1, NULL));
}

typedef struct {
  int B, S;
  float *images, *z;
  size_t n_img, n_z;
} Inputs;

static Inputs make_inputs(const CohortVaeConfig *cfg, int B, int S)
{
  int s = S / cohort_vae_downsample_factor(cfg);
  Inputs in = {.B = B, .S = S};
  in.n_img = (size_t)B * cfg->in_channels * S * S;
  in.n_z = (size_t)B * cfg->latent_channels * s * s;
  in.images = randv(in.n_img, 1.0f);
  in.z = randv(in.n_z, 1.5f);
  return in;
}

/* PyTorch's moments and decoded images of `dir` on the inputs. */
static void torch_run(const char *dir, const Inputs *in, double **moments, size_t *n_m,
                      double **decoded, size_t *n_d)
{
  g_autofree char *inp = g_build_filename(dir, "in.bin", NULL);
  g_autofree char *outp = g_build_filename(dir, "out.bin", NULL);
  g_autoptr(GByteArray) buf = g_byte_array_new();
  gint64 B = in->B;
  g_byte_array_append(buf, (guint8 *)&B, 8);
  g_byte_array_append(buf, (guint8 *)in->images, (guint)(in->n_img * 4));
  g_byte_array_append(buf, (guint8 *)in->z, (guint)(in->n_z * 4));
  g_assert_true(g_file_set_contents(inp, (char *)buf->data, buf->len, NULL));
  g_free(torch_ref_run("torch_vae_ref.py", (const char *[]){"run", dir, inp, outp, NULL}));
  g_autofree char *data = NULL;
  gsize len = 0;
  g_assert_true(g_file_get_contents(outp, &data, &len, NULL));
  gint64 n1, n2;
  memcpy(&n1, data, 8);
  *moments = g_memdup2(data + 8, (gsize)n1 * 8);
  memcpy(&n2, data + 8 + n1 * 8, 8);
  *decoded = g_memdup2(data + 16 + n1 * 8, (gsize)n2 * 8);
  g_assert_cmpuint(len, ==, 16 + 8 * (n1 + n2));
  *n_m = (size_t)n1;
  *n_d = (size_t)n2;
  g_unlink(inp);
  g_unlink(outp);
}

/* |ours - torch| <= 1e-4 · max|torch| over the output. */
static void expect_rel(const char *what, const float *ours, const double *ref, size_t n)
{
  double mx = 0, worst = 0;
  for (size_t i = 0; i < n; i++)
    mx = fmax(mx, fabs(ref[i]));
  for (size_t i = 0; i < n; i++) {
    double d = fabs(ours[i] - ref[i]);
    if (d > 1e-4 * mx)
      g_error("%s[%zu]: ours %.9g, PyTorch %.9g (largest |value| %.3g)", what, i, ours[i], ref[i],
              mx);
    worst = fmax(worst, d / mx);
  }
  g_test_message("%s: %zu values, largest error %.1e of the largest value %.3g", what, n, worst,
                 mx);
}

static void compare(CohortVae *v, const char *dir, const Inputs *in, const char *what)
{
  g_autofree double *m = NULL, *d = NULL;
  size_t n_m, n_d;
  torch_run(dir, in, &m, &n_m, &d, &n_d);
  g_assert_cmpuint(n_m, ==, 2 * in->n_z);
  g_assert_cmpuint(n_d, ==, in->n_img);
  g_autofree float *mom = g_new(float, n_m), *dec = g_new(float, n_d);
  cohort_vae_encode_moments(v, in->images, in->B, mom);
  cohort_vae_decode_raw(v, in->z, in->B, dec);
  g_autofree char *w1 = g_strdup_printf("%s: encode (moments)", what);
  g_autofree char *w2 = g_strdup_printf("%s: decode", what);
  expect_rel(w1, mom, m, n_m);
  expect_rel(w2, dec, d, n_d);
}

typedef struct {
  const char *name;
  CohortVaeConfig cfg;
  int S;
  gboolean old_names;
} Case;

static const Case cases[] = {
    {"SD-like, 4 latent channels",
     {.in_channels = 3,
      .out_channels = 3,
      .n_blocks = 2,
      .block_out_channels = {32, 64},
      .layers_per_block = 1,
      .latent_channels = 4,
      .norm_num_groups = 32,
      .scaling_factor = 0.18215,
      .use_quant_conv = TRUE,
      .use_post_quant_conv = TRUE,
      .mid_block_add_attention = TRUE,
      .sample_size = 16},
     16,
     FALSE},
    {"SD3/FLUX-like, 16 latent channels, no quant convs",
     {.in_channels = 3,
      .out_channels = 3,
      .n_blocks = 3,
      .block_out_channels = {32, 32, 64},
      .layers_per_block = 2,
      .latent_channels = 16,
      .norm_num_groups = 32,
      .scaling_factor = 1.5305,
      .shift_factor = 0.0609,
      .use_quant_conv = FALSE,
      .use_post_quant_conv = FALSE,
      .mid_block_add_attention = TRUE,
      .sample_size = 16},
     16,
     FALSE},
    {"grey, older attention names",
     {.in_channels = 1,
      .out_channels = 1,
      .n_blocks = 2,
      .block_out_channels = {16, 24},
      .layers_per_block = 1,
      .latent_channels = 4,
      .norm_num_groups = 8,
      .scaling_factor = 0.5,
      .use_quant_conv = TRUE,
      .use_post_quant_conv = FALSE,
      .mid_block_add_attention = TRUE,
      .sample_size = 12},
     12,
     TRUE},
    {"no mid-block attention",
     {.in_channels = 3,
      .out_channels = 3,
      .n_blocks = 2,
      .block_out_channels = {16, 32},
      .layers_per_block = 1,
      .latent_channels = 8,
      .norm_num_groups = 16,
      .scaling_factor = 1.0,
      .use_quant_conv = TRUE,
      .use_post_quant_conv = TRUE,
      .mid_block_add_attention = FALSE,
      .sample_size = 8},
     8,
     FALSE},
};

static void test_against_torch(void)
{
  if (!have_torch()) {
    g_test_skip("PyTorch is not importable by /usr/bin/python3");
    return;
  }
  for (guint k = 0; k < G_N_ELEMENTS(cases); k++) {
    const Case *c = &cases[k];
    Inputs in = make_inputs(&c->cfg, 2, c->S);
    g_autoptr(GError) error = NULL;
    /* PyTorch's file into Cohort */
    g_autofree char *theirs = tmp_dir();
    write_config(theirs, &c->cfg);
    g_autofree char *seed = g_strdup_printf("%u", 7 + k);
    g_free(torch_ref_run("torch_vae_ref.py", (const char *[]){"make", theirs, seed,
                                                              c->old_names ? "old" : "new", NULL}));
    g_autoptr(CohortVae) v =
        cohort_vae_load(be, theirs, COHORT_VAE_ENCODE | COHORT_VAE_DECODE, 2, c->S, &error);
    g_assert_no_error(error);
    g_autofree char *w1 = g_strdup_printf("%s, PyTorch's weights", c->name);
    compare(v, theirs, &in, w1);
    /* Cohort's file into PyTorch */
    g_autofree char *ours = tmp_dir();
    g_autoptr(CohortVae) mine = cohort_vae_new(be, &c->cfg, COHORT_VAE_ENCODE | COHORT_VAE_DECODE,
                                               2, c->S, 100 + k, &error);
    g_assert_no_error(error);
    g_assert_true(cohort_vae_save(mine, ours, &error));
    g_assert_no_error(error);
    g_autofree char *w2 = g_strdup_printf("%s, Cohort's weights", c->name);
    compare(mine, ours, &in, w2);
    cohort_remove_tree(theirs);
    cohort_remove_tree(ours);
    g_free(in.images), g_free(in.z);
  }
}

/* ---- without PyTorch ---- */

static const CohortVaeConfig tiny = {
    .in_channels = 3,
    .out_channels = 3,
    .n_blocks = 2,
    .block_out_channels = {8, 16},
    .layers_per_block = 1,
    .latent_channels = 2,
    .norm_num_groups = 4,
    .scaling_factor = 0.5,
    .shift_factor = 0.25,
    .use_quant_conv = TRUE,
    .use_post_quant_conv = TRUE,
    .mid_block_add_attention = TRUE,
    .sample_size = 8,
};

static void expect_config_error(const char *json, const char *needle)
{
  g_autofree char *dir = tmp_dir();
  g_autofree char *path = g_build_filename(dir, "config.json", NULL);
  g_assert_true(g_file_set_contents(path, json, -1, NULL));
  CohortVaeConfig cfg;
  g_autoptr(GError) error = NULL;
  g_assert_false(cohort_vae_config_read(path, &cfg, &error));
  g_assert_nonnull(error);
  g_test_message("%s", error->message);
  g_assert_nonnull(strstr(error->message, path));
  g_assert_nonnull(strstr(error->message, needle));
  g_assert_null(strchr(error->message, '\n'));
  cohort_remove_tree(dir);
}

static void test_config(void)
{
  /* round trip */
  g_autofree char *dir = tmp_dir();
  write_config(dir, &tiny);
  g_autofree char *path = g_build_filename(dir, "config.json", NULL);
  CohortVaeConfig back;
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_vae_config_read(path, &back, &error));
  g_assert_no_error(error);
  g_assert_cmpmem(&back, sizeof back, &tiny, sizeof tiny);
  g_assert_cmpint(cohort_vae_downsample_factor(&back), ==, 2);
  cohort_remove_tree(dir);
  /* refusals, each naming the key */
  expect_config_error("{\"_class_name\": \"AutoencoderTiny\", \"block_out_channels\": [32]}",
                      "\"_class_name\"");
  expect_config_error("{\"block_out_channels\": [32, 48]}", "multiple of norm_num_groups");
  expect_config_error("{\"block_out_channels\": [32], \"act_fn\": \"relu\"}", "\"act_fn\"");
  expect_config_error("{\"block_out_channels\": [32, 64], \"down_block_types\": "
                      "[\"DownEncoderBlock2D\", \"AttnDownEncoderBlock2D\"]}",
                      "AttnDownEncoderBlock2D");
  expect_config_error("{\"latent_channels\": 4}", "\"block_out_channels\" is missing");
  expect_config_error("{\"block_out_channels\": [32], \"latent_channels\": 0}",
                      "\"latent_channels\"");
  expect_config_error("{\"block_out_channels\": [32], \"scaling_factor\": \"x\"}",
                      "\"scaling_factor\"");
  expect_config_error("{\"block_out_channels\": [32], \"in_channels\": 3, \"out_channels\": 1}",
                      "\"out_channels\"");
  expect_config_error("{\"block_out_channels\": [32], \"a\": 1, \"a\": 2}", "more than once");
  expect_config_error("[1, 2]", "not a JSON object");
}

/* A folder whose weights file is made from `v`'s, changed by `edit`. */
static void expect_load_error(const char *what, void (*edit)(GHashTable *, const CohortVae *),
                              const char *needle)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortVae) v = cohort_vae_new(be, &tiny, COHORT_VAE_ENCODE, 1, 8, 1, &error);
  g_autofree char *dir = tmp_dir();
  g_assert_true(cohort_vae_save(v, dir, &error));
  g_autofree char *wpath = g_build_filename(dir, "diffusion_pytorch_model.safetensors", NULL);
  g_autoptr(CohortStFile) f = cohort_safetensors_open(wpath, &error);
  g_assert_no_error(error);
  /* name → a copy of its values and shape */
  g_autoptr(GHashTable) t = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
  g_autoptr(GPtrArray) order = g_ptr_array_new_with_free_func(g_free);
  for (const char *const *n = cohort_safetensors_names(f); *n; n++) {
    int64_t shape[8];
    int nd = cohort_safetensors_shape(f, *n, shape);
    size_t numel = 1;
    for (int d = 0; d < nd; d++)
      numel *= (size_t)shape[d];
    CohortStEntry *e = g_malloc0(sizeof(CohortStEntry) + numel * sizeof(float));
    float *data = (float *)(e + 1);
    g_assert_true(cohort_safetensors_read_f32(f, *n, nd, shape, data, NULL));
    e->data = data;
    e->ndim = nd;
    for (int d = 0; d < nd; d++)
      e->shape[d] = shape[d];
    g_hash_table_insert(t, g_strdup(*n), e);
    g_ptr_array_add(order, g_strdup(*n));
  }
  g_clear_pointer(&f, cohort_safetensors_close);
  edit(t, v);
  g_autoptr(GArray) entries = g_array_new(FALSE, FALSE, sizeof(CohortStEntry));
  GHashTableIter it;
  gpointer key, val;
  g_hash_table_iter_init(&it, t);
  while (g_hash_table_iter_next(&it, &key, &val)) {
    CohortStEntry e = *(CohortStEntry *)val;
    e.name = key;
    g_array_append_val(entries, e);
  }
  g_assert_true(
      cohort_safetensors_write(wpath, (CohortStEntry *)entries->data, entries->len, NULL, &error));
  g_autoptr(CohortVae) bad = cohort_vae_load(be, dir, COHORT_VAE_ENCODE, 1, 8, &error);
  g_assert_null(bad);
  g_assert_nonnull(error);
  g_test_message("%s: %s", what, error->message);
  g_assert_nonnull(strstr(error->message, wpath));
  g_assert_nonnull(strstr(error->message, needle));
  cohort_remove_tree(dir);
}

static void drop_one(GHashTable *t, const CohortVae *v)
{
  (void)v;
  g_assert_true(g_hash_table_remove(t, "decoder.conv_out.bias"));
}

static void add_one(GHashTable *t, const CohortVae *v)
{
  (void)v;
  CohortStEntry *e = g_malloc0(sizeof(CohortStEntry) + sizeof(float));
  e->data = (float *)(e + 1);
  e->ndim = 1;
  e->shape[0] = 1;
  g_hash_table_insert(t, g_strdup("encoder.extra.weight"), e);
}

static void reshape_one(GHashTable *t, const CohortVae *v)
{
  (void)v;
  CohortStEntry *e = g_hash_table_lookup(t, "encoder.conv_in.weight");
  e->shape[0] = 4; /* [4, 3, 3, 3] is half the values: shrink the data too */
  e->shape[1] = 3;
}

static void nan_one(GHashTable *t, const CohortVae *v)
{
  (void)v;
  CohortStEntry *e = g_hash_table_lookup(t, "decoder.conv_in.weight");
  ((float *)e->data)[5] = NAN;
}

static void inf_one(GHashTable *t, const CohortVae *v)
{
  (void)v;
  CohortStEntry *e = g_hash_table_lookup(t, "encoder.conv_out.bias");
  ((float *)e->data)[0] = -INFINITY;
}

/* Weights that are not finite (a training with too high a learning rate) are never written,
 * and a folder holding them is never read: both name the tensor, and nothing is made. */
static void test_non_finite(void)
{
  expect_load_error("NaN weight", nan_one, "\"decoder.conv_in.weight\" holds a NaN");
  expect_load_error("infinite weight", inf_one, "\"encoder.conv_out.bias\" holds a NaN or an");
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortVae) v = cohort_vae_new(be, &tiny, COHORT_VAE_ENCODE, 1, 8, 4, &error);
  g_assert_no_error(error);
  g_autofree float *host = g_new(float, cohort_vae_n_params(v));
  cohort_vae_download_params(v, host);
  size_t off = 0, numel = 0;
  g_assert_true(cohort_vae_find_param(v, "decoder.conv_out.bias", &off, &numel));
  host[off + numel - 1] = INFINITY;
  cohort_vae_upload_params(v, host);
  g_autofree char *parent = tmp_dir();
  g_autofree char *dir = g_build_filename(parent, "never", NULL);
  g_assert_false(cohort_vae_save(v, dir, &error));
  g_test_message("%s", error->message);
  g_assert_nonnull(strstr(error->message, "holds a NaN or an infinity"));
  g_assert_nonnull(strstr(error->message, "\"decoder.conv_out.bias\""));
  g_assert_false(g_file_test(dir, G_FILE_TEST_EXISTS));
  cohort_remove_tree(parent);
}

static void test_strict_load(void)
{
  expect_load_error("missing tensor", drop_one, "\"decoder.conv_out.bias\" is missing");
  expect_load_error("extra tensor", add_one, "\"encoder.extra.weight\" is not part");
  expect_load_error("wrong shape", reshape_one, "encoder.conv_in.weight");
  /* no weights file */
  g_autofree char *dir = tmp_dir();
  write_config(dir, &tiny);
  g_autoptr(GError) error = NULL;
  g_assert_null(cohort_vae_load(be, dir, COHORT_VAE_ENCODE, 1, 8, &error));
  g_assert_nonnull(strstr(error->message, "diffusion_pytorch_model.safetensors"));
  g_clear_error(&error);
  /* an image size the encoder cannot halve twice... here once: 7 is odd */
  g_assert_null(cohort_vae_new(be, &tiny, COHORT_VAE_ENCODE, 1, 7, 1, &error));
  g_assert_nonnull(strstr(error->message, "multiple of 2"));
  g_clear_error(&error);
  /* a pipeline folder: the VAE in vae/ */
  g_autofree char *pipe = tmp_dir();
  g_autofree char *sub = g_build_filename(pipe, "vae", NULL);
  g_autoptr(CohortVae) v = cohort_vae_new(be, &tiny, COHORT_VAE_ENCODE, 1, 8, 3, &error);
  g_assert_true(cohort_vae_save(v, sub, &error));
  g_autoptr(CohortVae) w = cohort_vae_load(be, pipe, COHORT_VAE_ENCODE, 1, 8, &error);
  g_assert_no_error(error);
  g_assert_cmpstr(cohort_vae_folder(w), ==, sub);
  cohort_remove_tree(dir);
  cohort_remove_tree(pipe);
}

static void test_scaling_and_hash(void)
{
  g_autoptr(GError) error = NULL;
  CohortVaeUse both = COHORT_VAE_ENCODE | COHORT_VAE_DECODE;
  g_autoptr(CohortVae) v = cohort_vae_new(be, &tiny, both, 3, 8, 5, &error);
  g_assert_no_error(error);
  enum { B = 3, D = 3 * 8 * 8, L = 2 * 4 * 4 };
  g_autofree float *img = randv(B * D, 1.0f);
  float mom[B * 2 * L], lat[B * L], one[2 * L];
  cohort_vae_encode_moments(v, img, B, mom);
  cohort_vae_encode(v, img, B, lat);
  for (int b = 0; b < B; b++)
    for (int i = 0; i < L; i++)
      g_assert_cmpfloat_with_epsilon(lat[b * L + i], (mom[b * 2 * L + i] - 0.25f) * 0.5f, 1e-6);
  /* each example alone gives what it gives in the batch */
  cohort_vae_encode_moments(v, img + D, 1, one);
  g_assert_cmpmem(one, sizeof one, mom + 2 * L, sizeof one);
  /* decode undoes the scaling before the decoder */
  g_autofree float *a = g_new(float, B *D), *b = g_new(float, B *D);
  float z[B * L];
  for (int i = 0; i < B * L; i++)
    z[i] = lat[i] / 0.5f + 0.25f;
  cohort_vae_decode(v, lat, B, a);
  cohort_vae_decode_raw(v, z, B, b);
  for (int i = 0; i < B * D; i++)
    g_assert_cmpfloat_with_epsilon(a[i], b[i], 1e-5);
  /* the content hash: saved and loaded, the same folder hashes the same; other weights differ */
  g_autofree char *d1 = tmp_dir(), *d2 = tmp_dir();
  g_assert_true(cohort_vae_save(v, d1, &error));
  g_assert_true(cohort_vae_save(v, d2, &error));
  g_autoptr(CohortVae) l1 = cohort_vae_load(be, d1, COHORT_VAE_ENCODE, 1, 8, &error);
  g_autoptr(CohortVae) l2 = cohort_vae_load(be, d2, COHORT_VAE_ENCODE, 1, 8, &error);
  g_assert_no_error(error);
  g_assert_cmpstr(cohort_vae_sha256(l1), ==, cohort_vae_sha256(l2));
  g_autoptr(CohortVae) other = cohort_vae_new(be, &tiny, COHORT_VAE_ENCODE, 1, 8, 6, &error);
  g_assert_cmpstr(cohort_vae_sha256(other), !=, cohort_vae_sha256(v));
  cohort_remove_tree(d1);
  cohort_remove_tree(d2);
}

/* ---- the training loss's gradient against finite differences ---- */
typedef struct {
  CohortVae *v;
  float *img, *eps, *params;
  size_t n;
} Fd;

static double fd_loss(gpointer p)
{
  Fd *f = p;
  cohort_vae_upload_params(f->v, f->params);
  double rec, kl;
  cohort_vae_train_forward(f->v, f->img, f->eps, 2, 0.3f, &rec, &kl);
  return rec + 0.3 * kl;
}

/* Central differences through the whole float network, with Richardson's extrapolation
 * (4 D(h/2) − D(h)) / 3 from steps 2e-2 and 1e-2, which cancels the h² term: the posterior's
 * exp(logvar / 2) and the small GroupNorm groups curve the loss enough that plain differences
 * are off by 1e-4. Float rounding (~1e-7 of the loss) leaves ~1e-5 in the quotient, and the
 * encoder's gradients are 1e-4 to 1e-2: tolerance 2e-5 + 2e-3 |grad|. */
static double central(Fd *f, float *x, float h)
{
  float keep = *x;
  *x = keep + h;
  double jp = fd_loss(f);
  *x = keep - h;
  double jm = fd_loss(f);
  *x = keep;
  return (jp - jm) / (2.0 * (double)h);
}

static void fd_tensor(Fd *f, size_t off, size_t n, const float *grad, const char *what)
{
  double worst = 0.0;
  for (size_t i = 0; i < n; i++) {
    float *x = f->params + off + i;
    double fd = (4.0 * central(f, x, 1e-2f) - central(f, x, 2e-2f)) / 3.0;
    double err = fabs(fd - grad[i]);
    if (err > 2e-5 + 2e-3 * fabs(grad[i]))
      g_error("%s: d/dx[%zu] analytic %.6g, finite difference %.6g", what, i, grad[i], fd);
    worst = fmax(worst, err);
  }
  g_test_message("%s: %zu gradients, largest |fd - analytic| %.2e", what, n, worst);
}

static void test_train_gradient(void)
{
  CohortVaeConfig c = tiny;
  c.block_out_channels[0] = 4;
  c.block_out_channels[1] = 8;
  c.norm_num_groups = 2;
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortVae) v = cohort_vae_new(be, &c, COHORT_VAE_TRAIN, 2, 4, 11, &error);
  g_assert_no_error(error);
  Fd f = {.v = v, .n = cohort_vae_n_params(v)};
  f.img = randv(2 * 3 * 4 * 4, 1.0f);
  f.eps = randv(2 * 2 * 2 * 2, 1.0f);
  f.params = g_new(float, f.n);
  cohort_vae_download_params(v, f.params);
  fd_loss(&f);
  be->zero(cohort_vae_grads(v), f.n * sizeof(float));
  cohort_vae_train_backward(v);
  g_autofree float *g = g_new(float, f.n);
  be->download(g, cohort_vae_grads(v), f.n * sizeof(float));
  /* every tensor, a few values each */
  for (guint t = 0; t < cohort_vae_n_tensors(v); t++) {
    size_t off, numel;
    g_assert_true(cohort_vae_find_param(v, cohort_vae_tensor_name(v, t), &off, &numel));
    fd_tensor(&f, off, MIN(numel, 3), g + off, cohort_vae_tensor_name(v, t));
  }
  g_free(f.img), g_free(f.eps), g_free(f.params);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  be = cohort_backend_cpu();
  be->set_threads(1);
  g_test_add_func("/vae/against-torch", test_against_torch);
  g_test_add_func("/vae/config", test_config);
  g_test_add_func("/vae/strict-load", test_strict_load);
  g_test_add_func("/vae/non-finite", test_non_finite);
  g_test_add_func("/vae/scaling-and-hash", test_scaling_and_hash);
  g_test_add_func("/vae/train-gradient", test_train_gradient);
  return g_test_run();
}

/* Fuzzing what latent training reads from outside and from its workspace, in process:
 *  - a VAE's config.json (cohort_vae_config_read): a valid config changed key by key to values
 *    of the wrong type or range, keys dropped, strict-JSON violations, never-valid and random
 *    bytes, truncations; each refused case must give one line naming the file, each accepted
 *    one must pass the config rules;
 *  - a VAE folder's weights (cohort_vae_load): a valid file truncated, bit-flipped in its
 *    header, a tensor dropped or reshaped — refused naming the file, never a crash;
 *  - the latent cache's journal (cohort_latent_cache_open): a valid file truncated anywhere,
 *    bytes flipped anywhere, random files; opening never fails on content (only I/O), keeps
 *    exactly the intact leading records with their values, and appends after the cut. */
#include "data/latent-cache.h"
#include "engine/model/safetensors.h"
#include "engine/models/vae.h"
#include "fuzz-util.h"

typedef struct {
  FuzzTally t;
  FuzzRng rng;
} Ctx;

static const char *const good_config =
    "{\"_class_name\": \"AutoencoderKL\", \"act_fn\": \"silu\", \"block_out_channels\": [8, 16], "
    "\"down_block_types\": [\"DownEncoderBlock2D\", \"DownEncoderBlock2D\"], \"up_block_types\": "
    "[\"UpDecoderBlock2D\", \"UpDecoderBlock2D\"], \"in_channels\": 3, \"out_channels\": 3, "
    "\"latent_channels\": 4, \"layers_per_block\": 1, \"norm_num_groups\": 4, \"sample_size\": 8, "
    "\"scaling_factor\": 0.5, \"shift_factor\": null, \"use_quant_conv\": true, "
    "\"use_post_quant_conv\": true, \"mid_block_add_attention\": true}";

/* One config case: read it and judge the outcome. */
static void config_case(Ctx *c, const char *name, const char *text, gsize len, FuzzExpect expect)
{
  g_autofree char *path = fuzz_case_path(&c->t, name);
  fuzz_write(path, text, len);
  c->t.cases++;
  fuzz_set_current(path);
  CohortVaeConfig cfg;
  g_autoptr(GError) error = NULL;
  gboolean ok = cohort_vae_config_read(path, &cfg, &error);
  fuzz_set_current("");
  if (ok) {
    c->t.accepted++;
    if (expect == FUZZ_REFUSE)
      fuzz_fail(&c->t, path, "accepted, but the case is broken (%s)", name);
    else if (!cohort_vae_config_check(&cfg, path, NULL))
      fuzz_fail(&c->t, path, "accepted a config that breaks the rules");
    return;
  }
  c->t.refused++;
  if (expect == FUZZ_ACCEPT)
    fuzz_fail(&c->t, path, "refused a good config: %s", error->message);
  else if (!strstr(error->message, path) || strchr(error->message, '\n'))
    fuzz_fail(&c->t, path, "the error is not one line naming the file: %s", error->message);
}

/* A value of the wrong kind for key `key`, in place of its value in the good config. */
static void wrong_values(Ctx *c)
{
  static const char *const keys[] = {
      "block_out_channels", "in_channels",      "out_channels",
      "latent_channels",    "layers_per_block", "norm_num_groups",
      "scaling_factor",     "use_quant_conv",   "act_fn",
      "_class_name",        "down_block_types",
  };
  static const char *const values[] = {
      "\"8\"",
      "-1",
      "0",
      "1e400",
      "99999999999999999999",
      "[]",
      "{}",
      "[8, -16]",
      "[8, 15]",
      "true",
      "null",
      "[\"DownEncoderBlock2D\"]",
      "\"gelu\"",
      "2.5",
      "[8, 16, 32, 64, 128, 256, 512, 1024, 2048]",
  };
  for (guint k = 0; k < G_N_ELEMENTS(keys); k++)
    for (guint v = 0; v < G_N_ELEMENTS(values); v++) {
      g_autofree char *pat = g_strdup_printf("\"%s\": ", keys[k]);
      const char *at = strstr(good_config, pat);
      g_assert_nonnull(at);
      const char *val = at + strlen(pat);
      const char *end = val;
      int depth = 0;
      for (; *end && (depth > 0 || (*end != ',' && *end != '}')); end++)
        depth += *end == '[' ? 1 : *end == ']' ? -1 : 0;
      g_autofree char *head = g_strndup(good_config, (gsize)(val - good_config));
      g_autofree char *text = g_strconcat(head, values[v], end, NULL);
      /* whether it is still a good config is the reader's to decide (a value may be valid:
       * 2.5 for scaling_factor), but it must obey the rules either way */
      config_case(c, "wrong-value.json", text, strlen(text), FUZZ_EITHER);
    }
}

static void broken_configs(Ctx *c)
{
  gsize n = strlen(good_config);
  config_case(c, "good.json", good_config, n, FUZZ_ACCEPT);
  for (int i = 0; i < 40; i++) { /* truncated: never a whole object */
    gsize cut = fuzz_below(&c->rng, n - 1);
    config_case(c, "truncated.json", good_config, cut, FUZZ_REFUSE);
  }
  for (int i = 0; i < 60; i++) { /* a byte that is never valid JSON */
    g_autofree char *text = g_strdup(good_config);
    text[fuzz_below(&c->rng, n)] = (char)fuzz_never_valid_byte(&c->rng);
    config_case(c, "never-valid.json", text, n, FUZZ_REFUSE);
  }
  for (int i = 0; i < 60; i++) { /* any byte anywhere */
    g_autofree char *text = g_strdup(good_config);
    text[fuzz_below(&c->rng, n)] = (char)fuzz_next(&c->rng);
    config_case(c, "random-byte.json", text, n, FUZZ_EITHER);
  }
  for (int i = 0; i < 20; i++) { /* noise */
    guint8 noise[300];
    for (gsize k = 0; k < sizeof noise; k++)
      noise[k] = (guint8)fuzz_next(&c->rng);
    config_case(c, "noise.json", (const char *)noise, sizeof noise, FUZZ_REFUSE);
  }
  const char *nested = "{\"block_out_channels\": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
                       "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"
                       "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}";
  config_case(c, "deep.json", nested, strlen(nested), FUZZ_REFUSE);
  wrong_values(c);
}

/* ---- the weights file ---- */

static void weights_cases(Ctx *c)
{
  static const CohortVaeConfig cfg = {
      .in_channels = 3,
      .out_channels = 3,
      .n_blocks = 2,
      .block_out_channels = {8, 16},
      .layers_per_block = 1,
      .latent_channels = 4,
      .norm_num_groups = 4,
      .scaling_factor = 0.5,
      .use_quant_conv = TRUE,
      .use_post_quant_conv = TRUE,
      .mid_block_add_attention = TRUE,
      .sample_size = 8,
  };
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortVae) v =
      cohort_vae_new(cohort_backend_cpu(), &cfg, COHORT_VAE_ENCODE, 1, 8, 1, &error);
  g_assert_no_error(error);
  g_autofree char *good = g_build_filename(c->t.dir, "good-vae", NULL);
  g_assert_true(cohort_vae_save(v, good, &error));
  g_autofree char *wpath = g_build_filename(good, "diffusion_pytorch_model.safetensors", NULL);
  g_autofree char *cpath = g_build_filename(good, "config.json", NULL);
  g_autofree char *bytes = NULL, *json = NULL;
  gsize len = 0, jlen = 0;
  g_assert_true(g_file_get_contents(wpath, &bytes, &len, NULL));
  g_assert_true(g_file_get_contents(cpath, &json, &jlen, NULL));
  for (int i = 0; i < 60; i++) {
    g_autofree char *dir = fuzz_case_path(&c->t, "vae");
    g_mkdir(dir, 0755);
    g_autofree char *w = g_build_filename(dir, "diffusion_pytorch_model.safetensors", NULL);
    g_autofree char *cj = g_build_filename(dir, "config.json", NULL);
    fuzz_write(cj, json, jlen);
    g_autofree char *copy = g_memdup2(bytes, len);
    gsize n = len;
    gboolean header = i % 3 != 2;
    if (i % 3 == 0)
      n = fuzz_below(&c->rng, len); /* truncated anywhere */
    else /* a flipped byte in the header (breaks it) or in the data (values change) */
      copy[header ? 8 + fuzz_below(&c->rng, 400) : len - 1 - fuzz_below(&c->rng, 200)] ^=
          (char)(1 + fuzz_below(&c->rng, 255));
    fuzz_write(w, copy, n);
    c->t.cases++;
    fuzz_set_current(w);
    g_autoptr(GError) e = NULL;
    g_autoptr(CohortVae) got =
        cohort_vae_load(cohort_backend_cpu(), dir, COHORT_VAE_ENCODE, 1, 8, &e);
    fuzz_set_current("");
    if (got) {
      c->t.accepted++;
      if (i % 3 == 0)
        fuzz_fail(&c->t, w, "accepted a truncated weights file");
    } else {
      c->t.refused++;
      if (!strstr(e->message, dir) || strchr(e->message, '\n'))
        fuzz_fail(&c->t, w, "the error is not one line naming the file: %s", e->message);
    }
  }
}

/* ---- the latent cache ---- */

#define FLOATS 5

static void journal_cases(Ctx *c)
{
  g_autofree char *path = g_build_filename(c->t.dir, "good-latents.bin", NULL);
  g_autoptr(GError) error = NULL;
  CohortLatentCache *j = cohort_latent_cache_open(path, FLOATS, &error);
  g_assert_no_error(error);
  enum { N = 12 };
  guint8 keys[N][32];
  float vals[N][FLOATS];
  for (int k = 0; k < N; k++) {
    for (int b = 0; b < 32; b++)
      keys[k][b] = (guint8)fuzz_next(&c->rng);
    for (int f = 0; f < FLOATS; f++)
      vals[k][f] = (float)(k * 100 + f);
    g_assert_true(cohort_latent_cache_append(j, keys[k], vals[k], &error));
  }
  cohort_latent_cache_free(j);
  g_autofree char *bytes = NULL;
  gsize len;
  g_assert_true(g_file_get_contents(path, &bytes, &len, NULL));
  gsize rec = 32 + 4 + 4 * FLOATS;
  for (int i = 0; i < 120; i++) {
    g_autofree char *p = fuzz_case_path(&c->t, "latents.bin");
    g_autofree char *copy = g_memdup2(bytes, len);
    gsize n = len, damaged = len; /* where the damage starts */
    int kind = i % 3;
    if (kind == 0) {
      n = fuzz_below(&c->rng, len + 1);
      damaged = n;
    } else if (kind == 1) {
      damaged = fuzz_below(&c->rng, len);
      copy[damaged] ^= (char)(1 + fuzz_below(&c->rng, 255));
    } else {
      for (gsize k = 0; k < len; k++)
        copy[k] = (char)fuzz_next(&c->rng);
      damaged = 0;
    }
    fuzz_write(p, copy, n);
    c->t.cases++;
    fuzz_set_current(p);
    g_autoptr(GError) e = NULL;
    CohortLatentCache *got = cohort_latent_cache_open(p, FLOATS, &e);
    fuzz_set_current("");
    if (!got) {
      fuzz_fail(&c->t, p, "a damaged cache must open (afresh or cut), got: %s", e->message);
      continue;
    }
    c->t.accepted++;
    /* exactly the records wholly before the damage survive (a damaged header: none) */
    guint want = damaged < 32 ? 0 : (guint)MIN((damaged - 32) / rec, N);
    if (cohort_latent_cache_count(got) != want)
      fuzz_fail(&c->t, p, "%u records kept, %u intact before the damage at byte %zu",
                cohort_latent_cache_count(got), want, (size_t)damaged);
    for (guint k = 0; k < want; k++) {
      const float *v = cohort_latent_cache_lookup(got, keys[k]);
      if (!v || memcmp(v, vals[k], sizeof vals[k]) != 0)
        fuzz_fail(&c->t, p, "record %u lost or changed", k);
    }
    /* appending goes on after the cut, and reads back */
    if (!cohort_latent_cache_append(got, keys[N - 1], vals[N - 1], &e))
      fuzz_fail(&c->t, p, "cannot append after opening: %s", e->message);
    cohort_latent_cache_free(got);
    got = cohort_latent_cache_open(p, FLOATS, &e);
    if (!got || !cohort_latent_cache_lookup(got, keys[N - 1]))
      fuzz_fail(&c->t, p, "the appended record is not there after reopening");
    cohort_latent_cache_free(got);
  }
}

static void test_fuzz_vae(void)
{
  Ctx c = {.rng = fuzz_rng_new(27)};
  fuzz_tally_init(&c.t, "vae");
  fuzz_watch_crashes();
  broken_configs(&c);
  weights_cases(&c);
  journal_cases(&c);
  fuzz_tally_finish(&c.t, 500);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  cohort_backend_cpu()->set_threads(1);
  g_test_add_func("/fuzz/vae", test_fuzz_vae);
  return g_test_run();
}

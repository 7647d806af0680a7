/* Sampling a DiT: Euler integration of dx/dt = v(x, t) from pure noise at t = 1 to an image
 * at t = 0, with classifier-free guidance v = v_uncond + s·(v_cond − v_uncond), and the
 * sample grid the trainer writes every sample_every steps. */
#include "engine/models/dit-private.h"
#include "engine/base/phase.h"

#include <math.h>
#include <glib/gstdio.h>

#include "data/image-decode.h"
#include "data/example-rng.h"
#include "engine/models/text-encoder.h"
#include "engine/models/vae.h"

/* Columns of the sample grid and most rows (classes) it shows. */
#define GRID_COLS     8
#define GRID_MAX_ROWS 10
#define GRID_PAD      2
/* The grid's noise never changes over a run, so grids of successive steps compare. */
#define GRID_SEED_SALT 0x6772696473ull

static void noise(guint64 seed, guint64 index, float *x, size_t n)
{
  CohortExampleRng rng;
  cohort_example_rng_init(&rng, seed, 0, index, COHORT_RNG_STREAM_NOISE);
  for (size_t i = 0; i < n; i += 2) {
    double u1 = 1.0 - cohort_example_rng_uniform(&rng);
    double u2 = cohort_example_rng_uniform(&rng);
    double r = sqrt(-2.0 * log(u1));
    x[i] = (float)(r * cos(2.0 * G_PI * u2));
    if (i + 1 < n)
      x[i + 1] = (float)(r * sin(2.0 * G_PI * u2));
  }
}

/* The time of Euler step k of `steps` (1 at k = 0, 0 at k = steps), with the training shift
 * applied so sampling spends its steps where training put its timesteps. */
static double time_at(const Dit *d, int k, int steps)
{
  double t = 1.0 - (double)k / steps;
  double s = d->timestep_shift;
  return s * t / (1.0 + (s - 1.0) * t);
}

/* One chunk of at most max_batch (or half of it with guidance) images, in place in x. */
static void integrate(CohortModel *m, const int *labels, int n, int steps, double cfg_scale,
                      float *x)
{
  Dit *d = dit_of(m);
  size_t D = (size_t)d->shape.channels * d->shape.image_size * d->shape.image_size;
  gboolean guided = cfg_scale != 1.0 && d->shape.num_classes > 0;
  int rows = guided ? 2 * n : n;
  g_autofree float *xin = g_new(float, rows *D);
  g_autofree float *v = g_new(float, rows *D);
  g_autofree float *tt = g_new(float, rows);
  g_autofree int *lab = g_new(int, rows);
  for (int i = 0; i < n; i++) {
    lab[i] = labels[i];
    if (guided)
      lab[n + i] = d->shape.num_classes; /* the "no label" row */
  }
  for (int k = 0; k < steps; k++) {
    cohort_phase_tick(); /* a long sample keeps the ranks waiting for rank 0 alive */
    double t = time_at(d, k, steps), t_next = time_at(d, k + 1, steps);
    for (int i = 0; i < rows; i++)
      tt[i] = (float)t;
    memcpy(xin, x, n * D * sizeof(float));
    if (guided)
      memcpy(xin + n * D, x, n * D * sizeof(float));
    cohort_dit_velocity(m, xin, tt, lab, rows, v);
    float dt = (float)(t_next - t);
    for (size_t j = 0; j < n * D; j++) {
      float vj = guided ? v[n * D + j] + (float)cfg_scale * (v[j] - v[n * D + j]) : v[j];
      x[j] += dt * vj;
    }
  }
}

void cohort_dit_generate(CohortModel *m, const int *labels, int n, guint64 seed, int steps,
                         double cfg_scale, float *out)
{
  Dit *d = dit_of(m);
  size_t D = (size_t)d->shape.channels * d->shape.image_size * d->shape.image_size;
  gboolean guided = cfg_scale != 1.0 && d->shape.num_classes > 0;
  int chunk = MAX(guided ? m->max_batch / 2 : m->max_batch, 1);
  for (int i = 0; i < n; i++)
    noise(seed, (guint64)i, out + i * D, D);
  for (int start = 0; start < n; start += chunk)
    integrate(m, labels + start, MIN(chunk, n - start), steps, cfg_scale, out + start * D);
}

/* Images decoded at a time when samples go through the VAE. */
#define DECODE_BATCH 8

gboolean cohort_dit_to_pixels(CohortModel *m, const float *samples, int n, float **pixels, int *C,
                              int *S, GError **error)
{
  Dit *d = dit_of(m);
  size_t D = (size_t)d->shape.channels * d->shape.image_size * d->shape.image_size;
  if (!d->vae_dir) {
    *C = d->shape.channels;
    *S = d->shape.image_size;
    *pixels = g_memdup2(samples, n * D * sizeof(float));
    return TRUE;
  }
  if (!d->vae) {
    d->vae =
        cohort_vae_load(m->be, d->vae_dir, COHORT_VAE_DECODE, DECODE_BATCH, d->pixel_size, error);
    if (!d->vae)
      return FALSE;
  }
  const CohortVaeConfig *vc = cohort_vae_get_config(d->vae);
  if (vc->latent_channels != d->shape.channels ||
      cohort_vae_latent_size(d->vae) != d->shape.image_size) {
    g_set_error(error, G_FILE_ERROR, G_FILE_ERROR_INVAL,
                "%s: its latents are %d×%d×%d, the model's %d×%d×%d: the VAE changed under the "
                "model",
                d->vae_dir, vc->latent_channels, cohort_vae_latent_size(d->vae),
                cohort_vae_latent_size(d->vae), d->shape.channels, d->shape.image_size,
                d->shape.image_size);
    return FALSE;
  }
  *C = vc->out_channels;
  *S = d->pixel_size;
  size_t P = (size_t)*C * *S * *S;
  *pixels = g_new(float, n *P);
  for (int i = 0; i < n; i += DECODE_BATCH) {
    int b = MIN(DECODE_BATCH, n - i);
    cohort_vae_decode(d->vae, samples + i * D, b, *pixels + i * P);
  }
  return TRUE;
}

/* [-1, 1] to 8 bits, clamped and rounded. */
static guint8 to_byte(float v)
{
  float x = (v + 1.0f) * 127.5f;
  return (guint8)(x <= 0 ? 0 : x >= 255 ? 255 : lrintf(x));
}

/* Images [n, C, S, S] into a padded grid of `cols` columns, interleaved for PNG. */
static guint8 *grid_pixels(const float *imgs, int n, int cols, int C, int S, int *w, int *h)
{
  int rows = (n + cols - 1) / cols;
  *w = cols * S + (cols + 1) * GRID_PAD;
  *h = rows * S + (rows + 1) * GRID_PAD;
  guint8 *px = g_new0(guint8, (size_t)*w * *h * C);
  for (int i = 0; i < n; i++) {
    int x0 = GRID_PAD + (i % cols) * (S + GRID_PAD), y0 = GRID_PAD + (i / cols) * (S + GRID_PAD);
    for (int c = 0; c < C; c++)
      for (int y = 0; y < S; y++)
        for (int x = 0; x < S; x++)
          px[((size_t)(y0 + y) * *w + x0 + x) * C + c] =
              to_byte(imgs[(((size_t)i * C + c) * S + y) * S + x]);
  }
  return px;
}

/* Samples [n] (model space) as a PNG grid of `cols` columns: the workspace's
 * samples/step-N.png, or the path the request names; its path into fields' "image". */
static gboolean write_grid(CohortModel *m, const CohortSampleRequest *req, const float *drawn,
                           int n, int cols, JsonObject *fields, GError **error)
{
  g_autofree float *imgs = NULL;
  int C, S;
  if (!cohort_dit_to_pixels(m, drawn, n, &imgs, &C, &S, error))
    return FALSE;
  int w, h;
  g_autofree guint8 *px = grid_pixels(imgs, n, cols, C, S, &w, &h);
  g_autofree char *name = g_strdup_printf("step-%08" G_GINT64_FORMAT ".png", req->step);
  g_autofree char *path = req->image_path ? g_strdup(req->image_path)
                                          : g_build_filename(req->workspace, "samples", name, NULL);
  /* The workspace's samples/ folder is made here; a path the user named must be in a folder
   * that exists (engine/train/sample-saved.c checks it first). */
  g_autofree char *dir = g_path_get_dirname(path);
  if (!req->image_path && g_mkdir_with_parents(dir, 0755) != 0) {
    g_set_error(error, G_FILE_ERROR, g_file_error_from_errno(errno), "%s: cannot create: %s", dir,
                g_strerror(errno));
    return FALSE;
  }
  if (!cohort_image_write_png(path, px, w, h, C, error))
    return FALSE;
  json_object_set_string_member(fields, COHORT_FIELD_IMAGE, path);
  return TRUE;
}

gboolean cohort_dit_sample(CohortModel *m, const CohortSampleRequest *req, JsonObject *fields,
                           GError **error)
{
  Dit *d = dit_of(m);
  const CohortConfig *cfg = req->cfg;
  int classes = d->shape.num_classes;
  int rows = classes > 0 ? MIN(classes, GRID_MAX_ROWS) : 4;
  int n = rows * GRID_COLS;
  g_autofree int *labels = g_new(int, n);
  JsonArray *shown = json_array_new();
  for (int r = 0; r < rows; r++) {
    /* classes spread evenly over the range, so a grid of 36 glyphs shows 0 … Z */
    int cls = classes > 0 ? (int)((gint64)r * classes / rows) : classes;
    for (int j = 0; j < GRID_COLS; j++)
      labels[r * GRID_COLS + j] = cls;
    if (classes > 0 && req->class_names)
      json_array_add_string_element(shown, req->class_names[cls]);
    else if (classes > 0)
      json_array_add_int_element(shown, cls);
  }
  size_t D = (size_t)d->shape.channels * d->shape.image_size * d->shape.image_size;
  g_autofree float *drawn = g_new(float, n *D);
  cohort_dit_generate(m, labels, n, (guint64)cfg->seed ^ GRID_SEED_SALT, cfg->sample_steps,
                      cfg->cfg_scale, drawn);
  if (req->compute_only) {
    json_array_unref(shown);
    return TRUE;
  }
  if (!write_grid(m, req, drawn, n, GRID_COLS, fields, error)) {
    json_array_unref(shown);
    return FALSE;
  }
  json_object_set_array_member(fields, COHORT_FIELD_ROWS, shown);
  json_object_set_int_member(fields, COHORT_FIELD_STEPS, cfg->sample_steps);
  json_object_set_double_member(fields, COHORT_FIELD_CFG_SCALE, cfg->cfg_scale);
  return TRUE;
}

/* The text layout: Euler integration of the prompts' images in chunks, each step running the
 * conditional rows and, with guidance, the same images with the empty caption (no text token). */
typedef struct {
  int n_prompts;
  char **prompts;
  float **emb; /* [len, D] of each prompt */
  int *len;
  int M; /* the longest prompt in tokens (at least 1) */
} Prompts;

static void text_integrate(Dit *d, const Prompts *p, const int *which, int n, int steps,
                           double cfg_scale, float *x)
{
  int Dt = d->shape.text_dim, M = p->M;
  size_t D = (size_t)d->shape.channels * d->shape.image_size * d->shape.image_size;
  gboolean guided = cfg_scale != 1.0;
  int rows = guided ? 2 * n : n;
  g_autofree float *xin = g_new(float, rows *D);
  g_autofree float *v = g_new(float, rows *D);
  g_autofree float *tt = g_new(float, rows);
  g_autofree float *text = g_new0(float, (size_t)rows *M *Dt);
  g_autofree int *klen = g_new0(int, rows); /* the guided rows: the empty caption, klen 0 */
  for (int i = 0; i < n; i++) {
    int k = which[i];
    klen[i] = p->len[k];
    if (p->len[k])
      memcpy(text + (size_t)i * M * Dt, p->emb[k], (size_t)p->len[k] * Dt * sizeof(float));
  }
  for (int k = 0; k < steps; k++) {
    cohort_phase_tick();
    double t = time_at(d, k, steps), t_next = time_at(d, k + 1, steps);
    for (int i = 0; i < rows; i++)
      tt[i] = (float)t;
    memcpy(xin, x, n * D * sizeof(float));
    if (guided)
      memcpy(xin + n * D, x, n * D * sizeof(float));
    cohort_dit_text_run(d, xin, tt, text, klen, rows, M);
    d->have_targets = FALSE;
    d->base.be->download(v, d->tacts.pred, rows * D * sizeof(float));
    float dt = (float)(t_next - t);
    for (size_t j = 0; j < n * D; j++) {
      float vj = guided ? v[n * D + j] + (float)cfg_scale * (v[j] - v[n * D + j]) : v[j];
      x[j] += dt * vj;
    }
  }
}

static void prompts_clear(Prompts *p)
{
  for (int k = 0; k < p->n_prompts; k++)
    g_free(p->emb[k]);
  g_free(p->emb);
  g_free(p->len);
  g_strfreev(p->prompts);
}

/* The prompts of a sample: sample_prompts' captions (trimmed), else sample_prompt alone; each
 * encoded by the model's text encoder (opened on first use, kept with the model). */
static gboolean text_prompts(Dit *d, const CohortConfig *cfg, Prompts *p, GError **error)
{
  if (!d->encoder) {
    d->encoder = cohort_text_encoder_open(d->base.be, cfg, error);
    if (!d->encoder)
      return FALSE;
  }
  if (cfg->sample_prompts && *cfg->sample_prompts) {
    p->prompts = g_strsplit(cfg->sample_prompts, "|", -1);
    for (char **q = p->prompts; *q; q++)
      g_strstrip(*q);
  } else {
    p->prompts = g_new0(char *, 2);
    p->prompts[0] = g_strdup(cfg->sample_prompt ? cfg->sample_prompt : "");
  }
  p->n_prompts = (int)g_strv_length(p->prompts);
  p->emb = g_new0(float *, p->n_prompts);
  p->len = g_new0(int, p->n_prompts);
  p->M = 1;
  for (int k = 0; k < p->n_prompts; k++) {
    if (!cohort_text_encoder_encode(d->encoder, p->prompts[k], &p->emb[k], &p->len[k], error))
      return FALSE;
    p->M = MAX(p->M, p->len[k]);
  }
  return TRUE;
}

void cohort_dit_text_generate(CohortModel *m, const float *const *emb, const int *len, int M,
                              const int *which, int n, guint64 seed, int steps, double cfg_scale,
                              float *out)
{
  Dit *d = dit_of(m);
  size_t D = (size_t)d->shape.channels * d->shape.image_size * d->shape.image_size;
  int chunk = MAX(cfg_scale != 1.0 ? m->max_batch / 2 : m->max_batch, 1);
  Prompts p = {.emb = (float **)emb, .len = (int *)len, .M = M};
  for (int i = 0; i < n; i++)
    noise(seed, (guint64)i, out + i * D, D);
  for (int start = 0; start < n; start += chunk)
    text_integrate(d, &p, which + start, MIN(chunk, n - start), steps, cfg_scale, out + start * D);
}

gboolean cohort_dit_text_sample(CohortModel *m, const CohortSampleRequest *req, JsonObject *fields,
                                GError **error)
{
  Dit *d = dit_of(m);
  const CohortConfig *cfg = req->cfg;
  Prompts p = {0};
  if (!text_prompts(d, cfg, &p, error)) {
    prompts_clear(&p);
    return FALSE;
  }
  gboolean listed = cfg->sample_prompts && *cfg->sample_prompts;
  int n = listed ? p.n_prompts * GRID_COLS : cfg->sample_count;
  int cols = listed ? GRID_COLS : MIN(n, GRID_COLS);
  g_autofree int *which = g_new(int, n);
  for (int i = 0; i < n; i++)
    which[i] = listed ? i / GRID_COLS : 0;
  size_t D = (size_t)d->shape.channels * d->shape.image_size * d->shape.image_size;
  g_autofree float *drawn = g_new(float, n *D);
  cohort_dit_text_generate(m, (const float *const *)p.emb, p.len, p.M, which, n,
                           (guint64)cfg->seed ^ GRID_SEED_SALT, cfg->sample_steps, cfg->cfg_scale,
                           drawn);
  JsonArray *shown = json_array_new();
  for (int k = 0; k < p.n_prompts; k++)
    json_array_add_string_element(shown, p.prompts[k]);
  prompts_clear(&p);
  gboolean ok = req->compute_only || write_grid(m, req, drawn, n, cols, fields, error);
  if (ok && !req->compute_only) {
    json_object_set_array_member(fields, COHORT_FIELD_ROWS, shown);
    json_object_set_int_member(fields, COHORT_FIELD_STEPS, cfg->sample_steps);
    json_object_set_double_member(fields, COHORT_FIELD_CFG_SCALE, cfg->cfg_scale);
  } else {
    json_array_unref(shown);
  }
  return ok;
}

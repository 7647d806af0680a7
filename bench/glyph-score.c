/* glyph-score: does a trained DiT draw the characters it is asked for? An objective check of
 * samples without a trained classifier: it draws `per_class` images of every class of the
 * reference set with the model's own sampler (Euler, classifier-free guidance), and labels
 * each drawn image with the class of its nearest neighbour (Euclidean distance in pixels)
 * among the reference images. The score is the fraction labelled as the class asked for.
 * A latent DiT (vae_from) is scored in pixel space: its samples are decoded through its VAE
 * first. Colour images are compared by their value channel (the largest of R, G, B at each
 * pixel), where a glyph of the colour set is bright whatever its hue and the textured
 * background dark, so colours do not decide the neighbour; the reference is then the colour
 * set's validation images.
 * Two baselines show what the score means: pure noise images (the sampler's starting point)
 * and the reference images themselves scored against the reference set without themselves
 * (what real glyphs reach: two faces of one letter can be nearer to another letter).
 *
 *   glyph-score MODEL_DIR [--reference FOLDER] [--per-class N] [--steps S] [--cfg-scale X]
 *
 * MODEL_DIR is an exported model folder or a checkpoint folder (see cohort-train --sample).
 * Prints one JSON object: accuracy, noise_baseline, reference_accuracy, chance, per_class. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "data/images.h"
#include "data/example-rng.h"
#include "engine/models/dit.h"
#include "engine/train/sample-saved.h"

typedef struct {
  const CohortImageSet *ref;
  int C, P;       /* channels, pixels per channel */
  gssize exclude; /* a reference index to leave out, or -1 */
} Reference;

/* The compared form of an image [C, P]: itself (grey), or its value channel (colour), in v [P]. */
static void compared(const Reference *r, const float *img, float *v)
{
  for (int p = 0; p < r->P; p++) {
    float m = img[p];
    for (int c = 1; c < r->C; c++)
      m = MAX(m, img[(size_t)c * r->P + p]);
    v[p] = m;
  }
}

static int nearest_label(const Reference *r, const float *img, float *scratch)
{
  double best = INFINITY;
  int label = -1;
  g_autofree float *a = g_new(float, r->P), *b = g_new(float, r->P);
  compared(r, img, a);
  for (gsize i = 0; i < cohort_image_set_len(r->ref); i++) {
    if ((gssize)i == r->exclude)
      continue;
    int l;
    cohort_image_set_get(r->ref, i, scratch, &l);
    compared(r, scratch, b);
    double d = 0;
    for (int k = 0; k < r->P; k++)
      d += (double)(a[k] - b[k]) * (a[k] - b[k]);
    if (d < best) {
      best = d;
      label = l;
    }
  }
  return label;
}

int main(int argc, char **argv)
{
  g_autofree char *reference = NULL;
  int per_class = 4, steps = 32;
  double cfg_scale = 3.0;
  GOptionEntry entries[] = {
      {"reference", 0, 0, G_OPTION_ARG_FILENAME, &reference,
       "Reference images (default: the built-in glyphs' validation set, or the colour set's for "
       "a colour model)",
       "FOLDER"},
      {"per-class", 0, 0, G_OPTION_ARG_INT, &per_class, "Images drawn per class (4)", "N"},
      {"steps", 0, 0, G_OPTION_ARG_INT, &steps, "Euler steps (32)", "S"},
      {"cfg-scale", 0, 0, G_OPTION_ARG_DOUBLE, &cfg_scale, "Guidance scale (3)", "X"},
      {NULL, 0, 0, 0, NULL, NULL, NULL},
  };
  g_autoptr(GOptionContext) ctx = g_option_context_new("MODEL_DIR - score a DiT's glyph samples");
  g_option_context_add_main_entries(ctx, entries, NULL);
  g_autoptr(GError) error = NULL;
  if (!g_option_context_parse(ctx, &argc, &argv, &error) || argc != 2 || per_class < 1) {
    fprintf(stderr, "glyph-score: %s\n", error ? error->message : "give one MODEL_DIR");
    return 2;
  }
  g_autoptr(CohortConfig) cfg = NULL;
  g_autoptr(CohortModel) m = cohort_model_load_saved(argv[1], NULL, 64, &cfg, NULL, &error);
  if (!m) {
    fprintf(stderr, "glyph-score: %s\n", error->message);
    return 1;
  }
  const CohortDitShape *s = cohort_dit_shape(m);
  /* what the samples are scored as: the images the model's data had (decoded latents) */
  int S = cfg->image_size, C = cfg->image_channels;
  g_autofree char *ref_path =
      reference ? g_strdup(reference)
                : cohort_resolve_path(C == 3 ? "builtin:colour-glyphs/val" : "builtin:glyphs/val");
  g_autoptr(CohortImageSet) ref = cohort_image_set_open(ref_path, S, C, FALSE, NULL, &error);
  if (!ref) {
    fprintf(stderr, "glyph-score: %s\n", error->message);
    return 1;
  }
  int classes = cohort_image_set_num_classes(ref);
  if (classes != s->num_classes) {
    fprintf(stderr, "glyph-score: %s has %d classes, the model %d\n", ref_path, classes,
            s->num_classes);
    return 1;
  }
  int L = s->channels * s->image_size * s->image_size, D = C * S * S, n = classes * per_class;
  g_autofree int *labels = g_new(int, n);
  for (int i = 0; i < n; i++)
    labels[i] = i / per_class;
  g_autofree float *drawn = g_new(float, (size_t)n *L);
  g_autofree float *scratch = g_new(float, D);
  cohort_dit_generate(m, labels, n, 12345, steps, cfg_scale, drawn);
  g_autofree float *imgs = NULL;
  int dc, ds;
  if (!cohort_dit_to_pixels(m, drawn, n, &imgs, &dc, &ds, &error)) {
    fprintf(stderr, "glyph-score: %s\n", error->message);
    return 1;
  }
  g_assert(dc == C && ds == S);
  Reference r = {ref, C, S * S, -1};
  g_autofree int *right = g_new0(int, classes);
  int correct = 0, noise_correct = 0;
  g_autofree float *noise = g_new(float, D);
  for (int i = 0; i < n; i++) {
    gboolean ok = nearest_label(&r, imgs + (size_t)i * D, scratch) == labels[i];
    correct += ok;
    right[labels[i]] += ok;
    CohortExampleRng rng;
    cohort_example_rng_init(&rng, 99, 0, (guint64)i, COHORT_RNG_STREAM_NOISE);
    for (int k = 0; k < D; k++)
      noise[k] = cohort_example_rng_uniform(&rng) < 0.5 ? -1.0f : 1.0f;
    noise_correct += nearest_label(&r, noise, scratch) == labels[i];
  }
  /* What real glyphs reach: each reference image against the others. */
  int ref_correct = 0, ref_n = (int)cohort_image_set_len(ref);
  g_autofree float *img = g_new(float, D);
  for (int i = 0; i < ref_n; i++) {
    int l;
    cohort_image_set_get(ref, (gsize)i, img, &l);
    r.exclude = i;
    ref_correct += nearest_label(&r, img, scratch) == l;
  }
  printf("{\"accuracy\": %.4f, \"noise_baseline\": %.4f, \"reference_accuracy\": %.4f, "
         "\"chance\": %.4f, \"images\": %d, \"per_class\": [",
         (double)correct / n, (double)noise_correct / n, (double)ref_correct / ref_n, 1.0 / classes,
         n);
  for (int c = 0; c < classes; c++)
    printf("%s%.2f", c ? ", " : "", (double)right[c] / per_class);
  printf("]}\n");
  return 0;
}

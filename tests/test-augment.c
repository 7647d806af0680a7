/* Augmentation: none/crop/crop_flip/flip against hand-computed pixels; the draws are a function
 * of (seed, epoch, sample index) only — the same key gives the same image whatever else was
 * drawn before, other keys differ — and are uniform over their range. */
#include <stdlib.h>
#include <string.h>
#include "data/augment.h"
#include "data/example-rng.h"

enum { C = 2, H = 6, W = 6 };

/* in[c][y][x] = 100 c + 10 y + x, so every output value says where it came from. */
static void fill_source(float *in)
{
  for (int c = 0; c < C; c++)
    for (int y = 0; y < H; y++)
      for (int x = 0; x < W; x++)
        in[(c * H + y) * W + x] = (float)(100 * c + 10 * y + x);
}

/* The first sample index whose draw is (top, left, flip) under `kind`. */
static guint64 find_index(CohortAugment kind, guint64 seed, guint64 epoch, int top, int left,
                          gboolean flip)
{
  for (guint64 i = 0; i < 100000; i++) {
    int t, l;
    gboolean f;
    cohort_augment_draw(kind, seed, epoch, i, &t, &l, &f);
    if (t == top && l == left && f == flip)
      return i;
  }
  g_error("no index draws top %d left %d flip %d", top, left, flip);
}

#define P (-1.0f) /* padding */

static void test_hand_computed(void)
{
  float in[C * H * W], out[C * H * W];
  fill_source(in);

  /* top 2, left 5: the window starts 2 rows above and 1 column right of the image. */
  guint64 i = find_index(COHORT_AUGMENT_CROP, 7, 3, 2, 5, FALSE);
  cohort_augment_apply(COHORT_AUGMENT_CROP, 7, 3, i, C, H, W, in, NULL, out);
  const float want_crop[H][W] = {
      {P, P, P, P, P, P},      {P, P, P, P, P, P},      {1, 2, 3, 4, 5, P},
      {11, 12, 13, 14, 15, P}, {21, 22, 23, 24, 25, P}, {31, 32, 33, 34, 35, P},
  };
  g_assert_cmpmem(out, sizeof want_crop, want_crop, sizeof want_crop);
  for (int k = 0; k < H * W; k++) { /* channel 1 is moved the same way */
    float v = want_crop[k / W][k % W];
    g_assert_cmpfloat(out[H * W + k], ==, v == P ? P : 100 + v);
  }

  /* top 4, left 4, flipped: the image mirrored left-right. */
  i = find_index(COHORT_AUGMENT_CROP_FLIP, 7, 3, 4, 4, TRUE);
  cohort_augment_apply(COHORT_AUGMENT_CROP_FLIP, 7, 3, i, C, H, W, in, NULL, out);
  for (int c = 0; c < C; c++)
    for (int y = 0; y < H; y++)
      for (int x = 0; x < W; x++)
        g_assert_cmpfloat(out[(c * H + y) * W + x], ==, (float)(100 * c + 10 * y + (W - 1 - x)));

  /* top 8, left 0, flipped: the crop shows source rows 4, 5 at y = 0, 1 and source
   * columns 0, 1 at x = 4, 5; the flip then brings those columns to x = 1, 0. */
  i = find_index(COHORT_AUGMENT_CROP_FLIP, 7, 3, 8, 0, TRUE);
  cohort_augment_apply(COHORT_AUGMENT_CROP_FLIP, 7, 3, i, C, H, W, in, NULL, out);
  const float want_flip[H][W] = {
      {41, 40, P, P, P, P}, {51, 50, P, P, P, P}, {P, P, P, P, P, P},
      {P, P, P, P, P, P},   {P, P, P, P, P, P},   {P, P, P, P, P, P},
  };
  g_assert_cmpmem(out, sizeof want_flip, want_flip, sizeof want_flip);

  /* none: the image as it is. */
  cohort_augment_apply(COHORT_AUGMENT_NONE, 7, 3, i, C, H, W, in, NULL, out);
  g_assert_cmpmem(out, sizeof out, in, sizeof in);
}

/* Same key, same result, whatever was drawn in between and in whatever order the indices
 * come (two "ranks" taking every other index, backwards, equal one pass). */
static void test_pure_function_of_key(void)
{
  enum { N = 64 };
  float in[C * H * W];
  fill_source(in);
  static float one[N][C * H * W], split[N][C * H * W];
  for (int i = 0; i < N; i++)
    cohort_augment_apply(COHORT_AUGMENT_CROP_FLIP, 42, 5, (guint64)i, C, H, W, in, NULL, one[i]);
  for (int rank = 0; rank < 2; rank++) {
    for (int i = N - 2 + rank; i >= 0; i -= 2) {
      float scratch[C * H * W];
      cohort_augment_apply(COHORT_AUGMENT_CROP_FLIP, 1, 1, (guint64)i + 7, C, H, W, in, NULL,
                           scratch);
      cohort_augment_apply(COHORT_AUGMENT_CROP_FLIP, 42, 5, (guint64)i, C, H, W, in, NULL,
                           split[i]);
    }
  }
  g_assert_cmpmem(one, sizeof one, split, sizeof split);

  /* Other indices, epochs and seeds give other draws. */
  int distinct = 0;
  for (int i = 1; i < N; i++)
    distinct += memcmp(one[i], one[0], sizeof one[0]) != 0;
  g_assert_cmpint(distinct, >=, N - 4);
  int same_epoch = 0, same_seed = 0;
  for (int i = 0; i < N; i++) {
    int t0, l0, t1, l1, t2, l2;
    gboolean f0, f1, f2;
    cohort_augment_draw(COHORT_AUGMENT_CROP_FLIP, 42, 5, (guint64)i, &t0, &l0, &f0);
    cohort_augment_draw(COHORT_AUGMENT_CROP_FLIP, 42, 6, (guint64)i, &t1, &l1, &f1);
    cohort_augment_draw(COHORT_AUGMENT_CROP_FLIP, 43, 5, (guint64)i, &t2, &l2, &f2);
    same_epoch += t0 == t1 && l0 == l1 && f0 == f1;
    same_seed += t0 == t2 && l0 == l2 && f0 == f2;
  }
  /* By chance 1 in 162 each. */
  g_assert_cmpint(same_epoch, <=, 3);
  g_assert_cmpint(same_seed, <=, 3);

  /* crop and crop_flip share the crop of a key; none draws nothing. */
  for (int i = 0; i < N; i++) {
    int t0, l0, t1, l1;
    gboolean f0, f1;
    cohort_augment_draw(COHORT_AUGMENT_CROP, 42, 5, (guint64)i, &t0, &l0, &f0);
    cohort_augment_draw(COHORT_AUGMENT_CROP_FLIP, 42, 5, (guint64)i, &t1, &l1, &f1);
    g_assert_true(t0 == t1 && l0 == l1 && !f0);
    cohort_augment_draw(COHORT_AUGMENT_NONE, 42, 5, (guint64)i, &t0, &l0, &f0);
    g_assert_true(t0 == COHORT_AUGMENT_PADDING && l0 == COHORT_AUGMENT_PADDING && !f0);
  }
}

/* Offsets cover 0..8 evenly and flips are fair (chi-square well inside its 99.9% bound). */
static void test_uniform(void)
{
  enum { N = 18000 };
  int tops[9] = {0}, lefts[9] = {0}, flips = 0;
  for (int i = 0; i < N; i++) {
    int t, l;
    gboolean f;
    cohort_augment_draw(COHORT_AUGMENT_CROP_FLIP, 2024, 0, (guint64)i, &t, &l, &f);
    g_assert_true(t >= 0 && t <= 8 && l >= 0 && l <= 8);
    tops[t]++, lefts[l]++, flips += f;
  }
  double chi_t = 0, chi_l = 0, e = N / 9.0;
  for (int k = 0; k < 9; k++) {
    chi_t += (tops[k] - e) * (tops[k] - e) / e;
    chi_l += (lefts[k] - e) * (lefts[k] - e) / e;
  }
  g_assert_cmpfloat(chi_t, <, 26.1); /* 8 degrees of freedom, p = 0.001 */
  g_assert_cmpfloat(chi_l, <, 26.1);
  g_assert_cmpint(abs(flips - N / 2), <, 300); /* ~4.5 standard deviations */

  /* below(n) for an n that does not divide 2^32, and uniform() in [0, 1). */
  CohortExampleRng rng;
  cohort_example_rng_init(&rng, 1, 2, 3, 4);
  int bins[3] = {0};
  for (int i = 0; i < 30000; i++)
    bins[cohort_example_rng_below(&rng, 3)]++;
  for (int k = 0; k < 3; k++)
    g_assert_cmpint(abs(bins[k] - 10000), <, 400);
  for (int i = 0; i < 1000; i++) {
    double u = cohort_example_rng_uniform(&rng);
    g_assert_true(u >= 0.0 && u < 1.0);
  }
}

static void test_names(void)
{
  const char *names[] = {"none", "crop", "crop_flip", "resized_crop_flip", "flip"};
  for (guint i = 0; i < G_N_ELEMENTS(names); i++) {
    CohortAugment kind;
    g_assert_true(cohort_augment_from_name(names[i], &kind));
    g_assert_cmpint(kind, ==, (int)i);
    g_assert_cmpstr(cohort_augment_name(kind), ==, names[i]);
  }
  CohortAugment kind = COHORT_AUGMENT_CROP;
  g_assert_false(cohort_augment_from_name("flop", &kind));
  g_assert_false(cohort_augment_from_name("", &kind));
  g_assert_false(cohort_augment_from_name(NULL, &kind));
  g_assert_cmpint(kind, ==, COHORT_AUGMENT_CROP);
}

/* flip alone: no shift, the same flip as crop_flip would not promise (its own draw), about half
 * mirrored, and a mirrored image is the input's columns reversed. */
static void test_flip_only(void)
{
  enum { C = 2, H = 3, W = 4 };
  float in[C * H * W], out[C * H * W];
  for (int i = 0; i < C * H * W; i++)
    in[i] = (float)i;
  int flipped = 0;
  for (guint64 i = 0; i < 2000; i++) {
    int top, left;
    gboolean flip;
    cohort_augment_draw(COHORT_AUGMENT_FLIP, 9, 1, i, &top, &left, &flip);
    g_assert_cmpint(top, ==, COHORT_AUGMENT_PADDING);
    g_assert_cmpint(left, ==, COHORT_AUGMENT_PADDING);
    flipped += flip;
    cohort_augment_apply(COHORT_AUGMENT_FLIP, 9, 1, i, C, H, W, in, NULL, out);
    for (int c = 0; c < C; c++)
      for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
          g_assert_cmpfloat(out[(c * H + y) * W + x], ==,
                            in[(c * H + y) * W + (flip ? W - 1 - x : x)]);
  }
  g_assert_cmpint(abs(flipped - 1000), <, 120);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/augment/flip-only", test_flip_only);
  g_test_add_func("/augment/hand-computed", test_hand_computed);
  g_test_add_func("/augment/pure-function-of-key", test_pure_function_of_key);
  g_test_add_func("/augment/uniform", test_uniform);
  g_test_add_func("/augment/names", test_names);
  return g_test_run();
}

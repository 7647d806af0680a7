/* The DistributedSampler against indices real PyTorch produced (tests/fixtures/sampler.json,
 * written by tests/gen_sampler_fixtures.py with python3-torch). */
#include <string.h>
#include <json-glib/json-glib.h>
#include "data/sampler.h"

static guint64 parse_u64(JsonObject *o, const char *key)
{
  const char *s = json_object_get_string_member(o, key);
  g_assert_nonnull(s);
  guint64 v = 0;
  g_assert_true(g_ascii_string_to_unsigned(s, 10, 0, G_MAXUINT64, &v, NULL));
  return v;
}

static void check_array(JsonArray *expect, const guint64 *got, guint64 offset)
{
  for (guint i = 0; i < json_array_get_length(expect); i++)
    g_assert_cmpuint(got[offset + i], ==, (guint64)json_array_get_int_element(expect, i));
}

static void test_fixtures(void)
{
  g_autofree char *path = g_test_build_filename(G_TEST_DIST, "fixtures", "sampler.json", NULL);
  g_autoptr(JsonParser) parser = json_parser_new();
  g_autoptr(GError) error = NULL;
  json_parser_load_from_file(parser, path, &error);
  g_assert_no_error(error);
  JsonArray *cases =
      json_object_get_array_member(json_node_get_object(json_parser_get_root(parser)), "cases");
  g_assert_cmpuint(json_array_get_length(cases), >, 300);

  guint n_large = 0;
  for (guint c = 0; c < json_array_get_length(cases); c++) {
    JsonObject *o = json_array_get_object_element(cases, c);
    CohortSamplerSpec spec = {
        .n = (guint64)json_object_get_int_member(o, "n"),
        .world_size = (int)json_object_get_int_member(o, "world"),
        .rank = (int)json_object_get_int_member(o, "rank"),
        .shuffle = json_object_get_boolean_member(o, "shuffle"),
        .seed = (gint64)parse_u64(o, "seed"),
        .drop_last = json_object_get_boolean_member(o, "drop_last"),
    };
    guint64 epoch = (guint64)json_object_get_int_member(o, "epoch");
    guint64 expect_n = (guint64)json_object_get_int_member(o, "num_samples");
    g_test_message("case %u: n=%" G_GUINT64_FORMAT " world=%d rank=%d seed=%" G_GINT64_FORMAT
                   " epoch=%" G_GUINT64_FORMAT " shuffle=%d drop_last=%d",
                   c, spec.n, spec.world_size, spec.rank, spec.seed, epoch, spec.shuffle,
                   spec.drop_last);

    g_assert_cmpuint(cohort_sampler_num_samples(&spec), ==, expect_n);
    guint64 n_got = 0;
    g_autofree guint64 *got = cohort_sampler_indices(&spec, epoch, &n_got);
    g_assert_cmpuint(n_got, ==, expect_n);

    if (json_object_has_member(o, "indices")) {
      JsonArray *idx = json_object_get_array_member(o, "indices");
      g_assert_cmpuint(json_array_get_length(idx), ==, n_got);
      check_array(idx, got, 0);
    } else {
      JsonArray *first = json_object_get_array_member(o, "first");
      JsonArray *last = json_object_get_array_member(o, "last");
      check_array(first, got, 0);
      check_array(last, got, n_got - json_array_get_length(last));
      guint64 sum = 0;
      for (guint64 i = 0; i < n_got; i++)
        sum += got[i];
      g_assert_cmpuint(sum, ==, parse_u64(o, "sum"));
      n_large++;
    }
  }
  g_assert_cmpuint(n_large, >=, 3);
}

static void test_randperm_is_permutation(void)
{
  const guint64 n = 1000;
  g_autofree guint64 *p = cohort_randperm(n, 5);
  g_autofree gboolean *seen = g_new0(gboolean, n);
  gboolean moved = FALSE;
  for (guint64 i = 0; i < n; i++) {
    g_assert_cmpuint(p[i], <, n);
    g_assert_false(seen[p[i]]);
    seen[p[i]] = TRUE;
    moved |= p[i] != i;
  }
  g_assert_true(moved);
}

/* Known values from torch.randperm(10, generator=torch.Generator().manual_seed(0)). */
static void test_randperm_known(void)
{
  static const guint64 expect[10] = {4, 1, 7, 5, 3, 9, 0, 8, 6, 2};
  g_autofree guint64 *p = cohort_randperm(10, 0);
  for (int i = 0; i < 10; i++)
    g_assert_cmpuint(p[i], ==, expect[i]);
}

static void test_epoch_changes_order(void)
{
  CohortSamplerSpec spec = {.n = 50, .world_size = 1, .rank = 0, .shuffle = TRUE, .seed = 3};
  guint64 na = 0, nb = 0;
  g_autofree guint64 *a = cohort_sampler_indices(&spec, 0, &na);
  g_autofree guint64 *b = cohort_sampler_indices(&spec, 1, &nb);
  g_assert_cmpuint(na, ==, 50);
  g_assert_cmpuint(nb, ==, 50);
  g_assert_false(memcmp(a, b, sizeof(guint64) * 50) == 0);
}

static void test_empty(void)
{
  CohortSamplerSpec spec = {.n = 0, .world_size = 2, .rank = 1, .shuffle = TRUE};
  guint64 n = 7;
  g_autofree guint64 *a = cohort_sampler_indices(&spec, 0, &n);
  g_assert_cmpuint(n, ==, 0);
  CohortSamplerSpec one = {.n = 1, .world_size = 4, .rank = 3, .drop_last = TRUE};
  g_assert_cmpuint(cohort_sampler_num_samples(&one), ==, 0);
}

/* Shares (rank_batch_sizes): for every split of a global micro-batch, the ranks' k-th
 * micro-batches, in rank order, are the k-th micro-batch of one process on the whole batch
 * (the same examples in the same order); every example is seen once per epoch; the epoch has
 * as many global micro-batches as the strided split has. */
static void test_shares(void)
{
  static const int splits[][4] = {{12, 4}, {8, 8}, {5, 2, 9}, {1, 15}, {3, 3, 3, 7}};
  static const int worlds[] = {2, 2, 3, 2, 4};
  for (int drop = 0; drop <= 1; drop++)
    for (guint c = 0; c < G_N_ELEMENTS(worlds); c++) {
      int world = worlds[c], global = 0;
      for (int r = 0; r < world; r++)
        global += splits[c][r];
      guint64 n = 1001;
      CohortSamplerSpec one = {
          .n = n, .world_size = 1, .shuffle = TRUE, .seed = 7, .drop_last = drop};
      guint64 n1 = 0;
      g_autofree guint64 *whole = cohort_sampler_indices(&one, 3, &n1);
      g_autofree guint64 *seen = g_new0(guint64, n);
      guint64 micro = 0;
      for (int r = 0, offset = 0; r < world; offset += splits[c][r], r++) {
        CohortSamplerSpec spec = {.n = n,
                                  .world_size = world,
                                  .rank = r,
                                  .shuffle = TRUE,
                                  .seed = 7,
                                  .drop_last = drop,
                                  .global_batch = (guint64)global,
                                  .share_offset = (guint64)offset,
                                  .share = (guint64)splits[c][r]};
        CohortSamplerSpec strided = spec;
        strided.global_batch = strided.share = strided.share_offset = 0;
        micro = cohort_sampler_global_batches(&spec);
        g_assert_cmpuint(micro, ==,
                         cohort_sampler_num_samples(&strided) * (guint64)world / (guint64)global);
        guint64 got = 0;
        g_autofree guint64 *idx = cohort_sampler_indices(&spec, 3, &got);
        g_assert_cmpuint(got, ==, micro * (guint64)splits[c][r]);
        for (guint64 k = 0; k < micro; k++)
          for (int b = 0; b < splits[c][r]; b++) {
            guint64 pos = k * (guint64)global + (guint64)offset + (guint64)b;
            guint64 v = idx[k * (guint64)splits[c][r] + (guint64)b];
            /* one process's order at the same position (it pads the same way past n) */
            g_assert_cmpuint(v, ==, whole[pos % n1]);
            seen[v]++;
          }
      }
      /* within an epoch no example twice, unless padding wrapped around */
      for (guint64 i = 0; i < n; i++)
        g_assert_cmpuint(seen[i], <=, drop ? 1 : 2);
      g_assert_cmpuint(micro, >=, n / (guint64)global - 1);
    }
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/sampler/pytorch-fixtures", test_fixtures);
  g_test_add_func("/sampler/randperm-permutation", test_randperm_is_permutation);
  g_test_add_func("/sampler/randperm-known", test_randperm_known);
  g_test_add_func("/sampler/epoch-changes-order", test_epoch_changes_order);
  g_test_add_func("/sampler/empty", test_empty);
  g_test_add_func("/sampler/shares", test_shares);
  return g_test_run();
}

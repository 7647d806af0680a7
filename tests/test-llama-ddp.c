/* The llama family trained data-parallel (suite dist), from a Hugging Face folder made here
 * (tests/llama-folder.h: a Qwen3-shaped model in BF16, cut into shards with their index): two
 * ranks with batch b compute what one process computes with batch 2·b — the loss of every step
 * and the final weights. The two-rank run exports in shards (max_shard_size_mb), the one-process
 * run in one file; both exports read back through the family's import, whose config.json must
 * describe the model trained. */
#include <glib/gstdio.h>
#include <math.h>

#include "engine/model/model-io.h"
#include "llama-folder.h"
#include "test-util.h"

static const char *const base_sets[] = {
    "model=llama",
    "architecture=Qwen3ForCausalLM",
    "n_layer=2",
    "n_embd=32",
    "n_head=4",
    "num_key_value_heads=2",
    "head_dim=16",
    "intermediate_size=48",
    "seq_len=16",
    "vocab_size=256",
    "tie_word_embeddings=false",
    "data_format=text",
    "train_data=builtin:sample/train.txt",
    "val_data=",
    "warmup_steps=1",
    "eval_every=0",
    "save_every=0",
    "threads=1",
    "timeout_s=60",
    NULL,
};
#define DDP_BASE_SETS base_sets
#include "ddp-run.h"

/* The weights of the export in `dir`, read as the family imports a folder. */
static CohortModel *read_export(const char *dir)
{
  CohortModel *m = lf_model(base_sets);
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_model_import(m, dir, NULL, &error));
  g_assert_no_error(error);
  return m;
}

static double params_diff(const CohortModel *a, const CohortModel *b)
{
  g_assert_cmpuint(a->n_params, ==, b->n_params);
  double worst = 0;
  for (size_t k = 0; k < a->n_params; k++)
    worst = fmax(worst, fabs((double)a->params[k] - b->params[k]));
  return worst;
}

static gboolean in_dir(const char *dir, const char *name)
{
  g_autofree char *path = g_build_filename(dir, name, NULL);
  return g_file_test(path, G_FILE_TEST_IS_REGULAR);
}

/* Files of `dir` named as transformers names shards. */
static guint count_shards(const char *dir)
{
  g_autoptr(GDir) d = g_dir_open(dir, 0, NULL);
  guint n = 0;
  for (const char *name; d && (name = g_dir_read_name(d));)
    n += g_str_has_prefix(name, "model-0") && g_str_has_suffix(name, ".safetensors");
  return n;
}

/* Tolerance as in test-dit-ddp.c: a thousandth of what AdamW can move a weight in the run. */
static void test_2_ranks(void)
{
  const int steps = 6;
  const double lr = 1e-3;
  g_autofree char *base = tu_mkdtemp("llama-ddp-base");
  g_autoptr(CohortModel) init = lf_model(base_sets);
  lf_fill(init, 11, 4);
  lf_write_weights(base, init, LF_BF16, 3);
  lf_write_config(base, lf_config(base_sets));
  g_autofree char *from = g_strdup_printf("init_from=%s", base);
  g_autofree char *s_steps = g_strdup_printf("max_steps=%d", steps);
  g_autofree char *s_lr = g_strdup_printf("learning_rate=%g", lr);
  const char *two[] = {
      from, s_steps, s_lr, "batch_size=2", "bucket_cap_mb=0.02", "max_shard_size_mb=0.02", NULL};
  const char *one[] = {from, s_steps, s_lr, "batch_size=4", NULL};
  g_autofree char *ws2 = tu_mkdtemp("llama-ddp-2");
  g_autofree char *ws1 = tu_mkdtemp("llama-ddp-1");
  g_autoptr(GPtrArray) ev2 = ddp_train_events(ws2, 2, two, NULL);
  g_autoptr(GPtrArray) ev1 = ddp_train_events(ws1, 1, one, NULL);
  g_autoptr(GArray) l2 = tu_event_values(ev2, "step", "loss");
  g_autoptr(GArray) l1 = tu_event_values(ev1, "step", "loss");
  g_assert_cmpuint(l2->len, ==, steps);
  g_assert_cmpuint(l1->len, ==, steps);
  for (int s = 0; s < steps; s++) {
    double a = g_array_index(l2, double, s), b = g_array_index(l1, double, s);
    if (fabs(a - b) > 1e-5 * fabs(b))
      g_error("step %d: 2 ranks loss %.8g, one process %.8g", s + 1, a, b);
  }
  /* the run started from the folder: its log says so */
  gboolean read_shards = FALSE;
  for (guint i = 0; i < ev1->len; i++) {
    JsonObject *o = ev1->pdata[i];
    const char *msg = json_object_get_string_member_with_default(o, "message", "");
    read_shards |= strstr(msg, "read 3 shards listed by") != NULL;
  }
  g_assert_true(read_shards);
  /* the exports: shards with their index, and one file */
  g_assert_true(in_dir(ws2, "model.safetensors.index.json"));
  g_assert_cmpuint(count_shards(ws2), >=, 2);
  g_assert_false(in_dir(ws2, "model.safetensors"));
  g_assert_true(in_dir(ws1, "model.safetensors"));
  g_assert_false(in_dir(ws1, "model.safetensors.index.json"));
  g_autoptr(CohortModel) w2 = read_export(ws2);
  g_autoptr(CohortModel) w1 = read_export(ws1);
  double diff = params_diff(w2, w1), tol = 1e-3 * lr * steps;
  double moved = params_diff(w1, init);
  g_test_message("2 ranks x batch 2 vs 1 x 4 from a BF16 folder in 3 shards: loss of step 1 "
                 "%.6f; max |dw| = %.3g (tolerance %.3g); the run moved weights by %.3g; "
                 "exported in %u shards",
                 g_array_index(l1, double, 0), diff, tol, moved, count_shards(ws2));
  g_assert_cmpfloat(diff, <=, tol);
  g_assert_cmpfloat(moved, >, 100 * tol);
  tu_rm_rf(ws1);
  tu_rm_rf(ws2);
  tu_rm_rf(base);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/llama-ddp/2-ranks-from-bf16-shards", test_2_ranks);
  return g_test_run();
}

/* finetune lora on the dit family's text layout end to end through cohort-train (suite dist):
 * on a base trained before (init_from; PixArt's init zeroes proj_out, which would leave the
 * blocks' adapters without a gradient), the loss falls while the base does not move (the
 * export's model.safetensors is the base, bit for bit), the adapter is a PEFT folder with
 * diffusers' PixArt module names (attn1, attn2, ff of each block), 2 ranks with batch b
 * train the adapters one process trains with batch 2b, and activation_checkpointing changes
 * no number. */
#include <math.h>

#include "engine/model/safetensors.h"
#include "test-util.h"

#include "t2i-data.h"

static const char *const base_sets[] = {
    T2I_BASE_SETS,
    "lora_rank=4",
    "lora_alpha=8",
    NULL,
};
#define DDP_BASE_SETS base_sets
#include "ddp-run.h"

static char *data_dir, *base_ws, *init_set;

/* The base every LoRA run starts from: 40 steps of full training. */
static void make_base(void)
{
  base_ws = tu_mkdtemp("t2i-lora-base");
  g_autofree char *data = g_strdup_printf("train_data=%s", data_dir);
  g_autoptr(GPtrArray) ev = ddp_train_events(
      base_ws, 1,
      (const char *[]){data, "max_steps=40", "batch_size=8", "learning_rate=0.003", NULL}, NULL);
  g_autofree char *weights = g_build_filename(base_ws, "model.safetensors", NULL);
  init_set = g_strconcat("init_from=", weights, NULL);
}

static double mean(GArray *a, guint from, guint n)
{
  double s = 0;
  for (guint i = from; i < from + n; i++)
    s += g_array_index(a, double, i);
  return s / n;
}

/* cohort-train with finetune lora on the base, `steps` steps at learning rate `lr`, in `ws`;
 * each step's loss. */
static GArray *lora_losses(const char *ws, int steps, const char *lr)
{
  g_autofree char *data = g_strdup_printf("train_data=%s", data_dir);
  g_autofree char *s_steps = g_strdup_printf("max_steps=%d", steps);
  g_autofree char *s_lr = g_strdup_printf("learning_rate=%s", lr);
  const char *sets[] = {data, init_set, "finetune=lora", s_steps, "batch_size=8", s_lr, NULL};
  g_autoptr(GPtrArray) ev = ddp_train_events(ws, 1, sets, NULL);
  GArray *losses = tu_event_values(ev, "step", "loss");
  g_assert_cmpuint(losses->len, ==, (guint)steps);
  for (guint i = 0; i < losses->len; i++)
    g_assert_true(isfinite(g_array_index(losses, double, i)));
  return losses;
}

/* The loss falls: against the base's own losses on the same noise and timesteps (a run whose
 * adapters barely move: learning rate 1e-9), paired step by step, since one step's loss
 * varies with its draws far more than 120 steps of LoRA move it. */
static void test_trains(void)
{
  enum { STEPS = 120 };
  g_autofree char *ws = tu_mkdtemp("t2i-lora"), *ws0 = tu_mkdtemp("t2i-lora-still");
  g_autoptr(GArray) losses = lora_losses(ws, STEPS, "0.01");
  g_autoptr(GArray) still = lora_losses(ws0, STEPS, "1e-9");
  tu_rm_rf(ws0);
  double tuned = mean(losses, STEPS / 2, STEPS / 2), base = mean(still, STEPS / 2, STEPS / 2);
  g_test_message("LoRA on the text layout: mean loss of steps %d-%d %.4f, the base's on the same "
                 "draws %.4f",
                 STEPS / 2 + 1, STEPS, tuned, base);
  g_assert_cmpfloat(tuned, <, 0.85 * base);

  /* the base did not move */
  g_autofree char *base_path = g_build_filename(base_ws, "model.safetensors", NULL);
  g_autofree char *tuned_path = g_build_filename(ws, "model.safetensors", NULL);
  g_autoptr(GArray) wb = tu_read_weights(base_path), wt = tu_read_weights(tuned_path);
  g_assert_cmpfloat(max_abs_diff(wb, wt), ==, 0);

  /* the adapter: PEFT's names over diffusers' modules, lora_B trained away from zero */
  g_autofree char *path = g_build_filename(ws, "adapter", "adapter_model.safetensors", NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortStFile) f = cohort_safetensors_open(path, &error);
  g_assert_no_error(error);
  const char *modules[] = {"attn1.to_q",    "attn1.to_k", "attn1.to_v", "attn1.to_out.0",
                           "attn2.to_q",    "attn2.to_k", "attn2.to_v", "attn2.to_out.0",
                           "ff.net.0.proj", "ff.net.2"};
  for (int l = 0; l < 2; l++)
    for (guint k = 0; k < G_N_ELEMENTS(modules); k++) {
      int64_t shape[8];
      g_autofree char *a =
          g_strdup_printf("base_model.model.transformer_blocks.%d.%s.lora_A.weight", l, modules[k]);
      g_autofree char *b =
          g_strdup_printf("base_model.model.transformer_blocks.%d.%s.lora_B.weight", l, modules[k]);
      g_assert_cmpint(cohort_safetensors_shape(f, a, shape), ==, 2);
      g_assert_cmpint(shape[0], ==, 4);
      g_assert_cmpint(cohort_safetensors_shape(f, b, shape), ==, 2);
      g_assert_cmpint(shape[1], ==, 4);
    }
  int64_t none[8];
  g_assert_cmpint(cohort_safetensors_shape(f, "base_model.model.proj_out.lora_A.weight", none), <,
                  0);
  g_autoptr(GArray) adapter = tu_read_weights(path);
  g_assert_cmpuint(adapter->len, ==, 2 * (8 * 4 * (32 + 32) + 2 * 4 * (32 + 128)));
  g_autofree char *config = g_build_filename(ws, "adapter", "adapter_config.json", NULL);
  g_autofree char *text = NULL;
  g_assert_true(g_file_get_contents(config, &text, NULL, NULL));
  g_assert_nonnull(strstr(text, "attn2.to_k"));
  tu_rm_rf(ws);
}

/* 2 ranks × batch 4 = 1 process × batch 8 on the adapters (a thousandth of what AdamW can
 * move a weight in the run, as test-lora-ddp.c), and the steps' losses to 1e-5. */
static void test_2_ranks(void)
{
  const int steps = 6;
  const double lr = 1e-3;
  g_autofree char *data = g_strdup_printf("train_data=%s", data_dir);
  const char *two[] = {data,
                       init_set,
                       "finetune=lora",
                       "max_steps=6",
                       "learning_rate=0.001",
                       "batch_size=4",
                       "bucket_cap_mb=0.01",
                       NULL};
  const char *one[] = {
      data, init_set, "finetune=lora", "max_steps=6", "learning_rate=0.001", "batch_size=8", NULL};
  g_autofree char *ws2 = tu_mkdtemp("t2i-lora-2"), *ws1 = tu_mkdtemp("t2i-lora-1");
  g_autoptr(GPtrArray) e2 = ddp_train_events(ws2, 2, two, NULL);
  g_autoptr(GPtrArray) e1 = ddp_train_events(ws1, 1, one, NULL);
  g_autoptr(GArray) l2 = tu_event_values(e2, "step", "loss");
  g_autoptr(GArray) l1 = tu_event_values(e1, "step", "loss");
  g_assert_cmpuint(l2->len, ==, steps);
  g_assert_cmpuint(l1->len, ==, steps);
  for (int s = 0; s < steps; s++) {
    double a = g_array_index(l2, double, s), b = g_array_index(l1, double, s);
    if (fabs(a - b) > 1e-5 * fabs(b))
      g_error("step %d: 2 ranks loss %.8g, one process %.8g", s + 1, a, b);
  }
  g_autofree char *p2 = g_build_filename(ws2, "adapter", "adapter_model.safetensors", NULL);
  g_autofree char *p1 = g_build_filename(ws1, "adapter", "adapter_model.safetensors", NULL);
  g_autoptr(GArray) w2 = tu_read_weights(p2), w1 = tu_read_weights(p1);
  double diff = max_abs_diff(w2, w1), tol = 1e-3 * lr * steps;
  g_test_message("text-layout LoRA: 2 ranks × batch 4 vs 1 × 8: max |Δ adapter| = %.3g "
                 "(tolerance %.3g)",
                 diff, tol);
  g_assert_cmpfloat(diff, <=, tol);
  /* the adapters moved well beyond the tolerance: lora_B starts at zero */
  double moved = 0;
  for (guint i = 0; i < w1->len; i++)
    moved = fmax(moved, fabs(g_array_index(w1, float, i)));
  g_assert_cmpfloat(moved, >, 0);
  tu_rm_rf(ws2);
  tu_rm_rf(ws1);
}

/* activation_checkpointing with LoRA and lora_dropout on 2 ranks: the blocks computed again in
 * backward (drawing the same dropout masks) change no loss and no adapter value. */
static void test_checkpointing(void)
{
  g_autofree char *data = g_strdup_printf("train_data=%s", data_dir);
  GArray *w[2], *l[2];
  for (int k = 0; k < 2; k++) {
    const char *sets[] = {data,
                          init_set,
                          "finetune=lora",
                          "lora_dropout=0.25",
                          "max_steps=5",
                          "batch_size=4",
                          "bucket_cap_mb=0.01",
                          k ? "activation_checkpointing=true" : "activation_checkpointing=false",
                          NULL};
    g_autofree char *ws = tu_mkdtemp("t2i-lora-ckpt");
    g_autoptr(GPtrArray) ev = ddp_train_events(ws, 2, sets, NULL);
    l[k] = tu_event_values(ev, "step", "loss");
    g_autofree char *path = g_build_filename(ws, "adapter", "adapter_model.safetensors", NULL);
    w[k] = tu_read_weights(path);
    tu_rm_rf(ws);
  }
  g_assert_cmpuint(l[0]->len, ==, 5);
  g_assert_cmpuint(l[1]->len, ==, 5);
  for (guint s = 0; s < 5; s++)
    g_assert_cmpfloat(g_array_index(l[0], double, s), ==, g_array_index(l[1], double, s));
  g_assert_cmpfloat(max_abs_diff(w[0], w[1]), ==, 0);
  for (int k = 0; k < 2; k++) {
    g_array_unref(w[k]);
    g_array_unref(l[k]);
  }
}

/* init_from of another shape is refused, naming the tensor, the keys and what is allowed. */
static void test_init_refused(void)
{
  g_autofree char *data = g_strdup_printf("train_data=%s", data_dir);
  g_autofree char *ws = tu_mkdtemp("t2i-lora-bad");
  g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(argv, g_strdup(program("COHORT_TRAIN")));
  g_ptr_array_add(argv, g_strdup("--quiet"));
  add_sets(argv, ws,
           (const char *[]){data, init_set, "finetune=lora", "n_embd=16", "max_steps=1", NULL});
  Result r = run(argv, NULL, NULL);
  g_assert_cmpint(r.status, !=, 0);
  g_assert_nonnull(strstr(r.err, "\"pos_embed.pos_embed\""));
  g_assert_nonnull(strstr(r.err, "\"n_embd\""));
  g_assert_nonnull(strstr(r.err, "allowed"));
  g_free(r.err);
  tu_rm_rf(ws);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  data_dir = t2i_make_data();
  make_base();
  g_test_add_func("/t2i-lora/trains", test_trains);
  g_test_add_func("/t2i-lora/2-ranks", test_2_ranks);
  g_test_add_func("/t2i-lora/activation-checkpointing", test_checkpointing);
  g_test_add_func("/t2i-lora/init-from-refused", test_init_refused);
  int rc = g_test_run();
  tu_rm_rf(base_ws);
  tu_rm_rf(data_dir);
  g_free(base_ws);
  g_free(data_dir);
  g_free(init_set);
  return rc;
}

/* The training micro-step the trainer and the probe share (cohort_rank_run_forward and
 * cohort_rank_run_backward, engine/train/trainer-run.h): with lora_dropout it runs the
 * adapters' dropout for the batch's examples, as PEFT trains, so the probe times what training
 * computes. Before, the probe had its own copy of the step without the dropout. */
#include <string.h>

#include "engine/model/lora.h"
#include "engine/models/registry.h"
#include "engine/train/trainer-run.h"
#include "kernels/backend.h"

enum { B = 2, T = 8 };

/* The gradients of one forward and backward of `batch` on `m`, from the same weights. */
static float *grads_of(CohortModel *m, CohortRankRun *r, gboolean shared_step)
{
  cohort_model_zero_grad(m);
  if (shared_step) {
    double parts[COHORT_DISTILL_N_PARTS];
    cohort_rank_run_forward(r, parts);
    cohort_rank_run_backward(r, 1.0f);
  } else {
    m->ops->forward(m, r->step_batch, COHORT_FORWARD_TRAIN);
    m->ops->backward(m, 1.0f);
  }
  float *g = g_new(float, m->n_trainable);
  m->be->download(g, m->grads, m->n_trainable * sizeof(float));
  return g;
}

static void test_lora_dropout(void)
{
  g_autoptr(CohortConfig) cfg = cohort_config_new();
  const char *const sets[] = {"model=gpt", "n_layer=1",     "n_embd=16",        "n_head=2",
                              "seq_len=8", "finetune=lora", "lora_dropout=0.5", NULL};
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_config_apply_assignments(cfg, sets, "test", &error));
  g_autoptr(CohortModel) m = cohort_model_new(cohort_backend_cpu(), cfg, B, &error);
  g_assert_no_error(error);
  m->ops->init_weights(m, 7);
  /* LoRA's B starts at 0, which hides the dropout from A's gradient: give B values */
  g_autofree float *params = g_new(float, m->n_params);
  cohort_model_download_params(m, params);
  for (size_t i = 0; i < m->n_trainable; i++)
    params[i] += 0.01f * (float)((i * 7919) % 13) - 0.06f;
  cohort_model_upload_params(m, params);

  g_autoptr(CohortBatch) batch = cohort_batch_new(B, T, 0, 0, 0);
  batch->B = B;
  batch->epoch = 3;
  for (int i = 0; i < B * T; i++) {
    batch->inputs[i] = (i * 37) % 256;
    batch->targets[i] = (i * 53 + 1) % 256;
  }
  for (int b = 0; b < B; b++)
    batch->example_ids[b] = 100 + b;
  CohortRankRun r = {.cfg = cfg, .model = m, .step_batch = batch, .accum = 1};

  g_autofree float *shared = grads_of(m, &r, TRUE);
  g_autofree float *plain = grads_of(m, &r, FALSE); /* no dropout */
  cohort_lora_set_train_batch(m, batch, (guint64)cfg->seed);
  g_autofree float *dropped = grads_of(m, &r, FALSE); /* the trainer's dropout, by hand */
  cohort_lora_set_train_batch(m, NULL, 0);
  g_assert_true(memcmp(shared, dropped, m->n_trainable * sizeof(float)) == 0);
  g_assert_false(memcmp(shared, plain, m->n_trainable * sizeof(float)) == 0);
  /* and the step ends the dropout: a plain forward after it has none */
  g_autofree float *after = grads_of(m, &r, FALSE);
  g_assert_true(memcmp(after, plain, m->n_trainable * sizeof(float)) == 0);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/train-step/lora-dropout", test_lora_dropout);
  return g_test_run();
}

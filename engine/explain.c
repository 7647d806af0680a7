#include "engine/explain.h"

#include <json-glib/json-glib.h>

#include "data/sampler.h"
#include "engine/json-write.h"
#include "engine/model.h"
#include "engine/samples.h"
#include "engine/trainer.h"

char *cohort_explain(const CohortConfig *cfg, int world_size, int n_first, GError **error)
{
  const CohortModelClass *klass = cohort_model_class_for(cfg, NULL, error);
  if (!klass || !cohort_model_check_config(cfg, NULL, error))
    return NULL;
  g_autoptr(CohortSamples) ds = cohort_samples_open(cfg, cfg->train_data, NULL, error);
  if (!ds)
    return NULL;
  int world = MAX(world_size, 1);
  CohortSamplerSpec spec = {
      .n = cohort_samples_count(ds),
      .world_size = world,
      .rank = 0,
      .shuffle = cfg->shuffle,
      .seed = cfg->seed,
      .drop_last = cfg->drop_last,
  };
  guint64 per_rank = cohort_sampler_num_samples(&spec);
  gint64 steps_per_epoch =
      (gint64)(per_rank / (guint64)cfg->batch_size) / cfg->gradient_accumulation_steps;
  gint64 total_steps = cfg->max_steps > 0 ? cfg->max_steps : (gint64)cfg->epochs * steps_per_epoch;
  int global_batch = cohort_config_global_batch(cfg, world);

  g_autoptr(JsonBuilder) b = json_builder_new();
  json_builder_begin_object(b);
  g_autofree char *cfg_json = cohort_config_to_json(cfg, FALSE);
  JsonNode *cfg_node = json_from_string(cfg_json, NULL);
  json_builder_set_member_name(b, "config");
  json_builder_add_value(b, cfg_node);
  json_builder_set_member_name(b, "params");
  json_builder_add_int_value(b, klass->count_params(cfg));
  json_builder_set_member_name(b, "device");
  json_builder_add_string_value(b, "cpu");
  json_builder_set_member_name(b, "threads_per_rank");
  json_builder_add_int_value(b, cohort_train_threads(cfg, world));
  json_builder_set_member_name(b, "world_size");
  json_builder_add_int_value(b, world);
  json_builder_set_member_name(b, "global_batch");
  json_builder_add_int_value(b, global_batch);
  json_builder_set_member_name(b, "tokens_per_step");
  json_builder_add_int_value(b, (gint64)global_batch * cfg->seq_len);
  json_builder_set_member_name(b, "learning_rate");
  json_builder_add_double_value(b, cfg->learning_rate);
  json_builder_set_member_name(b, "scaled_learning_rate");
  json_builder_add_double_value(b, cohort_config_scaled_lr(cfg, world));
  json_builder_set_member_name(b, "train_windows");
  json_builder_add_int_value(b, (gint64)spec.n);
  json_builder_set_member_name(b, "samples_per_rank_per_epoch");
  json_builder_add_int_value(b, (gint64)per_rank);
  json_builder_set_member_name(b, "steps_per_epoch");
  json_builder_add_int_value(b, steps_per_epoch);
  json_builder_set_member_name(b, "total_steps");
  json_builder_add_int_value(b, total_steps);
  json_builder_set_member_name(b, "first_indices");
  json_builder_begin_array(b);
  for (int rank = 0; rank < world; rank++) {
    spec.rank = rank;
    guint64 n = 0;
    g_autofree guint64 *idx = cohort_sampler_indices(&spec, 0, &n);
    json_builder_begin_object(b);
    json_builder_set_member_name(b, "rank");
    json_builder_add_int_value(b, rank);
    json_builder_set_member_name(b, "indices");
    json_builder_begin_array(b);
    for (guint64 i = 0; i < n && i < (guint64)n_first; i++)
      json_builder_add_int_value(b, (gint64)idx[i]);
    json_builder_end_array(b);
    json_builder_end_object(b);
  }
  json_builder_end_array(b);
  json_builder_end_object(b);

  g_autoptr(JsonNode) root = json_builder_get_root(b);
  return cohort_json_to_string(root, TRUE);
}

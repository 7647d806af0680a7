#include "engine/train/explain.h"

#include <json-glib/json-glib.h>

#include "data/sampler.h"
#include "engine/base/json-read.h"
#include "engine/base/json-write.h"
#include "engine/launch/launch-plan.h"
#include "engine/model/finetune.h"
#include "engine/model/model.h"
#include "engine/model/data-source.h"
#include "engine/train/memory-plan.h"
#include "engine/train/trainer.h"
#include "engine/models/registry.h"

/* The launch part of the plan. */
static void add_launch(JsonBuilder *b, const CohortLaunchPlan *plan, const char *const *argv)
{
  json_builder_set_member_name(b, "launch");
  json_builder_begin_object(b);
  json_builder_set_member_name(b, "kind");
  json_builder_add_string_value(b, cohort_launch_kind_name(plan->kind));
  json_builder_set_member_name(b, "num_nodes");
  json_builder_add_int_value(b, plan->num_nodes);
  json_builder_set_member_name(b, "node_rank");
  json_builder_add_int_value(b, plan->node_rank);
  json_builder_set_member_name(b, "local_processes");
  json_builder_add_int_value(b, plan->local_processes);
  json_builder_set_member_name(b, "summary");
  g_autofree char *summary = cohort_launch_plan_describe(plan);
  json_builder_add_string_value(b, summary);
  json_builder_set_member_name(b, "argv");
  json_builder_begin_array(b);
  for (guint i = 0; argv && argv[i]; i++)
    json_builder_add_string_value(b, argv[i]);
  json_builder_end_array(b);
  json_builder_end_object(b);
}

char *cohort_explain(const CohortConfig *cfg, const CohortLaunchPlan *plan, const char *const *argv,
                     int n_first, GError **error)
{
  const CohortModelClass *klass = cohort_model_class_for(cfg, NULL, error);
  if (!klass || !cohort_model_check_config(cfg, NULL, error) ||
      !cohort_finetune_check_config(cfg, NULL, error))
    return NULL;
  g_autoptr(CohortDataSource) ds = cohort_data_source_open(cfg, cfg->train_data, NULL, error);
  if (!ds)
    return NULL;
  int world = MAX(plan->world_size, 1);
  CohortSamplerSpec spec = {
      .n = cohort_data_source_count(ds),
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
  int global_batch = plan->global_batch;

  g_autoptr(JsonBuilder) b = json_builder_new();
  json_builder_begin_object(b);
  g_autofree char *cfg_json = cohort_config_to_json(cfg, FALSE);
  JsonNode *cfg_node = cohort_json_parse_strict(cfg_json, -1, "config", 0, NULL);
  json_builder_set_member_name(b, "config");
  json_builder_add_value(b, cfg_node);
  add_launch(b, plan, argv);
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
  json_builder_add_double_value(b, plan->scaled_lr);
  json_builder_set_member_name(b, "train_windows");
  json_builder_add_int_value(b, (gint64)spec.n);
  json_builder_set_member_name(b, "samples_per_rank_per_epoch");
  json_builder_add_int_value(b, (gint64)per_rank);
  json_builder_set_member_name(b, "steps_per_epoch");
  json_builder_add_int_value(b, steps_per_epoch);
  json_builder_set_member_name(b, "total_steps");
  json_builder_add_int_value(b, total_steps);
  CohortMemoryPlan mem;
  if (!cohort_memory_plan(cfg, world, plan->local_processes, &mem, error))
    return NULL;
  cohort_memory_plan_add_json(&mem, cohort_machine_memory_bytes(),
                              cfg->device == COHORT_DEVICE_CUDA, b);
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

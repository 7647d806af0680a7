#include "engine/train/explain.h"

#include <gio/gio.h>
#include <json-glib/json-glib.h>
#include <string.h>

#include "data/sampler.h"
#include "engine/base/json-read.h"
#include "engine/base/json-write.h"
#include "engine/config/rank-batches.h"
#include "engine/launch/launch-plan.h"
#include "engine/model/finetune.h"
#include "engine/model/model.h"
#include "engine/model/data-source.h"
#include "engine/train/explain-windows.h"
#include "engine/train/memory-plan.h"
#include "engine/progress/explain-json.h"
#include "engine/progress/protocol.h"
#include "engine/train/probe.h"
#include "engine/train/trainer.h"
#include "engine/models/registry.h"

/* The launch part of the plan. */
static void add_launch(JsonBuilder *b, const CohortLaunchPlan *plan, const char *const *argv)
{
  json_builder_set_member_name(b, COHORT_EXPLAIN_LAUNCH);
  json_builder_begin_object(b);
  json_builder_set_member_name(b, COHORT_EXPLAIN_KIND);
  json_builder_add_string_value(b, cohort_launch_kind_name(plan->kind));
  json_builder_set_member_name(b, COHORT_EXPLAIN_NUM_NODES);
  json_builder_add_int_value(b, plan->num_nodes);
  json_builder_set_member_name(b, COHORT_EXPLAIN_NODE_RANK);
  json_builder_add_int_value(b, plan->node_rank);
  json_builder_set_member_name(b, COHORT_EXPLAIN_LOCAL_PROCESSES);
  json_builder_add_int_value(b, plan->local_processes);
  json_builder_set_member_name(b, COHORT_EXPLAIN_SUMMARY);
  g_autofree char *summary = cohort_launch_plan_describe(plan);
  json_builder_add_string_value(b, summary);
  json_builder_set_member_name(b, COHORT_EXPLAIN_ARGV);
  json_builder_begin_array(b);
  for (guint i = 0; argv && argv[i]; i++)
    json_builder_add_string_value(b, argv[i]);
  json_builder_end_array(b);
  json_builder_end_object(b);
}

/* The last `health` event of the workspace's events.jsonl (searched in its last 4 MiB), or
 * NULL. */
static JsonNode *last_health(const CohortConfig *cfg)
{
  g_autofree char *ws = cohort_resolve_path(cfg->workspace_dir);
  g_autofree char *path = g_build_filename(ws, "events.jsonl", NULL);
  g_autoptr(GFile) file = g_file_new_for_path(path);
  g_autoptr(GFileInputStream) in = g_file_read(file, NULL, NULL);
  if (in == NULL)
    return NULL;
  goffset tail = 4 << 20;
  if (!g_seekable_seek(G_SEEKABLE(in), -tail, G_SEEK_END, NULL, NULL))
    g_seekable_seek(G_SEEKABLE(in), 0, G_SEEK_SET, NULL, NULL);
  g_autoptr(GBytes) bytes = g_input_stream_read_bytes(G_INPUT_STREAM(in), (gsize)tail, NULL, NULL);
  if (bytes == NULL)
    return NULL;
  gsize len = 0;
  g_autofree char *text = g_strndup(g_bytes_get_data(bytes, &len), g_bytes_get_size(bytes));
  g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
  for (guint i = g_strv_length(lines); i-- > 0;) {
    if (strstr(lines[i], "\"event\":\"" COHORT_EVENT_HEALTH "\"") == NULL)
      continue;
    JsonNode *n = cohort_json_parse_strict(lines[i], -1, path, 0, NULL);
    if (n != NULL && JSON_NODE_HOLDS_OBJECT(n))
      return n;
    g_clear_pointer(&n, json_node_unref);
  }
  return NULL;
}

/* Rank health: when the ranks compare their weights, and the workspace's last verdict. */
static void add_health(JsonBuilder *b, const CohortConfig *cfg, int world)
{
  json_builder_set_member_name(b, COHORT_EXPLAIN_HEALTH);
  json_builder_begin_object(b);
  json_builder_set_member_name(b, COHORT_EXPLAIN_COMPARED);
  /* rank-health.c: at stage 3 no rank holds the whole weights to compare */
  gboolean sharded = cfg->zero_stage == 3;
  json_builder_add_boolean_value(b, world > 1 && !sharded);
  if (world > 1 && sharded) {
    json_builder_set_member_name(b, COHORT_EXPLAIN_WHY_NOT);
    json_builder_add_string_value(b, "zero_stage 3: each rank holds only its shard of the weights");
  }
  json_builder_set_member_name(b, COHORT_EXPLAIN_SAVE_EVERY);
  json_builder_add_int_value(b, cfg->save_every);
  json_builder_set_member_name(b, COHORT_EXPLAIN_BUFFERS);
  json_builder_add_boolean_value(b, world > 1 && cfg->sync_batchnorm);
  JsonNode *last = last_health(cfg);
  if (last != NULL) {
    json_builder_set_member_name(b, COHORT_EXPLAIN_LAST);
    json_builder_add_value(b, last);
  }
  json_builder_end_object(b);
}

static void add_ints(JsonBuilder *b, const char *name, const int *v, int n)
{
  json_builder_set_member_name(b, name);
  json_builder_begin_array(b);
  for (int i = 0; i < n; i++)
    json_builder_add_int_value(b, v[i]);
  json_builder_end_array(b);
}

/* rank_batch_sizes: the even split and the chosen one (the list; for auto the probe's choice
 * when probe.json measured this config on as many ranks, else the run chooses it at its start
 * and chosen is left out). */
static void add_split(JsonBuilder *b, const CohortConfig *cfg, int world, const int *start)
{
  CohortSplitKind kind = cohort_rank_batches_kind(cfg);
  static const char *const kinds[] = {"even", "list", "auto"};
  g_autofree int *even = g_new(int, world);
  gint64 global = cohort_rank_batches_global(cfg, world);
  for (int q = 0; q < world; q++)
    even[q] = (int)(global / world + (q < global % world));
  json_builder_set_member_name(b, COHORT_EXPLAIN_RANK_BATCH_SIZES);
  json_builder_begin_object(b);
  json_builder_set_member_name(b, COHORT_EXPLAIN_KIND);
  json_builder_add_string_value(b, kinds[kind]);
  add_ints(b, COHORT_EXPLAIN_EVEN, even, world);
  const char *by = kind == COHORT_SPLIT_LIST ? "config" : "batch_size";
  g_autofree int *chosen = g_memdup2(start, sizeof(int) * (gsize)world);
  gboolean known = kind != COHORT_SPLIT_AUTO || world == 1;
  g_autoptr(JsonObject) probe = kind == COHORT_SPLIT_AUTO ? cohort_probe_load_saved(cfg) : NULL;
  JsonObject *split = probe ? json_object_get_object_member(probe, COHORT_FIELD_SPLIT) : NULL;
  JsonArray *a = split ? json_object_get_array_member(split, COHORT_FIELD_AUTO) : NULL;
  if (a && (int)json_array_get_length(a) == world &&
      json_object_get_boolean_member_with_default(probe, COHORT_FIELD_MATCHES_CONFIG, FALSE)) {
    for (int q = 0; q < world; q++)
      chosen[q] = (int)json_array_get_int_element(a, (guint)q);
    known = TRUE;
    by = "probe";
  }
  if (known)
    add_ints(b, COHORT_EXPLAIN_CHOSEN, chosen, world);
  json_builder_set_member_name(b, COHORT_EXPLAIN_CHOSEN_BY);
  json_builder_add_string_value(b, known ? by : "start");
  json_builder_end_object(b);
}

/* The workspace's last probe (probe.json), with whether it measured this config. */
static void add_probe(JsonBuilder *b, const CohortConfig *cfg)
{
  JsonObject *saved = cohort_probe_load_saved(cfg);
  if (saved == NULL)
    return;
  json_builder_set_member_name(b, COHORT_EXPLAIN_PROBE);
  json_builder_add_value(b, json_node_init_object(json_node_alloc(), saved));
  json_object_unref(saved);
}

char *cohort_explain(const CohortConfig *cfg, const CohortLaunchPlan *plan, const char *const *argv,
                     int n_first, GError **error)
{
  const CohortModelClass *klass = cohort_model_class_for(cfg, NULL, error);
  if (!klass || !cohort_model_check_config(cfg, NULL, error) ||
      !cohort_finetune_check_config(cfg, NULL, error))
    return NULL;
  guint64 n_examples = 0;
  gboolean tokenized = FALSE, estimated = FALSE;
  if (cfg->vae_from && *cfg->vae_from) {
    /* Latents: the folder's listing says how many, without decoding or encoding anything. */
    g_autofree char *folder = cohort_resolve_path(cfg->train_data);
    g_autoptr(CohortLatentFiles) files = cohort_latent_files_scan(
        folder, cfg->image_size, cfg->image_channels, cfg->skip_bad_images, error);
    if (!files)
      return NULL;
    n_examples = cohort_latent_files_len(files);
  } else if (!cohort_explain_text_windows(cfg, &tokenized, &n_examples, &estimated, error)) {
    return NULL;
  } else if (!tokenized) {
    g_autoptr(CohortDataSource) ds = cohort_data_source_open(cfg, cfg->train_data, NULL, error);
    if (!ds)
      return NULL;
    n_examples = cohort_data_source_count(ds);
  }
  int world = MAX(plan->world_size, 1);
  /* The split the run starts from (auto's even start, before it measures). */
  g_autofree int *start = g_new(int, world);
  if (!cohort_rank_batches_start(cfg, NULL, world, start, error))
    return NULL;
  gboolean shares = cohort_rank_batches_kind(cfg) != COHORT_SPLIT_EVEN;
  gint64 global = cohort_rank_batches_global(cfg, world);
  CohortSamplerSpec spec = {
      .n = n_examples,
      .world_size = world,
      .rank = 0,
      .shuffle = cfg->shuffle,
      .seed = cfg->seed,
      .drop_last = cfg->drop_last,
      .global_batch = shares ? (guint64)global : 0,
      .share = shares ? (guint64)start[0] : 0,
  };
  guint64 per_rank = cohort_sampler_num_samples(&spec);
  gint64 micro = shares ? (gint64)cohort_sampler_global_batches(&spec)
                        : (gint64)(per_rank / (guint64)cfg->batch_size);
  gint64 steps_per_epoch = micro / cfg->gradient_accumulation_steps;
  gint64 total_steps = cfg->max_steps > 0 ? cfg->max_steps : (gint64)cfg->epochs * steps_per_epoch;
  int global_batch = plan->global_batch;

  g_autoptr(JsonBuilder) b = json_builder_new();
  json_builder_begin_object(b);
  g_autofree char *cfg_json = cohort_config_to_json(cfg, FALSE);
  JsonNode *cfg_node = cohort_json_parse_strict(cfg_json, -1, "config", 0, NULL);
  json_builder_set_member_name(b, COHORT_EXPLAIN_CONFIG);
  json_builder_add_value(b, cfg_node);
  add_launch(b, plan, argv);
  json_builder_set_member_name(b, COHORT_EXPLAIN_PARAMS);
  json_builder_add_int_value(b, cohort_model_count_params(cfg));
  /* The device key as set: the plan is the same whether or not this machine has the GPU (a
   * GPU rank checks its device's memory when it starts). */
  json_builder_set_member_name(b, COHORT_EXPLAIN_DEVICE);
  json_builder_add_string_value(b, cfg->device == COHORT_DEVICE_CUDA  ? "cuda"
                                   : cfg->device == COHORT_DEVICE_CPU ? "cpu"
                                                                      : "auto");
  json_builder_set_member_name(b, COHORT_EXPLAIN_THREADS_PER_RANK);
  json_builder_add_int_value(b, cohort_train_threads(cfg, world));
  json_builder_set_member_name(b, COHORT_EXPLAIN_WORLD_SIZE);
  json_builder_add_int_value(b, world);
  json_builder_set_member_name(b, COHORT_EXPLAIN_GLOBAL_BATCH);
  json_builder_add_int_value(b, global_batch);
  add_split(b, cfg, world, start);
  json_builder_set_member_name(b, COHORT_EXPLAIN_TOKENS_PER_STEP);
  json_builder_add_int_value(b, (gint64)global_batch * cfg->seq_len);
  json_builder_set_member_name(b, COHORT_EXPLAIN_LEARNING_RATE);
  json_builder_add_double_value(b, cfg->learning_rate);
  json_builder_set_member_name(b, COHORT_EXPLAIN_SCALED_LEARNING_RATE);
  json_builder_add_double_value(b, plan->scaled_lr);
  json_builder_set_member_name(b, COHORT_EXPLAIN_TRAIN_WINDOWS);
  json_builder_add_int_value(b, (gint64)spec.n);
  if (tokenized) {
    /* text through a tokenizer not yet tokenized: its windows, and so the steps, estimated */
    json_builder_set_member_name(b, COHORT_EXPLAIN_TRAIN_WINDOWS_ESTIMATED);
    json_builder_add_boolean_value(b, estimated);
  }
  json_builder_set_member_name(b, COHORT_EXPLAIN_SAMPLES_PER_RANK_PER_EPOCH);
  json_builder_add_int_value(b, (gint64)per_rank);
  json_builder_set_member_name(b, COHORT_EXPLAIN_STEPS_PER_EPOCH);
  json_builder_add_int_value(b, steps_per_epoch);
  json_builder_set_member_name(b, COHORT_EXPLAIN_TOTAL_STEPS);
  json_builder_add_int_value(b, total_steps);
  CohortMemoryPlan mem;
  if (!cohort_memory_plan(cfg, world, plan->local_processes, &mem, error))
    return NULL;
  cohort_memory_plan_add_json(&mem, cohort_machine_memory_bytes(),
                              cfg->device == COHORT_DEVICE_CUDA, b);
  json_builder_set_member_name(b, COHORT_EXPLAIN_FIRST_INDICES);
  json_builder_begin_array(b);
  for (int rank = 0, offset = 0; rank < world; offset += start[rank], rank++) {
    spec.rank = rank;
    spec.share_offset = shares ? (guint64)offset : 0;
    spec.share = shares ? (guint64)start[rank] : 0;
    guint64 n = 0;
    g_autofree guint64 *idx = cohort_sampler_indices(&spec, 0, &n);
    json_builder_begin_object(b);
    json_builder_set_member_name(b, COHORT_EXPLAIN_RANK);
    json_builder_add_int_value(b, rank);
    json_builder_set_member_name(b, COHORT_EXPLAIN_INDICES);
    json_builder_begin_array(b);
    for (guint64 i = 0; i < n && i < (guint64)n_first; i++)
      json_builder_add_int_value(b, (gint64)idx[i]);
    json_builder_end_array(b);
    json_builder_end_object(b);
  }
  json_builder_end_array(b);
  add_health(b, cfg, world);
  add_probe(b, cfg);
  json_builder_end_object(b);

  g_autoptr(JsonNode) root = json_builder_get_root(b);
  return cohort_json_to_string(root, TRUE);
}

/* The memory plan (see memory-plan.h). */
#include "engine/train/memory-plan.h"

#include <stdio.h>
#include <string.h>
#include <glib/gstdio.h>

#include "cohort-build-config.h"
#include "engine/distributed/shard-plan.h"
#include "engine/progress/explain-json.h"
#include "engine/families/family.h"
#include "engine/model/finetune.h"
#include "engine/models/registry.h"
#if COHORT_HAVE_CUDA
#include "kernels/cuda/cuda-backend.h"
#endif

/* State floats the optimizer keeps per parameter. */
static int state_floats(const CohortConfig *cfg)
{
  if (cfg->optimizer == COHORT_OPTIMIZER_SGD)
    return cfg->momentum != 0 ? 1 : 0;
  return 2;
}

/* The allocation granule of a GPU's reserved ranges (cuMemGetAllocationGranularity on every
 * GPU Cohort supports). */
#define COHORT_GPU_GRANULE_BYTES ((gint64)2 << 20)

/* The sum of the k largest unit sizes (floats). */
static gint64 largest_units(const CohortShardPlan *p, guint k)
{
  g_autofree size_t *sizes = g_new(size_t, MAX(p->n_units, 1));
  for (guint u = 0; u < p->n_units; u++)
    sizes[u] = p->units[u].count;
  gint64 sum = 0;
  for (guint taken = 0; taken < k && taken < p->n_units; taken++) {
    guint best = 0;
    for (guint u = 1; u < p->n_units; u++)
      if (sizes[u] > sizes[best])
        best = u;
    sum += (gint64)sizes[best];
    sizes[best] = 0;
  }
  return sum;
}

/* A distillation teacher's bytes on each rank: its weights (its own config's count, else the
 * size of its weights file) and its activations. */
static gint64 teacher_bytes(const CohortConfig *cfg)
{
  if (!cfg->teacher_from || !*cfg->teacher_from)
    return 0;
  g_autofree char *dir = cohort_resolve_path(cfg->teacher_from);
  g_autofree char *path = g_build_filename(dir, "cohort-config.json", NULL);
  g_autoptr(CohortConfig) tc = cohort_config_load_file(path, NULL);
  const CohortModelClass *k = tc ? cohort_model_class_find(tc->model) : NULL;
  if (k)
    return 4 * cohort_model_count_params(tc) + (gint64)cohort_model_act_bytes(tc, cfg->batch_size);
  g_autofree char *weights = g_build_filename(dir, "model.safetensors", NULL);
  GStatBuf st;
  return g_stat(weights, &st) == 0 ? (gint64)st.st_size : 0;
}

/* The parts that depend on ZeRO's shard plan (stages 2 and 3). With finetune lora or frozen
 * the units cover what learns alone (the layout's train table, engine/model/finetune.h): its
 * gradients, optimizer state, EMA weights and (stage 3) parameters are sharded; the frozen base
 * is whole on every rank. */
static void sharded(const CohortConfig *cfg, const CohortModelClass *k, CohortMemoryPlan *plan)
{
  guint n = 0;
  size_t floats = 0;
  CohortTensorInfo *t = cohort_model_param_table(cfg, &n, &floats);
  g_autoptr(CohortFinetunePlan) fp =
      t && cfg->finetune != COHORT_FINETUNE_FULL && k->frozen_layout
          ? cohort_finetune_plan_new(cfg, k->name, cohort_family_desc_lora_targets(k->family, cfg),
                                     t, n, NULL)
          : NULL;
  CohortFinetuneLayout layout = {0};
  const CohortTensorInfo *units_of = t;
  guint n_units_of = n;
  size_t cover = floats;
  gint64 whole = 0; /* floats every rank keeps whole: the frozen base */
  if (fp) {
    cohort_finetune_layout(fp, t, n, &layout);
    units_of = layout.train;
    n_units_of = layout.n_train;
    cover = layout.n_trainable;
    whole = (gint64)(layout.n_params - layout.n_trainable);
    plan->trainable = (gint64)layout.n_trainable;
    plan->frozen = whole;
  }
  g_autoptr(CohortShardPlan) p =
      units_of ? cohort_shard_plan_new(units_of, n_units_of, cover, NULL, plan->world, 0, NULL)
               : NULL;
  if (fp)
    cohort_finetune_layout_clear(&layout);
  cohort_tensor_table_free(t, n);
  /* Without a table: an even split and one unit, all that learns. */
  gint64 T = plan->trainable,
         S = p ? (gint64)p->max_shard_floats : (T + plan->world - 1) / plan->world;
  /* In flight (shard-plan.h): the gradients of a tied embedding (written at both ends of
   * backward), of the layer backward is in and of the reduce-scatters that may wait; the
   * parameters of the layer in use, of a tied weight and of the units gathered ahead. */
  guint grad_units = 2 + COHORT_ZERO_PENDING_REDUCES, param_units = 2 + COHORT_ZERO_PREFETCH_UNITS;
  gint64 grads_live = p ? largest_units(p, grad_units) : T,
         params_live = p ? largest_units(p, param_units) : T;
  gint64 largest = p ? (gint64)p->largest_unit : T;
  plan->units = p ? p->n_units : 1;
  plan->grad_bytes = 4 * S;
  plan->optim_bytes = 4 * state_floats(cfg) * S;
  plan->ema_bytes = cfg->ema_decay > 0 ? (plan->stage == 2 ? 8 : 4) * S : 0;
  plan->param_bytes = 4 * whole + (plan->stage == 3 ? 4 * S : 4 * T);
  plan->working_bytes = 4 * grads_live + (plan->stage == 3 ? 4 * params_live : 0) +
                        (cfg->reduce_precision == COHORT_REDUCE_BF16 ? 2 * largest : 0);
  /* A GPU commits whole granules (kernels/cuda/reserve.cu): a unit in flight may hold up to
   * one more at each end. A GPU rank also keeps one piece of scratch for the reduce-scatter
   * and a unit's worth in bf16 (or through the host with Gloo, not counted here). */
  if (cfg->device == COHORT_DEVICE_CUDA)
    plan->working_bytes +=
        (gint64)(grad_units + (plan->stage == 3 ? param_units : 0)) * 2 * COHORT_GPU_GRANULE_BYTES +
        4 * S + 2 * largest;
}

/* frozen_dtype bf16: the frozen tensors of two or more dimensions go to bf16 (*stored
 * floats), and the layer that holds most of them is widened to fp32 while it is used
 * (*widest floats; on a GPU each tensor widened in whole granules, up to one more at each
 * end). */
static void bf16_stored(const CohortConfig *cfg, const CohortTensorInfo *t, guint n,
                        const gboolean *frozen, gint64 *stored, gint64 *widest)
{
  if (cfg->frozen_dtype != COHORT_FROZEN_BF16)
    return;
  g_autoptr(GHashTable) layers = g_hash_table_new(g_direct_hash, g_direct_equal);
  for (guint i = 0; i < n; i++) {
    if (!frozen[i] || t[i].ndim < 2)
      continue;
    *stored += (gint64)t[i].numel;
    gpointer key = GINT_TO_POINTER(t[i].layer);
    gint64 widened = (gint64)t[i].numel +
                     (cfg->device == COHORT_DEVICE_CUDA ? 2 * COHORT_GPU_GRANULE_BYTES / 4 : 0);
    gint64 sum = GPOINTER_TO_SIZE(g_hash_table_lookup(layers, key)) + widened;
    g_hash_table_insert(layers, key, GSIZE_TO_POINTER((gsize)sum));
    *widest = MAX(*widest, sum);
  }
}

/* With finetune lora or frozen: the adapters' floats (*adapters) and everything that learns,
 * from the family's table as the model lays it out; P otherwise (or for a config the model
 * will refuse: the run says why). With frozen_dtype bf16, bf16_stored's figures. */
static gint64 trainable_floats(const CohortConfig *cfg, const CohortModelClass *k, gint64 P,
                               gint64 *adapters, gint64 *stored, gint64 *widest)
{
  *adapters = *stored = *widest = 0;
  if (cfg->finetune == COHORT_FINETUNE_FULL || !k->frozen_layout)
    return P;
  guint n = 0;
  size_t floats = 0;
  CohortTensorInfo *t = cohort_model_param_table(cfg, &n, &floats);
  g_autoptr(CohortFinetunePlan) fp =
      t ? cohort_finetune_plan_new(cfg, k->name, cohort_family_desc_lora_targets(k->family, cfg), t,
                                   n, NULL)
        : NULL;
  gint64 learn = 0;
  for (guint i = 0; fp && i < n; i++) {
    if (!fp->frozen[i])
      learn += (gint64)t[i].numel;
    if (fp->adapter[i] >= 0)
      /* rank · (out + in), in = c_in·k·k for a convolution's flattened kernel */
      *adapters += (gint64)fp->rank * (t[i].shape[0] + (gint64)(t[i].numel / t[i].shape[0]));
  }
  if (fp)
    bf16_stored(cfg, t, n, fp->frozen, stored, widest);
  cohort_tensor_table_free(t, n);
  return fp ? learn + *adapters : P;
}

gboolean cohort_memory_plan(const CohortConfig *cfg, int world, int local, CohortMemoryPlan *plan,
                            GError **error)
{
  const CohortModelClass *k = cohort_model_class_for(cfg, NULL, error);
  if (!k)
    return FALSE;
  *plan = (CohortMemoryPlan){.world = MAX(world, 1), .local = MAX(local, 1)};
  plan->stage = plan->world > 1 ? cfg->zero_stage : 0;
  gint64 P = plan->params = cohort_model_count_params(cfg);
  plan->trainable = P;
  plan->act_bytes = (gint64)cohort_model_act_bytes(cfg, cfg->batch_size);
  plan->teacher_bytes = teacher_bytes(cfg);
  if (plan->stage >= 2) {
    sharded(cfg, k, plan);
  } else {
    /* finetune lora or frozen at stages 0 and 1: gradients and optimizer state for what
     * learns alone */
    gint64 adapters = 0, stored = 0, widest = 0;
    gint64 T = trainable_floats(cfg, k, P, &adapters, &stored, &widest);
    plan->trainable = T;
    plan->frozen_bf16 = stored;
    plan->frozen_bytes = 4 * (P + adapters - T) - 2 * stored;
    plan->param_bytes = 4 * T + plan->frozen_bytes;
    /* the layer in use, widened; at start the whole base is fp32 until it is stored */
    plan->working_bytes = 4 * widest;
    plan->grad_bytes = 4 * T;
    /* stage 1: floor(T / N) of what learns and the tail every rank keeps */
    gint64 kept = plan->stage == 1 ? T / plan->world + T % plan->world : T;
    plan->optim_bytes = 4 * state_floats(cfg) * kept;
    plan->ema_bytes = cfg->ema_decay > 0 ? 8 * (P + adapters) : 0;
  }
  /* A CPU rank in bf16 or fp16 multiplies copies of the operands rounded into two buffers that
   * grow to the largest first and second operand (kernels/cpu/precision.c): for a Qwen3-0.6B
   * the tied embedding as the head and the logits' gradient. 4 bytes each: the emulation's fp32
   * copies (bf16 hardware packs 2, so the figure is then an upper bound). A GPU multiplies
   * reduced precision natively. */
  if (cfg->device != COHORT_DEVICE_CUDA && cfg->precision != COHORT_PRECISION_FP32) {
    size_t a = 0, b = 0;
    cohort_model_gemm_operands(cfg, cfg->batch_size, &a, &b);
    plan->working_bytes += 4 * (gint64)(a + b);
  }
  plan->total_bytes = plan->param_bytes + plan->grad_bytes + plan->optim_bytes + plan->ema_bytes +
                      plan->act_bytes + plan->working_bytes + plan->teacher_bytes;
  gboolean whole_at_start = (cfg->init_from && *cfg->init_from) ||
                            cfg->student_init == COHORT_STUDENT_INIT_TEACHER_LAYERS;
  /* At stage 3 what learns is whole at the start (all of it without a frozen part) for an
   * import, a teacher's layers, or with a frozen part always (the start writes the model
   * whole, then each rank keeps its pieces). frozen_dtype bf16: at start the whole base is
   * fp32 (and no layer widened) until stored. */
  gboolean ft = plan->frozen > 0;
  plan->startup_bytes = plan->total_bytes +
                        (plan->stage == 3 && (whole_at_start || ft) ? 4 * plan->trainable : 0) +
                        (plan->frozen_bf16 ? 2 * plan->frozen_bf16 - plan->working_bytes : 0);
  return TRUE;
}

guint64 cohort_machine_memory_bytes(void)
{
  g_autofree char *text = NULL;
  if (!g_file_get_contents("/proc/meminfo", &text, NULL, NULL))
    return 0;
  const char *total = strstr(text, "MemTotal:");
  return total ? g_ascii_strtoull(total + 9, NULL, 10) * 1024 : 0; /* in kB */
}

static double gib(gint64 bytes)
{
  return (double)bytes / (1024.0 * 1024.0 * 1024.0);
}

/* "…; zero_stage 3 needs 4.6 GiB per rank" for the stages the refusal can suggest. */
static char *what_fits(const CohortConfig *cfg, const CohortMemoryPlan *plan, guint64 limit,
                       int ranks)
{
  for (int stage = plan->stage + 1; stage <= 3 && plan->world > 1; stage++) {
    CohortConfig c = *cfg;
    c.zero_stage = stage;
    CohortMemoryPlan p;
    if (cohort_memory_plan(&c, plan->world, plan->local, &p, NULL) &&
        (guint64)(ranks * p.startup_bytes) <= limit)
      return g_strdup_printf("zero_stage %d would need %.2f GiB per rank", stage,
                             gib(p.startup_bytes));
  }
  /* Activations grow with the batch and the example's size, not with the model: recomputing
   * them may fit; else say which keys. */
  const CohortFamilyDesc *f = cohort_family_desc(cfg->model);
  if (plan->act_bytes * 2 > plan->total_bytes && !cfg->activation_checkpointing && f &&
      f->activation_checkpointing) {
    CohortConfig c = *cfg;
    c.activation_checkpointing = TRUE;
    CohortMemoryPlan p;
    if (cohort_memory_plan(&c, plan->world, plan->local, &p, NULL) &&
        (guint64)(ranks * p.startup_bytes) <= limit)
      return g_strdup_printf("activation_checkpointing true would need %.2f GiB per rank",
                             gib(p.startup_bytes));
  }
  if (plan->act_bytes * 2 > plan->total_bytes) {
    gboolean text = cfg->data_format != COHORT_DATA_IMAGES;
    return g_strdup_printf("a smaller batch_size or %s (activations are %.2f GiB of each "
                           "rank's %.2f GiB), or fewer processes on this machine",
                           text ? "seq_len" : "image_size", gib(plan->act_bytes),
                           gib(plan->total_bytes));
  }
  return g_strdup("a smaller model, batch_size or fewer processes on this machine");
}

gboolean cohort_memory_plan_check_host(const CohortMemoryPlan *plan, const CohortConfig *cfg,
                                       guint64 machine_bytes, GError **error)
{
  guint64 need = (guint64)plan->local * (guint64)plan->startup_bytes;
  if (machine_bytes == 0 || need <= machine_bytes)
    return TRUE;
  g_autofree char *fits = what_fits(cfg, plan, machine_bytes, plan->local);
  g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
              "memory: %d processes on this machine at zero_stage %d need %.2f GiB each "
              "(parameters %.2f, gradients %.2f, optimizer %.2f, EMA %.2f, activations %.2f, "
              "working set %.2f, teacher %.2f%s), %.2f GiB together, and this machine has %.2f "
              "GiB; allowed: what fits, e.g. %s",
              plan->local, plan->stage, gib(plan->startup_bytes), gib(plan->param_bytes),
              gib(plan->grad_bytes), gib(plan->optim_bytes), gib(plan->ema_bytes),
              gib(plan->act_bytes), gib(plan->working_bytes), gib(plan->teacher_bytes),
              plan->startup_bytes > plan->total_bytes ? ", the whole model once at start" : "",
              gib((gint64)need), gib((gint64)machine_bytes), fits);
  return FALSE;
}

gboolean cohort_memory_plan_check_device(const CohortMemoryPlan *plan, const CohortConfig *cfg,
                                         int cuda_device, guint64 device_bytes, GError **error)
{
  if (device_bytes == 0 || (guint64)plan->startup_bytes <= device_bytes)
    return TRUE;
  g_autofree char *fits = what_fits(cfg, plan, device_bytes, 1);
  g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
              "memory: each rank at zero_stage %d needs %.2f GiB of GPU memory (parameters %.2f, "
              "gradients %.2f, optimizer %.2f, EMA %.2f, activations %.2f, working set %.2f, "
              "teacher %.2f) and CUDA device %d has %.2f GiB; allowed: what fits, e.g. %s",
              plan->stage, gib(plan->startup_bytes), gib(plan->param_bytes), gib(plan->grad_bytes),
              gib(plan->optim_bytes), gib(plan->ema_bytes), gib(plan->act_bytes),
              gib(plan->working_bytes), gib(plan->teacher_bytes), cuda_device,
              gib((gint64)device_bytes), fits);
  return FALSE;
}

gboolean cohort_memory_plan_check_rank(const CohortConfig *cfg, int world, int local,
                                       int cuda_device, GError **error)
{
  CohortMemoryPlan plan;
  if (!cohort_memory_plan(cfg, world, local, &plan, error))
    return FALSE;
  if (cuda_device < 0)
    return cohort_memory_plan_check_host(&plan, cfg, cohort_machine_memory_bytes(), error);
#if COHORT_HAVE_CUDA
  size_t free_bytes = 0, total_bytes = 0;
  if (cohort_cuda_memory(&free_bytes, &total_bytes) == 0)
    return cohort_memory_plan_check_device(&plan, cfg, cuda_device, total_bytes, error);
#endif
  return TRUE;
}

static void member(JsonBuilder *b, const char *name, gint64 value)
{
  json_builder_set_member_name(b, name);
  json_builder_add_int_value(b, value);
}

void cohort_memory_plan_add_json(const CohortMemoryPlan *plan, guint64 machine_bytes, gboolean gpu,
                                 JsonBuilder *b)
{
  json_builder_set_member_name(b, COHORT_EXPLAIN_MEMORY);
  json_builder_begin_object(b);
  member(b, COHORT_EXPLAIN_ZERO_STAGE, plan->stage);
  member(b, COHORT_EXPLAIN_WORLD_SIZE, plan->world);
  member(b, COHORT_EXPLAIN_LOCAL_RANKS, plan->local);
  member(b, COHORT_EXPLAIN_TRAINABLE, plan->trainable);
  if (plan->frozen > 0)
    member(b, COHORT_EXPLAIN_FROZEN, plan->frozen);
  if (plan->stage >= 2)
    member(b, COHORT_EXPLAIN_UNITS, plan->units);
  json_builder_set_member_name(b, COHORT_EXPLAIN_PER_RANK);
  json_builder_begin_object(b);
  member(b, COHORT_EXPLAIN_PARAMS_BYTES, plan->param_bytes);
  if (plan->frozen_bytes > 0)
    member(b, COHORT_EXPLAIN_FROZEN_BYTES, plan->frozen_bytes);
  member(b, COHORT_EXPLAIN_GRADS_BYTES, plan->grad_bytes);
  member(b, COHORT_EXPLAIN_OPTIM_BYTES, plan->optim_bytes);
  member(b, COHORT_EXPLAIN_EMA_BYTES, plan->ema_bytes);
  member(b, COHORT_EXPLAIN_ACTIVATIONS_BYTES, plan->act_bytes);
  member(b, COHORT_EXPLAIN_WORKING_BYTES, plan->working_bytes);
  member(b, COHORT_EXPLAIN_TEACHER_BYTES, plan->teacher_bytes);
  member(b, COHORT_EXPLAIN_TOTAL_BYTES, plan->total_bytes);
  member(b, COHORT_EXPLAIN_STARTUP_BYTES, plan->startup_bytes);
  json_builder_end_object(b);
  if (!gpu) {
    member(b, COHORT_EXPLAIN_MACHINE_BYTES, (gint64)machine_bytes);
    member(b, COHORT_EXPLAIN_MACHINE_NEED_BYTES, (gint64)plan->local * plan->startup_bytes);
    json_builder_set_member_name(b, COHORT_EXPLAIN_FITS);
    json_builder_add_boolean_value(b, machine_bytes == 0 ||
                                          (guint64)plan->local * (guint64)plan->startup_bytes <=
                                              machine_bytes);
  }
  json_builder_end_object(b);
}

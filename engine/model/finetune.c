/* Fine-tuning plans and their layout (see finetune.h). */
#include "engine/model/finetune.h"

#include <string.h>

#include "engine/base/error.h"
#include "engine/config/finetune-rules.h"
#include "engine/model/model.h"

/* The layer a parameter belongs to: its name without the last part ("fc" of "fc.weight"). */
static char *module_of(const char *name)
{
  const char *dot = strrchr(name, '.');
  return dot ? g_strndup(name, dot - name) : g_strdup(name);
}

void cohort_finetune_plan_free(CohortFinetunePlan *p)
{
  if (!p)
    return;
  g_free(p->frozen);
  g_free(p->adapter);
  g_free(p->targets);
  g_free(p);
}

/* Up to a few names of `what` (tensors for which `pick` holds), for a refusal's "allowed". */
static char *some_names(const CohortTensorInfo *t, guint n, gboolean modules,
                        gboolean (*pick)(const CohortTensorInfo *))
{
  GString *s = g_string_new(NULL);
  guint shown = 0, total = 0;
  for (guint i = 0; i < n; i++) {
    if (!pick(&t[i]))
      continue;
    if (total++ >= 6)
      continue;
    g_autofree char *name = modules ? module_of(t[i].name) : g_strdup(t[i].name);
    g_string_append_printf(s, "%s%s", shown++ ? ", " : "", name);
  }
  if (total > shown)
    g_string_append_printf(s, ", … (%u in all)", total);
  if (total == 0)
    g_string_append(s, "none");
  return g_string_free(s, FALSE);
}

static gboolean any(const CohortTensorInfo *t)
{
  (void)t;
  return TRUE;
}

static gboolean adaptable(const CohortTensorInfo *t)
{
  return t->adapt != COHORT_ADAPT_NONE;
}

/* Marks what `trainable` names as learning; FALSE naming a pattern that names nothing. */
static gboolean apply_trainable(CohortFinetunePlan *p, const CohortConfig *cfg, const char *family,
                                const CohortTensorInfo *t, guint n, GError **error)
{
  g_auto(GStrv) patterns = cohort_finetune_patterns(cfg->trainable);
  g_autofree gboolean *hit = g_new0(gboolean, MAX(n, 1));
  int nothing = cohort_finetune_match_trainable((const char *const *)patterns, t, n, hit);
  if (nothing >= 0) {
    g_autofree char *names = some_names(t, n, FALSE, any);
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "key \"trainable\": pattern \"%s\" names no parameter of the %s model; "
                       "allowed: names, patterns with * and ?, or layer names, like %s",
                       patterns[nothing], family, names);
  }
  for (guint i = 0; i < n; i++)
    if (hit[i])
      p->frozen[i] = FALSE;
  return TRUE;
}

/* Gives every weight `lora_targets` names an adapter; FALSE naming the first pattern that
 * names no weight that can take one. */
static gboolean apply_targets(CohortFinetunePlan *p, const CohortConfig *cfg, const char *family,
                              const char *default_targets, const CohortTensorInfo *t, guint n,
                              GError **error)
{
  if (!default_targets)
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "key \"finetune\": \"lora\" is not available for model \"%s\"; allowed: "
                       "full, frozen",
                       family);
  gboolean own = cfg->lora_targets && *cfg->lora_targets;
  g_auto(GStrv) patterns = cohort_finetune_patterns(own ? cfg->lora_targets : default_targets);
  g_autofree gboolean *hit = g_new0(gboolean, MAX(n, 1));
  CohortTargetMatch m;
  cohort_finetune_match_targets((const char *const *)patterns, t, n, hit, &m);
  g_autofree char *refused_module = m.refused_module;
  if (m.refused >= 0 && (m.nothing < 0 || m.refused < m.nothing)) {
    g_autofree char *names = some_names(t, n, TRUE, adaptable);
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "key \"lora_targets\": pattern \"%s\" names %s of the %s model, which "
                       "cannot take an adapter; allowed: the layers that take one, like %s",
                       patterns[m.refused], refused_module, family, names);
  }
  if (m.nothing >= 0) {
    g_autofree char *names = some_names(t, n, TRUE, adaptable);
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "key \"lora_targets\": pattern \"%s\" names no layer of the %s model; "
                       "allowed: the end of a layer's name or a pattern with * and ?, over "
                       "layers like %s",
                       patterns[m.nothing], family, names);
  }
  /* A convolution's adapter runs as one kernel, W + scale·B A, which has no place for
   * dropout on the adapter's input alone (PEFT's conv LoRA drops the input of lora_A). */
  for (guint i = 0; i < n && cfg->lora_dropout > 0; i++)
    if (hit[i] && t[i].adapt == COHORT_ADAPT_CONV2D) {
      g_autofree char *module = module_of(t[i].name);
      return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                         "key \"lora_dropout\": %g with the convolution %s among lora_targets is "
                         "not supported in this version (a convolution's adapter runs folded into "
                         "its kernel); allowed: lora_dropout 0, or linear layers only",
                         cfg->lora_dropout, module);
    }
  p->targets = g_new(guint, MAX(n, 1));
  for (guint i = 0; i < n; i++)
    if (hit[i]) {
      p->adapter[i] = (int)p->n_adapters;
      p->targets[p->n_adapters++] = i;
    }
  return TRUE;
}

CohortFinetunePlan *cohort_finetune_plan_new(const CohortConfig *cfg, const char *family,
                                             const char *default_targets,
                                             const CohortTensorInfo *tensors, guint n,
                                             GError **error)
{
  g_autoptr(CohortFinetunePlan) p = g_new0(CohortFinetunePlan, 1);
  p->mode = cfg->finetune;
  p->n = n;
  p->frozen = g_new0(gboolean, MAX(n, 1));
  p->adapter = g_new(int, MAX(n, 1));
  p->rank = cfg->lora_rank;
  p->alpha = cfg->lora_alpha;
  p->rslora = cfg->lora_rslora;
  p->dropout = cfg->lora_dropout;
  for (guint i = 0; i < n; i++) {
    p->adapter[i] = -1;
    p->frozen[i] = p->mode != COHORT_FINETUNE_FULL;
  }
  if (p->mode == COHORT_FINETUNE_FULL)
    return g_steal_pointer(&p);
  if (!apply_trainable(p, cfg, family, tensors, n, error))
    return NULL;
  if (p->mode == COHORT_FINETUNE_LORA &&
      !apply_targets(p, cfg, family, default_targets, tensors, n, error))
    return NULL;
  return g_steal_pointer(&p);
}

/* The adapter tensors of weight `w`: lora_A [r, in] and lora_B [out, r], PEFT's shapes; for
 * a convolution [out, c_in, k, k], PEFT's Conv2d pair: lora_A [r, c_in, k, k] (the kernel's
 * stride and padding) and lora_B [out, r, 1, 1], that is [r, in] and [out, r] over the
 * flattened kernel (in = c_in·k·k). */
static void adapter_tensors(const CohortFinetunePlan *p, const CohortTensorInfo *w,
                            CohortTensorInfo *a, CohortTensorInfo *b)
{
  gboolean conv1d = w->adapt == COHORT_ADAPT_CONV1D; /* stored [in, out] */
  gboolean conv2d = w->adapt == COHORT_ADAPT_CONV2D;
  int out = conv1d ? w->shape[1] : w->shape[0];
  size_t in = conv1d ? (size_t)w->shape[0] : w->numel / (size_t)out;
  g_autofree char *module = module_of(w->name);
  *a = (CohortTensorInfo){.name = g_strconcat(module, ".lora_A.weight", NULL),
                          .ndim = 2,
                          .shape = {p->rank, (int)in},
                          .numel = (size_t)p->rank * in,
                          .decay = TRUE,
                          .layer = w->layer};
  *b = (CohortTensorInfo){.name = g_strconcat(module, ".lora_B.weight", NULL),
                          .ndim = 2,
                          .shape = {out, p->rank},
                          .numel = (size_t)out * p->rank,
                          .decay = TRUE,
                          .layer = w->layer};
  if (conv2d) {
    a->ndim = b->ndim = 4;
    a->shape[1] = w->shape[1], a->shape[2] = w->shape[2], a->shape[3] = w->shape[3];
    b->shape[2] = b->shape[3] = 1;
  }
}

static void add_train(CohortFinetuneLayout *l, GArray *train, GArray *source, CohortTensorInfo *t,
                      int src)
{
  t->offset = l->n_trainable;
  l->n_trainable += t->numel;
  g_array_append_val(train, *t);
  g_array_append_val(source, src);
}

void cohort_finetune_layout(const CohortFinetunePlan *p, CohortTensorInfo *tensors, guint n,
                            CohortFinetuneLayout *out)
{
  CohortFinetuneLayout *l = out;
  *l = (CohortFinetuneLayout){0};
  l->moved_from = g_new(size_t, MAX(n, 1));
  l->n_adapter_tensors = 2 * p->n_adapters;
  l->adapters = g_new0(CohortTensorInfo, MAX(l->n_adapter_tensors, 1));
  GArray *train = g_array_new(FALSE, TRUE, sizeof(CohortTensorInfo));
  GArray *source = g_array_new(FALSE, FALSE, sizeof(int));
  for (guint i = 0; i < n; i++) {
    l->moved_from[i] = tensors[i].offset;
    l->n_base_floats = MAX(l->n_base_floats, tensors[i].offset + tensors[i].numel);
    tensors[i].frozen = p->frozen[i];
    if (!p->frozen[i])
      add_train(l, train, source, &tensors[i], (int)i);
    int a = p->adapter[i];
    if (a < 0)
      continue;
    CohortTensorInfo *A = &l->adapters[2 * a], *B = &l->adapters[2 * a + 1];
    adapter_tensors(p, &tensors[i], A, B);
    add_train(l, train, source, A, -1 - 2 * a);
    add_train(l, train, source, B, -2 - 2 * a);
  }
  l->n_params = l->n_trainable;
  for (guint i = 0; i < n; i++)
    if (p->frozen[i]) {
      tensors[i].offset = l->n_params;
      l->n_params += tensors[i].numel;
    }
  /* The train table's copies were taken before the frozen tensors moved: only trainable
   * base tensors and adapters are in it, whose offsets are final. */
  l->n_train = train->len;
  l->train = (CohortTensorInfo *)g_array_free(train, FALSE);
  l->train_source = (int *)g_array_free(source, FALSE);
}

void cohort_finetune_layout_clear(CohortFinetuneLayout *l)
{
  cohort_tensor_table_free(l->adapters, l->n_adapter_tensors);
  g_free(l->train);
  g_free(l->train_source);
  g_free(l->moved_from);
  *l = (CohortFinetuneLayout){0};
}

/* frozen_dtype bf16 (engine/model/frozen-store.h): what it combines with in this version. */
static gboolean check_frozen_dtype(const CohortConfig *cfg, const char *src, GError **error)
{
  const char *why = NULL;
  switch (cohort_frozen_dtype_conflict(cfg)) {
  case COHORT_FROZEN_DTYPE_OK:
    return TRUE;
  case COHORT_FROZEN_DTYPE_NOTHING_FROZEN:
    why = "stores a frozen base, and with finetune \"full\" nothing is frozen; allowed: fp32, "
          "or bf16 with finetune lora or frozen";
    break;
  case COHORT_FROZEN_DTYPE_PRECISION:
    why = "needs precision \"bf16\" (whose products round the weights to bf16 anyway); "
          "allowed: fp32, or bf16 with precision bf16";
    break;
  case COHORT_FROZEN_DTYPE_ZERO:
    why = "is not combined with zero_stage 2 or 3 in this version (stage 3 brings layers in "
          "through the same layer hook); allowed: fp32, or bf16 with zero_stage 0 or 1";
    break;
  case COHORT_FROZEN_DTYPE_EMA:
    why = "is not combined with ema_decay in this version (the EMA copy holds the whole "
          "parameter vector in fp32); allowed: fp32, or bf16 with ema_decay 0";
    break;
  case COHORT_FROZEN_DTYPE_TEACHER_LAYERS:
    why = "is not combined with student_init \"teacher_layers\" (those runs save whole-model "
          "checkpoints); allowed: fp32, or bf16 with student_init \"random\"";
    break;
  }
  return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                     "%s: key \"frozen_dtype\": \"bf16\" %s", src, why);
}

gboolean cohort_finetune_check_config(const CohortConfig *cfg, const char *source, GError **error)
{
  const char *src = source ? source : "config";
  g_auto(GStrv) trainable = cohort_finetune_patterns(cfg->trainable);
  if (cfg->finetune == COHORT_FINETUNE_FROZEN && !trainable[0])
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "%s: key \"trainable\": \"%s\" with finetune \"frozen\" leaves nothing to "
                       "learn; allowed: the parameters that learn, like \"fc.*\" (a ResNet's "
                       "classifier) or \"*.bias\"",
                       src, cfg->trainable ? cfg->trainable : "");
  /* Every ZeRO stage applies to what learns alone (docs/finetuning.md#zero): stages 2 and 3
   * cut the adapters and `trainable` tensors into units and shard them; the frozen base stays
   * whole on every rank. */
  if (cfg->adapter_from && *cfg->adapter_from && cfg->finetune != COHORT_FINETUNE_LORA)
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "%s: key \"adapter_from\": \"%s\" needs finetune \"lora\"; allowed: \"\"",
                       src, cfg->adapter_from);
  return check_frozen_dtype(cfg, src, error);
}

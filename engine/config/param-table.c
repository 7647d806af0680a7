/* Parameter tables from the config alone, and what the fine-tuning patterns match (see
 * param-table.h). Each table mirrors its family's build_table in engine/models: same names,
 * shapes, order and LoRA kinds (tests/test-param-table.c holds them equal). */
#include "engine/config/param-table.h"

#include <string.h>

typedef struct {
  GArray *t; /* of CohortTensorInfo */
  gint64 off;
} Table;

static CohortTensorInfo *add(Table *tb, char *name, int ndim, const int *shape, int adapt)
{
  CohortTensorInfo t = {.name = name, .ndim = ndim, .offset = (size_t)tb->off, .numel = 1};
  for (int d = 0; d < ndim; d++) {
    t.shape[d] = shape[d];
    t.numel *= (size_t)shape[d];
  }
  t.decay = ndim >= 2;
  t.adapt = adapt;
  tb->off += (gint64)t.numel;
  g_array_append_val(tb->t, t);
  return &g_array_index(tb->t, CohortTensorInfo, tb->t->len - 1);
}

/* engine/models/gpt.c: Hugging Face GPT-2's names; the four projections are Conv1D. */
static void gpt_table(Table *tb, const CohortConfig *cfg)
{
  static const char *const names[] = {
      "ln_1.weight",        "ln_1.bias",        "attn.c_attn.weight", "attn.c_attn.bias",
      "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",        "ln_2.bias",
      "mlp.c_fc.weight",    "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias",
  };
  int C = cfg->n_embd;
  add(tb, g_strdup("wte.weight"), 2, (int[]){cfg->vocab_size, C}, COHORT_ADAPT_NONE);
  add(tb, g_strdup("wpe.weight"), 2, (int[]){cfg->seq_len, C}, COHORT_ADAPT_NONE);
  const int dims[12][2] = {
      {C, 0}, {C, 0}, {C, 3 * C}, {3 * C, 0}, {C, C},     {C, 0},
      {C, 0}, {C, 0}, {C, 4 * C}, {4 * C, 0}, {4 * C, C}, {C, 0},
  };
  for (int l = 0; l < cfg->n_layer; l++)
    for (int p = 0; p < 12; p++)
      add(tb, g_strdup_printf("h.%d.%s", l, names[p]), dims[p][1] ? 2 : 1, dims[p],
          dims[p][1] ? COHORT_ADAPT_CONV1D : COHORT_ADAPT_NONE);
  add(tb, g_strdup("ln_f.weight"), 1, &C, COHORT_ADAPT_NONE);
  add(tb, g_strdup("ln_f.bias"), 1, &C, COHORT_ADAPT_NONE);
}

/* engine/models/dit.c: the reference DiT's names; every nn.Linear takes an adapter, not the
 * patch embedding (a convolution) nor the label table. */
static gboolean dit_table(Table *tb, const CohortConfig *cfg)
{
  if (cfg->patch_size < 1 || cfg->image_size % cfg->patch_size != 0)
    return FALSE;
  int C = cfg->n_embd, P = cfg->patch_size, K = cfg->image_channels * P * P;
  int L = COHORT_ADAPT_LINEAR, N = COHORT_ADAPT_NONE;
  add(tb, g_strdup("x_embedder.proj.weight"), 4, (int[]){C, cfg->image_channels, P, P}, N);
  add(tb, g_strdup("x_embedder.proj.bias"), 1, &C, N);
  add(tb, g_strdup("t_embedder.mlp.0.weight"), 2, (int[]){C, 256}, L);
  add(tb, g_strdup("t_embedder.mlp.0.bias"), 1, &C, N);
  add(tb, g_strdup("t_embedder.mlp.2.weight"), 2, (int[]){C, C}, L);
  add(tb, g_strdup("t_embedder.mlp.2.bias"), 1, &C, N);
  add(tb, g_strdup("y_embedder.embedding_table.weight"), 2,
      (int[]){MAX(cfg->num_classes, 1) + 1, C}, N);
  static const char *const names[] = {"attn.qkv", "attn.proj", "mlp.fc1", "mlp.fc2",
                                      "adaLN_modulation.1"};
  const int out[] = {3 * C, C, 4 * C, C, 6 * C}, in[] = {C, C, C, 4 * C, C};
  for (int l = 0; l < cfg->n_layer; l++)
    for (int p = 0; p < 5; p++) {
      add(tb, g_strdup_printf("blocks.%d.%s.weight", l, names[p]), 2, (int[]){out[p], in[p]}, L);
      add(tb, g_strdup_printf("blocks.%d.%s.bias", l, names[p]), 1, &out[p], N);
    }
  add(tb, g_strdup("final_layer.linear.weight"), 2, (int[]){K, C}, L);
  add(tb, g_strdup("final_layer.linear.bias"), 1, &K, N);
  add(tb, g_strdup("final_layer.adaLN_modulation.1.weight"), 2, (int[]){2 * C, C}, L);
  add(tb, g_strdup("final_layer.adaLN_modulation.1.bias"), 1, (int[]){2 * C}, N);
  return TRUE;
}

static void conv_bn(Table *tb, const char *prefix, const char *conv, const char *bn, int c_in,
                    int c_out, int k)
{
  add(tb, g_strdup_printf("%s%s.weight", prefix, conv), 4, (int[]){c_out, c_in, k, k},
      COHORT_ADAPT_CONV2D);
  add(tb, g_strdup_printf("%s%s.weight", prefix, bn), 1, &c_out, COHORT_ADAPT_NONE);
  add(tb, g_strdup_printf("%s%s.bias", prefix, bn), 1, &c_out, COHORT_ADAPT_NONE);
}

/* engine/models/resnet.c: torchvision's names. resnet_variant counts as
 * CohortResnetVariant (engine/models/resnet.h): cifar, resnet18, 34, 50, 101. */
static gboolean resnet_table(Table *tb, const CohortConfig *cfg)
{
  static const struct {
    int stages, blocks[4];
    gboolean bottleneck;
  } layouts[] = {{3, {0}, FALSE},
                 {4, {2, 2, 2, 2}, FALSE},
                 {4, {3, 4, 6, 3}, FALSE},
                 {4, {3, 4, 6, 3}, TRUE},
                 {4, {3, 4, 23, 3}, TRUE}};
  int v = cfg->resnet_variant;
  if (v < 0 || v >= (int)G_N_ELEMENTS(layouts))
    return FALSE;
  gboolean cifar = v == 0;
  if (cifar ? cfg->n_layer < 8 || (cfg->n_layer - 2) % 6 != 0
            : cfg->image_channels != 3 || cfg->image_size < 32)
    return FALSE;
  int blocks[4];
  for (int s = 0; s < 4; s++)
    blocks[s] = cifar ? (cfg->n_layer - 2) / 6 : layouts[v].blocks[s];
  int width = cifar ? cfg->resnet_width : 64;
  conv_bn(tb, "", "conv1", "bn1", cfg->image_channels, width, cifar ? 3 : 7);
  int in = width;
  for (int st = 0; st < layouts[v].stages; st++)
    for (int i = 0; i < blocks[st]; i++) {
      g_autofree char *prefix = g_strdup_printf("layer%d.%d.", st + 1, i);
      int planes = width << st, stride = st > 0 && i == 0 ? 2 : 1;
      int out = layouts[v].bottleneck ? 4 * planes : planes;
      if (layouts[v].bottleneck) {
        conv_bn(tb, prefix, "conv1", "bn1", in, planes, 1);
        conv_bn(tb, prefix, "conv2", "bn2", planes, planes, 3);
        conv_bn(tb, prefix, "conv3", "bn3", planes, out, 1);
      } else {
        conv_bn(tb, prefix, "conv1", "bn1", in, planes, 3);
        conv_bn(tb, prefix, "conv2", "bn2", planes, planes, 3);
      }
      if (stride != 1 || in != out)
        conv_bn(tb, prefix, "downsample.0", "downsample.1", in, out, 1);
      in = out;
    }
  int classes = MAX(cfg->num_classes, 1);
  add(tb, g_strdup("fc.weight"), 2, (int[]){classes, in}, COHORT_ADAPT_LINEAR);
  add(tb, g_strdup("fc.bias"), 1, &classes, COHORT_ADAPT_NONE);
  return TRUE;
}

CohortTensorInfo *cohort_config_param_table(const CohortConfig *cfg, guint *n_tensors,
                                            gint64 *n_params)
{
  Table tb = {.t = g_array_new(FALSE, TRUE, sizeof(CohortTensorInfo))};
  gboolean ok = TRUE;
  if (g_strcmp0(cfg->model, "gpt") == 0)
    gpt_table(&tb, cfg);
  else if (g_strcmp0(cfg->model, "dit") == 0)
    ok = dit_table(&tb, cfg);
  else if (g_strcmp0(cfg->model, "resnet") == 0)
    ok = resnet_table(&tb, cfg);
  else
    ok = FALSE;
  *n_tensors = tb.t->len;
  *n_params = tb.off;
  CohortTensorInfo *t = (CohortTensorInfo *)g_array_free(tb.t, FALSE);
  if (!ok) {
    cohort_config_param_table_free(t, *n_tensors);
    *n_tensors = 0;
    *n_params = 0;
    return NULL;
  }
  return t;
}

void cohort_config_param_table_free(CohortTensorInfo *t, guint n)
{
  for (guint i = 0; t && i < n; i++)
    g_free((char *)t[i].name);
  g_free(t);
}

const char *cohort_config_lora_default_targets(const char *family)
{
  if (g_strcmp0(family, "gpt") == 0)
    return "attn.c_attn,attn.c_proj,mlp.c_fc,mlp.c_proj";
  if (g_strcmp0(family, "dit") == 0)
    return "attn.qkv,attn.proj,mlp.fc1,mlp.fc2,adaLN_modulation.1";
  if (g_strcmp0(family, "resnet") == 0)
    return "fc";
  return NULL;
}

GStrv cohort_finetune_patterns(const char *list)
{
  g_autoptr(GPtrArray) out = g_ptr_array_new();
  g_auto(GStrv) parts = g_strsplit(list ? list : "", ",", -1);
  for (guint i = 0; parts[i]; i++) {
    char *p = g_strstrip(g_strdup(parts[i]));
    if (*p)
      g_ptr_array_add(out, p);
    else
      g_free(p);
  }
  g_ptr_array_add(out, NULL);
  return (GStrv)g_ptr_array_free(g_steal_pointer(&out), FALSE);
}

static gboolean is_glob(const char *pattern)
{
  return strpbrk(pattern, "*?") != NULL;
}

gboolean cohort_finetune_names_module(const char *pattern, const char *module)
{
  if (is_glob(pattern))
    return g_pattern_match_simple(pattern, module);
  size_t lp = strlen(pattern), lm = strlen(module);
  if (lp == lm)
    return strcmp(pattern, module) == 0;
  return lm > lp && module[lm - lp - 1] == '.' && strcmp(module + lm - lp, pattern) == 0;
}

/* The layer a parameter belongs to: its name without the last part ("fc" of "fc.weight"). */
static char *module_of(const char *name)
{
  const char *dot = strrchr(name, '.');
  return dot ? g_strndup(name, dot - name) : g_strdup(name);
}

gboolean cohort_finetune_names_param(const char *pattern, const char *name)
{
  if (strcmp(pattern, name) == 0 || (is_glob(pattern) && g_pattern_match_simple(pattern, name)))
    return TRUE;
  if (is_glob(pattern))
    return FALSE;
  g_autofree char *module = module_of(name);
  return cohort_finetune_names_module(pattern, module);
}

void cohort_finetune_match_targets(const char *const *patterns, const CohortTensorInfo *t, guint n,
                                   gboolean *hit, CohortTargetMatch *m)
{
  *m = (CohortTargetMatch){.nothing = -1, .refused = -1};
  memset(hit, 0, n * sizeof(*hit));
  for (int k = 0; patterns[k]; k++) {
    gboolean any = FALSE;
    for (guint i = 0; i < n; i++) {
      if (!g_str_has_suffix(t[i].name, ".weight"))
        continue;
      g_autofree char *module = module_of(t[i].name);
      if (!cohort_finetune_names_module(patterns[k], module))
        continue;
      any = TRUE;
      if (t[i].adapt != COHORT_ADAPT_NONE) {
        hit[i] = TRUE;
      } else if (m->refused < 0) {
        m->refused = k;
        m->refused_module = g_steal_pointer(&module);
      }
    }
    if (!any && m->nothing < 0)
      m->nothing = k;
  }
}

int cohort_finetune_match_trainable(const char *const *patterns, const CohortTensorInfo *t, guint n,
                                    gboolean *hit)
{
  int nothing = -1;
  memset(hit, 0, n * sizeof(*hit));
  for (int k = 0; patterns[k]; k++) {
    gboolean any = FALSE;
    for (guint i = 0; i < n; i++)
      if (cohort_finetune_names_param(patterns[k], t[i].name))
        any = hit[i] = TRUE;
    if (!any && nothing < 0)
      nothing = k;
  }
  return nothing;
}

static void count_targets(const CohortConfig *cfg, const CohortTensorInfo *t, guint n,
                          CohortFinetuneCount *out)
{
  const char *def = cohort_config_lora_default_targets(cfg->model);
  gboolean own = cfg->lora_targets && *cfg->lora_targets;
  g_auto(GStrv) patterns = cohort_finetune_patterns(own ? cfg->lora_targets : def);
  g_autofree gboolean *hit = g_new0(gboolean, MAX(n, 1));
  CohortTargetMatch m;
  cohort_finetune_match_targets((const char *const *)patterns, t, n, hit, &m);
  if (m.nothing >= 0)
    out->targets_nothing = g_strdup(patterns[m.nothing]);
  out->targets_refused = m.refused_module;
  for (guint i = 0; i < n; i++)
    if (hit[i]) {
      out->n_targets++;
      out->adapter_params +=
          (gint64)cfg->lora_rank * (t[i].shape[0] + (gint64)(t[i].numel / t[i].shape[0]));
    }
}

static void count_trainable(const CohortConfig *cfg, const CohortTensorInfo *t, guint n,
                            CohortFinetuneCount *out)
{
  g_auto(GStrv) patterns = cohort_finetune_patterns(cfg->trainable);
  g_autofree gboolean *hit = g_new0(gboolean, MAX(n, 1));
  int nothing = cohort_finetune_match_trainable((const char *const *)patterns, t, n, hit);
  if (nothing >= 0)
    out->trainable_nothing = g_strdup(patterns[nothing]);
  for (guint i = 0; i < n; i++)
    if (hit[i]) {
      out->n_trainable++;
      out->trainable_base += (gint64)t[i].numel;
    }
}

gboolean cohort_finetune_count(const CohortConfig *cfg, CohortFinetuneCount *out)
{
  *out = (CohortFinetuneCount){0};
  guint n = 0;
  CohortTensorInfo *t = cohort_config_param_table(cfg, &n, &out->base_params);
  if (!t)
    return FALSE;
  if (cohort_config_lora_default_targets(cfg->model))
    count_targets(cfg, t, n, out);
  count_trainable(cfg, t, n, out);
  cohort_config_param_table_free(t, n);
  gboolean lora = cfg->finetune == COHORT_FINETUNE_LORA;
  out->params = out->base_params + (lora ? out->adapter_params : 0);
  switch (cfg->finetune) {
  case COHORT_FINETUNE_LORA:
    out->learning = out->adapter_params + out->trainable_base;
    break;
  case COHORT_FINETUNE_FROZEN:
    out->learning = out->trainable_base;
    break;
  default:
    out->learning = out->base_params;
    break;
  }
  return TRUE;
}

void cohort_finetune_count_clear(CohortFinetuneCount *c)
{
  g_clear_pointer(&c->targets_nothing, g_free);
  g_clear_pointer(&c->targets_refused, g_free);
  g_clear_pointer(&c->trainable_nothing, g_free);
}

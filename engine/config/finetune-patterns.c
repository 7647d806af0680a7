/* What the fine-tuning patterns match (see finetune-patterns.h). */
#include "engine/config/finetune-patterns.h"

#include <string.h>

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

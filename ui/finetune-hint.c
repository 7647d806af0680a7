#include "ui/finetune-hint.h"

#include <glib/gi18n.h>

#include "engine/families/finetune-count.h"

/* A parameter count as people read it: 1536, 131.1 k, 1.18 M, 1.23 G. */
static char *amount(gint64 n)
{
  if (n < 10000)
    return g_strdup_printf("%" G_GINT64_FORMAT, n);
  if (n < 1000000)
    return g_strdup_printf(_("%.1f k"), n / 1e3);
  if (n < 1000000000)
    return g_strdup_printf(_("%.2f M"), n / 1e6);
  return g_strdup_printf(_("%.2f G"), n / 1e9);
}

static char *targets_hint(const CohortFinetuneCount *c)
{
  if (c->targets_nothing)
    return g_strdup_printf(_("“%s” matches no layer of this model"), c->targets_nothing);
  if (c->targets_refused)
    return g_strdup_printf(_("“%s” cannot take an adapter"), c->targets_refused);
  g_autofree char *params = amount(c->adapter_params);
  return g_strdup_printf(ngettext("Matches %u layer: %s adapter parameters",
                                  "Matches %u layers: %s adapter parameters", c->n_targets),
                         c->n_targets, params);
}

static char *trainable_hint(const CohortConfig *cfg, const CohortFinetuneCount *c)
{
  if (c->trainable_nothing)
    return g_strdup_printf(_("“%s” matches no parameter of this model"), c->trainable_nothing);
  if (c->n_trainable == 0)
    return cfg->finetune == COHORT_FINETUNE_FROZEN
               ? g_strdup(_("Matches nothing: with “frozen” nothing would learn"))
               : NULL;
  g_autofree char *params = amount(c->trainable_base);
  return g_strdup_printf(ngettext("Matches %u tensor: %s parameters",
                                  "Matches %u tensors: %s parameters", c->n_trainable),
                         c->n_trainable, params);
}

char *cohort_finetune_hint(const CohortConfig *cfg, const char *key, gboolean *refused)
{
  *refused = FALSE;
  gboolean targets = g_strcmp0(key, "lora_targets") == 0;
  if (!targets && g_strcmp0(key, "trainable") != 0)
    return NULL;
  if (cfg->finetune == COHORT_FINETUNE_FULL || (targets && cfg->finetune != COHORT_FINETUNE_LORA))
    return NULL;
  CohortFinetuneCount c;
  if (!cohort_finetune_count(cfg, &c))
    return NULL;
  char *hint = targets ? targets_hint(&c) : trainable_hint(cfg, &c);
  *refused = targets ? c.targets_nothing || c.targets_refused
                     : c.trainable_nothing || (c.n_trainable == 0 && hint);
  cohort_finetune_count_clear(&c);
  return hint;
}

char *cohort_finetune_learning(const CohortConfig *cfg)
{
  CohortFinetuneCount c;
  if (!cohort_finetune_count(cfg, &c))
    return NULL;
  g_autofree char *learning = amount(c.learning);
  g_autofree char *all = amount(c.params);
  double share = c.params > 0 ? 100.0 * (double)c.learning / (double)c.params : 0;
  cohort_finetune_count_clear(&c);
  /* TRANSLATORS: "1.18 M of 125.6 M parameters learn (0.94 %)" */
  return g_strdup_printf(_("%s of %s parameters learn (%.3g %%)"), learning, all, share);
}

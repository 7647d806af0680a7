#include "engine/config/model-families.h"

#define FAMILY_ROW(name, label) {#name, label},
static const CohortFamily families[] = {COHORT_MODEL_FAMILIES(FAMILY_ROW)};
#undef FAMILY_ROW

const CohortFamily *cohort_families(guint *n_families)
{
  *n_families = G_N_ELEMENTS(families);
  return families;
}

const CohortFamily *cohort_family_find(const char *name)
{
  for (guint i = 0; name != NULL && i < G_N_ELEMENTS(families); i++)
    if (g_str_equal(families[i].name, name))
      return &families[i];
  return NULL;
}

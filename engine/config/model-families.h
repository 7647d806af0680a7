/* The model families Cohort trains, declared once. This list is the source of every other:
 * the registry (engine/models/registry.c) builds its class table from it and the families
 * library (engine/families/family.c) its table of descriptions, so each family here must
 * define `cohort_<name>_class` and `cohort_family_<name>` (the build fails otherwise) and none
 * exists outside it; the config's `model` key takes its choices from it; the window takes its
 * labels for the families from it. The `model` key sits below everything that describes or
 * runs a family, which is why the list lives here.
 *
 * A new family: one FAMILY line below (its name as the `model` key spells it, and the window's
 * English label, which po/meson.build extracts for translation), then its description in
 * engine/families/ and its class in engine/models/ (docs/architecture.md, "A new model
 * family"; tests/test-families.c walks the checklist). */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* FAMILY(name, label) for every family, in the order the window lists them. */
#define COHORT_MODEL_FAMILIES(FAMILY)                                                              \
  FAMILY(gpt, "GPT (text)")                                                                        \
  FAMILY(llama, "Llama, Qwen, Mistral (text)")                                                     \
  FAMILY(dit, "Diffusion transformer (images)")                                                    \
  FAMILY(resnet, "ResNet (image classifier)")

typedef struct {
  const char *name;  /* the `model` key's value */
  const char *label; /* the window's name for it, untranslated (translate with _()) */
} CohortFamily;

/* The families in declaration order; *n_families receives their number. */
const CohortFamily *cohort_families(guint *n_families);

/* The family named `name`, or NULL. */
const CohortFamily *cohort_family_find(const char *name);

G_END_DECLS

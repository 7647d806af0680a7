/* How the window names and arranges the config keys: translated labels, and the sections each
 * page is divided into. Keys the layout does not mention still get a control (in a section
 * "Other" of their page), so a key added to the engine's table is never lost. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* A titled block of keys on one page. */
typedef struct {
  const char *page;        /* the key table's page, e.g. "training" */
  const char *title;       /* untranslated (N_), translate with _() */
  const char *const *keys; /* NULL-terminated */
} CohortKeySection;

/* Whether this build and machine have GPUs to train on (the default until the window knows):
 * where not, the switch of enable_multi_gpu and its section are named for what they do there,
 * several CPU processes ("Train on several processes"), and the key keeps its name. */
void cohort_key_labels_set_gpus(gboolean gpus);
gboolean cohort_key_labels_get_gpus(void);

/* The translated label of a key, or NULL when the layout has none (show the key's name). */
const char *cohort_key_label(const char *key);

/* The same untranslated (the msgid), for the tests that check every key has a translation.
 * Both depend on cohort_key_labels_set_gpus. */
const char *cohort_key_label_msgid(const char *key);

/* The sections, in page order; *n_sections receives their number. */
const CohortKeySection *cohort_key_sections(guint *n_sections);
/* A section's translated title, as this machine names it (cohort_key_labels_set_gpus). */
const char *cohort_key_section_title(const CohortKeySection *section);

/* The pages in order, NULL-terminated, and a page's translated title. */
const char *const *cohort_key_pages(void);
const char *cohort_key_page_title(const char *page);

/* Keys that live in the Multi-node settings dialog, not on the Distributed page. */
const char *const *cohort_key_multinode_keys(void);

/* The translated name of a choice value (e.g. "cosine"), or the value itself. */
const char *cohort_key_choice_label(const char *value);

G_END_DECLS

/* One control per TrainConfig key, built from the engine's key table and bound to a config in
 * memory. Every edit goes through cohort_config_set, so validation is the engine's: a refused
 * value keeps its text in the control, which gets the css class "error" and the engine's
 * message as tooltip, while the config keeps its last valid value. */
#pragma once

#include <gtk/gtk.h>

#include "engine/config/config.h"

G_BEGIN_DECLS

#define COHORT_TYPE_CONFIG_FORM (cohort_config_form_get_type())
G_DECLARE_FINAL_TYPE(CohortConfigForm, cohort_config_form, COHORT, CONFIG_FORM, GObject)

/* Creates a control for every key of cohort_config_keys(), bound to a config with the
 * defaults. The "changed" signal (no arguments) is emitted after every edit, whether the
 * engine accepted it or not, and after cohort_config_form_set_config. */
CohortConfigForm *cohort_config_form_new(void);

/* The config in memory: every accepted edit is in it, refused ones are not. */
const CohortConfig *cohort_config_form_get_config(CohortConfigForm *form);

/* Replaces the config (copied), updates every control and clears all errors. */
void cohort_config_form_set_config(CohortConfigForm *form, const CohortConfig *cfg);

/* Number of controls holding a refused value, and the first such message (NULL if none). */
guint cohort_config_form_count_errors(CohortConfigForm *form);
const char *cohort_config_form_first_error(CohortConfigForm *form);

/* The first line under a key that says a run would be refused (a fine-tuning pattern that
 * matches nothing or names a layer that takes no adapter), or NULL. The config holds such a
 * value (a pattern is any text), but Start stays off while it does. */
const char *cohort_config_form_refused_hint(CohortConfigForm *form);

/* Puts `text` into the control as a user would type or pick it; the binding then applies it
 * (the window sets a key this way, so the control shows it). Returns whether the engine
 * accepted it. */
gboolean cohort_config_form_set_text(CohortConfigForm *form, const char *key, const char *text);

/* The pre-launch problem shown on `key`, or NULL. */
const char *cohort_config_form_get_problem(CohortConfigForm *form, const char *key);

/* A pre-launch problem of `key` (ui/launch-check.h; NULL clears it): shown on the control like a
 * refused value, but kept apart from refusals (it changes nothing in the config, and
 * cohort_config_form_count_errors leaves it out). */
void cohort_config_form_set_problem(CohortConfigForm *form, const char *key, const char *message);
void cohort_config_form_clear_problems(CohortConfigForm *form);

/* The first refusal, else the first problem, among the keys of page `page` (the key table's
 * page), or NULL when the page has none. */
const char *cohort_config_form_page_issue(CohortConfigForm *form, const char *page);

/* Marks a choice of `key` as not available in this build: the drop-down leaves it out, and a
 * config that holds it anyway shows it with `reason` as the control's error. */
void cohort_config_form_hide_choice(CohortConfigForm *form, const char *key, const char *value,
                                    const char *reason);

/* A scrolled page with the keys of page `page_name`, in the sections of key-labels.h plus a section
 * "Other" for keys the layout does not place. Keys in `skip` (NULL-terminated, may be NULL)
 * are left out. `top`, when not NULL, is put above the sections. Each row can be placed once. */
GtkWidget *cohort_config_form_build_page(CohortConfigForm *form, const char *page_name,
                                         const char *const *skip, GtkWidget *top);

/* Names every key and section again (cohort_key_label, cohort_key_section_title): after
 * cohort_key_labels_set_gpus. */
void cohort_config_form_relabel(CohortConfigForm *form);
/* The label shown for `key`. */
const char *cohort_config_form_get_label(CohortConfigForm *form, const char *key);

/* A list of rows for the given keys (NULL-terminated), for dialogs. */
GtkWidget *cohort_config_form_build_rows(CohortConfigForm *form, const char *const *keys);

G_END_DECLS

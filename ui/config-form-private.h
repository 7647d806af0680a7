/* What the window tests use to read and drive the config form's controls; not for the rest
 * of the window. */
#pragma once

#include "ui/config-form.h"

G_BEGIN_DECLS

/* The input widget of `key` (GtkSpinButton, GtkEntry, GtkSwitch or GtkDropDown), or NULL. */
GtkWidget *cohort_config_form_get_control(CohortConfigForm *form, const char *key);

/* The control's value in the text form cohort_config_set accepts. */
char *cohort_config_form_get_text(CohortConfigForm *form, const char *key);

/* The engine's message for a refused value of `key`, or NULL when the control is valid. */
const char *cohort_config_form_get_error(CohortConfigForm *form, const char *key);

/* The file-chooser button beside a path key's entry, or NULL for other keys. */
GtkWidget *cohort_config_form_get_chooser(CohortConfigForm *form, const char *key);

/* The line shown under a key's name (the tokenizer found, what the fine-tuning patterns
 * match), or NULL when none is shown. */
const char *cohort_config_form_get_hint(CohortConfigForm *form, const char *key);
/* Whether that line shows a refusal (the "error" style). */
gboolean cohort_config_form_hint_is_error(CohortConfigForm *form, const char *key);

G_END_DECLS

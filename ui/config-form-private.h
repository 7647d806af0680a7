/* What the window tests use to read and drive the config form's controls; not for the rest
 * of the window. */
#pragma once

#include "ui/config-form.h"

G_BEGIN_DECLS

/* The input widget of `key` (GtkSpinButton, GtkEntry, GtkSwitch or GtkDropDown), or NULL. */
GtkWidget *cohort_config_form_get_control(CohortConfigForm *form, const char *key);

/* The control's value in the text form cohort_config_set accepts. */
char *cohort_config_form_get_text(CohortConfigForm *form, const char *key);

/* Puts `text` into the control as a user would type or pick it; the binding then applies it.
 * Returns whether the engine accepted it. */
gboolean cohort_config_form_set_text(CohortConfigForm *form, const char *key, const char *text);

/* The engine's message for a refused value of `key`, or NULL when the control is valid. */
const char *cohort_config_form_get_error(CohortConfigForm *form, const char *key);

/* The folder button of `key` (cohort_config_form_add_folder_chooser), or NULL; and the chooser
 * its last click opened and that has not answered yet, or NULL. */
GtkWidget *cohort_config_form_get_chooser_button(CohortConfigForm *form, const char *key);
GtkNativeDialog *cohort_config_form_get_open_chooser(CohortConfigForm *form);

G_END_DECLS

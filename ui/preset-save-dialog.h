/* The "Save preset as" dialog: asks for the name of a user preset. It answers with the
 * "response" signal of GtkDialog, GTK_RESPONSE_ACCEPT for Save; whoever opened it reads the
 * name, saves and destroys the dialog. */
#pragma once

#include <gtk/gtk.h>

G_BEGIN_DECLS

#define COHORT_TYPE_PRESET_SAVE_DIALOG (cohort_preset_save_dialog_get_type())
G_DECLARE_FINAL_TYPE(CohortPresetSaveDialog, cohort_preset_save_dialog, COHORT, PRESET_SAVE_DIALOG,
                     GtkDialog)

/* A modal dialog over `parent` with Cancel and Save in its header bar; the name field holds
 * `name` (NULL: empty) and Enter in it saves. */
GtkWidget *cohort_preset_save_dialog_new(GtkWindow *parent, const char *name);

/* The name as typed. */
const char *cohort_preset_save_dialog_get_name(CohortPresetSaveDialog *dialog);

G_END_DECLS

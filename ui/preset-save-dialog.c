#include "ui/preset-save-dialog.h"

struct _CohortPresetSaveDialog {
  GtkDialog parent_instance;
  GtkWidget *name_entry;
};

G_DEFINE_FINAL_TYPE(CohortPresetSaveDialog, cohort_preset_save_dialog, GTK_TYPE_DIALOG)

static void cohort_preset_save_dialog_dispose(GObject *obj)
{
  gtk_widget_dispose_template(GTK_WIDGET(obj), COHORT_TYPE_PRESET_SAVE_DIALOG);
  G_OBJECT_CLASS(cohort_preset_save_dialog_parent_class)->dispose(obj);
}

static void cohort_preset_save_dialog_class_init(CohortPresetSaveDialogClass *klass)
{
  GtkWidgetClass *wc = GTK_WIDGET_CLASS(klass);
  G_OBJECT_CLASS(klass)->dispose = cohort_preset_save_dialog_dispose;
  gtk_widget_class_set_template_from_resource(wc, "/org/cohort/Trainer/preset-save-dialog.ui");
  gtk_widget_class_bind_template_child(wc, CohortPresetSaveDialog, name_entry);
}

static void cohort_preset_save_dialog_init(CohortPresetSaveDialog *dialog)
{
  gtk_widget_init_template(GTK_WIDGET(dialog));
}

GtkWidget *cohort_preset_save_dialog_new(GtkWindow *parent, const char *name)
{
  /* use-header-bar is construct-only, so it is set here rather than in the template. */
  CohortPresetSaveDialog *dialog = g_object_new(COHORT_TYPE_PRESET_SAVE_DIALOG, "use-header-bar",
                                                TRUE, "transient-for", parent, NULL);
  /* Save is made the default here rather than with default="true" in the template: GTK 4.8
   * moves a template's action widgets into the header bar after construction, and the move
   * drops a default set before it (Enter would then do nothing). */
  gtk_dialog_set_default_response(GTK_DIALOG(dialog), GTK_RESPONSE_ACCEPT);
  if (name != NULL)
    gtk_editable_set_text(GTK_EDITABLE(dialog->name_entry), name);
  return GTK_WIDGET(dialog);
}

const char *cohort_preset_save_dialog_get_name(CohortPresetSaveDialog *dialog)
{
  return gtk_editable_get_text(GTK_EDITABLE(dialog->name_entry));
}

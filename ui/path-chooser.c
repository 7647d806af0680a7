#include "ui/path-chooser.h"

#include <glib/gi18n.h>
#include <string.h>

#include "engine/config/config.h"

typedef struct {
  GtkEditable *entry; /* not owned: the button lives beside it, in the same row */
  char *title;
  CohortPathWantsFolder wants_folder;
  gpointer data;
  GtkNativeDialog *open; /* the chooser shown now, or NULL; owned while shown */
} Chooser;

/* Forgets the shown chooser (answered, or its button is going away). */
static void close_open(Chooser *c)
{
  if (c->open == NULL)
    return;
  GtkNativeDialog *native = g_steal_pointer(&c->open);
  g_signal_handlers_disconnect_by_data(native, c);
  gtk_native_dialog_destroy(native);
  g_object_unref(native);
  g_object_unref(c->entry);
}

static void chooser_free(gpointer p)
{
  Chooser *c = p;
  close_open(c);
  g_free(c->title);
  g_free(c);
}

char *cohort_path_chooser_shown_path(const char *path)
{
  g_autofree char *cwd = g_get_current_dir();
  g_autofree char *prefix = g_strconcat(cwd, G_DIR_SEPARATOR_S, NULL);
  if (g_str_has_prefix(path, prefix) && path[strlen(prefix)] != '\0')
    return g_strdup(path + strlen(prefix));
  return g_strdup(path);
}

GtkFileChooserAction cohort_path_chooser_action(GtkWidget *button)
{
  Chooser *c = g_object_get_data(G_OBJECT(button), "cohort-chooser");
  gboolean folder = c->wants_folder != NULL && c->wants_folder(c->data);
  return folder ? GTK_FILE_CHOOSER_ACTION_SELECT_FOLDER : GTK_FILE_CHOOSER_ACTION_OPEN;
}

GtkNativeDialog *cohort_path_chooser_get_open(GtkWidget *button)
{
  Chooser *c = g_object_get_data(G_OBJECT(button), "cohort-chooser");
  return c->open;
}

static void on_response(GtkNativeDialog *native, int response, gpointer data)
{
  Chooser *c = data;
  if (response == GTK_RESPONSE_ACCEPT) {
    g_autoptr(GFile) file = gtk_file_chooser_get_file(GTK_FILE_CHOOSER(native));
    g_autofree char *path = file != NULL ? g_file_get_path(file) : NULL;
    g_autofree char *shown = path != NULL ? cohort_path_chooser_shown_path(path) : NULL;
    if (shown != NULL)
      gtk_editable_set_text(c->entry, shown);
  }
  close_open(c);
}

static void on_clicked(GtkButton *button, gpointer data)
{
  Chooser *c = data;
  if (c->open != NULL) {
    gtk_native_dialog_show(c->open);
    return;
  }
  GtkFileChooserAction action = cohort_path_chooser_action(GTK_WIDGET(button));
  GtkRoot *root = gtk_widget_get_root(GTK_WIDGET(button));
  GtkFileChooserNative *native = gtk_file_chooser_native_new(
      c->title, GTK_IS_WINDOW(root) ? GTK_WINDOW(root) : NULL, action,
      action == GTK_FILE_CHOOSER_ACTION_SELECT_FOLDER ? _("_Select") : _("_Open"), _("_Cancel"));
  gtk_native_dialog_set_modal(GTK_NATIVE_DIALOG(native), TRUE);
  /* Start where the current value points, when it exists ("builtin:REL" in Cohort's data
   * folder). */
  const char *current = gtk_editable_get_text(c->entry);
  if (current != NULL && *current != '\0') {
    g_autofree char *resolved = cohort_resolve_path(current);
    g_autoptr(GFile) file = g_file_new_for_path(resolved);
    g_autoptr(GFile) dir = g_file_get_parent(file);
    if (dir != NULL && g_file_query_exists(dir, NULL))
      gtk_file_chooser_set_current_folder(GTK_FILE_CHOOSER(native), dir, NULL);
  }
  c->open = GTK_NATIVE_DIALOG(native);
  g_object_ref(c->entry);
  g_signal_connect(native, "response", G_CALLBACK(on_response), c);
  gtk_native_dialog_show(GTK_NATIVE_DIALOG(native));
}

GtkWidget *cohort_path_chooser_button_new(GtkEditable *entry, const char *title,
                                          CohortPathWantsFolder wants_folder, gpointer data)
{
  GtkWidget *button = gtk_button_new_from_icon_name("document-open-symbolic");
  gtk_widget_set_tooltip_text(button, _("Choose…"));
  gtk_widget_set_valign(button, GTK_ALIGN_CENTER);
  Chooser *c = g_new0(Chooser, 1);
  c->entry = entry;
  c->title = g_strdup(title);
  c->wants_folder = wants_folder;
  c->data = data;
  g_object_set_data_full(G_OBJECT(button), "cohort-chooser", c, chooser_free);
  g_signal_connect(button, "clicked", G_CALLBACK(on_clicked), c);
  return button;
}

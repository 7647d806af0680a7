/* A button beside a path entry that opens a file chooser and puts the chosen path into the
 * entry (relative to the current folder when it lies inside it, as presets write paths). */
#pragma once

#include <gtk/gtk.h>

G_BEGIN_DECLS

/* Asked when the button is clicked: whether to choose a folder (else a file). */
typedef gboolean (*CohortPathWantsFolder)(gpointer data);

/* A button for `entry`; the chooser's title is `title`. `wants_folder` (NULL: always a file)
 * is asked with `data` at each click. */
GtkWidget *cohort_path_chooser_button_new(GtkEditable *entry, const char *title,
                                          CohortPathWantsFolder wants_folder, gpointer data);

/* The chooser action a click would use now (for tests). */
GtkFileChooserAction cohort_path_chooser_action(GtkWidget *button);

/* The chooser a click opened and nobody has answered yet, or NULL (for tests: they answer it
 * by emitting "response"). A second click while one is open shows that one again. */
GtkNativeDialog *cohort_path_chooser_get_open(GtkWidget *button);

/* What the chooser puts into the entry for `path`: relative to the current folder when inside
 * it, else absolute. */
char *cohort_path_chooser_shown_path(const char *path);

G_END_DECLS

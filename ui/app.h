/* The application object and process-wide setup shared by `cohort` and the window tests. */
#pragma once

#include <gtk/gtk.h>

G_BEGIN_DECLS

#define COHORT_APP_ID "org.cohort.Trainer"

/* Sets the locale from the environment (C.UTF-8 instead of C when LANGUAGE is set, since
 * glibc ignores LANGUAGE under C) and binds the "cohort" text domain. Translations come
 * from $COHORT_LOCALEDIR when set, else from the build tree's po/ when the running program
 * lives in the build tree, else from the installed locale dir. Call first thing in main(). */
void cohort_app_init_i18n(void);

/* The folder the translations are read from (what cohort_app_init_i18n bound). */
const char *cohort_app_locale_dir(void);

/* A GtkApplication with id org.cohort.Trainer whose activate opens a CohortWindow. */
GtkApplication *cohort_app_new(void);

/* Loads the application style sheet (once per display). */
void cohort_app_load_css(void);

G_END_DECLS

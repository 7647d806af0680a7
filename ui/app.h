/* The application object and process-wide setup shared by `cohort` and the window tests. */
#pragma once

#include <adwaita.h>

G_BEGIN_DECLS

#define COHORT_APP_ID "org.cohort.Trainer"
/* The project's home page, as in ui/data/org.cohort.Trainer.metainfo.xml.in. */
#define COHORT_WEBSITE "https://example.org/cohort"

/* Sets the locale from the environment (C.UTF-8 instead of C when LANGUAGE is set, since
 * glibc ignores LANGUAGE under C) and binds the "cohort" text domain. Translations come
 * from $COHORT_LOCALEDIR when set, else from the build tree's po/ when the running program
 * lives in the build tree, else from the installed locale dir. Call first thing in main(). */
void cohort_app_init_i18n(void);

/* The folder the translations are read from (what cohort_app_init_i18n bound). */
const char *cohort_app_locale_dir(void);

/* An AdwApplication with id org.cohort.Trainer whose activate opens a CohortWindow; its
 * options are --page, --replay, --run and --version, and it sets the keyboard shortcuts:
 * Ctrl+Return Start, Ctrl+R Resume, Ctrl+. Stop, Ctrl+G Sample now, Ctrl+K Save checkpoint now,
 * Ctrl+S Save preset, Ctrl+? Keyboard Shortcuts, Ctrl+Q Quit (F10 opens the main menu). */
GtkApplication *cohort_app_new(void);

/* Initialises libadwaita and loads the application style sheet (once per display); the
 * application does both by itself, the window tests call this. */
void cohort_app_load_css(void);

G_END_DECLS

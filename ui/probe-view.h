/* The Distributed page's Test connection: runs the engine's probe (cohort-train --probe,
 * docs/launching.md "The probe and the forecast") with the processes and nodes Start would use,
 * and shows what it measured and its forecast (the `probe` event) before anything is trained. */
#pragma once

#include <gtk/gtk.h>
#include <json-glib/json-glib.h>

G_BEGIN_DECLS

#define COHORT_TYPE_PROBE_VIEW (cohort_probe_view_get_type())
G_DECLARE_FINAL_TYPE(CohortProbeView, cohort_probe_view, COHORT, PROBE_VIEW, GtkBox)

/* The probe's command line (the launch command with --probe), or NULL with the reason. */
typedef GStrv (*CohortProbeCommandFunc)(gpointer user, GError **error);

GtkWidget *cohort_probe_view_new(CohortProbeCommandFunc command, gpointer user);

/* What the button does: starts the probe (nothing when one runs). */
void cohort_probe_view_start(CohortProbeView *view);
/* Stops a running probe (the window closes, the settings changed). */
void cohort_probe_view_stop(CohortProbeView *view);
gboolean cohort_probe_view_is_running(CohortProbeView *view);

/* Shows a `probe` event's members. */
void cohort_probe_view_show(CohortProbeView *view, JsonObject *probe);

/* A measured time as the view shows it: "< 1 ms", "1.4 ms", "12 ms", "2.35 s". */
char *cohort_probe_duration_text(double seconds);

/* The status line and the result as shown (tests). */
const char *cohort_probe_view_get_status(CohortProbeView *view);
char *cohort_probe_view_get_result(CohortProbeView *view);

G_END_DECLS

/* The one way engine code reports a refusal: set a GError from a printf format and return FALSE,
 * so a check ends in a single `return cohort_fail(...)` line. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* Sets `error` (when not NULL) to `domain`/`code` with the formatted message; returns FALSE. */
gboolean cohort_fail(GError **error, GQuark domain, int code, const char *fmt, ...)
    G_GNUC_PRINTF(4, 5);

/* The same with a va_list, for helpers that add their own prefix (a file name, a key). */
gboolean cohort_fail_valist(GError **error, GQuark domain, int code, const char *fmt, va_list ap)
    G_GNUC_PRINTF(4, 0);

G_END_DECLS

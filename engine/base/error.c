#include "engine/base/error.h"

gboolean cohort_fail_valist(GError **error, GQuark domain, int code, const char *fmt, va_list ap)
{
  if (error)
    g_propagate_error(error, g_error_new_valist(domain, code, fmt, ap));
  return FALSE;
}

gboolean cohort_fail(GError **error, GQuark domain, int code, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  cohort_fail_valist(error, domain, code, fmt, ap);
  va_end(ap);
  return FALSE;
}

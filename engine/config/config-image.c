/* The image keys whose values need more than the key table checks: image_mean and image_std
 * as per-channel lists, and image_resize against image_size. */
#include "engine/config/config.h"

#include <math.h>
#include <stdlib.h>

/* Parses `text` into one value per channel (a single value stands for all); FALSE with an
 * error naming the key and the value. */
static gboolean parse_channels(const char *key, const char *text, int channels, gboolean positive,
                               float *out, const char *source, GError **error)
{
  g_auto(GStrv) parts = g_strsplit(text ? text : "", ",", -1);
  guint n = g_strv_length(parts);
  gboolean ok = n == 1 || n == (guint)channels;
  for (guint i = 0; ok && i < n; i++) {
    char *end = NULL;
    const char *p = g_strstrip(parts[i]);
    double v = g_ascii_strtod(p, &end);
    ok = *p && end && *end == '\0' && isfinite(v) && (!positive || v > 0) && fabs(v) < 1e6;
    out[i] = (float)v;
  }
  if (!ok) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "%s: key \"%s\": \"%s\" is not allowed; allowed: %s%d numbers separated by commas "
                "(one per channel of image_channels), or one number for every channel",
                source ? source : "config", key, text ? text : "", positive ? "above 0, " : "",
                channels);
    return FALSE;
  }
  for (int c = (int)n; c < channels; c++)
    out[c] = out[0];
  return TRUE;
}

gboolean cohort_config_image_normalisation(const CohortConfig *cfg, const char *source,
                                           float mean[3], float std[3], GError **error)
{
  int ch = cfg->image_channels == 3 ? 3 : 1;
  if (!parse_channels("image_mean", cfg->image_mean, ch, FALSE, mean, source, error) ||
      !parse_channels("image_std", cfg->image_std, ch, TRUE, std, source, error))
    return FALSE;
  if (cfg->image_resize != 0 && cfg->image_resize < cfg->image_size) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "%s: key \"image_resize\": %d is smaller than \"image_size\": %d; allowed: 0 "
                "(= image_size) or %d to 4096",
                source ? source : "config", cfg->image_resize, cfg->image_size, cfg->image_size);
    return FALSE;
  }
  return TRUE;
}

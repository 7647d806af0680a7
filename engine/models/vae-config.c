/* A diffusers AutoencoderKL config.json: reading (strict JSON, every value checked), the rules
 * across keys, and writing it back as diffusers does. */
#include "engine/models/vae.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <glib/gstdio.h>

#include "engine/base/error.h"
#include "engine/base/json-read.h"

/* clang-format off */
G_DEFINE_QUARK(cohort-vae-error-quark, cohort_vae_error)
/* clang-format on */

/* A config.json is a few hundred bytes; anything past this is not one. */
#define MAX_CONFIG_BYTES (1 << 20)
#define MAX_CHANNELS     16384
#define MAX_LAYERS       64
#define MAX_LATENT       1024

static gboolean bad(GError **error, const char *path, const char *fmt, ...) G_GNUC_PRINTF(3, 4);
static gboolean bad(GError **error, const char *path, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  g_autofree char *msg = g_strdup_vprintf(fmt, ap);
  va_end(ap);
  return cohort_fail(error, COHORT_VAE_ERROR, 0, "%s: %s", path, msg);
}

static gboolean is_int(JsonNode *n)
{
  return n && JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == G_TYPE_INT64;
}

/* An integer in [lo, hi]; absent gives `def` when def >= lo, else an error. */
static gboolean get_int(JsonObject *o, const char *path, const char *key, int lo, int hi, int def,
                        int *out, GError **error)
{
  JsonNode *n = json_object_get_member(o, key);
  if (!n && def >= lo) {
    *out = def;
    return TRUE;
  }
  if (!is_int(n) || json_node_get_int(n) < lo || json_node_get_int(n) > hi)
    return bad(error, path, "key \"%s\" is %s; allowed: an integer from %d to %d", key,
               n ? "not such an integer" : "missing", lo, hi);
  *out = (int)json_node_get_int(n);
  return TRUE;
}

static gboolean get_bool(JsonObject *o, const char *path, const char *key, gboolean def,
                         gboolean *out, GError **error)
{
  JsonNode *n = json_object_get_member(o, key);
  if (!n || JSON_NODE_HOLDS_NULL(n)) {
    *out = def;
    return TRUE;
  }
  if (!JSON_NODE_HOLDS_VALUE(n) || json_node_get_value_type(n) != G_TYPE_BOOLEAN)
    return bad(error, path, "key \"%s\" is not allowed; allowed: true or false", key);
  *out = json_node_get_boolean(n);
  return TRUE;
}

/* A number (integer or not), or null/absent for `def`. */
static gboolean get_number(JsonObject *o, const char *path, const char *key, double def,
                           double *out, GError **error)
{
  JsonNode *n = json_object_get_member(o, key);
  if (!n || JSON_NODE_HOLDS_NULL(n)) {
    *out = def;
    return TRUE;
  }
  GType t = JSON_NODE_HOLDS_VALUE(n) ? json_node_get_value_type(n) : G_TYPE_INVALID;
  if (t != G_TYPE_DOUBLE && t != G_TYPE_INT64)
    return bad(error, path, "key \"%s\" is not allowed; allowed: a number", key);
  *out = t == G_TYPE_DOUBLE ? json_node_get_double(n) : (double)json_node_get_int(n);
  return TRUE;
}

/* Every element of the string array `key` (when present) equals `want`. */
static gboolean check_types(JsonObject *o, const char *path, const char *key, const char *want,
                            int n_blocks, GError **error)
{
  JsonNode *n = json_object_get_member(o, key);
  if (!n)
    return TRUE;
  if (!JSON_NODE_HOLDS_ARRAY(n) || (int)json_array_get_length(json_node_get_array(n)) != n_blocks)
    return bad(error, path,
               "key \"%s\" is not allowed; allowed: a list of %d names, one per entry of "
               "block_out_channels",
               key, n_blocks);
  JsonArray *a = json_node_get_array(n);
  for (guint i = 0; i < json_array_get_length(a); i++) {
    JsonNode *e = json_array_get_element(a, i);
    const char *s = JSON_NODE_HOLDS_VALUE(e) && json_node_get_value_type(e) == G_TYPE_STRING
                        ? json_node_get_string(e)
                        : NULL;
    if (!s || strcmp(s, want) != 0)
      return bad(error, path, "key \"%s\": entry %u is %s%s%s; allowed: \"%s\"", key, i,
                 s ? "\"" : "not a string", s ? s : "", s ? "\"" : "", want);
  }
  return TRUE;
}

static gboolean read_channels(JsonObject *o, const char *path, CohortVaeConfig *cfg, GError **error)
{
  JsonNode *n = json_object_get_member(o, "block_out_channels");
  JsonArray *a = n && JSON_NODE_HOLDS_ARRAY(n) ? json_node_get_array(n) : NULL;
  if (!a || json_array_get_length(a) < 1 || json_array_get_length(a) > COHORT_VAE_MAX_BLOCKS)
    return bad(error, path,
               "key \"block_out_channels\" is %s; allowed: a list of 1 to %d channel counts",
               a ? "not allowed" : "missing", COHORT_VAE_MAX_BLOCKS);
  cfg->n_blocks = (int)json_array_get_length(a);
  for (int i = 0; i < cfg->n_blocks; i++) {
    JsonNode *e = json_array_get_element(a, i);
    if (!is_int(e) || json_node_get_int(e) < 1 || json_node_get_int(e) > MAX_CHANNELS)
      return bad(error, path,
                 "key \"block_out_channels\": entry %d is not allowed; allowed: an integer from "
                 "1 to %d",
                 i, MAX_CHANNELS);
    cfg->block_out_channels[i] = (int)json_node_get_int(e);
  }
  return TRUE;
}

static gboolean read_object(JsonObject *o, const char *path, CohortVaeConfig *cfg, GError **error)
{
  JsonNode *cls = json_object_get_member(o, "_class_name");
  if (cls) {
    const char *s = JSON_NODE_HOLDS_VALUE(cls) && json_node_get_value_type(cls) == G_TYPE_STRING
                        ? json_node_get_string(cls)
                        : "";
    if (strcmp(s, "AutoencoderKL") != 0)
      return bad(error, path,
                 "key \"_class_name\": \"%s\" is not a VAE Cohort reads; allowed: "
                 "\"AutoencoderKL\"",
                 s);
  }
  JsonNode *act = json_object_get_member(o, "act_fn");
  if (act && (!JSON_NODE_HOLDS_VALUE(act) || json_node_get_value_type(act) != G_TYPE_STRING ||
              strcmp(json_node_get_string(act), "silu") != 0))
    return bad(error, path, "key \"act_fn\" is not allowed; allowed: \"silu\"");
  *cfg = (CohortVaeConfig){0};
  if (!read_channels(o, path, cfg, error) ||
      !check_types(o, path, "down_block_types", "DownEncoderBlock2D", cfg->n_blocks, error) ||
      !check_types(o, path, "up_block_types", "UpDecoderBlock2D", cfg->n_blocks, error) ||
      !get_int(o, path, "in_channels", 1, 3, 3, &cfg->in_channels, error) ||
      !get_int(o, path, "out_channels", 1, 3, 3, &cfg->out_channels, error) ||
      !get_int(o, path, "layers_per_block", 1, MAX_LAYERS, 1, &cfg->layers_per_block, error) ||
      !get_int(o, path, "latent_channels", 1, MAX_LATENT, 4, &cfg->latent_channels, error) ||
      !get_int(o, path, "norm_num_groups", 1, MAX_CHANNELS, 32, &cfg->norm_num_groups, error) ||
      !get_int(o, path, "sample_size", 1, 65536, 32, &cfg->sample_size, error) ||
      !get_number(o, path, "scaling_factor", 0.18215, &cfg->scaling_factor, error) ||
      !get_number(o, path, "shift_factor", 0.0, &cfg->shift_factor, error) ||
      !get_bool(o, path, "use_quant_conv", TRUE, &cfg->use_quant_conv, error) ||
      !get_bool(o, path, "use_post_quant_conv", TRUE, &cfg->use_post_quant_conv, error) ||
      !get_bool(o, path, "mid_block_add_attention", TRUE, &cfg->mid_block_add_attention, error))
    return FALSE;
  return cohort_vae_config_check(cfg, path, error);
}

gboolean cohort_vae_config_check(const CohortVaeConfig *cfg, const char *source, GError **error)
{
  const char *src = source ? source : "VAE config";
  if (cfg->in_channels != 1 && cfg->in_channels != 3)
    return bad(error, src, "key \"in_channels\": %d is not allowed; allowed: 1 or 3",
               cfg->in_channels);
  if (cfg->out_channels != cfg->in_channels)
    return bad(error, src,
               "key \"out_channels\": %d is not allowed; allowed: %d (in_channels: the decoder "
               "gives back images of the kind the encoder reads)",
               cfg->out_channels, cfg->in_channels);
  if (cfg->n_blocks < 1 || cfg->n_blocks > COHORT_VAE_MAX_BLOCKS || cfg->layers_per_block < 1 ||
      cfg->latent_channels < 1 || cfg->norm_num_groups < 1)
    return bad(error, src,
               "block_out_channels, layers_per_block, latent_channels and "
               "norm_num_groups must be at least 1");
  for (int i = 0; i < cfg->n_blocks; i++)
    if (cfg->block_out_channels[i] % cfg->norm_num_groups != 0)
      return bad(error, src,
                 "key \"block_out_channels\": %d (entry %d) is not allowed; allowed: a multiple "
                 "of norm_num_groups %d (GroupNorm splits the channels into that many groups)",
                 cfg->block_out_channels[i], i, cfg->norm_num_groups);
  if (!isfinite(cfg->scaling_factor) || cfg->scaling_factor <= 0)
    return bad(error, src, "key \"scaling_factor\": %g is not allowed; allowed: a number above 0",
               cfg->scaling_factor);
  if (!isfinite(cfg->shift_factor))
    return bad(error, src, "key \"shift_factor\" is not allowed; allowed: a finite number or null");
  return TRUE;
}

gboolean cohort_vae_config_read(const char *path, CohortVaeConfig *cfg, GError **error)
{
  GStatBuf st;
  if (g_stat(path, &st) != 0)
    return cohort_fail(error, G_FILE_ERROR, g_file_error_from_errno(errno), "%s: cannot read: %s",
                       path, g_strerror(errno));
  if (!S_ISREG(st.st_mode) || st.st_size > MAX_CONFIG_BYTES)
    return bad(error, path, "not a config.json (a regular file of at most %d bytes)",
               MAX_CONFIG_BYTES);
  g_autofree char *text = NULL;
  gsize len = 0;
  if (!g_file_get_contents(path, &text, &len, error))
    return FALSE;
  g_autoptr(JsonNode) root = cohort_json_parse_strict(text, (gssize)len, path, 0, error);
  if (!root)
    return FALSE;
  if (!JSON_NODE_HOLDS_OBJECT(root))
    return bad(error, path, "not a JSON object");
  return read_object(json_node_get_object(root), path, cfg, error);
}

int cohort_vae_downsample_factor(const CohortVaeConfig *cfg)
{
  return 1 << (cfg->n_blocks - 1);
}

static void append_types(GString *s, const char *key, const char *type, int n)
{
  g_string_append_printf(s, "  \"%s\": [", key);
  for (int i = 0; i < n; i++)
    g_string_append_printf(s, "%s\"%s\"", i ? ", " : "", type);
  g_string_append(s, "],\n");
}

char *cohort_vae_config_to_json(const CohortVaeConfig *cfg)
{
  GString *s = g_string_new("{\n  \"_class_name\": \"AutoencoderKL\",\n");
  g_string_append(s, "  \"act_fn\": \"silu\",\n  \"block_out_channels\": [");
  for (int i = 0; i < cfg->n_blocks; i++)
    g_string_append_printf(s, "%s%d", i ? ", " : "", cfg->block_out_channels[i]);
  g_string_append(s, "],\n");
  append_types(s, "down_block_types", "DownEncoderBlock2D", cfg->n_blocks);
  append_types(s, "up_block_types", "UpDecoderBlock2D", cfg->n_blocks);
  char num[G_ASCII_DTOSTR_BUF_SIZE];
  g_string_append_printf(s, "  \"in_channels\": %d,\n  \"out_channels\": %d,\n", cfg->in_channels,
                         cfg->out_channels);
  g_string_append_printf(s, "  \"latent_channels\": %d,\n  \"layers_per_block\": %d,\n",
                         cfg->latent_channels, cfg->layers_per_block);
  g_string_append_printf(s, "  \"norm_num_groups\": %d,\n  \"sample_size\": %d,\n",
                         cfg->norm_num_groups, cfg->sample_size);
  g_string_append_printf(s, "  \"scaling_factor\": %s,\n",
                         g_ascii_dtostr(num, sizeof num, cfg->scaling_factor));
  if (cfg->shift_factor != 0)
    g_string_append_printf(s, "  \"shift_factor\": %s,\n",
                           g_ascii_dtostr(num, sizeof num, cfg->shift_factor));
  else
    g_string_append(s, "  \"shift_factor\": null,\n");
  g_string_append_printf(s, "  \"use_quant_conv\": %s,\n  \"use_post_quant_conv\": %s,\n",
                         cfg->use_quant_conv ? "true" : "false",
                         cfg->use_post_quant_conv ? "true" : "false");
  g_string_append_printf(s, "  \"mid_block_add_attention\": %s,\n  \"force_upcast\": true\n}\n",
                         cfg->mid_block_add_attention ? "true" : "false");
  return g_string_free(s, FALSE);
}

#include "ui/key-messages.h"

#include <glib/gi18n.h>
#include <math.h>
#include <string.h>

#include "ui/key-labels.h"

const char *cohort_key_display_name(const char *key)
{
  const char *label = cohort_key_label(key);
  return label != NULL ? label : key;
}

const char *cohort_key_help(const CohortConfigKey *key)
{
  /* The key table's sentences are in the "cohort" catalog: po/meson.build extracts them. */
  return key->help != NULL ? _(key->help) : "";
}

/* A bound as the user types it: C spelling, shortest form. */
static char *bound(double v)
{
  char buf[G_ASCII_DTOSTR_BUF_SIZE];
  return g_strdup(g_ascii_formatd(buf, sizeof buf, "%.15g", v));
}

/* The table's open bounds: the least double above 0 and the largest below 1. */
static gboolean above_zero(double v)
{
  return v > 0 && v < 1e-300;
}

static gboolean below_one(double v)
{
  return v < 1 && v > 1 - 1e-15;
}

static char *allowed_number(const CohortConfigKey *key)
{
  g_autofree char *lo = bound(key->min);
  g_autofree char *hi = bound(key->max);
  if (key->type != COHORT_KEY_DOUBLE)
    return key->max >= G_MAXINT ? g_strdup_printf(_("%s or more"), lo)
                                : g_strdup_printf(_("%s to %s"), lo, hi);
  gboolean open_top = key->max >= G_MAXDOUBLE;
  if (above_zero(key->min))
    return open_top ? g_strdup(_("a number above 0"))
                    : g_strdup_printf(_("a number above 0 and at most %s"), hi);
  if (below_one(key->max))
    return g_strdup_printf(_("a number from %s and below 1"), lo);
  return open_top ? g_strdup_printf(_("a number from %s"), lo)
                  : g_strdup_printf(_("a number from %s to %s"), lo, hi);
}

/* What keys allow that their type and bounds do not say, in the window's words (the key
 * table's hand-written texts are English). */
static const struct {
  const char *key;
  const char *allowed;
} written[] = {
    {"image_channels", N_("1 (grey) or 3 (RGB)")},
    {"train_data", N_("a file or folder; “builtin:REL” names one in Cohort's data folder")},
    {"val_data", N_("a path like the training data's, or empty for no validation")},
    {"workspace_dir", N_("a folder")},
    {"sample_prompt", N_("any text")},
    {"sample_prompts", N_("empty, or captions separated by “|”, like white A|red B")},
    {"init_from", N_("empty, or a weights file: Hugging Face GPT-2 .safetensors or folder for "
                     "GPT, a torchvision or timm ResNet (.safetensors, .pth or .pt) for ResNet, "
                     "the DiT reference's or diffusers' names (or a diffusers folder) for DiT, "
                     "a Cohort export for every model")},
    {"tokenizer", N_("bytes, or a tokenizer.json, a vocab.json or a folder holding either")},
    {"image_mean", N_("one number per channel, separated by commas, or one for all")},
    {"image_std", N_("one number above 0 per channel, separated by commas, or one for all")},
    {"vae_from", N_("empty, or a diffusers AutoencoderKL folder (config.json and "
                    "diffusion_pytorch_model.safetensors)")},
    {"text_encoder", N_("empty, builtin, or a Hugging Face Llama, Mistral, Qwen2 or Qwen3 folder "
                        "(config.json, its weights and tokenizer)")},
    {"text_encoder_layer", N_("-96 to 96 but 0: k the output of block k, -1 the last block's, "
                              "-2 the one before it")},
    {"device_indexes", N_("distinct GPU numbers from 0 to 1023, like 0,1; empty: by local rank")},
    {"master_addr", N_("a host name or IP address")},
    {"rank_batch_sizes", N_("empty (batch size on every process), auto, or one number per "
                            "process separated by commas, like 12,4")},
};

char *cohort_key_allowed(const CohortConfigKey *key)
{
  for (guint i = 0; i < G_N_ELEMENTS(written); i++)
    if (g_str_equal(written[i].key, key->name))
      return g_strdup(_(written[i].allowed));
  switch (key->type) {
  case COHORT_KEY_INT:
  case COHORT_KEY_INT64:
  case COHORT_KEY_DOUBLE:
    return allowed_number(key);
  case COHORT_KEY_BOOL:
    return g_strdup(_("on or off"));
  default:
    break;
  }
  if (key->choices != NULL) {
    g_autoptr(GStrvBuilder) b = g_strv_builder_new();
    for (const char *const *c = key->choices; *c != NULL; c++)
      g_strv_builder_add(b, cohort_key_choice_label(*c));
    g_auto(GStrv) labels = g_strv_builder_end(b);
    return g_strjoinv(", ", labels);
  }
  return g_strdup(key->allowed != NULL ? _(key->allowed) : "");
}

/* The key a message of the engine names (`key "NAME"`), or NULL. */
static char *named_key(const char *message)
{
  const char *p = message != NULL ? strstr(message, "key \"") : NULL;
  if (p == NULL)
    return NULL;
  p += strlen("key \"");
  const char *end = strchr(p, '"');
  return end != NULL ? g_strndup(p, end - p) : NULL;
}

/* The integer value of `name` with `typed` standing for `key` (the value being edited). */
static gint64 value_of(const char *name, const CohortConfigKey *key, const char *typed,
                       const CohortConfig *cfg)
{
  if (g_str_equal(name, key->name))
    return g_ascii_strtoll(typed, NULL, 10);
  g_autofree char *text = cohort_config_get(cfg, name);
  return text != NULL ? g_ascii_strtoll(text, NULL, 10) : 0;
}

/* Why a value that is fine on its own breaks a rule between keys, or NULL for a rule the
 * window has no words for. */
static char *cross_rule(const char *rule, const CohortConfigKey *key, const char *typed,
                        const CohortConfig *cfg)
{
#define V(name) ((long long)value_of(name, key, typed, cfg))
  if (g_str_equal(rule, "n_embd"))
    return g_strdup_printf(_("the embedding width (%lld) must be a multiple of the attention "
                             "heads (%lld)"),
                           V("n_embd"), V("n_head"));
  if (g_str_equal(rule, "node_rank"))
    return g_strdup_printf(_("this node's rank (%lld) must be below the number of nodes (%lld)"),
                           V("node_rank"), V("num_nodes"));
  if (g_str_equal(rule, "warmup_steps"))
    return g_strdup_printf(_("the warm-up steps (%lld) must not be more than the maximum steps "
                             "(%lld)"),
                           V("warmup_steps"), V("max_steps"));
  if (g_str_equal(rule, "vocab_size"))
    return g_strdup_printf(_("without a tokenizer, text has one token per byte, so the "
                             "vocabulary size must be 256 (it is %lld); or choose a tokenizer, "
                             "initial weights from a folder that holds one, or the data format "
                             "tokens"),
                           V("vocab_size"));
  if (g_str_equal(rule, "image_channels"))
    return g_strdup(_("colour channels must be 1 (grey) or 3 (RGB)"));
#undef V
  return NULL;
}

/* The value's own problem (type, range, length), or NULL when it is fine on its own. */
static char *own_problem(const CohortConfigKey *key, const char *typed)
{
  g_autofree char *t = g_strstrip(g_strdup(typed));
  g_autofree char *allowed = cohort_key_allowed(key);
  if (key->type == COHORT_KEY_INT || key->type == COHORT_KEY_INT64) {
    gint64 v;
    if (!g_ascii_string_to_signed(t, 10, G_MININT64, G_MAXINT64, &v, NULL))
      return g_strdup_printf(_("“%s” is not a whole number; allowed: %s"), typed, allowed);
    if ((double)v < key->min || (double)v > key->max)
      return g_strdup_printf(_("%s is not allowed; allowed: %s"), t, allowed);
  } else if (key->type == COHORT_KEY_DOUBLE) {
    char *end = NULL;
    double v = g_ascii_strtod(t, &end);
    if (*t == '\0' || end == NULL || *end != '\0' || !isfinite(v))
      return g_strdup_printf(_("“%s” is not a number; allowed: %s"), typed, allowed);
    if (v < key->min || v > key->max)
      return g_strdup_printf(_("%s is not allowed; allowed: %s"), t, allowed);
  } else if (key->type == COHORT_KEY_STRING && strlen(typed) < key->min) {
    return g_strdup(_("must not be empty"));
  }
  return NULL;
}

char *cohort_key_refusal(const CohortConfigKey *key, const char *typed, const CohortConfig *cfg,
                         const GError *engine_error)
{
  const char *label = cohort_key_display_name(key->name);
  g_autofree char *why = own_problem(key, typed);
  if (why == NULL && engine_error != NULL) {
    g_autofree char *rule = named_key(engine_error->message);
    why = rule != NULL ? cross_rule(rule, key, typed, cfg) : NULL;
    if (why == NULL) {
      /* A rule the window has no words for: the engine's text, less its "settings: " source. */
      const char *msg = engine_error->message;
      const char *k = strstr(msg, "key \"");
      why = g_strdup(k != NULL ? k : msg);
    }
  }
  if (why == NULL)
    why = g_strdup_printf(_("“%s” is not allowed"), typed);
  /* TRANSLATORS: a setting's label, then why its value is refused. */
  return g_strdup_printf(_("%s: %s"), label, why);
}

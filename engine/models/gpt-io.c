/* Hugging Face GPT-2 .safetensors import and export over the model's named-tensor table. */
#include "engine/models/gpt-io.h"
#include "engine/models/gpt-private.h"

#include "engine/base/fileio.h"
#include "engine/base/error.h"
#include "engine/base/json-read.h"
#include "engine/model/model-io.h"

#include <stdarg.h>
#include <string.h>
#include <json-glib/json-glib.h>

#define HF_PREFIX "transformer."

CohortStEntry *cohort_gpt_st_entries(const CohortGpt *gpt, const float *buffer, const char *prefix,
                                     GPtrArray *names, guint *n_out)
{
  GArray *entries = g_array_new(FALSE, TRUE, sizeof(CohortStEntry));
  cohort_tensor_st_entries(gpt->tensors, gpt->n_tensors, buffer, prefix, names, entries);
  *n_out = entries->len;
  return (CohortStEntry *)g_array_free(entries, FALSE);
}

gboolean cohort_gpt_read_tensors(const CohortGpt *gpt, const CohortStFile *f, const char *prefix,
                                 float *dst, GError **error)
{
  return cohort_tensor_read(gpt->tensors, gpt->n_tensors, f, prefix, dst, error);
}

/* The buffers HF keeps in GPT-2 state dicts that are not parameters. */
static gboolean is_ignored_buffer(const char *name)
{
  if (!g_str_has_prefix(name, "h."))
    return FALSE;
  return g_str_has_suffix(name, ".attn.bias") || g_str_has_suffix(name, ".attn.masked_bias");
}

/* Vocabulary and context sizes get their own message: a shape error on wte/wpe is nearly
 * always a model configured for another tokenizer or context length. The position table may
 * be longer than the model's (`positions`): a seq_len below the file's n_positions uses its
 * first seq_len rows, as Hugging Face does with shorter inputs. */
static gboolean check_embedding(const CohortGpt *gpt, const CohortStFile *f, const char *path,
                                const char *prefix, const char *name, int expect_rows,
                                const char *key, gboolean positions, GError **error)
{
  g_autofree char *full = g_strconcat(prefix, name, NULL);
  int64_t shape[8];
  int nd = cohort_safetensors_shape(f, full, shape);
  int C = cohort_gpt_shape(gpt)->n_embd;
  if (positions && nd == 2 && shape[1] == C && shape[0] < expect_rows) {
    g_set_error(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_SHAPE,
                "%s: tensor \"%s\" has %" G_GINT64_FORMAT " positions but the model has %s %d; "
                "allowed: %s at most %" G_GINT64_FORMAT,
                path, full, shape[0], key, expect_rows, key, shape[0]);
    return FALSE;
  }
  if (!positions && nd == 2 && shape[1] == C && shape[0] != expect_rows) {
    g_set_error(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_SHAPE,
                "%s: tensor \"%s\" has %" G_GINT64_FORMAT " rows but the model has %s %d; set "
                "%s to %" G_GINT64_FORMAT " to use these weights",
                path, full, shape[0], key, expect_rows, key, shape[0]);
    return FALSE;
  }
  return TRUE;
}

gboolean cohort_gpt_load_hf(CohortGpt *gpt, const char *path, GError **error)
{
  g_autoptr(CohortStFile) f = cohort_safetensors_open(path, error);
  if (!f)
    return FALSE;
  const CohortGptShape *s = cohort_gpt_shape(gpt);
  const char *prefix =
      !cohort_safetensors_has(f, "wte.weight") && cohort_safetensors_has(f, HF_PREFIX "wte.weight")
          ? HF_PREFIX
          : "";

  if (!check_embedding(gpt, f, path, prefix, "wte.weight", s->vocab_size, "vocab_size", FALSE,
                       error) ||
      !check_embedding(gpt, f, path, prefix, "wpe.weight", s->seq_len, "seq_len", TRUE, error))
    return FALSE;

  /* Every tensor in the file must be used or knowingly ignored: an extra "h.12.*" means the
   * file has more layers than the model. */
  gsize plen = strlen(prefix);
  for (const char *const *name = cohort_safetensors_names(f); *name; name++) {
    const char *bare = g_str_has_prefix(*name, prefix) ? *name + plen : *name;
    if (strcmp(*name, "lm_head.weight") == 0 || strcmp(bare, "lm_head.weight") == 0 ||
        is_ignored_buffer(bare) || cohort_gpt_find_tensor(gpt, bare))
      continue;
    g_set_error(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_SHAPE,
                "%s: tensor \"%s\" is not part of this model (n_layer %d, n_embd %d); the file "
                "is for a differently shaped GPT-2",
                path, *name, s->n_layer, s->n_embd);
    return FALSE;
  }

  size_t n = cohort_gpt_num_params(gpt);
  g_autofree float *tmp = g_try_new(float, n);
  if (!tmp) {
    g_set_error(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_IO,
                "%s: out of memory for %zu parameters", path, n);
    return FALSE;
  }
  if (!cohort_tensor_read_rows_prefix(gpt->tensors, gpt->n_tensors, f, prefix, "wpe.weight", tmp,
                                      error))
    return FALSE;

  /* An untied head cannot be represented; a tied one is a copy of wte. */
  const char *head = cohort_safetensors_has(f, "lm_head.weight") ? "lm_head.weight" : NULL;
  g_autofree char *prefixed_head = g_strconcat(prefix, "lm_head.weight", NULL);
  if (!head && *prefix && cohort_safetensors_has(f, prefixed_head))
    head = prefixed_head;
  if (head) {
    const CohortTensorInfo *wte = cohort_gpt_find_tensor(gpt, "wte.weight");
    g_autofree float *h = g_try_new(float, wte->numel);
    int64_t shape[2] = {wte->shape[0], wte->shape[1]};
    if (!h || !cohort_safetensors_read_f32(f, head, 2, shape, h, error)) {
      if (!h)
        g_set_error(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_IO,
                    "%s: out of memory", path);
      return FALSE;
    }
    if (memcmp(h, tmp + wte->offset, wte->numel * sizeof(float)) != 0) {
      g_set_error(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_SHAPE,
                  "%s: tensor \"%s\" differs from \"%swte.weight\"; Cohort's GPT ties the "
                  "output head to the token embedding",
                  path, head, prefix);
      return FALSE;
    }
  }

  cohort_gpt_upload_params(gpt, tmp);
  return TRUE;
}

gboolean cohort_gpt_save_hf(const CohortGpt *gpt, const float *params_or_NULL, const char *path,
                            GHashTable *metadata, GError **error)
{
  return cohort_model_save(gpt, params_or_NULL, path, metadata, error);
}

int cohort_gpt_file_positions(const char *path)
{
  g_autoptr(CohortStFile) f = cohort_safetensors_open(path, NULL);
  int64_t shape[8];
  if (!f)
    return -1;
  int nd = cohort_safetensors_shape(f, "wpe.weight", shape);
  if (nd < 0)
    nd = cohort_safetensors_shape(f, HF_PREFIX "wpe.weight", shape);
  return nd == 2 && shape[0] <= G_MAXINT ? (int)shape[0] : -1;
}

/* `file` (an export, written with the model's seq_len rows of wpe) rewritten with the base's
 * whole position table: its own first rows (as trained), then the base's rows from seq_len
 * on, which the run never used, as they were. Metadata and every other tensor unchanged. */
static gboolean extend_positions(const char *file, const char *base, int P, GError **error)
{
  g_autoptr(CohortStFile) f = cohort_safetensors_open(file, error);
  g_autoptr(CohortStFile) b = f ? cohort_safetensors_open(base, error) : NULL;
  if (!b)
    return FALSE;
  const char *bname =
      cohort_safetensors_has(b, "wpe.weight") ? "wpe.weight" : HF_PREFIX "wpe.weight";
  g_autoptr(GPtrArray) data = g_ptr_array_new_with_free_func(g_free);
  g_autoptr(GArray) entries = g_array_new(FALSE, TRUE, sizeof(CohortStEntry));
  for (const char *const *name = cohort_safetensors_names(f); *name; name++) {
    CohortStEntry e = {.name = *name};
    int64_t shape[8];
    e.ndim = cohort_safetensors_shape(f, *name, shape);
    if (e.ndim < 1 || e.ndim > 4)
      return cohort_fail(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_SHAPE,
                         "%s: tensor \"%s\" has %d dimensions", file, *name, e.ndim);
    size_t n = 1;
    for (int d = 0; d < e.ndim; d++)
      n *= (size_t)(e.shape[d] = shape[d]);
    gboolean wpe = strcmp(*name, "wpe.weight") == 0 && e.ndim == 2 && shape[0] < P;
    size_t rows_n = wpe ? (size_t)P * (size_t)shape[1] : n;
    float *v = g_try_new(float, MAX(rows_n, 1));
    if (!v)
      return cohort_fail(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_IO,
                         "%s: out of memory to add the base's positions", file);
    g_ptr_array_add(data, v);
    if (!cohort_safetensors_read_f32(f, *name, e.ndim, shape, v, error))
      return FALSE;
    if (wpe) {
      int64_t bshape[2] = {P, shape[1]};
      size_t head = n;
      if (!cohort_safetensors_read_f32_range(b, bname, 2, bshape, head, rows_n - head, v + head,
                                             error))
        return FALSE;
      e.shape[0] = P;
    }
    e.data = v;
    g_array_append_val(entries, e);
  }
  return cohort_safetensors_write(file, (CohortStEntry *)entries->data, entries->len,
                                  cohort_safetensors_metadata_all(f), error);
}

/* The base's position count when the run used fewer (init_from's n_positions above seq_len),
 * with the exported files of `dir` given the base's whole table; else the model's seq_len.
 * A base that is no longer readable leaves the export at seq_len positions. */
static gboolean export_positions(const CohortModel *m, const CohortConfig *cfg, const char *dir,
                                 int *positions, GError **error)
{
  int T = cohort_gpt_shape(m)->seq_len;
  *positions = T;
  if (!cfg || !cfg->init_from || !*cfg->init_from ||
      cfg->student_init == COHORT_STUDENT_INIT_TEACHER_LAYERS)
    return TRUE;
  g_autofree char *resolved = cohort_resolve_path(cfg->init_from);
  g_autofree char *base = m->klass->import_file(resolved);
  int P = cohort_gpt_file_positions(base);
  if (P <= T)
    return TRUE;
  static const char *const files[] = {"model.safetensors", "model-ema.safetensors"};
  for (guint i = 0; i < G_N_ELEMENTS(files); i++) {
    g_autofree char *path = g_build_filename(dir, files[i], NULL);
    if (g_file_test(path, G_FILE_TEST_IS_REGULAR) && !extend_positions(path, base, P, error))
      return FALSE;
  }
  *positions = P;
  return TRUE;
}

gboolean cohort_gpt_write_hf_config(const CohortModel *m, const CohortConfig *cfg, const char *dir,
                                    GError **error)
{
  const CohortGptShape *s = cohort_gpt_shape(m);
  int positions = s->seq_len;
  if (!export_positions(m, cfg, dir, &positions, error))
    return FALSE;
  g_autoptr(GString) json = g_string_new("{\n");
  g_string_append(json, "  \"architectures\": [\"GPT2LMHeadModel\"],\n");
  g_string_append(json, "  \"model_type\": \"gpt2\",\n");
  g_string_append_printf(json, "  \"n_layer\": %d,\n", s->n_layer);
  g_string_append_printf(json, "  \"n_head\": %d,\n", s->n_head);
  g_string_append_printf(json, "  \"n_embd\": %d,\n", s->n_embd);
  g_string_append_printf(json, "  \"n_positions\": %d,\n", positions);
  g_string_append_printf(json, "  \"n_ctx\": %d,\n", positions);
  g_string_append_printf(json, "  \"vocab_size\": %d,\n", s->vocab_size);
  g_string_append(json, "  \"n_inner\": null,\n");
  g_string_append(json, "  \"activation_function\": \"gelu_new\",\n");
  g_string_append(json, "  \"layer_norm_epsilon\": 1e-05,\n");
  /* Cohort trains without dropout; HF's defaults (0.1) would change what the weights mean. */
  g_string_append(json, "  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n");
  g_string_append(json, "  \"attn_pdrop\": 0.0,\n");
  g_string_append(json, "  \"initializer_range\": 0.02,\n");
  g_string_append(json, "  \"scale_attn_weights\": true,\n");
  g_string_append(json, "  \"tie_word_embeddings\": true,\n");
  g_string_append(json, "  \"torch_dtype\": \"float32\"\n}\n");
  g_autofree char *path = g_build_filename(dir, "config.json", NULL);
  return cohort_write_file_atomic(path, json->str, json->len, error);
}

/* A Hugging Face folder's file that Cohort cannot take: the message prefixed with the file. */
static gboolean hf_error(GError **error, const char *path, const char *fmt, ...)
    G_GNUC_PRINTF(3, 4);
static gboolean hf_error(GError **error, const char *path, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  cohort_fail_valist(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID, fmt, ap);
  va_end(ap);
  g_prefix_error(error, "%s: ", path);
  return FALSE;
}

/* An integer member in [1, max], or FALSE with an error naming it. */
static gboolean hf_int(JsonObject *o, const char *path, const char *key, int max, int *out,
                       GError **error)
{
  JsonNode *n = json_object_get_member(o, key);
  if (!n || !JSON_NODE_HOLDS_VALUE(n) || json_node_get_value_type(n) != G_TYPE_INT64 ||
      json_node_get_int(n) < 1 || json_node_get_int(n) > max)
    return hf_error(error, path, "key \"%s\" is missing or not an integer from 1 to %d", key, max);
  *out = (int)json_node_get_int(n);
  return TRUE;
}

static const char *hf_string(JsonObject *o, const char *key)
{
  JsonNode *n = json_object_get_member(o, key);
  if (!n || !JSON_NODE_HOLDS_VALUE(n) || json_node_get_value_type(n) != G_TYPE_STRING)
    return NULL;
  return json_node_get_string(n);
}

gboolean cohort_gpt_read_hf_config(const char *path, CohortConfig *cfg, GError **error)
{
  /* A regular file of a sane size, through the one strict depth-limited reader: a teacher
   * folder is input from strangers. */
  g_autoptr(GError) local = NULL;
  gsize len = 0;
  g_autofree char *text = cohort_file_read_regular(path, 16u << 20, "a config.json", &len, &local);
  if (!text) {
    g_set_error_literal(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID, local->message);
    return FALSE;
  }
  g_autoptr(JsonNode) root = cohort_json_parse_strict(text, (gssize)len, path, 0, &local);
  if (!root) {
    g_set_error_literal(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID, local->message);
    return FALSE;
  }
  if (!JSON_NODE_HOLDS_OBJECT(root))
    return hf_error(error, path, "not a JSON object");
  JsonObject *o = json_node_get_object(root);
  const char *type = hf_string(o, "model_type");
  if (type && strcmp(type, "gpt2") != 0)
    return hf_error(error, path, "key \"model_type\": \"%s\" is not allowed; allowed: \"gpt2\"",
                    type);
  const char *act = hf_string(o, "activation_function");
  if (act && strcmp(act, "gelu_new") != 0 && strcmp(act, "gelu_pytorch_tanh") != 0)
    return hf_error(error, path,
                    "key \"activation_function\": \"%s\" is not allowed; allowed: \"gelu_new\" "
                    "(Cohort's GPT uses the tanh GELU)",
                    act);
  JsonNode *tie = json_object_get_member(o, "tie_word_embeddings");
  if (tie && JSON_NODE_HOLDS_VALUE(tie) && json_node_get_value_type(tie) == G_TYPE_BOOLEAN &&
      !json_node_get_boolean(tie))
    return hf_error(error, path,
                    "key \"tie_word_embeddings\": false is not allowed; allowed: true (Cohort's "
                    "GPT ties its head to the token embedding)");
  int L = 0, H = 0, C = 0, T = 0, V = 0;
  const char *pos_key = json_object_has_member(o, "n_positions") ? "n_positions" : "n_ctx";
  if (!hf_int(o, path, "n_layer", 1024, &L, error) || !hf_int(o, path, "n_head", 1024, &H, error) ||
      !hf_int(o, path, "n_embd", 65536, &C, error) ||
      !hf_int(o, path, pos_key, 1 << 20, &T, error) ||
      !hf_int(o, path, "vocab_size", 1 << 24, &V, error))
    return FALSE;
  JsonNode *inner = json_object_get_member(o, "n_inner");
  if (inner && JSON_NODE_HOLDS_VALUE(inner) && json_node_get_int(inner) != 4 * (gint64)C)
    return hf_error(error, path,
                    "key \"n_inner\": %" G_GINT64_FORMAT " is not allowed; allowed: null or %d "
                    "(4 n_embd)",
                    json_node_get_int(inner), 4 * C);
  g_free(cfg->model);
  cfg->model = g_strdup("gpt");
  cfg->n_layer = L;
  cfg->n_head = H;
  cfg->n_embd = C;
  cfg->seq_len = T;
  cfg->vocab_size = V;
  return TRUE;
}

/* ---- init_from ---- */

/* A Hugging Face folder's config.json must describe this model: the weights alone cannot
 * tell a wrong n_head, and the other keys get a message that says what to set. */
static gboolean check_folder_config(CohortModel *m, const char *dir, GError **error)
{
  g_autofree char *path = g_build_filename(dir, "config.json", NULL);
  if (!g_file_test(path, G_FILE_TEST_EXISTS))
    return TRUE;
  g_autoptr(CohortConfig) hf = cohort_config_new();
  if (!cohort_gpt_read_hf_config(path, hf, error))
    return FALSE;
  const CohortGptShape *s = cohort_gpt_shape(m);
  const struct {
    const char *key, *hf_key;
    int have, want;
  } keys[] = {{"n_layer", "n_layer", s->n_layer, hf->n_layer},
              {"n_head", "n_head", s->n_head, hf->n_head},
              {"n_embd", "n_embd", s->n_embd, hf->n_embd},
              {"seq_len", "n_positions", s->seq_len, hf->seq_len}, /* at most: below */
              {"vocab_size", "vocab_size", s->vocab_size, hf->vocab_size}};
  for (guint i = 0; i < G_N_ELEMENTS(keys); i++) {
    /* a shorter context than n_positions takes the first seq_len positions */
    gboolean shorter = g_str_equal(keys[i].key, "seq_len") && keys[i].have < keys[i].want;
    if (keys[i].have != keys[i].want && !shorter)
      return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                         "init_from %s: config.json has %s %d but key \"%s\" is %d; set %s to "
                         "%s%d to use this model",
                         dir, keys[i].hf_key, keys[i].want, keys[i].key, keys[i].have, keys[i].key,
                         g_str_equal(keys[i].key, "seq_len") ? "at most " : "", keys[i].want);
  }
  return TRUE;
}

/* The file gpt_import reads for `path`. */
char *cohort_gpt_import_file(const char *path)
{
  if (!g_file_test(path, G_FILE_TEST_IS_DIR))
    return g_strdup(path);
  return g_build_filename(path, "model.safetensors", NULL);
}

/* init_from: a .safetensors file, or a Hugging Face folder (config.json, model.safetensors). */
gboolean cohort_gpt_import(CohortModel *m, const char *path, GPtrArray *notes, GError **error)
{
  g_autofree char *weights = cohort_gpt_import_file(path);
  if (g_file_test(path, G_FILE_TEST_IS_DIR) && !g_file_test(weights, G_FILE_TEST_IS_REGULAR))
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "init_from %s: the folder has no model.safetensors; allowed: a "
                       ".safetensors file or a Hugging Face GPT-2 folder (config.json, "
                       "model.safetensors)",
                       path);
  if ((g_file_test(path, G_FILE_TEST_IS_DIR) && !check_folder_config(m, path, error)) ||
      !cohort_gpt_load_hf(m, weights, error))
    return FALSE;
  int positions = cohort_gpt_file_positions(weights);
  int T = cohort_gpt_shape(m)->seq_len;
  if (notes && positions > T)
    g_ptr_array_add(notes, g_strdup_printf("the base has %d positions (n_positions); this run "
                                           "uses the first %d (seq_len), and its export keeps "
                                           "all %d",
                                           positions, T, positions));
  return TRUE;
}

/* A Hugging Face folder's weights, one file or shards with their index (see hf-weights.h). */
#include "engine/model/hf-weights.h"

#include <errno.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <stdarg.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/base/fileio.h"
#include "engine/base/json-read.h"
#include "engine/base/json-write.h"

/* Bounds on an index from a stranger: its size, its tensors and its shards. */
#define INDEX_MAX_BYTES  (64u << 20)
#define INDEX_MAX_DEPTH  8
#define INDEX_MAX_NAMES  (1u << 20)
#define INDEX_MAX_SHARDS 4096u
#define SHARD_NAME_MAX   255

struct CohortHfWeights {
  char *main;        /* model.safetensors or the index */
  GPtrArray *files;  /* CohortStFile *, one per shard */
  GPtrArray *paths;  /* their paths */
  GHashTable *where; /* tensor name → 1 + its file's index */
  GPtrArray *names;  /* every tensor, NULL-terminated */
};

void cohort_hf_weights_close(CohortHfWeights *w)
{
  if (!w)
    return;
  g_free(w->main);
  g_ptr_array_unref(w->files);
  g_ptr_array_unref(w->paths);
  g_hash_table_unref(w->where);
  g_ptr_array_unref(w->names);
  g_free(w);
}

static CohortHfWeights *weights_new(const char *main)
{
  CohortHfWeights *w = g_new0(CohortHfWeights, 1);
  w->main = g_strdup(main);
  w->files = g_ptr_array_new_with_free_func((GDestroyNotify)cohort_safetensors_close);
  w->paths = g_ptr_array_new_with_free_func(g_free);
  w->where = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
  w->names = g_ptr_array_new_with_free_func(g_free);
  return w;
}

static gboolean index_error(GError **error, const char *path, const char *fmt, ...)
    G_GNUC_PRINTF(3, 4);
static gboolean index_error(GError **error, const char *path, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  cohort_fail_valist(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_FORMAT, fmt, ap);
  va_end(ap);
  g_prefix_error(error, "%s: ", path);
  return FALSE;
}

/* A shard's name as an index may give it: a plain .safetensors file of the same folder. */
static gboolean plain_shard_name(const char *s)
{
  size_t n = strlen(s);
  return n > 0 && n <= SHARD_NAME_MAX && s[0] != '.' && !strchr(s, '/') && !strchr(s, '\\') &&
         g_str_has_suffix(s, ".safetensors") && g_utf8_validate(s, -1, NULL);
}

/* The index's weight_map: tensor → shard name (borrowed from `root`), in the index's order. */
static JsonObject *read_weight_map(const char *path, JsonNode **root, GError **error)
{
  gsize len = 0;
  g_autofree char *text =
      cohort_file_read_regular(path, INDEX_MAX_BYTES, "a safetensors index", &len, error);
  if (!text)
    return NULL;
  *root = cohort_json_parse_strict(text, (gssize)len, path, INDEX_MAX_DEPTH, error);
  if (!*root)
    return NULL;
  JsonNode *map = JSON_NODE_HOLDS_OBJECT(*root)
                      ? json_object_get_member(json_node_get_object(*root), "weight_map")
                      : NULL;
  if (!map || !JSON_NODE_HOLDS_OBJECT(map)) {
    index_error(error, path,
                "key \"weight_map\" is missing or not an object; allowed: "
                "{\"weight_map\": {\"tensor\": \"shard.safetensors\", …}}");
    return NULL;
  }
  JsonObject *o = json_node_get_object(map);
  if (json_object_get_size(o) == 0 || json_object_get_size(o) > INDEX_MAX_NAMES) {
    index_error(error, path, "weight_map lists %u tensors; allowed: 1 to %u",
                json_object_get_size(o), INDEX_MAX_NAMES);
    return NULL;
  }
  return o;
}

/* Opens shard `name` once (its file index in *at). */
static gboolean open_shard(CohortHfWeights *w, GHashTable *shards, const char *dir,
                           const char *index, const char *tensor, const char *name, guint *at,
                           GError **error)
{
  gpointer found = g_hash_table_lookup(shards, name);
  if (found) {
    *at = GPOINTER_TO_UINT(found) - 1;
    return TRUE;
  }
  if (g_hash_table_size(shards) >= INDEX_MAX_SHARDS)
    return index_error(error, index, "more than %u shards; allowed: at most %u", INDEX_MAX_SHARDS,
                       INDEX_MAX_SHARDS);
  g_autofree char *path = g_build_filename(dir, name, NULL);
  if (!g_file_test(path, G_FILE_TEST_IS_REGULAR))
    return index_error(error, index,
                       "the index maps tensor \"%s\" to shard %s, which is missing (%s); allowed: "
                       "an index whose shards are all in its folder",
                       tensor, name, path);
  CohortStFile *f = cohort_safetensors_open(path, error);
  if (!f)
    return FALSE;
  *at = w->files->len;
  g_ptr_array_add(w->files, f);
  g_ptr_array_add(w->paths, g_steal_pointer(&path));
  g_hash_table_insert(shards, g_strdup(name), GUINT_TO_POINTER(*at + 1));
  return TRUE;
}

/* Every tensor of every shard is where the index says, and only there. */
static gboolean check_shards(CohortHfWeights *w, JsonObject *map, const char *index, GError **error)
{
  for (guint i = 0; i < w->files->len; i++) {
    const char *shard = w->paths->pdata[i];
    g_autofree char *base = g_path_get_basename(shard);
    for (const char *const *t = cohort_safetensors_names(w->files->pdata[i]); *t; t++) {
      guint at = GPOINTER_TO_UINT(g_hash_table_lookup(w->where, *t));
      if (at == 0)
        return index_error(error, index,
                           "shard %s holds tensor \"%s\", which the index does not list; "
                           "allowed: an index that lists every tensor of its shards",
                           base, *t);
      if (at - 1 != i) {
        const char *mapped = json_object_get_string_member(map, *t);
        gboolean both = cohort_safetensors_has(w->files->pdata[at - 1], *t);
        return index_error(error, index,
                           "tensor \"%s\" is in shard %s but the index maps it to %s%s; allowed: "
                           "each tensor in exactly the shard the index names",
                           *t, base, mapped,
                           both ? ", which holds it too (overlapping shards)" : "");
      }
    }
  }
  return TRUE;
}

static CohortHfWeights *open_index(const char *index, GError **error)
{
  g_autoptr(JsonNode) root = NULL;
  JsonObject *map = read_weight_map(index, &root, error);
  if (!map)
    return NULL;
  g_autofree char *dir = g_path_get_dirname(index);
  CohortHfWeights *w = weights_new(index);
  g_autoptr(GHashTable) shards = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
  g_autoptr(GList) members = json_object_get_members(map);
  for (GList *l = members; l; l = l->next) {
    const char *tensor = l->data;
    JsonNode *v = json_object_get_member(map, tensor);
    const char *name = JSON_NODE_HOLDS_VALUE(v) && json_node_get_value_type(v) == G_TYPE_STRING
                           ? json_node_get_string(v)
                           : NULL;
    guint at = 0;
    if (!name || !plain_shard_name(name)) {
      g_autofree char *shown = name ? cohort_utf8_escape(name) : g_strdup("(not a string)");
      index_error(error, index,
                  "weight_map[\"%s\"]: \"%s\" is not allowed; allowed: the name of a "
                  ".safetensors file in the index's folder",
                  tensor, shown);
      cohort_hf_weights_close(w);
      return NULL;
    }
    if (!open_shard(w, shards, dir, index, tensor, name, &at, error)) {
      cohort_hf_weights_close(w);
      return NULL;
    }
    if (!cohort_safetensors_has(w->files->pdata[at], tensor)) {
      index_error(error, index,
                  "the index maps tensor \"%s\" to shard %s, which does not hold it; allowed: "
                  "an index that matches its shards",
                  tensor, name);
      cohort_hf_weights_close(w);
      return NULL;
    }
    g_hash_table_insert(w->where, g_strdup(tensor), GUINT_TO_POINTER(at + 1));
    g_ptr_array_add(w->names, g_strdup(tensor));
  }
  if (!check_shards(w, map, index, error)) {
    cohort_hf_weights_close(w);
    return NULL;
  }
  g_ptr_array_add(w->names, NULL);
  return w;
}

static CohortHfWeights *open_single(const char *path, GError **error)
{
  CohortStFile *f = cohort_safetensors_open(path, error);
  if (!f)
    return NULL;
  CohortHfWeights *w = weights_new(path);
  g_ptr_array_add(w->files, f);
  g_ptr_array_add(w->paths, g_strdup(path));
  for (const char *const *t = cohort_safetensors_names(f); *t; t++) {
    g_hash_table_insert(w->where, g_strdup(*t), GUINT_TO_POINTER(1));
    g_ptr_array_add(w->names, g_strdup(*t));
  }
  g_ptr_array_add(w->names, NULL);
  return w;
}

char *cohort_hf_weights_main_path(const char *path)
{
  if (!g_file_test(path, G_FILE_TEST_IS_DIR))
    return g_strdup(path);
  char *single = g_build_filename(path, COHORT_HF_WEIGHTS_FILE, NULL);
  g_autofree char *index = g_build_filename(path, COHORT_HF_INDEX_FILE, NULL);
  if (!g_file_test(single, G_FILE_TEST_EXISTS) && g_file_test(index, G_FILE_TEST_EXISTS)) {
    g_free(single);
    return g_steal_pointer(&index);
  }
  return single;
}

CohortHfWeights *cohort_hf_weights_open(const char *path, GError **error)
{
  g_autofree char *main = cohort_hf_weights_main_path(path);
  if (g_file_test(path, G_FILE_TEST_IS_DIR) && !g_file_test(main, G_FILE_TEST_EXISTS)) {
    cohort_fail(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_IO,
                "%s: the folder has neither %s nor %s; allowed: a Hugging Face folder with its "
                "weights as safetensors",
                path, COHORT_HF_WEIGHTS_FILE, COHORT_HF_INDEX_FILE);
    return NULL;
  }
  return g_str_has_suffix(main, ".index.json") ? open_index(main, error) : open_single(main, error);
}

const char *const *cohort_hf_weights_names(const CohortHfWeights *w)
{
  return (const char *const *)w->names->pdata;
}

const CohortStFile *cohort_hf_weights_find(const CohortHfWeights *w, const char *name,
                                           const char **path)
{
  guint at = GPOINTER_TO_UINT(g_hash_table_lookup(w->where, name));
  if (path)
    *path = at ? w->paths->pdata[at - 1] : NULL;
  return at ? w->files->pdata[at - 1] : NULL;
}

const char *cohort_hf_weights_main_file(const CohortHfWeights *w)
{
  return w->main;
}

guint cohort_hf_weights_n_files(const CohortHfWeights *w)
{
  return w->files->len;
}

/* ---- writing ---- */

static guint64 entry_bytes(const CohortStEntry *e)
{
  guint64 n = 1;
  for (int d = 0; d < e->ndim; d++)
    n *= (guint64)e->shape[d];
  return n * (e->int64 ? 8 : 4);
}

static gboolean is_shard_name(const char *name)
{
  return g_regex_match_simple("^model-[0-9]{5}-of-[0-9]{5}\\.safetensors$", name, 0, 0);
}

/* Removes what another kind of export left in `dir`: shards not in `keep` (NULL: all of this
 * naming), and `single` (model.safetensors or the index) when set. */
static void remove_stale(const char *dir, GHashTable *keep, const char *single)
{
  g_autoptr(GDir) d = g_dir_open(dir, 0, NULL);
  for (const char *name; d && (name = g_dir_read_name(d));) {
    if (!is_shard_name(name) || (keep && g_hash_table_contains(keep, name)))
      continue;
    g_autofree char *path = g_build_filename(dir, name, NULL);
    g_unlink(path);
  }
  if (single) {
    g_autofree char *path = g_build_filename(dir, single, NULL);
    g_unlink(path);
  }
  cohort_fsync_dir(dir);
}

static gboolean write_index(const char *dir, const CohortStEntry *entries, guint n,
                            const guint *shard_of, guint n_shards, guint64 total, GError **error)
{
  g_autoptr(GString) json = g_string_new("{\n  \"metadata\": {\n    \"total_size\": ");
  g_string_append_printf(json, "%" G_GUINT64_FORMAT "\n  },\n  \"weight_map\": {\n", total);
  for (guint i = 0; i < n; i++) {
    g_autofree char *file =
        g_strdup_printf("model-%05u-of-%05u.safetensors", shard_of[i] + 1, n_shards);
    g_string_append(json, "    ");
    cohort_json_append_string(json, entries[i].name);
    g_string_append(json, ": ");
    cohort_json_append_string(json, file);
    g_string_append(json, i + 1 < n ? ",\n" : "\n");
  }
  g_string_append(json, "  }\n}\n");
  g_autofree char *path = g_build_filename(dir, COHORT_HF_INDEX_FILE, NULL);
  return cohort_write_file_atomic(path, json->str, json->len, error);
}

gboolean cohort_hf_weights_write(const char *dir, const CohortStEntry *entries, guint n,
                                 guint64 max_bytes, GHashTable *metadata, guint *n_shards,
                                 GError **error)
{
  guint64 total = 0;
  for (guint i = 0; i < n; i++)
    total += entry_bytes(&entries[i]);
  if (n_shards)
    *n_shards = 0;
  if (total <= max_bytes) {
    g_autofree char *path = g_build_filename(dir, COHORT_HF_WEIGHTS_FILE, NULL);
    if (!cohort_safetensors_write(path, entries, n, metadata, error))
      return FALSE;
    remove_stale(dir, NULL, COHORT_HF_INDEX_FILE);
    return TRUE;
  }
  /* each entry's shard: a new one when the next tensor would pass max_bytes */
  g_autofree guint *shard_of = g_new(guint, MAX(n, 1));
  guint shards = 0;
  guint64 size = 0;
  for (guint i = 0; i < n; i++) {
    guint64 b = entry_bytes(&entries[i]);
    if (i == 0 || (size > 0 && size + b > max_bytes)) {
      shards += i > 0;
      size = 0;
    }
    shard_of[i] = shards;
    size += b;
  }
  shards++;
  g_autoptr(GHashTable) keep = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
  for (guint s = 0, first = 0; s < shards; s++) {
    guint end = first;
    while (end < n && shard_of[end] == s)
      end++;
    char *name = g_strdup_printf("model-%05u-of-%05u.safetensors", s + 1, shards);
    g_hash_table_add(keep, name);
    g_autofree char *path = g_build_filename(dir, name, NULL);
    if (!cohort_safetensors_write(path, entries + first, end - first, metadata, error))
      return FALSE;
    first = end;
  }
  if (!write_index(dir, entries, n, shard_of, shards, total, error))
    return FALSE;
  remove_stale(dir, keep, COHORT_HF_WEIGHTS_FILE);
  if (n_shards)
    *n_shards = shards;
  return TRUE;
}

gboolean cohort_hf_weights_reshard(const char *dir, guint64 max_bytes, guint *n_shards,
                                   GError **error)
{
  g_autofree char *path = g_build_filename(dir, COHORT_HF_WEIGHTS_FILE, NULL);
  if (n_shards)
    *n_shards = 0;
  g_autoptr(CohortStFile) f = cohort_safetensors_open(path, error);
  if (!f)
    return FALSE;
  g_autoptr(GArray) entries = g_array_new(FALSE, TRUE, sizeof(CohortStEntry));
  g_autoptr(GPtrArray) data = g_ptr_array_new_with_free_func(g_free);
  guint64 total = 0;
  for (const char *const *name = cohort_safetensors_names(f); *name; name++) {
    CohortStEntry e = {.name = *name};
    int64_t shape[8];
    e.ndim = cohort_safetensors_shape(f, *name, shape);
    if (e.ndim < 0 || e.ndim > 4)
      return cohort_fail(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_SHAPE,
                         "%s: tensor \"%s\" has %d dimensions; allowed: at most 4", path, *name,
                         e.ndim);
    for (int d = 0; d < e.ndim; d++)
      e.shape[d] = shape[d];
    total += entry_bytes(&e);
    g_array_append_val(entries, e);
  }
  if (total <= max_bytes) {
    remove_stale(dir, NULL, COHORT_HF_INDEX_FILE);
    return TRUE;
  }
  for (guint i = 0; i < entries->len; i++) {
    CohortStEntry *e = &g_array_index(entries, CohortStEntry, i);
    guint64 n = entry_bytes(e) / 4;
    float *v = g_try_new(float, MAX(n, 1));
    if (!v)
      return cohort_fail(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_IO,
                         "%s: out of memory to cut it into shards", path);
    g_ptr_array_add(data, v);
    if (!cohort_safetensors_read_f32(f, e->name, e->ndim, e->shape, v, error))
      return FALSE;
    e->data = v;
  }
  return cohort_hf_weights_write(dir, (CohortStEntry *)entries->data, entries->len, max_bytes,
                                 cohort_safetensors_metadata_all(f), n_shards, error);
}

/* An image folder as a data set: listing, decoding (or the cache), fitting; see images.h. */
#include "data/images.h"

#include <string.h>
#include "data/image-cache.h"
#include "data/image-decode.h"
#include "data/image-folder.h"
#include "data/image-resize.h"
#include "engine/base/phase.h"

#define MAX_IMAGE_SIZE 4096

struct CohortImageSet {
  int size, channels;
  gsize image_bytes;
  GStrv classes;
  GPtrArray *paths;   /* char *, relative to the folder */
  GArray *labels;     /* int */
  GPtrArray *skipped; /* char *, why each skipped file was left out */
  guint n_decoded;
  CohortImageCache *cache; /* held while `pixels` points into it */
  guint8 *owned;
  const guint8 *pixels;
};

void cohort_image_set_free(CohortImageSet *set)
{
  if (!set)
    return;
  g_strfreev(set->classes);
  g_ptr_array_unref(set->paths);
  g_array_unref(set->labels);
  g_ptr_array_unref(set->skipped);
  cohort_image_cache_free(set->cache);
  g_free(set->owned);
  g_free(set);
}

static CohortImageSet *set_new(const CohortImageListing *listing, int size, int channels)
{
  CohortImageSet *set = g_new0(CohortImageSet, 1);
  set->size = size;
  set->channels = channels;
  set->image_bytes = (gsize)size * size * channels;
  set->classes = g_new0(char *, listing->classes->len + 1);
  for (guint i = 0; i < listing->classes->len; i++)
    set->classes[i] = g_strdup(listing->classes->pdata[i]);
  set->paths = g_ptr_array_new_with_free_func(g_free);
  set->labels = g_array_new(FALSE, FALSE, sizeof(int));
  set->skipped = g_ptr_array_new_with_free_func(g_free);
  return set;
}

static void add_image(CohortImageSet *set, const CohortImageEntry *e)
{
  g_ptr_array_add(set->paths, g_strdup(e->rel));
  g_array_append_val(set->labels, e->label);
}

/* A bad file: the error without skip_bad, one more skipped with it. */
static gboolean take_bad(CohortImageSet *set, const char *reason, int code, gboolean skip_bad,
                         GError **error)
{
  if (!skip_bad) {
    g_set_error_literal(error, COHORT_DATA_ERROR, code, reason);
    return FALSE;
  }
  g_ptr_array_add(set->skipped, g_strdup(reason));
  return TRUE;
}

/* The cache lists this very folder: its pixels are used where they lie. */
static gboolean open_from_cache(CohortImageSet *set, CohortImageListing *listing,
                                CohortImageCache *cache, gboolean skip_bad, GError **error)
{
  for (guint i = 0; i < listing->entries->len; i++) {
    const CohortImageEntry *e = &g_array_index(listing->entries, CohortImageEntry, i);
    const guint8 *pixels;
    const char *bad;
    cohort_image_cache_lookup(cache, e, &pixels, &bad);
    if (bad && !take_bad(set, bad, COHORT_DATA_ERROR_FORMAT, skip_bad, error))
      return FALSE;
    if (!bad)
      add_image(set, e);
  }
  gsize n;
  set->pixels = cohort_image_cache_pixels(cache, &n);
  g_assert(n == set->paths->len);
  return TRUE;
}

/* Fills slot `slot` of set->owned for entry `e`: from the old cache when it has the file
 * unchanged, else by decoding. On a bad file, sets e->bad and returns FALSE. */
static gboolean load_entry(CohortImageSet *set, const char *folder, CohortImageEntry *e,
                           const CohortImageCache *cache, gsize slot, int *code)
{
  const guint8 *cached;
  const char *bad;
  *code = COHORT_DATA_ERROR_FORMAT;
  if (cache && cohort_image_cache_lookup(cache, e, &cached, &bad)) {
    if (bad) {
      e->bad = g_strdup(bad);
      return FALSE;
    }
    memcpy(set->owned + slot * set->image_bytes, cached, set->image_bytes);
    return TRUE;
  }
  g_autofree char *path = g_build_filename(folder, e->rel, NULL);
  g_autoptr(GError) local = NULL;
  CohortRawImage raw;
  set->n_decoded++;
  if (!cohort_image_load(path, set->channels, &raw, &local)) {
    e->bad = g_strdup(local->message);
    *code = local->code;
    return FALSE;
  }
  cohort_image_fit(&raw, set->size, set->owned + slot * set->image_bytes);
  cohort_raw_image_clear(&raw);
  /* Decoding a large folder is a long phase: ranks waiting for this one see it move. */
  cohort_phase_tick();
  return TRUE;
}

static gboolean open_decoding(CohortImageSet *set, const char *folder, CohortImageListing *listing,
                              const CohortImageCache *cache, gboolean skip_bad, GError **error)
{
  set->owned = g_malloc(MAX(listing->entries->len, 1) * set->image_bytes);
  for (guint i = 0; i < listing->entries->len; i++) {
    CohortImageEntry *e = &g_array_index(listing->entries, CohortImageEntry, i);
    int code = COHORT_DATA_ERROR_IO;
    if (!e->bad && load_entry(set, folder, e, cache, set->paths->len, &code))
      add_image(set, e);
    else if (!take_bad(set, e->bad, code, skip_bad, error))
      return FALSE;
  }
  set->owned = g_realloc(set->owned, MAX(set->paths->len, 1) * set->image_bytes);
  set->pixels = set->owned;
  return TRUE;
}

CohortImageSet *cohort_image_set_open(const char *folder, int image_size, int channels,
                                      gboolean skip_bad, const char *cache_dir, GError **error)
{
  g_return_val_if_fail(folder != NULL, NULL);
  if (image_size < 1 || image_size > MAX_IMAGE_SIZE || (channels != 1 && channels != 3)) {
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_FORMAT,
                "%s: image_size %d and channels %d: allowed are an image_size of 1 to %d and "
                "1 or 3 channels",
                folder, image_size, channels, MAX_IMAGE_SIZE);
    return NULL;
  }
  g_auto(CohortImageListing) listing = {0};
  if (!cohort_image_listing_scan(folder, &listing, error))
    return NULL;
  g_autoptr(CohortImageSet) set = set_new(&listing, image_size, channels);
  g_autofree char *cache_path =
      cache_dir ? cohort_image_cache_path(cache_dir, folder, image_size, channels) : NULL;
  g_autoptr(CohortImageCache) cache =
      cache_path ? cohort_image_cache_load(cache_path, folder, image_size, channels) : NULL;

  if (cache && cohort_image_cache_covers(cache, &listing)) {
    if (!open_from_cache(set, &listing, cache, skip_bad, error))
      return NULL;
    set->cache = g_steal_pointer(&cache);
  } else {
    if (!open_decoding(set, folder, &listing, cache, skip_bad, error))
      return NULL;
    if (cache_path && !cohort_image_cache_write(cache_path, folder, image_size, channels, &listing,
                                                set->owned, error))
      return NULL;
  }

  if (set->paths->len == 0) {
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_TOO_SMALL,
                "%s: no readable image: all %u were skipped (first: %s)", folder, set->skipped->len,
                (const char *)set->skipped->pdata[0]);
    return NULL;
  }
  return g_steal_pointer(&set);
}

gsize cohort_image_set_len(const CohortImageSet *set)
{
  return set->paths->len;
}

int cohort_image_set_num_classes(const CohortImageSet *set)
{
  return (int)g_strv_length(set->classes);
}

const char *const *cohort_image_set_class_names(const CohortImageSet *set)
{
  return (const char *const *)set->classes;
}

int cohort_image_set_image_size(const CohortImageSet *set)
{
  return set->size;
}

int cohort_image_set_channels(const CohortImageSet *set)
{
  return set->channels;
}

const guint8 *cohort_image_set_get_bytes(const CohortImageSet *set, gsize index)
{
  g_return_val_if_fail(index < set->paths->len, NULL);
  return set->pixels + index * set->image_bytes;
}

int cohort_image_set_label(const CohortImageSet *set, gsize index)
{
  g_return_val_if_fail(index < set->paths->len, -1);
  return g_array_index(set->labels, int, index);
}

const char *cohort_image_set_path(const CohortImageSet *set, gsize index)
{
  g_return_val_if_fail(index < set->paths->len, NULL);
  return set->paths->pdata[index];
}

void cohort_image_set_get(const CohortImageSet *set, gsize index, float *pixels, int *label)
{
  const guint8 *bytes = cohort_image_set_get_bytes(set, index);
  g_return_if_fail(bytes != NULL);
  for (gsize i = 0; i < set->image_bytes; i++)
    pixels[i] = (float)bytes[i] / 127.5f - 1.0f;
  if (label)
    *label = cohort_image_set_label(set, index);
}

guint cohort_image_set_num_skipped(const CohortImageSet *set)
{
  return set->skipped->len;
}

const char *cohort_image_set_skipped_reason(const CohortImageSet *set, guint i)
{
  g_return_val_if_fail(i < set->skipped->len, NULL);
  return set->skipped->pdata[i];
}

guint cohort_image_set_num_decoded(const CohortImageSet *set)
{
  return set->n_decoded;
}

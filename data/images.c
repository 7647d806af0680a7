/* An image folder as a data set: listing, decoding (or the cache), fitting; see images.h. */
#include "data/images.h"

#include <string.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include "data/image-cache.h"
#include "data/image-decode.h"
#include "data/image-folder.h"
#include "data/image-resize.h"
#include "engine/base/json-write.h"
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
  /* Names as people and files see them: UTF-8, other bytes as \xHH (classes.json, a
   * teacher's class check and the samples all use this form). */
  set->classes = g_new0(char *, listing->classes->len + 1);
  for (guint i = 0; i < listing->classes->len; i++)
    set->classes[i] = cohort_utf8_escape(listing->classes->pdata[i]);
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

/* The memory a decoded set may take when it is held in memory: half of what the system has
 * available (MemAvailable), and half of what this process may still map under its address-
 * space and data limits; the other half is left for the model and everything else. */
guint64 cohort_image_memory_budget(void)
{
  guint64 available = (guint64)sysconf(_SC_AVPHYS_PAGES) * (guint64)sysconf(_SC_PAGESIZE);
  guint64 vm_size = 0, vm_data = 0;
  g_autofree char *meminfo = NULL, *status = NULL;
  if (g_file_get_contents("/proc/meminfo", &meminfo, NULL, NULL)) {
    const char *p = strstr(meminfo, "MemAvailable:");
    if (p)
      available = g_ascii_strtoull(p + 13, NULL, 10) << 10;
  }
  if (g_file_get_contents("/proc/self/status", &status, NULL, NULL)) {
    const char *s = strstr(status, "VmSize:"), *d = strstr(status, "VmData:");
    vm_size = s ? g_ascii_strtoull(s + 7, NULL, 10) << 10 : 0;
    vm_data = d ? g_ascii_strtoull(d + 7, NULL, 10) << 10 : 0;
  }
  struct rlimit as, data;
  if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY)
    available = MIN(available, as.rlim_cur > vm_size ? as.rlim_cur - vm_size : 0);
  if (getrlimit(RLIMIT_DATA, &data) == 0 && data.rlim_cur != RLIM_INFINITY)
    available = MIN(available, data.rlim_cur > vm_data ? data.rlim_cur - vm_data : 0);
  return available / 2;
}

/* Free space for a cache file in `dir` (or the nearest folder above it that exists), less a
 * reserve of 1 GiB or 5 % of the disk, whichever is larger, for everything else. */
guint64 cohort_image_disk_budget(const char *dir)
{
  g_autofree char *at = g_strdup(dir);
  struct statvfs vfs;
  while (statvfs(at, &vfs) != 0) {
    char *up = g_path_get_dirname(at);
    gboolean top = g_str_equal(up, at);
    g_free(at);
    at = up;
    if (top)
      return 0;
  }
  guint64 free_bytes = (guint64)vfs.f_bavail * vfs.f_frsize;
  guint64 reserve = MAX((guint64)1 << 30, (guint64)vfs.f_blocks * vfs.f_frsize / 20);
  return free_bytes > reserve ? free_bytes - reserve : 0;
}

/* "168.8 GiB": plain spaces, whatever the locale (g_format_size writes a no-break space). */
static char *bytes_text(guint64 bytes)
{
  static const char *const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = (double)bytes;
  guint u = 0;
  while (v >= 1024 && u + 1 < G_N_ELEMENTS(units)) {
    v /= 1024;
    u++;
  }
  return u == 0 ? g_strdup_printf("%" G_GUINT64_FORMAT " bytes", bytes)
                : g_strdup_printf("%.1f %s", v, units[u]);
}

/* The refusal when the decoded set does not fit `where` ("memory" or the cache's disk). */
static void too_large(GError **error, const char *folder, guint n, int size, int channels,
                      guint64 needed, guint64 budget, const char *where)
{
  g_autofree char *need = bytes_text(needed), *have = bytes_text(budget);
  g_autofree char *shown = cohort_utf8_escape(folder);
  g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_TOO_LARGE,
              "%s: %u images at image_size %d and image_channels %d need %s (%" G_GUINT64_FORMAT
              " bytes) decoded, more than the %s %s; lower image_size or image_channels, or use "
              "fewer images",
              shown, n, size, channels, need, needed, have, where);
}

/* Fills `dst` (image_bytes) for entry `e`: from the old cache when it has the file unchanged,
 * else by decoding. On a bad file, sets e->bad and returns FALSE. */
static gboolean load_entry(CohortImageSet *set, const char *folder, CohortImageEntry *e,
                           const CohortImageCache *cache, guint8 *dst, int *code)
{
  const guint8 *cached;
  const char *bad;
  *code = COHORT_DATA_ERROR_FORMAT;
  if (cache && cohort_image_cache_lookup(cache, e, &cached, &bad)) {
    if (bad) {
      e->bad = g_strdup(bad);
      return FALSE;
    }
    memcpy(dst, cached, set->image_bytes);
    return TRUE;
  }
  g_autofree char *path = g_build_filename(folder, e->rel, NULL);
  g_autoptr(GError) local = NULL;
  CohortRawImage raw;
  set->n_decoded++;
  if (!cohort_image_load_native(path, set->channels, &raw, &local)) {
    e->bad = cohort_utf8_escape(local->message);
    *code = local->code;
    return FALSE;
  }
  gboolean fitted = cohort_image_fit(&raw, set->size, set->channels, dst);
  cohort_raw_image_clear(&raw);
  if (!fitted) {
    g_autofree char *shown = cohort_utf8_escape(path);
    e->bad = g_strdup_printf("%s: out of memory to resize it to %d pixels", shown, set->size);
  }
  /* Decoding a large folder is a long phase: ranks waiting for this one see it move. */
  cohort_phase_tick();
  return fitted;
}

/* Decodes every entry into memory (no cache folder): refused when the set would not fit. */
static gboolean open_in_memory(CohortImageSet *set, const char *folder, CohortImageListing *listing,
                               const CohortImageSetOptions *o, GError **error)
{
  guint n = listing->entries->len;
  guint64 needed = (guint64)n * set->image_bytes;
  guint64 budget = o->memory_budget ? o->memory_budget : cohort_image_memory_budget();
  if (needed > budget || !(set->owned = g_try_malloc(MAX(needed, 1)))) {
    too_large(error, folder, n, set->size, set->channels, needed, budget,
              "of memory this process may use (half of what is available)");
    return FALSE;
  }
  for (guint i = 0; i < n; i++) {
    CohortImageEntry *e = &g_array_index(listing->entries, CohortImageEntry, i);
    int code = COHORT_DATA_ERROR_IO;
    guint8 *dst = set->owned + (gsize)set->paths->len * set->image_bytes;
    if (!e->bad && load_entry(set, folder, e, NULL, dst, &code))
      add_image(set, e);
    else if (!take_bad(set, e->bad, code, o->skip_bad, error))
      return FALSE;
  }
  set->pixels = set->owned;
  return TRUE;
}

/* Decodes what the old cache lacks and writes a new cache file image by image, so the set
 * never has to fit in memory; then uses the new file where it lies. */
static gboolean open_through_cache(CohortImageSet *set, const char *folder,
                                   CohortImageListing *listing, const CohortImageCache *old,
                                   const char *cache_path, const CohortImageSetOptions *o,
                                   GError **error)
{
  guint n = listing->entries->len;
  guint64 needed = (guint64)n * set->image_bytes;
  g_autofree char *cache_dir = g_path_get_dirname(cache_path);
  guint64 budget = o->disk_budget ? o->disk_budget : cohort_image_disk_budget(cache_dir);
  g_autofree char *where = g_strdup_printf("free on the disk of the cache folder %s", cache_dir);
  g_autofree guint8 *one = needed <= budget ? g_try_malloc(set->image_bytes) : NULL;
  if (!one) {
    too_large(error, folder, n, set->size, set->channels, needed, budget, where);
    return FALSE;
  }
  CohortImageCacheWriter *w = cohort_image_cache_writer_new(cache_path, error);
  if (!w)
    return FALSE;
  for (guint i = 0; i < n; i++) {
    CohortImageEntry *e = &g_array_index(listing->entries, CohortImageEntry, i);
    int code = COHORT_DATA_ERROR_IO;
    if (!e->bad && load_entry(set, folder, e, old, one, &code)) {
      add_image(set, e);
      cohort_image_cache_writer_add(w, one, set->image_bytes);
    } else if (!take_bad(set, e->bad, code, o->skip_bad, error)) {
      cohort_image_cache_writer_abort(w);
      return FALSE;
    }
  }
  if (!cohort_image_cache_writer_finish(w, folder, set->size, set->channels, listing, error))
    return FALSE;
  set->cache = cohort_image_cache_load(cache_path, folder, set->size, set->channels);
  gsize count = 0;
  set->pixels = set->cache ? cohort_image_cache_pixels(set->cache, &count) : NULL;
  if (!set->cache || count != set->paths->len) {
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_IO,
                "%s: the image cache just written does not read back (the disk changed it?)",
                cache_path);
    return FALSE;
  }
  return TRUE;
}

CohortImageSet *cohort_image_set_open_with(const char *folder, int image_size, int channels,
                                           const CohortImageSetOptions *o, GError **error)
{
  g_return_val_if_fail(folder != NULL && o != NULL, NULL);
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
  const char *cache_dir = o->cache_dir;
  g_autofree char *cache_path =
      cache_dir ? cohort_image_cache_path(cache_dir, folder, image_size, channels) : NULL;
  g_autoptr(CohortImageCache) cache =
      cache_path ? cohort_image_cache_load(cache_path, folder, image_size, channels) : NULL;

  if (cache && cohort_image_cache_covers(cache, &listing)) {
    if (!open_from_cache(set, &listing, cache, o->skip_bad, error))
      return NULL;
    set->cache = g_steal_pointer(&cache);
  } else if (cache_path) {
    if (!open_through_cache(set, folder, &listing, cache, cache_path, o, error))
      return NULL;
  } else if (!open_in_memory(set, folder, &listing, o, error)) {
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

CohortImageSet *cohort_image_set_open(const char *folder, int image_size, int channels,
                                      gboolean skip_bad, const char *cache_dir, GError **error)
{
  CohortImageSetOptions o = {.skip_bad = skip_bad, .cache_dir = cache_dir};
  return cohort_image_set_open_with(folder, image_size, channels, &o, error);
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

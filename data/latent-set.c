/* Image files for latent training: listing, reading with a content hash, cache keys; see
 * latent-set.h. */
#include "data/latent-set.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "data/dataset.h"
#include "data/image-decode.h"
#include "data/image-folder.h"
#include "data/image-resize.h"

#define KEY_TAG "cohort latent v1"

struct CohortLatentFiles {
  char *folder;
  int size, channels;
  GPtrArray *paths; /* relative */
  GArray *labels;
  GStrv classes;
  guint skipped;
};

CohortLatentFiles *cohort_latent_files_scan(const char *folder, int image_size, int channels,
                                            gboolean skip_bad, GError **error)
{
  g_auto(CohortImageListing) listing = {0};
  if (!cohort_image_listing_scan(folder, &listing, error))
    return NULL;
  g_autoptr(CohortLatentFiles) f = g_new0(CohortLatentFiles, 1);
  f->folder = g_strdup(folder);
  f->size = image_size;
  f->channels = channels;
  f->paths = g_ptr_array_new_with_free_func(g_free);
  f->labels = g_array_new(FALSE, FALSE, sizeof(int));
  f->classes = g_new0(char *, listing.classes->len + 1);
  for (guint i = 0; i < listing.classes->len; i++)
    f->classes[i] = g_strdup(listing.classes->pdata[i]);
  for (guint i = 0; i < listing.entries->len; i++) {
    const CohortImageEntry *e = &g_array_index(listing.entries, CohortImageEntry, i);
    if (e->bad && !skip_bad) {
      g_set_error_literal(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_FORMAT, e->bad);
      return NULL;
    }
    if (e->bad) {
      f->skipped++;
      continue;
    }
    g_ptr_array_add(f->paths, g_strdup(e->rel));
    g_array_append_val(f->labels, e->label);
  }
  if (f->paths->len == 0) {
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_TOO_SMALL,
                "%s: no image to encode (%u left out as unreadable)", folder, f->skipped);
    return NULL;
  }
  return g_steal_pointer(&f);
}

void cohort_latent_files_free(CohortLatentFiles *f)
{
  if (!f)
    return;
  g_free(f->folder);
  if (f->paths)
    g_ptr_array_unref(f->paths);
  if (f->labels)
    g_array_unref(f->labels);
  g_strfreev(f->classes);
  g_free(f);
}

gsize cohort_latent_files_len(const CohortLatentFiles *f)
{
  return f->paths->len;
}

int cohort_latent_files_label(const CohortLatentFiles *f, gsize i)
{
  g_return_val_if_fail(i < f->paths->len, -1);
  return g_array_index(f->labels, int, i);
}

const char *cohort_latent_files_path(const CohortLatentFiles *f, gsize i)
{
  g_return_val_if_fail(i < f->paths->len, NULL);
  return f->paths->pdata[i];
}

const char *const *cohort_latent_files_classes(const CohortLatentFiles *f)
{
  return (const char *const *)f->classes;
}

guint cohort_latent_files_skipped(const CohortLatentFiles *f)
{
  return f->skipped;
}

/* The file's bytes, at most COHORT_IMAGE_MAX_BYTES, from a regular file. */
static gboolean read_bytes(const char *path, char **data, gsize *len, GError **error)
{
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
    int e = errno;
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_IO, "%s: cannot read: %s", path,
                S_ISREG(st.st_mode) ? g_strerror(e) : "not a file");
    return FALSE;
  }
  if ((guint64)st.st_size > COHORT_IMAGE_MAX_BYTES) {
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_FORMAT,
                "%s: %" G_GUINT64_FORMAT " bytes; allowed: image files of at most %zu bytes", path,
                (guint64)st.st_size, (size_t)COHORT_IMAGE_MAX_BYTES);
    return FALSE;
  }
  g_autoptr(GError) local = NULL;
  if (!g_file_get_contents(path, data, len, &local)) {
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_IO, "%s: cannot read: %s", path,
                local->message);
    return FALSE;
  }
  return TRUE;
}

gboolean cohort_latent_files_read(const CohortLatentFiles *f, gsize i, guint8 *content,
                                  float *pixels, GError **error)
{
  g_autofree char *path = g_build_filename(f->folder, cohort_latent_files_path(f, i), NULL);
  g_autofree char *data = NULL;
  gsize len = 0;
  if (!read_bytes(path, &data, &len, error))
    return FALSE;
  g_autoptr(GChecksum) sum = g_checksum_new(G_CHECKSUM_SHA256);
  g_checksum_update(sum, (const guchar *)data, (gssize)len);
  gsize dlen = 32;
  g_checksum_get_digest(sum, content, &dlen);
  if (!pixels)
    return TRUE;
  CohortRawImage raw;
  if (!cohort_image_decode(path, (const guint8 *)data, len, f->channels, &raw, error))
    return FALSE;
  gsize n = (gsize)f->channels * f->size * f->size;
  g_autofree guint8 *chw = g_new(guint8, n);
  gboolean fitted = cohort_image_fit(&raw, f->size, f->channels, chw);
  cohort_raw_image_clear(&raw);
  if (!fitted) {
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_FORMAT,
                "%s: out of memory to resize it to %d pixels", path, f->size);
    return FALSE;
  }
  for (gsize k = 0; k < n; k++)
    pixels[k] = (float)chw[k] / 127.5f - 1.0f;
  return TRUE;
}

void cohort_latent_key(const guint8 *content, const char *vae_sha256, int image_size, int channels,
                       gboolean flipped, guint8 *key)
{
  g_autoptr(GChecksum) sum = g_checksum_new(G_CHECKSUM_SHA256);
  g_autofree char *params = g_strdup_printf("%d %d %d", image_size, channels, flipped ? 1 : 0);
  g_checksum_update(sum, (const guchar *)KEY_TAG, sizeof KEY_TAG); /* with its NUL */
  g_checksum_update(sum, content, 32);
  g_checksum_update(sum, (const guchar *)vae_sha256, (gssize)strlen(vae_sha256) + 1);
  g_checksum_update(sum, (const guchar *)params, -1);
  gsize len = COHORT_LATENT_KEY_BYTES;
  g_checksum_get_digest(sum, key, &len);
}

void cohort_latent_hflip(const float *in, int C, int H, int W, float *out)
{
  for (int c = 0; c < C; c++)
    for (int y = 0; y < H; y++)
      for (int x = 0; x < W; x++)
        out[((gsize)c * H + y) * W + x] = in[((gsize)c * H + y) * W + (W - 1 - x)];
}

void cohort_latent_table_free(CohortLatentTable *t)
{
  if (!t)
    return;
  g_free(t->values);
  g_free(t->labels);
  g_strfreev(t->classes);
  g_strfreev(t->paths);
  g_free(t);
}

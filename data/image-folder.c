/* Listing an ImageFolder-layout folder; see image-folder.h for the rules. */
#include "data/image-folder.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "data/dataset.h"
#include "data/fingerprint.h"
#include "data/image-decode.h"
#include "engine/base/fileio.h"
#include "engine/base/json-write.h"

typedef enum { KIND_IGNORED, KIND_FOLDER, KIND_IMAGE, KIND_BAD } Kind;

static const char *const image_exts[] = {".png", ".jpg", ".jpeg"};
/* What torchvision's ImageFolder would also take: named, so that they are not ignored. */
static const char *const other_exts[] = {".gif", ".bmp", ".webp", ".tif", ".tiff",
                                         ".ppm", ".pgm", ".pbm",  ".pnm"};

static const char *find_ext(const char *name, const char *const *exts, guint n)
{
  gsize len = strlen(name);
  for (guint i = 0; i < n; i++) {
    gsize el = strlen(exts[i]);
    if (len > el && g_ascii_strcasecmp(name + len - el, exts[i]) == 0)
      return exts[i];
  }
  return NULL;
}

static gint compare_names(gconstpointer a, gconstpointer b)
{
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The visible names in `dir`, sorted bytewise. */
static GPtrArray *sorted_names(const char *dir, GError **error)
{
  g_autoptr(GError) local = NULL;
  g_autoptr(GDir) d = g_dir_open(dir, 0, &local);
  if (!d) {
    g_autofree char *shown = cohort_utf8_escape(dir);
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_IO, "%s: cannot read folder: %s", shown,
                local->message);
    return NULL;
  }
  GPtrArray *names = g_ptr_array_new_with_free_func(g_free);
  const char *name;
  while ((name = g_dir_read_name(d)))
    if (name[0] != '.')
      g_ptr_array_add(names, g_strdup(name));
  g_ptr_array_sort(names, compare_names);
  return names;
}

/* Fills in how the image cache knows the file: times, device, inode and the sampled content
 * hash; an unreadable file becomes a bad entry. */
static void identify(CohortImageEntry *entry, const char *full, const struct stat *st)
{
  entry->size = st->st_size;
  entry->mtime_ns =
      (gint64)st->st_mtim.tv_sec * G_GINT64_CONSTANT(1000000000) + st->st_mtim.tv_nsec;
  entry->ctime_ns =
      (gint64)st->st_ctim.tv_sec * G_GINT64_CONSTANT(1000000000) + st->st_ctim.tv_nsec;
  entry->device = st->st_dev;
  entry->inode = st->st_ino;
  if (entry->bad)
    return;
  g_autoptr(GError) local = NULL;
  int fd = cohort_file_open_regular(full, COHORT_IMAGE_MAX_BYTES, "one image", NULL, &local);
  if (fd < 0 || !cohort_fingerprint_fd(fd, (gsize)st->st_size, entry->fingerprint))
    entry->bad = cohort_utf8_escape(local ? local->message : full);
  if (fd >= 0)
    close(fd);
}

/* What `name` in `dir` is; for images and bad entries, fills *entry (rel = prefix + name). */
static Kind classify(const char *dir, const char *prefix, const char *name, CohortImageEntry *entry)
{
  g_autofree char *full = g_build_filename(dir, name, NULL);
  /* Messages are UTF-8 whatever the file system holds (\xHH for other bytes). */
  g_autofree char *shown = cohort_utf8_escape(full);
  const char *ext = find_ext(name, image_exts, G_N_ELEMENTS(image_exts));
  const char *other = find_ext(name, other_exts, G_N_ELEMENTS(other_exts));
  struct stat st;
  int rc = stat(full, &st);
  int err = errno;
  memset(entry, 0, sizeof *entry);
  entry->rel = g_strconcat(prefix, name, NULL);
  entry->label = -1;
  if (rc == 0 && S_ISDIR(st.st_mode) && !ext && !other)
    return KIND_FOLDER;
  if (!ext && !other)
    return KIND_IGNORED;
  if (rc != 0)
    entry->bad = g_strdup_printf("%s: cannot read: %s", shown, g_strerror(err));
  else if (S_ISDIR(st.st_mode))
    entry->bad = g_strdup_printf("%s: cannot read: it is a folder, not an image file", shown);
  else if (!S_ISREG(st.st_mode))
    entry->bad = g_strdup_printf("%s: cannot read: it is %s, not a regular file", shown,
                                 cohort_file_kind(st.st_mode));
  else if (other)
    entry->bad = g_strdup_printf("%s: %s files are not read; only PNG and JPEG are (convert it)",
                                 shown, other);
  if (rc == 0)
    identify(entry, full, &st);
  return entry->bad ? KIND_BAD : KIND_IMAGE;
}

static void entry_clear(gpointer p)
{
  CohortImageEntry *e = p;
  g_free(e->rel);
  g_free(e->bad);
}

void cohort_image_listing_clear(CohortImageListing *listing)
{
  g_clear_pointer(&listing->classes, g_ptr_array_unref);
  g_clear_pointer(&listing->entries, g_array_unref);
}

/* Adds the images of one class folder; nested folders are refused. */
static gboolean scan_class(const char *folder, const char *cls, int label, GArray *entries,
                           GError **error)
{
  g_autofree char *dir = g_build_filename(folder, cls, NULL);
  g_autoptr(GPtrArray) names = sorted_names(dir, error);
  if (!names)
    return FALSE;
  g_autofree char *prefix = g_strconcat(cls, "/", NULL);
  guint found = 0;
  for (guint i = 0; i < names->len; i++) {
    CohortImageEntry e;
    Kind kind = classify(dir, prefix, names->pdata[i], &e);
    if (kind == KIND_FOLDER) {
      g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_FORMAT,
                  "%s/%s: a folder inside the class folder \"%s\"; images are read one level "
                  "deep (folder/<class>/<image>): move its images up or remove it",
                  dir, (const char *)names->pdata[i], cls);
      entry_clear(&e);
      return FALSE;
    }
    if (kind == KIND_IGNORED) {
      entry_clear(&e);
      continue;
    }
    e.label = label;
    g_array_append_val(entries, e);
    found++;
  }
  if (found == 0) {
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_TOO_SMALL,
                "%s: class folder without images (.png, .jpg or .jpeg); every class needs at "
                "least one (remove the folder to drop the class)",
                dir);
    return FALSE;
  }
  return TRUE;
}

gboolean cohort_image_listing_scan(const char *folder, CohortImageListing *out, GError **error)
{
  memset(out, 0, sizeof *out);
  if (!g_file_test(folder, G_FILE_TEST_IS_DIR)) {
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_IO,
                g_file_test(folder, G_FILE_TEST_EXISTS)
                    ? "%s: not a folder (images are read from a folder of class folders or of "
                      "images)"
                    : "%s: no such folder",
                folder);
    return FALSE;
  }
  g_autoptr(GPtrArray) names = sorted_names(folder, error);
  if (!names)
    return FALSE;
  out->classes = g_ptr_array_new_with_free_func(g_free);
  out->entries = g_array_new(FALSE, FALSE, sizeof(CohortImageEntry));
  g_array_set_clear_func(out->entries, entry_clear);
  const char *first_top_image = NULL;
  for (guint i = 0; i < names->len; i++) {
    CohortImageEntry e;
    Kind kind = classify(folder, "", names->pdata[i], &e);
    if (kind == KIND_FOLDER)
      g_ptr_array_add(out->classes, g_strdup(names->pdata[i]));
    if (kind == KIND_IMAGE && !first_top_image)
      first_top_image = names->pdata[i];
    if (kind == KIND_IMAGE || kind == KIND_BAD)
      g_array_append_val(out->entries, e);
    else
      entry_clear(&e);
  }

  if (out->classes->len > 0 && first_top_image) {
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_FORMAT,
                "%s: images at the top level (%s) beside class folders (%s, …); put every "
                "image in a class folder, or use a folder without subfolders for a set "
                "without classes",
                folder, first_top_image, (const char *)out->classes->pdata[0]);
    cohort_image_listing_clear(out);
    return FALSE;
  }
  if (out->classes->len == 0 && out->entries->len == 0) {
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_TOO_SMALL,
                "%s: no images (.png, .jpg or .jpeg) and no class folders", folder);
    cohort_image_listing_clear(out);
    return FALSE;
  }
  /* With classes, the top level holds only bad entries (kept: they are reported). */
  for (guint c = 0; c < out->classes->len; c++) {
    if (!scan_class(folder, out->classes->pdata[c], (int)c, out->entries, error)) {
      cohort_image_listing_clear(out);
      return FALSE;
    }
  }
  return TRUE;
}

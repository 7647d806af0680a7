/* Finding and identifying data files; see file-list.h. */
#include "data/file-list.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <string.h>
#include <unistd.h>
#include <glib/gstdio.h>

#include "data/dataset.h"
#include "data/fingerprint.h"
#include "engine/base/fileio.h"

/* What a file that is not a regular file is, for messages. */
static gboolean not_regular(GError **error, const char *path, mode_t mode)
{
  g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_IO,
              "%s: is %s; allowed: a regular file, or a folder of regular files", path,
              cohort_file_kind(mode));
  return FALSE;
}

GMappedFile *cohort_map_regular_file(const char *path, struct stat *st, GError **error)
{
  g_autoptr(GError) local = NULL;
  int fd = cohort_file_open_regular(path, COHORT_FILE_ANY_SIZE, NULL, st, &local);
  if (fd < 0) {
    g_set_error_literal(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_IO, local->message);
    return NULL;
  }
  GMappedFile *map = g_mapped_file_new_from_fd(fd, FALSE, &local);
  close(fd);
  if (!map)
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_IO, "%s: cannot read: %s", path,
                local->message);
  return map;
}

static gint compare_names(gconstpointer a, gconstpointer b)
{
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static gboolean has_suffix(const char *name, const char *const *suffixes)
{
  for (guint i = 0; suffixes[i]; i++)
    if (g_str_has_suffix(name, suffixes[i]))
      return TRUE;
  return FALSE;
}

/* The files of `dir` that end in one of `suffixes`, sorted by name. */
static GPtrArray *list_folder(const char *dir, const char *const *suffixes, GError **error)
{
  g_autoptr(GError) local = NULL;
  g_autoptr(GDir) d = g_dir_open(dir, 0, &local);
  if (!d) {
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_IO, "%s: cannot read folder: %s", dir,
                local->message);
    return NULL;
  }
  GPtrArray *names = g_ptr_array_new_with_free_func(g_free);
  const char *name;
  while ((name = g_dir_read_name(d))) {
    if (!has_suffix(name, suffixes) || name[0] == '.')
      continue;
    g_autofree char *full = g_build_filename(dir, name, NULL);
    GStatBuf st;
    if (g_stat(full, &st) != 0) {
      int e = errno;
      g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_IO, "%s: cannot read: %s", full,
                  g_strerror(e));
      g_ptr_array_unref(names);
      return NULL;
    }
    /* Folders are not searched; anything else that is not a regular file is an error, not a
     * silent gap in the data. */
    if (S_ISDIR(st.st_mode))
      continue;
    if (!S_ISREG(st.st_mode)) {
      not_regular(error, full, st.st_mode);
      g_ptr_array_unref(names);
      return NULL;
    }
    g_ptr_array_add(names, g_steal_pointer(&full));
  }
  g_ptr_array_sort(names, compare_names);
  if (names->len == 0) {
    g_autofree char *which = g_strjoinv(" or ", (char **)suffixes);
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_IO, "%s: folder has no %s files", dir,
                which);
    g_ptr_array_unref(names);
    return NULL;
  }
  return names;
}

static gboolean has_glob_chars(const char *path)
{
  return strpbrk(path, "*?[") != NULL;
}

/* The regular files a pattern such as "data/fineweb_train_*.bin" matches, sorted by name (as
 * a folder's are); folders it matches are passed over, like a folder's sub-folders. */
static GPtrArray *list_glob(const char *pattern, GError **error)
{
  glob_t g = {0};
  int rc = glob(pattern, GLOB_ERR, NULL, &g);
  if (rc != 0 && rc != GLOB_NOMATCH) {
    globfree(&g);
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_IO,
                "%s: cannot read the folders this pattern looks in (%s)", pattern,
                rc == GLOB_NOSPACE ? "out of memory" : "a folder is not readable");
    return NULL;
  }
  GPtrArray *names = g_ptr_array_new_with_free_func(g_free);
  for (size_t i = 0; rc == 0 && i < g.gl_pathc; i++) {
    GStatBuf st;
    const char *full = g.gl_pathv[i];
    if (g_stat(full, &st) != 0) {
      int e = errno;
      g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_IO, "%s: cannot read: %s", full,
                  g_strerror(e));
      goto fail;
    }
    if (S_ISDIR(st.st_mode))
      continue;
    if (!S_ISREG(st.st_mode)) {
      not_regular(error, full, st.st_mode);
      goto fail;
    }
    g_ptr_array_add(names, g_strdup(full));
  }
  globfree(&g);
  g_ptr_array_sort(names, compare_names);
  if (names->len == 0) {
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_IO, "%s: no file matches this pattern",
                pattern);
    g_ptr_array_unref(names);
    return NULL;
  }
  return names;
fail:
  globfree(&g);
  g_ptr_array_unref(names);
  return NULL;
}

GPtrArray *cohort_list_data_files(const char *path, const char *const *suffixes, GError **error)
{
  GStatBuf top;
  if (g_stat(path, &top) != 0) {
    int e = errno;
    if (e == ENOENT && has_glob_chars(path))
      return list_glob(path, error);
    if (e == ENOENT)
      g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_IO, "%s: no such file or folder",
                  path);
    else
      g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_IO, "%s: cannot read: %s", path,
                  g_strerror(e));
    return NULL;
  }
  if (S_ISDIR(top.st_mode))
    return list_folder(path, suffixes, error);
  if (!S_ISREG(top.st_mode)) {
    not_regular(error, path, top.st_mode);
    return NULL;
  }
  GPtrArray *files = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(files, g_strdup(path));
  return files;
}

char *cohort_file_fingerprint(const char *path, const struct stat *st, GMappedFile *map)
{
  char print[COHORT_FINGERPRINT_LEN];
  cohort_fingerprint_bytes((const guint8 *)g_mapped_file_get_contents(map),
                           g_mapped_file_get_length(map), print);
  g_autofree char *abs = g_canonicalize_filename(path, NULL);
  return g_strdup_printf("%s|%" G_GUINT64_FORMAT "|%" G_GUINT64_FORMAT "|%" G_GINT64_FORMAT
                         "|%" G_GINT64_FORMAT ".%09ld|%" G_GINT64_FORMAT ".%09ld|%s",
                         abs, (guint64)st->st_dev, (guint64)st->st_ino, (gint64)st->st_size,
                         (gint64)st->st_mtim.tv_sec, st->st_mtim.tv_nsec,
                         (gint64)st->st_ctim.tv_sec, st->st_ctim.tv_nsec, print);
}

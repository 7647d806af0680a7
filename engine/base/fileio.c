#include "engine/base/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#include <glib/gstdio.h>

gboolean cohort_write_all(int fd, const void *buf, gsize len)
{
  const char *p = buf;
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return FALSE;
    if (n == 0) {
      errno = EIO;
      return FALSE;
    }
    p += n;
    len -= (gsize)n;
  }
  return TRUE;
}

void cohort_fsync_dir(const char *dir)
{
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
}

static gboolean fail(GError **error, const char *path, const char *what, int err)
{
  g_set_error(error, G_FILE_ERROR, g_file_error_from_errno(err), "%s: cannot %s: %s", path, what,
              g_strerror(err));
  return FALSE;
}

gboolean cohort_write_atomic(const char *path, CohortWriteFunc writer, gpointer user_data,
                             GError **error)
{
  g_autofree char *tmp = g_strdup_printf("%s.tmp-XXXXXX", path);
  int fd = g_mkstemp_full(tmp, O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0)
    return fail(error, path, "create a temporary file", errno);
  const char *what = "write";
  gboolean ok = writer(fd, user_data);
  if (ok && fsync(fd) != 0) {
    ok = FALSE;
    what = "sync";
  }
  int e = errno;
  if (close(fd) != 0 && ok) {
    ok = FALSE;
    what = "close";
    e = errno;
  }
  if (ok && g_rename(tmp, path) != 0) {
    ok = FALSE;
    what = "rename into place";
    e = errno;
  }
  if (!ok) {
    g_unlink(tmp);
    return fail(error, path, what, e);
  }
  g_autofree char *dir = g_path_get_dirname(path);
  cohort_fsync_dir(dir);
  return TRUE;
}

typedef struct {
  const void *data;
  gsize len;
} Buffer;

static gboolean write_buffer(int fd, gpointer user_data)
{
  Buffer *b = user_data;
  return cohort_write_all(fd, b->data, b->len);
}

gboolean cohort_write_file_atomic(const char *path, const void *data, gsize len, GError **error)
{
  Buffer b = {data, len};
  return cohort_write_atomic(path, write_buffer, &b, error);
}

void cohort_remove_tree(const char *path)
{
  if (g_file_test(path, G_FILE_TEST_IS_DIR) && !g_file_test(path, G_FILE_TEST_IS_SYMLINK)) {
    g_autoptr(GDir) d = g_dir_open(path, 0, NULL);
    const char *name;
    while (d && (name = g_dir_read_name(d))) {
      g_autofree char *child = g_build_filename(path, name, NULL);
      cohort_remove_tree(child);
    }
    g_rmdir(path);
  } else {
    g_unlink(path);
  }
}

/* "<name>.tmp-" followed by the six characters g_mkstemp puts there. */
static gboolean is_temporary_of(const char *entry, const char *name)
{
  gsize n = strlen(name);
  return strncmp(entry, name, n) == 0 && strncmp(entry + n, ".tmp-", 5) == 0 &&
         strlen(entry + n + 5) == 6;
}

guint cohort_remove_stale_temporaries(const char *dir, const char *const *names)
{
  guint removed = 0;
  g_autoptr(GDir) d = g_dir_open(dir, 0, NULL);
  const char *entry;
  while (d && (entry = g_dir_read_name(d))) {
    for (const char *const *n = names; *n; n++) {
      if (!is_temporary_of(entry, *n))
        continue;
      g_autofree char *path = g_build_filename(dir, entry, NULL);
      if (g_file_test(path, G_FILE_TEST_IS_REGULAR) && g_unlink(path) == 0)
        removed++;
    }
  }
  return removed;
}

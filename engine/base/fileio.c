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
  /* Only a regular file (or a link, which the rename replaces) is ever replaced: renaming
   * over a FIFO or a device node would take its place. */
  struct stat st;
  if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) {
    g_set_error(error, G_FILE_ERROR, S_ISDIR(st.st_mode) ? G_FILE_ERROR_ISDIR : G_FILE_ERROR_NXIO,
                "%s: cannot write: it is %s, not a regular file; allowed: a new file or a "
                "regular file to replace",
                path, cohort_file_kind(st.st_mode));
    return FALSE;
  }
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

const char *cohort_file_kind(mode_t mode)
{
  if (S_ISREG(mode))
    return "a regular file";
  if (S_ISDIR(mode))
    return "a folder";
  if (S_ISFIFO(mode))
    return "a FIFO (named pipe)";
  if (S_ISCHR(mode) || S_ISBLK(mode))
    return "a device";
  if (S_ISSOCK(mode))
    return "a socket";
  return "not a regular file";
}

static char *size_text(guint64 bytes)
{
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0)
    return g_strdup_printf("%" G_GUINT64_FORMAT " MiB", bytes >> 20);
  return g_strdup_printf("%" G_GUINT64_FORMAT " bytes", bytes);
}

static void too_large(GError **error, const char *path, guint64 size, guint64 max_bytes,
                      const char *what)
{
  g_autofree char *limit = size_text(max_bytes);
  g_set_error(error, G_FILE_ERROR, G_FILE_ERROR_INVAL,
              "%s: cannot read: it is %" G_GUINT64_FORMAT " bytes, more than the %s allowed for "
              "%s",
              path, size, limit, what ? what : "this file");
}

int cohort_file_open_regular(const char *path, guint64 max_bytes, const char *what,
                             struct stat *st_out, GError **error)
{
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    g_set_error(error, G_FILE_ERROR, g_file_error_from_errno(e), "%s: cannot read: %s", path,
                g_strerror(e));
    return -1;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    g_set_error(error, G_FILE_ERROR, g_file_error_from_errno(e), "%s: cannot read: %s", path,
                g_strerror(e));
    return -1;
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    g_set_error(error, G_FILE_ERROR, S_ISDIR(st.st_mode) ? G_FILE_ERROR_ISDIR : G_FILE_ERROR_NXIO,
                "%s: cannot read: it is %s, not a regular file", path,
                cohort_file_kind(st.st_mode));
    return -1;
  }
  if ((guint64)st.st_size > max_bytes) {
    close(fd);
    too_large(error, path, (guint64)st.st_size, max_bytes, what);
    return -1;
  }
  /* Reads of a regular file never block; clear the flag so nothing downstream is surprised. */
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  if (st_out)
    *st_out = st;
  return fd;
}

char *cohort_file_read_regular(const char *path, gsize max_bytes, const char *what, gsize *len,
                               GError **error)
{
  struct stat st;
  int fd = cohort_file_open_regular(path, max_bytes, what, &st, error);
  if (fd < 0)
    return NULL;
  /* st_size is a hint (files under /proc say 0): read until the end, within the limit. */
  gsize cap = MIN((gsize)st.st_size, max_bytes) + 1, done = 0;
  char *buf = g_try_malloc(cap + 1);
  if (!buf) {
    close(fd);
    g_set_error(error, G_FILE_ERROR, G_FILE_ERROR_NOMEM,
                "%s: cannot read: out of memory for its %" G_GSIZE_FORMAT " bytes", path, cap);
    return NULL;
  }
  for (;;) {
    if (done == cap) {
      if (cap > max_bytes) {
        close(fd);
        g_free(buf);
        too_large(error, path, done, max_bytes, what);
        return NULL;
      }
      cap = MIN(cap * 2, max_bytes + 1);
      char *bigger = g_try_realloc(buf, cap + 1);
      if (!bigger) {
        close(fd);
        g_free(buf);
        g_set_error(error, G_FILE_ERROR, G_FILE_ERROR_NOMEM, "%s: cannot read: out of memory",
                    path);
        return NULL;
      }
      buf = bigger;
    }
    ssize_t n = read(fd, buf + done, cap - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      int e = errno;
      close(fd);
      g_free(buf);
      g_set_error(error, G_FILE_ERROR, g_file_error_from_errno(e), "%s: cannot read: %s", path,
                  g_strerror(e));
      return NULL;
    }
    if (n == 0)
      break;
    done += (gsize)n;
  }
  close(fd);
  if (done > max_bytes) {
    g_free(buf);
    too_large(error, path, done, max_bytes, what);
    return NULL;
  }
  buf[done] = '\0';
  if (len)
    *len = done;
  return buf;
}

GMappedFile *cohort_file_map_regular(const char *path, guint64 max_bytes, const char *what,
                                     GError **error)
{
  int fd = cohort_file_open_regular(path, max_bytes, what, NULL, error);
  if (fd < 0)
    return NULL;
  g_autoptr(GError) local = NULL;
  GMappedFile *map = g_mapped_file_new_from_fd(fd, FALSE, &local);
  close(fd);
  if (!map)
    g_set_error(error, G_FILE_ERROR, local->code, "%s: cannot read: %s", path, local->message);
  return map;
}

char *cohort_file_sha256(const char *path, GError **error)
{
  int fd = cohort_file_open_regular(path, COHORT_FILE_ANY_SIZE, NULL, NULL, error);
  if (fd < 0)
    return NULL;
  g_autoptr(GChecksum) sum = g_checksum_new(G_CHECKSUM_SHA256);
  g_autofree guchar *buf = g_malloc(1 << 20);
  for (;;) {
    ssize_t n = read(fd, buf, 1 << 20);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      int e = errno;
      close(fd);
      g_set_error(error, G_FILE_ERROR, g_file_error_from_errno(e), "%s: cannot read: %s", path,
                  g_strerror(e));
      return NULL;
    }
    if (n == 0)
      break;
    g_checksum_update(sum, buf, n);
  }
  close(fd);
  return g_strdup(g_checksum_get_string(sum));
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

/* A fresh job secret from the kernel's random source. */
#include "engine/base/secret.h"

#include <errno.h>
#include <fcntl.h>
#include <gio/gio.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

char *cohort_secret_new(GError **error)
{
  guint8 raw[16];
  gsize got = 0;
  while (got < sizeof raw) {
    ssize_t n = getrandom(raw + got, sizeof raw - got, 0);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    got += (gsize)n;
  }
  if (got < sizeof raw) {
    /* A kernel without getrandom (before 3.17): its device gives the same bytes. */
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    got = fd >= 0 && read(fd, raw, sizeof raw) == (ssize_t)sizeof raw ? sizeof raw : 0;
    if (fd >= 0)
      close(fd);
  }
  if (got < sizeof raw) {
    int e = errno;
    g_set_error(error, G_IO_ERROR, g_io_error_from_errno(e),
                "cannot make a job secret: the kernel's random source is not available (%s)",
                g_strerror(e));
    return NULL;
  }
  char *hex = g_malloc(2 * sizeof raw + 1);
  for (gsize i = 0; i < sizeof raw; i++)
    g_snprintf(hex + 2 * i, 3, "%02x", raw[i]);
  explicit_bzero(raw, sizeof raw);
  return hex;
}

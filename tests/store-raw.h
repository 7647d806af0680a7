/* Speaking to the rendezvous store at the socket level, and counting what a process holds:
 * for the tests of the store's defences (header-only, tests only). */
#pragma once

#include <arpa/inet.h>
#include <errno.h>
#include <glib.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* A connected TCP socket to addr:port (numeric IPv4 or IPv6), or -1 with errno set. */
static inline int raw_open(const char *addr, int port)
{
  struct sockaddr_storage ss = {0};
  socklen_t len;
  int family = strchr(addr, ':') ? AF_INET6 : AF_INET;
  if (family == AF_INET6) {
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
    a->sin6_family = AF_INET6;
    a->sin6_port = htons((guint16)port);
    g_assert_cmpint(inet_pton(AF_INET6, addr, &a->sin6_addr), ==, 1);
    len = sizeof *a;
  } else {
    struct sockaddr_in *a = (struct sockaddr_in *)&ss;
    a->sin_family = AF_INET;
    a->sin_port = htons((guint16)port);
    g_assert_cmpint(inet_pton(AF_INET, addr, &a->sin_addr), ==, 1);
    len = sizeof *a;
  }
  int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  g_assert_cmpint(fd, >=, 0);
  if (connect(fd, (struct sockaddr *)&ss, len) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

/* TRUE when the server closes `fd` (end of file or reset) within `ms`; whatever it sends
 * first (a refusal) is read and dropped. */
static inline gboolean closed_within(int fd, int ms)
{
  gint64 deadline = g_get_monotonic_time() + (gint64)ms * 1000;
  for (;;) {
    int left = (int)MAX((deadline - g_get_monotonic_time()) / 1000, 0);
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, left) <= 0)
      return FALSE;
    char buf[4096];
    if (recv(fd, buf, sizeof buf, MSG_DONTWAIT) <= 0)
      return TRUE;
  }
}

/* Entries of a directory such as /proc/PID/fd. */
static inline guint count_entries(const char *dir)
{
  g_autoptr(GDir) d = g_dir_open(dir, 0, NULL);
  g_assert_nonnull(d);
  guint n = 0;
  while (g_dir_read_name(d) != NULL)
    n++;
  return n;
}

/* Lines of a file such as /proc/PID/maps. */
static inline guint count_lines(const char *path)
{
  g_autofree char *text = NULL;
  g_assert_true(g_file_get_contents(path, &text, NULL, NULL));
  guint n = 0;
  for (const char *p = text; *p; p++)
    n += *p == '\n';
  return n;
}

/* Sends a hello with `token` on `fd`; returns the status (0 accepted, 2 refused) and, when
 * refused, the reason in *reason (may be NULL). -1 when the connection ended first. */
static inline int raw_hello(int fd, const char *token, char **reason)
{
  guint32 tlen = GUINT32_TO_BE((guint32)strlen(token));
  guint8 hello[12] = {'C', 'H', 'S', 'T', 0, 0, 0, 2};
  memcpy(hello + 8, &tlen, 4);
  if (write(fd, hello, 12) != 12 || write(fd, token, strlen(token)) != (gssize)strlen(token))
    return -1;
  guint8 resp[16];
  if (recv(fd, resp, 16, MSG_WAITALL) != 16)
    return -1;
  guint64 len;
  memcpy(&len, resp + 8, 8);
  len = GUINT64_FROM_BE(len);
  g_assert_cmpuint(len, <, 4096);
  char *msg = g_malloc0(len + 1);
  if (len > 0 && recv(fd, msg, len, MSG_WAITALL) != (gssize)len) {
    g_free(msg);
    return -1;
  }
  if (reason != NULL)
    *reason = msg;
  else
    g_free(msg);
  return resp[0];
}

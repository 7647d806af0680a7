/* Where the rendezvous store listens: binding, the bind address a job needs, the port the
 * launcher holds for a job, and free ports. */
#include "engine/distributed/store-listen.h"
#include "engine/distributed/store.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Binds and listens; returns the fd or -1 with errno set. A wildcard IPv6 socket also takes
 * IPv4 (dual stack); a specific IPv6 address takes only itself. */
static int listen_on(const struct sockaddr *addr, socklen_t len, gboolean dual_stack)
{
  int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0)
    return -1;
  int one = 1, v6only = dual_stack ? 0 : 1;
  /* SO_REUSEADDR lets a restarted rank 0 bind while old connections sit in TIME_WAIT; Linux
   * still refuses a second listener. */
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (addr->sa_family == AF_INET6)
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof v6only);
  if (bind(fd, addr, len) < 0 || listen(fd, 1024) < 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

/* Listens on every address (dual-stack IPv6, else IPv4); *numeric gets "::" or "0.0.0.0". */
static int listen_any(int port, const char **numeric)
{
  struct sockaddr_in6 a6 = {0};
  a6.sin6_family = AF_INET6;
  a6.sin6_addr = in6addr_any;
  a6.sin6_port = htons((guint16)port);
  int fd = listen_on((struct sockaddr *)&a6, sizeof a6, TRUE);
  *numeric = "::";
  if (fd >= 0 || errno == EADDRINUSE || errno == EACCES)
    return fd;
  struct sockaddr_in a4 = {0};
  a4.sin_family = AF_INET;
  a4.sin_addr.s_addr = htonl(INADDR_ANY);
  a4.sin_port = htons((guint16)port);
  *numeric = "0.0.0.0";
  return listen_on((struct sockaddr *)&a4, sizeof a4, FALSE);
}

static int port_of(int fd)
{
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
    return 0;
  return ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                        : ((struct sockaddr_in *)&ss)->sin_port);
}

int cohort_store_find_free_port(int near)
{
  const char *numeric;
  if (near > 0) {
    for (int p = near + 1; p <= 65535 && p <= near + 200; p++) {
      int fd = listen_any(p, &numeric);
      if (fd >= 0) {
        close(fd);
        return p;
      }
    }
  }
  int fd = listen_any(0, &numeric);
  if (fd < 0)
    return 0;
  int port = port_of(fd);
  close(fd);
  return port;
}

gboolean store_address_is_loopback(const char *numeric)
{
  struct in_addr a4;
  struct in6_addr a6;
  if (inet_pton(AF_INET, numeric, &a4) == 1)
    return (ntohl(a4.s_addr) >> 24) == 127;
  if (inet_pton(AF_INET6, numeric, &a6) == 1)
    return IN6_IS_ADDR_LOOPBACK(&a6) || (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
  return FALSE;
}

static gboolean is_numeric_address(const char *host)
{
  struct in_addr a4;
  struct in6_addr a6;
  return inet_pton(AF_INET, host, &a4) == 1 || inet_pton(AF_INET6, host, &a6) == 1;
}

/* TRUE when the numeric address is one of this host's interfaces (any loopback counts). */
static gboolean is_local_address(const char *numeric)
{
  if (store_address_is_loopback(numeric))
    return TRUE;
  struct in_addr a4;
  struct in6_addr a6;
  gboolean v4 = inet_pton(AF_INET, numeric, &a4) == 1;
  if (!v4 && inet_pton(AF_INET6, numeric, &a6) != 1)
    return FALSE;
  struct ifaddrs *list = NULL;
  if (getifaddrs(&list) != 0)
    return FALSE;
  gboolean found = FALSE;
  for (struct ifaddrs *i = list; i != NULL && !found; i = i->ifa_next) {
    if (i->ifa_addr == NULL)
      continue;
    if (v4 && i->ifa_addr->sa_family == AF_INET)
      found = ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr == a4.s_addr;
    else if (!v4 && i->ifa_addr->sa_family == AF_INET6)
      found = memcmp(&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr, &a6, sizeof a6) == 0;
  }
  freeifaddrs(list);
  return found;
}

const char *cohort_store_bind_address(const char *master_addr, gboolean single_node)
{
  if (master_addr == NULL || master_addr[0] == '\0')
    return NULL;
  if (single_node)
    return master_addr;
  /* Several nodes: a numeric master that is not on an interface of this host (a public
   * address behind NAT) is reached through another one: listen on every address. */
  if (is_numeric_address(master_addr) && is_local_address(master_addr))
    return master_addr;
  return NULL;
}

static void close_all(GArray *fds, guint from)
{
  for (guint i = from; i < fds->len; i++)
    close(g_array_index(fds, int, i));
  g_array_set_size(fds, from);
}

/* Binds every distinct address of `res` on `port` (0 = the first bind picks it). Returns the
 * port, or 0 with errno set (EADDRNOTAVAIL when no address is this host's). */
static int listen_resolved(const struct addrinfo *res, int port, GArray *fds, GPtrArray *addrs)
{
  guint fds0 = fds->len, addrs0 = addrs->len;
  int err = EADDRNOTAVAIL;
  for (const struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
    char host[NI_MAXHOST];
    if (getnameinfo(ai->ai_addr, ai->ai_addrlen, host, sizeof host, NULL, 0, NI_NUMERICHOST))
      continue;
    gboolean seen = FALSE;
    for (guint i = addrs0; i < addrs->len && !seen; i++)
      seen = strcmp(addrs->pdata[i], host) == 0;
    if (seen)
      continue;
    struct sockaddr_storage sa;
    memcpy(&sa, ai->ai_addr, ai->ai_addrlen);
    if (sa.ss_family == AF_INET6)
      ((struct sockaddr_in6 *)&sa)->sin6_port = htons((guint16)port);
    else
      ((struct sockaddr_in *)&sa)->sin_port = htons((guint16)port);
    int fd = listen_on((struct sockaddr *)&sa, ai->ai_addrlen, FALSE);
    if (fd < 0) {
      /* An address that is not this host's (IPv6 switched off, a name with a remote
       * address too) is skipped; any other failure, a taken port first, fails it all. */
      if (errno == EADDRNOTAVAIL || errno == EAFNOSUPPORT)
        continue;
      err = errno;
      close_all(fds, fds0);
      g_ptr_array_set_size(addrs, addrs0);
      errno = err;
      return 0;
    }
    if (port == 0)
      port = port_of(fd);
    g_array_append_val(fds, fd);
    g_ptr_array_add(addrs, g_strdup(host));
  }
  if (fds->len == fds0) {
    errno = err;
    return 0;
  }
  return port;
}

int store_listen(const char *bind_addr, int port, GArray *fds, GPtrArray *addresses, GError **error)
{
  int bound = 0, err = 0;
  if (bind_addr == NULL) {
    const char *numeric;
    int fd = listen_any(port, &numeric);
    err = errno;
    if (fd >= 0) {
      g_array_append_val(fds, fd);
      g_ptr_array_add(addresses, g_strdup(numeric));
      bound = port_of(fd);
    }
  } else {
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int gai = getaddrinfo(bind_addr, NULL, &hints, &res);
    if (gai != 0) {
      g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_FAILED,
                  "cannot host the rendezvous store on \"%s\": %s", bind_addr, gai_strerror(gai));
      return 0;
    }
    /* With port 0 the first address picks the port and the others may find it taken: try
     * again with another. */
    for (int attempt = 0; attempt < 8 && bound == 0; attempt++) {
      bound = listen_resolved(res, port, fds, addresses);
      err = errno;
      if (port != 0 || err != EADDRINUSE)
        break;
    }
    freeaddrinfo(res);
  }
  if (bound > 0)
    return bound;
  if (err == EADDRINUSE) {
    int free_port = cohort_store_find_free_port(port);
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_ADDR_IN_USE,
                "cannot host the rendezvous store on port %d: the port is already in use "
                "(another job, or a process of an earlier run still alive); port %d is free "
                "now: use --master-port %d (master_port in the config)",
                port, free_port, free_port);
  } else if (err == EADDRNOTAVAIL && bind_addr != NULL) {
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_FAILED,
                "cannot host the rendezvous store on \"%s\" port %d: that is not an address of "
                "this host; MASTER_ADDR (master_addr) must name the host of global rank 0",
                bind_addr, port);
  } else {
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_FAILED,
                "cannot host the rendezvous store on port %d: %s", port, g_strerror(err));
  }
  return 0;
}

int cohort_store_hold_port(const char *bind_addr, int port, int *fds, int max, int *n,
                           GError **error)
{
  g_autoptr(GArray) held = g_array_new(FALSE, FALSE, sizeof(int));
  g_autoptr(GPtrArray) addrs = g_ptr_array_new_with_free_func(g_free);
  int bound = store_listen(bind_addr, port, held, addrs, error);
  *n = 0;
  if (bound == 0)
    return 0;
  if ((int)held->len > max) {
    close_all(held, 0);
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_FAILED,
                "cannot hold the rendezvous store's port %d: it needs %u sockets, more than %d",
                bound, held->len, max);
    return 0;
  }
  for (guint i = 0; i < held->len; i++)
    fds[(*n)++] = g_array_index(held, int, i);
  return bound;
}

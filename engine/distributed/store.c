/* The rendezvous store: server (a thread per connection) and client (one connection).
 *
 * Wire format, integers big-endian:
 *   hello    client → "CHST" u32 version u32 token_len token
 *   request  client → u8 op, 3 × u8 0, u32 key_len, u64 value_len, key, value
 *   response server → u8 status, 3 × u8 0, u32 0, u64 length, payload
 * status 0 = ok (payload: the value), 1 = no such key, 2 = refused (payload: the reason; the
 * server closes the connection after it). */
#include "engine/distributed/store.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define STORE_MAGIC   "CHST"
#define STORE_VERSION 1u

enum { OP_SET = 1, OP_GET = 2, OP_ADD = 3, OP_CHECK = 4, OP_DELETE = 5 };
enum { ST_OK = 0, ST_MISSING = 1, ST_REFUSED = 2 };

/* ---- socket helpers ---- */

static gboolean write_all(int fd, const void *buf, gsize len)
{
  const char *p = buf;
  while (len > 0) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return FALSE;
    p += n;
    len -= (gsize)n;
  }
  return TRUE;
}

static gboolean read_all(int fd, void *buf, gsize len)
{
  char *p = buf;
  while (len > 0) {
    ssize_t n = recv(fd, p, len, 0);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return FALSE;
    p += n;
    len -= (gsize)n;
  }
  return TRUE;
}

static void put_u32(guint8 *p, guint32 v)
{
  v = GUINT32_TO_BE(v);
  memcpy(p, &v, 4);
}

static void put_u64(guint8 *p, guint64 v)
{
  v = GUINT64_TO_BE(v);
  memcpy(p, &v, 8);
}

static guint32 get_u32(const guint8 *p)
{
  guint32 v;
  memcpy(&v, p, 4);
  return GUINT32_FROM_BE(v);
}

static guint64 get_u64(const guint8 *p)
{
  guint64 v;
  memcpy(&v, p, 8);
  return GUINT64_FROM_BE(v);
}

static gboolean send_frame(int fd, guint8 code, guint32 key_len, guint64 len, const void *a,
                           gsize a_len, const void *b, gsize b_len)
{
  guint8 hdr[16] = {code, 0, 0, 0};
  put_u32(hdr + 4, key_len);
  put_u64(hdr + 8, len);
  return write_all(fd, hdr, sizeof hdr) && (a_len == 0 || write_all(fd, a, a_len)) &&
         (b_len == 0 || write_all(fd, b, b_len));
}

static gboolean send_response(int fd, guint8 status, const void *payload, gsize len)
{
  return send_frame(fd, status, 0, len, payload, len, NULL, 0);
}

static void set_nodelay(int fd)
{
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* ---- server ---- */

typedef struct {
  CohortStoreServer *server;
  int fd;
  GThread *thread;
} Conn;

struct _CohortStoreServer {
  int listen_fd;
  int wake[2];
  int port;
  char *token;
  GThread *accept_thread;
  GMutex lock;      /* guards kv, conns, stopping */
  GHashTable *kv;   /* char* → GBytes* */
  GPtrArray *conns; /* Conn* */
  gboolean stopping;
};

static GBytes *server_lookup(CohortStoreServer *s, const char *key)
{
  g_mutex_lock(&s->lock);
  GBytes *v = g_hash_table_lookup(s->kv, key);
  if (v != NULL)
    g_bytes_ref(v);
  g_mutex_unlock(&s->lock);
  return v;
}

static gboolean refuse(int fd, const char *fmt, ...) G_GNUC_PRINTF(2, 3);
static gboolean refuse(int fd, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  g_autofree char *msg = g_strdup_vprintf(fmt, ap);
  va_end(ap);
  send_response(fd, ST_REFUSED, msg, strlen(msg));
  return FALSE;
}

/* Handles one request; FALSE ends the connection. */
static gboolean serve_request(CohortStoreServer *s, int fd)
{
  guint8 hdr[16];
  if (!read_all(fd, hdr, sizeof hdr))
    return FALSE;
  guint8 op = hdr[0];
  guint32 key_len = get_u32(hdr + 4);
  guint64 val_len = get_u64(hdr + 8);
  if (op < OP_SET || op > OP_DELETE)
    return refuse(fd, "unknown store request %u", op);
  if (key_len == 0 || key_len > COHORT_STORE_MAX_KEY)
    return refuse(fd, "a key of %u bytes is refused: keys are 1 to %d bytes", key_len,
                  COHORT_STORE_MAX_KEY);
  if (val_len > COHORT_STORE_MAX_VALUE)
    return refuse(fd,
                  "a value of %" G_GUINT64_FORMAT " bytes is refused: values are at most %u "
                  "bytes (64 MiB)",
                  val_len, COHORT_STORE_MAX_VALUE);
  if (op != OP_SET && op != OP_ADD && val_len != 0)
    return refuse(fd, "store request %u carries no value", op);
  if (op == OP_ADD && val_len > 32)
    return refuse(fd, "an add delta of %" G_GUINT64_FORMAT " bytes is refused", val_len);
  g_autofree char *key = g_malloc(key_len + 1);
  if (!read_all(fd, key, key_len))
    return FALSE;
  key[key_len] = '\0';
  g_autofree guint8 *val = g_malloc(val_len + 1);
  if (val_len > 0 && !read_all(fd, val, val_len))
    return FALSE;
  val[val_len] = '\0';

  switch (op) {
  case OP_SET: {
    GBytes *b = g_bytes_new_take(g_steal_pointer(&val), val_len);
    g_mutex_lock(&s->lock);
    g_hash_table_replace(s->kv, g_strdup(key), b);
    g_mutex_unlock(&s->lock);
    return send_response(fd, ST_OK, NULL, 0);
  }
  case OP_GET: {
    g_autoptr(GBytes) b = server_lookup(s, key);
    if (b == NULL)
      return send_response(fd, ST_MISSING, NULL, 0);
    gsize len;
    const void *data = g_bytes_get_data(b, &len);
    return send_response(fd, ST_OK, data, len);
  }
  case OP_CHECK: {
    g_autoptr(GBytes) b = server_lookup(s, key);
    return send_response(fd, b != NULL ? ST_OK : ST_MISSING, NULL, 0);
  }
  case OP_DELETE:
    g_mutex_lock(&s->lock);
    g_hash_table_remove(s->kv, key);
    g_mutex_unlock(&s->lock);
    return send_response(fd, ST_OK, NULL, 0);
  case OP_ADD: {
    char *end = NULL;
    gint64 delta = g_ascii_strtoll((char *)val, &end, 10);
    if (end == (char *)val || *end != '\0')
      return refuse(fd, "add delta \"%s\" is not an integer", (char *)val);
    g_mutex_lock(&s->lock);
    GBytes *old = g_hash_table_lookup(s->kv, key);
    gint64 cur = 0;
    if (old != NULL) {
      g_autofree char *text = g_strndup(g_bytes_get_data(old, NULL), g_bytes_get_size(old));
      cur = g_ascii_strtoll(text, &end, 10);
      if (end == text || *end != '\0') {
        g_mutex_unlock(&s->lock);
        return refuse(fd, "add to key \"%s\", whose value is not an integer", key);
      }
    }
    cur += delta;
    char *text = g_strdup_printf("%" G_GINT64_FORMAT, cur);
    g_hash_table_replace(s->kv, g_strdup(key), g_bytes_new_take(text, strlen(text)));
    g_mutex_unlock(&s->lock);
    char out[32];
    int n = g_snprintf(out, sizeof out, "%" G_GINT64_FORMAT, cur);
    return send_response(fd, ST_OK, out, (gsize)n);
  }
  }
  return FALSE;
}

static gpointer conn_main(gpointer data)
{
  Conn *c = data;
  CohortStoreServer *s = c->server;
  guint8 hello[12];
  gboolean ok = read_all(c->fd, hello, sizeof hello) && memcmp(hello, STORE_MAGIC, 4) == 0;
  if (ok && get_u32(hello + 4) != STORE_VERSION)
    ok = refuse(c->fd, "store protocol version %u is not %u (a different Cohort build?)",
                get_u32(hello + 4), STORE_VERSION);
  if (ok) {
    guint32 tlen = get_u32(hello + 8);
    char token[COHORT_STORE_MAX_TOKEN + 1];
    if (tlen > COHORT_STORE_MAX_TOKEN)
      ok = refuse(c->fd, "a job token of %u bytes is refused (at most %d)", tlen,
                  COHORT_STORE_MAX_TOKEN);
    else if (!read_all(c->fd, token, tlen))
      ok = FALSE;
    else {
      token[tlen] = '\0';
      if (strcmp(token, s->token) != 0)
        ok = refuse(c->fd, "job token differs: this store serves another job (or an earlier "
                           "attempt of this one)");
      else
        ok = send_response(c->fd, ST_OK, NULL, 0);
    }
  }
  while (ok)
    ok = serve_request(s, c->fd);
  g_mutex_lock(&s->lock);
  close(c->fd);
  c->fd = -1;
  g_mutex_unlock(&s->lock);
  return NULL;
}

static gpointer accept_main(gpointer data)
{
  CohortStoreServer *s = data;
  for (;;) {
    struct pollfd p[2] = {{s->listen_fd, POLLIN, 0}, {s->wake[0], POLLIN, 0}};
    int r = poll(p, 2, -1);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0 || (p[1].revents & POLLIN))
      break;
    int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0)
      continue;
    set_nodelay(fd);
    g_mutex_lock(&s->lock);
    if (s->stopping) {
      g_mutex_unlock(&s->lock);
      close(fd);
      break;
    }
    Conn *c = g_new0(Conn, 1);
    c->server = s;
    c->fd = fd;
    g_ptr_array_add(s->conns, c);
    c->thread = g_thread_new("cohort-store-conn", conn_main, c);
    g_mutex_unlock(&s->lock);
  }
  return NULL;
}

/* Binds and listens; returns the fd or -1 with errno set. */
static int listen_on(const struct sockaddr *addr, socklen_t len, int family)
{
  int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  int one = 1, zero = 0;
  /* SO_REUSEADDR lets a restarted rank 0 bind while old connections sit in TIME_WAIT; Linux
   * still refuses a second listener. */
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (family == AF_INET6)
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
  if (bind(fd, addr, len) < 0 || listen(fd, 1024) < 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

/* Listens on every address (dual-stack IPv6, else IPv4). */
static int listen_any(int port)
{
  struct sockaddr_in6 a6 = {0};
  a6.sin6_family = AF_INET6;
  a6.sin6_addr = in6addr_any;
  a6.sin6_port = htons((guint16)port);
  int fd = listen_on((struct sockaddr *)&a6, sizeof a6, AF_INET6);
  if (fd >= 0 || errno == EADDRINUSE || errno == EACCES)
    return fd;
  struct sockaddr_in a4 = {0};
  a4.sin_family = AF_INET;
  a4.sin_addr.s_addr = htonl(INADDR_ANY);
  a4.sin_port = htons((guint16)port);
  return listen_on((struct sockaddr *)&a4, sizeof a4, AF_INET);
}

int cohort_store_find_free_port(int near)
{
  if (near > 0) {
    for (int p = near + 1; p <= 65535 && p <= near + 200; p++) {
      int fd = listen_any(p);
      if (fd >= 0) {
        close(fd);
        return p;
      }
    }
  }
  int fd = listen_any(0);
  if (fd < 0)
    return 0;
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  int port = 0;
  if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0)
    port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                          : ((struct sockaddr_in *)&ss)->sin_port);
  close(fd);
  return port;
}

CohortStoreServer *cohort_store_server_new(const char *bind_addr, int port, const char *token,
                                           GError **error)
{
  if (port < 0 || port > 65535) {
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_INVALID,
                "store port %d is out of range; expected 0 to 65535", port);
    return NULL;
  }
  if (strlen(token) > COHORT_STORE_MAX_TOKEN) {
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_INVALID,
                "job token of %zu bytes is too long (at most %d)", strlen(token),
                COHORT_STORE_MAX_TOKEN);
    return NULL;
  }
  int fd = -1, err = 0;
  if (bind_addr == NULL) {
    fd = listen_any(port);
    err = errno;
  } else {
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    char port_s[16];
    g_snprintf(port_s, sizeof port_s, "%d", port);
    int gai = getaddrinfo(bind_addr, port_s, &hints, &res);
    if (gai != 0) {
      g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_FAILED,
                  "cannot host the store on %s: %s", bind_addr, gai_strerror(gai));
      return NULL;
    }
    for (struct addrinfo *ai = res; ai != NULL && fd < 0; ai = ai->ai_next) {
      fd = listen_on(ai->ai_addr, ai->ai_addrlen, ai->ai_family);
      err = errno;
    }
    freeaddrinfo(res);
  }
  if (fd < 0) {
    if (err == EADDRINUSE) {
      int free_port = cohort_store_find_free_port(port);
      g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_ADDR_IN_USE,
                  "cannot host the rendezvous store on port %d: the port is already in use "
                  "(another job, or a process of an earlier run still alive); port %d is free "
                  "now: use --master-port %d (master_port in the config)",
                  port, free_port, free_port);
    } else {
      g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_FAILED,
                  "cannot host the rendezvous store on port %d: %s", port, g_strerror(err));
    }
    return NULL;
  }
  CohortStoreServer *s = g_new0(CohortStoreServer, 1);
  s->listen_fd = fd;
  if (pipe2(s->wake, O_CLOEXEC) < 0) {
    int e = errno;
    close(fd);
    g_free(s);
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_FAILED, "pipe: %s", g_strerror(e));
    return NULL;
  }
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  getsockname(fd, (struct sockaddr *)&ss, &len);
  s->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                           : ((struct sockaddr_in *)&ss)->sin_port);
  s->token = g_strdup(token);
  g_mutex_init(&s->lock);
  s->kv = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, (GDestroyNotify)g_bytes_unref);
  s->conns = g_ptr_array_new();
  s->accept_thread = g_thread_new("cohort-store", accept_main, s);
  return s;
}

int cohort_store_server_port(CohortStoreServer *server)
{
  return server->port;
}

void cohort_store_server_free(CohortStoreServer *s)
{
  if (s == NULL)
    return;
  g_mutex_lock(&s->lock);
  s->stopping = TRUE;
  g_mutex_unlock(&s->lock);
  char b = 1;
  while (write(s->wake[1], &b, 1) < 0 && errno == EINTR)
    ;
  g_thread_join(s->accept_thread);
  /* Wake every connection thread blocked in recv. */
  g_mutex_lock(&s->lock);
  for (guint i = 0; i < s->conns->len; i++) {
    Conn *c = s->conns->pdata[i];
    if (c->fd >= 0)
      shutdown(c->fd, SHUT_RDWR);
  }
  g_mutex_unlock(&s->lock);
  for (guint i = 0; i < s->conns->len; i++) {
    Conn *c = s->conns->pdata[i];
    g_thread_join(c->thread);
    g_free(c);
  }
  g_ptr_array_free(s->conns, TRUE);
  close(s->listen_fd);
  close(s->wake[0]);
  close(s->wake[1]);
  g_hash_table_destroy(s->kv);
  g_mutex_clear(&s->lock);
  g_free(s->token);
  g_free(s);
}

/* ---- client ---- */

struct _CohortStore {
  int fd;
  GMutex lock;
  char *where; /* "host:port" for messages */
  GError *broken;
  CohortStoreServer *server; /* owned when this rank hosts the store */
};

/* Non-blocking connect bounded by `ms`; returns the fd or -1 with errno set. */
static int connect_bounded(const struct addrinfo *ai, int ms)
{
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0)
    return -1;
  if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
    if (errno != EINPROGRESS) {
      int e = errno;
      close(fd);
      errno = e;
      return -1;
    }
    struct pollfd p = {fd, POLLOUT, 0};
    int r = poll(&p, 1, MAX(ms, 1));
    int soerr = 0;
    socklen_t sl = sizeof soerr;
    if (r <= 0) {
      close(fd);
      errno = r == 0 ? ETIMEDOUT : errno;
      return -1;
    }
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
    if (soerr != 0) {
      close(fd);
      errno = soerr;
      return -1;
    }
  }
  int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  set_nodelay(fd);
  return fd;
}

static void set_recv_timeout(int fd, double seconds)
{
  struct timeval tv = {(time_t)seconds, (suseconds_t)((seconds - (time_t)seconds) * 1e6)};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

/* Reads a response; a refusal becomes an error. The payload is returned in *payload. */
static gboolean read_response(int fd, const char *where, guint8 *status, GBytes **payload,
                              GError **error)
{
  guint8 hdr[16];
  if (!read_all(fd, hdr, sizeof hdr)) {
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_PEER,
                "lost the connection to the rendezvous store at %s (did rank 0 exit?)", where);
    return FALSE;
  }
  guint64 len = get_u64(hdr + 8);
  if (len > COHORT_STORE_MAX_VALUE) {
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_PEER,
                "the rendezvous store at %s sent a malformed response", where);
    return FALSE;
  }
  guint8 *data = g_malloc(len + 1);
  if (len > 0 && !read_all(fd, data, len)) {
    g_free(data);
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_PEER,
                "lost the connection to the rendezvous store at %s (did rank 0 exit?)", where);
    return FALSE;
  }
  data[len] = '\0';
  *status = hdr[0];
  if (hdr[0] == ST_REFUSED) {
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_REFUSED,
                "the rendezvous store at %s refused this process: %s", where, (char *)data);
    g_free(data);
    return FALSE;
  }
  if (payload != NULL)
    *payload = g_bytes_new_take(data, len);
  else
    g_free(data);
  return TRUE;
}

CohortStore *cohort_store_connect(const char *host, int port, const char *token, double timeout_s,
                                  GError **error)
{
  if (port <= 0 || port > 65535) {
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_INVALID,
                "store port %d is out of range; expected 1 to 65535", port);
    return NULL;
  }
  gsize tlen = strlen(token);
  if (tlen > COHORT_STORE_MAX_TOKEN) {
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_INVALID,
                "job token of %zu bytes is too long (at most %d)", tlen, COHORT_STORE_MAX_TOKEN);
    return NULL;
  }
  g_autofree char *where = strchr(host, ':') ? g_strdup_printf("[%s]:%d", host, port)
                                             : g_strdup_printf("%s:%d", host, port);
  char port_s[16];
  g_snprintf(port_s, sizeof port_s, "%d", port);
  gint64 deadline = g_get_monotonic_time() + (gint64)(MAX(timeout_s, 0) * G_USEC_PER_SEC);
  g_autofree char *last = g_strdup("no attempt made");
  for (;;) {
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int gai = getaddrinfo(host, port_s, &hints, &res);
    if (gai != 0 && gai != EAI_AGAIN) {
      g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_CONNECT,
                  "cannot resolve the master address \"%s\": %s", host, gai_strerror(gai));
      return NULL;
    }
    if (gai != 0) {
      g_free(last);
      last = g_strdup(gai_strerror(gai));
    }
    for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
      gint64 left_ms = (deadline - g_get_monotonic_time()) / 1000;
      int fd = connect_bounded(ai, (int)CLAMP(left_ms, 100, 5000));
      if (fd < 0) {
        g_free(last);
        last = g_strdup(g_strerror(errno));
        continue;
      }
      freeaddrinfo(res);
      res = NULL;
      /* Hello, then wait for the verdict. */
      set_recv_timeout(fd, MAX(timeout_s, 10.0));
      guint8 hello[12];
      memcpy(hello, STORE_MAGIC, 4);
      put_u32(hello + 4, STORE_VERSION);
      put_u32(hello + 8, (guint32)tlen);
      guint8 status = 0;
      if (!write_all(fd, hello, sizeof hello) || !write_all(fd, token, tlen) ||
          !read_response(fd, where, &status, NULL, error)) {
        close(fd);
        return NULL;
      }
      /* Requests are answered at once; a bound on waiting catches a vanished host. */
      set_recv_timeout(fd, 120.0);
      CohortStore *st = g_new0(CohortStore, 1);
      st->fd = fd;
      g_mutex_init(&st->lock);
      st->where = g_steal_pointer(&where);
      return st;
    }
    if (res != NULL)
      freeaddrinfo(res);
    if (g_get_monotonic_time() >= deadline)
      break;
    g_usleep(100 * 1000);
  }
  g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_CONNECT,
              "could not reach the rendezvous store at %s within %g s (%s); is global rank 0 "
              "running, and are MASTER_ADDR and MASTER_PORT right?",
              where, timeout_s, last);
  return NULL;
}

CohortStore *cohort_store_open(const CohortDistEnv *env, const char *token, double timeout_s,
                               GError **error)
{
  if (env->rank != 0)
    return cohort_store_connect(env->master_addr, env->master_port, token, timeout_s, error);
  CohortStoreServer *server = cohort_store_server_new(NULL, env->master_port, token, error);
  if (server == NULL)
    return NULL;
  CohortStore *st =
      cohort_store_connect("localhost", cohort_store_server_port(server), token, timeout_s, error);
  if (st == NULL) {
    cohort_store_server_free(server);
    return NULL;
  }
  st->server = server;
  return st;
}

void cohort_store_free(CohortStore *store)
{
  if (store == NULL)
    return;
  close(store->fd);
  cohort_store_server_free(store->server);
  g_clear_error(&store->broken);
  g_mutex_clear(&store->lock);
  g_free(store->where);
  g_free(store);
}

static gboolean check_key(const char *key, GError **error)
{
  gsize n = strlen(key);
  if (n == 0 || n > COHORT_STORE_MAX_KEY) {
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_INVALID,
                "store key of %zu bytes is refused: keys are 1 to %d bytes", n,
                COHORT_STORE_MAX_KEY);
    return FALSE;
  }
  return TRUE;
}

/* One request/response under the lock. A broken connection stays broken. */
static gboolean request(CohortStore *st, guint8 op, const char *key, const void *value, gsize len,
                        guint8 *status, GBytes **payload, GError **error)
{
  if (!check_key(key, error))
    return FALSE;
  if (len > COHORT_STORE_MAX_VALUE) {
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_INVALID,
                "store value of %zu bytes for key \"%s\" is refused: values are at most %u "
                "bytes (64 MiB)",
                len, key, COHORT_STORE_MAX_VALUE);
    return FALSE;
  }
  g_mutex_lock(&st->lock);
  if (st->broken != NULL) {
    g_propagate_error(error, g_error_copy(st->broken));
    g_mutex_unlock(&st->lock);
    return FALSE;
  }
  gsize klen = strlen(key);
  gboolean ok;
  GError *local = NULL;
  if (!send_frame(st->fd, op, (guint32)klen, len, key, klen, value, len)) {
    g_set_error(&local, COHORT_DIST_ERROR, COHORT_DIST_ERROR_PEER,
                "lost the connection to the rendezvous store at %s (did rank 0 exit?)", st->where);
    ok = FALSE;
  } else {
    ok = read_response(st->fd, st->where, status, payload, &local);
  }
  if (!ok) {
    st->broken = g_error_copy(local);
    g_propagate_error(error, local);
  }
  g_mutex_unlock(&st->lock);
  return ok;
}

gboolean cohort_store_set(CohortStore *store, const char *key, const void *value, gsize length,
                          GError **error)
{
  guint8 status;
  return request(store, OP_SET, key, value, length, &status, NULL, error);
}

GBytes *cohort_store_try_get(CohortStore *store, const char *key, GError **error)
{
  guint8 status;
  GBytes *b = NULL;
  if (!request(store, OP_GET, key, NULL, 0, &status, &b, error))
    return NULL;
  if (status != ST_OK) {
    g_bytes_unref(b);
    return NULL;
  }
  return b;
}

gboolean cohort_store_check(CohortStore *store, const char *key, gboolean *exists, GError **error)
{
  guint8 status;
  if (!request(store, OP_CHECK, key, NULL, 0, &status, NULL, error))
    return FALSE;
  *exists = status == ST_OK;
  return TRUE;
}

gboolean cohort_store_delete(CohortStore *store, const char *key, GError **error)
{
  guint8 status;
  return request(store, OP_DELETE, key, NULL, 0, &status, NULL, error);
}

gboolean cohort_store_add(CohortStore *store, const char *key, gint64 delta, gint64 *result,
                          GError **error)
{
  char d[32];
  int n = g_snprintf(d, sizeof d, "%" G_GINT64_FORMAT, delta);
  guint8 status;
  g_autoptr(GBytes) b = NULL;
  if (!request(store, OP_ADD, key, d, (gsize)n, &status, &b, error))
    return FALSE;
  if (result != NULL)
    *result = g_ascii_strtoll(g_bytes_get_data(b, NULL), NULL, 10);
  return TRUE;
}

/* Polling backoff: short at first (rendezvous is usually quick), capped so a long wait costs
 * little. */
static void backoff(gint64 *sleep_us)
{
  g_usleep((gulong)*sleep_us);
  *sleep_us = MIN(*sleep_us * 2, 50000);
}

gboolean cohort_store_wait(CohortStore *store, const char *const *keys, double timeout_s,
                           GError **error)
{
  gint64 deadline = g_get_monotonic_time() + (gint64)(MAX(timeout_s, 0) * G_USEC_PER_SEC);
  gint64 sleep_us = 500;
  guint n = g_strv_length((GStrv)keys);
  g_autofree gboolean *seen = g_new0(gboolean, n + 1);
  for (;;) {
    gboolean all = TRUE;
    for (guint i = 0; i < n; i++) {
      if (seen[i])
        continue;
      if (!cohort_store_check(store, keys[i], &seen[i], error))
        return FALSE;
      all = all && seen[i];
    }
    if (all)
      return TRUE;
    if (g_get_monotonic_time() >= deadline)
      break;
    backoff(&sleep_us);
  }
  g_autoptr(GString) missing = g_string_new(NULL);
  guint n_missing = 0;
  for (guint i = 0; i < n; i++) {
    if (seen[i])
      continue;
    if (n_missing < 8)
      g_string_append_printf(missing, "%s\"%s\"", n_missing ? ", " : "", keys[i]);
    n_missing++;
  }
  if (n_missing > 8)
    g_string_append_printf(missing, " and %u more", n_missing - 8);
  g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_TIMEOUT,
              "timed out after %g s waiting for store key%s %s", timeout_s,
              n_missing > 1 ? "s" : "", missing->str);
  return FALSE;
}

GBytes *cohort_store_get(CohortStore *store, const char *key, double timeout_s, GError **error)
{
  gint64 deadline = g_get_monotonic_time() + (gint64)(MAX(timeout_s, 0) * G_USEC_PER_SEC);
  gint64 sleep_us = 500;
  for (;;) {
    GError *local = NULL;
    GBytes *b = cohort_store_try_get(store, key, &local);
    if (b != NULL)
      return b;
    if (local != NULL) {
      g_propagate_error(error, local);
      return NULL;
    }
    if (g_get_monotonic_time() >= deadline)
      break;
    backoff(&sleep_us);
  }
  g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_TIMEOUT,
              "timed out after %g s waiting for store key \"%s\"", timeout_s, key);
  return NULL;
}

/* The rendezvous store's client: one blocking connection per CohortStore, requests
 * serialized under a lock; and cohort_store_open, which starts rank 0's server. The server is
 * in store-server.c, the wire format in store-wire.h. */
#include "engine/distributed/store-wire.h"
#include "engine/distributed/store.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

/* Reading grows a buffer by at most this much at a time, so a peer that announces a large
 * payload and sends little costs little. */
#define READ_CHUNK (1u << 20)

/* The least bound of a request, whatever the timeout: a live store answers in microseconds,
 * but a loaded machine may take a second to schedule it. */
#define MIN_REQUEST_S 5.0

struct _CohortStore {
  int fd;
  GMutex lock; /* the fields below; the connection itself belongs to whoever set `busy` */
  GCond idle;
  gboolean busy;     /* a request is on the connection */
  gint64 busy_since; /* when it began */
  double request_s;  /* how long a request may go without a byte from the store */
  double slow_after_s;
  CohortStoreSlowFunc slow;
  gpointer slow_user;
  char *where; /* "host:port" for messages */
  GError *broken;
  CohortStoreServer *server; /* owned when this rank hosts the store */
};

/* One request's (or the hello's) traffic: the deadline it must meet, moved on by every byte
 * that goes through, and the slow function due once. */
typedef struct {
  int fd;
  gint64 deadline;
  double bound_s;
  gboolean timed_out;
  gint64 slow_at; /* 0 = none */
  CohortStoreSlowFunc slow;
  gpointer slow_user;
  const char *where;
  gint64 start;
} Io;

static Io io_new(int fd, double bound_s, const char *where)
{
  gint64 now = g_get_monotonic_time();
  return (Io){.fd = fd,
              .deadline = now + (gint64)(bound_s * G_USEC_PER_SEC),
              .bound_s = bound_s,
              .where = where,
              .start = now};
}

/* Waits until `fd` is ready for `events`; FALSE at the deadline (io->timed_out) or on an
 * error. Calls the slow function when it falls due. Past the deadline it still looks once: a
 * process that was itself stopped finds its clock past the deadline and the answer waiting. */
static gboolean io_wait(Io *io, short events)
{
  for (;;) {
    gint64 now = g_get_monotonic_time();
    if (now >= io->deadline) {
      struct pollfd p = {io->fd, events, 0};
      if (poll(&p, 1, 0) > 0)
        return TRUE;
      io->timed_out = TRUE;
      return FALSE;
    }
    gint64 until = io->deadline;
    if (io->slow_at > 0 && io->slow_at <= now) {
      io->slow(io->where, (double)(now - io->start) / G_USEC_PER_SEC, io->slow_user);
      io->slow_at = 0;
    }
    if (io->slow_at > 0)
      until = MIN(until, io->slow_at);
    struct pollfd p = {io->fd, events, 0};
    int r = poll(&p, 1, (int)MAX((until - now + 999) / 1000, 1));
    if (r < 0 && errno != EINTR)
      return FALSE;
    if (r > 0)
      return TRUE;
  }
}

/* A byte went through: the store answers, so the deadline moves on. */
static void io_progress(Io *io)
{
  io->deadline = g_get_monotonic_time() + (gint64)(io->bound_s * G_USEC_PER_SEC);
}

/* Sends (`out`) or receives `len` bytes through io: FALSE at its deadline or when the
 * connection ends. */
static gboolean transfer(Io *io, void *buf, gsize len, gboolean out)
{
  char *p = buf;
  while (len > 0) {
    if (!io_wait(io, out ? POLLOUT : POLLIN))
      return FALSE;
    ssize_t n = out ? send(io->fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT)
                    : recv(io->fd, p, len, MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
      continue;
    if (n <= 0)
      return FALSE;
    io_progress(io);
    p += n;
    len -= (gsize)n;
  }
  return TRUE;
}

static gboolean write_all(Io *io, const void *buf, gsize len)
{
  return transfer(io, (void *)buf, len, TRUE);
}

static gboolean read_all(Io *io, void *buf, gsize len)
{
  return transfer(io, buf, len, FALSE);
}

/* Reads `len` bytes into a buffer that grows as they arrive; NULL when the connection ends
 * first. The result has a NUL after the data. */
static guint8 *read_payload(Io *io, gsize len)
{
  gsize cap = MIN(len, READ_CHUNK), got = 0;
  guint8 *data = g_malloc(cap + 1);
  while (got < len) {
    if (got == cap) {
      cap = MIN(len, cap + READ_CHUNK);
      data = g_realloc(data, cap + 1);
    }
    if (!read_all(io, data + got, cap - got)) {
      g_free(data);
      return NULL;
    }
    got = cap;
  }
  data[len] = '\0';
  return data;
}

static void set_nodelay(int fd)
{
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

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

/* The connection failed: rank 0 closed it (exited), or did not answer in time. */
static void lost(GError **error, const Io *io)
{
  if (io->timed_out)
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_TIMEOUT,
                COHORT_STORE_SILENT
                ": no answer from the store at %s in %.0f s; is rank 0 "
                "stopped (SIGSTOP, a debugger), or its host paused or unreachable?",
                io->where, io->bound_s);
  else
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_PEER,
                "lost the connection to the rendezvous store at %s (did rank 0 exit?)", io->where);
}

/* Reads a response; a refusal becomes an error. The payload is returned in *payload. */
static gboolean read_response(Io *io, guint8 *status, GBytes **payload, GError **error)
{
  const char *where = io->where;
  guint8 hdr[STORE_HDR_LEN];
  if (!read_all(io, hdr, sizeof hdr)) {
    lost(error, io);
    return FALSE;
  }
  guint64 len = store_get_u64(hdr + 8);
  gboolean other_job = hdr[0] == ST_OTHER_JOB;
  gboolean refused = hdr[0] == ST_REFUSED || other_job;
  if (hdr[0] > ST_OTHER_JOB || len > (refused ? STORE_MAX_REASON : COHORT_STORE_MAX_VALUE)) {
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_PEER,
                "the rendezvous store at %s sent a malformed response", where);
    return FALSE;
  }
  guint8 *data = read_payload(io, (gsize)len);
  if (data == NULL) {
    lost(error, io);
    return FALSE;
  }
  *status = hdr[0];
  if (refused) {
    g_autofree char *reason = g_utf8_make_valid((char *)data, -1);
    g_set_error(error, COHORT_DIST_ERROR,
                other_job ? COHORT_DIST_ERROR_OTHER_JOB : COHORT_DIST_ERROR_REFUSED,
                "the rendezvous store at %s refused this process: %s", where, reason);
    g_free(data);
    return FALSE;
  }
  if (payload != NULL)
    *payload = g_bytes_new_take(data, (gsize)len);
  else
    g_free(data);
  return TRUE;
}

/* Sends the hello on a connected socket and reads the verdict, waiting `bound_s` at most for
 * it. Returns 1 when accepted, 0 when refused (the error is set), -1 when the connection ended
 * before a verdict: the server was closing it to make room, or was not a store yet; -2 when no
 * verdict came in time (the port is held, but rank 0 does not serve it: stopped, or busy
 * starting). Both are worth another try. */
static int hello(int fd, const char *token, const char *where, double bound_s, GError **error)
{
  Io io = io_new(fd, bound_s, where);
  gsize tlen = strlen(token);
  guint8 msg[STORE_HELLO_LEN];
  memcpy(msg, STORE_MAGIC, 4);
  store_put_u32(msg + 4, STORE_VERSION);
  store_put_u32(msg + 8, (guint32)tlen);
  guint8 status = 0;
  GError *local = NULL;
  if (!write_all(&io, msg, sizeof msg) || !write_all(&io, token, tlen))
    return io.timed_out ? -2 : -1;
  if (read_response(&io, &status, NULL, &local))
    return 1;
  if (g_error_matches(local, COHORT_DIST_ERROR, COHORT_DIST_ERROR_PEER) ||
      g_error_matches(local, COHORT_DIST_ERROR, COHORT_DIST_ERROR_TIMEOUT)) {
    g_error_free(local);
    return io.timed_out ? -2 : -1;
  }
  g_propagate_error(error, local);
  return 0;
}

/* cohort_store_connect; with `retry_refused`, a refusal is tried again until the timeout (a
 * restarted rank may meet the store of the attempt before, still closing). */
static CohortStore *connect_store(const char *host, int port, const char *token, double timeout_s,
                                  gboolean retry_refused, GError **error)
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
      GError *refusal = NULL;
      /* Within what is left of the wait, and long enough for a loaded rank 0 to answer. */
      double left_s = (double)(deadline - g_get_monotonic_time()) / G_USEC_PER_SEC;
      int verdict = hello(fd, token, where, MAX(left_s, 2.0), &refusal);
      if (verdict <= 0) {
        close(fd);
        /* Another job's store stays another job's: waiting cannot help. */
        if (verdict == 0 && (!retry_refused || g_error_matches(refusal, COHORT_DIST_ERROR,
                                                               COHORT_DIST_ERROR_OTHER_JOB))) {
          g_propagate_error(error, refusal);
          freeaddrinfo(res);
          return NULL;
        }
        g_free(last);
        last = verdict == 0    ? g_strdup(refusal->message)
               : verdict == -2 ? g_strdup(COHORT_STORE_SILENT ": the port is open, but no "
                                                              "answer came")
                               : g_strdup("the store closed the connection before answering");
        g_clear_error(&refusal);
        continue;
      }
      freeaddrinfo(res);
      CohortStore *st = g_new0(CohortStore, 1);
      st->fd = fd;
      g_mutex_init(&st->lock);
      g_cond_init(&st->idle);
      /* Requests are answered at once: one that waits the job's timeout will not be. */
      st->request_s = MAX(timeout_s, MIN_REQUEST_S);
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

CohortStore *cohort_store_connect(const char *host, int port, const char *token, double timeout_s,
                                  GError **error)
{
  return connect_store(host, port, token, timeout_s, FALSE, error);
}

/* Rank 0 holds a descriptor per client: make room for them under the soft limit (often
 * 1024), up to the hard one, so a large job does not run out when it checkpoints. */
static void ensure_fd_room(rlim_t needed)
{
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= needed)
    return;
  rl.rlim_cur = rl.rlim_max == RLIM_INFINITY ? needed : MIN(needed, rl.rlim_max);
  setrlimit(RLIMIT_NOFILE, &rl);
}

CohortStore *cohort_store_open(const CohortDistEnv *env, const char *token, double timeout_s,
                               GError **error)
{
  /* After a restart, rank 0 of the attempt before may still be closing its store on the
   * same port, and refuses this attempt's token: wait for the new one. */
  if (env->rank != 0)
    return connect_store(env->master_addr, env->master_port, token, timeout_s,
                         env->restart_count > 0, error);
  gboolean single_node = env->world_size == env->local_world_size;
  const char *bind = cohort_store_bind_address(env->master_addr, single_node);
  /* Every rank holds one connection; the spare ones serve a reconnecting rank or a tool. */
  CohortStoreLimits limits = {.max_clients = env->world_size + 16};
  ensure_fd_room((rlim_t)limits.max_clients + 64 + 256);
  /* On the sockets the launcher held for the job when it gave them (COHORT_STORE_FDS). */
  CohortStoreServer *server =
      env->n_store_fds > 0 ? cohort_store_server_new_from_fds(env->store_fds, env->n_store_fds,
                                                              token, &limits, error)
                           : cohort_store_server_new(bind, env->master_port, token, &limits, error);
  if (server == NULL)
    return NULL;
  /* Rank 0 reaches its own server on the first address it listens on (loopback when that is
   * every address). */
  const char *own = cohort_store_server_addresses(server)[0];
  if (g_str_equal(own, "::") || g_str_equal(own, "0.0.0.0"))
    own = "localhost";
  CohortStore *st =
      cohort_store_connect(own, cohort_store_server_port(server), token, timeout_s, error);
  if (st == NULL) {
    cohort_store_server_free(server);
    return NULL;
  }
  st->server = server;
  return st;
}

CohortStoreServer *cohort_store_get_server(CohortStore *store)
{
  return store->server;
}

void cohort_store_free(CohortStore *store)
{
  if (store == NULL)
    return;
  close(store->fd);
  cohort_store_server_free(store->server);
  g_clear_error(&store->broken);
  g_mutex_clear(&store->lock);
  g_cond_clear(&store->idle);
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

/* Takes the connection for one request, waiting until `deadline` for another thread's to
 * end. FALSE when the connection is broken, or still busy at the deadline (then it is not
 * broken: nothing was sent). */
static gboolean take(CohortStore *st, gint64 deadline, GError **error)
{
  g_mutex_lock(&st->lock);
  while (st->busy && st->broken == NULL) {
    if (!g_cond_wait_until(&st->idle, &st->lock, deadline) && st->busy && st->broken == NULL) {
      g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_TIMEOUT,
                  COHORT_STORE_SILENT ": a request to the store at %s has waited %.0f s for its "
                                      "answer",
                  st->where, (double)(g_get_monotonic_time() - st->busy_since) / G_USEC_PER_SEC);
      g_mutex_unlock(&st->lock);
      return FALSE;
    }
  }
  if (st->broken != NULL) {
    g_propagate_error(error, g_error_copy(st->broken));
    g_mutex_unlock(&st->lock);
    return FALSE;
  }
  st->busy = TRUE;
  st->busy_since = g_get_monotonic_time();
  g_mutex_unlock(&st->lock);
  return TRUE;
}

/* One request/response, bounded by `bound_s` without an answer (<= 0: the store's bound):
 * a store that does not answer in time breaks the connection, since the answer may still
 * come and would be read as the next one's. A broken connection stays broken. */
static gboolean request(CohortStore *st, guint8 op, const char *key, const void *value, gsize len,
                        double bound_s, guint8 *status, GBytes **payload, GError **error)
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
  double bound = bound_s > 0 ? bound_s : st->request_s;
  if (!take(st, g_get_monotonic_time() + (gint64)(bound * G_USEC_PER_SEC), error))
    return FALSE;
  /* The request's own bound starts now, however long it waited for the connection. */
  Io io = io_new(st->fd, bound, st->where);
  g_mutex_lock(&st->lock);
  if (st->slow != NULL && st->slow_after_s < io.bound_s) {
    io.slow = st->slow;
    io.slow_user = st->slow_user;
    io.slow_at = io.start + (gint64)(st->slow_after_s * G_USEC_PER_SEC);
  }
  g_mutex_unlock(&st->lock);
  gsize klen = strlen(key);
  gboolean ok;
  GError *local = NULL;
  guint8 hdr[STORE_HDR_LEN];
  store_put_header(hdr, op, (guint32)klen, len);
  if (!write_all(&io, hdr, sizeof hdr) || !write_all(&io, key, klen) ||
      (len > 0 && !write_all(&io, value, len))) {
    lost(&local, &io);
    ok = FALSE;
  } else {
    ok = read_response(&io, status, payload, &local);
  }
  g_mutex_lock(&st->lock);
  if (!ok)
    st->broken = g_error_copy(local);
  st->busy = FALSE;
  g_cond_broadcast(&st->idle);
  g_mutex_unlock(&st->lock);
  if (!ok)
    g_propagate_error(error, local);
  return ok;
}

gboolean cohort_store_set(CohortStore *store, const char *key, const void *value, gsize length,
                          GError **error)
{
  return cohort_store_set_within(store, key, value, length, 0, error);
}

gboolean cohort_store_set_within(CohortStore *store, const char *key, const void *value,
                                 gsize length, double max_s, GError **error)
{
  guint8 status;
  return request(store, OP_SET, key, value, length, max_s, &status, NULL, error);
}

GBytes *cohort_store_try_get(CohortStore *store, const char *key, GError **error)
{
  return cohort_store_try_get_within(store, key, 0, error);
}

GBytes *cohort_store_try_get_within(CohortStore *store, const char *key, double max_s,
                                    GError **error)
{
  guint8 status;
  GBytes *b = NULL;
  if (!request(store, OP_GET, key, NULL, 0, max_s, &status, &b, error))
    return NULL;
  if (status != ST_OK) {
    g_bytes_unref(b);
    return NULL;
  }
  return b;
}

void cohort_store_set_slow_func(CohortStore *store, double after_s, CohortStoreSlowFunc func,
                                gpointer user)
{
  g_mutex_lock(&store->lock);
  store->slow_after_s = after_s;
  store->slow = after_s > 0 ? func : NULL;
  store->slow_user = user;
  g_mutex_unlock(&store->lock);
}

double cohort_store_waiting_s(CohortStore *store)
{
  g_mutex_lock(&store->lock);
  gint64 since = store->busy && store->broken == NULL ? store->busy_since : 0;
  g_mutex_unlock(&store->lock);
  return since > 0 ? (double)(g_get_monotonic_time() - since) / G_USEC_PER_SEC : 0;
}

gboolean cohort_store_is_broken(CohortStore *store, GError **why)
{
  g_mutex_lock(&store->lock);
  gboolean broken = store->broken != NULL;
  if (broken && why != NULL)
    g_propagate_error(why, g_error_copy(store->broken));
  g_mutex_unlock(&store->lock);
  return broken;
}

gboolean cohort_store_check(CohortStore *store, const char *key, gboolean *exists, GError **error)
{
  guint8 status;
  if (!request(store, OP_CHECK, key, NULL, 0, 0, &status, NULL, error))
    return FALSE;
  *exists = status == ST_OK;
  return TRUE;
}

gboolean cohort_store_delete(CohortStore *store, const char *key, GError **error)
{
  guint8 status;
  return request(store, OP_DELETE, key, NULL, 0, 0, &status, NULL, error);
}

gboolean cohort_store_add(CohortStore *store, const char *key, gint64 delta, gint64 *result,
                          GError **error)
{
  char d[32];
  int n = g_snprintf(d, sizeof d, "%" G_GINT64_FORMAT, delta);
  guint8 status;
  g_autoptr(GBytes) b = NULL;
  if (!request(store, OP_ADD, key, d, (gsize)n, 0, &status, &b, error))
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

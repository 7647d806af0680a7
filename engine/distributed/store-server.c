/* The rendezvous store's server: one thread running one poll() loop over the listening
 * sockets, a wake pipe and every connection, all non-blocking.
 *
 * Why one loop and not a thread per connection: a thread per connection, never joined, let
 * a stream of connect/close cycles exhaust rank 0's threads, and idle connections its file
 * descriptors. Here the thread count is fixed (one), and the descriptors are bounded by the
 * limits: at most max_pending connections before their hello (a new one closes the oldest,
 * so a flood of idle connections cannot lock out a rank whose hello is on its way) and at
 * most max_clients after it. Every request is answered at once (waiting is the client's
 * business), so one thread is enough: the store carries a few small keys per rank.
 *
 * Memory: a frame's sizes are checked against the limits before anything is read, and its
 * buffer grows with the bytes that arrive, never past the frame's size; a connection reads
 * its next request only when its response has gone out, so a client that does not read
 * cannot make the server queue responses. Everything stored is capped at
 * COHORT_STORE_MAX_TOTAL. */
#include "engine/distributed/store-listen.h"
#include "engine/distributed/store-wire.h"
#include "engine/distributed/store.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#define DEFAULT_MAX_CLIENTS   1024
#define DEFAULT_MAX_PENDING   64
#define DEFAULT_HELLO_TIMEOUT 5.0
/* A refused connection gets this long to take its refusal before it is closed anyway. */
#define CLOSING_GRACE_US (2 * G_USEC_PER_SEC)
/* Fairness: bytes read from one connection, and connections accepted, per loop turn. */
#define READ_BUDGET    (4u << 20)
#define ACCEPT_BUDGET  32
#define FIRST_CAPACITY (64u << 10)

typedef enum { CONN_HELLO, CONN_READY, CONN_CLOSING } ConnState;

typedef struct {
  int fd;
  ConnState state;
  gboolean dead;      /* closed at the end of this loop turn */
  gboolean is_client; /* counted in n_clients */
  gint64 deadline;    /* HELLO: hello due; CLOSING: closed anyway */
  guint8 *in;         /* the frame being read: header, then key and value */
  gsize in_len, in_cap, in_need;
  guint8 out_hdr[STORE_HDR_LEN];
  GBytes *out_body;
  gsize out_pos, out_len; /* out_len 0 = nothing to send */
} Conn;

struct _CohortStoreServer {
  GArray *listen_fds;   /* int */
  GPtrArray *addresses; /* char*, NULL-terminated */
  int wake[2];
  int port;
  char *token;
  CohortStoreLimits limits;
  GThread *thread;
  /* the server thread's alone */
  GPtrArray *conns; /* Conn* */
  GQueue pending;   /* Conn* not yet past their hello, oldest first */
  guint n_clients;
  GHashTable *kv; /* char* → GBytes* */
  guint64 stored; /* bytes of keys and values */
  gint64 accept_paused_until;
  GMutex stats_lock; /* stats and stamps */
  CohortStoreStats stats;
  GHashTable *stamps; /* char* → gint64*: when each key under STAMPED was last written */
};

/* Keys whose writes are timed (cohort_store_server_key_age): the heartbeat's records, one per
 * rank, so the table stays as small as the job. */
#define STAMPED "progress/"

#define STAT_ADD(s, field, n)                                                                      \
  do {                                                                                             \
    g_mutex_lock(&(s)->stats_lock);                                                                \
    (s)->stats.field += (n);                                                                       \
    g_mutex_unlock(&(s)->stats_lock);                                                              \
  } while (0)

/* ---- connections ---- */

static void conn_kill(CohortStoreServer *s, Conn *c)
{
  if (c->dead)
    return;
  c->dead = TRUE;
  g_queue_remove(&s->pending, c);
  if (c->is_client) {
    c->is_client = FALSE;
    s->n_clients--;
  }
}

static void conn_free(Conn *c)
{
  if (c->fd >= 0)
    close(c->fd);
  g_free(c->in);
  if (c->out_body != NULL)
    g_bytes_unref(c->out_body);
  g_free(c);
}

/* Starts reading a frame of `need` bytes (the header first). */
static void conn_expect(Conn *c, gsize need)
{
  c->in_len = 0;
  c->in_need = need;
  if (c->in_cap > FIRST_CAPACITY) {
    g_clear_pointer(&c->in, g_free);
    c->in_cap = 0;
  }
}

/* Sends what it can; FALSE when the connection is done with (an error, or a refusal sent). */
static gboolean conn_flush(Conn *c)
{
  while (c->out_pos < c->out_len) {
    const guint8 *p;
    gsize n;
    if (c->out_pos < STORE_HDR_LEN) {
      p = c->out_hdr + c->out_pos;
      n = STORE_HDR_LEN - c->out_pos;
    } else {
      gsize body_len;
      const guint8 *body = g_bytes_get_data(c->out_body, &body_len);
      p = body + (c->out_pos - STORE_HDR_LEN);
      n = body_len - (c->out_pos - STORE_HDR_LEN);
    }
    ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return TRUE;
    if (w <= 0)
      return FALSE;
    c->out_pos += (gsize)w;
  }
  c->out_len = c->out_pos = 0;
  g_clear_pointer(&c->out_body, g_bytes_unref);
  return c->state != CONN_CLOSING;
}

/* Queues a response (takes `body`, may be NULL) and sends what it can at once. */
static void conn_respond(CohortStoreServer *s, Conn *c, guint8 status, GBytes *body)
{
  gsize len = body != NULL ? g_bytes_get_size(body) : 0;
  store_put_header(c->out_hdr, status, 0, len);
  c->out_body = body != NULL ? body : g_bytes_new_static("", 0);
  c->out_pos = 0;
  c->out_len = STORE_HDR_LEN + len;
  if (!conn_flush(c))
    conn_kill(s, c);
}

static void refuse_as(CohortStoreServer *s, Conn *c, guint8 status, const char *msg)
{
  STAT_ADD(s, refused, 1);
  c->state = CONN_CLOSING;
  c->deadline = g_get_monotonic_time() + CLOSING_GRACE_US;
  conn_respond(s, c, status, g_bytes_new(msg, strlen(msg)));
}

static void refuse(CohortStoreServer *s, Conn *c, const char *fmt, ...) G_GNUC_PRINTF(3, 4);
static void refuse(CohortStoreServer *s, Conn *c, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  g_autofree char *msg = g_strdup_vprintf(fmt, ap);
  va_end(ap);
  refuse_as(s, c, ST_REFUSED, msg);
}

/* ---- requests ---- */

static gboolean parse_int64(const guint8 *p, gsize len, gint64 *out)
{
  char text[STORE_MAX_DELTA + 1];
  if (len == 0 || len > STORE_MAX_DELTA)
    return FALSE;
  memcpy(text, p, len);
  text[len] = '\0';
  char *end = NULL;
  errno = 0;
  *out = g_ascii_strtoll(text, &end, 10);
  return errno == 0 && end == text + len;
}

/* The store's size after `key` takes a value of `size` bytes, or 0 with a refusal when that
 * is past COHORT_STORE_MAX_TOTAL. */
static guint64 room_for(CohortStoreServer *s, Conn *c, const char *key, gsize size)
{
  GBytes *old = g_hash_table_lookup(s->kv, key);
  guint64 klen = strlen(key);
  guint64 will = s->stored - (old != NULL ? klen + g_bytes_get_size(old) : 0) + klen + size;
  if (will <= COHORT_STORE_MAX_TOTAL)
    return will;
  refuse(s, c,
         "a value of %zu bytes for key \"%s\" is refused: the store holds at most %u bytes "
         "(256 MiB) in all",
         size, key, COHORT_STORE_MAX_TOTAL);
  return 0;
}

/* `key` was written now (or removed, `gone`). */
static void stamp(CohortStoreServer *s, const char *key, gboolean gone)
{
  if (!g_str_has_prefix(key, STAMPED))
    return;
  g_mutex_lock(&s->stats_lock);
  if (gone) {
    g_hash_table_remove(s->stamps, key);
  } else {
    gint64 *t = g_new(gint64, 1);
    *t = g_get_monotonic_time();
    g_hash_table_replace(s->stamps, g_strdup(key), t);
  }
  g_mutex_unlock(&s->stats_lock);
}

static void do_add(CohortStoreServer *s, Conn *c, const char *key, const guint8 *val, gsize vlen)
{
  gint64 delta, cur = 0, sum;
  if (!parse_int64(val, vlen, &delta)) {
    refuse(s, c, "add to key \"%s\": the delta is not a 64-bit integer", key);
    return;
  }
  GBytes *old = g_hash_table_lookup(s->kv, key);
  if (old != NULL) {
    gsize olen;
    const guint8 *od = g_bytes_get_data(old, &olen);
    if (!parse_int64(od, olen, &cur)) {
      refuse(s, c, "add to key \"%s\", whose value is not an integer", key);
      return;
    }
  }
  /* Refused rather than saturated: see cohort_store_add. */
  if (__builtin_add_overflow(cur, delta, &sum)) {
    refuse(s, c,
           "add %" G_GINT64_FORMAT " to key \"%s\" (now %" G_GINT64_FORMAT
           ") is refused: the sum is outside the 64-bit range; the value is kept",
           delta, key, cur);
    return;
  }
  char *text = g_strdup_printf("%" G_GINT64_FORMAT, sum);
  gsize tlen = strlen(text);
  guint64 will = room_for(s, c, key, tlen);
  if (will == 0) {
    g_free(text);
    return;
  }
  s->stored = will;
  g_hash_table_replace(s->kv, g_strdup(key), g_bytes_new_take(text, tlen));
  stamp(s, key, FALSE);
  conn_respond(s, c, ST_OK, g_bytes_new(text, tlen));
}

/* The value is the last `vlen` bytes of the frame in c->in. */
static void do_set(CohortStoreServer *s, Conn *c, const char *key, gsize vlen)
{
  guint64 will = room_for(s, c, key, vlen);
  if (will == 0)
    return;
  /* The value keeps the frame's buffer: no copy of up to 64 MiB. */
  gsize offset = c->in_need - vlen;
  guint8 *frame = g_steal_pointer(&c->in);
  c->in_cap = 0;
  s->stored = will;
  g_hash_table_replace(s->kv, g_strdup(key),
                       g_bytes_new_with_free_func(frame + offset, vlen, g_free, frame));
  stamp(s, key, FALSE);
  conn_respond(s, c, ST_OK, NULL);
}

/* A complete request is in c->in. */
static void execute(CohortStoreServer *s, Conn *c)
{
  guint8 op = c->in[0];
  guint32 klen = store_get_u32(c->in + 4);
  gsize vlen = (gsize)store_get_u64(c->in + 8);
  g_autofree char *key = g_strndup((const char *)c->in + STORE_HDR_LEN, klen);
  const guint8 *val = c->in + STORE_HDR_LEN + klen;
  STAT_ADD(s, requests, 1);
  switch (op) {
  case OP_SET:
    do_set(s, c, key, vlen);
    return;
  case OP_ADD:
    do_add(s, c, key, val, vlen);
    return;
  case OP_GET: {
    GBytes *b = g_hash_table_lookup(s->kv, key);
    if (b != NULL)
      conn_respond(s, c, ST_OK, g_bytes_ref(b));
    else
      conn_respond(s, c, ST_MISSING, NULL);
    return;
  }
  case OP_CHECK:
    conn_respond(s, c, g_hash_table_contains(s->kv, key) ? ST_OK : ST_MISSING, NULL);
    return;
  case OP_DELETE: {
    GBytes *b = g_hash_table_lookup(s->kv, key);
    if (b != NULL) {
      s->stored -= strlen(key) + g_bytes_get_size(b);
      g_hash_table_remove(s->kv, key);
      stamp(s, key, TRUE);
    }
    conn_respond(s, c, ST_OK, NULL);
    return;
  }
  }
}

/* A request header is in c->in: checks it against the limits before reading further. */
static void check_header(CohortStoreServer *s, Conn *c)
{
  guint8 op = c->in[0];
  guint32 klen = store_get_u32(c->in + 4);
  guint64 vlen = store_get_u64(c->in + 8);
  if (op < OP_SET || op > OP_DELETE)
    refuse(s, c, "unknown store request %u", op);
  else if (klen == 0 || klen > COHORT_STORE_MAX_KEY)
    refuse(s, c, "a key of %u bytes is refused: keys are 1 to %d bytes", klen,
           COHORT_STORE_MAX_KEY);
  else if (vlen > COHORT_STORE_MAX_VALUE)
    refuse(s, c,
           "a value of %" G_GUINT64_FORMAT " bytes is refused: values are at most %u bytes "
           "(64 MiB)",
           vlen, COHORT_STORE_MAX_VALUE);
  else if (op != OP_SET && op != OP_ADD && vlen != 0)
    refuse(s, c, "store request %u carries no value", op);
  else if (op == OP_ADD && vlen > STORE_MAX_DELTA)
    refuse(s, c, "an add delta of %" G_GUINT64_FORMAT " bytes is refused (at most %d)", vlen,
           STORE_MAX_DELTA);
  else
    c->in_need = STORE_HDR_LEN + klen + (gsize)vlen;
}

/* Constant time, so the time a refusal takes says nothing about the token. */
static gboolean same_token(const char *a, gsize alen, const char *b, gsize blen)
{
  guint8 diff = alen != blen;
  for (gsize i = 0; i < alen && i < blen; i++)
    diff |= (guint8)(a[i] ^ b[i]);
  return diff == 0;
}

/* The hello (or its first 12 bytes) is in c->in. */
static void check_hello(CohortStoreServer *s, Conn *c)
{
  if (c->in_len == STORE_HELLO_LEN) {
    guint32 version = store_get_u32(c->in + 4), tlen = store_get_u32(c->in + 8);
    if (memcmp(c->in, STORE_MAGIC, 4) != 0)
      conn_kill(s, c); /* not a Cohort client: no answer */
    else if (version != STORE_VERSION)
      refuse(s, c, "store protocol version %u is not %u (a different Cohort build?)", version,
             STORE_VERSION);
    else if (tlen > COHORT_STORE_MAX_TOKEN)
      refuse(s, c, "a job token of %u bytes is refused (at most %d)", tlen, COHORT_STORE_MAX_TOKEN);
    else
      c->in_need = STORE_HELLO_LEN + tlen;
    if (c->state != CONN_HELLO || c->dead || c->in_need > c->in_len)
      return;
  }
  const char *given = (const char *)c->in + STORE_HELLO_LEN;
  gsize given_len = c->in_len - STORE_HELLO_LEN, own_len = strlen(s->token);
  if (!same_token(given, given_len, s->token, own_len)) {
    /* Tokens of cohort_dist_job_token: "<job half>.<attempt half>". */
    const char *dot = strchr(s->token, '.');
    gsize half = dot ? (gsize)(dot - s->token) + 1 : 0;
    if (half > 1 && given_len > half && same_token(given, half, s->token, half))
      refuse(s, c,
             "this store serves another attempt of this job (the launcher restarted it); a "
             "rank of an earlier attempt is refused");
    else if (half > 1 && given_len > half && given[half - 1] == '.')
      refuse_as(s, c, ST_OTHER_JOB,
                "this store belongs to another job (its job id or COHORT_JOB_TOKEN differs); "
                "two jobs cannot share a MASTER_PORT: give this job another one");
    else
      refuse(s, c,
             "job token differs: this store serves another job (or an earlier attempt of "
             "this one); ranks of one job must share COHORT_JOB_TOKEN");
    return;
  }
  if (s->n_clients >= (guint)s->limits.max_clients) {
    refuse(s, c, "the store already serves %d clients, its limit", s->limits.max_clients);
    return;
  }
  g_queue_remove(&s->pending, c);
  c->state = CONN_READY;
  c->is_client = TRUE;
  s->n_clients++;
  conn_expect(c, STORE_HDR_LEN);
  conn_respond(s, c, ST_OK, NULL);
}

/* Reads what has arrived, and acts on each complete part of a frame. */
static void conn_read(CohortStoreServer *s, Conn *c)
{
  gsize budget = READ_BUDGET;
  while (!c->dead && c->state != CONN_CLOSING && c->out_len == 0 && budget > 0) {
    if (c->in_len == c->in_cap) {
      /* Grow with what arrives, never past the frame's size. */
      gsize cap = MIN(c->in_need, MAX(FIRST_CAPACITY, c->in_cap * 2));
      c->in = g_realloc(c->in, cap);
      c->in_cap = cap;
    }
    gsize want = MIN(MIN(c->in_need, c->in_cap) - c->in_len, budget);
    ssize_t n = recv(c->fd, c->in + c->in_len, want, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return;
    if (n <= 0) {
      conn_kill(s, c);
      return;
    }
    c->in_len += (gsize)n;
    budget -= (gsize)n;
    if (c->in_len < c->in_need)
      continue;
    if (c->state == CONN_HELLO) {
      check_hello(s, c);
    } else if (c->in_len == STORE_HDR_LEN) {
      check_header(s, c);
    } else {
      execute(s, c);
      if (c->state == CONN_READY)
        conn_expect(c, STORE_HDR_LEN);
      /* A client waits for the answer before its next request: reading on would only find
       * nothing (and a client that does send ahead is served on the next turn). */
      return;
    }
  }
}

/* ---- the loop ---- */

static void accept_some(CohortStoreServer *s, int lfd)
{
  for (int k = 0; k < ACCEPT_BUDGET; k++) {
    int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
        s->accept_paused_until = g_get_monotonic_time() + G_USEC_PER_SEC / 10;
      if (errno == EINTR || errno == ECONNABORTED)
        continue;
      return;
    }
    if (g_queue_get_length(&s->pending) >= (guint)s->limits.max_pending) {
      conn_kill(s, g_queue_peek_head(&s->pending));
      STAT_ADD(s, evicted, 1);
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    Conn *c = g_new0(Conn, 1);
    c->fd = fd;
    c->state = CONN_HELLO;
    c->deadline = g_get_monotonic_time() + (gint64)(s->limits.hello_timeout_s * G_USEC_PER_SEC);
    c->in_need = STORE_HELLO_LEN;
    g_queue_push_tail(&s->pending, c);
    g_ptr_array_add(s->conns, c);
    STAT_ADD(s, accepted, 1);
  }
}

/* Closes connections past their deadline: the hello, or the time to take a refusal. */
static void expire(CohortStoreServer *s, gint64 now)
{
  for (guint i = 0; i < s->conns->len; i++) {
    Conn *c = s->conns->pdata[i];
    if (c->state != CONN_READY && !c->dead && now >= c->deadline) {
      if (c->state == CONN_HELLO)
        STAT_ADD(s, timed_out, 1);
      conn_kill(s, c);
    }
  }
}

/* Closes what died this turn and publishes the connection counts. */
static void sweep(CohortStoreServer *s)
{
  for (guint i = s->conns->len; i-- > 0;) {
    Conn *c = s->conns->pdata[i];
    if (c->dead) {
      g_ptr_array_remove_index_fast(s->conns, i);
      conn_free(c);
    }
  }
  g_mutex_lock(&s->stats_lock);
  s->stats.clients = s->n_clients;
  s->stats.pending = g_queue_get_length(&s->pending);
  g_mutex_unlock(&s->stats_lock);
}

/* Fills `pfd` (the wake pipe, the listeners, then one entry per connection, in s->conns
 * order; none is dead) and returns the poll timeout in ms: until the next deadline, -1 for
 * none. */
static int prepare_poll(CohortStoreServer *s, GArray *pfd, gint64 now)
{
  g_array_set_size(pfd, 0);
  struct pollfd w = {s->wake[0], POLLIN, 0};
  g_array_append_val(pfd, w);
  gboolean paused = now < s->accept_paused_until;
  for (guint i = 0; i < s->listen_fds->len; i++) {
    struct pollfd l = {paused ? -1 : g_array_index(s->listen_fds, int, i), POLLIN, 0};
    g_array_append_val(pfd, l);
  }
  gint64 next = paused ? s->accept_paused_until : G_MAXINT64;
  for (guint i = 0; i < s->conns->len; i++) {
    Conn *c = s->conns->pdata[i];
    if (c->state != CONN_READY)
      next = MIN(next, c->deadline);
    short ev = c->out_len > 0 ? POLLOUT : c->state != CONN_CLOSING ? POLLIN : 0;
    struct pollfd p = {c->fd, ev, 0};
    g_array_append_val(pfd, p);
  }
  if (next == G_MAXINT64)
    return -1;
  return (int)CLAMP((next - now + 999) / 1000, 1, 60000);
}

static gpointer server_main(gpointer data)
{
  CohortStoreServer *s = data;
  g_autoptr(GArray) pfd = g_array_new(FALSE, FALSE, sizeof(struct pollfd));
  guint first_conn = 1 + s->listen_fds->len;
  for (;;) {
    /* Sweep first: the poll entries must match s->conns until the turn is over. */
    gint64 now = g_get_monotonic_time();
    expire(s, now);
    sweep(s);
    int timeout = prepare_poll(s, pfd, now);
    int r = poll((struct pollfd *)pfd->data, pfd->len, timeout);
    if (r < 0 && errno != EINTR)
      g_usleep(10000); /* out of memory for a moment: the ranks still need the store */
    if (r <= 0)
      continue;
    struct pollfd *p = (struct pollfd *)pfd->data;
    if (p[0].revents != 0)
      break;
    /* Connections first: a hello that has arrived is served before new connections could
     * push its connection out of the pending queue. */
    guint n = MIN(s->conns->len, pfd->len - first_conn);
    for (guint i = 0; i < n; i++) {
      Conn *c = s->conns->pdata[i];
      short re = p[first_conn + i].revents;
      if (c->dead || re == 0)
        continue;
      if (re & POLLOUT) {
        if (!conn_flush(c))
          conn_kill(s, c);
      } else if (re & (POLLIN | POLLHUP | POLLERR)) {
        conn_read(s, c);
        if ((re & (POLLHUP | POLLERR)) && !(re & POLLIN))
          conn_kill(s, c);
      }
    }
    for (guint i = 0; i < s->listen_fds->len; i++)
      if (p[1 + i].revents & POLLIN)
        accept_some(s, p[1 + i].fd);
  }
  for (guint i = 0; i < s->conns->len; i++)
    conn_kill(s, s->conns->pdata[i]);
  sweep(s);
  return NULL;
}

/* ---- public ---- */

static gboolean token_ok(const char *token, GError **error)
{
  if (strlen(token) > COHORT_STORE_MAX_TOKEN) {
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_INVALID,
                "job token of %zu bytes is too long (at most %d)", strlen(token),
                COHORT_STORE_MAX_TOKEN);
    return FALSE;
  }
  return TRUE;
}

/* Serves on listening sockets `fds` (taken) at `addrs` (taken) and `port`. */
static CohortStoreServer *start(GArray *fds, GPtrArray *addrs, int port, const char *token,
                                const CohortStoreLimits *limits, GError **error)
{
  CohortStoreServer *s = g_new0(CohortStoreServer, 1);
  if (pipe2(s->wake, O_CLOEXEC | O_NONBLOCK) < 0) {
    int e = errno;
    for (guint i = 0; i < fds->len; i++)
      close(g_array_index(fds, int, i));
    g_array_unref(fds);
    g_ptr_array_unref(addrs);
    g_free(s);
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_FAILED, "pipe: %s", g_strerror(e));
    return NULL;
  }
  s->listen_fds = fds;
  g_ptr_array_add(addrs, NULL);
  s->addresses = addrs;
  s->port = port;
  s->token = g_strdup(token);
  s->limits.max_clients =
      limits && limits->max_clients > 0 ? limits->max_clients : DEFAULT_MAX_CLIENTS;
  s->limits.max_pending =
      limits && limits->max_pending > 0 ? limits->max_pending : DEFAULT_MAX_PENDING;
  s->limits.hello_timeout_s =
      limits && limits->hello_timeout_s > 0 ? limits->hello_timeout_s : DEFAULT_HELLO_TIMEOUT;
  g_mutex_init(&s->stats_lock);
  s->kv = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, (GDestroyNotify)g_bytes_unref);
  s->stamps = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
  s->conns = g_ptr_array_new();
  g_queue_init(&s->pending);
  s->thread = g_thread_new("cohort-store", server_main, s);
  return s;
}

CohortStoreServer *cohort_store_server_new(const char *bind_addr, int port, const char *token,
                                           const CohortStoreLimits *limits, GError **error)
{
  if (port < 0 || port > 65535) {
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_INVALID,
                "store port %d is out of range; expected 0 to 65535", port);
    return NULL;
  }
  if (!token_ok(token, error))
    return NULL;
  GArray *fds = g_array_new(FALSE, FALSE, sizeof(int));
  GPtrArray *addrs = g_ptr_array_new_with_free_func(g_free);
  int bound = store_listen(bind_addr, port, fds, addrs, error);
  if (bound == 0) {
    g_array_unref(fds);
    g_ptr_array_unref(addrs);
    return NULL;
  }
  return start(fds, addrs, bound, token, limits, error);
}

CohortStoreServer *cohort_store_server_new_from_fds(const int *fds, int n, const char *token,
                                                    const CohortStoreLimits *limits, GError **error)
{
  if (n < 1 || !token_ok(token, error)) {
    if (n < 1)
      g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_INVALID,
                  "no listening socket to serve on");
    return NULL;
  }
  GArray *held = g_array_new(FALSE, FALSE, sizeof(int));
  GPtrArray *addrs = g_ptr_array_new_with_free_func(g_free);
  int port = 0;
  for (int i = 0; i < n; i++) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    char host[NI_MAXHOST] = "", serv[NI_MAXSERV] = "";
    if (getsockname(fds[i], (struct sockaddr *)&ss, &len) == 0)
      getnameinfo((struct sockaddr *)&ss, len, host, sizeof host, serv, sizeof serv,
                  NI_NUMERICHOST | NI_NUMERICSERV);
    /* The server polls and accepts without blocking. */
    fcntl(fds[i], F_SETFL, fcntl(fds[i], F_GETFL) | O_NONBLOCK);
    fcntl(fds[i], F_SETFD, FD_CLOEXEC);
    g_array_append_val(held, fds[i]);
    g_ptr_array_add(addrs, g_strdup(host));
    if (port == 0)
      port = atoi(serv);
  }
  return start(held, addrs, port, token, limits, error);
}

int cohort_store_server_port(CohortStoreServer *server)
{
  return server->port;
}

const char *const *cohort_store_server_addresses(CohortStoreServer *server)
{
  return (const char *const *)server->addresses->pdata;
}

gboolean cohort_store_server_is_exposed(CohortStoreServer *server)
{
  for (guint i = 0; server->addresses->pdata[i] != NULL; i++)
    if (!store_address_is_loopback(server->addresses->pdata[i]))
      return TRUE;
  return FALSE;
}

void cohort_store_server_get_stats(CohortStoreServer *server, CohortStoreStats *stats)
{
  g_mutex_lock(&server->stats_lock);
  *stats = server->stats;
  g_mutex_unlock(&server->stats_lock);
}

double cohort_store_server_key_age(CohortStoreServer *server, const char *key)
{
  g_mutex_lock(&server->stats_lock);
  const gint64 *t = g_hash_table_lookup(server->stamps, key);
  double age = t != NULL ? (double)(g_get_monotonic_time() - *t) / G_USEC_PER_SEC : -1;
  g_mutex_unlock(&server->stats_lock);
  return age;
}

void cohort_store_server_free(CohortStoreServer *s)
{
  if (s == NULL)
    return;
  char b = 1;
  while (write(s->wake[1], &b, 1) < 0 && errno == EINTR)
    ;
  g_thread_join(s->thread);
  for (guint i = 0; i < s->listen_fds->len; i++)
    close(g_array_index(s->listen_fds, int, i));
  g_array_unref(s->listen_fds);
  g_ptr_array_unref(s->addresses);
  g_ptr_array_unref(s->conns);
  close(s->wake[0]);
  close(s->wake[1]);
  g_hash_table_destroy(s->kv);
  g_hash_table_destroy(s->stamps);
  g_mutex_clear(&s->stats_lock);
  g_free(s->token);
  g_free(s);
}

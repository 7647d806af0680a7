/* The Gloo backend: rendezvous through our store, collectives through gloo-shim.cc. */
#include "engine/distributed/comm-backend.h"
#include "engine/distributed/gloo-shim.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct {
  CohortGloo *gloo;
  CohortStore *store;
  char *prefix; /* store keys of this communicator: "gloo/<n>/" */
} GlooImpl;

static char *malloc_message(const GError *e)
{
  char *p = malloc(strlen(e->message) + 1);
  if (p != NULL)
    strcpy(p, e->message);
  return p;
}

static int status_of(const GError *e)
{
  return e->code == COHORT_DIST_ERROR_TIMEOUT ? COHORT_GLOO_TIMEOUT : COHORT_GLOO_ERROR;
}

static int store_set(void *user, const char *key, const void *data, size_t len, char **err)
{
  GlooImpl *g = user;
  g_autofree char *k = g_strconcat(g->prefix, key, NULL);
  g_autoptr(GError) e = NULL;
  if (cohort_store_set(g->store, k, data, len, &e))
    return 0;
  *err = malloc_message(e);
  return status_of(e);
}

static int store_get(void *user, const char *key, void **data, size_t *len, long timeout_ms,
                     char **err)
{
  GlooImpl *g = user;
  g_autofree char *k = g_strconcat(g->prefix, key, NULL);
  g_autoptr(GError) e = NULL;
  g_autoptr(GBytes) b = cohort_store_get(g->store, k, timeout_ms / 1000.0, &e);
  if (b == NULL) {
    *err = malloc_message(e);
    return status_of(e);
  }
  gsize n;
  const void *src = g_bytes_get_data(b, &n);
  *data = malloc(n > 0 ? n : 1);
  if (n > 0)
    memcpy(*data, src, n);
  *len = n;
  return 0;
}

static int store_wait(void *user, const char *const *keys, size_t n_keys, long timeout_ms,
                      char **err)
{
  GlooImpl *g = user;
  g_autoptr(GPtrArray) full = g_ptr_array_new_with_free_func(g_free);
  for (size_t i = 0; i < n_keys; i++)
    g_ptr_array_add(full, g_strconcat(g->prefix, keys[i], NULL));
  g_ptr_array_add(full, NULL);
  g_autoptr(GError) e = NULL;
  if (cohort_store_wait(g->store, (const char *const *)full->pdata, timeout_ms / 1000.0, &e))
    return 0;
  *err = malloc_message(e);
  return status_of(e);
}

/* Turns a shim status into a GError carrying the right code. */
static gboolean shim_result(int st, char *msg, GError **error)
{
  if (st == COHORT_GLOO_OK)
    return TRUE;
  g_set_error(error, COHORT_DIST_ERROR,
              st == COHORT_GLOO_TIMEOUT ? COHORT_DIST_ERROR_TIMEOUT
              : st == COHORT_GLOO_IO    ? COHORT_DIST_ERROR_PEER
                                        : COHORT_DIST_ERROR_FAILED,
              "%s", msg != NULL ? msg : "unknown Gloo error");
  free(msg);
  return FALSE;
}

static gboolean gloo_all_reduce(gpointer impl, void *buf, gsize count, CohortDtype dtype,
                                CohortReduceOp op, gint64 timeout_ms, GError **error)
{
  (void)op; /* comm.c divides for AVG */
  GlooImpl *g = impl;
  char *msg = NULL;
  int st = cohort_gloo_allreduce_sum(g->gloo, buf, count, dtype, (long)timeout_ms, &msg);
  return shim_result(st, msg, error);
}

static gboolean gloo_broadcast(gpointer impl, void *buf, gsize nbytes, int root, gint64 timeout_ms,
                               GError **error)
{
  GlooImpl *g = impl;
  char *msg = NULL;
  int st = cohort_gloo_broadcast(g->gloo, buf, nbytes, root, (long)timeout_ms, &msg);
  return shim_result(st, msg, error);
}

static gboolean gloo_all_gather(gpointer impl, const void *send, gsize nbytes, void *recv,
                                gint64 timeout_ms, GError **error)
{
  GlooImpl *g = impl;
  char *msg = NULL;
  int st = cohort_gloo_allgather(g->gloo, send, nbytes, recv, (long)timeout_ms, &msg);
  return shim_result(st, msg, error);
}

static gboolean gloo_reduce_scatter(gpointer impl, void *send, void *recv, const gsize *counts,
                                    CohortDtype dtype, CohortReduceOp op, gint64 timeout_ms,
                                    GError **error)
{
  (void)op; /* comm.c divides for AVG */
  GlooImpl *g = impl;
  char *msg = NULL;
  int st =
      cohort_gloo_reduce_scatter_sum(g->gloo, send, recv, counts, dtype, (long)timeout_ms, &msg);
  return shim_result(st, msg, error);
}

static gboolean gloo_all_gather_v(gpointer impl, void *buf, const gsize *nbytes, gint64 timeout_ms,
                                  GError **error)
{
  GlooImpl *g = impl;
  char *msg = NULL;
  int st = cohort_gloo_allgatherv(g->gloo, buf, nbytes, (long)timeout_ms, &msg);
  return shim_result(st, msg, error);
}

static gboolean gloo_barrier(gpointer impl, gint64 timeout_ms, GError **error)
{
  GlooImpl *g = impl;
  char *msg = NULL;
  int st = cohort_gloo_barrier(g->gloo, (long)timeout_ms, &msg);
  return shim_result(st, msg, error);
}

static void gloo_abort(gpointer impl)
{
  GlooImpl *g = impl;
  cohort_gloo_interrupt(g->gloo, "the communicator was aborted on this rank");
  cohort_gloo_close(g->gloo);
}

static void gloo_free(gpointer impl)
{
  GlooImpl *g = impl;
  if (g == NULL)
    return;
  cohort_gloo_free(g->gloo);
  g_free(g->prefix);
  g_free(g);
}

static const CohortCommBackend gloo_backend = {
    .name = "gloo",
    .all_reduce = gloo_all_reduce,
    .broadcast = gloo_broadcast,
    .all_gather = gloo_all_gather,
    .barrier = gloo_barrier,
    .reduce_scatter = gloo_reduce_scatter,
    .all_gather_v = gloo_all_gather_v,
    .abort = gloo_abort,
    .free = gloo_free,
};

/* The local address the kernel would use to reach the master: a UDP "connect" sends
 * nothing but picks the route. Loopback for a local master. */
static char *local_address_towards(const char *master, GError **error)
{
  struct addrinfo hints = {0}, *res = NULL;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  int gai = getaddrinfo(master, "9", &hints, &res);
  if (gai != 0) {
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_FAILED,
                "cannot resolve the master address \"%s\": %s", master, gai_strerror(gai));
    return NULL;
  }
  char *out = NULL;
  for (struct addrinfo *ai = res; ai != NULL && out == NULL; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
      continue;
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    char host[NI_MAXHOST];
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        getsockname(fd, (struct sockaddr *)&ss, &len) == 0 &&
        getnameinfo((struct sockaddr *)&ss, len, host, sizeof host, NULL, 0, NI_NUMERICHOST) == 0)
      out = g_strdup(host);
    close(fd);
  }
  freeaddrinfo(res);
  if (out == NULL)
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_FAILED,
                "no local address routes to the master address \"%s\"", master);
  return out;
}

CohortComm *cohort_comm_new_gloo(CohortStore *store, const CohortDistEnv *env, double timeout_s,
                                 GError **error)
{
  double t = timeout_s > 0 ? timeout_s : 1800.0;
  /* Gloo writes to sockets without MSG_NOSIGNAL: a peer that died would kill this process
   * with SIGPIPE instead of failing the collective with an error. */
  struct sigaction old;
  if (sigaction(SIGPIPE, NULL, &old) == 0 && old.sa_handler == SIG_DFL)
    signal(SIGPIPE, SIG_IGN);
  const char *iface = g_getenv("GLOO_SOCKET_IFNAME");
  g_autofree char *host = NULL;
  if (iface == NULL || iface[0] == '\0') {
    host = local_address_towards(env->master_addr, error);
    if (host == NULL)
      return NULL;
  }
  /* Each communicator of a job gets its own key space: ranks create communicators in the
   * same order, so each rank's own count names the same instance everywhere. */
  GlooImpl *g = g_new0(GlooImpl, 1);
  g->store = store;
  char key[64];
  g_snprintf(key, sizeof key, "gloo/instance/%d", env->rank);
  gint64 mine = 0;
  if (!cohort_store_add(store, key, 1, &mine, error)) {
    g_free(g);
    return NULL;
  }
  g->prefix = g_strdup_printf("gloo/%" G_GINT64_FORMAT "/", mine);
  CohortGlooStoreOps ops = {.user = g, .set = store_set, .get = store_get, .wait = store_wait};
  char *msg = NULL;
  int st = cohort_gloo_new(&ops, env->rank, env->world_size, host, iface, (long)(t * 1000.0),
                           &g->gloo, &msg);
  if (st != COHORT_GLOO_OK) {
    g_autoptr(GError) inner = NULL;
    shim_result(st, msg, &inner);
    g_set_error(error, COHORT_DIST_ERROR, inner->code,
                "rank %d could not connect to its %d peers with Gloo (bound to %s): %s", env->rank,
                env->world_size - 1, host ? host : iface, inner->message);
    gloo_free(g);
    return NULL;
  }
  return cohort_comm_new_from_backend(&gloo_backend, g, env->rank, env->world_size, store, t);
}

/* The rendezvous store: a small TCP key-value store hosted by global rank 0 at
 * MASTER_ADDR:MASTER_PORT.
 *
 * Ranks use it to compare configs at start, to exchange the NCCL unique id, as Gloo's
 * rendezvous store, and to record which collective each rank has reached (so a timeout can
 * name the ranks that did not arrive).
 *
 * Protocol (store-wire.h; one TCP connection per client, requests answered in order): a
 * client first sends a hello with the job token; a server whose token differs answers with a
 * refusal and closes. Waiting (cohort_store_wait, cohort_store_get) polls the server with a
 * short backoff, so the server never blocks on behalf of a client; and no client blocks on a
 * server that does not answer (every request is bounded, see COHORT_STORE_SILENT).
 *
 * What protects the store (docs/launching.md, "Security of the rendezvous store"):
 *  - The job token (cohort_dist_job_token): a client that does not present it can do nothing
 *    but be refused. It is derived from a secret that reaches the ranks through the
 *    environment (COHORT_JOB_TOKEN), never a command line, and is never printed.
 *  - The bind address (cohort_store_bind_address): a single-node job listens on the address
 *    its ranks use, loopback for the usual 127.0.0.1, not on every interface.
 *  - Bounded resources, so no client, with or without the token, can exhaust rank 0: one
 *    server thread serves every connection from a poll() loop (no thread per connection);
 *    at most `max_pending` connections may be before their hello (a newer one closes the
 *    oldest) and each must complete it within `hello_timeout_s`; at most `max_clients` may
 *    be past it. Sizes are checked before anything is allocated: a key is
 *    1..COHORT_STORE_MAX_KEY bytes, a value at most COHORT_STORE_MAX_VALUE, a token at most
 *    COHORT_STORE_MAX_TOKEN, everything stored at most COHORT_STORE_MAX_TOTAL; buffers grow
 *    with the bytes that actually arrive. A request over a limit is refused with a message
 *    naming the limit, and the connection is closed.
 *
 * Thread safety: a CohortStore may be used from several threads; requests are serialized on
 * its connection, and a thread waits for another's no longer than its own request's bound. */
#pragma once

#include <glib.h>

#include "engine/config/config.h"
#include "engine/distributed/env.h"

G_BEGIN_DECLS

#define COHORT_STORE_MAX_KEY   1024
#define COHORT_STORE_MAX_VALUE (64u * 1024u * 1024u)
#define COHORT_STORE_MAX_TOKEN 256
#define COHORT_STORE_MAX_TOTAL (256u * 1024u * 1024u)

/* ---- server ---- */

typedef struct _CohortStoreServer CohortStoreServer;

/* Connection limits of a server. Zero fields take the defaults. */
typedef struct {
  int max_clients;        /* connections past their hello at once (default 1024) */
  int max_pending;        /* connections before their hello at once (default 64) */
  double hello_timeout_s; /* time allowed from accept to a complete hello (default 5 s) */
} CohortStoreLimits;

/* What a server has done, for tests and diagnostics. */
typedef struct {
  guint clients;     /* connections past their hello now */
  guint pending;     /* connections before their hello now */
  guint64 accepted;  /* connections accepted in all */
  guint64 refused;   /* refusals: wrong token or version, a limit, too many clients */
  guint64 timed_out; /* closed for not completing the hello in time */
  guint64 evicted;   /* closed before their hello to make room for a newer connection */
  guint64 requests;  /* requests served */
} CohortStoreStats;

/* Listens on `port` of `bind_addr` and serves from one background thread. `bind_addr` NULL
 * = every address (IPv6 and IPv4); else a host name or address, and the server listens on
 * every address it resolves to. `port` 0 picks a free port (see cohort_store_server_port).
 * `limits` may be NULL (defaults). When the port is taken the error is
 * COHORT_DIST_ERROR_ADDR_IN_USE and its message names the port and suggests one that is free
 * now. `token` may be "" (then clients must send ""). */
CohortStoreServer *cohort_store_server_new(const char *bind_addr, int port, const char *token,
                                           const CohortStoreLimits *limits, GError **error);
/* The same on sockets already listening (the launcher's, held for the job and inherited by
 * rank 0: engine/distributed/env.h, COHORT_STORE_FDS): `fds` (n of them) become the server's
 * and are closed by cohort_store_server_free. */
CohortStoreServer *cohort_store_server_new_from_fds(const int *fds, int n, const char *token,
                                                    const CohortStoreLimits *limits,
                                                    GError **error);
/* The port actually bound. */
int cohort_store_server_port(CohortStoreServer *server);
/* The numeric addresses listened on ("127.0.0.1", "::1"; "::" or "0.0.0.0" for every
 * address). Owned by the server. */
const char *const *cohort_store_server_addresses(CohortStoreServer *server);
/* TRUE when the server listens on an address other than loopback (every address included). */
gboolean cohort_store_server_is_exposed(CohortStoreServer *server);
/* A snapshot of the counters. */
void cohort_store_server_get_stats(CohortStoreServer *server, CohortStoreStats *stats);
/* Seconds since a key under "progress/" (the heartbeat's records) was last written, on this
 * host's clock; < 0 when it was never written (or deleted), and for every other key. Rank 0
 * tells a rank whose heartbeat went silent from one whose record is fresh with it, without
 * trusting another host's clock. */
double cohort_store_server_key_age(CohortStoreServer *server, const char *key);
/* Stops serving, closes every connection, joins the server thread, frees all keys. */
void cohort_store_server_free(CohortStoreServer *server);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortStoreServer, cohort_store_server_free)

/* Where rank 0 should listen for a job whose master is `master_addr`: the master address
 * itself for a single-node job (loopback for 127.0.0.1 or localhost) and for a multi-node
 * job whose master is a numeric address of one of this host's interfaces; NULL (every
 * address) for a multi-node job whose master is a host name, since the other nodes may
 * resolve that name to an address this host does not (Debian maps its own host name to
 * 127.0.1.1), or an address this host is reached at through NAT. */
const char *cohort_store_bind_address(const char *master_addr, gboolean single_node);

/* Binds and listens on `port` of `bind_addr` as cohort_store_server_new would, and hands the
 * listening sockets (close-on-exec) to the caller: the launcher holds them from its port check
 * to rank 0's serving on them, so another job cannot take the port in between. Fills `fds`
 * (up to `max`, *n of them) and returns the port bound (the one picked when `port` is 0), or 0
 * with cohort_store_server_new's error (COHORT_DIST_ERROR_ADDR_IN_USE naming the port when it
 * is taken). */
int cohort_store_hold_port(const char *bind_addr, int port, int *fds, int max, int *n,
                           GError **error);

/* A TCP port that nothing on this host listens on right now, near `near` when possible
 * (`near` 0 = any). Racy by nature: another process may take it before it is used. Returns 0
 * when none is found. */
int cohort_store_find_free_port(int near);

/* ---- client ---- */

typedef struct _CohortStore CohortStore;

/* Connects to the store at host:port, retrying until `timeout_s` has passed (the server may
 * start later than its clients, or be closing older connections to make room). `host` may be
 * a name or an IPv4/IPv6 address. `timeout_s` (at least 5 s) is also the bound of every later
 * request without an answer. Errors: COHORT_DIST_ERROR_CONNECT (not reachable in time;
 * names host, port and the last reason), COHORT_DIST_ERROR_REFUSED (token differs: a stray
 * client of another job; or the store is full). */
CohortStore *cohort_store_connect(const char *host, int port, const char *token, double timeout_s,
                                  GError **error);

/* The usual start of a rank: global rank 0 starts a server on env->master_port at
 * cohort_store_bind_address(), allowing world_size + 16 clients, and connects to it; the
 * others connect to env->master_addr:master_port. The returned store owns the server (when
 * this rank hosts it) and stops it when freed, so rank 0's store must outlive everyone's use
 * of it: free it after a final barrier. A rank of a restarted group (env->restart_count > 0)
 * that is refused tries again until `timeout_s`: rank 0 of the attempt before, on another
 * node, may still be closing its store on that port, and refuses the new attempt's token; the
 * error at the timeout names the last refusal. A rank of a first attempt is refused at once. */
CohortStore *cohort_store_open(const CohortDistEnv *env, const char *token, double timeout_s,
                               GError **error);

/* The server this store owns (rank 0's), else NULL. */
CohortStoreServer *cohort_store_get_server(CohortStore *store);

/* Frees the connection, and the server when this store owns one. */
void cohort_store_free(CohortStore *store);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortStore, cohort_store_free)

/* How every request ends when rank 0 is there but silent (stopped, its host paused or cut off):
 * the message of its COHORT_DIST_ERROR_TIMEOUT begins with this, so that every rank's failure
 * says the same thing about the same cause. */
#define COHORT_STORE_SILENT "rank 0 (the store) does not answer"

/* Every request below is bounded: rank 0 answers at once when it runs, so a request that waits
 * the connection's timeout (cohort_store_connect's `timeout_s`, at least 5 s) without a byte
 * from the store fails with COHORT_DIST_ERROR_TIMEOUT (COHORT_STORE_SILENT) and breaks the
 * connection, as does a lost connection (COHORT_DIST_ERROR_PEER): a late answer would be read
 * as the next request's. A thread that waits for another's request on the connection waits no
 * longer than its own request could, and fails without breaking anything. */

/* Sets key to value (replacing any value). */
gboolean cohort_store_set(CohortStore *store, const char *key, const void *value, gsize length,
                          GError **error);
/* The same with a bound of its own (<= 0: the connection's), for the paths that report a
 * failure and must end soon even when rank 0 is silent, such as an abort's reason. */
gboolean cohort_store_set_within(CohortStore *store, const char *key, const void *value,
                                 gsize length, double max_s, GError **error);
/* Waits up to timeout_s for key to exist and returns its value. COHORT_DIST_ERROR_TIMEOUT
 * names the key. */
GBytes *cohort_store_get(CohortStore *store, const char *key, double timeout_s, GError **error);
/* Returns the value now, or NULL without an error when the key does not exist. */
GBytes *cohort_store_try_get(CohortStore *store, const char *key, GError **error);
/* The same with a bound of its own (<= 0: the connection's), as cohort_store_set_within: for
 * reading what other ranks published when a collective has failed. */
GBytes *cohort_store_try_get_within(CohortStore *store, const char *key, double max_s,
                                    GError **error);

/* Called on the requesting thread once a request has waited `after_s` for rank 0's answer (once
 * per request): long before the request's bound ends it, a rank can say that rank 0 is silent,
 * the one failure no hang report can tell since rank 0 writes those. `after_s` <= 0 or `func`
 * NULL: none. */
typedef void (*CohortStoreSlowFunc)(const char *where, double waited_s, gpointer user);
void cohort_store_set_slow_func(CohortStore *store, double after_s, CohortStoreSlowFunc func,
                                gpointer user);
/* How long the request now on the connection has waited for its answer; 0 when none. A
 * failure report checks it before asking the store anything itself. */
double cohort_store_waiting_s(CohortStore *store);
/* Whether a request failed for good (rank 0 exited or did not answer); *why (may be NULL) gets
 * that failure. */
gboolean cohort_store_is_broken(CohortStore *store, GError **why);
/* Waits until every key of the NULL-terminated `keys` exists. On timeout the error names the
 * keys still missing. */
gboolean cohort_store_wait(CohortStore *store, const char *const *keys, double timeout_s,
                           GError **error);
/* Adds delta to the integer stored under key (absent = 0) and returns the new value in
 * *result (may be NULL). The value is stored as decimal text, so get() reads it too. A sum
 * outside the 64-bit range is refused (COHORT_DIST_ERROR_REFUSED) and the value is kept:
 * the counters the store keeps (ranks arrived, instances) never come near it, so reaching it
 * means a confused or hostile client, and a wrapped or saturated count would mislead. */
gboolean cohort_store_add(CohortStore *store, const char *key, gint64 delta, gint64 *result,
                          GError **error);
/* Sets *exists to whether key exists now. */
gboolean cohort_store_check(CohortStore *store, const char *key, gboolean *exists, GError **error);
/* Removes key; removing an absent key is not an error. */
gboolean cohort_store_delete(CohortStore *store, const char *key, GError **error);

/* ---- start-of-job checks ---- */

/* Every rank publishes its resolved config; rank 0 compares them all (node_rank excluded) and
 * publishes a verdict. On a mismatch every rank returns COHORT_DIST_ERROR_MISMATCH with the
 * same message, naming the ranks that differ from rank 0 and the differing keys, e.g.
 * "rank 2 runs a different config from rank 0 (keys differ: learning_rate); every rank must
 * load the same config". When ranks never arrive, COHORT_DIST_ERROR_TIMEOUT names them
 * ("rendezvous timed out after 30 s: ranks 2, 3 of 4 never joined; ..."). A config value that
 * cannot be read (malformed, or nested deeper than any config) is reported as unreadable, not
 * parsed. */
gboolean cohort_dist_check_config(CohortStore *store, const CohortDistEnv *env,
                                  const CohortConfig *cfg, double timeout_s, GError **error);

G_END_DECLS

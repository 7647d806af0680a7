/* The rendezvous store: a small TCP key-value store hosted by global rank 0 at
 * MASTER_ADDR:MASTER_PORT.
 *
 * Ranks use it to compare configs at start, to exchange the NCCL unique id, as Gloo's
 * rendezvous store, and to record which collective each rank has reached (so a timeout can
 * name the ranks that did not arrive).
 *
 * Protocol (one TCP connection per client, requests answered in order): a client first sends
 * a hello with the job token; a server whose token differs answers with a refusal and closes.
 * Limits, checked on both sides: a key is 1..COHORT_STORE_MAX_KEY bytes, a value at most
 * COHORT_STORE_MAX_VALUE bytes, a token at most COHORT_STORE_MAX_TOKEN bytes. A request over
 * a limit is refused with a message naming the limit and the connection is closed.
 *
 * Waiting (cohort_store_wait, cohort_store_get) polls the server with a short backoff, so a
 * waiting client never holds the connection for longer than one round trip.
 *
 * Thread safety: a CohortStore may be used from several threads; requests are serialized on
 * its connection. The server runs on its own threads. */
#pragma once

#include <glib.h>

#include "engine/config.h"
#include "engine/distributed/env.h"

G_BEGIN_DECLS

#define COHORT_STORE_MAX_KEY   1024
#define COHORT_STORE_MAX_VALUE (64u * 1024u * 1024u)
#define COHORT_STORE_MAX_TOKEN 256

/* ---- server ---- */

typedef struct _CohortStoreServer CohortStoreServer;

/* Listens on `port` of `bind_addr` (NULL = every address, IPv6 and IPv4; else a host name or
 * address) and serves in background threads. `port` 0 picks a free port (see
 * cohort_store_server_port). When the port is taken the error is
 * COHORT_DIST_ERROR_ADDR_IN_USE and its message names the port and suggests one that is free
 * now. `token` may be "" (then clients must send ""). */
CohortStoreServer *cohort_store_server_new(const char *bind_addr, int port, const char *token,
                                           GError **error);
/* The port actually bound. */
int cohort_store_server_port(CohortStoreServer *server);
/* Stops serving, closes every connection, frees all keys. */
void cohort_store_server_free(CohortStoreServer *server);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortStoreServer, cohort_store_server_free)

/* A TCP port that nothing on this host listens on right now, near `near` when possible
 * (`near` 0 = any). Racy by nature: another process may take it before it is used. Returns 0
 * when none is found. */
int cohort_store_find_free_port(int near);

/* ---- client ---- */

typedef struct _CohortStore CohortStore;

/* Connects to the store at host:port, retrying until `timeout_s` has passed (the server may
 * start later than its clients). `host` may be a name or an IPv4/IPv6 address. Errors:
 * COHORT_DIST_ERROR_CONNECT (not reachable in time; names host, port and the last reason),
 * COHORT_DIST_ERROR_REFUSED (token differs: a stray client of another job). */
CohortStore *cohort_store_connect(const char *host, int port, const char *token, double timeout_s,
                                  GError **error);

/* The usual start of a rank: global rank 0 starts a server on env->master_port (every
 * address) and connects to it; the others connect to env->master_addr:master_port. The
 * returned store owns the server (when this rank hosts it) and stops it when freed, so rank
 * 0's store must outlive everyone's use of it: free it after a final barrier. */
CohortStore *cohort_store_open(const CohortDistEnv *env, const char *token, double timeout_s,
                               GError **error);

/* Frees the connection, and the server when this store owns one. */
void cohort_store_free(CohortStore *store);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortStore, cohort_store_free)

/* Sets key to value (replacing any value). */
gboolean cohort_store_set(CohortStore *store, const char *key, const void *value, gsize length,
                          GError **error);
/* Waits up to timeout_s for key to exist and returns its value. COHORT_DIST_ERROR_TIMEOUT
 * names the key. */
GBytes *cohort_store_get(CohortStore *store, const char *key, double timeout_s, GError **error);
/* Returns the value now, or NULL without an error when the key does not exist. */
GBytes *cohort_store_try_get(CohortStore *store, const char *key, GError **error);
/* Waits until every key of the NULL-terminated `keys` exists. On timeout the error names the
 * keys still missing. */
gboolean cohort_store_wait(CohortStore *store, const char *const *keys, double timeout_s,
                           GError **error);
/* Adds delta to the integer stored under key (absent = 0) and returns the new value in
 * *result (may be NULL). The value is stored as decimal text, so get() reads it too. */
gboolean cohort_store_add(CohortStore *store, const char *key, gint64 delta, gint64 *result,
                          GError **error);
/* Sets *exists to whether key exists now. */
gboolean cohort_store_check(CohortStore *store, const char *key, gboolean *exists, GError **error);
/* Removes key; removing an absent key is not an error. */
gboolean cohort_store_delete(CohortStore *store, const char *key, GError **error);

/* ---- start-of-job checks ---- */

/* The job token ranks present to the store: the launcher's run id (env->run_id) and the
 * restart count, so a stray process of another job, or of an earlier attempt of this one, is
 * refused. (Not the config hash: ranks with different configs must still meet, so that
 * cohort_dist_check_config can say which keys differ.) Free with g_free. */
char *cohort_dist_job_token(const CohortDistEnv *env);

/* Every rank publishes its resolved config; rank 0 compares them all (node_rank excluded) and
 * publishes a verdict. On a mismatch every rank returns COHORT_DIST_ERROR_MISMATCH with the
 * same message, naming the ranks that differ from rank 0 and the differing keys, e.g.
 * "rank 2 runs a different config from rank 0 (keys differ: learning_rate); every rank must
 * load the same config". */
gboolean cohort_dist_check_config(CohortStore *store, const CohortDistEnv *env,
                                  const CohortConfig *cfg, double timeout_s, GError **error);

G_END_DECLS

/* A small C API over libgloo (C++), used by comm-gloo.c only. Nothing here throws: every
 * gloo::Exception becomes a status code and a message. */
#pragma once

#include <stddef.h>

#include "engine/distributed/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  COHORT_GLOO_OK = 0,
  COHORT_GLOO_TIMEOUT = 1, /* a wait ran past its timeout */
  COHORT_GLOO_IO = 2,      /* a peer closed its connection or the network failed */
  COHORT_GLOO_ERROR = 3,   /* anything else */
} CohortGlooStatus;

/* The rendezvous store, as callbacks into C. Each returns 0 on success, else non-zero with a
 * malloc'ed message in *err (the shim frees it with free()). A timeout is reported with
 * return value COHORT_GLOO_TIMEOUT. */
typedef struct {
  void *user;
  int (*set)(void *user, const char *key, const void *data, size_t len, char **err);
  /* Waits up to timeout_ms for key; *data is malloc'ed (freed by the shim with free()). */
  int (*get)(void *user, const char *key, void **data, size_t *len, long timeout_ms, char **err);
  int (*wait)(void *user, const char *const *keys, size_t n_keys, long timeout_ms, char **err);
} CohortGlooStoreOps;

typedef struct CohortGloo CohortGloo;

/* Connects a full mesh of `size` ranks over TCP, bound to `hostname` (an address of this host)
 * or, when `iface` is non-NULL and non-empty, to that network interface. `ops` is copied;
 * its `user` must outlive the context. Returns a status; on failure *err is a malloc'ed
 * message. */
int cohort_gloo_new(const CohortGlooStoreOps *ops, int rank, int size, const char *hostname,
                    const char *iface, long timeout_ms, CohortGloo **out, char **err);

/* Sums `count` values of `dtype` in place (COHORT_DTYPE_BF16: the bits, uint16_t; each sum of
 * two values is computed in float32 and rounded to bfloat16, nearest, ties to even). */
int cohort_gloo_allreduce_sum(CohortGloo *g, void *buf, size_t count, CohortDtype dtype,
                              long timeout_ms, char **err);
int cohort_gloo_broadcast(CohortGloo *g, void *buf, size_t nbytes, int root, long timeout_ms,
                          char **err);
/* `send` == recv + rank × nbytes gathers in place. */
int cohort_gloo_allgather(CohortGloo *g, const void *send, size_t nbytes, void *recv,
                          long timeout_ms, char **err);
/* Reduce-scatter (sum) of counts[0] + … + counts[size − 1] values of `dtype` (F32 or BF16) in
 * `send`, which it uses as scratch: this rank's sum lands in `recv` (counts[rank] values).
 * Gloo's all-reduce of the whole buffer, this rank keeping its piece. */
int cohort_gloo_reduce_scatter_sum(CohortGloo *g, void *send, void *recv, const size_t *counts,
                                   CohortDtype dtype, long timeout_ms, char **err);
/* In-place allgatherv: `buf` holds every rank's nbytes[r] bytes back to back, this rank's
 * already in its slot. */
int cohort_gloo_allgatherv(CohortGloo *g, void *buf, const size_t *nbytes, long timeout_ms,
                           char **err);
int cohort_gloo_barrier(CohortGloo *g, long timeout_ms, char **err);
/* Ends this rank's blocked calls at once with an error (`why`, the message) and closes every
 * connection, so peers fail too. Safe from any thread while a collective runs. */
void cohort_gloo_interrupt(CohortGloo *g, const char *why);
/* Closes every connection so peers (and, at their timeout, this rank's blocked calls) fail. */
void cohort_gloo_close(CohortGloo *g);
void cohort_gloo_free(CohortGloo *g);

#ifdef __cplusplus
}
#endif

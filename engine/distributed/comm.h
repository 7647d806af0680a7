/* Collectives: the one interface through which ranks communicate.
 *
 * Backends: "local" (one process; every collective is a copy or nothing), "gloo" (CPU, TCP,
 * libgloo behind gloo-shim.cc) and, in the CUDA build, "nccl" (see comm-backend.h for how a
 * backend plugs in). No home-made reduction: the backend library does the communication.
 *
 * Every collective:
 *  - must be called by every rank, in the same order, with the same sizes (and root);
 *  - has a timeout: `timeout_s` > 0 for this call, <= 0 for the communicator's default;
 *  - returns FALSE with a GError (COHORT_DIST_ERROR) instead of hanging: a timeout
 *    (COHORT_DIST_ERROR_TIMEOUT) or a dead peer (COHORT_DIST_ERROR_PEER) gives a message that
 *    names the collective and its sequence number and, where the store can tell, the ranks
 *    that did not arrive, e.g. "all_reduce #42 (float32, 1048576 elements) timed out after
 *    30 s: ranks 2, 3 did not arrive (rank 2 last reached barrier #41)".
 * After a failed collective the communicator is broken: every later collective fails at once
 * with the first error; only cohort_comm_abort and cohort_comm_free are useful.
 *
 * Buffers are memory the backend can reach: host memory for "local" and "gloo", device memory
 * for "nccl".
 *
 * Threads: collectives of one communicator are serialized by an internal lock, so calling
 * from two threads never corrupts anything, but ranks must issue collectives in the same
 * order, which only one calling thread at a time guarantees. The intended use (DDP): one
 * communication thread issues all_reduce of gradient buckets while the main thread computes;
 * the main thread issues other collectives only while the communication thread is idle.
 * cohort_comm_abort may be called from any thread at any time, including while another
 * thread is blocked in a collective (that collective then fails with
 * COHORT_DIST_ERROR_ABORTED or COHORT_DIST_ERROR_PEER). */
#pragma once

#include <glib.h>

#include "engine/distributed/env.h"
#include "engine/distributed/store.h"

G_BEGIN_DECLS

typedef enum {
  COHORT_REDUCE_SUM,
  COHORT_REDUCE_AVG, /* sum, then divided by the world size */
} CohortReduceOp;

typedef struct _CohortComm CohortComm;

/* The communicator of a single process (rank 0 of 1). */
CohortComm *cohort_comm_new_local(void);

/* A Gloo communicator over TCP. Rendezvous goes through `store` (keys under "gloo/"); the
 * store must stay open for the communicator's life (it also records each rank's progress for
 * error messages). The transport binds to the local address that routes to
 * env->master_addr (loopback for a local master), or to the interface named by
 * GLOO_SOCKET_IFNAME when that is set. `timeout_s` is the default timeout of collectives
 * and of the connection setup. Errors: COHORT_DIST_ERROR_TIMEOUT when peers do not show up,
 * COHORT_DIST_ERROR_FAILED for transport errors. Sets SIGPIPE to be ignored when it has the
 * default action (Gloo's writes to a dead peer would otherwise kill the process). */
CohortComm *cohort_comm_new_gloo(CohortStore *store, const CohortDistEnv *env, double timeout_s,
                                 GError **error);

/* A NCCL communicator (CUDA builds with NCCL; elsewhere it fails with
 * COHORT_DIST_ERROR_FAILED, see cohort_comm_backend_available). `device` is the CUDA device
 * index of this rank (as CUDA_VISIBLE_DEVICES leaves them; usually device_indexes[LOCAL_RANK]
 * or LOCAL_RANK); every collective makes it current for the calling thread.
 *
 * Setup, all through `store` (keys under "nccl/"; it must stay open for the communicator's
 * life): each rank publishes its GPU (host name and PCI bus id) and rank 0 checks that no two
 * ranks share a GPU, so every rank fails with COHORT_DIST_ERROR_ENV naming both ranks, the
 * host and the GPU (use "gloo" to let ranks share a GPU); rank 0 creates the NCCL unique id
 * and publishes it; the communicator is created non-blocking, and setup that takes longer
 * than `timeout_s` is aborted (ncclCommAbort) with COHORT_DIST_ERROR_TIMEOUT.
 *
 * Buffers are DEVICE memory of `device` (cudaMalloc), never host memory. Collectives run on
 * a stream of the communicator's own, after the work already queued on the device's legacy
 * default stream (the stream the CUDA kernel table uses), and return when the result is in
 * the buffer. Waiting polls the stream and ncclCommGetAsyncError until the timeout, then
 * aborts the NCCL communicator: a dead or stuck peer gives an error, never a hang.
 * COHORT_REDUCE_AVG is NCCL's ncclAvg, which may scale before summing, so it can differ from
 * sum / N in the last bit. */
CohortComm *cohort_comm_new_nccl(CohortStore *store, const CohortDistEnv *env, int device,
                                 double timeout_s, GError **error);

/* Whether this build has the named backend ("local", "gloo", "nccl"): it says what was
 * built, not whether a GPU is there at run time. */
gboolean cohort_comm_backend_available(const char *name);

int cohort_comm_rank(const CohortComm *comm);
int cohort_comm_world_size(const CohortComm *comm);
/* "local", "gloo" or "nccl". */
const char *cohort_comm_backend_name(const CohortComm *comm);
/* The default timeout of collectives, in seconds. */
double cohort_comm_timeout(const CohortComm *comm);

/* In-place all-reduce of `count` values. AVG divides the sum by the world size (for float32
 * the division is done in float32 after the sum; "nccl" uses ncclAvg instead). */
gboolean cohort_comm_all_reduce_f32(CohortComm *comm, float *buf, gsize count, CohortReduceOp op,
                                    double timeout_s, GError **error);
/* The same for device buffers whose producer is not finished yet: "nccl" makes its stream wait
 * for `cuda_event` (a cudaEvent_t recorded after the work that writes `buf`) instead of for
 * all work queued so far on the legacy default stream. Other backends ignore the event (their
 * buffers are host memory, already final). */
gboolean cohort_comm_all_reduce_f32_after(CohortComm *comm, float *buf, gsize count,
                                          CohortReduceOp op, gpointer cuda_event, double timeout_s,
                                          GError **error);
gboolean cohort_comm_all_reduce_f64(CohortComm *comm, double *buf, gsize count, CohortReduceOp op,
                                    double timeout_s, GError **error);

/* In-place all-reduce of `count` bfloat16 values, given as their bits (kernels' to_bf16 makes
 * them). "gloo" adds two values at a time in float32 and rounds each sum to bfloat16 (nearest,
 * ties to even, kernels/math-inline.h's cohort_f32_to_bf16), through a reduction function it
 * hands Gloo; with two ranks the result is exactly bf16(a + b), with more the order of the
 * sums is Gloo's, and every rank gets the same bits. "nccl" uses ncclBfloat16 with ncclSum
 * (ncclAvg for AVG), NCCL's own bfloat16 sum. "local" leaves the values as they are. AVG
 * divides the bfloat16 sum by the world size in float32 and rounds to bfloat16 again (the DDP
 * reducer does not use it: it sums, then divides after converting back to float32). */
gboolean cohort_comm_all_reduce_bf16(CohortComm *comm, guint16 *buf, gsize count, CohortReduceOp op,
                                     double timeout_s, GError **error);
/* The bfloat16 all-reduce after `cuda_event`, as cohort_comm_all_reduce_f32_after. */
gboolean cohort_comm_all_reduce_bf16_after(CohortComm *comm, guint16 *buf, gsize count,
                                           CohortReduceOp op, gpointer cuda_event, double timeout_s,
                                           GError **error);

/* Copies `nbytes` of root's `buf` into every rank's `buf`. */
gboolean cohort_comm_broadcast(CohortComm *comm, void *buf, gsize nbytes, int root,
                               double timeout_s, GError **error);

/* Every rank contributes `nbytes` from `send`; `recv` (nbytes × world size, not overlapping
 * `send`) receives rank r's bytes at offset r × nbytes, on every rank. */
gboolean cohort_comm_all_gather(CohortComm *comm, const void *send, gsize nbytes, void *recv,
                                double timeout_s, GError **error);

/* All-gather in place: `buf` holds nbytes × world size bytes, rank r's contribution already at
 * offset r × nbytes; on return every rank's is in place on every rank. No second buffer, so a
 * sharded update can gather straight into the full parameter vector (ZeRO stage 1). "gloo"
 * runs Gloo's allgather without an input buffer, "nccl" ncclAllGather with sendbuff =
 * recvbuff + rank × nbytes (both in-place forms of the libraries). */
gboolean cohort_comm_all_gather_inplace(CohortComm *comm, void *buf, gsize nbytes, double timeout_s,
                                        GError **error);

/* Reduce-scatter with a count per rank (the sharded gradients of ZeRO stages 2 and 3): `send`
 * holds counts[0] + … + counts[world − 1] values on every rank; rank r receives in `recv`
 * (counts[r] values) the sum over all ranks of the values at offset counts[0] + … +
 * counts[r − 1] of their `send`; AVG divides that sum by the world size (float32: in float32
 * after the sum, as the all-reduce does; "nccl": ncclAvg). Counts may differ and may be 0;
 * every rank passes the same counts. `send` is scratch: its values are undefined afterwards
 * (Gloo reduces in it). `recv` must not overlap `send`.
 *  - "gloo": Gloo's all-reduce of the whole `send` (its ring, as the DDP buckets'), this rank
 *    keeping its piece: twice the bytes an ideal reduce-scatter sends, the bytes stage 0's
 *    all-reduce sends. Gloo's own reduce-scatter (ReduceScatterHalvingDoubling) is not used:
 *    with uneven pieces on 3 ranks its results changed from run to run. So every value is the
 *    all-reduce's of the same buffer, bit for bit, whatever the number of ranks;
 *  - "nccl": ncclReduceScatter when every count is the same, else one ncclReduce per rank
 *    (rank r the root of its piece) in a group;
 *  - "local": a copy. */
gboolean cohort_comm_reduce_scatter_f32(CohortComm *comm, float *send, float *recv,
                                        const gsize *counts, CohortReduceOp op, double timeout_s,
                                        GError **error);
/* The same for bfloat16 bits: every sum of two values is computed in float32 and rounded to
 * bfloat16 (as cohort_comm_all_reduce_bf16), so with 2 ranks each value is exactly
 * bf16(a + b). */
gboolean cohort_comm_reduce_scatter_bf16(CohortComm *comm, guint16 *send, guint16 *recv,
                                         const gsize *counts, CohortReduceOp op, double timeout_s,
                                         GError **error);

/* All-gather with a count per rank, in place (the parameter gathers of ZeRO stages 2 and 3):
 * `buf` holds nbytes[0] + … + nbytes[world − 1] bytes, rank r's own already at offset
 * nbytes[0] + … + nbytes[r − 1]; on return every rank's bytes are in place on every rank.
 * Counts may differ and may be 0; every rank passes the same. "gloo": Gloo's allgatherv (a
 * ring) without an input buffer; "nccl": ncclAllGather in place when every count is the same,
 * else one ncclBroadcast per rank (rank r the root of its piece) in a group. */
gboolean cohort_comm_all_gather_v(CohortComm *comm, void *buf, const gsize *nbytes,
                                  double timeout_s, GError **error);

/* Returns once every rank has entered the barrier. */
gboolean cohort_comm_barrier(CohortComm *comm, double timeout_s, GError **error);

/* ---- where a hang is (docs/launching.md, "Where a hang is") ---- */

/* The label of the calling thread's next collectives, such as "bucket 2 of 4" or "SyncBatchNorm
 * layer 3 (forward)", until changed; NULL clears it. Copied (at most 47 bytes). It names the
 * collective in hang reports and error messages. */
void cohort_comm_set_label(const char *label);

/* A rank's state as its heartbeat last published it (at most one heartbeat interval old). */
typedef struct {
  int rank;
  gboolean known;   /* a record was found */
  gboolean arrived; /* in a report: the rank reached the collective the others wait in */
  gint64 step;      /* optimizer steps done */
  char phase[16];   /* engine/base/phase.h's name: "forward", "checkpoint", … */
  double phase_s;   /* seconds in that phase */
  guint64 ticks;    /* progress ticks of that phase */
  guint64 changes;  /* grows with every phase, tick and step */
  char cur_kind[16];
  guint64 cur_seq; /* the collective it is in; 0 = none */
  char cur_label[48];
  double cur_wait_s; /* how long it has waited in it */
  char last_kind[16];
  guint64 last_seq; /* the last collective it completed; 0 = none yet */
  char last_label[48];
  /* Read by global rank 0 only (its store times the records; elsewhere age_s is -1): how
   * long ago the rank last published the record, and whether that is so long that its
   * heartbeat has stopped (the process is stopped, or it lost the store), so the record is
   * stale and its times are as they were then. */
  double age_s;
  gboolean silent;
} CohortRankRecord;

/* "rank 1 last completed all_reduce #41 (step vote), in forward for 12 s at step 7" (and
 * "waits in …" when it is in a collective, and "; its heartbeat has been silent for 9 s …"
 * when it is). */
char *cohort_rank_record_describe(const CohortRankRecord *record);

/* What global rank 0 reports when a collective has waited past the hang threshold. */
typedef struct {
  guint64 seq; /* the collective the waiting ranks are in */
  char kind[16];
  char label[48];
  double waited_s;   /* the longest wait in it so far */
  double timeout_s;  /* the time without progress after which the waiting ranks fail */
  gboolean resolved; /* the last report of this wait: every rank arrived */
  int n_ranks;
  const CohortRankRecord *ranks; /* every rank, in rank order, `arrived` set */
  int n_missing;
} CohortHangReport;

/* Called on global rank 0's heartbeat thread (never another rank's): a collective has waited
 * `report_s`, again every `report_s` while it waits, and once with `resolved` when it completes.
 * The report is valid during the call only. */
typedef void (*CohortHangFunc)(const CohortHangReport *report, gpointer user);

/* Sets the hang threshold and the function (NULL: no reports; `report_s` <= 0 likewise). Every
 * rank of a job should call it with the same threshold: it is also when a waiting rank starts
 * watching the others' progress (or half its timeout, if that is sooner). */
void cohort_comm_set_hang_report(CohortComm *comm, double report_s, CohortHangFunc func,
                                 gpointer user);

/* Breaks the communicator: pending and later collectives on this rank fail, peers blocked in
 * a collective with this rank fail soon after (their connections close), and `reason` is
 * recorded in the store so peers' errors can quote it. Safe from any thread; idempotent. */
void cohort_comm_abort(CohortComm *comm, const char *reason);

/* Frees the communicator (closing connections). Not while another thread is inside a
 * collective: abort first and join that thread. NULL is allowed. */
void cohort_comm_free(CohortComm *comm);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortComm, cohort_comm_free)

G_END_DECLS

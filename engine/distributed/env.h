/* Rank discovery: who this process is in a distributed job, read from the environment that
 * launched it.
 *
 * Sources, first match wins:
 *  1. torchrun / cohort-run: RANK and WORLD_SIZE (then LOCAL_RANK, LOCAL_WORLD_SIZE,
 *     GROUP_RANK, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT). When only RANK and
 *     WORLD_SIZE are set (PyTorch's env:// style), LOCAL_RANK defaults to RANK,
 *     LOCAL_WORLD_SIZE to WORLD_SIZE and GROUP_RANK to 0. Under torchrun's static rendezvous
 *     (TORCHELASTIC_USE_AGENT_STORE=True) torchrun's agent already listens on MASTER_PORT,
 *     so Cohort's store uses MASTER_PORT + 1.
 *  2. SLURM (srun): SLURM_PROCID and SLURM_NTASKS (then SLURM_LOCALID, SLURM_NODEID).
 *     local_world_size is this node's entry of SLURM_TASKS_PER_NODE ("4(x2),3"), else
 *     SLURM_NTASKS_PER_NODE, else SLURM_NTASKS / SLURM_NNODES when that divides evenly.
 *     master_addr is MASTER_ADDR when set, else the first host of SLURM_NODELIST (or
 *     SLURM_JOB_NODELIST) with bracket ranges expanded; master_port is MASTER_PORT when set,
 *     else 20000 + SLURM_JOB_ID % 20000, so every task of one job derives the same port.
 *     restart_count is SLURM_RESTART_COUNT (a requeued job), else 0.
 *  3. Open MPI (mpirun): OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE (then
 *     OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE). group_rank is
 *     rank / local_world_size (mpirun's default by-slot mapping). master_addr is MASTER_ADDR
 *     (pass it with `mpirun -x MASTER_ADDR=host`), else 127.0.0.1 when all ranks are on one
 *     node; master_port is MASTER_PORT, else 20000 + OMPI_MCA_ess_base_jobid % 20000.
 *  4. Otherwise one process: rank 0 of 1, source "single", master 127.0.0.1 port 0.
 *
 * The job secret, from which every rank derives the store's job token
 * (cohort_dist_job_token), comes from COHORT_JOB_TOKEN when it is set (cohort-run and spawn
 * mode set a random one on a single node; on several nodes the user sets the same one on
 * every node). Otherwise it is derived from what every rank of the job sees alike: Open MPI's
 * per-job random key (OMPI_MCA_orte_precondition_transports, a real secret); else, weaker,
 * TORCHELASTIC_RUN_ID, or SLURM's job id, user id, node list, submit directory and job name,
 * which another user of the cluster could find out. secret_source tells which.
 *
 * Every number must be a plain decimal integer; anything inconsistent (rank >= world size,
 * local rank >= local world size, a local world larger than the world, no master address or
 * port with more than one process, a port outside 1..65535) is an error that names the
 * variable, its value and what is allowed. */
#pragma once

#include <glib.h>

#include "engine/base/secret.h"

G_BEGIN_DECLS

/* The error domain of the whole distributed layer (env, store, comm, launcher). */
#define COHORT_DIST_ERROR (cohort_dist_error_quark())
GQuark cohort_dist_error_quark(void);

typedef enum {
  COHORT_DIST_ERROR_ENV,         /* bad or inconsistent launch environment */
  COHORT_DIST_ERROR_ADDR_IN_USE, /* the store's port is taken; the message suggests a free one */
  COHORT_DIST_ERROR_CONNECT,     /* the store could not be reached in time */
  COHORT_DIST_ERROR_REFUSED,     /* the store refused us: wrong job token, or oversized message */
  COHORT_DIST_ERROR_OTHER_JOB,   /* the store on this port serves another job (its job id or
                                  * secret differs): waiting cannot help */
  COHORT_DIST_ERROR_TIMEOUT,     /* a wait or a collective ran past its timeout */
  COHORT_DIST_ERROR_PEER,        /* a peer died or closed the connection */
  COHORT_DIST_ERROR_MISMATCH,    /* ranks run different configs */
  COHORT_DIST_ERROR_INVALID,     /* bad argument (size, root, key) */
  COHORT_DIST_ERROR_ABORTED,     /* the communicator was aborted */
  COHORT_DIST_ERROR_FAILED,      /* anything else (system call, backend) */
} CohortDistErrorCode;

/* The variable that passes the launcher's listening sockets to rank 0 ("3,4"), and how many. */
#define COHORT_STORE_FDS_VAR "COHORT_STORE_FDS"
#define COHORT_STORE_MAX_FDS 8

/* Where this process sits in the job. */
typedef struct {
  int rank;             /* global rank, 0 .. world_size-1 */
  int local_rank;       /* rank on this node; picks the GPU */
  int world_size;       /* number of processes in the job */
  int local_world_size; /* processes on this node */
  int group_rank;       /* node index (torchrun's GROUP_RANK) */
  char *master_addr;    /* host of global rank 0's store; a name or an IPv4/IPv6 address */
  int master_port;      /* the store's TCP port (0 only for a single process) */
  int restart_count;    /* how many times the launcher restarted the group */
  char *run_id;         /* TORCHELASTIC_RUN_ID, SLURM_JOB_ID or Open MPI's job id; else "none" */
  const char *source;   /* static: "torchrun", "slurm", "mpi" or "single" */
  char *job_secret;     /* see above; never printed. NULL = none (the token is then
                         * derived from run_id alone) */
  const char *secret_source; /* static: "COHORT_JOB_TOKEN", "Open MPI's job key", or NULL
                              * when the secret is only derived from guessable job ids */
  /* The store's listening sockets that the launcher bound and holds for the whole job
   * (COHORT_STORE_FDS, given to global rank 0 only): rank 0 serves on them instead of binding,
   * so no other job can take the port between the launcher's check and rank 0's bind. */
  int store_fds[COHORT_STORE_MAX_FDS];
  int n_store_fds;
} CohortDistEnv;

/* The shortest COHORT_JOB_TOKEN accepted, in bytes (a random one has 32 hex digits). */
#define COHORT_JOB_TOKEN_MIN 16

/* Reads the environment in `envp` (as g_get_environ() returns it; NULL = the process's own
 * environment). Returns NULL with COHORT_DIST_ERROR_ENV on an inconsistent environment. */
CohortDistEnv *cohort_dist_env_from_environ(const char *const *envp, GError **error);

/* A single-process env (rank 0 of 1). */
CohortDistEnv *cohort_dist_env_new_single(void);

CohortDistEnv *cohort_dist_env_copy(const CohortDistEnv *env);
void cohort_dist_env_free(CohortDistEnv *env);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortDistEnv, cohort_dist_env_free)

/* The token ranks present to the rendezvous store: two HMAC-SHA256s keyed with
 * env->job_secret, in hex, joined by a dot: one of the job (its run id), one of the job and
 * the attempt (the restart count). Unguessable when the secret is (so anyone who can reach the
 * port but does not hold the secret is refused), and different for each restart of the group,
 * so a stray rank of an earlier attempt is refused too; the job half lets the store tell a
 * rank of another job ("this store belongs to another job", refused at once) from one of
 * another attempt of its own (which waits for its attempt's store). The launcher draws a
 * random run id for each job on one node, so two jobs that share a secret and a port still
 * differ. (Not the config hash: ranks with different configs must still meet, so that
 * cohort_dist_check_config can say which keys differ.) Free with g_free; never print it. */
char *cohort_dist_job_token(const CohortDistEnv *env);

/* A fresh job secret (cohort_secret_new); NULL with COHORT_DIST_ERROR_FAILED when the
 * kernel's random source is not available. */
char *cohort_dist_new_secret(GError **error);

/* Checks a COHORT_JOB_TOKEN value: COHORT_JOB_TOKEN_MIN to 4096 bytes, no control
 * characters. The error (COHORT_DIST_ERROR_ENV) says what is wrong without the value. */
gboolean cohort_dist_check_secret(const char *secret, GError **error);

/* Expands a SLURM host list such as "node[01-03,07],gpu5" into
 * {"node01","node02","node03","node07","gpu5",NULL}; zero padding of a range is kept.
 * `variable` names the source in error messages. NULL with COHORT_DIST_ERROR_ENV on bad
 * syntax (unbalanced brackets, a reversed range, an empty list). */
GStrv cohort_dist_expand_nodelist(const char *nodelist, const char *variable, GError **error);

/* Parses SLURM_TASKS_PER_NODE ("2(x3),1") and returns the task count of node `node_id`,
 * or -1 with COHORT_DIST_ERROR_ENV when the text is malformed or too short. */
int cohort_dist_tasks_on_node(const char *tasks_per_node, int node_id, GError **error);

G_END_DECLS

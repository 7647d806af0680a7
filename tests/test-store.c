/* The rendezvous store over loopback: operations, timeouts, token, limits, port in use,
 * late server, lost server, a server that stops answering, the config check between ranks, a nested
 * config value, the ranks a rendezvous timeout names, the address a job's store binds, and the job
 * token. (The server's connection limits: test-store-limits.c.) */
#include "engine/distributed/store.h"
#include "store-raw.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static void test_operations(void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortStoreServer) server =
      cohort_store_server_new("127.0.0.1", 0, "tok", NULL, &error);
  g_assert_no_error(error);
  int port = cohort_store_server_port(server);
  g_assert_cmpint(port, >, 0);
  g_autoptr(CohortStore) a = cohort_store_connect("127.0.0.1", port, "tok", 5, &error);
  g_assert_no_error(error);
  g_autoptr(CohortStore) b = cohort_store_connect("localhost", port, "tok", 5, &error);
  g_assert_no_error(error);

  g_assert_true(cohort_store_set(a, "k", "hello", 5, &error));
  g_autoptr(GBytes) v = cohort_store_get(b, "k", 1, &error);
  g_assert_no_error(error);
  g_assert_cmpmem(g_bytes_get_data(v, NULL), g_bytes_get_size(v), "hello", 5);
  g_assert_true(cohort_store_set(b, "k", "", 0, &error));
  g_autoptr(GBytes) empty = cohort_store_get(a, "k", 1, &error);
  g_assert_cmpuint(g_bytes_get_size(empty), ==, 0);

  gint64 r = 0;
  g_assert_true(cohort_store_add(a, "n", 5, &r, &error));
  g_assert_cmpint(r, ==, 5);
  g_assert_true(cohort_store_add(b, "n", -7, &r, &error));
  g_assert_cmpint(r, ==, -2);
  g_autoptr(GBytes) n = cohort_store_get(a, "n", 1, &error);
  g_assert_cmpmem(g_bytes_get_data(n, NULL), g_bytes_get_size(n), "-2", 2);
  /* add on a non-integer value is refused, and the refusal closes that connection */
  g_autoptr(CohortStore) c = cohort_store_connect("127.0.0.1", port, "tok", 5, &error);
  g_assert_true(cohort_store_set(c, "txt", "abc", 3, &error));
  g_assert_false(cohort_store_add(c, "txt", 1, NULL, &error));
  g_assert_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_REFUSED);
  g_assert_nonnull(strstr(error->message, "txt"));
  g_clear_error(&error);

  gboolean exists = TRUE;
  g_assert_true(cohort_store_check(b, "absent", &exists, &error));
  g_assert_false(exists);
  g_assert_null(cohort_store_try_get(b, "absent", &error));
  g_assert_no_error(error);
  g_assert_true(cohort_store_delete(b, "n", &error));
  g_assert_true(cohort_store_check(b, "n", &exists, &error));
  g_assert_false(exists);

  /* binary values survive */
  guint8 bin[256];
  for (int i = 0; i < 256; i++)
    bin[i] = (guint8)i;
  g_assert_true(cohort_store_set(b, "bin", bin, sizeof bin, &error));
  g_autoptr(GBytes) bv = cohort_store_get(b, "bin", 1, &error);
  g_assert_cmpmem(g_bytes_get_data(bv, NULL), g_bytes_get_size(bv), bin, sizeof bin);
}

static gpointer set_later(gpointer data)
{
  g_usleep(200 * 1000);
  g_autoptr(GError) error = NULL;
  cohort_store_set(data, "late", "1", 1, &error);
  g_assert_no_error(error);
  return NULL;
}

static void test_wait_and_timeouts(void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortStoreServer) server = cohort_store_server_new(NULL, 0, "", NULL, &error);
  g_assert_no_error(error);
  int port = cohort_store_server_port(server);
  g_autoptr(CohortStore) a = cohort_store_connect("127.0.0.1", port, "", 5, &error);
  g_autoptr(CohortStore) b = cohort_store_connect("::1", port, "", 5, &error);
  if (b == NULL) {
    g_test_message("no IPv6 loopback: %s", error->message);
    g_clear_error(&error);
    b = cohort_store_connect("127.0.0.1", port, "", 5, &error);
  }
  g_assert_no_error(error);

  GThread *t = g_thread_new("setter", set_later, b);
  const char *keys[] = {"late", NULL};
  gint64 t0 = g_get_monotonic_time();
  g_assert_true(cohort_store_wait(a, keys, 5, &error));
  g_assert_no_error(error);
  g_assert_cmpint(g_get_monotonic_time() - t0, <, 3 * G_USEC_PER_SEC);
  g_thread_join(t);

  t0 = g_get_monotonic_time();
  g_assert_null(cohort_store_get(a, "never", 0.3, &error));
  gint64 took = g_get_monotonic_time() - t0;
  g_assert_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_TIMEOUT);
  g_assert_nonnull(strstr(error->message, "\"never\""));
  g_assert_cmpint(took, >=, 250000);
  g_assert_cmpint(took, <, 2 * G_USEC_PER_SEC);
  g_clear_error(&error);

  const char *keys2[] = {"late", "missing-a", "missing-b", NULL};
  g_assert_false(cohort_store_wait(a, keys2, 0.2, &error));
  g_assert_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_TIMEOUT);
  g_assert_nonnull(strstr(error->message, "missing-a"));
  g_assert_nonnull(strstr(error->message, "missing-b"));
  g_assert_null(strstr(error->message, "\"late\""));
}

static void test_wrong_token(void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortStoreServer) server = cohort_store_server_new(NULL, 0, "job-a", NULL, &error);
  g_assert_no_error(error);
  int port = cohort_store_server_port(server);
  gint64 t0 = g_get_monotonic_time();
  g_autoptr(CohortStore) c = cohort_store_connect("127.0.0.1", port, "job-b", 5, &error);
  g_assert_null(c);
  g_assert_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_REFUSED);
  g_assert_nonnull(strstr(error->message, "token"));
  /* refused at once, not retried until the timeout */
  g_assert_cmpint(g_get_monotonic_time() - t0, <, 2 * G_USEC_PER_SEC);
}

typedef struct {
  CohortDistEnv env;
  CohortStore *store;
  GError *error;
} OpenArgs;

static gpointer open_store(gpointer data)
{
  OpenArgs *a = data;
  a->store = cohort_store_open(&a->env, "attempt-1", 10, &a->error);
  return NULL;
}

/* A rank of a restarted group meets the store of the attempt before, still there: it waits
 * for its own instead of failing; a rank of a first attempt is refused at once. */
static void test_stale_store_after_restart(void)
{
  g_autoptr(GError) error = NULL;
  CohortStoreServer *stale = cohort_store_server_new("127.0.0.1", 0, "attempt-0", NULL, &error);
  g_assert_no_error(error);
  int port = cohort_store_server_port(stale);
  OpenArgs first = {.env = {.rank = 1,
                            .world_size = 2,
                            .local_world_size = 1,
                            .master_addr = "127.0.0.1",
                            .master_port = port}};
  gint64 t0 = g_get_monotonic_time();
  open_store(&first);
  g_assert_null(first.store);
  g_assert_error(first.error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_REFUSED);
  g_assert_cmpint(g_get_monotonic_time() - t0, <, 2 * G_USEC_PER_SEC);
  g_clear_error(&first.error);

  OpenArgs again = first;
  again.env.restart_count = 1;
  GThread *t = g_thread_new("restarted", open_store, &again);
  g_usleep(500 * 1000);
  cohort_store_server_free(stale);
  g_autoptr(CohortStoreServer) fresh =
      cohort_store_server_new("127.0.0.1", port, "attempt-1", NULL, &error);
  g_assert_no_error(error);
  g_thread_join(t);
  g_assert_no_error(again.error);
  g_assert_nonnull(again.store);
  cohort_store_free(again.store);
}

/* A rank of another job (another run id, the same secret) that reaches this store is told
 * the store belongs to another job, at once even where it would wait for a restarted store;
 * a rank of another attempt of the same job still waits; the store's own job goes on. */
static void test_other_job(void)
{
  CohortDistEnv a = {.rank = 0,
                     .world_size = 2,
                     .local_world_size = 1,
                     .master_addr = (char *)"127.0.0.1",
                     .run_id = (char *)"job-a",
                     .job_secret = (char *)"0123456789abcdef0123"};
  CohortDistEnv b = a;
  b.run_id = (char *)"job-b";
  g_autofree char *token_a = cohort_dist_job_token(&a);
  g_autofree char *token_b = cohort_dist_job_token(&b);
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortStoreServer) server =
      cohort_store_server_new("127.0.0.1", 0, token_a, NULL, &error);
  g_assert_no_error(error);
  int port = cohort_store_server_port(server);
  g_autoptr(CohortStore) mine = cohort_store_connect("127.0.0.1", port, token_a, 5, &error);
  g_assert_no_error(error);
  g_assert_true(cohort_store_set(mine, "k", "v", 1, &error));

  /* Job B's rank 1 of a restarted group: it would wait for its own store, but this one is
   * another job's. */
  b.rank = 1;
  b.master_port = port;
  b.restart_count = 1;
  g_autofree char *token_b1 = cohort_dist_job_token(&b);
  gint64 t0 = g_get_monotonic_time();
  g_autoptr(CohortStore) stray = cohort_store_open(&b, token_b1, 10, &error);
  g_assert_null(stray);
  g_test_message("%s", error->message);
  g_assert_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_OTHER_JOB);
  g_assert_nonnull(strstr(error->message, "belongs to another job"));
  g_assert_cmpint(g_get_monotonic_time() - t0, <, 2 * G_USEC_PER_SEC);
  g_clear_error(&error);
  g_assert_null(cohort_store_connect("127.0.0.1", port, token_b, 5, &error));
  g_assert_nonnull(strstr(error->message, "belongs to another job"));
  g_clear_error(&error);

  /* Job A's next attempt: "another attempt of this job", not another job. */
  a.restart_count = 1;
  g_autofree char *token_a1 = cohort_dist_job_token(&a);
  g_assert_null(cohort_store_connect("127.0.0.1", port, token_a1, 5, &error));
  g_assert_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_REFUSED);
  g_assert_nonnull(strstr(error->message, "another attempt of this job"));
  g_clear_error(&error);

  g_autoptr(GBytes) v = cohort_store_get(mine, "k", 5, &error);
  g_assert_no_error(error);
  g_assert_cmpmem(g_bytes_get_data(v, NULL), g_bytes_get_size(v), "v", 1);
}

/* Speaks the wire protocol by hand to send what a correct client never sends. */
static int raw_connect(int port, const char *token)
{
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_port = htons((guint16)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  g_assert_cmpint(connect(fd, (struct sockaddr *)&a, sizeof a), ==, 0);
  guint8 hello[12] = {'C', 'H', 'S', 'T', 0, 0, 0, 2, 0, 0, 0, (guint8)strlen(token)};
  g_assert_cmpint(write(fd, hello, 12), ==, 12);
  g_assert_cmpint(write(fd, token, strlen(token)), ==, (gssize)strlen(token));
  guint8 resp[16];
  g_assert_cmpint(recv(fd, resp, 16, MSG_WAITALL), ==, 16);
  g_assert_cmpint(resp[0], ==, 0);
  return fd;
}

/* Sends a request header and returns the server's status and message. */
static int raw_request(int fd, guint8 op, guint32 key_len, guint64 val_len, char **message)
{
  guint8 hdr[16] = {op, 0, 0, 0};
  guint32 k = GUINT32_TO_BE(key_len);
  guint64 v = GUINT64_TO_BE(val_len);
  memcpy(hdr + 4, &k, 4);
  memcpy(hdr + 8, &v, 8);
  g_assert_cmpint(write(fd, hdr, 16), ==, 16);
  guint8 resp[16];
  g_assert_cmpint(recv(fd, resp, 16, MSG_WAITALL), ==, 16);
  guint64 len;
  memcpy(&len, resp + 8, 8);
  len = GUINT64_FROM_BE(len);
  g_assert_cmpuint(len, <, 4096);
  *message = g_malloc0(len + 1);
  g_assert_cmpint(recv(fd, *message, len, MSG_WAITALL), ==, (gssize)len);
  /* the server closes after a refusal */
  char c;
  g_assert_cmpint(recv(fd, &c, 1, 0), ==, 0);
  return resp[0];
}

static void test_oversized(void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortStoreServer) server = cohort_store_server_new(NULL, 0, "t", NULL, &error);
  g_assert_no_error(error);
  int port = cohort_store_server_port(server);

  int fd = raw_connect(port, "t");
  g_autofree char *msg = NULL;
  g_assert_cmpint(raw_request(fd, 1, 3, (guint64)COHORT_STORE_MAX_VALUE + 1, &msg), ==, 2);
  g_assert_nonnull(strstr(msg, "64 MiB"));
  close(fd);

  fd = raw_connect(port, "t");
  g_autofree char *msg2 = NULL;
  g_assert_cmpint(raw_request(fd, 2, COHORT_STORE_MAX_KEY + 1, 0, &msg2), ==, 2);
  g_assert_nonnull(strstr(msg2, "1024"));
  close(fd);

  /* the client refuses before sending, too */
  g_autoptr(CohortStore) c = cohort_store_connect("127.0.0.1", port, "t", 5, &error);
  g_assert_no_error(error);
  char small[4] = "abc";
  g_assert_false(cohort_store_set(c, "k", small, (gsize)COHORT_STORE_MAX_VALUE + 1, &error));
  g_assert_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_INVALID);
  g_clear_error(&error);
  g_autofree char *long_key = g_strnfill(COHORT_STORE_MAX_KEY + 1, 'k');
  g_assert_false(cohort_store_set(c, long_key, "v", 1, &error));
  g_assert_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_INVALID);
  g_clear_error(&error);
  /* and the connection is still good */
  g_assert_true(cohort_store_set(c, "k", "v", 1, &error));
  g_assert_no_error(error);
}

static void test_port_taken(void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortStoreServer) first = cohort_store_server_new(NULL, 0, "", NULL, &error);
  g_assert_no_error(error);
  int port = cohort_store_server_port(first);
  g_autoptr(CohortStoreServer) second = cohort_store_server_new(NULL, port, "", NULL, &error);
  g_assert_null(second);
  g_assert_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_ADDR_IN_USE);
  g_autofree char *port_s = g_strdup_printf("port %d", port);
  g_assert_nonnull(strstr(error->message, port_s));
  const char *hint = strstr(error->message, "--master-port ");
  g_assert_nonnull(hint);
  int suggested = atoi(hint + strlen("--master-port "));
  g_assert_cmpint(suggested, >, 0);
  g_assert_cmpint(suggested, !=, port);
  g_clear_error(&error);
  /* the suggestion really is free */
  g_autoptr(CohortStoreServer) third = cohort_store_server_new(NULL, suggested, "", NULL, &error);
  g_assert_no_error(error);
}

typedef struct {
  int port;
  CohortStore *store;
  GError *error;
} LateArgs;

static gpointer connect_early(gpointer data)
{
  LateArgs *a = data;
  a->store = cohort_store_connect("localhost", a->port, "x", 10, &a->error);
  return NULL;
}

static void test_server_starts_later(void)
{
  int port = cohort_store_find_free_port(0);
  g_assert_cmpint(port, >, 0);
  LateArgs args = {port, NULL, NULL};
  GThread *t = g_thread_new("client", connect_early, &args);
  g_usleep(400 * 1000);
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortStoreServer) server = cohort_store_server_new(NULL, port, "x", NULL, &error);
  g_assert_no_error(error);
  g_thread_join(t);
  g_assert_no_error(args.error);
  g_assert_nonnull(args.store);
  g_assert_true(cohort_store_set(args.store, "a", "b", 1, &error));
  cohort_store_free(args.store);
}

static void test_unreachable_and_lost(void)
{
  g_autoptr(GError) error = NULL;
  int port = cohort_store_find_free_port(0);
  gint64 t0 = g_get_monotonic_time();
  g_assert_null(cohort_store_connect("127.0.0.1", port, "", 0.5, &error));
  g_assert_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_CONNECT);
  g_autofree char *where = g_strdup_printf("127.0.0.1:%d", port);
  g_assert_nonnull(strstr(error->message, where));
  g_assert_cmpint(g_get_monotonic_time() - t0, <, 3 * G_USEC_PER_SEC);
  g_clear_error(&error);

  CohortStoreServer *server = cohort_store_server_new(NULL, 0, "", NULL, &error);
  g_autoptr(CohortStore) c =
      cohort_store_connect("127.0.0.1", cohort_store_server_port(server), "", 5, &error);
  g_assert_no_error(error);
  cohort_store_server_free(server);
  g_assert_false(cohort_store_set(c, "k", "v", 1, &error));
  g_assert_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_PEER);
}

/* ---- a store that does not answer (issue 33: rank 0 stopped) ---- */

/* A store server in a child process, so that the test can stop it as a paused rank 0 is: its
 * port stays open and the kernel accepts, but nothing answers. Returns the child's pid. */
static GPid silent_server(int *port)
{
  int p[2];
  g_assert_cmpint(pipe(p), ==, 0);
  GPid pid = fork();
  g_assert_cmpint(pid, >=, 0);
  if (pid == 0) {
    close(p[0]);
    CohortStoreServer *server = cohort_store_server_new("127.0.0.1", 0, "tok", NULL, NULL);
    int bound = server ? cohort_store_server_port(server) : 0;
    if (write(p[1], &bound, sizeof bound) != sizeof bound)
      _exit(1);
    for (;;)
      pause();
  }
  close(p[1]);
  g_assert_cmpint(read(p[0], port, sizeof *port), ==, sizeof *port);
  close(p[0]);
  g_assert_cmpint(*port, >, 0);
  return pid;
}

typedef struct {
  CohortStore *store;
  GError *error;
  double took;
} SlowGet;

static gpointer get_blocked(gpointer data)
{
  SlowGet *g = data;
  gint64 t0 = g_get_monotonic_time();
  GBytes *b = cohort_store_try_get(g->store, "k", &g->error);
  g->took = (double)(g_get_monotonic_time() - t0) / G_USEC_PER_SEC;
  if (b != NULL)
    g_bytes_unref(b);
  return NULL;
}

static void count_slow(const char *where, double waited_s, gpointer user)
{
  (void)where;
  double *calls = user;
  calls[0] += 1;
  calls[1] = waited_s;
}

static double since(gint64 t0)
{
  return (double)(g_get_monotonic_time() - t0) / G_USEC_PER_SEC;
}

/* Every request to a store that stopped answering ends at the connection's bound (5 s) with
 * COHORT_STORE_SILENT, and breaks it; another thread's request waits its own bound only and
 * breaks nothing; the slow function is told once; a later request fails at once; a new
 * connection's hello gives up at the connect timeout, saying why. */
static void test_silent_server(void)
{
  int port = 0;
  GPid child = silent_server(&port);
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortStore) c = cohort_store_connect("127.0.0.1", port, "tok", 5, &error);
  g_assert_no_error(error);
  g_assert_true(cohort_store_set(c, "k", "v", 1, &error));
  double calls[2] = {0, 0};
  cohort_store_set_slow_func(c, 1.0, count_slow, calls);
  g_assert_cmpint(kill(child, SIGSTOP), ==, 0);
  /* Stopped for sure before the requests below (kill only queues the signal). */
  int status = 0;
  g_assert_cmpint(waitpid(child, &status, WUNTRACED), ==, child);
  g_assert_true(WIFSTOPPED(status));

  SlowGet blocked = {.store = c};
  GThread *th = g_thread_new("blocked-get", get_blocked, &blocked);
  /* The thread's request has been waiting a while (polled: a loaded machine may start the
   * thread late; its request ends at the 5 s bound). */
  for (int i = 0; i < 60 && cohort_store_waiting_s(c) <= 0.1; i++)
    g_usleep(50000);
  g_assert_cmpfloat(cohort_store_waiting_s(c), >, 0.1);
  gint64 t0 = g_get_monotonic_time();
  g_assert_null(cohort_store_try_get_within(c, "k", 1.0, &error));
  double waited = since(t0);
  g_test_message("behind the blocked request: %.2f s: %s", waited, error->message);
  g_assert_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_TIMEOUT);
  g_assert_true(g_str_has_prefix(error->message, COHORT_STORE_SILENT));
  g_assert_cmpfloat(waited, >=, 0.9);
  g_assert_cmpfloat(waited, <, 3);
  g_assert_false(cohort_store_is_broken(c, NULL));
  g_clear_error(&error);

  g_thread_join(th);
  g_test_message("the blocked request: %.2f s: %s", blocked.took, blocked.error->message);
  g_assert_error(blocked.error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_TIMEOUT);
  g_assert_true(g_str_has_prefix(blocked.error->message, COHORT_STORE_SILENT));
  g_autofree char *where = g_strdup_printf("127.0.0.1:%d in 5 s", port);
  g_assert_nonnull(strstr(blocked.error->message, where));
  g_assert_cmpfloat(blocked.took, >=, 4.9);
  g_assert_cmpfloat(blocked.took, <, 8);
  g_clear_error(&blocked.error);
  g_assert_cmpfloat(calls[0], ==, 1);
  g_assert_cmpfloat(calls[1], >=, 1.0);
  g_assert_cmpfloat(cohort_store_waiting_s(c), ==, 0);

  g_assert_true(cohort_store_is_broken(c, &error));
  g_assert_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_TIMEOUT);
  g_clear_error(&error);
  t0 = g_get_monotonic_time();
  g_assert_false(cohort_store_set(c, "k", "w", 1, &error));
  g_assert_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_TIMEOUT);
  g_assert_cmpfloat(since(t0), <, 0.5);
  g_clear_error(&error);

  t0 = g_get_monotonic_time();
  g_assert_null(cohort_store_connect("127.0.0.1", port, "tok", 2, &error));
  g_test_message("a new connection: %.2f s: %s", since(t0), error->message);
  g_assert_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_CONNECT);
  g_assert_nonnull(strstr(error->message, COHORT_STORE_SILENT));
  g_assert_cmpfloat(since(t0), <, 6);

  kill(child, SIGKILL);
  kill(child, SIGCONT);
  g_assert_cmpint(waitpid(child, NULL, 0), ==, child);
}

typedef struct {
  CohortDistEnv env;
  CohortConfig *cfg;
  CohortStore *store;
  gboolean ok;
  GError *error;
} Rank;

static gpointer check_rank(gpointer data)
{
  Rank *r = data;
  r->ok = cohort_dist_check_config(r->store, &r->env, r->cfg, 10, &r->error);
  return NULL;
}

/* Three "ranks" in threads, each with its own connection. */
static void run_check(double lr2, int node_rank2, gboolean *ok, GError **errors)
{
  g_autoptr(GError) error = NULL;
  CohortDistEnv env0 = {.rank = 0,
                        .world_size = 3,
                        .local_world_size = 3,
                        .master_addr = (char *)"127.0.0.1",
                        .run_id = (char *)"t"};
  env0.master_port = cohort_store_find_free_port(0);
  Rank ranks[3];
  for (int r = 0; r < 3; r++) {
    ranks[r] = (Rank){.env = env0};
    ranks[r].env.rank = r;
    ranks[r].env.local_rank = r;
    ranks[r].cfg = cohort_config_new();
  }
  ranks[2].cfg->learning_rate = lr2;
  ranks[2].cfg->node_rank = node_rank2;
  g_autofree char *token = cohort_dist_job_token(&env0);
  for (int r = 0; r < 3; r++) {
    ranks[r].store = cohort_store_open(&ranks[r].env, token, 10, &error);
    g_assert_no_error(error);
  }
  GThread *t[3];
  for (int r = 0; r < 3; r++)
    t[r] = g_thread_new("rank", check_rank, &ranks[r]);
  for (int r = 0; r < 3; r++)
    g_thread_join(t[r]);
  for (int r = 2; r >= 0; r--) { /* rank 0 hosts the server: free it last */
    ok[r] = ranks[r].ok;
    errors[r] = ranks[r].error;
    cohort_store_free(ranks[r].store);
    cohort_config_free(ranks[r].cfg);
  }
}

static void test_config_check(void)
{
  g_autoptr(CohortConfig) def = cohort_config_new();
  gboolean ok[3];
  GError *errors[3];
  /* same config; node_rank may differ between nodes */
  run_check(def->learning_rate, 1, ok, errors);
  for (int r = 0; r < 3; r++) {
    g_assert_no_error(errors[r]);
    g_assert_true(ok[r]);
  }
  run_check(def->learning_rate * 2, 0, ok, errors);
  for (int r = 0; r < 3; r++) {
    g_assert_false(ok[r]);
    g_assert_error(errors[r], COHORT_DIST_ERROR, COHORT_DIST_ERROR_MISMATCH);
    g_test_message("rank %d: %s", r, errors[r]->message);
    g_assert_nonnull(strstr(errors[r]->message, "rank 2"));
    g_assert_nonnull(strstr(errors[r]->message, "learning_rate"));
    g_error_free(errors[r]);
  }
}

/* ---- rendezvous, bind address, token ---- */

typedef struct {
  CohortStore *store;
  char *value;
  gsize len;
} FakeRank;

/* Plays rank 1 of 2: publishes `value` as its config with a hash that differs from rank 0's,
 * then acknowledges the verdict. */
static gpointer fake_rank(gpointer data)
{
  FakeRank *f = data;
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_store_set(f->store, "config/json/1", f->value, f->len, &error));
  g_assert_true(cohort_store_set(f->store, "config/hash/1", "bogus", 5, &error));
  g_autoptr(GBytes) v = cohort_store_get(f->store, "config/verdict", 10, &error);
  g_assert_no_error(error);
  cohort_store_add(f->store, "config/verdict_read", 1, NULL, NULL);
  return NULL;
}

/* A config value nested a million deep (a recursive parser would overflow the stack) is
 * reported as unreadable, not parsed: rank 0 fails cleanly. Once engine/json-read (the strict
 * reader with a depth limit) reads these values, this still holds: the message may name its
 * limit instead. */
static void test_nested_config(void)
{
  g_autoptr(GError) error = NULL;
  CohortDistEnv env = {.rank = 0,
                       .world_size = 2,
                       .local_world_size = 2,
                       .master_addr = (char *)"127.0.0.1",
                       .run_id = (char *)"t"};
  env.master_port = cohort_store_find_free_port(0);
  g_autofree char *token = cohort_dist_job_token(&env);
  g_autoptr(CohortStore) s0 = cohort_store_open(&env, token, 10, &error);
  g_assert_no_error(error);
  CohortDistEnv env1 = env;
  env1.rank = env1.local_rank = 1;
  g_autoptr(CohortStore) s1 = cohort_store_open(&env1, token, 10, &error);
  g_assert_no_error(error);
  FakeRank f = {s1, NULL, 1000000};
  f.value = g_malloc(f.len);
  memset(f.value, '[', f.len);
  GThread *t = g_thread_new("rank1", fake_rank, &f);
  g_autoptr(CohortConfig) cfg = cohort_config_new();
  g_assert_false(cohort_dist_check_config(s0, &env, cfg, 10, &error));
  g_thread_join(t);
  g_test_message("%s", error->message);
  g_assert_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_MISMATCH);
  g_assert_nonnull(strstr(error->message, "rank 1"));
  g_assert_nonnull(strstr(error->message, "unreadable"));
  g_free(f.value);
}

typedef struct {
  CohortDistEnv env;
  CohortStore *store;
  GError *error;
} Arriving;

static gpointer arrive(gpointer data)
{
  Arriving *a = data;
  g_autoptr(CohortConfig) cfg = cohort_config_new();
  cohort_dist_check_config(a->store, &a->env, cfg, 1, &a->error);
  return NULL;
}

/* World size 4, ranks 2 and 3 never start: both ranks that did say which are missing, not
 * which store keys. */
static void test_missing_ranks(void)
{
  g_autoptr(GError) error = NULL;
  CohortDistEnv env = {.world_size = 4,
                       .local_world_size = 4,
                       .master_addr = (char *)"127.0.0.1",
                       .run_id = (char *)"t"};
  env.master_port = cohort_store_find_free_port(0);
  g_autofree char *token = cohort_dist_job_token(&env);
  Arriving a[2];
  for (int r = 1; r >= 0; r--) { /* rank 1 first: it waits for rank 0's store */
    a[r] = (Arriving){.env = env};
    a[r].env.rank = a[r].env.local_rank = r;
  }
  a[0].store = cohort_store_open(&a[0].env, token, 5, &error);
  g_assert_no_error(error);
  a[1].store = cohort_store_open(&a[1].env, token, 5, &error);
  g_assert_no_error(error);
  GThread *t[2];
  for (int r = 0; r < 2; r++)
    t[r] = g_thread_new("rank", arrive, &a[r]);
  for (int r = 0; r < 2; r++)
    g_thread_join(t[r]);
  for (int r = 1; r >= 0; r--) {
    g_assert_nonnull(a[r].error);
    g_test_message("rank %d: %s", r, a[r].error->message);
    g_assert_error(a[r].error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_TIMEOUT);
    g_assert_nonnull(strstr(a[r].error->message, "ranks 2, 3 of 4 never joined"));
    g_assert_null(strstr(a[r].error->message, "config/"));
    g_error_free(a[r].error);
    cohort_store_free(a[r].store);
  }
}

/* A local address of this host other than loopback, or NULL. */
static char *non_loopback_address(void)
{
  struct ifaddrs *list = NULL;
  if (getifaddrs(&list) != 0)
    return NULL;
  char *found = NULL;
  for (struct ifaddrs *i = list; i != NULL && found == NULL; i = i->ifa_next) {
    if (i->ifa_addr == NULL || i->ifa_addr->sa_family != AF_INET)
      continue;
    char host[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, host, sizeof host);
    if (!g_str_has_prefix(host, "127."))
      found = g_strdup(host);
  }
  freeifaddrs(list);
  return found;
}

/* Rank 0 of a single-node job at 127.0.0.1 listens on loopback only: the port cannot be
 * reached on the host's network address. With that address as master, the reverse. A
 * multi-node job whose master is a host name listens on every address. */
static void test_bind_address(void)
{
  g_autofree char *lan = non_loopback_address();
  if (lan == NULL) {
    g_test_skip("this host has no address but loopback: nothing to check the bind against");
    return;
  }
  g_autoptr(GError) error = NULL;
  CohortDistEnv env = {.world_size = 2,
                       .local_world_size = 2,
                       .master_addr = (char *)"127.0.0.1",
                       .run_id = (char *)"t"};
  env.master_port = cohort_store_find_free_port(0);
  g_autoptr(CohortStore) local = cohort_store_open(&env, "t", 5, &error);
  g_assert_no_error(error);
  CohortStoreServer *server = cohort_store_get_server(local);
  g_assert_false(cohort_store_server_is_exposed(server));
  g_assert_cmpstr(cohort_store_server_addresses(server)[0], ==, "127.0.0.1");
  g_assert_null(cohort_store_server_addresses(server)[1]);
  g_test_message("store on 127.0.0.1:%d; trying %s", env.master_port, lan);
  int fd = raw_open(lan, env.master_port);
  g_assert_cmpint(fd, ==, -1);
  g_assert_cmpint(errno, ==, ECONNREFUSED);
  fd = raw_open("127.0.0.1", env.master_port);
  g_assert_cmpint(fd, >=, 0);
  close(fd);

  CohortDistEnv on_lan = env;
  on_lan.master_addr = lan;
  on_lan.master_port = cohort_store_find_free_port(0);
  g_autoptr(CohortStore) exposed = cohort_store_open(&on_lan, "t", 5, &error);
  g_assert_no_error(error);
  g_assert_true(cohort_store_server_is_exposed(cohort_store_get_server(exposed)));
  g_assert_cmpint(raw_open("127.0.0.1", on_lan.master_port), ==, -1);
  g_assert_cmpint(errno, ==, ECONNREFUSED);

  CohortDistEnv nodes = env;
  nodes.world_size = 4;
  nodes.master_addr = (char *)"localhost";
  nodes.master_port = cohort_store_find_free_port(0);
  g_autoptr(CohortStore) wide = cohort_store_open(&nodes, "t", 5, &error);
  g_assert_no_error(error);
  g_assert_true(cohort_store_server_is_exposed(cohort_store_get_server(wide)));
  fd = raw_open(lan, nodes.master_port);
  g_assert_cmpint(fd, >=, 0);
  close(fd);
  g_assert_null(cohort_store_bind_address("node0", FALSE));
  g_assert_cmpstr(cohort_store_bind_address(lan, FALSE), ==, lan);
  g_assert_null(cohort_store_bind_address("198.51.100.7", FALSE)); /* not this host's */
  g_assert_cmpstr(cohort_store_bind_address("node0", TRUE), ==, "node0");
}

/* The job token: unguessable from the run id alone, one per attempt, and refusing a client
 * that presents the old predictable form. */
static void test_job_token(void)
{
  CohortDistEnv env = {.run_id = (char *)"none", .job_secret = (char *)"0123456789abcdef0123"};
  g_autofree char *t0 = cohort_dist_job_token(&env);
  g_assert_cmpuint(strlen(t0), ==, 64 + 1 + 64);
  g_assert_null(strstr(t0, env.job_secret));
  g_assert_null(strstr(t0, "none"));
  g_autofree char *again = cohort_dist_job_token(&env);
  g_assert_cmpstr(again, ==, t0);
  env.restart_count = 1;
  g_autofree char *t1 = cohort_dist_job_token(&env);
  g_assert_cmpstr(t1, !=, t0);
  env.restart_count = 0;
  env.job_secret = (char *)"another secret, long enough";
  g_autofree char *other = cohort_dist_job_token(&env);
  g_assert_cmpstr(other, !=, t0);

  g_autoptr(GError) error = NULL;
  g_autoptr(CohortStoreServer) server = cohort_store_server_new("127.0.0.1", 0, t0, NULL, &error);
  int port = cohort_store_server_port(server);
  g_assert_null(cohort_store_connect("127.0.0.1", port, "cohort/none/attempt-0", 5, &error));
  g_assert_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_REFUSED);
  g_assert_null(strstr(error->message, t0));
  g_clear_error(&error);
  g_autoptr(CohortStore) ok = cohort_store_connect("127.0.0.1", port, t0, 5, &error);
  g_assert_no_error(error);

  g_autofree char *s1 = cohort_dist_new_secret(&error);
  g_autofree char *s2 = cohort_dist_new_secret(&error);
  g_assert_no_error(error);
  g_assert_cmpuint(strlen(s1), ==, 32);
  g_assert_cmpstr(s1, !=, s2);
}

/* A rank that publishes a hostile config (60,000 nested arrays, which once overflowed the
 * stack of every JSON reader) makes rank 0 report it unreadable, not crash. */
static void test_config_check_hostile(void)
{
  g_autoptr(GError) error = NULL;
  CohortDistEnv env0 = {.rank = 0,
                        .world_size = 2,
                        .local_world_size = 2,
                        .master_addr = (char *)"127.0.0.1",
                        .run_id = (char *)"h"};
  env0.master_port = cohort_store_find_free_port(0);
  Rank rank0 = {.env = env0, .cfg = cohort_config_new()};
  CohortDistEnv env1 = env0;
  env1.rank = env1.local_rank = 1;
  g_autofree char *token = cohort_dist_job_token(&env0);
  rank0.store = cohort_store_open(&rank0.env, token, 10, &error);
  g_assert_no_error(error);
  g_autoptr(CohortStore) store1 = cohort_store_open(&env1, token, 10, &error);
  g_assert_no_error(error);
  GThread *t = g_thread_new("rank0", check_rank, &rank0);

  g_autoptr(GString) deep = g_string_new("{\"version\": 1, \"device_indexes\": ");
  for (int i = 0; i < 60000; i++)
    g_string_append_c(deep, '[');
  g_assert_true(cohort_store_set(store1, "config/json/1", deep->str, deep->len, &error));
  g_assert_true(cohort_store_set(store1, "config/hash/1", "x", 1, &error));
  g_autoptr(GBytes) verdict = cohort_store_get(store1, "config/verdict", 10, &error);
  g_assert_no_error(error);
  g_autofree char *text = g_strndup(g_bytes_get_data(verdict, NULL), g_bytes_get_size(verdict));
  g_test_message("verdict: %s", text);
  g_assert_nonnull(strstr(text, "rank 1 runs a different config"));
  g_assert_nonnull(strstr(text, "unreadable: rank 1's config: not valid JSON"));
  g_assert_nonnull(strstr(text, "nested deeper than 64 levels"));
  g_assert_true(cohort_store_add(store1, "config/verdict_read", 1, NULL, &error));
  g_thread_join(t);
  g_assert_false(rank0.ok);
  g_assert_error(rank0.error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_MISMATCH);
  g_error_free(rank0.error);
  g_clear_pointer(&store1, cohort_store_free);
  cohort_store_free(rank0.store);
  cohort_config_free(rank0.cfg);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/store/operations", test_operations);
  g_test_add_func("/store/wait-and-timeouts", test_wait_and_timeouts);
  g_test_add_func("/store/wrong-token", test_wrong_token);
  g_test_add_func("/store/other-job", test_other_job);
  g_test_add_func("/store/stale-store-after-restart", test_stale_store_after_restart);
  g_test_add_func("/store/oversized", test_oversized);
  g_test_add_func("/store/port-taken", test_port_taken);
  g_test_add_func("/store/server-starts-later", test_server_starts_later);
  g_test_add_func("/store/unreachable-and-lost", test_unreachable_and_lost);
  g_test_add_func("/store/silent-server", test_silent_server);
  g_test_add_func("/store/config-check", test_config_check);
  g_test_add_func("/store/nested-config", test_nested_config);
  g_test_add_func("/store/missing-ranks", test_missing_ranks);
  g_test_add_func("/store/bind-address", test_bind_address);
  g_test_add_func("/store/job-token", test_job_token);
  g_test_add_func("/store/config-check-hostile", test_config_check_hostile);
  return g_test_run();
}

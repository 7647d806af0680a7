/* The rendezvous store's defences, in one process over loopback: the hello timeout, the caps
 * on pending and authenticated connections, the threads, descriptors and mappings left after
 * a flood of connections, the cap on everything stored, ADD's overflow, and a client that
 * sends ahead. */
#include "engine/distributed/store.h"
#include "store-raw.h"

static CohortStoreStats stats_of(CohortStoreServer *server)
{
  CohortStoreStats st;
  cohort_store_server_get_stats(server, &st);
  return st;
}

/* Waits up to 5 s for the server to hold no connection but `clients` authenticated ones. */
static void wait_idle(CohortStoreServer *server, guint clients)
{
  gint64 deadline = g_get_monotonic_time() + 5 * G_USEC_PER_SEC;
  CohortStoreStats st = stats_of(server);
  while ((st.pending != 0 || st.clients != clients) && g_get_monotonic_time() < deadline) {
    g_usleep(10000);
    st = stats_of(server);
  }
  g_assert_cmpuint(st.pending, ==, 0);
  g_assert_cmpuint(st.clients, ==, clients);
}

/* A connection that never completes its hello is closed after hello_timeout_s. */
static void test_hello_timeout(void)
{
  g_autoptr(GError) error = NULL;
  CohortStoreLimits limits = {.hello_timeout_s = 0.3};
  g_autoptr(CohortStoreServer) server =
      cohort_store_server_new("127.0.0.1", 0, "t", &limits, &error);
  g_assert_no_error(error);
  int port = cohort_store_server_port(server);
  int silent = raw_open("127.0.0.1", port);
  int partial = raw_open("127.0.0.1", port);
  g_assert_cmpint(write(partial, "CHST\0\0", 6), ==, 6);
  gint64 t0 = g_get_monotonic_time();
  g_assert_true(closed_within(silent, 3000));
  g_assert_true(closed_within(partial, 3000));
  gint64 took = g_get_monotonic_time() - t0;
  g_assert_cmpint(took, >=, 200000);
  g_assert_cmpint(took, <, 2 * G_USEC_PER_SEC);
  g_assert_cmpuint(stats_of(server).timed_out, ==, 2);
  close(silent);
  close(partial);
  /* a client that says hello at once is not affected */
  g_autoptr(CohortStore) c = cohort_store_connect("127.0.0.1", port, "t", 5, &error);
  g_assert_no_error(error);
  g_usleep(500000);
  g_assert_true(cohort_store_set(c, "k", "v", 1, &error));
  g_assert_no_error(error);
}

/* Idle connections past max_pending push out the oldest; a real client still gets in. */
static void test_pending_cap(void)
{
  g_autoptr(GError) error = NULL;
  CohortStoreLimits limits = {.max_pending = 8};
  g_autoptr(CohortStoreServer) server =
      cohort_store_server_new("127.0.0.1", 0, "t", &limits, &error);
  g_assert_no_error(error);
  int port = cohort_store_server_port(server);
  int fds[40];
  for (int i = 0; i < 40; i++) {
    fds[i] = raw_open("127.0.0.1", port);
    g_assert_cmpint(fds[i], >=, 0);
  }
  /* at once: well before the hello timeout (5 s) could close them */
  int closed = 0;
  gint64 deadline = g_get_monotonic_time() + 1500000;
  for (int i = 0; i < 40; i++)
    closed += closed_within(fds[i], (int)MAX(deadline - g_get_monotonic_time(), 0) / 1000);
  g_test_message("%d of 40 idle connections closed; stats: pending %u, evicted %" G_GUINT64_FORMAT,
                 closed, stats_of(server).pending, stats_of(server).evicted);
  g_assert_cmpint(closed, >=, 32);
  g_assert_cmpuint(stats_of(server).pending, <=, 8);
  g_assert_cmpuint(stats_of(server).evicted, >=, 32);
  g_autoptr(CohortStore) c = cohort_store_connect("127.0.0.1", port, "t", 5, &error);
  g_assert_no_error(error);
  for (int i = 0; i < 40; i++)
    close(fds[i]);
}

/* At most max_clients past their hello; the next is refused, and a freed slot is reused. */
static void test_client_cap(void)
{
  g_autoptr(GError) error = NULL;
  CohortStoreLimits limits = {.max_clients = 3};
  g_autoptr(CohortStoreServer) server =
      cohort_store_server_new("127.0.0.1", 0, "t", &limits, &error);
  g_assert_no_error(error);
  int port = cohort_store_server_port(server);
  CohortStore *c[3];
  for (int i = 0; i < 3; i++) {
    c[i] = cohort_store_connect("127.0.0.1", port, "t", 5, &error);
    g_assert_no_error(error);
  }
  g_assert_null(cohort_store_connect("127.0.0.1", port, "t", 5, &error));
  g_assert_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_REFUSED);
  g_assert_nonnull(strstr(error->message, "3 clients"));
  g_clear_error(&error);
  cohort_store_free(c[0]);
  wait_idle(server, 2);
  c[0] = cohort_store_connect("127.0.0.1", port, "t", 5, &error);
  g_assert_no_error(error);
  for (int i = 0; i < 3; i++)
    cohort_store_free(c[i]);
}

/* Thousands of connect/close cycles, some with half a hello or a wrong token, leave the
 * process with the threads, descriptors and memory mappings it had (a thread per connection
 * that is never joined keeps its stack mapped). */
static void test_flood(void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortStoreServer) server = cohort_store_server_new("127.0.0.1", 0, "t", NULL, &error);
  g_assert_no_error(error);
  int port = cohort_store_server_port(server);
  g_autoptr(CohortStore) keep = cohort_store_connect("127.0.0.1", port, "t", 5, &error);
  g_assert_no_error(error);
  g_assert_true(cohort_store_set(keep, "k", "v", 1, &error));
  guint fds0 = count_entries("/proc/self/fd"), tasks0 = count_entries("/proc/self/task");
  guint maps0 = count_lines("/proc/self/maps");
  const int cycles = 3000;
  gint64 t0 = g_get_monotonic_time();
  for (int i = 0; i < cycles; i++) {
    int fd = raw_open("127.0.0.1", port);
    g_assert_cmpint(fd, >=, 0);
    if (i % 3 == 1)
      g_assert_cmpint(write(fd, "CHST", 4), ==, 4);
    if (i % 3 == 2) {
      guint8 hello[12] = {'C', 'H', 'S', 'T', 0, 0, 0, 2, 0, 0, 0, 5};
      g_assert_cmpint(write(fd, hello, 12), ==, 12);
      g_assert_cmpint(write(fd, "wrong", 5), ==, 5);
    }
    close(fd);
  }
  /* Connections still in the listen backlog are neither pending nor clients yet: wait for the
   * server to have accepted them all (the kept client and every cycle) before it is idle. */
  gint64 deadline = g_get_monotonic_time() + 10 * G_USEC_PER_SEC;
  while (stats_of(server).accepted < (guint64)cycles + 1 && g_get_monotonic_time() < deadline)
    g_usleep(10000);
  wait_idle(server, 1);
  double secs = (g_get_monotonic_time() - t0) / 1e6;
  /* The server's thread may close the last refused socket just after its counters say idle
   * (seen once under AddressSanitizer: 10 fds for 9): a leak stays, a late close goes. */
  deadline = g_get_monotonic_time() + 5 * G_USEC_PER_SEC;
  while (count_entries("/proc/self/fd") != fds0 && g_get_monotonic_time() < deadline)
    g_usleep(10000);
  guint fds1 = count_entries("/proc/self/fd"), tasks1 = count_entries("/proc/self/task");
  guint maps1 = count_lines("/proc/self/maps");
  CohortStoreStats st = stats_of(server);
  g_test_message("%d cycles in %.2f s; fds %u → %u, threads %u → %u, mappings %u → %u; "
                 "accepted %" G_GUINT64_FORMAT ", refused %" G_GUINT64_FORMAT,
                 cycles, secs, fds0, fds1, tasks0, tasks1, maps0, maps1, st.accepted, st.refused);
  g_assert_cmpuint(st.accepted, >=, (guint64)cycles);
  g_assert_cmpuint(fds1, ==, fds0);
  g_assert_cmpuint(tasks1, ==, tasks0);
  g_assert_cmpuint(maps1, <=, maps0 + 16);
  g_autoptr(GBytes) v = cohort_store_get(keep, "k", 1, &error);
  g_assert_no_error(error);
  g_assert_cmpmem(g_bytes_get_data(v, NULL), g_bytes_get_size(v), "v", 1);
}

/* Everything stored together is capped; the refusal names the limit. */
static void test_total_cap(void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortStoreServer) server = cohort_store_server_new("127.0.0.1", 0, "t", NULL, &error);
  g_assert_no_error(error);
  int port = cohort_store_server_port(server);
  g_autoptr(CohortStore) c = cohort_store_connect("127.0.0.1", port, "t", 30, &error);
  gsize big = COHORT_STORE_MAX_VALUE;
  g_autofree guint8 *value = g_malloc0(big);
  guint fitting = COHORT_STORE_MAX_TOTAL / COHORT_STORE_MAX_VALUE - 1;
  for (guint i = 0; i < fitting; i++) {
    g_autofree char *key = g_strdup_printf("big/%u", i);
    g_assert_true(cohort_store_set(c, key, value, big, &error));
    g_assert_no_error(error);
  }
  /* replacing a value does not count it twice */
  g_assert_true(cohort_store_set(c, "big/0", value, big, &error));
  g_assert_no_error(error);
  g_assert_false(cohort_store_set(c, "big/x", value, big, &error));
  g_assert_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_REFUSED);
  g_assert_nonnull(strstr(error->message, "256 MiB"));
}

/* A sum outside the 64-bit range is refused and the value kept. */
static void test_add_overflow(void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortStoreServer) server = cohort_store_server_new("127.0.0.1", 0, "t", NULL, &error);
  g_assert_no_error(error);
  int port = cohort_store_server_port(server);
  g_autoptr(CohortStore) a = cohort_store_connect("127.0.0.1", port, "t", 5, &error);
  gint64 r = 0;
  g_assert_true(cohort_store_add(a, "n", G_MAXINT64, &r, &error));
  g_assert_cmpint(r, ==, G_MAXINT64);
  g_assert_false(cohort_store_add(a, "n", 1, &r, &error));
  g_assert_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_REFUSED);
  g_assert_nonnull(strstr(error->message, "64-bit"));
  g_clear_error(&error);
  g_autoptr(CohortStore) b = cohort_store_connect("127.0.0.1", port, "t", 5, &error);
  g_assert_true(cohort_store_add(b, "n", 0, &r, &error));
  g_assert_cmpint(r, ==, G_MAXINT64);
  g_assert_true(cohort_store_add(b, "n", G_MININT64, &r, &error));
  g_assert_no_error(error);
  g_assert_cmpint(r, ==, -1);
  /* the other end, and a stored number too large to be one */
  g_autoptr(CohortStore) d = cohort_store_connect("127.0.0.1", port, "t", 5, &error);
  g_assert_true(cohort_store_add(d, "m", G_MININT64, &r, &error));
  g_assert_false(cohort_store_add(d, "m", -1, &r, &error));
  g_assert_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_REFUSED);
  g_clear_error(&error);
  g_autoptr(CohortStore) e = cohort_store_connect("127.0.0.1", port, "t", 5, &error);
  g_assert_true(cohort_store_set(e, "huge", "99999999999999999999", 20, &error));
  g_assert_false(cohort_store_add(e, "huge", 1, &r, &error));
  g_assert_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_REFUSED);
}

/* A client that sends its next requests before reading the answers is served in order;
 * the server reads on only once an answer has gone out, so it never queues answers. */
static void test_pipelined(void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortStoreServer) server = cohort_store_server_new("127.0.0.1", 0, "t", NULL, &error);
  g_assert_no_error(error);
  int port = cohort_store_server_port(server);
  int fd = raw_open("127.0.0.1", port);
  g_assert_cmpint(raw_hello(fd, "t", NULL), ==, 0);
  /* set k=v, then get k, get absent, in one write */
  guint8 frames[3 * 16 + 1 + 1 + 1 + 1];
  guint8 *p = frames;
  const struct {
    guint8 op;
    const char *key, *value;
  } reqs[] = {{1, "k", "v"}, {2, "k", ""}, {2, "x", ""}};
  for (int i = 0; i < 3; i++) {
    guint8 hdr[16] = {reqs[i].op};
    guint32 kl = GUINT32_TO_BE(1);
    guint64 vl = GUINT64_TO_BE(strlen(reqs[i].value));
    memcpy(hdr + 4, &kl, 4);
    memcpy(hdr + 8, &vl, 8);
    memcpy(p, hdr, 16);
    p += 16;
    *p++ = (guint8)reqs[i].key[0];
    if (reqs[i].value[0])
      *p++ = (guint8)reqs[i].value[0];
  }
  g_assert_cmpint(write(fd, frames, p - frames), ==, p - frames);
  const guint8 want_status[] = {0, 0, 1};
  const gsize want_len[] = {0, 1, 0};
  for (int i = 0; i < 3; i++) {
    guint8 resp[16];
    g_assert_cmpint(recv(fd, resp, 16, MSG_WAITALL), ==, 16);
    g_assert_cmpint(resp[0], ==, want_status[i]);
    guint64 len;
    memcpy(&len, resp + 8, 8);
    g_assert_cmpuint(GUINT64_FROM_BE(len), ==, want_len[i]);
    if (want_len[i] > 0) {
      char v;
      g_assert_cmpint(recv(fd, &v, 1, MSG_WAITALL), ==, 1);
      g_assert_cmpint(v, ==, 'v');
    }
  }
  close(fd);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/store-limits/hello-timeout", test_hello_timeout);
  g_test_add_func("/store-limits/pending-cap", test_pending_cap);
  g_test_add_func("/store-limits/client-cap", test_client_cap);
  g_test_add_func("/store-limits/flood", test_flood);
  g_test_add_func("/store-limits/total-cap", test_total_cap);
  g_test_add_func("/store-limits/add-overflow", test_add_overflow);
  g_test_add_func("/store-limits/pipelined", test_pipelined);
  return g_test_run();
}

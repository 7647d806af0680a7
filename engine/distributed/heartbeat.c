/* Per-rank progress records in the store, rank 0's watch over a stalled collective, and the
 * failure message that names the ranks that did not arrive (heartbeat.h). */
#include "engine/distributed/heartbeat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/phase.h"

#define RECORD_MAX 1024
/* Ranks described in one line of a message; the rest are counted. */
#define DESCRIBED 4
/* A failed collective's report asks the store with this bound per request: it must end soon
 * when rank 0 is silent, and a live store answers in microseconds. */
#define DESCRIBE_S 3.0
/* A request on the connection that has waited this long already says rank 0 is silent: the
 * report does not queue behind it. */
#define SILENT_WAIT_S 2.0

typedef struct {
  const char *kind; /* NULL = none */
  guint64 seq;
  char label[48];
  gint64 since_us;
  double timeout_s;
} Mark;

struct CohortHeartbeat {
  CohortStore *store; /* borrowed; NULL = in memory only */
  int rank, world;
  CohortWatchdog *wd;
  double timeout_s; /* the communicator's default */
  GMutex lock;      /* everything above the thread-only part */
  GCond cond;
  gboolean quit;
  Mark cur, last;
  guint64 flagged_seq; /* the collective counted in progress/stalled (written by the thread) */
  gboolean beat_now;   /* a stalled collective ended: beat at once, for the resolved report */
  gint told_silent;    /* atomic: this rank said that rank 0 does not answer */
  double report_s;
  CohortHangFunc func;
  gpointer user;
  GThread *thread;

  /* the thread's own */
  gboolean store_gone;
  gboolean have_gen;
  guint64 gen_seen;
  /* rank 0's watch */
  gint64 stalled_seen;
  gboolean active;
  guint64 gen;
  GString *sig;
  gboolean reported;
  guint64 reported_seq;
  gint64 reported_us;
  GString *reported_missing;
  CohortHangReport told; /* the collective reported, for the `resolved` report */
};

/* ---- records ---- */

static const char *or_dash(const char *s)
{
  return s != NULL && s[0] ? s : "-";
}

char *cohort_rank_record_format(const CohortRankRecord *r)
{
  return g_strdup_printf("%" G_GINT64_FORMAT "\t%s\t%.0f\t%" G_GUINT64_FORMAT "\t%" G_GUINT64_FORMAT
                         "\t%s\t%" G_GUINT64_FORMAT "\t%s\t%.0f\t%s\t%" G_GUINT64_FORMAT "\t%s",
                         r->step, or_dash(r->phase), r->phase_s * 1000, r->ticks, r->changes,
                         or_dash(r->cur_kind), r->cur_seq, or_dash(r->cur_label),
                         r->cur_wait_s * 1000, or_dash(r->last_kind), r->last_seq,
                         or_dash(r->last_label));
}

static gboolean parse_u64(const char *s, guint64 *out)
{
  char *end = NULL;
  if (s[0] < '0' || s[0] > '9')
    return FALSE;
  *out = g_ascii_strtoull(s, &end, 10);
  return end != s && *end == '\0';
}

static gboolean parse_text(const char *s, char *out, gsize size)
{
  if (strlen(s) >= size)
    return FALSE;
  g_strlcpy(out, g_str_equal(s, "-") ? "" : s, size);
  return TRUE;
}

gboolean cohort_rank_record_parse(const char *text, gsize len, CohortRankRecord *r)
{
  if (len == 0 || len > RECORD_MAX)
    return FALSE;
  g_autofree char *copy = g_strndup(text, len);
  g_auto(GStrv) f = g_strsplit(copy, "\t", 13);
  if (g_strv_length(f) != 12)
    return FALSE;
  guint64 step = 0, phase_ms = 0, wait_ms = 0;
  int rank = r->rank;
  memset(r, 0, sizeof *r);
  r->rank = rank;
  if (!parse_u64(f[0], &step) || !parse_text(f[1], r->phase, sizeof r->phase) ||
      !parse_u64(f[2], &phase_ms) || !parse_u64(f[3], &r->ticks) || !parse_u64(f[4], &r->changes) ||
      !parse_text(f[5], r->cur_kind, sizeof r->cur_kind) || !parse_u64(f[6], &r->cur_seq) ||
      !parse_text(f[7], r->cur_label, sizeof r->cur_label) || !parse_u64(f[8], &wait_ms) ||
      !parse_text(f[9], r->last_kind, sizeof r->last_kind) || !parse_u64(f[10], &r->last_seq) ||
      !parse_text(f[11], r->last_label, sizeof r->last_label))
    return FALSE;
  r->step = (gint64)MIN(step, (guint64)G_MAXINT64);
  r->phase_s = (double)phase_ms / 1000;
  r->cur_wait_s = (double)wait_ms / 1000;
  r->known = TRUE;
  return TRUE;
}

/* The last collective a rank reached: the one it is in, else the last it completed. */
static guint64 entered(const CohortRankRecord *r)
{
  return r->cur_seq > 0 ? r->cur_seq : r->last_seq;
}

/* This rank's record now. Under hb->lock. */
static void own_record(CohortHeartbeat *hb, CohortRankRecord *r)
{
  CohortPhaseState ph;
  cohort_phase_get(&ph);
  gint64 now = g_get_monotonic_time();
  memset(r, 0, sizeof *r);
  r->rank = hb->rank;
  r->known = TRUE;
  r->age_s = 0;
  r->step = ph.step;
  g_strlcpy(r->phase, cohort_phase_name(ph.phase), sizeof r->phase);
  r->phase_s = (double)(now - ph.since_us) / G_USEC_PER_SEC;
  r->ticks = ph.ticks;
  r->changes = ph.changes;
  if (hb->cur.kind != NULL) {
    g_strlcpy(r->cur_kind, hb->cur.kind, sizeof r->cur_kind);
    r->cur_seq = hb->cur.seq;
    g_strlcpy(r->cur_label, hb->cur.label, sizeof r->cur_label);
    r->cur_wait_s = (double)(now - hb->cur.since_us) / G_USEC_PER_SEC;
  }
  if (hb->last.kind != NULL) {
    g_strlcpy(r->last_kind, hb->last.kind, sizeof r->last_kind);
    r->last_seq = hb->last.seq;
    g_strlcpy(r->last_label, hb->last.label, sizeof r->last_label);
  }
}

/* When a waiting rank starts watching the others: the hang threshold, or half the timeout. */
static double watch_after(double report_s, double timeout_s)
{
  return report_s > 0 ? MIN(report_s, timeout_s / 2) : timeout_s / 2;
}

static double interval_of(double report_s, double timeout_s)
{
  return CLAMP(watch_after(report_s, timeout_s) / 10, 0.05, 1.0);
}

/* A record this old was missed by five heartbeats in a row (three seconds at least, so a loaded
 * machine's late beat is not taken for a stopped rank). */
static double silent_after(CohortHeartbeat *hb)
{
  g_mutex_lock(&hb->lock);
  double timeout_s = hb->cur.kind != NULL ? hb->cur.timeout_s : hb->timeout_s;
  double s = MAX(5 * interval_of(hb->report_s, timeout_s), 3.0);
  g_mutex_unlock(&hb->lock);
  return s;
}

/* Reads rank r's record from the store into *out (known FALSE when absent or malformed), each
 * request bounded by `max_s` (<= 0: the store's bound); on rank 0 with its age. FALSE when the
 * store is gone. */
static gboolean read_record(CohortHeartbeat *hb, int r, double max_s, double silent_s,
                            CohortRankRecord *out)
{
  char key[64];
  g_snprintf(key, sizeof key, "progress/%d", r);
  memset(out, 0, sizeof *out);
  out->rank = r;
  out->age_s = -1;
  GError *e = NULL;
  g_autoptr(GBytes) b = cohort_store_try_get_within(hb->store, key, max_s, &e);
  if (e != NULL) {
    g_error_free(e);
    return FALSE;
  }
  if (b != NULL) {
    gsize n = 0;
    const char *text = g_bytes_get_data(b, &n);
    cohort_rank_record_parse(text, n, out);
  }
  CohortStoreServer *server = cohort_store_get_server(hb->store);
  if (out->known && server != NULL) {
    out->age_s = cohort_store_server_key_age(server, key);
    out->silent = out->age_s >= silent_s;
  }
  return TRUE;
}

/* Every rank's record (this rank's from memory), as read_record. NULL when the store is gone. */
static CohortRankRecord *read_all(CohortHeartbeat *hb, double max_s)
{
  CohortRankRecord *all = g_new0(CohortRankRecord, hb->world);
  double silent_s = silent_after(hb);
  for (int r = 0; r < hb->world; r++) {
    if (r == hb->rank) {
      g_mutex_lock(&hb->lock);
      own_record(hb, &all[r]);
      g_mutex_unlock(&hb->lock);
    } else if (!read_record(hb, r, max_s, silent_s, &all[r])) {
      g_free(all);
      return NULL;
    }
  }
  return all;
}

/* ---- the thread ---- */

static void publish(CohortHeartbeat *hb, const CohortRankRecord *me)
{
  char key[64];
  g_snprintf(key, sizeof key, "progress/%d", hb->rank);
  g_autofree char *text = cohort_rank_record_format(me);
  if (!cohort_store_set(hb->store, key, text, strlen(text), NULL))
    hb->store_gone = TRUE;
}

/* A new generation seen while waiting is progress of the ranks waited for. */
static void saw_gen(CohortHeartbeat *hb, guint64 gen)
{
  if (hb->have_gen && gen != hb->gen_seen && hb->wd != NULL)
    cohort_watchdog_progress(hb->wd);
  hb->gen_seen = gen;
  hb->have_gen = TRUE;
}

static void fill_report(CohortHeartbeat *hb, CohortHangReport *rep, CohortRankRecord *all,
                        guint64 front, double timeout_s)
{
  memset(rep, 0, sizeof *rep);
  rep->seq = front;
  rep->timeout_s = timeout_s;
  rep->n_ranks = hb->world;
  rep->ranks = all;
  const CohortRankRecord *named = NULL;
  for (int r = 0; r < hb->world; r++) {
    all[r].arrived = entered(&all[r]) >= front;
    rep->n_missing += !all[r].arrived;
    if (all[r].cur_seq == front) {
      rep->waited_s = MAX(rep->waited_s, all[r].cur_wait_s);
      if (named == NULL)
        named = &all[r];
    }
  }
  if (named != NULL) {
    g_strlcpy(rep->kind, named->cur_kind, sizeof rep->kind);
    g_strlcpy(rep->label, named->cur_label, sizeof rep->label);
  }
}

/* Rank 0: the watch over a stall, from the records. */
static void lead(CohortHeartbeat *hb, const CohortRankRecord *me, double report_s, double timeout_s,
                 CohortHangFunc func, gpointer user)
{
  double after = watch_after(report_s, timeout_s);
  if (!hb->active) {
    g_autoptr(GBytes) b = cohort_store_try_get(hb->store, "progress/stalled", NULL);
    gint64 n = b ? g_ascii_strtoll(g_bytes_get_data(b, NULL), NULL, 10) : 0;
    if (n <= hb->stalled_seen)
      return;
    hb->stalled_seen = n;
    hb->active = TRUE;
    g_string_truncate(hb->sig, 0);
  }
  g_autofree CohortRankRecord *all = read_all(hb, 0);
  if (all == NULL) {
    hb->store_gone = TRUE;
    return;
  }
  guint64 front = 0;
  gboolean waiting = FALSE;
  for (int r = 0; r < hb->world; r++) {
    front = MAX(front, entered(&all[r]));
    waiting = waiting || (all[r].cur_seq > 0 && all[r].cur_wait_s >= after);
  }
  CohortHangReport rep;
  fill_report(hb, &rep, all, front, timeout_s);
  if (!waiting || rep.n_missing == 0) {
    if (hb->reported) {
      rep.seq = hb->told.seq;
      g_strlcpy(rep.kind, hb->told.kind, sizeof rep.kind);
      g_strlcpy(rep.label, hb->told.label, sizeof rep.label);
      rep.waited_s = hb->told.waited_s;
      rep.n_missing = 0;
      rep.resolved = TRUE;
      if (func != NULL)
        func(&rep, user);
    }
    hb->active = hb->reported = FALSE;
    return;
  }
  g_autoptr(GString) sig = g_string_new(NULL);
  g_autoptr(GString) missing = g_string_new(NULL);
  for (int r = 0; r < hb->world; r++)
    if (!all[r].arrived) {
      g_string_append_printf(sig, "%d:%" G_GUINT64_FORMAT ":%" G_GUINT64_FORMAT ":%s;", r,
                             all[r].changes, entered(&all[r]), all[r].phase);
      g_string_append_printf(missing, "%d,", r);
    }
  if (!g_str_equal(sig->str, hb->sig->str)) {
    hb->gen++;
    g_string_assign(hb->sig, sig->str);
  }
  char text[32];
  int n = g_snprintf(text, sizeof text, "%" G_GUINT64_FORMAT, hb->gen);
  if (!cohort_store_set(hb->store, "progress/summary", text, (gsize)n, NULL))
    hb->store_gone = TRUE;
  if (me->cur_seq > 0 && me->cur_wait_s >= after)
    saw_gen(hb, hb->gen);
  if (hb->reported && hb->reported_seq == front)
    hb->told.waited_s = MAX(hb->told.waited_s, rep.waited_s);
  gint64 now = g_get_monotonic_time();
  if (report_s > 0 && rep.waited_s >= report_s &&
      (!hb->reported || hb->reported_seq != front ||
       !g_str_equal(missing->str, hb->reported_missing->str) ||
       now - hb->reported_us >= (gint64)(report_s * G_USEC_PER_SEC))) {
    if (func != NULL)
      func(&rep, user);
    hb->reported = TRUE;
    hb->reported_seq = front;
    hb->reported_us = now;
    hb->told = rep;
    hb->told.ranks = NULL;
    g_string_assign(hb->reported_missing, missing->str);
  }
}

static void beat(CohortHeartbeat *hb)
{
  CohortRankRecord me;
  g_mutex_lock(&hb->lock);
  own_record(hb, &me);
  double timeout_s = hb->cur.kind != NULL ? hb->cur.timeout_s : hb->timeout_s;
  double report_s = hb->report_s;
  CohortHangFunc func = hb->func;
  gpointer user = hb->user;
  g_mutex_unlock(&hb->lock);
  publish(hb, &me);
  gboolean waiting = me.cur_seq > 0 && me.cur_wait_s >= watch_after(report_s, timeout_s);
  if (waiting && hb->flagged_seq != me.cur_seq) {
    g_mutex_lock(&hb->lock);
    hb->flagged_seq = me.cur_seq;
    g_mutex_unlock(&hb->lock);
    hb->have_gen = FALSE;
    if (!cohort_store_add(hb->store, "progress/stalled", 1, NULL, NULL))
      hb->store_gone = TRUE;
  }
  if (hb->rank == 0) {
    lead(hb, &me, report_s, hb->timeout_s, func, user);
  } else if (waiting) {
    g_autoptr(GBytes) b = cohort_store_try_get(hb->store, "progress/summary", NULL);
    if (b != NULL)
      saw_gen(hb, g_ascii_strtoull(g_bytes_get_data(b, NULL), NULL, 10));
  }
}

static gpointer heartbeat_thread(gpointer data)
{
  CohortHeartbeat *hb = data;
  gint64 last = 0; /* the first beat at once */
  g_mutex_lock(&hb->lock);
  while (!hb->quit) {
    /* Recomputed on every wake: a new threshold (set_report) changes the interval. */
    double timeout_s = hb->cur.kind != NULL ? hb->cur.timeout_s : hb->timeout_s;
    gint64 wake = last + (gint64)(interval_of(hb->report_s, timeout_s) * G_USEC_PER_SEC);
    if (g_get_monotonic_time() < wake && !hb->beat_now) {
      g_cond_wait_until(&hb->cond, &hb->lock, wake);
      continue;
    }
    hb->beat_now = FALSE;
    last = g_get_monotonic_time();
    g_mutex_unlock(&hb->lock);
    /* A store that failed once (rank 0 gone) stays failed: the job is ending. */
    if (!hb->store_gone)
      beat(hb);
    g_mutex_lock(&hb->lock);
  }
  g_mutex_unlock(&hb->lock);
  return NULL;
}

/* A request of this rank has waited the hang threshold for rank 0's store: rank 0 cannot
 * report that itself, so this rank says it on its stderr (the launcher shows it), well before
 * its collectives fail at their timeout. */
static void store_slow(const char *where, double waited_s, gpointer user)
{
  CohortHeartbeat *hb = user;
  if (g_atomic_int_exchange(&hb->told_silent, TRUE))
    return;
  fprintf(stderr,
          "cohort-train: rank %d: warning: " COHORT_STORE_SILENT ": a request to %s has waited "
          "%.0f s for its answer (is rank 0 stopped, or its host paused or unreachable?); the "
          "collectives that wait for it fail after %g s without progress\n",
          hb->rank, where, waited_s, hb->timeout_s);
}

/* Sets when the store calls store_slow: at the threshold that starts the watch, and not before
 * a request has waited as long as a failure report takes for silence (a loaded machine may
 * delay an answer by a second). Under hb->lock, or before the thread starts. */
static void arm_store_slow(CohortHeartbeat *hb)
{
  if (hb->store != NULL && hb->rank != 0)
    cohort_store_set_slow_func(
        hb->store, MAX(watch_after(hb->report_s, hb->timeout_s), SILENT_WAIT_S), store_slow, hb);
}

CohortHeartbeat *cohort_heartbeat_new(CohortStore *store, int rank, int world_size,
                                      CohortWatchdog *wd, double timeout_s)
{
  CohortHeartbeat *hb = g_new0(CohortHeartbeat, 1);
  hb->store = store;
  hb->rank = rank;
  hb->world = world_size;
  hb->wd = wd;
  hb->timeout_s = timeout_s;
  hb->sig = g_string_new(NULL);
  hb->reported_missing = g_string_new(NULL);
  g_mutex_init(&hb->lock);
  g_cond_init(&hb->cond);
  arm_store_slow(hb);
  if (store != NULL && world_size > 1)
    hb->thread = g_thread_new("cohort-heartbeat", heartbeat_thread, hb);
  return hb;
}

void cohort_heartbeat_free(CohortHeartbeat *hb)
{
  if (hb == NULL)
    return;
  g_mutex_lock(&hb->lock);
  hb->quit = TRUE;
  g_cond_broadcast(&hb->cond);
  g_mutex_unlock(&hb->lock);
  if (hb->thread != NULL)
    g_thread_join(hb->thread);
  if (hb->store != NULL && hb->rank != 0)
    cohort_store_set_slow_func(hb->store, 0, NULL, NULL);
  g_string_free(hb->sig, TRUE);
  g_string_free(hb->reported_missing, TRUE);
  g_mutex_clear(&hb->lock);
  g_cond_clear(&hb->cond);
  g_free(hb);
}

void cohort_heartbeat_set_report(CohortHeartbeat *hb, double report_s, CohortHangFunc func,
                                 gpointer user)
{
  g_mutex_lock(&hb->lock);
  hb->report_s = report_s > 0 ? report_s : 0;
  hb->func = func;
  hb->user = user;
  arm_store_slow(hb);
  g_cond_broadcast(&hb->cond);
  g_mutex_unlock(&hb->lock);
}

void cohort_heartbeat_enter(CohortHeartbeat *hb, const char *kind, guint64 seq, const char *label,
                            double timeout_s)
{
  g_mutex_lock(&hb->lock);
  hb->cur.kind = kind;
  hb->cur.seq = seq;
  g_strlcpy(hb->cur.label, label ? label : "", sizeof hb->cur.label);
  hb->cur.since_us = g_get_monotonic_time();
  hb->cur.timeout_s = timeout_s;
  g_mutex_unlock(&hb->lock);
}

void cohort_heartbeat_leave(CohortHeartbeat *hb)
{
  g_mutex_lock(&hb->lock);
  /* The end of a wait the others were told of: say so now, not an interval later. */
  if (hb->cur.kind != NULL && hb->cur.seq == hb->flagged_seq) {
    hb->beat_now = TRUE;
    g_cond_broadcast(&hb->cond);
  }
  if (hb->cur.kind != NULL)
    hb->last = hb->cur;
  hb->cur.kind = NULL;
  hb->cur.seq = 0;
  g_mutex_unlock(&hb->lock);
}

/* ---- the failure message ---- */

/* "all_reduce #41 (bucket 1 of 3)" */
static char *collective_text(const char *kind, guint64 seq, const char *label)
{
  return label[0] ? g_strdup_printf("%s #%" G_GUINT64_FORMAT " (%s)", kind, seq, label)
                  : g_strdup_printf("%s #%" G_GUINT64_FORMAT, kind, seq);
}

char *cohort_rank_record_describe(const CohortRankRecord *r)
{
  if (!r->known)
    return g_strdup_printf("rank %d has published no progress yet", r->rank);
  g_autofree char *done = r->last_seq > 0
                              ? collective_text(r->last_kind, r->last_seq, r->last_label)
                              : g_strdup("no collective");
  g_autofree char *in =
      r->cur_seq > 0 ? collective_text(r->cur_kind, r->cur_seq, r->cur_label) : NULL;
  GString *s = g_string_new(NULL);
  g_string_append_printf(s, "rank %d last completed %s, ", r->rank, done);
  if (in != NULL)
    g_string_append_printf(s, "waits in %s for %.0f s, ", in, r->cur_wait_s);
  g_string_append_printf(s, "in %s for %.0f s at step %" G_GINT64_FORMAT, r->phase, r->phase_s,
                         r->step);
  if (r->silent)
    g_string_append_printf(s,
                           "; its heartbeat has been silent for %.0f s, so that is where it "
                           "was then: the process is stopped, its host paused or cut off, or "
                           "it lost the store",
                           r->age_s);
  return g_string_free(s, FALSE);
}

/* Why the store cannot tell where the ranks are: rank 0 is silent (its words), or the store is
 * gone with rank 0 ("": nothing to add, the peers' errors say it); NULL while it answers. Never
 * waits: it is what a failure report checks before asking the store anything. */
static char *store_silence(CohortHeartbeat *hb)
{
  g_autoptr(GError) why = NULL;
  if (cohort_store_is_broken(hb->store, &why))
    return g_error_matches(why, COHORT_DIST_ERROR, COHORT_DIST_ERROR_TIMEOUT)
               ? g_strdup_printf(": %s", why->message)
               : g_strdup("");
  double waited = cohort_store_waiting_s(hb->store);
  if (waited >= SILENT_WAIT_S)
    return g_strdup_printf(": " COHORT_STORE_SILENT ": a request to it has waited %.0f s for "
                           "its answer; is rank 0 stopped (SIGSTOP, a debugger), or its host "
                           "paused or unreachable?",
                           waited);
  return NULL;
}

char *cohort_heartbeat_describe_missing(CohortHeartbeat *hb, guint64 seq)
{
  if (hb->store == NULL || hb->world < 2)
    return g_strdup("");
  char *silence = store_silence(hb);
  if (silence != NULL)
    return silence;
  g_autofree CohortRankRecord *all = read_all(hb, DESCRIBE_S);
  if (all == NULL) {
    /* The store is gone with rank 0 (nothing to say), or it has just gone silent. */
    silence = store_silence(hb);
    return silence != NULL ? silence : g_strdup("");
  }
  g_autoptr(GString) missing = g_string_new(NULL);
  g_autoptr(GString) detail = g_string_new(NULL);
  g_autoptr(GString) aborts = g_string_new(NULL);
  int n_missing = 0;
  for (int r = 0; r < hb->world; r++) {
    if (r == hb->rank)
      continue;
    if (entered(&all[r]) < seq) {
      g_string_append_printf(missing, "%s%d", n_missing ? ", " : "", r);
      if (n_missing < DESCRIBED) {
        g_autofree char *d = cohort_rank_record_describe(&all[r]);
        g_string_append_printf(detail, "%s%s", detail->len ? "; " : "", d);
      }
      n_missing++;
    }
    char key[64];
    g_snprintf(key, sizeof key, "comm/abort/%d", r);
    g_autoptr(GBytes) a = cohort_store_try_get_within(hb->store, key, DESCRIBE_S, NULL);
    if (a != NULL)
      g_string_append_printf(aborts, "; rank %d aborted: %.*s", r, (int)g_bytes_get_size(a),
                             (const char *)g_bytes_get_data(a, NULL));
  }
  if (n_missing > DESCRIBED)
    g_string_append_printf(detail, "; and %d more", n_missing - DESCRIBED);
  if (n_missing == 0) {
    /* Every rank reached it (one stopped inside it, or the network fails): where each is. */
    for (int r = 0, n = 0; r < hb->world && n < DESCRIBED; r++)
      if (r != hb->rank && all[r].known) {
        g_autofree char *d = cohort_rank_record_describe(&all[r]);
        g_string_append_printf(detail, "%s%s", n++ ? "; " : "", d);
      }
    return detail->len ? g_strdup_printf(": every rank reached it (%s)%s", detail->str, aborts->str)
                       : g_strdup(aborts->str);
  }
  return g_strdup_printf(": rank%s %s did not arrive (%s)%s", n_missing > 1 ? "s" : "",
                         missing->str, detail->str, aborts->str);
}

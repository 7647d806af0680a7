#include "engine/progress/control.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/base/error.h"
#include "engine/base/fileio.h"

struct CohortControl {
  int fd;            /* -1 once the writer is gone */
  GString *partial;  /* the start of a line whose newline has not arrived */
  gboolean too_long; /* the current line passed the limit: skip it to its newline */
  /* Rate limit of the warnings: bad lines since the last one reported, the last of them, and
   * when a warning last went out (0 = never). */
  guint64 unreported;
  char *last_bad;
  gint64 last_warning_us;
  double interval_s;
};

gboolean cohort_control_check_fd(int fd, GError **error)
{
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    return cohort_fail(error, G_IO_ERROR, g_io_error_from_errno(e),
                       "--control-fd %d is not an open file descriptor: %s", fd, g_strerror(e));
  }
  if (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode))
    return TRUE;
  g_autofree char *link = g_strdup_printf("/proc/self/fd/%d", fd);
  g_autofree char *target = g_file_read_link(link, NULL);
  g_autofree char *shown = target ? g_strdup_printf(" (%s)", target) : g_strdup("");
  return cohort_fail(error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                     "--control-fd %d%s is %s; allowed: a pipe or a socket (a file would be read "
                     "again and again, a device never ends)",
                     fd, shown, cohort_file_kind(st.st_mode));
}

CohortControl *cohort_control_new(int fd, GError **error)
{
  if (!cohort_control_check_fd(fd, error))
    return NULL;
  CohortControl *c = g_new0(CohortControl, 1);
  c->fd = fd;
  c->partial = g_string_new(NULL);
  c->interval_s = COHORT_CONTROL_WARN_INTERVAL_S;
  return c;
}

void cohort_control_set_warn_interval(CohortControl *c, double seconds)
{
  c->interval_s = seconds;
}

void cohort_control_free(CohortControl *c)
{
  if (c == NULL)
    return;
  g_string_free(c->partial, TRUE);
  g_free(c->last_bad);
  g_free(c);
}

/* Whether a warning may go out now: none went out in the last interval. */
static gboolean may_warn(const CohortControl *c)
{
  return c->last_warning_us == 0 ||
         g_get_monotonic_time() >= c->last_warning_us + (gint64)(c->interval_s * G_USEC_PER_SEC);
}

/* A bad line: reported at once when no warning went out in the last interval, else counted
 * for the next summary. */
static void warn(CohortControl *c, CohortProgress *progress, const char *message)
{
  if (!may_warn(c)) {
    c->unreported++;
    g_free(c->last_bad);
    c->last_bad = g_strdup(message);
    return;
  }
  c->last_warning_us = g_get_monotonic_time();
  if (progress != NULL)
    cohort_progress_log(progress, COHORT_LEVEL_WARNING, "control channel: %s", message);
}

/* The summary of the lines counted since the last warning, once the interval is over. */
static void warn_summary(CohortControl *c, CohortProgress *progress)
{
  if (c->unreported == 0 || !may_warn(c))
    return;
  c->last_warning_us = g_get_monotonic_time();
  if (progress != NULL)
    cohort_progress_log(progress, COHORT_LEVEL_WARNING,
                        "control channel: %" G_GUINT64_FORMAT " more line%s skipped in the last "
                        "%g s (the last: %s)",
                        c->unreported, c->unreported == 1 ? "" : "s", c->interval_s, c->last_bad);
  c->unreported = 0;
}

static guint parse_line(CohortControl *c, const char *line, CohortProgress *progress)
{
  g_autofree char *word = g_strstrip(g_strdup(line));
  if (g_str_equal(word, COHORT_CONTROL_WORD_SAMPLE))
    return COHORT_CONTROL_SAMPLE;
  if (g_str_equal(word, COHORT_CONTROL_WORD_SAVE))
    return COHORT_CONTROL_SAVE;
  if (g_str_equal(word, COHORT_CONTROL_WORD_CHECK))
    return COHORT_CONTROL_CHECK;
  if (*word == '\0')
    return 0;
  g_autofree char *shown = g_utf8_make_valid(word, -1);
  g_autofree char *msg =
      g_strdup_printf("\"%s\" is not a request; allowed: " COHORT_CONTROL_WORD_SAMPLE
                      ", " COHORT_CONTROL_WORD_SAVE ", " COHORT_CONTROL_WORD_CHECK,
                      shown);
  warn(c, progress, msg);
  return 0;
}

/* Adds the bytes `buf[0..n)` to the line being read; returns the requests of the lines they
 * complete. */
static guint take(CohortControl *c, const char *buf, gssize n, CohortProgress *progress)
{
  guint requests = 0;
  for (gssize i = 0; i < n; i++) {
    if (buf[i] != '\n') {
      if (c->partial->len < COHORT_CONTROL_MAX_LINE)
        g_string_append_c(c->partial, buf[i]);
      else
        c->too_long = TRUE;
      continue;
    }
    if (c->too_long)
      warn(c, progress,
           "a line longer than " G_STRINGIFY(COHORT_CONTROL_MAX_LINE) " bytes was skipped");
    else
      requests |= parse_line(c, c->partial->str, progress);
    g_string_truncate(c->partial, 0);
    c->too_long = FALSE;
  }
  return requests;
}

guint cohort_control_poll(CohortControl *c, CohortProgress *progress)
{
  guint requests = 0;
  /* poll, then one read of what is there: never O_NONBLOCK on a description the watcher may
   * share, and never more than a bounded amount per step whatever the writer does. */
  struct pollfd p = {.fd = c->fd, .events = POLLIN};
  while (c->fd >= 0) {
    int ready = poll(&p, 1, 0);
    if (ready < 0 && errno == EINTR)
      continue;
    if (ready == 0)
      break;
    char buf[COHORT_CONTROL_MAX_BYTES_PER_POLL];
    gssize n = ready > 0 && (p.revents & (POLLIN | POLLHUP)) ? read(c->fd, buf, sizeof buf) : -1;
    if (n < 0 && errno == EINTR)
      continue;
    if (n > 0)
      requests |= take(c, buf, n, progress);
    else
      c->fd = -1; /* end of file (the watcher went away) or an error: no more requests */
    break;
  }
  warn_summary(c, progress);
  return requests;
}

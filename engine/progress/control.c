#include "engine/progress/control.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

struct CohortControl {
  int fd;            /* -1 once the writer is gone */
  GString *partial;  /* the start of a line whose newline has not arrived */
  gboolean too_long; /* the current line passed the limit: skip it to its newline */
};

CohortControl *cohort_control_new(int fd)
{
  CohortControl *c = g_new0(CohortControl, 1);
  c->fd = fd;
  c->partial = g_string_new(NULL);
  int flags = fcntl(fd, F_GETFL);
  if (flags >= 0)
    fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  return c;
}

void cohort_control_free(CohortControl *c)
{
  if (c == NULL)
    return;
  g_string_free(c->partial, TRUE);
  g_free(c);
}

static void warn(CohortProgress *progress, const char *message)
{
  if (progress != NULL)
    cohort_progress_log(progress, COHORT_LEVEL_WARNING, "control channel: %s", message);
}

static guint parse_line(const char *line, CohortProgress *progress)
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
  warn(progress, msg);
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
      warn(progress,
           "a line longer than " G_STRINGIFY(COHORT_CONTROL_MAX_LINE) " bytes was skipped");
    else
      requests |= parse_line(c->partial->str, progress);
    g_string_truncate(c->partial, 0);
    c->too_long = FALSE;
  }
  return requests;
}

guint cohort_control_poll(CohortControl *c, CohortProgress *progress)
{
  guint requests = 0;
  char buf[512];
  while (c->fd >= 0) {
    gssize n = read(c->fd, buf, sizeof buf);
    if (n > 0) {
      requests |= take(c, buf, n, progress);
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      break;
    /* End of file (the watcher went away) or an error: the run goes on without requests. */
    c->fd = -1;
  }
  return requests;
}

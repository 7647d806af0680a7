#include "progress.h"
#include "json-write.h"

#include <errno.h>
#include <string.h>
#include <stdio.h>
#include <unistd.h>

struct CohortProgress {
  int fd;
  gboolean human;
  gboolean tty;
  gboolean live_shown;
};

CohortProgress *cohort_progress_new(int fd, gboolean human)
{
  CohortProgress *p = g_new0(CohortProgress, 1);
  p->fd = fd;
  p->human = human;
  p->tty = human && isatty(STDOUT_FILENO);
  return p;
}

void cohort_progress_free(CohortProgress *p)
{
  if (!p)
    return;
  cohort_progress_finish_line(p);
  g_free(p);
}

static void write_all(CohortProgress *p, const char *buf, gsize len)
{
  while (len > 0 && p->fd >= 0) {
    ssize_t n = write(p->fd, buf, len);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      /* The reader is gone (EPIPE) or the fd is bad: stop writing, keep training. */
      p->fd = -1;
      return;
    }
    buf += n;
    len -= (gsize)n;
  }
}

void cohort_progress_emit(CohortProgress *p, const char *event, JsonObject *fields)
{
  if (p->fd < 0) {
    if (fields)
      json_object_unref(fields);
    return;
  }
  g_autoptr(JsonObject) obj = json_object_new();
  json_object_set_string_member(obj, "event", event);
  json_object_set_double_member(obj, "time", (double)g_get_real_time() / 1e6);
  if (fields) {
    JsonObjectIter it;
    const char *name;
    JsonNode *node;
    json_object_iter_init(&it, fields);
    while (json_object_iter_next(&it, &name, &node))
      json_object_set_member(obj, name, json_node_copy(node));
    json_object_unref(fields);
  }
  g_autoptr(JsonNode) root = json_node_init_object(json_node_alloc(), obj);
  g_autofree char *text = cohort_json_to_string(root, FALSE);
  g_autofree char *line = g_strconcat(text, "\n", NULL);
  write_all(p, line, strlen(line));
}

void cohort_progress_finish_line(CohortProgress *p)
{
  if (p->live_shown) {
    fputs("\n", stdout);
    fflush(stdout);
    p->live_shown = FALSE;
  }
}

void cohort_progress_log(CohortProgress *p, const char *level, const char *format, ...)
{
  va_list ap;
  va_start(ap, format);
  g_autofree char *msg = g_strdup_vprintf(format, ap);
  va_end(ap);
  if (p->human) {
    if (p->live_shown) {
      fputs("\r\033[K", stdout);
      p->live_shown = FALSE;
    }
    gboolean info = g_str_equal(level, "info");
    FILE *out = info ? stdout : stderr;
    fflush(stdout);
    if (info)
      fprintf(out, "%s\n", msg);
    else
      fprintf(out, "%s: %s\n", level, msg);
    fflush(out);
  }
  JsonObject *f = json_object_new();
  json_object_set_string_member(f, "level", level);
  json_object_set_string_member(f, "message", msg);
  cohort_progress_emit(p, "log", f);
}

void cohort_progress_status(CohortProgress *p, gboolean force_line, const char *format, ...)
{
  if (!p->human)
    return;
  va_list ap;
  va_start(ap, format);
  g_autofree char *msg = g_strdup_vprintf(format, ap);
  va_end(ap);
  if (p->tty) {
    fprintf(stdout, "\r\033[K%s", msg);
    fflush(stdout);
    p->live_shown = TRUE;
  } else if (force_line) {
    fprintf(stdout, "%s\n", msg);
    fflush(stdout);
  }
}

char *cohort_format_duration(double seconds)
{
  if (seconds < 0)
    seconds = 0;
  long s = (long)(seconds + 0.5);
  if (s >= 3600)
    return g_strdup_printf("%ldh%02ldm", s / 3600, (s % 3600) / 60);
  if (s >= 60)
    return g_strdup_printf("%ldm%02lds", s / 60, s % 60);
  return g_strdup_printf("%lds", s);
}

#include "engine/progress/progress.h"
#include "engine/base/json-write.h"

#include <errno.h>
#include <gio/gio.h>
#include <string.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

struct CohortProgress {
  /* Events may come from another thread (the hang report's, engine/train/hang-report.c): one
   * line at a time, and the live line stays whole. Recursive: log emits. */
  GRecMutex lock;
  int fd;
  gboolean human;
  gboolean tty;
  gboolean live_shown;
  CohortRunRecord *recorder;
};

CohortProgress *cohort_progress_new(int fd, gboolean human)
{
  CohortProgress *p = g_new0(CohortProgress, 1);
  p->fd = fd;
  p->human = human;
  p->tty = human && isatty(STDOUT_FILENO);
  g_rec_mutex_init(&p->lock);
  return p;
}

void cohort_progress_free(CohortProgress *p)
{
  if (!p)
    return;
  cohort_progress_finish_line(p);
  cohort_run_record_free(p->recorder);
  g_rec_mutex_clear(&p->lock);
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

void cohort_progress_set_recorder(CohortProgress *p, CohortRunRecord *rec)
{
  if (p->recorder != rec)
    cohort_run_record_free(p->recorder);
  p->recorder = rec;
}

CohortRunRecord *cohort_progress_get_recorder(CohortProgress *p)
{
  return p->recorder;
}

/* TRUE when the JSON stream is the file at `path`. */
static gboolean stream_is(CohortProgress *p, const char *path)
{
  struct stat a, b;
  return p->fd >= 0 && fstat(p->fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev &&
         a.st_ino == b.st_ino;
}

gboolean cohort_progress_open_record(CohortProgress *p, const char *workspace, const char *run_id,
                                     GError **error)
{
  if (!p->recorder)
    return TRUE;
  g_autofree char *events = g_build_filename(workspace, "events.jsonl", NULL);
  if (stream_is(p, events)) {
    g_set_error(error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                "--progress-fd %d writes to %s, which the run writes itself (the run record); "
                "give --progress-fd another file",
                p->fd, events);
    return FALSE;
  }
  g_autoptr(GPtrArray) notes = g_ptr_array_new_with_free_func(g_free);
  if (!cohort_run_record_open(p->recorder, workspace, run_id, notes, error))
    return FALSE;
  for (guint i = 0; i < notes->len; i++)
    cohort_progress_log(p, COHORT_LEVEL_WARNING, "%s", (const char *)g_ptr_array_index(notes, i));
  return TRUE;
}

void cohort_progress_emit(CohortProgress *p, const char *event, JsonObject *fields)
{
  g_rec_mutex_lock(&p->lock);
  if (p->fd < 0 && !p->recorder) {
    if (fields)
      json_object_unref(fields);
    g_rec_mutex_unlock(&p->lock);
    return;
  }
  g_autoptr(JsonObject) obj = json_object_new();
  json_object_set_string_member(obj, COHORT_FIELD_EVENT, event);
  json_object_set_double_member(obj, COHORT_FIELD_TIME, (double)g_get_real_time() / 1e6);
  if (fields) {
    JsonObjectIter it;
    const char *name;
    JsonNode *node;
    json_object_iter_init(&it, fields);
    while (json_object_iter_next(&it, &name, &node))
      json_object_set_member(obj, name, json_node_copy(node));
    json_object_unref(fields);
  }
  if (p->fd >= 0) {
    g_autoptr(JsonNode) root = json_node_init_object(json_node_alloc(), obj);
    g_autofree char *text = cohort_json_to_string(root, FALSE);
    g_autofree char *line = g_strconcat(text, "\n", NULL);
    write_all(p, line, strlen(line));
  }
  /* After the stream's line is written: the record adds "run_id" to the object. */
  if (p->recorder)
    cohort_run_record_event(p->recorder, obj);
  g_rec_mutex_unlock(&p->lock);
}

void cohort_progress_finish_line(CohortProgress *p)
{
  g_rec_mutex_lock(&p->lock);
  if (p->live_shown) {
    fputs("\n", stdout);
    fflush(stdout);
    p->live_shown = FALSE;
  }
  g_rec_mutex_unlock(&p->lock);
}

void cohort_progress_log(CohortProgress *p, const char *level, const char *format, ...)
{
  va_list ap;
  va_start(ap, format);
  g_autofree char *msg = g_strdup_vprintf(format, ap);
  va_end(ap);
  g_rec_mutex_lock(&p->lock);
  if (p->human) {
    if (p->live_shown) {
      fputs("\r\033[K", stdout);
      p->live_shown = FALSE;
    }
    gboolean info = g_str_equal(level, COHORT_LEVEL_INFO);
    FILE *out = info ? stdout : stderr;
    fflush(stdout);
    if (info)
      fprintf(out, "%s\n", msg);
    else
      fprintf(out, "%s: %s\n", level, msg);
    fflush(out);
  }
  JsonObject *f = json_object_new();
  json_object_set_string_member(f, COHORT_FIELD_LEVEL, level);
  json_object_set_string_member(f, COHORT_FIELD_MESSAGE, msg);
  cohort_progress_emit(p, COHORT_EVENT_LOG, f);
  g_rec_mutex_unlock(&p->lock);
}

void cohort_progress_status(CohortProgress *p, gboolean force_line, const char *format, ...)
{
  if (!p->human)
    return;
  va_list ap;
  va_start(ap, format);
  g_autofree char *msg = g_strdup_vprintf(format, ap);
  va_end(ap);
  g_rec_mutex_lock(&p->lock);
  if (p->tty) {
    fprintf(stdout, "\r\033[K%s", msg);
    fflush(stdout);
    p->live_shown = TRUE;
  } else if (force_line) {
    fprintf(stdout, "%s\n", msg);
    fflush(stdout);
  }
  g_rec_mutex_unlock(&p->lock);
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

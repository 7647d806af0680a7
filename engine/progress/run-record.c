#include "engine/progress/run-record.h"

#include <errno.h>
#include <fcntl.h>
#include <gio/gio.h>
#include <glib/gstdio.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/base/json-write.h"
#include "engine/progress/protocol.h"

/* Set-up emits a handful of events before the run id is known; this only bounds a caller
 * that never opens the record. */
#define MAX_HELD 1000

struct CohortRunRecord {
  char *run_id;
  char *events_path;
  int events_fd; /* -1: closed, or given up after a failed write */
  CohortTbWriter *tb;
  GPtrArray *held; /* JsonObject, until open */
  guint dropped;   /* events not held past MAX_HELD */
};

CohortRunRecord *cohort_run_record_new(void)
{
  CohortRunRecord *rec = g_new0(CohortRunRecord, 1);
  rec->events_fd = -1;
  rec->held = g_ptr_array_new_with_free_func((GDestroyNotify)json_object_unref);
  return rec;
}

void cohort_run_record_free(CohortRunRecord *rec)
{
  if (!rec)
    return;
  if (rec->events_fd >= 0)
    close(rec->events_fd);
  cohort_tb_writer_free(rec->tb);
  g_ptr_array_unref(rec->held);
  g_free(rec->run_id);
  g_free(rec->events_path);
  g_free(rec);
}

gboolean cohort_run_id_check(const char *id, GError **error)
{
  gsize n = id ? strlen(id) : 0;
  gboolean ok = n >= 1 && n <= 128 && id[0] != '.';
  for (gsize i = 0; ok && i < n; i++)
    ok = g_ascii_isalnum(id[i]) || id[i] == '.' || id[i] == '_' || id[i] == '-';
  if (!ok)
    g_set_error(error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                "run id \"%s\" is not allowed; allowed: 1 to 128 characters from A-Z a-z 0-9 . _ "
                "-, not starting with '.'",
                id ? id : "");
  return ok;
}

static gboolean write_all(int fd, const char *buf, gsize len)
{
  while (len > 0) {
    ssize_t n = write(fd, buf, len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return FALSE;
    buf += n;
    len -= (gsize)n;
  }
  return TRUE;
}

/* Cuts a last line without its '\n' (the tail of a write the machine lost) so the next line
 * is not glued onto it. Notes the cut in `notes`. */
static gboolean cut_torn_line(int fd, const char *path, GPtrArray *notes, GError **error)
{
  struct stat st;
  if (fstat(fd, &st) != 0)
    goto io_error;
  off_t end = st.st_size, keep = 0;
  char buf[65536];
  /* Back from the end to the last '\n'. */
  for (off_t at = end; at > 0 && keep == 0;) {
    off_t from = MAX(at - (off_t)sizeof buf, 0);
    ssize_t n = pread(fd, buf, (size_t)(at - from), from);
    if (n < 0 && errno == EINTR)
      continue;
    if (n != at - from)
      goto io_error;
    for (ssize_t i = n - 1; i >= 0; i--)
      if (buf[i] == '\n') {
        keep = from + i + 1;
        break;
      }
    at = from;
  }
  if (keep == end)
    return TRUE;
  if (ftruncate(fd, keep) != 0)
    goto io_error;
  if (notes)
    g_ptr_array_add(notes, g_strdup_printf("%s: removed an incomplete last line (%" G_GINT64_FORMAT
                                           " bytes) left by a process stopped while writing",
                                           path, (gint64)(end - keep)));
  return TRUE;
io_error:
  g_set_error(error, G_IO_ERROR, g_io_error_from_errno(errno), "%s: %s", path, g_strerror(errno));
  return FALSE;
}

static void write_held(CohortRunRecord *rec, GPtrArray *notes)
{
  g_autoptr(GPtrArray) held = g_steal_pointer(&rec->held);
  rec->held = g_ptr_array_new_with_free_func((GDestroyNotify)json_object_unref);
  for (guint i = 0; i < held->len; i++)
    cohort_run_record_event(rec, g_ptr_array_index(held, i));
  if (rec->dropped && notes)
    g_ptr_array_add(notes, g_strdup_printf("%s: %u events from before the run record opened were "
                                           "not recorded",
                                           rec->events_path, rec->dropped));
  rec->dropped = 0;
}

gboolean cohort_run_record_open(CohortRunRecord *rec, const char *workspace, const char *run_id,
                                GPtrArray *notes, GError **error)
{
  if (cohort_run_record_is_open(rec)) {
    g_set_error(error, G_IO_ERROR, G_IO_ERROR_EXISTS,
                "%s: the run record is already open for run %s", rec->events_path, rec->run_id);
    return FALSE;
  }
  if (!cohort_run_id_check(run_id, error))
    return FALSE;
  if (g_mkdir_with_parents(workspace, 0755) != 0) {
    g_set_error(error, G_IO_ERROR, g_io_error_from_errno(errno), "%s: cannot create: %s", workspace,
                g_strerror(errno));
    return FALSE;
  }
  g_autofree char *events_path = g_build_filename(workspace, "events.jsonl", NULL);
  int fd = open(events_path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    g_set_error(error, G_IO_ERROR, g_io_error_from_errno(errno), "%s: cannot open: %s", events_path,
                g_strerror(errno));
    return FALSE;
  }
  if (!cut_torn_line(fd, events_path, notes, error)) {
    close(fd);
    return FALSE;
  }
  g_autofree char *tb_dir = g_build_filename(workspace, "tensorboard", run_id, NULL);
  g_autofree char *tb_note = NULL;
  CohortTbWriter *tb = cohort_tb_writer_open(tb_dir, &tb_note, error);
  if (!tb) {
    close(fd);
    return FALSE;
  }
  if (tb_note && notes)
    g_ptr_array_add(notes, g_steal_pointer(&tb_note));
  rec->events_fd = fd;
  rec->events_path = g_steal_pointer(&events_path);
  rec->tb = tb;
  rec->run_id = g_strdup(run_id);
  write_held(rec, notes);
  return TRUE;
}

gboolean cohort_run_record_is_open(CohortRunRecord *rec)
{
  return rec->run_id != NULL;
}

const char *cohort_run_record_run_id(CohortRunRecord *rec)
{
  return rec->run_id;
}

const char *cohort_run_record_events_path(CohortRunRecord *rec)
{
  return rec->events_path;
}

const char *cohort_run_record_tb_path(CohortRunRecord *rec)
{
  return rec->tb ? cohort_tb_writer_path(rec->tb) : NULL;
}

static gboolean numeric(JsonNode *node, double *out)
{
  if (!JSON_NODE_HOLDS_VALUE(node))
    return FALSE;
  GType t = json_node_get_value_type(node);
  if (t == G_TYPE_INT64)
    *out = (double)json_node_get_int(node);
  else if (t == G_TYPE_DOUBLE)
    *out = json_node_get_double(node);
  else
    return FALSE;
  return TRUE;
}

/* Every numeric member of `obj` but those in `skip`, as `prefix``name`. */
static void add_numeric(CohortTbScalars *s, JsonObject *obj, const char *prefix,
                        const char *const *skip)
{
  JsonObjectIter it;
  const char *name;
  JsonNode *node;
  json_object_iter_init(&it, obj);
  while (json_object_iter_next(&it, &name, &node)) {
    double v;
    if (g_strv_contains(skip, name) || !numeric(node, &v))
      continue;
    g_autofree char *tag = g_strconcat(prefix, name, NULL);
    cohort_tb_scalars_add(s, tag, v);
  }
}

CohortTbScalars *cohort_run_record_scalars(JsonObject *ev)
{
  const char *name = json_object_get_string_member_with_default(ev, COHORT_FIELD_EVENT, "");
  g_autoptr(CohortTbScalars) s = cohort_tb_scalars_new();
  if (g_str_equal(name, COHORT_EVENT_STEP)) {
    static const char *const train[] = {COHORT_FIELD_LOSS,          COHORT_FIELD_LR,
                                        COHORT_FIELD_GRAD_NORM,     COHORT_FIELD_TOKENS_PER_S,
                                        COHORT_FIELD_SAMPLES_PER_S, COHORT_FIELD_LOSS_SCALE,
                                        COHORT_FIELD_LOSS_DISTILL,  COHORT_FIELD_LOSS_TASK};
    for (guint i = 0; i < G_N_ELEMENTS(train); i++) {
      JsonNode *node = json_object_get_member(ev, train[i]);
      double v;
      if (node && numeric(node, &v)) {
        g_autofree char *tag = g_strconcat("train/", train[i], NULL);
        cohort_tb_scalars_add(s, tag, v);
      }
    }
  } else if (g_str_equal(name, COHORT_EVENT_EVAL)) {
    static const char *const skip[] = {COHORT_FIELD_EVENT, COHORT_FIELD_TIME, COHORT_FIELD_STEP,
                                       COHORT_FIELD_RUN_ID, NULL};
    add_numeric(s, ev, "eval/", skip);
  } else if (g_str_equal(name, COHORT_EVENT_RANKS) &&
             json_object_has_member(ev, COHORT_FIELD_RANKS) &&
             JSON_NODE_HOLDS_ARRAY(json_object_get_member(ev, COHORT_FIELD_RANKS))) {
    static const char *const skip[] = {COHORT_FIELD_RANK, NULL};
    JsonArray *ranks = json_object_get_array_member(ev, COHORT_FIELD_RANKS);
    for (guint i = 0; i < json_array_get_length(ranks); i++) {
      JsonObject *r = json_array_get_object_element(ranks, i);
      if (!r)
        continue;
      g_autofree char *prefix =
          g_strdup_printf("rank/%" G_GINT64_FORMAT "/",
                          json_object_get_int_member_with_default(r, COHORT_FIELD_RANK, i));
      add_numeric(s, r, prefix, skip);
    }
  }
  return cohort_tb_scalars_count(s) > 0 ? g_steal_pointer(&s) : NULL;
}

static void give_up(int *fd, const char *path, const char *what)
{
  g_printerr("cohort-train: warning: %s: cannot write (%s); %s no longer recorded there\n", path,
             g_strerror(errno), what);
  if (*fd >= 0)
    close(*fd);
  *fd = -1;
}

static void write_tb(CohortRunRecord *rec, JsonObject *ev)
{
  const char *name = json_object_get_string_member_with_default(ev, COHORT_FIELD_EVENT, "");
  double time = json_object_get_double_member_with_default(ev, COHORT_FIELD_TIME, 0);
  g_autoptr(GError) error = NULL;
  gboolean ok = TRUE;
  if (g_str_equal(name, COHORT_EVENT_START)) {
    /* A resumed run redoes the steps after its checkpoint: TensorBoard drops the points
     * those steps left before the restart. */
    gint64 from = json_object_get_int_member_with_default(ev, COHORT_FIELD_START_STEP, 0);
    if (from > 0)
      ok = cohort_tb_writer_session_start(rec->tb, time, from + 1, &error);
  } else {
    g_autoptr(CohortTbScalars) s = cohort_run_record_scalars(ev);
    if (s)
      ok = cohort_tb_writer_add(rec->tb, time,
                                json_object_get_int_member_with_default(ev, COHORT_FIELD_STEP, 0),
                                s, &error);
  }
  if (!ok) {
    g_printerr("cohort-train: warning: %s; TensorBoard scalars no longer recorded\n",
               error->message);
    g_clear_pointer(&rec->tb, cohort_tb_writer_free);
  }
}

void cohort_run_record_event(CohortRunRecord *rec, JsonObject *ev)
{
  if (!cohort_run_record_is_open(rec)) {
    if (rec->held->len < MAX_HELD)
      g_ptr_array_add(rec->held, json_object_ref(ev));
    else
      rec->dropped++;
    return;
  }
  json_object_set_string_member(ev, COHORT_FIELD_RUN_ID, rec->run_id);
  if (rec->events_fd >= 0) {
    g_autoptr(JsonNode) root = json_node_init_object(json_node_alloc(), ev);
    g_autoptr(GString) line = g_string_new(NULL);
    g_autofree char *text = cohort_json_to_string(root, FALSE);
    g_string_append(line, text);
    g_string_append_c(line, '\n');
    /* One write() on an O_APPEND descriptor: the line lands whole, after whatever is there. */
    if (!write_all(rec->events_fd, line->str, line->len))
      give_up(&rec->events_fd, rec->events_path, "events are");
  }
  if (rec->tb)
    write_tb(rec, ev);
}

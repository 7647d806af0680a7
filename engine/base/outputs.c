/* What a program may write (see outputs.h). */
#include "engine/base/outputs.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/base/error.h"
#include "engine/base/fileio.h"

typedef struct {
  char *path;     /* as the program named it */
  char *resolved; /* cohort_path_resolve */
  char *folded;   /* resolved, case-folded (outputs) */
  char *what;     /* outputs: what it is, for messages */
  gboolean exists;
  dev_t dev;
  ino_t ino;
} Entry;

struct CohortOutputs {
  GArray *inputs, *outputs; /* of Entry */
};

static void entry_clear(gpointer data)
{
  Entry *e = data;
  g_free(e->path);
  g_free(e->resolved);
  g_free(e->folded);
  g_free(e->what);
}

CohortOutputs *cohort_outputs_new(void)
{
  CohortOutputs *o = g_new0(CohortOutputs, 1);
  o->inputs = g_array_new(FALSE, TRUE, sizeof(Entry));
  o->outputs = g_array_new(FALSE, TRUE, sizeof(Entry));
  g_array_set_clear_func(o->inputs, entry_clear);
  g_array_set_clear_func(o->outputs, entry_clear);
  return o;
}

void cohort_outputs_free(CohortOutputs *o)
{
  if (!o)
    return;
  g_array_unref(o->inputs);
  g_array_unref(o->outputs);
  g_free(o);
}

char *cohort_path_resolve(const char *path)
{
  g_autofree char *abs = g_canonicalize_filename(path, NULL);
  /* realpath of the longest prefix that exists, the rest appended as written */
  g_autoptr(GString) tail = g_string_new(NULL);
  g_autofree char *head = g_strdup(abs);
  for (;;) {
    char buf[PATH_MAX];
    if (realpath(head, buf)) {
      gboolean root = strcmp(buf, "/") == 0;
      return g_strconcat(buf, root && tail->len ? tail->str + 1 : tail->str, NULL);
    }
    char *slash = strrchr(head, '/');
    if (!slash || slash == head)
      return g_steal_pointer(&abs);
    g_string_prepend(tail, slash);
    *slash = '\0';
  }
}

static void entry_init(Entry *e, const char *path)
{
  e->path = g_strdup(path);
  e->resolved = cohort_path_resolve(path);
  struct stat st;
  e->exists = stat(path, &st) == 0;
  if (e->exists) {
    e->dev = st.st_dev;
    e->ino = st.st_ino;
  }
}

void cohort_outputs_add_input(CohortOutputs *o, const char *path)
{
  Entry e = {0};
  entry_init(&e, path);
  g_array_append_val(o->inputs, e);
}

static gboolean same_file(const Entry *a, const Entry *b)
{
  return (a->exists && b->exists && a->dev == b->dev && a->ino == b->ino) ||
         strcmp(a->resolved, b->resolved) == 0;
}

/* Whether output `e` may be written; FALSE with the refusal. */
static gboolean allowed(const CohortOutputs *o, const Entry *e, GError **error)
{
  struct stat st;
  if (stat(e->path, &st) == 0 && !S_ISREG(st.st_mode))
    return cohort_fail(error, G_FILE_ERROR,
                       S_ISDIR(st.st_mode) ? G_FILE_ERROR_ISDIR : G_FILE_ERROR_NXIO,
                       "%s (%s): it is %s, not a regular file; allowed: a new file or a regular "
                       "file to replace",
                       e->path, e->what, cohort_file_kind(st.st_mode));
  for (guint i = 0; i < o->inputs->len; i++) {
    const Entry *in = &g_array_index(o->inputs, Entry, i);
    if (same_file(e, in))
      return cohort_fail(error, G_FILE_ERROR, G_FILE_ERROR_EXIST,
                         "%s (%s) is %s, one of the inputs; an output never replaces an input; "
                         "allowed: a path that is none of the inputs",
                         e->path, e->what, in->path);
  }
  for (guint i = 0; i < o->outputs->len; i++) {
    const Entry *out = &g_array_index(o->outputs, Entry, i);
    if (same_file(e, out) || strcmp(e->folded, out->folded) == 0)
      return cohort_fail(error, G_FILE_ERROR, G_FILE_ERROR_EXIST,
                         "%s (%s) and %s (%s) would be one file%s; allowed: outputs whose names "
                         "differ in more than letter case",
                         e->path, e->what, out->path, out->what,
                         strcmp(e->resolved, out->resolved) == 0
                             ? ""
                             : " (on a case-insensitive filesystem, as macOS's and Windows' "
                               "are)");
  }
  return TRUE;
}

gboolean cohort_outputs_add(CohortOutputs *o, const char *path, const char *what, GError **error)
{
  Entry e = {0};
  entry_init(&e, path);
  e.what = g_strdup(what);
  /* (a name that is not UTF-8 is compared with ASCII letters folded) */
  e.folded = g_utf8_validate(e.resolved, -1, NULL) ? g_utf8_casefold(e.resolved, -1)
                                                   : g_ascii_strdown(e.resolved, -1);
  if (!allowed(o, &e, error)) {
    entry_clear(&e);
    return FALSE;
  }
  g_array_append_val(o->outputs, e);
  return TRUE;
}

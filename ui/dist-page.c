#include "ui/dist-page-private.h"

#include <gio/gio.h>
#include <glib/gi18n.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <unistd.h>

#include "cohort-build-config.h"
#include "engine/launch/build-info.h"
#include "ui/gpu-detect.h"
#include "ui/programs.h"

GtkWidget *cohort_dist_page_top_new(void)
{
  GtkWidget *box = gtk_box_new(GTK_ORIENTATION_VERTICAL, 6);
  GtkWidget *heading = gtk_label_new(_("GPUs on this machine"));
  gtk_widget_add_css_class(heading, "heading");
  gtk_label_set_xalign(GTK_LABEL(heading), 0);
  GtkWidget *gpus = gtk_label_new(_("Looking for GPUs…"));
  gtk_label_set_xalign(GTK_LABEL(gpus), 0);
  gtk_label_set_wrap(GTK_LABEL(gpus), TRUE);
  gtk_label_set_selectable(GTK_LABEL(gpus), TRUE);
  g_object_set_data(G_OBJECT(box), "cohort-gpus", gpus);
  GtkWidget *build =
      gtk_label_new(cohort_build_has_backend("nccl")
                        ? _("This build has the NCCL backend: NCCL and Gloo are offered.")
                        : _("This build has no NCCL backend: Gloo (CPU) is the backend."));
  gtk_label_set_xalign(GTK_LABEL(build), 0);
  gtk_label_set_wrap(GTK_LABEL(build), TRUE);
  gtk_widget_add_css_class(build, "dim-label");
  /* The memory each process will need: the engine's own plan (cohort-train --explain), the
   * one a launch that cannot fit is refused with. */
  GtkWidget *mem_heading = gtk_label_new(_("Memory per process"));
  gtk_widget_add_css_class(mem_heading, "heading");
  gtk_label_set_xalign(GTK_LABEL(mem_heading), 0);
  GtkWidget *memory = gtk_label_new(_("Working out the memory plan…"));
  gtk_label_set_xalign(GTK_LABEL(memory), 0);
  gtk_label_set_wrap(GTK_LABEL(memory), TRUE);
  gtk_label_set_selectable(GTK_LABEL(memory), TRUE);
  g_object_set_data(G_OBJECT(box), "cohort-memory", memory);
  GtkWidget *button = gtk_button_new_with_mnemonic(_("_Multi-node settings…"));
  gtk_actionable_set_action_name(GTK_ACTIONABLE(button), "win.multinode");
  gtk_widget_set_halign(button, GTK_ALIGN_START);
  gtk_box_append(GTK_BOX(box), heading);
  gtk_box_append(GTK_BOX(box), gpus);
  gtk_box_append(GTK_BOX(box), build);
  gtk_box_append(GTK_BOX(box), mem_heading);
  gtk_box_append(GTK_BOX(box), memory);
  gtk_box_append(GTK_BOX(box), button);
  return box;
}

void cohort_dist_page_set_gpus(GtkWidget *top, GPtrArray *gpus)
{
  GtkLabel *label = g_object_get_data(G_OBJECT(top), "cohort-gpus");
  if (gpus == NULL || gpus->len == 0) {
    gtk_label_set_text(label, _("No NVIDIA GPU found. Several processes can still train on the "
                                "CPU with Gloo."));
    return;
  }
  GString *s = g_string_new(NULL);
  for (guint i = 0; i < gpus->len; i++) {
    CohortGpu *gpu = g_ptr_array_index(gpus, i);
    if (i > 0)
      g_string_append_c(s, '\n');
    g_string_append_printf(s, _("GPU %d: %s, %s"), gpu->index, gpu->name, gpu->memory);
  }
  gtk_label_set_text(label, s->str);
  g_string_free(s, TRUE);
}

const char *cohort_dist_page_get_gpu_text(GtkWidget *top)
{
  return gtk_label_get_text(GTK_LABEL(g_object_get_data(G_OBJECT(top), "cohort-gpus")));
}

const char *cohort_dist_page_get_memory_text(GtkWidget *top)
{
  return gtk_label_get_text(GTK_LABEL(g_object_get_data(G_OBJECT(top), "cohort-memory")));
}

static guint64 bytes_of(JsonObject *o, const char *member)
{
  return json_object_has_member(o, member) ? (guint64)MAX(json_object_get_int_member(o, member), 0)
                                           : 0;
}

/* "12.3 MiB", "1.2 GiB": a small model's figures do not all read 0.00 GiB. GLib translates the
 * units. */
static char *size_text(JsonObject *o, const char *member)
{
  return g_format_size_full(bytes_of(o, member), G_FORMAT_SIZE_IEC_UNITS);
}

/* The plan's "memory" object as a few lines for people. */
static char *describe(JsonObject *m, gboolean *fits)
{
  JsonObject *pr = json_object_get_object_member(m, "per_rank");
  int stage = (int)json_object_get_int_member(m, "zero_stage");
  int local = (int)json_object_get_int_member(m, "local_ranks");
  GString *s = g_string_new(NULL);
  g_autofree char *params = size_text(pr, "params_bytes"), *grads = size_text(pr, "grads_bytes"),
                  *optim = size_text(pr, "optim_bytes"), *ema = size_text(pr, "ema_bytes"),
                  *acts = size_text(pr, "activations_bytes"),
                  *working = size_text(pr, "working_bytes"),
                  *startup = size_text(pr, "startup_bytes");
  /* TRANSLATORS: the ZeRO stage (0 to 3), then what each process holds (sizes such as
   * "1.2 GiB"). */
  g_string_append_printf(s,
                         _("ZeRO stage %d, each process: parameters %s · gradients %s · optimizer "
                           "state %s · EMA %s · activations %s · largest gathered working set %s"),
                         stage, params, grads, optim, ema, acts, working);
  if (bytes_of(pr, "teacher_bytes") > 0) {
    g_autofree char *teacher = size_text(pr, "teacher_bytes");
    /* TRANSLATORS: the distillation teacher's share (a size such as "1.2 GiB"). */
    g_string_append_printf(s, _(" · teacher %s"), teacher);
  }
  g_string_append_c(s, '\n');
  /* TRANSLATORS: the total per process (a size such as "1.2 GiB"). */
  g_string_append_printf(s, _("%s per process"), startup);
  *fits = !json_object_has_member(m, "fits") || json_object_get_boolean_member(m, "fits");
  if (bytes_of(m, "machine_bytes") > 0) {
    g_autofree char *need = size_text(m, "machine_need_bytes"),
                    *have = size_text(m, "machine_bytes");
    g_string_append_printf(
        s,
        /* TRANSLATORS: processes on this machine, their memory together, the machine's. */
        ngettext("; %d process on this machine: %s of its %s",
                 "; %d processes on this machine: %s of its %s", local),
        local, need, have);
  }
  if (!*fits)
    g_string_append_printf(s, "\n%s",
                           _("Does not fit: Start will be refused. A higher ZeRO stage, a "
                             "smaller batch or fewer processes on this machine would help."));
  return g_string_free(s, FALSE);
}

typedef struct {
  GtkWidget *label; /* a reference */
  char *config;     /* the temporary config file, removed when done */
  guint generation;
} Explain;

static void explain_done(GObject *source, GAsyncResult *res, gpointer data)
{
  Explain *e = data;
  g_autofree char *out = NULL, *err = NULL;
  g_autoptr(GError) error = NULL;
  gboolean ok = g_subprocess_communicate_utf8_finish(G_SUBPROCESS(source), res, &out, &err, &error);
  guint now = GPOINTER_TO_UINT(g_object_get_data(G_OBJECT(e->label), "cohort-generation"));
  /* Only the answer to the latest settings is shown. */
  if (e->generation == now) {
    g_autoptr(JsonParser) p = json_parser_new();
    JsonNode *root = NULL;
    if (ok && g_subprocess_get_successful(G_SUBPROCESS(source)) &&
        json_parser_load_from_data(p, out, -1, NULL) && (root = json_parser_get_root(p)) &&
        JSON_NODE_HOLDS_OBJECT(root) &&
        json_object_has_member(json_node_get_object(root), "memory")) {
      gboolean fits = TRUE;
      g_autofree char *text =
          describe(json_object_get_object_member(json_node_get_object(root), "memory"), &fits);
      gtk_label_set_text(GTK_LABEL(e->label), text);
      if (fits)
        gtk_widget_remove_css_class(e->label, "error");
      else
        gtk_widget_add_css_class(e->label, "error");
    } else {
      g_autofree char *why = g_strstrip(g_strdup(err && *err ? err : error ? error->message : ""));
      /* TRANSLATORS: the engine's reason follows. */
      g_autofree char *text = g_strdup_printf(_("No memory plan: %s"), why);
      gtk_label_set_text(GTK_LABEL(e->label), text);
      gtk_widget_remove_css_class(e->label, "error");
    }
  }
  g_unlink(e->config);
  g_free(e->config);
  g_object_unref(e->label);
  g_free(e);
}

/* The plan of the latest settings, once edits have paused. */
static gboolean explain_now(gpointer data)
{
  GtkWidget *top = data;
  /* this source ends here: forget it without removing it */
  g_object_steal_data(G_OBJECT(top), "cohort-memory-source");
  const CohortConfig *cfg = g_object_get_data(G_OBJECT(top), "cohort-memory-config");
  GtkWidget *label = g_object_get_data(G_OBJECT(top), "cohort-memory");
  guint generation = GPOINTER_TO_UINT(g_object_get_data(G_OBJECT(label), "cohort-generation")) + 1;
  g_object_set_data(G_OBJECT(label), "cohort-generation", GUINT_TO_POINTER(generation));
  g_autoptr(GError) error = NULL;
  g_autofree char *program = cohort_ui_find_program("cohort-train", &error);
  char *config = NULL;
  int fd = program ? g_file_open_tmp("cohort-plan-XXXXXX.json", &config, &error) : -1;
  if (fd >= 0)
    close(fd);
  if (fd < 0 || !cohort_config_save_file(cfg, config, &error)) {
    g_autofree char *text = g_strdup_printf(_("No memory plan: %s"), error->message);
    gtk_label_set_text(GTK_LABEL(label), text);
    if (config)
      g_unlink(config);
    g_free(config);
    return G_SOURCE_REMOVE;
  }
  const char *argv[] = {program, "--config", config, "--explain", NULL};
  g_autoptr(GSubprocess) p = g_subprocess_newv(
      argv, G_SUBPROCESS_FLAGS_STDOUT_PIPE | G_SUBPROCESS_FLAGS_STDERR_PIPE, &error);
  if (!p) {
    g_autofree char *text = g_strdup_printf(_("No memory plan: %s"), error->message);
    gtk_label_set_text(GTK_LABEL(label), text);
    g_unlink(config);
    g_free(config);
    return G_SOURCE_REMOVE;
  }
  Explain *e = g_new0(Explain, 1);
  e->label = g_object_ref(label);
  e->config = config;
  e->generation = generation;
  g_subprocess_communicate_utf8_async(p, NULL, NULL, explain_done, e);
  return G_SOURCE_REMOVE;
}

static void cancel_pending(gpointer data)
{
  guint id = GPOINTER_TO_UINT(data);
  if (id)
    g_source_remove(id);
}

/* Asks for the plan of the settings kept, 0.4 s from now: a burst of edits (typing a number)
 * asks once. */
static void schedule(GtkWidget *top)
{
  g_object_set_data(G_OBJECT(top), "cohort-memory-source", NULL);
  guint id = g_timeout_add(400, explain_now, top);
  g_object_set_data_full(G_OBJECT(top), "cohort-memory-source", GUINT_TO_POINTER(id),
                         cancel_pending);
}

/* The page came into view: the plan of the latest settings, if they changed meanwhile. */
static void on_map(GtkWidget *top)
{
  if (g_object_get_data(G_OBJECT(top), "cohort-memory-stale"))
    schedule(top);
  g_object_set_data(G_OBJECT(top), "cohort-memory-stale", NULL);
}

void cohort_dist_page_update_memory(GtkWidget *top, const CohortConfig *cfg)
{
  g_object_set_data_full(G_OBJECT(top), "cohort-memory-config", cohort_config_copy(cfg),
                         (GDestroyNotify)cohort_config_free);
  if (!g_object_get_data(G_OBJECT(top), "cohort-memory-watching")) {
    g_signal_connect(top, "map", G_CALLBACK(on_map), NULL);
    g_object_set_data(G_OBJECT(top), "cohort-memory-watching", GINT_TO_POINTER(1));
  }
  /* Only a page in view asks the engine; one out of view asks when it comes into view. */
  if (gtk_widget_get_mapped(top))
    schedule(top);
  else
    g_object_set_data(G_OBJECT(top), "cohort-memory-stale", GINT_TO_POINTER(1));
}

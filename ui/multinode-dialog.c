#include "ui/multinode-dialog-private.h"

#include <glib/gi18n.h>

#include <errno.h>

#include "engine/launch/launch-commands.h"
#include "engine/launch/launch-plan.h"
#include "ui/key-labels.h"
#include "ui/programs.h"

struct _CohortMultinodeDialog {
  GtkWindow parent_instance;
  GtkWidget *rows_box;
  GtkWidget *test_button;
  GtkWidget *test_label;
  GtkWidget *export_button;
  GtkWidget *export_label;
  GtkWidget *commands_box;
  CohortConfigForm *form;
  char *config_path;   /* an override of the workspace's run.json (tests), or NULL */
  GPtrArray *commands; /* of CohortLaunchCommand */
  GCancellable *cancel;
  guint16 test_port;
};

G_DEFINE_FINAL_TYPE(CohortMultinodeDialog, cohort_multinode_dialog, GTK_TYPE_WINDOW)

static void clear_box(GtkWidget *box)
{
  GtkWidget *child;
  while ((child = gtk_widget_get_first_child(box)) != NULL)
    gtk_box_remove(GTK_BOX(box), child);
}

static void on_copy(GtkButton *button, gpointer data)
{
  (void)data;
  const char *text = g_object_get_data(G_OBJECT(button), "cohort-text");
  gdk_clipboard_set_text(gtk_widget_get_clipboard(GTK_WIDGET(button)), text);
  gtk_button_set_label(button, _("Copied"));
}

static GtkWidget *command_row(const char *caption, const char *command)
{
  GtkWidget *box = gtk_box_new(GTK_ORIENTATION_VERTICAL, 4);
  GtkWidget *top = gtk_box_new(GTK_ORIENTATION_HORIZONTAL, 6);
  GtkWidget *cap = gtk_label_new(caption);
  gtk_label_set_xalign(GTK_LABEL(cap), 0);
  gtk_widget_set_hexpand(cap, TRUE);
  gtk_widget_add_css_class(cap, "dim-label");
  GtkWidget *copy = gtk_button_new_with_label(_("Copy"));
  g_object_set_data_full(G_OBJECT(copy), "cohort-text", g_strdup(command), g_free);
  g_signal_connect(copy, "clicked", G_CALLBACK(on_copy), NULL);
  gtk_box_append(GTK_BOX(top), cap);
  gtk_box_append(GTK_BOX(top), copy);
  GtkWidget *text = gtk_label_new(command);
  gtk_label_set_selectable(GTK_LABEL(text), TRUE);
  gtk_label_set_wrap(GTK_LABEL(text), TRUE);
  gtk_label_set_wrap_mode(GTK_LABEL(text), PANGO_WRAP_CHAR);
  gtk_label_set_xalign(GTK_LABEL(text), 0);
  gtk_widget_add_css_class(text, "cohort-command");
  gtk_box_append(GTK_BOX(box), top);
  gtk_box_append(GTK_BOX(box), text);
  return box;
}

char *cohort_multinode_dialog_get_config_path(CohortMultinodeDialog *dlg)
{
  if (dlg->config_path != NULL)
    return g_strdup(dlg->config_path);
  const CohortConfig *cfg = cohort_config_form_get_config(dlg->form);
  g_autofree char *ws = cohort_resolve_path(cfg->workspace_dir);
  g_autofree char *abs = g_canonicalize_filename(ws, NULL);
  return g_build_filename(abs, "run.json", NULL);
}

static void show_error(GtkWidget *box, const char *text)
{
  GtkWidget *msg = gtk_label_new(text);
  gtk_label_set_wrap(GTK_LABEL(msg), TRUE);
  gtk_label_set_xalign(GTK_LABEL(msg), 0);
  gtk_widget_add_css_class(msg, "error");
  gtk_box_append(GTK_BOX(box), msg);
}

gboolean cohort_multinode_dialog_generate(CohortMultinodeDialog *dlg)
{
  clear_box(dlg->commands_box);
  g_clear_pointer(&dlg->commands, g_ptr_array_unref);
  const CohortConfig *cfg = cohort_config_form_get_config(dlg->form);
  g_autoptr(GError) error = NULL;
  g_autofree char *path = cohort_multinode_dialog_get_config_path(dlg);
  /* Paths the nodes can run: absolute ones from a build tree, where nothing is on PATH. */
  g_autofree char *train = cohort_ui_command_program("cohort-train");
  g_autofree char *run = cohort_ui_command_program("cohort-run");
  dlg->commands = cohort_launch_commands(cfg, path, train, run, &error);
  gtk_widget_set_sensitive(dlg->export_button, dlg->commands != NULL);
  if (dlg->commands == NULL) {
    show_error(dlg->commands_box, error->message);
    return FALSE;
  }
  for (guint i = 0; i < dlg->commands->len; i++) {
    CohortLaunchCommand *cmd = g_ptr_array_index(dlg->commands, i);
    GtkWidget *heading = gtk_label_new(cmd->title);
    gtk_label_set_xalign(GTK_LABEL(heading), 0);
    gtk_label_set_wrap(GTK_LABEL(heading), TRUE);
    gtk_widget_add_css_class(heading, "heading");
    gtk_box_append(GTK_BOX(dlg->commands_box), heading);
    if (cmd->note != NULL && *cmd->note != '\0') {
      GtkWidget *note = gtk_label_new(cmd->note);
      gtk_label_set_wrap(GTK_LABEL(note), TRUE);
      gtk_label_set_xalign(GTK_LABEL(note), 0);
      gtk_widget_add_css_class(note, "dim-label");
      gtk_box_append(GTK_BOX(dlg->commands_box), note);
    }
    guint n = cmd->commands != NULL ? g_strv_length(cmd->commands) : 0;
    gboolean per_node =
        n > 1 || g_str_equal(cmd->launcher, "cohort-run") || g_str_equal(cmd->launcher, "torchrun");
    for (guint j = 0; j < n; j++) {
      g_autofree char *caption = NULL;
      if (g_str_equal(cmd->launcher, "sbatch"))
        caption = g_strdup(_("Batch script (submit with sbatch)"));
      else if (per_node)
        caption = g_strdup_printf(_("On node %u"), j);
      else
        caption = g_strdup(_("Run once"));
      gtk_box_append(GTK_BOX(dlg->commands_box), command_row(caption, cmd->commands[j]));
    }
  }
  return TRUE;
}

static CohortLaunchCommand *find_command(CohortMultinodeDialog *dlg, const char *launcher)
{
  for (guint i = 0; dlg->commands != NULL && i < dlg->commands->len; i++) {
    CohortLaunchCommand *cmd = g_ptr_array_index(dlg->commands, i);
    if (g_strcmp0(cmd->launcher, launcher) == 0)
      return cmd;
  }
  return NULL;
}

const char *cohort_multinode_dialog_get_command(CohortMultinodeDialog *dlg, const char *launcher,
                                                guint index)
{
  CohortLaunchCommand *cmd = find_command(dlg, launcher);
  if (cmd == NULL || cmd->commands == NULL || index >= g_strv_length(cmd->commands))
    return NULL;
  return cmd->commands[index];
}

guint cohort_multinode_dialog_count_commands(CohortMultinodeDialog *dlg, const char *launcher)
{
  CohortLaunchCommand *cmd = find_command(dlg, launcher);
  return cmd != NULL && cmd->commands != NULL ? g_strv_length(cmd->commands) : 0;
}

/* Writes `text` to `path` atomically (a temporary file renamed), so a node never reads half
 * a file. */
static gboolean write_file(const char *path, const char *text, GError **error)
{
  return g_file_set_contents_full(
      path, text, -1, G_FILE_SET_CONTENTS_CONSISTENT | G_FILE_SET_CONTENTS_DURABLE, 0644, error);
}

gboolean cohort_multinode_dialog_export(CohortMultinodeDialog *dlg, GError **error)
{
  const CohortConfig *cfg = cohort_config_form_get_config(dlg->form);
  g_autofree char *path = cohort_multinode_dialog_get_config_path(dlg);
  g_autofree char *dir = g_path_get_dirname(path);
  CohortMachine nodes = {.gpus = -1};
  g_autoptr(CohortLaunchPlan) plan = cohort_launch_plan_new(cfg, path, &nodes, error);
  if (plan == NULL)
    return FALSE;
  if (g_mkdir_with_parents(dir, 0755) != 0) {
    int e = errno;
    g_set_error(error, G_FILE_ERROR, g_file_error_from_errno(e), _("%s: cannot create: %s"), dir,
                g_strerror(e));
    return FALSE;
  }
  if (!cohort_config_save_file(cfg, path, error))
    return FALSE;
  g_autofree char *hosts = cohort_launch_hostfile(cfg, MAX(plan->local_processes, 1));
  g_autofree char *hostfile = g_build_filename(dir, "hostfile", NULL);
  if (hosts != NULL && !write_file(hostfile, hosts, error))
    return FALSE;
  g_autofree char *msg = hosts != NULL ? g_strdup_printf(_("Wrote %s and %s."), path, hostfile)
                                       : g_strdup_printf(_("Wrote %s."), path);
  gtk_label_set_text(GTK_LABEL(dlg->export_label), msg);
  gtk_widget_remove_css_class(dlg->export_label, "error");
  return TRUE;
}

static void on_export_clicked(CohortMultinodeDialog *dlg)
{
  g_autoptr(GError) error = NULL;
  if (!cohort_multinode_dialog_export(dlg, &error)) {
    gtk_label_set_text(GTK_LABEL(dlg->export_label), error->message);
    gtk_widget_add_css_class(dlg->export_label, "error");
  }
}

/* Every edit of the form: the commands follow it, and what was learnt about the old settings
 * (the connection test, the last export) no longer holds. */
static void on_form_changed(CohortMultinodeDialog *dlg)
{
  gtk_label_set_text(GTK_LABEL(dlg->test_label), "");
  gtk_widget_remove_css_class(dlg->test_label, "error");
  gtk_widget_remove_css_class(dlg->test_label, "success");
  gtk_label_set_text(GTK_LABEL(dlg->export_label), "");
  if (dlg->cancel != NULL) {
    /* A test still running answers for settings that changed: drop it. */
    g_cancellable_cancel(dlg->cancel);
    g_object_unref(dlg->cancel);
    dlg->cancel = g_cancellable_new();
    gtk_widget_set_sensitive(dlg->test_button, TRUE);
  }
  cohort_multinode_dialog_generate(dlg);
}

/* --- connection test ----------------------------------------------------------------- */

static void set_result(CohortMultinodeDialog *dlg, const char *text, gboolean ok)
{
  gtk_label_set_text(GTK_LABEL(dlg->test_label), text);
  gtk_widget_remove_css_class(dlg->test_label, ok ? "error" : "success");
  gtk_widget_add_css_class(dlg->test_label, ok ? "success" : "error");
  gtk_widget_set_sensitive(dlg->test_button, TRUE);
}

/* Binding tells whether the address is this machine's and whether the port is taken. */
static char *try_bind(GInetAddress *addr, guint16 port, gboolean *free_port)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GSocket) sock = g_socket_new(g_inet_address_get_family(addr), G_SOCKET_TYPE_STREAM,
                                         G_SOCKET_PROTOCOL_TCP, &error);
  *free_port = FALSE;
  if (sock == NULL)
    return g_strdup(error->message);
  g_autoptr(GSocketAddress) sa = g_inet_socket_address_new(addr, port);
  if (g_socket_bind(sock, sa, TRUE, &error)) {
    *free_port = TRUE;
    return NULL;
  }
  return g_strdup(error->message);
}

static void on_connected(GObject *source, GAsyncResult *res, gpointer data)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GSocketConnection) conn =
      g_socket_client_connect_finish(G_SOCKET_CLIENT(source), res, &error);
  if (g_error_matches(error, G_IO_ERROR, G_IO_ERROR_CANCELLED))
    return;
  CohortMultinodeDialog *dlg = data;
  GInetAddress *addr = g_object_get_data(source, "cohort-addr");
  g_autofree char *addr_text = g_inet_address_to_string(addr);
  g_autofree char *msg = NULL;
  if (conn != NULL) {
    msg = g_strdup_printf(_("%s resolves to %s, and port %u is reachable: something listens "
                            "there (the master, if node 0 has started)."),
                          cohort_config_form_get_config(dlg->form)->master_addr, addr_text,
                          dlg->test_port);
    set_result(dlg, msg, TRUE);
    return;
  }
  gboolean free_port;
  g_autofree char *bind_error = try_bind(addr, dlg->test_port, &free_port);
  if (free_port)
    msg = g_strdup_printf(_("%s resolves to %s on this machine, and port %u is free: this node "
                            "can host the rendezvous as node 0."),
                          cohort_config_form_get_config(dlg->form)->master_addr, addr_text,
                          dlg->test_port);
  else
    msg = g_strdup_printf(_("%s resolves to %s, but port %u is not reachable (%s). Start node 0 "
                            "first, or check the address and the firewall."),
                          cohort_config_form_get_config(dlg->form)->master_addr, addr_text,
                          dlg->test_port, error->message);
  set_result(dlg, msg, free_port);
}

static void on_resolved(GObject *source, GAsyncResult *res, gpointer data)
{
  g_autoptr(GError) error = NULL;
  GList *addrs = g_resolver_lookup_by_name_finish(G_RESOLVER(source), res, &error);
  if (g_error_matches(error, G_IO_ERROR, G_IO_ERROR_CANCELLED))
    return;
  CohortMultinodeDialog *dlg = data;
  if (addrs == NULL) {
    g_autofree char *msg =
        g_strdup_printf(_("%s does not resolve: %s"),
                        cohort_config_form_get_config(dlg->form)->master_addr, error->message);
    set_result(dlg, msg, FALSE);
    return;
  }
  GInetAddress *addr = addrs->data;
  g_autoptr(GSocketClient) client = g_socket_client_new();
  g_socket_client_set_timeout(client, 3);
  g_object_set_data_full(G_OBJECT(client), "cohort-addr", g_object_ref(addr), g_object_unref);
  g_autoptr(GSocketAddress) sa = g_inet_socket_address_new(addr, dlg->test_port);
  g_socket_client_connect_async(client, G_SOCKET_CONNECTABLE(sa), dlg->cancel, on_connected, dlg);
  g_resolver_free_addresses(addrs);
}

void cohort_multinode_dialog_test_connection(CohortMultinodeDialog *dlg)
{
  const CohortConfig *cfg = cohort_config_form_get_config(dlg->form);
  dlg->test_port = (guint16)cfg->master_port;
  gtk_widget_set_sensitive(dlg->test_button, FALSE);
  gtk_label_set_text(GTK_LABEL(dlg->test_label), _("Testing…"));
  g_autoptr(GResolver) resolver = g_resolver_get_default();
  g_resolver_lookup_by_name_async(resolver, cfg->master_addr, dlg->cancel, on_resolved, dlg);
}

const char *cohort_multinode_dialog_get_test_result(CohortMultinodeDialog *dlg)
{
  return gtk_label_get_text(GTK_LABEL(dlg->test_label));
}

const char *cohort_multinode_dialog_get_export_result(CohortMultinodeDialog *dlg)
{
  return gtk_label_get_text(GTK_LABEL(dlg->export_label));
}

static void on_test_clicked(CohortMultinodeDialog *dlg)
{
  cohort_multinode_dialog_test_connection(dlg);
}

void cohort_multinode_dialog_set_config_path(CohortMultinodeDialog *dlg, const char *config_path)
{
  g_free(dlg->config_path);
  dlg->config_path = g_strdup(config_path);
  cohort_multinode_dialog_generate(dlg);
}

static void cohort_multinode_dialog_dispose(GObject *obj)
{
  CohortMultinodeDialog *dlg = COHORT_MULTINODE_DIALOG(obj);
  if (dlg->cancel != NULL)
    g_cancellable_cancel(dlg->cancel);
  g_clear_object(&dlg->cancel);
  g_clear_object(&dlg->form);
  g_clear_pointer(&dlg->commands, g_ptr_array_unref);
  g_clear_pointer(&dlg->config_path, g_free);
  gtk_widget_dispose_template(GTK_WIDGET(obj), COHORT_TYPE_MULTINODE_DIALOG);
  G_OBJECT_CLASS(cohort_multinode_dialog_parent_class)->dispose(obj);
}

static void cohort_multinode_dialog_class_init(CohortMultinodeDialogClass *klass)
{
  GtkWidgetClass *wc = GTK_WIDGET_CLASS(klass);
  G_OBJECT_CLASS(klass)->dispose = cohort_multinode_dialog_dispose;
  gtk_widget_class_set_template_from_resource(wc, "/org/cohort/Trainer/multinode-dialog.ui");
  gtk_widget_class_bind_template_child(wc, CohortMultinodeDialog, rows_box);
  gtk_widget_class_bind_template_child(wc, CohortMultinodeDialog, test_button);
  gtk_widget_class_bind_template_child(wc, CohortMultinodeDialog, test_label);
  gtk_widget_class_bind_template_child(wc, CohortMultinodeDialog, export_button);
  gtk_widget_class_bind_template_child(wc, CohortMultinodeDialog, export_label);
  gtk_widget_class_bind_template_child(wc, CohortMultinodeDialog, commands_box);
  gtk_widget_class_bind_template_callback(wc, on_test_clicked);
  gtk_widget_class_bind_template_callback(wc, on_export_clicked);
}

static void cohort_multinode_dialog_init(CohortMultinodeDialog *dlg)
{
  gtk_widget_init_template(GTK_WIDGET(dlg));
  dlg->cancel = g_cancellable_new();
}

CohortMultinodeDialog *cohort_multinode_dialog_new(GtkWindow *parent, CohortConfigForm *form)
{
  CohortMultinodeDialog *dlg =
      g_object_new(COHORT_TYPE_MULTINODE_DIALOG, "transient-for", parent, NULL);
  dlg->form = g_object_ref(form);
  gtk_box_append(GTK_BOX(dlg->rows_box),
                 cohort_config_form_build_rows(form, cohort_key_multinode_keys()));
  g_signal_connect_object(form, "changed", G_CALLBACK(on_form_changed), dlg, G_CONNECT_SWAPPED);
  cohort_multinode_dialog_generate(dlg);
  return dlg;
}

#include "ui/dist-page-private.h"

#include <gio/gio.h>
#include <glib/gi18n.h>
#include <glib/gstdio.h>
#include <unistd.h>

#include "cohort-build-config.h"
#include "engine/launch/build-info.h"
#include "ui/explain-plan.h"
#include "ui/gpu-detect.h"
#include "ui/memory-view.h"
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
  GtkWidget *memory = cohort_memory_view_new();
  gtk_widget_set_margin_top(memory, 6);
  g_object_set_data(G_OBJECT(box), "cohort-memory", memory);
  GtkWidget *button = gtk_button_new_with_mnemonic(_("_Multi-node settings…"));
  gtk_actionable_set_action_name(GTK_ACTIONABLE(button), "win.multinode");
  gtk_widget_set_halign(button, GTK_ALIGN_START);
  gtk_box_append(GTK_BOX(box), heading);
  gtk_box_append(GTK_BOX(box), gpus);
  gtk_box_append(GTK_BOX(box), build);
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
  char *text = cohort_memory_view_get_text(g_object_get_data(G_OBJECT(top), "cohort-memory"));
  g_object_set_data_full(G_OBJECT(top), "cohort-memory-text", text, g_free);
  return text;
}

void cohort_dist_page_update_memory(GtkWidget *top, const CohortConfig *cfg)
{
  cohort_memory_view_update(g_object_get_data(G_OBJECT(top), "cohort-memory"), cfg);
}

CohortMemoryView *cohort_dist_page_get_memory_view(GtkWidget *top)
{
  return g_object_get_data(G_OBJECT(top), "cohort-memory");
}

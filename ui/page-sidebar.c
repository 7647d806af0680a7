#include "ui/page-sidebar.h"

struct _CohortPageSidebar {
  GtkWidget parent_instance;
  GtkStack *stack; /* not owned: the window holds both */
  GtkWidget *scroller;
  GtkListBox *list;
  GHashTable *marks; /* page name → its warning icon */
  gboolean syncing;  /* set while the sidebar selects a row to follow the stack */
};

G_DEFINE_FINAL_TYPE(CohortPageSidebar, cohort_page_sidebar, GTK_TYPE_WIDGET)

static const char *row_name(GtkListBoxRow *row)
{
  return g_object_get_data(G_OBJECT(row), "cohort-page");
}

static void on_row_selected(GtkListBox *list, GtkListBoxRow *row, CohortPageSidebar *s)
{
  (void)list;
  if (row != NULL && !s->syncing)
    gtk_stack_set_visible_child_name(s->stack, row_name(row));
}

static void follow_stack(CohortPageSidebar *s)
{
  const char *visible = gtk_stack_get_visible_child_name(s->stack);
  for (GtkListBoxRow *row = gtk_list_box_get_row_at_index(s->list, 0); row != NULL;
       row = GTK_LIST_BOX_ROW(gtk_widget_get_next_sibling(GTK_WIDGET(row)))) {
    if (g_strcmp0(row_name(row), visible) == 0) {
      s->syncing = TRUE;
      gtk_list_box_select_row(s->list, row);
      s->syncing = FALSE;
    }
  }
}

static void on_visible_child(GObject *stack, GParamSpec *pspec, CohortPageSidebar *s)
{
  (void)stack;
  (void)pspec;
  follow_stack(s);
}

void cohort_page_sidebar_rebuild(CohortPageSidebar *s)
{
  g_hash_table_remove_all(s->marks);
  GtkWidget *child;
  while ((child = gtk_widget_get_first_child(GTK_WIDGET(s->list))) != NULL)
    gtk_list_box_remove(s->list, child);
  for (GtkWidget *page = gtk_widget_get_first_child(GTK_WIDGET(s->stack)); page != NULL;
       page = gtk_widget_get_next_sibling(page)) {
    GtkStackPage *sp = gtk_stack_get_page(s->stack, page);
    GtkWidget *box = gtk_box_new(GTK_ORIENTATION_HORIZONTAL, 6);
    GtkWidget *label = gtk_label_new(gtk_stack_page_get_title(sp));
    gtk_label_set_xalign(GTK_LABEL(label), 0);
    gtk_widget_set_hexpand(label, TRUE);
    GtkWidget *mark = gtk_image_new_from_icon_name("dialog-warning-symbolic");
    gtk_widget_add_css_class(mark, "error");
    gtk_widget_set_visible(mark, FALSE);
    gtk_box_append(GTK_BOX(box), label);
    gtk_box_append(GTK_BOX(box), mark);
    GtkWidget *row = gtk_list_box_row_new();
    gtk_list_box_row_set_child(GTK_LIST_BOX_ROW(row), box);
    g_object_set_data_full(G_OBJECT(row), "cohort-page", g_strdup(gtk_stack_page_get_name(sp)),
                           g_free);
    gtk_list_box_append(s->list, row);
    g_hash_table_insert(s->marks, g_strdup(gtk_stack_page_get_name(sp)), mark);
  }
  follow_stack(s);
}

void cohort_page_sidebar_set_attention(CohortPageSidebar *s, const char *name, const char *reason)
{
  GtkWidget *mark = g_hash_table_lookup(s->marks, name);
  if (mark == NULL)
    return;
  gtk_widget_set_visible(mark, reason != NULL);
  gtk_widget_set_tooltip_text(mark, reason);
}

gboolean cohort_page_sidebar_get_attention(CohortPageSidebar *s, const char *name)
{
  GtkWidget *mark = g_hash_table_lookup(s->marks, name);
  return mark != NULL && gtk_widget_get_visible(mark);
}

static void cohort_page_sidebar_dispose(GObject *obj)
{
  CohortPageSidebar *s = COHORT_PAGE_SIDEBAR(obj);
  if (s->stack != NULL)
    g_signal_handlers_disconnect_by_data(s->stack, s);
  s->stack = NULL;
  g_clear_pointer(&s->scroller, gtk_widget_unparent);
  g_clear_pointer(&s->marks, g_hash_table_unref);
  G_OBJECT_CLASS(cohort_page_sidebar_parent_class)->dispose(obj);
}

static void cohort_page_sidebar_class_init(CohortPageSidebarClass *klass)
{
  G_OBJECT_CLASS(klass)->dispose = cohort_page_sidebar_dispose;
  gtk_widget_class_set_layout_manager_type(GTK_WIDGET_CLASS(klass), GTK_TYPE_BIN_LAYOUT);
  gtk_widget_class_set_css_name(GTK_WIDGET_CLASS(klass), "cohortpagesidebar");
}

static void cohort_page_sidebar_init(CohortPageSidebar *s)
{
  s->marks = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
  s->scroller = gtk_scrolled_window_new();
  gtk_scrolled_window_set_policy(GTK_SCROLLED_WINDOW(s->scroller), GTK_POLICY_NEVER,
                                 GTK_POLICY_AUTOMATIC);
  s->list = GTK_LIST_BOX(gtk_list_box_new());
  gtk_widget_add_css_class(GTK_WIDGET(s->list), "navigation-sidebar");
  gtk_scrolled_window_set_child(GTK_SCROLLED_WINDOW(s->scroller), GTK_WIDGET(s->list));
  gtk_widget_set_parent(s->scroller, GTK_WIDGET(s));
  g_signal_connect(s->list, "row-selected", G_CALLBACK(on_row_selected), s);
}

GtkWidget *cohort_page_sidebar_new(GtkStack *stack)
{
  CohortPageSidebar *s = g_object_new(COHORT_TYPE_PAGE_SIDEBAR, NULL);
  s->stack = stack;
  g_signal_connect(stack, "notify::visible-child", G_CALLBACK(on_visible_child), s);
  return GTK_WIDGET(s);
}

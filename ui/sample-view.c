#include "ui/sample-view.h"

#include <glib/gi18n.h>
#include "ui/progress-event.h"

struct _CohortSampleView {
  GtkBox parent_instance;
  GtkLabel *text;
  GtkPicture *picture;
  GtkWidget *strip_scroller;
  GtkWidget *strip;
  GtkWidget *text_nav;
  GtkWidget *text_prev;
  GtkWidget *text_next;
  GtkLabel *text_step;
  GPtrArray *texts;   /* text samples, in the order they came */
  GArray *text_steps; /* gint64, one per text */
  guint text_shown;
  GPtrArray *images; /* paths, in the order the samples came */
  GArray *steps;     /* gint64, one per image */
  char *shown;       /* the path in the picture */
  gint64 shown_step;
};

G_DEFINE_FINAL_TYPE(CohortSampleView, cohort_sample_view, GTK_TYPE_BOX)

static void show_image(CohortSampleView *v, guint i)
{
  g_return_if_fail(i < v->images->len);
  g_free(v->shown);
  v->shown = g_strdup(g_ptr_array_index(v->images, i));
  v->shown_step = g_array_index(v->steps, gint64, i);
  gtk_picture_set_filename(v->picture, v->shown);
  g_autofree char *caption = g_strdup_printf(_("Step %lld"), (long long)v->shown_step);
  gtk_label_set_text(v->text, caption);
  gtk_widget_set_visible(GTK_WIDGET(v->picture), TRUE);
}

static void show_text(CohortSampleView *v, guint i)
{
  g_return_if_fail(i < v->texts->len);
  v->text_shown = i;
  gtk_label_set_text(v->text, g_ptr_array_index(v->texts, i));
  g_autofree char *where =
      g_strdup_printf(_("Step %lld · %u of %u"), (long long)g_array_index(v->text_steps, gint64, i),
                      i + 1, v->texts->len);
  gtk_label_set_text(v->text_step, where);
  gtk_widget_set_visible(v->text_nav, v->texts->len > 1);
  gtk_widget_set_sensitive(v->text_prev, i > 0);
  gtk_widget_set_sensitive(v->text_next, i + 1 < v->texts->len);
}

static void on_text_prev(GtkButton *button, CohortSampleView *v)
{
  (void)button;
  if (v->text_shown > 0)
    show_text(v, v->text_shown - 1);
}

static void on_text_next(GtkButton *button, CohortSampleView *v)
{
  (void)button;
  if (v->text_shown + 1 < v->texts->len)
    show_text(v, v->text_shown + 1);
}

static void on_thumb_clicked(GtkButton *button, CohortSampleView *v)
{
  show_image(v, GPOINTER_TO_UINT(g_object_get_data(G_OBJECT(button), "cohort-index")));
}

static void on_picture_pressed(GtkGestureClick *gesture, int n_press, double x, double y,
                               CohortSampleView *v)
{
  (void)gesture;
  (void)n_press;
  (void)x;
  (void)y;
  cohort_sample_view_enlarge(v);
}

static void cohort_sample_view_dispose(GObject *obj)
{
  CohortSampleView *v = COHORT_SAMPLE_VIEW(obj);
  g_clear_pointer(&v->images, g_ptr_array_unref);
  g_clear_pointer(&v->texts, g_ptr_array_unref);
  g_clear_pointer(&v->text_steps, g_array_unref);
  g_clear_pointer(&v->steps, g_array_unref);
  g_clear_pointer(&v->shown, g_free);
  gtk_widget_dispose_template(GTK_WIDGET(obj), COHORT_TYPE_SAMPLE_VIEW);
  G_OBJECT_CLASS(cohort_sample_view_parent_class)->dispose(obj);
}

static void cohort_sample_view_class_init(CohortSampleViewClass *klass)
{
  GtkWidgetClass *wc = GTK_WIDGET_CLASS(klass);
  G_OBJECT_CLASS(klass)->dispose = cohort_sample_view_dispose;
  gtk_widget_class_set_template_from_resource(wc, "/org/cohort/Trainer/sample-view.ui");
  gtk_widget_class_bind_template_child(wc, CohortSampleView, text);
  gtk_widget_class_bind_template_child(wc, CohortSampleView, picture);
  gtk_widget_class_bind_template_child(wc, CohortSampleView, strip_scroller);
  gtk_widget_class_bind_template_child(wc, CohortSampleView, strip);
  gtk_widget_class_bind_template_child(wc, CohortSampleView, text_nav);
  gtk_widget_class_bind_template_child(wc, CohortSampleView, text_prev);
  gtk_widget_class_bind_template_child(wc, CohortSampleView, text_next);
  gtk_widget_class_bind_template_child(wc, CohortSampleView, text_step);
}

static void cohort_sample_view_init(CohortSampleView *v)
{
  gtk_widget_init_template(GTK_WIDGET(v));
  v->images = g_ptr_array_new_with_free_func(g_free);
  v->steps = g_array_new(FALSE, FALSE, sizeof(gint64));
  v->texts = g_ptr_array_new_with_free_func(g_free);
  v->text_steps = g_array_new(FALSE, FALSE, sizeof(gint64));
  g_signal_connect(v->text_prev, "clicked", G_CALLBACK(on_text_prev), v);
  g_signal_connect(v->text_next, "clicked", G_CALLBACK(on_text_next), v);
  GtkGesture *click = gtk_gesture_click_new();
  g_signal_connect(click, "pressed", G_CALLBACK(on_picture_pressed), v);
  gtk_widget_add_controller(GTK_WIDGET(v->picture), GTK_EVENT_CONTROLLER(click));
}

void cohort_sample_view_reset(CohortSampleView *v)
{
  g_ptr_array_set_size(v->images, 0);
  g_array_set_size(v->steps, 0);
  g_ptr_array_set_size(v->texts, 0);
  g_array_set_size(v->text_steps, 0);
  v->text_shown = 0;
  gtk_widget_set_visible(v->text_nav, FALSE);
  g_clear_pointer(&v->shown, g_free);
  GtkWidget *child;
  while ((child = gtk_widget_get_first_child(v->strip)) != NULL)
    gtk_box_remove(GTK_BOX(v->strip), child);
  gtk_picture_set_paintable(v->picture, NULL);
  gtk_widget_set_visible(GTK_WIDGET(v->picture), FALSE);
  gtk_widget_set_visible(v->strip_scroller, FALSE);
  gtk_label_set_text(v->text, _("No sample yet."));
}

/* A small copy of the grid in the strip; clicking it shows that step's grid. */
static void add_thumb(CohortSampleView *v, const char *path, gint64 step)
{
  GtkWidget *pic = gtk_picture_new_for_filename(path);
  gtk_picture_set_can_shrink(GTK_PICTURE(pic), TRUE);
  gtk_widget_set_size_request(pic, 48, 56);
  GtkWidget *button = gtk_button_new();
  gtk_button_set_child(GTK_BUTTON(button), pic);
  gtk_widget_add_css_class(button, "flat");
  g_autofree char *tip = g_strdup_printf(_("Step %lld"), (long long)step);
  gtk_widget_set_tooltip_text(button, tip);
  g_object_set_data(G_OBJECT(button), "cohort-index", GUINT_TO_POINTER(v->images->len - 1));
  g_signal_connect(button, "clicked", G_CALLBACK(on_thumb_clicked), v);
  gtk_box_append(GTK_BOX(v->strip), button);
  gtk_widget_set_visible(v->strip_scroller, v->images->len > 1);
}

void cohort_sample_view_add(CohortSampleView *v, JsonObject *ev)
{
  const char *image = cohort_event_text(ev, COHORT_FIELD_IMAGE, NULL);
  gint64 step = cohort_event_int(ev, COHORT_FIELD_STEP, 0);
  if (image == NULL) {
    /* Text samples are kept too, to page back through them by step; the newest is shown. */
    g_ptr_array_add(v->texts, g_strdup(cohort_event_text(ev, COHORT_FIELD_TEXT, "")));
    g_array_append_val(v->text_steps, step);
    show_text(v, v->texts->len - 1);
    return;
  }
  g_ptr_array_add(v->images, g_strdup(image));
  g_array_append_val(v->steps, step);
  add_thumb(v, image, step);
  show_image(v, v->images->len - 1);
}

const char *cohort_sample_view_get_text(CohortSampleView *v)
{
  return gtk_label_get_text(v->text);
}

const char *cohort_sample_view_get_image(CohortSampleView *v)
{
  return v->shown;
}

guint cohort_sample_view_count_texts(CohortSampleView *v)
{
  return v->texts->len;
}

void cohort_sample_view_show_text(CohortSampleView *v, guint i)
{
  show_text(v, i);
}

gint64 cohort_sample_view_get_text_step(CohortSampleView *v)
{
  return v->texts->len > 0 ? g_array_index(v->text_steps, gint64, v->text_shown) : -1;
}

void cohort_sample_view_step_text(CohortSampleView *v, int direction)
{
  if (direction < 0)
    on_text_prev(NULL, v);
  else
    on_text_next(NULL, v);
}

guint cohort_sample_view_count_images(CohortSampleView *v)
{
  return v->images->len;
}

void cohort_sample_view_show(CohortSampleView *v, guint i)
{
  GtkWidget *button = gtk_widget_get_first_child(v->strip);
  for (guint k = 0; button != NULL && k < i; k++)
    button = gtk_widget_get_next_sibling(button);
  if (button != NULL)
    g_signal_emit_by_name(button, "clicked");
}

GtkWindow *cohort_sample_view_enlarge(CohortSampleView *v)
{
  if (v->shown == NULL)
    return NULL;
  GtkWidget *win = gtk_window_new();
  g_autofree char *title = g_strdup_printf(_("Sample at step %lld"), (long long)v->shown_step);
  gtk_window_set_title(GTK_WINDOW(win), title);
  GtkRoot *root = gtk_widget_get_root(GTK_WIDGET(v));
  if (GTK_IS_WINDOW(root))
    gtk_window_set_transient_for(GTK_WINDOW(win), GTK_WINDOW(root));
  gtk_window_set_destroy_with_parent(GTK_WINDOW(win), TRUE);
  gtk_window_set_default_size(GTK_WINDOW(win), 640, 760);
  GtkWidget *pic = gtk_picture_new_for_filename(v->shown);
  gtk_window_set_child(GTK_WINDOW(win), pic);
  gtk_window_present(GTK_WINDOW(win));
  return GTK_WINDOW(win);
}

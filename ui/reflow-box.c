#include "ui/reflow-box.h"

struct _CohortReflowBox {
  GtkWidget parent_instance;
  int threshold;
  int side_width;
  int spacing;
  gboolean row;
};

static void buildable_init(GtkBuildableIface *iface);
G_DEFINE_FINAL_TYPE_WITH_CODE(CohortReflowBox, cohort_reflow_box, GTK_TYPE_WIDGET,
                              G_IMPLEMENT_INTERFACE(GTK_TYPE_BUILDABLE, buildable_init))

enum { PROP_0, PROP_THRESHOLD, PROP_SIDE_WIDTH, PROP_SPACING, N_PROPS };
static GParamSpec *props[N_PROPS];

static GtkBuildableIface *parent_buildable;

static void add_child(GtkBuildable *buildable, GtkBuilder *builder, GObject *child,
                      const char *type)
{
  if (GTK_IS_WIDGET(child))
    cohort_reflow_box_append(COHORT_REFLOW_BOX(buildable), GTK_WIDGET(child));
  else
    parent_buildable->add_child(buildable, builder, child, type);
}

static void buildable_init(GtkBuildableIface *iface)
{
  parent_buildable = g_type_interface_peek_parent(iface);
  iface->add_child = add_child;
}

static GtkWidget *main_child(CohortReflowBox *b)
{
  return gtk_widget_get_first_child(GTK_WIDGET(b));
}

static GtkWidget *side_child(CohortReflowBox *b)
{
  GtkWidget *m = main_child(b);
  return m != NULL ? gtk_widget_get_next_sibling(m) : NULL;
}

static void measure_child(GtkWidget *child, GtkOrientation o, int for_size, int *min, int *nat)
{
  *min = *nat = 0;
  if (child != NULL && gtk_widget_should_layout(child))
    gtk_widget_measure(child, o, for_size, min, nat, NULL, NULL);
}

/* The side child's width in a row: its set width, or more when it needs more. */
static int side_row_width(CohortReflowBox *b)
{
  int min, nat;
  measure_child(side_child(b), GTK_ORIENTATION_HORIZONTAL, -1, &min, &nat);
  return MAX(b->side_width, min);
}

static gboolean fits_row(CohortReflowBox *b, int width)
{
  return side_child(b) == NULL || width >= b->threshold;
}

static void measure(GtkWidget *w, GtkOrientation o, int for_size, int *minimum, int *natural,
                    int *min_base, int *nat_base)
{
  (void)min_base;
  (void)nat_base;
  CohortReflowBox *b = COHORT_REFLOW_BOX(w);
  GtkWidget *m = main_child(b), *s = side_child(b);
  int mm, mn, sm, sn;
  if (o == GTK_ORIENTATION_HORIZONTAL) {
    measure_child(m, o, -1, &mm, &mn);
    measure_child(s, o, -1, &sm, &sn);
    /* Narrow enough for a column; naturally a row. */
    *minimum = MAX(mm, sm);
    *natural = s != NULL ? MAX(mn + b->spacing + side_row_width(b), b->threshold) : mn;
    return;
  }
  if (for_size >= 0 && fits_row(b, for_size)) {
    int sw = s != NULL ? side_row_width(b) : 0;
    int mw = MAX(for_size - (s != NULL ? sw + b->spacing : 0), 0);
    measure_child(m, o, mw, &mm, &mn);
    measure_child(s, o, sw, &sm, &sn);
    *minimum = MAX(mm, sm);
    *natural = MAX(mn, sn);
    return;
  }
  measure_child(m, o, for_size, &mm, &mn);
  measure_child(s, o, for_size, &sm, &sn);
  int gap = s != NULL ? b->spacing : 0;
  *minimum = mm + gap + sm;
  *natural = mn + gap + sn;
}

static void size_allocate(GtkWidget *w, int width, int height, int baseline)
{
  (void)baseline;
  CohortReflowBox *b = COHORT_REFLOW_BOX(w);
  GtkWidget *m = main_child(b), *s = side_child(b);
  if (m == NULL)
    return;
  b->row = fits_row(b, width);
  if (s == NULL) {
    gtk_widget_allocate(m, width, height, -1, NULL);
    return;
  }
  if (b->row) {
    int sw = MIN(side_row_width(b), width);
    int mw = MAX(width - sw - b->spacing, 0);
    gtk_widget_allocate(m, mw, height, -1, NULL);
    GskTransform *t = gsk_transform_translate(NULL, &GRAPHENE_POINT_INIT(mw + b->spacing, 0));
    gtk_widget_allocate(s, sw, height, -1, t);
    return;
  }
  int mm, mn, sm, sn;
  measure_child(m, GTK_ORIENTATION_VERTICAL, width, &mm, &mn);
  measure_child(s, GTK_ORIENTATION_VERTICAL, width, &sm, &sn);
  /* The side column keeps its natural height when there is room; the main child takes the
   * rest, never less than its minimum. */
  int sh = MAX(sm, MIN(sn, height - mm - b->spacing));
  int mh = MAX(height - sh - b->spacing, mm);
  gtk_widget_allocate(m, width, mh, -1, NULL);
  GskTransform *t = gsk_transform_translate(NULL, &GRAPHENE_POINT_INIT(0, mh + b->spacing));
  gtk_widget_allocate(s, width, sh, -1, t);
}

static GtkSizeRequestMode request_mode(GtkWidget *w)
{
  (void)w;
  return GTK_SIZE_REQUEST_HEIGHT_FOR_WIDTH;
}

static void set_property(GObject *obj, guint id, const GValue *value, GParamSpec *pspec)
{
  CohortReflowBox *b = COHORT_REFLOW_BOX(obj);
  switch (id) {
  case PROP_THRESHOLD:
    b->threshold = g_value_get_int(value);
    break;
  case PROP_SIDE_WIDTH:
    b->side_width = g_value_get_int(value);
    break;
  case PROP_SPACING:
    b->spacing = g_value_get_int(value);
    break;
  default:
    G_OBJECT_WARN_INVALID_PROPERTY_ID(obj, id, pspec);
    return;
  }
  gtk_widget_queue_resize(GTK_WIDGET(b));
}

static void get_property(GObject *obj, guint id, GValue *value, GParamSpec *pspec)
{
  CohortReflowBox *b = COHORT_REFLOW_BOX(obj);
  switch (id) {
  case PROP_THRESHOLD:
    g_value_set_int(value, b->threshold);
    break;
  case PROP_SIDE_WIDTH:
    g_value_set_int(value, b->side_width);
    break;
  case PROP_SPACING:
    g_value_set_int(value, b->spacing);
    break;
  default:
    G_OBJECT_WARN_INVALID_PROPERTY_ID(obj, id, pspec);
  }
}

static void dispose(GObject *obj)
{
  GtkWidget *child;
  while ((child = gtk_widget_get_first_child(GTK_WIDGET(obj))) != NULL)
    gtk_widget_unparent(child);
  G_OBJECT_CLASS(cohort_reflow_box_parent_class)->dispose(obj);
}

static void cohort_reflow_box_class_init(CohortReflowBoxClass *klass)
{
  GObjectClass *oc = G_OBJECT_CLASS(klass);
  GtkWidgetClass *wc = GTK_WIDGET_CLASS(klass);
  oc->set_property = set_property;
  oc->get_property = get_property;
  oc->dispose = dispose;
  wc->measure = measure;
  wc->size_allocate = size_allocate;
  wc->get_request_mode = request_mode;
  props[PROP_THRESHOLD] = g_param_spec_int("threshold", NULL, NULL, 0, G_MAXINT, 720,
                                           G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS);
  props[PROP_SIDE_WIDTH] = g_param_spec_int("side-width", NULL, NULL, 0, G_MAXINT, 360,
                                            G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS);
  props[PROP_SPACING] = g_param_spec_int("spacing", NULL, NULL, 0, G_MAXINT, 12,
                                         G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS);
  g_object_class_install_properties(oc, N_PROPS, props);
  gtk_widget_class_set_css_name(wc, "cohortreflowbox");
}

static void cohort_reflow_box_init(CohortReflowBox *b)
{
  b->threshold = 720;
  b->side_width = 360;
  b->spacing = 12;
  b->row = TRUE;
}

GtkWidget *cohort_reflow_box_new(void)
{
  return g_object_new(COHORT_TYPE_REFLOW_BOX, NULL);
}

void cohort_reflow_box_append(CohortReflowBox *b, GtkWidget *child)
{
  gtk_widget_insert_before(child, GTK_WIDGET(b), NULL);
}

gboolean cohort_reflow_box_is_row(CohortReflowBox *b)
{
  return b->row;
}

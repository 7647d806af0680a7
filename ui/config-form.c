#include "ui/config-form-private.h"

#include <glib/gi18n.h>

#include "ui/key-labels.h"
#include "ui/key-messages.h"
#include "ui/path-chooser.h"
#include "ui/finetune-hint.h"
#include "ui/tokenizer-hint.h"
#include "engine/families/family.h"

typedef struct {
  const CohortConfigKey *key;
  GtkWidget *row;
  GtkWidget *control;
  GPtrArray *values;  /* drop-down: the raw choice behind each item */
  char *error;        /* NULL while valid */
  char *problem;      /* a pre-launch check's message (cohort_config_form_set_problem) */
  char *pending;      /* the refused text, retried after other edits */
  GtkWidget *title;   /* the label naming the key */
  GtkWidget *chooser; /* the file-chooser button of a path key, else NULL */
  GtkWidget *hint;    /* a line under the key's name (hint_keys), else NULL */
  gboolean keep_text; /* a number field keeps the refused text the user typed */
  char *hidden_choice;
  char *hidden_reason;
  gboolean placed;
} FormKey;

struct _CohortConfigForm {
  GObject parent_instance;
  CohortConfig *cfg;
  FormKey *keys;
  guint n_keys;
  GPtrArray *headings; /* the section titles of the pages built, with their section */
  gboolean updating;   /* set while the form writes to controls itself */
};

G_DEFINE_FINAL_TYPE(CohortConfigForm, cohort_config_form, G_TYPE_OBJECT)

enum { SIGNAL_CHANGED, N_SIGNALS };
static guint signals[N_SIGNALS];

/* Message source for cohort_config_set: errors read "settings: key …". */
#define FORM_SOURCE _("settings")

static FormKey *find(CohortConfigForm *form, const char *name)
{
  for (guint i = 0; i < form->n_keys; i++)
    if (g_str_equal(form->keys[i].key->name, name))
      return &form->keys[i];
  return NULL;
}

static char *control_text(FormKey *fk)
{
  GtkWidget *w = fk->control;
  if (GTK_IS_SWITCH(w))
    return g_strdup(gtk_switch_get_active(GTK_SWITCH(w)) ? "true" : "false");
  if (GTK_IS_DROP_DOWN(w)) {
    guint i = gtk_drop_down_get_selected(GTK_DROP_DOWN(w));
    if (i == GTK_INVALID_LIST_POSITION || i >= fk->values->len)
      return g_strdup("");
    return g_strdup(g_ptr_array_index(fk->values, i));
  }
  return g_strdup(gtk_editable_get_text(GTK_EDITABLE(w)));
}

static void fill_choices(FormKey *fk, const char *current)
{
  GtkStringList *list = gtk_string_list_new(NULL);
  g_ptr_array_set_size(fk->values, 0);
  for (const char *const *c = fk->key->choices; c != NULL && *c != NULL; c++) {
    if (fk->hidden_choice != NULL && g_str_equal(*c, fk->hidden_choice) &&
        g_strcmp0(current, *c) != 0)
      continue;
    g_ptr_array_add(fk->values, g_strdup(*c));
    gtk_string_list_append(list, cohort_key_choice_label(*c));
  }
  gtk_drop_down_set_model(GTK_DROP_DOWN(fk->control), G_LIST_MODEL(list));
  g_object_unref(list);
}

static void set_control_text(CohortConfigForm *form, FormKey *fk, const char *text)
{
  GtkWidget *w = fk->control;
  gint64 v;
  if (GTK_IS_SPIN_BUTTON(w) &&
      g_ascii_string_to_signed(text, 10, (gint64)fk->key->min, (gint64)fk->key->max, &v, NULL)) {
    gtk_spin_button_set_value(GTK_SPIN_BUTTON(w), (double)v);
  } else if (GTK_IS_SWITCH(w)) {
    gtk_switch_set_active(GTK_SWITCH(w), g_str_equal(text, "true"));
  } else if (GTK_IS_DROP_DOWN(w)) {
    /* Replacing the model moves the selection; only the final one counts as an edit. */
    gboolean was_updating = form->updating;
    form->updating = TRUE;
    fill_choices(fk, text);
    form->updating = was_updating;
    guint pos = GTK_INVALID_LIST_POSITION;
    for (guint i = 0; i < fk->values->len; i++)
      if (g_str_equal(g_ptr_array_index(fk->values, i), text))
        pos = i;
    gtk_drop_down_set_selected(GTK_DROP_DOWN(w), pos);
  } else {
    gtk_editable_set_text(GTK_EDITABLE(w), text);
  }
}

/* The control shows the refusal, else the pre-launch problem, else nothing. */
static void show_mark(FormKey *fk)
{
  const char *message = fk->error != NULL ? fk->error : fk->problem;
  if (message != NULL) {
    gtk_widget_add_css_class(fk->control, "error");
    gtk_widget_set_tooltip_text(fk->control, message);
  } else {
    gtk_widget_remove_css_class(fk->control, "error");
    gtk_widget_set_tooltip_text(fk->control, NULL);
  }
}

static void mark(FormKey *fk, const char *message)
{
  g_free(fk->error);
  fk->error = g_strdup(message);
  show_mark(fk);
}

/* A hidden choice that the config holds anyway is an error of its own. */
static gboolean check_hidden(FormKey *fk, const char *text)
{
  if (fk->hidden_choice != NULL && g_strcmp0(text, fk->hidden_choice) == 0) {
    g_autofree char *msg =
        g_strdup_printf(_("%s: %s"), cohort_key_display_name(fk->key->name), fk->hidden_reason);
    mark(fk, msg);
    return FALSE;
  }
  return TRUE;
}

static gboolean apply(CohortConfigForm *form, FormKey *fk, const char *text)
{
  g_autoptr(GError) error = NULL;
  g_clear_pointer(&fk->pending, g_free);
  if (!check_hidden(fk, text)) {
    fk->pending = g_strdup(text);
    return FALSE;
  }
  if (!cohort_config_set(form->cfg, fk->key->name, text, FORM_SOURCE, &error)) {
    g_autofree char *msg = cohort_key_refusal(fk->key, text, form->cfg, error);
    mark(fk, msg);
    fk->pending = g_strdup(text);
    return FALSE;
  }
  mark(fk, NULL);
  return TRUE;
}

/* After an accepted edit, values refused only because of another key (cross-key rules) may
 * be fine now. */
static void retry_pending(CohortConfigForm *form, FormKey *except)
{
  for (guint i = 0; i < form->n_keys; i++) {
    FormKey *fk = &form->keys[i];
    if (fk == except || fk->pending == NULL)
      continue;
    g_autofree char *text = g_strdup(fk->pending);
    apply(form, fk, text);
  }
}

/* The keys with a line under their name: the tokenizer found, and what the fine-tuning
 * patterns match in the configured model (their count follows every edit, of the patterns as
 * they are typed and of the model's keys). */
static const char *const hint_keys[] = {"tokenizer", "lora_targets", "trainable", NULL};

static void update_hints(CohortConfigForm *form)
{
  for (const char *const *k = hint_keys; *k; k++) {
    FormKey *fk = find(form, *k);
    if (fk == NULL || fk->hint == NULL)
      continue;
    gboolean refused = FALSE;
    g_autofree char *hint = g_str_equal(*k, "tokenizer")
                                ? cohort_tokenizer_hint(form->cfg)
                                : cohort_finetune_hint(form->cfg, *k, &refused);
    gtk_label_set_text(GTK_LABEL(fk->hint), hint ? hint : "");
    gtk_widget_set_visible(fk->hint, hint != NULL);
    /* a pattern a run would refuse reads as the error it will be */
    if (refused)
      gtk_widget_add_css_class(fk->hint, "error");
    else
      gtk_widget_remove_css_class(fk->hint, "error");
  }
}

/* Only the keys in effect are shown (the key table says which: a GPT has no patch size, SGD's
 * momentum means nothing with adamw; a value the config holds is kept), a refused value always,
 * and a section only while one of its keys is. */
static void update_visibility(CohortConfigForm *form)
{
  g_autoptr(GHashTable) sections = g_hash_table_new(NULL, NULL);
  for (guint i = 0; i < form->n_keys; i++) {
    FormKey *fk = &form->keys[i];
    gboolean shown = cohort_config_key_in_effect(fk->key, form->cfg) || fk->error != NULL;
    GtkWidget *lrow = gtk_widget_get_parent(fk->row);
    gtk_widget_set_visible(GTK_IS_LIST_BOX_ROW(lrow) ? lrow : fk->row, shown);
    GtkWidget *list = lrow ? gtk_widget_get_parent(lrow) : NULL;
    GtkWidget *section = list ? gtk_widget_get_parent(list) : NULL;
    if (GTK_IS_LIST_BOX(list) && section)
      g_hash_table_insert(
          sections, section,
          GINT_TO_POINTER(shown || GPOINTER_TO_INT(g_hash_table_lookup(sections, section))));
  }
  GHashTableIter it;
  gpointer section, shown;
  g_hash_table_iter_init(&it, sections);
  while (g_hash_table_iter_next(&it, &section, &shown))
    gtk_widget_set_visible(section, GPOINTER_TO_INT(shown));
  update_hints(form);
}

static void on_control_changed(CohortConfigForm *form, FormKey *fk)
{
  if (form->updating)
    return;
  g_autofree char *text = control_text(fk);
  if (apply(form, fk, text))
    retry_pending(form, fk);
  update_visibility(form);
  g_signal_emit(form, signals[SIGNAL_CHANGED], 0);
}

/* A number field: what is typed is checked as typed, like any entry; GtkSpinButton would
 * replace text it cannot read (or a value out of range) with a number of its own when it
 * loses focus, so "xyz" would silently become the minimum. Its update policy is "if valid",
 * and a refused text is kept: the input handler says it cannot be read, and the output
 * handler then leaves the text alone. */
static int on_spin_input(GtkSpinButton *spin, double *value, gpointer data)
{
  FormKey *fk = data;
  const char *text = gtk_editable_get_text(GTK_EDITABLE(spin));
  gint64 v;
  g_autofree char *t = g_strstrip(g_strdup(text));
  if (!g_ascii_string_to_signed(t, 10, (gint64)fk->key->min, (gint64)fk->key->max, &v, NULL)) {
    fk->keep_text = TRUE;
    return GTK_INPUT_ERROR;
  }
  *value = (double)v;
  return TRUE;
}

static gboolean on_spin_output(GtkSpinButton *spin, gpointer data)
{
  (void)spin;
  FormKey *fk = data;
  gboolean keep = fk->keep_text;
  fk->keep_text = FALSE;
  return keep;
}

static void on_entry_changed(GtkEditable *entry, gpointer data)
{
  CohortConfigForm *form = g_object_get_data(G_OBJECT(entry), "cohort-form");
  on_control_changed(form, data);
}

static void on_notify(GObject *obj, GParamSpec *pspec, gpointer data)
{
  (void)pspec;
  CohortConfigForm *form = g_object_get_data(obj, "cohort-form");
  on_control_changed(form, data);
}

static GtkWidget *make_control(CohortConfigForm *form, FormKey *fk)
{
  const CohortConfigKey *key = fk->key;
  GtkWidget *w;
  switch (key->type) {
  case COHORT_KEY_INT: {
    double lo = key->min, hi = key->max;
    if (hi <= lo) {
      lo = G_MININT;
      hi = G_MAXINT;
    }
    w = gtk_spin_button_new_with_range(lo, hi, 1);
    gtk_spin_button_set_digits(GTK_SPIN_BUTTON(w), 0);
    /* new_with_range makes it numeric, which drops letters as they are typed. */
    gtk_spin_button_set_numeric(GTK_SPIN_BUTTON(w), FALSE);
    gtk_spin_button_set_update_policy(GTK_SPIN_BUTTON(w), GTK_UPDATE_IF_VALID);
    gtk_editable_set_width_chars(GTK_EDITABLE(w), 8);
    g_signal_connect(w, "input", G_CALLBACK(on_spin_input), fk);
    g_signal_connect(w, "output", G_CALLBACK(on_spin_output), fk);
    /* Every text change, typed or from the arrows, is one edit. */
    g_signal_connect(w, "changed", G_CALLBACK(on_entry_changed), fk);
    break;
  }
  case COHORT_KEY_BOOL:
    w = gtk_switch_new();
    gtk_widget_set_halign(w, GTK_ALIGN_END);
    g_signal_connect(w, "notify::active", G_CALLBACK(on_notify), fk);
    break;
  case COHORT_KEY_STRING:
    if (key->choices == NULL)
      goto entry;
    /* a string kept as text but limited to choices (model): a drop-down too */
    G_GNUC_FALLTHROUGH;
  case COHORT_KEY_CHOICE:
    w = gtk_drop_down_new(NULL, NULL);
    fk->values = g_ptr_array_new_with_free_func(g_free);
    fk->control = w;
    fill_choices(fk, NULL);
    g_signal_connect(w, "notify::selected", G_CALLBACK(on_notify), fk);
    break;
  default: /* INT64 (beyond a double's exact range), DOUBLE, STRING, INT_LIST */
  entry:
    w = gtk_entry_new();
    gtk_editable_set_width_chars(GTK_EDITABLE(w), 18);
    if (key->type == COHORT_KEY_INT_LIST)
      gtk_entry_set_placeholder_text(GTK_ENTRY(w), _("e.g. 0,1,2,3"));
    g_signal_connect(w, "changed", G_CALLBACK(on_entry_changed), fk);
    break;
  }
  g_object_set_data(G_OBJECT(w), "cohort-form", form);
  gtk_widget_set_valign(w, GTK_ALIGN_CENTER);
  return w;
}

typedef struct {
  CohortConfigForm *form;
  const CohortConfigKey *key;
} PathKind;

/* Keys that name a file or folder (the key table's CohortKeyPath) get a file-chooser button:
 * a folder for folder keys (a tokenizer folder too, though a file will do), data as the
 * format reads it (images are a folder of class folders; text and tokens may be a file), and
 * a GPT's initial weights, a Hugging Face folder (weights, config, tokenizer). */
static gboolean path_wants_folder(gpointer data)
{
  PathKind *kind = data;
  switch (kind->key->path->kind) {
  case COHORT_PATH_FOLDER:
  case COHORT_PATH_OUTPUT:
    return TRUE;
  case COHORT_PATH_DATA:
    return kind->form->cfg->data_format == COHORT_DATA_IMAGES;
  case COHORT_PATH_FILE:
    break;
  }
  if (g_str_equal(kind->key->name, "init_from")) {
    const CohortFamilyDesc *family = cohort_family_desc(kind->form->cfg->model);
    return family && family->init_from_folder;
  }
  return FALSE;
}

static GtkWidget *path_button(CohortConfigForm *form, FormKey *fk)
{
  if (fk->key->path == NULL || !GTK_IS_ENTRY(fk->control))
    return NULL;
  PathKind *kind = g_new0(PathKind, 1);
  kind->form = form;
  kind->key = fk->key;
  GtkWidget *b = cohort_path_chooser_button_new(
      GTK_EDITABLE(fk->control), cohort_key_display_name(fk->key->name), path_wants_folder, kind);
  g_object_set_data_full(G_OBJECT(b), "cohort-path-kind", kind, g_free);
  return b;
}

static GtkWidget *make_row(CohortConfigForm *form, FormKey *fk)
{
  const CohortConfigKey *key = fk->key;
  GtkWidget *row = gtk_box_new(GTK_ORIENTATION_HORIZONTAL, 12);
  gtk_widget_add_css_class(row, "cohort-row");
  GtkWidget *text = gtk_box_new(GTK_ORIENTATION_VERTICAL, 2);
  gtk_widget_set_hexpand(text, TRUE);
  const char *label = cohort_key_label(key->name);
  GtkWidget *title = fk->title = gtk_label_new(label != NULL ? label : key->name);
  gtk_label_set_xalign(GTK_LABEL(title), 0);
  gtk_label_set_wrap(GTK_LABEL(title), TRUE);
  gtk_label_set_mnemonic_widget(GTK_LABEL(title), fk->control);
  GtkWidget *name = gtk_label_new(key->name);
  gtk_label_set_xalign(GTK_LABEL(name), 0);
  gtk_widget_add_css_class(name, "dim-label");
  gtk_widget_add_css_class(name, "caption");
  gtk_box_append(GTK_BOX(text), title);
  gtk_box_append(GTK_BOX(text), name);
  if (g_strv_contains(hint_keys, key->name)) {
    fk->hint = gtk_label_new(NULL);
    gtk_label_set_xalign(GTK_LABEL(fk->hint), 0);
    gtk_label_set_wrap(GTK_LABEL(fk->hint), TRUE);
    gtk_widget_add_css_class(fk->hint, "caption");
    gtk_box_append(GTK_BOX(text), fk->hint);
  }
  gtk_box_append(GTK_BOX(row), text);
  fk->chooser = path_button(form, fk);
  if (fk->chooser != NULL) {
    GtkWidget *linked = gtk_box_new(GTK_ORIENTATION_HORIZONTAL, 0);
    gtk_widget_add_css_class(linked, "linked");
    gtk_box_append(GTK_BOX(linked), fk->control);
    gtk_box_append(GTK_BOX(linked), fk->chooser);
    gtk_widget_set_valign(linked, GTK_ALIGN_CENTER);
    gtk_box_append(GTK_BOX(row), linked);
  } else {
    gtk_box_append(GTK_BOX(row), fk->control);
  }
  g_autofree char *allowed = cohort_key_allowed(key);
  g_autofree char *tip = g_strdup_printf(_("%s\nAllowed: %s"), cohort_key_help(key), allowed);
  gtk_widget_set_tooltip_text(text, tip);
  return row;
}

static void cohort_config_form_dispose(GObject *obj)
{
  CohortConfigForm *form = COHORT_CONFIG_FORM(obj);
  for (guint i = 0; i < form->n_keys; i++) {
    FormKey *fk = &form->keys[i];
    g_signal_handlers_disconnect_by_data(fk->control, fk);
    g_clear_object(&fk->row);
    g_clear_pointer(&fk->values, g_ptr_array_unref);
    g_clear_pointer(&fk->error, g_free);
    g_clear_pointer(&fk->problem, g_free);
    g_clear_pointer(&fk->pending, g_free);
    g_clear_pointer(&fk->hidden_choice, g_free);
    g_clear_pointer(&fk->hidden_reason, g_free);
  }
  g_clear_pointer(&form->keys, g_free);
  form->n_keys = 0;
  g_clear_pointer(&form->headings, g_ptr_array_unref);
  g_clear_pointer(&form->cfg, cohort_config_free);
  G_OBJECT_CLASS(cohort_config_form_parent_class)->dispose(obj);
}

static void cohort_config_form_class_init(CohortConfigFormClass *klass)
{
  G_OBJECT_CLASS(klass)->dispose = cohort_config_form_dispose;
  signals[SIGNAL_CHANGED] = g_signal_new("changed", G_TYPE_FROM_CLASS(klass), G_SIGNAL_RUN_LAST, 0,
                                         NULL, NULL, NULL, G_TYPE_NONE, 0);
}

static void cohort_config_form_init(CohortConfigForm *form)
{
  form->cfg = cohort_config_new();
  form->headings = g_ptr_array_new_with_free_func(g_object_unref);
  const CohortConfigKey *table = cohort_config_keys(&form->n_keys);
  form->keys = g_new0(FormKey, form->n_keys);
  for (guint i = 0; i < form->n_keys; i++) {
    FormKey *fk = &form->keys[i];
    fk->key = &table[i];
    fk->control = make_control(form, fk);
    fk->row = g_object_ref_sink(make_row(form, fk));
  }
}

CohortConfigForm *cohort_config_form_new(void)
{
  CohortConfigForm *form = g_object_new(COHORT_TYPE_CONFIG_FORM, NULL);
  cohort_config_form_set_config(form, form->cfg);
  return form;
}

const CohortConfig *cohort_config_form_get_config(CohortConfigForm *form)
{
  return form->cfg;
}

void cohort_config_form_set_config(CohortConfigForm *form, const CohortConfig *cfg)
{
  if (cfg != form->cfg) {
    CohortConfig *copy = cohort_config_copy(cfg);
    cohort_config_free(form->cfg);
    form->cfg = copy;
  }
  form->updating = TRUE;
  for (guint i = 0; i < form->n_keys; i++) {
    FormKey *fk = &form->keys[i];
    g_autofree char *text = cohort_config_get(form->cfg, fk->key->name);
    g_clear_pointer(&fk->pending, g_free);
    mark(fk, NULL);
    set_control_text(form, fk, text != NULL ? text : "");
    if (!check_hidden(fk, text))
      fk->pending = g_strdup(text);
  }
  form->updating = FALSE;
  update_visibility(form);
  g_signal_emit(form, signals[SIGNAL_CHANGED], 0);
}

GtkWidget *cohort_config_form_get_control(CohortConfigForm *form, const char *key)
{
  FormKey *fk = find(form, key);
  return fk != NULL ? fk->control : NULL;
}

char *cohort_config_form_get_text(CohortConfigForm *form, const char *key)
{
  FormKey *fk = find(form, key);
  return fk != NULL ? control_text(fk) : NULL;
}

gboolean cohort_config_form_set_text(CohortConfigForm *form, const char *key, const char *text)
{
  FormKey *fk = find(form, key);
  if (fk == NULL)
    return FALSE;
  /* Applied once, as one edit, whether or not the control's value changed (a value refused
   * before is re-checked). */
  form->updating = TRUE;
  set_control_text(form, fk, text);
  form->updating = FALSE;
  on_control_changed(form, fk);
  g_autofree char *after = control_text(fk);
  return fk->error == NULL && g_strcmp0(after, text) == 0;
}

const char *cohort_config_form_get_error(CohortConfigForm *form, const char *key)
{
  FormKey *fk = find(form, key);
  return fk != NULL ? fk->error : NULL;
}

guint cohort_config_form_count_errors(CohortConfigForm *form)
{
  guint n = 0;
  for (guint i = 0; i < form->n_keys; i++)
    n += form->keys[i].error != NULL;
  return n;
}

const char *cohort_config_form_first_error(CohortConfigForm *form)
{
  for (guint i = 0; i < form->n_keys; i++)
    if (form->keys[i].error != NULL)
      return form->keys[i].error;
  return NULL;
}

void cohort_config_form_set_problem(CohortConfigForm *form, const char *key, const char *message)
{
  FormKey *fk = find(form, key);
  if (fk == NULL || g_strcmp0(fk->problem, message) == 0)
    return;
  g_free(fk->problem);
  fk->problem = g_strdup(message);
  show_mark(fk);
}

void cohort_config_form_clear_problems(CohortConfigForm *form)
{
  for (guint i = 0; i < form->n_keys; i++)
    cohort_config_form_set_problem(form, form->keys[i].key->name, NULL);
}

const char *cohort_config_form_get_problem(CohortConfigForm *form, const char *key)
{
  FormKey *fk = find(form, key);
  return fk != NULL ? fk->problem : NULL;
}

const char *cohort_config_form_get_hint(CohortConfigForm *form, const char *key)
{
  FormKey *fk = find(form, key);
  if (fk == NULL || fk->hint == NULL || !gtk_widget_get_visible(fk->hint))
    return NULL;
  return gtk_label_get_text(GTK_LABEL(fk->hint));
}

const char *cohort_config_form_refused_hint(CohortConfigForm *form)
{
  for (const char *const *k = hint_keys; *k; k++)
    if (cohort_config_form_hint_is_error(form, *k))
      return cohort_config_form_get_hint(form, *k);
  return NULL;
}

gboolean cohort_config_form_hint_is_error(CohortConfigForm *form, const char *key)
{
  FormKey *fk = find(form, key);
  return fk != NULL && fk->hint != NULL && gtk_widget_get_visible(fk->hint) &&
         gtk_widget_has_css_class(fk->hint, "error");
}

GtkWidget *cohort_config_form_get_chooser(CohortConfigForm *form, const char *key)
{
  FormKey *fk = find(form, key);
  return fk != NULL ? fk->chooser : NULL;
}

const char *cohort_config_form_page_issue(CohortConfigForm *form, const char *page)
{
  const char *problem = NULL;
  for (guint i = 0; i < form->n_keys; i++) {
    FormKey *fk = &form->keys[i];
    if (g_strcmp0(fk->key->page, page) != 0)
      continue;
    if (fk->error != NULL)
      return fk->error;
    if (problem == NULL)
      problem = fk->problem;
  }
  return problem;
}

void cohort_config_form_hide_choice(CohortConfigForm *form, const char *key, const char *value,
                                    const char *reason)
{
  FormKey *fk = find(form, key);
  if (fk == NULL || fk->values == NULL)
    return;
  g_free(fk->hidden_choice);
  g_free(fk->hidden_reason);
  fk->hidden_choice = g_strdup(value);
  fk->hidden_reason = g_strdup(reason);
  cohort_config_form_set_config(form, form->cfg);
}

static GtkWidget *section_box(CohortConfigForm *form, const CohortKeySection *section,
                              GtkWidget **list_out)
{
  GtkWidget *box = gtk_box_new(GTK_ORIENTATION_VERTICAL, 6);
  GtkWidget *heading =
      gtk_label_new(section != NULL ? cohort_key_section_title(section) : _("Other"));
  if (section != NULL) {
    g_object_set_data(G_OBJECT(heading), "cohort-section", (gpointer)section);
    g_ptr_array_add(form->headings, g_object_ref(heading));
  }
  gtk_label_set_xalign(GTK_LABEL(heading), 0);
  gtk_widget_add_css_class(heading, "heading");
  gtk_box_append(GTK_BOX(box), heading);
  GtkWidget *list = gtk_list_box_new();
  gtk_list_box_set_selection_mode(GTK_LIST_BOX(list), GTK_SELECTION_NONE);
  gtk_widget_add_css_class(list, "boxed-list");
  gtk_box_append(GTK_BOX(box), list);
  *list_out = list;
  return box;
}

static void place(FormKey *fk, GtkWidget *list)
{
  fk->placed = TRUE;
  gtk_list_box_append(GTK_LIST_BOX(list), fk->row);
  GtkWidget *lrow = gtk_widget_get_parent(fk->row);
  gtk_list_box_row_set_activatable(GTK_LIST_BOX_ROW(lrow), FALSE);
  gtk_widget_set_visible(fk->row, TRUE); /* visibility is the list row's from now on */
}

static gboolean known_page(const char *page)
{
  return page != NULL && g_strv_contains(cohort_key_pages(), page);
}

GtkWidget *cohort_config_form_build_page(CohortConfigForm *form, const char *page_name,
                                         const char *const *skip, GtkWidget *top)
{
  GtkWidget *page = gtk_box_new(GTK_ORIENTATION_VERTICAL, 18);
  gtk_widget_add_css_class(page, "cohort-page");
  if (top != NULL)
    gtk_box_append(GTK_BOX(page), top);

  guint n_sections;
  const CohortKeySection *sections = cohort_key_sections(&n_sections);
  for (guint s = 0; s < n_sections; s++) {
    if (!g_str_equal(sections[s].page, page_name))
      continue;
    GtkWidget *list = NULL, *box = section_box(form, &sections[s], &list);
    guint n = 0;
    for (const char *const *k = sections[s].keys; *k != NULL; k++) {
      FormKey *fk = find(form, *k);
      if (fk == NULL || fk->placed || (skip != NULL && g_strv_contains(skip, *k)) ||
          g_strcmp0(fk->key->page, page_name) != 0)
        continue;
      place(fk, list);
      n++;
    }
    if (n > 0)
      gtk_box_append(GTK_BOX(page), box);
    else
      g_object_unref(g_object_ref_sink(box));
  }

  /* Keys of this page that no section names; keys of unknown pages land on "output". */
  GtkWidget *list = NULL, *box = section_box(form, NULL, &list);
  guint n = 0;
  for (guint i = 0; i < form->n_keys; i++) {
    FormKey *fk = &form->keys[i];
    gboolean mine = g_strcmp0(fk->key->page, page_name) == 0 ||
                    (g_str_equal(page_name, "output") && !known_page(fk->key->page));
    if (!mine || fk->placed || (skip != NULL && g_strv_contains(skip, fk->key->name)))
      continue;
    place(fk, list);
    n++;
  }
  if (n > 0)
    gtk_box_append(GTK_BOX(page), box);
  else
    g_object_unref(g_object_ref_sink(box));

  GtkWidget *scrolled = gtk_scrolled_window_new();
  gtk_scrolled_window_set_policy(GTK_SCROLLED_WINDOW(scrolled), GTK_POLICY_NEVER,
                                 GTK_POLICY_AUTOMATIC);
  GtkWidget *clamp = gtk_box_new(GTK_ORIENTATION_VERTICAL, 0);
  gtk_widget_set_halign(page, GTK_ALIGN_CENTER);
  gtk_widget_set_size_request(page, 560, -1);
  gtk_box_append(GTK_BOX(clamp), page);
  gtk_scrolled_window_set_child(GTK_SCROLLED_WINDOW(scrolled), clamp);
  update_visibility(form);
  return scrolled;
}

void cohort_config_form_relabel(CohortConfigForm *form)
{
  for (guint i = 0; i < form->n_keys; i++) {
    const char *label = cohort_key_label(form->keys[i].key->name);
    gtk_label_set_text(GTK_LABEL(form->keys[i].title),
                       label != NULL ? label : form->keys[i].key->name);
  }
  for (guint i = 0; i < form->headings->len; i++) {
    GtkWidget *heading = g_ptr_array_index(form->headings, i);
    gtk_label_set_text(GTK_LABEL(heading), cohort_key_section_title(g_object_get_data(
                                               G_OBJECT(heading), "cohort-section")));
  }
}

const char *cohort_config_form_get_label(CohortConfigForm *form, const char *key)
{
  FormKey *fk = find(form, key);
  return fk != NULL ? gtk_label_get_text(GTK_LABEL(fk->title)) : NULL;
}

GtkWidget *cohort_config_form_build_rows(CohortConfigForm *form, const char *const *keys)
{
  GtkWidget *list = gtk_list_box_new();
  gtk_list_box_set_selection_mode(GTK_LIST_BOX(list), GTK_SELECTION_NONE);
  gtk_widget_add_css_class(list, "boxed-list");
  for (const char *const *k = keys; *k != NULL; k++) {
    FormKey *fk = find(form, *k);
    if (fk != NULL && !fk->placed)
      place(fk, list);
  }
  return list;
}

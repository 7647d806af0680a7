#include "engine/train/hang-report.h"

/* Ranks named one by one in the log line; the event lists them all. */
#define NAMED 4

static char *collective_text(const char *kind, guint64 seq, const char *label)
{
  return label[0] ? g_strdup_printf("%s #%" G_GUINT64_FORMAT " (%s)", kind, seq, label)
                  : g_strdup_printf("%s #%" G_GUINT64_FORMAT, kind, seq);
}

JsonObject *cohort_hang_report_fields(const CohortHangReport *rep)
{
  JsonObject *f = json_object_new();
  json_object_set_string_member(f, COHORT_FIELD_COLLECTIVE, rep->kind);
  json_object_set_int_member(f, COHORT_FIELD_SEQ, (gint64)rep->seq);
  if (rep->label[0])
    json_object_set_string_member(f, COHORT_FIELD_LABEL, rep->label);
  json_object_set_double_member(f, COHORT_FIELD_WAITED_S, rep->waited_s);
  json_object_set_double_member(f, COHORT_FIELD_TIMEOUT_S, rep->timeout_s);
  json_object_set_boolean_member(f, COHORT_FIELD_RESOLVED, rep->resolved);
  JsonArray *missing = json_array_new();
  JsonArray *ranks = json_array_new();
  for (int i = 0; i < rep->n_ranks; i++) {
    const CohortRankRecord *r = &rep->ranks[i];
    if (!r->arrived && !rep->resolved)
      json_array_add_int_element(missing, r->rank);
    JsonObject *o = json_object_new();
    json_object_set_int_member(o, COHORT_FIELD_RANK, r->rank);
    json_object_set_boolean_member(o, COHORT_FIELD_ARRIVED, r->arrived || rep->resolved);
    if (r->known) {
      json_object_set_string_member(o, COHORT_FIELD_PHASE, r->phase);
      json_object_set_double_member(o, COHORT_FIELD_PHASE_S, r->phase_s);
      json_object_set_int_member(o, COHORT_FIELD_TICKS, (gint64)r->ticks);
      json_object_set_int_member(o, COHORT_FIELD_STEP, r->step);
      if (r->age_s >= 0) {
        json_object_set_double_member(o, COHORT_FIELD_RECORD_AGE_S, r->age_s);
        json_object_set_boolean_member(o, COHORT_FIELD_SILENT, r->silent);
      }
      if (r->cur_seq > 0)
        json_object_set_double_member(o, COHORT_FIELD_WAITING_S, r->cur_wait_s);
      if (r->last_seq > 0) {
        json_object_set_string_member(o, COHORT_FIELD_LAST_COLLECTIVE, r->last_kind);
        json_object_set_int_member(o, COHORT_FIELD_LAST_SEQ, (gint64)r->last_seq);
        if (r->last_label[0])
          json_object_set_string_member(o, COHORT_FIELD_LAST_LABEL, r->last_label);
      }
    }
    json_array_add_object_element(ranks, o);
  }
  json_object_set_array_member(f, COHORT_FIELD_MISSING, missing);
  json_object_set_array_member(f, COHORT_FIELD_RANKS, ranks);
  return f;
}

/* "in forward for 12 s at step 7, last completed all_reduce #41 (step vote)" */
static char *state_text(const CohortRankRecord *r)
{
  if (!r->known)
    return g_strdup("no heartbeat yet");
  g_autofree char *done = r->last_seq > 0
                              ? collective_text(r->last_kind, r->last_seq, r->last_label)
                              : g_strdup("no collective");
  g_autofree char *in =
      r->cur_seq > 0 ? collective_text(r->cur_kind, r->cur_seq, r->cur_label) : NULL;
  g_autofree char *state =
      g_strdup_printf("in %s for %.0f s at step %" G_GINT64_FORMAT "%s%s, last completed %s",
                      r->phase, r->phase_s, r->step, in ? ", waiting in " : "", in ? in : "", done);
  /* A stopped rank's record stays as it was: say how old it is rather than pass it as now. */
  if (r->silent)
    return g_strdup_printf("its heartbeat has been silent for %.0f s: the process is stopped, "
                           "its host paused or cut off, or it lost the store; it was then %s",
                           r->age_s, state);
  return g_steal_pointer(&state);
}

char *cohort_hang_report_text(const CohortHangReport *rep)
{
  g_autofree char *what = collective_text(rep->kind, rep->seq, rep->label);
  if (rep->resolved)
    return g_strdup_printf("every rank has reached %s, after a wait of %.0f s", what,
                           rep->waited_s);
  g_autoptr(GString) who = g_string_new(NULL);
  g_autoptr(GString) states = g_string_new(NULL);
  int named = 0;
  for (int i = 0; i < rep->n_ranks; i++) {
    const CohortRankRecord *r = &rep->ranks[i];
    if (r->arrived)
      continue;
    g_string_append_printf(who, "%s%d", named ? ", " : "", r->rank);
    if (named < NAMED) {
      g_autofree char *st = state_text(r);
      if (rep->n_missing == 1)
        g_string_append(states, st);
      else
        g_string_append_printf(states, "%srank %d %s", named ? "; " : "", r->rank, st);
    }
    named++;
  }
  if (named > NAMED)
    g_string_append_printf(states, "; and %d more", named - NAMED);
  return g_strdup_printf("%s %s %s not reached %s after %.0f s (%s); the others keep waiting, up "
                         "to %g s without progress",
                         named > 1 ? "ranks" : "rank", who->str, named > 1 ? "have" : "has", what,
                         rep->waited_s, states->str, rep->timeout_s);
}

static void on_hang(const CohortHangReport *rep, gpointer user)
{
  CohortProgress *progress = user;
  g_autofree char *text = cohort_hang_report_text(rep);
  /* The event first: the window's ranks table reads it; the log line says the same. */
  cohort_progress_emit(progress, COHORT_EVENT_HANG, cohort_hang_report_fields(rep));
  cohort_progress_log(progress, rep->resolved ? COHORT_LEVEL_INFO : COHORT_LEVEL_WARNING, "%s",
                      text);
}

void cohort_hang_report_attach(CohortComm *comm, const CohortConfig *cfg, int rank,
                               CohortProgress *progress)
{
  if (comm == NULL)
    return;
  cohort_comm_set_hang_report(comm, cfg->hang_report_s, rank == 0 ? on_hang : NULL, progress);
}

/* Background loading of the next micro-batches through a bounded set of batches. */
#include "engine/train/prefetch.h"

typedef enum { SLOT_FREE, SLOT_LOADING, SLOT_READY, SLOT_HELD } SlotState;

typedef struct {
  CohortBatch *batch;
  SlotState state;
  gint64 pos;       /* epoch × micros_per_epoch + micro */
  guint generation; /* of the plan it was loaded for: a slot of an older one is stale */
  GError *error;    /* the load's failure, when READY */
} Slot;

struct CohortPrefetch {
  int n_workers, n_slots;
  gint64 per_epoch;
  CohortPrefetchLoad load;
  void (*free_batch)(CohortBatch *);
  gpointer data;
  Slot *slots;
  GThread **threads;
  GMutex lock;
  GCond changed;
  gint64 next_pos;  /* the next position a worker takes */
  gint64 expected;  /* the position the caller is expected to ask for next */
  guint generation; /* bumped when the caller asks for an unexpected position */
  gboolean started;
  gboolean stopping;
};

static Slot *free_slot(CohortPrefetch *p)
{
  for (int i = 0; i < p->n_slots; i++)
    if (p->slots[i].state == SLOT_FREE)
      return &p->slots[i];
  return NULL;
}

static gpointer worker(gpointer data)
{
  CohortPrefetch *p = data;
  g_mutex_lock(&p->lock);
  for (;;) {
    Slot *s = NULL;
    while (!p->stopping && (s = free_slot(p)) == NULL)
      g_cond_wait(&p->changed, &p->lock);
    if (p->stopping)
      break;
    s->state = SLOT_LOADING;
    s->pos = p->next_pos++;
    s->generation = p->generation;
    g_clear_error(&s->error);
    g_mutex_unlock(&p->lock);
    GError *error = NULL;
    gboolean ok = p->load(p->data, s->batch, s->pos / p->per_epoch, s->pos % p->per_epoch, &error);
    g_mutex_lock(&p->lock);
    if (s->generation == p->generation) {
      s->state = SLOT_READY;
      s->error = ok ? NULL : error;
    } else {
      /* Loaded for a plan the caller left: nobody will ask for it. */
      s->state = SLOT_FREE;
      if (!ok)
        g_error_free(error);
    }
    g_cond_broadcast(&p->changed);
  }
  g_mutex_unlock(&p->lock);
  return NULL;
}

CohortPrefetch *cohort_prefetch_new(int n_workers, int n_batches, gint64 micros_per_epoch,
                                    CohortPrefetchLoad load, CohortBatch *(*new_batch)(gpointer),
                                    void (*free_batch)(CohortBatch *), gpointer data)
{
  g_return_val_if_fail(n_workers >= 1 && n_batches >= 2 && micros_per_epoch >= 1, NULL);
  CohortPrefetch *p = g_new0(CohortPrefetch, 1);
  p->n_workers = n_workers;
  p->n_slots = n_batches;
  p->per_epoch = micros_per_epoch;
  p->load = load;
  p->free_batch = free_batch;
  p->data = data;
  p->slots = g_new0(Slot, n_batches);
  for (int i = 0; i < n_batches; i++)
    p->slots[i].batch = new_batch(data);
  p->threads = g_new0(GThread *, n_workers);
  p->expected = -1;
  g_mutex_init(&p->lock);
  g_cond_init(&p->changed);
  return p;
}

/* The caller left the expected order: what is loaded or loading ahead belongs to the old one. */
static void restart_at(CohortPrefetch *p, gint64 pos)
{
  p->generation++;
  for (int i = 0; i < p->n_slots; i++)
    if (p->slots[i].state == SLOT_READY) {
      p->slots[i].state = SLOT_FREE;
      g_clear_error(&p->slots[i].error);
    }
  p->next_pos = pos;
  p->expected = pos;
}

static Slot *ready_slot(CohortPrefetch *p, gint64 pos)
{
  for (int i = 0; i < p->n_slots; i++) {
    Slot *s = &p->slots[i];
    if (s->state == SLOT_READY && s->pos == pos && s->generation == p->generation)
      return s;
  }
  return NULL;
}

CohortBatch *cohort_prefetch_get(CohortPrefetch *p, gint64 epoch, gint64 micro, gint64 *waited_us,
                                 GError **error)
{
  gint64 pos = epoch * p->per_epoch + micro;
  gint64 t0 = g_get_monotonic_time();
  g_mutex_lock(&p->lock);
  for (int i = 0; i < p->n_slots; i++)
    if (p->slots[i].state == SLOT_HELD)
      p->slots[i].state = SLOT_FREE;
  if (pos != p->expected)
    restart_at(p, pos);
  g_cond_broadcast(&p->changed);
  if (!p->started) {
    p->started = TRUE;
    for (int i = 0; i < p->n_workers; i++)
      p->threads[i] = g_thread_new("cohort-data", worker, p);
  }
  Slot *s;
  while ((s = ready_slot(p, pos)) == NULL)
    g_cond_wait(&p->changed, &p->lock);
  p->expected = pos + 1;
  CohortBatch *out = NULL;
  if (s->error != NULL) {
    g_propagate_error(error, g_steal_pointer(&s->error));
    /* The next call starts again from what it asks for. */
    s->state = SLOT_FREE;
    p->expected = -1;
  } else {
    s->state = SLOT_HELD;
    out = s->batch;
  }
  g_cond_broadcast(&p->changed);
  g_mutex_unlock(&p->lock);
  if (waited_us)
    *waited_us = g_get_monotonic_time() - t0;
  return out;
}

void cohort_prefetch_free(CohortPrefetch *p)
{
  if (p == NULL)
    return;
  g_mutex_lock(&p->lock);
  p->stopping = TRUE;
  g_cond_broadcast(&p->changed);
  g_mutex_unlock(&p->lock);
  for (int i = 0; i < p->n_workers; i++)
    if (p->threads[i])
      g_thread_join(p->threads[i]);
  for (int i = 0; i < p->n_slots; i++) {
    g_clear_error(&p->slots[i].error);
    p->free_batch(p->slots[i].batch);
  }
  g_mutex_clear(&p->lock);
  g_cond_clear(&p->changed);
  g_free(p->threads);
  g_free(p->slots);
  g_free(p);
}

/* The base reference of a checkpoint of what learns (see checkpoint-base.h). */
#include "engine/model/checkpoint-base.h"

#include <string.h>

#include "engine/base/error.h"
#include "engine/base/fileio.h"
#include "engine/model/model-io.h"
#include "engine/progress/checkpoint-state.h"
#include "kernels/backend.h"

char *cohort_frozen_sha256(const CohortModel *m)
{
  g_autoptr(GChecksum) sum = g_checksum_new(G_CHECKSUM_SHA256);
  /* On a device, through a 64 MiB host buffer: a base can be larger than host memory spares */
  const size_t chunk = (size_t)16 << 20;
  gboolean host = cohort_model_on_host(m);
  g_autofree float *buf = host ? NULL : g_new(float, chunk);
  for (size_t at = m->n_trainable; at < m->n_params; at += chunk) {
    size_t n = MIN(chunk, m->n_params - at);
    const float *p = m->params + at;
    if (!host) {
      m->be->download(buf, p, n * sizeof(float));
      p = buf;
    }
    g_checksum_update(sum, (const guchar *)p, (gssize)(n * sizeof(float)));
  }
  return g_strdup(g_checksum_get_string(sum));
}

char *cohort_base_file(const CohortModel *m, const char *init_from)
{
  g_autofree char *path = cohort_resolve_path(init_from);
  return m->klass->import_file ? m->klass->import_file(path) : g_steal_pointer(&path);
}

gboolean cohort_checkpoint_base_init(const CohortModel *m, const CohortConfig *cfg,
                                     CohortTrainState *st, GError **error)
{
  st->base_sha256[0] = st->frozen_sha256[0] = 0;
  if (cfg->finetune == COHORT_FINETUNE_FULL ||
      cfg->student_init == COHORT_STUDENT_INIT_TEACHER_LAYERS)
    return TRUE;
  if (cfg->init_from && *cfg->init_from) {
    g_autofree char *file = cohort_base_file(m, cfg->init_from);
    g_autofree char *sha = cohort_file_sha256(file, error);
    if (!sha)
      return FALSE;
    g_strlcpy(st->base_sha256, sha, sizeof st->base_sha256);
  }
  g_autofree char *frozen = cohort_frozen_sha256(m);
  g_strlcpy(st->frozen_sha256, frozen, sizeof st->frozen_sha256);
  return TRUE;
}

/* The base file to read for checkpoint `dir` (state.json at `state`), checked against the
 * digest it recorded; NULL with the refusal. */
static char *checked_base(const char *dir, const CohortModel *m, const CohortTrainState *s,
                          const CohortStateExtras *x, const char *init_from, GError **error)
{
  if (init_from && !*init_from) {
    cohort_fail(error, COHORT_CHECKPOINT_ERROR, COHORT_CHECKPOINT_ERROR_MISMATCH,
                "%s: the checkpoint holds only what learns, on the base %s (sha256 %s), but "
                "init_from is \"\"; set init_from to that base",
                dir, x->base_path, s->base_sha256);
    return NULL;
  }
  /* base_path is init_from as the run gave it, absolute: a file, or a folder holding one */
  g_autofree char *file = cohort_base_file(m, init_from ? init_from : x->base_path);
  if (!g_file_test(file, G_FILE_TEST_IS_REGULAR)) {
    cohort_fail(error, COHORT_CHECKPOINT_ERROR, COHORT_CHECKPOINT_ERROR_MISMATCH,
                "%s: the checkpoint's base %s is missing (expected sha256 %s); the checkpoint "
                "holds only what learns and needs the base it was trained on: restore the file "
                "or set init_from to where it is now",
                dir, file, s->base_sha256);
    return NULL;
  }
  g_autofree char *sha = cohort_file_sha256(file, error);
  if (!sha)
    return NULL;
  if (strcmp(sha, s->base_sha256) != 0) {
    cohort_fail(error, COHORT_CHECKPOINT_ERROR, COHORT_CHECKPOINT_ERROR_MISMATCH,
                "%s: the base %s has changed: expected sha256 %s (the base the checkpoint was "
                "trained on), found %s; the checkpoint holds only what learns and cannot "
                "continue on another base",
                dir, file, s->base_sha256, sha);
    return NULL;
  }
  return g_steal_pointer(&file);
}

gboolean cohort_checkpoint_rebuild_base(const char *dir, CohortModel *m, const char *init_from,
                                        GError **error)
{
  g_autofree char *state = g_build_filename(dir, COHORT_CHECKPOINT_STATE_FILE, NULL);
  gsize len = 0;
  g_autofree char *text = cohort_checkpoint_read_state_text(state, &len, error);
  CohortTrainState s = {0};
  g_auto(CohortStateExtras) x = {0};
  if (!text || !cohort_state_parse(text, len, state, &s, &x, error))
    return FALSE;
  if (!s.frozen_sha256[0])
    return TRUE; /* the whole model is in the checkpoint */
  g_autoptr(CohortConfig) saved = cohort_config_load_data(x.config_json, -1, state, error);
  if (!saved)
    return FALSE;
  g_autofree char *file = NULL;
  if (s.base_sha256[0] && !(file = checked_base(dir, m, &s, &x, init_from, error)))
    return FALSE;
  if (!s.base_sha256[0] && init_from && *init_from)
    return cohort_fail(error, COHORT_CHECKPOINT_ERROR, COHORT_CHECKPOINT_ERROR_MISMATCH,
                       "%s: the checkpoint's base was made from seed %" G_GINT64_FORMAT
                       " (no init_from), but init_from is %s; resume needs the base it was "
                       "trained on: set init_from to \"\"",
                       dir, (gint64)saved->seed, init_from);
  cohort_model_init(m, (guint64)saved->seed);
  if (file &&
      !(cohort_model_import(m, file, NULL, error) && cohort_model_check_finite(m, file, error)))
    return FALSE;
  return TRUE;
}

/* The caption phase of set-up (text_encoder); see text-embeds.h. */
#include "engine/train/text-embeds.h"

#include "engine/models/text-encoder.h"
#include "engine/progress/protocol.h"

/* Encodes `caption` into `table` unless it is there already. */
static void encode_one(CohortTextEncoder *enc, CohortTextTable *table, const char *caption)
{
  if (cohort_text_table_lookup(table, caption))
    return;
  float *values;
  int len;
  cohort_text_encoder_encode(enc, caption, &values, &len);
  cohort_text_table_insert(table, caption, len, values);
}

static gboolean encode_source(CohortRankRun *r, CohortTextEncoder *enc, CohortDataSource *s,
                              const char *key, GError **error)
{
  if (!cohort_data_source_has_captions(s)) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "%s: key \"text_encoder\" needs captioned images; allowed: image folders with "
                "IMAGE.txt captions or a metadata.jsonl",
                key);
    return FALSE;
  }
  if (r->opts->rank == 0) {
    g_autofree char *summary = cohort_captions_summary(cohort_data_source_captions(s));
    cohort_progress_log(r->progress, COHORT_LEVEL_INFO, "%s: %s", key, summary);
  }
  CohortTextTable *table =
      cohort_text_table_new(cohort_text_encoder_width(enc), r->cfg->max_text_tokens);
  encode_one(enc, table, ""); /* caption dropout's, and guidance's unconditional input */
  guint64 n = cohort_data_source_count(s);
  for (guint64 i = 0; i < n; i++) {
    g_autofree char *caption = cohort_data_source_caption(s, i, -1);
    encode_one(enc, table, caption);
    cohort_phase_tick(); /* ranks waiting for this one see it alive */
  }
  if (r->opts->rank == 0)
    cohort_progress_log(r->progress, COHORT_LEVEL_INFO, "%s: %u distinct captions encoded by %s",
                        key, g_hash_table_size(table->rows), cohort_text_encoder_fingerprint(enc));
  cohort_data_source_set_text(s, table);
  return TRUE;
}

gboolean cohort_rank_run_encode_captions(CohortRankRun *r, GError **error)
{
  g_autoptr(CohortTextEncoder) enc = cohort_text_encoder_open(r->be, r->cfg, error);
  if (!enc)
    return FALSE;
  return encode_source(r, enc, r->train, "train_data", error) &&
         (!r->val || encode_source(r, enc, r->val, "val_data", error));
}

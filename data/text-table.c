/* Text embeddings of captions; see text-table.h. */
#include "data/text-table.h"

static void row_free(gpointer p)
{
  CohortTextRow *r = p;
  g_free(r->values);
  g_free(r);
}

CohortTextTable *cohort_text_table_new(int width, int max_tokens)
{
  CohortTextTable *t = g_new0(CohortTextTable, 1);
  t->width = width;
  t->max_tokens = max_tokens;
  t->rows = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, row_free);
  return t;
}

void cohort_text_table_free(CohortTextTable *t)
{
  if (!t)
    return;
  g_hash_table_unref(t->rows);
  g_free(t);
}

void cohort_text_table_insert(CohortTextTable *t, const char *caption, int len, float *values)
{
  g_return_if_fail(len >= 0 && len <= t->max_tokens && (len == 0 || values));
  CohortTextRow *r = g_new(CohortTextRow, 1);
  r->len = len;
  r->values = values;
  g_hash_table_replace(t->rows, g_strdup(caption), r);
}

const CohortTextRow *cohort_text_table_lookup(const CohortTextTable *t, const char *caption)
{
  return g_hash_table_lookup(t->rows, caption);
}

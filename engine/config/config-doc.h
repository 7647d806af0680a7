/* docs/config.md, generated from the key table so the reference cannot drift from the code. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* The whole Markdown text of docs/config.md (g_free it). The cohort-config-doc program writes
 * it and the test-config-doc test compares it with the committed file. */
char *cohort_config_doc_markdown(void);

G_END_DECLS

/* cohort-tokenize's modes (engine/cli/tokenize-modes.c). Each returns the exit status. */
#pragma once

#include <glib.h>

#include "data/tokenizer.h"

/* Prints the error's message and frees it; returns 1. */
int tokenize_failed(GError *error);
/* --decode FILE.bin: the shard's text on stdout. */
int tokenize_decode(const CohortTokenizer *tok, const char *path);
/* --ids FILE...: one line of space-separated ids per file. */
int tokenize_ids(const CohortTokenizer *tok, GPtrArray *files, gboolean add_special);
/* --render-chat FILE.jsonl: each conversation rendered, one JSON string per line. */
int tokenize_render_chat(const CohortTokenizer *tok, const char *path, gboolean generation_prompt);

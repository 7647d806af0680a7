/* Text data with a tokenizer (see text-tokens.c): loading the run's tokenizer, and the text's
 * tokens in the workspace cache, with `tokenize` progress events. */
#pragma once

#include "engine/train/trainer-run.h"

G_BEGIN_DECLS

/* Loads the tokenizer the config uses (cohort_config_tokenizer_path) into r->tokenizer, or
 * leaves it NULL for byte-level text; refuses a vocab_size other than the tokenizer's, naming
 * both. Every rank loads it. */
gboolean cohort_rank_run_load_tokenizer(CohortRankRun *r, GError **error);

/* The folder of llm.c shards holding the tokens of text `path` (config key `key`, for
 * messages), made in `cache_dir` on first use. Every rank calls it, rank 0 first when the
 * ranks share the cache (see text-tokens.c). */
char *cohort_rank_run_text_tokens(CohortRankRun *r, const char *path, const char *key,
                                  const char *cache_dir, GError **error);

/* Chat data (data_format chat, data/chat-data.h): the cache file of `path`'s conversations,
 * rendered with the tokenizer's chat template and tokenized in `cache_dir` on first use, a
 * conversation longer than seq_len + 1 tokens refused naming its file and line. Every rank
 * calls it: rank 0 first when the ranks share the cache; with distributed_data_loading each
 * rank makes its own. */
char *cohort_rank_run_chat_data(CohortRankRun *r, const char *path, const char *key,
                                const char *cache_dir, GError **error);

G_END_DECLS

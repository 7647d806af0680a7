/* The kinds of training data the readers in data/ understand. Lives here, not in the config,
 * so that data/ depends on nothing above it; engine/config/config.h includes it for the
 * `data_format` key. */
#pragma once

typedef enum {
  COHORT_DATA_TEXT,   /* byte-level UTF-8 text */
  COHORT_DATA_TOKENS, /* llm.c token shards (.bin) */
  COHORT_DATA_IMAGES, /* a folder of PNG/JPEG images in the ImageFolder layout (images.h) */
  COHORT_DATA_CHAT,   /* conversations in .jsonl files, through a chat template (chat-data.h) */
} CohortDataFormat;

/* Private to the config part: what the key table knows beyond the public CohortConfigKey row
 * (where the value lives in CohortConfig, and its default), so config.c and the doc generator
 * drive everything from the one table in config-keys.c. */
#pragma once

#include "engine/config/config.h"

G_BEGIN_DECLS

/* Byte offset of the key's field in CohortConfig. `key` must come from cohort_config_keys. */
gsize cohort_config_key_offset(const CohortConfigKey *key);

/* The key's default in its text form (what cohort_config_set accepts). */
const char *cohort_config_key_default(const CohortConfigKey *key);

/* Largest double below 1 and smallest above 0: the table's inclusive bounds for the open
 * intervals [0, 1) and (0, x]; allowed texts render them as "< 1" and "> 0". */
#define COHORT_KEY_BELOW_ONE  0x1.fffffffffffffp-1
#define COHORT_KEY_ABOVE_ZERO 0x1p-1074

/* Seeds stop at 2^53 - 1 so that every seed survives a trip through a double (the GUI's spin
 * buttons, JSON readers in other languages). */
#define COHORT_KEY_MAX_SEED 9007199254740991.0

/* Most entries a list key holds. device_indexes names GPUs of one machine: 1024 is far above
 * any machine's count, and keeps checking a list (and its repeats) cheap. */
#define COHORT_KEY_MAX_LIST 1024

G_END_DECLS

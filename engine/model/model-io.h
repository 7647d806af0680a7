/* Any model's tensors in and out of .safetensors by the names of its tables: the final export
 * (parameters and buffers, plus the family's extra files), loading such an export, and the
 * named groups of a checkpoint ("ema.", "optim.m.", …). */
#pragma once

#include <glib.h>

#include "engine/model/model.h"
#include "engine/model/safetensors.h"

G_BEGIN_DECLS

/* Entries for cohort_safetensors_write: one per tensor of `tensors`, named `prefix` + its
 * name, pointing into `buffer` (laid out as the table says; NULL: no data, for a layout). The names
 * are kept alive by `names` (an array with g_free as free function). Appended to `entries` (of
 * CohortStEntry). */
void cohort_tensor_st_entries(const CohortTensorInfo *tensors, guint n, const float *buffer,
                              const char *prefix, GPtrArray *names, GArray *entries);

/* Checks that every tensor of `tensors`, named `prefix` + its name, is in `f` with the
 * table's shape; nothing is read. Errors (COHORT_SAFETENSORS_ERROR_MISSING / _SHAPE) name
 * `path`, the tensor and both shapes. */
gboolean cohort_tensor_check(const CohortTensorInfo *tensors, guint n, const CohortStFile *f,
                             const char *path, const char *prefix, GError **error);

/* Reads every tensor of `tensors`, named `prefix` + its name, from `f` into `dst` (host memory
 * laid out as the table says), checking each shape. Errors name the file and the tensor. */
gboolean cohort_tensor_read(const CohortTensorInfo *tensors, guint n, const CohortStFile *f,
                            const char *prefix, float *dst, GError **error);

/* cohort_tensor_read, except that tensor `rows_name` (a position table such as GPT-2's wpe;
 * NULL: none) may have more rows in the file than in the table, the other dimensions equal:
 * its first rows are read (a model fine-tuned at a seq_len below its n_positions uses the
 * first seq_len positions, as Hugging Face does with shorter inputs). */
gboolean cohort_tensor_read_rows_prefix(const CohortTensorInfo *tensors, guint n,
                                        const CohortStFile *f, const char *prefix,
                                        const char *rows_name, float *dst, GError **error);

/* Writes the model's parameters (`params_or_NULL`: host memory laid out like them, e.g. EMA
 * weights; NULL = the model's own) and buffers under their names as F32 (I64 for counters)
 * to `path`, atomically. `metadata` (string to string, may be NULL) goes into
 * "__metadata__", with "format": "pt" added unless given. */
gboolean cohort_model_save(const CohortModel *m, const float *params_or_NULL, const char *path,
                           GHashTable *metadata, GError **error);

/* Loads a file written by cohort_model_save (or any file with exactly the model's tensor
 * names and shapes) into the parameters and buffers. Every tensor must be present with its
 * shape and the file must hold nothing else; on error the model is unchanged. The family's
 * position table (CohortModelClass.position_table) may be longer in the file: an export of a
 * run at a seq_len below the base's n_positions keeps the base's whole table. */
gboolean cohort_model_load(CohortModel *m, const char *path, GError **error);

/* init_from: the family's own importer when it has one (Hugging Face GPT-2 for "gpt";
 * torchvision and timm ResNets for "resnet"), else cohort_model_load. What the importer
 * adapted goes to `notes` (may be NULL), one line each, for the run's log. */
gboolean cohort_model_import(CohortModel *m, const char *path, GPtrArray *notes, GError **error);

G_END_DECLS

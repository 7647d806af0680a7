/* A bounded reader of the ZIP archives torch.save writes (PyTorch ≥ 1.6): the central directory
 * (ZIP64 included) and entries stored without compression, read in place from memory.
 *
 * Why not a library: torch.save writes every record stored (method 0) and 64-byte aligned so
 * that tensors can be mapped in place, and that is all a weight file needs; Debian's libzip or
 * minizip would add a dependency, deflate and encryption code (more for a stranger's file to
 * reach) and an extraction step, to then be limited to the same stored entries. This reader
 * checks every offset and size against the buffer, caps the number and size of the names,
 * refuses compressed, encrypted and repeated entries, and checks the CRC-32 of what is read.
 * It is fuzzed with the PyTorch reader (tests/fuzz-torch.c). */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* The most entries an archive may list (a tensor is one entry) and the longest name. */
#define COHORT_ZIP_MAX_ENTRIES (1 << 20)
#define COHORT_ZIP_MAX_NAME    1024

typedef struct {
  char *name;
  guint64 offset; /* of the data in the buffer */
  guint64 size;
  guint32 crc32;
} CohortZipEntry;

typedef struct CohortZip CohortZip;

/* Reads the directory of the archive in `data` (which must outlive the result). Errors (a
 * message of one line, without the file name) say what is wrong: not a ZIP archive, truncated,
 * a compressed or encrypted entry, an entry outside the archive, too many entries. */
CohortZip *cohort_zip_open(const guint8 *data, guint64 size, GError **error);
void cohort_zip_free(CohortZip *zip);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortZip, cohort_zip_free)

guint cohort_zip_count(const CohortZip *zip);
const CohortZipEntry *cohort_zip_entry(const CohortZip *zip, guint i);
/* The entry named `name`, or NULL. */
const CohortZipEntry *cohort_zip_find(const CohortZip *zip, const char *name);
/* The entry's bytes, after checking its CRC-32 (once); NULL with an error when it differs. */
const guint8 *cohort_zip_data(CohortZip *zip, const CohortZipEntry *entry, GError **error);

#define COHORT_ZIP_ERROR (cohort_zip_error_quark())
GQuark cohort_zip_error_quark(void);

G_END_DECLS

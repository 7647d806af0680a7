/* Images as latents (vae_from): an image folder listed as for pixel training (data/images.h),
 * read one file at a time for encoding, the keys of the latent cache (data/latent-cache.h), and
 * the table of latents a run trains on.
 *
 * Key of a latent: SHA-256 of "cohort latent v1", the SHA-256 of the image file's bytes, the
 * VAE's content hash (config.json and weights), the image size and channels the VAE sees, and
 * whether the image is mirrored. So a renamed or moved image keeps its latents, a changed
 * image or VAE is a new key (encoded again), and a mirrored latent (the horizontal flip, as
 * kohya caches it) is a key of its own. */
#pragma once

#include <glib.h>

#include "data/latent-cache.h"

G_BEGIN_DECLS

typedef struct CohortLatentFiles CohortLatentFiles;

/* Lists `folder` (ImageFolder layout, data/image-folder.h) for images fitted to image_size ×
 * image_size with `channels` (1 or 3). Entries that the listing already knows to be bad (a
 * GIF, a dangling link) fail, or are left out with skip_bad. */
CohortLatentFiles *cohort_latent_files_scan(const char *folder, int image_size, int channels,
                                            gboolean skip_bad, GError **error);
void cohort_latent_files_free(CohortLatentFiles *files);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortLatentFiles, cohort_latent_files_free)

gsize cohort_latent_files_len(const CohortLatentFiles *files);
int cohort_latent_files_label(const CohortLatentFiles *files, gsize i);
/* File i below the folder ("class/name.png"). */
const char *cohort_latent_files_path(const CohortLatentFiles *files, gsize i);
/* The class names (NULL-terminated; empty for a flat folder) and their number. */
const char *const *cohort_latent_files_classes(const CohortLatentFiles *files);
/* Files the listing left out (skip_bad), and why the first was. */
guint cohort_latent_files_skipped(const CohortLatentFiles *files);

/* Reads file i: *content (32 bytes) gets the SHA-256 of its bytes; with `pixels` not NULL, it is
 * also decoded and fitted (Resize + CenterCrop, as data/images.h) to [channels, size, size] in
 * [-1, 1]. Errors name the file (unreadable, not an image, too large). */
gboolean cohort_latent_files_read(const CohortLatentFiles *files, gsize i, guint8 *content,
                                  float *pixels, GError **error);

/* The cache key (COHORT_LATENT_KEY_BYTES) of an image content hash under a VAE (hex SHA-256),
 * at image_size and channels, mirrored or not. */
void cohort_latent_key(const guint8 *content, const char *vae_sha256, int image_size, int channels,
                       gboolean flipped, guint8 *key);

/* [C, H, W] mirrored left to right (torchvision's hflip), out of place. */
void cohort_latent_hflip(const float *in, int C, int H, int W, float *out);

/* What a latent run trains on: every image's latent, and its mirror image's when flips are
 * cached, with labels, class names and the files' paths (which find each example's caption for
 * the text layout). */
typedef struct {
  gsize n;
  int variants; /* 1, or 2: [unflipped, flipped] per example */
  int channels, size;
  float *values; /* [n, variants, channels, size, size] */
  int *labels;   /* [n]; -1 for a flat folder */
  GStrv classes; /* NULL-terminated */
  GStrv paths;   /* [n] below the folder, as cohort_latent_files_path; NULL-terminated */
} CohortLatentTable;

void cohort_latent_table_free(CohortLatentTable *t);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortLatentTable, cohort_latent_table_free)

G_END_DECLS

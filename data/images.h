/* Images as training data (data_format "images"): a folder in torchvision's ImageFolder
 * layout read into fitted, normalised tensors.
 *
 *   folder/<class>/<image>  one subfolder per class, numbered in sorted (byte) order as
 *                           torchvision numbers them; images sorted by name in each class;
 *   folder/<image>          no subfolders: an unconditional set (no classes, label -1).
 * PNG and JPEG are read (data/image-decode.h: libpng and libjpeg-turbo, as Pillow decodes
 * them); each image is brought to `channels` (1: ITU-R 601 luma, 3: RGB), resized so its
 * shorter side is `image_size` and centre-cropped to image_size x image_size, exactly as
 * torchvision's Resize(image_size) + CenterCrop(image_size) do on PIL images
 * (data/image-resize.h), and scaled to [-1, 1] as x / 127.5 - 1 (ToTensor then
 * Normalize(0.5, 0.5)). Layout rules and what is refused: data/image-folder.h.
 *
 * Everything is decoded when the set is opened, so a broken file stops the run before
 * training starts: the error names the file (unreadable, empty, not an image, truncated,
 * corrupt, CMYK, too large). With skip_bad, such files are left out and counted instead.
 *
 * With a cache folder (each rank its own, <workspace>/cache/rank-N), the fitted uint8 pixels
 * are written image by image into one file there (data/image-cache.h) and used where they lie
 * (mapped), so a set larger than memory needs only the disk: reopening an unchanged folder
 * decodes nothing; a changed, added or removed file (by size, mtime, ctime, inode or sampled
 * content hash, the rule of text data) makes the file be rebuilt, decoding only what changed.
 * A damaged cache file is rebuilt, never trusted. Without a cache folder the set is held in
 * memory. Either way its size (images × image_size² × channels) is checked before anything
 * is allocated, against the disk's free space or against half the memory available, and a
 * set that does not fit is refused naming the numbers (COHORT_DATA_ERROR_TOO_LARGE).
 *
 * File and class names are bytes, as the file system has them; where they are shown or
 * written (messages, classes.json, cohort_image_set_class_names) bytes that are not UTF-8
 * appear as \xHH (engine/base/json-write.h). */
#pragma once

#include <glib.h>
#include "data/dataset.h"

G_BEGIN_DECLS

typedef struct CohortImageSet CohortImageSet;

/* Opens `folder` (already resolved) at image_size (1..4096) and channels (1 or 3). With
 * skip_bad, bad image files are left out (cohort_image_set_num_skipped says how many and
 * why); without, the first one is the error. cache_dir NULL means no cache. Layout errors
 * (no images, an empty class folder, a nested folder) fail either way. */
CohortImageSet *cohort_image_set_open(const char *folder, int image_size, int channels,
                                      gboolean skip_bad, const char *cache_dir, GError **error);

typedef struct {
  gboolean skip_bad;
  const char *cache_dir; /* NULL: no cache, the set is held in memory */
  /* Bytes the decoded set may take: in memory without a cache folder, on the cache's disk
   * with one; 0 = what this machine has (cohort_image_memory_budget, _disk_budget). */
  guint64 memory_budget, disk_budget;
} CohortImageSetOptions;

/* cohort_image_set_open with every option. */
CohortImageSet *cohort_image_set_open_with(const char *folder, int image_size, int channels,
                                           const CohortImageSetOptions *options, GError **error);

/* Half the memory available now (MemAvailable, and what this process's RLIMIT_AS and
 * RLIMIT_DATA still allow): what a decoded set held in memory may take. */
guint64 cohort_image_memory_budget(void);
/* The free space of the disk that holds `dir` less a reserve (1 GiB or 5 % of the disk,
 * whichever is larger): what a cache file there may take. */
guint64 cohort_image_disk_budget(const char *dir);
void cohort_image_set_free(CohortImageSet *set);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortImageSet, cohort_image_set_free)

/* Number of images (skipped ones not counted). */
gsize cohort_image_set_len(const CohortImageSet *set);
/* Number of classes; 0 for a flat (unconditional) folder. */
int cohort_image_set_num_classes(const CohortImageSet *set);
/* The class names in index order, NULL-terminated (empty for a flat folder). */
const char *const *cohort_image_set_class_names(const CohortImageSet *set);
int cohort_image_set_image_size(const CohortImageSet *set);
int cohort_image_set_channels(const CohortImageSet *set);

/* Image `index` as floats in [-1, 1], [channels, image_size, image_size] into `pixels`, and
 * its class into *label (may be NULL; -1 for a flat folder). */
void cohort_image_set_get(const CohortImageSet *set, gsize index, float *pixels, int *label);
/* The fitted uint8 pixels of image `index` ([C, H, W], 0..255), without scaling. */
const guint8 *cohort_image_set_get_bytes(const CohortImageSet *set, gsize index);
/* Its class (-1 for a flat folder). */
int cohort_image_set_label(const CohortImageSet *set, gsize index);
/* Its file, relative to the folder ("class/name.png"). */
const char *cohort_image_set_path(const CohortImageSet *set, gsize index);

/* Files left out by skip_bad, and the message for each (naming the file; UTF-8). */
guint cohort_image_set_num_skipped(const CohortImageSet *set);
const char *cohort_image_set_skipped_reason(const CohortImageSet *set, guint i);
/* Images this open decoded (0 when everything came from the cache). */
guint cohort_image_set_num_decoded(const CohortImageSet *set);

/* Writes the class mapping, {"classes": ["name0", "name1", ...]} (index order; [] for a flat
 * folder), to `path` through a temporary file renamed into place: saved with the model so
 * that a label means the same class when it is loaded again. */
gboolean cohort_image_classes_write(const char *const *classes, const char *path, GError **error);
/* Reads such a file back (NULL-terminated, index order). Errors name the file and what is
 * wrong (not JSON, no "classes" array, a non-string or repeated name). */
GStrv cohort_image_classes_read(const char *path, GError **error);

G_END_DECLS

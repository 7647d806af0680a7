/* The listing of an image folder in torchvision's ImageFolder layout (internal to data/).
 *
 *   folder/<class>/<image>   one subfolder per class: classes are numbered in sorted (byte)
 *                            order of the folder names, images in sorted order within each
 *                            class, as torchvision's ImageFolder does;
 *   folder/<image>           no subfolders: one unconditional set (no classes).
 * Images are files named *.png, *.jpg or *.jpeg (any case); names starting with "." are
 * hidden and skipped (unlike torchvision, which takes .ipynb_checkpoints for a class); other
 * files (README, labels.csv) are ignored. Refused, with an error naming the path:
 *   - images at the top level beside class subfolders (which set would they belong to?);
 *   - a folder inside a class folder (torchvision would walk into it; here the layout is one
 *     level, so nothing is read silently from where the user did not expect it);
 *   - a class folder, or a flat folder, without a single image file.
 * Bad entries (an image name on a folder, a dangling link, a GIF/WebP/BMP/TIFF name) are
 * listed as bad with their reason, for the caller to refuse or to skip. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

typedef struct {
  char *rel;   /* path below the folder: "class/name.png", or "name.png" when flat (bytes as
                * the file system has them, UTF-8 or not) */
  int label;   /* class index; -1 when the set has no classes */
  gint64 size; /* bytes */
  gint64 mtime_ns, ctime_ns;
  guint64 device, inode;
  /* The sampled content hash (data/fingerprint.h); "" for a bad entry. With size, mtime and
   * ctime, what tells the image cache that a file is unchanged, as for text data. */
  char fingerprint[65];
  char *bad; /* NULL, or why the entry cannot be an image (naming the full path, UTF-8) */
} CohortImageEntry;

typedef struct {
  GPtrArray *classes; /* of char *, in index order (folder names as bytes); empty when flat */
  GArray *entries;    /* of CohortImageEntry, in dataset order (bad ones included) */
} CohortImageListing;

/* Lists `folder` as described above. Fails (naming the path) when the layout is wrong. */
gboolean cohort_image_listing_scan(const char *folder, CohortImageListing *out, GError **error);
/* Frees what a scan filled in. */
void cohort_image_listing_clear(CohortImageListing *listing);
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC(CohortImageListing, cohort_image_listing_clear)

G_END_DECLS

/* Captions of an image folder, for text-to-image training (internal to data/).
 *
 * Two conventions, the ones the trainers users come from read:
 *   - kohya's: IMAGE.txt beside each image, same stem ("cat/001.png" -> "cat/001.txt");
 *   - Hugging Face ImageFolder's: one `metadata.jsonl` at the folder's root, one JSON object a
 *     line with "file_name" (the image's path below the folder, "/" separated, as the listing
 *     has it: "001.png" or "cat/001.png") and "text" (its caption); other keys are ignored.
 * When both exist, metadata.jsonl wins (it is the more deliberate of the two: one file someone
 * wrote for the whole set) and the .txt files beside images are counted as ignored and named in
 * the summary, so nobody wonders why editing one changes nothing.
 *
 * A caption is its file's (or "text"'s) UTF-8 with every run of white space, line breaks
 * included, made one space and the ends trimmed (kohya keeps only a .txt's first line; here a
 * caption wrapped over lines is kept whole). Per image, and never fatal (the image trains with
 * the empty caption, as kohya does with a warning): a missing caption, one over
 * COHORT_CAPTION_MAX_BYTES (never read whole: a 10 MB caption file costs one stat), one that is
 * not UTF-8, one with control characters other than tab and line breaks (binary content), a
 * caption file that is not a regular file or cannot be read. Each kind is counted and its first
 * few image names are kept for the summary. Fatal, with an error naming the file, the line and
 * what is allowed: a metadata.jsonl line that is not a JSON object with a "file_name" string and
 * a "text" string, a line over COHORT_CAPTION_MAX_LINE bytes, two lines naming the same image,
 * a metadata.jsonl that is not a regular file, and a folder where no image has a caption at all
 * (then the images are surely not captioned the way this reader expects). metadata.jsonl lines
 * naming an image the listing does not have are counted and named (a file deleted since). */
#pragma once

#include <glib.h>

#include "data/image-folder.h"

G_BEGIN_DECLS

/* The longest caption (bytes of the file or of "text"); CLIP reads 77 tokens and T5 512, so
 * 64 KiB is far past any caption and short of a file that is something else. */
#define COHORT_CAPTION_MAX_BYTES (64 * 1024)
/* The longest metadata.jsonl line. */
#define COHORT_CAPTION_MAX_LINE (256 * 1024)
/* Image names kept per kind of problem, for the summary. */
#define COHORT_CAPTION_NAMES 3

typedef enum {
  COHORT_CAPTIONS_TXT,   /* IMAGE.txt beside each image */
  COHORT_CAPTIONS_JSONL, /* metadata.jsonl */
} CohortCaptionSource;

/* Kinds of per-image problems, each counted (see above). */
typedef enum {
  COHORT_CAPTION_MISSING,     /* no .txt, or no metadata.jsonl line for the image */
  COHORT_CAPTION_UNREADABLE,  /* not a regular file, or reading failed */
  COHORT_CAPTION_TOO_LONG,    /* over COHORT_CAPTION_MAX_BYTES */
  COHORT_CAPTION_NOT_UTF8,    /* bytes that are not UTF-8 */
  COHORT_CAPTION_BINARY,      /* NUL or other control characters */
  COHORT_CAPTION_EMPTY,       /* present but empty after trimming (kept: the empty caption) */
  COHORT_CAPTION_IGNORED_TXT, /* a .txt beside an image while metadata.jsonl wins */
  COHORT_CAPTION_UNKNOWN,     /* a metadata.jsonl line naming an image that is not there */
  COHORT_CAPTION_KINDS
} CohortCaptionProblem;

typedef struct {
  CohortCaptionSource source;
  /* One per listing entry, in entry order: the caption, "" for an empty one, NULL where the
   * image has none (a problem above, or a bad entry of the listing). */
  GPtrArray *captions;
  guint captioned; /* entries with a caption (empty ones included) */
  guint count[COHORT_CAPTION_KINDS];
  GPtrArray *names[COHORT_CAPTION_KINDS]; /* the first COHORT_CAPTION_NAMES of each, UTF-8 */
} CohortCaptions;

/* Reads the captions of the images of `listing`, which `folder` was scanned into, by the rules
 * above. Fails (naming the file, the line and what is allowed) only where the rules say. */
gboolean cohort_captions_read(const char *folder, const CohortImageListing *listing,
                              CohortCaptions *out, GError **error);
/* Frees what a read filled in. */
void cohort_captions_clear(CohortCaptions *captions);
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC(CohortCaptions, cohort_captions_clear)

/* One line for the log: where the captions came from, how many images have one, and each kind
 * of problem with its count and first names, e.g. "captions from .txt files: 98 of 100 images;
 * 2 missing (a.png, b.png)". */
char *cohort_captions_summary(const CohortCaptions *captions);

/* The caption example `index` trains on in `epoch` (a new string):
 *   - the empty caption "" with probability `dropout` (classifier-free guidance's unconditional
 *     example; the prefix goes too), drawn from the example's own stream (data/example-rng.h:
 *     seed, epoch, index, COHORT_RNG_STREAM_CAPTION_DROP), so N ranks draw what one process
 *     draws whoever reads which example;
 *   - else `prefix` (a trigger word; NULL or "" for none) and the caption joined by ", " (the
 *     separator of kohya's tag captions), the prefix alone when the caption is empty or missing.
 * `index` must be below the number of listing entries. */
char *cohort_caption_for_example(const CohortCaptions *captions, guint index, const char *prefix,
                                 double dropout, guint64 seed, guint64 epoch);

G_END_DECLS

/* The one rule for what a program writes, for every program (cohort-train's export and
 * --sample, cohort-vae, cohort-tokenize): an output is refused, before anything is written,
 *  - when it is one of the program's inputs: the same file (device and inode, so a hard or
 *    symbolic link to an input counts, and so does another spelling of the name on a
 *    case-insensitive filesystem) or the same path once links, "." and ".." are resolved;
 *  - when it is another of its outputs: the same resolved path, compared without regard to
 *    letter case, since names that differ only in case ("a.png", "a.PNG") are one file on
 *    case-insensitive filesystems (macOS's and Windows' defaults, FAT and exFAT drives), and
 *    a folder written here is often copied there;
 *  - when it exists and is not a regular file (a folder, a device such as /dev/null, a FIFO, a
 *    socket): outputs are written to a temporary name and renamed into place
 *    (engine/base/fileio.h), which would replace such a node, not write into it.
 * Errors are one line naming the output (with what it is, e.g. "-o"), the input or output it
 * collides with, and what is allowed. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

typedef struct CohortOutputs CohortOutputs;

CohortOutputs *cohort_outputs_new(void);
void cohort_outputs_free(CohortOutputs *o);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortOutputs, cohort_outputs_free)

/* `path` is read by the program (a file that does not exist is remembered by its path). */
void cohort_outputs_add_input(CohortOutputs *o, const char *path);

/* `path` will be written; `what` says what it is in messages ("-o", "the PNG of tensor
 * \"a.PNG\""). FALSE with a G_FILE_ERROR when the rule above refuses it (the output is then
 * not recorded). */
gboolean cohort_outputs_add(CohortOutputs *o, const char *path, const char *what, GError **error);

/* `path` with symbolic links, "." and ".." resolved as far as the path exists (the rest kept as
 * written), absolute. g_free it. */
char *cohort_path_resolve(const char *path);

G_END_DECLS

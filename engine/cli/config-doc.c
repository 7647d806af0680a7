/* cohort-config-doc [OUTPUT]: writes docs/config.md (to stdout without OUTPUT). Built, not
 * installed; test-config-doc fails when the committed file differs. */
#include "engine/config/config-doc.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
  if (argc > 2) {
    fprintf(stderr, "usage: %s [OUTPUT]\n", argv[0]);
    return 2;
  }
  g_autofree char *text = cohort_config_doc_markdown();
  if (argc == 1) {
    fputs(text, stdout);
    return fflush(stdout) == 0 ? 0 : 1;
  }
  g_autoptr(GError) error = NULL;
  if (!g_file_set_contents(argv[1], text, (gssize)strlen(text), &error)) {
    fprintf(stderr, "%s: %s\n", argv[0], error->message);
    return 1;
  }
  return 0;
}

/* Captions of image folders (data/captions.h): kohya's IMAGE.txt and Hugging Face's
 * metadata.jsonl, which wins when both exist; white space; the prefix and its separator;
 * caption dropout's rate over many examples and its independence from how the examples are
 * split over ranks; and hostile input: a 10 MB caption file, binary and non-UTF-8 captions,
 * a FIFO, /dev/zero, a metadata.jsonl line that is not JSON or names no image here, an endless
 * line. */
#include <glib.h>
#include <glib/gstdio.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/captions.h"
#include "data/dataset.h"

static char *tmp_folder(void)
{
  g_autoptr(GError) error = NULL;
  char *dir = g_dir_make_tmp("cohort-test-captions-XXXXXX", &error);
  g_assert_no_error(error);
  return dir;
}

static void put(const char *dir, const char *rel, const char *data, gssize len)
{
  g_autofree char *path = g_build_filename(dir, rel, NULL);
  g_autofree char *parent = g_path_get_dirname(path);
  g_assert_cmpint(g_mkdir_with_parents(parent, 0755), ==, 0);
  g_autoptr(GError) error = NULL;
  g_assert_true(g_file_set_contents(path, data, len, &error));
}

/* The listing content does not matter to captions: a few bytes stand for each image. */
static void put_image(const char *dir, const char *rel)
{
  put(dir, rel, "not decoded here", -1);
}

static void rm_tree(const char *path)
{
  g_autofree char *cmd = g_strdup_printf("rm -rf '%s'", path);
  g_assert_cmpint(system(cmd), ==, 0);
}

/* Scans and reads `dir`; NULL-free on success, else the error (listing and captions cleared). */
static gboolean read_captions(const char *dir, CohortImageListing *listing, CohortCaptions *c,
                              GError **error)
{
  g_autoptr(GError) scan_error = NULL;
  cohort_image_listing_scan(dir, listing, &scan_error);
  g_assert_no_error(scan_error);
  return cohort_captions_read(dir, listing, c, error);
}

static const char *caption_of(const CohortCaptions *c, const CohortImageListing *l, const char *rel)
{
  for (guint i = 0; i < l->entries->len; i++)
    if (strcmp(g_array_index(l->entries, CohortImageEntry, i).rel, rel) == 0)
      return c->captions->pdata[i];
  g_error("no image %s", rel);
}

static void test_txt(void)
{
  g_autofree char *dir = tmp_folder();
  put_image(dir, "red/a.png");
  put_image(dir, "red/b.jpg");
  put_image(dir, "blue/c.PNG");
  put_image(dir, "blue/d.png");
  put_image(dir, "blue/e.png");
  put(dir, "red/a.txt", "  a red\n\tcircle \r\n", -1); /* white space collapsed, trimmed */
  put(dir, "red/b.txt", "a red square", -1);
  put(dir, "blue/c.txt", "une étoile bleue", -1); /* UTF-8 beyond ASCII is kept */
  put(dir, "blue/d.txt", " \n ", -1);             /* empty: kept as the empty caption */
  /* e.png has none */
  g_auto(CohortImageListing) l = {0};
  g_auto(CohortCaptions) c = {0};
  g_autoptr(GError) error = NULL;
  g_assert_true(read_captions(dir, &l, &c, &error));
  g_assert_no_error(error);
  g_assert_cmpint(c.source, ==, COHORT_CAPTIONS_TXT);
  g_assert_cmpstr(caption_of(&c, &l, "red/a.png"), ==, "a red circle");
  g_assert_cmpstr(caption_of(&c, &l, "red/b.jpg"), ==, "a red square");
  g_assert_cmpstr(caption_of(&c, &l, "blue/c.PNG"), ==, "une étoile bleue");
  g_assert_cmpstr(caption_of(&c, &l, "blue/d.png"), ==, "");
  g_assert_null(caption_of(&c, &l, "blue/e.png"));
  g_assert_cmpuint(c.captioned, ==, 4);
  g_assert_cmpuint(c.count[COHORT_CAPTION_MISSING], ==, 1);
  g_assert_cmpuint(c.count[COHORT_CAPTION_EMPTY], ==, 1);
  g_autofree char *summary = cohort_captions_summary(&c);
  g_assert_cmpstr(summary, ==,
                  "captions from .txt files: 4 of 5 images; 1 missing (blue/e.png); 1 empty "
                  "(blue/d.png)");
  rm_tree(dir);
}

/* metadata.jsonl: captions by file_name, other keys ignored, blank lines skipped; it wins over
 * the .txt files, which are counted as ignored; a line naming no image here is counted. */
static void test_jsonl(void)
{
  g_autofree char *dir = tmp_folder();
  put_image(dir, "a.png");
  put_image(dir, "b.png");
  put_image(dir, "c.png");
  put(dir, "a.txt", "the txt caption", -1);
  put(dir, "metadata.jsonl",
      "{\"file_name\": \"a.png\", \"text\": \"the  jsonl\\ncaption\", \"score\": 7}\n"
      "\n"
      "{\"text\": \"b's\", \"file_name\": \"b.png\"}\r\n"
      "{\"file_name\": \"gone.png\", \"text\": \"deleted since\"}",
      -1);
  g_auto(CohortImageListing) l = {0};
  g_auto(CohortCaptions) c = {0};
  g_autoptr(GError) error = NULL;
  g_assert_true(read_captions(dir, &l, &c, &error));
  g_assert_cmpint(c.source, ==, COHORT_CAPTIONS_JSONL);
  g_assert_cmpstr(caption_of(&c, &l, "a.png"), ==, "the jsonl caption");
  g_assert_cmpstr(caption_of(&c, &l, "b.png"), ==, "b's");
  g_assert_null(caption_of(&c, &l, "c.png"));
  g_autofree char *summary = cohort_captions_summary(&c);
  g_assert_cmpstr(summary, ==,
                  "captions from metadata.jsonl: 2 of 3 images; 1 missing (c.png); 1 .txt "
                  "ignored (metadata.jsonl wins) (a.png); 1 metadata.jsonl lines naming no "
                  "image here (gone.png)");
  rm_tree(dir);
}

/* Lines that are not what a metadata.jsonl holds: each a clear error naming the line. */
static void test_jsonl_bad_lines(void)
{
  static const struct {
    const char *line, *says;
  } bad[] = {
      {"{\"file_name\": \"a.png\", \"text\": \"x\"", "not valid JSON"},
      {"[\"a.png\", \"x\"]", "no \"file_name\" string"},
      {"{\"file_name\": 3, \"text\": \"x\"}", "no \"file_name\" string"},
      {"{\"file_name\": \"a.png\"}", "no \"text\" string"},
      {"{\"file_name\": \"a.png\", \"text\": null}", "no \"text\" string"},
      {"{\"file_name\": \"a.png\", \"text\": \"x\", \"text\": \"y\"}", "more than once"},
      {"{\"file_name\": \"a.png\", \"text\": \"\xff\"}", "not valid JSON"},
      {"{\"file_name\": \"a.png\", \"text\": \"x\"}\n{\"file_name\": \"a.png\", \"text\": \"y\"}",
       "captioned again (first on line 2)"},
  };
  for (guint i = 0; i < G_N_ELEMENTS(bad); i++) {
    g_autofree char *dir = tmp_folder();
    put_image(dir, "a.png");
    g_autofree char *text =
        g_strdup_printf("{\"file_name\": \"a.png\", \"text\": \"ok\"}\n%s\n", bad[i].line);
    if (i == G_N_ELEMENTS(bad) - 1) /* the duplicate case: its first line is line 2 */
      text = (g_free(text), g_strdup_printf("\n%s\n", bad[i].line));
    put(dir, "metadata.jsonl", text, -1);
    g_auto(CohortImageListing) l = {0};
    g_auto(CohortCaptions) c = {0};
    g_autoptr(GError) error = NULL;
    g_assert_false(read_captions(dir, &l, &c, &error));
    g_assert_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_FORMAT);
    g_autofree char *where =
        g_strdup_printf("metadata.jsonl:%u: ", i == G_N_ELEMENTS(bad) - 1 ? 3u : 2u);
    if (!strstr(error->message, where) || !strstr(error->message, bad[i].says) ||
        !strstr(error->message, "allowed: one JSON object a line"))
      g_error("line %u: %s", i, error->message);
    g_assert_null(c.captions);
    rm_tree(dir);
  }
}

/* A 10 MB caption file, binary, not UTF-8, a FIFO, /dev/zero: each counted and named, never
 * read whole; the other images keep their captions. A 10 MB metadata.jsonl line: an error. */
static void test_hostile(void)
{
  g_autofree char *dir = tmp_folder();
  const char *names[] = {"big.png", "bin.png", "latin1.png", "fifo.png",
                         "dev.png", "ok.png",  "nul.png",    "long.png"};
  for (guint i = 0; i < G_N_ELEMENTS(names); i++)
    put_image(dir, names[i]);
  size_t big = 10 * 1024 * 1024;
  g_autofree char *huge = g_malloc(big);
  memset(huge, 'a', big);
  put(dir, "big.txt", huge, (gssize)big);
  put(dir, "bin.txt",
      "\x7f"
      "ELF\x02\x01\x01",
      7);
  put(dir, "latin1.txt", "caf\xe9", -1);
  put(dir, "nul.txt", "a\0b", 3);
  /* exactly the limit is allowed; one byte more is not */
  memset(huge, 'b', COHORT_CAPTION_MAX_BYTES + 1);
  put(dir, "long.txt", huge, COHORT_CAPTION_MAX_BYTES + 1);
  put(dir, "ok.txt", huge, COHORT_CAPTION_MAX_BYTES);
  g_autofree char *fifo = g_build_filename(dir, "fifo.txt", NULL);
  g_assert_cmpint(mkfifo(fifo, 0644), ==, 0);
  /* endless: a link to /dev/zero */
  g_autofree char *zero = g_build_filename(dir, "dev.txt", NULL);
  g_assert_cmpint(symlink("/dev/zero", zero), ==, 0);

  g_auto(CohortImageListing) l = {0};
  g_auto(CohortCaptions) c = {0};
  g_autoptr(GError) error = NULL;
  g_assert_true(read_captions(dir, &l, &c, &error));
  g_assert_cmpuint(c.captioned, ==, 1);
  g_assert_cmpuint(strlen(caption_of(&c, &l, "ok.png")), ==, COHORT_CAPTION_MAX_BYTES);
  g_assert_cmpuint(c.count[COHORT_CAPTION_TOO_LONG], ==, 2);
  g_assert_cmpuint(c.count[COHORT_CAPTION_BINARY], ==, 2);
  g_assert_cmpuint(c.count[COHORT_CAPTION_NOT_UTF8], ==, 1);
  g_assert_cmpuint(c.count[COHORT_CAPTION_UNREADABLE], ==, 2);
  g_autofree char *summary = cohort_captions_summary(&c);
  g_assert_cmpstr(summary, ==,
                  "captions from .txt files: 1 of 8 images; 2 unreadable (dev.png, fifo.png); 2 "
                  "over 64 KiB (big.png, long.png); 1 not UTF-8 (latin1.png); 2 binary (control "
                  "characters) (bin.png, nul.png)");

  /* the same 10 MB as one metadata.jsonl line */
  g_auto(CohortImageListing) l2 = {0};
  g_auto(CohortCaptions) c2 = {0};
  memset(huge, 'a', big);
  const char *head = "{\"file_name\": \"ok.png\", \"text\": \"";
  memcpy(huge, head, strlen(head));
  put(dir, "metadata.jsonl", huge, (gssize)big);
  g_assert_false(read_captions(dir, &l2, &c2, &error));
  g_assert_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_FORMAT);
  g_assert_nonnull(strstr(error->message, "metadata.jsonl:1: a line over 262144 bytes"));

  /* metadata.jsonl as a FIFO: refused at once, not waited on */
  g_auto(CohortImageListing) l3 = {0};
  g_auto(CohortCaptions) c3 = {0};
  g_clear_error(&error);
  g_autofree char *jsonl = g_build_filename(dir, "metadata.jsonl", NULL);
  g_assert_cmpint(g_unlink(jsonl), ==, 0);
  g_assert_cmpint(mkfifo(jsonl, 0644), ==, 0);
  g_assert_false(read_captions(dir, &l3, &c3, &error));
  g_assert_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_IO);
  g_assert_nonnull(strstr(error->message, "metadata.jsonl: cannot read captions: not a regular "
                                          "file; allowed: a regular file of JSON lines"));
  rm_tree(dir);
}

/* A folder whose images have no caption at all is refused, saying what is allowed. */
static void test_none(void)
{
  g_autofree char *dir = tmp_folder();
  put_image(dir, "a.png");
  put_image(dir, "b.png");
  put(dir, "a.caption", "kohya's other extension is not read", -1);
  g_auto(CohortImageListing) l = {0};
  g_auto(CohortCaptions) c = {0};
  g_autoptr(GError) error = NULL;
  g_assert_false(read_captions(dir, &l, &c, &error));
  g_assert_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_FORMAT);
  g_assert_nonnull(strstr(error->message, "no image has a caption (captions from .txt files: 0 "
                                          "of 2 images; 2 missing (a.png, b.png))"));
  g_assert_nonnull(strstr(error->message, "allowed: IMAGE.txt beside each image"));
  rm_tree(dir);
}

/* The prefix joins with ", "; alone when the caption is empty or missing. */
static void test_prefix(void)
{
  g_autofree char *dir = tmp_folder();
  put_image(dir, "a.png");
  put_image(dir, "b.png");
  put_image(dir, "c.png");
  put(dir, "a.txt", "a dog", -1);
  put(dir, "b.txt", "", 0);
  g_auto(CohortImageListing) l = {0};
  g_auto(CohortCaptions) c = {0};
  g_autoptr(GError) error = NULL;
  g_assert_true(read_captions(dir, &l, &c, &error));
  const char *want[][2] = {{"sks, a dog", "a dog"}, {"sks", ""}, {"sks", ""}};
  for (guint i = 0; i < 3; i++) {
    g_autofree char *with = cohort_caption_for_example(&c, i, "sks", 0.0, 1, 0);
    g_autofree char *without = cohort_caption_for_example(&c, i, NULL, 0.0, 1, 0);
    g_assert_cmpstr(with, ==, want[i][0]);
    g_assert_cmpstr(without, ==, want[i][1]);
  }
  rm_tree(dir);
}

/* Dropout: over 20000 example draws the rate is p within 4 standard deviations; the draws of
 * two ranks, each taking every other example (DistributedSampler's split), are one process's;
 * another epoch or seed draws differently. */
static void test_dropout(void)
{
  g_autofree char *dir = tmp_folder();
  enum { IMAGES = 400, EPOCHS = 50 };
  for (int i = 0; i < IMAGES; i++) {
    g_autofree char *img = g_strdup_printf("%03d.png", i);
    g_autofree char *txt = g_strdup_printf("%03d.txt", i);
    put_image(dir, img);
    put(dir, txt, "a caption", -1);
  }
  g_auto(CohortImageListing) l = {0};
  g_auto(CohortCaptions) c = {0};
  g_autoptr(GError) error = NULL;
  g_assert_true(read_captions(dir, &l, &c, &error));
  const double p = 0.1;
  int dropped = 0, differs_epoch = 0, differs_seed = 0;
  guint8 one[IMAGES], ranks[IMAGES];
  for (int e = 0; e < EPOCHS; e++) {
    for (int i = 0; i < IMAGES; i++) {
      g_autofree char *s = cohort_caption_for_example(&c, i, "sks", p, 42, e);
      one[i] = *s == 0;
      dropped += one[i];
      g_autofree char *other_seed = cohort_caption_for_example(&c, i, "sks", p, 43, e);
      differs_seed += (*other_seed == 0) != one[i];
    }
    for (int r = 0; r < 2; r++) /* rank r's share, read in its own order */
      for (int i = IMAGES - 2 + r; i >= 0; i -= 2) {
        g_autofree char *s = cohort_caption_for_example(&c, i, "sks", p, 42, e);
        ranks[i] = *s == 0;
      }
    g_assert_cmpmem(one, sizeof one, ranks, sizeof ranks);
    if (e > 0)
      for (int i = 0; i < IMAGES; i++) {
        g_autofree char *s = cohort_caption_for_example(&c, i, "sks", p, 42, e - 1);
        differs_epoch += (*s == 0) != one[i];
      }
  }
  double n = (double)IMAGES * EPOCHS, sd = sqrt(n * p * (1 - p));
  g_test_message("dropped %d of %.0f (expected %.0f +- %.0f)", dropped, n, n * p, sd);
  g_assert_cmpfloat(fabs(dropped - n * p), <, 4 * sd);
  /* independent draws differ with probability 2p(1-p) = 0.18 */
  g_assert_cmpint(differs_epoch, >, 0.1 * IMAGES * (EPOCHS - 1));
  g_assert_cmpint(differs_seed, >, 0.1 * n);
  /* p = 0 never drops, p = 1 always */
  for (int i = 0; i < IMAGES; i++) {
    g_autofree char *never = cohort_caption_for_example(&c, i, NULL, 0.0, 42, 0);
    g_autofree char *always = cohort_caption_for_example(&c, i, "sks", 1.0, 42, 0);
    g_assert_cmpstr(never, ==, "a caption");
    g_assert_cmpstr(always, ==, "");
  }
  rm_tree(dir);
}

/* Seeded mutations of a good metadata.jsonl and of .txt captions (bytes flipped, JSON's
 * punctuation, line breaks and NULs inserted, cut short): every read either succeeds with a
 * caption or NULL per image, or fails with one error naming metadata.jsonl and its line and
 * what is allowed; nothing crashes. */
static void test_fuzz(void)
{
  static const char good[] =
      "{\"file_name\": \"a.png\", \"text\": \"a red \\u00e9toile\"}\n"
      "{\"file_name\": \"b.png\", \"text\": \"two\\nlines\", \"n\": [1, {}]}\n";
  static const char punct[] = "{}[]\",:\\\n\r\t \0\x7f\xc3\xff";
  g_autoptr(GRand) rng = g_rand_new_with_seed(20261129);
  g_autofree char *dir = tmp_folder();
  put_image(dir, "a.png");
  put_image(dir, "b.png");
  int ok = 0, refused = 0;
  for (int it = 0; it < 400; it++) {
    gsize len = sizeof good - 1;
    g_autofree char *text = g_malloc(len + 16);
    memcpy(text, good, len);
    for (int m = g_rand_int_range(rng, 1, 4); m > 0; m--) {
      if (len == 0)
        break;
      gsize at = (gsize)g_rand_int_range(rng, 0, (gint32)len);
      switch (g_rand_int_range(rng, 0, 4)) {
      case 0: /* flip a byte */
        text[at] ^= (char)(1 << g_rand_int_range(rng, 0, 8));
        break;
      case 1: /* punctuation over a byte */
        text[at] = punct[g_rand_int_range(rng, 0, sizeof punct - 1)];
        break;
      case 2: /* cut short */
        len = at;
        break;
      default: /* a byte inserted */
        memmove(text + at + 1, text + at, len - at);
        text[at] = punct[g_rand_int_range(rng, 0, sizeof punct - 1)];
        len++;
      }
    }
    const char *target = it % 2 ? "metadata.jsonl" : "a.txt";
    put(dir, target, text, (gssize)len);
    g_auto(CohortImageListing) l = {0};
    g_auto(CohortCaptions) c = {0};
    g_autoptr(GError) error = NULL;
    if (read_captions(dir, &l, &c, &error)) {
      ok++;
      g_assert_cmpuint(c.captions->len, ==, 2);
      for (guint i = 0; i < 2; i++) {
        const char *cap = c.captions->pdata[i];
        g_assert_true(!cap || g_utf8_validate(cap, -1, NULL));
      }
    } else {
      refused++;
      if (!strstr(error->message, "allowed:"))
        g_error("iteration %d: %s", it, error->message);
    }
    g_autofree char *path = g_build_filename(dir, target, NULL);
    g_unlink(path);
  }
  g_test_message("fuzz: %d reads succeeded, %d refused", ok, refused);
  g_assert_cmpint(refused, >, 0);
  rm_tree(dir);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/captions/txt", test_txt);
  g_test_add_func("/captions/jsonl", test_jsonl);
  g_test_add_func("/captions/jsonl-bad-lines", test_jsonl_bad_lines);
  g_test_add_func("/captions/hostile", test_hostile);
  g_test_add_func("/captions/none", test_none);
  g_test_add_func("/captions/prefix", test_prefix);
  g_test_add_func("/captions/dropout", test_dropout);
  g_test_add_func("/captions/fuzz", test_fuzz);
  return g_test_run();
}

/* make-glyphs: renders the built-in glyph data set (see README.md beside this file).
 *
 *   make-glyphs [--train N] [--val N] [--seed S] OUTPUT FONT.ttf...
 *
 * writes OUTPUT/train/<class>/NNNN.png and OUTPUT/val/<class>/NNNN.png: the digits 0-9 and
 * the capitals A-Z (36 classes), 32x32 grey, a white glyph on black, each drawn from one of
 * the given fonts (in turn) with a random rotation, scale and shift. The randomness of image
 * i of class c in a split is a function of (seed, split, c, i) only, and PNG files carry no
 * time stamp, so the same fonts, FreeType, libpng and zlib give the same bytes every run.
 * The folder is built under a temporary name and renamed into place, so a stopped run never
 * leaves half a data set under OUTPUT. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <glib.h>
#include <glib/gstdio.h>
#include <ft2build.h>
#include FT_FREETYPE_H
#include FT_OUTLINE_H
#include FT_BBOX_H

#include "data/image-decode.h"
#include "data/example-rng.h"

#define SIDE         32
#define BOX_HEIGHT   20.0 /* pixels a glyph spans at scale 1, at most... */
#define BOX_WIDTH    22.0 /* ...and this wide */
#define MAX_ROTATE   10.0 /* degrees either way */
#define MIN_SCALE    0.85
#define MAX_SCALE    1.10
#define MAX_SHIFT    2.0 /* pixels either way, in x and in y */
#define OUTLINE_PPEM 256 /* outlines are loaded at this size, then scaled exactly */

static const char classes[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ";

typedef struct {
  FT_Library lib;
  FT_Face *faces;
  int n_faces;
  guint64 seed;
} Renderer;

/* Renders character `ch` of face `face` with the jitter of `rng` into a SIDE x SIDE grey
 * image (top row first). */
static gboolean render(Renderer *r, FT_Face face, char ch, CohortExampleRng *rng, guint8 *out,
                       GError **error)
{
  FT_Error fe = FT_Load_Char(face, (FT_ULong)ch, FT_LOAD_NO_HINTING | FT_LOAD_NO_BITMAP);
  if (fe || face->glyph->format != FT_GLYPH_FORMAT_OUTLINE) {
    g_set_error(error, G_FILE_ERROR, G_FILE_ERROR_FAILED, "%s %s: no outline for '%c'",
                face->family_name, face->style_name, ch);
    return FALSE;
  }
  FT_Outline *outline = &face->glyph->outline;
  FT_BBox box;
  FT_Outline_Get_BBox(outline, &box);
  double w = (box.xMax - box.xMin) / 64.0, h = (box.yMax - box.yMin) / 64.0;
  double fit = MIN(BOX_HEIGHT / h, BOX_WIDTH / w);

  double angle = (cohort_example_rng_uniform(rng) * 2.0 - 1.0) * MAX_ROTATE * G_PI / 180.0;
  double scale = fit * (MIN_SCALE + cohort_example_rng_uniform(rng) * (MAX_SCALE - MIN_SCALE));
  double dx = (cohort_example_rng_uniform(rng) * 2.0 - 1.0) * MAX_SHIFT;
  double dy = (cohort_example_rng_uniform(rng) * 2.0 - 1.0) * MAX_SHIFT;

  /* Centre of the box to the origin, rotate and scale, then to the image centre + shift.
   * Outline coordinates are 26.6 pixels, y up; the matrix is 16.16. */
  FT_Outline_Translate(outline, -(box.xMin + box.xMax) / 2, -(box.yMin + box.yMax) / 2);
  FT_Matrix m = {
      .xx = (FT_Fixed)lround(cos(angle) * scale * 65536.0),
      .xy = (FT_Fixed)lround(-sin(angle) * scale * 65536.0),
      .yx = (FT_Fixed)lround(sin(angle) * scale * 65536.0),
      .yy = (FT_Fixed)lround(cos(angle) * scale * 65536.0),
  };
  FT_Outline_Transform(outline, &m);
  FT_Outline_Translate(outline, (FT_Pos)lround((SIDE / 2.0 + dx) * 64.0),
                       (FT_Pos)lround((SIDE / 2.0 + dy) * 64.0));

  memset(out, 0, SIDE * SIDE);
  FT_Bitmap bitmap = {
      .rows = SIDE,
      .width = SIDE,
      .pitch = SIDE, /* positive: first row is the top; outline y = 0 is the bottom edge */
      .buffer = out,
      .num_grays = 256,
      .pixel_mode = FT_PIXEL_MODE_GRAY,
  };
  fe = FT_Outline_Get_Bitmap(r->lib, outline, &bitmap);
  if (fe) {
    g_set_error(error, G_FILE_ERROR, G_FILE_ERROR_FAILED, "FreeType cannot render '%c' (%d)", ch,
                fe);
    return FALSE;
  }
  return TRUE;
}

/* One split: `per_class` images of every class under dir/<class>/NNNN.png. */
static gboolean write_split(Renderer *r, const char *dir, guint64 split, int per_class,
                            GError **error)
{
  guint8 pixels[SIDE * SIDE];
  for (int c = 0; classes[c]; c++) {
    char name[2] = {classes[c], 0};
    g_autofree char *class_dir = g_build_filename(dir, name, NULL);
    if (g_mkdir_with_parents(class_dir, 0755) != 0) {
      int err = errno;
      g_set_error(error, G_FILE_ERROR, g_file_error_from_errno(err), "%s: cannot create: %s",
                  class_dir, g_strerror(err));
      return FALSE;
    }
    for (int i = 0; i < per_class; i++) {
      CohortExampleRng rng;
      cohort_example_rng_init(&rng, r->seed, split, (guint64)c, (guint64)i);
      /* Fonts in turn, offset by class so that every font draws every class. */
      FT_Face face = r->faces[(i + c) % r->n_faces];
      if (!render(r, face, classes[c], &rng, pixels, error))
        return FALSE;
      g_autofree char *file = g_strdup_printf("%s/%04d.png", class_dir, i);
      g_autoptr(GBytes) png = cohort_image_encode_png(pixels, SIDE, SIDE, 1, error);
      /* Plain writes, no fsync: like every build output this can be made again, and a stop
       * (not a power cut) never leaves half a set thanks to the rename at the end. */
      if (!png || !g_file_set_contents_full(file, g_bytes_get_data(png, NULL),
                                            (gssize)g_bytes_get_size(png), G_FILE_SET_CONTENTS_NONE,
                                            0644, error))
        return FALSE;
    }
  }
  return TRUE;
}

/* Removes a folder tree of plain files (what this program writes). */
static void remove_tree(const char *path)
{
  g_autoptr(GDir) d = g_dir_open(path, 0, NULL);
  const char *name;
  while (d && (name = g_dir_read_name(d))) {
    g_autofree char *child = g_build_filename(path, name, NULL);
    if (g_file_test(child, G_FILE_TEST_IS_DIR) && !g_file_test(child, G_FILE_TEST_IS_SYMLINK))
      remove_tree(child);
    else
      g_unlink(child);
  }
  g_rmdir(path);
}

/* Replaces `output` with the finished `tmp`: the old tree moves aside first, so `output`
 * is at every moment either the old set or the new one. */
static gboolean swap_into_place(const char *tmp, const char *output, GError **error)
{
  g_autofree char *old = NULL;
  if (g_file_test(output, G_FILE_TEST_EXISTS)) {
    old = g_strdup_printf("%s.old-%d", output, (int)getpid());
    if (g_rename(output, old) != 0) {
      int err = errno;
      g_set_error(error, G_FILE_ERROR, g_file_error_from_errno(err), "%s: cannot replace: %s",
                  output, g_strerror(err));
      return FALSE;
    }
  }
  if (g_rename(tmp, output) != 0) {
    int err = errno;
    g_set_error(error, G_FILE_ERROR, g_file_error_from_errno(err), "%s: cannot create: %s", output,
                g_strerror(err));
    return FALSE;
  }
  if (old)
    remove_tree(old);
  return TRUE;
}

static gboolean open_fonts(Renderer *r, char **paths, int n, GError **error)
{
  if (FT_Init_FreeType(&r->lib)) {
    g_set_error(error, G_FILE_ERROR, G_FILE_ERROR_FAILED, "cannot start FreeType");
    return FALSE;
  }
  r->faces = g_new0(FT_Face, n);
  for (int i = 0; i < n; i++, r->n_faces++) {
    if (FT_New_Face(r->lib, paths[i], 0, &r->faces[i]) ||
        FT_Set_Pixel_Sizes(r->faces[i], 0, OUTLINE_PPEM)) {
      g_set_error(error, G_FILE_ERROR, G_FILE_ERROR_NOENT,
                  "%s: cannot open the font (is fonts-dejavu-core / fonts-liberation2 "
                  "installed? scripts/install-deps installs them)",
                  paths[i]);
      return FALSE;
    }
  }
  return TRUE;
}

int main(int argc, char **argv)
{
  int n_train = 100, n_val = 20;
  gint64 seed = 20240601;
  GOptionEntry options[] = {
      {"train", 0, 0, G_OPTION_ARG_INT, &n_train, "Images per class in train/", "N"},
      {"val", 0, 0, G_OPTION_ARG_INT, &n_val, "Images per class in val/", "N"},
      {"seed", 0, 0, G_OPTION_ARG_INT64, &seed, "Seed of the random jitter", "S"},
      {NULL},
  };
  g_autoptr(GError) error = NULL;
  g_autoptr(GOptionContext) ctx = g_option_context_new("OUTPUT FONT.ttf... - render glyphs");
  g_option_context_add_main_entries(ctx, options, NULL);
  if (!g_option_context_parse(ctx, &argc, &argv, &error) || argc < 3 || n_train < 1 || n_val < 1 ||
      n_train > 9999 || n_val > 9999) {
    fprintf(stderr, "make-glyphs: %s\n",
            error ? error->message
                  : "usage: make-glyphs [--train N] [--val N] [--seed S] OUTPUT FONT.ttf... "
                    "(N from 1 to 9999)");
    return 2;
  }
  const char *output = argv[1];
  Renderer r = {.seed = (guint64)seed};
  g_autofree char *tmp = g_strdup_printf("%s.tmp-XXXXXX", output);
  gboolean ok = open_fonts(&r, argv + 2, argc - 2, &error) && g_mkdtemp(tmp) != NULL;
  if (ok) {
    g_autofree char *train = g_build_filename(tmp, "train", NULL);
    g_autofree char *val = g_build_filename(tmp, "val", NULL);
    ok = write_split(&r, train, 0, n_train, &error) && write_split(&r, val, 1, n_val, &error) &&
         swap_into_place(tmp, output, &error);
    if (!ok)
      remove_tree(tmp);
  }
  for (int i = 0; i < r.n_faces; i++)
    FT_Done_Face(r.faces[i]);
  g_free(r.faces);
  if (r.lib)
    FT_Done_FreeType(r.lib);
  if (!ok) {
    fprintf(stderr, "make-glyphs: %s\n", error ? error->message : g_strerror(errno));
    return 1;
  }
  return 0;
}

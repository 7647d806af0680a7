/* make-glyphs: renders the built-in glyph data sets (see README.md beside this file).
 *
 *   make-glyphs [--train N] [--val N] [--seed S] [--side PX] [--classes CHARS]
 *               [--colour | --captions] OUTPUT FONT.ttf...
 *
 * writes OUTPUT/train/<class>/NNNN.png and OUTPUT/val/<class>/NNNN.png: by default the digits
 * 0-9 and the capitals A-Z (36 classes), 32x32 grey, a white glyph on black, each drawn from
 * one of the given fonts (in turn) with a random rotation, scale and shift. --colour paints
 * each glyph in a random bright colour over a textured background of two dark colours (RGB
 * files: the latent-diffusion set); --captions draws every character in each of eight named
 * colours on black with a caption file ("red A") beside each image, flat under train/ and val/
 * (the text-to-image set); --side and --classes change the size and the characters.
 * The randomness of image
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

/* Sizes at a side of 32 pixels; other sides scale them. */
#define BASE_SIDE    32.0
#define BOX_HEIGHT   20.0 /* pixels a glyph spans at scale 1, at most... */
#define BOX_WIDTH    22.0 /* ...and this wide */
#define MAX_ROTATE   10.0 /* degrees either way */
#define MIN_SCALE    0.85
#define MAX_SCALE    1.10
#define MAX_SHIFT    2.0 /* pixels either way, in x and in y */
#define OUTLINE_PPEM 256 /* outlines are loaded at this size, then scaled exactly */
#define MAX_SIDE     512

typedef struct {
  FT_Library lib;
  FT_Face *faces;
  int n_faces;
  guint64 seed;
  int side;
  const char *classes;
  gboolean colour;
  gboolean captions;
} Renderer;

/* The captioned set's colours (--captions): names a caption says, and the RGB a glyph is
 * painted in. Hues far apart, so that a colour is told from another by any image distance. */
static const struct {
  const char *name;
  guint8 rgb[3];
} named_colours[] = {
    {"red", {230, 40, 40}},      {"orange", {245, 140, 30}}, {"yellow", {235, 220, 40}},
    {"green", {40, 200, 60}},    {"cyan", {40, 210, 220}},   {"blue", {50, 90, 240}},
    {"magenta", {220, 50, 210}}, {"white", {235, 235, 235}},
};
#define N_COLOURS ((int)G_N_ELEMENTS(named_colours))

/* Renders character `ch` of face `face` with the jitter of `rng` into a side x side grey
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
  double k = r->side / BASE_SIDE, fit = MIN(BOX_HEIGHT * k / h, BOX_WIDTH * k / w);

  double angle = (cohort_example_rng_uniform(rng) * 2.0 - 1.0) * MAX_ROTATE * G_PI / 180.0;
  double scale = fit * (MIN_SCALE + cohort_example_rng_uniform(rng) * (MAX_SCALE - MIN_SCALE));
  double dx = (cohort_example_rng_uniform(rng) * 2.0 - 1.0) * MAX_SHIFT * k;
  double dy = (cohort_example_rng_uniform(rng) * 2.0 - 1.0) * MAX_SHIFT * k;

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
  FT_Outline_Translate(outline, (FT_Pos)lround((r->side / 2.0 + dx) * 64.0),
                       (FT_Pos)lround((r->side / 2.0 + dy) * 64.0));

  memset(out, 0, (size_t)r->side * r->side);
  FT_Bitmap bitmap = {
      .rows = (unsigned)r->side,
      .width = (unsigned)r->side,
      .pitch = r->side, /* positive: first row is the top; outline y = 0 is the bottom edge */
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

/* HSV (all in [0, 1]) to RGB bytes. */
static void hsv_to_rgb(double h, double s, double v, double rgb[3])
{
  double hh = fmod(h, 1.0) * 6.0, f = hh - floor(hh);
  double p = v * (1 - s), q = v * (1 - s * f), t = v * (1 - s * (1 - f));
  const double table[6][3] = {{v, t, p}, {q, v, p}, {p, v, t}, {p, q, v}, {t, p, v}, {v, p, q}};
  for (int c = 0; c < 3; c++)
    rgb[c] = table[(int)hh % 6][c];
}

/* The colour set: the glyph's coverage `cov` as the alpha of a bright colour over a texture of
 * two dark colours (stripes, or a checkerboard of two stripe patterns, at a random angle and a
 * period of 10 to 20 pixels at side 64), all drawn from `rng` after the jitter. RGB, HWC. */
static void paint(const Renderer *r, const guint8 *cov, CohortExampleRng *rng, guint8 *rgb)
{
  double fg[3], bg1[3], bg2[3];
  hsv_to_rgb(cohort_example_rng_uniform(rng), 0.75 + 0.25 * cohort_example_rng_uniform(rng), 1.0,
             fg);
  double hue = cohort_example_rng_uniform(rng);
  hsv_to_rgb(hue, 0.6, 0.12 + 0.08 * cohort_example_rng_uniform(rng), bg1);
  hsv_to_rgb(hue + 0.1 + 0.3 * cohort_example_rng_uniform(rng), 0.6,
             0.26 + 0.08 * cohort_example_rng_uniform(rng), bg2);
  double angle = cohort_example_rng_uniform(rng) * G_PI;
  double period = (10.0 + 10.0 * cohort_example_rng_uniform(rng)) * r->side / 64.0;
  gboolean checker = cohort_example_rng_uniform(rng) < 0.5;
  double ca = cos(angle), sa = sin(angle);
  for (int y = 0; y < r->side; y++)
    for (int x = 0; x < r->side; x++) {
      double u = 2 * G_PI * (x * ca + y * sa) / period, w = 2 * G_PI * (y * ca - x * sa) / period;
      double t = checker ? 0.5 + 0.5 * sin(u) * sin(w) : 0.5 + 0.5 * sin(u);
      double a = cov[y * r->side + x] / 255.0;
      for (int c = 0; c < 3; c++) {
        double bg = bg1[c] * (1 - t) + bg2[c] * t;
        double v = (bg * (1 - a) + fg[c] * a) * 255.0;
        rgb[(y * r->side + x) * 3 + c] = (guint8)lround(v < 0 ? 0 : v > 255 ? 255 : v);
      }
    }
}

/* The captioned set: the glyph's coverage as the alpha of colour `k` over black, its value
 * 0.8 to 1 (drawn from `rng` after the jitter), so images of one caption differ a little in
 * brightness as in shape. RGB, HWC. */
static void paint_named(const Renderer *r, const guint8 *cov, int k, CohortExampleRng *rng,
                        guint8 *rgb)
{
  double value = 0.8 + 0.2 * cohort_example_rng_uniform(rng);
  for (int p = 0; p < r->side * r->side; p++)
    for (int c = 0; c < 3; c++)
      rgb[p * 3 + c] = (guint8)lround(named_colours[k].rgb[c] * value * cov[p] / 255.0);
}

static gboolean write_file(const char *path, const void *data, gsize len, GError **error)
{
  /* Plain writes, no fsync: like every build output this can be made again, and a stop
   * (not a power cut) never leaves half a set thanks to the rename at the end. */
  return g_file_set_contents_full(path, data, (gssize)len, G_FILE_SET_CONTENTS_NONE, 0644, error);
}

/* One split of the captioned set: for every colour and character, `per_caption` images
 * dir/NNNN.png, each with its caption ("red A") in dir/NNNN.txt beside it (kohya's layout).
 * Caption q = colour × characters + character keys the randomness. */
static gboolean write_captioned_split(Renderer *r, const char *dir, guint64 split, int per_caption,
                                      GError **error)
{
  g_autofree guint8 *pixels = g_new(guint8, (size_t)r->side * r->side);
  g_autofree guint8 *rgb = g_new(guint8, (size_t)r->side * r->side * 3);
  if (g_mkdir_with_parents(dir, 0755) != 0) {
    int err = errno;
    g_set_error(error, G_FILE_ERROR, g_file_error_from_errno(err), "%s: cannot create: %s", dir,
                g_strerror(err));
    return FALSE;
  }
  int n_chars = (int)strlen(r->classes), file = 0;
  for (int k = 0; k < N_COLOURS; k++)
    for (int c = 0; c < n_chars; c++)
      for (int i = 0; i < per_caption; i++, file++) {
        CohortExampleRng rng;
        cohort_example_rng_init(&rng, r->seed, split, (guint64)(k * n_chars + c), (guint64)i);
        FT_Face face = r->faces[(i + c + k) % r->n_faces];
        if (!render(r, face, r->classes[c], &rng, pixels, error))
          return FALSE;
        paint_named(r, pixels, k, &rng, rgb);
        g_autofree char *png_path = g_strdup_printf("%s/%04d.png", dir, file);
        g_autofree char *txt_path = g_strdup_printf("%s/%04d.txt", dir, file);
        g_autofree char *caption = g_strdup_printf("%s %c", named_colours[k].name, r->classes[c]);
        g_autoptr(GBytes) png = cohort_image_encode_png(rgb, r->side, r->side, 3, error);
        if (!png ||
            !write_file(png_path, g_bytes_get_data(png, NULL), g_bytes_get_size(png), error) ||
            !write_file(txt_path, caption, strlen(caption), error))
          return FALSE;
      }
  return TRUE;
}

/* One split: `per_class` images of every class under dir/<class>/NNNN.png. */
static gboolean write_split(Renderer *r, const char *dir, guint64 split, int per_class,
                            GError **error)
{
  g_autofree guint8 *pixels = g_new(guint8, (size_t)r->side * r->side);
  g_autofree guint8 *rgb = g_new(guint8, (size_t)r->side * r->side * 3);
  for (int c = 0; r->classes[c]; c++) {
    char name[2] = {r->classes[c], 0};
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
      if (!render(r, face, r->classes[c], &rng, pixels, error))
        return FALSE;
      if (r->colour)
        paint(r, pixels, &rng, rgb);
      g_autofree char *file = g_strdup_printf("%s/%04d.png", class_dir, i);
      g_autoptr(GBytes) png = cohort_image_encode_png(r->colour ? rgb : pixels, r->side, r->side,
                                                      r->colour ? 3 : 1, error);
      if (!png || !write_file(file, g_bytes_get_data(png, NULL), g_bytes_get_size(png), error))
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

/* Distinct digits and capitals in byte order (the order ImageFolder numbers them), or NULL. */
static gboolean classes_ok(const char *s)
{
  if (!s)
    return TRUE;
  for (int i = 0; s[i]; i++)
    if (!g_ascii_isdigit(s[i]) && !g_ascii_isupper(s[i]))
      return FALSE;
  for (int i = 1; s[i]; i++)
    if (s[i] <= s[i - 1])
      return FALSE;
  return *s != 0;
}

int main(int argc, char **argv)
{
  int n_train = 100, n_val = 20, side = 32;
  gint64 seed = 20240601;
  gboolean colour = FALSE, captions = FALSE;
  g_autofree char *classes = NULL;
  GOptionEntry options[] = {
      {"train", 0, 0, G_OPTION_ARG_INT, &n_train, "Images per class in train/", "N"},
      {"val", 0, 0, G_OPTION_ARG_INT, &n_val, "Images per class in val/", "N"},
      {"seed", 0, 0, G_OPTION_ARG_INT64, &seed, "Seed of the random jitter", "S"},
      {"side", 0, 0, G_OPTION_ARG_INT, &side, "Side of the square images (32)", "PX"},
      {"classes", 0, 0, G_OPTION_ARG_STRING, &classes,
       "The characters, one class each (0-9 and A-Z)", "CHARS"},
      {"colour", 0, 0, G_OPTION_ARG_NONE, &colour,
       "Bright glyphs on textured dark backgrounds, RGB", NULL},
      {"captions", 0, 0, G_OPTION_ARG_NONE, &captions,
       "Every character in eight named colours on black, RGB, a caption file beside each image "
       "(--train and --val count images per caption)",
       NULL},
      {NULL},
  };
  g_autoptr(GError) error = NULL;
  g_autoptr(GOptionContext) ctx = g_option_context_new("OUTPUT FONT.ttf... - render glyphs");
  g_option_context_add_main_entries(ctx, options, NULL);
  if (!g_option_context_parse(ctx, &argc, &argv, &error) || argc < 3 || n_train < 1 || n_val < 1 ||
      n_train > 9999 || n_val > 9999 || side < 8 || side > MAX_SIDE || !classes_ok(classes) ||
      (colour && captions)) {
    fprintf(stderr, "make-glyphs: %s\n",
            error ? error->message
                  : "usage: make-glyphs [--train N] [--val N] [--seed S] [--side PX] [--classes "
                    "CHARS] [--colour | --captions] OUTPUT FONT.ttf... (N from 1 to 9999, PX from "
                    "8 to 512, "
                    "CHARS distinct digits and capitals)");
    return 2;
  }
  const char *output = argv[1];
  Renderer r = {.seed = (guint64)seed,
                .side = side,
                .classes = classes ? classes : "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ",
                .colour = colour,
                .captions = captions};
  g_autofree char *tmp = g_strdup_printf("%s.tmp-XXXXXX", output);
  gboolean ok = open_fonts(&r, argv + 2, argc - 2, &error) && g_mkdtemp(tmp) != NULL;
  if (ok) {
    g_autofree char *train = g_build_filename(tmp, "train", NULL);
    g_autofree char *val = g_build_filename(tmp, "val", NULL);
    ok = captions
             ? write_captioned_split(&r, train, 0, n_train, &error) &&
                   write_captioned_split(&r, val, 1, n_val, &error)
             : write_split(&r, train, 0, n_train, &error) && write_split(&r, val, 1, n_val, &error);
    ok = ok && swap_into_place(tmp, output, &error);
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

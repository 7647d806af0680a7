/* The captioned images the text-to-image tests train on (test-t2i.c, test-t2i-lora.c):
 * T2I_IMAGES images of 8×8 grey, image i half white on side i mod 4 with a little noise of its
 * own, and its caption ("white top", …) in a .txt beside it. Include after test-util.h. */
#pragma once

#include "data/image-decode.h"

/* The config both tests train these images with (a 2-block text-layout DiT, the built-in
 * encoder), before each test's own keys. */
#define T2I_BASE_SETS                                                                              \
  "model=dit", "data_format=images", "val_data=", "image_size=8", "image_channels=1",              \
      "patch_size=2", "n_layer=2", "n_head=2", "n_embd=32", "text_encoder=builtin",                \
      "max_text_tokens=16", "cfg_dropout=0.3", "warmup_steps=1", "eval_every=0", "sample_every=0", \
      "save_every=0", "threads=1", "timeout_s=60"

static const char *const t2i_captions[] = {"white top", "white bottom", "white left",
                                           "white right"};
#define T2I_IMAGES 16

/* Makes the images in a new temporary folder; returns it (g_free, tu_rm_rf). */
static char *t2i_make_data(void)
{
  char *dir = tu_mkdtemp("t2i-data");
  guint32 s = 3;
  for (int i = 0; i < T2I_IMAGES; i++) {
    guint8 px[64];
    int side = i % 4;
    for (int y = 0; y < 8; y++)
      for (int x = 0; x < 8; x++) {
        gboolean lit = side == 0 ? y < 4 : side == 1 ? y >= 4 : side == 2 ? x < 4 : x >= 4;
        s = s * 1664525u + 1013904223u;
        px[y * 8 + x] = (guint8)((lit ? 230 : 20) + (s >> 28));
      }
    g_autofree char *png = g_strdup_printf("%s/%02d.png", dir, i);
    g_autofree char *txt = g_strdup_printf("%s/%02d.txt", dir, i);
    g_autoptr(GError) error = NULL;
    g_assert_true(cohort_image_write_png(png, px, 8, 8, 1, &error));
    g_assert_true(g_file_set_contents(txt, t2i_captions[side], -1, &error));
  }
  return dir;
}

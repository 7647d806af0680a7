/* Data sources for the trainer: token windows (data/dataset.h), images (data/images.h) and
 * their latents (data/latent-set.h), behind one numbered-example interface. */
#include "engine/model/data-source.h"

#include "data/augment.h"
#include "data/captions.h"
#include "data/image-folder.h"
#include "data/chat-data.h"
#include "data/dataset.h"
#include "data/image-resize.h"
#include "data/images.h"

#include <string.h>

struct CohortDataSource {
  CohortDataFormat format;
  CohortDataset *windows; /* text and token shards */
  CohortChatSet *chat;    /* conversations: one per window */
  int T;
  CohortImageSet *images;     /* images */
  CohortLatentTable *latents; /* or latents of them (vae_from) */
  int C, S;
  int S_src; /* the set's side: image_resize, from which the S x S crops come */
  float mean[3], std[3], pad[3];
  CohortAugment augment;
  guint64 seed;
  /* captions (text_encoder): the folder's, each example's entry among them, the dropout that
   * draws the empty caption, and once set the embeddings of every caption served */
  CohortCaptions captions;
  gboolean has_captions;
  guint *entry_of;
  double caption_dropout;
  CohortTextTable *text;
};

/* TRUE when the config's key `name` means something for its model (the image keys of one
 * family do nothing for another). */
static gboolean key_applies(const CohortConfig *cfg, const char *name)
{
  const CohortConfigKey *key = cohort_config_find_key(name);
  return key && cohort_config_key_applies(key, cfg->model);
}

/* Path below the folder of example `i`: the listing's, which captions are keyed by. */
static const char *example_path(const CohortDataSource *s, gsize i)
{
  return s->latents ? s->latents->paths[i] : cohort_image_set_path(s->images, i);
}

/* The captions of the images of `folder`, and which listing entry each example of the set is
 * (skip_bad_images leaves entries out). */
static gboolean open_captions(CohortDataSource *s, const CohortConfig *cfg, const char *folder,
                              GError **error)
{
  g_auto(CohortImageListing) listing = {0};
  if (!cohort_image_listing_scan(folder, &listing, error) ||
      !cohort_captions_read(folder, &listing, &s->captions, error))
    return FALSE;
  s->has_captions = TRUE;
  s->caption_dropout = cfg->cfg_dropout;
  g_autoptr(GHashTable) by_rel = g_hash_table_new(g_str_hash, g_str_equal);
  for (guint i = 0; i < listing.entries->len; i++)
    g_hash_table_insert(by_rel, g_array_index(listing.entries, CohortImageEntry, i).rel,
                        GUINT_TO_POINTER(i + 1));
  gsize n = cohort_data_source_count(s);
  s->entry_of = g_new(guint, MAX(n, 1));
  for (gsize i = 0; i < n; i++) {
    guint at = GPOINTER_TO_UINT(g_hash_table_lookup(by_rel, example_path(s, i)));
    if (at == 0) {
      g_set_error(error, G_FILE_ERROR, G_FILE_ERROR_NOENT,
                  "%s: %s: listed when the images were read, gone when their captions were", folder,
                  example_path(s, i));
      return FALSE;
    }
    s->entry_of[i] = at - 1;
  }
  return TRUE;
}

static CohortDataSource *open_images(CohortDataSource *s, const CohortConfig *cfg, const char *path,
                                     const char *cache_dir, GError **error)
{
  s->C = cfg->image_channels;
  s->S = cfg->image_size;
  s->S_src = key_applies(cfg, "image_resize") && cfg->image_resize > 0 ? cfg->image_resize : s->S;
  for (int c = 0; c < 3; c++)
    s->mean[c] = s->std[c] = 0.5f; /* [-1, 1], the families' default */
  if (key_applies(cfg, "image_mean") &&
      !cohort_config_image_normalisation(cfg, NULL, s->mean, s->std, error)) {
    cohort_data_source_free(s);
    return NULL;
  }
  for (int c = 0; c < 3; c++)
    s->pad[c] = (0.0f - s->mean[c]) / s->std[c]; /* a black pixel, normalised */
  s->images = cohort_image_set_open(path, s->S_src, cfg->image_channels, cfg->skip_bad_images,
                                    cache_dir, error);
  if (!s->images) {
    cohort_data_source_free(s);
    return NULL;
  }
  s->augment = (CohortAugment)cfg->augment;
  s->seed = (guint64)cfg->seed;
  /* a text_encoder left in the config of another family means nothing there */
  if (key_applies(cfg, "text_encoder") && cfg->text_encoder && *cfg->text_encoder &&
      !open_captions(s, cfg, path, error)) {
    cohort_data_source_free(s);
    return NULL;
  }
  return s;
}

static CohortDataSource *open_as(const CohortConfig *cfg, CohortDataFormat format, const char *path,
                                 const char *cache_dir, GError **error)
{
  g_autofree char *resolved = cohort_resolve_path(path);
  CohortDataSource *s = g_new0(CohortDataSource, 1);
  s->format = format;
  if (format == COHORT_DATA_IMAGES)
    return open_images(s, cfg, resolved, cache_dir, error);
  s->T = cfg->seq_len;
  s->windows = cohort_dataset_open_prepared(resolved, format, cfg->vocab_size, cfg->seq_len,
                                            cache_dir, NULL, error);
  if (!s->windows) {
    cohort_data_source_free(s);
    return NULL;
  }
  return s;
}

CohortDataSource *cohort_data_source_open(const CohortConfig *cfg, const char *path,
                                          const char *cache_dir, GError **error)
{
  return open_as(cfg, cfg->data_format, path, cache_dir, error);
}

CohortDataSource *cohort_data_source_open_tokens(const CohortConfig *cfg, const char *path,
                                                 const char *cache_dir, GError **error)
{
  return open_as(cfg, COHORT_DATA_TOKENS, path, cache_dir, error);
}

CohortDataSource *cohort_data_source_open_chat(const CohortConfig *cfg, const char *file,
                                               GError **error)
{
  g_autoptr(CohortChatSet) chat = cohort_chat_set_load(file, cfg->vocab_size, error);
  if (!chat)
    return NULL;
  CohortDataSource *s = g_new0(CohortDataSource, 1);
  s->format = COHORT_DATA_CHAT;
  s->T = cfg->seq_len;
  s->chat = g_steal_pointer(&chat);
  return s;
}

gboolean cohort_data_source_ignores_targets(const CohortDataSource *s)
{
  return s->chat != NULL;
}

guint64 cohort_data_source_counted(const CohortDataSource *s, guint64 index)
{
  if (s->chat)
    return cohort_chat_set_counted(s->chat, index);
  return s->images || s->latents ? 1 : (guint64)s->T;
}

CohortDataSource *cohort_data_source_new_latents(const CohortConfig *cfg, CohortLatentTable *table)
{
  CohortDataSource *s = g_new0(CohortDataSource, 1);
  s->format = COHORT_DATA_IMAGES;
  s->latents = table;
  s->C = table->channels;
  s->S = table->size;
  s->augment = (CohortAugment)cfg->augment;
  s->seed = (guint64)cfg->seed;
  return s;
}

gboolean cohort_data_source_read_latent_captions(CohortDataSource *s, const CohortConfig *cfg,
                                                 const char *folder, GError **error)
{
  g_return_val_if_fail(s->latents && s->latents->paths && !s->has_captions, FALSE);
  g_autofree char *resolved = cohort_resolve_path(folder);
  return open_captions(s, cfg, resolved, error);
}

void cohort_data_source_free(CohortDataSource *s)
{
  if (!s)
    return;
  g_clear_pointer(&s->latents, cohort_latent_table_free);
  g_clear_pointer(&s->windows, cohort_dataset_free);
  g_clear_pointer(&s->chat, cohort_chat_set_free);
  g_clear_pointer(&s->images, cohort_image_set_free);
  if (s->has_captions)
    cohort_captions_clear(&s->captions);
  g_free(s->entry_of);
  g_clear_pointer(&s->text, cohort_text_table_free);
  g_free(s);
}

guint64 cohort_data_source_count(const CohortDataSource *s)
{
  if (s->latents)
    return s->latents->n;
  if (s->chat)
    return cohort_chat_set_count(s->chat);
  return s->images ? cohort_image_set_len(s->images) : cohort_dataset_num_windows(s->windows);
}

int cohort_data_source_num_classes(const CohortDataSource *s)
{
  if (s->latents)
    return (int)g_strv_length(s->latents->classes);
  return s->images ? cohort_image_set_num_classes(s->images) : 0;
}

const char *const *cohort_data_source_class_names(const CohortDataSource *s)
{
  if (s->latents)
    return (const char *const *)s->latents->classes;
  return s->images ? cohort_image_set_class_names(s->images) : NULL;
}

guint cohort_data_source_num_skipped(const CohortDataSource *s)
{
  return s->images ? cohort_image_set_num_skipped(s->images) : 0;
}

const char *cohort_data_source_skipped_reason(const CohortDataSource *s, guint i)
{
  return s->images ? cohort_image_set_skipped_reason(s->images, i) : NULL;
}

CohortBatch *cohort_data_source_batch_new(const CohortDataSource *s, int capacity)
{
  if (s->images || s->latents) {
    CohortBatch *b = cohort_batch_new(capacity, 0, s->C, s->S, s->S);
    if (b && s->text)
      cohort_batch_add_text(b, s->text->max_tokens, s->text->width);
    return b;
  }
  return cohort_batch_new(capacity, s->T, 0, 0, 0);
}

gboolean cohort_data_source_has_captions(const CohortDataSource *s)
{
  return s->has_captions;
}

const CohortCaptions *cohort_data_source_captions(const CohortDataSource *s)
{
  return s->has_captions ? &s->captions : NULL;
}

char *cohort_data_source_caption(const CohortDataSource *s, guint64 index, gint64 epoch)
{
  g_return_val_if_fail(s->has_captions && index < cohort_data_source_count(s), NULL);
  gboolean train = epoch >= 0;
  return cohort_caption_for_example(&s->captions, s->entry_of[index], NULL,
                                    train ? s->caption_dropout : 0.0, s->seed,
                                    train ? (guint64)epoch : 0);
}

void cohort_data_source_set_text(CohortDataSource *s, CohortTextTable *table)
{
  g_return_if_fail(s->has_captions && !s->text);
  s->text = table;
}

/* The caption example `index` trains on in this batch's epoch, as the encoder's hidden states. */
static gboolean load_text(const CohortDataSource *s, CohortBatch *b, int row, guint64 index,
                          GError **error)
{
  g_autofree char *caption = cohort_data_source_caption(s, index, b->epoch);
  const CohortTextRow *r = cohort_text_table_lookup(s->text, caption);
  if (!r) {
    g_set_error(error, G_FILE_ERROR, G_FILE_ERROR_FAILED,
                "example %" G_GUINT64_FORMAT ": its caption \"%s\" was never encoded", index,
                caption);
    return FALSE;
  }
  size_t stride = (size_t)b->M * b->text_dim;
  float *dst = b->text + row * stride;
  size_t used = (size_t)r->len * b->text_dim;
  if (used)
    memcpy(dst, r->values, used * sizeof(float));
  memset(dst + used, 0, (stride - used) * sizeof(float));
  b->text_len[row] = r->len;
  return TRUE;
}

/* torchvision's order: the crop of the pixels (RandomResizedCrop, or the centre crop of the
 * S_src square), ToTensor and Normalize, then RandomCrop's padded crop, which this does on the
 * normalised values with a normalised black. Training draws are those of (seed, epoch, index),
 * the same on every rank; an evaluation batch (epoch < 0) gets the centre crop alone. */
static gboolean load_image(const CohortDataSource *s, CohortBatch *b, int row, guint64 index)
{
  size_t D = (size_t)s->C * s->S * s->S;
  float *dst = b->images + row * D;
  const guint8 *src = cohort_image_set_get_bytes(s->images, index);
  b->labels[row] = cohort_image_set_label(s->images, index);
  gboolean train = b->epoch >= 0;
  /* Memory of this call's own: loader threads call this at once. */
  g_autofree guint8 *crop =
      s->S_src != s->S || (train && s->augment == COHORT_AUGMENT_RESIZED_CROP_FLIP)
          ? g_new(guint8, D)
          : NULL;
  if (train && s->augment == COHORT_AUGMENT_RESIZED_CROP_FLIP) {
    cohort_augment_resized_crop(s->seed, (guint64)b->epoch, index, s->C, s->S_src, s->S_src, src,
                                s->S, crop);
  } else if (crop) {
    int off = cohort_image_crop_offset(s->S_src, s->S);
    for (int c = 0; c < s->C; c++)
      for (int y = 0; y < s->S; y++)
        memcpy(crop + ((size_t)c * s->S + y) * s->S,
               src + ((size_t)c * s->S_src + off + y) * s->S_src + off, (size_t)s->S);
  }
  const guint8 *px = crop ? crop : src;
  gboolean padded_crop =
      train && (s->augment == COHORT_AUGMENT_CROP || s->augment == COHORT_AUGMENT_CROP_FLIP ||
                s->augment == COHORT_AUGMENT_FLIP);
  g_autofree float *scratch = padded_crop ? g_new(float, D) : NULL;
  float *out = padded_crop ? scratch : dst;
  size_t plane = (size_t)s->S * s->S;
  for (int c = 0; c < s->C; c++)
    for (size_t i = 0; i < plane; i++)
      out[c * plane + i] = ((float)px[c * plane + i] / 255.0f - s->mean[c]) / s->std[c];
  if (padded_crop)
    cohort_augment_apply(s->augment, s->seed, (guint64)b->epoch, index, s->C, s->S, s->S, scratch,
                         s->pad, dst);
  return TRUE;
}

/* The latent of `index`, mirrored when training with flip draws it so; a mirrored image keeps
 * its caption (the text layout's load_text is the same either way). */
static gboolean load_latent(const CohortDataSource *s, CohortBatch *b, int row, guint64 index)
{
  const CohortLatentTable *t = s->latents;
  size_t D = (size_t)t->channels * t->size * t->size;
  int top, left;
  gboolean flip = FALSE;
  if (b->epoch >= 0 && s->augment == COHORT_AUGMENT_FLIP && t->variants == 2)
    cohort_augment_draw(s->augment, s->seed, (guint64)b->epoch, index, &top, &left, &flip);
  memcpy(b->images + row * D, t->values + ((size_t)index * t->variants + (flip ? 1 : 0)) * D,
         D * sizeof(float));
  b->labels[row] = t->labels[index];
  return TRUE;
}

gboolean cohort_data_source_load(const CohortDataSource *s, CohortBatch *b, int row, guint64 index,
                                 GError **error)
{
  b->example_ids[row] = index;
  if (s->text && b->text && !load_text(s, b, row, index, error))
    return FALSE;
  if (s->latents)
    return load_latent(s, b, row, index);
  if (s->chat) {
    cohort_chat_set_window(s->chat, index, b->T, 0, b->inputs + (size_t)row * b->T,
                           b->targets + (size_t)row * b->T);
    return TRUE;
  }
  if (!s->images)
    return cohort_dataset_window(s->windows, index, b->inputs + (size_t)row * b->T,
                                 b->targets + (size_t)row * b->T, error);
  return load_image(s, b, row, index);
}

/* The text encoder's struct, shared by its files (text-encoder.c: the built-in encoder and
 * encoding; text-encoder-folder.c: a Llama-family folder). */
#pragma once

#include "data/tokenizer.h"
#include "engine/model/model.h"
#include "engine/models/text-encoder.h"

G_BEGIN_DECLS

struct CohortTextEncoder {
  CohortModel *model; /* the blocks up to the layer read, frozen */
  int width, max_tokens;
  /* the layer read is the folder model's last: Hugging Face's hidden_states[-1] is the output of
   * model.norm, the other entries raw block outputs */
  gboolean final_norm;
  char *fingerprint;
  int *ids; /* [max_tokens] */
  /* a folder's tokenizer and this encoder's state of it; NULL for the built-in's bytes */
  CohortTokenizer *tokenizer;
  CohortEncoder *encoder;
  GArray *scratch[2]; /* gint32 ids: the caption with and without the post-processor's tokens */
};

/* hidden_states index of text_encoder_layer for an encoder of `blocks` blocks, or -1 when it
 * has no such layer (0, the embeddings, is none). */
static inline int cohort_text_hidden_index(int layer, int blocks)
{
  int h = layer < 0 ? blocks + 1 + layer : layer;
  return h >= 1 && h <= blocks ? h : -1;
}

/* text-encoder-folder.c: fills `e` (zeroed; width, max_tokens and the rest) from the folder
 * cfg->text_encoder names; FALSE with an error naming the key, the value and what is allowed. */
gboolean cohort_text_encoder_open_folder(CohortTextEncoder *e, const CohortBackend *be,
                                         const CohortConfig *cfg, GError **error);

G_END_DECLS

/* The PixArt-α block's tensor names and shapes; see pixart.h. */
#include "engine/families/pixart.h"

#include <glib.h>

static const char *const names[PB_COUNT] = {
    [PB_TABLE] = "scale_shift_table",  [PB_Q1_W] = "attn1.to_q.weight",
    [PB_Q1_B] = "attn1.to_q.bias",     [PB_K1_W] = "attn1.to_k.weight",
    [PB_K1_B] = "attn1.to_k.bias",     [PB_V1_W] = "attn1.to_v.weight",
    [PB_V1_B] = "attn1.to_v.bias",     [PB_O1_W] = "attn1.to_out.0.weight",
    [PB_O1_B] = "attn1.to_out.0.bias", [PB_Q2_W] = "attn2.to_q.weight",
    [PB_Q2_B] = "attn2.to_q.bias",     [PB_K2_W] = "attn2.to_k.weight",
    [PB_K2_B] = "attn2.to_k.bias",     [PB_V2_W] = "attn2.to_v.weight",
    [PB_V2_B] = "attn2.to_v.bias",     [PB_O2_W] = "attn2.to_out.0.weight",
    [PB_O2_B] = "attn2.to_out.0.bias", [PB_FF1_W] = "ff.net.0.proj.weight",
    [PB_FF1_B] = "ff.net.0.proj.bias", [PB_FF2_W] = "ff.net.2.weight",
    [PB_FF2_B] = "ff.net.2.bias",
};

const char *cohort_pixart_block_name(int p)
{
  g_return_val_if_fail(p >= 0 && p < PB_COUNT, NULL);
  return names[p];
}

int cohort_pixart_block_dims(const CohortPixartShape *s, int p, int dims[2])
{
  int C = s->hidden;
  /* weights are [out, in], each followed by its bias [out] */
  int out = C, in = C;
  switch (p) {
  case PB_TABLE:
    dims[0] = 6, dims[1] = C;
    return 2;
  case PB_K2_W:
  case PB_K2_B:
  case PB_V2_W:
  case PB_V2_B:
    in = s->cross_dim;
    break;
  case PB_FF1_W:
  case PB_FF1_B:
    out = s->ff_inner;
    break;
  case PB_FF2_W:
  case PB_FF2_B:
    in = s->ff_inner;
    break;
  default:
    break;
  }
  dims[0] = out, dims[1] = in;
  return (p - PB_Q1_W) % 2 == 0 ? 2 : 1;
}

size_t cohort_pixart_block_numel(const CohortPixartShape *s, int p)
{
  int dims[2];
  int rank = cohort_pixart_block_dims(s, p, dims);
  return rank == 2 ? (size_t)dims[0] * dims[1] : (size_t)dims[0];
}

/* The activation tensors in layout order with their sizes. */
static size_t layout(CohortPixartActs *a, float *mem, const CohortPixartShape *s, int B, int N,
                     int M)
{
  size_t C = (size_t)s->hidden, BN = (size_t)B * N, BM = (size_t)B * M;
  size_t lse = (size_t)B * s->n_head * N, kv = MAX(BN, BM) * C;
  struct {
    float **p;
    size_t n;
  } t[] = {
      {&a->mod, (size_t)B * 6 * C},
      {&a->h1, BN * C},
      {&a->m1, BN * C},
      {&a->q1, BN * C},
      {&a->k1, BN * C},
      {&a->v1, BN * C},
      {&a->att1, BN * C},
      {&a->a1, BN * C},
      {&a->x1, BN * C},
      {&a->mean1, BN},
      {&a->rstd1, BN},
      {&a->lse1, lse},
      {&a->lse2, lse},
      {&a->q2, BN * C},
      {&a->att2, BN * C},
      {&a->a2, BN * C},
      {&a->x2, BN * C},
      {&a->h2, BN * C},
      {&a->m2, BN * C},
      {&a->o, BN * C},
      {&a->out, BN * C},
      {&a->k2, BM * C},
      {&a->v2, BM * C},
      {&a->mean2, BN},
      {&a->rstd2, BN},
      {&a->f, BN * s->ff_inner},
      {&a->g, BN * s->ff_inner},
      {&a->dmod, (size_t)B * 6 * C},
      {&a->da, BN * C},
      {&a->datt, BN * C},
      {&a->dq, BN * C},
      {&a->dk, kv},
      {&a->dv, kv},
      {&a->dm, BN * C},
      {&a->dh, BN * C},
      {&a->dbig, BN * s->ff_inner},
  };
  size_t at = 0;
  for (size_t i = 0; i < G_N_ELEMENTS(t); i++) {
    if (mem)
      *t[i].p = mem + at;
    at += (t[i].n + 15) / 16 * 16;
  }
  return at;
}

size_t cohort_pixart_acts_floats(const CohortPixartShape *s, int B, int N, int M)
{
  CohortPixartActs a;
  return layout(&a, NULL, s, B, N, M);
}

void cohort_pixart_acts_layout(CohortPixartActs *a, float *mem, const CohortPixartShape *s, int B,
                               int N, int M)
{
  layout(a, mem, s, B, N, M);
}

/* Picking the next token (engine/models/token-pick.h). The top_k candidates are found with a
 * heap of k over the row (k log k per candidate that enters), then sorted, most likely first;
 * the weights are exp((logit - max) / temperature) in double, as the GPT sampler always had
 * them, so its samples at temperature 1, top-k 40 and no nucleus cut are the ones it drew
 * before these keys existed. */
#include "engine/models/token-pick.h"

#include <math.h>
#include <stdlib.h>

#include "engine/model/rng.h"

typedef struct {
  float logit;
  int id;
} Candidate;

struct CohortTokenPicker {
  CohortTokenPick how;
  int vocab, k;
  Candidate *cand; /* k entries */
  double *weight;  /* k entries */
};

CohortTokenPick cohort_token_pick_from_config(const CohortConfig *cfg)
{
  return (CohortTokenPick){cfg->sample_temperature, cfg->sample_top_k, cfg->sample_top_p, 0};
}

CohortTokenPicker *cohort_token_picker_new(const CohortTokenPick *how, int vocab)
{
  g_return_val_if_fail(vocab >= 1, NULL);
  CohortTokenPicker *p = g_new0(CohortTokenPicker, 1);
  p->how = *how;
  if (how->below > 0 && how->below < vocab)
    vocab = how->below; /* the logits past it are never read */
  p->vocab = vocab;
  p->k = how->top_k <= 0 || how->top_k > vocab ? vocab : how->top_k;
  p->cand = g_new(Candidate, p->k);
  p->weight = g_new(double, p->k);
  return p;
}

void cohort_token_picker_free(CohortTokenPicker *p)
{
  if (!p)
    return;
  g_free(p->cand);
  g_free(p->weight);
  g_free(p);
}

/* Whether a comes before b: the larger logit, then the lower id (a total order: NaN logits
 * were made -inf). */
static inline gboolean before(Candidate a, Candidate b)
{
  return a.logit != b.logit ? a.logit > b.logit : a.id < b.id;
}

static int candidate_order(const void *a, const void *b)
{
  const Candidate *x = a, *y = b;
  return before(*x, *y) ? -1 : before(*y, *x) ? 1 : 0;
}

/* Heap of n candidates with the last in order at the root. */
static void sift_down(Candidate *h, int n, int i)
{
  for (;;) {
    int l = 2 * i + 1, r = l + 1, worst = i;
    if (l < n && before(h[worst], h[l]))
      worst = l;
    if (r < n && before(h[worst], h[r]))
      worst = r;
    if (worst == i)
      return;
    Candidate t = h[i];
    h[i] = h[worst];
    h[worst] = t;
    i = worst;
  }
}

static void sift_up(Candidate *h, int i)
{
  while (i > 0 && before(h[(i - 1) / 2], h[i])) {
    Candidate t = h[i];
    h[i] = h[(i - 1) / 2];
    h[(i - 1) / 2] = t;
    i = (i - 1) / 2;
  }
}

/* p->cand gets the k most likely tokens, most likely first. */
static void top_k(CohortTokenPicker *p, const float *logits)
{
  int n = 0;
  for (int i = 0; i < p->vocab; i++) {
    Candidate c = {isnan(logits[i]) ? -INFINITY : logits[i], i};
    if (n < p->k) {
      p->cand[n] = c;
      sift_up(p->cand, n++);
    } else if (before(c, p->cand[0])) {
      p->cand[0] = c;
      sift_down(p->cand, n, 0);
    }
  }
  qsort(p->cand, (size_t)n, sizeof(Candidate), candidate_order);
}

static int argmax(const float *logits, int n)
{
  int best = 0;
  for (int i = 1; i < n; i++)
    if (logits[i] > logits[best] || (isnan(logits[best]) && !isnan(logits[i])))
      best = i;
  return best;
}

int cohort_token_picker_pick(CohortTokenPicker *p, const float *logits, guint64 *rng)
{
  if (p->how.temperature <= 0)
    return argmax(logits, p->vocab);
  top_k(p, logits);
  double maxl = p->cand[0].logit, sum = 0;
  for (int i = 0; i < p->k; i++) {
    p->weight[i] = exp((p->cand[i].logit - maxl) / p->how.temperature);
    sum += p->weight[i];
  }
  /* nucleus: a token stays while the tokens before it hold less than top_p of the probability
   * (the first always stays), as Hugging Face's TopPLogitsWarper keeps them */
  int kept = p->k;
  if (p->how.top_p < 1.0) {
    double before_sum = 0;
    for (kept = 0; kept < p->k && before_sum < p->how.top_p * sum; kept++)
      before_sum += p->weight[kept];
    sum = before_sum;
  }
  double r = cohort_rng_uniform(rng) * sum, acc = 0;
  for (int i = 0; i < kept; i++) {
    acc += p->weight[i];
    if (r < acc)
      return p->cand[i].id;
  }
  return p->cand[kept - 1].id;
}

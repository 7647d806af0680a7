/* LoRA adapters at run time (see lora.h): their memory, forward, backward, initialisation,
 * dropout and the merge into the base weights. */
#include "engine/model/lora.h"

#include <math.h>
#include <string.h>

#include "engine/model/rng.h"
#include "kernels/backend.h"

/* Keeps the adapters' streams apart from the family's tensor streams of the same seed. */
#define LORA_INIT_SALT    0x10a1a5eed0000001ULL
#define LORA_DROPOUT_SALT 0x10a1d20900000002ULL

static CohortLoraAdapter *adapter_of(const CohortModel *m, guint target, int *index)
{
  const CohortLora *L = m->lora;
  if (!L || target >= m->n_tensors || L->of_tensor[target] < 0)
    return NULL;
  *index = L->of_tensor[target];
  return &L->adapters[*index];
}

CohortLora *cohort_lora_new(const CohortModel *m, const CohortFinetunePlan *plan,
                            CohortFinetuneLayout *layout, size_t rows, GError **error)
{
  const CohortBackend *be = m->be;
  CohortLora *L = g_new0(CohortLora, 1);
  L->rank = plan->rank;
  L->alpha = plan->alpha;
  L->dropout = plan->dropout;
  L->rslora = plan->rslora;
  L->scale =
      (float)(plan->rslora ? plan->alpha / sqrt((double)plan->rank) : plan->alpha / plan->rank);
  L->n = plan->n_adapters;
  L->rows = rows;
  L->max_batch = m->max_batch;
  L->adapters = g_new0(CohortLoraAdapter, MAX(L->n, 1));
  L->of_tensor = g_new(int, MAX(m->n_tensors, 1));
  memcpy(L->of_tensor, plan->adapter, m->n_tensors * sizeof(int));
  L->tensors = g_steal_pointer(&layout->adapters);
  L->n_tensors = layout->n_adapter_tensors;
  layout->n_adapter_tensors = 0;
  gboolean ok = TRUE;
  size_t h_bytes = MAX(rows * (size_t)L->rank, 1) * sizeof(float);
  for (guint a = 0; a < L->n; a++) {
    CohortLoraAdapter *ad = &L->adapters[a];
    ad->target = plan->targets[a];
    ad->kind = m->tensors[ad->target].adapt;
    ad->in = (int)(L->tensors[2 * a].numel / (size_t)L->rank);
    ad->out = L->tensors[2 * a + 1].shape[0];
    ad->salt = a;
    /* dropout's scratch is for linear inputs: a convolution's adapter has none */
    if (ad->kind == COHORT_ADAPT_CONV2D)
      L->max_kernel = MAX(L->max_kernel, (size_t)ad->in * ad->out);
    else
      L->max_in = MAX(L->max_in, ad->in);
    ok = ok && (ad->h = be->alloc(h_bytes)) != NULL;
  }
  L->scratch_bytes = (L->n + 1) * h_bytes;
  ok = ok && (L->dh = be->alloc(h_bytes)) != NULL;
  if (ok && L->max_kernel > 0) {
    size_t kernel_bytes = L->max_kernel * sizeof(float);
    ok = (L->kernel = be->alloc(kernel_bytes)) != NULL &&
         (L->dkernel = be->alloc(kernel_bytes)) != NULL;
    L->scratch_bytes += 2 * kernel_bytes;
  }
  if (ok && L->dropout > 0) {
    size_t drop_bytes = MAX(rows * (size_t)L->max_in, 1) * sizeof(float);
    size_t key_bytes = MAX((size_t)m->max_batch, 1) * sizeof(guint64);
    ok = (L->drop = be->alloc(drop_bytes)) != NULL && (L->keys = be->alloc(key_bytes)) != NULL;
    L->scratch_bytes += drop_bytes + key_bytes;
  }
  if (!ok) {
    g_set_error(error, G_FILE_ERROR, G_FILE_ERROR_NOMEM,
                "%s model: out of %s memory for the scratch of %u LoRA adapters (%zu rows of "
                "rank %d); allowed: a smaller batch or rank",
                m->klass->name, be->name, L->n, rows, L->rank);
    cohort_lora_free(be, L);
    return NULL;
  }
  return L;
}

void cohort_lora_free(const CohortBackend *be, CohortLora *L)
{
  if (!L)
    return;
  for (guint a = 0; be && a < L->n; a++)
    be->free(L->adapters[a].h);
  if (be) {
    be->free(L->dh);
    be->free(L->kernel);
    be->free(L->dkernel);
    be->free(L->drop);
    be->free(L->keys);
  }
  cohort_tensor_table_free(L->tensors, L->n_tensors);
  g_free(L->adapters);
  g_free(L->of_tensor);
  g_free(L);
}

/* The adapter's input: x, or with dropout on, dropout(x) in the scratch. */
static const float *adapter_input(const CohortModel *m, const CohortLoraAdapter *ad, const float *x,
                                  int N)
{
  const CohortLora *L = m->lora;
  if (L->drop_batch <= 0)
    return x;
  g_return_val_if_fail(N % L->drop_batch == 0, x);
  m->be->dropout(L->drop, x, L->keys, N, N / L->drop_batch, ad->in, ad->salt, (float)L->dropout);
  return L->drop;
}

void cohort_lora_forward(CohortModel *m, guint target, float *y, const float *x, int N)
{
  int a;
  CohortLoraAdapter *ad = adapter_of(m, target, &a);
  if (!ad)
    return;
  const CohortLora *L = m->lora;
  g_return_if_fail(N >= 0 && (size_t)N <= L->rows);
  const CohortBackend *be = m->be;
  int r = L->rank;
  const float *A = m->params + L->tensors[2 * a].offset;
  const float *B = m->params + L->tensors[2 * a + 1].offset;
  const float *u = adapter_input(m, ad, x, N);
  /* h [N, r] = u A^T; y [N, out] += scale h B^T */
  be->gemm(0, 1, N, r, ad->in, 1.0f, u, ad->in, A, ad->in, 0.0f, ad->h, r);
  be->gemm(0, 1, N, ad->out, r, L->scale, ad->h, r, B, r, 1.0f, y, ad->out);
}

void cohort_lora_backward(CohortModel *m, guint target, float *dx, const float *dy, const float *x,
                          int N)
{
  int a;
  CohortLoraAdapter *ad = adapter_of(m, target, &a);
  if (!ad || !m->grads)
    return;
  const CohortLora *L = m->lora;
  g_return_if_fail(N >= 0 && (size_t)N <= L->rows);
  const CohortBackend *be = m->be;
  int r = L->rank, in = ad->in, out = ad->out;
  const float *A = m->params + L->tensors[2 * a].offset;
  const float *B = m->params + L->tensors[2 * a + 1].offset;
  float *dA = m->grads + L->tensors[2 * a].offset, *dB = m->grads + L->tensors[2 * a + 1].offset;
  /* dB += scale dy^T h; dh = scale dy B; dA += dh^T u */
  be->gemm(1, 0, out, r, N, L->scale, dy, out, ad->h, r, 1.0f, dB, r);
  be->gemm(0, 0, N, r, out, L->scale, dy, out, B, r, 0.0f, L->dh, r);
  const float *u = adapter_input(m, ad, x, N);
  be->gemm(1, 0, r, in, N, 1.0f, L->dh, r, u, in, 1.0f, dA, in);
  if (!dx)
    return;
  if (L->drop_batch <= 0) {
    be->gemm(0, 0, N, in, r, 1.0f, L->dh, r, A, in, 1.0f, dx, in);
    return;
  }
  /* through the same mask: dx += dropout(dh A) */
  be->gemm(0, 0, N, in, r, 1.0f, L->dh, r, A, in, 0.0f, L->drop, in);
  be->dropout(L->drop, L->drop, L->keys, N, N / L->drop_batch, in, ad->salt, (float)L->dropout);
  be->axpby(dx, 1.0f, dx, 1.0f, L->drop, (size_t)N * in);
}

const float *cohort_lora_conv_kernel(CohortModel *m, guint target, const float *w)
{
  int a;
  const CohortLoraAdapter *ad = adapter_of(m, target, &a);
  if (!ad)
    return w;
  const CohortLora *L = m->lora;
  g_return_val_if_fail(ad->kind == COHORT_ADAPT_CONV2D, w);
  const float *A = m->params + L->tensors[2 * a].offset;
  const float *B = m->params + L->tensors[2 * a + 1].offset;
  /* kernel [out, in] = w + scale B A */
  m->be->copy(L->kernel, w, (size_t)ad->out * ad->in * sizeof(float));
  m->be->gemm(0, 0, ad->out, ad->in, L->rank, L->scale, B, L->rank, A, ad->in, 1.0f, L->kernel,
              ad->in);
  return L->kernel;
}

float *cohort_lora_conv_grad(CohortModel *m, guint target, float *dw)
{
  int a;
  const CohortLoraAdapter *ad = adapter_of(m, target, &a);
  if (!ad || !m->grads)
    return dw;
  m->be->zero(m->lora->dkernel, (size_t)ad->out * ad->in * sizeof(float));
  return m->lora->dkernel;
}

void cohort_lora_conv_grads(CohortModel *m, guint target, float *dw)
{
  int a;
  const CohortLoraAdapter *ad = adapter_of(m, target, &a);
  if (!ad || !m->grads)
    return;
  const CohortLora *L = m->lora;
  const CohortBackend *be = m->be;
  int r = L->rank, in = ad->in, out = ad->out;
  const float *A = m->params + L->tensors[2 * a].offset;
  const float *B = m->params + L->tensors[2 * a + 1].offset;
  float *dA = m->grads + L->tensors[2 * a].offset, *dB = m->grads + L->tensors[2 * a + 1].offset;
  const float *dK = L->dkernel;
  /* dA [r, in] += scale B^T dK; dB [out, r] += scale dK A^T */
  be->gemm(1, 0, r, in, out, L->scale, B, r, dK, in, 1.0f, dA, in);
  be->gemm(0, 1, out, r, in, L->scale, dK, in, A, in, 1.0f, dB, r);
  if (dw)
    be->axpby(dw, 1.0f, dw, 1.0f, dK, (size_t)out * in);
}

void cohort_lora_init_tensor(const CohortModel *m, guint64 seed, guint k, float *dst)
{
  const CohortLora *L = m->lora;
  const CohortTensorInfo *t = &L->tensors[k];
  if (k % 2 == 1) {
    memset(dst, 0, t->numel * sizeof(float));
    return;
  }
  /* PEFT: kaiming_uniform_(a=sqrt(5)) on [r, in] (a kernel's fan-in: c_in·k·k), i.e. bound
   * sqrt(6 / ((1 + 5) in)) */
  double bound = 1.0 / sqrt((double)(t->numel / (size_t)t->shape[0]));
  cohort_rng_fill_uniform(dst, t->numel, bound, cohort_rng_tensor_seed(seed ^ LORA_INIT_SALT, k));
}

void cohort_lora_init(CohortModel *m, guint64 seed)
{
  const CohortLora *L = m->lora;
  for (guint k = 0; L && k < L->n_tensors; k++) {
    const CohortTensorInfo *t = &L->tensors[k];
    g_autofree float *host = g_new(float, MAX(t->numel, 1));
    cohort_lora_init_tensor(m, seed, k, host);
    m->be->upload(m->params + t->offset, host, t->numel * sizeof(float));
  }
}

void cohort_lora_set_train_batch(CohortModel *m, const CohortBatch *batch, guint64 seed)
{
  CohortLora *L = m->lora;
  if (!L || L->dropout <= 0)
    return;
  L->drop_batch = 0;
  if (!batch)
    return;
  g_return_if_fail(batch->B >= 1 && batch->B <= L->max_batch);
  g_autofree guint64 *keys = g_new(guint64, batch->B);
  for (int b = 0; b < batch->B; b++)
    keys[b] =
        cohort_rng_key(seed ^ LORA_DROPOUT_SALT, (guint64)batch->epoch, batch->example_ids[b]);
  m->be->upload(L->keys, keys, (size_t)batch->B * sizeof(guint64));
  L->drop_batch = batch->B;
}

void cohort_lora_merge(const CohortModel *m, const float *params, float *merged)
{
  if (merged != params)
    memcpy(merged, params, m->n_params * sizeof(float));
  const CohortLora *L = m->lora;
  for (guint a = 0; L && a < L->n; a++) {
    const CohortLoraAdapter *ad = &L->adapters[a];
    const float *A = params + L->tensors[2 * a].offset;
    const float *B = params + L->tensors[2 * a + 1].offset;
    size_t w = m->tensors[ad->target].offset;
    gboolean in_out = ad->kind == COHORT_ADAPT_CONV1D; /* stored [in, out] */
    for (int o = 0; o < ad->out; o++)
      for (int i = 0; i < ad->in; i++) {
        double d = 0;
        for (int k = 0; k < L->rank; k++)
          d += (double)B[(size_t)o * L->rank + k] * A[(size_t)k * ad->in + i];
        size_t at = w + (in_out ? (size_t)i * ad->out + o : (size_t)o * ad->in + i);
        merged[at] = (float)((double)params[at] + (double)L->scale * d);
      }
  }
}

/* Convolutions through oneDNN's primitives: forward, backward data and backward weights, with
 * the activations in the caller's layout and the weights in PyTorch's [O, C, K, K], reordered
 * to the primitive's blocked layout on each call (they change every step; the copy is small
 * beside the activations). oneDNN chooses the algorithm (convolution_auto: direct or Winograd)
 * and, where the activations are free, their layout:
 *  - NHWC, the ResNet's layout: oneDNN's direct AVX-512 kernels read it in place, except that
 *    a 3×3 stride-1 convolution of 32 channels or more gets the layout oneDNN prefers, with
 *    reorders in and out, because there it picks Winograd (F(4×4, 3×3), on its blocked layout
 *    only), which more than pays for the reorders (resnet18 at 224×224, one thread: 1.33 s a
 *    step direct, 1.01 s so; the results stay within 1e-6 of the im2col reference's scale,
 *    tests/test-layers-nhwc.c);
 *  - NCHW: always reordered to the layout oneDNN picks and back, as PyTorch does.
 *
 * A primitive is made for one exact problem and making one costs far more than running a small
 * one, so each thread keeps them in a cache keyed by the problem, with the reorders and memory
 * objects around them; a training step makes the same few dozen convolutions every time, so
 * after the first step every call is a hit. Scratch (reordered operands and oneDNN's own
 * scratchpad) is the thread's conv scratch, shared by every primitive, instead of a scratchpad
 * per primitive. */
#include "kernels/cpu/conv-paths.h"
#include "kernels/cpu/onednn.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { PASS_FWD, PASS_BWD_DATA, PASS_BWD_WEIGHTS };
enum { N_ARGS = 3 };

typedef struct Key {
  int pass, nhwc, accumulate;
  CohortConvDims d;
} Key;

/* One operand of the convolution: the caller's tensor and, where the layouts differ (or an
 * output is added to rather than written), the primitive's own copy and the reorder between
 * them (user to inner for inputs, inner to user for outputs, with a sum for accumulation). */
typedef struct Arg {
  int arg, is_output;
  dnnl_memory_t user, inner; /* inner NULL: the primitive uses user directly */
  dnnl_primitive_t reorder;
  size_t inner_bytes;
} Arg;

typedef struct Entry {
  Key key;
  int used, failed; /* failed: oneDNN declined the problem; not tried again */
  dnnl_primitive_t prim;
  Arg args[N_ARGS];
  dnnl_memory_t pad;
  size_t pad_bytes;
  const char *impl;
} Entry;

/* The distinct convolutions of a ResNet-101 step, three passes each, fit. */
#define CACHE_SLOTS 160

typedef struct Cache {
  Entry e[CACHE_SLOTS];
  unsigned next_victim;
} Cache;

static pthread_key_t cache_key;
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;

static void drop(Entry *e)
{
  for (int i = 0; i < N_ARGS; i++) {
    Arg *a = &e->args[i];
    if (a->user)
      dnnl_memory_destroy(a->user);
    if (a->inner)
      dnnl_memory_destroy(a->inner);
    if (a->reorder)
      dnnl_primitive_destroy(a->reorder);
  }
  if (e->pad)
    dnnl_memory_destroy(e->pad);
  if (e->prim)
    dnnl_primitive_destroy(e->prim);
  memset(e, 0, sizeof *e);
}

static void cache_free(void *p)
{
  Cache *c = p;
  if (!c)
    return;
  for (int i = 0; i < CACHE_SLOTS; i++)
    drop(&c->e[i]);
  free(c);
}

static void cache_free_at_exit(void)
{
  Cache *c = pthread_getspecific(cache_key);
  pthread_setspecific(cache_key, NULL);
  cache_free(c);
}

static void cache_init(void)
{
  if (pthread_key_create(&cache_key, cache_free) == 0)
    atexit(cache_free_at_exit);
}

static Cache *thread_cache(void)
{
  pthread_once(&cache_once, cache_init);
  Cache *c = pthread_getspecific(cache_key);
  if (!c) {
    c = calloc(1, sizeof *c);
    if (c && pthread_setspecific(cache_key, c) != 0) {
      free(c);
      c = NULL;
    }
  }
  return c;
}

static int md_act(dnnl_memory_desc_t *md, int nhwc, int any, int n, int c, int h, int w)
{
  dnnl_dims_t dims = {n, c, h, w};
  dnnl_format_tag_t tag = any ? dnnl_format_tag_any : (nhwc ? dnnl_nhwc : dnnl_nchw);
  return dnnl_memory_desc_init_by_tag(md, 4, dims, dnnl_f32, tag) == dnnl_success;
}

static int md_weights(dnnl_memory_desc_t *md, const CohortConvDims *d, int any)
{
  dnnl_dims_t dims = {d->O, d->C, d->K, d->K};
  return dnnl_memory_desc_init_by_tag(md, 4, dims, dnnl_f32,
                                      any ? dnnl_format_tag_any : dnnl_oihw) == dnnl_success;
}

/* The user-layout descriptions of the three operands of `pass`, in Arg order. */
static int user_mds(const Key *k, dnnl_memory_desc_t md[N_ARGS], int args[N_ARGS])
{
  const CohortConvDims *d = &k->d;
  dnnl_memory_desc_t src, wei, dst;
  if (!md_act(&src, k->nhwc, 0, d->B, d->C, d->H, d->W) || !md_weights(&wei, d, 0) ||
      !md_act(&dst, k->nhwc, 0, d->B, d->O, d->Ho, d->Wo))
    return 0;
  static const int arg_ids[3][N_ARGS] = {
      {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST},
      {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC},
      {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS},
  };
  const dnnl_memory_desc_t *order[3][N_ARGS] = {
      {&src, &wei, &dst}, {&dst, &wei, &src}, {&src, &dst, &wei}};
  for (int i = 0; i < N_ARGS; i++) {
    md[i] = *order[k->pass][i];
    args[i] = arg_ids[k->pass][i];
  }
  return 1;
}

/* A 3×3 stride-1 convolution of 32 channels or more in and out, where Winograd wins: at 16
 * channels oneDNN's Winograd took 2.4 times as long as its direct NHWC kernel (CIFAR's
 * 16 → 16 at 32×32, batch 128), at 32 and 64 channels 0.7 and 0.5 times (measured on this
 * AVX-512 machine, one thread; docs/benchmarks.md). A fixed rule, not a timing at run time,
 * so the same shapes always run the same kernels and runs repeat bit for bit. */
static int winograd_layout(const CohortConvDims *d)
{
  return d->K == 3 && d->S == 1 && d->C >= 32 && d->O >= 32;
}

/* The convolution's primitive description for `pass`: NHWC activations as they are (but see
 * winograd_layout), NCHW ones and the weights in whatever layout oneDNN prefers.
 * Backward passes take the forward's description as their hint, as oneDNN requires. */
static dnnl_primitive_desc_t make_pd(const Key *k, int pass, dnnl_primitive_attr_t attr)
{
  const CohortConvDims *d = &k->d;
  int any = !k->nhwc || winograd_layout(d);
  dnnl_memory_desc_t src, wei, dst;
  if (!md_act(&src, k->nhwc, any, d->B, d->C, d->H, d->W) || !md_weights(&wei, d, 1) ||
      !md_act(&dst, k->nhwc, any, d->B, d->O, d->Ho, d->Wo))
    return NULL;
  /* PyTorch's padding is P on both sides with the output floored; oneDNN wants the right
   * padding the output actually uses (never below 0: the floor drops the rest). */
  int pr_h = (d->Ho - 1) * d->S + d->K - d->H - d->P,
      pr_w = (d->Wo - 1) * d->S + d->K - d->W - d->P;
  dnnl_dims_t strides = {d->S, d->S}, pad_l = {d->P, d->P};
  dnnl_dims_t pad_r = {pr_h > 0 ? pr_h : 0, pr_w > 0 ? pr_w : 0};
  dnnl_convolution_desc_t desc;
  dnnl_status_t st;
  if (pass == PASS_FWD)
    st = dnnl_convolution_forward_desc_init(&desc, dnnl_forward_training, dnnl_convolution_auto,
                                            &src, &wei, NULL, &dst, strides, pad_l, pad_r);
  else if (pass == PASS_BWD_DATA)
    st = dnnl_convolution_backward_data_desc_init(&desc, dnnl_convolution_auto, &src, &wei, &dst,
                                                  strides, pad_l, pad_r);
  else
    st = dnnl_convolution_backward_weights_desc_init(&desc, dnnl_convolution_auto, &src, &wei, NULL,
                                                     &dst, strides, pad_l, pad_r);
  if (st != dnnl_success)
    return NULL;
  dnnl_primitive_desc_t hint = NULL;
  if (pass != PASS_FWD && !(hint = make_pd(k, PASS_FWD, NULL)))
    return NULL;
  dnnl_primitive_desc_t pd = NULL;
  if (dnnl_primitive_desc_create(&pd, &desc, attr, cohort_onednn_engine(), hint) != dnnl_success)
    pd = NULL;
  if (hint)
    dnnl_primitive_desc_destroy(hint);
  return pd;
}

static dnnl_query_t arg_query(int arg)
{
  switch (arg) {
  case DNNL_ARG_SRC:
    return dnnl_query_src_md;
  case DNNL_ARG_WEIGHTS:
    return dnnl_query_weights_md;
  case DNNL_ARG_DST:
    return dnnl_query_dst_md;
  case DNNL_ARG_DIFF_SRC:
    return dnnl_query_diff_src_md;
  case DNNL_ARG_DIFF_DST:
    return dnnl_query_diff_dst_md;
  default:
    return dnnl_query_diff_weights_md;
  }
}

/* A reorder from `from` to `to`; with `sum`, it adds to what `to` holds. */
static dnnl_primitive_t make_reorder(const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to,
                                     int sum)
{
  dnnl_engine_t eng = cohort_onednn_engine();
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t ops = NULL;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_primitive_t prim = NULL;
  if (dnnl_primitive_attr_create(&attr) != dnnl_success)
    return NULL;
  if (sum && (dnnl_post_ops_create(&ops) != dnnl_success ||
              dnnl_post_ops_append_sum(ops, 1.0f) != dnnl_success ||
              dnnl_primitive_attr_set_post_ops(attr, ops) != dnnl_success))
    goto done;
  if (dnnl_reorder_primitive_desc_create(&pd, from, eng, to, eng, attr) != dnnl_success)
    goto done;
  if (dnnl_primitive_create(&prim, pd) != dnnl_success)
    prim = NULL;
done:
  if (pd)
    dnnl_primitive_desc_destroy(pd);
  if (ops)
    dnnl_post_ops_destroy(ops);
  dnnl_primitive_attr_destroy(attr);
  return prim;
}

static int build_arg(Arg *a, int arg, int is_output, int accumulate, const dnnl_memory_desc_t *user,
                     const dnnl_memory_desc_t *inner)
{
  dnnl_engine_t eng = cohort_onednn_engine();
  a->arg = arg;
  a->is_output = is_output;
  if (dnnl_memory_create(&a->user, user, eng, DNNL_MEMORY_NONE) != dnnl_success) {
    a->user = NULL;
    return 0;
  }
  int sum = is_output && accumulate;
  if (!sum && dnnl_memory_desc_equal(user, inner))
    return 1;
  if (dnnl_memory_create(&a->inner, inner, eng, DNNL_MEMORY_NONE) != dnnl_success) {
    a->inner = NULL;
    return 0;
  }
  a->inner_bytes = dnnl_memory_desc_get_size(inner);
  a->reorder = is_output ? make_reorder(inner, user, sum) : make_reorder(user, inner, 0);
  return a->reorder != NULL;
}

static int build(Entry *e, const Key *k)
{
  e->key = *k;
  e->used = 1;
  dnnl_primitive_attr_t attr;
  if (dnnl_primitive_attr_create(&attr) != dnnl_success)
    return 0;
  dnnl_primitive_desc_t pd = NULL;
  if (dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success)
    pd = make_pd(k, k->pass, attr);
  dnnl_primitive_attr_destroy(attr);
  if (!pd)
    return 0;
  int ok = dnnl_primitive_create(&e->prim, pd) == dnnl_success;
  if (!ok)
    e->prim = NULL;
  dnnl_memory_desc_t user[N_ARGS];
  int ids[N_ARGS];
  ok = ok && user_mds(k, user, ids);
  /* Backward weights always adds to the gradient; backward data when asked. */
  int acc = k->pass == PASS_BWD_WEIGHTS || k->accumulate;
  for (int i = 0; ok && i < N_ARGS; i++) {
    const dnnl_memory_desc_t *inner = dnnl_primitive_desc_query_md(pd, arg_query(ids[i]), 0);
    ok = inner && build_arg(&e->args[i], ids[i], i == N_ARGS - 1, acc, &user[i], inner);
  }
  const dnnl_memory_desc_t *pad = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  if (ok && pad && dnnl_memory_desc_get_size(pad) > 0) {
    e->pad_bytes = dnnl_memory_desc_get_size(pad);
    ok = dnnl_memory_create(&e->pad, pad, cohort_onednn_engine(), DNNL_MEMORY_NONE) == dnnl_success;
    if (!ok)
      e->pad = NULL;
  }
  const char *impl = "?";
  const_dnnl_primitive_desc_t kept;
  if (ok && dnnl_primitive_get_primitive_desc(e->prim, &kept) == dnnl_success)
    dnnl_primitive_desc_query(kept, dnnl_query_impl_info_str, 0, &impl);
  e->impl = impl;
  dnnl_primitive_desc_destroy(pd);
  return ok;
}

static Entry *lookup(const Key *k)
{
  if (!cohort_onednn_engine())
    return NULL;
  Cache *c = thread_cache();
  if (!c)
    return NULL;
  for (int i = 0; i < CACHE_SLOTS; i++)
    if (c->e[i].used && memcmp(&c->e[i].key, k, sizeof *k) == 0)
      return c->e[i].failed ? NULL : &c->e[i];
  Entry *e = &c->e[c->next_victim++ % CACHE_SLOTS];
  drop(e);
  if (!build(e, k)) {
    drop(e);
    e->key = *k;
    e->used = e->failed = 1;
    return NULL;
  }
  return e;
}

static int exec(dnnl_primitive_t prim, int n, const dnnl_exec_arg_t *args)
{
  return dnnl_primitive_execute(prim, cohort_onednn_stream(), n, args) == dnnl_success;
}

/* Runs the entry on the caller's three tensors (in Arg order). */
static int run(Entry *e, void *const ptr[N_ARGS])
{
  dnnl_exec_arg_t conv_args[N_ARGS + 1];
  for (int i = 0; i < N_ARGS; i++) {
    Arg *a = &e->args[i];
    dnnl_memory_set_data_handle(a->user, ptr[i]);
    dnnl_memory_t used = a->user;
    if (a->inner) {
      dnnl_memory_set_data_handle(
          a->inner, cohort_cpu_conv_scratch(COHORT_CONV_SCRATCH_ONEDNN_ARG0 + i, a->inner_bytes));
      used = a->inner;
      dnnl_exec_arg_t r[2] = {{DNNL_ARG_FROM, a->user}, {DNNL_ARG_TO, a->inner}};
      if (!a->is_output && !exec(a->reorder, 2, r))
        return 0;
    }
    conv_args[i] = (dnnl_exec_arg_t){a->arg, used};
  }
  int n = N_ARGS;
  if (e->pad) {
    dnnl_memory_set_data_handle(
        e->pad, cohort_cpu_conv_scratch(COHORT_CONV_SCRATCH_ONEDNN_PAD, e->pad_bytes));
    conv_args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, e->pad};
  }
  if (!exec(e->prim, n, conv_args))
    return 0;
  Arg *out = &e->args[N_ARGS - 1];
  if (out->inner) {
    dnnl_exec_arg_t r[2] = {{DNNL_ARG_FROM, out->inner}, {DNNL_ARG_TO, out->user}};
    if (!exec(out->reorder, 2, r))
      return 0;
  }
  return dnnl_stream_wait(cohort_onednn_stream()) == dnnl_success;
}

/* oneDNN 2.6's backward weights of a 1×1 convolution with stride > 1 (its "reduce to unit
 * stride" path, NHWC) writes out of bounds: a CIFAR ResNet's 4 -> 8 shortcut at 64 px corrupted
 * the heap after another strided 1×1 shape, and with a scratchpad of its own the 8 -> 16 one at
 * 256 px still crashed (fuzz-folders' 1 x 16384 image at image_size 512 found it;
 * tests/backend-ops-conv.c keeps the sequence). Declined here, so the caller runs the im2col
 * reference for that pass (a shortcut's cost, a few per network). */
static int declined(int pass, const CohortConvDims *d)
{
  return pass == PASS_BWD_WEIGHTS && d->K == 1 && d->S > 1;
}

static int conv(int pass, int nhwc, int accumulate, const CohortConvDims *d, void *a, void *b,
                void *c)
{
  if (declined(pass, d))
    return 0;
  Key k;
  memset(&k, 0, sizeof k); /* the key is compared with memcmp: no stray padding bytes */
  k.pass = pass;
  k.nhwc = nhwc;
  k.accumulate = accumulate;
  k.d = *d;
  Entry *e = lookup(&k);
  void *ptr[N_ARGS] = {a, b, c};
  return e && run(e, ptr);
}

int cohort_onednn_conv2d_forward(int nhwc, float *out, const float *inp, const float *weight,
                                 const CohortConvDims *d)
{
  return conv(PASS_FWD, nhwc, 0, d, (void *)inp, (void *)weight, out);
}

int cohort_onednn_conv2d_backward_data(int nhwc, float *dinp, int accumulate, const float *dout,
                                       const float *weight, const CohortConvDims *d)
{
  return conv(PASS_BWD_DATA, nhwc, accumulate != 0, d, (void *)dout, (void *)weight, dinp);
}

int cohort_onednn_conv2d_backward_weights(int nhwc, float *dweight, const float *dout,
                                          const float *inp, const CohortConvDims *d)
{
  return conv(PASS_BWD_WEIGHTS, nhwc, 0, d, (void *)inp, (void *)dout, dweight);
}

const char *cohort_onednn_conv2d_impl(int pass, int nhwc, const CohortConvDims *d)
{
  Key k;
  memset(&k, 0, sizeof k);
  k.pass = pass;
  k.nhwc = nhwc;
  k.d = *d;
  Entry *e = lookup(&k);
  return e ? e->impl : NULL;
}

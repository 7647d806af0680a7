/* Matrix products through oneDNN: its matmul primitive with bf16 operands and fp32 accumulation
 * (avx512_core_bf16 kernels, vdpbf16ps, where the CPU has it) and in fp32 (for the GEMM study),
 * and dnnl_sgemm (the fp32 path).
 *
 * A primitive is made for one exact problem (shape, strides, transposes, alpha, beta); making
 * one costs far more than a small GEMM, so they are kept in a small per-thread cache keyed by
 * the problem. A training step makes the same few dozen products every time, so after the
 * first step every call is a cache hit. */
#include "kernels/cpu/gemm-paths.h"
#include "kernels/cpu/onednn.h"

#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

typedef struct Key {
  int bf16, trans_a, trans_b, M, N, K, lda, ldb, ldc;
  float alpha, beta;
} Key;

typedef struct Entry {
  Key key;
  dnnl_primitive_t prim; /* NULL: slot empty */
  dnnl_memory_t a, b, c;
  const char *impl; /* oneDNN's implementation name, owned by the primitive */
} Entry;

/* More than the distinct products of a GPT step (6 per layer kind, 3 for the head). */
#define CACHE_SLOTS 64

static _Thread_local Entry cache[CACHE_SLOTS];
static _Thread_local unsigned next_victim;

static dnnl_engine_t engine;
static dnnl_stream_t stream;
static pthread_once_t engine_once = PTHREAD_ONCE_INIT;

static void make_engine(void)
{
  if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) {
    engine = NULL;
    return;
  }
  if (dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) != dnnl_success) {
    dnnl_engine_destroy(engine);
    engine = NULL;
  }
}

int cohort_onednn_ready(void)
{
  pthread_once(&engine_once, make_engine);
  return engine != NULL;
}

dnnl_engine_t cohort_onednn_engine(void)
{
  return cohort_onednn_ready() ? engine : NULL;
}

dnnl_stream_t cohort_onednn_stream(void)
{
  return cohort_onednn_ready() ? stream : NULL;
}

int cohort_onednn_has_bf16_hardware(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
  /* Both: the instructions, and oneDNN willing to use them (ONEDNN_MAX_CPU_ISA may cap it). */
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512bf16"))
    return 0;
  dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  return (isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16;
#else
  return 0;
#endif
}

const char *cohort_onednn_isa_name(void)
{
  switch (dnnl_get_effective_cpu_isa()) {
  case dnnl_cpu_isa_sse41:
    return "SSE4.1";
  case dnnl_cpu_isa_avx:
    return "AVX";
  case dnnl_cpu_isa_avx2:
    return "AVX2";
  case dnnl_cpu_isa_avx2_vnni:
    return "AVX2 VNNI";
  case dnnl_cpu_isa_avx512_core:
    return "AVX-512";
  case dnnl_cpu_isa_avx512_core_vnni:
    return "AVX-512 VNNI";
  case dnnl_cpu_isa_avx512_core_bf16:
    return "AVX-512 BF16";
  case dnnl_cpu_isa_avx512_core_amx:
    return "AVX-512 AMX";
  default:
    return "generic";
  }
}

const char *cohort_onednn_version(void)
{
  static char text[32];
  const dnnl_version_t *v = dnnl_version();
  snprintf(text, sizeof text, "%d.%d.%d", v->major, v->minor, v->patch);
  return text;
}

/* The stored matrix of op(X) [rows, cols] as a 2-D descriptor of op(X): a transposed
 * operand is the same memory read with swapped strides. */
static void describe(dnnl_memory_desc_t *md, int rows, int cols, int trans, int ld,
                     dnnl_data_type_t type)
{
  dnnl_dims_t dims = {rows, cols};
  dnnl_dims_t strides = {trans ? 1 : ld, trans ? ld : 1};
  dnnl_memory_desc_init_by_strides(md, 2, dims, type, strides);
}

static void drop(Entry *e)
{
  if (!e->prim)
    return;
  dnnl_memory_destroy(e->a);
  dnnl_memory_destroy(e->b);
  dnnl_memory_destroy(e->c);
  dnnl_primitive_destroy(e->prim);
  memset(e, 0, sizeof *e);
}

static dnnl_status_t make_attr(dnnl_primitive_attr_t *attr, float alpha, float beta)
{
  dnnl_status_t st = dnnl_primitive_attr_create(attr);
  if (st != dnnl_success)
    return st;
  if (alpha != 1.0f)
    st = dnnl_primitive_attr_set_output_scales(*attr, 1, 0, &alpha);
  if (st == dnnl_success && beta != 0.0f) {
    /* C = alpha * A B + beta * C: the sum post-op adds beta times C's old value. */
    dnnl_post_ops_t ops;
    st = dnnl_post_ops_create(&ops);
    if (st == dnnl_success) {
      st = dnnl_post_ops_append_sum(ops, beta);
      if (st == dnnl_success)
        st = dnnl_primitive_attr_set_post_ops(*attr, ops);
      dnnl_post_ops_destroy(ops);
    }
  }
  return st;
}

static int build(Entry *e, const Key *k)
{
  dnnl_data_type_t in = k->bf16 ? dnnl_bf16 : dnnl_f32;
  dnnl_memory_desc_t a_md, b_md, c_md;
  describe(&a_md, k->M, k->K, k->trans_a, k->lda, in);
  describe(&b_md, k->K, k->N, k->trans_b, k->ldb, in);
  describe(&c_md, k->M, k->N, 0, k->ldc, dnnl_f32);
  dnnl_matmul_desc_t desc;
  if (dnnl_matmul_desc_init(&desc, &a_md, &b_md, NULL, &c_md) != dnnl_success)
    return 0;
  dnnl_primitive_attr_t attr;
  if (make_attr(&attr, k->alpha, k->beta) != dnnl_success)
    return 0;
  dnnl_primitive_desc_t pd;
  dnnl_status_t st = dnnl_primitive_desc_create(&pd, &desc, attr, engine, NULL);
  dnnl_primitive_attr_destroy(attr);
  if (st != dnnl_success)
    return 0;
  st = dnnl_primitive_create(&e->prim, pd);
  dnnl_primitive_desc_destroy(pd);
  if (st != dnnl_success) {
    e->prim = NULL;
    return 0;
  }
  /* The name lives in the primitive's own copy of the descriptor. */
  const char *impl = "?";
  const_dnnl_primitive_desc_t kept;
  if (dnnl_primitive_get_primitive_desc(e->prim, &kept) == dnnl_success)
    dnnl_primitive_desc_query(kept, dnnl_query_impl_info_str, 0, &impl);
  e->impl = impl;
  if (dnnl_memory_create(&e->a, &a_md, engine, DNNL_MEMORY_NONE) != dnnl_success ||
      dnnl_memory_create(&e->b, &b_md, engine, DNNL_MEMORY_NONE) != dnnl_success ||
      dnnl_memory_create(&e->c, &c_md, engine, DNNL_MEMORY_NONE) != dnnl_success) {
    dnnl_primitive_destroy(e->prim);
    e->prim = NULL;
    return 0;
  }
  e->key = *k;
  return 1;
}

static Entry *lookup(const Key *k)
{
  for (int i = 0; i < CACHE_SLOTS; i++)
    if (cache[i].prim && memcmp(&cache[i].key, k, sizeof *k) == 0)
      return &cache[i];
  Entry *e = &cache[next_victim++ % CACHE_SLOTS];
  drop(e);
  return build(e, k) ? e : NULL;
}

static int run(const Key *k, const void *A, const void *B, float *C, const char **impl)
{
  if (!cohort_onednn_ready())
    return 0;
  Entry *e = lookup(k);
  if (!e)
    return 0;
  dnnl_memory_set_data_handle(e->a, (void *)A);
  dnnl_memory_set_data_handle(e->b, (void *)B);
  dnnl_memory_set_data_handle(e->c, C);
  dnnl_exec_arg_t args[3] = {
      {DNNL_ARG_SRC, e->a},
      {DNNL_ARG_WEIGHTS, e->b},
      {DNNL_ARG_DST, e->c},
  };
  if (dnnl_primitive_execute(e->prim, stream, 3, args) != dnnl_success)
    return 0;
  if (impl)
    *impl = e->impl;
  return dnnl_stream_wait(stream) == dnnl_success;
}

int cohort_onednn_gemm_f32(int trans_a, int trans_b, int M, int N, int K, float alpha,
                           const float *A, int lda, const float *B, int ldb, float beta, float *C,
                           int ldc, const char **impl)
{
  Key k = {0, trans_a, trans_b, M, N, K, lda, ldb, ldc, alpha, beta};
  return run(&k, A, B, C, impl);
}

int cohort_onednn_gemm_bf16(int trans_a, int trans_b, int M, int N, int K, float alpha,
                            const uint16_t *A, int lda, const uint16_t *B, int ldb, float beta,
                            float *C, int ldc, const char **impl)
{
  Key k = {1, trans_a, trans_b, M, N, K, lda, ldb, ldc, alpha, beta};
  return run(&k, A, B, C, impl);
}

int cohort_onednn_sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                        int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
  return dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta,
                    C, ldc) == dnnl_success;
}

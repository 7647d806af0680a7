/* Fuzzing the .safetensors reader (cohort_safetensors_open and _read_f32, in process): a
 * file of six tensors (F32, F16, BF16, a scalar, an empty one, I32) built here from its own
 * description, then broken on purpose: header lengths off by a few bytes, truncated or
 * padded data, wrong dtypes, shapes and offsets (gaps, overlaps, overflow), repeated keys,
 * strict-JSON violations in the header, never-valid and random bytes, and bit flips in the
 * data whose values the generator knows; then the saved regression files. */
#include <math.h>
#include <sys/stat.h>

#include "engine/model/safetensors.h"
#include "fuzz-util.h"

typedef struct {
  char name[40];
  char dtype[24]; /* as written, quotes and all: "\"F32\"" */
  int ndim;
  gint64 shape[10];
  guint64 begin, end;
} Spec;

#define N_BASE 6

typedef struct {
  FuzzTally t;
  FuzzRng rng;
  Spec base[N_BASE];
  guint8 data[56];
  float want[N_BASE][6]; /* the values of the float tensors */
} Ctx;

/* ---- the generator's own model of a file ---- */

static void put_f32(guint8 *p, float v)
{
  guint32 b;
  memcpy(&b, &v, 4);
  b = GUINT32_TO_LE(b);
  memcpy(p, &b, 4);
}

static void put_u16(guint8 *p, guint16 v)
{
  v = GUINT16_TO_LE(v);
  memcpy(p, &v, 2);
}

static void init_base(Ctx *c)
{
  const Spec base[N_BASE] = {
      {"a", "\"F32\"", 2, {2, 3}, 0, 24},   {"b", "\"F16\"", 1, {4}, 24, 32},
      {"c", "\"BF16\"", 2, {2, 2}, 32, 40}, {"d", "\"F32\"", 0, {0}, 40, 44},
      {"e", "\"F32\"", 2, {0, 5}, 44, 44},  {"f", "\"I32\"", 1, {3}, 44, 56},
  };
  memcpy(c->base, base, sizeof base);
  const float a[6] = {-1, -0.5f, 0, 0.5f, 1, 1.5f};
  for (int i = 0; i < 6; i++)
    put_f32(c->data + 4 * i, a[i]);
  memcpy(c->want[0], a, sizeof a);
  /* Half and bfloat16 bit patterns of exactly representable values. */
  const guint16 half[4] = {0x3C00, 0xC000, 0x3800, 0x7BFF};
  const float half_v[4] = {1, -2, 0.5f, 65504};
  const guint16 bf[4] = {0x3F80, 0xBFC0, 0x4040, 0x3E80};
  const float bf_v[4] = {1, -1.5f, 3, 0.25f};
  for (int i = 0; i < 4; i++) {
    put_u16(c->data + 24 + 2 * i, half[i]);
    put_u16(c->data + 32 + 2 * i, bf[i]);
  }
  memcpy(c->want[1], half_v, sizeof half_v);
  memcpy(c->want[2], bf_v, sizeof bf_v);
  put_f32(c->data + 40, 42);
  c->want[3][0] = 42;
  for (int i = 0; i < 3; i++) {
    guint32 v = GUINT32_TO_LE((guint32)i + 1);
    memcpy(c->data + 44 + 4 * i, &v, 4);
  }
}

static void append_spec(GString *h, const Spec *s)
{
  g_string_append_printf(h, "\"%s\":{\"dtype\":%s,\"shape\":[", s->name, s->dtype);
  for (int d = 0; d < s->ndim; d++)
    g_string_append_printf(h, "%s%" G_GINT64_FORMAT, d ? "," : "", s->shape[d]);
  g_string_append_printf(h, "],\"data_offsets\":[%" G_GUINT64_FORMAT ",%" G_GUINT64_FORMAT "]}",
                         s->begin, s->end);
}

/* The header of `specs` (in the given order), metadata first when `meta` is given. */
static char *header_of(const Spec *specs, guint n, const char *meta)
{
  GString *h = g_string_new("{");
  if (meta)
    g_string_append_printf(h, "\"__metadata__\":%s", meta);
  for (guint i = 0; i < n; i++) {
    if (h->len > 1)
      g_string_append_c(h, ',');
    append_spec(h, &specs[i]);
  }
  g_string_append_c(h, '}');
  return g_string_free(h, FALSE);
}

/* A whole file: the length field says `len_field` (G_MAXUINT64: the header's true, padded
 * length), the header is padded with spaces to 8 bytes, then `data`. */
static GByteArray *file_of(const char *header, guint64 len_field, const guint8 *data, gsize n)
{
  gsize hl = strlen(header);
  gsize padded = (hl + 7) & ~(gsize)7;
  guint64 le = GUINT64_TO_LE(len_field == G_MAXUINT64 ? padded : len_field);
  GByteArray *f = g_byte_array_new();
  g_byte_array_append(f, (const guint8 *)&le, 8);
  g_byte_array_append(f, (const guint8 *)header, (guint)hl);
  for (gsize i = hl; i < padded; i++)
    g_byte_array_append(f, (const guint8 *)" ", 1);
  g_byte_array_append(f, data, (guint)n);
  return f;
}

/* ---- judging one file ---- */

/* An accepted file holds exactly `want` (n tensors, in data order) with the values the
 * generator wrote (`bits`: the data section as it should read). */
static void check_contents(Ctx *c, const char *path, CohortStFile *f, const Spec *want, guint n,
                           const guint8 *bits)
{
  const char *const *names = cohort_safetensors_names(f);
  for (guint i = 0; i < n; i++) {
    const Spec *s = &want[i];
    if (!names[i] || strcmp(names[i], s->name) != 0) {
      fuzz_fail(&c->t, path, "wrong accept: tensor %u is \"%s\", the file has \"%s\" there", i,
                names[i] ? names[i] : "(none)", s->name);
      return;
    }
    int64_t shape[8];
    int nd = cohort_safetensors_shape(f, s->name, shape);
    gboolean same = nd == s->ndim;
    gsize numel = 1;
    for (int d = 0; same && d < nd; d++) {
      same = shape[d] == s->shape[d];
      numel *= (gsize)s->shape[d];
    }
    if (!same) {
      fuzz_fail(&c->t, path, "wrong accept: tensor \"%s\" has another shape", s->name);
      return;
    }
    g_autofree float *got = g_new0(float, numel + 1);
    g_autoptr(GError) error = NULL;
    gboolean ok = cohort_safetensors_read_f32(f, s->name, nd, shape, got, &error);
    gboolean is_int = strstr(s->dtype, "32\"") && s->dtype[1] != 'F';
    if (is_int) {
      if (ok || !g_error_matches(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_DTYPE))
        fuzz_fail(&c->t, path, "tensor \"%s\" of dtype %s read as float32", s->name, s->dtype);
      continue;
    }
    if (!ok) {
      fuzz_fail(&c->t, path, "tensor \"%s\" does not read: %s", s->name, error->message);
      return;
    }
    /* F32 values are the data's bits; F16/BF16 the values init_base chose for them. */
    for (gsize k = 0; k < numel; k++) {
      float expect;
      if (strcmp(s->dtype, "\"F32\"") == 0) {
        memcpy(&expect, bits + s->begin + 4 * k, 4);
      } else {
        guint i_base = strcmp(s->dtype, "\"F16\"") == 0 ? 1 : 2;
        expect = c->want[i_base][k];
      }
      if (memcmp(&expect, &got[k], 4) != 0)
        fuzz_fail(&c->t, path, "wrong accept: tensor \"%s\"[%zu] reads %g, the file says %g",
                  s->name, k, got[k], expect);
    }
  }
  if (names[n])
    fuzz_fail(&c->t, path, "wrong accept: an extra tensor \"%s\"", names[n]);
}

/* An accepted file of unknown content: every tensor reads (or is of a non-float dtype). */
static void check_readable(Ctx *c, const char *path, CohortStFile *f)
{
  for (const char *const *n = cohort_safetensors_names(f); *n; n++) {
    int64_t shape[8];
    int nd = cohort_safetensors_shape(f, *n, shape);
    gsize numel = 1;
    for (int d = 0; d < nd; d++)
      numel *= (gsize)shape[d];
    if (numel > 1024) {
      fuzz_fail(&c->t, path, "tensor \"%s\" claims %zu elements in a file of bytes", *n, numel);
      return;
    }
    g_autofree float *got = g_new0(float, numel + 1);
    g_autoptr(GError) error = NULL;
    if (!cohort_safetensors_read_f32(f, *n, nd, shape, got, &error) &&
        !g_error_matches(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_DTYPE))
      fuzz_fail(&c->t, path, "tensor \"%s\" opened but does not read: %s", *n, error->message);
  }
}

/* One case. `want` (n tensors in data order, the data `bits`) is checked when accepted; NULL
 * only checks that everything reads. */
static void run_file(Ctx *c, const char *name, GByteArray *file, FuzzExpect expect,
                     const Spec *want, guint n, const guint8 *bits, const char *needle)
{
  g_autofree char *file_name = g_strconcat(name, ".safetensors", NULL);
  g_autofree char *path = fuzz_case_path(&c->t, file_name);
  if (file)
    fuzz_write(path, file->data, file->len);
  else if (strcmp(name, "fifo") == 0)
    g_assert_cmpint(mkfifo(path, 0600), ==, 0);
  else
    g_assert_cmpint(g_mkdir(path, 0755), ==, 0);
  fuzz_set_current(path);
  c->t.cases++;
  g_autoptr(GError) error = NULL;
  gint64 t0 = g_get_monotonic_time();
  g_autoptr(CohortStFile) f = cohort_safetensors_open(path, &error);
  if (f) {
    if (expect == FUZZ_REFUSE)
      fuzz_fail(&c->t, path, "wrong accept: this %s must be refused", name);
    else if (want)
      check_contents(c, path, f, want, n, bits);
    else
      check_readable(c, path, f);
    c->t.accepted++;
  } else if (expect == FUZZ_ACCEPT) {
    fuzz_fail(&c->t, path, "refused a valid file: %s", error->message);
  } else {
    c->t.refused++;
    const char *problem = fuzz_message_problem(error->message, path);
    if (!problem && needle && !strstr(error->message, needle))
      problem = "the message does not say what is wrong";
    if (problem)
      fuzz_fail(&c->t, path, "%s (want \"%s\"): %s", problem, needle ? needle : "", error->message);
  }
  fuzz_set_current("");
  double secs = (double)(g_get_monotonic_time() - t0) / 1e6;
  if (secs > 2.0 * fuzz_time_scale())
    fuzz_fail(&c->t, path, "took %.1f s", secs);
  if (file)
    g_byte_array_unref(file);
}

/* The base file with tensor `i` described by `s` instead (header only; data unchanged). */
static void spec_case(Ctx *c, const char *name, guint i, Spec s, FuzzExpect expect,
                      const char *needle)
{
  Spec specs[N_BASE];
  memcpy(specs, c->base, sizeof specs);
  specs[i] = s;
  g_autofree char *h = header_of(specs, N_BASE, NULL);
  run_file(c, name, file_of(h, G_MAXUINT64, c->data, sizeof c->data), expect, specs, N_BASE,
           c->data, needle);
}

/* The base header text with `from` (first occurrence) replaced by `to`. */
static void text_case(Ctx *c, const char *name, const char *from, const char *to, FuzzExpect expect,
                      const char *needle)
{
  g_autofree char *h = header_of(c->base, N_BASE, "{\"format\":\"pt\"}");
  char *at = strstr(h, from);
  g_assert_nonnull(at);
  g_autofree char *changed = g_strdup_printf("%.*s%s%s", (int)(at - h), h, to, at + strlen(from));
  run_file(c, name, file_of(changed, G_MAXUINT64, c->data, sizeof c->data), expect, c->base, N_BASE,
           c->data, needle);
}

/* ---- the cases ---- */

static void gen_valid(Ctx *c)
{
  g_autofree char *h = header_of(c->base, N_BASE, "{\"format\":\"pt\",\"k\":\"\\u00e9\"}");
  run_file(c, "base", file_of(h, G_MAXUINT64, c->data, sizeof c->data), FUZZ_ACCEPT, c->base,
           N_BASE, c->data, NULL);
  /* Header order is not data order. */
  Spec shuffled[N_BASE];
  for (guint i = 0; i < N_BASE; i++)
    shuffled[i] = c->base[N_BASE - 1 - i];
  g_autofree char *hs = header_of(shuffled, N_BASE, NULL);
  run_file(c, "header-order", file_of(hs, G_MAXUINT64, c->data, sizeof c->data), FUZZ_ACCEPT,
           c->base, N_BASE, c->data, NULL);
  g_autofree char *padded = g_strdup_printf("%s\n\t\r   ", h);
  run_file(c, "whitespace-padding", file_of(padded, G_MAXUINT64, c->data, sizeof c->data),
           FUZZ_ACCEPT, c->base, N_BASE, c->data, NULL);
  run_file(c, "no-tensors", file_of("{}", G_MAXUINT64, NULL, 0), FUZZ_ACCEPT, c->base, 0, NULL,
           NULL);
  /* Same byte count under another shape or an integer dtype of the same size. */
  Spec s = c->base[0];
  s.ndim = 2, s.shape[0] = 3, s.shape[1] = 2;
  spec_case(c, "shape-3x2", 0, s, FUZZ_ACCEPT, NULL);
  s.ndim = 1, s.shape[0] = 6;
  spec_case(c, "shape-6", 0, s, FUZZ_ACCEPT, NULL);
  s = c->base[0];
  s.ndim = 8;
  gint64 eight[8] = {1, 1, 1, 1, 1, 1, 2, 3};
  memcpy(s.shape, eight, sizeof eight);
  spec_case(c, "shape-8-dims", 0, s, FUZZ_ACCEPT, NULL);
  s = c->base[0];
  g_strlcpy(s.dtype, "\"I32\"", sizeof s.dtype);
  spec_case(c, "dtype-i32", 0, s, FUZZ_ACCEPT, NULL);
  s = c->base[4];
  s.begin = s.end = 24;
  Spec moved[N_BASE];
  memcpy(moved, c->base, sizeof moved);
  moved[4] = s;
  /* An empty tensor between a and b: data order a, e, b, ... */
  Spec order[N_BASE] = {moved[0], moved[4], moved[1], moved[2], moved[3], moved[5]};
  g_autofree char *hm = header_of(moved, N_BASE, NULL);
  run_file(c, "empty-tensor-inside", file_of(hm, G_MAXUINT64, c->data, sizeof c->data), FUZZ_ACCEPT,
           order, N_BASE, c->data, NULL);
  text_case(c, "unknown-member", "\"data_offsets\":[0,24]", "\"data_offsets\":[0,24],\"x\":1",
            FUZZ_ACCEPT, NULL);
  /* Bit flips in the data of the F32 tensors read back as the flipped values. */
  for (int i = 0; i < 10; i++) {
    guint8 bits[sizeof c->data];
    memcpy(bits, c->data, sizeof bits);
    gsize at = i % 5 == 4 ? 40 + fuzz_below(&c->rng, 4) : fuzz_below(&c->rng, 24);
    guint bit = (guint)fuzz_below(&c->rng, 8);
    bits[at] ^= (guint8)(1u << bit);
    g_autofree char *name = g_strdup_printf("data-flip-%zu-bit-%u", at, bit);
    run_file(c, name, file_of(h, G_MAXUINT64, bits, sizeof bits), FUZZ_ACCEPT, c->base, N_BASE,
             bits, NULL);
  }
}

static void gen_lengths(Ctx *c)
{
  /* Spaces at the end, as writers pad: a length one short still ends on valid JSON. */
  g_autofree char *bare = header_of(c->base, N_BASE, NULL);
  g_autofree char *h = g_strdup_printf("%s   ", bare);
  guint64 padded = (strlen(h) + 7) & ~(guint64)7;
  gint64 deltas[] = {-8, -2, -1, 1, 2, 8};
  for (guint i = 0; i < G_N_ELEMENTS(deltas); i++) {
    g_autofree char *name = g_strdup_printf("header-length%+d", (int)deltas[i]);
    run_file(c, name, file_of(h, padded + (guint64)deltas[i], c->data, sizeof c->data), FUZZ_REFUSE,
             NULL, 0, NULL, NULL);
  }
  guint64 absurd[] = {0, 1, padded + sizeof c->data + 1, G_GUINT64_CONSTANT(1) << 63,
                      G_MAXUINT64 - 1};
  for (guint i = 0; i < G_N_ELEMENTS(absurd); i++) {
    g_autofree char *name = g_strdup_printf("header-length-absurd-%u", i);
    run_file(c, name, file_of(h, absurd[i], c->data, sizeof c->data), FUZZ_REFUSE, NULL, 0, NULL,
             "header length");
  }
  gsize cuts[] = {1, 4, 12, sizeof c->data};
  for (guint i = 0; i < G_N_ELEMENTS(cuts); i++) {
    g_autofree char *name = g_strdup_printf("data-short-by-%zu", cuts[i]);
    run_file(c, name, file_of(h, G_MAXUINT64, c->data, sizeof c->data - cuts[i]), FUZZ_REFUSE, NULL,
             0, NULL, NULL);
  }
  guint8 more[sizeof c->data + 8] = {0};
  memcpy(more, c->data, sizeof c->data);
  gsize extra[] = {1, 3, 8};
  for (guint i = 0; i < G_N_ELEMENTS(extra); i++) {
    g_autofree char *name = g_strdup_printf("data-long-by-%zu", extra[i]);
    run_file(c, name, file_of(h, G_MAXUINT64, more, sizeof c->data + extra[i]), FUZZ_REFUSE, NULL,
             0, NULL, "the tensors cover 56 bytes");
  }
  GByteArray *tiny = g_byte_array_new();
  g_byte_array_append(tiny, (const guint8 *)"\x02\0\0", 3);
  run_file(c, "shorter-than-8", tiny, FUZZ_REFUSE, NULL, 0, NULL, "too short");
  run_file(c, "empty-header-with-data", file_of("{}", G_MAXUINT64, c->data, 8), FUZZ_REFUSE, NULL,
           0, NULL, "cover 0 bytes");
}

static void gen_specs(Ctx *c)
{
  const char *dtypes[] = {"\"F33\"", "\"f32\"",   "\"\"",    "\"F32 \"", "32",
                          "null",    "[\"F32\"]", "\"F16\"", "\"F64\""};
  for (guint i = 0; i < G_N_ELEMENTS(dtypes); i++) {
    Spec s = c->base[0];
    g_strlcpy(s.dtype, dtypes[i], sizeof s.dtype);
    g_autofree char *name = g_strdup_printf("dtype-%u", i);
    spec_case(c, name, 0, s, FUZZ_REFUSE, "\"a\"");
  }
  const struct {
    int ndim;
    gint64 shape[9];
  } shapes[] = {{2, {2, 4}},
                {2, {1, 3}},
                {2, {-2, 3}},
                {2, {2, -3}},
                {9, {1, 1, 1, 1, 1, 1, 1, 2, 3}},
                {3, {4294967296, 4294967296, 4294967296}},
                {2, {G_MAXINT64, 2}},
                {2, {0, 6}},
                {0, {0}}};
  for (guint i = 0; i < G_N_ELEMENTS(shapes); i++) {
    Spec s = c->base[0];
    s.ndim = shapes[i].ndim;
    memcpy(s.shape, shapes[i].shape, sizeof shapes[i].shape);
    g_autofree char *name = g_strdup_printf("shape-%u", i);
    spec_case(c, name, 0, s, FUZZ_REFUSE, "\"a\"");
  }
  const guint64 offsets[][2] = {{24, 0}, {0, 23}, {1, 25}, {0, 28}, {4, 28}};
  for (guint i = 0; i < G_N_ELEMENTS(offsets); i++) {
    Spec s = c->base[0];
    s.begin = offsets[i][0], s.end = offsets[i][1];
    g_autofree char *name = g_strdup_printf("offsets-a-%u", i);
    spec_case(c, name, 0, s, FUZZ_REFUSE, NULL);
  }
  /* b overlapping a; b after a gap (its bytes moved 4 on, the file 4 longer); e outside. */
  Spec b = c->base[1];
  b.begin = 20, b.end = 28;
  spec_case(c, "overlap", 1, b, FUZZ_REFUSE, "overlap");
  Spec e = c->base[4];
  e.begin = e.end = 100;
  spec_case(c, "empty-tensor-outside", 4, e, FUZZ_REFUSE, "outside");
  Spec gap[N_BASE];
  memcpy(gap, c->base, sizeof gap);
  guint8 moved[sizeof c->data + 4] = {0};
  memcpy(moved, c->data, 24);
  memcpy(moved + 28, c->data + 24, sizeof c->data - 24);
  for (guint i = 1; i < N_BASE; i++)
    gap[i].begin += 4, gap[i].end += 4;
  g_autofree char *hg = header_of(gap, N_BASE, NULL);
  run_file(c, "gap", file_of(hg, G_MAXUINT64, moved, sizeof moved), FUZZ_REFUSE, NULL, 0, NULL,
           "starts at byte 28");
  const char *offset_texts[][2] = {{"[0,24]", "[0,24,0]"},   {"[0,24]", "[0]"},
                                   {"[0,24]", "[-1,24]"},    {"[0,24]", "[0.0,24]"},
                                   {"[0,24]", "[\"0\",24]"}, {"[0,24]", "null"}};
  for (guint i = 0; i < G_N_ELEMENTS(offset_texts); i++) {
    g_autofree char *name = g_strdup_printf("offsets-text-%u", i);
    text_case(c, name, offset_texts[i][0], offset_texts[i][1], FUZZ_REFUSE, "data_offsets");
  }
  const char *member_texts[][3] = {
      {"\"shape\":[2,3]", "\"shape\":[2.0,3]", "shape"},
      {"\"shape\":[2,3]", "\"shape\":[\"2\",3]", "shape"},
      {"\"shape\":[2,3]", "\"shape\":null", "shape"},
      {"\"shape\":[2,3],", "", "lacks"},
      {"\"dtype\":\"F32\",", "", "lacks"},
      {"{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}", "[1]", "not an object"},
      {"{\"format\":\"pt\"}", "[\"pt\"]", "__metadata__"},
      {"{\"format\":\"pt\"}", "{\"format\":1}", "__metadata__"},
      {"{\"format\":\"pt\"}", "{\"format\":{\"x\":\"y\"}}", "__metadata__"}};
  for (guint i = 0; i < G_N_ELEMENTS(member_texts); i++) {
    g_autofree char *name = g_strdup_printf("member-%u", i);
    text_case(c, name, member_texts[i][0], member_texts[i][1], FUZZ_REFUSE, member_texts[i][2]);
  }
}

static void gen_json(Ctx *c)
{
  const char *edits[][3] = {
      {"{\"__metadata__\"", "\xEF\xBB\xBF{\"__metadata__\"", "byte order mark"},
      {"\"a\":{", "/* c */\"a\":{", "comments"},
      {"\"a\":{", "\"a\":{\"dtype\":\"F32\",", "is given more than once"},
      {"\"b\":{", "\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},\"b\":{",
       "key \"a\" is given more than once"},
      {"{\"__metadata__\":{\"format\":\"pt\"}", "{\"__metadata__\":{},\"__metadata__\":{}",
       "is given more than once"},
      {"{\"format\":\"pt\"}", "{\"format\":\"pt\",\"format\":\"pt\"}", "more than once"},
      {"\"a\":{", "'a':{", "double quotes"},
      {"\"a\":{", "\"a\\u0000\":{", "\\u0000"},
      {"\"a\":{", "\"a\nx\":{", "raw control character"},
      {"[2,3]", "[02,3]", "leading zero"},
      {"[2,3]", "[0x2,3]", "hexadecimal"},
      {"[2,3]", "[NaN,3]", "NaN"},
      {"[2,3]", "[1e400,3]", "too large"},
      {"[2,3]", "[18446744073709551618,3]", "64-bit range"},
      {"\"pt\"", "\"\xFF\"", "not UTF-8"},
      {"\"pt\"", "\"\\ud800\"", "surrogate"},
      {"[0,24]", "[0,24],", "a comma before"},
  };
  for (guint i = 0; i < G_N_ELEMENTS(edits); i++) {
    g_autofree char *name = g_strdup_printf("json-%u", i);
    text_case(c, name, edits[i][0], edits[i][1], FUZZ_REFUSE, edits[i][2]);
  }
  guint depths[] = {65, 60000};
  for (guint i = 0; i < G_N_ELEMENTS(depths); i++) {
    GString *deep = g_string_new(NULL);
    for (guint d = 0; d < depths[i]; d++)
      g_string_append_c(deep, '[');
    for (guint d = 0; d < depths[i]; d++)
      g_string_append_c(deep, ']');
    g_autofree char *to = g_strdup_printf("{\"format\":%s}", deep->str);
    g_string_free(deep, TRUE);
    g_autofree char *name = g_strdup_printf("nested-%u", depths[i]);
    text_case(c, name, "{\"format\":\"pt\"}", to, FUZZ_REFUSE, "nested deeper than 64");
  }
  /* Text after the header object, inside the length the file gives it. */
  g_autofree char *h = header_of(c->base, N_BASE, NULL);
  const char *tails[] = {"{}", "x", "\0\0\0\0", "// c"};
  for (guint i = 0; i < G_N_ELEMENTS(tails); i++) {
    gsize tl = i == 2 ? 4 : strlen(tails[i]);
    GString *t = g_string_new(h);
    g_string_append_len(t, tails[i], (gssize)tl);
    guint64 len = t->len;
    GByteArray *f = file_of("", len, NULL, 0);
    g_byte_array_append(f, (const guint8 *)t->str, (guint)t->len);
    g_byte_array_append(f, c->data, sizeof c->data);
    g_string_free(t, TRUE);
    g_autofree char *name = g_strdup_printf("trailing-%u", i);
    run_file(c, name, f, FUZZ_REFUSE, NULL, 0, NULL, "not valid JSON");
  }
}

static void gen_bytes(Ctx *c)
{
  g_autofree char *h = header_of(c->base, N_BASE, "{\"format\":\"pt\"}");
  gsize hl = strlen(h);
  for (int i = 0; i < 14; i++) {
    GByteArray *f = file_of(h, G_MAXUINT64, c->data, sizeof c->data);
    gsize at = 8 + fuzz_below(&c->rng, hl);
    guint8 b = fuzz_never_valid_byte(&c->rng);
    f->data[at] = b;
    g_autofree char *name = g_strdup_printf("header-0x%02X-at-%zu", b, at);
    run_file(c, name, f, FUZZ_REFUSE, NULL, 0, NULL, "not valid JSON");
  }
  for (int i = 0; i < 24; i++) {
    GByteArray *f = file_of(h, G_MAXUINT64, c->data, sizeof c->data);
    gsize at = 8 + fuzz_below(&c->rng, hl);
    guint8 b = (guint8)fuzz_below(&c->rng, 256);
    f->data[at] = b;
    g_autofree char *name = g_strdup_printf("header-random-0x%02X-at-%zu", b, at);
    run_file(c, name, f, FUZZ_EITHER, NULL, 0, NULL, NULL);
  }
  for (int i = 0; i < 6; i++) {
    GByteArray *f = file_of(h, G_MAXUINT64, c->data, sizeof c->data);
    gsize at = fuzz_below(&c->rng, 8);
    f->data[at] ^= (guint8)(1u << fuzz_below(&c->rng, 8));
    g_autofree char *name = g_strdup_printf("length-flip-%zu", at);
    run_file(c, name, f, FUZZ_REFUSE, NULL, 0, NULL, NULL);
  }
}

/* tests/fuzz/regressions/safetensors/{accept,refuse}-*.safetensors. */
static void replay_regressions(Ctx *c)
{
  g_autofree char *dir =
      g_test_build_filename(G_TEST_DIST, "fuzz", "regressions", "safetensors", NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(GDir) d = g_dir_open(dir, 0, &error);
  g_assert_no_error(error);
  guint n = 0;
  const char *name;
  while ((name = g_dir_read_name(d))) {
    g_autofree char *path = g_build_filename(dir, name, NULL);
    g_autofree char *bytes = NULL;
    gsize len = 0;
    g_assert_true(g_file_get_contents(path, &bytes, &len, NULL));
    GByteArray *f = g_byte_array_new();
    g_byte_array_append(f, (const guint8 *)bytes, (guint)len);
    g_autofree char *stem = g_strndup(name, strlen(name) - strlen(".safetensors"));
    gboolean accept = g_str_has_prefix(name, "accept-");
    g_assert_true(accept || g_str_has_prefix(name, "refuse-"));
    run_file(c, stem, f, accept ? FUZZ_ACCEPT : FUZZ_REFUSE, NULL, 0, NULL, NULL);
    n++;
  }
  g_test_message("%u saved regression inputs", n);
  g_assert_cmpuint(n, >=, 5);
}

static void test_safetensors_fuzz(void)
{
  Ctx c;
  fuzz_tally_init(&c.t, "safetensors");
  c.rng = fuzz_rng_new(2);
  init_base(&c);
  gen_valid(&c);
  gen_lengths(&c);
  gen_specs(&c);
  gen_json(&c);
  gen_bytes(&c);
  replay_regressions(&c);
  /* Last: with a reader that blocks on a FIFO, the watchdog ends the run here. */
  run_file(&c, "folder", NULL, FUZZ_REFUSE, NULL, 0, NULL, "folder");
  run_file(&c, "fifo", NULL, FUZZ_REFUSE, NULL, 0, NULL, "FIFO");
  fuzz_tally_finish(&c.t, 100);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  fuzz_watch_crashes();
  g_test_add_func("/fuzz/safetensors", test_safetensors_fuzz);
  return g_test_run();
}

/* Fuzzing the PyTorch weight-file reader (cohort_torch_file_open and _read_f32, in process): a
 * torch.save-shaped archive built here from its own description (a protocol-2 pickle of an
 * OrderedDict of three tensors over two storages, one a strided view, in a ZIP of stored,
 * 64-byte aligned records), then broken on purpose: every opcode and global outside
 * torch.load(weights_only=True)'s allowlist, calls the allowlist has but that build no dense
 * tensor, stack and MARK underflows, forgotten memo entries, nesting past the cap, views
 * outside their storage, storages of the wrong size, truncated pickles and archives, forged
 * directory counts and offsets, compressed, encrypted and repeated entries, damaged CRCs, the
 * legacy format; then random flips in the pickle (its CRC kept right, so the unpickler reads
 * them) and in the archive, and the saved regression files. */
#include <math.h>
#include <zlib.h>

#include "engine/model/torch-file.h"
#include "fuzz-util.h"

/* ---- a pickle builder ---- */

typedef GByteArray Pk;

static void op(Pk *p, guint8 o)
{
  g_byte_array_append(p, &o, 1);
}

static void bytes(Pk *p, const void *b, gsize n)
{
  g_byte_array_append(p, b, (guint)n);
}

static void global(Pk *p, const char *module, const char *name)
{
  op(p, 'c');
  bytes(p, module, strlen(module));
  op(p, '\n');
  bytes(p, name, strlen(name));
  op(p, '\n');
}

static void unicode(Pk *p, const char *s)
{
  guint32 n = GUINT32_TO_LE((guint32)strlen(s));
  op(p, 'X');
  bytes(p, &n, 4);
  bytes(p, s, strlen(s));
}

static void int1(Pk *p, guint8 v)
{
  op(p, 'K');
  op(p, v);
}

/* A tuple of small integers. */
static void ints(Pk *p, const int *v, int n)
{
  op(p, '(');
  for (int i = 0; i < n; i++)
    int1(p, (guint8)v[i]);
  op(p, 't');
}

typedef struct {
  const char *name, *key, *storage_type;
  int numel, offset, ndim, shape[4], stride[4];
} TensorSpec;

/* The base: a [2, 3] float tensor on storage "0", its transpose [3, 2] on the same storage,
 * a [4] half tensor on storage "1". */
static const TensorSpec base_tensors[] = {
    {"a", "0", "FloatStorage", 6, 0, 2, {2, 3}, {3, 1}},
    {"at", "0", "FloatStorage", 6, 0, 2, {3, 2}, {1, 3}},
    {"h", "1", "HalfStorage", 4, 0, 1, {4}, {1}},
};

static const float a_values[6] = {-1.5f, -0.25f, 0.0f, 0.5f, 2.0f, 3.75f};
static const guint16 h_bits[4] = {0x3C00, 0xC000, 0x3800, 0x7BFF}; /* 1, -2, 0.5, 65504 */
static const float h_values[4] = {1.0f, -2.0f, 0.5f, 65504.0f};

static void tensor(Pk *p, const TensorSpec *t)
{
  global(p, "torch._utils", "_rebuild_tensor_v2");
  op(p, '(');
  op(p, '(');
  unicode(p, "storage");
  global(p, "torch", t->storage_type);
  unicode(p, t->key);
  unicode(p, "cpu");
  int1(p, (guint8)t->numel);
  op(p, 't');
  op(p, 'Q');
  int1(p, (guint8)t->offset);
  ints(p, t->shape, t->ndim);
  ints(p, t->stride, t->ndim);
  op(p, 0x89); /* requires_grad False */
  global(p, "collections", "OrderedDict");
  op(p, ')');
  op(p, 'R');
  op(p, 't');
  op(p, 'R');
}

/* PROTO 2, OrderedDict(), MARK, name, tensor … SETITEMS, STOP, with `prefix` ops first. */
static Pk *state_dict(const TensorSpec *ts, guint n, const Pk *prefix)
{
  Pk *p = g_byte_array_new();
  op(p, 0x80);
  op(p, 2);
  if (prefix)
    bytes(p, prefix->data, prefix->len);
  global(p, "collections", "OrderedDict");
  op(p, ')');
  op(p, 'R');
  op(p, '(');
  for (guint i = 0; i < n; i++) {
    unicode(p, ts[i].name);
    tensor(p, &ts[i]);
  }
  op(p, 'u');
  op(p, '.');
  return p;
}

/* ---- a ZIP writer: stored records, 64-byte aligned data, as torch.save writes them ---- */

typedef struct {
  const char *name;
  const guint8 *data;
  gsize len;
} Rec;

static void put16(GByteArray *z, guint v)
{
  guint8 b[2] = {(guint8)v, (guint8)(v >> 8)};
  g_byte_array_append(z, b, 2);
}

static void put32(GByteArray *z, guint32 v)
{
  guint8 b[4] = {(guint8)v, (guint8)(v >> 8), (guint8)(v >> 16), (guint8)(v >> 24)};
  g_byte_array_append(z, b, 4);
}

typedef struct {
  guint method, flags; /* for every record */
  gint64 count_delta;  /* added to the directory's entry counts */
  gint64 cd_delta;     /* added to the directory's offset */
  gboolean bad_crc;    /* the first record's CRC off by one */
} ZipOpts;

static GByteArray *zip_of(const Rec *recs, guint n, const ZipOpts *o)
{
  GByteArray *z = g_byte_array_new();
  guint32 offs[16], crcs[16];
  for (guint i = 0; i < n; i++) {
    gsize nl = strlen(recs[i].name);
    /* local header: pad the extra field so the data starts on 64 bytes */
    gsize pad = (64 - (z->len + 30 + nl + 4) % 64) % 64 + 4;
    offs[i] = z->len;
    crcs[i] = (guint32)crc32_z(0, recs[i].data, recs[i].len) + (o->bad_crc && i == 0);
    put32(z, 0x04034b50u), put16(z, 20), put16(z, o->flags), put16(z, o->method), put16(z, 0),
        put16(z, 0), put32(z, crcs[i]), put32(z, (guint32)recs[i].len),
        put32(z, (guint32)recs[i].len), put16(z, (guint)nl), put16(z, (guint)pad);
    g_byte_array_append(z, (const guint8 *)recs[i].name, (guint)nl);
    put16(z, 0xcafe), put16(z, (guint)pad - 4);
    for (gsize k = 4; k < pad; k++)
      g_byte_array_append(z, (const guint8 *)"Z", 1);
    g_byte_array_append(z, recs[i].data, (guint)recs[i].len);
  }
  guint32 cd = z->len;
  for (guint i = 0; i < n; i++) {
    gsize nl = strlen(recs[i].name);
    put32(z, 0x02014b50u), put16(z, 20), put16(z, 20), put16(z, o->flags), put16(z, o->method),
        put16(z, 0), put16(z, 0), put32(z, crcs[i]), put32(z, (guint32)recs[i].len),
        put32(z, (guint32)recs[i].len), put16(z, (guint)nl), put16(z, 0), put16(z, 0), put16(z, 0),
        put16(z, 0), put32(z, 0), put32(z, offs[i]);
    g_byte_array_append(z, (const guint8 *)recs[i].name, (guint)nl);
  }
  guint32 cd_size = z->len - cd;
  put32(z, 0x06054b50u), put16(z, 0), put16(z, 0), put16(z, (guint)(n + o->count_delta)),
      put16(z, (guint)(n + o->count_delta)), put32(z, cd_size),
      put32(z, (guint32)(cd + o->cd_delta)), put16(z, 0);
  return z;
}

/* The archive of pickle `pkl` and the base storages (float "0", half "1"). */
static GByteArray *archive(const Pk *pkl, const ZipOpts *o)
{
  guint8 f[24], h[8];
  for (int i = 0; i < 6; i++) {
    guint32 u;
    memcpy(&u, &a_values[i], 4);
    u = GUINT32_TO_LE(u);
    memcpy(f + 4 * i, &u, 4);
  }
  for (int i = 0; i < 4; i++)
    h[2 * i] = (guint8)h_bits[i], h[2 * i + 1] = (guint8)(h_bits[i] >> 8);
  static const char version[] = "3\n";
  Rec recs[] = {{"archive/data.pkl", pkl->data, pkl->len},
                {"archive/data/0", f, sizeof f},
                {"archive/data/1", h, sizeof h},
                {"archive/version", (const guint8 *)version, 2}};
  ZipOpts none = {0};
  return zip_of(recs, G_N_ELEMENTS(recs), o ? o : &none);
}

/* ---- running a case ---- */

typedef struct {
  FuzzTally t;
  FuzzRng rng;
} Ctx;

/* The base's values, where an accepted case must have them. */
static gboolean check_values(CohortTorchFile *f, GString *why)
{
  float v[6];
  int64_t s23[2] = {2, 3}, s32[2] = {3, 2}, s4[1] = {4};
  g_autoptr(GError) error = NULL;
  if (!cohort_torch_file_read_f32(f, "a", 2, s23, v, &error) || memcmp(v, a_values, 24) != 0)
    return g_string_append(why, "tensor \"a\" reads wrong"), FALSE;
  if (!cohort_torch_file_read_f32(f, "at", 2, s32, v, &error))
    return g_string_append(why, "tensor \"at\" does not read"), FALSE;
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 2; j++)
      if (v[i * 2 + j] != a_values[j * 3 + i])
        return g_string_append(why, "the transposed view reads wrong"), FALSE;
  if (!cohort_torch_file_read_f32(f, "h", 1, s4, v, &error) || memcmp(v, h_values, 16) != 0)
    return g_string_append(why, "tensor \"h\" reads wrong"), FALSE;
  return TRUE;
}

/* Opens the file and reads every tensor (at its own shape): accepted when all of it works. */
static gboolean read_all(const char *path, gboolean check, GString *why, GError **error)
{
  g_autoptr(CohortTorchFile) f = cohort_torch_file_open(path, error);
  if (!f)
    return FALSE;
  for (const char *const *n = cohort_torch_file_names(f); *n; n++) {
    int64_t shape[8];
    int nd = cohort_torch_file_shape(f, *n, shape);
    guint64 numel = 1;
    for (int d = 0; d < nd; d++)
      numel *= (guint64)shape[d];
    if (numel > (1u << 20)) {
      g_string_append_printf(why, "tensor \"%s\" claims %" G_GUINT64_FORMAT " elements", *n, numel);
      return TRUE; /* a lie the storage check must have caught */
    }
    g_autofree float *dst = g_new(float, MAX(numel, 1));
    if (!cohort_torch_file_read_f32(f, *n, nd, shape, dst, error))
      return FALSE;
  }
  return !check || check_values(f, why);
}

static void run_file(Ctx *c, const char *name, GByteArray *file, FuzzExpect expect,
                     const char *needle)
{
  c->t.cases++;
  g_autofree char *file_name = g_strconcat(name, ".pth", NULL);
  g_autofree char *path = fuzz_case_path(&c->t, file_name);
  fuzz_write(path, file->len ? file->data : (const guint8 *)"", file->len);
  g_byte_array_unref(file);
  fuzz_set_current(path);
  gint64 t0 = g_get_monotonic_time();
  g_autoptr(GError) error = NULL;
  GString *why = g_string_new(NULL);
  gboolean ok = read_all(path, expect == FUZZ_ACCEPT, why, &error);
  if (why->len > 0) {
    fuzz_fail(&c->t, path, "%s", why->str);
  } else if (ok) {
    c->t.accepted++;
    if (expect == FUZZ_REFUSE)
      fuzz_fail(&c->t, path, "wrong accept: this %s must be refused", name);
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
  g_string_free(why, TRUE);
  fuzz_set_current("");
  double secs = (double)(g_get_monotonic_time() - t0) / 1e6;
  if (secs > 2.0 * fuzz_time_scale())
    fuzz_fail(&c->t, path, "took %.1f s", secs);
}

/* The base pickle with `prefix` ops after PROTO, in an archive. */
static void prefix_case(Ctx *c, const char *name, Pk *prefix, FuzzExpect expect, const char *needle)
{
  Pk *p = state_dict(base_tensors, G_N_ELEMENTS(base_tensors), prefix);
  run_file(c, name, archive(p, NULL), expect, needle);
  g_byte_array_unref(p);
  g_byte_array_unref(prefix);
}

/* ---- the cases ---- */

static void gen_valid(Ctx *c)
{
  Pk *p = state_dict(base_tensors, G_N_ELEMENTS(base_tensors), NULL);
  run_file(c, "base", archive(p, NULL), FUZZ_ACCEPT, NULL);
  /* a training checkpoint: {"epoch": 3, "state_dict": {...}} around the same dict */
  Pk *q = g_byte_array_new();
  op(q, 0x80), op(q, 2), op(q, '}'), op(q, '('), unicode(q, "epoch"), int1(q, 3);
  unicode(q, "state_dict");
  bytes(q, p->data + 2, p->len - 3); /* the dict without PROTO and STOP */
  op(q, 'u'), op(q, '.');
  run_file(c, "checkpoint", archive(q, NULL), FUZZ_ACCEPT, NULL);
  g_byte_array_unref(q);
  /* memo traffic and a Parameter, as torch.save writes for nn.Parameter */
  Pk *m = g_byte_array_new();
  global(m, "torch.nn.parameter", "Parameter");
  op(m, 'q'), op(m, 7), op(m, '0' + 0x20); /* BINPUT 7, then a byte that is not an opcode */
  g_byte_array_set_size(m, m->len - 1);
  op(m, 'h'), op(m, 7); /* BINGET 7 */
  prefix_case(c, "memo", m, FUZZ_ACCEPT, NULL);
  g_byte_array_unref(p);
}

static void gen_globals(Ctx *c)
{
  static const char *const refused[][2] = {
      {"os", "system"},
      {"posix", "system"},
      {"builtins", "eval"},
      {"__builtin__", "eval"},
      {"builtins", "getattr"},
      {"subprocess", "Popen"},
      {"collections", "Counter"},
      {"torch", "load"},
      {"torch.nn.modules.linear", "Linear"},
      {"numpy.core.multiarray", "_reconstruct"},
      {"torch._utils", "_rebuild_from_type_v2"},
      {"torch", "FloatStorage "},
      {"", ""},
      {"torch.", "Size"},
  };
  for (guint i = 0; i < G_N_ELEMENTS(refused); i++) {
    Pk *pre = g_byte_array_new();
    global(pre, refused[i][0], refused[i][1]);
    g_autofree char *name = g_strdup_printf("global-%u", i);
    prefix_case(c, name, pre, FUZZ_REFUSE, "is not allowed");
  }
  /* allowed names that build no dense tensor, called */
  const char *not_weights[] = {"_rebuild_sparse_tensor", "_rebuild_meta_tensor_no_storage",
                               "_rebuild_sparse_csr_tensor"};
  for (guint i = 0; i < G_N_ELEMENTS(not_weights); i++) {
    Pk *pre = g_byte_array_new();
    global(pre, "torch._utils", not_weights[i]);
    op(pre, ')'), op(pre, 'R');
    g_autofree char *name = g_strdup_printf("not-weights-%u", i);
    prefix_case(c, name, pre, FUZZ_REFUSE, "dense");
  }
  /* a type that is allowed as a name but may not be built or called */
  Pk *build = g_byte_array_new();
  op(build, ']'), op(build, '}'), op(build, 'b');
  prefix_case(c, "build-on-list", build, FUZZ_REFUSE, "BUILD");
  Pk *newobj = g_byte_array_new();
  global(newobj, "torch", "Tensor"), op(newobj, ')'), op(newobj, 0x81);
  prefix_case(c, "newobj-tensor", newobj, FUZZ_REFUSE, "NEWOBJ");
}

static void gen_opcodes(Ctx *c)
{
  /* every opcode of protocols 0-5 that the weights-only unpickler does not take */
  static const guint8 ops[] = {'0',  '1',  '2',  'F',  'I',  'L',  'P',  'S',  'T',  'V',
                               'd',  'g',  'i',  'l',  'o',  'p',  'G',  'B',  'C',  0x82,
                               0x83, 0x84, 0x8b, 0x8c, 0x8d, 0x8e, 0x90, 0x91, 0x92, 0x93,
                               0x94, 0x95, 0x96, 0x97, 0x98, 0x00, 0xff, 0x7f};
  for (guint i = 0; i < G_N_ELEMENTS(ops); i++) {
    Pk *pre = g_byte_array_new();
    op(pre, ops[i]);
    g_autofree char *name = g_strdup_printf("opcode-%02x", ops[i]);
    prefix_case(c, name, pre, FUZZ_REFUSE, "opcode");
  }
}

/* Broken structure: each a prefix or a whole pickle that must be refused. */
static void gen_structure(Ctx *c)
{
  static const struct {
    const char *name, *ops;
    gsize len;
    const char *needle;
  } cases[] = {
      {"reduce-empty-stack", "R", 1, "empty stack"},
      {"setitems-without-mark", "}u", 2, "MARK"},
      {"tuple-without-mark", "t", 1, "MARK"},
      {"binget-unknown", "h\x09", 2, "never stored"},
      {"long-binget-unknown", "j\x01\x00\x00\x10", 5, "never stored"},
      {"binput-empty-stack", "q\x01", 2, "empty stack"},
      {"long1-9-bytes", "\x8a\x09\x01\x02\x03\x04\x05\x06\x07\x08\x09", 11, "8"},
      {"binunicode-past-end", "X\xff\xff\xff\x7f", 5, "truncated"},
      {"binunicode-not-utf8", "X\x02\x00\x00\x00\xc3\x28", 7, "UTF-8"},
      {"persid-not-storage", "(X\x03\x00\x00\x00keytQ", 11, "storage"},
      {"append-to-dict",
       "}K\x01"
       "a",
       4, "APPEND"},
      {"setitem-on-list", "]K\x01K\x02s", 6, "SETITEM"},
      {"reduce-on-int", "K\x01)R", 4, "REDUCE"},
      {"tuple2-short", "K\x01\x86", 3, "TUPLE2"},
  };
  for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
    Pk *pre = g_byte_array_new();
    bytes(pre, cases[i].ops, cases[i].len);
    prefix_case(c, cases[i].name, pre, FUZZ_REFUSE, cases[i].needle);
  }
  /* a GLOBAL line longer than the cap */
  Pk *line = g_byte_array_new();
  op(line, 'c');
  for (int i = 0; i < 300; i++)
    op(line, 'x');
  prefix_case(c, "global-no-newline", line, FUZZ_REFUSE, "line end");
  /* nesting past the cap */
  Pk *deep = g_byte_array_new();
  op(deep, ')');
  for (int i = 0; i < 40; i++)
    op(deep, 0x85);
  prefix_case(c, "nested-40", deep, FUZZ_REFUSE, "nested deeper");
  /* MARKs past the cap */
  Pk *marks = g_byte_array_new();
  for (int i = 0; i < 1100; i++)
    op(marks, '(');
  prefix_case(c, "marks-1100", marks, FUZZ_REFUSE, "MARK");
  /* the root is not a dict */
  Pk *list = g_byte_array_new();
  op(list, 0x80), op(list, 2), op(list, ']'), op(list, '.');
  run_file(c, "root-list", archive(list, NULL), FUZZ_REFUSE, "not a state dict");
  g_byte_array_unref(list);
  /* a dict entry that is not a tensor */
  Pk *entry = g_byte_array_new();
  op(entry, 0x80), op(entry, 2), op(entry, '}'), unicode(entry, "w"), int1(entry, 5);
  op(entry, 's'), op(entry, '.');
  run_file(c, "entry-int", archive(entry, NULL), FUZZ_REFUSE, "not a tensor");
  g_byte_array_unref(entry);
  /* truncated pickles */
  Pk *p = state_dict(base_tensors, G_N_ELEMENTS(base_tensors), NULL);
  for (int i = 0; i < 12; i++) {
    Pk *cut = g_byte_array_new();
    bytes(cut, p->data, 1 + fuzz_below(&c->rng, p->len - 2));
    g_autofree char *name = g_strdup_printf("pickle-cut-%u", cut->len);
    run_file(c, name, archive(cut, NULL), FUZZ_REFUSE, NULL);
    g_byte_array_unref(cut);
  }
  g_byte_array_unref(p);
}

/* Tensors that do not fit their storage, storages that do not fit their records. */
static void gen_views(Ctx *c)
{
  static const struct {
    const char *name;
    int numel, offset, ndim, shape[2], stride[2];
    FuzzExpect expect;
    const char *needle;
  } views[] = {
      {"view-offset-past", 6, 1, 2, {2, 3}, {3, 1}, FUZZ_REFUSE, "reaches element"},
      {"view-stride-past", 6, 0, 2, {2, 3}, {4, 1}, FUZZ_REFUSE, "reaches element"},
      {"view-broadcast", 6, 0, 2, {2, 3}, {0, 1}, FUZZ_EITHER, NULL},
      {"view-empty", 6, 200, 2, {0, 3}, {3, 1}, FUZZ_EITHER, NULL},
      {"storage-bigger-than-record", 7, 0, 2, {2, 3}, {3, 1}, FUZZ_REFUSE, "elements"},
      {"storage-smaller-than-record", 5, 0, 1, {5}, {1}, FUZZ_REFUSE, "elements"},
      {"storage-huge", 255, 0, 1, {255}, {1}, FUZZ_REFUSE, "elements"},
  };
  for (guint i = 0; i < G_N_ELEMENTS(views); i++) {
    TensorSpec t = {"a",
                    "0",
                    "FloatStorage",
                    views[i].numel,
                    views[i].offset,
                    views[i].ndim,
                    {views[i].shape[0], views[i].shape[1]},
                    {views[i].stride[0], views[i].stride[1]}};
    Pk *p = state_dict(&t, 1, NULL);
    run_file(c, views[i].name, archive(p, NULL), views[i].expect, views[i].needle);
    g_byte_array_unref(p);
  }
  /* a storage type that does not convert, and one named twice with two types */
  TensorSpec cplx = base_tensors[2];
  cplx.storage_type = "ComplexFloatStorage";
  Pk *p = state_dict(&cplx, 1, NULL);
  run_file(c, "storage-complex", archive(p, NULL), FUZZ_REFUSE, "does not convert");
  g_byte_array_unref(p);
  TensorSpec two[2] = {base_tensors[0], base_tensors[1]};
  two[1].storage_type = "IntStorage";
  p = state_dict(two, 2, NULL);
  run_file(c, "storage-two-types", archive(p, NULL), FUZZ_REFUSE, "named twice");
  g_byte_array_unref(p);
  TensorSpec missing = base_tensors[0];
  missing.key = "7";
  p = state_dict(&missing, 1, NULL);
  run_file(c, "storage-record-missing", archive(p, NULL), FUZZ_REFUSE, "missing");
  g_byte_array_unref(p);
}

static void gen_archive(Ctx *c)
{
  Pk *p = state_dict(base_tensors, G_N_ELEMENTS(base_tensors), NULL);
  const struct {
    const char *name;
    ZipOpts o;
    const char *needle;
  } zips[] = {
      {"deflated", {.method = 8}, "compressed"},
      {"encrypted", {.flags = 1}, "encrypted"},
      {"count-plus-one", {.count_delta = 1}, NULL},
      {"count-huge", {.count_delta = 60000}, "ZIP entries"},
      {"directory-offset-past", {.cd_delta = 1 << 20}, "outside"},
      {"directory-offset-minus-one", {.cd_delta = -1}, NULL},
      {"crc-off", {.bad_crc = TRUE}, "CRC-32"},
  };
  for (guint i = 0; i < G_N_ELEMENTS(zips); i++)
    run_file(c, zips[i].name, archive(p, &zips[i].o), FUZZ_REFUSE, zips[i].needle);
  /* cuts anywhere in the archive */
  GByteArray *whole = archive(p, NULL);
  for (int i = 0; i < 12; i++) {
    GByteArray *cut = g_byte_array_new();
    g_byte_array_append(cut, whole->data, (guint)(4 + fuzz_below(&c->rng, whole->len - 5)));
    g_autofree char *name = g_strdup_printf("archive-cut-%u", cut->len);
    run_file(c, name, cut, FUZZ_REFUSE, NULL);
  }
  g_byte_array_unref(whole);
  /* records: none named data.pkl; data.pkl twice */
  Rec none[] = {{"archive/other.pkl", p->data, p->len}};
  ZipOpts plain = {0};
  run_file(c, "no-data-pkl", zip_of(none, 1, &plain), FUZZ_REFUSE, "data.pkl");
  Rec twice[] = {{"archive/data.pkl", p->data, p->len}, {"archive/data.pkl", p->data, p->len}};
  run_file(c, "data-pkl-twice", zip_of(twice, 2, &plain), FUZZ_REFUSE, "twice");
  /* the legacy format and things that are no archive at all */
  GByteArray *legacy = g_byte_array_new();
  g_byte_array_append(legacy,
                      (const guint8 *)"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8"
                                      "\x50\x19.",
                      15);
  run_file(c, "legacy", legacy, FUZZ_REFUSE, "legacy");
  GByteArray *empty = g_byte_array_new();
  run_file(c, "empty", empty, FUZZ_REFUSE, "too short");
  GByteArray *text = g_byte_array_new();
  g_byte_array_append(text, (const guint8 *)"{\"not\": \"a zip\"}\n", 17);
  run_file(c, "text", text, FUZZ_REFUSE, "ZIP");
  g_byte_array_unref(p);
}

/* Random damage: flips in the pickle (CRC recomputed, so the unpickler meets them), flips and
 * noise anywhere in the archive. Either outcome may be right; neither may crash or hang. */
static void gen_random(Ctx *c)
{
  Pk *p = state_dict(base_tensors, G_N_ELEMENTS(base_tensors), NULL);
  for (int i = 0; i < 60; i++) {
    Pk *q = g_byte_array_new();
    bytes(q, p->data, p->len);
    int flips = 1 + (int)fuzz_below(&c->rng, 3);
    for (int k = 0; k < flips; k++) {
      gsize at = fuzz_below(&c->rng, q->len);
      q->data[at] = i % 2 ? (guint8)fuzz_below(&c->rng, 256)
                          : q->data[at] ^ (guint8)(1u << fuzz_below(&c->rng, 8));
    }
    g_autofree char *name = g_strdup_printf("pickle-random-%d", i);
    run_file(c, name, archive(q, NULL), FUZZ_EITHER, NULL);
    g_byte_array_unref(q);
  }
  GByteArray *whole = archive(p, NULL);
  for (int i = 0; i < 40; i++) {
    GByteArray *z = g_byte_array_new();
    g_byte_array_append(z, whole->data, whole->len);
    gsize at = i % 2 ? z->len - 1 - fuzz_below(&c->rng, 120) : fuzz_below(&c->rng, z->len);
    z->data[at] ^= (guint8)(1u << fuzz_below(&c->rng, 8));
    g_autofree char *name = g_strdup_printf("archive-flip-%zu", at);
    run_file(c, name, z, FUZZ_EITHER, NULL);
  }
  g_byte_array_unref(whole);
  g_byte_array_unref(p);
}

static void replay_regressions(Ctx *c)
{
  g_autofree char *dir = g_test_build_filename(G_TEST_DIST, "fuzz", "regressions", "torch", NULL);
  g_autoptr(GDir) d = g_dir_open(dir, 0, NULL);
  g_assert_nonnull(d);
  guint n = 0;
  for (const char *name; (name = g_dir_read_name(d));) {
    gboolean accept = g_str_has_prefix(name, "accept-");
    if (!accept && !g_str_has_prefix(name, "refuse-"))
      continue;
    g_autofree char *path = g_build_filename(dir, name, NULL), *data = NULL;
    gsize len;
    g_assert_true(g_file_get_contents(path, &data, &len, NULL));
    GByteArray *file = g_byte_array_new();
    g_byte_array_append(file, (const guint8 *)data, (guint)len);
    g_autofree char *stem = g_strndup(name, strcspn(name, "."));
    FuzzExpect expect = accept ? FUZZ_ACCEPT : FUZZ_REFUSE;
    c->t.cases++;
    g_autofree char *copy = fuzz_case_path(&c->t, name);
    c->t.cases--;
    fuzz_write(copy, file->data, file->len);
    /* regression files hold other values than the generator's base: read, not checked */
    g_autoptr(GError) error = NULL;
    GString *why = g_string_new(NULL);
    fuzz_set_current(copy);
    gboolean ok = read_all(copy, FALSE, why, &error);
    fuzz_set_current("");
    c->t.cases++;
    if (ok != (expect == FUZZ_ACCEPT) || why->len)
      fuzz_fail(&c->t, copy, "regression %s: %s", stem, ok ? "accepted" : error->message);
    else if (!ok && fuzz_message_problem(error->message, copy))
      fuzz_fail(&c->t, copy, "%s: %s", fuzz_message_problem(error->message, copy), error->message);
    ok ? c->t.accepted++ : c->t.refused++;
    g_string_free(why, TRUE);
    g_byte_array_unref(file);
    n++;
  }
  g_assert_cmpuint(n, >=, 2);
}

static void test_torch_fuzz(void)
{
  Ctx c;
  fuzz_tally_init(&c.t, "torch");
  c.rng = fuzz_rng_new(7);
  gen_valid(&c);
  gen_globals(&c);
  gen_opcodes(&c);
  gen_structure(&c);
  gen_views(&c);
  gen_archive(&c);
  gen_random(&c);
  replay_regressions(&c);
  fuzz_tally_finish(&c.t, 200);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  fuzz_watch_crashes();
  g_test_add_func("/fuzz/torch", test_torch_fuzz);
  return g_test_run();
}

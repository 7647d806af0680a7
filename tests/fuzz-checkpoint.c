/* Fuzzing checkpoint folders through the real program: cohort-train --resume DIR, on copies
 * of a checkpoint that cohort-train itself wrote, with state.json and model.safetensors
 * broken on purpose (strict-JSON violations, truncations, never-valid bytes, wrong fields,
 * values out of range, another model's config, a changed or reshaped model, FIFOs and
 * folders in place of files) or changed harmlessly (layout, key order, weights with a
 * matching sha256). A refused folder must end in exit status 1 or 2 with one line naming it;
 * an accepted one must resume at the step its state.json says and complete. The checkpoint
 * and model API are not called here: only the program. See fuzz-util.h for the rules. */
#include <json-glib/json-glib.h>

#include "fuzz-util.h"

/* The small run every case resumes: one layer of width 8, a step or so. */
static const char *const small[] = {"--quiet",
                                    "--set",
                                    "n_layer=1",
                                    "--set",
                                    "n_head=1",
                                    "--set",
                                    "n_embd=8",
                                    "--set",
                                    "seq_len=8",
                                    "--set",
                                    "batch_size=1",
                                    "--set",
                                    "warmup_steps=0",
                                    "--set",
                                    "eval_every=0",
                                    "--set",
                                    "eval_steps=1",
                                    "--set",
                                    "sample_every=0",
                                    "--set",
                                    "threads=1",
                                    "--set",
                                    "val_data=",
                                    "--set",
                                    "keep_last=0",
                                    "--set",
                                    "train_data=builtin:sample/train.txt",
                                    NULL};

typedef struct {
  FuzzTally t;
  FuzzRng rng;
  char *state;       /* the checkpoint's state.json */
  GByteArray *model; /* its model.safetensors */
  char *sha;         /* sha256 of the model, as state.json gives it */
  char *config;      /* the "config" object of state.json, as text */
} Ctx;

/* Runs the small configuration, resuming from `ckpt` into workspace `ws`. */
static FuzzRun resume(const char *ckpt, const char *ws, const char *events)
{
  g_autoptr(GPtrArray) args = g_ptr_array_new_with_free_func(g_free);
  for (guint i = 0; small[i]; i++)
    g_ptr_array_add(args, g_strdup(small[i]));
  const char *more[] = {"max_steps=3", "save_every=0"};
  for (guint i = 0; i < G_N_ELEMENTS(more); i++) {
    g_ptr_array_add(args, g_strdup("--set"));
    g_ptr_array_add(args, g_strdup(more[i]));
  }
  g_ptr_array_add(args, g_strdup("--set"));
  g_ptr_array_add(args, g_strdup_printf("workspace_dir=%s", ws));
  g_ptr_array_add(args, g_strdup("--resume"));
  g_ptr_array_add(args, g_strdup(ckpt));
  g_ptr_array_add(args, NULL);
  return fuzz_run_train((const char *const *)args->pdata, events, 30 * fuzz_time_scale());
}

/* The "start" event's start_step and the "done" event's status, from a progress file. */
static gboolean read_events(const char *path, gint64 *start_step, char **status)
{
  g_autofree char *text = NULL;
  if (!g_file_get_contents(path, &text, NULL, NULL))
    return FALSE;
  g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
  *start_step = -1;
  *status = NULL;
  for (guint i = 0; lines[i]; i++) {
    g_autoptr(JsonNode) node = *lines[i] ? json_from_string(lines[i], NULL) : NULL;
    if (!node || !JSON_NODE_HOLDS_OBJECT(node))
      continue;
    JsonObject *o = json_node_get_object(node);
    const char *ev = json_object_get_string_member_with_default(o, "event", "");
    if (g_str_equal(ev, "start"))
      *start_step = json_object_get_int_member_with_default(o, "start_step", -1);
    if (g_str_equal(ev, "done")) {
      g_free(*status);
      *status = g_strdup(json_object_get_string_member_with_default(o, "status", ""));
    }
  }
  return TRUE;
}

/* Resumes from `dir`/ckpt (prepared by the caller) and judges the outcome. */
static void judge(Ctx *c, const char *dir, FuzzExpect expect, gint64 start_step)
{
  g_autofree char *ckpt = g_build_filename(dir, "ckpt", NULL);
  g_autofree char *ws = g_build_filename(dir, "ws", NULL);
  g_autofree char *events = g_build_filename(dir, "events.jsonl", NULL);
  FuzzRun r = resume(ckpt, ws, events);
  /* Whatever was accepted must resume where its state says and finish. */
  if (fuzz_judge_run(&c->t, ckpt, ckpt, expect, &r)) {
    gint64 got = -1;
    g_autofree char *status = NULL;
    if (!read_events(events, &got, &status) || got != start_step ||
        g_strcmp0(status, "completed") != 0)
      fuzz_fail(&c->t, ckpt,
                "wrong accept: resumed at step %" G_GINT64_FORMAT
                " (the state says %" G_GINT64_FORMAT ") and ended \"%s\"",
                got, start_step, status ? status : "(no done event)");
  }
  fuzz_run_clear(&r);
}

static char *sha256_of(const guint8 *data, gsize len)
{
  return g_compute_checksum_for_data(G_CHECKSUM_SHA256, data, len);
}

/* `text` with the first `from` replaced by `to` (which must be there). */
static char *replace(const char *text, const char *from, const char *to)
{
  const char *at = strstr(text, from);
  g_assert_nonnull(at);
  return g_strdup_printf("%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
}

/* A case folder with ckpt/state.json = `state` (`state_len` bytes; NULL: none) and
 * ckpt/model.safetensors = `model` (NULL: none). With `fix_sha`, state.json gets the model's
 * sha256 in place of the original's. */
static char *make_case(Ctx *c, const char *name, const char *state, gssize state_len,
                       const GByteArray *model, gboolean fix_sha)
{
  char *dir = fuzz_case_path(&c->t, name);
  g_autofree char *ckpt = g_build_filename(dir, "ckpt", NULL);
  g_assert_cmpint(g_mkdir_with_parents(ckpt, 0755), ==, 0);
  g_autofree char *fixed = NULL;
  if (state && fix_sha && model) {
    g_autofree char *sha = sha256_of(model->data, model->len);
    fixed = replace(state, c->sha, sha);
    state = fixed;
    state_len = -1;
  }
  if (state) {
    g_autofree char *p = g_build_filename(ckpt, "state.json", NULL);
    fuzz_write(p, state, state_len < 0 ? strlen(state) : (gsize)state_len);
  }
  if (model) {
    g_autofree char *p = g_build_filename(ckpt, "model.safetensors", NULL);
    fuzz_write(p, model->data, model->len);
  }
  return dir;
}

static void state_case(Ctx *c, const char *name, const char *state, gssize len, FuzzExpect expect,
                       gint64 start_step)
{
  g_autofree char *dir = make_case(c, name, state, len, c->model, FALSE);
  judge(c, dir, expect, start_step);
}

/* The base state with `from` replaced by `to`. */
static void edit_case(Ctx *c, const char *name, const char *from, const char *to, FuzzExpect expect,
                      gint64 start_step)
{
  g_autofree char *s = replace(c->state, from, to);
  state_case(c, name, s, -1, expect, start_step);
}

static void model_case(Ctx *c, const char *name, GByteArray *model, gboolean fix_sha,
                       FuzzExpect expect)
{
  g_autofree char *dir = make_case(c, name, c->state, -1, model, fix_sha);
  judge(c, dir, expect, 2);
  g_byte_array_unref(model);
}

/* ---- the cases ---- */

static void gen_state_layout(Ctx *c)
{
  state_case(c, "unchanged", c->state, -1, FUZZ_ACCEPT, 2);
  g_autofree char *compact = g_strdup(c->state);
  g_autoptr(GString) squeezed = g_string_new(NULL);
  for (const char *p = compact; *p; p++)
    if (*p != '\n' && !(p[0] == ' ' && p[-1] == ' ') && !(p[0] == ' ' && p[-1] == '\n'))
      g_string_append_c(squeezed, *p);
  state_case(c, "compact", squeezed->str, -1, FUZZ_ACCEPT, 2);
  g_auto(GStrv) lines = g_strsplit(c->state, "\n", -1);
  g_autoptr(GString) crlf = g_string_new(NULL);
  g_autoptr(GString) reversed = g_string_new("{\n");
  guint n = g_strv_length(lines);
  for (guint i = 0; lines[i]; i++)
    g_string_append_printf(crlf, "%s%s", lines[i], lines[i + 1] ? "\r\n\t" : "");
  state_case(c, "crlf-tabs", crlf->str, -1, FUZZ_ACCEPT, 2);
  /* Members in reverse order: lines 1 .. n-2 hold one member each. */
  guint last = n - 1;
  while (last > 0 && !g_str_has_prefix(lines[last], "}"))
    last--;
  for (guint i = last - 1; i >= 1; i--) {
    g_autofree char *m = g_strdup(lines[i]);
    if (g_str_has_suffix(m, ","))
      m[strlen(m) - 1] = '\0';
    g_string_append_printf(reversed, "%s%s\n", m, i > 1 ? "," : "");
  }
  g_string_append(reversed, "}\n");
  state_case(c, "reversed-members", reversed->str, -1, FUZZ_ACCEPT, 2);
  g_autofree char *upper = g_ascii_strup(c->sha, -1);
  edit_case(c, "sha-upper-case", c->sha, upper, FUZZ_ACCEPT, 2);
  edit_case(c, "step-3", "\"step\": 2,", "\"step\": 3,", FUZZ_ACCEPT, 3);
  edit_case(c, "step-1", "\"step\": 2,", "\"step\": 1,", FUZZ_ACCEPT, 1);
  edit_case(c, "epoch-5", "\"epoch\": 0,", "\"epoch\": 5,", FUZZ_ACCEPT, 2);
}

static void gen_state_syntax(Ctx *c)
{
  g_autofree char *bom = g_strdup_printf("\xEF\xBB\xBF%s", c->state);
  state_case(c, "bom", bom, -1, FUZZ_REFUSE, 0);
  edit_case(c, "line-comment", "{\n", "{ // state\n", FUZZ_REFUSE, 0);
  edit_case(c, "block-comment", "\"step\"", "/* s */ \"step\"", FUZZ_REFUSE, 0);
  g_autofree char *second = g_strdup_printf("%s\n{\"step\": 9}\n", c->state);
  state_case(c, "second-object", second, -1, FUZZ_REFUSE, 0);
  g_autofree char *garbage = g_strdup_printf("%sx", c->state);
  state_case(c, "trailing-garbage", garbage, -1, FUZZ_REFUSE, 0);
  edit_case(c, "repeated-step", "\"step\": 2,", "\"step\": 2, \"step\": 3,", FUZZ_REFUSE, 0);
  edit_case(c, "repeated-in-config", "\"n_layer\":1,", "\"n_layer\":1,\"n_layer\":1,", FUZZ_REFUSE,
            0);
  edit_case(c, "nul-in-string", "\"sample_rng\": \"", "\"sample_rng\": \"\\u0000", FUZZ_REFUSE, 0);
  edit_case(c, "single-quotes", "\"step\"", "'step'", FUZZ_REFUSE, 0);
  edit_case(c, "raw-tab", "\"sample_rng\": \"", "\"sample_rng\": \"\t", FUZZ_REFUSE, 0);
  edit_case(c, "leading-zero", "\"step\": 2,", "\"step\": 02,", FUZZ_REFUSE, 0);
  edit_case(c, "hex", "\"step\": 2,", "\"step\": 0x2,", FUZZ_REFUSE, 0);
  edit_case(c, "nan", "\"loss_scale\": 1,", "\"loss_scale\": NaN,", FUZZ_REFUSE, 0);
  edit_case(c, "step-2^64", "\"step\": 2,", "\"step\": 18446744073709551618,", FUZZ_REFUSE, 0);
  edit_case(c, "step-2^63", "\"step\": 2,", "\"step\": 9223372036854775808,", FUZZ_REFUSE, 0);
  guint depths[] = {65, 60000};
  for (guint i = 0; i < G_N_ELEMENTS(depths); i++) {
    GString *deep = g_string_new("\"extra\": ");
    for (guint d = 0; d < depths[i]; d++)
      g_string_append_c(deep, '[');
    for (guint d = 0; d < depths[i]; d++)
      g_string_append_c(deep, ']');
    g_string_append(deep, ",\n  \"step\"");
    g_autofree char *name = g_strdup_printf("nested-%u", depths[i]);
    edit_case(c, name, "\"step\"", deep->str, FUZZ_REFUSE, 0);
    g_string_free(deep, TRUE);
  }
  gsize len = strlen(c->state);
  for (int i = 0; i < 10; i++) {
    gsize cut = fuzz_below(&c->rng, len - 2);
    g_autofree char *name = g_strdup_printf("truncated-at-%zu", cut);
    state_case(c, name, c->state, (gssize)cut, FUZZ_REFUSE, 0);
  }
  for (int i = 0; i < 8; i++) {
    g_autofree char *s = g_strdup(c->state);
    gsize at = fuzz_below(&c->rng, len);
    guint8 b = fuzz_never_valid_byte(&c->rng);
    s[at] = (char)b;
    g_autofree char *name = g_strdup_printf("byte-0x%02X-at-%zu", b, at);
    state_case(c, name, s, (gssize)len, FUZZ_REFUSE, 0);
  }
}

static void gen_state_fields(Ctx *c)
{
  state_case(c, "empty", "", 0, FUZZ_REFUSE, 0);
  state_case(c, "array", "[]", -1, FUZZ_REFUSE, 0);
  const char *edits[][3] = {
      {"\"version\": 1,", "\"version\": 2,", "version-2"},
      {"\"version\": 1,", "\"version\": 0,", "version-0"},
      {"\"version\": 1,", "\"version\": \"1\",", "version-string"},
      {"\"step\": 2,", "\"step\": -1,", "step-negative"},
      {"\"step\": 2,", "\"step\": \"2\",", "step-string"},
      {"\"step\": 2,", "\"step\": 2.5,", "step-fraction"},
      {"\"step\": 2,", "", "step-missing"},
      {"\"batch_in_epoch\": 2,", "\"batch_in_epoch\": 99999999,", "batch-in-epoch-past-epoch"},
      {"\"batch_in_epoch\": 2,", "\"batch_in_epoch\": 9223372036854775807,", "batch-in-epoch-max"},
      {"\"sample_rng\": \"", "\"sample_rng\": \"abc", "rng-not-a-number"},
      {"\"loss_scale\": 1,", "\"loss_scale\": -1,", "loss-scale-negative"},
      {"\"loss_scale\": 1,", "\"loss_scale\": 1e400,", "loss-scale-overflow"},
      {"\"loss_scale\": 1,", "\"loss_scale\": \"1\",", "loss-scale-string"},
      {"\"skipped_steps\": 0,", "\"skipped_steps\": 5,", "skipped-beyond-step"},
      {"\"config\": {", "\"config\": 5, \"x\": {", "config-not-object"},
      {"\"n_layer\":1,", "\"n_layer\":0,", "config-invalid"},
      {"\"n_embd\":8,", "\"n_embd\":16,", "config-other-shape"},
      {"\"n_layer\":1,", "\"n_layer\":1,\"frobnicate\":1,", "config-unknown-key"},
      /* the base reference of a checkpoint of what learns (engine/model/checkpoint-base.h) */
      {"\"version\": 1,", "\"version\": 2, \"frozen_sha256\": \"xyz\",", "frozen-sha-not-hex"},
      {"\"version\": 1,", "\"version\": 2, \"frozen_sha256\": 5,", "frozen-sha-number"},
      {"\"version\": 1,",
       "\"version\": 1, \"frozen_sha256\": "
       "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\",",
       "frozen-sha-version-1"},
      {"\"version\": 1,",
       "\"version\": 2, \"frozen_sha256\": "
       "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\", \"base_sha256\": "
       "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\",",
       "base-sha-without-path"},
      {"\"version\": 1,",
       "\"version\": 2, \"frozen_sha256\": "
       "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\", \"base_path\": "
       "\"/tmp/b\",",
       "base-path-without-sha"},
      {"\"version\": 1,",
       "\"version\": 2, \"frozen_sha256\": "
       "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\", \"base_sha256\": \""
       "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
       "\", \"base_path\": \"base.safetensors\",",
       "base-path-relative"},
      {"\"version\": 1,",
       "\"version\": 2, \"frozen_sha256\": "
       "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\", \"base_sha256\": \""
       "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
       "\", \"base_path\": [\"/tmp/b\"],",
       "base-path-array"},
      {"\"version\": 1,",
       "\"version\": 2, \"frozen_sha256\": "
       "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\", \"adapter_path\": "
       "\"\",",
       "adapter-path-empty"},
      /* well formed, but the model it names has no frozen part (finetune full) */
      {"\"version\": 1,",
       "\"version\": 2, \"frozen_sha256\": "
       "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\",",
       "only-learning-of-full"},
  };
  for (guint i = 0; i < G_N_ELEMENTS(edits); i++)
    edit_case(c, edits[i][2], edits[i][0], edits[i][1], FUZZ_REFUSE, 0);
  g_autofree char *wrong_sha = g_strdup(c->sha);
  wrong_sha[5] = wrong_sha[5] == '0' ? '1' : '0';
  edit_case(c, "sha-mismatch", c->sha, wrong_sha, FUZZ_REFUSE, 0);
  edit_case(c, "rng-2^64", "\"sample_rng\": \"", "\"sample_rng\": \"18446744073709551616",
            FUZZ_REFUSE, 0);
  /* Larger than any state: refused before it is parsed. */
  GString *big = g_string_new(c->state);
  g_string_set_size(big, 17 * 1024 * 1024);
  memset(big->str + strlen(c->state), ' ', big->len - strlen(c->state));
  state_case(c, "larger-than-16-MiB", big->str, (gssize)big->len, FUZZ_REFUSE, 0);
  g_string_free(big, TRUE);
}

/* The model's JSON header and where its data starts. */
static char *model_header(const GByteArray *m, gsize *data_at)
{
  guint64 hl;
  memcpy(&hl, m->data, 8);
  hl = GUINT64_FROM_LE(hl);
  *data_at = 8 + (gsize)hl;
  return g_strndup((const char *)m->data + 8, (gsize)hl);
}

/* A model file with header `header` (padded with spaces) and the base model's data. */
static GByteArray *with_header(Ctx *c, const char *header)
{
  gsize data_at;
  g_autofree char *old = model_header(c->model, &data_at);
  gsize hl = strlen(header), padded = (hl + 7) & ~(gsize)7;
  guint64 le = GUINT64_TO_LE((guint64)padded);
  GByteArray *m = g_byte_array_new();
  g_byte_array_append(m, (const guint8 *)&le, 8);
  g_byte_array_append(m, (const guint8 *)header, (guint)hl);
  for (gsize i = hl; i < padded; i++)
    g_byte_array_append(m, (const guint8 *)" ", 1);
  g_byte_array_append(m, c->model->data + data_at, c->model->len - (guint)data_at);
  return m;
}

static GByteArray *model_copy(Ctx *c)
{
  GByteArray *m = g_byte_array_new();
  g_byte_array_append(m, c->model->data, c->model->len);
  return m;
}

static void gen_model(Ctx *c)
{
  gsize data_at;
  g_autofree char *header = model_header(c->model, &data_at);
  gsize floats = (c->model->len - data_at) / 4;
  for (int i = 0; i < 3; i++) {
    /* The lowest mantissa bit of a weight: another valid checkpoint, once its sha matches. */
    GByteArray *m = model_copy(c);
    gsize at = data_at + 4 * fuzz_below(&c->rng, floats);
    m->data[at] ^= 1;
    g_autofree char *name = g_strdup_printf("weight-flip-%zu", at);
    model_case(c, name, m, TRUE, FUZZ_ACCEPT);
    GByteArray *m2 = model_copy(c);
    m2->data[at] ^= 1;
    g_autofree char *name2 = g_strdup_printf("weight-flip-%zu-old-sha", at);
    model_case(c, name2, m2, FALSE, FUZZ_REFUSE);
  }
  gint64 deltas[] = {-1, 1};
  for (guint i = 0; i < G_N_ELEMENTS(deltas); i++) {
    GByteArray *m = model_copy(c);
    guint64 hl = GUINT64_TO_LE((guint64)(data_at - 8) + (guint64)deltas[i]);
    memcpy(m->data, &hl, 8);
    g_autofree char *name = g_strdup_printf("header-length%+d", (int)deltas[i]);
    model_case(c, name, m, TRUE, FUZZ_REFUSE);
  }
  GByteArray *cut = model_copy(c);
  g_byte_array_set_size(cut, cut->len - 5);
  model_case(c, "model-truncated", cut, TRUE, FUZZ_REFUSE);
  GByteArray *longer = model_copy(c);
  g_byte_array_append(longer, (const guint8 *)"\0", 1);
  model_case(c, "model-trailing-byte", longer, TRUE, FUZZ_REFUSE);
  const char *edits[][3] = {
      {"\"dtype\":\"F32\"", "\"dtype\":\"F32\",\"dtype\":\"F32\"", "repeated-dtype"},
      {"\"wte.weight\"", "\"wte.weighs\"", "renamed-tensor"},
      {"\"shape\":[256,8]", "\"shape\":[8,256]", "transposed-shape"},
      {"\"dtype\":\"F32\"", "\"dtype\":\"I32\"", "integer-dtype"},
      {"{", "\xEF\xBB\xBF{", "header-bom"},
      {"{", "{\"wte.weight\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},",
       "repeated-tensor"},
  };
  for (guint i = 0; i < G_N_ELEMENTS(edits); i++) {
    g_autofree char *h = replace(header, edits[i][0], edits[i][1]);
    model_case(c, edits[i][2], with_header(c, h), TRUE, FUZZ_REFUSE);
  }
  for (int i = 0; i < 4; i++) {
    GByteArray *m = model_copy(c);
    gsize at = 8 + fuzz_below(&c->rng, data_at - 8);
    guint8 b = (guint8)fuzz_below(&c->rng, 256);
    m->data[at] = b;
    g_autofree char *name = g_strdup_printf("header-random-0x%02X-at-%zu", b, at);
    g_autofree char *dir = make_case(c, name, c->state, -1, m, TRUE);
    judge(c, dir, FUZZ_EITHER, 2);
    g_byte_array_unref(m);
  }
}

/* What stands where a file should be. */
static void gen_file_kinds(Ctx *c)
{
  const char *kinds[][2] = {{"state-missing", NULL},
                            {"model-missing", NULL},
                            {"state-fifo", "state.json"},
                            {"model-fifo", "model.safetensors"},
                            {"state-folder", "state.json"}};
  for (guint i = 0; i < G_N_ELEMENTS(kinds); i++) {
    gboolean no_state = i == 0 || i == 2 || i == 4;
    gboolean no_model = i == 1 || i == 3;
    g_autofree char *dir = make_case(c, kinds[i][0], no_state ? NULL : c->state, -1,
                                     no_model ? NULL : c->model, FALSE);
    if (kinds[i][1]) {
      g_autofree char *p = g_build_filename(dir, "ckpt", kinds[i][1], NULL);
      if (i == 4)
        g_assert_cmpint(g_mkdir(p, 0755), ==, 0);
      else
        g_assert_cmpint(mkfifo(p, 0600), ==, 0);
    }
    judge(c, dir, FUZZ_REFUSE, 0);
  }
  /* --resume naming a file, or nothing. */
  g_autofree char *dir = fuzz_case_path(&c->t, "resume-a-file");
  g_assert_cmpint(g_mkdir(dir, 0755), ==, 0);
  g_autofree char *file = g_build_filename(dir, "ckpt", NULL);
  fuzz_write(file, c->state, strlen(c->state));
  judge(c, dir, FUZZ_REFUSE, 0);
  g_autofree char *none = fuzz_case_path(&c->t, "resume-nothing");
  g_assert_cmpint(g_mkdir(none, 0755), ==, 0);
  judge(c, none, FUZZ_REFUSE, 0);
}

/* adapter_from naming a checkpoint folder (engine/model/lora-io.c reads its state.json and
 * model.safetensors): a new run with finetune lora (lora_rank 8), never a resume. Every case
 * here must be refused: the base checkpoint has no adapters. */
static void adapter_case(Ctx *c, const char *name, const char *state, const GByteArray *model,
                         gboolean fix_sha)
{
  g_autofree char *dir = make_case(c, name, state, -1, model, fix_sha);
  g_autofree char *ckpt = g_build_filename(dir, "ckpt", NULL);
  g_autofree char *ws = g_build_filename(dir, "ws", NULL);
  g_autoptr(GPtrArray) args = g_ptr_array_new_with_free_func(g_free);
  for (guint i = 0; small[i]; i++)
    g_ptr_array_add(args, g_strdup(small[i]));
  g_autofree char *from = g_strconcat("adapter_from=", ckpt, NULL);
  const char *more[] = {"max_steps=1", "save_every=0", "finetune=lora", from};
  for (guint i = 0; i < G_N_ELEMENTS(more); i++) {
    g_ptr_array_add(args, g_strdup("--set"));
    g_ptr_array_add(args, g_strdup(more[i]));
  }
  g_ptr_array_add(args, g_strdup("--set"));
  g_ptr_array_add(args, g_strdup_printf("workspace_dir=%s", ws));
  g_ptr_array_add(args, NULL);
  FuzzRun r = fuzz_run_train((const char *const *)args->pdata, NULL, 30 * fuzz_time_scale());
  fuzz_judge_run(&c->t, ckpt, ckpt, FUZZ_REFUSE, &r);
  fuzz_run_clear(&r);
}

static void gen_adapter_from(Ctx *c)
{
  adapter_case(c, "adapter-from-full-run", c->state, c->model, FALSE);
  g_autofree char *lora = replace(c->state, "\"finetune\":\"full\"", "\"finetune\":\"lora\"");
  adapter_case(c, "adapter-from-no-adapters", lora, c->model, FALSE);
  g_autofree char *rank = replace(lora, "\"lora_rank\":8", "\"lora_rank\":3");
  adapter_case(c, "adapter-from-other-rank", rank, c->model, FALSE);
  GByteArray *flipped = model_copy(c);
  flipped->data[flipped->len - 1] ^= 1;
  adapter_case(c, "adapter-from-sha-mismatch", lora, flipped, FALSE);
  g_byte_array_unref(flipped);
  adapter_case(c, "adapter-from-model-missing", lora, NULL, FALSE);
  g_autofree char *cut = g_strndup(lora, strlen(lora) / 2);
  adapter_case(c, "adapter-from-truncated-state", cut, c->model, FALSE);
}

/* tests/fuzz/regressions/state/{accept,refuse}-*.json: state.json texts in which @SHA@ and
 * @CONFIG@ stand for the base checkpoint's model digest and config. */
static void replay_regressions(Ctx *c)
{
  g_autofree char *dir = g_test_build_filename(G_TEST_DIST, "fuzz", "regressions", "state", NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(GDir) d = g_dir_open(dir, 0, &error);
  g_assert_no_error(error);
  guint n = 0;
  const char *name;
  while ((name = g_dir_read_name(d))) {
    g_autofree char *path = g_build_filename(dir, name, NULL);
    g_autofree char *text = NULL;
    g_assert_true(g_file_get_contents(path, &text, NULL, NULL));
    g_autofree char *with_sha =
        strstr(text, "@SHA@") ? replace(text, "@SHA@", c->sha) : g_strdup(text);
    g_autofree char *state = strstr(with_sha, "@CONFIG@") ? replace(with_sha, "@CONFIG@", c->config)
                                                          : g_strdup(with_sha);
    g_autofree char *stem = g_strndup(name, strlen(name) - strlen(".json"));
    gboolean accept = g_str_has_prefix(name, "accept-");
    g_assert_true(accept || g_str_has_prefix(name, "refuse-"));
    state_case(c, stem, state, -1, accept ? FUZZ_ACCEPT : FUZZ_REFUSE, 2);
    n++;
  }
  g_test_message("%u saved regression inputs", n);
  g_assert_cmpuint(n, >=, 3);
}

/* Trains two steps with a checkpoint at each, and takes the second as the base. */
static void make_base(Ctx *c)
{
  g_autofree char *ws = g_build_filename(c->t.dir, "base", NULL);
  g_autoptr(GPtrArray) args = g_ptr_array_new_with_free_func(g_free);
  for (guint i = 0; small[i]; i++)
    g_ptr_array_add(args, g_strdup(small[i]));
  const char *more[] = {"max_steps=2", "save_every=1"};
  for (guint i = 0; i < G_N_ELEMENTS(more); i++) {
    g_ptr_array_add(args, g_strdup("--set"));
    g_ptr_array_add(args, g_strdup(more[i]));
  }
  g_ptr_array_add(args, g_strdup("--set"));
  g_ptr_array_add(args, g_strdup_printf("workspace_dir=%s", ws));
  g_ptr_array_add(args, NULL);
  FuzzRun r = fuzz_run_train((const char *const *)args->pdata, NULL, 120 * fuzz_time_scale());
  if (r.status != 0)
    g_error("the base run failed (%d): %s", r.status, r.err);
  fuzz_run_clear(&r);
  g_autofree char *ckpt = g_build_filename(ws, "checkpoints", "step-00000002", NULL);
  g_autofree char *state_path = g_build_filename(ckpt, "state.json", NULL);
  g_autofree char *model_path = g_build_filename(ckpt, "model.safetensors", NULL);
  g_autofree char *model = NULL;
  gsize model_len = 0;
  g_assert_true(g_file_get_contents(state_path, &c->state, NULL, NULL));
  g_assert_true(g_file_get_contents(model_path, &model, &model_len, NULL));
  c->model = g_byte_array_new();
  g_byte_array_append(c->model, (const guint8 *)model, (guint)model_len);
  c->sha = sha256_of(c->model->data, c->model->len);
  g_assert_nonnull(strstr(c->state, c->sha));
  const char *cfg = strstr(c->state, "\"config\": ");
  g_assert_nonnull(cfg);
  cfg += strlen("\"config\": ");
  const char *end = strchr(cfg, '\n');
  c->config = g_strndup(cfg, (gsize)(end ? end - cfg : (long)strlen(cfg)));
  if (g_str_has_suffix(c->config, ","))
    c->config[strlen(c->config) - 1] = '\0';
  /* The edits below rely on the layout cohort-train writes today. */
  g_assert_nonnull(strstr(c->state, "\"step\": 2,"));
  g_assert_nonnull(strstr(c->state, "\"batch_in_epoch\": 2,"));
}

static void test_checkpoint_fuzz(void)
{
  Ctx c;
  fuzz_tally_init(&c.t, "checkpoint");
  c.rng = fuzz_rng_new(3);
  make_base(&c);
  gen_state_layout(&c);
  gen_state_syntax(&c);
  gen_state_fields(&c);
  gen_model(&c);
  gen_file_kinds(&c);
  gen_adapter_from(&c);
  replay_regressions(&c);
  g_free(c.state);
  g_free(c.sha);
  g_free(c.config);
  g_byte_array_unref(c.model);
  fuzz_tally_finish(&c.t, 60);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/fuzz/checkpoint", test_checkpoint_fuzz);
  return g_test_run();
}

/* Distillation through cohort-train, end to end (one process; tests/test-distill-ddp.c runs
 * several):
 *  - a GPT student of a trained GPT teacher: both loss parts in every step event, the loss
 *    their alpha-mix, the teacher in the start event, its path and sha256 in state.json, no
 *    teacher tensor in the checkpoint (which holds the student's weights and AdamW moments
 *    only), the teacher's folder unchanged, and a resume with the same teacher;
 *  - a Hugging Face GPT-2 folder as teacher gives what the Cohort folder of the same weights
 *    gives, and a teacher folder with model-ema.safetensors teaches with the EMA weights;
 *  - a DiT student of a DiT teacher on the glyph set, with guidance distilled;
 *  - a ResNet-8 student of a trained ResNet-14 teacher on the glyph set: both parts in every
 *    step event, the teacher's size in the start event, no teacher tensor in the checkpoint,
 *    the teacher's folder unchanged;
 *  - bad teachers are one clear line and a failed exit: no folder, no config, no weights,
 *    another family, vocabulary, context, image size or classes, guidance from a teacher
 *    without label dropout, teacher_layers without a teacher, with init_from or for a ResNet,
 *    and a teacher changed (or dropped) at resume. */
#include "test-util.h"
#include "train-run.h"

#include "data/images.h"
#include "engine/model/distill.h"
#include "engine/model/model-io.h"
#include "engine/models/resnet.h"
#include "engine/config/presets.h"
#include "engine/train/teacher.h"
#include "kernels/backend.h"
#include "engine/models/registry.h"

static char *root;           /* everything the tests write */
static char *gpt_teacher;    /* a trained GPT: L2 H2 C32 T32 */
static char *dit_teacher;    /* a trained DiT on glyphs: 16×16, patch 4, L2 C32 */
static char *resnet_teacher; /* a trained ResNet-14 of width 8 on glyphs at 16×16 */

static const char *const gpt_sets[] = {
    "n_layer=1",      "n_head=2",       "n_embd=32",    "seq_len=32",
    "batch_size=4",   "warmup_steps=2", "eval_every=0", "eval_steps=2",
    "sample_every=0", "save_every=0",   "threads=1",    NULL,
};

static const char *const dit_sets[] = {
    "model=dit",
    "data_format=images",
    "train_data=builtin:glyphs/train",
    "val_data=builtin:glyphs/val",
    "image_size=16",
    "patch_size=4",
    "n_head=2",
    "batch_size=8",
    "warmup_steps=2",
    "eval_every=0",
    "eval_steps=2",
    "sample_every=0",
    "save_every=0",
    "threads=1",
    NULL,
};

static const char *const resnet_sets[] = {
    "model=resnet",
    "data_format=images",
    "train_data=builtin:glyphs/train",
    "val_data=builtin:glyphs/val",
    "image_size=16",
    "n_layer=8",
    "resnet_width=4",
    "optimizer=sgd",
    "learning_rate=0.05",
    "batch_size=8",
    "warmup_steps=0",
    "eval_every=0",
    "eval_steps=2",
    "sample_every=0",
    "save_every=0",
    "threads=1",
    NULL,
};

/* cohort-train with `base` then `extra` as --set, into workspace `ws`; `flags` (NULL-ended)
 * before them; progress events to `events` when given. */
static RunResult train(const char *ws, const char *const *base, const char *const *extra,
                       const char *const *flags, const char *events)
{
  g_autoptr(GPtrArray) args = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(args, g_strdup("--quiet"));
  for (guint i = 0; flags && flags[i]; i++)
    g_ptr_array_add(args, g_strdup(flags[i]));
  for (int k = 0; k < 2; k++)
    for (const char *const *s = k ? extra : base; s && *s; s++) {
      g_ptr_array_add(args, g_strdup("--set"));
      g_ptr_array_add(args, g_strdup(*s));
    }
  g_ptr_array_add(args, g_strdup("--set"));
  g_ptr_array_add(args, g_strdup_printf("workspace_dir=%s", ws));
  RunResult r = run_train(args, events);
  if (r.status != 0)
    g_test_message("exit %d: %s", r.status, r.err);
  return r;
}

static char *path_in(const char *dir, const char *name)
{
  return g_build_filename(dir, name, NULL);
}

static char *sha_of(const char *path)
{
  g_autoptr(GError) error = NULL;
  char *sha = cohort_file_sha256(path, &error);
  g_assert_no_error(error);
  return sha;
}

static gint compare_lines(gconstpointer a, gconstpointer b)
{
  return g_strcmp0(*(const char *const *)a, *(const char *const *)b);
}

/* sha256 of every regular file of a folder, "name sha\n" sorted: what "unchanged" means. */
static char *folder_digest(const char *dir)
{
  g_autoptr(GDir) d = g_dir_open(dir, 0, NULL);
  g_autoptr(GPtrArray) lines = g_ptr_array_new_with_free_func(g_free);
  const char *name;
  while (d && (name = g_dir_read_name(d))) {
    g_autofree char *p = path_in(dir, name);
    if (g_file_test(p, G_FILE_TEST_IS_REGULAR)) {
      g_autofree char *sha = sha_of(p);
      g_ptr_array_add(lines, g_strdup_printf("%s %s", name, sha));
    }
  }
  g_ptr_array_sort(lines, compare_lines);
  g_ptr_array_add(lines, NULL);
  return g_strjoinv("\n", (char **)lines->pdata);
}

static JsonObject *first_event(GPtrArray *events, const char *name)
{
  for (guint i = 0; i < events->len; i++) {
    JsonObject *o = g_ptr_array_index(events, i);
    if (g_str_equal(json_object_get_string_member(o, "event"), name))
      return o;
  }
  return NULL;
}

/* Every step event carries both parts and the loss is their mix. */
static guint check_steps(GPtrArray *events, double alpha)
{
  guint steps = 0;
  for (guint i = 0; i < events->len; i++) {
    JsonObject *o = g_ptr_array_index(events, i);
    if (!g_str_equal(json_object_get_string_member(o, "event"), "step"))
      continue;
    g_assert_true(json_object_has_member(o, "loss_distill"));
    g_assert_true(json_object_has_member(o, "loss_task"));
    double loss = json_object_get_double_member(o, "loss");
    double mix = alpha * json_object_get_double_member(o, "loss_distill") +
                 (1 - alpha) * json_object_get_double_member(o, "loss_task");
    g_assert_cmpfloat(fabs(loss - mix), <=, 1e-5 * fabs(loss) + 1e-7);
    steps++;
  }
  return steps;
}

static void test_gpt_run(void)
{
  g_autofree char *ws = path_in(root, "gpt-student");
  g_autofree char *events = path_in(root, "gpt-student.jsonl");
  g_autofree char *teacher_set = g_strdup_printf("teacher_from=%s", gpt_teacher);
  g_autofree char *before = folder_digest(gpt_teacher);
  const char *extra[] = {teacher_set,
                         "student_init=teacher_layers",
                         "distill_alpha=0.7",
                         "distill_temperature=3",
                         "max_steps=8",
                         "save_every=4",
                         NULL};
  RunResult r = train(ws, gpt_sets, extra, NULL, events);
  g_assert_cmpint(r.status, ==, 0);
  run_result_clear(&r);
  g_autoptr(GPtrArray) ev = tu_read_events(events);
  g_assert_cmpuint(check_steps(ev, 0.7), ==, 8);
  JsonObject *teacher = json_object_get_object_member(first_event(ev, "start"), "teacher");
  g_autofree char *weights = path_in(gpt_teacher, "model.safetensors");
  g_autofree char *sha = sha_of(weights);
  g_assert_cmpstr(json_object_get_string_member(teacher, "sha256"), ==, sha);
  g_assert_cmpstr(json_object_get_string_member(teacher, "weights"), ==, weights);
  g_assert_false(json_object_get_boolean_member(teacher, "ema"));
  g_assert_cmpint(json_object_get_int_member(teacher, "bytes"), >,
                  4 * json_object_get_int_member(teacher, "params"));

  /* state.json records the teacher; the checkpoint holds the student's tensors only */
  g_autofree char *ckpt = path_in(ws, "checkpoints/step-00000008");
  g_autofree char *state_path = path_in(ckpt, "state.json");
  g_autofree char *state = NULL;
  g_assert_true(g_file_get_contents(state_path, &state, NULL, NULL));
  g_autofree char *want_sha = g_strdup_printf("\"teacher_sha256\": \"%s\"", sha);
  g_autofree char *want_path = g_strdup_printf("\"teacher_path\": \"%s\"", gpt_teacher);
  g_assert_nonnull(strstr(state, want_sha));
  g_assert_nonnull(strstr(state, want_path));
  g_autoptr(GError) error = NULL;
  g_autofree char *ckpt_model = path_in(ckpt, "model.safetensors");
  g_autofree char *student_model = path_in(ws, "model.safetensors");
  g_autoptr(CohortStFile) cf = cohort_safetensors_open(ckpt_model, &error);
  g_autoptr(CohortStFile) sf = cohort_safetensors_open(student_model, &error);
  g_assert_no_error(error);
  guint n_ckpt = 0, n_student = g_strv_length((char **)cohort_safetensors_names(sf));
  for (const char *const *n = cohort_safetensors_names(cf); *n; n++, n_ckpt++) {
    const char *bare = *n;
    if (g_str_has_prefix(bare, "optim.m.") || g_str_has_prefix(bare, "optim.v."))
      bare += strlen("optim.m.");
    g_assert_true(cohort_safetensors_has(sf, bare)); /* no h.1.*: the teacher has two blocks */
  }
  g_assert_cmpuint(n_ckpt, ==, 3 * n_student); /* weights, m, v: no teacher, no EMA */
  g_autofree char *after = folder_digest(gpt_teacher);
  g_assert_cmpstr(before, ==, after);

  /* the same teacher resumes */
  const char *more[] = {teacher_set,         "student_init=teacher_layers",
                        "distill_alpha=0.7", "distill_temperature=3",
                        "max_steps=10",      NULL};
  const char *resume[] = {"--resume", "auto", NULL};
  r = train(ws, gpt_sets, more, resume, events);
  g_assert_cmpint(r.status, ==, 0);
  run_result_clear(&r);
  g_autoptr(GPtrArray) ev2 = tu_read_events(events);
  g_assert_cmpuint(check_steps(ev2, 0.7), ==, 2);
  tu_rm_rf(ws);
}

/* The step events' `member` values from step `from` on. */
static GArray *step_values(GPtrArray *events, const char *member, gint64 from)
{
  GArray *out = g_array_new(FALSE, FALSE, sizeof(double));
  for (guint i = 0; i < events->len; i++) {
    JsonObject *o = g_ptr_array_index(events, i);
    if (g_str_equal(json_object_get_string_member(o, "event"), "step") &&
        json_object_get_int_member(o, "step") >= from) {
      double v = json_object_get_double_member(o, member);
      g_array_append_val(out, v);
    }
  }
  return out;
}

/* A distillation resumed from its checkpoint ends as the run that never stopped: same losses
 * (both parts), bit-identical weights. */
static void test_resume_equals_straight(void)
{
  g_autofree char *ws_a = path_in(root, "straight"), *ws_b = path_in(root, "resumed");
  g_autofree char *ev_a = path_in(root, "straight.jsonl"), *ev_b = path_in(root, "resumed.jsonl");
  g_autofree char *teacher_set = g_strdup_printf("teacher_from=%s", gpt_teacher);
  const char *extra[] = {teacher_set, "max_steps=8", "save_every=4", "keep_last=0", NULL};
  RunResult r = train(ws_a, gpt_sets, extra, NULL, ev_a);
  g_assert_cmpint(r.status, ==, 0);
  run_result_clear(&r);
  g_autofree char *ckpt = path_in(ws_a, "checkpoints/step-00000004");
  const char *resume[] = {"--resume", ckpt, NULL};
  r = train(ws_b, gpt_sets, extra, resume, ev_b);
  g_assert_cmpint(r.status, ==, 0);
  run_result_clear(&r);
  g_autoptr(GPtrArray) a = tu_read_events(ev_a), b = tu_read_events(ev_b);
  const char *members[] = {"loss", "loss_distill", "loss_task"};
  for (guint m = 0; m < G_N_ELEMENTS(members); m++) {
    g_autoptr(GArray) va = step_values(a, members[m], 5), vb = step_values(b, members[m], 5);
    g_assert_cmpuint(va->len, ==, 4);
    g_assert_cmpmem(va->data, va->len * sizeof(double), vb->data, vb->len * sizeof(double));
  }
  g_autofree char *wa_path = path_in(ws_a, "model.safetensors");
  g_autofree char *wb_path = path_in(ws_b, "model.safetensors");
  g_autoptr(GArray) wa = tu_read_weights(wa_path), wb = tu_read_weights(wb_path);
  g_assert_cmpmem(wa->data, wa->len * 4, wb->data, wb->len * 4);
  tu_rm_rf(ws_a), tu_rm_rf(ws_b);
}

static void copy_file(const char *from_dir, const char *to_dir, const char *name)
{
  g_autofree char *a = path_in(from_dir, name), *b = path_in(to_dir, name);
  g_autofree char *data = NULL;
  gsize len = 0;
  g_assert_true(g_file_get_contents(a, &data, &len, NULL));
  g_assert_true(g_file_set_contents(b, data, (gssize)len, NULL));
}

/* Changes the last weight of a safetensors file in place (its lowest mantissa bit): another
 * valid file with another digest. */
static void nudge_weights(const char *path)
{
  g_autofree char *data = NULL;
  gsize len = 0;
  g_assert_true(g_file_get_contents(path, &data, &len, NULL));
  data[len - 4] ^= 1;
  g_assert_true(g_file_set_contents(path, data, (gssize)len, NULL));
}

static void test_changed_teacher_at_resume(void)
{
  g_autofree char *teacher = path_in(root, "teacher-copy");
  g_autofree char *ws = path_in(root, "resume-student");
  g_assert_cmpint(g_mkdir(teacher, 0755), ==, 0);
  copy_file(gpt_teacher, teacher, "model.safetensors");
  copy_file(gpt_teacher, teacher, "cohort-config.json");
  g_autofree char *teacher_set = g_strdup_printf("teacher_from=%s", teacher);
  const char *extra[] = {teacher_set, "max_steps=4", "save_every=2", NULL};
  RunResult r = train(ws, gpt_sets, extra, NULL, NULL);
  g_assert_cmpint(r.status, ==, 0);
  run_result_clear(&r);

  const char *resume[] = {"--resume", "auto", NULL};
  const char *more[] = {teacher_set, "max_steps=6", NULL};
  g_autofree char *weights = path_in(teacher, "model.safetensors");
  g_autofree char *old_sha = sha_of(weights);
  nudge_weights(weights);
  g_autofree char *new_sha = sha_of(weights);
  r = train(ws, gpt_sets, more, resume, NULL);
  g_assert_cmpint(r.status, ==, 1);
  g_assert_nonnull(strstr(r.err, "resume needs the teacher the run started with"));
  g_assert_nonnull(strstr(r.err, old_sha));
  g_assert_nonnull(strstr(r.err, new_sha));
  run_result_clear(&r);

  const char *none[] = {"max_steps=6", NULL};
  r = train(ws, gpt_sets, none, resume, NULL);
  g_assert_cmpint(r.status, ==, 1);
  g_assert_nonnull(strstr(r.err, "the checkpoint was distilled from a teacher"));
  run_result_clear(&r);

  /* and a run that began without a teacher does not continue with one */
  g_autofree char *plain = path_in(root, "plain-student");
  r = train(plain, gpt_sets, (const char *[]){"max_steps=2", "save_every=2", NULL}, NULL, NULL);
  g_assert_cmpint(r.status, ==, 0);
  run_result_clear(&r);
  r = train(plain, gpt_sets, more, resume, NULL);
  g_assert_cmpint(r.status, ==, 1);
  g_assert_nonnull(strstr(r.err, "the checkpoint was trained without a teacher"));
  run_result_clear(&r);
  tu_rm_rf(ws), tu_rm_rf(plain), tu_rm_rf(teacher);
}

/* Final weights of a short distillation from `teacher`. */
static GArray *distilled_weights(const char *teacher, const char *name)
{
  g_autofree char *ws = path_in(root, name);
  g_autofree char *events = g_strconcat(ws, ".jsonl", NULL);
  g_autofree char *teacher_set = g_strdup_printf("teacher_from=%s", teacher);
  const char *extra[] = {teacher_set, "max_steps=4", NULL};
  RunResult r = train(ws, gpt_sets, extra, NULL, events);
  g_assert_cmpint(r.status, ==, 0);
  run_result_clear(&r);
  g_autoptr(GPtrArray) ev = tu_read_events(events);
  g_assert_cmpuint(check_steps(ev, 0.5), ==, 4);
  g_autofree char *model = path_in(ws, "model.safetensors");
  GArray *w = tu_read_weights(model);
  tu_rm_rf(ws);
  return w;
}

static void test_hf_and_ema_teachers(void)
{
  /* the export's config.json and weights alone: a Hugging Face GPT-2 folder */
  g_autofree char *hf = path_in(root, "hf-teacher");
  g_assert_cmpint(g_mkdir(hf, 0755), ==, 0);
  copy_file(gpt_teacher, hf, "config.json");
  copy_file(gpt_teacher, hf, "model.safetensors");
  g_autoptr(GArray) a = distilled_weights(gpt_teacher, "from-cohort");
  g_autoptr(GArray) b = distilled_weights(hf, "from-hf");
  g_assert_cmpmem(a->data, a->len * 4, b->data, b->len * 4);

  /* model-ema.safetensors beside the weights is what teaches */
  g_autofree char *ema = path_in(root, "ema-teacher");
  g_assert_cmpint(g_mkdir(ema, 0755), ==, 0);
  copy_file(gpt_teacher, ema, "cohort-config.json");
  copy_file(gpt_teacher, ema, "model.safetensors");
  g_autofree char *src = path_in(gpt_teacher, "model.safetensors");
  g_autofree char *dst = path_in(ema, "model-ema.safetensors");
  g_autofree char *data = NULL;
  gsize len = 0;
  g_assert_true(g_file_get_contents(src, &data, &len, NULL));
  g_assert_true(g_file_set_contents(dst, data, (gssize)len, NULL));
  nudge_weights(dst);
  g_autofree char *ws = path_in(root, "from-ema");
  g_autofree char *events = path_in(root, "from-ema.jsonl");
  g_autofree char *teacher_set = g_strdup_printf("teacher_from=%s", ema);
  RunResult r =
      train(ws, gpt_sets, (const char *[]){teacher_set, "max_steps=2", NULL}, NULL, events);
  g_assert_cmpint(r.status, ==, 0);
  run_result_clear(&r);
  g_autoptr(GPtrArray) ev = tu_read_events(events);
  JsonObject *t = json_object_get_object_member(first_event(ev, "start"), "teacher");
  g_assert_true(json_object_get_boolean_member(t, "ema"));
  g_autofree char *ema_sha = sha_of(dst);
  g_assert_cmpstr(json_object_get_string_member(t, "weights"), ==, dst);
  g_assert_cmpstr(json_object_get_string_member(t, "sha256"), ==, ema_sha);
  tu_rm_rf(hf), tu_rm_rf(ema), tu_rm_rf(ws);
}

static void test_dit_run(void)
{
  g_autofree char *ws = path_in(root, "dit-student");
  g_autofree char *events = path_in(root, "dit-student.jsonl");
  g_autofree char *teacher_set = g_strdup_printf("teacher_from=%s", dit_teacher);
  const char *extra[] = {teacher_set,           "n_layer=1",         "n_embd=16",   "patch_size=2",
                         "distill_cfg_scale=2", "distill_alpha=0.8", "max_steps=4", NULL};
  RunResult r = train(ws, dit_sets, extra, NULL, events);
  g_assert_cmpint(r.status, ==, 0);
  run_result_clear(&r);
  g_autoptr(GPtrArray) ev = tu_read_events(events);
  g_assert_cmpuint(check_steps(ev, 0.8), ==, 4);
  tu_rm_rf(ws);
}

static void test_resnet_run(void)
{
  g_autofree char *ws = path_in(root, "resnet-student");
  g_autofree char *events = path_in(root, "resnet-student.jsonl");
  g_autofree char *teacher_set = g_strdup_printf("teacher_from=%s", resnet_teacher);
  g_autofree char *before = folder_digest(resnet_teacher);
  const char *extra[] = {teacher_set,   "distill_alpha=0.6", "distill_temperature=3",
                         "max_steps=4", "save_every=4",      NULL};
  RunResult r = train(ws, resnet_sets, extra, NULL, events);
  g_assert_cmpint(r.status, ==, 0);
  run_result_clear(&r);
  g_autoptr(GPtrArray) ev = tu_read_events(events);
  g_assert_cmpuint(check_steps(ev, 0.6), ==, 4);
  JsonObject *teacher = json_object_get_object_member(first_event(ev, "start"), "teacher");
  g_autoptr(CohortConfig) tc = cohort_config_new();
  g_autoptr(GError) error = NULL;
  const char *tsets[] = {"model=resnet", "n_layer=14", "resnet_width=8", "num_classes=36", NULL};
  g_assert_true(cohort_config_apply_assignments(tc, tsets, "test", &error));
  g_assert_cmpint(json_object_get_int_member(teacher, "params"), ==, cohort_model_count_params(tc));
  g_assert_cmpint(json_object_get_int_member(teacher, "bytes"), >,
                  4 * json_object_get_int_member(teacher, "params"));

  /* the checkpoint: the student's weights and buffers, and SGD's momentum for its weights */
  g_autofree char *ckpt_model = path_in(ws, "checkpoints/step-00000004/model.safetensors");
  g_autofree char *student_model = path_in(ws, "model.safetensors");
  g_autoptr(CohortStFile) cf = cohort_safetensors_open(ckpt_model, &error);
  g_autoptr(CohortStFile) sf = cohort_safetensors_open(student_model, &error);
  g_assert_no_error(error);
  guint n_state = 0, n_student = g_strv_length((char **)cohort_safetensors_names(sf));
  const char *momentum = "optim.momentum_buffer.";
  for (const char *const *n = cohort_safetensors_names(cf); *n; n++) {
    gboolean optim = g_str_has_prefix(*n, momentum);
    n_state += !optim;
    g_assert_true(cohort_safetensors_has(sf, optim ? *n + strlen(momentum) : *n));
    g_assert_false(g_str_has_prefix(*n, "layer1.1.")); /* the teacher has two blocks a stage */
  }
  g_assert_cmpuint(n_state, ==, n_student);
  g_autofree char *after = folder_digest(resnet_teacher);
  g_assert_cmpstr(before, ==, after);
  tu_rm_rf(ws);
}

/* A teacher folder made by hand: `cfg` as cohort-config.json, its model's weights (initialised,
 * or absent), and classes.json with `classes` when given. */
static char *fake_teacher(const char *name, const CohortConfig *cfg, gboolean weights,
                          const char *const *classes)
{
  char *dir = path_in(root, name);
  g_assert_cmpint(g_mkdir(dir, 0755), ==, 0);
  g_autoptr(GError) error = NULL;
  g_autofree char *cfg_path = path_in(dir, "cohort-config.json");
  g_assert_true(cohort_config_save_file(cfg, cfg_path, &error));
  if (weights) {
    g_autoptr(CohortModel) m = cohort_model_new(cohort_backend_cpu(), cfg, 1, &error);
    g_assert_no_error(error);
    m->ops->init_weights(m, 1);
    g_autofree char *w = path_in(dir, "model.safetensors");
    g_assert_true(cohort_model_save(m, NULL, w, NULL, &error));
  }
  if (classes) {
    g_autofree char *c = path_in(dir, "classes.json");
    g_assert_true(cohort_image_classes_write(classes, c, &error));
  }
  return dir;
}

/* A failed run whose stderr holds `want` on one line. */
static void expect_refusal(const char *const *base, const char *teacher, const char *const *more,
                           const char *want)
{
  g_autofree char *ws = path_in(root, "refused");
  g_autofree char *teacher_set = g_strdup_printf("teacher_from=%s", teacher ? teacher : "");
  g_autoptr(GPtrArray) extra = g_ptr_array_new();
  g_ptr_array_add(extra, teacher_set);
  for (guint i = 0; more && more[i]; i++)
    g_ptr_array_add(extra, (gpointer)more[i]);
  g_ptr_array_add(extra, "max_steps=2");
  g_ptr_array_add(extra, NULL);
  RunResult r = train(ws, base, (const char *const *)extra->pdata, NULL, NULL);
  g_test_message("%s", r.err);
  g_assert_cmpint(r.status, ==, 1);
  if (!strstr(r.err, want))
    g_error("stderr lacks \"%s\": %s", want, r.err);
  /* one line: "cohort-train: <message>" */
  g_assert_true(g_str_has_prefix(r.err, "cohort-train: "));
  g_assert_true(strchr(r.err, '\n') == r.err + strlen(r.err) - 1);
  run_result_clear(&r);
  tu_rm_rf(ws);
}

static CohortConfig *teacher_cfg(const char *model)
{
  CohortConfig *cfg = cohort_config_new();
  g_autoptr(GError) error = NULL;
  const char *gpt[] = {"n_layer=1", "n_head=2", "n_embd=16", "seq_len=32", NULL};
  const char *dit[] = {"model=dit",    "data_format=images", "n_layer=1",
                       "n_head=2",     "n_embd=16",          "image_size=16",
                       "patch_size=4", "num_classes=36",     NULL};
  g_assert_true(
      cohort_config_apply_assignments(cfg, g_str_equal(model, "gpt") ? gpt : dit, "test", &error));
  return cfg;
}

static void test_bad_teachers(void)
{
  g_autofree char *missing = path_in(root, "no-such-teacher");
  expect_refusal(gpt_sets, missing, NULL, "no such folder");
  g_autofree char *empty = path_in(root, "empty-teacher");
  g_assert_cmpint(g_mkdir(empty, 0755), ==, 0);
  expect_refusal(gpt_sets, empty, NULL, "holds neither cohort-config.json");

  g_autoptr(CohortConfig) gc = teacher_cfg("gpt");
  g_autofree char *no_weights = fake_teacher("no-weights", gc, FALSE, NULL);
  expect_refusal(gpt_sets, no_weights, NULL, "model.safetensors is missing");
  g_autoptr(CohortConfig) vocab = cohort_config_copy(gc);
  vocab->data_format = COHORT_DATA_TOKENS, vocab->vocab_size = 300;
  g_autofree char *vocab_dir = fake_teacher("vocab-300", vocab, TRUE, NULL);
  expect_refusal(gpt_sets, vocab_dir, NULL,
                 "the teacher has vocab_size 300 but the student has 256");
  g_autoptr(CohortConfig) ctx = cohort_config_copy(gc);
  ctx->seq_len = 16;
  g_autofree char *ctx_dir = fake_teacher("context-16", ctx, TRUE, NULL);
  expect_refusal(gpt_sets, ctx_dir, NULL,
                 "the teacher has seq_len 16, shorter than the student's 32");
  expect_refusal(gpt_sets, NULL, (const char *[]){"student_init=teacher_layers", NULL},
                 "\"teacher_layers\" is not allowed with \"teacher_from\": \"\"");
  g_autofree char *init = g_strdup_printf("init_from=%s/model.safetensors", gpt_teacher);
  expect_refusal(gpt_sets, gpt_teacher, (const char *[]){"student_init=teacher_layers", init, NULL},
                 "\"teacher_layers\" is not allowed with \"init_from\"");

  g_autoptr(CohortConfig) dc = teacher_cfg("dit");
  expect_refusal(gpt_sets, dit_teacher, NULL,
                 "the teacher is a \"dit\" model but the student is \"gpt\"");
  g_autoptr(CohortConfig) small = cohort_config_copy(dc);
  small->image_size = 8;
  g_autofree char *small_dir = fake_teacher("images-8", small, TRUE, NULL);
  expect_refusal(dit_sets, small_dir, NULL, "the teacher has image_size 8 but the student has 16");
  const char *letters[] = {"a", "b", "c", NULL};
  g_autoptr(CohortConfig) three = cohort_config_copy(dc);
  three->num_classes = 0;
  g_autofree char *names_dir = fake_teacher("other-classes", three, FALSE, letters);
  expect_refusal(dit_sets, names_dir, NULL, "the teacher was trained on the classes [a, b, c]");
  g_autoptr(CohortConfig) nodrop = cohort_config_copy(dc);
  nodrop->cfg_dropout = 0;
  g_autofree char *nodrop_dir = fake_teacher("no-dropout", nodrop, TRUE, NULL);
  expect_refusal(dit_sets, nodrop_dir, (const char *[]){"distill_cfg_scale=3", NULL},
                 "needs a teacher trained with label dropout");
  expect_refusal(resnet_sets, resnet_teacher, (const char *[]){"student_init=teacher_layers", NULL},
                 "key \"student_init\": \"teacher_layers\" is not allowed for model \"resnet\" "
                 "(its blocks change shape with depth); allowed: \"random\"");
  tu_rm_rf(empty), tu_rm_rf(no_weights), tu_rm_rf(vocab_dir), tu_rm_rf(ctx_dir);
  tu_rm_rf(small_dir), tu_rm_rf(names_dir), tu_rm_rf(nodrop_dir);
}

static const char *const quick_sets[] = {
    "max_steps=2",    "warmup_steps=1", "eval_every=0", "eval_steps=1",
    "sample_every=0", "save_every=0",   "threads=1",    NULL};

/* Each distill preset: about a quarter of its teacher preset's parameters, and two steps of it
 * against a teacher of that preset's shape. */
static void check_preset(const char *preset, const char *teacher_preset,
                         const char *const *teacher_sets)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortConfig) student = cohort_preset_load(preset, &error);
  g_assert_no_error(error);
  g_autoptr(CohortConfig) teacher = cohort_preset_load(teacher_preset, &error);
  g_assert_no_error(error);
  g_clear_error(&error);
  g_assert_true(cohort_config_apply_assignments(teacher, teacher_sets, "test", &error));
  g_assert_true(cohort_distill_check_config(student, preset, &error));
  if (student->num_classes == 0)
    student->num_classes = teacher->num_classes = 36; /* the glyph set's */
  double ratio =
      (double)cohort_model_count_params(student) / (double)cohort_model_count_params(teacher);
  g_test_message("%s: %.1f %% of its teacher's parameters", preset, 100 * ratio);
  g_assert_cmpfloat(ratio, >=, 0.2);
  g_assert_cmpfloat(ratio, <=, 0.3);
  g_autofree char *teacher_ws = path_in(root, teacher_preset);
  g_autofree char *student_ws = path_in(root, preset);
  const char *tflags[] = {"--preset", teacher_preset, NULL};
  g_autoptr(GPtrArray) tsets = g_ptr_array_new();
  for (guint i = 0; teacher_sets[i]; i++)
    g_ptr_array_add(tsets, (gpointer)teacher_sets[i]);
  g_ptr_array_add(tsets, NULL);
  RunResult r = train(teacher_ws, quick_sets, (const char *const *)tsets->pdata, tflags, NULL);
  g_assert_cmpint(r.status, ==, 0);
  run_result_clear(&r);
  g_autofree char *events = g_strconcat(student_ws, ".jsonl", NULL);
  g_autofree char *teacher_set = g_strdup_printf("teacher_from=%s", teacher_ws);
  const char *sflags[] = {"--preset", preset, NULL};
  r = train(student_ws, quick_sets, (const char *[]){teacher_set, NULL}, sflags, events);
  g_assert_cmpint(r.status, ==, 0);
  run_result_clear(&r);
  g_autoptr(GPtrArray) ev = tu_read_events(events);
  g_assert_cmpuint(check_steps(ev, student->distill_alpha), ==, 2);
  tu_rm_rf(teacher_ws), tu_rm_rf(student_ws);
}

static void test_presets(void)
{
  check_preset("distill-tiny-gpt", "tiny-gpt", (const char *[]){NULL});
  check_preset("distill-tiny-dit", "tiny-dit", (const char *[]){NULL});
  check_preset("distill-tiny-resnet", "tiny-resnet", (const char *[]){NULL});
}

/* The two teachers the tests distil from, trained here in a few seconds. */
static char *train_teacher(const char *name, const char *const *base, const char *const *extra)
{
  char *ws = path_in(root, name);
  RunResult r = train(ws, base, extra, NULL, NULL);
  g_assert_cmpint(r.status, ==, 0);
  run_result_clear(&r);
  return ws;
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  root = tu_mkdtemp("distill");
  gpt_teacher =
      train_teacher("gpt-teacher", gpt_sets, (const char *[]){"n_layer=2", "max_steps=30", NULL});
  dit_teacher = train_teacher("dit-teacher", dit_sets,
                              (const char *[]){"n_layer=2", "n_embd=32", "max_steps=20", NULL});
  resnet_teacher =
      train_teacher("resnet-teacher", resnet_sets,
                    (const char *[]){"n_layer=14", "resnet_width=8", "max_steps=10", NULL});
  g_test_add_func("/distill/gpt-run", test_gpt_run);
  g_test_add_func("/distill/resume-equals-straight", test_resume_equals_straight);
  g_test_add_func("/distill/changed-teacher-at-resume", test_changed_teacher_at_resume);
  g_test_add_func("/distill/hf-and-ema-teachers", test_hf_and_ema_teachers);
  g_test_add_func("/distill/dit-run", test_dit_run);
  g_test_add_func("/distill/resnet-run", test_resnet_run);
  g_test_add_func("/distill/bad-teachers", test_bad_teachers);
  g_test_add_func("/distill/presets", test_presets);
  int status = g_test_run();
  tu_rm_rf(root);
  g_free(root), g_free(gpt_teacher), g_free(dit_teacher), g_free(resnet_teacher);
  return status;
}

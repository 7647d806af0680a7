/* Mixed precision end to end on the CPU (which rounds the matrix-product operands as a GPU's
 * tensor cores would): fp16's dynamic loss scaling skips overflowing steps and moves the scale
 * as specified, skipped steps leave the weights alone, bf16 trains about as well as fp32 and
 * yet computes something else, and the scale survives a checkpoint. */
#include <gio/gio.h>

#include "cohort-build-config.h"
#include "kernels/cpu/gemm-paths.h"
#include "test-util.h"
#include "train-run.h"

#define SCALE_2_32 "4294967296"

typedef struct {
  gint64 step;
  double scale;
  gboolean skipped;
  gint64 skipped_steps;
} StepScale;

static GArray *step_scales(GPtrArray *ev)
{
  GArray *out = g_array_new(FALSE, FALSE, sizeof(StepScale));
  for (guint i = 0; i < ev->len; i++) {
    JsonObject *o = g_ptr_array_index(ev, i);
    if (!g_str_equal(json_object_get_string_member(o, "event"), "step"))
      continue;
    g_assert_true(json_object_has_member(o, "loss_scale"));
    StepScale s = {
        .step = json_object_get_int_member(o, "step"),
        .scale = json_object_get_double_member(o, "loss_scale"),
        .skipped = json_object_get_boolean_member(o, "skipped"),
        .skipped_steps = json_object_get_int_member(o, "skipped_steps"),
    };
    /* A skipped step's gradient norm is not finite, so it is left out. */
    g_assert_true(json_object_has_member(o, "grad_norm") == !s.skipped);
    g_array_append_val(out, s);
  }
  return out;
}

static JsonObject *find_event(GPtrArray *ev, const char *name)
{
  for (guint i = 0; i < ev->len; i++) {
    JsonObject *o = g_ptr_array_index(ev, i);
    if (g_str_equal(json_object_get_string_member(o, "event"), name))
      return o;
  }
  g_assert_not_reached();
}

static RunResult run_in(const char *ws, const char *events, const char *const *extra)
{
  g_autoptr(GPtrArray) args = small_args(ws, extra);
  RunResult r = run_train(args, events);
  if (r.status != 0)
    g_test_message("cohort-train failed: %s", r.err);
  g_assert_cmpint(r.status, ==, 0);
  return r;
}

/* Starting at 2^32, the scaled loss gradients overflow fp16 in the matrix products: steps are
 * skipped and the scale halves until they fit; then every 4 clean steps double it, until it
 * overflows again. The sequence is checked against the rule step by step. */
static void test_fp16_loss_scaling(void)
{
  g_autofree char *ws = tu_mkdtemp("fp16");
  g_autofree char *ev_path = g_build_filename(ws, "progress.jsonl", NULL);
  const char *extra[] = {"--set", "precision=fp16",
                         "--set", "loss_scale_init=" SCALE_2_32,
                         "--set", "loss_scale_growth_interval=4",
                         "--set", "max_steps=60",
                         "--set", "sample_every=0",
                         NULL};
  RunResult r = run_in(ws, ev_path, extra);
  g_autoptr(GPtrArray) ev = tu_read_events(ev_path);
  JsonObject *start = find_event(ev, "start");
  g_assert_cmpstr(json_object_get_string_member(start, "precision"), ==, "fp16");
  g_assert_cmpstr(json_object_get_string_member(start, "gemm"), ==, "fp16");
  g_assert_cmpfloat(json_object_get_double_member(start, "loss_scale"), ==, 4294967296.0);

  g_autoptr(GArray) s = step_scales(ev);
  g_assert_cmpuint(s->len, ==, 60);
  double expect = 4294967296.0;
  gint64 good = 0, skipped = 0, skipped_early = 0, doublings = 0;
  for (guint i = 0; i < s->len; i++) {
    StepScale *x = &g_array_index(s, StepScale, i);
    g_assert_cmpint(x->step, ==, i + 1);
    g_assert_cmpfloat(x->scale, ==, expect);
    if (x->skipped) {
      skipped++;
      skipped_early += i < 20;
      expect *= 0.5;
      good = 0;
    } else if (++good == 4) {
      expect *= 2;
      good = 0;
      doublings++;
    }
    g_assert_cmpint(x->skipped_steps, ==, skipped);
  }
  /* 2^32 is far past what fp16 holds: the first step must overflow, and reaching a scale that
   * fits takes a run of skipped steps; afterwards most steps are clean. */
  g_assert_true(g_array_index(s, StepScale, 0).skipped);
  g_assert_cmpint(skipped_early, >=, 8);
  g_assert_cmpint(doublings, >=, 3);
  g_assert_cmpint(skipped, <=, 40);
  JsonObject *done = find_event(ev, "done");
  g_assert_cmpint(json_object_get_int_member(done, "skipped_steps"), ==, skipped);
  /* It still learned from the clean steps: from ln 256 = 5.5 nats to about 3.9 here. */
  g_autoptr(GArray) losses = tu_event_values(ev, "step", "loss");
  g_assert_cmpfloat(json_object_get_double_member(done, "final_loss"), <,
                    g_array_index(losses, double, 0) - 1.0);
  run_result_clear(&r);
  tu_rm_rf(ws);
}

static GArray *exported(const char *ws)
{
  g_autofree char *path = g_build_filename(ws, "model.safetensors", NULL);
  return tu_read_weights(path);
}

/* Skipped steps change nothing: two and three all-skipped steps give the same weights (the
 * same AdamW count, no update), while three fp32 steps do change them. */
static void test_fp16_skipped_steps_keep_weights(void)
{
  const char *runs[][2] = {{"2", "fp16"}, {"3", "fp16"}, {"3", "fp32"}};
  g_autoptr(GPtrArray) weights = g_ptr_array_new_with_free_func((GDestroyNotify)g_array_unref);
  for (guint i = 0; i < G_N_ELEMENTS(runs); i++) {
    g_autofree char *ws = tu_mkdtemp("skip");
    g_autofree char *ev_path = g_build_filename(ws, "progress.jsonl", NULL);
    g_autofree char *steps = g_strdup_printf("max_steps=%s", runs[i][0]);
    g_autofree char *prec = g_strdup_printf("precision=%s", runs[i][1]);
    const char *extra[] = {"--set", steps,
                           "--set", prec,
                           "--set", "warmup_steps=0",
                           "--set", "loss_scale_init=" SCALE_2_32,
                           "--set", "sample_every=0",
                           NULL};
    RunResult r = run_in(ws, ev_path, extra);
    if (g_str_equal(runs[i][1], "fp16")) {
      g_autoptr(GPtrArray) ev = tu_read_events(ev_path);
      g_autoptr(GArray) s = step_scales(ev);
      for (guint k = 0; k < s->len; k++)
        g_assert_true(g_array_index(s, StepScale, k).skipped);
    }
    g_ptr_array_add(weights, exported(ws));
    run_result_clear(&r);
    tu_rm_rf(ws);
  }
  GArray *a = g_ptr_array_index(weights, 0), *b = g_ptr_array_index(weights, 1);
  GArray *c = g_ptr_array_index(weights, 2);
  g_assert_cmpuint(a->len, ==, b->len);
  g_assert_cmpmem(a->data, a->len * sizeof(float), b->data, b->len * sizeof(float));
  g_assert_cmpint(memcmp(a->data, c->data, a->len * sizeof(float)), !=, 0);
}

/* The log line that names what computes the matrix products in mode `mode`. */
static const char *products_line(GPtrArray *ev, const char *mode)
{
  g_autofree char *prefix = g_strdup_printf("%s matrix products: ", mode);
  for (guint i = 0; i < ev->len; i++) {
    JsonObject *o = g_ptr_array_index(ev, i);
    if (g_str_equal(json_object_get_string_member(o, "event"), "log") &&
        g_str_has_prefix(json_object_get_string_member(o, "message"), prefix))
      return json_object_get_string_member(o, "message");
  }
  g_error("no '%s...' log event", prefix);
}

/* bf16 operands: a close but different computation. Over 120 steps of the small model the
 * final validation loss is within 3% of fp32's (bf16 keeps 8 significant bits per operand,
 * sums stay fp32), while the weights differ. The log says which library computed the
 * products: bf16 hardware where this CPU has it, the build's fp32 library otherwise. */
static void test_bf16_close_to_fp32(void)
{
  double val[2];
  g_autoptr(GPtrArray) weights = g_ptr_array_new_with_free_func((GDestroyNotify)g_array_unref);
  const char *precs[] = {"precision=fp32", "precision=bf16"};
  for (guint i = 0; i < 2; i++) {
    g_autofree char *ws = tu_mkdtemp("bf16");
    g_autofree char *ev_path = g_build_filename(ws, "progress.jsonl", NULL);
    const char *extra[] = {"--set", precs[i], "--set", "sample_every=0", NULL};
    RunResult r = run_in(ws, ev_path, extra);
    g_autoptr(GPtrArray) ev = tu_read_events(ev_path);
    JsonObject *start = find_event(ev, "start");
    g_assert_cmpstr(json_object_get_string_member(start, "gemm"), ==, i ? "bf16" : "fp32");
    g_assert_false(json_object_has_member(start, "loss_scale"));
    const char *line = products_line(ev, i ? "bf16" : "fp32");
    g_test_message("%s", line);
    /* the library the trainer picks here is the one this process picks (the same build and
     * CPU: with cpu_blas auto, by what the CPU reports) */
    const char *lib = cohort_cpu_gemm_fp32_path() == COHORT_CPU_GEMM_ONEDNN ? "oneDNN" : "OpenBLAS";
    if (i && cohort_cpu_gemm_path_available(COHORT_CPU_GEMM_ONEDNN_BF16))
      g_assert_nonnull(strstr(line, "in hardware"));
    else
      g_assert_nonnull(strstr(line, lib));
    val[i] = json_object_get_double_member(find_event(ev, "done"), "val_loss");
    g_ptr_array_add(weights, exported(ws));
    run_result_clear(&r);
    tu_rm_rf(ws);
  }
  g_test_message("val loss fp32 %.4f, bf16 %.4f", val[0], val[1]);
  g_assert_cmpfloat(fabs(val[1] - val[0]), <, 0.03 * val[0]);
  GArray *a = g_ptr_array_index(weights, 0), *b = g_ptr_array_index(weights, 1);
  g_assert_cmpuint(a->len, ==, b->len);
  g_assert_cmpint(memcmp(a->data, b->data, a->len * sizeof(float)), !=, 0);
}

static GArray *scales_from(GPtrArray *ev, gint64 from_step)
{
  g_autoptr(GArray) s = step_scales(ev);
  GArray *out = g_array_new(FALSE, FALSE, sizeof(double));
  for (guint i = 0; i < s->len; i++)
    if (g_array_index(s, StepScale, i).step >= from_step)
      g_array_append_val(out, g_array_index(s, StepScale, i).scale);
  return out;
}

/* The loss scale, its clean-step count and the skipped-step count are checkpointed: 16 steps
 * then a resume to 40 equal 40 steps in one go, weights bit for bit. A checkpoint from before
 * these fields existed (the fields removed) resumes with the scale started afresh. */
static void test_fp16_resume(void)
{
  g_autofree char *ws_a = tu_mkdtemp("fp16-full");
  g_autofree char *ws_b = tu_mkdtemp("fp16-resumed");
  g_autofree char *ev_a = g_build_filename(ws_a, "progress.jsonl", NULL);
  g_autofree char *ev_b1 = g_build_filename(ws_b, "events-1.jsonl", NULL);
  g_autofree char *ev_b2 = g_build_filename(ws_b, "events-2.jsonl", NULL);
  const char *common[] = {"--set", "precision=fp16",
                          "--set", "loss_scale_init=1048576",
                          "--set", "loss_scale_growth_interval=3",
                          "--set", "lr_schedule=constant",
                          "--set", "warmup_steps=0",
                          "--set", "sample_every=0",
                          "--set", "eval_every=0"};
  g_autoptr(GPtrArray) base = g_ptr_array_new();
  for (guint i = 0; i < G_N_ELEMENTS(common); i++)
    g_ptr_array_add(base, (gpointer)common[i]);

  g_autoptr(GPtrArray) xa = g_ptr_array_copy(base, NULL, NULL);
  g_ptr_array_add(xa, "--set");
  g_ptr_array_add(xa, "max_steps=40");
  g_ptr_array_add(xa, NULL);
  RunResult ra = run_in(ws_a, ev_a, (const char *const *)xa->pdata);

  g_autoptr(GPtrArray) xb1 = g_ptr_array_copy(base, NULL, NULL);
  g_ptr_array_add(xb1, "--set");
  g_ptr_array_add(xb1, "max_steps=16");
  g_ptr_array_add(xb1, NULL);
  RunResult rb1 = run_in(ws_b, ev_b1, (const char *const *)xb1->pdata);

  g_autoptr(GPtrArray) xb2 = g_ptr_array_copy(base, NULL, NULL);
  const char *more[] = {"--set", "max_steps=40", "--resume", "auto", NULL};
  for (guint i = 0; more[i]; i++)
    g_ptr_array_add(xb2, (gpointer)more[i]);
  g_ptr_array_add(xb2, NULL);
  RunResult rb2 = run_in(ws_b, ev_b2, (const char *const *)xb2->pdata);

  g_autoptr(GPtrArray) events_a = tu_read_events(ev_a);
  g_autoptr(GPtrArray) events_b1 = tu_read_events(ev_b1);
  g_autoptr(GPtrArray) events_b2 = tu_read_events(ev_b2);
  JsonObject *start2 = find_event(events_b2, "start");
  g_assert_cmpint(json_object_get_int_member(start2, "start_step"), ==, 16);
  double carried = json_object_get_double_member(start2, "loss_scale");
  /* 16 steps with growth every 3 clean steps: the scale has moved from its start. */
  g_assert_cmpfloat(carried, !=, 1048576.0);
  g_autoptr(GArray) sa = scales_from(events_a, 17);
  g_autoptr(GArray) sb = scales_from(events_b2, 17);
  g_assert_cmpuint(sa->len, ==, 24);
  g_assert_cmpmem(sa->data, sa->len * sizeof(double), sb->data, sb->len * sizeof(double));
  g_assert_cmpint(json_object_get_int_member(find_event(events_a, "done"), "skipped_steps"), ==,
                  json_object_get_int_member(find_event(events_b2, "done"), "skipped_steps"));
  g_autoptr(GArray) wa = exported(ws_a);
  g_autoptr(GArray) wb = exported(ws_b);
  g_assert_cmpmem(wa->data, wa->len * sizeof(float), wb->data, wb->len * sizeof(float));

  /* An older checkpoint: the same folder without the three fields. */
  g_autofree char *ck = g_build_filename(ws_b, "checkpoints", "step-00000016", NULL);
  g_autofree char *state_path = g_build_filename(ck, "state.json", NULL);
  g_autofree char *state = NULL;
  g_assert_true(g_file_get_contents(state_path, &state, NULL, NULL));
  g_autoptr(GRegex) re =
      g_regex_new("  \"(loss_scale|scale_good_steps|skipped_steps)\": [0-9.e+-]+,\n", 0, 0, NULL);
  g_autofree char *old = g_regex_replace_literal(re, state, -1, 0, "", 0, NULL);
  g_assert_cmpuint(strlen(old), <, strlen(state));
  g_assert_null(strstr(old, "\"loss_scale\":"));
  g_assert_true(g_file_set_contents(state_path, old, -1, NULL));
  g_autofree char *ws_c = tu_mkdtemp("fp16-old");
  g_autofree char *ev_c = g_build_filename(ws_c, "progress.jsonl", NULL);
  g_autoptr(GPtrArray) xc = g_ptr_array_copy(base, NULL, NULL);
  const char *from_old[] = {"--set", "max_steps=18", "--resume", ck, NULL};
  for (guint i = 0; from_old[i]; i++)
    g_ptr_array_add(xc, (gpointer)from_old[i]);
  g_ptr_array_add(xc, NULL);
  RunResult rc = run_in(ws_c, ev_c, (const char *const *)xc->pdata);
  g_autoptr(GPtrArray) events_c = tu_read_events(ev_c);
  JsonObject *start_c = find_event(events_c, "start");
  g_assert_cmpint(json_object_get_int_member(start_c, "start_step"), ==, 16);
  g_assert_cmpfloat(json_object_get_double_member(start_c, "loss_scale"), ==, 1048576.0);

  run_result_clear(&ra);
  run_result_clear(&rb1);
  run_result_clear(&rb2);
  run_result_clear(&rc);
  tu_rm_rf(ws_a);
  tu_rm_rf(ws_b);
  tu_rm_rf(ws_c);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/mixed-precision/fp16-loss-scaling", test_fp16_loss_scaling);
  g_test_add_func("/mixed-precision/fp16-skipped-steps-keep-weights",
                  test_fp16_skipped_steps_keep_weights);
  g_test_add_func("/mixed-precision/bf16-close-to-fp32", test_bf16_close_to_fp32);
  g_test_add_func("/mixed-precision/fp16-resume", test_fp16_resume);
  return g_test_run();
}

/* Part of tests/test-resnet-ddp.c: the engine without SyncBatchNorm against PyTorch DDP over
 * Gloo (tests/torch_resnet_ddp.py). Both start from the same initial weights (written here,
 * given to cohort-train as init_from) and see the same per-rank batches (written here from
 * the engine's data pipeline: the DistributedSampler's indices for each rank and the images
 * with their augmentation, and each rank's share of the validation samples), so what remains
 * to compare is what DDP does.
 *
 * broadcast_buffers only ever changes the buffers of ranks other than 0 (rank 0's are the
 * source), which no file shows; evaluation does: every rank normalises with the running
 * statistics it holds, and the validation loss is summed over the ranks. So the runs are
 * compared on their losses, rank 0's export and the final validation loss, once with
 * broadcast_buffers and once without, each against PyTorch DDP with the same setting. */

enum { DDP_WORLD = 2, DDP_BATCH = 8, DDP_EVAL_STEPS = 2 };

static gboolean have_torch(void)
{
  return g_file_test("/usr/bin/python3", G_FILE_TEST_IS_EXECUTABLE) &&
         system("/usr/bin/python3 -c 'import torch.distributed' >/dev/null 2>&1") == 0;
}

static CohortConfig *ddp_config(void)
{
  g_autoptr(GError) error = NULL;
  CohortConfig *cfg = cohort_config_new();
  g_autofree char *b = g_strdup_printf("batch_size=%d", DDP_BATCH);
  g_assert_true(cohort_config_apply_assignments(cfg, base_sets, "test", &error));
  g_assert_true(cohort_config_set_assignment(cfg, b, "test", &error));
  return cfg;
}

/* Writes the initial weights of the config's seed to `weights` and each step's batch of each
 * rank to `batches` (the layout tests/torch_resnet_ddp.py reads). */
static void write_inputs(const char *ws, const char *weights, const char *batches)
{
  g_autoptr(CohortConfig) cfg = ddp_config();
  g_autoptr(GError) error = NULL;
  g_autofree char *cache = g_build_filename(ws, "cache", NULL);
  g_autoptr(CohortDataSource) s = cohort_data_source_open(cfg, cfg->train_data, cache, &error);
  g_assert_no_error(error);
  cfg->num_classes = cohort_data_source_num_classes(s);
  g_autoptr(CohortModel) m = cohort_model_new(cohort_backend_cpu(), cfg, DDP_BATCH, &error);
  g_assert_no_error(error);
  m->ops->init_weights(m, (guint64)cfg->seed);
  g_assert_true(cohort_model_save(m, NULL, weights, NULL, &error));

  const CohortResnetShape *sh = cohort_resnet_shape(m);
  size_t D = (size_t)sh->channels * sh->image_size * sh->image_size;
  GByteArray *out = g_byte_array_new();
  int hdr[9] = {sh->blocks_per_stage,
                sh->width,
                sh->channels,
                sh->image_size,
                sh->num_classes,
                DDP_BATCH,
                STEPS,
                DDP_EVAL_STEPS,
                DDP_WORLD};
  float mom = (float)cfg->bn_momentum;
  g_byte_array_append(out, (guint8 *)hdr, sizeof hdr);
  g_byte_array_append(out, (guint8 *)&mom, sizeof mom);
  g_autoptr(CohortBatch) batch = cohort_data_source_batch_new(s, DDP_BATCH);
  guint64 *idx[DDP_WORLD];
  for (int r = 0; r < DDP_WORLD; r++) {
    CohortSamplerSpec spec = {.n = cohort_data_source_count(s),
                              .world_size = DDP_WORLD,
                              .rank = r,
                              .shuffle = cfg->shuffle,
                              .seed = cfg->seed,
                              .drop_last = cfg->drop_last};
    guint64 n;
    idx[r] = cohort_sampler_indices(&spec, 0, &n);
    g_assert_cmpuint(n, >=, (guint64)STEPS * DDP_BATCH); /* all steps in epoch 0 */
  }
  for (int step = 0; step < STEPS; step++)
    for (int r = 0; r < DDP_WORLD; r++) {
      batch->B = DDP_BATCH;
      batch->epoch = 0;
      for (int b = 0; b < DDP_BATCH; b++)
        g_assert_true(cohort_data_source_load(s, batch, b, idx[r][step * DDP_BATCH + b], NULL));
      g_byte_array_append(out, (guint8 *)batch->images, DDP_BATCH * D * sizeof(float));
      g_byte_array_append(out, (guint8 *)batch->labels, DDP_BATCH * sizeof(int));
    }
  for (int r = 0; r < DDP_WORLD; r++)
    g_free(idx[r]);
  /* Evaluation: rank r's row b of batch s is validation sample (s·B + b)·world + r. */
  g_autoptr(CohortDataSource) val =
      cohort_data_source_open(cfg, "builtin:glyphs/val", cache, &error);
  g_assert_no_error(error);
  for (int step = 0; step < DDP_EVAL_STEPS; step++)
    for (int r = 0; r < DDP_WORLD; r++) {
      batch->B = DDP_BATCH;
      batch->epoch = -1;
      for (int b = 0; b < DDP_BATCH; b++)
        g_assert_true(cohort_data_source_load(
            val, batch, b, (guint64)((step * DDP_BATCH + b) * DDP_WORLD + r), NULL));
      g_byte_array_append(out, (guint8 *)batch->images, DDP_BATCH * D * sizeof(float));
      g_byte_array_append(out, (guint8 *)batch->labels, DDP_BATCH * sizeof(int));
    }
  g_assert_true(g_file_set_contents(batches, (char *)out->data, out->len, &error));
  g_byte_array_unref(out);
}

static gboolean is_buffer_name(const char *name)
{
  return g_str_has_suffix(name, ".running_mean") || g_str_has_suffix(name, ".running_var") ||
         g_str_has_suffix(name, ".num_batches_tracked");
}

/* Our export against the reference's lines from `first` (buffers, then parameters, each in
 * file order), each tensor relative to its largest reference value. */
static void compare_export(const char *path, GStrv lines, guint first, double *stats,
                           double *params)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortStFile) f = cohort_safetensors_open(path, &error);
  g_assert_no_error(error);
  guint at = first;
  *stats = *params = 0;
  for (int pass = 0; pass < 2; pass++)
    for (const char *const *name = cohort_safetensors_names(f); *name; name++) {
      if (is_buffer_name(*name) != (pass == 0))
        continue;
      int64_t shape[8];
      int nd = cohort_safetensors_shape(f, *name, shape);
      size_t n = 1;
      for (int d = 0; d < nd; d++)
        n *= (size_t)shape[d];
      g_autofree float *v = g_new(float, n);
      g_assert_true(cohort_safetensors_read_f32(f, *name, nd, shape, v, &error));
      double mx = 0, e = 0;
      for (size_t i = 0; i < n; i++) {
        g_assert_nonnull(lines[at + i]);
        double r = g_ascii_strtod(lines[at + i], NULL);
        mx = fmax(mx, fabs(r));
        e = fmax(e, fabs(v[i] - r));
      }
      at += (guint)n;
      double rel = mx > 0 ? e / mx : e;
      if (pass == 1)
        *params = fmax(*params, rel);
      else if (!g_str_has_suffix(*name, "num_batches_tracked"))
        *stats = fmax(*stats, rel);
      else
        g_assert_cmpfloat(e, ==, 0); /* the counters agree exactly */
    }
  g_assert_null(lines[at]);
}

/* Runs the reference with DDP's broadcast_buffers set or not; returns its output lines. */
static GStrv run_torch_ddp(const char *ws, const char *weights, const char *batches,
                           gboolean broadcast)
{
  g_autoptr(CohortConfig) cfg = ddp_config();
  g_autofree char *out = g_build_filename(ws, broadcast ? "torch-1.txt" : "torch-0.txt", NULL);
  g_autofree char *script = g_test_build_filename(G_TEST_DIST, "torch_resnet_ddp.py", NULL);
  g_autofree char *lr = g_strdup_printf("%.17g", cfg->learning_rate);
  g_autofree char *mom = g_strdup_printf("%.17g", cfg->momentum);
  g_autofree char *wd = g_strdup_printf("%.17g", cfg->weight_decay);
  const char *argv[] = {"/usr/bin/python3",    script, weights, batches, out, lr, mom, wd,
                        broadcast ? "1" : "0", NULL};
  g_autofree char *err = NULL, *text = NULL;
  g_autoptr(GError) error = NULL;
  int status = 0;
  g_spawn_sync(NULL, (char **)argv, NULL, G_SPAWN_STDOUT_TO_DEV_NULL, NULL, NULL, NULL, &err,
               &status, &error);
  g_assert_no_error(error);
  if (!g_spawn_check_wait_status(status, NULL))
    g_error("torch_resnet_ddp.py failed: %s", err);
  g_assert_true(g_file_get_contents(out, &text, NULL, &error));
  return g_strsplit(g_strstrip(text), "\n", -1);
}

static void test_against_torch_ddp(void)
{
  if (!have_torch()) {
    g_test_skip("PyTorch (torch.distributed) is not importable by /usr/bin/python3");
    return;
  }
  g_autofree char *ws = tu_mkdtemp("resnet-torch-ddp");
  g_autofree char *weights = g_build_filename(ws, "init.safetensors", NULL);
  g_autofree char *batches = g_build_filename(ws, "batches.bin", NULL);
  write_inputs(ws, weights, batches);

  g_autofree char *init = g_strdup_printf("init_from=%s", weights);
  g_autofree char *b = g_strdup_printf("batch_size=%d", DDP_BATCH);
  g_autofree char *ev = g_strdup_printf("eval_steps=%d", DDP_EVAL_STEPS);
  double val[2] = {0};
  for (int broadcast = 1; broadcast >= 0; broadcast--) {
    g_auto(GStrv) lines = run_torch_ddp(ws, weights, batches, broadcast);
    const char *bb = broadcast ? "broadcast_buffers=true" : "broadcast_buffers=false";
    Run run =
        train(DDP_WORLD, (const char *[]){b, init, bb, ev, "val_data=builtin:glyphs/val", NULL});
    double worst_loss = 0, stats, params;
    for (int s = 0; s < STEPS; s++) {
      double ref = g_ascii_strtod(lines[s], NULL), ours = g_array_index(run.loss, double, s);
      worst_loss = fmax(worst_loss, fabs(ours - ref) / ref);
    }
    double ref_val = g_ascii_strtod(lines[STEPS], NULL);
    double ref_acc = g_ascii_strtod(lines[STEPS + 1], NULL);
    g_assert_cmpuint(run.val_loss->len, ==, 1);
    double ours_val = g_array_index(run.val_loss, double, 0);
    double d_val = fabs(ours_val - ref_val) / ref_val;
    val[broadcast] = ref_val;
    compare_export(run.model, lines, STEPS + 2, &stats, &params);
    g_test_message("%s, %d ranks vs PyTorch DDP (Gloo): losses %.2e, rank 0's running "
                   "statistics %.2e, weights %.2e, validation loss %.2e (relative; %.6f, "
                   "accuracy %.4f vs %.4f)",
                   bb, DDP_WORLD, worst_loss, stats, params, d_val, ours_val,
                   g_array_index(run.accuracy, double, 0), ref_acc);
    g_assert_cmpfloat(worst_loss, <=, 1e-5);
    g_assert_cmpfloat(params, <=, 1e-5);
    g_assert_cmpfloat(stats, <=, 1e-5);
    g_assert_cmpfloat(d_val, <=, 1e-5);
    g_assert_cmpfloat(g_array_index(run.accuracy, double, 0), ==, ref_acc);
    run_clear(&run);
  }
  /* The setting is visible (ten times the tolerance): without the broadcast rank 1 evaluates
   * with its own statistics. */
  g_test_message("PyTorch's validation loss with and without broadcast_buffers: %.6f, %.6f", val[1],
                 val[0]);
  g_assert_cmpfloat(fabs(val[1] - val[0]) / val[1], >, 1e-4);
  tu_rm_rf(ws);
}

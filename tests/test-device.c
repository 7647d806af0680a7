/* Where a rank computes, without a GPU (engine/train/device.c): which CUDA device a local rank
 * takes for a given number of visible devices (a launcher that binds one GPU to each rank
 * included), the NVIDIA driver's GPUs and version as the kernel module lists them (fake
 * /proc files), the warning when `device: auto` falls back to the CPU while GPUs are present,
 * and that the trainer asks the device for a fault before it judges the loss: a fault whose
 * NaNs reach the gradient norm is reported as the fault, never as divergence (a stand-in
 * backend injects it). */
#include "engine/train/device.h"
#include "engine/train/trainer.h"
#include "kernels/backend.h"
#include "test-util.h"

#include <math.h>
#include <string.h>

static CohortConfig *config_of(const char *const *sets)
{
  CohortConfig *cfg = cohort_config_new();
  g_autoptr(GError) error = NULL;
  for (guint i = 0; sets[i] != NULL; i++) {
    g_auto(GStrv) kv = g_strsplit(sets[i], "=", 2);
    g_assert_true(cohort_config_set(cfg, kv[0], kv[1], "test", &error));
    g_assert_no_error(error);
  }
  return cfg;
}

/* device index for local rank lr of lws with `visible` devices and CUDA_VISIBLE_DEVICES `vis`;
 * -1 with the error's message in *message. */
static int index_for(const CohortConfig *cfg, int lr, int lws, int visible, const char *vis,
                     char **message)
{
  g_autoptr(GError) error = NULL;
  int d = cohort_device_index_for(cfg, "run.json", lr, lws, visible, vis, &error);
  g_assert_true((d < 0) == (error != NULL));
  if (message)
    *message = error ? g_strdup(error->message) : NULL;
  return d;
}

static void test_index_for(void)
{
  g_autoptr(CohortConfig) nccl = config_of((const char *[]){"distributed_backend=nccl", NULL});
  g_autoptr(CohortConfig) gloo = config_of((const char *[]){"distributed_backend=gloo", NULL});
  g_autoptr(CohortConfig) listed = config_of((const char *[]){"device_indexes=3,1", NULL});
  /* every rank sees the whole machine: one device each, by local rank */
  for (int lr = 0; lr < 4; lr++)
    g_assert_cmpint(index_for(nccl, lr, 4, 8, NULL, NULL), ==, lr);
  /* SLURM --gpus-per-task=1 (or a per-rank CUDA_VISIBLE_DEVICES): each rank sees only its own
   * GPU, as device 0 */
  for (int lr = 0; lr < 4; lr++)
    g_assert_cmpint(index_for(nccl, lr, 4, 1, "0", NULL), ==, 0);
  /* two GPUs bound to each of 4 ranks: each rank one of its own two */
  for (int lr = 0; lr < 4; lr++)
    g_assert_cmpint(index_for(nccl, lr, 4, 2, "4,5", NULL), ==, lr % 2);
  /* Gloo lets ranks share the GPUs they see */
  g_assert_cmpint(index_for(gloo, 3, 4, 2, NULL, NULL), ==, 1);
  /* too few GPUs for NCCL on a machine where every rank sees them all: said at once */
  g_autofree char *few = NULL;
  g_assert_cmpint(index_for(nccl, 2, 4, 2, NULL, &few), ==, -1);
  g_assert_nonnull(strstr(few, "run.json: key \"device\""));
  g_assert_nonnull(strstr(few, "4 local ranks but only 2 GPUs"));
  /* device_indexes wins, and names the key when it cannot */
  g_assert_cmpint(index_for(listed, 0, 2, 4, NULL, NULL), ==, 3);
  g_assert_cmpint(index_for(listed, 1, 2, 1, "7", NULL), ==, -1);
  g_autofree char *missing = NULL, *past = NULL;
  g_assert_cmpint(index_for(listed, 2, 3, 4, NULL, &missing), ==, -1);
  g_assert_nonnull(strstr(missing, "key \"device_indexes\" has 2 entries but local rank 2"));
  g_assert_cmpint(index_for(listed, 0, 2, 2, "0,1", &past), ==, -1);
  g_assert_nonnull(strstr(past, "entry 0 is 3 but 2 GPUs are visible (CUDA_VISIBLE_DEVICES=0,1)"));
  g_assert_cmpint(index_for(nccl, 0, 1, 0, "", NULL), ==, -1);
}

static void test_nvidia_proc(void)
{
  g_autofree char *dir = tu_mkdtemp("nvidia-proc");
  g_autofree char *gpus = g_build_filename(dir, "gpus", NULL);
  g_assert_cmpint(cohort_device_count_nvidia_gpus(gpus), ==, 0); /* no driver loaded */
  const char *buses[] = {"0000:17:00.0", "0000:3b:00.0"};
  for (guint i = 0; i < G_N_ELEMENTS(buses); i++) {
    g_autofree char *d = g_build_filename(gpus, buses[i], NULL);
    g_assert_cmpint(g_mkdir_with_parents(d, 0755), ==, 0);
  }
  g_assert_cmpint(cohort_device_count_nvidia_gpus(gpus), ==, 2);

  g_autofree char *version = g_build_filename(dir, "version", NULL);
  g_assert_null(cohort_device_nvidia_driver_version(version));
  const char *text = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 "
                     "01:15:15 UTC 2023\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n";
  g_assert_true(g_file_set_contents(version, text, -1, NULL));
  g_autofree char *v = cohort_device_nvidia_driver_version(version);
  g_assert_cmpstr(v, ==, "535.104.05");
  tu_rm_rf(dir);
}

static void test_fallback_message(void)
{
  const char *old_driver = "CUDA driver version is insufficient for CUDA runtime version";
  g_assert_null(cohort_device_fallback_message(0, old_driver, 13000, NULL));
  g_autofree char *m13 = cohort_device_fallback_message(2, old_driver, 13000, "535.104.05");
  g_test_message("%s", m13);
  g_assert_nonnull(strstr(m13, "device \"auto\": 2 NVIDIA GPUs are present (driver 535.104.05)"));
  g_assert_nonnull(strstr(m13, old_driver));
  g_assert_nonnull(strstr(m13, "training on the CPU"));
  g_assert_nonnull(strstr(m13, "CUDA 13.0 runtime needs driver 580 or newer"));
  g_assert_nonnull(strstr(m13, "docs/cuda.md"));
  g_autofree char *m12 = cohort_device_fallback_message(1, NULL, 12040, NULL);
  g_assert_nonnull(strstr(m12, "1 NVIDIA GPU is present but"));
  g_assert_nonnull(strstr(m12, "CUDA 12.4 runtime needs driver 525"));
  g_autofree char *none = cohort_device_fallback_message(4, NULL, 0, NULL);
  g_assert_nonnull(strstr(none, "this build has no CUDA path"));
  /* this machine: CUDA sees no device and /proc lists no NVIDIA GPU, or it uses them */
  g_autofree char *here = cohort_device_auto_fallback();
  g_assert_true(here == NULL || cohort_device_count_nvidia_gpus(NULL) > 0);
}

/* ---- a device fault is not divergence ---- */

static CohortBackend faulty;
static int faulted;

static double faulty_sum_squares(const float *values, size_t n)
{
  (void)values;
  (void)n;
  faulted = 1; /* what an illegal address leaves behind: garbage, here NaN */
  return NAN;
}

static const char *faulty_last_error(void)
{
  return faulted ? "cuda: attention_backward: an illegal memory access was encountered" : NULL;
}

static void test_fault_before_divergence(gconstpointer data)
{
  const char *precision = data;
  faulty = *cohort_backend_cpu();
  faulty.name = "faulty";
  faulty.sum_squares = faulty_sum_squares;
  faulty.last_error = faulty_last_error;
  faulted = 0;
  g_autofree char *ws = tu_mkdtemp("device-fault");
  g_autofree char *ws_set = g_strdup_printf("workspace_dir=%s", ws);
  g_autofree char *prec_set = g_strdup_printf("precision=%s", precision);
  g_autoptr(CohortConfig) cfg =
      config_of((const char *[]){"n_layer=1", "n_head=2", "n_embd=16", "seq_len=16", "batch_size=2",
                                 "max_steps=3", "warmup_steps=1", "eval_every=0", "sample_every=0",
                                 "save_every=0", "threads=1", "train_data=builtin:sample/train.txt",
                                 "val_data=builtin:sample/val.txt", ws_set, prec_set, NULL});
  CohortComputeDevice dev = {.be = &faulty, .cuda_device = -1};
  g_autoptr(CohortProgress) progress = cohort_progress_new(-1, FALSE);
  CohortTrainOptions opts = {.config_source = "test",
                             .progress = progress,
                             .world_size = 1,
                             .local_world_size = 1,
                             .device = &dev};
  g_autoptr(GError) error = NULL;
  gboolean ok = cohort_train(cfg, &opts, NULL, &error);
  g_assert_false(ok);
  g_assert_nonnull(error);
  g_test_message("%s", error->message);
  g_assert_nonnull(strstr(error->message, "faulty: cuda: attention_backward: an illegal memory"));
  g_assert_null(strstr(error->message, "diverged"));
  tu_rm_rf(ws);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/device/index-for", test_index_for);
  g_test_add_func("/device/nvidia-proc", test_nvidia_proc);
  g_test_add_func("/device/fallback-message", test_fallback_message);
  g_test_add_data_func("/device/fault-before-divergence", "fp32", test_fault_before_divergence);
  g_test_add_data_func("/device/fault-before-fp16-overflow", "fp16", test_fault_before_divergence);
  return g_test_run();
}

/* The printed commands run as printed (suite dist, loopback only): for one node with 2 ranks,
 * the cohort-train (spawn mode), cohort-run, torchrun and mpirun commands that
 * `cohort-run --print-commands` prints are run by a shell as they are, with the build's
 * programs on PATH, and each trains: it exits 0, its run is a world of 2, and every launcher
 * leaves the same weights, which differ from the starting ones. torchrun and mpirun are skipped
 * where they are not installed; torchrun is Debian's, with the -r 1 -t 1 its printed note asks
 * for. */
#include <math.h>
#include <sys/stat.h>

#include "commands-run.h"
#include "engine/distributed/store.h"

/* A port P with P + 1 free too (under torchrun Cohort's store takes P + 1), below the
 * ephemeral range where a connection of torchrun's own could take the second. */
static int free_port_pair(void)
{
  for (int tries = 0; tries < 100; tries++) {
    int port = cohort_store_find_free_port(20000 + g_random_int_range(0, 12000));
    /* The search starts after `near`: the next free port after P is P + 1. */
    if (port > 0 && port < 32000 && cohort_store_find_free_port(port) == port + 1)
      return port;
  }
  g_error("no free pair of ports");
  return 0;
}

/* Runs the printed command of `launcher` for a fresh 2-rank config; returns the weights. */
static GArray *run_printed(const char *launcher, const char *extra_path)
{
  g_autofree char *dir = tu_mkdtemp("printed");
  g_autofree char *port = g_strdup_printf("master_port=%d", free_port_pair());
  const char *extra[] = {"nproc_per_node=2", "use_torchrun=false", "batch_size=4", port, NULL};
  g_autofree char *config = cr_write_config(dir, extra);
  g_autofree char *text = cr_print(config);
  g_autofree char *cmd = cr_command(text, launcher, 0);
  g_test_message("%s:\n%s", launcher, cmd);
  g_auto(GStrv) env = cr_environ(extra_path);
  g_autoptr(GSubprocess) p = cr_start(NULL, cmd, env);
  g_autofree char *err = NULL;
  int status = cr_finish(p, &err);
  if (status != 0)
    g_error("%s exited %d:\n%s", launcher, status, err);
  /* A world of 2: rank 0's record says so. */
  g_autofree char *events = g_build_filename(dir, "ws", "events.jsonl", NULL);
  g_autoptr(GPtrArray) ev = tu_read_events(events);
  g_autoptr(GArray) world = tu_event_values(ev, "start", "world_size");
  g_assert_cmpuint(world->len, ==, 1);
  g_assert_cmpfloat(g_array_index(world, double, 0), ==, 2);
  GArray *w = cr_weights(dir);
  tu_rm_rf(dir);
  return w;
}

static GArray *reference;

static void check_same(const char *launcher, GArray *w)
{
  double diff = cr_max_diff(w, reference);
  g_test_message("%s: max |Δw| against spawn mode = %g", launcher, diff);
  /* Same ranks, same order of sums: the same numbers. */
  g_assert_cmpfloat(diff, ==, 0);
}

static void test_spawn(void)
{
  reference = run_printed("cohort-train", NULL);
  /* It trained: weights moved from where a run of no steps leaves them. */
  g_autofree char *dir = tu_mkdtemp("printed-0");
  const char *zero[] = {"max_steps=1", "learning_rate=1e-9", NULL};
  g_autofree char *config = cr_write_config(dir, zero);
  g_autofree char *cmd = g_strdup_printf("cohort-train --quiet --config %s", config);
  g_auto(GStrv) env = cr_environ(NULL);
  g_autoptr(GSubprocess) p = cr_start(NULL, cmd, env);
  g_autofree char *err = NULL;
  g_assert_cmpint(cr_finish(p, &err), ==, 0);
  g_autoptr(GArray) w0 = cr_weights(dir);
  g_assert_cmpfloat(cr_max_diff(w0, reference), >, 1e-3);
  tu_rm_rf(dir);
}

static void test_cohort_run(void)
{
  g_autoptr(GArray) w = run_printed("cohort-run", NULL);
  check_same("cohort-run", w);
}

static void test_torchrun(void)
{
  if (!g_file_test("/usr/bin/torchrun", G_FILE_TEST_IS_EXECUTABLE) ||
      system("/usr/bin/python3 -c 'import torch.distributed.run' >/dev/null 2>&1") != 0) {
    g_test_skip("Debian's torchrun (python3-torch) is not installed");
    return;
  }
  g_autofree char *dir = tu_mkdtemp("shim");
  g_autofree char *shim = cr_torchrun_shim(dir);
  g_autoptr(GArray) w = run_printed("torchrun", shim);
  check_same("torchrun", w);
  tu_rm_rf(dir);
}

static void test_mpirun(void)
{
  if (system("command -v mpirun >/dev/null 2>&1") != 0) {
    g_test_skip("Open MPI's mpirun is not installed");
    return;
  }
  g_autoptr(GArray) w = run_printed("mpirun", NULL);
  check_same("mpirun", w);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/commands-run/spawn", test_spawn);
  g_test_add_func("/commands-run/cohort-run", test_cohort_run);
  g_test_add_func("/commands-run/torchrun", test_torchrun);
  g_test_add_func("/commands-run/mpirun", test_mpirun);
  int rc = g_test_run();
  if (reference)
    g_array_unref(reference);
  return rc;
}

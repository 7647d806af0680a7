/* How the CPU backend's two thread pools share the cores.
 *
 * Our loops run on OpenMP threads; OpenBLAS (Debian's default build) runs GEMMs on its own
 * pthreads. By default both spin while idle, so with more than one thread each pool burns the
 * cores the other needs: on the 2-core build machine a 2-thread training step took 2.6 times
 * as long as with idle threads that sleep (docs/benchmarks.md). Both libraries read their
 * settings once, when they load, before main() runs. */
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

/* Call first thing in main(). When OMP_WAIT_POLICY or OPENBLAS_THREAD_TIMEOUT is unset, sets
 * OMP_WAIT_POLICY=passive and OPENBLAS_THREAD_TIMEOUT=4 (sleep after ~2^4 cycles of spinning)
 * and re-executes the program once with the same arguments, so the libraries load with them.
 * Settings the user gave are kept. Open file descriptors and the process id are unchanged.
 * If the re-execution fails the program goes on with the libraries' defaults. */
void cohort_cpu_threading_env(char **argv);

#ifdef __cplusplus
}
#endif

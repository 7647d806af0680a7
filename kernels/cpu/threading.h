/* How the CPU backend's threads share the cores.
 *
 * Our loops and oneDNN's products run on OpenMP threads, and so does OpenBLAS in the default
 * build (-Dopenblas=openmp, Debian's OpenMP OpenBLAS): one pool. With -Dopenblas=system,
 * Debian's default pthreads OpenBLAS runs GEMMs on a second pool of its own. Idle threads spin
 * by default. With two pools each burns the cores the other needs (a 2-thread step took 2.6
 * times as long as with idle threads that sleep); with one pool, spinning still halved the
 * 2-thread speed on a shared, busy machine (docs/benchmarks.md, "CPU matrix products"). So the
 * programs make idle threads sleep. Both libraries read these settings once, when they load,
 * before main() runs. */
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

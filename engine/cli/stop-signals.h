/* SIGINT and SIGTERM in a training process: a stop request the trainer takes at the next step
 * boundary (it saves a checkpoint first), received by a thread of its own.
 *
 * Why a thread: a signal handler runs on the stack of whichever thread the signal interrupts,
 * its frame pushed just below that thread's stack pointer. With such a handler, a SIGTERM in
 * the middle of a training step corrupted the heap in 5 of 40 tries (glibc aborted in a free()
 * inside dnnl_sgemm); the same handler on an alternate stack gave 0 of 40, so something in the
 * step keeps data below its stack pointer (which kernel was not pinned down). Here the two
 * signals are blocked in every thread the process creates after cohort_stop_signals_start, and
 * one thread takes them with sigwait(): no computing thread is ever interrupted. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* Blocks SIGINT and SIGTERM in the calling thread (so in every thread it creates from now on)
 * and starts the thread that receives them. Call before any other thread exists. Until
 * cohort_stop_signals_arm, either signal ends the process as its default action does. */
void cohort_stop_signals_start(void);

/* From now on the first SIGINT or SIGTERM sets *flag to the signal's number; a second one ends
 * the process by that signal (the user means it). */
void cohort_stop_signals_arm(volatile int *flag);

G_END_DECLS

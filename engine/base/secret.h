/* The job secret: the random value every rank of a job shares (in COHORT_JOB_TOKEN), from
 * which the ranks derive the rendezvous store's token (engine/distributed/env.h). Drawn by a
 * launcher on one node, and by the printed commands for several nodes; it sits in the config
 * part so that the launch plan and the window can draw one without the distributed layer. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* The environment variable that carries the job secret to every rank. */
#define COHORT_JOB_TOKEN_VAR "COHORT_JOB_TOKEN"

/* A fresh job secret: 128 bits from the kernel's random source (getrandom, else
 * /dev/urandom) as 32 hex digits. NULL with a G_IO_ERROR when neither works. */
char *cohort_secret_new(GError **error);

G_END_DECLS

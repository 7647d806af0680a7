/* Listening sockets for the rendezvous store's server (store-listen.c). Internal to
 * engine/distributed. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* Listens on `port` of every address `bind_addr` resolves to (NULL = every address,
 * dual-stack IPv6 where the host has it, else IPv4). Appends each listening fd (int) to
 * `fds` and its numeric address (char*) to `addresses`; returns the port bound (the one
 * picked when `port` is 0), or 0 with an error: COHORT_DIST_ERROR_ADDR_IN_USE when the port
 * is taken (the message names it and suggests a free one), COHORT_DIST_ERROR_FAILED
 * otherwise (e.g. `bind_addr` is not an address of this host). On error nothing is left
 * open. */
int store_listen(const char *bind_addr, int port, GArray *fds, GPtrArray *addresses,
                 GError **error);

/* TRUE for a numeric loopback address: 127.0.0.0/8, ::1, or ::ffff:127.x.y.z. */
gboolean store_address_is_loopback(const char *numeric);

G_END_DECLS

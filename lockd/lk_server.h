/*
 * lk_server.h - the server core split for shoal-lockd's main: bind first,
 * daemonize, then run the loop in the calling thread.  lockd_start (in
 * include/shoal/lockd.h) is lockd_create + a thread running lockd_run.
 */
#ifndef SHOAL_LK_SERVER_H
#define SHOAL_LK_SERVER_H

#include "shoal/lockd.h"

/* Read the secret, bind every listener; no thread yet. */
int lockd_create(const struct lockd_config *cfg, struct lockd **out, char *err, size_t errlen);
/* The event loop; returns when lockd_wake_stop was called (0) or on a fatal error (-errno). */
int lockd_run(struct lockd *d);
/* Ask the loop to return; async-signal-safe. */
void lockd_wake_stop(struct lockd *d);
/* Close everything (unix sockets unlinked) and free; the loop must not run. */
void lockd_destroy(struct lockd *d);

#endif

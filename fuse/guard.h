/*
 * guard.h - the guardian of a mount: a small process that outlives a
 * shoal-mount that dies, and frees the mount's users (guard.c).
 */
#ifndef SHOAL_FUSE_GUARD_H
#define SHOAL_FUSE_GUARD_H

#include <sys/types.h>

/*
 * Start the guardian of mountpoint; call before any thread exists and
 * before the device is opened (it forks, and keeps no descriptor of
 * ours).  0, or -errno (the mount then runs without one, and says so).
 */
int guard_start(const char *mountpoint);
/* The mount(2) on mountpoint comes next: a death from now on frees the
 * new mount there even before guard_mounted (the top one there, if it is
 * a fuse.shoal mount that was not there at this call). */
void guard_mounting(const char *mountpoint);
/* The mount is up, as device dev: from now on a death of this process
 * aborts its FUSE connection and detaches it. */
void guard_mounted(dev_t dev);
/* The mount is gone the normal way (unmounted): the guardian leaves. */
void guard_done(void);

#endif

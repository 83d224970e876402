/*
 * lock_nolock.c - the single-node lock module: every request is granted at
 * once in the mode asked (GFS2's lock_nolock), the node always uses journal
 * 0 unless told otherwise, and no callback ever comes.
 *
 * Invariant: (1) nolock is only safe when one process mounts the device;
 * shoal-mount enforces that with an exclusive flock on the device.
 */
#include "internal.h"
#include "lock.h"

static int nolock_mount(struct shoal_fs *fs, const char *table, const char *node,
			uint32_t *journal)
{
	(void)fs;
	(void)table;
	(void)node;
	*journal = 0;
	return 0;
}

static void nolock_unmount(struct shoal_fs *fs)
{
	(void)fs;
}

static int nolock_lock(struct shoal_fs *fs, struct glock *gl, int state, int flags)
{
	(void)fs;
	(void)gl;
	(void)flags;
	return state;
}

static int nolock_unlock(struct shoal_fs *fs, struct glock *gl)
{
	(void)fs;
	(void)gl;
	return 0;
}

const struct lm_ops lm_nolock_ops = {
	.lm_name = "nolock",
	.lm_mount = nolock_mount,
	.lm_unmount = nolock_unmount,
	.lm_lock = nolock_lock,
	.lm_unlock = nolock_unlock,
	.lm_cluster = 0,
};

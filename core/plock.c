/*
 * plock.c - posix (fcntl, OFD) and flock locks of files through the lock
 * module (docs/LOCKING.md "Posix and flock locks"): with a cluster lock
 * module they are held by shoal-lockd's plock lock space, so they hold
 * across nodes; with lock=nolock, or a lockd too old to serve them, the
 * kernel keeps them (the FUSE glue does not offer them) and these calls
 * return -ENOSYS.
 *
 * They take no glock and no fs_lock: a posix lock protects nothing of
 * shoal's own, only what programs agree on.  (1) a lock module that lost
 * lockd answers -ENOTCONN; applications get -ENOLCK.
 */
#include <errno.h>
#include <string.h>

#include "internal.h"
#include "lock.h"
#include "shoal/lockd.h"

static int lost(int err)
{
	return err == -ENOTCONN ? -ENOLCK : err; /* (1) */
}

int shoal_plock_supported(struct shoal_fs *fs)
{
	return fs->fs_lm->lm_plock && fs->fs_lm->lm_plock_ok && fs->fs_lm->lm_plock_ok(fs);
}

int shoal_plock(struct shoal_fs *fs, int op, struct lk_plock *pl)
{
	if (!shoal_plock_supported(fs))
		return -ENOSYS;
	return lost(fs->fs_lm->lm_plock(fs, op, pl));
}

int shoal_plock_wait(struct shoal_fs *fs, const struct lk_plock *pl,
		     void (*done)(void *arg, int err), void *arg, uint32_t *token)
{
	if (!shoal_plock_supported(fs))
		return -ENOSYS;
	return lost(fs->fs_lm->lm_plock_wait(fs, pl, done, arg, token));
}

void shoal_plock_stats(struct shoal_fs *fs, struct shoal_plock_stats *st)
{
	memset(st, 0, sizeof(*st));
	if (shoal_plock_supported(fs) && fs->fs_lm->lm_plock_stats)
		fs->fs_lm->lm_plock_stats(fs, st);
}

int shoal_plock_cancel(struct shoal_fs *fs, uint64_t ino, uint32_t token)
{
	if (!shoal_plock_supported(fs))
		return -ENOSYS;
	return lost(fs->fs_lm->lm_plock_cancel(fs, ino, token));
}

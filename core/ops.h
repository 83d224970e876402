/*
 * ops.h - what the operation modules of libshoal (ops.c, rw.c, falloc.c) share:
 * fs_lock, the glock hold of an operation, the restart loop (RUN), and the
 * privileges a write-like operation drops.  Private to core/.
 */
#ifndef SHOAL_OPS_H
#define SHOAL_OPS_H

#include "internal.h"
#include "lock.h"

#define LOCK(fs) pthread_mutex_lock(&(fs)->fs_lock)
#define UNLOCK(fs) pthread_mutex_unlock(&(fs)->fs_lock)

/* Blocks an operation may dirty besides allocations. */
#define RES_META 24

static inline int nochange_flags(struct shoal_inode *ip)
{
	return ip_di(ip)->di_flags & (SHOAL_DIF_IMMUTABLE | SHOAL_DIF_APPEND);
}

/*
 * Hold the inode's glock in state for this operation (R1: reads ask for SH
 * only).  Under fs_lock the hold is released at once; the grant stays
 * cached, so only the first use of an inode costs a lock module request.
 */
static inline int hold(struct shoal_fs *fs, uint64_t ino, int state)
{
	return gl_hold(fs, GL_INODE, ino, state);
}

/* Hold the inode's glock in state, then the in-memory inode. */
static inline int iget(struct shoal_fs *fs, uint64_t ino, int state, struct shoal_inode **ipp)
{
	int err = hold(fs, ino, state);
	return err ? err : inode_get(fs, ino, ipp);
}

/*
 * Run an operation again after it asked for a glock it could not get
 * without waiting (-ERESTART, before it changed anything): op_wait takes
 * what it needs without fs_lock (lock.h).
 */
#define RUN(fs, call)                                                  \
	({                                                             \
		__typeof__(call) r_;                                   \
		inode_stat_generation(0, NULL); /* forget the last */  \
		op_begin(fs);                                          \
		for (;;) {                                             \
			r_ = (call);                                   \
			if (r_ != -ERESTART)                           \
				break;                                 \
			int w_ = op_wait(fs);                          \
			if (w_) {                                      \
				r_ = w_ == -EDEADLK ? -ERESTART : w_;  \
				break;                                 \
			}                                              \
		}                                                      \
		op_end(fs);                                            \
		r_;                                                    \
	})

/* Reference an inode for an operation that will drop fs_lock midway. */
static inline int io_get(struct shoal_fs *fs, uint64_t ino, int state, struct shoal_inode **ipp)
{
	int err;
	LOCK(fs);
	err = hold(fs, ino, state);
	if (!err)
		err = inode_get(fs, ino, ipp);
	UNLOCK(fs);
	return err;
}

static inline void io_put(struct shoal_fs *fs, struct shoal_inode *ip)
{
	LOCK(fs);
	inode_put(fs, ip);
	UNLOCK(fs);
}

/* ops.c: a read's atime, as docs/LOCKING.md "atime" says. */
void ops_update_atime(struct shoal_fs *fs, struct shoal_inode *ip, int flags);

/*
 * ops.c: what writing, truncating or fallocating drops (set-ID bits,
 * security.capability): prepare before the transaction, kill inside it.
 */
int ops_kill_priv_prepare(struct shoal_fs *fs, const struct shoal_ctx *ctx,
			  struct shoal_inode *ip, int *cap);
int ops_kill_priv(struct shoal_fs *fs, const struct shoal_ctx *ctx, struct shoal_inode *ip,
		  int cap);

#endif

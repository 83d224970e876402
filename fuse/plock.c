/*
 * plock.c - fcntl (POSIX and OFD) and flock locks of shoal-mount: the FUSE
 * getlk, setlk and flock requests, forwarded to the cluster's lock manager
 * through libshoal (shoal_plock*, docs/LOCKING.md "Posix and flock
 * locks"), and the bookkeeping that lets go of a closed file's locks.
 *
 * What the kernel sends (fs/fuse/file.c): every lock request carries the
 * open file's fh and a lock owner: the process's file table for POSIX
 * locks, the open file itself for OFD and flock locks.  It keeps no lock
 * of its own, so it also drops none: a close sends FLUSH with the file
 * table as lock owner (POSIX: any close drops the process's locks on the
 * file), the last close of an open file sends RELEASE, with
 * FLOCK_UNLOCK and the open file as owner if flock was used on it, and
 * with nothing that names an OFD owner.  So this node remembers, per
 * (inode, owner) that got a lock, the fh it came through (struct
 * pl_owner): FLUSH drops the owner it names, RELEASE drops every owner
 * only ever seen through the released fh (an OFD owner is one open file).
 *
 * Invariants:
 *  (1) an owner that may hold a lock at lockd has an entry here (noted
 *      before the reply that tells the kernel it got it), so a close or
 *      release that should drop it asks lockd to (LK_PL_CLOSE); one that
 *      has none costs no round trip;
 *  (2) a blocking request (F_SETLKW, flock without LOCK_NB) holds no
 *      FUSE worker thread while it waits: it is sent, and answered from
 *      the lock manager's thread when lockd answers (struct pl_wait);
 *      a signal to the waiting process (FUSE INTERRUPT) cancels it at
 *      lockd, which answers EINTR unless it was granted first; a lost
 *      lockd answers ENOLCK.  So every wait ends: granted, interrupted,
 *      refused (EDEADLK) or lockd gone;
 *  (3) exactly one reply per request: the waiting request is answered by
 *      whichever of its sender (after registering the interrupt callback)
 *      and its completion comes second (pw_registered, pw_done under
 *      pw_mu), after taking the interrupt callback back; none once the
 *      session is being destroyed (plock_session_end: the unmount, whose
 *      LEAVE answers the waits that are left with ENOTCONN).
 */
#include "smount.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>

#include <shoal/lockd.h>

#define PO_HASH 1024

struct pl_owner {
	uint64_t po_ino, po_owner;
	uint64_t po_fh;	 /* the fh it was first seen through */
	int po_multi;	 /* seen through another fh too (a POSIX owner) */
	struct pl_owner *po_next;
};

static pthread_mutex_t po_mu = PTHREAD_MUTEX_INITIALIZER; /* protects po_hash */
static struct pl_owner *po_hash[PO_HASH];

static size_t po_bucket(uint64_t ino)
{
	return (size_t)((ino * 0x9e3779b97f4a7c15ull) >> 40) & (PO_HASH - 1);
}

/* (1): owner may now hold locks on ino, got through fh. */
static void owner_note(uint64_t ino, uint64_t owner, uint64_t fh)
{
	struct pl_owner *po;

	pthread_mutex_lock(&po_mu);
	for (po = po_hash[po_bucket(ino)]; po; po = po->po_next) {
		if (po->po_ino == ino && po->po_owner == owner) {
			if (po->po_fh != fh)
				po->po_multi = 1;
			goto out;
		}
	}
	po = calloc(1, sizeof(*po));
	if (!po) {
		/* the lock stays at lockd until this node leaves or the
		 * owner unlocks it: say so */
		fprintf(stderr, "shoal-mount: out of memory noting a lock owner of inode %llu: "
				"its locks outlive its close\n", (unsigned long long)ino);
		goto out;
	}
	po->po_ino = ino;
	po->po_owner = owner;
	po->po_fh = fh;
	po->po_next = po_hash[po_bucket(ino)];
	po_hash[po_bucket(ino)] = po;
out:
	pthread_mutex_unlock(&po_mu);
}

/*
 * Take the entries of ino that match off the table into *out (at most
 * max): by owner (FLUSH), or, owner_any, those seen only through fh
 * (RELEASE).  Returns how many.
 */
static size_t owners_take(uint64_t ino, uint64_t owner, int owner_any, uint64_t fh,
			  uint64_t *out, size_t max)
{
	struct pl_owner **pp, *po;
	size_t n = 0;

	pthread_mutex_lock(&po_mu);
	for (pp = &po_hash[po_bucket(ino)]; (po = *pp) && n < max;) {
		int take = po->po_ino == ino &&
			   (owner_any ? po->po_fh == fh && !po->po_multi : po->po_owner == owner);
		if (!take) {
			pp = &po->po_next;
			continue;
		}
		*pp = po->po_next;
		out[n++] = po->po_owner;
		free(po);
	}
	pthread_mutex_unlock(&po_mu);
	return n;
}

static void drop_owner(struct shoal_fs *fs, uint64_t ino, uint64_t owner)
{
	struct lk_plock pl = { .pl_ino = ino, .pl_owner = owner };
	int err = shoal_plock(fs, LK_PL_CLOSE, &pl);

	if (err)
		fprintf(stderr, "shoal-mount: inode %llu: dropping the locks of a closed file at "
				"the lock manager failed: %s\n", (unsigned long long)ino, strerror(-err));
}

void plock_flush(struct shoal_fs *fs, uint64_t ino, uint64_t lock_owner)
{
	uint64_t o[1];

	if (owners_take(ino, lock_owner, 0, 0, o, 1))
		drop_owner(fs, ino, o[0]);
}

void plock_release(struct shoal_fs *fs, uint64_t ino, uint64_t fh, int flock_release,
		   uint64_t lock_owner)
{
	uint64_t o[16];
	size_t n;

	if (!shoal_plock_supported(fs))
		return;
	if (flock_release)
		flock_release = owners_take(ino, lock_owner, 0, 0, o, 1) == 1;
	while ((n = owners_take(ino, 0, 1, fh, o, 16)) > 0)
		for (size_t i = 0; i < n; i++)
			if (!flock_release || o[i] != lock_owner)
				drop_owner(fs, ino, o[i]);
	if (flock_release)
		drop_owner(fs, ino, lock_owner);
}

static int reply_plock_err(fuse_req_t req, int err)
{
	return fuse_reply_err(req, err == -ENOTCONN ? ENOLCK : -err);
}

/* --- a blocking request (2) ----------------------------------------------- */

struct pl_wait {
	fuse_req_t pw_req;
	struct shoal_fs *pw_fs;
	uint64_t pw_ino, pw_owner, pw_fh;
	uint32_t pw_token;	/* lockd's seq of the request */
	int pw_registered;	/* the sender is done (pw_mu) */
	int pw_done;		/* lockd answered (pw_mu) */
	int pw_err;
};

static pthread_mutex_t pw_mu = PTHREAD_MUTEX_INITIALIZER;
/* Read-held while a late answer uses the session; plock_session_end
 * write-holds it to set pw_gone. */
static pthread_rwlock_t pw_session = PTHREAD_RWLOCK_INITIALIZER;
static int pw_gone; /* the session is being destroyed (pw_session) */

static void pw_finish(struct pl_wait *pw)
{
	pthread_rwlock_rdlock(&pw_session);
	if (!pw_gone) {
		fuse_req_interrupt_func(pw->pw_req, NULL, NULL); /* waits for a running pw_interrupt */
		if (!pw->pw_err)
			owner_note(pw->pw_ino, pw->pw_owner, pw->pw_fh);
		reply_plock_err(pw->pw_req, pw->pw_err);
	}
	pthread_rwlock_unlock(&pw_session);
	free(pw);
}

void plock_session_end(void)
{
	pthread_rwlock_wrlock(&pw_session);
	pw_gone = 1;
	pthread_rwlock_unlock(&pw_session);
}

/* The lock manager's answer (its thread; lockd.h lkc_plock_wait). */
static void pw_done(void *arg, int err)
{
	struct pl_wait *pw = arg;
	int reg;

	pthread_mutex_lock(&pw_mu);
	pw->pw_err = err;
	pw->pw_done = 1;
	reg = pw->pw_registered;
	pthread_mutex_unlock(&pw_mu);
	if (reg)
		pw_finish(pw);
}

/* FUSE INTERRUPT: the waiting process got a signal. */
static void pw_interrupt(fuse_req_t req, void *data)
{
	struct pl_wait *pw = data;

	(void)req;
	shoal_plock_cancel(pw->pw_fs, pw->pw_ino, pw->pw_token); /* -ENOLCK: done comes anyway */
}

static void plock_wait(fuse_req_t req, struct shoal_fs *fs, const struct lk_plock *pl,
		       uint64_t fh)
{
	struct pl_wait *pw = calloc(1, sizeof(*pw));
	int err, done;

	if (!pw) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	pw->pw_req = req;
	pw->pw_fs = fs;
	pw->pw_ino = pl->pl_ino;
	pw->pw_owner = pl->pl_owner;
	pw->pw_fh = fh;
	err = shoal_plock_wait(fs, pl, pw_done, pw, &pw->pw_token);
	if (err) {
		free(pw);
		reply_plock_err(req, err);
		return;
	}
	fuse_req_interrupt_func(req, pw_interrupt, pw);
	pthread_mutex_lock(&pw_mu);
	pw->pw_registered = 1;
	done = pw->pw_done;
	pthread_mutex_unlock(&pw_mu);
	if (done)
		pw_finish(pw);
}

/* --- the FUSE operations ---------------------------------------------------- */

static int lock_range(const struct flock *lk, struct lk_plock *pl)
{
	if (lk->l_start < 0 || lk->l_len < 0)
		return -EINVAL; /* the kernel normalizes: never happens */
	pl->pl_start = (uint64_t)lk->l_start;
	pl->pl_end = lk->l_len == 0 ? (uint64_t)LK_PL_END_MAX
				    : (uint64_t)lk->l_start + (uint64_t)lk->l_len - 1;
	if (pl->pl_end > (uint64_t)LK_PL_END_MAX)
		return -EOVERFLOW;
	switch (lk->l_type) {
	case F_RDLCK:
		pl->pl_type = LK_PL_RD;
		break;
	case F_WRLCK:
		pl->pl_type = LK_PL_WR;
		break;
	case F_UNLCK:
		pl->pl_type = LK_PL_UN;
		break;
	default:
		return -EINVAL;
	}
	return 0;
}

void plock_getlk(fuse_req_t req, struct shoal_fs *fs, uint64_t ino, struct fuse_file_info *fi,
		 struct flock *lock)
{
	struct lk_plock pl = { .pl_ino = ino, .pl_owner = fi->lock_owner,
			       .pl_pid = (uint32_t)lock->l_pid };
	struct flock out;
	int err = lock_range(lock, &pl);

	if (!err)
		err = shoal_plock(fs, LK_PL_GET, &pl);
	if (err) {
		reply_plock_err(req, err);
		return;
	}
	memset(&out, 0, sizeof(out));
	out.l_whence = SEEK_SET;
	out.l_type = F_UNLCK;
	if (pl.pl_type != LK_PL_UN) {
		out.l_type = pl.pl_type == LK_PL_WR ? F_WRLCK : F_RDLCK;
		out.l_start = (off_t)pl.pl_start;
		out.l_len = pl.pl_end == (uint64_t)LK_PL_END_MAX ? 0 : (off_t)(pl.pl_end - pl.pl_start + 1);
		/* the kernel looks the pid up in this node's pid namespace:
		 * another node's process is not there (docs/LOCKING.md) */
		out.l_pid = pl.pl_flags & LK_PL_MINE ? (pid_t)pl.pl_pid : 0;
	}
	fuse_reply_lock(req, &out);
}

static void set_lock(fuse_req_t req, struct shoal_fs *fs, struct lk_plock *pl, uint64_t fh,
		     int sleep)
{
	int err;

	if (sleep && pl->pl_type != LK_PL_UN) {
		plock_wait(req, fs, pl, fh);
		return;
	}
	err = shoal_plock(fs, LK_PL_SET, pl);
	if (!err && pl->pl_type != LK_PL_UN)
		owner_note(pl->pl_ino, pl->pl_owner, fh);
	reply_plock_err(req, err);
}

void plock_setlk(fuse_req_t req, struct shoal_fs *fs, uint64_t ino, struct fuse_file_info *fi,
		 struct flock *lock, int sleep)
{
	struct lk_plock pl = { .pl_ino = ino, .pl_owner = fi->lock_owner,
			       .pl_pid = (uint32_t)lock->l_pid };
	int err = lock_range(lock, &pl);

	if (err) {
		reply_plock_err(req, err);
		return;
	}
	set_lock(req, fs, &pl, fi->fh, sleep);
}

void plock_flock(fuse_req_t req, struct shoal_fs *fs, uint64_t ino, struct fuse_file_info *fi,
		 int op)
{
	struct lk_plock pl = { .pl_ino = ino, .pl_owner = fi->lock_owner, .pl_start = 0,
			       .pl_end = (uint64_t)LK_PL_END_MAX, .pl_flags = LK_PL_FLOCK,
			       .pl_pid = (uint32_t)fuse_req_ctx(req)->pid };

	switch (op & (LOCK_SH | LOCK_EX | LOCK_UN)) {
	case LOCK_SH:
		pl.pl_type = LK_PL_RD;
		break;
	case LOCK_EX:
		pl.pl_type = LK_PL_WR;
		break;
	case LOCK_UN:
		pl.pl_type = LK_PL_UN;
		break;
	default:
		fuse_reply_err(req, EINVAL);
		return;
	}
	set_lock(req, fs, &pl, fi->fh, !(op & LOCK_NB));
}

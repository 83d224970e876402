/*
 * lock_shoal.c - the cluster lock module: glocks through shoal-lockd
 * (docs/PROTOCOL.md), selected by lock=shoal://HOST:PORT or
 * lock=shoal:unix:PATH.
 *
 * Glock states map to lock manager modes UN=NL, SH=PR, DF=CW, EX=EX.  The
 * client's receiver thread delivers blocking callbacks, which only queue
 * work for the demote worker (glock.c), and recovery requests; its timer
 * thread fences the node when lockd stops answering.
 *
 * Invariants:
 *  (1) lm_lock is only called without fs_lock unless it is a try-lock
 *      (glock.c (3)); lm_unlock never waits for lockd;
 *  (2) after the fence callback no write reaches the device (dev_fence);
 *  (3) the device's lease (dev.c (8)) follows the client's: every answered
 *      heartbeat moves it forward (cb_lease), and leaving lockd or
 *      withdrawing ends it (DEV_LEASE_OVER): no write is submitted after
 *      the lease lockd could give away, whatever thread notices first.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "lock.h"
#include "shoal/lockd.h"

static const int to_mode[] = {[GL_UN] = LK_NL, [GL_SH] = LK_PR, [GL_DF] = LK_CW, [GL_EX] = LK_EX};

static int to_state(int mode)
{
	switch (mode) {
	case LK_EX:
	case LK_PW:
		return GL_EX;
	case LK_CW:
		return GL_DF;
	case LK_PR:
	case LK_CR:
		return GL_SH;
	default:
		return GL_UN;
	}
}

static void cb_bast(void *arg, uint32_t type, uint64_t number, int wanted)
{
	gl_cb(arg, type, number, to_state(wanted));
}

static void cb_recover(void *arg, uint32_t jid, const char *node)
{
	/* fs_recover_journal skips this node's own journal (its earlier
	 * life, back under its name: the mount replays it) */
	fprintf(stderr, "shoal: node %s (journal %u) is dead\n", node, jid);
	gl_recover_cb(arg, jid);
}

static void cb_fenced(void *arg, const char *why)
{
	gl_fenced_cb(arg, why);
}

/* dev.c (8): the device checks this deadline at every write */
static void cb_lease(void *arg, uint64_t until_ns)
{
	struct shoal_fs *fs = arg;

	dev_set_lease(fs->fs_dev, until_ns);
}

static const struct lkc_ops shoal_lkc_ops = {
	.bast = cb_bast,
	.recover = cb_recover,
	.fenced = cb_fenced,
	.lease = cb_lease,
};

static int lks_mount(struct shoal_fs *fs, const char *table, const char *node,
		       uint32_t *journal)
{
	const char *addr = fs->fs_opts.mo_lock;
	struct lkc_config cfg = {0};
	struct lkc *c;
	uint32_t lease;
	char err[200] = "";
	int e;

	if (!strncmp(addr, "shoal://", 8))
		addr += 8;
	else if (!strncmp(addr, "shoal:", 6))
		addr += 6;
	cfg.addr = addr;
	cfg.node = node;
	cfg.table = table;
	cfg.njournals = fs->fs_sb.sb_jcount;
	cfg.uuid = fs->fs_sb.sb_uuid; /* lockd serves one filesystem per table */
	cfg.secret_file = fs->fs_opts.mo_secret;
	cfg.ops = &shoal_lkc_ops;
	cfg.arg = fs;
	cfg.self_recover = 1; /* shoal_mount: replay, then lm_recovery_done */
	e = lkc_connect(&cfg, &c, journal, &lease, err, sizeof(err));
	if (e) {
		snprintf(fs->fs_err, sizeof(fs->fs_err), "%s", err[0] ? err : strerror(-e));
		return e;
	}
	fs->fs_lm_priv = c;
	return 0;
}

static void lks_unmount(struct shoal_fs *fs)
{
	if (fs->fs_lm_priv)
		lkc_close(fs->fs_lm_priv);
	fs->fs_lm_priv = NULL;
	dev_set_lease(fs->fs_dev, DEV_LEASE_OVER); /* (3) */
}

static int shoal_lock(struct shoal_fs *fs, struct glock *gl, int state, int flags)
{
	uint32_t fl = 0;
	int got = lkc_lock(fs->fs_lm_priv, gl->gl_type, gl->gl_number, to_mode[state],
			   (flags & GL_TRY ? LKF_TRY : 0) | (flags & GL_TRY_1CB ? LKF_TRY_1CB : 0),
			   gl->gl_lvb, &fl);
	return got < 0 ? got : to_state(got);
}

_Static_assert(GL_MANY_MAX <= LKC_BATCH_MAX, "gl_hold_many batches must fit lkc_lock_many");

static int shoal_lock_many(struct shoal_fs *fs, struct glock **gls, const int *states, int flags,
			   int n, int *results)
{
	struct lkc_lockreq r[LKC_BATCH_MAX];
	int err;

	if (n < 0 || n > LKC_BATCH_MAX)
		return -EINVAL;
	for (int i = 0; i < n; i++)
		r[i] = (struct lkc_lockreq){
			.lr_type = gls[i]->gl_type,
			.lr_number = gls[i]->gl_number,
			.lr_mode = to_mode[states[i]],
			.lr_flags = (flags & GL_TRY ? LKF_TRY : 0) | (flags & GL_TRY_1CB ? LKF_TRY_1CB : 0),
			.lr_lvb = gls[i]->gl_lvb,
		};
	err = lkc_lock_many(fs->fs_lm_priv, r, (size_t)n);
	if (err)
		return err;
	for (int i = 0; i < n; i++)
		results[i] = r[i].lr_result < 0 ? r[i].lr_result : to_state(r[i].lr_result);
	return 0;
}

static int shoal_unlock(struct shoal_fs *fs, struct glock *gl)
{
	return lkc_unlock(fs->fs_lm_priv, gl->gl_type, gl->gl_number, NULL);
}

static void shoal_recovery_done(struct shoal_fs *fs, uint32_t index)
{
	lkc_recovery_done(fs->fs_lm_priv, index);
}

static void lks_withdraw(struct shoal_fs *fs, const char *why)
{
	lkc_withdraw(fs->fs_lm_priv, why);
	dev_set_lease(fs->fs_dev, DEV_LEASE_OVER); /* (3) */
}

static int lks_plock_ok(struct shoal_fs *fs)
{
	return lkc_plock_supported(fs->fs_lm_priv);
}

static int lks_plock(struct shoal_fs *fs, int op, struct lk_plock *pl)
{
	return lkc_plock(fs->fs_lm_priv, op, pl);
}

static int lks_plock_wait(struct shoal_fs *fs, const struct lk_plock *pl,
			  void (*done)(void *arg, int err), void *arg, uint32_t *token)
{
	return lkc_plock_wait(fs->fs_lm_priv, pl, done, arg, token);
}

static int lks_plock_cancel(struct shoal_fs *fs, uint64_t ino, uint32_t token)
{
	return lkc_plock_cancel(fs->fs_lm_priv, ino, token);
}

static void lks_plock_stats(struct shoal_fs *fs, struct shoal_plock_stats *st)
{
	struct lkc_stats ls;

	lkc_get_stats(fs->fs_lm_priv, &ls);
	st->local = ls.plock_local;
	st->owned = ls.plock_owned;
	st->grants = ls.plock_grants;
	st->gives = ls.plock_gives;
}

const struct lm_ops lm_shoal_ops = {
	.lm_name = "shoal",
	.lm_mount = lks_mount,
	.lm_unmount = lks_unmount,
	.lm_lock = shoal_lock,
	.lm_lock_many = shoal_lock_many,
	.lm_unlock = shoal_unlock,
	.lm_recovery_done = shoal_recovery_done,
	.lm_withdraw = lks_withdraw,
	.lm_plock_ok = lks_plock_ok,
	.lm_plock = lks_plock,
	.lm_plock_wait = lks_plock_wait,
	.lm_plock_cancel = lks_plock_cancel,
	.lm_plock_stats = lks_plock_stats,
	.lm_cluster = 1,
};

/*
 * glops.c - per-type glock policy: what a node writes back before it gives a
 * lock up (go_sync), what it drops from its caches (go_inval), and whether
 * how far it may give it up now (go_demote_to).
 *
 * Invariants:
 *  (1) after go_sync of an inode or resource-group glock, every change this
 *      node made under it is in a committed, checkpointed journal
 *      transaction, so another node reading the home blocks sees it, and
 *      this node's journal holds nothing a replay could write over them;
 *  (2) after go_inval, no cached copy of the object is used again: the
 *      glock's generation changes (glock.c), so every buffer read under the
 *      old one is read again, the in-memory dinode included, and the
 *      kernel asks again for the attributes of the inode and every name of
 *      a directory (mo_inval_now);
 *  (3) an iopen glock stays (SH, or EX while no other node used the
 *      inode since this node made it) while the inode is in use on this
 *      node: that is how other nodes know not to free it.
 */
#include "internal.h"
#include "lock.h"

static int sync_journal(struct shoal_fs *fs, struct glock *gl)
{
	int err = 0;
	(void)gl;
	/* Data writes still queued (dev.c (5)) land before another node may
	 * read their blocks, whatever state this node is in */
	dev_wait_range(fs->fs_dev, 0, UINT64_MAX);
	if (fs_is_ro(fs))
		return 0; /* nothing changed, or withdrawn: no lock goes back (super.c (2)) */
	err = jnl_wb_check(fs); /* the other node would read what was there before */
	if (err)
		return err;
	/* Coarse but correct: the whole log, then write home. */
	if (fs->fs_j.j_tcount || fs->fs_dx.dx_count)
		err = jnl_commit(fs); /* the dirty-block index goes home too */
	if (!err && fs->fs_j.j_ckpt_count)
		err = jnl_checkpoint(fs);
	return err;
}

static void inval_rgrp(struct shoal_fs *fs, struct glock *gl)
{
	/* the generation changes (glock.c): the header is read again */
	(void)fs;
	(void)gl;
}

static void inval_inode(struct shoal_fs *fs, struct glock *gl)
{
	/* the generation changes (glock.c): the dinode is read again.  The
	 * kernel's attributes (and a directory's names) go now that no
	 * operation can use the glock: mo_inval ran before, but may have
	 * given up waiting for a notification the kernel blocked */
	struct shoal_inode *ip;

	if (!fs->fs_opts.mo_inval_now)
		return;
	ip = inode_find(fs, gl->gl_number);
	if (!ip)
		return; /* not in memory: the kernel does not have it */
	fs->fs_opts.mo_inval_now(fs->fs_opts.mo_inval_arg, gl->gl_number,
				 S_ISDIR(ip_di(ip)->di_mode), ip->i_nlookup > 0);
	inode_put(fs, ip);
}

static int iopen_demote_to(struct shoal_fs *fs, struct glock *gl, int target)
{
	struct shoal_inode *ip = inode_find(fs, gl->gl_number);
	int busy = 0;

	if (ip) {
		busy = ip->i_nlookup || ip->i_open;
		/* another node asks for EX: it unlinked the inode and would
		 * free it; this node does when it lets go (or at unmount) */
		if (busy && target == GL_UN)
			ip->i_free_wanted = 1;
		inode_put(fs, ip);
	}
	/*
	 * In use here: down to SH at most (another node may use it too, and
	 * must not free it).  Not in use (a freed inode's, or one made ahead,
	 * ops.c hold_new): all the way down, or a node freeing the inode
	 * later would find this node's SH in the way.
	 */
	if (busy)
		return target == GL_UN ? -1 : target;
	return GL_UN;
}

static const struct gl_ops inode_glops = {
	.go_sync = sync_journal,
	.go_inval = inval_inode,
	.go_name = "inode",
};

static const struct gl_ops rgrp_glops = {
	.go_sync = sync_journal,
	.go_inval = inval_rgrp,
	.go_name = "rgrp",
};

static const struct gl_ops iopen_glops = {
	.go_demote_to = iopen_demote_to,
	.go_name = "iopen",
};

static const struct gl_ops plain_glops = {
	.go_name = "plain",
};

const struct gl_ops *glops_for(uint32_t type)
{
	switch (type) {
	case GL_INODE:
		return &inode_glops;
	case GL_RGRP:
		return &rgrp_glops;
	case GL_IOPEN:
		return &iopen_glops;
	default:
		return &plain_glops;
	}
}

/*
 * glops.c - per-type glock policy: what a node writes back before it gives a
 * lock up (go_sync) and what it drops from its caches (go_inval).
 *
 * Invariants:
 *  (1) after go_sync of an inode or resource-group glock, every change this
 *      node made under it is in a committed, checkpointed journal
 *      transaction, so another node reading the home blocks sees it;
 *  (2) after go_inval, no cached buffer of the object remains.
 *
 * One node (nolock) never demotes; these run when a lock module asks.
 */
#include "internal.h"
#include "lock.h"

static int sync_journal(struct shoal_fs *fs, struct glock *gl)
{
	(void)gl;
	/* Coarse but correct: the whole log, then write home.  Per-object
	 * flushing is for when several nodes share the device. */
	return jnl_checkpoint(fs);
}

static void inval_block(struct shoal_fs *fs, struct glock *gl)
{
	buf_forget(fs, gl->gl_number);
}

static const struct gl_ops inode_glops = {
	.go_sync = sync_journal,
	.go_inval = inval_block,
	.go_name = "inode",
};

static const struct gl_ops rgrp_glops = {
	.go_sync = sync_journal,
	.go_inval = inval_block,
	.go_name = "rgrp",
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
	default:
		return &plain_glops;
	}
}

/*
 * glock.c - the glock state machine and cache (one table per mount).
 *
 *   UN --gl_nq(SH)--> SH --gl_nq(EX)--> EX      (lm_lock: a lock module request)
 *   EX --gl_demote(SH)--> SH                     (go_sync, caches kept)
 *   SH/EX --gl_demote(UN)--> UN                  (go_sync, go_inval, lm_unlock)
 *
 * Invariants (fs_lock):
 *  (1) one struct glock per (type, number);
 *  (2) a granted state is cached after the last holder leaves: the next
 *      gl_nq in the same or a weaker state sends no lock module request;
 *  (3) demotion runs go_sync, then go_inval (unless keeping SH), then
 *      releases, in that order, and only with no local holders.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "lock.h"

struct gl_table {
	struct glock **gt_hash;
	uint32_t gt_mask;
	const struct lm_ops *gt_lm;
	uint64_t gt_requests;
};

const struct lm_ops *lm_find(const char *name)
{
	if (!strcmp(name, "nolock"))
		return &lm_nolock_ops;
	return NULL;
}

int gl_init(struct shoal_fs *fs, const struct lm_ops *lm)
{
	struct gl_table *gt = calloc(1, sizeof(*gt));
	if (!gt)
		return -ENOMEM;
	gt->gt_mask = 4095;
	gt->gt_hash = calloc(gt->gt_mask + 1, sizeof(*gt->gt_hash));
	if (!gt->gt_hash) {
		free(gt);
		return -ENOMEM;
	}
	gt->gt_lm = lm;
	fs->fs_gl = gt;
	return 0;
}

void gl_destroy(struct shoal_fs *fs)
{
	struct gl_table *gt = fs->fs_gl;
	if (!gt)
		return;
	for (uint32_t i = 0; i <= gt->gt_mask; i++) {
		struct glock *gl = gt->gt_hash[i], *n;
		for (; gl; gl = n) {
			n = gl->gl_hnext;
			if (gl->gl_state != GL_UN)
				gt->gt_lm->lm_unlock(fs, gl);
			free(gl);
		}
	}
	free(gt->gt_hash);
	free(gt);
	fs->fs_gl = NULL;
}

static uint32_t gl_slot(struct gl_table *gt, uint32_t type, uint64_t number)
{
	uint64_t h = (number ^ ((uint64_t)type << 56)) * 0x9e3779b97f4a7c15ull;
	return (uint32_t)(h >> 32) & gt->gt_mask;
}

int gl_nq(struct shoal_fs *fs, uint32_t type, uint64_t number, int state, int flags,
	  struct glock **out)
{
	struct gl_table *gt = fs->fs_gl;
	uint32_t s = gl_slot(gt, type, number);
	struct glock *gl = gt->gt_hash[s];

	while (gl && (gl->gl_type != type || gl->gl_number != number))
		gl = gl->gl_hnext;
	if (!gl) {
		gl = calloc(1, sizeof(*gl));
		if (!gl)
			return -ENOMEM;
		gl->gl_type = type;
		gl->gl_number = number;
		gl->gl_ops = glops_for(type);
		gl->gl_hnext = gt->gt_hash[s];
		gt->gt_hash[s] = gl;
	}
	gl->gl_qcnt++;
	if (gl->gl_state < state) {
		int got = gt->gt_lm->lm_lock(fs, gl, state, flags);
		gl->gl_dcnt++;
		gt->gt_requests++;
		if (got < 0)
			return got;
		gl->gl_state = (uint8_t)got;
	}
	gl->gl_holders++;
	*out = gl;
	return 0;
}

void gl_dq(struct shoal_fs *fs, struct glock *gl)
{
	(void)fs;
	if (gl && gl->gl_holders)
		gl->gl_holders--;
}

int gl_demote(struct shoal_fs *fs, struct glock *gl, int to_state)
{
	int err = 0;

	gl->gl_callbacks++;
	if (gl->gl_holders)
		return -EBUSY;
	if (gl->gl_state <= to_state)
		return 0;
	if (gl->gl_ops && gl->gl_ops->go_sync)
		err = gl->gl_ops->go_sync(fs, gl);
	if (err)
		return err;
	if (to_state == GL_UN && gl->gl_ops && gl->gl_ops->go_inval)
		gl->gl_ops->go_inval(fs, gl);
	if (to_state == GL_UN)
		err = fs->fs_gl->gt_lm->lm_unlock(fs, gl);
	gl->gl_state = (uint8_t)to_state;
	gl->gl_demotions++;
	return err;
}

uint64_t gl_requests(struct shoal_fs *fs)
{
	return fs->fs_gl ? fs->fs_gl->gt_requests : 0;
}

/*
 * lock.h - glocks (per-node cluster lock cache) and the lock-module
 * interface beneath them.  DESIGN.md "Glocks" and docs/LOCKING.md.
 *
 * A glock names one object, (type, number), with GFS2's type numbering.  A
 * node's glock caches the mode the lock module granted (gl_state) after its
 * last local holder leaves, until the lock module asks for it back.  The
 * per-type policy (what to write back before giving a lock up, what to drop
 * from caches) lives in glops.c, joined by struct gl_ops.
 */
#ifndef SHOAL_LOCK_H
#define SHOAL_LOCK_H

#include <stdint.h>

struct shoal_fs;
struct glock;

enum gl_type {
	GL_NONDISK = 1,
	GL_INODE = 2,
	GL_RGRP = 3,
	GL_META = 4,
	GL_IOPEN = 5,
	GL_FLOCK = 6,
	GL_QUOTA = 8,
	GL_JOURNAL = 9,
	GL_TYPES = 10,
};

/* glock states; lock-manager modes: UN=NL, SH=PR, DF=CW, EX=EX */
enum gl_state { GL_UN = 0, GL_SH = 1, GL_DF = 2, GL_EX = 3 };

#define GL_TRY 0x1 /* fail with -EAGAIN rather than wait */

struct gl_ops {
	/* write back what this node dirtied under the lock (before demotion) */
	int (*go_sync)(struct shoal_fs *fs, struct glock *gl);
	/* drop this node's cached copies (before release, or EX->SH: no) */
	void (*go_inval)(struct shoal_fs *fs, struct glock *gl);
	const char *go_name;
};

struct glock {
	uint32_t gl_type;
	uint64_t gl_number;
	uint8_t gl_state;     /* granted by the lock module */
	uint8_t gl_lvb[32];   /* lock value block */
	uint32_t gl_holders;  /* local holders now */
	uint64_t gl_dcnt;     /* lock module requests */
	uint64_t gl_qcnt;     /* local holder requests */
	uint64_t gl_callbacks;
	uint64_t gl_demotions;
	const struct gl_ops *gl_ops;
	struct glock *gl_hnext;
};

/* A lock module: nolock (in-process, one node) now, shoal-lockd later. */
struct lm_ops {
	const char *lm_name;
	/* join the cluster for table "cluster:fsname"; returns the journal id */
	int (*lm_mount)(struct shoal_fs *fs, const char *table, const char *node,
			uint32_t *journal);
	void (*lm_unmount)(struct shoal_fs *fs);
	/* ask for state; returns the state granted (>= state) or -errno */
	int (*lm_lock)(struct shoal_fs *fs, struct glock *gl, int state, int flags);
	int (*lm_unlock)(struct shoal_fs *fs, struct glock *gl);
};

extern const struct lm_ops lm_nolock_ops;
const struct lm_ops *lm_find(const char *name);

struct gl_table;
int gl_init(struct shoal_fs *fs, const struct lm_ops *lm);
void gl_destroy(struct shoal_fs *fs);
/* Take a local hold on (type, number) in at least state; gl_dq gives it back. */
int gl_nq(struct shoal_fs *fs, uint32_t type, uint64_t number, int state, int flags,
	  struct glock **out);
void gl_dq(struct shoal_fs *fs, struct glock *gl);
/* The lock module asks for a lock back: sync, invalidate, release. */
int gl_demote(struct shoal_fs *fs, struct glock *gl, int to_state);
uint64_t gl_requests(struct shoal_fs *fs);

#endif

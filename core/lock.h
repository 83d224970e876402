/*
 * lock.h - glocks (per-node cluster lock cache) and the lock-module
 * interface beneath them.  DESIGN.md "Glocks" and docs/LOCKING.md.
 *
 * A glock names one object, (type, number), with GFS2's type numbering.  A
 * node's glock caches the mode the lock module granted (gl_state) after its
 * last local holder leaves, until the lock module asks for it back (a
 * blocking callback) and the demote worker gives it back: sync, invalidate,
 * release.  The per-type policy (what to write back, what to drop) lives in
 * glops.c, joined by struct gl_ops.
 *
 * Operations never wait for a remote node while they hold fs_lock: under
 * fs_lock they take holds that are granted from the cache (or by a try-lock);
 * a hold that would have to wait returns -ERESTART, the operation unwinds
 * before changing anything, op_wait() acquires what it needs in (type,
 * number) order without fs_lock, and the operation runs again.
 */
#ifndef SHOAL_LOCK_H
#define SHOAL_LOCK_H

#include <stdint.h>

struct shoal_fs;
struct glock;
struct lk_plock;
struct shoal_plock_stats;

#ifndef ERESTART
#define ERESTART 85
#endif

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

/* numbers of GL_NONDISK glocks */
#define GL_NONDISK_MOUNT 1 /* held EX while a node mounts and checks journals */

/* glock states; lock-manager modes: UN=NL, SH=PR, DF=CW, EX=EX */
enum gl_state { GL_UN = 0, GL_SH = 1, GL_DF = 2, GL_EX = 3 };

#define GL_TRY 0x1     /* fail with -EAGAIN rather than wait */
#define GL_TRY_1CB 0x2 /* with GL_TRY: the holders still get one callback */

struct gl_ops {
	/* write back what this node dirtied under the lock (before demotion) */
	int (*go_sync)(struct shoal_fs *fs, struct glock *gl);
	/* drop this node's cached copies (demotion to UN) */
	void (*go_inval)(struct shoal_fs *fs, struct glock *gl);
	/* the state a demotion asked for target goes to now: target, a lower
	 * one, or -1 not now (iopen: not to UN while the inode is in use, and
	 * to UN when asked for SH while it is not); NULL: target */
	int (*go_demote_to)(struct shoal_fs *fs, struct glock *gl, int target);
	const char *go_name;
};

/* gl_flags (the same bits as SHOAL_GLEV_F_* in trace events) */
#define GLF_INFLIGHT 0x1  /* a lock module request is outstanding */
#define GLF_DEMOTING 0x2  /* the worker is giving it back: no new holders */
#define GLF_QUEUED 0x4    /* on the demote list */
#define GLF_STICKY 0x8    /* never given back (this node's journal lock) */

/* gh_flags */
#define GHF_WAITING 0x1 /* not granted yet (on gl_waiters) */
#define GHF_TRY 0x2     /* a try: fails rather than waits */
#define GHF_OP 0x4      /* an operation's hold, dropped when it ends */
#define GHF_ANON 0x8    /* gl_acquire's (mount, recovery, unmount): gl_put drops it */

/*
 * One local holder of a glock, or one thread waiting for it: what the
 * glock dump shows under the glock.  Linked on gl_holders_q or
 * gl_waiters_q, protected by gt_mutex.
 */
struct gl_holder {
	struct glock *gh_gl;
	uint8_t gh_state;      /* the state asked for */
	uint8_t gh_flags;      /* GHF_* */
	int gh_tid;            /* the thread holding or waiting */
	int gh_pid;            /* the process the request serves (FUSE caller), 0 none */
	uint64_t gh_since_ns;  /* when it was granted, or began to wait */
	struct gl_holder *gh_prev, *gh_next;
};

struct gl_hq {
	struct gl_holder *hq_first, *hq_last;
};

struct glock {
	uint32_t gl_type;
	uint64_t gl_number;
	uint8_t gl_state;     /* granted by the lock module */
	int8_t gl_target;     /* demote requested to this state, -1: none */
	uint8_t gl_want;      /* state of the request in flight (GLF_INFLIGHT) */
	uint32_t gl_flags;
	uint32_t gl_holders;  /* local holders now */
	uint32_t gl_waiters;  /* threads waiting in gl_acquire now */
	struct gl_hq gl_holders_q; /* the holders, oldest first */
	struct gl_hq gl_waiters_q; /* the waiters, oldest first */
	uint64_t gl_gen;      /* cache generation: changes at every invalidation */
	uint64_t gl_use;      /* holds granted (demote notices new users) */
	uint64_t gl_granted_ns;  /* when the current state was granted */
	uint64_t gl_demote_ns;   /* when the demote was requested */
	uint32_t gl_hold_ms;     /* minimum hold time now (adaptive) */
	uint64_t gl_released_ns; /* when it was last given back */
	uint8_t gl_lvb[32];   /* lock value block */
	/* inode glock: its in-memory inode's i_nlookup, readable without
	 * fs_lock (atomic; inode_lookups): the kernel has, or is about to
	 * have, the inode while it is not 0 */
	uint64_t gl_krefs;
	int gl_kdir;          /* ... and whether that inode is a directory */
	/* statistics (shoal glstats) */
	uint64_t gl_dcnt;     /* lock module requests (acquisitions, conversions) */
	uint64_t gl_req_sh;   /* ... of which for SH */
	uint64_t gl_req_ex;   /* ... of which for EX */
	uint64_t gl_tryfail;  /* ... of which tries that were refused */
	uint64_t gl_qcnt;     /* local holder requests */
	uint64_t gl_callbacks;
	uint64_t gl_demotions;
	uint64_t gl_unlocks;  /* given back to the lock module (to UN) */
	uint64_t gl_rtt_ns;   /* total lock module wait of the requests */
	uint64_t gl_rtt_max_ns;
	uint64_t gl_srtt_ns;  /* smoothed (1/8 per request) */
	const struct gl_ops *gl_ops;
	struct glock *gl_hnext;
	struct glock *gl_dnext; /* demote list */
};

/* A lock module: nolock (in-process, one node) or shoal (shoal-lockd). */
struct lm_ops {
	const char *lm_name;
	/* join the cluster for table "cluster:fsname"; returns the journal id */
	int (*lm_mount)(struct shoal_fs *fs, const char *table, const char *node,
			uint32_t *journal);
	void (*lm_unmount)(struct shoal_fs *fs);
	/* ask for state (or convert down to it); returns the state granted or
	 * -errno (-EAGAIN: a try failed).  Called without fs_lock. */
	int (*lm_lock)(struct shoal_fs *fs, struct glock *gl, int state, int flags);
	/* optional: lm_lock for n glocks at once (n <= GL_MANY_MAX, one round trip),
	 * results[i] as lm_lock's; 0 or -errno for the whole call */
	int (*lm_lock_many)(struct shoal_fs *fs, struct glock **gls, const int *states, int flags,
			    int n, int *results);
	/* give the lock up; never waits for the lock manager */
	int (*lm_unlock)(struct shoal_fs *fs, struct glock *gl);
	/* journal index has been replayed (recovery of a dead node) */
	void (*lm_recovery_done)(struct shoal_fs *fs, uint32_t index);
	/* optional: leave the cluster as a dead node does, holding every lock
	 * until another node has replayed this node's journal (super.c
	 * fs_error); never waits for the lock manager */
	void (*lm_withdraw)(struct shoal_fs *fs, const char *why);
	/* optional (a cluster lock module): posix and flock locks of files
	 * (shoal.h shoal_plock*, lockd.h lkc_plock*); NULL: the kernel's own */
	int (*lm_plock_ok)(struct shoal_fs *fs); /* the lock manager serves them */
	int (*lm_plock)(struct shoal_fs *fs, int op, struct lk_plock *pl);
	int (*lm_plock_wait)(struct shoal_fs *fs, const struct lk_plock *pl,
			     void (*done)(void *arg, int err), void *arg, uint32_t *token);
	int (*lm_plock_cancel)(struct shoal_fs *fs, uint64_t ino, uint32_t token);
	void (*lm_plock_stats)(struct shoal_fs *fs, struct shoal_plock_stats *st);
	int lm_cluster; /* several nodes: demotions and recovery happen */
};

extern const struct lm_ops lm_nolock_ops;
extern const struct lm_ops lm_shoal_ops;
const struct lm_ops *lm_find(const char *name);

struct gl_table;
int gl_init(struct shoal_fs *fs, const struct lm_ops *lm);
/* Start / stop the demote worker (a thread that serves no request). */
int gl_start(struct shoal_fs *fs);
void gl_stop(struct shoal_fs *fs);
void gl_destroy(struct shoal_fs *fs);

/*
 * Under fs_lock, inside an operation: hold (type, number) in at least state
 * until the operation ends.  0, -ERESTART (unwind; op_wait), or -errno.
 */
int gl_hold(struct shoal_fs *fs, uint32_t type, uint64_t number, int state);
/*
 * gl_hold for the first nhold of n glocks (n <= GL_MANY_MAX), in order, asking the
 * lock module for every one this node holds nothing of in one round trip.
 * Each of those is tried for gw_state; the held ones are held in at least
 * gw_least (<= gw_state), with a try of its own if the first one failed.
 * The others are only asked for: their grants stay cached for later holds.
 */
#define GL_MANY_MAX 64 /* = LKC_BATCH_MAX: one lock-module round trip */
struct gl_want {
	uint32_t gw_type;
	uint64_t gw_number;
	int gw_state, gw_least;
};
int gl_hold_many(struct shoal_fs *fs, const struct gl_want *w, int n, int nhold);
/* The glock of (type, number), created if needed (fs_lock). */
struct glock *gl_get(struct shoal_fs *fs, uint32_t type, uint64_t number);
/* Is it held by this operation (or cached) in at least state? (fs_lock) */
int gl_have(struct shoal_fs *fs, uint32_t type, uint64_t number, int state);
/*
 * Like gl_hold, but never restarts: a state the node does not cache is
 * asked of the lock module with a try (an up-conversion included), which
 * sends no callback and fails at once when another node is in the way.
 * 0 (held until the operation ends), -EAGAIN, or -errno.  (fs_lock)
 */
int gl_try_hold(struct shoal_fs *fs, uint32_t type, uint64_t number, int state);

/*
 * Operation context (one per thread).  op_begin before the first LOCK,
 * op_wait after an -ERESTART (without fs_lock: 0 to run again), op_end
 * after the last UNLOCK (drops the holds).
 */
void op_begin(struct shoal_fs *fs);
int op_wait(struct shoal_fs *fs);
void op_end(struct shoal_fs *fs);
/* The running operation changed a buffer (1) / is at a consistent point (0):
 * a restart after a change would keep half an operation, so gl_hold
 * reports it loudly (a bug: every hold must come before the changes). */
void op_changed(int changed);

/* Blocking acquire outside any operation (mount, recovery, unmount); the
 * hold is dropped with gl_put. */
int gl_acquire(struct shoal_fs *fs, uint32_t type, uint64_t number, int state, int flags,
	       struct glock **out);
void gl_put(struct shoal_fs *fs, struct glock *gl);
/* Give a glock back now (unmount, or iopen after the inode left memory). */
void gl_release(struct shoal_fs *fs, struct glock *gl);

/* Lock module callbacks (any thread, must not block): */
void gl_cb(struct shoal_fs *fs, uint32_t type, uint64_t number, int wanted);
void gl_recover_cb(struct shoal_fs *fs, uint32_t jid);
void gl_fenced_cb(struct shoal_fs *fs, const char *why);

uint64_t gl_requests(struct shoal_fs *fs);
/* per-type and total counters for shoal stat */
struct gl_stats {
	uint64_t gs_glocks, gs_requests, gs_local, gs_callbacks, gs_demotions, gs_rtt_ns;
	uint64_t gs_restarts, gs_recoveries;
};
void gl_get_stats(struct shoal_fs *fs, struct gl_stats *st);

/* time in ns (CLOCK_MONOTONIC) */
uint64_t gl_now_ns(void);

/* gltrace.c: the glock trace (shoal.h shoal_trace_*) */
struct shoal_glevent;
int gltr_init(struct shoal_fs *fs);
void gltr_destroy(struct shoal_fs *fs);
/* Is anyone subscribed?  (a racy read: an event may be missed by a
 * subscriber that is just arriving, never by one already there) */
int gltr_active(struct shoal_fs *fs);
/* Give ev (its time is set here) to every subscriber whose filter matches;
 * never blocks.  Called under gt_mutex (lock order: gt_mutex, tr_lock). */
void gltr_emit(struct shoal_fs *fs, struct shoal_glevent *ev);

#endif

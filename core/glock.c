/*
 * glock.c - the glock state machine and cache (one table per mount), the
 * per-thread operation context, and the demote worker.
 *
 *   UN --hold/acquire--> SH or EX          (lm_lock: a lock module request)
 *   EX --callback(SH)--> sync --> SH        (caches kept)
 *   SH/EX --callback(EX)--> kernel notify, sync, invalidate --> UN
 *
 * Invariants (gt_mutex guards every glock field; fs_lock is taken before it):
 *  (1) one struct glock per (type, number), never freed before unmount;
 *  (2) a granted state is cached after the last holder leaves: the next
 *      hold in the same or a weaker state sends no lock module request;
 *  (3) at most one lock module request per glock is outstanding
 *      (GLF_INFLIGHT), and no thread waits for one while holding fs_lock;
 *  (4) demotion happens only with no local holders, runs go_sync, then
 *      (to UN) go_inval, both under fs_lock, then tells the lock module;
 *      while it runs (GLF_DEMOTING) no new holder is admitted;
 *  (5) the kernel's caches of an inode are invalidated (mo_inval) before a
 *      glock leaves the node, from the worker thread, never while a holder
 *      could be waiting for the glock (GLF_DEMOTING is not set yet); if the
 *      object was used meanwhile, the notification is repeated; and once
 *      no holder can use it, its attributes and a directory's names
 *      (mo_inval_now, which never blocks: go_inval, unlock_now);
 *  (6) an operation's holds are taken in (type, number) order whenever it
 *      may wait, so two nodes never wait for each other in a cycle;
 *  (7) every hold has a struct gl_holder on gl_holders_q (gl_holders counts
 *      them) and every thread waiting in gl_acquire one on gl_waiters_q,
 *      so the dump shows who holds and who waits;
 *  (8) every lock module request, completion, callback and demote request
 *      is a trace event (gltrace.c), made under gt_mutex in the order the
 *      glock saw them; an operation that restarts asks again for the state
 *      it asked for, never for a stronger one the glock happened to cache
 *      (R1: a read asks for SH, whatever the node held before);
 *  (9) no output leaves the process under gt_mutex: the dumps are made in
 *      memory and written once it is dropped.
 */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "lock.h"
#include "shoal/glfilter.h"

_Static_assert(GLF_INFLIGHT == SHOAL_GLEV_F_INFLIGHT && GLF_DEMOTING == SHOAL_GLEV_F_DEMOTING &&
		       GLF_QUEUED == SHOAL_GLEV_F_QUEUED && GLF_STICKY == SHOAL_GLEV_F_STICKY,
	       "trace event flags are the glock flags");
#define GLF_SHOWN (GLF_INFLIGHT | GLF_DEMOTING | GLF_QUEUED | GLF_STICKY)

#define OP_MAX 64

struct gl_recovery {
	uint32_t jid;
	unsigned tries;  /* failed replays so far */
	uint64_t due_ns; /* not before (gl_now_ns) */
	struct gl_recovery *next;
};

/* a failed replay is tried again after 1 s, doubling up to 30 s */
#define GL_RECOVERY_RETRY_NS 1000000000ull
#define GL_RECOVERY_RETRY_MAX_NS 30000000000ull

struct gl_table {
	pthread_mutex_t gt_mutex;
	pthread_cond_t gt_cond;   /* state changes: holders, flags, grants */
	pthread_cond_t gt_wcond;  /* the worker's wake-up */
	struct glock **gt_hash;
	uint32_t gt_mask;
	const struct lm_ops *gt_lm;
	uint64_t gt_count;
	uint64_t gt_requests;
	uint64_t gt_restarts;
	uint64_t gt_recoveries;
	struct glock *gt_dlist;   /* glocks with a demote requested */
	struct gl_recovery *gt_rlist;
	pthread_t gt_worker;
	int gt_started;
	int gt_stop;
};

struct gl_need {
	uint32_t type;
	uint64_t number;
	int state;
};

/*
 * What one operation holds and still needs.  Most operations fit the
 * arrays inside; one that asks for more (freeing blocks in many resource
 * groups) grows them on the heap until it ends: an operation whose
 * glocks did not all fit would restart for ever.  held may move only
 * while nothing is held (its entries are on their glocks' queues).
 */
struct op_ctx {
	struct shoal_fs *fs;
	int depth;
	int nheld, nneed;
	int held_cap, need_cap;
	int changed;
	struct gl_holder *held; /* held0 or the heap; on their glocks' gl_holders_q */
	struct gl_need *need;   /* need0 or the heap */
	struct gl_holder held0[OP_MAX];
	struct gl_need need0[OP_MAX];
};

static __thread struct op_ctx op_cur;

uint64_t gl_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

const struct lm_ops *lm_find(const char *name)
{
	if (!strcmp(name, "nolock"))
		return &lm_nolock_ops;
	if (!strncmp(name, "shoal:", 6) || !strncmp(name, "shoal://", 8))
		return &lm_shoal_ops;
	return NULL;
}

int gl_init(struct shoal_fs *fs, const struct lm_ops *lm)
{
	struct gl_table *gt = calloc(1, sizeof(*gt));
	if (!gt)
		return -ENOMEM;
	gt->gt_mask = 65535;
	gt->gt_hash = calloc(gt->gt_mask + 1, sizeof(*gt->gt_hash));
	if (!gt->gt_hash) {
		free(gt);
		return -ENOMEM;
	}
	pthread_mutex_init(&gt->gt_mutex, NULL);
	pthread_cond_init(&gt->gt_cond, NULL);
	pthread_cond_init(&gt->gt_wcond, NULL);
	gt->gt_lm = lm;
	fs->fs_gl = gt;
	if (gltr_init(fs)) {
		gl_destroy(fs);
		return -ENOMEM;
	}
	return 0;
}

void gl_destroy(struct shoal_fs *fs)
{
	struct gl_table *gt = fs->fs_gl;
	if (!gt)
		return;
	gl_stop(fs);
	for (uint32_t i = 0; i <= gt->gt_mask; i++) {
		struct glock *gl = gt->gt_hash[i], *n;
		for (; gl; gl = n) {
			n = gl->gl_hnext;
			if (gl->gl_state != GL_UN)
				gt->gt_lm->lm_unlock(fs, gl);
			while (gl->gl_holders_q.hq_first) { /* gl_acquire's, never put */
				struct gl_holder *gh = gl->gl_holders_q.hq_first;
				gl->gl_holders_q.hq_first = gh->gh_next;
				if (gh->gh_flags & GHF_ANON)
					free(gh);
			}
			free(gl);
		}
	}
	while (gt->gt_rlist) {
		struct gl_recovery *r = gt->gt_rlist;
		gt->gt_rlist = r->next;
		free(r);
	}
	free(gt->gt_hash);
	pthread_cond_destroy(&gt->gt_cond);
	pthread_cond_destroy(&gt->gt_wcond);
	pthread_mutex_destroy(&gt->gt_mutex);
	free(gt);
	fs->fs_gl = NULL;
	gltr_destroy(fs);
}

static uint32_t gl_slot(struct gl_table *gt, uint32_t type, uint64_t number)
{
	return fib_slot(number ^ ((uint64_t)type << 56), gt->gt_mask);
}

/* gt_mutex held */
static uint64_t gen_next(struct gl_table *gt)
{
	static uint64_t gens; /* unique across mounts of the process too */
	(void)gt;
	return __atomic_add_fetch(&gens, 1, __ATOMIC_RELAXED);
}

/* gt_mutex held; NULL only without memory */
static struct glock *gl_find(struct gl_table *gt, uint32_t type, uint64_t number, int create)
{
	uint32_t s = gl_slot(gt, type, number);
	struct glock *gl = gt->gt_hash[s];

	while (gl && (gl->gl_type != type || gl->gl_number != number))
		gl = gl->gl_hnext;
	if (gl || !create)
		return gl;
	gl = calloc(1, sizeof(*gl));
	if (!gl)
		return NULL;
	gl->gl_type = type;
	gl->gl_number = number;
	gl->gl_target = -1;
	gl->gl_gen = gen_next(gt);
	gl->gl_ops = glops_for(type);
	gl->gl_hnext = gt->gt_hash[s];
	gt->gt_hash[s] = gl;
	gt->gt_count++;
	return gl;
}

struct glock *gl_get(struct shoal_fs *fs, uint32_t type, uint64_t number)
{
	struct gl_table *gt = fs->fs_gl;
	struct glock *gl;
	pthread_mutex_lock(&gt->gt_mutex);
	gl = gl_find(gt, type, number, 1);
	pthread_mutex_unlock(&gt->gt_mutex);
	return gl;
}

int shoal_kernel_refs(struct shoal_fs *fs, uint64_t ino)
{
	struct gl_table *gt = fs->fs_gl;
	struct glock *gl;
	int held;

	if (!gt)
		return 0;
	pthread_mutex_lock(&gt->gt_mutex);
	gl = gl_find(gt, GL_INODE, ino, 0);
	held = gl && __atomic_load_n(&gl->gl_krefs, __ATOMIC_ACQUIRE) > 0;
	pthread_mutex_unlock(&gt->gt_mutex);
	return held;
}

int gl_have(struct shoal_fs *fs, uint32_t type, uint64_t number, int state)
{
	struct gl_table *gt = fs->fs_gl;
	struct glock *gl;
	int ok;
	pthread_mutex_lock(&gt->gt_mutex);
	gl = gl_find(gt, type, number, 0);
	ok = gl && gl->gl_state >= state && !(gl->gl_flags & GLF_DEMOTING);
	pthread_mutex_unlock(&gt->gt_mutex);
	return ok;
}

static void hq_add(struct gl_hq *q, struct gl_holder *gh)
{
	gh->gh_next = NULL;
	gh->gh_prev = q->hq_last;
	if (q->hq_last)
		q->hq_last->gh_next = gh;
	else
		q->hq_first = gh;
	q->hq_last = gh;
}

static void hq_del(struct gl_hq *q, struct gl_holder *gh)
{
	if (gh->gh_prev)
		gh->gh_prev->gh_next = gh->gh_next;
	else
		q->hq_first = gh->gh_next;
	if (gh->gh_next)
		gh->gh_next->gh_prev = gh->gh_prev;
	else
		q->hq_last = gh->gh_prev;
	gh->gh_prev = gh->gh_next = NULL;
}

/* A holder (or waiter) record for the calling thread, asking for state. */
static void gh_init(struct gl_holder *gh, int state, int flags)
{
	const struct shoal_ctx *c = perm_caller();
	memset(gh, 0, sizeof(*gh));
	gh->gh_state = (uint8_t)state;
	gh->gh_flags = (uint8_t)flags;
	gh->gh_tid = (int)gettid();
	gh->gh_pid = c ? (int)c->c_pid : 0;
	gh->gh_since_ns = gl_now_ns();
}

/* gt_mutex held: a hold is granted to gh */
static void grant_hold(struct glock *gl, struct gl_holder *gh)
{
	gl->gl_holders++;
	gl->gl_use++;
	gh->gh_gl = gl;
	gh->gh_flags &= (uint8_t)~GHF_WAITING;
	gh->gh_since_ns = gl_now_ns();
	hq_add(&gl->gl_holders_q, gh);
}

/* gt_mutex held: gh's hold ends */
static void drop_hold(struct gl_table *gt, struct glock *gl, struct gl_holder *gh)
{
	if (gh)
		hq_del(&gl->gl_holders_q, gh);
	if (gl->gl_holders)
		gl->gl_holders--;
	if (!gl->gl_holders) {
		pthread_cond_broadcast(&gt->gt_cond);
		if (gl->gl_flags & GLF_QUEUED)
			pthread_cond_signal(&gt->gt_wcond);
	}
}

/*
 * gt_mutex held: one trace event about gl (lock.h (8)).  prev/new/target/
 * dstate are glock states or -1; xflags adds SHOAL_GLEV_F_TRY/FAILED.
 */
static void trace(struct shoal_fs *fs, struct glock *gl, int kind, int prev, int new, int target,
		  int dstate, uint32_t xflags)
{
	struct shoal_glevent ev;

	if (!gltr_active(fs))
		return;
	memset(&ev, 0, sizeof(ev));
	ev.ev_glnum = gl->gl_number;
	ev.ev_gltype = gl->gl_type;
	ev.ev_flags = (gl->gl_flags & GLF_SHOWN) | xflags;
	ev.ev_kind = (int8_t)kind;
	ev.ev_prev = (int8_t)prev;
	ev.ev_new = (int8_t)new;
	ev.ev_target = (int8_t)target;
	ev.ev_dstate = (int8_t)dstate;
	gltr_emit(fs, &ev);
}

/* gt_mutex held: queue gl for the worker */
static void demote_queue(struct gl_table *gt, struct glock *gl, int target)
{
	if (gl->gl_flags & GLF_STICKY)
		return;
	if (gl->gl_target < 0 || target < gl->gl_target)
		gl->gl_target = (int8_t)target;
	if (!(gl->gl_flags & GLF_QUEUED)) {
		gl->gl_demote_ns = gl_now_ns();
		gl->gl_flags |= GLF_QUEUED;
		gl->gl_dnext = gt->gt_dlist;
		gt->gt_dlist = gl;
	}
	pthread_cond_signal(&gt->gt_wcond);
}

/* gt_mutex held: a lock module request for state is about to go out */
static void lm_begin(struct shoal_fs *fs, struct glock *gl, int state, int flags)
{
	gl->gl_flags |= GLF_INFLIGHT;
	gl->gl_want = (uint8_t)state;
	trace(fs, gl, SHOAL_GLEV_REQUEST, gl->gl_state, -1, state, gl->gl_target,
	      flags & GL_TRY ? SHOAL_GLEV_F_TRY : 0);
}

/* gt_mutex held: gl's request for state (flags, sent at t0 when gl was in
 * state prev) was answered got, a state or -errno */
static int lm_end(struct shoal_fs *fs, struct glock *gl, int state, int flags, int prev, int got,
		  uint64_t t0)
{
	struct gl_table *gt = fs->fs_gl;
	uint32_t tf = flags & GL_TRY ? SHOAL_GLEV_F_TRY : 0;
	uint64_t rtt = gl_now_ns() - t0;

	gl->gl_flags &= ~GLF_INFLIGHT;
	if (gl->gl_flags & GLF_QUEUED) /* a callback came meanwhile */
		pthread_cond_signal(&gt->gt_wcond);
	gl->gl_dcnt++;
	if (state == GL_EX)
		gl->gl_req_ex++;
	else if (state == GL_SH)
		gl->gl_req_sh++;
	if (got == -EAGAIN)
		gl->gl_tryfail++;
	gl->gl_rtt_ns += rtt;
	if (rtt > gl->gl_rtt_max_ns)
		gl->gl_rtt_max_ns = rtt;
	if (!gl->gl_srtt_ns)
		gl->gl_srtt_ns = rtt;
	else
		gl->gl_srtt_ns = rtt > gl->gl_srtt_ns ? gl->gl_srtt_ns + (rtt - gl->gl_srtt_ns) / 8
						      : gl->gl_srtt_ns - (gl->gl_srtt_ns - rtt) / 8;
	gt->gt_requests++;
	if (got >= 0) {
		if (got > gl->gl_state || gl->gl_state == GL_UN)
			gl->gl_granted_ns = gl_now_ns();
		/* anything read while the node held nothing may be old */
		if (gl->gl_state == GL_UN && got != GL_UN)
			gl->gl_gen = gen_next(gt);
		gl->gl_state = (uint8_t)got;
	} else if (got != -EAGAIN && got != -EDEADLK && got != -ECANCELED) {
		/* the lock manager is gone (a fenced node): an I/O error */
		got = -EIO;
	}
	trace(fs, gl, SHOAL_GLEV_STATE, prev, gl->gl_state, state, gl->gl_target,
	      tf | (got < 0 ? SHOAL_GLEV_F_FAILED : 0));
	pthread_cond_broadcast(&gt->gt_cond);
	return got;
}

/* gt_mutex held: one lock module request, with the mutex dropped meanwhile */
static int lm_request(struct shoal_fs *fs, struct glock *gl, int state, int flags)
{
	struct gl_table *gt = fs->fs_gl;
	int prev = gl->gl_state, got;
	uint64_t t0;

	lm_begin(fs, gl, state, flags);
	pthread_mutex_unlock(&gt->gt_mutex);
	t0 = gl_now_ns();
	got = gt->gt_lm->lm_lock(fs, gl, state, flags);
	pthread_mutex_lock(&gt->gt_mutex);
	return lm_end(fs, gl, state, flags, prev, got, t0);
}

/*
 * gt_mutex held, no holders, nothing to write back: give the lock back to the
 * lock module now.  No
 * socket write under gt_mutex (the lock module's receiver thread takes it
 * for callbacks), so the request is marked in flight meanwhile.
 */
static void unlock_now(struct shoal_fs *fs, struct glock *gl)
{
	struct gl_table *gt = fs->fs_gl;
	int prev = gl->gl_state;

	/* nothing is written back here: an EX of a glock that caches changes
	 * (inode, resource group) goes through demote_one (4) */
	assert(gl->gl_state != GL_EX || !gl->gl_ops->go_sync);

	gl->gl_flags |= GLF_INFLIGHT;
	gl->gl_want = GL_UN;
	trace(fs, gl, SHOAL_GLEV_REQUEST, prev, -1, GL_UN, gl->gl_target, 0);
	pthread_mutex_unlock(&gt->gt_mutex);
	/* an inode's SH lost in a conversion (gl_acquire): the kernel's
	 * attributes and names go, now that no hold can be granted (no fs_lock
	 * here: what the kernel was handed of it, from the glock's mirror) */
	if (gl->gl_type == GL_INODE && fs->fs_opts.mo_inval_now) {
		int held = __atomic_load_n(&gl->gl_krefs, __ATOMIC_ACQUIRE) > 0;
		fs->fs_opts.mo_inval_now(fs->fs_opts.mo_inval_arg, gl->gl_number,
					 held ? __atomic_load_n(&gl->gl_kdir, __ATOMIC_RELAXED) : -1,
					 held);
	}
	gt->gt_lm->lm_unlock(fs, gl);
	pthread_mutex_lock(&gt->gt_mutex);
	gl->gl_flags &= ~GLF_INFLIGHT;
	gl->gl_state = GL_UN;
	gl->gl_unlocks++;
	gl->gl_released_ns = gl_now_ns();
	trace(fs, gl, SHOAL_GLEV_STATE, prev, GL_UN, GL_UN, gl->gl_target, 0);
	if (gl->gl_flags & GLF_QUEUED)
		pthread_cond_signal(&gt->gt_wcond);
	pthread_cond_broadcast(&gt->gt_cond);
}

/*
 * Blocking acquire (or a try, with GL_TRY) of (type, number) in at least
 * state, the hold recorded in gh; while it waits, the thread is on the
 * glock's waiter list.
 */
static int acquire(struct shoal_fs *fs, uint32_t type, uint64_t number, int state, int flags,
		   struct gl_holder *gh, struct glock **out)
{
	struct gl_table *gt = fs->fs_gl;
	struct gl_holder w;
	struct glock *gl;
	int err = 0;

	if (__atomic_load_n(&fs->fs_dev->d_fenced, __ATOMIC_RELAXED))
		return -EIO;
	pthread_mutex_lock(&gt->gt_mutex);
	gl = gl_find(gt, type, number, 1);
	if (!gl) {
		pthread_mutex_unlock(&gt->gt_mutex);
		return -ENOMEM;
	}
	gl->gl_qcnt++;
	gh_init(&w, state, GHF_WAITING | (flags & GL_TRY ? GHF_TRY : 0));
	w.gh_gl = gl;
	hq_add(&gl->gl_waiters_q, &w);
	gl->gl_waiters++;
	for (;;) {
		if (!(gl->gl_flags & (GLF_INFLIGHT | GLF_DEMOTING)) && gl->gl_state >= state) {
			grant_hold(gl, gh);
			break;
		}
		if (gl->gl_flags & (GLF_INFLIGHT | GLF_DEMOTING)) {
			if (flags & GL_TRY) {
				err = -EAGAIN;
				break;
			}
			pthread_cond_wait(&gt->gt_cond, &gt->gt_mutex);
			continue;
		}
		if (gl->gl_state != GL_UN && gt->gt_lm->lm_cluster) {
			/*
			 * Up-conversion at the lock manager.  If another node
			 * converts too, lockd answers -EDEADLK to one of us; the
			 * loser gives its SH back at once (the kernel's caches
			 * are told without waiting: its VFS may hold the
			 * directory for this very request) and asks afresh.
			 */
			if (flags & GL_TRY) {
				err = -EAGAIN;
				break;
			}
			int got = lm_request(fs, gl, state, 0);
			if (got == -EDEADLK) {
				while (gl->gl_holders || (gl->gl_flags & (GLF_INFLIGHT | GLF_DEMOTING)))
					pthread_cond_wait(&gt->gt_cond, &gt->gt_mutex);
				/*
				 * Only the SH we lost the conversion with is given
				 * back.  While we waited, the glock may have gone
				 * to UN and come back EX for another thread of this
				 * node, whose changes are not written back yet:
				 * such a grant is simply used (or released by the
				 * demote worker, which syncs first), never dropped
				 * here (that lost directory entries between nodes).
				 */
				if (gl->gl_state != GL_SH)
					continue;
				gl->gl_gen = gen_next(gt);
				unlock_now(fs, gl);
				gl->gl_demotions++;
				if (gl->gl_type == GL_INODE && fs->fs_opts.mo_inval) {
					pthread_mutex_unlock(&gt->gt_mutex);
					fs->fs_opts.mo_inval(fs->fs_opts.mo_inval_arg, gl->gl_number);
					pthread_mutex_lock(&gt->gt_mutex);
				}
				continue;
			}
			if (got < 0) {
				err = got;
				break;
			}
			continue;
		}
		int got = lm_request(fs, gl, state, flags);
		if (got < 0) {
			err = got;
			break;
		}
	}
	hq_del(&gl->gl_waiters_q, &w);
	gl->gl_waiters--;
	pthread_mutex_unlock(&gt->gt_mutex);
	if (!err)
		*out = gl;
	return err;
}

int gl_acquire(struct shoal_fs *fs, uint32_t type, uint64_t number, int state, int flags,
	       struct glock **out)
{
	struct gl_holder *gh = malloc(sizeof(*gh));
	int err;

	if (!gh)
		return -ENOMEM;
	gh_init(gh, state, GHF_ANON | (flags & GL_TRY ? GHF_TRY : 0));
	err = acquire(fs, type, number, state, flags, gh, out);
	if (err)
		free(gh);
	return err;
}

void gl_put(struct shoal_fs *fs, struct glock *gl)
{
	struct gl_table *gt = fs->fs_gl;
	struct gl_holder *gh, *any = NULL;
	int tid = (int)gettid();

	if (!gl)
		return;
	pthread_mutex_lock(&gt->gt_mutex);
	/* gl_acquire's hold of this thread, or else any of them (the journal
	 * lock is taken at mount and given back by the unmounting thread) */
	for (gh = gl->gl_holders_q.hq_first; gh; gh = gh->gh_next)
		if (gh->gh_flags & GHF_ANON) {
			if (gh->gh_tid == tid)
				break;
			if (!any)
				any = gh;
		}
	if (!gh)
		gh = any;
	drop_hold(gt, gl, gh);
	pthread_mutex_unlock(&gt->gt_mutex);
	free(gh);
}

void gl_release(struct shoal_fs *fs, struct glock *gl)
{
	struct gl_table *gt = fs->fs_gl;
	pthread_mutex_lock(&gt->gt_mutex);
	if (!gl->gl_holders && !(gl->gl_flags & (GLF_INFLIGHT | GLF_DEMOTING)) &&
	    gl->gl_state != GL_UN)
		unlock_now(fs, gl);
	pthread_mutex_unlock(&gt->gt_mutex);
}

static int op_holds(struct op_ctx *op, uint32_t type, uint64_t number, int state)
{
	for (int i = 0; i < op->nheld; i++) {
		struct glock *gl = op->held[i].gh_gl;
		if (gl->gl_type == type && gl->gl_number == number && gl->gl_state >= state) {
			if (state > op->held[i].gh_state)
				op->held[i].gh_state = state; /* asked for that much now */
			return 1;
		}
	}
	return 0;
}

void op_changed(int changed)
{
	op_cur.changed = changed;
}

static int op_need(struct op_ctx *op, uint32_t type, uint64_t number, int state)
{
	if (op->changed)
		fprintf(stderr, "shoal: BUG: operation restarts for glock %u/%llx after a change\n",
			type, (unsigned long long)number);
	for (int i = 0; i < op->nneed; i++)
		if (op->need[i].type == type && op->need[i].number == number) {
			if (state > op->need[i].state)
				op->need[i].state = state;
			return -ERESTART;
		}
	if (op->nneed == op->need_cap) {
		int cap = op->need_cap * 2;
		struct gl_need *n = malloc((size_t)cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		memcpy(n, op->need, (size_t)op->nneed * sizeof(*n));
		if (op->need != op->need0)
			free(op->need);
		op->need = n;
		op->need_cap = cap;
	}
	op->need[op->nneed++] = (struct gl_need){type, number, state};
	return -ERESTART;
}

/*
 * The start of every hold: 1 if the operation (inop) holds the glock in
 * state already; 0 with gt_mutex held and *glp the glock; else -errno.
 */
static int hold_find(struct shoal_fs *fs, struct op_ctx *op, int inop, uint32_t type,
		     uint64_t number, int state, struct glock **glp)
{
	struct gl_table *gt = fs->fs_gl;

	if (__atomic_load_n(&fs->fs_dev->d_fenced, __ATOMIC_RELAXED))
		return -EIO; /* fenced: no lock this node holds is valid any more */
	if (inop && op_holds(op, type, number, state))
		return 1;
	pthread_mutex_lock(&gt->gt_mutex);
	*glp = gl_find(gt, type, number, 1);
	if (!*glp) {
		pthread_mutex_unlock(&gt->gt_mutex);
		return -ENOMEM;
	}
	(*glp)->gl_qcnt++;
	return 0;
}

/* gt_mutex held, op->nheld < op->held_cap: the operation holds gl in state */
static void hold_add(struct op_ctx *op, struct glock *gl, int state, uint32_t ghf)
{
	struct gl_holder *gh = &op->held[op->nheld++];
	gh_init(gh, state, ghf);
	grant_hold(gl, gh);
}

/* gl_hold; may_try 0: no try-lock, a glock not held as wanted is needed */
static int hold_one(struct shoal_fs *fs, uint32_t type, uint64_t number, int state, int may_try)
{
	struct gl_table *gt = fs->fs_gl;
	struct op_ctx *op = &op_cur;
	int inop = op->depth > 0 && op->fs == fs;
	struct glock *gl;
	int found = hold_find(fs, op, inop, type, number, state, &gl);

	if (found)
		return found < 0 ? found : 0;
	if (may_try && !(gl->gl_flags & (GLF_INFLIGHT | GLF_DEMOTING)) && gl->gl_state < state &&
	    (gl->gl_state == GL_UN || !gt->gt_lm->lm_cluster)) {
		/* a try-lock never waits for another node: fine under fs_lock */
		int got = lm_request(fs, gl, state, GL_TRY);
		if (got < 0 && got != -EAGAIN) {
			pthread_mutex_unlock(&gt->gt_mutex);
			return got;
		}
	}
	if (!(gl->gl_flags & (GLF_INFLIGHT | GLF_DEMOTING)) && gl->gl_state >= state) {
		/* kept until the operation ends; with the list full, fs_lock
		 * alone keeps it (the worker needs fs_lock to demote) */
		if (inop && op->nheld < op->held_cap)
			hold_add(op, gl, state, GHF_OP);
		else
			gl->gl_use++;
		pthread_mutex_unlock(&gt->gt_mutex);
		return 0;
	}
	pthread_mutex_unlock(&gt->gt_mutex);
	if (!inop) {
		/* outside an operation (mount, tools): plain blocking acquire */
		int err = gl_acquire(fs, type, number, state, 0, &gl);
		if (!err)
			gl_put(fs, gl);
		return err;
	}
	return op_need(op, type, number, state);
}

int gl_try_hold(struct shoal_fs *fs, uint32_t type, uint64_t number, int state)
{
	struct gl_table *gt = fs->fs_gl;
	struct op_ctx *op = &op_cur;
	struct glock *gl;
	int err = -EAGAIN, found;

	if (op->depth == 0 || op->fs != fs)
		return -EINVAL; /* the hold lasts until the operation ends */
	found = hold_find(fs, op, 1, type, number, state, &gl);
	if (found)
		return found < 0 ? found : 0;
	if (!(gl->gl_flags & (GLF_INFLIGHT | GLF_DEMOTING)) && gl->gl_state < state) {
		/* a try sends no callback and never waits: fine under fs_lock */
		int got = lm_request(fs, gl, state, GL_TRY);
		if (got < 0 && got != -EAGAIN && got != -EDEADLK) {
			pthread_mutex_unlock(&gt->gt_mutex);
			return got;
		}
	}
	if (!(gl->gl_flags & (GLF_INFLIGHT | GLF_DEMOTING)) && gl->gl_state >= state &&
	    op->nheld < op->held_cap) {
		hold_add(op, gl, state, GHF_OP | GHF_TRY);
		err = 0;
	}
	pthread_mutex_unlock(&gt->gt_mutex);
	return err;
}

int gl_hold(struct shoal_fs *fs, uint32_t type, uint64_t number, int state)
{
	return hold_one(fs, type, number, state, 1);
}

int gl_hold_many(struct shoal_fs *fs, const struct gl_want *w, int n, int nhold)
{
	struct gl_table *gt = fs->fs_gl;
	struct glock *req[GL_MANY_MAX];
	int states[GL_MANY_MAX], prevs[GL_MANY_MAX], got[GL_MANY_MAX], tried[GL_MANY_MAX] = {0};
	int nreq = 0, err = 0;

	if (n < 0 || n > GL_MANY_MAX || nhold > n)
		return -EINVAL;
	if (__atomic_load_n(&fs->fs_dev->d_fenced, __ATOMIC_RELAXED))
		return -EIO;
	pthread_mutex_lock(&gt->gt_mutex);
	for (int i = 0; i < n; i++) {
		struct glock *gl = gl_find(gt, w[i].gw_type, w[i].gw_number, 1);
		if (!gl) {
			pthread_mutex_unlock(&gt->gt_mutex);
			return -ENOMEM;
		}
		if (!(gl->gl_flags & (GLF_INFLIGHT | GLF_DEMOTING)) && gl->gl_state == GL_UN) {
			req[nreq] = gl;
			prevs[nreq] = gl->gl_state;
			states[nreq++] = w[i].gw_state;
			tried[i] = 1;
		}
	}
	/* try-locks never wait for another node: fine under fs_lock */
	if (nreq > 1 && gt->gt_lm->lm_lock_many) {
		uint64_t t0 = gl_now_ns();
		int e;

		for (int k = 0; k < nreq; k++)
			lm_begin(fs, req[k], states[k], GL_TRY);
		pthread_mutex_unlock(&gt->gt_mutex);
		e = gt->gt_lm->lm_lock_many(fs, req, states, GL_TRY, nreq, got);
		pthread_mutex_lock(&gt->gt_mutex);
		for (int k = 0; k < nreq; k++)
			lm_end(fs, req[k], states[k], GL_TRY, prevs[k], e ? e : got[k], t0);
	} else {
		for (int k = 0; k < nreq; k++)
			lm_request(fs, req[k], states[k], GL_TRY);
	}
	pthread_mutex_unlock(&gt->gt_mutex);
	/* the holds, in order; every glock still needed is noted for op_wait */
	for (int i = 0; i < nhold; i++) {
		int may_try = !tried[i] || w[i].gw_least < w[i].gw_state;
		int e = hold_one(fs, w[i].gw_type, w[i].gw_number, w[i].gw_least, may_try);
		if (e == -ERESTART) {
			err = err ? err : e;
		} else if (e) {
			err = e;
			break;
		}
	}
	return err;
}

void op_begin(struct shoal_fs *fs)
{
	struct op_ctx *op = &op_cur;
	if (op->depth++ == 0) {
		op->fs = fs;
		op->nheld = op->nneed = 0;
		op->changed = 0;
		op->held = op->held0;
		op->held_cap = OP_MAX;
		op->need = op->need0;
		op->need_cap = OP_MAX;
	}
}

/* Nothing held: back to the arrays inside */
static void op_shrink(struct op_ctx *op)
{
	if (op->held != op->held0)
		free(op->held);
	if (op->need != op->need0)
		free(op->need);
	op->held = op->held0;
	op->held_cap = OP_MAX;
	op->need = op->need0;
	op->need_cap = OP_MAX;
}

static void op_drop(struct shoal_fs *fs, struct op_ctx *op)
{
	struct gl_table *gt = fs->fs_gl;

	if (!op->nheld)
		return;
	pthread_mutex_lock(&gt->gt_mutex);
	for (int i = 0; i < op->nheld; i++)
		drop_hold(gt, op->held[i].gh_gl, &op->held[i]);
	pthread_mutex_unlock(&gt->gt_mutex);
	op->nheld = 0;
}

static int need_cmp(const void *a, const void *b)
{
	const struct gl_need *x = a, *y = b;
	if (x->type != y->type)
		return x->type < y->type ? -1 : 1;
	if (x->number != y->number)
		return x->number < y->number ? -1 : 1;
	return 0;
}

int op_wait(struct shoal_fs *fs)
{
	struct op_ctx *op = &op_cur;
	struct gl_need *all;
	int n = 0, err = 0;

	if (op->depth != 1 || op->fs != fs)
		return -EDEADLK; /* only the outermost operation may wait */
	all = malloc((size_t)(op->nheld + op->nneed) * sizeof(*all) + 1);
	if (!all) {
		op_drop(fs, op);
		op->nneed = 0;
		return -ENOMEM;
	}
	/* what was asked for, not what happened to be granted: an SH hold of
	 * a glock cached EX must not wait for EX now (R1; an iopen glock another
	 * node holds SH for an inode in use there never goes to UN) */
	for (int i = 0; i < op->nheld; i++)
		all[n++] = (struct gl_need){op->held[i].gh_gl->gl_type, op->held[i].gh_gl->gl_number,
					    op->held[i].gh_state};
	for (int i = 0; i < op->nneed; i++)
		all[n++] = op->need[i];
	op_drop(fs, op);
	op->nneed = 0;
	op->changed = 0;
	qsort(all, (size_t)n, sizeof(all[0]), need_cmp);
	if (n > op->held_cap) { /* nothing is held: held may move */
		struct gl_holder *h = malloc((size_t)n * sizeof(*h));

		if (!h) {
			free(all);
			return -ENOMEM;
		}
		if (op->held != op->held0)
			free(op->held);
		op->held = h;
		op->held_cap = n;
	}
	pthread_mutex_lock(&fs->fs_gl->gt_mutex);
	fs->fs_gl->gt_restarts++;
	pthread_mutex_unlock(&fs->fs_gl->gt_mutex);
	for (int i = 0; i < n && !err; i++) {
		struct glock *gl;
		int st = all[i].state;
		while (i + 1 < n && !need_cmp(&all[i], &all[i + 1])) {
			i++;
			if (all[i].state > st)
				st = all[i].state;
		}
		gh_init(&op->held[op->nheld], st, GHF_OP);
		err = acquire(fs, all[i].type, all[i].number, st, 0, &op->held[op->nheld], &gl);
		if (!err)
			op->nheld++;
	}
	free(all);
	if (err)
		op_drop(fs, op);
	return err;
}

void op_end(struct shoal_fs *fs)
{
	struct op_ctx *op = &op_cur;
	if (op->depth > 0 && --op->depth == 0) {
		op_drop(fs, op);
		op->nneed = 0;
		op_shrink(op);
		op->fs = NULL;
	}
}

/* --- callbacks from the lock module ------------------------------------- */

void gl_cb(struct shoal_fs *fs, uint32_t type, uint64_t number, int wanted)
{
	struct gl_table *gt = fs->fs_gl;
	struct glock *gl;
	uint64_t now = gl_now_ns();

	pthread_mutex_lock(&gt->gt_mutex);
	gl = gl_find(gt, type, number, 0);
	if (gl) {
		int target = wanted == GL_SH && gl->gl_state == GL_EX ? GL_SH : GL_UN;
		uint32_t max = fs->fs_opts.mo_hold_ms;
		gl->gl_callbacks++;
		/* adaptive minimum hold: a lock asked back soon after it was
		 * granted is bouncing between nodes; keep it longer next time */
		if (max) {
			if (now - gl->gl_granted_ns < 2000000ull * (gl->gl_hold_ms + 1))
				gl->gl_hold_ms = gl->gl_hold_ms ? gl->gl_hold_ms * 2 : 1;
			else
				gl->gl_hold_ms /= 2;
			if (gl->gl_hold_ms > max)
				gl->gl_hold_ms = max;
		} else {
			gl->gl_hold_ms = 0;
		}
		trace(fs, gl, SHOAL_GLEV_CALLBACK, gl->gl_state, gl->gl_state, wanted, target, 0);
		if (!(gl->gl_flags & GLF_STICKY)) {
			demote_queue(gt, gl, target);
			trace(fs, gl, SHOAL_GLEV_DEMOTE, gl->gl_state, gl->gl_state,
			      gl->gl_flags & GLF_INFLIGHT ? gl->gl_want : -1, gl->gl_target, 0);
		}
		/*
		 * A node that wants an inode wants its iopen glock SH next:
		 * an iopen this node holds EX (it made the inode, no other
		 * node used it yet) goes down to SH now, not on a callback of
		 * its own (LOCKING.md "Unlinked inodes").
		 */
		if (type == GL_INODE) {
			struct glock *io = gl_find(gt, GL_IOPEN, number, 0);
			if (io && io->gl_state == GL_EX)
				demote_queue(gt, io, GL_SH);
		}
	}
	pthread_mutex_unlock(&gt->gt_mutex);
}

void gl_recover_cb(struct shoal_fs *fs, uint32_t jid)
{
	struct gl_table *gt = fs->fs_gl;
	struct gl_recovery *r;

	pthread_mutex_lock(&gt->gt_mutex);
	for (r = gt->gt_rlist; r && r->jid != jid; r = r->next)
		;
	if (r) { /* queued already (a retry): now */
		r->due_ns = 0;
	} else if ((r = calloc(1, sizeof(*r)))) {
		r->jid = jid;
		r->next = gt->gt_rlist;
		gt->gt_rlist = r;
	}
	pthread_cond_signal(&gt->gt_wcond);
	pthread_mutex_unlock(&gt->gt_mutex);
}

/* gt_mutex held: unlink and return the first recovery due at now, else
 * NULL and the earliest due time into *due. */
static struct gl_recovery *recovery_due(struct gl_table *gt, uint64_t now, uint64_t *due)
{
	for (struct gl_recovery **pp = &gt->gt_rlist; *pp; pp = &(*pp)->next) {
		struct gl_recovery *r = *pp;
		if (r->due_ns <= now) {
			*pp = r->next;
			return r;
		}
		if (!*due || r->due_ns < *due)
			*due = r->due_ns;
	}
	return NULL;
}

void gl_fenced_cb(struct shoal_fs *fs, const char *why)
{
	dev_fence(fs->fs_dev);
	fprintf(stderr, "shoal: %s: self-fenced, no further writes to the device\n", why);
	fs_stop(fs, "self-fenced: %s", why);
}

/* --- the demote worker --------------------------------------------------- */

/* gt_mutex held: is gl ready to be demoted now?  *due: when it will be */
static int demote_ready(struct glock *gl, uint64_t now, uint64_t *due)
{
	uint64_t at = gl->gl_granted_ns + (uint64_t)gl->gl_hold_ms * 1000000ull;
	if (gl->gl_flags & GLF_INFLIGHT)
		return 0;
	if (now < at) {
		if (!*due || at < *due)
			*due = at;
		return 0;
	}
	return !gl->gl_holders;
}

static void demote_one(struct shoal_fs *fs, struct glock *gl)
{
	struct gl_table *gt = fs->fs_gl;
	int target, prev, tries = 0, err = 0;

	for (;;) {
		uint64_t use0;
		pthread_mutex_lock(&gt->gt_mutex);
		target = gl->gl_target;
		use0 = gl->gl_use;
		pthread_mutex_unlock(&gt->gt_mutex);
		if (target < 0)
			return;
		if (target == GL_UN && gl->gl_type == GL_INODE && fs->fs_opts.mo_inval)
			fs->fs_opts.mo_inval(fs->fs_opts.mo_inval_arg, gl->gl_number);
		pthread_mutex_lock(&fs->fs_lock);
		pthread_mutex_lock(&gt->gt_mutex);
		if (gl->gl_target < 0 || gl->gl_state <= gl->gl_target) {
			gl->gl_target = -1;
			pthread_mutex_unlock(&gt->gt_mutex);
			pthread_mutex_unlock(&fs->fs_lock);
			return;
		}
		if (gl->gl_holders || (gl->gl_flags & GLF_INFLIGHT)) {
			/* taken again meanwhile: back on the list, never wait here
			 * (the worker must keep serving other glocks) */
			int8_t t = gl->gl_target;
			gl->gl_target = -1;
			demote_queue(gt, gl, t);
			pthread_mutex_unlock(&gt->gt_mutex);
			pthread_mutex_unlock(&fs->fs_lock);
			return;
		}
		if (target == GL_UN && gl->gl_use != use0 && tries++ < 5) {
			pthread_mutex_unlock(&gt->gt_mutex);
			pthread_mutex_unlock(&fs->fs_lock);
			continue; /* used while the kernel was told: tell it again */
		}
		target = gl->gl_target;
		gl->gl_flags |= GLF_DEMOTING;
		if (target == GL_UN)
			gl->gl_gen = gen_next(gt); /* every cached copy is old now */
		pthread_mutex_unlock(&gt->gt_mutex);
		break;
	}
	prev = gl->gl_state; /* stable: GLF_DEMOTING admits nobody */
	if (gl->gl_ops->go_demote_to) {
		int to = gl->gl_ops->go_demote_to(fs, gl, target);
		if (to < 0) {
			pthread_mutex_lock(&gt->gt_mutex);
			gl->gl_flags &= ~GLF_DEMOTING;
			gl->gl_target = -1;
			pthread_cond_broadcast(&gt->gt_cond);
			pthread_mutex_unlock(&gt->gt_mutex);
			pthread_mutex_unlock(&fs->fs_lock);
			return;
		}
		target = to;
	}
	if (gl->gl_state == GL_EX && gl->gl_ops->go_sync)
		err = gl->gl_ops->go_sync(fs, gl);
	if (err) {
		fprintf(stderr, "shoal: writing back %s glock %llu before giving it up: %s\n",
			gl->gl_ops->go_name, (unsigned long long)gl->gl_number, strerror(-err));
		/* what it holds is not home: the lock must not go back
		 * (super.c (2): a withdrawn node's unlock goes nowhere) */
		fs_error(fs, "writing back %s glock %llu failed: %s", gl->gl_ops->go_name,
			 (unsigned long long)gl->gl_number, strerror(-err));
	}
	if (target == GL_UN && gl->gl_ops->go_inval)
		gl->gl_ops->go_inval(fs, gl);
	pthread_mutex_unlock(&fs->fs_lock);
	pthread_mutex_lock(&gt->gt_mutex);
	trace(fs, gl, SHOAL_GLEV_REQUEST, prev, -1, target, gl->gl_target, 0);
	pthread_mutex_unlock(&gt->gt_mutex);
	if (target == GL_UN)
		gt->gt_lm->lm_unlock(fs, gl);
	else
		gt->gt_lm->lm_lock(fs, gl, target, 0);
	pthread_mutex_lock(&gt->gt_mutex);
	gl->gl_state = (uint8_t)target;
	gl->gl_flags &= ~GLF_DEMOTING;
	if (target == GL_UN)
		gl->gl_unlocks++;
	trace(fs, gl, SHOAL_GLEV_STATE, prev, target, target, gl->gl_target, 0);
	if (gl->gl_target >= 0 && gl->gl_target < target) {
		int8_t next = gl->gl_target; /* a callback for less came meanwhile */
		gl->gl_target = -1;
		demote_queue(gt, gl, next);
	} else {
		gl->gl_target = -1;
	}
	gl->gl_demotions++;
	gl->gl_released_ns = gl_now_ns();
	pthread_cond_broadcast(&gt->gt_cond);
	pthread_mutex_unlock(&gt->gt_mutex);
}

static void *worker(void *arg)
{
	struct shoal_fs *fs = arg;
	struct gl_table *gt = fs->fs_gl;

	pthread_mutex_lock(&gt->gt_mutex);
	while (!gt->gt_stop) {
		struct glock **pp, *ready = NULL;
		uint64_t now = gl_now_ns(), due = 0;
		int err;

		struct gl_recovery *r = recovery_due(gt, now, &due);
		if (r) {
			gt->gt_recoveries++;
			pthread_mutex_unlock(&gt->gt_mutex);
			err = fs_recover_journal(fs, r->jid);
			pthread_mutex_lock(&gt->gt_mutex);
			if (err && !gt->gt_stop) {
				/* the dead node's locks stay held until its journal is
				 * replayed: the replay is tried again, by this node (a
				 * failure here may be the shared disk's, which every node
				 * would meet: no withdraw) and by any that lockd asks */
				uint64_t wait = GL_RECOVERY_RETRY_NS << (r->tries < 5 ? r->tries : 5);
				if (wait > GL_RECOVERY_RETRY_MAX_NS)
					wait = GL_RECOVERY_RETRY_MAX_NS;
				r->tries++;
				r->due_ns = gl_now_ns() + wait;
				r->next = gt->gt_rlist;
				gt->gt_rlist = r;
				fprintf(stderr, "shoal: journal %u of a dead node: its locks stay held; "
						"replay %u failed, trying again in %llu s\n",
					r->jid, r->tries, (unsigned long long)(wait / 1000000000ull));
			} else {
				free(r);
			}
			continue;
		}
		for (pp = &gt->gt_dlist; *pp; pp = &(*pp)->gl_dnext)
			if (demote_ready(*pp, now, &due)) {
				ready = *pp;
				*pp = ready->gl_dnext;
				ready->gl_flags &= ~GLF_QUEUED;
				break;
			}
		if (ready) {
			pthread_mutex_unlock(&gt->gt_mutex);
			demote_one(fs, ready);
			pthread_mutex_lock(&gt->gt_mutex);
			continue;
		}
		if (due) {
			struct timespec ts;
			uint64_t wait = due > now ? due - now : 0;
			clock_gettime(CLOCK_REALTIME, &ts);
			uint64_t t = (uint64_t)ts.tv_nsec + wait;
			ts.tv_sec += (time_t)(t / 1000000000ull);
			ts.tv_nsec = (long)(t % 1000000000ull);
			pthread_cond_timedwait(&gt->gt_wcond, &gt->gt_mutex, &ts);
		} else {
			pthread_cond_wait(&gt->gt_wcond, &gt->gt_mutex);
		}
	}
	pthread_mutex_unlock(&gt->gt_mutex);
	return NULL;
}

int gl_start(struct shoal_fs *fs)
{
	struct gl_table *gt = fs->fs_gl;
	if (!gt->gt_lm->lm_cluster || gt->gt_started)
		return 0;
	if (pthread_create(&gt->gt_worker, NULL, worker, fs))
		return -EAGAIN;
	gt->gt_started = 1;
	return 0;
}

void gl_stop(struct shoal_fs *fs)
{
	struct gl_table *gt = fs->fs_gl;
	if (!gt || !gt->gt_started)
		return;
	pthread_mutex_lock(&gt->gt_mutex);
	gt->gt_stop = 1;
	pthread_cond_broadcast(&gt->gt_wcond);
	pthread_mutex_unlock(&gt->gt_mutex);
	pthread_join(gt->gt_worker, NULL);
	gt->gt_started = 0;
}

uint64_t gl_requests(struct shoal_fs *fs)
{
	return fs->fs_gl ? fs->fs_gl->gt_requests : 0;
}

void gl_get_stats(struct shoal_fs *fs, struct gl_stats *st)
{
	struct gl_table *gt = fs->fs_gl;
	memset(st, 0, sizeof(*st));
	if (!gt)
		return;
	pthread_mutex_lock(&gt->gt_mutex);
	for (uint32_t i = 0; i <= gt->gt_mask; i++)
		for (struct glock *gl = gt->gt_hash[i]; gl; gl = gl->gl_hnext) {
			st->gs_glocks++;
			st->gs_requests += gl->gl_dcnt;
			st->gs_local += gl->gl_qcnt;
			st->gs_callbacks += gl->gl_callbacks;
			st->gs_demotions += gl->gl_demotions;
			st->gs_rtt_ns += gl->gl_rtt_ns;
		}
	st->gs_restarts = gt->gt_restarts;
	st->gs_recoveries = gt->gt_recoveries;
	pthread_mutex_unlock(&gt->gt_mutex);
}

static const char *state_name(int st)
{
	static const char *const n[] = {"UN", "SH", "DF", "EX"};
	return st >= 0 && st < 4 ? n[st] : "--";
}

/* The filter values of a glock as it is now (kind: none). */
static void glock_vals(const struct glock *gl, int64_t *v)
{
	v[GLF_GLTYPE] = gl->gl_type;
	v[GLF_GLNUM] = (int64_t)gl->gl_number;
	v[GLF_PREV] = v[GLF_NEW] = gl->gl_state;
	v[GLF_TARGET] = gl->gl_flags & GLF_INFLIGHT ? gl->gl_want : -1;
	v[GLF_DSTATE] = gl->gl_target;
	v[GLF_FLAGS] = gl->gl_flags & GLF_SHOWN;
	v[GLF_KIND] = 0;
}

static int glock_cmp(const void *a, const void *b)
{
	const struct glock *x = *(struct glock *const *)a, *y = *(struct glock *const *)b;
	if (x->gl_type != y->gl_type)
		return x->gl_type < y->gl_type ? -1 : 1;
	if (x->gl_number != y->gl_number)
		return x->gl_number < y->gl_number ? -1 : 1;
	return 0;
}

/* gt_mutex held: the glocks filter matches, sorted by (type, number). */
static struct glock **collect(struct gl_table *gt, const struct glfilter *filter, size_t *n)
{
	struct glock **v = malloc(sizeof(*v) * (gt->gt_count ? gt->gt_count : 1));
	int64_t vals[GLF_NFIELDS];

	*n = 0;
	if (!v)
		return NULL;
	for (uint32_t i = 0; i <= gt->gt_mask; i++)
		for (struct glock *gl = gt->gt_hash[i]; gl; gl = gl->gl_hnext) {
			if (filter) {
				glock_vals(gl, vals);
				if (!glf_eval(filter, vals))
					continue;
			}
			v[(*n)++] = gl;
		}
	qsort(v, *n, sizeof(*v), glock_cmp);
	return v;
}

static void dump_holder(FILE *m, const struct gl_holder *gh, uint64_t now)
{
	fprintf(m, " %c: s:%s f:%s%s%s%s tid:%d pid:%d age:%llums\n",
		gh->gh_flags & GHF_WAITING ? 'W' : 'H', state_name(gh->gh_state),
		gh->gh_flags & GHF_WAITING ? "W" : "H", gh->gh_flags & GHF_TRY ? "T" : "",
		gh->gh_flags & GHF_OP ? "O" : "", gh->gh_flags & GHF_ANON ? "A" : "", gh->gh_tid,
		gh->gh_pid, (unsigned long long)((now - gh->gh_since_ns) / 1000000));
}

/* Write the text made under gt_mutex (9), then free it. */
static int flush_text(FILE *m, char **text, size_t *len, FILE *out, int err)
{
	if (fclose(m)) /* sets *text and *len */
		err = -ENOMEM;
	if (!err && *text && fwrite(*text, 1, *len, out) != *len)
		err = -EIO;
	free(*text);
	return err;
}

int shoal_dump_glocks(struct shoal_fs *fs, FILE *out, const struct glfilter *filter)
{
	struct gl_table *gt = fs->fs_gl;
	uint64_t now = gl_now_ns();
	struct glock **v;
	char *text = NULL;
	size_t len = 0, n;
	FILE *m;

	m = open_memstream(&text, &len);
	if (!m)
		return -ENOMEM;
	pthread_mutex_lock(&gt->gt_mutex);
	v = collect(gt, filter, &n);
	for (size_t i = 0; v && i < n; i++) {
		struct glock *gl = v[i];
		fprintf(m,
			"G: s:%s n:%u/%llx f:%s%s%s%s t:%s d:%s/%llums hold:%ums h:%u w:%u "
			"req:%llu local:%llu cb:%llu dem:%llu rtt:%lluus\n",
			state_name(gl->gl_state), gl->gl_type, (unsigned long long)gl->gl_number,
			gl->gl_flags & GLF_INFLIGHT ? "I" : "", gl->gl_flags & GLF_DEMOTING ? "D" : "",
			gl->gl_flags & GLF_QUEUED ? "Q" : "", gl->gl_flags & GLF_STICKY ? "S" : "",
			gl->gl_flags & GLF_INFLIGHT ? state_name(gl->gl_want) : "--",
			state_name(gl->gl_target),
			(unsigned long long)(gl->gl_target >= 0 ? (now - gl->gl_demote_ns) / 1000000 : 0),
			gl->gl_hold_ms, gl->gl_holders, gl->gl_waiters, (unsigned long long)gl->gl_dcnt,
			(unsigned long long)gl->gl_qcnt, (unsigned long long)gl->gl_callbacks,
			(unsigned long long)gl->gl_demotions, (unsigned long long)(gl->gl_rtt_ns / 1000));
		for (struct gl_holder *gh = gl->gl_holders_q.hq_first; gh; gh = gh->gh_next)
			dump_holder(m, gh, now);
		for (struct gl_holder *gh = gl->gl_waiters_q.hq_first; gh; gh = gh->gh_next)
			dump_holder(m, gh, now);
	}
	pthread_mutex_unlock(&gt->gt_mutex);
	free(v);
	return flush_text(m, &text, &len, out, v ? 0 : -ENOMEM);
}

static const char *type_name(uint32_t type)
{
	switch (type) {
	case GL_NONDISK:
		return "nondisk";
	case GL_INODE:
		return "inode";
	case GL_RGRP:
		return "rgrp";
	case GL_META:
		return "meta";
	case GL_IOPEN:
		return "iopen";
	case GL_FLOCK:
		return "flock";
	case GL_QUOTA:
		return "quota";
	case GL_JOURNAL:
		return "journal";
	default:
		return "other";
	}
}

struct gl_sum {
	uint64_t s_glocks, s_req, s_sh, s_ex, s_tryfail, s_local, s_cb, s_dem, s_unlock;
	uint64_t s_rtt_ns, s_rtt_max_ns;
};

static void sum_add(struct gl_sum *s, const struct glock *gl)
{
	s->s_glocks++;
	s->s_req += gl->gl_dcnt;
	s->s_sh += gl->gl_req_sh;
	s->s_ex += gl->gl_req_ex;
	s->s_tryfail += gl->gl_tryfail;
	s->s_local += gl->gl_qcnt;
	s->s_cb += gl->gl_callbacks;
	s->s_dem += gl->gl_demotions;
	s->s_unlock += gl->gl_unlocks;
	s->s_rtt_ns += gl->gl_rtt_ns;
	if (gl->gl_rtt_max_ns > s->s_rtt_max_ns)
		s->s_rtt_max_ns = gl->gl_rtt_max_ns;
}

static void sum_print(FILE *m, const struct gl_sum *s)
{
	fprintf(m,
		"glocks:%llu req:%llu sh:%llu ex:%llu tryfail:%llu local:%llu cb:%llu dem:%llu "
		"unlock:%llu rtt:%lluus mean:%lluus max:%lluus\n",
		(unsigned long long)s->s_glocks, (unsigned long long)s->s_req,
		(unsigned long long)s->s_sh, (unsigned long long)s->s_ex,
		(unsigned long long)s->s_tryfail, (unsigned long long)s->s_local,
		(unsigned long long)s->s_cb, (unsigned long long)s->s_dem,
		(unsigned long long)s->s_unlock, (unsigned long long)(s->s_rtt_ns / 1000),
		(unsigned long long)(s->s_req ? s->s_rtt_ns / s->s_req / 1000 : 0),
		(unsigned long long)(s->s_rtt_max_ns / 1000));
}

int shoal_dump_glstats(struct shoal_fs *fs, FILE *out, const struct glfilter *filter)
{
	struct gl_table *gt = fs->fs_gl;
	struct gl_sum types[GL_TYPES + 1], all;
	struct glock **v;
	char *text = NULL;
	size_t len = 0, n;
	FILE *m;

	m = open_memstream(&text, &len);
	if (!m)
		return -ENOMEM;
	memset(types, 0, sizeof(types));
	memset(&all, 0, sizeof(all));
	pthread_mutex_lock(&gt->gt_mutex);
	v = collect(gt, filter, &n);
	for (size_t i = 0; v && i < n; i++) {
		sum_add(&types[v[i]->gl_type < GL_TYPES ? v[i]->gl_type : GL_TYPES], v[i]);
		sum_add(&all, v[i]);
	}
	for (uint32_t t = 0; t <= GL_TYPES; t++) {
		if (!types[t].s_glocks)
			continue;
		fprintf(m, "T: type:%u %s ", t, t < GL_TYPES ? type_name(t) : "other");
		sum_print(m, &types[t]);
	}
	fprintf(m, "T: type:all ");
	sum_print(m, &all);
	for (size_t i = 0; v && i < n; i++) {
		struct glock *gl = v[i];
		fprintf(m,
			"G: n:%u/%llx s:%s req:%llu sh:%llu ex:%llu tryfail:%llu local:%llu cb:%llu "
			"dem:%llu unlock:%llu rtt:%lluus mean:%lluus max:%lluus srtt:%lluus\n",
			gl->gl_type, (unsigned long long)gl->gl_number, state_name(gl->gl_state),
			(unsigned long long)gl->gl_dcnt, (unsigned long long)gl->gl_req_sh,
			(unsigned long long)gl->gl_req_ex, (unsigned long long)gl->gl_tryfail,
			(unsigned long long)gl->gl_qcnt, (unsigned long long)gl->gl_callbacks,
			(unsigned long long)gl->gl_demotions, (unsigned long long)gl->gl_unlocks,
			(unsigned long long)(gl->gl_rtt_ns / 1000),
			(unsigned long long)(gl->gl_dcnt ? gl->gl_rtt_ns / gl->gl_dcnt / 1000 : 0),
			(unsigned long long)(gl->gl_rtt_max_ns / 1000),
			(unsigned long long)(gl->gl_srtt_ns / 1000));
	}
	pthread_mutex_unlock(&gt->gt_mutex);
	free(v);
	return flush_text(m, &text, &len, out, v ? 0 : -ENOMEM);
}

/*
 * plock.c - shoal-lockd's "plock" lock space: the POSIX record locks
 * (fcntl F_SETLK/F_SETLKW, OFD locks) and flock locks that programs take on
 * the files of the filesystem, held cluster-wide as GFS2's plocks are
 * (docs/PROTOCOL.md "Posix and flock locks", docs/LOCKING.md).
 *
 * One resource (struct pl_res) per inode number that has a lock or a
 * waiting request; it holds granted locks (pr_locks) and waiting requests
 * (pr_waits, FIFO).  A lock (struct pl_lock) belongs to an owner: the node,
 * the owner number the node gave (the kernel's lock owner: the process's
 * file table for POSIX locks, the open file for OFD and flock locks), and
 * the class (record or flock).  Record locks and flock locks never
 * conflict with each other, as on Linux.
 *
 * Invariants:
 *  (1) the granted locks of one owner on a resource never overlap, and two
 *      of the same type are never adjacent (they are merged): pl_apply;
 *  (2) no two granted locks of different owners of one class conflict
 *      (they overlap and one is a write lock); checked by pr_check in
 *      debug builds;
 *  (3) a waiting request (SETW) is granted, in queue order, as soon as
 *      nothing conflicts with it (pr_grant_waiting after every change);
 *      it is answered exactly once: 0 when granted, EINTR when CANCELed,
 *      or not at all when its node's connection is gone (the client fails
 *      it then);
 *  (4) a resource with neither locks nor requests is freed (pr_put): lockd
 *      keeps nothing for an inode nobody locks;
 *  (5) a dead node's granted locks stay until its node is freed
 *      (RECOVERY_DONE of its journal, or LEAVE): nothing it held is granted
 *      to anyone before its journal was replayed; its waiting requests go
 *      with its connection;
 *  (6) a record-lock SETW that would wait is refused with EDEADLK when the
 *      owners in its way wait, directly or through other owners' waits on
 *      any inode, for the requester (pl_deadlock, at most PL_DEADLK_MAX
 *      owners looked at; beyond that it waits, as Linux's detector
 *      gives up).  flock waits are not checked, as on Linux.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include "lk_list.h"
#include "lk_plock.h"
#include "lk_proto.h"

#define PL_HASH 4096	       /* buckets (a power of two) */
#define PL_DEADLK_MAX 1024     /* owners the deadlock search looks at */
#define PL_OFFSET_MAX INT64_MAX /* the kernel's OFFSET_MAX: "to end of file" */
enum { PL_RD = 0, PL_WR = 1, PL_UN = 2 }; /* = F_RDLCK, F_WRLCK, F_UNLCK on Linux */

struct pl_res;

struct pl_lock {
	struct ld_node *pk_node;
	uint64_t pk_owner;
	uint64_t pk_start, pk_end; /* inclusive */
	uint32_t pk_pid;	   /* of the process that asked, in its node's pid namespace */
	uint32_t pk_seq;	   /* waiting: its SETW's seq */
	uint8_t pk_type;	   /* PL_RD or PL_WR */
	uint8_t pk_flock;	   /* 1: flock class */
	struct pl_res *pk_res;
	struct ld_list pk_link;	   /* pr_locks, or pr_waits */
	struct ld_list pk_wlink;   /* pt_waits, while waiting */
};

struct pl_res {
	uint64_t pr_ino;
	struct ld_list pr_locks;
	struct ld_list pr_waits;
	struct pl_res *pr_next;	   /* hash chain */
};

struct pl_table {
	struct pl_res *pt_hash[PL_HASH];
	size_t pt_nres;		   /* atomic for plock_count */
	struct ld_list pt_waits;   /* every waiting request, for pl_deadlock */
};

/* A request as decoded from PLOCK. */
struct pl_req {
	uint32_t rq_op, rq_flags;
	uint64_t rq_ino, rq_owner, rq_start, rq_end;
	uint32_t rq_type, rq_pid;
};

struct pl_table *plock_create(void)
{
	struct pl_table *pt = calloc(1, sizeof(*pt));

	if (pt)
		list_init(&pt->pt_waits);
	return pt;
}

void plock_destroy(struct pl_table *pt)
{
	free(pt);
}

size_t plock_count(const struct pl_table *pt)
{
	return __atomic_load_n(&pt->pt_nres, __ATOMIC_RELAXED);
}

static size_t pl_bucket(uint64_t ino)
{
	return (size_t)((ino * 0x9e3779b97f4a7c15ull) >> 52) & (PL_HASH - 1);
}

static struct pl_res *pr_find(struct pl_table *pt, uint64_t ino)
{
	struct pl_res *pr;

	for (pr = pt->pt_hash[pl_bucket(ino)]; pr; pr = pr->pr_next)
		if (pr->pr_ino == ino)
			return pr;
	return NULL;
}

static struct pl_res *pr_get(struct pl_table *pt, uint64_t ino)
{
	struct pl_res *pr = pr_find(pt, ino);
	size_t b = pl_bucket(ino);

	if (pr)
		return pr;
	pr = calloc(1, sizeof(*pr));
	if (!pr)
		return NULL;
	pr->pr_ino = ino;
	list_init(&pr->pr_locks);
	list_init(&pr->pr_waits);
	pr->pr_next = pt->pt_hash[b];
	pt->pt_hash[b] = pr;
	__atomic_add_fetch(&pt->pt_nres, 1, __ATOMIC_RELAXED);
	return pr;
}

/* (4) */
static void pr_put(struct pl_table *pt, struct pl_res *pr)
{
	struct pl_res **pp;

	if (!list_empty(&pr->pr_locks) || !list_empty(&pr->pr_waits))
		return;
	for (pp = &pt->pt_hash[pl_bucket(pr->pr_ino)]; *pp; pp = &(*pp)->pr_next) {
		if (*pp == pr) {
			*pp = pr->pr_next;
			break;
		}
	}
	__atomic_sub_fetch(&pt->pt_nres, 1, __ATOMIC_RELAXED);
	free(pr);
}

static int pk_same_owner(const struct pl_lock *a, const struct pl_lock *b)
{
	return a->pk_node == b->pk_node && a->pk_owner == b->pk_owner && a->pk_flock == b->pk_flock;
}

static int pk_overlap(const struct pl_lock *a, const struct pl_lock *b)
{
	return a->pk_start <= b->pk_end && b->pk_start <= a->pk_end;
}

/* (2): b is in the way of a (or a of b) */
static int pk_conflict(const struct pl_lock *a, const struct pl_lock *b)
{
	return a->pk_flock == b->pk_flock && !pk_same_owner(a, b) && pk_overlap(a, b) &&
	       (a->pk_type == PL_WR || b->pk_type == PL_WR);
}

#ifndef NDEBUG
#include <assert.h>
static void pr_check(struct pl_res *pr)
{
	struct ld_list *p, *t, *q, *u;

	list_for_each_safe(p, t, &pr->pr_locks) {
		struct pl_lock *a = container_of(p, struct pl_lock, pk_link);
		assert(a->pk_start <= a->pk_end && a->pk_type <= PL_WR);
		list_for_each_safe(q, u, &pr->pr_locks) {
			struct pl_lock *b = container_of(q, struct pl_lock, pk_link);
			if (a == b)
				continue;
			assert(!pk_conflict(a, b));
			assert(!pk_same_owner(a, b) || !pk_overlap(a, b)); /* (1) */
		}
	}
}
#else
static inline void pr_check(struct pl_res *pr)
{
	(void)pr;
}
#endif

/* The first granted lock in the way of rq, or NULL. */
static struct pl_lock *pr_conflict(struct pl_res *pr, const struct pl_lock *rq)
{
	struct ld_list *p, *t;

	list_for_each_safe(p, t, &pr->pr_locks) {
		struct pl_lock *lk = container_of(p, struct pl_lock, pk_link);
		if (pk_conflict(lk, rq))
			return lk;
	}
	return NULL;
}

/*
 * Make rq's owner hold [pk_start, pk_end] in pk_type (PL_UN: hold nothing
 * there), splitting, trimming and merging its locks (1).  0 or -ENOMEM
 * (nothing changed).  rq itself is not linked anywhere and stays the
 * caller's.
 */
static int pl_apply(struct pl_res *pr, const struct pl_lock *rq, int type)
{
	uint64_t s = rq->pk_start, e = rq->pk_end;
	struct pl_lock *nw = NULL, *spare = calloc(1, sizeof(*spare));
	struct ld_list *p, *t;

	if (!spare)
		return -ENOMEM;
	if (type != PL_UN && !(nw = calloc(1, sizeof(*nw)))) {
		free(spare);
		return -ENOMEM;
	}
	list_for_each_safe(p, t, &pr->pr_locks) {
		struct pl_lock *lk = container_of(p, struct pl_lock, pk_link);

		if (!pk_same_owner(lk, rq))
			continue;
		if (type != PL_UN && lk->pk_type == type &&
		    lk->pk_start <= (e == PL_OFFSET_MAX ? e : e + 1) &&
		    (s == 0 ? 0 : s - 1) <= lk->pk_end) {
			/* same type, overlapping or adjacent: merged into the new one */
			if (lk->pk_start < s)
				s = lk->pk_start;
			if (lk->pk_end > e)
				e = lk->pk_end;
			list_del(&lk->pk_link);
			free(lk);
			continue;
		}
		if (lk->pk_end < s || lk->pk_start > e)
			continue;
		if (lk->pk_start < s && lk->pk_end > e) { /* split in two */
			*spare = *lk;
			spare->pk_start = e + 1;
			list_init(&spare->pk_wlink);
			list_add_tail(&spare->pk_link, &pr->pr_locks);
			spare = NULL;
			lk->pk_end = s - 1;
		} else if (lk->pk_start < s) {
			lk->pk_end = s - 1;
		} else if (lk->pk_end > e) {
			lk->pk_start = e + 1;
		} else {
			list_del(&lk->pk_link);
			free(lk);
		}
	}
	free(spare);
	if (nw) {
		*nw = *rq;
		nw->pk_start = s;
		nw->pk_end = e;
		nw->pk_type = (uint8_t)type;
		nw->pk_res = pr;
		list_init(&nw->pk_wlink);
		list_add_tail(&nw->pk_link, &pr->pr_locks);
	}
	pr_check(pr);
	return 0;
}

static void send_reply(struct lockd *d, struct ld_node *nd, uint32_t seq, int err,
		       const struct pl_lock *lk)
{
	uint8_t *p = ld_node_frame(d, nd, LKP_PLOCK_REPLY, seq, LKP_PLOCK_REPLY_LEN);

	if (!p)
		return;
	memset(p, 0, LKP_PLOCK_REPLY_LEN);
	lkp_put32(p, (uint32_t)(err < 0 ? -err : err));
	lkp_put32(p + 4, lk ? lk->pk_type : PL_UN);
	if (lk) {
		lkp_put64(p + 8, lk->pk_start);
		lkp_put64(p + 16, lk->pk_end);
		lkp_put32(p + 24, lk->pk_pid);
		lkp_put32(p + 28, lk->pk_node == nd ? LKP_PLR_MINE : 0);
	}
}

static void wait_free(struct pl_lock *w)
{
	list_del(&w->pk_link);
	list_del(&w->pk_wlink);
	free(w);
}

/* (3): grant every waiting request nothing is in the way of, in order. */
static void pr_grant_waiting(struct lockd *d, struct pl_res *pr)
{
	struct ld_list *p, *t;
	int again = 1;

	while (again) {
		again = 0;
		list_for_each_safe(p, t, &pr->pr_waits) {
			struct pl_lock *w = container_of(p, struct pl_lock, pk_link);
			int err;

			if (pr_conflict(pr, w))
				continue;
			err = pl_apply(pr, w, w->pk_type);
			send_reply(d, w->pk_node, w->pk_seq, err, NULL);
			wait_free(w);
			again = 1; /* a conversion may have let an earlier one in */
			break;
		}
	}
}

/* Is owner o already on the list (n entries)? */
static int owner_seen(struct pl_lock *const *list, size_t n, const struct pl_lock *o)
{
	for (size_t i = 0; i < n; i++)
		if (pk_same_owner(list[i], o))
			return 1;
	return 0;
}

/*
 * (6): would rq (a record lock that has to wait on pr) wait, through the
 * owners in its way and whatever they wait for, for its own owner?
 */
static int pl_deadlock(struct pl_table *pt, struct pl_res *pr, const struct pl_lock *rq)
{
	struct pl_lock **todo = malloc(PL_DEADLK_MAX * sizeof(*todo));
	struct ld_list *p, *t, *q, *u;
	size_t n = 0, i;
	int found = 0;

	if (!todo)
		return 0; /* cannot look: it waits (a signal still ends it) */
	list_for_each_safe(p, t, &pr->pr_locks) {
		struct pl_lock *lk = container_of(p, struct pl_lock, pk_link);
		if (pk_conflict(lk, rq) && !owner_seen(todo, n, lk) && n < PL_DEADLK_MAX)
			todo[n++] = lk;
	}
	for (i = 0; i < n && !found; i++) {
		if (pk_same_owner(todo[i], rq)) {
			found = 1;
			break;
		}
		/* every request todo[i]'s owner waits with, and what blocks it */
		list_for_each_safe(p, t, &pt->pt_waits) {
			struct pl_lock *w = container_of(p, struct pl_lock, pk_wlink);
			if (w->pk_flock || !pk_same_owner(w, todo[i]))
				continue;
			list_for_each_safe(q, u, &w->pk_res->pr_locks) {
				struct pl_lock *lk = container_of(q, struct pl_lock, pk_link);
				if (!pk_conflict(lk, w) || owner_seen(todo, n, lk))
					continue;
				if (pk_same_owner(lk, rq))
					found = 1;
				if (n < PL_DEADLK_MAX)
					todo[n++] = lk;
			}
		}
	}
	free(todo);
	return found;
}

/* Does want's owner hold a lock of want's type over all of want's range? */
static int pr_holds(struct pl_res *pr, const struct pl_lock *want)
{
	struct ld_list *p, *t;

	list_for_each_safe(p, t, &pr->pr_locks) {
		struct pl_lock *lk = container_of(p, struct pl_lock, pk_link);
		if (pk_same_owner(lk, want) && lk->pk_type == want->pk_type &&
		    lk->pk_start <= want->pk_start && lk->pk_end >= want->pk_end)
			return 1;
	}
	return 0;
}

/* Drop every granted lock of (nd, owner) on pr, both classes; 1 if any. */
static int pr_drop_owner(struct pl_res *pr, struct ld_node *nd, uint64_t owner, int all)
{
	struct ld_list *p, *t;
	int n = 0;

	list_for_each_safe(p, t, &pr->pr_locks) {
		struct pl_lock *lk = container_of(p, struct pl_lock, pk_link);
		if (lk->pk_node == nd && (all || lk->pk_owner == owner)) {
			list_del(&lk->pk_link);
			free(lk);
			n = 1;
		}
	}
	return n;
}

static int req_decode(const uint8_t *p, struct pl_req *rq)
{
	rq->rq_op = lkp_get32(p);
	rq->rq_flags = lkp_get32(p + 4);
	rq->rq_ino = lkp_get64(p + 8);
	rq->rq_owner = lkp_get64(p + 16);
	rq->rq_start = lkp_get64(p + 24);
	rq->rq_end = lkp_get64(p + 32);
	rq->rq_type = lkp_get32(p + 40);
	rq->rq_pid = lkp_get32(p + 44);
	if (rq->rq_op < LKP_PL_GET || rq->rq_op > LKP_PL_CANCEL || (rq->rq_flags & ~LKP_PLF_FLOCK))
		return -EINVAL;
	if (rq->rq_op == LKP_PL_CLOSE || rq->rq_op == LKP_PL_CANCEL)
		return 0;
	if (rq->rq_type > PL_UN || rq->rq_start > rq->rq_end || rq->rq_end > PL_OFFSET_MAX)
		return -EINVAL;
	if (rq->rq_type == PL_UN && (rq->rq_op == LKP_PL_GET || rq->rq_op == LKP_PL_SETW))
		return -EINVAL;
	if ((rq->rq_flags & LKP_PLF_FLOCK) && (rq->rq_start || rq->rq_end != PL_OFFSET_MAX))
		return -EINVAL; /* flock locks are whole-file */
	return 0;
}

/* CANCEL: the SETW with seq `seq` of nd on ino, if it still waits, gets EINTR. */
static void pl_cancel(struct lockd *d, struct pl_table *pt, struct ld_node *nd, uint64_t ino,
		      uint32_t seq)
{
	struct pl_res *pr = pr_find(pt, ino);
	struct ld_list *p, *t;

	if (!pr)
		return;
	list_for_each_safe(p, t, &pr->pr_waits) {
		struct pl_lock *w = container_of(p, struct pl_lock, pk_link);
		if (w->pk_node == nd && w->pk_seq == seq) {
			send_reply(d, nd, seq, -EINTR, NULL);
			wait_free(w);
			break;
		}
	}
	pr_put(pt, pr);
}

void plock_msg(struct lockd *d, struct pl_table *pt, struct ld_node *nd, uint32_t seq,
	       const uint8_t *p)
{
	struct pl_req rq;
	struct pl_lock want, *lk, *w;
	struct pl_res *pr;
	int err = req_decode(p, &rq);

	if (err) {
		if (rq.rq_op != LKP_PL_CANCEL)
			send_reply(d, nd, seq, err, NULL);
		return;
	}
	if (rq.rq_op == LKP_PL_CANCEL) {
		pl_cancel(d, pt, nd, rq.rq_ino, rq.rq_pid);
		return;
	}
	if (rq.rq_op == LKP_PL_CLOSE) {
		pr = pr_find(pt, rq.rq_ino);
		if (pr && pr_drop_owner(pr, nd, rq.rq_owner, 0))
			pr_grant_waiting(d, pr);
		if (pr)
			pr_put(pt, pr);
		send_reply(d, nd, seq, 0, NULL);
		return;
	}
	memset(&want, 0, sizeof(want));
	want.pk_node = nd;
	want.pk_owner = rq.rq_owner;
	want.pk_start = rq.rq_start;
	want.pk_end = rq.rq_end;
	want.pk_pid = rq.rq_pid;
	want.pk_type = (uint8_t)rq.rq_type;
	want.pk_flock = !!(rq.rq_flags & LKP_PLF_FLOCK);
	if (rq.rq_op == LKP_PL_GET) {
		pr = pr_find(pt, rq.rq_ino);
		send_reply(d, nd, seq, 0, pr ? pr_conflict(pr, &want) : NULL);
		return;
	}
	pr = pr_get(pt, rq.rq_ino);
	if (!pr) {
		send_reply(d, nd, seq, -ENOMEM, NULL);
		return;
	}
	want.pk_res = pr;
	if (want.pk_flock && rq.rq_type != PL_UN && pr_holds(pr, &want)) {
		send_reply(d, nd, seq, 0, NULL); /* already held in that mode */
		return;
	}
	if (rq.rq_type == PL_UN || want.pk_flock) {
		/* an unlock; or a flock request, which (as flock(2) on Linux)
		 * first lets go of the file's flock lock the owner holds */
		err = pl_apply(pr, &want, PL_UN);
		if (!err)
			pr_grant_waiting(d, pr);
		if (err || rq.rq_type == PL_UN) {
			send_reply(d, nd, seq, err, NULL);
			pr_put(pt, pr);
			return;
		}
	}
	lk = pr_conflict(pr, &want);
	if (!lk) {
		err = pl_apply(pr, &want, want.pk_type);
		send_reply(d, nd, seq, err, NULL);
		if (!err)
			pr_grant_waiting(d, pr); /* a write lock made a read lock may let some in */
		pr_put(pt, pr);
		return;
	}
	if (rq.rq_op == LKP_PL_SET) {
		send_reply(d, nd, seq, -EAGAIN, NULL);
		pr_put(pt, pr);
		return;
	}
	if (!want.pk_flock && pl_deadlock(pt, pr, &want)) {
		send_reply(d, nd, seq, -EDEADLK, NULL);
		pr_put(pt, pr);
		return;
	}
	w = malloc(sizeof(*w));
	if (!w) {
		send_reply(d, nd, seq, -ENOMEM, NULL);
		pr_put(pt, pr);
		return;
	}
	*w = want;
	w->pk_seq = seq;
	list_add_tail(&w->pk_link, &pr->pr_waits);
	list_add_tail(&w->pk_wlink, &pt->pt_waits);
}

/* Call fn on every resource (it may free the one it is given). */
static void pl_each(struct lockd *d, struct pl_table *pt, struct ld_node *nd,
		    void (*fn)(struct lockd *, struct pl_table *, struct pl_res *, struct ld_node *))
{
	for (size_t b = 0; b < PL_HASH; b++) {
		struct pl_res *pr = pt->pt_hash[b], *next;
		for (; pr; pr = next) {
			next = pr->pr_next;
			fn(d, pt, pr, nd);
		}
	}
}

static void drop_waits(struct lockd *d, struct pl_table *pt, struct pl_res *pr,
		       struct ld_node *nd)
{
	struct ld_list *p, *t;

	(void)d;
	list_for_each_safe(p, t, &pr->pr_waits) {
		struct pl_lock *w = container_of(p, struct pl_lock, pk_link);
		if (w->pk_node == nd)
			wait_free(w);
	}
	pr_put(pt, pr);
}

static void drop_all(struct lockd *d, struct pl_table *pt, struct pl_res *pr, struct ld_node *nd)
{
	struct ld_list *p, *t;

	list_for_each_safe(p, t, &pr->pr_waits) {
		struct pl_lock *w = container_of(p, struct pl_lock, pk_link);
		if (w->pk_node == nd)
			wait_free(w);
	}
	if (pr_drop_owner(pr, nd, 0, 1))
		pr_grant_waiting(d, pr);
	pr_put(pt, pr);
}

void plock_node_disconnected(struct lockd *d, struct pl_table *pt, struct ld_node *nd)
{
	pl_each(d, pt, nd, drop_waits);
}

void plock_node_free(struct lockd *d, struct pl_table *pt, struct ld_node *nd)
{
	pl_each(d, pt, nd, drop_all);
}

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
 *      of the same type are never adjacent (they are merged): plr_apply
 *      (plrange.c);
 *  (2) no two granted locks of different owners of one class conflict
 *      (they overlap and one is a write lock); plr_check asserts it in
 *      debug builds;
 *  (3) a waiting request (SETW) is granted, in queue order, as soon as
 *      nothing conflicts with it (pr_grant_waiting after every change);
 *      it is answered exactly once: 0 when granted, EINTR when CANCELed,
 *      or not at all when its node's connection is gone (the client fails
 *      it then);
 *  (4) a resource with neither locks, requests nor owner is freed
 *      (pr_put): lockd keeps nothing for an inode nobody locks or owns;
 *  (5) a dead node's granted locks stay until its node is freed
 *      (RECOVERY_DONE of its journal, or LEAVE): nothing it held is granted
 *      to anyone before its journal was replayed; its waiting requests go
 *      with its connection;
 *  (6) a record-lock SETW that would wait is refused with EDEADLK when the
 *      owners in its way wait, directly or through other owners' waits on
 *      any inode, for the requester (pl_deadlock, at most PL_DEADLK_MAX
 *      owners looked at; beyond that it waits, as Linux's detector
 *      gives up).  flock waits are not checked, as on Linux;
 *  (7) ownership (dlm_controld's plock_ownership): a request of a PLOWN
 *      node that leaves a resource with no lock, request or owner makes
 *      that node its owner (OWN in the reply); from then on the node
 *      locks and unlocks that inode on its own, and what lockd holds for
 *      it says nothing about the node's locks.  So while pr_owner is set
 *      every request on the inode (the owner's own too: one sent before
 *      it heard it owns) is held on pr_pend, and the owner is asked once
 *      (DROP) to give the space back; it sends its locks (OWNLK) and
 *      OWNEND, and the held requests run in order as if just received.
 *      What needs no look at the owner's locks is answered at once (an
 *      unlock or CLOSE by another node, which holds nothing there).  An
 *      owner without connection cannot give back: a held F_SETLK gets
 *      EAGAIN (it may hold the range), the rest wait until it is freed
 *      (5), which ends the ownership with its locks;
 *  (8) no resource gets an owner within PL_COOL_NS of a give-back
 *      (pt_cool, a small table: a slot taken by another inode only
 *      forgets early), so contended inodes stay with lockd instead of
 *      going back and forth.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include "lk_list.h"
#include "lk_plock.h"
#include "lk_plrange.h"
#include "lk_proto.h"

#define PL_HASH 4096	       /* buckets (a power of two) */
#define PL_DEADLK_MAX 1024     /* owners the deadlock search looks at */
#define PL_COOL 256	       /* remembered recent give-backs (a power of two) */
#define PL_COOL_NS 1000000000ull /* (8): no new owner this soon after a give-back */

struct pl_res {
	uint64_t pr_ino;
	struct ld_list pr_locks;
	struct ld_list pr_waits;
	struct ld_node *pr_owner;  /* (7): the node that owns this space, or NULL */
	int pr_dropping;	   /* DROP sent to pr_owner, its give-back not in yet */
	struct ld_list pr_pend;	   /* (7): requests held while pr_owner is set */
	struct pl_res *pr_next;	   /* hash chain */
};

/* A request as decoded from PLOCK. */
struct pl_req {
	uint32_t rq_op, rq_flags;
	uint64_t rq_ino, rq_owner, rq_start, rq_end;
	uint32_t rq_type, rq_pid;
};

/* (7): a request held until the owner gave the space back. */
struct pl_pend {
	struct ld_node *pp_node;
	uint32_t pp_seq;
	struct pl_req pp_rq;
	struct ld_list pp_link;	   /* pr_pend */
};

struct pl_table {
	struct pl_res *pt_hash[PL_HASH];
	size_t pt_nres;		   /* atomic for plock_count */
	struct ld_list pt_waits;   /* every waiting request, for pl_deadlock */
	struct {
		uint64_t ino, until;
	} pt_cool[PL_COOL];	   /* (8) */
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
	list_init(&pr->pr_pend);
	pr->pr_next = pt->pt_hash[b];
	pt->pt_hash[b] = pr;
	__atomic_add_fetch(&pt->pt_nres, 1, __ATOMIC_RELAXED);
	return pr;
}

static int pr_empty(const struct pl_res *pr)
{
	return list_empty(&pr->pr_locks) && list_empty(&pr->pr_waits) && !pr->pr_owner &&
	       list_empty(&pr->pr_pend);
}

/* (4) */
static void pr_put(struct pl_table *pt, struct pl_res *pr)
{
	struct pl_res **pp;

	if (!pr_empty(pr))
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

/* (8) */
static size_t cool_slot(uint64_t ino)
{
	return (size_t)((ino * 0x9e3779b97f4a7c15ull) >> 40) & (PL_COOL - 1);
}

static void cool_set(struct pl_table *pt, uint64_t ino)
{
	size_t i = cool_slot(ino);

	pt->pt_cool[i].ino = ino;
	pt->pt_cool[i].until = lkp_now_ns() + PL_COOL_NS;
}

static int cool(struct pl_table *pt, uint64_t ino)
{
	size_t i = cool_slot(ino);

	return pt->pt_cool[i].ino == ino && lkp_now_ns() < pt->pt_cool[i].until;
}

static void send_reply(struct lockd *d, struct ld_node *nd, uint32_t seq, int err,
		       const struct pl_lock *lk, uint32_t rflags)
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
		rflags |= lk->pk_node == nd ? LKP_PLR_MINE : 0;
	}
	lkp_put32(p + 28, rflags);
}

/*
 * (7) The answer to a request of nd that succeeded on pr: when it left
 * nothing on pr, nd may own the space from now on (OWN in the reply).
 */
static void reply_done(struct lockd *d, struct pl_table *pt, struct pl_res *pr,
		       struct ld_node *nd, uint32_t seq, int err)
{
	uint8_t *p;

	if (err || !pr || !pr_empty(pr) || !ld_node_plown(nd) || cool(pt, pr->pr_ino)) {
		send_reply(d, nd, seq, err, NULL, 0);
		return;
	}
	p = ld_node_frame(d, nd, LKP_PLOCK_REPLY, seq, LKP_PLOCK_REPLY_LEN);
	if (!p)
		return;
	pr->pr_owner = nd;
	memset(p, 0, LKP_PLOCK_REPLY_LEN);
	lkp_put32(p + 4, PL_UN);
	lkp_put64(p + 8, pr->pr_ino); /* with OWN: the inode it owns */
	lkp_put32(p + 28, LKP_PLR_OWN);
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

			if (plr_first_conflict(&pr->pr_locks, w))
				continue;
			err = plr_apply(&pr->pr_locks, w, w->pk_type);
			send_reply(d, w->pk_node, w->pk_seq, err, NULL, 0);
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
		if (plr_same_owner(list[i], o))
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
		if (plr_conflict(lk, rq) && !owner_seen(todo, n, lk) && n < PL_DEADLK_MAX)
			todo[n++] = lk;
	}
	for (i = 0; i < n && !found; i++) {
		if (plr_same_owner(todo[i], rq)) {
			found = 1;
			break;
		}
		/* every request todo[i]'s owner waits with, and what blocks it */
		list_for_each_safe(p, t, &pt->pt_waits) {
			struct pl_lock *w = container_of(p, struct pl_lock, pk_wlink);
			if (w->pk_flock || !plr_same_owner(w, todo[i]))
				continue;
			list_for_each_safe(q, u, &w->pk_res->pr_locks) {
				struct pl_lock *lk = container_of(q, struct pl_lock, pk_link);
				if (!plr_conflict(lk, w) || owner_seen(todo, n, lk))
					continue;
				if (plr_same_owner(lk, rq))
					found = 1;
				if (n < PL_DEADLK_MAX)
					todo[n++] = lk;
			}
		}
	}
	free(todo);
	return found;
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
	if (rq->rq_op < LKP_PL_GET || rq->rq_op > LKP_PL_OWNEND || (rq->rq_flags & ~LKP_PLF_FLOCK))
		return -EINVAL;
	if (rq->rq_op == LKP_PL_CLOSE || rq->rq_op == LKP_PL_CANCEL || rq->rq_op == LKP_PL_OWNEND)
		return 0;
	if (rq->rq_type > PL_UN || rq->rq_start > rq->rq_end || rq->rq_end > PL_OFFSET_MAX)
		return -EINVAL;
	if (rq->rq_type == PL_UN &&
	    (rq->rq_op == LKP_PL_GET || rq->rq_op == LKP_PL_SETW || rq->rq_op == LKP_PL_OWNLK))
		return -EINVAL;
	if ((rq->rq_flags & LKP_PLF_FLOCK) && (rq->rq_start || rq->rq_end != PL_OFFSET_MAX))
		return -EINVAL; /* flock locks are whole-file */
	return 0;
}

static void req_lock(struct ld_node *nd, const struct pl_req *rq, struct pl_lock *want)
{
	memset(want, 0, sizeof(*want));
	want->pk_node = nd;
	want->pk_owner = rq->rq_owner;
	want->pk_start = rq->rq_start;
	want->pk_end = rq->rq_end;
	want->pk_pid = rq->rq_pid;
	want->pk_type = (uint8_t)rq->rq_type;
	want->pk_flock = !!(rq->rq_flags & LKP_PLF_FLOCK);
}

/* CANCEL: the SETW with seq `seq` of nd on pr, if it still waits (or is
 * held for the owner's give-back), gets EINTR. */
static void pl_cancel(struct lockd *d, struct pl_res *pr, struct ld_node *nd, uint32_t seq)
{
	struct ld_list *p, *t;

	list_for_each_safe(p, t, &pr->pr_waits) {
		struct pl_lock *w = container_of(p, struct pl_lock, pk_link);
		if (w->pk_node == nd && w->pk_seq == seq) {
			send_reply(d, nd, seq, -EINTR, NULL, 0);
			wait_free(w);
			return;
		}
	}
	list_for_each_safe(p, t, &pr->pr_pend) {
		struct pl_pend *pp = container_of(p, struct pl_pend, pp_link);
		if (pp->pp_node == nd && pp->pp_seq == seq && pp->pp_rq.rq_op == LKP_PL_SETW) {
			send_reply(d, nd, seq, -EINTR, NULL, 0);
			list_del(&pp->pp_link);
			free(pp);
			return;
		}
	}
}

/*
 * (7) pr is owned: hold rq until the owner gave the space back, asking it
 * to (DROP) unless asked already.  What needs no look at the owner's
 * locks is answered at once.
 */
static void pl_hold(struct lockd *d, struct pl_res *pr, struct ld_node *nd, uint32_t seq,
		    const struct pl_req *rq)
{
	struct pl_pend *pp;
	uint8_t *f;

	if (nd != pr->pr_owner &&
	    (rq->rq_op == LKP_PL_CLOSE || (rq->rq_op == LKP_PL_SET && rq->rq_type == PL_UN))) {
		send_reply(d, nd, seq, 0, NULL, 0); /* nd holds nothing in an owned space */
		return;
	}
	if (!pr->pr_dropping) {
		f = ld_node_frame(d, pr->pr_owner, LKP_PLOCK_DROP, 0, LKP_PLOCK_DROP_LEN);
		if (f) {
			lkp_put64(f, pr->pr_ino);
			pr->pr_dropping = 1;
		}
	}
	if (!pr->pr_dropping && rq->rq_op == LKP_PL_SET) {
		/* the owner is dead or lost its connection: its locks stay
		 * unknown until its journal is recovered; it may hold this */
		send_reply(d, nd, seq, -EAGAIN, NULL, 0);
		return;
	}
	pp = malloc(sizeof(*pp));
	if (!pp) {
		send_reply(d, nd, seq, -ENOMEM, NULL, 0);
		return;
	}
	pp->pp_node = nd;
	pp->pp_seq = seq;
	pp->pp_rq = *rq;
	list_add_tail(&pp->pp_link, &pr->pr_pend);
}

/* One request (not OWNLK, OWNEND) of live node nd. */
static void pl_do(struct lockd *d, struct pl_table *pt, struct ld_node *nd, uint32_t seq,
		  const struct pl_req *rq)
{
	struct pl_lock want, *lk, *w;
	struct pl_res *pr = pr_find(pt, rq->rq_ino);
	int err;

	if (rq->rq_op == LKP_PL_CANCEL) {
		if (pr) {
			pl_cancel(d, pr, nd, rq->rq_pid);
			pr_put(pt, pr);
		}
		return;
	}
	if (pr && pr->pr_owner) {
		pl_hold(d, pr, nd, seq, rq);
		return;
	}
	req_lock(nd, rq, &want);
	if (rq->rq_op == LKP_PL_CLOSE) {
		if (pr && plr_drop_owner(&pr->pr_locks, nd, rq->rq_owner, 0))
			pr_grant_waiting(d, pr);
		reply_done(d, pt, pr, nd, seq, 0);
		if (pr)
			pr_put(pt, pr);
		return;
	}
	if (rq->rq_op == LKP_PL_GET) {
		send_reply(d, nd, seq, 0, pr ? plr_first_conflict(&pr->pr_locks, &want) : NULL, 0);
		return;
	}
	pr = pr_get(pt, rq->rq_ino);
	if (!pr) {
		send_reply(d, nd, seq, -ENOMEM, NULL, 0);
		return;
	}
	want.pk_res = pr;
	if (want.pk_flock && rq->rq_type != PL_UN && plr_holds(&pr->pr_locks, &want)) {
		send_reply(d, nd, seq, 0, NULL, 0); /* already held in that mode */
		return;
	}
	if (rq->rq_type == PL_UN || want.pk_flock) {
		/* an unlock; or a flock request, which (as flock(2) on Linux)
		 * first lets go of the file's flock lock the owner holds */
		err = plr_apply(&pr->pr_locks, &want, PL_UN);
		if (!err)
			pr_grant_waiting(d, pr);
		if (err || rq->rq_type == PL_UN) {
			reply_done(d, pt, pr, nd, seq, err);
			pr_put(pt, pr);
			return;
		}
	}
	lk = plr_first_conflict(&pr->pr_locks, &want);
	if (!lk) {
		err = plr_apply(&pr->pr_locks, &want, want.pk_type);
		send_reply(d, nd, seq, err, NULL, 0);
		if (!err)
			pr_grant_waiting(d, pr); /* a write lock made a read lock may let some in */
		pr_put(pt, pr);
		return;
	}
	if (rq->rq_op == LKP_PL_SET) {
		send_reply(d, nd, seq, -EAGAIN, NULL, 0);
		pr_put(pt, pr);
		return;
	}
	if (!want.pk_flock && pl_deadlock(pt, pr, &want)) {
		send_reply(d, nd, seq, -EDEADLK, NULL, 0);
		pr_put(pt, pr);
		return;
	}
	w = malloc(sizeof(*w));
	if (!w) {
		send_reply(d, nd, seq, -ENOMEM, NULL, 0);
		pr_put(pt, pr);
		return;
	}
	*w = want;
	w->pk_seq = seq;
	list_add_tail(&w->pk_link, &pr->pr_waits);
	list_add_tail(&w->pk_wlink, &pt->pt_waits);
}

/* (7) pr's owner gave it back (or is gone): the held requests, in order. */
static void run_held(struct lockd *d, struct pl_table *pt, uint64_t ino)
{
	for (;;) {
		struct pl_res *pr = pr_find(pt, ino);
		struct pl_pend *pp;

		if (!pr)
			return;
		if (pr->pr_owner || list_empty(&pr->pr_pend)) {
			pr_put(pt, pr);
			return;
		}
		pp = container_of(pr->pr_pend.next, struct pl_pend, pp_link);
		list_del(&pp->pp_link);
		pl_do(d, pt, pp->pp_node, pp->pp_seq, &pp->pp_rq);
		free(pp);
	}
}

/* (7) OWNLK or OWNEND of nd, giving pr's space back. */
static void pl_give_back(struct lockd *d, struct pl_table *pt, struct ld_node *nd,
			 const struct pl_req *rq)
{
	struct pl_res *pr = pr_find(pt, rq->rq_ino);
	struct pl_lock want;

	if (!pr || pr->pr_owner != nd) {
		ld_log(d, LOG_WARNING, "node %s gave back plocks of inode %llu it does not own; "
				       "ignored", ld_node_name(nd), (unsigned long long)rq->rq_ino);
		return;
	}
	if (rq->rq_op == LKP_PL_OWNEND) {
		pr->pr_owner = NULL;
		pr->pr_dropping = 0;
		cool_set(pt, pr->pr_ino);
		run_held(d, pt, pr->pr_ino);
		return;
	}
	req_lock(nd, rq, &want);
	want.pk_res = pr;
	if (plr_first_conflict(&pr->pr_locks, &want) ||
	    plr_apply(&pr->pr_locks, &want, want.pk_type))
		ld_log(d, LOG_ERR, "node %s gave back a plock of inode %llu that conflicts "
				   "(or out of memory); dropped", ld_node_name(nd),
		       (unsigned long long)rq->rq_ino);
}

void plock_msg(struct lockd *d, struct pl_table *pt, struct ld_node *nd, uint32_t seq,
	       const uint8_t *p)
{
	struct pl_req rq;
	int err = req_decode(p, &rq);

	if (err) {
		if (rq.rq_op != LKP_PL_CANCEL && rq.rq_op != LKP_PL_OWNLK && rq.rq_op != LKP_PL_OWNEND)
			send_reply(d, nd, seq, err, NULL, 0);
		else
			ld_log(d, LOG_WARNING, "node %s: malformed PLOCK op %u; ignored",
			       ld_node_name(nd), rq.rq_op);
		return;
	}
	if (rq.rq_op == LKP_PL_OWNLK || rq.rq_op == LKP_PL_OWNEND)
		pl_give_back(d, pt, nd, &rq);
	else
		pl_do(d, pt, nd, seq, &rq);
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

/* nd's waiting and held requests go, unanswered. */
static void drop_requests(struct pl_res *pr, struct ld_node *nd)
{
	struct ld_list *p, *t;

	list_for_each_safe(p, t, &pr->pr_waits) {
		struct pl_lock *w = container_of(p, struct pl_lock, pk_link);
		if (w->pk_node == nd)
			wait_free(w);
	}
	list_for_each_safe(p, t, &pr->pr_pend) {
		struct pl_pend *pp = container_of(p, struct pl_pend, pp_link);
		if (pp->pp_node == nd) {
			list_del(&pp->pp_link);
			free(pp);
		}
	}
}

static void drop_waits(struct lockd *d, struct pl_table *pt, struct pl_res *pr,
		       struct ld_node *nd)
{
	struct ld_list *p, *t;

	drop_requests(pr, nd);
	if (pr->pr_owner == nd) {
		/* (7) its locks stay unknown until it is freed: a non-blocking
		 * request held for its give-back gets EAGAIN now */
		pr->pr_dropping = 0;
		list_for_each_safe(p, t, &pr->pr_pend) {
			struct pl_pend *pp = container_of(p, struct pl_pend, pp_link);
			if (pp->pp_rq.rq_op == LKP_PL_SET) {
				send_reply(d, pp->pp_node, pp->pp_seq, -EAGAIN, NULL, 0);
				list_del(&pp->pp_link);
				free(pp);
			}
		}
	}
	pr_put(pt, pr);
}

static void drop_all(struct lockd *d, struct pl_table *pt, struct pl_res *pr, struct ld_node *nd)
{
	uint64_t ino = pr->pr_ino;

	drop_requests(pr, nd);
	if (pr->pr_owner == nd) {
		pr->pr_owner = NULL;
		pr->pr_dropping = 0;
	}
	if (plr_drop_owner(&pr->pr_locks, nd, 0, 1))
		pr_grant_waiting(d, pr);
	run_held(d, pt, ino); /* puts pr */
}

void plock_node_disconnected(struct lockd *d, struct pl_table *pt, struct ld_node *nd)
{
	pl_each(d, pt, nd, drop_waits);
}

void plock_node_free(struct lockd *d, struct pl_table *pt, struct ld_node *nd)
{
	pl_each(d, pt, nd, drop_all);
}

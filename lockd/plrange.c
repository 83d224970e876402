/*
 * plrange.c - byte ranges of posix and flock locks on one inode
 * (lk_plrange.h): the conflict rule of fcntl(2) and flock(2) on Linux, and
 * the split and merge of one owner's ranges.
 *
 * Invariants of a list of granted locks:
 *  (1) the locks of one owner never overlap, and two of the same type are
 *      never adjacent (they are merged): plr_apply;
 *  (2) no two locks of different owners of one class conflict (they
 *      overlap and one is a write lock): the callers check before they
 *      apply; plr_check asserts it in debug builds.
 * Record locks and flock locks never conflict with each other, as on Linux.
 */
#include <errno.h>
#include <stdlib.h>

#include "lk_plrange.h"

int plr_same_owner(const struct pl_lock *a, const struct pl_lock *b)
{
	return a->pk_node == b->pk_node && a->pk_owner == b->pk_owner && a->pk_flock == b->pk_flock;
}

static int overlap(const struct pl_lock *a, const struct pl_lock *b)
{
	return a->pk_start <= b->pk_end && b->pk_start <= a->pk_end;
}

int plr_conflict(const struct pl_lock *a, const struct pl_lock *b)
{
	return a->pk_flock == b->pk_flock && !plr_same_owner(a, b) && overlap(a, b) &&
	       (a->pk_type == PL_WR || b->pk_type == PL_WR);
}

#ifndef NDEBUG
#include <assert.h>
void plr_check(struct ld_list *locks)
{
	struct ld_list *p, *t, *q, *u;

	list_for_each_safe(p, t, locks) {
		struct pl_lock *a = container_of(p, struct pl_lock, pk_link);
		assert(a->pk_start <= a->pk_end && a->pk_type <= PL_WR);
		list_for_each_safe(q, u, locks) {
			struct pl_lock *b = container_of(q, struct pl_lock, pk_link);
			if (a == b)
				continue;
			assert(!plr_conflict(a, b));			/* (2) */
			assert(!plr_same_owner(a, b) || !overlap(a, b)); /* (1) */
		}
	}
}
#else
void plr_check(struct ld_list *locks)
{
	(void)locks;
}
#endif

struct pl_lock *plr_first_conflict(struct ld_list *locks, const struct pl_lock *rq)
{
	struct ld_list *p, *t;

	list_for_each_safe(p, t, locks) {
		struct pl_lock *lk = container_of(p, struct pl_lock, pk_link);
		if (plr_conflict(lk, rq))
			return lk;
	}
	return NULL;
}

/* (1) */
int plr_apply(struct ld_list *locks, const struct pl_lock *rq, int type)
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
	list_for_each_safe(p, t, locks) {
		struct pl_lock *lk = container_of(p, struct pl_lock, pk_link);

		if (!plr_same_owner(lk, rq))
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
			list_add_tail(&spare->pk_link, locks);
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
		list_init(&nw->pk_wlink);
		list_add_tail(&nw->pk_link, locks);
	}
	plr_check(locks);
	return 0;
}

int plr_holds(struct ld_list *locks, const struct pl_lock *want)
{
	struct ld_list *p, *t;

	list_for_each_safe(p, t, locks) {
		struct pl_lock *lk = container_of(p, struct pl_lock, pk_link);
		if (plr_same_owner(lk, want) && lk->pk_type == want->pk_type &&
		    lk->pk_start <= want->pk_start && lk->pk_end >= want->pk_end)
			return 1;
	}
	return 0;
}

int plr_drop_owner(struct ld_list *locks, struct ld_node *nd, uint64_t owner, int all)
{
	struct ld_list *p, *t;
	int n = 0;

	list_for_each_safe(p, t, locks) {
		struct pl_lock *lk = container_of(p, struct pl_lock, pk_link);
		if (lk->pk_node == nd && (all || lk->pk_owner == owner)) {
			list_del(&lk->pk_link);
			free(lk);
			n = 1;
		}
	}
	return n;
}

void plr_free_all(struct ld_list *locks)
{
	struct ld_list *p, *t;

	list_for_each_safe(p, t, locks) {
		list_del(p);
		free(container_of(p, struct pl_lock, pk_link));
	}
}

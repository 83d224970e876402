/*
 * plown.c - the plock spaces this node owns (PROTOCOL.md "Posix and flock
 * locks", "Ownership"; dlm_controld's plock_ownership).  lockd makes a node
 * the owner of an inode's posix and flock locks when a request of that
 * node leaves no lock there; from then on the node answers every lock,
 * unlock and test of its processes on that inode here, without a round
 * trip, until lockd asks for it back (DROP: another node wants it) or it
 * has been idle for PLOWN_IDLE_NS.  Giving back writes the node's locks
 * (OWNLK frames) and OWNEND in one write.
 *
 * Invariants (under o_mu):
 *  (1) an inode is in o_hash from the receipt of the OWN that made it
 *      this node's until its give-back frames were written: every frame
 *      about it written after the give-back follows the give-back on the
 *      connection, and lockd holds every request about it that reaches it
 *      before the give-back (PROTOCOL.md);
 *  (2) the locks of an owned inode obey plrange.c's invariants; a request
 *      that would wait is never queued here: the space goes back and the
 *      request to lockd, where waits, their order and deadlocks are seen
 *      with every node's locks;
 *  (3) give-backs are written with o_mu held, so a caller that found an
 *      inode not owned sends after the give-back (lock order: the client's
 *      c_lock, then o_mu, then its send lock).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "lk_plown.h"
#include "lk_plrange.h"
#include "lk_proto.h"
#include "shoal/lockd.h"

#define OWN_HASH 1024

struct own_ent {
	uint64_t oe_ino;
	uint64_t oe_used;	/* last request or grant, lkp_now_ns */
	struct ld_list oe_locks;
	struct own_ent *oe_next;
};

struct plown {
	pthread_mutex_t o_mu;
	struct own_ent *o_hash[OWN_HASH];
	plown_send_fn o_send;
	void *o_arg;
	struct plown_stats o_st;
};

struct plown *plown_create(plown_send_fn send, void *arg)
{
	struct plown *o = calloc(1, sizeof(*o));

	if (!o)
		return NULL;
	pthread_mutex_init(&o->o_mu, NULL);
	o->o_send = send;
	o->o_arg = arg;
	return o;
}

static size_t own_bucket(uint64_t ino)
{
	return (size_t)((ino * 0x9e3779b97f4a7c15ull) >> 40) & (OWN_HASH - 1);
}

static struct own_ent *own_find(struct plown *o, uint64_t ino)
{
	struct own_ent *oe;

	for (oe = o->o_hash[own_bucket(ino)]; oe; oe = oe->oe_next)
		if (oe->oe_ino == ino)
			return oe;
	return NULL;
}

static void own_unlink(struct plown *o, struct own_ent *oe)
{
	struct own_ent **pp;

	for (pp = &o->o_hash[own_bucket(oe->oe_ino)]; *pp; pp = &(*pp)->oe_next) {
		if (*pp == oe) {
			*pp = oe->oe_next;
			break;
		}
	}
	plr_free_all(&oe->oe_locks);
	free(oe);
	o->o_st.owned--;
}

void plown_clear(struct plown *o)
{
	pthread_mutex_lock(&o->o_mu);
	for (size_t b = 0; b < OWN_HASH; b++)
		while (o->o_hash[b])
			own_unlink(o, o->o_hash[b]);
	pthread_mutex_unlock(&o->o_mu);
}

void plown_destroy(struct plown *o)
{
	if (!o)
		return;
	plown_clear(o);
	pthread_mutex_destroy(&o->o_mu);
	free(o);
}

static void frame(uint8_t *f, uint32_t op, uint64_t ino, const struct pl_lock *lk)
{
	uint8_t *p = f + LKP_HDR;

	lkp_hdr(f, LKP_PLOCK, 0, LKP_PLOCK_LEN);
	memset(p, 0, LKP_PLOCK_LEN);
	lkp_put32(p, op);
	lkp_put64(p + 8, ino);
	if (lk) {
		lkp_put32(p + 4, lk->pk_flock ? LKP_PLF_FLOCK : 0);
		lkp_put64(p + 16, lk->pk_owner);
		lkp_put64(p + 24, lk->pk_start);
		lkp_put64(p + 32, lk->pk_end);
		lkp_put32(p + 40, lk->pk_type);
		lkp_put32(p + 44, lk->pk_pid);
	}
}

/*
 * Under o_mu (3): write oe's locks and OWNEND, and forget oe.  A failed
 * write means the connection is gone: lockd frees the node's locks after
 * its recovery, as for every node that vanishes.
 */
static void give_back(struct plown *o, struct own_ent *oe)
{
	const size_t fl = LKP_HDR + LKP_PLOCK_LEN;
	struct ld_list *p, *t;
	size_t n = 1, i = 0;
	uint8_t *buf;

	list_for_each_safe(p, t, &oe->oe_locks)
		n++;
	buf = malloc(n * fl);
	if (buf) {
		list_for_each_safe(p, t, &oe->oe_locks)
			frame(buf + fl * i++, LKP_PL_OWNLK, oe->oe_ino,
			      container_of(p, struct pl_lock, pk_link));
		frame(buf + fl * i, LKP_PL_OWNEND, oe->oe_ino, NULL);
		o->o_send(o->o_arg, buf, n * fl);
		free(buf);
	} else {
		/* cannot tell lockd: it keeps holding requests for this
		 * inode, so the node must not go on as if it gave it back */
		uint8_t one[LKP_HDR + LKP_PLOCK_LEN];
		list_for_each_safe(p, t, &oe->oe_locks) {
			frame(one, LKP_PL_OWNLK, oe->oe_ino, container_of(p, struct pl_lock, pk_link));
			if (o->o_send(o->o_arg, one, sizeof(one)))
				break;
		}
		frame(one, LKP_PL_OWNEND, oe->oe_ino, NULL);
		o->o_send(o->o_arg, one, sizeof(one));
	}
	o->o_st.gives++;
	own_unlink(o, oe);
}

static void req_lock(const struct lk_plock *pl, struct pl_lock *want)
{
	memset(want, 0, sizeof(*want));
	want->pk_owner = pl->pl_owner;
	want->pk_start = pl->pl_start;
	want->pk_end = pl->pl_end;
	want->pk_pid = pl->pl_pid;
	want->pk_type = (uint8_t)pl->pl_type;
	want->pk_flock = !!(pl->pl_flags & LK_PL_FLOCK);
}

int plown_op(struct plown *o, int op, struct lk_plock *pl, int *local)
{
	struct pl_lock want, *lk;
	struct own_ent *oe;
	int err = 0;

	pthread_mutex_lock(&o->o_mu);
	oe = own_find(o, pl->pl_ino);
	*local = !!oe;
	if (!oe)
		goto out;
	oe->oe_used = lkp_now_ns();
	o->o_st.local++;
	req_lock(pl, &want);
	switch (op) {
	case LK_PL_GET:
		lk = plr_first_conflict(&oe->oe_locks, &want);
		pl->pl_flags &= ~LK_PL_MINE;
		pl->pl_type = LK_PL_UN;
		if (lk) {
			pl->pl_type = lk->pk_type;
			pl->pl_start = lk->pk_start;
			pl->pl_end = lk->pk_end;
			pl->pl_pid = lk->pk_pid;
			pl->pl_flags |= LK_PL_MINE;
		}
		break;
	case LK_PL_CLOSE:
		plr_drop_owner(&oe->oe_locks, NULL, pl->pl_owner, 0);
		break;
	case LK_PL_SET:
		if (want.pk_flock && want.pk_type != PL_UN && plr_holds(&oe->oe_locks, &want))
			break; /* already held in that mode */
		if (want.pk_type == PL_UN || want.pk_flock) {
			/* as lockd: a flock request first lets go of the
			 * owner's flock lock (flock(2) on Linux) */
			err = plr_apply(&oe->oe_locks, &want, PL_UN);
			if (err || want.pk_type == PL_UN)
				break;
		}
		if (plr_first_conflict(&oe->oe_locks, &want))
			err = -EAGAIN;
		else
			err = plr_apply(&oe->oe_locks, &want, want.pk_type);
		break;
	default:
		err = -EINVAL;
	}
out:
	pthread_mutex_unlock(&o->o_mu);
	return err;
}

int plown_wait(struct plown *o, const struct lk_plock *pl, int *local)
{
	struct pl_lock want;
	struct own_ent *oe;
	int err = 0;

	pthread_mutex_lock(&o->o_mu);
	oe = own_find(o, pl->pl_ino);
	*local = 0;
	if (!oe)
		goto out;
	oe->oe_used = lkp_now_ns();
	req_lock(pl, &want);
	if (want.pk_flock && plr_holds(&oe->oe_locks, &want)) {
		*local = 1;
		goto out;
	}
	if (want.pk_flock && (err = plr_apply(&oe->oe_locks, &want, PL_UN))) {
		*local = 1;
		goto out;
	}
	if (plr_first_conflict(&oe->oe_locks, &want)) {
		give_back(o, oe); /* (2) */
		goto out;
	}
	*local = 1;
	o->o_st.local++;
	err = plr_apply(&oe->oe_locks, &want, want.pk_type);
out:
	pthread_mutex_unlock(&o->o_mu);
	return err;
}

void plown_grant(struct plown *o, uint64_t ino)
{
	struct own_ent *oe;

	pthread_mutex_lock(&o->o_mu);
	if (own_find(o, ino))
		goto out; /* lockd owns it until OWNEND: cannot grant it twice */
	oe = calloc(1, sizeof(*oe));
	if (!oe) {
		/* no memory to own it: give it straight back (it has no locks) */
		uint8_t one[LKP_HDR + LKP_PLOCK_LEN];
		frame(one, LKP_PL_OWNEND, ino, NULL);
		o->o_send(o->o_arg, one, sizeof(one));
		goto out;
	}
	oe->oe_ino = ino;
	oe->oe_used = lkp_now_ns();
	list_init(&oe->oe_locks);
	oe->oe_next = o->o_hash[own_bucket(ino)];
	o->o_hash[own_bucket(ino)] = oe;
	o->o_st.owned++;
	o->o_st.grants++;
out:
	pthread_mutex_unlock(&o->o_mu);
}

void plown_drop(struct plown *o, uint64_t ino)
{
	struct own_ent *oe;

	pthread_mutex_lock(&o->o_mu);
	oe = own_find(o, ino);
	if (oe)
		give_back(o, oe);
	/* else: given back already (idle, or a request that had to wait);
	 * that give-back answers this DROP (1) */
	pthread_mutex_unlock(&o->o_mu);
}

void plown_idle(struct plown *o)
{
	uint64_t now = lkp_now_ns();

	pthread_mutex_lock(&o->o_mu);
	for (size_t b = 0; b < OWN_HASH; b++) {
		struct own_ent *oe = o->o_hash[b], *next;
		for (; oe; oe = next) {
			next = oe->oe_next;
			if (list_empty(&oe->oe_locks) && now - oe->oe_used >= PLOWN_IDLE_NS)
				give_back(o, oe);
		}
	}
	pthread_mutex_unlock(&o->o_mu);
}

void plown_get_stats(struct plown *o, struct plown_stats *st)
{
	pthread_mutex_lock(&o->o_mu);
	*st = o->o_st;
	pthread_mutex_unlock(&o->o_mu);
}

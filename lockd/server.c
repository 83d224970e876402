/*
 * server.c - shoal-lockd's core: one epoll loop serving every connection,
 * the membership (nodes, journal ids, leases, recovery) and the lock table
 * (resources with grant, convert and wait queues).  docs/PROTOCOL.md is the
 * contract; this file implements it, with conn.c (listeners, connections,
 * frame input and output; lk_srv.h holds the objects both share).
 *
 * Objects: a connection (struct ld_conn) is a socket; after a JOIN it is
 * bound to a node (struct ld_node), which outlives it until LEAVE, or until
 * its lease expires and a RECOVERY_DONE for its journal arrives.  A node
 * owns its locks (struct ld_lock), one per resource (struct ld_res).
 *
 * Node states (nd_state):
 *
 *   (JOIN) --> LIVE --LEAVE--> (freed, locks released)          node_leave
 *               |  \--socket closed--> LIVE without connection   conn_close
 *               |        (queued requests cancelled, locks kept)
 *               +--no heartbeat for lease_ms--> DEAD             node_die
 *                   (journal locks and the mount lock released,
 *                    other granted locks kept as zombies, LVBs
 *                    written under PW/EX invalidated, RECOVER
 *                    broadcast)
 *   DEAD, with --fence-cmd: fencing (journal lock kept, no RECOVER) until
 *                    the command exits 0 (then as without), or gives up
 *                    after fence_tries (stays so)                  fence_check
 *   DEAD --RECOVERY_DONE(jid) from any live node--> (freed)      do_recovery_done
 *   DEAD --JOIN under its name--> stays DEAD beside the new LIVE node of
 *                    the same name and jid, until RECOVERY_DONE(jid)
 *
 * Lock states: granted (lk_gr >= 0, on rs_granted), converting (granted and
 * on rs_convert with lk_rq), waiting (lk_gr < 0, on rs_wait with lk_rq).
 *
 * Invariants:
 *  (1) every granted mode on a resource is compatible with every other
 *      granted mode on it (checked by res_check in debug builds);
 *  (2) a node has at most one lock per resource, and at most one request
 *      (convert or wait) in flight on it;
 *  (3) conversions are served before waiting requests, FIFO in each queue;
 *      a new request is granted at once only if both queues are empty and it
 *      is compatible with the granted locks (NL: always);
 *  (4) a BAST for wanted mode m goes to a holder at most once until that
 *      holder's granted mode changes (lk_bast_sent);
 *  (5) a resource with no locks is freed (its LVB with it); a new one's LVB
 *      is zero and invalid until a PW/EX holder writes it;
 *  (6) a node is DEAD only after lease_ms without a heartbeat; the journal
 *      id and name of a DEAD node are not given to anyone before its
 *      RECOVERY_DONE, except to the same node coming back under its name
 *      with JOIN jflags SELF_RECOVER: its mount holds that journal's lock
 *      while it replays the journal, before it takes any other lock but
 *      the mount lock, and then sends RECOVERY_DONE itself (a name has at
 *      most one live node; its dead ones all have its jid, and one
 *      RECOVERY_DONE frees them all; if it LEAVEs first, RECOVER goes to
 *      every live node again).  RECOVERY_DONE(jid) counts only from a node
 *      that holds the journal lock (9, jid) in EX, under which it replayed;
 *  (6a) a table serves one filesystem: once a JOIN has named its UUID
 *      (ld_uuid), a JOIN naming another is refused;
 *  (6b) every jid is below ld_njournals, the journal count of the table's
 *      disk, fixed by its first JOIN: a JOIN that names another count is
 *      refused (a jid beyond the disk's journals could never be replayed);
 *  (7) input is never trusted: a bad frame closes that connection with one
 *      log line and changes no other state;
 *  (8) one thread runs the loop; nothing here is shared with another thread
 *      except ld_wakefd (lockd_wake_stop);
 *  (9) with a fence command, a dead node's journal lock stays held (a
 *      zombie) and no RECOVER for it is sent, nor its name given back,
 *      until the command exited 0 for it: nobody can replay its journal
 *      before then.  A non-zero exit or a timeout is logged and retried,
 *      after lease, 2 lease, 4 lease... (at most 60 s), fence_tries times
 *      in all; then recovery of that journal waits for the operator
 *      (docs/PROTOCOL.md "Fencing").
 */
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <syslog.h>
#include <unistd.h>

#include "lk_fence.h"
#include "lk_list.h"
#include "lk_plock.h"
#include "lk_proto.h"
#include "lk_server.h"
#include "lk_srv.h"
#include "lk_crypto.h"
#include "shoal/lockd.h"

/* --- logging -------------------------------------------------------------- */

void ld_log(struct lockd *d, int prio, const char *fmt, ...)
{
	char line[512];
	va_list ap;

	if (prio == LOG_DEBUG && !d->ld_cfg.verbose)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (d->ld_cfg.log)
		d->ld_cfg.log(d->ld_cfg.log_arg, prio, line);
	else if (d->ld_cfg.use_syslog)
		syslog(prio, "%s", line);
	else
		fprintf(stderr, "shoal-lockd: %s\n", line);
}


uint8_t *ld_node_frame(struct lockd *d, struct ld_node *nd, uint16_t type, uint32_t seq,
		       size_t plen)
{
	if (nd->nd_state != ND_LIVE || !nd->nd_conn)
		return NULL;
	return out_frame(d, nd->nd_conn, type, seq, plen);
}

const char *ld_node_name(const struct ld_node *nd)
{
	return nd->nd_name;
}

int ld_node_plown(const struct ld_node *nd)
{
	return nd->nd_plown;
}

size_t lockd_plock_count(struct lockd *d)
{
	return plock_count(d->ld_plock);
}

static void send_result(struct lockd *d, struct ld_conn *cn, uint32_t seq, int err)
{
	uint8_t *p;

	if (!cn || !(p = out_frame(d, cn, LKP_RESULT, seq, LKP_RESULT_LEN)))
		return;
	lkp_put32(p, (uint32_t)(err < 0 ? -err : err));
	lkp_put32(p + 4, 0);
}

static void send_recover(struct lockd *d, struct ld_conn *cn, struct ld_node *dead)
{
	size_t nl = strlen(dead->nd_name);
	uint8_t *p = out_frame(d, cn, LKP_RECOVER, 0, LKP_RECOVER_FIXED + nl);

	if (!p)
		return;
	lkp_put32(p, dead->nd_jid);
	p[4] = (uint8_t)nl;
	p[5] = p[6] = p[7] = 0;
	memcpy(p + 8, dead->nd_name, nl);
}

/* --- lock table -------------------------------------------------------------- */

static size_t res_hash(struct lockd *d, uint32_t type, uint64_t number)
{
	uint64_t h = (number ^ ((uint64_t)type << 56)) * 0x9e3779b97f4a7c15ull;

	return (size_t)(h >> 20) & d->ld_hmask;
}

static struct ld_res *res_find(struct lockd *d, uint32_t type, uint64_t number)
{
	struct ld_res *rs;

	for (rs = d->ld_hash[res_hash(d, type, number)]; rs; rs = rs->rs_hnext)
		if (rs->rs_type == type && rs->rs_number == number)
			return rs;
	return NULL;
}

static void res_grow(struct lockd *d)
{
	size_t n = (d->ld_hmask + 1) * 2, i;
	struct ld_res **h = calloc(n, sizeof(*h)), **old = d->ld_hash, *rs, *next;
	size_t omask = d->ld_hmask;

	if (!h)
		return; /* longer chains, still correct */
	d->ld_hash = h;
	d->ld_hmask = n - 1;
	for (i = 0; i <= omask; i++) {
		for (rs = old[i]; rs; rs = next) {
			size_t b = res_hash(d, rs->rs_type, rs->rs_number);
			next = rs->rs_hnext;
			rs->rs_hnext = h[b];
			h[b] = rs;
		}
	}
	free(old);
}

static struct ld_res *res_get(struct lockd *d, uint32_t type, uint64_t number)
{
	struct ld_res *rs = res_find(d, type, number);
	size_t b;

	if (rs)
		return rs;
	rs = calloc(1, sizeof(*rs));
	if (!rs)
		return NULL;
	rs->rs_type = type;
	rs->rs_number = number;
	rs->rs_lvb_invalid = 1; /* nobody wrote it yet */
	list_init(&rs->rs_granted);
	list_init(&rs->rs_convert);
	list_init(&rs->rs_wait);
	b = res_hash(d, type, number);
	rs->rs_hnext = d->ld_hash[b];
	d->ld_hash[b] = rs;
	if (++d->ld_nres > 2 * (d->ld_hmask + 1))
		res_grow(d);
	return rs;
}

/* Free rs if nothing refers to it any more (invariant 5). */
static void res_put(struct lockd *d, struct ld_res *rs)
{
	struct ld_res **pp;

	if (!list_empty(&rs->rs_granted) || !list_empty(&rs->rs_convert) ||
	    !list_empty(&rs->rs_wait))
		return;
	for (pp = &d->ld_hash[res_hash(d, rs->rs_type, rs->rs_number)]; *pp; pp = &(*pp)->rs_hnext) {
		if (*pp == rs) {
			*pp = rs->rs_hnext;
			break;
		}
	}
	d->ld_nres--;
	free(rs);
}

#ifndef NDEBUG
static void res_check(struct ld_res *rs)
{
	struct ld_list *a, *b, *t1, *t2;

	list_for_each_safe(a, t1, &rs->rs_granted) {
		struct ld_lock *x = container_of(a, struct ld_lock, lk_glink);
		assert(x->lk_gr >= 0 && x->lk_gr < LK_NMODES);
		list_for_each_safe(b, t2, &rs->rs_granted) {
			struct ld_lock *y = container_of(b, struct ld_lock, lk_glink);
			assert(x == y || lk_compatible(x->lk_gr, y->lk_gr));
		}
	}
}
#else
static inline void res_check(struct ld_res *rs)
{
	(void)rs;
}
#endif

static struct ld_lock *res_lock_of(struct ld_res *rs, struct ld_node *nd)
{
	struct ld_list *p, *t;

	list_for_each_safe(p, t, &rs->rs_granted) {
		struct ld_lock *lk = container_of(p, struct ld_lock, lk_glink);
		if (lk->lk_node == nd)
			return lk;
	}
	list_for_each_safe(p, t, &rs->rs_wait) {
		struct ld_lock *lk = container_of(p, struct ld_lock, lk_qlink);
		if (lk->lk_node == nd)
			return lk;
	}
	return NULL;
}

/* mode is compatible with every granted lock except self */
static int res_compatible(struct ld_res *rs, struct ld_lock *self, int mode)
{
	struct ld_list *p, *t;

	list_for_each_safe(p, t, &rs->rs_granted) {
		struct ld_lock *lk = container_of(p, struct ld_lock, lk_glink);
		if (lk != self && !lk_compatible(lk->lk_gr, mode))
			return 0;
	}
	return 1;
}

static void send_bast(struct lockd *d, struct ld_lock *holder, int wanted)
{
	struct ld_node *nd = holder->lk_node;
	uint8_t *p;

	if (holder->lk_bast_sent & (1u << wanted))
		return;
	if (nd->nd_state != ND_LIVE)
		return; /* a zombie: nobody to tell */
	holder->lk_bast_sent |= 1u << wanted;
	if (!nd->nd_conn || !(p = out_frame(d, nd->nd_conn, LKP_BAST, 0, LKP_BAST_LEN)))
		return;
	lkp_put32(p, holder->lk_res->rs_type);
	lkp_put64(p + 4, holder->lk_res->rs_number);
	lkp_put32(p + 12, (uint32_t)wanted);
}

/* BAST every granted lock but self that is in the way of mode (invariant 4). */
static void bast_blockers(struct lockd *d, struct ld_res *rs, struct ld_lock *self, int mode)
{
	struct ld_list *p, *t;

	list_for_each_safe(p, t, &rs->rs_granted) {
		struct ld_lock *lk = container_of(p, struct ld_lock, lk_glink);
		if (lk != self && !lk_compatible(lk->lk_gr, mode))
			send_bast(d, lk, mode);
	}
}

static void send_grant(struct lockd *d, struct ld_lock *lk, uint32_t seq)
{
	struct ld_node *nd = lk->lk_node;
	struct ld_res *rs = lk->lk_res;
	uint8_t *p;

	if (nd->nd_state != ND_LIVE || !nd->nd_conn)
		return;
	p = out_frame(d, nd->nd_conn, LKP_GRANT, seq, LKP_GRANT_LEN);
	if (!p)
		return;
	lkp_put32(p, (uint32_t)lk->lk_gr);
	lkp_put32(p + 4, rs->rs_lvb_invalid ? LKF_LVB_INVALID : 0);
	memcpy(p + 8, rs->rs_lvb, LK_LVB_LEN);
}

static void lock_set_granted(struct ld_lock *lk, int mode)
{
	if (lk->lk_gr < 0)
		list_add_tail(&lk->lk_glink, &lk->lk_res->rs_granted);
	if (lk->lk_gr != mode)
		lk->lk_bast_sent = 0;
	lk->lk_gr = mode;
}

/* Grant what the queues allow (invariant 3), then BAST for whoever still waits. */
static void res_grant_pending(struct lockd *d, struct ld_res *rs)
{
	struct ld_list *p, *t;

	list_for_each_safe(p, t, &rs->rs_convert) {
		struct ld_lock *lk = container_of(p, struct ld_lock, lk_qlink);
		if (!res_compatible(rs, lk, lk->lk_rq))
			break;
		list_del(&lk->lk_qlink);
		lock_set_granted(lk, lk->lk_rq);
		lk->lk_rq = -1;
		send_grant(d, lk, lk->lk_seq);
	}
	if (list_empty(&rs->rs_convert)) {
		list_for_each_safe(p, t, &rs->rs_wait) {
			struct ld_lock *lk = container_of(p, struct ld_lock, lk_qlink);
			if (!res_compatible(rs, lk, lk->lk_rq))
				break;
			list_del(&lk->lk_qlink);
			lock_set_granted(lk, lk->lk_rq);
			lk->lk_rq = -1;
			send_grant(d, lk, lk->lk_seq);
		}
	}
	list_for_each_safe(p, t, &rs->rs_convert) {
		struct ld_lock *lk = container_of(p, struct ld_lock, lk_qlink);
		bast_blockers(d, rs, lk, lk->lk_rq);
	}
	list_for_each_safe(p, t, &rs->rs_wait) {
		struct ld_lock *lk = container_of(p, struct ld_lock, lk_qlink);
		bast_blockers(d, rs, lk, lk->lk_rq);
	}
	res_check(rs);
}

/* Take back the request in flight on lk (if any); a lock never granted is freed. */
static int lock_cancel(struct lockd *d, struct ld_lock *lk, int reply)
{
	if (lk->lk_rq < 0)
		return 0;
	list_del(&lk->lk_qlink);
	lk->lk_rq = -1;
	if (reply && lk->lk_node->nd_state == ND_LIVE)
		send_result(d, lk->lk_node->nd_conn, lk->lk_seq, -ECANCELED);
	if (lk->lk_gr < 0) {
		list_del(&lk->lk_nlink);
		free(lk);
		return 1;
	}
	return 0;
}

static void lock_free(struct ld_lock *lk)
{
	if (lk->lk_rq >= 0)
		list_del(&lk->lk_qlink);
	if (lk->lk_gr >= 0)
		list_del(&lk->lk_glink);
	list_del(&lk->lk_nlink);
	free(lk);
}

static void do_lock(struct lockd *d, struct ld_node *nd, uint32_t seq, const uint8_t *p)
{
	uint32_t type = lkp_get32(p);
	uint64_t number = lkp_get64(p + 4);
	uint32_t mode = lkp_get32(p + 12), flags = lkp_get32(p + 16);
	struct ld_conn *cn = nd->nd_conn;
	struct ld_res *rs;
	struct ld_lock *lk;

	if (mode >= LK_NMODES || (flags & ~LKP_LF_MASK)) {
		send_result(d, cn, seq, -EINVAL);
		return;
	}
	rs = res_get(d, type, number);
	if (!rs) {
		send_result(d, cn, seq, -ENOMEM);
		return;
	}
	lk = res_lock_of(rs, nd);
	if (lk && lk->lk_rq >= 0) {
		/* invariant 2: the client broke its promise */
		ld_log(d, LOG_WARNING, "node %s: second request in flight on %u/%llu", nd->nd_name,
		       type, (unsigned long long)number);
		send_result(d, cn, seq, -EBUSY);
		return;
	}
	if (!lk) {
		int now = mode == LK_NL || (list_empty(&rs->rs_convert) &&
					     list_empty(&rs->rs_wait) &&
					     res_compatible(rs, NULL, (int)mode));

		if (!now && (flags & LKF_TRY)) {
			if (flags & LKF_TRY_1CB)
				bast_blockers(d, rs, NULL, (int)mode);
			send_result(d, cn, seq, -EAGAIN);
			res_put(d, rs);
			return;
		}
		lk = calloc(1, sizeof(*lk));
		if (!lk) {
			send_result(d, cn, seq, -ENOMEM);
			res_put(d, rs);
			return;
		}
		lk->lk_res = rs;
		lk->lk_node = nd;
		lk->lk_gr = -1;
		lk->lk_rq = -1;
		list_init(&lk->lk_glink);
		list_init(&lk->lk_qlink);
		list_add_tail(&lk->lk_nlink, &nd->nd_locks);
		if (now) {
			lock_set_granted(lk, (int)mode);
			send_grant(d, lk, seq);
			return;
		}
		lk->lk_rq = (int)mode;
		lk->lk_seq = seq;
		list_add_tail(&lk->lk_qlink, &rs->rs_wait);
		bast_blockers(d, rs, lk, (int)mode);
		return;
	}

	/* a conversion of lk, granted lk_gr */
	if ((flags & LKP_LF_LVB) && lk->lk_gr >= LK_PW && (int)mode < lk->lk_gr) {
		memcpy(rs->rs_lvb, p + 20, LK_LVB_LEN);
		rs->rs_lvb_invalid = 0;
	}
	if (lk_is_down(lk->lk_gr, (int)mode)) {
		int changed = lk->lk_gr != (int)mode;
		lock_set_granted(lk, (int)mode);
		send_grant(d, lk, seq);
		if (changed)
			res_grant_pending(d, rs);
		return;
	}
	if (list_empty(&rs->rs_convert) && res_compatible(rs, lk, (int)mode)) {
		lock_set_granted(lk, (int)mode);
		send_grant(d, lk, seq);
		return;
	}
	if (flags & LKF_TRY) {
		if (flags & LKF_TRY_1CB)
			bast_blockers(d, rs, lk, (int)mode);
		send_result(d, cn, seq, -EAGAIN);
		return;
	}
	/* Conversion deadlock: a blocker is itself converting to a mode our
	 * granted mode is in the way of; neither could ever move. */
	{
		struct ld_list *q, *t;
		list_for_each_safe(q, t, &rs->rs_convert) {
			struct ld_lock *o = container_of(q, struct ld_lock, lk_qlink);
			if (!lk_compatible(o->lk_gr, (int)mode) && !lk_compatible(lk->lk_gr, o->lk_rq)) {
				send_result(d, cn, seq, -EDEADLK);
				bast_blockers(d, rs, lk, (int)mode);
				return;
			}
		}
	}
	lk->lk_rq = (int)mode;
	lk->lk_seq = seq;
	list_add_tail(&lk->lk_qlink, &rs->rs_convert);
	bast_blockers(d, rs, lk, (int)mode);
}

static void do_unlock(struct lockd *d, struct ld_node *nd, const uint8_t *p)
{
	uint32_t type = lkp_get32(p);
	uint64_t number = lkp_get64(p + 4);
	uint32_t flags = lkp_get32(p + 16);
	struct ld_res *rs = res_find(d, type, number);
	struct ld_lock *lk = rs ? res_lock_of(rs, nd) : NULL;

	if (!lk) {
		ld_log(d, LOG_DEBUG, "node %s: unlock of %u/%llu it does not hold", nd->nd_name, type,
		       (unsigned long long)number);
		return;
	}
	if (lock_cancel(d, lk, 1))
		goto out; /* a waiting request, never granted: gone */
	if ((flags & LKP_LF_LVB) && lk->lk_gr >= LK_PW) {
		memcpy(rs->rs_lvb, p + 20, LK_LVB_LEN);
		rs->rs_lvb_invalid = 0;
	}
	lock_free(lk);
out:
	res_grant_pending(d, rs);
	res_put(d, rs);
}

/* --- membership ------------------------------------------------------------------ */

/* The node called name that is (dead 0) live, or (dead 1) dead; a name has
 * at most one live node, and dead ones only of the same jid (6). */
static struct ld_node *node_by_name(struct lockd *d, const char *name, int dead)
{
	struct ld_list *p, *t;

	list_for_each_safe(p, t, &d->ld_nodes) {
		struct ld_node *nd = container_of(p, struct ld_node, nd_link);
		if (!strcmp(nd->nd_name, name) && (nd->nd_state == ND_DEAD) == dead)
			return nd;
	}
	return NULL;
}

/* A dead node of journal jid (6: there may be several). */
static struct ld_node *node_dead_of_jid(struct lockd *d, uint32_t jid)
{
	struct ld_list *p, *t;

	list_for_each_safe(p, t, &d->ld_nodes) {
		struct ld_node *nd = container_of(p, struct ld_node, nd_link);
		if (nd->nd_jid == jid && nd->nd_state == ND_DEAD)
			return nd;
	}
	return NULL;
}

/* A node, live or dead, of journal jid. */
static struct ld_node *node_by_jid(struct lockd *d, uint32_t jid)
{
	struct ld_list *p, *t;

	list_for_each_safe(p, t, &d->ld_nodes) {
		struct ld_node *nd = container_of(p, struct ld_node, nd_link);
		if (nd->nd_jid == jid)
			return nd;
	}
	return NULL;
}

static void hist_remember(struct lockd *d, const char *name, uint32_t jid)
{
	struct ld_list *p, *t;
	struct ld_hist *h;

	list_for_each_safe(p, t, &d->ld_hist) {
		h = container_of(p, struct ld_hist, hs_link);
		if (!strcmp(h->hs_name, name) || h->hs_jid == jid) {
			list_del(&h->hs_link);
			free(h);
			d->ld_nhist--;
		}
	}
	if (d->ld_nhist >= LD_HIST_MAX) {
		h = container_of(d->ld_hist.next, struct ld_hist, hs_link);
		list_del(&h->hs_link);
		free(h);
		d->ld_nhist--;
	}
	h = calloc(1, sizeof(*h));
	if (!h)
		return;
	snprintf(h->hs_name, sizeof(h->hs_name), "%s", name);
	h->hs_jid = jid;
	list_add_tail(&h->hs_link, &d->ld_hist);
	d->ld_nhist++;
}

/* Release every lock of nd (LEAVE, RECOVERY_DONE), then free nd. */
static void node_free(struct lockd *d, struct ld_node *nd)
{
	if (nd->nd_fence == FN_RUN)
		fence_kill(nd->nd_fence_pid);
	plock_node_free(d, d->ld_plock, nd);
	while (!list_empty(&nd->nd_locks)) {
		struct ld_lock *lk = container_of(nd->nd_locks.next, struct ld_lock, lk_nlink);
		struct ld_res *rs = lk->lk_res;

		lock_free(lk);
		res_grant_pending(d, rs);
		res_put(d, rs);
	}
	hist_remember(d, nd->nd_name, nd->nd_jid);
	if (nd->nd_conn)
		nd->nd_conn->cn_node = NULL;
	list_del(&nd->nd_link);
	free(nd);
}

/* Every live node learns of every pending recovery. */
static void broadcast_recover(struct lockd *d)
{
	struct ld_list *p, *t, *q, *u;

	list_for_each_safe(p, t, &d->ld_nodes) {
		struct ld_node *live = container_of(p, struct ld_node, nd_link);
		if (live->nd_state != ND_LIVE || !live->nd_conn)
			continue;
		list_for_each_safe(q, u, &d->ld_nodes) {
			struct ld_node *dead = container_of(q, struct ld_node, nd_link);
			if (dead->nd_state == ND_DEAD && dead->nd_fence == FN_DONE)
				send_recover(d, live->nd_conn, dead);
		}
	}
}

/* The socket of a live node went away: cancel its queued requests. */
void node_disconnected(struct lockd *d, struct ld_node *nd)
{
	struct ld_list *p, *t;

	nd->nd_conn = NULL;
	plock_node_disconnected(d, d->ld_plock, nd);
	list_for_each_safe(p, t, &nd->nd_locks) {
		struct ld_lock *lk = container_of(p, struct ld_lock, lk_nlink);
		struct ld_res *rs = lk->lk_res;

		if (lk->lk_rq < 0)
			continue;
		lock_cancel(d, lk, 0);
		res_grant_pending(d, rs);
		res_put(d, rs);
	}
}

static void node_die(struct lockd *d, struct ld_node *nd, uint64_t silent_ns)
{
	struct ld_list *p, *t;
	int zombies = 0;

	nd->nd_state = ND_DEAD;
	ld_log(d, LOG_WARNING, "node %s (jid %u) is dead: no heartbeat for %llu ms; journal %u needs recovery",
	       nd->nd_name, nd->nd_jid, (unsigned long long)(silent_ns / NS_PER_MS), nd->nd_jid);
	if (d->ld_cfg.fence_cmd) {
		nd->nd_fence = FN_WAIT; /* its first try, at once (9) */
		nd->nd_fence_at = d->ld_now;
	}
	if (nd->nd_conn)
		conn_close(d, nd->nd_conn, NULL);
	plock_node_disconnected(d, d->ld_plock, nd); /* its waits go; its plocks stay (zombies) */
	list_for_each_safe(p, t, &nd->nd_locks) {
		struct ld_lock *lk = container_of(p, struct ld_lock, lk_nlink);
		struct ld_res *rs = lk->lk_res;

		if (lock_cancel(d, lk, 0))
			goto regrant;
		if ((rs->rs_type == GL_JOURNAL_TYPE && nd->nd_fence == FN_DONE) ||
		    (rs->rs_type == GL_NONDISK_TYPE && rs->rs_number == GL_MOUNT_NUMBER)) {
			lock_free(lk);
			goto regrant;
		}
		if (lk->lk_gr >= LK_PW)
			rs->rs_lvb_invalid = 1;
		zombies++;
regrant:
		res_grant_pending(d, rs);
		res_put(d, rs);
	}
	ld_log(d, LOG_DEBUG, "node %s: %d locks kept as zombies until recovery", nd->nd_name, zombies);
	broadcast_recover(d);
}

static void do_recovery_done(struct lockd *d, struct ld_node *by, uint32_t seq, uint32_t jid)
{
	struct ld_list *p, *t;
	int n = 0;
	struct ld_res *jrs = res_find(d, GL_JOURNAL_TYPE, jid);
	struct ld_lock *jlk = jrs ? res_lock_of(jrs, by) : NULL;

	/* only the node that replayed the journal can say so: it does it
	 * under the journal's lock, in EX */
	if (!jlk || jlk->lk_gr != LK_EX) {
		ld_log(d, LOG_WARNING, "node %s: recovery done for jid %u without holding its journal "
				       "lock in EX: refused", by->nd_name, jid);
		send_result(d, by->nd_conn, seq, -EPERM);
		return;
	}

	/* every dead node of the journal: a node that came back under its
	 * name and died again before replaying it left two (6) */
	list_for_each_safe(p, t, &d->ld_nodes) {
		struct ld_node *nd = container_of(p, struct ld_node, nd_link);
		if (nd->nd_jid != jid || nd->nd_state != ND_DEAD)
			continue;
		ld_log(d, LOG_NOTICE, "journal %u of node %s recovered by node %s; its locks are released",
		       jid, nd->nd_name, by->nd_name);
		node_free(d, nd);
		n++;
	}
	if (!n) /* every mount sends it for its own journal: quiet then */
		ld_log(d, by->nd_jid == jid ? LOG_DEBUG : LOG_NOTICE,
		       "node %s: recovery done for jid %u, which needs none", by->nd_name, jid);
	send_result(d, by->nd_conn, seq, n ? 0 : -ENOENT);
}

static void refuse(struct lockd *d, struct ld_conn *cn, int err, int retry, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

static void refuse(struct lockd *d, struct ld_conn *cn, int err, int retry, const char *fmt, ...)
{
	char reason[LKP_REASON_MAX + 1];
	size_t rl;
	va_list ap;
	uint8_t *p;

	va_start(ap, fmt);
	vsnprintf(reason, sizeof(reason), fmt, ap);
	va_end(ap);
	ld_log(d, LOG_NOTICE, "refused %s: %s", cn->cn_peer, reason);
	rl = strlen(reason);
	p = out_frame(d, cn, LKP_REFUSE, 0, LKP_REFUSE_FIXED + rl);
	if (!p)
		return;
	lkp_put32(p, (uint32_t)err);
	lkp_put32(p + 4, retry ? LKP_RF_RETRY : 0);
	lkp_put16(p + 8, (uint16_t)rl);
	lkp_put16(p + 10, 0);
	memcpy(p + 12, reason, rl);
	cn->cn_close_after_flush = 1;
}

/* A UUID as 8-4-4-4-12 hex digits (out: 37 bytes). */
static void uuid_str(const uint8_t *u, char *out)
{
	static const char hexd[] = "0123456789abcdef";
	char *o = out;

	for (int i = 0; i < LKP_UUID_LEN; i++) {
		if (i == 4 || i == 6 || i == 8 || i == 10)
			*o++ = '-';
		*o++ = hexd[u[i] >> 4];
		*o++ = hexd[u[i] & 15];
	}
	*o = 0;
}

static void do_join(struct lockd *d, struct ld_conn *cn, const uint8_t *p, size_t plen)
{
	uint32_t version = lkp_get32(p), njournals = lkp_get32(p + 4);
	const uint8_t *mac = p + 8, *uuid = NULL;
	size_t nl = p[40], tl = p[41];
	uint16_t jflags = lkp_get16(p + 42);
	size_t ul = jflags & LKP_JF_UUID ? LKP_UUID_LEN : 0;
	size_t cl = jflags & LKP_JF_SEAL ? LKP_NONCE : 0;
	char name[LK_NAME_MAX + 1], table[LK_TABLE_MAX + 1];
	struct ld_node *nd, *back;
	struct ld_list *q, *t;
	uint32_t jid = UINT32_MAX;
	uint8_t *o;

	if (version != LKP_VERSION) {
		refuse(d, cn, EPROTO, 0, "protocol version %u not supported (lockd speaks %u)", version,
		       LKP_VERSION);
		return;
	}
	if (LKP_JOIN_FIXED + nl + tl + ul + cl != plen || !lkp_valid_name((const char *)p + 44, nl) ||
	    !lkp_valid_table((const char *)p + 44 + nl, tl) ||
	    (jflags & ~(LKP_JF_SELF_RECOVER | LKP_JF_UUID | LKP_JF_SEAL | LKP_JF_PLOWN))) {
		ld_log(d, LOG_WARNING, "%s: malformed JOIN (bad name or table); closing", cn->cn_peer);
		conn_close(d, cn, NULL);
		return;
	}
	memcpy(name, p + 44, nl);
	name[nl] = 0;
	memcpy(table, p + 44 + nl, tl);
	table[tl] = 0;
	if (ul)
		uuid = p + 44 + nl + tl;
	if (d->ld_secret && !cl) {
		refuse(d, cn, EPROTO, 0, "node %s: its client does not seal lock traffic (shoal "
					 "before 2026-12-05): upgrade shoal on that node", name);
		return;
	}
	if (!d->ld_secret && cl) {
		refuse(d, cn, EPROTO, 0, "node %s: asks for sealed lock traffic, but this lockd "
					 "has no secret", name);
		return;
	}
	if (d->ld_secret) {
		/* the MAC covers the CHALLENGE as the client saw it and the
		 * whole JOIN (its own MAC field zeroed) */
		uint8_t want[LK_HMAC_LEN], join[LKP_MAX_FRAME];

		memcpy(join, p, plen);
		memset(join + 8, 0, LK_HMAC_LEN);
		if (lk_hmac_sha256(d->ld_secret, d->ld_secretlen, cn->cn_chal, LKP_CHALLENGE_LEN,
				   join, plen, want)) {
			refuse(d, cn, EIO, 1, "node %s: cannot check its secret (HMAC-SHA256 in "
					      "libcrypto failed)", name);
			return;
		}
		if (lk_memcmp_ct(want, mac, LK_HMAC_LEN)) {
			refuse(d, cn, EACCES, 0, "node %s: authentication failed (bad secret)", name);
			return;
		}
		if (lk_session_init(&cn->cn_sess, d->ld_secret, d->ld_secretlen, cn->cn_chal + 12,
				    p + 44 + nl + tl + ul, name, nl, 1)) {
			refuse(d, cn, EIO, 1, "node %s: cannot derive its session keys (HKDF-SHA256 "
					      "in libcrypto failed)", name);
			return;
		}
	}
	if (d->ld_table[0] && strcmp(d->ld_table, table)) {
		refuse(d, cn, EINVAL, 0, "serves table %s, not %s", d->ld_table, table);
		return;
	}
	/* one table, one filesystem: a node of another one would take locks
	 * that name other blocks, and a dead node's locks would be released
	 * once a journal on the wrong disk was replayed */
	if (uuid && d->ld_uuid_set && memcmp(uuid, d->ld_uuid, LKP_UUID_LEN)) {
		char want[37], got[37];
		uuid_str(d->ld_uuid, want);
		uuid_str(uuid, got);
		refuse(d, cn, EINVAL, 0, "table %s belongs to filesystem %s, not %s (node %s: "
					 "another filesystem with the same lock table?)", table, want,
		       got, name);
		return;
	}
	/* one table, one disk, one journal count: a jid beyond the disk's
	 * journals could never be replayed by another node (its locks would
	 * stay forever) */
	if (d->ld_njournals && njournals != d->ld_njournals) {
		refuse(d, cn, EINVAL, 0, "table %s has %u journals, not %u (node %s: a disk "
					 "that is not the table's?)", table, d->ld_njournals, njournals, name);
		return;
	}
	nd = node_by_name(d, name, 0);
	if (nd && nd->nd_conn) {
		refuse(d, cn, EADDRINUSE, 0, "node name %s already in use", name);
		return;
	}
	if (nd) {
		refuse(d, cn, EAGAIN, 1, "node name %s is still in its lease (connection lost); "
					 "retry later", name);
		return;
	}
	/* a dead node coming back gets its journal, pending recovery: its
	 * mount replays it before taking any other lock and sends
	 * RECOVERY_DONE itself (6) */
	back = node_by_name(d, name, 1);
	list_for_each_safe(q, t, &d->ld_nodes) { /* (9) */
		struct ld_node *f = container_of(q, struct ld_node, nd_link);
		if (f->nd_state == ND_DEAD && f->nd_fence != FN_DONE && !strcmp(f->nd_name, name)) {
			refuse(d, cn, EAGAIN, 1, "node name %s is being fenced (--fence-cmd)%s; retry later",
			       name, f->nd_fence == FN_FAILED ? ", which failed" : "");
			return;
		}
	}
	if (back && !(jflags & LKP_JF_SELF_RECOVER)) {
		/* a client that would not replay its own journal */
		refuse(d, cn, EAGAIN, 1, "node name %s is pending recovery; retry later", name);
		return;
	}
	if (back)
		jid = back->nd_jid;
	else
		list_for_each_safe(q, t, &d->ld_hist) {
			struct ld_hist *h = container_of(q, struct ld_hist, hs_link);
			if (!strcmp(h->hs_name, name) && h->hs_jid < njournals &&
			    !node_by_jid(d, h->hs_jid))
				jid = h->hs_jid;
		}
	for (uint32_t j = 0; jid == UINT32_MAX && j < njournals; j++)
		if (!node_by_jid(d, j))
			jid = j;
	if (jid == UINT32_MAX) {
		refuse(d, cn, ENOSPC, 0, "all %u journals in use", njournals);
		return;
	}
	nd = calloc(1, sizeof(*nd));
	if (!nd) {
		refuse(d, cn, ENOMEM, 1, "out of memory");
		return;
	}
	if (!d->ld_table[0]) {
		snprintf(d->ld_table, sizeof(d->ld_table), "%s", table);
		ld_log(d, LOG_NOTICE, "serving table %s", table);
	}
	if (!d->ld_njournals) {
		d->ld_njournals = njournals;
		ld_log(d, LOG_NOTICE, "table %s has %u journals", table, njournals);
	}
	if (uuid && !d->ld_uuid_set) {
		char u[37];
		memcpy(d->ld_uuid, uuid, LKP_UUID_LEN);
		d->ld_uuid_set = 1;
		uuid_str(uuid, u);
		ld_log(d, LOG_NOTICE, "table %s is filesystem %s", table, u);
	}
	memcpy(nd->nd_name, name, nl + 1);
	nd->nd_jid = jid;
	nd->nd_state = ND_LIVE;
	nd->nd_last_hb = d->ld_now;
	nd->nd_conn = cn;
	nd->nd_plown = !!(jflags & LKP_JF_PLOWN);
	list_init(&nd->nd_locks);
	list_add_tail(&nd->nd_link, &d->ld_nodes);
	cn->cn_node = nd;
	cn->cn_state = CN_JOINED;
	ld_log(d, LOG_NOTICE, "node %s joined as jid %u (%s)%s", name, jid, cn->cn_peer,
	       back ? "; it is back from the dead and replays its own journal" : "");
	snprintf(cn->cn_peer + strlen(cn->cn_peer), sizeof(cn->cn_peer) - strlen(cn->cn_peer),
		 " node %s", name);
	if (d->ld_secret) {
		/* from JOIN_OK on, both ways: what was queued before goes plain */
		cn->cn_sealed = 1;
		cn->cn_sealoff = cn->cn_outlen;
	}
	o = out_frame(d, cn, LKP_JOIN_OK, 0, LKP_JOIN_OK_LEN);
	if (!o)
		return;
	lkp_put32(o, jid);
	lkp_put32(o + 4, (uint32_t)(d->ld_lease_ns / NS_PER_MS));
	list_for_each_safe(q, t, &d->ld_nodes) {
		struct ld_node *dead = container_of(q, struct ld_node, nd_link);
		if (dead->nd_state == ND_DEAD && dead->nd_fence == FN_DONE)
			send_recover(d, cn, dead);
	}
	if (nd->nd_last_hb + d->ld_lease_ns < d->ld_next_check)
		d->ld_next_check = nd->nd_last_hb + d->ld_lease_ns;
}

static int expect_len(struct lockd *d, struct ld_conn *cn, unsigned type, size_t plen, size_t want)
{
	if (plen == want)
		return 1;
	ld_log(d, LOG_WARNING, "%s: %s of %zu bytes (want %zu); closing", cn->cn_peer,
	       lkp_type_name(type), plen, want);
	conn_close(d, cn, NULL);
	return 0;
}

void conn_msg(struct lockd *d, struct ld_conn *cn, const uint8_t *f, size_t flen)
{
	unsigned type = lkp_get16(f + 4);
	uint32_t seq = lkp_get32(f + 8);
	const uint8_t *p = f + LKP_HDR;
	size_t plen = flen - LKP_HDR;
	struct ld_node *nd = cn->cn_node;
	uint32_t jid;

	if (lkp_get16(f + 6)) {
		ld_log(d, LOG_WARNING, "%s: nonzero header flags; closing", cn->cn_peer);
		conn_close(d, cn, NULL);
		return;
	}
	if (cn->cn_state == CN_HELLO) {
		if (cn->cn_close_after_flush)
			return; /* refused: ignore the rest */
		if (type != LKP_JOIN || plen < LKP_JOIN_FIXED) {
			ld_log(d, LOG_WARNING, "%s: %s (type %u, %zu bytes) before JOIN; closing",
			       cn->cn_peer, lkp_type_name(type), type, plen);
			conn_close(d, cn, NULL);
			return;
		}
		do_join(d, cn, p, plen);
		return;
	}
	if (!nd || cn->cn_close_after_flush)
		return; /* leaving: ignore the rest */
	switch (type) {
	case LKP_LOCK:
		if (expect_len(d, cn, type, plen, LKP_LOCK_LEN))
			do_lock(d, nd, seq, p);
		break;
	case LKP_UNLOCK:
		if (expect_len(d, cn, type, plen, LKP_LOCK_LEN))
			do_unlock(d, nd, p);
		break;
	case LKP_PLOCK:
		if (expect_len(d, cn, type, plen, LKP_PLOCK_LEN))
			plock_msg(d, d->ld_plock, nd, seq, p);
		break;
	case LKP_HEARTBEAT:
		if (!expect_len(d, cn, type, plen, 0))
			break;
		nd->nd_last_hb = d->ld_now;
		out_frame(d, cn, LKP_HEARTBEAT_ACK, seq, 0);
		break;
	case LKP_RECOVERY_DONE:
		if (expect_len(d, cn, type, plen, LKP_RECOVERY_DONE_LEN))
			do_recovery_done(d, nd, seq, lkp_get32(p));
		break;
	case LKP_LEAVE:
		if (!expect_len(d, cn, type, plen, 0))
			break;
		ld_log(d, LOG_NOTICE, "node %s (jid %u) left", nd->nd_name, nd->nd_jid);
		cn->cn_node = NULL;
		nd->nd_conn = NULL;
		jid = nd->nd_jid;
		node_free(d, nd);
		send_result(d, cn, seq, 0);
		cn->cn_close_after_flush = 1;
		/* it came back under the name of a dead node and left before
		 * replaying that journal (its mount failed): the live nodes,
		 * which could not take its journal lock then, are asked again */
		if (node_dead_of_jid(d, jid))
			broadcast_recover(d);
		break;
	default:
		ld_log(d, LOG_WARNING, "%s: unexpected message %s (type %u); closing", cn->cn_peer,
		       lkp_type_name(type), type);
		conn_close(d, cn, NULL);
		break;
	}
}

/* (9): the fence command succeeded: its journal lock goes, RECOVER goes out. */
static void fence_done(struct lockd *d, struct ld_node *nd)
{
	struct ld_list *p, *t;

	nd->nd_fence = FN_DONE;
	list_for_each_safe(p, t, &nd->nd_locks) {
		struct ld_lock *lk = container_of(p, struct ld_lock, lk_nlink);
		struct ld_res *rs = lk->lk_res;

		if (rs->rs_type != GL_JOURNAL_TYPE)
			continue;
		lock_free(lk);
		res_grant_pending(d, rs);
		res_put(d, rs);
	}
	broadcast_recover(d);
}

/* (9): start, poll, time out or retry nd's fence command; *next is
 * lowered to when it needs looking at again. */
static void fence_check(struct lockd *d, struct ld_node *nd, uint64_t *next)
{
	uint32_t tries = d->ld_cfg.fence_tries ? d->ld_cfg.fence_tries : 5;
	uint64_t tmo = (d->ld_cfg.fence_timeout_ms ? d->ld_cfg.fence_timeout_ms : 60000) * NS_PER_MS;
	uint64_t now = d->ld_now, delay;
	char why[64];
	int st, rc;

	if (nd->nd_fence == FN_WAIT && now >= nd->nd_fence_at) {
		nd->nd_fence_tries++;
		rc = fence_spawn(d->ld_cfg.fence_cmd, nd->nd_name, nd->nd_jid, &nd->nd_fence_pid);
		if (rc == 0) {
			nd->nd_fence = FN_RUN;
			nd->nd_fence_at = now + tmo;
			ld_log(d, LOG_NOTICE, "node %s (jid %u): fence command started (try %u of %u, pid %d)",
			       nd->nd_name, nd->nd_jid, nd->nd_fence_tries, tries, (int)nd->nd_fence_pid);
		} else {
			snprintf(why, sizeof(why), "cannot start: %s", strerror(-rc));
			goto failed;
		}
	}
	if (nd->nd_fence == FN_RUN) {
		rc = fence_poll(nd->nd_fence_pid, &st);
		if (rc == 0 && now < nd->nd_fence_at) {
			if (now + 20 * NS_PER_MS < *next)
				*next = now + 20 * NS_PER_MS;
			return;
		}
		if (rc == 0) {
			fence_kill(nd->nd_fence_pid);
			snprintf(why, sizeof(why), "timed out after %llu ms",
				 (unsigned long long)(tmo / NS_PER_MS));
			goto failed;
		}
		if (rc < 0) {
			snprintf(why, sizeof(why), "cannot wait for it: %s", strerror(-rc));
			goto failed;
		}
		if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
			ld_log(d, LOG_NOTICE, "node %s (jid %u) fenced: journal %u may be recovered",
			       nd->nd_name, nd->nd_jid, nd->nd_jid);
			fence_done(d, nd);
			return;
		}
		if (WIFEXITED(st))
			snprintf(why, sizeof(why), "exit status %d", WEXITSTATUS(st));
		else
			snprintf(why, sizeof(why), "killed by signal %d", WTERMSIG(st));
		goto failed;
	}
	if (nd->nd_fence == FN_WAIT && nd->nd_fence_at < *next)
		*next = nd->nd_fence_at;
	return;
failed:
	if (nd->nd_fence_tries >= tries) {
		nd->nd_fence = FN_FAILED;
		ld_log(d, LOG_ERR, "node %s (jid %u): fence command failed (%s), %u tries: journal %u "
				   "is not recovered and the locks it held stay held; fence the node by "
				   "hand, then restart shoal-lockd",
		       nd->nd_name, nd->nd_jid, why, tries, nd->nd_jid);
		return;
	}
	delay = d->ld_lease_ns << (nd->nd_fence_tries - 1 < 16 ? nd->nd_fence_tries - 1 : 16);
	if (delay > 60000 * NS_PER_MS)
		delay = 60000 * NS_PER_MS;
	nd->nd_fence = FN_WAIT;
	nd->nd_fence_at = now + delay;
	ld_log(d, LOG_WARNING, "node %s (jid %u): fence command failed (%s); recovery waits, "
			       "next try in %llu ms", nd->nd_name, nd->nd_jid, why,
	       (unsigned long long)(delay / NS_PER_MS));
	if (nd->nd_fence_at < *next)
		*next = nd->nd_fence_at;
}

/* Handshake deadlines, leases, paused listeners and fence commands; sets
 * ld_next_check. */
static void check_timers(struct lockd *d)
{
	uint64_t now = d->ld_now, next = now + 60000 * NS_PER_MS;
	struct ld_list *p, *t;

	list_for_each_safe(p, t, &d->ld_conns) {
		struct ld_conn *cn = container_of(p, struct ld_conn, cn_link);
		if (cn->cn_state != CN_HELLO)
			continue;
		if (cn->cn_deadline <= now) {
			char why[80];
			snprintf(why, sizeof(why), "handshake not completed within %llu ms",
				 (unsigned long long)(d->ld_hs_ns / NS_PER_MS));
			conn_close(d, cn, why);
		} else if (cn->cn_deadline < next) {
			next = cn->cn_deadline;
		}
	}
	for (int li = 0; li < d->ld_nlis; li++)
		accept_resume(d, &d->ld_lis[li], &next);
	list_for_each_safe(p, t, &d->ld_nodes) {
		struct ld_node *nd = container_of(p, struct ld_node, nd_link);
		uint64_t exp = nd->nd_last_hb + d->ld_lease_ns;
		if (nd->nd_state == ND_LIVE && now > exp)
			node_die(d, nd, now - nd->nd_last_hb);
		else if (nd->nd_state == ND_LIVE && exp + 1 < next)
			next = exp + 1;
		if (nd->nd_state == ND_DEAD && nd->nd_fence != FN_DONE)
			fence_check(d, nd, &next);
	}
	d->ld_next_check = next;
}

int lockd_run(struct lockd *d)
{
	struct epoll_event evs[64];

	while (!__atomic_load_n(&d->ld_stop, __ATOMIC_ACQUIRE)) {
		int timeout, n, i;

		d->ld_now = lkp_now_ns();
		if (d->ld_now >= d->ld_next_check) {
			check_timers(d);
			flush_dirty(d);
			free_closed(d);
		}
		timeout = (int)((d->ld_next_check - d->ld_now + NS_PER_MS - 1) / NS_PER_MS);
		n = epoll_wait(d->ld_epfd, evs, 64, timeout);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			ld_log(d, LOG_ERR, "epoll_wait: %s", strerror(errno));
			return -errno;
		}
		d->ld_now = lkp_now_ns();
		for (i = 0; i < n; i++) {
			void *ptr = evs[i].data.ptr;
			int li;

			if (ptr == d) {
				uint64_t v;
				if (read(d->ld_wakefd, &v, sizeof(v)) < 0 && errno != EAGAIN)
					ld_log(d, LOG_ERR, "eventfd: %s", strerror(errno));
				continue;
			}
			for (li = 0; li < d->ld_nlis; li++)
				if (ptr == &d->ld_lis[li])
					break;
			if (li < d->ld_nlis) {
				conn_accept(d, &d->ld_lis[li]);
				continue;
			}
			struct ld_conn *cn = ptr;
			if (cn->cn_state == CN_CLOSED)
				continue;
			if (evs[i].events & EPOLLOUT)
				conn_flush(d, cn);
			if (cn->cn_state != CN_CLOSED && (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)))
				conn_read(d, cn);
		}
		flush_dirty(d);
		free_closed(d);
	}
	return 0;
}

void lockd_wake_stop(struct lockd *d)
{
	uint64_t one = 1;

	__atomic_store_n(&d->ld_stop, 1, __ATOMIC_RELEASE);
	if (write(d->ld_wakefd, &one, sizeof(one)) < 0) {
		/* the flag alone stops the loop at its next turn */
	}
}

int lockd_create(const struct lockd_config *cfg, struct lockd **out, char *err, size_t errlen)
{
	struct lockd *d;
	struct epoll_event ev;
	int rc, i;

	*out = NULL;
	if (cfg->nlisten < 1 || cfg->nlisten > 8) {
		snprintf(err, errlen, "need 1 to 8 listen addresses");
		return -EINVAL;
	}
	if (cfg->table && !lkp_valid_table(cfg->table, strlen(cfg->table))) {
		snprintf(err, errlen, "bad table '%s' (want CLUSTER:FSNAME)", cfg->table);
		return -EINVAL;
	}
	d = calloc(1, sizeof(*d));
	if (!d) {
		snprintf(err, errlen, "%s", strerror(ENOMEM));
		return -ENOMEM;
	}
	d->ld_cfg = *cfg;
	d->ld_epfd = d->ld_wakefd = -1;
	if (cfg->fence_cmd) { /* its own copy: the loop uses it long after */
		d->ld_cfg.fence_cmd = d->ld_fence_cmd = strdup(cfg->fence_cmd);
		if (!d->ld_fence_cmd) {
			free(d);
			snprintf(err, errlen, "%s", strerror(ENOMEM));
			return -ENOMEM;
		}
	}
	list_init(&d->ld_conns);
	list_init(&d->ld_closed);
	list_init(&d->ld_dirty);
	list_init(&d->ld_nodes);
	list_init(&d->ld_hist);
	d->ld_lease_ns = (cfg->lease_ms ? cfg->lease_ms : 8000) * NS_PER_MS;
	d->ld_hs_ns = (cfg->handshake_ms ? cfg->handshake_ms : 5000) * NS_PER_MS;
	if (cfg->table)
		snprintf(d->ld_table, sizeof(d->ld_table), "%s", cfg->table);
	d->ld_plock = plock_create();
	if (!d->ld_plock) {
		rc = -ENOMEM;
		snprintf(err, errlen, "%s", strerror(ENOMEM));
		goto out_free;
	}
	d->ld_hmask = 1023;
	d->ld_hash = calloc(d->ld_hmask + 1, sizeof(*d->ld_hash));
	if (!d->ld_hash) {
		rc = -ENOMEM;
		snprintf(err, errlen, "%s", strerror(ENOMEM));
		goto out_free;
	}
	if (cfg->secret_file) {
		rc = lkp_read_secret(cfg->secret_file, &d->ld_secret, &d->ld_secretlen, err, errlen);
		if (rc)
			goto out_free;
	}
	d->ld_epfd = epoll_create1(EPOLL_CLOEXEC);
	d->ld_wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (d->ld_epfd < 0 || d->ld_wakefd < 0) {
		rc = -errno;
		snprintf(err, errlen, "epoll/eventfd: %s", strerror(errno));
		goto out_free;
	}
	ev.events = EPOLLIN;
	ev.data.ptr = d;
	if (epoll_ctl(d->ld_epfd, EPOLL_CTL_ADD, d->ld_wakefd, &ev)) {
		rc = -errno;
		snprintf(err, errlen, "epoll_ctl: %s", strerror(errno));
		goto out_free;
	}
	for (i = 0; i < cfg->nlisten; i++) {
		rc = listen_one(d, cfg->listen[i], err, errlen);
		if (rc)
			goto out_free;
	}
	d->ld_next_check = lkp_now_ns();
	*out = d;
	return 0;
out_free:
	lockd_destroy(d);
	return rc;
}

void lockd_destroy(struct lockd *d)
{
	struct ld_list *p, *t;

	if (!d)
		return;
	list_for_each_safe(p, t, &d->ld_conns) {
		struct ld_conn *cn = container_of(p, struct ld_conn, cn_link);
		if (cn->cn_node)
			cn->cn_node->nd_conn = NULL;
		cn->cn_node = NULL;
		conn_close(d, cn, NULL);
	}
	free_closed(d);
	while (!list_empty(&d->ld_nodes)) {
		struct ld_node *nd = container_of(d->ld_nodes.next, struct ld_node, nd_link);
		nd->nd_conn = NULL;
		node_free(d, nd);
	}
	if (d->ld_plock)
		plock_destroy(d->ld_plock);
	while (!list_empty(&d->ld_hist)) {
		struct ld_hist *h = container_of(d->ld_hist.next, struct ld_hist, hs_link);
		list_del(&h->hs_link);
		free(h);
	}
	free(d->ld_fence_cmd);
	for (int i = 0; i < d->ld_nlis; i++) {
		if (d->ld_lis[i].li_unix)
			unlink(d->ld_lis[i].li_path);
		close(d->ld_lis[i].li_fd);
	}
	if (d->ld_epfd >= 0)
		close(d->ld_epfd);
	if (d->ld_wakefd >= 0)
		close(d->ld_wakefd);
	if (d->ld_secret) {
		memset(d->ld_secret, 0, d->ld_secretlen);
		free(d->ld_secret);
	}
	free(d->ld_hash);
	free(d);
}

static void *lockd_thread(void *arg)
{
	lockd_run(arg);
	return NULL;
}

int lockd_start(const struct lockd_config *cfg, struct lockd **out, char *err, size_t errlen)
{
	struct lockd *d;
	int rc = lockd_create(cfg, &d, err, errlen);

	if (rc)
		return rc;
	rc = pthread_create(&d->ld_thread, NULL, lockd_thread, d);
	if (rc) {
		snprintf(err, errlen, "pthread_create: %s", strerror(rc));
		lockd_destroy(d);
		return -rc;
	}
	d->ld_threaded = 1;
	*out = d;
	return 0;
}

void lockd_stop(struct lockd *d)
{
	if (!d)
		return;
	if (d->ld_threaded) {
		lockd_wake_stop(d);
		pthread_join(d->ld_thread, NULL);
	}
	lockd_destroy(d);
}

const char *lockd_listen_addr(struct lockd *d, int i)
{
	return i >= 0 && i < d->ld_nlis ? d->ld_lis[i].li_addr : NULL;
}

/*
 * client.c - the lockd client library (lkc_*): one connection per node,
 * a receiver thread (replies, BASTs, RECOVER) and a timer thread
 * (heartbeats every lease/4, self-fencing).  docs/PROTOCOL.md.
 *
 * Connection states (c_state, under c_lock):
 *
 *   lkc_connect --> UP --fence, broken socket, lkc_withdraw--> DOWN --lkc_close--> freed
 *                    \------------------lkc_close (LEAVE)----------/
 *
 * Invariants:
 *  (1) every request in flight is on c_reqs until its reply (GRANT or
 *      RESULT with its seq) arrives or the connection goes DOWN; then it is
 *      completed exactly once (-ENOTCONN when DOWN) and its waiter woken;
 *  (2) frames are written whole under c_send_lock, so concurrent callers
 *      never interleave bytes, and one client's messages reach lockd in the
 *      order their writes returned (lkc_unlock then lkc_lock stays ordered);
 *  (3) fencing: c_hb_ok holds the time the newest answered heartbeat (or
 *      JOIN) was handed to the sending side (at or before its send); the timer thread goes DOWN and calls
 *      ops->fenced no later than c_hb_ok + lease/2, and lockd declares the
 *      node dead no earlier than the receipt of that heartbeat + lease;
 *  (4) ops->fenced is called at most once, never after lkc_close began;
 *  (5) the lease: ops->lease hears, at the JOIN and at every answered
 *      heartbeat, the CLOCK_BOOTTIME time until which the node may write:
 *      that heartbeat's send time + lease/2 (the fencing deadline of (3),
 *      on a clock that also counts while the process is stopped or the
 *      machine suspended); it never moves back;
 *  (6) with a secret, the node joins only a lockd that proves it knows the
 *      secret (its JOIN_OK opens with the session keys), and every frame
 *      after that is sealed: frames are sealed under c_send_lock in the
 *      order they are written (the counter is the nonce), and a frame from
 *      lockd that fails to open takes the connection DOWN (a fence).
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "lk_proto.h"
#include "lk_crypto.h"
#include "lk_plown.h"
#include "shoal/lockd.h"

static uint64_t boot_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#define LKC_HANDSHAKE_MS 5000
#define LKC_LEAVE_MS 2000
#define LKC_RXBUF 65536
#define LKC_HB_RING 16
#define NS_PER_MS 1000000ull
#define LKC_SPIN_NS 50000ull /* default of c_spin_ns, see spin_wait */

enum { LKC_UP, LKC_DOWN };

struct lkc_req {
	uint32_t rq_seq;
	int rq_done;
	int rq_result;	    /* granted mode or -errno */
	uint32_t rq_flags;  /* GRANT flags */
	uint8_t *rq_lvb;    /* where a GRANT's LVB goes, or NULL */
	struct lk_plock *rq_pl;	     /* where a PLOCK_REPLY's lock goes, or NULL */
	lkc_plock_done_fn rq_done_fn; /* an asynchronous request (lkc_plock_wait): freed when done */
	void *rq_done_arg;
	pthread_cond_t rq_cond;
	struct lkc_req *rq_next;
};

struct lkc {
	int c_fd;
	char c_addr[256];
	char c_node[LK_NAME_MAX + 1];
	uint32_t c_jid;
	uint64_t c_lease_ns;
	const struct lkc_ops *c_ops;
	void *c_arg;

	pthread_mutex_t c_send_lock; /* invariant 2 */

	pthread_mutex_t c_lock;	     /* protects everything below */
	pthread_cond_t c_timer_cond;
	int c_state;
	int c_closing;
	int c_fenced;		     /* ops->fenced called or suppressed */
	char c_why[160];	     /* why DOWN */
	uint32_t c_seq;
	struct lkc_req *c_reqs;	     /* requests in flight */
	uint64_t c_hb_sent;	     /* send time of the newest heartbeat */
	uint64_t c_hb_ok;	     /* invariant 3 */
	struct {
		uint32_t seq;
		uint64_t sent;
		uint64_t sent_boot; /* the same moment on CLOCK_BOOTTIME (5) */
	} c_hb_ring[LKC_HB_RING];
	uint64_t c_lease_until;	     /* (5): the newest deadline handed to ops->lease */
	unsigned c_hb_next;
	struct lkc_stats c_stats;

	pthread_t c_rx, c_timer;
	int c_rx_started, c_timer_started;
	int c_spinning;		     /* atomic: a caller polls for its reply */
	uint32_t c_hb_pend;	     /* atomic: heartbeat seq for the next sender */
	uint64_t c_spin_ns;	     /* how long it polls: $SHOAL_LKC_SPIN_US, default 50 */
	int c_plock;		     /* lockd serves PLOCK (CHALLENGE cflags), set before UP */
	struct plown *c_own;	     /* the plock spaces this node owns; NULL: it owns none */
	int c_sealed;		     /* with a secret: every frame after JOIN is sealed (6) */
	struct lk_session c_sess;    /* ls_tx under c_send_lock, ls_rx: the receiver's */
};

static void timespec_at(struct timespec *ts, uint64_t mono_ns)
{
	ts->tv_sec = (time_t)(mono_ns / 1000000000ull);
	ts->tv_nsec = (long)(mono_ns % 1000000000ull);
}

static int write_all(int fd, const uint8_t *buf, size_t len)
{
	while (len) {
		ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -ENOTCONN;
		}
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/*
 * Under c_send_lock: seal the heartbeat hb (if not 0) and the frames in
 * buf (len bytes of whole frames) in order (6), and write them, in one
 * write when they fit in 8 KiB (a batch of LKC_BATCH_MAX LOCKs does).
 * A frame libcrypto cannot seal leaves the counters out of step with
 * lockd's: the socket is shut (the receiver then goes DOWN) and the
 * caller gets -ENOTCONN.
 */
static int send_sealed_frames(struct lkc *c, uint32_t hb, const uint8_t *buf, size_t len)
{
	uint8_t out[8192];
	size_t n = 0, off = 0;
	int rc;

	if (hb) {
		lkp_hdr(out, LKP_HEARTBEAT, hb, 0);
		n = lk_seal_frame(&c->c_sess, out, 0);
		if (!n)
			return -EIO;
	}
	while (off + 4 <= len) {
		size_t flen = 4 + lkp_get32(buf + off), sl;

		if (flen < LKP_HDR || off + flen > len || flen + LK_TAG_LEN > sizeof(out))
			return -EINVAL; /* our own frames: cannot happen */
		if (n + flen + LK_TAG_LEN > sizeof(out)) {
			rc = write_all(c->c_fd, out, n);
			if (rc)
				return rc;
			n = 0;
		}
		memcpy(out + n, buf + off, flen);
		sl = lk_seal_frame(&c->c_sess, out + n, flen - LKP_HDR);
		if (!sl)
			return -EIO;
		n += sl;
		off += flen;
	}
	return n ? write_all(c->c_fd, out, n) : 0;
}

static int send_sealed(struct lkc *c, uint32_t hb, const uint8_t *buf, size_t len)
{
	int rc = send_sealed_frames(c, hb, buf, len);

	if (rc == -EIO)
		shutdown(c->c_fd, SHUT_RDWR);
	return rc == -EIO ? -ENOTCONN : rc;
}

/*
 * Write one whole frame (invariant 2), preceded by the heartbeat the timer
 * thread left in c_hb_pend, if any, in the same write: a busy client's
 * heartbeats never wait for the send lock (invariant 3).  -ENOTCONN once
 * the socket is gone.
 */
static int send_all(struct lkc *c, const uint8_t *buf, size_t len)
{
	uint8_t both[LKP_HDR + LKC_BATCH_MAX * (LKP_HDR + LKP_LOCK_LEN)];
	uint32_t hb;
	int rc;

	pthread_mutex_lock(&c->c_send_lock);
	hb = __atomic_exchange_n(&c->c_hb_pend, 0, __ATOMIC_ACQ_REL);
	if (c->c_sealed) {
		rc = send_sealed(c, hb, buf, len);
	} else if (hb && len <= sizeof(both) - LKP_HDR) {
		lkp_hdr(both, LKP_HEARTBEAT, hb, 0);
		memcpy(both + LKP_HDR, buf, len);
		rc = write_all(c->c_fd, both, LKP_HDR + len);
	} else {
		rc = 0;
		if (hb) {
			lkp_hdr(both, LKP_HEARTBEAT, hb, 0);
			rc = write_all(c->c_fd, both, LKP_HDR);
		}
		if (!rc)
			rc = write_all(c->c_fd, buf, len);
	}
	pthread_mutex_unlock(&c->c_send_lock);
	return rc;
}

/* plown's way to write its give-backs (lk_plown.h). */
static int own_send(void *arg, const uint8_t *buf, size_t len)
{
	return send_all(arg, buf, len);
}

/* Under c_lock: go DOWN, fail every request in flight (invariant 1). */
static void go_down(struct lkc *c, const char *why)
{
	struct lkc_req *rq;

	if (c->c_state == LKC_DOWN)
		return;
	__atomic_store_n(&c->c_state, LKC_DOWN, __ATOMIC_RELAXED);
	snprintf(c->c_why, sizeof(c->c_why), "%s", why);
	shutdown(c->c_fd, SHUT_RDWR);
	if (c->c_own)
		plown_clear(c->c_own); /* lock order: c_lock, then plown's */
	while ((rq = c->c_reqs)) {
		c->c_reqs = rq->rq_next;
		if (rq->rq_done_fn) { /* lockd.h: done runs with c_lock held here */
			rq->rq_done_fn(rq->rq_done_arg, -ENOTCONN);
			free(rq);
			continue;
		}
		rq->rq_result = -ENOTCONN;
		__atomic_store_n(&rq->rq_done, 1, __ATOMIC_RELEASE);
		pthread_cond_signal(&rq->rq_cond);
	}
	pthread_cond_signal(&c->c_timer_cond);
}

/* Under c_lock: take the request with seq off c_reqs. */
static struct lkc_req *req_take(struct lkc *c, uint32_t seq)
{
	struct lkc_req **pp;

	for (pp = &c->c_reqs; *pp; pp = &(*pp)->rq_next) {
		if ((*pp)->rq_seq == seq) {
			struct lkc_req *rq = *pp;
			*pp = rq->rq_next;
			return rq;
		}
	}
	return NULL;
}

/*
 * A reply usually comes back within tens of microseconds: one thread at a
 * time polls for it that long before sleeping on its condition variable,
 * which saves the receiver thread a futex wake and this one a context
 * switch per request.  The caller takes c_lock afterwards either way, so
 * the receiver is done with rq before rq leaves scope.
 */
static void spin_wait(struct lkc *c, struct lkc_req *rq)
{
	uint64_t end;

	if (!c->c_spin_ns || __atomic_exchange_n(&c->c_spinning, 1, __ATOMIC_ACQUIRE))
		return;
	end = lkp_now_ns() + c->c_spin_ns;
	do {
		for (int i = 0; i < 64; i++) {
			if (__atomic_load_n(&rq->rq_done, __ATOMIC_ACQUIRE))
				goto out;
			__builtin_ia32_pause();
		}
	} while (lkp_now_ns() < end);
out:
	__atomic_store_n(&c->c_spinning, 0, __ATOMIC_RELEASE);
}

/*
 * Send n request frames (frames: n of flen bytes each, back to back) in one
 * write and wait for every reply; rqs[i] is frame i's request (rq_lvb set
 * by the caller).  lockd answers them in the order sent (PROTOCOL.md), so
 * the last reply is the one to poll for.  timeout_ns 0: forever; else the
 * requests still unanswered then fail with -ETIMEDOUT.  Returns 0 (each
 * result in rq_result) or -ENOTCONN when the connection is gone.
 */
static int request_many(struct lkc *c, uint8_t *frames, size_t flen, struct lkc_req *rqs,
			size_t n, uint64_t timeout_ns)
{
	uint64_t t0;
	int rc;

	for (size_t i = 0; i < n; i++) {
		if (timeout_ns) {
			pthread_condattr_t ca;
			pthread_condattr_init(&ca);
			pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
			pthread_cond_init(&rqs[i].rq_cond, &ca);
			pthread_condattr_destroy(&ca);
		} else {
			pthread_cond_init(&rqs[i].rq_cond, NULL);
		}
	}
	pthread_mutex_lock(&c->c_lock);
	if (c->c_state != LKC_UP) {
		pthread_mutex_unlock(&c->c_lock);
		for (size_t i = 0; i < n; i++)
			pthread_cond_destroy(&rqs[i].rq_cond);
		return -ENOTCONN;
	}
	for (size_t i = 0; i < n; i++) {
		struct lkc_req *rq = &rqs[i];
		rq->rq_seq = ++c->c_seq ? c->c_seq : ++c->c_seq; /* seq 0 is for unsolicited frames */
		lkp_put32(frames + i * flen + 8, rq->rq_seq);
		rq->rq_done = 0;
		rq->rq_next = c->c_reqs;
		c->c_reqs = rq; /* cppcheck-suppress autoVariables ; taken off before return */
	}
	c->c_stats.requests += n;
	pthread_mutex_unlock(&c->c_lock);

	t0 = lkp_now_ns();
	rc = send_all(c, frames, n * flen);
	if (!rc && !timeout_ns)
		spin_wait(c, &rqs[n - 1]);
	pthread_mutex_lock(&c->c_lock);
	for (size_t i = 0; i < n; i++) {
		struct lkc_req *rq = &rqs[i];
		if (rc && !rq->rq_done) {
			req_take(c, rq->rq_seq);
			rq->rq_done = 1;
			rq->rq_result = rc;
		}
		if (timeout_ns) {
			struct timespec ts;
			timespec_at(&ts, t0 + timeout_ns);
			while (!rq->rq_done)
				if (pthread_cond_timedwait(&rq->rq_cond, &c->c_lock, &ts) == ETIMEDOUT)
					break;
			if (!rq->rq_done) {
				req_take(c, rq->rq_seq);
				rq->rq_done = 1;
				rq->rq_result = -ETIMEDOUT;
			}
		} else {
			while (!rq->rq_done)
				pthread_cond_wait(&rq->rq_cond, &c->c_lock);
		}
		if (rq->rq_result >= 0) {
			uint64_t rtt = lkp_now_ns() - t0;
			c->c_stats.rtt_ns_total += rtt;
			if (rtt > c->c_stats.rtt_ns_max)
				c->c_stats.rtt_ns_max = rtt;
		}
	}
	pthread_mutex_unlock(&c->c_lock);
	for (size_t i = 0; i < n; i++)
		pthread_cond_destroy(&rqs[i].rq_cond);
	return 0;
}

/* Send a request frame and wait for its reply; timeout_ns 0: forever. */
static int request(struct lkc *c, uint8_t *frame, size_t len, uint8_t *lvb, uint32_t *flags_out,
		   uint64_t timeout_ns)
{
	struct lkc_req rq = { .rq_lvb = lvb };
	int rc = request_many(c, frame, len, &rq, 1, timeout_ns);

	if (rc)
		return rc;
	if (flags_out)
		*flags_out = rq.rq_flags;
	return rq.rq_result;
}

static void lock_frame(uint8_t *f, uint16_t type, uint32_t ltype, uint64_t number, int mode,
		       uint32_t flags, const uint8_t *lvb)
{
	uint8_t *p = f + LKP_HDR;

	lkp_hdr(f, type, 0, LKP_LOCK_LEN);
	lkp_put32(p, ltype);
	lkp_put64(p + 4, number);
	lkp_put32(p + 12, (uint32_t)mode);
	if (lvb) {
		flags |= LKP_LF_LVB;
		memcpy(p + 20, lvb, LK_LVB_LEN);
	} else {
		memset(p + 20, 0, LK_LVB_LEN);
	}
	lkp_put32(p + 16, flags);
}

int lkc_lock(struct lkc *c, uint32_t type, uint64_t number, int mode, int flags, uint8_t *lvb,
	     uint32_t *flags_out)
{
	uint8_t f[LKP_HDR + LKP_LOCK_LEN];
	int rc;

	if (mode < LK_NL || mode > LK_EX || (flags & ~(LKF_TRY | LKF_TRY_1CB)))
		return -EINVAL;
	lock_frame(f, LKP_LOCK, type, number, mode, (uint32_t)flags, lvb);
	rc = request(c, f, sizeof(f), lvb, flags_out, 0);
	pthread_mutex_lock(&c->c_lock);
	if (rc >= 0)
		c->c_stats.grants++;
	else if (rc == -EAGAIN)
		c->c_stats.tries_failed++;
	pthread_mutex_unlock(&c->c_lock);
	return rc;
}

int lkc_lock_many(struct lkc *c, struct lkc_lockreq *reqs, size_t n)
{
	uint8_t f[LKC_BATCH_MAX][LKP_HDR + LKP_LOCK_LEN];
	struct lkc_req rq[LKC_BATCH_MAX];
	int rc;

	if (n > LKC_BATCH_MAX)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		const struct lkc_lockreq *r = &reqs[i];
		if (r->lr_mode < LK_NL || r->lr_mode > LK_EX || (r->lr_flags & ~(LKF_TRY | LKF_TRY_1CB)))
			return -EINVAL;
		for (size_t k = 0; k < i; k++)
			if (reqs[k].lr_type == r->lr_type && reqs[k].lr_number == r->lr_number)
				return -EINVAL; /* one request in flight per resource */
	}
	if (!n)
		return 0;
	memset(rq, 0, sizeof(rq));
	for (size_t i = 0; i < n; i++) {
		struct lkc_lockreq *r = &reqs[i];
		lock_frame(f[i], LKP_LOCK, r->lr_type, r->lr_number, r->lr_mode, (uint32_t)r->lr_flags,
			   r->lr_lvb);
		rq[i].rq_lvb = r->lr_lvb;
	}
	rc = request_many(c, &f[0][0], sizeof(f[0]), rq, n, 0);
	pthread_mutex_lock(&c->c_lock);
	for (size_t i = 0; i < n; i++) {
		reqs[i].lr_result = rc ? rc : rq[i].rq_result;
		reqs[i].lr_flags_out = rc ? 0 : rq[i].rq_flags;
		if (reqs[i].lr_result >= 0)
			c->c_stats.grants++;
		else if (reqs[i].lr_result == -EAGAIN)
			c->c_stats.tries_failed++;
	}
	pthread_mutex_unlock(&c->c_lock);
	return 0;
}

int lkc_unlock(struct lkc *c, uint32_t type, uint64_t number, const uint8_t *lvb)
{
	uint8_t f[LKP_HDR + LKP_LOCK_LEN];

	if (__atomic_load_n(&c->c_state, __ATOMIC_RELAXED) != LKC_UP)
		return -ENOTCONN;
	lock_frame(f, LKP_UNLOCK, type, number, 0, 0, lvb);
	return send_all(c, f, sizeof(f));
}

static void plock_frame(uint8_t *f, int op, const struct lk_plock *pl)
{
	uint8_t *p = f + LKP_HDR;

	lkp_hdr(f, LKP_PLOCK, 0, LKP_PLOCK_LEN);
	lkp_put32(p, (uint32_t)op);
	lkp_put32(p + 4, pl->pl_flags & LK_PL_FLOCK ? LKP_PLF_FLOCK : 0);
	lkp_put64(p + 8, pl->pl_ino);
	lkp_put64(p + 16, pl->pl_owner);
	lkp_put64(p + 24, pl->pl_start);
	lkp_put64(p + 32, pl->pl_end);
	lkp_put32(p + 40, pl->pl_type);
	lkp_put32(p + 44, pl->pl_pid);
}

static int plock_valid(const struct lk_plock *pl)
{
	return pl->pl_type <= LK_PL_UN && pl->pl_start <= pl->pl_end &&
	       pl->pl_end <= (uint64_t)LK_PL_END_MAX;
}

int lkc_plock_supported(struct lkc *c)
{
	return c->c_plock;
}

int lkc_plock(struct lkc *c, int op, struct lk_plock *pl)
{
	uint8_t f[LKP_HDR + LKP_PLOCK_LEN];
	struct lkc_req rq = { .rq_pl = op == LK_PL_GET ? pl : NULL };
	int rc;

	if ((op != LK_PL_GET && op != LK_PL_SET && op != LK_PL_CLOSE) || !plock_valid(pl))
		return -EINVAL;
	if (c->c_own && __atomic_load_n(&c->c_state, __ATOMIC_RELAXED) == LKC_UP) {
		int local;
		rc = plown_op(c->c_own, op, pl, &local);
		if (local)
			return rc;
	}
	plock_frame(f, op, pl);
	rc = request_many(c, f, sizeof(f), &rq, 1, 0);
	return rc ? rc : rq.rq_result;
}

int lkc_plock_wait(struct lkc *c, const struct lk_plock *pl, lkc_plock_done_fn done, void *arg,
		   uint32_t *seq)
{
	uint8_t f[LKP_HDR + LKP_PLOCK_LEN];
	struct lkc_req *rq;
	int rc;

	if (!plock_valid(pl) || pl->pl_type == LK_PL_UN || !done)
		return -EINVAL;
	if (c->c_own && __atomic_load_n(&c->c_state, __ATOMIC_RELAXED) == LKC_UP) {
		int local;
		rc = plown_wait(c->c_own, pl, &local);
		if (local) {
			if (rc)
				return rc;
			*seq = 0; /* granted here: nothing to cancel */
			done(arg, 0);
			return 0;
		}
	}
	rq = calloc(1, sizeof(*rq));
	if (!rq)
		return -ENOMEM;
	rq->rq_done_fn = done;
	rq->rq_done_arg = arg;
	plock_frame(f, LKP_PL_SETW, pl);
	pthread_mutex_lock(&c->c_lock);
	if (c->c_state != LKC_UP) {
		pthread_mutex_unlock(&c->c_lock);
		free(rq);
		return -ENOTCONN;
	}
	rq->rq_seq = ++c->c_seq ? c->c_seq : ++c->c_seq;
	*seq = rq->rq_seq;
	lkp_put32(f + 8, rq->rq_seq);
	rq->rq_next = c->c_reqs;
	c->c_reqs = rq;
	c->c_stats.requests++;
	pthread_mutex_unlock(&c->c_lock);
	rc = send_all(c, f, sizeof(f));
	if (rc) {
		struct lkc_req *mine;

		pthread_mutex_lock(&c->c_lock);
		mine = req_take(c, *seq); /* NULL: go_down already called done */
		pthread_mutex_unlock(&c->c_lock);
		if (!mine)
			return 0;
		free(mine);
		return rc;
	}
	return 0;
}

int lkc_plock_cancel(struct lkc *c, uint64_t ino, uint32_t seq)
{
	uint8_t f[LKP_HDR + LKP_PLOCK_LEN];
	struct lk_plock pl = { .pl_ino = ino, .pl_pid = seq };

	if (!seq)
		return 0; /* granted at once from an owned space */
	if (__atomic_load_n(&c->c_state, __ATOMIC_RELAXED) != LKC_UP)
		return -ENOTCONN;
	plock_frame(f, LKP_PL_CANCEL, &pl);
	return send_all(c, f, sizeof(f));
}

int lkc_recovery_done(struct lkc *c, uint32_t jid)
{
	uint8_t f[LKP_HDR + LKP_RECOVERY_DONE_LEN];

	lkp_hdr(f, LKP_RECOVERY_DONE, 0, LKP_RECOVERY_DONE_LEN);
	lkp_put32(f + LKP_HDR, jid);
	lkp_put32(f + LKP_HDR + 4, 0);
	if (c->c_rx_started && pthread_equal(pthread_self(), c->c_rx))
		return send_all(c, f, sizeof(f)); /* the reply would come to this thread */
	return request(c, f, sizeof(f), NULL, NULL, 0);
}

void lkc_get_stats(struct lkc *c, struct lkc_stats *st)
{
	struct plown_stats os = { 0 };

	if (c->c_own)
		plown_get_stats(c->c_own, &os);
	pthread_mutex_lock(&c->c_lock);
	*st = c->c_stats;
	pthread_mutex_unlock(&c->c_lock);
	st->plock_owned = os.owned;
	st->plock_local = os.local;
	st->plock_grants = os.grants;
	st->plock_gives = os.gives;
}

/* --- receiver thread --------------------------------------------------------- */

/* One frame from lockd; -EPROTO when it makes no sense. */
static int rx_frame(struct lkc *c, const uint8_t *f, size_t flen)
{
	unsigned type = lkp_get16(f + 4);
	uint32_t seq = lkp_get32(f + 8);
	const uint8_t *p = f + LKP_HDR;
	size_t plen = flen - LKP_HDR;
	struct lkc_req *rq;

	switch (type) {
	case LKP_GRANT:
	case LKP_RESULT:
		if (plen != (type == LKP_GRANT ? LKP_GRANT_LEN : LKP_RESULT_LEN))
			return -EPROTO;
		pthread_mutex_lock(&c->c_lock);
		rq = req_take(c, seq);
		if (rq) {
			if (type == LKP_GRANT) {
				rq->rq_result = (int)(lkp_get32(p) % LK_NMODES);
				rq->rq_flags = lkp_get32(p + 4);
				if (rq->rq_lvb)
					memcpy(rq->rq_lvb, p + 8, LK_LVB_LEN);
			} else {
				uint32_t e = lkp_get32(p);
				rq->rq_result = e > 4095 ? -EPROTO : -(int)e;
			}
			__atomic_store_n(&rq->rq_done, 1, __ATOMIC_RELEASE);
			pthread_cond_signal(&rq->rq_cond);
		}
		pthread_mutex_unlock(&c->c_lock);
		return 0;
	case LKP_PLOCK_REPLY: {
		uint32_t e = lkp_get32(p);

		if (plen != LKP_PLOCK_REPLY_LEN || lkp_get32(p + 4) > LK_PL_UN)
			return -EPROTO;
		if (lkp_get32(p + 28) & LKP_PLR_OWN) {
			if (!c->c_own || !seq)
				return -EPROTO; /* never asked for (JOIN without PLOWN) */
			/* before the caller hears its answer (plown.c (1)) */
			plown_grant(c->c_own, lkp_get64(p + 8));
		}
		pthread_mutex_lock(&c->c_lock);
		rq = req_take(c, seq);
		if (rq && rq->rq_done_fn) {
			pthread_mutex_unlock(&c->c_lock);
			rq->rq_done_fn(rq->rq_done_arg, e > 4095 ? -EPROTO : -(int)e);
			free(rq);
			return 0;
		}
		if (rq) {
			rq->rq_result = e > 4095 ? -EPROTO : -(int)e;
			if (rq->rq_pl) {
				rq->rq_pl->pl_type = lkp_get32(p + 4);
				rq->rq_pl->pl_start = lkp_get64(p + 8);
				rq->rq_pl->pl_end = lkp_get64(p + 16);
				rq->rq_pl->pl_pid = lkp_get32(p + 24);
				rq->rq_pl->pl_flags = (rq->rq_pl->pl_flags & ~LK_PL_MINE) |
						      (lkp_get32(p + 28) & LKP_PLR_MINE ? LK_PL_MINE : 0);
			}
			__atomic_store_n(&rq->rq_done, 1, __ATOMIC_RELEASE);
			pthread_cond_signal(&rq->rq_cond);
		}
		pthread_mutex_unlock(&c->c_lock);
		return 0;
	}
	case LKP_PLOCK_DROP:
		if (plen != LKP_PLOCK_DROP_LEN || !c->c_own)
			return -EPROTO;
		plown_drop(c->c_own, lkp_get64(p));
		return 0;
	case LKP_HEARTBEAT_ACK:
		if (plen)
			return -EPROTO;
		if (c->c_own)
			plown_idle(c->c_own); /* every lease/4 */
		pthread_mutex_lock(&c->c_lock);
		for (unsigned i = 0; i < LKC_HB_RING; i++) {
			if (c->c_hb_ring[i].seq == seq && c->c_hb_ring[i].sent) {
				uint64_t until = c->c_hb_ring[i].sent_boot + c->c_lease_ns / 2;
				if (c->c_hb_ring[i].sent > c->c_hb_ok)
					c->c_hb_ok = c->c_hb_ring[i].sent;
				if (until > c->c_lease_until && c->c_state == LKC_UP)
					c->c_lease_until = until;
				else
					until = 0;
				c->c_hb_ring[i].sent = 0;
				/* (5): under c_lock, so deadlines arrive in order;
				 * ops->lease only stores a number */
				if (until && c->c_ops && c->c_ops->lease)
					c->c_ops->lease(c->c_arg, until);
			}
		}
		pthread_mutex_unlock(&c->c_lock);
		return 0;
	case LKP_BAST:
		if (plen != LKP_BAST_LEN || lkp_get32(p + 12) >= LK_NMODES)
			return -EPROTO;
		pthread_mutex_lock(&c->c_lock);
		c->c_stats.basts++;
		pthread_mutex_unlock(&c->c_lock);
		if (c->c_ops && c->c_ops->bast)
			c->c_ops->bast(c->c_arg, lkp_get32(p), lkp_get64(p + 4), (int)lkp_get32(p + 12));
		return 0;
	case LKP_RECOVER: {
		char name[LK_NAME_MAX + 1];
		size_t nl;

		if (plen < LKP_RECOVER_FIXED)
			return -EPROTO;
		nl = p[4];
		if (LKP_RECOVER_FIXED + nl != plen || !lkp_valid_name((const char *)p + 8, nl))
			return -EPROTO;
		memcpy(name, p + 8, nl);
		name[nl] = 0;
		if (c->c_ops && c->c_ops->recover)
			c->c_ops->recover(c->c_arg, lkp_get32(p), name);
		return 0;
	}
	default:
		return -EPROTO;
	}
}

static void *rx_thread(void *arg)
{
	struct lkc *c = arg;
	uint8_t *buf = malloc(LKC_RXBUF);
	size_t have = 0;
	char why[160] = "connection to lockd closed";

	if (!buf) {
		snprintf(why, sizeof(why), "receiver: out of memory");
		goto out;
	}
	for (;;) {
		ssize_t n = read(c->c_fd, buf + have, LKC_RXBUF - have);
		size_t off = 0;

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			if (n < 0)
				snprintf(why, sizeof(why), "connection to lockd: %s", strerror(errno));
			break;
		}
		have += (size_t)n;
		while (have - off >= 4) {
			uint32_t len = lkp_get32(buf + off);
			if (len < LKP_HDR - 4 || len > LKP_MAX_FRAME - 4) {
				snprintf(why, sizeof(why), "lockd sent a bad frame length %u", len);
				goto out;
			}
			if (have - off < 4 + len)
				break;
			if (c->c_sealed) {
				int plen = lk_open_frame(&c->c_sess, buf + off, 4 + len);

				if (plen < 0) {
					snprintf(why, sizeof(why), "a frame from lockd fails authentication "
								   "(changed, replayed, reordered or forged "
								   "on the way, or not sealed)");
					goto out;
				}
				lkp_put32(buf + off, (uint32_t)(LKP_HDR - 4 + (size_t)plen));
			}
			if (rx_frame(c, buf + off, 4 + (size_t)lkp_get32(buf + off))) {
				snprintf(why, sizeof(why), "lockd sent a malformed %s",
					 lkp_type_name(lkp_get16(buf + off + 4)));
				goto out;
			}
			off += 4 + len;
		}
		if (off) {
			memmove(buf, buf + off, have - off);
			have -= off;
		}
	}
out:
	free(buf);
	pthread_mutex_lock(&c->c_lock);
	go_down(c, why);
	pthread_mutex_unlock(&c->c_lock);
	return NULL;
}

/* --- timer thread ----------------------------------------------------------------- */

/*
 * Hand heartbeat seq to whoever sends next (send_all), or send it here
 * when the send lock is free; poll every millisecond until one of the two
 * happened or the fencing deadline passed.
 */
static void send_heartbeat(struct lkc *c, uint32_t seq, uint64_t fence_at)
{
	struct timespec ms = { 0, 1000000 };

	__atomic_store_n(&c->c_hb_pend, seq, __ATOMIC_RELEASE);
	while (__atomic_load_n(&c->c_hb_pend, __ATOMIC_ACQUIRE) == seq) {
		if (!pthread_mutex_trylock(&c->c_send_lock)) {
			uint32_t hb = __atomic_exchange_n(&c->c_hb_pend, 0, __ATOMIC_ACQ_REL);
			if (hb) {
				uint8_t f[LKP_HDR + LK_TAG_LEN];
				size_t fl = lkp_hdr(f, LKP_HEARTBEAT, hb, 0);
				ssize_t n = -1;

				if (c->c_sealed)
					fl = lk_seal_frame(&c->c_sess, f, 0);
				/* never block here: the timer thread must be free to fence */
				do
					n = fl ? send(c->c_fd, f, fl, MSG_NOSIGNAL | MSG_DONTWAIT) : -1;
				while (n < 0 && errno == EINTR);
				if (n > 0 && n < (ssize_t)fl) {
					write_all(c->c_fd, f + n, fl - (size_t)n); /* finish the frame */
				} else if (n < 0 && fl && errno == EAGAIN) {
					/* not sent: the next sealed frame takes its number (6) */
					if (c->c_sealed)
						c->c_sess.ls_txn--;
					__atomic_store_n(&c->c_hb_pend, hb, __ATOMIC_RELEASE);
				}
			}
			pthread_mutex_unlock(&c->c_send_lock);
			if (__atomic_load_n(&c->c_hb_pend, __ATOMIC_ACQUIRE) != seq)
				return;
		}
		if (lkp_now_ns() >= fence_at || __atomic_load_n(&c->c_state, __ATOMIC_RELAXED) != LKC_UP)
			return;
		nanosleep(&ms, NULL);
	}
}

static void *timer_thread(void *arg)
{
	struct lkc *c = arg;
	uint64_t quarter = c->c_lease_ns / 4, half = c->c_lease_ns / 2;

	pthread_mutex_lock(&c->c_lock);
	while (!c->c_closing) {
		uint64_t now = lkp_now_ns(), fence_at = c->c_hb_ok + half, wake;
		struct timespec ts;

		if (c->c_state == LKC_UP && now >= fence_at) {
			char why[160];
			snprintf(why, sizeof(why), "no heartbeat answer from lockd for %llu ms",
				 (unsigned long long)((now - c->c_hb_ok) / NS_PER_MS));
			go_down(c, why);
		}
		if (c->c_state == LKC_DOWN) {
			if (!c->c_fenced) {
				char why[160];
				c->c_fenced = 1;
				snprintf(why, sizeof(why), "%s", c->c_why);
				pthread_mutex_unlock(&c->c_lock);
				if (c->c_ops && c->c_ops->fenced)
					c->c_ops->fenced(c->c_arg, why);
				pthread_mutex_lock(&c->c_lock);
			}
			if (!c->c_closing)
				pthread_cond_wait(&c->c_timer_cond, &c->c_lock);
			continue;
		}
		if (now >= c->c_hb_sent + quarter) {
			uint32_t seq = ++c->c_seq ? c->c_seq : ++c->c_seq;
			unsigned slot = c->c_hb_next++ % LKC_HB_RING;

			c->c_hb_ring[slot].seq = seq;
			c->c_hb_ring[slot].sent = now;
			c->c_hb_ring[slot].sent_boot = boot_now_ns(); /* (5) */
			c->c_hb_sent = now;
			pthread_mutex_unlock(&c->c_lock);
			send_heartbeat(c, seq, fence_at);
			pthread_mutex_lock(&c->c_lock);
			continue;
		}
		wake = c->c_hb_sent + quarter;
		if (fence_at < wake)
			wake = fence_at;
		timespec_at(&ts, wake);
		pthread_cond_timedwait(&c->c_timer_cond, &c->c_lock, &ts);
	}
	pthread_mutex_unlock(&c->c_lock);
	return NULL;
}

/* --- connect ------------------------------------------------------------------------- */

/* Read exactly n bytes before deadline (blocking fd, poll for the timeout). */
static int read_full(int fd, uint8_t *buf, size_t n, uint64_t deadline)
{
	while (n) {
		uint64_t now = lkp_now_ns();
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		ssize_t r;
		int pr;

		if (now >= deadline)
			return -ETIMEDOUT;
		pr = poll(&pfd, 1, (int)((deadline - now) / NS_PER_MS) + 1);
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr < 0)
			return -errno;
		if (pr == 0)
			continue;
		r = read(fd, buf, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return -ECONNRESET;
		buf += r;
		n -= (size_t)r;
	}
	return 0;
}

/* One handshake frame into buf (LKP_MAX_FRAME bytes); returns its type or -errno. */
static int read_frame(int fd, uint8_t *buf, size_t *plen, uint64_t deadline)
{
	uint32_t len;
	int rc = read_full(fd, buf, 4, deadline);

	if (rc)
		return rc;
	len = lkp_get32(buf);
	if (len < LKP_HDR - 4 || len > LKP_MAX_FRAME - 4)
		return -EPROTO;
	rc = read_full(fd, buf + 4, len, deadline);
	if (rc)
		return rc;
	*plen = len + 4 - LKP_HDR;
	return lkp_get16(buf + 4);
}

static int connect_to(const struct lkp_addr *la, uint64_t deadline, char *err, size_t errlen)
{
	int fd = socket(la->la_ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	int rc, one = 1, fl;

	if (fd < 0) {
		rc = -errno;
		snprintf(err, errlen, "socket: %s", strerror(errno));
		return rc;
	}
	if (connect(fd, (const struct sockaddr *)&la->la_ss, la->la_len)) {
		if (errno != EINPROGRESS && errno != EAGAIN) {
			rc = -errno;
			snprintf(err, errlen, "connect: %s", strerror(errno));
			close(fd);
			return rc;
		}
		for (;;) {
			struct pollfd pfd = { .fd = fd, .events = POLLOUT };
			uint64_t now = lkp_now_ns();
			int soerr = 0;
			socklen_t sl = sizeof(soerr);

			if (now >= deadline) {
				snprintf(err, errlen, "connect: %s", strerror(ETIMEDOUT));
				close(fd);
				return -ETIMEDOUT;
			}
			rc = poll(&pfd, 1, (int)((deadline - now) / NS_PER_MS) + 1);
			if (rc <= 0)
				continue;
			getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
			if (soerr) {
				snprintf(err, errlen, "connect: %s", strerror(soerr));
				close(fd);
				return -soerr;
			}
			break;
		}
	}
	fl = fcntl(fd, F_GETFL);
	fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
	if (!la->la_unix)
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

/*
 * One attempt: connect, CHALLENGE, JOIN, JOIN_OK.  Returns the fd, or
 * -errno with the reason in err (*retry set when lockd said "later").
 */
static int handshake(struct lkc *c, const struct lkp_addr *la, const struct lkc_config *cfg,
		     const uint8_t *key, size_t keylen, uint32_t *lease_ms, int *retry, char *err,
		     size_t errlen)
{
	uint8_t buf[LKP_MAX_FRAME], *p = buf + LKP_HDR;
	size_t plen = 0, nl = strlen(cfg->node), tl = strlen(cfg->table), len;
	uint64_t deadline = lkp_now_ns() + LKC_HANDSHAKE_MS * NS_PER_MS;
	uint8_t chal[LKP_CHALLENGE_LEN];
	uint32_t cflags;
	int fd, type, rc;

	*retry = 0;
	fd = connect_to(la, deadline, err, errlen);
	if (fd < 0)
		return fd;
	type = read_frame(fd, buf, &plen, deadline);
	if (type < 0) {
		rc = type;
		snprintf(err, errlen, "no CHALLENGE from lockd: %s", strerror(-rc));
		goto out_close;
	}
	if (type != LKP_CHALLENGE || plen != LKP_CHALLENGE_LEN) {
		rc = -EPROTO;
		snprintf(err, errlen, "not a lockd (first message type %d, %zu bytes)", type, plen);
		goto out_close;
	}
	if (lkp_get32(p) != LKP_VERSION) {
		rc = -EPROTO;
		snprintf(err, errlen, "lockd speaks protocol version %u, this client %u", lkp_get32(p),
			 LKP_VERSION);
		goto out_close;
	}
	cflags = lkp_get32(p + 4);
	c->c_plock = !!(cflags & LKP_CF_PLOCK);
	*lease_ms = lkp_get32(p + 8);
	if (*lease_ms < 4) {
		rc = -EPROTO;
		snprintf(err, errlen, "lockd announced a lease of %u ms", *lease_ms);
		goto out_close;
	}
	if ((cflags & LKP_CF_AUTH) && !key) {
		rc = -EACCES;
		snprintf(err, errlen, "lockd requires a secret and none is configured (bad secret)");
		goto out_close;
	}
	if (!(cflags & LKP_CF_AUTH) && key) {
		/* the cluster has a secret: a lockd without it is not the
		 * cluster's (or was started without --secret-file) */
		rc = -EACCES;
		snprintf(err, errlen, "this node has a secret (secret=) but lockd does not ask for "
				      "the secret: not joining a lockd that anyone can join");
		goto out_close;
	}
	if (key && !(cflags & LKP_CF_SEAL)) {
		rc = -EPROTO;
		snprintf(err, errlen, "lockd does not seal lock traffic (shoal-lockd before "
				      "2026-12-05?): upgrade it; not joining without sealed traffic");
		goto out_close;
	}
	memcpy(chal, p, LKP_CHALLENGE_LEN);
	/* build the JOIN over the CHALLENGE (kept in chal) */
	{
		uint8_t *q = buf + LKP_HDR;
		size_t ul = cfg->uuid ? LKP_UUID_LEN : 0, cl = key ? LKP_NONCE : 0;

		len = lkp_hdr(buf, LKP_JOIN, 0, LKP_JOIN_FIXED + nl + tl + ul + cl);
		lkp_put32(q, LKP_VERSION);
		lkp_put32(q + 4, cfg->njournals);
		memset(q + 8, 0, LK_HMAC_LEN);
		q[40] = (uint8_t)nl;
		q[41] = (uint8_t)tl;
		lkp_put16(q + 42, (uint16_t)((cfg->self_recover ? LKP_JF_SELF_RECOVER : 0) |
					     (cfg->uuid ? LKP_JF_UUID : 0) | (key ? LKP_JF_SEAL : 0) |
					     (c->c_own ? LKP_JF_PLOWN : 0)));
		memcpy(q + 44, cfg->node, nl);
		memcpy(q + 44 + nl, cfg->table, tl);
		if (ul)
			memcpy(q + 44 + nl + tl, cfg->uuid, ul);
		if (key) {
			/* our nonce, then the MAC over the CHALLENGE and the whole
			 * JOIN, then the session keys (docs/PROTOCOL.md) */
			uint8_t *cnonce = q + 44 + nl + tl + ul;

			if (getrandom(cnonce, LKP_NONCE, 0) != LKP_NONCE) {
				rc = -EIO;
				snprintf(err, errlen, "getrandom: %s", strerror(errno));
				goto out_close;
			}
			rc = lk_hmac_sha256(key, keylen, chal, LKP_CHALLENGE_LEN, q, len - LKP_HDR,
					    q + 8);
			if (!rc)
				rc = lk_session_init(&c->c_sess, key, keylen, chal + 12, cnonce,
						     cfg->node, nl, 0);
			if (rc) {
				snprintf(err, errlen, "HMAC-SHA256 or HKDF-SHA256 of the JOIN "
						      "(libcrypto): %s", strerror(-rc));
				goto out_close;
			}
		}
	}
	c->c_fd = fd;
	c->c_hb_ok = c->c_hb_sent = lkp_now_ns(); /* JOIN counts as the first heartbeat */
	c->c_lease_until = boot_now_ns(); /* + lease/2 once JOIN_OK tells the lease (5) */
	rc = send_all(c, buf, len);
	if (rc) {
		snprintf(err, errlen, "send JOIN: %s", strerror(ENOTCONN));
		goto out_close;
	}
	type = read_frame(fd, buf, &plen, deadline);
	if (type < 0) {
		rc = type;
		snprintf(err, errlen, "no answer to JOIN: %s", strerror(-rc));
		goto out_close;
	}
	if (key && type == LKP_JOIN_OK && lkp_get16(buf + 6) == LKP_HF_SEALED) {
		/* (6): only a lockd that knows the secret can seal it */
		int ol = lk_open_frame(&c->c_sess, buf, LKP_HDR + plen);

		if (ol < 0) {
			rc = -EACCES;
			snprintf(err, errlen, "lockd's JOIN_OK does not open with this node's secret: "
					      "that lockd does not know the secret (or the reply was "
					      "changed on the way); not joining");
			goto out_close;
		}
		plen = (size_t)ol;
	} else if (key && type != LKP_REFUSE) {
		rc = -EACCES;
		snprintf(err, errlen, "lockd answered JOIN with an unsealed %s: it does not know "
				      "the secret (or the reply was forged on the way); not joining",
			 lkp_type_name((unsigned)type));
		goto out_close;
	}
	if (type == LKP_REFUSE && plen >= LKP_REFUSE_FIXED && LKP_REFUSE_FIXED + (size_t)lkp_get16(p + 8) == plen) {
		uint32_t e = lkp_get32(p);
		int rl = lkp_get16(p + 8);
		for (int i = 0; i < rl; i++)
			if (p[12 + i] < ' ' || p[12 + i] > '~')
				p[12 + i] = '?';
		snprintf(err, errlen, "%.*s", rl, (const char *)p + 12);
		*retry = !!(lkp_get32(p + 4) & LKP_RF_RETRY);
		rc = e && e < 4096 ? -(int)e : -EPROTO;
		goto out_close;
	}
	if (type != LKP_JOIN_OK || plen != LKP_JOIN_OK_LEN) {
		rc = -EPROTO;
		snprintf(err, errlen, "unexpected answer to JOIN (type %d, %zu bytes)", type, plen);
		goto out_close;
	}
	c->c_jid = lkp_get32(p);
	if (c->c_jid >= cfg->njournals) {
		rc = -EPROTO;
		snprintf(err, errlen, "lockd gave journal %u; the disk has %u", c->c_jid,
			 cfg->njournals);
		goto out_close;
	}
	*lease_ms = lkp_get32(p + 4);
	if (*lease_ms < 4) {
		rc = -EPROTO;
		snprintf(err, errlen, "lockd granted a lease of %u ms", *lease_ms);
		goto out_close;
	}
	c->c_sealed = !!key;
	return fd;
out_close:
	close(fd);
	c->c_fd = -1;
	lk_session_free(&c->c_sess);
	memset(&c->c_sess, 0, sizeof(c->c_sess));
	return rc;
}

int lkc_connect(const struct lkc_config *cfg, struct lkc **out, uint32_t *jid, uint32_t *lease_ms,
		char *err, size_t errlen)
{
	char why[LKP_REASON_MAX + 64];
	uint8_t *key = NULL;
	size_t keylen = 0;
	struct lkp_addr la;
	struct lkc *c;
	uint64_t start = lkp_now_ns(), give_up = 0;
	uint32_t lease = 0;
	int rc, retry;
	pthread_condattr_t ca;

	*out = NULL;
	if (!cfg->addr || !cfg->node || !cfg->table) {
		snprintf(err, errlen, "lockd: address, node name and table are required");
		return -EINVAL;
	}
	if (!lkp_valid_name(cfg->node, strlen(cfg->node))) {
		snprintf(err, errlen, "lockd at %s: bad node name '%s' (1-63 of A-Za-z0-9._-)", cfg->addr,
			 cfg->node);
		return -EINVAL;
	}
	if (!lkp_valid_table(cfg->table, strlen(cfg->table))) {
		snprintf(err, errlen, "lockd at %s: bad table '%s' (want CLUSTER:FSNAME)", cfg->addr,
			 cfg->table);
		return -EINVAL;
	}
	rc = lkp_parse_addr(cfg->addr, 0, &la, why, sizeof(why));
	if (rc) {
		snprintf(err, errlen, "lockd at %s: %s", cfg->addr, why);
		return rc;
	}
	if (cfg->secret_file) {
		rc = lkp_read_secret(cfg->secret_file, &key, &keylen, why, sizeof(why));
		if (rc) {
			snprintf(err, errlen, "lockd at %s: %s", cfg->addr, why);
			return rc;
		}
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		rc = -ENOMEM;
		snprintf(err, errlen, "lockd at %s: %s", cfg->addr, strerror(ENOMEM));
		goto out_key;
	}
	c->c_fd = -1;
	if (!cfg->plock_no_own && !(getenv("SHOAL_PLOCK_OWN") && !strcmp(getenv("SHOAL_PLOCK_OWN"), "0"))) {
		c->c_own = plown_create(own_send, c);
		if (!c->c_own) {
			free(c);
			rc = -ENOMEM;
			snprintf(err, errlen, "lockd at %s: %s", cfg->addr, strerror(ENOMEM));
			goto out_key;
		}
	}
	c->c_spin_ns = LKC_SPIN_NS;
	if (getenv("SHOAL_LKC_SPIN_US"))
		c->c_spin_ns = strtoull(getenv("SHOAL_LKC_SPIN_US"), NULL, 10) * 1000;
	snprintf(c->c_addr, sizeof(c->c_addr), "%s", cfg->addr);
	snprintf(c->c_node, sizeof(c->c_node), "%s", cfg->node);
	c->c_ops = cfg->ops;
	c->c_arg = cfg->arg;
	pthread_mutex_init(&c->c_send_lock, NULL);
	pthread_mutex_init(&c->c_lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->c_timer_cond, &ca);
	pthread_condattr_destroy(&ca);

	for (;;) {
		rc = handshake(c, &la, cfg, key, keylen, &lease, &retry, why, sizeof(why));
		if (rc >= 0)
			break;
		if (!retry)
			goto out_err;
		if (!give_up)
			give_up = start + 2ull * lease * NS_PER_MS;
		if (lkp_now_ns() >= give_up) {
			rc = -ETIMEDOUT;
			goto out_err;
		}
		{
			uint64_t pause = lease * NS_PER_MS / 8;
			struct timespec ts;
			if (pause > 500 * NS_PER_MS)
				pause = 500 * NS_PER_MS;
			ts.tv_sec = (time_t)(pause / 1000000000ull);
			ts.tv_nsec = (long)(pause % 1000000000ull);
			nanosleep(&ts, NULL);
		}
	}
	c->c_lease_ns = lease * NS_PER_MS;
	c->c_state = LKC_UP;
	c->c_lease_until += c->c_lease_ns / 2; /* (5): the JOIN's heartbeat */
	if (c->c_ops && c->c_ops->lease)
		c->c_ops->lease(c->c_arg, c->c_lease_until);
	rc = pthread_create(&c->c_rx, NULL, rx_thread, c);
	if (rc) {
		rc = -rc;
		snprintf(why, sizeof(why), "pthread_create: %s", strerror(-rc));
		goto out_err;
	}
	c->c_rx_started = 1;
	rc = pthread_create(&c->c_timer, NULL, timer_thread, c);
	if (rc) {
		rc = -rc;
		snprintf(why, sizeof(why), "pthread_create: %s", strerror(-rc));
		goto out_err;
	}
	c->c_timer_started = 1;
	if (key) {
		memset(key, 0, keylen);
		free(key);
	}
	*jid = c->c_jid;
	*lease_ms = lease;
	*out = c;
	return 0;
out_err:
	snprintf(err, errlen, "lockd at %s: %s", cfg->addr, why);
	pthread_mutex_lock(&c->c_lock);
	c->c_closing = 1;
	c->c_fenced = 1;
	go_down(c, "connect failed");
	pthread_mutex_unlock(&c->c_lock);
	if (c->c_rx_started)
		pthread_join(c->c_rx, NULL);
	if (c->c_fd >= 0)
		close(c->c_fd);
	lk_session_free(&c->c_sess);
	pthread_cond_destroy(&c->c_timer_cond);
	pthread_mutex_destroy(&c->c_lock);
	pthread_mutex_destroy(&c->c_send_lock);
	plown_destroy(c->c_own);
	free(c);
out_key:
	if (key) {
		memset(key, 0, keylen);
		free(key);
	}
	return rc;
}

void lkc_withdraw(struct lkc *c, const char *why)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->c_lock);
	c->c_fenced = 1; /* the caller fenced itself (invariant 4) */
	go_down(c, why);
	pthread_mutex_unlock(&c->c_lock);
}

void lkc_close(struct lkc *c)
{
	int up;

	if (!c)
		return;
	pthread_mutex_lock(&c->c_lock);
	c->c_closing = 1;
	c->c_fenced = 1; /* invariant 4 */
	up = c->c_state == LKC_UP;
	pthread_cond_signal(&c->c_timer_cond);
	pthread_mutex_unlock(&c->c_lock);
	if (up) {
		uint8_t f[LKP_HDR];
		lkp_hdr(f, LKP_LEAVE, 0, 0);
		request(c, f, sizeof(f), NULL, NULL, LKC_LEAVE_MS * NS_PER_MS);
	}
	pthread_mutex_lock(&c->c_lock);
	go_down(c, "closed");
	pthread_mutex_unlock(&c->c_lock);
	if (c->c_rx_started)
		pthread_join(c->c_rx, NULL);
	if (c->c_timer_started)
		pthread_join(c->c_timer, NULL);
	close(c->c_fd);
	lk_session_free(&c->c_sess);
	pthread_cond_destroy(&c->c_timer_cond);
	pthread_mutex_destroy(&c->c_lock);
	pthread_mutex_destroy(&c->c_send_lock);
	plown_destroy(c->c_own);
	free(c);
}

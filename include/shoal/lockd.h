/*
 * lockd.h - the shoal lock manager: the client library every node links
 * (lkc_*) and the server core shoal-lockd runs (lockd_*).  The wire
 * protocol, the lock and node state machines and the failure rules are in
 * docs/PROTOCOL.md.
 *
 * Client threads: lkc_connect starts a receiver thread (replies, blocking
 * callbacks, recovery notices) and a timer thread (heartbeats, fencing).
 * The callbacks of struct lkc_ops run on those threads and must not block
 * or call lkc_lock; they may run before lkc_connect has returned.
 */
#ifndef SHOAL_LOCKD_H
#define SHOAL_LOCKD_H

#include <stddef.h>
#include <stdint.h>

enum lk_mode { LK_NL = 0, LK_CR = 1, LK_CW = 2, LK_PR = 3, LK_PW = 4, LK_EX = 5 };
#define LK_NMODES 6

#define LKF_TRY 0x1	/* fail with -EAGAIN if not grantable at once */
#define LKF_TRY_1CB 0x2 /* with LKF_TRY: still send the blockers one blocking callback */
#define LKF_LVB_INVALID 0x100 /* in *flags_out: lvb content is not valid (a holder died in PW/EX,
			       * or no PW/EX holder wrote it since lockd created the resource) */

#define LK_LVB_LEN 32
#define LK_NAME_MAX 63	/* node name bytes */
#define LK_TABLE_MAX 127 /* "cluster:fsname" bytes */

/* 1 when modes a and b may be granted together (the VMS/DLM matrix). */
int lk_compatible(int a, int b);
const char *lk_mode_name(int mode);

struct lkc_ops {
	/* a blocking callback (BAST): another node wants (type, number) in mode
	 * `wanted` and this node's granted mode is in the way.  Runs on the
	 * client's receiver thread: must not block or call lkc_lock. */
	void (*bast)(void *arg, uint32_t type, uint64_t number, int wanted);
	/* node `node` (journal jid) died and its lease expired; its journal needs
	 * recovery.  Delivered to every live node (same thread rules as bast).
	 * Also delivered right after joining for every recovery still pending. */
	void (*recover)(void *arg, uint32_t jid, const char *node);
	/* this node lost lockd and must stop writing NOW.  Called once, from the
	 * client's timer thread, at the latest lease/2 after the send time of the
	 * last heartbeat that was answered (before lockd can expire the lease);
	 * earlier when the connection breaks.  Not called after lkc_close began. */
	void (*fenced)(void *arg, const char *why);
	/* optional: the node may write to the shared device until until_ns
	 * (CLOCK_BOOTTIME): the send time of the newest answered heartbeat
	 * (or the JOIN) + lease/2, the deadline fenced() also keeps.  Called
	 * at the JOIN (before lkc_connect returns) and at every answered
	 * heartbeat, from the receiver thread, with a later deadline each
	 * time; it must only store the number. */
	void (*lease)(void *arg, uint64_t until_ns);
};

struct lkc_config {
	const char *addr;	 /* "unix:/path" or "HOST:PORT" (also "shoal://HOST:PORT") */
	const char *node;	 /* node name, 1..63 bytes [A-Za-z0-9._-] */
	const char *table;	 /* "cluster:fsname" from the superblock */
	uint32_t njournals;	 /* journals on the device */
	const uint8_t *uuid;	 /* the filesystem's 16-byte UUID (lockd binds the table to
				  * it); NULL: none sent */
	const char *secret_file; /* NULL: no secret */
	const struct lkc_ops *ops;
	void *arg;
	/* this node replays its own journal when it joins and then sends
	 * lkc_recovery_done for it: it may come back under the name of a
	 * node pending recovery (PROTOCOL.md, "A dead node coming back") */
	int self_recover;
	/* never own a plock space (PROTOCOL.md "Ownership"): every plock
	 * request is a round trip to lockd; also $SHOAL_PLOCK_OWN=0 */
	int plock_no_own;
};

struct lkc;

/*
 * Connect, authenticate, join.  On success *jid is this node's journal id and
 * *lease_ms the lease.  On failure returns -errno and writes a one-line reason
 * into err: -EADDRINUSE name in use, -EINVAL bad argument or table mismatch,
 * -ENOSPC no free journal, -EACCES bad secret, -EPROTO version mismatch or a
 * broken handshake, -ETIMEDOUT no answer or a name still pending recovery
 * after 2 * lease, or a connect error.
 */
int lkc_connect(const struct lkc_config *cfg, struct lkc **out, uint32_t *jid,
		uint32_t *lease_ms, char *err, size_t errlen);
/*
 * Lock or convert (up or down) the lock on (type, number) to mode.  Blocks
 * until granted or a try fails (-EAGAIN).  lvb: 32 bytes in/out or NULL; on a
 * down-conversion from PW/EX the resource LVB becomes *lvb, on grant the
 * resource's LVB is copied out.  flags_out may be NULL.  Returns the granted
 * mode (>= 0) or -errno: -ENOTCONN after the connection is gone, -EAGAIN for a
 * failed try, -EDEADLK for an up-conversion that would deadlock with another
 * node's conversion (the lock keeps its mode), -EINVAL for a bad mode.
 * Callers guarantee at most one call in flight per resource.
 */
int lkc_lock(struct lkc *c, uint32_t type, uint64_t number, int mode, int flags,
	     uint8_t *lvb, uint32_t *flags_out);
#define LKC_BATCH_MAX 64 /* requests of one lkc_lock_many */
/* One request of lkc_lock_many: lkc_lock's arguments and its answer. */
struct lkc_lockreq {
	uint32_t lr_type;
	uint64_t lr_number;
	int lr_mode;
	int lr_flags;
	uint8_t *lr_lvb;       /* as lkc_lock's lvb */
	uint32_t lr_flags_out; /* out: as lkc_lock's *flags_out */
	int lr_result;         /* out: as lkc_lock's return value */
};
/*
 * n lkc_lock calls at once (n <= LKC_BATCH_MAX, each on another resource): the
 * requests go out in one write and the call returns once every one has its
 * answer, so requests that lockd grants or refuses at once cost one round
 * trip together.  Returns 0 (each answer in lr_result) or -EINVAL (bad
 * mode or flags, two on one resource, n > LKC_BATCH_MAX: nothing sent).
 */
int lkc_lock_many(struct lkc *c, struct lkc_lockreq *reqs, size_t n);
/*
 * Release the lock; if held in PW/EX and lvb != NULL the resource LVB becomes
 * lvb.  Does not wait for a reply; ordered with later calls of this client.
 */
int lkc_unlock(struct lkc *c, uint32_t type, uint64_t number, const uint8_t *lvb);
/* Tell lockd that journal jid has been replayed: the dead owner's locks are
 * dropped.  -ENOENT when no recovery of jid is pending.  From a callback
 * (receiver thread) it only sends and returns 0. */
int lkc_recovery_done(struct lkc *c, uint32_t jid);
/* Leave cleanly (locks released, no recovery) and free. */
void lkc_close(struct lkc *c);
/*
 * Drop the connection without LEAVE, as a node that died: nothing more is
 * sent (every request fails with -ENOTCONN, ops->fenced is not called: the
 * caller has fenced itself), lockd keeps this node's locks and, at its
 * lease's end, has a live node replay its journal.  lkc_close still frees.
 */
void lkc_withdraw(struct lkc *c, const char *why);

/*
 * Posix and flock locks of files, the "plock" lock space (PROTOCOL.md
 * "Posix and flock locks"): byte-range locks of an owner (a number the
 * node picks: the kernel's lock owner) on an inode; flock locks are
 * whole-file locks of another class that never conflict with record locks.
 */
enum { LK_PL_RD = 0, LK_PL_WR = 1, LK_PL_UN = 2 };	/* pl_type: F_RDLCK, F_WRLCK, F_UNLCK */
enum { LK_PL_GET = 1, LK_PL_SET = 2, LK_PL_CLOSE = 4 }; /* lkc_plock ops */
#define LK_PL_FLOCK 0x1		  /* pl_flags: a flock lock (pl_start 0, pl_end LK_PL_END_MAX) */
#define LK_PL_MINE 0x2		  /* pl_flags after GET: the lock is held on this node */
#define LK_PL_END_MAX INT64_MAX	  /* pl_end of a lock to end of file (the kernel's OFFSET_MAX) */
struct lk_plock {
	uint64_t pl_ino;
	uint64_t pl_owner;
	uint64_t pl_start, pl_end; /* inclusive, pl_end <= LK_PL_END_MAX */
	uint32_t pl_type;	   /* LK_PL_RD, LK_PL_WR, LK_PL_UN */
	uint32_t pl_pid;	   /* the process asking (GET: holding) */
	uint32_t pl_flags;	   /* LK_PL_FLOCK, LK_PL_MINE */
};
/* 1 when lockd serves plocks (its CHALLENGE said so: a lockd from before
 * 2026-12-05 does not, and would drop a node that sent it PLOCK). */
int lkc_plock_supported(struct lkc *c);
/*
 * One plock request, answered before returning (without a round trip
 * when this node owns the inode's plock space): LK_PL_GET (*pl becomes the
 * first lock of another owner in the way, pl_type LK_PL_UN if none),
 * LK_PL_SET (lock, convert or, with LK_PL_UN, unlock the range; -EAGAIN if
 * another owner is in the way), LK_PL_CLOSE (every lock of pl_owner on
 * pl_ino goes, both classes).  -ENOTCONN once the connection is gone,
 * -EINVAL for a bad range or type.
 */
int lkc_plock(struct lkc *c, int op, struct lk_plock *pl);
/*
 * A blocking set (F_SETLKW): sends the request and returns 0 at once with
 * its sequence number in *seq; done(arg, err) is called exactly once, on
 * the client's receiver thread (or, when the connection goes down, on the
 * thread that noticed, with the client's lock held; or, when this node
 * owns the inode's plock space and nothing is in the way, before
 * lkc_plock_wait returns, on the caller's thread, with *seq 0: done must
 * not call lkc_* functions other than lkc_plock_cancel): 0 granted, -EDEADLK,
 * -EINTR after lkc_plock_cancel, -ENOTCONN.  On a non-zero return done is
 * never called.
 */
typedef void (*lkc_plock_done_fn)(void *arg, int err);
int lkc_plock_wait(struct lkc *c, const struct lk_plock *pl, lkc_plock_done_fn done, void *arg,
		   uint32_t *seq);
/* Cancel the waiting request seq on ino: it is answered -EINTR unless
 * already granted.  Never waits (not even for the client's lock). */
int lkc_plock_cancel(struct lkc *c, uint64_t ino, uint32_t seq);

struct lkc_stats {
	uint64_t requests, grants, tries_failed, basts, rtt_ns_total, rtt_ns_max;
	/* plock spaces this node owns now; plock requests answered without
	 * lockd; spaces lockd gave it; spaces it gave back */
	uint64_t plock_owned, plock_local, plock_grants, plock_gives;
};
void lkc_get_stats(struct lkc *c, struct lkc_stats *st);

/* --- server --------------------------------------------------------------- */

struct lockd_config {
	const char *listen[8];
	int nlisten;		 /* "unix:/path" or "HOST:PORT" */
	const char *secret_file; /* NULL: none */
	uint32_t lease_ms;	 /* default 8000 */
	const char *table;	 /* NULL: fixed by the first join */
	int use_syslog;
	int verbose;
	/* optional: every log line goes here instead of stderr/syslog */
	void (*log)(void *arg, int prio, const char *line);
	void *log_arg;
	uint32_t handshake_ms;	 /* 0: 5000 */
	int insecure;		 /* TCP beyond loopback without a secret: allowed (else refused) */
	/* optional: run before a dead node's recovery is granted
	 * (docs/PROTOCOL.md "Fencing"); NULL: none */
	const char *fence_cmd;
	uint32_t fence_timeout_ms; /* 0: 60000 */
	uint32_t fence_tries;	   /* 0: 5 */
};

struct lockd;
/* Bind, then run the event loop in its own thread. */
int lockd_start(const struct lockd_config *cfg, struct lockd **out, char *err, size_t errlen);
/* Stop the loop, close every connection and listener (unix sockets unlinked), free. */
void lockd_stop(struct lockd *d);
/* Inodes the plock lock space has state for (a test's view; racy). */
size_t lockd_plock_count(struct lockd *d);
/* The address a listener ended up on ("127.0.0.1:41234" for port 0); NULL past the end. */
const char *lockd_listen_addr(struct lockd *d, int i);

#endif

/*
 * test_plock.c - shoal-lockd's plock lock space (lockd/plock.c, PROTOCOL.md
 * "Posix and flock locks") through its client (lkc_plock*), with an
 * in-process server on a Unix socket and two or three nodes:
 *
 *  - conflicts: read/read shares, read/write and write/write conflict,
 *    own locks never conflict, flock and record locks never conflict;
 *  - one owner's ranges split on a middle unlock or a type change and
 *    merge when adjacent or overlapping (seen through GET from another
 *    node), a lock to end of file;
 *  - a waiting request (lkc_plock_wait) is answered when the range frees,
 *    cancelled with EINTR, refused with EDEADLK when it closes a cycle of
 *    owners across nodes and inodes;
 *  - CLOSE drops one owner's locks and grants the waiters;
 *  - a node that leaves loses its locks; one that dies keeps them until
 *    RECOVERY_DONE of its journal, and its waiting requests go at once,
 *    also when it died silent with its socket still open (a raw node);
 *  - lockd keeps no state for an inode nobody locks (lockd_plock_count);
 *  - ownership: a node that left an inode with no lock owns its space and
 *    locks, unlocks and tests there without a round trip (lkc_stats); a
 *    request of another node makes it give its locks back first, and they
 *    are seen, also by the deadlock check; a request of the owner that
 *    would wait goes to lockd the same way; an owner that dies keeps
 *    what it may hold until its journal is recovered; an idle space goes
 *    back; a contended one is not given out again at once.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "lk_proto.h"
#include "shoal/lockd.h"

#define TABLE "test:fs"
#define END LK_PL_END_MAX

static char tdir[64], sockpath[96], addr[160];

struct tnode {
	struct lkc *c;
	uint32_t jid, lease;
	pthread_mutex_t mu;
	int nrec;
};

static void cb_recover(void *arg, uint32_t jid, const char *node)
{
	struct tnode *t = arg;

	(void)jid;
	(void)node;
	pthread_mutex_lock(&t->mu);
	t->nrec++;
	pthread_mutex_unlock(&t->mu);
}

static void cb_nop(void *arg, uint32_t type, uint64_t number, int wanted)
{
	(void)arg;
	(void)type;
	(void)number;
	(void)wanted;
}

static void cb_fenced(void *arg, const char *why)
{
	(void)arg;
	(void)why;
}

/* RECOVERs t heard so far (its receiver thread counts them) */
static int nrec(struct tnode *t)
{
	int n;

	pthread_mutex_lock(&t->mu);
	n = t->nrec;
	pthread_mutex_unlock(&t->mu);
	return n;
}

static const struct lkc_ops tops = { .bast = cb_nop, .recover = cb_recover, .fenced = cb_fenced };

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };
	nanosleep(&ts, NULL);
}

static void quiet_log(void *arg, int prio, const char *line)
{
	(void)arg;
	(void)prio;
	(void)line;
}

static struct lockd *server_start(uint32_t lease_ms)
{
	struct lockd_config cfg = { .lease_ms = lease_ms, .nlisten = 1, .log = quiet_log };
	struct lockd *d;
	char err[256];

	cfg.listen[0] = addr;
	if (lockd_start(&cfg, &d, err, sizeof(err)))
		fail_msg("lockd_start: %s", err);
	return d;
}

static void join(struct tnode *t, const char *name)
{
	struct lkc_config cfg = { .addr = addr, .node = name, .table = TABLE, .njournals = 4,
				  .ops = &tops, .arg = t, .self_recover = 1 };
	char err[256];

	memset(t, 0, sizeof(*t));
	pthread_mutex_init(&t->mu, NULL);
	if (lkc_connect(&cfg, &t->c, &t->jid, &t->lease, err, sizeof(err)))
		fail_msg("join %s: %s", name, err);
}

static int set(struct tnode *t, uint64_t ino, uint64_t owner, int type, uint64_t s, uint64_t e)
{
	struct lk_plock pl = { .pl_ino = ino, .pl_owner = owner, .pl_start = s, .pl_end = e,
			       .pl_type = (uint32_t)type, .pl_pid = 100 };
	return lkc_plock(t->c, LK_PL_SET, &pl);
}

static int flk(struct tnode *t, uint64_t ino, uint64_t owner, int type)
{
	struct lk_plock pl = { .pl_ino = ino, .pl_owner = owner, .pl_end = END,
			       .pl_type = (uint32_t)type, .pl_flags = LK_PL_FLOCK };
	return lkc_plock(t->c, LK_PL_SET, &pl);
}

/* GET as owner 999 of t over [s, e]: "un", or "TYPE START-END PID mine" */
static const char *get(struct tnode *t, uint64_t ino, int type, uint64_t s, uint64_t e)
{
	static char buf[96];
	struct lk_plock pl = { .pl_ino = ino, .pl_owner = 999, .pl_start = s, .pl_end = e,
			       .pl_type = (uint32_t)type };

	assert_int_equal(lkc_plock(t->c, LK_PL_GET, &pl), 0);
	if (pl.pl_type == LK_PL_UN)
		return "un";
	snprintf(buf, sizeof(buf), "%s %llu-%lld %u%s", pl.pl_type == LK_PL_WR ? "wr" : "rd",
		 (unsigned long long)pl.pl_start,
		 pl.pl_end == (uint64_t)END ? -1ll : (long long)pl.pl_end, pl.pl_pid,
		 pl.pl_flags & LK_PL_MINE ? " mine" : "");
	return buf;
}

static int closeo(struct tnode *t, uint64_t ino, uint64_t owner)
{
	struct lk_plock pl = { .pl_ino = ino, .pl_owner = owner };
	return lkc_plock(t->c, LK_PL_CLOSE, &pl);
}

/* An asynchronous SETW and its answer. */
struct wreq {
	pthread_mutex_t wr_mu;
	int wr_done, wr_err;
	uint32_t wr_seq;
};

static void wdone(void *arg, int err)
{
	struct wreq *w = arg;

	pthread_mutex_lock(&w->wr_mu);
	w->wr_err = err;
	w->wr_done = 1;
	pthread_mutex_unlock(&w->wr_mu);
}

static void setw(struct tnode *t, struct wreq *w, uint64_t ino, uint64_t owner, int type,
		 uint64_t s, uint64_t e)
{
	struct lk_plock pl = { .pl_ino = ino, .pl_owner = owner, .pl_start = s, .pl_end = e,
			       .pl_type = (uint32_t)type };

	memset(w, 0, sizeof(*w));
	pthread_mutex_init(&w->wr_mu, NULL);
	assert_int_equal(lkc_plock_wait(t->c, &pl, wdone, w, &w->wr_seq), 0);
}

/* w's answer within ms, or 1 (still waiting) */
static int wresult(struct wreq *w, unsigned ms)
{
	for (unsigned i = 0; i <= ms; i += 5) {
		pthread_mutex_lock(&w->wr_mu);
		int done = w->wr_done, err = w->wr_err;
		pthread_mutex_unlock(&w->wr_mu);
		if (done)
			return err;
		sleep_ms(5);
	}
	return 1;
}

/* lockd's count of inodes with state, once it settled (it runs in its thread) */
static size_t count_settled(struct lockd *d, size_t want)
{
	size_t n = 0;

	/* an owned space goes back PLOWN_IDLE_NS after its last use, at the
	 * next heartbeat answer (lease/4) */
	for (int i = 0; i < 1200; i++) {
		n = lockd_plock_count(d);
		if (n == want)
			break;
		sleep_ms(5);
	}
	return n;
}

static int setup(void **state)
{
	(void)state;
	snprintf(tdir, sizeof(tdir), "/tmp/shoal-plock-XXXXXX");
	if (!mkdtemp(tdir))
		return -1;
	snprintf(sockpath, sizeof(sockpath), "%s/lockd.sock", tdir);
	snprintf(addr, sizeof(addr), "unix:%s", sockpath);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	unlink(sockpath);
	rmdir(tdir);
	return 0;
}

static void test_conflicts_split_merge(void **state)
{
	struct lockd *d = server_start(8000);
	struct tnode a, b;

	(void)state;
	join(&a, "a");
	join(&b, "b");
	assert_int_equal(lkc_plock_supported(a.c), 1); /* CHALLENGE cflags PLOCK */
	/* read locks share; a write conflicts with either; own locks never */
	assert_int_equal(set(&a, 5, 1, LK_PL_RD, 0, 99), 0);
	assert_int_equal(set(&b, 5, 1, LK_PL_RD, 50, 149), 0);
	assert_int_equal(set(&b, 5, 2, LK_PL_WR, 90, 95), -EAGAIN);
	assert_int_equal(set(&a, 5, 1, LK_PL_WR, 0, 49), 0); /* converts its own */
	assert_int_equal(set(&a, 5, 1, LK_PL_WR, 0, 60), -EAGAIN); /* b reads 50- */
	assert_string_equal(get(&b, 5, LK_PL_RD, 0, 10), "wr 0-49 100");
	assert_string_equal(get(&a, 5, LK_PL_WR, 0, 10), "wr 0-49 100 mine");
	assert_string_equal(get(&b, 5, LK_PL_RD, 50, 99), "un");
	assert_string_equal(get(&b, 5, LK_PL_WR, 50, 99), "rd 50-99 100");
	/* unlock of a middle piece splits; the pieces are reported apart */
	assert_int_equal(set(&a, 5, 1, LK_PL_UN, 10, 19), 0);
	assert_string_equal(get(&b, 5, LK_PL_WR, 10, 19), "un");
	assert_string_equal(get(&b, 5, LK_PL_WR, 5, 25), "wr 0-9 100");
	assert_string_equal(get(&b, 5, LK_PL_WR, 15, 25), "wr 20-49 100");
	/* adjacent and overlapping pieces of one type merge */
	assert_int_equal(set(&a, 5, 1, LK_PL_WR, 10, 19), 0);
	assert_string_equal(get(&b, 5, LK_PL_WR, 0, 49), "wr 0-49 100");
	/* to end of file */
	assert_int_equal(set(&a, 5, 1, LK_PL_WR, 1000, END), 0);
	assert_string_equal(get(&b, 5, LK_PL_RD, 1ull << 40, 1ull << 40), "wr 1000--1 100");
	assert_int_equal(set(&b, 5, 1, LK_PL_RD, 999, 999), 0);
	assert_int_equal(set(&b, 5, 1, LK_PL_RD, 999, 1000), -EAGAIN);
	/* flock and record locks never conflict; flock converts */
	assert_int_equal(flk(&b, 5, 7, LK_PL_WR), 0);
	assert_int_equal(flk(&a, 5, 8, LK_PL_RD), -EAGAIN);
	assert_int_equal(flk(&b, 5, 7, LK_PL_RD), 0);
	assert_int_equal(flk(&a, 5, 8, LK_PL_RD), 0);
	assert_int_equal(flk(&a, 5, 8, LK_PL_WR), -EAGAIN);
	/* bad requests */
	assert_int_equal(set(&a, 5, 1, LK_PL_WR, 10, 9), -EINVAL);
	assert_int_equal(set(&a, 5, 1, 3, 0, 9), -EINVAL);
	/* every owner lets go: nothing is left */
	assert_int_equal(closeo(&a, 5, 1), 0);
	assert_int_equal(closeo(&a, 5, 8), 0);
	assert_int_equal(set(&b, 5, 1, LK_PL_UN, 0, END), 0);
	assert_int_equal(count_settled(d, 1), 1); /* b's flock */
	assert_int_equal(flk(&b, 5, 7, LK_PL_UN), 0);
	assert_int_equal(count_settled(d, 0), 0);
	lkc_close(a.c);
	lkc_close(b.c);
	lockd_stop(d);
}

static void test_wait_cancel_deadlock(void **state)
{
	struct lockd *d = server_start(8000);
	struct tnode a, b;
	struct wreq w1, w2, w3;

	(void)state;
	join(&a, "a");
	join(&b, "b");
	/* granted when the range frees */
	assert_int_equal(set(&a, 7, 1, LK_PL_WR, 0, 9), 0);
	setw(&b, &w1, 7, 1, LK_PL_RD, 5, 5);
	assert_int_equal(wresult(&w1, 100), 1);
	assert_int_equal(set(&a, 7, 1, LK_PL_UN, 0, 4), 0);
	assert_int_equal(wresult(&w1, 100), 1); /* 5 is still a's */
	assert_int_equal(set(&a, 7, 1, LK_PL_RD, 5, 9), 0); /* write made read: b reads too */
	assert_int_equal(wresult(&w1, 2000), 0);
	assert_int_equal(set(&a, 7, 1, LK_PL_WR, 5, 5), -EAGAIN); /* b reads 5 */
	/* cancelled: EINTR, and it never holds */
	setw(&b, &w2, 7, 2, LK_PL_WR, 8, 8);
	assert_int_equal(wresult(&w2, 50), 1);
	assert_int_equal(lkc_plock_cancel(b.c, 7, w2.wr_seq), 0);
	assert_int_equal(wresult(&w2, 2000), -EINTR);
	assert_int_equal(closeo(&a, 7, 1), 0);
	assert_string_equal(get(&a, 7, LK_PL_WR, 0, 100), "rd 5-5 0");
	assert_int_equal(lkc_plock_cancel(b.c, 7, w2.wr_seq), 0); /* twice: nothing */
	/* a cycle a:1 -> b:1 -> a:1 across two inodes: the second wait is refused */
	assert_int_equal(set(&a, 8, 1, LK_PL_WR, 0, 0), 0);
	assert_int_equal(set(&b, 9, 1, LK_PL_WR, 0, 0), 0);
	setw(&a, &w1, 9, 1, LK_PL_WR, 0, 0);
	assert_int_equal(wresult(&w1, 50), 1);
	setw(&b, &w2, 8, 1, LK_PL_WR, 0, 0);
	assert_int_equal(wresult(&w2, 2000), -EDEADLK);
	/* the same owner number on another node is another owner: no cycle */
	setw(&b, &w3, 8, 2, LK_PL_WR, 0, 0);
	assert_int_equal(wresult(&w3, 50), 1);
	/* b lets go of 9: a's wait is granted; a closes: b:2 gets 8 */
	assert_int_equal(closeo(&b, 9, 1), 0);
	assert_int_equal(wresult(&w1, 2000), 0);
	assert_int_equal(closeo(&a, 8, 1), 0);
	assert_int_equal(wresult(&w3, 2000), 0);
	assert_int_equal(closeo(&a, 9, 1), 0);
	assert_int_equal(closeo(&b, 8, 2), 0);
	assert_int_equal(closeo(&b, 7, 1), 0);
	assert_int_equal(count_settled(d, 0), 0);
	/* a node that leaves loses its locks and its waits */
	assert_int_equal(set(&a, 10, 1, LK_PL_WR, 0, END), 0);
	setw(&a, &w1, 11, 1, LK_PL_WR, 0, END);
	assert_int_equal(wresult(&w1, 2000), 0);
	assert_int_equal(set(&b, 11, 2, LK_PL_WR, 0, 0), -EAGAIN);
	setw(&a, &w2, 12, 1, LK_PL_WR, 0, 0);
	assert_int_equal(wresult(&w2, 2000), 0);
	setw(&b, &w3, 12, 1, LK_PL_WR, 0, 0);
	assert_int_equal(wresult(&w3, 50), 1);
	lkc_close(a.c);
	assert_int_equal(wresult(&w3, 2000), 0);
	assert_int_equal(set(&b, 10, 2, LK_PL_WR, 0, END), 0);
	assert_int_equal(closeo(&b, 10, 2), 0);
	assert_int_equal(closeo(&b, 12, 1), 0);
	assert_int_equal(count_settled(d, 0), 0);
	lkc_close(b.c);
	lockd_stop(d);
}

static void test_death(void **state)
{
	struct lockd *d = server_start(1000);
	struct tnode a, b;
	struct wreq w1, w2;

	(void)state;
	join(&a, "a");
	join(&b, "b");
	assert_int_equal(set(&b, 20, 1, LK_PL_WR, 0, 9), 0);
	assert_int_equal(set(&a, 21, 1, LK_PL_WR, 0, 9), 0);
	setw(&b, &w1, 21, 1, LK_PL_WR, 0, 0);	/* b waits for a */
	setw(&a, &w2, 20, 2, LK_PL_RD, 0, 0);	/* a waits for b */
	assert_int_equal(wresult(&w2, 50), 1);
	/* b goes as a node that died: its waits go, its locks stay */
	lkc_withdraw(b.c, "test: dies");
	assert_int_equal(wresult(&w1, 2000), -ENOTCONN);
	for (int i = 0; i < 1200; i++) {
		pthread_mutex_lock(&a.mu);
		int n = a.nrec;
		pthread_mutex_unlock(&a.mu);
		if (n)
			break;
		sleep_ms(5);
	}
	assert_int_equal(nrec(&a), 1); /* b is dead: its journal needs replaying */
	assert_int_equal(set(&a, 21, 1, LK_PL_UN, 0, 9), 0);
	assert_int_equal(count_settled(d, 1), 1); /* 21 is free: only b's 20 is left */
	assert_int_equal(wresult(&w2, 100), 1);
	assert_int_equal(set(&a, 20, 3, LK_PL_WR, 5, 5), -EAGAIN);
	/* until a replayed b's journal */
	assert_int_equal(lkc_lock(a.c, 9, b.jid, LK_EX, 0, NULL, NULL), LK_EX);
	assert_int_equal(set(&a, 20, 3, LK_PL_WR, 5, 5), -EAGAIN);
	assert_int_equal(lkc_recovery_done(a.c, b.jid), 0);
	assert_int_equal(wresult(&w2, 2000), 0);
	assert_int_equal(set(&a, 20, 3, LK_PL_WR, 5, 5), 0);
	assert_int_equal(closeo(&a, 20, 2), 0);
	assert_int_equal(closeo(&a, 20, 3), 0);
	assert_int_equal(count_settled(d, 0), 0);
	lkc_unlock(a.c, 9, b.jid, NULL);
	lkc_close(b.c);
	lkc_close(a.c);
	lockd_stop(d);
}

/* A raw node (lk_proto.h): joins, sends frames, then goes silent. */
static int raw_frame(int fd, uint8_t *buf)
{
	size_t have = 0, want = 4;

	while (have < want) {
		ssize_t n = read(fd, buf + have, want - have);
		if (n <= 0)
			return -1;
		have += (size_t)n;
		if (have == 4 && want == 4) {
			want = 4 + lkp_get32(buf);
			if (want > LKP_MAX_FRAME)
				return -1;
		}
	}
	return lkp_get16(buf + 4);
}

static int raw_join(const char *name)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	uint8_t buf[LKP_MAX_FRAME], *p = buf + LKP_HDR;
	size_t nl = strlen(name), tl = strlen(TABLE), len;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct timeval tv = { 3, 0 };

	assert_true(fd >= 0);
	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", sockpath);
	assert_int_equal(connect(fd, (struct sockaddr *)&sun, sizeof(sun)), 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	assert_int_equal(raw_frame(fd, buf), LKP_CHALLENGE);
	len = lkp_hdr(buf, LKP_JOIN, 0, LKP_JOIN_FIXED + nl + tl);
	memset(p, 0, LKP_JOIN_FIXED);
	lkp_put32(p, LKP_VERSION);
	lkp_put32(p + 4, 4);
	p[40] = (uint8_t)nl;
	p[41] = (uint8_t)tl;
	memcpy(p + 44, name, nl);
	memcpy(p + 44 + nl, TABLE, tl);
	assert_int_equal(send(fd, buf, len, MSG_NOSIGNAL), (ssize_t)len);
	assert_int_equal(raw_frame(fd, buf), LKP_JOIN_OK);
	return fd;
}

static void raw_plock(int fd, uint32_t seq, int op, uint64_t ino, int type, uint64_t s, uint64_t e)
{
	uint8_t f[LKP_HDR + LKP_PLOCK_LEN], *p = f + LKP_HDR;

	lkp_hdr(f, LKP_PLOCK, seq, LKP_PLOCK_LEN);
	memset(p, 0, LKP_PLOCK_LEN);
	lkp_put32(p, (uint32_t)op);
	lkp_put64(p + 8, ino);
	lkp_put64(p + 16, 1);
	lkp_put64(p + 24, s);
	lkp_put64(p + 32, e);
	lkp_put32(p + 40, (uint32_t)type);
	assert_int_equal(send(fd, f, sizeof(f), MSG_NOSIGNAL), (ssize_t)sizeof(f));
}

static void test_silent_death(void **state)
{
	struct lockd *d = server_start(1000);
	uint8_t buf[LKP_MAX_FRAME];
	struct tnode a;
	int fd;

	(void)state;
	join(&a, "a");
	fd = raw_join("v");
	raw_plock(fd, 1, 2, 30, LK_PL_WR, 0, 9); /* SET: granted */
	assert_int_equal(raw_frame(fd, buf), LKP_PLOCK_REPLY);
	assert_int_equal(lkp_get32(buf + LKP_HDR), 0);
	assert_int_equal(set(&a, 31, 1, LK_PL_WR, 0, 0), 0);
	raw_plock(fd, 2, 3, 31, LK_PL_WR, 0, 0); /* SETW: waits for a */
	/* v goes silent, its socket open: dead after its lease */
	for (int i = 0; i < 1200 && !nrec(&a); i++)
		sleep_ms(5);
	assert_int_equal(nrec(&a), 1);
	/* its waiting request went with it: a's unlock grants nobody */
	assert_int_equal(set(&a, 31, 1, LK_PL_UN, 0, 0), 0);
	assert_int_equal(set(&a, 31, 2, LK_PL_WR, 0, 0), 0);
	/* its granted lock stays until its journal is recovered */
	assert_int_equal(set(&a, 30, 1, LK_PL_RD, 5, 5), -EAGAIN);
	assert_int_equal(lkc_lock(a.c, 9, 1, LK_EX, 0, NULL, NULL), LK_EX);
	assert_int_equal(lkc_recovery_done(a.c, 1), 0);
	assert_int_equal(set(&a, 30, 1, LK_PL_RD, 5, 5), 0);
	assert_int_equal(closeo(&a, 30, 1), 0);
	assert_int_equal(closeo(&a, 31, 2), 0);
	assert_int_equal(count_settled(d, 0), 0);
	close(fd);
	lkc_close(a.c);
	lockd_stop(d);
}

static struct lkc_stats stats(struct tnode *t)
{
	struct lkc_stats st;

	lkc_get_stats(t->c, &st);
	return st;
}

/* Make t the owner of ino's plock space (a lock and unlock of a space
 * nobody locks: lockd gives it out with the unlock's answer). */
static void own(struct tnode *t, uint64_t ino)
{
	uint64_t before = stats(t).plock_owned;

	assert_int_equal(set(t, ino, 999, LK_PL_WR, 0, 0), 0);
	assert_int_equal(set(t, ino, 999, LK_PL_UN, 0, 0), 0);
	assert_int_equal(stats(t).plock_owned, before + 1);
}

static void test_ownership(void **state)
{
	struct lockd *d = server_start(8000);
	struct tnode a, b;
	struct lkc_stats s0, s1;
	struct wreq w1, w2;

	(void)state;
	join(&a, "a");
	join(&b, "b");
	/* the first lock and unlock go to lockd; the unlock left nothing: a owns 50 */
	assert_int_equal(set(&a, 50, 1, LK_PL_WR, 0, 0), 0);
	assert_int_equal(set(&a, 50, 1, LK_PL_UN, 0, 0), 0);
	s0 = stats(&a);
	assert_int_equal(s0.plock_owned, 1);
	assert_int_equal(s0.plock_grants, 1);
	/* uncontended lock and unlock: no request reaches lockd */
	for (int i = 0; i < 100; i++) {
		assert_int_equal(set(&a, 50, 1, LK_PL_WR, 0, 0), 0);
		assert_int_equal(set(&a, 50, 1, LK_PL_UN, 0, 0), 0);
	}
	s1 = stats(&a);
	assert_int_equal(s1.requests, s0.requests);
	assert_int_equal(s1.plock_local - s0.plock_local, 200);
	/* the owner's own conflicts, tests and flock conversions, answered here */
	assert_int_equal(set(&a, 50, 1, LK_PL_WR, 10, 19), 0);
	assert_int_equal(set(&a, 50, 2, LK_PL_RD, 15, 15), -EAGAIN);
	assert_string_equal(get(&a, 50, LK_PL_RD, 0, 100), "wr 10-19 100 mine");
	assert_int_equal(flk(&a, 50, 7, LK_PL_WR), 0);
	assert_int_equal(flk(&a, 50, 8, LK_PL_RD), -EAGAIN);
	assert_int_equal(flk(&a, 50, 7, LK_PL_RD), 0);
	assert_int_equal(stats(&a).requests, s0.requests);
	/* b asks: a gives its locks back first, and b sees them */
	assert_int_equal(set(&b, 50, 1, LK_PL_RD, 15, 15), -EAGAIN);
	s1 = stats(&a);
	assert_int_equal(s1.plock_owned, 0);
	assert_int_equal(s1.plock_gives, 1);
	assert_string_equal(get(&b, 50, LK_PL_RD, 0, 100), "wr 10-19 100");
	assert_int_equal(flk(&b, 50, 9, LK_PL_WR), -EAGAIN);
	assert_int_equal(flk(&b, 50, 9, LK_PL_RD), 0);
	/* now lockd's: a's unlock grants b's wait */
	setw(&b, &w1, 50, 1, LK_PL_WR, 12, 12);
	assert_int_equal(wresult(&w1, 50), 1);
	assert_int_equal(set(&a, 50, 1, LK_PL_UN, 0, END), 0);
	assert_int_equal(wresult(&w1, 2000), 0);
	/* contended a moment ago: emptied, it is not given out again at once */
	assert_int_equal(closeo(&b, 50, 1), 0);
	assert_int_equal(flk(&a, 50, 7, LK_PL_UN), 0);
	assert_int_equal(flk(&b, 50, 9, LK_PL_UN), 0);
	assert_int_equal(stats(&a).plock_owned, 0);
	assert_int_equal(stats(&b).plock_owned, 0);

	/* a request of the owner that would wait: the space goes back and
	 * the wait is lockd's, granted when the range frees */
	own(&a, 60);
	assert_int_equal(set(&a, 60, 1, LK_PL_WR, 0, 9), 0);
	setw(&a, &w1, 60, 2, LK_PL_WR, 5, 5);
	assert_int_equal(wresult(&w1, 50), 1);
	assert_int_equal(stats(&a).plock_owned, 0);
	assert_string_equal(get(&b, 60, LK_PL_RD, 0, 100), "wr 0-9 100");
	assert_int_equal(set(&a, 60, 1, LK_PL_UN, 0, 9), 0);
	assert_int_equal(wresult(&w1, 2000), 0);
	assert_int_equal(closeo(&a, 60, 2), 0);

	/* a SETW on an owned space with nothing in the way: granted at once */
	own(&a, 61);
	setw(&a, &w1, 61, 1, LK_PL_WR, 0, 0);
	assert_int_equal(wresult(&w1, 0), 0);
	assert_int_equal(w1.wr_seq, 0);
	assert_int_equal(lkc_plock_cancel(a.c, 61, w1.wr_seq), 0); /* nothing to cancel */
	assert_string_equal(get(&b, 61, LK_PL_RD, 0, 0), "wr 0-0 0");

	/* a deadlock through an owned space is seen: a:1 holds 62 (owned),
	 * waits for 63 (b:1's); b:1 asks for 62 */
	own(&a, 62);
	assert_int_equal(set(&a, 62, 1, LK_PL_WR, 0, 0), 0);
	assert_int_equal(set(&b, 63, 1, LK_PL_WR, 0, 0), 0);
	setw(&a, &w1, 63, 1, LK_PL_WR, 0, 0);
	assert_int_equal(wresult(&w1, 50), 1);
	setw(&b, &w2, 62, 1, LK_PL_WR, 0, 0);
	assert_int_equal(wresult(&w2, 2000), -EDEADLK);
	assert_int_equal(closeo(&b, 63, 1), 0);
	assert_int_equal(wresult(&w1, 2000), 0);
	assert_int_equal(closeo(&a, 62, 1), 0);
	assert_int_equal(closeo(&a, 63, 1), 0);
	assert_int_equal(closeo(&a, 61, 1), 0);

	/* an idle space goes back: lockd keeps nothing */
	assert_int_equal(count_settled(d, 0), 0);
	assert_int_equal(stats(&a).plock_owned, 0);
	lkc_close(a.c);
	lkc_close(b.c);
	lockd_stop(d);
}

/* An owner that dies: what it may hold stays held until its journal is
 * recovered, whoever asks. */
static void test_owner_death(void **state)
{
	struct lockd *d = server_start(1000);
	struct tnode a, b;
	struct wreq w1, w2;

	(void)state;
	join(&a, "a");
	join(&b, "b");
	own(&a, 70);
	assert_int_equal(set(&a, 70, 1, LK_PL_WR, 0, 0), 0); /* lockd never hears of it */
	lkc_withdraw(a.c, "test: a dies"); /* its socket goes; lockd waits for its lease */
	assert_int_equal(set(&b, 70, 1, LK_PL_RD, 5, 5), -EAGAIN); /* maybe a's */
	setw(&b, &w1, 70, 1, LK_PL_WR, 0, 0);
	setw(&b, &w2, 70, 2, LK_PL_RD, 9, 9);
	for (int i = 0; i < 1200 && !nrec(&b); i++)
		sleep_ms(5);
	assert_int_equal(nrec(&b), 1);
	assert_int_equal(wresult(&w1, 100), 1); /* dead, not yet recovered */
	assert_int_equal(lkc_lock(b.c, 9, a.jid, LK_EX, 0, NULL, NULL), LK_EX);
	assert_int_equal(lkc_recovery_done(b.c, a.jid), 0);
	assert_int_equal(wresult(&w1, 2000), 0);
	assert_int_equal(wresult(&w2, 2000), 0);
	assert_int_equal(closeo(&b, 70, 1), 0);
	assert_int_equal(closeo(&b, 70, 2), 0);
	assert_int_equal(count_settled(d, 0), 0);
	lkc_close(a.c);
	lkc_close(b.c);
	lockd_stop(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_conflicts_split_merge, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wait_cancel_deadlock, setup, teardown),
		cmocka_unit_test_setup_teardown(test_death, setup, teardown),
		cmocka_unit_test_setup_teardown(test_silent_death, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ownership, setup, teardown),
		cmocka_unit_test_setup_teardown(test_owner_death, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

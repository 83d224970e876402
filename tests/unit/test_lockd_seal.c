/*
 * test_lockd_seal.c - lock traffic with a secret (issue 23, item 9;
 * docs/PROTOCOL.md "Sealed frames"): every frame after JOIN is sealed
 * (AEAD, a per-direction counter as nonce), and the client checks that
 * lockd knows the secret.  An in-process lockd on a Unix socket, lkc
 * clients as nodes, and a man in the middle (struct mitm, a thread that
 * relays one node's connection frame by frame) that flips a byte, replays
 * an earlier frame or injects a forged one into the node's stream.
 *
 *  - the sealing itself against frames sealed by another implementation
 *    (Python's cryptography), and every flipped byte, replay, reordering
 *    and key mix-up refused;
 *  - tamper: a LOCK whose bytes were changed on the way closes the node's
 *    connection (one log line naming it), grants nothing, and the node is
 *    disconnected (it fences itself);
 *  - replay of an earlier, genuine LOCK: closed, nothing granted;
 *  - injection of a forged plaintext LOCK into a joined node's stream:
 *    closed, nothing granted;
 *  - an impostor lockd that does not know the secret (it answers JOIN
 *    with a plain JOIN_OK, or with one sealed under another secret): the
 *    client refuses it with a clear error;
 *  - the locks themselves with a secret: grant, BAST, LVB, batches,
 *    plocks and heartbeats past several fencing deadlines, on Unix and TCP.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "lk_crypto.h"
#include "lk_proto.h"
#include "shoal/lockd.h"

#define TABLE "test:fs"
#define MS 1000000ull

static char tdir[64], sockpath[96], addr[160], secret[160], other[160];
static char mitm_path[96], mitm_addr[160];

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char log_buf[1 << 16];
static size_t log_len;

static void cap_log(void *arg, int prio, const char *line)
{
	size_t n = strlen(line);

	(void)arg;
	(void)prio;
	pthread_mutex_lock(&log_mu);
	if (log_len + n + 2 < sizeof(log_buf)) {
		memcpy(log_buf + log_len, line, n);
		log_buf[log_len + n] = '\n';
		log_len += n + 1;
		log_buf[log_len] = 0;
	}
	pthread_mutex_unlock(&log_mu);
	if (getenv("SHOAL_TEST_VERBOSE"))
		fprintf(stderr, "  lockd: %s\n", line);
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

/* Wait up to ms for the server log to contain s. */
static int log_wait(const char *s, unsigned ms)
{
	uint64_t end = lkp_now_ns() + ms * MS;

	for (;;) {
		pthread_mutex_lock(&log_mu);
		int found = strstr(log_buf, s) != NULL;
		pthread_mutex_unlock(&log_mu);
		if (found)
			return 1;
		if (lkp_now_ns() > end)
			return 0;
		sleep_ms(5);
	}
}

/* what a test started, stopped by teardown even when the test failed */
static struct lockd *srv;

static struct lockd *server_start(const char *secret_file, const char *listen0)
{
	struct lockd_config cfg = { .lease_ms = 1000, .secret_file = secret_file,
				    .listen = { listen0 ? listen0 : addr }, .nlisten = 1,
				    .log = cap_log };
	struct lockd *d;
	char err[256];

	pthread_mutex_lock(&log_mu);
	log_len = 0;
	log_buf[0] = 0;
	pthread_mutex_unlock(&log_mu);
	if (lockd_start(&cfg, &d, err, sizeof(err)))
		fail_msg("lockd_start: %s", err);
	srv = d;
	return d;
}

/* --- a node -------------------------------------------------------------------------- */

struct tnode {
	struct lkc *c;
	uint32_t jid, lease;
	pthread_mutex_t mu;
	int nbast, fenced;
	char why[256];
};

static void cb_bast(void *arg, uint32_t type, uint64_t number, int wanted)
{
	struct tnode *t = arg;

	(void)type;
	(void)number;
	(void)wanted;
	pthread_mutex_lock(&t->mu);
	t->nbast++;
	pthread_mutex_unlock(&t->mu);
}

static void cb_fenced(void *arg, const char *why)
{
	struct tnode *t = arg;

	pthread_mutex_lock(&t->mu);
	t->fenced++;
	snprintf(t->why, sizeof(t->why), "%s", why);
	pthread_mutex_unlock(&t->mu);
}

static const struct lkc_ops tops = { .bast = cb_bast, .fenced = cb_fenced };

static int tnode_try_join(struct tnode *t, const char *name, const char *a, const char *key,
			  char *err, size_t errlen)
{
	struct lkc_config cfg = { .addr = a, .node = name, .table = TABLE, .njournals = 4,
				  .secret_file = key, .ops = &tops, .arg = t, .self_recover = 1 };

	memset(t, 0, sizeof(*t));
	pthread_mutex_init(&t->mu, NULL);
	return lkc_connect(&cfg, &t->c, &t->jid, &t->lease, err, errlen);
}

static void tnode_join(struct tnode *t, const char *name, const char *a, const char *key)
{
	char err[256];

	if (tnode_try_join(t, name, a, key, err, sizeof(err)))
		fail_msg("join %s: %s", name, err);
}

static int tnode_get(struct tnode *t, int *field)
{
	int v;

	pthread_mutex_lock(&t->mu);
	v = *field;
	pthread_mutex_unlock(&t->mu);
	return v;
}

/* Wait up to 3 s for t to fence itself (its connection is gone). */
static int wait_fenced(struct tnode *t)
{
	uint64_t end = lkp_now_ns() + 3000 * MS;

	while (!tnode_get(t, &t->fenced) && lkp_now_ns() < end)
		sleep_ms(5);
	return tnode_get(t, &t->fenced);
}

static void tnode_close(struct tnode *t)
{
	lkc_close(t->c);
	t->c = NULL;
}

static struct tnode na, nb; /* the nodes of a test */

/* Nobody holds (2, number) in a mode incompatible with EX: t gets it. */
static void assert_free(struct tnode *t, uint64_t number)
{
	assert_int_equal(lkc_lock(t->c, 2, number, LK_EX, LKF_TRY, NULL, NULL), LK_EX);
	assert_int_equal(lkc_unlock(t->c, 2, number, NULL), 0);
}

/* --- the man in the middle ----------------------------------------------------------- */

/*
 * One connection: the node connects to mitm_path, the relay connects to
 * lockd and copies bytes both ways.  Frames from the node are relayed
 * whole, one at a time, so what the test asks for happens at a frame
 * boundary: flip one byte of the next frame of a type, keep a copy of
 * the next frame of a type, or send bytes of its own to lockd.
 */
struct mitm {
	int lfd;
	pthread_t th;
	pthread_mutex_t mu;
	int stop;
	int flip_type, flip_off;     /* flip byte flip_off of the next frame of flip_type */
	int save_type;		     /* keep a copy of the next frame of save_type */
	uint8_t saved[LKP_MAX_FRAME];
	size_t savedlen;
	uint8_t inject[LKP_MAX_FRAME];
	size_t injectlen;	     /* to send to lockd at the next frame boundary */
	int nframes;		     /* from the node, relayed or changed */
	int injected;		     /* injections sent */
};

static struct mitm *mitm_on, mm; /* the relay of a test */

static int write_whole(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static void *mitm_run(void *arg)
{
	struct mitm *m = arg;
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	uint8_t in[2 * LKP_MAX_FRAME], buf[65536];
	size_t have = 0;
	int cfd, sfd;

	cfd = accept(m->lfd, NULL, NULL);
	if (cfd < 0)
		return NULL;
	sfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", sockpath);
	if (connect(sfd, (struct sockaddr *)&sun, sizeof(sun))) {
		close(cfd);
		close(sfd);
		return NULL;
	}
	for (;;) {
		struct pollfd pf[2] = { { .fd = cfd, .events = POLLIN }, { .fd = sfd, .events = POLLIN } };
		ssize_t n;

		pthread_mutex_lock(&m->mu);
		if (m->stop) {
			pthread_mutex_unlock(&m->mu);
			break;
		}
		if (m->injectlen) {
			write_whole(sfd, m->inject, m->injectlen);
			m->injectlen = 0;
			m->injected++;
		}
		pthread_mutex_unlock(&m->mu);
		if (poll(pf, 2, 5) <= 0)
			continue;
		if (pf[1].revents) {
			n = read(sfd, buf, sizeof(buf));
			if (n <= 0 || write_whole(cfd, buf, (size_t)n))
				break;
		}
		if (pf[0].revents) {
			n = read(cfd, in + have, sizeof(in) - have);
			if (n <= 0)
				break;
			have += (size_t)n;
			while (have >= 4 && have >= 4 + (size_t)lkp_get32(in) &&
			       lkp_get32(in) <= LKP_MAX_FRAME - 4) {
				size_t fl = 4 + lkp_get32(in);
				int type = lkp_get16(in + 4), bad;

				pthread_mutex_lock(&m->mu);
				if (m->flip_type == type && m->flip_off < (int)fl) {
					in[m->flip_off] ^= 0x01;
					m->flip_type = -1;
				}
				if (m->save_type == type) {
					memcpy(m->saved, in, fl);
					m->savedlen = fl;
					m->save_type = -1;
				}
				m->nframes++;
				pthread_mutex_unlock(&m->mu);
				bad = write_whole(sfd, in, fl);
				memmove(in, in + fl, have - fl);
				have -= fl;
				if (bad)
					goto out;
			}
		}
	}
out:
	close(cfd);
	close(sfd);
	return NULL;
}

static void mitm_start(struct mitm *m)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };

	memset(m, 0, sizeof(*m));
	pthread_mutex_init(&m->mu, NULL);
	m->flip_type = m->save_type = -1;
	m->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(m->lfd >= 0);
	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", mitm_path);
	assert_int_equal(bind(m->lfd, (struct sockaddr *)&sun, sizeof(sun)), 0);
	assert_int_equal(listen(m->lfd, 4), 0);
	assert_int_equal(pthread_create(&m->th, NULL, mitm_run, m), 0);
	mitm_on = m;
}

static void mitm_stop(struct mitm *m)
{
	pthread_mutex_lock(&m->mu);
	m->stop = 1;
	pthread_mutex_unlock(&m->mu);
	shutdown(m->lfd, SHUT_RDWR);
	pthread_join(m->th, NULL);
	close(m->lfd);
	unlink(mitm_path);
	mitm_on = NULL;
}

/* Hand n bytes to the relay for lockd; wait (up to 3 s) until they went. */
static void mitm_inject(struct mitm *m, const uint8_t *p, size_t n)
{
	uint64_t end = lkp_now_ns() + 3000 * MS;
	int before, sent = 0;

	pthread_mutex_lock(&m->mu);
	before = m->injected;
	memcpy(m->inject, p, n);
	m->injectlen = n;
	pthread_mutex_unlock(&m->mu);
	while (!sent && lkp_now_ns() < end) {
		sleep_ms(2);
		pthread_mutex_lock(&m->mu);
		sent = m->injected > before;
		pthread_mutex_unlock(&m->mu);
	}
	assert_true(sent);
}

static int setup(void **state)
{
	(void)state;
	snprintf(tdir, sizeof(tdir), "/tmp/shoal-seal-XXXXXX");
	if (!mkdtemp(tdir))
		return -1;
	snprintf(sockpath, sizeof(sockpath), "%s/lockd.sock", tdir);
	snprintf(addr, sizeof(addr), "unix:%s", sockpath);
	snprintf(mitm_path, sizeof(mitm_path), "%s/mitm.sock", tdir);
	snprintf(mitm_addr, sizeof(mitm_addr), "unix:%s", mitm_path);
	snprintf(secret, sizeof(secret), "%s/secret", tdir);
	snprintf(other, sizeof(other), "%s/other", tdir);
	for (int i = 0; i < 2; i++) {
		FILE *f = fopen(i ? other : secret, "w");
		if (!f)
			return -1;
		fputs(i ? "not sesame\n" : "sesame\n", f);
		fclose(f);
		chmod(i ? other : secret, 0600);
	}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	if (na.c)
		tnode_close(&na);
	if (nb.c)
		tnode_close(&nb);
	if (mitm_on)
		mitm_stop(mitm_on);
	if (srv)
		lockd_stop(srv);
	srv = NULL;
	unlink(secret);
	unlink(other);
	unlink(mitm_path);
	unlink(sockpath);
	rmdir(tdir);
	return 0;
}

/* --- tests --------------------------------------------------------------------------- */

static void unhex(const char *h, uint8_t *out, size_t *n)
{
	*n = strlen(h) / 2;
	for (size_t i = 0; i < *n; i++) {
		unsigned v;
		sscanf(h + 2 * i, "%2x", &v);
		out[i] = (uint8_t)v;
	}
}

/*
 * The construction of docs/PROTOCOL.md "Sealed frames", against frames
 * sealed by an independent implementation (Python's cryptography: HKDF
 * and ChaCha20Poly1305 with the documented salt, info, nonce and AAD):
 * secret "sesame", server nonce bytes 7i+1, client nonce 255-i, node
 * "node-a".  Then every byte flipped, a replay, a reordering, the other
 * direction's key and an unsealed frame all fail to open, and the
 * counter moves only on success.
 */
static void test_seal_vectors(void **state)
{
	static const char *lock0 = "4c00000005000100010000009c42236d5653832175ec4b11ec47e6689b4f315bd88a800c2753ec6624d114efb93f200e291a837308584971122060742e48c68d68fb4b18f022645f2ad591fea67b48b9";
	static const char *hb1 = "1800000009000100020000009f00df80978bf1af23d9c81ae257d30e";
	static const char *joinok0 = "200000000300010000000000e2be145e301f82894503347cfe5086ccde272cd225cbb250";
	uint8_t sn[LKP_NONCE], cn[LKP_NONCE], f[LKP_MAX_FRAME], want[LKP_MAX_FRAME], keep[LKP_MAX_FRAME];
	struct lk_session cli, srvs;
	size_t n, wl;

	(void)state;
	for (int i = 0; i < LKP_NONCE; i++) {
		sn[i] = (uint8_t)(i * 7 + 1);
		cn[i] = (uint8_t)(255 - i);
	}
	assert_int_equal(lk_session_init(&cli, "sesame", 6, sn, cn, "node-a", 6, 0), 0);
	assert_int_equal(lk_session_init(&srvs, "sesame", 6, sn, cn, "node-a", 6, 1), 0);

	/* client -> server: LOCK (2, 0x100) EX seq 1, then HEARTBEAT seq 2 */
	lkp_hdr(f, LKP_LOCK, 1, LKP_LOCK_LEN);
	memset(f + LKP_HDR, 0, LKP_LOCK_LEN);
	lkp_put32(f + LKP_HDR, 2);
	lkp_put64(f + LKP_HDR + 4, 0x100);
	lkp_put32(f + LKP_HDR + 12, LK_EX);
	n = lk_seal_frame(&cli, f, LKP_LOCK_LEN);
	unhex(lock0, want, &wl);
	assert_int_equal(n, wl);
	assert_int_equal(n, LKP_HDR + LKP_LOCK_LEN + LK_TAG_LEN);
	assert_memory_equal(f, want, wl);
	memcpy(keep, f, n);
	/* every byte matters: header (AAD), ciphertext and tag */
	for (size_t i = 0; i < n; i++) {
		memcpy(f, keep, n);
		f[i] ^= 0x20;
		assert_int_equal(lk_open_frame(&srvs, f, n), -EBADMSG);
	}
	assert_int_equal(srvs.ls_rxn, 0);
	memcpy(f, keep, n);
	assert_int_equal(lk_open_frame(&cli, f, n), -EBADMSG); /* the other direction's key */
	memcpy(f, keep, n);
	assert_int_equal(lk_open_frame(&srvs, f, n), LKP_LOCK_LEN);
	assert_int_equal(lkp_get16(f + 6), 0);
	assert_int_equal(lkp_get64(f + LKP_HDR + 4), 0x100);
	memcpy(f, keep, n);
	assert_int_equal(lk_open_frame(&srvs, f, n), -EBADMSG); /* replayed */

	lkp_hdr(f, LKP_HEARTBEAT, 2, 0);
	n = lk_seal_frame(&cli, f, 0);
	unhex(hb1, want, &wl);
	assert_int_equal(n, wl);
	assert_memory_equal(f, want, wl);
	assert_int_equal(lk_open_frame(&srvs, f, n), 0);

	/* server -> client: JOIN_OK (jid 0, lease 8000) */
	lkp_hdr(f, LKP_JOIN_OK, 0, LKP_JOIN_OK_LEN);
	lkp_put32(f + LKP_HDR, 0);
	lkp_put32(f + LKP_HDR + 4, 8000);
	n = lk_seal_frame(&srvs, f, LKP_JOIN_OK_LEN);
	unhex(joinok0, want, &wl);
	assert_int_equal(n, wl);
	assert_memory_equal(f, want, wl);
	assert_int_equal(lk_open_frame(&cli, f, n), LKP_JOIN_OK_LEN);
	assert_int_equal(lkp_get32(f + LKP_HDR + 4), 8000);

	/* reordered: the second frame first */
	lkp_hdr(keep, LKP_HEARTBEAT_ACK, 5, 0);
	lkp_hdr(f, LKP_HEARTBEAT_ACK, 6, 0);
	assert_int_equal(lk_seal_frame(&srvs, keep, 0), LKP_HDR + LK_TAG_LEN);
	assert_int_equal(lk_seal_frame(&srvs, f, 0), LKP_HDR + LK_TAG_LEN);
	assert_int_equal(lk_open_frame(&cli, f, LKP_HDR + LK_TAG_LEN), -EBADMSG);
	assert_int_equal(lk_open_frame(&cli, keep, LKP_HDR + LK_TAG_LEN), 0);
	assert_int_equal(lk_open_frame(&cli, f, LKP_HDR + LK_TAG_LEN), 0);
	/* a plain frame, and one too short to carry a tag */
	lkp_hdr(f, LKP_HEARTBEAT_ACK, 7, 0);
	assert_int_equal(lk_open_frame(&cli, f, LKP_HDR), -EBADMSG);
	memset(f + LKP_HDR, 0, LK_TAG_LEN);
	assert_int_equal(lk_open_frame(&cli, f, LKP_HDR + LK_TAG_LEN), -EBADMSG);
	assert_int_equal(cli.ls_rxn, 3);

	/* another secret, another name or another nonce: other keys */
	for (int k = 0; k < 3; k++) {
		struct lk_session o;
		uint8_t cn2[LKP_NONCE];

		memcpy(cn2, cn, sizeof(cn2));
		cn2[0] ^= k == 2;
		assert_int_equal(lk_session_init(&o, k == 0 ? "sesamf" : "sesame", 6, sn, cn2,
						 k == 1 ? "node-b" : "node-a", 6, 1), 0);
		unhex(lock0, f, &wl);
		assert_int_equal(lk_open_frame(&o, f, wl), -EBADMSG);
		lk_session_free(&o);
	}
	lk_session_free(&cli);
	lk_session_free(&srvs);
}

/*
 * A byte of a's LOCK (2, 0x100) flipped on the way (in the low byte of
 * the resource number, where a plaintext frame would ask for 0x101): the
 * server closes a's connection with one line naming a, grants neither
 * resource, and a is disconnected.
 */
static void test_tamper(void **state)
{
	struct lockd *d = server_start(secret, NULL);
	int rc;

	(void)state;
	mitm_start(&mm);
	tnode_join(&na, "a", mitm_addr, secret);
	tnode_join(&nb, "b", addr, secret);
	assert_int_equal(lkc_lock(na.c, 2, 1, LK_EX, 0, NULL, NULL), LK_EX); /* relayed as is */
	pthread_mutex_lock(&mm.mu);
	mm.flip_type = LKP_LOCK;
	mm.flip_off = LKP_HDR + 4; /* number, low byte */
	pthread_mutex_unlock(&mm.mu);
	rc = lkc_lock(na.c, 2, 0x100, LK_EX, 0, NULL, NULL);
	if (rc >= 0)
		fail_msg("a LOCK changed on the way was granted (mode %d)", rc);
	assert_int_equal(rc, -ENOTCONN);
	assert_true(wait_fenced(&na));
	assert_true(log_wait("node a", 3000));
	assert_true(log_wait("connection closed without LEAVE", 3000));
	assert_free(&nb, 0x100);
	assert_free(&nb, 0x101);
	tnode_close(&na);
	tnode_close(&nb);
	mitm_stop(&mm);
	lockd_stop(d);
	srv = NULL;
}

/* a's genuine LOCK (2, 0x200), sent again by the man in the middle after
 * a unlocked it: closed, and nothing is granted. */
static void test_replay(void **state)
{
	struct lockd *d = server_start(secret, NULL);
	int rc;

	(void)state;
	mitm_start(&mm);
	tnode_join(&na, "a", mitm_addr, secret);
	tnode_join(&nb, "b", addr, secret);
	pthread_mutex_lock(&mm.mu);
	mm.save_type = LKP_LOCK;
	pthread_mutex_unlock(&mm.mu);
	assert_int_equal(lkc_lock(na.c, 2, 0x200, LK_EX, 0, NULL, NULL), LK_EX);
	assert_int_equal(lkc_unlock(na.c, 2, 0x200, NULL), 0);
	assert_int_equal(lkc_lock(na.c, 2, 1, LK_PR, 0, NULL, NULL), LK_PR); /* unlock done */
	pthread_mutex_lock(&mm.mu);
	assert_true(mm.savedlen > 0);
	pthread_mutex_unlock(&mm.mu);
	mitm_inject(&mm, mm.saved, mm.savedlen);
	/* a request behind the replayed frame in a's stream: once it is
	 * answered (or refused), the replayed one has been handled */
	rc = lkc_lock(na.c, 2, 2, LK_PR, 0, NULL, NULL);
	assert_free(&nb, 0x200);
	assert_int_equal(rc, -ENOTCONN);
	assert_true(wait_fenced(&na));
	assert_true(log_wait("connection closed without LEAVE", 3000));
	tnode_close(&na);
	tnode_close(&nb);
	mitm_stop(&mm);
	lockd_stop(d);
	srv = NULL;
}

/* A plaintext LOCK (2, 0x300) EX forged into a's stream after its JOIN:
 * closed, nothing granted. */
static void test_inject_plain(void **state)
{
	struct lockd *d = server_start(secret, NULL);
	uint8_t f[LKP_HDR + LKP_LOCK_LEN];
	int rc;

	(void)state;
	mitm_start(&mm);
	tnode_join(&na, "a", mitm_addr, secret);
	tnode_join(&nb, "b", addr, secret);
	assert_int_equal(lkc_lock(na.c, 2, 1, LK_PR, 0, NULL, NULL), LK_PR);
	lkp_hdr(f, LKP_LOCK, 0x7fffffff, LKP_LOCK_LEN);
	memset(f + LKP_HDR, 0, LKP_LOCK_LEN);
	lkp_put32(f + LKP_HDR, 2);
	lkp_put64(f + LKP_HDR + 4, 0x300);
	lkp_put32(f + LKP_HDR + 12, LK_EX);
	mitm_inject(&mm, f, sizeof(f));
	rc = lkc_lock(na.c, 2, 2, LK_PR, 0, NULL, NULL); /* behind the forged frame */
	assert_free(&nb, 0x300);
	assert_int_equal(rc, -ENOTCONN);
	assert_true(wait_fenced(&na));
	assert_true(log_wait("connection closed without LEAVE", 3000));
	tnode_close(&na);
	tnode_close(&nb);
	mitm_stop(&mm);
	lockd_stop(d);
	srv = NULL;
}

/* --- an impostor lockd --------------------------------------------------------------- */

struct impostor {
	int lfd;
	pthread_t th;
	const char *key_file; /* seal JOIN_OK with keys from this secret; NULL: plain */
};

static void *impostor_run(void *arg)
{
	struct impostor *im = arg;
	uint8_t buf[LKP_MAX_FRAME], nonce[LKP_NONCE] = { 7 };
	size_t have = 0;
	int fd = accept(im->lfd, NULL, NULL);

	if (fd < 0)
		return NULL;
	lkp_hdr(buf, LKP_CHALLENGE, 0, LKP_CHALLENGE_LEN);
	lkp_put32(buf + LKP_HDR, LKP_VERSION);
#ifdef LKP_CF_SEAL
	lkp_put32(buf + LKP_HDR + 4, LKP_CF_AUTH | LKP_CF_PLOCK | LKP_CF_SEAL);
#else
	lkp_put32(buf + LKP_HDR + 4, LKP_CF_AUTH | LKP_CF_PLOCK);
#endif
	lkp_put32(buf + LKP_HDR + 8, 5000);
	memcpy(buf + LKP_HDR + 12, nonce, LKP_NONCE);
	write_whole(fd, buf, LKP_HDR + LKP_CHALLENGE_LEN);
	/* the JOIN, whatever it says */
	while (have < 4 || have < 4 + (size_t)lkp_get32(buf)) {
		ssize_t n = read(fd, buf + have, sizeof(buf) - have);
		if (n <= 0)
			goto out;
		have += (size_t)n;
	}
	{
		uint8_t ok[LKP_HDR + LKP_JOIN_OK_LEN + 16];
		size_t len = lkp_hdr(ok, LKP_JOIN_OK, 0, LKP_JOIN_OK_LEN);

		lkp_put32(ok + LKP_HDR, 0);
		lkp_put32(ok + LKP_HDR + 4, 5000);
#ifdef LK_TAG_LEN
		if (im->key_file) {
			/* what lockd does, but with the impostor's secret */
			const uint8_t *join = buf + LKP_HDR;
			size_t nl = join[40], tl = join[41];
			uint16_t jf = lkp_get16(join + 42);
			const uint8_t *cnonce = join + LKP_JOIN_FIXED + nl + tl +
						(jf & LKP_JF_UUID ? LKP_UUID_LEN : 0);
			struct lk_session s;
			uint8_t *key;
			size_t keylen;
			char err[128];

			if (lkp_read_secret(im->key_file, &key, &keylen, err, sizeof(err)) ||
			    lk_session_init(&s, key, keylen, nonce, cnonce, (const char *)join + 44,
					    nl, 1))
				goto out;
			free(key);
			len = lk_seal_frame(&s, ok, LKP_JOIN_OK_LEN);
			lk_session_free(&s);
		}
#endif
		write_whole(fd, ok, len);
	}
	sleep_ms(200); /* let the client read it before the socket goes */
out:
	close(fd);
	return NULL;
}

/*
 * A lockd that does not know the secret: it asks for the MAC (AUTH) and
 * answers every JOIN with JOIN_OK, plain or sealed under another secret.
 * The client refuses it: only the cluster's lockd can seal JOIN_OK.
 */
static void test_impostor(void **state)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	const char *keys[] = { NULL, other };
	char err[256];
	struct tnode x;

	(void)state;
	for (int i = 0; i < 2; i++) {
		struct impostor im = { .key_file = keys[i] };
		int rc;

#ifndef LK_TAG_LEN
		if (keys[i])
			continue;
#endif
		im.lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", sockpath);
		unlink(sockpath);
		assert_int_equal(bind(im.lfd, (struct sockaddr *)&sun, sizeof(sun)), 0);
		assert_int_equal(listen(im.lfd, 4), 0);
		assert_int_equal(pthread_create(&im.th, NULL, impostor_run, &im), 0);
		rc = tnode_try_join(&x, "a", addr, secret, err, sizeof(err));
		pthread_join(im.th, NULL);
		close(im.lfd);
		unlink(sockpath);
		if (!rc) {
			tnode_close(&x);
			fail_msg("joined a lockd that does not know the secret (JOIN_OK %s)",
				 keys[i] ? "sealed under another secret" : "plain");
		}
		assert_int_equal(rc, -EACCES);
		assert_non_null(strstr(err, "does not know the secret"));
	}
}

/* A server with another secret refuses the node; one without a secret is
 * refused by the node; a client that does not seal is refused. */
static void test_wrong_secret(void **state)
{
	char err[256];
	struct tnode x;
	struct lockd *d;
	int rc;

	(void)state;
	d = server_start(other, NULL);
	rc = tnode_try_join(&x, "a", addr, secret, err, sizeof(err));
	assert_int_equal(rc, -EACCES);
	assert_non_null(strstr(err, "bad secret"));
	lockd_stop(d);
	srv = NULL;
	d = server_start(NULL, NULL);
	rc = tnode_try_join(&x, "a", addr, secret, err, sizeof(err));
	assert_int_equal(rc, -EACCES);
	assert_non_null(strstr(err, "does not ask for the secret"));
	lockd_stop(d);
	srv = NULL;

	/* a client from before sealing (JOIN without SEAL, the old MAC over
	 * nonce and name) is refused by a lockd with a secret, saying why */
	d = server_start(secret, NULL);
	{
		struct sockaddr_un sun = { .sun_family = AF_UNIX };
		uint8_t buf[LKP_MAX_FRAME], *p = buf + LKP_HDR;
		size_t len, got = 0;
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct timeval tv = { 3, 0 };

		snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", sockpath);
		assert_int_equal(connect(fd, (struct sockaddr *)&sun, sizeof(sun)), 0);
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		assert_int_equal(read(fd, buf, LKP_HDR + LKP_CHALLENGE_LEN),
				 LKP_HDR + LKP_CHALLENGE_LEN);
		assert_int_equal(lkp_get32(p + 4) & (LKP_CF_AUTH | LKP_CF_SEAL),
				 LKP_CF_AUTH | LKP_CF_SEAL);
		{
			uint8_t nonce[LKP_NONCE];
			memcpy(nonce, p + 12, LKP_NONCE);
			len = lkp_hdr(buf, LKP_JOIN, 0, LKP_JOIN_FIXED + 1 + strlen(TABLE));
			memset(p, 0, LKP_JOIN_FIXED);
			lkp_put32(p, LKP_VERSION);
			lkp_put32(p + 4, 4);
			assert_int_equal(lk_hmac_sha256("sesame", 6, nonce, LKP_NONCE, "a", 1, p + 8), 0);
			p[40] = 1;
			p[41] = (uint8_t)strlen(TABLE);
			memcpy(p + 44, "a", 1);
			memcpy(p + 45, TABLE, strlen(TABLE));
		}
		assert_int_equal(send(fd, buf, len, MSG_NOSIGNAL), (ssize_t)len);
		while (got < 4 || got < 4 + (size_t)lkp_get32(buf)) {
			ssize_t n = read(fd, buf + got, sizeof(buf) - got);
			assert_true(n > 0);
			got += (size_t)n;
		}
		assert_int_equal(lkp_get16(buf + 4), LKP_REFUSE);
		assert_int_equal(lkp_get32(p), EPROTO);
		buf[LKP_HDR + LKP_REFUSE_FIXED + lkp_get16(p + 8)] = 0;
		assert_non_null(strstr((char *)p + LKP_REFUSE_FIXED, "does not seal lock traffic"));
		close(fd);
	}
	lockd_stop(d);
	srv = NULL;
}

/* Locks work with a secret: grants, BASTs, LVBs, batches, plocks, and
 * heartbeats past two fencing deadlines (lease 1 s) without a fence; TCP too. */
static void test_locks_sealed(void **state)
{
	for (int tcp = 0; tcp < 2; tcp++) {
		struct lockd *d = server_start(secret, tcp ? "127.0.0.1:0" : NULL);
		const char *a_addr = tcp ? lockd_listen_addr(d, 0) : addr;
		uint8_t lvb[LK_LVB_LEN], got[LK_LVB_LEN];
		struct lkc_lockreq rq[LKC_BATCH_MAX];
		struct lk_plock pl = { .pl_ino = 9, .pl_owner = 1, .pl_start = 0, .pl_end = 99,
				       .pl_type = LK_PL_WR, .pl_pid = 42 };
		uint64_t end;

		(void)state;
		tnode_join(&na, "a", a_addr, secret);
		tnode_join(&nb, "b", a_addr, secret);
		memset(lvb, 0x5a, sizeof(lvb));
		assert_int_equal(lkc_lock(na.c, 2, 7, LK_EX, 0, lvb, NULL), LK_EX);
		assert_int_equal(lkc_lock(nb.c, 2, 7, LK_PR, LKF_TRY | LKF_TRY_1CB, NULL, NULL),
				 -EAGAIN);
		end = lkp_now_ns() + 3000 * MS;
		while (!tnode_get(&na, &na.nbast) && lkp_now_ns() < end)
			sleep_ms(2);
		assert_true(tnode_get(&na, &na.nbast) > 0);
		assert_int_equal(lkc_unlock(na.c, 2, 7, lvb), 0);
		assert_int_equal(lkc_lock(nb.c, 2, 7, LK_PR, 0, got, NULL), LK_PR);
		assert_memory_equal(got, lvb, LK_LVB_LEN);
		memset(rq, 0, sizeof(rq));
		for (int i = 0; i < LKC_BATCH_MAX; i++) {
			rq[i].lr_type = 2;
			rq[i].lr_number = 1000 + (uint64_t)i;
			rq[i].lr_mode = LK_EX;
		}
		assert_int_equal(lkc_lock_many(na.c, rq, LKC_BATCH_MAX), 0);
		for (int i = 0; i < LKC_BATCH_MAX; i++)
			assert_int_equal(rq[i].lr_result, LK_EX);
		assert_int_equal(lkc_plock(na.c, LK_PL_SET, &pl), 0);
		pl.pl_owner = 2;
		assert_int_equal(lkc_plock(nb.c, LK_PL_GET, &pl), 0);
		assert_int_equal(pl.pl_type, LK_PL_WR);
		assert_int_equal(pl.pl_pid, 42);
		sleep_ms(1200); /* 4 heartbeats (lease/4), past 2 fencing deadlines (lease/2):
				 * heartbeats and their ACKs are sealed too */
		assert_int_equal(tnode_get(&na, &na.fenced), 0);
		assert_int_equal(tnode_get(&nb, &nb.fenced), 0);
		assert_int_equal(lkc_lock(nb.c, 2, 1000, LK_EX, LKF_TRY, NULL, NULL), -EAGAIN);
		tnode_close(&na);
		assert_free(&nb, 1000);
		tnode_close(&nb);
		assert_true(log_wait("node a (jid 0) left", 1000));
		lockd_stop(d);
	srv = NULL;
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_seal_vectors),
		cmocka_unit_test_setup_teardown(test_tamper, setup, teardown),
		cmocka_unit_test_setup_teardown(test_replay, setup, teardown),
		cmocka_unit_test_setup_teardown(test_inject_plain, setup, teardown),
		cmocka_unit_test_setup_teardown(test_impostor, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wrong_secret, setup, teardown),
		cmocka_unit_test_setup_teardown(test_locks_sealed, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

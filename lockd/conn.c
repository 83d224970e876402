/*
 * conn.c - shoal-lockd's transport: the listeners (unix and TCP sockets),
 * accepting connections and sending each its CHALLENGE, reading frames
 * and handing each whole one to the core (conn_msg in server.c), and the
 * per-connection output buffers flushed at the end of each loop turn.
 * docs/PROTOCOL.md "Transport" and "Framing" are the contract.
 *
 * Invariants:
 *  (1) a connection's input buffer never holds more than two maximum
 *      frames; a frame length outside [8, 4092] closes the connection as
 *      soon as its length field has arrived;
 *  (2) output is only queued (out_frame) while a loop turn runs, and sent
 *      at its end (flush_dirty) or when the socket is writable again; a
 *      peer that lets more than LD_OUTMAX pile up is dropped;
 *  (3) a closed connection stays allocated until the end of the loop turn
 *      (free_closed), so a pointer to it taken during the turn stays valid;
 *  (4) a failed accept (EMFILE, ENFILE, ENOMEM) takes the listener out of
 *      the loop for LD_ACCEPT_PAUSE_NS, with one log line per
 *      LD_ACCEPT_LOG_NS: the server neither spins nor floods its log;
 *  (5) a unix socket is created mode 0600 whatever the umask, and a TCP
 *      address other than loopback is refused without a secret unless
 *      --insecure was given;
 *  (6) with a secret, from JOIN_OK on (cn_sealed, set by do_join) every
 *      frame both ways is sealed (lk_crypto.h): queued frames are sealed in
 *      order by conn_seal before any byte of them is sent (so the counter
 *      follows the order on the wire), and a received frame that fails to
 *      open closes the connection with one line naming the node; nothing
 *      of it reaches conn_msg.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <syslog.h>
#include <unistd.h>

#include "lk_plock.h"
#include "lk_proto.h"
#include "lk_srv.h"

/* --- output --------------------------------------------------------------- */

/* Room for n more bytes at the end of cn's output; NULL when cn must go. */
static uint8_t *out_reserve(struct lockd *d, struct ld_conn *cn, size_t n)
{
	if (cn->cn_state == CN_CLOSED)
		return NULL;
	if (cn->cn_outoff && cn->cn_outoff == cn->cn_outlen)
		cn->cn_outoff = cn->cn_outlen = cn->cn_sealoff = 0; /* sent, so sealed */
	if (cn->cn_outlen + n > cn->cn_outcap) {
		size_t cap = cn->cn_outcap ? cn->cn_outcap : 4096;
		uint8_t *p;

		if (cn->cn_outoff) {
			memmove(cn->cn_out, cn->cn_out + cn->cn_outoff, cn->cn_outlen - cn->cn_outoff);
			cn->cn_outlen -= cn->cn_outoff;
			if (cn->cn_sealed) /* what was sent was sealed first */
				cn->cn_sealoff -= cn->cn_outoff;
			cn->cn_outoff = 0;
		}
		while (cap < cn->cn_outlen + n)
			cap *= 2;
		if (cap > LD_OUTMAX) {
			conn_close(d, cn, "not reading its messages (output over 16 MiB)");
			return NULL;
		}
		if (cap > cn->cn_outcap) {
			p = realloc(cn->cn_out, cap);
			if (!p) {
				conn_close(d, cn, "out of memory for its output");
				return NULL;
			}
			cn->cn_out = p;
			cn->cn_outcap = cap;
		}
	}
	if (!cn->cn_dirty) {
		cn->cn_dirty = 1;
		list_add_tail(&cn->cn_dlink, &d->ld_dirty);
	}
	return cn->cn_out + cn->cn_outlen;
}

/*
 * A frame of type with payload plen: the caller fills the payload.  On a
 * sealed connection the frame has room for its tag and is sealed in
 * place by conn_seal, before it is sent (6).
 */
uint8_t *out_frame(struct lockd *d, struct ld_conn *cn, uint16_t type, uint32_t seq,
			  size_t plen)
{
	size_t tag = cn->cn_sealed ? LK_TAG_LEN : 0;
	uint8_t *p = out_reserve(d, cn, LKP_HDR + plen + tag);

	if (!p)
		return NULL;
	cn->cn_outlen += lkp_hdr(p, type, seq, plen + tag);
	return p + LKP_HDR;
}

/* Seal every frame queued since the last call (6); 0, or -EIO with cn closed. */
static int conn_seal(struct lockd *d, struct ld_conn *cn)
{
	while (cn->cn_sealoff < cn->cn_outlen) {
		uint8_t *f = cn->cn_out + cn->cn_sealoff;
		size_t flen = 4 + lkp_get32(f);

		if (lk_seal_frame(&cn->cn_sess, f, flen - LKP_HDR - LK_TAG_LEN) != flen) {
			conn_close(d, cn, "cannot seal a frame (ChaCha20-Poly1305 in libcrypto failed)");
			return -EIO;
		}
		cn->cn_sealoff += flen;
	}
	return 0;
}

void conn_flush(struct lockd *d, struct ld_conn *cn)
{
	if (cn->cn_sealed && conn_seal(d, cn))
		return;
	while (cn->cn_outoff < cn->cn_outlen) {
		ssize_t n = send(cn->cn_fd, cn->cn_out + cn->cn_outoff, cn->cn_outlen - cn->cn_outoff,
				 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN) {
				if (!cn->cn_epout) {
					struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT,
								  .data.ptr = cn };
					epoll_ctl(d->ld_epfd, EPOLL_CTL_MOD, cn->cn_fd, &ev);
					cn->cn_epout = 1;
				}
				return;
			}
			conn_close(d, cn, NULL);
			return;
		}
		cn->cn_outoff += (size_t)n;
	}
	cn->cn_outoff = cn->cn_outlen = cn->cn_sealoff = 0;
	if (cn->cn_epout) {
		struct epoll_event ev = { .events = EPOLLIN, .data.ptr = cn };
		epoll_ctl(d->ld_epfd, EPOLL_CTL_MOD, cn->cn_fd, &ev);
		cn->cn_epout = 0;
	}
	if (cn->cn_close_after_flush)
		conn_close(d, cn, NULL);
}

/* --- connections -------------------------------------------------------------------- */

void conn_close(struct lockd *d, struct ld_conn *cn, const char *why)
{
	if (cn->cn_state == CN_CLOSED)
		return;
	if (why)
		ld_log(d, LOG_WARNING, "%s: %s; closing", cn->cn_peer, why);
	epoll_ctl(d->ld_epfd, EPOLL_CTL_DEL, cn->cn_fd, NULL);
	close(cn->cn_fd);
	cn->cn_fd = -1;
	cn->cn_state = CN_CLOSED;
	if (cn->cn_dirty) {
		list_del(&cn->cn_dlink);
		cn->cn_dirty = 0;
	}
	list_del(&cn->cn_link);
	list_add_tail(&cn->cn_link, &d->ld_closed); /* freed at the end of the loop turn */
	if (cn->cn_node) {
		struct ld_node *nd = cn->cn_node;
		cn->cn_node = NULL;
		if (nd->nd_state == ND_LIVE) {
			ld_log(d, LOG_NOTICE, "node %s (jid %u): connection closed without LEAVE; dead at lease expiry unless it rejoins",
			       nd->nd_name, nd->nd_jid);
			node_disconnected(d, nd);
		} else {
			nd->nd_conn = NULL;
		}
	}
}

void conn_read(struct lockd *d, struct ld_conn *cn)
{
	ssize_t n;
	size_t off = 0;

	n = read(cn->cn_fd, cn->cn_in + cn->cn_inlen, sizeof(cn->cn_in) - cn->cn_inlen);
	if (n < 0) {
		char why[96];

		if (errno == EAGAIN || errno == EINTR)
			return;
		snprintf(why, sizeof(why), "read: %s%s", strerror(errno),
			 cn->cn_inlen ? " (closed in the middle of a frame)" : "");
		conn_close(d, cn, why);
		return;
	}
	if (n == 0) {
		if (cn->cn_inlen)
			ld_log(d, LOG_WARNING, "%s: closed in the middle of a frame (%u bytes)", cn->cn_peer,
			       cn->cn_inlen);
		else if (cn->cn_state == CN_HELLO)
			ld_log(d, LOG_DEBUG, "%s: closed before JOIN", cn->cn_peer);
		conn_close(d, cn, NULL);
		return;
	}
	cn->cn_inlen += (uint32_t)n;
	while (cn->cn_inlen - off >= 4 && cn->cn_state != CN_CLOSED) {
		uint32_t len = lkp_get32(cn->cn_in + off);
		if (len < LKP_HDR - 4 || len > LKP_MAX_FRAME - 4) {
			char why[64];
			snprintf(why, sizeof(why), "bad frame length %u", len);
			conn_close(d, cn, why);
			return;
		}
		if (cn->cn_inlen - off < 4 + len)
			break;
		if (cn->cn_sealed) {
			/* (6): changed, replayed, reordered, forged or unsealed */
			int plen = lk_open_frame(&cn->cn_sess, cn->cn_in + off, 4 + len);

			if (plen < 0) {
				char why[160];
				snprintf(why, sizeof(why), "frame %llu (%u bytes) fails authentication "
							  "(changed, replayed, reordered or forged on the "
							  "way, or not sealed)",
					 (unsigned long long)cn->cn_sess.ls_rxn, 4 + len);
				conn_close(d, cn, why);
				return;
			}
			conn_msg(d, cn, cn->cn_in + off, LKP_HDR + (size_t)plen);
		} else {
			conn_msg(d, cn, cn->cn_in + off, 4 + len);
		}
		off += 4 + len;
	}
	if (cn->cn_state == CN_CLOSED)
		return;
	if (off) {
		memmove(cn->cn_in, cn->cn_in + off, cn->cn_inlen - off);
		cn->cn_inlen -= (uint32_t)off;
	}
}

/*
 * accept failed with err (EMFILE at the descriptor limit, ENFILE, ENOMEM...):
 * the listener stays readable, so it leaves epoll for LD_ACCEPT_PAUSE_NS
 * (check_timers brings it back) instead of failing again at once in a
 * loop; one log line per LD_ACCEPT_LOG_NS, with the count of the others.
 */
static void accept_pause(struct lockd *d, struct ld_listener *li, int err)
{
	if (d->ld_now >= li->li_next_log) {
		struct rlimit rl = { 0 };
		char lim[96] = "";

		if (err == EMFILE && !getrlimit(RLIMIT_NOFILE, &rl))
			snprintf(lim, sizeof(lim), " (at its file descriptor limit, %llu: raise "
						   "RLIMIT_NOFILE)", (unsigned long long)rl.rlim_cur);
		ld_log(d, LOG_ERR, "accept on %s: %s%s; new connections wait %llu ms", li->li_addr,
		       strerror(err), lim, (unsigned long long)(LD_ACCEPT_PAUSE_NS / NS_PER_MS));
		if (li->li_unlogged)
			ld_log(d, LOG_ERR, "accept on %s: %u more failures since the last message",
			       li->li_addr, li->li_unlogged);
		li->li_unlogged = 0;
		li->li_next_log = d->ld_now + LD_ACCEPT_LOG_NS;
	} else {
		li->li_unlogged++;
	}
	if (epoll_ctl(d->ld_epfd, EPOLL_CTL_DEL, li->li_fd, NULL))
		return; /* not paused: the next turn tries again */
	li->li_resume = d->ld_now + LD_ACCEPT_PAUSE_NS;
	if (li->li_resume < d->ld_next_check)
		d->ld_next_check = li->li_resume;
}

/* A paused listener whose time has come accepts again; sets *next. */
void accept_resume(struct lockd *d, struct ld_listener *li, uint64_t *next)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = li };

	if (!li->li_resume)
		return;
	if (li->li_resume > d->ld_now) {
		if (li->li_resume < *next)
			*next = li->li_resume;
		return;
	}
	if (epoll_ctl(d->ld_epfd, EPOLL_CTL_ADD, li->li_fd, &ev)) {
		ld_log(d, LOG_ERR, "listener %s: epoll_ctl: %s; trying again in %llu ms", li->li_addr,
		       strerror(errno), (unsigned long long)(LD_ACCEPT_PAUSE_NS / NS_PER_MS));
		li->li_resume = d->ld_now + LD_ACCEPT_PAUSE_NS;
		if (li->li_resume < *next)
			*next = li->li_resume;
		return;
	}
	li->li_resume = 0;
}

void conn_accept(struct lockd *d, struct ld_listener *li)
{
	for (int i = 0; i < 16; i++) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		struct ld_conn *cn;
		struct epoll_event ev;
		uint8_t *p;
		int fd = accept4(li->li_fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0) {
			if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
				accept_pause(d, li, errno);
			return;
		}
		cn = calloc(1, sizeof(*cn));
		if (!cn) {
			close(fd);
			accept_pause(d, li, ENOMEM);
			return;
		}
		cn->cn_fd = fd;
		cn->cn_state = CN_HELLO;
		list_init(&cn->cn_dlink);
		list_add_tail(&cn->cn_link, &d->ld_conns);
		if (li->li_unix) {
			struct ucred uc;
			socklen_t ul = sizeof(uc);
			if (!getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &ul))
				snprintf(cn->cn_peer, sizeof(cn->cn_peer), "peer %s pid %d uid %u",
					 li->li_addr, (int)uc.pid, (unsigned)uc.uid);
			else
				snprintf(cn->cn_peer, sizeof(cn->cn_peer), "peer %s", li->li_addr);
		} else {
			int one = 1;
			char a[96];
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
			lkp_format_addr((struct sockaddr *)&ss, sl, a, sizeof(a));
			snprintf(cn->cn_peer, sizeof(cn->cn_peer), "peer %s", a);
		}
		cn->cn_deadline = d->ld_now + d->ld_hs_ns;
		if (cn->cn_deadline < d->ld_next_check)
			d->ld_next_check = cn->cn_deadline;
		ev.events = EPOLLIN;
		ev.data.ptr = cn;
		if (epoll_ctl(d->ld_epfd, EPOLL_CTL_ADD, fd, &ev)) {
			conn_close(d, cn, "epoll_ctl failed");
			continue;
		}
		if (getrandom(cn->cn_chal + 12, LKP_NONCE, 0) != LKP_NONCE) {
			conn_close(d, cn, "getrandom failed");
			continue;
		}
		/* kept: JOIN's MAC covers the CHALLENGE as the client saw it */
		lkp_put32(cn->cn_chal, LKP_VERSION);
		lkp_put32(cn->cn_chal + 4, (d->ld_secret ? LKP_CF_AUTH | LKP_CF_SEAL : 0) |
						   LKP_CF_PLOCK);
		lkp_put32(cn->cn_chal + 8, (uint32_t)(d->ld_lease_ns / NS_PER_MS));
		p = out_frame(d, cn, LKP_CHALLENGE, 0, LKP_CHALLENGE_LEN);
		if (!p)
			continue;
		memcpy(p, cn->cn_chal, LKP_CHALLENGE_LEN);
		ld_log(d, LOG_DEBUG, "%s: connected", cn->cn_peer);
	}
}


void flush_dirty(struct lockd *d)
{
	while (!list_empty(&d->ld_dirty)) {
		struct ld_conn *cn = container_of(d->ld_dirty.next, struct ld_conn, cn_dlink);
		list_del(&cn->cn_dlink);
		cn->cn_dirty = 0;
		conn_flush(d, cn);
	}
}

void free_closed(struct lockd *d)
{
	while (!list_empty(&d->ld_closed)) {
		struct ld_conn *cn = container_of(d->ld_closed.next, struct ld_conn, cn_link);
		list_del(&cn->cn_link);
		lk_session_free(&cn->cn_sess);
		free(cn->cn_out);
		free(cn);
	}
}

/* Only this machine can connect to ss: 127.0.0.0/8, ::1, ::ffff:127.0.0.0/104. */
static int addr_is_loopback(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *sin = (const struct sockaddr_in *)ss;
		return (ntohl(sin->sin_addr.s_addr) >> 24) == 127;
	}
	if (ss->ss_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)ss)->sin6_addr;
		return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
	}
	return 0;
}

int listen_one(struct lockd *d, const char *addr, char *err, size_t errlen)
{
	struct ld_listener *li = &d->ld_lis[d->ld_nlis];
	struct lkp_addr la;
	struct epoll_event ev;
	int fd, rc, one = 1;

	rc = lkp_parse_addr(addr, 1, &la, err, errlen);
	if (rc)
		return rc;
	/* whoever connects without a secret can join and take any lock */
	if (!la.la_unix && !d->ld_secret && !addr_is_loopback(&la.la_ss)) {
		if (!d->ld_cfg.insecure) {
			snprintf(err, errlen, "listen %s: anyone who can reach it could join the "
					      "cluster without a secret: give --secret-file (or "
					      "--insecure on a network only the nodes reach)", addr);
			return -EACCES;
		}
		ld_log(d, LOG_WARNING, "listening on %s without a secret (--insecure): anyone who "
				       "can reach it can join the cluster", addr);
	}
	fd = socket(la.la_ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		rc = -errno;
		snprintf(err, errlen, "listen %s: socket: %s", addr, strerror(errno));
		return rc;
	}
	if (!la.la_unix)
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	/* the socket file is 0600 whatever the caller's umask: whoever can
	 * connect can join the cluster */
	mode_t um = la.la_unix ? umask(0177) : 0;
	rc = bind(fd, (struct sockaddr *)&la.la_ss, la.la_len);
	if (rc && errno == EADDRINUSE && la.la_unix) {
		/* a stale socket file: nobody answers on it; anything else
		 * at that path is not ours to delete */
		struct sockaddr_un *sun = (struct sockaddr_un *)&la.la_ss;
		struct stat st;
		int probe;

		if (lstat(sun->sun_path, &st) == 0 && !S_ISSOCK(st.st_mode)) {
			umask(um);
			snprintf(err, errlen, "listen %s: %s exists and is not a socket; not "
					      "replacing it", addr, sun->sun_path);
			close(fd);
			return -EEXIST;
		}
		probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (probe >= 0 && connect(probe, (struct sockaddr *)sun, la.la_len) &&
		    errno == ECONNREFUSED) {
			unlink(sun->sun_path);
			rc = bind(fd, (struct sockaddr *)&la.la_ss, la.la_len);
		} else {
			errno = EADDRINUSE;
		}
		if (probe >= 0)
			close(probe);
	}
	if (la.la_unix) {
		int e = errno;
		umask(um);
		errno = e;
	}
	if (rc || listen(fd, 128)) {
		rc = -errno;
		snprintf(err, errlen, "listen %s: %s", addr, strerror(errno));
		close(fd);
		return rc;
	}
	li->li_fd = fd;
	li->li_unix = la.la_unix;
	if (la.la_unix) {
		const char *path = ((struct sockaddr_un *)&la.la_ss)->sun_path;
		snprintf(li->li_path, sizeof(li->li_path), "%s", path);
		snprintf(li->li_addr, sizeof(li->li_addr), "unix:%s", path);
	} else {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		getsockname(fd, (struct sockaddr *)&ss, &sl);
		lkp_format_addr((struct sockaddr *)&ss, sl, li->li_addr, sizeof(li->li_addr));
	}
	ev.events = EPOLLIN;
	ev.data.ptr = li;
	if (epoll_ctl(d->ld_epfd, EPOLL_CTL_ADD, fd, &ev)) {
		rc = -errno;
		snprintf(err, errlen, "listen %s: epoll: %s", addr, strerror(errno));
		if (la.la_unix)
			unlink(li->li_path);
		close(fd);
		return rc;
	}
	d->ld_nlis++;
	return 0;
}

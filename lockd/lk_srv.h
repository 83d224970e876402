/*
 * lk_srv.h - shoal-lockd's server internals, shared by its core
 * (server.c: membership, journal ids, leases, recovery, the lock table,
 * the event loop) and its transport (conn.c: listeners, connections,
 * frame input and output).  Nothing outside lockd/ includes this.
 */
#ifndef SHOAL_LK_SRV_H
#define SHOAL_LK_SRV_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "lk_crypto.h"
#include "lk_list.h"
#include "lk_proto.h"
#include "shoal/lockd.h"

#define GL_JOURNAL_TYPE 9	   /* journal locks: released at death */
#define GL_NONDISK_TYPE 1	   /* with number GL_MOUNT_NUMBER: the mount lock, */
#define GL_MOUNT_NUMBER 1	   /* also released at death (core/lock.h) */
#define LD_INBUF (2 * LKP_MAX_FRAME)
#define LD_OUTMAX (16u << 20)	   /* a peer that lets this much pile up is dropped */
#define LD_HIST_MAX 1024	   /* remembered name -> jid pairs */
#define NS_PER_MS 1000000ull
#define LD_ACCEPT_PAUSE_NS (100 * NS_PER_MS) /* after an accept error (EMFILE...) */
#define LD_ACCEPT_LOG_NS (10000 * NS_PER_MS) /* at most one accept error line per 10 s */

enum { ND_LIVE, ND_DEAD };
/* nd_fence of a DEAD node, with --fence-cmd (9) */
enum { FN_DONE, FN_RUN, FN_WAIT, FN_FAILED };
enum { CN_HELLO, CN_JOINED, CN_CLOSED };

struct ld_res {
	uint32_t rs_type;
	uint64_t rs_number;
	uint8_t rs_lvb[LK_LVB_LEN];
	int rs_lvb_invalid;
	struct ld_list rs_granted; /* ld_lock.lk_glink */
	struct ld_list rs_convert; /* ld_lock.lk_qlink */
	struct ld_list rs_wait;	   /* ld_lock.lk_qlink */
	struct ld_res *rs_hnext;
};

struct ld_lock {
	struct ld_res *lk_res;
	struct ld_node *lk_node;
	int lk_gr;		 /* granted mode, -1: none yet */
	int lk_rq;		 /* requested mode, -1: no request in flight */
	uint32_t lk_seq;	 /* of the request in flight */
	uint32_t lk_bast_sent;	 /* bit m: BAST(m) sent since lk_gr last changed */
	struct ld_list lk_glink; /* rs_granted, when lk_gr >= 0 */
	struct ld_list lk_qlink; /* rs_convert or rs_wait, when lk_rq >= 0 */
	struct ld_list lk_nlink; /* nd_locks */
};

struct ld_node {
	char nd_name[LK_NAME_MAX + 1];
	uint32_t nd_jid;
	int nd_state;
	uint64_t nd_last_hb;	 /* ns, receipt of the last heartbeat (or JOIN) */
	struct ld_conn *nd_conn; /* NULL once the socket is gone */
	int nd_fence;		 /* FN_*: FN_DONE unless DEAD with a fence command */
	pid_t nd_fence_pid;	 /* FN_RUN: the command */
	uint32_t nd_fence_tries; /* started so far */
	uint64_t nd_fence_at;	 /* FN_RUN: its deadline; FN_WAIT: the next try */
	int nd_plown;		 /* JOIN jflags PLOWN: it can own plock spaces */
	struct ld_list nd_locks;
	struct ld_list nd_link;	 /* ld_nodes */
};

struct ld_conn {
	int cn_fd;
	int cn_state;
	int cn_close_after_flush;
	int cn_epout;		 /* EPOLLOUT armed */
	char cn_peer[256];	 /* "peer ADDR pid P uid U node NAME": li_addr fits whole */
	uint8_t cn_chal[LKP_CHALLENGE_LEN]; /* the CHALLENGE payload sent (its nonce at 12) */
	int cn_sealed;		 /* from JOIN_OK on: every frame both ways is sealed */
	struct lk_session cn_sess; /* keys and counters, with cn_sealed */
	size_t cn_sealoff;	 /* cn_out: frames before this offset are sealed */
	uint64_t cn_deadline;	 /* handshake deadline (CN_HELLO) */
	struct ld_node *cn_node;
	uint8_t cn_in[LD_INBUF];
	uint32_t cn_inlen;
	uint8_t *cn_out;
	size_t cn_outoff, cn_outlen, cn_outcap;
	int cn_dirty;
	struct ld_list cn_dlink; /* ld_dirty */
	struct ld_list cn_link;	 /* ld_conns or ld_closed */
};

struct ld_hist {
	char hs_name[LK_NAME_MAX + 1];
	uint32_t hs_jid;
	struct ld_list hs_link;
};

struct ld_listener {
	int li_fd;
	int li_unix;
	char li_addr[128];
	char li_path[108];
	uint64_t li_resume;	 /* ns; accepting paused until then (0: not paused) */
	uint64_t li_next_log;	 /* ns; an accept error before then is only counted */
	uint32_t li_unlogged;	 /* accept errors not logged since the last line */
};

struct lockd {
	struct lockd_config ld_cfg;
	char *ld_fence_cmd;	 /* ld_cfg.fence_cmd: lockd's copy */
	uint8_t *ld_secret;
	size_t ld_secretlen;
	char ld_table[LK_TABLE_MAX + 1];
	uint32_t ld_njournals;	 /* the table's disk's, from its first JOIN; 0: none yet */
	uint8_t ld_uuid[LKP_UUID_LEN]; /* the table's filesystem, from its first JOIN with one */
	int ld_uuid_set;
	uint64_t ld_lease_ns, ld_hs_ns;
	int ld_epfd, ld_wakefd;
	struct ld_listener ld_lis[8];
	int ld_nlis;
	struct ld_list ld_conns, ld_closed, ld_dirty, ld_nodes, ld_hist;
	int ld_nhist;
	struct ld_res **ld_hash;
	size_t ld_hmask, ld_nres;
	struct pl_table *ld_plock; /* the plock lock space (plock.c) */
	uint64_t ld_next_check;
	pthread_t ld_thread;
	int ld_threaded;
	int ld_stop;		 /* atomic: set by lockd_wake_stop */
	uint64_t ld_now;
};

/* --- conn.c: the transport ------------------------------------------------ */
/* A frame of type with payload plen queued on cn: the caller fills the payload. */
uint8_t *out_frame(struct lockd *d, struct ld_conn *cn, uint16_t type, uint32_t seq, size_t plen);
/* Send what cn has queued; closes cn when its peer is gone. */
void conn_flush(struct lockd *d, struct ld_conn *cn);
/* Close cn (why: one log line, or NULL); its node, if any, is disconnected. */
void conn_close(struct lockd *d, struct ld_conn *cn, const char *why);
/* Read what cn's socket has and hand every whole frame to conn_msg. */
void conn_read(struct lockd *d, struct ld_conn *cn);
/* Accept the connections waiting on li and send each its CHALLENGE. */
void conn_accept(struct lockd *d, struct ld_listener *li);
/* A paused listener whose time has come accepts again; lowers *next. */
void accept_resume(struct lockd *d, struct ld_listener *li, uint64_t *next);
void flush_dirty(struct lockd *d);
/* Free the connections closed during this loop turn. */
void free_closed(struct lockd *d);
/* Bind and listen on addr (unix:PATH or HOST:PORT) as d->ld_lis[d->ld_nlis]. */
int listen_one(struct lockd *d, const char *addr, char *err, size_t errlen);

/* --- server.c, for conn.c -------------------------------------------------- */
/* One whole frame (flen bytes at f) from cn; returns with cn possibly closed. */
void conn_msg(struct lockd *d, struct ld_conn *cn, const uint8_t *f, size_t flen);
/* nd's connection is gone without LEAVE. */
void node_disconnected(struct lockd *d, struct ld_node *nd);

#endif

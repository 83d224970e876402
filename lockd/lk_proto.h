/*
 * lk_proto.h - the lockd wire format (docs/PROTOCOL.md is the reference):
 * message numbers, sizes, little-endian field access, and what client and
 * server share (addresses, secrets, names, the mode matrix).
 *
 * Every frame is: u32 len (bytes after this field), u16 type, u16 hflags
 * (0, or LKP_HF_SEALED on a sealed connection), u32 seq, then the payload
 * of that type (and, sealed, a 16-byte tag).  len is at least 8 and at
 * most LKP_MAX_FRAME - 4.
 */
#ifndef SHOAL_LK_PROTO_H
#define SHOAL_LK_PROTO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define LKP_VERSION 1u
#define LKP_HDR 12		/* len + type + hflags + seq */
#define LKP_MAX_FRAME 4096	/* whole frame, length field included */
#define LKP_NONCE 32
#define LKP_REASON_MAX 255

enum lkp_type {
	LKP_CHALLENGE = 1,	/* S->C: version, cflags, lease_ms, nonce[32] */
	LKP_JOIN = 2,		/* C->S: version, njournals, mac[32], nlen, tlen, 0, name, table */
	LKP_JOIN_OK = 3,	/* S->C: jid, lease_ms */
	LKP_REFUSE = 4,		/* S->C: errno, rflags, rlen, 0, reason */
	LKP_LOCK = 5,		/* C->S: type, number, mode, flags, lvb[32] */
	LKP_UNLOCK = 6,		/* C->S: type, number, 0, flags, lvb[32] */
	LKP_GRANT = 7,		/* S->C: mode, flags, lvb[32] */
	LKP_RESULT = 8,		/* S->C: errno, 0 */
	LKP_HEARTBEAT = 9,	/* C->S: - */
	LKP_HEARTBEAT_ACK = 10, /* S->C: - */
	LKP_BAST = 11,		/* S->C: type, number, wanted */
	LKP_RECOVER = 12,	/* S->C: jid, nlen, 0, 0, 0, name */
	LKP_RECOVERY_DONE = 13, /* C->S: jid, 0 */
	LKP_LEAVE = 14,		/* C->S: - ; answered by RESULT */
	LKP_PLOCK = 15,		/* C->S: op, pflags, ino, owner, start, end, type, pid */
	LKP_PLOCK_REPLY = 16,	/* S->C: errno, type, start, end, pid, rflags */
	LKP_PLOCK_DROP = 17,	/* S->C: ino - give the ownership of ino's plocks back */
	LKP_NTYPES
};

/* payload sizes (after the 12-byte header) */
#define LKP_CHALLENGE_LEN 44
#define LKP_JOIN_FIXED 44
#define LKP_JOIN_OK_LEN 8
#define LKP_REFUSE_FIXED 12
#define LKP_LOCK_LEN 52		/* LOCK and UNLOCK */
#define LKP_GRANT_LEN 40
#define LKP_RESULT_LEN 8
#define LKP_BAST_LEN 16
#define LKP_RECOVER_FIXED 8
#define LKP_RECOVERY_DONE_LEN 8
#define LKP_PLOCK_LEN 48
#define LKP_PLOCK_REPLY_LEN 32
#define LKP_PLOCK_DROP_LEN 8

#define LKP_CF_AUTH 0x1		/* CHALLENGE: JOIN must carry the HMAC */
#define LKP_CF_PLOCK 0x2	/* CHALLENGE: this lockd serves PLOCK (posix and flock locks) */
#define LKP_CF_SEAL 0x4		/* CHALLENGE (with AUTH): every frame after JOIN is sealed */
#define LKP_RF_RETRY 0x1	/* REFUSE: try again later */
#define LKP_JF_SELF_RECOVER 0x1 /* JOIN jflags: this node's mount replays its own journal
				  * and sends RECOVERY_DONE for it (PROTOCOL.md) */
#define LKP_JF_UUID 0x2		/* JOIN jflags: the filesystem's UUID follows the table */
#define LKP_JF_SEAL 0x4		/* JOIN jflags: the client's nonce follows; sealed from JOIN_OK on */
#define LKP_HF_SEALED 0x1	/* frame hflags: the payload is encrypted, a tag follows it */
#define LKP_JF_PLOWN 0x8	/* JOIN jflags: this node can own plock spaces (PLOCK_REPLY OWN) */
#define LKP_UUID_LEN 16
#define LKP_LF_LVB 0x10000	/* LOCK/UNLOCK: the lvb field carries a value */
#define LKP_LF_MASK (0x1 | 0x2 | LKP_LF_LVB) /* LKF_TRY | LKF_TRY_1CB | LKP_LF_LVB */

/* PLOCK ops (docs/PROTOCOL.md "Posix and flock locks") */
enum {
	LKP_PL_GET = 1,
	LKP_PL_SET = 2,
	LKP_PL_SETW = 3,
	LKP_PL_CLOSE = 4,
	LKP_PL_CANCEL = 5,
	LKP_PL_OWNLK = 6,  /* an owner giving its plock space back: one of its locks */
	LKP_PL_OWNEND = 7, /* ... and that was all: the space is lockd's again */
};
#define LKP_PLF_FLOCK 0x1	/* PLOCK pflags: a flock lock (whole file), not a record lock */
#define LKP_PLR_MINE 0x1	/* PLOCK_REPLY rflags: the lock GET reports is the asker's node's */
#define LKP_PLR_OWN 0x2		/* PLOCK_REPLY rflags: the asker's node now owns the inode's plocks */

static inline void lkp_put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static inline void lkp_put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static inline void lkp_put64(uint8_t *p, uint64_t v)
{
	lkp_put32(p, (uint32_t)v);
	lkp_put32(p + 4, (uint32_t)(v >> 32));
}

static inline uint16_t lkp_get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static inline uint32_t lkp_get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t lkp_get64(const uint8_t *p)
{
	return (uint64_t)lkp_get32(p) | (uint64_t)lkp_get32(p + 4) << 32;
}

/* Write a frame header for a payload of plen bytes at p; returns LKP_HDR + plen. */
static inline size_t lkp_hdr(uint8_t *p, uint16_t type, uint32_t seq, size_t plen)
{
	lkp_put32(p, (uint32_t)(LKP_HDR - 4 + plen));
	lkp_put16(p + 4, type);
	lkp_put16(p + 6, 0);
	lkp_put32(p + 8, seq);
	return LKP_HDR + plen;
}

const char *lkp_type_name(unsigned type);

/* Valid node name: 1..63 bytes of [A-Za-z0-9._-]. */
int lkp_valid_name(const char *s, size_t len);
/* Valid table: 1..127 printable bytes without spaces, containing ':'. */
int lkp_valid_table(const char *s, size_t len);

struct lkp_addr {
	struct sockaddr_storage la_ss;
	socklen_t la_len;
	int la_unix;
};
/*
 * Parse "unix:/path", "HOST:PORT", "[V6]:PORT" or "shoal://HOST:PORT" into
 * a socket address (passive: an empty or "*" host means any).  0 or -errno
 * with a reason in err.
 */
int lkp_parse_addr(const char *addr, int passive, struct lkp_addr *out, char *err,
		   size_t errlen);
/* "1.2.3.4:56", "[::1]:56" or "unix:/path" of a socket address. */
void lkp_format_addr(const struct sockaddr *sa, socklen_t len, char *buf, size_t buflen);

/*
 * Read the secret file: its contents without trailing CR/LF.  *key is
 * malloc'd.  -errno with a reason when missing, unreadable, not a regular
 * file, open to group or others (-EACCES), owned by another user than this
 * one or root (-EACCES), empty or over 4 KiB.
 */
int lkp_read_secret(const char *path, uint8_t **key, size_t *keylen, char *err, size_t errlen);

/* 1 when a conversion from mode g to m can never be blocked (m is "down"). */
int lk_is_down(int g, int m);

uint64_t lkp_now_ns(void);

#endif

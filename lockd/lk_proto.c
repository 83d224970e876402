/*
 * lk_proto.c - what client and server share besides the inline field
 * codec of lk_proto.h: the mode matrix, name and table rules, address
 * parsing, secret files and the clock.
 *
 * Invariants:
 *  (1) lk_compatible is symmetric and is the VMS/DLM matrix;
 *  (2) lk_is_down(g, m) holds exactly when every mode compatible with g is
 *      compatible with m (so granting m never needs anyone else to move).
 */
#include "lk_proto.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "shoal/lockd.h"

/*            NL CR CW PR PW EX */
static const uint8_t compat[LK_NMODES][LK_NMODES] = {
	/* NL */ { 1, 1, 1, 1, 1, 1 },
	/* CR */ { 1, 1, 1, 1, 1, 0 },
	/* CW */ { 1, 1, 1, 0, 0, 0 },
	/* PR */ { 1, 1, 0, 1, 0, 0 },
	/* PW */ { 1, 1, 0, 0, 0, 0 },
	/* EX */ { 1, 0, 0, 0, 0, 0 },
};

int lk_compatible(int a, int b)
{
	if (a < 0 || a >= LK_NMODES || b < 0 || b >= LK_NMODES)
		return 0;
	return compat[a][b];
}

const char *lk_mode_name(int mode)
{
	static const char *names[LK_NMODES] = { "NL", "CR", "CW", "PR", "PW", "EX" };

	return mode >= 0 && mode < LK_NMODES ? names[mode] : "??";
}

int lk_is_down(int g, int m)
{
	for (int x = 0; x < LK_NMODES; x++)
		if (compat[g][x] && !compat[m][x])
			return 0;
	return 1;
}

const char *lkp_type_name(unsigned type)
{
	static const char *names[LKP_NTYPES] = {
		"?",	     "CHALLENGE", "JOIN",	   "JOIN_OK",	 "REFUSE",
		"LOCK",	     "UNLOCK",	  "GRANT",	   "RESULT",	 "HEARTBEAT",
		"HEARTBEAT_ACK", "BAST",	  "RECOVER", "RECOVERY_DONE", "LEAVE",
		"PLOCK", "PLOCK_REPLY", "PLOCK_DROP",
	};
	return type < LKP_NTYPES ? names[type] : "unknown";
}

int lkp_valid_name(const char *s, size_t len)
{
	if (len < 1 || len > LK_NAME_MAX)
		return 0;
	for (size_t i = 0; i < len; i++) {
		char ch = s[i];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-'))
			return 0;
	}
	return 1;
}

int lkp_valid_table(const char *s, size_t len)
{
	int colon = 0;

	if (len < 3 || len > LK_TABLE_MAX)
		return 0;
	for (size_t i = 0; i < len; i++) {
		if (s[i] <= ' ' || s[i] > '~')
			return 0;
		colon += s[i] == ':';
	}
	return colon == 1 && s[0] != ':' && s[len - 1] != ':';
}

int lkp_parse_addr(const char *addr, int passive, struct lkp_addr *out, char *err,
		   size_t errlen)
{
	char host[256];
	const char *port, *h;
	size_t hlen;
	struct addrinfo hints, *res = NULL;
	int rc;

	memset(out, 0, sizeof(*out));
	if (!addr || !*addr) {
		snprintf(err, errlen, "empty address");
		return -EINVAL;
	}
	if (!strncmp(addr, "unix:", 5)) {
		struct sockaddr_un *sun = (struct sockaddr_un *)&out->la_ss;
		const char *path = addr + 5;
		size_t plen = strlen(path);

		if (plen == 0 || plen >= sizeof(sun->sun_path)) {
			snprintf(err, errlen, "bad unix socket path in '%s'", addr);
			return -EINVAL;
		}
		sun->sun_family = AF_UNIX;
		memcpy(sun->sun_path, path, plen + 1);
		out->la_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + plen + 1);
		out->la_unix = 1;
		return 0;
	}
	if (!strncmp(addr, "shoal://", 8))
		addr += 8;
	if (addr[0] == '[') {
		const char *close = strchr(addr, ']');
		if (!close || close[1] != ':') {
			snprintf(err, errlen, "bad address '%s' (want [V6ADDR]:PORT)", addr);
			return -EINVAL;
		}
		h = addr + 1;
		hlen = (size_t)(close - h);
		port = close + 2;
	} else {
		const char *colon = strrchr(addr, ':');
		if (!colon) {
			snprintf(err, errlen, "bad address '%s' (want unix:PATH or HOST:PORT)", addr);
			return -EINVAL;
		}
		h = addr;
		hlen = (size_t)(colon - addr);
		port = colon + 1;
	}
	if (hlen >= sizeof(host) || !*port || strspn(port, "0123456789") != strlen(port) ||
	    atol(port) > 65535) {
		snprintf(err, errlen, "bad address '%s' (want unix:PATH or HOST:PORT)", addr);
		return -EINVAL;
	}
	memcpy(host, h, hlen);
	host[hlen] = 0;
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = passive ? AI_PASSIVE : 0;
	rc = getaddrinfo(hlen && strcmp(host, "*") ? host : NULL, port, &hints, &res);
	if (rc || !res) {
		snprintf(err, errlen, "cannot resolve '%s': %s", addr, gai_strerror(rc));
		if (res)
			freeaddrinfo(res);
		return -EHOSTUNREACH;
	}
	memcpy(&out->la_ss, res->ai_addr, res->ai_addrlen);
	out->la_len = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

void lkp_format_addr(const struct sockaddr *sa, socklen_t len, char *buf, size_t buflen)
{
	char h[INET6_ADDRSTRLEN];

	if (sa->sa_family == AF_UNIX) {
		const struct sockaddr_un *sun = (const struct sockaddr_un *)sa;
		size_t off = offsetof(struct sockaddr_un, sun_path);
		int n = len > off ? (int)strnlen(sun->sun_path, len - off) : 0;
		snprintf(buf, buflen, "unix:%.*s", n, sun->sun_path);
	} else if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		inet_ntop(AF_INET, &in->sin_addr, h, sizeof(h));
		snprintf(buf, buflen, "%s:%u", h, ntohs(in->sin_port));
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
		inet_ntop(AF_INET6, &in6->sin6_addr, h, sizeof(h));
		snprintf(buf, buflen, "[%s]:%u", h, ntohs(in6->sin6_port));
	} else {
		snprintf(buf, buflen, "family %d", sa->sa_family);
	}
}

/*
 * The secret must be a regular file only its owner can read or write, and
 * that owner this process's user or root, as ssh demands of a private key
 * and corosync of its authkey: whoever can read it can join the cluster.
 */
static int secret_file_private(int fd, const char *path, char *err, size_t errlen)
{
	struct stat st;

	if (fstat(fd, &st)) {
		int e = errno;
		snprintf(err, errlen, "secret file %s: %s", path, strerror(e));
		return -e;
	}
	if (!S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "secret file %s: not a regular file", path);
		return -EINVAL;
	}
	if (st.st_mode & 077) {
		snprintf(err, errlen, "secret file %s is readable or writable by group or others "
				      "(mode 0%o): refused; chmod 600 %s",
			 path, (unsigned)(st.st_mode & 07777), path);
		return -EACCES;
	}
	if (st.st_uid != geteuid() && st.st_uid != 0) {
		snprintf(err, errlen, "secret file %s is owned by uid %u, not by this user (uid %u) "
				      "or root: refused",
			 path, (unsigned)st.st_uid, (unsigned)geteuid());
		return -EACCES;
	}
	return 0;
}

int lkp_read_secret(const char *path, uint8_t **key, size_t *keylen, char *err, size_t errlen)
{
	uint8_t *buf;
	ssize_t n;
	size_t len = 0;
	int fd, e;

	*key = NULL;
	*keylen = 0;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		e = errno;
		snprintf(err, errlen, "secret file %s: %s", path, strerror(e));
		return -e;
	}
	e = secret_file_private(fd, path, err, errlen);
	if (e) {
		close(fd);
		return e;
	}
	buf = malloc(4097);
	if (!buf) {
		close(fd);
		snprintf(err, errlen, "secret file %s: %s", path, strerror(ENOMEM));
		return -ENOMEM;
	}
	while ((n = read(fd, buf + len, 4097 - len)) > 0 && len < 4097)
		len += (size_t)n;
	e = n < 0 ? errno : 0;
	close(fd);
	if (e) {
		snprintf(err, errlen, "secret file %s: %s", path, strerror(e));
		free(buf);
		return -e;
	}
	if (len > 4096) {
		snprintf(err, errlen, "secret file %s: longer than 4096 bytes", path);
		free(buf);
		return -EFBIG;
	}
	while (len && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
		len--;
	if (!len) {
		snprintf(err, errlen, "secret file %s is empty", path);
		free(buf);
		return -ENODATA;
	}
	*key = buf;
	*keylen = len;
	return 0;
}

uint64_t lkp_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * shoal.c - the admin CLI: talks to a running shoal-mount through its
 * control socket (include/shoal/ctl.h) and prints the answer.
 *
 *	shoal stat MOUNTPOINT      counters of the mount
 *	shoal status MOUNTPOINT    device, node, lock, options, pid of the mount
 *	shoal glocks MOUNTPOINT [FILTER]   cached glocks, holders, waiters
 *	shoal glstats MOUNTPOINT [FILTER]  lock statistics per type and glock
 *	shoal trace MOUNTPOINT [FILTER]    stream glock events until ^C
 *	shoal withdraw MOUNTPOINT  stop the mount now (read-only; a cluster node
 *	                           fences itself and is recovered by another)
 *	shoal umount MOUNTPOINT    unmount and wait until the daemon is done
 *	shoal COMMAND MOUNTPOINT [ARGS...]   any other command the daemon knows
 *	shoal help
 *
 * Invariants:
 *  (1) the socket is found from the device number of MOUNTPOINT alone
 *      (any path inside the mount works), never from a table of mounts;
 *  (2) the exit status is 0 only if the daemon answered and its reply does
 *      not start with "error "; exit codes are those of usage();
 *  (3) a FILTER is checked here before anything is sent: a bad one is
 *      exit 2 with the reason and where in the filter it is.
 */
#include <shoal/ctl.h>
#include <shoal/glfilter.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define PROG "shoal"
#define EXIT_FAIL 1
#define EXIT_USAGE 2
#define UMOUNT_WAIT_S 120

static void usage(FILE *out)
{
	fprintf(out,
		"usage: " PROG " COMMAND MOUNTPOINT [ARGS...]\n"
		"       " PROG " help\n"
		"\n"
		"Ask the shoal-mount daemon serving MOUNTPOINT (or any path inside it).\n"
		"\n"
		"commands:\n"
		"  stat      counters of the mount, one \"name value\" per line: device\n"
		"            reads/writes/bytes/flushes, journal commits, writeback,\n"
		"            fsyncs, buffer cache, lock requests, corrupt blocks;\n"
		"            then \"readonly 0|1\" and \"error TEXT\" if it failed\n"
		"  status    device, mountpoint, node, lock, options, entry_timeout, pid, log\n"
		"  glocks [FILTER]\n"
		"            every glock the node caches, with its holders and waiters\n"
		"  glstats [FILTER]\n"
		"            lock manager requests (SH, EX, refused tries), local\n"
		"            requests, callbacks, demotions and round-trip times, per\n"
		"            glock type and per glock\n"
		"  trace [FILTER]\n"
		"            stream glock state changes, lock requests, callbacks and\n"
		"            demote requests as they happen, one line each, until ^C\n"
		"            or the mount goes away\n"
		"  withdraw  stop the mount now, as an I/O error would: read-only,\n"
		"            nothing more written, uncommitted changes dropped; a\n"
		"            cluster node fences itself and keeps its locks until\n"
		"            another node has replayed its journal\n"
		"  umount    unmount MOUNTPOINT and wait until its daemon has finished\n"
		"            writing (plain umount returns before that)\n"
		"  help      this text; `" PROG " help MOUNTPOINT` lists what that\n"
		"            daemon knows\n"
		"Any other COMMAND is sent to the daemon as it is.\n"
		"\n"
		"FILTER (one argument, or several joined by spaces) is an expression\n"
		"over the fields gltype, glnum, prev (from), new (to), target, dstate,\n"
		"flags and kind; numbers decimal or 0x hex, states UN SH DF EX none,\n"
		"kinds state request callback demote; operators == != < > <= >= && ||\n"
		"! and parentheses, e.g.  " PROG " trace /mnt/a 'gltype == 2 && glnum == 1234'\n"
		"(docs/LOCKING.md)\n"
		"\n"
		"exit status:\n"
		"  0  the daemon answered and the command succeeded (trace: the\n"
		"     stream ended because the mount went away)\n"
		"  1  MOUNTPOINT is not a shoal mount, the daemon cannot be reached,\n"
		"     or the command failed (the reply starts with \"error\")\n"
		"  2  bad usage, or a bad FILTER\n");
}

/*
 * The device number of the mount at path, from /proc/self/mountinfo: for a
 * mount whose root cannot be stat'ed (a fenced node answers EIO).  path must
 * name the mountpoint itself.  0, or -1 with errno unchanged.
 */
static int mountinfo_dev(const char *path, dev_t *dev)
{
	char want[8200], line[8192], mp[4096];
	int saved = errno, found = -1;
	unsigned maj, min;
	FILE *f;

	if (path[0] == '/')
		snprintf(want, sizeof(want), "%s", path);
	else if (getcwd(mp, sizeof(mp)))
		snprintf(want, sizeof(want), "%s/%s", mp, path);
	else
		return -1;
	for (size_t n = strlen(want); n > 1 && want[n - 1] == '/'; n--)
		want[n - 1] = 0;
	f = fopen("/proc/self/mountinfo", "r");
	if (!f) {
		errno = saved;
		return -1;
	}
	while (fgets(line, sizeof(line), f)) {
		char raw[4096], *o = mp;
		if (sscanf(line, "%*u %*u %u:%u %*s %4095s", &maj, &min, raw) != 3)
			continue;
		for (const char *r = raw; *r && o < mp + sizeof(mp) - 1; r++) {
			if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] && r[3]) {
				*o++ = (char)(((r[1] - '0') << 6) | ((r[2] - '0') << 3) | (r[3] - '0'));
				r += 3;
			} else {
				*o++ = *r;
			}
		}
		*o = 0;
		if (!strcmp(mp, want) && strstr(line, " - fuse.shoal ")) {
			*dev = makedev(maj, min);
			found = 0;
		}
	}
	fclose(f);
	errno = saved;
	return found;
}

/* Connect to the control socket of the mount holding path: fd or -errno. */
static int ctl_connect(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	int fd, ret;

	if (stat(path, &st) < 0 && mountinfo_dev(path, &st.st_dev) < 0) {
		ret = -errno;
		fprintf(stderr, PROG ": %s: %s\n", path, strerror(errno));
		return ret;
	}
	shoal_ctl_path(sa.sun_path, sizeof(sa.sun_path), st.st_dev, "sock");
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		ret = -errno;
		fprintf(stderr, PROG ": socket: %s\n", strerror(errno));
		return ret;
	}
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		ret = -errno;
		if (errno == ENOENT)
			fprintf(stderr, PROG ": %s: not a shoal mount (no control socket)\n",
				path);
		else if (errno == ECONNREFUSED)
			fprintf(stderr, PROG ": %s: not a shoal mount (stale control socket %s)\n",
				path, sa.sun_path);
		else
			fprintf(stderr, PROG ": %s: %s: %s\n", path, sa.sun_path, strerror(errno));
		close(fd);
		return ret;
	}
	return fd;
}

/*
 * Send "line\n" to the mount holding path; the reply goes to out (if not
 * NULL) and, whole, to *reply (if not NULL; the caller frees it).
 * Returns EXIT_SUCCESS or EXIT_FAIL.
 */
static int ctl_call(const char *path, const char *line, FILE *out, char **reply)
{
	char *req = NULL, *buf = NULL, chunk[4096];
	size_t size = 0;
	FILE *mem;
	ssize_t n;
	int fd, ret = EXIT_FAIL;

	if (strlen(line) >= SHOAL_CTL_LINE_MAX || strchr(line, '\n')) {
		fprintf(stderr, PROG ": command too long or with a newline\n");
		return EXIT_USAGE;
	}
	fd = ctl_connect(path);
	if (fd < 0)
		return EXIT_FAIL;
	mem = open_memstream(&buf, &size);
	if (!mem || asprintf(&req, "%s\n", line) < 0)
		goto out_close;
	if (send(fd, req, strlen(req), MSG_NOSIGNAL) != (ssize_t)strlen(req)) {
		fprintf(stderr, PROG ": %s: send: %s\n", path, strerror(errno));
		goto out_close;
	}
	shutdown(fd, SHUT_WR);
	while ((n = read(fd, chunk, sizeof(chunk))) != 0) {
		if (n < 0) {
			if (errno == EINTR)
				continue;
			fprintf(stderr, PROG ": %s: read: %s\n", path, strerror(errno));
			goto out_close;
		}
		fwrite(chunk, 1, (size_t)n, mem);
		if (out)
			fwrite(chunk, 1, (size_t)n, out);
	}
	fclose(mem);
	mem = NULL;
	ret = strncmp(buf, "error", 5) == 0 ? EXIT_FAIL : EXIT_SUCCESS;
	if (reply) {
		*reply = buf;
		buf = NULL;
	}
out_close:
	if (mem)
		fclose(mem);
	free(buf);
	free(req);
	close(fd);
	return ret;
}

/* The value of the "key value" line of reply, in a new string, or NULL. */
static char *reply_field(const char *reply, const char *key)
{
	size_t klen = strlen(key);
	const char *p;

	for (p = reply; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
		if (!strncmp(p, key, klen) && p[klen] == ' ')
			return strndup(p + klen + 1, strcspn(p + klen + 1, "\n"));
	return NULL;
}

/* Does pid still run?  A zombie has finished: its reaper may be slow. */
static int pid_running(long pid)
{
	char path[64], buf[512], *p;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return kill((pid_t)pid, 0) == 0 || errno != ESRCH; /* no /proc? */
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	p = strrchr(buf, ')'); /* "pid (comm) S ...": comm may hold anything */
	return !(p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X'));
}

/* FILTER as given: 0, or EXIT_USAGE after saying what is wrong and where. */
static int check_filter(const char *filter)
{
	struct glfilter f;
	char err[256];
	int col = 0;

	if (glf_compile(&f, filter, err, sizeof(err)) == 0)
		return 0;
	fprintf(stderr, PROG ": bad filter: %s\n", err);
	if (sscanf(err, "column %d", &col) == 1 && col > 0)
		fprintf(stderr, "  %s\n  %*s^\n", filter, col - 1, "");
	return EXIT_USAGE;
}

/* Write all of buf to fd 1; -1 when stdout is gone (| head). */
static int out_all(const char *buf, size_t len)
{
	while (len) {
		ssize_t n = write(STDOUT_FILENO, buf, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/*
 * trace: send "trace FILTER" and copy the stream to stdout as it comes,
 * until the daemon closes it (the mount went away) or we are stopped.
 * The write side stays open: closing it tells the daemon we left.
 */
static int cmd_trace(const char *path, const char *filter)
{
	char chunk[8192], *req = NULL;
	size_t got = 0;
	int fd, ret = EXIT_FAIL, first = 1;
	ssize_t n;

	if (check_filter(filter))
		return EXIT_USAGE;
	if (asprintf(&req, "trace %s\n", filter) < 0 || strlen(req) > SHOAL_CTL_LINE_MAX) {
		fprintf(stderr, PROG ": filter too long\n");
		free(req);
		return EXIT_USAGE;
	}
	fd = ctl_connect(path);
	if (fd < 0) {
		free(req);
		return EXIT_FAIL;
	}
	if (send(fd, req, strlen(req), MSG_NOSIGNAL) != (ssize_t)strlen(req)) {
		fprintf(stderr, PROG ": %s: send: %s\n", path, strerror(errno));
		goto out_close;
	}
	for (;;) {
		n = read(fd, chunk, sizeof(chunk));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			fprintf(stderr, PROG ": %s: read: %s\n", path, strerror(errno));
			goto out_close;
		}
		if (n == 0)
			break;
		if (first && got + (size_t)n >= 6 && !strncmp(chunk, "error ", 6)) {
			fwrite(chunk, 1, (size_t)n, stderr);
			ret = strncmp(chunk, "error bad filter", 16) ? EXIT_FAIL : EXIT_USAGE;
			goto out_close;
		}
		first = 0;
		got += (size_t)n;
		if (out_all(chunk, (size_t)n) < 0) {
			ret = EXIT_SUCCESS; /* the reader of our output is gone */
			goto out_close;
		}
	}
	ret = got ? EXIT_SUCCESS : EXIT_FAIL;
	if (!got)
		fprintf(stderr, PROG ": %s: the daemon closed the trace without a word\n", path);
out_close:
	free(req);
	close(fd);
	return ret;
}

/* umount: find the daemon, unmount its mountpoint, wait for it to exit. */
static int cmd_umount(const char *path)
{
	char *reply = NULL, *mp = NULL, *pidstr = NULL;
	long pid = 0;
	int i, ret;

	ret = ctl_call(path, "status", NULL, &reply);
	if (ret != EXIT_SUCCESS)
		goto out_free;
	ret = EXIT_FAIL;
	mp = reply_field(reply, "mountpoint");
	pidstr = reply_field(reply, "pid");
	if (pidstr)
		pid = strtol(pidstr, NULL, 10);
	if (!mp || pid <= 0) {
		fprintf(stderr, PROG ": %s: the daemon did not say its mountpoint and pid\n", path);
		goto out_free;
	}
	if (umount(mp) < 0) {
		fprintf(stderr, PROG ": %s: umount: %s\n", mp, strerror(errno));
		goto out_free;
	}
	for (i = 0; i < UMOUNT_WAIT_S * 100; i++) {
		struct timespec ts = { .tv_nsec = 10 * 1000 * 1000 };
		if (!pid_running(pid)) {
			ret = EXIT_SUCCESS;
			goto out_free;
		}
		nanosleep(&ts, NULL);
	}
	fprintf(stderr, PROG ": %s: unmounted, but daemon %ld still runs after %d s\n", mp, pid,
		UMOUNT_WAIT_S);
out_free:
	free(pidstr);
	free(mp);
	free(reply);
	return ret;
}

int main(int argc, char **argv)
{
	const char *cmd, *mp;
	char *line;
	size_t len;
	int i, ret;

	if (argc < 2) {
		usage(stderr);
		return EXIT_USAGE;
	}
	cmd = argv[1];
	if (!strcmp(cmd, "help") || !strcmp(cmd, "-h") || !strcmp(cmd, "--help")) {
		if (argc == 3)
			return ctl_call(argv[2], "help", stdout, NULL);
		usage(stdout);
		return EXIT_SUCCESS;
	}
	if (argc < 3 || cmd[0] == '-') {
		usage(stderr);
		return EXIT_USAGE;
	}
	mp = argv[2];
	if (!strcmp(cmd, "umount") || !strcmp(cmd, "unmount")) {
		if (argc != 3) {
			usage(stderr);
			return EXIT_USAGE;
		}
		return cmd_umount(mp);
	}
	if ((!strcmp(cmd, "stat") || !strcmp(cmd, "status") || !strcmp(cmd, "withdraw")) &&
	    argc != 3) {
		usage(stderr);
		return EXIT_USAGE;
	}

	/* "COMMAND ARGS..." on one line */
	len = strlen(cmd) + 1;
	for (i = 3; i < argc; i++)
		len += strlen(argv[i]) + 1;
	line = malloc(len);
	if (!line) {
		fprintf(stderr, PROG ": %s\n", strerror(ENOMEM));
		return EXIT_FAIL;
	}
	strcpy(line, cmd);
	for (i = 3; i < argc; i++) {
		strcat(line, " ");
		strcat(line, argv[i]);
	}
	if (!strcmp(cmd, "trace")) {
		ret = cmd_trace(mp, line + strlen(cmd) + (argc > 3));
	} else if ((!strcmp(cmd, "glocks") || !strcmp(cmd, "glstats")) &&
		   check_filter(line + strlen(cmd) + (argc > 3))) {
		ret = EXIT_USAGE;
	} else {
		ret = ctl_call(mp, line, stdout, NULL);
	}
	free(line);
	return ret;
}

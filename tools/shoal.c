/*
 * shoal.c - the admin CLI: talks to a running shoal-mount through its
 * control socket (include/shoal/ctl.h) and prints the answer.
 *
 *	shoal stat MOUNTPOINT      counters of the mount
 *	shoal status MOUNTPOINT    device, node, lock, options, pid of the mount
 *	shoal umount MOUNTPOINT    unmount and wait until the daemon is done
 *	shoal COMMAND MOUNTPOINT [ARGS...]   any other command the daemon knows
 *	shoal help
 *
 * Invariants:
 *  (1) the socket is found from the device number of MOUNTPOINT alone
 *      (any path inside the mount works), never from a table of mounts;
 *  (2) the exit status is 0 only if the daemon answered and its reply does
 *      not start with "error "; exit codes are those of usage().
 */
#include <shoal/ctl.h>

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
		"  umount    unmount MOUNTPOINT and wait until its daemon has finished\n"
		"            writing (plain umount returns before that)\n"
		"  help      this text; `" PROG " help MOUNTPOINT` lists what that\n"
		"            daemon knows\n"
		"Any other COMMAND is sent to the daemon as it is.\n"
		"\n"
		"exit status:\n"
		"  0  the daemon answered and the command succeeded\n"
		"  1  MOUNTPOINT is not a shoal mount, the daemon cannot be reached,\n"
		"     or the command failed (the reply starts with \"error\")\n"
		"  2  bad usage\n");
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
	if ((!strcmp(cmd, "stat") || !strcmp(cmd, "status")) && argc != 3) {
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
	ret = ctl_call(mp, line, stdout, NULL);
	free(line);
	return ret;
}

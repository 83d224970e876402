/*
 * guard.c - the guardian of a mount.  The kernel frees a FUSE mount whose
 * daemon died only once every thread of the daemon has left: a thread
 * stuck in a notification that waits for a page lock, held by a request
 * only this daemon could answer, keeps /dev/fuse open for ever, every
 * program on the mount waits with it, and even a clean death leaves the
 * dead mount in the mount table (ENOTCONN) until someone detaches it.
 * The guardian, a process of its own forked before any thread, watches
 * the daemon; when the daemon dies without having unmounted, it aborts
 * the FUSE connection (/sys/fs/fuse/connections/N/abort: every waiting
 * request fails at once, the stuck thread's too) and detaches the mount.
 *
 * Invariants:
 *  (1) the guardian holds nothing of the daemon's: no device, no
 *      /dev/fuse, no lock, no descriptor but its pipe, no working
 *      directory in a mount; its stdio is /dev/null (a caller reading the
 *      mount's output must not wait for it); it writes to the mount's log;
 *  (2) the daemon tells it, over a pipe, "P ID..." right before its
 *      mount(2) (the mount ids of the mounts at the mountpoint then, read
 *      by the daemon itself, so none is missed however late the guardian
 *      reads the line), "M MAJOR MINOR" once mounted and serving, and "D"
 *      once unmounted the normal way; at "D" the guardian leaves.  A
 *      daemon that dies after "P" but before "M" (between its mount(2)
 *      and its first served request: it cannot know its device number
 *      yet) left its mount on top of those, if a new one of type
 *      fuse.shoal is there;
 *  (3) the daemon is dead when the pipe reaches end of file, or when its
 *      main thread has exited (a zombie leader whose other threads are
 *      stuck in the kernel keeps the pipe open): looked at every
 *      GUARD_POLL_MS;
 *  (4) it touches only the mount it was told of: that device's
 *      connection, and a detach only while the top mount at the
 *      mountpoint is that device (a new mount there is left alone); or,
 *      before "M", the top mount there if it is a fuse.shoal mount made
 *      since "P"; it never looks into the dead mount (no stat), so nothing
 *      it does waits on it;
 *  (5) it ignores the terminal's and kill's polite signals (SIGINT,
 *      SIGTERM, SIGHUP, SIGQUIT): the daemon's death is what ends it.
 */
#include "guard.h"

#include <shoal/ctl.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define GUARD_POLL_MS 250
#define GUARD_MAX_MOUNTS 8 /* mounts at the mountpoint "P" can name */
#define FUSECTL "/sys/fs/fuse/connections"

static int guard_fd = -1; /* the daemon's end of the pipe */

/* One line in the mount's log (1): the daemon's stderr is the log once
 * detached; the guardian's is /dev/null. */
static void guard_log(dev_t dev, const char *fmt, ...)
{
	char path[256], stamp[32];
	time_t now = time(NULL);
	struct tm tm;
	va_list ap;
	FILE *f;

	if (shoal_ctl_path(path, sizeof(path), dev, "log") < 0)
		return;
	f = fopen(path, "ae");
	if (!f)
		return;
	strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", localtime_r(&now, &tm));
	fprintf(f, "%s shoal-guard[%ld]: ", stamp, (long)getpid());
	va_start(ap, fmt);
	vfprintf(f, fmt, ap);
	va_end(ap);
	fputc('\n', f);
	fclose(f);
}

/* Has process pid's main thread exited (3)?  No such process: yes. */
static int leader_gone(pid_t pid)
{
	char path[64], buf[512], *p;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT || errno == ESRCH;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 1;
	buf[n] = '\0';
	p = strrchr(buf, ')');
	return p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}

/* Abort the FUSE connection of dev: -errno or 0. */
static int abort_conn(dev_t dev)
{
	char path[96];
	int fd;

	/* the directory's name is the kernel's dev_t: major << 20 | minor */
	snprintf(path, sizeof(path), FUSECTL "/%u/abort",
		 (unsigned)(major(dev) << 20 | minor(dev)));
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT &&
	    mount("fusectl", FUSECTL, "fusectl", 0, NULL) == 0)
		fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (write(fd, "1", 1) != 1) {
		int err = -errno;
		close(fd);
		return err;
	}
	close(fd);
	return 0;
}

/* Undo /proc/self/mountinfo's octal escapes (\040 and the like) in place. */
static void unescape(char *s)
{
	char *d = s;

	while (*s) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
		    s[3] >= '0' && s[3] <= '7') {
			*d++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
			s += 4;
		} else {
			*d++ = *s++;
		}
	}
	*d = '\0';
}

/* The mounts at mp, as /proc/self/mountinfo lists them. */
struct guard_mounts {
	unsigned gm_ids[GUARD_MAX_MOUNTS]; /* mount ids, oldest first */
	unsigned gm_n;                     /* of them kept (the first ones) */
	unsigned gm_total;                 /* mounts at mp */
	int gm_found;                      /* any mount at mp */
	unsigned gm_top_id;                /* the top one: the last listed */
	dev_t gm_top_dev;
	int gm_top_shoal;                  /* its type is fuse.shoal */
};

/* Fill gm with the mounts at mp: 0, or -errno. */
static int mounts_at(const char *mp, struct guard_mounts *gm)
{
	char *line = NULL;
	size_t cap = 0;
	FILE *f = fopen("/proc/self/mountinfo", "re");

	memset(gm, 0, sizeof(*gm));
	if (!f)
		return -errno;
	while (getline(&line, &cap, f) > 0) {
		unsigned id, maj, min;
		char point[4096], fstype[64];
		const char *sep;

		/* ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - TYPE ... */
		if (sscanf(line, "%u %*u %u:%u %*s %4095s", &id, &maj, &min, point) != 4)
			continue;
		unescape(point);
		if (strcmp(point, mp))
			continue;
		sep = strstr(line, " - ");
		if (!sep || sscanf(sep + 3, "%63s", fstype) != 1)
			fstype[0] = '\0';
		/* later lines are mounts made on top */
		gm->gm_found = 1;
		gm->gm_top_id = id;
		gm->gm_top_dev = makedev(maj, min);
		gm->gm_top_shoal = !strcmp(fstype, "fuse.shoal");
		if (gm->gm_n < GUARD_MAX_MOUNTS)
			gm->gm_ids[gm->gm_n++] = id;
		gm->gm_total++;
	}
	free(line);
	fclose(f);
	return 0;
}

/* Detach the mount at mp if the top one there is dev (4): 1 done, 0 not
 * ours (or gone already), -errno. */
static int detach(const char *mp, dev_t dev)
{
	struct guard_mounts gm;
	int err = mounts_at(mp, &gm);

	if (err)
		return err;
	if (!gm.gm_found || gm.gm_top_dev != dev)
		return 0;
	return umount2(mp, MNT_DETACH) == 0 ? 1 : -errno;
}

/* Died between "P" and "M" (2): the device of the mount it made, the top
 * one at mp if it is a fuse.shoal mount that was not there at "P" (4);
 * 0 if there is none. */
static dev_t new_mount(const char *mp, const struct guard_mounts *before)
{
	struct guard_mounts now;

	if (mounts_at(mp, &now) || !now.gm_found || !now.gm_top_shoal)
		return 0;
	for (unsigned i = 0; i < before->gm_n; i++)
		if (before->gm_ids[i] == now.gm_top_id)
			return 0;
	return now.gm_top_dev;
}

/* "P ID...": the mounts at the mountpoint before the daemon's mount(2). */
static int parse_before(const char *line, struct guard_mounts *before)
{
	const char *p = line + 1;
	char *end;

	memset(before, 0, sizeof(*before));
	while (*p == ' ') {
		unsigned long id = strtoul(p + 1, &end, 10);
		if (end == p + 1 || before->gm_n == GUARD_MAX_MOUNTS)
			return -EINVAL;
		before->gm_ids[before->gm_n++] = (unsigned)id;
		p = end;
	}
	return *p ? -EINVAL : 0;
}

static void __attribute__((noreturn)) guard_run(int rfd, const char *mp, pid_t daemon)
{
	char buf[128];
	size_t have = 0;
	unsigned maj = 0, min = 0;
	int mounted = 0, mounting = 0, fd, err, gone;
	struct guard_mounts before;
	dev_t dev;

	setsid();
	prctl(PR_SET_NAME, "shoal-guard");
	signal(SIGINT, SIG_IGN);
	signal(SIGTERM, SIG_IGN);
	signal(SIGHUP, SIG_IGN);
	signal(SIGQUIT, SIG_IGN);
	signal(SIGPIPE, SIG_IGN);
	fd = open("/dev/null", O_RDWR);
	if (fd >= 0) {
		dup2(fd, STDIN_FILENO);
		dup2(fd, STDOUT_FILENO);
		dup2(fd, STDERR_FILENO);
		if (fd > STDERR_FILENO)
			close(fd);
	}
	if (chdir("/") < 0) {
		/* nothing below uses a relative path */
	}
	for (;;) {
		struct pollfd p = { .fd = rfd, .events = POLLIN };
		int r = poll(&p, 1, GUARD_POLL_MS);
		ssize_t n;

		if (r < 0 && errno != EINTR)
			_exit(1);
		if (r <= 0) {
			if (leader_gone(daemon))
				break;
			continue;
		}
		n = read(rfd, buf + have, sizeof(buf) - 1 - have);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break; /* end of file: every thread of the daemon is gone */
		have += (size_t)n;
		buf[have] = '\0';
		char *nl;
		while ((nl = strchr(buf, '\n'))) {
			*nl = '\0';
			if (buf[0] == 'D')
				_exit(0); /* (2): unmounted the normal way */
			if (sscanf(buf, "M %u %u", &maj, &min) == 2)
				mounted = 1;
			else if (buf[0] == 'P')
				mounting = !parse_before(buf, &before);
			have -= (size_t)(nl + 1 - buf);
			memmove(buf, nl + 1, have + 1);
		}
		if (have == sizeof(buf) - 1)
			have = 0; /* not a line of ours: drop it */
	}
	if (mounted)
		dev = makedev(maj, min);
	else if (mounting)
		dev = new_mount(mp, &before); /* died right after its mount(2) */
	else
		dev = 0;
	if (!dev)
		_exit(0); /* died before its mount was up: nothing to free */
	err = abort_conn(dev);
	gone = detach(mp, dev);
	guard_log(dev,
		  "shoal-mount[%ld] died without unmounting %s%s: FUSE connection %s%s%s, %s",
		  (long)daemon, mp, mounted ? "" : " (while mounting)",
		  err ? "not aborted (" : "aborted",
		  err ? strerror(-err) : "", err ? ")" : "",
		  gone > 0 ? "mount detached" :
		  gone == 0 ? "mount not detached (not the top one there, or gone)" :
			      "mount could not be detached");
	_exit(0);
}

int guard_start(const char *mountpoint)
{
	pid_t daemon = getpid(), pid;
	int pfd[2], st;

	if (pipe2(pfd, O_CLOEXEC) < 0)
		return -errno;
	pid = fork();
	if (pid < 0) {
		int err = -errno;
		close(pfd[0]);
		close(pfd[1]);
		return err;
	}
	if (pid == 0) {
		/* the guardian is the child of a child that leaves at once:
		 * nobody's child here, nothing for the daemon to reap */
		pid_t g = fork();
		if (g != 0)
			_exit(g < 0 ? 1 : 0);
		if (pfd[0] != 3) {
			dup2(pfd[0], 3);
			close(pfd[0]);
		}
		close_range(4, ~0u, 0); /* (1) */
		guard_run(3, mountpoint, daemon);
	}
	close(pfd[0]);
	while (waitpid(pid, &st, 0) < 0) {
		if (errno != EINTR) {
			close(pfd[1]);
			return -ECHILD;
		}
	}
	if (!WIFEXITED(st) || WEXITSTATUS(st)) {
		close(pfd[1]);
		return -EAGAIN; /* the second fork failed */
	}
	guard_fd = pfd[1];
	return 0;
}

void guard_mounting(const char *mountpoint)
{
	struct guard_mounts gm;
	char line[8 + GUARD_MAX_MOUNTS * 12];
	size_t n = 1;

	/* more mounts there than a line names: the guardian could not tell
	 * a new one from an old one, and frees nothing before "M" */
	if (guard_fd < 0 || mounts_at(mountpoint, &gm) || gm.gm_total > GUARD_MAX_MOUNTS)
		return;
	line[0] = 'P';
	for (unsigned i = 0; i < gm.gm_n; i++)
		n += (size_t)snprintf(line + n, sizeof(line) - n, " %u", gm.gm_ids[i]);
	line[n++] = '\n';
	if (write(guard_fd, line, n) != (ssize_t)n) {
		/* the guardian is gone: nothing to tell */
	}
}

void guard_mounted(dev_t dev)
{
	if (guard_fd >= 0)
		dprintf(guard_fd, "M %u %u\n", major(dev), minor(dev));
}

void guard_done(void)
{
	if (guard_fd < 0)
		return;
	if (write(guard_fd, "D\n", 2) != 2) {
		/* the guardian is gone: nothing waits for this */
	}
	close(guard_fd);
	guard_fd = -1;
}

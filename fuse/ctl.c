/*
 * ctl.c - the per-mount control socket server: one thread that accepts
 * connections on /run/shoal/mnt-MAJOR:MINOR.sock, reads one command line,
 * runs the matching entry of a command table and closes the connection.
 *
 * Owns the control thread, the listening socket, its path and a wake-up
 * pipe.  Invariants:
 *  (1) the control thread is never a FUSE worker: it may issue requests to
 *      its own mount (the stat of the mountpoint that yields the device
 *      number) without deadlocking the session;
 *  (2) commands run one at a time on the control thread, each connection is
 *      served to the end before the next is accepted; a client that stalls
 *      is dropped after CTL_IO_TIMEOUT_S, so it cannot stop the server;
 *  (3) the socket file exists only while the server is listening on it:
 *      created (after removing a stale one) before ready is called, removed
 *      by ctl_stop() only if it is still the file this server bound: the
 *      mount's device number is free again once the kernel has unmounted
 *      it, and a new mount that got the same number may have put its own
 *      socket at the same path before this daemon stops (a lazy or external
 *      unmount of a busy or stopped daemon).  Both the replacing (bind) and
 *      the removal happen under flock of SHOAL_CTL_DIR, so the check and the
 *      unlink are one step against every other shoal daemon.  The file is
 *      known by its device, inode number and change time together (an
 *      inode number alone comes back for the next file made); the flock is
 *      waited for at most CTL_LOCK_MS (a daemon stuck holding it does not
 *      stop this one: the step is taken unlocked), and the mount point is
 *      looked at again under it, after the bind, so a socket is never left
 *      for a mount that went away meanwhile;
 *  (4) ready is called exactly once, from the control thread;
 *  (5) a streaming command (cc_stream) runs on a thread of its own, at most
 *      CTL_STREAMS_MAX at once, so it never holds up the other commands;
 *      ctl_stop sets cs_stop, which each stream notices within a fraction
 *      of a second, and joins every stream thread before it returns.
 *
 * States: STARTING (stat + bind) -> SERVING -> STOPPED (ctl_stop writes the
 * wake-up pipe; the thread leaves its poll loop; ctl_stop joins it).
 * A failed STARTING goes straight to STOPPED after ready(err).
 */
#include "ctl.h"
#include "smount.h"

#include <shoal/ctl.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#define CTL_IO_TIMEOUT_S 5
#define CTL_STREAMS_MAX 8

struct ctl_stream {
	struct ctl_server *st_cs;
	const struct ctl_cmd *st_cmd;
	int st_fd;
	int st_done;              /* set by the stream thread as it ends */
	pthread_t st_thread;
	struct ctl_stream *st_next;
	char st_args[];
};

struct ctl_server {
	char *cs_mountpoint;
	const struct ctl_cmd *cs_cmds;
	void *cs_arg;
	ctl_ready_fn cs_ready;
	void *cs_ready_arg;
	pthread_t cs_thread;
	int cs_wake[2];     /* ctl_stop writes [1]; the thread polls [0] */
	int cs_listen;      /* -1 until bound; owned by the thread */
	char cs_path[sizeof(((struct sockaddr_un *)0)->sun_path)]; /* "" until bound */
	struct stat cs_sock; /* the socket file this server bound (3): st_dev, st_ino, st_ctim */
	int cs_stop;                 /* ctl_stop: streams end (atomic) */
	struct ctl_stream *cs_streams; /* running or ended, not yet joined (control thread) */
	int cs_nstreams;
};

/* The built-in "help": every command and what it does. */
static void ctl_help(struct ctl_server *cs, FILE *out)
{
	const struct ctl_cmd *cc;

	fprintf(out, "help: list the commands\n");
	for (cc = cs->cs_cmds; cc->cc_name; cc++)
		fprintf(out, "%s: %s\n", cc->cc_name, cc->cc_help);
}

/* Read one line (up to '\n' or EOF) into buf: its length, or -errno. */
static ssize_t ctl_read_line(int fd, char *buf, size_t size)
{
	size_t len = 0;

	while (len < size - 1) {
		ssize_t n = read(fd, buf + len, size - 1 - len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			break;
		len += (size_t)n;
		if (memchr(buf + len - (size_t)n, '\n', (size_t)n))
			break;
	}
	buf[len] = '\0';
	if (len == size - 1 && !strchr(buf, '\n'))
		return -E2BIG;
	buf[strcspn(buf, "\r\n")] = '\0';
	return (ssize_t)strlen(buf);
}

static void *ctl_stream_main(void *arg)
{
	struct ctl_stream *st = arg;

	st->st_cmd->cc_stream(st->st_cs->cs_arg, st->st_args, st->st_fd, &st->st_cs->cs_stop);
	close(st->st_fd);
	__atomic_store_n(&st->st_done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* Join the stream threads that have ended (all of them with all set). */
static void ctl_reap(struct ctl_server *cs, int all)
{
	struct ctl_stream **pp = &cs->cs_streams, *st;

	while ((st = *pp)) {
		if (!all && !__atomic_load_n(&st->st_done, __ATOMIC_ACQUIRE)) {
			pp = &st->st_next;
			continue;
		}
		pthread_join(st->st_thread, NULL);
		*pp = st->st_next;
		cs->cs_nstreams--;
		free(st);
	}
}

/* Hand fd to a thread running cc's stream.  0, or -errno (fd still ours). */
static int ctl_stream_start(struct ctl_server *cs, const struct ctl_cmd *cc, const char *args,
			    int fd)
{
	struct ctl_stream *st;

	ctl_reap(cs, 0);
	if (cs->cs_nstreams >= CTL_STREAMS_MAX)
		return -EBUSY;
	st = calloc(1, sizeof(*st) + strlen(args) + 1);
	if (!st)
		return -ENOMEM;
	st->st_cs = cs;
	st->st_cmd = cc;
	st->st_fd = fd;
	strcpy(st->st_args, args);
	if (pthread_create(&st->st_thread, NULL, ctl_stream_main, st)) {
		free(st);
		return -EAGAIN;
	}
	st->st_next = cs->cs_streams;
	cs->cs_streams = st;
	cs->cs_nstreams++;
	return 0;
}

/* Serve one connection: read the command, run it, reply.  Closes fd
 * (or hands it to a streaming command's thread). */
static void ctl_serve(struct ctl_server *cs, int fd)
{
	struct timeval tv = { .tv_sec = CTL_IO_TIMEOUT_S };
	char line[SHOAL_CTL_LINE_MAX];
	const struct ctl_cmd *cc = NULL;
	const char *args;
	size_t namelen;
	ssize_t n;
	FILE *out;
	int ret;

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	n = ctl_read_line(fd, line, sizeof(line));
	if (n >= 0) {
		namelen = strcspn(line, " \t");
		args = line + namelen + strspn(line + namelen, " \t");
		for (cc = cs->cs_cmds; cc->cc_name; cc++)
			if (strlen(cc->cc_name) == namelen && !strncmp(line, cc->cc_name, namelen))
				break;
		if (cc->cc_name && cc->cc_stream) {
			ret = ctl_stream_start(cs, cc, args, fd);
			if (ret == 0)
				return;
			dprintf(fd, "error %s\n", strerror(-ret));
			close(fd);
			return;
		}
	}
	out = fdopen(fd, "w");
	if (!out) {
		close(fd);
		return;
	}
	if (n < 0) {
		fprintf(out, "error %s\n", strerror((int)-n));
		goto out_close;
	}
	if (namelen == 4 && !strncmp(line, "help", 4)) {
		ctl_help(cs, out);
		goto out_close;
	}
	if (!cc->cc_name) {
		fprintf(out, "error unknown command\n");
		goto out_close;
	}
	ret = cc->cc_run(cs->cs_arg, args, out);
	if (ret < 0)
		fprintf(out, "error %s\n", strerror(-ret));
out_close:
	fclose(out); /* closes fd; a vanished client is no error of ours */
}

/*
 * FUSE caps the readahead the kernel offers at INIT (128 KiB), which makes
 * cold sequential reads arrive in small requests; the mount's backing-dev
 * setting can be raised afterwards.  Best effort: failure only costs speed.
 */
static void set_readahead(dev_t dev)
{
	char path[96];
	snprintf(path, sizeof(path), "/sys/class/bdi/%u:%u/read_ahead_kb", major(dev), minor(dev));
	FILE *f = fopen(path, "w");
	if (f) {
		fprintf(f, "%u\n", SMOUNT_READAHEAD_KB);
		fclose(f);
	}
}

/*
 * (3): hold SHOAL_CTL_DIR locked against the other daemons' binds and
 * removals; -1 if it cannot be (no lock then: the step is still taken).
 */
#define CTL_LOCK_MS 2000

static int dir_lock(void)
{
	int fd = open(SHOAL_CTL_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0)
		return -1;
	for (int waited = 0; flock(fd, LOCK_EX | LOCK_NB) < 0; waited += 10) {
		if ((errno != EWOULDBLOCK && errno != EINTR) || waited >= CTL_LOCK_MS) {
			fprintf(stderr, "shoal-mount: %s: %s: going on without the lock\n",
				SHOAL_CTL_DIR, errno == EWOULDBLOCK ? "locked too long" : strerror(errno));
			close(fd);
			return -1;
		}
		usleep(10000);
	}
	return fd;
}

static void dir_unlock(int fd)
{
	if (fd >= 0)
		close(fd); /* drops the flock */
}

/* Is st the socket file this server bound (3)? */
static int is_own(const struct ctl_server *cs, const struct stat *st)
{
	return S_ISSOCK(st->st_mode) && st->st_dev == cs->cs_sock.st_dev &&
	       st->st_ino == cs->cs_sock.st_ino &&
	       st->st_ctim.tv_sec == cs->cs_sock.st_ctim.tv_sec &&
	       st->st_ctim.tv_nsec == cs->cs_sock.st_ctim.tv_nsec;
}

/* Remove the socket file if it is still the one this server bound (3). */
static void unlink_own(struct ctl_server *cs)
{
	struct stat st;
	int dfd = dir_lock();

	if (lstat(cs->cs_path, &st) == 0 && is_own(cs, &st))
		unlink(cs->cs_path);
	dir_unlock(dfd);
}

/* STARTING: learn the device number, bind and listen.  0 or -errno. */
static int ctl_bind(struct ctl_server *cs, dev_t *dev)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char parent[PATH_MAX];
	struct stat st, pst;
	int fd, ret;

	if (stat(cs->cs_mountpoint, &st) < 0)
		return -errno;
	/* Still our mount?  Its root is on another device than its parent. */
	snprintf(parent, sizeof(parent), "%s/..", cs->cs_mountpoint);
	if (stat(parent, &pst) == 0 && pst.st_dev == st.st_dev)
		return -ENOTCONN;
	if (mkdir(SHOAL_CTL_DIR, 0700) < 0 && errno != EEXIST)
		return -errno;
	shoal_ctl_path(cs->cs_path, sizeof(cs->cs_path), st.st_dev, "sock");
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		ret = -errno;
		goto out_nopath;
	}
	memcpy(sa.sun_path, cs->cs_path, sizeof(sa.sun_path));
	/*
	 * A socket with our device number was left by a daemon whose mount is
	 * gone (the number is ours now); one still stopping will not remove
	 * ours (3).
	 */
	int dfd = dir_lock();
	unlink(cs->cs_path);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		ret = -errno;
		dir_unlock(dfd);
		goto out_close;
	}
	/* its identity once its mode is final: chmod changes the ctime */
	ret = chmod(cs->cs_path, 0600) < 0 || lstat(cs->cs_path, &cs->cs_sock) < 0 ? -errno : 0;
	if (!ret) {
		/* (3): still our mount, now that the socket is there? */
		struct stat now;
		if (stat(cs->cs_mountpoint, &now) < 0 || now.st_dev != st.st_dev)
			ret = -ENOTCONN;
	}
	if (ret < 0)
		unlink(cs->cs_path); /* just bound, under the lock: ours */
	dir_unlock(dfd);
	if (ret < 0)
		goto out_close;
	if (listen(fd, 16) < 0) {
		ret = -errno;
		goto out_unlink;
	}
	cs->cs_listen = fd;
	*dev = st.st_dev;
	set_readahead(st.st_dev);
	return 0;

out_unlink:
	unlink_own(cs);
out_close:
	close(fd);
out_nopath:
	cs->cs_path[0] = '\0';
	return ret;
}

static void *ctl_main(void *arg)
{
	struct ctl_server *cs = arg;
	dev_t dev = 0;
	int ret;

	ret = ctl_bind(cs, &dev);
	cs->cs_ready(cs->cs_ready_arg, ret < 0 ? 0 : dev, ret);
	if (ret < 0)
		return NULL;
	for (;;) {
		struct pollfd pfd[2] = {
			{ .fd = cs->cs_listen, .events = POLLIN },
			{ .fd = cs->cs_wake[0], .events = POLLIN },
		};
		int fd;

		if (poll(pfd, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (pfd[1].revents)
			break;
		if (!pfd[0].revents)
			continue;
		fd = accept4(cs->cs_listen, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			continue; /* ECONNABORTED, EMFILE...: try again later */
		ctl_serve(cs, fd);
		ctl_reap(cs, 0);
	}
	return NULL;
}

int ctl_start(const char *mountpoint, const struct ctl_cmd *cmds, void *arg,
	      ctl_ready_fn ready, void *ready_arg, struct ctl_server **out)
{
	struct ctl_server *cs;
	int ret;

	cs = calloc(1, sizeof(*cs));
	if (!cs)
		return -ENOMEM;
	cs->cs_mountpoint = strdup(mountpoint);
	if (!cs->cs_mountpoint) {
		ret = -ENOMEM;
		goto out_free;
	}
	cs->cs_cmds = cmds;
	cs->cs_arg = arg;
	cs->cs_ready = ready;
	cs->cs_ready_arg = ready_arg;
	cs->cs_listen = -1;
	if (pipe2(cs->cs_wake, O_CLOEXEC) < 0) {
		ret = -errno;
		goto out_free_mp;
	}
	ret = -pthread_create(&cs->cs_thread, NULL, ctl_main, cs);
	if (ret < 0)
		goto out_close_pipe;
	*out = cs;
	return 0;

out_close_pipe:
	close(cs->cs_wake[0]);
	close(cs->cs_wake[1]);
out_free_mp:
	free(cs->cs_mountpoint);
out_free:
	free(cs);
	return ret;
}

void ctl_stop(struct ctl_server *cs)
{
	ssize_t n;

	if (!cs)
		return;
	__atomic_store_n(&cs->cs_stop, 1, __ATOMIC_RELEASE);
	do
		n = write(cs->cs_wake[1], "x", 1);
	while (n < 0 && errno == EINTR);
	pthread_join(cs->cs_thread, NULL);
	ctl_reap(cs, 1); /* each notices cs_stop (5) */
	if (cs->cs_listen >= 0) {
		unlink_own(cs);
		close(cs->cs_listen);
	}
	close(cs->cs_wake[0]);
	close(cs->cs_wake[1]);
	free(cs->cs_mountpoint);
	free(cs);
}

/*
 * ctlcmd.c - the control commands of shoal-mount, served by ctl.c:
 *   stat     every counter of the mount as "name value", then "readonly 0|1",
 *            "needs_fsck 0" or "needs_fsck 1 BLOCK INODE" (the first damaged
 *            block seen) and, if the mount went read-only on an error,
 *            "error TEXT";
 *   status   device, mountpoint, node, lock, options, entry_timeout, pid,
 *            log;
 *   glocks   [FILTER] every cached glock with its holders and waiters;
 *   glstats  [FILTER] per-type and per-glock lock statistics;
 *   trace    [FILTER] streams glock events until the client goes away or
 *            the mount does (docs/LOCKING.md, docs/CONTROL.md).
 *
 * Invariants:
 *  (1) every field of struct shoal_counters appears in counter_names, in
 *      order, under its name without the sc_ prefix (checked at compile
 *      time by the size of the table);
 *  (2) commands only read: they never change the mount;
 *  (3) a trace never blocks the glock layer: events wait in the
 *      subscriber's ring (libshoal drops and counts them when it is full)
 *      and reach the socket from the stream's own thread, which holds no
 *      libshoal lock while it writes.
 */
#include "smount.h"

#include <shoal/glfilter.h>

#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#define COUNTER(f) { #f, offsetof(struct shoal_counters, sc_##f) }
static const struct {
	const char *name;
	size_t off;
} counter_names[] = {
	COUNTER(dev_reads),
	COUNTER(dev_read_bytes),
	COUNTER(dev_writes),
	COUNTER(dev_write_bytes),
	COUNTER(dev_flushes),
	COUNTER(commits),
	COUNTER(commit_blocks),
	COUNTER(fast_commits),
	COUNTER(checkpoints),
	COUNTER(wb_visited),
	COUNTER(wb_written),
	COUNTER(fsyncs),
	COUNTER(fsync_noop),
	COUNTER(buf_hits),
	COUNTER(buf_misses),
	COUNTER(gl_requests),
	COUNTER(gl_callbacks),
	COUNTER(gl_demotions),
	COUNTER(gl_restarts),
	COUNTER(gl_rtt_us),
	COUNTER(recoveries),
	COUNTER(corrupt),
	COUNTER(atime_written),
	COUNTER(atime_deferred),
	COUNTER(atime_dropped),
	COUNTER(fc_visited),
	COUNTER(dev_queue_read_bytes),
	COUNTER(withdrawals),
	COUNTER(recovery_errors),
	COUNTER(lease_refused),
};
#define COUNTER_COUNT (sizeof(counter_names) / sizeof(counter_names[0]))
_Static_assert(COUNTER_COUNT * sizeof(uint64_t) == sizeof(struct shoal_counters),
	       "counter_names must list every field of struct shoal_counters");

static int cmd_stat(void *arg, const char *args, FILE *out)
{
	struct smount *sm = arg;
	struct shoal_counters sc;
	const char *err;
	size_t i;

	if (*args)
		return -EINVAL;
	shoal_counters(sm->sm_fs, &sc);
	for (i = 0; i < COUNTER_COUNT; i++) {
		uint64_t v = *(const uint64_t *)((const char *)&sc + counter_names[i].off);
		fprintf(out, "%s %llu\n", counter_names[i].name, (unsigned long long)v);
	}
	wbkick_stats(out);
	mb_stats(out);
	{
		struct shoal_plock_stats ps;
		shoal_plock_stats(sm->sm_fs, &ps);
		fprintf(out, "plock_local %llu\nplock_owned %llu\nplock_grants %llu\nplock_gives %llu\n",
			(unsigned long long)ps.local, (unsigned long long)ps.owned,
			(unsigned long long)ps.grants, (unsigned long long)ps.gives);
	}
	fprintf(out, "readonly %d\n", shoal_is_readonly(sm->sm_fs) ? 1 : 0);
	uint64_t dblk, dino;
	if (shoal_damage(sm->sm_fs, &dblk, &dino))
		fprintf(out, "needs_fsck 1 %llu %llu\n", (unsigned long long)dblk,
			(unsigned long long)dino);
	else
		fprintf(out, "needs_fsck 0\n");
	err = shoal_error(sm->sm_fs);
	if (err)
		fprintf(out, "error %s\n", err);
	return 0;
}

static int cmd_withdraw(void *arg, const char *args, FILE *out)
{
	struct smount *sm = arg;
	int err;

	if (*args)
		return -EINVAL;
	err = shoal_withdraw(sm->sm_fs, "withdrawn on request (shoal withdraw)");
	if (err)
		return err;
	fprintf(out, "withdrawn%s\n",
		strcmp(sm->sm_opts.mo_lock, "nolock") ? ": another node will replay this node's journal" : "");
	return 0;
}

static int cmd_status(void *arg, const char *args, FILE *out)
{
	struct smount *sm = arg;

	if (*args)
		return -EINVAL;
	fprintf(out, "device %s\n", sm->sm_device);
	fprintf(out, "mountpoint %s\n", sm->sm_mountpoint);
	fprintf(out, "node %s\n", sm->sm_node);
	fprintf(out, "lock %s\n", sm->sm_opts.mo_lock);
	fprintf(out, "options %s\n", sm->sm_options);
	fprintf(out, "entry_timeout %g\n", smount_entry_ttl());
	fprintf(out, "pid %ld\n", (long)sm->sm_pid);
	if (sm->sm_log[0])
		fprintf(out, "log %s\n", sm->sm_log);
	return 0;
}

/* The filter in args; 0, or 1 after writing "error bad filter: ..." to out. */
static int filter_arg(const char *args, struct glfilter *f, FILE *out)
{
	char err[256];

	if (glf_compile(f, args, err, sizeof(err)) == 0)
		return 0;
	fprintf(out, "error bad filter: %s\n", err);
	return 1;
}

static int cmd_glocks(void *arg, const char *args, FILE *out)
{
	struct smount *sm = arg;
	struct glfilter f;

	if (filter_arg(args, &f, out))
		return 0;
	return shoal_dump_glocks(sm->sm_fs, out, &f);
}

static int cmd_glstats(void *arg, const char *args, FILE *out)
{
	struct smount *sm = arg;
	struct glfilter f;

	if (filter_arg(args, &f, out))
		return 0;
	return shoal_dump_glstats(sm->sm_fs, out, &f);
}

/* The client closed its end (or the connection broke)? */
static int peer_gone(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLRDHUP };
	return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* Write all of buf; -1 when the client is gone or the server stops. */
static int send_all(int fd, const char *buf, size_t len, const int *stop)
{
	while (len) {
		ssize_t n = send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			buf += n;
			len -= (size_t)n;
			continue;
		}
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			return -1;
		/* the client reads slowly: libshoal keeps (or drops) events meanwhile */
		struct pollfd p = { .fd = fd, .events = POLLOUT | POLLRDHUP };
		poll(&p, 1, 200);
		if ((p.revents & (POLLRDHUP | POLLHUP | POLLERR)) || __atomic_load_n(stop, __ATOMIC_ACQUIRE))
			return -1;
	}
	return 0;
}

#define TRACE_BATCH 64
#define TRACE_LINE 160

static void cmd_trace(void *arg, const char *args, int fd, const int *stop)
{
	struct smount *sm = arg;
	static __thread struct shoal_glevent ev[TRACE_BATCH];
	static __thread char buf[TRACE_BATCH * TRACE_LINE + 256];
	struct shoal_trace *t;
	struct glfilter f;
	char err[256];
	int len, ret;

	if (glf_compile(&f, args, err, sizeof(err))) {
		len = snprintf(buf, sizeof(buf), "error bad filter: %s\n", err);
		send_all(fd, buf, (size_t)len, stop);
		return;
	}
	ret = shoal_trace_open(sm->sm_fs, &f, &t);
	if (ret < 0) {
		len = snprintf(buf, sizeof(buf), "error %s\n", strerror(-ret));
		send_all(fd, buf, (size_t)len, stop);
		return;
	}
	/* the first line says the subscription is in place: every event from
	 * now on is in the stream (or counted as dropped) */
	len = snprintf(buf, sizeof(buf), "# tracing glocks of %s (node %s), filter: %s\n",
		       sm->sm_mountpoint, sm->sm_node, *args ? args : "(none)");
	if (send_all(fd, buf, (size_t)len, stop) < 0)
		goto out_close;
	for (;;) {
		uint64_t dropped;
		size_t n;

		if (__atomic_load_n(stop, __ATOMIC_ACQUIRE)) {
			len = snprintf(buf, sizeof(buf), "# end: %s is being unmounted\n",
				       sm->sm_mountpoint);
			send_all(fd, buf, (size_t)len, stop);
			break;
		}
		n = shoal_trace_read(t, ev, TRACE_BATCH, 200, &dropped);
		len = 0;
		if (dropped)
			len = snprintf(buf, sizeof(buf),
				       "# dropped %llu events: this reader was too slow\n",
				       (unsigned long long)dropped);
		for (size_t i = 0; i < n; i++) {
			int w = shoal_glevent_format(&ev[i], buf + len, TRACE_LINE - 1);
			len += w < TRACE_LINE - 1 ? w : TRACE_LINE - 2;
			buf[len++] = '\n';
		}
		if (len && send_all(fd, buf, (size_t)len, stop) < 0)
			break;
		if (!n && peer_gone(fd))
			break;
	}
out_close:
	shoal_trace_close(t);
}

const struct ctl_cmd smount_ctl_cmds[] = {
	{ "glocks", "[FILTER] every cached glock: state, flags, target, demote, holders, waiters",
	  cmd_glocks, NULL },
	{ "glstats", "[FILTER] lock requests, callbacks, demotions, round trips per type and glock",
	  cmd_glstats, NULL },
	{ "stat", "counters of this mount, one \"name value\" per line", cmd_stat, NULL },
	{ "status", "device, mountpoint, node, lock, options, pid", cmd_status, NULL },
	{ "trace", "[FILTER] stream glock state changes, requests, callbacks, demote requests",
	  NULL, cmd_trace },
	{ "withdraw", "stop this mount now: read-only, nothing more written; a cluster node "
		      "fences itself and another node replays its journal",
	  cmd_withdraw, NULL },
	{ NULL, NULL, NULL, NULL },
};

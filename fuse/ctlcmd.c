/*
 * ctlcmd.c - the control commands of shoal-mount, served by ctl.c:
 *   stat    every counter of the mount as "name value", then "readonly 0|1"
 *           and, if the mount went read-only on an error, "error TEXT";
 *   status  device, mountpoint, node, lock, options, entry_timeout, pid, log.
 *
 * Invariants:
 *  (1) every field of struct shoal_counters appears in counter_names, in
 *      order, under its name without the sc_ prefix (checked at compile
 *      time by the size of the table);
 *  (2) commands only read: they never change the mount.
 */
#include "smount.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>

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
	fprintf(out, "readonly %d\n", shoal_is_readonly(sm->sm_fs) ? 1 : 0);
	err = shoal_error(sm->sm_fs);
	if (err)
		fprintf(out, "error %s\n", err);
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

static int cmd_glocks(void *arg, const char *args, FILE *out)
{
	struct smount *sm = arg;
	return shoal_dump_glocks(sm->sm_fs, out);
}

const struct ctl_cmd smount_ctl_cmds[] = {
	{ "glocks", "every cached glock: state, flags, target, holders, counts", cmd_glocks },
	{ "stat", "counters of this mount, one \"name value\" per line", cmd_stat },
	{ "status", "device, mountpoint, node, lock, options, pid", cmd_status },
	{ NULL, NULL, NULL },
};

/*
 * test_gltrace.c - the glock trace of a mount (shoal_trace_*, gltrace.c) on a
 * single-node (lock=nolock) image: every lock module request and its
 * completion is an event, in order; each subscriber's filter is applied
 * as events are made; a reader that does not keep up costs dropped events,
 * counted and reported once, never a wait in the operation that made them;
 * the line format of shoal trace.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <cmocka.h>

#include "dev.h"
#include "shoal/glfilter.h"
#include "shoal/shoal.h"
#include "testutil.h"

#define MiB (1ull << 20)
#define RING 8192 /* gltrace.c TR_RING */
#define MAXSUBS 16 /* gltrace.c TR_MAX_SUBS */

static const struct shoal_ctx root_ctx = { .c_uid = 0, .c_gid = 0, .c_pid = 1 };

static struct shoal_fs *mount_new(char **path)
{
	struct shoal_format_opts fo = { .fo_journals = 1, .fo_jbytes = 8 * MiB };
	struct shoal_mount_opts mo = { .mo_commit_secs = 3600 };
	struct shoal_dev *dev;
	struct shoal_fs *fs;

	*path = tu_tmpimage(128 * MiB);
	assert_int_equal(dev_open(*path, 0, &dev), 0);
	assert_int_equal(shoal_format(dev, &fo, NULL), 0);
	dev_close(dev);
	assert_int_equal(dev_open(*path, 0, &dev), 0);
	assert_int_equal(shoal_mount(dev, &mo, &fs), 0);
	return fs;
}

static struct shoal_trace *sub(struct shoal_fs *fs, const char *text)
{
	struct glfilter f;
	struct shoal_trace *t;
	assert_int_equal(glf_compile(&f, text, NULL, 0), 0);
	assert_int_equal(shoal_trace_open(fs, &f, &t), 0);
	return t;
}

static uint64_t create(struct shoal_fs *fs, const char *name)
{
	struct stat st;
	assert_int_equal(shoal_create(fs, &root_ctx, shoal_root(fs), name, 0644, O_RDWR, &st), 0);
	assert_int_equal(shoal_release(fs, st.st_ino, O_RDWR), 0);
	shoal_forget(fs, st.st_ino, 1);
	return st.st_ino;
}

static void test_ring_drops_never_waits(void **state)
{
	static struct shoal_glevent ev[RING + 100];
	struct shoal_trace *all, *journal, *none, *one;
	uint64_t dropped, ino = 0, t0;
	char path_name[32], *path;
	struct shoal_fs *fs;
	size_t n;
	(void)state;

	fs = mount_new(&path);
	for (int i = 0; i < 6000; i++) {
		snprintf(path_name, sizeof(path_name), "f%05d", i);
		create(fs, path_name);
	}
	assert_int_equal(shoal_unmount(fs), 0); /* every glock starts UN again */
	{
		struct shoal_mount_opts mo = { .mo_commit_secs = 3600 };
		struct shoal_dev *dev;
		assert_int_equal(dev_open(path, 0, &dev), 0);
		assert_int_equal(shoal_mount(dev, &mo, &fs), 0);
	}
	all = sub(fs, "");
	journal = sub(fs, "gltype == 9");
	none = sub(fs, "kind == callback"); /* one node: nobody calls back */

	/* many more events than a ring holds (each first look at an inode asks
	 * for its glock: a request and its grant), and nobody reading: the
	 * lookups must all go through (a reader never holds the glock layer up) */
	for (int i = 0; i < 6000; i++) {
		struct stat st;
		snprintf(path_name, sizeof(path_name), "f%05d", i);
		assert_int_equal(shoal_lookup(fs, shoal_root(fs), path_name, &st), 0);
		shoal_forget(fs, st.st_ino, 1);
	}
	one = sub(fs, ""); /* arrives now: sees only what comes after */

	n = shoal_trace_read(all, ev, RING + 100, 0, &dropped);
	assert_int_equal(n, RING); /* the ring was full: its oldest events */
	assert_true(dropped > 0);  /* and the rest counted, not lost silently */
	/* each inode: a request, then its grant, in that order */
	t0 = 0;
	for (size_t i = 0; i < n; i++) {
		assert_true(ev[i].ev_time_ns >= t0);
		t0 = ev[i].ev_time_ns;
		if (ev[i].ev_kind == SHOAL_GLEV_REQUEST) {
			assert_true(i + 1 < n);
			assert_int_equal(ev[i + 1].ev_kind, SHOAL_GLEV_STATE);
			assert_int_equal(ev[i + 1].ev_glnum, ev[i].ev_glnum);
			assert_int_equal(ev[i + 1].ev_target, ev[i].ev_target);
			assert_int_equal(ev[i].ev_new, -1);
			assert_int_equal(ev[i].ev_flags & SHOAL_GLEV_F_INFLIGHT, SHOAL_GLEV_F_INFLIGHT);
		}
	}
	/* reported once */
	assert_int_equal(shoal_trace_read(all, ev, RING, 0, &dropped), 0);
	assert_int_equal(dropped, 0);
	/* the filters were applied as the events were made: nothing matched */
	assert_int_equal(shoal_trace_read(journal, ev, RING, 0, &dropped), 0);
	assert_int_equal(dropped, 0);
	assert_int_equal(shoal_trace_read(none, ev, RING, 0, &dropped), 0);
	assert_int_equal(dropped, 0);
	assert_int_equal(shoal_trace_read(one, ev, RING, 0, &dropped), 0);

	/* a drained ring takes events again: a write (EX on an inode that
	 * only had SH), on both */
	{
		struct stat st;
		assert_int_equal(shoal_lookup(fs, shoal_root(fs), "f00007", &st), 0);
		ino = st.st_ino;
		assert_int_equal(shoal_write(fs, &root_ctx, ino, "x", 1, 0, O_RDWR), 1);
		shoal_forget(fs, ino, 1);
	}
	for (int k = 0; k < 2; k++) {
		n = shoal_trace_read(k ? one : all, ev, RING, 1000, &dropped);
		assert_true(n >= 2);
		assert_int_equal(dropped, 0);
		assert_int_equal(ev[n - 2].ev_kind, SHOAL_GLEV_REQUEST);
		assert_int_equal(ev[n - 1].ev_kind, SHOAL_GLEV_STATE);
		assert_int_equal(ev[n - 1].ev_gltype, 2);
		assert_int_equal(ev[n - 1].ev_glnum, ino);
		assert_int_equal(ev[n - 1].ev_prev, 1);
		assert_int_equal(ev[n - 1].ev_new, 3);
		assert_int_equal(ev[n - 1].ev_target, 3);
		assert_int_equal(ev[n - 1].ev_dstate, -1);
	}
	/* a read with nothing to read waits its timeout, no longer */
	{
		struct timespec a, b;
		clock_gettime(CLOCK_MONOTONIC, &a);
		assert_int_equal(shoal_trace_read(journal, ev, RING, 200, &dropped), 0);
		clock_gettime(CLOCK_MONOTONIC, &b);
		double ms = (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6;
		assert_true(ms >= 150 && ms < 5000);
	}
	shoal_trace_close(all);
	shoal_trace_close(journal);
	shoal_trace_close(none);
	shoal_trace_close(one);
	assert_int_equal(shoal_unmount(fs), 0);
	tu_rmimage(path);
}

static void test_subscriber_limit(void **state)
{
	struct shoal_trace *t[MAXSUBS + 1];
	struct shoal_fs *fs;
	char *path;
	(void)state;

	fs = mount_new(&path);
	for (int i = 0; i < MAXSUBS; i++)
		assert_int_equal(shoal_trace_open(fs, NULL, &t[i]), 0);
	assert_int_equal(shoal_trace_open(fs, NULL, &t[MAXSUBS]), -EBUSY);
	shoal_trace_close(t[3]);
	assert_int_equal(shoal_trace_open(fs, NULL, &t[3]), 0);
	for (int i = 0; i < MAXSUBS; i++)
		shoal_trace_close(t[i]);
	assert_int_equal(shoal_unmount(fs), 0);
	tu_rmimage(path);
}

static void test_format(void **state)
{
	struct shoal_glevent ev = {
		.ev_time_ns = 1700000000123456789ull, .ev_glnum = 1234, .ev_gltype = 2,
		.ev_flags = SHOAL_GLEV_F_TRY | SHOAL_GLEV_F_FAILED, .ev_kind = SHOAL_GLEV_STATE,
		.ev_prev = 0, .ev_new = 0, .ev_target = 1, .ev_dstate = -1,
	};
	int64_t v[GLF_NFIELDS];
	char line[200];
	(void)state;

	assert_true(shoal_glevent_format(&ev, line, sizeof(line)) > 0);
	/* HH:MM:SS.uuuuuu (local time), then the fields */
	assert_int_equal(strlen(line) > 16, 1);
	assert_string_equal(line + 8, ".123456 state    2/1234 prev:UN new:UN target:SH dstate:-- flags:TE");
	ev.ev_kind = SHOAL_GLEV_CALLBACK;
	ev.ev_flags = 0;
	ev.ev_prev = ev.ev_new = 1;
	ev.ev_target = 3;
	ev.ev_dstate = 0;
	assert_true(shoal_glevent_format(&ev, line, sizeof(line)) > 0);
	assert_string_equal(line + 8, ".123456 callback 2/1234 prev:SH new:SH target:EX dstate:UN flags:-");
	/* what a filter sees of it */
	shoal_glevent_vals(&ev, v);
	assert_int_equal(v[GLF_GLTYPE], 2);
	assert_int_equal(v[GLF_GLNUM], 1234);
	assert_int_equal(v[GLF_KIND], SHOAL_GLEV_CALLBACK);
	assert_int_equal(v[GLF_TARGET], 3);
	assert_int_equal(v[GLF_DSTATE], 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ring_drops_never_waits),
		cmocka_unit_test(test_subscriber_limit),
		cmocka_unit_test(test_format),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

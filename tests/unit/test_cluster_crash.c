/*
 * test_cluster_crash.c - cluster nodes inside one process (cluster_util.h)
 * when a node dies, fails, stalls or frees much:
 *
 *  - recovery: node a runs in a child process (forked before any thread
 *    exists here), writes and fsyncs, and is killed with SIGKILL; node b
 *    blocks on a's locks until a's lease (1.5 s) has expired, replays a's
 *    journal (its recoveries counter grows) and then sees exactly what a
 *    fsync'ed (fallocate's collapse, insert and zero modes, a whiteout,
 *    and a tmpfile open at the kill among it); a mounts again under its
 *    own name and sees the same; fsck is clean;
 *  - withdraw: a journal write of node a fails after a committed work that
 *    is in its journal only; a turns read-only, fences its device and
 *    keeps its locks; b waits for a's lease and replays a's journal, then
 *    sees what a committed and not what failed; fsck is clean; the same
 *    when one of a's queued data writes fails after its write returned;
 *  - a stale writer: a stopped past its lease wakes after b replayed its
 *    journal and syncs at once: it writes nothing (the lease is checked at
 *    every write), and b's work stands a's next mount;
 *  - freeing takes only its groups: with over 80 resource groups, a
 *    truncate, a hole punch and an unlink on one node ask no other node
 *    for its groups, and a hashed directory's removal (every group) and
 *    the unmount after it finish (issue 22).
 *
 * fsck.shoal is found next to the test program's directory (build/tests/..
 * = build) or in $SHOAL_BUILD; without it the fsck checks are skipped with
 * a message.  SHOAL_TEST_VERBOSE=1 prints lockd's
 * log; SHOAL_TEST_FILTER=NAME runs only the tests matching NAME.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include <linux/falloc.h>
#include <linux/fs.h>

#include "dev.h"
#include "shoal/ondisk.h"
#include "shoal/glfilter.h"
#include "shoal/lockd.h"
#include "shoal/shoal.h"
#include "testutil.h"
#include "treecheck.h"
#include "cluster_util.h"

/* --- journal recovery of a killed node --------------------------------------------------- */

#define REC_LEASE_MS 1500
#define REC_F1 (300 * KiB + 7)
#define REC_F3 (40 * KiB)

/* The child: node a.  Waits for "go", mounts, works, reports 'D' (or 'E'
 * and a reason), then waits to be killed.  Never returns. */
static void rec_child(const char *img, const char *lock, int rfd, int wfd)
{
	struct shoal_mount_opts mo = {
		.mo_lock = lock, .mo_node = "a", .mo_journal = -1, .mo_commit_secs = 3600,
	};
	char msg[256] = "D";
	struct shoal_dev *dev;
	struct shoal_fs *fs;
	struct stat st;
	uint64_t root, dir, f1, f2, sh;
	uint8_t *buf = malloc(REC_F1);
	char go;
	int err = 0;

	if (read(rfd, &go, 1) != 1)
		_exit(2);
#define CK(what, call)                                                                      \
	do {                                                                                \
		long long r_ = (long long)(call);                                           \
		if (r_ < 0) {                                                               \
			snprintf(msg, sizeof(msg), "E%s: %s", what, strerror((int)-r_));    \
			goto report;                                                        \
		}                                                                           \
	} while (0)
	if (!buf || dev_open(img, 0, &dev)) {
		snprintf(msg, sizeof(msg), "Edev_open");
		goto report;
	}
	err = shoal_mount(dev, &mo, &fs);
	if (err) {
		snprintf(msg, sizeof(msg), "Emount: %s", shoal_mount_error());
		goto report;
	}
	root = shoal_root(fs);
	CK("mkdir rec", shoal_mkdir(fs, &root_ctx, root, "rec", 0755, &st));
	dir = st.st_ino;
	fill_pattern(buf, REC_F1, 0, 31);
	CK("create f1", shoal_create(fs, &root_ctx, dir, "f1", 0644, O_RDWR, &st));
	f1 = st.st_ino;
	CK("write f1", shoal_write(fs, &root_ctx, f1, buf, REC_F1, 0, O_RDWR));
	CK("setxattr f1", shoal_setxattr(fs, f1, "user.rec", "kept", 4, 0));
	CK("fsync f1", shoal_fsync(fs, f1, 0));
	fill_pattern(buf, REC_F3, 0, 32);
	CK("create f2", shoal_create(fs, &root_ctx, dir, "f2", 0644, O_RDWR, &st));
	f2 = st.st_ino;
	CK("write f2", shoal_write(fs, &root_ctx, f2, buf, REC_F3, 0, O_RDWR));
	CK("fsync f2", shoal_fsync(fs, f2, 0));
	CK("rename f2 f3", shoal_rename(fs, &root_ctx, dir, "f2", dir, "f3", 0));
	CK("create gone", shoal_create(fs, &root_ctx, dir, "gone", 0644, O_RDWR, &st));
	CK("release gone", shoal_release(fs, st.st_ino, O_RDWR));
	CK("unlink gone", shoal_unlink(fs, &root_ctx, dir, "gone"));
	CK("fsync dir", shoal_fsync(fs, dir, 0));
	/* fallocate's shifting and zeroing modes, a whiteout, and a tmpfile
	 * still open at the kill: all made durable (issue 20.6) */
	fill_pattern(buf, REC_F1, 0, 34);
	CK("create sh", shoal_create(fs, &root_ctx, dir, "sh", 0644, O_RDWR, &st));
	sh = st.st_ino;
	CK("write sh", shoal_write(fs, &root_ctx, sh, buf, REC_F1, 0, O_RDWR));
	CK("collapse sh", shoal_fallocate(fs, sh, FALLOC_FL_COLLAPSE_RANGE, 8 * KiB, 100 * KiB));
	CK("insert sh", shoal_fallocate(fs, sh, FALLOC_FL_INSERT_RANGE, 4 * KiB, 12 * KiB));
	CK("zero sh", shoal_fallocate(fs, sh, FALLOC_FL_ZERO_RANGE, 1000, 5000));
	CK("create w", shoal_create(fs, &root_ctx, dir, "w", 0644, O_RDWR, &st));
	CK("release w", shoal_release(fs, st.st_ino, O_RDWR));
	CK("whiteout w", shoal_rename(fs, &root_ctx, dir, "w", dir, "w2", RENAME_WHITEOUT));
	CK("tmpfile", shoal_tmpfile(fs, &root_ctx, dir, 0600, O_RDWR, &st));
	CK("write tmpfile", shoal_write(fs, &root_ctx, st.st_ino, buf, 50000, 0, O_RDWR));
	CK("fsync sh", shoal_fsync(fs, sh, 0));
	/* not made durable: may or may not survive, but must not break anything */
	CK("create loose", shoal_create(fs, &root_ctx, dir, "loose", 0644, O_RDWR, &st));
	CK("write loose", shoal_write(fs, &root_ctx, st.st_ino, buf, 5000, 0, O_RDWR));
report:
	if (write(wfd, msg, strlen(msg) + 1) < 0)
		_exit(3);
	for (;;)
		pause();
#undef CK
}

/* Fork node a's child (rec_child) before this process has other threads:
 * *to and *from are its pipes. */
static pid_t rec_fork(struct cluster *c, int *to, int *from)
{
	int to_child[2], from_child[2];
	pid_t pid;

	assert_int_equal(pipe(to_child), 0);
	assert_int_equal(pipe(from_child), 0);
	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(to_child[1]);
		close(from_child[0]);
		rec_child(c->c_img, c->c_lock, to_child[0], from_child[1]);
	}
	close(to_child[0]);
	close(from_child[1]);
	*to = to_child[1];
	*from = from_child[0];
	return pid;
}

/* Let node a work, then SIGKILL it: when it died (ms). */
static uint64_t rec_run_and_kill(pid_t pid, int to, int from)
{
	char msg[256] = "";
	ssize_t n;
	int status;

	assert_int_equal(write(to, "g", 1), 1);
	n = read(from, msg, sizeof(msg) - 1);
	kill(pid, SIGKILL);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	close(to);
	close(from);
	if (n <= 0 || msg[0] != 'D')
		fail_msg("node a (child): %s", n > 0 ? msg + 1 : "no report");
	return now_ms();
}

/* What node a fsync'ed before it was killed, as fs sees it: rec/'s inode. */
static uint64_t rec_check(struct shoal_fs *fs, uint64_t root)
{
	uint64_t dir = must_lookup(fs, root, "rec");
	char val[16];

	assert_pattern(fs, must_lookup(fs, dir, "f1"), REC_F1, 31);
	assert_int_equal(shoal_getxattr(fs, must_lookup(fs, dir, "f1"), "user.rec", val,
					sizeof(val)),
			 4);
	assert_memory_equal(val, "kept", 4);
	assert_pattern(fs, must_lookup(fs, dir, "f3"), REC_F3, 32);
	assert_int_equal(lookup_ino(fs, dir, "f2"), -ENOENT);
	assert_int_equal(lookup_ino(fs, dir, "gone"), -ENOENT);

	/* sh: collapsed, inserted into and zeroed as rec_child did */
	size_t len = REC_F1 - 100 * KiB + 12 * KiB;
	uint8_t *want = malloc(REC_F1), *m = malloc(len), *got = malloc(len + 1);
	struct stat st;
	assert_non_null(want);
	assert_non_null(m);
	assert_non_null(got);
	fill_pattern(want, REC_F1, 0, 34);
	memcpy(m, want, 4 * KiB);
	memset(m + 4 * KiB, 0, 12 * KiB);
	memcpy(m + 16 * KiB, want + 4 * KiB, 4 * KiB);
	memcpy(m + 20 * KiB, want + 108 * KiB, REC_F1 - 108 * KiB);
	memset(m + 1000, 0, 5000);
	uint64_t sh = must_lookup(fs, dir, "sh");
	assert_int_equal(shoal_read(fs, sh, got, len + 1, 0, O_RDONLY), (ssize_t)len);
	assert_memory_equal(got, m, len);
	free(want);
	free(m);
	free(got);
	/* w: a whiteout; w2 the file */
	assert_int_equal(shoal_lookup(fs, dir, "w", &st), 0);
	shoal_forget(fs, st.st_ino, 1);
	assert_true(S_ISCHR(st.st_mode));
	assert_int_equal(st.st_rdev, 0);
	must_lookup(fs, dir, "w2");
	return dir;
}

static void test_recovery_of_killed_node(void **state)
{
	struct cluster c;
	struct shoal_fs *b, *a2 = NULL;
	struct shoal_counters sc0, sc1;
	int to, from, err;
	uint64_t root, dir, t_kill, t_seen;
	struct stat st;
	pid_t pid;
	(void)state;

	cl_image(&c);
	pid = rec_fork(&c, &to, &from);
	cl_lockd_start(&c, REC_LEASE_MS);
	err = node_mount(&c, "b", &b);
	if (err) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		fail_msg("mount of node b: %s", shoal_mount_error());
	}
	c.c_fs[1] = b;
	c.c_n = 2;
	root = shoal_root(b);
	assert_int_equal(lookup_ino(b, root, "rec"), -ENOENT);

	/* a works and fsyncs, then dies */
	shoal_counters(b, &sc0);
	t_kill = rec_run_and_kill(pid, to, from);

	/* b: blocked on a's locks until a's lease expired and a's journal was
	 * replayed; then everything a fsync'ed is there */
	must_lookup(b, root, "rec");
	t_seen = now_ms() - t_kill;
	if (verbose())
		fprintf(stderr, "  b saw rec/ %llu ms after the kill\n",
			(unsigned long long)t_seen);
	dir = rec_check(b, root);
	shoal_counters(b, &sc1);
	assert_true(sc1.sc_recoveries > sc0.sc_recoveries);
	/* the lease is 1.5 s: b cannot have seen a's files before a died for good */
	assert_true(t_seen + 100 >= REC_LEASE_MS / 2);
	tc_check_tree(b, 0);

	/* a comes back under its own name */
	err = node_mount(&c, "a", &a2);
	if (err)
		fail_msg("node a mounts again: %s", shoal_mount_error());
	c.c_fs[0] = a2;
	rec_check(a2, root);
	/* and both work on after it: a writes, b reads */
	mkfile(a2, dir, "after", 10000, 33);
	assert_pattern(b, must_lookup(b, dir, "after"), 10000, 33);
	assert_int_equal(shoal_getattr(b, dir, &st), 0);

	cl_unmount_all(&c);
	cl_lockd_stop(&c);
	cl_fsck(&c);
	cl_fini(&c);
}

/* A cluster mount cannot pick a journal lockd did not give it: two nodes
 * would write one journal.  The refused node leaves lockd cleanly. */
static void test_journal_option_in_cluster(void **state)
{
	struct cluster c;
	struct shoal_mount_opts mo = { .mo_node = "a", .mo_journal = 2, .mo_hold_ms = 20 };
	struct shoal_dev *dev;
	struct shoal_fs *a;
	uint64_t t0;
	(void)state;

	cl_image(&c);
	cl_lockd_start(&c, REC_LEASE_MS);
	mo.mo_lock = c.c_lock;
	assert_int_equal(dev_open(c.c_img, 0, &dev), 0);
	assert_int_equal(shoal_mount(dev, &mo, &a), -EINVAL);
	assert_non_null(strstr(shoal_mount_error(), "the lock manager chooses the journal"));
	dev_close(dev);
	/* a left: its name is free at once (not after its lease) */
	t0 = now_ms();
	if (node_mount(&c, "a", &c.c_fs[0]))
		fail_msg("mount of node a: %s", shoal_mount_error());
	assert_true(now_ms() - t0 < REC_LEASE_MS / 2);
	c.c_n = 1;
	assert_int_equal(shoal_journal_id(c.c_fs[0]), 0);
	cl_unmount_all(&c);
	cl_lockd_stop(&c);
	cl_fsck(&c);
	cl_fini(&c);
}

/*
 * The only node is killed and mounts again under its own name: nobody else
 * can replay its journal, so lockd lets it back once its lease is over, and
 * its mount replays its own journal and tells lockd, which then drops the
 * dead node's locks.  (Before 2026-12-04 the mount was refused for 2 x the
 * lease and then failed: the node had to mount under another name.)
 */
static void test_killed_node_comes_back_alone(void **state)
{
	struct cluster c;
	struct shoal_fs *a2 = NULL;
	uint64_t t_kill, t_back, dir;
	pid_t pid;
	int to, from;
	(void)state;

	cl_image(&c);
	pid = rec_fork(&c, &to, &from);
	cl_lockd_start(&c, REC_LEASE_MS);
	t_kill = rec_run_and_kill(pid, to, from);

	/* refused while a's lease runs (it may be alive), then let in */
	if (node_mount(&c, "a", &a2))
		fail_msg("node a mounts again: %s", shoal_mount_error());
	t_back = now_ms() - t_kill;
	if (verbose())
		fprintf(stderr, "  a back %llu ms after the kill\n", (unsigned long long)t_back);
	c.c_fs[0] = a2;
	c.c_n = 1;
	assert_true(t_back + 100 >= REC_LEASE_MS);
	assert_true(t_back < 2 * REC_LEASE_MS);
	assert_true(lockd_saw("back from the dead and replays its own journal"));
	assert_true(lockd_saw("of node a recovered by node a"));
	dir = rec_check(a2, shoal_root(a2));
	mkfile(a2, dir, "after", 10000, 34);
	assert_pattern(a2, must_lookup(a2, dir, "after"), 10000, 34);
	tc_check_tree(a2, 0);

	cl_unmount_all(&c);
	cl_lockd_stop(&c);
	cl_fsck(&c);
	cl_fini(&c);
}

/*
 * withdraw: node a has committed changes that are in its journal only
 * (no glock of them given back yet, so nothing written home), then its
 * device fails a journal write.  a turns read-only and withdraws (super.c
 * (2)): it writes nothing more and gives no lock back, so b blocks on a's
 * locks until a's lease is over and b has replayed a's journal, and then
 * sees exactly what a committed, not the older home blocks.  A node that
 * gave its locks back after the error would let b read a directory without
 * a's new entries, and a later replay of a's journal would write over b's
 * changes.
 */
/*
 * A stale writer (issue 21): node a, in a child process, has changes in
 * memory that no commit has written yet when it is stopped (SIGSTOP) for
 * longer than its lease.  b waits for a's lease, replays a's journal and
 * works on over a's files (a new name in a's directory, new bytes in a's
 * file).  Then a is continued and at once writes over its file and
 * syncs, before its timer thread can notice that it lost its lease: that
 * must write nothing (the lease is checked at the write, dev.c (8)), and
 * must fail.  b's work
 * must survive a's unmount and a's next mount (which replays a's journal:
 * a stale transaction there would put a's old directory back over b's),
 * and fsck is clean.  Before the fix a's sync wrote its transaction and
 * its data after b's recovery: b's file lost its new bytes or a's next
 * mount dropped b's new name.
 */
#define ST_LEN (24 * KiB)

static void stale_child(const char *img, const char *lock, int rfd, int wfd)
{
	struct shoal_mount_opts mo = {
		.mo_lock = lock, .mo_node = "a", .mo_journal = -1, .mo_commit_secs = 3600,
	};
	char msg[256] = "D", go;
	struct shoal_dev *dev;
	struct shoal_fs *fs;
	struct shoal_counters c0, c1;
	struct stat st;
	uint64_t root, dir, f;
	uint8_t *buf = malloc(ST_LEN);
	int err;

	if (read(rfd, &go, 1) != 1)
		_exit(2);
	if (!buf || dev_open(img, 0, &dev)) {
		snprintf(msg, sizeof(msg), "Edev_open");
		goto report;
	}
	if (shoal_mount(dev, &mo, &fs)) {
		snprintf(msg, sizeof(msg), "Emount: %s", shoal_mount_error());
		goto report;
	}
	root = shoal_root(fs);
	fill_pattern(buf, ST_LEN, 0, 61);
	if (shoal_mkdir(fs, &root_ctx, root, "st", 0755, &st) ||
	    (dir = st.st_ino, shoal_create(fs, &root_ctx, dir, "f", 0644, O_RDWR, &st)) ||
	    (f = st.st_ino, shoal_write(fs, &root_ctx, f, buf, ST_LEN, 0, O_RDWR) != ST_LEN) ||
	    shoal_fsync(fs, f, 0) || shoal_fsync(fs, dir, 0)) {
		snprintf(msg, sizeof(msg), "Ework before the stop");
		goto report;
	}
	/* in memory only: a new name */
	if (shoal_create(fs, &root_ctx, dir, "stale", 0644, O_RDWR, &st)) {
		snprintf(msg, sizeof(msg), "Ework in memory");
		goto report;
	}
	shoal_counters(fs, &c0);
	if (write(wfd, msg, strlen(msg) + 1) < 0)
		_exit(3);
	raise(SIGSTOP);
	/* continued: write at once, as a process that does not know it
	 * slept: new bytes over f (in place), then a commit */
	fill_pattern(buf, ST_LEN, 0, 62);
	err = (int)shoal_write(fs, &root_ctx, f, buf, ST_LEN, 0, O_RDWR);
	if (err == ST_LEN)
		err = shoal_sync(fs);
	shoal_counters(fs, &c1);
	snprintf(msg, sizeof(msg), "R %d %llu %llu", err,
		 (unsigned long long)(c1.sc_dev_writes - c0.sc_dev_writes),
		 (unsigned long long)c1.sc_lease_refused);
	if (write(wfd, msg, strlen(msg) + 1) < 0)
		_exit(3);
	if (read(rfd, &go, 1) != 1)
		_exit(2);
	shoal_unmount(fs);
	_exit(0);
report:
	if (write(wfd, msg, strlen(msg) + 1) < 0)
		_exit(3);
	for (;;)
		pause();
}

static void test_stale_writer_after_recovery(void **state)
{
	struct cluster c;
	struct shoal_fs *b, *a2;
	char msg[256] = "";
	int to_child[2], from_child[2], status, err, sync_err = 0;
	unsigned long long writes = 0, refused = 0;
	uint64_t root, dir, f;
	ssize_t n;
	pid_t pid;
	(void)state;

	cl_image(&c);
	assert_int_equal(pipe(to_child), 0);
	assert_int_equal(pipe(from_child), 0);
	fflush(NULL);
	pid = fork(); /* before this process has a thread */
	assert_true(pid >= 0);
	if (pid == 0) {
		close(to_child[1]);
		close(from_child[0]);
		stale_child(c.c_img, c.c_lock, to_child[0], from_child[1]);
	}
	close(to_child[0]);
	close(from_child[1]);
	cl_lockd_start(&c, REC_LEASE_MS);
	err = node_mount(&c, "b", &b);
	if (err) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		fail_msg("mount of node b: %s", shoal_mount_error());
	}
	c.c_fs[1] = b;
	c.c_n = 2;
	root = shoal_root(b);

	/* a works, then stops itself with changes in memory */
	assert_int_equal(write(to_child[1], "g", 1), 1);
	n = read(from_child[0], msg, sizeof(msg) - 1);
	if (n <= 0 || msg[0] != 'D') {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		fail_msg("node a (child): %s", n > 0 ? msg + 1 : "no report");
	}
	assert_int_equal(waitpid(pid, &status, WUNTRACED), pid);
	assert_true(WIFSTOPPED(status));

	/* b: waits for a's lease, replays a's journal, works on a's files */
	dir = must_lookup(b, root, "st");
	f = must_lookup(b, dir, "f");
	assert_pattern(b, f, ST_LEN, 61);
	assert_int_equal(lookup_ino(b, dir, "stale"), -ENOENT);
	mkfile(b, dir, "nb", 5000, 64);
	{
		uint8_t *buf = malloc(ST_LEN);
		assert_non_null(buf);
		fill_pattern(buf, ST_LEN, 0, 63);
		assert_int_equal(shoal_write(b, &root_ctx, f, buf, ST_LEN, 0, O_RDWR), ST_LEN);
		free(buf);
	}
	assert_int_equal(shoal_fsync(b, f, 0), 0);
	assert_int_equal(shoal_fsync(b, dir, 0), 0);

	/* a wakes and writes at once: refused, nothing reaches the device */
	kill(pid, SIGCONT);
	n = read(from_child[0], msg, sizeof(msg) - 1);
	if (n <= 0 || sscanf(msg, "R %d %llu %llu", &sync_err, &writes, &refused) != 3) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		fail_msg("node a (child) after SIGCONT: %s", n > 0 ? msg : "no report");
	}
	assert_int_equal(write(to_child[1], "u", 1), 1);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	close(to_child[1]);
	close(from_child[0]);
	if (verbose())
		fprintf(stderr, "  a after SIGCONT: write+sync %d, %llu device writes, %llu refused\n",
			sync_err, writes, refused);
	/* (refused counts the writes the lease check caught; 0 when the
	 * timer thread happened to fence the device first) */
	assert_true(sync_err < 0);
	assert_int_equal(writes, 0);

	/* b's work stands, and stands a's next mount (its own replay) */
	assert_pattern(b, f, ST_LEN, 63);
	assert_int_equal(lookup_ino(b, dir, "stale"), -ENOENT);
	assert_int_equal(shoal_unmount(b), 0);
	c.c_fs[1] = NULL;
	if (node_mount(&c, "a", &a2))
		fail_msg("node a mounts again: %s", shoal_mount_error());
	c.c_fs[0] = a2;
	dir = must_lookup(a2, root, "st");
	assert_pattern(a2, must_lookup(a2, dir, "f"), ST_LEN, 63);
	assert_pattern(a2, must_lookup(a2, dir, "nb"), 5000, 64);
	assert_int_equal(lookup_ino(a2, dir, "stale"), -ENOENT);
	tc_check_tree(a2, 0);
	cl_unmount_all(&c);
	cl_lockd_stop(&c);
	cl_fsck(&c);
	cl_fini(&c);
}

/* Node a mounted on dev (the caller's device handle, owned by the mount
 * from here on), then node b; both past their first look at the root.
 * The root's inode number. */
static uint64_t cl_start_a_on(struct cluster *c, struct shoal_dev *dev, struct shoal_fs **a,
			      struct shoal_fs **b)
{
	struct stat st;

	*a = node_mount_on(c, "a", dev);
	if (node_mount(c, "b", b))
		fail_msg("mount of node b: %s", shoal_mount_error());
	c->c_fs[1] = *b;
	c->c_n = 2;
	assert_int_equal(shoal_getattr(*b, shoal_root(*a), &st), 0);
	return shoal_root(*a);
}

static void test_withdraw_after_write_error(void **state)
{
	struct cluster c;
	struct shoal_dev *lower, *fdev;
	struct shoal_fs *a, *b;
	struct shoal_counters ca, cb0, cb1;
	struct dev_fault_cfg fail = { .fc_fail_write_at = 0, .fc_fail_flush_at = -1,
				      .fc_errno = EIO, .fc_cut_at_write = -1 };
	uint8_t buf[4096];
	uint64_t root, dir, t_err, t_seen;
	struct stat st;
	(void)state;

	cl_image(&c);
	cl_lockd_start(&c, REC_LEASE_MS);
	assert_int_equal(dev_open(c.c_img, 0, &lower), 0);
	assert_int_equal(dev_fault_wrap(lower, &fdev), 0);
	root = cl_start_a_on(&c, fdev, &a, &b);

	/* a's committed work: in a's journal, its glocks still a's */
	dir = mkdir_(a, root, "w");
	mkfile(a, dir, "f1", 100 * KiB + 3, 41);
	mkfile(a, dir, "f3", 9000, 43);
	assert_int_equal(shoal_sync(a), 0);

	/* the next journal write fails */
	dev_fault_set(fdev, &fail);
	assert_int_equal(shoal_create(a, &root_ctx, dir, "f2", 0644, O_RDWR, &st), 0);
	memset(buf, 0x5a, sizeof(buf));
	assert_int_equal(shoal_write(a, &root_ctx, st.st_ino, buf, sizeof(buf), 0, O_RDWR),
			 (ssize_t)sizeof(buf));
	assert_int_equal(shoal_fsync(a, st.st_ino, 0), -EIO);
	t_err = now_ms();
	assert_true(shoal_is_readonly(a));
	shoal_counters(a, &ca);
	assert_int_equal(ca.sc_withdrawals, 1);
	/* a fenced its device: nothing more of a's reaches it */
	assert_int_not_equal(shoal_write(a, &root_ctx, st.st_ino, buf, sizeof(buf), 0, O_RDWR),
			     (ssize_t)sizeof(buf));
	assert_int_equal(shoal_release(a, st.st_ino, O_RDWR), 0);
	shoal_forget(a, st.st_ino, 1);

	/* b: blocked until a's journal was replayed; then a's committed work
	 * is there, and what failed to commit is not */
	shoal_counters(b, &cb0);
	assert_int_equal(must_lookup(b, root, "w"), dir);
	t_seen = now_ms() - t_err;
	if (verbose())
		fprintf(stderr, "  b saw w/ %llu ms after a's error\n", (unsigned long long)t_seen);
	assert_pattern(b, must_lookup(b, dir, "f1"), 100 * KiB + 3, 41);
	assert_pattern(b, must_lookup(b, dir, "f3"), 9000, 43);
	assert_int_equal(lookup_ino(b, dir, "f2"), -ENOENT);
	shoal_counters(b, &cb1);
	assert_true(cb1.sc_recoveries > cb0.sc_recoveries);
	assert_int_equal(cb1.sc_withdrawals, 0);
	assert_true(t_seen + 100 >= REC_LEASE_MS / 2);

	/* b works on; a leaves (unmount writes nothing of a fenced device) */
	mkfile(b, dir, "after", 20000, 44);
	assert_pattern(b, must_lookup(b, dir, "after"), 20000, 44);
	shoal_unmount(a);
	dev_close(lower);
	tc_check_tree(b, 0);
	cl_unmount_all(&c);
	cl_lockd_stop(&c);
	cl_fsck(&c);
	cl_fini(&c);
}

/*
 * A replay that cannot read the dead node's journal: node a withdraws with
 * committed work only in its journal, and the log blocks of a's journal
 * cannot be read, by b nor by c (a bad sector of the shared disk).  No
 * node may report a recovered (lockd would release a's locks over blocks a
 * never wrote home), and none withdraws either (every node would, one
 * after another, and the cluster would be down): a's locks stay held, the
 * replays are tried again, and once the disk reads again one succeeds and
 * a's work is there.  (Before 2026-12-04 b took the read error for the end
 * of a's log and reported the recovery done: w was gone.)
 */
static void test_recovery_read_error(void **state)
{
	struct cluster c;
	struct dev_fault_cfg bad = { .fc_fail_write_at = -1, .fc_fail_flush_at = -1,
				     .fc_errno = EIO, .fc_cut_at_write = -1 };
	const struct dev_fault_cfg good = { .fc_fail_write_at = -1, .fc_fail_flush_at = -1,
					    .fc_cut_at_write = -1 };
	struct shoal_dev *lower[2], *fdev[2];
	struct shoal_fs *a, *n[2];
	struct shoal_counters sc;
	struct shoal_sb sb;
	uint64_t root, dir, jaddr, t0, errs = 0, recs = 0, rec0[2];
	struct stat st;
	(void)state;

	cl_image(&c);
	cl_lockd_start(&c, REC_LEASE_MS);
	if (node_mount(&c, "a", &a))
		fail_msg("mount of node a: %s", shoal_mount_error());
	for (int i = 0; i < 2; i++) {
		assert_int_equal(dev_open(c.c_img, 0, &lower[i]), 0);
		assert_int_equal(dev_fault_wrap(lower[i], &fdev[i]), 0);
		n[i] = node_mount_on(&c, i ? "c" : "b", fdev[i]);
	}
	root = shoal_root(a);
	assert_int_equal(shoal_getattr(n[0], root, &st), 0);

	/* a's committed work: in a's journal, its glocks still a's */
	dir = mkdir_(a, root, "w");
	mkfile(a, dir, "f1", 70 * KiB + 1, 61);
	assert_int_equal(shoal_sync(a), 0);

	/* nobody can read a's log (a's journal head they can) */
	assert_int_equal(dev_read(lower[0], &sb, sizeof(sb), 0), 0);
	jaddr = sb.sb_jfirst + (uint64_t)shoal_journal_id(a) * sb.sb_jblocks;
	bad.fc_bad_read_lo = (jaddr + 1) * sb.sb_bsize;
	bad.fc_bad_read_hi = (jaddr + sb.sb_jblocks) * sb.sb_bsize;
	for (int i = 0; i < 2; i++) {
		dev_fault_set(fdev[i], &bad);
		shoal_counters(n[i], &sc);
		rec0[i] = sc.sc_recoveries; /* the mounts' looks at free journals */
	}
	assert_int_equal(shoal_withdraw(a, "test: node a stops"), 0);

	/* both fail, neither withdraws, nobody says a was recovered */
	for (t0 = now_ms(); now_ms() - t0 < 4 * REC_LEASE_MS; sleep_ms(20)) {
		errs = 0;
		for (int i = 0; i < 2; i++) {
			shoal_counters(n[i], &sc);
			errs += sc.sc_recovery_errors;
		}
		if (errs >= 2)
			break;
	}
	if (verbose())
		fprintf(stderr, "  %llu failed replays in %llu ms\n", (unsigned long long)errs,
			(unsigned long long)(now_ms() - t0));
	assert_true(errs >= 2);
	for (int i = 0; i < 2; i++) {
		shoal_counters(n[i], &sc);
		assert_int_equal(sc.sc_withdrawals, 0);
		assert_int_equal(sc.sc_recoveries, rec0[i]);
		assert_false(shoal_is_readonly(n[i]));
	}
	assert_false(lockd_saw("of node a recovered by"));

	/* the disk reads again: a retry replays a's journal, and a's work is
	 * there for b (which blocked on a's locks until then) */
	for (int i = 0; i < 2; i++)
		dev_fault_set(fdev[i], &good);
	t0 = now_ms();
	assert_int_equal(must_lookup(n[0], root, "w"), dir);
	if (verbose())
		fprintf(stderr, "  b saw w/ %llu ms after the disk healed\n",
			(unsigned long long)(now_ms() - t0));
	assert_pattern(n[0], must_lookup(n[0], dir, "f1"), 70 * KiB + 1, 61);
	assert_pattern(n[1], must_lookup(n[1], dir, "f1"), 70 * KiB + 1, 61);
	assert_true(lockd_saw("journal 0 of node a recovered by node"));
	for (int i = 0; i < 2; i++) {
		shoal_counters(n[i], &sc);
		recs += sc.sc_recoveries - rec0[i];
		assert_int_equal(sc.sc_withdrawals, 0);
	}
	assert_true(recs >= 1);
	mkfile(n[1], dir, "after", 5000, 62);
	assert_pattern(n[0], must_lookup(n[0], dir, "after"), 5000, 62);

	shoal_unmount(a);
	tc_check_tree(n[0], 0);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(shoal_unmount(n[i]), 0);
		dev_close(lower[i]);
	}
	cl_lockd_stop(&c);
	cl_fsck(&c);
	cl_fini(&c);
}

/*
 * withdraw after a queued write failed: node a's large data writes go
 * through its write-behind queue (dev.c (5)); one of them fails after a's
 * write returned.  a's next fsync neither logs anything on top of it nor
 * reports success: a withdraws, and b replays a's journal and sees what a
 * had committed before, not the file whose data never landed.
 */
static void test_withdraw_after_queued_write_error(void **state)
{
	struct cluster c;
	struct shoal_dev *dev;
	struct shoal_fs *a, *b;
	struct shoal_counters ca, cb0, cb1;
	uint8_t *buf = malloc(256 * KiB);
	uint64_t root, dir;
	struct stat st;
	int good, bad;
	(void)state;

	assert_non_null(buf);
	cl_image(&c);
	cl_lockd_start(&c, REC_LEASE_MS);
	assert_int_equal(dev_open(c.c_img, 0, &dev), 0);
	if (dev->d_dfd < 0) { /* no O_DIRECT here (tmpfs): no write-behind either */
		dev_close(dev);
		cl_lockd_stop(&c);
		cl_fini(&c);
		free(buf);
		skip();
	}
	assert_int_equal(dev_wb_start(dev, 16 * MiB), 0);
	root = cl_start_a_on(&c, dev, &a, &b);

	dir = mkdir_(a, root, "q");
	mkfile(a, dir, "f1", 256 * KiB, 51);
	assert_int_equal(shoal_sync(a), 0);

	/* a's O_DIRECT descriptor, which the queue's writers use, made
	 * read-only: the next queued write fails after it was accepted */
	good = dev->d_dfd;
	bad = open(c.c_img, O_RDONLY | O_DIRECT);
	assert_true(bad >= 0);
	dev->d_dfd = bad;
	assert_int_equal(shoal_create(a, &root_ctx, dir, "f2", 0644, O_RDWR, &st), 0);
	fill_pattern(buf, 256 * KiB, 0, 52);
	assert_int_equal(shoal_write(a, &root_ctx, st.st_ino, buf, 128 * KiB, 0, O_RDWR),
			 (ssize_t)(128 * KiB));
	assert_int_not_equal(shoal_fsync(a, st.st_ino, 0), 0);
	dev->d_dfd = good; /* the queue is empty now: nobody uses it */
	close(bad);
	assert_true(shoal_is_readonly(a));
	shoal_counters(a, &ca);
	assert_int_equal(ca.sc_withdrawals, 1);
	assert_non_null(strstr(shoal_error(a), "queued data write failed"));
	shoal_release(a, st.st_ino, O_RDWR);
	shoal_forget(a, st.st_ino, 1);

	shoal_counters(b, &cb0);
	assert_int_equal(must_lookup(b, root, "q"), dir);
	assert_pattern(b, must_lookup(b, dir, "f1"), 256 * KiB, 51);
	assert_int_equal(lookup_ino(b, dir, "f2"), -ENOENT);
	shoal_counters(b, &cb1);
	assert_true(cb1.sc_recoveries > cb0.sc_recoveries);

	shoal_unmount(a);
	tc_check_tree(b, 0);
	cl_unmount_all(&c);
	cl_lockd_stop(&c);
	cl_fsck(&c);
	cl_fini(&c);
	free(buf);
}


/*
 * Freeing the blocks of a file takes only the resource groups that hold
 * them (issue 22, defect 1).  With 1 KiB blocks the image has over 100
 * groups; node c allocates in its own part of the disk (fs_rg_alloc starts
 * at 2/3 of the groups) and keeps that group EX.  Node a then truncates,
 * punches and unlinks files whose blocks are all in a's groups: each must
 * finish, and none may wait for c's group.  Before, the truncate asked
 * for every group, could hold only 64 glocks at once (OP_MAX) and restarted
 * for good with try-locks that never asked c to give its group back.
 */
struct trunc_job {
	struct shoal_fs *fs;
	uint64_t ino;
	int what; /* 0 truncate to 0, 1 punch a hole, 2 rmdir, 3 unmount */
	int err;
	int done;
};

static void *trunc_thread(void *arg)
{
	struct trunc_job *j = arg;
	struct stat attr = { .st_size = 0 }, st;

	if (j->what == 0) {
		j->err = shoal_setattr(j->fs, &root_ctx, j->ino, &attr, SHOAL_SET_SIZE, &st);
	} else if (j->what == 2) { /* rmdir of j->ino's child "hashed" */
		j->err = shoal_rmdir(j->fs, &root_ctx, j->ino, "hashed");
	} else if (j->what == 3) {
		j->err = shoal_unmount(j->fs);
	} else
		j->err = shoal_fallocate(j->fs, j->ino, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
					 0, 256 * KiB);
	__atomic_store_n(&j->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* Run job j in a thread; fail if it has not finished within 30 s. */
static void run_bounded(struct cluster *c, struct trunc_job *j, const char *what)
{
	struct timespec ts;
	pthread_t t;

	assert_int_equal(pthread_create(&t, NULL, trunc_thread, j), 0);
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 30;
	if (pthread_timedjoin_np(t, NULL, &ts)) {
		/* only stopping lockd ends the wait: then the thread can be joined */
		cl_lockd_stop(c);
		pthread_join(t, NULL);
		fail_msg("%s did not finish within 30 s (err %d)", what, j->err);
	}
	assert_int_equal(j->err, 0);
}

static void test_free_takes_only_its_groups(void **state)
{
	struct shoal_fs *a, *b, *cc;
	struct cluster c;
	struct trunc_job j = { 0 };
	uint64_t root, f, g, h;
	struct shoal_counters before, after;
	(void)state;

	cl_image_bs(&c, 1024);
	cl_lockd_start(&c, 8000);
	for (int i = 0; i < MAXN; i++)
		if (node_mount(&c, (const char *[]){ "a", "b", "c" }[i], &c.c_fs[i]))
			fail_msg("mount: %s", shoal_mount_error());
	c.c_n = MAXN;
	a = c.c_fs[0];
	b = c.c_fs[1];
	cc = c.c_fs[2];
	cl_touch_root(&c);
	root = shoal_root(a);
	assert_true(c.c_rgcount > 80); /* more groups than an operation can hold */
	(void)b;

	mkfile(cc, root, "c-file", 64 * KiB, 4); /* c keeps its group EX */
	f = mkfile(a, root, "f", 2 * MiB, 1); /* a block map: di_height > 0 */
	g = mkfile(a, root, "g", 2 * MiB, 2);
	h = mkfile(a, root, "h", 2 * MiB, 3);
	shoal_counters(cc, &before);

	j = (struct trunc_job){ .fs = a, .ino = f, .what = 0 };
	run_bounded(&c, &j, "truncate of a 2 MiB file to 0");
	j = (struct trunc_job){ .fs = a, .ino = g, .what = 1 };
	run_bounded(&c, &j, "punching a hole in a 2 MiB file");
	assert_int_equal(shoal_unlink(a, &root_ctx, root, "h"), 0);
	(void)h;
	shoal_counters(cc, &after);
	/* c was not asked for its group: nothing of c's was needed */
	assert_int_equal(after.sc_gl_callbacks, before.sc_gl_callbacks);

	/* a hashed directory's leaves may lie in any group: its removal takes
	 * every group, more glocks than an operation held at first */
	struct stat st;
	char name[32];
	uint64_t d;

	assert_int_equal(shoal_mkdir(a, &root_ctx, root, "hashed", 0755, &st), 0);
	d = st.st_ino;
	for (int i = 0; i < 300; i++) {
		snprintf(name, sizeof(name), "entry-%04d", i);
		assert_int_equal(shoal_mknod(a, &root_ctx, d, name, S_IFREG | 0644, 0, &st), 0);
		shoal_forget(a, st.st_ino, 1);
	}
	for (int i = 0; i < 300; i++) {
		snprintf(name, sizeof(name), "entry-%04d", i);
		assert_int_equal(shoal_unlink(a, &root_ctx, d, name), 0);
	}
	shoal_forget(a, d, 1);
	j = (struct trunc_job){ .fs = a, .ino = root, .what = 2 };
	run_bounded(&c, &j, "rmdir of an emptied hashed directory");
	/* freed now or by the orphan thread, which the unmount waits for */
	j = (struct trunc_job){ .fs = a, .what = 3 };
	c.c_fs[0] = NULL;
	run_bounded(&c, &j, "unmount after the rmdir");

	cl_unmount_all(&c);
	cl_lockd_stop(&c);
	cl_fsck(&c);
	cl_fini(&c);
}
int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_recovery_of_killed_node),
		cmocka_unit_test(test_killed_node_comes_back_alone),
		cmocka_unit_test(test_journal_option_in_cluster),
		cmocka_unit_test(test_withdraw_after_write_error),
		cmocka_unit_test(test_stale_writer_after_recovery),
		cmocka_unit_test(test_withdraw_after_queued_write_error),
		cmocka_unit_test(test_recovery_read_error),
		cmocka_unit_test(test_free_takes_only_its_groups),
	};
	signal(SIGPIPE, SIG_IGN);
	if (getenv("SHOAL_TEST_FILTER")) /* e.g. SHOAL_TEST_FILTER=test_coherence */
		cmocka_set_test_filter(getenv("SHOAL_TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_journal.c - durability and crash recovery, on the fault-injecting
 * device (core/dev_fault.c) that holds unflushed writes in memory and can
 * lose them, tear them, or fail a chosen write or flush.
 *
 *  - the fault device itself does what the crash tests rely on;
 *  - (a) what shoal_sync made durable survives a power cut exactly;
 *  - (b) changes after the last sync may be lost, and the filesystem still
 *    mounts consistent;
 *  - (c) a deterministic workload is cut at more than 200 of its writes
 *    (power lost, or a random part of the unflushed writes kept): after
 *    recovery every path is in a state the workload's fsyncs allow, and
 *    the whole tree reads without error with exact accounting;
 *  - (d) recovery is idempotent: replaying twice, or replaying after a
 *    recovery that itself died at any of its writes, gives the same tree;
 *  - an fsync of an inode that left the inode cache since its change (the
 *    kernel forgot it) still makes that change durable;
 *  - (e) a failed write or flush is reported (error or read-only mount) and
 *    loses nothing that was acknowledged before or after it; after a failed
 *    commit no fsync or sync claims durability for what never committed.
 *
 * Images live in /dev/shm when it is writable (see main).  The workload
 * holds a lookup reference on every inode it made and fsyncs through an open
 * handle, as the kernel does through FUSE.  SHOAL_TEST_VERBOSE=1 prints
 * progress.
 *
 * The oracle of (c) and (e): each path the workload uses has a set of
 * states it may be found in after a crash (absent, a directory, a symlink,
 * or a file with given contents), or "unknown".  Before an operation
 * touches a path the set widens to what a crash during it may leave; after
 * fsync of the file and of its directory return, the path's state as read
 * back is the only one allowed.  Acknowledgements are counted only while
 * the device is still alive (the dying write not yet issued).
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "dev.h"
#include "shoal/ondisk.h"
#include "shoal/shoal.h"
#include "testutil.h"
#include "treecheck.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)

#define IMG_SIZE (32 * MiB)
#define JBYTES (1 * MiB)

/*
 * Once a failed commit turned the mount read-only, fsync and sync must fail
 * (test_eio_journal_write asserts it); the sweep counts every fsync that
 * returned 0 as an acknowledgement, read-only or not.
 */

static const struct shoal_ctx ctx = { .c_uid = 0, .c_gid = 0, .c_pid = 1 };
static int verbose;

/* --- images ----------------------------------------------------------------- */

/* A freshly formatted image, to be copied for each run. */
static char *base_image(void)
{
	struct shoal_format_opts fo = { .fo_journals = 1, .fo_jbytes = JBYTES };
	struct shoal_dev *dev;
	char *path = tu_tmpimage(IMG_SIZE);

	assert_int_equal(dev_open(path, 0, &dev), 0);
	assert_int_equal(shoal_format(dev, &fo, NULL), 0);
	dev_close(dev);
	return path;
}

/* Copy src over dst, both of IMG_SIZE, writing only the data regions. */
static void copy_image(const char *src, const char *dst)
{
	int in = open(src, O_RDONLY), out = open(dst, O_RDWR | O_TRUNC);
	static uint8_t buf[1 << 20];
	off_t pos = 0;

	assert_true(in >= 0 && out >= 0);
	assert_int_equal(ftruncate(out, IMG_SIZE), 0);
	for (;;) {
		off_t d = lseek(in, pos, SEEK_DATA);
		if (d < 0)
			break;
		off_t h = lseek(in, d, SEEK_HOLE);
		assert_true(h > d);
		for (off_t o = d; o < h;) {
			size_t n = h - o < (off_t)sizeof(buf) ? (size_t)(h - o) : sizeof(buf);
			assert_int_equal(pread(in, buf, n, o), (ssize_t)n);
			assert_int_equal(pwrite(out, buf, n, o), (ssize_t)n);
			o += (off_t)n;
		}
		pos = h;
	}
	close(in);
	close(out);
}

static struct shoal_fs *mount_plain(const char *path, int atime)
{
	struct shoal_mount_opts mo = { .mo_commit_secs = 3600, .mo_atime = atime };
	struct shoal_dev *dev;
	struct shoal_fs *fs;
	int err;

	assert_int_equal(dev_open(path, 0, &dev), 0);
	err = shoal_mount(dev, &mo, &fs);
	if (err)
		fail_msg("mount of %s after the crash failed: %s", path, strerror(-err));
	if (shoal_is_readonly(fs))
		fail_msg("mount after the crash is read-only: %s", shoal_error(fs));
	return fs;
}

/* A mount on the fault device over a newly opened path. */
struct fmount {
	struct shoal_dev *fm_lower;
	struct shoal_dev *fm_dev;
	struct shoal_fs *fm_fs;
};

/* Mount path through a new fault device configured with cfg (NULL: none). */
static void mount_fault(const char *path, struct fmount *m, const struct dev_fault_cfg *cfg)
{
	struct shoal_mount_opts mo = { .mo_commit_secs = 3600, .mo_atime = SHOAL_NOATIME };
	int err;

	assert_int_equal(dev_open(path, 0, &m->fm_lower), 0);
	assert_int_equal(dev_fault_wrap(m->fm_lower, &m->fm_dev), 0);
	if (cfg)
		dev_fault_set(m->fm_dev, cfg);
	err = shoal_mount(m->fm_dev, &mo, &m->fm_fs);
	if (err)
		fail_msg("mount on the fault device: %s", strerror(-err));
}

static const struct dev_fault_cfg no_faults = { .fc_fail_write_at = -1, .fc_fail_flush_at = -1,
						.fc_cut_at_write = -1 };

/* Power cut, then free the dead mount (its writes go nowhere). */
static void crash(struct fmount *m, unsigned seed)
{
	dev_fault_cut(m->fm_dev, seed);
	shoal_unmount(m->fm_fs);
	dev_close(m->fm_lower);
	memset(m, 0, sizeof(*m));
}

static void pattern(uint8_t *buf, size_t len, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
	for (size_t i = 0; i < len; i += 8) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(buf + i, &x, len - i < 8 ? len - i : 8);
	}
}

/* --- the fault device --------------------------------------------------------- */

static void fdev_fill(struct shoal_dev *d, uint64_t page, uint8_t v)
{
	uint8_t b[4096];
	memset(b, v, sizeof(b));
	assert_int_equal(dev_write(d, b, sizeof(b), page * 4096), 0);
}

static int fdev_page(struct shoal_dev *d, uint64_t page)
{
	uint8_t b[4096];
	assert_int_equal(dev_read(d, b, sizeof(b), page * 4096), 0);
	for (size_t i = 1; i < sizeof(b); i++)
		if (b[i] != b[0])
			return -1; /* torn inside a page */
	return b[0];
}

/*
 * fc_die_kill (shoal-mount's SHOAL_TEST_POWER_CUT): at write 4 the child
 * dies of SIGKILL there and then; the image holds what it flushed, the
 * pages of the unflushed writes the seed picked (with seed 0 none), and
 * nothing written after the death.
 */
static void fault_die_child(const char *path, unsigned seed)
{
	struct shoal_dev *low, *fd;
	struct dev_fault_cfg cfg = { .fc_fail_write_at = -1, .fc_fail_flush_at = -1,
				     .fc_cut_at_write = 4, .fc_die_keep_seed = seed,
				     .fc_die_kill = 1 };

	if (dev_open(path, 0, &low) || dev_fault_wrap(low, &fd))
		_exit(2);
	dev_fault_set(fd, &cfg);
	fdev_fill(fd, 60, 1);
	if (dev_flush(fd))
		_exit(2);
	for (int p = 61; p < 64; p++)
		fdev_fill(fd, p, 2); /* writes 1..3: unflushed */
	fdev_fill(fd, 64, 3);        /* write 4: the power goes */
	_exit(3);                    /* never reached */
}

static void test_fault_die(void **state)
{
	char *path = tu_tmpimage(MiB);
	struct shoal_dev *low;
	int kept = 0;

	(void)state;
	for (unsigned seed = 0; seed < 40; seed++) {
		int st;
		pid_t pid = fork();

		assert_true(pid >= 0);
		if (pid == 0)
			fault_die_child(path, seed);
		assert_int_equal(waitpid(pid, &st, 0), pid);
		assert_true(WIFSIGNALED(st));
		assert_int_equal(WTERMSIG(st), SIGKILL);
		assert_int_equal(dev_open(path, 0, &low), 0);
		assert_int_equal(fdev_page(low, 60), 1);
		for (int p = 61; p < 64; p++) {
			int v = fdev_page(low, p);
			assert_true(v == 0 || v == 2);
			assert_true(seed || v == 0);
			kept += v == 2;
		}
		assert_int_equal(fdev_page(low, 64), 0);
		struct shoal_dev *w;
		assert_int_equal(dev_fault_wrap(low, &w), 0);
		for (int p = 60; p < 65; p++)
			fdev_fill(w, p, 0); /* the next seed starts from zeros */
		dev_close(w);
		dev_close(low);
	}
	assert_in_range(kept, 10, 107); /* of 39 * 3: some kept, some lost */
	tu_rmimage(path);
}

static void test_fault_device(void **state)
{
	char *path = tu_tmpimage(MiB + 1000); /* a short last page */
	struct shoal_dev *low, *fd;
	uint8_t b[8192], c[8192];

	assert_int_equal(dev_open(path, 0, &low), 0);
	assert_int_equal(dev_fault_wrap(low, &fd), 0);
	assert_int_equal(fd->d_size, low->d_size);
	assert_int_equal(fd->d_readonly, 0);

	/* writes are seen by reads at once, by the lower device only after a flush */
	fdev_fill(fd, 1, 0xaa);
	memset(b, 0x11, 100);
	assert_int_equal(dev_write(fd, b, 100, 3 * 4096 + 4000), 0); /* spans two pages */
	assert_int_equal(fdev_page(fd, 1), 0xaa);
	assert_int_equal(fdev_page(low, 1), 0);
	assert_int_equal(dev_read(fd, c, 200, 3 * 4096 + 3950), 0);
	for (int i = 0; i < 200; i++)
		assert_int_equal(c[i], i >= 50 && i < 150 ? 0x11 : 0);
	assert_int_equal(dev_write(fd, b, 50, MiB + 900), 0); /* the short page */
	assert_int_equal(dev_flush(fd), 0);
	assert_int_equal(fdev_page(low, 1), 0xaa);
	assert_int_equal(dev_read(low, c, 200, 3 * 4096 + 3950), 0);
	for (int i = 0; i < 200; i++)
		assert_int_equal(c[i], i >= 50 && i < 150 ? 0x11 : 0);
	assert_int_equal(dev_read(low, c, 50, MiB + 900), 0);
	assert_memory_equal(c, b, 50);
	assert_int_equal(dev_fault_writes(fd), 3);

	/* a power cut loses what was not flushed; the device stays readable */
	fdev_fill(fd, 1, 0xbb);
	fdev_fill(fd, 2, 0xbb);
	dev_fault_cut(fd, 0);
	assert_int_equal(fdev_page(low, 1), 0xaa);
	assert_int_equal(fdev_page(low, 2), 0);
	assert_int_equal(fdev_page(fd, 2), 0xbb); /* what the dead machine sees */
	fdev_fill(fd, 5, 0xcc);                      /* and writes after the cut ... */
	assert_int_equal(dev_flush(fd), 0);
	assert_int_equal(fdev_page(low, 5), 0); /* ... go nowhere */
	dev_close(fd);
	assert_int_equal(fdev_page(low, 5), 0);

	/* a seeded cut keeps whole pages, some of them */
	assert_int_equal(dev_fault_wrap(low, &fd), 0);
	for (int p = 0; p < 128; p++)
		fdev_fill(fd, 100 + p, 0x40);
	assert_int_equal(dev_flush(fd), 0);
	for (int p = 0; p < 128; p++)
		fdev_fill(fd, 100 + p, 0x41);
	dev_fault_cut(fd, 12345);
	int kept = 0;
	for (int p = 0; p < 128; p++) {
		int v = fdev_page(low, 100 + p);
		assert_true(v == 0x40 || v == 0x41);
		kept += v == 0x41;
	}
	assert_in_range(kept, 16, 112);
	dev_close(fd);

	/* the Nth write and flush fail once, and change nothing */
	assert_int_equal(dev_fault_wrap(low, &fd), 0);
	struct dev_fault_cfg cfg = { .fc_fail_write_at = 2, .fc_fail_flush_at = 1,
				     .fc_errno = ENOSPC, .fc_cut_at_write = -1 };
	dev_fault_set(fd, &cfg);
	fdev_fill(fd, 10, 1);
	fdev_fill(fd, 11, 1);
	memset(b, 2, 4096);
	assert_int_equal(dev_write(fd, b, 4096, 12 * 4096), -ENOSPC);
	assert_int_equal(fdev_page(fd, 12), 0);
	fdev_fill(fd, 12, 3);
	assert_int_equal(dev_flush(fd), 0);
	fdev_fill(fd, 13, 4);
	assert_int_equal(dev_flush(fd), -ENOSPC);
	assert_int_equal(fdev_page(low, 13), 0);
	assert_int_equal(dev_flush(fd), 0);
	assert_int_equal(fdev_page(low, 12), 3);
	assert_int_equal(fdev_page(low, 13), 4);
	dev_close(fd);

	/* death at write 3: writes 0..2 may survive a cut, later ones never do */
	assert_int_equal(dev_fault_wrap(low, &fd), 0);
	cfg = (struct dev_fault_cfg){ .fc_fail_write_at = -1, .fc_fail_flush_at = -1,
				      .fc_cut_at_write = 3 };
	dev_fault_set(fd, &cfg);
	fdev_fill(fd, 20, 5);
	assert_int_equal(dev_flush(fd), 0); /* before death: durable */
	fdev_fill(fd, 21, 5);
	fdev_fill(fd, 22, 5);
	fdev_fill(fd, 23, 5); /* write 3: dies */
	fdev_fill(fd, 21, 6);
	assert_int_equal(fdev_page(fd, 23), 5); /* still answers as if alive */
	assert_int_equal(fdev_page(fd, 21), 6);
	assert_int_equal(dev_flush(fd), 0);
	assert_int_equal(fdev_page(low, 20), 5);
	assert_int_equal(fdev_page(low, 21), 0);
	assert_int_equal(fdev_page(low, 23), 0);
	dev_fault_cut(fd, 99);
	assert_true(fdev_page(low, 21) == 0 || fdev_page(low, 21) == 5); /* never 6 */
	assert_true(fdev_page(low, 22) == 0 || fdev_page(low, 22) == 5);
	assert_int_equal(fdev_page(low, 23), 0);
	assert_int_equal(dev_fault_writes(fd), 5);
	dev_close(fd);

	/* a bad region: reads touching it fail, every time, and copy nothing;
	 * reads beside it and writes into it work; the next set clears it */
	assert_int_equal(dev_fault_wrap(low, &fd), 0);
	fdev_fill(fd, 40, 8);
	fdev_fill(fd, 41, 9);
	cfg = (struct dev_fault_cfg){ .fc_fail_write_at = -1, .fc_fail_flush_at = -1,
				      .fc_cut_at_write = -1, .fc_bad_read_lo = 41 * 4096 + 100,
				      .fc_bad_read_hi = 41 * 4096 + 101 };
	dev_fault_set(fd, &cfg);
	assert_int_equal(fdev_page(fd, 40), 8);
	assert_int_equal(fdev_page(fd, 42), 0);
	for (int i = 0; i < 2; i++)
		assert_int_equal(dev_read(fd, c, 8192, 40 * 4096), -EIO);
	assert_int_equal(dev_read(fd, c, 100, 41 * 4096), 0);
	assert_int_equal(dev_read(fd, c, 1, 41 * 4096 + 101), 0);
	assert_int_equal(c[0], 9);
	memset(c, 0x77, 2);
	assert_int_equal(dev_read(fd, c, 2, 41 * 4096 + 99), -EIO);
	assert_int_equal(c[0], 0x77); /* the failed read copied nothing */
	fdev_fill(fd, 41, 10);
	assert_int_equal(dev_read(fd, c, 4096, 41 * 4096), -EIO);
	dev_fault_set(fd, &no_faults);
	assert_int_equal(fdev_page(fd, 41), 10);
	dev_close(fd);

	/* closing a live wrapper keeps its writes (a process exit, not a crash) */
	assert_int_equal(dev_fault_wrap(low, &fd), 0);
	fdev_fill(fd, 30, 7);
	dev_close(fd);
	assert_int_equal(fdev_page(low, 30), 7);
	dev_close(low);
	tu_rmimage(path);
}

/* --- (a), (b): sync, then power cut ---------------------------------------- */

static uint64_t mk(struct shoal_fs *fs, uint64_t dir, const char *name, size_t size, uint64_t seed)
{
	struct stat st;
	uint8_t *buf = malloc(size + 1);

	assert_non_null(buf);
	assert_int_equal(shoal_create(fs, &ctx, dir, name, 0644, O_RDWR, &st), 0);
	pattern(buf, size, seed);
	if (size)
		assert_int_equal(shoal_write(fs, &ctx, st.st_ino, buf, size, 0, O_RDWR), (ssize_t)size);
	assert_int_equal(shoal_release(fs, st.st_ino, O_RDWR), 0);
	shoal_forget(fs, st.st_ino, 1);
	free(buf);
	return st.st_ino;
}

static uint64_t mkd(struct shoal_fs *fs, uint64_t dir, const char *name)
{
	struct stat st;
	assert_int_equal(shoal_mkdir(fs, &ctx, dir, name, 0755, &st), 0);
	shoal_forget(fs, st.st_ino, 1);
	return st.st_ino;
}

static uint64_t lookup_in(struct shoal_fs *fs, uint64_t dir, const char *name)
{
	struct stat st;
	assert_int_equal(shoal_lookup(fs, dir, name, &st), 0);
	shoal_forget(fs, st.st_ino, 1);
	return st.st_ino;
}

/* A varied tree: inline, block and sparse files, links, xattrs, renames. */
static void build_tree(struct shoal_fs *fs, int round)
{
	char name[32];
	struct stat st, a;
	uint64_t R = shoal_root(fs);
	uint64_t d = mkd(fs, R, round ? "dir1" : "dir0");
	uint64_t sub = mkd(fs, d, "sub");

	for (int i = 0; i < 30; i++) {
		snprintf(name, sizeof(name), "f%d", i);
		mk(fs, i % 3 ? d : sub, name, (size_t)(i * i * 397) % (200 * KiB), (uint64_t)i + round);
	}
	uint64_t s = mk(fs, R, round ? "sparse1" : "sparse0", 5000, 7);
	uint8_t buf[100];
	pattern(buf, sizeof(buf), 8);
	assert_int_equal(shoal_write(fs, &ctx, s, buf, sizeof(buf), 20 * MiB, O_RDWR), 100);
	assert_int_equal(shoal_link(fs, s, d, "hardlink", &st), 0);
	shoal_forget(fs, s, 1);
	assert_int_equal(shoal_symlink(fs, &ctx, d, "sym", "../somewhere/else", &st), 0);
	shoal_forget(fs, st.st_ino, 1);
	assert_int_equal(shoal_setxattr(fs, s, "user.k", "value", 5, 0), 0);
	assert_int_equal(shoal_rename(fs, &ctx, d, "f1", sub, "renamed", 0), 0);
	assert_int_equal(shoal_unlink(fs, &ctx, d, "f2"), 0);
	memset(&a, 0, sizeof(a));
	a.st_size = 3000;
	assert_int_equal(shoal_setattr(fs, &ctx, lookup_in(fs, d, "f4"), &a, SHOAL_SET_SIZE, &st), 0);
	a.st_mode = 0600;
	assert_int_equal(shoal_setattr(fs, &ctx, lookup_in(fs, d, "f5"), &a, SHOAL_SET_MODE, &st), 0);
}


static void drop_prefix(struct tc_snap *s, const char *prefix)
{
	size_t j = 0;
	for (size_t i = 0; i < s->s_n; i++) {
		if (!strncmp(s->s_ents[i].t_path, prefix, strlen(prefix)))
			free(s->s_ents[i].t_path);
		else
			s->s_ents[j++] = s->s_ents[i];
	}
	s->s_n = j;
}

/* (a) After shoal_sync, a power cut loses nothing, and an orphan is freed. */
static void test_sync_then_power_cut(void **state)
{
	char *base = base_image(), *img = tu_tmpimage(IMG_SIZE);
	struct fmount m;
	struct tc_snap before, after;
	struct stat st;

	for (int variant = 0; variant < 2; variant++) {
		copy_image(base, img);
		for (int round = 0; round < 2; round++) {
			unsigned seed = variant ? 1000u + (unsigned)round : 0;
			mount_fault(img, &m, NULL);
			build_tree(m.fm_fs, round);
			/* an open, unlinked file: freed by the recovery */
			assert_int_equal(shoal_create(m.fm_fs, &ctx, shoal_root(m.fm_fs), "orphan", 0644,
						      O_RDWR, &st),
					 0);
			uint8_t buf[8192];
			pattern(buf, sizeof(buf), 3);
			for (int i = 0; i < 12; i++)
				assert_int_equal(shoal_write(m.fm_fs, &ctx, st.st_ino, buf, sizeof(buf),
							     (uint64_t)i * sizeof(buf), O_RDWR),
						 (ssize_t)sizeof(buf));
			assert_int_equal(shoal_unlink(m.fm_fs, &ctx, shoal_root(m.fm_fs), "orphan"), 0);
			assert_int_equal(shoal_getattr(m.fm_fs, st.st_ino, &st), 0);
			assert_int_equal(shoal_sync(m.fm_fs), 0);
			tc_snapshot(m.fm_fs, &before);
			before.s_bfree += (uint64_t)st.st_blocks * 512 / 4096; /* freed at recovery */
			crash(&m, seed);

			struct shoal_fs *fs = mount_plain(img, SHOAL_NOATIME);
			tc_snapshot(fs, &after);
			tc_snap_expect_equal(&before, &after, "synced tree after a power cut");
			tc_check_tree(fs, 1);
			assert_int_equal(shoal_unmount(fs), 0);
			tc_snap_free(&before);
			tc_snap_free(&after);
		}
	}
	tu_rmimage(img);
	tu_rmimage(base);
}

/* (b) What was not synced may be lost; the filesystem is consistent. */
static void test_unsynced_changes(void **state)
{
	char *base = base_image(), *img = tu_tmpimage(IMG_SIZE);
	struct fmount m;
	struct tc_snap s1, s3;
	struct stat st;
	struct shoal_dev_stats ds0, ds1;
	char name[32];

	for (int variant = 0; variant < 4; variant++) {
		unsigned seed = variant & 1 ? 31337u + (unsigned)variant : 0;
		int bulk = variant >= 2;

		copy_image(base, img);
		mount_fault(img, &m, NULL);
		struct shoal_fs *fs = m.fm_fs;
		uint64_t R = shoal_root(fs);
		build_tree(fs, 0);
		assert_int_equal(shoal_sync(fs), 0);
		tc_snapshot(fs, &s1);
		dev_stats_get(m.fm_dev, &ds0);

		/* a few changes that fit the running transaction: not flushed */
		uint64_t d = lookup_in(fs, R, "dir0");
		mk(fs, d, "late", 10000, 99);
		assert_int_equal(shoal_rename(fs, &ctx, d, "f7", d, "f7b", 0), 0);
		assert_int_equal(shoal_unlink(fs, &ctx, d, "f8"), 0);
		uint8_t buf[5000];
		pattern(buf, sizeof(buf), 5);
		uint64_t f7 = lookup_in(fs, d, "f10");
		assert_int_equal(shoal_getattr(fs, f7, &st), 0);
		assert_int_equal(shoal_write(fs, &ctx, f7, buf, sizeof(buf), (uint64_t)st.st_size,
					     O_RDWR),
				 (ssize_t)sizeof(buf));
		mkd(fs, R, "latedir");
		assert_int_equal(shoal_setxattr(fs, d, "user.late", "1", 1, 0), 0);
		if (bulk) {
			/* enough to fill transactions: some of it is committed */
			uint64_t b = mkd(fs, R, "bulk");
			for (int i = 0; i < 400; i++) {
				snprintf(name, sizeof(name), "b%d", i);
				mk(fs, b, name, (size_t)(i % 7) * 1000, (uint64_t)i);
			}
		}
		dev_stats_get(m.fm_dev, &ds1);
		if (!bulk && ds1.ds_flushes != ds0.ds_flushes)
			fail_msg("test setup: the small changes were flushed (%llu flushes)",
				 (unsigned long long)(ds1.ds_flushes - ds0.ds_flushes));
		if (bulk)
			assert_true(ds1.ds_flushes > ds0.ds_flushes);
		crash(&m, seed);

		fs = mount_plain(img, SHOAL_NOATIME);
		tc_check_tree(fs, 1);
		tc_snapshot(fs, &s3);
		if (!bulk) {
			/* nothing was committed after the sync: exactly the synced tree */
			tc_snap_expect_equal(&s1, &s3, "unflushed changes after a power cut");
		} else {
			/* the synced files are untouched whatever else was committed */
			drop_prefix(&s3, "bulk");
			drop_prefix(&s3, "late");
			drop_prefix(&s1, "dir0"); /* changed by the small changes */
			drop_prefix(&s3, "dir0");
			s3.s_bfree = s1.s_bfree;
			tc_snap_expect_equal(&s1, &s3, "synced files after a crash amid commits");
		}
		tc_snap_free(&s1);
		tc_snap_free(&s3);
		assert_int_equal(shoal_unmount(fs), 0);
	}
	tu_rmimage(img);
	tu_rmimage(base);
}

/* --- the workload of (c), (d), (e) and its oracle ----------------------------- */

enum { K_ABSENT, K_FILE, K_DIR, K_LINK };

struct ostate {
	int o_kind;
	uint64_t o_size;
	uint64_t o_hash;
};

#define MAX_ALT 6
struct alts {
	int a_n; /* -1: unknown, anything goes */
	struct ostate a_o[MAX_ALT];
};

struct wnode {
	char w_name[16];
	int w_parent; /* node index of its directory, -1 for the root */
	int w_isdir;
	int w_exists; /* in the live filesystem */
	int w_ref;    /* holds a lookup reference (as the kernel's cache would) */
	uint64_t w_ino;
	struct alts w_alts;
};

#define MAX_NODES 600
#define WL_STEPS 300

struct wl {
	struct shoal_fs *w_fs;
	struct shoal_dev *w_dev;
	int64_t w_cut_at; /* the device dies at this write; -1: never */
	uint64_t w_w0;    /* device writes when the workload began */
	int w_dead;       /* the oracle is final */
	int w_eio;        /* operations may fail (fault injection) */
	int w_nerr;       /* operations that failed */
	uint64_t w_rng;
	uint64_t w_acks;
	uint32_t w_names;
	int w_nn;
	struct wnode w_n[MAX_NODES];
	uint8_t w_buf[512 * 1024];
};

static uint64_t rnd(struct wl *w)
{
	uint64_t x = w->w_rng;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	w->w_rng = x;
	return x * 0x2545f4914f6cdd1dull;
}

static uint64_t rndn(struct wl *w, uint64_t n)
{
	return rnd(w) % n;
}

static void path_of(struct wl *w, int i, char *out, size_t size)
{
	int chain[64], n = 0;
	size_t len = 0;

	for (int k = i; k >= 0; k = w->w_n[k].w_parent) {
		assert_true(n < 64);
		chain[n++] = k;
	}
	out[0] = '\0';
	while (n--) {
		const char *name = w->w_n[chain[n]].w_name;
		size_t l = strlen(name);
		assert_true(len + l + 2 <= size);
		if (len)
			out[len++] = '/';
		memcpy(out + len, name, l + 1);
		len += l;
	}
}

static uint64_t dir_ino(struct wl *w, int parent)
{
	return parent < 0 ? shoal_root(w->w_fs) : w->w_n[parent].w_ino;
}

static struct ostate observe(struct shoal_fs *fs, const char *path)
{
	struct ostate o = { K_ABSENT, 0, 0 };
	struct stat st;
	int err = tc_lookup_path(fs, path, &st);

	if (err == -ENOENT)
		return o;
	if (err)
		fail_msg("lookup of %s: %s", path, strerror(-err));
	if (S_ISDIR(st.st_mode)) {
		o.o_kind = K_DIR;
	} else if (S_ISLNK(st.st_mode)) {
		char t[4096];
		ssize_t n = shoal_readlink(fs, st.st_ino, t, sizeof(t));
		assert_true(n >= 0);
		o.o_kind = K_LINK;
		o.o_size = (uint64_t)n;
		o.o_hash = tc_fnv(TC_FNV0, t, (size_t)n);
	} else {
		assert_true(S_ISREG(st.st_mode));
		o.o_kind = K_FILE;
		o.o_size = (uint64_t)st.st_size;
		tc_read_file(fs, st.st_ino, o.o_size, &o.o_hash, path);
	}
	return o;
}

static int ost_eq(const struct ostate *a, const struct ostate *b)
{
	return a->o_kind == b->o_kind && a->o_size == b->o_size && a->o_hash == b->o_hash;
}

static void ost_str(const struct ostate *o, char *buf, size_t size)
{
	static const char *const kinds[] = { "absent", "file", "dir", "symlink" };
	if (o->o_kind == K_FILE || o->o_kind == K_LINK)
		snprintf(buf, size, "%s(size %llu hash %016llx)", kinds[o->o_kind],
			 (unsigned long long)o->o_size, (unsigned long long)o->o_hash);
	else
		snprintf(buf, size, "%s", kinds[o->o_kind]);
}

static int alive(struct wl *w)
{
	if (!w->w_dead && w->w_cut_at >= 0 &&
	    dev_fault_writes(w->w_dev) - w->w_w0 > (uint64_t)w->w_cut_at)
		w->w_dead = 1;
	return !w->w_dead;
}

/* Before an operation: the path may also end up in state o (NULL: unknown). */
static void widen(struct wl *w, int i, const struct ostate *o)
{
	struct alts *a = &w->w_n[i].w_alts;
	if (!alive(w) || a->a_n < 0)
		return;
	if (!o) {
		a->a_n = -1;
		return;
	}
	for (int k = 0; k < a->a_n; k++)
		if (ost_eq(&a->a_o[k], o))
			return;
	if (a->a_n == MAX_ALT)
		a->a_n = -1;
	else
		a->a_o[a->a_n++] = *o;
}

/* The path may end up in any state path j may be in. */
static void widen_like(struct wl *w, int i, int j)
{
	if (w->w_n[j].w_alts.a_n < 0) {
		widen(w, i, NULL);
		return;
	}
	struct alts copy = w->w_n[j].w_alts;
	for (int k = 0; k < copy.a_n; k++)
		widen(w, i, &copy.a_o[k]);
}

/* Every name of inode ino may change in any way. */
static void widen_inode(struct wl *w, uint64_t ino)
{
	for (int i = 0; i < w->w_nn; i++)
		if (w->w_n[i].w_exists && !w->w_n[i].w_isdir && w->w_n[i].w_ino == ino)
			widen(w, i, NULL);
}

/* fsync returned for path i: its present state is the only one allowed. */
static void ack(struct wl *w, int i)
{
	char path[256];
	if (!alive(w))
		return;
	path_of(w, i, path, sizeof(path));
	w->w_n[i].w_alts.a_n = 1;
	w->w_n[i].w_alts.a_o[0] = observe(w->w_fs, path);
	w->w_acks++;
}

/* An operation returned err: fine only when faults are injected. */
static int failed(struct wl *w, int err, const char *what, int i)
{
	char path[256] = "";
	if (!err)
		return 0;
	if (i >= 0)
		path_of(w, i, path, sizeof(path));
	if (!w->w_eio)
		fail_msg("workload: %s %s: %s", what, path, strerror(err < 0 ? -err : err));
	w->w_nerr++;
	return 1;
}

/* Learn whether node i exists now (after a failed operation). */
static void refresh(struct wl *w, int i)
{
	char path[256];
	struct stat st;
	path_of(w, i, path, sizeof(path));
	w->w_n[i].w_exists = tc_lookup_path(w->w_fs, path, &st) == 0;
	if (w->w_n[i].w_exists)
		w->w_n[i].w_ino = st.st_ino;
}

static int new_node(struct wl *w, int parent, int isdir)
{
	assert_true(w->w_nn < MAX_NODES);
	int i = w->w_nn++;
	struct wnode *n = &w->w_n[i];
	memset(n, 0, sizeof(*n));
	snprintf(n->w_name, sizeof(n->w_name), "%c%u", isdir ? 'd' : 'f', w->w_names++);
	n->w_parent = parent;
	n->w_isdir = isdir;
	n->w_alts.a_n = 1; /* never existed: absent */
	return i;
}

/* A random existing node (files or directories), -1 if none. */
static int pick(struct wl *w, int dirs)
{
	int cand[MAX_NODES], n = 0;
	for (int i = 0; i < w->w_nn; i++)
		if (w->w_n[i].w_exists && w->w_n[i].w_isdir == dirs)
			cand[n++] = i;
	return n ? cand[rndn(w, (uint64_t)n)] : -1;
}

/* A directory for a new entry: the root or an existing one. */
static int pick_dir(struct wl *w)
{
	return rndn(w, 4) == 0 ? -1 : pick(w, 1);
}

static size_t pick_size(struct wl *w)
{
	switch (rndn(w, 10)) {
	case 0:
		return 0;
	case 1: case 2: case 3:
		return rndn(w, 3800);
	case 4: case 5: case 6: case 7:
		return rndn(w, 40 * KiB);
	default:
		return rndn(w, 300 * KiB);
	}
}

/* Open, fsync and close, as fsync(2) and FUSE do it. */
static int fsync_open(struct wl *w, uint64_t ino, int datasync)
{
	int err = shoal_open(w->w_fs, ino, O_RDONLY);
	if (err)
		return err;
	err = shoal_fsync(w->w_fs, ino, datasync);
	int err2 = shoal_release(w->w_fs, ino, O_RDONLY);
	return err ? err : err2;
}

/* Drop the lookup reference node i holds (its name went away). */
static void drop_ref(struct wl *w, int i)
{
	if (w->w_n[i].w_ref)
		shoal_forget(w->w_fs, w->w_n[i].w_ino, 1);
	w->w_n[i].w_ref = 0;
}

/* fsync the file (if any) and directories, then acknowledge paths a and b. */
static void fsync_ack(struct wl *w, uint64_t file, int datasync, int dir1, int dir2, int a, int b)
{
	int err = 0;
	if (file)
		err = fsync_open(w, file, datasync);
	if (!err)
		err = fsync_open(w, dir_ino(w, dir1), 0);
	if (!err && dir2 != dir1)
		err = fsync_open(w, dir_ino(w, dir2), 0);
	if (failed(w, err, "fsync", a))
		return;
	ack(w, a);
	if (b >= 0)
		ack(w, b);
}

static void op_create(struct wl *w)
{
	int d = pick_dir(w), i = new_node(w, d, 0);
	size_t size = pick_size(w);
	struct ostate empty = { K_FILE, 0, TC_FNV0 }, full = { K_FILE, 0, 0 };
	struct stat st;

	widen(w, i, &empty);
	int err = shoal_create(w->w_fs, &ctx, dir_ino(w, d), w->w_n[i].w_name, 0644, O_RDWR, &st);
	if (failed(w, err, "create", i)) {
		refresh(w, i);
		return;
	}
	w->w_n[i].w_exists = 1;
	w->w_n[i].w_ref = 1;
	w->w_n[i].w_ino = st.st_ino;
	pattern(w->w_buf, size, rnd(w));
	/* data=ordered: after a crash the file is empty or whole, never partial */
	full.o_size = size;
	full.o_hash = tc_fnv(TC_FNV0, w->w_buf, size);
	widen(w, i, &full);
	ssize_t n = size ? shoal_write(w->w_fs, &ctx, st.st_ino, w->w_buf, size, 0, O_RDWR) : 0;
	if (n != (ssize_t)size && !failed(w, n < 0 ? (int)n : -EIO, "write", i))
		fail_msg("short write");
	if (n > 0 && n < (ssize_t)size) {
		full.o_size = (uint64_t)n;
		full.o_hash = tc_fnv(TC_FNV0, w->w_buf, (size_t)n);
		widen(w, i, &full);
	}
	if (rndn(w, 10) < 6)
		fsync_ack(w, st.st_ino, 0, d, d, i, -1);
	failed(w, shoal_release(w->w_fs, st.st_ino, O_RDWR), "release", i);
}

static void op_modify(struct wl *w, int kind)
{
	int i = pick(w, 0);
	struct stat st;
	if (i < 0)
		return;
	uint64_t ino = w->w_n[i].w_ino;
	if (failed(w, shoal_getattr(w->w_fs, ino, &st), "getattr", i) || !S_ISREG(st.st_mode))
		return;
	widen_inode(w, ino);
	if (failed(w, shoal_open(w->w_fs, ino, O_RDWR), "open", i))
		return;
	if (kind == 2) { /* truncate */
		struct stat a = { .st_size = (off_t)pick_size(w) }, out;
		failed(w, shoal_setattr(w->w_fs, &ctx, ino, &a, SHOAL_SET_SIZE, &out), "truncate", i);
	} else {
		uint64_t off = kind ? (uint64_t)st.st_size : rndn(w, (uint64_t)st.st_size + 1);
		size_t len = 1 + rndn(w, 64 * KiB);
		pattern(w->w_buf, len, rnd(w));
		ssize_t n = shoal_write(w->w_fs, &ctx, ino, w->w_buf, len, off, O_RDWR);
		if (n != (ssize_t)len)
			failed(w, n < 0 ? (int)n : -EIO, kind ? "append" : "overwrite", i);
	}
	if (rndn(w, 10) < 6)
		fsync_ack(w, ino, (int)rndn(w, 2), w->w_n[i].w_parent, w->w_n[i].w_parent, i, -1);
	failed(w, shoal_release(w->w_fs, ino, O_RDWR), "release", i);
}

static void op_rename(struct wl *w)
{
	int i = pick(w, 0);
	if (i < 0)
		return;
	int d = pick_dir(w), j = new_node(w, d, 0), sd = w->w_n[i].w_parent;
	struct ostate absent = { K_ABSENT, 0, 0 };
	widen_like(w, j, i);
	widen(w, i, &absent);
	int err = shoal_rename(w->w_fs, &ctx, dir_ino(w, sd), w->w_n[i].w_name, dir_ino(w, d),
			       w->w_n[j].w_name, 0);
	if (failed(w, err, "rename", i)) {
		refresh(w, i);
		refresh(w, j);
		return;
	}
	w->w_n[j].w_exists = 1;
	w->w_n[j].w_ino = w->w_n[i].w_ino;
	w->w_n[j].w_ref = w->w_n[i].w_ref;
	w->w_n[i].w_ref = 0;
	w->w_n[i].w_exists = 0;
	if (rndn(w, 10) < 6)
		fsync_ack(w, 0, 0, sd, d, i, j);
}

/* Write a new file, fsync it, rename it over an existing one. */
static void op_replace(struct wl *w)
{
	int t = pick(w, 0);
	if (t < 0)
		return;
	int d = w->w_n[t].w_parent, tmp = new_node(w, d, 0);
	size_t size = pick_size(w);
	struct ostate absent = { K_ABSENT, 0, 0 };
	struct stat st;

	widen(w, tmp, NULL);
	int err = shoal_create(w->w_fs, &ctx, dir_ino(w, d), w->w_n[tmp].w_name, 0644, O_RDWR, &st);
	if (failed(w, err, "create", tmp)) {
		refresh(w, tmp);
		return;
	}
	w->w_n[tmp].w_exists = 1;
	w->w_n[tmp].w_ref = 1;
	w->w_n[tmp].w_ino = st.st_ino;
	pattern(w->w_buf, size, rnd(w));
	ssize_t n = size ? shoal_write(w->w_fs, &ctx, st.st_ino, w->w_buf, size, 0, O_RDWR) : 0;
	if (n != (ssize_t)size)
		failed(w, n < 0 ? (int)n : -EIO, "write", tmp);
	fsync_ack(w, st.st_ino, 0, d, d, tmp, -1);
	failed(w, shoal_release(w->w_fs, st.st_ino, O_RDWR), "release", tmp);
	/* the target holds the old or the new contents, never nothing */
	widen_like(w, t, tmp);
	widen(w, tmp, &absent);
	err = shoal_rename(w->w_fs, &ctx, dir_ino(w, d), w->w_n[tmp].w_name, dir_ino(w, d),
			   w->w_n[t].w_name, 0);
	if (failed(w, err, "rename over", t)) {
		refresh(w, t);
		refresh(w, tmp);
		return;
	}
	drop_ref(w, t); /* the replaced inode */
	w->w_n[t].w_ino = st.st_ino;
	w->w_n[t].w_ref = w->w_n[tmp].w_ref;
	w->w_n[tmp].w_ref = 0;
	w->w_n[tmp].w_exists = 0;
	if (rndn(w, 10) < 7)
		fsync_ack(w, 0, 0, d, d, t, tmp);
}

static void op_unlink(struct wl *w)
{
	int i = pick(w, 0);
	struct ostate absent = { K_ABSENT, 0, 0 };
	if (i < 0)
		return;
	int d = w->w_n[i].w_parent;
	widen(w, i, &absent);
	if (failed(w, shoal_unlink(w->w_fs, &ctx, dir_ino(w, d), w->w_n[i].w_name), "unlink", i)) {
		refresh(w, i);
		return;
	}
	drop_ref(w, i);
	w->w_n[i].w_exists = 0;
	if (rndn(w, 10) < 6)
		fsync_ack(w, 0, 0, d, d, i, -1);
}

static void op_link(struct wl *w)
{
	int i = pick(w, 0);
	struct stat st;
	if (i < 0)
		return;
	int d = pick_dir(w), j = new_node(w, d, 0);
	widen_like(w, j, i);
	int err = shoal_link(w->w_fs, w->w_n[i].w_ino, dir_ino(w, d), w->w_n[j].w_name, &st);
	if (failed(w, err, "link", j)) {
		refresh(w, j);
		return;
	}
	w->w_n[j].w_exists = 1;
	w->w_n[j].w_ref = 1;
	w->w_n[j].w_ino = st.st_ino;
	if (rndn(w, 2))
		fsync_ack(w, 0, 0, d, d, j, -1);
}

static void op_symlink(struct wl *w)
{
	int d = pick_dir(w), j = new_node(w, d, 0);
	char tgt[64];
	struct stat st;
	int len = snprintf(tgt, sizeof(tgt), "target-%llu", (unsigned long long)rndn(w, 1000000));
	struct ostate o = { K_LINK, (uint64_t)len, tc_fnv(TC_FNV0, tgt, (size_t)len) };

	widen(w, j, &o);
	if (failed(w, shoal_symlink(w->w_fs, &ctx, dir_ino(w, d), w->w_n[j].w_name, tgt, &st),
		   "symlink", j)) {
		refresh(w, j);
		return;
	}
	w->w_n[j].w_exists = 1;
	w->w_n[j].w_ref = 1;
	w->w_n[j].w_ino = st.st_ino;
	if (rndn(w, 2))
		fsync_ack(w, 0, 0, d, d, j, -1);
}

static void op_mkdir(struct wl *w)
{
	int ndirs = 0;
	for (int i = 0; i < w->w_nn; i++)
		ndirs += w->w_n[i].w_exists && w->w_n[i].w_isdir;
	if (ndirs >= 10)
		return;
	int d = pick_dir(w), j = new_node(w, d, 1);
	struct ostate o = { K_DIR, 0, 0 };
	struct stat st;
	widen(w, j, &o);
	if (failed(w, shoal_mkdir(w->w_fs, &ctx, dir_ino(w, d), w->w_n[j].w_name, 0755, &st),
		   "mkdir", j)) {
		refresh(w, j);
		return;
	}
	w->w_n[j].w_exists = 1;
	w->w_n[j].w_ref = 1;
	w->w_n[j].w_ino = st.st_ino;
	if (rndn(w, 10) < 6)
		fsync_ack(w, 0, 0, d, d, j, -1);
}

static void op_rmdir(struct wl *w)
{
	int i = pick(w, 1);
	struct ostate absent = { K_ABSENT, 0, 0 };
	if (i < 0)
		return;
	for (int k = 0; k < w->w_nn; k++)
		if (w->w_n[k].w_exists && w->w_n[k].w_parent == i)
			return; /* not empty */
	int d = w->w_n[i].w_parent;
	widen(w, i, &absent);
	if (failed(w, shoal_rmdir(w->w_fs, &ctx, dir_ino(w, d), w->w_n[i].w_name), "rmdir", i)) {
		refresh(w, i);
		return;
	}
	drop_ref(w, i);
	w->w_n[i].w_exists = 0;
	if (rndn(w, 2))
		fsync_ack(w, 0, 0, d, d, i, -1);
}

static void op_sync(struct wl *w)
{
	if (failed(w, shoal_sync(w->w_fs), "sync", -1))
		return;
	for (int i = 0; i < w->w_nn; i++)
		ack(w, i);
}

static void wl_run(struct wl *w, struct fmount *m, int64_t cut_at, int eio, uint64_t seed)
{
	memset(w, 0, offsetof(struct wl, w_n));
	w->w_fs = m->fm_fs;
	w->w_dev = m->fm_dev;
	w->w_cut_at = cut_at;
	w->w_eio = eio;
	w->w_rng = seed * 0x9e3779b97f4a7c15ull + 12345;
	w->w_w0 = dev_fault_writes(m->fm_dev);
	for (int step = 0; step < WL_STEPS; step++) {
		uint64_t r = rndn(w, 100);
		if (r < 30)
			op_create(w);
		else if (r < 38)
			op_modify(w, 0);
		else if (r < 46)
			op_modify(w, 1);
		else if (r < 51)
			op_modify(w, 2);
		else if (r < 59)
			op_rename(w);
		else if (r < 65)
			op_replace(w);
		else if (r < 73)
			op_unlink(w);
		else if (r < 77)
			op_link(w);
		else if (r < 81)
			op_symlink(w);
		else if (r < 89)
			op_mkdir(w);
		else if (r < 92)
			op_rmdir(w);
		else if (r < 96)
			op_sync(w);
		else {
			int i = pick(w, 0);
			if (i >= 0)
				failed(w, shoal_fsync(w->w_fs, w->w_n[i].w_ino, 1), "fdatasync", i);
		}
	}
	alive(w);
}

/* After recovery: every path is in a state its oracle allows. */
static void wl_verify(struct wl *w, struct shoal_fs *fs, const char *what)
{
	char path[256], got[96], want[96];
	for (int i = 0; i < w->w_nn; i++) {
		struct alts *a = &w->w_n[i].w_alts;
		if (a->a_n < 0)
			continue;
		path_of(w, i, path, sizeof(path));
		struct ostate o = observe(fs, path);
		int ok = 0;
		for (int k = 0; k < a->a_n; k++)
			ok |= ost_eq(&a->a_o[k], &o);
		if (!ok) {
			ost_str(&o, got, sizeof(got));
			ost_str(&a->a_o[0], want, sizeof(want));
			fail_msg("%s: %s is %s, the oracle allows %d state(s), first %s", what, path,
				 got, a->a_n, want);
		}
	}
	tc_check_tree(fs, 1);
}

/* One run: workload on a copy of base, cut at write cut_at, recover, verify. */
/*
 * fsck.shoal -n of the image a power cut left (it checks the filesystem as
 * the journal replay will leave it, writing nothing) must find it clean.
 * CTest names the binary in SHOAL_FSCK (tests/CMakeLists.txt).
 */
static void fsck_clean(const char *img, const char *what)
{
	const char *fsck = getenv("SHOAL_FSCK");
	char cmd[512];
	int rc;

	if (!fsck) {
		static int told;
		if (!told++)
			fprintf(stderr, "  (SHOAL_FSCK not set: fsck.shoal not run after the cuts)\n");
		return;
	}
	snprintf(cmd, sizeof(cmd), "'%s' -n '%s' >/dev/null 2>&1", fsck, img);
	rc = system(cmd);
	if (rc != 0) {
		snprintf(cmd, sizeof(cmd), "'%s' -n '%s' >&2", fsck, img);
		if (system(cmd)) {
		}
		fail_msg("%s: fsck.shoal -n exits %d", what, WIFEXITED(rc) ? WEXITSTATUS(rc) : -1);
	}
}

static uint64_t crash_run(const char *base, const char *img, struct wl *w, int64_t cut_at,
			  unsigned seed, const char *what)
{
	struct fmount m;
	struct dev_fault_cfg cfg = no_faults;

	copy_image(base, img);
	mount_fault(img, &m, NULL);
	cfg.fc_cut_at_write = cut_at;
	dev_fault_set(m.fm_dev, &cfg);
	wl_run(w, &m, cut_at, 0, 1);
	uint64_t writes = dev_fault_writes(m.fm_dev) - w->w_w0;
	crash(&m, seed);
	fsck_clean(img, what);
	struct shoal_fs *fs = mount_plain(img, SHOAL_NOATIME);
	wl_verify(w, fs, what);
	assert_int_equal(shoal_unmount(fs), 0);
	return writes;
}

/* (c) Crash at more than 200 points across the workload. */
static void test_crash_points(void **state)
{
	char *base = base_image(), *img = tu_tmpimage(IMG_SIZE);
	struct wl *w = malloc(sizeof(*w));
	char what[96];
	const int npoints = 220;

	assert_non_null(w);
	/* the whole workload once, with a power cut at its very end */
	uint64_t total = crash_run(base, img, w, -1, 0, "no cut");
	assert_true(total >= (uint64_t)npoints);
	if (verbose)
		fprintf(stderr, "workload: %llu writes, %llu acknowledgements\n",
			(unsigned long long)total, (unsigned long long)w->w_acks);
	for (int p = 0; p < npoints; p++) {
		int64_t n = (int64_t)((uint64_t)p * total / (uint64_t)npoints);
		unsigned seed = p % 2 ? 0x5eed0000u + (unsigned)p : 0;
		snprintf(what, sizeof(what), "cut at write %lld/%llu (seed %u)", (long long)n,
			 (unsigned long long)total, seed);
		uint64_t writes = crash_run(base, img, w, n, seed, what);
		if (writes != total)
			fail_msg("%s: the workload is not deterministic: %llu writes", what,
				 (unsigned long long)writes);
		if (verbose && p % 20 == 0)
			fprintf(stderr, "%s: %llu acks before the cut\n", what,
				(unsigned long long)w->w_acks);
	}
	free(w);
	tu_rmimage(img);
	tu_rmimage(base);
}

/*
 * (e) Fast commit (R2, journal.c (6)): an fsync'ed 1 KiB overwrite of an
 * allocated block costs one flush, one fast-commit block and no commit;
 * the fsync after the fdatasync does nothing; a chmod rides the same path;
 * an allocating write falls back to a full commit.  After a power cut that
 * loses every unflushed write, the remount (replaying the fast-commit
 * blocks) shows the data, the size, the mode and the mtime as fsync'ed,
 * and the tree is consistent.
 */
static void test_fast_commit(void **state)
{
	char *base = base_image(), *img = tu_tmpimage(IMG_SIZE);
	struct shoal_counters c0, c1;
	struct fmount m;
	struct stat st, want;
	static uint8_t data[65536], buf[65536];
	uint64_t ino, rng = 77;

	copy_image(base, img);
	mount_fault(img, &m, &no_faults);
	assert_int_equal(shoal_create(m.fm_fs, &ctx, shoal_root(m.fm_fs), "fc", 0644, O_RDWR, &st),
			 0);
	ino = st.st_ino;
	pattern(data, sizeof(data), 5);
	assert_int_equal(shoal_write(m.fm_fs, &ctx, ino, data, sizeof(data), 0, O_RDWR),
			 (ssize_t)sizeof(data));
	assert_int_equal(shoal_fsync(m.fm_fs, ino, 0), 0);
	for (int i = 0; i < 64; i++) {
		uint64_t off = (rng = rng * 6364136223846793005ull + 1) >> 40;
		off = (off % 64) * 1024;
		pattern(data + off, 1024, (uint64_t)i + 100);
		shoal_counters(m.fm_fs, &c0);
		assert_int_equal(shoal_write(m.fm_fs, &ctx, ino, data + off, 1024, off, O_RDWR), 1024);
		assert_int_equal(shoal_fsync(m.fm_fs, ino, 1), 0);
		assert_int_equal(shoal_fsync(m.fm_fs, ino, 0), 0);
		shoal_counters(m.fm_fs, &c1);
		assert_int_equal(c1.sc_dev_flushes - c0.sc_dev_flushes, 1);
		assert_int_equal(c1.sc_fast_commits - c0.sc_fast_commits, 1);
		assert_int_equal(c1.sc_commits - c0.sc_commits, 0);
		assert_int_equal(c1.sc_fsync_noop - c0.sc_fsync_noop, 1);
	}
	/* a mode change is a dinode-only transaction too */
	shoal_counters(m.fm_fs, &c0);
	memset(&want, 0, sizeof(want));
	want.st_mode = 0600;
	assert_int_equal(shoal_setattr(m.fm_fs, &ctx, ino, &want, SHOAL_SET_MODE, &st), 0);
	assert_int_equal(shoal_fsync(m.fm_fs, ino, 0), 0);
	shoal_counters(m.fm_fs, &c1);
	assert_int_equal(c1.sc_fast_commits - c0.sc_fast_commits, 1);
	assert_int_equal(c1.sc_commits - c0.sc_commits, 0);
	/* growing into new blocks: ordered data, a full commit */
	shoal_counters(m.fm_fs, &c0);
	assert_int_equal(shoal_write(m.fm_fs, &ctx, ino, data, 4096, sizeof(data), O_RDWR), 4096);
	assert_int_equal(shoal_fsync(m.fm_fs, ino, 0), 0);
	shoal_counters(m.fm_fs, &c1);
	assert_int_equal(c1.sc_fast_commits - c0.sc_fast_commits, 0);
	assert_int_equal(c1.sc_commits - c0.sc_commits, 1);
	/* and once more a fast commit on top of it */
	pattern(data + 3072, 1024, 999);
	assert_int_equal(shoal_write(m.fm_fs, &ctx, ino, data + 3072, 1024, 3072, O_RDWR), 1024);
	assert_int_equal(shoal_fsync(m.fm_fs, ino, 1), 0);
	assert_int_equal(shoal_getattr(m.fm_fs, ino, &want), 0);
	shoal_counters(m.fm_fs, &c1);
	assert_true(c1.sc_fast_commits - c0.sc_fast_commits == 1);
	crash(&m, 0); /* nothing unflushed survives */

	struct shoal_fs *fs = mount_plain(img, SHOAL_NOATIME);
	ino = lookup_in(fs, shoal_root(fs), "fc");
	assert_int_equal(shoal_getattr(fs, ino, &st), 0);
	assert_int_equal(st.st_size, sizeof(data) + 4096);
	assert_int_equal(st.st_mode & 07777, 0600);
	assert_int_equal(st.st_mtim.tv_sec, want.st_mtim.tv_sec);
	assert_int_equal(st.st_mtim.tv_nsec, want.st_mtim.tv_nsec);
	assert_int_equal(shoal_read(fs, ino, buf, sizeof(buf), 0, O_RDONLY), (ssize_t)sizeof(buf));
	assert_memory_equal(buf, data, sizeof(data));
	tc_check_tree(fs, 1);
	assert_int_equal(shoal_unmount(fs), 0);
	tu_rmimage(img);
	tu_rmimage(base);
}

/* A fresh image on the fault device, with an empty file NAME: its inode. */
static uint64_t dx_setup(char **base, char **img, struct fmount *m, const char *name)
{
	struct stat st;

	*base = base_image();
	*img = tu_tmpimage(IMG_SIZE);
	copy_image(*base, *img);
	mount_fault(*img, m, &no_faults);
	assert_int_equal(shoal_create(m->fm_fs, &ctx, shoal_root(m->fm_fs), name, 0644, O_RDWR, &st),
			 0);
	return st.st_ino;
}

/* After the power cut: fsck clean, and NAME holds want, len bytes, exactly. */
static void dx_check_after_cut(char *base, char *img, const char *name, const uint8_t *want,
			       size_t len, const char *what)
{
	static uint8_t buf[65536];
	struct stat st;

	assert_true(len <= sizeof(buf));
	fsck_clean(img, what);
	struct shoal_fs *fs = mount_plain(img, SHOAL_NOATIME);
	uint64_t ino = lookup_in(fs, shoal_root(fs), name);
	assert_int_equal(shoal_getattr(fs, ino, &st), 0);
	assert_int_equal(st.st_size, len);
	assert_int_equal(shoal_read(fs, ino, buf, len, 0, O_RDONLY), (ssize_t)len);
	for (size_t i = 0; i < len; i += 512)
		if (memcmp(buf + i, want + i, 512))
			fail_msg("%s: bytes %zu..%zu differ from what fsync acknowledged (or from "
				 "zeros where nothing was)", what, i, i + 511);
	tc_check_tree(fs, 1);
	assert_int_equal(shoal_unmount(fs), 0);
	tu_rmimage(img);
	tu_rmimage(base);
}

/*
 * (f) The dirty-block index (core/dindex.c): an fsync'ed small overwrite
 * costs one device write (the fast-commit block, carrying the data) and
 * one flush; reads see the data before it is home; the next full commit
 * writes each dirty block home once (wb_visited == wb_written == blocks);
 * a fast commit visits only the blocks changed since the previous one;
 * a block written in place after that commit keeps its newer bytes after a
 * power cut (the commit supersedes the fast commit that carried the old
 * ones: FORMAT.md 11.3); a truncate drops the index's blocks past the end.
 */
static void test_dirty_index(void **state)
{
	char *base, *img;
	struct shoal_counters c0, c1;
	struct fmount m;
	static uint8_t data[65536], buf[65536];
	uint64_t ino;

	(void)state;
	ino = dx_setup(&base, &img, &m, "dx");
	struct shoal_fs *fs = m.fm_fs;
	pattern(data, sizeof(data), 11);
	assert_int_equal(shoal_write(fs, &ctx, ino, data, sizeof(data), 0, O_RDWR),
			 (ssize_t)sizeof(data));
	assert_int_equal(shoal_fsync(fs, ino, 0), 0);

	/* small overwrites of blocks 0, 1 and 2, several into block 1 */
	static const uint32_t offs[] = { 512, 4096 + 100, 8192, 4096 + 3000, 4096 };
	for (unsigned i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
		pattern(data + offs[i], 700, 200 + i);
		shoal_counters(fs, &c0);
		assert_int_equal(shoal_write(fs, &ctx, ino, data + offs[i], 700, offs[i], O_RDWR), 700);
		shoal_counters(fs, &c1);
		assert_int_equal(c1.sc_dev_writes - c0.sc_dev_writes, 0); /* not in place */
		assert_int_equal(shoal_read(fs, ino, buf, sizeof(buf), 0, O_RDONLY),
				 (ssize_t)sizeof(buf));
		assert_memory_equal(buf, data, sizeof(buf)); /* read from the index */
		assert_int_equal(shoal_fsync(fs, ino, 1), 0);
		shoal_counters(fs, &c1);
		assert_int_equal(c1.sc_dev_writes - c0.sc_dev_writes, 1);
		assert_int_equal(c1.sc_dev_flushes - c0.sc_dev_flushes, 1);
		assert_int_equal(c1.sc_fast_commits - c0.sc_fast_commits, 1);
		assert_int_equal(c1.sc_commits - c0.sc_commits, 0);
		/* the fast commit visits the one block changed since the last,
		 * not the up to three the index holds (R3) */
		assert_int_equal(c1.sc_fc_visited - c0.sc_fc_visited, 1);
	}
	/* a new file's fsync is a full commit: the three blocks go home */
	shoal_counters(fs, &c0);
	mk(fs, shoal_root(fs), "other", 100, 1);
	assert_int_equal(shoal_fsync(fs, shoal_root(fs), 0), 0);
	shoal_counters(fs, &c1);
	assert_int_equal(c1.sc_commits - c0.sc_commits, 1);
	assert_int_equal(c1.sc_wb_visited - c0.sc_wb_visited, 3);
	assert_int_equal(c1.sc_wb_written - c0.sc_wb_written, 3);

	/* block 1 written in place (a whole block: not indexed), fdatasync'ed:
	 * the fast commit that carried its old bytes must not come back */
	pattern(data + 4096, 4096, 300);
	shoal_counters(fs, &c0);
	assert_int_equal(shoal_write(fs, &ctx, ino, data + 4096, 4096, 4096, O_RDWR), 4096);
	shoal_counters(fs, &c1);
	assert_int_equal(c1.sc_dev_writes - c0.sc_dev_writes, 1);
	assert_int_equal(shoal_fsync(fs, ino, 1), 0);

	/* block 10 indexed, then the file cut to 8 KiB and grown again: its
	 * entry goes with the block, and the range reads as zeros */
	pattern(data + 40960, 100, 400);
	assert_int_equal(shoal_write(fs, &ctx, ino, data + 40960, 100, 40960, O_RDWR), 100);
	struct stat a = { .st_size = 8192 }, out;
	assert_int_equal(shoal_setattr(fs, &ctx, ino, &a, SHOAL_SET_SIZE, &out), 0);
	a.st_size = sizeof(data);
	assert_int_equal(shoal_setattr(fs, &ctx, ino, &a, SHOAL_SET_SIZE, &out), 0);
	memset(data + 8192, 0, sizeof(data) - 8192);
	/* and a last small write, fsync'ed by a fast commit only */
	pattern(data + 100, 50, 500);
	assert_int_equal(shoal_write(fs, &ctx, ino, data + 100, 50, 100, O_RDWR), 50);
	shoal_counters(fs, &c0);
	assert_int_equal(shoal_fsync(fs, ino, 0), 0);
	shoal_counters(fs, &c1);
	assert_int_equal(shoal_read(fs, ino, buf, sizeof(buf), 0, O_RDONLY), (ssize_t)sizeof(buf));
	assert_memory_equal(buf, data, sizeof(buf));
	crash(&m, 0); /* every unflushed write is lost */
	dx_check_after_cut(base, img, "dx", data, sizeof(data), "dirty index: after the power cut");
}

/*
 * (f2) Writes of at most one block into blocks they allocate (file.c (5))
 * wait in the dirty-block index: no device write when they arrive, reads
 * see them (zeros around the bytes of a part-block write), the fsync's
 * full commit writes each home once, and a power cut before any commit
 * loses the blocks and their allocation together: holes again, fsck clean.
 */
static void test_dirty_index_new_blocks(void **state)
{
	char *base, *img;
	struct shoal_counters c0, c1;
	struct fmount m;
	struct stat out, a = { .st_size = 65536 };
	static uint8_t data[65536], buf[65536];
	uint64_t ino;

	(void)state;
	ino = dx_setup(&base, &img, &m, "nb");
	struct shoal_fs *fs = m.fm_fs;
	assert_int_equal(shoal_setattr(fs, &ctx, ino, &a, SHOAL_SET_SIZE, &out), 0); /* sparse */
	assert_int_equal(shoal_fsync(fs, ino, 0), 0);
	memset(data, 0, sizeof(data));

	/* pages 7..0, as the kernel launders a mapping, then 100 bytes into
	 * the middle of block 9 */
	for (int i = 7; i >= 0; i--) {
		pattern(data + i * 4096, 4096, 600 + i);
		shoal_counters(fs, &c0);
		assert_int_equal(shoal_write(fs, &ctx, ino, data + i * 4096, 4096, i * 4096, O_RDWR),
				 4096);
		shoal_counters(fs, &c1);
		assert_int_equal(c1.sc_dev_writes - c0.sc_dev_writes, 0);
	}
	pattern(data + 9 * 4096 + 1000, 100, 700);
	shoal_counters(fs, &c0);
	assert_int_equal(shoal_write(fs, &ctx, ino, data + 9 * 4096 + 1000, 100, 9 * 4096 + 1000,
				     O_RDWR), 100);
	shoal_counters(fs, &c1);
	assert_int_equal(c1.sc_dev_writes - c0.sc_dev_writes, 0);
	assert_int_equal(shoal_read(fs, ino, buf, sizeof(buf), 0, O_RDONLY), (ssize_t)sizeof(buf));
	assert_memory_equal(buf, data, sizeof(buf));

	/* fsync: one full commit writes the nine blocks home */
	shoal_counters(fs, &c0);
	assert_int_equal(shoal_fsync(fs, ino, 1), 0);
	shoal_counters(fs, &c1);
	assert_int_equal(c1.sc_commits - c0.sc_commits, 1);
	assert_int_equal(c1.sc_wb_written - c0.sc_wb_written, 9);
	assert_int_equal(c1.sc_wb_visited - c0.sc_wb_visited, 9);

	/* two more pages, never committed, then the power cut */
	static uint8_t lost[8192];
	pattern(lost, sizeof(lost), 800);
	assert_int_equal(shoal_write(fs, &ctx, ino, lost, 4096, 12 * 4096, O_RDWR), 4096);
	assert_int_equal(shoal_write(fs, &ctx, ino, lost + 4096, 4096, 13 * 4096, O_RDWR), 4096);
	crash(&m, 0);
	dx_check_after_cut(base, img, "nb", data, sizeof(data),
			   "new blocks in the index: after the power cut");
}

/* Raw comparison of two images outside the journals. */
static void expect_same_blocks(const char *a, const char *b, const char *what)
{
	struct shoal_sb sb;
	int fa = open(a, O_RDONLY), fb = open(b, O_RDONLY);
	static uint8_t x[4096], y[4096];

	assert_true(fa >= 0 && fb >= 0);
	assert_int_equal(pread(fa, &sb, sizeof(sb), 0), (ssize_t)sizeof(sb));
	for (uint64_t blk = 0; blk < IMG_SIZE / 4096; blk++) {
		if (blk >= sb.sb_jfirst && blk < sb.sb_rgfirst)
			continue;
		assert_int_equal(pread(fa, x, 4096, (off_t)blk * 4096), 4096);
		assert_int_equal(pread(fb, y, 4096, (off_t)blk * 4096), 4096);
		if (memcmp(x, y, 4096))
			fail_msg("%s: block %llu differs", what, (unsigned long long)blk);
	}
	close(fa);
	close(fb);
}

/* (d) Replaying twice, or after a recovery that died, gives the same tree. */
static void test_replay_idempotent(void **state)
{
	char *base = base_image(), *img = tu_tmpimage(IMG_SIZE);
	char *crashed = tu_tmpimage(IMG_SIZE), *once = tu_tmpimage(IMG_SIZE);
	struct wl *w = malloc(sizeof(*w));
	struct fmount m;
	struct tc_snap s1, s2, s3;
	char what[96];

	assert_non_null(w);
	uint64_t total = crash_run(base, img, w, -1, 0, "no cut");
	for (int c = 0; c < 3; c++) {
		/* a crash with several transactions in the log */
		int64_t cut = (int64_t)(total * (uint64_t)(2 * c + 3) / 10);
		copy_image(base, img);
		mount_fault(img, &m, NULL);
		struct dev_fault_cfg cfg = no_faults;
		cfg.fc_cut_at_write = cut;
		dev_fault_set(m.fm_dev, &cfg);
		wl_run(w, &m, cut, 0, 1);
		crash(&m, c == 1 ? 777u : 0);
		copy_image(img, crashed);

		/* recover, then mount twice more: nothing changes */
		struct shoal_fs *fs = mount_plain(img, SHOAL_NOATIME);
		wl_verify(w, fs, "first recovery");
		assert_int_equal(shoal_unmount(fs), 0);
		copy_image(img, once);
		fs = mount_plain(img, SHOAL_NOATIME);
		tc_snapshot(fs, &s1);
		assert_int_equal(shoal_unmount(fs), 0);
		fs = mount_plain(img, SHOAL_NOATIME);
		tc_snapshot(fs, &s2);
		assert_int_equal(shoal_unmount(fs), 0);
		tc_snap_expect_equal(&s1, &s2, "second recovery");
		expect_same_blocks(once, img, "mount and unmount of a recovered filesystem");

		/* a recovery (mount) that dies at any of its writes, then a full one */
		copy_image(crashed, img);
		mount_fault(img, &m, NULL);
		uint64_t rw = dev_fault_writes(m.fm_dev);
		assert_int_equal(shoal_unmount(m.fm_fs), 0);
		dev_close(m.fm_lower);
		assert_true(rw > 0);
		uint64_t step = rw / 16 ? rw / 16 : 1;
		for (uint64_t k = 0; k < rw; k += step) {
			unsigned seed = (k / step) % 2 ? 4242u + (unsigned)k : 0;
			copy_image(crashed, img);
			cfg = no_faults;
			cfg.fc_cut_at_write = (int64_t)k;
			mount_fault(img, &m, &cfg);
			crash(&m, seed);
			fs = mount_plain(img, SHOAL_NOATIME);
			tc_snapshot(fs, &s3);
			snprintf(what, sizeof(what), "recovery that died at write %llu/%llu (seed %u)",
				 (unsigned long long)k, (unsigned long long)rw, seed);
			tc_snap_expect_equal(&s1, &s3, what);
			tc_check_tree(fs, 1);
			assert_int_equal(shoal_unmount(fs), 0);
			tc_snap_free(&s3);
		}
		tc_snap_free(&s1);
		tc_snap_free(&s2);
	}
	free(w);
	tu_rmimage(once);
	tu_rmimage(crashed);
	tu_rmimage(img);
	tu_rmimage(base);
}

static void expect_file(struct shoal_fs *fs, const char *path, size_t size, uint64_t seed)
{
	uint8_t *buf = malloc(size + 1);
	struct ostate o = observe(fs, path);
	assert_non_null(buf);
	pattern(buf, size, seed);
	if (o.o_kind != K_FILE || o.o_size != size || o.o_hash != tc_fnv(TC_FNV0, buf, size))
		fail_msg("%s lost its acknowledged contents (kind %d size %llu)", path, o.o_kind,
			 (unsigned long long)o.o_size);
	free(buf);
}

/*
 * Every kind of data change, each followed by fdatasync on an open file and
 * then a power cut: what fdatasync acknowledged is there after replay.  An
 * in-place overwrite of an inline (small) file used to be left out of what
 * fdatasync commits (issue 21, defect 1).
 */
enum { FD_INLINE, FD_BLOCK, FD_HOLE, FD_APPEND, FD_FALLOC, FD_SHRINK, FD_GROW, FD_KINDS };
static const char *const fd_kind_name[FD_KINDS] = {
	"overwrite inside an inline file", "overwrite inside a block", "write into a hole",
	"append", "fallocate past the end", "truncate down", "truncate up",
};

static void test_fdatasync_every_change(void **state)
{
	char *base = base_image(), *img = tu_tmpimage(IMG_SIZE);
	enum { FSZ = 256 * 1024 };
	uint8_t *want = calloc(1, FSZ), chg[4096];
	int bad = 0;

	assert_non_null(want);
	for (int kind = 0; kind < FD_KINDS; kind++) {
		struct fmount m;
		struct stat st;
		size_t size = kind == FD_INLINE ? 100 : kind == FD_HOLE ? FSZ : 20000;
		uint64_t seed = 40 + (uint64_t)kind;

		copy_image(base, img);
		mount_fault(img, &m, NULL);
		struct shoal_fs *fs = m.fm_fs;
		uint64_t R = shoal_root(fs);
		memset(want, 0, FSZ);
		pattern(want, size, seed);
		if (kind == FD_HOLE) {
			/* a sparse file: data at the start and the end only */
			assert_int_equal(shoal_create(fs, &ctx, R, "f", 0644, O_RDWR, &st), 0);
			memset(want + 8192, 0, FSZ - 16384);
			assert_int_equal(shoal_write(fs, &ctx, st.st_ino, want, 8192, 0, O_RDWR), 8192);
			assert_int_equal(shoal_write(fs, &ctx, st.st_ino, want + FSZ - 8192, 8192,
						     FSZ - 8192, O_RDWR),
					 8192);
			assert_int_equal(shoal_release(fs, st.st_ino, O_RDWR), 0);
			shoal_forget(fs, st.st_ino, 1);
		} else {
			mk(fs, R, "f", size, seed);
		}
		assert_int_equal(shoal_sync(fs), 0);

		assert_int_equal(tc_lookup_path(fs, "f", &st), 0);
		uint64_t f = st.st_ino;
		assert_int_equal(shoal_open(fs, f, O_RDWR), 0);
		pattern(chg, sizeof(chg), 99);
		switch (kind) {
		case FD_INLINE:
			assert_int_equal(shoal_write(fs, &ctx, f, chg, 10, 20, O_RDWR), 10);
			memcpy(want + 20, chg, 10);
			break;
		case FD_BLOCK:
			assert_int_equal(shoal_write(fs, &ctx, f, chg, 300, 5000, O_RDWR), 300);
			memcpy(want + 5000, chg, 300);
			break;
		case FD_HOLE:
			assert_int_equal(shoal_write(fs, &ctx, f, chg, 4096, 65536, O_RDWR), 4096);
			memcpy(want + 65536, chg, 4096);
			break;
		case FD_APPEND:
			assert_int_equal(shoal_write(fs, &ctx, f, chg, 1000, size, O_RDWR), 1000);
			memcpy(want + size, chg, 1000);
			size += 1000;
			break;
		case FD_FALLOC:
			assert_int_equal(shoal_fallocate(fs, f, 0, size, 30000), 0);
			size += 30000; /* the new bytes read as zeros */
			break;
		case FD_SHRINK:
		case FD_GROW: {
			struct stat a = { .st_size = kind == FD_SHRINK ? 7000 : 50000 }, out;
			assert_int_equal(shoal_setattr(fs, &ctx, f, &a, SHOAL_SET_SIZE, &out), 0);
			if (kind == FD_SHRINK)
				memset(want + 7000, 0, size - 7000);
			size = (size_t)a.st_size;
			break;
		}
		}
		assert_int_equal(shoal_fsync(fs, f, 1), 0);
		crash(&m, 0);

		fs = mount_plain(img, SHOAL_NOATIME);
		struct ostate o = observe(fs, "f");
		if (o.o_kind != K_FILE || o.o_size != size ||
		    o.o_hash != tc_fnv(TC_FNV0, want, size)) {
			print_message("fdatasync after %s: lost after a power cut (size %llu, want %zu)\n",
				      fd_kind_name[kind], (unsigned long long)o.o_size, size);
			bad++;
		}
		tc_check_tree(fs, 1);
		assert_int_equal(shoal_unmount(fs), 0);
	}
	free(want);
	tu_rmimage(img);
	tu_rmimage(base);
	assert_int_equal(bad, 0);
}

/*
 * fsync of an inode that left the inode cache (the kernel forgot it, as it
 * does under memory pressure) and was looked up and opened again must still
 * commit the changes made before: they are in the running transaction.
 */
static void test_fsync_after_evict(void **state)
{
	char *base = base_image(), *img = tu_tmpimage(IMG_SIZE);
	struct fmount m;
	struct stat st;
	int bad = 0;

	for (int datasync = 0; datasync < 2; datasync++) {
		copy_image(base, img);
		mount_fault(img, &m, NULL);
		struct shoal_fs *fs = m.fm_fs;
		uint64_t R = shoal_root(fs);
		uint64_t d = mkd(fs, R, "d"), d2 = mkd(fs, R, "d2");
		assert_int_equal(shoal_sync(fs), 0);
		/* written and closed; the kernel forgets them */
		uint64_t f = mk(fs, d, "f", 10000, 5);
		mk(fs, d2, "g", 100, 6);
		/* later: open, fsync, close - as fsync(1) or a backup tool would */
		assert_int_equal(shoal_lookup(fs, d, "f", &st), 0);
		assert_int_equal(shoal_open(fs, f, O_RDONLY), 0);
		assert_int_equal(shoal_fsync(fs, f, datasync), 0);
		assert_int_equal(shoal_release(fs, f, O_RDONLY), 0);
		assert_int_equal(shoal_open(fs, d, O_RDONLY), 0);
		assert_int_equal(shoal_fsync(fs, d, 0), 0);
		assert_int_equal(shoal_release(fs, d, O_RDONLY), 0);
		assert_int_equal(shoal_open(fs, d2, O_RDONLY), 0);
		assert_int_equal(shoal_fsync(fs, d2, 0), 0);
		assert_int_equal(shoal_release(fs, d2, O_RDONLY), 0);
		crash(&m, 0);
		fs = mount_plain(img, SHOAL_NOATIME);
		struct ostate o = observe(fs, "d/f");
		if (o.o_kind != K_FILE || o.o_size != 10000) {
			print_message("%s of a re-opened file: after a power cut it is %s (size %llu)\n",
				      datasync ? "fdatasync" : "fsync",
				      o.o_kind == K_ABSENT ? "absent" : "a file",
				      (unsigned long long)o.o_size);
			bad++;
		} else {
			expect_file(fs, "d/f", 10000, 5);
		}
		if (observe(fs, "d2/g").o_kind != K_FILE) {
			print_message("fsync of a re-opened directory: its new entry is lost\n");
			bad++;
		}
		tc_check_tree(fs, 1);
		assert_int_equal(shoal_unmount(fs), 0);
	}
	tu_rmimage(img);
	tu_rmimage(base);
	if (bad)
		fail_msg("%d acknowledged change(s) lost", bad);
}

/*
 * A journal write (or flush) fails during fsync: fsync reports it, the mount
 * turns read-only, later fsyncs and syncs do not claim success for what was
 * never committed, and after a crash everything acknowledged is there.
 */
static void eio_commit_case(int fail_flush, int then_crash)
{
	char *base = base_image(), *img = tu_tmpimage(IMG_SIZE);
	struct fmount m;
	struct dev_fault_cfg cfg = no_faults;
	uint8_t buf[6000];

	copy_image(base, img);
	mount_fault(img, &m, NULL);
	struct shoal_fs *fs = m.fm_fs;
	uint64_t R = shoal_root(fs);
	uint64_t a = mk(fs, R, "acked", 10000, 1);
	assert_int_equal(shoal_sync(fs), 0);
	/* a file created, written and fsynced while open, as through FUSE */
	struct stat st;
	assert_int_equal(shoal_create(fs, &ctx, R, "pending", 0644, O_RDWR, &st), 0);
	uint64_t p = st.st_ino;
	pattern(buf, sizeof(buf), 2);
	assert_int_equal(shoal_write(fs, &ctx, p, buf, sizeof(buf), 0, O_RDWR), (ssize_t)sizeof(buf));
	if (fail_flush)
		cfg.fc_fail_flush_at = 0;
	else
		cfg.fc_fail_write_at = 0;
	dev_fault_set(m.fm_dev, &cfg);
	int err = shoal_fsync(fs, p, 0);
	assert_true(err < 0);
	assert_true(shoal_is_readonly(fs));
	assert_non_null(shoal_error(fs));
	/* the change is not durable: nothing may say it is (checked to the end) */
	int lies = 0;
	if (shoal_fsync(fs, p, 0) == 0) {
		print_message("fsync after a failed commit returned 0 for an uncommitted inode\n");
		lies++;
	}
	if (shoal_fsync(fs, p, 1) == 0) {
		print_message("fdatasync after a failed commit returned 0 for an uncommitted inode\n");
		lies++;
	}
	if (shoal_sync(fs) == 0) {
		print_message("sync after a failed commit returned 0 with changes uncommitted\n");
		lies++;
	}
	/* reading works, changing does not */
	assert_int_equal(shoal_read(fs, a, buf, sizeof(buf), 0, O_RDONLY), (ssize_t)sizeof(buf));
	assert_int_equal(shoal_create(fs, &ctx, R, "new", 0644, O_RDWR, &st), -EROFS);
	assert_int_equal(shoal_write(fs, &ctx, a, buf, 10, 0, O_RDWR), -EROFS);
	assert_int_equal(shoal_unlink(fs, &ctx, R, "acked"), -EROFS);
	assert_int_equal(shoal_release(fs, p, O_RDWR), 0);
	if (then_crash) {
		crash(&m, 0);
	} else {
		shoal_unmount(fs); /* may report the error again */
		dev_close(m.fm_lower);
	}
	fs = mount_plain(img, SHOAL_NOATIME);
	expect_file(fs, "acked", 10000, 1);
	struct ostate o = observe(fs, "pending");
	assert_true(o.o_kind == K_ABSENT || o.o_kind == K_FILE);
	tc_check_tree(fs, 1);
	assert_int_equal(shoal_unmount(fs), 0);
	tu_rmimage(img);
	tu_rmimage(base);
	if (lies)
		fail_msg("%d call(s) claimed durability after the journal failed", lies);
}

static void test_eio_journal_write(void **state)
{
	eio_commit_case(0, 1);
	eio_commit_case(0, 0);
}

static void test_eio_journal_flush(void **state)
{
	eio_commit_case(1, 1);
	eio_commit_case(1, 0);
}

/*
 * A log block that cannot be read during replay is no end of the log: the
 * mount fails with the read's error and leaves the journal as it was, and
 * once the device reads again every committed change is replayed.  (Taking
 * the error for the end of the log mounted without them, and the next
 * commits wrote over them.)
 */
static void replay_read_error_case(int partial)
{
	char *base = base_image(), *img = tu_tmpimage(IMG_SIZE);
	struct shoal_mount_opts mo = { .mo_commit_secs = 3600, .mo_atime = SHOAL_NOATIME };
	struct dev_fault_cfg cfg = no_faults;
	struct shoal_sb sb;
	struct shoal_jhead jh;
	struct shoal_mh mh;
	uint8_t h0[4096], h1[4096];
	struct fmount m;
	struct shoal_fs *fs;
	uint64_t jaddr, bs, bad;

	copy_image(base, img);
	mount_fault(img, &m, NULL);
	fs = m.fm_fs;
	mk(fs, shoal_root(fs), "early", 10000, 1);
	assert_int_equal(shoal_sync(fs), 0);
	mk(fs, shoal_root(fs), "late", 20000, 2);
	assert_int_equal(shoal_sync(fs), 0);
	crash(&m, 0); /* both in the journal only */

	/* journal 0's log is unreadable from its first block (partial: from
	 * the second transaction's descriptor, so the first one replays); its
	 * head is readable */
	assert_int_equal(dev_open(img, 0, &m.fm_lower), 0);
	assert_int_equal(dev_read(m.fm_lower, &sb, sizeof(sb), 0), 0);
	bs = sb.sb_bsize;
	assert_true(bs <= sizeof(h0));
	jaddr = sb.sb_jfirst;
	assert_int_equal(dev_read(m.fm_lower, h0, bs, jaddr * bs), 0);
	memcpy(&jh, h0, sizeof(jh));
	assert_true(jh.jh_tail >= 1 && jh.jh_tail < sb.sb_jblocks);
	bad = jaddr + 1;
	if (partial) {
		for (bad = jaddr + jh.jh_tail; bad < jaddr + sb.sb_jblocks; bad++) {
			assert_int_equal(dev_read(m.fm_lower, &mh, sizeof(mh), bad * bs), 0);
			if (mh.mh_type == SHOAL_MT_LDESC && mh.mh_blkno == bad &&
			    mh.mh_seq == jh.jh_tail_seq + 1)
				break;
		}
		assert_true(bad < jaddr + sb.sb_jblocks); /* the second commit is there */
		assert_true(bad > jaddr + jh.jh_tail);
	}
	assert_int_equal(dev_fault_wrap(m.fm_lower, &m.fm_dev), 0);
	cfg.fc_bad_read_lo = bad * bs;
	cfg.fc_bad_read_hi = (jaddr + sb.sb_jblocks) * bs;
	dev_fault_set(m.fm_dev, &cfg);
	assert_int_equal(shoal_mount(m.fm_dev, &mo, &fs), -EIO);
	assert_non_null(strstr(shoal_mount_error(), "journal 0 cannot be replayed"));
	dev_close(m.fm_dev); /* a failed mount leaves the device to the caller */
	assert_int_equal(dev_read(m.fm_lower, h1, bs, jaddr * bs), 0);
	assert_memory_equal(h0, h1, bs); /* the head still says: replay from here */
	dev_close(m.fm_lower);

	fs = mount_plain(img, SHOAL_NOATIME);
	expect_file(fs, "early", 10000, 1);
	expect_file(fs, "late", 20000, 2);
	tc_check_tree(fs, 1);
	assert_int_equal(shoal_unmount(fs), 0);
	tu_rmimage(img);
	tu_rmimage(base);
}

static void test_replay_read_error(void **state)
{
	(void)state;
	replay_read_error_case(0);
	replay_read_error_case(1);
}

/* A failed data write fails the write call, and changes neither size nor data. */
static void test_eio_data_write(void **state)
{
	char *base = base_image(), *img = tu_tmpimage(IMG_SIZE);
	struct fmount m;
	struct dev_fault_cfg cfg = no_faults;
	uint8_t buf[8192];
	struct stat st;

	copy_image(base, img);
	mount_fault(img, &m, NULL);
	struct shoal_fs *fs = m.fm_fs;
	uint64_t R = shoal_root(fs);
	uint64_t a = mk(fs, R, "a", 8192, 1);
	assert_int_equal(shoal_sync(fs), 0);

	/* into new blocks past the end */
	cfg.fc_fail_write_at = 0;
	dev_fault_set(m.fm_dev, &cfg);
	pattern(buf, sizeof(buf), 9);
	ssize_t n = shoal_write(fs, &ctx, a, buf, sizeof(buf), 8192, O_RDWR);
	assert_true(n < 0);
	assert_int_equal(shoal_getattr(fs, a, &st), 0);
	assert_int_equal(st.st_size, 8192);
	/* in place */
	dev_fault_set(m.fm_dev, &cfg);
	n = shoal_write(fs, &ctx, a, buf, 4096, 0, O_RDWR);
	assert_true(n < 0);
	if (!shoal_is_readonly(fs)) {
		/* the next writes work and are acknowledged */
		uint64_t b = mk(fs, R, "b", 20000, 3);
		assert_int_equal(shoal_fsync(fs, b, 0), 0);
		assert_int_equal(shoal_fsync(fs, R, 0), 0);
	}
	crash(&m, 0);
	fs = mount_plain(img, SHOAL_NOATIME);
	expect_file(fs, "a", 8192, 1);
	if (observe(fs, "b").o_kind != K_ABSENT)
		expect_file(fs, "b", 20000, 3);
	tc_check_tree(fs, 1);
	assert_int_equal(shoal_unmount(fs), 0);
	tu_rmimage(img);
	tu_rmimage(base);
}

/* Fail each of many writes and flushes of the workload in turn. */
static void test_eio_sweep(void **state)
{
	char *base = base_image(), *img = tu_tmpimage(IMG_SIZE);
	struct wl *w = malloc(sizeof(*w));
	struct fmount m;
	char what[96];

	assert_non_null(w);
	copy_image(base, img);
	mount_fault(img, &m, NULL);
	struct shoal_dev_stats ds0, ds1;
	dev_stats_get(m.fm_dev, &ds0);
	wl_run(w, &m, -1, 0, 2);
	dev_stats_get(m.fm_dev, &ds1);
	uint64_t writes = ds1.ds_writes - ds0.ds_writes, flushes = ds1.ds_flushes - ds0.ds_flushes;
	crash(&m, 0);
	assert_true(writes > 40 && flushes > 20);

	for (int p = 0; p < 60; p++) {
		int isflush = p >= 40;
		int64_t k = isflush ? (int64_t)((uint64_t)(p - 40) * flushes / 20)
				    : (int64_t)((uint64_t)p * writes / 40);
		struct dev_fault_cfg cfg = no_faults;
		if (isflush)
			cfg.fc_fail_flush_at = k;
		else
			cfg.fc_fail_write_at = k;
		snprintf(what, sizeof(what), "%s %lld failed", isflush ? "flush" : "write",
			 (long long)k);
		copy_image(base, img);
		mount_fault(img, &m, NULL);
		dev_fault_set(m.fm_dev, &cfg);
		dev_stats_get(m.fm_dev, &ds0);
		wl_run(w, &m, -1, 1, 2);
		dev_stats_get(m.fm_dev, &ds1);
		uint64_t done = isflush ? ds1.ds_flushes - ds0.ds_flushes : ds1.ds_writes - ds0.ds_writes;
		if (done > (uint64_t)k && w->w_nerr == 0 && !shoal_is_readonly(m.fm_fs))
			fail_msg("%s: no operation reported it and the mount is still writable", what);
		if (p % 2) {
			crash(&m, 0);
		} else {
			shoal_unmount(m.fm_fs);
			dev_close(m.fm_lower);
		}
		struct shoal_fs *fs = mount_plain(img, SHOAL_NOATIME);
		wl_verify(w, fs, what);
		assert_int_equal(shoal_unmount(fs), 0);
	}
	free(w);
	tu_rmimage(img);
	tu_rmimage(base);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fault_device),
		cmocka_unit_test(test_fault_die),
		cmocka_unit_test(test_sync_then_power_cut),
		cmocka_unit_test(test_unsynced_changes),
		cmocka_unit_test(test_crash_points),
		cmocka_unit_test(test_replay_idempotent),
		cmocka_unit_test(test_fsync_after_evict),
		cmocka_unit_test(test_fast_commit),
		cmocka_unit_test(test_dirty_index),
		cmocka_unit_test(test_dirty_index_new_blocks),
		cmocka_unit_test(test_eio_journal_write),
		cmocka_unit_test(test_eio_journal_flush),
		cmocka_unit_test(test_eio_data_write),
		cmocka_unit_test(test_replay_read_error),
		cmocka_unit_test(test_eio_sweep),
		cmocka_unit_test(test_fdatasync_every_change),
	};

	verbose = getenv("SHOAL_TEST_VERBOSE") != NULL;
	if (getenv("SHOAL_TEST_FILTER")) /* e.g. SHOAL_TEST_FILTER='*eio*' */
		cmocka_set_test_filter(getenv("SHOAL_TEST_FILTER"));
	/* images in memory when possible: the fault device decides what is
	 * durable, and host flushes of a disk-backed file only cost minutes */
	if (access("/dev/shm", W_OK) == 0)
		setenv("TMPDIR", "/dev/shm", 1);
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_cluster.c - two or three cluster nodes inside one process: one image,
 * one in-process lock server (lockd_start on a Unix socket in a temp
 * directory), each node a shoal_mount of its own device handle with
 * mo_lock = "shoal:unix:PATH" and its own mo_node, driven through the core
 * API (include/shoal/shoal.h) only.
 *
 *  - parallel mounts: three nodes mounting at the same moment all succeed,
 *    with distinct journals;
 *  - first look: a node that has not touched the root since its mount sees
 *    what another node created there (nothing read at mount time is
 *    trusted once a glock is first granted);
 *  - coherence: what one node creates, writes, renames, links, unlinks,
 *    chmods, truncates, sets as an xattr is what the others see at once
 *    (lookup, getattr, read, readdir, getxattr); statfs follows within
 *    commit + 1 s (docs/LOCKING.md; the nodes mount with commit=1);
 *  - unlink while open elsewhere: a file unlinked on one node stays
 *    readable and writable through another node's open, its blocks stay
 *    allocated until that last close, then come back; the node that
 *    unlinked it does not free it a second time (no corrupt-metadata
 *    event) while the blocks are reused;
 *  - concurrent allocation: 2 threads on each of 3 nodes create, write (in
 *    two pieces), extend, move between a shared and a per-node directory,
 *    and unlink files; every file then reads back its own pattern on
 *    another node (no block handed to two owners), fsck.shoal -n is clean
 *    after the unmount, and a single mount walks a consistent tree whose
 *    statfs adds up.  Workers stuck for 60 s fail the test as a deadlock
 *    (with every node's glocks on stderr);
 *  - reads never take EX (R1): two nodes reading one file show one
 *    callback (the writer giving EX up for the first SH) and no EX request
 *    in the glock trace, then no lock traffic at all; a due atime update
 *    under SH is kept in memory and shown by stat on that node, written
 *    with that node's next change, dropped when another node changes the
 *    file, and written at unmount when a try-lock EX gets the glock;
 *    O_NOATIME and the no-atime flag decide before anything is locked.
 *
 *  - fallocate COLLAPSE_RANGE, INSERT_RANGE and ZERO_RANGE on one node are
 *    read at once by the other, also over blocks in the other's groups.
 *
 * Recovery, withdraw, fencing and freeing are in test_cluster_crash.c;
 * the helpers in cluster_util.c.
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

/* --- nodes mounting at the same moment --------------------------------------------------- */

struct pm_arg {
	struct cluster *c;
	const char *name;
	struct shoal_fs *fs;
	int err;
	char why[200];
};

static void *pm_run(void *arg)
{
	struct pm_arg *p = arg;
	p->err = node_mount(p->c, p->name, &p->fs);
	if (p->err)
		snprintf(p->why, sizeof(p->why), "%s", shoal_mount_error());
	return NULL;
}

/* Three nodes mount at once, five times over: lockd gives them distinct
 * journals and every mount succeeds (no node's journal probe at mount makes
 * another node's own journal look busy). */
static void test_parallel_mount(void **state)
{
	static const char *const names[MAXN] = { "a", "b", "c" };
	struct cluster c;
	(void)state;

	cl_image(&c);
	cl_lockd_start(&c, 8000);
	for (int round = 0; round < 5; round++) {
		struct pm_arg pa[MAXN];
		pthread_t t[MAXN];
		int bad = 0;

		for (int i = 0; i < MAXN; i++) {
			pa[i] = (struct pm_arg){ .c = &c, .name = names[i] };
			assert_int_equal(pthread_create(&t[i], NULL, pm_run, &pa[i]), 0);
		}
		for (int i = 0; i < MAXN; i++)
			pthread_join(t[i], NULL);
		for (int i = 0; i < MAXN; i++) {
			c.c_fs[i] = pa[i].fs;
			if (pa[i].err) {
				fprintf(stderr, "  round %d: node %s: %s\n", round, names[i],
					pa[i].why);
				bad++;
			}
		}
		c.c_n = MAXN;
		for (int i = 0; i < MAXN; i++)
			for (int j = 0; j < i; j++)
				if (c.c_fs[i] && c.c_fs[j])
					assert_int_not_equal(shoal_journal_id(c.c_fs[i]),
							     shoal_journal_id(c.c_fs[j]));
		cl_unmount_all(&c);
		if (bad)
			fail_msg("round %d: %d of %d simultaneous mounts failed", round, bad, MAXN);
	}
	cl_lockd_stop(&c);
	cl_fsck(&c);
	cl_fini(&c);
}

/* --- coherence ------------------------------------------------------------------------- */

/* A node that has not touched the root since its mount sees what another
 * node created there (its root was read at mount time, before any glock). */
static void test_first_look(void **state)
{
	struct cluster c;
	uint64_t root, f, d;
	struct stat st;
	(void)state;

	cl_start(&c, 3, 8000);
	root = shoal_root(c.c_fs[0]);
	f = mkfile(c.c_fs[0], root, "f", 5000, 2);
	assert_int_equal(lookup_ino(c.c_fs[1], root, "f"), (int64_t)f);
	assert_int_equal(shoal_getattr(c.c_fs[2], root, &st), 0);
	assert_int_equal(st.st_nlink, 2);
	d = mkdir_(c.c_fs[1], root, "d");
	assert_int_equal(shoal_getattr(c.c_fs[2], root, &st), 0);
	assert_int_equal(st.st_nlink, 3);
	assert_int_equal(lookup_ino(c.c_fs[2], root, "d"), (int64_t)d);
	assert_int_equal(lookup_ino(c.c_fs[2], root, "f"), (int64_t)f);
	assert_pattern(c.c_fs[2], f, 5000, 2);
	cl_unmount_all(&c);
	cl_lockd_stop(&c);
	cl_fsck(&c);
	cl_fini(&c);
}

static void test_coherence(void **state)
{
	struct cluster c;
	struct shoal_fs *a, *b, *x;
	uint64_t root, f, d, ino;
	struct stat st, attr;
	uint8_t buf[8192], want[8192];
	char val[64];
	(void)state;

	cl_start(&c, 3, 8000);
	a = c.c_fs[0];
	b = c.c_fs[1];
	x = c.c_fs[2];
	root = shoal_root(a);
	assert_int_equal(shoal_root(b), root);
	assert_int_equal(shoal_root(x), root);
	for (int i = 0; i < 3; i++)
		for (int j = 0; j < i; j++)
			assert_int_not_equal(shoal_journal_id(c.c_fs[i]),
					     shoal_journal_id(c.c_fs[j]));

	/* every node has looked at the root (test_first_look covers the case
	 * where one has not); c also found no "f" there */
	cl_touch_root(&c);
	assert_int_equal(lookup_ino(x, root, "f"), -ENOENT);

	/* a creates and writes; b and c see name, size and bytes */
	f = mkfile(a, root, "f", 100 * KiB + 123, 1);
	assert_int_equal(must_lookup(b, root, "f"), f);
	assert_int_equal(must_lookup(x, root, "f"), f);
	assert_int_equal(shoal_getattr(b, f, &st), 0);
	assert_int_equal(st.st_size, 100 * KiB + 123);
	assert_pattern(b, f, 100 * KiB + 123, 1);
	assert_pattern(x, f, 100 * KiB + 123, 1);

	/* b overwrites a piece in place; a and c read the new bytes at once */
	fill_pattern(want, sizeof(want), 0, 77);
	assert_int_equal(shoal_write(b, &root_ctx, f, want, sizeof(want), 5000, O_RDWR),
			 (ssize_t)sizeof(want));
	assert_int_equal(shoal_read(a, f, buf, sizeof(buf), 5000, O_RDONLY), (ssize_t)sizeof(buf));
	assert_memory_equal(buf, want, sizeof(buf));
	assert_int_equal(shoal_read(x, f, buf, sizeof(buf), 5000, O_RDONLY), (ssize_t)sizeof(buf));
	assert_memory_equal(buf, want, sizeof(buf));
	/* ... and a's old bytes around it are unchanged */
	assert_int_equal(shoal_read(x, f, buf, 4096, 0, O_RDONLY), 4096);
	fill_pattern(want, 4096, 0, 1);
	assert_memory_equal(buf, want, 4096);

	/* c: chmod and truncate; a sees both */
	memset(&attr, 0, sizeof(attr));
	attr.st_mode = S_IFREG | 0600;
	attr.st_size = 3000;
	assert_int_equal(shoal_setattr(x, &root_ctx, f, &attr, SHOAL_SET_MODE | SHOAL_SET_SIZE, &st),
			 0);
	assert_int_equal(shoal_getattr(a, f, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0600);
	assert_int_equal(st.st_size, 3000);
	assert_int_equal(shoal_read(a, f, buf, sizeof(buf), 0, O_RDONLY), 3000);
	fill_pattern(want, 3000, 0, 1);
	assert_memory_equal(buf, want, 3000);

	/* xattrs: b sets, c reads, a replaces, b reads, c removes */
	assert_int_equal(shoal_setxattr(b, f, "user.k", "v1", 2, 0), 0);
	assert_int_equal(shoal_getxattr(x, f, "user.k", val, sizeof(val)), 2);
	assert_memory_equal(val, "v1", 2);
	assert_int_equal(shoal_setxattr(a, f, "user.k", "value-2", 7, 0), 0);
	assert_int_equal(shoal_getxattr(b, f, "user.k", val, sizeof(val)), 7);
	assert_memory_equal(val, "value-2", 7);
	assert_int_equal(shoal_removexattr(x, f, "user.k"), 0);
	assert_int_equal(shoal_getxattr(a, f, "user.k", val, sizeof(val)), -ENODATA);

	/* a mkdir, b sees it in readdir and with a link count of 3 for the root */
	d = mkdir_(a, root, "d");
	assert_true(dir_has(b, root, "d", &ino));
	assert_int_equal(ino, d);
	assert_true(dir_has(x, root, "f", NULL));
	assert_int_equal(shoal_getattr(b, root, &st), 0);
	assert_int_equal(st.st_nlink, 3);

	/* c renames f into d; a and b see the new name only */
	assert_int_equal(shoal_rename(x, &root_ctx, root, "f", d, "g", 0), 0);
	assert_int_equal(lookup_ino(a, root, "f"), -ENOENT);
	assert_int_equal(must_lookup(a, d, "g"), f);
	assert_false(dir_has(b, root, "f", NULL));
	assert_true(dir_has(b, d, "g", NULL));

	/* a hard link on b: a sees nlink 2; unlink of one name on a: c sees 1 */
	assert_int_equal(shoal_link(b, f, root, "h", &st), 0);
	shoal_forget(b, f, 1);
	assert_int_equal(shoal_getattr(a, f, &st), 0);
	assert_int_equal(st.st_nlink, 2);
	assert_int_equal(shoal_unlink(a, &root_ctx, d, "g"), 0);
	assert_int_equal(lookup_ino(x, d, "g"), -ENOENT);
	assert_int_equal(shoal_getattr(x, f, &st), 0);
	assert_int_equal(st.st_nlink, 1);
	assert_pattern(x, must_lookup(x, root, "h"), 3000, 1);

	/* statfs: a big file written on b costs free blocks as seen from a and c */
	{
		uint64_t fa = free_blocks(a), fc = free_blocks(x);
		uint64_t big = mkfile(b, d, "big", 4 * MiB, 9);
		assert_true(free_blocks_wait(a, 0, fa - 1024) + 1024 <= fa);
		assert_true(free_blocks_wait(x, 0, fc - 1024) + 1024 <= fc);
		assert_pattern(a, big, 4 * MiB, 9);
		/* c unlinks it: a and b see the blocks come back */
		assert_int_equal(shoal_unlink(x, &root_ctx, d, "big"), 0);
		assert_true(free_blocks_wait(a, fa - 16, UINT64_MAX) + 16 >= fa);
		assert_true(free_blocks_wait(b, fa - 16, UINT64_MAX) + 16 >= fa);
	}

	/* a removes what is left; b and c see an empty root */
	assert_int_equal(shoal_unlink(a, &root_ctx, root, "h"), 0);
	assert_int_equal(shoal_rmdir(b, &root_ctx, root, "d"), 0);
	assert_int_equal(lookup_ino(x, root, "d"), -ENOENT);
	assert_int_equal(shoal_getattr(a, root, &st), 0);
	assert_int_equal(st.st_nlink, 2);
	tc_check_tree(x, 0);

	cl_unmount_all(&c);
	cl_lockd_stop(&c);
	cl_fsck(&c);
	cl_fini(&c);
}

/* --- concurrent allocation ------------------------------------------------------------- */

#define AL_THREADS 2
#define AL_FILES 48 /* per thread */
#define AL_DEADLINE_S 60 /* the workers take ~1 s; more is a deadlock */

struct al_file {
	char name[32];
	uint64_t dir;
	size_t len;
	unsigned seed;
	int gone;
};

struct al_worker {
	struct shoal_fs *fs;
	int node, thread;
	uint64_t shared, own;
	struct al_file files[AL_FILES];
	int nfiles;
	char err[256];
	struct al_file *errf; /* the file the error was about, if any */
	pthread_t tid;
};

static int al_write(struct al_worker *w, uint64_t ino, size_t off, size_t len, unsigned seed)
{
	uint8_t *buf = malloc(len);
	ssize_t n;

	if (!buf)
		return -ENOMEM;
	fill_pattern(buf, len, off, seed);
	n = shoal_write(w->fs, &root_ctx, ino, buf, len, off, O_RDWR);
	free(buf);
	if (n != (ssize_t)len) {
		snprintf(w->err, sizeof(w->err), "node %d thread %d: write %zu at %zu: %s", w->node,
			 w->thread, len, off, n < 0 ? strerror((int)-n) : "short");
		return -EIO;
	}
	return 0;
}

static void *al_run(void *arg)
{
	struct al_worker *w = arg;
	unsigned rnd = (unsigned)(w->node * 1000 + w->thread * 17 + 1);

	for (int i = 0; i < AL_FILES && !w->err[0]; i++) {
		struct al_file *f = &w->files[w->nfiles];
		struct stat st;
		int err;

		snprintf(f->name, sizeof(f->name), "n%d_t%d_%d", w->node, w->thread, i);
		f->dir = rand_r(&rnd) % 2 ? w->shared : w->own;
		f->len = (1 + rand_r(&rnd) % 48) * 4096 - rand_r(&rnd) % 4096;
		f->seed = (unsigned)(w->node << 16 | w->thread << 8 | i) + 1;
		err = shoal_create(w->fs, &root_ctx, f->dir, f->name, 0644, O_RDWR, &st);
		if (err) {
			snprintf(w->err, sizeof(w->err), "node %d: create %s: %s", w->node, f->name,
				 strerror(-err));
			break;
		}
		/* in two pieces, so two allocations race with the other nodes' */
		if (!al_write(w, st.st_ino, 0, f->len / 2, f->seed))
			al_write(w, st.st_ino, f->len / 2, f->len - f->len / 2, f->seed);
		shoal_release(w->fs, st.st_ino, O_RDWR);
		shoal_forget(w->fs, st.st_ino, 1);
		w->nfiles++;
		/* now and then: extend an older file, move it, or remove it */
		if (w->nfiles > 2 && rand_r(&rnd) % 3 == 0) {
			struct al_file *o = &w->files[rand_r(&rnd) % (w->nfiles - 1)];
			struct stat ost;
			if (o->gone)
				continue;
			if (rand_r(&rnd) % 3 == 0) {
				uint64_t to = o->dir == w->shared ? w->own : w->shared;
				char nn[32];
				snprintf(nn, sizeof(nn), "%.24s_m", o->name);
				err = shoal_rename(w->fs, &root_ctx, o->dir, o->name, to, nn, 0);
				if (err) {
					snprintf(w->err, sizeof(w->err), "node %d: rename %s: %s",
						 w->node, o->name, strerror(-err));
					w->errf = o;
					break;
				}
				o->dir = to;
				snprintf(o->name, sizeof(o->name), "%s", nn);
				continue;
			}
			err = shoal_lookup(w->fs, o->dir, o->name, &ost);
			if (err) {
				snprintf(w->err, sizeof(w->err), "node %d: lookup %s: %s", w->node,
					 o->name, strerror(-err));
				w->errf = o;
				break;
			}
			if (rand_r(&rnd) % 2) {
				size_t more = (1 + rand_r(&rnd) % 16) * 4096;
				if (!al_write(w, ost.st_ino, o->len, more, o->seed))
					o->len += more;
				shoal_forget(w->fs, ost.st_ino, 1);
			} else {
				shoal_forget(w->fs, ost.st_ino, 1);
				err = shoal_unlink(w->fs, &root_ctx, o->dir, o->name);
				if (err) {
					snprintf(w->err, sizeof(w->err), "node %d: unlink %s: %s",
						 w->node, o->name, strerror(-err));
					w->errf = o;
				}
				o->gone = 1;
			}
		}
	}
	return NULL;
}

static void test_concurrent_alloc(void **state)
{
	struct cluster c;
	struct al_worker *w = calloc(MAXN * AL_THREADS, sizeof(*w));
	uint64_t root, shared, own[MAXN];
	char name[32], why[256];
	int nw = MAXN * AL_THREADS, checked = 0;
	uint64_t t0;
	(void)state;

	assert_non_null(w);
	cl_start(&c, MAXN, 8000);
	root = shoal_root(c.c_fs[0]);
	shared = mkdir_(c.c_fs[0], root, "shared");
	for (int n = 0; n < MAXN; n++) {
		snprintf(name, sizeof(name), "own%d", n);
		own[n] = mkdir_(c.c_fs[n], root, name);
	}
	t0 = now_ms();
	for (int i = 0; i < nw; i++) {
		w[i].node = i / AL_THREADS;
		w[i].thread = i % AL_THREADS;
		w[i].fs = c.c_fs[w[i].node];
		w[i].shared = shared;
		w[i].own = own[w[i].node];
		assert_int_equal(pthread_create(&w[i].tid, NULL, al_run, &w[i]), 0);
	}
	/* a deadlock must fail the test, not hang the suite */
	for (int i = 0; i < nw; i++) {
		struct timespec dl;
		clock_gettime(CLOCK_REALTIME, &dl);
		dl.tv_sec += i == 0 ? AL_DEADLINE_S : 1;
		if (pthread_timedjoin_np(w[i].tid, NULL, &dl)) {
			fprintf(stderr, "  the workers are stuck after %d s; glocks of each node:\n",
				AL_DEADLINE_S);
			for (int n = 0; n < MAXN; n++) {
				fprintf(stderr, "  --- node %d\n", n);
				shoal_dump_glocks(c.c_fs[n], stderr, NULL);
			}
			fail_msg("deadlock: worker %d (node %d) has not finished after %d s", i,
				 w[i].node, AL_DEADLINE_S);
		}
	}
	if (verbose())
		fprintf(stderr, "  %d threads on %d nodes: %llu ms\n", nw, MAXN,
			(unsigned long long)(now_ms() - t0));
	for (int i = 0; i < nw; i++) {
		struct al_file *f = w[i].errf;
		if (!w[i].err[0])
			continue;
		/* what each node sees of the file the error was about; then fsck */
		fprintf(stderr, "  worker error: %s\n", w[i].err);
		for (int n = 0; f && n < MAXN; n++)
			fprintf(stderr, "  node %d: lookup %s in %s: %lld, listed: %d\n", n, f->name,
				f->dir == shared ? "shared" : "own",
				(long long)lookup_ino(c.c_fs[n], f->dir, f->name),
				dir_has(c.c_fs[n], f->dir, f->name, NULL));
		cl_unmount_all(&c);
		cl_lockd_stop(&c);
		cl_fsck(&c);
		fail_msg("%s", w[i].err);
	}

	/* every file, read on the next node, holds its own pattern: no block
	 * was given to two files */
	for (int i = 0; i < nw; i++) {
		struct shoal_fs *fs = c.c_fs[(w[i].node + 1) % MAXN];
		for (int k = 0; k < w[i].nfiles; k++) {
			struct al_file *f = &w[i].files[k];
			int64_t ino = lookup_ino(fs, f->dir, f->name);
			if (f->gone) {
				if (ino != -ENOENT)
					fail_msg("%s, unlinked by node %d, on node %d: %s", f->name,
						w[i].node, (w[i].node + 1) % MAXN,
						ino < 0 ? strerror((int)-ino) : "still there");
				continue;
			}
			if (ino == -ENOENT)
				fail_msg("%s on node %d: %s", f->name, (w[i].node + 1) % MAXN,
					strerror((int)-ino));
			if (ino < 0)
				fail_msg("%s on node %d: %s", f->name, (w[i].node + 1) % MAXN,
					 strerror((int)-ino));
			if (check_pattern(fs, (uint64_t)ino, f->len, f->seed, why, sizeof(why)))
				fail_msg("%s (written by node %d) read on node %d: %s", f->name,
					 w[i].node, (w[i].node + 1) % MAXN, why);
			checked++;
		}
	}
	assert_true(checked > nw * AL_FILES / 2);
	tc_check_tree(c.c_fs[2], 0);
	cl_unmount_all(&c);
	cl_fsck(&c);

	/* one node alone: a consistent tree whose blocks add up to statfs */
	{
		struct shoal_fs *fs;
		assert_int_equal(node_mount(&c, "solo", &fs), 0);
		tc_check_tree(fs, 1);
		assert_int_equal(shoal_unmount(fs), 0);
	}
	cl_lockd_stop(&c);
	cl_fsck(&c);
	cl_fini(&c);
	free(w);
}

/* --- R1: reads never take EX; atime under SH ------------------------------------------ */

/* The events of trace t now (none waited for: each was made before). */
static size_t tr_drain(struct shoal_trace *t, struct shoal_glevent *ev, size_t max)
{
	uint64_t dropped;
	size_t n = shoal_trace_read(t, ev, max, 0, &dropped);
	assert_int_equal(dropped, 0);
	return n;
}

/* How many of ev[0..n) are this node's requests for (or grants of) EX,
 * and how many are callbacks (whose target is what another node wants). */
static void tr_count(const struct shoal_glevent *ev, size_t n, int *ex, int *cb)
{
	*ex = *cb = 0;
	for (size_t i = 0; i < n; i++) {
		if ((ev[i].ev_kind == SHOAL_GLEV_REQUEST || ev[i].ev_kind == SHOAL_GLEV_STATE) &&
		    (ev[i].ev_target == 3 || ev[i].ev_new == 3))
			(*ex)++;
		if (ev[i].ev_kind == SHOAL_GLEV_CALLBACK)
			(*cb)++;
	}
}

/* One read of ino through an open of its own (as the kernel's READ is). */
static void read_once(struct shoal_fs *fs, uint64_t ino, int flags)
{
	char buf[4096];
	assert_int_equal(shoal_open(fs, ino, O_RDONLY | flags), 0);
	assert_true(shoal_read(fs, ino, buf, sizeof(buf), 0, O_RDONLY | flags) > 0);
	assert_int_equal(shoal_release(fs, ino, O_RDONLY | flags), 0);
}

static struct timespec atime_of(struct shoal_fs *fs, uint64_t ino)
{
	struct stat st;
	assert_int_equal(shoal_getattr(fs, ino, &st), 0);
	return st.st_atim;
}

static int ts_eq(struct timespec x, struct timespec y)
{
	return x.tv_sec == y.tv_sec && x.tv_nsec == y.tv_nsec;
}

static int ts_lt(struct timespec x, struct timespec y)
{
	return x.tv_sec < y.tv_sec || (x.tv_sec == y.tv_sec && x.tv_nsec < y.tv_nsec);
}

static void test_read_never_ex(void **state)
{
	struct cluster c;
	struct shoal_fs *a, *b;
	struct shoal_trace *ta, *tb;
	struct shoal_glevent ev[256];
	struct shoal_counters ca0, cb0, ca1, cb1;
	struct glfilter flt;
	struct timespec t0, tb1, ta1;
	struct stat st;
	char filter[80];
	uint64_t root, f, g;
	int ex, cb;
	size_t n;
	(void)state;

	root = cl_start_ab(&c, 5000, &a, &b);
	f = mkfile(a, root, "f", 100 * KiB, 41); /* relatime: atime before mtime, so due */
	t0 = atime_of(a, f);
	snprintf(filter, sizeof(filter), "gltype == 2 && glnum == %llu", (unsigned long long)f);
	assert_int_equal(glf_compile(&flt, filter, NULL, 0), 0);
	assert_int_equal(shoal_trace_open(a, &flt, &ta), 0);
	assert_int_equal(shoal_trace_open(b, &flt, &tb), 0);
	shoal_counters(a, &ca0);
	shoal_counters(b, &cb0);

	/* the first grants: b asks for SH, a (the writer) goes EX -> SH; both
	 * nodes keep the inode looked up, as a kernel that uses it does */
	assert_int_equal(shoal_lookup(a, root, "f", &st), 0);
	assert_int_equal(shoal_lookup(b, root, "f", &st), 0);
	read_once(b, f, 0);
	read_once(a, f, 0);
	n = tr_drain(tb, ev, 256);
	tr_count(ev, n, &ex, &cb);
	assert_true(n >= 2); /* b's request and its grant are traced */
	assert_int_equal(ex, 0);
	assert_int_equal(cb, 0);
	n = tr_drain(ta, ev, 256);
	tr_count(ev, n, &ex, &cb);
	assert_int_equal(cb, 1); /* b's SH: the only callback */

	/* atime: due on both, each keeps it in memory and shows it */
	tb1 = atime_of(b, f);
	ta1 = atime_of(a, f);
	assert_true(ts_lt(t0, tb1));
	assert_true(ts_lt(t0, ta1));
	shoal_counters(a, &ca1);
	shoal_counters(b, &cb1);
	assert_int_equal(cb1.sc_atime_deferred - cb0.sc_atime_deferred, 1);
	assert_int_equal(ca1.sc_atime_deferred - ca0.sc_atime_deferred, 1);
	assert_int_equal(cb1.sc_atime_written - cb0.sc_atime_written, 0);

	/* after the first grants: reads on both nodes cost no lock traffic,
	 * and relatime keeps the first kept update (not due again) */
	for (int i = 0; i < 20; i++) {
		read_once(i % 2 ? a : b, f, 0);
		assert_int_equal(shoal_getattr(i % 2 ? b : a, f, &st), 0);
	}
	assert_int_equal(tr_drain(ta, ev, 256), 0);
	assert_int_equal(tr_drain(tb, ev, 256), 0);
	assert_true(ts_eq(atime_of(b, f), tb1));
	assert_true(ts_eq(atime_of(a, f), ta1));

	/* O_NOATIME and the file's own flag decide before anything else */
	g = mkfile(b, root, "g", 10 * KiB, 42);
	assert_int_equal(shoal_lookup(b, root, "g", &st), 0);
	t0 = atime_of(b, g);
	read_once(b, g, O_NOATIME); /* b holds g EX (it wrote g): would be written */
	assert_true(ts_eq(atime_of(b, g), t0));
	assert_int_equal(shoal_setflags(b, &root_ctx, g, FS_NOATIME_FL), 0);
	t0 = atime_of(b, g);
	read_once(b, g, 0);
	assert_true(ts_eq(atime_of(b, g), t0));
	assert_int_equal(shoal_setflags(b, &root_ctx, g, 0), 0);
	t0 = atime_of(b, g);
	read_once(b, g, 0); /* EX anyway: written at once */
	assert_true(ts_lt(t0, atime_of(b, g)));

	/* a change on a: a's kept atime goes with it; b's is dropped */
	shoal_counters(a, &ca0);
	shoal_counters(b, &cb0);
	assert_int_equal(shoal_write(a, &root_ctx, f, "x", 1, 0, O_RDWR), 1);
	n = tr_drain(ta, ev, 256);
	tr_count(ev, n, &ex, &cb);
	assert_true(ex > 0); /* the trace does show an EX request when there is one */
	assert_true(ts_eq(atime_of(b, f), ta1)); /* b reads a's update from disk */
	shoal_counters(a, &ca1);
	shoal_counters(b, &cb1);
	assert_int_equal(ca1.sc_atime_written - ca0.sc_atime_written, 1);
	assert_int_equal(cb1.sc_atime_dropped - cb0.sc_atime_dropped, 1);
	n = tr_drain(tb, ev, 256);
	tr_count(ev, n, &ex, &cb);
	assert_int_equal(cb, 1);
	assert_int_equal(ex, 0);

	/* unmount: b's kept update is written if a try-lock EX gets the glock
	 * (a has gone), and found on disk by the next mount */
	read_once(b, f, 0); /* due again: the write made mtime newer */
	tb1 = atime_of(b, f);
	assert_true(ts_lt(ta1, tb1));
	shoal_trace_close(ta);
	shoal_trace_close(tb);
	shoal_forget(a, f, 1);
	assert_int_equal(shoal_unmount(a), 0);
	c.c_fs[0] = NULL;
	/* b keeps f looked up: the kernel sends no forget at unmount */
	assert_int_equal(shoal_unmount(b), 0);
	c.c_fs[1] = NULL;
	assert_int_equal(node_mount(&c, "a", &a), 0);
	c.c_fs[0] = a;
	assert_true(ts_eq(atime_of(a, f), tb1));

	cl_unmount_all(&c);
	cl_lockd_stop(&c);
	cl_fsck(&c);
	cl_fini(&c);
}

/*
 * A kept atime never writes a stale dinode.  b reads f and g under SH and
 * keeps their atime updates in memory; a then changes f (chmod, size) and
 * removes g, and unmounts; at b's unmount a try-lock EX gets both glocks
 * (nobody else holds them), but b's copies of the dinodes are from before
 * a's changes: writing them would bring f's old size and mode back and
 * resurrect g's dinode in a free block (the CI failure of
 * t_cluster_recovery: an rm -rf on one node undone by another's unmount).
 */
static void test_kept_atime_after_change(void **state)
{
	struct cluster c;
	struct shoal_fs *a, *b;
	struct shoal_counters cb0, cb1;
	struct stat st, attr;
	uint64_t root, f, g;
	(void)state;

	root = cl_start_ab(&c, 5000, &a, &b);
	f = mkfile(a, root, "f", 20 * KiB, 51); /* relatime: atime before mtime, so due */
	g = mkfile(a, root, "g", 20 * KiB, 52);
	assert_int_equal(shoal_lookup(b, root, "f", &st), 0);
	assert_int_equal(shoal_lookup(b, root, "g", &st), 0);
	shoal_counters(b, &cb0);
	read_once(b, f, 0);
	read_once(b, g, 0);
	shoal_counters(b, &cb1);
	assert_int_equal(cb1.sc_atime_deferred - cb0.sc_atime_deferred, 2);

	/* a changes f and removes g; b does not look at either again */
	memset(&attr, 0, sizeof(attr));
	attr.st_mode = 0600;
	attr.st_size = 5 * KiB;
	assert_int_equal(shoal_setattr(a, &root_ctx, f, &attr, SHOAL_SET_MODE | SHOAL_SET_SIZE, &st),
			 0);
	assert_int_equal(shoal_unlink(a, &root_ctx, root, "g"), 0);
	shoal_forget(a, f, 1);
	assert_int_equal(shoal_unmount(a), 0);
	c.c_fs[0] = NULL;

	/* b unmounts with both updates kept (the kernel sent no forget) */
	shoal_counters(b, &cb0);
	assert_int_equal(shoal_unmount(b), 0);
	c.c_fs[1] = NULL;

	assert_int_equal(node_mount(&c, "a", &a), 0);
	c.c_fs[0] = a;
	assert_int_equal(shoal_getattr(a, f, &st), 0);
	assert_int_equal(st.st_size, 5 * KiB);
	assert_int_equal(st.st_mode & 07777, 0600);
	assert_int_equal(lookup_ino(a, root, "g"), -ENOENT);
	assert_int_equal(lookup_ino(a, root, "f"), (int64_t)f);
	(void)g;
	cl_unmount_all(&c);
	cl_lockd_stop(&c);
	cl_fsck(&c);
	cl_fini(&c);
}

/* --- unlink of a file open on another node ---------------------------------------------- */

static void test_unlink_open_elsewhere(void **state)
{
	struct cluster c;
	struct shoal_fs *a, *b;
	uint64_t root, f, free0, free1;
	struct stat st;
	uint8_t buf[4096], want[4096];
	int i;
	(void)state;

	cl_start(&c, 2, 8000);
	a = c.c_fs[0];
	b = c.c_fs[1];
	root = shoal_root(a);
	free0 = free_blocks(a);
	f = mkfile(a, root, "u", 1 * MiB, 5);
	assert_int_equal(shoal_fsync(a, f, 0), 0);
	free1 = free_blocks_wait(b, 0, free0 - 256);
	assert_true(free1 + 256 <= free0);

	/* b opens it (lookup reference + open), a unlinks the name */
	assert_int_equal(shoal_lookup(b, root, "u", &st), 0);
	assert_int_equal(st.st_ino, f);
	assert_int_equal(shoal_open(b, f, O_RDWR), 0);
	assert_int_equal(shoal_unlink(a, &root_ctx, root, "u"), 0);
	assert_int_equal(lookup_ino(a, root, "u"), -ENOENT);
	assert_int_equal(lookup_ino(b, root, "u"), -ENOENT);

	/* still alive on b: reads its bytes, grows by 1 MiB */
	assert_pattern(b, f, 1 * MiB, 5);
	fill_pattern(want, sizeof(want), 1 * MiB, 5);
	for (i = 0; i < 256; i++) {
		fill_pattern(want, sizeof(want), 1 * MiB + (uint64_t)i * 4096, 5);
		assert_int_equal(shoal_write(b, &root_ctx, f, want, 4096, 1 * MiB + (uint64_t)i * 4096,
					     O_RDWR), 4096);
	}
	assert_int_equal(shoal_fsync(b, f, 0), 0);
	assert_pattern(b, f, 2 * MiB, 5);
	/* a's commit thread and orphan freeing run meanwhile: nothing comes back */
	sleep_ms(1500);
	assert_int_equal(shoal_sync(a), 0);
	assert_true(free_blocks(a) + 256 <= free0);
	assert_int_equal(shoal_read(b, f, buf, 4096, 0, O_RDONLY), 4096);
	fill_pattern(want, 4096, 0, 5);
	assert_memory_equal(buf, want, 4096);

	/* b's last close and forget: the inode goes, the blocks come back */
	assert_int_equal(shoal_release(b, f, O_RDWR), 0);
	shoal_forget(b, f, 1);
	for (i = 0; i < 150; i++) {
		if (free_blocks(a) >= free0 && free_blocks(b) >= free0)
			break;
		sleep_ms(100);
	}
	if (free_blocks(a) < free0 || free_blocks(b) < free0)
		fail_msg("after the last close: free blocks %llu (a), %llu (b), want %llu as before "
			 "the file",
			 (unsigned long long)free_blocks(a), (unsigned long long)free_blocks(b),
			 (unsigned long long)free0);
	assert_int_equal(shoal_getattr(a, f, &st) == 0 && st.st_nlink > 0, 0);

	/* the freed inode and blocks are reused by b; a, which unlinked the
	 * name and queued the inode as its orphan, does not free it a second
	 * time (no "corrupt metadata" event on either node) */
	{
		struct shoal_counters sa, sb;
		uint64_t v = mkfile(b, root, "v", 2 * MiB, 6);
		uint64_t w = mkfile(b, root, "w", 5000, 7);
		assert_int_equal(shoal_fsync(b, v, 0), 0);
		assert_int_equal(shoal_fsync(b, w, 0), 0);
		assert_int_equal(shoal_sync(b), 0);
		sleep_ms(1500); /* a's commit thread runs (commit=1) */
		shoal_counters(a, &sa);
		assert_int_equal(shoal_unmount(a), 0);
		c.c_fs[0] = NULL;
		assert_pattern(b, must_lookup(b, root, "v"), 2 * MiB, 6);
		assert_pattern(b, must_lookup(b, root, "w"), 5000, 7);
		shoal_counters(b, &sb);
		if (sa.sc_corrupt || sb.sc_corrupt)
			fail_msg("corrupt metadata events: %llu on a, %llu on b (the inode "
				 "unlinked on a and last closed on b freed twice?)",
				 (unsigned long long)sa.sc_corrupt, (unsigned long long)sb.sc_corrupt);
	}

	cl_unmount_all(&c);
	cl_lockd_stop(&c);
	cl_fsck(&c);
	cl_fini(&c);
}

/*
 * A file made on one node and unlinked on another is freed without any
 * unmount when the maker does not use it (the maker kept its iopen glock
 * EX since it made the inode: the unlinker's try-lock sends it one
 * callback, it lets go, the unlinker tries again), and at the maker's
 * unmount when the maker's kernel still had it looked up.
 */
static void test_unlink_made_elsewhere(void **state)
{
	struct cluster c;
	struct shoal_fs *a, *b;
	uint64_t root, free0, fr;
	struct stat st;
	(void)state;

	root = cl_start_ab(&c, 8000, &a, &b);
	free0 = free_blocks(b);

	/* not in use on a: b frees it */
	(void)mkfile(a, root, "idle", 1 * MiB, 61);
	assert_int_equal(shoal_sync(a), 0);
	fr = free_blocks_wait(b, 0, free0 - 256);
	assert_true(fr + 256 <= free0);
	assert_int_equal(shoal_unlink(b, &root_ctx, root, "idle"), 0);
	fr = free_blocks_wait(b, free0, UINT64_MAX);
	if (fr < free0)
		fail_msg("a file a made and b unlinked: %llu blocks free on b, want %llu as before "
			 "it (never freed?)",
			 (unsigned long long)fr, (unsigned long long)free0);

	/* looked up on a (its kernel keeps the inode): freed at a's unmount */
	(void)mkfile(a, root, "kept", 1 * MiB, 62);
	assert_int_equal(shoal_lookup(a, root, "kept", &st), 0);
	assert_int_equal(shoal_sync(a), 0);
	assert_true(free_blocks_wait(b, 0, free0 - 256) + 256 <= free0);
	assert_int_equal(shoal_unlink(b, &root_ctx, root, "kept"), 0);
	sleep_ms(1000); /* b's tries fail: a uses it */
	assert_true(free_blocks(b) + 256 <= free0);
	assert_int_equal(shoal_unmount(a), 0); /* no forget: the kernel sends none */
	c.c_fs[0] = NULL;
	fr = free_blocks_wait(b, free0, UINT64_MAX);
	if (fr < free0)
		fail_msg("after the unmount of a, which had it looked up: %llu blocks free on b, "
			 "want %llu",
			 (unsigned long long)fr, (unsigned long long)free0);

	cl_unmount_all(&c);
	cl_lockd_stop(&c);
	cl_fsck(&c);
	cl_fini(&c);
}


/* --- fallocate modes that move or zero data (issue 20.6) -------------------------------- */

/* The whole file on fs equals want[0, len). */
static void assert_bytes(struct shoal_fs *fs, uint64_t ino, const uint8_t *want, size_t len)
{
	struct stat st;
	uint8_t *buf = malloc(len + 1);

	assert_non_null(buf);
	assert_int_equal(shoal_getattr(fs, ino, &st), 0);
	assert_int_equal(st.st_size, len);
	assert_int_equal(shoal_read(fs, ino, buf, len + 1, 0, O_RDONLY), (ssize_t)len);
	assert_memory_equal(buf, want, len);
	free(buf);
}

/*
 * COLLAPSE_RANGE, INSERT_RANGE and ZERO_RANGE on one node: the other reads
 * the right bytes and size at once (it held the inode SH and had read the
 * file).  The file's second half was written by the other node, so its
 * blocks lie in groups that node holds: the shift takes them over.
 */
static void test_fallocate_shift(void **state)
{
	struct cluster c;
	struct shoal_fs *a, *b;
	const size_t bs = 4096, cap = 800 * 4096;
	uint8_t *m = calloc(1, cap);
	size_t len = 600 * bs + 99;
	(void)state;

	assert_non_null(m);
	cl_start(&c, 2, 8000);
	cl_touch_root(&c);
	a = c.c_fs[0];
	b = c.c_fs[1];
	uint64_t root = shoal_root(a);
	uint64_t f = mkfile(a, root, "f", 300 * bs, 1);
	fill_pattern(m, 300 * bs, 0, 1);
	fill_pattern(m + 300 * bs, len - 300 * bs, 300 * bs, 2);
	assert_int_equal(shoal_write(b, &root_ctx, f, m + 300 * bs, len - 300 * bs, 300 * bs,
				     O_RDWR),
			 (ssize_t)(len - 300 * bs));
	assert_bytes(a, f, m, len);
	assert_bytes(b, f, m, len);

	/* a collapses 200 blocks across both halves: b sees it */
	assert_int_equal(shoal_fallocate(a, f, FALLOC_FL_COLLAPSE_RANGE, 250 * bs, 200 * bs), 0);
	memmove(m + 250 * bs, m + 450 * bs, len - 450 * bs);
	len -= 200 * bs;
	assert_bytes(b, f, m, len);
	/* b inserts 100 blocks: a sees them */
	assert_int_equal(shoal_fallocate(b, f, FALLOC_FL_INSERT_RANGE, 10 * bs, 100 * bs), 0);
	memmove(m + 110 * bs, m + 10 * bs, len - 10 * bs);
	memset(m + 10 * bs, 0, 100 * bs);
	len += 100 * bs;
	assert_bytes(a, f, m, len);
	/* a zeroes an unaligned range and grows the file: b sees it */
	assert_int_equal(shoal_fallocate(a, f, FALLOC_FL_ZERO_RANGE, len - 1000, 3 * bs), 0);
	memset(m + len - 1000, 0, 3 * bs);
	len += 3 * bs - 1000;
	assert_bytes(b, f, m, len);
	assert_bytes(a, f, m, len);

	cl_unmount_all(&c);
	cl_lockd_stop(&c);
	cl_fsck(&c);
	cl_fini(&c);
	free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parallel_mount),
		cmocka_unit_test(test_first_look),
		cmocka_unit_test(test_coherence),
		cmocka_unit_test(test_unlink_open_elsewhere),
		cmocka_unit_test(test_unlink_made_elsewhere),
		cmocka_unit_test(test_concurrent_alloc),
		cmocka_unit_test(test_read_never_ex),
		cmocka_unit_test(test_kept_atime_after_change),
		cmocka_unit_test(test_fallocate_shift),
	};
	signal(SIGPIPE, SIG_IGN);
	if (getenv("SHOAL_TEST_FILTER")) /* e.g. SHOAL_TEST_FILTER=test_coherence */
		cmocka_set_test_filter(getenv("SHOAL_TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}

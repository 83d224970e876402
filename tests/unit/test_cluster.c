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
 *    O_NOATIME and the no-atime flag decide before anything is locked;
 *  - recovery: node a runs in a child process (forked before any thread
 *    exists here), writes and fsyncs, and is killed with SIGKILL; node b
 *    blocks on a's locks until a's lease (1.5 s) has expired, replays a's
 *    journal (its recoveries counter grows) and then sees exactly what a
 *    fsync'ed; a mounts again under its own name and sees the same; fsck
 *    is clean;
 *  - withdraw: a journal write of node a fails after a committed work that
 *    is in its journal only; a turns read-only, fences its device and
 *    keeps its locks; b waits for a's lease and replays a's journal, then
 *    sees what a committed and not what failed; fsck is clean; the same
 *    when one of a's queued data writes fails after its write returned;
 *  - a stale writer: a stopped past its lease wakes after b replayed its
 *    journal and syncs at once: it writes nothing (the lease is checked at
 *    every write), and b's work stands a's next mount.
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

#define KiB (1ull << 10)
#define MiB (1ull << 20)
#define TABLE "unit:cluster"
#define MAXN 3

static const struct shoal_ctx root_ctx = { .c_uid = 0, .c_gid = 0, .c_pid = 1 };

/* --- the cluster: lockd, image, nodes ------------------------------------------------ */

struct cluster {
	char c_dir[200];
	char c_sock[220];
	char c_lock[240]; /* "shoal:unix:..." */
	char *c_img;
	struct lockd *c_lockd;
	struct shoal_fs *c_fs[MAXN];
	int c_n;
	uint32_t c_rgcount; /* resource groups of the image */
};

static int verbose(void)
{
	return getenv("SHOAL_TEST_VERBOSE") != NULL;
}

/* lockd's recent log lines, for tests that wait for one (lockd_saw) */
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char log_ring[64][200];
static unsigned log_n;

static void lockd_log(void *arg, int prio, const char *line)
{
	(void)arg;
	(void)prio;
	if (verbose())
		fprintf(stderr, "  lockd: %s\n", line);
	pthread_mutex_lock(&log_mu);
	snprintf(log_ring[log_n++ % 64], sizeof(log_ring[0]), "%s", line);
	pthread_mutex_unlock(&log_mu);
}

/* Did lockd log a line containing needle (among its last 64)? */
static int lockd_saw(const char *needle)
{
	int found = 0;

	pthread_mutex_lock(&log_mu);
	for (unsigned i = log_n > 64 ? log_n - 64 : 0; i < log_n && !found; i++)
		found = strstr(log_ring[i % 64], needle) != NULL;
	pthread_mutex_unlock(&log_mu);
	return found;
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

/* Temp dirs still there at exit (a failed test jumps past cl_fini): removed then. */
static char live_dirs[16][200];

static void rm_live_dirs(void)
{
	char p[260];
	for (int i = 0; i < 16; i++) {
		if (!live_dirs[i][0])
			continue;
		snprintf(p, sizeof(p), "%.199s/lockd.sock", live_dirs[i]);
		unlink(p);
		snprintf(p, sizeof(p), "%.199s/fsck.out", live_dirs[i]);
		unlink(p);
		rmdir(live_dirs[i]);
	}
}

static void track_dir(const char *dir, int add)
{
	static int registered;
	if (!registered) {
		atexit(rm_live_dirs);
		registered = 1;
	}
	for (int i = 0; i < 16; i++)
		if (add ? !live_dirs[i][0] : !strcmp(live_dirs[i], dir)) {
			if (add)
				snprintf(live_dirs[i], sizeof(live_dirs[i]), "%s", dir);
			else
				live_dirs[i][0] = '\0';
			return;
		}
}

/* Make the temp dir and the image (3 journals of 8 MiB, table TABLE,
 * blocks of bsize bytes, 0: the default). */
static void cl_image_bs(struct cluster *c, uint32_t bsize)
{
	const char *tmp = getenv("TMPDIR");
	struct shoal_format_opts fo = {
		.fo_bsize = bsize, .fo_journals = MAXN, .fo_jbytes = 8 * MiB,
		.fo_locktable = TABLE,
	};
	struct shoal_format_info info;
	struct shoal_dev *dev;

	memset(c, 0, sizeof(*c));
	snprintf(c->c_dir, sizeof(c->c_dir), "%s/shoal-cluster-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	assert_non_null(mkdtemp(c->c_dir));
	track_dir(c->c_dir, 1);
	snprintf(c->c_sock, sizeof(c->c_sock), "%s/lockd.sock", c->c_dir);
	snprintf(c->c_lock, sizeof(c->c_lock), "shoal:unix:%s", c->c_sock);
	c->c_img = tu_tmpimage(512 * MiB);
	assert_int_equal(dev_open(c->c_img, 0, &dev), 0);
	assert_int_equal(shoal_format(dev, &fo, &info), 0);
	c->c_rgcount = info.fi_rgcount;
	dev_close(dev);
}

static void cl_image(struct cluster *c)
{
	cl_image_bs(c, 0);
}

static void cl_lockd_start(struct cluster *c, uint32_t lease_ms)
{
	pthread_mutex_lock(&log_mu); /* lockd_saw sees this lockd's lines only */
	log_n = 0;
	pthread_mutex_unlock(&log_mu);
	char listen[240], err[256];
	struct lockd_config cfg = { .nlisten = 1, .lease_ms = lease_ms, .log = lockd_log };
	int rc;

	snprintf(listen, sizeof(listen), "unix:%s", c->c_sock);
	cfg.listen[0] = listen;
	rc = lockd_start(&cfg, &c->c_lockd, err, sizeof(err));
	if (rc)
		fail_msg("lockd_start: %s", err);
}

/* Mount node `name` on dev, a device handle the mount owns once it
 * succeeds: 0 and *out, or the error (why printed). */
static int node_mount_dev(struct cluster *c, const char *name, struct shoal_dev *dev,
			  struct shoal_fs **out)
{
	struct shoal_mount_opts mo = {
		.mo_lock = c->c_lock, .mo_node = name, .mo_journal = -1, .mo_hold_ms = 20,
		.mo_commit_secs = 1, /* statfs sees other nodes' changes within commit + 1 s */
	};
	int err = shoal_mount(dev, &mo, out);

	if (err && verbose())
		fprintf(stderr, "  mount of node %s: %s\n", name, shoal_mount_error());
	return err;
}

/* Mount node `name` on the image: 0 and *out, or the error (why printed). */
static int node_mount(struct cluster *c, const char *name, struct shoal_fs **out)
{
	struct shoal_dev *dev;
	int err;

	assert_int_equal(dev_open(c->c_img, 0, &dev), 0);
	err = node_mount_dev(c, name, dev, out);
	if (err)
		dev_close(dev);
	return err;
}

/* node_mount_dev that fails the test if the mount fails. */
static struct shoal_fs *node_mount_on(struct cluster *c, const char *name, struct shoal_dev *dev)
{
	struct shoal_fs *fs;

	if (node_mount_dev(c, name, dev, &fs))
		fail_msg("mount of node %s: %s", name, shoal_mount_error());
	return fs;
}

static void cl_start(struct cluster *c, int n, uint32_t lease_ms)
{
	static const char *const names[MAXN] = { "a", "b", "c" };

	cl_image(c);
	cl_lockd_start(c, lease_ms);
	for (int i = 0; i < n; i++) {
		int err = node_mount(c, names[i], &c->c_fs[i]);
		if (err)
			fail_msg("mount of node %s: %s", names[i], shoal_mount_error());
	}
	c->c_n = n;
}

/* Every node looks at the root once: the tests that are not about a node's
 * first look after its mount (test_first_look) start from there. */
static void cl_touch_root(struct cluster *c)
{
	struct stat st;
	for (int i = 0; i < c->c_n; i++)
		assert_int_equal(shoal_getattr(c->c_fs[i], shoal_root(c->c_fs[i]), &st), 0);
}

/* Two nodes a and b, started and past their first look at the root: the
 * root's inode number. */
static uint64_t cl_start_ab(struct cluster *c, uint32_t lease_ms, struct shoal_fs **a,
			    struct shoal_fs **b)
{
	cl_start(c, 2, lease_ms);
	*a = c->c_fs[0];
	*b = c->c_fs[1];
	cl_touch_root(c);
	return shoal_root(*a);
}

static void cl_unmount_all(struct cluster *c)
{
	for (int i = 0; i < c->c_n; i++) {
		if (c->c_fs[i])
			assert_int_equal(shoal_unmount(c->c_fs[i]), 0);
		c->c_fs[i] = NULL;
	}
}

static void cl_lockd_stop(struct cluster *c)
{
	if (c->c_lockd)
		lockd_stop(c->c_lockd);
	c->c_lockd = NULL;
}

/* After everything is unmounted and lockd is gone. */
static void cl_fini(struct cluster *c)
{
	cl_lockd_stop(c);
	unlink(c->c_sock);
	rmdir(c->c_dir);
	track_dir(c->c_dir, 0);
	tu_rmimage(c->c_img);
	c->c_img = NULL;
}

/* The fsck.shoal of this build: next to the test program's directory
 * (build/tests/.. = build), else in $SHOAL_BUILD; 0 if found. */
static int find_fsck(char *path, size_t len)
{
	char exe[PATH_MAX];
	const char *b = getenv("SHOAL_BUILD");
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	if (n > 0) {
		exe[n] = '\0';
		*strrchr(exe, '/') = '\0';
		snprintf(path, len, "%s/../fsck.shoal", exe);
		if (!access(path, X_OK))
			return 0;
	}
	if (b && *b) {
		snprintf(path, len, "%s/fsck.shoal", b);
		if (!access(path, X_OK))
			return 0;
	}
	return -1;
}

/* fsck.shoal -n on the image must be clean (exit 0); skipped without the
 * binary.  On failure its last 20 lines (but the pass headers) go to stderr. */
static void cl_fsck(struct cluster *c)
{
	char path[PATH_MAX + 32], out[300], cmd[2 * PATH_MAX + 400], line[512], tail[20][512];
	unsigned nl = 0;
	FILE *f;
	int rc;

	if (find_fsck(path, sizeof(path))) {
		fprintf(stderr, "  SKIP fsck.shoal -n: no fsck.shoal next to the test or in "
				"$SHOAL_BUILD\n");
		return;
	}
	snprintf(out, sizeof(out), "%s/fsck.out", c->c_dir);
	snprintf(cmd, sizeof(cmd), "'%s' -n '%s' >'%s' 2>&1", path, c->c_img, out);
	rc = system(cmd);
	if (rc != 0 && (f = fopen(out, "r"))) {
		while (fgets(line, sizeof(line), f))
			if (strncmp(line, "Pass ", 5))
				snprintf(tail[nl++ % 20], sizeof(tail[0]), "%s", line);
		fclose(f);
		for (unsigned i = nl > 20 ? nl - 20 : 0; i < nl; i++)
			fprintf(stderr, "  fsck: %s", tail[i % 20]);
	}
	unlink(out);
	if (rc != 0)
		fail_msg("fsck.shoal -n %s: exit status %d", c->c_img,
			 WIFEXITED(rc) ? WEXITSTATUS(rc) : -1);
}

/* --- small helpers on one node ------------------------------------------------------- */

static void fill_pattern(uint8_t *buf, size_t len, uint64_t off, unsigned seed)
{
	for (size_t i = 0; i < len; i++) {
		uint64_t x = (off + i) * 2654435761u + seed * 40503u + (seed >> 7);
		buf[i] = (uint8_t)(x ^ (x >> 13) ^ (x >> 21) ^ seed);
	}
}

/* The inode of name in parent, or -errno; no reference kept. */
static int64_t lookup_ino(struct shoal_fs *fs, uint64_t parent, const char *name)
{
	struct stat st;
	int err = shoal_lookup(fs, parent, name, &st);
	if (err)
		return err;
	shoal_forget(fs, st.st_ino, 1);
	return (int64_t)st.st_ino;
}

static uint64_t must_lookup_(struct shoal_fs *fs, uint64_t parent, const char *name, int line)
{
	int64_t ino = lookup_ino(fs, parent, name);
	if (ino < 0)
		fail_msg("line %d: lookup %s: %s", line, name, strerror((int)-ino));
	return (uint64_t)ino;
}
#define must_lookup(fs, parent, name) must_lookup_(fs, parent, name, __LINE__)

static uint64_t mkdir_(struct shoal_fs *fs, uint64_t parent, const char *name)
{
	struct stat st;
	assert_int_equal(shoal_mkdir(fs, &root_ctx, parent, name, 0755, &st), 0);
	shoal_forget(fs, st.st_ino, 1);
	return st.st_ino;
}

/* Create name with len bytes of pattern seed (written in pieces), close it. */
static uint64_t mkfile(struct shoal_fs *fs, uint64_t parent, const char *name, size_t len,
		       unsigned seed)
{
	struct stat st;
	uint8_t *buf = malloc(len ? len : 1);

	assert_non_null(buf);
	fill_pattern(buf, len, 0, seed);
	assert_int_equal(shoal_create(fs, &root_ctx, parent, name, 0644, O_RDWR, &st), 0);
	for (size_t off = 0; off < len; off += 128 * KiB) {
		size_t n = len - off < 128 * KiB ? len - off : 128 * KiB;
		assert_int_equal(shoal_write(fs, &root_ctx, st.st_ino, buf + off, n, off, O_RDWR),
				 (ssize_t)n);
	}
	assert_int_equal(shoal_release(fs, st.st_ino, O_RDWR), 0);
	shoal_forget(fs, st.st_ino, 1);
	free(buf);
	return st.st_ino;
}

/* Does ino read exactly len bytes of pattern seed?  0 or a description in why. */
static int check_pattern(struct shoal_fs *fs, uint64_t ino, size_t len, unsigned seed, char *why,
			 size_t whylen)
{
	uint8_t *got = malloc(len + 4096), *want = malloc(len ? len : 1);
	struct stat st;
	ssize_t n;
	size_t done = 0;
	int bad = 0;

	if (!got || !want) {
		snprintf(why, whylen, "out of memory");
		free(got);
		free(want);
		return 1;
	}
	if (shoal_getattr(fs, ino, &st) || (size_t)st.st_size != len) {
		snprintf(why, whylen, "inode %llu: size %lld, want %zu", (unsigned long long)ino,
			 (long long)st.st_size, len);
		bad = 1;
		goto out;
	}
	while (done < len + 1) {
		n = shoal_read(fs, ino, got + done, len + 4096 - done, done, O_RDONLY);
		if (n < 0) {
			snprintf(why, whylen, "inode %llu: read at %zu: %s", (unsigned long long)ino,
				 done, strerror((int)-n));
			bad = 1;
			goto out;
		}
		if (n == 0)
			break;
		done += (size_t)n;
	}
	fill_pattern(want, len, 0, seed);
	if (done != len) {
		snprintf(why, whylen, "inode %llu: read %zu bytes of %zu", (unsigned long long)ino, done,
			 len);
		bad = 1;
	} else if (memcmp(got, want, len)) {
		size_t i = 0;
		while (got[i] == want[i])
			i++;
		snprintf(why, whylen, "inode %llu: bytes differ from offset %zu (of %zu)",
			 (unsigned long long)ino, i, len);
		bad = 1;
	}
out:
	free(got);
	free(want);
	return bad;
}

static void assert_pattern(struct shoal_fs *fs, uint64_t ino, size_t len, unsigned seed)
{
	char why[256];
	if (check_pattern(fs, ino, len, seed, why, sizeof(why)))
		fail_msg("%s", why);
}

static uint64_t free_blocks(struct shoal_fs *fs)
{
	struct statvfs sv;
	assert_int_equal(shoal_statfs(fs, &sv), 0);
	return sv.f_bfree;
}

/* Wait up to 5 s (statfs lags by commit + 1 s, docs/LOCKING.md) until the
 * free blocks fs sees satisfy lo <= free <= hi; the last value seen. */
static uint64_t free_blocks_wait(struct shoal_fs *fs, uint64_t lo, uint64_t hi)
{
	uint64_t fr = 0;
	for (int i = 0; i < 50; i++) {
		fr = free_blocks(fs);
		if (fr >= lo && fr <= hi)
			break;
		sleep_ms(100);
	}
	return fr;
}

static int dir_has(struct shoal_fs *fs, uint64_t dir, const char *name, uint64_t *ino)
{
	struct tc_rd r;
	struct tc_dent *d;
	int found;

	tc_read_dir(fs, dir, 0, &r);
	tc_rd_sort_unique(&r);
	d = tc_rd_find(&r, name);
	found = d != NULL;
	if (d && ino)
		*ino = d->d_ino;
	free(r.r_ents);
	return found;
}

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
	uint64_t root, dir, f1, f2;
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
		cmocka_unit_test(test_parallel_mount),
		cmocka_unit_test(test_first_look),
		cmocka_unit_test(test_coherence),
		cmocka_unit_test(test_unlink_open_elsewhere),
		cmocka_unit_test(test_unlink_made_elsewhere),
		cmocka_unit_test(test_concurrent_alloc),
		cmocka_unit_test(test_read_never_ex),
		cmocka_unit_test(test_kept_atime_after_change),
		cmocka_unit_test(test_free_takes_only_its_groups),
	};
	signal(SIGPIPE, SIG_IGN);
	if (getenv("SHOAL_TEST_FILTER")) /* e.g. SHOAL_TEST_FILTER=test_coherence */
		cmocka_set_test_filter(getenv("SHOAL_TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}

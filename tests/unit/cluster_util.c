/*
 * cluster_util.c - helpers of the in-process cluster tests (cluster_util.h).
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

const struct shoal_ctx root_ctx = { .c_uid = 0, .c_gid = 0, .c_pid = 1 };

/* --- the cluster: lockd, image, nodes ------------------------------------------------ */


int verbose(void)
{
	return getenv("SHOAL_TEST_VERBOSE") != NULL;
}

/* lockd's recent log lines, for tests that wait for one (lockd_saw) */
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char log_ring[64][200];
static unsigned log_n;

void lockd_log(void *arg, int prio, const char *line)
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
int lockd_saw(const char *needle)
{
	int found = 0;

	pthread_mutex_lock(&log_mu);
	for (unsigned i = log_n > 64 ? log_n - 64 : 0; i < log_n && !found; i++)
		found = strstr(log_ring[i % 64], needle) != NULL;
	pthread_mutex_unlock(&log_mu);
	return found;
}

uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void sleep_ms(unsigned ms)
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
void cl_image_bs(struct cluster *c, uint32_t bsize)
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

void cl_image(struct cluster *c)
{
	cl_image_bs(c, 0);
}

void cl_lockd_start(struct cluster *c, uint32_t lease_ms)
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
int node_mount_dev(struct cluster *c, const char *name, struct shoal_dev *dev,
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
int node_mount(struct cluster *c, const char *name, struct shoal_fs **out)
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
struct shoal_fs *node_mount_on(struct cluster *c, const char *name, struct shoal_dev *dev)
{
	struct shoal_fs *fs;

	if (node_mount_dev(c, name, dev, &fs))
		fail_msg("mount of node %s: %s", name, shoal_mount_error());
	return fs;
}

void cl_start(struct cluster *c, int n, uint32_t lease_ms)
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
void cl_touch_root(struct cluster *c)
{
	struct stat st;
	for (int i = 0; i < c->c_n; i++)
		assert_int_equal(shoal_getattr(c->c_fs[i], shoal_root(c->c_fs[i]), &st), 0);
}

/* Two nodes a and b, started and past their first look at the root: the
 * root's inode number. */
uint64_t cl_start_ab(struct cluster *c, uint32_t lease_ms, struct shoal_fs **a,
			    struct shoal_fs **b)
{
	cl_start(c, 2, lease_ms);
	*a = c->c_fs[0];
	*b = c->c_fs[1];
	cl_touch_root(c);
	return shoal_root(*a);
}

void cl_unmount_all(struct cluster *c)
{
	for (int i = 0; i < c->c_n; i++) {
		if (c->c_fs[i])
			assert_int_equal(shoal_unmount(c->c_fs[i]), 0);
		c->c_fs[i] = NULL;
	}
}

void cl_lockd_stop(struct cluster *c)
{
	if (c->c_lockd)
		lockd_stop(c->c_lockd);
	c->c_lockd = NULL;
}

/* After everything is unmounted and lockd is gone. */
void cl_fini(struct cluster *c)
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
void cl_fsck(struct cluster *c)
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

void fill_pattern(uint8_t *buf, size_t len, uint64_t off, unsigned seed)
{
	for (size_t i = 0; i < len; i++) {
		uint64_t x = (off + i) * 2654435761u + seed * 40503u + (seed >> 7);
		buf[i] = (uint8_t)(x ^ (x >> 13) ^ (x >> 21) ^ seed);
	}
}

/* The inode of name in parent, or -errno; no reference kept. */
int64_t lookup_ino(struct shoal_fs *fs, uint64_t parent, const char *name)
{
	struct stat st;
	int err = shoal_lookup(fs, parent, name, &st);
	if (err)
		return err;
	shoal_forget(fs, st.st_ino, 1);
	return (int64_t)st.st_ino;
}

uint64_t must_lookup_(struct shoal_fs *fs, uint64_t parent, const char *name, int line)
{
	int64_t ino = lookup_ino(fs, parent, name);
	if (ino < 0)
		fail_msg("line %d: lookup %s: %s", line, name, strerror((int)-ino));
	return (uint64_t)ino;
}

uint64_t mkdir_(struct shoal_fs *fs, uint64_t parent, const char *name)
{
	struct stat st;
	assert_int_equal(shoal_mkdir(fs, &root_ctx, parent, name, 0755, &st), 0);
	shoal_forget(fs, st.st_ino, 1);
	return st.st_ino;
}

/* Create name with len bytes of pattern seed (written in pieces), close it. */
uint64_t mkfile(struct shoal_fs *fs, uint64_t parent, const char *name, size_t len,
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
int check_pattern(struct shoal_fs *fs, uint64_t ino, size_t len, unsigned seed, char *why,
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

void assert_pattern(struct shoal_fs *fs, uint64_t ino, size_t len, unsigned seed)
{
	char why[256];
	if (check_pattern(fs, ino, len, seed, why, sizeof(why)))
		fail_msg("%s", why);
}

uint64_t free_blocks(struct shoal_fs *fs)
{
	struct statvfs sv;
	assert_int_equal(shoal_statfs(fs, &sv), 0);
	return sv.f_bfree;
}

/* Wait up to 5 s (statfs lags by commit + 1 s, docs/LOCKING.md) until the
 * free blocks fs sees satisfy lo <= free <= hi; the last value seen. */
uint64_t free_blocks_wait(struct shoal_fs *fs, uint64_t lo, uint64_t hi)
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

int dir_has(struct shoal_fs *fs, uint64_t dir, const char *name, uint64_t *ino)
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


/*
 * test_falloc.c - fallocate(2) modes of libshoal as ext4 has them
 * (ext4_fallocate, man 2 fallocate), called on a mounted image without
 * FUSE: FALLOC_FL_ZERO_RANGE with and without KEEP_SIZE,
 * FALLOC_FL_COLLAPSE_RANGE and FALLOC_FL_INSERT_RANGE (which Linux's FUSE
 * does not pass on: libshoal has them for the day it does), and each
 * mode's error cases; and a random run of every mode with writes and
 * truncates against a model (SHOAL_FALLOC_SEED, SHOAL_FALLOC_STEPS: 400 by
 * default; printed).  After each test the tree is walked (treecheck.h,
 * blocks in use exact) and fsck.shoal -n must find the image clean.
 * (Allocation and punching: test_core_ops test_fallocate_punch.)
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "dev.h"
#include "shoal/ondisk.h"
#include "shoal/shoal.h"
#include "testutil.h"
#include "treecheck.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)

static const struct shoal_ctx root_ctx = { .c_uid = 0, .c_gid = 0, .c_pid = 1 };

struct env {
	char *e_path;
	struct shoal_fs *e_fs;
	uint64_t e_root;
	uint64_t e_bs;
};

static void env_mount(struct env *e)
{
	struct shoal_mount_opts mo = { .mo_commit_secs = 3600 };
	struct shoal_dev *dev;

	assert_int_equal(dev_open(e->e_path, 0, &dev), 0);
	assert_int_equal(shoal_mount(dev, &mo, &e->e_fs), 0);
	e->e_root = shoal_root(e->e_fs);
	e->e_bs = shoal_bsize(e->e_fs);
}

static void env_init(struct env *e)
{
	struct shoal_format_opts fo = { .fo_journals = 1, .fo_jbytes = 2 * MiB };
	struct shoal_dev *dev;

	e->e_path = tu_tmpimage(64 * MiB);
	assert_int_equal(dev_open(e->e_path, 0, &dev), 0);
	assert_int_equal(shoal_format(dev, &fo, NULL), 0);
	dev_close(dev);
	env_mount(e);
}

static void env_remount(struct env *e)
{
	assert_int_equal(shoal_unmount(e->e_fs), 0);
	env_mount(e);
}

/* fsck.shoal -n of this build ($SHOAL_FSCK, set by ctest) must pass. */
static void fsck_clean(const char *img)
{
	const char *fsck = getenv("SHOAL_FSCK");
	char cmd[2 * PATH_MAX + 64];
	int rc;

	if (!fsck || access(fsck, X_OK)) {
		fprintf(stderr, "  SKIP fsck.shoal -n: $SHOAL_FSCK not set\n");
		return;
	}
	snprintf(cmd, sizeof(cmd), "'%s' -n '%s' >&2", fsck, img);
	rc = system(cmd);
	if (rc != 0)
		fail_msg("fsck.shoal -n %s: exit status %d", img, WIFEXITED(rc) ? WEXITSTATUS(rc) : -1);
}

/* Walk the tree, unmount, fsck, free the image. */
static void env_fini(struct env *e)
{
	tc_check_tree(e->e_fs, 1);
	assert_int_equal(shoal_unmount(e->e_fs), 0);
	fsck_clean(e->e_path);
	tu_rmimage(e->e_path);
}

static void fill_pattern(uint8_t *buf, size_t len, uint64_t off, unsigned seed)
{
	for (size_t i = 0; i < len; i++) {
		uint64_t x = (off + i) * 2654435761u + seed * 40503u;
		buf[i] = (uint8_t)(x ^ (x >> 13) ^ (x >> 21));
	}
}

static uint64_t mkfile(struct env *e, const char *name)
{
	struct stat st;
	assert_int_equal(shoal_create(e->e_fs, &root_ctx, e->e_root, name, 0644, O_RDWR, &st), 0);
	assert_int_equal(shoal_release(e->e_fs, st.st_ino, O_RDWR), 0);
	shoal_forget(e->e_fs, st.st_ino, 1);
	return st.st_ino;
}

static void write_pattern(struct env *e, uint64_t ino, uint64_t off, size_t len, unsigned seed)
{
	uint8_t *buf = malloc(len);
	assert_non_null(buf);
	fill_pattern(buf, len, off, seed);
	assert_int_equal(shoal_write(e->e_fs, &root_ctx, ino, buf, len, off, O_RDWR), (ssize_t)len);
	free(buf);
}

/*
 * A model of the file's bytes: the test applies each change to it too, and
 * check_model reads the whole file and compares.
 */
struct model {
	uint8_t *m_buf;
	uint64_t m_size, m_cap;
};

static void model_grow(struct model *m, uint64_t size)
{
	if (size > m->m_cap) {
		m->m_buf = realloc(m->m_buf, size);
		assert_non_null(m->m_buf);
		memset(m->m_buf + m->m_cap, 0, size - m->m_cap);
		m->m_cap = size;
	}
	if (size > m->m_size)
		memset(m->m_buf + m->m_size, 0, size - m->m_size);
	m->m_size = size;
}

static void model_write(struct env *e, struct model *m, uint64_t ino, uint64_t off, size_t len,
			unsigned seed)
{
	write_pattern(e, ino, off, len, seed);
	if (off + len > m->m_size)
		model_grow(m, off + len);
	fill_pattern(m->m_buf + off, len, off, seed);
}

static void check_model(struct env *e, struct model *m, uint64_t ino)
{
	struct stat st;
	uint8_t *buf = malloc(m->m_size + 1);

	assert_non_null(buf);
	assert_int_equal(shoal_getattr(e->e_fs, ino, &st), 0);
	assert_int_equal(st.st_size, m->m_size);
	assert_int_equal(shoal_read(e->e_fs, ino, buf, m->m_size + 1, 0, O_RDONLY),
			 (ssize_t)m->m_size);
	for (uint64_t i = 0; i < m->m_size; i++)
		if (buf[i] != m->m_buf[i])
			fail_msg("byte %llu: 0x%02x, want 0x%02x", (unsigned long long)i, buf[i],
				 m->m_buf[i]);
	free(buf);
}

static uint64_t bfree(struct env *e)
{
	struct statvfs sv;
	assert_int_equal(shoal_statfs(e->e_fs, &sv), 0);
	return sv.f_bfree;
}

static uint64_t nblocks(struct env *e, uint64_t ino)
{
	struct stat st;
	assert_int_equal(shoal_getattr(e->e_fs, ino, &st), 0);
	return (uint64_t)st.st_blocks;
}

/* ZERO_RANGE in place, then the model too; size as ext4 (KEEP_SIZE or not). */
static void zero(struct env *e, struct model *m, uint64_t ino, int keep, uint64_t off,
		 uint64_t len)
{
	assert_int_equal(shoal_fallocate(e->e_fs, ino, FALLOC_FL_ZERO_RANGE |
							      (keep ? FALLOC_FL_KEEP_SIZE : 0),
					 off, len),
			 0);
	uint64_t end = off + len;
	if (!keep && end > m->m_size)
		model_grow(m, end);
	if (off < m->m_size)
		memset(m->m_buf + off, 0, (end < m->m_size ? end : m->m_size) - off);
}

static void test_zero_range_errors(void **state)
{
	struct env e;
	(void)state;
	env_init(&e);
	uint64_t f = mkfile(&e, "f");
	struct stat st;

	write_pattern(&e, f, 0, 3 * e.e_bs, 1);
	assert_int_equal(shoal_fallocate(e.e_fs, f, FALLOC_FL_ZERO_RANGE, 0, 0), -EINVAL);
	assert_int_equal(shoal_fallocate(e.e_fs, f, FALLOC_FL_ZERO_RANGE | FALLOC_FL_PUNCH_HOLE |
							   FALLOC_FL_KEEP_SIZE,
					 0, e.e_bs),
			 -EOPNOTSUPP);
	assert_int_equal(shoal_fallocate(e.e_fs, f, FALLOC_FL_ZERO_RANGE, UINT64_MAX - 10, 100),
			 -EFBIG);
	assert_int_equal(shoal_mkdir(e.e_fs, &root_ctx, e.e_root, "d", 0755, &st), 0);
	shoal_forget(e.e_fs, st.st_ino, 1);
	assert_int_equal(shoal_fallocate(e.e_fs, st.st_ino, FALLOC_FL_ZERO_RANGE, 0, 10), -EISDIR);
	/* append-only: only plain allocation is allowed (vfs_fallocate); immutable: nothing */
	assert_int_equal(shoal_setflags(e.e_fs, &root_ctx, f, FS_APPEND_FL), 0);
	assert_int_equal(shoal_fallocate(e.e_fs, f, FALLOC_FL_ZERO_RANGE, 0, 10), -EPERM);
	assert_int_equal(shoal_fallocate(e.e_fs, f, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, 0,
					 10),
			 -EPERM);
	assert_int_equal(shoal_fallocate(e.e_fs, f, FALLOC_FL_KEEP_SIZE, 3 * e.e_bs, 10), 0);
	assert_int_equal(shoal_setflags(e.e_fs, &root_ctx, f, FS_IMMUTABLE_FL), 0);
	assert_int_equal(shoal_fallocate(e.e_fs, f, FALLOC_FL_ZERO_RANGE, 0, 10), -EPERM);
	assert_int_equal(shoal_setflags(e.e_fs, &root_ctx, f, 0), 0);
	env_fini(&e);
}

static void test_zero_range(void **state)
{
	struct env e;
	struct model m = { 0 };
	(void)state;
	env_init(&e);
	uint64_t bs = e.e_bs, per = (bs - 32) / 8; /* pointers per indirect block */
	uint64_t f = mkfile(&e, "f");

	model_write(&e, &m, f, 0, (per + 40) * bs, 1); /* two levels of the map */
	uint64_t used = nblocks(&e, f), before = bfree(&e);
	/* aligned, in the middle: zeros, size and allocation unchanged */
	zero(&e, &m, f, 0, 4 * bs, 8 * bs);
	check_model(&e, &m, f);
	assert_int_equal(nblocks(&e, f), used);
	assert_int_equal(bfree(&e), before);
	/* unaligned edges, and across the first indirect block's boundary */
	zero(&e, &m, f, 1, 20 * bs + 100, 3 * bs + 7);
	zero(&e, &m, f, 0, (per - 3) * bs - 5, 7 * bs + 10);
	/* inside one block */
	zero(&e, &m, f, 0, 30 * bs + 10, 20);
	check_model(&e, &m, f);
	assert_int_equal(bfree(&e), before);

	/* over a hole: the hole is allocated (man 2 fallocate: "blocks are
	 * preallocated for the regions that span the holes") and reads zeros */
	model_write(&e, &m, f, (per + 100) * bs, bs, 2); /* leaves a hole of 60 blocks */
	before = bfree(&e);
	zero(&e, &m, f, 0, (per + 50) * bs, 10 * bs);
	check_model(&e, &m, f);
	assert_int_equal(before - bfree(&e), 10);

	/* past the end, growing the file (no KEEP_SIZE): allocated, size grows */
	uint64_t sz = m.m_size;
	before = bfree(&e);
	zero(&e, &m, f, 0, sz - 100, 4 * bs);
	check_model(&e, &m, f);
	assert_int_equal(m.m_size, sz - 100 + 4 * bs);
	assert_true(before - bfree(&e) >= 3);
	/* ... and with KEEP_SIZE: blocks beyond the end, size unchanged */
	sz = m.m_size;
	before = bfree(&e);
	zero(&e, &m, f, 1, sz + 10 * bs, 8 * bs); /* unaligned: 9 blocks */
	check_model(&e, &m, f);
	assert_int_equal(before - bfree(&e), 9);
	/* growing into those blocks later reads zeros (never stale bytes) */
	model_grow(&m, sz + 20 * bs);
	assert_int_equal(shoal_fallocate(e.e_fs, f, 0, sz, 20 * bs), 0);
	check_model(&e, &m, f);

	env_remount(&e);
	check_model(&e, &m, f);
	free(m.m_buf);
	env_fini(&e);
}

static void test_zero_range_inline(void **state)
{
	struct env e;
	struct model m = { 0 };
	(void)state;
	env_init(&e);
	uint64_t f = mkfile(&e, "f");

	model_write(&e, &m, f, 0, 1000, 3);
	zero(&e, &m, f, 0, 100, 200);
	check_model(&e, &m, f);
	zero(&e, &m, f, 1, 900, 200); /* past the end, KEEP_SIZE */
	check_model(&e, &m, f);
	zero(&e, &m, f, 0, 950, 100); /* grows the inline file */
	check_model(&e, &m, f);
	zero(&e, &m, f, 0, 500, 3 * e.e_bs); /* beyond the inline payload */
	check_model(&e, &m, f);
	env_remount(&e);
	check_model(&e, &m, f);
	free(m.m_buf);
	env_fini(&e);
}


/* COLLAPSE_RANGE or INSERT_RANGE in place and in the model. */
static void shift(struct env *e, struct model *m, uint64_t ino, int mode, uint64_t off,
		  uint64_t len)
{
	assert_int_equal(shoal_fallocate(e->e_fs, ino, mode, off, len), 0);
	uint64_t old = m->m_size;
	if (mode == FALLOC_FL_COLLAPSE_RANGE) {
		memmove(m->m_buf + off, m->m_buf + off + len, old - off - len);
		m->m_size = old - len;
	} else {
		model_grow(m, old + len);
		memmove(m->m_buf + off + len, m->m_buf + off, old - off);
		memset(m->m_buf + off, 0, len);
	}
}

static void test_collapse_insert_errors(void **state)
{
	struct env e;
	struct stat st;
	(void)state;
	env_init(&e);
	uint64_t bs = e.e_bs, f = mkfile(&e, "f");
	int C = FALLOC_FL_COLLAPSE_RANGE, I = FALLOC_FL_INSERT_RANGE;

	write_pattern(&e, f, 0, 10 * bs + 5, 1);
	/* one mode at a time; never with KEEP_SIZE (vfs_fallocate) */
	assert_int_equal(shoal_fallocate(e.e_fs, f, C | FALLOC_FL_KEEP_SIZE, 0, bs), -EOPNOTSUPP);
	assert_int_equal(shoal_fallocate(e.e_fs, f, I | FALLOC_FL_KEEP_SIZE, 0, bs), -EOPNOTSUPP);
	assert_int_equal(shoal_fallocate(e.e_fs, f, C | I, 0, bs), -EOPNOTSUPP);
	assert_int_equal(shoal_fallocate(e.e_fs, f, C | FALLOC_FL_PUNCH_HOLE, 0, bs), -EOPNOTSUPP);
	/* offset and length multiples of the block size (ext4: EINVAL) */
	assert_int_equal(shoal_fallocate(e.e_fs, f, C, 100, bs), -EINVAL);
	assert_int_equal(shoal_fallocate(e.e_fs, f, C, 0, bs + 1), -EINVAL);
	assert_int_equal(shoal_fallocate(e.e_fs, f, I, bs, 512), -EINVAL);
	/* COLLAPSE: the range must end before the end of file */
	assert_int_equal(shoal_fallocate(e.e_fs, f, C, 8 * bs, 3 * bs), -EINVAL);
	assert_int_equal(shoal_fallocate(e.e_fs, f, C, 10 * bs, bs), -EINVAL);
	assert_int_equal(shoal_fallocate(e.e_fs, f, C, 9 * bs, bs), 0); /* ends at 10 bs < size */
	assert_int_equal(shoal_getattr(e.e_fs, f, &st), 0);
	assert_int_equal(st.st_size, 9 * bs + 5);
	/* INSERT: the offset must be inside the file; the size may not pass the maximum */
	assert_int_equal(shoal_fallocate(e.e_fs, f, I, 10 * bs, bs), -EINVAL); /* size 9 bs + 5 */
	assert_int_equal(shoal_fallocate(e.e_fs, f, I, 20 * bs, bs), -EINVAL);
	uint64_t big = ((uint64_t)INT64_MAX / bs) * bs;
	assert_int_equal(shoal_fallocate(e.e_fs, f, I, 0, big), -EFBIG);
	assert_int_equal(shoal_getattr(e.e_fs, f, &st), 0);
	assert_int_equal(st.st_size, 9 * bs + 5);
	/* a directory; append-only and immutable files */
	assert_int_equal(shoal_mkdir(e.e_fs, &root_ctx, e.e_root, "d", 0755, &st), 0);
	shoal_forget(e.e_fs, st.st_ino, 1);
	assert_int_equal(shoal_fallocate(e.e_fs, st.st_ino, C, 0, bs), -EISDIR);
	assert_int_equal(shoal_setflags(e.e_fs, &root_ctx, f, FS_APPEND_FL), 0);
	assert_int_equal(shoal_fallocate(e.e_fs, f, C, 0, bs), -EPERM);
	assert_int_equal(shoal_fallocate(e.e_fs, f, I, 0, bs), -EPERM);
	assert_int_equal(shoal_setflags(e.e_fs, &root_ctx, f, FS_IMMUTABLE_FL), 0);
	assert_int_equal(shoal_fallocate(e.e_fs, f, I, 0, bs), -EPERM);
	assert_int_equal(shoal_setflags(e.e_fs, &root_ctx, f, 0), 0);
	env_fini(&e);
}

static void test_collapse_insert(void **state)
{
	struct env e;
	struct model m = { 0 };
	(void)state;
	env_init(&e);
	uint64_t bs = e.e_bs, per = (bs - 32) / 8;
	int C = FALLOC_FL_COLLAPSE_RANGE, I = FALLOC_FL_INSERT_RANGE;
	uint64_t f = mkfile(&e, "f");

	/* two levels of the map, a hole in the middle, an unaligned end */
	model_write(&e, &m, f, 0, 100 * bs, 1);
	model_write(&e, &m, f, 300 * bs, (per + 50) * bs + 77, 2);
	uint64_t free0 = bfree(&e), used0 = nblocks(&e, f);

	shift(&e, &m, f, C, 10 * bs, 5 * bs); /* data blocks freed, the rest moves down */
	check_model(&e, &m, f);
	assert_int_equal(bfree(&e) - free0, 5);
	shift(&e, &m, f, C, 90 * bs, 100 * bs); /* across data and hole */
	check_model(&e, &m, f);
	shift(&e, &m, f, I, 20 * bs, 3 * bs); /* a hole opens, the rest moves up */
	check_model(&e, &m, f);
	shift(&e, &m, f, I, 0, per * bs); /* everything moves past an indirect block */
	check_model(&e, &m, f);
	shift(&e, &m, f, C, 0, per * bs); /* and back */
	check_model(&e, &m, f);
	/* the file's blocks are its data blocks and the indirect ones they need */
	assert_true(nblocks(&e, f) <= used0);
	/* write into the hole an insert opened, then collapse it away again */
	model_write(&e, &m, f, 20 * bs + 10, 100, 3);
	check_model(&e, &m, f);
	shift(&e, &m, f, C, 20 * bs, 3 * bs);
	check_model(&e, &m, f);

	/* KEEP_SIZE blocks beyond the end move with the rest (ext4 shifts them too) */
	uint64_t sz = m.m_size;
	assert_int_equal(shoal_fallocate(e.e_fs, f, FALLOC_FL_KEEP_SIZE, sz, 4 * bs), 0);
	shift(&e, &m, f, I, bs, 2 * bs);
	check_model(&e, &m, f);

	/* an inline file: insert at 0 moves its data into a block */
	uint64_t g = mkfile(&e, "g");
	struct model mg = { 0 };
	model_write(&e, &mg, g, 0, 1000, 4);
	shift(&e, &mg, g, I, 0, 2 * bs);
	check_model(&e, &mg, g);
	shift(&e, &mg, g, C, 0, bs);
	check_model(&e, &mg, g);

	env_remount(&e);
	check_model(&e, &m, f);
	check_model(&e, &mg, g);
	free(m.m_buf);
	free(mg.m_buf);
	env_fini(&e);
}

/*
 * Random steps on two files, each checked against the model after every
 * step: writes, truncates, punches, zero ranges (with and without
 * KEEP_SIZE), collapses and inserts at random block-aligned places, and
 * allocations beyond the end; a remount halfway.  SHOAL_FALLOC_SEED and
 * SHOAL_FALLOC_STEPS (default 400) choose the run; the seed is printed.
 */
static uint64_t rnd_state;
static uint64_t rnd(uint64_t n)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 7;
	rnd_state ^= rnd_state << 17;
	return n ? rnd_state % n : 0;
}

static void test_falloc_random(void **state)
{
	struct env e;
	struct model m[2] = { { 0 }, { 0 } };
	uint64_t f[2];
	const char *sd = getenv("SHOAL_FALLOC_SEED"), *st = getenv("SHOAL_FALLOC_STEPS");
	uint64_t seed = sd ? strtoull(sd, NULL, 0) : (uint64_t)time(NULL);
	unsigned steps = st ? (unsigned)strtoul(st, NULL, 0) : 400;
	unsigned done[9] = { 0 }; /* per op: collapses 5-6, inserts 7 that ran */
	(void)state;

	fprintf(stderr, "  SHOAL_FALLOC_SEED=%llu SHOAL_FALLOC_STEPS=%u\n", (unsigned long long)seed,
		steps);
	rnd_state = seed * 2654435761u + 1;
	env_init(&e);
	uint64_t bs = e.e_bs, maxb = 700; /* blocks: past the first indirect block */
	f[0] = mkfile(&e, "r0");
	f[1] = mkfile(&e, "r1");
	for (unsigned i = 0; i < steps; i++) {
		int k = (int)rnd(2);
		struct model *mm = &m[k];
		uint64_t size = mm->m_size, nb = (size + bs - 1) / bs;
		uint64_t off = rnd(maxb * bs), len = 1 + rnd(40 * bs);
		int op = (int)rnd(9), keep = (int)rnd(2);
		uint64_t a = rnd(nb + 1) * bs, l = (1 + rnd(30)) * bs;

		if (off + len > maxb * bs)
			len = maxb * bs - off;
		if (len == 0)
			len = 1;
		switch (op) {
		case 0:
		case 1:
			if (rnd(3) == 0) /* small, often inline */
				off = rnd(3000), len = 1 + rnd(800);
			model_write(&e, mm, f[k], off, (size_t)len, 1 + i);
			break;
		case 2: {
			uint64_t to = rnd(3) ? rnd(size + 1) : rnd(maxb * bs);
			struct stat at = { .st_size = (off_t)to }, out;
			assert_int_equal(shoal_setattr(e.e_fs, &root_ctx, f[k], &at, SHOAL_SET_SIZE,
						       &out),
					 0);
			model_grow(mm, to);
			mm->m_size = to;
			break;
		}
		case 3:
			assert_int_equal(shoal_fallocate(e.e_fs, f[k],
							 FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off,
							 len),
					 0);
			if (off < size)
				memset(mm->m_buf + off, 0, (off + len < size ? off + len : size) - off);
			break;
		case 4:
			zero(&e, mm, f[k], keep, off, len);
			break;
		case 5:
		case 6:
			if (a + l < size) {
				shift(&e, mm, f[k], FALLOC_FL_COLLAPSE_RANGE, a, l);
				done[5]++;
			} else {
				assert_int_equal(shoal_fallocate(e.e_fs, f[k], FALLOC_FL_COLLAPSE_RANGE,
								 a, l),
						 -EINVAL);
			}
			break;
		case 7:
			if (a < size && (size + bs - 1) / bs + l / bs <= maxb) {
				shift(&e, mm, f[k], FALLOC_FL_INSERT_RANGE, a, l);
				done[7]++;
			} else if (a >= size) {
				assert_int_equal(shoal_fallocate(e.e_fs, f[k], FALLOC_FL_INSERT_RANGE,
								 a, l),
						 -EINVAL);
			}
			break;
		default:
			assert_int_equal(shoal_fallocate(e.e_fs, f[k], keep ? FALLOC_FL_KEEP_SIZE : 0,
							 off, len),
					 0);
			if (!keep && off + len > size)
				model_grow(mm, off + len);
			break;
		}
		check_model(&e, mm, f[k]);
		if (op != 5 && op != 6 && op != 7)
			done[op]++;
		if (i == steps / 2) {
			env_remount(&e);
			check_model(&e, &m[0], f[0]);
			check_model(&e, &m[1], f[1]);
		}
	}
	fprintf(stderr, "  %u writes, %u truncates, %u punches, %u zero ranges, %u collapses, %u inserts, "
			"%u allocations\n",
		done[0] + done[1], done[2], done[3], done[4], done[5], done[7], done[8]);
	assert_true(steps < 100 || (done[5] && done[7])); /* the shifts did run */
	free(m[0].m_buf);
	free(m[1].m_buf);
	env_fini(&e);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_zero_range_errors),
		cmocka_unit_test(test_zero_range),
		cmocka_unit_test(test_zero_range_inline),
		cmocka_unit_test(test_collapse_insert_errors),
		cmocka_unit_test(test_collapse_insert),
		cmocka_unit_test(test_falloc_random),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

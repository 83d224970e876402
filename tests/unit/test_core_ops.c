/*
 * test_core_ops.c - every operation of include/shoal/shoal.h, called on a
 * mounted image without FUSE: what it returns, what it changes, its error
 * cases, and that the change is still there after an unmount and remount.
 *
 * After most tests the whole tree is walked (check_tree): every entry that
 * readdir lists can be looked up and stat'ed with the same inode number and
 * type, every file reads to its size, link counts equal the entries that
 * name an inode, directory link counts are 2 + subdirectories, ".." names
 * the parent, and the blocks in use (statfs) equal the sum of st_blocks.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
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
#define GiB (1ull << 30)

static const struct shoal_ctx root_ctx = { .c_uid = 0, .c_gid = 0, .c_pid = 1 };
static const struct shoal_ctx user_ctx = { .c_uid = 1000, .c_gid = 1000, .c_pid = 2 };

/* --- a mounted scratch image ------------------------------------------- */

struct env {
	char *e_path;
	struct shoal_fs *e_fs;
	uint64_t e_root;
	uint32_t e_bs;
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

static void env_init(struct env *e, uint64_t size, uint64_t jbytes)
{
	struct shoal_format_opts fo = { .fo_journals = 1, .fo_jbytes = jbytes };
	struct shoal_dev *dev;

	e->e_path = tu_tmpimage(size);
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

static void env_fini(struct env *e)
{
	assert_int_equal(shoal_unmount(e->e_fs), 0);
	tu_rmimage(e->e_path);
}

/* --- helpers --------------------------------------------------------------- */

/* The clock inodes are stamped with (time() may lag it by a tick). */
static time_t now_sec(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec;
}

static void fill_pattern(uint8_t *buf, size_t len, uint64_t off, unsigned seed)
{
	for (size_t i = 0; i < len; i++) {
		uint64_t x = (off + i) * 2654435761u + seed * 40503u;
		buf[i] = (uint8_t)(x ^ (x >> 13) ^ (x >> 21));
	}
}

/* ino of name in parent, or the negative error of lookup (no reference kept). */
static int64_t lookup_ino(struct env *e, uint64_t parent, const char *name)
{
	struct stat st;
	int err = shoal_lookup(e->e_fs, parent, name, &st);
	if (err)
		return err;
	shoal_forget(e->e_fs, st.st_ino, 1);
	return (int64_t)st.st_ino;
}

/* Create and close a regular file; its inode number. */
static uint64_t mkfile(struct env *e, uint64_t parent, const char *name, mode_t mode)
{
	struct stat st;
	assert_int_equal(shoal_create(e->e_fs, &root_ctx, parent, name, mode, O_RDWR, &st), 0);
	assert_int_equal(shoal_release(e->e_fs, st.st_ino, O_RDWR), 0);
	shoal_forget(e->e_fs, st.st_ino, 1);
	return st.st_ino;
}

static uint64_t mkdirat_(struct env *e, uint64_t parent, const char *name)
{
	struct stat st;
	assert_int_equal(shoal_mkdir(e->e_fs, &root_ctx, parent, name, 0755, &st), 0);
	shoal_forget(e->e_fs, st.st_ino, 1);
	return st.st_ino;
}

static void write_all(struct env *e, uint64_t ino, const void *buf, size_t len, uint64_t off)
{
	ssize_t n = shoal_write(e->e_fs, &root_ctx, ino, buf, len, off, O_RDWR);
	assert_int_equal(n, (ssize_t)len);
}

static void write_pattern(struct env *e, uint64_t ino, uint64_t off, size_t len, unsigned seed)
{
	uint8_t *buf = malloc(len ? len : 1);
	assert_non_null(buf);
	fill_pattern(buf, len, off, seed);
	write_all(e, ino, buf, len, off);
	free(buf);
}

/* The file's bytes [off, off+len) are the pattern (seed), or zeros if seed 0. */
static void check_range(struct env *e, uint64_t ino, uint64_t off, size_t len, unsigned seed)
{
	uint8_t *buf = malloc(len), *want = malloc(len);
	assert_non_null(buf);
	assert_non_null(want);
	if (seed)
		fill_pattern(want, len, off, seed);
	else
		memset(want, 0, len);
	assert_int_equal(shoal_read(e->e_fs, ino, buf, len, off, O_RDONLY), (ssize_t)len);
	assert_memory_equal(buf, want, len);
	free(buf);
	free(want);
}

static struct stat getattr_(struct env *e, uint64_t ino)
{
	struct stat st;
	assert_int_equal(shoal_getattr(e->e_fs, ino, &st), 0);
	return st;
}

static uint64_t bfree(struct env *e)
{
	struct statvfs sv;
	assert_int_equal(shoal_statfs(e->e_fs, &sv), 0);
	return sv.f_bfree;
}

static void setsize(struct env *e, uint64_t ino, uint64_t size)
{
	struct stat a = { .st_size = (off_t)size }, st;
	assert_int_equal(shoal_setattr(e->e_fs, &root_ctx, ino, &a, SHOAL_SET_SIZE, &st), 0);
	assert_int_equal(st.st_size, (off_t)size);
}

/* --- tree checks (treecheck.h) ------------------------------------------------- */

static void read_dir(struct env *e, uint64_t ino, size_t limit, struct tc_rd *r)
{
	tc_read_dir(e->e_fs, ino, limit, r);
}

static void check_tree(struct env *e, int blocks_exact)
{
	tc_check_tree(e->e_fs, blocks_exact);
}

/* --- tests --------------------------------------------------------------------- */

static void test_create_lookup_getattr(void **state)
{
	struct env e;
	struct stat st, st2;
	time_t t0 = now_sec();
	char name[300];

	env_init(&e, 64 * MiB, 2 * MiB);
	assert_int_equal(shoal_create(e.e_fs, &user_ctx, e.e_root, "f", 0640, O_RDWR, &st), 0);
	assert_true(S_ISREG(st.st_mode));
	assert_int_equal(st.st_mode & 07777, 0640);
	assert_int_equal(st.st_uid, 1000);
	assert_int_equal(st.st_gid, 1000);
	assert_int_equal(st.st_nlink, 1);
	assert_int_equal(st.st_size, 0);
	assert_in_range(st.st_mtim.tv_sec, t0, now_sec());
	assert_int_equal(shoal_release(e.e_fs, st.st_ino, O_RDWR), 0);
	assert_int_equal(shoal_lookup(e.e_fs, e.e_root, "f", &st2), 0);
	assert_int_equal(st2.st_ino, st.st_ino);
	assert_memory_equal(&st2.st_mtim, &st.st_mtim, sizeof(st.st_mtim));
	shoal_forget(e.e_fs, st.st_ino, 2);
	assert_int_not_equal(shoal_generation(e.e_fs, st.st_ino), 0);

	/* the root directory counts its new entry */
	struct stat rst = getattr_(&e, e.e_root);
	assert_true(S_ISDIR(rst.st_mode));
	assert_int_equal(rst.st_nlink, 2);
	assert_true(rst.st_mtim.tv_sec >= t0);

	/* error cases */
	assert_int_equal(shoal_lookup(e.e_fs, e.e_root, "missing", &st2), -ENOENT);
	assert_int_equal(shoal_create(e.e_fs, &root_ctx, e.e_root, "f", 0644, O_RDWR | O_EXCL, &st2),
			 -EEXIST);
	assert_int_equal(shoal_create(e.e_fs, &root_ctx, st.st_ino, "x", 0644, O_RDWR, &st2),
			 -ENOTDIR);
	assert_int_equal(shoal_lookup(e.e_fs, st.st_ino, "x", &st2), -ENOTDIR);
	assert_int_equal(shoal_create(e.e_fs, &root_ctx, e.e_root, "a/b", 0644, O_RDWR, &st2),
			 -EINVAL);
	assert_int_equal(shoal_create(e.e_fs, &root_ctx, e.e_root, "", 0644, O_RDWR, &st2),
			 -EINVAL);
	assert_int_equal(shoal_create(e.e_fs, &root_ctx, e.e_root, ".", 0644, O_RDWR, &st2),
			 -EEXIST);
	assert_int_equal(shoal_mkdir(e.e_fs, &root_ctx, e.e_root, "..", 0755, &st2), -EEXIST);
	assert_int_equal(shoal_getattr(e.e_fs, 5, &st2) < 0, 1); /* a journal block */

	/* names: 255 bytes work everywhere, 256 are ENAMETOOLONG everywhere */
	memset(name, 'n', sizeof(name));
	name[255] = '\0';
	uint64_t longf = mkfile(&e, e.e_root, name, 0644);
	assert_int_equal(lookup_ino(&e, e.e_root, name), (int64_t)longf);
	name[255] = 'n';
	name[256] = '\0';
	assert_int_equal(shoal_create(e.e_fs, &root_ctx, e.e_root, name, 0644, O_RDWR, &st2),
			 -ENAMETOOLONG);
	assert_int_equal(shoal_lookup(e.e_fs, e.e_root, name, &st2), -ENAMETOOLONG);
	assert_int_equal(shoal_mkdir(e.e_fs, &root_ctx, e.e_root, name, 0755, &st2), -ENAMETOOLONG);
	assert_int_equal(shoal_mknod(e.e_fs, &root_ctx, e.e_root, name, S_IFIFO | 0644, 0, &st2),
			 -ENAMETOOLONG);
	assert_int_equal(shoal_symlink(e.e_fs, &root_ctx, e.e_root, name, "t", &st2),
			 -ENAMETOOLONG);
	assert_int_equal(shoal_link(e.e_fs, st.st_ino, e.e_root, name, &st2), -ENAMETOOLONG);
	assert_int_equal(shoal_rename(e.e_fs, &root_ctx, e.e_root, "f", e.e_root, name, 0),
			 -ENAMETOOLONG);
	assert_int_equal(shoal_unlink(e.e_fs, &root_ctx, e.e_root, name), -ENAMETOOLONG);
	assert_int_equal(shoal_rmdir(e.e_fs, &root_ctx, e.e_root, name), -ENAMETOOLONG);

	/* special files */
	assert_int_equal(shoal_mknod(e.e_fs, &root_ctx, e.e_root, "fifo", S_IFIFO | 0600, 0, &st2),
			 0);
	assert_true(S_ISFIFO(st2.st_mode));
	shoal_forget(e.e_fs, st2.st_ino, 1);
	assert_int_equal(shoal_mknod(e.e_fs, &root_ctx, e.e_root, "chr", S_IFCHR | 0600,
				     makedev(4, 67), &st2),
			 0);
	assert_int_equal(st2.st_rdev, makedev(4, 67));
	shoal_forget(e.e_fs, st2.st_ino, 1);
	assert_int_equal(shoal_mknod(e.e_fs, &root_ctx, e.e_root, "plain", 0644, 0, &st2), 0);
	assert_true(S_ISREG(st2.st_mode));
	shoal_forget(e.e_fs, st2.st_ino, 1);
	assert_int_equal(shoal_mknod(e.e_fs, &root_ctx, e.e_root, "d", S_IFDIR | 0755, 0, &st2),
			 -EINVAL);

	/* two inodes never share a generation, and everything survives a remount */
	uint64_t g1 = shoal_generation(e.e_fs, st.st_ino);
	uint64_t g2 = shoal_generation(e.e_fs, longf);
	assert_int_not_equal(g1, g2);
	env_remount(&e);
	assert_int_equal(lookup_ino(&e, e.e_root, "f"), (int64_t)st.st_ino);
	st2 = getattr_(&e, st.st_ino);
	assert_int_equal(st2.st_mode, S_IFREG | 0640);
	assert_int_equal(st2.st_uid, 1000);
	assert_int_equal(shoal_generation(e.e_fs, st.st_ino), g1);
	assert_int_equal(getattr_(&e, lookup_ino(&e, e.e_root, "chr")).st_rdev, makedev(4, 67));
	check_tree(&e, 1);
	env_fini(&e);
}

/*
 * create of a name that appeared after the kernel's lookup (another node made
 * it): without O_EXCL it opens the file there, with open's checks, and
 * applies O_TRUNC (issue 20, defect 4); with O_EXCL it is EEXIST.
 */
static void test_create_existing(void **state)
{
	struct env e;
	struct stat st, st2, d;
	char buf[64];

	env_init(&e, 64 * MiB, 2 * MiB);
	assert_int_equal(shoal_create(e.e_fs, &user_ctx, e.e_root, "f", 0640, O_RDWR, &st), 0);
	assert_int_equal(shoal_write(e.e_fs, &user_ctx, st.st_ino, "hello world", 11, 0, O_RDWR), 11);
	assert_int_equal(shoal_release(e.e_fs, st.st_ino, O_RDWR), 0);

	/* no O_TRUNC: the same file, contents kept, one more lookup and open */
	assert_int_equal(shoal_create(e.e_fs, &user_ctx, e.e_root, "f", 0600, O_RDWR, &st2), 0);
	assert_int_equal(st2.st_ino, st.st_ino);
	assert_int_equal(st2.st_size, 11);
	assert_int_equal(st2.st_mode & 07777, 0640); /* not the create's mode */
	assert_int_equal(shoal_read(e.e_fs, st.st_ino, buf, sizeof(buf), 0, O_RDWR), 11);
	assert_int_equal(shoal_release(e.e_fs, st.st_ino, O_RDWR), 0);

	/* O_TRUNC: emptied, as open(O_CREAT|O_TRUNC) on ext4 */
	assert_int_equal(shoal_create(e.e_fs, &user_ctx, e.e_root, "f", 0600,
				      O_WRONLY | O_TRUNC, &st2),
			 0);
	assert_int_equal(st2.st_ino, st.st_ino);
	assert_int_equal(st2.st_size, 0);
	assert_int_equal(getattr_(&e, st.st_ino).st_size, 0);
	assert_int_equal(shoal_release(e.e_fs, st.st_ino, O_WRONLY), 0);

	/* O_EXCL still refuses; open's permission checks apply */
	assert_int_equal(shoal_create(e.e_fs, &user_ctx, e.e_root, "f", 0600, O_RDWR | O_EXCL, &st2),
			 -EEXIST);
	const struct shoal_ctx other = { .c_uid = 2000, .c_gid = 2000, .c_pid = 3 };
	shoal_caller_set(&other); /* as shoal-mount does for each request */
	assert_int_equal(shoal_create(e.e_fs, &other, e.e_root, "f", 0600, O_RDONLY, &st2), -EACCES);
	shoal_caller_set(NULL);
	/* a directory: EISDIR, as open(O_CREAT) of a directory */
	assert_int_equal(shoal_mkdir(e.e_fs, &root_ctx, e.e_root, "d", 0755, &d), 0);
	assert_int_equal(shoal_create(e.e_fs, &root_ctx, e.e_root, "d", 0644, O_RDWR, &st2),
			 -EISDIR);
	/* the references taken match what forget gives back */
	shoal_forget(e.e_fs, st.st_ino, 3);
	shoal_forget(e.e_fs, d.st_ino, 1);
	env_fini(&e);
}

static void test_setattr(void **state)
{
	struct env e;
	struct stat a, st;

	env_init(&e, 64 * MiB, 2 * MiB);
	uint64_t f = mkfile(&e, e.e_root, "f", 0644);
	uint64_t d = mkdirat_(&e, e.e_root, "d");

	memset(&a, 0, sizeof(a));
	a.st_mode = 04755;
	assert_int_equal(shoal_setattr(e.e_fs, &root_ctx, f, &a, SHOAL_SET_MODE, &st), 0);
	assert_int_equal(st.st_mode, S_IFREG | 04755);
	/* chown of a non-directory drops set-user-ID */
	a.st_uid = 7;
	a.st_gid = 8;
	assert_int_equal(shoal_setattr(e.e_fs, &root_ctx, f, &a, SHOAL_SET_UID | SHOAL_SET_GID, &st),
			 0);
	assert_int_equal(st.st_uid, 7);
	assert_int_equal(st.st_gid, 8);
	assert_int_equal(st.st_mode & 07777, 0755);

	/* explicit times, then "now" */
	a.st_atim = (struct timespec){ 1000000000, 123456789 };
	a.st_mtim = (struct timespec){ 1100000000, 987654321 };
	assert_int_equal(shoal_setattr(e.e_fs, &root_ctx, f, &a, SHOAL_SET_ATIME | SHOAL_SET_MTIME,
				       &st),
			 0);
	st = getattr_(&e, f);
	assert_int_equal(st.st_atim.tv_sec, 1000000000);
	assert_int_equal(st.st_atim.tv_nsec, 123456789);
	assert_int_equal(st.st_mtim.tv_sec, 1100000000);
	assert_int_equal(st.st_mtim.tv_nsec, 987654321);
	assert_true(st.st_ctim.tv_sec >= now_sec() - 5);
	time_t t0 = now_sec();
	assert_int_equal(shoal_setattr(e.e_fs, &root_ctx, f, &a, SHOAL_SET_MTIME_NOW, &st), 0);
	assert_in_range(st.st_mtim.tv_sec, t0, now_sec());
	assert_int_equal(st.st_atim.tv_sec, 1000000000);

	/* size: EISDIR on a directory, EINVAL on a symlink */
	a.st_size = 10;
	assert_int_equal(shoal_setattr(e.e_fs, &root_ctx, d, &a, SHOAL_SET_SIZE, &st), -EISDIR);
	assert_int_equal(shoal_symlink(e.e_fs, &root_ctx, e.e_root, "l", "f", &st), 0);
	shoal_forget(e.e_fs, st.st_ino, 1);
	assert_int_equal(shoal_setattr(e.e_fs, &root_ctx, st.st_ino, &a, SHOAL_SET_SIZE, &st),
			 -EINVAL);
	assert_int_equal(shoal_setattr(e.e_fs, &root_ctx, 12345678, &a, SHOAL_SET_MODE, &st) < 0, 1);

	env_remount(&e);
	st = getattr_(&e, f);
	assert_int_equal(st.st_mode, S_IFREG | 0755);
	assert_int_equal(st.st_uid, 7);
	assert_int_equal(st.st_atim.tv_sec, 1000000000);
	assert_int_equal(st.st_atim.tv_nsec, 123456789);
	check_tree(&e, 1);
	env_fini(&e);
}

/* Small writes stay inline; growing past the payload moves them to blocks. */
static void test_read_write_inline_blocks(void **state)
{
	struct env e;
	uint8_t buf[16384];

	env_init(&e, 64 * MiB, 2 * MiB);
	uint64_t f = mkfile(&e, e.e_root, "f", 0644);
	uint64_t pay = e.e_bs - 256;

	assert_int_equal(shoal_read(e.e_fs, f, buf, 100, 0, O_RDONLY), 0);
	write_pattern(&e, f, 0, 1000, 1);
	assert_int_equal(getattr_(&e, f).st_size, 1000);
	/* a read past the end is short, one at the end is empty */
	assert_int_equal(shoal_read(e.e_fs, f, buf, sizeof(buf), 900, O_RDONLY), 100);
	assert_int_equal(shoal_read(e.e_fs, f, buf, sizeof(buf), 1000, O_RDONLY), 0);
	assert_int_equal(shoal_read(e.e_fs, f, buf, sizeof(buf), 5000, O_RDONLY), 0);
	check_range(&e, f, 0, 1000, 1);
	/* a write leaving a gap inside the inline area reads zeros in the gap */
	write_pattern(&e, f, 2000, 100, 1);
	check_range(&e, f, 1000, 1000, 0);
	check_range(&e, f, 2000, 100, 1);
	/* exactly the payload: still fine */
	write_pattern(&e, f, 2100, pay - 2100, 1);
	assert_int_equal(getattr_(&e, f).st_size, (off_t)pay);
	/* one byte more: the data moves to a block and must be kept */
	uint64_t before = bfree(&e);
	write_pattern(&e, f, pay, 1, 1);
	assert_true(bfree(&e) < before);
	check_range(&e, f, 0, 1000, 1);
	check_range(&e, f, 1000, 1000, 0);
	check_range(&e, f, 2000, pay + 1 - 2000, 1);
	/* cross block boundaries, unaligned, into a later block */
	write_pattern(&e, f, 3 * e.e_bs - 7, 2 * e.e_bs + 11, 2);
	check_range(&e, f, 2000, pay + 1 - 2000, 1);
	check_range(&e, f, pay + 1, 3 * e.e_bs - 7 - pay - 1, 0);
	check_range(&e, f, 3 * e.e_bs - 7, 2 * e.e_bs + 11, 2);
	/* overwrite in the middle of existing blocks */
	write_pattern(&e, f, 100, 5000, 3);
	check_range(&e, f, 0, 100, 1);
	check_range(&e, f, 100, 5000, 3);
	assert_int_equal(getattr_(&e, f).st_size, 5 * e.e_bs + 4);

	/* one large write of several MiB, read back in odd pieces */
	uint64_t g = mkfile(&e, e.e_root, "big", 0644);
	write_pattern(&e, g, 0, 5 * MiB + 123, 4);
	for (uint64_t off = 0; off < 5 * MiB + 123; off += 77777) {
		size_t n = 5 * MiB + 123 - off < 77777 ? (size_t)(5 * MiB + 123 - off) : 77777;
		check_range(&e, g, off, n, 4);
	}
	struct stat st = getattr_(&e, g);
	assert_int_equal(st.st_size, 5 * MiB + 123);
	assert_true(st.st_blocks >= (blkcnt_t)((5 * MiB + 123) / 512));
	assert_true(st.st_blocks <= (blkcnt_t)((5 * MiB + 123) / 512 + 64));

	/* writes to a directory or symlink are refused */
	uint64_t d = mkdirat_(&e, e.e_root, "d");
	assert_int_equal(shoal_write(e.e_fs, &root_ctx, d, buf, 10, 0, O_RDWR), -EISDIR);
	assert_int_equal(shoal_read(e.e_fs, d, buf, 10, 0, O_RDONLY), -EISDIR);

	env_remount(&e);
	check_range(&e, f, 0, 100, 1);
	check_range(&e, f, 100, 5000, 3);
	check_range(&e, f, 3 * e.e_bs - 7, 2 * e.e_bs + 11, 2);
	check_range(&e, g, 0, 5 * MiB + 123, 4);
	check_tree(&e, 1);
	env_fini(&e);
}

static void test_truncate(void **state)
{
	struct env e;
	uint64_t bs;

	env_init(&e, 64 * MiB, 2 * MiB);
	bs = e.e_bs;
	uint64_t base = bfree(&e);
	uint64_t f = mkfile(&e, e.e_root, "f", 0644);
	uint64_t after_create = bfree(&e);
	assert_int_equal(base - after_create, 1); /* just the dinode */

	/* inline: shrink then grow again reads zeros past the cut */
	write_pattern(&e, f, 0, 3000, 1);
	setsize(&e, f, 1000);
	setsize(&e, f, 3000);
	check_range(&e, f, 0, 1000, 1);
	check_range(&e, f, 1000, 2000, 0);
	/* grow inline past the payload: data kept, file now in blocks */
	setsize(&e, f, 100000);
	check_range(&e, f, 0, 1000, 1);
	check_range(&e, f, 1000, 99000, 0);
	/* growing is sparse: no data blocks written for the new range */
	assert_true(after_create - bfree(&e) <= 2);

	/* blocks: shrink into the middle of a block, grow again: zeros after the cut */
	uint64_t g = mkfile(&e, e.e_root, "g", 0644);
	write_pattern(&e, g, 0, 10 * bs, 2);
	uint64_t with10 = bfree(&e);
	setsize(&e, g, 3 * bs + 100);
	assert_int_equal(getattr_(&e, g).st_size, 3 * bs + 100);
	assert_int_equal(bfree(&e) - with10, 6); /* blocks 4..9 freed */
	setsize(&e, g, 10 * bs);
	check_range(&e, g, 0, 3 * bs + 100, 2);
	check_range(&e, g, 3 * bs + 100, 7 * bs - 100, 0);
	/* shrink to inline size and below: still readable, extending reads zeros */
	setsize(&e, g, 10);
	check_range(&e, g, 0, 10, 2);
	setsize(&e, g, 3 * bs);
	check_range(&e, g, 10, 3 * bs - 10, 0);
	/* truncate to zero returns every block but the dinode */
	setsize(&e, g, 0);
	write_pattern(&e, g, 0, 100, 5);
	check_range(&e, g, 0, 100, 5);
	setsize(&e, g, 0);
	setsize(&e, f, 0);
	assert_int_equal(getattr_(&e, g).st_blocks, bs / 512);
	assert_int_equal(getattr_(&e, f).st_blocks, bs / 512);
	assert_int_equal(bfree(&e), base - 2);

	/* a sparse 1 GiB file on a 64 MiB filesystem */
	uint64_t h = mkfile(&e, e.e_root, "sparse", 0644);
	write_pattern(&e, h, GiB - 10, 20, 6);
	write_pattern(&e, h, 12345, 10, 6);
	struct stat st = getattr_(&e, h);
	assert_int_equal(st.st_size, GiB + 10);
	assert_true(st.st_blocks < 16 * (blkcnt_t)(bs / 512));
	check_range(&e, h, 0, 12345, 0);
	check_range(&e, h, 12345, 10, 6);
	check_range(&e, h, GiB - 10, 20, 6);
	check_range(&e, h, GiB / 2, 65536, 0);
	env_remount(&e);
	check_range(&e, h, GiB - 10, 20, 6);
	check_range(&e, g, 0, 0, 0);
	setsize(&e, h, 12350);
	check_range(&e, h, 12345, 5, 6);
	setsize(&e, h, GiB);
	check_range(&e, h, GiB - 10, 10, 0);
	check_tree(&e, 1);
	env_fini(&e);
}

/*
 * Growing a file with truncate is metadata only (R3) and works from any
 * size to any size: an inline or small file grown to several MiB or to
 * 1 TiB stays usable, sparse, and reads zeros.
 */
static void test_truncate_grow_far(void **state)
{
	struct env e;
	static const uint64_t sizes[] = { 4 * MiB, 100 * MiB, 1ull << 40 };

	env_init(&e, 64 * MiB, 2 * MiB);
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		char name[16];
		snprintf(name, sizeof(name), "inl%zu", i);
		uint64_t a = mkfile(&e, e.e_root, name, 0644);
		write_pattern(&e, a, 0, 100, 1); /* inline */
		snprintf(name, sizeof(name), "blk%zu", i);
		uint64_t b = mkfile(&e, e.e_root, name, 0644);
		write_pattern(&e, b, 0, 3 * e.e_bs, 2); /* one level of block map */
		uint64_t before = bfree(&e);
		setsize(&e, a, sizes[i]);
		setsize(&e, b, sizes[i]);
		assert_true(before - bfree(&e) <= 1);
		struct stat st;
		int err = shoal_getattr(e.e_fs, b, &st);
		if (err)
			fail_msg("getattr after growing to %llu: %s", (unsigned long long)sizes[i],
				 strerror(-err));
		assert_int_equal(st.st_size, (off_t)sizes[i]);
		check_range(&e, a, 0, 100, 1);
		check_range(&e, b, 0, 3 * e.e_bs, 2);
		check_range(&e, a, sizes[i] - 5000, 5000, 0);
		check_range(&e, b, sizes[i] - 5000, 5000, 0);
		write_pattern(&e, b, sizes[i] - 10, 10, 3);
		check_range(&e, b, sizes[i] - 10, 10, 3);
	}
	env_remount(&e);
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		char name[16];
		snprintf(name, sizeof(name), "inl%zu", i);
		uint64_t a = (uint64_t)lookup_ino(&e, e.e_root, name);
		snprintf(name, sizeof(name), "blk%zu", i);
		uint64_t b = (uint64_t)lookup_ino(&e, e.e_root, name);
		assert_int_equal(getattr_(&e, a).st_size, (off_t)sizes[i]);
		check_range(&e, a, 0, 100, 1);
		check_range(&e, a, sizes[i] - 5000, 5000, 0);
		check_range(&e, b, 0, 3 * e.e_bs, 2);
		check_range(&e, b, sizes[i] - 10, 10, 3);
		/* back to small sizes, so the tree walk need not read a TiB of holes */
		setsize(&e, a, 50);
		setsize(&e, b, 2 * e.e_bs + 5);
		check_range(&e, a, 0, 50, 1);
		check_range(&e, b, 0, 2 * e.e_bs + 5, 2);
	}
	check_tree(&e, 1);
	env_fini(&e);
}

static void test_fallocate_punch(void **state)
{
	struct env e;
	uint64_t bs;

	env_init(&e, 64 * MiB, 2 * MiB);
	bs = e.e_bs;
	uint64_t f = mkfile(&e, e.e_root, "f", 0644);

	assert_int_equal(shoal_fallocate(e.e_fs, f, 0, 0, 0), -EINVAL);
	assert_int_equal(shoal_fallocate(e.e_fs, f, FALLOC_FL_PUNCH_HOLE, 0, 10), -EOPNOTSUPP);
	assert_int_equal(shoal_fallocate(e.e_fs, f, FALLOC_FL_UNSHARE_RANGE, 0, bs), -EOPNOTSUPP);
	uint64_t d = mkdirat_(&e, e.e_root, "d");
	assert_int_equal(shoal_fallocate(e.e_fs, d, 0, 0, bs), -EISDIR);

	/* allocate 1 MiB: size grows, blocks are allocated, contents read as zeros */
	uint64_t before = bfree(&e);
	assert_int_equal(shoal_fallocate(e.e_fs, f, 0, 0, MiB), 0);
	struct stat st = getattr_(&e, f);
	assert_int_equal(st.st_size, MiB);
	assert_true(before - bfree(&e) >= MiB / bs);
	check_range(&e, f, 0, MiB, 0);
	/* KEEP_SIZE: blocks beyond the end, size unchanged */
	before = bfree(&e);
	assert_int_equal(shoal_fallocate(e.e_fs, f, FALLOC_FL_KEEP_SIZE, MiB, MiB), 0);
	assert_int_equal(getattr_(&e, f).st_size, MiB);
	assert_true(before - bfree(&e) >= MiB / bs);
	/* writes into preallocated space need no more blocks */
	before = bfree(&e);
	write_pattern(&e, f, 0, 2 * MiB, 1);
	assert_int_equal(bfree(&e), before);
	check_range(&e, f, 0, 2 * MiB, 1);

	/* punch aligned blocks: zeros there, blocks returned, the rest intact */
	before = bfree(&e);
	assert_int_equal(shoal_fallocate(e.e_fs, f, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
					 4 * bs, 8 * bs),
			 0);
	assert_int_equal(bfree(&e) - before, 8);
	assert_int_equal(getattr_(&e, f).st_size, 2 * MiB);
	check_range(&e, f, 0, 4 * bs, 1);
	check_range(&e, f, 4 * bs, 8 * bs, 0);
	check_range(&e, f, 12 * bs, 2 * MiB - 12 * bs, 1);
	/* unaligned punch: partial blocks zeroed, whole ones freed */
	before = bfree(&e);
	assert_int_equal(shoal_fallocate(e.e_fs, f, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
					 20 * bs + 100, 3 * bs),
			 0);
	assert_int_equal(bfree(&e) - before, 2);
	check_range(&e, f, 12 * bs, 8 * bs + 100, 1);
	check_range(&e, f, 20 * bs + 100, 3 * bs, 0);
	check_range(&e, f, 23 * bs + 100, 2 * MiB - 23 * bs - 100, 1);
	/* inside one block */
	assert_int_equal(shoal_fallocate(e.e_fs, f, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
					 30 * bs + 10, 20),
			 0);
	check_range(&e, f, 30 * bs, 10, 1);
	check_range(&e, f, 30 * bs + 10, 20, 0);
	check_range(&e, f, 30 * bs + 30, bs - 30, 1);
	/* across the boundary of the first indirect block (508 pointers at 4 KiB) */
	uint64_t per = (bs - 32) / 8;
	write_pattern(&e, f, 2 * MiB, 2 * MiB, 11); /* now 4 MiB: two levels */
	before = bfree(&e);
	assert_int_equal(shoal_fallocate(e.e_fs, f, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
					 (per - 5) * bs, 20 * bs),
			 0);
	assert_true(bfree(&e) - before >= 20);
	check_range(&e, f, (per - 6) * bs, bs, 1);
	check_range(&e, f, (per - 5) * bs, 20 * bs, 0);
	check_range(&e, f, (per + 15) * bs, bs, 11);
	assert_int_equal(shoal_lseek(e.e_fs, f, (per - 6) * bs, SEEK_HOLE), (per - 5) * bs);
	assert_int_equal(shoal_lseek(e.e_fs, f, (per - 5) * bs, SEEK_DATA), (per + 15) * bs);
	/* past the end: nothing happens */
	assert_int_equal(shoal_fallocate(e.e_fs, f, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
					 4 * MiB, MiB),
			 0);
	assert_int_equal(getattr_(&e, f).st_size, 4 * MiB);

	/* an inline file */
	uint64_t g = mkfile(&e, e.e_root, "g", 0644);
	write_pattern(&e, g, 0, 1000, 2);
	assert_int_equal(shoal_fallocate(e.e_fs, g, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
					 100, 200),
			 0);
	check_range(&e, g, 0, 100, 2);
	check_range(&e, g, 100, 200, 0);
	check_range(&e, g, 300, 700, 2);
	assert_int_equal(shoal_fallocate(e.e_fs, g, 0, 0, 3 * bs), 0);
	assert_int_equal(getattr_(&e, g).st_size, 3 * bs);
	check_range(&e, g, 0, 100, 2);
	check_range(&e, g, 300, 700, 2);
	check_range(&e, g, 1000, 3 * bs - 1000, 0);

	env_remount(&e);
	check_range(&e, f, 0, 4 * bs, 1);
	check_range(&e, f, 4 * bs, 8 * bs, 0);
	check_range(&e, f, 20 * bs + 100, 3 * bs, 0);
	check_range(&e, f, 23 * bs + 100, 7 * bs - 100 + 10, 1);
	check_range(&e, f, (per - 5) * bs, 20 * bs, 0);
	check_range(&e, f, (per + 15) * bs, MiB, 11);
	check_range(&e, g, 300, 700, 2);
	check_tree(&e, 1);
	env_fini(&e);
}

static void test_lseek_data_hole(void **state)
{
	struct env e;
	uint64_t bs;

	env_init(&e, 64 * MiB, 2 * MiB);
	bs = e.e_bs;
	uint64_t f = mkfile(&e, e.e_root, "f", 0644);

	assert_int_equal(shoal_lseek(e.e_fs, f, 0, SEEK_DATA), -ENXIO); /* empty */
	assert_int_equal(shoal_lseek(e.e_fs, f, 0, SEEK_SET), -EINVAL);
	/* data [0, bs), hole, data [MiB, MiB+bs), hole to 4 MiB */
	write_pattern(&e, f, 0, bs, 1);
	write_pattern(&e, f, MiB, bs, 1);
	write_pattern(&e, f, 8 * MiB, bs, 1);
	setsize(&e, f, 4 * MiB);
	assert_int_equal(shoal_lseek(e.e_fs, f, 0, SEEK_DATA), 0);
	assert_int_equal(shoal_lseek(e.e_fs, f, 10, SEEK_DATA), 10);
	assert_int_equal(shoal_lseek(e.e_fs, f, 0, SEEK_HOLE), bs);
	assert_int_equal(shoal_lseek(e.e_fs, f, bs, SEEK_DATA), MiB);
	assert_int_equal(shoal_lseek(e.e_fs, f, bs + 5, SEEK_HOLE), bs + 5);
	assert_int_equal(shoal_lseek(e.e_fs, f, MiB - 1, SEEK_DATA), MiB);
	assert_int_equal(shoal_lseek(e.e_fs, f, MiB + 7, SEEK_DATA), MiB + 7);
	assert_int_equal(shoal_lseek(e.e_fs, f, MiB, SEEK_HOLE), MiB + bs);
	assert_int_equal(shoal_lseek(e.e_fs, f, MiB + bs, SEEK_DATA), -ENXIO);
	assert_int_equal(shoal_lseek(e.e_fs, f, 3 * MiB, SEEK_HOLE), 3 * MiB);
	assert_int_equal(shoal_lseek(e.e_fs, f, 4 * MiB, SEEK_DATA), -ENXIO);
	assert_int_equal(shoal_lseek(e.e_fs, f, 4 * MiB, SEEK_HOLE), -ENXIO);
	assert_int_equal(shoal_lseek(e.e_fs, f, 5 * MiB, SEEK_HOLE), -ENXIO);
	/* data up to the end: the hole is the end of the file */
	write_pattern(&e, f, 4 * MiB - 100, 100, 1);
	assert_int_equal(shoal_lseek(e.e_fs, f, 4 * MiB - bs, SEEK_HOLE), 4 * MiB);
	assert_int_equal(shoal_lseek(e.e_fs, f, MiB + bs, SEEK_DATA), 4 * MiB - bs);
	/* a hole far away: sparse 1 GiB */
	write_pattern(&e, f, GiB, 10, 1);
	assert_int_equal(shoal_lseek(e.e_fs, f, 4 * MiB, SEEK_DATA), GiB & ~(bs - 1));
	assert_int_equal(shoal_lseek(e.e_fs, f, 4 * MiB, SEEK_HOLE), 4 * MiB);
	/* an inline file is all data */
	uint64_t g = mkfile(&e, e.e_root, "g", 0644);
	write_pattern(&e, g, 0, 500, 1);
	assert_int_equal(shoal_lseek(e.e_fs, g, 100, SEEK_DATA), 100);
	assert_int_equal(shoal_lseek(e.e_fs, g, 100, SEEK_HOLE), 500);
	assert_int_equal(shoal_lseek(e.e_fs, g, 500, SEEK_DATA), -ENXIO);
	env_fini(&e);
}

static void test_link_unlink(void **state)
{
	struct env e;
	struct stat st;

	env_init(&e, 64 * MiB, 2 * MiB);
	uint64_t base = bfree(&e);
	uint64_t d1 = mkdirat_(&e, e.e_root, "d1");
	uint64_t f = mkfile(&e, e.e_root, "f", 0644);
	write_pattern(&e, f, 0, 50000, 1);

	assert_int_equal(shoal_link(e.e_fs, f, d1, "g", &st), 0);
	shoal_forget(e.e_fs, f, 1);
	assert_int_equal(st.st_ino, f);
	assert_int_equal(st.st_nlink, 2);
	assert_int_equal(lookup_ino(&e, d1, "g"), (int64_t)f);
	assert_int_equal(shoal_link(e.e_fs, f, d1, "g", &st), -EEXIST);
	assert_int_equal(shoal_link(e.e_fs, f, d1, ".", &st), -EEXIST);
	assert_int_equal(shoal_link(e.e_fs, d1, e.e_root, "d2", &st), -EPERM);
	assert_int_equal(shoal_link(e.e_fs, f, f, "x", &st), -ENOTDIR);
	check_tree(&e, 1);

	assert_int_equal(shoal_unlink(e.e_fs, &root_ctx, e.e_root, "f"), 0);
	assert_int_equal(getattr_(&e, f).st_nlink, 1);
	assert_int_equal(lookup_ino(&e, e.e_root, "f"), -ENOENT);
	check_range(&e, f, 0, 50000, 1);
	assert_int_equal(shoal_unlink(e.e_fs, &root_ctx, e.e_root, "f"), -ENOENT);
	assert_int_equal(shoal_unlink(e.e_fs, &root_ctx, e.e_root, "d1"), -EISDIR);
	assert_int_equal(shoal_unlink(e.e_fs, &root_ctx, e.e_root, "."), -EISDIR);
	assert_int_equal(shoal_unlink(e.e_fs, &root_ctx, f, "x"), -ENOTDIR);
	env_remount(&e);
	check_range(&e, f, 0, 50000, 1);
	check_tree(&e, 1);
	assert_int_equal(shoal_unlink(e.e_fs, &root_ctx, d1, "g"), 0);
	assert_int_equal(shoal_rmdir(e.e_fs, &root_ctx, e.e_root, "d1"), 0);
	assert_int_equal(bfree(&e), base);
	env_remount(&e);
	assert_int_equal(bfree(&e), base);
	check_tree(&e, 1);
	env_fini(&e);
}

static void test_symlink_readlink(void **state)
{
	struct env e;
	struct stat st;
	char tgt[4200], buf[4200];

	env_init(&e, 64 * MiB, 2 * MiB);
	assert_int_equal(shoal_symlink(e.e_fs, &root_ctx, e.e_root, "s", "some/where", &st), 0);
	shoal_forget(e.e_fs, st.st_ino, 1);
	assert_true(S_ISLNK(st.st_mode));
	assert_int_equal(st.st_size, 10);
	assert_int_equal(shoal_readlink(e.e_fs, st.st_ino, buf, sizeof(buf)), 10);
	assert_memory_equal(buf, "some/where", 10);
	/* a short buffer gets the start of the target */
	assert_int_equal(shoal_readlink(e.e_fs, st.st_ino, buf, 4), 4);
	assert_memory_equal(buf, "some", 4);
	/* a target longer than the inline payload */
	for (int i = 0; i < 4095; i++)
		tgt[i] = (char)('a' + i % 26);
	tgt[4095] = '\0';
	assert_int_equal(shoal_symlink(e.e_fs, &root_ctx, e.e_root, "long", tgt, &st), 0);
	shoal_forget(e.e_fs, st.st_ino, 1);
	uint64_t longl = st.st_ino;
	assert_int_equal(shoal_readlink(e.e_fs, longl, buf, sizeof(buf)), 4095);
	assert_memory_equal(buf, tgt, 4095);
	/* errors */
	tgt[4095] = 'x';
	tgt[4096] = '\0';
	assert_int_equal(shoal_symlink(e.e_fs, &root_ctx, e.e_root, "toolong", tgt, &st),
			 -ENAMETOOLONG);
	assert_int_equal(shoal_symlink(e.e_fs, &root_ctx, e.e_root, "empty", "", &st), -ENOENT);
	assert_int_equal(shoal_symlink(e.e_fs, &root_ctx, e.e_root, "s", "x", &st), -EEXIST);
	uint64_t f = mkfile(&e, e.e_root, "f", 0644);
	assert_int_equal(shoal_readlink(e.e_fs, f, buf, sizeof(buf)), -EINVAL);
	assert_int_equal(shoal_readlink(e.e_fs, e.e_root, buf, sizeof(buf)), -EINVAL);
	env_remount(&e);
	tgt[4095] = '\0';
	assert_int_equal(shoal_readlink(e.e_fs, longl, buf, sizeof(buf)), 4095);
	assert_memory_equal(buf, tgt, 4095);
	assert_int_equal(shoal_unlink(e.e_fs, &root_ctx, e.e_root, "long"), 0);
	check_tree(&e, 1);
	env_fini(&e);
}

static void test_mkdir_rmdir(void **state)
{
	struct env e;
	struct stat st;

	env_init(&e, 64 * MiB, 2 * MiB);
	uint64_t base = bfree(&e);
	assert_int_equal(shoal_mkdir(e.e_fs, &user_ctx, e.e_root, "a", 0750, &st), 0);
	shoal_forget(e.e_fs, st.st_ino, 1);
	uint64_t a = st.st_ino;
	assert_int_equal(st.st_mode, S_IFDIR | 0750);
	assert_int_equal(st.st_nlink, 2);
	assert_int_equal(getattr_(&e, e.e_root).st_nlink, 3);
	uint64_t b = mkdirat_(&e, a, "b");
	assert_int_equal(getattr_(&e, a).st_nlink, 3);
	assert_int_equal(lookup_ino(&e, b, ".."), (int64_t)a);
	assert_int_equal(lookup_ino(&e, b, "."), (int64_t)b);
	assert_int_equal(shoal_mkdir(e.e_fs, &root_ctx, e.e_root, "a", 0755, &st), -EEXIST);
	mkfile(&e, b, "f", 0644);

	assert_int_equal(shoal_rmdir(e.e_fs, &root_ctx, e.e_root, "a"), -ENOTEMPTY);
	assert_int_equal(shoal_rmdir(e.e_fs, &root_ctx, a, "b"), -ENOTEMPTY);
	assert_int_equal(shoal_rmdir(e.e_fs, &root_ctx, b, "f"), -ENOTDIR);
	assert_int_equal(shoal_rmdir(e.e_fs, &root_ctx, b, "."), -EINVAL);
	assert_int_equal(shoal_rmdir(e.e_fs, &root_ctx, b, ".."), -ENOTEMPTY);
	assert_int_equal(shoal_rmdir(e.e_fs, &root_ctx, b, "nope"), -ENOENT);
	assert_int_equal(shoal_unlink(e.e_fs, &root_ctx, b, "f"), 0);

	/* a removed directory keeps nothing and accepts nothing */
	assert_int_equal(shoal_lookup(e.e_fs, e.e_root, "a", &st), 0); /* hold b's parent */
	assert_int_equal(shoal_lookup(e.e_fs, a, "b", &st), 0);        /* hold b */
	assert_int_equal(shoal_rmdir(e.e_fs, &root_ctx, a, "b"), 0);
	assert_int_equal(getattr_(&e, a).st_nlink, 2);
	assert_int_equal(shoal_create(e.e_fs, &root_ctx, b, "new", 0644, O_RDWR, &st), -ENOENT);
	assert_int_equal(shoal_mkdir(e.e_fs, &root_ctx, b, "new", 0755, &st), -ENOENT);
	assert_int_equal(shoal_lookup(e.e_fs, b, "f", &st), -ENOENT);
	struct tc_rd r;
	memset(&r, 0, sizeof(r));
	assert_int_equal(shoal_readdir(e.e_fs, b, 0, 0, tc_fill, &r), 0);
	assert_true(r.r_n <= 2);
	free(r.r_ents);
	shoal_forget(e.e_fs, b, 1);
	shoal_forget(e.e_fs, a, 1);
	assert_int_equal(shoal_rmdir(e.e_fs, &root_ctx, e.e_root, "a"), 0);
	assert_int_equal(getattr_(&e, e.e_root).st_nlink, 2);
	assert_int_equal(bfree(&e), base);

	/* many subdirectories */
	char name[32];
	uint64_t c = mkdirat_(&e, e.e_root, "c");
	for (int i = 0; i < 300; i++) {
		snprintf(name, sizeof(name), "sub%d", i);
		mkdirat_(&e, c, name);
	}
	assert_int_equal(getattr_(&e, c).st_nlink, 302);
	env_remount(&e);
	assert_int_equal(getattr_(&e, c).st_nlink, 302);
	check_tree(&e, 1);
	for (int i = 0; i < 300; i++) {
		snprintf(name, sizeof(name), "sub%d", i);
		assert_int_equal(shoal_rmdir(e.e_fs, &root_ctx, c, name), 0);
	}
	assert_int_equal(getattr_(&e, c).st_nlink, 2);
	assert_int_equal(shoal_rmdir(e.e_fs, &root_ctx, e.e_root, "c"), 0);
	assert_int_equal(bfree(&e), base);
	check_tree(&e, 1);
	env_fini(&e);
}

static void test_rename(void **state)
{
	struct env e;
	struct stat st;

	env_init(&e, 64 * MiB, 2 * MiB);
	uint64_t R = e.e_root;
	uint64_t a = mkdirat_(&e, R, "a");
	uint64_t b = mkdirat_(&e, R, "b");
	uint64_t f = mkfile(&e, a, "f", 0644);
	uint64_t g = mkfile(&e, b, "g", 0644);
	write_pattern(&e, f, 0, 10000, 1);
	write_pattern(&e, g, 0, 10000, 2);

	/* plain move across directories */
	assert_int_equal(shoal_rename(e.e_fs, &root_ctx, a, "f", b, "f2", 0), 0);
	assert_int_equal(lookup_ino(&e, a, "f"), -ENOENT);
	assert_int_equal(lookup_ino(&e, b, "f2"), (int64_t)f);
	check_range(&e, f, 0, 10000, 1);
	/* rename onto an existing file replaces it; the old one stays readable while open */
	assert_int_equal(shoal_open(e.e_fs, g, O_RDONLY), 0);
	assert_int_equal(shoal_rename(e.e_fs, &root_ctx, b, "f2", b, "g", 0), 0);
	assert_int_equal(lookup_ino(&e, b, "g"), (int64_t)f);
	assert_int_equal(lookup_ino(&e, b, "f2"), -ENOENT);
	assert_int_equal(getattr_(&e, g).st_nlink, 0);
	check_range(&e, g, 0, 10000, 2);
	assert_int_equal(shoal_release(e.e_fs, g, O_RDONLY), 0);
	check_tree(&e, 1);

	/* NOREPLACE */
	uint64_t h = mkfile(&e, a, "h", 0644);
	assert_int_equal(shoal_rename(e.e_fs, &root_ctx, a, "h", b, "g", RENAME_NOREPLACE),
			 -EEXIST);
	assert_int_equal(shoal_rename(e.e_fs, &root_ctx, a, "h", b, "h", RENAME_NOREPLACE), 0);
	assert_int_equal(lookup_ino(&e, b, "h"), (int64_t)h);
	assert_int_equal(shoal_rename(e.e_fs, &root_ctx, b, "h", a, "h",
				      RENAME_NOREPLACE | RENAME_EXCHANGE),
			 -EINVAL);
	assert_int_equal(shoal_rename(e.e_fs, &root_ctx, b, "h", a, "h", 0x80), -EINVAL);
	assert_int_equal(shoal_rename(e.e_fs, &root_ctx, b, "nope", a, "h", 0), -ENOENT);
	assert_int_equal(shoal_rename(e.e_fs, &root_ctx, b, ".", a, "h", 0), -EBUSY);
	assert_int_equal(shoal_rename(e.e_fs, &root_ctx, b, "h", a, "..", 0), -EBUSY);

	/* EXCHANGE a file and a directory across directories */
	uint64_t d = mkdirat_(&e, a, "d");
	mkfile(&e, d, "inside", 0644);
	assert_int_equal(shoal_rename(e.e_fs, &root_ctx, a, "d", b, "missing", RENAME_EXCHANGE),
			 -ENOENT);
	assert_int_equal(getattr_(&e, a).st_nlink, 3);
	assert_int_equal(getattr_(&e, b).st_nlink, 2);
	assert_int_equal(shoal_rename(e.e_fs, &root_ctx, a, "d", b, "h", RENAME_EXCHANGE), 0);
	assert_int_equal(lookup_ino(&e, a, "d"), (int64_t)h);
	assert_int_equal(lookup_ino(&e, b, "h"), (int64_t)d);
	assert_int_equal(lookup_ino(&e, d, ".."), (int64_t)b);
	assert_int_equal(getattr_(&e, a).st_nlink, 2);
	assert_int_equal(getattr_(&e, b).st_nlink, 3);
	assert_int_equal(lookup_ino(&e, d, "inside") > 0, 1);
	check_tree(&e, 1);

	/* EXCHANGE two directories in different parents: link counts unchanged */
	uint64_t x1 = mkdirat_(&e, a, "x1");
	uint64_t x2 = mkdirat_(&e, d, "x2");
	nlink_t na = getattr_(&e, a).st_nlink, nd = getattr_(&e, d).st_nlink;
	assert_int_equal(shoal_rename(e.e_fs, &root_ctx, a, "x1", d, "x2", RENAME_EXCHANGE), 0);
	assert_int_equal(lookup_ino(&e, a, "x1"), (int64_t)x2);
	assert_int_equal(lookup_ino(&e, d, "x2"), (int64_t)x1);
	assert_int_equal(lookup_ino(&e, x1, ".."), (int64_t)d);
	assert_int_equal(lookup_ino(&e, x2, ".."), (int64_t)a);
	assert_int_equal(getattr_(&e, a).st_nlink, na);
	assert_int_equal(getattr_(&e, d).st_nlink, nd);
	check_tree(&e, 1);

	/* directories: over an empty one works, over a full one does not */
	uint64_t e1 = mkdirat_(&e, R, "e1");
	uint64_t e2 = mkdirat_(&e, R, "e2");
	mkfile(&e, e2, "x", 0644);
	assert_int_equal(shoal_rename(e.e_fs, &root_ctx, R, "e1", R, "e2", 0), -ENOTEMPTY);
	assert_int_equal(shoal_rename(e.e_fs, &root_ctx, R, "e1", b, "f", 0), 0); /* new name */
	assert_int_equal(lookup_ino(&e, e1, ".."), (int64_t)b);
	assert_int_equal(shoal_rename(e.e_fs, &root_ctx, R, "e2", b, "f", 0), 0);
	assert_int_equal(lookup_ino(&e, b, "f"), (int64_t)e2);
	assert_int_equal(lookup_ino(&e, e2, ".."), (int64_t)b);
	/* file over directory and directory over file */
	assert_int_equal(shoal_rename(e.e_fs, &root_ctx, b, "g", b, "f", 0), -EISDIR);
	assert_int_equal(shoal_rename(e.e_fs, &root_ctx, b, "f", b, "g", 0), -ENOTDIR);
	check_tree(&e, 1);

	/* cycles: a directory never moves below itself */
	uint64_t p = mkdirat_(&e, R, "p");
	uint64_t q = mkdirat_(&e, p, "q");
	uint64_t r = mkdirat_(&e, q, "r");
	assert_int_equal(shoal_rename(e.e_fs, &root_ctx, R, "p", r, "p", 0), -EINVAL);
	assert_int_equal(shoal_rename(e.e_fs, &root_ctx, R, "p", p, "p", 0), -EINVAL);
	assert_int_equal(shoal_rename(e.e_fs, &root_ctx, p, "q", r, "q", 0), -EINVAL);
	mkfile(&e, r, "leaf", 0644);
	assert_int_equal(shoal_rename(e.e_fs, &root_ctx, R, "p", r, "leaf", RENAME_EXCHANGE),
			 -EINVAL);
	assert_int_equal(shoal_rename(e.e_fs, &root_ctx, r, "leaf", R, "p", RENAME_EXCHANGE),
			 -EINVAL);
	/* moving a directory up is fine */
	assert_int_equal(shoal_rename(e.e_fs, &root_ctx, q, "r", R, "r", 0), 0);
	assert_int_equal(lookup_ino(&e, r, ".."), (int64_t)R);
	assert_int_equal(getattr_(&e, q).st_nlink, 2);
	check_tree(&e, 1);

	/* two names of one inode: rename does nothing */
	assert_int_equal(shoal_link(e.e_fs, h, R, "h2", &st), 0);
	shoal_forget(e.e_fs, h, 1);
	assert_int_equal(shoal_rename(e.e_fs, &root_ctx, R, "h2", a, "d", 0), 0);
	assert_int_equal(lookup_ino(&e, R, "h2"), (int64_t)h);
	assert_int_equal(lookup_ino(&e, a, "d"), (int64_t)h);
	assert_int_equal(getattr_(&e, h).st_nlink, 2);
	/* rename to itself */
	assert_int_equal(shoal_rename(e.e_fs, &root_ctx, R, "h2", R, "h2", 0), 0);
	assert_int_equal(lookup_ino(&e, R, "h2"), (int64_t)h);

	env_remount(&e);
	assert_int_equal(lookup_ino(&e, b, "g"), (int64_t)f);
	assert_int_equal(lookup_ino(&e, b, "h"), (int64_t)d);
	assert_int_equal(lookup_ino(&e, d, ".."), (int64_t)b);
	assert_int_equal(lookup_ino(&e, R, "r"), (int64_t)r);
	check_range(&e, f, 0, 10000, 1);
	check_tree(&e, 1);
	env_fini(&e);
}

/* readdir resumed at the offsets it handed out lists every name exactly once. */
static void readdir_resume_check(struct env *e, uint64_t dir, char (*names)[16], int n)
{
	static const size_t limits[] = { 1, 2, 3, 7, 64, 0 };
	for (size_t li = 0; li < sizeof(limits) / sizeof(limits[0]); li++) {
		struct tc_rd r;
		read_dir(e, dir, limits[li], &r);
		assert_int_equal(r.r_n, (size_t)n + 2);
		assert_string_equal(r.r_ents[0].d_name, ".");
		assert_int_equal(r.r_ents[0].d_off, 1);
		assert_string_equal(r.r_ents[1].d_name, "..");
		assert_int_equal(r.r_ents[1].d_off, 2);
		tc_rd_sort_unique(&r);
		for (int i = 0; i < n; i++) {
			struct tc_dent *d = tc_rd_find(&r, names[i]);
			if (!d)
				fail_msg("readdir (limit %zu) missed \"%s\"", limits[li], names[i]);
			assert_int_equal(d->d_ino, (uint64_t)lookup_ino(e, dir, names[i]));
		}
		free(r.r_ents);
	}
}

static void test_readdir_offsets(void **state)
{
	static char names[600][16];
	struct env e;

	env_init(&e, 64 * MiB, 4 * MiB);
	/* an inline directory and one that needs hashing */
	uint64_t small = mkdirat_(&e, e.e_root, "small");
	uint64_t big = mkdirat_(&e, e.e_root, "big");
	for (int i = 0; i < 600; i++) {
		snprintf(names[i], sizeof(names[i]), "e%05d", i * 7);
		if (i < 20) {
			if (i % 2)
				mkdirat_(&e, small, names[i]);
			else
				mkfile(&e, small, names[i], 0644);
		}
		mkfile(&e, big, names[i], 0644);
	}
	readdir_resume_check(&e, small, names, 20);
	readdir_resume_check(&e, big, names, 600);
	/* types reported by readdir */
	struct tc_rd r;
	read_dir(&e, small, 0, &r);
	tc_rd_sort_unique(&r);
	assert_int_equal(tc_rd_find(&r, names[1])->d_type, S_IFDIR);
	assert_int_equal(tc_rd_find(&r, names[2])->d_type, S_IFREG);
	free(r.r_ents);

	/* entries removed between calls: every other name still appears exactly once */
	memset(&r, 0, sizeof(r));
	r.r_limit = 5;
	int removed = 0;
	for (;;) {
		size_t before = r.r_n;
		r.r_call = 0;
		assert_int_equal(shoal_readdir(e.e_fs, big, r.r_last, 0, tc_fill, &r), 0);
		if (r.r_n == before)
			break;
		if (removed < 300) {
			/* remove names with an odd index (they may or may not show up) */
			for (int k = 0; k < 10 && removed < 300; k++, removed++)
				assert_int_equal(shoal_unlink(e.e_fs, &root_ctx, big,
							      names[2 * removed + 1]),
						 0);
		}
	}
	tc_rd_sort_unique(&r);
	for (int i = 0; i < 600; i += 2)
		if (!tc_rd_find(&r, names[i]))
			fail_msg("readdir during unlinks missed \"%s\"", names[i]);
	free(r.r_ents);
	assert_int_equal(removed, 300);

	env_remount(&e);
	static char evens[300][16];
	for (int i = 0; i < 300; i++)
		memcpy(evens[i], names[2 * i], 16);
	readdir_resume_check(&e, big, evens, 300);
	check_tree(&e, 1);
	env_fini(&e);
}

/* 30,000 names in one directory: 3,000 files with 10 names each. */
static void test_big_directory(void **state)
{
	enum { NFILES = 3000, NAMES = 10, N = NFILES * NAMES };
	struct env e;
	struct stat st;
	char name[64];
	uint64_t *inos = malloc(NFILES * sizeof(*inos));

	assert_non_null(inos);
	env_init(&e, 128 * MiB, 8 * MiB);
	uint64_t base = bfree(&e);
	uint64_t d = mkdirat_(&e, e.e_root, "d");
	for (int i = 0; i < NFILES; i++) {
		snprintf(name, sizeof(name), "file-%d-0", i);
		inos[i] = mkfile(&e, d, name, 0644);
	}
	for (int k = 1; k < NAMES; k++) {
		for (int i = 0; i < NFILES; i++) {
			snprintf(name, sizeof(name), "file-%d-%d", i, k);
			int err = shoal_link(e.e_fs, inos[i], d, name, &st);
			if (err)
				fail_msg("link %s: %s", name, strerror(-err));
			shoal_forget(e.e_fs, inos[i], 1);
		}
	}
	assert_int_equal(getattr_(&e, inos[17]).st_nlink, NAMES);
	for (int r = 0; r < 2; r++) {
		for (int k = 0; k < NAMES; k++) {
			for (int i = 0; i < NFILES; i++) {
				snprintf(name, sizeof(name), "file-%d-%d", i, k);
				int64_t ino = lookup_ino(&e, d, name);
				if (ino != (int64_t)inos[i])
					fail_msg("lookup %s: %lld, want %llu", name, (long long)ino,
						 (unsigned long long)inos[i]);
			}
		}
		assert_int_equal(lookup_ino(&e, d, "file-3000-0"), -ENOENT);
		struct tc_rd rr;
		read_dir(&e, d, 100, &rr);
		assert_int_equal(rr.r_n, N + 2);
		tc_rd_sort_unique(&rr);
		for (int i = 0; i < NFILES; i += 7) {
			snprintf(name, sizeof(name), "file-%d-%d", i, i % NAMES);
			assert_non_null(tc_rd_find(&rr, name));
			assert_int_equal(tc_rd_find(&rr, name)->d_ino, inos[i]);
		}
		free(rr.r_ents);
		if (r == 0)
			env_remount(&e);
	}
	check_tree(&e, 1);

	/* remove everything: first nine names of each, then the last ones */
	for (int k = 0; k < NAMES; k++) {
		for (int i = 0; i < NFILES; i++) {
			snprintf(name, sizeof(name), "file-%d-%d", i, k);
			int err = shoal_unlink(e.e_fs, &root_ctx, d, name);
			if (err)
				fail_msg("unlink %s: %s", name, strerror(-err));
		}
		if (k == NAMES / 2) {
			struct tc_rd rr;
			read_dir(&e, d, 333, &rr);
			assert_int_equal(rr.r_n, NFILES * (NAMES - k - 1) + 2);
			free(rr.r_ents);
		}
	}
	struct tc_rd rr;
	read_dir(&e, d, 0, &rr);
	assert_int_equal(rr.r_n, 2);
	free(rr.r_ents);
	assert_int_equal(lookup_ino(&e, d, "file-5-5"), -ENOENT);
	assert_int_equal(shoal_rmdir(e.e_fs, &root_ctx, e.e_root, "d"), 0);
	assert_int_equal(bfree(&e), base);
	env_remount(&e);
	assert_int_equal(bfree(&e), base);
	check_tree(&e, 1);
	env_fini(&e);
	free(inos);
}

static void test_xattr(void **state)
{
	struct env e;
	char buf[8192], val[5000];

	env_init(&e, 64 * MiB, 2 * MiB);
	uint64_t base = bfree(&e);
	uint64_t f = mkfile(&e, e.e_root, "f", 0644);
	uint64_t after_create = bfree(&e);

	assert_int_equal(shoal_listxattr(e.e_fs, f, buf, sizeof(buf)), 0);
	assert_int_equal(shoal_getxattr(e.e_fs, f, "user.a", buf, sizeof(buf)), -ENODATA);
	assert_int_equal(shoal_setxattr(e.e_fs, f, "user.a", "hello", 5, 0), 0);
	assert_int_equal(after_create - bfree(&e), 1); /* one xattr block */
	assert_int_equal(shoal_getxattr(e.e_fs, f, "user.a", NULL, 0), 5);
	assert_int_equal(shoal_getxattr(e.e_fs, f, "user.a", buf, sizeof(buf)), 5);
	assert_memory_equal(buf, "hello", 5);
	assert_int_equal(shoal_getxattr(e.e_fs, f, "user.a", buf, 3), -ERANGE);
	assert_int_equal(shoal_setxattr(e.e_fs, f, "user.a", "x", 1, XATTR_CREATE), -EEXIST);
	assert_int_equal(shoal_setxattr(e.e_fs, f, "user.b", "x", 1, XATTR_REPLACE), -ENODATA);
	assert_int_equal(shoal_setxattr(e.e_fs, f, "user.a", "bye", 3, XATTR_REPLACE), 0);
	assert_int_equal(shoal_getxattr(e.e_fs, f, "user.a", buf, sizeof(buf)), 3);
	assert_memory_equal(buf, "bye", 3);
	assert_int_equal(shoal_setxattr(e.e_fs, f, "trusted.t", "", 0, 0), 0);
	assert_int_equal(shoal_getxattr(e.e_fs, f, "trusted.t", buf, sizeof(buf)), 0);
	assert_int_equal(shoal_setxattr(e.e_fs, f, "security.s", "sec", 3, 0), 0);
	assert_int_equal(shoal_setxattr(e.e_fs, f, "bogus.x", "v", 1, 0), -EOPNOTSUPP);
	assert_int_equal(shoal_getxattr(e.e_fs, f, "user.a", buf, sizeof(buf)), 3);

	/* the list holds the full names, NUL-terminated */
	const char want[] = "user.a\0trusted.t\0security.s\0";
	ssize_t n = shoal_listxattr(e.e_fs, f, NULL, 0);
	assert_int_equal(n, sizeof(want) - 1);
	assert_int_equal(shoal_listxattr(e.e_fs, f, buf, 5), -ERANGE);
	assert_int_equal(shoal_listxattr(e.e_fs, f, buf, sizeof(buf)), n);
	/* order is not specified: check as a set */
	for (const char *p = want; *p; p += strlen(p) + 1) {
		int found = 0;
		for (const char *q = buf; q < buf + n; q += strlen(q) + 1)
			found |= !strcmp(p, q);
		if (!found)
			fail_msg("listxattr lacks %s", p);
	}

	/* size limits: too big for the block is refused, the rest stays */
	memset(val, 'v', sizeof(val));
	assert_int_equal(shoal_setxattr(e.e_fs, f, "user.big", val, 5000, 0), -E2BIG);
	assert_int_equal(shoal_setxattr(e.e_fs, f, "user.big", val, 3000, 0), 0);
	int r = shoal_setxattr(e.e_fs, f, "user.big2", val, 2000, 0);
	assert_true(r == -ENOSPC || r == -E2BIG);
	assert_int_equal(shoal_getxattr(e.e_fs, f, "user.big", buf, sizeof(buf)), 3000);
	assert_memory_equal(buf, val, 3000);
	/* a name of 255 bytes after the prefix works, 256 not */
	char xn[300];
	memcpy(xn, "user.", 5);
	memset(xn + 5, 'k', 255);
	xn[260] = '\0';
	assert_int_equal(shoal_setxattr(e.e_fs, f, xn, "1", 1, 0), 0);
	assert_int_equal(shoal_getxattr(e.e_fs, f, xn, buf, sizeof(buf)), 1);
	xn[260] = 'k';
	xn[261] = '\0';
	assert_int_equal(shoal_setxattr(e.e_fs, f, xn, "1", 1, 0), -ERANGE);
	xn[260] = '\0';

	/* on a directory too */
	assert_int_equal(shoal_setxattr(e.e_fs, e.e_root, "user.dir", "d", 1, 0), 0);

	env_remount(&e);
	assert_int_equal(shoal_getxattr(e.e_fs, f, "user.a", buf, sizeof(buf)), 3);
	assert_memory_equal(buf, "bye", 3);
	assert_int_equal(shoal_getxattr(e.e_fs, f, "user.big", buf, sizeof(buf)), 3000);
	assert_int_equal(shoal_getxattr(e.e_fs, f, xn, buf, sizeof(buf)), 1);
	assert_int_equal(shoal_getxattr(e.e_fs, e.e_root, "user.dir", buf, sizeof(buf)), 1);

	/* removing the last attribute frees the block */
	assert_int_equal(shoal_removexattr(e.e_fs, f, "user.nope"), -ENODATA);
	assert_int_equal(shoal_removexattr(e.e_fs, f, "user.a"), 0);
	assert_int_equal(shoal_getxattr(e.e_fs, f, "user.a", buf, sizeof(buf)), -ENODATA);
	assert_int_equal(shoal_removexattr(e.e_fs, f, "trusted.t"), 0);
	assert_int_equal(shoal_removexattr(e.e_fs, f, "security.s"), 0);
	assert_int_equal(shoal_removexattr(e.e_fs, f, "user.big"), 0);
	assert_int_equal(shoal_removexattr(e.e_fs, f, xn), 0);
	assert_int_equal(shoal_listxattr(e.e_fs, f, buf, sizeof(buf)), 0);
	assert_int_equal(bfree(&e), after_create - 1); /* the root's block remains */
	assert_int_equal(shoal_removexattr(e.e_fs, e.e_root, "user.dir"), 0);
	assert_int_equal(bfree(&e), after_create);
	/* an inode with attributes is freed with them */
	assert_int_equal(shoal_setxattr(e.e_fs, f, "user.z", "z", 1, 0), 0);
	assert_int_equal(shoal_unlink(e.e_fs, &root_ctx, e.e_root, "f"), 0);
	assert_int_equal(bfree(&e), base);
	check_tree(&e, 1);
	env_fini(&e);
}

/* An ACL in the kernel's xattr format: n entries of tag, perm, id. */
static size_t acl_build(uint8_t *buf, const uint32_t (*ents)[3], size_t n)
{
	uint32_t v = 2;
	memcpy(buf, &v, 4);
	for (size_t i = 0; i < n; i++) {
		uint16_t tag = (uint16_t)ents[i][0], perm = (uint16_t)ents[i][1];
		memcpy(buf + 4 + 8 * i, &tag, 2);
		memcpy(buf + 4 + 8 * i + 2, &perm, 2);
		memcpy(buf + 4 + 8 * i + 4, &ents[i][2], 4);
	}
	return 4 + 8 * n;
}

/* The perm of the first entry with tag in a stored ACL, or -1. */
static int acl_perm_of(struct env *e, uint64_t ino, const char *name, uint16_t tag)
{
	uint8_t buf[256];
	ssize_t n = shoal_getxattr(e->e_fs, ino, name, buf, sizeof(buf));
	for (ssize_t off = 4; off + 8 <= n; off += 8) {
		uint16_t t, p;
		memcpy(&t, buf + off, 2);
		memcpy(&p, buf + off + 2, 2);
		if (t == tag)
			return p;
	}
	return -1;
}

/* POSIX ACLs (core/acl.c): enforcement with the mask, chmod, inheritance. */
static void test_acl(void **state)
{
	struct env e;
	struct stat st, a;
	uint8_t acl[128];
	const uint32_t ANY = 0xffffffffu;
	const struct shoal_ctx named = { .c_uid = 3000, .c_gid = 3000, .c_pid = 4 };
	const struct shoal_ctx member = { .c_uid = 3001, .c_gid = 5000, .c_pid = 5 };

	env_init(&e, 64 * MiB, 2 * MiB);
	uint64_t f = mkfile(&e, e.e_root, "f", 0600);
	memset(&a, 0, sizeof(a));
	a.st_uid = 0;
	a.st_gid = 5000;
	assert_int_equal(shoal_setattr(e.e_fs, &root_ctx, f, &a, SHOAL_SET_GID, &st), 0);
	const uint32_t ents[][3] = { { 1, 6, ANY }, { 2, 4, 3000 }, { 4, 0, ANY },
				     { 0x10, 4, ANY }, { 0x20, 0, ANY } };
	size_t n = acl_build(acl, ents, 5);
	assert_int_equal(shoal_setxattr(e.e_fs, f, "system.posix_acl_access", acl, n, 0), 0);
	assert_int_equal(getattr_(&e, f).st_mode & 07777, 0640); /* group bits: the mask */
	shoal_caller_set(&named);
	assert_int_equal(shoal_access(e.e_fs, f, R_OK), 0);
	assert_int_equal(shoal_access(e.e_fs, f, W_OK), -EACCES); /* mask r */
	shoal_caller_set(&member);
	assert_int_equal(shoal_access(e.e_fs, f, R_OK), -EACCES); /* group::--- */
	shoal_caller_set(NULL);

	/* chmod sets user::, mask:: and other::, not group:: */
	a.st_mode = 0470;
	assert_int_equal(shoal_setattr(e.e_fs, &root_ctx, f, &a, SHOAL_SET_MODE, &st), 0);
	assert_int_equal(acl_perm_of(&e, f, "system.posix_acl_access", 0x01), 4);
	assert_int_equal(acl_perm_of(&e, f, "system.posix_acl_access", 0x10), 7);
	assert_int_equal(acl_perm_of(&e, f, "system.posix_acl_access", 0x04), 0);
	assert_int_equal(acl_perm_of(&e, f, "system.posix_acl_access", 0x20), 0);
	shoal_caller_set(&named);
	assert_int_equal(shoal_access(e.e_fs, f, R_OK | W_OK), -EACCES); /* its own entry: r */
	shoal_caller_set(NULL);
	a.st_mode = 0600;
	assert_int_equal(shoal_setattr(e.e_fs, &root_ctx, f, &a, SHOAL_SET_MODE, &st), 0);
	assert_int_equal(acl_perm_of(&e, f, "system.posix_acl_access", 0x10), 0);
	shoal_caller_set(&named);
	assert_int_equal(shoal_access(e.e_fs, f, R_OK), -EACCES); /* mask --- */
	shoal_caller_set(NULL);

	/* a default ACL: inherited, cut to the mode asked for; umask ignored */
	struct stat d;
	struct shoal_ctx umask022 = root_ctx;
	umask022.c_umask = 022;
	assert_int_equal(shoal_mkdir(e.e_fs, &root_ctx, e.e_root, "d", 0755, &d), 0);
	const uint32_t def[][3] = { { 1, 7, ANY }, { 2, 5, 3000 }, { 4, 5, ANY },
				    { 0x10, 7, ANY }, { 0x20, 0, ANY } };
	n = acl_build(acl, def, 5);
	assert_int_equal(shoal_setxattr(e.e_fs, d.st_ino, "system.posix_acl_default", acl, n, 0), 0);
	assert_int_equal(shoal_create(e.e_fs, &umask022, d.st_ino, "g", 0666, O_RDWR, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0660);
	assert_int_equal(acl_perm_of(&e, st.st_ino, "system.posix_acl_access", 0x10), 6);
	assert_int_equal(acl_perm_of(&e, st.st_ino, "system.posix_acl_access", 0x02), 5);
	assert_int_equal(shoal_getxattr(e.e_fs, st.st_ino, "system.posix_acl_default", NULL, 0),
			 -ENODATA);
	struct stat sub;
	assert_int_equal(shoal_mkdir(e.e_fs, &umask022, d.st_ino, "sub", 0777, &sub), 0);
	assert_int_equal(sub.st_mode & 07777, 0770);
	assert_int_equal(shoal_getxattr(e.e_fs, sub.st_ino, "system.posix_acl_default", NULL, 0),
			 (ssize_t)n);
	/* no default ACL: the umask applies */
	struct stat h;
	assert_int_equal(shoal_create(e.e_fs, &umask022, e.e_root, "h", 0666, O_RDWR, &h), 0);
	assert_int_equal(h.st_mode & 07777, 0644);
	/* a malformed default ACL: EINVAL (no user:: entry) */
	uint8_t bad[128];
	size_t nbad = acl_build(bad, def + 1, 4);
	assert_int_equal(shoal_setxattr(e.e_fs, d.st_ino, "system.posix_acl_default", bad, nbad, 0),
			 -EINVAL);
	/* a default ACL on a file: EACCES */
	assert_int_equal(shoal_setxattr(e.e_fs, f, "system.posix_acl_default", acl, n, 0), -EACCES);
	shoal_forget(e.e_fs, d.st_ino, 1);
	shoal_forget(e.e_fs, st.st_ino, 1);
	shoal_forget(e.e_fs, sub.st_ino, 1);
	shoal_forget(e.e_fs, h.st_ino, 1);
	env_fini(&e);
}

static void test_flags(void **state)
{
	struct env e;
	struct stat a = { 0 }, st;
	uint32_t fl;
	char buf[16];

	env_init(&e, 64 * MiB, 2 * MiB);
	uint64_t f = mkfile(&e, e.e_root, "f", 0644);
	write_pattern(&e, f, 0, 100, 1);
	uint64_t d = mkdirat_(&e, e.e_root, "d");
	mkfile(&e, d, "in", 0644);

	assert_int_equal(shoal_getflags(e.e_fs, f, &fl), 0);
	assert_int_equal(fl, 0);
	assert_int_equal(shoal_setflags(e.e_fs, &root_ctx, f, 0x80000000u), -EOPNOTSUPP);
	assert_int_equal(shoal_setflags(e.e_fs, &user_ctx, f, FS_IMMUTABLE_FL), -EPERM);
	assert_int_equal(shoal_setflags(e.e_fs, &root_ctx, f, FS_NOATIME_FL), 0);
	assert_int_equal(shoal_getflags(e.e_fs, f, &fl), 0);
	assert_int_equal(fl, FS_NOATIME_FL);

	/* immutable: nothing changes, reading works */
	assert_int_equal(shoal_setflags(e.e_fs, &root_ctx, f, FS_IMMUTABLE_FL), 0);
	assert_int_equal(shoal_write(e.e_fs, &root_ctx, f, "x", 1, 0, O_RDWR), -EPERM);
	assert_int_equal(shoal_open(e.e_fs, f, O_WRONLY), -EPERM);
	assert_int_equal(shoal_open(e.e_fs, f, O_RDONLY), 0);
	assert_int_equal(shoal_release(e.e_fs, f, O_RDONLY), 0);
	a.st_size = 0;
	assert_int_equal(shoal_setattr(e.e_fs, &root_ctx, f, &a, SHOAL_SET_SIZE, &st), -EPERM);
	a.st_mode = 0600;
	assert_int_equal(shoal_setattr(e.e_fs, &root_ctx, f, &a, SHOAL_SET_MODE, &st), -EPERM);
	assert_int_equal(shoal_setattr(e.e_fs, &root_ctx, f, &a, SHOAL_SET_MTIME_NOW, &st), -EPERM);
	assert_int_equal(shoal_unlink(e.e_fs, &root_ctx, e.e_root, "f"), -EPERM);
	assert_int_equal(shoal_rename(e.e_fs, &root_ctx, e.e_root, "f", e.e_root, "g", 0), -EPERM);
	assert_int_equal(shoal_link(e.e_fs, f, e.e_root, "g", &st), -EPERM);
	assert_int_equal(shoal_setxattr(e.e_fs, f, "user.x", "1", 1, 0), -EPERM);
	assert_int_equal(shoal_fallocate(e.e_fs, f, 0, 0, 8192), -EPERM);
	assert_int_equal(shoal_read(e.e_fs, f, buf, sizeof(buf), 0, O_RDONLY), 16);
	check_range(&e, f, 0, 100, 1);
	env_remount(&e);
	assert_int_equal(shoal_getflags(e.e_fs, f, &fl), 0);
	assert_int_equal(fl, FS_IMMUTABLE_FL);
	assert_int_equal(shoal_unlink(e.e_fs, &root_ctx, e.e_root, "f"), -EPERM);
	assert_int_equal(shoal_setflags(e.e_fs, &root_ctx, f, 0), 0);
	write_pattern(&e, f, 100, 10, 1);

	/* an immutable directory refuses new and removed entries */
	assert_int_equal(shoal_setflags(e.e_fs, &root_ctx, d, FS_IMMUTABLE_FL), 0);
	assert_int_equal(shoal_create(e.e_fs, &root_ctx, d, "new", 0644, O_RDWR, &st), -EPERM);
	assert_int_equal(shoal_unlink(e.e_fs, &root_ctx, d, "in"), -EPERM);
	assert_int_equal(shoal_rename(e.e_fs, &root_ctx, e.e_root, "f", d, "f", 0), -EPERM);
	assert_int_equal(shoal_setflags(e.e_fs, &root_ctx, d, 0), 0);

	/* append-only: only writes at the end */
	assert_int_equal(shoal_setflags(e.e_fs, &root_ctx, f, FS_APPEND_FL), 0);
	assert_int_equal(shoal_open(e.e_fs, f, O_WRONLY), -EPERM);
	assert_int_equal(shoal_open(e.e_fs, f, O_WRONLY | O_APPEND | O_TRUNC), -EPERM);
	assert_int_equal(shoal_open(e.e_fs, f, O_WRONLY | O_APPEND), 0);
	assert_int_equal(shoal_write(e.e_fs, &root_ctx, f, "abc", 3, 0, O_WRONLY), -EPERM);
	/* an O_APPEND write goes to the end whatever position it names */
	uint64_t at = 0;
	assert_int_equal(shoal_write_at(e.e_fs, &root_ctx, f, "abc", 3, &at, O_WRONLY | O_APPEND), 3);
	assert_int_equal(at, 110);
	assert_int_equal(shoal_release(e.e_fs, f, O_WRONLY | O_APPEND), 0);
	assert_int_equal(getattr_(&e, f).st_size, 113);
	a.st_size = 10;
	assert_int_equal(shoal_setattr(e.e_fs, &root_ctx, f, &a, SHOAL_SET_SIZE, &st), -EPERM);
	assert_int_equal(shoal_unlink(e.e_fs, &root_ctx, e.e_root, "f"), -EPERM);
	assert_int_equal(shoal_fallocate(e.e_fs, f, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
					 10),
			 -EPERM);
	/* an append-only directory accepts new entries but no removals */
	assert_int_equal(shoal_setflags(e.e_fs, &root_ctx, d, FS_APPEND_FL), 0);
	mkfile(&e, d, "added", 0644);
	assert_int_equal(shoal_unlink(e.e_fs, &root_ctx, d, "added"), -EPERM);
	assert_int_equal(shoal_setflags(e.e_fs, &root_ctx, d, 0), 0);
	/* a non-root owner may set other flags but not clear append */
	a.st_uid = 1000;
	assert_int_equal(shoal_setattr(e.e_fs, &root_ctx, d, &a, SHOAL_SET_UID, &st), 0);
	assert_int_equal(shoal_setflags(e.e_fs, &user_ctx, d, FS_NOATIME_FL), 0);
	assert_int_equal(shoal_setflags(e.e_fs, &user_ctx, f, 0), -EPERM);
	assert_int_equal(shoal_setflags(e.e_fs, &root_ctx, f, 0), 0);
	assert_int_equal(shoal_unlink(e.e_fs, &root_ctx, e.e_root, "f"), 0);
	check_tree(&e, 1);
	env_fini(&e);
}

/* An unlinked file lives while open and is freed by its last release. */
static void test_unlink_open(void **state)
{
	struct env e;
	struct stat st;

	env_init(&e, 64 * MiB, 2 * MiB);
	uint64_t base = bfree(&e);
	assert_int_equal(shoal_create(e.e_fs, &root_ctx, e.e_root, "f", 0644, O_RDWR, &st), 0);
	uint64_t f = st.st_ino;
	write_pattern(&e, f, 0, MiB, 1);
	uint64_t used = base - bfree(&e);
	assert_true(used >= MiB / e.e_bs + 1);
	assert_int_equal(shoal_open(e.e_fs, f, O_RDONLY), 0); /* a second handle */

	assert_int_equal(shoal_unlink(e.e_fs, &root_ctx, e.e_root, "f"), 0);
	assert_int_equal(lookup_ino(&e, e.e_root, "f"), -ENOENT);
	st = getattr_(&e, f);
	assert_int_equal(st.st_nlink, 0);
	check_range(&e, f, 0, MiB, 1);
	write_pattern(&e, f, MiB, 4096, 1); /* still writable */
	assert_true(base - bfree(&e) >= used);
	shoal_forget(e.e_fs, f, 1); /* the kernel forgets before the last close */
	assert_int_equal(shoal_release(e.e_fs, f, O_RDWR), 0);
	check_range(&e, f, 0, MiB, 1);
	assert_true(base - bfree(&e) >= used);
	assert_int_equal(shoal_release(e.e_fs, f, O_RDONLY), 0);
	assert_int_equal(bfree(&e), base);

	/* still open at unmount: freed then, nothing leaks */
	assert_int_equal(shoal_create(e.e_fs, &root_ctx, e.e_root, "g", 0644, O_RDWR, &st), 0);
	write_pattern(&e, st.st_ino, 0, 100000, 2);
	assert_int_equal(shoal_unlink(e.e_fs, &root_ctx, e.e_root, "g"), 0);
	env_remount(&e);
	assert_int_equal(bfree(&e), base);

	/* unlinked directory still held: freed at the last forget */
	assert_int_equal(shoal_mkdir(e.e_fs, &root_ctx, e.e_root, "d", 0755, &st), 0);
	assert_int_equal(shoal_rmdir(e.e_fs, &root_ctx, e.e_root, "d"), 0);
	assert_int_equal(getattr_(&e, st.st_ino).st_nlink, 0);
	shoal_forget(e.e_fs, st.st_ino, 1);
	assert_int_equal(bfree(&e), base);
	check_tree(&e, 1);
	env_fini(&e);
}

static void test_statfs(void **state)
{
	struct env e;
	struct statvfs sv, sv2;

	env_init(&e, 64 * MiB, 2 * MiB);
	assert_int_equal(shoal_statfs(e.e_fs, &sv), 0);
	assert_int_equal(sv.f_bsize, e.e_bs);
	assert_int_equal(sv.f_frsize, e.e_bs);
	assert_int_equal(sv.f_namemax, 255);
	assert_true(sv.f_blocks > 0 && sv.f_blocks < 64 * MiB / e.e_bs);
	assert_true(sv.f_bfree < sv.f_blocks && sv.f_bfree > sv.f_blocks - 16);
	assert_true(sv.f_bavail <= sv.f_bfree);
	assert_true(sv.f_ffree > 0);

	/* writing n blocks takes at least n, deleting gives exactly all back */
	uint64_t f = mkfile(&e, e.e_root, "f", 0644);
	write_pattern(&e, f, 0, 4 * MiB, 1);
	assert_int_equal(shoal_statfs(e.e_fs, &sv2), 0);
	assert_true(sv.f_bfree - sv2.f_bfree >= 4 * MiB / e.e_bs + 1);
	assert_true(sv.f_bfree - sv2.f_bfree <= 4 * MiB / e.e_bs + 8);
	assert_true(sv2.f_ffree < sv.f_ffree);
	assert_int_equal(sv2.f_blocks, sv.f_blocks);
	assert_int_equal(memcmp(&sv.f_fsid, &sv2.f_fsid, sizeof(sv.f_fsid)), 0);
	env_remount(&e);
	assert_int_equal(shoal_statfs(e.e_fs, &sv2), 0);
	assert_true(sv.f_bfree - sv2.f_bfree >= 4 * MiB / e.e_bs + 1);
	assert_int_equal(shoal_unlink(e.e_fs, &root_ctx, e.e_root, "f"), 0);
	assert_int_equal(shoal_statfs(e.e_fs, &sv2), 0);
	assert_int_equal(sv2.f_bfree, sv.f_bfree);
	/* freed blocks can be used again right away (after the checkpoint the
	 * allocator needs): writing the same amount again succeeds */
	f = mkfile(&e, e.e_root, "f", 0644);
	write_pattern(&e, f, 0, 4 * MiB, 2);
	check_range(&e, f, 0, 4 * MiB, 2);
	check_tree(&e, 1);
	env_fini(&e);
}

/* Fill a small filesystem: ENOSPC, then everything still consistent. */
static void test_enospc(void **state)
{
	struct env e;
	char name[32];
	uint8_t *buf = malloc(MiB);
	int nfull = 0, err = 0;
	uint64_t sizes[64];

	assert_non_null(buf);
	env_init(&e, 32 * MiB, 1 * MiB);
	uint64_t base = bfree(&e);
	assert_true(base * e.e_bs < 31 * MiB);
	/* files of 1 MiB until the space runs out */
	for (int i = 0; i < 64; i++) {
		struct stat st;
		snprintf(name, sizeof(name), "f%d", i);
		err = shoal_create(e.e_fs, &root_ctx, e.e_root, name, 0644, O_RDWR, &st);
		if (err) {
			assert_int_equal(err, -ENOSPC);
			break;
		}
		fill_pattern(buf, MiB, 0, (unsigned)i + 1);
		ssize_t n = shoal_write(e.e_fs, &root_ctx, st.st_ino, buf, MiB, 0, O_RDWR);
		assert_int_equal(shoal_release(e.e_fs, st.st_ino, O_RDWR), 0);
		shoal_forget(e.e_fs, st.st_ino, 1);
		if (n == (ssize_t)MiB) {
			sizes[i] = MiB;
			nfull++;
			continue;
		}
		/* a short write, then ENOSPC */
		assert_true(n == -ENOSPC || (n >= 0 && n < (ssize_t)MiB));
		sizes[i] = n > 0 ? (uint64_t)n : 0;
		if (n > 0) {
			n = shoal_write(e.e_fs, &root_ctx, st.st_ino, buf + n, MiB - (size_t)n,
					(uint64_t)n, O_RDWR);
			assert_int_equal(n, -ENOSPC);
		}
		nfull++;
		break;
	}
	assert_true(nfull >= 20 && nfull < 32);
	assert_true(bfree(&e) < 16);
	/* more metadata runs out cleanly too */
	struct stat st;
	for (int i = 0; i < 100; i++) {
		snprintf(name, sizeof(name), "small%d", i);
		err = shoal_mkdir(e.e_fs, &root_ctx, e.e_root, name, 0755, &st);
		if (err)
			break;
		shoal_forget(e.e_fs, st.st_ino, 1);
	}
	assert_int_equal(err, -ENOSPC);
	assert_int_equal(shoal_is_readonly(e.e_fs), 0);
	assert_true(bfree(&e) < 4);
	/* a failed create leaves no name behind */
	assert_int_equal(shoal_create(e.e_fs, &root_ctx, e.e_root, "nospace", 0644, O_RDWR, &st),
			 -ENOSPC);
	assert_int_equal(lookup_ino(&e, e.e_root, "nospace"), -ENOENT);
	check_tree(&e, 1);
	for (int i = 0; i < nfull; i++) {
		snprintf(name, sizeof(name), "f%d", i);
		int64_t ino = lookup_ino(&e, e.e_root, name);
		assert_true(ino > 0);
		assert_int_equal(getattr_(&e, (uint64_t)ino).st_size, (off_t)sizes[i]);
		if (sizes[i])
			check_range(&e, (uint64_t)ino, 0, sizes[i], (unsigned)i + 1);
	}

	env_remount(&e);
	check_tree(&e, 1);
	for (int i = 0; i < nfull; i++) {
		snprintf(name, sizeof(name), "f%d", i);
		int64_t ino = lookup_ino(&e, e.e_root, name);
		assert_true(ino > 0);
		if (sizes[i])
			check_range(&e, (uint64_t)ino, 0, sizes[i], (unsigned)i + 1);
	}

	/* room again right after a delete: every kind of allocation succeeds */
	assert_int_equal(shoal_unlink(e.e_fs, &root_ctx, e.e_root, "f0"), 0);
	assert_true(bfree(&e) >= MiB / e.e_bs);
	assert_int_equal(shoal_mkdir(e.e_fs, &root_ctx, e.e_root, "dir-again", 0755, &st), 0);
	shoal_forget(e.e_fs, st.st_ino, 1);
	uint64_t g = mkfile(&e, e.e_root, "again", 0644);
	write_pattern(&e, g, 0, MiB / 2, 77);
	check_range(&e, g, 0, MiB / 2, 77);
	env_remount(&e);
	check_tree(&e, 1);
	check_range(&e, g, 0, MiB / 2, 77);
	free(buf);
	env_fini(&e);
}

/* Writes far out need the tallest block maps; beyond the largest file, EFBIG. */
static void test_huge_offsets(void **state)
{
	struct env e;
	static const uint64_t offs[] = { 1ull << 32, 1ull << 40, 1ull << 50, 1ull << 56 };

	env_init(&e, 64 * MiB, 2 * MiB);
	uint64_t base = bfree(&e);
	uint64_t f = mkfile(&e, e.e_root, "f", 0644);
	write_pattern(&e, f, 0, 5000, 1);
	for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
		ssize_t n = shoal_write(e.e_fs, &root_ctx, f, "abcdefgh", 8, offs[i], O_RDWR);
		if (n == -EFBIG)
			continue; /* past this filesystem's largest file: fine, if refused */
		assert_int_equal(n, 8);
		assert_int_equal(getattr_(&e, f).st_size, (off_t)(offs[i] + 8));
		char b[8];
		assert_int_equal(shoal_read(e.e_fs, f, b, 8, offs[i], O_RDONLY), 8);
		assert_memory_equal(b, "abcdefgh", 8);
		check_range(&e, f, 0, 5000, 1);
		check_range(&e, f, offs[i] - 4096, 4096, 0);
	}
	env_remount(&e);
	check_range(&e, f, 0, 5000, 1);
	setsize(&e, f, 5000);
	check_range(&e, f, 0, 5000, 1);
	check_tree(&e, 1);
	assert_int_equal(shoal_unlink(e.e_fs, &root_ctx, e.e_root, "f"), 0);
	assert_int_equal(bfree(&e), base);

	/* no file may reach 2^63 bytes: st_size (off_t) could not say it */
	f = mkfile(&e, e.e_root, "g", 0644);
	assert_int_equal(shoal_write(e.e_fs, &root_ctx, f, "xy", 2, UINT64_MAX - 1, O_RDWR), -EFBIG);
	struct stat a = { .st_size = INT64_MAX }, st;
	int err = shoal_setattr(e.e_fs, &root_ctx, f, &a, SHOAL_SET_SIZE, &st);
	assert_true(err == 0 || err == -EFBIG);
	ssize_t n = shoal_write(e.e_fs, &root_ctx, f, "x", 1, (uint64_t)INT64_MAX, O_RDWR);
	if (n != -EFBIG)
		fail_msg("a write of 1 byte at 2^63-1 (the file would be 2^63 bytes) returned %zd, "
			 "st_size is now %lld", n, (long long)getattr_(&e, f).st_size);
	env_fini(&e);
}

/* --- zero-copy paths ------------------------------------------------------------ */

struct dsrc {
	const uint8_t *ds_buf;
	uint64_t ds_calls;
};

static int dwrite_fn(void *arg, int devfd, uint64_t devoff, size_t len, size_t srcoff)
{
	struct dsrc *d = arg;
	d->ds_calls++;
	if (pwrite(devfd, d->ds_buf + srcoff, len, (off_t)devoff) != (ssize_t)len)
		return -EIO;
	return 0;
}

struct ddst {
	uint8_t *dd_buf;
	size_t dd_len;
};

static int dread_fn(void *arg, int devfd, const struct shoal_piece *pv, unsigned n)
{
	struct ddst *d = arg;
	for (unsigned i = 0; i < n; i++) {
		if (pv[i].sv_mem)
			memcpy(d->dd_buf + d->dd_len, pv[i].sv_mem, pv[i].sv_len);
		else if (pread(devfd, d->dd_buf + d->dd_len, pv[i].sv_len, (off_t)pv[i].sv_devoff) !=
			 (ssize_t)pv[i].sv_len)
			return -EIO;
		d->dd_len += pv[i].sv_len;
	}
	return 0;
}

/* shoal_read_direct returns what shoal_read does, piece by piece. */
static void check_direct_read(struct env *e, uint64_t ino, uint64_t off, size_t len)
{
	uint8_t *a = malloc(len + 1), *b = malloc(len + 1);
	struct ddst d = { b, 0 };
	assert_non_null(a);
	assert_non_null(b);
	ssize_t n = shoal_read(e->e_fs, ino, a, len, off, O_RDONLY);
	assert_true(n >= 0);
	ssize_t m = shoal_read_direct(e->e_fs, ino, len, off, O_RDONLY, dread_fn, &d);
	assert_int_equal(m, n);
	assert_int_equal(d.dd_len, (size_t)n);
	assert_memory_equal(a, b, (size_t)n);
	free(a);
	free(b);
}

static void test_direct_io(void **state)
{
	struct env e;
	const size_t len = MiB + 12345;
	uint8_t *buf = malloc(len);

	assert_non_null(buf);
	env_init(&e, 64 * MiB, 2 * MiB);
	uint64_t f = mkfile(&e, e.e_root, "f", 0644);
	fill_pattern(buf, len, 0, 7);
	struct dsrc src = { buf, 0 };
	/* a large write goes straight to the device */
	uint64_t at = 0;
	ssize_t n = shoal_write_direct(e.e_fs, &root_ctx, f, len, &at, O_RDWR, dwrite_fn, &src);
	assert_int_equal(n, (ssize_t)len);
	assert_true(src.ds_calls >= 1);
	assert_int_equal(getattr_(&e, f).st_size, (off_t)len);
	check_range(&e, f, 0, len, 7);
	/* unaligned, over existing blocks and past the end */
	fill_pattern(buf, 9000, 4000, 8);
	src = (struct dsrc){ buf, 0 };
	at = len - 5000;
	n = shoal_write_direct(e.e_fs, &root_ctx, f, 9000, &at, O_RDWR, dwrite_fn, &src);
	if (n == -EAGAIN)
		n = shoal_write(e.e_fs, &root_ctx, f, buf, 9000, len - 5000, O_RDWR);
	assert_int_equal(n, 9000);
	uint8_t want[9000];
	fill_pattern(want, 9000, 4000, 8);
	uint8_t got[9000];
	assert_int_equal(shoal_read(e.e_fs, f, got, 9000, len - 5000, O_RDONLY), 9000);
	assert_memory_equal(got, want, 9000);
	/* reads: whole, unaligned, at the end, past the end, holes, inline */
	check_direct_read(&e, f, 0, len + 4000);
	check_direct_read(&e, f, 3, 100000);
	check_direct_read(&e, f, len, 100000);
	check_direct_read(&e, f, 10 * MiB, 4096);
	uint64_t s = mkfile(&e, e.e_root, "sparse", 0644);
	write_pattern(&e, s, 3 * MiB, 5000, 9);
	check_direct_read(&e, s, 0, 4 * MiB);
	uint64_t i = mkfile(&e, e.e_root, "inline", 0644);
	write_pattern(&e, i, 0, 700, 10);
	check_direct_read(&e, i, 0, 4096);
	check_direct_read(&e, i, 100, 10);
	uint64_t d = mkdirat_(&e, e.e_root, "d");
	struct ddst dd = { buf, 0 };
	assert_int_equal(shoal_read_direct(e.e_fs, d, 10, 0, O_RDONLY, dread_fn, &dd), -EISDIR);
	env_remount(&e);
	check_range(&e, f, 0, len - 5000, 7);
	assert_int_equal(shoal_read(e.e_fs, f, got, 9000, len - 5000, O_RDONLY), 9000);
	assert_memory_equal(got, want, 9000);
	check_tree(&e, 1);
	env_fini(&e);

	/* a device without a plain descriptor (the fault device) has no zero-copy path */
	char *path = tu_tmpimage(64 * MiB);
	struct shoal_format_opts fo = { .fo_journals = 1, .fo_jbytes = 2 * MiB };
	struct shoal_dev *low, *fd;
	struct shoal_fs *fs;
	assert_int_equal(dev_open(path, 0, &low), 0);
	assert_int_equal(shoal_format(low, &fo, NULL), 0);
	assert_int_equal(dev_fault_wrap(low, &fd), 0);
	assert_int_equal(shoal_mount(fd, NULL, &fs), 0);
	struct stat st;
	assert_int_equal(shoal_create(fs, &root_ctx, shoal_root(fs), "x", 0644, O_RDWR, &st), 0);
	src = (struct dsrc){ buf, 0 };
	at = 0;
	assert_int_equal(shoal_write_direct(fs, &root_ctx, st.st_ino, 65536, &at, O_RDWR, dwrite_fn, &src),
			 -EOPNOTSUPP);
	dd = (struct ddst){ buf, 0 };
	assert_int_equal(shoal_read_direct(fs, st.st_ino, 10, 0, O_RDONLY, dread_fn, &dd),
			 -EOPNOTSUPP);
	assert_int_equal(src.ds_calls, 0);
	assert_int_equal(shoal_release(fs, st.st_ino, O_RDWR), 0);
	assert_int_equal(shoal_unmount(fs), 0);
	dev_close(low);
	tu_rmimage(path);
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_create_lookup_getattr),
		cmocka_unit_test(test_create_existing),
		cmocka_unit_test(test_setattr),
		cmocka_unit_test(test_read_write_inline_blocks),
		cmocka_unit_test(test_truncate),
		cmocka_unit_test(test_truncate_grow_far),
		cmocka_unit_test(test_fallocate_punch),
		cmocka_unit_test(test_lseek_data_hole),
		cmocka_unit_test(test_link_unlink),
		cmocka_unit_test(test_symlink_readlink),
		cmocka_unit_test(test_mkdir_rmdir),
		cmocka_unit_test(test_rename),
		cmocka_unit_test(test_readdir_offsets),
		cmocka_unit_test(test_big_directory),
		cmocka_unit_test(test_xattr),
		cmocka_unit_test(test_acl),
		cmocka_unit_test(test_flags),
		cmocka_unit_test(test_unlink_open),
		cmocka_unit_test(test_statfs),
		cmocka_unit_test(test_enospc),
		cmocka_unit_test(test_huge_offsets),
		cmocka_unit_test(test_direct_io),
	};

	/* images in memory when possible: host flushes of a disk-backed image
	 * only cost time here (durability is test_journal.c's subject) */
	if (access("/dev/shm", W_OK) == 0)
		setenv("TMPDIR", "/dev/shm", 1);
	return cmocka_run_group_tests(tests, NULL, NULL);
}

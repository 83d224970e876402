/*
 * test_overlay_ops.c - the operations overlayfs needs of an upper layer
 * (it refuses one without them: "upper fs does not support tmpfile /
 * RENAME_WHITEOUT"), as ext4 has them, called on a mounted image without
 * FUSE: renameat2 RENAME_WHITEOUT (the source name becomes a character
 * device 0:0 in the same transaction; with NOREPLACE, never with
 * EXCHANGE), and O_TMPFILE (an unnamed file, an orphan until linkat names
 * it: freed at its last close, or by the next mount after a crash).  After each test the tree is walked (treecheck.h, blocks in
 * use exact) and fsck.shoal -n must find the image clean.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
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
#include <sys/wait.h>
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
static const struct shoal_ctx user_ctx = { .c_uid = 1000, .c_gid = 1000, .c_pid = 2 };

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

static uint64_t mkfile(struct env *e, uint64_t dir, const char *name)
{
	struct stat st;
	assert_int_equal(shoal_create(e->e_fs, &root_ctx, dir, name, 0644, O_RDWR, &st), 0);
	assert_int_equal(shoal_release(e->e_fs, st.st_ino, O_RDWR), 0);
	shoal_forget(e->e_fs, st.st_ino, 1);
	return st.st_ino;
}

static uint64_t mkdir_(struct env *e, uint64_t dir, const char *name)
{
	struct stat st;
	assert_int_equal(shoal_mkdir(e->e_fs, &root_ctx, dir, name, 0777, &st), 0);
	shoal_forget(e->e_fs, st.st_ino, 1);
	return st.st_ino;
}

/* stat of name in dir (-errno in st_ino's place: 0 and errno returned) */
static int look(struct env *e, uint64_t dir, const char *name, struct stat *st)
{
	int err = shoal_lookup(e->e_fs, dir, name, st);
	if (!err)
		shoal_forget(e->e_fs, st->st_ino, 1);
	return err;
}

static void assert_whiteout(struct env *e, uint64_t dir, const char *name)
{
	struct stat st;
	assert_int_equal(look(e, dir, name, &st), 0);
	assert_true(S_ISCHR(st.st_mode));
	assert_int_equal(st.st_mode & 07777, 0);
	assert_int_equal(st.st_rdev, makedev(0, 0));
	assert_int_equal(st.st_nlink, 1);
	assert_int_equal(st.st_size, 0);
}

static void test_rename_whiteout(void **state)
{
	struct env e;
	struct stat st;
	(void)state;
	env_init(&e);
	uint64_t r = e.e_root, d1 = mkdir_(&e, r, "d1"), d2 = mkdir_(&e, r, "d2");
	uint64_t a = mkfile(&e, d1, "a");

	mkfile(&e, d1, "b");

	/* the source name becomes a whiteout, the target names the source */
	assert_int_equal(shoal_rename(e.e_fs, &root_ctx, d1, "a", d2, "a2", RENAME_WHITEOUT), 0);
	assert_whiteout(&e, d1, "a");
	assert_int_equal(look(&e, d2, "a2", &st), 0);
	assert_int_equal(st.st_ino, a);
	/* over an existing target, which goes */
	assert_int_equal(shoal_rename(e.e_fs, &root_ctx, d2, "a2", d1, "b", RENAME_WHITEOUT), 0);
	assert_whiteout(&e, d2, "a2");
	assert_int_equal(look(&e, d1, "b", &st), 0);
	assert_int_equal(st.st_ino, a);
	/* with NOREPLACE: only onto a free name */
	uint64_t c = mkfile(&e, d1, "c");
	assert_int_equal(shoal_rename(e.e_fs, &root_ctx, d1, "c", d1, "b",
				      RENAME_WHITEOUT | RENAME_NOREPLACE),
			 -EEXIST);
	assert_int_equal(shoal_rename(e.e_fs, &root_ctx, d1, "c", d1, "c2",
				      RENAME_WHITEOUT | RENAME_NOREPLACE),
			 0);
	assert_whiteout(&e, d1, "c");
	assert_int_equal(look(&e, d1, "c2", &st), 0);
	assert_int_equal(st.st_ino, c);
	/* never with EXCHANGE; a caller without CAP_MKNOD may not */
	assert_int_equal(shoal_rename(e.e_fs, &root_ctx, d1, "c2", d1, "b",
				      RENAME_WHITEOUT | RENAME_EXCHANGE),
			 -EINVAL);
	assert_int_equal(shoal_rename(e.e_fs, &user_ctx, d1, "c2", d1, "c3", RENAME_WHITEOUT),
			 -EPERM);
	/* a missing source */
	assert_int_equal(shoal_rename(e.e_fs, &root_ctx, d1, "nope", d1, "x", RENAME_WHITEOUT),
			 -ENOENT);
	/* a directory moving to another parent: link counts follow it, the
	 * whiteout is no directory */
	uint64_t sub = mkdir_(&e, d1, "sub");
	mkfile(&e, sub, "inside");
	assert_int_equal(shoal_getattr(e.e_fs, d1, &st), 0);
	nlink_t n1 = st.st_nlink;
	assert_int_equal(shoal_rename(e.e_fs, &root_ctx, d1, "sub", d2, "sub", RENAME_WHITEOUT), 0);
	assert_whiteout(&e, d1, "sub");
	assert_int_equal(shoal_getattr(e.e_fs, d1, &st), 0);
	assert_int_equal(st.st_nlink, n1 - 1);
	assert_int_equal(look(&e, d2, "sub", &st), 0);
	assert_int_equal(st.st_ino, sub);
	/* a whiteout is an ordinary inode: unlink and rename it */
	assert_int_equal(shoal_unlink(e.e_fs, &root_ctx, d1, "c"), 0);
	assert_int_equal(shoal_rename(e.e_fs, &root_ctx, d1, "sub", d2, "wh", 0), 0);
	assert_whiteout(&e, d2, "wh");

	env_remount(&e);
	assert_whiteout(&e, d1, "a");
	assert_whiteout(&e, d2, "a2");
	assert_whiteout(&e, d2, "wh");
	env_fini(&e);
}


static uint64_t bfree(struct env *e)
{
	struct statvfs sv;
	assert_int_equal(shoal_statfs(e->e_fs, &sv), 0);
	return sv.f_bfree;
}

static void write_bytes(struct env *e, uint64_t ino, char c, size_t len, uint64_t off)
{
	char *buf = malloc(len);
	assert_non_null(buf);
	memset(buf, c, len);
	assert_int_equal(shoal_write(e->e_fs, &root_ctx, ino, buf, len, off, O_RDWR),
			 (ssize_t)len);
	free(buf);
}

static void close_forget(struct env *e, uint64_t ino)
{
	assert_int_equal(shoal_release(e->e_fs, ino, O_RDWR), 0);
	shoal_forget(e->e_fs, ino, 1);
}

static void test_tmpfile(void **state)
{
	struct env e;
	struct stat st, st2;
	char buf[16];
	(void)state;
	env_init(&e);
	uint64_t r = e.e_root, d = mkdir_(&e, r, "d"), f = mkfile(&e, r, "f");
	uint64_t free0 = bfree(&e);

	assert_int_equal(shoal_tmpfile(e.e_fs, &root_ctx, f, 0600, O_RDWR, &st), -ENOTDIR);
	/* an unnamed file with no links, whose blocks count until it goes */
	assert_int_equal(shoal_tmpfile(e.e_fs, &root_ctx, d, 0640, O_RDWR, &st), 0);
	assert_true(S_ISREG(st.st_mode));
	assert_int_equal(st.st_mode & 07777, 0640);
	assert_int_equal(st.st_nlink, 0);
	uint64_t t = st.st_ino;
	write_bytes(&e, t, 'x', 3 * e.e_bs, 0);
	assert_true(bfree(&e) < free0);
	assert_int_equal(shoal_getattr(e.e_fs, d, &st), 0);
	assert_int_equal(st.st_nlink, 2);
	/* the last close frees it */
	close_forget(&e, t);
	assert_int_equal(bfree(&e), free0);

	/* linkat names it: one link, the data under the name, kept */
	assert_int_equal(shoal_tmpfile(e.e_fs, &root_ctx, d, 0600, O_RDWR, &st), 0);
	t = st.st_ino;
	write_bytes(&e, t, 'y', 10, 0);
	assert_int_equal(shoal_link(e.e_fs, t, r, "named", &st2), 0);
	shoal_forget(e.e_fs, t, 1);
	assert_int_equal(st2.st_nlink, 1);
	assert_int_equal(shoal_link(e.e_fs, t, d, "again", &st2), 0); /* now an ordinary file */
	shoal_forget(e.e_fs, t, 1);
	assert_int_equal(st2.st_nlink, 2);
	close_forget(&e, t);
	assert_int_equal(look(&e, r, "named", &st), 0);
	assert_int_equal(st.st_ino, t);
	assert_int_equal(shoal_read(e.e_fs, t, buf, sizeof(buf), 0, O_RDONLY), 10);
	assert_memory_equal(buf, "yyyyyyyyyy", 10);

	/* a file unlinked while open is not a tmpfile: linkat gives ENOENT */
	struct stat o;
	assert_int_equal(shoal_lookup(e.e_fs, r, "f", &o), 0);
	assert_int_equal(shoal_open(e.e_fs, f, O_RDWR), 0);
	assert_int_equal(shoal_unlink(e.e_fs, &root_ctx, r, "f"), 0);
	assert_int_equal(shoal_link(e.e_fs, f, r, "f2", &st2), -ENOENT);
	close_forget(&e, f);

	env_remount(&e);
	assert_int_equal(look(&e, d, "again", &st), 0);
	assert_int_equal(st.st_nlink, 2);
	assert_int_equal(st.st_size, 10);
	env_fini(&e);
}

/* The image as a crash would leave it: a sparse copy of the file. */
static char *copy_image(const char *path)
{
	char *dst = tu_tmpimage(4096), cmd[2 * PATH_MAX + 64];
	snprintf(cmd, sizeof(cmd), "cp --sparse=always '%s' '%s'", path, dst);
	assert_int_equal(system(cmd), 0);
	return dst;
}

/* A tmpfile open at a crash is an orphan: the next mount frees it. */
static void test_tmpfile_crash(void **state)
{
	struct env e, c;
	struct stat st;
	(void)state;
	env_init(&e);
	uint64_t free0 = bfree(&e);

	assert_int_equal(shoal_tmpfile(e.e_fs, &root_ctx, e.e_root, 0600, O_RDWR, &st), 0);
	write_bytes(&e, st.st_ino, 'z', 5 * e.e_bs, 0);
	assert_int_equal(shoal_fsync(e.e_fs, st.st_ino, 0), 0); /* the journal has it */
	c.e_path = copy_image(e.e_path);
	close_forget(&e, st.st_ino);
	env_fini(&e);

	env_mount(&c); /* replays the journal, frees the orphan */
	assert_int_equal(bfree(&c), free0);
	env_fini(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rename_whiteout),
		cmocka_unit_test(test_tmpfile),
		cmocka_unit_test(test_tmpfile_crash),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_damage.c - regressions found by the structure-aware fuzzer
 * (tests/fuzz/fuzz_image.c, issue 21): each test builds the damaged block
 * the fuzzer found and checks what docs/FORMAT.md "Damage" promises for it.
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
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "dev.h"
#include "meta.h"
#include "shoal/ondisk.h"
#include "shoal/shoal.h"
#include "testutil.h"

#define MiB (1024ull * 1024)
#define BS 4096u

static const struct shoal_ctx root_ctx = { .c_uid = 0, .c_gid = 0, .c_pid = 1 };

/* Read or write block n of the image at path. */
static void blk_io(const char *path, uint64_t n, uint8_t *b, int write)
{
	int fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	if (write)
		assert_int_equal(pwrite(fd, b, BS, (off_t)(n * BS)), BS);
	else
		assert_int_equal(pread(fd, b, BS, (off_t)(n * BS)), BS);
	close(fd);
}

static struct shoal_fs *mount_path(const char *path, int *err)
{
	struct shoal_mount_opts mo = { .mo_commit_secs = 3600 };
	struct shoal_dev *dev;
	struct shoal_fs *fs = NULL;

	assert_int_equal(dev_open(path, 0, &dev), 0);
	*err = shoal_mount(dev, &mo, &fs);
	if (*err)
		dev_close(dev);
	return fs;
}

/*
 * A bitmap entry that says UNLINKED of a block that is no dinode (fuzz
 * seed 7 case 76: one bitmap byte changed, CRC recomputed).  The mount
 * reaps orphans: it used to fail entirely ("cannot write the journal:
 * Input/output error") and leak the transaction reaping had begun.  The
 * block is damage: logged, needs_fsck, and the mount goes on.
 */
static void test_unlinked_bit_on_a_free_block(void **state)
{
	char *path = tu_tmpimage(64 * MiB);
	struct shoal_dev *dev = tu_format(path, 1);
	uint8_t b[BS];
	struct shoal_fs *fs;
	struct stat st;
	uint64_t rgfirst, victim, dblk, dino;
	int err;

	dev_close(dev);
	fs = mount_path(path, &err);
	assert_int_equal(err, 0);
	assert_int_equal(shoal_create(fs, &root_ctx, shoal_root(fs), "f", 0644, O_RDWR, &st), 0);
	assert_int_equal(shoal_write(fs, &root_ctx, st.st_ino, "data", 4, 0, O_RDWR), 4);
	shoal_release(fs, st.st_ino, O_RDWR);
	assert_int_equal(shoal_unmount(fs), 0);

	blk_io(path, 0, b, 0);
	rgfirst = ((struct shoal_sb *)b)->sb_rgfirst;
	blk_io(path, rgfirst, b, 0);
	struct shoal_rg *rg = (void *)b;
	uint32_t k = rg->rg_length - 1; /* the last block of group 0: free */
	uint8_t *bm = b + SHOAL_RG_BITMAP_OFF;
	assert_int_equal((bm[k / 4] >> (2 * (k % 4))) & 3, SHOAL_B_FREE);
	bm[k / 4] |= (uint8_t)(SHOAL_B_UNLINKED << (2 * (k % 4)));
	victim = rg->rg_data0 + k;
	meta_update_crc(b, BS);
	blk_io(path, rgfirst, b, 1);

	fs = mount_path(path, &err);
	assert_int_equal(err, 0);
	assert_int_equal(shoal_damage(fs, &dblk, &dino), 1);
	assert_int_equal(dblk, victim);
	/* everything that does not need the block works */
	assert_int_equal(shoal_lookup(fs, shoal_root(fs), "f", &st), 0);
	char buf[8];
	assert_int_equal(shoal_read(fs, st.st_ino, buf, sizeof(buf), 0, O_RDONLY), 4);
	assert_memory_equal(buf, "data", 4);
	shoal_forget(fs, st.st_ino, 1);
	assert_int_equal(shoal_unmount(fs), 0);
	tu_rmimage(path);
}


static int count_fill(void *arg, const char *name, const struct stat *st, uint64_t next_off)
{
	(*(int *)arg)++;
	return 0;
}

/*
 * Directory entries a listing must not show (fuzz seed 1 cases 1 and 15):
 * a name whose de_hash is not its name's hash (listed, then ENOENT on
 * lookup), a name with a NUL or '/' in it (listed as another name, EINVAL
 * on lookup).  The listing fails with EIO, as for any malformed entry.
 */
static void test_listed_names_can_be_looked_up(void **state)
{
	for (int variant = 0; variant < 3; variant++) {
		char *path = tu_tmpimage(64 * MiB);
		struct shoal_dev *dev = tu_format(path, 1);
		uint8_t b[BS];
		struct shoal_fs *fs;
		struct stat st, d;
		int err, n = 0;

		dev_close(dev);
		fs = mount_path(path, &err);
		assert_int_equal(err, 0);
		assert_int_equal(shoal_mkdir(fs, &root_ctx, shoal_root(fs), "d", 0755, &d), 0);
		assert_int_equal(shoal_create(fs, &root_ctx, d.st_ino, "abc", 0644, O_RDWR, &st), 0);
		shoal_release(fs, st.st_ino, O_RDWR);
		assert_int_equal(shoal_unmount(fs), 0);

		/* the inline directory's only entry, at payload + 8 */
		blk_io(path, d.st_ino, b, 0);
		uint8_t *e = b + SHOAL_DI_PAYLOAD_OFF + 8;
		assert_int_equal(e[17], 3);
		if (variant == 0)
			e[0] ^= 0x10; /* de_hash */
		else
			e[18] = variant == 1 ? '/' : '\0';
		meta_update_crc(b, BS);
		blk_io(path, d.st_ino, b, 1);

		fs = mount_path(path, &err);
		assert_int_equal(err, 0);
		assert_int_equal(shoal_readdir(fs, d.st_ino, 0, O_RDONLY, count_fill, &n), -EIO);
		assert_int_equal(shoal_unmount(fs), 0);
		tu_rmimage(path);
	}
}

/*
 * A hash-table slot that names a valid leaf of another range (fuzz seed 3
 * case 105: a table pointer changed by one, CRC recomputed).  The listing
 * showed the names of the leaf the slot used to name, and a lookup of one
 * of them searched the other leaf: ENOENT.  The depth rule is checked when
 * a listing reaches a leaf: EIO.
 */
static void test_table_slot_names_another_leaf(void **state)
{
	char *path = tu_tmpimage(64 * MiB);
	struct shoal_dev *dev = tu_format(path, 1);
	uint8_t b[BS];
	struct shoal_fs *fs;
	struct stat st, d;
	char name[256];
	int err, n = 0;

	dev_close(dev);
	fs = mount_path(path, &err);
	assert_int_equal(err, 0);
	assert_int_equal(shoal_mkdir(fs, &root_ctx, shoal_root(fs), "d", 0755, &d), 0);
	for (int i = 0; i < 300; i++) {
		snprintf(name, sizeof(name), "%04d-%0200d", i, 0);
		assert_int_equal(shoal_create(fs, &root_ctx, d.st_ino, name, 0644, O_RDWR, &st), 0);
		shoal_release(fs, st.st_ino, O_RDWR);
		shoal_forget(fs, st.st_ino, 1);
	}
	assert_int_equal(shoal_readdir(fs, d.st_ino, 0, O_RDONLY, count_fill, &n), 0);
	assert_int_equal(n, 302);
	assert_int_equal(shoal_unmount(fs), 0);

	blk_io(path, d.st_ino, b, 0);
	struct shoal_dinode *di = (void *)b;
	assert_true(di->di_flags & SHOAL_DIF_EXHASH);
	assert_int_equal(di->di_height, 1);
	uint32_t slots = 1u << di->di_depth;
	assert_true(slots <= SHOAL_HT_PTRS(BS));
	uint64_t ht = *(uint64_t *)(b + SHOAL_DI_PAYLOAD_OFF);
	blk_io(path, ht, b, 0);
	uint64_t *p = (uint64_t *)(b + SHOAL_HT_PTR_OFF);
	uint32_t s = 0;
	while (s + 1 < slots && p[s] != p[s + 1])
		s++;
	assert_true(s + 1 < slots); /* a leaf named by two slots */
	uint32_t o = 0;
	while (p[o] == p[s])
		o++; /* another leaf */
	p[s + 1] = p[o];
	meta_update_crc(b, BS);
	blk_io(path, ht, b, 1);

	fs = mount_path(path, &err);
	assert_int_equal(err, 0);
	n = 0;
	assert_int_equal(shoal_readdir(fs, d.st_ino, 0, O_RDONLY, count_fill, &n), -EIO);
	assert_int_equal(shoal_unmount(fs), 0);
	tu_rmimage(path);
}

/* fsck.shoal FLAG path: its exit code ($SHOAL_FSCK; the test is skipped
 * without it). */
static int fsck_rc(const char *flag, const char *path)
{
	const char *fsck = getenv("SHOAL_FSCK");
	char cmd[4096];
	int st;

	if (!fsck)
		return -1;
	snprintf(cmd, sizeof(cmd), "'%s' %s '%s' >/dev/null 2>&1", fsck, flag, path);
	st = system(cmd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/*
 * A primary superblock, CRC valid, whose sb_hbfirst is past the device
 * (fuzz seed 7 case 198).  The mount uses the backup; fsck read its
 * heartbeat blocks through the bad primary first and exited 8 ("heartbeat
 * blocks: Input/output error") before it chose the superblock.
 */
static void test_fsck_heartbeat_through_the_backup(void **state)
{
	char *path = tu_tmpimage(64 * MiB);
	struct shoal_dev *dev = tu_format(path, 1);
	uint8_t b[BS];

	dev_close(dev);
	if (!getenv("SHOAL_FSCK")) {
		tu_rmimage(path);
		skip();
	}
	blk_io(path, 0, b, 0);
	((struct shoal_sb *)b)->sb_hbfirst = UINT64_MAX;
	meta_update_crc(b, BS);
	blk_io(path, 0, b, 1);
	assert_int_equal(fsck_rc("-n", path), 4);
	assert_int_equal(fsck_rc("-y", path), 1);
	assert_int_equal(fsck_rc("-n", path), 0);
	tu_rmimage(path);
}

/*
 * A fast-commit record that names the backup superblock, CRC valid (fuzz
 * seed 7 case 383: fr_blkno changed to N-1).  Replay patched the backup
 * (it is valid metadata at its address) after fsck had compared the two
 * copies, so the next fsck found them different.  Nothing below the
 * resource groups or the backup is ever logged: such a record makes the
 * block invalid and the log ends before it (FORMAT.md 11.4).
 */
static void test_fast_commit_names_the_backup(void **state)
{
	struct shoal_mount_opts mo = { .mo_commit_secs = 3600 };
	char *path = tu_tmpimage(64 * MiB);
	struct shoal_dev *dev = tu_format(path, 1), *fdev;
	uint8_t b[BS], bak[BS], after[BS];
	struct shoal_fs *fs;
	struct stat st;
	uint64_t nblocks, jfirst, jblocks, fc = 0;

	dev_close(dev);
	if (!getenv("SHOAL_FSCK")) {
		tu_rmimage(path);
		skip();
	}
	blk_io(path, 0, b, 0);
	nblocks = ((struct shoal_sb *)b)->sb_blocks;
	jfirst = ((struct shoal_sb *)b)->sb_jfirst;
	jblocks = ((struct shoal_sb *)b)->sb_jblocks;
	blk_io(path, nblocks - 1, bak, 0);

	/* the crash, in a child that then exits: its heartbeat names a dead
	 * writer, which fsck -y takes over */
	pid_t pid = fork();
	if (pid == 0) {
		int ok = dev_open(path, 0, &dev) == 0 && dev_fault_wrap(dev, &fdev) == 0 &&
			 shoal_mount(fdev, &mo, &fs) == 0 &&
			 shoal_create(fs, &root_ctx, shoal_root(fs), "f", 0644, O_RDWR, &st) == 0 &&
			 shoal_write(fs, &root_ctx, st.st_ino, "0123456789", 10, 0, O_RDWR) == 10 &&
			 shoal_sync(fs) == 0 &&
			 shoal_write(fs, &root_ctx, st.st_ino, "ab", 2, 3, O_RDWR) == 2 &&
			 shoal_fsync(fs, st.st_ino, 0) == 0; /* one fast-commit block */
		if (ok) {
			dev_fault_cut(fdev, 0);
			shoal_unmount(fs);
			dev_close(dev);
		}
		_exit(ok ? 0 : 1);
	}
	int wst;
	assert_int_equal(waitpid(pid, &wst, 0), pid);
	assert_true(WIFEXITED(wst) && WEXITSTATUS(wst) == 0);

	for (uint64_t n = jfirst + 1; n < jfirst + jblocks && !fc; n++) {
		blk_io(path, n, b, 0);
		struct shoal_lfast *l = (void *)b;
		if (l->fc_header.mh_magic == SHOAL_MAGIC && l->fc_header.mh_type == SHOAL_MT_LFAST &&
		    l->fc_header.mh_blkno == n)
			fc = n;
	}
	assert_true(fc != 0);
	struct shoal_lfast *l = (void *)b;
	struct shoal_lfrec *r = (void *)(b + SHOAL_LFAST_REC_OFF);
	r->fr_blkno = nblocks - 1;
	meta_update_crc(b, meta_fc_span(l->fc_bytes, BS));
	blk_io(path, fc, b, 1);

	assert_int_equal(fsck_rc("-n", path), 0);
	assert_int_equal(fsck_rc("-y", path), 1); /* the journal is replayed */
	assert_int_equal(fsck_rc("-n", path), 0);
	blk_io(path, nblocks - 1, after, 0);
	assert_memory_equal(after, bak, BS); /* the backup is as mkfs wrote it */
	tu_rmimage(path);
}

/*
 * A hashed directory whose table fsck must rebuild, and whose first leaf is
 * empty (fuzz seed 21 case 38).  The rebuild copied each leaf's entries
 * with memcpy into a buffer not yet allocated: with no bytes, but from a
 * NULL pointer, which UBSan reports (the sanitizer pass runs this test
 * with the sanitizer build's fsck.shoal).
 */
static void test_fsck_rebuilds_a_table_with_an_empty_leaf(void **state)
{
	char *path = tu_tmpimage(64 * MiB);
	struct shoal_dev *dev = tu_format(path, 1);
	uint8_t b[BS];
	struct shoal_fs *fs;
	struct stat st, d;
	char name[256];
	int err;

	dev_close(dev);
	if (!getenv("SHOAL_FSCK")) {
		tu_rmimage(path);
		skip();
	}
	fs = mount_path(path, &err);
	assert_int_equal(err, 0);
	assert_int_equal(shoal_mkdir(fs, &root_ctx, shoal_root(fs), "d", 0755, &d), 0);
	for (int i = 0; i < 300; i++) {
		snprintf(name, sizeof(name), "%04d-%0200d", i, 0);
		assert_int_equal(shoal_create(fs, &root_ctx, d.st_ino, name, 0644, O_RDWR, &st), 0);
		shoal_release(fs, st.st_ino, O_RDWR);
		shoal_forget(fs, st.st_ino, 1);
	}
	assert_int_equal(shoal_unmount(fs), 0);

	blk_io(path, d.st_ino, b, 0);
	uint32_t slots = 1u << ((struct shoal_dinode *)b)->di_depth;
	uint64_t ht = *(uint64_t *)(b + SHOAL_DI_PAYLOAD_OFF);
	blk_io(path, ht, b, 0);
	uint64_t *p = (uint64_t *)(b + SHOAL_HT_PTR_OFF);
	uint64_t first = p[0];
	p[slots - 1] = 0; /* an empty table entry: the directory is rebuilt */
	meta_update_crc(b, BS);
	blk_io(path, ht, b, 1);
	blk_io(path, first, b, 0); /* the first leaf walked is empty */
	struct shoal_leaf *lf = (void *)b;
	lf->lf_count = 0;
	lf->lf_used = 0;
	memset(b + SHOAL_LEAF_ENTRIES_OFF, 0, BS - SHOAL_LEAF_ENTRIES_OFF);
	meta_update_crc(b, BS);
	blk_io(path, first, b, 1);

	assert_int_equal(fsck_rc("-y", path), 1);
	assert_int_equal(fsck_rc("-n", path), 0);
	tu_rmimage(path);
}

/*
 * An xattr name with a NUL in it, CRC valid (fuzz seed 41 case 305: a
 * name length grew over the next entry).  listxattr showed the name cut
 * at the NUL, getxattr of it gave ENODATA, and fsck called the block
 * clean.  Such an entry is malformed: EIO, and fsck drops it.
 */
static void test_xattr_name_with_a_nul(void **state)
{
	char *path = tu_tmpimage(64 * MiB);
	struct shoal_dev *dev = tu_format(path, 1);
	uint8_t b[BS];
	struct shoal_fs *fs;
	struct stat st;
	char list[256];
	int err;

	dev_close(dev);
	fs = mount_path(path, &err);
	assert_int_equal(err, 0);
	assert_int_equal(shoal_create(fs, &root_ctx, shoal_root(fs), "f", 0644, O_RDWR, &st), 0);
	shoal_release(fs, st.st_ino, O_RDWR);
	assert_int_equal(shoal_setxattr(fs, st.st_ino, "user.one", "1", 1, 0), 0);
	assert_int_equal(shoal_setxattr(fs, st.st_ino, "user.two", "2", 1, 0), 0);
	assert_int_equal(shoal_unmount(fs), 0);

	blk_io(path, st.st_ino, b, 0);
	uint64_t xb = ((struct shoal_dinode *)b)->di_xattr;
	blk_io(path, xb, b, 0);
	uint8_t *e = b + SHOAL_XATTR_ENTRIES_OFF;
	assert_int_equal(e[1], 3);
	e[4 + 1] = 0; /* "o\0e" */
	meta_update_crc(b, BS);
	blk_io(path, xb, b, 1);

	fs = mount_path(path, &err);
	assert_int_equal(err, 0);
	assert_int_equal(shoal_listxattr(fs, st.st_ino, list, sizeof(list)), -EIO);
	assert_int_equal(shoal_unmount(fs), 0);
	if (getenv("SHOAL_FSCK")) {
		assert_int_equal(fsck_rc("-n", path), 4);
		assert_int_equal(fsck_rc("-y", path), 1);
		assert_int_equal(fsck_rc("-n", path), 0);
	}
	tu_rmimage(path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_unlinked_bit_on_a_free_block),
		cmocka_unit_test(test_listed_names_can_be_looked_up),
		cmocka_unit_test(test_fsck_heartbeat_through_the_backup),
		cmocka_unit_test(test_table_slot_names_another_leaf),
		cmocka_unit_test(test_fast_commit_names_the_backup),
		cmocka_unit_test(test_fsck_rebuilds_a_table_with_an_empty_leaf),
		cmocka_unit_test(test_xattr_name_with_a_nul),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

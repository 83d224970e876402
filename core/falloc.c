/*
 * falloc.c - fallocate(2) with the modes of ext4 (man 2 fallocate):
 * allocate (zeroed blocks, as there are no unwritten extents), punch holes
 * (FALLOC_FL_PUNCH_HOLE) and zero a range (FALLOC_FL_ZERO_RANGE).
 *
 * Invariants:
 *  (1) every mode but plain allocation (which only fills holes) holds the
 *      inode's i_iolock for writing, so no direct read maps a block while
 *      it is freed or rewritten (ops.c do_read_direct);
 *  (2) a mode that frees blocks holds EX the groups of the blocks it frees
 *      before its transaction begins (bmap_hold_free_rgs, LOCKING.md "Why a
 *      restart ends");
 *  (3) bytes are zeroed on the device before the transaction that maps or
 *      keeps them commits (j_ordered), as for a write.
 */
#include <errno.h>
#include <linux/falloc.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

static int zero_range(struct shoal_fs *fs, struct shoal_inode *ip, uint64_t off, uint64_t len)
{
	uint64_t end = off + len;
	while (off < end) {
		uint64_t pblk;
		uint32_t run, in = (uint32_t)(off & (fs->fs_bsize - 1));
		int err = bmap_get(fs, ip, off >> fs->fs_bshift, &pblk, &run);
		if (err)
			return err;
		uint64_t n = (uint64_t)run * fs->fs_bsize - in;
		if (n > end - off)
			n = end - off;
		if (pblk) {
			size_t chunk = n > (1u << 20) ? (1u << 20) : (size_t)n;
			void *z = calloc(1, chunk);
			if (!z)
				return -ENOMEM;
			err = dev_write(fs->fs_dev, z, chunk, (pblk << fs->fs_bshift) + in);
			if (!err)
				err = dx_absorb(fs, (pblk << fs->fs_bshift) + in, chunk, z);
			free(z);
			if (err)
				return err;
			n = chunk;
			ip->i_data_gen = __atomic_load_n(&fs->fs_dev->d_write_gen, __ATOMIC_SEQ_CST);
		}
		off += n;
	}
	return 0;
}

/*
 * The checks of vfs_fallocate and ext4_fallocate that need no inode: one
 * mode at a time, KEEP_SIZE with those that take it.
 */
static int mode_check(struct shoal_fs *fs, int mode, uint64_t off, uint64_t len)
{
	if (len == 0)
		return -EINVAL;
	switch (mode & ~FALLOC_FL_KEEP_SIZE) {
	case 0:
	case FALLOC_FL_ZERO_RANGE:
		break;
	case FALLOC_FL_PUNCH_HOLE:
		if (!(mode & FALLOC_FL_KEEP_SIZE))
			return -EOPNOTSUPP;
		break;
	default:
		return -EOPNOTSUPP;
	}
	if (off + len < off || off + len > file_max_bytes(fs))
		return -EFBIG;
	return 0;
}

static int fallocate_locked(struct shoal_fs *fs, uint64_t ino, int mode, uint64_t off,
			    uint64_t len);

static int do_fallocate(struct shoal_fs *fs, uint64_t ino, int mode, uint64_t off, uint64_t len)
{
	struct shoal_inode *ip;
	int err = mode_check(fs, mode, off, len);

	if (err)
		return err;
	if (!(mode & ~FALLOC_FL_KEEP_SIZE))
		return fallocate_locked(fs, ino, mode, off, len);
	/* the other modes free or rewrite mapped blocks: see do_read_direct */
	err = io_get(fs, ino, GL_EX, &ip);
	if (err)
		return err;
	pthread_rwlock_wrlock(&ip->i_iolock);
	err = fallocate_locked(fs, ino, mode, off, len);
	pthread_rwlock_unlock(&ip->i_iolock);
	io_put(fs, ip);
	return err;
}

/* Punch [off, off + len) of ip inside the transaction (KEEP_SIZE). */
static int punch(struct shoal_fs *fs, struct shoal_inode *ip, uint64_t off, uint64_t len)
{
	struct shoal_dinode *di = ip_di(ip);
	uint32_t bs = fs->fs_bsize;
	uint64_t end = off + len < di->di_size ? off + len : di->di_size;
	int err;

	if (off >= end)
		return 0;
	inode_dirty(fs, ip, 1);
	if (di->di_height == 0) {
		uint64_t pay = SHOAL_DI_PAYLOAD(bs);
		if (off < pay)
			memset(ip->i_bh->b_data + SHOAL_DI_PAYLOAD_OFF + off, 0,
			       (size_t)((end < pay ? end : pay) - off));
		return 0;
	}
	uint64_t first = (off + bs - 1) >> fs->fs_bshift, last = end >> fs->fs_bshift;
	if (first >= last)
		return zero_range(fs, ip, off, end - off);
	err = bmap_punch(fs, ip, first, last);
	if (!err)
		err = zero_range(fs, ip, off, (first << fs->fs_bshift) - off);
	if (!err)
		err = zero_range(fs, ip, last << fs->fs_bshift, end - (last << fs->fs_bshift));
	return err;
}

/*
 * Map every block of [off, off + len) that is a hole to a new block,
 * zeroed on the device before the transaction commits (there are no
 * unwritten extents).  An inline file whose payload holds the range needs
 * nothing.
 */
static int allocate(struct shoal_fs *fs, struct shoal_inode *ip, uint64_t off, uint64_t len)
{
	uint32_t bs = fs->fs_bsize;
	uint64_t end = off + len;
	uint64_t l = off >> fs->fs_bshift, lend = (end + bs - 1) >> fs->fs_bshift;
	void *z = NULL;
	int err = 0;

	if (ip_di(ip)->di_height == 0 && end <= SHOAL_DI_PAYLOAD(bs))
		return 0;
	while (l < lend && !err) {
		uint64_t pblk;
		uint32_t run;
		int isnew;
		uint64_t want = lend - l > 256 ? 256 : lend - l;
		err = trans_begin(fs, RES_META + SHOAL_MAX_HEIGHT * 2);
		if (!err)
			err = bmap_alloc(fs, ip, l, (uint32_t)want, &pblk, &run, &isnew);
		if (err)
			break;
		if (isnew) {
			if (!z)
				z = calloc(256, bs);
			if (!z) {
				err = -ENOMEM;
				break;
			}
			err = dev_write(fs->fs_dev, z, (size_t)run * bs, pblk << fs->fs_bshift);
			fs->fs_j.j_ordered = 1;
		}
		l += run;
	}
	free(z);
	return err;
}

/*
 * FALLOC_FL_ZERO_RANGE: the range reads zeros and stays (or becomes)
 * allocated, as ext4's.  Without unwritten extents, the blocks already
 * mapped are overwritten with zeros in place (whole or in part, inside or
 * beyond the end of file) and the holes are allocated zeroed; nothing is
 * freed, so no group beyond those allocate takes is held.
 */
static int zero(struct shoal_fs *fs, struct shoal_inode *ip, uint64_t off, uint64_t len)
{
	struct shoal_dinode *di = ip_di(ip);
	uint64_t pay = SHOAL_DI_PAYLOAD(fs->fs_bsize), end = off + len;
	int err;

	if (di->di_height == 0) {
		if (off < pay) {
			inode_dirty(fs, ip, 1);
			memset(ip->i_bh->b_data + SHOAL_DI_PAYLOAD_OFF + off, 0,
			       (size_t)((end < pay ? end : pay) - off));
		}
	} else {
		err = zero_range(fs, ip, off, len);
		if (err)
			return err;
	}
	return allocate(fs, ip, off, len);
}

static int fallocate_locked(struct shoal_fs *fs, uint64_t ino, int mode, uint64_t off,
			    uint64_t len)
{
	struct shoal_inode *ip;
	struct shoal_dinode *di;
	uint32_t bs = fs->fs_bsize;
	int fmode = mode & ~FALLOC_FL_KEEP_SIZE, keep = mode & FALLOC_FL_KEEP_SIZE;
	uint64_t end = off + len;
	int err, cap;

	LOCK(fs);
	err = hold(fs, ino, GL_EX);
	if (!err)
		err = inode_get(fs, ino, &ip);
	if (err)
		goto out;
	di = ip_di(ip);
	if (fmode == FALLOC_FL_PUNCH_HOLE && off < di->di_size) {
		/* the groups of the whole blocks punched (as punch) */
		uint64_t pend = end < di->di_size ? end : di->di_size;

		err = bmap_hold_free_rgs(fs, ip, (off + bs - 1) >> fs->fs_bshift,
					 pend >> fs->fs_bshift);
		if (err)
			goto out_put;
	}
	if (!S_ISREG(di->di_mode)) {
		err = S_ISDIR(di->di_mode) ? -EISDIR : -ENODEV;
		goto out_put;
	}
	/* vfs_fallocate: append-only allows plain allocation only */
	if ((di->di_flags & SHOAL_DIF_IMMUTABLE) || (fmode && (di->di_flags & SHOAL_DIF_APPEND))) {
		err = -EPERM;
		goto out_put;
	}
	err = ops_kill_priv_prepare(fs, perm_caller(), ip, &cap);
	if (!err)
		err = trans_begin_alloc(fs, trans_rg_blocks(fs) + RES_META * 2,
					fmode == FALLOC_FL_PUNCH_HOLE ? 0 : (len >> fs->fs_bshift) + 2);
	if (!err) /* ext4's file_modified(): every mode drops them */
		err = ops_kill_priv(fs, perm_caller(), ip, cap);
	if (err)
		goto out_put;
	switch (fmode) {
	case FALLOC_FL_PUNCH_HOLE:
		err = punch(fs, ip, off, len);
		break;
	case FALLOC_FL_ZERO_RANGE:
		err = zero(fs, ip, off, len);
		break;
	default:
		err = allocate(fs, ip, off, len);
		break;
	}
	if (err)
		goto out_put;
	if (!keep && end > di->di_size) {
		inode_dirty(fs, ip, 1);
		di->di_size = end;
	}
	inode_dirty(fs, ip, 1);
	inode_touch(ip, 0, !keep || fmode, 1);
out_put:
	inode_put(fs, ip);
out:
	UNLOCK(fs);
	return err;
}

int shoal_fallocate(struct shoal_fs *fs, uint64_t ino, int mode, uint64_t off, uint64_t len)
{
	return RUN(fs, do_fallocate(fs, ino, mode, off, len));
}

/*
 * falloc.c - fallocate(2): allocate (zeroed blocks, as there are no
 * unwritten extents) and punch holes.
 *
 * Invariants:
 *  (1) a mode that frees blocks (punch) holds the inode's i_iolock for
 *      writing, so no direct read maps a block while it is freed (ops.c
 *      do_read_direct), and holds EX the groups of the blocks it frees
 *      before its transaction begins (bmap_hold_free_rgs, LOCKING.md "Why a
 *      restart ends");
 *  (2) bytes are zeroed on the device before the transaction that maps or
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

static int fallocate_locked(struct shoal_fs *fs, uint64_t ino, int mode, uint64_t off,
			    uint64_t len);

static int do_fallocate(struct shoal_fs *fs, uint64_t ino, int mode, uint64_t off, uint64_t len)
{
	struct shoal_inode *ip;
	int err;

	if (!(mode & FALLOC_FL_PUNCH_HOLE))
		return fallocate_locked(fs, ino, mode, off, len);
	err = io_get(fs, ino, GL_EX, &ip); /* punching frees blocks: see read */
	if (err)
		return err;
	pthread_rwlock_wrlock(&ip->i_iolock);
	err = fallocate_locked(fs, ino, mode, off, len);
	pthread_rwlock_unlock(&ip->i_iolock);
	io_put(fs, ip);
	return err;
}

static int fallocate_locked(struct shoal_fs *fs, uint64_t ino, int mode, uint64_t off,
			    uint64_t len)
{
	struct shoal_inode *ip;
	struct shoal_dinode *di;
	uint32_t bs = fs->fs_bsize;
	int err, cap;

	if (len == 0)
		return -EINVAL;
	if (mode & ~(FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE))
		return -EOPNOTSUPP;
	if ((mode & FALLOC_FL_PUNCH_HOLE) && !(mode & FALLOC_FL_KEEP_SIZE))
		return -EOPNOTSUPP;
	if (off + len < off)
		return -EFBIG;
	LOCK(fs);
	err = hold(fs, ino, GL_EX);
	if (!err)
		err = inode_get(fs, ino, &ip);
	if (err)
		goto out;
	di = ip_di(ip);
	if ((mode & FALLOC_FL_PUNCH_HOLE) && off < di->di_size) {
		/* the groups of the whole blocks punched (as below) */
		uint64_t end = off + len < di->di_size ? off + len : di->di_size;

		err = bmap_hold_free_rgs(fs, ip, (off + bs - 1) >> fs->fs_bshift,
					 end >> fs->fs_bshift);
		if (err)
			goto out_put;
	}
	if (!S_ISREG(di->di_mode)) {
		err = S_ISDIR(di->di_mode) ? -EISDIR : -ENODEV;
		goto out_put;
	}
	if (nochange_flags(ip) && (mode & FALLOC_FL_PUNCH_HOLE || di->di_flags & SHOAL_DIF_IMMUTABLE)) {
		err = -EPERM;
		goto out_put;
	}
	err = ops_kill_priv_prepare(fs, perm_caller(), ip, &cap);
	if (!err)
		err = trans_begin_alloc(fs, trans_rg_blocks(fs) + RES_META * 2,
					mode & FALLOC_FL_PUNCH_HOLE ? 0 : (len >> fs->fs_bshift) + 2);
	if (!err) /* ext4's file_modified(): every mode drops them */
		err = ops_kill_priv(fs, perm_caller(), ip, cap);
	if (err)
		goto out_put;
	if (mode & FALLOC_FL_PUNCH_HOLE) {
		uint64_t end = off + len < di->di_size ? off + len : di->di_size;
		if (off >= end)
			goto done;
		if (di->di_height == 0) {
			uint64_t pay = SHOAL_DI_PAYLOAD(bs);
			inode_dirty(fs, ip, 1);
			if (off < pay)
				memset(ip->i_bh->b_data + SHOAL_DI_PAYLOAD_OFF + off, 0,
				       (size_t)((end < pay ? end : pay) - off));
			goto done;
		}
		uint64_t first = (off + bs - 1) >> fs->fs_bshift, last = end >> fs->fs_bshift;
		if (first < last) {
			err = bmap_punch(fs, ip, first, last);
			if (err)
				goto out_put;
			err = zero_range(fs, ip, off, (first << fs->fs_bshift) - off);
			if (!err)
				err = zero_range(fs, ip, last << fs->fs_bshift, end - (last << fs->fs_bshift));
		} else {
			err = zero_range(fs, ip, off, end - off);
		}
		if (err)
			goto out_put;
		inode_dirty(fs, ip, 1);
		goto done;
	}
	/* allocate: blocks are zeroed on the device, as there are no unwritten extents */
	uint64_t end = off + len;
	if (di->di_height == 0 && end <= SHOAL_DI_PAYLOAD(bs)) {
		/* inline: the space exists already */
	} else {
		uint64_t l = off >> fs->fs_bshift, lend = (end + bs - 1) >> fs->fs_bshift;
		void *z = NULL;
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
		if (err)
			goto out_put;
	}
	if (!(mode & FALLOC_FL_KEEP_SIZE) && end > di->di_size) {
		inode_dirty(fs, ip, 1);
		di->di_size = end;
	}
done:
	inode_dirty(fs, ip, 1);
	inode_touch(ip, 0, !(mode & FALLOC_FL_KEEP_SIZE) || (mode & FALLOC_FL_PUNCH_HOLE), 1);
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

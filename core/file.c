/*
 * file.c - reading and writing file data.
 *
 * Data never passes through the buffer cache: it goes between the caller's
 * buffer and the device (the kernel's page cache above FUSE is the data
 * cache).  Small files keep their data inline in the dinode.
 *
 * Invariants (fs_lock):
 *  (1) bytes of a block that were never written read as zeros: a newly
 *      allocated block is written whole (zero-padded) the first time;
 *  (2) data written into newly allocated blocks sets j_ordered, so the next
 *      commit flushes it before the metadata that points to it;
 *  (3) i_data_gen is the device write generation after the inode's last
 *      data write: fsync needs a flush iff the device's flush generation is
 *      older (R2: nothing dirty, no I/O).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static void note_data_write(struct shoal_fs *fs, struct shoal_inode *ip)
{
	ip->i_data_gen = __atomic_load_n(&fs->fs_dev->d_write_gen, __ATOMIC_SEQ_CST);
}

ssize_t file_read(struct shoal_fs *fs, struct shoal_inode *ip, void *buf, size_t size,
		  uint64_t off)
{
	struct shoal_dinode *di = ip_di(ip);
	uint8_t *out = buf;
	size_t done = 0;

	if (off >= di->di_size)
		return 0;
	if (size > di->di_size - off)
		size = (size_t)(di->di_size - off);
	if (di->di_height == 0) {
		memcpy(buf, ip->i_bh->b_data + SHOAL_DI_PAYLOAD_OFF + off, size);
		return (ssize_t)size;
	}
	while (done < size) {
		uint64_t pos = off + done, lblk = pos >> fs->fs_bshift, pblk;
		uint32_t inblk = (uint32_t)(pos & (fs->fs_bsize - 1)), run;
		int err = bmap_get(fs, ip, lblk, &pblk, &run);
		if (err)
			return done ? (ssize_t)done : err;
		uint64_t avail = (uint64_t)run * fs->fs_bsize - inblk;
		size_t len = size - done < avail ? size - done : (size_t)avail;
		if (pblk == 0) {
			memset(out + done, 0, len);
		} else {
			err = dev_read(fs->fs_dev, out + done, len, (pblk << fs->fs_bshift) + inblk);
			if (err)
				return done ? (ssize_t)done : err;
		}
		done += len;
	}
	return (ssize_t)done;
}

/* Write len bytes at byte inblk of newly allocated blocks first..first+nblk. */
static int write_new(struct shoal_fs *fs, uint64_t first, uint32_t nblk, uint32_t inblk,
		     const uint8_t *src, size_t len)
{
	uint32_t bs = fs->fs_bsize;
	size_t span = (size_t)nblk * bs;
	int err;

	if (inblk == 0 && len == span)
		return dev_write(fs->fs_dev, src, len, first << fs->fs_bshift);
	uint8_t *tmp = calloc(1, span);
	if (!tmp)
		return -ENOMEM;
	memcpy(tmp + inblk, src, len);
	err = dev_write(fs->fs_dev, tmp, span, first << fs->fs_bshift);
	free(tmp);
	return err;
}

ssize_t file_write(struct shoal_fs *fs, struct shoal_inode *ip, const void *buf, size_t size,
		   uint64_t off)
{
	struct shoal_dinode *di = ip_di(ip);
	const uint8_t *in = buf;
	uint32_t pay = SHOAL_DI_PAYLOAD(fs->fs_bsize);
	uint64_t end = off + size;
	size_t done = 0;
	int grew = 0, err = 0;

	if (size == 0)
		return 0;
	if (end < off || end > bmap_max_blocks(fs, SHOAL_MAX_HEIGHT) << fs->fs_bshift)
		return -EFBIG;
	if (di->di_height == 0 && end <= pay) {
		inode_dirty(fs, ip, end > di->di_size);
		memcpy(ip->i_bh->b_data + SHOAL_DI_PAYLOAD_OFF + off, buf, size);
		if (end > di->di_size)
			di->di_size = end;
		inode_touch(ip, 0, 1, 1);
		return (ssize_t)size;
	}
	while (done < size) {
		uint64_t pos = off + done, lblk = pos >> fs->fs_bshift, pblk;
		uint32_t inblk = (uint32_t)(pos & (fs->fs_bsize - 1)), run;
		uint64_t left_blocks = (inblk + (size - done) + fs->fs_bsize - 1) >> fs->fs_bshift;
		int isnew;

		err = bmap_alloc(fs, ip, lblk, left_blocks > 65536 ? 65536 : (uint32_t)left_blocks,
				 &pblk, &run, &isnew);
		if (err)
			break;
		uint64_t avail = (uint64_t)run * fs->fs_bsize - inblk;
		size_t len = size - done < avail ? size - done : (size_t)avail;
		if (isnew) {
			uint32_t nblk = (uint32_t)((inblk + len + fs->fs_bsize - 1) >> fs->fs_bshift);
			err = write_new(fs, pblk, nblk, inblk, in + done, len);
			fs->fs_j.j_ordered = 1;
			grew = 1;
		} else {
			err = dev_write(fs->fs_dev, in + done, len, (pblk << fs->fs_bshift) + inblk);
		}
		if (err)
			break;
		done += len;
	}
	if (done) {
		note_data_write(fs, ip);
		if (off + done > di->di_size) {
			di->di_size = off + done;
			grew = 1;
		}
		inode_dirty(fs, ip, grew);
		inode_touch(ip, 0, 1, 1);
		return (ssize_t)done;
	}
	return err;
}

int file_truncate(struct shoal_fs *fs, struct shoal_inode *ip, uint64_t size)
{
	struct shoal_dinode *di = ip_di(ip);
	uint32_t pay = SHOAL_DI_PAYLOAD(fs->fs_bsize), bs = fs->fs_bsize;
	int err;

	if (size > bmap_max_blocks(fs, SHOAL_MAX_HEIGHT) << fs->fs_bshift)
		return -EFBIG;
	inode_dirty(fs, ip, 1);
	if (size < di->di_size) {
		if (di->di_height == 0) {
			memset(ip->i_bh->b_data + SHOAL_DI_PAYLOAD_OFF + size, 0,
			       (size_t)(di->di_size - size));
		} else {
			uint64_t keep = (size + bs - 1) >> fs->fs_bshift;
			err = bmap_truncate(fs, ip, keep);
			if (err)
				return err;
			if (size & (bs - 1)) {
				/* zero the tail of the last kept block */
				uint64_t pblk;
				uint32_t run;
				err = bmap_get(fs, ip, size >> fs->fs_bshift, &pblk, &run);
				if (err)
					return err;
				if (pblk) {
					uint32_t in = (uint32_t)(size & (bs - 1));
					uint8_t *z = calloc(1, bs - in);
					if (!z)
						return -ENOMEM;
					err = dev_write(fs->fs_dev, z, bs - in, (pblk << fs->fs_bshift) + in);
					free(z);
					if (err)
						return err;
					note_data_write(fs, ip);
				}
			}
		}
	} else if (size > di->di_size && di->di_height == 0 && size > pay) {
		err = bmap_unstuff(fs, ip);
		if (err)
			return err;
	}
	di->di_size = size;
	return 0;
}

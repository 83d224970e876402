/*
 * falloc.c - fallocate(2) with the modes of ext4 (man 2 fallocate):
 * allocate (zeroed blocks, as there are no unwritten extents), punch holes
 * (FALLOC_FL_PUNCH_HOLE), zero a range (FALLOC_FL_ZERO_RANGE), and take a
 * range out of a file or put a hole into it, moving what follows
 * (FALLOC_FL_COLLAPSE_RANGE, FALLOC_FL_INSERT_RANGE).
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
	case FALLOC_FL_COLLAPSE_RANGE:
	case FALLOC_FL_INSERT_RANGE:
		if (mode & FALLOC_FL_KEEP_SIZE)
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

/* A run of mapped logical blocks. */
struct mrun {
	uint64_t mr_start, mr_count;
};

/* The mapped runs of ip at logical blocks >= from, ascending (malloc'd). */
static int mapped_runs(struct shoal_fs *fs, struct shoal_inode *ip, uint64_t from,
		       struct mrun **out, size_t *nout)
{
	uint64_t lim = bmap_max_blocks(fs, ip_di(ip)->di_height), l = from;
	struct mrun *r = NULL;
	size_t n = 0, cap = 0;

	while (l < lim) {
		uint64_t p;
		uint32_t run;
		int err = bmap_get(fs, ip, l, &p, &run);
		if (err) {
			free(r);
			return err;
		}
		if (p && n && r[n - 1].mr_start + r[n - 1].mr_count == l) {
			r[n - 1].mr_count += run;
		} else if (p) {
			if (n == cap) {
				struct mrun *x = realloc(r, (cap = cap ? 2 * cap : 64) * sizeof(*r));
				if (!x) {
					free(r);
					return -ENOMEM;
				}
				r = x;
			}
			r[n++] = (struct mrun){ l, run };
		}
		l += run;
	}
	*out = r;
	*nout = n;
	return 0;
}

/* Free the indirect blocks over the holes of [from, to) that hold nothing
 * (bmap.c (3)): the moves of shift can empty them. */
static int free_empty(struct shoal_fs *fs, struct shoal_inode *ip, uint64_t from, uint64_t to)
{
	while (from < to) {
		uint64_t p;
		uint32_t run;
		int err = bmap_get(fs, ip, from, &p, &run);
		uint64_t end = to - from < run ? to : from + run;
		if (!err && !p) {
			err = trans_begin(fs, RES_META + SHOAL_MAX_HEIGHT * 2);
			if (!err)
				err = bmap_punch(fs, ip, from, end);
		}
		if (err)
			return err;
		from = end;
	}
	return 0;
}

/*
 * FALLOC_FL_COLLAPSE_RANGE (collapse) and FALLOC_FL_INSERT_RANGE, block
 * aligned: collapse frees the blocks of the range and moves every mapped
 * block after it down by len; insert moves every mapped block from off on
 * up by len (from the last), leaving a hole.  Blocks stay where they are
 * on the device: only their pointers move (bmap_move), 64 to a transaction
 * step, each step leaving the map consistent; the size changes last.  So a
 * shift larger than one transaction is not atomic across a crash (the
 * file's map is then part moved, its size the old one; fsck finds it
 * clean), as ext4's, whose extent shifting restarts its handle too.
 */
static int shift(struct shoal_fs *fs, struct shoal_inode *ip, int collapse, uint64_t off,
		 uint64_t len, const struct mrun *r, size_t nr)
{
	struct shoal_dinode *di = ip_di(ip);
	uint64_t first = off >> fs->fs_bshift, n = len >> fs->fs_bshift, top, moved = 0;
	static const struct mrun block0 = { 0, 1 };
	int err = 0;

	if (collapse) {
		err = bmap_punch(fs, ip, first, first + n);
	} else if (di->di_height == 0) {
		err = bmap_unstuff(fs, ip); /* its data moves as block 0 */
		r = &block0; /* insert needs off < size: the file had data */
		nr = 1;
	}
	if (err)
		return err;
	top = nr ? r[nr - 1].mr_start + r[nr - 1].mr_count : first + n;
	for (size_t k = 0; k < nr && !err; k++) {
		const struct mrun *x = collapse ? &r[k] : &r[nr - 1 - k];
		for (uint64_t i = 0; i < x->mr_count && !err; i++) {
			uint64_t l = collapse ? x->mr_start + i : x->mr_start + x->mr_count - 1 - i;
			if (++moved % 64 == 0)
				err = trans_begin(fs, RES_META + SHOAL_MAX_HEIGHT * 6);
			if (!err)
				err = bmap_move(fs, ip, l, collapse ? l - n : l + n);
		}
	}
	if (!err)
		err = free_empty(fs, ip, first, collapse ? top : top + n);
	if (err)
		return err;
	inode_dirty(fs, ip, 1);
	if (collapse)
		di->di_size -= len;
	else
		di->di_size += len;
	return 0;
}

/*
 * Blocks a mode may allocate: the range (allocation, zero), the indirect
 * blocks the moved pointers need (a shift: at most one per leaf of the
 * file's blocks, plus a path and a height's growth), none for a punch.
 */
static uint64_t alloc_need(struct shoal_fs *fs, int fmode, uint64_t len, const struct mrun *r,
			   size_t nr)
{
	uint64_t per = SHOAL_IND_PTRS(fs->fs_bsize), leaves = 0, last = UINT64_MAX;

	switch (fmode) {
	case FALLOC_FL_PUNCH_HOLE:
		return 0;
	case FALLOC_FL_COLLAPSE_RANGE:
	case FALLOC_FL_INSERT_RANGE:
		/* the pointers of one leaf land in at most two: count the
		 * leaves the moved blocks are in now */
		for (size_t k = 0; k < nr; k++) {
			uint64_t a = r[k].mr_start / per, b = (r[k].mr_start + r[k].mr_count - 1) / per;
			leaves += b - a + 1 - (a == last);
			last = b;
		}
		return 2 * leaves + 2 * (leaves / per + 1) + SHOAL_MAX_HEIGHT * 4;
	default:
		return (len >> fs->fs_bshift) + 2;
	}
}

/* ext4_collapse_range's and ext4_insert_range's checks of the range. */
static int shift_check(struct shoal_fs *fs, struct shoal_inode *ip, int fmode, uint64_t off,
		       uint64_t len)
{
	uint64_t size = ip_di(ip)->di_size;

	if ((off | len) & (fs->fs_bsize - 1))
		return -EINVAL;
	if (fmode == FALLOC_FL_COLLAPSE_RANGE)
		return off + len >= size ? -EINVAL : 0;
	if (len > file_max_bytes(fs) - size)
		return -EFBIG;
	return off >= size ? -EINVAL : 0;
}

static int fallocate_locked(struct shoal_fs *fs, uint64_t ino, int mode, uint64_t off,
			    uint64_t len)
{
	struct shoal_inode *ip;
	struct shoal_dinode *di;
	uint32_t bs = fs->fs_bsize;
	int fmode = mode & ~FALLOC_FL_KEEP_SIZE, keep = mode & FALLOC_FL_KEEP_SIZE;
	uint64_t end = off + len;
	int shifts = fmode == FALLOC_FL_COLLAPSE_RANGE || fmode == FALLOC_FL_INSERT_RANGE;
	struct mrun *runs = NULL; /* a shift's blocks to move */
	size_t nruns = 0;
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
	if (shifts) {
		err = shift_check(fs, ip, fmode, off, len);
		/* every block from off on may be freed (collapse) or leave an
		 * indirect block empty (both): hold all their groups */
		if (!err)
			err = bmap_hold_free_rgs(fs, ip, off >> fs->fs_bshift, UINT64_MAX);
		if (!err)
			err = mapped_runs(fs, ip, (fmode == FALLOC_FL_COLLAPSE_RANGE ? end : off) >>
							 fs->fs_bshift,
					  &runs, &nruns);
		if (err)
			goto out_put;
	}
	err = ops_kill_priv_prepare(fs, perm_caller(), ip, &cap);
	if (!err)
		err = trans_begin_alloc(fs, trans_rg_blocks(fs) + RES_META * 2 +
						    (shifts ? SHOAL_MAX_HEIGHT * 6 : 0),
					alloc_need(fs, fmode, len, runs, nruns));
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
	case FALLOC_FL_COLLAPSE_RANGE:
	case FALLOC_FL_INSERT_RANGE:
		err = shift(fs, ip, fmode == FALLOC_FL_COLLAPSE_RANGE, off, len, runs, nruns);
		break;
	default:
		err = allocate(fs, ip, off, len);
		break;
	}
	if (err)
		goto out_put;
	if (!keep && !shifts && end > di->di_size) { /* a punch has KEEP_SIZE */
		inode_dirty(fs, ip, 1);
		di->di_size = end;
	}
	inode_dirty(fs, ip, 1);
	inode_touch(ip, 0, !keep || fmode, 1);
out_put:
	free(runs);
	inode_put(fs, ip);
out:
	UNLOCK(fs);
	return err;
}

int shoal_fallocate(struct shoal_fs *fs, uint64_t ino, int mode, uint64_t off, uint64_t len)
{
	return RUN(fs, do_fallocate(fs, ino, mode, off, len));
}

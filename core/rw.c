/*
 * rw.c - a file's data: read (copied, or handed to the caller as device
 * pieces), write (copied, merged against a mapped page's base, or moved
 * device-side), fsync and lseek.  The rest of include/shoal/shoal.h is in
 * ops.c; the helpers they share (fs_lock, hold, RUN) in ops.h.
 *
 * Invariants:
 *  (1) a read holds the inode's glock SH (R1), a write EX;
 *  (2) an O_APPEND write goes to the end of file found under the EX glock,
 *      whatever position it names (write_begin; docs/LOCKING.md "Sizes");
 *  (3) every inode_get is paired with an inode_put before the lock drops.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "lock.h"
#include "ops.h"

static ssize_t do_read(struct shoal_fs *fs, uint64_t ino, void *buf, size_t size, uint64_t off,
		   int flags)
{
	struct shoal_inode *ip;
	ssize_t n;
	LOCK(fs);
	n = hold(fs, ino, GL_SH);
	if (!n)
		n = inode_get(fs, ino, &ip);
	if (!n) {
		if (S_ISDIR(ip_di(ip)->di_mode))
			n = -EISDIR;
		else
			n = file_read(fs, ip, buf, size, off);
		if (n >= 0)
			ops_update_atime(fs, ip, flags);
		inode_put(fs, ip);
	}
	UNLOCK(fs);
	return n;
}

/*
 * The data moves outside fs_lock, so reads of different files (and of one
 * file) overlap on the device; i_iolock, held shared, keeps truncate and
 * hole punching from freeing the mapped blocks meanwhile.  Inline data is
 * copied while locked: writes change it in place.
 */
static ssize_t do_read_direct(struct shoal_fs *fs, uint64_t ino, size_t size, uint64_t off, int flags,
			  shoal_read_fn fn, void *arg)
{
	struct shoal_inode *ip;
	struct shoal_piece *pv = NULL;
	unsigned np = 0;
	size_t total = 0;
	uint8_t *mem = NULL;
	ssize_t n;
	int fd = dev_fd(fs->fs_dev);

	if (fd < 0)
		return -EOPNOTSUPP;
	n = io_get(fs, ino, GL_SH, &ip);
	if (n)
		return n;
	pthread_rwlock_rdlock(&ip->i_iolock);
	LOCK(fs);
	if (S_ISDIR(ip_di(ip)->di_mode))
		n = -EISDIR;
	else
		n = file_map(fs, ip, size, off, &pv, &np, &total);
	if (!n) {
		/* inline data and blocks of the dirty-block index change under
		 * fs_lock: copied while it is held */
		size_t copy = 0;
		for (unsigned i = 0; i < np; i++) {
			if (pv[i].sv_mem ? !file_is_zeros(pv[i].sv_mem) :
					   dev_read_queued(fs->fs_dev, NULL, pv[i].sv_len,
							   pv[i].sv_devoff))
				copy += pv[i].sv_len;
		}
		if (copy && !(mem = malloc(copy)))
			n = -ENOMEM;
		for (unsigned i = 0, at = 0; i < np && !n; i++) {
			if (pv[i].sv_mem) {
				if (file_is_zeros(pv[i].sv_mem))
					continue;
				memcpy(mem + at, pv[i].sv_mem, pv[i].sv_len);
			} else if (at + pv[i].sv_len > copy ||
				   !dev_read_queued(fs->fs_dev, mem + at, pv[i].sv_len,
						    pv[i].sv_devoff)) {
				/* on the device (or landed since): a queued write
				 * of these blocks lands first, dev.c (5); one that
				 * failed left older bytes there: -EIO */
				n = dev_wait_range(fs->fs_dev, pv[i].sv_devoff, pv[i].sv_len);
				if (!n)
					dev_account(fs->fs_dev, 0, pv[i].sv_len);
				continue;
			}
			pv[i].sv_mem = mem + at; /* from a queued write's copy */
			at += (unsigned)pv[i].sv_len;
		}
		if (!n)
			ops_update_atime(fs, ip, flags);
	}
	UNLOCK(fs);
	if (!n) {
		n = fn(arg, fd, pv, np);
		if (!n)
			n = (ssize_t)total;
	}
	pthread_rwlock_unlock(&ip->i_iolock);
	free(mem);
	free(pv);
	io_put(fs, ip);
	return n;
}

/*
 * An O_DIRECT write is all or nothing: the kernel turns a short direct
 * write into EIO (its asynchronous direct I/O), so one that could run out
 * of space part way is refused with ENOSPC before anything moves.  Counts
 * the holes of the range (what must be allocated), their block map, and
 * what df shows free.
 */
static int direct_room(struct shoal_fs *fs, struct shoal_inode *ip, size_t size, uint64_t off)
{
	uint64_t lblk = off >> fs->fs_bshift, end, holes = 0;

	if (!size)
		return 0;
	end = (off + size - 1) >> fs->fs_bshift;
	if (ip_di(ip)->di_height == 0) {
		holes = end + 1; /* inline data moves to blocks */
	} else {
		while (lblk <= end) {
			uint64_t pblk;
			uint32_t run;
			int err = bmap_get(fs, ip, lblk, &pblk, &run);
			if (err)
				return err;
			if (!run)
				run = 1;
			if (run > end - lblk + 1)
				run = (uint32_t)(end - lblk + 1);
			if (!pblk)
				holes += run;
			lblk += run;
		}
	}
	if (holes && fs_usable_blocks(fs, rg_statfs_free(fs)) < holes)
		return -ENOSPC;
	return 0;
}

/*
 * Everything a write checks and reserves before its data moves.  An
 * O_APPEND write (not the kernel's writeback of a mapping, which has its
 * pages' own positions) goes to the end of file found here, under the
 * inode's EX glock: the position the kernel sent comes from the size it
 * last saw, which in a cluster may be older than another node's writes
 * (docs/LOCKING.md "Sizes").  *offp is where the bytes go.
 */
static ssize_t write_begin(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t ino,
			   size_t size, uint64_t *offp, int flags, struct shoal_inode **ipp)
{
	struct shoal_inode *ip;
	struct shoal_dinode *di;
	uint64_t nblk = (size >> fs->fs_bshift) + 2;
	int cap = 0;
	ssize_t n = hold(fs, ino, GL_EX);

	if (!n)
		n = inode_get(fs, ino, &ip);
	if (n)
		return n;
	di = ip_di(ip);
	if ((flags & O_APPEND) && !(ctx && (ctx->c_flags & SHOAL_CTX_CACHE)))
		*offp = di->di_size;
	if (!S_ISREG(di->di_mode))
		n = S_ISDIR(di->di_mode) ? -EISDIR : -EINVAL;
	else if (di->di_flags & SHOAL_DIF_IMMUTABLE)
		n = -EPERM;
	else if ((di->di_flags & SHOAL_DIF_APPEND) && *offp != di->di_size)
		n = -EPERM;
	if (!n && (flags & O_DIRECT) && !(ctx && (ctx->c_flags & SHOAL_CTX_CACHE)))
		n = direct_room(fs, ip, size, *offp);
	if (!n) {
		uint32_t res = (uint32_t)(nblk / SHOAL_IND_PTRS(fs->fs_bsize) +
					  nblk / SHOAL_RG_MAX_LENGTH(fs->fs_bsize)) +
			       SHOAL_MAX_HEIGHT * 2 + RES_META;
		n = ops_kill_priv_prepare(fs, ctx, ip, &cap);
		if (!n)
			n = trans_begin_alloc(fs, res, nblk);
	}
	if (!n)
		n = ops_kill_priv(fs, ctx, ip, cap);
	if (n) {
		inode_put(fs, ip);
		return n;
	}
	*ipp = ip;
	return 0;
}

static ssize_t do_write(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t ino,
		    const void *buf, size_t size, uint64_t off, int flags, uint64_t *offp)
{
	struct shoal_inode *ip;
	ssize_t n;

	LOCK(fs);
	n = write_begin(fs, ctx, ino, size, &off, flags, &ip);
	if (!n) {
		n = file_write(fs, ip, buf, size, off);
		inode_put(fs, ip);
	}
	UNLOCK(fs);
	if (offp)
		*offp = off;
	return n;
}

/*
 * The kernel's writeback of a page whose base it was last given is known
 * (docs/LOCKING.md "Mapped pages"): only the bytes of buf that differ from
 * base are this node's; between the first and the last of them, the rest
 * keeps what the file holds now (another node may have written it since),
 * all under one EX hold.
 */
static ssize_t do_write_merge(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t ino,
			      const void *buf, const void *base, size_t size, uint64_t off,
			      int flags)
{
	const unsigned char *b = buf, *o = base;
	struct shoal_inode *ip;
	unsigned char *cur;
	size_t lo = 0, hi = size;
	uint64_t at;
	ssize_t n;

	while (lo < size && b[lo] == o[lo])
		lo++;
	if (lo == size)
		return (ssize_t)size; /* nothing of this node's */
	while (hi > lo && b[hi - 1] == o[hi - 1])
		hi--;
	cur = malloc(hi - lo);
	if (!cur)
		return -ENOMEM;
	at = off + lo;
	LOCK(fs);
	n = write_begin(fs, ctx, ino, hi - lo, &at, flags & ~O_APPEND, &ip);
	if (!n) {
		n = file_read(fs, ip, cur, hi - lo, at);
		if (n >= 0) {
			memset(cur + n, 0, hi - lo - (size_t)n); /* past the end of file */
			for (size_t i = lo; i < hi; i++)
				if (b[i] != o[i])
					cur[i - lo] = b[i];
			n = file_write(fs, ip, cur, hi - lo, at);
		}
		inode_put(fs, ip);
	}
	UNLOCK(fs);
	free(cur);
	return n < 0 ? n : (ssize_t)size;
}

static ssize_t do_write_direct(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t ino,
			   size_t size, uint64_t off, int flags, shoal_write_fn fn, void *arg,
			   uint64_t *offp)
{
	struct shoal_inode *ip;
	ssize_t n;

	if (dev_fd(fs->fs_dev) < 0)
		return -EOPNOTSUPP;
	LOCK(fs);
	n = write_begin(fs, ctx, ino, size, &off, flags, &ip);
	if (!n) {
		n = file_write_fn(fs, ip, fn, arg, size, off);
		inode_put(fs, ip);
	}
	UNLOCK(fs);
	if (offp)
		*offp = off;
	return n;
}

int shoal_fsync(struct shoal_fs *fs, uint64_t ino, int datasync)
{
	struct shoal_inode *ip;
	int err;

	LOCK(fs);
	err = inode_get(fs, ino, &ip);
	if (err)
		goto out;
	fs->fs_ctr.sc_fsyncs++;
	ip->i_fsync_ns = gl_now_ns();
	if (__atomic_load_n(&fs->fs_aborted, __ATOMIC_RELAXED)) {
		err = -EIO; /* the journal failed: what it held is lost */
		goto out_put;
	}
	uint64_t seq = datasync ? ip->i_dsync_seq : ip->i_meta_seq;
	uint64_t mod = datasync ? ip->i_dsync_mod : ip->i_meta_mod;
	int need_commit = !fs_is_ro(fs) && !jnl_durable(fs, seq, mod);
	int need_flush = ip->i_data_gen > __atomic_load_n(&fs->fs_dev->d_flush_gen, __ATOMIC_SEQ_CST);
	if (need_commit || need_flush) {
		/*
		 * One flush either way (R2): when data must be flushed, whatever
		 * the running transaction holds (this inode's timestamps
		 * included, which fdatasync alone need not write) rides on the
		 * same flush, so the fsync that usually follows an fdatasync
		 * finds nothing left to do.
		 */
		if (!fs_is_ro(fs))
			err = jnl_sync(fs); /* its flush covers data written before */
		if (!err && ip->i_data_gen > __atomic_load_n(&fs->fs_dev->d_flush_gen, __ATOMIC_SEQ_CST))
			err = dev_flush(fs->fs_dev);
	} else {
		fs->fs_ctr.sc_fsync_noop++;
	}
out_put:
	inode_put(fs, ip);
out:
	UNLOCK(fs);
	return err;
}

static int64_t do_lseek(struct shoal_fs *fs, uint64_t ino, uint64_t off, int whence)
{
	struct shoal_inode *ip;
	int64_t res;
	int err;

	if (whence != SEEK_DATA && whence != SEEK_HOLE)
		return -EINVAL;
	LOCK(fs);
	err = iget(fs, ino, GL_SH, &ip);
	if (err) {
		res = err;
		goto out;
	}
	struct shoal_dinode *di = ip_di(ip);
	if (off >= di->di_size) {
		res = -ENXIO;
	} else if (di->di_height == 0) {
		/* inline data covers [0, payload); past it is a hole */
		uint64_t pay = SHOAL_DI_PAYLOAD(fs->fs_bsize);
		uint64_t dend = di->di_size < pay ? di->di_size : pay;
		if (whence == SEEK_DATA)
			res = off < dend ? (int64_t)off : -ENXIO;
		else
			res = off < dend ? (int64_t)dend : (int64_t)off;
	} else {
		uint64_t l;
		err = bmap_seek(fs, ip, off >> fs->fs_bshift, whence == SEEK_DATA, &l);
		if (err) {
			res = err;
		} else {
			uint64_t pos = l << fs->fs_bshift;
			if (pos < off)
				pos = off;
			if (pos > di->di_size)
				pos = di->di_size;
			res = whence == SEEK_DATA && pos >= di->di_size ? -ENXIO : (int64_t)pos;
		}
	}
	inode_put(fs, ip);
out:
	UNLOCK(fs);
	return res;
}

ssize_t shoal_read(struct shoal_fs *fs, uint64_t ino, void *buf, size_t size, uint64_t off,
		   int flags)
{
	return RUN(fs, do_read(fs, ino, buf, size, off, flags));
}

ssize_t shoal_read_direct(struct shoal_fs *fs, uint64_t ino, size_t size, uint64_t off, int flags,
			  shoal_read_fn fn, void *arg)
{
	return RUN(fs, do_read_direct(fs, ino, size, off, flags, fn, arg));
}

ssize_t shoal_write(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t ino,
		    const void *buf, size_t size, uint64_t off, int flags)
{
	return RUN(fs, do_write(fs, ctx, ino, buf, size, off, flags, NULL));
}

ssize_t shoal_write_at(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t ino,
		       const void *buf, size_t size, uint64_t *off, int flags)
{
	return RUN(fs, do_write(fs, ctx, ino, buf, size, *off, flags, off));
}

ssize_t shoal_write_merge(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t ino,
			  const void *buf, const void *base, size_t size, uint64_t off, int flags)
{
	return RUN(fs, do_write_merge(fs, ctx, ino, buf, base, size, off, flags));
}

ssize_t shoal_write_direct(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t ino,
			   size_t size, uint64_t *off, int flags, shoal_write_fn fn, void *arg)
{
	return RUN(fs, do_write_direct(fs, ctx, ino, size, *off, flags, fn, arg, off));
}

int64_t shoal_lseek(struct shoal_fs *fs, uint64_t ino, uint64_t off, int whence)
{
	return RUN(fs, do_lseek(fs, ino, off, whence));
}

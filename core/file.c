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
 *      older (R2: nothing dirty, no I/O);
 *  (4) a part-block overwrite of a file fsync'ed within the last second
 *      goes into the dirty-block index (dindex.c), from where the fsync's
 *      fast commit logs just the granules it changed and the next full
 *      commit writes the block home (R2: one device write and one flush
 *      per fsync'ed small write); every later write to a block in the index
 *      reaches its entry too.  Without the index (a filesystem made before
 *      FCDATA) such a write goes to the device as it is (dev_write_small);
 *  (5) with the index, a write from memory of at most one block into
 *      blocks it allocates puts them, zero-padded (1), into the index, not
 *      on the device: the kernel launders a mapped page with one 4 KiB
 *      write at every size change of the file (bench mmext, mremap), and
 *      the commit that makes the allocation durable (j_ordered is set as
 *      for (2), so it is a full commit) writes them home sorted, adjacent
 *      ones in one write, before its flush (dindex.c (3)).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "lock.h"

static void note_data_write(struct shoal_fs *fs, struct shoal_inode *ip)
{
	ip->i_data_gen = __atomic_load_n(&fs->fs_dev->d_write_gen, __ATOMIC_SEQ_CST);
}

/* The largest file: what the map can hold, and what off_t can express. */
uint64_t file_max_bytes(struct shoal_fs *fs)
{
	uint64_t blocks = bmap_max_blocks(fs, SHOAL_MAX_HEIGHT);
	uint64_t lim = (uint64_t)INT64_MAX >> fs->fs_bshift;
	return (blocks < lim ? blocks : lim) << fs->fs_bshift;
}

/* Zeros for holes: never written, so it costs no memory until read. */
static uint8_t zero_buf[1u << 20];

/*
 * The first piece of len bytes at byte inblk of block pblk, when the
 * dirty-block index holds blocks: its entry's bytes for an indexed block
 * (valid under fs_lock only), else the device up to the next indexed one.
 */
static size_t map_indexed(struct shoal_fs *fs, uint64_t pblk, uint32_t inblk, size_t len,
			  struct shoal_piece *pv)
{
	struct dx_entry *e = dx_find(fs, pblk);
	size_t n = fs->fs_bsize - inblk;

	if (n > len)
		n = len;
	if (e) {
		*pv = (struct shoal_piece){.sv_mem = e->de_data + inblk, .sv_len = n};
		return n;
	}
	while (n < len && !dx_find(fs, pblk + (inblk + n) / fs->fs_bsize))
		n += fs->fs_bsize < len - n ? fs->fs_bsize : len - n;
	*pv = (struct shoal_piece){.sv_devoff = (pblk << fs->fs_bshift) + inblk, .sv_len = n};
	return n;
}

int file_is_zeros(const void *mem)
{
	return mem == zero_buf;
}

int file_map(struct shoal_fs *fs, struct shoal_inode *ip, size_t size, uint64_t off,
	     struct shoal_piece **pvp, unsigned *np, size_t *total)
{
	struct shoal_dinode *di = ip_di(ip);
	struct shoal_piece *pv;
	unsigned n = 0, cap;
	size_t done = 0;

	*pvp = NULL;
	*np = 0;
	*total = 0;
	if (off >= di->di_size)
		return 0;
	if (size > di->di_size - off)
		size = (size_t)(di->di_size - off);
	cap = (unsigned)((size >> fs->fs_bshift) + (size >> 20) + 3);
	if (fs->fs_dx.dx_count)
		cap += (unsigned)(size >> fs->fs_bshift) + 2; /* blocks of the index apart */
	pv = malloc(sizeof(*pv) * cap);
	if (!pv)
		return -ENOMEM;
	if (di->di_height == 0) {
		/* inline data, then zeros past the payload (a grown file) */
		uint32_t pay = SHOAL_DI_PAYLOAD(fs->fs_bsize);
		if (off < pay) {
			size_t in = size < pay - off ? size : (size_t)(pay - off);
			pv[n++] = (struct shoal_piece){
				.sv_mem = ip->i_bh->b_data + SHOAL_DI_PAYLOAD_OFF + off, .sv_len = in};
			done = in;
		}
		while (done < size && n < cap) {
			size_t z = size - done < sizeof(zero_buf) ? size - done : sizeof(zero_buf);
			pv[n++] = (struct shoal_piece){.sv_mem = zero_buf, .sv_len = z};
			done += z;
		}
	}
	while (done < size) {
		uint64_t pos = off + done, lblk = pos >> fs->fs_bshift, pblk;
		uint32_t inblk = (uint32_t)(pos & (fs->fs_bsize - 1)), run;
		int err = bmap_get(fs, ip, lblk, &pblk, &run);
		if (err) {
			/* never the bytes before it: a short read is end of
			 * file to the kernel, the file would look truncated */
			free(pv);
			return err;
		}
		uint64_t avail = (uint64_t)run * fs->fs_bsize - inblk;
		size_t len = size - done < avail ? size - done : (size_t)avail;
		if (pblk == 0) {
			if (len > sizeof(zero_buf))
				len = sizeof(zero_buf);
			pv[n++] = (struct shoal_piece){.sv_mem = zero_buf, .sv_len = len};
		} else if (fs->fs_dx.dx_count) {
			len = map_indexed(fs, pblk, inblk, len, &pv[n++]);
		} else {
			pv[n++] = (struct shoal_piece){.sv_devoff = (pblk << fs->fs_bshift) + inblk,
						       .sv_len = len};
		}
		done += len;
		if (n == cap)
			break;
	}
	*pvp = pv;
	*np = n;
	*total = done;
	return 0;
}

ssize_t file_read(struct shoal_fs *fs, struct shoal_inode *ip, void *buf, size_t size,
		  uint64_t off)
{
	struct shoal_piece *pv;
	unsigned n;
	size_t total, done = 0;
	uint8_t *out = buf;
	int err = file_map(fs, ip, size, off, &pv, &n, &total);

	if (err)
		return err;
	for (unsigned i = 0; i < n; i++) {
		if (pv[i].sv_mem) {
			memcpy(out + done, pv[i].sv_mem, pv[i].sv_len);
		} else {
			err = dev_read(fs->fs_dev, out + done, pv[i].sv_len, pv[i].sv_devoff);
			if (err)
				break;
		}
		done += pv[i].sv_len;
	}
	free(pv);
	return err ? err : (ssize_t)done; /* all or an error: see file_map */
}

/* Where a write's bytes come from: memory, or the caller's callback. */
struct wsrc {
	const uint8_t *ws_mem;
	shoal_write_fn ws_fn;
	void *ws_arg;
	int ws_fd;
	int ws_small; /* (4): part-block bytes of a file being fsync'ed */
};

#define SYNC_RECENT_NS 1000000000ull

static int src_copy(struct shoal_fs *fs, const struct wsrc *src, uint64_t devoff, size_t len,
		    size_t srcoff)
{
	if (src->ws_mem && src->ws_small)
		return dev_write_small(fs->fs_dev, src->ws_mem + srcoff, len, devoff);
	if (src->ws_mem) /* copied: may be queued (dev.c (5)) */
		return dev_write_behind(fs->fs_dev, src->ws_mem + srcoff, len, devoff);
	dev_wait_range(fs->fs_dev, devoff, len); /* the callback writes the fd itself */
	if (__atomic_load_n(&fs->fs_dev->d_fenced, __ATOMIC_SEQ_CST))
		return -EIO; /* fenced or withdrawn since the write began */
	uint64_t t0 = dev_now_boot_ns();
	int err = dev_lease_check(fs->fs_dev); /* dev.c (8): right before the write */
	if (!err)
		err = src->ws_fn(src->ws_arg, src->ws_fd, devoff, len, srcoff);
	dev_log_io(fs->fs_dev, 'W', t0, devoff, len, err);
	if (!err)
		dev_account(fs->fs_dev, 1, len);
	return err;
}

static int write_zeros(struct shoal_fs *fs, uint64_t devoff, size_t len)
{
	while (len) {
		size_t n = len < sizeof(zero_buf) ? len : sizeof(zero_buf);
		int err = dev_write(fs->fs_dev, zero_buf, n, devoff);
		if (err)
			return err;
		devoff += n;
		len -= n;
	}
	return 0;
}

#define TO_DEVICE 0x1 /* write_old wrote to the device */
#define TO_INDEX 0x2  /* ... into the dirty-block index */

/*
 * Overwrite len bytes at devoff, inside blocks the file already has.  With
 * the dirty-block index on (dindex.c), a part-block write of a file being
 * fsync'ed goes into it, and so does every write from memory to a block
 * already there; other blocks are written in place, and a callback's bytes
 * that land on an indexed block are read back into its entry (dindex.c (1)).
 */
static int write_old(struct shoal_fs *fs, const struct wsrc *src, uint64_t devoff, size_t len,
		     size_t srcoff, int *to)
{
	uint32_t bs = fs->fs_bsize;
	size_t done = 0;
	int err = 0;

	if (!fs->fs_dx.dx_on || (!src->ws_small && !fs->fs_dx.dx_count) || !src->ws_mem) {
		*to |= TO_DEVICE;
		err = src_copy(fs, src, devoff, len, srcoff);
		return err ? err : dx_absorb(fs, devoff, len, src->ws_mem ? src->ws_mem + srcoff : NULL);
	}
	while (done < len && !err) {
		uint64_t at = devoff + done;
		uint32_t in = (uint32_t)(at & (bs - 1));
		size_t n = bs - in < len - done ? bs - in : len - done;

		if (src->ws_small || dx_find(fs, at >> fs->fs_bshift)) {
			err = dx_write(fs, at >> fs->fs_bshift, in, src->ws_mem + srcoff + done, n);
			*to |= TO_INDEX;
		} else {
			/* the run of blocks up to the next indexed one, in place */
			while (done + n < len && !dx_find(fs, (at + n) >> fs->fs_bshift))
				n += bs < len - done - n ? bs : len - done - n;
			err = dev_write_behind(fs->fs_dev, src->ws_mem + srcoff + done, n, at);
			*to |= TO_DEVICE;
		}
		done += n;
	}
	return err;
}

/* Write len source bytes at byte inblk of new blocks first..first+nblk,
 * zeroing the rest of those blocks (invariant (1)). */
static int write_new(struct shoal_fs *fs, const struct wsrc *src, uint64_t first, uint32_t nblk,
		     uint32_t inblk, size_t len, size_t srcoff)
{
	uint64_t base = first << fs->fs_bshift;
	size_t span = (size_t)nblk * fs->fs_bsize;
	int err = 0;

	if (src->ws_mem && (inblk || inblk + len < span)) {
		/* compose whole blocks in memory: one write */
		uint8_t *tmp = calloc(1, span);
		if (!tmp)
			return -ENOMEM;
		memcpy(tmp + inblk, src->ws_mem + srcoff, len);
		err = dev_write(fs->fs_dev, tmp, span, base);
		free(tmp);
		return err;
	}
	if (inblk)
		err = write_zeros(fs, base, inblk);
	if (!err)
		err = src_copy(fs, src, base + inblk, len, srcoff);
	if (!err && inblk + len < span)
		err = write_zeros(fs, base + inblk + len, span - inblk - len);
	return err;
}

static ssize_t write_src(struct shoal_fs *fs, struct shoal_inode *ip, const struct wsrc *src,
			 size_t size, uint64_t off)
{
	struct shoal_dinode *di = ip_di(ip);
	uint32_t pay = SHOAL_DI_PAYLOAD(fs->fs_bsize);
	uint64_t end = off + size;
	size_t done = 0;
	int grew = 0, err = 0, to = 0;

	if (size == 0)
		return 0;
	if (end < off || end > file_max_bytes(fs))
		return -EFBIG;
	/* inline data is copied from memory; a callback's bytes go to blocks */
	if (di->di_height == 0 && end <= pay && src->ws_mem) {
		/* the bytes live in the dinode: fdatasync must commit it even
		 * when the size does not change (an overwrite) */
		inode_dirty(fs, ip, 1);
		memcpy(ip->i_bh->b_data + SHOAL_DI_PAYLOAD_OFF + off, src->ws_mem, size);
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
		if (isnew && fs->fs_dx.dx_on && src->ws_mem && size <= fs->fs_bsize) {
			/* (5): at most two blocks, which trans_begin_alloc left
			 * room for in the index */
			for (size_t k = 0; k < len && !err;) {
				uint32_t in = (uint32_t)((inblk + k) & (fs->fs_bsize - 1));
				size_t n = fs->fs_bsize - in < len - k ? fs->fs_bsize - in : len - k;
				err = dx_write_new(fs, pblk + ((inblk + k) >> fs->fs_bshift), in,
						   src->ws_mem + done + k, n);
				k += n;
			}
			fs->fs_j.j_ordered = 1;
			to |= TO_INDEX;
			grew = 1;
		} else if (isnew) {
			uint32_t nblk = (uint32_t)((inblk + len + fs->fs_bsize - 1) >> fs->fs_bshift);
			err = write_new(fs, src, pblk, nblk, inblk, len, done);
			fs->fs_j.j_ordered = 1;
			to |= TO_DEVICE;
			grew = 1;
		} else {
			err = write_old(fs, src, (pblk << fs->fs_bshift) + inblk, len, done, &to);
		}
		if (err)
			break;
		done += len;
	}
	if (done) {
		if (to & TO_DEVICE)
			note_data_write(fs, ip);
		if (off + done > di->di_size) {
			di->di_size = off + done;
			grew = 1;
		}
		/* data in the index is made durable by the journal (dsync) */
		inode_dirty(fs, ip, grew || (to & TO_INDEX));
		inode_touch(ip, 0, 1, 1);
		return (ssize_t)done;
	}
	return err;
}

ssize_t file_write(struct shoal_fs *fs, struct shoal_inode *ip, const void *buf, size_t size,
		   uint64_t off)
{
	struct wsrc src = {.ws_mem = buf,
			   .ws_small = size < fs->fs_bsize && ip->i_fsync_ns &&
				       gl_now_ns() - ip->i_fsync_ns < SYNC_RECENT_NS};
	return write_src(fs, ip, &src, size, off);
}

ssize_t file_write_fn(struct shoal_fs *fs, struct shoal_inode *ip, shoal_write_fn fn, void *arg,
		      size_t size, uint64_t off)
{
	struct wsrc src = {.ws_fn = fn, .ws_arg = arg, .ws_fd = dev_fd(fs->fs_dev)};
	return write_src(fs, ip, &src, size, off);
}

int file_truncate(struct shoal_fs *fs, struct shoal_inode *ip, uint64_t size)
{
	struct shoal_dinode *di = ip_di(ip);
	uint32_t pay = SHOAL_DI_PAYLOAD(fs->fs_bsize), bs = fs->fs_bsize;
	int err;

	if (size > file_max_bytes(fs))
		return -EFBIG;
	inode_dirty(fs, ip, 1);
	if (size < di->di_size) {
		if (di->di_height == 0) {
			if (size < pay)
				memset(ip->i_bh->b_data + SHOAL_DI_PAYLOAD_OFF + size, 0, pay - size);
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
					uint64_t at = (pblk << fs->fs_bshift) + in;
					err = dev_write(fs->fs_dev, z, bs - in, at);
					if (!err)
						err = dx_absorb(fs, at, bs - in, z);
					free(z);
					if (err)
						return err;
					note_data_write(fs, ip);
				}
			}
		}
	}
	/* growing only sets the size: the new range is a hole (R3) */
	di->di_size = size;
	return 0;
}

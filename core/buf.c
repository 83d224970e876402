/*
 * buf.c - the metadata buffer cache.
 *
 * Owns every in-memory copy of a metadata block.  A buffer is found by its
 * block number in a hash table; unreferenced clean buffers sit on an LRU list
 * and are evicted when the cache holds more than bc_max buffers.
 *
 * Invariants (all under fs_lock):
 *  (1) at most one buffer per block number;
 *  (2) a buffer that is DIRTY or PINNED is never evicted: the running
 *      transaction (DIRTY) and the checkpoint list (PINNED) each hold a
 *      reference while the buffer is on them;
 *  (3) a buffer read from the device has passed meta_check for the type
 *      asked for; a corrupt block is never cached;
 *  (4) a buffer is on the LRU list iff b_ref == 0;
 *  (5) bc_max bounds the LRU (unreferenced buffers) only: referenced ones
 *      (inodes the kernel holds, transactions) cannot be dropped anyway,
 *      and counting them would evict every directory leaf on a big tree.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "meta.h"

static uint32_t bc_slot(struct shoal_bcache *bc, uint64_t blkno)
{
	return fib_slot(blkno, bc->bc_hmask);
}

static void lru_del(struct shoal_bcache *bc, struct shoal_buf *b)
{
	bc->bc_lru_count--;
	b->b_lprev->b_lnext = b->b_lnext;
	b->b_lnext->b_lprev = b->b_lprev;
	b->b_lprev = b->b_lnext = NULL;
}

static void lru_add_tail(struct shoal_bcache *bc, struct shoal_buf *b)
{
	bc->bc_lru_count++;
	b->b_lnext = &bc->bc_lru;
	b->b_lprev = bc->bc_lru.b_lprev;
	bc->bc_lru.b_lprev->b_lnext = b;
	bc->bc_lru.b_lprev = b;
}

static void hash_del(struct shoal_bcache *bc, struct shoal_buf *b)
{
	struct shoal_buf **pp = &bc->bc_hash[bc_slot(bc, b->b_blkno)];
	while (*pp != b)
		pp = &(*pp)->b_hnext;
	*pp = b->b_hnext;
}

static void buf_free(struct shoal_fs *fs, struct shoal_buf *b)
{
	hash_del(&fs->fs_bc, b);
	fs->fs_bc.bc_count--;
	free(b->b_data);
	free(b);
}

int bc_init(struct shoal_fs *fs)
{
	struct shoal_bcache *bc = &fs->fs_bc;
	uint64_t bytes = fs->fs_opts.mo_cache_bytes ? fs->fs_opts.mo_cache_bytes : 256ull << 20;
	uint32_t slots = 1024;

	bc->bc_max = bytes / fs->fs_bsize;
	if (bc->bc_max < 256)
		bc->bc_max = 256;
	while (slots < bc->bc_max && slots < (1u << 22))
		slots <<= 1;
	bc->bc_hash = calloc(slots, sizeof(*bc->bc_hash));
	if (!bc->bc_hash)
		return -ENOMEM;
	bc->bc_hmask = slots - 1;
	bc->bc_lru.b_lnext = bc->bc_lru.b_lprev = &bc->bc_lru;
	return 0;
}

void bc_destroy(struct shoal_fs *fs)
{
	struct shoal_bcache *bc = &fs->fs_bc;
	if (!bc->bc_hash)
		return;
	for (uint32_t i = 0; i <= bc->bc_hmask; i++) {
		struct shoal_buf *b = bc->bc_hash[i];
		while (b) {
			struct shoal_buf *n = b->b_hnext;
			free(b->b_data);
			free(b);
			b = n;
		}
	}
	free(bc->bc_hash);
	bc->bc_hash = NULL;
}

static struct shoal_buf *bc_find(struct shoal_bcache *bc, uint64_t blkno)
{
	struct shoal_buf *b = bc->bc_hash[bc_slot(bc, blkno)];
	while (b && b->b_blkno != blkno)
		b = b->b_hnext;
	return b;
}

static struct shoal_buf *bc_insert(struct shoal_fs *fs, uint64_t blkno)
{
	struct shoal_bcache *bc = &fs->fs_bc;
	struct shoal_buf *b = calloc(1, sizeof(*b));
	if (!b)
		return NULL;
	if (posix_memalign((void **)&b->b_data, 4096, fs->fs_bsize)) {
		free(b);
		return NULL;
	}
	b->b_blkno = blkno;
	b->b_ref = 1;
	uint32_t s = bc_slot(bc, blkno);
	b->b_hnext = bc->bc_hash[s];
	bc->bc_hash[s] = b;
	bc->bc_count++;
	return b;
}

void buf_shrink(struct shoal_fs *fs)
{
	struct shoal_bcache *bc = &fs->fs_bc;
	while (bc->bc_lru_count > bc->bc_max && bc->bc_lru.b_lnext != &bc->bc_lru) {
		struct shoal_buf *b = bc->bc_lru.b_lnext;
		lru_del(bc, b);
		buf_free(fs, b);
	}
}

static void buf_hold(struct shoal_bcache *bc, struct shoal_buf *b)
{
	if (b->b_ref++ == 0)
		lru_del(bc, b);
}

/* buf_read; ino names the inode that reached the block in a damage report */
static int read_ino(struct shoal_fs *fs, uint64_t blkno, uint16_t type, uint64_t ino,
		    struct shoal_buf **out)
{
	struct shoal_bcache *bc = &fs->fs_bc;
	struct shoal_buf *b;
	int err;

	if (blkno == 0 || blkno >= fs->fs_sb.sb_blocks)
		return fs_corrupt_ino(fs, blkno, ino, "block address out of range") ? -EIO : -EIO;
	b = bc_find(bc, blkno);
	if (b) {
		if (type && ((struct shoal_mh *)b->b_data)->mh_type != type)
			return fs_corrupt_ino(fs, blkno, ino, "block has the wrong type") ? -EIO : -EIO;
		buf_hold(bc, b);
		fs->fs_ctr.sc_buf_hits++;
		*out = b;
		return 0;
	}
	fs->fs_ctr.sc_buf_misses++;
	b = bc_insert(fs, blkno);
	if (!b)
		return -ENOMEM;
	err = dev_read(fs->fs_dev, b->b_data, fs->fs_bsize, blkno << fs->fs_bshift);
	if (!err && type && meta_check(b->b_data, fs->fs_bsize, type, blkno))
		err = fs_corrupt_ino(fs, blkno, ino, "bad checksum or header");
	if (err) {
		buf_free(fs, b);
		return err == -EUCLEAN ? -EIO : err;
	}
	*out = b;
	buf_shrink(fs);
	return 0;
}

int buf_read(struct shoal_fs *fs, uint64_t blkno, uint16_t type, struct shoal_buf **out)
{
	return read_ino(fs, blkno, type, 0, out);
}

static int read_gen_ino(struct shoal_fs *fs, uint64_t gen, uint64_t blkno, uint16_t type,
			uint64_t ino, struct shoal_buf **out)
{
	struct shoal_buf *b;
	int err;

	if (!fs->fs_cluster)
		return read_ino(fs, blkno, type, ino, out);
	b = bc_find(&fs->fs_bc, blkno);
	if (b && b->b_gen != gen && !(b->b_flags & (BUF_DIRTY | BUF_PINNED))) {
		/* read under an older grant: another node may have changed it */
		fs->fs_ctr.sc_buf_misses++;
		err = dev_read(fs->fs_dev, b->b_data, fs->fs_bsize, blkno << fs->fs_bshift);
		if (!err && type && meta_check(b->b_data, fs->fs_bsize, type, blkno))
			err = fs_corrupt_ino(fs, blkno, ino, "bad checksum or header");
		if (err) {
			/* leave no half-read copy behind */
			memset(b->b_data, 0, fs->fs_bsize);
			b->b_gen = 0;
			return err == -EUCLEAN ? -EIO : err;
		}
	}
	err = read_ino(fs, blkno, type, ino, out);
	if (!err)
		(*out)->b_gen = gen;
	return err;
}

int buf_read_gen(struct shoal_fs *fs, uint64_t gen, uint64_t blkno, uint16_t type,
		 struct shoal_buf **out)
{
	return read_gen_ino(fs, gen, blkno, type, 0, out);
}

int buf_read_ip(struct shoal_fs *fs, struct shoal_inode *ip, uint64_t blkno, uint16_t type,
		struct shoal_buf **out)
{
	return read_gen_ino(fs, inode_gen(fs, ip), blkno, type, ip->i_ino, out);
}

int buf_new(struct shoal_fs *fs, uint64_t blkno, struct shoal_buf **out)
{
	struct shoal_buf *b = bc_find(&fs->fs_bc, blkno);

	if (b) {
		buf_hold(&fs->fs_bc, b);
	} else {
		b = bc_insert(fs, blkno);
		if (!b)
			return -ENOMEM;
	}
	memset(b->b_data, 0, fs->fs_bsize);
	b->b_flags |= BUF_NEW;
	*out = b;
	return 0;
}

void buf_put(struct shoal_fs *fs, struct shoal_buf *b)
{
	if (!b)
		return;
	if (--b->b_ref == 0) {
		if (b->b_flags & BUF_STALE) {
			free(b->b_data); /* already out of the hash */
			free(b);
			return;
		}
		lru_add_tail(&fs->fs_bc, b);
		buf_shrink(fs);
	}
}

void buf_forget(struct shoal_fs *fs, uint64_t blkno)
{
	struct shoal_buf *b = bc_find(&fs->fs_bc, blkno);
	if (!b)
		return;
	if (b->b_ref == 0) {
		lru_del(&fs->fs_bc, b);
		buf_free(fs, b);
		return;
	}
	/* Still on the transaction or checkpoint list: they drop it. */
	b->b_flags |= BUF_STALE;
	hash_del(&fs->fs_bc, b);
	fs->fs_bc.bc_count--;
	b->b_hnext = NULL;
}

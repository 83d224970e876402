/*
 * dindex.c - the dirty-block index: file data written but not yet home.
 *
 * A small overwrite of a file that is being fsync'ed (file.c (4)) is not
 * written to the device when it arrives: its block goes into this index, a
 * copy of the whole block as it is now, with the granules (512 bytes, or
 * 1/64 of a block when that is more) changed since the last fast commit.
 * So does a write of at most one block from memory into blocks it
 * allocates (file.c (5): the kernel laundering a mapped page one at a
 * time, small appends): the block, zeros around the bytes, waits here and
 * goes home with its neighbours in the commit that makes its allocation
 * durable, instead of one device write each.
 * fsync logs just those granules in the fast-commit block it writes anyway
 * (journal.c (6)): one log write and one flush make a small write durable.
 * The next full commit writes every block of the index home, flushes, and
 * empties the index; the commit supersedes the fast commits at replay
 * (FORMAT.md 11.3), so the data they carry is never applied over newer data.
 *
 * Owns: the entries (fs_dx), protected by fs_lock like the journal.
 *
 * Invariants (fs_lock):
 *  (1) an entry's de_data is the block's current contents: every write to
 *      the block while it is in the index reaches de_data (dx_write, or
 *      dx_absorb after a device write), and the device copy is older;
 *  (2) the index holds only dirty blocks: writeback visits dx_count blocks
 *      and writes each (wb_visited == wb_written), never a clean one (R3);
 *  (3) entries leave only by dx_writeback (inside a full commit, before
 *      its flush) or dx_forget (the block was freed): a block named by a
 *      fast commit of the running transaction stays until that
 *      transaction's commit has it home;
 *  (4) at most dx_max entries before a consistent point commits them
 *      (journal.c trans_begin_alloc), so memory stays bounded;
 *  (5) an entry is on the unlogged list (dx_unlogged) exactly when its
 *      de_unlogged is not 0, so a fast commit visits the blocks changed
 *      since the last one, not every block of the index (R3).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define DX_BYTES (16u << 20) /* memory for block copies before a commit */

int dx_init(struct shoal_fs *fs, int on)
{
	struct dx_index *dx = &fs->fs_dx;
	uint32_t slots = 4096;

	memset(dx, 0, sizeof(*dx));
	dx->dx_on = on;
	dx->dx_max = DX_BYTES / fs->fs_bsize;
	dx->dx_gshift = fs->fs_bshift > 15 ? fs->fs_bshift - 6 : 9;
	dx->dx_head.de_next = dx->dx_head.de_prev = &dx->dx_head;
	dx->dx_unlogged.de_unext = dx->dx_unlogged.de_uprev = &dx->dx_unlogged;
	dx->dx_hash = calloc(slots, sizeof(*dx->dx_hash));
	if (!dx->dx_hash)
		return -ENOMEM;
	dx->dx_hmask = slots - 1;
	return 0;
}

static void entry_unlink(struct dx_index *dx, struct dx_entry *e)
{
	struct dx_entry **pp = &dx->dx_hash[fib_slot(e->de_blkno, dx->dx_hmask)];

	while (*pp != e)
		pp = &(*pp)->de_hnext;
	*pp = e->de_hnext;
	e->de_prev->de_next = e->de_next;
	e->de_next->de_prev = e->de_prev;
	if (e->de_unlogged) {
		e->de_uprev->de_unext = e->de_unext;
		e->de_unext->de_uprev = e->de_uprev;
	}
	dx->dx_count--;
	free(e);
}

/* Every entry dropped, nothing written (unmount after an abort). */
void dx_drop_all(struct shoal_fs *fs)
{
	struct dx_index *dx = &fs->fs_dx;

	if (!dx->dx_hash)
		return;
	while (dx->dx_head.de_next != &dx->dx_head)
		entry_unlink(dx, dx->dx_head.de_next);
}

void dx_destroy(struct shoal_fs *fs)
{
	if (!fs->fs_dx.dx_hash)
		return;
	dx_drop_all(fs);
	free(fs->fs_dx.dx_hash);
	fs->fs_dx.dx_hash = NULL;
}

struct dx_entry *dx_find(struct shoal_fs *fs, uint64_t blkno)
{
	struct dx_index *dx = &fs->fs_dx;
	struct dx_entry *e;

	if (!dx->dx_count)
		return NULL;
	for (e = dx->dx_hash[fib_slot(blkno, dx->dx_hmask)]; e; e = e->de_hnext)
		if (e->de_blkno == blkno)
			return e;
	return NULL;
}

static void mark(struct dx_index *dx, struct dx_entry *e, uint32_t inblk, size_t len)
{
	uint32_t first = inblk >> dx->dx_gshift;
	uint32_t last = (uint32_t)((inblk + len - 1) >> dx->dx_gshift);

	if (!e->de_unlogged) {
		e->de_uprev = dx->dx_unlogged.de_uprev;
		e->de_unext = &dx->dx_unlogged;
		dx->dx_unlogged.de_uprev->de_unext = e;
		dx->dx_unlogged.de_uprev = e;
	}
	for (uint32_t g = first; g <= last; g++)
		e->de_unlogged |= 1ull << g;
}

static int dx_put(struct shoal_fs *fs, uint64_t blkno, uint32_t inblk, const void *src, size_t len,
		  int fresh)
{
	struct dx_index *dx = &fs->fs_dx;
	struct dx_entry *e = dx_find(fs, blkno);

	if (!e) {
		uint32_t slot = fib_slot(blkno, dx->dx_hmask);
		e = malloc(sizeof(*e) + fs->fs_bsize);
		if (!e)
			return -ENOMEM;
		memset(e, 0, sizeof(*e));
		e->de_blkno = blkno;
		if (fresh) {
			/* a block just allocated: what is not written is zeros */
			memset(e->de_data, 0, fs->fs_bsize);
		} else if (inblk || len < fs->fs_bsize) {
			/* the rest of the block is what the device holds (1) */
			int err = dev_read(fs->fs_dev, e->de_data, fs->fs_bsize,
					   blkno << fs->fs_bshift);
			if (err) {
				free(e);
				return err;
			}
		}
		e->de_hnext = dx->dx_hash[slot];
		dx->dx_hash[slot] = e;
		e->de_prev = dx->dx_head.de_prev;
		e->de_next = &dx->dx_head;
		dx->dx_head.de_prev->de_next = e;
		dx->dx_head.de_prev = e;
		dx->dx_count++;
	}
	memcpy(e->de_data + inblk, src, len);
	mark(dx, e, inblk, len);
	return 0;
}

int dx_write(struct shoal_fs *fs, uint64_t blkno, uint32_t inblk, const void *src, size_t len)
{
	return dx_put(fs, blkno, inblk, src, len, 0);
}

int dx_write_new(struct shoal_fs *fs, uint64_t blkno, uint32_t inblk, const void *src, size_t len)
{
	return dx_put(fs, blkno, inblk, src, len, 1);
}

int dx_absorb(struct shoal_fs *fs, uint64_t devoff, size_t len, const void *mem)
{
	uint32_t bs = fs->fs_bsize;
	const uint8_t *m = mem;

	if (!fs->fs_dx.dx_count)
		return 0;
	while (len) {
		uint64_t blkno = devoff >> fs->fs_bshift;
		uint32_t inblk = (uint32_t)(devoff & (bs - 1));
		size_t n = bs - inblk < len ? bs - inblk : len;
		struct dx_entry *e = dx_find(fs, blkno);

		if (e) {
			if (m) {
				memcpy(e->de_data + inblk, m, n);
			} else {
				int err = dev_read(fs->fs_dev, e->de_data + inblk, n, devoff);
				if (err)
					return err;
			}
			mark(&fs->fs_dx, e, inblk, n);
		}
		devoff += n;
		len -= n;
		if (m)
			m += n;
	}
	return 0;
}

void dx_forget(struct shoal_fs *fs, uint64_t blkno, uint64_t n)
{
	struct dx_index *dx = &fs->fs_dx;

	if (!dx->dx_count)
		return;
	if (n > dx->dx_count) {
		struct dx_entry *e, *next;
		for (e = dx->dx_head.de_next; e != &dx->dx_head; e = next) {
			next = e->de_next;
			if (e->de_blkno >= blkno && e->de_blkno - blkno < n)
				entry_unlink(dx, e);
		}
		return;
	}
	for (uint64_t i = 0; i < n; i++) {
		struct dx_entry *e = dx_find(fs, blkno + i);
		if (e)
			entry_unlink(dx, e);
	}
}

static int cmp_entry(const void *a, const void *b)
{
	const struct dx_entry *x = *(struct dx_entry *const *)a;
	const struct dx_entry *y = *(struct dx_entry *const *)b;
	return x->de_blkno < y->de_blkno ? -1 : x->de_blkno > y->de_blkno;
}

static const uint8_t *entry_item(void *arg, uint32_t i, uint64_t *blkno)
{
	struct dx_entry *e = ((struct dx_entry **)arg)[i];
	*blkno = e->de_blkno;
	return e->de_data;
}

int dx_writeback(struct shoal_fs *fs)
{
	struct dx_index *dx = &fs->fs_dx;
	struct dx_entry **list, *e;
	uint32_t n = 0;
	int err;

	if (!dx->dx_count)
		return 0;
	list = malloc(sizeof(*list) * dx->dx_count);
	if (!list)
		return -ENOMEM;
	for (e = dx->dx_head.de_next; e != &dx->dx_head; e = e->de_next)
		list[n++] = e;
	qsort(list, n, sizeof(*list), cmp_entry);
	err = jnl_write_sorted(fs, n, entry_item, list);
	free(list);
	if (err)
		return err; /* the entries stay: what they hold is not home */
	fs->fs_ctr.sc_wb_visited += n;
	fs->fs_ctr.sc_wb_written += n;
	dx_drop_all(fs);
	return 0;
}

void dx_logged(struct shoal_fs *fs)
{
	struct dx_index *dx = &fs->fs_dx;

	for (struct dx_entry *e = dx->dx_unlogged.de_unext; e != &dx->dx_unlogged; e = e->de_unext)
		e->de_unlogged = 0;
	dx->dx_unlogged.de_unext = dx->dx_unlogged.de_uprev = &dx->dx_unlogged;
}

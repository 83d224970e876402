/*
 * rgrp.c - resource groups: the block allocator.
 *
 * Each group is one header block holding a 2-bit-per-block bitmap (FORMAT.md)
 * and its own lock (a glock of type 3 once clustered), so nodes allocate in
 * parallel from different groups.  The in-memory descriptor (struct
 * shoal_rgd) mirrors the header's free count.
 *
 * Invariants (fs_lock):
 *  (1) rd_free equals the FREE entries of the group's bitmap;
 *  (2) a block freed by a transaction that is not yet checkpointed is marked
 *      in rd_pend_map and is not handed out again (journal.c (5)): replay of
 *      an older transaction could otherwise overwrite its new contents;
 *  (3) every bitmap change is made on the header buffer inside the running
 *      transaction.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "lock.h"
#include "meta.h"

static int bm_get(const uint8_t *bm, uint32_t k)
{
	return (bm[k >> 2] >> ((k & 3) * 2)) & 3;
}

static void bm_set(uint8_t *bm, uint32_t k, int state)
{
	uint8_t sh = (uint8_t)((k & 3) * 2);
	bm[k >> 2] = (uint8_t)((bm[k >> 2] & ~(3u << sh)) | ((unsigned)state << sh));
}

static int pend_get(const struct shoal_rgd *rd, uint32_t k)
{
	return rd->rd_pend_map && (rd->rd_pend_map[k >> 3] >> (k & 7)) & 1;
}

int rg_load(struct shoal_fs *fs)
{
	struct shoal_sb *sb = &fs->fs_sb;
	uint32_t maxlen = SHOAL_RG_MAX_LENGTH(fs->fs_bsize);

	if (sb->sb_rgcount == 0 || sb->sb_rgblocks < 2 || sb->sb_rgblocks - 1 > maxlen)
		return fs_corrupt(fs, 0, "superblock resource group geometry");
	fs->fs_rgds = calloc(sb->sb_rgcount, sizeof(*fs->fs_rgds));
	if (!fs->fs_rgds)
		return -ENOMEM;
	fs->fs_rgcount = sb->sb_rgcount;
	for (uint32_t i = 0; i < sb->sb_rgcount; i++) {
		struct shoal_rgd *rd = &fs->fs_rgds[i];
		struct shoal_buf *b;
		struct shoal_rg *rg;
		uint64_t addr = sb->sb_rgfirst + (uint64_t)i * sb->sb_rgblocks;
		int err = buf_read(fs, addr, SHOAL_MT_RG, &b);
		if (err)
			return err;
		rg = (void *)b->b_data;
		if (rg->rg_index != i || rg->rg_data0 != addr + 1 || rg->rg_length > maxlen ||
		    rg->rg_data0 + rg->rg_length > sb->sb_blocks - 1 || rg->rg_free > rg->rg_length) {
			buf_put(fs, b);
			return fs_corrupt(fs, addr, "resource group header");
		}
		rd->rd_index = i;
		rd->rd_addr = addr;
		rd->rd_data0 = rg->rg_data0;
		rd->rd_length = rg->rg_length;
		rd->rd_free = rg->rg_free;
		rd->rd_gl = gl_get(fs, GL_RGRP, addr);
		buf_put(fs, b);
		if (!rd->rd_gl)
			return -ENOMEM;
	}
	return 0;
}

void rg_destroy(struct shoal_fs *fs)
{
	for (uint32_t i = 0; fs->fs_rgds && i < fs->fs_rgcount; i++)
		free(fs->fs_rgds[i].rd_pend_map);
	free(fs->fs_rgds);
	fs->fs_rgds = NULL;
}

static struct shoal_rgd *rg_of(struct shoal_fs *fs, uint64_t blkno)
{
	struct shoal_sb *sb = &fs->fs_sb;
	if (blkno < sb->sb_rgfirst)
		return NULL;
	uint64_t i = (blkno - sb->sb_rgfirst) / sb->sb_rgblocks;
	if (i >= fs->fs_rgcount)
		return NULL;
	struct shoal_rgd *rd = &fs->fs_rgds[i];
	if (blkno < rd->rd_data0 || blkno >= rd->rd_data0 + rd->rd_length)
		return NULL;
	return rd;
}

static uint64_t rg_gen(struct shoal_rgd *rd)
{
	return __atomic_load_n(&rd->rd_gl->gl_gen, __ATOMIC_RELAXED);
}

/* The group's header, its glock held EX (each group has its own lock:
 * nodes allocate in parallel); rd_free follows the header. */
static int rg_header(struct shoal_fs *fs, struct shoal_rgd *rd, struct shoal_buf **b)
{
	int err = gl_hold(fs, GL_RGRP, rd->rd_addr, GL_EX);
	if (err)
		return err;
	err = buf_read_gen(fs, rg_gen(rd), rd->rd_addr, SHOAL_MT_RG, b);
	if (err == -EIO) /* a shared structure: stop writing before it spreads */
		fs_error(fs, "resource group %u (block %llu) is damaged", rd->rd_index,
			 (unsigned long long)rd->rd_addr);
	if (!err) {
		rd->rd_free = ((struct shoal_rg *)(*b)->b_data)->rg_free;
		rd->rd_gen = rg_gen(rd);
	}
	return err;
}

/* rd_free, read again if the group changed hands since (cluster; held) */
static uint32_t rg_current_free(struct shoal_fs *fs, struct shoal_rgd *rd)
{
	struct shoal_buf *b;
	if (fs->fs_cluster && rd->rd_gen != rg_gen(rd) && rg_header(fs, rd, &b) == 0)
		buf_put(fs, b);
	return rd->rd_free;
}

/* May this node allocate from rd now?  (cluster: its glock is ours, EX) */
static int rg_usable(struct shoal_fs *fs, struct shoal_rgd *rd)
{
	return !fs->fs_cluster || gl_have(fs, GL_RGRP, rd->rd_addr, GL_EX);
}

int rg_hold_of(struct shoal_fs *fs, uint64_t blkno)
{
	struct shoal_rgd *rd = rg_of(fs, blkno);
	if (!fs->fs_cluster || !rd)
		return 0;
	return gl_hold(fs, GL_RGRP, rd->rd_addr, GL_EX);
}

int rg_held_of(struct shoal_fs *fs, uint64_t blkno)
{
	struct shoal_rgd *rd = rg_of(fs, blkno);
	return !fs->fs_cluster || !rd || rg_usable(fs, rd);
}

int rg_all_held(struct shoal_fs *fs)
{
	for (uint32_t i = 0; i < fs->fs_rgcount; i++)
		if (!rg_usable(fs, &fs->fs_rgds[i]))
			return 0;
	return 1;
}

int rg_hold_all(struct shoal_fs *fs)
{
	int err = 0;
	if (!fs->fs_cluster)
		return 0;
	/* ask for every group, so one restart waits for all of them */
	for (uint32_t i = 0; i < fs->fs_rgcount; i++) {
		int e = gl_hold(fs, GL_RGRP, fs->fs_rgds[i].rd_addr, GL_EX);
		if (e && (!err || err == -ERESTART))
			err = e;
	}
	return err;
}

/* --- sets of groups: what freeing some blocks touches ------------------ */

uint8_t *rg_set_new(struct shoal_fs *fs)
{
	return calloc((fs->fs_rgcount + 7) / 8, 1);
}

void rg_set_add(struct shoal_fs *fs, uint8_t *set, uint64_t blkno)
{
	struct shoal_rgd *rd = rg_of(fs, blkno);

	if (rd)
		set[rd->rd_index / 8] |= (uint8_t)(1u << (rd->rd_index % 8));
}

int rg_hold_set(struct shoal_fs *fs, const uint8_t *set, int want)
{
	int err = 0;

	if (!fs->fs_cluster)
		return want ? 0 : 1;
	/* ask for every group of the set, so one restart waits for all */
	for (uint32_t i = 0; i < fs->fs_rgcount; i++) {
		struct shoal_rgd *rd = &fs->fs_rgds[i];

		if (!(set[i / 8] & (1u << (i % 8))))
			continue;
		if (!want) {
			if (!rg_usable(fs, rd))
				return 0;
			continue;
		}
		int e = gl_hold(fs, GL_RGRP, rd->rd_addr, GL_EX);
		if (e && (!err || err == -ERESTART))
			err = e;
	}
	return want ? err : 1;
}

int rg_reserve(struct shoal_fs *fs, uint64_t nalloc)
{
	uint64_t have = 0, need = nalloc + 8;
	int restart = 0;

	if (!fs->fs_cluster || !nalloc)
		return 0;
	for (uint32_t i = 0; i < fs->fs_rgcount; i++) {
		struct shoal_rgd *rd = &fs->fs_rgds[i];
		if (rg_usable(fs, rd) && rg_current_free(fs, rd) > rd->rd_pending)
			have += rd->rd_free - rd->rd_pending;
	}
	/* take more groups, starting where this node allocates */
	for (uint32_t t = 0; t < fs->fs_rgcount && have < need; t++) {
		struct shoal_rgd *rd = &fs->fs_rgds[(fs->fs_rg_alloc + t) % fs->fs_rgcount];
		struct shoal_buf *b;
		int err;
		if (rg_usable(fs, rd))
			continue;
		err = gl_hold(fs, GL_RGRP, rd->rd_addr, GL_EX);
		if (err == -ERESTART) {
			restart = 1;
			/* one group to wait for is enough: nodes keep to their own */
			break;
		}
		if (err)
			return err;
		err = rg_header(fs, rd, &b);
		if (err)
			return err;
		buf_put(fs, b);
		if (rd->rd_free > rd->rd_pending)
			have += rd->rd_free - rd->rd_pending;
	}
	return have < need && restart ? -ERESTART : 0;
}

/* Search rd from offset start for a free, non-pending run; 0 on success. */
static int rg_search(struct shoal_rgd *rd, const uint8_t *bm, uint32_t start, uint32_t n,
		     uint32_t *first, uint32_t *got)
{
	for (uint32_t pass = 0; pass < 2; pass++) {
		uint32_t k = pass ? 0 : start, end = pass ? start : rd->rd_length;
		while (k < end) {
			if ((k & 3) == 0 && k + 4 <= end) {
				uint8_t v = bm[k >> 2];
				/* all four used: every 2-bit field non-zero */
				if ((v & 0x03) && (v & 0x0c) && (v & 0x30) && (v & 0xc0)) {
					k += 4;
					continue;
				}
			}
			if (bm_get(bm, k) == SHOAL_B_FREE && !pend_get(rd, k)) {
				uint32_t len = 1;
				while (len < n && k + len < rd->rd_length &&
				       bm_get(bm, k + len) == SHOAL_B_FREE && !pend_get(rd, k + len))
					len++;
				*first = k;
				*got = len;
				return 0;
			}
			k++;
		}
	}
	return -ENOSPC;
}

static int rg_find(struct shoal_fs *fs, uint64_t goal, uint32_t n, int state, int peek,
		   uint64_t *first, uint32_t *got)
{
	struct shoal_rgd *rd = rg_of(fs, goal);
	uint32_t start_rg = rd ? rd->rd_index : fs->fs_rg_alloc % fs->fs_rgcount;
	uint32_t start = rd ? (uint32_t)(goal - rd->rd_data0) : 0;

	if (n == 0)
		return -EINVAL;
	if (state == SHOAL_B_DINODE || state == SHOAL_B_UNLINKED)
		n = 1;
	for (uint32_t t = 0; t < fs->fs_rgcount; t++) {
		uint32_t ri = (start_rg + t) % fs->fs_rgcount, k, len;
		struct shoal_buf *b;
		struct shoal_rg *rg;
		int err;

		rd = &fs->fs_rgds[ri];
		if (rd->rd_free <= rd->rd_pending || !rg_usable(fs, rd))
			continue;
		err = rg_header(fs, rd, &b);
		if (err)
			return err;
		uint8_t *bm = b->b_data + SHOAL_RG_BITMAP_OFF;
		/* next fit: blocks between the goal and the cursor were taken */
		uint32_t from = rd->rd_last;
		if (t == 0 && (start > rd->rd_last ||
			       (bm_get(bm, start) == SHOAL_B_FREE && !pend_get(rd, start))))
			from = start; /* the goal itself is free: stay contiguous */
		if (rg_search(rd, bm, from, n, &k, &len)) {
			buf_put(fs, b);
			continue;
		}
		if (peek) {
			buf_put(fs, b);
			*first = rd->rd_data0 + k;
			*got = 1;
			return 0;
		}
		trans_add(fs, b);
		rg = (void *)b->b_data;
		for (uint32_t i = 0; i < len; i++)
			bm_set(bm, k + i, state);
		rg->rg_free -= len;
		if (state == SHOAL_B_DINODE || state == SHOAL_B_UNLINKED)
			rg->rg_dinodes += len;
		rd->rd_free = rg->rg_free;
		rd->rd_last = k + len < rd->rd_length ? k + len : 0;
		fs->fs_rg_alloc = ri;
		buf_put(fs, b);
		*first = rd->rd_data0 + k;
		*got = len;
		return 0;
	}
	return -ENOSPC;
}

int rg_alloc(struct shoal_fs *fs, uint64_t goal, uint32_t n, int state, uint64_t *first,
	     uint32_t *got)
{
	return rg_find(fs, goal, n, state, 0, first, got);
}

int rg_peek(struct shoal_fs *fs, uint64_t goal, uint64_t *blk)
{
	uint32_t got;
	return rg_find(fs, goal, 1, SHOAL_B_DINODE, 1, blk, &got);
}

uint32_t rg_peek_after(struct shoal_fs *fs, uint64_t blk, uint32_t n, uint64_t *out)
{
	struct shoal_rgd *rd = rg_of(fs, blk);
	struct shoal_buf *b;
	uint32_t got = 0;

	if (!rd || !rg_usable(fs, rd) || rg_header(fs, rd, &b))
		return 0;
	const uint8_t *bm = b->b_data + SHOAL_RG_BITMAP_OFF;
	uint32_t k = (uint32_t)(blk - rd->rd_data0) + 1, end = k + 64 * n;
	for (; got < n && k < rd->rd_length && k < end; k++)
		if (bm_get(bm, k) == SHOAL_B_FREE && !pend_get(rd, k))
			out[got++] = rd->rd_data0 + k;
	buf_put(fs, b);
	return got;
}

int rg_free(struct shoal_fs *fs, uint64_t blkno, uint32_t n)
{
	dx_forget(fs, blkno, n); /* a freed block's data is never written home */
	while (n) {
		struct shoal_rgd *rd = rg_of(fs, blkno);
		struct shoal_buf *b;
		struct shoal_rg *rg;
		int err;

		if (!rd)
			return fs_corrupt(fs, blkno, "freeing a block outside every resource group");
		err = rg_header(fs, rd, &b);
		if (err)
			return err;
		if (!rd->rd_pend_map) {
			rd->rd_pend_map = calloc((rd->rd_length + 7) / 8, 1);
			if (!rd->rd_pend_map) {
				buf_put(fs, b);
				return -ENOMEM;
			}
		}
		trans_add(fs, b);
		rg = (void *)b->b_data;
		uint8_t *bm = b->b_data + SHOAL_RG_BITMAP_OFF;
		while (n && blkno < rd->rd_data0 + rd->rd_length) {
			uint32_t k = (uint32_t)(blkno - rd->rd_data0);
			int old = bm_get(bm, k);
			if (old == SHOAL_B_FREE) {
				buf_put(fs, b);
				return fs_corrupt(fs, blkno, "freeing a block that is already free");
			}
			if (old == SHOAL_B_DINODE || old == SHOAL_B_UNLINKED)
				rg->rg_dinodes--;
			bm_set(bm, k, SHOAL_B_FREE);
			rg->rg_free++;
			if (!pend_get(rd, k)) {
				rd->rd_pend_map[k >> 3] |= (uint8_t)(1u << (k & 7));
				rd->rd_pending++;
			}
			buf_forget(fs, blkno);
			blkno++;
			n--;
		}
		rd->rd_free = rg->rg_free;
		buf_put(fs, b);
	}
	return 0;
}

int rg_set_state(struct shoal_fs *fs, uint64_t blkno, int state)
{
	struct shoal_rgd *rd = rg_of(fs, blkno);
	struct shoal_buf *b;
	int err;

	if (!rd)
		return fs_corrupt(fs, blkno, "block outside every resource group");
	err = rg_header(fs, rd, &b);
	if (err)
		return err;
	trans_add(fs, b);
	bm_set(b->b_data + SHOAL_RG_BITMAP_OFF, (uint32_t)(blkno - rd->rd_data0), state);
	buf_put(fs, b);
	return 0;
}

int rg_get_state(struct shoal_fs *fs, uint64_t blkno, int *state)
{
	struct shoal_rgd *rd = rg_of(fs, blkno);
	struct shoal_buf *b;
	int err;

	if (!rd)
		return -EINVAL;
	err = rg_header(fs, rd, &b);
	if (err)
		return err;
	*state = bm_get(b->b_data + SHOAL_RG_BITMAP_OFF, (uint32_t)(blkno - rd->rd_data0));
	buf_put(fs, b);
	return 0;
}

void rg_release_pending(struct shoal_fs *fs)
{
	for (uint32_t i = 0; i < fs->fs_rgcount; i++) {
		struct shoal_rgd *rd = &fs->fs_rgds[i];
		free(rd->rd_pend_map);
		rd->rd_pend_map = NULL;
		rd->rd_pending = 0;
	}
}

uint64_t rg_free_total(struct shoal_fs *fs)
{
	uint64_t t = 0;
	for (uint32_t i = 0; i < fs->fs_rgcount; i++)
		t += fs->fs_rgds[i].rd_free;
	return t;
}

uint64_t rg_pending_total(struct shoal_fs *fs)
{
	uint64_t t = 0;
	for (uint32_t i = 0; i < fs->fs_rgcount; i++)
		t += fs->fs_rgds[i].rd_pending;
	return t;
}

/*
 * Cluster: look for UNLINKED dinodes in the home copies of the bitmaps,
 * without taking any group from the nodes that use them; each one found is
 * queued, and freed (with its locks, if still UNLINKED and unused anywhere)
 * by the commit thread.
 */
static int reap_cluster(struct shoal_fs *fs, uint32_t *queued)
{
	uint8_t *blk = malloc(fs->fs_bsize);
	if (!blk)
		return -ENOMEM;
	for (uint32_t i = 0; i < fs->fs_rgcount; i++) {
		struct shoal_rgd *rd = &fs->fs_rgds[i];
		if (dev_read(fs->fs_dev, blk, fs->fs_bsize, rd->rd_addr << fs->fs_bshift) ||
		    meta_check(blk, fs->fs_bsize, SHOAL_MT_RG, rd->rd_addr))
			continue; /* being written by its owner: the next mount looks again */
		const uint8_t *bm = blk + SHOAL_RG_BITMAP_OFF;
		for (uint32_t k = 0; k < rd->rd_length; k++) {
			if ((k & 3) == 0 && !(bm[k >> 2] & 0xaa) && k + 4 <= rd->rd_length) {
				k += 3;
				continue;
			}
			if (bm_get(bm, k) == SHOAL_B_UNLINKED) {
				inode_queue_orphan(fs, rd->rd_data0 + k);
				(*queued)++;
			}
		}
	}
	free(blk);
	return 0;
}

int rg_reap_unlinked(struct shoal_fs *fs, uint32_t *reaped)
{
	*reaped = 0;
	if (fs->fs_cluster)
		return reap_cluster(fs, reaped);
	for (uint32_t i = 0; i < fs->fs_rgcount; i++) {
		struct shoal_rgd *rd = &fs->fs_rgds[i];
		struct shoal_buf *b;
		uint64_t *found = NULL;
		uint32_t nfound = 0;
		int err = rg_header(fs, rd, &b);
		if (err)
			return err;
		const uint8_t *bm = b->b_data + SHOAL_RG_BITMAP_OFF;
		/* collect first: destroying inodes changes this bitmap */
		for (uint32_t k = 0; k < rd->rd_length; k++) {
			if ((k & 3) == 0 && !(bm[k >> 2] & 0xaa) && k + 4 <= rd->rd_length) {
				k += 3; /* no state 2 or 3 among these four */
				continue;
			}
			if (bm_get(bm, k) != SHOAL_B_UNLINKED)
				continue;
			uint64_t *nf = realloc(found, (nfound + 1) * sizeof(*found));
			if (!nf) {
				free(found);
				buf_put(fs, b);
				return -ENOMEM;
			}
			found = nf;
			found[nfound++] = rd->rd_data0 + k;
		}
		buf_put(fs, b);
		for (uint32_t n = 0; n < nfound; n++) {
			struct shoal_inode *ip;
			err = inode_get(fs, found[n], &ip);
			if (err == -EIO || err == -ESTALE) {
				/* a bitmap that says UNLINKED of a block that is no
				 * dinode: damage, logged and left to fsck; the mount
				 * goes on (FORMAT.md "Damage") */
				err = 0;
				continue;
			}
			if (err)
				break;
			if (ip_di(ip)->di_nlink == 0 && ip->i_open == 0 && ip->i_nlookup == 0)
				err = inode_destroy(fs, ip);
			inode_put(fs, ip);
			if (err == -EIO) {
				err = 0; /* its block map is damaged: fsck frees the rest */
				continue;
			}
			if (err)
				break;
			(*reaped)++;
		}
		free(found);
		if (err)
			return err;
	}
	return 0;
}

/*
 * Free blocks for statfs.  A group this node holds counts what it has in
 * memory, at once (a node sees its own allocations immediately); any other
 * group its home header, current up to its holder's last checkpoint
 * (docs/LOCKING.md "statfs"), read from the device at most once a second.
 */
uint64_t rg_statfs_free(struct shoal_fs *fs)
{
	uint64_t now = gl_now_ns(), t = 0;
	uint8_t *blk = NULL;
	int refresh;

	if (!fs->fs_cluster)
		return rg_free_total(fs);
	/* the device reads of other nodes' groups are what is kept for a
	 * second; a group this node holds always counts what it is now, so
	 * the node's own allocations show at once */
	refresh = !fs->fs_statfs_ns || now - fs->fs_statfs_ns >= 1000000000ull;
	if (refresh)
		blk = malloc(fs->fs_bsize);
	for (uint32_t i = 0; i < fs->fs_rgcount; i++) {
		struct shoal_rgd *rd = &fs->fs_rgds[i];
		struct shoal_rg *rg = (void *)blk;
		if (rg_usable(fs, rd)) {
			t += rg_current_free(fs, rd);
			rd->rd_statfs_valid = 0; /* held now: read it again once given up */
			continue;
		}
		/* groups another node holds: their home copy, current up to
		 * that node's last checkpoint (docs/LOCKING.md "statfs") */
		if (refresh) {
			if (!blk ||
			    dev_read(fs->fs_dev, blk, fs->fs_bsize, rd->rd_addr << fs->fs_bshift) ||
			    meta_check(blk, fs->fs_bsize, SHOAL_MT_RG, rd->rd_addr) ||
			    rg->rg_free > rd->rd_length)
				rd->rd_statfs_free = rd->rd_free;
			else
				rd->rd_statfs_free = rg->rg_free;
			rd->rd_statfs_valid = 1;
		}
		/* given up since the last read: what this node left in it */
		t += rd->rd_statfs_valid ? rd->rd_statfs_free : rd->rd_free;
	}
	if (refresh) {
		free(blk);
		fs->fs_statfs_ns = now;
	}
	return t;
}

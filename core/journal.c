/*
 * journal.c - the node's journal: transactions, commit, checkpoint, replay.
 *
 * Metadata changes go into one running transaction (j_trans): an operation
 * calls trans_begin() with the number of blocks it may dirty (and
 * trans_begin_alloc() also with how many it may allocate), then
 * trans_add() on each buffer before changing it.  jnl_commit() writes the
 * transaction to the log as descriptors + block images and flushes once;
 * jnl_checkpoint() writes logged buffers home and moves the tail.
 *
 * Invariants:
 *  (1) a transaction is durable only as a whole: replay accepts it only if
 *      every descriptor and every image checksum is valid (FORMAT.md);
 *  (2) ordered data: data written into newly allocated blocks is flushed
 *      before the commit that makes metadata point to it (j_ordered);
 *  (3) the log never overwrites a transaction that is not checkpointed:
 *      j_used counts blocks from tail to head, and a commit that would not
 *      fit checkpoints first;
 *  (4) the journal head on disk is durable before log space before its
 *      tail is reused (checkpoint writes it, then flushes);
 *  (5) a freed block is not reused before the transaction that freed it is
 *      checkpointed (rg_release_pending), so replay never overwrites it;
 *  (6) fast commit (R2): while the running transaction holds only dinodes
 *      that were read, not made, each keeps b_snap, its image as last
 *      logged (by a full commit or a fast commit); jnl_fast_commit() logs
 *      what differs from b_snap, for all of them, in one block with one
 *      flush, then takes the snapshots again; with them go the granules
 *      of the dirty-block index (dindex.c) changed since the last one, as
 *      data records.  Replay holds a transaction's fast-commit blocks back
 *      and applies them, in log order, only when the transaction's own
 *      commit is not in the log: the commit supersedes them.  A
 *      fast-commit block never follows data written into new blocks
 *      (j_ordered), so ordered data holds;
 *  (7) a full commit first writes every block of the dirty-block index
 *      home and flushes before its log blocks (as ordered data), so the
 *      data its superseded fast commits carried is on the device first,
 *      and no data record older than a commit is ever replayed over newer
 *      data written in place after it.
 *
 * Position p of the log (1 .. j_blocks-1) is block j_addr + p.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "crc32c.h"
#include "internal.h"
#include "lock.h"
#include "meta.h"

static uint32_t log_next(struct shoal_journal *j, uint32_t pos)
{
	return pos + 1 >= j->j_blocks ? 1 : pos + 1;
}

static uint32_t log_capacity(struct shoal_journal *j)
{
	return j->j_blocks - 1;
}

static uint32_t desc_count(struct shoal_fs *fs, uint32_t nblocks)
{
	uint32_t per = SHOAL_LDESC_TAGS(fs->fs_bsize);
	return nblocks ? (nblocks + per - 1) / per : 0;
}

static int jhead_write(struct shoal_fs *fs, struct shoal_journal *j, uint32_t flags)
{
	uint8_t *blk = calloc(1, fs->fs_bsize);
	struct shoal_jhead *jh = (void *)blk;
	int err;

	if (!blk)
		return -ENOMEM;
	jh->jh_index = j->j_index;
	jh->jh_flags = flags;
	jh->jh_tail = j->j_tail;
	jh->jh_tail_seq = j->j_tail_seq;
	jh->jh_time = time(NULL);
	snprintf(jh->jh_node, sizeof(jh->jh_node), "%s", fs->fs_node);
	meta_seal(blk, fs->fs_bsize, SHOAL_MT_JHEAD, j->j_addr, 0);
	err = dev_write(fs->fs_dev, blk, fs->fs_bsize, j->j_addr << fs->fs_bshift);
	free(blk);
	return err;
}

static int jhead_read(struct shoal_fs *fs, uint32_t index, struct shoal_jhead *out,
		      uint64_t *addr)
{
	uint8_t *blk;
	int err;

	if (index >= fs->fs_sb.sb_jcount)
		return -EINVAL;
	*addr = fs->fs_sb.sb_jfirst + (uint64_t)index * fs->fs_sb.sb_jblocks;
	blk = malloc(fs->fs_bsize);
	if (!blk)
		return -ENOMEM;
	err = dev_read(fs->fs_dev, blk, fs->fs_bsize, *addr << fs->fs_bshift);
	if (!err && meta_check(blk, fs->fs_bsize, SHOAL_MT_JHEAD, *addr))
		err = fs_corrupt(fs, *addr, "journal head");
	if (!err) {
		memcpy(out, blk, sizeof(*out));
		if (out->jh_tail < 1 || out->jh_tail >= fs->fs_sb.sb_jblocks ||
		    out->jh_index != index)
			err = fs_corrupt(fs, *addr, "journal head tail out of range");
	}
	free(blk);
	return err;
}

int jnl_load(struct shoal_fs *fs, uint32_t index)
{
	struct shoal_journal *j = &fs->fs_j;
	struct shoal_jhead jh;
	uint64_t addr;
	int err = jhead_read(fs, index, &jh, &addr);

	if (err)
		return err;
	j->j_index = index;
	j->j_addr = addr;
	j->j_blocks = fs->fs_sb.sb_jblocks;
	j->j_tail = j->j_head = (uint32_t)jh.jh_tail;
	j->j_tail_seq = j->j_seq = jh.jh_tail_seq;
	j->j_used = 0;
	j->j_ckpt.b_cnext = j->j_ckpt.b_cprev = &j->j_ckpt;
	j->j_fc_on = (fs->fs_sb.sb_feat_incompat & SHOAL_FEAT_INCOMPAT_FASTCOMMIT) != 0;
	j->j_fc_ok = j->j_fc_on;
	return 0;
}

int jnl_mark_clean(struct shoal_fs *fs, int clean)
{
	int err = jhead_write(fs, &fs->fs_j, clean ? SHOAL_JH_CLEAN : 0);
	if (!err)
		err = dev_flush(fs->fs_dev);
	return err;
}

/* Fast-commit replay (meta_fc_replay) on the device. */
static int fc_read(void *arg, uint64_t blkno, void *buf)
{
	struct shoal_fs *fs = arg;
	return dev_read(fs->fs_dev, buf, fs->fs_bsize, blkno << fs->fs_bshift);
}

static int fc_write(void *arg, uint64_t blkno, const void *buf)
{
	struct shoal_fs *fs = arg;
	return dev_write(fs->fs_dev, buf, fs->fs_bsize, blkno << fs->fs_bshift);
}

static void fc_bad(void *arg, uint64_t blkno)
{
	fs_corrupt(arg, blkno, "fast-commit replay: home block is not valid");
}

/*
 * Replay: collect one transaction at a time in memory, and write it home
 * only once all of it has been validated.  Replaying twice writes the same
 * images again, so a crash during recovery is harmless.  A log block that
 * cannot be read fails the replay with the read's error and leaves the
 * journal head as it was: the log may go on past it, and taking the error
 * for the end of the log would lose what was committed there.
 */
int jnl_recover(struct shoal_fs *fs, uint32_t index, uint32_t *replayed)
{
	struct shoal_journal jt = {0};
	struct shoal_jhead jh;
	uint32_t bs = fs->fs_bsize, cap, pos, head, scanned = 0, ntx = 0, nfc = 0;
	uint64_t addr, seq, *homes = NULL;
	uint8_t *imgs = NULL, *desc = NULL;
	struct meta_fc_held held = {0};
	int fcdata = (fs->fs_sb.sb_feat_incompat & SHOAL_FEAT_INCOMPAT_FCDATA) != 0;
	int err;

	err = jhead_read(fs, index, &jh, &addr);
	if (err)
		return err;
	jt.j_blocks = fs->fs_sb.sb_jblocks;
	cap = log_capacity(&jt);
	homes = malloc(sizeof(*homes) * cap);
	imgs = malloc((size_t)cap * bs);
	desc = malloc(bs);
	if (!homes || !imgs || !desc) {
		err = -ENOMEM;
		goto out_free;
	}
	head = pos = (uint32_t)jh.jh_tail;
	seq = jh.jh_tail_seq;
	for (;;) {
		uint32_t used = 0, n = 0;
		int complete = 0;

		while (!complete) {
			struct shoal_ldesc *ld = (void *)desc;
			struct shoal_ltag *tags = (void *)(desc + SHOAL_LDESC_TAG_OFF);
			uint64_t daddr = addr + pos;

			if (scanned + used >= cap)
				goto replay_done;
			/* a block that cannot be read is no end of the log: what
			 * follows it may be committed (the head stays as it is) */
			err = dev_read(fs->fs_dev, desc, bs, daddr << fs->fs_bshift);
			if (err)
				goto out_free;
			if (used == 0 && ld->ld_header.mh_type == SHOAL_MT_LFAST) {
				/* a fast-commit block of transaction seq (6): held
				 * back until we know whether its commit follows */
				if (meta_fc_valid(desc, bs, daddr, seq, fs->fs_sb.sb_rgfirst,
						  fs->fs_sb.sb_blocks - 1, fcdata))
					goto replay_done;
				err = meta_fc_hold(&held, pos);
				if (err)
					goto out_free;
				pos = log_next(&jt, pos);
				scanned++;
				head = pos;
				continue;
			}
			if (meta_check(desc, bs, SHOAL_MT_LDESC, daddr) || ld->ld_header.mh_seq != seq ||
			    ld->ld_count > SHOAL_LDESC_TAGS(bs) || ld->ld_count == 0)
				goto replay_done;
			pos = log_next(&jt, pos);
			used++;
			for (uint32_t i = 0; i < ld->ld_count; i++) {
				uint8_t *img = imgs + (size_t)n * bs;
				if (scanned + used >= cap)
					goto replay_done;
				err = dev_read(fs->fs_dev, img, bs, (addr + pos) << fs->fs_bshift);
				if (err)
					goto out_free;
				/* a home in the groups: the superblocks, journals and
				 * heartbeat blocks are never logged (FORMAT.md 11.2) */
				if (crc32c(0, img, bs) != tags[i].lt_crc ||
				    tags[i].lt_blkno < fs->fs_sb.sb_rgfirst ||
				    tags[i].lt_blkno >= fs->fs_sb.sb_blocks - 1)
					goto replay_done;
				homes[n++] = tags[i].lt_blkno;
				pos = log_next(&jt, pos);
				used++;
			}
			complete = (ld->ld_flags & SHOAL_LD_LAST) != 0;
		}
		for (uint32_t i = 0; i < n; i++) {
			err = dev_write(fs->fs_dev, imgs + (size_t)i * bs, bs, homes[i] << fs->fs_bshift);
			if (err)
				goto out_free;
		}
		scanned += used;
		head = pos;
		seq++;
		ntx++;
		held.fh_n = 0; /* superseded by the commit just replayed */
	}
replay_done:
	/* the last transaction's commit is not in the log: its fast commits count */
	for (uint32_t i = 0; i < held.fh_n; i++) {
		err = dev_read(fs->fs_dev, desc, bs, (addr + held.fh_pos[i]) << fs->fs_bshift);
		if (!err)
			err = meta_fc_replay(desc, bs, imgs,
					     &(struct meta_fc_io){fc_read, fc_write, fc_bad, fs});
		if (err)
			goto out_free;
		nfc++;
	}
	if (ntx + nfc > 0) {
		struct shoal_journal jw = {.j_index = index, .j_addr = addr, .j_tail = head,
					   .j_tail_seq = seq};
		err = dev_flush(fs->fs_dev);
		if (!err)
			err = jhead_write(fs, &jw, 0);
		if (!err)
			err = dev_flush(fs->fs_dev);
	}
out_free:
	free(held.fh_pos);
	free(homes);
	free(imgs);
	free(desc);
	if (replayed)
		*replayed = ntx + nfc;
	return err;
}

static uint32_t trans_max(struct shoal_journal *j)
{
	return log_capacity(j) / 4;
}

/*
 * Resource-group headers an operation that frees a whole file may dirty:
 * one per group, but never more than half a transaction, so that deleting
 * a small file on a filesystem of many groups is not refused.  (A file
 * spread over more groups than that is a known limit: see README.md.)
 */
uint32_t trans_rg_blocks(struct shoal_fs *fs)
{
	uint32_t half = trans_max(&fs->fs_j) / 2;
	return fs->fs_rgcount < half ? fs->fs_rgcount : half;
}

int trans_begin(struct shoal_fs *fs, uint32_t nblocks)
{
	return trans_begin_alloc(fs, nblocks, 0);
}

int trans_begin_alloc(struct shoal_fs *fs, uint32_t nblocks, uint64_t nalloc)
{
	struct shoal_journal *j = &fs->fs_j;
	uint64_t pend;
	uint32_t need;
	int err;

	if (fs_is_ro(fs))
		return -EROFS;
	op_changed(0); /* a consistent point (invariant of every caller) */
	if (nalloc) { /* cluster: groups of our own to allocate from */
		err = rg_reserve(fs, nalloc);
		if (err)
			return err;
	}
	/*
	 * Blocks freed since the last checkpoint may not be reused yet (5);
	 * when what is free apart from them is short of what the operation may
	 * allocate, checkpoint now, so that it does not fail with ENOSPC while
	 * df shows room.
	 */
	pend = nalloc ? rg_pending_total(fs) : 0;
	if (pend && rg_free_total(fs) - pend < nalloc + 64) {
		err = jnl_checkpoint(fs);
		if (err)
			return err;
	}
	/* an operation adds at most three entries: a block unstuffed and the
	 * two a write of at most one block touches (file.c (4), (5)) */
	if (fs->fs_dx.dx_count + 3 > fs->fs_dx.dx_max) {
		err = jnl_commit(fs); /* dindex.c (4): its blocks go home */
		if (err)
			return err;
	}
	need = j->j_tcount + nblocks;
	need += desc_count(fs, need);
	if (need > trans_max(j) && j->j_tcount) {
		err = jnl_commit(fs);
		if (err)
			return err;
		need = nblocks + desc_count(fs, nblocks);
	}
	if (need > trans_max(j))
		return -EFBIG; /* one operation larger than a quarter of the log */
	if (j->j_used + need > log_capacity(j)) {
		err = jnl_checkpoint(fs);
		if (err)
			return err;
	}
	return 0;
}

/* Transactions larger than this are committed in full (6). */
#define FC_MAX_BUFS 32

void trans_add(struct shoal_fs *fs, struct shoal_buf *b)
{
	struct shoal_journal *j = &fs->fs_j;

	op_changed(1);
	j->j_mod++;
	if (b->b_flags & BUF_DIRTY)
		return;
	if (j->j_fc_ok) {
		/*
		 * The snapshot must be the image as last logged or read: its
		 * mh_crc still matching says nothing changed it in memory
		 * before this trans_add (a caller that sets a field first, or
		 * an atime kept in memory), else this transaction is committed
		 * in full.
		 */
		const struct shoal_mh *mh = (const void *)b->b_data;
		if ((b->b_flags & (BUF_NEW | BUF_STALE)) || mh->mh_type != SHOAL_MT_DINODE ||
		    j->j_tcount >= FC_MAX_BUFS || meta_crc(b->b_data, fs->fs_bsize) != mh->mh_crc ||
		    !(b->b_snap = malloc(fs->fs_bsize)))
			j->j_fc_ok = 0;
		else
			memcpy(b->b_snap, b->b_data, fs->fs_bsize);
	}
	b->b_flags |= BUF_DIRTY;
	b->b_ref++; /* the transaction's reference; b_ref > 0 so not on the LRU */
	b->b_tnext = j->j_trans;
	j->j_trans = b;
	j->j_tcount++;
}

static void ckpt_add(struct shoal_journal *j, struct shoal_buf *b)
{
	b->b_cnext = &j->j_ckpt;
	b->b_cprev = j->j_ckpt.b_cprev;
	j->j_ckpt.b_cprev->b_cnext = b;
	j->j_ckpt.b_cprev = b;
	j->j_ckpt_count++;
}

static void ckpt_del(struct shoal_journal *j, struct shoal_buf *b)
{
	b->b_cprev->b_cnext = b->b_cnext;
	b->b_cnext->b_cprev = b->b_cprev;
	b->b_cnext = b->b_cprev = NULL;
	j->j_ckpt_count--;
}

/* Write nblk blocks from buf to the log starting at position pos. */
static int log_write(struct shoal_fs *fs, struct shoal_journal *j, uint32_t pos,
		     const uint8_t *buf, uint32_t nblk)
{
	while (nblk) {
		uint32_t run = j->j_blocks - pos;
		if (run > nblk)
			run = nblk;
		int err = dev_write(fs->fs_dev, buf, (size_t)run * fs->fs_bsize,
				    (j->j_addr + pos) << fs->fs_bshift);
		if (err)
			return err;
		buf += (size_t)run * fs->fs_bsize;
		nblk -= run;
		pos = pos + run >= j->j_blocks ? 1 : pos + run;
	}
	return 0;
}

/*
 * A queued data write failed (dev.c (5)): no transaction may be logged on
 * top of it (it could name blocks whose data never landed), so the mount
 * stops here (super.c (2)).  0 or the write's error.
 */
int jnl_wb_check(struct shoal_fs *fs)
{
	int err;

	/* every queued write is done or failed (all are queued under
	 * fs_lock, which the caller holds); nothing queued: no wait */
	dev_wait_range(fs->fs_dev, 0, UINT64_MAX);
	err = dev_wb_error(fs->fs_dev);
	if (err)
		fs_error(fs, "queued data write failed: %s", strerror(-err));
	return err;
}

int jnl_commit(struct shoal_fs *fs)
{
	struct shoal_journal *j = &fs->fs_j;
	uint32_t bs = fs->fs_bsize, per = SHOAL_LDESC_TAGS(bs), live = 0, ndesc, total, k;
	struct shoal_buf *b, *next, **list;
	uint8_t *log;
	int err;

	if (j->j_tcount == 0 && !fs->fs_dx.dx_count)
		return 0;
	if (fs_is_ro(fs))
		return -EROFS;
	err = jnl_wb_check(fs);
	if (err)
		return err;
	if (fs->fs_dx.dx_count) {
		/* (7): data the fast commits carry goes home first, flushed
		 * before the commit that supersedes them */
		err = dx_writeback(fs);
		if (err) {
			fs_error(fs, "writeback of logged data failed: %s", strerror(-err));
			return err;
		}
		j->j_ordered = 1;
	}
	if (j->j_tcount == 0)
		return 0;
	list = malloc(sizeof(*list) * j->j_tcount);
	if (!list)
		return -ENOMEM;
	for (b = j->j_trans; b; b = b->b_tnext)
		if (!(b->b_flags & BUF_STALE))
			list[live++] = b;
	ndesc = desc_count(fs, live);
	total = ndesc + live;
	log = NULL;
	err = 0;
	if (live) {
		log = malloc((size_t)total * bs);
		if (!log) {
			free(list);
			return -ENOMEM;
		}
		k = 0;
		for (uint32_t d = 0; d < ndesc; d++) {
			uint8_t *dblk = log + (size_t)k * bs;
			struct shoal_ldesc *ld = (void *)dblk;
			struct shoal_ltag *tags = (void *)(dblk + SHOAL_LDESC_TAG_OFF);
			uint32_t first = d * per, cnt = live - first < per ? live - first : per;
			uint32_t dpos = (j->j_head + k - 1) % log_capacity(j) + 1;

			memset(dblk, 0, bs);
			ld->ld_count = cnt;
			ld->ld_flags = d == ndesc - 1 ? SHOAL_LD_LAST : 0;
			ld->ld_time = time(NULL);
			k++;
			for (uint32_t i = 0; i < cnt; i++, k++) {
				struct shoal_buf *lb = list[first + i];
				uint8_t *img = log + (size_t)k * bs;
				struct shoal_mh *mh = (void *)lb->b_data;
				mh->mh_seq = j->j_seq;
				meta_update_crc(lb->b_data, bs);
				memcpy(img, lb->b_data, bs);
				tags[i].lt_blkno = lb->b_blkno;
				tags[i].lt_crc = crc32c(0, img, bs);
			}
			meta_seal(dblk, bs, SHOAL_MT_LDESC, j->j_addr + dpos, j->j_seq);
		}
		if (j->j_ordered)
			err = dev_flush(fs->fs_dev);
		if (!err)
			err = log_write(fs, j, j->j_head, log, total);
		if (!err)
			err = dev_flush(fs->fs_dev);
		free(log);
		if (err) {
			free(list);
			fs_error(fs, "journal commit failed: %s", strerror(-err));
			return err;
		}
		j->j_ordered = 0;
	}
	for (b = j->j_trans; b; b = next) {
		next = b->b_tnext;
		b->b_tnext = NULL;
		b->b_flags &= ~(BUF_DIRTY | BUF_NEW);
		free(b->b_snap);
		b->b_snap = NULL;
		if (b->b_flags & BUF_STALE) {
			if (b->b_flags & BUF_PINNED) {
				b->b_flags &= ~BUF_PINNED;
				ckpt_del(j, b);
				buf_put(fs, b);
			}
		} else if (!(b->b_flags & BUF_PINNED)) {
			b->b_flags |= BUF_PINNED;
			b->b_seq = j->j_seq;
			ckpt_add(j, b);
			continue; /* the transaction's reference becomes the checkpoint's */
		}
		b->b_seq = j->j_seq;
		buf_put(fs, b);
	}
	j->j_trans = NULL;
	j->j_tcount = 0;
	j->j_fc_ok = j->j_fc_on;
	free(list);
	if (total == 0)
		return 0; /* everything was freed again: no sequence number used */
	j->j_head = (j->j_head + total - 1) % log_capacity(j) + 1;
	j->j_used += total;
	j->j_seq++;
	fs->fs_ctr.sc_commits++;
	fs->fs_ctr.sc_commit_blocks += total;
	return 0;
}

/* Append one record to a fast-commit block; -ENOSPC: it does not fit. */
static int fc_put(struct shoal_fs *fs, uint8_t *blk, uint64_t blkno, uint32_t off, uint32_t len,
		  const uint8_t *bytes, uint32_t flags)
{
	struct shoal_lfast *fc = (void *)blk;
	struct shoal_lfrec *r;

	if (len > 65535 || SHOAL_LFAST_REC_OFF + fc->fc_bytes + SHOAL_LFREC_SIZE(len) > fs->fs_bsize)
		return -ENOSPC;
	r = (void *)(blk + SHOAL_LFAST_REC_OFF + fc->fc_bytes);
	r->fr_blkno = blkno;
	r->fr_off = (uint16_t)off;
	r->fr_len = (uint16_t)len;
	r->fr_flags = flags;
	memcpy(r + 1, bytes, len);
	fc->fc_bytes += SHOAL_LFREC_SIZE(len);
	fc->fc_count++;
	return 0;
}

/*
 * Append the granules of the index changed since the last fast commit:
 * only the entries on the unlogged list are visited, not the whole index.
 */
static int fc_add_data(struct shoal_fs *fs, uint8_t *blk)
{
	struct dx_index *dx = &fs->fs_dx;
	uint32_t g = dx->dx_gshift, ng = fs->fs_bsize >> g;

	for (struct dx_entry *e = dx->dx_unlogged.de_unext; e != &dx->dx_unlogged;
	     e = e->de_unext) {
		fs->fs_ctr.sc_fc_visited++;
		for (uint32_t i = 0; i < ng;) {
			uint32_t k = i;
			if (!(e->de_unlogged >> i & 1)) {
				i++;
				continue;
			}
			while (k < ng && (e->de_unlogged >> k & 1))
				k++;
			int err = fc_put(fs, blk, e->de_blkno, i << g, (k - i) << g,
					 e->de_data + (i << g), SHOAL_FR_DATA);
			if (err)
				return err;
			i = k;
		}
	}
	return 0;
}

/*
 * Append to a fast-commit block the ranges where b differs from its
 * snapshot (the header excluded: replay recomputes the CRC); runs of fewer
 * than 16 equal bytes are carried inside a range.  -ENOSPC: they do not fit.
 */
static int fc_add_ranges(struct shoal_fs *fs, uint8_t *blk, const struct shoal_buf *b)
{
	uint32_t bs = fs->fs_bsize, i = sizeof(struct shoal_mh);

	while (i < bs) {
		if (b->b_data[i] == b->b_snap[i]) {
			i++;
			continue;
		}
		uint32_t last = i;
		for (uint32_t k = i + 1; k < bs && k - last <= 16 && k - i < 65535; k++)
			if (b->b_data[k] != b->b_snap[k])
				last = k;
		int err = fc_put(fs, blk, b->b_blkno, i, last - i + 1, b->b_data + i, 0);
		if (err)
			return err;
		i = last + 1;
	}
	return 0;
}

static int jnl_fast_commit(struct shoal_fs *fs)
{
	struct shoal_journal *j = &fs->fs_j;
	uint32_t need = j->j_tcount + desc_count(fs, j->j_tcount) + 1;
	struct shoal_buf *b;
	uint8_t *blk;
	int err = 0;

	if (!j->j_fc_ok || j->j_ordered || !j->j_tcount || fs_is_ro(fs))
		return -EAGAIN;
	if (j->j_used + need > log_capacity(j))
		return -EAGAIN; /* leave room for the full commit after it */
	blk = calloc(1, fs->fs_bsize);
	if (!blk)
		return -EAGAIN;
	for (b = j->j_trans; b && !err; b = b->b_tnext)
		err = !b->b_snap || (b->b_flags & BUF_STALE) ? -EAGAIN : fc_add_ranges(fs, blk, b);
	if (!err)
		err = fc_add_data(fs, blk);
	if (err) {
		free(blk);
		return -EAGAIN;
	}
	if (((struct shoal_lfast *)blk)->fc_count) {
		struct shoal_lfast *fc = (void *)blk;
		uint32_t span = meta_fc_span(fc->fc_bytes, fs->fs_bsize);
		fc->fc_time = time(NULL);
		/* only the span is written (and sealed): FORMAT.md 11.4 */
		meta_seal(blk, span, SHOAL_MT_LFAST, j->j_addr + j->j_head, j->j_seq);
		err = dev_write_small(fs->fs_dev, blk, span, (j->j_addr + j->j_head) << fs->fs_bshift);
		if (!err)
			err = dev_flush(fs->fs_dev); /* covers data written before */
		if (err) {
			free(blk);
			fs_error(fs, "journal fast commit failed: %s", strerror(-err));
			return err;
		}
		j->j_head = log_next(j, j->j_head);
		j->j_used++;
		fs->fs_ctr.sc_fast_commits++;
		fs->fs_ctr.sc_commit_blocks++;
		/* the next fast commit logs what changes from here on */
		for (b = j->j_trans; b; b = b->b_tnext)
			memcpy(b->b_snap, b->b_data, fs->fs_bsize);
		dx_logged(fs);
	}
	free(blk);
	j->j_fc_mod = j->j_mod;
	return 0;
}

int jnl_durable(struct shoal_fs *fs, uint64_t seq, uint64_t mod)
{
	struct shoal_journal *j = &fs->fs_j;

	return !j->j_tcount || seq < j->j_seq || mod <= j->j_fc_mod;
}

int jnl_sync(struct shoal_fs *fs)
{
	struct shoal_journal *j = &fs->fs_j;
	int err;

	if (jnl_durable(fs, j->j_seq, j->j_mod))
		return 0; /* nothing, or fast-committed already */
	if (fs_is_ro(fs))
		return -EROFS;
	err = jnl_wb_check(fs);
	if (err)
		return err;
	err = jnl_fast_commit(fs);
	return err == -EAGAIN ? jnl_commit(fs) : err;
}

static int cmp_blkno(const void *a, const void *b)
{
	const struct shoal_buf *x = *(struct shoal_buf *const *)a;
	const struct shoal_buf *y = *(struct shoal_buf *const *)b;
	return x->b_blkno < y->b_blkno ? -1 : x->b_blkno > y->b_blkno;
}

int jnl_write_sorted(struct shoal_fs *fs, uint32_t n,
		     const uint8_t *(*item)(void *arg, uint32_t i, uint64_t *blkno), void *arg)
{
	const uint32_t maxrun = 256;
	uint32_t bs = fs->fs_bsize;
	uint8_t *stage = malloc((size_t)maxrun * bs);
	int err = 0;

	if (!stage)
		return -ENOMEM;
	for (uint32_t i = 0; i < n && !err;) {
		uint64_t first, blk = 0;
		const uint8_t *data = item(arg, i, &first);
		uint32_t run = 0;
		if (!data) {
			i++;
			continue;
		}
		do {
			memcpy(stage + (size_t)run * bs, data, bs);
			run++;
			data = i + run < n && run < maxrun ? item(arg, i + run, &blk) : NULL;
		} while (data && blk == first + run);
		err = dev_write(fs->fs_dev, stage, (size_t)run * bs, first << fs->fs_bshift);
		i += run;
	}
	free(stage);
	return err;
}

static const uint8_t *buf_item(void *arg, uint32_t i, uint64_t *blkno)
{
	struct shoal_buf *b = ((struct shoal_buf **)arg)[i];
	*blkno = b->b_blkno;
	return b->b_flags & BUF_STALE ? NULL : b->b_data;
}

/*
 * Write home and flush the buffers of the checkpoint list (of one metadata
 * type, or all with type 0), sorted, adjacent ones in one write; they stay
 * pinned.  *listp (malloc'd, sorted, *np of them) is the caller's to free.
 */
static int ckpt_write_home(struct shoal_fs *fs, uint16_t type, struct shoal_buf ***listp,
			   uint32_t *np)
{
	struct shoal_journal *j = &fs->fs_j;
	struct shoal_buf *b, **list;
	uint32_t n = 0;
	int err = 0;

	*listp = NULL;
	*np = 0;
	if (!j->j_ckpt_count)
		return 0;
	list = malloc(sizeof(*list) * j->j_ckpt_count);
	if (!list)
		return -ENOMEM;
	for (b = j->j_ckpt.b_cnext; b != &j->j_ckpt; b = b->b_cnext)
		if (!type || ((const struct shoal_mh *)b->b_data)->mh_type == type)
			list[n++] = b;
	qsort(list, n, sizeof(*list), cmp_blkno);
	if (n)
		err = jnl_write_sorted(fs, n, buf_item, list);
	if (!err && n)
		err = dev_flush(fs->fs_dev);
	*listp = list;
	*np = n;
	return err;
}

int jnl_write_home_type(struct shoal_fs *fs, uint16_t type)
{
	struct shoal_buf **list;
	uint32_t n;
	int err;

	/* only committed images: nothing may be changed in memory and not logged */
	if (fs_is_ro(fs) || fs->fs_j.j_tcount)
		return 0;
	err = ckpt_write_home(fs, type, &list, &n);
	free(list);
	return err;
}

int jnl_checkpoint(struct shoal_fs *fs)
{
	struct shoal_journal *j = &fs->fs_j;
	struct shoal_buf *b, **list = NULL;
	uint32_t n = 0;
	int err;

	err = jnl_commit(fs);
	if (err)
		return err;
	err = ckpt_write_home(fs, 0, &list, &n);
	if (err) {
		free(list);
		if (err != -ENOMEM)
			fs_error(fs, "checkpoint failed: %s", strerror(-err));
		return err;
	}
	j->j_tail = j->j_head;
	j->j_tail_seq = j->j_seq;
	j->j_used = 0;
	err = jhead_write(fs, j, 0);
	if (!err)
		err = dev_flush(fs->fs_dev);
	if (err) {
		free(list);
		fs_error(fs, "journal head update failed: %s", strerror(-err));
		return err;
	}
	for (uint32_t i = 0; i < n; i++) {
		b = list[i];
		b->b_flags &= ~BUF_PINNED;
		ckpt_del(j, b);
		buf_put(fs, b);
	}
	free(list);
	rg_release_pending(fs);
	fs->fs_ctr.sc_checkpoints++;
	return 0;
}

/* Drop the running transaction and the checkpoint list without writing
 * anything (unmount after an abort; a clean unmount has emptied both). */
void jnl_release(struct shoal_fs *fs)
{
	struct shoal_journal *j = &fs->fs_j;
	struct shoal_buf *b, *next;

	for (b = j->j_trans; b; b = next) {
		next = b->b_tnext;
		b->b_tnext = NULL;
		b->b_flags &= ~(BUF_DIRTY | BUF_NEW);
		free(b->b_snap);
		b->b_snap = NULL;
		buf_put(fs, b);
	}
	j->j_trans = NULL;
	j->j_tcount = 0;
	dx_drop_all(fs);
	while (j->j_ckpt.b_cnext && j->j_ckpt.b_cnext != &j->j_ckpt) {
		b = j->j_ckpt.b_cnext;
		b->b_flags &= ~BUF_PINNED;
		ckpt_del(j, b);
		buf_put(fs, b);
	}
}

/*
 * fsck_journal.c - pass 1b of fsck.shoal: journal heads and replay.
 *
 * Every journal head must be valid.  A journal whose head is not CLEAN, or
 * whose tail starts a valid transaction, needs recovery; that is what a
 * crash leaves behind, so it is reported as information, not as an error.
 * With -y its transactions are replayed home and the head is set CLEAN at
 * the new tail (the device was written: exit code 1); with -n they are
 * replayed into the read overlay (fsck.c), so the rest of the check sees
 * what the next mount will see, and the exit code does not change.
 *
 * Invariants:
 *  (1) a transaction is applied only after all of it (every descriptor and
 *      every image CRC) has been validated, by the rule of FORMAT.md 11.2,
 *      which is the rule core/journal.c replays by;
 *  (2) replay reads at most JB-1 log blocks per journal, so garbage can
 *      neither loop nor run away;
 *  (3) with -y the head moves only after the images are durable (flush,
 *      write head, flush), so an interrupted fsck replays again, harmlessly.
 */
#include "fsck.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "crc32c.h"
#include "meta.h"

struct jscan {
	uint64_t js_addr;   /* journal head block */
	uint32_t js_blocks; /* JB */
	uint32_t js_pos;    /* log position of the next transaction */
	uint64_t js_seq;    /* its expected sequence */
	uint32_t js_scanned; /* log blocks consumed by valid transactions */
	struct meta_fc_held js_held; /* fast-commit blocks of transaction js_seq */
};

static uint32_t log_next(const struct jscan *js, uint32_t pos)
{
	return pos + 1 >= js->js_blocks ? 1 : pos + 1;
}

/* Fast-commit replay (meta_fc_replay, FORMAT.md 11.4) through the overlay
 * under -n, onto the device under -y, as core/journal.c replays it. */
static int fc_read(void *arg, uint64_t blkno, void *buf)
{
	return blk_read(arg, blkno, buf);
}

static int fc_write(void *arg, uint64_t blkno, const void *buf)
{
	struct fsck *f = arg;
	int err = f->f_yes ? blk_write(f, blkno, buf) : ov_put(f, blkno, buf);
	if (err)
		fsck_operr(f, "journal replay", err);
	return err;
}

/*
 * Walk the transaction at js_pos (or the fast-commit block there).  With apply 0, validate it and return its
 * length in log blocks (0: not a valid transaction).  With apply 1, write
 * (or overlay) its images home.
 */
static int64_t tx_walk(struct fsck *f, struct jscan *js, uint8_t *desc, uint8_t *img, int apply)
{
	struct shoal_ldesc *ld = (void *)desc;
	const struct shoal_ltag *tags = (const void *)(desc + SHOAL_LDESC_TAG_OFF);
	uint32_t cap = js->js_blocks - 1, pos = js->js_pos, used = 0;
	int last = 0;

	while (!last) {
		uint64_t daddr = js->js_addr + pos;

		if (js->js_scanned + used >= cap)
			return 0;
		if (blk_read(f, daddr, desc))
			return -EIO;
		if (used == 0 && ld->ld_header.mh_type == SHOAL_MT_LFAST) {
			/* a fast-commit block: one log block, the sequence
			 * stays; applied only if no commit of it follows */
			if (meta_fc_valid(desc, f->f_bsize, daddr, js->js_seq, f->f_sb.sb_rgfirst,
					  f->f_blocks - 1,
					  (f->f_sb.sb_feat_incompat & SHOAL_FEAT_INCOMPAT_FCDATA) != 0))
				return 0;
			if (apply) {
				int err = meta_fc_hold(&js->js_held, pos);
				if (err) {
					fsck_operr(f, "journal replay", err);
					return err;
				}
				js->js_pos = log_next(js, pos);
				js->js_scanned++;
			}
			return 1;
		}
		if (meta_check(desc, f->f_bsize, SHOAL_MT_LDESC, daddr) ||
		    ld->ld_header.mh_seq != js->js_seq || ld->ld_count == 0 ||
		    ld->ld_count > SHOAL_LDESC_TAGS(f->f_bsize))
			return 0;
		pos = log_next(js, pos);
		used++;
		for (uint32_t i = 0; i < ld->ld_count; i++) {
			if (js->js_scanned + used >= cap)
				return 0;
			if (blk_read(f, js->js_addr + pos, img))
				return -EIO;
			if (tags[i].lt_blkno < f->f_sb.sb_rgfirst || tags[i].lt_blkno >= f->f_blocks - 1 ||
			    crc32c(0, img, f->f_bsize) != tags[i].lt_crc)
				return 0;
			if (apply) {
				int err = f->f_yes ? blk_write(f, tags[i].lt_blkno, img)
						   : ov_put(f, tags[i].lt_blkno, img);
				if (err) {
					fsck_operr(f, "journal replay", err);
					return err;
				}
			}
			pos = log_next(js, pos);
			used++;
		}
		last = (ld->ld_flags & SHOAL_LD_LAST) != 0;
	}
	if (apply) {
		js->js_pos = pos;
		js->js_seq++;
		js->js_scanned += used;
		js->js_held.fh_n = 0; /* superseded by this commit */
	}
	return used;
}

/* The fast-commit blocks of a transaction whose commit is not in the log,
 * in log order (a bad home block is left to the checks of pass 2). */
static int fc_apply_held(struct fsck *f, struct jscan *js, uint8_t *desc, uint8_t *img)
{
	for (uint32_t i = 0; i < js->js_held.fh_n; i++) {
		int err = blk_read(f, js->js_addr + js->js_held.fh_pos[i], desc);
		if (!err)
			err = meta_fc_replay(desc, f->f_bsize, img,
					     &(struct meta_fc_io){fc_read, fc_write, NULL, f});
		if (err)
			return err;
	}
	return 0;
}

static int jhead_write(struct fsck *f, uint32_t j, uint64_t addr, uint64_t tail, uint64_t seq,
		       const char *node)
{
	uint8_t *b = blk_alloc(f);
	struct shoal_jhead *jh = (void *)b;
	int err;

	if (!b)
		return -ENOMEM;
	jh->jh_index = j;
	jh->jh_flags = SHOAL_JH_CLEAN;
	jh->jh_tail = tail;
	jh->jh_tail_seq = seq;
	jh->jh_time = time(NULL);
	if (node)
		memcpy(jh->jh_node, node, sizeof(jh->jh_node));
	meta_seal(b, f->f_bsize, SHOAL_MT_JHEAD, addr, 0);
	err = blk_write(f, addr, b);
	free(b);
	return err;
}

/* A head we cannot read is rewritten as mkfs writes it: clean, tail 1, a
 * fresh random sequence so that nothing stale in the log replays. */
static int jhead_reset(struct fsck *f, uint32_t j, uint64_t addr)
{
	uint64_t seq = 0;

	while (seq == 0) {
		if (getrandom(&seq, sizeof(seq), 0) != sizeof(seq))
			seq = (uint64_t)time(NULL) * 2654435761u;
		seq &= (1ull << 48) - 1;
	}
	return jhead_write(f, j, addr, 1, seq, NULL);
}

static int journal_check(struct fsck *f, uint32_t j, uint8_t *head, uint8_t *desc, uint8_t *img)
{
	struct shoal_jhead *jh = (void *)head;
	struct jscan js = { 0 };
	uint32_t ntx = 0;
	int err;

	js.js_addr = f->f_sb.sb_jfirst + (uint64_t)j * f->f_sb.sb_jblocks;
	js.js_blocks = f->f_sb.sb_jblocks;
	err = blk_read(f, js.js_addr, head);
	if (err)
		return err;
	if (meta_check(head, f->f_bsize, SHOAL_MT_JHEAD, js.js_addr) || jh->jh_index != j ||
	    jh->jh_tail < 1 || jh->jh_tail >= js.js_blocks) {
		if (fsck_problem(f, 1,
				 "journal %u: head at block %llu is invalid (anything it held "
				 "cannot be replayed)",
				 j, (unsigned long long)js.js_addr))
			return jhead_reset(f, j, js.js_addr);
		return 0;
	}
	js.js_pos = (uint32_t)jh->jh_tail;
	js.js_seq = jh->jh_tail_seq;
	for (;;) {
		int64_t n = tx_walk(f, &js, desc, img, 0);
		if (n < 0) {
			free(js.js_held.fh_pos);
			return (int)n;
		}
		if (n == 0)
			break;
		n = tx_walk(f, &js, desc, img, 1);
		if (n <= 0) {
			free(js.js_held.fh_pos);
			return n < 0 ? (int)n : -EIO; /* the log changed under us */
		}
		ntx++;
	}
	err = fc_apply_held(f, &js, desc, img);
	free(js.js_held.fh_pos);
	if (err)
		return err;
	if (ntx == 0 && (jh->jh_flags & SHOAL_JH_CLEAN))
		return 0;
	if (!f->f_yes || f->f_ro_feat) {
		if (ntx)
			fsck_info(f,
				  "journal %u needs recovery (%u transactions, %u log blocks); "
				  "checking the filesystem as replayed",
				  j, ntx, js.js_scanned);
		else
			fsck_info(f, "journal %u needs recovery (not unmounted cleanly; no "
				     "transactions to replay)",
				  j);
		return 0;
	}
	fsck_info(f, "journal %u: recovered: replayed %u transactions (%u log blocks), marked clean",
		  j, ntx, js.js_scanned);
	err = dev_flush(f->f_dev);
	if (err) {
		fsck_operr(f, "flush", err);
		return err;
	}
	err = jhead_write(f, j, js.js_addr, js.js_pos, js.js_seq, jh->jh_node);
	if (!err) {
		err = dev_flush(f->f_dev);
		if (err)
			fsck_operr(f, "flush", err);
	}
	return err;
}

int fsck_journals(struct fsck *f)
{
	uint8_t *head = blk_alloc(f), *desc = blk_alloc(f), *img = blk_alloc(f);
	int err = -ENOMEM;

	if (!head || !desc || !img)
		goto out;
	err = 0;
	for (uint32_t j = 0; j < f->f_sb.sb_jcount && !err; j++)
		err = journal_check(f, j, head, desc, img);
out:
	free(head);
	free(desc);
	free(img);
	return err;
}

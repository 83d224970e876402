/*
 * fsck_rg.c - resource groups for fsck.shoal: loading the headers and the
 * disk bitmaps (pass 1c), the found map that the walk claims blocks in, the
 * scan for dinodes the tree does not reach (pass 3), allocation for repairs
 * (pass 5), and the comparison and rebuild of the bitmaps (pass 6).
 *
 * Two 2-bit maps cover every block of the filesystem: f_dmap holds what the
 * bitmaps on disk say, f_fmap what the walk found.  Only blocks inside a
 * group's covered range are ever claimed.
 *
 * Invariants:
 *  (1) the layout (header address, rg_data0, rg_length) comes from the
 *      superblock, never from the header: a header that disagrees is wrong;
 *  (2) a group whose header fails its checks has an untrusted bitmap: its
 *      blocks are all scanned for dinodes in pass 3, and the header is
 *      rebuilt from the found map in pass 6;
 *  (3) fsck_claim() gives each block to one owner only: a second claim is
 *      -EEXIST and the caller drops that reference;
 *  (4) fsck_alloc() returns blocks that are FREE in the found map (and,
 *      when possible, in the disk bitmap too), and is used only after every
 *      claim has been made.
 */
#include "fsck.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meta.h"

static const char *state_name(int s)
{
	static const char *const names[] = { "free", "data", "unlinked", "dinode" };
	return names[s & 3];
}

int fsck_covered(struct fsck *f, uint64_t blkno)
{
	uint64_t rel, g, off;

	if (blkno < f->f_sb.sb_rgfirst || blkno >= f->f_blocks)
		return 0;
	rel = blkno - f->f_sb.sb_rgfirst;
	g = rel / f->f_sb.sb_rgblocks;
	off = rel % f->f_sb.sb_rgblocks;
	return g < f->f_rgcount && off >= 1 && off - 1 < f->f_rgs[g].fr_length;
}

int fsck_claim(struct fsck *f, uint64_t blkno, int state)
{
	if (map_get(f->f_fmap, blkno) != SHOAL_B_FREE)
		return -EEXIST;
	map_set(f->f_fmap, blkno, state);
	return 0;
}

void fsck_set_state(struct fsck *f, uint64_t blkno, int state)
{
	uint64_t g = (blkno - f->f_sb.sb_rgfirst) / f->f_sb.sb_rgblocks;
	struct fsck_rg *rg = &f->f_rgs[g];
	int old = map_get(f->f_dmap, blkno);

	rg->fr_dfree += (uint32_t)(state == SHOAL_B_FREE) - (uint32_t)(old == SHOAL_B_FREE);
	rg->fr_ddinodes += (uint32_t)(state >= SHOAL_B_UNLINKED) - (uint32_t)(old >= SHOAL_B_UNLINKED);
	map_set(f->f_dmap, blkno, state);
	map_set(f->f_fmap, blkno, state);
	rg->fr_dirty = 1;
}

int fsck_alloc(struct fsck *f, int state, uint64_t *blkno)
{
	for (int strict = 1; strict >= 0; strict--) {
		for (uint32_t n = 0; n < f->f_rgcount; n++) {
			uint32_t g = (f->f_alloc_rg + n) % f->f_rgcount;
			const struct fsck_rg *rg = &f->f_rgs[g];
			for (uint32_t k = 0; k < rg->fr_length; k++) {
				uint64_t b = rg->fr_data0 + k;
				if (map_get(f->f_fmap, b) != SHOAL_B_FREE)
					continue;
				if (strict && map_get(f->f_dmap, b) != SHOAL_B_FREE)
					continue;
				fsck_set_state(f, b, state);
				f->f_alloc_rg = g;
				*blkno = b;
				return 0;
			}
		}
	}
	return -ENOSPC;
}

int fsck_rg_load(struct fsck *f)
{
	uint64_t mapbytes = (f->f_blocks + 3) / 4;
	uint8_t *b = blk_alloc(f);
	int err = -ENOMEM;

	f->f_rgcount = f->f_sb.sb_rgcount;
	f->f_rgs = calloc(f->f_rgcount, sizeof(*f->f_rgs));
	f->f_dmap = calloc(mapbytes, 1);
	f->f_fmap = calloc(mapbytes, 1);
	if (!b || !f->f_rgs || !f->f_dmap || !f->f_fmap) {
		fsck_operr(f, "block maps", ENOMEM);
		goto out;
	}
	for (uint32_t g = 0; g < f->f_rgcount; g++) {
		struct fsck_rg *rg = &f->f_rgs[g];
		const struct shoal_rg *h = (const void *)b;
		const uint8_t *bm = b + SHOAL_RG_BITMAP_OFF;
		uint64_t avail;

		rg->fr_addr = f->f_sb.sb_rgfirst + (uint64_t)g * f->f_sb.sb_rgblocks;
		rg->fr_data0 = rg->fr_addr + 1;
		avail = (f->f_blocks - 1) - rg->fr_data0; /* sb_geometry: data0 < N-1 */
		rg->fr_length = avail < f->f_sb.sb_rgblocks - 1u ? (uint32_t)avail
								  : f->f_sb.sb_rgblocks - 1u;
		fsck_progress(f, g, f->f_rgcount);
		err = blk_read(f, rg->fr_addr, b);
		if (err)
			goto out;
		if (meta_check(b, f->f_bsize, SHOAL_MT_RG, rg->fr_addr))
			continue;
		rg->fr_readable = 1;
		rg->fr_valid = h->rg_index == g && h->rg_data0 == rg->fr_data0 &&
			       h->rg_length == rg->fr_length;
		rg->fr_dfree = h->rg_free;
		rg->fr_ddinodes = h->rg_dinodes;
		rg->fr_seq = h->rg_header.mh_seq;
		for (uint32_t k = 0; k < rg->fr_length; k++)
			map_set(f->f_dmap, rg->fr_data0 + k, (bm[k >> 2] >> ((k & 3) * 2)) & 3);
	}
	err = 0;
out:
	free(b);
	return err;
}

int fsck_rg_scan(struct fsck *f, int (*fn)(struct fsck *f, uint64_t blkno, int dstate))
{
	for (uint32_t g = 0; g < f->f_rgcount; g++) {
		const struct fsck_rg *rg = &f->f_rgs[g];
		fsck_progress(f, g, f->f_rgcount);
		for (uint32_t k = 0; k < rg->fr_length; k++) {
			uint64_t b = rg->fr_data0 + k;
			int s = map_get(f->f_dmap, b), err;
			if (rg->fr_readable && s != SHOAL_B_DINODE && s != SHOAL_B_UNLINKED)
				continue;
			err = fn(f, b, rg->fr_readable ? s : -1);
			if (err)
				return err;
		}
	}
	return 0;
}

/* Mismatches of one kind in one group: counted, the first few named. */
struct rg_diff {
	uint32_t rd_count;
	uint64_t rd_first[4];
};

static void diff_add(struct rg_diff *d, uint64_t b)
{
	if (d->rd_count < 4)
		d->rd_first[d->rd_count] = b;
	d->rd_count++;
}

static const char *diff_list(const struct rg_diff *d, char *buf, size_t len)
{
	size_t n = 0;

	buf[0] = '\0';
	for (uint32_t i = 0; i < d->rd_count && i < 4 && n < len; i++)
		n += (size_t)snprintf(buf + n, len - n, "%s%llu", i ? ", " : "",
				      (unsigned long long)d->rd_first[i]);
	if (d->rd_count > 4 && n < len)
		snprintf(buf + n, len - n, ", ...");
	return buf;
}

static int rg_sync_one(struct fsck *f, uint32_t g, uint8_t *b)
{
	const struct fsck_rg *rg = &f->f_rgs[g];
	struct shoal_rg *h = (void *)b;
	uint8_t *bm = b + SHOAL_RG_BITMAP_OFF;
	struct rg_diff used_free = { 0 }, leaked = { 0 }, wrong = { 0 };
	uint32_t ffree = 0, fdin = 0, dfree = 0, ddin = 0;
	int rewrite = 0, tail = 0;
	char list[160];

	for (uint32_t k = 0; k < rg->fr_length; k++) {
		uint64_t blk = rg->fr_data0 + k;
		int fs = map_get(f->f_fmap, blk), ds = map_get(f->f_dmap, blk);
		ffree += fs == SHOAL_B_FREE;
		fdin += fs == SHOAL_B_DINODE || fs == SHOAL_B_UNLINKED;
		dfree += ds == SHOAL_B_FREE;
		ddin += ds == SHOAL_B_DINODE || ds == SHOAL_B_UNLINKED;
		if (!rg->fr_readable || fs == ds)
			continue;
		if (ds == SHOAL_B_FREE)
			diff_add(&used_free, blk);
		else if (fs == SHOAL_B_FREE)
			diff_add(&leaked, blk);
		else
			diff_add(&wrong, blk);
		if (f->f_verbose)
			printf("%s: block %llu: bitmap says %s, found %s\n", f->f_name,
			       (unsigned long long)blk, state_name(ds), state_name(fs));
	}
	if (!rg->fr_readable) {
		return fsck_problem(f, 1,
				    "resource group %u: header at block %llu is invalid; "
				    "rebuilding it from the walk",
				    g, (unsigned long long)rg->fr_addr);
	}
	if (blk_read(f, rg->fr_addr, b))
		return -EIO;
	for (uint64_t k = rg->fr_length; k < SHOAL_RG_MAX_LENGTH(f->f_bsize); k++)
		if ((bm[k >> 2] >> ((k & 3) * 2)) & 3) {
			tail = 1;
			break;
		}
	if (!rg->fr_valid)
		rewrite |= fsck_problem(f, 1,
					"resource group %u: header fields (rg_index %u, rg_data0 "
					"%llu, rg_length %u) disagree with the superblock",
					g, h->rg_index, (unsigned long long)h->rg_data0,
					h->rg_length);
	if (used_free.rd_count)
		rewrite |= fsck_problem(f, 1,
					"resource group %u: %u blocks in use but marked free: %s",
					g, used_free.rd_count,
					diff_list(&used_free, list, sizeof(list)));
	if (leaked.rd_count)
		rewrite |= fsck_problem(f, 1,
					"resource group %u: %u blocks marked in use but not used "
					"(leaked): %s",
					g, leaked.rd_count, diff_list(&leaked, list, sizeof(list)));
	if (wrong.rd_count)
		rewrite |= fsck_problem(f, 1,
					"resource group %u: %u blocks marked with the wrong state: %s",
					g, wrong.rd_count, diff_list(&wrong, list, sizeof(list)));
	if (tail)
		rewrite |= fsck_problem(f, 1,
					"resource group %u: bitmap bits beyond rg_length are set", g);
	/* counts that disagree with their own bitmap are a separate error;
	 * counts that follow a wrong bitmap are rewritten with it */
	if (rg->fr_dfree != dfree || rg->fr_ddinodes != ddin)
		rewrite |= fsck_problem(f, 1,
					"resource group %u: rg_free %u, rg_dinodes %u, but the "
					"bitmap has %u free and %u dinodes",
					g, rg->fr_dfree, rg->fr_ddinodes, dfree, ddin);
	else if (f->f_yes && (ffree != dfree || fdin != ddin || rg->fr_dirty))
		rewrite = 1;
	return rewrite;
}

int fsck_rg_sync(struct fsck *f)
{
	uint8_t *b = blk_alloc(f);
	int err = 0;

	if (!b)
		return -ENOMEM;
	for (uint32_t g = 0; g < f->f_rgcount && !err; g++) {
		const struct fsck_rg *rg = &f->f_rgs[g];
		struct shoal_rg *h = (void *)b;
		uint8_t *bm = b + SHOAL_RG_BITMAP_OFF;
		int rw;

		fsck_progress(f, g, f->f_rgcount);
		rw = rg_sync_one(f, g, b);
		if (rw < 0) {
			err = rw;
			break;
		}
		if (!rw || !f->f_yes)
			continue;
		memset(b, 0, f->f_bsize);
		h->rg_index = g;
		h->rg_data0 = rg->fr_data0;
		h->rg_length = rg->fr_length;
		for (uint32_t k = 0; k < rg->fr_length; k++) {
			int s = map_get(f->f_fmap, rg->fr_data0 + k);
			bm[k >> 2] |= (uint8_t)(s << ((k & 3) * 2));
			h->rg_free += s == SHOAL_B_FREE;
			h->rg_dinodes += s == SHOAL_B_DINODE || s == SHOAL_B_UNLINKED;
		}
		meta_seal(b, f->f_bsize, SHOAL_MT_RG, rg->fr_addr, rg->fr_seq);
		err = blk_write(f, rg->fr_addr, b);
	}
	free(b);
	return err;
}

/*
 * meta.c - the metadata block header (struct shoal_mh) and the directory
 * name hash, as docs/FORMAT.md and the format notes define them.  Every
 * module that writes a metadata block seals it here, and every module that
 * reads one checks it here, so the encoding lives in one place.
 *
 * Invariants:
 *  (1) a sealed block has mh_magic SHOAL_MAGIC, mh_format SHOAL_FORMAT,
 *      mh_pad 0, and mh_crc = CRC32C of all bsize bytes with mh_crc read as
 *      zero;
 *  (2) meta_check() accepts exactly the blocks meta_seal() can produce for
 *      that type and address: a block written to the wrong place, or with any
 *      bit changed, is -EUCLEAN;
 *  (3) meta_name_hash() depends only on (seed, name bytes): it is part of the
 *      format (directory entries are sorted and found by it) and must never
 *      change; its result is in [3, 2^63), leaving offsets 0..2 to readdir's
 *      start, "." and "..".
 */
#include "meta.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"
#include "shoal/ondisk.h"

/* mh_crc sits at byte 8 of the header; the CRC treats it as four zero bytes. */
#define MH_CRC_OFF offsetof(struct shoal_mh, mh_crc)
_Static_assert(offsetof(struct shoal_mh, mh_crc) == 8, "mh_crc offset");

uint32_t meta_crc(const void *block, uint32_t bsize)
{
	static const uint8_t zero[4];
	const uint8_t *b = block;
	uint32_t crc;

	assert(bsize >= sizeof(struct shoal_mh));
	crc = crc32c(0, b, MH_CRC_OFF);
	crc = crc32c(crc, zero, sizeof(zero));
	return crc32c(crc, b + MH_CRC_OFF + 4, bsize - MH_CRC_OFF - 4);
}

void meta_update_crc(void *block, uint32_t bsize)
{
	struct shoal_mh *mh = block;

	mh->mh_crc = meta_crc(block, bsize);
}

void meta_seal(void *block, uint32_t bsize, uint16_t type, uint64_t blkno, uint64_t seq)
{
	struct shoal_mh *mh = block;

	assert(type > 0 && type < SHOAL_MT_MAX);
	mh->mh_magic = SHOAL_MAGIC;
	mh->mh_type = type;
	mh->mh_format = SHOAL_FORMAT;
	mh->mh_pad = 0;
	mh->mh_blkno = blkno;
	mh->mh_seq = seq;
	meta_update_crc(block, bsize);
}

int meta_check(const void *block, uint32_t bsize, uint16_t type, uint64_t blkno)
{
	const struct shoal_mh *mh = block;

	if (mh->mh_magic != SHOAL_MAGIC || mh->mh_format != SHOAL_FORMAT)
		return -EUCLEAN;
	if (type ? mh->mh_type != type : (mh->mh_type == 0 || mh->mh_type >= SHOAL_MT_MAX))
		return -EUCLEAN;
	if (mh->mh_blkno != blkno)
		return -EUCLEAN;
	if (mh->mh_crc != meta_crc(block, bsize))
		return -EUCLEAN;
	return 0;
}

const char *meta_sb_insane(const struct shoal_sb *sb, uint64_t devsize)
{
	uint64_t bs = sb->sb_bsize, last, lastrg;

	if (sb->sb_format != SHOAL_FORMAT)
		return "unknown sb_format";
	if (bs < SHOAL_MIN_BSIZE || bs > SHOAL_MAX_BSIZE || (bs & (bs - 1)) ||
	    sb->sb_bsize_shift >= 32 || (1ull << sb->sb_bsize_shift) != bs)
		return "bad block size";
	if (sb->sb_blocks < 8 || sb->sb_blocks > devsize / bs)
		return "sb_blocks larger than the device";
	last = sb->sb_blocks - 1;
	if (sb->sb_jfirst != 1 || sb->sb_jcount == 0 || sb->sb_jblocks < 8)
		return "bad journal geometry";
	if (sb->sb_feat_incompat & SHOAL_FEAT_INCOMPAT_HEARTBEAT) {
		if (sb->sb_hbfirst != 1 + (uint64_t)sb->sb_jcount * sb->sb_jblocks)
			return "sb_hbfirst does not follow the journals";
		if (sb->sb_rgfirst != sb->sb_hbfirst + sb->sb_jcount + 1)
			return "sb_rgfirst does not follow the heartbeat blocks";
	} else if (sb->sb_hbfirst) {
		return "sb_hbfirst set without the heartbeat feature";
	} else if (sb->sb_rgfirst != 1 + (uint64_t)sb->sb_jcount * sb->sb_jblocks) {
		return "sb_rgfirst does not follow the journals";
	}
	if (sb->sb_rgcount == 0 || sb->sb_rgblocks < 2 ||
	    sb->sb_rgblocks > SHOAL_RG_MAX_LENGTH(bs) + 1)
		return "bad resource group geometry";
	lastrg = sb->sb_rgfirst + (uint64_t)(sb->sb_rgcount - 1) * sb->sb_rgblocks;
	if (lastrg + 1 >= last || lastrg < sb->sb_rgfirst)
		return "resource groups run past the end";
	if (sb->sb_root <= sb->sb_rgfirst || sb->sb_root >= last)
		return "sb_root outside the resource groups";
	return NULL;
}

uint64_t meta_name_hash(uint64_t seed, const char *name, size_t len)
{
	const unsigned char *p = (const unsigned char *)name;
	uint64_t h = seed ^ 0xcbf29ce484222325ull;

	for (size_t i = 0; i < len; i++) {
		h ^= p[i];
		h *= 0x100000001b3ull;
	}
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdull;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ull;
	h ^= h >> 33;
	h >>= 1;
	if (h < 3)
		h += 3;
	return h;
}

int meta_dirents_split(uint8_t *area, uint32_t *used, uint8_t *dst, uint32_t *dst_used,
		       unsigned bit)
{
	struct shoal_dirent e;
	uint32_t off, keep = 0, total = *used;
	int moved = 0;

	for (off = 0; off < total; off += SHOAL_DIRENT_SIZE(e.de_namelen)) {
		if (total - off < sizeof(e))
			return -EUCLEAN;
		memcpy(&e, area + off, sizeof(e));
		if (e.de_namelen == 0 || SHOAL_DIRENT_SIZE(e.de_namelen) > total - off)
			return -EUCLEAN;
	}
	for (off = 0; off < total;) {
		memcpy(&e, area + off, sizeof(e));
		uint32_t sz = SHOAL_DIRENT_SIZE(e.de_namelen);
		if ((e.de_hash >> bit) & 1) {
			memcpy(dst + *dst_used, area + off, sz);
			*dst_used += sz;
			moved++;
		} else {
			memmove(area + keep, area + off, sz);
			keep += sz;
		}
		off += sz;
	}
	memset(area + keep, 0, total - keep);
	*used = keep;
	return moved;
}

/* --- fast-commit blocks (FORMAT.md 11.4) ----------------------------------- */

int meta_fc_next(const void *block, uint32_t *cursor, const struct shoal_lfrec **rec,
		 const uint8_t **data)
{
	const struct shoal_lfast *fc = block;
	const uint8_t *b = block;
	uint32_t end = SHOAL_LFAST_REC_OFF + fc->fc_bytes;

	if (*cursor == 0)
		*cursor = SHOAL_LFAST_REC_OFF;
	if (*cursor >= end)
		return 0;
	*rec = (const void *)(b + *cursor);
	*data = b + *cursor + sizeof(struct shoal_lfrec);
	*cursor += SHOAL_LFREC_SIZE((*rec)->fr_len);
	return 1;
}

int meta_fc_valid(const void *block, uint32_t bsize, uint64_t daddr, uint64_t seq,
		  uint64_t lo, uint64_t hi, int data_ok)
{
	const struct shoal_lfast *fc = block;
	const struct shoal_lfrec *r;
	const uint8_t *d;
	uint32_t cur = 0, n = 0;

	if (fc->fc_bytes > bsize - SHOAL_LFAST_REC_OFF || fc->fc_bytes % 8 ||
	    meta_check(block, meta_fc_span(fc->fc_bytes, bsize), SHOAL_MT_LFAST, daddr) ||
	    fc->fc_header.mh_seq != seq || fc->fc_count == 0)
		return -EUCLEAN;
	while (n < fc->fc_count) {
		/* the record header itself must lie inside fc_bytes */
		uint32_t at = cur ? cur : SHOAL_LFAST_REC_OFF;
		if (at + sizeof(*r) > SHOAL_LFAST_REC_OFF + fc->fc_bytes)
			return -EUCLEAN;
		meta_fc_next(block, &cur, &r, &d);
		int data = r->fr_flags == SHOAL_FR_DATA;
		if (cur > SHOAL_LFAST_REC_OFF + fc->fc_bytes || r->fr_blkno < lo ||
		    r->fr_blkno >= hi || r->fr_len == 0 ||
		    (!data && r->fr_off < sizeof(struct shoal_mh)) ||
		    (uint32_t)r->fr_off + r->fr_len > bsize || (r->fr_flags && !(data && data_ok)))
			return -EUCLEAN;
		n++;
	}
	return cur == SHOAL_LFAST_REC_OFF + fc->fc_bytes ? 0 : -EUCLEAN;
}

uint32_t meta_fc_span(uint32_t fc_bytes, uint32_t bsize)
{
	uint32_t s = (SHOAL_LFAST_REC_OFF + fc_bytes + 511) & ~511u;
	return s < bsize ? s : bsize;
}

int meta_fc_first(const void *block, const struct shoal_lfrec *rec)
{
	const struct shoal_lfrec *r;
	const uint8_t *d;
	uint32_t cur = 0;

	while (meta_fc_next(block, &cur, &r, &d) && r != rec)
		if (r->fr_blkno == rec->fr_blkno)
			return 0;
	return 1;
}

void meta_fc_apply(const void *block, uint64_t blkno, uint8_t *home)
{
	const struct shoal_lfrec *r;
	const uint8_t *d;
	uint32_t cur = 0;

	while (meta_fc_next(block, &cur, &r, &d))
		if (r->fr_blkno == blkno)
			memcpy(home + r->fr_off, d, r->fr_len);
}

int meta_fc_replay(const void *block, uint32_t bsize, uint8_t *tmp,
		   const struct meta_fc_io *io)
{
	const struct shoal_lfrec *r;
	const uint8_t *d;
	uint32_t cur = 0;
	int err;

	while (meta_fc_next(block, &cur, &r, &d)) {
		if (!meta_fc_first(block, r))
			continue;
		err = io->fi_read(io->fi_arg, r->fr_blkno, tmp);
		if (err)
			return err;
		if (r->fr_flags & SHOAL_FR_DATA) {
			/* file data: no header, no checksum */
			meta_fc_apply(block, r->fr_blkno, tmp);
			err = io->fi_write(io->fi_arg, r->fr_blkno, tmp);
			if (err)
				return err;
			continue;
		}
		if (meta_check(tmp, bsize, 0, r->fr_blkno)) {
			if (io->fi_bad)
				io->fi_bad(io->fi_arg, r->fr_blkno);
			continue;
		}
		meta_fc_apply(block, r->fr_blkno, tmp);
		meta_update_crc(tmp, bsize);
		err = io->fi_write(io->fi_arg, r->fr_blkno, tmp);
		if (err)
			return err;
	}
	return 0;
}

int meta_fc_hold(struct meta_fc_held *h, uint32_t pos)
{
	if (h->fh_n == h->fh_cap) {
		uint32_t cap = h->fh_cap ? h->fh_cap * 2 : 64;
		uint32_t *p = realloc(h->fh_pos, sizeof(*p) * cap);
		if (!p)
			return -ENOMEM;
		h->fh_pos = p;
		h->fh_cap = cap;
	}
	h->fh_pos[h->fh_n++] = pos;
	return 0;
}

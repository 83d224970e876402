/*
 * fsck_inode.c - dinodes, block maps and extended attributes for
 * fsck.shoal: loading and judging a dinode (ino_get), walking a block map
 * and claiming what it points at, pass 4 (block maps and xattr blocks of
 * every inode) and pass 5b (di_nlink, di_blocks, di_entries, di_parent).
 *
 * Invariants:
 *  (1) a dinode is FI_VALID only if its header is right for its address,
 *      its mode is a known file type and its height/size/depth can be
 *      walked without going out of bounds; a dinode whose CRC alone is
 *      wrong but which passes every other check is kept (as e2fsck keeps
 *      an inode with only a bad checksum) and its CRC rewritten with -y;
 *  (2) a pointer is followed only if it lies inside a group's covered
 *      range and the block it names passes meta_check for the type it must
 *      have; otherwise the pointer is cleared with -y (the subtree is lost,
 *      its blocks become free in pass 6);
 *  (3) a block is claimed by its first owner only: a later pointer to it is
 *      cleared with -y.  Pass 4 walks every referenced inode before any
 *      orphan, so orphans lose such conflicts.
 */
#include "fsck.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "meta.h"

static uint64_t mul_sat(uint64_t a, uint64_t b)
{
	if (a && b > UINT64_MAX / a)
		return UINT64_MAX;
	return a * b;
}

static uint64_t add_sat(uint64_t a, uint64_t b)
{
	return a + b < a ? UINT64_MAX : a + b;
}

uint64_t bmap_capacity(struct fsck *f, unsigned height)
{
	uint64_t c;

	if (height == 0)
		return 0;
	c = SHOAL_DI_PTRS(f->f_bsize);
	for (unsigned h = 1; h < height; h++)
		c = mul_sat(c, SHOAL_IND_PTRS(f->f_bsize));
	return c;
}

/* Blocks per pointer of the dinode at height h: P^(h-1). */
static uint64_t bmap_span(struct fsck *f, unsigned height)
{
	uint64_t s = 1;

	for (unsigned h = 1; h < height; h++)
		s = mul_sat(s, SHOAL_IND_PTRS(f->f_bsize));
	return s;
}

uint8_t mode_dtype(uint32_t mode)
{
	return (uint8_t)((mode >> 12) & 15);
}

static const char *mode_name(uint32_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFREG:
		return "regular file";
	case S_IFDIR:
		return "directory";
	case S_IFLNK:
		return "symlink";
	case S_IFCHR:
		return "character device";
	case S_IFBLK:
		return "block device";
	case S_IFIFO:
		return "fifo";
	case S_IFSOCK:
		return "socket";
	}
	return "unknown";
}

static uint64_t table_blocks(struct fsck *f, unsigned depth)
{
	uint64_t hp = SHOAL_HT_PTRS(f->f_bsize);

	return ((1ull << depth) + hp - 1) / hp;
}

/*
 * Invariant 1: can this dinode be walked at all?  strict (for a dinode whose
 * CRC is wrong) also wants every field the walk would otherwise repair to be
 * in range, so that a block of garbage with an intact header is not taken
 * for an inode.
 */
static int dinode_sane(struct fsck *f, const struct shoal_dinode *di, int strict)
{
	const struct shoal_inline_dir *id =
		(const void *)((const uint8_t *)di + SHOAL_DI_PAYLOAD_OFF);
	uint32_t pay = SHOAL_DI_PAYLOAD(f->f_bsize);

	if (di->di_height > SHOAL_MAX_HEIGHT)
		return 0;
	if (strict && (di->di_depth > SHOAL_MAX_DEPTH || di->di_blocks > f->f_blocks ||
		       di->di_blocks == 0 || (di->di_flags & ~(SHOAL_DIF_USER_MASK | SHOAL_DIF_EXHASH))))
		return 0;
	switch (di->di_mode & S_IFMT) {
	case S_IFREG:
	case S_IFLNK:
		/* di_size may exceed what the payload or the map covers: the
		 * rest reads as a hole (an extending truncate only sets it) */
		return 1;
	case S_IFDIR:
		if (!(di->di_flags & SHOAL_DIF_EXHASH))
			return di->di_height == 0 && (!strict || id->id_used <= pay - sizeof(*id));
		return di->di_height >= 1 && di->di_depth <= SHOAL_MAX_DEPTH &&
		       bmap_capacity(f, di->di_height) >= table_blocks(f, di->di_depth);
	case S_IFCHR:
	case S_IFBLK:
	case S_IFIFO:
	case S_IFSOCK:
		return !strict || (di->di_height == 0 && di->di_size == 0);
	}
	return 0;
}

struct fsck_ino *ino_get(struct fsck *f, uint64_t ino)
{
	struct fsck_ino *fi = itab_find(f, ino);
	const struct shoal_dinode *di;
	uint8_t *b;

	if (fi)
		return fi;
	fi = itab_add(f, ino);
	if (!fi)
		return NULL;
	fi->fi_flags = FI_BAD;
	if (!fsck_covered(f, ino))
		return fi;
	fi->fi_dstate = (uint8_t)map_get(f->f_dmap, ino);
	b = blk_alloc(f);
	if (!b)
		return NULL;
	di = (const void *)b;
	if (blk_read(f, ino, b))
		goto out;
	if (meta_check(b, f->f_bsize, SHOAL_MT_DINODE, ino) == 0) {
		if (!dinode_sane(f, di, 0))
			goto out;
	} else if (blk_header_ok(f, b, SHOAL_MT_DINODE, ino) && dinode_sane(f, di, 1) &&
		   map_get(f->f_fmap, ino) == SHOAL_B_FREE) {
		if (fsck_problem(f, 1,
				 "inode %llu: checksum mismatch, but the contents pass the checks; "
				 "rewriting the checksum",
				 (unsigned long long)ino)) {
			meta_update_crc(b, f->f_bsize);
			blk_write(f, ino, b);
		} else {
			fi->fi_flags |= FI_CRCOK;
		}
	} else {
		goto out;
	}
	if (fsck_claim(f, ino, SHOAL_B_DINODE))
		goto out;
	fi->fi_flags = (uint16_t)((fi->fi_flags & FI_CRCOK) | FI_VALID);
	fi->fi_mode = di->di_mode;
	fi->fi_nlink = di->di_nlink;
	fi->fi_dparent = di->di_parent;
	fi->fi_dblocks = di->di_blocks;
	fi->fi_dentries = di->di_entries;
	fi->fi_blocks = 1;
out:
	free(b);
	return fi;
}

int ino_read(struct fsck *f, struct fsck_ino *fi, void *buf)
{
	int err = blk_read(f, fi->fi_ino, buf);

	if (err)
		return err;
	if (meta_check(buf, f->f_bsize, SHOAL_MT_DINODE, fi->fi_ino) == 0)
		return 0;
	if ((fi->fi_flags & FI_CRCOK) && blk_header_ok(f, buf, SHOAL_MT_DINODE, fi->fi_ino))
		return 0;
	return -EUCLEAN;
}

int ino_write(struct fsck *f, uint64_t ino, void *buf)
{
	meta_update_crc(buf, f->f_bsize);
	return blk_write(f, ino, buf);
}

/* --- block maps ------------------------------------------------------------- */

enum { BW_FILE, BW_HTABLE };

struct bwalk {
	struct fsck *bw_f;
	uint64_t bw_ino;
	int bw_kind;
	uint64_t bw_count; /* blocks claimed: indirect + data/table */
	uint64_t bw_end;   /* BW_FILE: 1 + the last logical block mapped */
	uint64_t bw_limit; /* BW_HTABLE: table blocks */
	uint64_t *bw_tbl;  /* BW_HTABLE: table block address per logical block */
	uint8_t *bw_buf[SHOAL_MAX_HEIGHT + 1];
};

static int bw_init(struct fsck *f, struct bwalk *bw)
{
	memset(bw, 0, sizeof(*bw));
	bw->bw_f = f;
	for (int i = 0; i <= SHOAL_MAX_HEIGHT; i++)
		if (!(bw->bw_buf[i] = blk_alloc(f)))
			return -ENOMEM;
	return 0;
}

static void bw_destroy(struct bwalk *bw)
{
	for (int i = 0; i <= SHOAL_MAX_HEIGHT; i++)
		free(bw->bw_buf[i]);
}

/*
 * Walk n pointers of the given level (1: they name data or table blocks)
 * covering logical blocks from base, span blocks each.  Returns 1 if a
 * pointer in ptrs was cleared (the caller rewrites the block holding them).
 */
static int bw_level(struct bwalk *bw, uint64_t *ptrs, uint32_t n, unsigned level, uint64_t base,
		    uint64_t span)
{
	struct fsck *f = bw->bw_f;
	unsigned long long ino = bw->bw_ino;
	uint32_t P = SHOAL_IND_PTRS(f->f_bsize);
	int dirty = 0;

	for (uint32_t i = 0; i < n; i++) {
		uint64_t p = ptrs[i], lblk = add_sat(base, mul_sat(i, span));
		unsigned long long lb = lblk, pb = p;

		if (!p)
			continue;
		if (!fsck_covered(f, p)) {
			if (fsck_problem(f, 1,
					 "inode %llu: pointer to block %llu (logical block %llu) is "
					 "out of range; clearing it",
					 ino, pb, lb)) {
				ptrs[i] = 0;
				dirty = 1;
			}
			continue;
		}
		if (level > 1) {
			uint8_t *ib = bw->bw_buf[level];
			if (blk_read(f, p, ib))
				continue;
			if (meta_check(ib, f->f_bsize, SHOAL_MT_INDIRECT, p)) {
				if (fsck_problem(f, 1,
						 "inode %llu: indirect block %llu (logical block "
						 "%llu) is invalid; clearing the pointer",
						 ino, pb, lb)) {
					ptrs[i] = 0;
					dirty = 1;
				}
				continue;
			}
			if (fsck_claim(f, p, SHOAL_B_DATA)) {
				if (fsck_problem(f, 1,
						 "inode %llu: indirect block %llu is also used "
						 "elsewhere; clearing the pointer",
						 ino, pb)) {
					ptrs[i] = 0;
					dirty = 1;
				}
				continue;
			}
			bw->bw_count++;
			if (bw_level(bw, (uint64_t *)(ib + SHOAL_IND_PTR_OFF), P, level - 1, lblk,
				     span / P) > 0 &&
			    f->f_yes) {
				meta_update_crc(ib, f->f_bsize);
				blk_write(f, p, ib);
			}
			continue;
		}
		if (bw->bw_kind == BW_HTABLE) {
			uint8_t *tb = bw->bw_buf[0];
			if (lblk >= bw->bw_limit) {
				if (fsck_problem(f, 1,
						 "directory %llu: block %llu maps logical block %llu, "
						 "past the end of the hash table; clearing it",
						 ino, pb, lb)) {
					ptrs[i] = 0;
					dirty = 1;
				}
				continue;
			}
			if (fsck_claim(f, p, SHOAL_B_DATA)) {
				if (fsck_problem(f, 1,
						 "directory %llu: hash table block %llu is also used "
						 "elsewhere; clearing the pointer",
						 ino, pb)) {
					ptrs[i] = 0;
					dirty = 1;
				}
				continue;
			}
			bw->bw_count++; /* owned even when invalid: nobody else may take it */
			if (blk_read(f, p, tb) == 0 &&
			    meta_check(tb, f->f_bsize, SHOAL_MT_HTABLE, p) == 0)
				bw->bw_tbl[lblk] = p;
			continue;
		}
		if (fsck_claim(f, p, SHOAL_B_DATA)) {
			if (fsck_problem(f, 1,
					 "inode %llu: block %llu (logical block %llu) is also used "
					 "elsewhere; clearing the pointer",
					 ino, pb, lb)) {
				ptrs[i] = 0;
				dirty = 1;
			}
			continue;
		}
		bw->bw_count++;
		if (lblk >= bw->bw_end)
			bw->bw_end = lblk + 1;
	}
	return dirty;
}

int bmap_walk_htable(struct fsck *f, struct fsck_ino *fi, uint8_t *dib, uint64_t *tbl,
		     uint64_t ntab)
{
	struct shoal_dinode *di = (void *)dib;
	struct bwalk bw;
	int r = -ENOMEM;

	if (bw_init(f, &bw))
		goto out;
	bw.bw_ino = fi->fi_ino;
	bw.bw_kind = BW_HTABLE;
	bw.bw_limit = ntab;
	bw.bw_tbl = tbl;
	r = bw_level(&bw, (uint64_t *)(dib + SHOAL_DI_PAYLOAD_OFF), SHOAL_DI_PTRS(f->f_bsize),
		     di->di_height, 0, bmap_span(f, di->di_height));
	fi->fi_blocks += bw.bw_count;
out:
	bw_destroy(&bw);
	return r;
}

uint64_t bmap_lookup(struct fsck *f, const void *dibuf, uint64_t lblk)
{
	const struct shoal_dinode *di = dibuf;
	uint32_t P = SHOAL_IND_PTRS(f->f_bsize);
	uint64_t span, idx, p;
	uint8_t *b;

	if (di->di_height == 0 || di->di_height > SHOAL_MAX_HEIGHT ||
	    lblk >= bmap_capacity(f, di->di_height))
		return 0;
	span = bmap_span(f, di->di_height);
	idx = lblk / span;
	p = ((const uint64_t *)((const uint8_t *)dibuf + SHOAL_DI_PAYLOAD_OFF))[idx];
	b = blk_alloc(f);
	if (!b)
		return 0;
	for (unsigned level = di->di_height; level > 1 && p; level--) {
		lblk %= span;
		span /= P;
		if (!fsck_covered(f, p) || blk_read(f, p, b) ||
		    meta_check(b, f->f_bsize, SHOAL_MT_INDIRECT, p)) {
			p = 0;
			break;
		}
		p = ((const uint64_t *)(b + SHOAL_IND_PTR_OFF))[lblk / span];
	}
	free(b);
	return fsck_covered(f, p) ? p : 0;
}

/* --- releasing an orphan's blocks (-y) -------------------------------------- */

static void release_leaves(struct fsck *f, const uint8_t *tb, uint8_t *lb)
{
	const uint64_t *ptrs = (const uint64_t *)(tb + SHOAL_HT_PTR_OFF);

	for (uint32_t i = 0; i < SHOAL_HT_PTRS(f->f_bsize); i++) {
		uint64_t q = ptrs[i];
		/* a leaf still DATA in the found map is ours; stop at one
		 * already released (runs repeat it, chains may loop) */
		while (q && fsck_covered(f, q) && map_get(f->f_fmap, q) == SHOAL_B_DATA &&
		       blk_read(f, q, lb) == 0 && meta_check(lb, f->f_bsize, SHOAL_MT_LEAF, q) == 0) {
			fsck_set_state(f, q, SHOAL_B_FREE);
			q = ((const struct shoal_leaf *)lb)->lf_next;
		}
	}
}

static void release_level(struct fsck *f, uint8_t **bufs, const uint64_t *ptrs, uint32_t n,
			  unsigned level, int htable)
{
	for (uint32_t i = 0; i < n; i++) {
		uint64_t p = ptrs[i];
		uint8_t *b = bufs[level];

		if (!p || !fsck_covered(f, p) || map_get(f->f_fmap, p) != SHOAL_B_DATA)
			continue;
		if (level > 1) {
			if (blk_read(f, p, b) == 0 &&
			    meta_check(b, f->f_bsize, SHOAL_MT_INDIRECT, p) == 0)
				release_level(f, bufs, (const uint64_t *)(b + SHOAL_IND_PTR_OFF),
					      SHOAL_IND_PTRS(f->f_bsize), level - 1, htable);
		} else if (htable && blk_read(f, p, b) == 0 &&
			   meta_check(b, f->f_bsize, SHOAL_MT_HTABLE, p) == 0) {
			release_leaves(f, b, bufs[0]);
		}
		fsck_set_state(f, p, SHOAL_B_FREE);
	}
}

int bmap_release(struct fsck *f, const uint8_t *dib)
{
	const struct shoal_dinode *di = (const void *)dib;
	uint8_t *bufs[SHOAL_MAX_HEIGHT + 1] = { 0 };
	int err = -ENOMEM;

	for (int i = 0; i <= SHOAL_MAX_HEIGHT; i++)
		if (!(bufs[i] = blk_alloc(f)))
			goto out;
	if (di->di_height && di->di_height <= SHOAL_MAX_HEIGHT)
		release_level(f, bufs, (const uint64_t *)(dib + SHOAL_DI_PAYLOAD_OFF),
			      SHOAL_DI_PTRS(f->f_bsize), di->di_height, 0);
	err = 0;
out:
	for (int i = 0; i <= SHOAL_MAX_HEIGHT; i++)
		free(bufs[i]);
	return err;
}

int ino_release(struct fsck *f, struct fsck_ino *fi)
{
	uint8_t *bufs[SHOAL_MAX_HEIGHT + 2] = { 0 };
	struct shoal_dinode *di;
	int err = -ENOMEM;

	for (int i = 0; i < SHOAL_MAX_HEIGHT + 2; i++)
		if (!(bufs[i] = blk_alloc(f)))
			goto out;
	di = (void *)bufs[SHOAL_MAX_HEIGHT + 1];
	err = ino_read(f, fi, di);
	if (err)
		goto out;
	if (di->di_height && (S_ISREG(di->di_mode) || S_ISLNK(di->di_mode) ||
			      (S_ISDIR(di->di_mode) && (di->di_flags & SHOAL_DIF_EXHASH))))
		release_level(f, bufs, (const uint64_t *)((uint8_t *)di + SHOAL_DI_PAYLOAD_OFF),
			      SHOAL_DI_PTRS(f->f_bsize), di->di_height, S_ISDIR(di->di_mode));
	if (di->di_xattr && fsck_covered(f, di->di_xattr) &&
	    map_get(f->f_fmap, di->di_xattr) == SHOAL_B_DATA)
		fsck_set_state(f, di->di_xattr, SHOAL_B_FREE);
	fsck_set_state(f, fi->fi_ino, SHOAL_B_FREE);
	fi->fi_flags |= FI_FREED;
out:
	for (int i = 0; i < SHOAL_MAX_HEIGHT + 2; i++)
		free(bufs[i]);
	return err;
}

/* --- extended attributes ---------------------------------------------------- */

/* Check the xattr block of the dinode in dib; returns blocks owned (0/1),
 * sets *dirty if di_xattr was cleared. */
static int xattr_check(struct fsck *f, uint64_t ino, uint8_t *dib, uint8_t *xb, int *dirty)
{
	struct shoal_dinode *di = (void *)dib;
	struct shoal_xattr_hdr *xh = (void *)xb;
	unsigned long long x = di->di_xattr, in = ino;
	uint32_t max = f->f_bsize - SHOAL_XATTR_ENTRIES_OFF, used, off = 0, cnt = 0;
	const char *why = NULL;
	int xdirty = 0;

	if (!x)
		return 0;
	if (!fsck_covered(f, x))
		why = "is out of range";
	else if (blk_read(f, x, xb))
		return 0;
	else if (meta_check(xb, f->f_bsize, SHOAL_MT_XATTR, x))
		why = "is invalid";
	else if (fsck_claim(f, x, SHOAL_B_DATA))
		why = "is also used elsewhere";
	if (why) {
		if (fsck_problem(f, 1, "inode %llu: xattr block %llu %s; dropping the attributes",
				 in, x, why)) {
			di->di_xattr = 0;
			*dirty = 1;
		}
		return 0;
	}
	used = xh->xh_used;
	if (used > max) {
		if (fsck_problem(f, 1, "inode %llu: xattr block %llu: xh_used %u is too large", in,
				 x, used))
			xdirty = 1;
		used = max;
	}
	while (off < used) {
		const uint8_t *e = xb + SHOAL_XATTR_ENTRIES_OFF + off;
		uint32_t left = used - off, sz;
		uint16_t vl;

		if (left < sizeof(struct shoal_xattr_ent))
			goto bad;
		memcpy(&vl, e + 2, 2);
		sz = (uint32_t)sizeof(struct shoal_xattr_ent) + e[1] + vl;
		if (e[0] < SHOAL_XNS_USER || e[0] > SHOAL_XNS_SYSTEM || e[1] == 0 || sz > left ||
		    memchr(e + 4, '\0', e[1]))
			goto bad;
		/* (namespace, name) unique: quadratic, a block holds few */
		for (uint32_t o2 = 0; o2 < off;) {
			const uint8_t *e2 = xb + SHOAL_XATTR_ENTRIES_OFF + o2;
			uint16_t vl2;
			memcpy(&vl2, e2 + 2, 2);
			if (e2[0] == e[0] && e2[1] == e[1] && !memcmp(e2 + 4, e + 4, e[1]))
				goto bad;
			o2 += (uint32_t)sizeof(struct shoal_xattr_ent) + e2[1] + vl2;
		}
		cnt++;
		off += sz;
	}
	goto counted;
bad:
	if (fsck_problem(f, 1,
			 "inode %llu: xattr block %llu: bad entry at offset %u; dropping it and "
			 "the entries after it",
			 in, x, off)) {
		memset(xb + SHOAL_XATTR_ENTRIES_OFF + off, 0, max - off);
		used = off;
		xdirty = 1;
	}
counted:
	if (xh->xh_count != cnt &&
	    fsck_problem(f, 1, "inode %llu: xattr block %llu: xh_count %u, but %u entries", in,
			 x, xh->xh_count, cnt))
		xdirty = 1;
	if (xdirty && f->f_yes) {
		xh->xh_used = used;
		xh->xh_count = cnt;
		meta_update_crc(xb, f->f_bsize);
		blk_write(f, x, xb);
	}
	return 1;
}

/* --- pass 4 ----------------------------------------------------------------- */

static int map_one(struct fsck *f, struct fsck_ino *fi, struct bwalk *bw, uint8_t *dib,
		   uint8_t *xb)
{
	struct shoal_dinode *di = (void *)dib;
	unsigned long long ino = fi->fi_ino;
	uint32_t type = fi->fi_mode & S_IFMT;
	int dirty = 0, err;

	err = ino_read(f, fi, dib);
	if (err)
		return err == -EUCLEAN ? 0 : err;
	if ((type == S_IFREG || type == S_IFLNK) && di->di_height) {
		bw->bw_ino = fi->fi_ino;
		bw->bw_kind = BW_FILE;
		bw->bw_count = 0;
		bw->bw_end = 0;
		if (bw_level(bw, (uint64_t *)(dib + SHOAL_DI_PAYLOAD_OFF), SHOAL_DI_PTRS(f->f_bsize),
			     di->di_height, 0, bmap_span(f, di->di_height)) > 0)
			dirty = 1;
		fi->fi_blocks += bw->bw_count;
	}
	if ((type == S_IFREG || type == S_IFLNK) && di->di_size > (uint64_t)INT64_MAX) {
		/* no file offset reaches it (off_t is signed): the largest size
		 * that keeps every byte the file has */
		uint64_t size = di->di_height ? bw->bw_end * f->f_bsize : SHOAL_DI_PAYLOAD(f->f_bsize);
		if (fsck_problem(f, 1, "inode %llu: di_size %llu is 2^63 or more; setting it to %llu",
				 ino, (unsigned long long)di->di_size, (unsigned long long)size)) {
			di->di_size = size;
			dirty = 1;
		}
	} else if (type != S_IFREG && type != S_IFLNK && type != S_IFDIR) {
		if (di->di_height &&
		    fsck_problem(f, 1, "inode %llu: %s has a block map (height %u); dropping it",
				 ino, mode_name(di->di_mode), di->di_height)) {
			di->di_height = 0;
			memset(dib + SHOAL_DI_PAYLOAD_OFF, 0, SHOAL_DI_PAYLOAD(f->f_bsize));
			dirty = 1;
		}
		if (di->di_size &&
		    fsck_problem(f, 1, "inode %llu: %s has di_size %llu; setting it to 0", ino,
				 mode_name(di->di_mode), (unsigned long long)di->di_size)) {
			di->di_size = 0;
			dirty = 1;
		}
	}
	if (di->di_depth > SHOAL_MAX_DEPTH && !(di->di_flags & SHOAL_DIF_EXHASH) &&
	    fsck_problem(f, 1, "inode %llu: di_depth %u is out of range; setting it to 0", ino,
			 di->di_depth)) {
		di->di_depth = 0;
		dirty = 1;
	}
	fi->fi_blocks += (uint64_t)xattr_check(f, fi->fi_ino, dib, xb, &dirty);
	if (dirty && f->f_yes)
		ino_write(f, fi->fi_ino, dib);
	fi->fi_flags |= FI_MAPPED;
	return 0;
}

int fsck_maps(struct fsck *f)
{
	struct fsck_ino **list;
	uint8_t *dib = blk_alloc(f), *xb = blk_alloc(f);
	struct bwalk bw;
	uint64_t n = 0;
	int err = -ENOMEM;

	if (bw_init(f, &bw) || !dib || !xb)
		goto out;
	list = itab_sorted(f, &n);
	if (!list)
		goto out;
	err = 0;
	/* invariant 3: referenced inodes first, orphans last */
	for (int round = 0; round < 2 && !err; round++) {
		for (uint64_t i = 0; i < n && !err; i++) {
			struct fsck_ino *fi = list[i];
			fsck_progress(f, round * n + i, 2 * n);
			if (!(fi->fi_flags & FI_VALID) || (fi->fi_flags & FI_MAPPED) ||
			    !!(fi->fi_flags & FI_ORPHAN) != round)
				continue;
			err = map_one(f, fi, &bw, dib, xb);
		}
	}
	free(list);
out:
	bw_destroy(&bw);
	free(dib);
	free(xb);
	return err;
}

/* --- pass 5b: counts -------------------------------------------------------- */

int fsck_counts(struct fsck *f)
{
	uint64_t root = f->f_sb.sb_root;
	uint8_t *b = blk_alloc(f);

	if (!b)
		return -ENOMEM;
	for (uint64_t r = 0; r < f->f_icount; r++) {
		struct fsck_ino *fi = itab_rec(f, r);
		struct shoal_dinode *di = (void *)b;
		unsigned long long ino = fi->fi_ino;
		int isdir = S_ISDIR(fi->fi_mode), dirty = 0;
		uint32_t want_nlink;
		uint64_t want_parent;

		fsck_progress(f, r, f->f_icount);
		if (!(fi->fi_flags & FI_VALID) || (fi->fi_flags & (FI_FREED | FI_ORPHAN | FI_LOST)))
			continue;
		want_nlink = isdir ? 2 + fi->fi_subdirs : fi->fi_refs;
		want_parent = fi->fi_ino == root ? root : fi->fi_parent;
		if (ino_read(f, fi, b))
			continue;
		if (di->di_nlink != want_nlink &&
		    fsck_problem(f, 1, "inode %llu: di_nlink %u, should be %u", ino, di->di_nlink,
				 want_nlink)) {
			di->di_nlink = want_nlink;
			dirty = 1;
		}
		if (di->di_blocks != fi->fi_blocks &&
		    fsck_problem(f, 1, "inode %llu: di_blocks %llu, should be %llu", ino,
				 (unsigned long long)di->di_blocks,
				 (unsigned long long)fi->fi_blocks)) {
			di->di_blocks = fi->fi_blocks;
			dirty = 1;
		}
		if (isdir && di->di_entries != fi->fi_entries &&
		    fsck_problem(f, 1, "directory %llu: di_entries %u, should be %u", ino,
				 di->di_entries, fi->fi_entries)) {
			di->di_entries = fi->fi_entries;
			dirty = 1;
		}
		if (isdir && want_parent && di->di_parent != want_parent &&
		    fsck_problem(f, 1, "directory %llu: di_parent %llu, should be %llu", ino,
				 (unsigned long long)di->di_parent,
				 (unsigned long long)want_parent)) {
			di->di_parent = want_parent;
			dirty = 1;
		}
		if (dirty && f->f_yes)
			ino_write(f, fi->fi_ino, b);
	}
	free(b);
	return 0;
}

const char *fsck_mode_name(uint32_t mode)
{
	return mode_name(mode);
}

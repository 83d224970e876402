/*
 * dir.c - directories: inline while small, extendible hashing once they
 * outgrow the dinode (FORMAT.md "directories").
 *
 * A hashed directory's data blocks (through the block map) are its hash
 * table: 2^di_depth leaf addresses indexed by the top di_depth bits of the
 * 63-bit name hash.  A leaf of depth d is named by 2^(D-d) consecutive table
 * slots; a full leaf splits in two (doubling the table when d == D), and a
 * leaf that cannot split any more chains an overflow leaf (lf_next).
 * Lookup reads one table block and one leaf: fast at a million entries.
 *
 * Invariants (fs_lock):
 *  (1) every entry's de_hash is meta_name_hash of its name, and it lies in
 *      the hash range of the leaf that holds it;
 *  (2) names in a directory are unique, and so are hashes (a second name
 *      with the same 63-bit hash is refused with EEXIST: 2^-63 odds);
 *  (3) restructuring (conversion to hashed, split, table doubling) happens
 *      in dir_prepare(), each step a consistent state of its own, so that
 *      dir_add() after it never restructures and never fails for space.
 */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "meta.h"

struct dent {
	uint64_t hash;
	uint64_t ino;
	uint8_t type;
	uint8_t namelen;
	const char *name;
};

static uint64_t name_hash(struct shoal_fs *fs, const char *name, size_t len)
{
	return meta_name_hash(fs->fs_sb.sb_hash_seed, name, len);
}

static int is_hashed(struct shoal_inode *dp)
{
	return (ip_di(dp)->di_flags & SHOAL_DIF_EXHASH) != 0;
}

/* --- packed entry areas (inline payload or leaf) --------------------- */

/* Decode the entry at p (within an area of `left` bytes); 0 or -EUCLEAN. */
static int ent_decode(const uint8_t *p, uint32_t left, struct dent *d)
{
	struct shoal_dirent de;
	if (left < sizeof(de))
		return -EUCLEAN;
	memcpy(&de, p, sizeof(de));
	if (de.de_namelen == 0 || SHOAL_DIRENT_SIZE(de.de_namelen) > left)
		return -EUCLEAN;
	d->hash = de.de_hash;
	d->ino = de.de_ino;
	d->type = de.de_type;
	d->namelen = de.de_namelen;
	d->name = (const char *)p + sizeof(de);
	return 0;
}

static void ent_encode(uint8_t *p, uint64_t hash, uint64_t ino, uint8_t type, const char *name,
		       size_t len)
{
	struct shoal_dirent de = {.de_hash = hash, .de_ino = ino, .de_type = type,
				  .de_namelen = (uint8_t)len};
	memcpy(p, &de, sizeof(de));
	memcpy(p + sizeof(de), name, len);
}

/* Find name in an area: offset of the entry or -ENOENT (-EUCLEAN if bad). */
static int area_find(const uint8_t *area, uint32_t used, uint64_t hash, const char *name,
		     size_t len, struct dent *out)
{
	uint32_t off = 0;
	while (off < used) {
		struct dent d;
		if (ent_decode(area + off, used - off, &d))
			return -EUCLEAN;
		if (d.hash == hash) {
			if (d.namelen == len && !memcmp(d.name, name, len)) {
				if (out)
					*out = d;
				return (int)off;
			}
			return -EEXIST; /* same hash, other name: see (2) */
		}
		off += SHOAL_DIRENT_SIZE(d.namelen);
	}
	return -ENOENT;
}

/* --- inline directories ---------------------------------------------- */

static struct shoal_inline_dir *idir(struct shoal_inode *dp)
{
	return (struct shoal_inline_dir *)(dp->i_bh->b_data + SHOAL_DI_PAYLOAD_OFF);
}

static uint8_t *idir_area(struct shoal_inode *dp)
{
	return dp->i_bh->b_data + SHOAL_DI_PAYLOAD_OFF + sizeof(struct shoal_inline_dir);
}

static uint32_t idir_cap(struct shoal_fs *fs)
{
	return SHOAL_DI_PAYLOAD(fs->fs_bsize) - sizeof(struct shoal_inline_dir);
}

void dir_init_inline(struct shoal_fs *fs, struct shoal_inode *dp)
{
	memset(dp->i_bh->b_data + SHOAL_DI_PAYLOAD_OFF, 0, SHOAL_DI_PAYLOAD(fs->fs_bsize));
}

/* --- hash table -------------------------------------------------------- */

static uint32_t ht_per(struct shoal_fs *fs)
{
	return SHOAL_HT_PTRS(fs->fs_bsize);
}

static uint64_t ht_index(struct shoal_inode *dp, uint64_t hash)
{
	uint32_t d = ip_di(dp)->di_depth;
	return d ? hash >> (63 - d) : 0;
}

static int ht_block(struct shoal_fs *fs, struct shoal_inode *dp, uint64_t idx,
		    struct shoal_buf **b)
{
	uint64_t pblk;
	uint32_t run;
	int err = bmap_get(fs, dp, idx / ht_per(fs), &pblk, &run);
	if (err)
		return err;
	if (pblk == 0)
		return fs_corrupt(fs, dp->i_ino, "directory hash table has a hole") ? -EIO : -EIO;
	return buf_read_gen(fs, inode_gen(fs, dp), pblk, SHOAL_MT_HTABLE, b);
}

static int ht_get(struct shoal_fs *fs, struct shoal_inode *dp, uint64_t idx, uint64_t *leaf)
{
	struct shoal_buf *b;
	int err = ht_block(fs, dp, idx, &b);
	if (err)
		return err;
	*leaf = ((uint64_t *)(b->b_data + SHOAL_HT_PTR_OFF))[idx % ht_per(fs)];
	buf_put(fs, b);
	if (*leaf < fs->fs_sb.sb_rgfirst || *leaf >= fs->fs_sb.sb_blocks - 1)
		return fs_corrupt(fs, dp->i_ino, "hash table points outside the device") ? -EIO : -EIO;
	return 0;
}

static int ht_set_range(struct shoal_fs *fs, struct shoal_inode *dp, uint64_t first,
			uint64_t count, uint64_t leaf)
{
	while (count) {
		struct shoal_buf *b;
		int err = ht_block(fs, dp, first, &b);
		if (err)
			return err;
		trans_add(fs, b);
		uint64_t *p = (uint64_t *)(b->b_data + SHOAL_HT_PTR_OFF);
		do {
			p[first % ht_per(fs)] = leaf;
			first++;
			count--;
		} while (count && first % ht_per(fs));
		buf_put(fs, b);
	}
	return 0;
}

static int leaf_read(struct shoal_fs *fs, struct shoal_inode *dp, uint64_t blk,
		     struct shoal_buf **b)
{
	int err = buf_read_ip(fs, dp, blk, SHOAL_MT_LEAF, b);
	if (err)
		return err;
	struct shoal_leaf *lf = (void *)(*b)->b_data;
	if (lf->lf_used > fs->fs_bsize - SHOAL_LEAF_ENTRIES_OFF ||
	    lf->lf_depth > ip_di(dp)->di_depth || lf->lf_next == blk) {
		buf_put(fs, *b);
		return fs_corrupt_ino(fs, blk, dp->i_ino, "directory leaf header") ? -EIO : -EIO;
	}
	return 0;
}

/*
 * One step along a leaf chain, from leaf lb (the steps-th leaf of the
 * chain) to its lf_next in *next (0: the chain ends).  A chain is at most
 * as long as the directory has blocks; a longer one loops (on-disk input:
 * a leaf pointing back into its own chain) and is damage, as is a chained
 * leaf whose depth is not the chain's.
 */
static int chain_next(struct shoal_fs *fs, struct shoal_inode *dp, struct shoal_buf *lb,
		      uint64_t *steps, uint64_t *next)
{
	struct shoal_leaf *lf = (void *)lb->b_data;

	*next = lf->lf_next;
	if (!*next)
		return 0;
	if (++*steps >= ip_di(dp)->di_blocks)
		return fs_corrupt_ino(fs, lb->b_blkno, dp->i_ino,
				      "directory leaf chain does not end") ? -EIO : -EIO;
	return 0;
}

/* Read the next leaf of a chain: its depth must be that of the chain. */
static int chain_read(struct shoal_fs *fs, struct shoal_inode *dp, uint64_t blk, uint32_t depth,
		      struct shoal_buf **b)
{
	int err = leaf_read(fs, dp, blk, b);
	if (err)
		return err;
	if (((struct shoal_leaf *)(*b)->b_data)->lf_depth != depth) {
		buf_put(fs, *b);
		return fs_corrupt_ino(fs, blk, dp->i_ino, "chained leaf of another depth") ? -EIO
											 : -EIO;
	}
	return 0;
}

static int leaf_new(struct shoal_fs *fs, struct shoal_inode *dp, uint16_t depth,
		    struct shoal_buf **out)
{
	struct shoal_dinode *di = ip_di(dp);
	uint64_t blk;
	uint32_t got;
	int err = rg_alloc(fs, di->di_goal + 1, 1, SHOAL_B_DATA, &blk, &got);
	if (err)
		return err;
	err = buf_new(fs, blk, out);
	if (err) {
		rg_free(fs, blk, 1);
		return err;
	}
	meta_seal((*out)->b_data, fs->fs_bsize, SHOAL_MT_LEAF, blk, 0);
	trans_add(fs, *out);
	((struct shoal_leaf *)(*out)->b_data)->lf_depth = depth;
	inode_dirty(fs, dp, 1);
	di->di_blocks++;
	di->di_goal = blk;
	return 0;
}

static uint32_t leaf_cap(struct shoal_fs *fs)
{
	return fs->fs_bsize - SHOAL_LEAF_ENTRIES_OFF;
}

/* Make sure logical table block lb exists (allocating an HTABLE block). */
static int ht_ensure_block(struct shoal_fs *fs, struct shoal_inode *dp, uint64_t lb)
{
	uint64_t pblk;
	uint32_t run;
	int isnew, err = bmap_alloc(fs, dp, lb, 1, &pblk, &run, &isnew);
	if (err || !isnew)
		return err;
	struct shoal_buf *b;
	err = buf_new(fs, pblk, &b);
	if (err)
		return err;
	meta_seal(b->b_data, fs->fs_bsize, SHOAL_MT_HTABLE, pblk, 0);
	trans_add(fs, b);
	buf_put(fs, b);
	return 0;
}

/* Inline -> hashed: all entries move to one leaf of depth 0. */
static int dir_convert(struct shoal_fs *fs, struct shoal_inode *dp)
{
	struct shoal_dinode *di = ip_di(dp);
	struct shoal_inline_dir *id = idir(dp);
	struct shoal_buf *lb;
	uint32_t used = id->id_used;
	int err;

	err = trans_begin_alloc(fs, 8, 2);
	if (err)
		return err;
	err = leaf_new(fs, dp, 0, &lb);
	if (err)
		return err;
	struct shoal_leaf *lf = (void *)lb->b_data;
	memcpy(lb->b_data + SHOAL_LEAF_ENTRIES_OFF, idir_area(dp), used);
	lf->lf_used = used;
	lf->lf_count = (uint16_t)di->di_entries;
	inode_dirty(fs, dp, 1);
	memset(dp->i_bh->b_data + SHOAL_DI_PAYLOAD_OFF, 0, SHOAL_DI_PAYLOAD(fs->fs_bsize));
	di->di_flags |= SHOAL_DIF_EXHASH;
	di->di_depth = 0;
	di->di_size = 8;
	di->di_height = 1;
	err = ht_ensure_block(fs, dp, 0);
	if (!err)
		err = ht_set_range(fs, dp, 0, 1, lb->b_blkno);
	buf_put(fs, lb);
	return err;
}

/* Double the table: entry i of the new table is entry i/2 of the old. */
static int ht_double(struct shoal_fs *fs, struct shoal_inode *dp)
{
	struct shoal_dinode *di = ip_di(dp);
	uint64_t old = 1ull << di->di_depth, *tab;
	uint32_t per = ht_per(fs);
	uint64_t nblocks = (2 * old + per - 1) / per;
	int err;

	if (di->di_depth >= SHOAL_MAX_DEPTH)
		return -ENOSPC;
	err = trans_begin_alloc(fs, (uint32_t)(nblocks + SHOAL_MAX_HEIGHT * 2 + 4),
				nblocks + SHOAL_MAX_HEIGHT);
	if (err)
		return err; /* -EFBIG: table too big for one transaction: chain */
	tab = malloc(old * 8);
	if (!tab)
		return -ENOMEM;
	for (uint64_t i = 0; i < old; i++) {
		err = ht_get(fs, dp, i, &tab[i]);
		if (err)
			goto out;
	}
	for (uint64_t lb = 0; lb < nblocks; lb++) {
		err = ht_ensure_block(fs, dp, lb);
		if (err)
			goto out;
	}
	inode_dirty(fs, dp, 1);
	di->di_depth++;
	di->di_size = 2 * old * 8;
	for (uint64_t i = 0; i < 2 * old; i++) {
		err = ht_set_range(fs, dp, i, 1, tab[i / 2]);
		if (err)
			goto out;
	}
out:
	free(tab);
	return err;
}

/* Split the leaf at table slot idx (its depth < di_depth). */
static int leaf_split(struct shoal_fs *fs, struct shoal_inode *dp, uint64_t idx)
{
	struct shoal_dinode *di = ip_di(dp);
	struct shoal_buf *ob, *nb;
	uint64_t oblk;
	int err;

	err = trans_begin_alloc(fs, 8 + SHOAL_MAX_HEIGHT, 1);
	if (err)
		return err;
	err = ht_get(fs, dp, idx, &oblk);
	if (!err)
		err = leaf_read(fs, dp, oblk, &ob);
	if (err)
		return err;
	struct shoal_leaf *olf = (void *)ob->b_data;
	uint32_t d = olf->lf_depth;
	uint64_t width = 1ull << (di->di_depth - d), start = idx & ~(width - 1);
	err = leaf_new(fs, dp, (uint16_t)(d + 1), &nb);
	if (err)
		goto out_put;
	trans_add(fs, ob);
	struct shoal_leaf *nlf = (void *)nb->b_data;
	/* entries whose bit (62 - d) is set move to the new (upper) leaf */
	int moved = meta_dirents_split(ob->b_data + SHOAL_LEAF_ENTRIES_OFF, &olf->lf_used,
				       nb->b_data + SHOAL_LEAF_ENTRIES_OFF, &nlf->lf_used, 62 - d);
	if (moved < 0) {
		err = fs_corrupt(fs, oblk, "directory leaf entry") ? -EIO : -EIO;
		if (rg_free(fs, nb->b_blkno, 1) == 0) /* nothing points at it yet */
			di->di_blocks--;
		goto out_new;
	}
	olf->lf_depth = (uint16_t)(d + 1);
	nlf->lf_count = (uint16_t)moved;
	olf->lf_count = (uint16_t)(olf->lf_count - moved);
	err = ht_set_range(fs, dp, start + width / 2, width / 2, nb->b_blkno);
out_new:
	buf_put(fs, nb);
out_put:
	buf_put(fs, ob);
	return err;
}

/*
 * Ensure an entry of namelen bytes can be added with dir_add() without
 * restructuring; may convert, split or double (each its own transaction).
 */
static int dir_prepare(struct shoal_fs *fs, struct shoal_inode *dp, size_t namelen)
{
	uint32_t need = SHOAL_DIRENT_SIZE(namelen);
	int err;

	if (!is_hashed(dp)) {
		if (idir(dp)->id_used + need <= idir_cap(fs))
			return 0;
		err = dir_convert(fs, dp);
		if (err)
			return err;
	}
	/* the name is not known here; prepare_name() does the real work */
	return 0;
}

static int prepare_name(struct shoal_fs *fs, struct shoal_inode *dp, uint64_t hash,
			size_t namelen)
{
	uint32_t need = SHOAL_DIRENT_SIZE(namelen);
	int err = dir_prepare(fs, dp, namelen);

	if (err || !is_hashed(dp))
		return err;
	for (int tries = 0; tries < SHOAL_MAX_DEPTH * 2 + 4; tries++) {
		struct shoal_dinode *di = ip_di(dp);
		uint64_t idx = ht_index(dp, hash), blk;
		struct shoal_buf *b;
		err = ht_get(fs, dp, idx, &blk);
		if (!err)
			err = leaf_read(fs, dp, blk, &b);
		if (err)
			return err;
		struct shoal_leaf *lf = (void *)b->b_data;
		uint32_t d = lf->lf_depth;
		int fits = lf->lf_used + need <= leaf_cap(fs);
		/* a chained leaf with room also does */
		uint64_t next, steps = 0;
		err = chain_next(fs, dp, b, &steps, &next);
		buf_put(fs, b);
		if (err)
			return err;
		while (!fits && next) {
			err = chain_read(fs, dp, next, d, &b);
			if (err)
				return err;
			lf = (void *)b->b_data;
			fits = lf->lf_used + need <= leaf_cap(fs);
			err = chain_next(fs, dp, b, &steps, &next);
			buf_put(fs, b);
			if (err)
				return err;
		}
		if (fits)
			return 0;
		/* a chained leaf is never split (the chain would keep entries of
		 * both halves): it only grows its chain */
		int chained = 0;
		if (leaf_read(fs, dp, blk, &b) == 0) {
			chained = ((struct shoal_leaf *)b->b_data)->lf_next != 0;
			buf_put(fs, b);
		}
		if (!chained && d < di->di_depth) {
			err = leaf_split(fs, dp, idx);
		} else {
			err = chained ? -EFBIG : ht_double(fs, dp);
			if (err == -EFBIG || err == -ENOSPC) {
				/* cannot grow the table: chain a leaf to the last one */
				struct shoal_buf *nb, *lb;
				uint64_t last = blk, nx;
				err = trans_begin_alloc(fs, 8, 1);
				if (err)
					return err;
				steps = 0;
				for (;;) {
					err = chain_read(fs, dp, last, d, &lb);
					if (err)
						return err;
					err = chain_next(fs, dp, lb, &steps, &nx);
					if (err || !nx)
						break;
					buf_put(fs, lb);
					last = nx;
				}
				if (err) {
					buf_put(fs, lb);
					return err;
				}
				err = leaf_new(fs, dp, (uint16_t)d, &nb);
				if (!err) {
					trans_add(fs, lb);
					((struct shoal_leaf *)lb->b_data)->lf_next = nb->b_blkno;
					buf_put(fs, nb);
				}
				buf_put(fs, lb);
				return err;
			}
		}
		if (err)
			return err;
	}
	return fs_corrupt(fs, dp->i_ino, "directory cannot make room") ? -EIO : -EIO;
}

int dir_make_room(struct shoal_fs *fs, struct shoal_inode *dp, const char *name)
{
	size_t len = strlen(name);
	return prepare_name(fs, dp, name_hash(fs, name, len), len);
}

/* --- lookup / add / remove ---------------------------------------------- */

/* Find the leaf buffer and offset holding hash/name; *b referenced. */
static int hashed_find(struct shoal_fs *fs, struct shoal_inode *dp, uint64_t hash,
		       const char *name, size_t len, struct shoal_buf **b, struct dent *d)
{
	uint64_t blk;
	int err = ht_get(fs, dp, ht_index(dp, hash), &blk);
	if (err)
		return err;
	uint64_t steps = 0;
	uint32_t depth = 0;
	for (int first = 1; blk; first = 0) {
		struct shoal_buf *lb;
		err = first ? leaf_read(fs, dp, blk, &lb) : chain_read(fs, dp, blk, depth, &lb);
		if (err)
			return err;
		struct shoal_leaf *lf = (void *)lb->b_data;
		depth = lf->lf_depth;
		int off = area_find(lb->b_data + SHOAL_LEAF_ENTRIES_OFF, lf->lf_used, hash, name, len,
				    d);
		if (off >= 0 || off == -EEXIST) {
			*b = lb;
			return off;
		}
		if (off == -EUCLEAN)
			err = fs_corrupt_ino(fs, blk, dp->i_ino, "directory leaf entries") ? -EIO : -EIO;
		else
			err = chain_next(fs, dp, lb, &steps, &blk);
		buf_put(fs, lb);
		if (err)
			return err;
	}
	return -ENOENT;
}

int dir_lookup(struct shoal_fs *fs, struct shoal_inode *dp, const char *name, uint64_t *ino,
	       uint8_t *type)
{
	size_t len = strlen(name);
	uint64_t hash = name_hash(fs, name, len);
	struct dent d;
	int off;

	if (!is_hashed(dp)) {
		off = area_find(idir_area(dp), idir(dp)->id_used, hash, name, len, &d);
		if (off == -EUCLEAN)
			return fs_corrupt(fs, dp->i_ino, "inline directory entries") ? -EIO : -EIO;
	} else {
		struct shoal_buf *b = NULL;
		off = hashed_find(fs, dp, hash, name, len, &b, &d);
		if (off >= 0 || off == -EEXIST)
			buf_put(fs, b);
	}
	if (off == -EEXIST)
		return -ENOENT;
	if (off < 0)
		return off;
	*ino = d.ino;
	if (type)
		*type = d.type;
	return 0;
}

int dir_add(struct shoal_fs *fs, struct shoal_inode *dp, const char *name, uint64_t ino,
	    uint8_t type)
{
	size_t len = strlen(name);
	uint64_t hash = name_hash(fs, name, len);
	uint32_t need = SHOAL_DIRENT_SIZE(len);
	struct shoal_dinode *di = ip_di(dp);

	if (!is_hashed(dp)) {
		struct shoal_inline_dir *id = idir(dp);
		if (id->id_used + need > idir_cap(fs))
			return -ENOSPC; /* dir_make_room() was not called */
		inode_dirty(fs, dp, 1);
		ent_encode(idir_area(dp) + id->id_used, hash, ino, type, name, len);
		id->id_used += need;
	} else {
		uint64_t blk;
		int err = ht_get(fs, dp, ht_index(dp, hash), &blk);
		if (err)
			return err;
		uint64_t steps = 0;
		uint32_t depth = 0;
		for (int first = 1;; first = 0) {
			struct shoal_buf *lb;
			err = first ? leaf_read(fs, dp, blk, &lb) : chain_read(fs, dp, blk, depth, &lb);
			if (err)
				return err;
			struct shoal_leaf *lf = (void *)lb->b_data;
			depth = lf->lf_depth;
			if (lf->lf_used + need <= leaf_cap(fs)) {
				trans_add(fs, lb);
				ent_encode(lb->b_data + SHOAL_LEAF_ENTRIES_OFF + lf->lf_used, hash, ino,
					   type, name, len);
				lf->lf_used += need;
				lf->lf_count++;
				buf_put(fs, lb);
				break;
			}
			err = chain_next(fs, dp, lb, &steps, &blk);
			buf_put(fs, lb);
			if (err)
				return err;
			if (!blk)
				return -ENOSPC;
		}
		inode_dirty(fs, dp, 1);
	}
	di->di_entries++;
	return 0;
}

static void area_del(uint8_t *area, uint32_t *used, uint32_t off, uint32_t sz)
{
	memmove(area + off, area + off + sz, *used - off - sz);
	*used -= sz;
	memset(area + *used, 0, sz);
}

int dir_remove(struct shoal_fs *fs, struct shoal_inode *dp, const char *name)
{
	size_t len = strlen(name);
	uint64_t hash = name_hash(fs, name, len);
	struct dent d;
	int off;

	if (!is_hashed(dp)) {
		off = area_find(idir_area(dp), idir(dp)->id_used, hash, name, len, &d);
		if (off == -EEXIST)
			return -ENOENT;
		if (off < 0)
			return off == -EUCLEAN ? -EIO : off;
		inode_dirty(fs, dp, 1);
		area_del(idir_area(dp), &idir(dp)->id_used, (uint32_t)off, SHOAL_DIRENT_SIZE(len));
	} else {
		struct shoal_buf *b;
		off = hashed_find(fs, dp, hash, name, len, &b, &d);
		if (off == -EEXIST) {
			buf_put(fs, b);
			return -ENOENT;
		}
		if (off < 0)
			return off;
		trans_add(fs, b);
		struct shoal_leaf *lf = (void *)b->b_data;
		area_del(b->b_data + SHOAL_LEAF_ENTRIES_OFF, &lf->lf_used, (uint32_t)off,
			 SHOAL_DIRENT_SIZE(len));
		lf->lf_count--;
		buf_put(fs, b);
		inode_dirty(fs, dp, 1);
	}
	ip_di(dp)->di_entries--;
	return 0;
}

int dir_replace(struct shoal_fs *fs, struct shoal_inode *dp, const char *name, uint64_t ino,
		uint8_t type)
{
	size_t len = strlen(name);
	uint64_t hash = name_hash(fs, name, len);
	struct shoal_dirent de;
	struct dent d;
	uint8_t *p;
	int off;

	if (!is_hashed(dp)) {
		off = area_find(idir_area(dp), idir(dp)->id_used, hash, name, len, &d);
		if (off < 0)
			return off == -EEXIST ? -ENOENT : off;
		inode_dirty(fs, dp, 1);
		p = idir_area(dp) + off;
		memcpy(&de, p, sizeof(de));
		de.de_ino = ino;
		de.de_type = type;
		memcpy(p, &de, sizeof(de));
		return 0;
	}
	struct shoal_buf *b;
	off = hashed_find(fs, dp, hash, name, len, &b, &d);
	if (off == -EEXIST) {
		buf_put(fs, b);
		return -ENOENT;
	}
	if (off < 0)
		return off;
	trans_add(fs, b);
	p = b->b_data + SHOAL_LEAF_ENTRIES_OFF + off;
	memcpy(&de, p, sizeof(de));
	de.de_ino = ino;
	de.de_type = type;
	memcpy(p, &de, sizeof(de));
	buf_put(fs, b);
	inode_dirty(fs, dp, 1);
	return 0;
}

/* --- iteration ---------------------------------------------------------- */

struct collected {
	struct dent *c_ents;
	size_t c_n, c_cap;
	char *c_names; /* copies, since buffers are put */
	size_t c_nlen, c_ncap;
};

/*
 * An entry readdir may hand out: a name FORMAT.md 8 allows (no NUL, no
 * '/', not "." or ".."), whose de_hash is its name's and lies in the hash
 * range of its leaf (the top `bits` bits are prefix; 0 bits: inline).  A
 * listing must never show a name that a lookup then cannot find, or one
 * no lookup can ask for: such an entry is damage (invariant (1)).
 */
static int ent_sane(struct shoal_fs *fs, const struct dent *d, unsigned bits, uint64_t prefix)
{
	if (memchr(d->name, '\0', d->namelen) || memchr(d->name, '/', d->namelen) ||
	    (d->name[0] == '.' && (d->namelen == 1 || (d->namelen == 2 && d->name[1] == '.'))))
		return -EUCLEAN;
	if (d->hash != name_hash(fs, d->name, d->namelen))
		return -EUCLEAN;
	if (bits && d->hash >> (63 - bits) != prefix)
		return -EUCLEAN;
	return 0;
}

static int collect_area(struct shoal_fs *fs, struct collected *c, const uint8_t *area,
			uint32_t used, uint64_t after, unsigned bits, uint64_t prefix)
{
	uint32_t off = 0;
	while (off < used) {
		struct dent d;
		if (ent_decode(area + off, used - off, &d) || ent_sane(fs, &d, bits, prefix))
			return -EUCLEAN;
		off += SHOAL_DIRENT_SIZE(d.namelen);
		if (d.hash <= after)
			continue;
		if (c->c_n == c->c_cap) {
			size_t nc = c->c_cap ? c->c_cap * 2 : 64;
			void *p = realloc(c->c_ents, nc * sizeof(*c->c_ents));
			if (!p)
				return -ENOMEM;
			c->c_ents = p;
			c->c_cap = nc;
		}
		if (c->c_nlen + d.namelen > c->c_ncap) {
			size_t nc = (c->c_ncap + d.namelen) * 2 + 1024;
			void *p = realloc(c->c_names, nc);
			if (!p)
				return -ENOMEM;
			c->c_names = p;
			c->c_ncap = nc;
		}
		memcpy(c->c_names + c->c_nlen, d.name, d.namelen);
		d.name = (const char *)(uintptr_t)c->c_nlen; /* offset, fixed up later */
		c->c_nlen += d.namelen;
		c->c_ents[c->c_n++] = d;
	}
	return 0;
}

static int cmp_dent(const void *a, const void *b)
{
	const struct dent *x = a, *y = b;
	return x->hash < y->hash ? -1 : x->hash > y->hash;
}

/* Sort what was collected and hand it out; 1 if fn asked to stop. */
static int emit(struct collected *c, dir_iter_fn fn, void *arg)
{
	char name[SHOAL_NAME_MAX + 1];
	if (c->c_n == 0)
		return 0;
	qsort(c->c_ents, c->c_n, sizeof(*c->c_ents), cmp_dent);
	for (size_t i = 0; i < c->c_n; i++) {
		struct dent *d = &c->c_ents[i];
		memcpy(name, c->c_names + (uintptr_t)d->name, d->namelen);
		name[d->namelen] = 0;
		int r = fn(arg, name, d->namelen, d->ino, d->type, d->hash);
		if (r)
			return r < 0 ? r : 1;
	}
	c->c_n = 0;
	c->c_nlen = 0;
	return 0;
}

int dir_iterate(struct shoal_fs *fs, struct shoal_inode *dp, uint64_t after, dir_iter_fn fn,
		void *arg)
{
	struct collected c = {0};
	int err = 0;

	if (!is_hashed(dp)) {
		err = collect_area(fs, &c, idir_area(dp), idir(dp)->id_used, after, 0, 0);
		if (err == -EUCLEAN)
			err = fs_corrupt(fs, dp->i_ino, "inline directory entries") ? -EIO : -EIO;
		if (!err)
			err = emit(&c, fn, arg);
		goto out;
	}
	uint32_t depth = ip_di(dp)->di_depth;
	uint64_t size = 1ull << depth;
	uint64_t i = after + 1 >= (1ull << 63) ? size : ht_index(dp, after + 1);
	while (i < size) {
		uint64_t blk;
		struct shoal_buf *lb;
		err = ht_get(fs, dp, i, &blk);
		if (err)
			goto out;
		uint32_t ld = 0;
		uint64_t steps = 0, leaf0 = blk;
		for (int first = 1; blk; first = 0) {
			err = first ? leaf_read(fs, dp, blk, &lb) : chain_read(fs, dp, blk, ld, &lb);
			if (err)
				goto out;
			struct shoal_leaf *lf = (void *)lb->b_data;
			ld = lf->lf_depth; /* <= depth: leaf_read */
			err = collect_area(fs, &c, lb->b_data + SHOAL_LEAF_ENTRIES_OFF, lf->lf_used,
					   after, ld, ld ? i >> (depth - ld) : 0);
			if (err == -EUCLEAN)
				err = fs_corrupt_ino(fs, lb->b_blkno, dp->i_ino,
						     "directory leaf entries") ? -EIO : -EIO;
			if (!err)
				err = chain_next(fs, dp, lb, &steps, &blk);
			buf_put(fs, lb);
			if (err)
				goto out;
		}
		uint64_t width = 1ull << (depth - ld);
		/* the depth rule: every entry of the leaf's range names it, or
		 * a lookup would search another leaf for a name listed here */
		for (uint64_t s = i & ~(width - 1); s < (i & ~(width - 1)) + width; s++) {
			uint64_t other;
			err = ht_get(fs, dp, s, &other);
			if (err)
				goto out;
			if (other != leaf0) {
				err = fs_corrupt_ino(fs, leaf0, dp->i_ino,
						     "hash table does not name this leaf across its range")
					      ? -EIO
					      : -EIO;
				goto out;
			}
		}
		i = (i & ~(width - 1)) + width;
		err = emit(&c, fn, arg);
		if (err)
			break;
	}
out:
	free(c.c_ents);
	free(c.c_names);
	return err < 0 ? err : 0;
}

/* Free every leaf of a hashed directory (its table goes with its bmap). */
int dir_destroy(struct shoal_fs *fs, struct shoal_inode *dp)
{
	struct shoal_dinode *di = ip_di(dp);
	if (!is_hashed(dp))
		return 0;
	uint64_t size = 1ull << di->di_depth, i = 0;
	while (i < size) {
		uint64_t blk;
		struct shoal_buf *lb;
		int err = ht_get(fs, dp, i, &blk);
		if (err)
			return err;
		err = leaf_read(fs, dp, blk, &lb);
		if (err)
			return err;
		uint32_t ld = ((struct shoal_leaf *)lb->b_data)->lf_depth; /* <= di_depth */
		uint64_t width = 1ull << (di->di_depth - ld), next, steps = 0;
		err = chain_next(fs, dp, lb, &steps, &next);
		buf_put(fs, lb);
		if (err)
			return err;
		err = rg_free(fs, blk, 1);
		if (err)
			return err;
		di->di_blocks--;
		while (next) {
			uint64_t nn;
			err = chain_read(fs, dp, next, ld, &lb);
			if (err)
				return err;
			err = chain_next(fs, dp, lb, &steps, &nn);
			buf_put(fs, lb);
			if (err)
				return err;
			err = rg_free(fs, next, 1);
			if (err)
				return err;
			di->di_blocks--;
			next = nn;
		}
		i = (i & ~(width - 1)) + width;
	}
	return 0;
}

/*
 * fsck_lost.c - pass 5a of fsck.shoal: what the walk could not attach.
 * Directory leaves found bad in pass 2 are replaced by empty ones, orphans
 * are freed (-y) or counted (-n), inodes no directory references are moved
 * to /lost+found (created if needed), and directory cycles unreachable from
 * the root are reported.  Also the directory writing those repairs need:
 * inserting an entry, and growing a directory the way core/dir.c does
 * (inline to hashed, leaf split, table doubling).
 *
 * Invariants:
 *  (1) runs after every block claim (passes 2-4), so fsck_alloc() never
 *      hands out a block something uses;
 *  (2) an insertion keeps every count straight on disk and in the inode
 *      table at once (di_entries, di_nlink, di_blocks, di_parent), so pass
 *      5b has nothing to say about a directory fsck itself changed;
 *  (3) the format's directory rules hold after each step: an entry goes to
 *      the leaf (or chain) of its hash, a split moves the entries whose bit
 *      62-d is set and repoints the upper half of the run, a doubled table
 *      repeats each entry twice; fsck never chains a leaf;
 *  (4) a lost inode is named "#<inode number>" (".N" appended if taken).
 */
#include "fsck.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "meta.h"

#define FI_TMP 0x0800   /* connectivity walk: on the current path */
#define FI_UNCONN 0x1000 /* connectivity walk: not reachable from the root */

/* --- new directories ------------------------------------------------------- */

void now_ts(struct shoal_ts *ts)
{
	struct timespec t;

	clock_gettime(CLOCK_REALTIME, &t);
	ts->ts_sec = t.tv_sec;
	ts->ts_nsec = (uint32_t)t.tv_nsec;
	ts->ts_pad = 0;
}

/* An empty inline directory dinode at blkno. */
void dir_make(struct fsck *f, uint8_t *b, uint64_t blkno, uint64_t parent, uint32_t perm)
{
	struct shoal_dinode *di = (void *)b;

	memset(b, 0, f->f_bsize);
	di->di_mode = S_IFDIR | perm;
	di->di_nlink = 2;
	di->di_blocks = 1;
	now_ts(&di->di_atime);
	di->di_mtime = di->di_ctime = di->di_crtime = di->di_atime;
	di->di_generation = 1;
	di->di_parent = parent;
	meta_seal(b, f->f_bsize, SHOAL_MT_DINODE, blkno, 0);
}

/* --- pass 5a: inserting entries ------------------------------------------------ */

/* Insert an entry at its hash position in packed entries ents[0..*used). */
static void entry_insert(uint8_t *ents, uint32_t *used, uint64_t h, const char *name, uint8_t len,
			 uint64_t ino, uint8_t dt)
{
	uint32_t off = 0, sz = (uint32_t)sizeof(struct shoal_dirent) + len;
	struct shoal_dirent de = { .de_hash = h, .de_ino = ino, .de_type = dt, .de_namelen = len };

	while (off + sizeof(struct shoal_dirent) <= *used) {
		const struct shoal_dirent *e = (const void *)(ents + off);
		if (e->de_hash > h)
			break;
		off += (uint32_t)sizeof(*e) + e->de_namelen;
	}
	if (off > *used)
		off = *used;
	memmove(ents + off + sz, ents + off, *used - off);
	memcpy(ents + off, &de, sizeof(de));
	memcpy(ents + off + sizeof(de), name, len);
	*used += sz;
}

static int ents_find(const uint8_t *ents, uint32_t used, uint64_t h, const char *name,
		     uint8_t len)
{
	uint32_t off = 0;

	while (off + sizeof(struct shoal_dirent) <= used) {
		const struct shoal_dirent *e = (const void *)(ents + off);
		if (off + sizeof(*e) + e->de_namelen > used)
			break;
		if (e->de_hash == h && e->de_namelen == len &&
		    !memcmp(ents + off + sizeof(*e), name, len))
			return 1;
		off += (uint32_t)sizeof(*e) + e->de_namelen;
	}
	return 0;
}

/*
 * Find (insert 0) or insert (insert 1) name in directory dir, whose dinode
 * is in dib.  Returns 1 if found, 0 if not found or inserted, -ENOSPC when
 * there is no room without splitting, other -errno on errors.
 */
static int dir_op(struct fsck *f, uint64_t dir, uint8_t *dib, const char *name, uint8_t len,
		  uint64_t ino, uint8_t dt, int insert)
{
	struct shoal_dinode *di = (void *)dib;
	uint64_t h = meta_name_hash(f->f_seed, name, len), hp = SHOAL_HT_PTRS(f->f_bsize);
	uint32_t sz = (uint32_t)sizeof(struct shoal_dirent) + len;
	uint64_t idx, tb, L;
	uint8_t *b;
	int err, hops = 0;

	if (!(di->di_flags & SHOAL_DIF_EXHASH)) {
		struct shoal_inline_dir *id = (void *)(dib + SHOAL_DI_PAYLOAD_OFF);
		uint8_t *ents = dib + SHOAL_DI_PAYLOAD_OFF + sizeof(*id);
		uint32_t max = SHOAL_DI_PAYLOAD(f->f_bsize) - sizeof(*id);
		if (id->id_used > max)
			return -EUCLEAN;
		if (!insert)
			return ents_find(ents, id->id_used, h, name, len);
		if (id->id_used + sz > max)
			return -ENOSPC;
		entry_insert(ents, &id->id_used, h, name, len, ino, dt);
		return 0;
	}
	if (di->di_depth > SHOAL_MAX_DEPTH)
		return -EUCLEAN;
	idx = di->di_depth ? h >> (63 - di->di_depth) : 0;
	tb = bmap_lookup(f, dib, idx / hp);
	b = blk_alloc(f);
	if (!b)
		return -ENOMEM;
	err = -EUCLEAN;
	if (!tb || blk_read(f, tb, b) || meta_check(b, f->f_bsize, SHOAL_MT_HTABLE, tb))
		goto out;
	L = ((const uint64_t *)(b + SHOAL_HT_PTR_OFF))[idx % hp];
	for (; L && hops < 1024; hops++) {
		struct shoal_leaf *lf = (void *)b;
		uint8_t *ents = b + SHOAL_LEAF_ENTRIES_OFF;
		uint32_t max = f->f_bsize - SHOAL_LEAF_ENTRIES_OFF;

		err = -EUCLEAN;
		if (!fsck_covered(f, L) || blk_read(f, L, b) ||
		    meta_check(b, f->f_bsize, SHOAL_MT_LEAF, L) || lf->lf_used > max)
			goto out;
		if (!insert && ents_find(ents, lf->lf_used, h, name, len)) {
			err = 1;
			goto out;
		}
		if (insert && lf->lf_used + sz <= max) {
			entry_insert(ents, &lf->lf_used, h, name, len, ino, dt);
			lf->lf_count++;
			meta_update_crc(b, f->f_bsize);
			err = blk_write(f, L, b);
			goto out;
		}
		L = lf->lf_next;
	}
	err = insert ? -ENOSPC : 0;
out:
	free(b);
	return err;
}

/* Set table entries first .. first+count-1 of the directory in dib to leaf. */
static int table_set(struct fsck *f, const uint8_t *dib, uint8_t *b, uint64_t first,
		     uint64_t count, uint64_t leaf)
{
	uint64_t hp = SHOAL_HT_PTRS(f->f_bsize);

	while (count) {
		uint64_t tb = bmap_lookup(f, dib, first / hp);
		int err;

		if (!tb || blk_read(f, tb, b) || meta_check(b, f->f_bsize, SHOAL_MT_HTABLE, tb))
			return -EUCLEAN;
		do {
			((uint64_t *)(b + SHOAL_HT_PTR_OFF))[first % hp] = leaf;
			first++;
			count--;
		} while (count && first % hp);
		meta_update_crc(b, f->f_bsize);
		err = blk_write(f, tb, b);
		if (err)
			return err;
	}
	return 0;
}

/* A new block for directory dir: counted in the dinode (dib) and the table. */
static int dir_newblock(struct fsck *f, struct fsck_ino *dir, uint8_t *dib, uint64_t *blk)
{
	int err = fsck_alloc(f, SHOAL_B_DATA, blk);

	if (err)
		return err;
	((struct shoal_dinode *)dib)->di_blocks++;
	dir->fi_blocks++;
	dir->fi_dblocks++;
	return 0;
}

/*
 * Make room in directory dir (its dinode in dib) for a name with hash h, the
 * way core/dir.c does: convert an inline directory to a hashed one, split
 * the full leaf, or double the table (fsck grows height-1 tables only).
 * Everything changed is written, dib included.  0, or -ENOSPC when the
 * directory cannot grow, or another -errno.
 */
static int dir_grow(struct fsck *f, struct fsck_ino *dir, uint8_t *dib, uint64_t h)
{
	struct shoal_dinode *di = (void *)dib;
	uint64_t hp = SHOAL_HT_PTRS(f->f_bsize), *dptr = (uint64_t *)(dib + SHOAL_DI_PAYLOAD_OFF);
	uint32_t bs = f->f_bsize;
	uint8_t *b1 = blk_alloc(f), *b2 = blk_alloc(f), *b3 = blk_alloc(f);
	struct shoal_leaf *lf = (void *)b1;
	uint64_t *old = NULL, lblk, tblk, idx, L;
	unsigned D = di->di_depth, d;
	int err = -ENOMEM;

	if (!b1 || !b2 || !b3)
		goto out;
	if (!(di->di_flags & SHOAL_DIF_EXHASH)) {
		struct shoal_inline_dir *id = (void *)(dib + SHOAL_DI_PAYLOAD_OFF);
		const uint8_t *ents = dib + SHOAL_DI_PAYLOAD_OFF + sizeof(*id);
		uint32_t used = id->id_used, cnt = 0;

		err = -EUCLEAN;
		if (used > SHOAL_DI_PAYLOAD(bs) - sizeof(*id))
			goto out;
		for (uint32_t off = 0; off + sizeof(struct shoal_dirent) <= used; cnt++)
			off += (uint32_t)sizeof(struct shoal_dirent) +
			       ((const struct shoal_dirent *)(ents + off))->de_namelen;
		if ((err = dir_newblock(f, dir, dib, &lblk)) ||
		    (err = dir_newblock(f, dir, dib, &tblk)))
			goto out;
		memset(b1, 0, bs);
		lf->lf_used = used;
		lf->lf_count = (uint16_t)cnt;
		memcpy(b1 + SHOAL_LEAF_ENTRIES_OFF, ents, used);
		meta_seal(b1, bs, SHOAL_MT_LEAF, lblk, 0);
		memset(b2, 0, bs);
		((uint64_t *)(b2 + SHOAL_HT_PTR_OFF))[0] = lblk;
		meta_seal(b2, bs, SHOAL_MT_HTABLE, tblk, 0);
		if ((err = blk_write(f, lblk, b1)) || (err = blk_write(f, tblk, b2)))
			goto out;
		memset(dib + SHOAL_DI_PAYLOAD_OFF, 0, SHOAL_DI_PAYLOAD(bs));
		dptr[0] = tblk;
		di->di_flags |= SHOAL_DIF_EXHASH;
		di->di_depth = 0;
		di->di_size = 8;
		di->di_height = 1;
		err = ino_write(f, dir->fi_ino, dib);
		goto out;
	}
	err = -ENOSPC;
	if (di->di_height != 1 || D > SHOAL_MAX_DEPTH)
		goto out;
	idx = D ? h >> (63 - D) : 0;
	err = -EUCLEAN;
	tblk = bmap_lookup(f, dib, idx / hp);
	if (!tblk || blk_read(f, tblk, b2) || meta_check(b2, bs, SHOAL_MT_HTABLE, tblk))
		goto out;
	L = ((const uint64_t *)(b2 + SHOAL_HT_PTR_OFF))[idx % hp];
	if (!fsck_covered(f, L) || blk_read(f, L, b1) || meta_check(b1, bs, SHOAL_MT_LEAF, L) ||
	    lf->lf_depth > D || lf->lf_used > bs - SHOAL_LEAF_ENTRIES_OFF)
		goto out;
	d = lf->lf_depth;
	if (d < D) {
		/* split: entries whose hash bit (62 - d) is set move to a new leaf */
		uint64_t width = 1ull << (D - d), start = idx & ~(width - 1), nblk;
		struct shoal_leaf *nlf = (void *)b3;
		int moved;

		if ((err = dir_newblock(f, dir, dib, &nblk)))
			goto out;
		memset(b3, 0, bs);
		moved = meta_dirents_split(b1 + SHOAL_LEAF_ENTRIES_OFF, &lf->lf_used,
					   b3 + SHOAL_LEAF_ENTRIES_OFF, &nlf->lf_used, 62 - d);
		if (moved < 0) {
			err = moved;
			goto out;
		}
		nlf->lf_count = (uint16_t)moved;
		lf->lf_count = (uint16_t)(lf->lf_count - moved);
		lf->lf_depth = nlf->lf_depth = (uint16_t)(d + 1);
		meta_update_crc(b1, bs);
		meta_seal(b3, bs, SHOAL_MT_LEAF, nblk, 0);
		if ((err = blk_write(f, L, b1)) || (err = blk_write(f, nblk, b3)) ||
		    (err = table_set(f, dib, b2, start + width / 2, width / 2, nblk)))
			goto out;
		err = ino_write(f, dir->fi_ino, dib);
		goto out;
	}
	/* double the table: entry i of the new one is entry i/2 of the old */
	uint64_t n = 1ull << D, ob = (n + hp - 1) / hp, nb = (2 * n + hp - 1) / hp;
	err = -ENOSPC;
	if (D >= SHOAL_MAX_DEPTH || nb > SHOAL_DI_PTRS(bs))
		goto out;
	err = -ENOMEM;
	old = malloc(n * sizeof(*old));
	if (!old)
		goto out;
	err = -EUCLEAN;
	for (uint64_t lb = 0; lb < ob; lb++) {
		uint64_t cnt = n - lb * hp < hp ? n - lb * hp : hp;
		if (!dptr[lb] || blk_read(f, dptr[lb], b2) ||
		    meta_check(b2, bs, SHOAL_MT_HTABLE, dptr[lb]))
			goto out;
		memcpy(old + lb * hp, b2 + SHOAL_HT_PTR_OFF, cnt * sizeof(*old));
	}
	for (uint64_t lb = ob; lb < nb; lb++)
		if ((err = dir_newblock(f, dir, dib, &dptr[lb])))
			goto out;
	for (uint64_t lb = 0; lb < nb; lb++) {
		memset(b2, 0, bs);
		for (uint64_t i = lb * hp; i < 2 * n && i < (lb + 1) * hp; i++)
			((uint64_t *)(b2 + SHOAL_HT_PTR_OFF))[i % hp] = old[i / 2];
		meta_seal(b2, bs, SHOAL_MT_HTABLE, dptr[lb], 0);
		if ((err = blk_write(f, dptr[lb], b2)))
			goto out;
	}
	di->di_depth = (uint16_t)(D + 1);
	di->di_size = 2 * n * 8;
	err = ino_write(f, dir->fi_ino, dib);
out:
	free(old);
	free(b1);
	free(b2);
	free(b3);
	return err;
}

/* Put an entry in directory dir (its dinode in b, which the caller writes
 * afterwards), growing the directory when it is full. */
static int dir_put(struct fsck *f, struct fsck_ino *dir, uint8_t *b, const char *name,
		   uint8_t len, uint64_t ino, uint8_t dt)
{
	int err = 0;

	for (int tries = 0; tries < 2 * SHOAL_MAX_DEPTH + 4; tries++) {
		err = dir_op(f, dir->fi_ino, b, name, len, ino, dt, 1);
		if (err != -ENOSPC)
			break;
		err = dir_grow(f, dir, b, meta_name_hash(f->f_seed, name, len));
		if (err)
			break;
	}
	if (!err) {
		((struct shoal_dinode *)b)->di_entries++;
		dir->fi_dentries++;
	}
	return err;
}

/*
 * Rebuild a hashed directory whose table was damaged: collect the entries
 * of the leaves the walk accepted (with -y their bad entries are gone),
 * free the old table, indirect blocks and leaves, and put the entries back
 * into a fresh inline directory that grows as they come.  The entries were
 * counted by the walk already: only di_entries and di_blocks change.
 */
static int rebuild_dir(struct fsck *f, const struct fsck_rebuild *rb)
{
	struct fsck_ino *dir = itab_find(f, rb->rb_dir);
	uint8_t *b = blk_alloc(f), *lb = blk_alloc(f), *ents = NULL;
	struct shoal_dinode *di = (void *)b;
	size_t used = 0, cap = 0;
	int err = -ENOMEM;

	if (!b || !lb || !dir)
		goto out;
	err = ino_read(f, dir, b);
	if (err)
		goto out;
	/* the entries, packed as on disk, before their leaves are freed */
	for (size_t k = 0; k < rb->rb_n; k++) {
		const struct shoal_leaf *lf = (const void *)lb;
		uint64_t blk = rb->rb_leaves[k];
		if (blk_read(f, blk, lb) || meta_check(lb, f->f_bsize, SHOAL_MT_LEAF, blk) ||
		    lf->lf_used > f->f_bsize - SHOAL_LEAF_ENTRIES_OFF)
			continue;
		if (used + lf->lf_used > cap) {
			size_t ncap = (cap + lf->lf_used) * 2;
			uint8_t *n = realloc(ents, ncap);
			if (!n) {
				err = -ENOMEM;
				goto out;
			}
			ents = n;
			cap = ncap;
		}
		if (lf->lf_used) /* ents may still be NULL */
			memcpy(ents + used, lb + SHOAL_LEAF_ENTRIES_OFF, lf->lf_used);
		used += lf->lf_used;
		if (map_get(f->f_fmap, blk) == SHOAL_B_DATA)
			fsck_set_state(f, blk, SHOAL_B_FREE);
	}
	err = bmap_release(f, b);
	if (err)
		goto out;
	di->di_flags &= ~SHOAL_DIF_EXHASH;
	di->di_height = 0;
	di->di_depth = 0;
	di->di_size = 0;
	di->di_entries = 0;
	memset(b + SHOAL_DI_PAYLOAD_OFF, 0, SHOAL_DI_PAYLOAD(f->f_bsize));
	di->di_blocks = 1 + (di->di_xattr != 0);
	dir->fi_blocks = dir->fi_dblocks = di->di_blocks;
	dir->fi_dentries = 0;
	err = ino_write(f, dir->fi_ino, b);
	for (size_t off = 0; !err && off + sizeof(struct shoal_dirent) <= used;) {
		const struct shoal_dirent *e = (const void *)(ents + off);
		if (e->de_namelen == 0 || off + sizeof(*e) + e->de_namelen > used)
			break;
		err = dir_put(f, dir, b, (const char *)e + sizeof(*e), e->de_namelen, e->de_ino,
			      e->de_type);
		off += sizeof(*e) + e->de_namelen;
	}
	if (!err)
		err = ino_write(f, dir->fi_ino, b);
out:
	free(b);
	free(lb);
	free(ents);
	return err;
}

/* Add entry name -> target to directory dir, and keep every count straight
 * on disk and in the table (so pass 5b finds nothing to say about it). */
static int dir_insert(struct fsck *f, struct fsck_ino *dir, const char *name,
		      struct fsck_ino *t)
{
	uint8_t *b = blk_alloc(f);
	struct shoal_dinode *di = (void *)b;
	uint8_t dt = mode_dtype(t->fi_mode), len = (uint8_t)strlen(name);
	int err = -ENOMEM;

	if (!b)
		return err;
	err = ino_read(f, dir, b);
	if (!err)
		err = dir_put(f, dir, b, name, len, t->fi_ino, dt);
	if (err)
		goto out;
	if (S_ISDIR(t->fi_mode))
		di->di_nlink++;
	now_ts(&di->di_mtime);
	di->di_ctime = di->di_mtime;
	err = ino_write(f, dir->fi_ino, b);
	if (err)
		goto out;
	dir->fi_entries++;
	t->fi_refs++;
	if (S_ISDIR(t->fi_mode)) {
		dir->fi_subdirs++;
		dir->fi_nlink++;
		t->fi_parent = dir->fi_ino;
		if (t->fi_dparent != dir->fi_ino) {
			err = ino_read(f, t, b);
			if (err)
				goto out;
			di->di_parent = dir->fi_ino;
			err = ino_write(f, t->fi_ino, b);
			t->fi_dparent = dir->fi_ino;
		}
	}
out:
	free(b);
	return err;
}

static int dir_has(struct fsck *f, struct fsck_ino *dir, const char *name)
{
	uint8_t *b = blk_alloc(f);
	int r = -ENOMEM;

	if (b) {
		r = ino_read(f, dir, b);
		if (!r)
			r = dir_op(f, dir->fi_ino, b, name, (uint8_t)strlen(name), 0, 0, 0);
		free(b);
	}
	return r;
}

static struct fsck_ino *lostfound(struct fsck *f)
{
	struct fsck_ino *root = itab_find(f, f->f_sb.sb_root), *lf;
	uint64_t blk;
	uint8_t *b;
	int err;

	if (f->f_lostfound)
		return itab_find(f, f->f_lostfound);
	if (!root || !(root->fi_flags & FI_VALID))
		return NULL;
	err = dir_has(f, root, FSCK_LOSTFOUND);
	if (err) {
		fprintf(stderr, "%s: cannot create /%s: %s\n", FSCK_PROG, FSCK_LOSTFOUND,
			err == 1 ? "the name is taken by a non-directory" : strerror(-err));
		return NULL;
	}
	if (fsck_alloc(f, SHOAL_B_DINODE, &blk)) {
		fprintf(stderr, "%s: cannot create /%s: no free block\n", FSCK_PROG, FSCK_LOSTFOUND);
		return NULL;
	}
	b = blk_alloc(f);
	lf = b ? itab_add(f, blk) : NULL;
	if (!lf) {
		free(b);
		return NULL;
	}
	dir_make(f, b, blk, root->fi_ino, 0700);
	err = blk_write(f, blk, b);
	free(b);
	lf->fi_flags = FI_VALID | FI_WALKED | FI_MAPPED;
	lf->fi_mode = S_IFDIR | 0700;
	lf->fi_nlink = 2;
	lf->fi_dparent = root->fi_ino;
	lf->fi_blocks = lf->fi_dblocks = 1;
	lf->fi_dstate = SHOAL_B_DINODE;
	if (!err)
		err = dir_insert(f, root, FSCK_LOSTFOUND, lf);
	if (err) {
		fprintf(stderr, "%s: cannot create /%s: %s\n", FSCK_PROG, FSCK_LOSTFOUND,
			strerror(-err));
		fsck_set_state(f, blk, SHOAL_B_FREE);
		lf->fi_flags = FI_BAD | FI_FREED;
		return NULL;
	}
	fsck_info(f, "created /%s (inode %llu)", FSCK_LOSTFOUND, (unsigned long long)blk);
	f->f_lostfound = blk;
	return lf;
}

/* A repair that was counted as fixed but could not be completed. */
static void unfix(struct fsck *f, const char *what, int err)
{
	f->f_fixed--;
	f->f_unfixed++;
	fprintf(stderr, "%s: %s: %s\n", FSCK_PROG, what, strerror(err < 0 ? -err : err));
}

static int reconnect(struct fsck *f, struct fsck_ino *fi)
{
	struct fsck_ino *lf = lostfound(f);
	char name[32];
	int err = -ENOENT;

	if (!lf)
		return err;
	snprintf(name, sizeof(name), "#%llu", (unsigned long long)fi->fi_ino);
	for (int k = 1; k < 100; k++) {
		err = dir_has(f, lf, name);
		if (err <= 0)
			break;
		snprintf(name, sizeof(name), "#%llu.%d", (unsigned long long)fi->fi_ino, k);
	}
	if (err == 0)
		err = dir_insert(f, lf, name, fi);
	if (err == 0)
		fi->fi_flags &= (uint16_t)~FI_LOST;
	return err;
}

/* Replace the leaf of a run of table entries by a new, empty leaf. */
static int leaffix_apply(struct fsck *f, const struct fsck_leaffix *lx)
{
	struct fsck_ino *dir = itab_find(f, lx->lx_dir);
	uint64_t hp = SHOAL_HT_PTRS(f->f_bsize), blk, tb = 0, lb = UINT64_MAX;
	uint8_t *dib = blk_alloc(f), *b = blk_alloc(f);
	struct shoal_leaf *lf = (void *)b;
	int err = -ENOMEM;

	if (!dib || !b || !dir)
		goto out;
	err = ino_read(f, dir, dib);
	if (err)
		goto out;
	err = fsck_alloc(f, SHOAL_B_DATA, &blk);
	if (err)
		goto out;
	memset(b, 0, f->f_bsize);
	lf->lf_depth = lx->lx_depth;
	meta_seal(b, f->f_bsize, SHOAL_MT_LEAF, blk, 0);
	err = blk_write(f, blk, b);
	if (err)
		goto out;
	dir->fi_blocks++;
	for (uint64_t i = lx->lx_index; i < lx->lx_index + lx->lx_count && !err; i++) {
		if (i / hp != lb) {
			if (lb != UINT64_MAX) {
				meta_update_crc(b, f->f_bsize);
				err = blk_write(f, tb, b);
			}
			lb = i / hp;
			tb = bmap_lookup(f, dib, lb);
			if (!err && (!tb || blk_read(f, tb, b) ||
				     meta_check(b, f->f_bsize, SHOAL_MT_HTABLE, tb)))
				err = -EUCLEAN;
		}
		if (!err)
			((uint64_t *)(b + SHOAL_HT_PTR_OFF))[i % hp] = blk;
	}
	if (!err && lb != UINT64_MAX) {
		meta_update_crc(b, f->f_bsize);
		err = blk_write(f, tb, b);
	}
out:
	free(dib);
	free(b);
	return err;
}

/* Remove the first entry of ents[0..*used) naming ino: 1 if one was. */
static int area_remove(uint8_t *ents, uint32_t *used, uint64_t ino)
{
	uint32_t off = 0;

	while (off + sizeof(struct shoal_dirent) <= *used) {
		const struct shoal_dirent *e = (const void *)(ents + off);
		uint32_t sz = (uint32_t)sizeof(*e) + e->de_namelen;
		if (e->de_namelen == 0 || off + sz > *used)
			return 0;
		if (e->de_ino == ino) {
			memmove(ents + off, ents + off + sz, *used - off - sz);
			*used -= sz;
			memset(ents + *used, 0, sz);
			return 1;
		}
		off += sz;
	}
	return 0;
}

/* Remove directory dir's entry for t, keeping di_entries straight on disk
 * and in the table.  0, -ENOENT, or -errno. */
static int dir_remove_ino(struct fsck *f, struct fsck_ino *dir, struct fsck_ino *t)
{
	uint8_t *b = blk_alloc(f), *tb = blk_alloc(f), *lb = blk_alloc(f);
	struct shoal_dinode *di = (void *)b;
	struct shoal_leaf *lf = (void *)lb;
	uint64_t hp = SHOAL_HT_PTRS(f->f_bsize), prev = 0, tlb = UINT64_MAX;
	int err = -ENOMEM, found = 0;

	if (!b || !tb || !lb)
		goto out;
	err = ino_read(f, dir, b);
	if (err)
		goto out;
	if (!(di->di_flags & SHOAL_DIF_EXHASH)) {
		struct shoal_inline_dir *id = (void *)(b + SHOAL_DI_PAYLOAD_OFF);
		if (id->id_used <= SHOAL_DI_PAYLOAD(f->f_bsize) - sizeof(*id))
			found = area_remove(b + SHOAL_DI_PAYLOAD_OFF + sizeof(*id), &id->id_used,
					    t->fi_ino);
	} else if (di->di_depth <= SHOAL_MAX_DEPTH) {
		for (uint64_t i = 0; i < (1ull << di->di_depth) && !found; i++) {
			uint64_t L, blk;
			if (i / hp != tlb) {
				tlb = i / hp;
				blk = bmap_lookup(f, b, tlb);
				if (!blk || blk_read(f, blk, tb) ||
				    meta_check(tb, f->f_bsize, SHOAL_MT_HTABLE, blk)) {
					i = (tlb + 1) * hp - 1;
					continue;
				}
			}
			L = ((const uint64_t *)(tb + SHOAL_HT_PTR_OFF))[i % hp];
			if (L == prev)
				continue;
			prev = L;
			for (int hops = 0; L && !found && hops < 1024; hops++) {
				if (!fsck_covered(f, L) || blk_read(f, L, lb) ||
				    meta_check(lb, f->f_bsize, SHOAL_MT_LEAF, L) ||
				    lf->lf_used > f->f_bsize - SHOAL_LEAF_ENTRIES_OFF)
					break;
				found = area_remove(lb + SHOAL_LEAF_ENTRIES_OFF, &lf->lf_used, t->fi_ino);
				if (found) {
					lf->lf_count--;
					meta_update_crc(lb, f->f_bsize);
					err = blk_write(f, L, lb);
					if (err)
						goto out;
				}
				L = lf->lf_next;
			}
		}
	}
	err = -ENOENT;
	if (!found)
		goto out;
	/* di_nlink is left to pass 5b: a bogus entry was rarely counted in it */
	di->di_entries--;
	err = ino_write(f, dir->fi_ino, b);
	if (err)
		goto out;
	dir->fi_entries--;
	dir->fi_dentries--;
	t->fi_refs--;
	if (S_ISDIR(t->fi_mode))
		dir->fi_subdirs--;
out:
	free(b);
	free(tb);
	free(lb);
	return err;
}

/* Are directories reachable from the root through fi_parent?  A cycle of
 * directories cut off from the root is broken (-y) by moving one of them to
 * /lost+found.  0 or -ENOMEM. */
static int check_cycles(struct fsck *f)
{
	struct fsck_ino *root = itab_find(f, f->f_sb.sb_root);
	struct fsck_ino **path = NULL;
	size_t cap = 0;

	if (root && (root->fi_flags & FI_VALID))
		root->fi_flags |= FI_CONNECTED;
	for (uint64_t r = 0; r < f->f_icount; r++) {
		struct fsck_ino *fi = itab_rec(f, r), *cur;
		size_t n = 0;
		int connected = 0, cycle = 0;

		if (!(fi->fi_flags & FI_VALID) || !S_ISDIR(fi->fi_mode) ||
		    (fi->fi_flags & (FI_CONNECTED | FI_UNCONN | FI_FREED | FI_ORPHAN)))
			continue;
		for (cur = fi; cur; cur = itab_find(f, cur->fi_parent)) {
			if (cur->fi_flags & FI_CONNECTED) {
				connected = 1;
				break;
			}
			if (cur->fi_flags & FI_UNCONN)
				break;
			if (cur->fi_flags & FI_TMP) {
				cycle = 1;
				break;
			}
			if (n == cap) {
				size_t ncap = cap ? cap * 2 : 64;
				struct fsck_ino **np = realloc(path, ncap * sizeof(*np));
				if (!np) {
					free(path);
					return -ENOMEM;
				}
				path = np;
				cap = ncap;
			}
			path[n++] = cur;
			cur->fi_flags |= FI_TMP;
			if (!cur->fi_refs)
				break; /* lost, reported already */
		}
		if (cycle && fsck_problem(f, 1,
					  "directory %llu is in a directory cycle unreachable from "
					  "the root; moving it to /%s",
					  (unsigned long long)cur->fi_ino, FSCK_LOSTFOUND)) {
			struct fsck_ino *p = itab_find(f, cur->fi_parent);
			int err = p ? dir_remove_ino(f, p, cur) : -ENOENT;
			if (!err)
				err = reconnect(f, cur);
			if (err)
				unfix(f, "breaking a directory cycle", err);
			else
				connected = 1;
		}
		for (size_t k = 0; k < n; k++) {
			path[k]->fi_flags &= (uint16_t)~FI_TMP;
			path[k]->fi_flags |= connected ? FI_CONNECTED : FI_UNCONN;
		}
	}
	free(path);
	return 0;
}

int fsck_connect(struct fsck *f)
{
	struct fsck_ino **list;
	uint64_t n = 0, norph = 0;
	int err = 0;

	for (size_t k = 0; k < f->f_nrebuild; k++) {
		err = rebuild_dir(f, &f->f_rebuild[k]);
		if (err)
			unfix(f, "rebuilding a directory", err);
	}
	for (size_t k = 0; k < f->f_nleaffix; k++) {
		int rebuilt = 0;
		for (size_t r = 0; r < f->f_nrebuild; r++)
			rebuilt |= f->f_rebuild[r].rb_dir == f->f_leaffix[k].lx_dir;
		if (rebuilt)
			continue;
		err = leaffix_apply(f, &f->f_leaffix[k]);
		if (err)
			unfix(f, "replacing a directory leaf", err);
	}
	list = itab_sorted(f, &n);
	if (!list)
		return -ENOMEM;
	for (uint64_t i = 0; i < n; i++) {
		struct fsck_ino *fi = list[i];
		unsigned long long ino = fi->fi_ino;

		fsck_progress(f, i, n);
		if (fi->fi_flags & FI_ORPHAN) {
			if (!f->f_yes) {
				norph++;
				map_set(f->f_fmap, fi->fi_ino, SHOAL_B_UNLINKED);
			} else if (fsck_problem(f, 1, "inode %llu: orphan (unlinked, no entry); "
						      "freeing it",
						ino)) {
				err = ino_release(f, fi);
				if (err)
					unfix(f, "freeing an orphan", err);
			}
			continue;
		}
		if (!(fi->fi_flags & FI_LOST))
			continue;
		if (fi->fi_nlink == 0) {
			if (fsck_problem(f, 1,
					 "inode %llu (%s) has no entry and nlink 0 but is not marked "
					 "unlinked; freeing it",
					 ino, fsck_mode_name(fi->fi_mode))) {
				err = ino_release(f, fi);
				if (err)
					unfix(f, "freeing an inode", err);
			} else if (fi->fi_dstate == SHOAL_B_DINODE ||
				   fi->fi_dstate == SHOAL_B_UNLINKED) {
				map_set(f->f_fmap, fi->fi_ino, fi->fi_dstate);
			}
			continue;
		}
		if (fsck_problem(f, 1, "inode %llu (%s, nlink %u) is not referenced by any "
				       "directory; moving it to /%s",
				 ino, fsck_mode_name(fi->fi_mode), fi->fi_nlink, FSCK_LOSTFOUND)) {
			err = reconnect(f, fi);
			if (err)
				unfix(f, "reconnecting to /lost+found", err);
		}
	}
	free(list);
	if (norph)
		fsck_info(f, "%llu orphan inodes will be freed at next mount",
			  (unsigned long long)norph);
	f->f_orphans = norph;
	return f->f_operr ? -EIO : check_cycles(f);
}

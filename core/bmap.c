/*
 * bmap.c - the file block map: logical block -> device block.
 *
 * A tree of pointer blocks rooted in the dinode (FORMAT.md "block map"):
 * height 0 keeps the data inline in the dinode; height h >= 1 has the
 * dinode's P0 pointers at the top and P pointers per indirect block below.
 * A zero pointer is a hole.  Lookups cost one cached block per level, and a
 * sparse file only has the indirect blocks its data needs.
 *
 * Invariants (fs_lock):
 *  (1) every non-zero pointer names a block inside a resource group, whose
 *      bitmap state is DATA; pointers read from disk are checked for range
 *      before use;
 *  (2) di_blocks counts the dinode, every indirect block and every data
 *      block of the tree (xattr and directory blocks are counted by their
 *      owners' modules);
 *  (3) an indirect block is allocated only when a data block below it is.
 */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "meta.h"

static uint64_t *di_ptrs(struct shoal_inode *ip)
{
	return (uint64_t *)(ip->i_bh->b_data + SHOAL_DI_PAYLOAD_OFF);
}

static uint64_t *ind_ptrs(struct shoal_buf *b)
{
	return (uint64_t *)(b->b_data + SHOAL_IND_PTR_OFF);
}

/* Blocks covered by one pointer at level lvl (1 = points at data). */
static uint64_t span(struct shoal_fs *fs, uint32_t lvl)
{
	uint64_t s = 1, p = SHOAL_IND_PTRS(fs->fs_bsize);
	for (uint32_t i = 1; i < lvl; i++) {
		if (s > UINT64_MAX / p)
			return UINT64_MAX;
		s *= p;
	}
	return s;
}

uint64_t bmap_max_blocks(struct shoal_fs *fs, uint32_t height)
{
	if (height == 0)
		return 0;
	uint64_t s = span(fs, height);
	uint64_t p0 = SHOAL_DI_PTRS(fs->fs_bsize);
	return s > UINT64_MAX / p0 ? UINT64_MAX : s * p0;
}

static int ptr_ok(struct shoal_fs *fs, uint64_t p)
{
	return p >= fs->fs_sb.sb_rgfirst && p < fs->fs_sb.sb_blocks - 1;
}

/* A bad pointer in block owner (ip's dinode or one of its indirect blocks). */
static int bad_ptr(struct shoal_fs *fs, struct shoal_inode *ip, uint64_t owner, const char *what)
{
	return fs_corrupt_ino(fs, owner, ip->i_ino, what) ? -EIO : -EIO;
}

/* Read the indirect block p found in a pointer of block owner. */
static int ind_read(struct shoal_fs *fs, struct shoal_inode *ip, uint64_t owner, uint64_t p,
		    struct shoal_buf **b)
{
	if (!ptr_ok(fs, p))
		return bad_ptr(fs, ip, owner, "block pointer out of range");
	return buf_read_ip(fs, ip, p, SHOAL_MT_INDIRECT, b);
}

int bmap_get(struct shoal_fs *fs, struct shoal_inode *ip, uint64_t lblk, uint64_t *pblk,
	     uint32_t *run)
{
	struct shoal_dinode *di = ip_di(ip);
	uint32_t h = di->di_height, n;
	uint64_t *ptrs = di_ptrs(ip), owner = ip->i_ino;
	struct shoal_buf *b = NULL;
	int err = 0;

	*pblk = 0;
	*run = 1;
	if (h == 0 || lblk >= bmap_max_blocks(fs, h)) {
		*run = UINT32_MAX;
		return 0;
	}
	n = SHOAL_DI_PTRS(fs->fs_bsize);
	for (uint32_t lvl = h;; lvl--) {
		uint64_t sp = span(fs, lvl);
		uint64_t idx = lblk / sp;
		uint64_t p;

		if (lvl != h)
			idx %= SHOAL_IND_PTRS(fs->fs_bsize);
		p = ptrs[idx];
		if (lvl == 1) {
			if (p && !ptr_ok(fs, p)) {
				err = bad_ptr(fs, ip, owner, "data pointer out of range");
				break;
			}
			*pblk = p;
			uint32_t r = 1;
			if (p) {
				while (idx + r < n && ptrs[idx + r] == p + r && r < 65536)
					r++;
			} else {
				while (idx + r < n && ptrs[idx + r] == 0 && r < 65536)
					r++;
			}
			*run = r;
			break;
		}
		if (p == 0) {
			uint64_t left = sp - lblk % sp;
			*run = left > UINT32_MAX ? UINT32_MAX : (uint32_t)left;
			break;
		}
		struct shoal_buf *nb;
		err = ind_read(fs, ip, owner, p, &nb);
		buf_put(fs, b);
		b = nb;
		if (err) {
			b = NULL;
			break;
		}
		owner = p;
		ptrs = ind_ptrs(b);
		n = SHOAL_IND_PTRS(fs->fs_bsize);
	}
	buf_put(fs, b);
	return err;
}

static int new_indirect(struct shoal_fs *fs, struct shoal_inode *ip, struct shoal_buf **out)
{
	struct shoal_dinode *di = ip_di(ip);
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
	meta_seal((*out)->b_data, fs->fs_bsize, SHOAL_MT_INDIRECT, blk, 0);
	trans_add(fs, *out);
	di->di_blocks++;
	di->di_goal = blk;
	return 0;
}

static int grow_height(struct shoal_fs *fs, struct shoal_inode *ip)
{
	struct shoal_dinode *di = ip_di(ip);
	uint64_t *ptrs = di_ptrs(ip);
	uint32_t p0 = SHOAL_DI_PTRS(fs->fs_bsize);
	struct shoal_buf *b;
	int any = 0, err;

	if (di->di_height >= SHOAL_MAX_HEIGHT)
		return -EFBIG;
	for (uint32_t i = 0; i < p0; i++)
		any |= ptrs[i] != 0;
	inode_dirty(fs, ip, 1);
	if (any) {
		err = new_indirect(fs, ip, &b);
		if (err)
			return err;
		memcpy(ind_ptrs(b), ptrs, (size_t)p0 * 8);
		memset(ptrs, 0, (size_t)p0 * 8);
		ptrs[0] = b->b_blkno;
		buf_put(fs, b);
	}
	di->di_height++;
	return 0;
}

int bmap_unstuff(struct shoal_fs *fs, struct shoal_inode *ip)
{
	struct shoal_dinode *di = ip_di(ip);
	uint8_t *pay = ip->i_bh->b_data + SHOAL_DI_PAYLOAD_OFF;
	uint32_t paylen = SHOAL_DI_PAYLOAD(fs->fs_bsize);
	uint64_t blk = 0;
	uint32_t got;
	int err;

	if (di->di_height)
		return 0;
	inode_dirty(fs, ip, 1);
	if (di->di_size) {
		uint8_t *data;
		err = rg_alloc(fs, ip->i_ino + 1, 1, SHOAL_B_DATA, &blk, &got);
		if (err)
			return err;
		data = calloc(1, fs->fs_bsize);
		if (!data) {
			rg_free(fs, blk, 1);
			return -ENOMEM;
		}
		memcpy(data, pay, di->di_size < paylen ? di->di_size : paylen);
		/* with the dirty-block index, a file's block waits there for
		 * the commit that makes it part of the file (file.c (5));
		 * a directory's goes to the device, where dir.c reads it */
		int indexed = fs->fs_dx.dx_on && S_ISREG(di->di_mode);
		if (indexed)
			err = dx_write_new(fs, blk, 0, data, fs->fs_bsize);
		else
			err = dev_write(fs->fs_dev, data, fs->fs_bsize, blk << fs->fs_bshift);
		free(data);
		if (err) {
			rg_free(fs, blk, 1);
			return err;
		}
		fs->fs_j.j_ordered = 1;
		if (!indexed)
			ip->i_data_gen = __atomic_load_n(&fs->fs_dev->d_write_gen, __ATOMIC_SEQ_CST);
		di->di_blocks++;
		di->di_goal = blk;
	}
	memset(pay, 0, paylen);
	di->di_height = 1;
	di_ptrs(ip)[0] = blk;
	return 0;
}

int bmap_alloc(struct shoal_fs *fs, struct shoal_inode *ip, uint64_t lblk, uint32_t want,
	       uint64_t *pblk, uint32_t *run, int *isnew)
{
	struct shoal_dinode *di = ip_di(ip);
	struct shoal_buf *b = NULL, *owner_b = ip->i_bh;
	uint64_t *ptrs;
	uint32_t n;
	int err;

	*isnew = 0;
	if (di->di_height == 0) {
		err = bmap_unstuff(fs, ip);
		if (err)
			return err;
	}
	while (lblk >= bmap_max_blocks(fs, di->di_height)) {
		err = grow_height(fs, ip);
		if (err)
			return err;
	}
	ptrs = di_ptrs(ip);
	n = SHOAL_DI_PTRS(fs->fs_bsize);
	for (uint32_t lvl = di->di_height;; lvl--) {
		uint64_t sp = span(fs, lvl), idx = lblk / sp;
		if (lvl != di->di_height)
			idx %= SHOAL_IND_PTRS(fs->fs_bsize);
		if (lvl == 1) {
			if (ptrs[idx]) {
				uint32_t r = 1;
				if (!ptr_ok(fs, ptrs[idx])) {
					err = bad_ptr(fs, ip, owner_b->b_blkno, "data pointer out of range");
					break;
				}
				while (idx + r < n && r < want && ptrs[idx + r] == ptrs[idx] + r)
					r++;
				*pblk = ptrs[idx];
				*run = r;
				err = 0;
				break;
			}
			/* allocate a run of data blocks for the holes here */
			uint32_t holes = 1;
			while (idx + holes < n && holes < want && ptrs[idx + holes] == 0)
				holes++;
			uint64_t first;
			uint32_t got;
			err = rg_alloc(fs, di->di_goal + 1, holes, SHOAL_B_DATA, &first, &got);
			if (err)
				break;
			trans_add(fs, owner_b);
			for (uint32_t i = 0; i < got; i++)
				ptrs[idx + i] = first + i;
			inode_dirty(fs, ip, 1);
			di->di_blocks += got;
			di->di_goal = first + got - 1;
			*pblk = first;
			*run = got;
			*isnew = 1;
			break;
		}
		struct shoal_buf *nb;
		if (ptrs[idx] == 0) {
			err = new_indirect(fs, ip, &nb);
			if (err)
				break;
			trans_add(fs, owner_b);
			ptrs[idx] = nb->b_blkno;
			inode_dirty(fs, ip, 1);
		} else {
			err = ind_read(fs, ip, owner_b->b_blkno, ptrs[idx], &nb);
			if (err)
				break;
		}
		buf_put(fs, b);
		b = owner_b = nb;
		ptrs = ind_ptrs(b);
		n = SHOAL_IND_PTRS(fs->fs_bsize);
	}
	buf_put(fs, b);
	return err;
}

/*
 * The level-1 pointer of logical block lblk: *pp points at it in *bp (NULL
 * for the dinode's own pointers; else referenced: buf_put it).  create:
 * unstuff, grow the height and add the indirect blocks on the way (inside
 * the running transaction); else *pp is NULL when a hole lies above it.
 */
static int slot(struct shoal_fs *fs, struct shoal_inode *ip, uint64_t lblk, int create,
		struct shoal_buf **bp, uint64_t **pp)
{
	struct shoal_dinode *di = ip_di(ip);
	struct shoal_buf *b = NULL, *owner_b = ip->i_bh;
	uint64_t *ptrs;
	int err = 0;

	*bp = NULL;
	*pp = NULL;
	if (create) {
		if (di->di_height == 0 && (err = bmap_unstuff(fs, ip)))
			return err;
		while (lblk >= bmap_max_blocks(fs, di->di_height))
			if ((err = grow_height(fs, ip)))
				return err;
	} else if (di->di_height == 0 || lblk >= bmap_max_blocks(fs, di->di_height)) {
		return 0;
	}
	ptrs = di_ptrs(ip);
	for (uint32_t lvl = di->di_height;; lvl--) {
		uint64_t sp = span(fs, lvl), idx = lblk / sp;
		struct shoal_buf *nb;

		if (lvl != di->di_height)
			idx %= SHOAL_IND_PTRS(fs->fs_bsize);
		if (lvl == 1) {
			if (ptrs[idx] && !ptr_ok(fs, ptrs[idx])) {
				err = bad_ptr(fs, ip, owner_b->b_blkno, "data pointer out of range");
				break;
			}
			*bp = b;
			*pp = &ptrs[idx];
			return 0;
		}
		if (ptrs[idx] == 0) {
			if (!create)
				break;
			err = new_indirect(fs, ip, &nb);
			if (err)
				break;
			trans_add(fs, owner_b);
			ptrs[idx] = nb->b_blkno;
			inode_dirty(fs, ip, 1);
		} else {
			err = ind_read(fs, ip, owner_b->b_blkno, ptrs[idx], &nb);
			if (err)
				break;
		}
		buf_put(fs, b);
		b = owner_b = nb;
		ptrs = ind_ptrs(b);
	}
	buf_put(fs, b);
	return err;
}

int bmap_move(struct shoal_fs *fs, struct shoal_inode *ip, uint64_t from, uint64_t to)
{
	struct shoal_buf *b;
	uint64_t *pp, p;
	int err = slot(fs, ip, from, 0, &b, &pp);

	if (err || !pp || !*pp) {
		buf_put(fs, b);
		return err; /* a hole: nothing to move */
	}
	p = *pp;
	buf_put(fs, b);
	/* making to's path may grow the tree: from's slot is found again after */
	err = slot(fs, ip, to, 1, &b, &pp);
	if (err)
		return err;
	assert(*pp == 0);
	if (b)
		trans_add(fs, b);
	else
		inode_dirty(fs, ip, 1);
	*pp = p;
	buf_put(fs, b);
	err = slot(fs, ip, from, 0, &b, &pp);
	if (err)
		return err;
	assert(pp && *pp == p);
	if (b)
		trans_add(fs, b);
	else
		inode_dirty(fs, ip, 1);
	*pp = 0;
	buf_put(fs, b);
	return 0;
}

/* Free a run of data blocks and account for them. */
static int free_run(struct shoal_fs *fs, struct shoal_inode *ip, uint64_t first, uint32_t n)
{
	int err = rg_free(fs, first, n);
	if (!err)
		ip_di(ip)->di_blocks -= n;
	return err;
}

/*
 * Free everything at logical blocks [from, to) below ptrs (a node at level
 * lvl covering base..).  Sets *empty when the node holds no pointer after.
 */
static int trunc_node(struct shoal_fs *fs, struct shoal_inode *ip, struct shoal_buf *nb,
		      uint64_t *ptrs, uint32_t n, uint32_t lvl, uint64_t base, uint64_t from,
		      uint64_t to, int *empty)
{
	uint64_t sp = span(fs, lvl);
	int err = 0;

	for (uint32_t i = 0; i < n; i++) {
		uint64_t lo = base + i * sp, hi = lo + sp;
		if (ptrs[i] == 0 || hi <= from || lo >= to)
			continue;
		if (!ptr_ok(fs, ptrs[i]))
			return bad_ptr(fs, ip, nb->b_blkno, "block pointer out of range");
		if (lvl == 1) {
			uint32_t r = 1;
			while (i + r < n && ptrs[i + r] == ptrs[i] + r && base + (i + r) * sp < to)
				r++;
			err = free_run(fs, ip, ptrs[i], r);
			if (err)
				return err;
			trans_add(fs, nb);
			memset(&ptrs[i], 0, (size_t)r * 8);
			i += r - 1;
			continue;
		}
		struct shoal_buf *cb;
		int cempty;
		err = ind_read(fs, ip, nb->b_blkno, ptrs[i], &cb);
		if (err)
			return err;
		err = trunc_node(fs, ip, cb, ind_ptrs(cb), SHOAL_IND_PTRS(fs->fs_bsize), lvl - 1, lo,
				 from, to, &cempty);
		buf_put(fs, cb);
		if (err)
			return err;
		if (cempty) {
			err = free_run(fs, ip, ptrs[i], 1);
			if (err)
				return err;
			trans_add(fs, nb);
			ptrs[i] = 0;
		}
	}
	*empty = 1;
	for (uint32_t i = 0; i < n; i++)
		if (ptrs[i]) {
			*empty = 0;
			break;
		}
	return 0;
}

/* Add to set the group of every block below ptrs that freeing logical
 * blocks [from, to) may free: data blocks and the indirect blocks over
 * them (trunc_node's walk, reading only). */
static int rgs_node(struct shoal_fs *fs, struct shoal_inode *ip, uint64_t owner, uint64_t *ptrs,
		    uint32_t n, uint32_t lvl, uint64_t base, uint64_t from, uint64_t to,
		    uint8_t *set)
{
	uint64_t sp = span(fs, lvl);

	for (uint32_t i = 0; i < n; i++) {
		uint64_t lo = base + i * sp, hi = lo + sp;
		struct shoal_buf *cb;
		int err;

		if (ptrs[i] == 0 || hi <= from || lo >= to)
			continue;
		if (!ptr_ok(fs, ptrs[i]))
			return bad_ptr(fs, ip, owner, "block pointer out of range");
		rg_set_add(fs, set, ptrs[i]);
		if (lvl == 1)
			continue;
		err = ind_read(fs, ip, owner, ptrs[i], &cb);
		if (err)
			return err;
		err = rgs_node(fs, ip, cb->b_blkno, ind_ptrs(cb), SHOAL_IND_PTRS(fs->fs_bsize),
			       lvl - 1, lo, from, to, set);
		buf_put(fs, cb);
		if (err)
			return err;
	}
	return 0;
}

int bmap_free_rgs(struct shoal_fs *fs, struct shoal_inode *ip, uint64_t from, uint64_t to,
		  uint8_t *set)
{
	struct shoal_dinode *di = ip_di(ip);

	if (di->di_height == 0 || from >= to)
		return 0;
	return rgs_node(fs, ip, ip->i_bh->b_blkno, di_ptrs(ip), SHOAL_DI_PTRS(fs->fs_bsize),
			di->di_height, 0, from, to, set);
}

int bmap_hold_free_rgs(struct shoal_fs *fs, struct shoal_inode *ip, uint64_t from, uint64_t to)
{
	uint8_t *set;
	int err;

	if (!fs->fs_cluster || ip_di(ip)->di_height == 0 || from >= to)
		return 0;
	set = rg_set_new(fs);
	if (!set)
		return -ENOMEM;
	err = bmap_free_rgs(fs, ip, from, to, set);
	if (!err)
		err = rg_hold_set(fs, set, 1);
	free(set);
	return err;
}

int bmap_punch(struct shoal_fs *fs, struct shoal_inode *ip, uint64_t lstart, uint64_t lend)
{
	struct shoal_dinode *di = ip_di(ip);
	int empty;

	if (di->di_height == 0 || lstart >= lend)
		return 0;
	inode_dirty(fs, ip, 1);
	return trunc_node(fs, ip, ip->i_bh, di_ptrs(ip), SHOAL_DI_PTRS(fs->fs_bsize),
			  di->di_height, 0, lstart, lend, &empty);
}

int bmap_truncate(struct shoal_fs *fs, struct shoal_inode *ip, uint64_t lblk)
{
	struct shoal_dinode *di = ip_di(ip);
	int err;

	if (di->di_height == 0)
		return 0;
	err = bmap_punch(fs, ip, lblk, UINT64_MAX);
	if (err)
		return err;
	if (lblk == 0 && !S_ISDIR(di->di_mode)) {
		memset(di_ptrs(ip), 0, SHOAL_DI_PAYLOAD(fs->fs_bsize));
		di->di_height = 0;
	}
	return 0;
}

int bmap_seek(struct shoal_fs *fs, struct shoal_inode *ip, uint64_t lblk, int data,
	      uint64_t *out)
{
	struct shoal_dinode *di = ip_di(ip);
	uint64_t end = (di->di_size + fs->fs_bsize - 1) >> fs->fs_bshift;

	while (lblk < end) {
		uint64_t p;
		uint32_t run;
		int err = bmap_get(fs, ip, lblk, &p, &run);
		if (err)
			return err;
		if ((p != 0) == (data != 0)) {
			*out = lblk;
			return 0;
		}
		lblk += run;
	}
	if (data)
		return -ENXIO;
	*out = end;
	return 0;
}

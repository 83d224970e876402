/*
 * xattr.c - extended attributes: one block per inode (di_xattr), like
 * ext4's single xattr block, holding packed entries (FORMAT.md).
 *
 * Invariants (fs_lock):
 *  (1) names are unique within the block; the namespace prefix is stored as
 *      xe_ns, never as text;
 *  (2) an inode with no attributes has no block: removing the last frees it.
 */
#include <errno.h>
#include <string.h>
#include <sys/xattr.h>

#include "internal.h"
#include "meta.h"

static const struct {
	const char *prefix;
	uint8_t ns;
} xns[] = {
	{"user.", SHOAL_XNS_USER},
	{"trusted.", SHOAL_XNS_TRUSTED},
	{"security.", SHOAL_XNS_SECURITY},
	{"system.", SHOAL_XNS_SYSTEM},
};

static int split_name(const char *name, uint8_t *ns, const char **rest)
{
	for (size_t i = 0; i < sizeof(xns) / sizeof(xns[0]); i++) {
		size_t pl = strlen(xns[i].prefix);
		if (!strncmp(name, xns[i].prefix, pl)) {
			*ns = xns[i].ns;
			*rest = name + pl;
			if (!**rest)
				return -EINVAL;
			if (strlen(*rest) > 255)
				return -ERANGE;
			return 0;
		}
	}
	return -EOPNOTSUPP;
}

static const char *ns_prefix(uint8_t ns)
{
	for (size_t i = 0; i < sizeof(xns) / sizeof(xns[0]); i++)
		if (xns[i].ns == ns)
			return xns[i].prefix;
	return NULL;
}

/*
 * What is wrong with an xattr block's entries, or NULL: every entry lies
 * within xh_used with a name of 1..255 bytes in a known namespace, and
 * xh_count counts them.  Checked at every read, so that the loops below
 * never leave the block and a wrong count never frees a block in use.
 */
static const char *xblock_bad(struct shoal_fs *fs, struct shoal_buf *b)
{
	struct shoal_xattr_hdr *xh = (void *)b->b_data;
	const uint8_t *area = b->b_data + SHOAL_XATTR_ENTRIES_OFF;
	uint32_t off = 0, n = 0;

	if (xh->xh_used > fs->fs_bsize - SHOAL_XATTR_ENTRIES_OFF)
		return "xattr block header: entries past the block";
	while (off < xh->xh_used) {
		struct shoal_xattr_ent e;
		if (xh->xh_used - off < sizeof(e))
			return "xattr entry header past xh_used";
		memcpy(&e, area + off, sizeof(e));
		uint32_t sz = sizeof(e) + e.xe_namelen + e.xe_vallen;
		if (sz > xh->xh_used - off || e.xe_namelen == 0 || !ns_prefix(e.xe_ns) ||
		    memchr(area + off + sizeof(e), '\0', e.xe_namelen))
			return "xattr entry malformed"; /* a NUL would cut the listed name */
		off += sz;
		n++;
	}
	return n == xh->xh_count ? NULL : "xattr block: xh_count is not the number of entries";
}

static int xblock(struct shoal_fs *fs, struct shoal_inode *ip, struct shoal_buf **b)
{
	uint64_t blk = ip_di(ip)->di_xattr;
	if (blk < fs->fs_sb.sb_rgfirst || blk >= fs->fs_sb.sb_blocks - 1)
		return fs_corrupt(fs, ip->i_ino, "xattr block pointer") ? -EIO : -EIO;
	int err = buf_read_ip(fs, ip, blk, SHOAL_MT_XATTR, b);
	if (err)
		return err;
	const char *bad = xblock_bad(fs, *b);
	if (bad) {
		buf_put(fs, *b);
		return fs_corrupt_ino(fs, blk, ip->i_ino, bad) ? -EIO : -EIO;
	}
	return 0;
}

/* Find (ns, name) in the block: offset or -ENODATA; -EIO if malformed. */
static int xfind(struct shoal_buf *b, uint8_t ns, const char *name, struct shoal_xattr_ent *out)
{
	struct shoal_xattr_hdr *xh = (void *)b->b_data;
	uint8_t *area = b->b_data + SHOAL_XATTR_ENTRIES_OFF;
	size_t nl = strlen(name);
	uint32_t off = 0;

	while (off < xh->xh_used) {
		struct shoal_xattr_ent e;
		if (xh->xh_used - off < sizeof(e))
			return -EIO;
		memcpy(&e, area + off, sizeof(e));
		uint32_t sz = sizeof(e) + e.xe_namelen + e.xe_vallen;
		if (sz > xh->xh_used - off || e.xe_namelen == 0)
			return -EIO;
		if (e.xe_ns == ns && e.xe_namelen == nl && !memcmp(area + off + sizeof(e), name, nl)) {
			*out = e;
			return (int)off;
		}
		off += sz;
	}
	return -ENODATA;
}

ssize_t xattr_get(struct shoal_fs *fs, struct shoal_inode *ip, const char *name, void *value,
		  size_t size)
{
	struct shoal_xattr_ent e;
	struct shoal_buf *b;
	const char *rest;
	uint8_t ns;
	int err = split_name(name, &ns, &rest), off;

	if (err)
		return err == -EOPNOTSUPP ? -ENODATA : err;
	if (!ip_di(ip)->di_xattr)
		return -ENODATA;
	err = xblock(fs, ip, &b);
	if (err)
		return err;
	off = xfind(b, ns, rest, &e);
	if (off < 0) {
		buf_put(fs, b);
		return off;
	}
	if (size) {
		if (size < e.xe_vallen) {
			buf_put(fs, b);
			return -ERANGE;
		}
		memcpy(value, b->b_data + SHOAL_XATTR_ENTRIES_OFF + off + sizeof(e) + e.xe_namelen,
		       e.xe_vallen);
	}
	buf_put(fs, b);
	return e.xe_vallen;
}

ssize_t xattr_list(struct shoal_fs *fs, struct shoal_inode *ip, char *list, size_t size)
{
	struct shoal_buf *b;
	size_t total = 0;
	int err;

	if (!ip_di(ip)->di_xattr)
		return 0;
	err = xblock(fs, ip, &b);
	if (err)
		return err;
	struct shoal_xattr_hdr *xh = (void *)b->b_data;
	uint8_t *area = b->b_data + SHOAL_XATTR_ENTRIES_OFF;
	uint32_t off = 0;
	while (off < xh->xh_used) {
		struct shoal_xattr_ent e;
		/* xblock_bad checked every entry */
		memcpy(&e, area + off, sizeof(e));
		uint32_t sz = sizeof(e) + e.xe_namelen + e.xe_vallen;
		const char *pre = ns_prefix(e.xe_ns);
		if (pre && e.xe_ns == SHOAL_XNS_TRUSTED && !perm_is_root())
			pre = NULL; /* as listxattr(2) does without CAP_SYS_ADMIN */
		if (pre) {
			size_t need = strlen(pre) + e.xe_namelen + 1;
			if (size) {
				if (total + need > size) {
					buf_put(fs, b);
					return -ERANGE;
				}
				memcpy(list + total, pre, strlen(pre));
				memcpy(list + total + strlen(pre), area + off + sizeof(e), e.xe_namelen);
				list[total + need - 1] = 0;
			}
			total += need;
		}
		off += sz;
	}
	buf_put(fs, b);
	return (ssize_t)total;
}

int xattr_set(struct shoal_fs *fs, struct shoal_inode *ip, const char *name, const void *value,
	      size_t size, int flags)
{
	struct shoal_dinode *di = ip_di(ip);
	struct shoal_xattr_ent e;
	struct shoal_buf *b;
	const char *rest;
	uint8_t ns;
	int err = split_name(name, &ns, &rest), off;

	if (err)
		return err;
	size_t nl = strlen(rest);
	uint32_t need = (uint32_t)(sizeof(e) + nl + size);
	if (size > 65535 || need > fs->fs_bsize - SHOAL_XATTR_ENTRIES_OFF)
		return -E2BIG;
	if (!di->di_xattr) {
		uint64_t blk;
		uint32_t got;
		if (flags & XATTR_REPLACE)
			return -ENODATA;
		err = rg_alloc(fs, ip->i_ino + 1, 1, SHOAL_B_DATA, &blk, &got);
		if (err)
			return err;
		err = buf_new(fs, blk, &b);
		if (err) {
			rg_free(fs, blk, 1);
			return err;
		}
		meta_seal(b->b_data, fs->fs_bsize, SHOAL_MT_XATTR, blk, 0);
		trans_add(fs, b);
		inode_dirty(fs, ip, 1);
		di->di_xattr = blk;
		di->di_blocks++;
	} else {
		err = xblock(fs, ip, &b);
		if (err)
			return err;
	}
	struct shoal_xattr_hdr *xh = (void *)b->b_data;
	uint8_t *area = b->b_data + SHOAL_XATTR_ENTRIES_OFF;
	off = xfind(b, ns, rest, &e);
	if (off == -EIO) {
		buf_put(fs, b);
		return fs_corrupt(fs, di->di_xattr, "xattr entries") ? -EIO : -EIO;
	}
	if (off >= 0 && (flags & XATTR_CREATE)) {
		buf_put(fs, b);
		return -EEXIST;
	}
	if (off < 0 && (flags & XATTR_REPLACE)) {
		buf_put(fs, b);
		return -ENODATA;
	}
	uint32_t oldsz = off >= 0 ? (uint32_t)(sizeof(e) + e.xe_namelen + e.xe_vallen) : 0;
	if (xh->xh_used - oldsz + need > fs->fs_bsize - SHOAL_XATTR_ENTRIES_OFF) {
		buf_put(fs, b);
		return -ENOSPC;
	}
	trans_add(fs, b);
	if (off >= 0) {
		memmove(area + off, area + off + oldsz, xh->xh_used - off - oldsz);
		xh->xh_used -= oldsz;
		xh->xh_count--;
	}
	e.xe_ns = ns;
	e.xe_namelen = (uint8_t)nl;
	e.xe_vallen = (uint16_t)size;
	memcpy(area + xh->xh_used, &e, sizeof(e));
	memcpy(area + xh->xh_used + sizeof(e), rest, nl);
	memcpy(area + xh->xh_used + sizeof(e) + nl, value, size);
	xh->xh_used += need;
	xh->xh_count++;
	memset(area + xh->xh_used, 0, fs->fs_bsize - SHOAL_XATTR_ENTRIES_OFF - xh->xh_used);
	buf_put(fs, b);
	inode_dirty(fs, ip, 1);
	inode_touch(ip, 0, 0, 1);
	return 0;
}

int xattr_remove(struct shoal_fs *fs, struct shoal_inode *ip, const char *name)
{
	struct shoal_dinode *di = ip_di(ip);
	struct shoal_xattr_ent e;
	struct shoal_buf *b;
	const char *rest;
	uint8_t ns;
	int err = split_name(name, &ns, &rest), off;

	if (err)
		return err == -EOPNOTSUPP ? -ENODATA : err;
	if (!di->di_xattr)
		return -ENODATA;
	err = xblock(fs, ip, &b);
	if (err)
		return err;
	off = xfind(b, ns, rest, &e);
	if (off < 0) {
		buf_put(fs, b);
		return off;
	}
	struct shoal_xattr_hdr *xh = (void *)b->b_data;
	uint8_t *area = b->b_data + SHOAL_XATTR_ENTRIES_OFF;
	uint32_t sz = (uint32_t)(sizeof(e) + e.xe_namelen + e.xe_vallen);
	trans_add(fs, b);
	memmove(area + off, area + off + sz, xh->xh_used - off - sz);
	xh->xh_used -= sz;
	memset(area + xh->xh_used, 0, sz);
	xh->xh_count--;
	uint64_t blk = b->b_blkno;
	int empty = xh->xh_count == 0;
	buf_put(fs, b);
	inode_dirty(fs, ip, 1);
	if (empty) {
		di->di_xattr = 0;
		di->di_blocks--;
		err = rg_free(fs, blk, 1);
	}
	inode_touch(ip, 0, 0, 1);
	return err;
}

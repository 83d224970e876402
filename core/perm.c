/*
 * perm.c - permission checks, made by libshoal itself.
 *
 * The kernel checks permissions too (shoal-mount mounts with
 * default_permissions, the only way a path walk through cached dentries is
 * checked at all); libshoal checks again for its own callers and so that
 * the rules hold for any front end.  Dropping default_permissions would save
 * a GETATTR round trip per create or unlink (the kernel drops a directory's
 * attributes after each change in it) but would let cached dentries bypass
 * a directory's search permission: measured and rejected.  Each request
 * tells libshoal who is asking (shoal_caller_set), and the rules are those
 * of the kernel's generic_permission() and may_delete():
 *
 *  (1) no caller set (tools, unit tests) or uid 0: read and write are
 *      always allowed, execute/search when any x bit is set or on a
 *      directory (CAP_DAC_OVERRIDE);
 *  (2) otherwise the owner's bits if the caller owns the inode, else the
 *      group's if the caller is in its group (primary, then supplementary
 *      groups, asked for only when needed), else the others' bits;
 *  (3) in a sticky directory only root, the directory's owner or the
 *      entry's owner may remove or rename an entry.
 *
 *  (4) a caller other than the owner is checked against the inode's access
 *      ACL when it has one (acl.c, as the kernel's check_acl, which is
 *      asked only when the mode's group bits are not 0).
 */
#include <errno.h>
#include <stddef.h>

#include "internal.h"

/* A copy, so that a caller that returns without clearing leaves no
 * dangling pointer; every request sets it before its first check. */
static __thread struct shoal_ctx perm_ctx;
static __thread const struct shoal_ctx *perm_current;

void shoal_caller_set(const struct shoal_ctx *ctx)
{
	if (ctx) {
		perm_ctx = *ctx;
		perm_current = &perm_ctx;
	} else {
		perm_current = NULL;
	}
}

const struct shoal_ctx *perm_caller(void)
{
	return perm_current;
}

int perm_is_root(void)
{
	return !perm_current || perm_current->c_uid == 0;
}

uid_t perm_uid(void)
{
	return perm_current ? perm_current->c_uid : 0;
}

int perm_in_group(gid_t gid)
{
	const struct shoal_ctx *c = perm_current;
	if (!c || c->c_gid == gid)
		return 1;
	return c->c_in_group ? c->c_in_group(c->c_arg, gid) : 0;
}

int perm_check(struct shoal_fs *fs, struct shoal_inode *ip, int mask)
{
	struct shoal_dinode *di = ip_di(ip);
	unsigned bits;

	mask &= 7;
	if (perm_is_root()) {
		if ((mask & 1) && !S_ISDIR(di->di_mode) && !(di->di_mode & 0111))
			return -EACCES;
		return 0;
	}
	if (perm_current->c_uid == di->di_uid) {
		bits = (di->di_mode >> 6) & 7;
	} else {
		if (di->di_xattr && (di->di_mode & 070) && !S_ISLNK(di->di_mode)) {
			int err = acl_permission(fs, ip, mask);
			if (err <= 0)
				return err;
		}
		if (perm_in_group(di->di_gid))
			bits = (di->di_mode >> 3) & 7;
		else
			bits = di->di_mode & 7;
	}
	return (bits & (unsigned)mask) == (unsigned)mask ? 0 : -EACCES;
}

int perm_owner(struct shoal_inode *ip)
{
	return perm_is_root() || perm_current->c_uid == ip_di(ip)->di_uid ? 0 : -EPERM;
}

int perm_sticky(struct shoal_inode *dp, struct shoal_inode *ip)
{
	if (!(ip_di(dp)->di_mode & S_ISVTX) || perm_is_root())
		return 0;
	uid_t u = perm_current->c_uid;
	return u == ip_di(ip)->di_uid || u == ip_di(dp)->di_uid ? 0 : -EPERM;
}

/*
 * xops.c - extended attributes and inode flags (chattr) of
 * include/shoal/shoal.h: who may set which name space, the flags only
 * root or the owner may change, and the kernel's cached attributes they
 * change.  The rest of the operations are in ops.c.
 *
 * Invariants:
 *  (1) a change holds the inode's glock EX, a read SH (R1);
 *  (2) every inode_get is paired with an inode_put before the lock drops.
 */
#include <errno.h>
#include <linux/fs.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "lock.h"
#include "ops.h"

/* An access ACL carries the mode's permission bits (ext4's
 * posix_acl_update_mode): acl.c. */
/* xattr_permission(): user.* follows the file's rwx bits (regular files
 * and directories only), trusted.* and security.* are root's, ACLs the
 * owner's.  write: 1 for set, 2 for remove.  Removing security.capability
 * needs write permission only: whoever may write the file drops it by
 * writing anyway (kill_priv), and the kernel removes it so, as the
 * writer, before a write or fallocate (file_remove_privs); a user's own
 * removexattr is refused by the kernel without CAP_SETFCAP. */
static int xattr_allowed(struct shoal_fs *fs, struct shoal_inode *ip, const char *name, int write)
{
	mode_t m = ip_di(ip)->di_mode;

	if (write == 2 && !strcmp(name, "security.capability") && S_ISREG(m))
		return perm_check(fs, ip, 2);

	if (!strncmp(name, "user.", 5)) {
		if (!S_ISREG(m) && !S_ISDIR(m))
			return write ? -EPERM : -ENODATA;
		if (S_ISDIR(m) && (m & S_ISVTX) && write && perm_owner(ip))
			return -EPERM;
		return perm_check(fs, ip, write ? 2 : 4);
	}
	if (!strncmp(name, "trusted.", 8))
		return perm_is_root() ? 0 : write ? -EPERM : -ENODATA;
	if (!strncmp(name, "system.posix_acl_", 17)) {
		if (S_ISLNK(m))
			return -EOPNOTSUPP; /* as posix_acl_xattr_get/set */
		if (write == 1 && !S_ISDIR(m) && !strcmp(name, "system.posix_acl_default"))
			return -EACCES; /* set_posix_acl */
		return write ? perm_owner(ip) : 0;
	}
	if (!strncmp(name, "security.", 9))
		return write && !perm_is_root() ? -EPERM : 0;
	return 0;
}

static int do_setxattr(struct shoal_fs *fs, uint64_t ino, const char *name, const void *value,
		   size_t size, int flags)
{
	struct shoal_inode *ip;
	int err;
	LOCK(fs);
	err = iget(fs, ino, GL_EX, &ip);
	if (!err && ip_di(ip)->di_xattr) {
		err = rg_hold_of(fs, ip_di(ip)->di_xattr);
		if (err)
			inode_put(fs, ip);
	}
	if (!err) {
		int minimal = 0;
		err = xattr_allowed(fs, ip, name, 1);
		if (!err && nochange_flags(ip))
			err = -EPERM;
		if (!err)
			err = trans_begin_alloc(fs, RES_META, 1);
		if (!err && !strcmp(name, "system.posix_acl_access")) {
			mode_t m = ip_di(ip)->di_mode;
			minimal = acl_to_mode(value, size, &m);
			/* posix_acl_update_mode(): without CAP_FSETID */
			if (!perm_is_root() && !perm_in_group(ip_di(ip)->di_gid))
				m &= ~(mode_t)S_ISGID;
			if (minimal < 0) {
				err = minimal;
			} else {
				inode_dirty(fs, ip, 1);
				ip_di(ip)->di_mode = m;
				inode_touch(ip, 0, 0, 1);
				if (minimal) {
					err = xattr_remove(fs, ip, name);
					if (err == -ENODATA)
						err = 0;
				}
			}
		}
		if (!err && !strcmp(name, "system.posix_acl_default")) {
			mode_t scratch = 0; /* only checked: acl_create reads it */
			int r = acl_to_mode(value, size, &scratch);
			err = r < 0 ? r : 0;
		}
		if (!err && !minimal)
			err = xattr_set(fs, ip, name, value, size, flags);
		inode_put(fs, ip);
	}
	UNLOCK(fs);
	return err;
}

static ssize_t do_getxattr(struct shoal_fs *fs, uint64_t ino, const char *name, void *value,
		       size_t size)
{
	struct shoal_inode *ip;
	ssize_t n;
	LOCK(fs);
	n = iget(fs, ino, GL_SH, &ip);
	if (!n) {
		n = xattr_allowed(fs, ip, name, 0);
		if (!n)
			n = xattr_get(fs, ip, name, value, size);
		inode_put(fs, ip);
	}
	UNLOCK(fs);
	return n;
}

static ssize_t do_listxattr(struct shoal_fs *fs, uint64_t ino, char *list, size_t size)
{
	struct shoal_inode *ip;
	ssize_t n;
	LOCK(fs);
	n = iget(fs, ino, GL_SH, &ip);
	if (!n) {
		n = xattr_list(fs, ip, list, size);
		inode_put(fs, ip);
	}
	UNLOCK(fs);
	return n;
}

static int do_removexattr(struct shoal_fs *fs, uint64_t ino, const char *name)
{
	struct shoal_inode *ip;
	int err;
	LOCK(fs);
	err = iget(fs, ino, GL_EX, &ip);
	if (!err && ip_di(ip)->di_xattr) {
		err = rg_hold_of(fs, ip_di(ip)->di_xattr);
		if (err)
			inode_put(fs, ip);
	}
	if (!err) {
		err = xattr_allowed(fs, ip, name, 2);
		if (!err && nochange_flags(ip))
			err = -EPERM;
		if (!err)
			err = trans_begin(fs, RES_META);
		if (!err)
			err = xattr_remove(fs, ip, name);
		inode_put(fs, ip);
	}
	UNLOCK(fs);
	return err;
}

static int do_getflags(struct shoal_fs *fs, uint64_t ino, uint32_t *flags)
{
	struct shoal_inode *ip;
	int err;
	LOCK(fs);
	err = iget(fs, ino, GL_SH, &ip);
	if (!err) {
		*flags = ip_di(ip)->di_flags & SHOAL_DIF_USER_MASK;
		inode_put(fs, ip);
	}
	UNLOCK(fs);
	return err;
}

static int do_setflags(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t ino,
		   uint32_t flags)
{
	struct shoal_inode *ip;
	int err;

	if (flags & ~SHOAL_DIF_USER_MASK)
		return -EOPNOTSUPP;
	LOCK(fs);
	err = iget(fs, ino, GL_EX, &ip);
	if (err)
		goto out;
	struct shoal_dinode *di = ip_di(ip);
	uint32_t old = di->di_flags & SHOAL_DIF_USER_MASK;
	if (ctx->c_uid != 0 && ctx->c_uid != di->di_uid)
		err = -EPERM;
	else if (((old ^ flags) & (SHOAL_DIF_IMMUTABLE | SHOAL_DIF_APPEND)) && ctx->c_uid != 0)
		err = -EPERM; /* CAP_LINUX_IMMUTABLE */
	if (!err)
		err = trans_begin(fs, 2);
	if (!err) {
		inode_dirty(fs, ip, 1);
		di->di_flags = (di->di_flags & ~SHOAL_DIF_USER_MASK) | flags;
		inode_touch(ip, 0, 0, 1);
	}
	inode_put(fs, ip);
out:
	UNLOCK(fs);
	return err;
}

int shoal_setxattr(struct shoal_fs *fs, uint64_t ino, const char *name, const void *value,
		   size_t size, int flags)
{
	return RUN(fs, do_setxattr(fs, ino, name, value, size, flags));
}

ssize_t shoal_getxattr(struct shoal_fs *fs, uint64_t ino, const char *name, void *value,
		       size_t size)
{
	return RUN(fs, do_getxattr(fs, ino, name, value, size));
}

ssize_t shoal_listxattr(struct shoal_fs *fs, uint64_t ino, char *list, size_t size)
{
	return RUN(fs, do_listxattr(fs, ino, list, size));
}

int shoal_removexattr(struct shoal_fs *fs, uint64_t ino, const char *name)
{
	return RUN(fs, do_removexattr(fs, ino, name));
}

int shoal_getflags(struct shoal_fs *fs, uint64_t ino, uint32_t *flags)
{
	return RUN(fs, do_getflags(fs, ino, flags));
}

int shoal_setflags(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t ino,
		   uint32_t flags)
{
	return RUN(fs, do_setflags(fs, ctx, ino, flags));
}

/*
 * ops.c - the operations of include/shoal/shoal.h (reads, writes, fsync
 * and lseek are in rw.c, fallocate in falloc.c, the helpers they share
 * in ops.h): each takes fs_lock,
 * reserves its journal space, does its work through the inode,
 * directory, file and xattr modules, and returns 0 / size / -errno.
 *
 * Permission checks (rwx and POSIX ACLs, sticky directories, ownership
 * for chmod/chown) are made by the kernel from our attributes and ACLs
 * (shoal-mount always mounts with default_permissions and FUSE_POSIX_ACL)
 * and again here (perm.c, acl.c); this layer enforces what the kernel
 * cannot know: the immutable and append-only flags, name rules, link
 * limits, emptiness and cycles for rename, set-group-ID inheritance, the
 * umask or a directory's default ACL for a new inode, and the mode an
 * access ACL implies.
 *
 * Invariants:
 *  (1) an operation calls trans_begin only at points where the filesystem
 *      is consistent (dir_make_room before the operation's own reservation);
 *  (2) every inode_get is paired with an inode_put before the lock drops.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "lock.h"
#include "ops.h"

#define SHOAL_LINK_MAX 65000


static int check_name(const char *name)
{
	size_t len = strlen(name);
	if (len == 0 || strchr(name, '/'))
		return -EINVAL;
	if (len > SHOAL_NAME_MAX)
		return -ENAMETOOLONG;
	return 0;
}

static int is_dot(const char *name)
{
	return !strcmp(name, ".") || !strcmp(name, "..");
}

static uint8_t mode_dt(mode_t m)
{
	return (uint8_t)IFTODT(m);
}

static int get_dir(struct shoal_fs *fs, uint64_t ino, struct shoal_inode **out)
{
	int err = inode_get(fs, ino, out);
	if (err)
		return err;
	if (!S_ISDIR(ip_di(*out)->di_mode)) {
		inode_put(fs, *out);
		return -ENOTDIR;
	}
	if (ip_di(*out)->di_nlink == 0) {
		inode_put(fs, *out);
		return -ENOENT; /* removed directory */
	}
	return 0;
}

/* The node uses the inode (the kernel knows it): its iopen glock, SH. */
static int hold_open(struct shoal_fs *fs, uint64_t ino)
{
	return fs->fs_cluster ? gl_hold(fs, GL_IOPEN, ino, GL_SH) : 0;
}

/*
 * A new inode's glocks: its inode glock EX and its iopen glock, asked for
 * in one lock-module round trip.  iopen is tried EX (no other node can use
 * an inode not made yet), which also spares the round trip of freeing it
 * while no other node used it (inode_free_cluster); SH if that fails.
 * When they are not cached, the same round trip asks for those of the
 * NEW_AHEAD - 1 inodes this node is likely to make next (free dinode
 * blocks after this one in a group it holds, so no other node can make
 * them meanwhile): a series of creates costs one round trip per NEW_AHEAD.
 */
#define NEW_AHEAD 32

static int hold_new(struct shoal_fs *fs, uint64_t ino)
{
	struct gl_want w[2 * NEW_AHEAD];
	uint64_t next[NEW_AHEAD - 1];
	uint32_t k = 0;
	int n = 0;

	if (!gl_have(fs, GL_INODE, ino, GL_EX))
		k = rg_peek_after(fs, ino, NEW_AHEAD - 1, next);
	w[n++] = (struct gl_want){ GL_INODE, ino, GL_EX, GL_EX };
	w[n++] = (struct gl_want){ GL_IOPEN, ino, GL_EX, GL_SH };
	for (uint32_t i = 0; i < k; i++) {
		w[n++] = (struct gl_want){ GL_INODE, next[i], GL_EX, GL_EX };
		w[n++] = (struct gl_want){ GL_IOPEN, next[i], GL_EX, GL_EX };
	}
	return gl_hold_many(fs, w, n, 2);
}

static int do_lookup(struct shoal_fs *fs, uint64_t parent, const char *name, struct stat *st)
{
	struct shoal_inode *dp, *ip;
	uint64_t ino;
	int err = check_name(name);

	if (err && strcmp(name, "..") && strcmp(name, "."))
		return err;
	LOCK(fs);
	err = hold(fs, parent, GL_SH);
	if (err)
		goto out;
	if (!strcmp(name, ".")) {
		/* by node id, any inode (a file handle: open_by_handle_at,
		 * NFS); one that is gone is ESTALE */
		ino = parent;
		goto found;
	}
	err = get_dir(fs, parent, &dp);
	if (err)
		goto out;
	err = perm_check(fs, dp, 1);
	if (err) {
		inode_put(fs, dp);
		goto out;
	}
	if (!strcmp(name, ".."))
		ino = ip_di(dp)->di_parent ? ip_di(dp)->di_parent : parent;
	else
		err = dir_lookup(fs, dp, name, &ino, NULL);
	inode_put(fs, dp);
found:
	if (!err)
		err = hold(fs, ino, GL_SH);
	if (!err)
		err = hold_open(fs, ino);
	if (err)
		goto out;
	err = inode_get(fs, ino, &ip);
	if (err) {
		if (err == -ESTALE && ino != parent)
			err = -EIO; /* entry points at something that is not an inode */
		goto out;
	}
	if (ino == parent && !ip_di(ip)->di_nlink && !ip->i_open) {
		inode_put(fs, ip); /* unlinked: a handle of it is stale */
		err = -ESTALE;
		goto out;
	}
	inode_lookups(ip, ip->i_nlookup + 1);
	inode_stat(fs, ip, st);
	inode_put(fs, ip);
out:
	UNLOCK(fs);
	return err;
}

/*
 * Cluster: ip is about to leave memory (its last reference on this node):
 * whether it is to be freed depends on its link count, which another node
 * may have changed, so read the dinode under the glock first.  A failure
 * other than a restart is ignored: the inode then keeps what it knew.
 */
static int last_ref_refresh(struct shoal_fs *fs, struct shoal_inode *ip, int nohold)
{
	struct shoal_inode *x;
	int err;

	if (!fs->fs_cluster || nohold)
		return 0;
	err = hold(fs, ip->i_ino, GL_SH);
	if (!err && inode_get(fs, ip->i_ino, &x) == 0)
		inode_put(fs, x);
	return err == -ERESTART ? err : 0;
}

static int do_forget(struct shoal_fs *fs, uint64_t ino, uint64_t nlookup, int nohold)
{
	struct shoal_inode *ip;
	int err = 0;
	LOCK(fs);
	ip = inode_find(fs, ino); /* not in memory: nothing looked it up */
	if (ip) {
		uint64_t left = ip->i_nlookup > nlookup ? ip->i_nlookup - nlookup : 0;
		if (!left && !ip->i_open)
			err = last_ref_refresh(fs, ip, nohold);
		if (!err)
			inode_lookups(ip, left);
		inode_put(fs, ip);
	}
	UNLOCK(fs);
	return err;
}

void shoal_forget(struct shoal_fs *fs, uint64_t ino, uint64_t nlookup)
{
	if (RUN(fs, do_forget(fs, ino, nlookup, 0)) < 0) /* lock manager gone */
		(void)do_forget(fs, ino, nlookup, 1);
}

static int do_getattr(struct shoal_fs *fs, uint64_t ino, struct stat *st)
{
	struct shoal_inode *ip;
	int err;
	LOCK(fs);
	err = hold(fs, ino, GL_SH);
	if (!err)
		err = inode_get(fs, ino, &ip);
	if (!err) {
		inode_stat(fs, ip, st);
		inode_put(fs, ip);
	}
	UNLOCK(fs);
	return err;
}

static int do_generation(struct shoal_fs *fs, uint64_t ino, uint64_t *g)
{
	struct shoal_inode *ip;
	int err;
	LOCK(fs);
	err = iget(fs, ino, GL_SH, &ip);
	if (!err) {
		*g = ip_di(ip)->di_generation;
		inode_put(fs, ip);
	}
	UNLOCK(fs);
	return err;
}

static int setattr_allowed(struct shoal_fs *fs, struct shoal_inode *ip,
			   const struct shoal_ctx *ctx, const struct stat *attr, int valid);

static void set_ts(struct shoal_ts *t, const struct timespec *ts)
{
	t->ts_sec = ts->tv_sec;
	t->ts_nsec = (uint32_t)ts->tv_nsec;
}

/*
 * What writing, truncating or fallocating a file drops (fuse/main.c killpriv_v2: the
 * kernel leaves it to libshoal, and so it holds for what another node
 * changed too): the set-ID bits when the caller is not root (the kernel's
 * test is CAP_FSETID, which libshoal cannot see; ext4 drops them for every
 * caller without it), the group one only with group execute (without it,
 * it marks mandatory locking), and security.capability for every caller.
 * Nothing for the kernel's writeback of a mapping (SHOAL_CTX_CACHE), as
 * ext4 drops nothing on a write through a mapping.
 * ops_kill_priv_prepare runs before the transaction begins: it holds the
 * group of the xattr block, which the removal may free.
 */
static const char kill_cap_name[] = "security.capability";
static __thread int privs_dropped; /* shoal_privs_dropped() */

int shoal_privs_dropped(void)
{
	int r = privs_dropped;
	privs_dropped = 0;
	return r;
}

int ops_kill_priv_prepare(struct shoal_fs *fs, const struct shoal_ctx *ctx,
			  struct shoal_inode *ip, int *cap)
{
	struct shoal_dinode *di = ip_di(ip);
	ssize_t n;

	*cap = 0;
	if ((ctx && (ctx->c_flags & SHOAL_CTX_CACHE)) || !di->di_xattr || !S_ISREG(di->di_mode))
		return 0;
	n = xattr_get(fs, ip, kill_cap_name, NULL, 0);
	if (n == -ENODATA)
		return 0;
	if (n < 0)
		return (int)n;
	*cap = 1;
	return rg_hold_of(fs, di->di_xattr);
}

int ops_kill_priv(struct shoal_fs *fs, const struct shoal_ctx *ctx, struct shoal_inode *ip,
		  int cap)
{
	struct shoal_dinode *di = ip_di(ip);

	if (ctx && (ctx->c_flags & SHOAL_CTX_CACHE))
		return 0;
	if (ctx && ctx->c_uid != 0 && (di->di_mode & (S_ISUID | S_ISGID)) && S_ISREG(di->di_mode)) {
		mode_t was = di->di_mode;
		inode_dirty(fs, ip, 1);
		di->di_mode &= ~S_ISUID;
		if (di->di_mode & S_IXGRP)
			di->di_mode &= ~S_ISGID;
		privs_dropped |= was != di->di_mode;
	}
	if (cap) {
		int err = xattr_remove(fs, ip, kill_cap_name);
		if (err && err != -ENODATA)
			return err;
		privs_dropped |= !err;
	}
	return 0;
}

static int setattr_locked(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t ino,
			  const struct stat *attr, int valid, struct stat *st);

static int do_setattr(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t ino,
		  const struct stat *attr, int valid, struct stat *st)
{
	struct shoal_inode *ip;
	int err;

	if (!(valid & SHOAL_SET_SIZE))
		return setattr_locked(fs, ctx, ino, attr, valid, st);
	/* truncate frees blocks: no read may be moving data from them */
	err = io_get(fs, ino, GL_EX, &ip);
	if (err)
		return err;
	pthread_rwlock_wrlock(&ip->i_iolock);
	err = setattr_locked(fs, ctx, ino, attr, valid, st);
	pthread_rwlock_unlock(&ip->i_iolock);
	io_put(fs, ip);
	return err;
}

static int setattr_locked(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t ino,
			  const struct stat *attr, int valid, struct stat *st)
{
	struct shoal_inode *ip;
	struct shoal_dinode *di;
	int err;

	LOCK(fs);
	err = hold(fs, ino, GL_EX);
	if (err)
		goto out;
	err = inode_get(fs, ino, &ip);
	if (err)
		goto out;
	di = ip_di(ip);
	if ((valid & (SHOAL_SET_MODE | SHOAL_SET_UID | SHOAL_SET_GID | SHOAL_SET_SIZE)) &&
	    nochange_flags(ip)) {
		err = -EPERM;
		goto out_put;
	}
	if ((valid & (SHOAL_SET_ATIME | SHOAL_SET_MTIME | SHOAL_SET_ATIME_NOW |
		      SHOAL_SET_MTIME_NOW)) &&
	    (di->di_flags & SHOAL_DIF_IMMUTABLE)) {
		err = -EPERM;
		goto out_put;
	}
	/* notify_change(): explicit times (ATTR_TIMES_SET) on an append-only
	 * file are refused; "now" is allowed */
	if ((((valid & SHOAL_SET_ATIME) && !(valid & SHOAL_SET_ATIME_NOW)) ||
	     ((valid & SHOAL_SET_MTIME) && !(valid & SHOAL_SET_MTIME_NOW))) &&
	    (di->di_flags & SHOAL_DIF_APPEND)) {
		err = -EPERM;
		goto out_put;
	}
	if (valid & SHOAL_SET_SIZE) {
		if (S_ISDIR(di->di_mode)) {
			err = -EISDIR;
			goto out_put;
		}
		if (!S_ISREG(di->di_mode)) {
			err = -EINVAL;
			goto out_put;
		}
	}
	err = setattr_allowed(fs, ip, ctx, attr, valid);
	int cap = 0;
	if (!err && (valid & SHOAL_SET_SIZE) && (uint64_t)attr->st_size < di->di_size &&
	    di->di_height) /* the groups of the blocks past the new end */
		err = bmap_hold_free_rgs(fs, ip, ((uint64_t)attr->st_size + fs->fs_bsize - 1) >>
						       fs->fs_bshift, UINT64_MAX);
	if (!err && (valid & SHOAL_SET_SIZE))
		err = ops_kill_priv_prepare(fs, ctx, ip, &cap);
	int acl = 0;
	if (!err && (valid & SHOAL_SET_MODE))
		err = acl = acl_chmod_prepare(fs, ip);
	if (err < 0)
		goto out_put;
	err = trans_begin_alloc(fs, trans_rg_blocks(fs) + RES_META, acl ? 1 : 0);
	if (!err && (valid & SHOAL_SET_SIZE))
		err = ops_kill_priv(fs, ctx, ip, cap); /* an explicit mode below wins */
	if (err)
		goto out_put;
	inode_dirty(fs, ip, (valid & ~(SHOAL_SET_ATIME | SHOAL_SET_MTIME | SHOAL_SET_ATIME_NOW |
				       SHOAL_SET_MTIME_NOW | SHOAL_SET_CTIME)) != 0);
	if (valid & SHOAL_SET_SIZE) {
		err = file_truncate(fs, ip, (uint64_t)attr->st_size);
		if (err)
			goto out_put;
		inode_touch(ip, 0, 1, 1);
	}
	if (valid & SHOAL_SET_MODE) {
		mode_t m = attr->st_mode & 07777;
		gid_t g = valid & SHOAL_SET_GID ? attr->st_gid : di->di_gid;
		if ((m & S_ISGID) && !perm_is_root() && !perm_in_group(g))
			m &= ~S_ISGID; /* like chmod(2) without CAP_FSETID */
		di->di_mode = (di->di_mode & S_IFMT) | m;
		if (acl && (err = acl_chmod(fs, ip)) < 0) /* posix_acl_chmod */
			goto out_put;
	}
	if (valid & (SHOAL_SET_UID | SHOAL_SET_GID)) {
		if (valid & SHOAL_SET_UID)
			di->di_uid = attr->st_uid;
		if (valid & SHOAL_SET_GID)
			di->di_gid = attr->st_gid;
		/* like ext4: changing the owner of a non-directory clears set-ID bits */
		if (!(valid & SHOAL_SET_MODE) && !S_ISDIR(di->di_mode)) {
			di->di_mode &= ~S_ISUID;
			if (di->di_mode & S_IXGRP)
				di->di_mode &= ~S_ISGID;
		}
	}
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	if (valid & SHOAL_SET_ATIME_NOW)
		set_ts(&di->di_atime, &now);
	else if (valid & SHOAL_SET_ATIME)
		set_ts(&di->di_atime, &attr->st_atim);
	if (valid & SHOAL_SET_MTIME_NOW)
		set_ts(&di->di_mtime, &now);
	else if (valid & SHOAL_SET_MTIME)
		set_ts(&di->di_mtime, &attr->st_mtim);
	if (valid & SHOAL_SET_CTIME)
		set_ts(&di->di_ctime, &attr->st_ctim);
	else
		set_ts(&di->di_ctime, &now);
	(void)ctx;
	inode_stat(fs, ip, st);
out_put:
	inode_put(fs, ip);
out:
	UNLOCK(fs);
	return err;
}

/* May the caller make these attribute changes?  (chmod, chown, utimes and
 * truncate rules of the kernel's setattr_prepare and may_open.) */
static int setattr_allowed(struct shoal_fs *fs, struct shoal_inode *ip,
			   const struct shoal_ctx *ctx, const struct stat *attr, int valid)
{
	struct shoal_dinode *di = ip_di(ip);
	int err;

	if (perm_is_root())
		return 0;
	/* the kernel's own "kill suid/sgid" before a write by a non-owner: a
	 * mode change that only drops set-ID bits is not a chmod */
	mode_t oldm = di->di_mode & 07777, newm = attr->st_mode & 07777;
	int killpriv = (valid & SHOAL_SET_MODE) && (newm & ~oldm) == 0 &&
		       ((oldm ^ newm) & ~(mode_t)(S_ISUID | S_ISGID)) == 0;
	if ((valid & SHOAL_SET_MODE) && !killpriv && (err = perm_owner(ip)))
		return err;
	if ((valid & SHOAL_SET_UID) && attr->st_uid != di->di_uid)
		return -EPERM;
	if ((valid & SHOAL_SET_GID) && attr->st_gid != di->di_gid &&
	    (perm_owner(ip) || !perm_in_group(attr->st_gid)))
		return -EPERM;
	if ((valid & (SHOAL_SET_UID | SHOAL_SET_GID)) && perm_owner(ip))
		return -EPERM;
	if (valid & (SHOAL_SET_ATIME | SHOAL_SET_MTIME | SHOAL_SET_ATIME_NOW | SHOAL_SET_MTIME_NOW)) {
		int explicit_time = ((valid & SHOAL_SET_ATIME) && !(valid & SHOAL_SET_ATIME_NOW)) ||
				    ((valid & SHOAL_SET_MTIME) && !(valid & SHOAL_SET_MTIME_NOW));
		if (perm_owner(ip)) {
			if (explicit_time)
				return -EPERM;
			if ((err = perm_check(fs, ip, 2)))
				return err;
		}
	}
	if ((valid & SHOAL_SET_SIZE) && !(ctx && (ctx->c_flags & SHOAL_CTX_FH)) &&
	    (err = perm_check(fs, ip, 2)))
		return err;
	return 0;
}

/*
 * Create an inode named name in parent: the shared part of mknod, mkdir,
 * symlink, create and tmpfile (name NULL: an inode with no name and no
 * link, UNLINKED in its bitmap, i_linkable).  Returns with *ipp referenced.
 */
static int make_node(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t parent,
		     const char *name, mode_t mode, dev_t rdev, const char *target,
		     struct shoal_inode **ipp)
{
	struct shoal_inode *dp, *ip;
	struct acl_new an = { 0 };
	uint64_t ino;
	gid_t gid;
	int err = name ? check_name(name) : 0;

	if (err)
		return is_dot(name) ? -EEXIST : err;
	if (name && is_dot(name))
		return -EEXIST;
	err = hold(fs, parent, GL_EX);
	if (err)
		return err;
	err = get_dir(fs, parent, &dp);
	if (err)
		return err;
	if (ip_di(dp)->di_flags & SHOAL_DIF_IMMUTABLE) {
		err = -EPERM;
		goto out_dp;
	}
	err = perm_check(fs, dp, 3);
	if (err)
		goto out_dp;
	if ((S_ISCHR(mode) || S_ISBLK(mode)) && !perm_is_root()) {
		err = -EPERM; /* CAP_MKNOD */
		goto out_dp;
	}
	if (name) {
		err = dir_lookup(fs, dp, name, &ino, NULL);
		if (err != -ENOENT) {
			err = err ? err : -EEXIST;
			goto out_dp;
		}
		if (S_ISDIR(mode) && ip_di(dp)->di_nlink >= SHOAL_LINK_MAX) {
			err = -EMLINK;
			goto out_dp;
		}
		err = dir_make_room(fs, dp, name);
		if (err)
			goto out_dp;
	}
	/* the set-ID rules below see the mode asked for, as inode_init_owner
	 * runs before ext4_init_acl */
	mode_t acl_mode = mode;
	err = acl_create(fs, dp, &acl_mode, ctx->c_umask, &an);
	if (err)
		goto out_dp;
	int acls = (an.an_acc != NULL) + (an.an_def != NULL);
	err = trans_begin_alloc(fs, RES_META + (target ? 4 : 0) + (uint32_t)acls * 2,
				1 + (target ? (strlen(target) >> fs->fs_bshift) + 1 : 0) +
					(acls ? 1 : 0));
	if (err)
		goto out_dp;
	uint64_t want = 0;
	if (fs->fs_cluster) {
		/* the new inode's glocks, before anything changes */
		err = rg_peek(fs, dp->i_ino, &want);
		if (!err)
			err = hold_new(fs, want);
		if (err)
			goto out_dp;
	}
	gid = ctx->c_gid;
	if (ip_di(dp)->di_mode & S_ISGID) {
		gid = ip_di(dp)->di_gid;
		if (S_ISDIR(mode))
			mode |= S_ISGID;
		else if ((mode & (S_ISGID | S_IXGRP)) == (S_ISGID | S_IXGRP) && ctx->c_uid != 0 &&
			 ctx->c_gid != gid)
			mode &= ~S_ISGID;
	}
	mode = (mode & ~(mode_t)0777) | (acl_mode & 0777);
	err = inode_alloc(fs, dp, want, mode, ctx->c_uid, gid, &ip);
	if (err)
		goto out_dp;
	err = acl_create_set(fs, ip, &an);
	if (err) {
		ip_di(ip)->di_nlink = 0;
		inode_put(fs, ip); /* destroyed: it has no links */
		goto out_dp;
	}
	if (S_ISDIR(mode)) {
		dir_init_inline(fs, ip);
		ip_di(ip)->di_parent = dp->i_ino;
	} else if (S_ISCHR(mode) || S_ISBLK(mode)) {
		ip_di(ip)->di_rdev = rdev;
	} else if (S_ISLNK(mode)) {
		ssize_t n = file_write(fs, ip, target, strlen(target), 0);
		if (n < 0) {
			err = (int)n;
			ip_di(ip)->di_nlink = 0;
			inode_put(fs, ip);
			goto out_dp;
		}
	}
	if (!name) {
		/* an orphan from the start (FORMAT.md 10), until linkat names it */
		err = rg_set_state(fs, ip->i_ino, SHOAL_B_UNLINKED);
		ip_di(ip)->di_nlink = 0;
		if (err) {
			inode_put(fs, ip);
			goto out_dp;
		}
		ip->i_linkable = 1;
		*ipp = ip;
		goto out_dp;
	}
	err = dir_add(fs, dp, name, ip->i_ino, mode_dt(mode));
	if (err) {
		ip_di(ip)->di_nlink = 0;
		inode_put(fs, ip); /* destroyed: it has no links */
		goto out_dp;
	}
	inode_dirty(fs, dp, 1);
	if (S_ISDIR(mode))
		ip_di(dp)->di_nlink++;
	inode_touch(dp, 0, 1, 1);
	*ipp = ip;
out_dp:
	acl_new_free(&an);
	inode_put(fs, dp);
	return err;
}

static int finish_node(struct shoal_fs *fs, struct shoal_inode *ip, struct stat *st)
{
	inode_lookups(ip, ip->i_nlookup + 1);
	inode_stat(fs, ip, st);
	inode_put(fs, ip);
	return 0;
}

static int do_mknod(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t parent,
		const char *name, mode_t mode, dev_t rdev, struct stat *st)
{
	struct shoal_inode *ip;
	int err;
	mode_t t = mode & S_IFMT;

	if (t == 0)
		mode |= t = S_IFREG;
	if (t != S_IFREG && t != S_IFIFO && t != S_IFSOCK && t != S_IFCHR && t != S_IFBLK)
		return -EINVAL;
	LOCK(fs);
	err = make_node(fs, ctx, parent, name, mode, rdev, NULL, &ip);
	if (!err)
		err = finish_node(fs, ip, st);
	UNLOCK(fs);
	return err;
}

static int do_mkdir(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t parent,
		const char *name, mode_t mode, struct stat *st)
{
	struct shoal_inode *ip;
	int err;
	LOCK(fs);
	err = make_node(fs, ctx, parent, name, S_IFDIR | (mode & 07777), 0, NULL, &ip);
	if (!err)
		err = finish_node(fs, ip, st);
	UNLOCK(fs);
	return err;
}

static int do_symlink(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t parent,
		  const char *name, const char *target, struct stat *st)
{
	struct shoal_inode *ip;
	size_t tl = strlen(target);
	int err;

	if (tl == 0)
		return -ENOENT;
	if (tl >= 4096)
		return -ENAMETOOLONG;
	LOCK(fs);
	err = make_node(fs, ctx, parent, name, S_IFLNK | 0777, 0, target, &ip);
	if (!err)
		err = finish_node(fs, ip, st);
	UNLOCK(fs);
	return err;
}

/*
 * The name create found taken (the kernel's lookup said it was free; another
 * node or process made it since): without O_EXCL, open what is there, as
 * open(2) on one machine would.  A regular file is opened with open's
 * checks and takes a lookup and an open reference; *existed says so (the
 * caller applies O_TRUNC).  Anything else: EISDIR for a directory, EEXIST
 * otherwise (FUSE cannot follow a symlink or open a device from here).
 */
static int create_open_existing(struct shoal_fs *fs, uint64_t parent, const char *name,
				int flags, struct stat *st)
{
	struct shoal_inode *dp, *ip;
	uint64_t ino;
	int err, acc = flags & O_ACCMODE;

	err = get_dir(fs, parent, &dp);
	if (err)
		return err;
	err = dir_lookup(fs, dp, name, &ino, NULL);
	inode_put(fs, dp);
	if (err)
		return err == -ENOENT ? -ERESTART : err; /* gone again: start over */
	err = hold(fs, ino, GL_SH);
	if (!err)
		err = hold_open(fs, ino);
	if (!err)
		err = inode_get(fs, ino, &ip);
	if (err)
		return err;
	if (S_ISDIR(ip_di(ip)->di_mode))
		err = -EISDIR;
	else if (!S_ISREG(ip_di(ip)->di_mode))
		err = -EEXIST;
	if (!err)
		err = perm_check(fs, ip, (acc == O_RDONLY ? 4 : acc == O_WRONLY ? 2 : 6) |
					     (flags & O_TRUNC ? 2 : 0));
	if (!err && (acc != O_RDONLY || (flags & O_TRUNC))) {
		if (ip_di(ip)->di_flags & SHOAL_DIF_IMMUTABLE)
			err = -EPERM;
		else if ((ip_di(ip)->di_flags & SHOAL_DIF_APPEND) &&
			 (!(flags & O_APPEND) || (flags & O_TRUNC)))
			err = -EPERM;
	}
	if (!err) {
		ip->i_open++;
		inode_lookups(ip, ip->i_nlookup + 1);
		inode_stat(fs, ip, st);
	}
	inode_put(fs, ip);
	return err;
}

static int do_create(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t parent,
		 const char *name, mode_t mode, int flags, struct stat *st, int *existed)
{
	struct shoal_inode *ip;
	int err;
	*existed = 0;
	LOCK(fs);
	err = make_node(fs, ctx, parent, name, S_IFREG | (mode & 07777), 0, NULL, &ip);
	if (!err) {
		ip->i_open++;
		err = finish_node(fs, ip, st);
	} else if (err == -EEXIST && !(flags & O_EXCL) && !is_dot(name)) {
		err = create_open_existing(fs, parent, name, flags, st);
		*existed = !err;
	}
	UNLOCK(fs);
	return err;
}

/* O_TMPFILE (shoal.h): flags are the open's; O_EXCL is the kernel's business
 * (it alone decides whether linkat may name the file: I_LINKABLE). */
static int do_tmpfile(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t parent,
		      mode_t mode, int flags, struct stat *st)
{
	struct shoal_inode *ip;
	int err;

	(void)flags;
	if ((mode & S_IFMT) && !S_ISREG(mode))
		return -EINVAL;
	LOCK(fs);
	err = make_node(fs, ctx, parent, NULL, S_IFREG | (mode & 07777), 0, NULL, &ip);
	if (!err) {
		ip->i_open++;
		err = finish_node(fs, ip, st);
	}
	UNLOCK(fs);
	return err;
}

static int do_link(struct shoal_fs *fs, uint64_t ino, uint64_t newparent, const char *newname,
	       struct stat *st)
{
	struct shoal_inode *ip, *dp;
	uint64_t x;
	int err = check_name(newname);

	if (err)
		return err;
	if (is_dot(newname))
		return -EEXIST;
	LOCK(fs);
	err = hold(fs, ino, GL_EX);
	if (!err)
		err = hold(fs, newparent, GL_EX);
	if (!err)
		err = hold_open(fs, ino);
	if (err)
		goto out;
	err = inode_get(fs, ino, &ip);
	if (err)
		goto out;
	if (S_ISDIR(ip_di(ip)->di_mode)) {
		err = -EPERM;
		goto out_ip;
	}
	if (nochange_flags(ip)) {
		err = -EPERM;
		goto out_ip;
	}
	if (ip_di(ip)->di_nlink == 0 && !ip->i_linkable) {
		err = -ENOENT; /* unlinked, not an O_TMPFILE file */
		goto out_ip;
	}
	/* naming a tmpfile moves its bitmap entry from UNLINKED to DINODE */
	if (ip_di(ip)->di_nlink == 0 && (err = rg_hold_of(fs, ip->i_ino)))
		goto out_ip;
	if (ip_di(ip)->di_nlink >= SHOAL_LINK_MAX) {
		err = -EMLINK;
		goto out_ip;
	}
	err = get_dir(fs, newparent, &dp);
	if (err)
		goto out_ip;
	/* may_create(): inode_permission(MAY_WRITE) refuses an immutable dir */
	err = ip_di(dp)->di_flags & SHOAL_DIF_IMMUTABLE ? -EPERM : perm_check(fs, dp, 3);
	if (err)
		goto out_dp;
	err = dir_lookup(fs, dp, newname, &x, NULL);
	if (err != -ENOENT) {
		err = err ? err : -EEXIST;
		goto out_dp;
	}
	err = dir_make_room(fs, dp, newname);
	if (!err)
		err = trans_begin(fs, RES_META);
	if (!err)
		err = dir_add(fs, dp, newname, ip->i_ino, mode_dt(ip_di(ip)->di_mode));
	if (err)
		goto out_dp;
	inode_touch(dp, 0, 1, 1);
	inode_dirty(fs, ip, 1);
	if (ip_di(ip)->di_nlink == 0) {
		err = rg_set_state(fs, ip->i_ino, SHOAL_B_DINODE);
		if (err)
			goto out_dp;
		ip->i_linkable = 0;
	}
	ip_di(ip)->di_nlink++;
	inode_touch(ip, 0, 0, 1);
	inode_lookups(ip, ip->i_nlookup + 1);
	inode_stat(fs, ip, st);
out_dp:
	inode_put(fs, dp);
out_ip:
	inode_put(fs, ip);
out:
	UNLOCK(fs);
	return err;
}

/* Drop one link of ip (removed from a directory already). */
static int drop_link(struct shoal_fs *fs, struct shoal_inode *ip)
{
	struct shoal_dinode *di = ip_di(ip);
	inode_dirty(fs, ip, 1);
	if (S_ISDIR(di->di_mode))
		di->di_nlink = 0;
	else if (di->di_nlink)
		di->di_nlink--;
	inode_touch(ip, 0, 0, 1);
	if (di->di_nlink == 0)
		return rg_set_state(fs, ip->i_ino, SHOAL_B_UNLINKED);
	return 0;
}

static int remove_entry(struct shoal_fs *fs, uint64_t parent, const char *name, int isdir)
{
	struct shoal_inode *dp, *ip;
	uint64_t ino;
	int err;

	if (!strcmp(name, "."))
		return isdir ? -EINVAL : -EISDIR;
	if (!strcmp(name, ".."))
		return isdir ? -ENOTEMPTY : -EISDIR;
	err = check_name(name);
	if (err)
		return err;
	LOCK(fs);
	err = hold(fs, parent, GL_EX);
	if (err)
		goto out;
	err = get_dir(fs, parent, &dp);
	if (err)
		goto out;
	/* in the kernel's order: search, lookup, then may_delete() (an
	 * immutable directory, write permission, sticky, append-only and
	 * immutable flags, the type), then the filesystem's ENOTEMPTY */
	err = perm_check(fs, dp, 1);
	if (!err)
		err = dir_lookup(fs, dp, name, &ino, NULL);
	if (!err && (ip_di(dp)->di_flags & SHOAL_DIF_IMMUTABLE))
		err = -EPERM;
	if (!err)
		err = perm_check(fs, dp, 2);
	if (!err)
		err = hold(fs, ino, GL_EX);
	if (!err)
		err = rg_hold_of(fs, ino); /* its bitmap entry may become UNLINKED */
	if (err)
		goto out_dp;
	err = inode_get(fs, ino, &ip);
	if (err)
		goto out_dp;
	err = perm_sticky(dp, ip);
	if (err)
		;
	else if (nochange_flags(ip) || (ip_di(dp)->di_flags & SHOAL_DIF_APPEND))
		err = -EPERM;
	else if (isdir && !S_ISDIR(ip_di(ip)->di_mode))
		err = -ENOTDIR;
	else if (!isdir && S_ISDIR(ip_di(ip)->di_mode))
		err = -EISDIR;
	else if (isdir && ip_di(ip)->di_entries)
		err = -ENOTEMPTY;
	if (!err)
		err = trans_begin(fs, RES_META);
	if (!err)
		err = dir_remove(fs, dp, name);
	if (!err)
		err = drop_link(fs, ip);
	if (!err) {
		inode_dirty(fs, dp, 1);
		if (isdir)
			ip_di(dp)->di_nlink--;
		inode_touch(dp, 0, 1, 1);
	}
	inode_put(fs, ip);
out_dp:
	inode_put(fs, dp);
out:
	UNLOCK(fs);
	return err;
}

static int do_unlink(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t parent,
		 const char *name)
{
	return remove_entry(fs, parent, name, 0);
}

static int do_rmdir(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t parent,
		const char *name)
{
	return remove_entry(fs, parent, name, 1);
}

/* Is dir `anc` the directory `ino` or one of its ancestors? */
static int is_ancestor(struct shoal_fs *fs, uint64_t anc, uint64_t ino)
{
	for (int depth = 0; depth < 100000; depth++) {
		struct shoal_inode *ip;
		if (ino == anc)
			return 1;
		if (ino == fs->fs_sb.sb_root)
			return 0;
		int err = hold(fs, ino, GL_SH);
		if (err)
			return err;
		if (inode_get(fs, ino, &ip))
			return 0;
		uint64_t up = ip_di(ip)->di_parent;
		inode_put(fs, ip);
		if (!up || up == ino)
			return 0;
		ino = up;
	}
	return 1;
}

static int do_rename(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t parent,
		 const char *name, uint64_t newparent, const char *newname, unsigned flags)
{
	struct shoal_inode *sdp = NULL, *ddp = NULL, *sip = NULL, *tip = NULL, *wip = NULL;
	uint64_t sino, tino = 0;
	int err, sdir, tdir = 0;

	if (flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE | RENAME_WHITEOUT))
		return -EINVAL;
	if ((flags & RENAME_EXCHANGE) && (flags & (RENAME_NOREPLACE | RENAME_WHITEOUT)))
		return -EINVAL;
	if ((flags & RENAME_WHITEOUT) && ((ctx && ctx->c_uid != 0) || !perm_is_root()))
		return -EPERM; /* CAP_MKNOD, as a whiteout is a device node */
	if (is_dot(name) || is_dot(newname))
		return -EBUSY;
	if ((err = check_name(name)) || (err = check_name(newname)))
		return err;
	LOCK(fs);
	err = hold(fs, parent, GL_EX);
	if (!err)
		err = hold(fs, newparent, GL_EX);
	if (!err && parent != newparent && fs->fs_cluster) /* one tree change at a time */
		err = gl_hold(fs, GL_NONDISK, 2, GL_EX);
	if (err)
		goto out;
	err = get_dir(fs, parent, &sdp);
	if (err)
		goto out;
	err = get_dir(fs, newparent, &ddp);
	if (err)
		goto out;
	err = perm_check(fs, sdp, 3);
	if (!err)
		err = perm_check(fs, ddp, 3);
	if (!err)
		err = dir_lookup(fs, sdp, name, &sino, NULL);
	if (!err)
		err = hold(fs, sino, GL_EX);
	if (err)
		goto out;
	err = inode_get(fs, sino, &sip);
	if (err)
		goto out;
	err = perm_sticky(sdp, sip);
	if (err)
		goto out;
	sdir = S_ISDIR(ip_di(sip)->di_mode);
	/* a directory changing parent rewrites its "..": it needs write */
	if (sdir && parent != newparent && (err = perm_check(fs, sip, 2)))
		goto out;
	err = dir_lookup(fs, ddp, newname, &tino, NULL);
	if (err && err != -ENOENT)
		goto out;
	if (!err) {
		if (flags & RENAME_NOREPLACE) {
			err = -EEXIST;
			goto out;
		}
		err = hold(fs, tino, GL_EX);
		if (!err && !(flags & RENAME_EXCHANGE))
			err = rg_hold_of(fs, tino);
		if (err)
			goto out;
		err = inode_get(fs, tino, &tip);
		if (err)
			goto out;
		tdir = S_ISDIR(ip_di(tip)->di_mode);
		if (tip->i_ino != sip->i_ino && (err = perm_sticky(ddp, tip)))
			goto out;
		if ((flags & RENAME_EXCHANGE) && tdir && parent != newparent &&
		    (err = perm_check(fs, tip, 2)))
			goto out;
	} else if (flags & RENAME_EXCHANGE) {
		goto out; /* -ENOENT */
	}
	err = 0;
	if (tip == sip || (tip && tip->i_ino == sip->i_ino))
		goto out; /* same inode: nothing to do */
	if (nochange_flags(sip) || (tip && nochange_flags(tip)) ||
	    (ip_di(sdp)->di_flags & (SHOAL_DIF_IMMUTABLE | SHOAL_DIF_APPEND)) ||
	    (ip_di(ddp)->di_flags & SHOAL_DIF_IMMUTABLE)) {
		err = -EPERM;
		goto out;
	}
	if (!(flags & RENAME_EXCHANGE) && tip) {
		if (sdir && !tdir) {
			err = -ENOTDIR;
			goto out;
		}
		if (!sdir && tdir) {
			err = -EISDIR;
			goto out;
		}
		if (tdir && ip_di(tip)->di_entries) {
			err = -ENOTEMPTY;
			goto out;
		}
	}
	/* a directory may not move below itself */
	if (sdir && parent != newparent && (err = is_ancestor(fs, sip->i_ino, newparent))) {
		err = err > 0 ? -EINVAL : err;
		goto out;
	}
	if ((flags & RENAME_EXCHANGE) && tdir && parent != newparent &&
	    (err = is_ancestor(fs, tip->i_ino, parent))) {
		err = err > 0 ? -EINVAL : err;
		goto out;
	}
	if (sdir && !tdir && parent != newparent && ip_di(ddp)->di_nlink >= SHOAL_LINK_MAX) {
		err = -EMLINK;
		goto out;
	}
	uint64_t want = 0;
	if ((flags & RENAME_WHITEOUT) && fs->fs_cluster) {
		/* the whiteout's glocks, before anything changes (make_node) */
		err = rg_peek(fs, sdp->i_ino, &want);
		if (!err)
			err = hold_new(fs, want);
		if (err)
			goto out;
	}
	if (!tip) {
		err = dir_make_room(fs, ddp, newname);
		if (err)
			goto out;
	}
	err = trans_begin_alloc(fs, RES_META * 2, (flags & RENAME_WHITEOUT) ? 1 : 0);
	if (err)
		goto out;
	if (flags & RENAME_WHITEOUT) {
		/* ext4_whiteout_for_rename: a character device 0:0, mode 0 */
		gid_t gid = ip_di(sdp)->di_mode & S_ISGID ? ip_di(sdp)->di_gid : ctx->c_gid;
		err = inode_alloc(fs, sdp, want, S_IFCHR, ctx->c_uid, gid, &wip);
		if (err)
			goto out;
		ip_di(wip)->di_rdev = 0;
	}
	if (flags & RENAME_EXCHANGE) {
		err = dir_replace(fs, sdp, name, tip->i_ino, mode_dt(ip_di(tip)->di_mode));
		if (!err)
			err = dir_replace(fs, ddp, newname, sip->i_ino, mode_dt(ip_di(sip)->di_mode));
		if (err)
			goto out;
		if (parent != newparent) {
			if (sdir) {
				inode_dirty(fs, sip, 1);
				ip_di(sip)->di_parent = newparent;
			}
			if (tdir) {
				inode_dirty(fs, tip, 1);
				ip_di(tip)->di_parent = parent;
			}
			inode_dirty(fs, sdp, 1);
			inode_dirty(fs, ddp, 1);
			ip_di(sdp)->di_nlink += tdir - sdir;
			ip_di(ddp)->di_nlink += sdir - tdir;
		}
		inode_dirty(fs, tip, 1);
		inode_touch(tip, 0, 0, 1);
	} else {
		if (tip) {
			err = dir_replace(fs, ddp, newname, sip->i_ino, mode_dt(ip_di(sip)->di_mode));
			if (!err)
				err = drop_link(fs, tip);
			if (!err && tdir) {
				inode_dirty(fs, ddp, 1);
				ip_di(ddp)->di_nlink--;
			}
		} else {
			err = dir_add(fs, ddp, newname, sip->i_ino, mode_dt(ip_di(sip)->di_mode));
		}
		if (!err && wip)
			err = dir_replace(fs, sdp, name, wip->i_ino, DT_CHR);
		else if (!err)
			err = dir_remove(fs, sdp, name);
		if (err)
			goto out;
		if (sdir && parent != newparent) {
			inode_dirty(fs, sip, 1);
			ip_di(sip)->di_parent = newparent;
			inode_dirty(fs, sdp, 1);
			inode_dirty(fs, ddp, 1);
			ip_di(sdp)->di_nlink--;
			ip_di(ddp)->di_nlink++;
		}
	}
	inode_dirty(fs, sip, 1);
	inode_touch(sip, 0, 0, 1);
	inode_dirty(fs, sdp, 1);
	inode_touch(sdp, 0, 1, 1);
	inode_dirty(fs, ddp, 1);
	inode_touch(ddp, 0, 1, 1);
out:
	if (wip && err)
		ip_di(wip)->di_nlink = 0; /* destroyed: never named */
	inode_put(fs, wip);
	inode_put(fs, tip);
	inode_put(fs, sip);
	inode_put(fs, ddp);
	inode_put(fs, sdp);
	UNLOCK(fs);
	return err;
}

/*
 * atime (R1; docs/LOCKING.md "atime").  A read always asks for its inode's
 * glock SH; whether it must also update atime is decided here from every
 * source — a read-only mount, noatime, O_NOATIME, the file's own no-atime
 * flag (chattr +A), then strictatime (always) or relatime (the default:
 * atime not after mtime or ctime, or a day old) — and never changes the
 * lock asked for.  A due update:
 *   - is written now, in the read's own small transaction, when the node
 *     holds the glock EX anyway (or with lock=nolock);
 *   - else is kept in memory (inode_atime_defer): stat on this node shows
 *     it at once; it is written with the inode's next transaction on this
 *     node (its next change, under EX), or at unmount if a try-lock to EX
 *     gets the glock (ops_flush_atime), and dropped if the glock leaves
 *     the node or the inode leaves memory first.
 * So no read ever asks for EX, waits for it, or makes another node give a
 * lock back.
 */
static int atime_due(struct shoal_fs *fs, struct shoal_inode *ip, int flags)
{
	struct shoal_dinode *di = ip_di(ip);
	struct shoal_ts at = inode_atime(ip);
	struct timespec now;

	if (fs_is_ro(fs) || fs->fs_opts.mo_atime == SHOAL_NOATIME || (flags & O_NOATIME) ||
	    (di->di_flags & SHOAL_DIF_NOATIME))
		return 0;
	if (fs->fs_opts.mo_atime == SHOAL_STRICTATIME)
		return 1;
	clock_gettime(CLOCK_REALTIME, &now);
	if (at.ts_sec < di->di_mtime.ts_sec ||
	    (at.ts_sec == di->di_mtime.ts_sec && at.ts_nsec <= di->di_mtime.ts_nsec))
		return 1;
	if (at.ts_sec < di->di_ctime.ts_sec ||
	    (at.ts_sec == di->di_ctime.ts_sec && at.ts_nsec <= di->di_ctime.ts_nsec))
		return 1;
	return now.tv_sec - at.ts_sec >= 24 * 3600;
}

/* A read of ip returned data (its glock held at least SH by this op). */
void ops_update_atime(struct shoal_fs *fs, struct shoal_inode *ip, int flags)
{
	if (!atime_due(fs, ip, flags))
		return;
	if (!fs->fs_cluster || gl_have(fs, GL_INODE, ip->i_ino, GL_EX)) {
		if (trans_begin(fs, 2))
			return;
		ip->i_atime_pending = 0; /* superseded by this one */
		inode_dirty(fs, ip, 0);
		inode_touch(ip, 1, 0, 0);
		fs->fs_ctr.sc_atime_written++;
		return;
	}
	inode_atime_defer(fs, ip);
}

static ssize_t do_readlink(struct shoal_fs *fs, uint64_t ino, char *buf, size_t size)
{
	struct shoal_inode *ip;
	ssize_t n;
	LOCK(fs);
	n = hold(fs, ino, GL_SH);
	if (!n)
		n = inode_get(fs, ino, &ip);
	if (!n) {
		if (!S_ISLNK(ip_di(ip)->di_mode))
			n = -EINVAL;
		else
			n = file_read(fs, ip, buf, size, 0);
		if (n >= 0)
			ops_update_atime(fs, ip, 0);
		inode_put(fs, ip);
	}
	UNLOCK(fs);
	return n;
}

static int do_open(struct shoal_fs *fs, uint64_t ino, int flags)
{
	struct shoal_inode *ip;
	int err, acc = flags & O_ACCMODE;
	LOCK(fs);
	err = hold_open(fs, ino);
	if (!err)
		err = iget(fs, ino, GL_SH, &ip);
	if (err)
		goto out;
	int want = (acc == O_RDONLY ? 4 : acc == O_WRONLY ? 2 : 6) | (flags & O_TRUNC ? 2 : 0);
	if (acc == O_RDONLY && (flags & SHOAL_O_EXEC))
		want = 1; /* execve: may_open(MAY_EXEC), as the kernel checked */
	err = perm_check(fs, ip, want);
	if (!err && (acc != O_RDONLY || (flags & O_TRUNC))) {
		if (ip_di(ip)->di_flags & SHOAL_DIF_IMMUTABLE)
			err = -EPERM;
		else if ((ip_di(ip)->di_flags & SHOAL_DIF_APPEND) &&
			 (!(flags & O_APPEND) || (flags & O_TRUNC)))
			err = -EPERM;
		else if (fs_is_ro(fs))
			err = -EROFS;
	}
	if (!err)
		ip->i_open++;
	inode_put(fs, ip);
out:
	UNLOCK(fs);
	return err;
}

static int do_release(struct shoal_fs *fs, uint64_t ino, int flags)
{
	struct shoal_inode *ip;
	int err;
	LOCK(fs);
	ip = inode_find(fs, ino);
	err = ip ? 0 : -ESTALE;
	if (ip) {
		if (ip->i_open == 1 && !ip->i_nlookup)
			err = last_ref_refresh(fs, ip, 0);
		if (!err && ip->i_open)
			ip->i_open--;
		inode_put(fs, ip); /* frees it if unlinked and unused */
	}
	UNLOCK(fs);
	return err;
}

struct rd_ctx {
	shoal_fill_fn rc_fill;
	void *rc_arg;
};

static int rd_cb(void *arg, const char *name, size_t len, uint64_t ino, uint8_t type,
		 uint64_t hash)
{
	struct rd_ctx *rc = arg;
	struct stat st;
	memset(&st, 0, sizeof(st));
	st.st_ino = ino;
	st.st_mode = DTTOIF(type);
	return rc->rc_fill(rc->rc_arg, name, &st, hash);
}

static int do_readdir(struct shoal_fs *fs, uint64_t ino, uint64_t off, int flags,
		      shoal_fill_fn fill, void *arg)
{
	struct shoal_inode *dp;
	struct rd_ctx rc = {fill, arg};
	struct stat st;
	int err;

	LOCK(fs);
	err = hold(fs, ino, GL_SH);
	if (err)
		goto out;
	err = get_dir(fs, ino, &dp);
	if (err) {
		/* a removed directory that is still open reads as empty */
		if (err == -ENOENT)
			err = 0;
		goto out;
	}
	memset(&st, 0, sizeof(st));
	st.st_mode = S_IFDIR;
	if (off < 1) {
		st.st_ino = ino;
		if (fill(arg, ".", &st, 1))
			goto out_put;
	}
	if (off < 2) {
		st.st_ino = ip_di(dp)->di_parent ? ip_di(dp)->di_parent : ino;
		if (fill(arg, "..", &st, 2))
			goto out_put;
	}
	err = dir_iterate(fs, dp, off < 2 ? 2 : off, rd_cb, &rc);
	if (!err)
		ops_update_atime(fs, dp, flags);
out_put:
	inode_put(fs, dp);
out:
	UNLOCK(fs);
	return err;
}

static int do_access(struct shoal_fs *fs, uint64_t ino, int mask)
{
	struct shoal_inode *ip;
	int err;

	LOCK(fs);
	err = iget(fs, ino, GL_SH, &ip);
	if (err)
		goto out;
	if (mask != F_OK) {
		mode_t m = ip_di(ip)->di_mode;
		err = perm_check(fs, ip, mask & 7);
		if (!err && (mask & W_OK) && fs_is_ro(fs) &&
		    (S_ISREG(m) || S_ISDIR(m) || S_ISLNK(m)))
			err = -EROFS;
		if (!err && (mask & W_OK) && (ip_di(ip)->di_flags & SHOAL_DIF_IMMUTABLE))
			err = -EPERM;
	}
	inode_put(fs, ip);
out:
	UNLOCK(fs);
	return err;
}

/* --- the public operations, each run by RUN (restart after waiting) --- */
int shoal_lookup(struct shoal_fs *fs, uint64_t parent, const char *name, struct stat *st)
{
	return RUN(fs, do_lookup(fs, parent, name, st));
}

int shoal_getattr(struct shoal_fs *fs, uint64_t ino, struct stat *st)
{
	return RUN(fs, do_getattr(fs, ino, st));
}

uint64_t shoal_generation(struct shoal_fs *fs, uint64_t ino)
{
	uint64_t g = 0;

	/* an entry reply's: the operation that made the stat read the dinode
	 * under its glock; no fs_lock, no glock again (a demotion may hold
	 * fs_lock while it waits for the kernel to take this very reply) */
	if (inode_stat_generation(ino, &g))
		return g;
	(void)RUN(fs, do_generation(fs, ino, &g));
	return g;
}

int shoal_setattr(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t ino,
		  const struct stat *attr, int valid, struct stat *st)
{
	return RUN(fs, do_setattr(fs, ctx, ino, attr, valid, st));
}

int shoal_mknod(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t parent,
		const char *name, mode_t mode, dev_t rdev, struct stat *st)
{
	return RUN(fs, do_mknod(fs, ctx, parent, name, mode, rdev, st));
}

int shoal_mkdir(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t parent,
		const char *name, mode_t mode, struct stat *st)
{
	return RUN(fs, do_mkdir(fs, ctx, parent, name, mode, st));
}

int shoal_symlink(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t parent,
		  const char *name, const char *target, struct stat *st)
{
	return RUN(fs, do_symlink(fs, ctx, parent, name, target, st));
}

int shoal_create(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t parent,
		 const char *name, mode_t mode, int flags, struct stat *st)
{
	int existed, err = RUN(fs, do_create(fs, ctx, parent, name, mode, flags, st, &existed));

	if (err || !existed || !(flags & O_TRUNC) || st->st_size == 0)
		return err;
	/* opened what another node made meanwhile: the kernel believes it
	 * created the file, so O_TRUNC is ours to apply */
	struct stat a = { .st_size = 0 };
	err = RUN(fs, do_setattr(fs, ctx, (uint64_t)st->st_ino, &a, SHOAL_SET_SIZE, st));
	if (err) {
		shoal_release(fs, (uint64_t)st->st_ino, flags);
		shoal_forget(fs, (uint64_t)st->st_ino, 1);
	}
	return err;
}

int shoal_tmpfile(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t parent,
		  mode_t mode, int flags, struct stat *st)
{
	return RUN(fs, do_tmpfile(fs, ctx, parent, mode, flags, st));
}

int shoal_link(struct shoal_fs *fs, uint64_t ino, uint64_t newparent, const char *newname,
	       struct stat *st)
{
	return RUN(fs, do_link(fs, ino, newparent, newname, st));
}

int shoal_unlink(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t parent,
		 const char *name)
{
	return RUN(fs, do_unlink(fs, ctx, parent, name));
}

int shoal_rmdir(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t parent,
		const char *name)
{
	return RUN(fs, do_rmdir(fs, ctx, parent, name));
}

int shoal_rename(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t parent,
		 const char *name, uint64_t newparent, const char *newname, unsigned flags)
{
	return RUN(fs, do_rename(fs, ctx, parent, name, newparent, newname, flags));
}

ssize_t shoal_readlink(struct shoal_fs *fs, uint64_t ino, char *buf, size_t size)
{
	return RUN(fs, do_readlink(fs, ino, buf, size));
}

int shoal_open(struct shoal_fs *fs, uint64_t ino, int flags)
{
	return RUN(fs, do_open(fs, ino, flags));
}

int shoal_release(struct shoal_fs *fs, uint64_t ino, int flags)
{
	return RUN(fs, do_release(fs, ino, flags));
}

int shoal_readdir(struct shoal_fs *fs, uint64_t ino, uint64_t off, int flags, shoal_fill_fn fill,
		  void *arg)
{
	return RUN(fs, do_readdir(fs, ino, off, flags, fill, arg));
}

int shoal_access(struct shoal_fs *fs, uint64_t ino, int mask)
{
	return RUN(fs, do_access(fs, ino, mask));
}

/* Unmount, one inode: its kept atime under a try-lock EX, or dropped. */
static int flush_atime_one(struct shoal_fs *fs, uint64_t ino)
{
	struct shoal_inode *ip;
	int err = 0;

	LOCK(fs);
	ip = inode_find(fs, ino);
	if (ip && ip->i_atime_pending) {
		struct shoal_inode *cur = NULL;
		/* a try sends no callback: a node still using the inode keeps
		 * its lock, and the update is dropped */
		err = fs_is_ro(fs) ? -EROFS : gl_try_hold(fs, GL_INODE, ino, GL_EX);
		/*
		 * If the glock left this node since the read, the dinode in
		 * memory is stale (another node may have changed or freed it):
		 * inode_get reads it again and drops the kept atime with it.
		 */
		if (!err)
			err = inode_get(fs, ino, &cur);
		if (!err && cur->i_atime_pending)
			err = trans_begin(fs, 2);
		if (!err && cur->i_atime_pending)
			inode_dirty(fs, cur, 0); /* writes it and counts it */
		else
			inode_atime_drop(fs, ip);
		inode_put(fs, cur);
	}
	inode_put(fs, ip);
	UNLOCK(fs);
	return err;
}

void ops_flush_atime(struct shoal_fs *fs)
{
	uint64_t *inos = NULL;
	size_t n = 0, cap = 0;

	LOCK(fs);
	for (uint32_t i = 0; i <= fs->fs_ihmask; i++)
		for (struct shoal_inode *ip = fs->fs_ihash[i]; ip; ip = ip->i_hnext) {
			if (!ip->i_atime_pending)
				continue;
			if (n == cap) {
				uint64_t *m = realloc(inos, (cap = cap ? cap * 2 : 64) * sizeof(*m));
				if (!m)
					goto out_unlock; /* without memory they are dropped */
				inos = m;
			}
			inos[n++] = ip->i_ino;
		}
out_unlock:
	UNLOCK(fs);
	for (size_t i = 0; i < n; i++) {
		op_begin(fs);
		(void)flush_atime_one(fs, inos[i]);
		op_end(fs);
	}
	free(inos);
}

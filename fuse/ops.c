/*
 * ops.c - the FUSE low-level operations of shoal-mount.  Each one decodes
 * its request, builds the caller's struct shoal_ctx, calls libshoal and
 * replies.  No caching, no policy: those live in core/.
 *
 * Invariants:
 *  (1) every request gets exactly one reply, sent by the op that received it
 *      (forget and forget_multi: fuse_reply_none);
 *  (2) a libshoal error (-errno) becomes a reply here and nowhere else, and
 *      only through reply_err(): -EUCLEAN (damaged metadata) is answered
 *      EIO, never "structure needs cleaning" (FORMAT.md "Damage");
 *  (3) FUSE node ids are shoal inode numbers except for the root, which the
 *      kernel calls FUSE_ROOT_ID and libshoal shoal_root(), and for the
 *      incarnations of directories another node moved (nodeids.c, handed
 *      out by reply_dir_entry only): ino_in() and ino_out() translate at
 *      the boundary and nowhere else;  st_ino in attributes stays the
 *      shoal inode number;
 *  (4) every reply that hands the kernel a node id (entry, create,
 *      readdirplus) carries exactly one libshoal lookup reference per entry;
 *      if the reply cannot be delivered the references are given back at
 *      once, so the kernel's lookup counts and libshoal's never drift;
 *  (5) no op calls back into libshoal from inside a libshoal callback
 *      (readdirplus collects the names first and looks them up afterwards);
 *  (6) the kernel caches attributes for SMOUNT_TIMEOUT (in a cluster
 *      those of a link reply and a directory's entry for no time,
 *      smount_entry_attr_ttl(), and a cluster uses no readdirplus:
 *      op_init), entries (positive
 *      and negative) for smount_entry_ttl(), and file pages across opens
 *      (keep_cache).  With one node that is correct because everything that
 *      changes the filesystem passes through this kernel mount (and a
 *      change whose reply carries no attributes, chattr or an ACL, tells
 *      the kernel to drop them: smount_attr_changed); in a
 *      cluster, because glock demotion invalidates attributes, pages and
 *      (with entry_timeout > 0) the names the kernel got (main.c), and
 *      because names are by default not cached at all (entry_timeout=0);
 *  (7) an O_APPEND write lands at the end of file libshoal finds, not at
 *      the kernel's position: in a cluster O_APPEND files are opened for
 *      direct I/O (no page of this kernel holds the bytes elsewhere) and a
 *      write that went elsewhere tells the kernel the size it made;
 *  (8) in a cluster the kernel's writeback of a page writes only the bytes
 *      its mapping changed, when the page's base is known (mbase.c).
 */
#include "names.h"
#include "nodeids.h"
#include "smount.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#define FS(req) (((struct smount *)fuse_req_userdata(req))->sm_fs)

/*
 * The one error reply (2).  Damage inside libshoal is -EUCLEAN; an
 * application gets EIO for it, as from a disk that cannot read.  libshoal
 * logged the block; this says once per damaged block that it was answered
 * EIO, naming the block and inode shoal_damage() knows of.
 */
static int reply_err(fuse_req_t req, int err)
{
	static uint64_t logged = UINT64_MAX; /* last block logged */

	if (err == EUCLEAN) {
		uint64_t blk = 0, ino = 0;
		if (!shoal_damage(FS(req), &blk, &ino))
			blk = 0;
		if (__atomic_exchange_n(&logged, blk, __ATOMIC_RELAXED) != blk)
			fprintf(stderr, "shoal-mount: damaged metadata (block %llu, inode %llu): "
					"answering EIO instead of EUCLEAN\n",
				(unsigned long long)blk, (unsigned long long)ino);
		err = EIO;
	}
	return fuse_reply_err(req, err);
}

static uint64_t ino_in(struct shoal_fs *fs, fuse_ino_t ino)
{
	return ino == FUSE_ROOT_ID ? shoal_root(fs) : nid_ino((uint64_t)ino);
}

static int ino_out(struct shoal_fs *fs, uint64_t ino, fuse_ino_t *out)
{
	if (ino == shoal_root(fs)) {
		*out = FUSE_ROOT_ID;
		return 0;
	}
	if (ino == FUSE_ROOT_ID || ino == 0) {
		fprintf(stderr, "shoal-mount: inode %llu cannot be given to FUSE\n",
			(unsigned long long)ino);
		return -EUCLEAN;
	}
	*out = (fuse_ino_t)ino;
	return 0;
}

static int req_in_group(fuse_req_t req, gid_t gid);

static int ctx_in_group(void *arg, gid_t gid)
{
	return req_in_group(arg, gid);
}

static void req_ctx(fuse_req_t req, struct shoal_ctx *ctx)
{
	const struct fuse_ctx *fc = fuse_req_ctx(req);

	memset(ctx, 0, sizeof(*ctx));
	ctx->c_uid = fc->uid;
	ctx->c_gid = fc->gid;
	ctx->c_pid = fc->pid;
	ctx->c_umask = fc->umask;
	ctx->c_in_group = ctx_in_group;
	ctx->c_arg = req;
}

/*
 * Every request names its caller to libshoal first, for libshoal's own
 * permission checks (core/perm.c; the kernel checks as well).  The group
 * callback may only run while req is alive, which is while this request
 * is being served.
 */
static void caller_begin(fuse_req_t req)
{
	struct shoal_ctx ctx;
	req_ctx(req, &ctx);
	shoal_caller_set(&ctx);
}

/*
 * Test hook (t_cluster_attr_race.sh): SHOAL_TEST_REPLY_DELAY_MS=N in the
 * environment of shoal-mount delays every reply that hands the kernel
 * attributes (attr, entry, create, readdirplus) by N ms after libshoal
 * returned, i.e. after the operation's glock holds ended: the window in
 * which another node can take the glock before the kernel has the reply.
 */
static long reply_delay_ms = -1;

static void reply_delay(void)
{
	long ms = __atomic_load_n(&reply_delay_ms, __ATOMIC_RELAXED);

	if (ms < 0) {
		const char *v = getenv("SHOAL_TEST_REPLY_DELAY_MS");
		ms = v ? strtol(v, NULL, 10) : 0;
		__atomic_store_n(&reply_delay_ms, ms > 0 ? ms : 0, __ATOMIC_RELAXED);
	}
	if (ms > 0)
		usleep((useconds_t)ms * 1000);
}

/* trusted: see smount_entry_attr_ttl (0 for link) */
static int fill_entry(struct shoal_fs *fs, const struct stat *st, struct fuse_entry_param *e,
		      int trusted)
{
	int ret;

	memset(e, 0, sizeof(*e));
	ret = ino_out(fs, (uint64_t)st->st_ino, &e->ino);
	if (ret < 0)
		return ret;
	e->generation = shoal_generation(fs, (uint64_t)st->st_ino);
	e->attr = *st;
	e->attr_timeout = smount_entry_attr_ttl(trusted, S_ISDIR(st->st_mode));
	e->entry_timeout = smount_entry_ttl();
	reply_delay();
	return 0;
}

/*
 * Give back n lookup references of node id fino (the kernel's FORGET, or
 * a reply it never received): main.c knows meanwhile that the kernel does
 * not have them (smount_forget_begin).
 */
static void give_back(struct shoal_fs *fs, fuse_ino_t fino, uint64_t n)
{
	smount_forget_begin((uint64_t)fino);
	shoal_forget(fs, ino_in(fs, fino), n);
	smount_forget_end((uint64_t)fino);
}

/*
 * Reply to a request that took a lookup reference on success (lookup,
 * mknod, mkdir, symlink, link), giving the reference back if the kernel
 * never receives it.  trusted: fill_entry.
 */
static void reply_entry(fuse_req_t req, int ret, const struct stat *st, int trusted)
{
	struct shoal_fs *fs = FS(req);
	struct fuse_entry_param e;

	if (ret < 0)
		goto out_err;
	ret = fill_entry(fs, st, &e, trusted);
	if (ret < 0)
		goto out_forget;
	if (fuse_reply_entry(req, &e) != 0)
		give_back(fs, e.ino, 1);
	return;

out_forget:
	shoal_forget(fs, (uint64_t)st->st_ino, 1);
out_err:
	reply_err(req, -ret);
}

/*
 * reply_entry for a request that names what it found or made (lookup,
 * mkdir): a directory goes out under its current node id, or a new one
 * if the kernel may have it under another parent (nodeids.c).
 */
static void reply_dir_entry(fuse_req_t req, int ret, const struct stat *st, fuse_ino_t parent,
			    const char *name)
{
	struct shoal_fs *fs = FS(req);
	struct fuse_entry_param e;
	int fresh;

	if (ret < 0 || !S_ISDIR(st->st_mode)) {
		reply_entry(req, ret, st, 1);
		return;
	}
	ret = fill_entry(fs, st, &e, 1);
	if (ret < 0) {
		shoal_forget(fs, (uint64_t)st->st_ino, 1);
		reply_err(req, -ret);
		return;
	}
	if (e.ino != FUSE_ROOT_ID && strcmp(name, ".") && strcmp(name, "..")) {
		fresh = names_dir_at((uint64_t)st->st_ino, parent, name);
		e.ino = nid_hand_out((uint64_t)st->st_ino, fresh);
	}
	if (fuse_reply_entry(req, &e) != 0) {
		give_back(fs, e.ino, 1);
		nid_forget(e.ino, 1);
	}
}

static void reply_attr(fuse_req_t req, int ret, const struct stat *st)
{
	if (ret < 0) {
		reply_err(req, -ret);
		return;
	}
	reply_delay();
	fuse_reply_attr(req, st, SMOUNT_TIMEOUT);
}

/* --- connection ------------------------------------------------------- */

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	conn->max_write = SMOUNT_MAX_WRITE; /* libfuse derives max_pages from it */
	/* Splice between /dev/fuse and the device where libfuse can (one copy
	 * less each way; op_write_buf).  A 1 MiB request needs a pipe larger
	 * than pipe-max-size (1 MiB), so for those libfuse reads the request
	 * into memory, and read replies never splice (reply_iov_pieces). */
	conn->want |= conn->capable & (FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE |
				       FUSE_CAP_SPLICE_MOVE);
	if (conn->capable & FUSE_CAP_ASYNC_READ)
		conn->want |= FUSE_CAP_ASYNC_READ;
	/* Lookups and readdirs of one directory run in parallel. */
	if (conn->capable & FUSE_CAP_PARALLEL_DIROPS)
		conn->want |= FUSE_CAP_PARALLEL_DIROPS;
	/* chattr/lsattr on directories. */
	if (conn->capable & FUSE_CAP_IOCTL_DIR)
		conn->want |= FUSE_CAP_IOCTL_DIR;
	/* Symlink targets never change: let the kernel keep them. */
	if (conn->capable & FUSE_CAP_CACHE_SYMLINKS)
		conn->want |= FUSE_CAP_CACHE_SYMLINKS;
	/*
	 * The kernel's own writeback cache costs an extra block per fsync;
	 * pages are dropped by explicit invalidation, not by mtime changes;
	 * O_TRUNC arrives as a setattr and suid/sgid are cleared by the
	 * kernel's setattr, so libshoal needs no special case for either.
	 */
	conn->want &= ~(FUSE_CAP_WRITEBACK_CACHE | FUSE_CAP_AUTO_INVAL_DATA |
			FUSE_CAP_ATOMIC_O_TRUNC | FUSE_CAP_HANDLE_KILLPRIV);
	/*
	 * File handles (name_to_handle_at, NFS export): node id and
	 * generation; the kernel finds an inode it dropped by a lookup of "."
	 * in its node id, and a directory's parent by "..", which libshoal
	 * answers for any inode (ESTALE once it is gone).
	 */
	if (conn->capable & FUSE_CAP_EXPORT_SUPPORT)
		conn->want |= FUSE_CAP_EXPORT_SUPPORT;
	/*
	 * POSIX ACLs: the kernel checks them (it reads system.posix_acl_access
	 * and caches it until the inode's attributes are dropped, which a
	 * demotion does); libshoal keeps the mode and the ACL in step and
	 * gives a new inode its directory's default ACL (core/acl.c), or
	 * applies the umask when there is none: the kernel must not
	 * (DONT_MASK; the request carries the umask).
	 */
	if (conn->capable & FUSE_CAP_POSIX_ACL)
		conn->want |= FUSE_CAP_POSIX_ACL;
	if ((conn->capable & (FUSE_CAP_POSIX_ACL | FUSE_CAP_DONT_MASK)) ==
	    (FUSE_CAP_POSIX_ACL | FUSE_CAP_DONT_MASK))
		conn->want |= FUSE_CAP_DONT_MASK;
	/*
	 * No readdirplus in a cluster: the kernel stamps the names a
	 * readdirplus reply gives it with the epoch current when it reads the
	 * reply, not when it sent the request (a lookup's or create's), so an
	 * epoch sent meanwhile (another node changed the directory after this
	 * node listed it: main.c epoch_write) would not cover them, and a name
	 * unlinked elsewhere stayed in this kernel for entry_timeout
	 * (t_cluster_attr_race.sh).  Plain readdir, then a lookup per name
	 * used, which the epoch covers.
	 */
	if (smount_cluster)
		conn->want &= ~(FUSE_CAP_READDIRPLUS | FUSE_CAP_READDIRPLUS_AUTO);
	/*
	 * fcntl, OFD and flock locks: with a cluster lock module the lock
	 * manager holds them (plock.c), so they hold across nodes; with
	 * lock=nolock the kernel keeps them itself, as for ext4.
	 */
	if (shoal_plock_supported(((struct smount *)userdata)->sm_fs)) {
		conn->want |= conn->capable & (FUSE_CAP_POSIX_LOCKS | FUSE_CAP_FLOCK_LOCKS);
	} else {
		conn->want &= ~(FUSE_CAP_POSIX_LOCKS | FUSE_CAP_FLOCK_LOCKS);
		if (smount_cluster)
			fprintf(stderr, "shoal-mount: shoal-lockd does not serve posix and flock "
					"locks (too old): fcntl and flock locks hold on this node "
					"only; upgrade shoal-lockd\n");
	}
	conn->time_gran = 1;
}

static void op_destroy(void *userdata)
{
	/* main() unmounts libshoal once the session has ended. */
}

/* --- names and attributes --------------------------------------------- */

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	caller_begin(req);
	struct shoal_fs *fs = FS(req);
	struct fuse_entry_param e;
	struct stat st;
	int ret;

	ret = shoal_lookup(fs, ino_in(fs, parent), name, &st);
	if ((ret == 0 || ret == -ENOENT) && strcmp(name, ".") && strcmp(name, ".."))
		names_note(parent, name); /* "." and "..": a file handle's, no dentry */
	if (ret == -ENOENT) {
		/* A negative entry: the kernel remembers the name is free. */
		memset(&e, 0, sizeof(e));
		e.entry_timeout = smount_entry_ttl();
		fuse_reply_entry(req, &e);
		return;
	}
	reply_dir_entry(req, ret, &st, parent, name);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	caller_begin(req);
	struct shoal_fs *fs = FS(req);

	give_back(fs, ino, nlookup);
	nid_forget(ino, nlookup);
	fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	caller_begin(req);
	struct shoal_fs *fs = FS(req);
	size_t i;

	/* all of them are being forgotten from now on (main.c now_retry), not
	 * only the one whose turn it is: an earlier one can wait long */
	for (i = 0; i < count; i++)
		smount_forget_begin((uint64_t)forgets[i].ino);
	for (i = 0; i < count; i++) {
		shoal_forget(fs, ino_in(fs, forgets[i].ino), forgets[i].nlookup);
		nid_forget(forgets[i].ino, forgets[i].nlookup);
		smount_forget_end((uint64_t)forgets[i].ino);
	}
	fuse_reply_none(req);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	caller_begin(req);
	struct shoal_fs *fs = FS(req);
	struct stat st;

	reply_attr(req, shoal_getattr(fs, ino_in(fs, ino), &st), &st);
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		       struct fuse_file_info *fi)
{
	caller_begin(req);
	static const struct {
		int fuse;
		int shoal;
	} map[] = {
		{ FUSE_SET_ATTR_MODE, SHOAL_SET_MODE },
		{ FUSE_SET_ATTR_UID, SHOAL_SET_UID },
		{ FUSE_SET_ATTR_GID, SHOAL_SET_GID },
		{ FUSE_SET_ATTR_SIZE, SHOAL_SET_SIZE },
		{ FUSE_SET_ATTR_ATIME, SHOAL_SET_ATIME },
		{ FUSE_SET_ATTR_MTIME, SHOAL_SET_MTIME },
		{ FUSE_SET_ATTR_ATIME_NOW, SHOAL_SET_ATIME_NOW },
		{ FUSE_SET_ATTR_MTIME_NOW, SHOAL_SET_MTIME_NOW },
		{ FUSE_SET_ATTR_CTIME, SHOAL_SET_CTIME },
	};
	struct shoal_fs *fs = FS(req);
	struct shoal_ctx ctx;
	struct stat st;
	int valid = 0;
	size_t i;

	for (i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		if (to_set & map[i].fuse)
			valid |= map[i].shoal;
	req_ctx(req, &ctx);
	if (fi)
		ctx.c_flags |= SHOAL_CTX_FH; /* ftruncate: the open checked already */
	if (to_set & FUSE_SET_ATTR_SIZE) /* before any lock of ours is taken */
		wbkick_before_resize(fuse_req_userdata(req), (uint64_t)ino,
				     shoal_generation(fs, ino_in(fs, ino)), (uint64_t)attr->st_size);
	int ret = shoal_setattr(fs, &ctx, ino_in(fs, ino), attr, valid, &st);
	(void)shoal_privs_dropped(); /* the reply carries the new mode */
	if (ret == 0 && (to_set & FUSE_SET_ATTR_SIZE))
		mb_truncate(ino, (uint64_t)attr->st_size); /* (8) */
	reply_attr(req, ret, &st);
}

static void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
	caller_begin(req);
	struct shoal_fs *fs = FS(req);
	char buf[PATH_MAX + 1];
	ssize_t n;

	n = shoal_readlink(fs, ino_in(fs, ino), buf, sizeof(buf) - 1);
	if (n < 0) {
		reply_err(req, (int)-n);
		return;
	}
	buf[n] = '\0';
	fuse_reply_readlink(req, buf);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		     dev_t rdev)
{
	caller_begin(req);
	struct shoal_fs *fs = FS(req);
	struct shoal_ctx ctx;
	struct stat st;

	req_ctx(req, &ctx);
	names_note(parent, name);
	reply_entry(req, shoal_mknod(fs, &ctx, ino_in(fs, parent), name, mode, rdev, &st), &st, 1);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	caller_begin(req);
	struct shoal_fs *fs = FS(req);
	struct shoal_ctx ctx;
	struct stat st;
	int ret;

	req_ctx(req, &ctx);
	names_note(parent, name);
	ret = shoal_mkdir(fs, &ctx, ino_in(fs, parent), name, mode, &st);
	reply_dir_entry(req, ret, &st, parent, name);
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	caller_begin(req);
	struct shoal_fs *fs = FS(req);
	struct shoal_ctx ctx;
	struct stat st;

	req_ctx(req, &ctx);
	names_note(parent, name);
	reply_entry(req, shoal_symlink(fs, &ctx, ino_in(fs, parent), name, link, &st), &st, 1);
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	caller_begin(req);
	struct shoal_fs *fs = FS(req);
	struct stat st;

	names_note(newparent, newname);
	reply_entry(req, shoal_link(fs, ino_in(fs, ino), ino_in(fs, newparent), newname, &st),
		    &st, 0);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	caller_begin(req);
	struct shoal_fs *fs = FS(req);
	struct shoal_ctx ctx;

	req_ctx(req, &ctx);
	reply_err(req, -shoal_unlink(fs, &ctx, ino_in(fs, parent), name));
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	caller_begin(req);
	struct shoal_fs *fs = FS(req);
	struct shoal_ctx ctx;
	int ret;

	req_ctx(req, &ctx);
	ret = shoal_rmdir(fs, &ctx, ino_in(fs, parent), name);
	if (ret == 0)
		names_dir_gone(parent, name);
	reply_err(req, -ret);
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
		      fuse_ino_t newparent, const char *newname, unsigned int flags)
{
	caller_begin(req);
	struct shoal_fs *fs = FS(req);
	struct shoal_ctx ctx;
	int ret;

	req_ctx(req, &ctx);
	ret = shoal_rename(fs, &ctx, ino_in(fs, parent), name, ino_in(fs, newparent), newname,
			   flags);
	if (ret == 0) /* the kernel moves its dentries as this reply arrives */
		names_dir_moved(parent, name, newparent, newname, !!(flags & RENAME_EXCHANGE));
	reply_err(req, -ret);
}

/* --- files ------------------------------------------------------------ */

/*
 * (7) In a cluster an O_APPEND file is opened for direct I/O.  The kernel
 * takes an O_APPEND write's position from the size it last saw, which
 * another node may have changed since (a notification only marks it
 * stale); libshoal appends at the real end of file, but a cached write
 * would leave the bytes in this kernel's page cache at the position it
 * assumed.  Writes cost one request either way (no writeback cache);
 * reads through such a file go to libshoal.
 */
static void append_direct(struct fuse_file_info *fi)
{
	if (smount_cluster && (fi->flags & O_APPEND))
		fi->direct_io = 1;
}

/*
 * Every open file gets its own fh (plock.c tells open files apart by it).
 * Flush has nothing to do unless the lock manager holds posix locks: then
 * a close must drop the process's locks (plock_flush), and the kernel
 * sends FLUSH for that only without noflush.
 */
static void open_fh(struct shoal_fs *fs, struct fuse_file_info *fi)
{
	static uint64_t next_fh;

	fi->fh = __atomic_add_fetch(&next_fh, 1, __ATOMIC_RELAXED);
	fi->noflush = !shoal_plock_supported(fs);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	caller_begin(req);
	struct shoal_fs *fs = FS(req);
	int ret;

	ret = shoal_open(fs, ino_in(fs, ino), fi->flags);
	if (ret < 0) {
		reply_err(req, -ret);
		return;
	}
	fi->keep_cache = 1; /* see (6) */
	open_fh(fs, fi);
	append_direct(fi);
	if (mb_open(ino, fi->flags))
		fi->keep_cache = 0; /* (8): pages cached before have no base */
	if (fi->flags & O_TRUNC)
		mb_truncate(ino, 0);
	if (fuse_reply_open(req, fi) != 0) {
		mb_release(ino, fi->flags);
		shoal_release(fs, ino_in(fs, ino), fi->flags);
	}
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		      struct fuse_file_info *fi)
{
	caller_begin(req);
	struct shoal_fs *fs = FS(req);
	struct fuse_entry_param e;
	struct shoal_ctx ctx;
	struct stat st;
	int ret;

	req_ctx(req, &ctx);
	if (!strcmp(name, "/")) {
		/* O_TMPFILE (fuse/main.c kp_read): no name, no entry to note */
		ret = shoal_tmpfile(fs, &ctx, ino_in(fs, parent), mode, fi->flags, &st);
	} else {
		names_note(parent, name);
		ret = shoal_create(fs, &ctx, ino_in(fs, parent), name, mode, fi->flags, &st);
	}
	if (ret < 0)
		goto out_err;
	ret = fill_entry(fs, &st, &e, 1);
	if (ret < 0)
		goto out_release;
	fi->keep_cache = 1;
	open_fh(fs, fi);
	append_direct(fi);
	if (mb_open(e.ino, fi->flags))
		fi->keep_cache = 0;
	if (fuse_reply_create(req, &e, fi) != 0) {
		mb_release(e.ino, fi->flags);
		shoal_release(fs, (uint64_t)st.st_ino, fi->flags);
		give_back(fs, e.ino, 1);
	}
	return;

out_release:
	shoal_release(fs, (uint64_t)st.st_ino, fi->flags);
	shoal_forget(fs, (uint64_t)st.st_ino, 1);
out_err:
	reply_err(req, -ret);
}

/*
 * Read buffers are per worker thread and grow to the largest request seen
 * (at most SMOUNT_MAX_WRITE, which bounds reads too); freed when the thread
 * exits.
 */
struct rbuf {
	size_t rb_size;
	char rb_data[];
};

static pthread_key_t rbuf_key;
static pthread_once_t rbuf_once = PTHREAD_ONCE_INIT;

static void rbuf_key_init(void)
{
	if (pthread_key_create(&rbuf_key, free) != 0)
		abort(); /* only at start-up, out of keys: nothing sane to do */
}

static char *rbuf_get(size_t size)
{
	struct rbuf *rb;

	pthread_once(&rbuf_once, rbuf_key_init);
	rb = pthread_getspecific(rbuf_key);
	if (rb && rb->rb_size >= size)
		return rb->rb_data;
	if (size < 128 * 1024)
		size = 128 * 1024;
	free(rb);
	rb = malloc(sizeof(*rb) + size);
	pthread_setspecific(rbuf_key, rb);
	if (!rb)
		return NULL;
	rb->rb_size = size;
	return rb->rb_data;
}

/* Reply to a read from the device's page cache and memory pieces. */
struct read_reply {
	fuse_req_t rr_req;
	int rr_replied;
};

/*
 * A read's reply as one writev: memory pieces (holes: the shared zeros;
 * blocks of the dirty-block index; inline data) as they are, device
 * pieces read into this thread's buffer, kept from one request to the
 * next.  libfuse's fuse_reply_data splices device pieces, but a reply of
 * 1 MiB (the size the kernel asks for) needs a pipe larger than the
 * system's pipe-max-size (1 MiB) allows, so it always took its fallback:
 * a new buffer of the reply's size for every request, mapped, faulted in
 * page by page, filled, written and unmapped (strace of a cold sequential
 * read: one mmap, one munmap and no splice per read).  -1: more pieces
 * than one writev takes; the caller uses fuse_reply_data.
 */
#define IOV_REPLY_MAX 512
static int reply_iov_pieces(fuse_req_t req, int devfd, const struct shoal_piece *pv, unsigned n)
{
	struct iovec iov[IOV_REPLY_MAX];
	size_t fdbytes = 0, at = 0;
	char *buf = NULL;

	if (n > IOV_REPLY_MAX)
		return -1;
	for (unsigned i = 0; i < n; i++)
		if (!pv[i].sv_mem)
			fdbytes += pv[i].sv_len;
	if (fdbytes && !(buf = rbuf_get(fdbytes))) {
		reply_err(req, ENOMEM);
		return 0;
	}
	for (unsigned i = 0; i < n; i++) {
		if (pv[i].sv_mem) {
			iov[i] = (struct iovec){(void *)pv[i].sv_mem, pv[i].sv_len};
			continue;
		}
		size_t got = 0;
		while (got < pv[i].sv_len) {
			ssize_t r = pread(devfd, buf + at + got, pv[i].sv_len - got,
					  (off_t)(pv[i].sv_devoff + got));
			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0) {
				reply_err(req, r < 0 ? errno : EIO);
				return 0;
			}
			got += (size_t)r;
		}
		iov[i] = (struct iovec){buf + at, pv[i].sv_len};
		at += pv[i].sv_len;
	}
	fuse_reply_iov(req, iov, (int)n);
	return 0;
}

static int read_reply_fn(void *arg, int devfd, const struct shoal_piece *pv, unsigned n)
{
	struct read_reply *rr = arg;
	struct fuse_bufvec *bv;

	rr->rr_replied = 1;
	if (n == 0) {
		fuse_reply_buf(rr->rr_req, NULL, 0);
		return 0;
	}
	if (reply_iov_pieces(rr->rr_req, devfd, pv, n) == 0)
		return 0;
	bv = malloc(sizeof(*bv) + sizeof(bv->buf[0]) * (n - 1));
	if (!bv) {
		reply_err(rr->rr_req, ENOMEM);
		return 0;
	}
	*bv = (struct fuse_bufvec)FUSE_BUFVEC_INIT(0);
	bv->count = n;
	for (unsigned i = 0; i < n; i++) {
		struct fuse_buf *b = &bv->buf[i];
		memset(b, 0, sizeof(*b));
		b->size = pv[i].sv_len;
		if (pv[i].sv_mem) {
			b->mem = (void *)pv[i].sv_mem;
		} else {
			b->flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
			b->fd = devfd;
			b->pos = (off_t)pv[i].sv_devoff;
		}
	}
	fuse_reply_data(rr->rr_req, bv, FUSE_BUF_SPLICE_MOVE); /* replies, also on error */
	free(bv);
	return 0;
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	caller_begin(req);
	struct shoal_fs *fs = FS(req);
	struct read_reply rr = {.rr_req = req};
	char *buf;
	ssize_t n = -EOPNOTSUPP;
	int base = !fi->direct_io && mb_tracked(ino); /* a page-cache fill to keep (8) */

	if (!base)
		n = shoal_read_direct(fs, ino_in(fs, ino), size, (uint64_t)off, fi->flags,
				      read_reply_fn, &rr);
	if (rr.rr_replied)
		return;
	if (n != -EOPNOTSUPP) {
		reply_err(req, n < 0 ? (int)-n : EIO);
		return;
	}
	buf = rbuf_get(size);
	if (!buf) {
		reply_err(req, ENOMEM);
		return;
	}
	n = shoal_read(fs, ino_in(fs, ino), buf, size, (uint64_t)off, fi->flags);
	if (n < 0) {
		reply_err(req, (int)-n);
		return;
	}
	if (base)
		mb_set(ino, (uint64_t)off, buf, (size_t)n, 1);
	fuse_reply_buf(req, buf, (size_t)n);
}

/* Copy a write's payload, which may sit in a pipe, to the device (splice). */
static int write_copy_fn(void *arg, int devfd, uint64_t devoff, size_t len, size_t srcoff)
{
	struct fuse_bufvec *src = arg;
	struct fuse_bufvec dst = FUSE_BUFVEC_INIT(len);
	ssize_t n;

	(void)srcoff; /* the source is consumed in order: srcoff == bytes so far */
	dst.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	dst.buf[0].fd = devfd;
	dst.buf[0].pos = (off_t)devoff;
	n = fuse_buf_copy(&dst, src, 0);
	if (n < 0)
		return (int)n;
	return (size_t)n == len ? 0 : -EIO;
}

/*
 * The kernel's size grows to end with an empty FUSE_NOTIFY_STORE (no page
 * is touched, so no page lock is waited for): it would otherwise stay at
 * the position it sent plus the bytes written.  A failure costs only that
 * (the attributes are stale anyway and the next stat asks); it is said.
 */
static void append_size(fuse_req_t req, fuse_ino_t ino, uint64_t end)
{
	struct fuse_bufvec none = FUSE_BUFVEC_INIT(0);
	int ret = fuse_lowlevel_notify_store(((struct smount *)fuse_req_userdata(req))->sm_se, ino,
					     (off_t)end, &none, 0);

	if (ret != 0 && ret != -ENOENT)
		fprintf(stderr, "shoal-mount: telling the kernel inode %llu's size %llu after an "
			"append: %s\n", (unsigned long long)ino, (unsigned long long)end,
			strerror(-ret));
}

/*
 * (8) The kernel's writeback of pages whose bases are kept (mbase.c):
 * each page with a base writes only what differs from it, merged with the
 * file under one EX hold; a page without one is written whole.
 */
static ssize_t write_merged(struct shoal_fs *fs, const struct shoal_ctx *ctx, fuse_ino_t ino,
			    const char *mem, size_t size, uint64_t off, int flags)
{
	static __thread char base[4096];
	size_t done = 0;

	while (done < size) {
		uint64_t at = off + done;
		size_t in = (size_t)(at % sizeof(base)), len = sizeof(base) - in;
		ssize_t n;

		if (len > size - done)
			len = size - done;
		if (mb_get(ino, at / sizeof(base), base) == 0) {
			n = shoal_write_merge(fs, ctx, ino_in(fs, ino), mem + done, base + in, len, at,
					      flags);
			mb_count(1, len);
		} else {
			n = shoal_write_at(fs, ctx, ino_in(fs, ino), mem + done, len, &at, flags);
			mb_count(0, len);
		}
		if (n < 0)
			return done ? (ssize_t)done : n;
		done += len;
	}
	return (ssize_t)done;
}

static void op_write_buf(fuse_req_t req, fuse_ino_t ino, struct fuse_bufvec *bufv, off_t off,
			 struct fuse_file_info *fi)
{
	caller_begin(req);
	struct shoal_fs *fs = FS(req);
	struct shoal_ctx ctx;
	size_t size = fuse_buf_size(bufv);
	uint64_t at = (uint64_t)off;
	ssize_t n = -EOPNOTSUPP;

	req_ctx(req, &ctx);
	if (fi->writepage) {
		ctx.c_flags |= SHOAL_CTX_CACHE; /* drops no privileges: kill_priv */
		wbkick_note((uint64_t)ino, size);
	}
	int base = !fi->direct_io && mb_tracked(ino); /* (8) */
	/* large payloads move device-side; small ones (often inline) via memory */
	if (size >= SMOUNT_SPLICE_MIN && !(fi->writepage && base) &&
	    !(bufv->count == 1 && !(bufv->buf[0].flags & FUSE_BUF_IS_FD))) {
		n = shoal_write_direct(fs, &ctx, ino_in(fs, ino), size, &at, fi->flags,
				       write_copy_fn, bufv);
		if (n != -EOPNOTSUPP && base)
			mb_drop(ino, at, size);
	}
	if (n == -EOPNOTSUPP) { /* small write, or a device without a plain fd */
		const void *mem;
		char *tmp = NULL;
		if (bufv->count == 1 && !(bufv->buf[0].flags & FUSE_BUF_IS_FD)) {
			mem = (const char *)bufv->buf[0].mem + bufv->off;
		} else {
			struct fuse_bufvec dst = FUSE_BUFVEC_INIT(size);
			tmp = malloc(size ? size : 1);
			if (!tmp) {
				reply_err(req, ENOMEM);
				return;
			}
			dst.buf[0].mem = tmp;
			n = fuse_buf_copy(&dst, bufv, 0);
			if (n < 0 || (size_t)n != size) {
				free(tmp);
				reply_err(req, n < 0 ? (int)-n : EIO);
				return;
			}
			mem = tmp;
		}
		if (fi->writepage && base)
			n = write_merged(fs, &ctx, ino, mem, size, at, fi->flags);
		else
			n = shoal_write_at(fs, &ctx, ino_in(fs, ino), mem, size, &at, fi->flags);
		if (n > 0 && base)
			mb_set(ino, at, mem, (size_t)n, fi->writepage);
		free(tmp);
	}
	/* an append elsewhere than the kernel thought: tell it the size it
	 * made, so its mappings and splices reach it (7) */
	if (n > 0 && at != (uint64_t)off)
		append_size(req, ino, at + (uint64_t)n);
	/* the kernel left dropping privileges to us (main.c killpriv_v2) and
	 * keeps the mode it has: attributes only, which takes no lock */
	if (shoal_privs_dropped())
		fuse_lowlevel_notify_inval_inode(((struct smount *)fuse_req_userdata(req))->sm_se,
						 ino, -1, 0);
	if (n < 0)
		reply_err(req, (int)-n);
	else
		fuse_reply_write(req, (size_t)n);
}

static void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	caller_begin(req);
	/* Nothing is buffered here; durability is fsync's business.  A
	 * close drops the closing process's posix locks (fcntl(2)). */
	plock_flush(FS(req), ino_in(FS(req), ino), fi->lock_owner);
	reply_err(req, 0);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	caller_begin(req);
	struct shoal_fs *fs = FS(req);

	mb_release(ino, fi->flags);
	plock_release(fs, ino_in(fs, ino), fi->fh, fi->flock_release, fi->lock_owner);
	reply_err(req, -shoal_release(fs, ino_in(fs, ino), fi->flags));
}

static void op_getlk(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi,
		     struct flock *lock)
{
	caller_begin(req);
	plock_getlk(req, FS(req), ino_in(FS(req), ino), fi, lock);
}

static void op_setlk(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi,
		     struct flock *lock, int sleep)
{
	caller_begin(req);
	plock_setlk(req, FS(req), ino_in(FS(req), ino), fi, lock, sleep);
}

static void op_flock(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi, int op)
{
	caller_begin(req);
	plock_flock(req, FS(req), ino_in(FS(req), ino), fi, op);
}

static void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	caller_begin(req);
	struct shoal_fs *fs = FS(req);

	reply_err(req, -shoal_fsync(fs, ino_in(fs, ino), datasync));
}

static void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
			 struct fuse_file_info *fi)
{
	caller_begin(req);
	struct shoal_fs *fs = FS(req);

	int ret = shoal_fallocate(fs, ino_in(fs, ino), mode, (uint64_t)off, (uint64_t)len);

	mb_forget(ino); /* (8) */

	if (shoal_privs_dropped()) /* the set-ID bits: as op_write */
		smount_attr_changed(fuse_req_userdata(req), ino_in(fs, ino));
	reply_err(req, -ret);
}

static void op_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence,
		     struct fuse_file_info *fi)
{
	caller_begin(req);
	struct shoal_fs *fs = FS(req);
	int64_t ret;

	if (whence != SEEK_DATA && whence != SEEK_HOLE) {
		reply_err(req, EINVAL);
		return;
	}
	ret = shoal_lseek(fs, ino_in(fs, ino), (uint64_t)off, whence);
	if (ret < 0)
		reply_err(req, (int)-ret);
	else
		fuse_reply_lseek(req, (off_t)ret);
}

/* --- directories ------------------------------------------------------ */

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	caller_begin(req);
	struct shoal_fs *fs = FS(req);
	int ret;

	/* An open reference, so an rmdir'ed directory lives until closed. */
	ret = shoal_open(fs, ino_in(fs, ino), fi->flags);
	if (ret < 0) {
		reply_err(req, -ret);
		return;
	}
	/* readdir gets no open flags: the handle carries them (O_NOATIME) */
	fi->fh = (uint64_t)(unsigned)fi->flags;
	if (fuse_reply_open(req, fi) != 0)
		shoal_release(fs, ino_in(fs, ino), fi->flags);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	caller_begin(req);
	struct shoal_fs *fs = FS(req);

	reply_err(req, -shoal_release(fs, ino_in(fs, ino), fi->flags));
}

static void op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	caller_begin(req);
	struct shoal_fs *fs = FS(req);

	reply_err(req, -shoal_fsync(fs, ino_in(fs, ino), datasync));
}

/* readdir: entries go straight into the reply buffer until it is full. */
struct rd_plain {
	fuse_req_t rp_req;
	char *rp_buf;
	size_t rp_size;
	size_t rp_used;
};

static int rd_plain_fill(void *arg, const char *name, const struct stat *st, uint64_t next_off)
{
	struct rd_plain *rp = arg;
	size_t len;

	len = fuse_add_direntry(rp->rp_req, rp->rp_buf + rp->rp_used, rp->rp_size - rp->rp_used,
				name, st, (off_t)next_off);
	if (len > rp->rp_size - rp->rp_used)
		return 1;
	rp->rp_used += len;
	return 0;
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	caller_begin(req);
	struct shoal_fs *fs = FS(req);
	struct rd_plain rp = { .rp_req = req, .rp_size = size };
	int ret;

	rp.rp_buf = malloc(size ? size : 1);
	if (!rp.rp_buf) {
		reply_err(req, ENOMEM);
		return;
	}
	ret = shoal_readdir(fs, ino_in(fs, ino), (uint64_t)off, (int)fi->fh, rd_plain_fill, &rp);
	if (ret < 0 && rp.rp_used == 0)
		reply_err(req, -ret);
	else
		fuse_reply_buf(req, rp.rp_buf, rp.rp_used); /* a later call reports the error */
	free(rp.rp_buf);
}

/*
 * readdirplus: the names that fit are collected first; each one is then
 * looked up (which takes the lookup reference the kernel will count) outside
 * shoal_readdir, see (5).  "." and ".." carry no node id: the kernel takes
 * no reference for them.
 */
struct rd_ent {
	uint64_t re_off;
	struct stat re_st;
	char *re_name;
};

struct rd_plus {
	fuse_req_t rx_req;
	size_t rx_size;
	size_t rx_used; /* bytes the collected entries will take */
	struct rd_ent *rx_ents;
	size_t rx_count;
	size_t rx_cap;
	int rx_err;
};

static int rd_plus_collect(void *arg, const char *name, const struct stat *st,
			   uint64_t next_off)
{
	struct rd_plus *rx = arg;
	struct rd_ent *re;
	size_t len;

	len = fuse_add_direntry_plus(rx->rx_req, NULL, 0, name, NULL, 0);
	if (len > rx->rx_size - rx->rx_used)
		return 1;
	if (rx->rx_count == rx->rx_cap) {
		size_t cap = rx->rx_cap ? 2 * rx->rx_cap : 32;
		re = realloc(rx->rx_ents, cap * sizeof(*re));
		if (!re)
			goto out_nomem;
		rx->rx_ents = re;
		rx->rx_cap = cap;
	}
	re = &rx->rx_ents[rx->rx_count];
	re->re_name = strdup(name);
	if (!re->re_name)
		goto out_nomem;
	re->re_st = *st;
	re->re_off = next_off;
	rx->rx_count++;
	rx->rx_used += len;
	return 0;

out_nomem:
	rx->rx_err = -ENOMEM;
	return 1;
}

static int is_dot_or_dotdot(const char *name)
{
	return name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'));
}

static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			   struct fuse_file_info *fi)
{
	caller_begin(req);
	struct shoal_fs *fs = FS(req);
	struct rd_plus rx = { .rx_req = req, .rx_size = size };
	uint64_t dir = ino_in(fs, ino);
	uint64_t *refs = NULL; /* inodes looked up, to give back on failure */
	size_t nrefs = 0, used = 0, i;
	char *buf = NULL;
	int ret;

	ret = shoal_readdir(fs, dir, (uint64_t)off, (int)fi->fh, rd_plus_collect, &rx);
	if (ret == 0)
		ret = rx.rx_err;
	if (ret < 0 && rx.rx_count == 0)
		goto out_err;
	ret = 0;
	buf = malloc(size ? size : 1);
	refs = malloc((rx.rx_count ? rx.rx_count : 1) * sizeof(*refs));
	if (!buf || !refs) {
		ret = -ENOMEM;
		goto out_err;
	}
	for (i = 0; i < rx.rx_count; i++) {
		struct rd_ent *re = &rx.rx_ents[i];
		struct fuse_entry_param e;
		struct stat st;

		memset(&e, 0, sizeof(e));
		if (is_dot_or_dotdot(re->re_name) ||
		    (S_ISDIR(re->re_st.st_mode) && names_enabled())) {
			/* st_ino and type: all the kernel uses.  A cluster hands
			 * out directories by lookup only (dir_handed_out): here
			 * the kernel may move or keep an old dentry of one, and
			 * names.c could not know which */
			e.attr = re->re_st;
		} else {
			names_note(ino, re->re_name);
			ret = shoal_lookup(fs, dir, re->re_name, &st);
			if (ret < 0) {
				/* Gone since it was listed, or unreadable (EIO): a
				 * plain entry, so one bad inode hides no other name;
				 * a lookup of it reports the error. */
				e.attr = re->re_st;
				ret = 0;
			} else {
				ret = fill_entry(fs, &st, &e, 1);
				if (ret < 0) {
					shoal_forget(fs, (uint64_t)st.st_ino, 1);
					break;
				}
				refs[nrefs++] = (uint64_t)st.st_ino;
			}
		}
		used += fuse_add_direntry_plus(req, buf + used, size - used, re->re_name, &e,
					       (off_t)re->re_off);
	}
	if (ret < 0 && used == 0)
		goto out_err; /* the first entry failed: nothing taken, say why */
	if (fuse_reply_buf(req, buf, used) != 0)
		for (i = 0; i < nrefs; i++)
			shoal_forget(fs, refs[i], 1);
	goto out_free;

out_err:
	reply_err(req, -ret);
out_free:
	for (i = 0; i < rx.rx_count; i++)
		free(rx.rx_ents[i].re_name);
	free(rx.rx_ents);
	free(refs);
	free(buf);
}

/* --- the filesystem, xattrs, permissions ------------------------------ */

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	caller_begin(req);
	struct statvfs sv;
	int ret;

	ret = shoal_statfs(FS(req), &sv);
	if (ret < 0)
		reply_err(req, -ret);
	else
		fuse_reply_statfs(req, &sv);
}

static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
			size_t size, int flags)
{
	caller_begin(req);
	struct shoal_fs *fs = FS(req);

	int ret = shoal_setxattr(fs, ino_in(fs, ino), name, value, size, flags);

	if (!ret && !strncmp(name, "system.posix_acl_", 17))
		smount_attr_changed(fuse_req_userdata(req), ino_in(fs, ino)); /* mode */
	reply_err(req, -ret);
}

/* getxattr and listxattr: size 0 asks for the size, else for the bytes. */
static void reply_xattr(fuse_req_t req, ssize_t n, const char *buf, size_t size)
{
	if (n < 0)
		reply_err(req, (int)-n);
	else if (size == 0)
		fuse_reply_xattr(req, (size_t)n);
	else
		fuse_reply_buf(req, buf, (size_t)n);
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	caller_begin(req);
	struct shoal_fs *fs = FS(req);
	char *buf = NULL;

	if (size) {
		buf = malloc(size);
		if (!buf) {
			reply_err(req, ENOMEM);
			return;
		}
	}
	reply_xattr(req, shoal_getxattr(fs, ino_in(fs, ino), name, buf, size), buf, size);
	free(buf);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	caller_begin(req);
	struct shoal_fs *fs = FS(req);
	char *buf = NULL;

	if (size) {
		buf = malloc(size);
		if (!buf) {
			reply_err(req, ENOMEM);
			return;
		}
	}
	reply_xattr(req, shoal_listxattr(fs, ino_in(fs, ino), buf, size), buf, size);
	free(buf);
}

static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	caller_begin(req);
	struct shoal_fs *fs = FS(req);

	int ret = shoal_removexattr(fs, ino_in(fs, ino), name);

	if (!ret && !strncmp(name, "system.posix_acl_", 17))
		smount_attr_changed(fuse_req_userdata(req), ino_in(fs, ino)); /* ctime */
	reply_err(req, -ret);
}

/* Is the caller of req in group gid (primary or supplementary)? */
static int req_in_group(fuse_req_t req, gid_t gid)
{
	gid_t small[64], *list = small;
	int n, i, cap = 64, found = 0;

	if (fuse_req_ctx(req)->gid == gid)
		return 1;
	n = fuse_req_getgroups(req, cap, small);
	if (n > cap) {
		cap = n;
		list = malloc((size_t)cap * sizeof(*list));
		if (!list)
			return 0;
		n = fuse_req_getgroups(req, cap, list);
	}
	for (i = 0; i < n && i < cap; i++)
		if (list[i] == gid)
			found = 1;
	if (list != small)
		free(list);
	return found;
}

/*
 * access(2) and chdir: libshoal decides, as for every other request.
 */
static void op_access(fuse_req_t req, fuse_ino_t ino, int mask)
{
	caller_begin(req);
	struct shoal_fs *fs = FS(req);

	reply_err(req, -shoal_access(fs, ino_in(fs, ino), mask));
}

/* --- ioctl: the inode flags (chattr/lsattr) --------------------------- */

/* The flags shoal keeps, as the fsxattr ioctls name them. */
static const struct {
	uint32_t fl;
	uint32_t xfl;
} xflag_map[] = {
	{ FS_IMMUTABLE_FL, FS_XFLAG_IMMUTABLE },
	{ FS_APPEND_FL, FS_XFLAG_APPEND },
	{ FS_NODUMP_FL, FS_XFLAG_NODUMP },
	{ FS_NOATIME_FL, FS_XFLAG_NOATIME },
};
#define XFLAG_COUNT (sizeof(xflag_map) / sizeof(xflag_map[0]))

static int ioc_fsgetxattr(struct shoal_fs *fs, uint64_t ino, struct fsxattr *fx)
{
	uint32_t flags;
	size_t i;
	int ret;

	ret = shoal_getflags(fs, ino, &flags);
	if (ret < 0)
		return ret;
	memset(fx, 0, sizeof(*fx));
	for (i = 0; i < XFLAG_COUNT; i++)
		if (flags & xflag_map[i].fl)
			fx->fsx_xflags |= xflag_map[i].xfl;
	return 0;
}

static int ioc_fssetxattr(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t ino,
			  const struct fsxattr *fx)
{
	uint32_t flags, known = 0;
	size_t i;
	int ret;

	for (i = 0; i < XFLAG_COUNT; i++)
		known |= xflag_map[i].xfl;
	if ((fx->fsx_xflags & ~known) || fx->fsx_extsize || fx->fsx_projid ||
	    fx->fsx_cowextsize)
		return -EOPNOTSUPP;
	ret = shoal_getflags(fs, ino, &flags);
	if (ret < 0)
		return ret;
	for (i = 0; i < XFLAG_COUNT; i++) {
		flags &= ~xflag_map[i].fl;
		if (fx->fsx_xflags & xflag_map[i].xfl)
			flags |= xflag_map[i].fl;
	}
	return shoal_setflags(fs, ctx, ino, flags);
}

/*
 * These are restricted ioctls: the kernel sizes the buffers from the
 * command (FS_IOC_GETFLAGS says long, but the kernel's own fileattr path
 * sends an int, as ext4 reads and writes one), so no retry is ever needed.
 * We read the first 4 bytes (the int on little-endian machines, where a
 * long's low half comes first) and reply with 4, whatever was offered.
 */
static void op_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg,
		     struct fuse_file_info *fi, unsigned flags, const void *in_buf,
		     size_t in_bufsz, size_t out_bufsz)
{
	caller_begin(req);
	struct shoal_fs *fs = FS(req);
	uint64_t sino = ino_in(fs, ino);
	struct shoal_ctx ctx;
	struct fsxattr fx;
	uint32_t fl;
	int ret;

	if (flags & FUSE_IOCTL_COMPAT) {
		reply_err(req, ENOSYS);
		return;
	}
	req_ctx(req, &ctx);
	switch (cmd) {
	case FS_IOC_GETFLAGS:
		if (out_bufsz < sizeof(fl)) {
			ret = -EINVAL;
			break;
		}
		ret = shoal_getflags(fs, sino, &fl);
		if (ret == 0) {
			fuse_reply_ioctl(req, 0, &fl, sizeof(fl));
			return;
		}
		break;
	case FS_IOC_SETFLAGS:
		if (in_bufsz < sizeof(fl)) {
			ret = -EINVAL;
			break;
		}
		memcpy(&fl, in_buf, sizeof(fl));
		ret = shoal_setflags(fs, &ctx, sino, fl);
		break;
	case FS_IOC_FSGETXATTR:
		if (out_bufsz < sizeof(fx)) {
			ret = -EINVAL;
			break;
		}
		ret = ioc_fsgetxattr(fs, sino, &fx);
		if (ret == 0) {
			fuse_reply_ioctl(req, 0, &fx, sizeof(fx));
			return;
		}
		break;
	case FS_IOC_FSSETXATTR:
		if (in_bufsz < sizeof(fx)) {
			ret = -EINVAL;
			break;
		}
		memcpy(&fx, in_buf, sizeof(fx));
		ret = ioc_fssetxattr(fs, &ctx, sino, &fx);
		break;
	default:
		ret = -ENOTTY;
		break;
	}
	if (ret < 0) {
		reply_err(req, -ret);
		return;
	}
	if (cmd == FS_IOC_SETFLAGS || cmd == FS_IOC_FSSETXATTR)
		smount_attr_changed(fuse_req_userdata(req), sino); /* ctime */
	fuse_reply_ioctl(req, 0, NULL, 0);
}

const struct fuse_lowlevel_ops smount_ops = {
	.init = op_init,
	.destroy = op_destroy,
	.lookup = op_lookup,
	.forget = op_forget,
	.forget_multi = op_forget_multi,
	.getattr = op_getattr,
	.setattr = op_setattr,
	.readlink = op_readlink,
	.mknod = op_mknod,
	.mkdir = op_mkdir,
	.unlink = op_unlink,
	.rmdir = op_rmdir,
	.symlink = op_symlink,
	.rename = op_rename,
	.link = op_link,
	.open = op_open,
	.read = op_read,
	.write_buf = op_write_buf,
	.flush = op_flush,
	.release = op_release,
	.fsync = op_fsync,
	.opendir = op_opendir,
	.readdir = op_readdir,
	.readdirplus = op_readdirplus,
	.releasedir = op_releasedir,
	.fsyncdir = op_fsyncdir,
	.statfs = op_statfs,
	.setxattr = op_setxattr,
	.getxattr = op_getxattr,
	.listxattr = op_listxattr,
	.removexattr = op_removexattr,
	.access = op_access,
	.create = op_create,
	.fallocate = op_fallocate,
	.lseek = op_lseek,
	.ioctl = op_ioctl,
	.getlk = op_getlk,
	.setlk = op_setlk,
	.flock = op_flock,
};

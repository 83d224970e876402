/*
 * shoal.h - the interface of libshoal (core/) to its users: the FUSE glue,
 * the tools and the tests.  Every call returns 0 (or a size) on success and a
 * negative errno on failure.  Inode numbers are shoal inode numbers (the
 * dinode's block address, always past the journals, so never 0 or 1): ask
 * shoal_root() for the root's.
 *
 * Calls that return an inode's attributes and "look it up" (lookup, mknod,
 * mkdir, symlink, link, create) take one lookup reference on that inode,
 * which shoal_forget() gives back, as FUSE's lookup count works.
 */
#ifndef SHOAL_SHOAL_H
#define SHOAL_SHOAL_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>

struct shoal_fs;
struct shoal_dev;

enum shoal_atime_mode {
	SHOAL_RELATIME = 0, /* default */
	SHOAL_NOATIME = 1,
	SHOAL_STRICTATIME = 2,
};

struct shoal_mount_opts {
	const char *mo_lock;     /* "nolock" (default) */
	const char *mo_node;     /* node name, default the host name */
	int mo_readonly;
	int mo_atime;            /* enum shoal_atime_mode */
	unsigned mo_commit_secs; /* journal commit interval, default 5 */
	uint64_t mo_cache_bytes; /* metadata buffer cache, default 256 MiB */
	int mo_journal;          /* journal slot; -1 or 0: chosen by the lock module
				  * (a cluster mount refuses any other than its) */
	const char *mo_secret;   /* lock=shoal: file with the cluster's secret */
	unsigned mo_hold_ms;     /* longest adaptive minimum glock hold; 0: none */
	unsigned mo_heartbeat_ms; /* heartbeat period; 0: $SHOAL_HEARTBEAT_MS or 5000 */
	/* The kernel's caches of ino must go (another node takes its glock):
	 * called from a thread that serves no request, before the glock is
	 * released; NULL: nothing caches outside libshoal. */
	void (*mo_inval)(void *arg, uint64_t ino);
	/* ino's glock is leaving the node and no operation can use it any
	 * more: no attribute of ino the kernel has, and for a directory (isdir
	 * 1, or -1: not known) no name in it, may be used again without asking
	 * libshoal.  Called under libshoal's locks, possibly from a thread
	 * serving a request: must only tell the kernel what takes no kernel
	 * lock, and never from this thread.  held: libshoal handed the kernel
	 * references to ino (lookup, create, ...) that it has not forgotten
	 * yet, so a kernel that does not know ino yet is about to (a reply is
	 * on its way).  NULL: nothing to tell. */
	void (*mo_inval_now)(void *arg, uint64_t ino, int isdir, int held);
	void *mo_inval_arg;
};

/* Who is asking: the caller of the FUSE request. */
struct shoal_ctx {
	uid_t c_uid;
	gid_t c_gid;
	pid_t c_pid;
	mode_t c_umask;
	/* Is the caller in supplementary group gid?  NULL: primary group only. */
	int (*c_in_group)(void *arg, gid_t gid);
	void *c_arg;
	int c_flags; /* SHOAL_CTX_* */
};
#define SHOAL_CTX_FH 0x1 /* setattr through an open file: no write check */
#define SHOAL_CTX_CACHE 0x2 /* a write of the kernel's page cache (a mapping's writeback) */

/*
 * Permission checks are libshoal's (perm.c): the FUSE glue names the caller
 * of each request with shoal_caller_set(ctx) on the thread serving it, and
 * shoal_caller_set(NULL) after.  With no caller set, calls have root's
 * rights (tools, tests).
 */
void shoal_caller_set(const struct shoal_ctx *ctx);
/* access(2): mask of R_OK, W_OK, X_OK (F_OK: exists) for the caller. */
int shoal_access(struct shoal_fs *fs, uint64_t ino, int mask);

/* What to change in shoal_setattr(). */
#define SHOAL_SET_MODE 0x01
#define SHOAL_SET_UID 0x02
#define SHOAL_SET_GID 0x04
#define SHOAL_SET_SIZE 0x08
#define SHOAL_SET_ATIME 0x10
#define SHOAL_SET_MTIME 0x20
#define SHOAL_SET_ATIME_NOW 0x40
#define SHOAL_SET_MTIME_NOW 0x80
#define SHOAL_SET_CTIME 0x100

/* Whether the last write or truncate of this thread dropped set-ID bits or
 * security.capability (then cleared): what the caller caches of the
 * file's attributes is stale. */
int shoal_privs_dropped(void);

/* Counters of a mount (shoal stat). */
struct shoal_counters {
	uint64_t sc_dev_reads;
	uint64_t sc_dev_read_bytes;
	uint64_t sc_dev_writes;
	uint64_t sc_dev_write_bytes;
	uint64_t sc_dev_flushes;
	uint64_t sc_commits;         /* journal transactions committed */
	uint64_t sc_commit_blocks;   /* log blocks written (fast commits included) */
	uint64_t sc_fast_commits;    /* fsyncs made durable by one fast-commit block */
	uint64_t sc_checkpoints;
	uint64_t sc_wb_visited;      /* blocks visited by writeback/fsync */
	uint64_t sc_wb_written;      /* data blocks written by writeback */
	uint64_t sc_fsyncs;
	uint64_t sc_fsync_noop;      /* fsyncs that found nothing to do */
	uint64_t sc_buf_hits;
	uint64_t sc_buf_misses;
	uint64_t sc_gl_requests;     /* lock module requests */
	uint64_t sc_gl_callbacks;    /* blocking callbacks received */
	uint64_t sc_gl_demotions;    /* glocks given back or down */
	uint64_t sc_gl_restarts;     /* operations that waited for a glock */
	uint64_t sc_gl_rtt_us;       /* total lock module wait, microseconds */
	uint64_t sc_recoveries;      /* journals of dead nodes replayed */
	uint64_t sc_corrupt;         /* metadata blocks that failed checks */
	uint64_t sc_atime_written;   /* atime updates of reads written in a transaction */
	uint64_t sc_atime_deferred;  /* due atime updates kept in memory (glock only SH) */
	uint64_t sc_atime_dropped;   /* kept updates lost: glock or inode left the node */
	uint64_t sc_fc_visited;      /* dirty-index blocks fast commits visited (changed ones) */
	uint64_t sc_dev_queue_read_bytes; /* reads served from queued device writes */
	uint64_t sc_withdrawals;     /* 1 once this cluster node withdrew after an error */
	uint64_t sc_recovery_errors; /* replays of a dead node's journal that failed (retried) */
	uint64_t sc_lease_refused;   /* writes refused because the lease with lockd was over */
};

/* mount/unmount: the device is owned by the fs once shoal_mount succeeds
 * (shoal_unmount closes it); after a failure the caller still owns it, and
 * shoal_mount_error() says why in one line. */
int shoal_mount(struct shoal_dev *dev, const struct shoal_mount_opts *opts,
		struct shoal_fs **out);
const char *shoal_mount_error(void);
/* Commit, checkpoint, free what is unlinked, mark the journal clean. */
int shoal_unmount(struct shoal_fs *fs);
/* Make everything durable now (syncfs). */
int shoal_sync(struct shoal_fs *fs);
uint64_t shoal_root(struct shoal_fs *fs);
uint32_t shoal_bsize(struct shoal_fs *fs);
int shoal_is_readonly(struct shoal_fs *fs);
void shoal_counters(struct shoal_fs *fs, struct shoal_counters *out);
/*
 * Every cached glock matching filter (NULL: all), one "G:" line each with
 * its holders ("H:") and waiters ("W:") under it (shoal glocks), or its
 * counters, after per-type totals (shoal glstats); docs/LOCKING.md.  The
 * text is made under the glock mutex and written to out after it is
 * dropped.  0 or -ENOMEM.
 */
struct glfilter;
int shoal_dump_glocks(struct shoal_fs *fs, FILE *out, const struct glfilter *filter);
int shoal_dump_glstats(struct shoal_fs *fs, FILE *out, const struct glfilter *filter);

/*
 * The glock trace (shoal trace; docs/LOCKING.md "Trace").  Every glock
 * state change, lock module request, blocking callback and demote request
 * is an event.  A subscriber gets the events its filter matches in a ring
 * of its own; when the ring is full, events are dropped and counted,
 * never waited for: the glock layer never blocks on a reader.
 */
enum shoal_glev_kind {
	SHOAL_GLEV_STATE = 1,    /* a lock module request or a demotion completed */
	SHOAL_GLEV_REQUEST = 2,  /* a lock module request was sent */
	SHOAL_GLEV_CALLBACK = 3, /* another node asked for the glock */
	SHOAL_GLEV_DEMOTE = 4,   /* a demotion was queued */
};
/* ev_flags: the glock's flags at the event, and what the event adds */
#define SHOAL_GLEV_F_INFLIGHT 0x001 /* I: a lock module request in flight */
#define SHOAL_GLEV_F_DEMOTING 0x002 /* D: being demoted */
#define SHOAL_GLEV_F_QUEUED 0x004   /* Q: a demotion queued */
#define SHOAL_GLEV_F_STICKY 0x008   /* S: never given back */
#define SHOAL_GLEV_F_TRY 0x100      /* T: a try request (fails rather than waits) */
#define SHOAL_GLEV_F_FAILED 0x200   /* E: the request failed (a try not grantable) */

struct shoal_glevent {
	uint64_t ev_time_ns; /* CLOCK_REALTIME */
	uint64_t ev_glnum;
	uint32_t ev_gltype;
	uint32_t ev_flags;   /* SHOAL_GLEV_F_* */
	int8_t ev_kind;      /* enum shoal_glev_kind */
	int8_t ev_prev;      /* glock states (UN 0, SH 1, DF 2, EX 3), -1: none */
	int8_t ev_new;
	int8_t ev_target;
	int8_t ev_dstate;
};

struct shoal_trace;
/* Subscribe with a filter (NULL: everything); -EBUSY when too many do. */
int shoal_trace_open(struct shoal_fs *fs, const struct glfilter *filter,
		     struct shoal_trace **out);
/*
 * Up to max events, waiting at most timeout_ms for the first; *dropped is
 * set to the events lost (ring full) since the last call.  Returns the
 * number of events (0 on timeout).
 */
size_t shoal_trace_read(struct shoal_trace *t, struct shoal_glevent *ev, size_t max,
			int timeout_ms, uint64_t *dropped);
/* Unsubscribe; every subscriber must be closed before shoal_unmount. */
void shoal_trace_close(struct shoal_trace *t);
/* One line, no newline: "TIME KIND TYPE/NUMBER prev:.. new:.. target:..
 * dstate:.. flags:.." (docs/LOCKING.md); returns its length like snprintf. */
int shoal_glevent_format(const struct shoal_glevent *ev, char *buf, size_t size);
/* The filter values of an event (enum glf_field order). */
void shoal_glevent_vals(const struct shoal_glevent *ev, int64_t *vals);
/* This node's journal (its slot in the cluster). */
uint32_t shoal_journal_id(struct shoal_fs *fs);
/* Nonzero once a metadata block failed its checks (the filesystem needs
 * fsck.shoal); then the first such block and the inode that reached it (0 if
 * not known). */
int shoal_damage(struct shoal_fs *fs, uint64_t *blkno, uint64_t *ino);
/* Why the mount went read-only, or NULL. */
const char *shoal_error(struct shoal_fs *fs);
/*
 * Stop this mount at once, as an error would (GFS2's sysfs withdraw, XFS's
 * shutdown): read-only from now on, nothing more written, changes not yet
 * committed dropped; a cluster node also fences its device and leaves as a
 * dead node does, so another node replays its journal (docs/LOCKING.md).
 * why becomes shoal_error().  0, or -EROFS if the mount is read-only
 * already.
 */
int shoal_withdraw(struct shoal_fs *fs, const char *why);

int shoal_lookup(struct shoal_fs *fs, uint64_t parent, const char *name, struct stat *st);
void shoal_forget(struct shoal_fs *fs, uint64_t ino, uint64_t nlookup);
/* Nonzero while libshoal counts lookup references of ino it handed the
 * kernel and shoal_forget has not given back; takes no fs_lock (it reads
 * the inode glock's mirror of the count), so it answers while an
 * operation or a demotion runs. */
int shoal_kernel_refs(struct shoal_fs *fs, uint64_t ino);
int shoal_getattr(struct shoal_fs *fs, uint64_t ino, struct stat *st);
/* st->st_* carries the new values for the bits in valid. */
int shoal_setattr(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t ino,
		  const struct stat *attr, int valid, struct stat *st);
uint64_t shoal_generation(struct shoal_fs *fs, uint64_t ino);

int shoal_mknod(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t parent,
		const char *name, mode_t mode, dev_t rdev, struct stat *st);
int shoal_mkdir(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t parent,
		const char *name, mode_t mode, struct stat *st);
int shoal_symlink(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t parent,
		  const char *name, const char *target, struct stat *st);
int shoal_link(struct shoal_fs *fs, uint64_t ino, uint64_t newparent, const char *newname,
	       struct stat *st);
int shoal_unlink(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t parent,
		 const char *name);
int shoal_rmdir(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t parent,
		const char *name);
/* flags: RENAME_NOREPLACE, RENAME_EXCHANGE */
int shoal_rename(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t parent,
		 const char *name, uint64_t newparent, const char *newname, unsigned flags);
ssize_t shoal_readlink(struct shoal_fs *fs, uint64_t ino, char *buf, size_t size);

/* Open/close (files and directories alike): an inode with no links is
 * freed after its last close and forget.  flags are the kernel's file
 * flags; SHOAL_O_EXEC (the kernel's __FMODE_EXEC, which FUSE passes on)
 * marks execve's open, which needs execute permission, not read. */
#define SHOAL_O_EXEC 0x20
int shoal_open(struct shoal_fs *fs, uint64_t ino, int flags);
int shoal_release(struct shoal_fs *fs, uint64_t ino, int flags);

/*
 * Posix (fcntl, OFD) and flock locks held cluster-wide by the lock manager
 * (docs/LOCKING.md "Posix and flock locks"; struct lk_plock and the ops in
 * shoal/lockd.h).  shoal_plock_supported: 0 with lock=nolock, where the
 * kernel keeps the locks itself and the others return -ENOSYS.  Errors:
 * as lkc_plock, except that a lost lock manager is -ENOLCK.
 * shoal_plock_wait (F_SETLKW) returns at once; done(arg, err) comes later
 * from another thread, exactly once when it returned 0 (see
 * lkc_plock_wait for what done may do); shoal_plock_cancel(token) makes a
 * waiting one end with -EINTR.
 */
struct lk_plock;
int shoal_plock_supported(struct shoal_fs *fs);
int shoal_plock(struct shoal_fs *fs, int op, struct lk_plock *pl);
int shoal_plock_wait(struct shoal_fs *fs, const struct lk_plock *pl,
		     void (*done)(void *arg, int err), void *arg, uint32_t *token);
int shoal_plock_cancel(struct shoal_fs *fs, uint64_t ino, uint32_t token);
/* This node's share of them (docs/CONTROL.md `stat`): requests answered
 * without lockd, inodes whose plock space it owns now, spaces lockd gave
 * it, spaces it gave back.  All 0 without a cluster lock manager. */
struct shoal_plock_stats {
	uint64_t local, owned, grants, gives;
};
void shoal_plock_stats(struct shoal_fs *fs, struct shoal_plock_stats *st);
/* Create and open: takes a lookup reference and an open reference. */
int shoal_create(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t parent,
		 const char *name, mode_t mode, int flags, struct stat *st);
/*
 * O_TMPFILE: make and open a regular file with no name in directory parent
 * (its permissions, set-group-ID and default ACL apply as to a create),
 * with di_nlink 0 and UNLINKED in its group's bitmap (FORMAT.md 10): freed
 * at its last close and forget, or by recovery after a crash, unless
 * shoal_link gives it a name first.  Takes a lookup and an open reference.
 */
int shoal_tmpfile(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t parent,
		  mode_t mode, int flags, struct stat *st);
ssize_t shoal_read(struct shoal_fs *fs, uint64_t ino, void *buf, size_t size, uint64_t off,
		   int flags);
/*
 * Writes.  With O_APPEND in flags (and not SHOAL_CTX_CACHE) the bytes go to
 * the end of file as this node finds it under the inode's EX glock,
 * whatever off says; shoal_write_at and shoal_write_direct return where
 * they went in *off.
 */
ssize_t shoal_write(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t ino,
		    const void *buf, size_t size, uint64_t off, int flags);
ssize_t shoal_write_at(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t ino,
		       const void *buf, size_t size, uint64_t *off, int flags);
/*
 * Write back a page of a mapping whose previous content, base, is known:
 * only the bytes of buf that differ from base are written, merged with
 * what the file holds under one EX hold (docs/LOCKING.md "Mapped pages").
 * Returns size or -errno.
 */
ssize_t shoal_write_merge(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t ino,
			  const void *buf, const void *base, size_t size, uint64_t off, int flags);
int shoal_fsync(struct shoal_fs *fs, uint64_t ino, int datasync);

/*
 * Zero-copy data paths, for a caller that can move bytes between the
 * device's file descriptor and its own (FUSE's splice).  A piece is either
 * sv_len bytes at sv_devoff of the device, or sv_len bytes at sv_mem (inline
 * data, or zeros for a hole).  The callback runs with the filesystem locked,
 * so the blocks cannot move under it; it returns 0 or -errno.  Both return
 * -EOPNOTSUPP when the device has no plain file descriptor (test devices):
 * use shoal_read/shoal_write then.
 */
struct shoal_piece {
	uint64_t sv_devoff;
	uint64_t sv_len;
	const void *sv_mem;
};
typedef int (*shoal_read_fn)(void *arg, int devfd, const struct shoal_piece *pv, unsigned n);
/* Returns the bytes handed to fn (0 at end of file) or -errno. */
ssize_t shoal_read_direct(struct shoal_fs *fs, uint64_t ino, size_t size, uint64_t off, int flags,
			  shoal_read_fn fn, void *arg);
/* fn copies len bytes from the caller's source at srcoff to devoff of devfd. */
typedef int (*shoal_write_fn)(void *arg, int devfd, uint64_t devoff, size_t len, size_t srcoff);
ssize_t shoal_write_direct(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t ino,
			   size_t size, uint64_t *off, int flags, shoal_write_fn fn, void *arg);
int shoal_fallocate(struct shoal_fs *fs, uint64_t ino, int mode, uint64_t off, uint64_t len);
/* SEEK_DATA / SEEK_HOLE: the resulting offset or -ENXIO. */
int64_t shoal_lseek(struct shoal_fs *fs, uint64_t ino, uint64_t off, int whence);

/*
 * readdir: calls fill for each entry whose offset is after off, in offset
 * order, until fill returns non-zero (buffer full).  "." and ".." have
 * offsets 1 and 2; the offset passed to fill is the one to resume after.
 * fill gets st_ino and the file type bits of st_mode only, and must not call
 * back into libshoal.
 */
typedef int (*shoal_fill_fn)(void *arg, const char *name, const struct stat *st, uint64_t next_off);
/* flags: the directory's open flags (O_NOATIME is honoured). */
int shoal_readdir(struct shoal_fs *fs, uint64_t ino, uint64_t off, int flags, shoal_fill_fn fill,
		  void *arg);

int shoal_statfs(struct shoal_fs *fs, struct statvfs *sv);

/* xattrs: full names ("user.foo").  get/list with size 0 return the size. */
int shoal_setxattr(struct shoal_fs *fs, uint64_t ino, const char *name, const void *value,
		   size_t size, int flags);
ssize_t shoal_getxattr(struct shoal_fs *fs, uint64_t ino, const char *name, void *value,
		       size_t size);
ssize_t shoal_listxattr(struct shoal_fs *fs, uint64_t ino, char *list, size_t size);
int shoal_removexattr(struct shoal_fs *fs, uint64_t ino, const char *name);

/* FS_IOC_GETFLAGS / FS_IOC_SETFLAGS values (FS_*_FL). */
int shoal_getflags(struct shoal_fs *fs, uint64_t ino, uint32_t *flags);
int shoal_setflags(struct shoal_fs *fs, const struct shoal_ctx *ctx, uint64_t ino,
		   uint32_t flags);

/* --- formatting (mkfs.shoal, tests) ----------------------------------- */

struct shoal_format_opts {
	uint32_t fo_bsize;      /* default 4096 */
	uint32_t fo_journals;   /* default 2 */
	uint64_t fo_jbytes;     /* bytes per journal, default shoal_default_jbytes() */
	const char *fo_locktable; /* "cluster:fsname"; default "shoal:" + the UUID in hex */
	const char *fo_lockproto; /* default "shoal" */
	/* called now and then with blocks done and total; may be NULL */
	void (*fo_progress)(void *arg, uint64_t done, uint64_t total);
	void *fo_progress_arg;
};

struct shoal_format_info {
	uint64_t fi_blocks;
	uint32_t fi_bsize;
	uint32_t fi_rgcount;
	uint32_t fi_journals;
	uint64_t fi_jblocks;
	uint8_t fi_uuid[16];
	char fi_locktable[64];	/* the superblock's, NUL terminated */
};

int shoal_format(struct shoal_dev *dev, const struct shoal_format_opts *opts,
		 struct shoal_format_info *info);
/* Default journal size: an eighth of the device shared among the journals,
 * at least 8 MiB and at most 128 MiB each (GFS2's default). */
uint64_t shoal_default_jbytes(uint64_t devbytes, uint32_t journals, uint32_t bsize);

#endif

/*
 * smount.h - one running shoal-mount: the state main.c sets up and the FUSE
 * operations (ops.c) and control commands (ctlcmd.c) read.
 */
#ifndef SHOAL_FUSE_SMOUNT_H
#define SHOAL_FUSE_SMOUNT_H

#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 14)
#include <fuse_lowlevel.h>

#include <shoal/shoal.h>

#include "ctl.h"

/* How long the kernel may trust attributes and entries (seconds). */
#define SMOUNT_TIMEOUT 86400.0
/* How long it may trust names (dentries, positive and negative):
 * SMOUNT_TIMEOUT, or option entry_timeout=. */
extern double smount_entry_timeout;
/* A cluster lock module (set before the session starts). */
extern int smount_cluster;
/* The lifetime to give names now: smount_entry_timeout, except in a
 * cluster whose kernel cannot be told to drop them all at once (main.c
 * epoch_write): 0, every path walk asks this node, unless entry_timeout=
 * said otherwise (names are then also invalidated one by one). */
double smount_entry_ttl(void);
/*
 * The attribute lifetime of an entry reply (lookup, create, mknod, mkdir,
 * symlink, link, readdirplus): SMOUNT_TIMEOUT with one node.  In a cluster
 * shoal replies after the operation's glock holds ended, so another node
 * may take the glock, and this node tell the kernel to drop the inode's
 * attributes, before the kernel has the reply.  For an inode the kernel
 * had, the kernel's attr_version check drops such a reply's attributes;
 * it makes no such check for a link reply, so link passes trusted 0 (no
 * lifetime: the next use asks again).  For an inode the kernel did not
 * have yet (lookup, and create, mknod, symlink, which make one), the
 * notification finds nothing; main.c tells the kernel again until it has
 * the inode (now_retry), which is certain for non-directories only (a
 * directory can have several node ids, nodeids.c): directories get no
 * lifetime either.
 */
double smount_entry_attr_ttl(int trusted, int isdir);
/*
 * A FORGET of node id ino is being served: the kernel no longer has the
 * references it gives back, so main.c stops waiting for it to know ino.
 */
struct smount;
/* The kernel drops ino's cached attributes (a reply without them changed
 * them: chattr, setting an ACL); waits at most a second for it. */
void smount_attr_changed(struct smount *sm, uint64_t ino);
void smount_forget_begin(uint64_t ino);
void smount_forget_end(uint64_t ino);
/* Largest write (and read) request: the kernel then uses 256-page requests. */
#define SMOUNT_MAX_WRITE (1u << 20)
/* Writes at least this big are spliced to the device, not copied. */
#define SMOUNT_SPLICE_MIN (64u << 10)
/*
 * Readahead for the mount, set through sysfs after mounting (ctl.c).  It
 * is also the read-around window of a page fault (half of it before the
 * faulting page), which matters because the kernel drops a FUSE file's
 * page cache at every size change: with 4 MiB, each 2 MiB hunk of bench
 * mmext (ftruncate, map, fill) read the previous 2 MiB back from the
 * device, 155 MiB/s; with 1 MiB, 194-211 MiB/s, and a cold 1 GiB
 * sequential read was no slower (3.2-3.3 GB/s against 1.2-2.5).
 */
#define SMOUNT_READAHEAD_KB 1024u

/* Bytes of large data writes queued for the device at most (dev.c (5)). */
#define SMOUNT_WB_BYTES (64u << 20)

/*
 * Everything here is set before the FUSE session starts and read-only while
 * it runs, except sm_fs's own state (libshoal locks it).
 */
struct smount {
	struct shoal_fs *sm_fs;
	struct fuse_session *sm_se;
	struct shoal_mount_opts sm_opts;
	char *sm_device;     /* absolute path */
	char *sm_mountpoint; /* absolute path */
	char *sm_options;    /* the options in effect, as "status" shows them */
	char sm_node[256];   /* sm_opts.mo_node points here */
	char sm_log[128];    /* where stderr went when detached, or "" */
	pid_t sm_pid;
	unsigned sm_max_threads; /* max_threads=, 0: libfuse's default */
};

extern const struct fuse_lowlevel_ops smount_ops;

/* plock.c: fcntl, OFD and flock locks through the lock manager (ino: libshoal's). */
void plock_getlk(fuse_req_t req, struct shoal_fs *fs, uint64_t ino, struct fuse_file_info *fi,
		 struct flock *lock);
void plock_setlk(fuse_req_t req, struct shoal_fs *fs, uint64_t ino, struct fuse_file_info *fi,
		 struct flock *lock, int sleep);
void plock_flock(fuse_req_t req, struct shoal_fs *fs, uint64_t ino, struct fuse_file_info *fi,
		 int op);
/* a close (FLUSH with the process's lock owner): its POSIX locks on ino go */
void plock_flush(struct shoal_fs *fs, uint64_t ino, uint64_t lock_owner);
/* The FUSE session is about to be destroyed: a lock wait that lockd
 * answers after this is not replied to (its process is gone with the
 * mount).  Waits for a reply being sent. */
void plock_session_end(void);
/* the last close of open file fh: its OFD and flock locks go */
void plock_release(struct shoal_fs *fs, uint64_t ino, uint64_t fh, int flock_release,
		   uint64_t lock_owner);

/* wbkick.c: writeback of a mapped file's pages before a size change. */
void wbkick_note(uint64_t ino, uint64_t bytes); /* a WRITE of the kernel's pages */
void wbkick_before_resize(struct smount *sm, uint64_t ino, uint64_t gen, uint64_t new_size);
void wbkick_stats(FILE *out); /* "name value" lines for the stat command */

/* Bases of mapped pages (mbase.c): ino is the FUSE node id of a file. */
int mb_open(uint64_t ino, int flags); /* 1: the first O_RDWR open, drop the pages */
void mb_release(uint64_t ino, int flags);
int mb_tracked(uint64_t ino);
void mb_set(uint64_t ino, uint64_t off, const void *data, size_t len, int full);
int mb_get(uint64_t ino, uint64_t idx, void *out); /* one 4 KiB page; -ENOENT */
void mb_drop(uint64_t ino, uint64_t off, uint64_t len);
void mb_truncate(uint64_t ino, uint64_t size);
void mb_forget(uint64_t ino);
void mb_count(int merged, uint64_t bytes);
void mb_stats(FILE *out);
/* The control commands: stat, status, glocks, glstats, trace. */
extern const struct ctl_cmd smount_ctl_cmds[];

#endif

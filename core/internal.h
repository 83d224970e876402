/*
 * internal.h - structures shared by the modules of libshoal.
 *
 * Concurrency: one mutex per mount, fs_lock, serialises every metadata
 * operation and the journal; data-block I/O of an operation runs under it
 * too.  Fields below say "fs_lock" when it protects them.  The commit thread
 * takes fs_lock like any operation.
 */
#ifndef SHOAL_INTERNAL_H
#define SHOAL_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "dev.h"
#include "shoal/ondisk.h"
#include "shoal/shoal.h"

struct glock;
struct gl_table;
struct gl_tracer;

/* --- buffer cache (buf.c) ---------------------------------------------- */

#define BUF_DIRTY 0x1  /* in the running transaction: must be logged */
#define BUF_PINNED 0x2 /* logged, not yet written home (checkpoint list) */
#define BUF_NEW 0x4    /* contents made in memory, not read */
#define BUF_STALE 0x8  /* block was freed: out of the hash, never written */

struct shoal_buf {
	uint64_t b_blkno;
	uint8_t *b_data;
	uint32_t b_flags;
	uint32_t b_ref;
	struct shoal_buf *b_hnext;              /* hash chain */
	struct shoal_buf *b_lprev, *b_lnext;    /* LRU of unreferenced clean bufs */
	struct shoal_buf *b_tnext;              /* running transaction list */
	struct shoal_buf *b_cprev, *b_cnext;    /* checkpoint list */
	uint64_t b_seq;                         /* transaction that last logged it */
	uint64_t b_gen;  /* owner glock's generation when read (cluster) */
	uint8_t *b_snap; /* DIRTY dinode: its image at the last full commit
			  * (what a fast commit's ranges are taken against) */
};

struct shoal_bcache {
	struct shoal_buf **bc_hash;
	uint32_t bc_hmask;
	uint64_t bc_count;
	uint64_t bc_max;       /* of bc_lru_count */
	uint64_t bc_lru_count;
	struct shoal_buf bc_lru; /* list head: b_lnext is least recently used */
};

/* --- resource groups (rgrp.c) ------------------------------------------ */

struct shoal_rgd {
	uint32_t rd_index;
	uint64_t rd_addr;  /* header block */
	uint64_t rd_data0;
	uint32_t rd_length;
	uint32_t rd_free;    /* fs_lock; mirrors the header once loaded */
	uint32_t rd_pending; /* freed blocks not yet reusable (see rgrp.c (2)) */
	uint8_t *rd_pend_map; /* 1 bit per block, NULL when none pending */
	uint32_t rd_last;    /* next-fit cursor */
	struct glock *rd_gl; /* its glock (type 3, number rd_addr) */
	uint64_t rd_gen;     /* rd_gl's generation rd_free was read at */
	uint32_t rd_statfs_free; /* fs_lock: its home copy's count at the last statfs read */
	int rd_statfs_valid;     /* ... and the group was not this node's then */
};

/* --- inodes (inode.c) --------------------------------------------------- */

struct shoal_inode {
	uint64_t i_ino;
	struct shoal_buf *i_bh; /* dinode buffer, referenced while in memory */
	uint64_t i_nlookup;     /* FUSE lookup count (inode_lookups) */
	uint32_t i_open;        /* open file handles */
	uint32_t i_ref;         /* references held by running operations */
	uint64_t i_meta_seq;    /* last transaction that changed this inode */
	uint64_t i_dsync_seq;   /* same, for changes fdatasync must commit */
	uint64_t i_meta_mod;    /* j_mod of its last change (jnl_durable) */
	uint64_t i_dsync_mod;   /* same, for changes fdatasync must commit */
	uint64_t i_data_gen;    /* dev write generation of its last data write */
	uint64_t i_fsync_ns;    /* monotonic time of its last fsync/fdatasync */
	int i_freed;            /* destroyed: out of the hash, blocks freed */
	int i_linkable;         /* fs_lock: an O_TMPFILE inode with no link yet,
				 * which linkat may name (do_link) */
	int i_free_wanted;      /* cluster: another node tried to free it (its
				 * iopen callback) while in use here */
	struct glock *i_gl;     /* its inode glock (cache generation) */
	uint64_t i_gen;         /* i_gl's generation the dinode was read at */
	/* A read's atime update the node could not write (its glock only SH):
	 * shown by stat here, written with the inode's next transaction
	 * (inode_dirty), dropped when the dinode is read again or the inode
	 * leaves memory (docs/LOCKING.md "atime").  fs_lock. */
	int i_atime_pending;
	struct shoal_ts i_atime_pend;
	/* Held shared while data moves outside fs_lock (reads), exclusive
	 * while blocks are freed from under the mapping (truncate, punch).
	 * Lock order: i_iolock before fs_lock. */
	pthread_rwlock_t i_iolock;
	struct shoal_inode *i_hnext;
};

/* --- dirty-block index (dindex.c) --------------------------------------- */

struct dx_entry {
	uint64_t de_blkno;
	uint64_t de_unlogged;                /* granules changed since the last fast commit */
	struct dx_entry *de_hnext;           /* hash chain */
	struct dx_entry *de_prev, *de_next;  /* every entry */
	struct dx_entry *de_uprev, *de_unext; /* entries with de_unlogged != 0 */
	uint8_t de_data[];                   /* the block as it is now */
};

struct dx_index {
	struct dx_entry **dx_hash;
	uint32_t dx_hmask;
	uint32_t dx_count;
	uint32_t dx_max;        /* entries before a commit writes them home */
	uint32_t dx_gshift;     /* a granule is 1 << dx_gshift bytes, <= 64 a block */
	struct dx_entry dx_head; /* list head */
	struct dx_entry dx_unlogged; /* head of the entries changed since the last
				      * fast commit, which is all it visits (R3) */
	int dx_on;              /* small overwrites may go to the index (FCDATA) */
};

/* --- the mount ----------------------------------------------------------- */

struct shoal_journal {
	uint32_t j_index;
	uint64_t j_addr;   /* first block (the journal head) */
	uint32_t j_blocks; /* blocks, head included */
	uint32_t j_head;   /* log position where the next transaction goes */
	uint32_t j_tail;   /* oldest log position still needed */
	uint64_t j_tail_seq;
	uint64_t j_seq;           /* sequence of the running transaction */
	uint32_t j_used;          /* log blocks between tail and head */
	struct shoal_buf *j_trans; /* running transaction: BUF_DIRTY bufs */
	uint32_t j_tcount;
	struct shoal_buf j_ckpt;  /* checkpoint list head */
	uint32_t j_ckpt_count;
	int j_ordered;            /* data written into new blocks since the last flush */
	int j_fc_on;              /* fast commits allowed (feature bit, mount) */
	int j_fc_ok;              /* the running transaction can be fast-committed */
	uint64_t j_mod;           /* changes so far (one per trans_add), never reset */
	uint64_t j_fc_mod;        /* j_mod at the last fast commit: durable up to it */
};

struct shoal_fs {
	struct shoal_dev *fs_dev;
	struct shoal_sb fs_sb;
	uint32_t fs_bsize;
	uint32_t fs_bshift;
	struct shoal_mount_opts fs_opts;
	char fs_node[SHOAL_LOCKNAME_LEN];
	/* fs_ro, fs_aborted: atomic (fs_is_ro, fs_stop): a fenced node's lock
	 * client thread sets them holding no lock of the filesystem */
	int fs_ro;
	int fs_aborted; /* a journal or shared-structure write failed (fs_error) */
	pthread_mutex_t fs_err_lock; /* a leaf: fs_err once the mount is up */
	char fs_err[320];
	struct hb_writer *fs_hb; /* this node's heartbeat (hb.c), or NULL */

	pthread_mutex_t fs_lock;
	struct shoal_bcache fs_bc;  /* fs_lock */
	struct shoal_journal fs_j;  /* fs_lock */
	struct dx_index fs_dx;      /* fs_lock */
	struct shoal_rgd *fs_rgds;  /* fs_lock */
	uint32_t fs_rgcount;
	uint32_t fs_rg_alloc;       /* fs_lock: group to allocate from next */
	struct shoal_inode **fs_ihash; /* fs_lock */
	uint32_t fs_ihmask;
	uint64_t fs_icount;

	pthread_t fs_commit_thread;
	pthread_cond_t fs_commit_cond;
	int fs_stopping;
	int fs_commit_started;
	pthread_t fs_orphan_thread;   /* cluster: frees queued orphans */
	pthread_cond_t fs_orphan_cond;
	int fs_orphan_started;

	struct shoal_counters fs_ctr; /* fs_lock (read without it: racy is fine) */
	struct gl_table *fs_gl;       /* glock cache (glock.c, its own mutex) */
	struct gl_tracer *fs_tr;      /* glock trace subscribers (gltrace.c, own mutex) */
	const struct lm_ops *fs_lm;   /* lock module */
	int fs_cluster;               /* several nodes may mount (lm_cluster) */
	uint32_t fs_jid;              /* this node's journal */
	void *fs_lm_priv;             /* the lock module's connection */
	struct glock *fs_jgl;         /* this node's journal glock, held EX */
	uint64_t *fs_orphans;         /* fs_lock: unlinked inodes to free later */
	uint32_t fs_norphans, fs_orphans_cap;
	uint64_t fs_statfs_ns;        /* statfs: when other groups were last read */

	/* Damaged metadata seen by this mount (fs_corrupt), protected by
	 * fs_dmg_lock (a leaf lock: taken under anything, nothing under it) */
	pthread_mutex_t fs_dmg_lock;
	int fs_dmg_needs_fsck;        /* a block failed its checks: run fsck */
	uint64_t fs_dmg_blk;          /* the first damaged block, and its inode */
	uint64_t fs_dmg_ino;          /* (0: not known) */
	uint64_t fs_dmg_logged[64];   /* blocks already logged (the first 64) */
	uint32_t fs_dmg_nlogged;
};

struct gl_ops;
const struct gl_ops *glops_for(uint32_t type);

/*
 * Slot of v in a table of mask + 1 = 2^k slots: Fibonacci hashing, the top
 * k bits of v times 2^64/phi.  (The middle bits, taken before, put runs of
 * consecutive block numbers into a tenth of the slots.)
 */
static inline uint32_t fib_slot(uint64_t v, uint32_t mask)
{
	return (uint32_t)((v * 0x9e3779b97f4a7c15ull) >> (64 - __builtin_popcount(mask))) & mask;
}

static inline struct shoal_dinode *ip_di(struct shoal_inode *ip)
{
	return (struct shoal_dinode *)ip->i_bh->b_data;
}

/*
 * A metadata block failed its checks: count it, mark the filesystem as
 * needing fsck (shoal_damage, the journal head's SHOAL_JH_DAMAGED) and log
 * it once per block, naming the block and, when known, the inode that
 * reached it (ino 0: not known).  Returns -EUCLEAN; what a user sees of it
 * is EIO (FORMAT.md "Damage").
 */
int fs_corrupt_ino(struct shoal_fs *fs, uint64_t blkno, uint64_t ino, const char *what);
static inline int fs_corrupt(struct shoal_fs *fs, uint64_t blkno, const char *what)
{
	return fs_corrupt_ino(fs, blkno, 0, what);
}
/* Replay the journal of a dead node (worker thread; takes its locks). */
int fs_recover_journal(struct shoal_fs *fs, uint32_t jid);
/* Turn the mount read-only after a shared structure failed. */
void fs_error(struct shoal_fs *fs, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* buf.c */
int bc_init(struct shoal_fs *fs);
void bc_destroy(struct shoal_fs *fs);
/* Read (and check) a metadata block of the given type; type 0 = no check. */
int buf_read(struct shoal_fs *fs, uint64_t blkno, uint16_t type, struct shoal_buf **out);
/* A block about to be filled from scratch: zeroed, not read. */
int buf_new(struct shoal_fs *fs, uint64_t blkno, struct shoal_buf **out);
void buf_put(struct shoal_fs *fs, struct shoal_buf *b);
/* buf_read for a block owned by a glock: a cached copy read under an older
 * generation of that glock is read again (another node may have changed it). */
int buf_read_gen(struct shoal_fs *fs, uint64_t gen, uint64_t blkno, uint16_t type,
		 struct shoal_buf **out);
/* buf_read_gen of a block owned by ip, under ip's glock: a damaged block
 * is reported with ip's number. */
int buf_read_ip(struct shoal_fs *fs, struct shoal_inode *ip, uint64_t blkno, uint16_t type,
		struct shoal_buf **out);
/* Drop a cached block that was freed (no longer metadata). */
void buf_forget(struct shoal_fs *fs, uint64_t blkno);
void buf_shrink(struct shoal_fs *fs);

/* journal.c */
int jnl_load(struct shoal_fs *fs, uint32_t index);
/* Replay journal index (ours at mount, another node's in recovery). */
int jnl_recover(struct shoal_fs *fs, uint32_t index, uint32_t *replayed);
/* Reserve room for an operation that will dirty up to nblocks. */
int trans_begin(struct shoal_fs *fs, uint32_t nblocks);
/* Same, for an operation that may also allocate up to nalloc blocks. */
int trans_begin_alloc(struct shoal_fs *fs, uint32_t nblocks, uint64_t nalloc);
uint32_t trans_rg_blocks(struct shoal_fs *fs);
/* Add a buffer to the running transaction before changing it. */
void trans_add(struct shoal_fs *fs, struct shoal_buf *b);
int jnl_commit(struct shoal_fs *fs);
/* Make everything the running transaction holds durable (fsync): nothing
 * if it is already, one fast-commit block and one flush when it holds only
 * dinodes (journal.c (6)), else a commit. */
int jnl_sync(struct shoal_fs *fs);
/* fs_lock held: wait for the write-behind queue; a queued write that
 * failed stops the mount (fs_error: a cluster node withdraws) and is
 * returned, so nothing is logged, replayed or given back on top of it. */
int jnl_wb_check(struct shoal_fs *fs);
int jnl_checkpoint(struct shoal_fs *fs);
/* Write home (and flush) the logged, committed buffers of one metadata
 * type, leaving them pinned and the log as it is: a cluster's resource
 * group headers, for other nodes' statfs.  Nothing if a transaction runs. */
int jnl_write_home_type(struct shoal_fs *fs, uint16_t type);
int jnl_mark_clean(struct shoal_fs *fs, int clean);
void jnl_release(struct shoal_fs *fs);
/* Is a change made in transaction seq as change number mod durable?
 * (committed, or covered by a fast commit) */
int jnl_durable(struct shoal_fs *fs, uint64_t seq, uint64_t mod);

/* Write n blocks sorted by address, runs of adjacent ones in one write
 * each; item() gives block i's bytes and address, or NULL to skip it. */
int jnl_write_sorted(struct shoal_fs *fs, uint32_t n,
		     const uint8_t *(*item)(void *arg, uint32_t i, uint64_t *blkno), void *arg);

/* dindex.c: the dirty-block index (its invariants at the top of the file) */
int dx_init(struct shoal_fs *fs, int on);
void dx_destroy(struct shoal_fs *fs);
void dx_drop_all(struct shoal_fs *fs);
struct dx_entry *dx_find(struct shoal_fs *fs, uint64_t blkno);
/* len bytes at byte inblk of block blkno go to its entry (made if needed) */
int dx_write(struct shoal_fs *fs, uint64_t blkno, uint32_t inblk, const void *src, size_t len);
int dx_write_new(struct shoal_fs *fs, uint64_t blkno, uint32_t inblk, const void *src, size_t len);
/* After a device write of [devoff, +len): entries in it take the bytes,
 * from mem, or read back from the device when mem is NULL. */
int dx_absorb(struct shoal_fs *fs, uint64_t devoff, size_t len, const void *mem);
/* Blocks blkno..blkno+n-1 were freed: their entries go, unwritten. */
void dx_forget(struct shoal_fs *fs, uint64_t blkno, uint64_t n);
/* Write every entry home (not flushed) and empty the index. */
int dx_writeback(struct shoal_fs *fs);
/* A fast commit logged every entry's changed granules. */
void dx_logged(struct shoal_fs *fs);

/* rgrp.c */
int rg_load(struct shoal_fs *fs);
void rg_destroy(struct shoal_fs *fs);
/* Allocate n (1..) contiguous-if-possible blocks near goal; *got <= n. */
int rg_alloc(struct shoal_fs *fs, uint64_t goal, uint32_t n, int state, uint64_t *first,
	     uint32_t *got);
int rg_free(struct shoal_fs *fs, uint64_t blkno, uint32_t n);
int rg_set_state(struct shoal_fs *fs, uint64_t blkno, int state);
int rg_get_state(struct shoal_fs *fs, uint64_t blkno, int *state);
/* Blocks freed in committed transactions become reusable after checkpoint. */
void rg_release_pending(struct shoal_fs *fs);
uint64_t rg_free_total(struct shoal_fs *fs);
/* Cluster: hold groups with room for nalloc blocks (0 / -ERESTART / -errno). */
int rg_reserve(struct shoal_fs *fs, uint64_t nalloc);
/* Cluster: hold every group EX (before freeing blocks anywhere). */
int rg_hold_all(struct shoal_fs *fs);
/* A set of groups (a bitmap of fs_rgcount bits; free() it), and the group
 * of blkno added to it. */
uint8_t *rg_set_new(struct shoal_fs *fs);
void rg_set_add(struct shoal_fs *fs, uint8_t *set, uint64_t blkno);
/* Cluster: want: hold every group of set EX (0 / -ERESTART / -errno);
 * else 1 if this node holds them all now, 0 if not. */
int rg_hold_set(struct shoal_fs *fs, const uint8_t *set, int want);
/* Cluster: does this node hold the group of blkno / every group EX now? */
int rg_held_of(struct shoal_fs *fs, uint64_t blkno);
int rg_all_held(struct shoal_fs *fs);
/* Cluster: hold the group of blkno EX. */
int rg_hold_of(struct shoal_fs *fs, uint64_t blkno);
/* The block rg_alloc(goal, 1, DINODE) would return, without taking it. */
int rg_peek(struct shoal_fs *fs, uint64_t goal, uint64_t *blk);
/* Up to n free blocks after blk in blk's group, in order, found within
 * 64 * n blocks: what rg_peek is likely to give next (a guess); how many. */
uint32_t rg_peek_after(struct shoal_fs *fs, uint64_t blk, uint32_t n, uint64_t *out);
/* Free blocks of the whole filesystem for statfs (other nodes' groups read
 * from disk at most once a second). */
uint64_t rg_statfs_free(struct shoal_fs *fs);
uint64_t rg_pending_total(struct shoal_fs *fs);
/* Free UNLINKED dinodes nobody has open (mount time). */
int rg_reap_unlinked(struct shoal_fs *fs, uint32_t *reaped);

/* inode.c */
int inode_get(struct shoal_fs *fs, uint64_t ino, struct shoal_inode **out);
void inode_put(struct shoal_fs *fs, struct shoal_inode *ip);
/* Set ip->i_nlookup (fs_lock) and its mirror in the inode glock, gl_krefs. */
void inode_lookups(struct shoal_inode *ip, uint64_t n);
/* The generation of ino if this thread's last inode_stat, in its last
 * operation, was of it; ino 0 forgets (an operation begins). */
int inode_stat_generation(uint64_t ino, uint64_t *gen);
/* The in-memory inode, referenced, or NULL: never reads the disk. */
struct shoal_inode *inode_find(struct shoal_fs *fs, uint64_t ino);
/* want: the dinode block (from rg_peek, its glock held EX), 0: any */
int inode_alloc(struct shoal_fs *fs, struct shoal_inode *dir, uint64_t want, mode_t mode,
		uid_t uid, gid_t gid, struct shoal_inode **out);
/* The generation an inode's metadata buffers must carry (cluster). */
uint64_t inode_gen(struct shoal_fs *fs, struct shoal_inode *ip);

/* No more writes: read-only and aborted, fs_err says why (unless it
 * already said something); takes only fs_err_lock (fs_error also
 * withdraws from the cluster). */
void fs_stop(struct shoal_fs *fs, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Read-only (mount option, read-only device, or fs_error / self-fencing). */
static inline int fs_is_ro(struct shoal_fs *fs)
{
	return __atomic_load_n(&fs->fs_ro, __ATOMIC_RELAXED);
}
/* Cluster: free ino later, if it is still UNLINKED and nobody uses it. */
void inode_queue_orphan(struct shoal_fs *fs, uint64_t ino);
/* Free the unlinked inodes queued while their groups were elsewhere. */
void inode_free_orphans(struct shoal_fs *fs);
void inode_dirty(struct shoal_fs *fs, struct shoal_inode *ip, int dsync);
void inode_stat(struct shoal_fs *fs, struct shoal_inode *ip, struct stat *st);
void inode_touch(struct shoal_inode *ip, int atime, int mtime, int ctime);
/* The atime stat shows: the dinode's, or a newer one kept in memory. */
struct shoal_ts inode_atime(struct shoal_inode *ip);
/* Keep a read's atime update (now) in memory: the glock is only SH. */
void inode_atime_defer(struct shoal_fs *fs, struct shoal_inode *ip);
/* Forget a kept atime update, counting it as dropped. */
void inode_atime_drop(struct shoal_fs *fs, struct shoal_inode *ip);
/* Free the inode's blocks and the dinode (nlink 0, unused). */
int inode_destroy(struct shoal_fs *fs, struct shoal_inode *ip);
/* Called when nlink, nlookup or i_open may have reached zero. */
int inode_maybe_free(struct shoal_fs *fs, struct shoal_inode *ip);
int inode_check(struct shoal_fs *fs, struct shoal_buf *b);

/* super.c: of free blocks, what one file can hold as data (statfs) */
uint64_t fs_usable_blocks(struct shoal_fs *fs, uint64_t free);

/* bmap.c */
/* Map logical block lblk: *pblk 0 for a hole; *run = contiguous blocks. */
int bmap_get(struct shoal_fs *fs, struct shoal_inode *ip, uint64_t lblk, uint64_t *pblk,
	     uint32_t *run);
/* Map, allocating data blocks for holes; *isnew set if newly allocated. */
int bmap_alloc(struct shoal_fs *fs, struct shoal_inode *ip, uint64_t lblk, uint32_t want,
	       uint64_t *pblk, uint32_t *run, int *isnew);
/* Free every block at logical >= lblk (and holes in [punch_start, punch_end) */
int bmap_truncate(struct shoal_fs *fs, struct shoal_inode *ip, uint64_t lblk);
int bmap_punch(struct shoal_fs *fs, struct shoal_inode *ip, uint64_t lstart, uint64_t lend);
/* Add to set the groups that freeing logical blocks [from, to) of ip may
 * touch (data and indirect blocks; read only). */
int bmap_free_rgs(struct shoal_fs *fs, struct shoal_inode *ip, uint64_t from, uint64_t to,
		  uint8_t *set);
/* Cluster: hold EX exactly those groups (0 / -ERESTART / -errno): freeing
 * asks only the nodes that hold them, in the global order of op_wait. */
int bmap_hold_free_rgs(struct shoal_fs *fs, struct shoal_inode *ip, uint64_t from, uint64_t to);
/* Move the data block at logical block from to logical block to, a hole
 * (nothing if from is a hole), inside the running transaction: the block
 * stays where it is on the device; to's indirect blocks are made as
 * needed, from's may be left empty (bmap_punch of the range frees them). */
int bmap_move(struct shoal_fs *fs, struct shoal_inode *ip, uint64_t from, uint64_t to);
/* Move inline data into a first data block. */
int bmap_unstuff(struct shoal_fs *fs, struct shoal_inode *ip);
/* Next logical block >= lblk that is mapped (data) or a hole; -ENXIO none */
int bmap_seek(struct shoal_fs *fs, struct shoal_inode *ip, uint64_t lblk, int data,
	      uint64_t *out);
uint64_t bmap_max_blocks(struct shoal_fs *fs, uint32_t height);

/* file.c */
ssize_t file_read(struct shoal_fs *fs, struct shoal_inode *ip, void *buf, size_t size,
		  uint64_t off);
ssize_t file_write(struct shoal_fs *fs, struct shoal_inode *ip, const void *buf, size_t size,
		   uint64_t off);
int file_truncate(struct shoal_fs *fs, struct shoal_inode *ip, uint64_t size);
uint64_t file_max_bytes(struct shoal_fs *fs);
/* The pieces holding [off, off+size) (clamped to the file): *pvp malloc'd;
 * a piece in memory other than zeros (file_is_zeros) is valid only while
 * fs_lock is held (inline data, a block of the dirty-block index). */
int file_is_zeros(const void *mem);
int file_map(struct shoal_fs *fs, struct shoal_inode *ip, size_t size, uint64_t off,
	     struct shoal_piece **pvp, unsigned *np, size_t *total);
ssize_t file_write_fn(struct shoal_fs *fs, struct shoal_inode *ip, shoal_write_fn fn, void *arg,
		      size_t size, uint64_t off);

/* dir.c */
int dir_lookup(struct shoal_fs *fs, struct shoal_inode *dp, const char *name, uint64_t *ino,
	       uint8_t *type);
int dir_add(struct shoal_fs *fs, struct shoal_inode *dp, const char *name, uint64_t ino,
	    uint8_t type);
int dir_remove(struct shoal_fs *fs, struct shoal_inode *dp, const char *name);
/* Point an existing entry at another inode. */
int dir_replace(struct shoal_fs *fs, struct shoal_inode *dp, const char *name, uint64_t ino,
		uint8_t type);
typedef int (*dir_iter_fn)(void *arg, const char *name, size_t len, uint64_t ino, uint8_t type,
			   uint64_t hash);
int dir_iterate(struct shoal_fs *fs, struct shoal_inode *dp, uint64_t after, dir_iter_fn fn,
		void *arg);
void dir_init_inline(struct shoal_fs *fs, struct shoal_inode *dp);
/* Make sure name can be added without restructuring (call before the
 * operation's own trans_begin: it may commit in between steps). */
int dir_make_room(struct shoal_fs *fs, struct shoal_inode *dp, const char *name);
int dir_destroy(struct shoal_fs *fs, struct shoal_inode *dp);

/* perm.c: who is asking (shoal_caller_set) and what they may do */
const struct shoal_ctx *perm_caller(void);
int perm_is_root(void);
uid_t perm_uid(void);
int perm_in_group(gid_t gid);
/* mask: 4 read, 2 write, 1 execute/search; 0 or -EACCES (or an error
 * reading the inode's access ACL) */
int perm_check(struct shoal_fs *fs, struct shoal_inode *ip, int mask);

/* acl.c: POSIX access ACLs and the mode bits they go with */
/* The mode an access ACL sets (*mode's bits replaced): 1 if the ACL is
 * minimal (nothing to store), 0 if it must be stored, or -EINVAL. */
int acl_to_mode(const void *value, size_t size, mode_t *mode);
/* The caller (perm.c) against ip's access ACL: 0, -EACCES, 1 if ip has
 * none (the mode bits decide), or -errno.  Not for the owner or root. */
int acl_permission(struct shoal_fs *fs, struct shoal_inode *ip, int want);
/* chmod: before the transaction (holds the xattr block's group; 1 if ip
 * has an ACL, else 0, or -errno), then in it, after di_mode changed: the
 * ACL's user::, mask:: (group:: without a mask) and other:: follow. */
int acl_chmod_prepare(struct shoal_fs *fs, struct shoal_inode *ip);
int acl_chmod(struct shoal_fs *fs, struct shoal_inode *ip);
/* A new inode of *mode in dp (posix_acl_create): *mode cut by dp's
 * default ACL, or by umask without one, and the ACLs to give it, set by
 * acl_create_set in the transaction that makes it; freed by acl_new_free. */
struct acl_new {
	uint8_t *an_acc, *an_def;
	size_t an_acc_size, an_def_size;
};
int acl_create(struct shoal_fs *fs, struct shoal_inode *dp, mode_t *mode, mode_t umask,
	       struct acl_new *an);
int acl_create_set(struct shoal_fs *fs, struct shoal_inode *ip, const struct acl_new *an);
void acl_new_free(struct acl_new *an);
/* owner or root: 0 or -EPERM */
int perm_owner(struct shoal_inode *ip);
/* removing ip from dp under the sticky rule: 0 or -EPERM */
int perm_sticky(struct shoal_inode *dp, struct shoal_inode *ip);

/* ops.c: unmount of a cluster node: write the atime updates kept in memory
 * where a try-lock EX gets the glock, drop the others. */
void ops_flush_atime(struct shoal_fs *fs);

/* xattr.c */
int xattr_set(struct shoal_fs *fs, struct shoal_inode *ip, const char *name, const void *value,
	      size_t size, int flags);
ssize_t xattr_get(struct shoal_fs *fs, struct shoal_inode *ip, const char *name, void *value,
		  size_t size);
ssize_t xattr_list(struct shoal_fs *fs, struct shoal_inode *ip, char *list, size_t size);
int xattr_remove(struct shoal_fs *fs, struct shoal_inode *ip, const char *name);

#endif

/*
 * inode.c - in-memory inodes and their lifetime.
 *
 * An inode lives in memory while the kernel has looked it up (i_nlookup),
 * it is open (i_open) or an operation holds it (i_ref); it keeps its dinode
 * buffer referenced for that whole time, so ip_di() is always valid.
 *
 *   on disk, linked --unlink last link, still used--> UNLINKED (bitmap)
 *   UNLINKED --last close and forget--> freed (inode_destroy)
 *   UNLINKED --node dies--> freed by rg_reap_unlinked at the next mount
 *
 * Invariants (fs_lock):
 *  (1) at most one struct shoal_inode per inode number;
 *  (2) an inode with di_nlink == 0 is UNLINKED in its group's bitmap and is
 *      destroyed as soon as nobody uses it (inode_maybe_free);
 *  (3) a dinode read from disk passes inode_check before it is used;
 *  (4) an atime update kept in memory (i_atime_pending, the glock only SH)
 *      goes into the dinode only with a transaction (inode_dirty, under
 *      EX), and is dropped whenever the dinode is read again (another node
 *      may have changed it) or the inode leaves memory.
 */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "lock.h"
#include "meta.h"



static uint32_t ih_slot(struct shoal_fs *fs, uint64_t ino)
{
	return fib_slot(ino, fs->fs_ihmask);
}

static struct shoal_inode *ih_find(struct shoal_fs *fs, uint64_t ino)
{
	struct shoal_inode *ip = fs->fs_ihash[ih_slot(fs, ino)];
	while (ip && ip->i_ino != ino)
		ip = ip->i_hnext;
	return ip;
}

static void ih_del(struct shoal_fs *fs, struct shoal_inode *ip)
{
	struct shoal_inode **pp = &fs->fs_ihash[ih_slot(fs, ip->i_ino)];
	while (*pp && *pp != ip)
		pp = &(*pp)->i_hnext;
	if (*pp)
		*pp = ip->i_hnext;
	fs->fs_icount--;
}

static void ih_add(struct shoal_fs *fs, struct shoal_inode *ip)
{
	uint32_t s = ih_slot(fs, ip->i_ino);
	ip->i_hnext = fs->fs_ihash[s];
	fs->fs_ihash[s] = ip;
	fs->fs_icount++;
}

int inode_check(struct shoal_fs *fs, struct shoal_buf *b)
{
	struct shoal_dinode *di = (void *)b->b_data;
	uint32_t pay = SHOAL_DI_PAYLOAD(fs->fs_bsize);
	mode_t t = di->di_mode & S_IFMT;

	if (t != S_IFREG && t != S_IFDIR && t != S_IFLNK && t != S_IFCHR && t != S_IFBLK &&
	    t != S_IFIFO && t != S_IFSOCK)
		return fs_corrupt(fs, b->b_blkno, "inode has an invalid mode");
	if (di->di_height > SHOAL_MAX_HEIGHT || di->di_depth > SHOAL_MAX_DEPTH)
		return fs_corrupt(fs, b->b_blkno, "inode height or depth out of range");
	if (t == S_IFDIR && !(di->di_flags & SHOAL_DIF_EXHASH)) {
		struct shoal_inline_dir *id = (void *)(b->b_data + SHOAL_DI_PAYLOAD_OFF);
		if (di->di_height != 0 || id->id_used > pay - sizeof(*id))
			return fs_corrupt(fs, b->b_blkno, "inline directory overflows its inode");
	}
	/* di_size may exceed what the payload or map covers: the rest is a
	 * hole (an extending truncate only sets the size, R3) */
	/* no file offset (a signed off_t) reaches a byte at 2^63 or more */
	if ((t == S_IFREG || t == S_IFLNK) && di->di_size > (uint64_t)INT64_MAX)
		return fs_corrupt(fs, b->b_blkno, "inode size is 2^63 or more");
	if (di->di_blocks > fs->fs_sb.sb_blocks)
		return fs_corrupt(fs, b->b_blkno, "inode block count out of range");
	return 0;
}

uint64_t inode_gen(struct shoal_fs *fs, struct shoal_inode *ip)
{
	return ip->i_gl ? __atomic_load_n(&ip->i_gl->gl_gen, __ATOMIC_RELAXED) : 0;
}

/* Cluster: the dinode was read under an older grant of its glock. */
static int inode_refresh(struct shoal_fs *fs, struct shoal_inode *ip)
{
	uint64_t gen = inode_gen(fs, ip);
	struct shoal_buf *b;
	int err;

	if (ip->i_gen == gen)
		return 0;
	inode_atime_drop(fs, ip); /* (4) */
	err = buf_read_gen(fs, gen, ip->i_ino, SHOAL_MT_DINODE, &b);
	if (err)
		return err;
	buf_put(fs, b); /* the same buffer as i_bh, re-read in place */
	if (inode_check(fs, b))
		return -EIO;
	ip->i_gen = gen;
	return 0;
}

struct shoal_inode *inode_find(struct shoal_fs *fs, uint64_t ino)
{
	struct shoal_inode *ip = ih_find(fs, ino);
	if (ip)
		ip->i_ref++;
	return ip;
}

int inode_get(struct shoal_fs *fs, uint64_t ino, struct shoal_inode **out)
{
	struct shoal_inode *ip = ih_find(fs, ino);
	struct shoal_buf *b;
	int err;

	struct glock *gl = NULL;

	if (ip) {
		if (ip->i_freed)
			return -ESTALE;
		if (fs->fs_cluster) {
			err = inode_refresh(fs, ip);
			if (err)
				return err;
		}
		ip->i_ref++;
		*out = ip;
		return 0;
	}
	if (ino < fs->fs_sb.sb_rgfirst || ino >= fs->fs_sb.sb_blocks - 1)
		return -ESTALE;
	gl = gl_get(fs, GL_INODE, ino);
	if (!gl)
		return -ENOMEM;
	uint64_t gen = __atomic_load_n(&gl->gl_gen, __ATOMIC_RELAXED);
	err = buf_read_gen(fs, gen, ino, SHOAL_MT_DINODE, &b);
	if (err)
		return err;
	err = inode_check(fs, b);
	if (err) {
		buf_put(fs, b);
		return -EIO;
	}
	ip = calloc(1, sizeof(*ip));
	if (!ip) {
		buf_put(fs, b);
		return -ENOMEM;
	}
	pthread_rwlock_init(&ip->i_iolock, NULL);
	ip->i_ino = ino;
	ip->i_bh = b;
	ip->i_ref = 1;
	ip->i_gl = gl;
	ip->i_gen = gen;
	/*
	 * What an evicted inode knew is gone: assume the worst, so that fsync
	 * still commits its dinode if the running transaction holds it, and
	 * flushes data it may have written since the last flush.
	 */
	if (b->b_flags & BUF_DIRTY)
		ip->i_meta_seq = ip->i_dsync_seq = fs->fs_j.j_seq;
	ip->i_meta_mod = ip->i_dsync_mod = fs->fs_j.j_mod; /* at the latest now */
	ip->i_data_gen = __atomic_load_n(&fs->fs_dev->d_write_gen, __ATOMIC_SEQ_CST);
	ih_add(fs, ip);
	*out = ip;
	return 0;
}

/*
 * The groups freeing ip touches: its dinode's, its xattr block's, and
 * those of the blocks of its block map (bmap_free_rgs); for a hashed
 * directory every group (its leaves may be anywhere).  want: ask for them
 * (0 / -ERESTART / -errno); else 1 if this node holds them all now, 0 if
 * not (or they cannot be known).
 */
static int inode_rgs_held(struct shoal_fs *fs, struct shoal_inode *ip, int want)
{
	struct shoal_dinode *di = ip_di(ip);
	uint8_t *set;
	int err;

	if (!fs->fs_cluster)
		return want ? 0 : 1;
	if (di->di_flags & SHOAL_DIF_EXHASH)
		return want ? rg_hold_all(fs) : rg_all_held(fs);
	set = rg_set_new(fs);
	if (!set)
		return want ? -ENOMEM : 0;
	rg_set_add(fs, set, ip->i_ino);
	if (di->di_xattr)
		rg_set_add(fs, set, di->di_xattr);
	err = bmap_free_rgs(fs, ip, 0, UINT64_MAX, set);
	if (!err)
		err = rg_hold_set(fs, set, want);
	else if (!want)
		err = 0;
	free(set);
	return err;
}

void inode_queue_orphan(struct shoal_fs *fs, uint64_t ino)
{
	for (uint32_t i = 0; i < fs->fs_norphans; i++)
		if (fs->fs_orphans[i] == ino)
			return;
	if (fs->fs_norphans == fs->fs_orphans_cap) {
		uint32_t cap = fs->fs_orphans_cap ? fs->fs_orphans_cap * 2 : 64;
		uint64_t *n = realloc(fs->fs_orphans, cap * sizeof(*n));
		if (!n)
			return; /* freed at the next mount */
		fs->fs_orphans = n;
		fs->fs_orphans_cap = cap;
	}
	fs->fs_orphans[fs->fs_norphans++] = ino;
	pthread_cond_signal(&fs->fs_orphan_cond);
}

/*
 * Cluster: the last user on this node let go of an unlinked inode.  Free it
 * if no other node has it open (iopen held EX since this node made it, or
 * an iopen try-lock EX) and this node holds what
 * freeing needs (its glock and every group); otherwise the commit thread
 * frees it later (inode_free_orphans), or the last node using it does.
 */
static void inode_free_cluster(struct shoal_fs *fs, struct shoal_inode *ip)
{
	struct glock *io = gl_get(fs, GL_IOPEN, ip->i_ino), *g;
	/* the dinode (links, block map) as of the glock held now */
	int have = gl_have(fs, GL_INODE, ip->i_ino, GL_EX) && inode_refresh(fs, ip) == 0;

	if (have && ip_di(ip)->di_nlink)
		return; /* linked again by another node meanwhile */
	if (!have || !io || !inode_rgs_held(fs, ip, 0)) {
		inode_queue_orphan(fs, ip->i_ino);
		return;
	}
	if (gl_have(fs, GL_IOPEN, ip->i_ino, GL_EX)) {
		/* ours EX since it was made: no other node ever used it */
		inode_destroy(fs, ip);
		return;
	}
	gl_release(fs, io); /* our SH, if we had it: no up-conversion */
	/* the callback tells a node that still uses it to free it when it
	 * lets go (glops.c iopen_demote_to) */
	if (gl_acquire(fs, GL_IOPEN, ip->i_ino, GL_EX, GL_TRY | GL_TRY_1CB, &g))
		return; /* in use on another node: that node frees it */
	inode_destroy(fs, ip);
	gl_put(fs, g);
}

static void inode_evict(struct shoal_fs *fs, struct shoal_inode *ip)
{
	if (fs->fs_cluster && !ip->i_freed) {
		/* no longer in use here: another node may free it now.  (One
		 * this node freed keeps its iopen glock cached, EX: whoever
		 * makes an inode there next asks for it, perhaps this node) */
		struct glock *io = gl_get(fs, GL_IOPEN, ip->i_ino);
		if (io)
			gl_release(fs, io);
	}
	if (!ip->i_freed)
		ih_del(fs, ip);
	inode_atime_drop(fs, ip); /* (4) */
	buf_put(fs, ip->i_bh);
	pthread_rwlock_destroy(&ip->i_iolock);
	free(ip);
}

void inode_lookups(struct shoal_inode *ip, uint64_t n)
{
	ip->i_nlookup = n;
	if (ip->i_gl) {
		__atomic_store_n(&ip->i_gl->gl_kdir, S_ISDIR(ip_di(ip)->di_mode), __ATOMIC_RELAXED);
		__atomic_store_n(&ip->i_gl->gl_krefs, n, __ATOMIC_RELEASE);
	}
}

void inode_put(struct shoal_fs *fs, struct shoal_inode *ip)
{
	if (!ip)
		return;
	if (--ip->i_ref == 0 && ip->i_nlookup == 0 && ip->i_open == 0) {
		if (!ip->i_freed && ip_di(ip)->di_nlink == 0 && !fs_is_ro(fs)) {
			ip->i_ref++;
			if (fs->fs_cluster)
				inode_free_cluster(fs, ip);
			else
				inode_destroy(fs, ip);
			ip->i_ref--;
		}
		inode_evict(fs, ip);
	}
}

/* Increasing across every mount of this process (atomic: several
 * filesystems may allocate inodes at once). */
static uint64_t next_generation(void)
{
	static uint64_t last;
	struct timespec ts;
	uint64_t g, old;

	clock_gettime(CLOCK_REALTIME, &ts);
	g = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	old = __atomic_load_n(&last, __ATOMIC_RELAXED);
	do {
		if (g <= old)
			g = old + 1;
	} while (!__atomic_compare_exchange_n(&last, &old, g, 0, __ATOMIC_RELAXED,
					      __ATOMIC_RELAXED));
	return g;
}

void inode_touch(struct shoal_inode *ip, int atime, int mtime, int ctime)
{
	struct shoal_dinode *di = ip_di(ip);
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	struct shoal_ts t = {.ts_sec = ts.tv_sec, .ts_nsec = (uint32_t)ts.tv_nsec};
	if (atime)
		di->di_atime = t;
	if (mtime)
		di->di_mtime = t;
	if (ctime)
		di->di_ctime = t;
}

int inode_alloc(struct shoal_fs *fs, struct shoal_inode *dir, uint64_t want, mode_t mode,
		uid_t uid, gid_t gid, struct shoal_inode **out)
{
	struct shoal_inode *ip;
	struct shoal_dinode *di;
	struct shoal_buf *b;
	uint64_t blk;
	uint32_t got;
	int err;

	err = rg_alloc(fs, want ? want : dir ? dir->i_ino : 0, 1, SHOAL_B_DINODE, &blk, &got);
	if (err)
		return err;
	if (want && blk != want) {
		/* the block rg_peek chose (and whose glock we hold) was taken */
		rg_free(fs, blk, 1);
		return -EAGAIN;
	}
	err = buf_new(fs, blk, &b);
	if (err)
		goto out_free;
	ip = calloc(1, sizeof(*ip));
	if (!ip) {
		buf_put(fs, b);
		err = -ENOMEM;
		goto out_free;
	}
	pthread_rwlock_init(&ip->i_iolock, NULL);
	meta_seal(b->b_data, fs->fs_bsize, SHOAL_MT_DINODE, blk, 0);
	trans_add(fs, b);
	di = (void *)b->b_data;
	di->di_mode = mode;
	di->di_uid = uid;
	di->di_gid = gid;
	di->di_nlink = S_ISDIR(mode) ? 2 : 1;
	di->di_blocks = 1;
	di->di_generation = next_generation();
	di->di_goal = blk;
	ip->i_ino = blk;
	ip->i_bh = b;
	ip->i_ref = 1;
	ip->i_gl = gl_get(fs, GL_INODE, blk);
	ip->i_gen = inode_gen(fs, ip);
	b->b_gen = ip->i_gen;
	ip->i_meta_seq = ip->i_dsync_seq = fs->fs_j.j_seq;
	ip->i_meta_mod = ip->i_dsync_mod = fs->fs_j.j_mod;
	inode_touch(ip, 1, 1, 1);
	di->di_crtime = di->di_mtime;
	ih_add(fs, ip);
	*out = ip;
	return 0;
out_free:
	rg_free(fs, blk, 1);
	return err;
}

static int ts_after(struct shoal_ts a, struct shoal_ts b)
{
	return a.ts_sec > b.ts_sec || (a.ts_sec == b.ts_sec && a.ts_nsec > b.ts_nsec);
}

struct shoal_ts inode_atime(struct shoal_inode *ip)
{
	struct shoal_ts a = ip_di(ip)->di_atime;
	return ip->i_atime_pending && ts_after(ip->i_atime_pend, a) ? ip->i_atime_pend : a;
}

void inode_atime_defer(struct shoal_fs *fs, struct shoal_inode *ip)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ip->i_atime_pend = (struct shoal_ts){.ts_sec = ts.tv_sec, .ts_nsec = (uint32_t)ts.tv_nsec};
	ip->i_atime_pending = 1;
	fs->fs_ctr.sc_atime_deferred++;
}

void inode_atime_drop(struct shoal_fs *fs, struct shoal_inode *ip)
{
	if (!ip->i_atime_pending)
		return;
	ip->i_atime_pending = 0;
	fs->fs_ctr.sc_atime_dropped++;
}

void inode_dirty(struct shoal_fs *fs, struct shoal_inode *ip, int dsync)
{
	/* never a dinode read under an older grant of its glock: that copy
	 * may be older than what another node wrote home since (a single
	 * node's copies are never old: it does not re-read them, inode_get) */
	assert(!fs->fs_cluster || ip->i_gen == inode_gen(fs, ip));
	trans_add(fs, ip->i_bh);
	if (ip->i_atime_pending) {
		/* the kept atime goes with this change (4); a change that sets
		 * atime itself (setattr) does so after this */
		if (ts_after(ip->i_atime_pend, ip_di(ip)->di_atime))
			ip_di(ip)->di_atime = ip->i_atime_pend;
		ip->i_atime_pending = 0;
		fs->fs_ctr.sc_atime_written++;
	}
	ip->i_meta_seq = fs->fs_j.j_seq;
	ip->i_meta_mod = fs->fs_j.j_mod;
	if (dsync) {
		ip->i_dsync_seq = fs->fs_j.j_seq;
		ip->i_dsync_mod = fs->fs_j.j_mod;
	}
}

/* The inode and generation of this thread's last inode_stat
 * (shoal_generation). */
static __thread uint64_t stat_ino, stat_gen;

int inode_stat_generation(uint64_t ino, uint64_t *gen)
{
	if (!ino) {
		stat_ino = 0; /* an operation begins: what it stats counts */
		return 0;
	}
	if (stat_ino != ino)
		return 0;
	*gen = stat_gen;
	return 1;
}

void inode_stat(struct shoal_fs *fs, struct shoal_inode *ip, struct stat *st)
{
	struct shoal_dinode *di = ip_di(ip);

	stat_ino = ip->i_ino;
	stat_gen = di->di_generation;

	memset(st, 0, sizeof(*st));
	st->st_ino = ip->i_ino;
	st->st_mode = di->di_mode;
	st->st_nlink = di->di_nlink;
	st->st_uid = di->di_uid;
	st->st_gid = di->di_gid;
	st->st_rdev = (dev_t)di->di_rdev;
	st->st_size = (off_t)di->di_size;
	if (S_ISDIR(di->di_mode)) /* like ext4: the blocks the directory uses */
		st->st_size = (off_t)((di->di_blocks > 1 ? di->di_blocks - 1 : 1) << fs->fs_bshift);
	st->st_blksize = fs->fs_bsize;
	st->st_blocks = (blkcnt_t)(di->di_blocks << (fs->fs_bshift - 9));
	st->st_atim.tv_sec = inode_atime(ip).ts_sec;
	st->st_atim.tv_nsec = inode_atime(ip).ts_nsec;
	st->st_mtim.tv_sec = di->di_mtime.ts_sec;
	st->st_mtim.tv_nsec = di->di_mtime.ts_nsec;
	st->st_ctim.tv_sec = di->di_ctime.ts_sec;
	st->st_ctim.tv_nsec = di->di_ctime.ts_nsec;
}

int inode_destroy(struct shoal_fs *fs, struct shoal_inode *ip)
{
	struct shoal_dinode *di = ip_di(ip);
	int err;

	if (ip->i_freed)
		return 0;
	err = trans_begin(fs, trans_rg_blocks(fs) + SHOAL_MAX_HEIGHT + 4);
	if (err)
		return err;
	if (S_ISDIR(di->di_mode)) {
		err = dir_destroy(fs, ip);
		if (err)
			return err;
	}
	if (di->di_height) {
		err = bmap_truncate(fs, ip, 0);
		if (err)
			return err;
	}
	if (di->di_xattr) {
		err = rg_free(fs, di->di_xattr, 1);
		if (err)
			return err;
	}
	err = rg_free(fs, ip->i_ino, 1);
	if (err)
		return err;
	ip->i_freed = 1;
	ih_del(fs, ip);
	return 0;
}

int inode_maybe_free(struct shoal_fs *fs, struct shoal_inode *ip)
{
	if (ip->i_freed || ip_di(ip)->di_nlink || ip->i_open || ip->i_nlookup)
		return 0;
	return inode_destroy(fs, ip);
}

/* One queued orphan, inside an operation: 0, -ERESTART or -errno. */
static int orphan_free_one(struct shoal_fs *fs, uint64_t ino)
{
	struct shoal_inode *ip;
	struct glock *g;
	int state, err = gl_hold(fs, GL_INODE, ino, GL_EX);

	if (!err)
		err = rg_hold_of(fs, ino);
	if (!err)
		err = rg_get_state(fs, ino, &state);
	if (err)
		return err == -EINVAL ? 0 : err;
	if (state != SHOAL_B_UNLINKED)
		return 0; /* freed by another node meanwhile, or linked again */
	ip = inode_find(fs, ino);
	if (ip) {
		int busy = ip->i_ref > 1 || ip->i_nlookup || ip->i_open;
		ip->i_ref--; /* not inode_put: it would try to free it again */
		if (busy)
			return 0; /* in use here: its last user frees it */
	}
	err = inode_get(fs, ino, &ip); /* read again if the glock moved */
	if (err)
		return err == -ESTALE ? 0 : err;
	if (ip_di(ip)->di_nlink == 0 && !ip->i_freed)
		err = inode_rgs_held(fs, ip, 1);
	if (err) {
		ip->i_ref--;
		if (ip->i_ref == 0 && ip->i_nlookup == 0 && ip->i_open == 0)
			inode_evict(fs, ip);
		return err;
	}
	if (ip_di(ip)->di_nlink == 0 && !ip->i_freed) {
		struct glock *io = gl_get(fs, GL_IOPEN, ino);
		if (io)
			gl_release(fs, io);
		if (gl_acquire(fs, GL_IOPEN, ino, GL_EX, GL_TRY | GL_TRY_1CB, &g) == 0) {
			err = inode_destroy(fs, ip);
			gl_put(fs, g);
		} /* else in use on another node: that node frees it */
	}
	ip->i_ref--;
	if (ip->i_ref == 0 && ip->i_nlookup == 0 && ip->i_open == 0)
		inode_evict(fs, ip);
	return err;
}

void inode_free_orphans(struct shoal_fs *fs)
{
	for (;;) {
		uint64_t ino;
		int err;

		pthread_mutex_lock(&fs->fs_lock);
		if (!fs->fs_norphans || fs_is_ro(fs)) {
			pthread_mutex_unlock(&fs->fs_lock);
			return;
		}
		ino = fs->fs_orphans[--fs->fs_norphans];
		pthread_mutex_unlock(&fs->fs_lock);
		op_begin(fs);
		do {
			pthread_mutex_lock(&fs->fs_lock);
			err = orphan_free_one(fs, ino);
			pthread_mutex_unlock(&fs->fs_lock);
		} while (err == -ERESTART && op_wait(fs) == 0);
		op_end(fs);
	}
}

/*
 * super.c - mounting and unmounting, the background commit thread, error
 * reporting and counters.
 *
 * Mount order: superblock (primary, else backup) -> buffer cache -> replay
 * of this node's journal -> resource groups -> root inode -> free orphans
 * left UNLINKED by a dead mount -> journal marked in use -> commit thread.
 * Unmount reverses it and leaves the journal CLEAN with nothing to replay.
 *
 * Invariants:
 *  (1) a superblock is used only after meta_check and a geometry check: no
 *      value from it indexes memory unchecked;
 *  (2) a mount that hit a journal or shared-structure write error is
 *      read-only from then on (fs_ro), and says why (fs_err); a cluster
 *      node also withdraws (fs_error): it fences its device and leaves the
 *      cluster as a dead node does, keeping every lock, so that no other
 *      node reads a block this node changed in its journal but never wrote
 *      home, until a live node has replayed that journal;
 *  (3) the commit thread commits at most mo_commit_secs after a change.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hb.h"
#include "internal.h"
#include "lock.h"
#include "meta.h"

int fs_corrupt_ino(struct shoal_fs *fs, uint64_t blkno, uint64_t ino, const char *what)
{
	int seen = 0;

	pthread_mutex_lock(&fs->fs_dmg_lock);
	fs->fs_ctr.sc_corrupt++;
	if (!fs->fs_dmg_needs_fsck) {
		fs->fs_dmg_needs_fsck = 1;
		fs->fs_dmg_blk = blkno;
		fs->fs_dmg_ino = ino;
	}
	for (uint32_t i = 0; i < fs->fs_dmg_nlogged && !seen; i++)
		seen = fs->fs_dmg_logged[i] == blkno;
	if (!seen && fs->fs_dmg_nlogged < sizeof(fs->fs_dmg_logged) / sizeof(fs->fs_dmg_logged[0]))
		fs->fs_dmg_logged[fs->fs_dmg_nlogged++] = blkno;
	/* one line per block (every use of it fails the same way); past 64
	 * blocks one per event, bounded to keep logs sane */
	if (!seen && fs->fs_ctr.sc_corrupt <= 1000) {
		if (ino)
			fprintf(stderr, "shoal: corrupt metadata at block %llu (inode %llu): %s; "
					"using it fails with EIO: run fsck.shoal\n",
				(unsigned long long)blkno, (unsigned long long)ino, what);
		else
			fprintf(stderr, "shoal: corrupt metadata at block %llu: %s; "
					"using it fails with EIO: run fsck.shoal\n",
				(unsigned long long)blkno, what);
	}
	pthread_mutex_unlock(&fs->fs_dmg_lock);
	return -EUCLEAN;
}

int shoal_damage(struct shoal_fs *fs, uint64_t *blkno, uint64_t *ino)
{
	int needs;

	pthread_mutex_lock(&fs->fs_dmg_lock);
	needs = fs->fs_dmg_needs_fsck;
	if (blkno)
		*blkno = fs->fs_dmg_blk;
	if (ino)
		*ino = fs->fs_dmg_ino;
	pthread_mutex_unlock(&fs->fs_dmg_lock);
	return needs;
}

/*
 * Under fs_err_lock: no more writes, for the reason in fmt unless one is
 * given already (fs_err is written once after the mount, so readers may
 * keep pointing at it).  1 if the filesystem was writable until now.
 */
static int fs_stop_locked(struct shoal_fs *fs, const char *fmt, va_list ap)
{
	int was_rw = !fs_is_ro(fs);

	if (!fs->fs_err[0])
		vsnprintf(fs->fs_err, sizeof(fs->fs_err), fmt, ap);
	__atomic_store_n(&fs->fs_ro, 1, __ATOMIC_RELAXED);
	__atomic_store_n(&fs->fs_aborted, 1, __ATOMIC_RELAXED);
	return was_rw;
}

void fs_stop(struct shoal_fs *fs, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&fs->fs_err_lock);
	va_start(ap, fmt);
	fs_stop_locked(fs, fmt, ap);
	va_end(ap);
	pthread_mutex_unlock(&fs->fs_err_lock);
}

void fs_error(struct shoal_fs *fs, const char *fmt, ...)
{
	va_list ap;
	int stopped;

	pthread_mutex_lock(&fs->fs_err_lock);
	if (fs_is_ro(fs)) {
		pthread_mutex_unlock(&fs->fs_err_lock);
		return;
	}
	va_start(ap, fmt);
	stopped = fs_stop_locked(fs, fmt, ap);
	va_end(ap);
	pthread_mutex_unlock(&fs->fs_err_lock);
	if (!stopped)
		return;
	fprintf(stderr, "shoal: %s: filesystem is now read-only\n", fs->fs_err);
	if (fs->fs_lm && fs->fs_lm->lm_withdraw && fs->fs_lm_priv) {
		/* (2): nothing more of this node lands, then no lock goes back:
		 * its journal is replayed by a live node after its lease */
		dev_fence(fs->fs_dev);
		fs->fs_lm->lm_withdraw(fs, fs->fs_err);
		fs->fs_ctr.sc_withdrawals++;
		fprintf(stderr, "shoal: withdrawn from the cluster: another node will recover "
				"journal %u; unmount this node\n", fs->fs_jid);
	}
}

/* Read the superblock at blkno with block size bs; 0 if valid. */
static int sb_try(struct shoal_dev *dev, uint64_t blkno, uint32_t bs, struct shoal_sb *out)
{
	uint8_t *blk = malloc(bs);
	int err;
	if (!blk)
		return -ENOMEM;
	err = dev_read(dev, blk, bs, blkno * bs);
	if (!err && meta_check(blk, bs, SHOAL_MT_SB, blkno))
		err = -EUCLEAN;
	if (!err) {
		memcpy(out, blk, sizeof(*out));
		if (out->sb_bsize != bs || meta_sb_insane(out, dev->d_size))
			err = -EUCLEAN;
	}
	free(blk);
	return err;
}

static int sb_read(struct shoal_fs *fs)
{
	struct shoal_dev *dev = fs->fs_dev;
	struct shoal_mh mh;
	uint8_t first[1024];
	int err;

	if (dev->d_size < 1024 * 8) {
		snprintf(fs->fs_err, sizeof(fs->fs_err), "device too small to hold shoal");
		return -EINVAL;
	}
	err = dev_read(dev, first, sizeof(first), 0);
	if (err)
		return err;
	memcpy(&mh, first, sizeof(mh));
	if (mh.mh_magic == SHOAL_MAGIC && mh.mh_type == SHOAL_MT_SB) {
		struct shoal_sb *s = (void *)first;
		if (s->sb_bsize >= SHOAL_MIN_BSIZE && s->sb_bsize <= SHOAL_MAX_BSIZE &&
		    !sb_try(dev, 0, s->sb_bsize, &fs->fs_sb))
			return 0;
	}
	/* primary unusable: look for the backup in the last block */
	for (uint32_t bs = SHOAL_MIN_BSIZE; bs <= SHOAL_MAX_BSIZE; bs <<= 1) {
		uint64_t nb = dev->d_size / bs;
		if (nb < 8)
			break;
		if (!sb_try(dev, nb - 1, bs, &fs->fs_sb) && fs->fs_sb.sb_blocks == nb) {
			fprintf(stderr, "shoal: primary superblock bad, using the backup at block %llu\n",
				(unsigned long long)(nb - 1));
			return 0;
		}
	}
	if (mh.mh_magic != SHOAL_MAGIC)
		snprintf(fs->fs_err, sizeof(fs->fs_err), "not a shoal filesystem (no superblock)");
	else
		snprintf(fs->fs_err, sizeof(fs->fs_err),
			 "superblock damaged and no valid backup: run fsck.shoal");
	return -EINVAL;
}

/*
 * Cluster mount, after the lock module gave us journal slot fs_jid: hold
 * our journal's lock for good, then the mount lock, under which every
 * journal whose owner is gone (its lock is free) is replayed.
 */
static int cluster_join(struct shoal_fs *fs)
{
	struct glock *gl;
	int err = gl_start(fs);

	/* lockd gave this journal to no other live node; another node that
	 * mounts right now may hold its lock for a moment to look at it */
	if (!err)
		err = gl_acquire(fs, GL_JOURNAL, fs->fs_jid, GL_EX, 0, &fs->fs_jgl);
	if (err) {
		snprintf(fs->fs_err, sizeof(fs->fs_err), "cannot lock journal %u: %s",
			 fs->fs_jid, strerror(-err));
		return err;
	}
	fs->fs_jgl->gl_flags |= GLF_STICKY;
	err = gl_acquire(fs, GL_NONDISK, GL_NONDISK_MOUNT, GL_EX, 0, &gl);
	if (err) {
		snprintf(fs->fs_err, sizeof(fs->fs_err), "cannot take the mount lock: %s",
			 strerror(-err));
		return err;
	}
	for (uint32_t j = 0; j < fs->fs_sb.sb_jcount && !fs_is_ro(fs); j++) {
		if (j == fs->fs_jid)
			continue;
		err = fs_recover_journal(fs, j);
		if (err) {
			snprintf(fs->fs_err, sizeof(fs->fs_err),
				 "journal %u of a dead node cannot be replayed: %s", j, strerror(-err));
			return err;
		}
	}
	return 0;
}

int fs_recover_journal(struct shoal_fs *fs, uint32_t jid)
{
	struct glock *gl;
	uint32_t replayed = 0;
	int err;

	if (jid == fs->fs_jid || jid >= fs->fs_sb.sb_jcount || fs_is_ro(fs))
		return 0;
	/* its owner is alive, or another node is replaying it */
	if (gl_acquire(fs, GL_JOURNAL, jid, GL_EX, GL_TRY, &gl))
		return 0;
	pthread_mutex_lock(&fs->fs_lock);
	/* a failed queued write makes reads of its range fail (dev.c (5)):
	 * this node cannot read the journal reliably; it withdraws and a
	 * live node replays both journals */
	err = jnl_wb_check(fs);
	if (!err)
		err = jnl_recover(fs, jid, &replayed);
	if (!err)
		fs->fs_ctr.sc_recoveries++; /* before lockd lets others see it */
	else
		fs->fs_ctr.sc_recovery_errors++;
	pthread_mutex_unlock(&fs->fs_lock);
	if (!err) {
		if (fs->fs_lm->lm_recovery_done)
			fs->fs_lm->lm_recovery_done(fs, jid);
		if (replayed)
			fprintf(stderr, "shoal: journal %u of a dead node: replayed %u transactions\n",
				jid, replayed);
	} else {
		fprintf(stderr, "shoal: journal %u of a dead node: replay failed: %s\n", jid,
			strerror(-err));
	}
	gl_put(fs, gl);
	gl_release(fs, gl);
	return err;
}

/* Cluster: frees the unlinked inodes queued by inode_queue_orphan; freeing
 * may wait for other nodes' locks, so it has a thread of its own. */
static void *orphan_thread(void *arg)
{
	struct shoal_fs *fs = arg;

	pthread_mutex_lock(&fs->fs_lock);
	while (!fs->fs_stopping) {
		if (!fs->fs_norphans || fs_is_ro(fs)) {
			pthread_cond_wait(&fs->fs_orphan_cond, &fs->fs_lock);
			continue;
		}
		pthread_mutex_unlock(&fs->fs_lock);
		inode_free_orphans(fs);
		pthread_mutex_lock(&fs->fs_lock);
	}
	pthread_mutex_unlock(&fs->fs_lock);
	return NULL;
}

static void *commit_thread(void *arg)
{
	struct shoal_fs *fs = arg;
	unsigned secs = fs->fs_opts.mo_commit_secs ? fs->fs_opts.mo_commit_secs : 5;

	pthread_mutex_lock(&fs->fs_lock);
	while (!fs->fs_stopping) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += secs;
		pthread_cond_timedwait(&fs->fs_commit_cond, &fs->fs_lock, &ts);
		if (fs->fs_stopping || fs_is_ro(fs))
			continue;
		if (fs->fs_j.j_tcount || fs->fs_dx.dx_count)
			jnl_commit(fs);
		if (fs->fs_j.j_used > (fs->fs_j.j_blocks - 1) / 2)
			jnl_checkpoint(fs);
		else if (fs->fs_cluster)
			/* other nodes' statfs reads the group headers at home */
			jnl_write_home_type(fs, SHOAL_MT_RG);
	}
	pthread_mutex_unlock(&fs->fs_lock);
	return NULL;
}

/*
 * Before the mount writes anything: is another machine using the disk
 * behind the lock manager's back (hb.c)?  A single-node mount looks at
 * every heartbeat block, a cluster node at its journal's and the
 * single-node one.  Then this node's heartbeat starts.
 */
static int fs_heartbeat_start(struct shoal_fs *fs, uint32_t slot)
{
	uint32_t index = fs->fs_lm->lm_cluster ? slot : fs->fs_sb.sb_jcount;
	unsigned ms = fs->fs_opts.mo_heartbeat_ms;
	char msg[200];
	int err;

	if (!ms && hb_default_ms(&ms)) {
		snprintf(fs->fs_err, sizeof(fs->fs_err),
			 "SHOAL_HEARTBEAT_MS=%s: want milliseconds, %u to %u",
			 getenv("SHOAL_HEARTBEAT_MS"), HB_MIN_MS, HB_MAX_MS);
		return -EINVAL;
	}
	err = hb_check(fs->fs_dev, &fs->fs_sb, fs->fs_lm->lm_cluster ? slot : HB_ALL, 0, msg,
		       sizeof(msg));
	if (err == -EOPNOTSUPP) {
		fprintf(stderr, "shoal: warning: this filesystem has no heartbeat blocks (an older "
				"mkfs.shoal made it): a second machine writing it would not be "
				"noticed\n");
		return 0;
	}
	if (err == -EBUSY) {
		snprintf(fs->fs_err, sizeof(fs->fs_err),
			 "the filesystem is in use on another machine: %s", msg);
		return err;
	}
	if (err < 0) {
		snprintf(fs->fs_err, sizeof(fs->fs_err), "cannot read the heartbeat blocks: %s",
			 strerror(-err));
		return err;
	}
	if (err == 1)
		fprintf(stderr, "shoal: %s; it did not change: a mount that crashed, taken over\n",
			msg);
	err = hb_start(fs->fs_dev, &fs->fs_sb, index, fs->fs_node, ms, &fs->fs_hb);
	if (err)
		snprintf(fs->fs_err, sizeof(fs->fs_err), "cannot start the heartbeat: %s",
			 strerror(-err));
	return err;
}

/* Why the last shoal_mount on this thread failed. */
static __thread char mount_err[320];

const char *shoal_mount_error(void)
{
	return mount_err;
}

static void free_inodes(struct shoal_fs *fs);

int shoal_mount(struct shoal_dev *dev, const struct shoal_mount_opts *opts,
		struct shoal_fs **out)
{
	struct shoal_fs *fs = calloc(1, sizeof(*fs));
	pthread_mutexattr_t ma;
	struct shoal_inode *root;
	uint32_t slot, replayed = 0, reaped = 0;
	int err;

	if (!fs)
		return -ENOMEM;
	pthread_mutex_init(&fs->fs_err_lock, NULL);
	fs->fs_dev = dev;
	if (opts)
		fs->fs_opts = *opts;
	if (!fs->fs_opts.mo_lock)
		fs->fs_opts.mo_lock = "nolock";
	fs->fs_lm = lm_find(fs->fs_opts.mo_lock);
	if (!fs->fs_lm) {
		snprintf(fs->fs_err, sizeof(fs->fs_err), "lock module '%s' is not available",
			 fs->fs_opts.mo_lock);
		err = -EPROTONOSUPPORT;
		goto out_free;
	}
	if (fs->fs_opts.mo_node && strlen(fs->fs_opts.mo_node) >= sizeof(fs->fs_node)) {
		/* cut, two names could become one */
		snprintf(fs->fs_err, sizeof(fs->fs_err),
			 "node name '%.40s...' is %zu bytes: a node name is 1 to %zu bytes",
			 fs->fs_opts.mo_node, strlen(fs->fs_opts.mo_node), sizeof(fs->fs_node) - 1);
		err = -ENAMETOOLONG;
		goto out_free;
	}
	if (fs->fs_opts.mo_node)
		snprintf(fs->fs_node, sizeof(fs->fs_node), "%s", fs->fs_opts.mo_node);
	else
		gethostname(fs->fs_node, sizeof(fs->fs_node) - 1);
	fs->fs_ro = fs->fs_opts.mo_readonly || dev->d_readonly;
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&fs->fs_lock, &ma);
	pthread_mutexattr_destroy(&ma);
	pthread_mutex_init(&fs->fs_dmg_lock, NULL);
	pthread_cond_init(&fs->fs_commit_cond, NULL);
	pthread_cond_init(&fs->fs_orphan_cond, NULL);

	err = sb_read(fs);
	if (err)
		goto out_free;
	if (fs->fs_sb.sb_feat_incompat & ~SHOAL_FEAT_INCOMPAT_SUPP) {
		snprintf(fs->fs_err, sizeof(fs->fs_err), "unsupported incompatible features %#llx",
			 (unsigned long long)(fs->fs_sb.sb_feat_incompat & ~SHOAL_FEAT_INCOMPAT_SUPP));
		err = -EINVAL;
		goto out_free;
	}
	if (fs->fs_sb.sb_feat_ro_compat & ~SHOAL_FEAT_RO_COMPAT_SUPP)
		fs->fs_ro = 1;
	fs->fs_bsize = fs->fs_sb.sb_bsize;
	fs->fs_bshift = fs->fs_sb.sb_bsize_shift;
	err = gl_init(fs, fs->fs_lm);
	if (err)
		goto out_free;
	err = fs->fs_lm->lm_mount(fs, fs->fs_sb.sb_locktable, fs->fs_node, &slot);
	if (err) {
		if (!fs->fs_err[0]) /* the lock module's own reason, else ours */
			snprintf(fs->fs_err, sizeof(fs->fs_err),
				 "lock module %s refused the mount: %s", fs->fs_lm->lm_name,
				 strerror(-err));
		goto out_free;
	}
	/* 0 is the default of a zeroed mount_opts, as -1 is */
	if (fs->fs_opts.mo_journal > 0 && fs->fs_lm->lm_cluster &&
	    (uint32_t)fs->fs_opts.mo_journal != slot) {
		/* two nodes writing one journal would replay over each other */
		snprintf(fs->fs_err, sizeof(fs->fs_err),
			 "journal=%d: in a cluster the lock manager chooses the journal (it gave "
			 "this node journal %u)", fs->fs_opts.mo_journal, slot);
		err = -EINVAL;
		goto out_free;
	}
	if (fs->fs_opts.mo_journal > 0)
		slot = (uint32_t)fs->fs_opts.mo_journal;
	if (slot >= fs->fs_sb.sb_jcount) {
		snprintf(fs->fs_err, sizeof(fs->fs_err), "journal %u does not exist", slot);
		err = -EINVAL;
		goto out_free;
	}
	if (!fs_is_ro(fs)) {
		err = fs_heartbeat_start(fs, slot);
		if (err)
			goto out_free;
	}
	fs->fs_ihmask = 65535; /* the kernel may hold 100,000s of inodes */
	fs->fs_ihash = calloc(fs->fs_ihmask + 1, sizeof(*fs->fs_ihash));
	if (!fs->fs_ihash) {
		err = -ENOMEM;
		goto out_free;
	}
	err = bc_init(fs);
	if (err)
		goto out_free;
	err = dx_init(fs, !fs_is_ro(fs) && (fs->fs_sb.sb_feat_incompat &
						 (SHOAL_FEAT_INCOMPAT_FASTCOMMIT |
						  SHOAL_FEAT_INCOMPAT_FCDATA)) ==
						(SHOAL_FEAT_INCOMPAT_FASTCOMMIT |
						 SHOAL_FEAT_INCOMPAT_FCDATA));
	if (err)
		goto out_bc;
	fs->fs_jid = slot;
	fs->fs_cluster = fs->fs_lm->lm_cluster;
	if (fs->fs_cluster) {
		err = cluster_join(fs);
		if (err)
			goto out_bc;
	}
	err = jnl_recover(fs, slot, &replayed);
	if (err) {
		if (err == -EROFS)
			snprintf(fs->fs_err, sizeof(fs->fs_err),
				 "journal %u needs recovery, which a read-only mount cannot do", slot);
		else if (!fs->fs_err[0])
			snprintf(fs->fs_err, sizeof(fs->fs_err), "journal %u cannot be replayed: %s",
				 slot, strerror(-err));
		goto out_bc;
	}
	if (fs->fs_cluster && fs->fs_lm->lm_recovery_done)
		/* this node may be back from the dead under its name: lockd
		 * kept its old locks until its journal was replayed, which it
		 * now is (lockd's (6); a no-op otherwise) */
		fs->fs_lm->lm_recovery_done(fs, slot);
	if (replayed)
		fprintf(stderr, "shoal: journal %u: replayed %u transactions\n", slot, replayed);
	err = jnl_load(fs, slot);
	if (err)
		goto out_bc;
	err = rg_load(fs);
	if (err) {
		snprintf(fs->fs_err, sizeof(fs->fs_err), "resource groups unreadable: run fsck.shoal");
		goto out_rg;
	}
	err = inode_get(fs, fs->fs_sb.sb_root, &root);
	if (err || !S_ISDIR(ip_di(root)->di_mode)) {
		if (!err)
			inode_put(fs, root);
		snprintf(fs->fs_err, sizeof(fs->fs_err), "root directory unreadable: run fsck.shoal");
		err = -EIO;
		goto out_rg;
	}
	inode_lookups(root, root->i_nlookup + 1); /* pinned for the mount's lifetime */
	inode_put(fs, root);
	if (!fs_is_ro(fs)) {
		pthread_mutex_lock(&fs->fs_lock);
		err = rg_reap_unlinked(fs, &reaped);
		if (!err)
			err = jnl_checkpoint(fs);
		if (!err)
			err = jnl_mark_clean(fs, 0);
		pthread_mutex_unlock(&fs->fs_lock);
		if (err) {
			snprintf(fs->fs_err, sizeof(fs->fs_err), "cannot write the journal: %s",
				 strerror(-err));
			goto out_rg;
		}
		if (reaped)
			fprintf(stderr, "shoal: %s %u orphan inodes\n",
				fs->fs_cluster ? "found" : "freed", reaped);
	}
	if (fs->fs_cluster) {
		struct glock *mgl = gl_get(fs, GL_NONDISK, GL_NONDISK_MOUNT);
		gl_put(fs, mgl); /* others may mount now */
		gl_release(fs, mgl);
		fs->fs_rg_alloc = (uint32_t)((uint64_t)slot * fs->fs_rgcount / fs->fs_sb.sb_jcount);
	}
	if (!fs_is_ro(fs)) {
		if (pthread_create(&fs->fs_commit_thread, NULL, commit_thread, fs) == 0)
			fs->fs_commit_started = 1;
		if (fs->fs_cluster &&
		    pthread_create(&fs->fs_orphan_thread, NULL, orphan_thread, fs) == 0)
			fs->fs_orphan_started = 1;
	}
	*out = fs;
	return 0;
out_rg:
	/* what reaping orphans began, and the inodes it and the root read */
	pthread_mutex_lock(&fs->fs_lock);
	jnl_release(fs);
	free_inodes(fs);
	pthread_mutex_unlock(&fs->fs_lock);
	rg_destroy(fs);
out_bc:
	gl_stop(fs);
	dx_destroy(fs);
	bc_destroy(fs);
out_free:
	if (fs->fs_hb)
		hb_stop(fs->fs_hb, 1); /* before lockd may give the slot away */
	gl_destroy(fs);
	if (fs->fs_lm_priv)
		fs->fs_lm->lm_unmount(fs);
	snprintf(mount_err, sizeof(mount_err), "%s", fs->fs_err[0] ? fs->fs_err : strerror(-err));
	pthread_mutex_destroy(&fs->fs_err_lock);
	free(fs->fs_orphans);
	free(fs->fs_ihash);
	free(fs);
	return err;
}

const char *shoal_error(struct shoal_fs *fs)
{
	int set;

	pthread_mutex_lock(&fs->fs_err_lock);
	set = fs->fs_err[0] != 0; /* once set, never written again */
	pthread_mutex_unlock(&fs->fs_err_lock);
	return set ? fs->fs_err : NULL;
}

int shoal_withdraw(struct shoal_fs *fs, const char *why)
{
	int err = 0;

	pthread_mutex_lock(&fs->fs_lock);
	if (fs_is_ro(fs))
		err = -EROFS;
	else
		fs_error(fs, "%s", why);
	pthread_mutex_unlock(&fs->fs_lock);
	return err;
}

static void free_inodes(struct shoal_fs *fs)
{
	for (uint32_t i = 0; i <= fs->fs_ihmask; i++) {
		struct shoal_inode *ip = fs->fs_ihash[i];
		while (ip) {
			struct shoal_inode *n = ip->i_hnext;
			buf_put(fs, ip->i_bh);
			pthread_rwlock_destroy(&ip->i_iolock);
			free(ip);
			ip = n;
		}
		fs->fs_ihash[i] = NULL;
	}
}

int shoal_unmount(struct shoal_fs *fs)
{
	int err = 0;

	if (fs->fs_commit_started) {
		pthread_mutex_lock(&fs->fs_lock);
		fs->fs_stopping = 1;
		pthread_cond_signal(&fs->fs_commit_cond);
		pthread_cond_signal(&fs->fs_orphan_cond);
		pthread_mutex_unlock(&fs->fs_lock);
		pthread_join(fs->fs_commit_thread, NULL);
		if (fs->fs_orphan_started)
			pthread_join(fs->fs_orphan_thread, NULL);
	}
	if (fs->fs_cluster && !fs_is_ro(fs)) {
		/* free what has no links through the operation machinery: it
		 * may wait for other nodes' locks */
		pthread_mutex_lock(&fs->fs_lock);
		for (uint32_t i = 0; i <= fs->fs_ihmask; i++)
			for (struct shoal_inode *ip = fs->fs_ihash[i]; ip; ip = ip->i_hnext) {
				if (ip_di(ip)->di_nlink == 0 && fs->fs_norphans < 100000) {
					ip->i_open = 0;
					inode_lookups(ip, 0);
				} else if (ip->i_free_wanted && ip->i_ref == 0) {
					/* unlinked by another node (its copy
					 * here is old): freed under its locks
					 * if it is still UNLINKED */
					ip->i_open = 0;
					inode_lookups(ip, 0);
					inode_queue_orphan(fs, ip->i_ino);
				}
			}
		for (uint32_t i = 0; i <= fs->fs_ihmask; i++) {
			struct shoal_inode *ip = fs->fs_ihash[i], *n;
			for (; ip; ip = n) {
				n = ip->i_hnext;
				if (ip_di(ip)->di_nlink == 0 && ip->i_ref == 0) {
					ip->i_ref = 1;
					inode_put(fs, ip); /* queues it (or frees it) */
				}
			}
		}
		pthread_mutex_unlock(&fs->fs_lock);
		inode_free_orphans(fs);
	}
	if (fs->fs_cluster)
		ops_flush_atime(fs); /* while the glocks still work */
	gl_stop(fs); /* no more demotions: we leave the cluster below */
	pthread_mutex_lock(&fs->fs_lock);
	if (!fs_is_ro(fs) && !fs->fs_cluster) {
		/* nobody uses anything any more: free what has no links */
		for (uint32_t i = 0; i <= fs->fs_ihmask; i++) {
			struct shoal_inode *ip = fs->fs_ihash[i], *n;
			for (; ip; ip = n) {
				n = ip->i_hnext;
				if (ip_di(ip)->di_nlink == 0) {
					ip->i_ref++;
					inode_destroy(fs, ip);
					ip->i_ref--;
					ip->i_open = 0;
					inode_lookups(ip, 0);
					ip->i_ref = 1;
					inode_put(fs, ip);
				}
			}
		}
	}
	if (!fs_is_ro(fs)) {
		err = jnl_checkpoint(fs);
		if (!err)
			err = jnl_mark_clean(fs, 1);
	}
	/* no queued write lands once the locks are gone (a read-only mount
	 * wrote no checkpoint, which would have waited for them) */
	dev_wait_range(fs->fs_dev, 0, UINT64_MAX);
	if (fs->fs_hb) {
		/* the disk is free once the journal is CLEAN; before lockd
		 * gives the slot to another node, which would wait else */
		int e = hb_stop(fs->fs_hb, !__atomic_load_n(&fs->fs_aborted, __ATOMIC_RELAXED));
		if (!err)
			err = e;
		fs->fs_hb = NULL;
	}
	jnl_release(fs); /* an aborted mount still holds them */
	free_inodes(fs);
	gl_destroy(fs);
	fs->fs_lm->lm_unmount(fs);
	pthread_mutex_unlock(&fs->fs_lock);
	rg_destroy(fs);
	dx_destroy(fs);
	bc_destroy(fs);
	dev_close(fs->fs_dev);
	pthread_mutex_destroy(&fs->fs_lock);
	pthread_mutex_destroy(&fs->fs_dmg_lock);
	pthread_cond_destroy(&fs->fs_commit_cond);
	pthread_cond_destroy(&fs->fs_orphan_cond);
	pthread_mutex_destroy(&fs->fs_err_lock);
	free(fs->fs_orphans);
	free(fs->fs_ihash);
	free(fs);
	return err;
}

int shoal_sync(struct shoal_fs *fs)
{
	int err = 0;
	pthread_mutex_lock(&fs->fs_lock);
	if (__atomic_load_n(&fs->fs_aborted, __ATOMIC_RELAXED)) {
		err = -EIO; /* changes may have been lost: never report success */
	} else if (!fs_is_ro(fs)) {
		err = jnl_commit(fs);
		if (!err)
			err = dev_flush_if_needed(fs->fs_dev);
	}
	pthread_mutex_unlock(&fs->fs_lock);
	return err;
}

uint32_t shoal_journal_id(struct shoal_fs *fs)
{
	return fs->fs_jid;
}

uint64_t shoal_root(struct shoal_fs *fs)
{
	return fs->fs_sb.sb_root;
}

uint32_t shoal_bsize(struct shoal_fs *fs)
{
	return fs->fs_bsize;
}

int shoal_is_readonly(struct shoal_fs *fs)
{
	return fs_is_ro(fs);
}

void shoal_counters(struct shoal_fs *fs, struct shoal_counters *out)
{
	struct shoal_dev_stats ds;
	pthread_mutex_lock(&fs->fs_lock);
	*out = fs->fs_ctr;
	struct gl_stats gs;
	gl_get_stats(fs, &gs);
	out->sc_gl_requests = gs.gs_requests;
	out->sc_gl_callbacks = gs.gs_callbacks;
	out->sc_gl_demotions = gs.gs_demotions;
	out->sc_gl_restarts = gs.gs_restarts;
	out->sc_gl_rtt_us = gs.gs_rtt_ns / 1000;
	pthread_mutex_unlock(&fs->fs_lock);
	dev_stats_get(fs->fs_dev, &ds);
	out->sc_dev_reads = ds.ds_reads;
	out->sc_dev_read_bytes = ds.ds_read_bytes;
	out->sc_dev_queue_read_bytes = ds.ds_queue_read_bytes;
	out->sc_dev_writes = ds.ds_writes;
	out->sc_dev_write_bytes = ds.ds_write_bytes;
	out->sc_dev_flushes = ds.ds_flushes;
	out->sc_lease_refused = ds.ds_lease_refused;
}

/*
 * Of free blocks, how many one file can hold as data: its block map needs
 * an indirect block for every SHOAL_IND_PTRS data blocks (and one per
 * level above), so df does not promise what a fallocate of it all cannot
 * have (ext4 keeps the same margin out of f_bavail with its reserved
 * blocks).
 */
uint64_t fs_usable_blocks(struct shoal_fs *fs, uint64_t free)
{
	uint64_t ptrs = SHOAL_IND_PTRS(fs->fs_bsize), meta = 0, n = free;

	for (int h = 0; h < SHOAL_MAX_HEIGHT && n > 1; h++) {
		n = (n + ptrs - 1) / ptrs;
		meta += n;
	}
	return free > meta ? free - meta : 0;
}

int shoal_statfs(struct shoal_fs *fs, struct statvfs *sv)
{
	uint64_t total = 0, dinodes = 0;
	memset(sv, 0, sizeof(*sv));
	pthread_mutex_lock(&fs->fs_lock);
	for (uint32_t i = 0; i < fs->fs_rgcount; i++)
		total += fs->fs_rgds[i].rd_length;
	uint64_t fr = rg_statfs_free(fs);
	dinodes = fs->fs_icount;
	pthread_mutex_unlock(&fs->fs_lock);
	(void)dinodes;
	sv->f_bsize = fs->fs_bsize;
	sv->f_frsize = fs->fs_bsize;
	sv->f_blocks = total;
	sv->f_bfree = fr;
	sv->f_bavail = fs_usable_blocks(fs, fr);
	sv->f_files = total;
	sv->f_ffree = fr;
	sv->f_favail = fr;
	memcpy(&sv->f_fsid, fs->fs_sb.sb_uuid, sizeof(sv->f_fsid));
	sv->f_namemax = SHOAL_NAME_MAX;
	return 0;
}

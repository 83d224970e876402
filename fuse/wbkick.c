/*
 * wbkick.c - start the kernel's writeback of a file's mapped pages before
 * the kernel launders them one page at a time.
 *
 * At every size change of a FUSE file (ftruncate, extending too) the kernel
 * drops the file's whole page cache after the SETATTR reply, and a dirty
 * page of a shared writable mapping is written first, by itself: one 4 KiB
 * WRITE round trip per page (fuse_launder_folio).  A file grown by
 * ftruncate and written through one mapping (bench mmext mremap, the seed
 * 003 workload) paid 512 round trips per 2 MiB hunk.  So, while handling
 * such a SETATTR, shoal-mount opens the file through its own mount (by file
 * handle: FUSE's is the node id and generation, type FILEID_INO64_GEN) and
 * asks for writeback of the whole file without waiting for it
 * (sync_file_range SYNC_FILE_RANGE_WRITE).  The kernel holds the file's
 * writes back until the SETATTR is answered (FUSE_NOWRITE), so they leave
 * as soon as the reply is in, in requests of up to max_write; the page
 * cache drop then waits for them and finds clean pages.
 *
 * Invariants:
 *  (1) only a file the kernel has written pages of (a WRITE with the
 *      writepage flag: wbkick_note) is kicked, and never for a new size of
 *      0 (every page goes, none is written): other ftruncates cost nothing;
 *  (2) the kick runs on one thread of its own, with its own working
 *      directory (unshare CLONE_FS), which is the mount point only during
 *      a kick (a daemon holding its own mount open would make umount
 *      fail): the open it makes is served by the other worker threads;
 *  (3) the SETATTR waits at most WBKICK_WAIT_MS for the kick, and a kick
 *      still running makes the next SETATTR skip it: whatever the kernel
 *      does, a kick can delay a SETATTR, never block it; without a kick
 *      the kernel launders the pages as before (nothing is lost either way);
 *  (4) a kick that cannot work here (no CAP_DAC_READ_SEARCH, a kernel
 *      without FUSE file handles, max_threads=1) turns kicking off for the
 *      life of the mount.
 */
#include "smount.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define WBKICK_WAIT_MS 20
#define WBKICK_NOTED 64        /* files remembered as written through pages */
#define FILEID_INO64_GEN 0x81 /* the kernel's FUSE file handle type */

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int started, off, busy, posted;
	uint64_t seq, done;     /* jobs posted, jobs finished */
	uint64_t ino, gen;      /* the posted job */
	char *mountpoint;
	uint64_t noted[WBKICK_NOTED]; /* (1): ring of inode numbers */
	unsigned next;
	uint64_t kicks, skipped;  /* wbkick_stats */
	uint64_t page_writes, page_write_bytes;
} wk = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

static int noted_locked(uint64_t ino)
{
	for (unsigned i = 0; i < WBKICK_NOTED; i++)
		if (wk.noted[i] == ino)
			return 1;
	return 0;
}

void wbkick_note(uint64_t ino, uint64_t bytes)
{
	pthread_mutex_lock(&wk.lock);
	wk.page_writes++;
	wk.page_write_bytes += bytes;
	if (!noted_locked(ino)) {
		wk.noted[wk.next] = ino;
		wk.next = (wk.next + 1) % WBKICK_NOTED;
	}
	pthread_mutex_unlock(&wk.lock);
}

/* One kick: 0, or -errno of the step that failed. */
static int kick(uint64_t ino, uint64_t gen)
{
	struct {
		struct file_handle fh;
		uint32_t id[3];
	} h;
	int fd, err = 0;

	h.fh.handle_bytes = sizeof(h.id);
	h.fh.handle_type = FILEID_INO64_GEN;
	h.id[0] = (uint32_t)(ino >> 32);
	h.id[1] = (uint32_t)ino;
	h.id[2] = (uint32_t)gen;
	if (chdir(wk.mountpoint) < 0)
		return -errno;
	fd = open_by_handle_at(AT_FDCWD, &h.fh, O_RDONLY | O_NOATIME | O_CLOEXEC);
	if (fd < 0)
		err = -errno;
	if (chdir("/") < 0 && !err)
		err = -errno;
	if (fd < 0)
		return err;
	if (sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE) < 0)
		err = -errno;
	close(fd);
	return err;
}

static void *kicker(void *arg)
{
	(void)arg;
	int shared = unshare(CLONE_FS) < 0;

	pthread_mutex_lock(&wk.lock);
	if (shared) { /* (2): never chdir the whole daemon */
		wk.off = 1;
		wk.posted = 0;
		wk.done = wk.seq;
		pthread_cond_broadcast(&wk.cond);
	}
	for (;;) {
		while (!wk.posted && !wk.off)
			pthread_cond_wait(&wk.cond, &wk.lock);
		if (wk.off && !wk.posted)
			break;
		uint64_t ino = wk.ino, gen = wk.gen;
		wk.posted = 0;
		wk.busy = 1;
		pthread_mutex_unlock(&wk.lock);
		int err = kick(ino, gen);
		pthread_mutex_lock(&wk.lock);
		wk.busy = 0;
		wk.done++;
		/* ESTALE: the file is gone meanwhile; anything else: (4) */
		if (err && err != -ESTALE && err != -ENOENT)
			wk.off = 1;
		pthread_cond_broadcast(&wk.cond);
	}
	pthread_mutex_unlock(&wk.lock);
	return NULL;
}

void wbkick_before_resize(struct smount *sm, uint64_t ino, uint64_t gen, uint64_t new_size)
{
	struct timespec dl;
	pthread_t t;

	if (!new_size)
		return;
	pthread_mutex_lock(&wk.lock);
	if (wk.off || !noted_locked(ino))
		goto out;
	if (!wk.started) {
		wk.started = 1;
		wk.mountpoint = strdup(sm->sm_mountpoint);
		if (sm->sm_max_threads == 1 || !wk.mountpoint ||
		    pthread_create(&t, NULL, kicker, NULL)) {
			wk.off = 1;
			goto out;
		}
		pthread_detach(t);
	}
	if (wk.busy || wk.posted) { /* (3) */
		wk.skipped++;
		goto out;
	}
	wk.ino = ino;
	wk.gen = gen;
	wk.posted = 1;
	wk.kicks++;
	uint64_t mine = ++wk.seq;
	pthread_cond_broadcast(&wk.cond);
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_nsec += WBKICK_WAIT_MS * 1000000L;
	if (dl.tv_nsec >= 1000000000L) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000L;
	}
	while (wk.done < mine && !wk.off)
		if (pthread_cond_timedwait(&wk.cond, &wk.lock, &dl) == ETIMEDOUT)
			break;
out:
	pthread_mutex_unlock(&wk.lock);
}

void wbkick_stats(FILE *out)
{
	pthread_mutex_lock(&wk.lock);
	fprintf(out, "page_writes %llu\npage_write_bytes %llu\n", (unsigned long long)wk.page_writes,
		(unsigned long long)wk.page_write_bytes);
	fprintf(out, "wb_kicks %llu\nwb_kicks_skipped %llu\nwb_kick_off %d\n",
		(unsigned long long)wk.kicks, (unsigned long long)wk.skipped, wk.off);
	pthread_mutex_unlock(&wk.lock);
}

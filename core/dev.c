/*
 * dev.c - block device backend on a regular file or a block device.
 *
 * Owns the file descriptor and the device counters.  Invariants:
 *  (1) every read and write is for exactly the requested length, retried on
 *      short transfers and EINTR; a failure is returned as -errno;
 *  (2) d_flush_gen only grows, and is set to the d_write_gen observed before
 *      the flush began, so a caller that wrote at generation g knows its data
 *      is durable once d_flush_gen >= g;
 *  (3) a direct write (d_dfd) and a buffered one stay coherent: the kernel
 *      writes back and drops cached pages of the range around a direct
 *      write, and fdatasync of either descriptor flushes the device cache;
 *  (4) dev_write sends writes of at least DEV_DIRECT_MIN bytes whose offset
 *      and length are multiples of the page size through the O_DIRECT
 *      descriptor, so file data (the kernel's page cache above FUSE caches
 *      it already) is not copied into a second page cache, the device's,
 *      and flushed from there: bench seq, 1 MiB writes, 342 -> 513 MiB/s,
 *      mmext unmap 174 -> 250 MiB/s and no longer slowing down as the file
 *      grows.  Page alignment keeps a direct write off every page a
 *      buffered write of another block may be dirtying (blocks can be
 *      1 KiB), which could otherwise defeat the kernel's invalidation (3);
 *  (5) with write-behind on (dev_wb_start), a dev_write_behind is checked,
 *      counted and bumps d_write_gen when it is queued, with a copy of its
 *      bytes, and a writer thread issues it later; until it is done, every
 *      read, write and flush of the device that overlaps it (a flush
 *      overlaps everything) waits for it, and a new queued write waits for
 *      the queued ones it overlaps.  So a flush never reports durable a
 *      write still to come (2), nothing reads a block before its queued
 *      contents, and writes to one range land in the order they were made.
 *      So no two queued writes overlap, and a read that falls wholly
 *      inside one is served from its copy (dev_read_queued, counted in
 *      ds_queue_read_bytes, not as a device read): those are the range's
 *      newest contents, and the read neither waits nor touches the device
 *      (bench mmext: a fault's read-around reads back the end of the hunk
 *      just written, about a sixth of the data).
 *      A queued write that fails (or finds the device fenced) sets
 *      wb_err, and every flush after it fails with it: fsync reports what
 *      the write could not; so does every dev_write_behind after it, and
 *      dev_wb_error() tells the filesystem (glops.c withdraws the node).
 *      Its range is remembered (wb_bad, a few ranges, then the whole
 *      device): a read of it fails with -EIO rather than return the older
 *      bytes still on the device, until a later write covers it whole.
 *      The writers take no lock but wb_lock.  A plain file without
 *      O_DIRECT queues nothing (no copy is saved); a test's wrapper device
 *      (dev_fault.c) does, so its power cuts cover the queue too;
 *  (6) d_write_gen counts a write once it can be on the device: a direct
 *      write when it has been issued, a queued one when it is queued (under
 *      wb_lock).  dev_flush samples it under wb_lock once the queue is
 *      empty, so whatever the sample counts has been issued before the
 *      flush, whatever thread wrote it (2);
 *  (7) dev_fence stops every write not yet issued, and returns once the
 *      queued writes a writer had already begun are done and the buffered
 *      writes issued before it are flushed out of the kernel's page cache:
 *      nothing of this node's writes made through dev_* lands after it
 *      returns (a write another thread is issuing at that moment, outside
 *      the queue and without fs_lock, is the exception: the lease's margin
 *      covers it, docs/LOCKING.md), and so does a write issued before its
 *      lease ran out (8): it never lands after the lease is over;
 *  (8) the lease: a cluster node may write only while its lease with lockd
 *      runs, d_lease_until, on CLOCK_BOOTTIME (it counts while the process
 *      is stopped and the machine suspended, as the lock server's clock
 *      does).  Every write and flush is checked against it right before
 *      it is submitted to the kernel (issue_write, dev_write_small,
 *      dev_flush, the queue's writers, and callers writing dev_fd()
 *      themselves), not by a flag another thread sets when it notices:
 *      a node stopped past its lease that wakes up refuses its very next
 *      write, before its timer thread has run.  The first refusal fences
 *      the device (every later write fails too) and is counted
 *      (ds_lease_refused).  The deadline is the send time of the newest
 *      answered heartbeat + lease/2, and lockd declares the node dead no
 *      earlier than its receipt + lease (docs/PROTOCOL.md): a write
 *      submitted before the deadline has lease/2 to land;
 *  (9) test hook: $SHOAL_TEST_WRITE_LOG names a file to which every
 *      write and flush is appended, one line each (dev_log_io), with its
 *      start and end time (CLOCK_BOOTTIME ns), place, lease deadline and
 *      outcome, so a test can show that no write of a node landed after
 *      its lease (tests/crash/t_cluster_pause.sh);
 *  (10) dev_read_uncached and dev_write_uncached (the heartbeat, hb.c) go
 *      around every page cache (O_DIRECT when the file allows it), so a
 *      read sees what another machine wrote to the device a moment ago and
 *      a write reaches the device at once; a write is counted, fenced (7)
 *      and refused read-only like any other, but is not a write a flush
 *      must cover (d_write_gen does not move): nothing orders it with the
 *      journal, and it would cost an idle mount a flush per heartbeat.
 */
#include "dev.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DEV_PAGE 4096u		   /* no direct write shares a page with a buffered one */
#define DEV_DIRECT_MIN (64u << 10) /* smaller ones stay buffered: see (4) */

static void stat_add(uint64_t *ctr, uint64_t v)
{
	__atomic_fetch_add(ctr, v, __ATOMIC_RELAXED);
}

/* --- the lease (8) and the write log (9) ---------------------------------- */

uint64_t dev_now_boot_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int wlog_fd = -1;
static pthread_once_t wlog_once = PTHREAD_ONCE_INIT;

static void wlog_open(void)
{
	const char *path = getenv("SHOAL_TEST_WRITE_LOG");

	if (path && *path) {
		wlog_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (wlog_fd < 0)
			fprintf(stderr, "shoal: SHOAL_TEST_WRITE_LOG %s: %s\n", path, strerror(errno));
	}
}

/* One line, one write(2) on an O_APPEND file: lines never interleave. */
static void wlog_line(const char *line, int len)
{
	if (len > 0 && write(wlog_fd, line, (size_t)len) < 0)
		wlog_fd = -1; /* a test hook: stop rather than spam */
}

/*
 * (9): kind 'W' a write, 'F' a flush: pid, start and end (BOOTTIME ns),
 * offset, length, the lease deadline at the start (0: none, 1: given up)
 * and the outcome (0 or -errno).
 */
void dev_log_io(struct shoal_dev *dev, char kind, uint64_t t0, uint64_t off, uint64_t len,
		       int err)
{
	char line[200];

	pthread_once(&wlog_once, wlog_open);
	if (wlog_fd < 0)
		return;
	wlog_line(line, snprintf(line, sizeof(line), "%c %d %llu %llu %llu %llu %llu %d\n", kind,
				 (int)getpid(), (unsigned long long)t0,
				 (unsigned long long)dev_now_boot_ns(), (unsigned long long)off,
				 (unsigned long long)len,
				 (unsigned long long)__atomic_load_n(&dev->d_lease_until,
								     __ATOMIC_RELAXED),
				 err));
}

void dev_log_note(const char *fmt, ...)
{
	char line[300];
	va_list ap;
	int n;

	pthread_once(&wlog_once, wlog_open);
	if (wlog_fd < 0)
		return;
	n = snprintf(line, sizeof(line), "N %d %llu ", (int)getpid(),
		     (unsigned long long)dev_now_boot_ns());
	va_start(ap, fmt);
	n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	wlog_line(line, n);
}

void dev_set_lease(struct shoal_dev *dev, uint64_t deadline_ns)
{
	uint64_t cur = __atomic_load_n(&dev->d_lease_until, __ATOMIC_ACQUIRE);

	do {
		if (cur == DEV_LEASE_OVER)
			return; /* given up for good */
		if (deadline_ns != DEV_LEASE_OVER && cur != DEV_LEASE_NONE && deadline_ns <= cur)
			return; /* only forward */
	} while (!__atomic_compare_exchange_n(&dev->d_lease_until, &cur, deadline_ns, 0,
					      __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
}

/* Does the lease run now (or is there none)?  No side effect. */
static int lease_valid(struct shoal_dev *dev, uint64_t *late_ns)
{
	uint64_t until = __atomic_load_n(&dev->d_lease_until, __ATOMIC_ACQUIRE), now;

	if (until == DEV_LEASE_NONE)
		return 1;
	now = dev_now_boot_ns();
	if (late_ns)
		*late_ns = now >= until ? now - until : 0;
	return now < until;
}

int dev_lease_check(struct shoal_dev *dev)
{
	uint64_t late = 0;

	if (lease_valid(dev, &late))
		return 0;
	__atomic_fetch_add(&dev->d_stats.ds_lease_refused, 1, __ATOMIC_RELAXED);
	if (!__atomic_exchange_n(&dev->d_fenced, 1, __ATOMIC_SEQ_CST)) {
		if (__atomic_load_n(&dev->d_lease_until, __ATOMIC_RELAXED) == DEV_LEASE_OVER)
			fprintf(stderr, "shoal: write after the lease was given up: refused, "
					"device fenced\n");
		else
			fprintf(stderr, "shoal: lease with lockd over for %llu ms: write refused, "
					"device fenced (no write of this node may land now)\n",
				(unsigned long long)(late / 1000000));
	}
	return -EIO;
}

static int file_pread(struct shoal_dev *dev, void *buf, size_t len, uint64_t off)
{
	char *p = buf;
	while (len) {
		ssize_t n = pread(dev->d_fd, p, len, (off_t)off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EIO; /* beyond the end of the device */
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

static int file_pwrite(struct shoal_dev *dev, const void *buf, size_t len, uint64_t off)
{
	const char *p = buf;
	while (len) {
		ssize_t n = pwrite(dev->d_fd, p, len, (off_t)off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EIO;
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

/* The aligned buffer of O_DIRECT writes: one per thread, freed at its exit. */
#define BOUNCE_SIZE (1u << 20)
static pthread_key_t bounce_key;
static pthread_once_t bounce_once = PTHREAD_ONCE_INIT;

static void bounce_init(void)
{
	pthread_key_create(&bounce_key, free);
}

/*
 * Bytes through the O_DIRECT descriptor, from buf itself when it is
 * sector-aligned, else staged in the thread's aligned buffer; -EINVAL: not here (unaligned, or the file takes no O_DIRECT).
 * align is 512 for the small writes of dev_write_small, the page size for
 * dev_write's (invariant (4)).
 */
static int file_pwrite_direct(struct shoal_dev *dev, const void *buf, size_t len, uint64_t off,
			      size_t align)
{
	const char *p = buf;
	void *bounce;

	if (dev->d_dfd < 0 || !len || (len | off) & (align - 1))
		return -EINVAL;
	if (!((uintptr_t)buf & 511)) { /* aligned already: no staging copy */
		ssize_t n;
		do
			n = pwrite(dev->d_dfd, buf, len, (off_t)off);
		while (n < 0 && errno == EINTR);
		if (n < 0)
			return -errno;
		return n == (ssize_t)len ? 0 : -EIO;
	}
	pthread_once(&bounce_once, bounce_init);
	bounce = pthread_getspecific(bounce_key);
	if (!bounce) {
		if (posix_memalign(&bounce, 4096, BOUNCE_SIZE))
			return -EINVAL;
		if (pthread_setspecific(bounce_key, bounce)) {
			free(bounce);
			return -EINVAL;
		}
	}
	while (len) {
		size_t chunk = len < BOUNCE_SIZE ? len : BOUNCE_SIZE;
		ssize_t n;

		memcpy(bounce, p, chunk);
		do
			n = pwrite(dev->d_dfd, bounce, chunk, (off_t)off);
		while (n < 0 && errno == EINTR);
		if (n < 0)
			return errno == EINVAL && p == buf ? -EINVAL : -errno;
		if (n != (ssize_t)chunk)
			return -EIO;
		p += chunk;
		off += chunk;
		len -= chunk;
	}
	return 0;
}

static int file_flush(struct shoal_dev *dev)
{
	if (fdatasync(dev->d_fd) < 0)
		return -errno;
	return 0;
}

static void file_close(struct shoal_dev *dev)
{
	close(dev->d_fd);
	if (dev->d_dfd >= 0)
		close(dev->d_dfd);
}

const struct shoal_dev_ops dev_file_ops = {
	.pread = file_pread,
	.pwrite = file_pwrite,
	.flush = file_flush,
	.close = file_close,
};

int dev_open(const char *path, int readonly, struct shoal_dev **out)
{
	struct shoal_dev *dev;
	struct stat st;
	int fd, err;

	fd = open(path, (readonly ? O_RDONLY : O_RDWR) | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		err = -errno;
		goto out_close;
	}
	dev = calloc(1, sizeof(*dev));
	if (!dev) {
		err = -ENOMEM;
		goto out_close;
	}
	if (S_ISBLK(st.st_mode)) {
		uint64_t sz;
		if (ioctl(fd, BLKGETSIZE64, &sz) < 0) {
			err = -errno;
			free(dev);
			goto out_close;
		}
		dev->d_size = sz;
	} else if (S_ISREG(st.st_mode)) {
		dev->d_size = (uint64_t)st.st_size;
	} else {
		err = -ENOTBLK;
		free(dev);
		goto out_close;
	}
	dev->d_ops = &dev_file_ops;
	dev->d_fd = fd;
	/* tmpfs: -1; read-only: only dev_read_uncached uses it (8) */
	dev->d_dfd = open(path, (readonly ? O_RDONLY : O_RDWR) | O_DIRECT | O_CLOEXEC);
	dev->d_readonly = readonly;
	*out = dev;
	return 0;
out_close:
	close(fd);
	return err;
}

/* --- write-behind (5) ------------------------------------------------------ */

#define WB_WRITERS 2
#define WB_BUF (1u << 20)
#define WB_POOL 16
#define WB_BAD 16

struct wb_item {
	uint64_t wi_off;
	size_t wi_len;
	void *wi_buf;           /* page-aligned copy: WB_BUF bytes (pooled) or wi_len */
	int wi_busy;            /* a writer has it */
	struct wb_item *wi_next;
};

struct dev_wb {
	pthread_mutex_t wb_lock;
	pthread_cond_t wb_work;  /* an item was queued, or stop */
	pthread_cond_t wb_done;  /* an item was done */
	struct wb_item *wb_head, **wb_tail;
	unsigned wb_count;       /* atomic reads; changes under wb_lock */
	size_t wb_bytes, wb_max;
	int wb_err;              /* first failure: every flush reports it */
	struct {
		uint64_t off, len;
	} wb_bad[WB_BAD];        /* ranges a failed write left stale (5) */
	unsigned wb_nbad;        /* atomic reads; WB_BAD + 1: the whole device */
	int wb_stop;
	pthread_t wb_thr[WB_WRITERS];
	int wb_nthr;
	void *wb_free[WB_POOL]; /* spare WB_BUF buffers: no new pages per write */
	unsigned wb_nfree;
};

static int issue_write(struct shoal_dev *dev, const void *buf, size_t len, uint64_t off);
static int write_begin(struct shoal_dev *dev, size_t len, uint64_t off);

static int wb_overlaps_range(uint64_t a, uint64_t alen, uint64_t off, uint64_t len)
{
	return a < off + len && off < a + alen;
}

/* Under wb_lock: remember a range a failed write left stale (5). */
static void wb_bad_add(struct dev_wb *wb, uint64_t off, uint64_t len)
{
	unsigned n = wb->wb_nbad;

	if (n > WB_BAD)
		return; /* the whole device already */
	if (n == WB_BAD) {
		__atomic_store_n(&wb->wb_nbad, WB_BAD + 1, __ATOMIC_SEQ_CST);
		return;
	}
	wb->wb_bad[n].off = off;
	wb->wb_bad[n].len = len;
	__atomic_store_n(&wb->wb_nbad, n + 1, __ATOMIC_SEQ_CST);
}

/* Under wb_lock: a write of [off, off + len) landed; the stale ranges it
 * covers whole are good again. */
static void wb_bad_clear(struct dev_wb *wb, uint64_t off, uint64_t len)
{
	unsigned n = wb->wb_nbad;

	if (!n || n > WB_BAD)
		return;
	for (unsigned i = 0; i < n;) {
		if (off <= wb->wb_bad[i].off && wb->wb_bad[i].off + wb->wb_bad[i].len <= off + len)
			wb->wb_bad[i] = wb->wb_bad[--n];
		else
			i++;
	}
	__atomic_store_n(&wb->wb_nbad, n, __ATOMIC_SEQ_CST);
}

/* Under wb_lock: does [off, off + len) hold bytes a failed write left stale? */
static int wb_bad_locked(const struct dev_wb *wb, uint64_t off, uint64_t len)
{
	if (wb->wb_nbad > WB_BAD)
		return 1;
	for (unsigned i = 0; i < wb->wb_nbad; i++)
		if (wb_overlaps_range(wb->wb_bad[i].off, wb->wb_bad[i].len, off, len))
			return 1;
	return 0;
}

/* Under wb_lock: an item's buffer back to the pool, or freed. */
static void wb_buf_put(struct dev_wb *wb, void *buf, size_t len)
{
	if (len == WB_BUF && wb->wb_nfree < WB_POOL)
		wb->wb_free[wb->wb_nfree++] = buf;
	else
		free(buf);
}

static void *wb_writer(void *arg)
{
	struct shoal_dev *dev = arg;
	struct dev_wb *wb = dev->d_wb;

	pthread_mutex_lock(&wb->wb_lock);
	for (;;) {
		struct wb_item *it = wb->wb_head;
		while (it && it->wi_busy)
			it = it->wi_next;
		if (!it) {
			if (wb->wb_stop)
				break;
			pthread_cond_wait(&wb->wb_work, &wb->wb_lock);
			continue;
		}
		it->wi_busy = 1;
		pthread_mutex_unlock(&wb->wb_lock);
		int err = __atomic_load_n(&dev->d_fenced, __ATOMIC_SEQ_CST) ?
				  -EIO :
				  issue_write(dev, it->wi_buf, it->wi_len, it->wi_off);
		pthread_mutex_lock(&wb->wb_lock);
		if (err) {
			if (!wb->wb_err)
				__atomic_store_n(&wb->wb_err, err, __ATOMIC_SEQ_CST);
			wb_bad_add(wb, it->wi_off, it->wi_len);
		} else {
			wb_bad_clear(wb, it->wi_off, it->wi_len);
		}
		struct wb_item **pp = &wb->wb_head;
		while (*pp != it)
			pp = &(*pp)->wi_next;
		*pp = it->wi_next;
		if (wb->wb_tail == &it->wi_next)
			wb->wb_tail = pp;
		wb->wb_bytes -= it->wi_len;
		__atomic_store_n(&wb->wb_count, wb->wb_count - 1, __ATOMIC_SEQ_CST);
		pthread_cond_broadcast(&wb->wb_done);
		wb_buf_put(wb, it->wi_buf, it->wi_len);
		free(it);
	}
	pthread_mutex_unlock(&wb->wb_lock);
	return NULL;
}

int dev_wb_start(struct shoal_dev *dev, size_t max_bytes)
{
	struct dev_wb *wb;

	if (dev->d_wb || dev->d_readonly)
		return 0;
	wb = calloc(1, sizeof(*wb));
	if (!wb)
		return -ENOMEM;
	pthread_mutex_init(&wb->wb_lock, NULL);
	pthread_cond_init(&wb->wb_work, NULL);
	pthread_cond_init(&wb->wb_done, NULL);
	wb->wb_tail = &wb->wb_head;
	wb->wb_max = max_bytes;
	dev->d_wb = wb;
	for (int i = 0; i < WB_WRITERS; i++) {
		if (pthread_create(&wb->wb_thr[i], NULL, wb_writer, dev))
			break;
		wb->wb_nthr++;
	}
	if (!wb->wb_nthr) {
		dev->d_wb = NULL;
		free(wb);
		return -EAGAIN;
	}
	return 0;
}

static int wb_overlaps(const struct wb_item *it, uint64_t off, uint64_t len)
{
	return wb_overlaps_range(it->wi_off, it->wi_len, off, len);
}

/* Under wb_lock: wait until no queued write overlaps the range. */
static void wb_wait_locked(struct dev_wb *wb, uint64_t off, uint64_t len)
{
	for (;;) {
		struct wb_item *it = wb->wb_head;
		while (it && !wb_overlaps(it, off, len))
			it = it->wi_next;
		if (!it)
			return;
		pthread_cond_wait(&wb->wb_done, &wb->wb_lock);
	}
}

int dev_wait_range(struct shoal_dev *dev, uint64_t off, uint64_t len)
{
	struct dev_wb *wb = dev->d_wb;
	int bad;

	if (!wb || (!__atomic_load_n(&wb->wb_count, __ATOMIC_SEQ_CST) &&
		    !__atomic_load_n(&wb->wb_nbad, __ATOMIC_SEQ_CST)))
		return 0;
	pthread_mutex_lock(&wb->wb_lock);
	wb_wait_locked(wb, off, len);
	bad = wb_bad_locked(wb, off, len);
	pthread_mutex_unlock(&wb->wb_lock);
	return bad ? -EIO : 0;
}

int dev_wb_error(struct shoal_dev *dev)
{
	struct dev_wb *wb = dev->d_wb;

	/* set once, under wb_lock; a racy read sees it at the next call */
	return wb ? __atomic_load_n(&wb->wb_err, __ATOMIC_SEQ_CST) : 0;
}

/* A direct write of [off, off + len) was issued: counted (6); where it
 * landed, no failed queued write left stale bytes any more (5). */
static void write_done(struct shoal_dev *dev, int err, uint64_t off, uint64_t len)
{
	struct dev_wb *wb = dev->d_wb;

	__atomic_fetch_add(&dev->d_write_gen, 1, __ATOMIC_SEQ_CST);
	if (!err && wb && __atomic_load_n(&wb->wb_nbad, __ATOMIC_SEQ_CST)) {
		pthread_mutex_lock(&wb->wb_lock);
		wb_bad_clear(wb, off, len);
		pthread_mutex_unlock(&wb->wb_lock);
	}
}

int dev_write_behind(struct shoal_dev *dev, const void *buf, size_t len, uint64_t off)
{
	struct dev_wb *wb = dev->d_wb;
	struct wb_item *it;
	int err;

	if (!wb || len < DEV_DIRECT_MIN || len > wb->wb_max || (len | off) & (DEV_PAGE - 1) ||
	    (dev->d_dfd < 0 && dev->d_ops == &dev_file_ops) || !(it = calloc(1, sizeof(*it))))
		return dev_write(dev, buf, len, off);
	pthread_mutex_lock(&wb->wb_lock);
	if (len == WB_BUF && wb->wb_nfree)
		it->wi_buf = wb->wb_free[--wb->wb_nfree];
	pthread_mutex_unlock(&wb->wb_lock);
	if (!it->wi_buf && posix_memalign(&it->wi_buf, DEV_PAGE, len)) {
		free(it);
		return dev_write(dev, buf, len, off);
	}
	err = write_begin(dev, len, off);
	if (err) {
		free(it->wi_buf);
		free(it);
		return err;
	}
	memcpy(it->wi_buf, buf, len);
	it->wi_off = off;
	it->wi_len = len;
	pthread_mutex_lock(&wb->wb_lock);
	for (;;) { /* nothing overlapping queued, and room, both at once */
		wb_wait_locked(wb, off, len);
		if (wb->wb_err || !wb->wb_bytes || wb->wb_bytes + len <= wb->wb_max)
			break;
		pthread_cond_wait(&wb->wb_done, &wb->wb_lock);
	}
	if (wb->wb_err) { /* (5): one failed, the caller hears it now */
		err = wb->wb_err;
		wb_buf_put(wb, it->wi_buf, len);
		pthread_mutex_unlock(&wb->wb_lock);
		free(it);
		return err;
	}
	__atomic_fetch_add(&dev->d_write_gen, 1, __ATOMIC_SEQ_CST); /* (6) */
	*wb->wb_tail = it;
	wb->wb_tail = &it->wi_next;
	wb->wb_bytes += len;
	__atomic_store_n(&wb->wb_count, wb->wb_count + 1, __ATOMIC_SEQ_CST);
	pthread_cond_signal(&wb->wb_work);
	pthread_mutex_unlock(&wb->wb_lock);
	return 0;
}

/* Stop the writers once every queued write is done. */
static void wb_stop(struct shoal_dev *dev)
{
	struct dev_wb *wb = dev->d_wb;

	if (!wb)
		return;
	pthread_mutex_lock(&wb->wb_lock);
	wb->wb_stop = 1;
	pthread_cond_broadcast(&wb->wb_work);
	pthread_mutex_unlock(&wb->wb_lock);
	for (int i = 0; i < wb->wb_nthr; i++)
		pthread_join(wb->wb_thr[i], NULL);
	while (wb->wb_nfree)
		free(wb->wb_free[--wb->wb_nfree]);
	dev->d_wb = NULL;
	free(wb);
}

void dev_close(struct shoal_dev *dev)
{
	if (!dev)
		return;
	wb_stop(dev);
	dev->d_ops->close(dev);
	free(dev);
}

int dev_read_queued(struct shoal_dev *dev, void *buf, size_t len, uint64_t off)
{
	struct dev_wb *wb = dev->d_wb;
	int hit = 0;

	if (!wb || !len || !__atomic_load_n(&wb->wb_count, __ATOMIC_SEQ_CST) ||
	    __atomic_load_n(&dev->d_fenced, __ATOMIC_SEQ_CST))
		return 0; /* fenced: its queued writes will not land, serve none */
	pthread_mutex_lock(&wb->wb_lock);
	for (struct wb_item *it = wb->wb_head; it; it = it->wi_next) {
		if (it->wi_off <= off && off + len <= it->wi_off + it->wi_len) {
			/* a writer may be issuing it: both only read the copy,
			 * freed under wb_lock once it is off the queue */
			if (buf)
				memcpy(buf, (const char *)it->wi_buf + (off - it->wi_off), len);
			hit = 1;
			break;
		}
	}
	pthread_mutex_unlock(&wb->wb_lock);
	if (hit && buf)
		stat_add(&dev->d_stats.ds_queue_read_bytes, len);
	return hit;
}

int dev_read(struct shoal_dev *dev, void *buf, size_t len, uint64_t off)
{
	int err;

	if (off + len > dev->d_size || off + len < off)
		return -EIO;
	if (dev_read_queued(dev, buf, len, off))
		return 0;
	err = dev_wait_range(dev, off, len);
	if (err)
		return err; /* (5): what is there is older than what was written */
	stat_add(&dev->d_stats.ds_reads, 1);
	stat_add(&dev->d_stats.ds_read_bytes, len);
	return dev->d_ops->pread(dev, buf, len, off);
}

static void account_write(struct shoal_dev *dev, uint64_t len)
{
	stat_add(&dev->d_stats.ds_writes, 1);
	stat_add(&dev->d_stats.ds_write_bytes, len);
}

/* Every write's checks and counters, before it is issued (the write
 * generation moves once it is, (6)). */
static int write_begin(struct shoal_dev *dev, size_t len, uint64_t off)
{
	if (dev->d_readonly)
		return -EROFS;
	if (__atomic_load_n(&dev->d_fenced, __ATOMIC_SEQ_CST))
		return -EIO;
	if (off + len > dev->d_size || off + len < off)
		return -EIO;
	if (dev_lease_check(dev)) /* (8); checked again when it is issued */
		return -EIO;
	account_write(dev, len);
	return 0;
}

int dev_write(struct shoal_dev *dev, const void *buf, size_t len, uint64_t off)
{
	int err = write_begin(dev, len, off);

	if (err)
		return err;
	dev_wait_range(dev, off, len);
	err = issue_write(dev, buf, len, off);
	write_done(dev, err, off, len);
	return err;
}

/* The write itself, after write_begin and the wait. */
static int issue_write(struct shoal_dev *dev, const void *buf, size_t len, uint64_t off)
{
	uint64_t t0 = dev_now_boot_ns();
	int err = dev_lease_check(dev); /* (8): right before the kernel has it */

	if (err)
		goto out;
	if (dev->d_ops == &dev_file_ops && len >= DEV_DIRECT_MIN) {
		err = file_pwrite_direct(dev, buf, len, off, DEV_PAGE);
		if (err != -EINVAL)
			goto out;
	}
	err = dev->d_ops->pwrite(dev, buf, len, off);
out:
	dev_log_io(dev, 'W', t0, off, len, err);
	return err;
}

int dev_write_small(struct shoal_dev *dev, const void *buf, size_t len, uint64_t off)
{
	int err = write_begin(dev, len, off);

	if (err)
		return err;
	dev_wait_range(dev, off, len);
	uint64_t t0 = dev_now_boot_ns();
	err = dev_lease_check(dev); /* (8) */
	if (!err) {
		err = -EINVAL;
		if (dev->d_ops == &dev_file_ops && len <= 65536)
			err = file_pwrite_direct(dev, buf, len, off, 512);
		if (err == -EINVAL)
			err = dev->d_ops->pwrite(dev, buf, len, off); /* no O_DIRECT here */
	}
	dev_log_io(dev, 'W', t0, off, len, err);
	write_done(dev, err, off, len);
	return err;
}

/* (8): one aligned bounce buffer per call; these are rare and small. */
int dev_read_uncached(struct shoal_dev *dev, void *buf, size_t len, uint64_t off)
{
	void *b;
	ssize_t n;
	int err;

	if (off + len > dev->d_size || off + len < off)
		return -EIO;
	err = dev_wait_range(dev, off, len);
	if (err)
		return err;
	stat_add(&dev->d_stats.ds_reads, 1);
	stat_add(&dev->d_stats.ds_read_bytes, len);
	if (dev->d_ops != &dev_file_ops || dev->d_dfd < 0 || !len || (len | off) & 511)
		return dev->d_ops->pread(dev, buf, len, off);
	if (posix_memalign(&b, 4096, len))
		return -ENOMEM;
	do
		n = pread(dev->d_dfd, b, len, (off_t)off);
	while (n < 0 && errno == EINTR);
	if (n == (ssize_t)len)
		memcpy(buf, b, len);
	err = n < 0 ? -errno : n == (ssize_t)len ? 0 : -EIO;
	free(b);
	if (err == -EINVAL) /* the file takes no O_DIRECT after all */
		err = dev->d_ops->pread(dev, buf, len, off);
	return err;
}

int dev_write_uncached(struct shoal_dev *dev, const void *buf, size_t len, uint64_t off)
{
	int err = write_begin(dev, len, off);

	if (err)
		return err;
	dev_wait_range(dev, off, len);
	err = -EINVAL;
	if (dev->d_ops == &dev_file_ops)
		err = file_pwrite_direct(dev, buf, len, off, 512);
	if (err == -EINVAL) {
		/* no O_DIRECT here (tmpfs, a test's fault device): a buffered
		 * write, synced, is what reaches the device */
		err = dev->d_ops->pwrite(dev, buf, len, off);
		if (!err)
			err = dev->d_ops->flush(dev);
	}
	return err;
}

int dev_flush(struct shoal_dev *dev)
{
	uint64_t gen;
	int err;

	if (dev->d_readonly)
		return 0;
	if (__atomic_load_n(&dev->d_fenced, __ATOMIC_SEQ_CST))
		return -EIO;
	if (dev->d_wb) { /* (5): the queue first; gen is sampled after it (6) */
		pthread_mutex_lock(&dev->d_wb->wb_lock);
		wb_wait_locked(dev->d_wb, 0, UINT64_MAX);
		err = dev->d_wb->wb_err;
		gen = __atomic_load_n(&dev->d_write_gen, __ATOMIC_SEQ_CST);
		pthread_mutex_unlock(&dev->d_wb->wb_lock);
		if (err)
			return err;
	} else {
		gen = __atomic_load_n(&dev->d_write_gen, __ATOMIC_SEQ_CST);
	}
	uint64_t t0 = dev_now_boot_ns();
	err = dev_lease_check(dev); /* (8) */
	if (!err) {
		stat_add(&dev->d_stats.ds_flushes, 1);
		err = dev->d_ops->flush(dev);
	}
	dev_log_io(dev, 'F', t0, 0, 0, err);
	if (err)
		return err;
	uint64_t cur = __atomic_load_n(&dev->d_flush_gen, __ATOMIC_SEQ_CST);
	while (cur < gen &&
	       !__atomic_compare_exchange_n(&dev->d_flush_gen, &cur, gen, 0, __ATOMIC_SEQ_CST,
					    __ATOMIC_SEQ_CST))
		;
	return 0;
}

int dev_flush_if_needed(struct shoal_dev *dev)
{
	if (__atomic_load_n(&dev->d_flush_gen, __ATOMIC_SEQ_CST) ==
	    __atomic_load_n(&dev->d_write_gen, __ATOMIC_SEQ_CST))
		return 0;
	return dev_flush(dev);
}

void dev_stats_get(struct shoal_dev *dev, struct shoal_dev_stats *out)
{
	out->ds_reads = __atomic_load_n(&dev->d_stats.ds_reads, __ATOMIC_RELAXED);
	out->ds_read_bytes = __atomic_load_n(&dev->d_stats.ds_read_bytes, __ATOMIC_RELAXED);
	out->ds_queue_read_bytes =
		__atomic_load_n(&dev->d_stats.ds_queue_read_bytes, __ATOMIC_RELAXED);
	out->ds_writes = __atomic_load_n(&dev->d_stats.ds_writes, __ATOMIC_RELAXED);
	out->ds_write_bytes = __atomic_load_n(&dev->d_stats.ds_write_bytes, __ATOMIC_RELAXED);
	out->ds_flushes = __atomic_load_n(&dev->d_stats.ds_flushes, __ATOMIC_RELAXED);
	out->ds_lease_refused = __atomic_load_n(&dev->d_stats.ds_lease_refused, __ATOMIC_RELAXED);
}

int dev_fd(struct shoal_dev *dev)
{
	if (__atomic_load_n(&dev->d_fenced, __ATOMIC_SEQ_CST))
		return -1;
	return dev->d_ops == &dev_file_ops ? dev->d_fd : -1;
}

void dev_fence(struct shoal_dev *dev)
{
	struct dev_wb *wb = dev->d_wb;

	__atomic_store_n(&dev->d_fenced, 1, __ATOMIC_SEQ_CST);
	if (wb) {
		/* (7): the writers drop what they have not begun (-EIO,
		 * wb_err); what they have begun lands before this returns */
		pthread_mutex_lock(&wb->wb_lock);
		for (;;) {
			struct wb_item *it = wb->wb_head;
			while (it && !it->wi_busy)
				it = it->wi_next;
			if (!it)
				break;
			pthread_cond_wait(&wb->wb_done, &wb->wb_lock);
		}
		pthread_mutex_unlock(&wb->wb_lock);
	}
	/* (7): buffered writes still in the kernel's page cache go now,
	 * not whenever it would write them back (another node may own
	 * those blocks by then); an error drops them as well.  Not once
	 * the lease is over (8): then nothing of this node's is sent */
	if (!dev->d_readonly && lease_valid(dev, NULL))
		(void)dev->d_ops->flush(dev);
}

void dev_account(struct shoal_dev *dev, int write, uint64_t bytes)
{
	if (write) {
		account_write(dev, bytes);
		__atomic_fetch_add(&dev->d_write_gen, 1, __ATOMIC_SEQ_CST);
	} else {
		stat_add(&dev->d_stats.ds_reads, 1);
		stat_add(&dev->d_stats.ds_read_bytes, bytes);
	}
}

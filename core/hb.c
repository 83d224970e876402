/*
 * hb.c - the on-disk heartbeat, after ext4's multiple-mount protection: a
 * lock manager only protects nodes that talk to it, so a writer that uses
 * the disk behind its back (a second machine mounting with lock=nolock, a
 * second lockd, mkfs or fsck run elsewhere) is found on the disk itself.
 *
 * Owns the heartbeat blocks of FORMAT.md 11.5 and the thread that rewrites
 * this node's one.  Invariants:
 *  (1) a mounted node writes exactly one block, once per period: its
 *      journal's (cluster) or the single-node block (lock=nolock), with
 *      hb_seq one more than the last time; nothing else of the node writes
 *      any heartbeat block;
 *  (2) every heartbeat read and write goes around the page caches
 *      (dev_read_uncached, dev_write_uncached), so what another machine
 *      wrote a moment ago is what is read;
 *  (3) hb_check refuses (-EBUSY) only on a change it saw: a LIVE block that
 *      stays the same for longer than two of its writer's periods belongs
 *      to a writer that is gone (crashed), and may be taken over;
 *  (4) before each write the thread reads its block back: a block that is
 *      not what it wrote last means a second writer took it over, and the
 *      node stops writing to the device at once (dev_fence) and says so;
 *      so does a failed write.  Either way the heartbeat stops, so other
 *      machines may take over after the check interval;
 *  (5) the watch of (3) is skipped for a writer whose fate is known: the
 *      block names this machine (its boot id), this pid namespace and a
 *      process (pid and start time).  That process gone, replaced by
 *      another with its pid, or left with no thread that can run: the
 *      block is taken over at once.  Running: -EBUSY at once.  Stopped
 *      (SIGSTOP): watched, as a paused node a lock manager may have fenced
 *      and replaced must not block its replacement.  This process
 *      itself: running if one of its writers wrote the block, else gone (a
 *      mount torn down without its clean mark).  A writer in another
 *      container or on another machine is always watched.
 *
 * A race is left: two programs that check the same CLEAN block at the same
 * moment both start; (4) finds it at the first period (documented in
 * README's safety section).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hb.h"
#include "meta.h"

struct hb_writer {
	struct shoal_dev *hw_dev;
	uint64_t hw_addr; /* byte offset of the block */
	uint32_t hw_bsize;
	uint32_t hw_index;
	unsigned hw_ms;
	void *hw_buf;  /* the block as last written; owned by the thread */
	void *hw_read; /* what is read back */
	pthread_t hw_thread;
	pthread_mutex_t hw_lock;
	pthread_cond_t hw_cond;
	int hw_stop;   /* protected by hw_lock */
	int hw_failed; /* atomic: the thread gave up, (4) */
	int hw_err;    /* the failure; read after the join */
	uint64_t hw_seq0; /* the sequence of the first write, (5) */
	struct hb_writer *hw_next; /* on hb_live, under hb_live_lock */
};

static void hb_unlist(struct hb_writer *w);

static int64_t hb_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec;
}

static void hb_fmt_time(int64_t t, char *buf, size_t len)
{
	time_t tt = (time_t)t;
	struct tm tm;

	if (!localtime_r(&tt, &tm) || !strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm))
		snprintf(buf, len, "%lld", (long long)t);
}

static const char *hb_what(const struct shoal_sb *sb, uint32_t index, char *buf, size_t len)
{
	if (index == sb->sb_jcount)
		snprintf(buf, len, "single-node (lock=nolock) heartbeat");
	else
		snprintf(buf, len, "journal %u's heartbeat", index);
	return buf;
}

/* One line about the writer of block b (index): who and when. */
static void hb_describe(const struct shoal_sb *sb, uint32_t index, const void *b, int valid,
			char *msg, size_t msglen)
{
	const struct shoal_hbeat *hb = b;
	char when[40], what[48];

	hb_what(sb, index, what, sizeof(what));
	if (!valid) {
		snprintf(msg, msglen, "%s (block %llu) is not a valid heartbeat block", what,
			 (unsigned long long)(sb->sb_hbfirst + index));
		return;
	}
	hb_fmt_time(hb->hb_time, when, sizeof(when));
	snprintf(msg, msglen, "%s: node '%.*s', last update %s (sequence %llu, every %u ms)", what,
		 (int)sizeof(hb->hb_node), hb->hb_node, when, (unsigned long long)hb->hb_seq,
		 hb->hb_interval_ms);
}

static int hb_valid(const struct shoal_sb *sb, uint32_t index, const void *b)
{
	const struct shoal_hbeat *hb = b;

	return !meta_check(b, sb->sb_bsize, SHOAL_MT_HBEAT, sb->sb_hbfirst + index) &&
	       hb->hb_index == index;
}

static int hb_read(struct shoal_dev *dev, const struct shoal_sb *sb, uint32_t index, void *b)
{
	return dev_read_uncached(dev, b, sb->sb_bsize, (sb->sb_hbfirst + index) * sb->sb_bsize);
}

static void hb_sleep_ms(unsigned ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000 };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static uint64_t hb_mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* --- (5): a writer on this machine that is gone ------------------------- */

static pthread_mutex_t hb_live_lock = PTHREAD_MUTEX_INITIALIZER;
static struct hb_writer *hb_live; /* this process's running writers */

/* This machine's boot id and this process's pid namespace; -1 if either
 * cannot be known (then nothing is ever taken for gone). */
static int hb_host(uint8_t boot[16], uint64_t *pidns)
{
	char text[64];
	struct stat st;
	unsigned n = 0;
	ssize_t len;
	int fd;

	fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	len = read(fd, text, sizeof(text) - 1);
	close(fd);
	if (len <= 0)
		return -1;
	text[len] = '\0';
	for (const char *c = text; *c && *c != '\n' && n < 32; c++) {
		unsigned v;

		if (*c == '-')
			continue;
		if (*c >= '0' && *c <= '9')
			v = (unsigned)(*c - '0');
		else if (*c >= 'a' && *c <= 'f')
			v = (unsigned)(*c - 'a' + 10);
		else
			return -1;
		boot[n / 2] = (uint8_t)(n % 2 ? boot[n / 2] | v : v << 4);
		n++;
	}
	if (n != 32 || stat("/proc/self/ns/pid", &st))
		return -1;
	*pidns = (uint64_t)st.st_ino;
	return 0;
}

/* The start time of process pid (clock ticks after boot, field 22 of
 * /proc/PID/stat), and whether a thread of it can still run: 2 one runs
 * (a zombie leader with live threads does), 1 the live ones are stopped, 0
 * none is left (zombies).  0, or -ENOENT: no such process. */
static int hb_proc(pid_t pid, uint64_t *start, int *runs)
{
	char path[64], line[1024];
	struct dirent *de;
	const char *f;
	ssize_t len;
	DIR *d;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT || errno == ESRCH ? -ENOENT : -errno;
	len = read(fd, line, sizeof(line) - 1);
	close(fd);
	if (len <= 0)
		return -ENOENT;
	line[len] = '\0';
	f = strrchr(line, ')');
	for (int field = 2; f && field < 22; field++) /* field 2 ends at f */
		f = strchr(f + 1, ' ');
	if (!f || sscanf(f + 1, "%" SCNu64, start) != 1)
		return -EIO;
	*runs = 0;
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	d = opendir(path);
	if (!d)
		return errno == ENOENT ? -ENOENT : -errno;
	while (!*runs && (de = readdir(d))) {
		const char *state;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%.20s/stat", (int)pid, de->d_name);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue; /* the thread is gone */
		len = read(fd, line, sizeof(line) - 1);
		close(fd);
		if (len <= 0)
			continue;
		line[len] = '\0';
		state = strrchr(line, ')');
		if (!state || strlen(state) < 3 || !strchr("ZXTt", state[2]))
			*runs = 2; /* running, sleeping, in I/O: it can write */
		else if (state[2] == 'T' || state[2] == 't')
			*runs = 1; /* stopped: it can write once continued */
	}
	closedir(d);
	return 0;
}

enum hb_owner { HB_UNKNOWN, HB_GONE, HB_RUNNING };

/* (5): what is known of the writer of LIVE block hb from this machine */
static enum hb_owner hb_owner(const struct shoal_hbeat *hb)
{
	static const uint8_t zero[16];
	uint8_t boot[16];
	uint64_t pidns, start;
	int mine = 0, runs, err;

	if (!hb->hb_pid || !memcmp(hb->hb_boot, zero, sizeof(zero)) || hb_host(boot, &pidns) ||
	    memcmp(boot, hb->hb_boot, sizeof(boot)) || pidns != hb->hb_pidns)
		return HB_UNKNOWN;
	if ((pid_t)hb->hb_pid != getpid()) {
		err = hb_proc((pid_t)hb->hb_pid, &start, &runs);
		if (err == -ENOENT || (!err && (start != hb->hb_pstart || !runs)))
			return HB_GONE; /* no such process, another one, or a zombie */
		/* stopped: a paused node a lock manager may have fenced and
		 * replaced; watched as one on another machine is */
		return !err && runs == 2 ? HB_RUNNING : HB_UNKNOWN;
	}
	/* this process: one of its writers?  hw_seq0 and the node never
	 * change while a writer is on the list */
	pthread_mutex_lock(&hb_live_lock);
	for (struct hb_writer *w = hb_live; w && !mine; w = w->hw_next) {
		const struct shoal_hbeat *own = w->hw_buf;

		mine = w->hw_index == hb->hb_index && hb->hb_seq >= w->hw_seq0 &&
		       hb->hb_seq - w->hw_seq0 < (1ull << 40) &&
		       !strncmp(own->hb_node, hb->hb_node, sizeof(hb->hb_node));
	}
	pthread_mutex_unlock(&hb_live_lock);
	return mine ? HB_RUNNING : HB_GONE;
}

int hb_check(struct shoal_dev *dev, const struct shoal_sb *sb, uint32_t slot, int nowait,
	     char *msg, size_t msglen)
{
	uint32_t idx[2], n = 0, live = 0, gone = 0, period = 0;
	uint8_t *first = NULL, *now = NULL;
	uint32_t bs = sb->sb_bsize, count;
	int err = 0;

	msg[0] = '\0';
	if (!(sb->sb_feat_incompat & SHOAL_FEAT_INCOMPAT_HEARTBEAT))
		return -EOPNOTSUPP;
	if (slot != HB_ALL) {
		if (slot >= sb->sb_jcount)
			return -EINVAL;
		idx[n++] = slot;
		idx[n++] = sb->sb_jcount;
	}
	count = slot == HB_ALL ? sb->sb_jcount + 1 : n;
	first = malloc((size_t)count * bs);
	now = malloc(bs);
	if (!first || !now) {
		err = -ENOMEM;
		goto out;
	}
	for (uint32_t i = 0; i < count; i++) {
		uint32_t index = slot == HB_ALL ? i : idx[i];
		const struct shoal_hbeat *hb = (const void *)(first + (size_t)i * bs);

		err = hb_read(dev, sb, index, first + (size_t)i * bs);
		if (err)
			goto out;
		if (hb_valid(sb, index, hb) && hb->hb_state == SHOAL_HB_CLEAN)
			continue;
		if (!live++)
			hb_describe(sb, index, hb, hb_valid(sb, index, hb), msg, msglen);
		if (hb_valid(sb, index, hb)) {
			uint32_t ms = hb->hb_interval_ms;

			enum hb_owner o = hb_owner(hb);

			if (o == HB_RUNNING) { /* (5): no need to watch */
				size_t used = strlen(msg);

				if (live == 1)
					snprintf(msg + used, msglen - used,
						 "; its process %u on this machine is running",
						 hb->hb_pid);
				else
					hb_describe(sb, index, hb, 1, msg, msglen);
				err = -EBUSY;
				goto out;
			}
			gone += o == HB_GONE;
			ms = ms < HB_MIN_MS ? HB_MIN_MS : ms > HB_MAX_MS ? HB_MAX_MS : ms;
			period = ms > period ? ms : period;
		}
	}
	if (!live)
		goto out; /* 0 */
	if (gone == live) { /* (5): no need to watch */
		size_t used = strlen(msg);

		snprintf(msg + used, msglen - used, "; its process on this machine is gone");
		err = 1;
		goto out;
	}
	if (nowait) {
		err = -EBUSY;
		goto out;
	}
	/* (3): a live writer rewrites its block within one period; two and a
	 * bit leave room for a late one.  Bounded: period <= HB_MAX_MS. */
	if (!period)
		period = HB_DEFAULT_MS;
	uint64_t deadline = hb_mono_ms() + 2ull * period + (period < 1000 ? period : 1000);
	unsigned step = period / 4 < 50 ? 50 : period / 4;
	for (;;) {
		hb_sleep_ms(step);
		for (uint32_t i = 0; i < count; i++) {
			uint32_t index = slot == HB_ALL ? i : idx[i];
			const uint8_t *was = first + (size_t)i * bs;

			err = hb_read(dev, sb, index, now);
			if (err)
				goto out;
			if (memcmp(was, now, bs)) {
				hb_describe(sb, index, now, hb_valid(sb, index, now), msg, msglen);
				err = -EBUSY;
				goto out;
			}
		}
		if (hb_mono_ms() >= deadline)
			break;
	}
	err = 1; /* stale: msg describes the first LIVE block */
out:
	free(first);
	free(now);
	return err;
}

int hb_default_ms(unsigned *ms)
{
	const char *s = getenv("SHOAL_HEARTBEAT_MS");
	char *end;
	unsigned long v;

	*ms = HB_DEFAULT_MS;
	if (!s || !*s)
		return 0;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || *end || v < HB_MIN_MS || v > HB_MAX_MS)
		return -EINVAL;
	*ms = (unsigned)v;
	return 0;
}

/* Seal the next state of the block into hw_buf and write it. */
static int hb_write(struct hb_writer *w, uint32_t state)
{
	struct shoal_hbeat *hb = w->hw_buf;

	hb->hb_seq++;
	hb->hb_state = state;
	hb->hb_time = hb_now();
	meta_seal(w->hw_buf, w->hw_bsize, SHOAL_MT_HBEAT, w->hw_addr / w->hw_bsize, 0);
	return dev_write_uncached(w->hw_dev, w->hw_buf, w->hw_bsize, w->hw_addr);
}

static void hb_fail(struct hb_writer *w, int err, const char *why)
{
	const struct shoal_hbeat *other = w->hw_read;

	if (err == -EBUSY)
		fprintf(stderr,
			"shoal: heartbeat block %llu was rewritten by node '%.*s' (sequence %llu): "
			"another machine is using this filesystem; stopping every write to the "
			"device\n",
			(unsigned long long)(w->hw_addr / w->hw_bsize), (int)sizeof(other->hb_node),
			other->hb_node, (unsigned long long)other->hb_seq);
	else
		fprintf(stderr,
			"shoal: heartbeat block %llu: %s: %s; stopping every write to the device "
			"(another machine may take the filesystem over)\n",
			(unsigned long long)(w->hw_addr / w->hw_bsize), why, strerror(-err));
	w->hw_err = err;
	dev_fence(w->hw_dev);
	__atomic_store_n(&w->hw_failed, 1, __ATOMIC_SEQ_CST);
}

static void *hb_thread(void *arg)
{
	struct hb_writer *w = arg;
	struct timespec ts;
	int err;

	pthread_mutex_lock(&w->hw_lock);
	clock_gettime(CLOCK_MONOTONIC, &ts);
	while (!w->hw_stop) {
		ts.tv_sec += w->hw_ms / 1000;
		ts.tv_nsec += (long)(w->hw_ms % 1000) * 1000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		while (!w->hw_stop && pthread_cond_timedwait(&w->hw_cond, &w->hw_lock, &ts) == 0)
			;
		if (w->hw_stop)
			break;
		pthread_mutex_unlock(&w->hw_lock);
		/* (4): still ours? */
		err = dev_read_uncached(w->hw_dev, w->hw_read, w->hw_bsize, w->hw_addr);
		if (err) {
			hb_fail(w, err, "cannot read it back");
		} else if (memcmp(w->hw_read, w->hw_buf, w->hw_bsize)) {
			hb_fail(w, -EBUSY, NULL);
		} else {
			err = hb_write(w, SHOAL_HB_LIVE);
			if (err)
				hb_fail(w, err, "cannot write it");
		}
		pthread_mutex_lock(&w->hw_lock);
		if (w->hw_failed)
			break;
		clock_gettime(CLOCK_MONOTONIC, &ts); /* no burst after a slow write */
	}
	pthread_mutex_unlock(&w->hw_lock);
	return NULL;
}

int hb_start(struct shoal_dev *dev, const struct shoal_sb *sb, uint32_t index,
	     const char *node, unsigned ms, struct hb_writer **out)
{
	struct hb_writer *w = calloc(1, sizeof(*w));
	struct shoal_hbeat *hb;
	pthread_condattr_t ca;
	uint64_t seq = 0;
	int err, runs;

	if (!w)
		return -ENOMEM;
	w->hw_dev = dev;
	w->hw_bsize = sb->sb_bsize;
	w->hw_index = index;
	w->hw_addr = (sb->sb_hbfirst + index) * sb->sb_bsize;
	w->hw_ms = ms;
	if (posix_memalign(&w->hw_buf, 4096, w->hw_bsize) ||
	    posix_memalign(&w->hw_read, 4096, w->hw_bsize)) {
		err = -ENOMEM;
		goto out_free;
	}
	memset(w->hw_buf, 0, w->hw_bsize);
	hb = w->hw_buf;
	/* a random start: two writers racing for one block (hb.c's race)
	 * never write the same sequence */
	if (getrandom(&seq, sizeof(seq), 0) != sizeof(seq))
		seq = (uint64_t)hb_now() << 16;
	hb->hb_seq = seq & ((1ull << 48) - 1);
	hb->hb_index = index;
	hb->hb_interval_ms = ms;
	snprintf(hb->hb_node, sizeof(hb->hb_node), "%s", node);
	if (!hb_host(hb->hb_boot, &hb->hb_pidns) && !hb_proc(getpid(), &hb->hb_pstart, &runs))
		hb->hb_pid = (uint32_t)getpid();
	else
		memset(hb->hb_boot, 0, sizeof(hb->hb_boot)); /* (5) never applies */
	w->hw_seq0 = hb->hb_seq + 1; /* hb_write bumps it */
	pthread_mutex_lock(&hb_live_lock); /* (5): before the block names us */
	w->hw_next = hb_live;
	hb_live = w;
	pthread_mutex_unlock(&hb_live_lock);
	err = hb_write(w, SHOAL_HB_LIVE);
	if (err)
		goto out_unlist;
	pthread_mutex_init(&w->hw_lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&w->hw_cond, &ca);
	pthread_condattr_destroy(&ca);
	err = -pthread_create(&w->hw_thread, NULL, hb_thread, w);
	if (err) {
		pthread_cond_destroy(&w->hw_cond);
		pthread_mutex_destroy(&w->hw_lock);
		goto out_unlist;
	}
	*out = w;
	return 0;
out_unlist:
	hb_unlist(w);
out_free:
	free(w->hw_buf);
	free(w->hw_read);
	free(w);
	return err;
}

static void hb_unlist(struct hb_writer *w)
{
	pthread_mutex_lock(&hb_live_lock);
	for (struct hb_writer **p = &hb_live; *p; p = &(*p)->hw_next) {
		if (*p == w) {
			*p = w->hw_next;
			break;
		}
	}
	pthread_mutex_unlock(&hb_live_lock);
}

int hb_failed(struct hb_writer *w)
{
	return __atomic_load_n(&w->hw_failed, __ATOMIC_SEQ_CST);
}

int hb_stop(struct hb_writer *w, int clean)
{
	int err;

	pthread_mutex_lock(&w->hw_lock);
	w->hw_stop = 1;
	pthread_cond_signal(&w->hw_cond);
	pthread_mutex_unlock(&w->hw_lock);
	pthread_join(w->hw_thread, NULL);
	err = w->hw_err;
	if (!err && clean) {
		err = hb_write(w, SHOAL_HB_CLEAN);
		if (err)
			fprintf(stderr,
				"shoal: heartbeat block %llu: cannot mark it clean: %s (the next "
				"mount waits to see it is not in use)\n",
				(unsigned long long)(w->hw_addr / w->hw_bsize), strerror(-err));
	}
	hb_unlist(w);
	pthread_cond_destroy(&w->hw_cond);
	pthread_mutex_destroy(&w->hw_lock);
	free(w->hw_buf);
	free(w->hw_read);
	free(w);
	return err;
}

/* The superblock at blkno of block size bs, if it is good (valid and
 * sane: FORMAT.md 3) and its heartbeat blocks lie on the device. */
static int hb_sb_at(struct shoal_dev *dev, uint32_t bs, uint64_t blkno, struct shoal_sb *sb)
{
	void *b;
	int err;

	if (bs > dev->d_size || (blkno + 1) * bs > dev->d_size)
		return -ENOENT;
	b = malloc(bs);
	if (!b)
		return -ENOMEM;
	err = dev_read_uncached(dev, b, bs, blkno * bs);
	if (!err && (meta_check(b, bs, SHOAL_MT_SB, blkno) ||
		     ((const struct shoal_sb *)b)->sb_bsize != bs ||
		     meta_sb_insane(b, dev->d_size)))
		err = -ENOENT;
	if (!err) {
		memcpy(sb, b, sizeof(*sb));
		if (blkno && sb->sb_blocks != blkno + 1)
			err = -ENOENT; /* not the backup of this device's filesystem */
		/* the heartbeat blocks must lie on the device */
		if ((sb->sb_feat_incompat & SHOAL_FEAT_INCOMPAT_HEARTBEAT) &&
		    (sb->sb_jcount == 0 || sb->sb_jcount > 256 ||
		     (sb->sb_hbfirst + sb->sb_jcount + 1) * sb->sb_bsize > dev->d_size))
			err = -ENOENT;
	}
	free(b);
	return err;
}

int hb_read_sb(struct shoal_dev *dev, struct shoal_sb *sb)
{
	uint8_t first[1024];
	const struct shoal_sb *s = (const void *)first;
	int err;

	if (dev->d_size < sizeof(first))
		return -ENOENT;
	err = dev_read_uncached(dev, first, sizeof(first), 0);
	if (err)
		return err;
	/* the superblock the mount and fsck choose: a good primary, else a
	 * good backup in the device's last block (FORMAT.md 3) */
	if (s->sb_header.mh_magic == SHOAL_MAGIC && s->sb_header.mh_type == SHOAL_MT_SB &&
	    s->sb_bsize >= SHOAL_MIN_BSIZE && s->sb_bsize <= SHOAL_MAX_BSIZE &&
	    !(s->sb_bsize & (s->sb_bsize - 1))) {
		err = hb_sb_at(dev, s->sb_bsize, 0, sb);
		if (err != -ENOENT)
			return err;
	}
	for (uint32_t bs = SHOAL_MIN_BSIZE; bs <= SHOAL_MAX_BSIZE; bs <<= 1) {
		if (dev->d_size / bs < 2)
			break;
		err = hb_sb_at(dev, bs, dev->d_size / bs - 1, sb);
		if (err != -ENOENT)
			return err;
	}
	return -ENOENT;
}

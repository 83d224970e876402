/*
 * dev_fault.c - a fault-injecting device for tests: it wraps a lower device
 * (usually a dev_open'ed image file) and behaves like a disk with a volatile
 * write cache that can lose power.
 *
 * Writes land in an in-memory overlay of 4 KiB pages (a partial write merges
 * into the page read first from below); a flush writes the overlay to the
 * lower device, flushes that, and empties the overlay; reads see the overlay
 * first.  dev_fault_cut() is the power cut: what was not flushed is lost,
 * or with a seed a pseudo-random subset of its pages reaches the lower
 * device (writes torn and reordered) and the rest is lost.
 *
 * The machine may also "die" at a chosen write (fc_cut_at_write): the
 * overlay as it is then is frozen, and nothing written or flushed later
 * reaches the lower device.  The wrapper keeps answering as if nothing had
 * happened - later writes go to a second overlay that reads see, flushes
 * report success - so the filesystem above runs on unaware; a cut then
 * decides what of the frozen overlay survives.  After a cut it goes on the
 * same way, so the dead filesystem can still be unmounted to free it.
 *
 *   LIVE --write number fc_cut_at_write--> DEAD --dev_fault_cut--> OFF
 *   LIVE --dev_fault_cut--> OFF
 *
 * The death can also be the process's own (fc_die_kill, shoal-mount's
 * SHOAL_TEST_POWER_CUT): at write fc_cut_at_write the pages of the overlay
 * that fc_die_keep_seed picks reach the lower device (as dev_fault_cut
 * would write them), a line on stderr says so, and the process SIGKILLs
 * itself while the writing thread holds f_lock, so no other thread's
 * flush or write completes after the death: nothing the process answers
 * after it (an fsync's reply, a lock it hands on) can claim what is lost.
 *
 * The wrapper does not own the lower device: the caller closes that after
 * the wrapper (shoal_unmount closes the wrapper).  Closing a LIVE wrapper
 * writes its overlay to the lower device without a flush (a process exit:
 * the host keeps what was written); closing a DEAD or OFF one does not.
 *
 * Invariants (f_lock):
 *  (1) the lower device changes only by a LIVE flush, by a cut with a seed
 *      (pages of what was unflushed at death or at the cut), or by the close
 *      of a LIVE wrapper;
 *  (2) a read returns, per byte, the live overlay, else the frozen overlay,
 *      else the lower device: always what the writes so far made of it;
 *  (3) f_frozen is empty while LIVE; f_live holds every write since the last
 *      flush (LIVE), or since death or the cut;
 *  (4) counting is 0-based from the last dev_fault_set: with fc_cut_at_write
 *      N >= 0, writes 0..N-1 count and write N and later are lost; write
 *      fc_fail_write_at (flush fc_fail_flush_at) fails once with fc_errno
 *      and changes nothing.  Negative values turn a fault off;
 *  (5) a read that touches [fc_bad_read_lo, fc_bad_read_hi) fails with
 *      fc_errno and copies nothing, as a bad sector range does; writes
 *      there succeed (a disk remaps on write, but the test wants the read
 *      to stay bad until it says otherwise).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "dev.h"

#define FP_SIZE 4096u

struct fpage {
	uint64_t fp_index; /* byte offset / FP_SIZE */
	struct fpage *fp_next;
	uint8_t fp_data[FP_SIZE];
};

struct fmap {
	struct fpage **m_hash;
	uint64_t m_mask; /* hash slots - 1, 0 when unallocated */
	uint64_t m_count;
};

enum { F_LIVE, F_DEAD, F_OFF };

struct fault {
	struct shoal_dev *f_lower;
	pthread_mutex_t f_lock;
	struct fmap f_live;   /* f_lock */
	struct fmap f_frozen; /* f_lock */
	int f_state;          /* f_lock */
	struct dev_fault_cfg f_cfg;
	int64_t f_wseen, f_fseen; /* since dev_fault_set */
	uint64_t f_writes;        /* since dev_fault_wrap */
};

static uint64_t slot(uint64_t idx, uint64_t mask)
{
	return (idx * 0x9e3779b97f4a7c15ull >> 20) & mask;
}

static struct fpage *map_find(struct fmap *m, uint64_t idx)
{
	struct fpage *p = m->m_mask ? m->m_hash[slot(idx, m->m_mask)] : NULL;
	while (p && p->fp_index != idx)
		p = p->fp_next;
	return p;
}

static int map_grow(struct fmap *m)
{
	uint64_t nmask = m->m_mask ? m->m_mask * 2 + 1 : 255;
	struct fpage **nh = calloc(nmask + 1, sizeof(*nh));

	if (!nh)
		return -ENOMEM;
	for (uint64_t i = 0; m->m_mask && i <= m->m_mask; i++) {
		struct fpage *p = m->m_hash[i], *n;
		for (; p; p = n) {
			uint64_t s = slot(p->fp_index, nmask);
			n = p->fp_next;
			p->fp_next = nh[s];
			nh[s] = p;
		}
	}
	free(m->m_hash);
	m->m_hash = nh;
	m->m_mask = nmask;
	return 0;
}

static int map_insert(struct fmap *m, struct fpage *p)
{
	if (m->m_count >= m->m_mask && map_grow(m))
		return -ENOMEM;
	uint64_t s = slot(p->fp_index, m->m_mask);
	p->fp_next = m->m_hash[s];
	m->m_hash[s] = p;
	m->m_count++;
	return 0;
}

static void map_clear(struct fmap *m)
{
	for (uint64_t i = 0; m->m_mask && i <= m->m_mask; i++) {
		struct fpage *p = m->m_hash[i], *n;
		for (; p; p = n) {
			n = p->fp_next;
			free(p);
		}
	}
	free(m->m_hash);
	*m = (struct fmap){ 0 };
}

/* Bytes of page idx that lie on the device (the last page may be short). */
static size_t page_len(struct fault *f, uint64_t idx)
{
	uint64_t off = idx * FP_SIZE, size = f->f_lower->d_size;
	return size - off < FP_SIZE ? (size_t)(size - off) : FP_SIZE;
}

static int cmp_page(const void *a, const void *b)
{
	uint64_t x = (*(struct fpage *const *)a)->fp_index, y = (*(struct fpage *const *)b)->fp_index;
	return x < y ? -1 : x > y;
}

/*
 * Write the pages of m to the lower device in address order, runs of
 * adjacent pages as one write; with a seed, only a pseudo-random half.
 */
static int map_apply(struct fault *f, struct fmap *m, uint64_t seed)
{
	struct fpage **v = malloc((m->m_count + 1) * sizeof(*v));
	uint8_t *run = malloc(64 * FP_SIZE);
	size_t n = 0;
	int err = 0;

	if (!v || !run) {
		err = -ENOMEM;
		goto out;
	}
	for (uint64_t i = 0; m->m_mask && i <= m->m_mask; i++) {
		for (struct fpage *p = m->m_hash[i]; p; p = p->fp_next) {
			if (seed) { /* splitmix64 */
				uint64_t z = (seed += 0x9e3779b97f4a7c15ull);
				z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
				z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
				if (((z ^ (z >> 31)) & 1) == 0)
					continue;
			}
			v[n++] = p;
		}
	}
	qsort(v, n, sizeof(*v), cmp_page);
	for (size_t i = 0, k; i < n && !err; i = k) {
		size_t len = 0;
		for (k = i; k < n && k - i < 64 && v[k]->fp_index == v[i]->fp_index + (k - i); k++) {
			size_t l = page_len(f, v[k]->fp_index);
			memcpy(run + len, v[k]->fp_data, l);
			len += l;
		}
		err = dev_write(f->f_lower, run, len, v[i]->fp_index * FP_SIZE);
	}
out:
	free(v);
	free(run);
	return err;
}

static struct fpage *page_find(struct fault *f, uint64_t idx)
{
	struct fpage *p = map_find(&f->f_live, idx);
	return p ? p : map_find(&f->f_frozen, idx);
}

static int fault_pread(struct shoal_dev *dev, void *buf, size_t len, uint64_t off)
{
	struct fault *f = dev->d_priv;
	uint8_t *out = buf;
	int err = 0;

	pthread_mutex_lock(&f->f_lock);
	if (f->f_cfg.fc_bad_read_hi && off < f->f_cfg.fc_bad_read_hi &&
	    off + len > f->f_cfg.fc_bad_read_lo)
		err = -f->f_cfg.fc_errno; /* (5) */
	while (len && !err) {
		size_t in = (size_t)(off % FP_SIZE), n = FP_SIZE - in < len ? FP_SIZE - in : len;
		struct fpage *p = page_find(f, off / FP_SIZE);

		if (p) {
			memcpy(out, p->fp_data + in, n);
		} else { /* one lower read for the pages no overlay holds */
			while (n < len && !page_find(f, (off + n) / FP_SIZE))
				n += len - n < FP_SIZE ? len - n : FP_SIZE;
			err = dev_read(f->f_lower, out, n, off);
		}
		out += n;
		off += n;
		len -= n;
	}
	pthread_mutex_unlock(&f->f_lock);
	return err;
}

/* (fc_die_kill): the process dies at write n, f_lock held; never returns. */
static void die_now(struct fault *f, int64_t n)
{
	uint64_t pages = f->f_frozen.m_count;
	int err = 0;

	if (f->f_cfg.fc_die_keep_seed)
		err = map_apply(f, &f->f_frozen, f->f_cfg.fc_die_keep_seed);
	fprintf(stderr,
		"shoal: SHOAL_TEST_POWER_CUT: power cut at write %" PRId64
		" (%" PRIu64 " unflushed pages, some kept by seed %u%s%s): killing this process\n",
		n, pages, f->f_cfg.fc_die_keep_seed, err ? ": " : "", err ? strerror(-err) : "");
	fflush(stderr);
	kill(getpid(), SIGKILL);
	for (;;)
		pause(); /* f_lock stays held: no other I/O completes */
}

static int fault_pwrite(struct shoal_dev *dev, const void *buf, size_t len, uint64_t off)
{
	struct fault *f = dev->d_priv;
	const uint8_t *in = buf;
	int64_t n;
	int err = 0;

	pthread_mutex_lock(&f->f_lock);
	f->f_writes++;
	n = f->f_wseen++;
	if (f->f_state == F_LIVE && f->f_cfg.fc_cut_at_write >= 0 && n >= f->f_cfg.fc_cut_at_write) {
		f->f_frozen = f->f_live; /* the machine dies: this is all it wrote */
		f->f_live = (struct fmap){ 0 };
		f->f_state = F_DEAD;
		if (f->f_cfg.fc_die_kill)
			die_now(f, n);
	}
	if (n == f->f_cfg.fc_fail_write_at) {
		err = -f->f_cfg.fc_errno;
		goto out;
	}
	while (len && !err) {
		uint64_t idx = off / FP_SIZE;
		size_t at = (size_t)(off % FP_SIZE), c = FP_SIZE - at < len ? FP_SIZE - at : len;
		struct fpage *p = map_find(&f->f_live, idx);

		if (!p) {
			p = calloc(1, sizeof(*p));
			if (!p) {
				err = -ENOMEM;
				break;
			}
			p->fp_index = idx;
			struct fpage *q = map_find(&f->f_frozen, idx); /* what reads saw */
			if (q)
				memcpy(p->fp_data, q->fp_data, FP_SIZE);
			else if (at || c < page_len(f, idx))
				err = dev_read(f->f_lower, p->fp_data, page_len(f, idx), idx * FP_SIZE);
			if (!err)
				err = map_insert(&f->f_live, p);
			if (err) {
				free(p);
				break;
			}
		}
		memcpy(p->fp_data + at, in, c);
		in += c;
		off += c;
		len -= c;
	}
out:
	pthread_mutex_unlock(&f->f_lock);
	return err;
}

static int fault_flush(struct shoal_dev *dev)
{
	struct fault *f = dev->d_priv;
	int err = 0;

	pthread_mutex_lock(&f->f_lock);
	int64_t n = f->f_fseen++;
	if (n == f->f_cfg.fc_fail_flush_at) {
		err = -f->f_cfg.fc_errno;
		goto out;
	}
	if (f->f_state != F_LIVE)
		goto out; /* dead or off: pretend */
	err = map_apply(f, &f->f_live, 0);
	if (!err)
		err = dev_flush(f->f_lower);
	if (!err)
		map_clear(&f->f_live);
out:
	pthread_mutex_unlock(&f->f_lock);
	return err;
}

static void fault_close(struct shoal_dev *dev)
{
	struct fault *f = dev->d_priv;

	if (f->f_state == F_LIVE)
		map_apply(f, &f->f_live, 0);
	map_clear(&f->f_live);
	map_clear(&f->f_frozen);
	pthread_mutex_destroy(&f->f_lock);
	free(f);
}

static const struct shoal_dev_ops fault_ops = {
	.pread = fault_pread,
	.pwrite = fault_pwrite,
	.flush = fault_flush,
	.close = fault_close,
};

int dev_fault_wrap(struct shoal_dev *lower, struct shoal_dev **out)
{
	struct shoal_dev *dev = calloc(1, sizeof(*dev));
	struct fault *f = calloc(1, sizeof(*f));

	if (!dev || !f) {
		free(dev);
		free(f);
		return -ENOMEM;
	}
	pthread_mutex_init(&f->f_lock, NULL);
	f->f_lower = lower;
	f->f_state = F_LIVE;
	f->f_cfg = (struct dev_fault_cfg){ .fc_fail_write_at = -1, .fc_fail_flush_at = -1,
					   .fc_errno = EIO, .fc_cut_at_write = -1 };
	dev->d_ops = &fault_ops;
	dev->d_priv = f;
	dev->d_fd = lower->d_fd;
	dev->d_dfd = -1; /* every write goes through fault_ops */
	dev->d_readonly = lower->d_readonly;
	dev->d_size = lower->d_size;
	*out = dev;
	return 0;
}

void dev_fault_set(struct shoal_dev *dev, const struct dev_fault_cfg *cfg)
{
	struct fault *f = dev->d_priv;

	pthread_mutex_lock(&f->f_lock);
	f->f_cfg = *cfg;
	if (f->f_cfg.fc_errno <= 0)
		f->f_cfg.fc_errno = EIO;
	f->f_wseen = f->f_fseen = 0;
	pthread_mutex_unlock(&f->f_lock);
}

void dev_fault_cut(struct shoal_dev *dev, unsigned keep_seed)
{
	struct fault *f = dev->d_priv;

	pthread_mutex_lock(&f->f_lock);
	if (f->f_state == F_LIVE) {
		f->f_frozen = f->f_live; /* reads keep seeing it, the disk may not */
		f->f_live = (struct fmap){ 0 };
	}
	if (f->f_state != F_OFF && keep_seed)
		map_apply(f, &f->f_frozen, keep_seed);
	f->f_state = F_OFF;
	pthread_mutex_unlock(&f->f_lock);
}

uint64_t dev_fault_writes(struct shoal_dev *dev)
{
	struct fault *f = dev->d_priv;
	uint64_t n;

	pthread_mutex_lock(&f->f_lock);
	n = f->f_writes;
	pthread_mutex_unlock(&f->f_lock);
	return n;
}

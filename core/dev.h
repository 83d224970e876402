/* dev.h - the block device backend: every byte shoal reads or writes on its
 * device goes through one of these, so tests can inject faults. */
#ifndef SHOAL_DEV_H
#define SHOAL_DEV_H
#include <stddef.h>
#include <stdint.h>

struct shoal_dev;

struct shoal_dev_ops {
	/* Read or write exactly len bytes at off: 0 or -errno. */
	int (*pread)(struct shoal_dev *dev, void *buf, size_t len, uint64_t off);
	int (*pwrite)(struct shoal_dev *dev, const void *buf, size_t len, uint64_t off);
	/* Make every completed write durable: 0 or -errno. */
	int (*flush)(struct shoal_dev *dev);
	void (*close)(struct shoal_dev *dev);
};

/* Counters, updated atomically; read them with dev_stats_get(). */
struct shoal_dev_stats {
	uint64_t ds_reads;
	uint64_t ds_read_bytes;
	uint64_t ds_writes;
	uint64_t ds_write_bytes;
	uint64_t ds_flushes;
	uint64_t ds_queue_read_bytes; /* reads served from queued writes (dev.c (5)) */
	uint64_t ds_lease_refused;    /* writes and flushes refused: lease over (dev.c (8)) */
};

struct shoal_dev {
	const struct shoal_dev_ops *d_ops;
	void *d_priv;
	int d_fd;
	int d_readonly;
	uint64_t d_size; /* bytes */
	struct shoal_dev_stats d_stats; /* atomic */
	uint64_t d_write_gen; /* atomic: bumped by every write */
	uint64_t d_flush_gen; /* atomic: d_write_gen as of the last flush */
	int d_fenced;         /* atomic: self-fenced, every write fails */
	int d_dfd;            /* the same file opened O_DIRECT, or -1 (dev.c (4)) */
	struct dev_wb *d_wb;  /* write-behind (dev.c (5)), or NULL */
	/* atomic: CLOCK_BOOTTIME ns until which this node may write (dev.c
	 * (8)); DEV_LEASE_NONE: no lease (one node, lock=nolock) */
	uint64_t d_lease_until;
};

#define DEV_LEASE_NONE 0
#define DEV_LEASE_OVER 1 /* the lease was given up: no write any more */

/* Open a regular file or block device.  size 0 means "use its size". */
int dev_open(const char *path, int readonly, struct shoal_dev **out);
void dev_close(struct shoal_dev *dev);

int dev_read(struct shoal_dev *dev, void *buf, size_t len, uint64_t off);
/* Large page-aligned writes go around the device's page cache (dev.c (4)). */
int dev_write(struct shoal_dev *dev, const void *buf, size_t len, uint64_t off);
/*
 * Write part of a block so that only those bytes reach the device (O_DIRECT
 * when off and len are multiples of 512 and the file allows it), not the
 * whole page the page cache would write back: a 1 KiB fsync'ed overwrite
 * costs the device 1 KiB, not 4.  Otherwise the same as dev_write.
 */
int dev_write_small(struct shoal_dev *dev, const void *buf, size_t len, uint64_t off);
/*
 * Write-behind (dev.c (5)).  dev_wb_start() starts the device's writer
 * threads; from then on dev_write_behind() of a large page-aligned write
 * copies the bytes, queues them and returns (at most max_bytes queued; a
 * write beyond waits for room), and every other read, write and flush of
 * the device first waits for the queued writes it overlaps (a flush: for
 * all of them).  A queued write that fails makes every later flush and
 * write-behind fail, and a read of its range fail with -EIO.
 * Without dev_wb_start(), or for other writes, dev_write_behind() is
 * dev_write().
 */
int dev_wb_start(struct shoal_dev *dev, size_t max_bytes);
int dev_write_behind(struct shoal_dev *dev, const void *buf, size_t len, uint64_t off);
/*
 * Copy [off, off + len) from a queued write that holds all of it (dev.c
 * (5)): 1 if one did, 0 if the caller must read the device (after
 * dev_wait_range).  buf NULL: only whether one holds it now.  dev_read()
 * tries it first.
 */
int dev_read_queued(struct shoal_dev *dev, void *buf, size_t len, uint64_t off);
/* Wait until no queued write overlaps [off, off + len): 0, or -EIO when a
 * queued write of some of it failed (the device holds older bytes there). */
int dev_wait_range(struct shoal_dev *dev, uint64_t off, uint64_t len);
/* The first failure of a queued write (dev.c (5)), or 0. */
int dev_wb_error(struct shoal_dev *dev);
int dev_flush(struct shoal_dev *dev);
/* Around every page cache, for the heartbeat (dev.c (8)): a read sees what
 * another machine just wrote, a write is on the device when it returns;
 * the write is not one dev_flush must cover. */
int dev_read_uncached(struct shoal_dev *dev, void *buf, size_t len, uint64_t off);
int dev_write_uncached(struct shoal_dev *dev, const void *buf, size_t len, uint64_t off);
/* Flush only if something was written since the last flush. */
int dev_flush_if_needed(struct shoal_dev *dev);
void dev_stats_get(struct shoal_dev *dev, struct shoal_dev_stats *out);
/* The plain file descriptor for zero-copy I/O by the caller, or -1. */
int dev_fd(struct shoal_dev *dev);
/* Stop every write from now on (a node that lost its lock manager, or
 * withdrew after an error); returns once no queued write is being issued. */
void dev_fence(struct shoal_dev *dev);
/*
 * The lease (dev.c (8)): this node may write until deadline_ns
 * (CLOCK_BOOTTIME, dev_now_boot_ns).  The lock module moves it forward
 * at every answered heartbeat (never back), and to DEV_LEASE_OVER when the
 * node leaves or withdraws.  dev_lease_check is called right before every
 * write and flush submitted to the device: 0 while the lease runs (or
 * there is none), else the device is fenced, ds_lease_refused counted and
 * -EIO returned.  A caller that writes dev_fd() itself calls it right
 * before its write.
 */
void dev_set_lease(struct shoal_dev *dev, uint64_t deadline_ns);
int dev_lease_check(struct shoal_dev *dev);
uint64_t dev_now_boot_ns(void);
/* Test hook: with $SHOAL_TEST_WRITE_LOG set, every write and flush this
 * process submits is appended to that file with its time and lease state
 * (dev.c (9)); dev_log_note adds a line of the caller's. */
void dev_log_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* kind 'W' a write, 'F' a flush, begun at t0 (dev_now_boot_ns), outcome err */
void dev_log_io(struct shoal_dev *dev, char kind, uint64_t t0, uint64_t off, uint64_t len, int err);
/* Count I/O that a caller did itself on dev_fd() (a write bumps the
 * write generation, so fsync knows it needs a flush). */
void dev_account(struct shoal_dev *dev, int write, uint64_t bytes);

/* The plain file/blockdev backend, for wrappers that delegate to it. */
extern const struct shoal_dev_ops dev_file_ops;

/*
 * A fault-injecting wrapper for tests (dev_fault.c).  Writes not yet flushed
 * are held in memory; dev_fault_cut() simulates a power cut that loses them
 * all, or a random subset.  Errors can be injected on the Nth write/flush,
 * and on every read of a region (a bad sector range).
 */
struct dev_fault_cfg {
	int64_t fc_fail_write_at; /* fail the Nth write from now with fc_errno; <0 off */
	int64_t fc_fail_flush_at; /* same for flushes */
	int fc_errno;
	int64_t fc_cut_at_write; /* after this many writes, drop all further I/O */
	/* fc_die_kill: at that write (the machine's death) write the pages of
	 * the unflushed overlay that fc_die_keep_seed picks (0: none) to the
	 * lower device, then SIGKILL this process before anything else
	 * happens in it: the end-to-end power cut (SHOAL_TEST_POWER_CUT) */
	unsigned fc_die_keep_seed;
	int fc_die_kill;
	/* a bad region: every read touching bytes [lo, hi) fails with
	 * fc_errno, until the next dev_fault_set; hi == 0: none */
	uint64_t fc_bad_read_lo, fc_bad_read_hi;
};
int dev_fault_wrap(struct shoal_dev *lower, struct shoal_dev **out);
void dev_fault_set(struct shoal_dev *dev, const struct dev_fault_cfg *cfg);
/* Discard unflushed writes; keep_mask_seed != 0 keeps a random subset. */
void dev_fault_cut(struct shoal_dev *dev, unsigned keep_seed);
uint64_t dev_fault_writes(struct shoal_dev *dev);

#endif

/* hb.h - the on-disk heartbeat (FORMAT.md 11.5): finds a writer on another
 * machine that no lock manager here can see, and keeps this node's own
 * heartbeat going while it has the filesystem mounted. */
#ifndef SHOAL_HB_H
#define SHOAL_HB_H
#include <stddef.h>
#include <stdint.h>

#include "dev.h"
#include "shoal/ondisk.h"

#define HB_ALL UINT32_MAX      /* hb_check: every heartbeat block */
#define HB_DEFAULT_MS 5000u    /* update period without heartbeat_ms= */
#define HB_MIN_MS 100u
#define HB_MAX_MS 60000u

/*
 * Is the filesystem in use by a writer this program cannot see?  Reads the
 * heartbeat blocks that matter for slot (HB_ALL: all of them; a journal
 * index: that journal's and the single-node block) and, if one is not
 * CLEAN, watches them for a little more than two of their writer's update
 * periods.  0: all CLEAN; 1: some were LIVE but none changed (a crashed
 * writer: the caller may take over; msg says whose); -EBUSY: one changed,
 * a live writer has the filesystem (msg names the node and its last
 * update); -EOPNOTSUPP: the filesystem has no heartbeat blocks; another
 * -errno: a block could not be read.  nowait: do not watch; a LIVE block
 * gives -EBUSY at once (fsck -n only warns).
 */
int hb_check(struct shoal_dev *dev, const struct shoal_sb *sb, uint32_t slot, int nowait,
	     char *msg, size_t msglen);

/* The update period: $SHOAL_HEARTBEAT_MS if set (HB_MIN_MS..HB_MAX_MS),
 * else HB_DEFAULT_MS; -EINVAL for a bad value. */
int hb_default_ms(unsigned *ms);

struct hb_writer;
/*
 * Mark heartbeat block index (a journal, or sb_jcount: the single-node
 * block) LIVE for node and start the thread that rewrites it every ms
 * milliseconds.  If a write fails, or the block holds what this node did
 * not write (another machine took it over), the thread says so, fences
 * the device (dev_fence: no write of this node lands any more) and stops.
 */
int hb_start(struct shoal_dev *dev, const struct shoal_sb *sb, uint32_t index,
	     const char *node, unsigned ms, struct hb_writer **out);
/* Stop the thread; clean: mark the block CLEAN (a clean unmount), so the
 * next mount does not wait.  0, or the failure of the last write. */
int hb_stop(struct hb_writer *w, int clean);
/* Has the thread given up (and fenced the device)? */
int hb_failed(struct hb_writer *w);

/* Read the superblock a mount would use (for mkfs and fsck, which have no
 * mount): a good primary, else a good backup in the device's last block
 * (FORMAT.md 3); 0, or -ENOENT when there is none. */
int hb_read_sb(struct shoal_dev *dev, struct shoal_sb *sb);
#endif

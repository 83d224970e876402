/*
 * format.c - shoal_format(): lay a new, empty filesystem on a device, as
 * docs/FORMAT.md and the format notes define it.
 *
 * Layout of a device of N blocks of B bytes, J journals of JB blocks:
 *
 *   0                 primary superblock
 *   1 .. J*JB         journals; journal j starts at 1 + j*JB, its block 0 is
 *                     the journal head, blocks 1..JB-1 its circular log
 *   1 + J*JB          J + 1 heartbeat blocks (sb_hbfirst): journal j's at
 *                     sb_hbfirst + j, the single-node mount's at + J
 *   sb_rgfirst ...    resource groups of sb_rgblocks blocks (header included);
 *                     the last one may be short, and a trailing group shorter
 *                     than FMT_MIN_RG_BLOCKS is not created
 *   N-1               backup superblock
 *
 * The root directory is an empty inline directory whose dinode is the first
 * block of resource group 0 (its rg_data0).
 *
 * Invariants:
 *  (1) only metadata blocks and the journals are written: the superblocks,
 *      the journal heads, the heartbeat blocks (CLEAN), the resource group
 *      headers and the root dinode,
 *      and zeros over every journal's log, so that on a sparse image file a
 *      commit never lands in a hole (which would cost the host filesystem a
 *      journal commit of its own on every flush).  Data blocks keep whatever
 *      they held (FREE blocks are never read), and the random jh_tail_seq
 *      makes a stale log unreplayable even where zeroing is cut short;
 *  (2) the primary superblock is the last block written and becomes durable
 *      last: the old one is overwritten with zeros and flushed before any
 *      other write, so a format cut short leaves a device with no valid
 *      primary superblock rather than a mix of two filesystems;
 *  (3) the options are checked, and the layout computed, before the device is
 *      touched: a format that fails with -EINVAL or -ENOSPC writes nothing;
 *  (4) every resource group's rg_free and rg_dinodes equal the counts of its
 *      bitmap, whose bits beyond rg_length are zero.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>

#include "dev.h"
#include "meta.h"
#include "shoal/ondisk.h"
#include "shoal/shoal.h"

#define FMT_DEFAULT_JOURNALS 2u
#define FMT_DEFAULT_LOCKTABLE_PREFIX "shoal:" /* + the UUID in hex */
#define FMT_DEFAULT_LOCKPROTO "shoal"
#define FMT_MAX_JOURNALS 256u
#define FMT_MIN_JBLOCKS 256u
#define FMT_MIN_RG_BLOCKS 64u /* header included, as sb_rgblocks counts */
#define FMT_RG_BATCH 256u     /* resource groups between progress calls */
#define FMT_SEQ_LIMIT (1ull << 48)

/* What shoal_format() will write, worked out before writing anything. */
struct fmt_layout {
	uint32_t fl_bsize;
	uint32_t fl_bshift;
	uint64_t fl_blocks;
	uint32_t fl_jcount;
	uint32_t fl_jblocks;
	uint64_t fl_jfirst;
	uint64_t fl_hbfirst; /* J + 1 heartbeat blocks */
	uint64_t fl_rgfirst;
	uint32_t fl_rgblocks;
	uint32_t fl_rgcount;
	uint64_t fl_root;
	const char *fl_locktable;
	const char *fl_lockproto;
};

struct fmt_progress {
	void (*fp_fn)(void *arg, uint64_t done, uint64_t total);
	void *fp_arg;
	uint64_t fp_total;
};

static void fmt_report(const struct fmt_progress *fp, uint64_t done)
{
	if (fp->fp_fn)
		fp->fp_fn(fp->fp_arg, done < fp->fp_total ? done : fp->fp_total, fp->fp_total);
}

/* "cluster:fsname": exactly one ':', both parts non-empty, fits with its NUL. */
static int fmt_check_locktable(const char *lt)
{
	const char *colon = strchr(lt, ':');
	size_t len = strlen(lt);

	if (!colon || strchr(colon + 1, ':'))
		return -EINVAL;
	if (colon == lt || colon[1] == '\0')
		return -EINVAL;
	if (len >= SHOAL_LOCKNAME_LEN)
		return -EINVAL;
	return 0;
}

/* Check the options against the device and compute the layout (invariant 3). */
static int fmt_plan(const struct shoal_dev *dev, const struct shoal_format_opts *opts,
		    struct fmt_layout *fl)
{
	uint64_t jbytes, jblocks, rgfirst, last;

	memset(fl, 0, sizeof(*fl));
	fl->fl_bsize = opts && opts->fo_bsize ? opts->fo_bsize : SHOAL_DEFAULT_BSIZE;
	fl->fl_jcount = opts && opts->fo_journals ? opts->fo_journals : FMT_DEFAULT_JOURNALS;
	jbytes = opts && opts->fo_jbytes ? opts->fo_jbytes
					 : shoal_default_jbytes(dev->d_size, fl->fl_jcount, fl->fl_bsize);
	/* NULL: "shoal:" and the UUID, made with it (fmt_fill_sb) */
	fl->fl_locktable = opts ? opts->fo_locktable : NULL;
	fl->fl_lockproto =
		opts && opts->fo_lockproto ? opts->fo_lockproto : FMT_DEFAULT_LOCKPROTO;

	if (fl->fl_bsize < SHOAL_MIN_BSIZE || fl->fl_bsize > SHOAL_MAX_BSIZE ||
	    (fl->fl_bsize & (fl->fl_bsize - 1)))
		return -EINVAL;
	fl->fl_bshift = (uint32_t)__builtin_ctz(fl->fl_bsize);
	if (fl->fl_jcount > FMT_MAX_JOURNALS)
		return -EINVAL;
	jblocks = jbytes >> fl->fl_bshift; /* a partial block is dropped */
	if (jblocks < FMT_MIN_JBLOCKS || jblocks > UINT32_MAX)
		return -EINVAL;
	fl->fl_jblocks = (uint32_t)jblocks;
	if (fl->fl_locktable && fmt_check_locktable(fl->fl_locktable))
		return -EINVAL;
	if (fl->fl_lockproto[0] == '\0' || strlen(fl->fl_lockproto) >= SHOAL_LOCKPROTO_LEN)
		return -EINVAL;

	fl->fl_blocks = dev->d_size >> fl->fl_bshift;
	fl->fl_jfirst = 1;
	fl->fl_hbfirst = fl->fl_jfirst + (uint64_t)fl->fl_jcount * fl->fl_jblocks;
	rgfirst = fl->fl_hbfirst + fl->fl_jcount + 1;
	fl->fl_rgfirst = rgfirst;
	fl->fl_rgblocks = SHOAL_RG_MAX_LENGTH(fl->fl_bsize) + 1;
	/* Group i exists iff its FMT_MIN_RG_BLOCKS end before the backup at N-1. */
	if (fl->fl_blocks < 1 || rgfirst + FMT_MIN_RG_BLOCKS > fl->fl_blocks - 1)
		return -ENOSPC;
	last = fl->fl_blocks - 1;
	uint64_t rgcount = (last - rgfirst - FMT_MIN_RG_BLOCKS) / fl->fl_rgblocks + 1;
	if (rgcount > UINT32_MAX)
		return -EFBIG;
	fl->fl_rgcount = (uint32_t)rgcount;
	fl->fl_root = rgfirst + 1;
	return 0;
}

static uint32_t fmt_rg_length(const struct fmt_layout *fl, uint32_t i)
{
	uint64_t data0 = fl->fl_rgfirst + (uint64_t)i * fl->fl_rgblocks + 1;
	uint64_t avail = (fl->fl_blocks - 1) - data0;

	return avail < fl->fl_rgblocks - 1u ? (uint32_t)avail : fl->fl_rgblocks - 1u;
}

static int fmt_random(void *buf, size_t len)
{
	uint8_t *p = buf;

	while (len) {
		ssize_t n = getrandom(p, len, 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int fmt_write_block(struct shoal_dev *dev, const struct fmt_layout *fl, const void *b,
			   uint64_t blkno)
{
	return dev_write(dev, b, fl->fl_bsize, blkno << fl->fl_bshift);
}

/* Zero journal j's log area (blocks 1..JB-1), in 1 MiB writes. */
static int fmt_zero_log(struct shoal_dev *dev, const struct fmt_layout *fl, uint64_t head)
{
	const size_t chunk = 1u << 20;
	uint64_t off = (head + 1) << fl->fl_bshift;
	uint64_t end = (head + fl->fl_jblocks) << fl->fl_bshift;
	void *z = calloc(1, chunk);
	int err = 0;

	if (!z)
		return -ENOMEM;
	while (off < end && !err) {
		size_t n = end - off < chunk ? (size_t)(end - off) : chunk;
		err = dev_write(dev, z, n, off);
		off += n;
	}
	free(z);
	return err;
}

/* Journal heads: clean, replay would start at log block 1 with a random seq. */
static int fmt_write_journals(struct shoal_dev *dev, const struct fmt_layout *fl, void *b,
			      int64_t now)
{
	struct shoal_jhead *jh = b;
	uint64_t seq;
	int err;

	for (uint32_t j = 0; j < fl->fl_jcount; j++) {
		uint64_t blkno = fl->fl_jfirst + (uint64_t)j * fl->fl_jblocks;

		do {
			err = fmt_random(&seq, sizeof(seq));
			if (err)
				return err;
			seq &= FMT_SEQ_LIMIT - 1;
		} while (seq == 0);
		memset(b, 0, fl->fl_bsize);
		jh->jh_index = j;
		jh->jh_flags = SHOAL_JH_CLEAN;
		jh->jh_tail = 1;
		jh->jh_tail_seq = seq;
		jh->jh_time = now;
		meta_seal(b, fl->fl_bsize, SHOAL_MT_JHEAD, blkno, 0);
		err = fmt_zero_log(dev, fl, blkno);
		if (!err)
			err = fmt_write_block(dev, fl, b, blkno);
		if (err)
			return err;
	}
	return 0;
}

/* Heartbeat blocks (FORMAT.md 11.5): CLEAN, nobody has them. */
static int fmt_write_heartbeats(struct shoal_dev *dev, const struct fmt_layout *fl, void *b,
				int64_t now)
{
	struct shoal_hbeat *hb = b;
	int err;

	for (uint32_t j = 0; j <= fl->fl_jcount; j++) {
		memset(b, 0, fl->fl_bsize);
		hb->hb_index = j;
		hb->hb_state = SHOAL_HB_CLEAN;
		hb->hb_time = now;
		meta_seal(b, fl->fl_bsize, SHOAL_MT_HBEAT, fl->fl_hbfirst + j, 0);
		err = fmt_write_block(dev, fl, b, fl->fl_hbfirst + j);
		if (err)
			return err;
	}
	return 0;
}

/* Resource group headers: every block FREE but the root dinode in group 0. */
static int fmt_write_rgs(struct shoal_dev *dev, const struct fmt_layout *fl, void *b,
			 const struct fmt_progress *fp)
{
	struct shoal_rg *rg = b;
	uint8_t *bitmap = (uint8_t *)b + SHOAL_RG_BITMAP_OFF;
	int err;

	for (uint32_t i = 0; i < fl->fl_rgcount; i++) {
		uint64_t blkno = fl->fl_rgfirst + (uint64_t)i * fl->fl_rgblocks;

		memset(b, 0, fl->fl_bsize);
		rg->rg_index = i;
		rg->rg_data0 = blkno + 1;
		rg->rg_length = fmt_rg_length(fl, i);
		rg->rg_free = rg->rg_length;
		if (i == 0) {
			/* the root dinode is block 0 of group 0 */
			bitmap[0] = SHOAL_B_DINODE;
			rg->rg_free--;
			rg->rg_dinodes = 1;
		}
		meta_seal(b, fl->fl_bsize, SHOAL_MT_RG, blkno, 0);
		err = fmt_write_block(dev, fl, b, blkno);
		if (err)
			return err;
		if ((i + 1) % FMT_RG_BATCH == 0)
			fmt_report(fp, blkno + fl->fl_rgblocks);
	}
	return 0;
}

/* The root: an empty inline directory that is its own parent. */
static int fmt_write_root(struct shoal_dev *dev, const struct fmt_layout *fl, void *b,
			  const struct timespec *now)
{
	struct shoal_dinode *di = b;
	struct shoal_inline_dir *id = (void *)((uint8_t *)b + SHOAL_DI_PAYLOAD_OFF);
	struct shoal_ts ts = { .ts_sec = now->tv_sec, .ts_nsec = (uint32_t)now->tv_nsec };

	memset(b, 0, fl->fl_bsize);
	di->di_mode = S_IFDIR | 0755;
	di->di_uid = 0;
	di->di_gid = 0;
	di->di_nlink = 2;
	di->di_size = 0;
	di->di_blocks = 1;
	di->di_atime = ts;
	di->di_mtime = ts;
	di->di_ctime = ts;
	di->di_crtime = ts;
	di->di_generation = 1;
	di->di_height = 0;
	di->di_entries = 0;
	di->di_parent = fl->fl_root;
	id->id_used = 0;
	meta_seal(b, fl->fl_bsize, SHOAL_MT_DINODE, fl->fl_root, 0);
	return fmt_write_block(dev, fl, b, fl->fl_root);
}

static int fmt_fill_sb(const struct fmt_layout *fl, void *b, int64_t now, uint8_t uuid[16])
{
	struct shoal_sb *sb = b;
	int err;

	memset(b, 0, fl->fl_bsize);
	sb->sb_format = SHOAL_FORMAT;
	sb->sb_feat_incompat = SHOAL_FEAT_INCOMPAT_FASTCOMMIT | SHOAL_FEAT_INCOMPAT_FCDATA |
			       SHOAL_FEAT_INCOMPAT_HEARTBEAT;
	sb->sb_bsize = fl->fl_bsize;
	sb->sb_bsize_shift = fl->fl_bshift;
	sb->sb_blocks = fl->fl_blocks;
	err = fmt_random(sb->sb_uuid, sizeof(sb->sb_uuid));
	if (err)
		return err;
	sb->sb_uuid[6] = (uint8_t)((sb->sb_uuid[6] & 0x0f) | 0x40); /* RFC 4122 v4 */
	sb->sb_uuid[8] = (uint8_t)((sb->sb_uuid[8] & 0x3f) | 0x80);
	memcpy(uuid, sb->sb_uuid, 16);
	/* lengths were checked in fmt_plan(): both fit with their NUL */
	if (fl->fl_locktable) {
		memcpy(sb->sb_locktable, fl->fl_locktable, strlen(fl->fl_locktable));
	} else {
		/* this filesystem's own: lockd binds a table to one filesystem,
		 * so one default for every disk would keep a second cluster out */
		static const char hexd[] = "0123456789abcdef";
		char *t = sb->sb_locktable;
		_Static_assert(sizeof(FMT_DEFAULT_LOCKTABLE_PREFIX) - 1 + 32 < SHOAL_LOCKNAME_LEN,
			       "default lock table fits");
		memcpy(t, FMT_DEFAULT_LOCKTABLE_PREFIX, sizeof(FMT_DEFAULT_LOCKTABLE_PREFIX) - 1);
		t += sizeof(FMT_DEFAULT_LOCKTABLE_PREFIX) - 1;
		for (int i = 0; i < 16; i++) {
			*t++ = hexd[sb->sb_uuid[i] >> 4];
			*t++ = hexd[sb->sb_uuid[i] & 15];
		}
	}
	memcpy(sb->sb_lockproto, fl->fl_lockproto, strlen(fl->fl_lockproto));
	sb->sb_root = fl->fl_root;
	sb->sb_jfirst = fl->fl_jfirst;
	sb->sb_jcount = fl->fl_jcount;
	sb->sb_jblocks = fl->fl_jblocks;
	sb->sb_rgfirst = fl->fl_rgfirst;
	sb->sb_hbfirst = fl->fl_hbfirst;
	sb->sb_rgcount = fl->fl_rgcount;
	sb->sb_rgblocks = fl->fl_rgblocks;
	err = fmt_random(&sb->sb_hash_seed, sizeof(sb->sb_hash_seed));
	if (err)
		return err;
	sb->sb_ctime = now;
	return 0;
}

int shoal_format(struct shoal_dev *dev, const struct shoal_format_opts *opts,
		 struct shoal_format_info *info)
{
	struct fmt_progress fp = { 0 };
	struct fmt_layout fl;
	struct timespec now;
	uint8_t uuid[16];
	uint64_t last;
	void *b;
	int err;

	err = fmt_plan(dev, opts, &fl);
	if (err)
		return err;
	if (dev->d_readonly)
		return -EROFS;
	if (opts) {
		fp.fp_fn = opts->fo_progress;
		fp.fp_arg = opts->fo_progress_arg;
	}
	fp.fp_total = fl.fl_blocks;
	last = fl.fl_blocks - 1;
	clock_gettime(CLOCK_REALTIME, &now);
	b = calloc(1, fl.fl_bsize);
	if (!b)
		return -ENOMEM;
	fmt_report(&fp, 0);

	/* Invariant 2: no valid primary superblock from here until the end. */
	err = fmt_write_block(dev, &fl, b, SHOAL_SB_BLKNO);
	if (err)
		goto out_free;
	err = dev_flush(dev);
	if (err)
		goto out_free;

	err = fmt_write_journals(dev, &fl, b, now.tv_sec);
	if (!err)
		err = fmt_write_heartbeats(dev, &fl, b, now.tv_sec);
	if (err)
		goto out_free;
	fmt_report(&fp, fl.fl_rgfirst);
	err = fmt_write_rgs(dev, &fl, b, &fp);
	if (err)
		goto out_free;
	err = fmt_write_root(dev, &fl, b, &now);
	if (err)
		goto out_free;

	err = fmt_fill_sb(&fl, b, now.tv_sec, uuid);
	if (err)
		goto out_free;
	meta_seal(b, fl.fl_bsize, SHOAL_MT_SB, last, 0);
	err = fmt_write_block(dev, &fl, b, last);
	if (err)
		goto out_free;
	err = dev_flush(dev);
	if (err)
		goto out_free;
	meta_seal(b, fl.fl_bsize, SHOAL_MT_SB, SHOAL_SB_BLKNO, 0);
	err = fmt_write_block(dev, &fl, b, SHOAL_SB_BLKNO);
	if (err)
		goto out_free;
	err = dev_flush(dev);
	if (err)
		goto out_free;
	fmt_report(&fp, fl.fl_blocks);

	if (info) {
		memset(info, 0, sizeof(*info));
		info->fi_blocks = fl.fl_blocks;
		info->fi_bsize = fl.fl_bsize;
		info->fi_rgcount = fl.fl_rgcount;
		info->fi_journals = fl.fl_jcount;
		info->fi_jblocks = fl.fl_jblocks;
		memcpy(info->fi_uuid, uuid, sizeof(uuid));
		memcpy(info->fi_locktable, ((const struct shoal_sb *)b)->sb_locktable,
		       SHOAL_LOCKNAME_LEN);
	}
out_free:
	free(b);
	return err;
}

uint64_t shoal_default_jbytes(uint64_t devbytes, uint32_t journals, uint32_t bsize)
{
	uint64_t j = devbytes / 8 / (journals ? journals : 1);
	if (j > 128ull << 20)
		j = 128ull << 20;
	if (j < 8ull << 20)
		j = 8ull << 20;
	if (bsize)
		j -= j % bsize;
	return j;
}

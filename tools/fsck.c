/*
 * fsck.c - fsck.shoal: check and repair an unmounted shoal filesystem.
 *
 *   fsck.shoal [-n | -y] [-f] [-v] DEVICE
 *
 * Exit codes (as e2fsck): 0 clean, 1 errors corrected (or the device was
 * written: journal replay), 4 errors left uncorrected, 8 operational error
 * (usage, cannot open, not a shoal filesystem, I/O error).
 *
 * This file owns the options, the superblock, block I/O, reporting, the
 * 2-bit block maps and the inode table, and runs the passes:
 *
 *   1  superblock and backup, journals (replay), resource group headers
 *   2  the directory tree from the root: dinodes, directory blocks, entries
 *   3  dinodes the bitmaps know that the tree does not reach
 *   4  block maps and xattr blocks of every inode
 *   5  lost+found, orphans, link counts, di_blocks, di_entries, di_parent
 *   6  bitmaps and free counts against what the walk found
 *
 * Invariants:
 *  (0) with -y, nothing is written while another machine's heartbeat
 *      changes (hb.c): a node that has the filesystem mounted refuses
 *      the repair; while it runs, fsck keeps the single-node heartbeat
 *      going, so a mount elsewhere refuses in turn.  -n only warns;
 *  (1) nothing is written to the device unless -y was given; with -n the
 *      journals are replayed into an in-memory overlay that every read sees,
 *      so the check judges the filesystem as the next mount will find it;
 *  (2) every value read from the device is range-checked before it is used
 *      as an address, a count or an offset: garbage is reported, never
 *      trusted, and never crashes the checker;
 *  (3) every problem is counted exactly once, as fixed (it was repaired
 *      with -y) or unfixed; informational lines (journal needs recovery,
 *      orphans with -n) are not problems and do not change the exit code;
 *  (4) blocks are allocated only after every pass that claims blocks has
 *      run (pass 5 on), so an allocation never takes a block in use.
 */
#include "fsck.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hb.h"
#include "meta.h"

#define FSCK_MSG_LIMIT 50 /* problem lines per pass without -v */

/* --- reporting ------------------------------------------------------------ */

static void vreport(struct fsck *f, const char *suffix, const char *fmt, va_list ap)
{
	if (!f->f_verbose && f->f_pass_msgs >= FSCK_MSG_LIMIT) {
		f->f_pass_hidden++;
		return;
	}
	f->f_pass_msgs++;
	printf("%s: ", f->f_name);
	vprintf(fmt, ap);
	printf("%s\n", suffix);
}

int fsck_problem(struct fsck *f, int fixable, const char *fmt, ...)
{
	int fix = fixable && f->f_yes && !f->f_ro_feat;
	va_list ap;

	va_start(ap, fmt);
	vreport(f, fix ? " [fixed]" : fixable && !f->f_yes ? " [not fixed: -n]" : " [not fixed]",
		fmt, ap);
	va_end(ap);
	if (fix)
		f->f_fixed++;
	else
		f->f_unfixed++;
	return fix;
}

void fsck_info(struct fsck *f, const char *fmt, ...)
{
	va_list ap;

	printf("%s: ", f->f_name);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
}

void fsck_operr(struct fsck *f, const char *what, int err)
{
	fprintf(stderr, "%s: %s: %s\n", FSCK_PROG, what, strerror(err < 0 ? -err : err));
	f->f_operr = 1;
}

static void pass_end(struct fsck *f)
{
	if (f->f_pass_hidden)
		printf("%s: pass %d: %u more problems not shown (use -v)\n", f->f_name, f->f_pass,
		       f->f_pass_hidden);
	f->f_pass_hidden = 0;
	f->f_pass_msgs = 0;
}

static double now_secs(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void fsck_pass(struct fsck *f, int pass, const char *name)
{
	pass_end(f);
	f->f_pass = pass;
	f->f_pass_name = name;
	f->f_pass_start = f->f_last_progress = now_secs();
	fprintf(stderr, "Pass %d: %s\n", pass, name);
}

/* A percentage line every second, once a pass has run for a second. */
void fsck_progress(struct fsck *f, uint64_t done, uint64_t total)
{
	double now;

	if ((++f->f_pcalls & 63) != 0 || total == 0)
		return;
	now = now_secs();
	if (now - f->f_pass_start < 1.0 || now - f->f_last_progress < 1.0)
		return;
	f->f_last_progress = now;
	fprintf(stderr, "Pass %d: %s: %.1f%%\n", f->f_pass, f->f_pass_name,
		100.0 * (double)done / (double)total);
}

/* --- blocks and the replay overlay -------------------------------------- */

void *blk_alloc(struct fsck *f)
{
	void *b = calloc(1, f->f_bsize);

	if (!b)
		fsck_operr(f, "out of memory", ENOMEM);
	return b;
}

static uint64_t ov_slot(uint64_t blkno, uint64_t cap)
{
	return (blkno * 0x9e3779b97f4a7c15ull) >> 20 & (cap - 1);
}

static uint8_t *ov_find(struct fsck *f, uint64_t blkno)
{
	if (!f->f_ovcap)
		return NULL;
	for (uint64_t i = ov_slot(blkno, f->f_ovcap);; i = (i + 1) & (f->f_ovcap - 1)) {
		if (f->f_ovkey[i] == 0)
			return NULL;
		if (f->f_ovkey[i] == blkno)
			return f->f_ovblk[i];
	}
}

static int ov_grow(struct fsck *f)
{
	uint64_t ncap = f->f_ovcap ? f->f_ovcap * 2 : 1024;
	uint64_t *nkey = calloc(ncap, sizeof(*nkey));
	uint8_t **nblk = calloc(ncap, sizeof(*nblk));

	if (!nkey || !nblk) {
		free(nkey);
		free(nblk);
		return -ENOMEM;
	}
	for (uint64_t i = 0; i < f->f_ovcap; i++) {
		uint64_t k = f->f_ovkey[i], j;
		if (!k)
			continue;
		for (j = ov_slot(k, ncap); nkey[j]; j = (j + 1) & (ncap - 1))
			;
		nkey[j] = k;
		nblk[j] = f->f_ovblk[i];
	}
	free(f->f_ovkey);
	free(f->f_ovblk);
	f->f_ovkey = nkey;
	f->f_ovblk = nblk;
	f->f_ovcap = ncap;
	return 0;
}

/* Put a replayed image in the overlay (block numbers are >= 1). */
int ov_put(struct fsck *f, uint64_t blkno, const void *buf)
{
	uint8_t *b = ov_find(f, blkno);
	uint64_t i;

	if (b) {
		memcpy(b, buf, f->f_bsize);
		return 0;
	}
	if ((f->f_ovcount + 1) * 4 > f->f_ovcap * 3 && ov_grow(f))
		return -ENOMEM;
	b = malloc(f->f_bsize);
	if (!b)
		return -ENOMEM;
	memcpy(b, buf, f->f_bsize);
	for (i = ov_slot(blkno, f->f_ovcap); f->f_ovkey[i]; i = (i + 1) & (f->f_ovcap - 1))
		;
	f->f_ovkey[i] = blkno;
	f->f_ovblk[i] = b;
	f->f_ovcount++;
	return 0;
}

int blk_read(struct fsck *f, uint64_t blkno, void *buf)
{
	const uint8_t *ov;
	int err;

	if (blkno >= f->f_blocks)
		return -ERANGE;
	ov = ov_find(f, blkno);
	if (ov) {
		memcpy(buf, ov, f->f_bsize);
		return 0;
	}
	err = dev_read(f->f_dev, buf, f->f_bsize, blkno << f->f_bshift);
	if (err)
		fsck_operr(f, "read", err);
	return err;
}

int blk_write(struct fsck *f, uint64_t blkno, const void *buf)
{
	uint8_t *ov;
	int err;

	if (!f->f_yes || f->f_ro_feat)
		return 0; /* invariant 1 */
	if (blkno >= f->f_blocks)
		return -ERANGE;
	ov = ov_find(f, blkno);
	if (ov)
		memcpy(ov, buf, f->f_bsize);
	err = dev_write(f->f_dev, buf, f->f_bsize, blkno << f->f_bshift);
	if (err)
		fsck_operr(f, "write", err);
	else
		f->f_modified = 1;
	return err;
}

int blk_header_ok(struct fsck *f, const void *buf, uint16_t type, uint64_t blkno)
{
	const struct shoal_mh *mh = buf;

	return mh->mh_magic == SHOAL_MAGIC && mh->mh_format == SHOAL_FORMAT &&
	       mh->mh_type == type && mh->mh_blkno == blkno;
}

/* --- the inode table ------------------------------------------------------ */

static uint64_t itab_slot(uint64_t ino, uint64_t cap)
{
	return (ino * 0x9e3779b97f4a7c15ull) >> 17 & (cap - 1);
}

struct fsck_ino *itab_find(struct fsck *f, uint64_t ino)
{
	if (!f->f_icap)
		return NULL;
	for (uint64_t i = itab_slot(ino, f->f_icap);; i = (i + 1) & (f->f_icap - 1)) {
		uint64_t v = f->f_ihash[i];
		if (v == 0)
			return NULL;
		if (itab_rec(f, v - 1)->fi_ino == ino)
			return itab_rec(f, v - 1);
	}
}

static int itab_grow(struct fsck *f)
{
	uint64_t ncap = f->f_icap ? f->f_icap * 2 : 4096;
	uint64_t *nh = calloc(ncap, sizeof(*nh));

	if (!nh)
		return -ENOMEM;
	for (uint64_t r = 0; r < f->f_icount; r++) {
		uint64_t j = itab_slot(itab_rec(f, r)->fi_ino, ncap);
		while (nh[j])
			j = (j + 1) & (ncap - 1);
		nh[j] = r + 1;
	}
	free(f->f_ihash);
	f->f_ihash = nh;
	f->f_icap = ncap;
	return 0;
}

/* Add ino, which must not be present yet. */
struct fsck_ino *itab_add(struct fsck *f, uint64_t ino)
{
	uint64_t r = f->f_icount, i;
	struct fsck_ino *fi;

	if ((f->f_icount + 1) * 10 > f->f_icap * 7 && itab_grow(f))
		goto out_nomem;
	if ((r >> ITAB_CHUNK_SHIFT) >= f->f_nchunks) {
		struct fsck_ino **nc = realloc(f->f_ichunks, sizeof(*nc) * (f->f_nchunks + 1));
		if (!nc)
			goto out_nomem;
		f->f_ichunks = nc;
		nc[f->f_nchunks] = calloc(1u << ITAB_CHUNK_SHIFT, sizeof(struct fsck_ino));
		if (!nc[f->f_nchunks])
			goto out_nomem;
		f->f_nchunks++;
	}
	fi = itab_rec(f, r);
	memset(fi, 0, sizeof(*fi));
	fi->fi_ino = ino;
	for (i = itab_slot(ino, f->f_icap); f->f_ihash[i]; i = (i + 1) & (f->f_icap - 1))
		;
	f->f_ihash[i] = r + 1;
	f->f_icount++;
	return fi;
out_nomem:
	fsck_operr(f, "inode table", ENOMEM);
	return NULL;
}

static int cmp_ino(const void *a, const void *b)
{
	uint64_t x = (*(struct fsck_ino *const *)a)->fi_ino;
	uint64_t y = (*(struct fsck_ino *const *)b)->fi_ino;
	return x < y ? -1 : x > y;
}

struct fsck_ino **itab_sorted(struct fsck *f, uint64_t *count)
{
	struct fsck_ino **v = malloc(sizeof(*v) * (f->f_icount ? f->f_icount : 1));
	uint64_t n = 0;

	if (!v) {
		fsck_operr(f, "inode list", ENOMEM);
		return NULL;
	}
	for (uint64_t r = 0; r < f->f_icount; r++)
		v[n++] = itab_rec(f, r);
	qsort(v, n, sizeof(*v), cmp_ino);
	*count = n;
	return v;
}

/* --- superblock ----------------------------------------------------------- */

static int bsize_ok(uint32_t b)
{
	return b >= SHOAL_MIN_BSIZE && b <= SHOAL_MAX_BSIZE && !(b & (b - 1));
}

/* Read block blkno of size bsize and check it is a superblock there. */
static int sb_try(struct fsck *f, uint32_t bsize, uint64_t blkno, void *buf)
{
	const struct shoal_sb *sb = buf;

	if ((blkno + 1) * (uint64_t)bsize > f->f_dev->d_size)
		return -ERANGE;
	if (dev_read(f->f_dev, buf, bsize, blkno * bsize))
		return -EIO;
	if (meta_check(buf, bsize, SHOAL_MT_SB, blkno) || sb->sb_bsize != bsize)
		return -EUCLEAN;
	return 0;
}

/* sb_try, and the superblock passes the sanity rules (meta_sb_insane) */
static int sb_good(struct fsck *f, uint32_t bsize, uint64_t blkno, void *buf)
{
	return sb_try(f, bsize, blkno, buf) == 0 && !meta_sb_insane(buf, f->f_dev->d_size);
}

/*
 * Pass 1a: choose the superblock as the mount does (core/super.c sb_read):
 * the primary if it is valid and sane, else a valid, sane backup in the
 * last block of the filesystem (for every block size, the last block of
 * the device).  Then repair the other copy from the chosen one; never
 * write over a copy that is good when the other is not.
 */
static int sb_load(struct fsck *f)
{
	uint8_t *pri = malloc(SHOAL_MAX_BSIZE), *bak = malloc(SHOAL_MAX_BSIZE);
	struct shoal_sb *ps = (void *)pri, *bs = (void *)bak;
	uint64_t devsize = f->f_dev->d_size, bakno = 0;
	int pri_ok = 0, bak_ok = 0, err = -EINVAL;

	if (!pri || !bak) {
		fsck_operr(f, "superblock", ENOMEM);
		goto out;
	}
	memset(pri, 0, SHOAL_MAX_BSIZE);
	memset(bak, 0, SHOAL_MAX_BSIZE);
	if (devsize >= 512 && dev_read(f->f_dev, pri, 512, 0) == 0 && bsize_ok(ps->sb_bsize))
		pri_ok = sb_good(f, ps->sb_bsize, 0, pri);
	if (pri_ok) {
		bakno = ps->sb_blocks - 1;
		bak_ok = sb_try(f, ps->sb_bsize, bakno, bak) == 0;
	} else {
		/* the backup is the last block of the filesystem; without a
		 * primary, try the end of the device for every block size */
		for (uint32_t b = SHOAL_MIN_BSIZE; !bak_ok && b <= SHOAL_MAX_BSIZE; b *= 2) {
			if (devsize / b < 8)
				continue;
			bakno = devsize / b - 1;
			bak_ok = sb_good(f, b, bakno, bak) && bs->sb_blocks == bakno + 1;
		}
		if (!bak_ok) {
			/* a filesystem smaller than the device: the primary's
			 * sb_blocks may still name it */
			uint8_t hdr[512];
			const struct shoal_sb *h = (const void *)hdr;
			if (devsize >= 512 && dev_read(f->f_dev, hdr, 512, 0) == 0 &&
			    bsize_ok(h->sb_bsize) && h->sb_blocks >= 8 &&
			    sb_good(f, h->sb_bsize, h->sb_blocks - 1, bak) &&
			    bs->sb_blocks == h->sb_blocks) {
				bakno = h->sb_blocks - 1;
				bak_ok = 1;
			}
		}
	}
	if (!pri_ok && !bak_ok) {
		const char *why = NULL;
		if (sb_try(f, bsize_ok(ps->sb_bsize) ? ps->sb_bsize : SHOAL_MIN_BSIZE, 0, pri) == 0)
			why = meta_sb_insane(ps, devsize);
		if (why)
			fprintf(stderr, "%s: %s: superblock: %s, and no valid backup\n", FSCK_PROG,
				f->f_name, why);
		else
			fprintf(stderr, "%s: %s: not a shoal filesystem (no valid superblock)\n",
				FSCK_PROG, f->f_name);
		goto out;
	}
	memcpy(&f->f_sb, pri_ok ? (void *)ps : (void *)bs, sizeof(f->f_sb));
	f->f_bsize = f->f_sb.sb_bsize;
	f->f_bshift = f->f_sb.sb_bsize_shift;
	f->f_blocks = f->f_sb.sb_blocks;
	f->f_seed = f->f_sb.sb_hash_seed;
	if (f->f_sb.sb_feat_incompat & ~SHOAL_FEAT_INCOMPAT_SUPP) {
		fprintf(stderr, "%s: %s: unknown incompatible features 0x%llx\n", FSCK_PROG,
			f->f_name, (unsigned long long)(f->f_sb.sb_feat_incompat &
							~SHOAL_FEAT_INCOMPAT_SUPP));
		goto out;
	}
	if (f->f_sb.sb_feat_ro_compat & ~SHOAL_FEAT_RO_COMPAT_SUPP) {
		if (f->f_yes) {
			fprintf(stderr, "%s: %s: unknown ro_compat features 0x%llx: check with -n only\n",
				FSCK_PROG, f->f_name, (unsigned long long)f->f_sb.sb_feat_ro_compat);
			goto out;
		}
		f->f_ro_feat = 1;
	}
	if (f->f_sb.sb_feat_compat & ~SHOAL_FEAT_COMPAT_SUPP)
		fsck_info(f, "unknown compatible features 0x%llx ignored",
			  (unsigned long long)f->f_sb.sb_feat_compat);

	if (!pri_ok) {
		/* the primary is not good (the mount would not use it either):
		 * only it is written */
		if (fsck_problem(f, 1, "primary superblock invalid; using the backup at block %llu",
				 (unsigned long long)bakno)) {
			memcpy(pri, bak, f->f_bsize);
			meta_seal(pri, f->f_bsize, SHOAL_MT_SB, SHOAL_SB_BLKNO, bs->sb_header.mh_seq);
			blk_write(f, SHOAL_SB_BLKNO, pri);
		}
	} else {
		int same = 0;
		if (bak_ok) {
			struct shoal_mh *mh = (void *)bak;
			mh->mh_blkno = SHOAL_SB_BLKNO;
			meta_update_crc(bak, f->f_bsize);
			same = memcmp(pri, bak, f->f_bsize) == 0;
		}
		/* the primary is good: its sb_blocks names the backup */
		if (!same && fsck_problem(f, 1, "backup superblock at block %llu is %s",
					  (unsigned long long)bakno,
					  bak_ok ? "different from the primary" : "invalid")) {
			memcpy(bak, pri, f->f_bsize);
			meta_seal(bak, f->f_bsize, SHOAL_MT_SB, bakno, ps->sb_header.mh_seq);
			blk_write(f, bakno, bak);
		}
	}
	err = 0;
out:
	free(pri);
	free(bak);
	return err;
}

/* --- driver --------------------------------------------------------------- */

/*
 * Invariant (0): is a node on some machine using the filesystem?  -y: 0 to
 * go on (with this run's heartbeat started in *hw), else FSCK_EXIT_OPERR
 * after saying why; -n: a warning at most.
 */
static int fsck_heartbeat(struct fsck *f, struct hb_writer **hw)
{
	struct shoal_sb sb;
	char msg[200], node[SHOAL_LOCKNAME_LEN], host[SHOAL_LOCKNAME_LEN] = "";
	unsigned ms;
	int err;

	*hw = NULL;
	if (hb_read_sb(f->f_dev, &sb))
		return 0; /* no valid primary: sb_load says what it finds */
	err = hb_check(f->f_dev, &sb, HB_ALL, !f->f_yes, msg, sizeof(msg));
	if (err == -EOPNOTSUPP) {
		if (f->f_yes)
			fprintf(stderr, "%s: %s: note: no heartbeat blocks (an older mkfs.shoal made "
					"it): cannot tell whether another machine has it mounted\n",
				FSCK_PROG, f->f_name);
		return 0;
	}
	if (err == -EBUSY && !f->f_yes) {
		fprintf(stderr, "%s: %s: warning: %s; if that node still has it mounted, this "
				"check sees a filesystem that is changing\n",
			FSCK_PROG, f->f_name, msg);
		return 0;
	}
	if (err == -EBUSY) {
		fprintf(stderr, "%s: %s: in use on another machine: %s; refusing to repair it "
				"(unmount it there first)\n",
			FSCK_PROG, f->f_name, msg);
		return FSCK_EXIT_OPERR;
	}
	if (err < 0) {
		fprintf(stderr, "%s: %s: heartbeat blocks: %s\n", FSCK_PROG, f->f_name,
			strerror(-err));
		return FSCK_EXIT_OPERR;
	}
	if (!f->f_yes)
		return 0;
	if (err == 1)
		fprintf(stderr, "%s: %s: %s; it did not change: a mount that crashed\n", FSCK_PROG,
			f->f_name, msg);
	gethostname(host, sizeof(host) - 1);
	snprintf(node, sizeof(node), "fsck.shoal@%.40s", host);
	if (hb_default_ms(&ms))
		ms = HB_DEFAULT_MS;
	err = hb_start(f->f_dev, &sb, sb.sb_jcount, node, ms, hw);
	if (err) {
		fprintf(stderr, "%s: %s: cannot start the heartbeat: %s\n", FSCK_PROG, f->f_name,
			strerror(-err));
		return FSCK_EXIT_OPERR;
	}
	return 0;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: %s [-n | -y] [-f] [-v] DEVICE\n"
		"  -n  check only, change nothing (the default)\n"
		"  -y  repair every problem that can be repaired (refused while a node on\n"
		"      some machine has it mounted: its heartbeat changes; -n warns)\n"
		"  -f  force a full check (always done; accepted for compatibility)\n"
		"  -v  report every problem and more detail\n"
		"exit: 0 clean, 1 errors corrected, 4 errors left, 8 operational error\n",
		FSCK_PROG);
}

static void summary(struct fsck *f)
{
	uint64_t inodes = 0, free_blocks = 0;

	for (uint64_t r = 0; r < f->f_icount; r++) {
		const struct fsck_ino *fi = itab_rec(f, r);
		if ((fi->fi_flags & FI_VALID) && !(fi->fi_flags & FI_FREED))
			inodes++;
	}
	for (uint32_t g = 0; g < f->f_rgcount; g++)
		for (uint32_t k = 0; k < f->f_rgs[g].fr_length; k++)
			if (map_get(f->f_fmap, f->f_rgs[g].fr_data0 + k) == SHOAL_B_FREE)
				free_blocks++;
	printf("%s: %llu inodes, %llu blocks used of %llu", f->f_name, (unsigned long long)inodes,
	       (unsigned long long)(f->f_blocks - free_blocks), (unsigned long long)f->f_blocks);
	if (!f->f_fixed && !f->f_unfixed)
		printf(", clean");
	if (f->f_fixed)
		printf(", %llu errors corrected", (unsigned long long)f->f_fixed);
	if (f->f_unfixed)
		printf(", %llu errors left uncorrected%s", (unsigned long long)f->f_unfixed,
		       f->f_yes ? "" : " (run with -y to repair)");
	printf("\n");
}

static void fsck_free(struct fsck *f)
{
	for (uint64_t i = 0; i < f->f_ovcap; i++)
		free(f->f_ovblk[i]);
	free(f->f_ovkey);
	free(f->f_ovblk);
	free(f->f_rgs);
	free(f->f_dmap);
	free(f->f_fmap);
	for (uint64_t i = 0; i < f->f_nchunks; i++)
		free(f->f_ichunks[i]);
	free(f->f_ichunks);
	free(f->f_ihash);
	free(f->f_queue);
	free(f->f_leaffix);
	for (size_t k = 0; k < f->f_nrebuild; k++)
		free(f->f_rebuild[k].rb_leaves);
	free(f->f_rebuild);
}

int main(int argc, char **argv)
{
	struct fsck fs = { 0 }, *f = &fs;
	struct hb_writer *hw;
	int opt, no = 0, err, rc;

	while ((opt = getopt(argc, argv, "nyfvh")) != -1) {
		switch (opt) {
		case 'n':
			no = 1;
			break;
		case 'y':
			f->f_yes = 1;
			break;
		case 'f':
			f->f_force = 1;
			break;
		case 'v':
			f->f_verbose = 1;
			break;
		case 'h':
			usage();
			return FSCK_EXIT_OK;
		default:
			usage();
			return FSCK_EXIT_OPERR;
		}
	}
	if (optind != argc - 1 || (no && f->f_yes)) {
		usage();
		return FSCK_EXIT_OPERR;
	}
	f->f_name = argv[optind];
	setvbuf(stdout, NULL, _IOLBF, 0);

	err = dev_open(f->f_name, !f->f_yes, &f->f_dev);
	if (err) {
		fprintf(stderr, "%s: %s: %s\n", FSCK_PROG, f->f_name, strerror(-err));
		return FSCK_EXIT_OPERR;
	}
	rc = fsck_heartbeat(f, &hw);
	if (rc) {
		dev_close(f->f_dev);
		return rc;
	}
	fsck_pass(f, 1, "superblock, journals and resource groups");
	err = sb_load(f);
	if (!err)
		err = fsck_journals(f);
	if (!err)
		err = fsck_rg_load(f);
	if (!err) {
		fsck_pass(f, 2, "directory tree");
		err = fsck_tree(f);
	}
	if (!err) {
		fsck_pass(f, 3, "unreferenced inodes");
		err = fsck_detached(f);
	}
	if (!err) {
		fsck_pass(f, 4, "block maps and extended attributes");
		err = fsck_maps(f);
	}
	if (!err) {
		fsck_pass(f, 5, "connectivity and counts");
		err = fsck_connect(f);
		if (!err)
			err = fsck_counts(f);
	}
	if (!err) {
		fsck_pass(f, 6, "bitmaps and free counts");
		err = fsck_rg_sync(f);
	}
	pass_end(f);
	if (f->f_modified) {
		int ferr = dev_flush(f->f_dev);
		if (ferr)
			fsck_operr(f, "flush", ferr);
	}
	if (hw && hb_stop(hw, 1))
		fsck_operr(f, "heartbeat", -EIO); /* hb.c said what failed */
	if (err || f->f_operr) {
		if (err && !f->f_operr && err != -EINVAL)
			fprintf(stderr, "%s: %s: %s\n", FSCK_PROG, f->f_name, strerror(-err));
		rc = FSCK_EXIT_OPERR;
		if (f->f_blocks && f->f_fmap)
			summary(f);
	} else {
		summary(f);
		rc = f->f_unfixed ? FSCK_EXIT_UNFIXED : f->f_fixed || f->f_modified ? FSCK_EXIT_FIXED
										   : FSCK_EXIT_OK;
	}
	dev_close(f->f_dev);
	fsck_free(f);
	return rc;
}

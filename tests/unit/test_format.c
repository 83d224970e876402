/*
 * test_format.c - shoal_format() lays down exactly the filesystem the format
 * notes describe, and meta.c seals, checks and hashes as they define.
 *
 * Every formatted image is read back block by block and checked against a
 * layout this test computes on its own from the notes (not from format.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "crc32c.h"
#include "dev.h"
#include "meta.h"
#include "shoal/ondisk.h"
#include "shoal/shoal.h"
#include "testutil.h"

#define MiB (1ull << 20)
#define GiB (1ull << 30)

/* The layout the notes call for, computed independently of format.c. */
struct expect {
	uint32_t ex_bsize;
	uint64_t ex_blocks;
	uint32_t ex_journals;
	uint64_t ex_jblocks;
	uint64_t ex_hbfirst;
	uint64_t ex_rgfirst;
	uint64_t ex_rgblocks;
	uint32_t ex_rgcount;
	const char *ex_locktable;
	const char *ex_lockproto;
};

static void expect_layout(struct expect *ex, uint64_t dev_size, const struct shoal_format_opts *fo)
{
	uint64_t hdr;

	ex->ex_bsize = fo->fo_bsize ? fo->fo_bsize : 4096;
	ex->ex_blocks = dev_size / ex->ex_bsize;
	ex->ex_journals = fo->fo_journals ? fo->fo_journals : 2;
	ex->ex_jblocks = (fo->fo_jbytes ? fo->fo_jbytes
					: shoal_default_jbytes(dev_size, ex->ex_journals, ex->ex_bsize)) /
			 ex->ex_bsize;
	/* J + 1 heartbeat blocks between the journals and group 0 */
	ex->ex_hbfirst = 1 + ex->ex_journals * ex->ex_jblocks;
	ex->ex_rgfirst = ex->ex_hbfirst + ex->ex_journals + 1;
	ex->ex_rgblocks = (ex->ex_bsize - 96) * 4 + 1;
	ex->ex_locktable = fo->fo_locktable; /* NULL: derived from the UUID */
	ex->ex_lockproto = fo->fo_lockproto ? fo->fo_lockproto : "shoal";
	/* a group of fewer than 64 blocks (header included) before N-1 is not made */
	ex->ex_rgcount = 0;
	for (hdr = ex->ex_rgfirst; hdr + 64 <= ex->ex_blocks - 1; hdr += ex->ex_rgblocks)
		ex->ex_rgcount++;
}

static void read_block(struct shoal_dev *dev, uint32_t bsize, uint64_t blkno, void *buf)
{
	assert_int_equal(dev_read(dev, buf, bsize, blkno * bsize), 0);
}

static unsigned bstate(const uint8_t *bitmap, uint64_t k)
{
	return (bitmap[k / 4] >> (2 * (k % 4))) & 3u;
}

static int all_zero(const void *p, size_t len)
{
	const uint8_t *b = p;
	for (size_t i = 0; i < len; i++)
		if (b[i])
			return 0;
	return 1;
}

static void verify_sb(struct shoal_dev *dev, const struct expect *ex, uint8_t *b, uint8_t *b2,
		      time_t t0)
{
	const uint32_t B = ex->ex_bsize;
	const struct shoal_sb *sb = (const void *)b;
	struct shoal_sb *bk = (void *)b2;

	read_block(dev, B, 0, b);
	assert_int_equal(meta_check(b, B, SHOAL_MT_SB, 0), 0);
	read_block(dev, B, ex->ex_blocks - 1, b2);
	assert_int_equal(meta_check(b2, B, SHOAL_MT_SB, ex->ex_blocks - 1), 0);
	/* the backup equals the primary but for its address (and so its crc) */
	bk->sb_header.mh_blkno = 0;
	bk->sb_header.mh_crc = sb->sb_header.mh_crc;
	assert_memory_equal(b, b2, B);

	assert_int_equal(sb->sb_header.mh_seq, 0);
	assert_int_equal(sb->sb_format, SHOAL_FORMAT);
	assert_int_equal(sb->sb_bsize, B);
	assert_int_equal(1u << sb->sb_bsize_shift, B);
	assert_int_equal(sb->sb_flags, 0);
	assert_int_equal(sb->sb_blocks, ex->ex_blocks);
	assert_int_equal(sb->sb_feat_compat, 0);
	assert_int_equal(sb->sb_feat_incompat,
			 SHOAL_FEAT_INCOMPAT_FASTCOMMIT | SHOAL_FEAT_INCOMPAT_FCDATA |
				 SHOAL_FEAT_INCOMPAT_HEARTBEAT);
	assert_int_equal(sb->sb_feat_ro_compat, 0);
	assert_false(all_zero(sb->sb_uuid, 16));
	assert_int_equal(sb->sb_uuid[6] >> 4, 4); /* random (version 4) uuid */
	assert_int_equal(sb->sb_uuid[8] >> 6, 2);
	{
		/* the default table is this filesystem's own (issue 23, defect 5):
		 * "shoal:" and the UUID in hex, never one name for every disk */
		char deflt[64];
		const char *lt = ex->ex_locktable;
		if (!lt) {
			int n = snprintf(deflt, sizeof(deflt), "shoal:");
			for (int i = 0; i < 16; i++)
				n += snprintf(deflt + n, sizeof(deflt) - (size_t)n, "%02x",
					      sb->sb_uuid[i]);
			lt = deflt;
		}
		assert_string_equal(sb->sb_locktable, lt);
		assert_true(all_zero(sb->sb_locktable + strlen(lt), SHOAL_LOCKNAME_LEN - strlen(lt)));
	}
	assert_string_equal(sb->sb_lockproto, ex->ex_lockproto);
	assert_true(all_zero(sb->sb_lockproto + strlen(ex->ex_lockproto),
			     SHOAL_LOCKPROTO_LEN - strlen(ex->ex_lockproto)));
	assert_int_equal(sb->sb_root, ex->ex_rgfirst + 1);
	assert_int_equal(sb->sb_jfirst, 1);
	assert_int_equal(sb->sb_jcount, ex->ex_journals);
	assert_int_equal(sb->sb_jblocks, ex->ex_jblocks);
	assert_int_equal(sb->sb_rgfirst, ex->ex_rgfirst);
	assert_int_equal(sb->sb_hbfirst, ex->ex_hbfirst);
	assert_int_equal(sb->sb_rgcount, ex->ex_rgcount);
	assert_int_equal(sb->sb_rgblocks, ex->ex_rgblocks);
	assert_int_equal(sb->sb_rgblocks, SHOAL_RG_MAX_LENGTH(B) + 1);
	/* time() reads the coarse clock, up to a tick behind the one mkfs stamps with */
	assert_in_range(sb->sb_ctime, t0, time(NULL) + 1);
	assert_true(all_zero(sb->sb_pad, sizeof(sb->sb_pad)));
	assert_true(all_zero(b + sizeof(*sb), B - sizeof(*sb)));
}

/* Every heartbeat block CLEAN, valid at its address, naming its slot. */
static void verify_heartbeats(struct shoal_dev *dev, const struct expect *ex, uint8_t *b)
{
	const struct shoal_hbeat *hb = (const void *)b;

	for (uint32_t j = 0; j <= ex->ex_journals; j++) {
		read_block(dev, ex->ex_bsize, ex->ex_hbfirst + j, b);
		assert_int_equal(meta_check(b, ex->ex_bsize, SHOAL_MT_HBEAT, ex->ex_hbfirst + j), 0);
		assert_int_equal(hb->hb_index, j);
		assert_int_equal(hb->hb_state, SHOAL_HB_CLEAN);
		assert_true(all_zero(hb->hb_node, sizeof(hb->hb_node)));
	}
}

static void verify_journals(struct shoal_dev *dev, const struct expect *ex, uint8_t *b,
			    time_t t0)
{
	const struct shoal_jhead *jh = (const void *)b;

	for (uint32_t j = 0; j < ex->ex_journals; j++) {
		uint64_t blkno = 1 + j * ex->ex_jblocks;

		read_block(dev, ex->ex_bsize, blkno, b);
		assert_int_equal(meta_check(b, ex->ex_bsize, SHOAL_MT_JHEAD, blkno), 0);
		assert_int_equal(jh->jh_index, j);
		assert_int_equal(jh->jh_flags, SHOAL_JH_CLEAN);
		assert_int_equal(jh->jh_tail, 1);
		assert_in_range(jh->jh_tail_seq, 1, (1ull << 48) - 1);
		assert_in_range(jh->jh_time, t0, time(NULL));
		assert_true(all_zero(jh->jh_node, sizeof(jh->jh_node)));
	}
}

static void verify_rgs(struct shoal_dev *dev, const struct expect *ex, uint8_t *b)
{
	const uint32_t B = ex->ex_bsize;
	const struct shoal_rg *rg = (const void *)b;
	const uint8_t *bitmap = b + SHOAL_RG_BITMAP_OFF;
	uint64_t bits = (uint64_t)(B - SHOAL_RG_BITMAP_OFF) * 4;

	assert_true(ex->ex_rgcount >= 1);
	for (uint32_t i = 0; i < ex->ex_rgcount; i++) {
		uint64_t hdr = ex->ex_rgfirst + i * ex->ex_rgblocks;
		uint64_t data0 = hdr + 1;
		uint64_t len = ex->ex_rgblocks - 1;
		uint32_t nfree = 0, ndin = 0;

		if (len > ex->ex_blocks - 1 - data0)
			len = ex->ex_blocks - 1 - data0;
		read_block(dev, B, hdr, b);
		assert_int_equal(meta_check(b, B, SHOAL_MT_RG, hdr), 0);
		assert_int_equal(rg->rg_header.mh_seq, 0);
		assert_int_equal(rg->rg_index, i);
		assert_int_equal(rg->rg_flags, 0);
		assert_int_equal(rg->rg_data0, data0);
		assert_int_equal(rg->rg_length, len);
		assert_true(len + 1 >= 64);
		assert_true(data0 + len <= ex->ex_blocks - 1); /* backup sb outside */
		for (uint64_t k = 0; k < len; k++) {
			unsigned s = bstate(bitmap, k);
			nfree += s == SHOAL_B_FREE;
			ndin += s == SHOAL_B_DINODE || s == SHOAL_B_UNLINKED;
			/* all FREE but the root dinode, block 0 of group 0 */
			assert_int_equal(s, i == 0 && k == 0 ? SHOAL_B_DINODE : SHOAL_B_FREE);
		}
		for (uint64_t k = len; k < bits; k++)
			assert_int_equal(bstate(bitmap, k), 0);
		assert_int_equal(rg->rg_free, nfree);
		assert_int_equal(rg->rg_dinodes, ndin);
	}
}

static void verify_root(struct shoal_dev *dev, const struct expect *ex, uint8_t *b, time_t t0)
{
	const uint32_t B = ex->ex_bsize;
	const struct shoal_dinode *di = (const void *)b;
	const struct shoal_inline_dir *id = (const void *)(b + SHOAL_DI_PAYLOAD_OFF);
	uint64_t root = ex->ex_rgfirst + 1;

	read_block(dev, B, root, b);
	assert_int_equal(meta_check(b, B, SHOAL_MT_DINODE, root), 0);
	assert_int_equal(di->di_mode, S_IFDIR | 0755);
	assert_int_equal(di->di_uid, 0);
	assert_int_equal(di->di_gid, 0);
	assert_int_equal(di->di_nlink, 2);
	assert_int_equal(di->di_blocks, 1);
	assert_int_equal(di->di_generation, 1);
	assert_int_equal(di->di_parent, root);
	assert_int_equal(di->di_flags & SHOAL_DIF_EXHASH, 0);
	assert_int_equal(di->di_height, 0);
	assert_int_equal(di->di_entries, 0);
	assert_int_equal(di->di_xattr, 0);
	assert_in_range(di->di_ctime.ts_sec, t0, time(NULL));
	assert_true(di->di_ctime.ts_nsec < 1000000000u);
	assert_memory_equal(&di->di_atime, &di->di_ctime, sizeof(struct shoal_ts));
	assert_memory_equal(&di->di_mtime, &di->di_ctime, sizeof(struct shoal_ts));
	assert_memory_equal(&di->di_crtime, &di->di_ctime, sizeof(struct shoal_ts));
	assert_int_equal(id->id_used, 0);
	assert_true(all_zero(b + SHOAL_DI_PAYLOAD_OFF, B - SHOAL_DI_PAYLOAD_OFF));
}

/* Format an image of size bytes with fo, then check every metadata block. */
static void format_and_verify(uint64_t size, struct shoal_format_opts *fo)
{
	struct shoal_format_info fi;
	struct shoal_dev *dev;
	struct expect ex;
	char *path = tu_tmpimage(size);
	time_t t0 = time(NULL);
	uint8_t *b, *b2;

	expect_layout(&ex, size, fo);
	b = malloc(ex.ex_bsize);
	b2 = malloc(ex.ex_bsize);
	assert_non_null(b);
	assert_non_null(b2);
	assert_int_equal(dev_open(path, 0, &dev), 0);
	assert_int_equal(shoal_format(dev, fo, &fi), 0);

	assert_int_equal(fi.fi_blocks, ex.ex_blocks);
	assert_int_equal(fi.fi_bsize, ex.ex_bsize);
	assert_int_equal(fi.fi_rgcount, ex.ex_rgcount);
	assert_int_equal(fi.fi_journals, ex.ex_journals);
	assert_int_equal(fi.fi_jblocks, ex.ex_jblocks);
	verify_sb(dev, &ex, b, b2, t0);
	assert_memory_equal(((struct shoal_sb *)b)->sb_uuid, fi.fi_uuid, 16);
	verify_journals(dev, &ex, b, t0);
	verify_heartbeats(dev, &ex, b);
	verify_rgs(dev, &ex, b);
	verify_root(dev, &ex, b, t0);

	dev_close(dev);
	free(b);
	free(b2);
	tu_rmimage(path);
}

static void test_crc32c_check_value(void **state)
{
	assert_int_equal(crc32c(0, "123456789", 9), 0xe3069283u);
	/* continuing a crc is the same as one pass */
	assert_int_equal(crc32c(crc32c(0, "1234", 4), "56789", 5), 0xe3069283u);
}

static void test_name_hash(void **state)
{
	char name[32];

	/* fixed values: the hash is part of the format and must never change */
	assert_int_equal(meta_name_hash(0, "", 0), 0x77e80fb05d4c9493ull);
	assert_int_equal(meta_name_hash(0, "a", 1), 0x415154ac54df672dull);
	assert_int_equal(meta_name_hash(0x0123456789abcdefull, "hello", 5), 0x73c5bd1af026ded2ull);
	assert_int_equal(meta_name_hash(42, "lost+found", 10), 0x3549795dc2c15323ull);
	/* only len bytes count */
	assert_int_equal(meta_name_hash(7, "abcdef", 3), meta_name_hash(7, "abc", 3));

	for (int i = 0; i < 20000; i++) {
		uint64_t seed = (uint64_t)i * 0x9e3779b97f4a7c15ull;
		int n = snprintf(name, sizeof(name), "file-%d", i);
		uint64_t h = meta_name_hash(seed, name, (size_t)n);

		assert_int_equal(h, meta_name_hash(seed, name, (size_t)n));
		assert_true(h >= 3);
		assert_true(h < (1ull << 63));
		assert_true(h != meta_name_hash(seed + 1, name, (size_t)n));
	}
}

static void test_meta_check(void **state)
{
	const uint32_t B = 4096;
	uint8_t *b = calloc(1, B);
	struct shoal_mh *mh = (void *)b;

	assert_non_null(b);
	memset(b + 100, 0x5a, 200);
	meta_seal(b, B, SHOAL_MT_LEAF, 1234, 77);
	assert_int_equal(mh->mh_magic, SHOAL_MAGIC);
	assert_int_equal(mh->mh_type, SHOAL_MT_LEAF);
	assert_int_equal(mh->mh_format, SHOAL_FORMAT);
	assert_int_equal(mh->mh_blkno, 1234);
	assert_int_equal(mh->mh_seq, 77);
	assert_int_equal(meta_check(b, B, SHOAL_MT_LEAF, 1234), 0);
	assert_int_equal(meta_check(b, B, 0, 1234), 0); /* any type */

	/* the crc is over the whole block with mh_crc as zero */
	uint32_t crc = mh->mh_crc;
	mh->mh_crc = 0;
	assert_int_equal(crc32c(0, b, B), crc);
	mh->mh_crc = crc;

	/* a block at the wrong address, or of the wrong type, is corrupt */
	assert_int_equal(meta_check(b, B, SHOAL_MT_LEAF, 1235), -EUCLEAN);
	assert_int_equal(meta_check(b, B, SHOAL_MT_DINODE, 1234), -EUCLEAN);

	/* any single flipped bit is caught: header, crc, body, last byte */
	static const size_t offs[] = { 0, 4, 6, 9, 16, 24, 31, 32, 150, 2048, 4095 };
	for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
		for (int bit = 0; bit < 8; bit += 3) {
			b[offs[i]] ^= (uint8_t)(1u << bit);
			assert_int_equal(meta_check(b, B, SHOAL_MT_LEAF, 1234), -EUCLEAN);
			b[offs[i]] ^= (uint8_t)(1u << bit);
		}
	}
	assert_int_equal(meta_check(b, B, SHOAL_MT_LEAF, 1234), 0);

	/* a change followed by meta_update_crc is valid again */
	b[3000] ^= 0xff;
	assert_int_equal(meta_check(b, B, SHOAL_MT_LEAF, 1234), -EUCLEAN);
	meta_update_crc(b, B);
	assert_int_equal(meta_check(b, B, SHOAL_MT_LEAF, 1234), 0);

	/* a zeroed (never written) block is not metadata */
	memset(b, 0, B);
	assert_int_equal(meta_check(b, B, 0, 0), -EUCLEAN);
	free(b);
}

static void test_format_default(void **state)
{
	struct shoal_format_opts fo = { 0 };

	format_and_verify(100 * MiB, &fo);
}

static void test_format_block_sizes(void **state)
{
	struct shoal_format_opts fo = { 0 };

	/* 1 KiB blocks, one small journal, several groups, a short last one */
	fo = (struct shoal_format_opts){ .fo_bsize = 1024, .fo_journals = 1,
					 .fo_jbytes = 256 * 1024 };
	format_and_verify(20 * MiB, &fo);
	/* 2 KiB, a device size that is not a whole number of blocks */
	fo = (struct shoal_format_opts){ .fo_bsize = 2048, .fo_journals = 3, .fo_jbytes = MiB,
					 .fo_locktable = "alpha:beta", .fo_lockproto = "nolock" };
	format_and_verify(50 * MiB + 3 * 2048 + 777, &fo);
	/* 4 KiB, several full groups */
	fo = (struct shoal_format_opts){ .fo_journals = 4, .fo_jbytes = MiB };
	format_and_verify(300 * MiB, &fo);
	/* 64 KiB blocks, 256-block journals */
	fo = (struct shoal_format_opts){ .fo_bsize = 65536, .fo_jbytes = 16 * MiB };
	format_and_verify(2 * GiB, &fo);
	/* a large sparse device: about a thousand groups */
	fo = (struct shoal_format_opts){ 0 };
	format_and_verify(16 * GiB + 12345 * 4096ull, &fo);
	/* the longest lock table that fits */
	char lt[64];
	memset(lt, 'x', 63);
	lt[63] = '\0';
	lt[10] = ':';
	fo = (struct shoal_format_opts){ .fo_locktable = lt };
	format_and_verify(80 * MiB, &fo);
}

/* A trailing group of 64 blocks is made; one of 63 is not. */
static void test_trailing_group(void **state)
{
	struct shoal_format_opts fo = { .fo_bsize = 1024, .fo_journals = 1,
					.fo_jbytes = 256 * 1024 };
	struct shoal_format_info fi;
	struct shoal_dev *dev;
	/* rgfirst = 257 + 2 heartbeat blocks, sb_rgblocks = 3713: group 1's
	 * header is block 3972 */
	const uint64_t hdr1 = 259 + 3713;
	char *path;

	path = tu_tmpimage((hdr1 + 64 + 1) * 1024);
	assert_int_equal(dev_open(path, 0, &dev), 0);
	assert_int_equal(shoal_format(dev, &fo, &fi), 0);
	assert_int_equal(fi.fi_rgcount, 2);
	dev_close(dev);
	tu_rmimage(path);
	format_and_verify((hdr1 + 64 + 1) * 1024, &fo);

	path = tu_tmpimage((hdr1 + 63 + 1) * 1024);
	assert_int_equal(dev_open(path, 0, &dev), 0);
	assert_int_equal(shoal_format(dev, &fo, &fi), 0);
	assert_int_equal(fi.fi_rgcount, 1);
	dev_close(dev);
	tu_rmimage(path);
	format_and_verify((hdr1 + 63 + 1) * 1024, &fo);
}

static int try_format(uint64_t size, const struct shoal_format_opts *fo)
{
	static const char pattern[] = "old contents, not to be touched";
	char buf[sizeof(pattern)];
	struct shoal_dev *dev;
	char *path = tu_tmpimage(size);
	int err;

	assert_int_equal(dev_open(path, 0, &dev), 0);
	assert_int_equal(dev_write(dev, pattern, sizeof(pattern), 0), 0);
	err = shoal_format(dev, fo, NULL);
	if (err) {
		/* a refused format writes nothing */
		assert_int_equal(dev_read(dev, buf, sizeof(buf), 0), 0);
		assert_memory_equal(buf, pattern, sizeof(pattern));
	}
	dev_close(dev);
	tu_rmimage(path);
	return err;
}

static void test_bad_params(void **state)
{
	struct shoal_format_opts fo;
	const uint64_t size = 200 * MiB;
	static const char *const bad_lt[] = {
		"nocolon", "a:b:c", ":fs", "cluster:", ":", "", "a::b",
	};
	char lt[80];

	fo = (struct shoal_format_opts){ 0 };
	assert_int_equal(try_format(size, &fo), 0);
	assert_int_equal(try_format(size, NULL), 0); /* NULL opts = defaults */

	static const uint32_t bad_bsize[] = { 512, 1000, 3000, 4097, 131072 };
	for (size_t i = 0; i < sizeof(bad_bsize) / sizeof(bad_bsize[0]); i++) {
		fo = (struct shoal_format_opts){ .fo_bsize = bad_bsize[i] };
		assert_int_equal(try_format(size, &fo), -EINVAL);
	}
	fo = (struct shoal_format_opts){ .fo_journals = 257, .fo_jbytes = 256 * 4096 };
	assert_int_equal(try_format(size, &fo), -EINVAL);
	fo = (struct shoal_format_opts){ .fo_journals = 256, .fo_jbytes = 256 * 4096 };
	assert_int_equal(try_format(2 * GiB, &fo), 0);
	/* a journal of 255 blocks is too short; 256 is enough */
	fo = (struct shoal_format_opts){ .fo_jbytes = 255 * 4096 };
	assert_int_equal(try_format(size, &fo), -EINVAL);
	fo = (struct shoal_format_opts){ .fo_jbytes = 256 * 4096 };
	assert_int_equal(try_format(size, &fo), 0);
	fo = (struct shoal_format_opts){ .fo_bsize = 65536, .fo_jbytes = 255 * 65536 };
	assert_int_equal(try_format(size, &fo), -EINVAL);
	for (size_t i = 0; i < sizeof(bad_lt) / sizeof(bad_lt[0]); i++) {
		fo = (struct shoal_format_opts){ .fo_locktable = bad_lt[i] };
		assert_int_equal(try_format(size, &fo), -EINVAL);
	}
	/* 63 bytes fit with the NUL, 64 do not */
	memset(lt, 'y', sizeof(lt));
	lt[7] = ':';
	lt[63] = '\0';
	fo = (struct shoal_format_opts){ .fo_locktable = lt };
	assert_int_equal(try_format(size, &fo), 0);
	lt[63] = 'y';
	lt[64] = '\0';
	assert_int_equal(try_format(size, &fo), -EINVAL);
	fo = (struct shoal_format_opts){ .fo_lockproto = "" };
	assert_int_equal(try_format(size, &fo), -EINVAL);
	fo = (struct shoal_format_opts){ .fo_lockproto = "0123456789012345678901234567890" };
	assert_int_equal(try_format(size, &fo), 0); /* 31 bytes fit */
	fo = (struct shoal_format_opts){ .fo_lockproto = "01234567890123456789012345678901" };
	assert_int_equal(try_format(size, &fo), -EINVAL);
}

static void test_too_small(void **state)
{
	struct shoal_format_opts fo = { .fo_bsize = 1024, .fo_journals = 1,
					.fo_jbytes = 256 * 1024 };
	/* superblock + journal + 2 heartbeat blocks + one group of 64 blocks +
	 * backup superblock */
	const uint64_t min = (1 + 256 + 2 + 64 + 1) * 1024;

	assert_int_equal(try_format(min, &fo), 0);
	assert_int_equal(try_format(min - 1, &fo), -ENOSPC);
	assert_int_equal(try_format(min - 1024, &fo), -ENOSPC);
	assert_int_equal(try_format(4096, &fo), -ENOSPC);
	assert_int_equal(try_format(1000, &fo), -ENOSPC);
	format_and_verify(min, &fo);
	/* the defaults: two journals of at least 8 MiB (shoal_default_jbytes) */
	assert_int_equal(try_format(16 * MiB, NULL), -ENOSPC);
	assert_int_equal(try_format(17 * MiB, NULL), 0);
	assert_int_equal(shoal_default_jbytes(1 * GiB, 2, 4096), 64 * MiB);
	assert_int_equal(shoal_default_jbytes(64 * GiB, 2, 4096), 128 * MiB);
	assert_int_equal(shoal_default_jbytes(16 * MiB, 2, 4096), 8 * MiB);
}

/*
 * Only metadata blocks and the journals are written: the logs are zeroed (no
 * hole left under a log on an image file), data blocks keep old contents.
 */
static void test_writes_only_metadata(void **state)
{
	static const char marker[] = "stale block";
	const uint64_t size = 2 * GiB;
	const uint64_t jb = 128 * MiB / 4096; /* default journal blocks here */
	const uint64_t rgfirst = 1 + 2 * jb + 3; /* 3 heartbeat blocks */
	const struct {
		uint64_t blk;
		int kept;
	} probes[] = {
		{2, 0},                         /* journal 0, log block 1 */
		{1 + jb + 100, 0},              /* journal 1, log area */
		{rgfirst + 2, 1},               /* group 0, first free data block */
		{rgfirst + 16001 + 5000, 1},    /* a data block of group 1 */
		{size / 4096 - 2, 1},           /* the last data block */
	};
	struct shoal_format_info fi;
	struct shoal_dev_stats ds;
	struct shoal_dev *dev;
	char *path = tu_tmpimage(size);
	char buf[sizeof(marker)], zero[sizeof(marker)] = {0};

	assert_int_equal(dev_open(path, 0, &dev), 0);
	for (size_t i = 0; i < sizeof(probes) / sizeof(probes[0]); i++)
		assert_int_equal(dev_write(dev, marker, sizeof(marker), probes[i].blk * 4096), 0);
	dev_close(dev);

	assert_int_equal(dev_open(path, 0, &dev), 0);
	assert_int_equal(shoal_format(dev, NULL, &fi), 0);
	assert_int_equal(fi.fi_jblocks, jb);
	dev_stats_get(dev, &ds);
	/* block 0 twice, journal heads and logs, heartbeats, group headers,
	 * root, backup */
	assert_true(ds.ds_write_bytes <=
		    (uint64_t)(2 + 2 * jb + 3 + fi.fi_rgcount + 1 + 1) * 4096);
	assert_true(ds.ds_flushes >= 1);
	for (size_t i = 0; i < sizeof(probes) / sizeof(probes[0]); i++) {
		assert_int_equal(dev_read(dev, buf, sizeof(buf), probes[i].blk * 4096), 0);
		assert_memory_equal(buf, probes[i].kept ? marker : zero, sizeof(marker));
	}
	dev_close(dev);
	tu_rmimage(path);
}

/* Each format draws a new uuid, hash seed and journal sequences. */
static void test_random_fields(void **state)
{
	char *path = tu_tmpimage(100 * MiB);
	struct shoal_sb sb1, sb2;
	struct shoal_jhead jh1, jh2, jh1b;
	struct shoal_dev *dev;

	dev = tu_format(path, 2);
	assert_int_equal(dev_read(dev, &sb1, sizeof(sb1), 0), 0);
	assert_int_equal(dev_read(dev, &jh1, sizeof(jh1), sb1.sb_jfirst * 4096), 0);
	assert_int_equal(dev_read(dev, &jh1b, sizeof(jh1b),
				  (sb1.sb_jfirst + sb1.sb_jblocks) * 4096), 0);
	dev_close(dev);
	dev = tu_format(path, 2);
	assert_int_equal(dev_read(dev, &sb2, sizeof(sb2), 0), 0);
	assert_int_equal(dev_read(dev, &jh2, sizeof(jh2), sb2.sb_jfirst * 4096), 0);
	dev_close(dev);

	assert_memory_not_equal(sb1.sb_uuid, sb2.sb_uuid, 16);
	assert_int_not_equal(sb1.sb_hash_seed, sb2.sb_hash_seed);
	assert_int_not_equal(jh1.jh_tail_seq, jh2.jh_tail_seq);
	assert_int_not_equal(jh1.jh_tail_seq, jh1b.jh_tail_seq);
	tu_rmimage(path);
}

struct progress_log {
	int pl_calls;
	uint64_t pl_last;
	uint64_t pl_total;
};

static void progress_cb(void *arg, uint64_t done, uint64_t total)
{
	struct progress_log *pl = arg;

	assert_true(done >= pl->pl_last); /* never goes back */
	assert_true(done <= total);
	if (pl->pl_calls)
		assert_int_equal(total, pl->pl_total);
	pl->pl_calls++;
	pl->pl_last = done;
	pl->pl_total = total;
}

static void test_progress(void **state)
{
	struct progress_log pl = { 0 };
	struct shoal_format_opts fo = { .fo_progress = progress_cb, .fo_progress_arg = &pl };
	struct shoal_format_info fi;
	struct shoal_dev *dev;
	char *path = tu_tmpimage(64 * GiB);

	assert_int_equal(dev_open(path, 0, &dev), 0);
	assert_int_equal(shoal_format(dev, &fo, &fi), 0);
	assert_true(fi.fi_rgcount > 1000);
	assert_true(pl.pl_calls >= 4); /* start, journals, group batches, end */
	assert_int_equal(pl.pl_total, fi.fi_blocks);
	assert_int_equal(pl.pl_last, fi.fi_blocks);
	dev_close(dev);
	tu_rmimage(path);
}

static void test_readonly_device(void **state)
{
	struct shoal_dev *dev;
	char *path = tu_tmpimage(100 * MiB);

	assert_int_equal(dev_open(path, 1, &dev), 0);
	assert_int_equal(shoal_format(dev, NULL, NULL), -EROFS);
	dev_close(dev);
	tu_rmimage(path);
}

/* Pages of the image file's page cache in [off, off + len): mincore. */
static size_t resident_pages(const char *path, uint64_t off, size_t len)
{
	long pg = sysconf(_SC_PAGESIZE);
	int fd = open(path, O_RDONLY);
	unsigned char vec[1024];
	size_t n = 0;
	void *m;

	assert_true(fd >= 0);
	assert_true(len / (size_t)pg <= sizeof(vec));
	m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, (off_t)off);
	assert_true(m != MAP_FAILED);
	assert_int_equal(mincore(m, len, vec), 0);
	for (size_t i = 0; i < len / (size_t)pg; i++)
		n += vec[i] & 1;
	munmap(m, len);
	close(fd);
	return n;
}

/*
 * dev.c (4): a large page-aligned write goes around the image's page cache
 * (it stays out of it) and reads back right, also over a range a buffered
 * write had just dirtied; a small one, or a large one off page alignment,
 * is buffered.  Where the file takes no O_DIRECT (tmpfs) every write is
 * buffered and only the contents are checked.
 */
static void test_direct_writes(void **state)
{
	char *path = tu_tmpimage(64 * MiB);
	struct shoal_dev *dev;
	size_t big = 1 * MiB + 64 * 1024;
	uint8_t *a = malloc(big + 1), *b = malloc(big); /* a + 1: a source off alignment */
	int direct;

	assert_non_null(a);
	assert_non_null(b);
	assert_int_equal(dev_open(path, 0, &dev), 0);
	direct = dev->d_dfd >= 0;
	for (size_t i = 0; i < big + 1; i++)
		a[i] = (uint8_t)(i * 7 + 3);

	/* buffered small write, then a direct one over it and past it */
	memset(b, 0xee, 4096);
	assert_int_equal(dev_write(dev, b, 4096, 8 * MiB + 4096), 0);
	assert_int_equal(dev_write(dev, a + 1, big, 8 * MiB), 0); /* source off alignment */
	if (direct)
		assert_int_equal(resident_pages(path, 8 * MiB, big), 0);
	assert_int_equal(dev_read(dev, b, big, 8 * MiB), 0);
	assert_memory_equal(b, a + 1, big);

	/* an aligned source goes straight from it */
	uint8_t *al = NULL;
	assert_int_equal(posix_memalign((void **)&al, 4096, 1 * MiB), 0);
	memcpy(al, a + 5, 1 * MiB);
	assert_int_equal(dev_write(dev, al, 1 * MiB, 32 * MiB), 0);
	if (direct)
		assert_int_equal(resident_pages(path, 32 * MiB, 1 * MiB), 0);
	assert_int_equal(dev_read(dev, b, 1 * MiB, 32 * MiB), 0);
	assert_memory_equal(b, a + 5, 1 * MiB);
	free(al);

	/* not page-aligned: buffered, and right */
	assert_int_equal(dev_write(dev, a, big, 16 * MiB + 512), 0);
	if (direct)
		assert_true(resident_pages(path, 16 * MiB, 2 * MiB) > 0);
	assert_int_equal(dev_read(dev, b, big, 16 * MiB + 512), 0);
	assert_memory_equal(b, a, big);

	/* a write that ends at the device's end is direct too; one past fails */
	assert_int_equal(dev_write(dev, a, 1 * MiB, 63 * MiB), 0);
	assert_int_equal(dev_write(dev, a, 2 * MiB, 63 * MiB), -EIO);
	assert_int_equal(dev_read(dev, b, 1 * MiB, 63 * MiB), 0);
	assert_memory_equal(b, a, 1 * MiB);

	/* durable through dev_flush, and seen by a new open */
	assert_int_equal(dev_flush(dev), 0);
	dev_close(dev);
	assert_int_equal(dev_open(path, 1, &dev), 0);
	assert_int_equal(dev_read(dev, b, big, 8 * MiB), 0);
	assert_memory_equal(b, a + 1, big);
	dev_close(dev);
	free(a);
	free(b);
	tu_rmimage(path);
}

/*
 * dev.c (5): with write-behind on, a large aligned write returns before it
 * is on the device, yet every read sees it, writes to one range land in
 * the order they were made, a flush covers them all, and a queued write
 * that fails makes the next flush fail.
 */
static void test_write_behind(void **state)
{
	char *path = tu_tmpimage(64 * MiB);
	struct shoal_dev *dev;
	size_t len = 1 * MiB;
	uint8_t *a = malloc(len), *b = malloc(len);
	int bad;

	assert_non_null(a);
	assert_non_null(b);
	assert_int_equal(dev_open(path, 0, &dev), 0);
	if (dev->d_dfd < 0) { /* no O_DIRECT here (tmpfs): no write-behind either */
		dev_close(dev);
		tu_rmimage(path);
		free(a);
		free(b);
		skip();
	}
	assert_int_equal(dev_wb_start(dev, 4 * MiB), 0);

	/* 40 writes of one range, each with its own bytes; then one read */
	for (int k = 0; k < 40; k++) {
		memset(a, k + 1, len);
		a[k] = 0xee;
		assert_int_equal(dev_write_behind(dev, a, len, 8 * MiB), 0);
		memset(a, 0, len); /* the write copied the bytes */
	}
	assert_int_equal(dev_read(dev, b, len, 8 * MiB), 0);
	assert_int_equal(b[0], 40);
	assert_int_equal(b[39], 0xee);
	assert_int_equal(b[len - 1], 40);

	/* many ranges at once, more than the queue holds; a small write into
	 * one of them lands after it */
	for (int k = 0; k < 16; k++) {
		memset(a, 0x40 + k, len);
		assert_int_equal(dev_write_behind(dev, a, len, (16 + (uint64_t)k) * MiB), 0);
	}
	memset(a, 0x99, 4096);
	assert_int_equal(dev_write(dev, a, 4096, 20 * MiB + 8192), 0);
	assert_int_equal(dev_flush(dev), 0);
	for (int k = 0; k < 16; k++) {
		assert_int_equal(dev_read(dev, b, len, (16 + (uint64_t)k) * MiB), 0);
		assert_int_equal(b[0], 0x40 + k);
		assert_int_equal(b[len - 1], 0x40 + k);
	}
	assert_int_equal(dev_read(dev, b, 4096, 20 * MiB + 8192), 0);
	assert_int_equal(b[0], 0x99);

	/* small or unaligned writes are not queued: written before return */
	memset(a, 0x77, len);
	assert_int_equal(dev_write_behind(dev, a, 4096, 40 * MiB), 0);
	assert_int_equal(dev_write_behind(dev, a, len - 512, 41 * MiB + 512), 0);
	{
		int fd = open(path, O_RDONLY);
		assert_true(fd >= 0);
		assert_int_equal(pread(fd, b, 4096, 40 * MiB), 4096);
		assert_int_equal(b[4095], 0x77);
		assert_int_equal(pread(fd, b, 512, 41 * MiB + 512), 512);
		assert_int_equal(b[0], 0x77);
		close(fd);
	}

	/* a read inside one queued write is served from its copy (counted
	 * as such, not as a device read); one across two queued writes waits
	 * and reads the device.  Four 1 MiB writes for two writers: the last
	 * one waits in the queue for about a device write's time. */
	{
		struct shoal_dev_stats s0, s1;
		int served = 0, last = 0;
		for (int k = 0; k < 8 && !served; k++) {
			last = k;
			for (int i = 0; i < 4; i++) {
				memset(a, 0x20 + 4 * k + i, len);
				assert_int_equal(dev_write_behind(dev, a, len, (56 + (uint64_t)i) * MiB),
						 0);
			}
			dev_stats_get(dev, &s0);
			assert_int_equal(dev_read(dev, b, 65536, 59 * MiB + 4096), 0);
			dev_stats_get(dev, &s1);
			assert_int_equal(b[0], 0x23 + 4 * k);
			assert_int_equal(b[65535], 0x23 + 4 * k);
			if (s1.ds_queue_read_bytes - s0.ds_queue_read_bytes == 65536) {
				served = 1;
				assert_int_equal(s1.ds_reads, s0.ds_reads);
			} else {
				assert_int_equal(s1.ds_queue_read_bytes, s0.ds_queue_read_bytes);
				assert_int_equal(s1.ds_reads, s0.ds_reads + 1);
			}
			assert_int_equal(dev_read(dev, b, 8192, 59 * MiB - 4096), 0);
			assert_int_equal(b[0], 0x22 + 4 * k);
			assert_int_equal(b[4096], 0x23 + 4 * k);
		}
		assert_true(served);
		assert_int_equal(dev_flush(dev), 0);
		dev_stats_get(dev, &s0);
		assert_int_equal(dev_read(dev, b, 4096, 57 * MiB), 0);
		dev_stats_get(dev, &s1);
		assert_int_equal(s1.ds_queue_read_bytes, s0.ds_queue_read_bytes); /* none queued */
		assert_int_equal(b[0], 0x21 + 4 * last);
	}

	/* a queued write that fails: the next flush says so, and keeps
	 * saying so (the device's O_DIRECT descriptor made read-only); so
	 * does the next queued write; a read of its range fails rather than
	 * return the older bytes still there, until a write covers it whole */
	int good = dev->d_dfd;
	bad = open(path, O_RDONLY | O_DIRECT);
	assert_true(bad >= 0);
	assert_int_equal(dev_wb_error(dev), 0);
	dev->d_dfd = bad;
	memset(a, 0x55, len);
	assert_int_equal(dev_write_behind(dev, a, len, 48 * MiB), 0);
	assert_int_equal(dev_flush(dev), -EBADF);
	assert_int_equal(dev_flush(dev), -EBADF);
	assert_int_equal(dev_wb_error(dev), -EBADF);
	dev->d_dfd = good;
	close(bad);
	assert_int_equal(dev_write_behind(dev, a, len, 50 * MiB), -EBADF);
	assert_int_equal(dev_read(dev, b, 4096, 48 * MiB + 8192), -EIO);
	assert_int_equal(dev_read(dev, b, 8192, 48 * MiB - 4096), -EIO);
	assert_int_equal(dev_wait_range(dev, 48 * MiB, len), -EIO);
	assert_int_equal(dev_read(dev, b, 4096, 47 * MiB), 0); /* elsewhere: fine */
	assert_int_equal(dev_wait_range(dev, 49 * MiB, len), 0);
	memset(a, 0x66, 4096);
	assert_int_equal(dev_write(dev, a, 4096, 48 * MiB), 0); /* not all of it */
	assert_int_equal(dev_read(dev, b, 4096, 48 * MiB + 8192), -EIO);
	memset(a, 0x67, len);
	assert_int_equal(dev_write(dev, a, len, 48 * MiB), 0); /* all of it */
	assert_int_equal(dev_read(dev, b, 4096, 48 * MiB + 8192), 0);
	assert_int_equal(b[0], 0x67);
	assert_int_equal(b[4095], 0x67);
	dev_close(dev);

	/* a fenced device drops what is queued and not begun, and returns
	 * once the writes begun are done (dev.c (7)) */
	assert_int_equal(dev_open(path, 0, &dev), 0);
	assert_int_equal(dev_wb_start(dev, 16 * MiB), 0);
	for (int k = 0; k < 12; k++) {
		memset(a, 0x70 + k, len);
		assert_int_equal(dev_write_behind(dev, a, len, (8 + (uint64_t)k) * MiB), 0);
	}
	dev_fence(dev);
	assert_int_equal(dev_write(dev, a, 4096, 60 * MiB), -EIO);
	{
		int fd = open(path, O_RDONLY), landed = 0;
		assert_true(fd >= 0);
		/* nothing lands after the fence returned: what is on the device
		 * now is what stays there */
		for (int k = 0; k < 12; k++) {
			assert_int_equal(pread(fd, b, len, (off_t)(8 + k) * (off_t)MiB), (ssize_t)len);
			landed += b[0] == 0x70 + k;
		}
		usleep(50000);
		for (int k = 0; k < 12; k++) {
			assert_int_equal(pread(fd, b, len, (off_t)(8 + k) * (off_t)MiB), (ssize_t)len);
			landed -= b[0] == 0x70 + k;
		}
		assert_int_equal(landed, 0);
		close(fd);
	}
	assert_int_equal(dev_flush(dev), -EIO);
	dev_close(dev);

	/* what the flush covered is there after a reopen */
	assert_int_equal(dev_open(path, 1, &dev), 0);
	assert_int_equal(dev_read(dev, b, len, 31 * MiB), 0);
	assert_int_equal(b[len - 1], 0x4f);
	dev_close(dev);
	free(a);
	free(b);
	tu_rmimage(path);
}

/* tu_format() hands back a formatted, open device. */
static void test_testutil(void **state)
{
	char *path = tu_tmpimage(200 * MiB);
	struct shoal_dev *dev = tu_format(path, 3);
	uint8_t b[4096];
	const struct shoal_sb *sb = (const void *)b;

	assert_non_null(dev);
	assert_int_equal(dev->d_size, 200 * MiB);
	assert_int_equal(dev_read(dev, b, sizeof(b), 0), 0);
	assert_int_equal(meta_check(b, sizeof(b), SHOAL_MT_SB, 0), 0);
	assert_int_equal(sb->sb_jcount, 3);
	assert_int_equal(sb->sb_jblocks, shoal_default_jbytes(200 * MiB, 3, 4096) / 4096);
	dev_close(dev);
	tu_rmimage(path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_crc32c_check_value),
		cmocka_unit_test(test_name_hash),
		cmocka_unit_test(test_meta_check),
		cmocka_unit_test(test_format_default),
		cmocka_unit_test(test_format_block_sizes),
		cmocka_unit_test(test_trailing_group),
		cmocka_unit_test(test_bad_params),
		cmocka_unit_test(test_too_small),
		cmocka_unit_test(test_writes_only_metadata),
		cmocka_unit_test(test_random_fields),
		cmocka_unit_test(test_progress),
		cmocka_unit_test(test_readonly_device),
		cmocka_unit_test(test_direct_writes),
		cmocka_unit_test(test_write_behind),
		cmocka_unit_test(test_testutil),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

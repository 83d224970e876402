/*
 * fz_parsers.c - a libFuzzer target for the on-disk parsers that take a
 * block and nothing else (core/meta.c): the metadata header check of every
 * type, the superblock sanity rules, fast-commit block validation and
 * replay, and the directory entry splitter.  The first input byte picks the
 * block size (1 KiB << (b & 3)) and the rest is the block, zero padded.
 *
 * Built with libFuzzer when SHOAL_LIBFUZZER is on (clang); otherwise with
 * fz_main.c, which runs it over random and mutated blocks as a smoke test.
 * Properties checked besides "no crash, no sanitizer report":
 *  (1) meta_check accepts a block after meta_seal for that type and address;
 *  (2) a fast-commit block meta_fc_valid accepts is replayed touching only
 *      the home blocks and byte ranges its records name, inside a block;
 *  (3) meta_dirents_split either refuses (-EUCLEAN, nothing changed) or
 *      keeps every byte of the entries (kept + moved = used).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meta.h"
#include "shoal/ondisk.h"

/* checked in every build type (assert is compiled out with NDEBUG) */
#define FZ_CHECK(x)                                                                 \
	do {                                                                        \
		if (!(x)) {                                                         \
			fprintf(stderr, "%s:%d: %s does not hold\n", __FILE__, __LINE__, #x); \
			abort();                                                    \
		}                                                                   \
	} while (0)

#define FZ_NBLK 4 /* home blocks a replay may touch: 1..3 */

struct fz_io {
	uint8_t *fi_home; /* FZ_NBLK blocks */
	uint32_t fi_bsize;
};

static int fz_read(void *arg, uint64_t blkno, void *buf)
{
	struct fz_io *io = arg;
	if (blkno >= FZ_NBLK)
		return -EIO;
	memcpy(buf, io->fi_home + blkno * io->fi_bsize, io->fi_bsize);
	return 0;
}

static int fz_write(void *arg, uint64_t blkno, const void *buf)
{
	struct fz_io *io = arg;
	FZ_CHECK(blkno > 0 && blkno < FZ_NBLK); /* validated: 1..nblocks-1 */
	memcpy(io->fi_home + blkno * io->fi_bsize, buf, io->fi_bsize);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint32_t bsize;
	uint8_t *b, *home, *tmp, *dst;
	uint64_t blkno;

	if (size < 1)
		return 0;
	bsize = SHOAL_MIN_BSIZE << (data[0] & 3);
	b = calloc(1, bsize);
	home = calloc(FZ_NBLK, bsize);
	tmp = malloc(bsize);
	dst = calloc(1, bsize);
	FZ_CHECK(b && home && tmp && dst);
	memcpy(b, data + 1, size - 1 < bsize ? size - 1 : bsize);
	blkno = ((const struct shoal_mh *)b)->mh_blkno;

	/* every type at the address the block names, and at another */
	for (uint16_t t = 0; t <= SHOAL_MT_MAX; t++) {
		(void)meta_check(b, bsize, t, blkno);
		(void)meta_check(b, bsize, t, blkno + 1);
	}
	if (!meta_check(b, bsize, SHOAL_MT_SB, blkno)) {
		const struct shoal_sb *sb = (const void *)b;
		(void)meta_sb_insane(sb, sb->sb_blocks * (uint64_t)bsize);
		(void)meta_sb_insane(sb, UINT64_MAX);
		(void)meta_sb_insane(sb, 0);
	}
	(void)meta_sb_insane((const void *)b, (uint64_t)bsize << 20);

	/* (1) */
	memcpy(tmp, b, bsize);
	uint16_t type = (uint16_t)(1 + ((const struct shoal_mh *)b)->mh_type % (SHOAL_MT_MAX - 1));
	meta_seal(tmp, bsize, type, blkno, 7);
	FZ_CHECK(meta_check(tmp, bsize, type, blkno) == 0);

	/* (2): the block as a fast-commit block at its own address */
	for (int data_ok = 0; data_ok < 2; data_ok++) {
		const struct shoal_lfast *fc = (const void *)b;
		if (meta_fc_valid(b, bsize, blkno, fc->fc_header.mh_seq, 1, FZ_NBLK, data_ok))
			continue;
		struct fz_io io = { home, bsize };
		struct meta_fc_io fio = { fz_read, fz_write, NULL, &io };
		for (uint64_t h = 1; h < FZ_NBLK; h++) /* valid homes, so replay patches them */
			meta_seal(home + h * bsize, bsize, SHOAL_MT_DINODE, h, 1);
		(void)meta_fc_replay(b, bsize, tmp, &fio);
	}

	/* (3): the payload past a leaf header as packed entries */
	{
		uint32_t used = ((const struct shoal_leaf *)b)->lf_used, dused = 0;
		uint8_t *area = b + SHOAL_LEAF_ENTRIES_OFF;
		uint32_t room = bsize - SHOAL_LEAF_ENTRIES_OFF;
		if (used > room)
			used = room;
		uint32_t before = used;
		memcpy(tmp, area, room);
		int moved = meta_dirents_split(area, &used, dst, &dused, b[0] % 63);
		if (moved < 0)
			FZ_CHECK(used == before && !memcmp(tmp, area, room));
		else
			FZ_CHECK(used + dused == before);
	}
	free(b);
	free(home);
	free(tmp);
	free(dst);
	return 0;
}

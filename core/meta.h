/* meta.h - sealing and checking metadata blocks, and the directory name hash:
 * the one place that encodes the shoal_mh rules of docs/FORMAT.md. */
#ifndef SHOAL_META_H
#define SHOAL_META_H
#include <stddef.h>
#include <stdint.h>

/*
 * Set the header of a whole metadata block of bsize bytes (magic, type,
 * format, blkno, seq; mh_pad zero) and recompute its CRC.  Call it last,
 * after every other byte of the block is final.
 */
void meta_seal(void *block, uint32_t bsize, uint16_t type, uint64_t blkno, uint64_t seq);

/* Recompute mh_crc only, after changing a block whose header is already set. */
void meta_update_crc(void *block, uint32_t bsize);

/* CRC32C of the block as mh_crc must hold it: computed with mh_crc as zero. */
uint32_t meta_crc(const void *block, uint32_t bsize);

/*
 * Check a metadata block read from blkno: magic, format, type (type 0 accepts
 * any known type), mh_blkno and CRC.  0 if valid, -EUCLEAN otherwise.  Does
 * not log: the caller names the block in its own report.
 */
int meta_check(const void *block, uint32_t bsize, uint16_t type, uint64_t blkno);

/* The 63-bit directory name hash (also the readdir offset); always >= 3. */
uint64_t meta_name_hash(uint64_t seed, const char *name, size_t len);

/*
 * The superblock sanity rules of FORMAT.md section 3, for a superblock that
 * meta_check accepted, on a device of devsize bytes: NULL if they hold,
 * else the first one broken.  The mount and fsck.shoal both choose their
 * superblock by it (the primary if it passes, else the backup), so that
 * they always agree on which copy is good.
 */
struct shoal_sb;
const char *meta_sb_insane(const struct shoal_sb *sb, uint64_t devsize);

/*
 * Split a directory leaf's packed entries (area, *used bytes): those whose
 * hash has bit `bit` set move to the end of dst (*dst_used bytes), the rest
 * close up in area and the freed tail is zeroed.  The entries are checked
 * first: a malformed one gives -EUCLEAN and changes nothing.  Returns the
 * number of entries moved.  (dir.c splits leaves with it, and so does
 * fsck.shoal when it grows lost+found.)
 */
int meta_dirents_split(uint8_t *area, uint32_t *used, uint8_t *dst, uint32_t *dst_used,
		       unsigned bit);

/*
 * Fast-commit blocks (FORMAT.md 11.4), for replay by core/journal.c and
 * fsck.shoal alike.  meta_fc_valid: the block read from log address daddr
 * is a valid fast-commit block of sequence seq whose records all lie inside
 * it and name home blocks in [lo, hi) (0, or -EUCLEAN): the resource
 * groups, sb_rgfirst .. N-2 (FORMAT.md 11.4); data records
 * (SHOAL_FR_DATA) only if data_ok (SHOAL_FEAT_INCOMPAT_FCDATA).  meta_fc_next walks the
 * records of a valid block (*cursor starts at 0; 1 while there is one).
 * meta_fc_first: rec is the first record of its home block (replay reads,
 * patches and writes each home block once, at its first record).
 * meta_fc_apply copies every range of the block for home block blkno into
 * home (the caller then recomputes the CRC).
 */
struct shoal_lfrec;
/* Bytes of a fast-commit block written and covered by its CRC. */
uint32_t meta_fc_span(uint32_t fc_bytes, uint32_t bsize);
int meta_fc_valid(const void *block, uint32_t bsize, uint64_t daddr, uint64_t seq,
		  uint64_t lo, uint64_t hi, int data_ok);
int meta_fc_next(const void *block, uint32_t *cursor, const struct shoal_lfrec **rec,
		 const uint8_t **data);
int meta_fc_first(const void *block, const struct shoal_lfrec *rec);
void meta_fc_apply(const void *block, uint64_t blkno, uint8_t *home);

/*
 * Replay a valid fast-commit block (FORMAT.md 11.3 step 2): each home block
 * it names is read into tmp (bsize bytes), patched, sealed with a new CRC
 * and written back, once (a data record's block: patched only).  A home
 * block of metadata records that is not valid metadata at its
 * address is left alone and reported to fi_bad (may be NULL): the ranges
 * were taken against a valid image.  Returns 0 or what fi_read/fi_write
 * returned.  core/journal.c and fsck.shoal each bring their own I/O.
 */
struct meta_fc_io {
	int (*fi_read)(void *arg, uint64_t blkno, void *buf);
	int (*fi_write)(void *arg, uint64_t blkno, const void *buf);
	void (*fi_bad)(void *arg, uint64_t blkno);
	void *fi_arg;
};
int meta_fc_replay(const void *block, uint32_t bsize, uint8_t *tmp,
		   const struct meta_fc_io *io);

/*
 * Replay holds a transaction's fast-commit blocks back until it knows
 * whether the transaction's commit follows them in the log (then they are
 * superseded and dropped: the commit carries every dinode they name, and
 * the data they carry was written home before it) or not (then they are
 * applied, in log order, once the log ends): FORMAT.md 11.3.
 * meta_fc_hold notes the log position of one (-ENOMEM).
 */
struct meta_fc_held {
	uint32_t *fh_pos;
	uint32_t fh_n, fh_cap;
};
int meta_fc_hold(struct meta_fc_held *h, uint32_t pos);

#endif

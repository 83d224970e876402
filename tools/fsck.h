/*
 * fsck.h - the state shared by the passes of fsck.shoal (tools/fsck*.c).
 *
 * fsck.c        options, superblock, block I/O with the replay overlay,
 *               reporting, the 2-bit maps, the inode table, the driver
 * fsck_journal.c pass 1b: journal heads, transaction validation, replay
 * fsck_rg.c     pass 1c/3/6: group headers, disk bitmaps, block claims,
 *               allocation, bitmap and counter rebuild
 * fsck_inode.c  dinodes, block maps, xattrs; passes 4 and 5
 * fsck_dir.c    directories; passes 2 and 3
 * fsck_lost.c   pass 5a: leaf repairs, orphans, lost+found, cycles
 */
#ifndef SHOAL_FSCK_H
#define SHOAL_FSCK_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "dev.h"
#include "shoal/ondisk.h"

#define FSCK_EXIT_OK 0
#define FSCK_EXIT_FIXED 1
#define FSCK_EXIT_UNFIXED 4
#define FSCK_EXIT_OPERR 8

#define FSCK_PROG "fsck.shoal"
#define FSCK_LOSTFOUND "lost+found"

/* fi_flags */
#define FI_VALID 0x0001     /* a usable dinode */
#define FI_BAD 0x0002       /* not a usable dinode: entries to it dangle */
#define FI_CRCOK 0x0004     /* bad CRC accepted: contents passed the checks */
#define FI_WALKED 0x0008    /* directory: entries walked */
#define FI_QUEUED 0x0010    /* directory: in the walk queue */
#define FI_MAPPED 0x0020    /* block map and xattr walked */
#define FI_ORPHAN 0x0040    /* unreferenced and unlinked */
#define FI_FREED 0x0080     /* freed by this run */
#define FI_LOST 0x0100      /* unreferenced, not an orphan */
#define FI_SCANNED 0x0200   /* found by the bitmap scan, not by an entry */
#define FI_CONNECTED 0x0400 /* directory: reachable from the root */

/* One inode met by the walk.  fi_ino 0 marks an empty table slot. */
struct fsck_ino {
	uint64_t fi_ino;
	uint64_t fi_parent;  /* directories: directory of the entry kept */
	uint64_t fi_dparent; /* di_parent on disk */
	uint64_t fi_blocks;  /* blocks found owned, dinode included */
	uint64_t fi_dblocks; /* di_blocks on disk */
	uint32_t fi_mode;
	uint32_t fi_nlink;    /* di_nlink on disk */
	uint32_t fi_refs;     /* entries found pointing at it */
	uint32_t fi_subdirs;  /* directories: entries that are directories */
	uint32_t fi_entries;  /* directories: entries kept */
	uint32_t fi_dentries; /* di_entries on disk */
	uint16_t fi_flags;
	uint8_t fi_dstate; /* the dinode's state in the disk bitmap */
};

/* A resource group as the superblock lays it out, and what its header said. */
struct fsck_rg {
	uint64_t fr_addr;
	uint64_t fr_data0;
	uint32_t fr_length;
	int fr_valid;      /* header passed meta_check and its fields match */
	int fr_readable;   /* header passed meta_check (bitmap trusted) */
	uint32_t fr_dfree; /* rg_free on disk */
	uint32_t fr_ddinodes;
	uint64_t fr_seq; /* mh_seq on disk */
	int fr_dirty;    /* a repair changed states: rewrite, nothing to report */
};

/* A directory-leaf run to replace with an empty leaf once blocks can be
 * allocated (pass 5). */
struct fsck_leaffix {
	uint64_t lx_dir;
	uint64_t lx_index; /* first table entry of the run */
	uint64_t lx_count; /* table entries in the run */
	uint16_t lx_depth;
};

/* A hashed directory whose table is damaged: rebuilt in pass 5a from the
 * entries of the leaves the walk accepted. */
struct fsck_rebuild {
	uint64_t rb_dir;
	uint64_t *rb_leaves; /* chains included */
	size_t rb_n;
};

struct fsck {
	const char *f_name; /* device path, prefix of every report line */
	struct shoal_dev *f_dev;
	int f_yes;
	int f_verbose;
	int f_force;

	struct shoal_sb f_sb;
	uint32_t f_bsize;
	uint32_t f_bshift;
	uint64_t f_blocks;
	uint64_t f_seed;

	struct fsck_rg *f_rgs;
	uint32_t f_rgcount;
	uint8_t *f_dmap; /* 2 bits per block: state in the disk bitmaps */
	uint8_t *f_fmap; /* 2 bits per block: state the walk found */

	/* inode records in chunks, so pointers to them stay valid; f_ihash
	 * maps an inode number to its record index + 1 (0: empty slot) */
	struct fsck_ino **f_ichunks;
	uint64_t f_nchunks;
	uint64_t f_icount;
	uint64_t *f_ihash;
	uint64_t f_icap; /* power of two */

	/* replayed journal images not written to the device (-n) */
	uint64_t *f_ovkey;
	uint8_t **f_ovblk;
	uint64_t f_ovcap;
	uint64_t f_ovcount;

	uint64_t *f_queue; /* directories to walk */
	size_t f_qhead, f_qtail, f_qcap;

	struct fsck_leaffix *f_leaffix;
	size_t f_nleaffix, f_capleaffix;
	struct fsck_rebuild *f_rebuild;
	size_t f_nrebuild, f_caprebuild;

	uint64_t f_lostfound; /* inode of /lost+found, 0 if none */
	uint32_t f_alloc_rg;  /* fsck_alloc() resumes its search here */
	uint64_t f_fixed;
	uint64_t f_unfixed;
	uint64_t f_orphans;
	int f_modified; /* the device was written */
	int f_operr;    /* an I/O error or allocation failure: exit 8 */
	int f_ro_feat;  /* unknown ro_compat features: never write */

	int f_pass;
	const char *f_pass_name;
	double f_pass_start; /* seconds, CLOCK_MONOTONIC */
	double f_last_progress;
	uint64_t f_pcalls;
	uint64_t f_ptotal; /* passes 2-3: dinodes the bitmaps count */
	unsigned f_pass_msgs;
	unsigned f_pass_hidden;
};

/* fsck.c: reporting.  fsck_problem() prints one problem and says whether
 * the caller must repair it now (-y and fixable). */
int fsck_problem(struct fsck *f, int fixable, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void fsck_info(struct fsck *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void fsck_operr(struct fsck *f, const char *what, int err);
void fsck_pass(struct fsck *f, int pass, const char *name);
void fsck_progress(struct fsck *f, uint64_t done, uint64_t total);

/* fsck.c: blocks.  Reads see the replay overlay; writes only happen with -y. */
int blk_read(struct fsck *f, uint64_t blkno, void *buf);
int blk_write(struct fsck *f, uint64_t blkno, const void *buf);
void *blk_alloc(struct fsck *f);
int ov_put(struct fsck *f, uint64_t blkno, const void *buf);
/* header intact (magic, format, type, blkno) whatever the CRC says */
int blk_header_ok(struct fsck *f, const void *buf, uint16_t type, uint64_t blkno);

/* fsck.c: the 2-bit maps */
static inline int map_get(const uint8_t *map, uint64_t blk)
{
	return (map[blk >> 2] >> ((blk & 3) * 2)) & 3;
}
static inline void map_set(uint8_t *map, uint64_t blk, int state)
{
	uint8_t *p = &map[blk >> 2];
	unsigned sh = (unsigned)(blk & 3) * 2;
	*p = (uint8_t)((*p & ~(3u << sh)) | ((unsigned)state << sh));
}

/* fsck.c: the inode table.  Records never move. */
#define ITAB_CHUNK_SHIFT 16
static inline struct fsck_ino *itab_rec(struct fsck *f, uint64_t i)
{
	return &f->f_ichunks[i >> ITAB_CHUNK_SHIFT][i & ((1u << ITAB_CHUNK_SHIFT) - 1)];
}
struct fsck_ino *itab_find(struct fsck *f, uint64_t ino);
struct fsck_ino *itab_add(struct fsck *f, uint64_t ino);
/* every entry, sorted by inode number; caller frees */
struct fsck_ino **itab_sorted(struct fsck *f, uint64_t *count);

/* fsck_journal.c */
int fsck_journals(struct fsck *f);

/* fsck_rg.c */
int fsck_rg_load(struct fsck *f);
/* Is blkno inside a group's covered range (allocatable)? */
int fsck_covered(struct fsck *f, uint64_t blkno);
/* Claim blkno for the walk: 0, or -EEXIST when it is already claimed. */
int fsck_claim(struct fsck *f, uint64_t blkno, int state);
/* A repair sets blkno's state: the found map and the disk view (and the
 * header counts we hold) both change, so pass 6 rewrites the group without
 * reporting the change a second time. */
void fsck_set_state(struct fsck *f, uint64_t blkno, int state);
/* Allocate a block nobody uses (-y, pass 5 on): 0 or -ENOSPC. */
int fsck_alloc(struct fsck *f, int state, uint64_t *blkno);
/* Candidate dinodes: blocks the disk bitmap says are dinodes, and every
 * block of a group whose header is unreadable. */
int fsck_rg_scan(struct fsck *f, int (*fn)(struct fsck *f, uint64_t blkno, int dstate));
int fsck_rg_sync(struct fsck *f);

/* fsck_inode.c */
/* Load (and validate, once) the dinode at ino; NULL only on ENOMEM. */
struct fsck_ino *ino_get(struct fsck *f, uint64_t ino);
/* Read a dinode already judged FI_VALID into buf. */
int ino_read(struct fsck *f, struct fsck_ino *fi, void *buf);
/* Write a dinode back (-y), CRC updated. */
int ino_write(struct fsck *f, uint64_t ino, void *buf);
int fsck_maps(struct fsck *f);   /* pass 4 */
int fsck_counts(struct fsck *f); /* pass 5b */
/* Look up logical block lblk of the inode in buf (0 = hole or error). */
uint64_t bmap_lookup(struct fsck *f, const void *dibuf, uint64_t lblk);
uint64_t bmap_capacity(struct fsck *f, unsigned height);
/* Walk a hashed directory's block map: claim its indirect and table blocks,
 * fill tbl[0..ntab) with the valid table blocks; 1 if the dinode in dib
 * changed, 0, or -errno. */
int bmap_walk_htable(struct fsck *f, struct fsck_ino *fi, uint8_t *dib, uint64_t *tbl,
		     uint64_t ntab);
const char *fsck_mode_name(uint32_t mode);
/* Free an inode's blocks in the found map (orphan removal). */
int ino_release(struct fsck *f, struct fsck_ino *fi);
/* Free the indirect and level-1 blocks of the block map in dib (not the
 * leaves a hash table names). */
int bmap_release(struct fsck *f, const uint8_t *dib);

/* fsck_dir.c */
int fsck_tree(struct fsck *f);      /* pass 2 */
int fsck_detached(struct fsck *f);  /* pass 3 */

/* fsck_lost.c */
int fsck_connect(struct fsck *f);   /* pass 5a */
/* An empty inline directory dinode for blkno in b, sealed. */
void dir_make(struct fsck *f, uint8_t *b, uint64_t blkno, uint64_t parent, uint32_t perm);
void now_ts(struct shoal_ts *ts);
/* Walk one directory's entries and blocks (called by the passes above). */
int dir_walk(struct fsck *f, struct fsck_ino *dir);
uint8_t mode_dtype(uint32_t mode);

#endif

/*
 * ondisk.h - the shoal on-disk format.  This header mirrors docs/FORMAT.md
 * exactly; when one changes, the other changes in the same commit.
 *
 * Everything is little-endian.  Structures are laid out with explicit padding
 * so that their in-memory layout is their on-disk layout on every supported
 * host (little-endian, 8-byte aligned u64); the static asserts at the end pin
 * every offset that FORMAT.md documents.
 *
 * Invariants of the format (checked by fsck.shoal):
 *  (1) every metadata block starts with a shoal_mh whose mh_blkno is the
 *      block's own address and whose mh_crc is the CRC32C of the whole block
 *      computed with mh_crc set to zero;
 *  (2) an inode's number is the address of its dinode block;
 *  (3) a block is in exactly one state in its resource group's bitmap, and a
 *      block referenced by an inode is DATA (or DINODE for the inode itself);
 *  (4) a dinode whose di_nlink is zero is marked UNLINKED in the bitmap.
 */
#ifndef SHOAL_ONDISK_H
#define SHOAL_ONDISK_H

#include <stddef.h>
#include <stdint.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "shoal's on-disk structures are read in place: little-endian hosts only"
#endif

#define SHOAL_MAGIC 0x4c4f4853u /* "SHOL" as bytes on disk */
#define SHOAL_FORMAT 1          /* sb_format of this version */

#define SHOAL_MIN_BSIZE 1024
#define SHOAL_MAX_BSIZE 65536
#define SHOAL_DEFAULT_BSIZE 4096
#define SHOAL_NAME_MAX 255
#define SHOAL_SB_BLKNO 0 /* primary superblock; the backup is the last block */

/* Metadata block types (mh_type). */
enum shoal_mtype {
	SHOAL_MT_SB = 1,       /* superblock (and its backup) */
	SHOAL_MT_RG = 2,       /* resource group header + bitmap */
	SHOAL_MT_DINODE = 3,   /* inode */
	SHOAL_MT_INDIRECT = 4, /* block-map interior node */
	SHOAL_MT_LEAF = 5,     /* directory hash leaf */
	SHOAL_MT_HTABLE = 6,   /* directory hash table block */
	SHOAL_MT_XATTR = 7,    /* extended attribute block */
	SHOAL_MT_JHEAD = 8,    /* journal header (first block of a journal) */
	SHOAL_MT_LDESC = 9,    /* log descriptor */
	SHOAL_MT_LFAST = 10,   /* fast-commit log block (SHOAL_FEAT_INCOMPAT_FASTCOMMIT) */
	SHOAL_MT_HBEAT = 11,   /* heartbeat block (SHOAL_FEAT_INCOMPAT_HEARTBEAT) */
	SHOAL_MT_MAX = 12,
};

/* Common header of every metadata block: 32 bytes. */
struct shoal_mh {
	uint32_t mh_magic;  /* SHOAL_MAGIC */
	uint16_t mh_type;   /* enum shoal_mtype */
	uint16_t mh_format; /* SHOAL_FORMAT */
	uint32_t mh_crc;    /* CRC32C of the block with this field zero */
	uint32_t mh_pad;
	uint64_t mh_blkno; /* this block's own address */
	uint64_t mh_seq;   /* journal sequence of the last commit that logged it */
};

/* --- superblock -------------------------------------------------------- */

#define SHOAL_LOCKNAME_LEN 64
#define SHOAL_LOCKPROTO_LEN 32

/* Feature flags.  A mount refuses unknown incompat bits, mounts read-only
 * with unknown ro_compat bits, and ignores unknown compat bits. */
#define SHOAL_FEAT_COMPAT_SUPP 0ull
/* The journal may hold fast-commit blocks (FORMAT.md 11.4): a program that
 * cannot replay them would stop at the first one and lose what follows. */
#define SHOAL_FEAT_INCOMPAT_FASTCOMMIT 0x1ull
/* fast-commit blocks may carry file data (records with SHOAL_FR_DATA), and
 * replay applies a transaction's fast-commit blocks only when its commit
 * is not in the log (FORMAT.md 11.4) */
#define SHOAL_FEAT_INCOMPAT_FCDATA 0x2ull
/* sb_jcount + 1 heartbeat blocks follow the journals (FORMAT.md 11.5): a
 * program that does not write them would defeat the protection they give,
 * so it must not mount the filesystem at all (as ext4's MMP) */
#define SHOAL_FEAT_INCOMPAT_HEARTBEAT 0x4ull
#define SHOAL_FEAT_INCOMPAT_SUPP                                                        \
	(SHOAL_FEAT_INCOMPAT_FASTCOMMIT | SHOAL_FEAT_INCOMPAT_FCDATA |                   \
	 SHOAL_FEAT_INCOMPAT_HEARTBEAT)
#define SHOAL_FEAT_RO_COMPAT_SUPP 0ull

struct shoal_sb {
	struct shoal_mh sb_header;
	uint32_t sb_format;      /* SHOAL_FORMAT */
	uint32_t sb_bsize;       /* block size in bytes, power of two */
	uint32_t sb_bsize_shift; /* log2(sb_bsize) */
	uint32_t sb_flags;
	uint64_t sb_blocks; /* blocks in the filesystem, both superblocks included */
	uint64_t sb_feat_compat;
	uint64_t sb_feat_incompat;
	uint64_t sb_feat_ro_compat;
	uint8_t sb_uuid[16];
	char sb_locktable[SHOAL_LOCKNAME_LEN]; /* "cluster:fsname", NUL padded */
	char sb_lockproto[SHOAL_LOCKPROTO_LEN]; /* default lock module */
	uint64_t sb_root;     /* inode number (block) of the root directory */
	uint64_t sb_jfirst;   /* first block of journal 0 */
	uint32_t sb_jcount;   /* journals (node slots) */
	uint32_t sb_jblocks;  /* blocks per journal */
	uint64_t sb_rgfirst;  /* header block of resource group 0 */
	uint32_t sb_rgcount;  /* resource groups */
	uint32_t sb_rgblocks; /* blocks per resource group, header included */
	uint64_t sb_hash_seed; /* seed of the directory name hash */
	int64_t sb_ctime;      /* seconds since the epoch at mkfs */
	uint64_t sb_hbfirst;   /* first heartbeat block (HEARTBEAT), else 0 */
	uint64_t sb_pad[7];
};

/* --- resource groups --------------------------------------------------- */

/* Two bits per block, four blocks per byte, lowest bits first. */
enum shoal_bstate {
	SHOAL_B_FREE = 0,
	SHOAL_B_DATA = 1,     /* data, indirect, leaf, htable or xattr block */
	SHOAL_B_UNLINKED = 2, /* a dinode with no links, still open somewhere */
	SHOAL_B_DINODE = 3,
};

struct shoal_rg {
	struct shoal_mh rg_header;
	uint32_t rg_index;  /* position of this group, 0.. */
	uint32_t rg_flags;
	uint64_t rg_data0;  /* first block the bitmap covers (header + 1) */
	uint32_t rg_length; /* blocks the bitmap covers */
	uint32_t rg_free;   /* FREE blocks among them */
	uint32_t rg_dinodes; /* DINODE + UNLINKED blocks */
	uint32_t rg_pad0;
	uint64_t rg_pad[2];
	/* uint8_t rg_bitmap[] follows at offset SHOAL_RG_BITMAP_OFF */
};
#define SHOAL_RG_BITMAP_OFF 96
#define SHOAL_RG_MAX_LENGTH(bsize) (((bsize) - SHOAL_RG_BITMAP_OFF) * 4u)

/* --- inodes ------------------------------------------------------------ */

struct shoal_ts {
	int64_t ts_sec;
	uint32_t ts_nsec;
	uint32_t ts_pad;
};

/* di_flags.  The first group matches FS_IOC_GETFLAGS bit values. */
#define SHOAL_DIF_IMMUTABLE 0x00000010u /* FS_IMMUTABLE_FL */
#define SHOAL_DIF_APPEND 0x00000020u    /* FS_APPEND_FL */
#define SHOAL_DIF_NODUMP 0x00000040u    /* FS_NODUMP_FL */
#define SHOAL_DIF_NOATIME 0x00000080u   /* FS_NOATIME_FL */
#define SHOAL_DIF_USER_MASK 0x000000f0u
#define SHOAL_DIF_EXHASH 0x00010000u /* directory is hashed (not inline) */

struct shoal_dinode {
	struct shoal_mh di_header;
	uint32_t di_mode;
	uint32_t di_uid;
	uint32_t di_gid;
	uint32_t di_nlink;
	uint64_t di_size;   /* bytes (past what the map holds: a hole); hashed dirs: htable bytes */
	uint64_t di_blocks; /* blocks owned, this dinode included */
	struct shoal_ts di_atime;
	struct shoal_ts di_mtime;
	struct shoal_ts di_ctime;
	struct shoal_ts di_crtime;
	uint64_t di_rdev;
	uint64_t di_xattr;      /* xattr block, 0 when none */
	uint64_t di_generation; /* bumped each time this block becomes an inode */
	uint64_t di_goal;       /* allocation hint: last block allocated */
	uint32_t di_flags;
	uint16_t di_height;  /* block-map height; 0 = data inline */
	uint16_t di_depth;   /* hashed directories: log2 of htable entries */
	uint32_t di_entries; /* directories: entries, . and .. excluded */
	uint32_t di_pad0;
	uint64_t di_parent; /* directories: inode number of the parent */
	uint64_t di_pad[9];
	/* payload at SHOAL_DI_PAYLOAD_OFF: inline data, inline directory
	 * entries, or the block-map root pointers */
};
#define SHOAL_DI_PAYLOAD_OFF 256
#define SHOAL_DI_PAYLOAD(bsize) ((bsize) - SHOAL_DI_PAYLOAD_OFF)
#define SHOAL_DI_PTRS(bsize) (SHOAL_DI_PAYLOAD(bsize) / 8u)
#define SHOAL_IND_PTR_OFF 32 /* pointers of an indirect block start here */
#define SHOAL_IND_PTRS(bsize) (((bsize) - SHOAL_IND_PTR_OFF) / 8u)
#define SHOAL_MAX_HEIGHT 6

/* --- directories ------------------------------------------------------- */

/*
 * A directory entry, in an inline directory's payload or a leaf block.
 * Entries are packed one after another without padding; de_hash is the
 * 63-bit name hash, also the entry's readdir offset.
 */
struct shoal_dirent {
	uint64_t de_hash;
	uint64_t de_ino;
	uint8_t de_type; /* DT_* value */
	uint8_t de_namelen;
	/* char de_name[de_namelen], no NUL */
} __attribute__((packed));
#define SHOAL_DIRENT_SIZE(namelen) (18u + (namelen))

/* Inline directories: payload starts with this, entries follow. */
struct shoal_inline_dir {
	uint32_t id_used; /* bytes of entries after this header */
	uint32_t id_pad;
};

struct shoal_leaf {
	struct shoal_mh lf_header;
	uint16_t lf_depth; /* hash bits this leaf is responsible for */
	uint16_t lf_count; /* entries */
	uint32_t lf_used;  /* bytes of entries from SHOAL_LEAF_ENTRIES_OFF */
	uint64_t lf_next;  /* chained leaf for the same hash range, 0 if none */
};
#define SHOAL_LEAF_ENTRIES_OFF 48
#define SHOAL_HT_PTR_OFF 32 /* hash-table blocks: u64 leaf addresses follow */
#define SHOAL_HT_PTRS(bsize) (((bsize) - SHOAL_HT_PTR_OFF) / 8u)
#define SHOAL_MAX_DEPTH 24

/* --- extended attributes ----------------------------------------------- */

enum shoal_xattr_ns {
	SHOAL_XNS_USER = 1,
	SHOAL_XNS_TRUSTED = 2,
	SHOAL_XNS_SECURITY = 3,
	SHOAL_XNS_SYSTEM = 4,
};

struct shoal_xattr_hdr {
	struct shoal_mh xh_header;
	uint32_t xh_count;
	uint32_t xh_used; /* bytes of entries after this header */
};
#define SHOAL_XATTR_ENTRIES_OFF 40

struct shoal_xattr_ent {
	uint8_t xe_ns;
	uint8_t xe_namelen;
	uint16_t xe_vallen;
	/* name (no NUL, no namespace prefix), then value */
} __attribute__((packed));

/* --- journals ---------------------------------------------------------- */

#define SHOAL_JH_CLEAN 0x1u /* unmounted cleanly: nothing to replay */

/* First block of each journal.  The log is the circular area of blocks
 * 1 .. sb_jblocks-1 of the journal. */
struct shoal_jhead {
	struct shoal_mh jh_header;
	uint32_t jh_index; /* journal id = node slot */
	uint32_t jh_flags;
	uint64_t jh_tail;     /* log block (1..) where replay starts */
	uint64_t jh_tail_seq; /* sequence of the transaction at jh_tail */
	int64_t jh_time;      /* last update, seconds */
	char jh_node[SHOAL_LOCKNAME_LEN]; /* last node that used this slot */
	uint64_t jh_pad[4];
};

/*
 * A transaction in the log is one or more descriptor blocks, each followed by
 * the images of the blocks its tags list.  mh_seq of every descriptor is the
 * transaction's sequence number; the last descriptor has SHOAL_LD_LAST.  A
 * transaction is valid, and replayed, only if every descriptor is valid and
 * every image's CRC32C (over the whole block) equals its tag's lt_crc.  The
 * descriptor's own mh_crc covers the tags, so no separate commit block is
 * needed: one write of the whole transaction and one flush make it durable.
 */
#define SHOAL_LD_LAST 0x1u

struct shoal_ltag {
	uint64_t lt_blkno; /* home address of the image */
	uint32_t lt_crc;   /* CRC32C of the image as logged */
	uint32_t lt_flags; /* 0; reserved for record types to come */
};

struct shoal_ldesc {
	struct shoal_mh ld_header;
	uint32_t ld_count; /* tags that follow */
	uint32_t ld_flags; /* SHOAL_LD_* */
	int64_t ld_time;   /* commit time, seconds */
	/* struct shoal_ltag ld_tags[ld_count] at SHOAL_LDESC_TAG_OFF */
};
#define SHOAL_LDESC_TAG_OFF 48
#define SHOAL_LDESC_TAGS(bsize) (((bsize) - SHOAL_LDESC_TAG_OFF) / 16u)

/*
 * Fast-commit block (FORMAT.md 11.4): the byte ranges of metadata blocks
 * that changed since they were last logged (and, with FCDATA, of file data
 * waiting in the dirty-block index), written in one log block with one
 * flush.  Its mh_seq is the sequence of the running (not yet committed)
 * transaction; several may precede that transaction's commit, each holding
 * what changed since the one before; replay applies them in log order, and
 * only when the commit of that sequence is not in the log (FORMAT.md 11.3).  Records follow from
 * SHOAL_LFAST_REC_OFF, each 16 bytes of struct shoal_lfrec, then fr_len
 * bytes, padded with zeros to a multiple of 8.
 */
struct shoal_lfast {
	struct shoal_mh fc_header;
	uint32_t fc_count; /* records */
	uint32_t fc_bytes; /* bytes of records from SHOAL_LFAST_REC_OFF */
	int64_t fc_time;   /* seconds */
};
#define SHOAL_LFAST_REC_OFF 48

struct shoal_lfrec {
	uint64_t fr_blkno; /* home block */
	uint16_t fr_off;   /* first byte of the range, >= 32 (never the header)
			    * unless SHOAL_FR_DATA */
	uint16_t fr_len;   /* bytes, >= 1; the range lies inside the block */
	uint32_t fr_flags; /* 0, or SHOAL_FR_DATA */
};
/* the home block is file data (no header, no checksum): FCDATA only */
#define SHOAL_FR_DATA 0x1u
#define SHOAL_LFREC_SIZE(len) (16u + (((uint32_t)(len) + 7u) & ~7u))

/*
 * Heartbeat block (FORMAT.md 11.5): one per journal slot, at sb_hbfirst + j,
 * and one for a single-node (lock=nolock) mount at sb_hbfirst + sb_jcount.
 * A mounted node rewrites its block every hb_interval_ms with hb_seq + 1;
 * a program that finds a block LIVE and sees it change over about two
 * intervals knows a writer it cannot see is using the filesystem.
 */
enum shoal_hb_state {
	SHOAL_HB_CLEAN = 0, /* nobody uses the slot (mkfs, a clean unmount) */
	SHOAL_HB_LIVE = 1,  /* a node has it mounted (or crashed with it mounted) */
};
struct shoal_hbeat {
	struct shoal_mh hb_header; /* type SHOAL_MT_HBEAT, mh_seq 0 */
	uint32_t hb_index;         /* j, or sb_jcount for the single-node block */
	uint32_t hb_state;         /* enum shoal_hb_state */
	uint64_t hb_seq;           /* bumped by every update */
	int64_t hb_time;           /* last update, seconds since the epoch */
	uint32_t hb_interval_ms;   /* the writer's update period */
	uint32_t hb_pid;           /* the writer's process id, 0: not known */
	char hb_node[SHOAL_LOCKNAME_LEN]; /* the writer's node name, NUL padded */
	uint8_t hb_boot[16];       /* the writer's machine: its boot id, 0: not known */
	uint64_t hb_pidns;         /* the writer's pid namespace (inode number) */
	uint64_t hb_pstart;        /* the writer's process start, clock ticks after boot */
};

_Static_assert(sizeof(struct shoal_mh) == 32, "mh");
_Static_assert(offsetof(struct shoal_sb, sb_hbfirst) == 248, "sb hbfirst");
_Static_assert(sizeof(struct shoal_sb) == 312, "sb");
_Static_assert(offsetof(struct shoal_hbeat, hb_node) == 64, "hbeat node");
_Static_assert(offsetof(struct shoal_hbeat, hb_boot) == 128, "hbeat boot");
_Static_assert(sizeof(struct shoal_hbeat) == 160, "hbeat");
_Static_assert(offsetof(struct shoal_sb, sb_format) == 32, "sb");
_Static_assert(offsetof(struct shoal_sb, sb_uuid) == 80, "sb uuid");
_Static_assert(offsetof(struct shoal_sb, sb_root) == 192, "sb root");
_Static_assert(sizeof(struct shoal_sb) <= 512, "sb size");
_Static_assert(sizeof(struct shoal_rg) <= SHOAL_RG_BITMAP_OFF, "rg");
_Static_assert(sizeof(struct shoal_dinode) == SHOAL_DI_PAYLOAD_OFF, "dinode");
_Static_assert(sizeof(struct shoal_leaf) == SHOAL_LEAF_ENTRIES_OFF, "leaf");
_Static_assert(sizeof(struct shoal_xattr_hdr) == SHOAL_XATTR_ENTRIES_OFF, "xattr");
_Static_assert(sizeof(struct shoal_ldesc) == SHOAL_LDESC_TAG_OFF, "ldesc");
_Static_assert(sizeof(struct shoal_ltag) == 16, "ltag");
_Static_assert(sizeof(struct shoal_lfast) == SHOAL_LFAST_REC_OFF, "lfast");
_Static_assert(sizeof(struct shoal_lfrec) == 16, "lfrec");
_Static_assert(sizeof(struct shoal_dirent) == 18, "dirent");

#endif

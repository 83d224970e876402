/*
 * fz_lib.c - the base image, the mutations and the walk of the image
 * fuzzers (fz_lib.h; the design is in fuzz_image.c's comment).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "crc32c.h"
#include "dev.h"
#include "meta.h"
#include "shoal/ondisk.h"
#include "shoal/shoal.h"

#include "fz_lib.h"

/* --- the generator ---------------------------------------------------------- */

uint64_t fz_rng_state;

uint64_t (*fz_rng_hook)(void);

uint64_t fz_rnd(void)
{
	if (fz_rng_hook)
		return fz_rng_hook();
	uint64_t z = (fz_rng_state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

uint64_t fz_rnd_below(uint64_t n)
{
	return n ? fz_rnd() % n : 0;
}

/* --- the base image --------------------------------------------------------- */

static const struct shoal_ctx fz_ctx = { .c_uid = 0, .c_gid = 0, .c_pid = 1, .c_umask = 022 };

void fz_die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "fuzz_image: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	exit(2);
}

static uint64_t mk(struct shoal_fs *fs, uint64_t dir, const char *name, mode_t mode,
		   const void *data, size_t len, uint64_t off)
{
	struct stat st;
	int err;

	if (S_ISDIR(mode))
		err = shoal_mkdir(fs, &fz_ctx, dir, name, mode & 07777, &st);
	else if (S_ISREG(mode))
		err = shoal_create(fs, &fz_ctx, dir, name, mode & 07777, O_RDWR, &st);
	else
		err = shoal_mknod(fs, &fz_ctx, dir, name, mode, makedev(1, 3), &st);
	if (err)
		fz_die("build: create %s: %s", name, strerror(-err));
	if (len && shoal_write(fs, &fz_ctx, st.st_ino, data, len, off, O_RDWR) != (ssize_t)len)
		fz_die("build: write %s at %" PRIu64, name, off);
	if (S_ISREG(mode))
		shoal_release(fs, st.st_ino, O_RDWR);
	return st.st_ino;
}

static void fill(uint8_t *buf, size_t len, unsigned salt)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = (uint8_t)(i * 31 + salt);
}

/* Fixed hash seed and journal sequence (both copies of the superblock), so
 * a seed lays out the same leaves every time. */
static void det_patch(const char *path)
{
	uint8_t b[FZ_BSIZE];
	struct shoal_sb *sb = (void *)b;
	struct shoal_jhead *jh = (void *)b;
	uint64_t last, jfirst;
	int fd = open(path, O_RDWR);

	if (fd < 0 || pread(fd, b, sizeof(b), 0) != (ssize_t)sizeof(b))
		fz_die("build: read the superblock of %s", path);
	last = sb->sb_blocks - 1;
	jfirst = sb->sb_jfirst;
	sb->sb_hash_seed = FZ_HASH_SEED;
	memset(sb->sb_uuid, 0x5a, sizeof(sb->sb_uuid));
	meta_update_crc(b, FZ_BSIZE);
	if (pwrite(fd, b, sizeof(b), 0) != (ssize_t)sizeof(b))
		fz_die("build: write the superblock");
	sb->sb_header.mh_blkno = last;
	meta_update_crc(b, FZ_BSIZE);
	if (pwrite(fd, b, sizeof(b), last * FZ_BSIZE) != (ssize_t)sizeof(b))
		fz_die("build: write the backup superblock");
	if (pread(fd, b, sizeof(b), jfirst * FZ_BSIZE) != (ssize_t)sizeof(b))
		fz_die("build: read the journal head");
	jh->jh_tail_seq = FZ_TAIL_SEQ;
	meta_update_crc(b, FZ_BSIZE);
	if (pwrite(fd, b, sizeof(b), jfirst * FZ_BSIZE) != (ssize_t)sizeof(b))
		fz_die("build: write the journal head");
	close(fd);
}

static void populate(struct shoal_fs *fs)
{
	static uint8_t buf[300 * FZ_BSIZE];
	uint64_t root = shoal_root(fs), d, h, big, f;
	char name[256], target[1200];
	struct stat st;
	int err;

	fill(buf, sizeof(buf), 7);
	mk(fs, root, "empty", S_IFREG | 0644, NULL, 0, 0);
	f = mk(fs, root, "inline", S_IFREG | 0644, buf, 100, 0);
	mk(fs, root, "inline-full", S_IFREG | 0644, buf, FZ_BSIZE - 256, 0);
	mk(fs, root, "h1", S_IFREG | 0644, buf, 5000, 0);
	mk(fs, root, "h2", S_IFREG | 0644, buf, 150 * FZ_BSIZE, 0);
	/* sparse: a few blocks far out make heights 3..6 (P0 96, P 124) */
	mk(fs, root, "h3", S_IFREG | 0644, buf, 3000, 20ull << 20);
	mk(fs, root, "h4", S_IFREG | 0644, buf, 3000, 2ull << 30);
	mk(fs, root, "h5", S_IFREG | 0644, buf, 3000, 200ull << 30);
	big = mk(fs, root, "h6", S_IFREG | 0644, buf, 3000, 30ull << 40);
	if (shoal_write(fs, &fz_ctx, big, buf, 2000, 5000, O_RDWR) != 2000)
		fz_die("build: write h6");
	mk(fs, root, "fifo", S_IFIFO | 0644, NULL, 0, 0);
	mk(fs, root, "chr", S_IFCHR | 0644, NULL, 0, 0);
	if (shoal_symlink(fs, &fz_ctx, root, "sym", "inline", &st))
		fz_die("build: symlink");
	memset(target, 'x', sizeof(target) - 1);
	target[sizeof(target) - 1] = '\0';
	if (shoal_symlink(fs, &fz_ctx, root, "longsym", target, &st))
		fz_die("build: long symlink");
	if (shoal_setxattr(fs, f, "user.one", "1", 1, 0) ||
	    shoal_setxattr(fs, f, "user.two", buf, 300, 0) ||
	    shoal_setxattr(fs, f, "trusted.t", "tt", 2, 0))
		fz_die("build: setxattr");

	d = mk(fs, root, "small", S_IFDIR | 0755, NULL, 0, 0);
	for (int i = 0; i < 6; i++) {
		snprintf(name, sizeof(name), "s%d", i);
		mk(fs, d, name, S_IFREG | 0644, buf, 10 + i * 150, 0);
	}
	if (shoal_setxattr(fs, d, "user.dir", "d", 1, 0))
		fz_die("build: setxattr dir");
	mk(fs, d, "sub", S_IFDIR | 0755, NULL, 0, 0);

	h = mk(fs, root, "hashed", S_IFDIR | 0755, NULL, 0, 0);
	for (int i = 0; i < 60; i++) {
		snprintf(name, sizeof(name), "file-%03d", i);
		mk(fs, h, name, S_IFREG | 0644, buf, (size_t)(i * 37) % 1500, 0);
	}
	/* many leaves, few inodes: hard links with long names (4 to a leaf)
	 * until the table needs several blocks and an indirect block */
	for (int i = 0; i < 420; i++) {
		snprintf(name, sizeof(name), "%05d-%0180d", i, 0);
		err = shoal_link(fs, f, h, name, &st);
		if (err)
			fz_die("build: link %s: %s", name, strerror(-err));
		shoal_forget(fs, f, 1);
	}
	mk(fs, h, "subdir", S_IFDIR | 0755, NULL, 0, 0);
}

/* The last changes, left in the journal by the power cut. */
static void last_changes(struct shoal_fs *fs)
{
	uint64_t root = shoal_root(fs), ino, f;
	struct stat st;
	uint8_t buf[4000];

	fill(buf, sizeof(buf), 99);
	mk(fs, root, "late", S_IFREG | 0644, buf, 3000, 0);
	if (shoal_lookup(fs, root, "hashed", &st))
		fz_die("build: lookup hashed");
	mk(fs, st.st_ino, "late-entry", S_IFREG | 0644, buf, 10, 0);
	/* an open file with no link: an orphan after the cut */
	if (shoal_create(fs, &fz_ctx, root, "orphan", 0644, O_RDWR, &st))
		fz_die("build: create orphan");
	ino = st.st_ino;
	if (shoal_write(fs, &fz_ctx, ino, buf, 2500, 0, O_RDWR) != 2500 ||
	    shoal_unlink(fs, &fz_ctx, root, "orphan"))
		fz_die("build: orphan");
	if (shoal_sync(fs))
		fz_die("build: sync");
	/* an overwrite made durable by a fast-commit block */
	if (shoal_lookup(fs, root, "inline", &st))
		fz_die("build: lookup inline");
	f = st.st_ino;
	if (shoal_write(fs, &fz_ctx, f, "fast", 4, 10, O_RDWR) != 4 || shoal_fsync(fs, f, 0))
		fz_die("build: fast commit");
}

void fz_build(const char *path)
{
	struct shoal_format_opts fo = { .fo_bsize = FZ_BSIZE, .fo_journals = 1,
					.fo_jbytes = FZ_JBYTES };
	struct shoal_mount_opts mo = { .mo_commit_secs = 3600, .mo_atime = SHOAL_NOATIME };
	struct shoal_dev *dev, *fdev;
	struct shoal_fs *fs;
	int fd, err;

	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || ftruncate(fd, FZ_IMG_BYTES))
		fz_die("build: %s: %s", path, strerror(errno));
	close(fd);
	if ((err = dev_open(path, 0, &dev)) || (err = shoal_format(dev, &fo, NULL)))
		fz_die("build: format: %s", strerror(-err));
	dev_close(dev);
	det_patch(path);
	if ((err = dev_open(path, 0, &dev)) || (err = dev_fault_wrap(dev, &fdev)))
		fz_die("build: open: %s", strerror(-err));
	err = shoal_mount(fdev, &mo, &fs);
	if (err)
		fz_die("build: mount: %s (%s)", strerror(-err), shoal_mount_error());
	populate(fs);
	if ((err = shoal_unmount(fs))) /* everything home, the journal clean */
		fz_die("build: unmount: %s", strerror(-err));
	dev_close(dev);
	if ((err = dev_open(path, 0, &dev)) || (err = dev_fault_wrap(dev, &fdev)))
		fz_die("build: open: %s", strerror(-err));
	err = shoal_mount(fdev, &mo, &fs);
	if (err)
		fz_die("build: mount: %s (%s)", strerror(-err), shoal_mount_error());
	last_changes(fs);
	dev_fault_cut(fdev, 0); /* the power cut: the home writes are lost */
	shoal_unmount(fs);
	dev_close(dev);
}

/* --- what the image holds ---------------------------------------------------- */

const char *const fz_kind_name[K_NKINDS] = {
	"superblock", "rg-header", "bitmap", "dinode", "dinode-payload", "indirect",
	"leaf-header", "leaf-entries", "htable", "xattr", "journal-head", "log-descriptor",
	"log-image", "fast-commit",
};

struct fz_blk {
	uint64_t b_blkno;
	uint16_t b_type;
	uint64_t b_desc; /* log images: their descriptor */
	uint32_t b_tag;  /* ... and its tag */
};

uint8_t *fz_base;      /* the base image */
static uint64_t nblocks;   /* sb_blocks */
static struct fz_blk *blks; /* valid metadata blocks and log images */
size_t fz_nblks;

static uint8_t *blk_of(uint8_t *img, uint64_t n)
{
	return img + n * FZ_BSIZE;
}

static void add_blk(uint64_t n, uint16_t type, uint64_t desc, uint32_t tag)
{
	blks = realloc(blks, (fz_nblks + 1) * sizeof(*blks));
	if (!blks)
		fz_die("out of memory");
	blks[fz_nblks++] = (struct fz_blk){ n, type, desc, tag };
}

void fz_scan(void)
{
	const struct shoal_sb *sb = (const void *)fz_base;

	nblocks = sb->sb_blocks;
	for (uint64_t n = 0; n < nblocks; n++) {
		const uint8_t *b = blk_of(fz_base, n);
		const struct shoal_mh *mh = (const void *)b;
		if (mh->mh_magic != SHOAL_MAGIC)
			continue;
		if (mh->mh_type == SHOAL_MT_LFAST) {
			const struct shoal_lfast *fc = (const void *)b;
			if (fc->fc_bytes <= FZ_BSIZE - SHOAL_LFAST_REC_OFF &&
			    !meta_check(b, meta_fc_span(fc->fc_bytes, FZ_BSIZE), SHOAL_MT_LFAST, n))
				add_blk(n, SHOAL_MT_LFAST, 0, 0);
			continue;
		}
		if (meta_check(b, FZ_BSIZE, 0, n))
			continue;
		add_blk(n, mh->mh_type, 0, 0);
		if (mh->mh_type == SHOAL_MT_LDESC) {
			const struct shoal_ldesc *ld = (const void *)b;
			uint64_t jstart = sb->sb_jfirst, jb = sb->sb_jblocks;
			uint64_t pos = n - jstart; /* one journal */
			for (uint32_t t = 0; t < ld->ld_count && t < SHOAL_LDESC_TAGS(FZ_BSIZE); t++) {
				pos = pos + 1 >= jb ? 1 : pos + 1;
				add_blk(jstart + pos, 0, n, t);
			}
		}
	}
}

/* Blocks of kind k (indices into blks), in *out; their number. */
size_t fz_blocks_of(enum fz_kind k, size_t **out)
{
	static size_t *v;
	size_t n = 0;

	v = realloc(v, fz_nblks * sizeof(*v) + 1);
	for (size_t i = 0; i < fz_nblks; i++) {
		const struct fz_blk *b = &blks[i];
		const struct shoal_dinode *di = (const void *)blk_of(fz_base, b->b_blkno);
		int t = b->b_type, ok;
		switch (k) {
		case K_SB: ok = t == SHOAL_MT_SB; break;
		case K_RG: case K_BITMAP: ok = t == SHOAL_MT_RG; break;
		case K_DINODE: ok = t == SHOAL_MT_DINODE; break;
		case K_PAYLOAD:
			ok = t == SHOAL_MT_DINODE && !S_ISFIFO(di->di_mode) && !S_ISCHR(di->di_mode);
			break;
		case K_INDIRECT: ok = t == SHOAL_MT_INDIRECT; break;
		case K_LEAF: case K_LEAFENT: ok = t == SHOAL_MT_LEAF; break;
		case K_HTABLE: ok = t == SHOAL_MT_HTABLE; break;
		case K_XATTR: ok = t == SHOAL_MT_XATTR; break;
		case K_JHEAD: ok = t == SHOAL_MT_JHEAD; break;
		case K_LDESC: ok = t == SHOAL_MT_LDESC; break;
		case K_LOGIMG: ok = t == 0; break;
		case K_LFAST: ok = t == SHOAL_MT_LFAST; break;
		default: ok = 0;
		}
		if (ok)
			v[n++] = i;
	}
	*out = v;
	return n;
}

/* --- mutations ----------------------------------------------------------------- */

struct field {
	uint16_t f_off;
	uint8_t f_size;
};

static const struct field hdr_fields[] = { { 0, 4 }, { 4, 2 }, { 6, 2 }, { 16, 8 }, { 24, 8 } };
static const struct field sb_fields[] = {
	{ 32, 4 }, { 36, 4 }, { 40, 4 }, { 44, 4 }, { 48, 8 }, { 56, 8 }, { 64, 8 }, { 72, 8 },
	{ 96, 1 }, { 110, 1 }, { 160, 1 }, { 192, 8 }, { 200, 8 }, { 208, 4 }, { 212, 4 },
	{ 216, 8 }, { 224, 4 }, { 228, 4 }, { 232, 8 }, { 248, 8 }, { 256, 8 },
};
static const struct field rg_fields[] = { { 32, 4 }, { 36, 4 }, { 40, 8 }, { 48, 4 },
					  { 52, 4 }, { 56, 4 }, { 60, 4 }, { 64, 8 } };
static const struct field di_fields[] = {
	{ 32, 4 }, { 32, 2 }, { 36, 4 }, { 44, 4 }, { 48, 8 }, { 56, 8 }, { 72, 4 }, { 128, 8 },
	{ 136, 8 }, { 144, 8 }, { 152, 8 }, { 160, 4 }, { 162, 1 }, { 164, 2 }, { 166, 2 },
	{ 168, 4 }, { 172, 4 }, { 176, 8 }, { 184, 8 },
};
static const struct field leaf_fields[] = { { 32, 2 }, { 34, 2 }, { 36, 4 }, { 40, 8 } };
static const struct field xattr_fields[] = { { 32, 4 }, { 36, 4 } };
static const struct field jh_fields[] = { { 32, 4 }, { 36, 4 }, { 40, 8 }, { 48, 8 }, { 56, 8 } };
static const struct field ld_fields[] = { { 32, 4 }, { 36, 4 }, { 40, 8 } };
static const struct field fc_fields[] = { { 32, 4 }, { 36, 4 }, { 48, 8 }, { 56, 2 },
					  { 58, 2 }, { 60, 4 } };
#define NF(a) (sizeof(a) / sizeof((a)[0]))

static uint64_t get_le(const uint8_t *p, unsigned size)
{
	uint64_t v = 0;
	for (unsigned i = 0; i < size; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

static void put_le(uint8_t *p, unsigned size, uint64_t v)
{
	for (unsigned i = 0; i < size; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* An interesting value for a field of size bytes that holds cur. */
static uint64_t pick_value(uint64_t cur, unsigned size)
{
	unsigned bits = size * 8;
	uint64_t v;

	switch (fz_rnd_below(16)) {
	case 0: v = 0; break;
	case 1: v = 1; break;
	case 2: v = cur + 1; break;
	case 3: v = cur - 1; break;
	case 4: v = ~0ull; break;
	case 5: v = fz_rnd(); break;
	case 6: v = fz_rnd_below(nblocks + 4); break;
	case 7: v = blks[fz_rnd_below(fz_nblks)].b_blkno; break;
	case 8: v = nblocks - 1; break;
	case 9: v = 1ull << (bits - 1); break;
	case 10: v = cur ^ (1ull << fz_rnd_below(bits)); break;
	case 11: v = fz_rnd_below(65); break;
	case 12: v = cur * 2; break;
	case 13: v = nblocks; break;
	case 14: v = (1ull << (bits - 1)) - 1; break;
	default: v = cur + fz_rnd_below(64) - 32; break;
	}
	return v;
}

static void set_field(uint8_t *b, unsigned off, unsigned size, char *what, size_t wlen)
{
	uint64_t cur = get_le(b + off, size), v = pick_value(cur, size);

	put_le(b + off, size, v);
	snprintf(what, wlen, "bytes %u+%u: %#" PRIx64 " -> %#" PRIx64, off, size, cur,
		 get_le(b + off, size));
}

static void flip_bytes(uint8_t *b, unsigned lo, unsigned hi, char *what, size_t wlen)
{
	unsigned n = 1 + (unsigned)fz_rnd_below(fz_rnd_below(4) ? 2 : 16), at = lo;
	int len = snprintf(what, wlen, "random bytes at");

	for (unsigned i = 0; i < n && hi > lo; i++) {
		at = lo + (unsigned)fz_rnd_below(hi - lo);
		b[at] = fz_rnd_below(2) ? (uint8_t)fz_rnd() : b[at] ^ (uint8_t)(1u << fz_rnd_below(8));
		if (len < (int)wlen)
			len += snprintf(what + len, wlen - len, " %u", at);
	}
}

/* The entries of a packed directory area: a random one's offset, or -1. */
static long pick_dirent(const uint8_t *area, uint32_t used, uint32_t room)
{
	long offs[512];
	unsigned n = 0;

	if (used > room)
		used = room;
	for (uint32_t off = 0; off + 18 <= used && n < 512; off += SHOAL_DIRENT_SIZE(area[off + 17]))
		offs[n++] = off;
	return n ? offs[fz_rnd_below(n)] : -1;
}

static void mutate_dirent(uint8_t *b, unsigned start, uint32_t used, char *what, size_t wlen)
{
	static const struct field de[] = { { 0, 8 }, { 8, 8 }, { 16, 1 }, { 17, 1 }, { 18, 1 } };
	long e = pick_dirent(b + start, used, FZ_BSIZE - start);
	const struct field *f;

	if (e < 0 || fz_rnd_below(5) == 0) {
		flip_bytes(b, start, FZ_BSIZE, what, wlen);
		return;
	}
	f = &de[fz_rnd_below(NF(de))];
	if (start + (unsigned)e + f->f_off + f->f_size > FZ_BSIZE)
		f = &de[0];
	set_field(b, start + (unsigned)e + f->f_off, f->f_size, what, wlen);
}

static void mutate_xattr_ent(uint8_t *b, char *what, size_t wlen)
{
	const struct shoal_xattr_hdr *xh = (const void *)b;
	unsigned offs[64], n = 0;

	uint32_t used = xh->xh_used < FZ_BSIZE - SHOAL_XATTR_ENTRIES_OFF ? xh->xh_used
								: FZ_BSIZE - SHOAL_XATTR_ENTRIES_OFF;

	for (uint32_t off = 0; off + 4 <= used && n < 64;) {
		offs[n++] = off;
		off += 4 + b[SHOAL_XATTR_ENTRIES_OFF + off + 1] +
		       get_le(b + SHOAL_XATTR_ENTRIES_OFF + off + 2, 2);
	}
	if (!n) {
		flip_bytes(b, SHOAL_XATTR_ENTRIES_OFF, FZ_BSIZE, what, wlen);
		return;
	}
	unsigned at = SHOAL_XATTR_ENTRIES_OFF + offs[fz_rnd_below(n)];
	switch (fz_rnd_below(4)) {
	case 0: set_field(b, at, 1, what, wlen); break;
	case 1: set_field(b, at + 1, 1, what, wlen); break;
	case 2: set_field(b, at + 2, 2, what, wlen); break;
	default: flip_bytes(b, at, at + 8 < FZ_BSIZE ? at + 8 : FZ_BSIZE, what, wlen); break;
	}
}

static void mutate_fields(uint8_t *b, const struct field *fs, size_t n, char *what, size_t wlen)
{
	const struct field *f;

	if (fz_rnd_below(10) == 0)
		f = &hdr_fields[fz_rnd_below(NF(hdr_fields))];
	else
		f = &fs[fz_rnd_below(n)];
	set_field(b, f->f_off, f->f_size, what, wlen);
}

/* Pointers of a block-map or table area: a non-zero one mostly. */
static void mutate_ptrs(uint8_t *b, unsigned off, unsigned n, char *what, size_t wlen)
{
	unsigned nz[1024], k = 0;

	for (unsigned i = 0; i < n && k < 1024; i++)
		if (get_le(b + off + 8 * i, 8))
			nz[k++] = i;
	unsigned i = k && fz_rnd_below(4) ? nz[fz_rnd_below(k)] : (unsigned)fz_rnd_below(n);
	set_field(b, off + 8 * i, 8, what, wlen);
}

/* One mutation of img: its description in what. */
void fz_mutate(uint8_t *img, int *sb_done, char *what, size_t wlen)
{
	enum fz_kind k;
	size_t *v, n;
	char how[160];
	int reseal = fz_rnd_below(4) != 0;

	/* a kind that has blocks (the next one if not: a generator fed by
	 * libFuzzer may give the same number forever) */
	for (int tries = 0;; tries++) {
		k = tries < 32 ? (enum fz_kind)fz_rnd_below(K_NKINDS)
			       : (enum fz_kind)((k + 1) % K_NKINDS);
		if (k == K_SB && *sb_done)
			continue;
		n = fz_blocks_of(k, &v);
		if (n)
			break;
	}
	const struct fz_blk *fb = &blks[v[fz_rnd_below(n)]];
	uint8_t *b = blk_of(img, fb->b_blkno);
	struct shoal_dinode *di = (void *)b;

	if (k == K_SB)
		*sb_done = 1;
	if (fz_rnd_below(6) == 0 && k != K_LOGIMG) {
		flip_bytes(b, 0, FZ_BSIZE, how, sizeof(how));
	} else {
		switch (k) {
		case K_SB: mutate_fields(b, sb_fields, NF(sb_fields), how, sizeof(how)); break;
		case K_RG: mutate_fields(b, rg_fields, NF(rg_fields), how, sizeof(how)); break;
		case K_BITMAP: {
			const struct shoal_rg *rg = (const void *)b;
			unsigned len = rg->rg_length / 4 + 1;
			unsigned at = SHOAL_RG_BITMAP_OFF + (unsigned)fz_rnd_below(len);
			if (at >= FZ_BSIZE)
				at = FZ_BSIZE - 1;
			uint8_t old = b[at];
			b[at] ^= (uint8_t)(1 + fz_rnd_below(255));
			snprintf(how, sizeof(how), "bitmap byte %u: %#x -> %#x", at, old, b[at]);
			break;
		}
		case K_DINODE: mutate_fields(b, di_fields, NF(di_fields), how, sizeof(how)); break;
		case K_PAYLOAD:
			if (S_ISDIR(di->di_mode) && !(di->di_flags & SHOAL_DIF_EXHASH)) {
				if (fz_rnd_below(4) == 0)
					set_field(b, SHOAL_DI_PAYLOAD_OFF, 4, how, sizeof(how));
				else
					mutate_dirent(b, SHOAL_DI_PAYLOAD_OFF + 8,
						      (uint32_t)get_le(b + 256, 4), how, sizeof(how));
			} else if (di->di_height) {
				mutate_ptrs(b, SHOAL_DI_PAYLOAD_OFF, SHOAL_DI_PTRS(FZ_BSIZE), how,
					    sizeof(how));
			} else {
				flip_bytes(b, SHOAL_DI_PAYLOAD_OFF, FZ_BSIZE, how, sizeof(how));
			}
			break;
		case K_INDIRECT:
		case K_HTABLE:
			mutate_ptrs(b, SHOAL_IND_PTR_OFF, SHOAL_IND_PTRS(FZ_BSIZE), how, sizeof(how));
			break;
		case K_LEAF: mutate_fields(b, leaf_fields, NF(leaf_fields), how, sizeof(how)); break;
		case K_LEAFENT: {
			const struct shoal_leaf *lf = (const void *)b;
			mutate_dirent(b, SHOAL_LEAF_ENTRIES_OFF, lf->lf_used, how, sizeof(how));
			break;
		}
		case K_XATTR:
			if (fz_rnd_below(3) == 0)
				mutate_fields(b, xattr_fields, NF(xattr_fields), how, sizeof(how));
			else
				mutate_xattr_ent(b, how, sizeof(how));
			break;
		case K_JHEAD: mutate_fields(b, jh_fields, NF(jh_fields), how, sizeof(how)); break;
		case K_LDESC: {
			const struct shoal_ldesc *ld = (const void *)b;
			uint32_t t = (uint32_t)fz_rnd_below(ld->ld_count ? ld->ld_count : 1);
			if (fz_rnd_below(2))
				mutate_fields(b, ld_fields, NF(ld_fields), how, sizeof(how));
			else
				set_field(b, SHOAL_LDESC_TAG_OFF + 16 * t + (fz_rnd_below(4) ? 0 : 12),
					  fz_rnd_below(4) ? 8 : 4, how, sizeof(how));
			break;
		}
		case K_LOGIMG: {
			/* a logged image (invalid at its log address): change it and
			 * make its tag's CRC, and its descriptor's, match */
			uint8_t *d = blk_of(img, fb->b_desc);
			struct shoal_ltag *tag = (void *)(d + SHOAL_LDESC_TAG_OFF + 16 * fb->b_tag);
			if (fz_rnd_below(2))
				flip_bytes(b, 32, FZ_BSIZE, how, sizeof(how));
			else
				set_field(b, 32 + 8 * (unsigned)fz_rnd_below((FZ_BSIZE - 32) / 8), 8, how,
					  sizeof(how));
			if (reseal)
				meta_update_crc(b, FZ_BSIZE); /* the image's own CRC */
			if (fz_rnd_below(4)) {
				tag->lt_crc = crc32c(0, b, FZ_BSIZE);
				meta_update_crc(d, FZ_BSIZE);
			}
			reseal = 0;
			break;
		}
		case K_LFAST: mutate_fields(b, fc_fields, NF(fc_fields), how, sizeof(how)); break;
		default: break;
		}
	}
	if (reseal) {
		uint32_t span = FZ_BSIZE;
		if (k == K_LFAST) {
			const struct shoal_lfast *fc = (const void *)b;
			if (fc->fc_bytes <= FZ_BSIZE - SHOAL_LFAST_REC_OFF)
				span = meta_fc_span(fc->fc_bytes, FZ_BSIZE);
		}
		meta_update_crc(b, span);
	}
	snprintf(what, wlen, "%s block %" PRIu64 ": %s%s", fz_kind_name[k], fb->b_blkno, how,
		 reseal ? ", CRC recomputed" : "");
}

double fz_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* --- the walk ------------------------------------------------------------------- */

struct walk {
	struct shoal_fs *w_fs;
	const char *w_stage;
	uint64_t w_names;
	uint64_t w_eio;
	uint64_t w_files;
	int w_failed;
	uint64_t w_seen[8192]; /* inodes read (open addressing; 0: empty) */
	size_t w_nseen;
};

/* 1 if ino was seen before (hard links: read once); notes it. */
static int seen(struct walk *w, uint64_t ino)
{
	size_t n = sizeof(w->w_seen) / sizeof(w->w_seen[0]), i = (ino * 0x9e3779b97f4a7c15ull) % n;

	if (w->w_nseen >= n / 2)
		return 1; /* enough: read no more */
	for (; w->w_seen[i]; i = (i + 1) % n)
		if (w->w_seen[i] == ino)
			return 1;
	w->w_seen[i] = ino;
	w->w_nseen++;
	return 0;
}

static void wfail(struct walk *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void wfail(struct walk *w, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	printf("FAIL (%s): ", w->w_stage);
	vprintf(fmt, ap);
	printf("\n");
	va_end(ap);
	w->w_failed = 1;
}

/* An error of a use: EIO is what damage may give, anything else fails. */
static int werr(struct walk *w, long err, const char *what, const char *path)
{
	if (err >= 0)
		return 0;
	if (err == -EIO) {
		w->w_eio++;
		return 1;
	}
	wfail(w, "%s %s: %s (only EIO may report damage)", what, path, strerror((int)-err));
	return 1;
}

struct dent_list {
	char (*dl_names)[256];
	size_t dl_n, dl_cap, dl_batch;
	uint64_t dl_next;
	int dl_full;
};

static int collect(void *arg, const char *name, const struct stat *st, uint64_t next_off)
{
	struct dent_list *dl = arg;

	if (dl->dl_batch == 64) {
		dl->dl_full = 1;
		return 1;
	}
	if (dl->dl_n == dl->dl_cap) {
		dl->dl_cap = dl->dl_cap ? dl->dl_cap * 2 : 64;
		dl->dl_names = realloc(dl->dl_names, dl->dl_cap * sizeof(*dl->dl_names));
		if (!dl->dl_names)
			fz_die("out of memory");
	}
	snprintf(dl->dl_names[dl->dl_n++], 256, "%s", name);
	dl->dl_batch++;
	dl->dl_next = next_off;
	return 0;
}

static void read_file(struct walk *w, uint64_t ino, const struct stat *st, const char *path)
{
	static uint8_t buf[FZ_READ];
	uint64_t off = 0, size = (uint64_t)st->st_size;
	int err;

	err = shoal_open(w->w_fs, ino, O_RDONLY);
	if (werr(w, err, "open", path))
		return;
	for (int seg = 0; seg < 64 && off < size; seg++) {
		int64_t d = shoal_lseek(w->w_fs, ino, off, SEEK_DATA);
		if (d == -ENXIO)
			break;
		if (werr(w, d, "SEEK_DATA", path))
			break;
		if ((uint64_t)d < off || (uint64_t)d >= size) {
			wfail(w, "SEEK_DATA %s from %" PRIu64 ": %" PRId64 " (size %" PRIu64 ")", path,
			      off, d, size);
			break;
		}
		uint64_t want = size - (uint64_t)d < FZ_READ ? size - (uint64_t)d : FZ_READ;
		ssize_t n = shoal_read(w->w_fs, ino, buf, FZ_READ, (uint64_t)d, O_RDONLY);
		if (werr(w, n, "read", path))
			break;
		if ((uint64_t)n != want) {
			wfail(w, "read %s at %" PRId64 ": %zd bytes, the size %" PRIu64
				 " promises %" PRIu64, path, d, n, size, want);
			break;
		}
		int64_t h = shoal_lseek(w->w_fs, ino, (uint64_t)d, SEEK_HOLE);
		if (werr(w, h, "SEEK_HOLE", path))
			break;
		if (h <= d) {
			wfail(w, "SEEK_HOLE %s from %" PRId64 ": %" PRId64, path, d, h);
			break;
		}
		off = (uint64_t)h;
	}
	if (size) { /* the last byte, wherever it is */
		ssize_t n = shoal_read(w->w_fs, ino, buf, 1, size - 1, O_RDONLY);
		if (!werr(w, n, "read (last byte)", path) && n != 1)
			wfail(w, "read %s of its last byte: %zd bytes", path, n);
	}
	shoal_release(w->w_fs, ino, O_RDONLY);
	w->w_files++;
}

static void read_xattrs(struct walk *w, uint64_t ino, const char *path)
{
	char list[4096], val[4096];
	ssize_t n = shoal_listxattr(w->w_fs, ino, list, sizeof(list));

	if (werr(w, n, "listxattr", path))
		return;
	for (ssize_t i = 0; i < n; i += (ssize_t)strlen(list + i) + 1) {
		ssize_t v = shoal_getxattr(w->w_fs, ino, list + i, val, sizeof(val));
		if (v == -ENODATA && !strncmp(list + i, "system.", 7))
			continue;
		werr(w, v, "getxattr", path);
	}
}

static void walk_dir(struct walk *w, uint64_t dir, const char *path, int depth)
{
	struct dent_list dl = { 0 };
	char sub[4096];
	int err;

	if (seen(w, dir))
		return; /* a hard-linked directory: fsck's business */
	read_xattrs(w, dir, path);
	err = shoal_open(w->w_fs, dir, O_RDONLY | O_DIRECTORY);
	if (werr(w, err, "opendir", path))
		return;
	do {
		dl.dl_full = 0;
		dl.dl_batch = 0;
		err = shoal_readdir(w->w_fs, dir, dl.dl_next, O_RDONLY, collect, &dl);
		if (dl.dl_n > FZ_WALK_NAMES) {
			wfail(w, "readdir %s does not end (%zu names)", path, dl.dl_n);
			break;
		}
	} while (!err && dl.dl_full);
	werr(w, err, "readdir", path);
	shoal_release(w->w_fs, dir, O_RDONLY | O_DIRECTORY);
	for (size_t i = 0; i < dl.dl_n && !w->w_failed; i++) {
		const char *name = dl.dl_names[i];
		struct stat st;
		if (!strcmp(name, ".") || !strcmp(name, ".."))
			continue;
		if (++w->w_names > FZ_WALK_NAMES)
			break;
		snprintf(sub, sizeof(sub), "%s/%s", path, name);
		err = shoal_lookup(w->w_fs, dir, name, &st);
		if (werr(w, err, "lookup", sub))
			continue;
		uint64_t ino = st.st_ino;
		int again = !S_ISDIR(st.st_mode) && seen(w, ino);
		if (again) {
			/* another link to an inode read already */
		} else if (S_ISREG(st.st_mode)) {
			read_file(w, ino, &st, sub);
		} else if (S_ISLNK(st.st_mode)) {
			char t[4096];
			ssize_t n = shoal_readlink(w->w_fs, ino, t, sizeof(t));
			werr(w, n, "readlink", sub);
		} else if (S_ISDIR(st.st_mode) && depth < FZ_WALK_DEPTH) {
			walk_dir(w, ino, sub, depth + 1);
		}
		if (!S_ISDIR(st.st_mode) && !again)
			read_xattrs(w, ino, sub);
		shoal_forget(w->w_fs, ino, 1);
	}
	free(dl.dl_names);
}

/* Mount path in-process and walk it.  must_mount: a mount failure fails.
 * Returns 0, or 1 if the walk failed. */
int fz_mount_walk(const char *path, const char *stage, int must_mount, uint64_t *eio)
{
	struct shoal_mount_opts mo = { .mo_commit_secs = 3600, .mo_atime = SHOAL_NOATIME,
				       .mo_cache_bytes = 2 * FZ_IMG_BYTES };
	static struct walk w;
	struct shoal_dev *dev;
	int err;

	memset(&w, 0, sizeof(w));
	w.w_stage = stage;
	err = dev_open(path, 0, &dev);
	if (err)
		fz_die("%s: open %s: %s", stage, path, strerror(-err));
	err = shoal_mount(dev, &mo, &w.w_fs);
	if (err) {
		dev_close(dev);
		printf("%s: mount refused: %s (%s)\n", stage, strerror(-err), shoal_mount_error());
		if (must_mount)
			printf("FAIL (%s): the mount of the repaired image failed\n", stage);
		return must_mount;
	}
	walk_dir(&w, shoal_root(w.w_fs), "", 0);
	err = shoal_unmount(w.w_fs);
	if (err && err != -EIO) {
		printf("FAIL (%s): unmount: %s\n", stage, strerror(-err));
		w.w_failed = 1;
	}
	printf("%s: %" PRIu64 " names, %" PRIu64 " files read, %" PRIu64 " EIO%s (%.3f s)\n", stage,
	       w.w_names, w.w_files, w.w_eio, w.w_failed ? ", FAILED" : "", fz_now());
	fflush(stdout);
	if (eio)
		*eio = w.w_eio;
	return w.w_failed;
}


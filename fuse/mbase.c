/*
 * mbase.c - the bases of mapped pages, so that the kernel's writeback of a
 * shared mapping writes only what the mapping changed (docs/LOCKING.md
 * "Mapped pages").
 *
 * FUSE tells the daemon nothing when a mapping dirties a page (no
 * page_mkwrite), so in a cluster a node's kernel can hold a dirty page
 * under no glock, and write it back whole after another node wrote other
 * bytes of it: those bytes were lost.  shoal keeps, for each page of a
 * file open for reading and writing on this node, the bytes this kernel
 * was last given for it (its base); a writeback (FUSE_WRITE_CACHE) then
 * writes only the bytes that differ from the base, merged with what the
 * file holds under one EX hold (shoal_write_merge).
 *
 * Invariants:
 *  (1) only a cluster mount keeps bases, only for an inode with at least
 *      one O_RDWR open (a shared writable mapping needs one), from its
 *      first such open, which is answered without keep_cache so the
 *      kernel drops the pages it had (they would have no base), to its
 *      last release (the kernel writes a mapping's pages back at munmap,
 *      before the release);
 *  (2) a base is what the kernel's page holds but for the mapping's
 *      stores: set from each read reply (the page-cache fill), changed by
 *      each write(2) of this node at the bytes it wrote (the kernel copied
 *      them into its page; a large write(2) that moves device-side, not
 *      through memory, drops the bases it covers instead), and set from
 *      each writeback;
 *  (3) a page without a base (none yet, or over MB_MAX_BYTES) is written
 *      back whole, as before, and counted (mmap_whole): never a wrong
 *      merge, at worst the old loss; a merge that cannot be made (out of
 *      memory) is also a whole write;
 *  (4) a truncate of this node zeroes the bases past the size the kernel
 *      zeroes in its own pages; a fallocate drops the inode's bases (the
 *      kernel drops or zeroes what it changed in its way).
 *
 * One mutex for the table: it is taken for a page copy or compare only.
 */
#include "smount.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MB_PAGE 4096u
#define MB_BUCKETS 4096u
/* Memory for bases at most; past it pages get none (3). */
#define MB_MAX_BYTES (256ull << 20)

struct mb_page {
	struct mb_page *p_next; /* in its bucket */
	uint64_t p_ino;
	uint64_t p_idx;
	unsigned char p_data[MB_PAGE];
};

struct mb_ino {
	struct mb_ino *i_next;
	uint64_t i_ino;
	unsigned i_opens; /* O_RDWR opens (1) */
};

static struct {
	pthread_mutex_t lock;
	struct mb_page *pages[MB_BUCKETS];
	struct mb_ino *inos[64];
	uint64_t bytes;
	uint64_t merged, whole, merged_bytes; /* writebacks (3) */
} mb = {.lock = PTHREAD_MUTEX_INITIALIZER};

static unsigned mb_hash(uint64_t ino, uint64_t idx)
{
	uint64_t h = (ino * 0x9E3779B97F4A7C15ull) ^ (idx * 0xC2B2AE3D27D4EB4Full);
	return (unsigned)(h >> 40) % MB_BUCKETS;
}

static struct mb_ino **ino_slot(uint64_t ino)
{
	struct mb_ino **pp = &mb.inos[ino % 64];
	while (*pp && (*pp)->i_ino != ino)
		pp = &(*pp)->i_next;
	return pp;
}

static struct mb_page **page_slot(uint64_t ino, uint64_t idx)
{
	struct mb_page **pp = &mb.pages[mb_hash(ino, idx)];
	while (*pp && ((*pp)->p_ino != ino || (*pp)->p_idx != idx))
		pp = &(*pp)->p_next;
	return pp;
}

/* Drop ino's bases from page index from on (all buckets: a rare event). */
static void drop_from(uint64_t ino, uint64_t from)
{
	for (unsigned b = 0; b < MB_BUCKETS; b++) {
		struct mb_page **pp = &mb.pages[b];
		while (*pp) {
			struct mb_page *p = *pp;
			if (p->p_ino == ino && p->p_idx >= from) {
				*pp = p->p_next;
				free(p);
				mb.bytes -= sizeof(*p);
			} else {
				pp = &p->p_next;
			}
		}
	}
}

int mb_open(uint64_t ino, int flags)
{
	struct mb_ino **pp, *i;
	int first = 0;

	if (!smount_cluster || (flags & O_ACCMODE) != O_RDWR)
		return 0;
	pthread_mutex_lock(&mb.lock);
	pp = ino_slot(ino);
	if (!*pp) {
		i = calloc(1, sizeof(*i));
		if (i) {
			i->i_ino = ino;
			*pp = i;
			first = 1;
		}
	}
	if (*pp)
		(*pp)->i_opens++;
	pthread_mutex_unlock(&mb.lock);
	return first;
}

void mb_release(uint64_t ino, int flags)
{
	struct mb_ino **pp, *i;

	if (!smount_cluster || (flags & O_ACCMODE) != O_RDWR)
		return;
	pthread_mutex_lock(&mb.lock);
	pp = ino_slot(ino);
	if (*pp && --(*pp)->i_opens == 0) {
		i = *pp;
		*pp = i->i_next;
		free(i);
		drop_from(ino, 0);
	}
	pthread_mutex_unlock(&mb.lock);
}

int mb_tracked(uint64_t ino)
{
	int t;

	if (!smount_cluster)
		return 0;
	pthread_mutex_lock(&mb.lock);
	t = *ino_slot(ino) != NULL;
	pthread_mutex_unlock(&mb.lock);
	return t;
}

/*
 * Bytes [off, off + len) of the kernel's pages are now data (2).  full:
 * a page-cache fill or a writeback, which sets whole pages (a short last
 * page is zero past len, as the kernel's); otherwise a write(2), which
 * changes existing bases only, or makes one of a page it covers whole.
 */
void mb_set(uint64_t ino, uint64_t off, const void *data, size_t len, int full)
{
	const unsigned char *src = data;

	pthread_mutex_lock(&mb.lock);
	if (!*ino_slot(ino))
		goto out;
	while (len) {
		uint64_t idx = off / MB_PAGE;
		size_t in = (size_t)(off % MB_PAGE), n = MB_PAGE - in;
		struct mb_page **pp = page_slot(ino, idx), *p = *pp;

		if (n > len)
			n = len;
		if (!p && (full ? in == 0 : (in == 0 && n == MB_PAGE)) &&
		    mb.bytes + sizeof(*p) <= MB_MAX_BYTES && (p = malloc(sizeof(*p)))) {
			p->p_ino = ino;
			p->p_idx = idx;
			p->p_next = NULL;
			*pp = p;
			mb.bytes += sizeof(*p);
			memset(p->p_data, 0, MB_PAGE);
		} else if (p && full && in == 0) {
			memset(p->p_data + n, 0, MB_PAGE - n);
		}
		if (p)
			memcpy(p->p_data + in, src, n);
		src += n;
		off += n;
		len -= n;
	}
out:
	pthread_mutex_unlock(&mb.lock);
}

int mb_get(uint64_t ino, uint64_t idx, void *out)
{
	struct mb_page *p;

	pthread_mutex_lock(&mb.lock);
	p = *page_slot(ino, idx);
	if (p)
		memcpy(out, p->p_data, MB_PAGE);
	pthread_mutex_unlock(&mb.lock);
	return p ? 0 : -ENOENT;
}

void mb_drop(uint64_t ino, uint64_t off, uint64_t len)
{
	pthread_mutex_lock(&mb.lock);
	if (len && *ino_slot(ino)) {
		for (uint64_t idx = off / MB_PAGE; idx <= (off + len - 1) / MB_PAGE; idx++) {
			struct mb_page **pp = page_slot(ino, idx), *p = *pp;
			if (p) {
				*pp = p->p_next;
				free(p);
				mb.bytes -= sizeof(*p);
			}
		}
	}
	pthread_mutex_unlock(&mb.lock);
}

void mb_truncate(uint64_t ino, uint64_t size)
{
	struct mb_page *p;

	pthread_mutex_lock(&mb.lock);
	if (*ino_slot(ino)) {
		drop_from(ino, (size + MB_PAGE - 1) / MB_PAGE);
		if (size % MB_PAGE && (p = *page_slot(ino, size / MB_PAGE)))
			memset(p->p_data + size % MB_PAGE, 0, MB_PAGE - size % MB_PAGE);
	}
	pthread_mutex_unlock(&mb.lock);
}

void mb_forget(uint64_t ino)
{
	pthread_mutex_lock(&mb.lock);
	if (*ino_slot(ino))
		drop_from(ino, 0);
	pthread_mutex_unlock(&mb.lock);
}

void mb_count(int merged, uint64_t bytes)
{
	pthread_mutex_lock(&mb.lock);
	if (merged) {
		mb.merged++;
		mb.merged_bytes += bytes;
	} else {
		mb.whole++;
	}
	pthread_mutex_unlock(&mb.lock);
}

void mb_stats(FILE *out)
{
	pthread_mutex_lock(&mb.lock);
	fprintf(out, "mmap_merged %llu\nmmap_merged_bytes %llu\nmmap_whole %llu\nmmap_base_bytes %llu\n",
		(unsigned long long)mb.merged, (unsigned long long)mb.merged_bytes,
		(unsigned long long)mb.whole, (unsigned long long)mb.bytes);
	pthread_mutex_unlock(&mb.lock);
}

/*
 * fsck_dir.c - directories for fsck.shoal: pass 2 (the tree from the
 * root), pass 3 (dinodes only the bitmaps know, and the directories below
 * them) and the checks of every directory block and entry they share.
 *
 * A directory is walked once (FI_WALKED).  Each entry is checked in this
 * order: well-formed name, hash (and for a hashed directory, that the hash
 * belongs to the leaf's range), target (a valid dinode, not the directory
 * itself, not a second link to a directory), duplicate name or hash,
 * de_type.  A bad entry is removed with -y and ignored with -n; either way
 * it is not counted, so the counts checked later are those of the repaired
 * directory.
 *
 * Invariants:
 *  (1) a directory is referenced by at most one entry (the root by none):
 *      the first entry met, breadth first from the root, keeps it; later
 *      ones are bad;
 *  (2) every inode an entry keeps has fi_refs counted and, if it is a
 *      directory, fi_parent set to the entry's directory;
 *  (3) a hash-table run must be 2^(D-d) aligned entries naming one leaf;
 *      a leaf that cannot be used is replaced by an empty one (recorded
 *      here, done in pass 5a once blocks can be allocated), never guessed;
 *  (4) the name set of one directory holds every kept name and hash, so
 *      duplicates are found whatever leaf or chain they are in.
 */
#include "fsck.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "meta.h"

/* --- the names of one directory --------------------------------------------- */

struct nameset {
	uint64_t *ns_hash;
	uint64_t *ns_off; /* arena offset + 1; 0 = empty slot */
	uint8_t *ns_len;
	uint64_t ns_cap, ns_count;
	char *ns_arena;
	size_t ns_used, ns_size;
};

static int ns_reset(struct nameset *ns)
{
	if (ns->ns_cap != 64) {
		free(ns->ns_hash);
		free(ns->ns_off);
		free(ns->ns_len);
		ns->ns_cap = 64;
		ns->ns_hash = malloc(ns->ns_cap * sizeof(*ns->ns_hash));
		ns->ns_off = malloc(ns->ns_cap * sizeof(*ns->ns_off));
		ns->ns_len = malloc(ns->ns_cap);
		if (!ns->ns_hash || !ns->ns_off || !ns->ns_len)
			return -ENOMEM;
	}
	memset(ns->ns_off, 0, ns->ns_cap * sizeof(*ns->ns_off));
	ns->ns_count = 0;
	ns->ns_used = 0;
	return 0;
}

static void ns_free(struct nameset *ns)
{
	free(ns->ns_hash);
	free(ns->ns_off);
	free(ns->ns_len);
	free(ns->ns_arena);
}

/* Slot of hash h; *found 1 if the same name is there, 2 if another name
 * with the same hash is (core/dir.c refuses those: hashes are unique). */
static uint64_t ns_find(const struct nameset *ns, uint64_t h, const char *name, uint8_t len,
			int *found)
{
	uint64_t i = h & (ns->ns_cap - 1);

	*found = 0;
	for (; ns->ns_off[i]; i = (i + 1) & (ns->ns_cap - 1))
		if (ns->ns_hash[i] == h) {
			*found = ns->ns_len[i] == len &&
					 !memcmp(ns->ns_arena + ns->ns_off[i] - 1, name, len)
				 ? 1
				 : 2;
			break;
		}
	return i;
}

static int ns_grow(struct nameset *ns)
{
	struct nameset n = *ns;
	int found;

	n.ns_cap = ns->ns_cap * 2;
	n.ns_hash = malloc(n.ns_cap * sizeof(*n.ns_hash));
	n.ns_off = calloc(n.ns_cap, sizeof(*n.ns_off));
	n.ns_len = malloc(n.ns_cap);
	if (!n.ns_hash || !n.ns_off || !n.ns_len) {
		free(n.ns_hash);
		free(n.ns_off);
		free(n.ns_len);
		return -ENOMEM;
	}
	for (uint64_t i = 0; i < ns->ns_cap; i++) {
		uint64_t j;
		if (!ns->ns_off[i])
			continue;
		j = ns_find(&n, ns->ns_hash[i], "", 0, &found);
		n.ns_hash[j] = ns->ns_hash[i];
		n.ns_off[j] = ns->ns_off[i];
		n.ns_len[j] = ns->ns_len[i];
	}
	free(ns->ns_hash);
	free(ns->ns_off);
	free(ns->ns_len);
	*ns = n;
	return 0;
}

/* 1 if name is already there, 2 if its hash is, 0 after adding it, or
 * -ENOMEM. */
static int ns_add(struct nameset *ns, uint64_t h, const char *name, uint8_t len)
{
	uint64_t i;
	int found;

	if ((ns->ns_count + 1) * 2 > ns->ns_cap && ns_grow(ns))
		return -ENOMEM;
	i = ns_find(ns, h, name, len, &found);
	if (found)
		return found;
	if (ns->ns_used + len + 1 > ns->ns_size) {
		size_t nsz = ns->ns_size ? ns->ns_size * 2 : 4096;
		char *na = realloc(ns->ns_arena, nsz);
		if (!na)
			return -ENOMEM;
		ns->ns_arena = na;
		ns->ns_size = nsz;
	}
	memcpy(ns->ns_arena + ns->ns_used, name, len);
	ns->ns_hash[i] = h;
	ns->ns_off[i] = ns->ns_used + 1;
	ns->ns_len[i] = len;
	ns->ns_used += len;
	ns->ns_count++;
	return 0;
}

/* --- entries ------------------------------------------------------------------ */

enum { E_KEEP, E_FIXED, E_BAD, E_ERR };

struct dwalk {
	struct fsck *dw_f;
	struct fsck_ino *dw_dir;
	struct nameset dw_ns;
	int dw_ranged; /* entries must satisfy hash >> (63 - dw_d) == dw_k */
	unsigned dw_d;
	uint64_t dw_k;
	int dw_rebuild;       /* the hash table is damaged: rebuild (-y) */
	uint64_t *dw_leaves;  /* leaves accepted, for a rebuild */
	size_t dw_nleaves, dw_capleaves;
};

static int leaf_keep(struct dwalk *dw, uint64_t blk)
{
	if (dw->dw_nleaves == dw->dw_capleaves) {
		size_t ncap = dw->dw_capleaves ? dw->dw_capleaves * 2 : 64;
		uint64_t *n = realloc(dw->dw_leaves, ncap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		dw->dw_leaves = n;
		dw->dw_capleaves = ncap;
	}
	dw->dw_leaves[dw->dw_nleaves++] = blk;
	return 0;
}

/* A name made printable for a report line. */
static const char *shown(const char *name, unsigned len, char *out, size_t outlen)
{
	size_t n = 0;

	for (unsigned i = 0; i < len && n + 5 < outlen; i++) {
		unsigned char c = (unsigned char)name[i];
		if (c >= 0x20 && c < 0x7f && c != '\\')
			out[n++] = (char)c;
		else
			n += (size_t)snprintf(out + n, outlen - n, "\\x%02x", c);
	}
	out[n] = '\0';
	return out;
}

static int queue_push(struct fsck *f, uint64_t ino)
{
	if (f->f_qtail == f->f_qcap) {
		size_t live = f->f_qtail - f->f_qhead;
		if (f->f_qhead > f->f_qcap / 2) {
			memmove(f->f_queue, f->f_queue + f->f_qhead, live * sizeof(*f->f_queue));
		} else {
			size_t ncap = f->f_qcap ? f->f_qcap * 2 : 1024;
			uint64_t *nq = malloc(ncap * sizeof(*nq));
			if (!nq)
				return -ENOMEM;
			if (live)
				memcpy(nq, f->f_queue + f->f_qhead, live * sizeof(*nq));
			free(f->f_queue);
			f->f_queue = nq;
			f->f_qcap = ncap;
		}
		f->f_qhead = 0;
		f->f_qtail = live;
	}
	f->f_queue[f->f_qtail++] = ino;
	return 0;
}

static int entry_check(struct dwalk *dw, struct shoal_dirent *de)
{
	struct fsck *f = dw->dw_f;
	struct fsck_ino *dir = dw->dw_dir, *t;
	const char *name = (const char *)de + sizeof(*de);
	unsigned long long dino = dir->fi_ino, tino = de->de_ino;
	uint8_t len = de->de_namelen, dt;
	int fixed = 0, r;
	char nb[4 * SHOAL_NAME_MAX + 8];
	uint64_t h;

	fsck_progress(f, f->f_icount < f->f_ptotal ? f->f_icount : f->f_ptotal, f->f_ptotal);
	shown(name, len, nb, sizeof(nb));
	if (memchr(name, '/', len) || memchr(name, '\0', len) ||
	    (len == 1 && name[0] == '.') || (len == 2 && name[0] == '.' && name[1] == '.')) {
		fsck_problem(f, 1, "directory %llu: entry \"%s\" has an invalid name; removing it",
			     dino, nb);
		return E_BAD;
	}
	h = meta_name_hash(f->f_seed, name, len);
	if (dw->dw_ranged && (h >> (63 - dw->dw_d)) != dw->dw_k) {
		fsck_problem(f, 1,
			     "directory %llu: entry \"%s\" is in the wrong leaf for its hash; "
			     "removing it",
			     dino, nb);
		return E_BAD;
	}
	if (tino == dir->fi_ino) {
		fsck_problem(f, 1, "directory %llu: entry \"%s\" points at the directory itself; "
				   "removing it",
			     dino, nb);
		return E_BAD;
	}
	t = ino_get(f, de->de_ino);
	if (!t)
		return E_ERR;
	if (!(t->fi_flags & FI_VALID)) {
		fsck_problem(f, 1,
			     "directory %llu: entry \"%s\" points at block %llu, which is not a "
			     "valid inode; removing it",
			     dino, nb, tino);
		return E_BAD;
	}
	if (S_ISDIR(t->fi_mode) && (t->fi_ino == f->f_sb.sb_root || t->fi_refs > 0)) {
		fsck_problem(f, 1,
			     "directory %llu: entry \"%s\" is a second link to directory %llu; "
			     "removing it",
			     dino, nb, tino);
		return E_BAD;
	}
	r = ns_add(&dw->dw_ns, h, name, len);
	if (r < 0) {
		fsck_operr(f, "directory names", r);
		return E_ERR;
	}
	if (r == 1) {
		fsck_problem(f, 1, "directory %llu: duplicate entry \"%s\"; removing it", dino, nb);
		return E_BAD;
	}
	if (r == 2) {
		fsck_problem(f, 1,
			     "directory %llu: entry \"%s\" has the same hash as another entry; "
			     "removing it",
			     dino, nb);
		return E_BAD;
	}
	if (de->de_hash != h &&
	    fsck_problem(f, 1, "directory %llu: entry \"%s\": de_hash %#llx, should be %#llx",
			 dino, nb, (unsigned long long)de->de_hash, (unsigned long long)h)) {
		de->de_hash = h;
		fixed = 1;
	}
	dt = mode_dtype(t->fi_mode);
	if (de->de_type != dt &&
	    fsck_problem(f, 1,
			 "directory %llu: entry \"%s\": de_type %u, but inode %llu is a %s",
			 dino, nb, de->de_type, tino, fsck_mode_name(t->fi_mode))) {
		de->de_type = dt;
		fixed = 1;
	}
	t->fi_refs++;
	dir->fi_entries++;
	if (S_ISDIR(t->fi_mode)) {
		t->fi_parent = dir->fi_ino;
		dir->fi_subdirs++;
		if (!(t->fi_flags & (FI_WALKED | FI_QUEUED))) {
			if (queue_push(f, t->fi_ino)) {
				fsck_operr(f, "directory queue", ENOMEM);
				return E_ERR;
			}
			t->fi_flags |= FI_QUEUED;
		}
		if (dir->fi_ino == f->f_sb.sb_root && len == sizeof(FSCK_LOSTFOUND) - 1 &&
		    !memcmp(name, FSCK_LOSTFOUND, len))
			f->f_lostfound = t->fi_ino;
	}
	return fixed ? E_FIXED : E_KEEP;
}

/*
 * Walk the packed entries ents[0..*used).  *total is the number of
 * well-formed entries found, *left the number still there afterwards (bad
 * ones are removed only with -y).  Returns 1 if ents or *used changed, or
 * -1 on an operational error.
 */
static int entries_walk(struct dwalk *dw, uint8_t *ents, uint32_t *used, uint32_t *total,
			uint32_t *left, const char *where, unsigned long long blk)
{
	struct fsck *f = dw->dw_f;
	uint32_t off = 0;
	int dirty = 0;

	*total = *left = 0;
	while (off < *used) {
		struct shoal_dirent *de = (void *)(ents + off);
		uint32_t rest = *used - off, sz;
		int act;

		if (rest < sizeof(*de) || de->de_namelen == 0 ||
		    sizeof(*de) + de->de_namelen > rest) {
			if (fsck_problem(f, 1,
					 "directory %llu: %s %llu: malformed entry at offset %u; "
					 "dropping the rest",
					 (unsigned long long)dw->dw_dir->fi_ino, where, blk, off)) {
				memset(ents + off, 0, rest);
				*used = off;
				dirty = 1;
			}
			break;
		}
		sz = (uint32_t)sizeof(*de) + de->de_namelen;
		(*total)++;
		act = entry_check(dw, de);
		if (act == E_ERR)
			return -1;
		if (act == E_BAD && f->f_yes) {
			memmove(ents + off, ents + off + sz, rest - sz);
			memset(ents + *used - sz, 0, sz);
			*used -= sz;
			dirty = 1;
			continue;
		}
		if (act == E_FIXED)
			dirty = 1;
		(*left)++;
		off += sz;
	}
	return dirty;
}

/* --- inline directories ----------------------------------------------------- */

static int inline_walk(struct dwalk *dw, uint8_t *dib)
{
	struct fsck *f = dw->dw_f;
	struct shoal_inline_dir *id = (void *)(dib + SHOAL_DI_PAYLOAD_OFF);
	uint32_t max = SHOAL_DI_PAYLOAD(f->f_bsize) - sizeof(*id), used = id->id_used, total, left;
	int dirty = 0, r;

	if (used > max) {
		if (fsck_problem(f, 1, "directory %llu: id_used %u is larger than the payload (%u)",
				 (unsigned long long)dw->dw_dir->fi_ino, used, max))
			dirty = 1;
		used = max;
	}
	dw->dw_ranged = 0;
	r = entries_walk(dw, dib + SHOAL_DI_PAYLOAD_OFF + sizeof(*id), &used, &total, &left,
			 "inline area of inode", dw->dw_dir->fi_ino);
	if (r < 0)
		return -EIO;
	if ((dirty || r) && f->f_yes) {
		id->id_used = used;
		return 1;
	}
	return 0;
}

/* --- hashed directories ------------------------------------------------------ */

/* One cached hash-table block, for reading table entries in order. */
struct tcache {
	const uint64_t *tc_tbl;
	uint64_t tc_lblk; /* UINT64_MAX: nothing cached */
	int tc_ok;
	uint8_t *tc_buf;
};

static int tptr(struct fsck *f, struct tcache *tc, uint64_t i, uint64_t *out)
{
	uint64_t hp = SHOAL_HT_PTRS(f->f_bsize), lb = i / hp;

	if (lb != tc->tc_lblk) {
		tc->tc_lblk = lb;
		tc->tc_ok = tc->tc_tbl[lb] && blk_read(f, tc->tc_tbl[lb], tc->tc_buf) == 0;
	}
	if (!tc->tc_ok)
		return -1;
	*out = ((const uint64_t *)(tc->tc_buf + SHOAL_HT_PTR_OFF))[i % hp];
	return 0;
}

static int leaffix_add(struct fsck *f, uint64_t dir, uint64_t i, uint64_t rr, unsigned d)
{
	if (f->f_nleaffix == f->f_capleaffix) {
		size_t ncap = f->f_capleaffix ? f->f_capleaffix * 2 : 16;
		struct fsck_leaffix *n = realloc(f->f_leaffix, ncap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		f->f_leaffix = n;
		f->f_capleaffix = ncap;
	}
	f->f_leaffix[f->f_nleaffix++] = (struct fsck_leaffix){
		.lx_dir = dir, .lx_index = i, .lx_count = rr, .lx_depth = (uint16_t)d };
	return 0;
}

/* Load leaf blk into b and claim it: NULL if fine, else why not. */
static const char *leaf_load(struct fsck *f, uint64_t blk, uint8_t *b)
{
	if (!fsck_covered(f, blk))
		return "out of range";
	if (blk_read(f, blk, b))
		return "unreadable";
	if (meta_check(b, f->f_bsize, SHOAL_MT_LEAF, blk))
		return "invalid";
	if (fsck_claim(f, blk, SHOAL_B_DATA))
		return "used elsewhere";
	return NULL;
}

/* The leaf at L serves table entries i .. i+rr-1 with depth d (d < 0: the
 * run is irregular and the depth unknown).  Walks it and its chain. */
static int leaf_chain(struct dwalk *dw, uint64_t L, uint64_t i, uint64_t rr, int d, unsigned D,
		      uint8_t *a, uint8_t *b)
{
	struct fsck *f = dw->dw_f;
	unsigned long long dino = dw->dw_dir->fi_ino;
	uint32_t max = f->f_bsize - SHOAL_LEAF_ENTRIES_OFF;
	const char *why = leaf_load(f, L, a);
	uint64_t cur = L;

	if (why) {
		if (d < 0) {
			dw->dw_rebuild |= fsck_problem(f, 1,
						       "directory %llu: leaf %llu is %s; rebuilding "
						       "the directory",
						       dino, (unsigned long long)L, why);
		} else if (fsck_problem(f, 1,
					"directory %llu: leaf %llu (table entries %llu..%llu) is "
					"%s; replacing it with an empty leaf",
					dino, (unsigned long long)L, (unsigned long long)i,
					(unsigned long long)(i + rr - 1), why)) {
			if (leaffix_add(f, dw->dw_dir->fi_ino, i, rr, (unsigned)d))
				return -ENOMEM;
		}
		return 0;
	}
	dw->dw_ranged = d >= 0;
	dw->dw_d = d >= 0 ? (unsigned)d : 0;
	dw->dw_k = d > 0 ? i >> (D - (unsigned)d) : 0;
	for (;;) {
		struct shoal_leaf *lf = (void *)a;
		uint32_t used = lf->lf_used, total, left;
		uint64_t next;
		int dirty = 0, r;

		dw->dw_dir->fi_blocks++;
		if (leaf_keep(dw, cur))
			return -ENOMEM;
		if (d >= 0 && lf->lf_depth != d &&
		    fsck_problem(f, 1, "directory %llu: leaf %llu: lf_depth %u, but the hash "
				       "table gives it %d",
				 dino, (unsigned long long)cur, lf->lf_depth, d)) {
			lf->lf_depth = (uint16_t)d;
			dirty = 1;
		}
		if (used > max) {
			if (fsck_problem(f, 1, "directory %llu: leaf %llu: lf_used %u is too large",
					 dino, (unsigned long long)cur, used))
				dirty = 1;
			used = max;
		}
		r = entries_walk(dw, a + SHOAL_LEAF_ENTRIES_OFF, &used, &total, &left, "leaf", cur);
		if (r < 0)
			return -EIO;
		dirty |= r;
		if (lf->lf_count != total &&
		    fsck_problem(f, 1, "directory %llu: leaf %llu: lf_count %u, but it holds %u",
				 dino, (unsigned long long)cur, lf->lf_count, total))
			dirty = 1;
		next = lf->lf_next;
		if (next) {
			why = leaf_load(f, next, b);
			if (why && fsck_problem(f, 1,
						"directory %llu: leaf %llu: chained leaf %llu is %s; "
						"cutting the chain",
						dino, (unsigned long long)cur,
						(unsigned long long)next, why)) {
				lf->lf_next = 0;
				dirty = 1;
			}
			if (why)
				next = 0;
		}
		if (dirty && f->f_yes) {
			lf->lf_used = used;
			lf->lf_count = (uint16_t)left;
			meta_update_crc(a, f->f_bsize);
			blk_write(f, cur, a);
		}
		if (!next)
			return 0;
		memcpy(a, b, f->f_bsize);
		cur = next;
	}
}

static int exhash_walk(struct dwalk *dw, uint8_t *dib, int *didirty)
{
	struct fsck *f = dw->dw_f;
	struct shoal_dinode *di = (void *)dib;
	unsigned long long dino = dw->dw_dir->fi_ino;
	unsigned D = di->di_depth;
	uint64_t entries = 1ull << D, hp = SHOAL_HT_PTRS(f->f_bsize);
	uint64_t ntab = (entries + hp - 1) / hp, i = 0;
	struct tcache tc = { 0 };
	uint8_t *a = blk_alloc(f), *b = blk_alloc(f);
	uint64_t *tbl = calloc(ntab, sizeof(*tbl));
	int err = -ENOMEM, r;

	tc.tc_buf = blk_alloc(f);
	if (!a || !b || !tbl || !tc.tc_buf)
		goto out;
	tc.tc_tbl = tbl;
	tc.tc_lblk = UINT64_MAX;
	if (di->di_size != entries * 8 &&
	    fsck_problem(f, 1, "directory %llu: di_size %llu, should be %llu", dino,
			 (unsigned long long)di->di_size, (unsigned long long)(entries * 8))) {
		di->di_size = entries * 8;
		*didirty = 1;
	}
	r = bmap_walk_htable(f, dw->dw_dir, dib, tbl, ntab);
	if (r < 0)
		goto out;
	if (r > 0)
		*didirty = 1;
	for (uint64_t lb = 0; lb < ntab; lb++)
		if (!tbl[lb])
			dw->dw_rebuild |= fsck_problem(f, 1,
						       "directory %llu: hash table block %llu is "
						       "missing or invalid; rebuilding the directory",
						       dino, (unsigned long long)lb);
	err = 0;
	while (i < entries && !err) {
		uint64_t L, x, rr = 1;
		int d = -1;

		if (tptr(f, &tc, i, &L)) {
			i = (i / hp + 1) * hp;
			continue;
		}
		if (L == 0) {
			dw->dw_rebuild |= fsck_problem(f, 1,
						       "directory %llu: hash table entry %llu is "
						       "empty; rebuilding the directory",
						       dino, (unsigned long long)i);
			i++;
			continue;
		}
		while (i + rr < entries && tptr(f, &tc, i + rr, &x) == 0 && x == L)
			rr++;
		if (!(rr & (rr - 1)) && i % rr == 0)
			d = (int)(D - (unsigned)__builtin_ctzll(rr));
		else
			dw->dw_rebuild |= fsck_problem(
				f, 1,
				"directory %llu: hash table entries %llu..%llu point at leaf "
				"%llu, not an aligned power-of-two run; rebuilding the directory",
				dino, (unsigned long long)i, (unsigned long long)(i + rr - 1),
				(unsigned long long)L);
		err = leaf_chain(dw, L, i, rr, d, D, a, b);
		i += rr;
	}
	if (!err && dw->dw_rebuild) {
		struct fsck_rebuild *rb;
		if (f->f_nrebuild == f->f_caprebuild) {
			size_t ncap = f->f_caprebuild ? f->f_caprebuild * 2 : 8;
			rb = realloc(f->f_rebuild, ncap * sizeof(*rb));
			if (!rb) {
				err = -ENOMEM;
				goto out;
			}
			f->f_rebuild = rb;
			f->f_caprebuild = ncap;
		}
		rb = &f->f_rebuild[f->f_nrebuild++];
		rb->rb_dir = dw->dw_dir->fi_ino;
		rb->rb_leaves = dw->dw_leaves;
		rb->rb_n = dw->dw_nleaves;
		dw->dw_leaves = NULL;
		dw->dw_nleaves = dw->dw_capleaves = 0;
	}
out:
	if (err == -ENOMEM)
		fsck_operr(f, "directory walk", ENOMEM);
	free(a);
	free(b);
	free(tc.tc_buf);
	free(tbl);
	return err;
}

int dir_walk(struct fsck *f, struct fsck_ino *dir)
{
	static struct dwalk dw; /* the name set is reused from one directory to the next */
	uint8_t *dib = blk_alloc(f);
	int err = -ENOMEM, didirty = 0;

	dir->fi_flags |= FI_WALKED;
	if (!dib)
		return err;
	dw.dw_f = f;
	dw.dw_dir = dir;
	dw.dw_rebuild = 0;
	dw.dw_nleaves = 0;
	if (ns_reset(&dw.dw_ns))
		goto out;
	err = ino_read(f, dir, dib);
	if (err) {
		err = err == -EUCLEAN ? 0 : err;
		goto out;
	}
	if (((struct shoal_dinode *)dib)->di_flags & SHOAL_DIF_EXHASH)
		err = exhash_walk(&dw, dib, &didirty);
	else if ((err = inline_walk(&dw, dib)) > 0)
		didirty = 1, err = 0;
	if (!err && didirty && f->f_yes)
		err = ino_write(f, dir->fi_ino, dib);
out:
	free(dib);
	if (f->f_operr) {
		ns_free(&dw.dw_ns);
		memset(&dw.dw_ns, 0, sizeof(dw.dw_ns));
	}
	return err;
}

static int run_queue(struct fsck *f, uint64_t *walked, uint64_t total)
{
	while (f->f_qhead < f->f_qtail) {
		struct fsck_ino *fi = itab_find(f, f->f_queue[f->f_qhead++]);
		int err;

		if (!fi)
			continue;
		fi->fi_flags &= (uint16_t)~FI_QUEUED;
		if (fi->fi_flags & FI_WALKED)
			continue;
		err = dir_walk(f, fi);
		if (err)
			return err;
		++*walked;
		fsck_progress(f, f->f_icount < total ? f->f_icount : total, total);
	}
	return 0;
}

static uint64_t dinode_total(struct fsck *f)
{
	uint64_t n = 0;

	for (uint32_t g = 0; g < f->f_rgcount; g++)
		n += f->f_rgs[g].fr_ddinodes;
	return n ? n : 1;
}

/* --- pass 2 ---------------------------------------------------------------- */

int fsck_tree(struct fsck *f)
{
	uint64_t root = f->f_sb.sb_root, walked = 0;
	struct fsck_ino *fi = ino_get(f, root);

	f->f_ptotal = dinode_total(f);
	if (!fi)
		return -ENOMEM;
	if (!fsck_covered(f, root)) {
		fsck_problem(f, 0, "root inode %llu (sb_root) is outside every resource group",
			     (unsigned long long)root);
		return 0;
	}
	if (!(fi->fi_flags & FI_VALID) || !S_ISDIR(fi->fi_mode)) {
		uint8_t *b;
		if (!fsck_problem(f, 1,
				  "root inode %llu is %s; creating a new, empty root directory "
				  "(what it held goes to /lost+found)",
				  (unsigned long long)root,
				  fi->fi_flags & FI_VALID ? "not a directory" : "invalid"))
			return 0;
		if (!(b = blk_alloc(f)))
			return -ENOMEM;
		if (!(fi->fi_flags & FI_VALID))
			fsck_claim(f, root, SHOAL_B_DINODE); /* the block was not claimed */
		dir_make(f, b, root, root, 0755);
		blk_write(f, root, b);
		free(b);
		fi->fi_flags = FI_VALID;
		fi->fi_mode = S_IFDIR | 0755;
		fi->fi_nlink = 2;
		fi->fi_dparent = root;
		fi->fi_dblocks = fi->fi_blocks = 1;
		fi->fi_dentries = 0;
	}
	fi->fi_flags |= FI_QUEUED;
	if (queue_push(f, root))
		return -ENOMEM;
	return run_queue(f, &walked, dinode_total(f));
}

/* --- pass 3 ---------------------------------------------------------------- */

static int scan_one(struct fsck *f, uint64_t blkno, int dstate)
{
	struct fsck_ino *fi;

	if (itab_find(f, blkno))
		return 0;
	if (dstate < 0) {
		/* group header unreadable: accept only perfect dinodes */
		uint8_t *b = blk_alloc(f);
		int ok;
		if (!b)
			return -ENOMEM;
		ok = blk_read(f, blkno, b) == 0 &&
		     meta_check(b, f->f_bsize, SHOAL_MT_DINODE, blkno) == 0;
		free(b);
		if (!ok)
			return 0;
	}
	fi = ino_get(f, blkno);
	if (!fi)
		return -ENOMEM;
	if (!(fi->fi_flags & FI_VALID)) {
		if (f->f_verbose)
			fsck_info(f, "block %llu is marked as a dinode but is not a valid one",
				  (unsigned long long)blkno);
		return 0;
	}
	fi->fi_flags |= FI_SCANNED;
	if (S_ISDIR(fi->fi_mode) && !(fi->fi_flags & (FI_WALKED | FI_QUEUED))) {
		fi->fi_flags |= FI_QUEUED;
		return queue_push(f, blkno);
	}
	return 0;
}

int fsck_detached(struct fsck *f)
{
	uint64_t walked = 0;
	int err = fsck_rg_scan(f, scan_one);

	/* directories met only through entries that were rejected */
	for (uint64_t r = 0; r < f->f_icount && !err; r++) {
		struct fsck_ino *fi = itab_rec(f, r);
		if ((fi->fi_flags & FI_VALID) && S_ISDIR(fi->fi_mode) &&
		    !(fi->fi_flags & (FI_WALKED | FI_QUEUED))) {
			fi->fi_flags |= FI_QUEUED;
			err = queue_push(f, fi->fi_ino);
		}
	}
	if (!err)
		err = run_queue(f, &walked, dinode_total(f));
	if (err)
		return err;
	for (uint64_t r = 0; r < f->f_icount; r++) {
		struct fsck_ino *fi = itab_rec(f, r);
		if (!(fi->fi_flags & FI_VALID) || fi->fi_refs || fi->fi_ino == f->f_sb.sb_root)
			continue;
		if (fi->fi_dstate == SHOAL_B_UNLINKED && !(S_ISDIR(fi->fi_mode) && fi->fi_entries))
			fi->fi_flags |= FI_ORPHAN;
		else
			fi->fi_flags |= FI_LOST;
	}
	return 0;
}

/*
 * fsck_dir.c - directories for fsck.shoal: pass 2 (the tree from the
 * root), pass 3 (dinodes only the bitmaps know), pass 5a (leaf
 * replacement, orphans, lost+found, cycles) and the entry checks they share.
 *
 * A directory is walked once (FI_WALKED).  Each entry is checked in this
 * order: well-formed name, hash (and for a hashed directory, that the hash
 * belongs to the leaf's range), target (a valid dinode, not the directory
 * itself, not a second link to a directory), duplicate name, de_type.  A
 * bad entry is removed with -y and ignored with -n; either way it is not
 * counted, so the counts checked later are those of the repaired directory.
 *
 * Invariants:
 *  (1) a directory is referenced by at most one entry (the root by none):
 *      the first entry the walk meets keeps it, later ones are bad;
 *  (2) every inode an entry keeps has fi_refs counted and, if it is a
 *      directory, fi_parent set to the entry's directory;
 *  (3) entries are inserted (lost+found) in hash order, and only into a
 *      leaf or inline area with room: fsck never splits leaves;
 *  (4) the name set of one directory holds every kept name, so duplicates
 *      are found whatever leaf or chain they are in.
 */
#include "fsck.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "meta.h"

#define FI_TMP 0x0800   /* connectivity walk: on the current path */
#define FI_UNCONN 0x1000 /* connectivity walk: not reachable from the root */

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
};

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
			fsck_problem(f, 0, "directory %llu: leaf %llu is %s", dino,
				     (unsigned long long)L, why);
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
			fsck_problem(f, 0, "directory %llu: hash table block %llu is missing or invalid",
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
			fsck_problem(f, 0, "directory %llu: hash table entry %llu is empty", dino,
				     (unsigned long long)i);
			i++;
			continue;
		}
		while (i + rr < entries && tptr(f, &tc, i + rr, &x) == 0 && x == L)
			rr++;
		if (!(rr & (rr - 1)) && i % rr == 0)
			d = (int)(D - (unsigned)__builtin_ctzll(rr));
		else
			fsck_problem(f, 0,
				     "directory %llu: hash table entries %llu..%llu point at leaf "
				     "%llu: not an aligned power-of-two run",
				     dino, (unsigned long long)i, (unsigned long long)(i + rr - 1),
				     (unsigned long long)L);
		err = leaf_chain(dw, L, i, rr, d, D, a, b);
		i += rr;
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

static void now_ts(struct shoal_ts *ts)
{
	struct timespec t;

	clock_gettime(CLOCK_REALTIME, &t);
	ts->ts_sec = t.tv_sec;
	ts->ts_nsec = (uint32_t)t.tv_nsec;
	ts->ts_pad = 0;
}

/* An empty inline directory dinode at blkno. */
static void dir_make(struct fsck *f, uint8_t *b, uint64_t blkno, uint64_t parent, uint32_t perm)
{
	struct shoal_dinode *di = (void *)b;

	memset(b, 0, f->f_bsize);
	di->di_mode = S_IFDIR | perm;
	di->di_nlink = 2;
	di->di_blocks = 1;
	now_ts(&di->di_atime);
	di->di_mtime = di->di_ctime = di->di_crtime = di->di_atime;
	di->di_generation = 1;
	di->di_parent = parent;
	meta_seal(b, f->f_bsize, SHOAL_MT_DINODE, blkno, 0);
}

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

/* --- pass 5a: inserting entries ------------------------------------------------ */

/* Insert an entry at its hash position in packed entries ents[0..*used). */
static void entry_insert(uint8_t *ents, uint32_t *used, uint64_t h, const char *name, uint8_t len,
			 uint64_t ino, uint8_t dt)
{
	uint32_t off = 0, sz = (uint32_t)sizeof(struct shoal_dirent) + len;
	struct shoal_dirent de = { .de_hash = h, .de_ino = ino, .de_type = dt, .de_namelen = len };

	while (off + sizeof(struct shoal_dirent) <= *used) {
		const struct shoal_dirent *e = (const void *)(ents + off);
		if (e->de_hash > h)
			break;
		off += (uint32_t)sizeof(*e) + e->de_namelen;
	}
	if (off > *used)
		off = *used;
	memmove(ents + off + sz, ents + off, *used - off);
	memcpy(ents + off, &de, sizeof(de));
	memcpy(ents + off + sizeof(de), name, len);
	*used += sz;
}

static int ents_find(const uint8_t *ents, uint32_t used, uint64_t h, const char *name,
		     uint8_t len)
{
	uint32_t off = 0;

	while (off + sizeof(struct shoal_dirent) <= used) {
		const struct shoal_dirent *e = (const void *)(ents + off);
		if (off + sizeof(*e) + e->de_namelen > used)
			break;
		if (e->de_hash == h && e->de_namelen == len &&
		    !memcmp(ents + off + sizeof(*e), name, len))
			return 1;
		off += (uint32_t)sizeof(*e) + e->de_namelen;
	}
	return 0;
}

/*
 * Find (insert 0) or insert (insert 1) name in directory dir, whose dinode
 * is in dib.  Returns 1 if found, 0 if not found or inserted, -ENOSPC when
 * there is no room without splitting, other -errno on errors.
 */
static int dir_op(struct fsck *f, uint64_t dir, uint8_t *dib, const char *name, uint8_t len,
		  uint64_t ino, uint8_t dt, int insert)
{
	struct shoal_dinode *di = (void *)dib;
	uint64_t h = meta_name_hash(f->f_seed, name, len), hp = SHOAL_HT_PTRS(f->f_bsize);
	uint32_t sz = (uint32_t)sizeof(struct shoal_dirent) + len;
	uint64_t idx, tb, L;
	uint8_t *b;
	int err, hops = 0;

	if (!(di->di_flags & SHOAL_DIF_EXHASH)) {
		struct shoal_inline_dir *id = (void *)(dib + SHOAL_DI_PAYLOAD_OFF);
		uint8_t *ents = dib + SHOAL_DI_PAYLOAD_OFF + sizeof(*id);
		uint32_t max = SHOAL_DI_PAYLOAD(f->f_bsize) - sizeof(*id);
		if (id->id_used > max)
			return -EUCLEAN;
		if (!insert)
			return ents_find(ents, id->id_used, h, name, len);
		if (id->id_used + sz > max)
			return -ENOSPC;
		entry_insert(ents, &id->id_used, h, name, len, ino, dt);
		return 0;
	}
	if (di->di_depth > SHOAL_MAX_DEPTH)
		return -EUCLEAN;
	idx = di->di_depth ? h >> (63 - di->di_depth) : 0;
	tb = bmap_lookup(f, dib, idx / hp);
	b = blk_alloc(f);
	if (!b)
		return -ENOMEM;
	err = -EUCLEAN;
	if (!tb || blk_read(f, tb, b) || meta_check(b, f->f_bsize, SHOAL_MT_HTABLE, tb))
		goto out;
	L = ((const uint64_t *)(b + SHOAL_HT_PTR_OFF))[idx % hp];
	for (; L && hops < 1024; hops++) {
		struct shoal_leaf *lf = (void *)b;
		uint8_t *ents = b + SHOAL_LEAF_ENTRIES_OFF;
		uint32_t max = f->f_bsize - SHOAL_LEAF_ENTRIES_OFF;

		err = -EUCLEAN;
		if (!fsck_covered(f, L) || blk_read(f, L, b) ||
		    meta_check(b, f->f_bsize, SHOAL_MT_LEAF, L) || lf->lf_used > max)
			goto out;
		if (!insert && ents_find(ents, lf->lf_used, h, name, len)) {
			err = 1;
			goto out;
		}
		if (insert && lf->lf_used + sz <= max) {
			entry_insert(ents, &lf->lf_used, h, name, len, ino, dt);
			lf->lf_count++;
			meta_update_crc(b, f->f_bsize);
			err = blk_write(f, L, b);
			goto out;
		}
		L = lf->lf_next;
	}
	err = insert ? -ENOSPC : 0;
out:
	free(b);
	return err;
}

/* Set table entries first .. first+count-1 of the directory in dib to leaf. */
static int table_set(struct fsck *f, const uint8_t *dib, uint8_t *b, uint64_t first,
		     uint64_t count, uint64_t leaf)
{
	uint64_t hp = SHOAL_HT_PTRS(f->f_bsize);

	while (count) {
		uint64_t tb = bmap_lookup(f, dib, first / hp);
		int err;

		if (!tb || blk_read(f, tb, b) || meta_check(b, f->f_bsize, SHOAL_MT_HTABLE, tb))
			return -EUCLEAN;
		do {
			((uint64_t *)(b + SHOAL_HT_PTR_OFF))[first % hp] = leaf;
			first++;
			count--;
		} while (count && first % hp);
		meta_update_crc(b, f->f_bsize);
		err = blk_write(f, tb, b);
		if (err)
			return err;
	}
	return 0;
}

/* A new block for directory dir: counted in the dinode (dib) and the table. */
static int dir_newblock(struct fsck *f, struct fsck_ino *dir, uint8_t *dib, uint64_t *blk)
{
	int err = fsck_alloc(f, SHOAL_B_DATA, blk);

	if (err)
		return err;
	((struct shoal_dinode *)dib)->di_blocks++;
	dir->fi_blocks++;
	dir->fi_dblocks++;
	return 0;
}

/*
 * Make room in directory dir (its dinode in dib) for a name with hash h, the
 * way core/dir.c does: convert an inline directory to a hashed one, split
 * the full leaf, or double the table (fsck grows height-1 tables only).
 * Everything changed is written, dib included.  0, or -ENOSPC when the
 * directory cannot grow, or another -errno.
 */
static int dir_grow(struct fsck *f, struct fsck_ino *dir, uint8_t *dib, uint64_t h)
{
	struct shoal_dinode *di = (void *)dib;
	uint64_t hp = SHOAL_HT_PTRS(f->f_bsize), *dptr = (uint64_t *)(dib + SHOAL_DI_PAYLOAD_OFF);
	uint32_t bs = f->f_bsize;
	uint8_t *b1 = blk_alloc(f), *b2 = blk_alloc(f), *b3 = blk_alloc(f);
	struct shoal_leaf *lf = (void *)b1, *nlf = (void *)b3;
	uint64_t *old = NULL, lblk, tblk, idx, L;
	unsigned D = di->di_depth, d;
	int err = -ENOMEM;

	if (!b1 || !b2 || !b3)
		goto out;
	if (!(di->di_flags & SHOAL_DIF_EXHASH)) {
		struct shoal_inline_dir *id = (void *)(dib + SHOAL_DI_PAYLOAD_OFF);
		const uint8_t *ents = dib + SHOAL_DI_PAYLOAD_OFF + sizeof(*id);
		uint32_t used = id->id_used, cnt = 0;

		err = -EUCLEAN;
		if (used > SHOAL_DI_PAYLOAD(bs) - sizeof(*id))
			goto out;
		for (uint32_t off = 0; off + sizeof(struct shoal_dirent) <= used; cnt++)
			off += (uint32_t)sizeof(struct shoal_dirent) +
			       ((const struct shoal_dirent *)(ents + off))->de_namelen;
		if ((err = dir_newblock(f, dir, dib, &lblk)) ||
		    (err = dir_newblock(f, dir, dib, &tblk)))
			goto out;
		memset(b1, 0, bs);
		lf->lf_used = used;
		lf->lf_count = (uint16_t)cnt;
		memcpy(b1 + SHOAL_LEAF_ENTRIES_OFF, ents, used);
		meta_seal(b1, bs, SHOAL_MT_LEAF, lblk, 0);
		memset(b2, 0, bs);
		((uint64_t *)(b2 + SHOAL_HT_PTR_OFF))[0] = lblk;
		meta_seal(b2, bs, SHOAL_MT_HTABLE, tblk, 0);
		if ((err = blk_write(f, lblk, b1)) || (err = blk_write(f, tblk, b2)))
			goto out;
		memset(dib + SHOAL_DI_PAYLOAD_OFF, 0, SHOAL_DI_PAYLOAD(bs));
		dptr[0] = tblk;
		di->di_flags |= SHOAL_DIF_EXHASH;
		di->di_depth = 0;
		di->di_size = 8;
		di->di_height = 1;
		err = ino_write(f, dir->fi_ino, dib);
		goto out;
	}
	err = -ENOSPC;
	if (di->di_height != 1 || D > SHOAL_MAX_DEPTH)
		goto out;
	idx = D ? h >> (63 - D) : 0;
	err = -EUCLEAN;
	tblk = bmap_lookup(f, dib, idx / hp);
	if (!tblk || blk_read(f, tblk, b2) || meta_check(b2, bs, SHOAL_MT_HTABLE, tblk))
		goto out;
	L = ((const uint64_t *)(b2 + SHOAL_HT_PTR_OFF))[idx % hp];
	if (!fsck_covered(f, L) || blk_read(f, L, b1) || meta_check(b1, bs, SHOAL_MT_LEAF, L) ||
	    lf->lf_depth > D || lf->lf_used > bs - SHOAL_LEAF_ENTRIES_OFF)
		goto out;
	d = lf->lf_depth;
	if (d < D) {
		/* split: entries whose hash bit (62 - d) is set move to a new leaf */
		uint64_t width = 1ull << (D - d), start = idx & ~(width - 1), nblk;
		uint8_t *oa = b1 + SHOAL_LEAF_ENTRIES_OFF, *na = b3 + SHOAL_LEAF_ENTRIES_OFF;
		uint32_t off = 0, keep = 0;

		if ((err = dir_newblock(f, dir, dib, &nblk)))
			goto out;
		memset(b3, 0, bs);
		while (off + sizeof(struct shoal_dirent) <= lf->lf_used) {
			const struct shoal_dirent *e = (const void *)(oa + off);
			uint32_t sz = (uint32_t)sizeof(*e) + e->de_namelen;
			if (off + sz > lf->lf_used)
				break;
			if ((e->de_hash >> (62 - d)) & 1) {
				memcpy(na + nlf->lf_used, oa + off, sz);
				nlf->lf_used += sz;
				nlf->lf_count++;
			} else {
				memmove(oa + keep, oa + off, sz);
				keep += sz;
			}
			off += sz;
		}
		memset(oa + keep, 0, bs - SHOAL_LEAF_ENTRIES_OFF - keep);
		lf->lf_count = (uint16_t)(lf->lf_count - nlf->lf_count);
		lf->lf_used = keep;
		lf->lf_depth = nlf->lf_depth = (uint16_t)(d + 1);
		meta_update_crc(b1, bs);
		meta_seal(b3, bs, SHOAL_MT_LEAF, nblk, 0);
		if ((err = blk_write(f, L, b1)) || (err = blk_write(f, nblk, b3)) ||
		    (err = table_set(f, dib, b2, start + width / 2, width / 2, nblk)))
			goto out;
		err = ino_write(f, dir->fi_ino, dib);
		goto out;
	}
	/* double the table: entry i of the new one is entry i/2 of the old */
	uint64_t n = 1ull << D, ob = (n + hp - 1) / hp, nb = (2 * n + hp - 1) / hp;
	err = -ENOSPC;
	if (D >= SHOAL_MAX_DEPTH || nb > SHOAL_DI_PTRS(bs))
		goto out;
	err = -ENOMEM;
	old = malloc(n * sizeof(*old));
	if (!old)
		goto out;
	err = -EUCLEAN;
	for (uint64_t lb = 0; lb < ob; lb++) {
		uint64_t cnt = n - lb * hp < hp ? n - lb * hp : hp;
		if (!dptr[lb] || blk_read(f, dptr[lb], b2) ||
		    meta_check(b2, bs, SHOAL_MT_HTABLE, dptr[lb]))
			goto out;
		memcpy(old + lb * hp, b2 + SHOAL_HT_PTR_OFF, cnt * sizeof(*old));
	}
	for (uint64_t lb = ob; lb < nb; lb++)
		if ((err = dir_newblock(f, dir, dib, &dptr[lb])))
			goto out;
	for (uint64_t lb = 0; lb < nb; lb++) {
		memset(b2, 0, bs);
		for (uint64_t i = lb * hp; i < 2 * n && i < (lb + 1) * hp; i++)
			((uint64_t *)(b2 + SHOAL_HT_PTR_OFF))[i % hp] = old[i / 2];
		meta_seal(b2, bs, SHOAL_MT_HTABLE, dptr[lb], 0);
		if ((err = blk_write(f, dptr[lb], b2)))
			goto out;
	}
	di->di_depth = (uint16_t)(D + 1);
	di->di_size = 2 * n * 8;
	err = ino_write(f, dir->fi_ino, dib);
out:
	free(old);
	free(b1);
	free(b2);
	free(b3);
	return err;
}

/* Add entry name -> target to directory dir, and keep every count straight
 * on disk and in the table (so pass 5b finds nothing to say about it). */
static int dir_insert(struct fsck *f, struct fsck_ino *dir, const char *name,
		      struct fsck_ino *t)
{
	uint8_t *b = blk_alloc(f);
	struct shoal_dinode *di = (void *)b;
	uint8_t dt = mode_dtype(t->fi_mode), len = (uint8_t)strlen(name);
	int err = -ENOMEM;

	if (!b)
		return err;
	err = ino_read(f, dir, b);
	for (int tries = 0; !err && tries < 2 * SHOAL_MAX_DEPTH + 4; tries++) {
		err = dir_op(f, dir->fi_ino, b, name, len, t->fi_ino, dt, 1);
		if (err != -ENOSPC)
			break;
		err = dir_grow(f, dir, b, meta_name_hash(f->f_seed, name, len));
	}
	if (err)
		goto out;
	di->di_entries++;
	if (S_ISDIR(t->fi_mode))
		di->di_nlink++;
	now_ts(&di->di_mtime);
	di->di_ctime = di->di_mtime;
	err = ino_write(f, dir->fi_ino, b);
	if (err)
		goto out;
	dir->fi_entries++;
	dir->fi_dentries++;
	t->fi_refs++;
	if (S_ISDIR(t->fi_mode)) {
		dir->fi_subdirs++;
		dir->fi_nlink++;
		t->fi_parent = dir->fi_ino;
		if (t->fi_dparent != dir->fi_ino) {
			err = ino_read(f, t, b);
			if (err)
				goto out;
			di->di_parent = dir->fi_ino;
			err = ino_write(f, t->fi_ino, b);
			t->fi_dparent = dir->fi_ino;
		}
	}
out:
	free(b);
	return err;
}

static int dir_has(struct fsck *f, struct fsck_ino *dir, const char *name)
{
	uint8_t *b = blk_alloc(f);
	int r = -ENOMEM;

	if (b) {
		r = ino_read(f, dir, b);
		if (!r)
			r = dir_op(f, dir->fi_ino, b, name, (uint8_t)strlen(name), 0, 0, 0);
		free(b);
	}
	return r;
}

static struct fsck_ino *lostfound(struct fsck *f)
{
	struct fsck_ino *root = itab_find(f, f->f_sb.sb_root), *lf;
	uint64_t blk;
	uint8_t *b;
	int err;

	if (f->f_lostfound)
		return itab_find(f, f->f_lostfound);
	if (!root || !(root->fi_flags & FI_VALID))
		return NULL;
	err = dir_has(f, root, FSCK_LOSTFOUND);
	if (err) {
		fprintf(stderr, "%s: cannot create /%s: %s\n", FSCK_PROG, FSCK_LOSTFOUND,
			err == 1 ? "the name is taken by a non-directory" : strerror(-err));
		return NULL;
	}
	if (fsck_alloc(f, SHOAL_B_DINODE, &blk)) {
		fprintf(stderr, "%s: cannot create /%s: no free block\n", FSCK_PROG, FSCK_LOSTFOUND);
		return NULL;
	}
	b = blk_alloc(f);
	lf = b ? itab_add(f, blk) : NULL;
	if (!lf) {
		free(b);
		return NULL;
	}
	dir_make(f, b, blk, root->fi_ino, 0700);
	err = blk_write(f, blk, b);
	free(b);
	lf->fi_flags = FI_VALID | FI_WALKED | FI_MAPPED;
	lf->fi_mode = S_IFDIR | 0700;
	lf->fi_nlink = 2;
	lf->fi_dparent = root->fi_ino;
	lf->fi_blocks = lf->fi_dblocks = 1;
	lf->fi_dstate = SHOAL_B_DINODE;
	if (!err)
		err = dir_insert(f, root, FSCK_LOSTFOUND, lf);
	if (err) {
		fprintf(stderr, "%s: cannot create /%s: %s\n", FSCK_PROG, FSCK_LOSTFOUND,
			strerror(-err));
		fsck_set_state(f, blk, SHOAL_B_FREE);
		lf->fi_flags = FI_BAD | FI_FREED;
		return NULL;
	}
	fsck_info(f, "created /%s (inode %llu)", FSCK_LOSTFOUND, (unsigned long long)blk);
	f->f_lostfound = blk;
	return lf;
}

/* A repair that was counted as fixed but could not be completed. */
static void unfix(struct fsck *f, const char *what, int err)
{
	f->f_fixed--;
	f->f_unfixed++;
	fprintf(stderr, "%s: %s: %s\n", FSCK_PROG, what, strerror(err < 0 ? -err : err));
}

static int reconnect(struct fsck *f, struct fsck_ino *fi)
{
	struct fsck_ino *lf = lostfound(f);
	char name[32];
	int err = -ENOENT;

	if (!lf)
		return err;
	snprintf(name, sizeof(name), "#%llu", (unsigned long long)fi->fi_ino);
	for (int k = 1; k < 100; k++) {
		err = dir_has(f, lf, name);
		if (err <= 0)
			break;
		snprintf(name, sizeof(name), "#%llu.%d", (unsigned long long)fi->fi_ino, k);
	}
	if (err == 0)
		err = dir_insert(f, lf, name, fi);
	if (err == 0)
		fi->fi_flags &= (uint16_t)~FI_LOST;
	return err;
}

/* Replace the leaf of a run of table entries by a new, empty leaf. */
static int leaffix_apply(struct fsck *f, const struct fsck_leaffix *lx)
{
	struct fsck_ino *dir = itab_find(f, lx->lx_dir);
	uint64_t hp = SHOAL_HT_PTRS(f->f_bsize), blk, tb = 0, lb = UINT64_MAX;
	uint8_t *dib = blk_alloc(f), *b = blk_alloc(f);
	struct shoal_leaf *lf = (void *)b;
	int err = -ENOMEM;

	if (!dib || !b || !dir)
		goto out;
	err = ino_read(f, dir, dib);
	if (err)
		goto out;
	err = fsck_alloc(f, SHOAL_B_DATA, &blk);
	if (err)
		goto out;
	memset(b, 0, f->f_bsize);
	lf->lf_depth = lx->lx_depth;
	meta_seal(b, f->f_bsize, SHOAL_MT_LEAF, blk, 0);
	err = blk_write(f, blk, b);
	if (err)
		goto out;
	dir->fi_blocks++;
	for (uint64_t i = lx->lx_index; i < lx->lx_index + lx->lx_count && !err; i++) {
		if (i / hp != lb) {
			if (lb != UINT64_MAX) {
				meta_update_crc(b, f->f_bsize);
				err = blk_write(f, tb, b);
			}
			lb = i / hp;
			tb = bmap_lookup(f, dib, lb);
			if (!err && (!tb || blk_read(f, tb, b) ||
				     meta_check(b, f->f_bsize, SHOAL_MT_HTABLE, tb)))
				err = -EUCLEAN;
		}
		if (!err)
			((uint64_t *)(b + SHOAL_HT_PTR_OFF))[i % hp] = blk;
	}
	if (!err && lb != UINT64_MAX) {
		meta_update_crc(b, f->f_bsize);
		err = blk_write(f, tb, b);
	}
out:
	free(dib);
	free(b);
	return err;
}

/* Are directories reachable from the root through fi_parent?  Reports the
 * cycles (which -y cannot break) and returns 0 or -ENOMEM. */
static int check_cycles(struct fsck *f)
{
	struct fsck_ino *root = itab_find(f, f->f_sb.sb_root);
	struct fsck_ino **path = NULL;
	size_t cap = 0;

	if (root && (root->fi_flags & FI_VALID))
		root->fi_flags |= FI_CONNECTED;
	for (uint64_t r = 0; r < f->f_icount; r++) {
		struct fsck_ino *fi = itab_rec(f, r), *cur;
		size_t n = 0;
		int connected = 0, cycle = 0;

		if (!(fi->fi_flags & FI_VALID) || !S_ISDIR(fi->fi_mode) ||
		    (fi->fi_flags & (FI_CONNECTED | FI_UNCONN | FI_FREED | FI_ORPHAN)))
			continue;
		for (cur = fi; cur; cur = itab_find(f, cur->fi_parent)) {
			if (cur->fi_flags & FI_CONNECTED) {
				connected = 1;
				break;
			}
			if (cur->fi_flags & FI_UNCONN)
				break;
			if (cur->fi_flags & FI_TMP) {
				cycle = 1;
				break;
			}
			if (n == cap) {
				size_t ncap = cap ? cap * 2 : 64;
				struct fsck_ino **np = realloc(path, ncap * sizeof(*np));
				if (!np) {
					free(path);
					return -ENOMEM;
				}
				path = np;
				cap = ncap;
			}
			path[n++] = cur;
			cur->fi_flags |= FI_TMP;
			if (!cur->fi_refs)
				break; /* lost, reported already */
		}
		if (cycle)
			fsck_problem(f, 0,
				     "directory %llu is in a directory cycle unreachable from the "
				     "root",
				     (unsigned long long)cur->fi_ino);
		for (size_t k = 0; k < n; k++) {
			path[k]->fi_flags &= (uint16_t)~FI_TMP;
			path[k]->fi_flags |= connected ? FI_CONNECTED : FI_UNCONN;
		}
	}
	free(path);
	return 0;
}

int fsck_connect(struct fsck *f)
{
	struct fsck_ino **list;
	uint64_t n = 0, norph = 0;
	int err = 0;

	for (size_t k = 0; k < f->f_nleaffix; k++) {
		err = leaffix_apply(f, &f->f_leaffix[k]);
		if (err)
			unfix(f, "replacing a directory leaf", err);
	}
	list = itab_sorted(f, &n);
	if (!list)
		return -ENOMEM;
	for (uint64_t i = 0; i < n; i++) {
		struct fsck_ino *fi = list[i];
		unsigned long long ino = fi->fi_ino;

		fsck_progress(f, i, n);
		if (fi->fi_flags & FI_ORPHAN) {
			if (!f->f_yes) {
				norph++;
				map_set(f->f_fmap, fi->fi_ino, SHOAL_B_UNLINKED);
			} else if (fsck_problem(f, 1, "inode %llu: orphan (unlinked, no entry); "
						      "freeing it",
						ino)) {
				err = ino_release(f, fi);
				if (err)
					unfix(f, "freeing an orphan", err);
			}
			continue;
		}
		if (!(fi->fi_flags & FI_LOST))
			continue;
		if (fi->fi_nlink == 0) {
			if (fsck_problem(f, 1,
					 "inode %llu (%s) has no entry and nlink 0 but is not marked "
					 "unlinked; freeing it",
					 ino, fsck_mode_name(fi->fi_mode))) {
				err = ino_release(f, fi);
				if (err)
					unfix(f, "freeing an inode", err);
			} else if (fi->fi_dstate == SHOAL_B_DINODE ||
				   fi->fi_dstate == SHOAL_B_UNLINKED) {
				map_set(f->f_fmap, fi->fi_ino, fi->fi_dstate);
			}
			continue;
		}
		if (fsck_problem(f, 1, "inode %llu (%s, nlink %u) is not referenced by any "
				       "directory; moving it to /%s",
				 ino, fsck_mode_name(fi->fi_mode), fi->fi_nlink, FSCK_LOSTFOUND)) {
			err = reconnect(f, fi);
			if (err)
				unfix(f, "reconnecting to /lost+found", err);
		}
	}
	free(list);
	if (norph)
		fsck_info(f, "%llu orphan inodes will be freed at next mount",
			  (unsigned long long)norph);
	f->f_orphans = norph;
	return f->f_operr ? -EIO : check_cycles(f);
}

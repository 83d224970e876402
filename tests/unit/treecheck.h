/*
 * treecheck.h - whole-tree checks shared by the core unit tests, through the
 * public API only (include after <cmocka.h>; every function is static, so
 * each test program gets its own copy).
 *
 *  tc_read_dir      reads a directory with shoal_readdir, resuming at the
 *                   offsets it hands out, so many entries per call;
 *  tc_check_tree    walks the whole tree: every listed entry can be looked
 *                   up and stat'ed with the listed inode number and type,
 *                   ".." names the parent, every regular file reads to its
 *                   size, symlinks read to theirs, link counts equal the
 *                   entries naming an inode (2 + subdirectories for a
 *                   directory) and, if asked, statfs's used blocks equal the
 *                   sum of st_blocks;
 *  tc_snapshot      records every path with its attributes (but atime),
 *                   contents, symlink target and xattrs as hashes, so two
 *                   states of a filesystem can be compared exactly.
 */
#ifndef SHOAL_TREECHECK_H
#define SHOAL_TREECHECK_H

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "shoal/ondisk.h"
#include "shoal/shoal.h"

/* A content hash (FNV-1a over 64-bit words, then the tail bytes). */
static __attribute__((unused)) uint64_t tc_fnv(uint64_t h, const void *p, size_t len)
{
	const uint8_t *b = p;
	size_t i = 0;
	for (; i + 8 <= len; i += 8) {
		uint64_t x;
		memcpy(&x, b + i, 8);
		h = (h ^ x) * 0x100000001b3ull;
		h ^= h >> 29;
	}
	for (; i < len; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}
#define TC_FNV0 0xcbf29ce484222325ull

/* --- readdir -------------------------------------------------------------- */

struct tc_dent {
	char d_name[SHOAL_NAME_MAX + 1];
	uint64_t d_ino;
	mode_t d_type;
	uint64_t d_off;
};

struct tc_rd {
	struct tc_dent *r_ents;
	size_t r_n, r_cap;
	size_t r_limit; /* entries accepted per call; 0 = unlimited */
	size_t r_call;  /* accepted in the current call */
	uint64_t r_last;
};

static __attribute__((unused)) int tc_fill(void *arg, const char *name, const struct stat *st, uint64_t next_off)
{
	struct tc_rd *r = arg;
	if (r->r_limit && r->r_call == r->r_limit)
		return 1;
	if (r->r_n == r->r_cap) {
		r->r_cap = r->r_cap ? r->r_cap * 2 : 64;
		r->r_ents = realloc(r->r_ents, r->r_cap * sizeof(*r->r_ents));
		assert_non_null(r->r_ents);
	}
	struct tc_dent *d = &r->r_ents[r->r_n++];
	assert_true(strlen(name) <= SHOAL_NAME_MAX);
	strcpy(d->d_name, name);
	d->d_ino = st->st_ino;
	d->d_type = st->st_mode & S_IFMT;
	d->d_off = next_off;
	/* offsets only grow, within a call and across calls */
	if (next_off <= r->r_last)
		fail_msg("readdir offset %llu after %llu (\"%s\")", (unsigned long long)next_off,
			 (unsigned long long)r->r_last, name);
	r->r_last = next_off;
	r->r_call++;
	return 0;
}

/* Read a whole directory, limit entries per call (0: all), resuming as told. */
static __attribute__((unused)) void tc_read_dir(struct shoal_fs *fs, uint64_t ino, size_t limit, struct tc_rd *r)
{
	memset(r, 0, sizeof(*r));
	r->r_limit = limit;
	for (;;) {
		size_t before = r->r_n;
		int err;
		r->r_call = 0;
		err = shoal_readdir(fs, ino, r->r_last, 0, tc_fill, r);
		if (err)
			fail_msg("readdir of %llu at %llu: %s", (unsigned long long)ino,
				 (unsigned long long)r->r_last, strerror(-err));
		if (r->r_n == before)
			break;
	}
}

static __attribute__((unused)) int tc_cmp_dent(const void *a, const void *b)
{
	return strcmp(((const struct tc_dent *)a)->d_name, ((const struct tc_dent *)b)->d_name);
}

static __attribute__((unused)) struct tc_dent *tc_rd_find(struct tc_rd *r, const char *name)
{
	struct tc_dent key;
	size_t n = strlen(name);
	assert_true(n <= SHOAL_NAME_MAX);
	memcpy(key.d_name, name, n);
	key.d_name[n] = '\0';
	return bsearch(&key, r->r_ents, r->r_n, sizeof(key), tc_cmp_dent);
}

/* Sort by name and check that no name was listed twice. */
static __attribute__((unused)) void tc_rd_sort_unique(struct tc_rd *r)
{
	qsort(r->r_ents, r->r_n, sizeof(*r->r_ents), tc_cmp_dent);
	for (size_t i = 1; i < r->r_n; i++)
		if (!strcmp(r->r_ents[i - 1].d_name, r->r_ents[i].d_name))
			fail_msg("readdir listed \"%s\" twice", r->r_ents[i].d_name);
}

/* Look a path ("a/b/c", relative to the root) up: 0 and *st, or -errno. */
static __attribute__((unused)) int tc_lookup_path(struct shoal_fs *fs, const char *path, struct stat *st)
{
	char comp[SHOAL_NAME_MAX + 1];
	uint64_t ino = shoal_root(fs);
	int err = shoal_getattr(fs, ino, st);

	while (!err && *path) {
		size_t n = strcspn(path, "/");
		assert_true(n <= SHOAL_NAME_MAX);
		memcpy(comp, path, n);
		comp[n] = '\0';
		path += n + (path[n] == '/');
		err = shoal_lookup(fs, ino, comp, st);
		if (err)
			break;
		shoal_forget(fs, st->st_ino, 1);
		ino = st->st_ino;
	}
	return err;
}

/* Read a whole regular file: its length; *hash its contents' FNV-1a. */
static __attribute__((unused)) uint64_t tc_read_file(struct shoal_fs *fs, uint64_t ino, uint64_t size, uint64_t *hash,
			     const char *what)
{
	const size_t chunk = 256 * 1024;
	uint8_t *buf = malloc(chunk);
	uint64_t off = 0, h = TC_FNV0;

	assert_non_null(buf);
	while (off < size) {
		ssize_t n = shoal_read(fs, ino, buf, chunk, off, O_RDONLY);
		if (n <= 0)
			fail_msg("read of %s (inode %llu) at %llu of %llu: %s", what,
				 (unsigned long long)ino, (unsigned long long)off,
				 (unsigned long long)size, n ? strerror((int)-n) : "end of file");
		h = tc_fnv(h, buf, (size_t)n);
		off += (uint64_t)n;
	}
	free(buf);
	if (hash)
		*hash = h;
	return off;
}

/* --- whole-tree walk ------------------------------------------------------- */

struct tc_ent { /* one inode met by the walk, or one path of a snapshot */
	char *t_path;
	uint64_t t_ino;
	uint32_t t_seen;
	struct stat t_st;
	uint64_t t_hash; /* contents or symlink target */
	uint64_t t_xhash;
};

struct tc_walk {
	struct tc_ent *w_ents;
	size_t w_n, w_cap;
	int w_snapshot; /* record paths (snapshot) rather than inodes (check) */
};

static __attribute__((unused)) struct tc_ent *tc_walk_add(struct tc_walk *w)
{
	if (w->w_n == w->w_cap) {
		w->w_cap = w->w_cap ? w->w_cap * 2 : 256;
		w->w_ents = realloc(w->w_ents, w->w_cap * sizeof(*w->w_ents));
		assert_non_null(w->w_ents);
	}
	memset(&w->w_ents[w->w_n], 0, sizeof(w->w_ents[0]));
	return &w->w_ents[w->w_n++];
}

static __attribute__((unused)) struct tc_ent *tc_walk_inode(struct tc_walk *w, const struct stat *st)
{
	/* inodes are few in these tests; the last ones are the likely hits */
	for (size_t i = w->w_n; i-- > 0;)
		if (w->w_ents[i].t_ino == st->st_ino)
			return &w->w_ents[i];
	struct tc_ent *t = tc_walk_add(w);
	t->t_ino = st->st_ino;
	t->t_st = *st;
	return t;
}

static __attribute__((unused)) uint64_t tc_xattr_hash(struct shoal_fs *fs, uint64_t ino)
{
	char list[8192], val[65536];
	ssize_t n = shoal_listxattr(fs, ino, list, sizeof(list));
	uint64_t h = TC_FNV0;

	assert_true(n >= 0);
	/* order-independent: sum of per-attribute hashes */
	uint64_t sum = 0;
	for (char *p = list; p < list + n; p += strlen(p) + 1) {
		ssize_t v = shoal_getxattr(fs, ino, p, val, sizeof(val));
		assert_true(v >= 0);
		sum += tc_fnv(tc_fnv(h, p, strlen(p) + 1), val, (size_t)v);
	}
	return sum;
}

static __attribute__((unused)) void tc_walk_dir(struct shoal_fs *fs, uint64_t dir, uint64_t parent, const char *path,
			struct tc_walk *w, int depth)
{
	struct tc_rd r;
	uint32_t subdirs = 0;
	struct stat st;

	assert_true(depth < 64);
	tc_read_dir(fs, dir, 0, &r);
	assert_true(r.r_n >= 2);
	assert_string_equal(r.r_ents[0].d_name, ".");
	assert_int_equal(r.r_ents[0].d_ino, dir);
	assert_string_equal(r.r_ents[1].d_name, "..");
	assert_int_equal(r.r_ents[1].d_ino, parent);
	assert_int_equal(shoal_lookup(fs, dir, "..", &st), 0);
	shoal_forget(fs, st.st_ino, 1);
	assert_int_equal(st.st_ino, parent);
	for (size_t i = 2; i < r.r_n; i++) {
		struct tc_dent *d = &r.r_ents[i];
		char *sub;
		int err = shoal_lookup(fs, dir, d->d_name, &st);

		assert_true(asprintf(&sub, "%s%s%s", path, *path ? "/" : "", d->d_name) > 0);
		if (err)
			fail_msg("lookup of listed entry %s: %s", sub, strerror(-err));
		shoal_forget(fs, st.st_ino, 1);
		if (st.st_ino != d->d_ino || (st.st_mode & S_IFMT) != d->d_type)
			fail_msg("%s: readdir says inode %llu type %o, lookup %llu type %o", sub,
				 (unsigned long long)d->d_ino, d->d_type,
				 (unsigned long long)st.st_ino, st.st_mode & S_IFMT);
		struct tc_ent *t = w->w_snapshot ? tc_walk_add(w) : tc_walk_inode(w, &st);
		t->t_seen++;
		if (w->w_snapshot) {
			t->t_path = sub;
			t->t_ino = st.st_ino;
			t->t_st = st;
			t->t_xhash = tc_xattr_hash(fs, st.st_ino);
		}
		if (S_ISDIR(st.st_mode)) {
			subdirs++;
			if (t->t_seen > 1)
				fail_msg("directory %s has more than one name", sub);
			tc_walk_dir(fs, st.st_ino, dir, sub, w, depth + 1);
		} else if (S_ISREG(st.st_mode) && (t->t_seen == 1 || w->w_snapshot)) {
			tc_read_file(fs, st.st_ino, (uint64_t)st.st_size, &t->t_hash, sub);
		} else if (S_ISLNK(st.st_mode)) {
			char tgt[4096];
			ssize_t n = shoal_readlink(fs, st.st_ino, tgt, sizeof(tgt));
			if (n != st.st_size)
				fail_msg("readlink %s: %zd, size %lld", sub, n, (long long)st.st_size);
			t->t_hash = tc_fnv(TC_FNV0, tgt, (size_t)n);
		}
		if (!w->w_snapshot)
			free(sub);
	}
	assert_int_equal(shoal_getattr(fs, dir, &st), 0);
	if (st.st_nlink != 2 + subdirs)
		fail_msg("directory \"%s\": nlink %u, but %u subdirectories", path,
			 (unsigned)st.st_nlink, subdirs);
	free(r.r_ents);
}

/* Walk and check the whole tree (see the top); blocks_exact: statfs too. */
static __attribute__((unused)) void tc_check_tree(struct shoal_fs *fs, int blocks_exact)
{
	struct tc_walk w = { 0 };
	struct stat rst;
	struct statvfs sv;
	uint64_t root = shoal_root(fs);

	assert_int_equal(shoal_getattr(fs, root, &rst), 0);
	uint64_t used = (uint64_t)rst.st_blocks;
	tc_walk_dir(fs, root, root, "", &w, 0);
	for (size_t i = 0; i < w.w_n; i++) {
		struct tc_ent *t = &w.w_ents[i];
		if (!S_ISDIR(t->t_st.st_mode) && t->t_seen != t->t_st.st_nlink)
			fail_msg("inode %llu: nlink %u, but %u entries name it",
				 (unsigned long long)t->t_ino, (unsigned)t->t_st.st_nlink, t->t_seen);
		used += (uint64_t)t->t_st.st_blocks;
	}
	assert_int_equal(shoal_statfs(fs, &sv), 0);
	if (blocks_exact && (sv.f_blocks - sv.f_bfree) * sv.f_frsize != used * 512)
		fail_msg("statfs: %llu blocks in use, the inodes hold %llu",
			 (unsigned long long)(sv.f_blocks - sv.f_bfree),
			 (unsigned long long)(used * 512 / sv.f_frsize));
	free(w.w_ents);
}

/* --- snapshots ------------------------------------------------------------------ */

struct tc_snap {
	struct tc_ent *s_ents; /* sorted by path */
	size_t s_n;
	uint64_t s_bfree;
};

static __attribute__((unused)) int tc_cmp_path(const void *a, const void *b)
{
	return strcmp(((const struct tc_ent *)a)->t_path, ((const struct tc_ent *)b)->t_path);
}

static __attribute__((unused)) void tc_snapshot(struct shoal_fs *fs, struct tc_snap *s)
{
	struct tc_walk w = { .w_snapshot = 1 };
	struct statvfs sv;
	uint64_t root = shoal_root(fs);

	tc_walk_dir(fs, root, root, "", &w, 0);
	qsort(w.w_ents, w.w_n, sizeof(*w.w_ents), tc_cmp_path);
	s->s_ents = w.w_ents;
	s->s_n = w.w_n;
	assert_int_equal(shoal_statfs(fs, &sv), 0);
	s->s_bfree = sv.f_bfree;
}

static __attribute__((unused)) void tc_snap_free(struct tc_snap *s)
{
	for (size_t i = 0; i < s->s_n; i++)
		free(s->s_ents[i].t_path);
	free(s->s_ents);
	s->s_ents = NULL;
	s->s_n = 0;
}

/* Fail, naming the first difference, unless a and b describe the same tree. */
static __attribute__((unused)) void tc_snap_expect_equal(const struct tc_snap *a, const struct tc_snap *b,
				 const char *what)
{
	size_t i = 0, j = 0;
	while (i < a->s_n || j < b->s_n) {
		int c = i == a->s_n ? 1 : j == b->s_n ? -1 :
			strcmp(a->s_ents[i].t_path, b->s_ents[j].t_path);
		if (c < 0)
			fail_msg("%s: %s is only in the first tree", what, a->s_ents[i].t_path);
		if (c > 0)
			fail_msg("%s: %s is only in the second tree", what, b->s_ents[j].t_path);
		const struct tc_ent *x = &a->s_ents[i++], *y = &b->s_ents[j++];
		const struct stat *p = &x->t_st, *q = &y->t_st;
		if (p->st_ino != q->st_ino || p->st_mode != q->st_mode || p->st_nlink != q->st_nlink ||
		    p->st_uid != q->st_uid || p->st_gid != q->st_gid || p->st_size != q->st_size ||
		    p->st_rdev != q->st_rdev || p->st_blocks != q->st_blocks)
			fail_msg("%s: %s: attributes differ (ino %llu/%llu mode %o/%o nlink %u/%u "
				 "size %lld/%lld blocks %lld/%lld)",
				 what, x->t_path, (unsigned long long)p->st_ino,
				 (unsigned long long)q->st_ino, p->st_mode, q->st_mode,
				 (unsigned)p->st_nlink, (unsigned)q->st_nlink, (long long)p->st_size,
				 (long long)q->st_size, (long long)p->st_blocks, (long long)q->st_blocks);
		if (p->st_mtim.tv_sec != q->st_mtim.tv_sec || p->st_mtim.tv_nsec != q->st_mtim.tv_nsec ||
		    p->st_ctim.tv_sec != q->st_ctim.tv_sec || p->st_ctim.tv_nsec != q->st_ctim.tv_nsec)
			fail_msg("%s: %s: mtime or ctime differ", what, x->t_path);
		if (x->t_hash != y->t_hash)
			fail_msg("%s: %s: contents differ", what, x->t_path);
		if (x->t_xhash != y->t_xhash)
			fail_msg("%s: %s: extended attributes differ", what, x->t_path);
	}
	if (a->s_bfree != b->s_bfree)
		fail_msg("%s: free blocks %llu vs %llu", what, (unsigned long long)a->s_bfree,
			 (unsigned long long)b->s_bfree);
}

#endif

/*
 * names.c - which names of which directories the kernel may have cached
 * (positive and negative dentries we replied with), so that when another
 * node takes a directory's glock, every one of them is invalidated
 * (fuse_lowlevel_notify_inval_entry) before the glock leaves this node.
 *
 * Also where the kernel has each directory: a directory has at most one
 * dentry per kernel inode, and handing it out under another parent would
 * make the kernel move that dentry under trylocks, or fail with ESTALE
 * (nodeids.c); names_dir_at tells the caller when it must hand out a new
 * node id instead.
 *
 * Only kept with a cluster lock module: one node alone never needs it.
 *
 * Invariants (nm_lock):
 *  (1) until names_sets_off (the kernel takes an epoch: main.c), a name
 *      the kernel got from us since the directory's last invalidation is
 *      in the set of that directory (duplicates allowed);
 *  (2) names_take empties the set it returns;
 *  (3) if the kernel has a dentry of directory D under D's current node
 *      id, it is at the place recorded for D (the kernel got D there
 *      from a lookup or mkdir reply, or moved it there in a rename of this
 *      node), or D's place is unknown; each (parent, name) is the place of
 *      at most one directory.
 */
#include <stdlib.h>
#include <string.h>

#include "names.h"

#define NM_BUCKETS 4096

struct nm_dir {
	uint64_t nd_ino;
	char **nd_names;
	size_t nd_count, nd_cap;
	uint64_t *nd_hashes; /* open addressing over name hashes, dedup */
	size_t nd_hcap;
	struct nm_dir *nd_next;
};

/* Where the kernel has directory nl_ino: (nl_parent, nl_name), or an
 * unknown place (nl_parent 0, nl_name NULL; not in by_place). */
struct nm_loc {
	uint64_t nl_ino;
	uint64_t nl_parent;
	uint64_t nl_hash; /* of nl_name */
	char *nl_name;
	struct nm_loc *nl_inext; /* in nm.by_ino */
	struct nm_loc *nl_pnext; /* in nm.by_place */
};

static struct {
	pthread_mutex_t lock;
	struct nm_dir *buckets[NM_BUCKETS];
	struct nm_loc *by_ino[NM_BUCKETS];
	struct nm_loc *by_place[NM_BUCKETS];
	int on;
	int sets_off; /* atomic: names_note keeps nothing (names_sets_off) */
} nm = {.lock = PTHREAD_MUTEX_INITIALIZER};

void names_enable(void)
{
	nm.on = 1;
}

int names_enabled(void)
{
	return nm.on;
}

void names_sets_off(void)
{
	__atomic_store_n(&nm.sets_off, 1, __ATOMIC_RELAXED);
}

static uint64_t hash_name(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 1099511628211ull;
	return h | 1; /* 0 marks an empty slot */
}

/* nm.lock held: is h new to d?  (records it) */
static int hash_add(struct nm_dir *d, uint64_t h)
{
	if ((d->nd_count + 1) * 2 > d->nd_hcap) {
		size_t cap = d->nd_hcap ? d->nd_hcap * 2 : 16;
		uint64_t *n = calloc(cap, sizeof(*n));
		if (!n)
			return 1; /* keep a duplicate rather than lose a name */
		for (size_t i = 0; i < d->nd_hcap; i++) {
			uint64_t v = d->nd_hashes[i];
			if (!v)
				continue;
			size_t k = v & (cap - 1);
			while (n[k])
				k = (k + 1) & (cap - 1);
			n[k] = v;
		}
		free(d->nd_hashes);
		d->nd_hashes = n;
		d->nd_hcap = cap;
	}
	size_t k = h & (d->nd_hcap - 1);
	while (d->nd_hashes[k]) {
		if (d->nd_hashes[k] == h)
			return 0;
		k = (k + 1) & (d->nd_hcap - 1);
	}
	d->nd_hashes[k] = h;
	return 1;
}

void names_note(uint64_t dir, const char *name)
{
	struct nm_dir **pp, *d;

	if (!nm.on || __atomic_load_n(&nm.sets_off, __ATOMIC_RELAXED))
		return;
	pthread_mutex_lock(&nm.lock);
	pp = &nm.buckets[dir % NM_BUCKETS];
	for (d = *pp; d && d->nd_ino != dir; d = d->nd_next)
		;
	if (!d) {
		d = calloc(1, sizeof(*d));
		if (!d)
			goto out;
		d->nd_ino = dir;
		d->nd_next = *pp;
		*pp = d;
	}
	if (!hash_add(d, hash_name(name)))
		goto out;
	if (d->nd_count == d->nd_cap) {
		size_t cap = d->nd_cap ? d->nd_cap * 2 : 8;
		char **n = realloc(d->nd_names, cap * sizeof(*n));
		if (!n)
			goto out;
		d->nd_names = n;
		d->nd_cap = cap;
	}
	d->nd_names[d->nd_count] = strdup(name);
	if (d->nd_names[d->nd_count])
		d->nd_count++;
out:
	pthread_mutex_unlock(&nm.lock);
}

size_t names_take(uint64_t dir, char ***out)
{
	struct nm_dir **pp, *d;
	size_t n = 0;

	*out = NULL;
	if (!nm.on)
		return 0;
	pthread_mutex_lock(&nm.lock);
	for (pp = &nm.buckets[dir % NM_BUCKETS]; *pp && (*pp)->nd_ino != dir; pp = &(*pp)->nd_next)
		;
	d = *pp;
	if (d) {
		*pp = d->nd_next;
		*out = d->nd_names;
		n = d->nd_count;
		free(d->nd_hashes);
		free(d);
	}
	pthread_mutex_unlock(&nm.lock);
	return n;
}

static size_t place_slot(uint64_t parent, uint64_t hash)
{
	return (size_t)((parent * 0x9e3779b97f4a7c15ull) ^ hash) % NM_BUCKETS;
}

/* nm.lock held: the location (parent, name) or NULL; *pp its link */
static struct nm_loc *loc_at(uint64_t parent, const char *name, uint64_t hash,
			     struct nm_loc ***pp)
{
	struct nm_loc **p = &nm.by_place[place_slot(parent, hash)];

	for (; *p; p = &(*p)->nl_pnext)
		if ((*p)->nl_parent == parent && (*p)->nl_hash == hash &&
		    !strcmp((*p)->nl_name, name))
			break;
	*pp = p;
	return *p;
}

/* nm.lock held: l's place is no longer known (it stays in by_ino) */
static void loc_unplace(struct nm_loc *l)
{
	struct nm_loc **p;

	if (!l->nl_parent)
		return;
	for (p = &nm.by_place[place_slot(l->nl_parent, l->nl_hash)]; *p != l; p = &(*p)->nl_pnext)
		;
	*p = l->nl_pnext;
	free(l->nl_name);
	l->nl_name = NULL;
	l->nl_parent = 0;
}

/* nm.lock held: put l (unplaced) at (parent, name), or leave its place
 * unknown without memory (names_dir_at then assumes the worst) */
static void loc_place(struct nm_loc *l, uint64_t parent, const char *name, uint64_t hash)
{
	size_t s = place_slot(parent, hash);

	l->nl_name = strdup(name);
	if (!l->nl_name)
		return;
	l->nl_parent = parent;
	l->nl_hash = hash;
	l->nl_pnext = nm.by_place[s];
	nm.by_place[s] = l;
}

/* nm.lock held: forget l (unplaced) altogether */
static void loc_free(struct nm_loc *l)
{
	struct nm_loc **p;

	for (p = &nm.by_ino[l->nl_ino % NM_BUCKETS]; *p != l; p = &(*p)->nl_inext)
		;
	*p = l->nl_inext;
	free(l);
}

int names_dir_at(uint64_t ino, uint64_t parent, const char *name)
{
	uint64_t h = hash_name(name);
	struct nm_loc *l, *other, **pp;
	int moved = 0;

	if (!nm.on)
		return 0;
	pthread_mutex_lock(&nm.lock);
	for (l = nm.by_ino[ino % NM_BUCKETS]; l && l->nl_ino != ino; l = l->nl_inext)
		;
	other = loc_at(parent, name, h, &pp);
	if (l && other == l)
		goto out; /* where the kernel has it already */
	/*
	 * The name held another directory: the kernel drops that dentry, but
	 * one still in use stays that directory's, under this parent, so its
	 * place becomes unknown rather than forgotten.
	 */
	if (other)
		loc_unplace(other);
	if (l) {
		moved = l->nl_parent != parent; /* an unknown place too */
		loc_unplace(l);
	} else {
		l = calloc(1, sizeof(*l));
		if (!l) {
			moved = 1; /* no memory: assume the worst */
			goto out;
		}
		l->nl_ino = ino;
		l->nl_inext = nm.by_ino[ino % NM_BUCKETS];
		nm.by_ino[ino % NM_BUCKETS] = l;
	}
	loc_place(l, parent, name, h);
out:
	pthread_mutex_unlock(&nm.lock);
	return moved;
}

void names_dir_moved(uint64_t parent, const char *name, uint64_t newparent,
		     const char *newname, int exchange)
{
	uint64_t h = hash_name(name), nh = hash_name(newname);
	struct nm_loc *src, *dst, **pp;

	if (!nm.on)
		return;
	pthread_mutex_lock(&nm.lock);
	src = loc_at(parent, name, h, &pp);
	dst = loc_at(newparent, newname, nh, &pp);
	if (src)
		loc_unplace(src);
	if (dst)
		loc_unplace(dst);
	if (src)
		loc_place(src, newparent, newname, nh);
	if (dst && exchange)
		loc_place(dst, parent, name, h);
	else if (dst)
		loc_free(dst); /* replaced: that directory is gone */
	pthread_mutex_unlock(&nm.lock);
}

void names_dir_gone(uint64_t parent, const char *name)
{
	struct nm_loc *l, **pp;

	if (!nm.on)
		return;
	pthread_mutex_lock(&nm.lock);
	l = loc_at(parent, name, hash_name(name), &pp);
	if (l) {
		loc_unplace(l);
		loc_free(l);
	}
	pthread_mutex_unlock(&nm.lock);
}

void names_forget_all(void)
{
	pthread_mutex_lock(&nm.lock);
	for (size_t b = 0; b < NM_BUCKETS; b++) {
		struct nm_loc *l = nm.by_ino[b], *n;
		for (; l; l = n) {
			n = l->nl_inext;
			free(l->nl_name);
			free(l);
		}
		nm.by_ino[b] = nm.by_place[b] = NULL;
	}
	for (size_t b = 0; b < NM_BUCKETS; b++) {
		struct nm_dir *d = nm.buckets[b], *n;
		for (; d; d = n) {
			n = d->nd_next;
			for (size_t i = 0; i < d->nd_count; i++)
				free(d->nd_names[i]);
			free(d->nd_names);
			free(d->nd_hashes);
			free(d);
		}
		nm.buckets[b] = NULL;
	}
	pthread_mutex_unlock(&nm.lock);
}

/*
 * nodeids.c - the FUSE node ids of directories that another node moved
 * (cluster mounts only).
 *
 * A directory goes to the kernel with its inode number as node id, and the
 * kernel keeps one dentry for it.  When this node finds the directory under
 * another parent than the one its kernel has it under (another node renamed
 * it; names.c knows where the kernel has it), handing it out under the same
 * node id would make the kernel move that dentry (d_splice_alias ->
 * __d_unalias), which takes the rename mutex and the old parent's lock with
 * trylocks and fails with ESTALE when another request of this mount holds
 * either: a rename of this node holds the rename mutex while it looks its
 * names up, and a dentry that a path walk or an open directory still
 * holds cannot be dropped first.  So the directory gets a new node id, an
 * *incarnation*: the kernel sees a new inode with no dentry, and keeps the
 * old one (its dentry invalidated by the glock demotion that came with the
 * rename) until it forgets it.  Every node id of a directory stands for the
 * same shoal inode, in every request.
 *
 * Invariants (nid.lock):
 *  (1) an incarnation's node id has NID_BIT set, is never reused, and maps
 *      to one inode; node ids without NID_BIT are inode numbers;
 *  (2) an incarnation stays in the table while the kernel holds references
 *      to it (ni_refs: entries replied minus those forgotten) or while it
 *      is its inode's current one;
 *  (3) an inode's current node id is its newest incarnation, or its inode
 *      number if it has none.
 */
#include <stdlib.h>

#include "nodeids.h"

#define NID_BUCKETS 1024

struct nid {
	uint64_t ni_id;
	uint64_t ni_ino;
	uint64_t ni_refs;
	int ni_current;
	struct nid *ni_idnext;  /* in nid.by_id */
	struct nid *ni_inonext; /* in nid.by_ino: every incarnation of ni_ino */
};

static struct {
	pthread_mutex_t lock;
	struct nid *by_id[NID_BUCKETS];
	struct nid *by_ino[NID_BUCKETS];
	uint64_t next;
	int on;
} nid = {.lock = PTHREAD_MUTEX_INITIALIZER};

void nid_enable(void)
{
	nid.on = 1;
}

static size_t slot(uint64_t v)
{
	return (size_t)((v * 0x9e3779b97f4a7c15ull) >> 32) % NID_BUCKETS;
}

/* nid.lock held */
static struct nid *find_id(uint64_t id)
{
	struct nid *n = nid.by_id[slot(id)];
	while (n && n->ni_id != id)
		n = n->ni_idnext;
	return n;
}

/* nid.lock held */
static struct nid *find_current(uint64_t ino)
{
	struct nid *n = nid.by_ino[slot(ino)];
	while (n && !(n->ni_ino == ino && n->ni_current))
		n = n->ni_inonext;
	return n;
}

/* nid.lock held: n leaves the table (2) */
static void drop(struct nid *n)
{
	struct nid **pp;

	for (pp = &nid.by_id[slot(n->ni_id)]; *pp != n; pp = &(*pp)->ni_idnext)
		;
	*pp = n->ni_idnext;
	for (pp = &nid.by_ino[slot(n->ni_ino)]; *pp != n; pp = &(*pp)->ni_inonext)
		;
	*pp = n->ni_inonext;
	free(n);
}

uint64_t nid_ino(uint64_t id)
{
	struct nid *n;
	uint64_t ino;

	if (!(id & NID_BIT))
		return id;
	pthread_mutex_lock(&nid.lock);
	n = find_id(id);
	ino = n ? n->ni_ino : 0; /* 0: no such inode (-ESTALE) */
	pthread_mutex_unlock(&nid.lock);
	return ino;
}

uint64_t nid_hand_out(uint64_t ino, int fresh)
{
	struct nid *cur, *n;
	uint64_t id = ino;

	if (!nid.on)
		return ino;
	pthread_mutex_lock(&nid.lock);
	cur = find_current(ino);
	if (fresh) {
		n = calloc(1, sizeof(*n));
		if (!n)
			goto out_current; /* the kernel may answer ESTALE: no worse */
		n->ni_id = NID_BIT | ++nid.next;
		n->ni_ino = ino;
		n->ni_current = 1;
		n->ni_idnext = nid.by_id[slot(n->ni_id)];
		nid.by_id[slot(n->ni_id)] = n;
		n->ni_inonext = nid.by_ino[slot(ino)];
		nid.by_ino[slot(ino)] = n;
		if (cur) {
			cur->ni_current = 0;
			if (!cur->ni_refs)
				drop(cur);
		}
		cur = n;
	}
out_current:
	if (cur) {
		cur->ni_refs++;
		id = cur->ni_id;
	}
	pthread_mutex_unlock(&nid.lock);
	return id;
}

void nid_forget(uint64_t id, uint64_t count)
{
	struct nid *n;

	if (!(id & NID_BIT))
		return;
	pthread_mutex_lock(&nid.lock);
	n = find_id(id);
	if (n) {
		n->ni_refs = n->ni_refs > count ? n->ni_refs - count : 0;
		if (!n->ni_refs && !n->ni_current)
			drop(n);
	}
	pthread_mutex_unlock(&nid.lock);
}

size_t nid_list(uint64_t ino, uint64_t *out, size_t max)
{
	size_t k = 0;

	if (!nid.on)
		return 0;
	pthread_mutex_lock(&nid.lock);
	for (struct nid *n = nid.by_ino[slot(ino)]; n && k < max; n = n->ni_inonext)
		if (n->ni_ino == ino)
			out[k++] = n->ni_id;
	pthread_mutex_unlock(&nid.lock);
	return k;
}

void nid_forget_all(void)
{
	pthread_mutex_lock(&nid.lock);
	for (size_t b = 0; b < NID_BUCKETS; b++) {
		struct nid *n = nid.by_id[b], *next;
		for (; n; n = next) {
			next = n->ni_idnext;
			free(n);
		}
		nid.by_id[b] = nid.by_ino[b] = NULL;
	}
	pthread_mutex_unlock(&nid.lock);
}

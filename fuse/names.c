/*
 * names.c - which names of which directories the kernel may have cached
 * (positive and negative dentries we replied with), so that when another
 * node takes a directory's glock, every one of them is invalidated
 * (fuse_lowlevel_notify_inval_entry) before the glock leaves this node.
 *
 * Only kept with a cluster lock module: one node alone never needs it.
 *
 * Invariants (nm_lock):
 *  (1) a name the kernel got from us since the directory's last
 *      invalidation is in the set of that directory (duplicates allowed);
 *  (2) names_take empties the set it returns.
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

static struct {
	pthread_mutex_t lock;
	struct nm_dir *buckets[NM_BUCKETS];
	int on;
} nm = {.lock = PTHREAD_MUTEX_INITIALIZER};

void names_enable(void)
{
	nm.on = 1;
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

	if (!nm.on)
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

void names_forget_all(void)
{
	pthread_mutex_lock(&nm.lock);
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

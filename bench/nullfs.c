/*
 * nullfs.c - the FUSE floor of the `meta` and `fstest` workloads: a FUSE
 * daemon that keeps names and file bytes in memory and does nothing else
 * (fsync is a no-op: nothing is durable), mounted with shoal-mount's FUSE
 * settings (low-level API, multithreaded loop, the same entry and attribute
 * timeouts as lock=nolock, keep_cache, noflush).  bench/run.sh runs the
 * workloads on it as the `fuse-null` variant, so each table shows how much
 * of shoal's time is the kernel's request round trips, which no FUSE
 * filesystem avoids.
 *
 *	nullfs MOUNTPOINT        (foreground; unmount with fusermount3 -u)
 *
 * Invariants:
 *  (1) every request gets exactly one reply;
 *  (2) an inode lives while the kernel holds a lookup reference or it has
 *      a name: it is freed at the forget that drops its last reference
 *      after unlink;
 *  (3) one mutex guards the whole table (it is a floor, not a filesystem).
 */
#define FUSE_USE_VERSION 312
#include <errno.h>
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TIMEOUT 86400.0
#define NBUCKET (1u << 20)

struct node {
	uint64_t n_ino;
	uint64_t n_parent;   /* 0: no name (unlinked) */
	char *n_name;
	mode_t n_mode;
	uint64_t n_lookups;  /* kernel references */
	uint8_t *n_data;     /* file bytes */
	uint64_t n_size, n_cap;
	struct node *n_hnext; /* name hash chain */
	struct node *n_inext; /* ino hash chain */
};

static pthread_mutex_t nf_lock = PTHREAD_MUTEX_INITIALIZER;
static struct node *nf_names[NBUCKET], *nf_inos[NBUCKET];
static uint64_t nf_next_ino = 2;

static uint32_t name_hash(uint64_t parent, const char *name)
{
	uint32_t h = 2166136261u ^ (uint32_t)parent;
	for (; *name; name++)
		h = (h ^ (uint8_t)*name) * 16777619u;
	return h & (NBUCKET - 1);
}

static struct node *by_ino(uint64_t ino)
{
	struct node *n = nf_inos[ino & (NBUCKET - 1)];
	while (n && n->n_ino != ino)
		n = n->n_inext;
	return n;
}

static struct node *by_name(uint64_t parent, const char *name)
{
	struct node *n = nf_names[name_hash(parent, name)];
	while (n && (n->n_parent != parent || strcmp(n->n_name, name)))
		n = n->n_hnext;
	return n;
}

static void unhash_name(struct node *n)
{
	struct node **pp = &nf_names[name_hash(n->n_parent, n->n_name)];
	while (*pp != n)
		pp = &(*pp)->n_hnext;
	*pp = n->n_hnext;
	n->n_parent = 0;
}

static void free_node(struct node *n)
{
	struct node **pp = &nf_inos[n->n_ino & (NBUCKET - 1)];
	while (*pp != n)
		pp = &(*pp)->n_inext;
	*pp = n->n_inext;
	free(n->n_name);
	free(n->n_data);
	free(n);
}

static void fill_attr(const struct node *n, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = n->n_ino;
	st->st_mode = n->n_mode;
	st->st_nlink = S_ISDIR(n->n_mode) ? 2 : 1;
	st->st_uid = getuid();
	st->st_gid = getgid();
	st->st_blksize = 4096;
	st->st_size = (off_t)n->n_size;
	st->st_blocks = (blkcnt_t)((n->n_size + 511) / 512);
}

static void reply_node(fuse_req_t req, struct node *n)
{
	struct fuse_entry_param e;

	memset(&e, 0, sizeof(e));
	e.ino = n->n_ino;
	fill_attr(n, &e.attr);
	e.attr_timeout = e.entry_timeout = TIMEOUT;
	n->n_lookups++;
	fuse_reply_entry(req, &e);
}

static void nf_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e;
	struct node *n;

	pthread_mutex_lock(&nf_lock);
	n = by_name(parent, name);
	if (n) {
		reply_node(req, n);
	} else {
		memset(&e, 0, sizeof(e));
		e.entry_timeout = TIMEOUT;
		fuse_reply_entry(req, &e);
	}
	pthread_mutex_unlock(&nf_lock);
}

static struct node *make(fuse_ino_t parent, const char *name, mode_t mode, int *err)
{
	struct node *n;

	if (!by_ino(parent)) {
		*err = ENOENT;
		return NULL;
	}
	if (by_name(parent, name)) {
		*err = EEXIST;
		return NULL;
	}
	n = calloc(1, sizeof(*n));
	if (!n || !(n->n_name = strdup(name))) {
		free(n);
		*err = ENOMEM;
		return NULL;
	}
	n->n_ino = nf_next_ino++;
	n->n_parent = parent;
	n->n_mode = mode;
	n->n_hnext = nf_names[name_hash(parent, name)];
	nf_names[name_hash(parent, name)] = n;
	n->n_inext = nf_inos[n->n_ino & (NBUCKET - 1)];
	nf_inos[n->n_ino & (NBUCKET - 1)] = n;
	return n;
}

static void nf_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	struct node *n;
	int err;

	pthread_mutex_lock(&nf_lock);
	n = make(parent, name, S_IFDIR | (mode & 07777), &err);
	if (n)
		reply_node(req, n);
	else
		fuse_reply_err(req, err);
	pthread_mutex_unlock(&nf_lock);
}

static void nf_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		      struct fuse_file_info *fi)
{
	struct fuse_entry_param e;
	struct node *n;
	int err;

	pthread_mutex_lock(&nf_lock);
	n = make(parent, name, S_IFREG | (mode & 07777), &err);
	if (!n) {
		pthread_mutex_unlock(&nf_lock);
		fuse_reply_err(req, err);
		return;
	}
	memset(&e, 0, sizeof(e));
	e.ino = n->n_ino;
	fill_attr(n, &e.attr);
	e.attr_timeout = e.entry_timeout = TIMEOUT;
	n->n_lookups++;
	pthread_mutex_unlock(&nf_lock);
	fi->keep_cache = 1;
	fi->noflush = 1;
	fuse_reply_create(req, &e, fi);
}

static void remove_name(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct node *n;

	pthread_mutex_lock(&nf_lock);
	n = by_name(parent, name);
	if (n) {
		unhash_name(n);
		if (!n->n_lookups)
			free_node(n);
	}
	pthread_mutex_unlock(&nf_lock);
	fuse_reply_err(req, n ? 0 : ENOENT);
}

static void forget_one(fuse_ino_t ino, uint64_t nlookup)
{
	struct node *n = by_ino(ino);

	if (!n || ino == FUSE_ROOT_ID)
		return;
	n->n_lookups -= nlookup < n->n_lookups ? nlookup : n->n_lookups;
	if (!n->n_lookups && !n->n_parent)
		free_node(n);
}

static void nf_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	pthread_mutex_lock(&nf_lock);
	forget_one(ino, nlookup);
	pthread_mutex_unlock(&nf_lock);
	fuse_reply_none(req);
}

static void nf_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *f)
{
	pthread_mutex_lock(&nf_lock);
	for (size_t i = 0; i < count; i++)
		forget_one(f[i].ino, f[i].nlookup);
	pthread_mutex_unlock(&nf_lock);
	fuse_reply_none(req);
}

static void nf_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct node *n;
	struct stat st;

	pthread_mutex_lock(&nf_lock);
	n = by_ino(ino);
	if (n)
		fill_attr(n, &st);
	pthread_mutex_unlock(&nf_lock);
	if (n)
		fuse_reply_attr(req, &st, TIMEOUT);
	else
		fuse_reply_err(req, ENOENT);
}

/* Grow n to hold size bytes (zeros); 0 or ENOMEM.  nf_lock held. */
static int set_size(struct node *n, uint64_t size)
{
	if (size > n->n_cap) {
		uint64_t cap = n->n_cap ? n->n_cap : 65536;
		while (cap < size)
			cap *= 2;
		uint8_t *d = realloc(n->n_data, cap);
		if (!d)
			return ENOMEM;
		memset(d + n->n_cap, 0, cap - n->n_cap);
		n->n_data = d;
		n->n_cap = cap;
	}
	if (size < n->n_size)
		memset(n->n_data + size, 0, n->n_size - size);
	n->n_size = size;
	return 0;
}

static void nf_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	struct node *n;
	int err = ENOENT;

	pthread_mutex_lock(&nf_lock);
	n = by_ino(ino);
	if (n && (uint64_t)off + size > n->n_size)
		err = set_size(n, (uint64_t)off + size);
	else if (n)
		err = 0;
	if (!err)
		memcpy(n->n_data + off, buf, size);
	pthread_mutex_unlock(&nf_lock);
	if (err)
		fuse_reply_err(req, err);
	else
		fuse_reply_write(req, size);
}

static void nf_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	struct node *n;
	uint8_t *copy = NULL;
	size_t len = 0;

	pthread_mutex_lock(&nf_lock);
	n = by_ino(ino);
	if (n && (uint64_t)off < n->n_size) {
		len = n->n_size - (uint64_t)off < size ? (size_t)(n->n_size - (uint64_t)off) : size;
		copy = malloc(len);
		if (copy)
			memcpy(copy, n->n_data + off, len);
	}
	pthread_mutex_unlock(&nf_lock);
	if (!n)
		fuse_reply_err(req, ENOENT);
	else if (len && !copy)
		fuse_reply_err(req, ENOMEM);
	else
		fuse_reply_buf(req, (const char *)copy, len);
	free(copy);
}

static void nf_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		       struct fuse_file_info *fi)
{
	struct node *n;
	struct stat st;
	int err = ENOENT;

	pthread_mutex_lock(&nf_lock);
	n = by_ino(ino);
	if (n) {
		err = to_set & FUSE_SET_ATTR_SIZE ? set_size(n, (uint64_t)attr->st_size) : 0;
		if (!err && (to_set & FUSE_SET_ATTR_MODE))
			n->n_mode = (n->n_mode & S_IFMT) | (attr->st_mode & 07777);
		fill_attr(n, &st);
	}
	pthread_mutex_unlock(&nf_lock);
	if (err)
		fuse_reply_err(req, err);
	else
		fuse_reply_attr(req, &st, TIMEOUT);
}

static void nf_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	fi->keep_cache = 1;
	fi->noflush = 1;
	fuse_reply_open(req, fi);
}

static void nf_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	fuse_reply_err(req, 0); /* nothing is durable here: the round trip alone */
}

static void nf_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	fuse_reply_err(req, 0);
}

static void nf_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	fuse_reply_open(req, fi);
}

static void nf_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	fuse_reply_buf(req, NULL, 0); /* names are not listed: not in the workload */
}

static const struct fuse_lowlevel_ops nf_ops = {
	.lookup = nf_lookup,
	.forget = nf_forget,
	.forget_multi = nf_forget_multi,
	.getattr = nf_getattr,
	.mkdir = nf_mkdir,
	.unlink = remove_name,
	.rmdir = remove_name,
	.create = nf_create,
	.open = nf_open,
	.read = nf_read,
	.write = nf_write,
	.setattr = nf_setattr,
	.fsync = nf_fsync,
	.release = nf_release,
	.opendir = nf_opendir,
	.readdir = nf_readdir,
	.releasedir = nf_release,
};

int main(int argc, char **argv)
{
	char *fargv[] = { argv[0], "-o", "default_permissions", NULL };
	struct fuse_args args = FUSE_ARGS_INIT(3, fargv);
	struct fuse_loop_config *cfg;
	struct fuse_session *se;
	struct node *root;
	int ret;

	if (argc != 2) {
		fprintf(stderr, "usage: nullfs MOUNTPOINT\n");
		return 2;
	}
	root = calloc(1, sizeof(*root));
	if (!root)
		return 1;
	root->n_ino = FUSE_ROOT_ID;
	root->n_mode = S_IFDIR | 0755;
	nf_inos[FUSE_ROOT_ID] = root;
	se = fuse_session_new(&args, &nf_ops, sizeof(nf_ops), NULL);
	if (!se || fuse_session_mount(se, argv[1]) != 0) {
		fprintf(stderr, "nullfs: cannot mount on %s\n", argv[1]);
		return 1;
	}
	fuse_set_signal_handlers(se);
	cfg = fuse_loop_cfg_create();
	fuse_loop_cfg_set_clone_fd(cfg, 0);
	ret = fuse_session_loop_mt(se, cfg);
	fuse_loop_cfg_destroy(cfg);
	fuse_remove_signal_handlers(se);
	fuse_session_unmount(se);
	fuse_session_destroy(se);
	return ret ? 1 : 0;
}

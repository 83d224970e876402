/*
 * clusterbench.c - the `cluster` workload of bench/run.sh (issue 22, "More
 * nodes, less work done"): one worker process per node, all released at
 * once, each doing a fixed mix of operations for a fixed time; ops counted
 * per node; then (check) everything the workers did is read back through
 * the first and the last node's mount.
 *
 *	clusterbench prep MNT
 *	clusterbench run private|mixed SECONDS GRACE STATE MNT...
 *	clusterbench check private|mixed STATE MNT...
 *
 * prep makes, through MNT, the shared objects of the mixed flavour: the
 * directory shared/, the empty files big0, big1 and log.
 *
 * run starts one worker per MNT argument: worker i is node i and works
 * through the i-th mountpoint (N nodes' mounts of one filesystem, or one
 * mount once for the single-node reference).  Before the release each
 * worker makes its own directory own-I and opens what it appends to (not
 * timed).  Then, until SECONDS have passed, it runs its schedule, one
 * operation at a time, the same for every node:
 *
 *   private: create, rename, unlink
 *   mixed:   create, big, rename, shared, unlink, log
 *
 *   create  own-I/fK created (O_CREAT|O_EXCL), 0.5-4 KiB written, fsync,
 *           close (K counts the node's creates)
 *   rename  own-I/fK -> own-I/rK, of the file just created
 *   unlink  own-I/rJ, the oldest renamed file, once more than WINDOW
 *           renamed files are there (before that the slot is skipped and
 *           counts nothing)
 *   big     one 64 KiB write to big0 or big1 (alternately), both opened
 *           O_APPEND once before the release
 *   shared  shared/nI-K created (O_CREAT|O_EXCL), 128 bytes written, close
 *   log     one 64-byte record write to log, opened O_APPEND before the
 *           release
 *
 * Every operation is one unit of "ops".  The operation in flight when
 * SECONDS pass is finished and counted.  A worker that has not reported
 * GRACE seconds after SECONDS fails the run (its node is named, and every
 * worker is killed).  STATE gets what each node did (one line per node:
 * its count of each kind of operation), for check.
 *
 * Output, one "name value" per line:
 *
 *	nodes N
 *	seconds      SECONDS
 *	wall_s       release to the last worker's report
 *	ops          operations of all nodes
 *	ops_s        ops / wall_s
 *	nodeI_ops_s  node I's operations / its own time (release to the end
 *	             of its last operation)
 *	node_min_ops_s, node_max_ops_s, node_ratio (min / max)
 *	KIND_ops     operations of each kind, all nodes (create rename unlink
 *	             big shared log)
 *	KIND_max_ms  the slowest single operation of that kind, any node
 *
 * check reads, through each MNT (run's first and last, after the counters
 * of the run were taken), what the nodes of STATE did, and prints
 * checked_files, checked_chunks, checked_records (through the first MNT)
 * and check_errors; a wrong byte or name exits 1.  Each own-I holds
 * exactly the files the node left there, each with its contents; shared/
 * holds exactly every file every node made, with its contents; big0 and
 * big1 are whole 64 KiB chunks, each intact, each node's chunks in the
 * order it wrote them and all of them; log is whole records, each intact,
 * each node's records in order, every acknowledged one exactly once.
 *
 * Invariants:
 *  (1) no worker starts its schedule before every worker is set up and
 *      waiting (a pipe closed by the parent releases them);
 *  (2) every call is checked: a failed or short operation prints
 *      "clusterbench: node I: what name: strerror" and fails the run, so no
 *      rate is ever reported for work that was not done;
 *  (3) what a node did is a function of (node, its counters) alone, so the
 *      check needs nothing but the counters each worker reports.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PROG "clusterbench"
#include "benchutil.h"

#define MAXNODES 64
#define WINDOW 16	     /* renamed files a node keeps in own-I */
#define CHUNK (64 * 1024)    /* one big-file append */
#define REC 64		     /* one log record */
#define SHARED_LEN 128	     /* one shared-directory file */
#define NAME_LEN 48

enum op_kind { OP_CREATE, OP_RENAME, OP_UNLINK, OP_BIG, OP_SHARED, OP_LOG, OP_NKINDS };
static const char *const kind_name[OP_NKINDS] = { "create", "rename", "unlink", "big", "shared", "log" };

static const enum op_kind sched_private[] = { OP_CREATE, OP_RENAME, OP_UNLINK };
static const enum op_kind sched_mixed[] = { OP_CREATE, OP_BIG, OP_RENAME, OP_SHARED, OP_UNLINK, OP_LOG };

/* What one worker reports to the parent through its pipe. */
struct result {
	uint64_t r_count[OP_NKINDS]; /* operations of each kind done */
	double r_max[OP_NKINDS];     /* the slowest of each kind, seconds */
	double r_elapsed;	     /* release to the end of its last operation */
};

static int node_id; /* the worker's node, for its error messages */

static void node_die(const char *what, const char *name)
{
	fprintf(stderr, PROG ": node %d: %s %s: %s\n", node_id, what, name ? name : "", strerror(errno));
	exit(1);
}

/* Check failures: one line each, counted, the run fails at the end. */
static long bad;

static void badf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void badf(const char *fmt, ...)
{
	va_list ap;

	if (++bad > 20)
		return;
	va_start(ap, fmt);
	fputs(PROG ": check: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

/* --- contents: each a function of (node, number) ------------------------- */

static size_t own_len(uint64_t k)
{
	return 512 + (k % 8) * 512;
}

/* Bytes of a small file of node n, number k, tag 'f' (own) or 's' (shared). */
static void small_fill(char *buf, size_t len, char tag, int n, uint64_t k)
{
	char head[NAME_LEN];
	int hl = snprintf(head, sizeof(head), "%c%d.%llu|", tag, n, (unsigned long long)k);
	size_t i;

	for (i = 0; i < len; i++)
		buf[i] = head[i % (size_t)hl];
}

/* Word w of big-file chunk seq of node n; word 0 names both. */
static uint64_t chunk_word(int n, uint64_t seq, uint64_t w)
{
	return ((uint64_t)n << 48) ^ (seq << 16) ^ w;
}

static void chunk_fill(uint64_t *buf, int n, uint64_t seq)
{
	uint64_t w;

	for (w = 0; w < CHUNK / 8; w++)
		buf[w] = chunk_word(n, seq, w);
}

static uint32_t rec_hash(int n, uint64_t seq)
{
	uint64_t x = ((uint64_t)n << 40) ^ seq ^ 0x9e3779b97f4a7c15ull;

	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return (uint32_t)(x ^ (x >> 31));
}

/* Log record seq of node n: "NNNN SSSSSSSSSSSS HHHHHHHH ....\n". */
static void rec_fill(char *r, int n, uint64_t seq)
{
	int l = snprintf(r, REC, "%04d %012llu %08x ", n, (unsigned long long)seq, rec_hash(n, seq));

	memset(r + l, '.', REC - 1 - (size_t)l);
	r[REC - 1] = '\n';
}

/* --- the worker ------------------------------------------------------------ */

static void write_all(int fd, const void *buf, size_t len, const char *what, const char *name)
{
	ssize_t w = write(fd, buf, len);

	if (w < 0)
		node_die(what, name);
	if ((size_t)w != len) {
		errno = EIO;
		node_die("short write:", name);
	}
}

static void worker(int n, const char *mnt, const enum op_kind *sched, size_t nsched, double seconds,
		   int ready_fd, int go_fd, int res_fd)
{
	uint64_t *chunk = malloc(CHUNK);
	char name[NAME_LEN], to[NAME_LEN], buf[4096], rec[REC];
	int top, own, shared = -1, big[2] = { -1, -1 }, log = -1, fd;
	uint64_t renamed = 0, unlinked = 0;
	struct result res;
	double t0, t, dt;
	size_t slot = 0;
	char c = 0;

	node_id = n;
	memset(&res, 0, sizeof(res));
	if (!chunk)
		node_die("malloc", NULL);
	top = open(mnt, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (top < 0)
		node_die("open", mnt);
	snprintf(name, sizeof(name), "own-%d", n);
	if (mkdirat(top, name, 0755) < 0)
		node_die("mkdir", name);
	own = openat(top, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (own < 0)
		node_die("open", name);
	if (nsched == sizeof(sched_mixed) / sizeof(sched_mixed[0])) {
		shared = openat(top, "shared", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		big[0] = openat(top, "big0", O_WRONLY | O_APPEND | O_CLOEXEC);
		big[1] = openat(top, "big1", O_WRONLY | O_APPEND | O_CLOEXEC);
		log = openat(top, "log", O_WRONLY | O_APPEND | O_CLOEXEC);
		if (shared < 0 || big[0] < 0 || big[1] < 0 || log < 0)
			node_die("open shared/, big0, big1, log in", mnt);
	}
	write_all(ready_fd, &c, 1, "write", "ready pipe");
	close(ready_fd);
	if (read(go_fd, &c, 1) < 0) /* 0: the parent closed it, go */
		node_die("read", "go pipe");
	close(go_fd);

	t0 = now();
	t = t0;
	while (t - t0 < seconds) {
		enum op_kind k = sched[slot++ % nsched];
		uint64_t i = res.r_count[k];
		size_t len;

		switch (k) {
		case OP_CREATE:
			snprintf(name, sizeof(name), "f%llu", (unsigned long long)i);
			len = own_len(i);
			small_fill(buf, len, 'f', n, i);
			fd = openat(own, name, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
			if (fd < 0)
				node_die("create", name);
			write_all(fd, buf, len, "write", name);
			if (fsync(fd) < 0)
				node_die("fsync", name);
			if (close(fd) < 0)
				node_die("close", name);
			break;
		case OP_RENAME:
			snprintf(name, sizeof(name), "f%llu", (unsigned long long)renamed);
			snprintf(to, sizeof(to), "r%llu", (unsigned long long)renamed);
			if (renameat(own, name, own, to) < 0)
				node_die("rename", name);
			renamed++;
			break;
		case OP_UNLINK:
			if (renamed - unlinked <= WINDOW)
				continue; /* nothing old enough yet: no operation */
			snprintf(name, sizeof(name), "r%llu", (unsigned long long)unlinked);
			if (unlinkat(own, name, 0) < 0)
				node_die("unlink", name);
			unlinked++;
			break;
		case OP_BIG:
			chunk_fill(chunk, n, i);
			write_all(big[i % 2], chunk, CHUNK, "append to", i % 2 ? "big1" : "big0");
			break;
		case OP_SHARED:
			snprintf(name, sizeof(name), "n%d-%llu", n, (unsigned long long)i);
			small_fill(buf, SHARED_LEN, 's', n, i);
			fd = openat(shared, name, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
			if (fd < 0)
				node_die("create shared/", name);
			write_all(fd, buf, SHARED_LEN, "write shared/", name);
			if (close(fd) < 0)
				node_die("close shared/", name);
			break;
		case OP_LOG:
			rec_fill(rec, n, i);
			write_all(log, rec, REC, "append to", "log");
			break;
		default:
			abort();
		}
		dt = now() - t;
		t += dt;
		res.r_count[k]++;
		if (dt > res.r_max[k])
			res.r_max[k] = dt;
	}
	res.r_elapsed = t - t0;
	if ((big[0] >= 0 && close(big[0]) < 0) || (big[1] >= 0 && close(big[1]) < 0) ||
	    (log >= 0 && close(log) < 0))
		node_die("close", "big0, big1 or log");
	write_all(res_fd, &res, sizeof(res), "write", "result pipe");
	exit(0);
}

/* --- the check ------------------------------------------------------------- */

/* Read all of dirfd/name, or NULL (told) if it cannot be read. */
static char *slurp(int dirfd, const char *name, const char *where, size_t *len)
{
	struct stat st;
	char *buf;
	size_t got = 0;
	ssize_t r;
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);

	if (fd < 0 || fstat(fd, &st) < 0) {
		badf("%s/%s: cannot open: %s", where, name, strerror(errno));
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf)
		die("malloc", NULL);
	while ((r = read(fd, buf + got, (size_t)st.st_size + 1 - got)) > 0)
		got += (size_t)r;
	if (r < 0)
		badf("%s/%s: read: %s", where, name, strerror(errno));
	if (got != (size_t)st.st_size)
		badf("%s/%s: read %zu bytes, stat says %lld", where, name, got, (long long)st.st_size);
	close(fd);
	*len = got;
	return buf;
}

/* The names in dirfd, sorted; *count of them. */
static int cmpstr(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static char **list_dir(int dirfd, size_t *count)
{
	int fd = dup(dirfd);
	DIR *d = fd < 0 ? NULL : fdopendir(fd);
	struct dirent *de;
	char **v = NULL;
	size_t n = 0, cap = 0;

	if (!d)
		die("opendir", NULL);
	rewinddir(d);
	while ((errno = 0, de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 64;
			v = realloc(v, cap * sizeof(*v));
			if (!v)
				die("realloc", NULL);
		}
		v[n] = strdup(de->d_name);
		if (!v[n++])
			die("strdup", NULL);
	}
	if (errno)
		die("readdir", NULL);
	closedir(d);
	if (n)
		qsort(v, n, sizeof(*v), cmpstr);
	*count = n;
	return v;
}

static void free_list(char **v, size_t n)
{
	while (n)
		free(v[--n]);
	free(v);
}

/* Does the sorted list hold name? */
static int in_list(char **v, size_t n, const char *name)
{
	return n && bsearch(&name, v, n, sizeof(*v), cmpstr);
}

/* One small file: present, with exactly its bytes. */
static void check_small(int dirfd, const char *where, const char *name, char tag, int n, uint64_t k,
			size_t want_len)
{
	char want[4096];
	size_t len;
	char *got = slurp(dirfd, name, where, &len);

	if (!got)
		return;
	small_fill(want, want_len, tag, n, k);
	if (len != want_len || memcmp(got, want, len))
		badf("%s/%s: %zu bytes, want %zu bytes of node %d's file %llu: contents differ", where, name, len,
		     want_len, n, (unsigned long long)k);
	free(got);
}

static void check_own(int top, const char *mnt, int n, const struct result *res, long *files)
{
	uint64_t created = res->r_count[OP_CREATE], renamed = res->r_count[OP_RENAME];
	uint64_t unlinked = res->r_count[OP_UNLINK], k;
	char where[4200], name[NAME_LEN], **v;
	size_t count, want = 0;
	int dirfd;

	snprintf(where, sizeof(where), "%s/own-%d", mnt, n);
	snprintf(name, sizeof(name), "own-%d", n);
	dirfd = openat(top, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0) {
		badf("%s: cannot open: %s", where, strerror(errno));
		return;
	}
	v = list_dir(dirfd, &count);
	/* the file created and not yet renamed, if the run ended between */
	if (created > renamed) {
		snprintf(name, sizeof(name), "f%llu", (unsigned long long)renamed);
		if (!in_list(v, count, name))
			badf("%s/%s: missing", where, name);
		else
			check_small(dirfd, where, name, 'f', n, renamed, own_len(renamed));
		want++;
	}
	for (k = unlinked; k < renamed; k++) {
		snprintf(name, sizeof(name), "r%llu", (unsigned long long)k);
		if (!in_list(v, count, name))
			badf("%s/%s: missing", where, name);
		else
			check_small(dirfd, where, name, 'f', n, k, own_len(k));
		want++;
	}
	if (count != want)
		badf("%s: %zu names, want %zu (first: %s)", where, count, want, count ? v[0] : "-");
	*files += (long)want;
	free_list(v, count);
	close(dirfd);
}

static void check_shared(int top, const char *mnt, int nodes, const struct result *res, long *files)
{
	char where[4200], name[NAME_LEN], **v;
	size_t count, want = 0;
	uint64_t k;
	int dirfd, n;

	snprintf(where, sizeof(where), "%s/shared", mnt);
	dirfd = openat(top, "shared", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0) {
		badf("%s: cannot open: %s", where, strerror(errno));
		return;
	}
	v = list_dir(dirfd, &count);
	for (n = 0; n < nodes; n++) {
		for (k = 0; k < res[n].r_count[OP_SHARED]; k++) {
			snprintf(name, sizeof(name), "n%d-%llu", n, (unsigned long long)k);
			if (!in_list(v, count, name))
				badf("%s/%s: missing", where, name);
			else
				check_small(dirfd, where, name, 's', n, k, SHARED_LEN);
			want++;
		}
	}
	if (count != want)
		badf("%s: %zu names, want %zu", where, count, want);
	*files += (long)want;
	free_list(v, count);
	close(dirfd);
}

/* big0 (f = 0) and big1: node n's chunks f, f + 2, f + 4, ... in order. */
static void check_big(int top, const char *mnt, int f, int nodes, const struct result *res, long *chunks)
{
	uint64_t next[MAXNODES], w, *c = malloc(CHUNK), seq;
	char name[8];
	size_t got = 0;
	off_t off = 0;
	ssize_t r;
	int n, fd;

	if (!c)
		die("malloc", NULL);
	snprintf(name, sizeof(name), "big%d", f);
	fd = openat(top, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		badf("%s/%s: cannot open: %s", mnt, name, strerror(errno));
		free(c);
		return;
	}
	for (n = 0; n < nodes; n++)
		next[n] = (uint64_t)f;
	for (;;) {
		r = read(fd, (char *)c + got, CHUNK - got);
		if (r < 0) {
			badf("%s/%s: read at %lld: %s", mnt, name, (long long)off, strerror(errno));
			break;
		}
		got += (size_t)r;
		if (r > 0 && got < CHUNK)
			continue;
		if (got < CHUNK) {
			if (got)
				badf("%s/%s: %lld bytes, not whole 64 KiB chunks", mnt, name,
				     (long long)(off + (off_t)got));
			break;
		}
		n = (int)(c[0] >> 48);
		seq = (c[0] >> 16) & 0xffffffffull;
		if (n >= nodes || (c[0] & 0xffff) != 0) {
			badf("%s/%s: chunk at %lld: garbled header %016llx", mnt, name, (long long)off,
			     (unsigned long long)c[0]);
		} else {
			for (w = 1; w < CHUNK / 8; w++)
				if (c[w] != chunk_word(n, seq, w))
					break;
			if (w < CHUNK / 8)
				badf("%s/%s: chunk at %lld (node %d, %llu): wrong at byte %llu", mnt, name,
				     (long long)off, n, (unsigned long long)seq, (unsigned long long)(w * 8));
			if (seq != next[n])
				badf("%s/%s: chunk at %lld: node %d's chunk %llu, want %llu", mnt, name,
				     (long long)off, n, (unsigned long long)seq, (unsigned long long)next[n]);
			next[n] = seq + 2;
		}
		(*chunks)++;
		off += CHUNK;
		got = 0;
	}
	close(fd);
	free(c);
	for (n = 0; n < nodes; n++) {
		uint64_t done = res[n].r_count[OP_BIG];
		uint64_t want = done / 2 + (f == 0 ? done % 2 : 0); /* chunks f, f + 2, ... below done */

		if (next[n] != (uint64_t)f + 2 * want)
			badf("%s/%s: node %d: its chunks end at %lld, want %llu of them", mnt, name, n,
			     (long long)next[n] - 2, (unsigned long long)want);
	}
}

static void check_log(int top, const char *mnt, int nodes, const struct result *res, long *recs)
{
	uint64_t next[MAXNODES] = { 0 };
	char want[REC], *buf;
	size_t len, off;
	int n;

	buf = slurp(top, "log", mnt, &len);
	if (!buf)
		return;
	if (len % REC)
		badf("%s/log: %zu bytes, not whole 64-byte records", mnt, len);
	for (off = 0; off + REC <= len; off += REC) {
		unsigned long long seq;

		if (sscanf(buf + off, "%4d %12llu", &n, &seq) != 2 || n < 0 || n >= nodes) {
			badf("%s/log: garbled record at %zu: %.20s", mnt, off, buf + off);
			continue;
		}
		rec_fill(want, n, seq);
		if (memcmp(buf + off, want, REC))
			badf("%s/log: record at %zu (node %d, %llu) damaged", mnt, off, n, seq);
		else if (seq != next[n])
			badf("%s/log: record at %zu: node %d's record %llu, want %llu", mnt, off, n, seq,
			     (unsigned long long)next[n]);
		next[n] = seq + 1;
		(*recs)++;
	}
	for (n = 0; n < nodes; n++)
		if (next[n] != res[n].r_count[OP_LOG])
			badf("%s/log: node %d wrote %llu records, the log ends at %llu", mnt, n,
			     (unsigned long long)res[n].r_count[OP_LOG], (unsigned long long)next[n]);
	free(buf);
}

/* Everything the nodes did, seen through mnt. */
static void check_all(const char *mnt, int nodes, const struct result *res, int mixed, long *files,
		      long *chunks, long *recs)
{
	int top = open(mnt, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int n;

	if (top < 0)
		die("open", mnt);
	for (n = 0; n < nodes; n++)
		check_own(top, mnt, n, &res[n], files);
	if (mixed) {
		check_shared(top, mnt, nodes, res, files);
		check_big(top, mnt, 0, nodes, res, chunks);
		check_big(top, mnt, 1, nodes, res, chunks);
		check_log(top, mnt, nodes, res, recs);
	}
	close(top);
}

/* --- the parent ------------------------------------------------------------- */

static int prep(const char *mnt)
{
	static const char *const files[] = { "big0", "big1", "log" };
	int top = open(mnt, O_RDONLY | O_DIRECTORY | O_CLOEXEC), fd;
	size_t i;

	if (top < 0)
		die("open", mnt);
	if (mkdirat(top, "shared", 0755) < 0)
		die("mkdir", "shared");
	for (i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		fd = openat(top, files[i], O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
		if (fd < 0)
			die("create", files[i]);
		if (close(fd) < 0)
			die("close", files[i]);
	}
	if (syncfs(top) < 0)
		die("syncfs", mnt);
	close(top);
	return 0;
}

static void kill_all(const pid_t *pid, int nodes)
{
	int n;

	for (n = 0; n < nodes; n++)
		if (pid[n] > 0)
			kill(pid[n], SIGKILL);
}

static int run(int mixed, double seconds, double grace, const char *state, char **mnts, int nodes)
{
	const enum op_kind *sched = mixed ? sched_mixed : sched_private;
	size_t nsched = mixed ? sizeof(sched_mixed) / sizeof(sched_mixed[0])
			      : sizeof(sched_private) / sizeof(sched_private[0]);
	static struct result res[MAXNODES];
	int ready[2], go[2], rep[MAXNODES][2], got[MAXNODES] = { 0 };
	pid_t pid[MAXNODES];
	double t_go, wall, rate, lo = 0, hi = 0;
	long failed = 0;
	FILE *f;
	uint64_t total = 0, kind_total[OP_NKINDS] = { 0 };
	double kind_max[OP_NKINDS] = { 0 };
	int n, k, left, st;
	char c;

	if (pipe(ready) < 0 || pipe(go) < 0)
		die("pipe", NULL);
	for (n = 0; n < nodes; n++) {
		if (pipe(rep[n]) < 0)
			die("pipe", NULL);
		pid[n] = fork();
		if (pid[n] < 0) {
			kill_all(pid, n);
			die("fork", NULL);
		}
		if (pid[n] == 0) {
			close(ready[0]);
			close(go[1]);
			close(rep[n][0]);
			worker(n, mnts[n], sched, nsched, seconds, ready[1], go[0], rep[n][1]);
		}
		close(rep[n][1]);
	}
	close(ready[1]);
	close(go[0]);
	for (n = 0; n < nodes; n++) {
		struct pollfd rp = { .fd = ready[0], .events = POLLIN };

		if (poll(&rp, 1, (int)(grace * 1000)) != 1 || read(ready[0], &c, 1) != 1) {
			fprintf(stderr, PROG ": %d of %d workers set up (a worker failed, its error above, "
					"or took over %.0f s)\n", n, nodes, grace);
			kill_all(pid, nodes);
			return 1;
		}
	}
	t_go = now();
	close(go[1]); /* go */

	for (left = nodes; left > 0;) {
		struct pollfd pfd[MAXNODES];
		int idx[MAXNODES], np = 0, ms = (int)((t_go + seconds + grace - now()) * 1000);

		for (n = 0; n < nodes; n++)
			if (!got[n]) {
				pfd[np].fd = rep[n][0];
				pfd[np].events = POLLIN;
				idx[np++] = n;
			}
		if (ms <= 0 || poll(pfd, (nfds_t)np, ms) == 0) {
			for (k = 0; k < np; k++)
				fprintf(stderr, PROG ": node %d (%s): no report %.0f s after the end of the run: stuck\n",
					idx[k], mnts[idx[k]], grace);
			kill_all(pid, nodes);
			return 1;
		}
		for (k = 0; k < np; k++) {
			if (!pfd[k].revents)
				continue;
			n = idx[k];
			got[n] = 1;
			left--;
			if (read(rep[n][0], &res[n], sizeof(res[n])) != (ssize_t)sizeof(res[n])) {
				fprintf(stderr, PROG ": node %d (%s) failed (its error above)\n", n, mnts[n]);
				failed++;
				got[n] = 2;
			}
			close(rep[n][0]);
		}
	}
	wall = now() - t_go;
	for (n = 0; n < nodes; n++) {
		if (waitpid(pid[n], &st, 0) < 0)
			die("waitpid", NULL);
		if (got[n] == 1 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
			fprintf(stderr, PROG ": node %d: worker exited with status %d\n", n, st);
			failed++;
		}
	}
	if (failed)
		return 1;

	printf("nodes %d\n", nodes);
	printf("seconds %.3f\n", seconds);
	printf("wall_s %.3f\n", wall);
	for (n = 0; n < nodes; n++) {
		uint64_t ops = 0;

		for (k = 0; k < OP_NKINDS; k++) {
			ops += res[n].r_count[k];
			kind_total[k] += res[n].r_count[k];
			if (res[n].r_max[k] > kind_max[k])
				kind_max[k] = res[n].r_max[k];
		}
		total += ops;
		rate = res[n].r_elapsed > 0 ? (double)ops / res[n].r_elapsed : 0;
		if (n == 0 || rate < lo)
			lo = rate;
		if (n == 0 || rate > hi)
			hi = rate;
		printf("node%d_ops %llu\n", n, (unsigned long long)ops);
		printf("node%d_ops_s %.1f\n", n, rate);
	}
	printf("ops %llu\n", (unsigned long long)total);
	printf("ops_s %.1f\n", (double)total / wall);
	printf("node_min_ops_s %.1f\n", lo);
	printf("node_max_ops_s %.1f\n", hi);
	printf("node_ratio %.4f\n", hi > 0 ? lo / hi : 0);
	for (k = 0; k < OP_NKINDS; k++) {
		if (k >= OP_BIG && !mixed)
			continue;
		printf("%s_ops %llu\n", kind_name[k], (unsigned long long)kind_total[k]);
		printf("%s_max_ms %.1f\n", kind_name[k], kind_max[k] * 1000);
	}
	f = fopen(state, "w");
	if (!f)
		die("open", state);
	for (n = 0; n < nodes; n++) {
		fprintf(f, "%d", n);
		for (k = 0; k < OP_NKINDS; k++)
			fprintf(f, " %llu", (unsigned long long)res[n].r_count[k]);
		fputc('\n', f);
	}
	if (fclose(f) != 0)
		die("write", state);
	return 0;
}

static int check(int mixed, const char *state, char **mnts, int nmnts)
{
	static struct result res[MAXNODES];
	long files = 0, chunks = 0, recs = 0, f2, c2, r2;
	unsigned long long v[OP_NKINDS];
	int nodes = 0, n, k, i, j;
	FILE *f = fopen(state, "r");

	if (!f)
		die("open", state);
	while (fscanf(f, "%d %llu %llu %llu %llu %llu %llu", &n, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]) ==
	       1 + OP_NKINDS) {
		if (n != nodes || nodes == MAXNODES) {
			errno = EINVAL;
			die("bad line in", state);
		}
		for (k = 0; k < OP_NKINDS; k++)
			res[n].r_count[k] = v[k];
		nodes++;
	}
	if (!feof(f) || !nodes) {
		errno = EINVAL;
		die("bad or empty", state);
	}
	fclose(f);
	for (i = 0; i < nmnts; i++) {
		for (j = 0; j < i; j++)
			if (!strcmp(mnts[i], mnts[j]))
				break;
		if (j < i)
			continue; /* seen through this one already */
		f2 = c2 = r2 = 0;
		check_all(mnts[i], nodes, res, mixed, &f2, &c2, &r2);
		if (i == 0) {
			files = f2;
			chunks = c2;
			recs = r2;
		}
		printf("checked_through %s\n", mnts[i]);
	}
	printf("checked_files %ld\n", files);
	printf("checked_chunks %ld\n", chunks);
	printf("checked_records %ld\n", recs);
	printf("check_errors %ld\n", bad);
	if (bad) {
		fprintf(stderr, PROG ": %ld check failure(s)%s\n", bad, bad > 20 ? " (the first 20 above)" : "");
		return 1;
	}
	return 0;
}

static void usage(void)
{
	fprintf(stderr, "usage: " PROG " prep MNT\n"
			"       " PROG " run private|mixed SECONDS GRACE STATE MNT...\n"
			"       " PROG " check private|mixed STATE MNT...\n");
	exit(2);
}

int main(int argc, char **argv)
{
	double seconds, grace;
	char *end;
	int mixed;

	if (argc == 3 && !strcmp(argv[1], "prep"))
		return prep(argv[2]);
	if (argc < 5 || (strcmp(argv[1], "run") && strcmp(argv[1], "check")))
		usage();
	if (!strcmp(argv[2], "private"))
		mixed = 0;
	else if (!strcmp(argv[2], "mixed"))
		mixed = 1;
	else
		usage();
	if (!strcmp(argv[1], "check"))
		return check(mixed, argv[3], argv + 4, argc - 4);
	if (argc < 7 || argc - 6 > MAXNODES)
		usage();
	seconds = strtod(argv[3], &end);
	if (*end || !(seconds > 0))
		usage();
	grace = strtod(argv[4], &end);
	if (*end || !(grace > 0))
		usage();
	signal(SIGPIPE, SIG_IGN);
	return run(mixed, seconds, grace, argv[5], argv + 6, argc - 6);
}

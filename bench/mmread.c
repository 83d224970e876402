/*
 * mmread.c - the `mmread` workload of bench/run.sh (issue #4, the seed's
 * d_iogen mmread): processes that map one file read-only and copy random
 * 10 KiB ranges out of it.
 *
 *	mmread prep FILE MIB
 *	mmread run iter|once ITERS SEED FILE...
 *
 * prep writes MIB MiB of pseudo-random bytes to FILE (word i of the file
 * is mix(i): splitmix64, so any range can be checked) and fsyncs it.
 *
 * run starts one process per FILE argument (N = their number: N nodes'
 * mountpoints of one file, or one path N times), releases them at once
 * and waits for all; ITERS iterations in total, split evenly.  Mode iter:
 * each iteration is open(O_RDONLY), mmap of the whole file (PROT_READ,
 * MAP_SHARED), a copy of a random 10 KiB range out of the mapping, munmap,
 * close.  Mode once: one open and mmap per process, then its iterations are
 * the copies alone, then munmap and close.  Offsets come from splitmix64
 * seeded with SEED and the process's index, so both filesystems get the
 * same ranges.  Every copy is checked against mix() (copy_check).  Output, one "name
 * value" per line:
 *
 *	procs N
 *	iterations ITERS
 *	wall_s     from the release of the processes to the last one's exit
 *	ops_s      iterations / wall_s
 *	slowest_s  the slowest process's own time (release to its exit)
 *	faults     page faults of all the processes (minor + major): how many
 *	           times the kernel had to map pages of the file (a page cache
 *	           of huge folios is mapped 2 MiB per fault, one of 4 KiB pages
 *	           fault-around's 64 KiB)
 *
 * Invariants:
 *  (1) no process starts its iterations before every process is forked
 *      and waiting (a pipe closed by the parent releases them);
 *  (2) every call is checked and every copy is sampled against the
 *      pattern: an error or a wrong byte prints "mmread: what: why" and
 *      exits 1, so no time is ever reported for work that was not done
 *      right.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PROG "mmread"
#include "benchutil.h"

#define RANGE (10 * 1024)
#define MAXPROCS 64

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* The byte at off of a prepared file. */
static uint8_t byte_at(uint64_t off)
{
	return (uint8_t)(mix(off / 8) >> (8 * (off % 8)));
}

static int prep(const char *path, long mib)
{
	size_t chunk = 1 << 20;
	uint64_t *buf = malloc(chunk);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	if (!buf)
		die("malloc", NULL);
	if (fd < 0)
		die("create", path);
	for (long m = 0; m < mib; m++) {
		uint64_t w0 = (uint64_t)m * (chunk / 8);
		for (size_t i = 0; i < chunk / 8; i++)
			buf[i] = mix(w0 + i); /* little-endian: byte_at() agrees */
		if (write(fd, buf, chunk) != (ssize_t)chunk)
			die("write", path);
	}
	if (fsync(fd) < 0 || close(fd) < 0)
		die("fsync", path);
	free(buf);
	return 0;
}

/*
 * Copy RANGE bytes at a random offset out of map (size bytes) and check
 * them: the last byte and one in every 251 (a prime: every offset within
 * a page is hit over the run), so a wrong or misplaced page is caught
 * without making the check cost more than the copy.
 */
static void copy_check(const uint8_t *map, uint64_t size, uint64_t *rnd, uint8_t *dst,
		       const char *path)
{
	uint64_t off = mix((*rnd)++) % (size - RANGE + 1);

	memcpy(dst, map + off, RANGE);
	for (size_t i = off % 251; i < RANGE + 250; i += 251) {
		if (i >= RANGE)
			i = RANGE - 1;
		if (dst[i] != byte_at(off + i)) {
			fprintf(stderr, PROG ": %s: byte %llu is 0x%02x, want 0x%02x\n", path,
				(unsigned long long)(off + i), dst[i], byte_at(off + i));
			exit(1);
		}
		if (i == RANGE - 1)
			break;
	}
}

static void *map_file(const char *path, int *fdp, uint64_t *size)
{
	struct stat st;
	void *m;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		die("open", path);
	if (fstat(fd, &st) < 0)
		die("fstat", path);
	if (st.st_size < RANGE) {
		errno = EINVAL;
		die("file smaller than 10 KiB:", path);
	}
	m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED)
		die("mmap", path);
	*fdp = fd;
	*size = (uint64_t)st.st_size;
	return m;
}

/* One process: wait for the release, then its iterations. */
static void worker(int go, int once, long iters, uint64_t seed, const char *path, int wfd)
{
	uint8_t *dst = malloc(RANGE);
	uint64_t rnd = seed, size = 0;
	double t0, t;
	uint8_t *m = NULL;
	char c;
	int fd = -1;

	if (!dst)
		die("malloc", NULL);
	if (read(go, &c, 1) != 0) /* EOF: the parent closed it, go */
		die("barrier", NULL);
	t0 = now();
	if (once)
		m = map_file(path, &fd, &size);
	for (long i = 0; i < iters; i++) {
		if (!once)
			m = map_file(path, &fd, &size);
		copy_check(m, size, &rnd, dst, path);
		if (!once) {
			if (munmap(m, (size_t)size) < 0 || close(fd) < 0)
				die("munmap/close", path);
		}
	}
	if (once && (munmap(m, (size_t)size) < 0 || close(fd) < 0))
		die("munmap/close", path);
	t = now() - t0;
	if (write(wfd, &t, sizeof(t)) != sizeof(t))
		die("report", NULL);
	exit(0);
}

static int run(int once, long iters, uint64_t seed, int n, char **paths)
{
	int go[2], rep[2], failed = 0;
	pid_t pid[MAXPROCS];
	double t0, wall, slowest = 0;

	if (pipe(go) < 0 || pipe(rep) < 0)
		die("pipe", NULL);
	for (int i = 0; i < n; i++) {
		long mine = iters / n + (i < iters % n);
		pid[i] = fork();
		if (pid[i] < 0)
			die("fork", NULL);
		if (pid[i] == 0) {
			close(go[1]);
			close(rep[0]);
			worker(go[0], once, mine, mix(seed * 1000003u + (uint64_t)i), paths[i], rep[1]);
		}
	}
	close(go[0]);
	close(rep[1]);
	t0 = now();
	close(go[1]); /* (1): every child waits on it */
	for (int i = 0; i < n; i++) {
		int st;
		if (waitpid(pid[i], &st, 0) < 0)
			die("waitpid", NULL);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			failed = 1;
	}
	wall = now() - t0;
	for (int i = 0; i < n; i++) {
		double t;
		if (read(rep[0], &t, sizeof(t)) != sizeof(t)) {
			failed = 1;
			break;
		}
		if (t > slowest)
			slowest = t;
	}
	if (failed) {
		fprintf(stderr, PROG ": a process failed (see above)\n");
		return 1;
	}
	struct rusage ru;
	if (getrusage(RUSAGE_CHILDREN, &ru) < 0)
		die("getrusage", NULL);
	printf("procs %d\niterations %ld\nwall_s %.4f\nops_s %.1f\nslowest_s %.4f\nfaults %ld\n", n,
	       iters, wall, (double)iters / wall, slowest, ru.ru_minflt + ru.ru_majflt);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "prep") && atol(argv[3]) > 0)
		return prep(argv[2], atol(argv[3]));
	if (argc >= 6 && !strcmp(argv[1], "run") &&
	    (!strcmp(argv[2], "iter") || !strcmp(argv[2], "once")) && atol(argv[3]) > 0 &&
	    argc - 5 <= MAXPROCS)
		return run(!strcmp(argv[2], "once"), atol(argv[3]), strtoull(argv[4], NULL, 10),
			   argc - 5, argv + 5);
	fprintf(stderr, "usage: " PROG " prep FILE MIB\n"
			"       " PROG " run iter|once ITERS SEED FILE...\n");
	return 2;
}

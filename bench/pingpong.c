/*
 * pingpong.c - the `pingpong` workload of bench/run.sh (issue #3): one file
 * appended to from two nodes strictly in turn, so that every append has to
 * take the file's glock away from the other node.
 *
 *	pingpong run PATH_A PATH_B N   the timed loop
 *	pingpong verify PATH N         check the file the loop made, via PATH
 *
 * PATH_A and PATH_B name the same file through two mounts of one shoal
 * filesystem (node a, node b).  The file is created empty through PATH_A
 * and looked up through PATH_B (not timed).  Then append i (i = 0..N-1)
 * goes through PATH_A for even i and PATH_B for odd i, and is
 *
 *	open(O_WRONLY|O_APPEND), write 4 KiB, fsync, close
 *
 * timed from before the open to after the close.  With PATH_A == PATH_B
 * (the ext4 reference line) the loop is the same: one process, a new fd
 * for every append, alternately "as a" and "as b".
 *
 * Output, one "name value" per line on stdout, times in seconds:
 *
 *	appends N
 *	seconds S        the whole loop
 *	ops_s R          N / S
 *	lat_avg_us, lat_p50_us, lat_p99_us, lat_max_us   one append
 *	lat_a_p50_us, lat_b_p50_us                        appends through A, B
 *
 * Invariants:
 *  (1) block i of the file (4 KiB at offset i * 4096) starts and ends with a
 *      64-bit word naming i (XOR a constant), and its other bytes are 'a' or
 *      'b', the node it went through;
 *  (2) verify (which the harness runs after the loop, through PATH_A and
 *      through PATH_B, once it has read the counters) reads the file back:
 *      it must hold exactly N * 4096 bytes and every block as (1) says.  A
 *      lost, doubled, torn or reordered append fails it (exit 1,
 *      "pingpong: ..." on stderr).  verify prints nothing on success.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PROG "pingpong"
#include "benchutil.h"
#define BLOCK 4096u
#define TAG 0x9019909019909019ull

static void fill(unsigned char *b, uint64_t i)
{
	uint64_t w = i ^ TAG;

	memset(b, (i & 1) ? 'b' : 'a', BLOCK);
	memcpy(b, &w, sizeof(w));
	memcpy(b + BLOCK - sizeof(w), &w, sizeof(w));
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* The p-th percentile (0..100) of n sorted values. */
static double pct(const double *v, size_t n, double p)
{
	size_t k;

	if (n == 0)
		return 0;
	k = (size_t)(p / 100.0 * (double)(n - 1) + 0.5);
	return v[k < n ? k : n - 1];
}

/* Read PATH back and check invariant (1) for N blocks; 0 or 1 on mismatch. */
static int verify(const char *path, uint64_t n)
{
	unsigned char want[BLOCK], got[BLOCK];
	struct stat st;
	uint64_t i;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		die("open for verify", path);
	if (fstat(fd, &st) < 0)
		die("fstat", path);
	if ((uint64_t)st.st_size != n * BLOCK) {
		fprintf(stderr, PROG ": %s: size %lld, expected %llu (%llu appends of %u)\n",
			path, (long long)st.st_size, (unsigned long long)(n * BLOCK),
			(unsigned long long)n, BLOCK);
		return 1;
	}
	for (i = 0; i < n; i++) {
		ssize_t r = pread(fd, got, BLOCK, (off_t)(i * BLOCK));

		if (r < 0)
			die("pread", path);
		fill(want, i);
		if (r != (ssize_t)BLOCK || memcmp(got, want, BLOCK) != 0) {
			uint64_t w;

			memcpy(&w, got, sizeof(w));
			fprintf(stderr,
				PROG ": %s: block %llu (offset %llu) holds append %lld from '%c' (%zd bytes), expected append %llu from '%c'\n",
				path, (unsigned long long)i, (unsigned long long)(i * BLOCK),
				r >= 8 ? (long long)(w ^ TAG) : -1LL, r >= 9 ? got[8] : '?', r,
				(unsigned long long)i, (i & 1) ? 'b' : 'a');
			return 1;
		}
	}
	close(fd);
	return 0;
}

int main(int argc, char **argv)
{
	unsigned char buf[BLOCK];
	const char *path[2];
	double *lat, *half[2], t0, t1, sum = 0;
	size_t nh[2] = { 0, 0 };
	struct stat st;
	uint64_t n, i;
	int fd;

	if (argc == 4 && strcmp(argv[1], "verify") == 0 &&
	    (n = strtoull(argv[3], NULL, 10)) > 0)
		return verify(argv[2], n);
	if (argc != 5 || strcmp(argv[1], "run") != 0 || (n = strtoull(argv[4], NULL, 10)) == 0) {
		fprintf(stderr, "usage: " PROG " run PATH_A PATH_B N\n"
				"       " PROG " verify PATH N\n");
		return 2;
	}
	path[0] = argv[2];
	path[1] = argv[3];
	lat = calloc(n, sizeof(*lat));
	half[0] = calloc(n, sizeof(*lat));
	half[1] = calloc(n, sizeof(*lat));
	if (!lat || !half[0] || !half[1])
		die("calloc", NULL);

	fd = open(path[0], O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
	if (fd < 0)
		die("create", path[0]);
	if (fsync(fd) < 0)
		die("fsync", path[0]);
	close(fd);
	if (stat(path[1], &st) < 0)
		die("stat", path[1]);
	if (st.st_size != 0) {
		fprintf(stderr, PROG ": %s: size %lld after the create, expected 0\n", path[1],
			(long long)st.st_size);
		return 1;
	}

	t0 = now();
	for (i = 0; i < n; i++) {
		const char *p = path[i & 1];
		double s = now(), e;
		ssize_t w;

		fill(buf, i);
		fd = open(p, O_WRONLY | O_APPEND | O_CLOEXEC);
		if (fd < 0)
			die("open", p);
		w = write(fd, buf, BLOCK);
		if (w != (ssize_t)BLOCK) {
			if (w >= 0)
				errno = EIO;
			die("write", p);
		}
		if (fsync(fd) < 0)
			die("fsync", p);
		if (close(fd) < 0)
			die("close", p);
		e = now();
		lat[i] = (e - s) * 1e6;
		half[i & 1][nh[i & 1]++] = lat[i];
		sum += lat[i];
	}
	t1 = now();

	qsort(lat, n, sizeof(*lat), cmp_double);
	qsort(half[0], nh[0], sizeof(double), cmp_double);
	qsort(half[1], nh[1], sizeof(double), cmp_double);
	printf("appends %llu\n", (unsigned long long)n);
	printf("seconds %.6f\n", t1 - t0);
	printf("ops_s %.1f\n", (double)n / (t1 - t0));
	printf("lat_avg_us %.1f\n", sum / (double)n);
	printf("lat_p50_us %.1f\n", pct(lat, n, 50));
	printf("lat_p99_us %.1f\n", pct(lat, n, 99));
	printf("lat_max_us %.1f\n", lat[n - 1]);
	printf("lat_a_p50_us %.1f\n", pct(half[0], nh[0], 50));
	printf("lat_b_p50_us %.1f\n", pct(half[1], nh[1], 50));
	free(lat);
	free(half[0]);
	free(half[1]);
	return 0;
}

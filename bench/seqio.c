/*
 * seqio.c - the `seq` workload of bench/run.sh (issue #2): a file written
 * sequentially in 1 MiB writes and fsync'ed, and (after the harness has
 * dropped the caches) read back sequentially in 1 MiB reads.
 *
 *	seqio write FILE MIB   create FILE, write MIB MiB, fsync, close
 *	seqio read FILE MIB    read FILE to its end; it must hold MIB MiB
 *
 * Output, one "name value" per line on stdout, times in seconds:
 *
 *	bytes N
 *	seconds S      write: open to close, fsync included; read: open to close
 *	fsync_s F      write only: the fsync alone
 *	mib_s R        N / 2^20 / S
 *
 * Invariants:
 *  (1) every 4 KiB block of the file starts and ends with a 64-bit word
 *      naming its own block number (XOR a constant); the rest is a fixed
 *      non-zero pattern.  read checks both words of every block, so a
 *      block read from the wrong place, or lost, fails the run instead of
 *      being timed;
 *  (2) a short or failed transfer prints "seqio: what: strerror" and
 *      exits 1; nothing is printed on stdout then.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PROG "seqio"
#include "benchutil.h"
#define CHUNK (1u << 20)
#define BLOCK 4096u
#define TAG 0x5eed5ea15eed5ea1ull

/* Stamp (or, with check set, verify) the block numbers of one chunk. */
static int stamp(unsigned char *buf, uint64_t chunk, int check)
{
	uint64_t blk = chunk * (CHUNK / BLOCK), want;
	unsigned i;

	for (i = 0; i < CHUNK / BLOCK; i++, blk++) {
		unsigned char *b = buf + (size_t)i * BLOCK;
		uint64_t head, tail;

		want = blk ^ TAG;
		if (!check) {
			memcpy(b, &want, sizeof(want));
			memcpy(b + BLOCK - sizeof(want), &want, sizeof(want));
			continue;
		}
		memcpy(&head, b, sizeof(head));
		memcpy(&tail, b + BLOCK - sizeof(tail), sizeof(tail));
		if (head != want || tail != want) {
			fprintf(stderr,
				PROG ": block %llu holds 0x%016llx/0x%016llx, expected 0x%016llx\n",
				(unsigned long long)blk, (unsigned long long)head,
				(unsigned long long)tail, (unsigned long long)want);
			return -1;
		}
	}
	return 0;
}

static int do_write(const char *path, uint64_t mib, unsigned char *buf)
{
	double t0, t_sync, t1;
	uint64_t c;
	int fd;

	memset(buf, 0xa5, CHUNK);
	t0 = now();
	fd = open(path, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
	if (fd < 0)
		die("open", path);
	for (c = 0; c < mib; c++) {
		ssize_t n;

		stamp(buf, c, 0);
		n = write(fd, buf, CHUNK);
		if (n != (ssize_t)CHUNK) {
			if (n >= 0)
				errno = EIO;
			die("write", path);
		}
	}
	t_sync = now();
	if (fsync(fd) < 0)
		die("fsync", path);
	if (close(fd) < 0)
		die("close", path);
	t1 = now();
	printf("bytes %llu\n", (unsigned long long)(mib * CHUNK));
	printf("seconds %.6f\n", t1 - t0);
	printf("fsync_s %.6f\n", t1 - t_sync);
	printf("mib_s %.3f\n", (double)mib / (t1 - t0));
	return 0;
}

static int do_read(const char *path, uint64_t mib, unsigned char *buf)
{
	uint64_t c = 0, total = 0;
	double t0, t1;
	int fd;

	t0 = now();
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		die("open", path);
	for (;;) {
		size_t got = 0;

		while (got < CHUNK) {
			ssize_t n = read(fd, buf + got, CHUNK - got);
			if (n < 0) {
				if (errno == EINTR)
					continue;
				die("read", path);
			}
			if (n == 0)
				break;
			got += (size_t)n;
		}
		if (got == 0)
			break;
		total += got;
		if (got != CHUNK || stamp(buf, c, 1) < 0) {
			errno = EUCLEAN;
			die("read: wrong data in", path);
		}
		c++;
	}
	if (close(fd) < 0)
		die("close", path);
	t1 = now();
	if (total != mib * CHUNK) {
		fprintf(stderr, PROG ": %s: read %llu bytes, expected %llu\n", path,
			(unsigned long long)total, (unsigned long long)(mib * CHUNK));
		return 1;
	}
	printf("bytes %llu\n", (unsigned long long)total);
	printf("seconds %.6f\n", t1 - t0);
	printf("mib_s %.3f\n", (double)mib / (t1 - t0));
	return 0;
}

int main(int argc, char **argv)
{
	unsigned char *buf;
	long long mib;

	if (argc != 4 || (mib = strtoll(argv[3], NULL, 10)) <= 0 ||
	    (strcmp(argv[1], "write") != 0 && strcmp(argv[1], "read") != 0)) {
		fprintf(stderr, "usage: " PROG " write|read FILE MIB\n");
		return 2;
	}
	if (posix_memalign((void **)&buf, BLOCK, CHUNK) != 0) {
		fprintf(stderr, PROG ": out of memory\n");
		return 1;
	}
	if (strcmp(argv[1], "write") == 0)
		return do_write(argv[2], (uint64_t)mib, buf);
	return do_read(argv[2], (uint64_t)mib, buf);
}

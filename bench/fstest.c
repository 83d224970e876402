/*
 * fstest.c - the `fstest` workload of bench/run.sh (issue #2), the
 * customer program of seeds/001: an 8 MiB file, then 8192 iterations of a
 * 1 KiB write at a random 1 KiB-aligned offset followed by fdatasync and
 * fsync, single-threaded, timed from after the open to after the close.
 *
 *	fstest prep FILE KIB             create FILE: KIB KiB written, fsync'ed
 *	fstest run FILE ITERATIONS SEED  the timed loop on the file prep made
 *	fstest one FILE OFFSET           one 4 KiB pwrite at OFFSET, then fsync
 *	                                 (the `wbcost` workload: what an fsync
 *	                                 of a big file with one dirty block costs)
 *	fstest floor DEVICE ITERATIONS   the device's own cost of what shoal
 *	                                 does per iteration: one 1.5 KiB
 *	                                 O_DIRECT write (a fast-commit block)
 *	                                 and one flush; DEVICE is overwritten
 *	                                 (a scratch loop device), prints
 *	                                 floor_write_us, floor_flush_us, floor_us
 *
 * The harness samples the device counters between the two, so they count
 * the loop alone.  Output of run, one "name value" per line on stdout:
 *
 *	iterations N
 *	bytes B          application bytes written (N * 1024)
 *	seconds S        open (excluded) ... loop, close (included)
 *	kib_s R          bandwidth: B / 1024 / S
 *	lat_avg_us, lat_p50_us, lat_p99_us, lat_max_us
 *	                 one iteration: pwrite + fdatasync + fsync
 *
 * Invariants:
 *  (1) the offsets and the data come from splitmix64(SEED) alone, so every
 *      run with the same SEED and file size does the same writes on every
 *      filesystem and machine;
 *  (2) after the timed close the file is read back and compared with a
 *      model in memory of what prep and the loop wrote; a difference fails
 *      the run (exit 1, "fstest: ..." on stderr), so no time is reported
 *      for writes that did not land.
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

#define PROG "fstest"
#include "benchutil.h"
#define BS 1024u
#define PREP_CHUNK (64u * 1024u)

static uint64_t rng_state;

static uint64_t splitmix64(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* The content prep gives byte i of the file. */
static unsigned char prep_byte(uint64_t i)
{
	return (unsigned char)(i * 131u + (i >> 10) * 7u + 1u);
}

static void full_pwrite(int fd, const void *buf, size_t len, off_t off, const char *path)
{
	ssize_t n = pwrite(fd, buf, len, off);

	if (n != (ssize_t)len) {
		if (n >= 0)
			errno = EIO;
		die("pwrite", path);
	}
}

static int do_prep(const char *path, uint64_t kib)
{
	unsigned char buf[PREP_CHUNK];
	uint64_t size = kib * 1024, off;
	int fd;

	fd = open(path, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
	if (fd < 0)
		die("open", path);
	for (off = 0; off < size; off += PREP_CHUNK) {
		size_t len = size - off < PREP_CHUNK ? (size_t)(size - off) : PREP_CHUNK;
		size_t i;

		for (i = 0; i < len; i++)
			buf[i] = prep_byte(off + i);
		full_pwrite(fd, buf, len, (off_t)off, path);
	}
	if (fsync(fd) < 0)
		die("fsync", path);
	if (close(fd) < 0)
		die("close", path);
	return 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Read path back and compare it with model; 0 if equal. */
static int verify(const char *path, const unsigned char *model, uint64_t size)
{
	unsigned char *buf = malloc(size);
	uint64_t got = 0, i;
	int fd, ret = 0;

	if (!buf)
		die("malloc", path);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		die("open", path);
	while (got < size) {
		ssize_t n = pread(fd, buf + got, size - got, (off_t)got);
		if (n < 0)
			die("read back", path);
		if (n == 0)
			break;
		got += (uint64_t)n;
	}
	close(fd);
	if (got != size) {
		fprintf(stderr, PROG ": %s: read back %llu bytes, expected %llu\n", path,
			(unsigned long long)got, (unsigned long long)size);
		ret = 1;
	} else if (memcmp(buf, model, size) != 0) {
		for (i = 0; buf[i] == model[i]; i++)
			;
		fprintf(stderr, PROG ": %s: byte %llu reads 0x%02x, wrote 0x%02x\n", path,
			(unsigned long long)i, buf[i], model[i]);
		ret = 1;
	}
	free(buf);
	return ret;
}

static int do_run(const char *path, long iters, uint64_t seed)
{
	unsigned char data[BS], *model;
	double *lat, t0, t1, sum = 0;
	uint64_t size, nblk, i;
	struct stat st;
	long it;
	int fd;

	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		die("open", path);
	if (fstat(fd, &st) < 0)
		die("stat", path);
	size = (uint64_t)st.st_size;
	nblk = size / BS;
	if (nblk == 0) {
		fprintf(stderr, PROG ": %s: empty; run prep first\n", path);
		return 1;
	}
	model = malloc(size);
	lat = malloc((size_t)iters * sizeof(*lat));
	if (!model || !lat)
		die("malloc", path);
	for (i = 0; i < size; i++)
		model[i] = prep_byte(i);
	rng_state = seed;

	t0 = now();
	for (it = 0; it < iters; it++) {
		uint64_t off = (splitmix64() % nblk) * BS, r = splitmix64();
		double ts;

		for (i = 0; i < BS; i += 8) {
			uint64_t w = r ^ (i * 0x9e3779b97f4a7c15ull);
			memcpy(data + i, &w, 8);
		}
		memcpy(model + off, data, BS);
		ts = now();
		full_pwrite(fd, data, BS, (off_t)off, path);
		if (fdatasync(fd) < 0)
			die("fdatasync", path);
		if (fsync(fd) < 0)
			die("fsync", path);
		lat[it] = now() - ts;
		sum += lat[it];
	}
	if (close(fd) < 0)
		die("close", path);
	t1 = now();

	if (verify(path, model, size) != 0)
		return 1;
	qsort(lat, (size_t)iters, sizeof(*lat), cmp_double);
	printf("iterations %ld\n", iters);
	printf("bytes %llu\n", (unsigned long long)iters * BS);
	printf("seconds %.6f\n", t1 - t0);
	printf("kib_s %.3f\n", (double)iters * BS / 1024.0 / (t1 - t0));
	printf("lat_avg_us %.1f\n", sum / (double)iters * 1e6);
	printf("lat_p50_us %.1f\n", lat[iters / 2] * 1e6);
	printf("lat_p99_us %.1f\n", lat[(size_t)((double)iters * 0.99)] * 1e6);
	printf("lat_max_us %.1f\n", lat[iters - 1] * 1e6);
	free(lat);
	free(model);
	return 0;
}

static int do_one(const char *path, uint64_t off)
{
	unsigned char buf[4096], back[4096];
	int fd = open(path, O_RDWR | O_CLOEXEC);

	if (fd < 0)
		die("open", path);
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (unsigned char)(prep_byte(off + i) ^ 0x5a);
	if (pwrite(fd, buf, sizeof(buf), (off_t)off) != (ssize_t)sizeof(buf))
		die("pwrite", path);
	if (fsync(fd) < 0)
		die("fsync", path);
	if (pread(fd, back, sizeof(back), (off_t)off) != (ssize_t)sizeof(back))
		die("pread", path);
	if (memcmp(buf, back, sizeof(buf))) {
		fprintf(stderr, PROG ": %s: the block at %llu reads back wrong\n", path,
			(unsigned long long)off);
		return 1;
	}
	close(fd);
	return 0;
}

static int do_floor(const char *dev, long iters)
{
	int fd = open(dev, O_RDWR | O_DIRECT | O_CLOEXEC);
	double tw = 0, tf = 0;
	void *buf;

	if (fd < 0)
		die("open", dev);
	if (posix_memalign(&buf, 4096, 4096))
		die("posix_memalign", NULL);
	memset(buf, 0x5a, 4096);
	for (long i = 0; i < iters; i++) {
		double t0 = now(), t1;
		if (pwrite(fd, buf, 1536, (off_t)(i % 64) * 4096) != 1536)
			die("pwrite", dev);
		t1 = now();
		if (fdatasync(fd) < 0)
			die("fdatasync", dev);
		tw += t1 - t0;
		tf += now() - t1;
	}
	close(fd);
	free(buf);
	printf("floor_write_us %.1f\n", tw / (double)iters * 1e6);
	printf("floor_flush_us %.1f\n", tf / (double)iters * 1e6);
	printf("floor_us %.1f\n", (tw + tf) / (double)iters * 1e6);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "prep") == 0) {
		long long kib = strtoll(argv[3], NULL, 10);
		if (kib > 0)
			return do_prep(argv[2], (uint64_t)kib);
	} else if (argc == 4 && strcmp(argv[1], "one") == 0) {
		return do_one(argv[2], strtoull(argv[3], NULL, 0) & ~4095ull);
	} else if (argc == 4 && strcmp(argv[1], "floor") == 0) {
		long iters = strtol(argv[3], NULL, 10);
		if (iters > 0)
			return do_floor(argv[2], iters);
	} else if (argc == 5 && strcmp(argv[1], "run") == 0) {
		long iters = strtol(argv[3], NULL, 10);
		if (iters > 0)
			return do_run(argv[2], iters, strtoull(argv[4], NULL, 0));
	}
	fprintf(stderr, "usage: " PROG " prep FILE KIB\n"
			"       " PROG " run FILE ITERATIONS SEED\n"
			"       " PROG " one FILE OFFSET\n"
			"       " PROG " floor DEVICE ITERATIONS\n");
	return 2;
}

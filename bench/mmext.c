/*
 * mmext.c - the `mmext` workload of bench/run.sh (issue #5, the workload of
 * shared/seeds/003): a file grown to TOTAL MiB in HUNK MiB steps, each step
 * an ftruncate that extends the file by one hunk, then the new hunk written
 * through a shared writable mapping; then one fsync.
 *
 *	mmext FILE TOTAL_MIB HUNK_MIB unmap|mremap
 *
 * unmap:  each hunk is mapped alone, filled and unmapped (the seed's loop);
 * mremap: one mapping of the whole file, grown with mremap after each
 *         ftruncate, filled hunk by hunk, unmapped at the end.
 *
 * Output, one "name value" per line (times in seconds, rates in MiB/s):
 *
 *	segments N          64 MiB segments (the last may be shorter)
 *	seg_K_mib_s         rate of segment K (1..N): its ftruncates and fills
 *	first_mib_s         segment 1
 *	last_mib_s          segment N
 *	flat                last_mib_s / first_mib_s (R3: cost follows what is
 *	                    dirty, so this stays near 1)
 *	fill_s              all hunks
 *	fsync_s             the final fsync
 *	mib_s               TOTAL / (fill_s + fsync_s)
 *
 * Invariants:
 *  (1) every byte written is a function of its offset; after the fsync
 *      the file is read back with pread (one 4 KiB sample of every hunk and
 *      the last byte) and a mismatch exits 1;
 *  (2) every call is checked: a failure prints "mmext: what: strerror" and
 *      exits 1, so no rate is printed for work not done.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PROG "mmext"
#include "benchutil.h"

#define MIB (1024ull * 1024)
#define SEG (64 * MIB)

static uint8_t byte_at(uint64_t off)
{
	return (uint8_t)((off >> 12) * 31 + (off & 0xfff) * 7 + 1);
}

static void fill(uint8_t *p, uint64_t off, uint64_t len)
{
	for (uint64_t i = 0; i < len; i++)
		p[i] = byte_at(off + i);
}

int main(int argc, char **argv)
{
	uint64_t total, hunk, nseg, done = 0;
	double t0, tseg, t_fill, t_sync, *seg_rate;
	uint8_t *map = NULL, sample[4096];
	int fd, use_mremap, k = 0;

	if (argc != 5 || (total = strtoull(argv[2], NULL, 10) * MIB) == 0 ||
	    (hunk = strtoull(argv[3], NULL, 10) * MIB) == 0 || total % hunk ||
	    (strcmp(argv[4], "unmap") && strcmp(argv[4], "mremap"))) {
		fprintf(stderr, "usage: " PROG " FILE TOTAL_MIB HUNK_MIB unmap|mremap\n");
		return 2;
	}
	use_mremap = !strcmp(argv[4], "mremap");
	nseg = (total + SEG - 1) / SEG;
	seg_rate = calloc(nseg, sizeof(*seg_rate));
	if (!seg_rate)
		die("calloc", NULL);
	fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		die("open", argv[1]);

	t0 = tseg = now();
	while (done < total) {
		if (ftruncate(fd, (off_t)(done + hunk)) < 0)
			die("ftruncate", argv[1]);
		uint8_t *p;
		if (use_mremap) {
			map = map ? mremap(map, done, done + hunk, MREMAP_MAYMOVE)
				  : mmap(NULL, hunk, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
			if (map == MAP_FAILED)
				die(done ? "mremap" : "mmap", argv[1]);
			p = map + done;
		} else {
			p = mmap(NULL, hunk, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)done);
			if (p == MAP_FAILED)
				die("mmap", argv[1]);
		}
		fill(p, done, hunk);
		if (!use_mremap && munmap(p, hunk) < 0)
			die("munmap", argv[1]);
		done += hunk;
		if (done % SEG == 0 || done == total) {
			double t = now();
			uint64_t seglen = done % SEG ? done % SEG : SEG;
			seg_rate[k++] = (double)seglen / MIB / (t - tseg);
			tseg = t;
		}
	}
	t_fill = now() - t0;
	double t1 = now();
	if (fsync(fd) < 0)
		die("fsync", argv[1]);
	t_sync = now() - t1;
	if (use_mremap && munmap(map, total) < 0)
		die("munmap", argv[1]);

	for (uint64_t off = 0; off < total; off += hunk) {
		uint64_t at = off + (off / hunk * 4096) % hunk;
		at -= at % 4096;
		if (pread(fd, sample, sizeof(sample), (off_t)at) != (ssize_t)sizeof(sample))
			die("pread", argv[1]);
		for (int i = 0; i < 4096; i++)
			if (sample[i] != byte_at(at + (uint64_t)i)) {
				fprintf(stderr, PROG ": %s: byte %llu reads %u, wrote %u\n", argv[1],
					(unsigned long long)(at + (uint64_t)i), sample[i],
					byte_at(at + (uint64_t)i));
				return 1;
			}
	}
	struct stat st;
	if (fstat(fd, &st) < 0)
		die("fstat", argv[1]);
	if ((uint64_t)st.st_size != total) {
		fprintf(stderr, PROG ": %s: size %lld, want %llu\n", argv[1], (long long)st.st_size,
			(unsigned long long)total);
		return 1;
	}
	close(fd);

	printf("segments %llu\n", (unsigned long long)nseg);
	for (uint64_t i = 0; i < nseg; i++)
		printf("seg_%llu_mib_s %.1f\n", (unsigned long long)i + 1, seg_rate[i]);
	printf("first_mib_s %.1f\n", seg_rate[0]);
	printf("last_mib_s %.1f\n", seg_rate[nseg - 1]);
	printf("flat %.3f\n", seg_rate[nseg - 1] / seg_rate[0]);
	printf("fill_s %.6f\n", t_fill);
	printf("fsync_s %.6f\n", t_sync);
	printf("mib_s %.1f\n", (double)total / MIB / (t_fill + t_sync));
	free(seg_rate);
	return 0;
}

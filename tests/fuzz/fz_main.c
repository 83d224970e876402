/*
 * fz_main.c - runs a libFuzzer target without libFuzzer (gcc builds, CI
 * smoke): each file named on the command line is one input; with none,
 * FZ_RUNS (default 3000) generated inputs from FZ_SEED (default: the time,
 * printed).  Generated inputs are random blocks, half of them then sealed
 * as a metadata block of a random type at their own address with small
 * counts, so that they reach past the checksum into the parsers.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "meta.h"
#include "shoal/ondisk.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t fz_rng;

static uint64_t next(void)
{
	uint64_t z = (fz_rng += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	static uint8_t buf[1 << 20];
	size_t n;

	if (!f) {
		perror(path);
		return 1;
	}
	n = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	LLVMFuzzerTestOneInput(buf, n);
	return 0;
}

int main(int argc, char **argv)
{
	static uint8_t in[1 + SHOAL_MAX_BSIZE];
	const char *s = getenv("FZ_SEED"), *r = getenv("FZ_RUNS");
	uint64_t seed = s ? strtoull(s, NULL, 0) : (uint64_t)time(NULL);
	long runs = r ? atol(r) : 3000;

	if (argc > 1) {
		int rc = 0;
		for (int i = 1; i < argc; i++)
			rc |= run_file(argv[i]);
		return rc;
	}
	printf("%s: FZ_SEED=%llu, %ld inputs\n", argv[0], (unsigned long long)seed, runs);
	fflush(stdout);
	fz_rng = seed;
	for (long i = 0; i < runs; i++) {
		uint32_t bsize = SHOAL_MIN_BSIZE << (i & 1);
		size_t len = 1 + (next() % 4 ? bsize : next() % (bsize + 1));
		static uint64_t aligned[SHOAL_MAX_BSIZE / 8];
		uint8_t *b = (uint8_t *)aligned; /* built aligned, then copied */
		in[0] = (uint8_t)(i & 1);
		for (size_t k = 0; k + 1 < len; k++)
			b[k] = next() % 3 ? 0 : (uint8_t)next(); /* mostly zeros: small fields */
		if (next() % 2 && len == 1 + bsize) {
			uint16_t type = (uint16_t)(1 + next() % (SHOAL_MT_MAX - 1));
			uint64_t blkno = next() % 4;
			/* plausible counts: a few records or entries */
			uint32_t fc_bytes = (uint32_t)(next() % 4) * 24;
			memcpy(b + 36, &fc_bytes, 4);
			for (uint32_t o = 48; o + 16 <= 48 + fc_bytes; o += 24) {
				uint64_t home = 1 + next() % 3;
				uint16_t off = (uint16_t)(32 + next() % 64), flen = 8;
				uint32_t fl = (uint32_t)(next() % 2);
				memcpy(b + o, &home, 8);
				memcpy(b + o + 8, &off, 2);
				memcpy(b + o + 10, &flen, 2);
				memcpy(b + o + 12, &fl, 4);
			}
			uint32_t cnt = fc_bytes / 24;
			memcpy(b + 32, &cnt, 4);
			if (next() % 2)
				type = SHOAL_MT_LFAST;
			meta_seal(b, bsize, type, blkno, ((struct shoal_mh *)b)->mh_seq);
			if (type == SHOAL_MT_LFAST) /* its CRC covers the records only */
				meta_update_crc(b, meta_fc_span(fc_bytes, bsize));
		}
		memcpy(in + 1, b, len - 1);
		LLVMFuzzerTestOneInput(in, len);
	}
	printf("%s: %ld inputs, no crash\n", argv[0], runs);
	return 0;
}

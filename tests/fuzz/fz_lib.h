/*
 * fz_lib.h - what the image fuzzers share (tests/fuzz/fz_lib.c): the base
 * image, its metadata blocks, the mutations and the in-process walk.
 * fuzz_image.c drives them case by case with fsck.shoal; fz_image.c is
 * the libFuzzer target whose input feeds the generator.
 */
#ifndef SHOAL_FZ_LIB_H
#define SHOAL_FZ_LIB_H
#include <stddef.h>
#include <stdint.h>

#define FZ_BSIZE 1024u
#define FZ_IMG_BYTES (6u << 20)
#define FZ_JBYTES (512u * FZ_BSIZE)
#define FZ_HASH_SEED 0x5eed5eed12345678ull
#define FZ_TAIL_SEQ 1000ull
#define FZ_MAX_MUT 3
#define FZ_WALK_NAMES 20000 /* names a walk visits at most */
#define FZ_WALK_DEPTH 24
#define FZ_READ 65536

enum fz_kind {
	K_SB, K_RG, K_BITMAP, K_DINODE, K_PAYLOAD, K_INDIRECT, K_LEAF, K_LEAFENT,
	K_HTABLE, K_XATTR, K_JHEAD, K_LDESC, K_LOGIMG, K_LFAST, K_NKINDS
};

extern const char *const fz_kind_name[K_NKINDS];

/* The generator: splitmix64 from fz_rng_state, or fz_rng_hook when set. */
extern uint64_t fz_rng_state;
extern uint64_t (*fz_rng_hook)(void);
uint64_t fz_rnd(void);
uint64_t fz_rnd_below(uint64_t n);

void fz_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
double fz_now(void);

/* Build the base image at path (FZ_IMG_BYTES; run it in a child that then
 * exits, so that its heartbeat names a dead writer). */
void fz_build(const char *path);
/* The base image (FZ_IMG_BYTES), read by the caller; fz_scan lists its
 * metadata blocks and log images for the mutations. */
extern uint8_t *fz_base;
extern size_t fz_nblks;
void fz_scan(void);
/* Blocks of kind k: their indices in *out (valid until the next call). */
size_t fz_blocks_of(enum fz_kind k, size_t **out);
/* One mutation of img (a copy of fz_base); sb_done: the superblock was
 * changed already (changed once at most).  Described in what. */
void fz_mutate(uint8_t *img, int *sb_done, char *what, size_t wlen);
/* Mount the image at path in-process (lock=nolock) and walk it: 0, or 1
 * if a use failed with anything but EIO (or must_mount and it did not
 * mount).  Says what it did on stdout; the uses that failed with EIO in
 * *eio (may be NULL). */
int fz_mount_walk(const char *path, const char *stage, int must_mount, uint64_t *eio);

#endif

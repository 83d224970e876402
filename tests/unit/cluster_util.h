/*
 * cluster_util.h - helpers of the in-process cluster tests (test_cluster*.c):
 * one image, one in-process lock server (lockd_start on a Unix socket in a
 * temp directory), nodes that are shoal_mounts of their own device handles,
 * and small checks on one node through the core API.
 */
#ifndef SHOAL_TEST_CLUSTER_UTIL_H
#define SHOAL_TEST_CLUSTER_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "dev.h"
#include "shoal/lockd.h"
#include "shoal/shoal.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)
#define TABLE "unit:cluster"
#define MAXN 3

extern const struct shoal_ctx root_ctx;

struct cluster {
	char c_dir[200];
	char c_sock[220];
	char c_lock[240]; /* "shoal:unix:..." */
	char *c_img;
	struct lockd *c_lockd;
	struct shoal_fs *c_fs[MAXN];
	int c_n;
	uint32_t c_rgcount; /* resource groups of the image */
};

int verbose(void);
void lockd_log(void *arg, int prio, const char *line);
int lockd_saw(const char *needle);
uint64_t now_ms(void);
void sleep_ms(unsigned ms);
void cl_image_bs(struct cluster *c, uint32_t bsize);
void cl_image(struct cluster *c);
void cl_lockd_start(struct cluster *c, uint32_t lease_ms);
int node_mount_dev(struct cluster *c, const char *name, struct shoal_dev *dev,
		   struct shoal_fs **out);
int node_mount(struct cluster *c, const char *name, struct shoal_fs **out);
struct shoal_fs *node_mount_on(struct cluster *c, const char *name, struct shoal_dev *dev);
void cl_start(struct cluster *c, int n, uint32_t lease_ms);
void cl_touch_root(struct cluster *c);
uint64_t cl_start_ab(struct cluster *c, uint32_t lease_ms, struct shoal_fs **a,
		   struct shoal_fs **b);
void cl_unmount_all(struct cluster *c);
void cl_lockd_stop(struct cluster *c);
void cl_fini(struct cluster *c);
void cl_fsck(struct cluster *c);
void fill_pattern(uint8_t *buf, size_t len, uint64_t off, unsigned seed);
int64_t lookup_ino(struct shoal_fs *fs, uint64_t parent, const char *name);
uint64_t must_lookup_(struct shoal_fs *fs, uint64_t parent, const char *name, int line);
uint64_t mkdir_(struct shoal_fs *fs, uint64_t parent, const char *name);
uint64_t mkfile(struct shoal_fs *fs, uint64_t parent, const char *name, size_t len,
		   unsigned seed);
int check_pattern(struct shoal_fs *fs, uint64_t ino, size_t len, unsigned seed, char *why,
		   size_t whylen);
void assert_pattern(struct shoal_fs *fs, uint64_t ino, size_t len, unsigned seed);
uint64_t free_blocks(struct shoal_fs *fs);
uint64_t free_blocks_wait(struct shoal_fs *fs, uint64_t lo, uint64_t hi);
int dir_has(struct shoal_fs *fs, uint64_t dir, const char *name, uint64_t *ino);
#define must_lookup(fs, parent, name) must_lookup_(fs, parent, name, __LINE__)

#endif

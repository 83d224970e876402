/*
 * nodeids.h - FUSE node ids of directories another node moved: their
 * incarnations (nodeids.c).
 */
#ifndef SHOAL_FUSE_NODEIDS_H
#define SHOAL_FUSE_NODEIDS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* Set in every incarnation's node id; inode numbers never have it. */
#define NID_BIT (1ull << 63)

/* Start handing out incarnations (cluster mounts only). */
void nid_enable(void);
/* The inode a node id (not FUSE_ROOT_ID) stands for; 0 if none. */
uint64_t nid_ino(uint64_t id);
/*
 * The node id to hand the kernel directory ino under, counted as one
 * kernel reference; with fresh, a new incarnation that is current from
 * now on (the kernel may have the directory under another parent).
 */
uint64_t nid_hand_out(uint64_t ino, int fresh);
/* The kernel gave count references to node id back (or never got them). */
void nid_forget(uint64_t id, uint64_t count);
/* Up to max incarnations of ino, for invalidating the kernel's caches. */
size_t nid_list(uint64_t ino, uint64_t *out, size_t max);
/* Drop every incarnation (the session has ended). */
void nid_forget_all(void);

#endif

/*
 * lk_plrange.h - the byte ranges of posix and flock locks (plrange.c): one
 * list of granted locks of one inode, the conflict rule and the
 * split/merge of an owner's ranges.  Shared by shoal-lockd's plock lock
 * space (plock.c) and the client's cache of the lock spaces its node
 * owns (plown.c, PROTOCOL.md "Posix and flock locks").
 */
#ifndef SHOAL_LK_PLRANGE_H
#define SHOAL_LK_PLRANGE_H

#include <stdint.h>

#include "lk_list.h"

#define PL_OFFSET_MAX INT64_MAX /* the kernel's OFFSET_MAX: "to end of file" */
enum { PL_RD = 0, PL_WR = 1, PL_UN = 2 }; /* = F_RDLCK, F_WRLCK, F_UNLCK on Linux */

struct ld_node;
struct pl_res;

struct pl_lock {
	struct ld_node *pk_node;   /* lockd: the holder's node; a client's cache: NULL */
	uint64_t pk_owner;
	uint64_t pk_start, pk_end; /* inclusive */
	uint32_t pk_pid;	   /* of the process that asked, in its node's pid namespace */
	uint32_t pk_seq;	   /* lockd, waiting: its SETW's seq */
	uint8_t pk_type;	   /* PL_RD or PL_WR */
	uint8_t pk_flock;	   /* 1: flock class */
	struct pl_res *pk_res;	   /* lockd only */
	struct ld_list pk_link;	   /* the granted list, or lockd's pr_waits */
	struct ld_list pk_wlink;   /* lockd: pt_waits, while waiting */
};

/* Same node, owner and class. */
int plr_same_owner(const struct pl_lock *a, const struct pl_lock *b);
/* b is in the way of a (or a of b): same class, other owner, overlapping,
 * one of them a write lock. */
int plr_conflict(const struct pl_lock *a, const struct pl_lock *b);
/* The first lock on locks in the way of rq, or NULL. */
struct pl_lock *plr_first_conflict(struct ld_list *locks, const struct pl_lock *rq);
/*
 * Make rq's owner hold [pk_start, pk_end] in type (PL_UN: hold nothing
 * there) on locks, splitting, trimming and merging its locks: afterwards
 * one owner's locks never overlap and two of one type are never adjacent.
 * New locks are copies of rq (rq itself stays the caller's).  0 or
 * -ENOMEM (nothing changed).
 */
int plr_apply(struct ld_list *locks, const struct pl_lock *rq, int type);
/* Does want's owner hold a lock of want's type over all of want's range? */
int plr_holds(struct ld_list *locks, const struct pl_lock *want);
/* Drop the locks of (nd, owner), both classes (all: every owner of nd);
 * 1 if any went. */
int plr_drop_owner(struct ld_list *locks, struct ld_node *nd, uint64_t owner, int all);
/* Free every lock on locks. */
void plr_free_all(struct ld_list *locks);
/* Debug builds: assert the invariants of plr_apply and that no two locks
 * conflict. */
void plr_check(struct ld_list *locks);

#endif

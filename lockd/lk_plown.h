/*
 * lk_plown.h - a lockd client's cache of the plock spaces its node owns
 * (plown.c; PROTOCOL.md "Posix and flock locks", "Ownership").
 */
#ifndef SHOAL_LK_PLOWN_H
#define SHOAL_LK_PLOWN_H

#include <stddef.h>
#include <stdint.h>

struct lk_plock;
struct plown;

/* How plown writes its give-back frames: the client's send_all (whole
 * frames, in order with every other frame of the connection). */
typedef int (*plown_send_fn)(void *arg, const uint8_t *buf, size_t len);

struct plown *plown_create(plown_send_fn send, void *arg);
void plown_destroy(struct plown *o);

/*
 * If this node owns pl->pl_ino's space, do op (LK_PL_GET, LK_PL_SET,
 * LK_PL_CLOSE) here: *local = 1 and the result as lkc_plock's.  Else
 * *local = 0: the caller sends the request to lockd (after this returns,
 * so after any give-back of the inode this call saw).
 */
int plown_op(struct plown *o, int op, struct lk_plock *pl, int *local);
/*
 * A blocking set on an owned space: granted here when nothing is in the
 * way (*local = 1, 0 returned); when something is, the space is given
 * back first and *local = 0: the caller sends the SETW to lockd, which
 * queues it (and sees deadlocks) with the node's locks in view.
 */
int plown_wait(struct plown *o, const struct lk_plock *pl, int *local);

/* The receiver thread: a PLOCK_REPLY said OWN for ino. */
void plown_grant(struct plown *o, uint64_t ino);
/* The receiver thread: lockd sent DROP for ino: give it back if owned. */
void plown_drop(struct plown *o, uint64_t ino);
/* The receiver thread, now and then: give back every space that has had
 * no lock for PLOWN_IDLE_NS. */
void plown_idle(struct plown *o);
/* The connection is gone: forget every owned space (its locks went with
 * the node's, as lockd's do when a node dies). */
void plown_clear(struct plown *o);

struct plown_stats {
	uint64_t owned;	   /* spaces owned now */
	uint64_t local;	   /* requests answered here */
	uint64_t grants;   /* spaces lockd gave this node */
	uint64_t gives;	   /* spaces given back */
};
void plown_get_stats(struct plown *o, struct plown_stats *st);

#define PLOWN_IDLE_NS 1000000000ull

#endif

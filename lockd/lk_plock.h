/*
 * lk_plock.h - shoal-lockd's plock lock space (plock.c) and the few
 * things of the server core (server.c) it uses.
 */
#ifndef SHOAL_LK_PLOCK_H
#define SHOAL_LK_PLOCK_H

#include <stddef.h>
#include <stdint.h>

struct lockd;
struct ld_node;
struct pl_table;

/* --- plock.c ----------------------------------------------------------- */
struct pl_table *plock_create(void);
/* Every lock must be gone (plock_node_free of every node). */
void plock_destroy(struct pl_table *pt);
/* One PLOCK message (LKP_PLOCK_LEN bytes at p) from live node nd. */
void plock_msg(struct lockd *d, struct pl_table *pt, struct ld_node *nd, uint32_t seq,
	       const uint8_t *p);
/* nd's connection is gone: its waiting requests go (unanswered); its
 * granted locks stay. */
void plock_node_disconnected(struct lockd *d, struct pl_table *pt, struct ld_node *nd);
/* nd leaves or its journal was recovered: every lock and request of it goes. */
void plock_node_free(struct lockd *d, struct pl_table *pt, struct ld_node *nd);
/* Inodes with plock state now. */
size_t plock_count(const struct pl_table *pt);

/* --- server.c, for plock.c ---------------------------------------------- */
/* A frame to nd (the caller fills the payload); NULL when nd is not live
 * and connected, or its connection just failed. */
uint8_t *ld_node_frame(struct lockd *d, struct ld_node *nd, uint16_t type, uint32_t seq,
		       size_t plen);
const char *ld_node_name(const struct ld_node *nd);
/* nd's JOIN said PLOWN: it may be given the ownership of plock spaces. */
int ld_node_plown(const struct ld_node *nd);
void ld_log(struct lockd *d, int prio, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif

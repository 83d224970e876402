/*
 * lk_list.h - the doubly linked lists of shoal-lockd (server.c, plock.c):
 * a list head is a struct ld_list pointing at itself when empty.
 */
#ifndef SHOAL_LK_LIST_H
#define SHOAL_LK_LIST_H

#include <stddef.h>

struct ld_list {
	struct ld_list *next, *prev;
};

static inline void list_init(struct ld_list *l)
{
	l->next = l->prev = l;
}

static inline int list_empty(const struct ld_list *l)
{
	return l->next == l;
}

static inline void list_add_tail(struct ld_list *n, struct ld_list *h)
{
	n->prev = h->prev;
	n->next = h;
	h->prev->next = n;
	h->prev = n;
}

static inline void list_del(struct ld_list *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
	n->next = n->prev = n;
}

#define container_of(p, type, member) ((type *)((char *)(p) - offsetof(type, member)))
#define list_for_each_safe(pos, tmp, head) \
	for (pos = (head)->next, tmp = pos->next; pos != (head); pos = tmp, tmp = pos->next)

#endif

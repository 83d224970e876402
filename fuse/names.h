/*
 * names.h - the names of each directory the kernel may have cached, for
 * invalidation when another node takes the directory (names.c).
 */
#ifndef SHOAL_FUSE_NAMES_H
#define SHOAL_FUSE_NAMES_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* Start keeping names (cluster mounts only). */
void names_enable(void);
/* The kernel got an entry (or a negative one) for name in dir. */
void names_note(uint64_t dir, const char *name);
/* Every name noted for dir since the last take; *out and each name are
 * malloc'd, the caller frees them. */
size_t names_take(uint64_t dir, char ***out);

/* Drop every set (the session has ended). */
void names_forget_all(void);

#endif

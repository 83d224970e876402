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
/* Whether names are kept (a cluster mount). */
int names_enabled(void);
/* From now on names_note keeps nothing: the kernel can be told to drop
 * every name at once (main.c epoch_write); locations are still kept. */
void names_sets_off(void);
/* The kernel got an entry (or a negative one) for name in dir. */
void names_note(uint64_t dir, const char *name);
/* Every name noted for dir since the last take; *out and each name are
 * malloc'd, the caller frees them. */
size_t names_take(uint64_t dir, char ***out);

/*
 * The kernel is about to get directory ino (an inode number) as (parent,
 * name), parent a FUSE node id.  Returns 1 if the kernel may have it under
 * another parent (its dentry there could not be moved without ESTALE: the
 * caller hands out a new node id, nodeids.c), else 0; records the place.
 */
int names_dir_at(uint64_t ino, uint64_t parent, const char *name);
/* A rename of this node succeeded: the kernel moved (or exchanged) the
 * dentries, and a replaced one is gone. */
void names_dir_moved(uint64_t parent, const char *name, uint64_t newparent,
		     const char *newname, int exchange);
/* The directory at (parent, name) was removed through this node. */
void names_dir_gone(uint64_t parent, const char *name);

/* Drop every set and location (the session has ended). */
void names_forget_all(void);

#endif

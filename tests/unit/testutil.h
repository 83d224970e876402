/*
 * testutil.h - helpers shared by the cmocka unit tests (tests/unit/test_*.c).
 * A helper that cannot do its job fails the running test through cmocka, so
 * its callers need no error paths.
 */
#ifndef SHOAL_TESTUTIL_H
#define SHOAL_TESTUTIL_H
#include <stdint.h>

struct shoal_dev;

/* Create a sparse file of size bytes under $TMPDIR (or /tmp): its malloc'd path. */
char *tu_tmpimage(uint64_t size);

/*
 * Format the image at path with shoal_format() (journals of the default
 * 32 MiB; journals 0 = the default 2, otherwise default options) and return it
 * opened read-write with dev_open().  The image must be large enough:
 * journals * 32 MiB plus a few MiB.
 */
struct shoal_dev *tu_format(const char *path, uint32_t journals);

/* Remove the image and free its path (NULL is ignored). */
void tu_rmimage(char *path);

#endif
